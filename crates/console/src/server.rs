//! The console's HTTP surface and its lifetime.
//!
//! | route | what |
//! |---|---|
//! | `GET /`, `/console.js`, `/console.css` | the page ([`crate::assets`]) |
//! | `GET /events` | server-sent snapshots ([`crate::sse`]) |
//! | `GET /api/snapshot` | the latest snapshot as JSON |
//! | `POST`/`DELETE /api/faults/...` | fault controls ([`crate::faults`]) |
//! | `POST /api/load/start`, `/api/load/stop` | the load generator |
//! | `GET`/`POST /api/scenes...` | the Scenarios panel ([`crate::scenes`]) |
//! | `GET`/`POST`/`DELETE /api/presentation` | presentation mode ([`crate::presentation`]) |
//! | `POST /api/orders/buy` | buy one unit as a new demo customer |
//!
//! Every route is behind [`crate::guard`]: loopback `Host`; under `/api/`
//! same origin; and every change needs the admin token.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use shopeasy_runtime::problem::Problem;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    error::ConsoleError,
    guard::Guard,
    load::{LoadControl, LoadRequest},
    orders::{BuyError, Orders},
    poll::{Feed, Poller},
    settings::{ConsoleSettings, SettingsError},
    traces::TraceSource,
};

/// How long open event streams and in-flight changes get at shutdown.
const DRAIN: Duration = Duration::from_secs(2);

/// What every handler can reach. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) feed: Feed,
    pub(crate) http: reqwest::Client,
    pub(crate) faults_url: Arc<str>,
    pub(crate) gateway_url: Option<Arc<str>>,
    pub(crate) load: Option<Arc<dyn LoadControl>>,
    pub(crate) orders: Orders,
    pub(crate) scenes: Option<Arc<dyn crate::scenes::SceneControl>>,
    pub(crate) presentation: crate::presentation::Presentation,
    /// The one turn a scene's and presentation mode's starts take.
    pub(crate) stage: crate::stage::Stage,
}

/// The router over `state`, guarded by `guard`.
pub fn router(state: AppState, guard: Guard) -> Router {
    Router::new()
        .route("/", get(crate::assets::index))
        .route("/console.js", get(crate::assets::script))
        .route("/console.css", get(crate::assets::style))
        .route("/events", get(crate::sse::events))
        .route("/api/snapshot", get(snapshot))
        // Each control's own method is checked by `faults::control`, so
        // that a wrong one is named in the refusal's detail.
        .route(
            "/api/faults/{*path}",
            post(crate::faults::forward).delete(crate::faults::forward),
        )
        .route("/api/load/start", post(load_start))
        .route("/api/load/stop", post(load_stop))
        .route("/api/orders/buy", post(buy))
        .merge(crate::scenes::routes())
        .merge(crate::presentation::routes())
        .fallback(|| async { Problem::no_route() })
        // After every route and merge: it is set on the routes present.
        // Without it a wrong method is axum's empty 405, which the page
        // shows as "Refused (405): " with nothing to say why.
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::guard::check,
        ))
        .with_state(state)
}

/// A console bound to its listener, not yet serving.
#[derive(Debug)]
pub struct Console {
    listener: TcpListener,
    state: AppState,
    guard: Guard,
    poller: Poller,
}

/// Why the console could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings were refused.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr} (console): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the console's HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl Console {
    /// Validates `settings` and binds the listener; `load` drives the load
    /// panel (`None`: the panel says it is not available).
    ///
    /// # Errors
    /// Refused settings (a non-loopback address without `allow_remote`, …)
    /// or an address in use.
    pub async fn bind(
        settings: ConsoleSettings,
        load: Option<Arc<dyn LoadControl>>,
    ) -> Result<Self, StartError> {
        settings.validate()?;
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(8)
            .build()?;
        let (publish, feed) = watch::channel(None);
        let orders = Orders::default();
        let presentation = crate::presentation::Presentation::default();
        let state = AppState {
            feed,
            http: http.clone(),
            faults_url: settings.faults_url.as_str().into(),
            gateway_url: settings.gateway_url.as_deref().map(Into::into),
            load: load.clone(),
            orders: orders.clone(),
            scenes: None,
            presentation: presentation.clone(),
            stage: crate::stage::Stage::default(),
        };
        let guard = Guard::new(settings.admin_token.clone(), settings.any_host());
        let poller = Poller {
            settings,
            http,
            load,
            traces: None,
            orders,
            scenes: None,
            presentation,
            publish,
        };
        Ok(Self {
            listener,
            state,
            guard,
            poller,
        })
    }

    /// Runs the lesson's scenes from the Scenarios panel (without: the
    /// panel says it is not available).
    #[must_use]
    pub fn with_scenes(mut self, scenes: Arc<dyn crate::scenes::SceneControl>) -> Self {
        self.state.scenes = Some(scenes.clone());
        self.poller.scenes = Some(scenes);
        self
    }

    /// Draws "a recent order's path" from `traces` (without one the panel
    /// says to look in Jaeger).
    #[must_use]
    pub fn with_traces(mut self, traces: Arc<dyn TraceSource>) -> Self {
        self.poller.traces = Some(traces);
        self
    }

    /// Where it listens.
    ///
    /// # Errors
    /// When the socket cannot say (not expected once bound).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves the page and runs the poll loop until `shutdown`.
    ///
    /// # Errors
    /// When accepting connections fails.
    pub async fn serve(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let poll = tokio::spawn(self.poller.run(shutdown.clone()));
        let presentation = self.state.presentation.clone();
        let router = router(self.state, self.guard);
        let served =
            shopeasy_runtime::lifecycle::serve(self.listener, router, shutdown, DRAIN).await;
        let _ = poll.await;
        // A talk's last fault must not outlive the console.
        presentation.stop().await;
        served
    }

    /// [`Console::serve`] on its own task.
    pub fn spawn(self, shutdown: CancellationToken) -> JoinHandle<std::io::Result<()>> {
        tokio::spawn(self.serve(shutdown))
    }
}

async fn snapshot(State(state): State<AppState>) -> Response {
    match state.feed.borrow().clone() {
        Some(json) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            json.to_string(),
        )
            .into_response(),
        None => Problem::unavailable("the first snapshot is not ready yet", 1).into_response(),
    }
}

fn load_of(state: &AppState) -> Result<&Arc<dyn LoadControl>, ConsoleError> {
    state.load.as_ref().ok_or_else(|| {
        ConsoleError::NotAvailable(
            "this console has no load generator (run `shopeasy load` against the gateway)".into(),
        )
    })
}

async fn load_start(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<StatusCode, ConsoleError> {
    let load = load_of(&state)?;
    let request: LoadRequest = serde_json::from_slice(&body)
        .map_err(|e| ConsoleError::BadRequest(format!("not a load request: {e}")))?;
    request.validate().map_err(ConsoleError::BadRequest)?;
    load.start(request).map_err(ConsoleError::BadRequest)?;
    Ok(StatusCode::ACCEPTED)
}

async fn load_stop(State(state): State<AppState>) -> Result<StatusCode, ConsoleError> {
    load_of(&state)?.stop();
    Ok(StatusCode::NO_CONTENT)
}

async fn buy(State(state): State<AppState>) -> Result<Response, ConsoleError> {
    let gateway = state.gateway_url.as_deref().ok_or_else(|| {
        ConsoleError::NotAvailable("this console was started without a gateway URL".into())
    })?;
    let view = state
        .orders
        .buy(&state.http, gateway)
        .await
        .map_err(|e| match e {
            // The gateway's own problem detail is public: shown as it is.
            BuyError::Refused(detail) => ConsoleError::Refused(detail),
            e => ConsoleError::upstream("the gateway", e),
        })?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}
