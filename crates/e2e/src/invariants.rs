//! The checker of invariants C1–C9 (FAULTS.md): it reads the order and
//! inventory databases directly and compares them with the recorded
//! [`History`]. Each violation is one line naming its invariant.
//!
//! Requests carry `customer_id` = their idempotency key, so an order can be
//! traced back to its key without trusting the order service's own
//! bookkeeping. Where the order service's documented choice differs from
//! FAULTS.md's letter — an out-of-stock found by Inventory leaves a
//! `rejected` order — C3 accepts a `rejected` order for a 409 key.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::{PgPool, Row};

use crate::history::{History, Intent, Op, Outcome};

/// What the databases hold after a run.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `id → (customer_id, status)`.
    pub orders: BTreeMap<String, (String, String)>,
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
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut orders_of: HashMap<&str, Vec<(&String, &String)>> = HashMap::new();
    for (id, (customer, status)) in &snapshot.orders {
        orders_of
            .entry(customer.as_str())
            .or_default()
            .push((id, status));
    }

    // C1: one order per key.
    for (customer, orders) in &orders_of {
        if orders.len() > 1 {
            v.push(format!(
                "C1 key {customer}: {} orders {orders:?}",
                orders.len()
            ));
        }
    }
    for (key, ops) in &by_key {
        let orders = orders_of.get(key).cloned().unwrap_or_default();
        let oks: Vec<&&Op> = ops.iter().filter(|o| o.outcome() == Outcome::Ok).collect();
        // C2: every ok answer's order exists, same id (and one per key).
        for op in &oks {
            let id = op.order_id();
            if !orders.iter().any(|(o, _)| Some(*o) == id.as_ref()) {
                v.push(format!(
                    "C2 key {key}: answered {:?} with order {id:?}, which is not stored",
                    op.answer.status
                ));
            }
        }
        let ids: BTreeSet<Option<String>> = oks.iter().map(|o| o.order_id()).collect();
        if ids.len() > 1 {
            v.push(format!(
                "C1 key {key}: ok answers name different orders {ids:?}"
            ));
        }
        // C3: only definite failures (ignoring 422 reuses, which are about
        // another body) → no live order.
        let relevant: Vec<&&Op> = ops
            .iter()
            .filter(|o| o.intent != Intent::Reuse || o.outcome() != Outcome::Fail)
            .collect();
        let definite =
            !relevant.is_empty() && relevant.iter().all(|o| o.outcome() == Outcome::Fail);
        if definite {
            for (id, status) in &orders {
                if status.as_str() != "rejected" {
                    v.push(format!(
                        "C3 key {key}: only definite failures, yet order {id} is {status}"
                    ));
                }
            }
        }
        // C9: replays are byte-equal to the first answer of that status.
        let mut first: HashMap<u16, &Vec<u8>> = HashMap::new();
        for op in ops.iter().filter(|o| o.intent != Intent::Reuse) {
            let Some(status) = op.answer.status else {
                continue;
            };
            if !matches!(status, 201 | 202) {
                continue;
            }
            match first.get(&status) {
                None => {
                    first.insert(status, &op.answer.body);
                }
                Some(body) => {
                    if !op.answer.replayed() {
                        v.push(format!(
                            "C9 key {key}: a second {status} without Idempotent-Replayed: true"
                        ));
                    }
                    if **body != op.answer.body {
                        v.push(format!(
                            "C9 key {key}: replayed body differs from the first {status}"
                        ));
                    }
                }
            }
        }
        // A reuse with another body never creates or replays an order once
        // the key's own body has one (it is a 422, or 409 while in flight).
        let key_has_order = oks.iter().any(|o| o.intent != Intent::Reuse);
        for op in ops.iter().filter(|o| o.intent == Intent::Reuse) {
            if key_has_order && op.outcome() == Outcome::Ok {
                v.push(format!(
                    "C1 key {key}: reused with another body and got {:?}",
                    op.answer.status
                ));
            }
        }
    }
    // Orders whose key no client ever used (phantoms).
    for (customer, orders) in &orders_of {
        if !by_key.contains_key(customer) {
            v.push(format!("C3 order(s) {orders:?} of unknown key {customer}"));
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
