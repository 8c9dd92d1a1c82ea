//! The README's "How to add a fifth service", followed step by step with a
//! toy service: if this test needs more than the recipe says, the recipe is
//! wrong.

// A failed set-up should panic on the spot, as in the tests themselves.
#![allow(clippy::unwrap_used)]

use axum::{Router, routing::get};
use serde::{Deserialize, Serialize};
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Service},
    settings::{Loader, ProcessSettings, Settings, SettingsError, Validator},
    topology::Node,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

// Step 1: the service's place in the topology (a real service adds a `Node`
// const to `topology.rs` and lists it in `SERVICES` and `WIRING_ORDER`).
const TOY: Node = Node {
    name: "toy",
    binary: "shopeasy-toy",
    protocol: "http",
    public_port: 8090,
    admin_port: 9090,
    calls: &[],
};

// Step 2: its settings — the process part flattened in, its own keys beside.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
struct ToySettings {
    #[serde(flatten)]
    process: ProcessSettings,
    greeting: String,
}

impl Default for ToySettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&TOY),
            greeting: "hello".into(),
        }
    }
}

// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for ToySettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for ToySettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        if self.greeting.is_empty() {
            v.fail("greeting", "\"\"", "must not be empty");
        }
    }
}

// Step 3: the `Service` impl — build connects and registers, serve serves.
#[derive(Debug)]
struct Toy {
    router: Router,
}

impl Service for Toy {
    type Settings = ToySettings;
    const NAME: &'static str = TOY.binary;

    async fn build(settings: ToySettings, admin: &Admin) -> anyhow::Result<Self> {
        admin.readiness("toy", || async { Ok(()) });
        let greeting = settings.greeting;
        let router = Router::new().route("/hello", get(move || async move { greeting }));
        Ok(Self { router })
    }

    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        lifecycle::serve_admitted(public, self.router, shutdown, Self::DRAIN).await?;
        Ok(())
    }
}

// Step 4 (`main`) is `lifecycle::run::<Toy>(&cli.config)`; step 5 is this:
// start it with the one handle, on port 0, and ask its admin listener.
#[tokio::test]
async fn a_toy_service_follows_the_recipe() {
    let mut settings = ToySettings::default();
    settings.process.ephemeral();
    let running = lifecycle::spawn::<Toy>(settings).await.unwrap();
    assert_ne!(running.local_addr().port(), 0);
    assert_ne!(running.admin_addr().port(), 0);
    assert_ne!(running.local_addr(), running.admin_addr());
    assert_eq!(running.name(), "shopeasy-toy");

    let ready = reqwest::get(format!("http://{}/health/ready", running.admin_addr()))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let hello = reqwest::get(format!("http://{}/hello", running.local_addr()))
        .await
        .unwrap();
    assert_eq!(hello.status(), 200);
    assert_eq!(hello.text().await.unwrap(), "hello");

    let addr = running.local_addr();
    running.stop().await.unwrap();
    // Stopped means the port is free again.
    TcpListener::bind(addr).await.unwrap();
}

#[tokio::test]
async fn an_aborted_service_frees_its_ports_at_once() {
    let mut settings = ToySettings::default();
    settings.process.ephemeral();
    let running = lifecycle::spawn::<Toy>(settings).await.unwrap();
    let (public, admin) = (running.local_addr(), running.admin_addr());
    running.abort().await;
    TcpListener::bind(public).await.unwrap();
    TcpListener::bind(admin).await.unwrap();
}

#[test]
fn its_settings_come_from_the_environment_like_everyone_elses() {
    let s: ToySettings = Loader::new()
        .env([
            ("LISTEN_ADDR", "127.0.0.1:1"),
            ("LOG__LEVEL", "debug"),
            ("GREETING", "hi"),
        ])
        .load()
        .unwrap();
    assert_eq!(s.process.listen_addr.port(), 1);
    assert_eq!(s.process.admin_addr.port(), TOY.admin_port);
    assert_eq!(s.process.log.level, "debug");
    assert_eq!(s.greeting, "hi");
    let err = Loader::new()
        .env([("GREETING", ""), ("LOG__LEVL", "x")])
        .load::<ToySettings>();
    let Err(SettingsError::Invalid(errors)) = err else {
        panic!("expected invalid settings, got {err:?}");
    };
    let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        ["log.levl"],
        "unknown keys are refused before validation"
    );
}

#[tokio::test]
async fn a_port_in_use_names_the_setting() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut settings = ToySettings::default();
    settings.process.ephemeral();
    settings.process.admin_addr = taken.local_addr().unwrap();
    let err = lifecycle::spawn::<Toy>(settings).await.unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("admin_addr"), "{message}");
    assert!(
        message.contains(&taken.local_addr().unwrap().to_string()),
        "{message}"
    );
}
