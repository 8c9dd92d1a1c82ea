//! `.env.example`: every variable compose reads, with its default.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    Error, Finding,
    catalogue::{ServiceSpec, display, is_wiring, same_value},
    compose::Compose,
};

/// Parses `KEY=VALUE` lines; `#` starts a comment line.
///
/// # Errors
/// [`Error::Parse`] on a line that is neither, or a key given twice.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(Error::parse(
                ".env",
                format!("line {}: expected KEY=VALUE", n + 1),
            ));
        };
        if out
            .insert(key.trim().to_owned(), value.trim().to_owned())
            .is_some()
        {
            return Err(Error::parse(
                ".env",
                format!("line {}: {} given twice", n + 1, key.trim()),
            ));
        }
    }
    Ok(out)
}

/// Checks that `.env.example` lists exactly the variables compose reads,
/// each with the default in code (tunable settings) or else with compose's
/// own default, at every place compose reads it. Wiring settings (addresses,
/// URLs, tokens: [`is_wiring`]) have no default to repeat from the code —
/// compose wires its own services (`http://identity:8085/…`), not the
/// code's loopback — so their copy in `.env.example` must be compose's:
/// a copied `.env` that says otherwise would rewire the stack.
pub fn check(
    env: &BTreeMap<String, String>,
    compose: &Compose,
    specs: &[ServiceSpec],
) -> Vec<Finding> {
    let place = ".env.example";
    let mut out = Vec::new();
    // Every default compose writes for each variable it reads (none for a
    // bare `${VAR}`).
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for i in compose.interpolations() {
        let entry = used.entry(i.var).or_default();
        entry.extend(i.default);
    }
    for var in used.keys().filter(|v| !env.contains_key(*v)) {
        out.push(Finding::new(
            place,
            format!("{var} is read by docker-compose.yml but not listed"),
        ));
    }
    for (var, value) in env {
        let Some(compose_defaults) = used.get(var) else {
            out.push(Finding::new(
                place,
                format!("{var} is not read by docker-compose.yml (stale)"),
            ));
            continue;
        };
        let mut tunable = false;
        for spec in specs {
            if let Some(default) = spec.defaults.as_ref().and_then(|d| d.get(var))
                && !is_wiring(var)
            {
                tunable = true;
                if !same_value(default, value) {
                    out.push(Finding::new(
                        place,
                        format!(
                            "{var}={value} differs from {}'s default in code ({})",
                            spec.name,
                            display(default)
                        ),
                    ));
                }
            }
        }
        // A tunable's compose default is compared with the code by
        // `compose::check`; everything else is compared with compose here.
        if !tunable {
            for d in compose_defaults.iter().filter(|d| *d != value) {
                out.push(Finding::new(
                    place,
                    format!("{var}={value} differs from docker-compose.yml's default ({d})"),
                ));
            }
        }
    }
    out
}
