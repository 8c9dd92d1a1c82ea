//! The console's one loop: about twice a second it reads every admin
//! listener's `/admin/resilience` and `/metrics` and the fault API's
//! `/proxies` (and, with `show_stores`, each `/health/ready`) all at once,
//! each with a short timeout, turns them into a
//! [`Snapshot`](crate::snapshot::Snapshot) and publishes it, serialized
//! once, to every page listening.
//!
//! A round waits at most [`READ_TIMEOUT`] for its reads, however slow a
//! listener is: every read (the followed orders' included) is bounded by
//! it and they all run at once, so a read that takes longer counts as down
//! for that round and a hung service shows as down instead of freezing the
//! page. [`READ_TIMEOUT`] is longer than the default interval (a loaded
//! service may take longer than half a second to answer and still be up),
//! so while a listener hangs a snapshot comes every [`READ_TIMEOUT`]
//! rather than every interval; the next tick is then delayed, not bunched.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{
    load::LoadControl,
    observe::{Observer, Readings, ServiceReading},
    orders::Orders,
    prom::Page,
    settings::{ConsoleSettings, ServiceTarget},
    stores::{self, Readiness},
    traces::{PathPanel, TraceSource},
};

/// The longest one read may take.
pub const READ_TIMEOUT: Duration = Duration::from_millis(800);

/// The latest snapshot, as the JSON every event carries.
pub type Feed = watch::Receiver<Option<Arc<str>>>;

/// What the loop reads and where it publishes.
#[derive(Debug)]
pub struct Poller {
    pub(crate) settings: ConsoleSettings,
    pub(crate) http: reqwest::Client,
    pub(crate) load: Option<Arc<dyn LoadControl>>,
    pub(crate) traces: Option<Arc<dyn TraceSource>>,
    pub(crate) orders: Orders,
    pub(crate) scenes: Option<Arc<dyn crate::scenes::SceneControl>>,
    pub(crate) presentation: crate::presentation::Presentation,
    pub(crate) publish: watch::Sender<Option<Arc<str>>>,
}

impl Poller {
    /// Reads, observes and publishes every interval until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let mut observer = Observer::new();
        let mut tick = tokio::time::interval(self.settings.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let readings = self.read().await;
            let mut snapshot = observer.observe(&readings);
            snapshot.load = self.load.as_ref().map(|l| l.status());
            snapshot.orders = self.orders.views();
            snapshot.scene = self.scenes.as_ref().and_then(|s| s.current());
            snapshot.presentation = Some(self.presentation.status());
            snapshot.order_path = Some(PathPanel::read(self.traces.as_deref()));
            if self.settings.show_stores {
                snapshot.stores = stores::views(&readings.services);
            }
            match serde_json::to_string(&snapshot) {
                Ok(json) => {
                    self.publish.send_replace(Some(json.into()));
                }
                Err(e) => tracing::warn!(error = %e, "cannot serialize a console snapshot"),
            }
        }
    }

    /// One round of reads, all at once.
    async fn read(&self) -> Readings {
        let services = join_all(self.settings.services.iter().map(|s| self.service(s)));
        let proxies = self.json(format!("{}/proxies", self.settings.faults_url));
        let orders = async {
            if let Some(gateway) = &self.settings.gateway_url {
                self.orders.refresh(&self.http, gateway).await;
            }
        };
        let (services, proxies, ()) = tokio::join!(services, proxies, orders);
        let (proxies, faults_error) = match proxies {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        };
        Readings {
            at_unix_ms: crate::unix_ms(),
            services,
            proxies,
            faults_error,
        }
    }

    async fn service(&self, target: &ServiceTarget) -> ServiceReading {
        let ready = async {
            if self.settings.show_stores {
                Some(self.readiness(target).await)
            } else {
                None
            }
        };
        let (resilience, metrics, ready) = tokio::join!(
            self.json(format!("{}/admin/resilience", target.admin_url)),
            self.text(format!("{}/metrics", target.admin_url)),
            ready,
        );
        let error = resilience
            .as_ref()
            .err()
            .or(metrics.as_ref().err())
            .cloned();
        ServiceReading {
            name: target.name.clone(),
            resilience: resilience.ok(),
            metrics: metrics.ok().map(|t| Page::parse(&t)),
            error,
            ready,
        }
    }

    /// `/health/ready`: 200 ready, 503 with its failing checks, anything
    /// else unknown.
    async fn readiness(&self, target: &ServiceTarget) -> Readiness {
        let url = format!("{}/health/ready", target.admin_url);
        let res = match self.http.get(&url).timeout(READ_TIMEOUT).send().await {
            Ok(res) => res,
            Err(e) => return Readiness::Unknown(describe(&e)),
        };
        match res.status() {
            reqwest::StatusCode::OK => Readiness::Ready,
            reqwest::StatusCode::SERVICE_UNAVAILABLE => match res.json::<serde_json::Value>().await
            {
                Ok(body) => Readiness::NotReady(body["failures"].clone()),
                Err(e) => Readiness::Unknown(describe(&e)),
            },
            other => Readiness::Unknown(format!("{url} answered {other}")),
        }
    }

    async fn json(&self, url: String) -> Result<serde_json::Value, String> {
        let text = self.text(url).await?;
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))
    }

    async fn text(&self, url: String) -> Result<String, String> {
        let res = self
            .http
            .get(&url)
            .timeout(READ_TIMEOUT)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        if !res.status().is_success() {
            return Err(format!("{url} answered {}", res.status()));
        }
        res.text().await.map_err(|e| describe(&e))
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {READ_TIMEOUT:?}")
    } else if e.is_connect() {
        "connection refused".to_owned()
    } else {
        format!("read failed: {e}")
    }
}
