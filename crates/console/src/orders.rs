//! The page's "buy one" button and the orders it follows.
//!
//! A person watching the breaker wants to see what a customer sees: the
//! console signs a fresh demo customer in through the gateway
//! (`POST /api/session`), orders one unit of the first product, and then
//! reads that order each round until its status is final, so the page shows
//! `pending` turn `confirmed` once the edge heals. Each purchase is a new
//! customer, so the per-customer limit on open orders never refuses a demo.
//!
//! An order stays pending as long as an edge stays broken, which may be
//! longer than its customer's token lives (an hour from the demo issuer).
//! Read with that first token for ever, every read after it expired was a
//! 401 and the page showed `pending` for good. So the customer signs in
//! again (the same name, so the same `sub`, so the same orders) when the
//! token nears its `expires_in`, and once more if a read is answered 401
//! anyway (an issuer restarted with a new key, a token revoked).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{poll::READ_TIMEOUT, snapshot::OrderView};

/// How many purchases the page lists.
pub const KEPT: usize = 8;

/// Statuses after which an order no longer changes.
const FINAL: [&str; 4] = ["confirmed", "rejected", "cancelled", "failed"];

/// How long before its token expires a customer signs in again (half the
/// token's lifetime instead, for a token that lives less than twice this).
const RENEW_BEFORE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Followed {
    view: OrderView,
    session: Session,
}

/// A demo customer signed in: who, the token, and when to renew it.
#[derive(Debug, Clone)]
struct Session {
    customer: String,
    token: String,
    /// When to sign in again; `None` when the sign-in did not say how long
    /// the token lives (then only a 401 renews it).
    renew_at: Option<Instant>,
}

impl Session {
    fn due(&self) -> bool {
        self.renew_at.is_some_and(|at| Instant::now() >= at)
    }
}

/// How long after sign-in a token that lives `ttl` is renewed:
/// [`RENEW_BEFORE`] before it expires, or half way through a short one,
/// so a slow round or a skewed clock still reads with a valid token.
fn renew_after(ttl: Duration) -> Duration {
    ttl - RENEW_BEFORE.min(ttl / 2)
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
        let session = sign_in(http, gateway, &customer).await?;
        let products = call(http.get(format!("{gateway}/api/products?limit=1"))).await?;
        let product = products.1["items"][0]["id"]
            .as_str()
            .ok_or_else(|| BuyError::Gateway("the catalogue is empty".into()))?
            .to_owned();
        let (status, order) = call(
            http.post(format!("{gateway}/api/orders"))
                .bearer_auth(&session.token)
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
                session,
            },
        );
        followed.truncate(KEPT);
        Ok(view)
    }

    /// Reads each followed order whose status is not final yet, all at
    /// once, each within [`READ_TIMEOUT`] (its renewed sign-in included).
    ///
    /// It runs inside every poll round: read one after another with the
    /// client's own timeout, a hung gateway would hold the round (and so
    /// every snapshot) for that timeout per order still pending. An order
    /// not read in time keeps its last status until a later round.
    pub async fn refresh(&self, http: &reqwest::Client, gateway: &str) {
        let open: Vec<(String, Session)> = self
            .lock()
            .iter()
            .filter(|f| !FINAL.contains(&f.view.status.as_str()) && !f.view.id.is_empty())
            .map(|f| (f.view.id.clone(), f.session.clone()))
            .collect();
        let reads = open.into_iter().map(move |(id, session)| async move {
            let read =
                tokio::time::timeout(READ_TIMEOUT, read_order(http, gateway, &id, session)).await;
            (id, read)
        });
        for (id, read) in join_all(reads).await {
            let Ok((renewed, status)) = read else {
                continue;
            };
            let now = crate::unix_ms();
            for f in self.lock().iter_mut().filter(|f| f.view.id == id) {
                if let Some(session) = &renewed {
                    f.session.clone_from(session);
                }
                if let Some(status) = status.as_deref()
                    && f.view.status != status
                {
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

/// Signs `customer` in at `gateway` (`POST /api/session`).
async fn sign_in(
    http: &reqwest::Client,
    gateway: &str,
    customer: &str,
) -> Result<Session, BuyError> {
    let (_, answer) = call(
        http.post(format!("{gateway}/api/session"))
            .json(&json!({ "customer": customer })),
    )
    .await?;
    let token = answer["access_token"]
        .as_str()
        .ok_or_else(|| BuyError::Gateway("the sign-in gave no access_token".into()))?
        .to_owned();
    let renew_at = answer["expires_in"]
        .as_u64()
        .and_then(|s| Instant::now().checked_add(renew_after(Duration::from_secs(s))));
    Ok(Session {
        customer: customer.to_owned(),
        token,
        renew_at,
    })
}

/// Reads order `id` as `session`'s customer, signing in again first when
/// the token is due, or after a 401 when it was not renewed yet this time:
/// the renewed session, if any, and the order's status, if read.
async fn read_order(
    http: &reqwest::Client,
    gateway: &str,
    id: &str,
    mut session: Session,
) -> (Option<Session>, Option<String>) {
    let url = format!("{gateway}/api/orders/{id}");
    let mut renewed = session.due() && renew(http, gateway, &mut session).await;
    let mut answer = send(http.get(&url).bearer_auth(&session.token)).await;
    if !renewed
        && matches!(answer, Ok((StatusCode::UNAUTHORIZED, _)))
        && renew(http, gateway, &mut session).await
    {
        renewed = true;
        answer = send(http.get(&url).bearer_auth(&session.token)).await;
    }
    let status = match answer {
        Ok((status, order)) if status.is_success() => order["status"].as_str().map(str::to_owned),
        _ => None,
    };
    (renewed.then_some(session), status)
}

/// Signs `session`'s customer in again; whether that worked (if not, the
/// read goes on with the old token, which may still be good a while).
async fn renew(http: &reqwest::Client, gateway: &str, session: &mut Session) -> bool {
    match sign_in(http, gateway, &session.customer).await {
        Ok(fresh) => {
            *session = fresh;
            true
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot renew a followed order's sign-in");
            false
        }
    }
}

/// Sends `request`: the answer's status and JSON body (`null` if it has
/// none), whatever the status.
async fn send(request: reqwest::RequestBuilder) -> Result<(StatusCode, Value), BuyError> {
    let res = request
        .send()
        .await
        .map_err(|e| BuyError::Gateway(format!("the gateway did not answer: {e}")))?;
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Sends `request`; a 2xx answer's status and JSON body, else the
/// problem's `detail`.
async fn call(request: reqwest::RequestBuilder) -> Result<(u16, Value), BuyError> {
    let (status, body) = send(request).await?;
    if status.is_success() {
        Ok((status.as_u16(), body))
    } else {
        Err(BuyError::Refused(format!(
            "the gateway answered {status}: {}",
            body["detail"].as_str().unwrap_or("no detail")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo issuer's hour is renewed a minute early; a token that
    /// lives less than two minutes, half way (a minute early would be at
    /// once, or never for a token shorter than a minute).
    #[test]
    fn a_token_is_renewed_a_minute_early_or_half_way() {
        let s = Duration::from_secs;
        assert_eq!(renew_after(s(3_600)), s(3_540));
        assert_eq!(renew_after(s(120)), s(60));
        assert_eq!(renew_after(s(1)), Duration::from_millis(500));
        assert_eq!(renew_after(Duration::ZERO), Duration::ZERO);
    }
}
