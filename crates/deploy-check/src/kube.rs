//! Kubernetes objects: loading (base files or `kubectl kustomize` output)
//! and the checks that tie them to the catalogue and to SPEC §1's edges.

use std::{collections::BTreeMap, fmt, path::Path, process::Command};

use serde_json::Value as Json;

use crate::{
    Error, Finding,
    catalogue::{
        IDENTITY_ROUTE_VAR, JWKS_VAR, PUBLIC_KEY_VAR, ServiceSpec, VERIFIERS, display, identity,
        is_wiring, same_value, store_port, url_host_port,
    },
    compose::{FAULTS, PROXIED_EDGES},
    yaml::{self, scalar},
};

/// The label every ShopEasy object carries to name its component.
pub const APP_LABEL: &str = "app.kubernetes.io/name";

/// Reads the files a `kustomization.yaml` lists under `resources` (and,
/// for a folder, its own kustomization), without applying patches or
/// generators: what a base says before any overlay.
///
/// # Errors
/// [`Error::Read`] or [`Error::Parse`] when a file cannot be read or parsed.
pub fn load_kustomization(dir: &Path) -> Result<Vec<Json>, Error> {
    let path = dir.join("kustomization.yaml");
    let text = read(&path)?;
    let kustomization = yaml::to_json(&text)?;
    let mut out = Vec::new();
    for resource in kustomization["resources"].as_array().into_iter().flatten() {
        let resource = dir.join(scalar(resource));
        if resource.is_dir() {
            out.extend(load_kustomization(&resource)?);
        } else {
            let text = read(&resource)?;
            out.extend(
                yaml::documents(&text)
                    .map_err(|e| Error::parse(resource.display().to_string(), e))?,
            );
        }
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

/// Renders `dir` with `kubectl kustomize`; `None` when kubectl is not
/// installed.
///
/// # Errors
/// [`Error::Kubectl`] when kubectl fails; [`Error::Parse`] when it prints
/// something that is not YAML.
pub fn render(dir: &Path) -> Option<Result<Vec<Json>, Error>> {
    let failed = |message: String| {
        Some(Err(Error::Kubectl {
            dir: dir.to_owned(),
            message,
        }))
    };
    let output = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return failed(e.to_string()),
    };
    if !output.status.success() {
        return failed(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Some(yaml::documents(&String::from_utf8_lossy(&output.stdout)))
}

/// Checks that no Secret among `objects` carries a value (`data` or
/// `stringData`): the base references the Secrets each cluster provides and
/// ships none, so no overlay inherits a published credential (SPEC §11).
pub fn check_no_secret_values(objects: &[Json], place: &str) -> Vec<Finding> {
    objects
        .iter()
        .filter(|o| kind(o) == "Secret")
        .filter_map(|secret| {
            let keys: Vec<&String> = ["data", "stringData"]
                .iter()
                .filter_map(|field| secret[*field].as_object())
                .flat_map(|m| m.keys())
                .collect();
            (!keys.is_empty()).then(|| {
                Finding::new(
                    format!("{place}: Secret {}", name(secret)),
                    format!(
                        "ships values ({keys:?}): the base references Secrets, each cluster provides them"
                    ),
                )
            })
        })
        .collect()
}

/// An object's kind.
pub fn kind(object: &Json) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

/// An object's name.
pub fn name(object: &Json) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// The first object of `kind` named `name`.
pub fn find<'a>(objects: &'a [Json], kind_: &str, name_: &str) -> Option<&'a Json> {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && name(o) == name_)
}

/// Whether every label of `selector` is on `labels`.
fn selects(selector: &Json, labels: &Json) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// A variable given to a container and where it came from.
#[derive(Debug, Clone)]
struct Given {
    value: Option<String>,
    source: String,
    /// From a ConfigMap the cluster provides (referenced, not shipped): its
    /// value is the operator's to choose.
    from_cluster: bool,
}

/// Every variable a container is given: `env`, then `envFrom` ConfigMaps
/// and Secrets found among `objects`.
fn container_env(
    objects: &[Json],
    container: &Json,
    place: &str,
    out: &mut Vec<Finding>,
) -> BTreeMap<String, Given> {
    let mut env = BTreeMap::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        for (kind_, key) in [("ConfigMap", "configMapRef"), ("Secret", "secretRef")] {
            let Some(reference) = from[key]["name"].as_str() else {
                continue;
            };
            let Some(object) = find(objects, kind_, reference) else {
                // A Secret may be the cluster's to provide: the base
                // references Secrets it does not ship (`check_no_secret_values`).
                if kind_ == "ConfigMap" {
                    out.push(Finding::new(
                        place,
                        format!("envFrom {kind_} {reference} not found"),
                    ));
                }
                continue;
            };
            let source = format!("{kind_} {reference}");
            for (var, value) in object["data"].as_object().into_iter().flatten() {
                let value = (kind_ == "ConfigMap").then(|| scalar(value));
                env.insert(
                    var.clone(),
                    Given {
                        value,
                        source: source.clone(),
                        from_cluster: false,
                    },
                );
            }
            for (var, value) in object["stringData"].as_object().into_iter().flatten() {
                env.insert(
                    var.clone(),
                    Given {
                        value: Some(scalar(value)),
                        source: source.clone(),
                        from_cluster: false,
                    },
                );
            }
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name_ = scalar(&var["name"]);
        let key_ref = &var["valueFrom"]["configMapKeyRef"];
        let given = if let Some(reference) = key_ref["name"].as_str() {
            // One key of a ConfigMap: its value when the ConfigMap is among
            // `objects`; otherwise the cluster provides it (as the base's
            // Secrets), and an optional key may be left out.
            let key = scalar(&key_ref["key"]);
            let source = format!("ConfigMap {reference} key {key}");
            match find(objects, "ConfigMap", reference) {
                Some(map) => match map["data"].get(&key) {
                    Some(value) => Given {
                        value: Some(scalar(value)),
                        source,
                        from_cluster: false,
                    },
                    None if key_ref["optional"] == true => continue,
                    None => {
                        out.push(Finding::new(
                            place,
                            format!("{name_}: {source} not found (the pod would not start)"),
                        ));
                        continue;
                    }
                },
                None => Given {
                    value: None,
                    source: format!("{source}, provided by the cluster"),
                    from_cluster: true,
                },
            }
        } else {
            Given {
                value: var.get("value").map(scalar),
                source: "env".into(),
                from_cluster: false,
            }
        };
        env.insert(name_, given);
    }
    env
}

/// Checks the Deployments, Services, ConfigMaps, PodDisruptionBudgets and
/// NetworkPolicies against the catalogue. With `complete`, every
/// `resilience.*` key must be given (the base repeats them all; an overlay
/// may not need to).
pub fn check(objects: &[Json], specs: &[ServiceSpec], complete: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    for spec in specs {
        check_service(objects, spec, complete, &mut out);
    }
    check_network_policies(objects, specs, &mut out);
    out
}

fn check_service(objects: &[Json], spec: &ServiceSpec, complete: bool, out: &mut Vec<Finding>) {
    let place = format!("Deployment {}", spec.name);
    let Some(deployment) = find(objects, "Deployment", spec.name) else {
        out.push(Finding::new(&place, "missing"));
        return;
    };
    if deployment["spec"]["replicas"].as_u64().unwrap_or(1) < 2 {
        out.push(Finding::new(
            &place,
            "replicas must be at least 2 (stateless service, PodDisruptionBudget)",
        ));
    }
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    if !selects(&deployment["spec"]["selector"]["matchLabels"], labels) {
        out.push(Finding::new(
            &place,
            "selector does not match the pod labels",
        ));
    }
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let Some(container) = containers.iter().find(|c| c["name"] == spec.name) else {
        out.push(Finding::new(
            &place,
            format!("no container named {}", spec.name),
        ));
        return;
    };
    let mut command: Vec<String> = container["command"]
        .as_array()
        .into_iter()
        .flatten()
        .map(scalar)
        .collect();
    command.extend(
        container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(scalar),
    );
    if command.first().map(String::as_str) != Some(spec.binary) {
        out.push(Finding::new(
            &place,
            format!("runs {command:?}, expected `{}`", spec.binary),
        ));
    }
    check_ports(container, spec, &place, out);
    for (probe, path) in [
        ("livenessProbe", Some("/health/live")),
        ("readinessProbe", Some("/health/ready")),
        ("startupProbe", None),
    ] {
        let get = &container[probe]["httpGet"];
        let port_ok = is_admin_port(&get["port"], spec);
        let path_ok = path.map_or_else(
            || {
                // The admin listener serves these two and nothing else
                // under /health (a `/health/startup` is its 404: a pod
                // that never starts).
                get["path"] == "/health/live" || get["path"] == "/health/ready"
            },
            |p| get["path"] == p,
        );
        if !(port_ok && path_ok) {
            out.push(Finding::new(
                &place,
                format!(
                    "{probe} must be httpGet {} on the admin port",
                    path.unwrap_or("/health/live or /health/ready")
                ),
            ));
        }
    }

    let env = container_env(objects, container, &place, out);
    if let Some(defaults) = &spec.defaults {
        for (var, given) in &env {
            let Some(default) = defaults.get(var) else {
                out.push(Finding::new(
                    &place,
                    format!(
                        "{var} (from {}) is not a setting {} reads (stray or misspelt)",
                        given.source, spec.binary
                    ),
                ));
                continue;
            };
            if is_wiring(var) || crate::is_deployment_choice(var) {
                continue;
            }
            match &given.value {
                Some(v) if !same_value(default, v) => out.push(Finding::new(
                    &place,
                    format!(
                        "{var}={v} (from {}) differs from the default in code ({})",
                        given.source,
                        display(default)
                    ),
                )),
                Some(_) => {}
                None if given.from_cluster => {}
                None => out.push(Finding::new(
                    &place,
                    format!(
                        "{var} (from {}): tunable settings belong in a ConfigMap",
                        given.source
                    ),
                )),
            }
        }
        if complete {
            for var in defaults.keys().filter(|v| v.starts_with("RESILIENCE__")) {
                if !env.contains_key(var) {
                    out.push(Finding::new(
                        &place,
                        format!(
                            "{var} missing from its ConfigMaps ({})",
                            display(&defaults[var])
                        ),
                    ));
                }
            }
        }
        for (var, want) in [
            ("LISTEN_ADDR", spec.public_port),
            ("ADMIN_ADDR", spec.admin_port),
        ] {
            let addr = env
                .get(var)
                .and_then(|g| g.value.clone())
                .or_else(|| defaults.get(var).map(scalar));
            let port = addr
                .as_deref()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse::<u16>().ok());
            if port != Some(want) {
                out.push(Finding::new(
                    &place,
                    format!("{var} listens on {addr:?}, SPEC says port {want}"),
                ));
            }
        }
    }

    let service_place = format!("Service {}", spec.name);
    match find(objects, "Service", spec.name) {
        None => out.push(Finding::new(&service_place, "missing")),
        Some(service) => {
            if !selects(&service["spec"]["selector"], labels) {
                out.push(Finding::new(
                    &service_place,
                    "selector does not match the Deployment's pods",
                ));
            }
            let port_ok = service["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["port"].as_u64() == Some(u64::from(spec.public_port)));
            if !port_ok {
                out.push(Finding::new(
                    &service_place,
                    format!("must expose port {}", spec.public_port),
                ));
            }
        }
    }
    let pdb = objects
        .iter()
        .filter(|o| kind(o) == "PodDisruptionBudget")
        .any(|o| selects(&o["spec"]["selector"]["matchLabels"], labels));
    if !pdb {
        out.push(Finding::new(
            &place,
            "no PodDisruptionBudget selects its pods",
        ));
    }
}

/// Which way traffic is allowed by a NetworkPolicy rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// The label value Prometheus pods carry (any namespace): the one peer
/// that may reach an admin port.
const PROMETHEUS: &str = "prometheus";

/// The service that is the way in: anyone may call its public port.
const ENTRANCE: &str = "gateway";

/// Who one entry of a rule's `from` (or `to`) list lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Peer {
    /// Any pod or address: an `ipBlock` (it may cover pod addresses), a
    /// namespace selector alone (every pod of those namespaces), an empty
    /// pod selector, or no list at all.
    Anyone,
    /// The pods labelled [`APP_LABEL`] with this name (in any namespace a
    /// namespace selector beside it names).
    App(String),
    /// Pods chosen by other labels (`k8s-app: kube-dns`), shown as written:
    /// no ShopEasy component.
    Other(String),
}

impl Peer {
    fn of(entry: &Json) -> Self {
        let pods = &entry["podSelector"]["matchLabels"];
        if entry.get("ipBlock").is_some()
            || entry.get("podSelector").is_none()
            || pods.as_object().is_none_or(serde_json::Map::is_empty)
        {
            return Self::Anyone;
        }
        match pods[APP_LABEL].as_str() {
            Some(app) => Self::App(app.to_owned()),
            None => Self::Other(pods.to_string()),
        }
    }

    /// Whether it lets `app`'s pods through ("anyone" does).
    fn admits(&self, app: &str) -> bool {
        match self {
            Self::Anyone => true,
            Self::App(a) => a == app,
            Self::Other(_) => false,
        }
    }

    /// Whether it is exactly the pods of one of `apps` (never "anyone").
    fn is_one_of(&self, apps: &[&str]) -> bool {
        matches!(self, Self::App(a) if apps.contains(&a.as_str()))
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anyone => f.write_str("anyone"),
            Self::App(app) => f.write_str(app),
            Self::Other(labels) => write!(f, "pods {labels}"),
        }
    }
}

/// The peers a rule lets through in `direction`: no list, or an empty
/// one, is everyone (as Kubernetes reads it).
fn peers(rule: &Json, direction: Direction) -> Vec<Peer> {
    let key = match direction {
        Direction::Ingress => "from",
        Direction::Egress => "to",
    };
    match rule[key].as_array() {
        Some(list) if !list.is_empty() => list.iter().map(Peer::of).collect(),
        _ => vec![Peer::Anyone],
    }
}

/// Whether a rule covers `port`: no `ports` list (or an empty one) covers
/// every port, as does an entry with a protocol only; `endPort` makes a
/// range. A named port covers no number here (the manifests write numbers).
fn covers(rule: &Json, port: u16) -> bool {
    match rule["ports"].as_array() {
        Some(list) if !list.is_empty() => list.iter().any(|p| match p.get("port") {
            None => true,
            Some(first) => first.as_u64().is_some_and(|first| {
                let last = p["endPort"].as_u64().unwrap_or(first);
                (first..=last).contains(&u64::from(port))
            }),
        }),
        _ => true,
    }
}

/// Whether a rule covers `port` and no other.
fn covers_only(rule: &Json, port: u16) -> bool {
    rule["ports"].as_array().is_some_and(|list| {
        !list.is_empty()
            && list.iter().all(|p| {
                p["port"].as_u64() == Some(u64::from(port))
                    && p["endPort"]
                        .as_u64()
                        .is_none_or(|end| end == u64::from(port))
            })
    })
}

/// The ports a rule names, as written (`8081, 9000-9100`), or "every port".
fn ports_text(rule: &Json) -> String {
    match rule["ports"].as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|p| match (p.get("port"), p["endPort"].as_u64()) {
                (None, _) => "every port".to_owned(),
                (Some(first), Some(end)) => format!("{}-{end}", scalar(first)),
                (Some(first), None) => scalar(first),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => "every port".to_owned(),
    }
}

/// Whether the NetworkPolicies let pods of `app` exchange traffic with
/// pods of `peer` on `port` in `direction` (from `app`'s point of view).
fn allowed(objects: &[Json], app: &str, direction: Direction, peer: &str, port: u16) -> bool {
    rules(objects, app, direction)
        .any(|rule| covers(&rule, port) && peers(&rule, direction).iter().any(|p| p.admits(peer)))
}

/// Who SPEC lets open connections to `app` (a service or a store): the
/// services that call it and, when it is the callee of an edge the fault
/// proxy sits on (SPEC §7), the proxy, which calls it for the caller.
fn callers_of(app: &str, specs: &[ServiceSpec]) -> Vec<&'static str> {
    let mut callers: Vec<&'static str> = specs
        .iter()
        .filter(|s| s.calls.contains(&app))
        .map(|s| s.name)
        .collect();
    if PROXIED_EDGES
        .iter()
        .any(|(edge, ..)| edge.rsplit('-').next() == Some(app))
    {
        callers.push(FAULTS);
    }
    callers
}

/// Whether `app` runs in the cluster `objects` describe: a workload or a
/// Service by its name (the base leaves the stores outside; the demo
/// overlay runs them).
fn runs_in_cluster(objects: &[Json], app: &str) -> bool {
    objects
        .iter()
        .any(|o| name(o) == app && matches!(kind(o), "Deployment" | "StatefulSet" | "Service"))
}

/// Checks that the ingress rules selecting `app`'s pods let in nobody but
/// `callers` on `port` (`None`: anyone, for the way in) and Prometheus on
/// `admin`: each other peer a rule admits, on any port, is a finding.
/// Comparing SPEC's services pair by pair is not enough: a rule that lets
/// in "anyone" (no `from`, an `ipBlock`, a namespace alone) or a component
/// outside SPEC's callers (the demo issuer, a pod of another namespace)
/// opens the pod to callers no pair names.
fn check_admitted(
    objects: &[Json],
    app: &str,
    port: u16,
    callers: Option<&[&'static str]>,
    admin: Option<u16>,
    out: &mut Vec<Finding>,
) {
    for rule in rules(objects, app, Direction::Ingress) {
        for peer in peers(&rule, Direction::Ingress) {
            let caller = covers_only(&rule, port) && callers.is_none_or(|c| peer.is_one_of(c));
            let scraper =
                admin.is_some_and(|a| covers_only(&rule, a) && peer.is_one_of(&[PROMETHEUS]));
            if !(caller || scraper) {
                let who = callers.map_or_else(|| "anyone".to_owned(), |c| c.join(", "));
                let scrape = admin
                    .map(|a| format!(" and {PROMETHEUS} on {a}"))
                    .unwrap_or_default();
                out.push(Finding::new(
                    "NetworkPolicy",
                    format!(
                        "{app} admits {peer} on {}: SPEC lets in only {who} on {port}{scrape}",
                        ports_text(&rule)
                    ),
                ));
            }
        }
    }
}

/// The rules of the NetworkPolicies that select pods of `app` for
/// `direction`.
fn rules<'a>(
    objects: &'a [Json],
    app: &'a str,
    direction: Direction,
) -> impl Iterator<Item = Json> + 'a {
    let (types, rules) = match direction {
        Direction::Ingress => ("Ingress", "ingress"),
        Direction::Egress => ("Egress", "egress"),
    };
    objects
        .iter()
        .filter(|o| kind(o) == "NetworkPolicy")
        .filter(move |p| {
            let selector = &p["spec"]["podSelector"]["matchLabels"];
            selector.as_object().is_none_or(serde_json::Map::is_empty) || selector[APP_LABEL] == app
        })
        .filter(move |p| {
            p["spec"]["policyTypes"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == types))
        })
        .flat_map(move |p| p["spec"][rules].as_array().cloned().unwrap_or_default())
}

/// Whether `app` may send DNS queries (port 53 over `protocol`, to any
/// peer): without them no service name resolves, and every call fails.
fn dns_allowed(objects: &[Json], app: &str, protocol: &str) -> bool {
    rules(objects, app, Direction::Egress).any(|rule| {
        rule["ports"].as_array().is_none_or(|ports| {
            ports.iter().any(|p| {
                p["port"].as_u64() == Some(53)
                    && p["protocol"].as_str().unwrap_or("TCP") == protocol
            })
        })
    })
}

/// Default deny, then exactly SPEC §1's edges between the services (the
/// gateway may be reached from anywhere: it is the way in), each service's
/// stores, DNS, and Prometheus on each admin port. "Exactly" from both
/// sides: no service reaches what it does not call, and no pod lets in
/// anyone but SPEC's callers (its own ingress rules, [`check_admitted`];
/// the stores' in [`check_stores`]).
fn check_network_policies(objects: &[Json], specs: &[ServiceSpec], out: &mut Vec<Finding>) {
    let place = "NetworkPolicy";
    let deny = objects
        .iter()
        .filter(|o| kind(o) == "NetworkPolicy")
        .any(|p| {
            let spec = &p["spec"];
            spec["podSelector"]
                .as_object()
                .is_some_and(serde_json::Map::is_empty)
                && ["Ingress", "Egress"].iter().all(|t| {
                    spec["policyTypes"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == t))
                })
                && spec["ingress"].as_array().is_none_or(Vec::is_empty)
                && spec["egress"].as_array().is_none_or(Vec::is_empty)
        });
    if !deny {
        out.push(Finding::new(
            place,
            "no default-deny policy (podSelector {}, Ingress and Egress, no rules)",
        ));
    }
    for caller in specs {
        for callee in specs.iter().filter(|c| c.name != caller.name) {
            let edge = caller.calls.contains(&callee.name);
            let port = callee.public_port;
            let egress = allowed(objects, caller.name, Direction::Egress, callee.name, port);
            let ingress = allowed(objects, callee.name, Direction::Ingress, caller.name, port);
            if edge && !(egress && ingress) {
                out.push(Finding::new(
                    place,
                    format!("{} → {}:{port} is a SPEC edge but is not allowed (egress {egress}, ingress {ingress})", caller.name, callee.name),
                ));
            }
            if !edge && egress && (ingress || callee.name != ENTRANCE) {
                out.push(Finding::new(
                    place,
                    format!(
                        "{} → {}:{port} is allowed but is no SPEC edge",
                        caller.name, callee.name
                    ),
                ));
            }
        }
        // Besides SPEC's edges, what every service needs: names resolve,
        // and Prometheus scrapes its admin port (SPEC §9).
        for protocol in ["UDP", "TCP"] {
            if !dns_allowed(objects, caller.name, protocol) {
                out.push(Finding::new(
                    place,
                    format!(
                        "{} cannot resolve names (DNS over {protocol}, port 53)",
                        caller.name
                    ),
                ));
            }
        }
        let admin = caller.admin_port;
        if !allowed(objects, caller.name, Direction::Ingress, PROMETHEUS, admin) {
            out.push(Finding::new(
                place,
                format!("Prometheus cannot scrape {}:{admin}", caller.name),
            ));
        }
        for store in caller
            .calls
            .iter()
            .filter_map(|c| store_port(c).map(|p| (c, p)))
        {
            if !allowed(objects, caller.name, Direction::Egress, store.0, store.1) {
                out.push(Finding::new(
                    place,
                    format!("{} cannot reach {} on {}", caller.name, store.0, store.1),
                ));
            }
        }
        // Each service's own side: who may reach it at all, on any port.
        let callers = callers_of(caller.name, specs);
        let callers = (caller.name != ENTRANCE).then_some(callers.as_slice());
        check_admitted(
            objects,
            caller.name,
            caller.public_port,
            callers,
            Some(caller.admin_port),
            out,
        );
    }
    check_stores(objects, specs, out);
}

/// The stores' side of SPEC §1's edges: no service that does not use a
/// store may reach its port; where the store runs in the cluster (the demo
/// overlay), it admits exactly the services that use it (product, order and
/// inventory to Postgres; product and order to Redis), and no one else.
fn check_stores(objects: &[Json], specs: &[ServiceSpec], out: &mut Vec<Finding>) {
    let place = "NetworkPolicy";
    let mut stores: Vec<&'static str> = specs
        .iter()
        .flat_map(|s| s.calls.iter().copied())
        .filter(|c| store_port(c).is_some())
        .collect();
    stores.sort_unstable();
    stores.dedup();
    for store in stores {
        let Some(port) = store_port(store) else {
            continue;
        };
        let users = callers_of(store, specs);
        for other in specs.iter().filter(|s| !users.contains(&s.name)) {
            if allowed(objects, other.name, Direction::Egress, store, port) {
                out.push(Finding::new(
                    place,
                    format!(
                        "{} → {store}:{port} is allowed but is no SPEC edge",
                        other.name
                    ),
                ));
            }
        }
        if !runs_in_cluster(objects, store) {
            continue;
        }
        for user in &users {
            if !allowed(objects, store, Direction::Ingress, user, port) {
                out.push(Finding::new(
                    place,
                    format!(
                        "{user} → {store}:{port} is a SPEC edge but {store} does not admit it (ingress)"
                    ),
                ));
            }
        }
        check_admitted(objects, store, port, Some(users.as_slice()), None, out);
    }
}

/// The port an HTTPS identity provider outside the cluster is reached on:
/// what the base lets the verifiers reach when it cannot know the
/// provider's address (the operator's ConfigMap names it).
pub const PROVIDER_PORT: u16 = 443;

/// Findings at `place` for `spec`'s public and admin ports that
/// `container` does not declare, each by its `containerPort` and its name.
fn check_ports(container: &Json, spec: &ServiceSpec, place: &str, out: &mut Vec<Finding>) {
    let ports: Vec<(String, u64)> = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                scalar(&p["name"]),
                p["containerPort"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    for (port_name, number) in [
        (spec.protocol, spec.public_port),
        ("admin", spec.admin_port),
    ] {
        if !ports.contains(&(port_name.to_owned(), u64::from(number))) {
            out.push(Finding::new(
                place,
                format!("needs containerPort {number} named {port_name}"),
            ));
        }
    }
}

/// Whether a probe's `port` is `spec`'s admin port, by name or number.
fn is_admin_port(port: &Json, spec: &ServiceSpec) -> bool {
    port == "admin" || port.as_u64() == Some(u64::from(spec.admin_port))
}

fn container_named<'a>(deployment: &'a Json, name_: &str) -> Option<&'a Json> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name_)
}

/// Checks how customers' tokens are wired in one Kubernetes variant
/// (`place`: `k8s/base`, `kubectl kustomize k8s/overlays/demo`, …): each of
/// the [`VERIFIERS`] (gateway, order) is given `AUTH__JWKS_URL` (or
/// `AUTH__PUBLIC_KEY_PEM`) — a value, or a key of a ConfigMap the cluster
/// provides, which the pod cannot start without — and its NetworkPolicies
/// let it reach that provider: the in-cluster Service the URL names (both
/// ways), or port 443 outside when the URL is the cluster's to give. The
/// gateway's `ROUTES__IDENTITY_URL`, when it names an in-cluster Service,
/// is reachable the same way.
pub fn check_auth(objects: &[Json], place: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for caller in VERIFIERS {
        let here = format!("{place}: Deployment {caller}");
        let Some(container) =
            find(objects, "Deployment", caller).and_then(|d| container_named(d, caller))
        else {
            out.push(Finding::new(&here, "missing"));
            continue;
        };
        let env = container_env(objects, container, &here, &mut out);
        let key = env.get(JWKS_VAR).or_else(|| env.get(PUBLIC_KEY_VAR));
        let reach = |var: &str, url: &str, out: &mut Vec<Finding>| {
            let Some((host, port)) = url_host_port(url) else {
                out.push(Finding::new(
                    &here,
                    format!("{var} = {url:?} is not an http(s) URL"),
                ));
                return;
            };
            let service = host.split('.').next().unwrap_or_default();
            let in_cluster = find(objects, "Service", service).is_some();
            let egress = allowed(objects, caller, Direction::Egress, service, port);
            let ingress =
                !in_cluster || allowed(objects, service, Direction::Ingress, caller, port);
            if !(egress && ingress) {
                out.push(Finding::new(
                    &here,
                    format!("{var} names {host}:{port}, which the NetworkPolicies do not let {caller} reach (egress {egress}, ingress {ingress})"),
                ));
            }
        };
        match key {
            None => out.push(Finding::new(
                &here,
                format!("no {JWKS_VAR} (nor {PUBLIC_KEY_VAR}): {caller} verifies customers' tokens and refuses to start without a key source"),
            )),
            Some(Given { value: Some(v), source, .. }) if v.trim().is_empty() => out.push(Finding::new(
                &here,
                format!("{JWKS_VAR} is empty (from {source}): {caller} refuses to start"),
            )),
            Some(Given { value: Some(url), .. }) if env.contains_key(JWKS_VAR) => {
                reach(JWKS_VAR, url, &mut out);
            }
            Some(Given { value: Some(_), .. }) => {}
            Some(Given { value: None, .. }) => {
                if !allowed(objects, caller, Direction::Egress, "", PROVIDER_PORT) {
                    out.push(Finding::new(
                        &here,
                        format!("its JWKS provider is the cluster's to name, but the NetworkPolicies do not let {caller} reach port {PROVIDER_PORT}"),
                    ));
                }
            }
        }
        if caller == "gateway"
            && let Some(Given {
                value: Some(url), ..
            }) = env.get(IDENTITY_ROUTE_VAR)
            && !url.trim().is_empty()
        {
            reach(IDENTITY_ROUTE_VAR, url, &mut out);
        }
    }
    out
}

/// Checks where the demo issuer ([`identity`], `shopeasy-identity`) runs:
/// never in the base (`demo` false: a real deployment trusts its own
/// provider, and a base that ships a sign-in for anyone would be inherited
/// by every overlay); in the demo overlay (`demo` true) as Deployment and
/// Service `identity`: one replica (one key), its ports, probes on the admin
/// port, and its `DATA_DIR` on a volume (an emptyDir or a claim: the root
/// file system is read-only).
pub fn check_identity(objects: &[Json], place: &str, demo: bool) -> Vec<Finding> {
    let spec = identity();
    let mut out = Vec::new();
    let runs_it = |o: &&Json| {
        o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["command"][0] == spec.binary)
    };
    if !demo {
        for o in objects.iter().filter(|o| {
            (name(o) == spec.name && matches!(kind(o), "Deployment" | "Service")) || runs_it(o)
        }) {
            out.push(Finding::new(
                format!("{place}: {} {}", kind(o), name(o)),
                format!("ships the demo issuer (`{}`): the base trusts the cluster's own provider (AUTH__JWKS_URL); only the demo overlay runs it", spec.binary),
            ));
        }
        return out;
    }
    let here = format!("{place}: Deployment {}", spec.name);
    let Some(deployment) = find(objects, "Deployment", spec.name) else {
        out.push(Finding::new(
            &here,
            "missing: the demo overlay runs the demo issuer",
        ));
        return out;
    };
    if deployment["spec"]["replicas"].as_u64().unwrap_or(1) != 1 {
        out.push(Finding::new(
            &here,
            "replicas must be 1: each replica would make its own key in its own volume",
        ));
    }
    let Some(container) = container_named(deployment, spec.name) else {
        out.push(Finding::new(
            &here,
            format!("no container named {}", spec.name),
        ));
        return out;
    };
    if container["command"][0] != spec.binary {
        out.push(Finding::new(&here, format!("must run `{}`", spec.binary)));
    }
    check_ports(container, &spec, &here, &mut out);
    for probe in ["livenessProbe", "readinessProbe"] {
        let port = &container[probe]["httpGet"]["port"];
        if !is_admin_port(port, &spec) {
            out.push(Finding::new(
                &here,
                format!("{probe} must be httpGet on the admin port"),
            ));
        }
    }
    let data_dir = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "DATA_DIR")
        .map(|v| scalar(&v["value"]));
    let volumes = &deployment["spec"]["template"]["spec"]["volumes"];
    let on_volume = data_dir.as_deref().is_some_and(|dir| {
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| {
                m["mountPath"] == dir
                    && volumes.as_array().into_iter().flatten().any(|v| {
                        v["name"] == m["name"]
                            && (v.get("emptyDir").is_some()
                                || v.get("persistentVolumeClaim").is_some())
                    })
            })
    });
    if !on_volume {
        out.push(Finding::new(
            &here,
            format!("DATA_DIR ({data_dir:?}) must be set and mounted from an emptyDir or a PersistentVolumeClaim (the key is written there)"),
        ));
    }
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    match find(objects, "Service", spec.name) {
        None => out.push(Finding::new(
            format!("{place}: Service {}", spec.name),
            "missing",
        )),
        Some(service) => {
            let port_ok = service["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["port"].as_u64() == Some(u64::from(spec.public_port)));
            if !selects(&service["spec"]["selector"], labels) || !port_ok {
                out.push(Finding::new(
                    format!("{place}: Service {}", spec.name),
                    format!(
                        "must select the identity pods and expose port {}",
                        spec.public_port
                    ),
                ));
            }
        }
    }
    out
}
