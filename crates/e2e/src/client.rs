//! [`Client`]: what a customer does, with every answer kept whole
//! ([`Answer`]) so tests can check status, headers, body and latency.
//! A client is usually signed in ([`Client::signed_in`]): every request
//! carries `Authorization: Bearer <token>` of its customer, as a browser
//! after `POST /api/session` would.
//! (`/metrics` pages are read with `shopeasy_testkit::Metrics`, polls are
//! `shopeasy_testkit::eventually`, as in every crate's tests.)

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// How long an idle connection stays in a client's pool: less than the
/// cluster gateway's activity timeout (1 s, [`crate::cluster`]), which
/// hyper also applies to a keep-alive connection waiting for its next
/// request. A connection kept longer (reqwest's default is 90 s) may be
/// reused just as the gateway closes it, and the request sent on it is
/// reset (`ConnectionReset`, no answer) — seen once in the suite.
pub const POOL_IDLE: Duration = Duration::from_millis(500);

/// One answer to one request (or the transport error instead).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status; `None` when no answer came (connection error, client
    /// timeout).
    pub status: Option<u16>,
    /// Response headers, lower-case names.
    pub headers: Vec<(String, String)>,
    /// The body's bytes.
    pub body: Vec<u8>,
    /// Wall time from sending to the last body byte (or the error).
    pub elapsed: Duration,
    /// The transport error, when there was no answer.
    pub error: Option<String>,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// True for `Idempotent-Replayed: true`.
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// True for an `application/problem+json` body with `type`, `title`,
    /// `status` (equal to the HTTP status) and `detail`.
    pub fn is_problem(&self) -> bool {
        let json = self.json();
        self.header("content-type")
            .is_some_and(|c| c.starts_with("application/problem+json"))
            && json.get("type").is_some()
            && json.get("title").is_some()
            && json.get("status").and_then(Value::as_u64) == self.status.map(u64::from)
    }

    /// One line for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "{:?} in {:?} {} {}",
            self.status,
            self.elapsed,
            self.error.as_deref().unwrap_or(""),
            String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
        )
    }
}

/// An HTTP client of the gateway (or a service) that never panics and
/// gives up after its own timeout; signed in, it sends its customer's
/// bearer token with every request.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl std::fmt::Debug for Client {
    // The token is a credential: never in a log line or a panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("signed_in", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of `base` (`http://host:port`) whose requests give up after
    /// `timeout`.
    ///
    /// # Panics
    /// When the TLS-free reqwest client cannot be built (never in practice).
    pub fn new(base: impl Into<String>, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .unwrap_or_else(|e| panic!("reqwest client: {e}"));
        Self {
            http,
            base: base.into(),
            token: None,
        }
    }

    /// A client of `base` as [`Client::new`], signed in as `customer` with
    /// a token of the suite's signing key ([`crate::identity::token`]).
    pub fn signed_in(base: impl Into<String>, timeout: Duration, customer: &str) -> Self {
        Self::new(base, timeout).with_token(crate::identity::token(customer))
    }

    /// The same client sending `token` (a JWT) as its bearer token.
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The same client without a token (an anonymous caller).
    #[must_use]
    pub fn anonymous(mut self) -> Self {
        self.token = None;
        self
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.get_with(path, &[]).await
    }

    /// `GET path` with `headers` added (an `Authorization` among them
    /// replaces the client's own token).
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let request = self.http.get(format!("{}{path}", self.base));
        self.send(self.headers(request, headers)).await
    }

    /// `POST path` without a body (`/api/orders/{id}/cancel`).
    pub async fn post(&self, path: &str) -> Answer {
        let request = self.http.post(format!("{}{path}", self.base));
        self.send(self.headers(request, &[])).await
    }

    /// `POST path` with a JSON body and an optional `Idempotency-Key`.
    pub async fn post_json(&self, path: &str, body: &Value, key: Option<&str>) -> Answer {
        self.post_json_with(path, body, key, &[]).await
    }

    /// `POST path` as [`Client::post_json`] does, with `headers` added
    /// (a caller's `shopeasy-deadline-ms`, for example; an `Authorization`
    /// among them replaces the client's own token).
    pub async fn post_json_with(
        &self,
        path: &str,
        body: &Value,
        key: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        self.send(self.headers(request, headers)).await
    }

    /// Adds `headers`, and the client's bearer token unless `headers`
    /// carry an `Authorization` of their own (a test sending a bad token).
    fn headers(
        &self,
        mut request: reqwest::RequestBuilder,
        headers: &[(&str, &str)],
    ) -> reqwest::RequestBuilder {
        let own = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("authorization"));
        if let Some(token) = self.token.as_deref().filter(|_| !own) {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let started = Instant::now();
        let failed = |e: reqwest::Error, started: Instant| Answer {
            status: None,
            headers: Vec::new(),
            body: Vec::new(),
            elapsed: started.elapsed(),
            error: Some(format!("{e:?}")),
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return failed(e, started),
        };
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        match response.bytes().await {
            Ok(body) => Answer {
                status: Some(status),
                headers,
                body: body.to_vec(),
                elapsed: started.elapsed(),
                error: None,
            },
            Err(e) => Answer {
                status: Some(status),
                headers,
                body: Vec::new(),
                elapsed: started.elapsed(),
                error: Some(format!("body: {e:?}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use tokio::io::AsyncWriteExt;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::listen::{accept_until, read_head};

    /// An HTTP/1.1 server that answers every request 200 on a kept-alive
    /// connection and counts the connections it accepted.
    async fn counting_server() -> (String, Arc<AtomicUsize>, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let stop = CancellationToken::new();
        accept_until(listener, stop.clone(), move |mut socket| {
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                while read_head(&mut socket).await {
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if socket.write_all(ok).await.is_err() {
                        return;
                    }
                }
            }
        });
        (base, accepted, stop)
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_pool_bound_is_not_reused() {
        let (base, accepted, stop) = counting_server().await;
        let _stop = stop.drop_guard();
        let client = Client::new(base, Duration::from_secs(5));
        assert_eq!(client.get("/").await.status, Some(200));
        assert_eq!(client.get("/").await.status, Some(200));
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "reused while fresh");
        // Idle past the bound (the scenario itself, not a wait for a
        // result): the pool drops it, the next request connects anew,
        // where reqwest's default pool (90 s) would have reused it.
        tokio::time::sleep(POOL_IDLE + Duration::from_millis(200)).await;
        assert_eq!(client.get("/").await.status, Some(200));
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "a new connection");
    }
}
