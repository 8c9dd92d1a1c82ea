//! The gateway's settings (SPEC §8): where each route goes, the resilience
//! knobs of SPEC §6, and the size caps. [`Default`] is the single source of
//! truth for every default.

use serde::{Deserialize, Serialize};
use shopeasy_identity::AuthSettings;
use shopeasy_runtime::{
    settings::{ProcessSettings, Seconds, Settings, Validator, common::RetryBudgetSettings},
    topology,
};

/// Everything the gateway reads at start-up.
///
/// The gateway has no storage, no Redis and no admin-only routes of its own,
/// so it takes none of `database_url`, `redis_url` or `admin_token`: a setting
/// a service does not use is an error, not a silent no-op.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct GatewaySettings {
    /// The public listener (`LISTEN_ADDR`), the admin listener
    /// (`ADMIN_ADDR`: metrics, health, `/admin/resilience`), logging and
    /// trace export.
    #[serde(flatten)]
    pub process: ProcessSettings,
    /// Where each route is sent.
    pub routes: RouteSettings,
    /// Timeouts, retries and the retry budget.
    pub resilience: ResilienceSettings,
    /// Size caps on what callers may send.
    pub limits: LimitSettings,
    /// `auth.*`: how the bearer tokens of `/api/orders*` are verified
    /// (SPEC §11). Required: with neither `auth.jwks_url` nor
    /// `auth.public_key_pem` the gateway refuses to start, so no deployment
    /// can forget to close the order routes.
    pub auth: AuthSettings,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&topology::GATEWAY),
            routes: RouteSettings::default(),
            resilience: ResilienceSettings::default(),
            limits: LimitSettings::default(),
            auth: AuthSettings::default(),
        }
    }
}

/// The upstream of each route (`ROUTES__PRODUCT_URL`, `ROUTES__ORDER_URL`,
/// `ROUTES__IDENTITY_URL`): `http://host:port` with no path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RouteSettings {
    /// `/api/products*` goes here.
    pub product_url: String,
    /// `/api/orders*` goes here.
    pub order_url: String,
    /// `POST /api/session` (sign-in) goes here: the demo issuer, or any
    /// service that hands out tokens. Empty (the default): not routed, so
    /// `/api/session` is a 404 like any unknown path.
    pub identity_url: String,
}

impl Default for RouteSettings {
    fn default() -> Self {
        Self {
            product_url: topology::PRODUCT.local_url(),
            order_url: topology::ORDER.local_url(),
            identity_url: String::new(),
        }
    }
}

/// `resilience.*`: the groups the gateway uses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ResilienceSettings {
    /// `resilience.gateway.*`.
    pub gateway: GatewayResilience,
    /// `resilience.retry_budget.*`: one budget per route.
    pub retry_budget: RetryBudgetSettings,
}

impl ResilienceSettings {
    /// The retry budget each route's [`RetryBudget`](shopeasy_resilience::budget::RetryBudget)
    /// is made of (one per route, all of these settings); the launcher's
    /// policy check reads the same value.
    pub fn budget(&self) -> shopeasy_resilience::budget::BudgetConfig {
        let b = &self.retry_budget;
        shopeasy_resilience::budget::BudgetConfig {
            ratio: b.ratio,
            min_retries_per_window: b.min_retries_per_window,
            window: b.window_seconds.get(),
        }
    }
}

/// `resilience.gateway.*` (SPEC §6).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct GatewayResilience {
    /// Longest silence allowed in an exchange: no response headers, or no
    /// further byte of either body. Cut off with 504 (service silent before
    /// headers), an aborted stream (after headers) or 408 (client silent).
    pub activity_timeout_seconds: Seconds,
    /// Longest wait for a TCP connection to a service (then 504).
    pub connect_timeout_seconds: Seconds,
    /// Age (±10 % jitter) after which a pooled connection is not reused.
    pub pooled_connection_lifetime_seconds: Seconds,
    /// Retries of a safe request after a connection failure.
    pub get_retries: u32,
    /// First retry's backoff (before jitter); doubles per retry.
    pub retry_backoff_seconds: Seconds,
}

impl Default for GatewayResilience {
    fn default() -> Self {
        Self {
            activity_timeout_seconds: Seconds::new(30.0),
            connect_timeout_seconds: Seconds::new(5.0),
            pooled_connection_lifetime_seconds: Seconds::new(120.0),
            get_retries: 2,
            retry_backoff_seconds: Seconds::new(0.025),
        }
    }
}

/// `limits.*`: what a caller may send and hold (SPEC §11), so that no
/// caller can make the gateway run out of descriptors, memory or upstream
/// connections.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LimitSettings {
    /// Request line + headers, in bytes (over → 431). hyper's read buffer
    /// is capped near it too (at least 8 KiB, hyper's floor), so an
    /// unfinished head holds no more than that.
    pub max_header_bytes: u64,
    /// A streamed (passed-through) request body, in bytes (over → 413).
    pub max_body_bytes: u64,
    /// A body buffered so it can be re-sent (POST with `Idempotency-Key`),
    /// in bytes (over → 413).
    pub max_buffered_body_bytes: u64,
    /// Longest time a request body may take in all, however steadily it
    /// trickles (→ 408); the activity timer alone is reset by every byte.
    pub request_body_timeout_seconds: Seconds,
    /// Open client connections. At the cap the gateway stops accepting
    /// (the kernel's backlog holds the rest) and keeps serving the ones it
    /// has, so its descriptors stay bounded.
    pub max_connections: u32,
    /// Requests in flight per route (product, order); the excess gets 503
    /// `overloaded` with `Proxy-Status` and `Retry-After` at once.
    pub max_in_flight_per_route: u32,
    /// Connections to one service address (origin), busy or pooled. A
    /// request waits for one at most the connect timeout (then 503).
    pub max_upstream_connections_per_origin: u32,
    /// Each client's sustained request rate (token bucket refill, per
    /// second); over it → 429 with `Retry-After` and `RateLimit` headers.
    pub client_requests_per_second: u32,
    /// Each client's burst (token bucket size), at least the rate.
    pub client_burst: u32,
    /// Clients whose buckets are remembered at once; past it the idlest
    /// bucket is forgotten, so a client spraying addresses cannot grow the
    /// table.
    pub max_tracked_clients: u32,
    /// Each signed-in customer's sustained rate of placements
    /// (`POST /api/orders`), per minute: a customer's own bucket, whatever
    /// address they come from, so one customer cannot flood the order
    /// service and customers behind one NAT do not share it.
    pub customer_orders_per_minute: u32,
    /// Each customer's burst of placements (bucket size), at least 1.
    pub customer_order_burst: u32,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            max_header_bytes: 32 * 1024,
            max_body_bytes: 1024 * 1024,
            max_buffered_body_bytes: 64 * 1024,
            request_body_timeout_seconds: Seconds::new(60.0),
            max_connections: 4096,
            max_in_flight_per_route: 256,
            max_upstream_connections_per_origin: 256,
            client_requests_per_second: 1000,
            client_burst: 2000,
            max_tracked_clients: 65_536,
            customer_orders_per_minute: 120,
            customer_order_burst: 20,
        }
    }
}

/// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for GatewaySettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for GatewaySettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        let identity = (!self.routes.identity_url.is_empty())
            .then_some(("routes.identity_url", &self.routes.identity_url));
        for (key, url) in [
            ("routes.product_url", &self.routes.product_url),
            ("routes.order_url", &self.routes.order_url),
        ]
        .into_iter()
        .chain(identity)
        {
            v.url(key, url, url, &["http"], false);
            if let Ok(parsed) = url::Url::parse(url)
                && (parsed.path() != "/" || parsed.query().is_some())
            {
                v.fail(key, url, "must be http://host:port with no path or query");
            }
        }
        let g = &self.resilience.gateway;
        v.within("resilience.gateway", |v| {
            v.seconds(
                "activity_timeout_seconds",
                g.activity_timeout_seconds,
                0.05..=3600.0,
            );
            v.seconds(
                "connect_timeout_seconds",
                g.connect_timeout_seconds,
                0.01..=300.0,
            );
            v.seconds(
                "pooled_connection_lifetime_seconds",
                g.pooled_connection_lifetime_seconds,
                0.1..=86_400.0,
            );
            v.number("get_retries", g.get_retries, 0..=10);
            v.seconds(
                "retry_backoff_seconds",
                g.retry_backoff_seconds,
                0.001..=10.0,
            );
        });
        self.resilience
            .retry_budget
            .validate("resilience.retry_budget", v);
        let l = &self.limits;
        v.number(
            "limits.max_header_bytes",
            l.max_header_bytes,
            1024..=1024 * 1024,
        );
        v.number(
            "limits.max_body_bytes",
            l.max_body_bytes,
            1024..=1024 * 1024 * 1024,
        );
        v.number(
            "limits.max_buffered_body_bytes",
            l.max_buffered_body_bytes,
            1024..=16 * 1024 * 1024,
        );
        v.within("limits", |v| {
            v.seconds(
                "request_body_timeout_seconds",
                l.request_body_timeout_seconds,
                0.05..=86_400.0,
            );
            v.number("max_connections", l.max_connections, 1..=1_000_000);
            v.number(
                "max_in_flight_per_route",
                l.max_in_flight_per_route,
                1..=1_000_000,
            );
            v.number(
                "max_upstream_connections_per_origin",
                l.max_upstream_connections_per_origin,
                1..=100_000,
            );
            v.number(
                "client_requests_per_second",
                l.client_requests_per_second,
                1..=10_000_000,
            );
            v.number("client_burst", l.client_burst, 1..=10_000_000);
            if l.client_burst < l.client_requests_per_second {
                v.fail(
                    "client_burst",
                    l.client_burst,
                    "must be at least client_requests_per_second",
                );
            }
            v.number(
                "max_tracked_clients",
                l.max_tracked_clients,
                16..=10_000_000,
            );
            v.number(
                "customer_orders_per_minute",
                l.customer_orders_per_minute,
                1..=10_000_000,
            );
            v.number(
                "customer_order_burst",
                l.customer_order_burst,
                1..=10_000_000,
            );
        });
        self.auth.validate("auth", v);
    }
}

#[cfg(test)]
mod tests {
    use shopeasy_runtime::settings::{Loader, SettingsError};

    use super::*;

    /// A key source, which every valid configuration needs.
    fn pem() -> String {
        shopeasy_identity::DemoKey::from_seed([42; 32])
            .unwrap()
            .public_key_pem()
    }

    fn load(vars: &[(&str, &str)]) -> Result<GatewaySettings, SettingsError> {
        let pem = pem();
        let mut vars = vars.to_vec();
        vars.push(("AUTH__PUBLIC_KEY_PEM", pem.as_str()));
        Loader::new().env(vars).load::<GatewaySettings>()
    }

    fn errors(vars: &[(&str, &str)]) -> Vec<String> {
        match load(vars) {
            Err(SettingsError::Invalid(e)) => e.iter().map(ToString::to_string).collect(),
            other => panic!("expected invalid settings, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let s = load(&[]).unwrap();
        let mut expected = GatewaySettings::default();
        expected.auth.public_key_pem = pem();
        assert_eq!(s, expected);
        let g = &s.resilience.gateway;
        assert_eq!(g.activity_timeout_seconds, Seconds::new(30.0));
        assert_eq!(g.connect_timeout_seconds, Seconds::new(5.0));
        assert_eq!(g.pooled_connection_lifetime_seconds, Seconds::new(120.0));
        assert_eq!(g.get_retries, 2);
        assert_eq!(s.process.listen_addr.port(), 8080);
        assert_eq!(s.process.admin_addr.port(), 9080);
        assert_eq!(s.routes.product_url, "http://127.0.0.1:8081");
        assert_eq!(s.routes.order_url, "http://127.0.0.1:8082");
        assert_eq!(s.limits.max_buffered_body_bytes, 64 * 1024);
        assert_eq!(
            s.routes.identity_url, "",
            "sign-in is not routed by default"
        );
        assert_eq!(s.limits.customer_orders_per_minute, 120);
        assert_eq!(s.limits.customer_order_burst, 20);
        assert_eq!(s.auth.issuer, "shopeasy-demo");
        assert_eq!(s.auth.audience, "shopeasy");
    }

    #[test]
    fn without_a_key_source_the_gateway_refuses_to_start() {
        match Loader::new().load::<GatewaySettings>() {
            Err(SettingsError::Invalid(e)) => {
                let keys: Vec<_> = e.iter().map(|e| e.key.as_str()).collect();
                assert_eq!(keys, ["auth.jwks_url"], "{e:?}");
            }
            other => panic!("expected invalid settings, got {other:?}"),
        }
        let s: GatewaySettings = Loader::new()
            .env([
                (
                    "AUTH__JWKS_URL",
                    "http://identity:8085/.well-known/jwks.json",
                ),
                ("ROUTES__IDENTITY_URL", "http://identity:8085"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.routes.identity_url, "http://identity:8085");
    }

    #[test]
    fn the_identity_route_and_customer_limits_are_validated() {
        let errs = errors(&[
            ("ROUTES__IDENTITY_URL", "http://identity:8085/api/session"),
            ("LIMITS__CUSTOMER_ORDERS_PER_MINUTE", "0"),
            ("LIMITS__CUSTOMER_ORDER_BURST", "0"),
        ]);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with("routes.identity_url") && errs[0].contains("no path"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("limits.customer_orders_per_minute"),
            "{errs:?}"
        );
        assert!(
            errs[2].starts_with("limits.customer_order_burst"),
            "{errs:?}"
        );
    }

    #[test]
    fn environment_overrides_routes_and_timeouts() {
        let s = load(&[
            ("ROUTES__PRODUCT_URL", "http://product:8081"),
            ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "0.5"),
        ])
        .unwrap();
        assert_eq!(s.routes.product_url, "http://product:8081");
        assert_eq!(
            s.resilience.gateway.activity_timeout_seconds,
            Seconds::new(0.5)
        );
    }

    #[test]
    fn zero_or_absurd_values_are_refused_naming_key_value_and_range() {
        let errs = errors(&[
            ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "0"),
            ("RESILIENCE__GATEWAY__CONNECT_TIMEOUT_SECONDS", "100000"),
            (
                "RESILIENCE__GATEWAY__POOLED_CONNECTION_LIFETIME_SECONDS",
                "0",
            ),
            ("RESILIENCE__GATEWAY__GET_RETRIES", "1000"),
            ("RESILIENCE__RETRY_BUDGET__RATIO", "7"),
            ("LIMITS__MAX_BODY_BYTES", "0"),
        ]);
        assert_eq!(
            errs,
            [
                "resilience.gateway.activity_timeout_seconds (env RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS) = 0: must be between 0.05 and 3600 seconds",
                "resilience.gateway.connect_timeout_seconds (env RESILIENCE__GATEWAY__CONNECT_TIMEOUT_SECONDS) = 100000: must be between 0.01 and 300 seconds",
                "resilience.gateway.pooled_connection_lifetime_seconds (env RESILIENCE__GATEWAY__POOLED_CONNECTION_LIFETIME_SECONDS) = 0: must be between 0.1 and 86400 seconds",
                "resilience.gateway.get_retries (env RESILIENCE__GATEWAY__GET_RETRIES) = 1000: must be between 0 and 10",
                "resilience.retry_budget.ratio (env RESILIENCE__RETRY_BUDGET__RATIO) = 7: must be between 0 and 1",
                "limits.max_body_bytes (env LIMITS__MAX_BODY_BYTES) = 0: must be between 1024 and 1073741824",
            ]
        );
    }

    #[test]
    fn caller_limits_are_validated() {
        let errs = errors(&[
            ("LIMITS__MAX_CONNECTIONS", "0"),
            ("LIMITS__CLIENT_REQUESTS_PER_SECOND", "100"),
            ("LIMITS__CLIENT_BURST", "10"),
            ("LIMITS__REQUEST_BODY_TIMEOUT_SECONDS", "0"),
        ]);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with("limits.request_body_timeout_seconds"),
            "{errs:?}"
        );
        assert!(errs[1].starts_with("limits.max_connections"), "{errs:?}");
        assert!(
            errs[2].contains("client_burst") && errs[2].contains("at least"),
            "{errs:?}"
        );
    }

    #[test]
    fn route_urls_must_be_plain_http_origins() {
        let errs = errors(&[
            ("ROUTES__PRODUCT_URL", "ftp://x"),
            ("ROUTES__ORDER_URL", "http://order:8082/prefix"),
        ]);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("routes.product_url"), "{errs:?}");
        assert!(errs[1].contains("no path"), "{errs:?}");
    }
}
