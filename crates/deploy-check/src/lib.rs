//! Checks that keep ShopEasy's deployment files honest (SPEC §8, §10).
//!
//! The defaults in code are the single source of truth; `docker-compose.yml`
//! (`${VAR:-default}`), `.env.example` and the Kubernetes ConfigMaps repeat
//! them so an operator can see and change them. Nothing but a test stops
//! those copies from drifting, so this crate is that test: it reads the files
//! as text and compares them with [`shopeasy_runtime::settings::default_keys`]
//! of each service's settings type. The crate ships nothing but a small
//! health probe binary (`shopeasy-probe`, for compose health checks in a
//! shell-less image); its tests live in `tests/` and get the settings types
//! from the service crates (dev-dependencies).
//!
//! How the pieces fit:
//! - [`catalogue`] holds what SPEC §1 says about each service (binary, ports,
//!   dependencies) plus, from the tests, its defaults by variable name.
//! - [`interpolation`] parses compose's `${VAR:-default}` syntax.
//! - [`compose`] checks the compose file and the Prometheus scrape config.
//! - [`dotenv`] checks `.env.example`.
//! - [`kube`] loads and checks Kubernetes objects, base files and rendered output.
//! - [`policy`] checks the security and operability policy every workload meets.
//! - [`reference`](mod@reference) generates the settings reference from the code.
//! - [`yaml`] reads YAML (anchors and merge keys resolved) as JSON values.
//!
//! Every check returns a list of [`Finding`]s (empty = fine), so a test can
//! also run a check on a deliberately broken copy and assert what it finds.

pub mod catalogue;
pub mod compose;
pub mod dotenv;
pub mod interpolation;
pub mod kube;
pub mod policy;
pub mod reference;
pub mod yaml;

use std::{fmt, path::PathBuf};

/// Why a deployment file could not be read at all (as opposed to a
/// [`Finding`] in a file that was read).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Text is not the YAML or `KEY=VALUE` list it should be.
    #[error("{what}: {message}")]
    Parse {
        /// Which text.
        what: String,
        /// What the parser said.
        message: String,
    },
    /// `kubectl kustomize` failed.
    #[error("kubectl kustomize {}: {message}", dir.display())]
    Kubectl {
        /// The kustomization folder.
        dir: PathBuf,
        /// kubectl's error output.
        message: String,
    },
}

impl Error {
    pub(crate) fn parse(what: impl Into<String>, message: impl fmt::Display) -> Self {
        Self::Parse {
            what: what.into(),
            message: message.to_string(),
        }
    }
}

/// Settings a deployment chooses for what it is rather than tunes, so any
/// value may be written (as a literal): `DEMO_SEED`, on in compose and the
/// demo overlay, off (the code's default) everywhere else. Wiring
/// ([`catalogue::is_wiring`]) is the other such kind.
pub const DEPLOYMENT_CHOICES: &[&str] = &["DEMO_SEED"];

/// Whether `var` is one of the [`DEPLOYMENT_CHOICES`].
pub fn is_deployment_choice(var: &str) -> bool {
    DEPLOYMENT_CHOICES.contains(&var)
}

/// One disagreement between a deployment file and the code or the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Where: a file and the object or service in it.
    pub place: String,
    /// What is wrong, naming the key and both values where there are two.
    pub message: String,
}

impl Finding {
    /// A finding at `place`.
    pub fn new(place: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            place: place.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

/// Renders findings one per line, for assertion messages.
pub fn report(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| format!("  - {f}"))
        .collect::<Vec<_>>()
        .join("\n")
}
