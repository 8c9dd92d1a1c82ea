//! The policy every workload meets, checked on rendered manifests: runs as
//! non-root on a read-only root file system with no privileges, has
//! requests and limits, is probed, and runs a pinned image.

use serde_json::Value as Json;

use crate::{
    Finding,
    kube::{kind, name},
};

/// The pod template of a workload object, if it has one.
fn pod_template(object: &Json) -> Option<&Json> {
    match kind(object) {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            Some(&object["spec"]["template"])
        }
        "CronJob" => Some(&object["spec"]["jobTemplate"]["spec"]["template"]),
        "Pod" => Some(object),
        _ => None,
    }
}

/// Checks every workload in `objects`; returns what breaks the policy.
pub fn check(objects: &[Json]) -> Vec<Finding> {
    let mut out = Vec::new();
    for object in objects {
        let Some(template) = pod_template(object) else {
            continue;
        };
        let place = format!("{} {}", kind(object), name(object));
        let pod = &template["spec"];
        let pod_security = &pod["securityContext"];
        if pod["automountServiceAccountToken"] != false {
            out.push(Finding::new(
                &place,
                "automountServiceAccountToken must be false (no workload calls the API)",
            ));
        }
        for flag in ["hostNetwork", "hostPID", "hostIPC"] {
            if pod[flag] == true {
                out.push(Finding::new(&place, format!("{flag} must not be set")));
            }
        }
        let init = pod["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let main = pod["containers"].as_array().cloned().unwrap_or_default();
        if main.is_empty() {
            out.push(Finding::new(&place, "no containers"));
        }
        for (container, is_init) in main
            .iter()
            .map(|c| (c, false))
            .chain(init.iter().map(|c| (c, true)))
        {
            let place = format!(
                "{place} container {}",
                container["name"].as_str().unwrap_or("?")
            );
            let security = &container["securityContext"];
            let inherited = |key: &str| {
                if security.get(key).is_some() {
                    &security[key]
                } else {
                    &pod_security[key]
                }
            };
            if *inherited("runAsNonRoot") != true {
                out.push(Finding::new(&place, "runAsNonRoot must be true"));
            }
            if inherited("runAsUser").as_u64() == Some(0) {
                out.push(Finding::new(&place, "runAsUser must not be 0"));
            }
            if inherited("seccompProfile")["type"] != "RuntimeDefault" {
                out.push(Finding::new(
                    &place,
                    "seccompProfile must be RuntimeDefault",
                ));
            }
            if security["readOnlyRootFilesystem"] != true {
                out.push(Finding::new(&place, "readOnlyRootFilesystem must be true"));
            }
            if security["allowPrivilegeEscalation"] != false {
                out.push(Finding::new(
                    &place,
                    "allowPrivilegeEscalation must be false",
                ));
            }
            if security["privileged"] == true {
                out.push(Finding::new(&place, "must not be privileged"));
            }
            let drops_all = security["capabilities"]["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|c| c == "ALL"));
            if !drops_all {
                out.push(Finding::new(&place, "capabilities.drop must contain ALL"));
            }
            if security["capabilities"]["add"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                out.push(Finding::new(&place, "must add no capabilities"));
            }
            for (section, resource) in [
                ("requests", "cpu"),
                ("requests", "memory"),
                ("limits", "cpu"),
                ("limits", "memory"),
            ] {
                if container["resources"][section][resource].is_null() {
                    out.push(Finding::new(
                        &place,
                        format!("resources.{section}.{resource} missing"),
                    ));
                }
            }
            let image = container["image"].as_str().unwrap_or_default();
            let tag = image
                .rsplit('/')
                .next()
                .and_then(|last| last.split_once(':'))
                .map(|(_, t)| t);
            if !image.contains('@') && matches!(tag, None | Some("latest")) {
                out.push(Finding::new(
                    &place,
                    format!("image {image:?} must be pinned to a tag or digest, not latest"),
                ));
            }
            if !is_init {
                for probe in ["livenessProbe", "readinessProbe"] {
                    if container[probe].is_null() {
                        out.push(Finding::new(&place, format!("{probe} missing")));
                    }
                }
            }
        }
    }
    out
}
