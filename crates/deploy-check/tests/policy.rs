//! The policy every rendered workload meets (non-root, read-only root file
//! system, no privileges, requests and limits, probes, pinned images), on
//! `kubectl kustomize` output of the base and the demo overlay, plus proof
//! on broken copies that each rule bites.

mod common;

use std::path::Path;

use common::{k8s_copy, root, specs};
use serde_json::Value as Json;
use shopeasy_deploy_check::{kube, policy, report};

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

/// Renders a copy of the whole k8s/ tree with one file changed.
fn rendered_with(file: &str, from: &str, to: &str) -> Option<Vec<Json>> {
    let dir = k8s_copy(Some((file, from, to)));
    rendered(&dir.path().join("overlays/demo"))
}

fn workloads(objects: &[Json]) -> usize {
    objects
        .iter()
        .filter(|o| matches!(kube::kind(o), "Deployment" | "StatefulSet"))
        .count()
}

#[test]
fn rendered_base_meets_the_policy() {
    let Some(objects) = rendered(&root().join("k8s/base")) else {
        return;
    };
    assert_eq!(workloads(&objects), 4, "the four services");
    let findings = policy::check(&objects);
    assert!(findings.is_empty(), "policy:\n{}", report(&findings));
}

#[test]
fn rendered_demo_overlay_meets_the_policy_and_wires_every_service() {
    let Some(objects) = rendered(&root().join("k8s/overlays/demo")) else {
        return;
    };
    assert_eq!(
        workloads(&objects),
        8,
        "four services, Postgres, Redis, the fault proxy and the demo issuer"
    );
    let findings = policy::check(&objects);
    assert!(findings.is_empty(), "policy:\n{}", report(&findings));
    let findings = kube::check(&objects, &specs(), true);
    assert!(findings.is_empty(), "services:\n{}", report(&findings));
    for object in &objects {
        let namespace = &object["metadata"]["namespace"];
        assert!(
            kube::kind(object) == "Namespace" || namespace == "shopeasy",
            "{} {} outside the namespace",
            kube::kind(object),
            kube::name(object)
        );
    }
}

#[test]
fn a_writable_root_file_system_is_caught() {
    let Some(objects) = rendered_with(
        "base/order.yaml",
        "readOnlyRootFilesystem: true",
        "readOnlyRootFilesystem: false",
    ) else {
        return;
    };
    let findings = policy::check(&objects);
    assert!(
        report(&findings)
            .contains("Deployment order container order: readOnlyRootFilesystem must be true"),
        "{}",
        report(&findings)
    );
}

#[test]
fn running_as_root_is_caught() {
    let Some(objects) = rendered_with(
        "overlays/demo/redis.yaml",
        "runAsNonRoot: true",
        "runAsNonRoot: false",
    ) else {
        return;
    };
    let findings = policy::check(&objects);
    assert!(
        report(&findings).contains("Deployment redis container redis: runAsNonRoot must be true"),
        "{}",
        report(&findings)
    );
}

#[test]
fn missing_limits_and_probes_are_caught() {
    let Some(objects) = rendered_with(
        "overlays/demo/postgres.yaml",
        "            limits: {cpu: \"1\", memory: 512Mi}\n",
        "",
    ) else {
        return;
    };
    let text = report(&policy::check(&objects));
    assert!(
        text.contains("StatefulSet postgres container postgres: resources.limits.cpu missing"),
        "{text}"
    );
    assert!(text.contains("resources.limits.memory missing"), "{text}");

    let Some(objects) = rendered_with(
        "overlays/demo/redis.yaml",
        "          livenessProbe:\n            exec: {command: [redis-cli, ping]}\n            periodSeconds: 10\n            timeoutSeconds: 2\n",
        "",
    ) else {
        return;
    };
    let text = report(&policy::check(&objects));
    assert!(
        text.contains("Deployment redis container redis: livenessProbe missing"),
        "{text}"
    );
}

#[test]
fn added_capabilities_and_unpinned_images_are_caught() {
    let Some(objects) = rendered_with(
        "base/gateway.yaml",
        "capabilities: {drop: [ALL]}",
        "capabilities: {drop: [ALL], add: [NET_ADMIN]}",
    ) else {
        return;
    };
    let text = report(&policy::check(&objects));
    assert!(
        text.contains("Deployment gateway container gateway: must add no capabilities"),
        "{text}"
    );

    let Some(objects) = rendered_with(
        "overlays/demo/redis.yaml",
        "image: redis:7.4-alpine",
        "image: redis",
    ) else {
        return;
    };
    let text = report(&policy::check(&objects));
    assert!(text.contains("image \"redis\" must be pinned"), "{text}");
}
