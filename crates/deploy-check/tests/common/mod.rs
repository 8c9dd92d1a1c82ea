//! What every test file here shares: the repository's files and the
//! catalogue with each service's defaults from its settings type.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use shopeasy_deploy_check::catalogue::{self, ServiceSpec, defaults_of};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the repository, as text.
pub fn read(path: &str) -> String {
    let full = root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The four services, each with the defaults its code has.
pub fn specs() -> Vec<ServiceSpec> {
    catalogue::services()
        .into_iter()
        .map(|spec| {
            let defaults = match spec.name {
                "gateway" => defaults_of::<shopeasy_gateway::settings::GatewaySettings>(),
                "product" => defaults_of::<shopeasy_product::settings::ProductSettings>(),
                "order" => defaults_of::<shopeasy_order::settings::OrderSettings>(),
                _ => defaults_of::<shopeasy_inventory::settings::InventorySettings>(),
            };
            spec.with_defaults(defaults)
        })
        .collect()
}

/// The demo issuer with the defaults of its settings type: compose runs it
/// beside the four services.
pub fn identity_spec() -> ServiceSpec {
    catalogue::identity()
        .with_defaults(defaults_of::<shopeasy_identity::server::IdentitySettings>())
}

/// What compose runs of ours: the four services and the demo issuer.
pub fn compose_specs() -> Vec<ServiceSpec> {
    let mut specs = specs();
    specs.push(identity_spec());
    specs
}

/// `text` with `from` replaced by `to` exactly once; panics when `from` is
/// not there, so a mutation test cannot pass by mutating nothing.
pub fn mutate(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "mutation target {from:?} not found");
    text.replacen(from, to, 1)
}

/// A copy of the repository's k8s/ tree, with `file` (relative to k8s/)
/// changed `from` → `to` when a change is given: what a mutation test
/// renders or loads instead of the real manifests.
pub fn k8s_copy(change: Option<(&str, &str, &str)>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&root().join("k8s"), dir.path());
    if let Some((file, from, to)) = change {
        let target = dir.path().join(file);
        let text = std::fs::read_to_string(&target).expect("read");
        std::fs::write(&target, mutate(&text, from, to)).expect("write");
    }
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}
