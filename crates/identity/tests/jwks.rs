//! The JWKS fetch as a resilient call, against a real provider behind the
//! workspace's fault proxy: cached keys verify while the provider is down,
//! a new `kid` is fetched once however many tokens carry it, retries are
//! bounded, a refresh has a deadline, and made-up `kid`s cannot hammer the
//! provider.

mod support;

use std::time::Duration;

use shopeasy_faults::{FaultProxy, Stream, Toxic, ToxicKind};
use shopeasy_identity::{AuthError, Verifier};
use shopeasy_runtime::settings::Seconds;
use support::{Provider, claims, key, settings};
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
    assert_eq!(provider.requests(), 1);

    // Down: the cached key keeps verifying, without calling the provider.
    proxy.set_enabled(false).await;
    for _ in 0..5 {
        v.verify(&old)
            .await
            .expect("a cached key verifies while the provider is down");
    }
    // A token under a key we do not have yet cannot be verified now: the
    // refresh fails (its attempts never reach the provider) and the cache
    // keeps what it had.
    let new = k2.sign(&claims("bob")).expect("sign");
    assert_eq!(v.verify(&new).await.err(), Some(AuthError::UnknownKey));
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
