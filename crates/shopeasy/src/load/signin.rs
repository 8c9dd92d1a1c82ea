//! Signing in before the load: orders need a customer's access token
//! (issue 15), so the generator acts as many signed-in customers, not one
//! anonymous caller.
//!
//! By default it signs `--customers` demo customers (`load-0`, `load-1`, …)
//! in through the target's `POST /api/session` — the embedded system's demo
//! issuer, routed by the gateway — a few at a time, before the clock of the
//! load starts, so sign-ins never count as load. A target whose identity
//! provider is a real one has no such route: `--token-file` takes tokens
//! obtained there instead, one a line. Each order then carries the token of
//! a customer picked at random (seeded), and no `customer_id` in its body:
//! the services take the customer from the token's `sub`.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use reqwest::{StatusCode, header::HeaderValue};
use serde_json::json;
use tokio::{sync::Semaphore, task::JoinSet};

/// Sign-ins in flight at once: enough to sign a thousand customers in well
/// under a second, few enough not to look like a flood to the gateway's
/// per-client limit.
pub const CONCURRENCY: usize = 16;

/// Most customers one run signs in.
pub const MAX_CUSTOMERS: usize = 100_000;

/// Who the load acts as (`shopeasy load` and `--sweep`).
#[derive(Debug, Clone, clap::Args)]
pub struct SignInArgs {
    /// Demo customers to sign in through `POST {target}/api/session`
    /// (`load-0`, `load-1`, …); each order carries the token of one of
    /// them, picked at random.
    #[arg(long, default_value_t = 1000)]
    pub customers: usize,
    /// Access tokens to use instead of signing in, one a line (for a target
    /// whose identity provider is not the demo issuer).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl Default for SignInArgs {
    fn default() -> Self {
        Self {
            customers: 1000,
            token_file: None,
        }
    }
}

/// The customers' `Authorization` values (`Bearer …`, marked sensitive so
/// they are never logged).
#[derive(Debug, Clone, Default)]
pub struct Customers {
    bearers: Arc<[HeaderValue]>,
}

impl Customers {
    /// Customers from their access tokens.
    ///
    /// # Errors
    /// A token that cannot be a header value.
    pub fn from_tokens(tokens: impl IntoIterator<Item = String>) -> anyhow::Result<Self> {
        let bearers = tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let mut value = HeaderValue::try_from(format!("Bearer {}", token.trim()))
                    .with_context(|| format!("token {} is not a header value", i + 1))?;
                value.set_sensitive(true);
                Ok(value)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            bearers: bearers.into(),
        })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.bearers.len()
    }

    /// True when there are none (orders are then sent without a token).
    pub fn is_empty(&self) -> bool {
        self.bearers.is_empty()
    }

    /// The `Authorization` value of customer `index % len`.
    pub fn bearer(&self, index: usize) -> Option<&HeaderValue> {
        match self.bearers.len() {
            0 => None,
            n => self.bearers.get(index % n),
        }
    }

    /// Adds customer `index`'s token to `request` (nothing when there are
    /// no customers).
    pub fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        index: usize,
    ) -> reqwest::RequestBuilder {
        match self.bearer(index) {
            Some(bearer) => request.header(reqwest::header::AUTHORIZATION, bearer.clone()),
            None => request,
        }
    }
}

/// The customers `args` asks for at `base` (the gateway): the tokens of
/// `--token-file`, or `--customers` demo customers signed in.
///
/// # Errors
/// An unreadable or empty token file, a target without a sign-in (its
/// `POST /api/session` answers 404 or 405), or a sign-in that fails.
pub async fn sign_in(
    client: &reqwest::Client,
    base: &str,
    args: &SignInArgs,
) -> anyhow::Result<Customers> {
    if let Some(file) = &args.token_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading --token-file {}", file.display()))?;
        let tokens: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        anyhow::ensure!(
            !tokens.is_empty(),
            "--token-file {} holds no token",
            file.display()
        );
        return Customers::from_tokens(tokens);
    }
    anyhow::ensure!(
        (1..=MAX_CUSTOMERS).contains(&args.customers),
        "--customers must be in 1..={MAX_CUSTOMERS}"
    );
    // The first alone: a target without a sign-in fails once, clearly.
    let first = session(client, base, &name(0)).await?;
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for i in 1..args.customers {
        let permits = permits.clone();
        let client = client.clone();
        let base = base.to_owned();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            (i, session(&client, &base, &name(i)).await)
        });
    }
    let mut tokens = vec![String::new(); args.customers];
    tokens[0] = first;
    while let Some(joined) = tasks.join_next().await {
        let (i, token) = joined.context("a sign-in task failed")?;
        tokens[i] = token?;
    }
    Customers::from_tokens(tokens)
}

/// The name of demo customer `i`.
pub fn name(i: usize) -> String {
    format!("load-{i}")
}

/// Signs `customer` in at `base`: its access token.
async fn session(client: &reqwest::Client, base: &str, customer: &str) -> anyhow::Result<String> {
    let url = format!("{base}/api/session");
    let res = client
        .post(&url)
        .json(&json!({ "customer": customer }))
        .send()
        .await
        .with_context(|| format!("signing in {customer} at {url}"))?;
    let status = res.status();
    if matches!(
        status,
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
    ) {
        anyhow::bail!(
            "the target {base} has no sign-in (POST /api/session answered {status}): \
             pass --token-file FILE with access tokens from its identity provider, one a line"
        );
    }
    let body: serde_json::Value = if status.is_success() {
        res.json()
            .await
            .with_context(|| format!("the sign-in answer for {customer} at {url}"))?
    } else {
        let text = res.text().await.unwrap_or_default();
        anyhow::bail!("signing in {customer} at {url}: {status} {text}");
    };
    body["access_token"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("the sign-in answer for {customer} at {url} has no access_token"))
}
