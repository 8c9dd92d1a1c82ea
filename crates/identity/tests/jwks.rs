//! The JWKS fetch as a resilient call, against a real provider behind the
//! workspace's fault proxy: cached keys verify while the provider is down,
//! a new `kid` is fetched once however many tokens carry it, retries are
//! bounded, a refresh has a deadline, and made-up `kid`s cannot hammer the
//! provider.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{Router, response::Redirect, routing::get};

use shopeasy_faults::{FaultProxy, Stream, Toxic, ToxicKind};
use shopeasy_identity::{AuthError, FetchError, Verifier};
use shopeasy_runtime::settings::Seconds;
use support::{
    Counters, MIN_REFRESH_INTERVAL, Provider, after_min_interval, claims, key, settings,
};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cached_keys_verify_while_the_provider_is_down_and_a_new_kid_is_fetched_once() {
    let (k1, k2) = (key(1), key(2));
    let (provider, addr) = Provider::start(&[&k1]).await;
    let proxy = FaultProxy::start("jwks", addr.to_string())
        .await
        .expect("proxy");
    let v = Verifier::from_settings(&settings(format!(
        "http://{}/jwks.json",
        proxy.listen_addr()
    )))
    .expect("verifier");
    let old = k1.sign(&claims("alice")).expect("sign");
    v.verify(&old).await.expect("valid while up");
    let fetched = Instant::now();
    assert_eq!(provider.requests(), 1);

    // Down: the cached key keeps verifying, without calling the provider.
    proxy.set_enabled(false).await;
    for _ in 0..5 {
        v.verify(&old)
            .await
            .expect("a cached key verifies while the provider is down");
    }
    // A token under a key we do not have yet cannot be verified now: the
    // refresh (allowed once min_refresh_interval has passed) fails, its
    // attempts never reaching the provider, and the cache keeps what it had.
    after_min_interval(fetched).await;
    let new = k2.sign(&claims("bob")).expect("sign");
    assert_eq!(v.verify(&new).await.err(), Some(AuthError::UnknownKey));
    let failed = Instant::now();
    v.verify(&old)
        .await
        .expect("still verifying after a failed refresh");
    assert_eq!(
        provider.requests(),
        1,
        "nothing reached the provider while it was down"
    );

    // Back, with the rotated-in key: 50 concurrent tokens under the new kid
    // share one fetch.
    provider.set_keys(&[&k1, &k2]);
    proxy.set_enabled(true).await;
    after_min_interval(failed).await;
    let before = provider.requests();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let v = v.clone();
            let token = new.clone();
            tokio::spawn(async move { v.verify(&token).await })
        })
        .collect();
    for t in tasks {
        let c = t.await.expect("task").expect("the new key verifies");
        assert_eq!(c.customer_id(), "bob");
    }
    assert_eq!(
        provider.requests() - before,
        1,
        "exactly one JWKS fetch for 50 tokens"
    );
    v.verify(&old)
        .await
        .expect("the old key is still published");
}

#[tokio::test]
async fn a_refresh_is_bounded_by_its_deadline_when_the_provider_hangs() {
    let (provider, addr) = Provider::start(&[&key(1)]).await;
    let proxy = FaultProxy::start("jwks", addr.to_string())
        .await
        .expect("proxy");
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Upstream,
        ))
        .expect("toxic");
    let mut s = settings(format!("http://{}/jwks.json", proxy.listen_addr()));
    s.fetch_timeout_seconds = Seconds::new(0.2);
    s.fetch_deadline_seconds = Seconds::new(0.5);
    let v = Verifier::from_settings(&s).expect("verifier");
    let started = Instant::now();
    let got = v
        .verify(&key(1).sign(&claims("alice")).expect("sign"))
        .await;
    let took = started.elapsed();
    assert_eq!(
        got.err(),
        Some(AuthError::KeysUnavailable),
        "no key was ever fetched: 503, not the caller's fault"
    );
    assert!(
        took < Duration::from_secs(2),
        "bounded by the 0.5 s deadline, took {took:?}"
    );
    let attempts = v.jwks().expect("jwks").requests();
    assert!(
        (1..=3).contains(&attempts),
        "retried within fetch_retries: {attempts}"
    );
    assert_eq!(provider.requests(), 0, "the black hole delivered nothing");
    assert_eq!(
        AuthError::KeysUnavailable.to_response().headers()["retry-after"],
        "5"
    );
}

#[tokio::test]
async fn a_failing_provider_is_retried_with_backoff() {
    let (provider, addr) = Provider::start(&[&key(1)]).await;
    provider.fail_next(2);
    let v =
        Verifier::from_settings(&settings(format!("http://{addr}/jwks.json"))).expect("verifier");
    v.verify(&key(1).sign(&claims("alice")).expect("sign"))
        .await
        .expect("the third attempt succeeds");
    assert_eq!(provider.requests(), 3, "two 503s, then the keys");
}

/// A provider that redirects is not followed: the keys come from the URL
/// configured, not from wherever a 3xx points (plain HTTP, another host).
/// The refresh fails with the 3xx, is not retried, and the real provider
/// behind the redirect is never asked.
#[tokio::test]
async fn a_redirect_is_not_followed() {
    let (provider, addr) = Provider::start(&[&key(1)]).await;
    let target = format!("http://{addr}/jwks.json");
    let redirects = Arc::new(AtomicU64::new(0));
    let counted = redirects.clone();
    let redirector = support::serve(Router::new().route(
        "/jwks.json",
        get(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            let target = target.clone();
            async move { Redirect::temporary(&target) }
        }),
    ))
    .await;
    let v = Verifier::from_settings(&settings(format!("http://{redirector}/jwks.json")))
        .expect("verifier");
    let cache = v.jwks().expect("a JWKS").clone();
    assert_eq!(cache.refresh().await.err(), Some(FetchError::Status(307)));
    assert_eq!(
        (redirects.load(Ordering::Relaxed), provider.requests()),
        (1, 0),
        "one attempt, not retried, and the redirect's target never asked"
    );
    assert!(cache.snapshot().keys.is_empty(), "no keys came");
}

#[tokio::test]
async fn made_up_kids_cannot_hammer_the_provider() {
    let (provider, addr) = Provider::start(&[&key(1)]).await;
    let mut s = settings(format!("http://{addr}/jwks.json"));
    s.min_refresh_interval_seconds = Seconds::new(60.0);
    let v = Verifier::from_settings(&s).expect("verifier");
    v.verify(&key(1).sign(&claims("alice")).expect("sign"))
        .await
        .expect("valid");
    assert_eq!(provider.requests(), 1);
    for n in 10..40 {
        // Each forger's key has its own kid, unknown to the provider too.
        let token = key(n).sign(&claims("mallory")).expect("sign");
        assert_eq!(v.verify(&token).await.err(), Some(AuthError::UnknownKey));
    }
    assert_eq!(
        provider.requests(),
        1,
        "no refresh within min_refresh_interval of the last one"
    );
}

/// While the provider is down, stale keys are retried once per
/// `min_refresh_interval`, not once per request: the requests in between
/// start no refresh and count no `outcome="throttled"`, and the first due
/// retry after the provider is back refreshes the keys.
///
/// Fails without the fix: once the keys were older than
/// `refresh_interval` and a refresh had failed, every verify started a
/// refresh that was throttled at once (`throttled` counted ~100 times).
/// `current_thread` on purpose: the recorder is this thread's, and the
/// refreshes' tasks run here too.
#[tokio::test]
async fn while_the_provider_is_down_stale_keys_are_retried_per_interval_not_per_request() {
    let counters = Counters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let refreshes = |outcome: &str| {
        counters.get(&format!(
            "shopeasy_identity_jwks_refreshes_total{{outcome={outcome}}}"
        ))
    };
    let (provider, addr) = Provider::start(&[&key(1)]).await;
    let mut s = settings(format!("http://{addr}/jwks.json"));
    // Stale after a second (the shortest the settings allow, as is the
    // minimum interval); one attempt per refresh.
    s.refresh_interval_seconds = MIN_REFRESH_INTERVAL.into();
    s.fetch_retries = 0;
    let v = Verifier::from_settings(&s).expect("verifier");
    let cache = v.jwks().expect("a JWKS").clone();
    let token = key(1).sign(&claims("alice")).expect("sign");
    v.verify(&token).await.expect("valid");
    let fetched = Instant::now();
    assert_eq!((provider.requests(), refreshes("ok")), (1, 1));

    // Down, and the keys stale: the next verify starts one background
    // refresh (answered from the cache meanwhile), which fails.
    provider.fail_next(u64::MAX);
    after_min_interval(fetched).await;
    let seen = cache.snapshot().generation;
    v.verify(&token)
        .await
        .expect("the cached verdict answers while refreshing");
    // Join that refresh and wait for its outcome (it is in flight: nothing
    // has yielded since it started).
    assert_eq!(
        cache.refresh_after_miss(seen).await.err(),
        Some(FetchError::Status(503))
    );
    let failed = Instant::now();
    assert_eq!((provider.requests(), refreshes("error")), (2, 1));

    for _ in 0..100 {
        v.verify(&token)
            .await
            .expect("the cached key verifies while the provider is down");
        // Let any refresh a verify started run.
        tokio::task::yield_now().await;
    }
    assert_eq!(
        refreshes("throttled"),
        0,
        "no refresh is started while the last attempt is recent"
    );
    if failed.elapsed() < MIN_REFRESH_INTERVAL {
        assert_eq!(provider.requests(), 2, "no attempt within the interval");
    }

    // Back: the first verify after the interval retries, and succeeds.
    provider.fail_next(0);
    after_min_interval(failed).await;
    let seen = cache.snapshot().generation;
    v.verify(&token).await.expect("valid");
    cache
        .refresh_after_miss(seen)
        .await
        .expect("the retry refreshed the keys");
    assert_eq!(refreshes("ok"), 2);
    assert_eq!(refreshes("throttled"), 0);
}
