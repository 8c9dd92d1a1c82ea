//! Every scene of `shopeasy demo` as a test (issue 17, "Done when"): each
//! runs against the real system (or, for `retry` and `jitter`, ShopEasy's
//! resilience stack against a scripted provider behind a real fault proxy)
//! and its table's shape and measured outcome are asserted — the rows, the
//! states, the counts the lesson predicts — never its exact times.
//!
//! The scenes run one at a time: the embedded systems of one process share
//! one metrics recorder (the scenes measure differences of Order's
//! counters), and a tick of 200 ms must not be stretched by a neighbour
//! scene's load.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // test helpers, whole-number figures

use std::process::Command;

use shopeasy::demo::{self, Outcome, Run, Scene};
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// Runs `scene` embedded with the default seed; prints its table (shown on
/// failure).
async fn run(scene: Scene) -> Outcome {
    let _turn = ONE_AT_A_TIME.lock().await;
    let outcome = demo::run(scene, &Run::default())
        .await
        .unwrap_or_else(|e| panic!("{scene}: {e:#}"));
    println!("{outcome}");
    outcome
}

fn figure(outcome: &Outcome, name: &str) -> f64 {
    outcome
        .get(name)
        .unwrap_or_else(|| panic!("{}: no figure {name}", outcome.scene))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn breaker_reaches_inventory_at_most_6_times_in_12_ticks_and_closes_on_the_first_good_probe()
{
    let outcome = run(Scene::Breaker).await;
    let table = outcome.timeline("the breaker over 12 ticks").unwrap();
    assert_eq!(table.rows.len(), 12);
    let states = table.column("state after");
    let sent = table.column("sent");
    let calls = sent.iter().filter(|s| **s == "yes").count();
    assert!(calls <= 6, "{calls} calls reached Inventory");
    assert_eq!(figure(&outcome, "calls_to_inventory"), calls as f64);
    // Closed at first, open once 3 calls failed, refusing at once while
    // open.
    assert_eq!(states[0], "closed");
    let opened = states.iter().position(|s| *s == "open").unwrap();
    assert!(opened <= 3, "opened after tick {opened}: {states:?}");
    assert_eq!(sent[opened + 1], "no", "refused at once after opening");
    // Inventory is up from tick 7: the first call sent after that is the
    // probe, it succeeds, the breaker closes and stays closed.
    let probe = (7..12).find(|&t| sent[t] == "yes").unwrap();
    assert!(table.column("result")[probe].starts_with("ok"));
    assert!(states[probe..].iter().all(|s| *s == "closed"), "{states:?}");
    assert!(
        states[7..probe].iter().all(|s| *s == "open"),
        "refused while the breaker did not know yet: {states:?}"
    );
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_repeats_a_reset_and_a_503_with_a_growing_wait_but_not_a_timeout_or_a_400() {
    let outcome = run(Scene::Retry).await;
    let table = outcome
        .timeline("attempts, as the provider saw them")
        .unwrap();
    assert_eq!(table.column("call"), ["1", "1", "1", "2", "3"]);
    assert_eq!(table.column("tick")[..3], ["0", "1", "3"]);
    assert_eq!(
        table.column("answer"),
        [
            "connection reset",
            "503",
            "ok (200)",
            "timeout",
            "400 (permanent)"
        ]
    );
    assert_eq!(
        table.column("toxic window"),
        ["inside", "outside", "outside", "inside", "outside"],
        "every attempt the proxy broke lies inside its toxic's window, no other"
    );
    let then = table.column("then");
    assert_eq!(then[2], "result: 200");
    assert_eq!(then[3], "result: failed");
    assert_eq!(then[4], "result: 400");
    assert_eq!(figure(&outcome, "faulted_attempts_outside_window"), 0.0);
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budget_keeps_attempts_per_call_within_1_plus_ratio_plus_min_over_requests() {
    let outcome = run(Scene::Budget).await;
    let bound = 1.0 + 0.2 + 2.0 / 20.0;
    assert_eq!(figure(&outcome, "bound"), bound);
    let with = figure(&outcome, "attempts_per_call_with_budget");
    assert!(with <= bound + 1e-9, "{with} > {bound}");
    assert!(
        with > 1.0,
        "the budget's minimum allows some retries: {with}"
    );
    assert_eq!(
        figure(&outcome, "attempts_per_call_without_budget"),
        3.0,
        "without the budget every call is tried 1 + max_retries times"
    );
    assert!(figure(&outcome, "retried_calls_inside_window") > 0.0);
    assert_eq!(figure(&outcome, "retried_calls_outside_window"), 0.0);
    let table = outcome.timelines.first().unwrap();
    assert_eq!(table.column("budget").len(), 2);
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jitter_at_least_halves_the_peak_of_retries_per_100_ms() {
    let outcome = run(Scene::Jitter).await;
    let abc = outcome
        .timeline("clients A, B and C: the ticks of their retries")
        .unwrap();
    let ticks = abc.column("retry ticks");
    assert_eq!(
        ticks[..3],
        ["1.0 3.0 7.0 15.0"; 3],
        "no jitter: the same ticks"
    );
    assert!(
        ticks[3] != ticks[4] && ticks[4] != ticks[5],
        "full jitter: apart {ticks:?}"
    );
    let none = figure(&outcome, "peak_none");
    let full = figure(&outcome, "peak_full");
    // The whole herd retries together (a few may slip into the next bin on
    // a loaded machine).
    assert!(none >= 90.0, "without jitter: peak {none}");
    assert!(2.0 * full <= none, "full {full} vs none {none}");
    let herd = outcome.timelines.last().unwrap();
    assert_eq!(
        herd.column("jitter"),
        ["none", "full", "equal", "decorrelated"]
    );
    assert!(herd.column("retries").iter().all(|r| *r == "300"));
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fallback_serves_stale_stock_and_refuses_a_product_never_read() {
    let outcome = run(Scene::Fallback).await;
    let table = outcome.timelines.first().unwrap();
    assert_eq!(
        table.column("stock from"),
        [
            "Inventory",
            "stale copy",
            "no copy (rejected)",
            "-",
            "Inventory"
        ]
    );
    let answers = table.column("answer");
    assert_eq!(answers[1], "202 pending");
    assert!(answers[2].starts_with("503, Retry-After: "), "{answers:?}");
    assert!(answers[3].starts_with("confirmed"), "{answers:?}");
    assert_eq!(answers[4], "201 confirmed");
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotency_turns_a_repeat_with_the_same_key_into_one_order() {
    let outcome = run(Scene::Idempotency).await;
    let table = outcome.timelines.first().unwrap();
    assert_eq!(table.column("orders"), ["1", "1", "1", "2"]);
    let answers = table.column("answer");
    assert!(answers[1].ends_with("replayed"), "{answers:?}");
    assert!(!answers[3].ends_with("replayed"), "{answers:?}");
    assert_eq!(figure(&outcome, "orders_with_same_key"), 1.0);
    assert_eq!(figure(&outcome, "orders_with_new_key"), 2.0);
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_is_honoured_up_to_the_deadline() {
    let outcome = run(Scene::RetryAfter).await;
    let table = outcome.timelines.first().unwrap();
    assert_eq!(table.column("call"), ["1", "1", "2"]);
    assert_eq!(
        table.column("answer"),
        ["503, Retry-After: 1", "200", "503, Retry-After: 3"]
    );
    assert!(figure(&outcome, "call1_wait_ms") >= 1000.0);
    assert_eq!(figure(&outcome, "call2_attempts"), 1.0);
    assert!(
        figure(&outcome, "call2_ms") < 500.0,
        "not slept into the deadline"
    );
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulkhead_lets_a_slow_inventory_hold_only_its_own_slots() {
    let outcome = run(Scene::Bulkhead).await;
    assert!(figure(&outcome, "sent_with_bulkhead") <= 4.0);
    assert!(figure(&outcome, "shed_with_bulkhead") >= 8.0);
    assert!(figure(&outcome, "answered_at_once_with_bulkhead") >= 8.0);
    assert_eq!(figure(&outcome, "sent_without_bulkhead"), 12.0);
    assert_eq!(figure(&outcome, "answered_at_once_without_bulkhead"), 0.0);
    let table = outcome.timelines.first().unwrap();
    assert_eq!(table.column("accepted"), ["12 of 12", "12 of 12"]);
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn amplification_is_27_for_the_lesson_and_budgeted_for_shopeasy() {
    let outcome = run(Scene::Amplification).await;
    assert_eq!(figure(&outcome, "lesson_worst_case"), 27.0);
    assert_eq!(figure(&outcome, "shopeasy_worst_case"), 9.0);
    let measured = figure(&outcome, "attempts_at_inventory_per_order");
    assert!(
        measured > 1.0 && measured <= figure(&outcome, "bound") + 1e-9,
        "{measured}"
    );
    let plans = outcome.timelines.first().unwrap();
    assert!(plans.column("policy check")[0].starts_with("refused"));
    assert_eq!(plans.column("policy check")[1], "accepted");
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_neighbour_holds_nothing_with_timeout_and_bulkhead_and_piles_up_without() {
    let outcome = run(Scene::SlowNeighbour).await;
    assert_eq!(figure(&outcome, "waiting_with"), 0.0);
    assert!(figure(&outcome, "slowest_order_with_ms") < 600.0);
    assert!(figure(&outcome, "waiting_without") >= 4.0);
    let table = outcome.timelines.first().unwrap();
    assert_eq!(table.column("catalogue answered"), ["8 of 8", "8 of 8"]);
    assert_eq!(table.column("orders accepted"), ["8 of 8", "8 of 8"]);
    assert!(outcome.passed, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadline_shrinks_at_every_hop_and_a_slow_inventory_ends_at_the_callers_2_s() {
    let outcome = run(Scene::Deadline).await;
    let table = outcome
        .timeline("one order with a 2 s budget, hop by hop")
        .unwrap();
    let hops = table.column("hop");
    assert!(hops[0].starts_with("gateway "), "{hops:?}");
    assert!(hops[1].starts_with("order POST /api/orders"), "{hops:?}");
    let attempt = hops
        .iter()
        .position(|h| h.starts_with("order → inventory attempt 1"))
        .unwrap();
    assert!(
        hops[attempt + 1..]
            .iter()
            .any(|h| h.starts_with("inventory ")),
        "Inventory's server span after the attempt that reached it: {hops:?}"
    );
    // Read from the spans: the time left only shrinks, and never exceeds
    // the caller's 2 s.
    let (gateway, order, inventory) = (
        figure(&outcome, "gateway_left_ms"),
        figure(&outcome, "order_left_ms"),
        figure(&outcome, "inventory_left_ms"),
    );
    assert!(
        0.0 < inventory && inventory < order && order < gateway && gateway <= 2000.0,
        "gateway {gateway}, order {order}, inventory {inventory}"
    );
    for left in table.column("time left") {
        let ms: u64 = left.trim_end_matches(" ms").parse().unwrap();
        assert!(ms <= 2000, "{left}");
    }
    // A 4 s Inventory: the call ends at the caller's deadline, not after
    // Order's own 3 s attempts.
    assert_eq!(figure(&outcome, "slow_status"), 504.0);
    let slow = figure(&outcome, "slow_elapsed_ms");
    assert!((1900.0..=2500.0).contains(&slow), "{slow} ms");
    assert!(outcome.passed, "{outcome}");
}

#[test]
fn the_binary_lists_every_scene_and_each_scene_explains_itself() {
    let list = Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .args(["demo", "--list"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let text = String::from_utf8(list.stdout).unwrap();
    for scene in Scene::ALL {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(scene.info().name))
            .unwrap_or_else(|| panic!("{scene} not listed:\n{text}"));
        assert!(line.contains(scene.info().summary), "{line}");
    }

    let help = Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .args(["demo", "breaker", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    assert!(text.contains("12-tick circuit breaker"), "{text}");
    assert!(
        text.contains("Expected: Inventory reached at most 6 times"),
        "{text}"
    );
    assert!(text.contains("--target"), "{text}");

    let unknown = Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .args(["demo", "no-such-scene"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2), "a usage error");
}

#[test]
fn a_bad_target_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .args(["demo", "fallback", "--target", "ftp://x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("must start with http://"), "{err}");
}
