//! `deploy/SETTINGS.md` is generated from the settings types: this test
//! fails when it is out of date. Regenerate with
//! `SHOPEASY_BLESS=1 cargo test -p shopeasy-deploy-check --test reference`.

mod common;

use common::{read, root};
use shopeasy_deploy_check::reference::{markdown, rows};

fn generated() -> String {
    let mut out = String::from(
        "<!-- Generated from the settings types by crates/deploy-check (tests/reference.rs): do not edit. -->\n\
         # Settings reference\n\n\
         Every key each service reads, its environment variable, its default in code and the\n\
         values it accepts (an invalid value stops the service at start-up, naming the key).\n\
         Key `a.b.c` is variable `A__B__C`; top-level keys are plain. What each key does is\n\
         documented on its field in the service's `settings.rs`, and `--print-defaults` prints\n\
         them all as a file you can edit and pass back with `--config`.\n\n\
         A credential (a `*_token` key) can instead come from a file, as Docker and Kubernetes\n\
         mount secrets: `<VARIABLE>_FILE=/path` (for example `SERVICE_TOKEN_FILE`) reads the\n\
         file, trailing whitespace trimmed, and the credential rules apply to its content. A\n\
         non-empty `<VARIABLE>` wins over its `_FILE`; an unreadable file stops the service,\n\
         naming the variable and the path. Only credentials are read from files.\n\n",
    );
    for section in [
        markdown(
            "gateway (`shopeasy-gateway`)",
            &rows::<shopeasy_gateway::settings::GatewaySettings>(),
        ),
        markdown(
            "product (`shopeasy-product`)",
            &rows::<shopeasy_product::settings::ProductSettings>(),
        ),
        markdown(
            "order (`shopeasy-order`)",
            &rows::<shopeasy_order::settings::OrderSettings>(),
        ),
        markdown(
            "inventory (`shopeasy-inventory`)",
            &rows::<shopeasy_inventory::settings::InventorySettings>(),
        ),
        markdown(
            "identity, the demo issuer (`shopeasy-identity`; compose and the demo overlay only)",
            &rows::<shopeasy_identity::server::IdentitySettings>(),
        ),
    ] {
        out.push_str(&section);
        out.push('\n');
    }
    out
}

#[test]
fn settings_reference_is_up_to_date() {
    let want = generated();
    if std::env::var("SHOPEASY_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(root().join("deploy/SETTINGS.md"), &want).expect("write deploy/SETTINGS.md");
    }
    assert!(
        read("deploy/SETTINGS.md") == want,
        "deploy/SETTINGS.md is out of date; regenerate with SHOPEASY_BLESS=1 cargo test -p shopeasy-deploy-check --test reference"
    );
}

#[test]
fn the_reference_names_each_range_from_validation() {
    let rows = rows::<shopeasy_order::settings::OrderSettings>();
    let timeout = rows
        .iter()
        .find(|r| r.key == "resilience.inventory.timeout_seconds")
        .expect("row");
    assert_eq!(timeout.env, "RESILIENCE__INVENTORY__TIMEOUT_SECONDS");
    assert_eq!(timeout.default, "3");
    assert!(timeout.allowed.contains("between"), "{timeout:?}");
    let format = rows.iter().find(|r| r.key == "log.format").expect("row");
    assert_eq!(format.allowed, "one of auto, text, json");
}
