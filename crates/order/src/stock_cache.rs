//! The stale-serving stock cache (SPEC §5), itself a [`StockSource`] in
//! front of Inventory's.
//!
//! Layers, nearest first:
//! 1. **in-process** — the resilience crate's [`StaleCache`]: a fresh entry
//!    answers directly; an expired one is refreshed by one detached,
//!    single-flight fetch shared by every concurrent order for that
//!    product; when Inventory is unavailable the expired copy answers
//!    (`stale`) for up to `max_stale_seconds`.
//! 2. **Redis** (when `redis_url` is set) — shared by the replicas: a fetch
//!    first looks there for a fresh value another replica stored, and every
//!    value fetched from Inventory is written back. When Inventory is
//!    unavailable and this process has no copy (say, just after a
//!    restart), a stale Redis copy still answers. Every Redis call goes
//!    through the runtime's Redis guard, as product's read cache does: its
//!    own short timeout (`redis_timeout_seconds`), and a failing Redis rests
//!    for `redis_retry_seconds`: Redis trouble degrades to layer 1 and never
//!    fails an order.
//! 3. **Inventory** — through the resilient client.
//!
//! Only a product with no usable value anywhere gets
//! [`StockError::Unavailable`] (the order answers 503).

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use shopeasy_resilience::{
    deadline::Deadline,
    stale_cache::{CacheConfig, CacheError, StaleCache},
};
use shopeasy_runtime::redis_guard::{RedisGuard, RedisGuardSettings, Unavailable};
use uuid::Uuid;

use crate::{
    domain::now_ms,
    settings::StockCacheSettings,
    stock::{StockAnswer, StockError, StockSource},
};

/// The metric prefix: `shopeasy_stock_cache_requests_total{result}`.
pub const METRIC: &str = "shopeasy_stock_cache";

/// Stock per product, cached (see the module docs).
#[derive(Debug, Clone)]
pub struct StockCache {
    cache: StaleCache<Uuid, i64>,
    l2: Option<RedisStock>,
    usable_for: Duration,
}

impl StockCache {
    /// Its Redis guard, when Redis is its second layer (for the `redis`
    /// member of `/admin/resilience`).
    pub fn redis_guard(&self) -> Option<&RedisGuard> {
        self.l2.as_ref().map(|l2| &l2.redis)
    }

    /// A cache in front of `source`, with Redis as its second layer when
    /// `redis_url` is not empty.
    ///
    /// # Errors
    /// When `redis_url` is not a Redis URL.
    pub fn new(
        source: Arc<dyn StockSource>,
        settings: &StockCacheSettings,
        redis_url: &str,
    ) -> anyhow::Result<Self> {
        let ttl = settings.ttl_seconds.get();
        let l2 = if redis_url.is_empty() {
            None
        } else {
            Some(RedisStock::new(
                redis_url,
                &settings.key_prefix,
                &settings.redis,
                ttl + settings.max_stale_seconds.get(),
            )?)
        };
        let fetch_timeout = settings.fetch_timeout_seconds.get();
        let layer2 = l2.clone();
        let cache = StaleCache::new(
            CacheConfig {
                ttl,
                max_staleness: settings.max_stale_seconds.get(),
                name: METRIC,
                fetch_timeout,
            },
            move |product: Uuid| {
                let source = source.clone();
                let l2 = layer2.clone();
                async move {
                    if let Some(l2) = &l2
                        && let Some((value, age)) = l2.get(product).await
                        && age < ttl
                    {
                        return Ok(value);
                    }
                    // The fetch has its own deadline, not any caller's.
                    match source
                        .available(product, Some(Deadline::after(fetch_timeout)))
                        .await
                    {
                        Ok(Some(value)) => {
                            if let Some(l2) = l2 {
                                tokio::spawn(async move { l2.put(product, value).await });
                            }
                            Ok(value)
                        }
                        Ok(None) => Err(CacheError::NotFound),
                        Err(e) => Err(CacheError::unavailable(e)),
                    }
                }
            },
        );
        Ok(Self {
            cache,
            l2,
            usable_for: ttl + settings.max_stale_seconds.get(),
        })
    }

    /// The in-process layer (for `/admin/resilience`).
    pub fn layer(&self) -> &StaleCache<Uuid, i64> {
        &self.cache
    }

    /// Layer 1; when Inventory is unavailable and layer 1 has nothing
    /// usable, a stale Redis copy (see the module docs). A stale answer says
    /// that Inventory was just found unavailable.
    async fn lookup(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> Result<StockAnswer, StockError> {
        let e = match self.cache.get(product, deadline).await {
            Ok(cached) => {
                return Ok(StockAnswer {
                    available: Some(cached.value),
                    inventory_unavailable: cached.stale,
                    age: cached.age,
                });
            }
            Err(CacheError::NotFound) => {
                return Ok(StockAnswer {
                    available: None,
                    inventory_unavailable: false,
                    age: Duration::ZERO,
                });
            }
            Err(e) => e,
        };
        if e.is_unavailable()
            && let Some(l2) = &self.l2
            && let Some((value, age)) = l2.get(product).await
            && age <= self.usable_for
        {
            metrics::counter!("shopeasy_stock_cache_l2_requests_total", "result" => "stale")
                .increment(1);
            return Ok(StockAnswer {
                available: Some(value),
                inventory_unavailable: true,
                age,
            });
        }
        Err(StockError::Unavailable(e.to_string()))
    }
}

impl StockSource for StockCache {
    fn available(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Option<i64>, StockError>> {
        Box::pin(async move { Ok(self.lookup(product, deadline).await?.available) })
    }

    fn check(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<StockAnswer, StockError>> {
        Box::pin(self.lookup(product, deadline))
    }
}

/// The Redis layer: `<prefix>stock:<product id>` = `<available>:<unix ms>`,
/// expiring when it is too old to serve even stale.
#[derive(Debug, Clone)]
struct RedisStock {
    redis: RedisGuard,
    prefix: String,
    expiry: Duration,
}

impl RedisStock {
    fn new(
        url: &str,
        prefix: &str,
        guard: &RedisGuardSettings,
        expiry: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            redis: RedisGuard::new("stock cache", url, guard)?,
            prefix: prefix.to_owned(),
            expiry,
        })
    }

    fn key(&self, product: Uuid) -> String {
        format!("{}stock:{product}", self.prefix)
    }

    /// One guarded Redis call, counted by how it ended.
    async fn call<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let result = match self.redis.query(cmd).await {
            Ok(v) => return Some(v),
            Err(Unavailable::Resting) => "resting",
            Err(Unavailable::Failed) => "error",
        };
        metrics::counter!("shopeasy_stock_cache_l2_requests_total", "result" => result)
            .increment(1);
        None
    }

    /// The stored value and its age.
    async fn get(&self, product: Uuid) -> Option<(i64, Duration)> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.key(product));
        let raw: Option<String> = self.call(&cmd).await?;
        let (value, at) = raw.as_deref()?.split_once(':')?;
        let value = value.parse().ok()?;
        let at: i64 = at.parse().ok()?;
        let age = Duration::from_millis(u64::try_from(now_ms() - at).unwrap_or(0));
        Some((value, age))
    }

    async fn put(&self, product: Uuid, value: i64) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(product))
            .arg(format!("{value}:{}", now_ms()))
            .arg("PX")
            .arg(
                u64::try_from(self.expiry.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        let _: Option<()> = self.call(&cmd).await;
    }
}
