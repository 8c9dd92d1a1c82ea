//! `retry`: the lesson's "timeout, 503, ok" with ShopEasy's own retry
//! stack, and a permanent error that is not retried.
//!
//! The client is `shopeasy_resilience::edge::EdgeClient` with
//! `HttpRetryPolicy` — the stack Order calls Product with — in front of a
//! real fault proxy and a scripted provider ([`super::stub`]). Call 1: the
//! first attempt's answer is lost to the proxy's `reset_peer` toxic
//! (removed once it has struck), the second gets 503, the third 200. Call
//! 2: a `timeout` toxic holds the answer past the attempt timeout, and
//! ShopEasy does not retry a timeout. Call 3: 400, permanent. The backoff
//! is the lesson's: one tick, doubling, no jitter. Attempts are timed where
//! the lesson counts them, at the provider; each is checked against the
//! proxy's recorded fault windows (an attempt the proxy broke must lie
//! inside its toxic's window, an answered one outside).

use std::time::Duration;

use shopeasy_faults::{FaultProxy, ProxyConfig, Stream, Toxic, ToxicKind};
use shopeasy_resilience::{
    backoff::{Backoff, Jitter},
    breaker::HttpClassifier,
    budget::{BudgetConfig, RetryBudget},
    edge::{EdgeClient, EdgeConfig},
    error::BoxError,
    outcome::Outcome as CallOutcome,
    retry::HttpRetryPolicy,
};
use tokio::time::Instant;

use super::{
    Outcome, Run, Scene, SceneInfo, TICK, Timeline,
    stub::{Answer, Arrival, Stub},
};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "retry",
    summary: "retry only temporary errors, with a growing wait: reset, 503, ok",
    help: "ShopEasy's retry stack (shopeasy_resilience::edge::EdgeClient with \
HttpRetryPolicy, the stack Order calls Product with) against a scripted provider \
behind a real fault proxy (a tick is 200 ms). Call 1: the proxy's reset_peer toxic \
loses the first attempt's answer (a temporary error), the provider answers the second \
with 503 and the third with 200; the wait before each retry is 1, then 2 ticks (no \
jitter, as in the lesson). Call 2: the proxy's timeout toxic holds the answer past the \
50 ms attempt timeout: ShopEasy does not retry a timeout (the lesson does; see the \
lesson page). Call 3: the provider answers 400, a permanent error, not retried. Each \
attempt is timed at the provider and checked against the proxy's recorded toxic \
windows.",
    expected: "call 1: attempts on ticks 0, 1, 3 (reset, 503, ok), result ok; call 2: one \
attempt (a timeout), not retried; call 3: one attempt (400), not retried; every \
attempt the proxy broke inside its toxic's window, every answered one outside",
};

/// The attempt timeout: well under a tick, so the lesson's "answers take
/// no time" holds to within a quarter of a tick.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);

/// The pause between calls (see its use).
const EDGE_MARGIN: Duration = Duration::from_millis(5);

/// The toxic that breaks a call's first attempt.
const TOXIC: &str = "first-attempt";

/// Runs the scene.
///
/// # Errors
/// The stub or the proxy cannot listen, or a call fails to be made.
pub async fn run(_run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Retry);
    let stub = Stub::start(&[], Answer::Status(200)).await?;
    let proxy = FaultProxy::start_with(
        ProxyConfig::new("demo-provider", stub.addr().to_string()).listen("127.0.0.1:0"),
    )
    .await?;
    let client = client(&proxy)?;
    let result = calls(&client, &stub, &proxy, &mut outcome).await;
    proxy.stop().await;
    result?;
    Ok(outcome)
}

/// The stack: three retries (four attempts, the lesson's limit), the
/// lesson's backoff, a budget that allows them.
fn client(proxy: &FaultProxy) -> anyhow::Result<Client> {
    let mut config = EdgeConfig::new("demo-provider", ATTEMPT_TIMEOUT);
    config.max_retries = 3;
    config.backoff = Backoff::new(TICK, TICK * 8, Jitter::None);
    http_edge(&config, format!("http://{}/pay", proxy.listen_addr()))
}

/// A scene's client of the scripted provider.
pub(crate) type Client = EdgeClient<http::Request<()>, http::Response<()>>;

/// ShopEasy's HTTP client stack as `config` says (`HttpRetryPolicy`,
/// `HttpClassifier`, a budget that allows the scene's retries), each
/// attempt a `GET url`.
///
/// # Errors
/// The HTTP client cannot be built.
pub(crate) fn http_edge(config: &EdgeConfig, url: String) -> anyhow::Result<Client> {
    let budget = RetryBudget::new(BudgetConfig::default());
    let http = reqwest::Client::builder().build()?;
    let transport = tower::service_fn(move |_req: http::Request<()>| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let res = http.get(url).send().await?;
            let mut answer = http::Response::new(());
            *answer.status_mut() = res.status();
            // `Retry-After` is the policy's to read.
            *answer.headers_mut() = res.headers().clone();
            Ok::<_, BoxError>(answer)
        }
    });
    Ok(EdgeClient::new(
        config,
        budget,
        HttpRetryPolicy::new(),
        HttpClassifier,
        transport,
    ))
}

/// The outcome label of an answer: 2xx is ok, anything else an error
/// status.
pub(crate) fn judge(r: &http::Response<()>) -> CallOutcome {
    if r.status().is_success() {
        CallOutcome::Ok
    } else {
        CallOutcome::ErrorStatus
    }
}

/// One scripted call: a toxic on the proxy while its first attempt runs
/// (or none), and what each attempt's answer was, as the client saw it.
struct Script {
    toxic: Option<ToxicKind>,
    labels: &'static [&'static str],
}

/// The three calls: a reset then 503 then ok; a timeout; a 400.
const SCRIPTS: [Script; 3] = [
    Script {
        toxic: Some(ToxicKind::ResetPeer { timeout: 0 }),
        labels: &["connection reset", "503", "ok (200)"],
    },
    Script {
        toxic: Some(ToxicKind::Timeout { timeout: 0 }),
        labels: &["timeout"],
    },
    Script {
        toxic: None,
        labels: &["400 (permanent)"],
    },
];

/// What the provider answers, call by call (a toxic may swallow it).
const ANSWERS: [&[Answer]; 3] = [
    &[
        Answer::Status(200),
        Answer::Status(503),
        Answer::Status(200),
    ],
    &[Answer::Status(200)],
    &[Answer::Status(400)],
];

/// One call's record.
struct Made {
    started: Instant,
    attempts: Vec<Arrival>,
    status: Option<u16>,
}

async fn calls(
    client: &Client,
    stub: &Stub,
    proxy: &FaultProxy,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut made = Vec::new();
    for (script, answers) in SCRIPTS.iter().zip(ANSWERS) {
        stub.script(answers, Answer::Status(200));
        if let Some(kind) = &script.toxic {
            proxy.add_toxic(Toxic::new(kind.clone(), Stream::Downstream).named(TOXIC))?;
        }
        let started = Instant::now();
        let call = client.call(http::Request::new(()), judge);
        // The toxic comes off once it has done its work on the first
        // attempt: the attempt reached the provider and its connection is
        // gone (reset), or the attempt timed out.
        let heal = async {
            if script.toxic.is_some() {
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline
                    && (stub.arrivals().is_empty()
                        || (proxy.open_connections() > 0
                            && started.elapsed() < ATTEMPT_TIMEOUT * 2))
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                proxy.remove_toxic(TOXIC)?;
            }
            Ok::<_, shopeasy_faults::Error>(())
        };
        let (result, healed) = tokio::join!(call, heal);
        healed?;
        // The windows are stamped in whole milliseconds: a few between one
        // call's last attempt and the next toxic keep every attempt clearly
        // on one side of a window's edge.
        tokio::time::sleep(EDGE_MARGIN).await;
        made.push(Made {
            started,
            attempts: stub.arrivals(),
            status: result.as_ref().map(|r| r.status().as_u16()).ok(),
        });
    }

    let windows = proxy.windows().windows;
    let inside = |a: &Arrival| {
        windows.iter().any(|w| {
            w.toxic == TOXIC
                && w.started_unix_ms <= a.unix_ms
                && w.ended_unix_ms.is_none_or(|end| a.unix_ms <= end)
        })
    };

    let mut table = Timeline::new(
        "attempts, as the provider saw them",
        &[
            "call",
            "tick",
            "ms",
            "attempt",
            "answer",
            "toxic window",
            "then",
        ],
    );
    let mut faulted_outside = 0_u32;
    let mut answered_inside = 0_u32;
    for (n, (call, script)) in made.iter().zip(&SCRIPTS).enumerate() {
        for (i, arrival) in call.attempts.iter().enumerate() {
            let ms = arrival
                .at
                .saturating_duration_since(call.started)
                .as_millis();
            let label = script.labels.get(i).copied().unwrap_or("?");
            let faulted = i == 0 && script.toxic.is_some();
            let in_window = inside(arrival);
            match (faulted, in_window) {
                (true, false) => faulted_outside += 1,
                (false, true) => answered_inside += 1,
                _ => {}
            }
            let then = if i + 1 < call.attempts.len() {
                "retry".to_owned()
            } else {
                format!(
                    "result: {}",
                    call.status.map_or("failed".to_owned(), |s| s.to_string())
                )
            };
            table.push([
                (n + 1).to_string(),
                (ms / TICK.as_millis()).to_string(),
                ms.to_string(),
                (i + 1).to_string(),
                label.to_owned(),
                if in_window { "inside" } else { "outside" }.to_owned(),
                then,
            ]);
        }
    }
    outcome.timelines.push(table);

    let ticks: Vec<u128> = made[0]
        .attempts
        .iter()
        .map(|a| a.at.saturating_duration_since(made[0].started).as_millis() / TICK.as_millis())
        .collect();
    // The waits grow: the second pause is longer than the first.
    let growing = match made[0].attempts.as_slice() {
        [a, b, c] => c.at.saturating_duration_since(b.at) > b.at.saturating_duration_since(a.at),
        _ => false,
    };
    let counts: Vec<usize> = made.iter().map(|m| m.attempts.len()).collect();
    for (name, count) in ["call1_attempts", "call2_attempts", "call3_attempts"]
        .into_iter()
        .zip(&counts)
    {
        outcome.figure(name, *count as f64);
    }
    outcome.figure(
        "faulted_attempts_outside_window",
        f64::from(faulted_outside),
    );
    outcome.figure(
        "answered_attempts_inside_window",
        f64::from(answered_inside),
    );
    let status = |m: &Made| m.status.map_or("failed".to_owned(), |s| s.to_string());
    outcome.measured = format!(
        "call 1: {} attempts on ticks {ticks:?}, result {}; call 2 (timeout): {} attempt, \
         result {}; call 3 (400): {} attempt, result {}; faulted attempts outside the \
         toxic's window: {faulted_outside}",
        counts[0],
        status(&made[0]),
        counts[1],
        status(&made[1]),
        counts[2],
        status(&made[2]),
    );
    outcome.notes.push(
        "attempts are timed at the provider; the tick is the time since the call began, \
         in 200 ms ticks, rounded down"
            .to_owned(),
    );
    outcome.notes.push(
        "ShopEasy never retries after a timeout (the attempt has spent its share of the \
         deadline, and the request may have been done): the lesson's first answer, a \
         timeout, is a connection reset here"
            .to_owned(),
    );
    outcome.passed = counts == [3, 1, 1]
        && made[0].status == Some(200)
        && ticks == [0, 1, 3]
        && growing
        && made[1].status.is_none()
        && made[2].status == Some(400)
        && faulted_outside == 0
        && answered_inside == 0;
    Ok(())
}
