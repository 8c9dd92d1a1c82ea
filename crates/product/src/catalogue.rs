//! The catalogue's use cases: reads through the cache (cache-aside, single
//! flight), writes to the store followed by an invalidation.
//!
//! Free of HTTP: handlers call these methods and map the results. Reads
//! return the serialized JSON (what the cache holds and the handler sends),
//! so a cache hit costs no (de)serialization.
//!
//! Concurrent misses for one key share one database read through the
//! workspace's `shopeasy_resilience::single_flight::SingleFlight`: the read
//! runs detached with its own timeout, so a caller that gives up (its
//! client went away) only stops waiting and the others still get the
//! answer.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures::{FutureExt, future::BoxFuture};
use shopeasy_product_api::Product;
use shopeasy_resilience::single_flight::{FlightError, SingleFlight};
use uuid::Uuid;

use crate::{
    Error,
    cache::{Kind, Outcome, ReadCache},
    cursor::Cursor,
    domain::ProductDraft,
    store::ProductStore,
};

/// The result of one (shared) read: the JSON to send.
type Loaded = Result<Bytes, Error>;

/// The catalogue. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Catalogue {
    store: ProductStore,
    cache: Option<ReadCache>,
    flights: SingleFlight<String, Bytes, Error>,
    /// Writes made by this process: part of every single-flight key, so a
    /// read that starts after a write never joins one that started before.
    writes: Arc<AtomicU64>,
}

impl Catalogue {
    /// A catalogue over `store`, reading through `cache` when given; one
    /// shared database read may take at most `read_timeout`.
    pub fn new(store: ProductStore, cache: Option<ReadCache>, read_timeout: Duration) -> Self {
        Self {
            store,
            cache,
            flights: SingleFlight::new(read_timeout),
            writes: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &ProductStore {
        &self.store
    }

    /// The cache, when there is one.
    pub fn cache(&self) -> Option<&ReadCache> {
        self.cache.as_ref()
    }

    /// One product, as JSON.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Unavailable`], [`Error::Internal`].
    pub async fn get(&self, id: Uuid) -> Result<Bytes, Error> {
        let store = self.store.clone();
        let load = async move {
            let product = store.get(id).await?.ok_or(Error::NotFound)?;
            Ok(Bytes::from(serde_json::to_vec(&product)?))
        };
        self.read(Kind::Item, format!("p:{id}"), load.boxed()).await
    }

    /// A page of at most `limit` products after `cursor`, as JSON
    /// (`ProductPage`).
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Internal`].
    pub async fn list(&self, cursor: Option<Cursor>, limit: u32) -> Result<Bytes, Error> {
        let store = self.store.clone();
        let key = format!(
            "l:{}:{limit}",
            cursor.map_or_else(String::new, Cursor::encode)
        );
        let load = async move {
            let page = store.list(cursor, limit).await?;
            Ok(Bytes::from(serde_json::to_vec(&page)?))
        };
        self.read(Kind::Page, key, load.boxed()).await
    }

    /// Adds a product.
    ///
    /// # Errors
    /// [`Error::DuplicateSku`], [`Error::Unavailable`], [`Error::Internal`].
    pub async fn create(&self, draft: &ProductDraft) -> Result<Product, Error> {
        let product = self.store.create(draft).await?;
        self.written().await;
        Ok(product)
    }

    /// Replaces a product.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::DuplicateSku`], [`Error::Unavailable`],
    /// [`Error::Internal`].
    pub async fn update(&self, id: Uuid, draft: &ProductDraft) -> Result<Product, Error> {
        let product = self.store.update(id, draft).await?;
        self.written().await;
        Ok(product)
    }

    /// Deletes a product.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Unavailable`], [`Error::Internal`].
    pub async fn delete(&self, id: Uuid) -> Result<(), Error> {
        self.store.delete(id).await?;
        self.written().await;
        Ok(())
    }

    async fn written(&self) {
        self.writes.fetch_add(1, Ordering::AcqRel);
        if let Some(cache) = &self.cache {
            cache.invalidate().await;
        }
    }

    /// Cache-aside read: the cache, else one shared database read that
    /// fills the cache under the generation taken *before* it.
    async fn read(&self, kind: Kind, key: String, load: BoxFuture<'static, Loaded>) -> Loaded {
        let mut generation = None;
        if let Some(cache) = &self.cache {
            match cache.lookup(&key).await {
                Ok((_, Some(value))) => {
                    cache.record(kind, Outcome::Hit);
                    return Ok(value);
                }
                Ok((g, None)) => generation = Some(g),
                Err(u) => cache.record(kind, u.into()),
            }
        }
        let flight = format!("{}:{key}", self.writes.load(Ordering::Acquire));
        let waiter = self.flights.join(flight, || load);
        let joined = waiter.coalesced();
        let result = waiter.wait(None).await.map_err(|e| match e {
            FlightError::Failed(e) => e,
            FlightError::FetchTimedOut | FlightError::WaitExpired => {
                Error::Unavailable(Arc::new(e))
            }
            FlightError::Lost => Error::Internal(Arc::new(e)),
        });
        if let (Some(cache), Some(g)) = (&self.cache, generation) {
            if joined {
                cache.record(kind, Outcome::Coalesced);
            } else {
                cache.record(kind, Outcome::Miss);
                if let Ok(value) = &result {
                    cache.put(g, &key, value.clone());
                }
            }
        }
        result
    }
}
