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
    expected: "the same key: the repeat replayed, one order; a new key: two orders",
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

/// One customer's story: the lost answer, then the repeat with
/// `same_key` or a new one. Returns (repeat replayed, orders).
async fn story(
    live: &Live,
    table: &mut Timeline,
    customer: &str,
    product: &str,
    same_key: bool,
) -> anyhow::Result<(bool, usize)> {
    let token = live.sign_in(customer).await?;
    let key = uuid::Uuid::new_v4().to_string();
    live.add_toxic(
        EDGE,
        &json!({"name": TOXIC, "type": "reset_peer", "stream": "downstream",
                "attributes": {"timeout": 0}}),
    )
    .await?;
    let lost = live.order(&token, product, &key).await?.status().as_u16();
    live.remove_toxic(EDGE, TOXIC).await?;
    let orders_after_lost = count(live, &token).await?;
    table.push([
        customer.to_owned(),
        "1".to_owned(),
        short(&key),
        "answer lost".to_owned(),
        format!("{lost}"),
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
    Ok((replayed, orders))
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
    let (replayed, one) = story(live, &mut table, "same-key", &product, true).await?;
    let (new_replayed, two) = story(live, &mut table, "new-key", &product, false).await?;
    outcome.timelines.push(table);
    outcome.figure("orders_with_same_key", one as f64);
    outcome.figure("orders_with_new_key", two as f64);
    outcome.measured = format!(
        "the same key: {} and {one} order(s); a new key: {two} order(s)",
        if replayed { "replayed" } else { "not replayed" }
    );
    outcome.passed = replayed && one == 1 && !new_replayed && two == 2;
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
