//! Layered, validated, typed settings (SPEC §8).
//!
//! Each service defines one settings type: a plain serde struct whose
//! [`Default`] is the single source of truth for every default, and whose
//! [`Settings::validate`] checks ranges. [`Loader`] merges, in this order:
//!
//! 1. the defaults in code;
//! 2. an optional file (`--config FILE`; TOML, YAML or JSON by extension);
//! 3. the environment: key `a.b.c` is variable `A__B__C`; top-level keys are
//!    plain (`DATABASE_URL`).
//!
//! Every key that is given must exist: an unknown key in the file, or an
//! environment variable under one of the type's sections (for example
//! `RESILIENCE__INVENTORY__TIMEOUT_SECS`) is an error. Variables that name
//! neither a known top-level key nor a known section are not ours (`PATH`) and
//! are ignored. Every error is collected and reported together, each naming the
//! key, the value given and what is allowed.
//!
//! The merging and typed conversion is the `config` crate's; the unknown-key
//! and type checks are done here because `config` reads every environment
//! variable and stops at the first error.

pub mod credential;
pub mod process;
mod secret;
mod validate;

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
    process::ExitCode,
};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value as Json;

pub use process::{AdmissionSettings, DatabaseSettings, ProcessSettings, RedisSettings};
pub use secret::{MASK, Secret, SecretUrl};
pub use validate::{Seconds, SettingError, Validator, env_name};

/// A service's settings type.
pub trait Settings: Serialize + DeserializeOwned + Default {
    /// Checks every value's range and the relations between values,
    /// recording each problem in `v`.
    fn validate(&self, v: &mut Validator);
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// One or more keys are unknown or have invalid values.
    #[error("invalid settings:\n{}", list(.0))]
    Invalid(Vec<SettingError>),
    /// The settings file could not be read or parsed.
    #[error("cannot read settings file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A `<NAME>_FILE` variable names a credential file that cannot be read.
    #[error("cannot read {variable}={path}: {message}")]
    SecretFile {
        /// The variable (`SERVICE_TOKEN_FILE`).
        variable: String,
        /// The file it names.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn list(errors: &[SettingError]) -> String {
    errors
        .iter()
        .map(|e| format!("  - {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Loads a [`Settings`] type from defaults, a file and the environment.
#[derive(Debug, Default, Clone)]
pub struct Loader {
    file: Option<PathBuf>,
    env: Vec<(String, String)>,
    tolerated: Vec<String>,
    embedded_demo: bool,
}

impl Loader {
    /// A loader with no file and no environment (defaults only).
    pub fn new() -> Self {
        Self::default()
    }

    /// A loader reading the process environment and, if given, a file.
    pub fn from_process(file: Option<&Path>) -> Self {
        let mut loader = Self::new().env(std::env::vars());
        if let Some(file) = file {
            loader = loader.file(file);
        }
        loader
    }

    /// Reads `path` after the defaults.
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Uses `vars` as the environment (injected so tests need not touch the
    /// process environment).
    pub fn env<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// Keys that are not this type's but are not errors either: skipped
    /// silently. The embedded launcher passes the keys of every service it
    /// runs, so one file or environment can configure them all while a typo
    /// is still caught.
    pub fn tolerate(mut self, keys: impl IntoIterator<Item = String>) -> Self {
        self.tolerated.extend(keys);
        self
    }

    /// Marks this load as the embedded demo's: its launcher builds the
    /// settings in-process and sets its own random credentials, so the
    /// [`credential`] rules (length, published examples) are not applied.
    /// Only code calls this; a binary started from the environment never
    /// does.
    pub fn embedded_demo(mut self) -> Self {
        self.embedded_demo = true;
        self
    }

    /// Merges defaults, file and environment, then validates.
    ///
    /// # Errors
    /// [`SettingsError::File`] when the file cannot be read;
    /// [`SettingsError::Invalid`] listing every unknown key and bad value.
    pub fn load<S: Settings>(&self) -> Result<S, SettingsError> {
        let defaults = default_keys::<S>();
        let mut errors = Vec::new();
        // The credential values given (file, then environment): a `Secret`
        // serializes masked, so the rules are checked on what was given.
        let mut credentials: BTreeMap<String, String> = BTreeMap::new();
        let mut builder = config::Config::builder();
        for (key, value) in &defaults {
            builder = builder
                .set_default(key.as_str(), json_to_config(value))
                .map_err(|e| invalid(key, "", e.to_string()))?;
        }

        if let Some(path) = &self.file {
            let file = config::File::from(path.as_path());
            let given = config::Config::builder()
                .add_source(file.clone())
                .build()
                .map_err(|e| SettingsError::File {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            let table = given.cache.into_table().map_err(|e| SettingsError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
            let mut flat = BTreeMap::new();
            flatten_config("", table, &mut flat);
            let mut file_values = config::Config::builder();
            for (key, value) in flat {
                if !defaults.contains_key(&key) && self.tolerated.contains(&key) {
                    continue;
                }
                check_value(&defaults, &key, value.as_deref(), &mut errors);
                if let Some(value) = value {
                    if credential::is_credential_key(&key) && defaults.contains_key(&key) {
                        credentials.insert(key.clone(), value.clone());
                    }
                    file_values = file_values
                        .set_override(key.as_str(), typed(&defaults, &key, &value))
                        .map_err(|e| invalid(&key, "", e.to_string()))?;
                }
            }
            builder = builder.add_source(file_values.build().map_err(|e| SettingsError::File {
                path: path.clone(),
                message: e.to_string(),
            })?);
        }

        let sections = sections(&defaults);
        let env = secret_files(&self.env, &defaults, &sections)?;
        for (name, value) in &env {
            let Some(key) = env_key(name, &defaults, &sections) else {
                continue;
            };
            if !defaults.contains_key(&key) && self.tolerated.contains(&key) {
                continue;
            }
            check_value(&defaults, &key, Some(value), &mut errors);
            if credential::is_credential_key(&key) && defaults.contains_key(&key) {
                credentials.insert(key.clone(), value.clone());
            }
            builder = builder
                .set_override(key.as_str(), typed(&defaults, &key, value))
                .map_err(|e| invalid(&key, value, e.to_string()))?;
        }
        if !errors.is_empty() {
            return Err(SettingsError::Invalid(errors));
        }

        let settings: S = builder
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(|e| invalid("settings", "", e.to_string()))?;
        let mut v = Validator::new();
        settings.validate(&mut v);
        for (key, value) in &credentials {
            credential::check(&mut v, key, value, self.embedded_demo);
        }
        let errors = v.into_errors();
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsError::Invalid(errors))
        }
    }
}

/// Every key of a settings type, dotted (`resilience.inventory.timeout_seconds`).
pub fn keys<S: Settings>() -> Vec<String> {
    default_keys::<S>().into_keys().collect()
}

fn invalid(key: &str, value: &str, allowed: String) -> SettingsError {
    SettingsError::Invalid(vec![SettingError {
        key: key.to_owned(),
        value: value.to_owned(),
        allowed,
    }])
}

/// Maps an environment variable to a settings key, or `None` when it is not
/// ours. `A__B` maps to `a.b` when `a` is a section of the type; `NAME` maps to
/// `name` when that is a top-level key.
fn env_key(name: &str, defaults: &BTreeMap<String, Json>, sections: &[String]) -> Option<String> {
    let key = name.to_ascii_lowercase().replace("__", ".");
    if defaults.contains_key(&key) {
        return Some(key);
    }
    let top = key.split('.').next().unwrap_or_default();
    (key.contains('.') && sections.iter().any(|s| s == top)).then_some(key)
}

/// The suffix of a variable naming the file that holds a credential.
const FILE_SUFFIX: &str = "_FILE";

/// Resolves `<NAME>_FILE` variables (Docker/Kubernetes secrets are mounted as
/// files, so no token has to sit in `docker inspect` or a `.env`): where
/// `<NAME>` maps to a credential key of the type, the file's content (trailing
/// whitespace trimmed) becomes `<NAME>`'s value, unless `<NAME>` itself is
/// given non-empty, which wins. Only credentials: any other `_FILE` variable
/// is passed on unchanged and is an unknown key where it falls in a section.
///
/// # Errors
/// [`SettingsError::SecretFile`] naming the variable and path of a file that
/// cannot be read (or is not UTF-8).
fn secret_files(
    env: &[(String, String)],
    defaults: &BTreeMap<String, Json>,
    sections: &[String],
) -> Result<Vec<(String, String)>, SettingsError> {
    let credential_of = |name: &str| {
        env_key(name, defaults, sections)
            .filter(|key| credential::is_credential_key(key) && defaults.contains_key(key))
    };
    let given_directly = |name: &str| env.iter().any(|(n, v)| n == name && !v.is_empty());
    let mut from_files: BTreeMap<String, String> = BTreeMap::new();
    for (variable, path) in env {
        let Some(name) = variable.strip_suffix(FILE_SUFFIX) else {
            continue;
        };
        if credential_of(name).is_none() || given_directly(name) {
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(|e| SettingsError::SecretFile {
            variable: variable.clone(),
            path: PathBuf::from(path),
            message: e.to_string(),
        })?;
        from_files.insert(name.to_owned(), text.trim_end().to_owned());
    }
    let mut resolved: Vec<(String, String)> = env
        .iter()
        .filter(|(name, _)| {
            let file_of_credential = name
                .strip_suffix(FILE_SUFFIX)
                .is_some_and(|base| credential_of(base).is_some());
            !file_of_credential && !from_files.contains_key(name)
        })
        .cloned()
        .collect();
    resolved.extend(from_files);
    Ok(resolved)
}

/// Checks that `key` exists and that `value` has the default's type.
fn check_value(
    defaults: &BTreeMap<String, Json>,
    key: &str,
    value: Option<&str>,
    errors: &mut Vec<SettingError>,
) {
    let shown = value.unwrap_or("<table or list>");
    let Some(default) = defaults.get(key) else {
        errors.push(SettingError {
            key: key.to_owned(),
            value: shown.to_owned(),
            allowed: "unknown key: no such setting".to_owned(),
        });
        return;
    };
    let ok = match (default, value) {
        (_, None) => false,
        (Json::Bool(_), Some(v)) => v.parse::<bool>().is_ok(),
        (Json::Number(n), Some(v)) if n.is_f64() => v.trim().parse::<f64>().is_ok(),
        (Json::Number(_), Some(v)) => v.trim().parse::<i64>().is_ok(),
        _ => true,
    };
    if !ok {
        let want = match default {
            Json::Bool(_) => "true or false",
            Json::Number(n) if n.is_f64() => "a number",
            Json::Number(_) => "a whole number",
            _ => "a single value",
        };
        errors.push(SettingError {
            key: key.to_owned(),
            value: shown.to_owned(),
            allowed: format!("must be {want}"),
        });
    }
}

/// The top-level sections (nested tables) of a flattened settings type.
fn sections(defaults: &BTreeMap<String, Json>) -> Vec<String> {
    let mut out: Vec<String> = defaults
        .keys()
        .filter_map(|k| k.split_once('.').map(|(top, _)| top.to_owned()))
        .collect();
    out.dedup();
    out
}

/// Flattens a JSON object into dotted keys → scalar values.
fn flatten_json(value: &Json) -> BTreeMap<String, Json> {
    fn walk(prefix: &str, value: &Json, out: &mut BTreeMap<String, Json>) {
        match value {
            Json::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            other => {
                out.insert(prefix.to_owned(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", value, &mut out);
    out
}

fn flatten_config(
    prefix: &str,
    table: config::Map<String, config::Value>,
    out: &mut BTreeMap<String, Option<String>>,
) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k
        } else {
            format!("{prefix}.{k}")
        };
        match v.kind {
            config::ValueKind::Table(t) => flatten_config(&key, t, out),
            config::ValueKind::Array(_) => {
                out.insert(key, None);
            }
            _ => {
                out.insert(key, v.into_string().ok());
            }
        }
    }
}

/// A value given as text (environment, or a file read as text), converted to
/// the type of its default. Settings types embed shared parts with
/// `#[serde(flatten)]`, and serde hands a flattened field only what the
/// source said it was: a number given as `"3"` would not be a number there.
/// [`check_value`] has already refused text that does not convert.
fn typed(defaults: &BTreeMap<String, Json>, key: &str, text: &str) -> config::Value {
    let kind = match defaults.get(key) {
        Some(Json::Bool(_)) => text.parse().map(config::ValueKind::Boolean).ok(),
        Some(Json::Number(n)) if n.is_f64() => {
            text.trim().parse().map(config::ValueKind::Float).ok()
        }
        Some(Json::Number(_)) => text.trim().parse().map(config::ValueKind::I64).ok(),
        _ => None,
    };
    config::Value::new(
        None,
        kind.unwrap_or_else(|| config::ValueKind::String(text.to_owned())),
    )
}

fn json_to_config(value: &Json) -> config::Value {
    let kind = match value {
        Json::Bool(b) => config::ValueKind::Boolean(*b),
        Json::Number(n) if n.is_f64() => config::ValueKind::Float(n.as_f64().unwrap_or_default()),
        Json::Number(n) => config::ValueKind::I64(n.as_i64().unwrap_or_default()),
        Json::String(s) => config::ValueKind::String(s.clone()),
        _ => config::ValueKind::Nil,
    };
    config::Value::new(None, kind)
}

/// Every key of `S` with its default value, dotted
/// (`resilience.inventory.timeout_seconds`), exactly as [`Loader`] knows
/// them; [`env_name`] turns a key into its variable. Deployment checks
/// compare these with the copies in compose, `.env.example` and Kubernetes.
pub fn default_keys<S: Settings>() -> BTreeMap<String, Json> {
    flatten_json(&serde_json::to_value(S::default()).unwrap_or(Json::Null))
}

/// Renders settings as TOML (secrets are masked by their own types), usable
/// as a `--config` file.
pub fn render<S: Serialize>(settings: &S) -> String {
    serde_json::to_value(settings)
        .ok()
        .and_then(|json| toml::to_string_pretty(&json).ok())
        .unwrap_or_default()
}

/// The command-line flags every service binary shares (flatten into the
/// binary's own `clap` parser).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Settings file (TOML, YAML or JSON), read after the defaults and before
    /// the environment.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the settings, print the effective values (secrets masked) and
    /// exit: 0 when valid, 1 when not.
    #[arg(long)]
    pub check_config: bool,
    /// Print the built-in defaults as a settings file and exit.
    #[arg(long)]
    pub print_defaults: bool,
}

impl ConfigArgs {
    /// Loads the settings from the process environment and `--config`, and
    /// handles `--print-defaults` and `--check-config`.
    ///
    /// # Errors
    /// The exit code to return from `main` when the process should stop here:
    /// success after printing, failure (with the reasons on stderr) when the
    /// settings are invalid.
    pub fn load<S: Settings>(&self, service: &str) -> Result<S, ExitCode> {
        if self.print_defaults {
            print!("{}", defaults_document::<S>(service));
            return Err(ExitCode::SUCCESS);
        }
        match Loader::from_process(self.config.as_deref()).load::<S>() {
            Ok(settings) if self.check_config => {
                println!("# {service}: settings are valid; effective values:");
                print!("{}", render(&settings));
                Err(ExitCode::SUCCESS)
            }
            Ok(settings) => Ok(settings),
            Err(e) => {
                eprintln!("{service}: {e}");
                Err(ExitCode::FAILURE)
            }
        }
    }
}

/// The `--print-defaults` document: the defaults as TOML, with a header
/// explaining how keys map to environment variables.
pub fn defaults_document<S: Settings>(service: &str) -> String {
    format!(
        "# {service}: built-in defaults. Key a.b.c is environment variable A__B__C;\n\
         # top-level keys are plain (DATABASE_URL).\n{}",
        render(&S::default())
    )
}

impl fmt::Display for ConfigArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.config {
            Some(p) => write!(f, "--config {}", p.display()),
            None => f.write_str("(no settings file)"),
        }
    }
}

/// Settings shared by every service's admin surface and logs.
pub mod common {
    use serde::{Deserialize, Serialize};

    use super::{Seconds, Validator};

    /// How logs are written.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
    #[serde(default)]
    pub struct LogSettings {
        /// `auto` (human on a terminal, JSON otherwise), `text` or `json`.
        pub format: String,
        /// A `tracing` filter, for example `info,sqlx=warn`.
        pub level: String,
    }

    impl Default for LogSettings {
        fn default() -> Self {
            Self {
                format: "auto".into(),
                level: "info,sqlx=warn,h2=warn,tower=warn,hyper=warn".into(),
            }
        }
    }

    impl LogSettings {
        /// Validates under `prefix` (`log`).
        pub fn validate(&self, prefix: &str, v: &mut Validator) {
            v.one_of(
                &format!("{prefix}.format"),
                &self.format,
                &["auto", "text", "json"],
            );
        }
    }

    /// The database pool (SPEC §1: one database per service).
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    pub struct PoolSettings {
        /// Most connections open at once.
        pub max_connections: u32,
        /// How long a query waits for a free, answering connection before
        /// the request fails with 503 / UNAVAILABLE; also how long a
        /// one-statement write handed a connection without a ping waits for
        /// its answer (`crate::db::Database::one_round_trip`).
        pub acquire_timeout_seconds: Seconds,
        /// Upper bound of any one statement (Postgres `statement_timeout`).
        pub statement_timeout_seconds: Seconds,
        /// How long start-up keeps retrying the database before giving up.
        pub startup_timeout_seconds: Seconds,
    }

    impl Default for PoolSettings {
        fn default() -> Self {
            Self {
                max_connections: 10,
                acquire_timeout_seconds: Seconds::new(2.0),
                statement_timeout_seconds: Seconds::new(5.0),
                startup_timeout_seconds: Seconds::new(30.0),
            }
        }
    }

    impl PoolSettings {
        /// Validates under `prefix` (`database`).
        pub fn validate(&self, prefix: &str, v: &mut Validator) {
            v.within(prefix, |v| {
                v.number("max_connections", self.max_connections, 1..=1000);
                v.seconds(
                    "acquire_timeout_seconds",
                    self.acquire_timeout_seconds,
                    0.01..=60.0,
                );
                v.seconds(
                    "statement_timeout_seconds",
                    self.statement_timeout_seconds,
                    0.01..=600.0,
                );
                v.seconds(
                    "startup_timeout_seconds",
                    self.startup_timeout_seconds,
                    0.0..=3600.0,
                );
            });
        }
    }

    /// The shared retry budget (SPEC §5): retries may add at most `ratio` of
    /// the requests seen in the last `window_seconds`, plus
    /// `min_retries_per_window`. One budget per downstream target.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    pub struct RetryBudgetSettings {
        /// Retries allowed per request seen, 0..=1.
        pub ratio: f64,
        /// Retries always allowed per window, so a quiet service can retry.
        pub min_retries_per_window: u32,
        /// Length of the sliding window.
        pub window_seconds: Seconds,
    }

    impl Default for RetryBudgetSettings {
        fn default() -> Self {
            Self {
                ratio: 0.2,
                min_retries_per_window: 10,
                window_seconds: Seconds::new(10.0),
            }
        }
    }

    impl RetryBudgetSettings {
        /// Validates under `prefix` (`resilience.retry_budget`).
        pub fn validate(&self, prefix: &str, v: &mut Validator) {
            v.within(prefix, |v| {
                v.ratio("ratio", self.ratio, 0.0..=1.0);
                v.number(
                    "min_retries_per_window",
                    self.min_retries_per_window,
                    0..=100_000,
                );
                v.seconds("window_seconds", self.window_seconds, 1.0..=3600.0);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Demo {
        listen_addr: std::net::SocketAddr,
        admin_token: Secret,
        database_url: SecretUrl,
        retry_budget: common::RetryBudgetSettings,
        inner: Inner,
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner {
        timeout_seconds: Seconds,
        max_retries: u32,
    }

    impl Default for Inner {
        fn default() -> Self {
            Self {
                timeout_seconds: Seconds::new(3.0),
                max_retries: 2,
            }
        }
    }

    impl Default for Demo {
        fn default() -> Self {
            Self {
                listen_addr: ([127, 0, 0, 1], 8080).into(),
                admin_token: Secret::default(),
                database_url: SecretUrl::new("sqlite:demo.db"),
                retry_budget: Default::default(),
                inner: Inner::default(),
            }
        }
    }

    impl Settings for Demo {
        fn validate(&self, v: &mut Validator) {
            v.seconds(
                "inner.timeout_seconds",
                self.inner.timeout_seconds,
                0.001..=60.0,
            );
            v.number("inner.max_retries", self.inner.max_retries, 0..=10);
            self.retry_budget.validate("retry_budget", v);
        }
    }

    fn errors(result: Result<Demo, SettingsError>) -> Vec<SettingError> {
        match result {
            Err(SettingsError::Invalid(e)) => e,
            other => panic!("expected invalid settings, got {other:?}"),
        }
    }

    #[test]
    fn defaults_load() {
        let s: Demo = Loader::new().load().unwrap();
        assert_eq!(s, Demo::default());
    }

    #[test]
    fn file_then_environment_override_in_that_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "listen_addr = \"0.0.0.0:1\"\n[inner]\ntimeout_seconds = 1.5\nmax_retries = 4\n",
        )
        .unwrap();
        let s: Demo = Loader::new()
            .file(&path)
            .env([
                ("INNER__MAX_RETRIES", "7"),
                ("PATH", "/usr/bin"),
                ("UNRELATED__THING", "x"),
            ])
            .load()
            .unwrap();
        assert_eq!(
            s.listen_addr,
            "0.0.0.0:1".parse().unwrap(),
            "file beats default"
        );
        assert_eq!(
            s.inner.timeout_seconds,
            Seconds::new(1.5),
            "file beats default"
        );
        assert_eq!(s.inner.max_retries, 7, "environment beats file");
        assert_eq!(s.retry_budget.ratio, 0.2, "untouched keys keep defaults");
    }

    #[test]
    fn invalid_values_name_key_value_and_range() {
        let errs = errors(
            Loader::new()
                .env([
                    ("INNER__TIMEOUT_SECONDS", "0"),
                    ("INNER__MAX_RETRIES", "11"),
                    ("RETRY_BUDGET__RATIO", "1.5"),
                ])
                .load(),
        );
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "inner.timeout_seconds (env INNER__TIMEOUT_SECONDS) = 0: must be between 0.001 and 60 seconds",
                "inner.max_retries (env INNER__MAX_RETRIES) = 11: must be between 0 and 10",
                "retry_budget.ratio (env RETRY_BUDGET__RATIO) = 1.5: must be between 0 and 1",
            ]
        );
    }

    #[test]
    fn wrong_types_are_reported_together() {
        let errs = errors(
            Loader::new()
                .env([
                    ("INNER__MAX_RETRIES", "two"),
                    ("INNER__TIMEOUT_SECONDS", "soon"),
                ])
                .load(),
        );
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].allowed, "must be a whole number");
        assert_eq!(errs[1].allowed, "must be a number");
    }

    #[test]
    fn unknown_keys_are_rejected_from_file_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[inner]\ntimeout_secs = 1\n").unwrap();
        let errs = errors(
            Loader::new()
                .file(&path)
                .env([("RETRY_BUDGET__RATION", "0.1")])
                .load(),
        );
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["inner.timeout_secs", "retry_budget.ration"]);
        assert!(errs.iter().all(|e| e.allowed.starts_with("unknown key")));
    }

    #[test]
    fn tolerated_keys_are_skipped_but_typos_still_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[inner]\nother_service_key = 1\nmax_retries = 3\n").unwrap();
        let loader = Loader::new().file(&path).tolerate([
            "inner.other_service_key".to_owned(),
            "inner.elsewhere".to_owned(),
        ]);
        let s: Demo = loader
            .clone()
            .env([("INNER__ELSEWHERE", "x")])
            .load()
            .unwrap();
        assert_eq!(s.inner.max_retries, 3);
        let errs = errors(loader.env([("INNER__ELSEWHER", "x")]).load());
        assert_eq!(errs[0].key, "inner.elsewher");
        assert!(keys::<Demo>().contains(&"inner.max_retries".to_owned()));
    }

    /// A credential a service started from its environment accepts.
    const LONG_TOKEN: &str = "s3cret-token-of-more-than-32-characters";

    #[test]
    fn short_or_published_credentials_refuse_to_load_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "admin_token = \"short\"\n").unwrap();
        let errs = errors(Loader::new().file(&path).load());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].key, "admin_token");
        assert!(
            errs[0].allowed.contains("at least 32 characters"),
            "{errs:?}"
        );
        let published = credential::PUBLISHED_EXAMPLES[0];
        let errs = errors(Loader::new().env([("ADMIN_TOKEN", published)]).load());
        assert_eq!(errs[0].key, "admin_token");
        assert!(errs[0].value.contains("published example"), "{errs:?}");
        assert!(!errs[0].to_string().contains(published), "{errs:?}");
        // The embedded demo's launcher sets its own tokens: its loads pass.
        let s: Demo = Loader::new()
            .embedded_demo()
            .env([("ADMIN_TOKEN", "short")])
            .load()
            .unwrap();
        assert_eq!(s.admin_token.expose(), "short");
        // Empty admits nobody, and is accepted.
        assert!(
            Loader::new()
                .env([("ADMIN_TOKEN", "")])
                .load::<Demo>()
                .is_ok()
        );
    }

    /// A `<NAME>_FILE` secret in `dir` holding `content`; returns its path.
    fn secret_file(dir: &tempfile::TempDir, content: &str) -> String {
        let path = dir.path().join("token");
        std::fs::write(&path, content).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn a_credential_is_read_from_its_file_variable_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = secret_file(&dir, &format!("{LONG_TOKEN}\n \n"));
        let s: Demo = Loader::new()
            .env([("ADMIN_TOKEN_FILE", path.as_str())])
            .load()
            .unwrap();
        assert_eq!(s.admin_token.expose(), LONG_TOKEN);
        // Compose passes `${SERVICE_TOKEN:-}`: an empty variable does not hide
        // the file.
        let s: Demo = Loader::new()
            .env([("ADMIN_TOKEN", ""), ("ADMIN_TOKEN_FILE", path.as_str())])
            .load()
            .unwrap();
        assert_eq!(s.admin_token.expose(), LONG_TOKEN);
    }

    #[test]
    fn a_non_empty_variable_wins_over_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = secret_file(&dir, LONG_TOKEN);
        let direct = "another-token-of-more-than-32-characters";
        for env in [
            [("ADMIN_TOKEN", direct), ("ADMIN_TOKEN_FILE", path.as_str())],
            [("ADMIN_TOKEN_FILE", path.as_str()), ("ADMIN_TOKEN", direct)],
        ] {
            let s: Demo = Loader::new().env(env).load().unwrap();
            assert_eq!(s.admin_token.expose(), direct);
        }
        // ...even when the file it names is missing: it is not read at all.
        let s: Demo = Loader::new()
            .env([
                ("ADMIN_TOKEN", direct),
                ("ADMIN_TOKEN_FILE", "/nonexistent/x"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.admin_token.expose(), direct);
    }

    #[test]
    fn an_unreadable_secret_file_names_the_variable_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing").to_string_lossy().into_owned();
        let err = Loader::new()
            .env([("ADMIN_TOKEN_FILE", missing.as_str())])
            .load::<Demo>()
            .unwrap_err();
        assert!(
            matches!(&err, SettingsError::SecretFile { variable, path, .. }
                if variable == "ADMIN_TOKEN_FILE" && path.to_string_lossy() == missing),
            "{err:?}"
        );
        let shown = err.to_string();
        assert!(
            shown.contains("ADMIN_TOKEN_FILE") && shown.contains(&missing),
            "{shown}"
        );
        // A directory is not a readable file either.
        let dir_path = dir.path().to_string_lossy().into_owned();
        let err = Loader::new()
            .env([("ADMIN_TOKEN_FILE", dir_path.as_str())])
            .load::<Demo>()
            .unwrap_err();
        assert!(matches!(err, SettingsError::SecretFile { .. }), "{err:?}");
    }

    #[test]
    fn the_credential_rules_apply_to_a_files_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = secret_file(&dir, "short\n");
        let errs = errors(
            Loader::new()
                .env([("ADMIN_TOKEN_FILE", path.as_str())])
                .load(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].key, "admin_token");
        assert!(
            errs[0].allowed.contains("at least 32 characters"),
            "{errs:?}"
        );
        let path = secret_file(&dir, credential::PUBLISHED_EXAMPLES[0]);
        let errs = errors(
            Loader::new()
                .env([("ADMIN_TOKEN_FILE", path.as_str())])
                .load(),
        );
        assert!(errs[0].value.contains("published example"), "{errs:?}");
    }

    #[test]
    fn only_credentials_are_read_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = secret_file(&dir, "9");
        // Under a section, a `_FILE` of a non-credential is an unknown key,
        // and its file is not read.
        let errs = errors(
            Loader::new()
                .env([("INNER__MAX_RETRIES_FILE", path.as_str())])
                .load(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].key, "inner.max_retries_file");
        // At the top level, a variable naming no key is not ours (as `PATH`):
        // ignored, the default stays.
        let s: Demo = Loader::new()
            .env([("DATABASE_URL_FILE", path.as_str())])
            .load()
            .unwrap();
        assert_eq!(s.database_url, Demo::default().database_url);
    }

    #[test]
    fn rendered_settings_mask_secrets() {
        let s: Demo = Loader::new()
            .env([
                ("ADMIN_TOKEN", LONG_TOKEN),
                ("DATABASE_URL", "postgres://app:pa55word@db/x"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.admin_token.expose(), LONG_TOKEN);
        let out = render(&s);
        assert!(
            !out.contains(LONG_TOKEN) && !out.contains("pa55word"),
            "{out}"
        );
        assert!(out.contains("admin_token = \"********\""), "{out}");
        assert!(out.contains("postgres://app:********@db/x"), "{out}");
    }

    #[test]
    fn defaults_document_round_trips_as_a_settings_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("defaults.toml");
        std::fs::write(&path, defaults_document::<Demo>("demo")).unwrap();
        let s: Demo = Loader::new().file(&path).load().unwrap();
        assert_eq!(s, Demo::default());
    }
}
