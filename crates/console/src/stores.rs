//! The stores under each service in full mode (issue 18): each service's
//! Postgres and Redis, as the topology says it calls them, with whether
//! they answer as the service itself sees it.
//!
//! Postgres is up while the service's `/health/ready` is 200 (its only
//! readiness check is its database); Redis is up unless the service's
//! `redis` member of `/admin/resilience` says its guard is resting after
//! failures. When the console cannot tell (the admin listener did not
//! answer, or reports no `redis`), `up` is `None`: grey, not a guess.
//!
//! Off by default ([`crate::ConsoleSettings::show_stores`]): the embedded
//! system has SQLite and in-process caches, no Postgres or Redis to show.

use serde::Serialize;
use serde_json::Value;
use shopeasy_runtime::topology;

use crate::observe::ServiceReading;

/// What one service's `/health/ready` said this round.
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    /// 200: every readiness check (its database) passed.
    Ready,
    /// 503: the failing checks, by name (`{"database": "…"}`).
    NotReady(Value),
    /// No usable answer (refused, timed out, another status).
    Unknown(String),
}

/// One store under one service.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoreView {
    /// The service that calls it.
    pub service: String,
    /// `postgres` or `redis`.
    pub store: &'static str,
    /// It answers the service (`None`: the console cannot tell).
    pub up: Option<bool>,
    /// Why it is down or unknown, or what the service reported.
    pub detail: Option<String>,
}

/// The stores of every service read, in the configured order, each
/// service's in the topology's order.
pub fn views(services: &[ServiceReading]) -> Vec<StoreView> {
    services
        .iter()
        .filter_map(|s| topology::service(&s.name).map(|node| (s, node)))
        .flat_map(|(s, node)| {
            node.calls
                .iter()
                .filter_map(|call| topology::store(call))
                .map(move |store| match store.name {
                    "postgres" => postgres(s),
                    _ => redis(s, store.name),
                })
        })
        .collect()
}

fn postgres(service: &ServiceReading) -> StoreView {
    let (up, detail) = match &service.ready {
        Some(Readiness::Ready) => (Some(true), None),
        Some(Readiness::NotReady(failures)) => {
            let detail = failures
                .get("database")
                .and_then(Value::as_str)
                .map_or_else(|| failures.to_string(), str::to_owned);
            (Some(false), Some(detail))
        }
        Some(Readiness::Unknown(e)) => (None, Some(e.clone())),
        None => (None, Some("readiness not read".to_owned())),
    };
    StoreView {
        service: service.name.clone(),
        store: "postgres",
        up,
        detail,
    }
}

fn redis(service: &ServiceReading, store: &'static str) -> StoreView {
    let report = service.resilience.as_ref().and_then(|r| r.get("redis"));
    let (up, detail) = match report {
        None if service.resilience.is_none() => {
            (None, Some("admin listener did not answer".to_owned()))
        }
        None => (None, Some("no redis reported".to_owned())),
        Some(r) if r["configured"] == Value::Bool(false) => {
            (None, Some("not configured".to_owned()))
        }
        Some(r) => {
            let failures = r["failures"].as_u64().unwrap_or(0);
            match r["resting"].as_bool() {
                Some(true) => (
                    Some(false),
                    Some(format!("resting after failures ({failures} so far)")),
                ),
                Some(false) => (Some(true), Some(format!("{failures} failures so far"))),
                None => (None, Some(format!("unreadable report: {r}"))),
            }
        }
    };
    StoreView {
        service: service.name.clone(),
        store,
        up,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reading(name: &str, ready: Option<Readiness>, resilience: Option<Value>) -> ServiceReading {
        ServiceReading {
            name: name.into(),
            resilience,
            metrics: None,
            error: None,
            ready,
        }
    }

    fn find<'a>(views: &'a [StoreView], service: &str, store: &str) -> &'a StoreView {
        views
            .iter()
            .find(|v| v.service == service && v.store == store)
            .unwrap_or_else(|| panic!("{service}/{store} in {views:?}"))
    }

    #[test]
    fn each_service_shows_the_stores_the_topology_gives_it() {
        let views = views(&[
            reading("gateway", Some(Readiness::Ready), Some(json!({}))),
            reading("inventory", Some(Readiness::Ready), Some(json!({}))),
            reading("order", Some(Readiness::Ready), Some(json!({}))),
        ]);
        let names: Vec<_> = views
            .iter()
            .map(|v| format!("{}/{}", v.service, v.store))
            .collect();
        assert_eq!(
            names,
            ["inventory/postgres", "order/postgres", "order/redis"]
        );
    }

    #[test]
    fn not_ready_and_resting_are_down_ready_and_answering_are_up() {
        let down = reading(
            "order",
            Some(Readiness::NotReady(
                json!({"database": "connection refused"}),
            )),
            Some(json!({"redis": {"configured": true, "resting": true, "failures": 3}})),
        );
        let up = reading(
            "product",
            Some(Readiness::Ready),
            Some(json!({"redis": {"configured": true, "resting": false, "failures": 0}})),
        );
        let views = views(&[down, up]);
        let pg = find(&views, "order", "postgres");
        assert_eq!(pg.up, Some(false));
        assert_eq!(pg.detail.as_deref(), Some("connection refused"));
        assert_eq!(find(&views, "order", "redis").up, Some(false));
        assert_eq!(find(&views, "product", "postgres").up, Some(true));
        assert_eq!(find(&views, "product", "redis").up, Some(true));
    }

    #[test]
    fn what_the_console_cannot_tell_is_unknown() {
        let views = views(&[
            reading("order", Some(Readiness::Unknown("timeout".into())), None),
            reading("product", None, Some(json!({}))),
        ]);
        for v in &views {
            assert_eq!(v.up, None, "{v:?}");
            assert!(v.detail.is_some(), "{v:?}");
        }
        assert_eq!(views.len(), 4);
    }
}
