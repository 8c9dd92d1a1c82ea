//! The admin listener of SPEC §1, served on its own port, never through the
//! gateway:
//!
//! - `GET /metrics`: Prometheus text of the process's recorder;
//! - `GET /health/live`: 200 while the process serves at all;
//! - `GET /health/ready`: 200 only when every registered readiness check
//!   passes (its database answers and migrations ran), else 503 naming the
//!   failing checks;
//! - `GET /admin/resilience`: JSON, one member per registered reporter
//!   (circuit breakers, retry budgets, caches).

use std::{collections::BTreeMap, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use axum::{Json, Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Check = Arc<dyn Fn() -> CheckFuture + Send + Sync>;
type Reporter = Arc<dyn Fn() -> Value + Send + Sync>;

/// How long one readiness check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the admin listener serves. Cheap to clone.
#[derive(Clone)]
pub struct Admin {
    prometheus: PrometheusHandle,
    checks: Arc<std::sync::RwLock<Vec<(String, Check)>>>,
    reporters: Arc<std::sync::RwLock<Vec<(String, Reporter)>>>,
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Default for Admin {
    fn default() -> Self {
        Self::new(crate::telemetry::prometheus())
    }
}

impl Admin {
    /// An admin surface rendering `prometheus`, with no checks or reporters.
    pub fn new(prometheus: PrometheusHandle) -> Self {
        Self {
            prometheus,
            checks: Arc::default(),
            reporters: Arc::default(),
        }
    }

    /// Adds a readiness check: ready only while every check returns `Ok`
    /// within [`CHECK_TIMEOUT`].
    pub fn readiness<F, Fut>(&self, name: impl Into<String>, check: F) -> &Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let check: Check = Arc::new(move || Box::pin(check()));
        write(&self.checks).push((name.into(), check));
        self
    }

    /// Adds a member to `/admin/resilience`: `report` is called on every
    /// request and returns that member's live state.
    pub fn report<F>(&self, name: impl Into<String>, report: F) -> &Self
    where
        F: Fn() -> Value + Send + Sync + 'static,
    {
        write(&self.reporters).push((name.into(), Arc::new(report)));
        self
    }

    /// Runs every readiness check; `Ok` when all pass, else the failures by
    /// name.
    pub async fn ready(&self) -> Result<(), BTreeMap<String, String>> {
        let checks: Vec<(String, Check)> = read(&self.checks).clone();
        let results =
            futures::future::join_all(checks.into_iter().map(|(name, check)| async move {
                let outcome = match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
                };
                (name, outcome)
            }))
            .await;
        let failures: BTreeMap<String, String> = results
            .into_iter()
            .filter_map(|(name, r)| r.err().map(|e| (name, e)))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures)
        }
    }

    /// The admin router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/health/live", get(live))
            .route("/health/ready", get(ready))
            .route("/admin/resilience", get(resilience))
            .fallback(|| async { crate::problem::Problem::no_route() })
            .with_state(self.clone())
    }
}

fn read<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        admin.prometheus.render(),
    )
}

async fn live() -> impl IntoResponse {
    Json(json!({"status": "live"}))
}

async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    match admin.ready().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(failures) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready", "failures": failures})),
        ),
    }
}

async fn resilience(State(admin): State<Admin>) -> impl IntoResponse {
    let reporters: Vec<(String, Reporter)> = read(&admin.reporters).clone();
    let body: serde_json::Map<String, Value> =
        reporters.into_iter().map(|(name, r)| (name, r())).collect();
    Json(Value::Object(body))
}
