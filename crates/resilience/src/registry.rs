//! The registry behind `/admin/resilience`: every breaker, budget and cache
//! reports its live state as JSON.
//!
//! A service registers what it builds and hands [`Registry::snapshot`] to its
//! admin listener (`admin.report("resilience", move || registry.snapshot())`).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::breaker::BreakerHandle;
use crate::budget::RetryBudget;
use crate::stale_cache::StaleCache;

type Report = Arc<dyn Fn() -> Value + Send + Sync>;
type Entries = Arc<Mutex<Vec<(&'static str, String, Report)>>>;

/// Where resilience components report their state. Cloning shares it.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Entries,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.entries.lock().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("Registry").field("entries", &n).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `report` under `section` (`circuit_breakers`, `retry_budgets`,
    /// `caches`, or a section of your own) as `name`.
    pub fn register(
        &self,
        section: &'static str,
        name: impl Into<String>,
        report: impl Fn() -> Value + Send + Sync + 'static,
    ) -> &Self {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((section, name.into(), Arc::new(report)));
        self
    }

    /// Adds a circuit breaker, named by its target.
    pub fn breaker(&self, breaker: &BreakerHandle) -> &Self {
        let b = breaker.clone();
        self.register("circuit_breakers", breaker.target(), move || b.snapshot())
    }

    /// Adds a retry budget.
    pub fn budget(&self, name: impl Into<String>, budget: &RetryBudget) -> &Self {
        let b = budget.clone();
        self.register("retry_budgets", name, move || b.snapshot())
    }

    /// Adds a cache.
    pub fn cache<K, V>(&self, name: impl Into<String>, cache: &StaleCache<K, V>) -> &Self
    where
        K: Eq + Hash + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let c = cache.clone();
        self.register("caches", name, move || c.snapshot())
    }

    /// Every registered component's live state:
    /// `{"circuit_breakers": {name: …}, "retry_budgets": {…}, "caches": {…}}`.
    pub fn snapshot(&self) -> Value {
        let entries: Vec<_> = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut sections: BTreeMap<&'static str, serde_json::Map<String, Value>> = BTreeMap::new();
        for section in ["circuit_breakers", "retry_budgets", "caches"] {
            sections.entry(section).or_default();
        }
        for (section, name, report) in entries {
            sections.entry(section).or_default().insert(name, report());
        }
        Value::Object(
            sections
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Value::Object(v)))
                .collect(),
        )
    }
}
