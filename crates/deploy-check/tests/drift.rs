//! The defaults in code equal every copy (compose `${VAR:-default}`,
//! `.env.example`, the Kubernetes ConfigMaps); no service is given a setting
//! it does not read; each service has SPEC's ports and probes. Then the same
//! checks on deliberately broken copies, to prove each drift is caught.

mod common;

use common::{compose_specs, k8s_copy, mutate, read, root, specs};
use shopeasy_deploy_check::{
    Finding,
    catalogue::defaults_of,
    compose::{self, Compose},
    dotenv, kube, report, yaml,
};

fn compose_findings(text: &str) -> Vec<Finding> {
    compose::check(
        &Compose::parse(text).expect("compose parses"),
        &compose_specs(),
    )
}

fn env_findings(env: &str, compose_text: &str) -> Vec<Finding> {
    let compose = Compose::parse(compose_text).expect("compose parses");
    dotenv::check(
        &dotenv::parse(env).expect(".env.example parses"),
        &compose,
        &compose_specs(),
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
    let mut objects = kube::load_kustomization(dir.path()).expect("base loads");
    // The base references the storage Secrets a cluster provides; check them
    // as the demo overlay provides them.
    let mut secrets = read("k8s/overlays/demo/secrets.example.yaml");
    if let Some(("secrets.example.yaml", from, to)) = replace {
        secrets = mutate(&secrets, from, to);
    }
    objects.extend(yaml::documents(&secrets).expect("demo secrets parse"));
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
        &compose::check_scrape(&read("deploy/prometheus/prometheus.yml"), &compose_specs()),
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
fn the_console_is_published_on_loopback_unless_told_otherwise() {
    let text = read("docker-compose.yml");
    assert!(
        text.contains("\"${SHOPEASY_BIND:-127.0.0.1}:${CONSOLE_PORT:-8090}:8090\""),
        "the console's page is published like the viewers"
    );
    let open = mutate(
        &text,
        "\"${SHOPEASY_BIND:-127.0.0.1}:${CONSOLE_PORT:-8090}:8090\"",
        "\"${CONSOLE_PORT:-8090}:8090\"",
    );
    assert_caught(
        &compose_findings(&open),
        "services.console: publishes \"${CONSOLE_PORT:-8090}:8090\" on all interfaces",
    );
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
fn a_file_variable_is_accepted_for_credentials_only() {
    // Compose as written gives both services their token as a file: clean.
    let text = read("docker-compose.yml");
    assert!(text.contains("      SERVICE_TOKEN_FILE: /run/shopeasy/service_token\n"));
    assert!(text.contains("      INVENTORY__SERVICE_TOKEN_FILE: /run/shopeasy/service_token\n"));
    let clean = compose_findings(&text);
    assert!(
        !clean.iter().any(|f| f.message.contains("_FILE")),
        "{}",
        report(&clean)
    );
    // A non-credential setting as a file, a credential the service does not
    // have, and an unknown key are all refused.
    for (service, after, var) in [
        (
            "inventory",
            "      SERVICE_TOKEN_FILE: /run/shopeasy/service_token\n",
            "DATABASE_URL_FILE",
        ),
        (
            "gateway",
            "      ROUTES__ORDER_URL: http://faults:18082\n",
            "SERVICE_TOKEN_FILE",
        ),
        (
            "order",
            "      INVENTORY__SERVICE_TOKEN_FILE: /run/shopeasy/service_token\n",
            "INVENTORY__SECRET_TOKEN_FILE",
        ),
    ] {
        let text = mutate(&text, after, &format!("{after}      {var}: /run/x\n"));
        assert_caught(
            &compose_findings(&text),
            &format!("services.{service}: {var}: only a credential"),
        );
    }
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

/// The fault proxy and the console run the same image as the services and
/// are hardened the same way: non-root, read-only, no capabilities, no new
/// privileges.
#[test]
fn the_fault_proxy_and_the_console_are_hardened_like_the_services() {
    let text = read("docker-compose.yml");
    for (from, to, needle) in [
        (
            "  faults:\n    <<: *shopeasy\n",
            "  faults:\n    <<: *shopeasy\n    user: \"0:0\"\n",
            "services.faults: must run as a non-root user with read_only: true and cap_drop: [ALL]",
        ),
        (
            "  console:\n    <<: *shopeasy\n",
            "  console:\n    <<: *shopeasy\n    read_only: false\n",
            "services.console: must run as a non-root user with read_only: true and cap_drop: [ALL]",
        ),
        (
            "  console:\n    <<: *shopeasy\n",
            "  console:\n    <<: *shopeasy\n    cap_drop: []\n",
            "services.console: must run as a non-root user with read_only: true and cap_drop: [ALL]",
        ),
        (
            "  faults:\n    <<: *shopeasy\n",
            "  faults:\n    <<: *shopeasy\n    security_opt: []\n",
            "services.faults: must set security_opt: [\"no-new-privileges:true\"]",
        ),
        // The shared anchor: every service and both tools lose it.
        (
            "  security_opt: [\"no-new-privileges:true\"]\n",
            "",
            "services.order: must set security_opt: [\"no-new-privileges:true\"]",
        ),
    ] {
        assert_caught(&compose_findings(&mutate(&text, from, to)), needle);
    }
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

/// A wiring value (an address, a URL, a token) in `.env.example` has no
/// default in code to repeat: it repeats compose's, at every place compose
/// reads the variable, so a copied `.env` does not rewire the stack.
#[test]
fn a_wiring_value_in_env_example_that_differs_from_compose_is_caught() {
    let env = read(".env.example");
    let compose = read("docker-compose.yml");
    let moved = mutate(
        &env,
        "AUTH__JWKS_URL=http://identity:8085/.well-known/jwks.json",
        "AUTH__JWKS_URL=http://identity:8086/.well-known/jwks.json",
    );
    assert_caught(
        &env_findings(&moved, &compose),
        "AUTH__JWKS_URL=http://identity:8086/.well-known/jwks.json differs from docker-compose.yml's default (http://identity:8085/.well-known/jwks.json)",
    );
    let rewired = mutate(
        &compose,
        "${ROUTES__IDENTITY_URL-http://identity:8085}",
        "${ROUTES__IDENTITY_URL-http://identity:8086}",
    );
    assert_caught(
        &env_findings(&env, &rewired),
        "ROUTES__IDENTITY_URL=http://identity:8085 differs from docker-compose.yml's default (http://identity:8086)",
    );
    // Not only the first place compose reads it: here the last of several.
    let one_of_many = mutate(
        &compose,
        "\"${SHOPEASY_BIND:-127.0.0.1}:${PROMETHEUS_PORT:-9090}:9090\"",
        "\"${SHOPEASY_BIND:-0.0.0.0}:${PROMETHEUS_PORT:-9090}:9090\"",
    );
    assert_caught(
        &env_findings(&env, &one_of_many),
        "SHOPEASY_BIND=127.0.0.1 differs from docker-compose.yml's default (0.0.0.0)",
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
    // The admin listener has no /health/startup: a pod probed there never
    // starts.
    let findings = base_findings(Some((
        "gateway.yaml",
        "startupProbe:\n            httpGet: {path: /health/live, port: admin}",
        "startupProbe:\n            httpGet: {path: /health/startup, port: admin}",
    )));
    assert_caught(
        &findings,
        "Deployment gateway: startupProbe must be httpGet /health/live or /health/ready on the admin port",
    );
    let findings = base_findings(Some(("order.yaml", "  replicas: 2\n", "  replicas: 1\n")));
    assert_caught(&findings, "Deployment order: replicas must be at least 2");
}

#[test]
fn a_network_edge_outside_spec_is_caught() {
    // Let the gateway call inventory directly: not an edge of SPEC §1.
    let findings = base_findings(Some((
        "network-policies.yaml",
        // The first is the gateway's (its JWKS provider on 443).
        "    - ports: [{protocol: TCP, port: 443}]\n---",
        "    - ports: [{protocol: TCP, port: 443}]\n    - ports: [{protocol: TCP, port: 50051}]\n---",
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

/// What every service needs besides SPEC's edges: without DNS no name
/// resolves (every call fails), without the scrape rule no metrics.
#[test]
fn a_service_without_dns_or_a_scrape_rule_is_caught() {
    let findings = base_findings(Some((
        "network-policies.yaml",
        "{protocol: UDP, port: 53}",
        "{protocol: UDP, port: 5353}",
    )));
    assert_caught(
        &findings,
        "inventory cannot resolve names (DNS over UDP, port 53)",
    );
    let findings = base_findings(Some((
        "network-policies.yaml",
        "ports: [{protocol: TCP, port: 9081}]",
        "ports: [{protocol: TCP, port: 9089}]",
    )));
    assert_caught(&findings, "Prometheus cannot scrape product:9081");
}

/// Each service's own side: a rule that lets in anyone, a component
/// outside SPEC's callers, or Prometheus beyond the admin port is caught,
/// though no pair of SPEC's services gains an edge by it.
#[test]
fn a_service_that_lets_in_more_than_its_spec_callers_is_caught() {
    for (from, to, needle) in [
        // A second rule on product's port with no `from`: anyone.
        (
            "            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 8081}]\n",
            "            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 8081}]\n    - ports: [{protocol: TCP, port: 8081}]\n",
            "NetworkPolicy: product admits anyone on 8081: SPEC lets in only gateway, order, faults on 8081 and prometheus on 9081",
        ),
        // Order's caller widened from the gateway to every pod of every
        // namespace.
        (
            "        - podSelector:\n            matchLabels: {app.kubernetes.io/name: gateway}\n      ports: [{protocol: TCP, port: 8082}]\n",
            "        - namespaceSelector: {}\n      ports: [{protocol: TCP, port: 8082}]\n",
            "NetworkPolicy: order admits anyone on 8082: SPEC lets in only gateway, faults on 8082",
        ),
        // Inventory opened to the demo issuer: no SPEC caller.
        (
            "            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 50051}]\n",
            "            matchLabels: {app.kubernetes.io/name: order}\n        - podSelector:\n            matchLabels: {app.kubernetes.io/name: identity}\n      ports: [{protocol: TCP, port: 50051}]\n",
            "NetworkPolicy: inventory admits identity on 50051: SPEC lets in only order, faults on 50051",
        ),
        // Prometheus on every port of the gateway, not its admin port only.
        (
            "      ports: [{protocol: TCP, port: 9080}]\n",
            "",
            "NetworkPolicy: gateway admits prometheus on every port: SPEC lets in only anyone on 8080 and prometheus on 9080",
        ),
    ] {
        assert!(
            !report(&base_findings(None)).contains(needle),
            "caught before the mutation: {needle}"
        );
        assert_caught(
            &base_findings(Some(("network-policies.yaml", from, to))),
            needle,
        );
    }
}

/// A service that does not use a store may not reach its port, even where
/// the store lives outside the cluster (the base).
#[test]
fn egress_to_a_store_a_service_does_not_use_is_caught() {
    let findings = base_findings(Some((
        "network-policies.yaml",
        // The first is the gateway's (its JWKS provider on 443).
        "    - ports: [{protocol: TCP, port: 443}]\n---",
        "    - ports: [{protocol: TCP, port: 443}]\n    - ports: [{protocol: TCP, port: 5432}]\n---",
    )));
    assert_caught(
        &findings,
        "NetworkPolicy: gateway → postgres:5432 is allowed but is no SPEC edge",
    );
    let findings = base_findings(Some((
        "network-policies.yaml",
        "    - ports: [{protocol: TCP, port: 5432}]\n",
        "    - ports: [{protocol: TCP, port: 5432}, {protocol: TCP, port: 6379}]\n",
    )));
    assert_caught(
        &findings,
        "NetworkPolicy: inventory → redis:6379 is allowed but is no SPEC edge",
    );
}

/// The demo overlay's objects as its files list them (resources only: no
/// patches or generators, which no NetworkPolicy depends on), from a copy of
/// k8s/ with `file` changed (`from` → `to`) when a change is given.
fn demo_objects(change: Option<(&str, &str, &str)>) -> Vec<serde_json::Value> {
    let dir = k8s_copy(change);
    kube::load_kustomization(&dir.path().join("overlays/demo")).expect("demo overlay loads")
}

/// What the NetworkPolicy checks find in `objects`.
fn network_findings(objects: &[serde_json::Value]) -> Vec<Finding> {
    kube::check(objects, &specs(), true)
        .into_iter()
        .filter(|f| f.place == "NetworkPolicy")
        .collect()
}

/// The stores' side in the demo overlay, where they run in the cluster:
/// Postgres admits product, order and inventory, Redis product and order,
/// and no one else. Each store's policy removed, a user left out, a
/// stranger or anyone let in: each is caught.
#[test]
fn the_demo_stores_admit_exactly_the_services_that_use_them() {
    let demo = demo_objects(None);
    assert_clean(
        "k8s/overlays/demo NetworkPolicies",
        &network_findings(&demo),
    );

    let without = |policy: &str| -> Vec<serde_json::Value> {
        demo.iter()
            .filter(|o| !(kube::kind(o) == "NetworkPolicy" && kube::name(o) == policy))
            .cloned()
            .collect()
    };
    for (store, port, users) in [
        ("postgres", 5432, &["product", "order", "inventory"][..]),
        ("redis", 6379, &["product", "order"][..]),
    ] {
        let findings = network_findings(&without(store));
        for user in users {
            assert_caught(
                &findings,
                &format!(
                    "{user} → {store}:{port} is a SPEC edge but {store} does not admit it (ingress)"
                ),
            );
        }
    }

    let policies = "overlays/demo/network-policies.yaml";
    for (from, to, needle) in [
        (
            "        - podSelector:\n            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 6379}]\n",
            "      ports: [{protocol: TCP, port: 6379}]\n",
            "NetworkPolicy: order → redis:6379 is a SPEC edge but redis does not admit it (ingress)",
        ),
        (
            "            matchLabels: {app.kubernetes.io/name: inventory}\n      ports: [{protocol: TCP, port: 5432}]\n",
            "            matchLabels: {app.kubernetes.io/name: inventory}\n        - podSelector:\n            matchLabels: {app.kubernetes.io/name: gateway}\n      ports: [{protocol: TCP, port: 5432}]\n",
            "NetworkPolicy: postgres admits gateway on 5432: SPEC lets in only product, order, inventory on 5432",
        ),
        (
            "            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 6379}]\n",
            "            matchLabels: {app.kubernetes.io/name: order}\n        - podSelector:\n            matchLabels: {app.kubernetes.io/name: inventory}\n      ports: [{protocol: TCP, port: 6379}]\n",
            "NetworkPolicy: redis admits inventory on 6379: SPEC lets in only product, order on 6379",
        ),
        (
            "    - from:\n        - podSelector:\n            matchLabels: {app.kubernetes.io/name: product}\n        - podSelector:\n            matchLabels: {app.kubernetes.io/name: order}\n      ports: [{protocol: TCP, port: 6379}]\n",
            "    - ports: [{protocol: TCP, port: 6379}]\n",
            "NetworkPolicy: redis admits anyone on 6379: SPEC lets in only product, order on 6379",
        ),
    ] {
        assert_caught(
            &network_findings(&demo_objects(Some((policies, from, to)))),
            needle,
        );
    }
}

#[test]
fn the_image_builds_every_binary_the_deployments_run() {
    let dockerfile = read("Dockerfile");
    let binaries = compose_specs()
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
    let objects =
        yaml::documents(&read("k8s/overlays/demo/secrets.example.yaml")).expect("demo secrets");
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

#[test]
fn the_kubernetes_base_ships_no_secret_value() {
    let base = root().join("k8s/base");
    let objects = kube::load_kustomization(&base).expect("base");
    assert_clean(
        "k8s/base",
        &kube::check_no_secret_values(&objects, "k8s/base"),
    );
    match kube::render(&base) {
        Some(rendered) => {
            let rendered = rendered.expect("kubectl kustomize k8s/base");
            assert_clean(
                "kubectl kustomize k8s/base",
                &kube::check_no_secret_values(&rendered, "kubectl kustomize k8s/base"),
            );
        }
        None => shopeasy_testkit::skip("kubectl", "it is not installed"),
    }
    // A base that ships an example Secret again is caught.
    let mut with_secret = objects.clone();
    with_secret.extend(
        yaml::documents(&read("k8s/overlays/demo/secrets.example.yaml")).expect("demo secrets"),
    );
    assert_caught(
        &kube::check_no_secret_values(&with_secret, "k8s/base"),
        "k8s/base: Secret order-storage: ships values ([\"DATABASE_URL\", \"REDIS_URL\"])",
    );
}

#[test]
fn compose_publishes_on_loopback_only_and_grafana_has_no_default_password() {
    assert_clean(
        "docker-compose.yml",
        &compose_findings(&read("docker-compose.yml")),
    );
    let compose = read("docker-compose.yml");
    for (from, to, needle) in [
        (
            "\"${SHOPEASY_BIND:-127.0.0.1}:${GATEWAY_PORT:-8080}:8080\"",
            "\"${GATEWAY_PORT:-8080}:8080\"",
            "services.gateway: publishes \"${GATEWAY_PORT:-8080}:8080\" on all interfaces",
        ),
        (
            "\"${SHOPEASY_BIND:-127.0.0.1}:${PROMETHEUS_PORT:-9090}:9090\"",
            "\"${SHOPEASY_BIND:-0.0.0.0}:${PROMETHEUS_PORT:-9090}:9090\"",
            "services.prometheus: publishes \"${SHOPEASY_BIND:-0.0.0.0}:${PROMETHEUS_PORT:-9090}:9090\" on all interfaces",
        ),
        (
            "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-}",
            "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-admin}",
            "services.grafana: GF_SECURITY_ADMIN_PASSWORD = \"${GRAFANA_ADMIN_PASSWORD:-admin}\" sets a default admin password",
        ),
        (
            "export GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION=true ",
            "export ",
            "services.grafana: without an admin password Grafana must not create its admin/admin user",
        ),
    ] {
        assert_caught(&compose_findings(&mutate(&compose, from, to)), needle);
    }
}

/// Small compose files, each with one open door.
#[test]
fn small_compose_files_with_an_open_door_are_caught() {
    let grafana = "services:\n  grafana:\n    image: grafana/grafana:11.4.0\n    environment:\n      GF_SECURITY_ADMIN_PASSWORD: admin\n    ports: [\"127.0.0.1:3000:3000\"]\n";
    let findings = compose_findings(grafana);
    assert_caught(
        &findings,
        "GF_SECURITY_ADMIN_PASSWORD = \"admin\" sets a default admin password",
    );
    assert_caught(&findings, "GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION");
    for open in ["3000:3000", "0.0.0.0:3000:3000", "[::]:3000:3000", "3000"] {
        let text = format!(
            "services:\n  jaeger:\n    image: jaegertracing/all-in-one\n    ports: [\"{open}\"]\n"
        );
        assert_caught(
            &compose_findings(&text),
            &format!("services.jaeger: publishes \"{open}\" on all interfaces"),
        );
    }
    let loopback = "services:\n  jaeger:\n    image: jaegertracing/all-in-one\n    ports: [\"[::1]:16686:16686\", \"127.0.0.1:4317:4317/tcp\"]\n";
    assert!(
        !compose_findings(loopback)
            .iter()
            .any(|f| f.to_string().contains("services.jaeger")),
        "loopback publishing is fine"
    );
}

/// Every token value this project publishes (`.env.example`, the
/// Kubernetes overlays, the documents) is empty or on the list of
/// published examples that services refuse to start with.
#[test]
fn every_published_token_is_one_the_services_refuse() {
    use shopeasy_runtime::settings::credential::PUBLISHED_EXAMPLES;
    let mut files = vec![
        ".env.example".to_owned(),
        "README.md".to_owned(),
        "deploy/README.md".to_owned(),
        "docker-compose.yml".to_owned(),
    ];
    for dir in ["crates", "k8s/overlays/demo", "k8s/base"] {
        for entry in walk(&root().join(dir)) {
            let name = entry.to_string_lossy().into_owned();
            if name.ends_with("README.md") || name.ends_with(".yaml") || name.ends_with(".env") {
                files.push(
                    entry
                        .strip_prefix(root())
                        .expect("under the root")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let mut found = 0;
    for file in &files {
        let text = read(file);
        for var in ["ADMIN_TOKEN", "SERVICE_TOKEN"] {
            for sep in ["=", ": "] {
                for (at, _) in text.match_indices(&format!("{var}{sep}")) {
                    let value: String = text[at + var.len() + sep.len()..]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && !matches!(c, '`' | '"' | '\''))
                        .collect();
                    let token_like = value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.~+/=".contains(c));
                    if value.is_empty() || !token_like {
                        continue; // empty, or filled in (`$(openssl …)`, `%s`)
                    }
                    found += 1;
                    assert!(
                        PUBLISHED_EXAMPLES.contains(&value.as_str()),
                        "{file}: {var}{sep}{value} is published: add it to \
                         shopeasy_runtime::settings::credential::PUBLISHED_EXAMPLES"
                    );
                }
            }
        }
    }
    // The inventory README's example is one; the check reads something.
    assert!(found > 0, "no published token found in {files:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
