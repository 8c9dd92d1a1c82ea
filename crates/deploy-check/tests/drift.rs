//! The defaults in code equal every copy (compose `${VAR:-default}`,
//! `.env.example`, the Kubernetes ConfigMaps); no service is given a setting
//! it does not read; each service has SPEC's ports and probes. Then the same
//! checks on deliberately broken copies, to prove each drift is caught.

mod common;

use common::{mutate, read, root, specs};
use shopeasy_deploy_check::{
    Finding,
    catalogue::defaults_of,
    compose::{self, Compose},
    dotenv, kube, report, yaml,
};

fn compose_findings(text: &str) -> Vec<Finding> {
    compose::check(&Compose::parse(text).expect("compose parses"), &specs())
}

fn env_findings(env: &str, compose_text: &str) -> Vec<Finding> {
    let compose = Compose::parse(compose_text).expect("compose parses");
    dotenv::check(
        &dotenv::parse(env).expect(".env.example parses"),
        &compose,
        &specs(),
    )
}

fn base_findings(replace: Option<(&str, &str, &str)>) -> Vec<Finding> {
    // Copy the base to a temporary folder (mutated if asked) and load it.
    let dir = tempfile::tempdir().expect("tempdir");
    let base = root().join("k8s/base");
    for entry in std::fs::read_dir(&base).expect("k8s/base") {
        let path = entry.expect("entry").path();
        let mut text = std::fs::read_to_string(&path).expect("read");
        let file = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        if let Some((target, from, to)) = replace
            && target == file
        {
            text = mutate(&text, from, to);
        }
        std::fs::write(dir.path().join(&file), text).expect("write");
    }
    let objects = kube::load_kustomization(dir.path()).expect("base loads");
    kube::check(&objects, &specs(), true)
}

fn assert_clean(what: &str, findings: &[Finding]) {
    assert!(findings.is_empty(), "{what} drifted:\n{}", report(findings));
}

fn assert_caught(findings: &[Finding], needle: &str) {
    assert!(
        findings.iter().any(|f| f.to_string().contains(needle)),
        "expected a finding mentioning {needle:?}, got:\n{}",
        report(findings)
    );
}

#[test]
fn every_service_crate_provides_its_defaults() {
    for spec in specs() {
        let defaults = spec.defaults.expect("defaults");
        assert!(
            defaults.contains_key("LISTEN_ADDR") && defaults.contains_key("ADMIN_ADDR"),
            "{}",
            spec.name
        );
        assert!(defaults.contains_key("LOG__FORMAT"), "{}", spec.name);
    }
}

#[test]
fn compose_repeats_the_code_defaults_and_wires_spec_ports_and_probes() {
    assert_clean(
        "docker-compose.yml",
        &compose_findings(&read("docker-compose.yml")),
    );
}

#[test]
fn env_example_lists_every_compose_variable_with_its_default() {
    assert_clean(
        ".env.example",
        &env_findings(&read(".env.example"), &read("docker-compose.yml")),
    );
}

#[test]
fn kubernetes_base_repeats_the_defaults_and_wires_spec_ports_and_probes() {
    assert_clean("k8s/base", &base_findings(None));
}

#[test]
fn prometheus_scrapes_every_admin_listener() {
    assert_clean(
        "deploy/prometheus/prometheus.yml",
        &compose::check_scrape(&read("deploy/prometheus/prometheus.yml"), &specs()),
    );
}

#[test]
fn postgres_init_script_copies_are_identical() {
    assert_eq!(
        read("deploy/postgres/init-databases.sql"),
        read("k8s/overlays/demo/postgres/init-databases.sql"),
        "compose and the demo overlay must create the same databases"
    );
}

fn fault_proxy_findings(compose_text: &str, proxies: &str) -> Vec<Finding> {
    let compose = Compose::parse(compose_text).expect("compose parses");
    compose::check_fault_proxies(&compose, proxies, &specs())
}

#[test]
fn every_compose_edge_goes_through_its_fault_proxy() {
    assert_clean(
        "deploy/faults/proxies.json",
        &fault_proxy_findings(
            &read("docker-compose.yml"),
            &read("deploy/faults/proxies.json"),
        ),
    );
}

#[test]
fn an_edge_that_bypasses_or_misnames_its_fault_proxy_is_caught() {
    let compose = read("docker-compose.yml");
    let proxies = read("deploy/faults/proxies.json");
    let bypass = mutate(
        &compose,
        "INVENTORY__URL: http://faults:60051",
        "INVENTORY__URL: http://inventory:50051",
    );
    assert_caught(
        &fault_proxy_findings(&bypass, &proxies),
        "services.order: INVENTORY__URL = \"http://inventory:50051\": edge order-inventory goes through its fault proxy, http://faults:60051",
    );
    let renamed = mutate(&proxies, "\"order-inventory\"", "\"order-stock\"");
    assert_caught(
        &fault_proxy_findings(&compose, &renamed),
        "expected one per edge",
    );
    let elsewhere = mutate(&proxies, "\"product:8081\"", "\"order:8082\"");
    assert_caught(
        &fault_proxy_findings(&compose, &elsewhere),
        "gateway-product forwards to order:8082, expected product:8081",
    );
    let unordered = mutate(&compose, "      faults: {condition: service_healthy}\n", "");
    assert_caught(
        &fault_proxy_findings(&unordered, &proxies),
        "services.gateway: must start after `faults` is healthy",
    );
}

#[test]
fn the_demo_overlays_fault_proxy_is_composes_order_inventory_proxy() {
    let proxies = |path: &str| -> Vec<serde_json::Value> {
        serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let compose = proxies("deploy/faults/proxies.json");
    let overlay = proxies("k8s/overlays/demo/faults/proxies.json");
    let edge = compose
        .iter()
        .find(|p| p["name"] == "order-inventory")
        .expect("compose proxies order-inventory");
    assert_eq!(overlay, vec![edge.clone()], "same name, ports and upstream");
}

#[test]
fn a_fault_api_published_beyond_loopback_is_caught() {
    let text = mutate(
        &read("docker-compose.yml"),
        "\"127.0.0.1:${FAULTS_API_PORT:-8474}:8474\"",
        "\"${FAULTS_API_PORT:-8474}:8474\"",
    );
    assert_caught(
        &compose_findings(&text),
        "services.faults: publishes \"${FAULTS_API_PORT:-8474}:8474\": the fault API is published on 127.0.0.1 only",
    );
}

#[test]
fn nothing_in_a_plain_up_depends_on_an_opt_in_viewer() {
    let text = mutate(
        &read("docker-compose.yml"),
        "      faults: {condition: service_healthy}\n      product: {condition: service_healthy}\n      order: {condition: service_healthy}\n",
        "      faults: {condition: service_healthy}\n      product: {condition: service_healthy}\n      order: {condition: service_healthy}\n      jaeger: {condition: service_started}\n",
    );
    assert_caught(
        &compose_findings(&text),
        "services.gateway: depends on `jaeger`, which only starts with profile [\"viewers\"]",
    );
}

#[test]
fn the_demo_seed_is_on_in_compose_and_off_in_code() {
    let compose = Compose::parse(&read("docker-compose.yml")).expect("compose");
    for service in ["product", "inventory"] {
        assert_eq!(
            compose.services[service]
                .environment
                .get("DEMO_SEED")
                .map(String::as_str),
            Some("true"),
            "{service} seeds the demo in compose"
        );
        let spec = specs()
            .into_iter()
            .find(|s| s.name == service)
            .expect("spec");
        assert_eq!(
            spec.defaults.expect("defaults").get("DEMO_SEED"),
            Some(&serde_json::json!(false)),
            "{service}: off unless a deployment asks"
        );
    }
}

#[test]
fn a_compose_default_that_differs_from_the_code_is_caught() {
    let text = mutate(
        &read("docker-compose.yml"),
        "${RESILIENCE__INVENTORY__TIMEOUT_SECONDS:-3}",
        "${RESILIENCE__INVENTORY__TIMEOUT_SECONDS:-4}",
    );
    assert_caught(
        &compose_findings(&text),
        "RESILIENCE__INVENTORY__TIMEOUT_SECONDS: compose default 4 differs from the default in code (3)",
    );
}

#[test]
fn the_shared_retry_budget_anchor_is_checked_for_every_service_using_it() {
    let text = mutate(
        &read("docker-compose.yml"),
        "${RESILIENCE__RETRY_BUDGET__RATIO:-0.2}",
        "${RESILIENCE__RETRY_BUDGET__RATIO:-0.3}",
    );
    let findings = compose_findings(&text);
    assert_caught(
        &findings,
        "services.gateway: RESILIENCE__RETRY_BUDGET__RATIO: compose default 0.3",
    );
    assert_caught(
        &findings,
        "services.order: RESILIENCE__RETRY_BUDGET__RATIO: compose default 0.3",
    );
}

#[test]
fn a_changed_default_in_code_is_caught_in_every_copy() {
    // Simulate the code moving on: the gateway's activity timeout becomes 20 s.
    let mut specs = specs();
    let gateway = specs
        .iter_mut()
        .find(|s| s.name == "gateway")
        .expect("gateway");
    let mut defaults = defaults_of::<shopeasy_gateway::settings::GatewaySettings>();
    defaults.insert(
        "RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS".into(),
        serde_json::json!(20.0),
    );
    gateway.defaults = Some(defaults);

    let compose = Compose::parse(&read("docker-compose.yml")).expect("compose");
    assert_caught(
        &compose::check(&compose, &specs),
        "compose default 30 differs from the default in code (20)",
    );
    let env = dotenv::parse(&read(".env.example")).expect("env");
    assert_caught(
        &dotenv::check(&env, &compose, &specs),
        "RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS=30 differs from gateway's default in code (20)",
    );
    let objects = kube::load_kustomization(&root().join("k8s/base")).expect("base");
    assert_caught(
        &kube::check(&objects, &specs, true),
        "RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS=30 (from ConfigMap gateway) differs",
    );
}

#[test]
fn a_stray_or_misspelt_setting_in_compose_is_caught() {
    let text = mutate(
        &read("docker-compose.yml"),
        "      RESILIENCE__INVENTORY__MAX_RETRIES:",
        "      RESILIENCE__INVENTORY__TIMEOUT_SECS: \"3\"\n      RESILIENCE__INVENTORY__MAX_RETRIES:",
    );
    assert_caught(
        &compose_findings(&text),
        "RESILIENCE__INVENTORY__TIMEOUT_SECS is not a setting shopeasy-order reads",
    );
    // A setting of another service is stray too: the gateway has no database.
    let text = mutate(
        &read("docker-compose.yml"),
        "      ROUTES__ORDER_URL: http://faults:18082\n",
        "      ROUTES__ORDER_URL: http://faults:18082\n      DATABASE_URL: sqlite:gateway.db\n",
    );
    assert_caught(
        &compose_findings(&text),
        "services.gateway: DATABASE_URL is not a setting shopeasy-gateway reads",
    );
}

#[test]
fn a_tunable_written_as_a_literal_in_compose_is_caught() {
    let text = mutate(
        &read("docker-compose.yml"),
        "${RESILIENCE__GATEWAY__GET_RETRIES:-2}",
        "2",
    );
    assert_caught(
        &compose_findings(&text),
        "RESILIENCE__GATEWAY__GET_RETRIES = \"2\": a tunable setting must be written ${RESILIENCE__GATEWAY__GET_RETRIES:-2}",
    );
}

#[test]
fn a_resilience_setting_left_out_of_compose_is_caught() {
    let text = mutate(
        &read("docker-compose.yml"),
        "      RESILIENCE__STOCK_CACHE__TTL_SECONDS: ${RESILIENCE__STOCK_CACHE__TTL_SECONDS:-2}\n",
        "",
    );
    assert_caught(
        &compose_findings(&text),
        "services.order: RESILIENCE__STOCK_CACHE__TTL_SECONDS missing",
    );
}

#[test]
fn wrong_ports_probes_start_order_and_published_ports_in_compose_are_caught() {
    let base = read("docker-compose.yml");
    let probe = mutate(
        &base,
        "http://127.0.0.1:9082/health/ready",
        "http://127.0.0.1:9082/health/live",
    );
    assert_caught(
        &compose_findings(&probe),
        "services.order: healthcheck.test",
    );
    let port = mutate(
        &base,
        "      ROUTES__PRODUCT_URL:",
        "      LISTEN_ADDR: 0.0.0.0:8000\n      ROUTES__PRODUCT_URL:",
    );
    assert_caught(
        &compose_findings(&port),
        "services.gateway: LISTEN_ADDR port 8000, SPEC says 8080",
    );
    let order = mutate(&base, "      inventory: {condition: service_healthy}\n", "");
    assert_caught(
        &compose_findings(&order),
        "services.order: must start after `inventory` is healthy",
    );
    let published = mutate(
        &base,
        "    command: [shopeasy-product]\n",
        "    command: [shopeasy-product]\n    ports: [\"8081:8081\"]\n",
    );
    assert_caught(&compose_findings(&published), "services.product: publishes");
    let writable = mutate(&base, "  read_only: true\n", "  read_only: false\n");
    assert_caught(
        &compose_findings(&writable),
        "services.gateway: must run as a non-root user with read_only: true",
    );
    let shell = mutate(
        &base,
        "[\"CMD\", \"shopeasy-probe\", \"http://127.0.0.1:9083/health/ready\"]",
        "[\"CMD-SHELL\", \"curl -f http://127.0.0.1:9083/health/ready\"]",
    );
    assert_caught(
        &compose_findings(&shell),
        "services.inventory: healthcheck.test must be exec form",
    );
}

#[test]
fn a_changed_or_missing_env_example_value_is_caught() {
    let compose = read("docker-compose.yml");
    let changed = mutate(
        &read(".env.example"),
        "RESILIENCE__PRODUCT__MAX_RETRIES=2",
        "RESILIENCE__PRODUCT__MAX_RETRIES=5",
    );
    assert_caught(
        &env_findings(&changed, &compose),
        "RESILIENCE__PRODUCT__MAX_RETRIES=5 differs from order's default in code (2)",
    );
    let missing = mutate(
        &read(".env.example"),
        "RESILIENCE__PRODUCT__MAX_RETRIES=2\n",
        "",
    );
    assert_caught(
        &env_findings(&missing, &compose),
        "RESILIENCE__PRODUCT__MAX_RETRIES is read by docker-compose.yml but not listed",
    );
    let stale = format!("{}RESILIENCE__PRODUCT__RETRIES=2\n", read(".env.example"));
    assert_caught(
        &env_findings(&stale, &compose),
        "RESILIENCE__PRODUCT__RETRIES is not read by docker-compose.yml (stale)",
    );
    let port = mutate(
        &read(".env.example"),
        "GATEWAY_PORT=8080",
        "GATEWAY_PORT=8000",
    );
    assert_caught(
        &env_findings(&port, &compose),
        "GATEWAY_PORT=8000 differs from docker-compose.yml's default (8080)",
    );
}

#[test]
fn a_changed_configmap_value_is_caught() {
    let findings = base_findings(Some((
        "config.yaml",
        "RESILIENCE__RETRY_BUDGET__WINDOW_SECONDS: \"10\"",
        "RESILIENCE__RETRY_BUDGET__WINDOW_SECONDS: \"15\"",
    )));
    assert_caught(
        &findings,
        "Deployment gateway: RESILIENCE__RETRY_BUDGET__WINDOW_SECONDS=15 (from ConfigMap shopeasy-retry-budget) differs from the default in code (10)",
    );
    assert_caught(
        &findings,
        "Deployment order: RESILIENCE__RETRY_BUDGET__WINDOW_SECONDS=15",
    );
}

#[test]
fn a_stray_setting_in_a_kubernetes_secret_or_configmap_is_caught() {
    // Inventory has no Redis.
    let findings = base_findings(Some((
        "secrets.example.yaml",
        "  DATABASE_URL: postgres://shopeasy:change-me-demo-password@postgres:5432/inventory\n",
        "  DATABASE_URL: postgres://shopeasy:change-me-demo-password@postgres:5432/inventory\n  REDIS_URL: redis://redis:6379\n",
    )));
    assert_caught(
        &findings,
        "Deployment inventory: REDIS_URL (from Secret inventory-storage) is not a setting shopeasy-inventory reads",
    );
    let findings = base_findings(Some((
        "config.yaml",
        "  PRODUCT__URL: http://product:8081\n",
        "  PRODUCT__URL: http://product:8081\n  PRODUCT__TIMEOUT_SECONDS: \"3\"\n",
    )));
    assert_caught(
        &findings,
        "Deployment order: PRODUCT__TIMEOUT_SECONDS (from ConfigMap order) is not a setting shopeasy-order reads",
    );
}

#[test]
fn wrong_ports_and_probes_in_kubernetes_are_caught() {
    let findings = base_findings(Some((
        "inventory.yaml",
        "{name: grpc, containerPort: 50051, protocol: TCP}",
        "{name: grpc, containerPort: 50052, protocol: TCP}",
    )));
    assert_caught(
        &findings,
        "Deployment inventory: needs containerPort 50051 named grpc",
    );
    let findings = base_findings(Some((
        "product.yaml",
        "httpGet: {path: /health/ready, port: admin}",
        "httpGet: {path: /health/live, port: admin}",
    )));
    assert_caught(
        &findings,
        "Deployment product: readinessProbe must be httpGet /health/ready on the admin port",
    );
    let findings = base_findings(Some(("order.yaml", "  replicas: 2\n", "  replicas: 1\n")));
    assert_caught(&findings, "Deployment order: replicas must be at least 2");
}

#[test]
fn a_network_edge_outside_spec_is_caught() {
    // Let the gateway call inventory directly: not an edge of SPEC §1.
    let findings = base_findings(Some((
        "network-policies.yaml",
        "      ports: [{protocol: TCP, port: 8082}]\n---",
        "      ports: [{protocol: TCP, port: 8082}]\n    - ports: [{protocol: TCP, port: 50051}]\n---",
    )));
    assert_caught(
        &findings,
        "gateway → inventory:50051 is allowed but is no SPEC edge",
    );
    let findings = base_findings(Some((
        "network-policies.yaml",
        "            matchLabels: {app.kubernetes.io/name: inventory}\n      ports: [{protocol: TCP, port: 50051}]",
        "            matchLabels: {app.kubernetes.io/name: inventory}\n      ports: [{protocol: TCP, port: 50052}]",
    )));
    assert_caught(
        &findings,
        "order → inventory:50051 is a SPEC edge but is not allowed",
    );
}

#[test]
fn the_image_builds_every_binary_the_deployments_run() {
    let dockerfile = read("Dockerfile");
    let binaries = specs()
        .into_iter()
        .map(|s| s.binary)
        .chain(["shopeasy-probe"]);
    for binary in binaries {
        assert!(
            dockerfile.contains(&format!("--bin {binary}"))
                && dockerfile.contains(&format!("target/release/{binary}")),
            "Dockerfile does not build and copy {binary}"
        );
    }
    let instructions: Vec<&str> = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(
        !instructions.iter().any(|l| l.starts_with("HEALTHCHECK")),
        "compose and Kubernetes probe; the image has no HEALTHCHECK"
    );
    assert!(
        instructions.iter().any(|l| l.starts_with("USER 65532")),
        "the runtime stage runs as non-root"
    );
    assert!(
        instructions
            .iter()
            .any(|l| l.contains("cargo chef cook") && l.contains("--locked")),
        "dependencies cooked with --locked"
    );
    assert!(
        instructions
            .iter()
            .any(|l| l.contains("cargo build") && l.contains("--locked")),
        "built with --locked"
    );
}

#[test]
fn kubernetes_runs_the_workspace_version() {
    let kustomization = yaml::to_json(&read("k8s/base/kustomization.yaml")).expect("kustomization");
    let tag = kustomization["images"][0]["newTag"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        tag,
        env!("CARGO_PKG_VERSION"),
        "k8s/base/kustomization.yaml images[0].newTag"
    );
}

#[test]
fn demo_credentials_agree_between_postgres_and_the_service_secrets() {
    let kustomization =
        yaml::to_json(&read("k8s/overlays/demo/kustomization.yaml")).expect("kustomization");
    let literal = |name: &str| {
        kustomization["secretGenerator"][0]["literals"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| {
                l.as_str()?
                    .strip_prefix(&format!("{name}="))
                    .map(str::to_owned)
            })
            .next()
            .unwrap_or_else(|| panic!("{name} missing from the demo's postgres secretGenerator"))
    };
    let userinfo = format!(
        "{}:{}@",
        literal("POSTGRES_USER"),
        literal("POSTGRES_PASSWORD")
    );
    let objects = kube::load_kustomization(&root().join("k8s/base")).expect("base");
    let mut urls = 0;
    for secret in objects.iter().filter(|o| kube::kind(o) == "Secret") {
        if let Some(url) = secret["stringData"]["DATABASE_URL"].as_str() {
            urls += 1;
            assert!(
                url.contains(&userinfo),
                "{}: {url} does not use the demo Postgres credentials",
                kube::name(secret)
            );
        }
    }
    assert_eq!(
        urls, 3,
        "product, order and inventory each have a DATABASE_URL"
    );
}
