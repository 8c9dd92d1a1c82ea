//! The Redis guard against real Redis trouble: a private `redis-server`
//! frozen with SIGSTOP (connections stay open, nothing answers) and a port
//! nobody listens on. Real time: the guard's clock logic is tested with a
//! paused clock next to the code.

use std::time::Duration;

use shopeasy_runtime::{
    redis_guard::{RedisGuard, RedisGuardSettings, Unavailable},
    settings::Seconds,
};
use shopeasy_testkit::{PrivateRedis, assert_eventually, free_port};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_millis(200);
const REST: Duration = Duration::from_millis(500);

fn guard(url: &str) -> RedisGuard {
    let settings = RedisGuardSettings {
        timeout_seconds: Seconds::from(TIMEOUT),
        rest_seconds: Seconds::from(REST),
    };
    RedisGuard::new("test", url, &settings).expect("a redis URL")
}

async fn ping(guard: &RedisGuard) -> Result<String, Unavailable> {
    guard.query(&redis::cmd("PING")).await
}

#[tokio::test]
async fn a_hung_redis_costs_one_timeout_then_rests_then_is_probed_again() {
    let Some(redis) = PrivateRedis::start().await else {
        return;
    };
    let guard = guard(&redis.url());
    assert_eq!(ping(&guard).await.as_deref(), Ok("PONG"));

    redis.freeze();
    let start = Instant::now();
    assert_eq!(ping(&guard).await, Err(Unavailable::Failed));
    let failed_at = Instant::now();
    let took = failed_at - start;
    assert!(
        took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(1),
        "the call is bounded by the timeout: {took:?}"
    );

    // Resting: answered without a call (a call would hang for the timeout).
    let start = Instant::now();
    assert_eq!(ping(&guard).await, Err(Unavailable::Resting));
    assert!(guard.is_resting());
    assert!(start.elapsed() < TIMEOUT, "no call is made while resting");

    // Redis answers again at once, but the guard only calls it after its
    // rest; then the first call is the probe, and it succeeds.
    redis.thaw();
    assert_eventually(
        Duration::from_secs(5),
        "the guard calls Redis again after its rest",
        async || ping(&guard).await.is_ok(),
    )
    .await;
    assert!(
        failed_at.elapsed() >= REST,
        "no call reached Redis before the rest was over"
    );
}

#[tokio::test]
async fn a_refused_connection_fails_fast_and_starts_a_rest() {
    let guard = guard(&format!("redis://127.0.0.1:{}", free_port()));
    assert_eq!(ping(&guard).await, Err(Unavailable::Failed));
    assert_eq!(ping(&guard).await, Err(Unavailable::Resting));
    // An invalidation-style call is made even while resting (and fails).
    assert_eq!(
        guard.query_now::<String>(&redis::cmd("PING")).await,
        Err(Unavailable::Failed)
    );
    // What `/admin/resilience` shows as `redis`: resting, two failures.
    assert_eq!(
        guard.report(),
        serde_json::json!({"configured": true, "resting": true, "failures": 2})
    );
}
