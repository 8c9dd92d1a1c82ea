//! What the console reads and where it listens.
//!
//! The console is a window onto every admin listener and the fault API, and
//! its buttons break and heal the system, so by default it listens on
//! loopback only: a non-loopback address is refused unless `allow_remote`
//! says so on purpose (SPEC §11, "defaults open no door").

use std::{
    net::{Ipv4Addr, SocketAddr},
    time::Duration,
};

use shopeasy_runtime::settings::Secret;

/// The console's usual port (SPEC §1).
pub const DEFAULT_PORT: u16 = 8090;

/// How often the console reads everything: about twice a second, as the
/// issue asks, so a breaker that opens shows within half a second.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// One service whose admin listener the console reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceTarget {
    /// Its name in the topology (`gateway`, `product`, `order`, `inventory`).
    pub name: String,
    /// Its admin listener's base URL (`http://127.0.0.1:9082`).
    pub admin_url: String,
}

impl ServiceTarget {
    /// A service `name` whose admin listener is at `admin_url`.
    pub fn new(name: impl Into<String>, admin_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            admin_url: admin_url.into().trim_end_matches('/').to_owned(),
        }
    }
}

/// Everything the console needs, validated by [`ConsoleSettings::validate`].
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Where the page and its event stream are served
    /// (default `127.0.0.1:8090`).
    pub listen: SocketAddr,
    /// Accept a non-loopback `listen` (and any `Host`): off by default.
    pub allow_remote: bool,
    /// With `allow_remote`, still answer only a loopback `Host`: for a
    /// container that must listen on `0.0.0.0` but is published on the
    /// host's loopback (compose), so DNS rebinding stays refused.
    pub loopback_host_only: bool,
    /// The services whose admin listeners are read.
    pub services: Vec<ServiceTarget>,
    /// The fault API's base URL (`http://127.0.0.1:8474`).
    pub faults_url: String,
    /// The gateway's base URL, for the page's "buy one" button; `None`
    /// hides it.
    pub gateway_url: Option<String>,
    /// The token every change (fault, load, purchase) must carry.
    pub admin_token: Secret,
    /// How often everything is read.
    pub poll_interval: Duration,
    /// Also show each service's Postgres and Redis (full mode): off by
    /// default, as the embedded system has neither.
    pub show_stores: bool,
}

impl ConsoleSettings {
    /// Settings for `services` and the fault API at `faults_url`, listening
    /// on `127.0.0.1:8090`, polling every [`DEFAULT_POLL_INTERVAL`].
    pub fn new(
        services: Vec<ServiceTarget>,
        faults_url: impl Into<String>,
        admin_token: Secret,
    ) -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, DEFAULT_PORT)),
            allow_remote: false,
            loopback_host_only: false,
            services,
            faults_url: faults_url.into().trim_end_matches('/').to_owned(),
            gateway_url: None,
            admin_token,
            poll_interval: DEFAULT_POLL_INTERVAL,
            show_stores: false,
        }
    }

    /// Started without an admin token: it shows everything and refuses
    /// every change (403), as no token could match.
    pub fn read_only(&self) -> bool {
        self.admin_token.is_empty()
    }

    /// Whether any `Host` is answered (remote access allowed and not kept
    /// to loopback names).
    pub fn any_host(&self) -> bool {
        self.allow_remote && !self.loopback_host_only
    }

    /// Checks what cannot work or would open a door.
    ///
    /// # Errors
    /// A non-loopback listener without `allow_remote`, no service to read,
    /// or a poll interval outside 100 ms..=10 s. (An empty admin token is
    /// allowed: the console is then read-only, see [`Self::read_only`].)
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !self.listen.ip().is_loopback() && !self.allow_remote {
            return Err(SettingsError::RemoteListen(self.listen));
        }
        if self.services.is_empty() {
            return Err(SettingsError::NoServices);
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(10)).contains(&self.poll_interval) {
            return Err(SettingsError::PollInterval(self.poll_interval));
        }
        Ok(())
    }
}

/// Why settings were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `listen` is not loopback and `allow_remote` is off.
    #[error(
        "console.listen {0} is not a loopback address; the console can break the system, so \
         it listens on loopback unless --allow-remote (CONSOLE_ALLOW_REMOTE=true) is given"
    )]
    RemoteListen(SocketAddr),
    /// Nothing to read.
    #[error("the console needs at least one service admin URL to read")]
    NoServices,
    /// The poll interval is out of range.
    #[error("console.poll_interval {0:?} is outside 100 ms..=10 s")]
    PollInterval(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ConsoleSettings {
        ConsoleSettings::new(
            vec![ServiceTarget::new("order", "http://127.0.0.1:9082/")],
            "http://127.0.0.1:8474/",
            Secret::new("t"),
        )
    }

    #[test]
    fn the_defaults_listen_on_loopback_and_pass() {
        let s = settings();
        assert_eq!(s.listen, "127.0.0.1:8090".parse().unwrap());
        assert_eq!(s.services[0].admin_url, "http://127.0.0.1:9082");
        assert_eq!(s.faults_url, "http://127.0.0.1:8474");
        s.validate().unwrap();
    }

    #[test]
    fn a_remote_listener_is_refused_unless_allowed() {
        let mut s = settings();
        s.listen = "0.0.0.0:8090".parse().unwrap();
        let err = s.validate().unwrap_err();
        assert_eq!(err, SettingsError::RemoteListen(s.listen));
        assert!(err.to_string().contains("--allow-remote"), "{err}");
        s.allow_remote = true;
        s.validate().unwrap();
    }

    #[test]
    fn an_empty_token_makes_a_read_only_console() {
        let mut s = settings();
        assert!(!s.read_only());
        s.admin_token = Secret::default();
        s.validate().unwrap();
        assert!(s.read_only());
    }

    #[test]
    fn any_host_only_when_remote_and_not_kept_to_loopback() {
        let mut s = settings();
        assert!(!s.any_host());
        s.allow_remote = true;
        assert!(s.any_host());
        s.loopback_host_only = true;
        assert!(!s.any_host(), "compose: 0.0.0.0 inside, loopback Host only");
    }
}
