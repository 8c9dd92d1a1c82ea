//! The retry layer's spans, in a test binary of their own: `tracing` caches
//! each callsite's interest process-wide, so a test running alongside on
//! another thread (with no subscriber) can register the `attempt` callsite
//! as uninteresting just before this test installs its subscriber.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shopeasy_resilience::BoxError;
use shopeasy_resilience::backoff::{Backoff, Jitter};
use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
use shopeasy_resilience::deadline::Call;
use shopeasy_resilience::retry::{GrpcUnavailablePolicy, RetryLayer};
use tower::{ServiceBuilder, ServiceExt};

/// A span's fields, by name.
type SpanFields = Vec<(String, String)>;

/// Records every `attempt` span's fields, by span id.
#[derive(Clone, Default)]
struct SpanLog(Arc<Mutex<Vec<(u64, SpanFields)>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        ));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanLog {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "attempt" {
            let mut fields = Vec::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().expect("lock").push((id.into_u64(), fields));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut log = self.0.lock().expect("lock");
        if let Some((_, fields)) = log.iter_mut().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_attempt_has_a_span_with_its_number_and_outcome() {
    use tracing_subscriber::layer::SubscriberExt;
    let log = SpanLog::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(log.clone()));
    let budget = RetryBudget::new(BudgetConfig {
        ratio: 1.0,
        min_retries_per_window: 1000,
        window: Duration::from_secs(10),
    });
    let pause = Duration::from_millis(10);
    let retry = RetryLayer::new(
        GrpcUnavailablePolicy,
        budget,
        Backoff::new(pause, pause, Jitter::None),
        2,
        "inventory",
    );
    // Unavailable twice, then an answer.
    let calls = Arc::new(AtomicU32::new(0));
    let dep = tower::service_fn(move |_call: Call<u32>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < 2 {
                Err(BoxError::from(tonic::Status::unavailable("refused")))
            } else {
                Ok(7)
            }
        }
    });
    let svc = ServiceBuilder::new().layer(retry).service(dep);
    assert_eq!(svc.oneshot(Call::new(1)).await.unwrap(), 7);
    let spans: Vec<SpanFields> = log
        .0
        .lock()
        .expect("lock")
        .iter()
        .map(|(_, f)| f.clone())
        .collect();
    let field = |span: &SpanFields, name: &str| {
        span.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    assert_eq!(spans.len(), 3);
    for (i, want) in ["retryable", "retryable", "ok"].iter().enumerate() {
        assert_eq!(
            field(&spans[i], "peer.service").as_deref(),
            Some("inventory")
        );
        assert_eq!(field(&spans[i], "attempt"), Some((i + 1).to_string()));
        assert_eq!(field(&spans[i], "outcome").as_deref(), Some(*want));
    }
}
