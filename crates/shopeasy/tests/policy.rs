//! The launcher's policy check (issue 13, "Done when"): an order attempt
//! timeout × retries longer than the gateway's activity timeout refuses to
//! start, naming both keys, before anything listens; the default settings
//! pass it and start.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use shopeasy::system::{Options, System, check_settings};

fn options(dir: &std::path::Path, env: &[(&str, &str)]) -> Options {
    let mut options = Options::for_tests(dir);
    options.env = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_edge_outlasting_the_gateway_refuses_to_start_naming_both_keys() {
    let dir = tempfile::tempdir().unwrap();
    // 3 s × (2 retries + 1) = 9 s of Inventory attempts under a gateway
    // that gives up after 5 s of silence.
    let options = options(
        dir.path(),
        &[("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "5")],
    );
    let Err(err) = System::start(options).await else {
        panic!("started although the policy is impossible")
    };
    let message = format!("{err:#}");
    for key in [
        "resilience.inventory.timeout_seconds",
        "resilience.inventory.max_retries",
        "resilience.gateway.activity_timeout_seconds",
    ] {
        assert!(message.contains(key), "{key} not in: {message}");
    }
    // Refused before anything was written: no database was created.
    assert!(
        !dir.path().join("order.db").exists(),
        "nothing started: {:?}",
        std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defaults_pass_the_check_and_start() {
    let dir = tempfile::tempdir().unwrap();
    check_settings(&options(dir.path(), &[])).unwrap();
    let system = System::start(options(dir.path(), &[])).await.unwrap();
    system.stop().await.unwrap();
}
