//! The named set of proxies one process runs: what the HTTP API manages and
//! what a launcher creates its edges in.

use std::{collections::BTreeMap, sync::Arc};

use serde::Deserialize;
use tokio::sync::Mutex;

use crate::{
    Error, FaultProxy, ProxyConfig,
    proxy::seed_for,
    windows::{WindowHistory, WindowLog},
};

/// A change to a proxy (Toxiproxy's proxy update JSON; absent = unchanged);
/// a JSON object only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(remote = "Self")]
pub struct ProxyUpdate {
    /// New listen address (restarts the proxy, closing its connections).
    #[serde(default)]
    pub listen: Option<String>,
    /// New upstream (restarts the proxy, closing its connections).
    #[serde(default)]
    pub upstream: Option<String>,
    /// Enable or disable it.
    #[serde(default)]
    pub enabled: Option<bool>,
}

shopeasy_runtime::only_json_objects!(ProxyUpdate);

/// Named proxies, shared by clones.
///
/// Each proxy without an explicit seed gets one derived from this set's
/// seed and its name, so a run is repeatable from one number.
///
/// The set keeps each name's fault window history
/// ([`Proxies::windows`]) beyond the proxy: a proxy restarted, replaced,
/// or removed and created again continues the history of its name, so a
/// test that rebuilds an edge still sees every window of that edge.
#[derive(Debug, Clone, Default)]
pub struct Proxies {
    by_name: Arc<Mutex<BTreeMap<String, FaultProxy>>>,
    /// Every name's history, including names with no proxy now.
    logs: Arc<std::sync::Mutex<BTreeMap<String, Arc<WindowLog>>>>,
    seed: u64,
}

impl Proxies {
    /// An empty set with seed 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set whose proxies derive their seeds from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        Self {
            by_name: Arc::default(),
            logs: Arc::default(),
            seed,
        }
    }

    /// Creates and starts a proxy.
    ///
    /// # Errors
    /// [`Error::ProxyExists`], or what [`FaultProxy::start_with`] returns.
    pub async fn create(&self, config: ProxyConfig) -> Result<FaultProxy, Error> {
        let mut by_name = self.by_name.lock().await;
        if by_name.contains_key(&config.name) {
            return Err(Error::ProxyExists);
        }
        let log = self.log(&config.name);
        let proxy = FaultProxy::start_in(self.seeded(config), log).await?;
        by_name.insert(proxy.name().to_owned(), proxy.clone());
        Ok(proxy)
    }

    /// The proxy named `name`.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`].
    pub async fn get(&self, name: &str) -> Result<FaultProxy, Error> {
        self.by_name
            .lock()
            .await
            .get(name)
            .cloned()
            .ok_or(Error::ProxyNotFound)
    }

    /// Every proxy, by name.
    pub async fn list(&self) -> Vec<FaultProxy> {
        self.by_name.lock().await.values().cloned().collect()
    }

    /// Stops and removes the proxy named `name`.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`].
    pub async fn remove(&self, name: &str) -> Result<(), Error> {
        let proxy = self
            .by_name
            .lock()
            .await
            .remove(name)
            .ok_or(Error::ProxyNotFound)?;
        proxy.stop().await;
        Ok(())
    }

    /// Applies `update` to the proxy named `name`. A new listen address or
    /// upstream restarts it (as Toxiproxy does), keeping its toxics and
    /// their open fault windows (the faults go on across the restart).
    ///
    /// When the restarted proxy cannot listen, it starts again as it was
    /// (its connections closed, as by any restart) and the error is
    /// returned. Toxiproxy would leave it stopped; here the edge a demo
    /// breaks must not vanish over one mistyped port.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`], or what [`FaultProxy::start_with`] returns.
    pub async fn update(&self, name: &str, update: ProxyUpdate) -> Result<FaultProxy, Error> {
        let mut by_name = self.by_name.lock().await;
        let proxy = by_name.get(name).cloned().ok_or(Error::ProxyNotFound)?;
        let current = proxy.view();
        let listen = update.listen.unwrap_or_else(|| current.listen.clone());
        let upstream = update.upstream.unwrap_or_else(|| current.upstream.clone());
        if listen == current.listen && upstream == current.upstream {
            proxy
                .set_enabled(update.enabled.unwrap_or(current.enabled))
                .await;
            return Ok(proxy);
        }
        let log = proxy.window_log();
        proxy.stop_keeping_windows().await;
        // Read after the stop: a toxic change, or an enabling or disabling,
        // through the old proxy either landed before it (and is carried
        // over) or is refused.
        let toxics = proxy.toxics();
        let old = proxy.config();
        let wanted = ProxyConfig {
            listen,
            upstream,
            enabled: update.enabled.unwrap_or(old.enabled),
            ..old.clone()
        };
        let (restarted, outcome) = match FaultProxy::start_in(wanted, log.clone()).await {
            Ok(p) => (p.clone(), Ok(p)),
            Err(e) => match FaultProxy::start_in(old, log.clone()).await {
                Ok(p) => (p, Err(e)),
                Err(_) => {
                    by_name.remove(name);
                    drop(log.stopped());
                    return Err(e);
                }
            },
        };
        restarted.restore_toxics(toxics);
        by_name.insert(name.to_owned(), restarted);
        outcome
    }

    /// Creates the proxies in `configs`, replacing any of the same name
    /// whose listen address, upstream or connect timeout differ
    /// (Toxiproxy's `/populate`); an identical one is kept, with its
    /// toxics, and only enabled or disabled as asked.
    ///
    /// # Errors
    /// Before anything changes, [`Error::MissingField`] when a config lacks
    /// a name or upstream, [`Error::BadBody`] when its `connect_timeout_ms`
    /// is out of range; otherwise the first start failure.
    pub async fn populate(&self, configs: Vec<ProxyConfig>) -> Result<Vec<FaultProxy>, Error> {
        for config in &configs {
            config.check()?;
        }
        let mut by_name = self.by_name.lock().await;
        let mut result = Vec::with_capacity(configs.len());
        for config in configs {
            if let Some(existing) = by_name.get(&config.name).cloned() {
                let same_listen = existing.view().listen == config.listen
                    || config.listen.ends_with(":0")
                    || config.listen.is_empty();
                if same_listen
                    && existing.upstream() == config.upstream
                    && existing.connect_timeout() == config.connect_timeout_or_default()
                {
                    existing.set_enabled(config.enabled).await;
                    result.push(existing);
                    continue;
                }
                by_name.remove(&config.name);
                existing.stop().await;
            }
            let log = self.log(&config.name);
            let proxy = FaultProxy::start_in(self.seeded(config), log).await?;
            by_name.insert(proxy.name().to_owned(), proxy.clone());
            result.push(proxy);
        }
        Ok(result)
    }

    /// Enables every proxy and removes every toxic (Toxiproxy's `/reset`);
    /// the fault windows this ends close as `reset`.
    pub async fn reset(&self) {
        // Under the set's lock, which a restart holds throughout: each proxy
        // is reset as it is now, never through the handle of one a restart
        // has just replaced (which refuses, leaving its successor as it was).
        let by_name = self.by_name.lock().await;
        for proxy in by_name.values() {
            if let Err(e) = proxy.reset().await {
                // Stopped through a handle of its own, yet still listed.
                tracing::debug!(proxy = proxy.name(), error = %e, "stopped proxy not reset");
            }
        }
    }

    /// The fault window history of the proxy named `name` (see
    /// [`crate::windows`]), also after it was removed; with
    /// `since_unix_ms`, only the windows open at or after it.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`] when no proxy of this set ever had the name.
    pub fn windows(&self, name: &str, since_unix_ms: Option<u64>) -> Result<WindowHistory, Error> {
        let log = self.logs().get(name).cloned().ok_or(Error::ProxyNotFound)?;
        Ok(log.history(since_unix_ms))
    }

    /// The fault windows of every proxy the set ever had, ordered by
    /// opening time (then proxy name); `dropped` is the total over all.
    pub fn all_windows(&self, since_unix_ms: Option<u64>) -> WindowHistory {
        let logs: Vec<Arc<WindowLog>> = self.logs().values().cloned().collect();
        let mut all = WindowHistory::default();
        for log in logs {
            let history = log.history(since_unix_ms);
            all.windows.extend(history.windows);
            all.dropped += history.dropped;
        }
        all.windows.sort_by(|a, b| {
            (a.started_monotonic_us, &a.proxy, a.id).cmp(&(b.started_monotonic_us, &b.proxy, b.id))
        });
        all
    }

    /// The history of `name`, created on first use.
    fn log(&self, name: &str) -> Arc<WindowLog> {
        self.logs()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(WindowLog::new(name)))
            .clone()
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<WindowLog>>> {
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops and removes every proxy.
    pub async fn shutdown(&self) {
        let all = std::mem::take(&mut *self.by_name.lock().await);
        for proxy in all.into_values() {
            proxy.stop().await;
        }
    }

    fn seeded(&self, mut config: ProxyConfig) -> ProxyConfig {
        if config.seed.is_none() {
            config.seed = Some(seed_for(&config.name) ^ self.seed);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::{DISABLED, WindowEnd};

    /// Toxiproxy's reset through the handle of a proxy a restart replaced
    /// (as `Proxies::reset` could hold one, listing the proxies before the
    /// restart) is refused: it used to end the successor's `disabled`
    /// window, as `reset`, while the successor stayed down.
    #[tokio::test]
    async fn a_stale_handle_does_not_reset_the_proxy_that_replaced_it() {
        let proxies = Proxies::with_seed(8);
        let old = proxies
            .create(ProxyConfig::new("edge", "127.0.0.1:9").enabled(false))
            .await
            .unwrap();
        let restarted = proxies
            .update(
                "edge",
                ProxyUpdate {
                    upstream: Some("127.0.0.1:10".to_owned()),
                    ..ProxyUpdate::default()
                },
            )
            .await
            .unwrap();
        assert!(!restarted.enabled(), "restarted as it was, down");

        assert!(matches!(old.reset().await, Err(Error::ProxyNotFound)));
        assert!(!restarted.enabled());
        let open: Vec<String> = proxies
            .windows("edge", None)
            .unwrap()
            .windows
            .into_iter()
            .filter(|w| w.ended_by.is_none())
            .map(|w| w.kind)
            .collect();
        assert_eq!(open, [DISABLED], "the successor's window goes on");

        proxies.reset().await;
        assert!(restarted.enabled(), "the set resets the proxy it has now");
        let ends: Vec<Option<WindowEnd>> = proxies
            .windows("edge", None)
            .unwrap()
            .windows
            .into_iter()
            .map(|w| w.ended_by)
            .collect();
        assert_eq!(ends, [Some(WindowEnd::Reset)]);
        proxies.shutdown().await;
    }
}
