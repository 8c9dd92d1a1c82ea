//! `idempotency`: an answer lost on the way back, the request repeated, and
//! still one order — because the repeat carries the same idempotency key.
//!
//! The gateway-order proxy's `reset_peer` toxic (downstream) lets the
//! order reach Order and loses its answer: the customer sees an error,
//! though the order was placed. The customer repeats it. With the same
//! `Idempotency-Key`, Order replays the first answer (`Idempotent-Replayed:
//! true`) and the customer has one order; with a new key for the repeat
//! (the mistake of generating the key inside the retry loop), two. The
//! orders are counted from the customer's own list, `GET /api/orders`.
//!
//! The scene passes only if the answer really was lost (a 5xx or no answer
//! at all) while the order was placed (one order before the repeat): a
//! first answer that arrived would make the repeat a plain duplicate, and
//! the lesson — the key saves the customer who never saw the answer —
//! would not have been shown.

use serde_json::{Value, json};

use super::{Outcome, QUIET, Run, Scene, SceneInfo, Timeline, live::Live, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "idempotency",
    summary: "a lost answer, a repeated request, one order (the same idempotency key)",
    help: "The gateway-order proxy's reset_peer toxic lets an order reach Order and \
loses the answer: the customer gets an error, though the order was placed (the gateway \
may retry a POST that carries an Idempotency-Key on a connection failure; those retries \
lose their answers too). The toxic is removed and the customer repeats the order. With \
the same Idempotency-Key the repeat gets the first answer again (Idempotent-Replayed: \
true) and the customer has one order; a second customer repeats with a new key and has \
two.",
    expected: "the first answer lost (5xx or none) with the order placed; the same key: the \
repeat replayed, one order; a new key: two orders",
};

/// The edge whose answers are lost.
const EDGE: &str = "gateway-order";
/// The toxic.
const TOXIC: &str = "lose-the-answer";

/// Runs the scene.
///
/// # Errors
/// The system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Idempotency);
    let live = system(run, &QUIET[..3], &mut outcome).await?;
    let result = halves(&live, &mut outcome).await;
    let healed = live
        .remove_toxic(EDGE, TOXIC)
        .await
        .or(Ok::<_, anyhow::Error>(()));
    let stopped = live.stop().await;
    result.and(healed).and(stopped)?;
    Ok(outcome)
}

/// What one customer's story came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Story {
    /// The first answer was lost: a 5xx, or no answer at all.
    lost: bool,
    /// The customer's orders after the lost answer, before the repeat.
    orders_after_lost: usize,
    /// The repeat's answer was the first one replayed.
    replayed: bool,
    /// The customer's orders after the repeat.
    orders: usize,
}

/// One customer's story: the lost answer, then the repeat with
/// `same_key` or a new one.
async fn story(
    live: &Live,
    table: &mut Timeline,
    customer: &str,
    product: &str,
    same_key: bool,
) -> anyhow::Result<Story> {
    let token = live.sign_in(customer).await?;
    let key = uuid::Uuid::new_v4().to_string();
    live.add_toxic(
        EDGE,
        &json!({"name": TOXIC, "type": "reset_peer", "stream": "downstream",
                "attributes": {"timeout": 0}}),
    )
    .await?;
    // No answer at all is as lost as a 5xx: it is not an error of the scene.
    let first = live
        .order(&token, product, &key)
        .await
        .ok()
        .map(|res| res.status().as_u16());
    live.remove_toxic(EDGE, TOXIC).await?;
    let orders_after_lost = count(live, &token).await?;
    table.push([
        customer.to_owned(),
        "1".to_owned(),
        short(&key),
        "answer lost".to_owned(),
        first.map_or_else(|| "no answer".to_owned(), |s| s.to_string()),
        orders_after_lost.to_string(),
    ]);
    let repeat_key = if same_key {
        key.clone()
    } else {
        uuid::Uuid::new_v4().to_string()
    };
    let res = live.order(&token, product, &repeat_key).await?;
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let orders = count(live, &token).await?;
    table.push([
        customer.to_owned(),
        "2".to_owned(),
        short(&repeat_key),
        "healed".to_owned(),
        if replayed {
            format!("{status}, replayed")
        } else {
            status.to_string()
        },
        orders.to_string(),
    ]);
    Ok(Story {
        lost: first.is_none_or(|s| s >= 500),
        orders_after_lost,
        replayed,
        orders,
    })
}

async fn halves(live: &Live, outcome: &mut Outcome) -> anyhow::Result<()> {
    let product = live.product(0).await?;
    let mut table = Timeline::new(
        "a lost answer and a repeat",
        &[
            "customer",
            "request",
            "key",
            "gateway-order",
            "answer",
            "orders",
        ],
    );
    let same = story(live, &mut table, "same-key", &product, true).await?;
    let new = story(live, &mut table, "new-key", &product, false).await?;
    outcome.timelines.push(table);
    let (one, two) = (same.orders, new.orders);
    outcome.figure("orders_with_same_key", one as f64);
    outcome.figure("orders_with_new_key", two as f64);
    // The lesson needs the answer lost with the order placed, in both
    // stories: an answer that arrived makes the repeat a plain duplicate.
    let lost = [same, new]
        .iter()
        .all(|s| s.lost && s.orders_after_lost == 1);
    outcome.figure(
        "first_answers_lost",
        f64::from(u8::from(same.lost) + u8::from(new.lost)),
    );
    outcome.measured = format!(
        "{}; the same key: {} and {one} order(s); a new key: {two} order(s)",
        if lost {
            "the first answers lost, each order placed"
        } else {
            "a first answer was not lost, or its order not placed"
        },
        if same.replayed {
            "replayed"
        } else {
            "not replayed"
        }
    );
    outcome.passed = lost && same.replayed && one == 1 && !new.replayed && two == 2;
    Ok(())
}

/// The customer's orders.
async fn count(live: &Live, token: &str) -> anyhow::Result<usize> {
    let page: Value = live.orders(token).await?;
    Ok(page["items"].as_array().map_or(0, Vec::len))
}

/// The first 8 characters of a key (enough to tell two apart).
fn short(key: &str) -> String {
    key.chars().take(8).collect()
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
    };

    use axum::{
        Json,
        extract::State,
        http::{HeaderMap, HeaderValue, StatusCode},
        routing::{delete, get, post},
    };

    use super::*;
    use crate::demo::{Endpoints, Target};

    /// A shop that keeps each customer's idempotency keys, and a fault API
    /// whose toxic on `gateway-order` loses the answer (a 502 after the
    /// order was placed) only when `loses`.
    #[derive(Debug, Default)]
    struct Shop {
        loses: bool,
        toxic: bool,
        keys: HashMap<String, Vec<String>>,
    }

    type Shared = Arc<Mutex<Shop>>;

    fn customer(headers: &HeaderMap) -> String {
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default()
            .to_owned()
    }

    async fn sign_in(Json(body): Json<Value>) -> Json<Value> {
        Json(json!({ "access_token": body["customer"] }))
    }

    async fn products() -> Json<Value> {
        Json(json!({ "items": [{ "id": "p1" }] }))
    }

    async fn place(
        State(shop): State<Shared>,
        headers: HeaderMap,
    ) -> (StatusCode, HeaderMap, &'static str) {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut shop = shop.lock().unwrap();
        let lost = shop.loses && shop.toxic;
        let keys = shop.keys.entry(customer(&headers)).or_default();
        let mut answer = HeaderMap::new();
        if keys.contains(&key) {
            answer.insert("idempotent-replayed", HeaderValue::from_static("true"));
            return (StatusCode::CREATED, answer, "{}");
        }
        keys.push(key);
        let status = if lost {
            StatusCode::BAD_GATEWAY
        } else {
            StatusCode::CREATED
        };
        (status, answer, "{}")
    }

    async fn orders(State(shop): State<Shared>, headers: HeaderMap) -> Json<Value> {
        let n = shop
            .lock()
            .unwrap()
            .keys
            .get(&customer(&headers))
            .map_or(0, Vec::len);
        Json(json!({ "items": vec![json!({}); n] }))
    }

    async fn add_toxic(State(shop): State<Shared>) -> &'static str {
        shop.lock().unwrap().toxic = true;
        "{}"
    }

    async fn heal(State(shop): State<Shared>) -> StatusCode {
        shop.lock().unwrap().toxic = false;
        StatusCode::NO_CONTENT
    }

    /// The shop's endpoints (gateway, fault API and Order's admin: one
    /// server).
    async fn shop(loses: bool) -> Endpoints {
        let shared: Shared = Arc::new(Mutex::new(Shop {
            loses,
            ..Shop::default()
        }));
        let app = axum::Router::new()
            .route("/api/session", post(sign_in))
            .route("/api/products", get(products))
            .route("/api/orders", post(place).get(orders))
            .route(&format!("/proxies/{EDGE}/toxics"), post(add_toxic))
            .route(&format!("/proxies/{EDGE}/toxics/{TOXIC}"), delete(heal))
            .route("/reset", post(heal))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Endpoints {
            gateway: base.clone(),
            faults: base.clone(),
            order_admin: base,
        }
    }

    /// Against a system whose "lost" answer arrives (201), the repeat is a
    /// plain duplicate and the lesson was not shown: before, the scene
    /// passed on it (one order, the repeat replayed), as it ignored the
    /// first answer and the orders after it.
    #[tokio::test]
    async fn the_scene_passes_only_when_the_first_answer_was_lost_and_the_order_placed() {
        let on = |endpoints| Run {
            target: Target::Running(endpoints),
            seed: 7,
        };
        let arrived = run(&on(shop(false).await)).await.unwrap();
        assert_eq!(arrived.get("orders_with_same_key"), Some(1.0), "{arrived}");
        assert_eq!(arrived.get("orders_with_new_key"), Some(2.0), "{arrived}");
        assert_eq!(arrived.get("first_answers_lost"), Some(0.0), "{arrived}");
        assert!(!arrived.passed, "{arrived}");

        let lost = run(&on(shop(true).await)).await.unwrap();
        assert_eq!(lost.get("first_answers_lost"), Some(2.0), "{lost}");
        assert!(lost.passed, "{lost}");
    }
}
