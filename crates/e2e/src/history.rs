//! The recorded history of a run: every `POST /api/orders` a client made
//! (as which customer, with which key) and what came back, classified as
//! FAULTS.md does (`ok`, `fail`, `info`).

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::client::Answer;

/// Why a client sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// A fresh idempotency key (fresh for this customer: it may be
    /// another customer's key, which must not matter).
    Fresh,
    /// An earlier key again, with the same body.
    Retry,
    /// An earlier key with a different body (expects 422).
    Reuse,
}

/// What an answer proves about the order of its key (FAULTS.md, C2/C3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 201 or 202: the order exists.
    Ok,
    /// A definite failure (400/404/413/415/422, 409 out-of-stock): this
    /// request created nothing.
    Fail,
    /// Unknown (timeouts, 5xx, 409 in progress, connection errors): 0 or 1.
    Info,
}

/// One request and its answer.
#[derive(Debug, Clone)]
pub struct Op {
    /// Which client sent it.
    pub client: usize,
    /// The customer it was signed in as (its token's `sub`): the order
    /// service scopes the key to it.
    pub customer: String,
    /// The `Idempotency-Key`.
    pub key: String,
    /// Why it was sent.
    pub intent: Intent,
    /// The request body.
    pub body: Value,
    /// The answer.
    pub answer: Answer,
}

impl Op {
    /// The answer's class.
    pub fn outcome(&self) -> Outcome {
        match self.answer.status {
            Some(201 | 202) => Outcome::Ok,
            Some(400 | 404 | 413 | 415 | 422) => Outcome::Fail,
            Some(409) if self.is_out_of_stock() => Outcome::Fail,
            _ => Outcome::Info,
        }
    }

    /// SPEC §3's out-of-stock answer: 409 with problem type `out-of-stock`.
    /// The only definite failure after which the order service keeps an
    /// order for the key (`rejected`: Inventory found the stock short).
    pub fn is_out_of_stock(&self) -> bool {
        self.answer.status == Some(409) && self.problem_type().ends_with(":out-of-stock")
    }

    /// The problem `type` of the answer ("" when there is none).
    pub fn problem_type(&self) -> String {
        self.answer
            .json()
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    /// The order id a 201/202 answer names.
    pub fn order_id(&self) -> Option<String> {
        self.answer
            .json()
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// The history shared by every client of a run.
#[derive(Debug, Clone, Default)]
pub struct History {
    ops: Arc<Mutex<Vec<Op>>>,
}

impl History {
    /// Records one op.
    pub fn record(&self, op: Op) {
        if let Ok(mut ops) = self.ops.lock() {
            ops.push(op);
        }
    }

    /// Every op so far, in the order they finished.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().map(|o| o.clone()).unwrap_or_default()
    }
}
