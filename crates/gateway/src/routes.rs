//! The route table of SPEC §6 and §11: `/api/products*` → product
//! (anonymous), `/api/orders*` → order (a verified customer),
//! `GET`/`HEAD /api/stock/*` → order (anonymous: a product's stock is not
//! personal; issue 18), `POST /api/session` → identity (sign-in, anonymous; only when
//! `routes.identity_url` is set), anything else → 404. Who may call a route
//! and with which method is part of its entry here, so the whole table is
//! read in one place. Pure data, no I/O, so it is tested without a network.

use http::{Method, Uri, uri::Authority};

use crate::settings::RouteSettings;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Anyone: no token is checked (one sent is forwarded as it came).
    Anonymous,
    /// A customer with a verified bearer token; the rate limit is then kept
    /// per customer.
    Customer,
}

/// The methods a route serves when it does not serve them all; any other
/// is a 405 with [`Methods::allow`] as its `Allow` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Methods {
    /// `POST` only (sign-in).
    Post,
    /// `GET` and `HEAD` only: a read-only resource (a product's stock).
    Read,
}

impl Methods {
    /// Whether `method` is served.
    pub(crate) fn allows(self, method: &Method) -> bool {
        match self {
            Self::Post => method == Method::POST,
            Self::Read => method == Method::GET || method == Method::HEAD,
        }
    }

    /// The `Allow` field of a 405 (RFC 9110 §10.2.1).
    pub(crate) fn allow(self) -> &'static str {
        match self {
            Self::Post => "POST",
            Self::Read => "GET, HEAD",
        }
    }
}

/// One destination: a name for metrics and an origin to send requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// `product`, `order`, `stock` or `identity`: the `route` label of
    /// every gateway metric and the retry budget's name (`stock` goes to
    /// the order service, over the same connection pool as `order`).
    pub(crate) name: &'static str,
    /// Whether a verified customer is required.
    pub(crate) access: Access,
    /// The methods the route serves, when not all (sign-in is `POST`,
    /// stock `GET`/`HEAD`; anything else is a 405 there).
    pub(crate) only: Option<Methods>,
    /// A path a `GET` of which is anonymous even on a customer's route:
    /// the service's own API document (`/api/orders/openapi.json`), which
    /// a client reads before it has signed in.
    pub(crate) open_document: Option<&'static str>,
    /// `http`, always (validated in settings).
    pub(crate) scheme: http::uri::Scheme,
    /// `host:port` of the service.
    pub(crate) authority: Authority,
}

/// Why a path has no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoute {
    /// Not under any routed prefix (including `/metrics`, `/health/*` and
    /// `/admin*`, which the public listener never serves or forwards).
    NotFound,
    /// A `.` or `..` segment: the gateway does not guess how a service would
    /// normalise it.
    DotSegment,
}

/// The exact path of the sign-in route.
pub(crate) const SESSION_PATH: &str = "/api/session";

/// The prefix of a product's stock (`/api/stock/{product_id}`), served
/// by the order service to anyone.
pub(crate) const STOCK_PREFIX: &str = "/api/stock";

/// The order service's OpenAPI document: anonymous, unlike the rest of
/// `/api/orders*`.
pub(crate) const ORDER_DOCUMENT_PATH: &str = "/api/orders/openapi.json";

impl Route {
    /// Who may send `method` to `path` on this route.
    pub(crate) fn access_for(&self, method: &Method, path: &str) -> Access {
        match self.open_document {
            Some(open) if method == Method::GET && path == open => Access::Anonymous,
            _ => self.access,
        }
    }
}

/// The routes, parsed once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct RouteTable {
    product: Route,
    order: Route,
    /// A product's stock: the order service, anonymous, read-only.
    stock: Route,
    /// `None` when `routes.identity_url` is empty.
    identity: Option<Route>,
}

impl RouteTable {
    /// Parses the configured origins.
    ///
    /// # Errors
    /// When a URL is not an `http://host:port` origin (settings validation
    /// rejects those first).
    pub(crate) fn new(settings: &RouteSettings) -> anyhow::Result<Self> {
        let identity = if settings.identity_url.is_empty() {
            None
        } else {
            let mut route = parse("identity", &settings.identity_url)?;
            route.only = Some(Methods::Post);
            Some(route)
        };
        let mut order = parse("order", &settings.order_url)?;
        order.access = Access::Customer;
        order.open_document = Some(ORDER_DOCUMENT_PATH);
        let mut stock = parse("stock", &settings.order_url)?;
        stock.only = Some(Methods::Read);
        Ok(Self {
            product: parse("product", &settings.product_url)?,
            order,
            stock,
            identity,
        })
    }

    /// Every route, for per-route state (retry budgets).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Route> {
        [&self.product, &self.order, &self.stock]
            .into_iter()
            .chain(self.identity.as_ref())
    }

    /// The route for `path`.
    ///
    /// # Errors
    /// [`NoRoute`] when nothing serves it.
    pub(crate) fn resolve(&self, path: &str) -> Result<&Route, NoRoute> {
        let route = if under(path, "/api/products") {
            &self.product
        } else if under(path, "/api/orders") {
            &self.order
        } else if under(path, STOCK_PREFIX) {
            &self.stock
        } else if path == SESSION_PATH
            && let Some(identity) = &self.identity
        {
            // Exactly the path: the issuer's other endpoints (its JWKS, its
            // discovery document) are for services, not for the public.
            return Ok(identity);
        } else {
            return Err(NoRoute::NotFound);
        };
        if path.split('/').any(|s| {
            s == "."
                || s == ".."
                || s.eq_ignore_ascii_case("%2e")
                || s.eq_ignore_ascii_case("%2e%2e")
        }) {
            return Err(NoRoute::DotSegment);
        }
        Ok(route)
    }
}

/// `path` is `prefix` itself or below it (`/api/products/1`), not merely
/// starting with the same letters (`/api/productsx`).
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn parse(name: &'static str, url: &str) -> anyhow::Result<Route> {
    let uri: Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("routes.{name}_url = {url}: {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned()) else {
        anyhow::bail!("routes.{name}_url = {url}: must be http://host:port");
    };
    Ok(Route {
        name,
        access: Access::Anonymous,
        only: None,
        open_document: None,
        scheme,
        authority,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        RouteTable::new(&RouteSettings::default()).unwrap()
    }

    #[test]
    fn api_prefixes_route_to_their_service() {
        let t = table();
        for (path, name) in [
            ("/api/products", "product"),
            ("/api/products/42", "product"),
            ("/api/orders", "order"),
            ("/api/orders/1/cancel", "order"),
        ] {
            assert_eq!(t.resolve(path).unwrap().name, name, "{path}");
        }
        let r = t.resolve("/api/orders/1").unwrap();
        assert_eq!(r.authority.as_str(), "127.0.0.1:8082");
        assert_eq!(r.access, Access::Customer);
        assert_eq!(
            t.resolve("/api/products/1").unwrap().access,
            Access::Anonymous
        );
    }

    #[test]
    fn only_a_get_of_the_order_document_is_anonymous_on_the_order_route() {
        let t = table();
        let order = t.resolve(ORDER_DOCUMENT_PATH).unwrap();
        assert_eq!(order.name, "order");
        assert_eq!(
            order.access_for(&Method::GET, ORDER_DOCUMENT_PATH),
            Access::Anonymous
        );
        for (method, path) in [
            (Method::POST, ORDER_DOCUMENT_PATH),
            (Method::GET, "/api/orders"),
            (Method::GET, "/api/orders/openapi.json/x"),
            (
                Method::GET,
                "/api/orders/0b9f6a3e-0000-4000-8000-000000000000",
            ),
        ] {
            assert_eq!(
                order.access_for(&method, path),
                Access::Customer,
                "{method} {path}"
            );
        }
        let product = t.resolve("/api/products/openapi.json").unwrap();
        assert_eq!(
            product.access_for(&Method::GET, "/api/products/openapi.json"),
            Access::Anonymous
        );
    }

    #[test]
    fn sign_in_is_routed_exactly_and_only_when_configured() {
        assert_eq!(table().resolve("/api/session"), Err(NoRoute::NotFound));
        assert_eq!(table().all().count(), 3);
        let t = RouteTable::new(&RouteSettings {
            identity_url: "http://127.0.0.1:8085".into(),
            ..RouteSettings::default()
        })
        .unwrap();
        let r = t.resolve("/api/session").unwrap();
        assert_eq!(
            (r.name, r.access, r.only),
            ("identity", Access::Anonymous, Some(Methods::Post))
        );
        assert_eq!(r.authority.as_str(), "127.0.0.1:8085");
        for path in [
            "/api/session/x",
            "/api/sessions",
            "/api/session/",
            "/.well-known/jwks.json",
        ] {
            assert_eq!(t.resolve(path), Err(NoRoute::NotFound), "{path}");
        }
        assert_eq!(t.all().count(), 4);
    }

    #[test]
    fn stock_goes_to_the_order_service_for_anyone_and_only_to_read() {
        let t = table();
        let order = t.resolve("/api/orders").unwrap().authority.clone();
        for path in [
            "/api/stock/0b9f6a3e-0000-4000-8000-000000000000",
            "/api/stock",
            "/api/stock/x",
        ] {
            let r = t.resolve(path).unwrap();
            assert_eq!(r.name, "stock", "{path}");
            assert_eq!(r.authority, order, "{path}: the order service");
            assert_eq!(r.access, Access::Anonymous, "{path}");
            for method in [Method::GET, Method::POST, Method::DELETE] {
                assert_eq!(
                    r.access_for(&method, path),
                    Access::Anonymous,
                    "{method} {path}"
                );
            }
        }
        let read = t.resolve("/api/stock/1").unwrap().only.unwrap();
        assert_eq!(read, Methods::Read);
        assert!(read.allows(&Method::GET) && read.allows(&Method::HEAD));
        for method in [
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ] {
            assert!(!read.allows(&method), "{method}");
        }
        assert_eq!(read.allow(), "GET, HEAD");
        assert!(Methods::Post.allows(&Method::POST) && !Methods::Post.allows(&Method::GET));
        assert_eq!(t.resolve("/api/products/1").unwrap().only, None);
        assert_eq!(t.resolve("/api/orders/1").unwrap().only, None);
        for path in ["/api/stocks", "/api/stockx/1", "/api/stock-admin"] {
            assert_eq!(t.resolve(path), Err(NoRoute::NotFound), "{path}");
        }
        assert_eq!(t.resolve("/api/stock/../orders"), Err(NoRoute::DotSegment));
    }

    #[test]
    fn admin_metrics_health_and_lookalikes_are_not_routed() {
        let t = table();
        for path in [
            "/",
            "/metrics",
            "/health/live",
            "/health/ready",
            "/admin/resilience",
            "/admin",
            "/api",
            "/api/productsx",
            "/api/orders-admin",
        ] {
            assert_eq!(t.resolve(path), Err(NoRoute::NotFound), "{path}");
        }
        for path in [
            "/api/products/../../admin",
            "/api/orders/./x",
            "/api/orders/%2E%2E/x",
        ] {
            assert_eq!(t.resolve(path), Err(NoRoute::DotSegment), "{path}");
        }
    }
}
