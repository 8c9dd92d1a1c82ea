//! The route table of SPEC §6: `/api/products*` → product, `/api/orders*` →
//! order, anything else → 404. Pure data, no I/O, so it is tested without a
//! network.

use http::{Uri, uri::Authority};

use crate::settings::RouteSettings;

/// One destination: a name for metrics and an origin to send requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// `product` or `order`: the `route` label of every gateway metric and
    /// the retry budget's name.
    pub(crate) name: &'static str,
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

/// The two routes, parsed once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct RouteTable {
    product: Route,
    order: Route,
}

impl RouteTable {
    /// Parses the configured origins.
    ///
    /// # Errors
    /// When a URL is not an `http://host:port` origin (settings validation
    /// rejects those first).
    pub(crate) fn new(settings: &RouteSettings) -> anyhow::Result<Self> {
        Ok(Self {
            product: parse("product", &settings.product_url)?,
            order: parse("order", &settings.order_url)?,
        })
    }

    /// Every route, for per-route state (retry budgets).
    pub(crate) fn all(&self) -> [&Route; 2] {
        [&self.product, &self.order]
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
