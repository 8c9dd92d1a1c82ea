//! The checker of invariants C1–C9 (FAULTS.md): it reads the order and
//! inventory databases directly and compares them with the recorded
//! [`History`]. Each violation is one line naming its invariant.
//!
//! Requests are signed in as several customers (issue 15), and an
//! idempotency key is its customer's: the same key of two customers is two
//! keys. An order is traced back to its (customer, key) through the order
//! database's `idempotency_keys` rows, which the order service writes in
//! the transaction that creates the order — and the checker does not take
//! their word for it: every order must be named by exactly one key row of
//! its own customer (an order no row names is the second order of some
//! key, or a phantom), every `ok` answer must name its key's order, and no
//! key row may exist for a (customer, key) no client sent. Where the order
//! service's documented choice differs from FAULTS.md's letter — an
//! out-of-stock found by Inventory leaves a `rejected` order — C3 accepts
//! a `rejected` order for a key answered 409 `out-of-stock`, and for no
//! other definite failure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;
use sqlx::{PgPool, Row};

use crate::history::{History, Intent, Op, Outcome};

/// What the databases hold after a run.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `id → (customer_id, status)`.
    pub orders: BTreeMap<String, (String, String)>,
    /// `(customer_id, idempotency key) → order id`: the order service's
    /// own record of which order each key made.
    pub keys: BTreeMap<(String, String), String>,
    /// `order id → product id → quantity`.
    pub order_lines: BTreeMap<String, BTreeMap<String, i64>>,
    /// Rows left in the outbox.
    pub outbox_rows: i64,
    /// `product id → available`.
    pub available: BTreeMap<String, i64>,
    /// `reservation id → state`.
    pub reservations: BTreeMap<String, String>,
    /// `reservation id → product id → quantity`.
    pub reservation_lines: BTreeMap<String, BTreeMap<String, i64>>,
}

impl Snapshot {
    /// Reads both databases.
    ///
    /// # Errors
    /// A query that fails.
    pub async fn read(order_db: &PgPool, inventory_db: &PgPool) -> anyhow::Result<Self> {
        let mut s = Self::default();
        for row in sqlx::query("SELECT id, customer_id, status FROM orders")
            .fetch_all(order_db)
            .await?
        {
            s.orders
                .insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
        }
        for row in sqlx::query(
            "SELECT customer_id, idempotency_key, order_id FROM idempotency_keys \
             WHERE order_id IS NOT NULL",
        )
        .fetch_all(order_db)
        .await?
        {
            s.keys
                .insert((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?);
        }
        for row in sqlx::query("SELECT order_id, product_id, quantity FROM order_lines")
            .fetch_all(order_db)
            .await?
        {
            let (order, product, quantity): (String, String, i64) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            *s.order_lines
                .entry(order)
                .or_default()
                .entry(product)
                .or_default() += quantity;
        }
        s.outbox_rows = sqlx::query("SELECT count(*) FROM outbox")
            .fetch_one(order_db)
            .await?
            .try_get(0)?;
        for row in sqlx::query("SELECT product_id, available FROM stock")
            .fetch_all(inventory_db)
            .await?
        {
            s.available.insert(row.try_get(0)?, row.try_get(1)?);
        }
        for row in sqlx::query("SELECT reservation_id, state FROM reservations")
            .fetch_all(inventory_db)
            .await?
        {
            s.reservations.insert(row.try_get(0)?, row.try_get(1)?);
        }
        for row in sqlx::query("SELECT reservation_id, product_id, quantity FROM reservation_lines")
            .fetch_all(inventory_db)
            .await?
        {
            let (id, product, quantity): (String, String, i64) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            *s.reservation_lines
                .entry(id)
                .or_default()
                .entry(product)
                .or_default() += quantity;
        }
        Ok(s)
    }

    /// Leaves out the orders (and their keys) of `customer`: the runs'
    /// warm-up orders, which are not in the history.
    pub fn without_customer(&mut self, customer: &str) {
        self.orders.retain(|_, (c, _)| c != customer);
        self.keys.retain(|(c, _), _| c != customer);
    }

    /// Orders still `pending`.
    pub fn pending(&self) -> usize {
        self.orders.values().filter(|(_, s)| s == "pending").count()
    }

    /// Units held by `reserved` reservations, per product.
    pub fn reserved(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for (id, lines) in &self.reservation_lines {
            if self.reservations.get(id).map(String::as_str) == Some("reserved") {
                for (product, quantity) in lines {
                    *out.entry(product.clone()).or_default() += quantity;
                }
            }
        }
        out
    }
}

/// One bank-checker read (C4 at every read): per product, available ≥ 0 and
/// available + reserved = initial, read in one statement (one snapshot).
///
/// # Errors
/// A query that fails.
pub async fn stock_conservation(
    inventory_db: &PgPool,
    initial: &BTreeMap<String, i64>,
) -> anyhow::Result<Vec<String>> {
    let rows = sqlx::query(
        "SELECT s.product_id, s.available, \
         COALESCE((SELECT SUM(l.quantity) FROM reservation_lines l \
                   JOIN reservations r ON r.reservation_id = l.reservation_id \
                   WHERE r.state = 'reserved' AND l.product_id = s.product_id), 0)::BIGINT \
         FROM stock s",
    )
    .fetch_all(inventory_db)
    .await?;
    let mut violations = Vec::new();
    for row in rows {
        let (product, available, reserved): (String, i64, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let Some(&init) = initial.get(&product) else {
            continue;
        };
        if available < 0 || available + reserved != init {
            violations.push(format!(
                "C4 product {product}: available {available} + reserved {reserved} != initial {init}"
            ));
        }
    }
    Ok(violations)
}

/// Checks C1–C7 and C9 against a snapshot taken after the outbox drained
/// (C8 is the drain itself: see [`crate::chaos`]). Returns the violations.
pub fn check(
    history: &History,
    snapshot: &Snapshot,
    initial: &BTreeMap<String, i64>,
) -> Vec<String> {
    let ops = history.ops();
    let mut v = Vec::new();
    let mut by_key: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        by_key
            .entry((op.customer.as_str(), op.key.as_str()))
            .or_default()
            .push(op);
    }
    let mut keys_of_order: HashMap<&str, Vec<&(String, String)>> = HashMap::new();
    for (scoped, id) in &snapshot.keys {
        keys_of_order.entry(id.as_str()).or_default().push(scoped);
    }

    // C1: one order per key — every order is named by exactly one key row,
    // of its own customer.
    for (id, (customer, status)) in &snapshot.orders {
        match keys_of_order.get(id.as_str()).map(Vec::as_slice) {
            None | Some([]) => v.push(format!(
                "C1 order {id} of {customer} ({status}) is named by no idempotency key: \
                 a second order of some key, or a phantom"
            )),
            Some([(owner, key)]) => {
                if owner != customer {
                    v.push(format!(
                        "C1 order {id} of {customer} is named by key {key} of {owner}"
                    ));
                }
            }
            Some(several) => v.push(format!(
                "C1 order {id} of {customer} is named by several keys {several:?}"
            )),
        }
    }
    for ((customer, key), ops) in &by_key {
        let scoped = ((*customer).to_owned(), (*key).to_owned());
        let stored = snapshot.keys.get(&scoped);
        let status = stored
            .and_then(|id| snapshot.orders.get(id))
            .map(|(_, s)| s.as_str());
        if let (Some(id), None) = (stored, status) {
            v.push(format!(
                "C2 key {key} of {customer}: names order {id}, which is not stored"
            ));
        }
        let oks: Vec<&&Op> = ops.iter().filter(|o| o.outcome() == Outcome::Ok).collect();
        // C2: every ok answer's order exists, and is its key's order.
        for op in &oks {
            let id = op.order_id();
            if id.is_none() || id.as_ref() != stored || status.is_none() {
                v.push(format!(
                    "C2 key {key} of {customer}: answered {:?} with order {id:?}, \
                     the key's stored order is {stored:?} ({status:?})",
                    op.answer.status
                ));
            }
        }
        let ids: BTreeSet<Option<String>> = oks.iter().map(|o| o.order_id()).collect();
        if ids.len() > 1 {
            v.push(format!(
                "C1 key {key} of {customer}: ok answers name different orders {ids:?}"
            ));
        }
        // C3: only definite failures (ignoring 422 reuses, which are about
        // another body) → no order, but for the order service's documented
        // choice: Inventory's out-of-stock keeps a `rejected` order, and its
        // key is answered SPEC's 409 `out-of-stock`. Any other definite
        // failure (400/404/413/415/422) was refused before an order existed.
        let relevant: Vec<&&Op> = ops
            .iter()
            .filter(|o| o.intent != Intent::Reuse || o.outcome() != Outcome::Fail)
            .collect();
        let definite =
            !relevant.is_empty() && relevant.iter().all(|o| o.outcome() == Outcome::Fail);
        if definite
            && let (Some(id), Some(status)) = (stored, status)
            && !(status == "rejected" && relevant.iter().any(|o| o.is_out_of_stock()))
        {
            let answers: Vec<Option<u16>> = relevant.iter().map(|o| o.answer.status).collect();
            v.push(format!(
                "C3 key {key} of {customer}: only definite failures {answers:?}, \
                 yet order {id} is {status}"
            ));
        }
        // C9: every OK answer of a key is its first one, stored: after the
        // first seen, each is marked replayed and byte-equal to it, status
        // included (SPEC §3 replays the first response whatever its status:
        // a 202 `pending` stays the key's answer once the order is
        // confirmed, never a 201 made up later).
        let mut first: Option<(u16, &Vec<u8>)> = None;
        for op in ops.iter().filter(|o| o.intent != Intent::Reuse) {
            let Some(status) = op.answer.status else {
                continue;
            };
            if !matches!(status, 201 | 202) {
                continue;
            }
            let Some((first_status, body)) = first else {
                first = Some((status, &op.answer.body));
                continue;
            };
            if !op.answer.replayed() {
                v.push(format!(
                    "C9 key {key} of {customer}: a second answer ({status}) without \
                     Idempotent-Replayed: true"
                ));
            }
            if first_status != status || *body != op.answer.body {
                v.push(format!(
                    "C9 key {key} of {customer}: a replayed {status} differs from the first \
                     answer ({first_status})"
                ));
            }
        }
        // A reuse with another body is never answered with an order of
        // another body (SPEC §3: 422 `idempotency-key-reused`, or 409 while
        // in flight). Judged by the order its OK names, not by what the
        // client saw of the key: its first request's answer may have been
        // lost (502, timeout) after the order was made. An OK to a reuse is
        // right only for an order of the reuse's own body (made by it, the
        // key being new to the service).
        for op in ops
            .iter()
            .filter(|o| o.intent == Intent::Reuse && o.outcome() == Outcome::Ok)
        {
            let id = op.order_id();
            let lines = id.as_ref().and_then(|id| snapshot.order_lines.get(id));
            if lines != Some(&body_lines(&op.body)) {
                v.push(format!(
                    "C1 key {key} of {customer}: reused with another body and got {:?} \
                     naming order {id:?} of lines {lines:?}",
                    op.answer.status
                ));
            }
        }
    }
    // Keys (and so orders) no client ever sent as that customer: phantoms,
    // or a key that leaked from one customer to another.
    for ((customer, key), id) in &snapshot.keys {
        if !by_key.contains_key(&(customer.as_str(), key.as_str())) {
            v.push(format!(
                "C3 order {id} under key {key} of {customer}, which that customer never sent"
            ));
        }
    }

    // C4: conservation at the end; C5: no oversell.
    let reserved = snapshot.reserved();
    let mut confirmed_qty: BTreeMap<String, i64> = BTreeMap::new();
    for (id, (_, status)) in &snapshot.orders {
        if status == "confirmed" {
            for (product, quantity) in snapshot.order_lines.get(id).into_iter().flatten() {
                *confirmed_qty.entry(product.clone()).or_default() += quantity;
            }
        }
    }
    for (product, init) in initial {
        let available = snapshot.available.get(product).copied().unwrap_or(0);
        let held = reserved.get(product).copied().unwrap_or(0);
        if available < 0 || available + held != *init {
            v.push(format!(
                "C4 product {product}: available {available} + reserved {held} != initial {init}"
            ));
        }
        let sold = confirmed_qty.get(product).copied().unwrap_or(0);
        if sold > *init {
            v.push(format!(
                "C5 product {product}: {sold} confirmed > initial {init}"
            ));
        }
        if sold != held {
            v.push(format!(
                "C4 product {product}: confirmed orders hold {sold}, inventory holds {held}"
            ));
        }
    }

    // C6: reservations ↔ confirmed orders; C7: reserved once.
    let live: BTreeSet<&String> = snapshot
        .reservations
        .iter()
        .filter(|(_, s)| s.as_str() == "reserved")
        .map(|(id, _)| id)
        .collect();
    let confirmed: BTreeSet<&String> = snapshot
        .orders
        .iter()
        .filter(|(_, (_, s))| s == "confirmed")
        .map(|(id, _)| id)
        .collect();
    for id in live.difference(&confirmed) {
        let status = snapshot.orders.get(*id).map(|(_, s)| s.as_str());
        v.push(format!(
            "C6 reservation {id} is held but its order is {status:?}"
        ));
    }
    for id in confirmed.difference(&live) {
        v.push(format!("C6 confirmed order {id} holds no reservation"));
    }
    for id in &confirmed {
        let ordered = snapshot.order_lines.get(*id);
        let held = snapshot.reservation_lines.get(*id);
        if ordered != held {
            v.push(format!(
                "C7 order {id}: ordered {ordered:?}, reserved {held:?}"
            ));
        }
    }
    v
}

/// `product id → quantity` of a request body's `items`, as
/// [`Snapshot::order_lines`] holds an order's.
fn body_lines(body: &Value) -> BTreeMap<String, i64> {
    let mut lines = BTreeMap::new();
    for item in body["items"].as_array().into_iter().flatten() {
        if let (Some(product), Some(quantity)) =
            (item["product_id"].as_str(), item["quantity"].as_i64())
        {
            *lines.entry(product.to_owned()).or_default() += quantity;
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::client::Answer;

    const PRODUCT: &str = "p-1";

    fn op(customer: &str, key: &str, status: u16, id: &str) -> Op {
        let body = json!({"id": id}).to_string().into_bytes();
        Op {
            client: 0,
            customer: customer.to_owned(),
            key: key.to_owned(),
            intent: Intent::Fresh,
            body: json!({"items": [{"product_id": PRODUCT, "quantity": 1}]}),
            answer: Answer {
                status: Some(status),
                headers: Vec::new(),
                body,
                elapsed: Duration::ZERO,
                error: None,
            },
        }
    }

    /// A consistent world: `orders` are (id, customer, key), each
    /// confirmed with one unit reserved, out of an initial stock of 10.
    fn world(orders: &[(&str, &str, &str)]) -> (Snapshot, BTreeMap<String, i64>) {
        let mut s = Snapshot::default();
        for (id, customer, key) in orders {
            s.orders.insert(
                (*id).to_owned(),
                ((*customer).to_owned(), "confirmed".to_owned()),
            );
            s.keys.insert(
                ((*customer).to_owned(), (*key).to_owned()),
                (*id).to_owned(),
            );
            let line = BTreeMap::from([(PRODUCT.to_owned(), 1)]);
            s.order_lines.insert((*id).to_owned(), line.clone());
            s.reservations
                .insert((*id).to_owned(), "reserved".to_owned());
            s.reservation_lines.insert((*id).to_owned(), line);
        }
        let held = i64::try_from(orders.len()).unwrap_or(0);
        s.available.insert(PRODUCT.to_owned(), 10 - held);
        (s, BTreeMap::from([(PRODUCT.to_owned(), 10)]))
    }

    fn history(ops: Vec<Op>) -> History {
        let h = History::default();
        for op in ops {
            h.record(op);
        }
        h
    }

    fn violations(h: &History, s: &Snapshot, initial: &BTreeMap<String, i64>) -> String {
        check(h, s, initial).join("\n")
    }

    #[test]
    fn one_key_of_two_customers_is_two_keys() {
        let h = history(vec![op("alice", "k", 201, "o1"), op("bob", "k", 201, "o2")]);
        let (s, initial) = world(&[("o1", "alice", "k"), ("o2", "bob", "k")]);
        assert_eq!(violations(&h, &s, &initial), "");
    }

    #[test]
    fn an_order_no_key_names_is_a_second_order() {
        let h = history(vec![op("alice", "k", 201, "o1")]);
        let (mut s, initial) = world(&[("o1", "alice", "k"), ("o2", "alice", "k2")]);
        // The takeover's order: its key row was overwritten by the first.
        s.keys.remove(&("alice".to_owned(), "k2".to_owned()));
        let found = violations(&h, &s, &initial);
        assert!(
            found.contains("C1 order o2 of alice") && found.contains("no idempotency key"),
            "{found}"
        );
    }

    #[test]
    fn an_answer_naming_another_order_and_a_foreign_key_are_caught() {
        let h = history(vec![op("alice", "k", 201, "o9")]);
        let (s, initial) = world(&[("o1", "alice", "k")]);
        let found = violations(&h, &s, &initial);
        assert!(found.contains("C2 key k of alice"), "{found}");

        // Bob's order filed under alice's key: a leak across customers.
        let h = history(vec![op("alice", "k", 201, "o1")]);
        let (mut s, initial) = world(&[("o1", "alice", "k")]);
        s.orders.get_mut("o1").unwrap().0 = "bob".to_owned();
        let found = violations(&h, &s, &initial);
        assert!(
            found.contains("C1 order o1 of bob is named by key k of alice"),
            "{found}"
        );
    }

    fn replay(mut op: Op) -> Op {
        op.answer
            .headers
            .push(("idempotent-replayed".to_owned(), "true".to_owned()));
        op
    }

    /// A replay is the first answer, status and all: a key first answered
    /// 202 `pending` may not be replayed as a 201 (even of the same order),
    /// nor answered again without the replay header. Compared per status,
    /// the first 201 after a 202 was never checked.
    #[test]
    fn a_replay_is_the_first_answer_whatever_its_status() {
        let (s, initial) = world(&[("o1", "alice", "k")]);
        let first = op("alice", "k", 202, "o1");
        let same = history(vec![first.clone(), replay(first.clone())]);
        assert_eq!(violations(&same, &s, &initial), "");

        let other = history(vec![first.clone(), replay(op("alice", "k", 201, "o1"))]);
        let found = violations(&other, &s, &initial);
        assert!(
            found.contains("C9 key k of alice: a replayed 201 differs from the first answer (202)"),
            "{found}"
        );

        let unmarked = history(vec![first.clone(), first]);
        let found = violations(&unmarked, &s, &initial);
        assert!(
            found.contains("C9 key k of alice: a second answer (202) without"),
            "{found}"
        );
    }

    /// A definite failure: `status` with problem type `kind`.
    fn refused(customer: &str, key: &str, status: u16, kind: &str) -> Op {
        let mut op = op(customer, key, status, "");
        op.answer.body = json!({"type": format!("urn:shopeasy:problem:{kind}")})
            .to_string()
            .into_bytes();
        op
    }

    /// C3's exception is SPEC's out-of-stock answer alone: a key answered
    /// 409 `out-of-stock` may keep a `rejected` order (Inventory found the
    /// stock short); a key answered any other definite failure made no
    /// order, `rejected` or not.
    #[test]
    fn only_an_out_of_stock_answer_may_leave_a_rejected_order() {
        let (mut s, initial) = world(&[]);
        s.orders
            .insert("o1".to_owned(), ("alice".to_owned(), "rejected".to_owned()));
        s.keys
            .insert(("alice".to_owned(), "k".to_owned()), "o1".to_owned());
        s.order_lines
            .insert("o1".to_owned(), BTreeMap::from([(PRODUCT.to_owned(), 1)]));
        let short = history(vec![refused("alice", "k", 409, "out-of-stock")]);
        assert_eq!(violations(&short, &s, &initial), "");

        for (status, kind) in [
            (400, "malformed-json"),
            (404, "unknown-product"),
            (422, "validation"),
        ] {
            let h = history(vec![refused("alice", "k", status, kind)]);
            let found = violations(&h, &s, &initial);
            assert!(
                found.contains("C3 key k of alice: only definite failures")
                    && found.contains("yet order o1 is rejected"),
                "{status} {kind}: {found}"
            );
        }
    }

    /// A reuse of a key with another body answered with the key's order is
    /// caught although the client never saw an OK under the key (its first
    /// request's answer was lost); a reuse that made the key's order itself
    /// (the first request never reached the service) is right.
    #[test]
    fn a_reuse_answered_with_the_keys_order_is_caught_without_an_ok_for_it() {
        let (s, initial) = world(&[("o1", "alice", "k")]);
        let body =
            |quantity: i64| json!({"items": [{"product_id": PRODUCT, "quantity": quantity}]});
        let lost = |quantity| Op {
            body: body(quantity),
            ..op("alice", "k", 502, "")
        };
        let reuse = |quantity| Op {
            intent: Intent::Reuse,
            body: body(quantity),
            ..op("alice", "k", 201, "o1")
        };

        // o1 holds one unit: the order of the first body, replayed.
        let replayed = history(vec![lost(1), replay(reuse(11))]);
        let found = violations(&replayed, &s, &initial);
        assert!(
            found.contains("C1 key k of alice: reused with another body"),
            "{found}"
        );

        // o1 is the reuse's own order: the first body (5 units) made none.
        let made = history(vec![lost(5), reuse(1)]);
        assert_eq!(violations(&made, &s, &initial), "");
    }

    #[test]
    fn a_key_no_client_sent_as_that_customer_is_a_phantom() {
        let h = history(vec![op("alice", "k", 201, "o1")]);
        let (s, initial) = world(&[("o1", "alice", "k"), ("o2", "bob", "k")]);
        let found = violations(&h, &s, &initial);
        assert!(
            found.contains("C3 order o2 under key k of bob, which that customer never sent"),
            "{found}"
        );
    }
}
