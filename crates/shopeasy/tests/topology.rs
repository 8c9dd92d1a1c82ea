//! One topology: the services' ports and edges are declared once, in
//! `shopeasy_runtime::topology`, and everything else derives from it. These
//! tests fail if a settings default, the launcher's edge list or an upstream
//! URL default is written down a second time and drifts; with them passing,
//! changing a port in the topology changes it everywhere and nothing else
//! has to be edited.

use shopeasy_gateway::settings::GatewaySettings;
use shopeasy_inventory::settings::InventorySettings;
use shopeasy_order::settings::OrderSettings;
use shopeasy_product::settings::ProductSettings;
use shopeasy_runtime::{
    lifecycle::Service,
    settings::ProcessSettings,
    topology::{self, Node},
};

fn assert_defaults(node: &Node, process: &ProcessSettings, name: &str) {
    assert_eq!(process.listen_addr, node.listen_addr(), "{}", node.name);
    assert_eq!(process.admin_addr, node.admin_addr(), "{}", node.name);
    assert_eq!(name, node.binary, "{}", node.name);
}

#[test]
fn every_settings_default_listens_where_the_topology_says() {
    assert_defaults(
        &topology::GATEWAY,
        &GatewaySettings::default().process,
        shopeasy_gateway::App::NAME,
    );
    assert_defaults(
        &topology::PRODUCT,
        &ProductSettings::default().process,
        shopeasy_product::App::NAME,
    );
    assert_defaults(
        &topology::ORDER,
        &OrderSettings::default().process,
        shopeasy_order::App::NAME,
    );
    assert_defaults(
        &topology::INVENTORY,
        &InventorySettings::default().process,
        shopeasy_inventory::App::NAME,
    );
}

#[test]
fn every_upstream_default_is_the_topology_edge() {
    let gateway = GatewaySettings::default();
    assert_eq!(gateway.routes.product_url, topology::PRODUCT.local_url());
    assert_eq!(gateway.routes.order_url, topology::ORDER.local_url());
    let order = OrderSettings::default();
    assert_eq!(order.inventory.url, topology::INVENTORY.local_url());
    assert_eq!(order.product.url, topology::PRODUCT.local_url());
    // Those are exactly the edges the topology declares for them.
    let upstreams = |node: &Node| -> Vec<&str> { node.upstreams().map(|n| n.name).collect() };
    assert_eq!(upstreams(&topology::GATEWAY), ["product", "order"]);
    assert_eq!(upstreams(&topology::ORDER), ["inventory", "product"]);
}

#[test]
fn the_launcher_proxies_the_topology_edges() {
    let edges: Vec<String> = topology::service_edges()
        .iter()
        .map(topology::Edge::name)
        .collect();
    assert_eq!(shopeasy::system::edges(), edges);
}
