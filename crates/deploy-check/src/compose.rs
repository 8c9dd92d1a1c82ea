//! `docker-compose.yml` (and the Prometheus scrape config it mounts),
//! checked against the catalogue.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use crate::{
    Error, Finding,
    catalogue::{
        IDENTITY_ROUTE_VAR, JWKS_VAR, PUBLIC_KEY_VAR, ServiceSpec, VERIFIERS, display, identity,
        is_wiring, same_value, url_host_port,
    },
    interpolation, yaml,
    yaml::scalar,
};

/// Services other than the gateway that may publish ports: the viewers.
pub const VIEWERS: &[&str] = &["jaeger", "prometheus", "grafana"];

/// The compose service running the fault proxy. It may publish its API, on
/// the host's loopback only: whoever reaches it can break the system.
pub const FAULTS: &str = "faults";

/// The compose service running the console (`shopeasy-console`). It may
/// publish its page, on `${SHOPEASY_BIND:-127.0.0.1}` as the viewers are.
pub const CONSOLE: &str = "console";

/// The compose services besides the catalogue's that run the ShopEasy
/// image: the fault proxy and the console. [`check`] hardens them as it
/// does the services: the console holds the admin token, and the fault
/// proxy sits on every edge.
pub const TOOLS: [&str; 2] = [FAULTS, CONSOLE];

/// The service edges compose routes through a fault proxy: the proxy's name
/// (as in the embedded mode, `caller-callee`), the caller, and the caller's
/// variable that holds the callee's URL.
pub const PROXIED_EDGES: [(&str, &str, &str); 4] = [
    ("gateway-product", "gateway", "ROUTES__PRODUCT_URL"),
    ("gateway-order", "gateway", "ROUTES__ORDER_URL"),
    ("order-inventory", "order", "INVENTORY__URL"),
    ("order-product", "order", "PRODUCT__URL"),
];

/// The compose variable that chooses the host address the gateway and the
/// viewers are published on; its default must be loopback.
pub const BIND_VAR: &str = "SHOPEASY_BIND";

/// The host address a published port (`[ip:]host:container`, as written)
/// binds once compose fills in defaults; `None` when it names none (every
/// interface).
fn published_host(port: &str) -> Option<String> {
    let filled = filled(port);
    let filled = filled.split('/').next().unwrap_or_default(); // `/tcp`
    if let Some(v6) = filled.strip_prefix('[') {
        return v6.split_once(']').map(|(ip, _)| ip.to_owned());
    }
    let parts: Vec<&str> = filled.split(':').collect();
    (parts.len() == 3).then(|| parts[0].to_owned())
}

/// `text` with every `${VAR:-default}` / `${VAR-default}` replaced by its
/// default: what a plain `up` without `.env` uses.
pub fn filled(text: &str) -> String {
    let mut filled = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        filled.push_str(&rest[..at]);
        let body = &rest[at + 2..];
        let end = body.find('}').unwrap_or(body.len());
        let inner = &body[..end];
        let default = inner
            .split_once(":-")
            .or_else(|| inner.split_once('-'))
            .map_or("", |(_, d)| d);
        filled.push_str(default);
        rest = body.get(end + 1..).unwrap_or_default();
    }
    filled.push_str(rest);
    filled
}

/// Checks that `service` publishes only on loopback: each port names a
/// host address that is loopback by default (literally, or through
/// `${SHOPEASY_BIND:-127.0.0.1}`).
fn check_published_on_loopback(place: &str, service: &ComposeService, out: &mut Vec<Finding>) {
    for port in &service.ports {
        let loopback = published_host(port)
            .and_then(|h| h.parse::<std::net::IpAddr>().ok())
            .is_some_and(|ip| ip.is_loopback());
        if !loopback {
            out.push(Finding::new(
                place,
                format!(
                    "publishes {port:?} on all interfaces: write \"${{{BIND_VAR}:-127.0.0.1}}:…\" (loopback unless .env says otherwise)"
                ),
            ));
        }
    }
}

/// Checks that a container of ours runs as a non-root user, on a
/// read-only root file system, with every capability dropped and
/// `no-new-privileges` (no setuid binary can raise it): all the image's
/// binaries need (none writes outside a named volume) and all a
/// compromised process should get.
fn check_hardening(place: &str, service: &ComposeService, out: &mut Vec<Finding>) {
    let root = service.user.is_empty()
        || service.user == "0"
        || service.user.starts_with("0:")
        || service.user.starts_with("root");
    if root || !service.read_only || !service.cap_drop.iter().any(|c| c == "ALL") {
        out.push(Finding::new(
            place,
            "must run as a non-root user with read_only: true and cap_drop: [ALL]",
        ));
    }
    let no_new_privileges = service.security_opt.iter().any(|o| {
        matches!(
            o.as_str(),
            "no-new-privileges" | "no-new-privileges:true" | "no-new-privileges=true"
        )
    });
    if !no_new_privileges {
        out.push(Finding::new(
            place,
            "must set security_opt: [\"no-new-privileges:true\"]",
        ));
    }
}

/// Checks that Grafana has no default admin password: none written, or
/// `${VAR:-}` with an empty default (then the compose file must turn the
/// admin off when it is empty).
fn check_grafana(compose: &Compose, out: &mut Vec<Finding>) {
    let Some(grafana) = compose.services.get("grafana") else {
        return;
    };
    let place = "docker-compose.yml: services.grafana";
    if let Some(value) = grafana.environment.get("GF_SECURITY_ADMIN_PASSWORD") {
        let found = interpolation::find(value);
        let default = match found.as_slice() {
            [] => Some(value.clone()),
            [only]
                if value.trim()
                    == format!(
                        "${{{}:-{}}}",
                        only.var,
                        only.default.clone().unwrap_or_default()
                    )
                    || value.trim() == format!("${{{}}}", only.var) =>
            {
                only.default.clone()
            }
            _ => Some(value.clone()),
        };
        if default.as_deref().is_some_and(|d| !d.is_empty()) {
            out.push(Finding::new(
                place,
                format!(
                    "GF_SECURITY_ADMIN_PASSWORD = {value:?} sets a default admin password: leave it empty by default (anonymous viewers only)"
                ),
            ));
        }
    }
    let all = serde_json::to_string(&compose.document["services"]["grafana"]).unwrap_or_default();
    if !all.contains("GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION") {
        out.push(Finding::new(
            place,
            "without an admin password Grafana must not create its admin/admin user (GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION)",
        ));
    }
}

/// A parsed compose file, YAML anchors and merge keys (`<<`) resolved.
#[derive(Debug, Clone)]
pub struct Compose {
    /// The whole document as JSON.
    pub document: Json,
    /// Services by name.
    pub services: BTreeMap<String, ComposeService>,
}

/// The parts of one compose service the checks read.
#[derive(Debug, Clone, Default)]
pub struct ComposeService {
    /// `environment`, map or list form, values as written.
    pub environment: BTreeMap<String, String>,
    /// `entrypoint` followed by `command`.
    pub command: Vec<String>,
    /// `healthcheck.test`, if any.
    pub healthcheck: Option<Vec<String>>,
    /// `ports` as written (`"8080:8080"`).
    pub ports: Vec<String>,
    /// `depends_on`: service → condition (`service_healthy`, …).
    pub depends_on: BTreeMap<String, String>,
    /// `user`, as written.
    pub user: String,
    /// `read_only`.
    pub read_only: bool,
    /// `cap_drop`.
    pub cap_drop: Vec<String>,
    /// `security_opt` (`no-new-privileges:true`, …).
    pub security_opt: Vec<String>,
    /// `profiles`: empty = started by a plain `up`.
    pub profiles: Vec<String>,
    /// `volumes` as `source:target[:mode]` (the long form rewritten so).
    pub volumes: Vec<String>,
}

fn strings(value: &Json) -> Vec<String> {
    match value {
        Json::Array(items) => items.iter().map(scalar).collect(),
        Json::Null => Vec::new(),
        other => scalar(other)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    }
}

impl Compose {
    /// Parses a compose file.
    ///
    /// # Errors
    /// [`Error::Parse`] when it is not YAML or has no `services` mapping.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let document = yaml::to_json(text)?;
        let Some(raw) = document.get("services").and_then(Json::as_object) else {
            return Err(Error::parse("docker-compose.yml", "no `services` mapping"));
        };
        let services = raw
            .iter()
            .map(|(name, s)| (name.clone(), ComposeService::from_json(s)))
            .collect();
        Ok(Self { document, services })
    }

    /// Every interpolation in every string value of the file.
    pub fn interpolations(&self) -> Vec<interpolation::Interpolation> {
        fn walk(v: &Json, out: &mut Vec<interpolation::Interpolation>) {
            match v {
                Json::String(s) => out.extend(interpolation::find(s)),
                Json::Array(a) => a.iter().for_each(|x| walk(x, out)),
                Json::Object(o) => o.values().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.document, &mut out);
        out
    }
}

impl ComposeService {
    fn from_json(s: &Json) -> Self {
        let environment = match s.get("environment") {
            Some(Json::Object(map)) => map.iter().map(|(k, v)| (k.clone(), scalar(v))).collect(),
            Some(Json::Array(list)) => list
                .iter()
                .map(scalar)
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (kv, String::new()),
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        let mut command = s.get("entrypoint").map(strings).unwrap_or_default();
        command.extend(s.get("command").map(strings).unwrap_or_default());
        let depends_on = match s.get("depends_on") {
            Some(Json::Object(map)) => map
                .iter()
                .map(|(k, v)| {
                    let condition = v.get("condition").map(scalar);
                    (
                        k.clone(),
                        condition.unwrap_or_else(|| "service_started".into()),
                    )
                })
                .collect(),
            Some(Json::Array(list)) => list
                .iter()
                .map(|v| (scalar(v), "service_started".into()))
                .collect(),
            _ => BTreeMap::new(),
        };
        Self {
            environment,
            command,
            healthcheck: s
                .get("healthcheck")
                .and_then(|h| h.get("test"))
                .map(strings),
            ports: s.get("ports").map(strings).unwrap_or_default(),
            depends_on,
            user: s.get("user").map(scalar).unwrap_or_default(),
            read_only: s.get("read_only") == Some(&Json::Bool(true)),
            cap_drop: s.get("cap_drop").map(strings).unwrap_or_default(),
            security_opt: s.get("security_opt").map(strings).unwrap_or_default(),
            profiles: s.get("profiles").map(strings).unwrap_or_default(),
            volumes: s
                .get("volumes")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
                .map(|v| match v {
                    Json::Object(_) => format!("{}:{}", scalar(&v["source"]), scalar(&v["target"])),
                    other => scalar(other),
                })
                .collect(),
        }
    }
}

/// Checks the compose file against the catalogue: each service runs its
/// binary, is given only settings it reads, repeats every tunable default
/// as `${VAR:-default}` equal to the code's and lists every `resilience.*`
/// key, listens on SPEC's ports, has a health check on its admin listener,
/// runs as non-root on a read-only file system with no capabilities and no
/// new privileges (as do the [`TOOLS`], the fault proxy and the console),
/// starts after what it calls is healthy, and publishes no port unless it is
/// the gateway, the console or a viewer (those on loopback by default).
pub fn check(compose: &Compose, specs: &[ServiceSpec]) -> Vec<Finding> {
    let mut out = Vec::new();
    for spec in specs {
        let place = format!("docker-compose.yml: services.{}", spec.name);
        let Some(service) = compose.services.get(spec.name) else {
            out.push(Finding::new(&place, "service missing"));
            continue;
        };
        if service.command.first().map(String::as_str) != Some(spec.binary) {
            out.push(Finding::new(
                &place,
                format!("runs {:?}, expected `{}`", service.command, spec.binary),
            ));
        }
        check_environment(&place, &service.environment, spec, &mut out);
        check_listeners(&place, &service.environment, spec, &mut out);
        let probe = format!("http://127.0.0.1:{}/health/ready", spec.admin_port);
        match &service.healthcheck {
            Some(test) if test.first().map(String::as_str) == Some("CMD") && test.contains(&probe) => {}
            other => out.push(Finding::new(
                &place,
                format!("healthcheck.test must be exec form (\"CMD\", no shell in the image) probing {probe}; found {other:?}"),
            )),
        }
        check_hardening(&place, service, &mut out);
        if spec.name == "gateway" {
            check_published_on_loopback(&place, service, &mut out);
            if !service
                .ports
                .iter()
                .any(|p| p.ends_with(&format!(":{}", spec.public_port)))
            {
                out.push(Finding::new(
                    &place,
                    format!("must publish port {}", spec.public_port),
                ));
            }
        } else if !service.ports.is_empty() {
            out.push(Finding::new(
                &place,
                format!(
                    "publishes {:?}: only the gateway and the viewers may",
                    service.ports
                ),
            ));
        }
        for callee in spec.calls {
            if service.depends_on.get(*callee).map(String::as_str) != Some("service_healthy") {
                out.push(Finding::new(
                    &place,
                    format!("must start after `{callee}` is healthy (depends_on: {callee}: condition: service_healthy)"),
                ));
            }
        }
    }
    for (name, service) in &compose.services {
        let place = format!("docker-compose.yml: services.{name}");
        let ours = specs.iter().any(|s| s.name == name)
            || VIEWERS.contains(&name.as_str())
            || name == CONSOLE;
        if TOOLS.contains(&name.as_str()) {
            check_hardening(&place, service, &mut out);
        }
        if name == FAULTS {
            if let Some(open) = service.ports.iter().find(|p| !p.starts_with("127.0.0.1:")) {
                out.push(Finding::new(
                    &place,
                    format!("publishes {open:?}: the fault API is published on 127.0.0.1 only"),
                ));
            }
        } else if VIEWERS.contains(&name.as_str()) || name == CONSOLE {
            check_published_on_loopback(&place, service, &mut out);
        } else if !ours && !service.ports.is_empty() {
            out.push(Finding::new(
                &place,
                format!(
                    "publishes {:?}: only the gateway and the viewers may",
                    service.ports
                ),
            ));
        }
        for (dependency, condition) in &service.depends_on {
            let Some(d) = compose.services.get(dependency) else {
                out.push(Finding::new(
                    &place,
                    format!("depends on `{dependency}`, which is not a service"),
                ));
                continue;
            };
            if condition == "service_healthy" && d.healthcheck.is_none() {
                out.push(Finding::new(
                    &place,
                    format!("waits for `{dependency}` to be healthy, but it has no healthcheck"),
                ));
            }
            if !d.profiles.is_empty() && service.profiles.is_empty() {
                out.push(Finding::new(
                    &place,
                    format!(
                        "depends on `{dependency}`, which only starts with profile {:?}",
                        d.profiles
                    ),
                ));
            }
        }
    }
    check_grafana(compose, &mut out);
    // A `${VAR:-default}` anywhere (an anchor, say) for a setting's variable
    // must carry that setting's default for every service reading it.
    for i in compose.interpolations() {
        let Some(given) = &i.default else { continue };
        for spec in specs {
            if let Some(default) = spec.defaults.as_ref().and_then(|d| d.get(&i.var))
                && !is_wiring(&i.var)
                && !same_value(default, given)
            {
                out.push(Finding::new(
                    "docker-compose.yml",
                    format!(
                        "${{{}:-{given}}} differs from {}'s default in code ({})",
                        i.var,
                        spec.name,
                        display(default)
                    ),
                ));
            }
        }
    }
    out.sort_by(|a, b| (&a.place, &a.message).cmp(&(&b.place, &b.message)));
    out.dedup();
    out
}

fn check_environment(
    place: &str,
    environment: &BTreeMap<String, String>,
    spec: &ServiceSpec,
    out: &mut Vec<Finding>,
) {
    let Some(defaults) = &spec.defaults else {
        return;
    };
    for (var, value) in environment {
        let Some(default) = defaults.get(var) else {
            if let Some(name) = var.strip_suffix(SECRET_FILE_SUFFIX) {
                if defaults.contains_key(name) && is_credential_var(name) {
                    // A path in the container (wiring), read by the loader.
                    continue;
                }
                out.push(Finding::new(
                    place,
                    format!(
                        "{var}: only a credential {} reads (a `*_TOKEN` setting) may be given as \
                         a file (`<NAME>{SECRET_FILE_SUFFIX}`)",
                        spec.binary
                    ),
                ));
                continue;
            }
            out.push(Finding::new(
                place,
                format!(
                    "{var} is not a setting {} reads (stray or misspelt)",
                    spec.binary
                ),
            ));
            continue;
        };
        match interpolation::own_default(var, value) {
            None if crate::is_deployment_choice(var) => {}
            // Wiring may have any value, as its compose default too.
            Some(given) if !is_wiring(var) && !same_value(default, given) => {
                out.push(Finding::new(
                    place,
                    format!(
                        "{var}: compose default {given} differs from the default in code ({})",
                        display(default)
                    ),
                ))
            }
            Some(_) => {}
            None if !is_wiring(var) => out.push(Finding::new(
                place,
                format!(
                    "{var} = {value:?}: a tunable setting must be written ${{{var}:-{}}}",
                    display(default)
                ),
            )),
            None => {}
        }
    }
    for var in defaults.keys().filter(|v| v.starts_with("RESILIENCE__")) {
        if !environment.contains_key(var) {
            out.push(Finding::new(
                place,
                format!(
                    "{var} missing: every resilience setting is listed (${{{var}:-{}}})",
                    display(&defaults[var])
                ),
            ));
        }
    }
}

/// The suffix of a variable giving a credential's value as a file: the
/// settings loader reads `<NAME>_FILE` where `<NAME>` is a credential.
pub const SECRET_FILE_SUFFIX: &str = "_FILE";

/// Whether the variable `var` (`INVENTORY__SERVICE_TOKEN`) names a credential
/// key, by the loader's own rule, so compose and the code cannot disagree.
fn is_credential_var(var: &str) -> bool {
    shopeasy_runtime::settings::credential::is_credential_key(
        &var.to_ascii_lowercase().replace("__", "."),
    )
}

/// The port the service will listen on: the given address, else the default.
fn port_of(environment: &BTreeMap<String, String>, spec: &ServiceSpec, var: &str) -> Option<u16> {
    let given = environment.get(var).cloned();
    let default = spec.defaults.as_ref().and_then(|d| d.get(var)).map(scalar);
    let addr = given.or(default)?;
    let addr = interpolation::own_default(var, &addr).map_or(addr.clone(), str::to_owned);
    addr.rsplit_once(':')?.1.parse().ok()
}

fn check_listeners(
    place: &str,
    environment: &BTreeMap<String, String>,
    spec: &ServiceSpec,
    out: &mut Vec<Finding>,
) {
    for (var, want) in [
        ("LISTEN_ADDR", spec.public_port),
        ("ADMIN_ADDR", spec.admin_port),
    ] {
        match port_of(environment, spec, var) {
            Some(port) if port == want => {}
            Some(port) => out.push(Finding::new(
                place,
                format!("{var} port {port}, SPEC says {want}"),
            )),
            None if spec.defaults.is_some() || environment.contains_key(var) => {
                out.push(Finding::new(place, format!("{var} has no port")));
            }
            None => {}
        }
    }
}

/// Checks how customers' tokens are wired (issue 15): each of the
/// [`VERIFIERS`] (gateway, order) is given a key source — `AUTH__JWKS_URL`
/// (an http(s) URL once compose fills in defaults) or `AUTH__PUBLIC_KEY_PEM`
/// — without which it refuses to start, and waits for the compose service
/// that URL names to be healthy; the gateway's `ROUTES__IDENTITY_URL`, when
/// it names a compose service, waits for it too. The demo issuer
/// ([`identity`], `shopeasy-identity`) runs, publishes no port (clients sign
/// in through the gateway) and keeps its key on a named volume mounted at
/// its `DATA_DIR`, so a restart keeps the tokens valid.
pub fn check_auth(compose: &Compose) -> Vec<Finding> {
    let mut out = Vec::new();
    let waits_for = |caller: &str,
                     service: &ComposeService,
                     var: &str,
                     url: &str,
                     out: &mut Vec<Finding>| {
        let place = format!("docker-compose.yml: services.{caller}");
        let Some((host, _)) = url_host_port(url) else {
            out.push(Finding::new(
                &place,
                format!("{var} = {url:?} is not an http(s) URL"),
            ));
            return;
        };
        if compose.services.contains_key(&host)
            && service.depends_on.get(&host).map(String::as_str) != Some("service_healthy")
        {
            out.push(Finding::new(
                &place,
                format!("{var} names `{host}`: must start after it is healthy (depends_on: {host}: condition: service_healthy)"),
            ));
        }
    };
    for caller in VERIFIERS {
        let place = format!("docker-compose.yml: services.{caller}");
        let Some(service) = compose.services.get(caller) else {
            out.push(Finding::new(&place, "service missing"));
            continue;
        };
        let given = |var: &str| {
            service
                .environment
                .get(var)
                .map(|v| filled(v))
                .filter(|v| !v.trim().is_empty())
        };
        match (given(JWKS_VAR), given(PUBLIC_KEY_VAR)) {
            (Some(url), None) => waits_for(caller, service, JWKS_VAR, &url, &mut out),
            (None, Some(_)) => {}
            (Some(_), Some(_)) => out.push(Finding::new(
                &place,
                format!("both {JWKS_VAR} and {PUBLIC_KEY_VAR}: {caller} refuses to start with two key sources"),
            )),
            (None, None) => out.push(Finding::new(
                &place,
                format!("no {JWKS_VAR} (nor {PUBLIC_KEY_VAR}): {caller} verifies customers' tokens and refuses to start without a key source"),
            )),
        }
        if caller == "gateway"
            && let Some(url) = given(IDENTITY_ROUTE_VAR)
        {
            waits_for(caller, service, IDENTITY_ROUTE_VAR, &url, &mut out);
        }
    }
    let spec = identity();
    let place = format!("docker-compose.yml: services.{}", spec.name);
    match compose.services.get(spec.name) {
        None => out.push(Finding::new(
            &place,
            format!("missing: compose runs the demo issuer (`{}`)", spec.binary),
        )),
        Some(service) => {
            if service.command.first().map(String::as_str) != Some(spec.binary) {
                out.push(Finding::new(
                    &place,
                    format!("runs {:?}, expected `{}`", service.command, spec.binary),
                ));
            }
            if !service.ports.is_empty() {
                out.push(Finding::new(
                    &place,
                    format!(
                        "publishes {:?}: the demo issuer is reached through the gateway (POST /api/session), never directly",
                        service.ports
                    ),
                ));
            }
            let named: BTreeSet<&str> = compose.document["volumes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            let data_dir = service.environment.get("DATA_DIR").map(|d| filled(d));
            let kept = data_dir.as_deref().is_some_and(|dir| {
                service.volumes.iter().any(|v| {
                    let mut parts = v.split(':');
                    let (source, target) = (parts.next().unwrap_or_default(), parts.next());
                    named.contains(source) && target == Some(dir)
                })
            });
            if !kept {
                out.push(Finding::new(
                    &place,
                    format!(
                        "its key folder (DATA_DIR = {data_dir:?}) must be a named volume, so a restart keeps the key and the tokens it signed stay valid"
                    ),
                ));
            }
        }
    }
    out.sort_by(|a, b| (&a.place, &a.message).cmp(&(&b.place, &b.message)));
    out.dedup();
    out
}

/// One proxy of the fault proxy's config file (a Toxiproxy config).
#[derive(Debug, Clone, serde::Deserialize)]
struct ProxyEntry {
    name: String,
    listen: String,
    upstream: String,
}

/// Checks that every edge of [`PROXIED_EDGES`] goes through the fault proxy:
/// `proxies_json` (the `--config` of the `faults` service) has exactly one
/// proxy per edge, named as in the embedded mode and forwarding to the
/// callee's public port, and the caller's URL points at that proxy's port on
/// `faults`, which it waits for.
pub fn check_fault_proxies(
    compose: &Compose,
    proxies_json: &str,
    specs: &[ServiceSpec],
) -> Vec<Finding> {
    let place = "deploy/faults/proxies.json";
    let proxies: Vec<ProxyEntry> = match serde_json::from_str(proxies_json) {
        Ok(p) => p,
        Err(e) => return vec![Finding::new(place, format!("not a Toxiproxy config: {e}"))],
    };
    let mut out = Vec::new();
    let names: Vec<&str> = proxies.iter().map(|p| p.name.as_str()).collect();
    let expected: Vec<&str> = PROXIED_EDGES.iter().map(|(edge, ..)| *edge).collect();
    if names != expected {
        out.push(Finding::new(
            place,
            format!("proxies {names:?}, expected one per edge: {expected:?}"),
        ));
    }
    if compose
        .services
        .get(FAULTS)
        .is_none_or(|f| f.healthcheck.is_none())
    {
        out.push(Finding::new(
            "docker-compose.yml",
            format!("no `{FAULTS}` service with a healthcheck"),
        ));
    }
    for (edge, caller, var) in PROXIED_EDGES {
        let Some(proxy) = proxies.iter().find(|p| p.name == edge) else {
            continue;
        };
        let callee = edge.rsplit('-').next().unwrap_or_default();
        if let Some(spec) = specs.iter().find(|s| s.name == callee) {
            let upstream = format!("{callee}:{}", spec.public_port);
            if proxy.upstream != upstream {
                out.push(Finding::new(
                    place,
                    format!("{edge} forwards to {}, expected {upstream}", proxy.upstream),
                ));
            }
        }
        let port = proxy.listen.rsplit(':').next().unwrap_or_default();
        let want = format!("http://{FAULTS}:{port}");
        let caller_place = format!("docker-compose.yml: services.{caller}");
        let Some(service) = compose.services.get(caller) else {
            continue;
        };
        let given = service.environment.get(var).map_or("", String::as_str);
        if given != want {
            out.push(Finding::new(
                &caller_place,
                format!("{var} = {given:?}: edge {edge} goes through its fault proxy, {want}"),
            ));
        }
        if service.depends_on.get(FAULTS).map(String::as_str) != Some("service_healthy") {
            out.push(Finding::new(
                &caller_place,
                format!("must start after `{FAULTS}` is healthy (its edges go through it)"),
            ));
        }
    }
    out.sort_by(|a, b| (&a.place, &a.message).cmp(&(&b.place, &b.message)));
    out.dedup();
    out
}

/// Checks that Prometheus scrapes every admin listener.
pub fn check_scrape(prometheus_yml: &str, specs: &[ServiceSpec]) -> Vec<Finding> {
    let place = "deploy/prometheus/prometheus.yml";
    let document = match yaml::to_json(prometheus_yml) {
        Ok(d) => d,
        Err(e) => return vec![Finding::new(place, e.to_string())],
    };
    let mut targets = BTreeSet::new();
    for job in document["scrape_configs"].as_array().into_iter().flatten() {
        for sc in job["static_configs"].as_array().into_iter().flatten() {
            targets.extend(sc["targets"].as_array().into_iter().flatten().map(scalar));
        }
    }
    specs
        .iter()
        .map(|s| format!("{}:{}", s.name, s.admin_port))
        .filter(|t| !targets.contains(t))
        .map(|t| Finding::new(place, format!("no scrape target {t}")))
        .collect()
}
