//! [`Client`]: what a customer does, with every answer kept whole
//! ([`Answer`]) so tests can check status, headers, body and latency.
//! (`/metrics` pages are read with `shopeasy_testkit::Metrics`, polls are
//! `shopeasy_testkit::eventually`, as in every crate's tests.)

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

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
/// gives up after its own timeout.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
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
            .build()
            .unwrap_or_else(|e| panic!("reqwest client: {e}"));
        Self {
            http,
            base: base.into(),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    /// `POST path` with a JSON body and an optional `Idempotency-Key`.
    pub async fn post_json(&self, path: &str, body: &Value, key: Option<&str>) -> Answer {
        self.post_json_with(path, body, key, &[]).await
    }

    /// `POST path` as [`Client::post_json`] does, with `headers` added
    /// (a caller's `shopeasy-deadline-ms`, for example).
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
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
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
