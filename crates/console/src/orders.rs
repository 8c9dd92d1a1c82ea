//! The page's "buy one" button and the orders it follows.
//!
//! A person watching the breaker wants to see what a customer sees: the
//! console signs a fresh demo customer in through the gateway
//! (`POST /api/session`), orders one unit of the first product, and then
//! reads that order each round until its status is final, so the page shows
//! `pending` turn `confirmed` once the edge heals. Each purchase is a new
//! customer, so the per-customer limit on open orders never refuses a demo.

use std::sync::{Arc, Mutex};

use futures::future::join_all;
use serde_json::{Value, json};

use crate::{poll::READ_TIMEOUT, snapshot::OrderView};

/// How many purchases the page lists.
pub const KEPT: usize = 8;

/// Statuses after which an order no longer changes.
const FINAL: [&str; 4] = ["confirmed", "rejected", "cancelled", "failed"];

#[derive(Debug, Clone)]
struct Followed {
    view: OrderView,
    token: String,
}

/// The orders placed from the page. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Orders {
    followed: Arc<Mutex<Vec<Followed>>>,
}

/// Why a purchase failed. A refusal's detail is the gateway's public one
/// and shown on the page; anything else may name the gateway's address, so
/// it is logged and the page is told only that the gateway failed.
#[derive(Debug, thiserror::Error)]
pub enum BuyError {
    /// The console was started without the gateway's address.
    #[error("the console was started without a gateway URL, so it cannot buy")]
    NoGateway,
    /// The gateway did not answer, or answered something unexpected.
    #[error("{0}")]
    Gateway(String),
    /// The gateway refused a call: its status and its problem's `detail`,
    /// which callers may be shown.
    #[error("{0}")]
    Refused(String),
}

impl Orders {
    /// The orders followed, newest first.
    pub fn views(&self) -> Vec<OrderView> {
        self.lock().iter().map(|f| f.view.clone()).collect()
    }

    /// Signs a new demo customer in at `gateway`, buys one unit of the
    /// first product and follows the order.
    ///
    /// # Errors
    /// When any of the three calls fails or is refused (the gateway's
    /// `detail` is passed on).
    pub async fn buy(&self, http: &reqwest::Client, gateway: &str) -> Result<OrderView, BuyError> {
        // A demo name is at most 32 of `a-z0-9_-`: 12 random hex digits.
        let id = uuid::Uuid::new_v4().simple().to_string();
        let customer = format!("console-{}", &id[..12]);
        let session = call(
            http.post(format!("{gateway}/api/session"))
                .json(&json!({ "customer": customer })),
        )
        .await?;
        let token = session.1["access_token"]
            .as_str()
            .ok_or_else(|| BuyError::Gateway("the sign-in gave no access_token".into()))?
            .to_owned();
        let products = call(http.get(format!("{gateway}/api/products?limit=1"))).await?;
        let product = products.1["items"][0]["id"]
            .as_str()
            .ok_or_else(|| BuyError::Gateway("the catalogue is empty".into()))?
            .to_owned();
        let (status, order) = call(
            http.post(format!("{gateway}/api/orders"))
                .bearer_auth(&token)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"items": [{"product_id": product, "quantity": 1}]})),
        )
        .await?;
        let now = crate::unix_ms();
        let view = OrderView {
            id: order["id"].as_str().unwrap_or_default().to_owned(),
            status: order["status"].as_str().unwrap_or("unknown").to_owned(),
            http_status: status,
            placed_unix_ms: now,
            changed_unix_ms: now,
        };
        let mut followed = self.lock();
        followed.insert(
            0,
            Followed {
                view: view.clone(),
                token,
            },
        );
        followed.truncate(KEPT);
        Ok(view)
    }

    /// Reads each followed order whose status is not final yet, all at
    /// once, each within [`READ_TIMEOUT`].
    ///
    /// It runs inside every poll round: read one after another with the
    /// client's own timeout, a hung gateway would hold the round (and so
    /// every snapshot) for that timeout per order still pending. An order
    /// not read in time keeps its last status until a later round.
    pub async fn refresh(&self, http: &reqwest::Client, gateway: &str) {
        let open: Vec<(String, String)> = self
            .lock()
            .iter()
            .filter(|f| !FINAL.contains(&f.view.status.as_str()) && !f.view.id.is_empty())
            .map(|f| (f.view.id.clone(), f.token.clone()))
            .collect();
        let reads = open.into_iter().map(move |(id, token)| async move {
            let read = call(
                http.get(format!("{gateway}/api/orders/{id}"))
                    .bearer_auth(&token)
                    .timeout(READ_TIMEOUT),
            )
            .await;
            (id, read)
        });
        for (id, read) in join_all(reads).await {
            let Ok((_, order)) = read else { continue };
            let Some(status) = order["status"].as_str() else {
                continue;
            };
            let now = crate::unix_ms();
            for f in self.lock().iter_mut().filter(|f| f.view.id == id) {
                if f.view.status != status {
                    status.clone_into(&mut f.view.status);
                    f.view.changed_unix_ms = now;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Followed>> {
        self.followed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Sends `request`; a 2xx answer's status and JSON body, else the
/// problem's `detail`.
async fn call(request: reqwest::RequestBuilder) -> Result<(u16, Value), BuyError> {
    let res = request
        .send()
        .await
        .map_err(|e| BuyError::Gateway(format!("the gateway did not answer: {e}")))?;
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok((status.as_u16(), body))
    } else {
        Err(BuyError::Refused(format!(
            "the gateway answered {status}: {}",
            body["detail"].as_str().unwrap_or("no detail")
        )))
    }
}
