//! Customers' tokens in every deployment (issue 15): compose runs the demo
//! issuer, unpublished, with its key on a volume, and points gateway and
//! order at its JWKS; the Kubernetes base ships no demo issuer and makes
//! the cluster name its provider; the demo overlay runs one and points the
//! verifiers at it. Then each check on a broken copy, to prove it bites.

mod common;

use std::path::Path;

use common::{compose_specs, k8s_copy, mutate, read, root};
use serde_json::Value as Json;
use shopeasy_deploy_check::{
    Finding,
    compose::{self, Compose},
    kube, report, yaml,
};

fn compose_auth(text: &str) -> Vec<Finding> {
    compose::check_auth(&Compose::parse(text).expect("compose parses"))
}

fn compose_all(text: &str) -> Vec<Finding> {
    compose::check(
        &Compose::parse(text).expect("compose parses"),
        &compose_specs(),
    )
}

fn assert_clean(what: &str, findings: &[Finding]) {
    assert!(findings.is_empty(), "{what}:\n{}", report(findings));
}

fn assert_caught(findings: &[Finding], needle: &str) {
    assert!(
        findings.iter().any(|f| f.to_string().contains(needle)),
        "expected a finding mentioning {needle:?}, got:\n{}",
        report(findings)
    );
}

#[test]
fn compose_runs_the_demo_issuer_and_points_both_verifiers_at_it() {
    let text = read("docker-compose.yml");
    assert_clean("docker-compose.yml auth", &compose_auth(&text));
    assert_clean("docker-compose.yml", &compose_all(&text));

    for (from, to, needle) in [
        (
            "  AUTH__JWKS_URL: ${AUTH__JWKS_URL:-http://identity:8085/.well-known/jwks.json}\n",
            "",
            "services.order: no AUTH__JWKS_URL (nor AUTH__PUBLIC_KEY_PEM)",
        ),
        (
            "  AUTH__JWKS_URL: ${AUTH__JWKS_URL:-http://identity:8085/.well-known/jwks.json}\n",
            "  AUTH__JWKS_URL: ${AUTH__JWKS_URL:-}\n",
            "services.gateway: no AUTH__JWKS_URL",
        ),
        (
            "http://identity:8085/.well-known/jwks.json}",
            "identity:8085/jwks}",
            "AUTH__JWKS_URL = \"identity:8085/jwks\" is not an http(s) URL",
        ),
        // The first is the gateway's: it would start before its key source.
        (
            "      identity: {condition: service_healthy}\n",
            "",
            "services.gateway: AUTH__JWKS_URL names `identity`: must start after it is healthy",
        ),
        (
            "      identity: {condition: service_healthy}\n",
            "",
            "services.gateway: ROUTES__IDENTITY_URL names `identity`: must start after it is healthy",
        ),
        (
            "    command: [shopeasy-identity]\n",
            "    command: [shopeasy-identity]\n    ports: [\"127.0.0.1:8085:8085\"]\n",
            "services.identity: publishes [\"127.0.0.1:8085:8085\"]: the demo issuer is reached through the gateway",
        ),
        (
            "      - identity-key:/var/lib/shopeasy-identity\n",
            "      - ./key:/var/lib/shopeasy-identity\n",
            "services.identity: its key folder (DATA_DIR = Some(\"/var/lib/shopeasy-identity\")) must be a named volume",
        ),
        (
            "    command: [shopeasy-identity]\n",
            "    command: [shopeasy-gateway]\n",
            "services.identity: runs [\"shopeasy-gateway\"], expected `shopeasy-identity`",
        ),
    ] {
        assert_caught(&compose_auth(&mutate(&text, from, to)), needle);
    }

    // The general checks know the demo issuer too: its settings, its
    // topology ports, its probe.
    for (from, to, needle) in [
        (
            "      DATA_DIR: /var/lib/shopeasy-identity\n",
            "      DATA_DIR: /var/lib/shopeasy-identity\n      TOKEN_TTL: \"60\"\n",
            "services.identity: TOKEN_TTL is not a setting shopeasy-identity reads",
        ),
        (
            "http://127.0.0.1:9085/health/ready",
            "http://127.0.0.1:9084/health/ready",
            "services.identity: healthcheck.test must be exec form (\"CMD\", no shell in the image) probing http://127.0.0.1:9085/health/ready",
        ),
        (
            "      DATA_DIR: /var/lib/shopeasy-identity\n",
            "      DATA_DIR: /var/lib/shopeasy-identity\n      LISTEN_ADDR: 0.0.0.0:8086\n",
            "services.identity: LISTEN_ADDR port 8086, SPEC says 8085",
        ),
    ] {
        assert_caught(&compose_all(&mutate(&text, from, to)), needle);
    }

    // A compose file without the demo issuer, or with a verifier left out.
    let bare =
        "services:\n  gateway:\n    image: x\n    environment:\n      AUTH__PUBLIC_KEY_PEM: pem\n";
    let findings = compose_auth(bare);
    assert_caught(
        &findings,
        "services.identity: missing: compose runs the demo issuer",
    );
    assert_caught(&findings, "services.order: service missing");
    assert!(
        !findings
            .iter()
            .any(|f| f.place.ends_with("services.gateway")),
        "a fixed public key is a key source:\n{}",
        report(&findings)
    );
}

/// The rendered objects of `dir`, or `None` (with a SKIPPED line, or a
/// failure under SHOPEASY_REQUIRE_SERVICES=1) when kubectl is missing.
fn rendered(dir: &Path) -> Option<Vec<Json>> {
    match kube::render(dir) {
        None => {
            shopeasy_testkit::skip("kubectl", "it is not installed");
            None
        }
        Some(result) => Some(result.unwrap_or_else(|e| panic!("{e}"))),
    }
}

/// Renders `variant` (`base`, `overlays/demo`) of a copy of the k8s/ tree
/// with `file` changed (`from` → `to`), when a change is given.
fn rendered_with(variant: &str, change: Option<(&str, &str, &str)>) -> Option<Vec<Json>> {
    let dir = k8s_copy(change);
    rendered(&dir.path().join(variant))
}

/// Every check of this file on one variant.
fn k8s_findings(objects: &[Json], place: &str, demo: bool) -> Vec<Finding> {
    let mut out = kube::check_auth(objects, place);
    out.extend(kube::check_identity(objects, place, demo));
    out
}

#[test]
fn the_kubernetes_base_ships_no_demo_issuer_and_leaves_the_provider_to_the_cluster() {
    let base = kube::load_kustomization(&root().join("k8s/base")).expect("base");
    assert_clean("k8s/base", &k8s_findings(&base, "k8s/base", false));
    let Some(rendered_base) = rendered(&root().join("k8s/base")) else {
        return;
    };
    assert_clean(
        "kubectl kustomize k8s/base",
        &k8s_findings(&rendered_base, "kubectl kustomize k8s/base", false),
    );
    // The ConfigMap the verifiers read is not shipped: the cluster names
    // its provider.
    assert!(kube::find(&rendered_base, "ConfigMap", "shopeasy-auth").is_none());

    // A base that runs the demo issuer is caught.
    let mut with_issuer = base.clone();
    with_issuer
        .extend(yaml::documents(&read("k8s/overlays/demo/identity.yaml")).expect("identity.yaml"));
    let findings = k8s_findings(&with_issuer, "k8s/base", false);
    assert_caught(
        &findings,
        "k8s/base: Deployment identity: ships the demo issuer",
    );
    assert_caught(
        &findings,
        "k8s/base: Service identity: ships the demo issuer",
    );

    for (file, from, to, needle) in [
        (
            "base/order.yaml",
            "            - name: AUTH__JWKS_URL\n              valueFrom: {configMapKeyRef: {name: shopeasy-auth, key: AUTH__JWKS_URL}}\n",
            "",
            "Deployment order: no AUTH__JWKS_URL (nor AUTH__PUBLIC_KEY_PEM)",
        ),
        (
            "base/gateway.yaml",
            "            - name: AUTH__JWKS_URL\n              valueFrom: {configMapKeyRef: {name: shopeasy-auth, key: AUTH__JWKS_URL}}\n",
            "            - name: AUTH__JWKS_URL\n              value: \"\"\n",
            "Deployment gateway: AUTH__JWKS_URL is empty (from env)",
        ),
        (
            "base/network-policies.yaml",
            "      ports: [{protocol: TCP, port: 8082}]\n    # The identity provider's JWKS (AUTH__JWKS_URL, ConfigMap shopeasy-auth).\n    - ports: [{protocol: TCP, port: 443}]\n",
            "      ports: [{protocol: TCP, port: 8082}]\n",
            "Deployment gateway: its JWKS provider is the cluster's to name, but the NetworkPolicies do not let gateway reach port 443",
        ),
    ] {
        let Some(objects) = rendered_with("base", Some((file, from, to))) else {
            return;
        };
        assert_caught(&k8s_findings(&objects, "k8s/base", false), needle);
    }
}

#[test]
fn the_demo_overlay_runs_one_demo_issuer_and_points_the_verifiers_at_it() {
    let Some(demo) = rendered(&root().join("k8s/overlays/demo")) else {
        return;
    };
    let place = "kubectl kustomize k8s/overlays/demo";
    assert_clean(place, &k8s_findings(&demo, place, true));

    for (file, from, to, needle) in [
        (
            "overlays/demo/identity.yaml",
            "  replicas: 1\n",
            "  replicas: 2\n",
            "Deployment identity: replicas must be 1",
        ),
        (
            "overlays/demo/kustomization.yaml",
            "  - identity.yaml\n",
            "",
            "Deployment identity: missing: the demo overlay runs the demo issuer",
        ),
        (
            "overlays/demo/identity.yaml",
            "          emptyDir: {sizeLimit: 1Mi}\n",
            "          configMap: {name: demo-seed}\n",
            "Deployment identity: DATA_DIR (Some(\"/var/lib/shopeasy-identity\")) must be set and mounted from an emptyDir or a PersistentVolumeClaim",
        ),
        (
            "overlays/demo/kustomization.yaml",
            "      - AUTH__JWKS_URL=http://identity:8085/.well-known/jwks.json\n",
            "      - AUTH__JWKS_URL=\n",
            "Deployment order: AUTH__JWKS_URL is empty (from ConfigMap shopeasy-auth",
        ),
        (
            "overlays/demo/kustomization.yaml",
            "      - AUTH__JWKS_URL=http://identity:8085/.well-known/jwks.json\n",
            "",
            "Deployment gateway: AUTH__JWKS_URL: ConfigMap shopeasy-auth",
        ),
    ] {
        let Some(objects) = rendered_with("overlays/demo", Some((file, from, to))) else {
            return;
        };
        assert_caught(&k8s_findings(&objects, place, true), needle);
    }

    // Without the verifiers' egress to the demo issuer, or its ingress from
    // them, the JWKS cannot be fetched.
    let without = |policy: &str| -> Vec<Json> {
        demo.iter()
            .filter(|o| !(kube::kind(o) == "NetworkPolicy" && kube::name(o) == policy))
            .cloned()
            .collect()
    };
    assert_caught(
        &k8s_findings(&without("order-to-identity"), place, true),
        "Deployment order: AUTH__JWKS_URL names identity:8085, which the NetworkPolicies do not let order reach (egress false, ingress true)",
    );
    let findings = k8s_findings(&without("identity"), place, true);
    assert_caught(
        &findings,
        "Deployment gateway: ROUTES__IDENTITY_URL names identity:8085, which the NetworkPolicies do not let gateway reach (egress true, ingress false)",
    );
}
