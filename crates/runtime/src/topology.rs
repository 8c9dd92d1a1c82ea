//! The one description of how ShopEasy's processes fit together (SPEC §1,
//! §2, §7): the four services, their default ports, the stores and services
//! each one calls, and the order they are wired in.
//!
//! ```text
//! client → gateway ─[gateway-product]→ product
//!                  └[gateway-order]──→ order ─[order-inventory]→ inventory
//!                                          └─[order-product]──→ product
//! ```
//!
//! Everything that needs a port or an edge reads it here: each service's
//! settings [`Default`] (so `LISTEN_ADDR`'s default *is* [`Node::public_port`]),
//! the embedded launcher, the end-to-end cluster and the deployment checks.
//! Changing a port here changes it everywhere, and nothing else has to.

use std::net::{Ipv4Addr, SocketAddr};

/// One ShopEasy service process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Short name: the compose service, the Kubernetes Deployment, the first
    /// half of an edge name.
    pub name: &'static str,
    /// The binary that runs it (also its name in logs and traces).
    pub binary: &'static str,
    /// `http` or `grpc`: the public listener's protocol (and port name).
    pub protocol: &'static str,
    /// The public listener's default port.
    pub public_port: u16,
    /// The admin listener's default port (`/metrics`, `/health/*`).
    pub admin_port: u16,
    /// Services and stores it calls: it must start after them and may reach
    /// them (NetworkPolicy).
    pub calls: &'static [&'static str],
}

impl Node {
    /// A service that calls nothing yet (add what it calls with
    /// [`Node::calling`]). A constructor rather than a struct literal so the
    /// four declarations below read as one table.
    pub const fn new(
        name: &'static str,
        binary: &'static str,
        protocol: &'static str,
        public_port: u16,
        admin_port: u16,
    ) -> Self {
        Self {
            name,
            binary,
            protocol,
            public_port,
            admin_port,
            calls: &[],
        }
    }

    /// The same node, calling `calls` (services and stores, see
    /// [`Node::calls`]).
    pub const fn calling(self, calls: &'static [&'static str]) -> Self {
        Self { calls, ..self }
    }

    /// The default public listener: every interface, [`Node::public_port`].
    pub const fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(
            std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            self.public_port,
        )
    }

    /// The default admin listener: every interface, [`Node::admin_port`].
    pub const fn admin_addr(&self) -> SocketAddr {
        SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.admin_port)
    }

    /// How a caller on the same machine reaches it by default
    /// (`http://127.0.0.1:8081`): the default of every upstream URL.
    pub fn local_url(&self) -> String {
        format!("http://{}:{}", Ipv4Addr::LOCALHOST, self.public_port)
    }

    /// The services (not stores) it calls.
    pub fn upstreams(&self) -> impl Iterator<Item = &'static Node> + '_ {
        self.calls.iter().filter_map(|name| service(name))
    }
}

/// The public entrance: routes `/api/products*` and `/api/orders*`.
pub const GATEWAY: Node =
    Node::new("gateway", "shopeasy-gateway", "http", 8080, 9080).calling(&["product", "order"]);

/// The catalogue.
pub const PRODUCT: Node =
    Node::new("product", "shopeasy-product", "http", 8081, 9081).calling(&["postgres", "redis"]);

/// Orders: the saga over inventory and product.
pub const ORDER: Node = Node::new("order", "shopeasy-order", "http", 8082, 9082).calling(&[
    "inventory",
    "product",
    "postgres",
    "redis",
]);

/// Stock and reservations, over gRPC.
pub const INVENTORY: Node =
    Node::new("inventory", "shopeasy-inventory", "grpc", 50051, 9083).calling(&["postgres"]);

/// The demo issuer (`shopeasy-identity`): signs demo customers' tokens and
/// serves its JWKS, for the one-command system and compose only. It is not
/// one of [`SERVICES`] — a real deployment points `auth.jwks_url` at its own
/// OIDC provider instead — so nothing that walks the four services (edges,
/// fault proxies, Kubernetes base) grows a fifth.
pub const IDENTITY: Node = Node::new("identity", "shopeasy-identity", "http", 8085, 9085);

/// The four services in SPEC §1's order.
pub const SERVICES: [&Node; 4] = [&GATEWAY, &PRODUCT, &ORDER, &INVENTORY];

/// The four services in the order they are wired in: each after everything
/// it calls, so its upstreams' addresses are known when it starts.
pub const WIRING_ORDER: [&Node; 4] = [&INVENTORY, &PRODUCT, &ORDER, &GATEWAY];

/// Where each of the four services listens once started: its public and
/// admin listeners. The embedded launcher and the end-to-end cluster both
/// hand this to their callers, so a test reads `addresses.order_admin` the
/// same way against either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The gateway: the address clients use.
    pub gateway: SocketAddr,
    /// The gateway's admin listener.
    pub gateway_admin: SocketAddr,
    /// The product service (direct, not through a proxy).
    pub product: SocketAddr,
    /// The product service's admin listener.
    pub product_admin: SocketAddr,
    /// The order service (direct, not through a proxy).
    pub order: SocketAddr,
    /// The order service's admin listener.
    pub order_admin: SocketAddr,
    /// The inventory service (gRPC, direct).
    pub inventory: SocketAddr,
    /// The inventory service's admin listener.
    pub inventory_admin: SocketAddr,
}

impl Addresses {
    /// Asks `of` where each service listens (public, admin), once per
    /// service, and collects the answers; the first error stops it.
    ///
    /// # Errors
    /// The first error `of` returns.
    pub fn try_collect<E>(
        mut of: impl FnMut(&'static Node) -> Result<(SocketAddr, SocketAddr), E>,
    ) -> Result<Self, E> {
        let (gateway, gateway_admin) = of(&GATEWAY)?;
        let (product, product_admin) = of(&PRODUCT)?;
        let (order, order_admin) = of(&ORDER)?;
        let (inventory, inventory_admin) = of(&INVENTORY)?;
        Ok(Self {
            gateway,
            gateway_admin,
            product,
            product_admin,
            order,
            order_admin,
            inventory,
            inventory_admin,
        })
    }
}

/// A backing store and its default port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    /// Its name in [`Node::calls`] (`postgres`, `redis`).
    pub name: &'static str,
    /// The port it listens on.
    pub port: u16,
}

/// The backing stores.
pub const STORES: [Store; 2] = [
    Store {
        name: "postgres",
        port: 5432,
    },
    Store {
        name: "redis",
        port: 6379,
    },
];

/// The service named `name`.
pub fn service(name: &str) -> Option<&'static Node> {
    SERVICES.into_iter().find(|n| n.name == name)
}

/// The store named `name`.
pub fn store(name: &str) -> Option<Store> {
    STORES.into_iter().find(|s| s.name == name)
}

/// One call edge between two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// The caller.
    pub from: &'static Node,
    /// What it calls: a service or a store name.
    pub to: &'static str,
}

impl Edge {
    /// Its name, as SPEC §7 and FAULTS.md write it (`order-inventory`): the
    /// name of the fault proxy put on it.
    pub fn name(&self) -> String {
        format!("{}-{}", self.from.name, self.to)
    }
}

/// The service-to-service edges, the callers in SPEC §1's order:
/// `gateway-product`, `gateway-order`, `order-inventory`, `order-product`.
pub fn service_edges() -> Vec<Edge> {
    edges().filter(|e| service(e.to).is_some()).collect()
}

/// The edges from a service to a store (`order-postgres`, …).
pub fn store_edges() -> Vec<Edge> {
    edges().filter(|e| store(e.to).is_some()).collect()
}

fn edges() -> impl Iterator<Item = Edge> {
    SERVICES
        .into_iter()
        .flat_map(|from| from.calls.iter().map(move |to| Edge { from, to }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_collected_per_service_and_the_first_error_stops() {
        let port = |node: &Node| SocketAddr::from((Ipv4Addr::LOCALHOST, node.public_port));
        let admin = |node: &Node| SocketAddr::from((Ipv4Addr::LOCALHOST, node.admin_port));
        let got = Addresses::try_collect(|node| Ok::<_, ()>((port(node), admin(node)))).unwrap();
        assert_eq!(got.gateway, port(&GATEWAY));
        assert_eq!(got.product_admin, admin(&PRODUCT));
        assert_eq!(got.order, port(&ORDER));
        assert_eq!(got.inventory_admin, admin(&INVENTORY));

        let mut asked = Vec::new();
        let err = Addresses::try_collect(|node| {
            asked.push(node.name);
            if node == &PRODUCT {
                Err(node.name)
            } else {
                Ok((port(node), admin(node)))
            }
        });
        assert_eq!(err, Err("product"));
        assert_eq!(asked, ["gateway", "product"]);
    }

    #[test]
    fn the_constructor_keeps_each_field() {
        assert_eq!(INVENTORY.protocol, "grpc");
        assert_eq!(GATEWAY.protocol, "http");
        assert_eq!(ORDER.binary, "shopeasy-order");
        assert_eq!((PRODUCT.public_port, PRODUCT.admin_port), (8081, 9081));
        assert_eq!(GATEWAY.calls, ["product", "order"]);
    }

    #[test]
    fn every_service_is_wired_after_what_it_calls() {
        for (i, node) in WIRING_ORDER.iter().enumerate() {
            for upstream in node.upstreams() {
                let at = WIRING_ORDER.iter().position(|n| *n == upstream);
                assert!(
                    at.is_some_and(|at| at < i),
                    "{} before {}",
                    upstream.name,
                    node.name
                );
            }
        }
        assert_eq!(WIRING_ORDER.len(), SERVICES.len());
        for node in SERVICES {
            assert!(WIRING_ORDER.contains(&node), "{} is wired", node.name);
        }
    }

    #[test]
    fn edges_are_the_four_of_spec_and_the_stores() {
        let names: Vec<String> = service_edges().iter().map(Edge::name).collect();
        assert_eq!(
            names,
            [
                "gateway-product",
                "gateway-order",
                "order-inventory",
                "order-product"
            ]
        );
        let stores: Vec<String> = store_edges().iter().map(Edge::name).collect();
        assert_eq!(
            stores,
            [
                "product-postgres",
                "product-redis",
                "order-postgres",
                "order-redis",
                "inventory-postgres"
            ]
        );
        for node in SERVICES {
            for call in node.calls {
                assert!(service(call).is_some() || store(call).is_some(), "{call}");
            }
        }
    }

    #[test]
    fn ports_are_distinct() {
        let mut ports: Vec<u16> = SERVICES
            .iter()
            .flat_map(|n| [n.public_port, n.admin_port])
            .chain(STORES.iter().map(|s| s.port))
            .collect();
        let all = ports.len();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), all);
        assert_eq!(ORDER.local_url(), "http://127.0.0.1:8082");
        assert_eq!(
            INVENTORY.listen_addr(),
            SocketAddr::from(([0, 0, 0, 0], 50051))
        );
    }
}
