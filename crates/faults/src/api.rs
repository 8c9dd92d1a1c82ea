//! The Toxiproxy 2.x HTTP API over a [`Proxies`] set: same paths, JSON and
//! status codes, so Toxiproxy's clients and `curl` recipes work unchanged.
//!
//! | route | answer |
//! |---|---|
//! | `GET /proxies` | 200, `{name: proxy}` |
//! | `POST /proxies` | 201 proxy; 409 duplicate; 400 bad body |
//! | `POST /populate` | 201 `{"proxies": [...]}` |
//! | `GET /proxies/{proxy}` | 200 proxy; 404 |
//! | `POST`/`PATCH /proxies/{proxy}` | 200 proxy (update) |
//! | `DELETE /proxies/{proxy}` | 204 |
//! | `GET /proxies/{proxy}/toxics` | 200 `[toxic]` |
//! | `POST /proxies/{proxy}/toxics` | 200 toxic (as Toxiproxy: its clients expect 200); 409 duplicate |
//! | `GET`/`POST`/`PATCH`/`DELETE /proxies/{proxy}/toxics/{toxic}` | 200 / 200 / 200 / 204 |
//! | `POST /reset` | 204 |
//! | `GET /version` | 200 `{"version": "..."}` |
//! | `GET /proxies/{proxy}/windows[?since=ms]` | 200 `[window]` (ours, not Toxiproxy's); 404 |
//! | `GET /windows[?since=ms]` | 200 `[window]`, every proxy's (ours) |
//!
//! A window ([`crate::ToxicWindow`]) is one toxic from added to removed
//! (or updated), or one disabled period: `{proxy, id, toxic, type, stream,
//! toxicity, attributes, started_unix_ms, ended_unix_ms, ...}`, with
//! `ended_unix_ms` `null` while open. `since` keeps the windows open at any
//! moment at or after it (Unix ms). The header [`WINDOWS_DROPPED`] says
//! how many old windows the bounded history dropped.
//!
//! Unlike Toxiproxy, the API refuses what a web page could send it
//! (`crate::guard`): a `Host` that is not loopback or a foreign `Origin`
//! (403), a body that is not `Content-Type: application/json` (415; with
//! `curl`, add `-H 'content-type: application/json'`), and a proxy listening
//! anywhere but loopback (400), and a body over [`BODY_LIMIT`] (413). Errors
//! are problem+json that also carry Toxiproxy's `error` and `status`
//! members.

use std::{collections::BTreeMap, io, time::Duration};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{
        DefaultBodyLimit, FromRef, FromRequest, FromRequestParts, Query, Request, State,
        rejection::QueryRejection,
    },
    http::{HeaderName, HeaderValue, StatusCode, request::Parts},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Serialize, de::DeserializeOwned};
use shopeasy_runtime::problem::Problem;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    Error, Proxies, ProxyConfig, ProxyUpdate, ProxyView, Toxic, WindowHistory, guard::Guard,
};

/// The Toxiproxy version whose API this one follows (reported by
/// `GET /version`, with our own version as build metadata).
pub const TOXIPROXY_API_VERSION: &str = "2.12.0";

/// The API's usual port (Toxiproxy's default).
pub const DEFAULT_PORT: u16 = 8474;

/// The largest request body the API reads, in bytes: a `/populate` of
/// hundreds of proxies fits; anything bigger is a mistake (or a page
/// probing the port) and is refused with a 413 problem before it is
/// buffered, instead of axum's 2 MB default.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Response header of the window routes: how many closed windows the
/// bounded history dropped (summed over proxies for `GET /windows`), so a
/// test can tell that its run's windows are all there.
pub const WINDOWS_DROPPED: HeaderName = HeaderName::from_static("x-windows-dropped");

/// What every handler can reach: the proxies, and the guard that decides
/// which listen addresses they may be given.
#[derive(Debug, Clone)]
struct ApiState {
    proxies: Proxies,
    guard: Guard,
}

impl FromRef<ApiState> for Proxies {
    fn from_ref(state: &ApiState) -> Self {
        state.proxies.clone()
    }
}

impl FromRef<ApiState> for Guard {
    fn from_ref(state: &ApiState) -> Self {
        state.guard.clone()
    }
}

/// The API's router over `proxies`, accepting loopback only
/// ([`Guard::default`]).
pub fn router(proxies: Proxies) -> Router {
    router_with(proxies, Guard::default())
}

/// The API's router over `proxies`, with `guard`'s hosts and listen
/// addresses accepted beyond loopback.
pub fn router_with(proxies: Proxies, guard: Guard) -> Router {
    let state = ApiState {
        proxies,
        guard: guard.clone(),
    };
    Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", get(list_proxies).post(create_proxy))
        .route(
            "/proxies/{proxy}",
            get(show_proxy)
                .post(update_proxy)
                .patch(update_proxy)
                .delete(delete_proxy),
        )
        .route(
            "/proxies/{proxy}/toxics",
            get(list_toxics).post(create_toxic),
        )
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(show_toxic)
                .post(update_toxic)
                .patch(update_toxic)
                .delete(delete_toxic),
        )
        .route("/proxies/{proxy}/windows", get(proxy_windows))
        .route("/windows", get(all_windows))
        .fallback(|| async { Problem::no_route() })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::guard::check,
        ))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` is cancelled, accepting
/// loopback only.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    proxies: Proxies,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, proxies, Guard::default(), shutdown).await
}

/// [`serve`] with `guard`'s extra hosts and listen addresses.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve_with(
    listener: TcpListener,
    proxies: Proxies,
    guard: Guard,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let router = router_with(proxies, guard);
    shopeasy_runtime::lifecycle::serve(listener, router, shutdown, Duration::from_secs(5)).await
}

type ApiResult<T> = Result<T, Error>;

async fn version() -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "version": format!("{TOXIPROXY_API_VERSION}+shopeasy-faults.{}", env!("CARGO_PKG_VERSION")),
    }))
}

async fn reset(State(proxies): State<Proxies>) -> StatusCode {
    proxies.reset().await;
    StatusCode::NO_CONTENT
}

async fn populate(
    State(proxies): State<Proxies>,
    State(guard): State<Guard>,
    Body(body): Body,
) -> ApiResult<Response> {
    #[derive(Serialize)]
    struct Populated {
        proxies: Vec<ProxyView>,
    }
    let configs: Vec<ProxyConfig> = parse(&body)?;
    for config in &configs {
        guard.check_listen(&config.listen)?;
    }
    let created = proxies.populate(configs).await?;
    let proxies = created.iter().map(crate::FaultProxy::view).collect();
    Ok((StatusCode::CREATED, Json(Populated { proxies })).into_response())
}

async fn list_proxies(State(proxies): State<Proxies>) -> Json<BTreeMap<String, ProxyView>> {
    let all = proxies.list().await;
    Json(
        all.iter()
            .map(|p| (p.name().to_owned(), p.view()))
            .collect(),
    )
}

async fn create_proxy(
    State(proxies): State<Proxies>,
    State(guard): State<Guard>,
    Body(body): Body,
) -> ApiResult<Response> {
    let config: ProxyConfig = parse(&body)?;
    guard.check_listen(&config.listen)?;
    let proxy = proxies.create(config).await?;
    Ok((StatusCode::CREATED, Json(proxy.view())).into_response())
}

async fn show_proxy(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
) -> ApiResult<Json<ProxyView>> {
    Ok(Json(proxies.get(&name).await?.view()))
}

async fn update_proxy(
    State(proxies): State<Proxies>,
    State(guard): State<Guard>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<ProxyView>> {
    proxies.get(&name).await?;
    let update: ProxyUpdate = parse(&body)?;
    if let Some(listen) = &update.listen {
        guard.check_listen(listen)?;
    }
    Ok(Json(proxies.update(&name, update).await?.view()))
}

async fn delete_proxy(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    proxies.remove(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_toxics(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<Toxic>>> {
    Ok(Json(proxies.get(&name).await?.toxics()))
}

async fn create_toxic(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Toxic>> {
    let proxy = proxies.get(&name).await?;
    let toxic = Toxic::from_json(&body)?;
    proxy.add_toxic(toxic.clone())?;
    Ok(Json(toxic))
}

async fn show_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
) -> ApiResult<Json<Toxic>> {
    let proxy = proxies.get(&name).await?;
    proxy.toxic(&toxic).map(Json).ok_or(Error::ToxicNotFound)
}

async fn update_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
    Body(body): Body,
) -> ApiResult<Json<Toxic>> {
    let proxy = proxies.get(&name).await?;
    let current = proxy.toxic(&toxic).ok_or(Error::ToxicNotFound)?;
    let updated = current.updated_from_json(&body)?;
    proxy.update_toxic(updated.clone())?;
    Ok(Json(updated))
}

async fn delete_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    proxies.get(&name).await?.remove_toxic(&toxic)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn proxy_windows(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
    query: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> ApiResult<Response> {
    let since = since(query)?;
    Ok(windows_response(proxies.windows(&name, since)?))
}

async fn all_windows(
    State(proxies): State<Proxies>,
    query: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> ApiResult<Response> {
    let since = since(query)?;
    Ok(windows_response(proxies.all_windows(since)))
}

/// The optional `since` (Unix ms) of a window route; any other parameter
/// is refused rather than ignored, so a typo does not widen the answer.
fn since(query: Result<Query<BTreeMap<String, String>>, QueryRejection>) -> ApiResult<Option<u64>> {
    let Query(params) = query.map_err(|e| Error::BadQuery(e.body_text()))?;
    if let Some(unknown) = params.keys().find(|k| k.as_str() != "since") {
        return Err(Error::BadQuery(format!(
            "unknown parameter {unknown:?}; the only one is since=<unix ms>"
        )));
    }
    params
        .get("since")
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                Error::BadQuery(format!(
                    "since={v:?} is not a time in Unix milliseconds (a whole number)"
                ))
            })
        })
        .transpose()
}

fn windows_response(history: WindowHistory) -> Response {
    let mut response = Json(history.windows).into_response();
    response
        .headers_mut()
        .insert(WINDOWS_DROPPED, HeaderValue::from(history.dropped));
    response
}

/// The path's segments (a proxy's name, a toxic's): `axum`'s `Path` whose
/// rejection is this API's [`Error`], so a segment that does not decode is
/// a 400 in Toxiproxy's dialect, not axum's plain text.
struct Path<T>(T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let axum::extract::Path(value) = axum::extract::Path::from_request_parts(parts, state)
            .await
            .map_err(|e| Error::BadPath(e.body_text()))?;
        Ok(Self(value))
    }
}

/// The request body: `axum`'s `Bytes` whose rejection is this API's
/// [`Error`], so a body over [`BODY_LIMIT`] is a 413 and one that cannot be
/// read a 400, in the API's dialect rather than axum's plain text.
struct Body(Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<Self, Error> {
        match Bytes::from_request(request, state).await {
            Ok(body) => Ok(Self(body)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(Error::BodyTooLarge(BODY_LIMIT))
            }
            Err(e) => Err(Error::BadBody(e.body_text())),
        }
    }
}

/// Parses a JSON body (its content type checked by `crate::guard`).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::BadBody(e.to_string()))
}

/// The one mapping of [`Error`] onto the wire: Toxiproxy's status codes, as
/// problem+json that also carries Toxiproxy's `error` member.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, slug) = match &self {
            Self::ProxyNotFound => (StatusCode::NOT_FOUND, "proxy-not-found"),
            Self::ToxicNotFound => (StatusCode::NOT_FOUND, "toxic-not-found"),
            Self::ProxyExists => (StatusCode::CONFLICT, "proxy-exists"),
            Self::ToxicExists => (StatusCode::CONFLICT, "toxic-exists"),
            Self::Listen { .. } => (StatusCode::CONFLICT, "cannot-listen"),
            Self::InvalidStream
            | Self::InvalidToxicType(_)
            | Self::MissingField(_)
            | Self::BadBody(_)
            | Self::BadPath(_)
            | Self::BadQuery(_) => (StatusCode::BAD_REQUEST, "bad-request"),
            Self::ListenNotAllowed(_) => (StatusCode::BAD_REQUEST, "listen-not-allowed"),
            Self::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large"),
        };
        let message = self.to_string();
        if status.is_server_error() {
            tracing::error!(error = %message, "fault proxy API error");
        }
        let title = status.canonical_reason().unwrap_or("Error");
        Problem::new(status, slug, title, message.clone())
            .extension("error", message)
            .into_response()
    }
}
