//! The system a scene runs against, and what a scene does to it: sign a
//! customer in, place an order, break and heal an edge through the fault
//! API, read `/admin/resilience`, `/metrics` and the proxy's fault windows.
//!
//! Everything goes over HTTP — the gateway, the Toxiproxy-compatible API,
//! Order's admin listener — so a scene drives the embedded system it
//! started and a running one (`--target`) the same way.

use std::{
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use shopeasy_console::prom::Page;
use shopeasy_faults::ToxicWindow;

use crate::system::{Options, System};

/// Where a running ShopEasy answers: the addresses a scene needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// The gateway (`http://127.0.0.1:8080`).
    pub gateway: String,
    /// The fault proxies' API (`http://127.0.0.1:8474`).
    pub faults: String,
    /// Order's admin listener (`http://127.0.0.1:9082`).
    pub order_admin: String,
}

impl Endpoints {
    /// The ports SPEC §1 names, on `host`.
    pub fn on_host(host: &str) -> Self {
        Self {
            gateway: format!("http://{host}:8080"),
            faults: format!("http://{host}:{}", shopeasy_faults::api::DEFAULT_PORT),
            order_admin: format!("http://{host}:9082"),
        }
    }

    /// The defaults (`127.0.0.1` and SPEC's ports), with each
    /// `NAME=URL` of `targets` replacing one (`gateway`, `faults`,
    /// `order-admin`); a bare URL names the gateway.
    ///
    /// # Errors
    /// An unknown name or a URL that is not `http://…`.
    pub fn parse(targets: &[String]) -> anyhow::Result<Self> {
        let mut endpoints = Self::on_host("127.0.0.1");
        for target in targets {
            let (name, url) = target.split_once('=').unwrap_or(("gateway", target));
            if !url.starts_with("http://") {
                bail!("--target {target}: the URL must start with http://");
            }
            let url = url.trim_end_matches('/').to_owned();
            match name {
                "gateway" => endpoints.gateway = url,
                "faults" => endpoints.faults = url,
                "order-admin" => endpoints.order_admin = url,
                other => bail!("--target {other}=…: the names are gateway, faults and order-admin"),
            }
        }
        Ok(endpoints)
    }
}

/// The system under a scene: one the scene started (and stops), or a
/// running one it was pointed at.
#[derive(Debug)]
pub struct Live {
    /// Where it answers.
    pub endpoints: Endpoints,
    /// The HTTP client every request of the scene uses.
    pub http: reqwest::Client,
    started: Option<(System, PathBuf)>,
}

impl Live {
    /// Starts the embedded system on a fresh temporary data folder, on
    /// ephemeral ports, with `env` as its settings (the scene's short
    /// timings) and `seed` for the fault proxies.
    ///
    /// # Errors
    /// The system does not start (the settings are named in the error).
    pub async fn start(env: &[(&str, &str)], seed: u64) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("shopeasy-demo-{}", uuid::Uuid::new_v4()));
        let mut options = Options::for_tests(&dir);
        options.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        options.seed = seed;
        let system = match System::start(options).await {
            Ok(system) => system,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let endpoints = Endpoints {
            gateway: format!("http://{}", system.addresses.gateway),
            faults: format!("http://{}", system.faults_api),
            order_admin: format!("http://{}", system.addresses.order_admin),
        };
        Ok(Self {
            endpoints,
            http: client()?,
            started: Some((system, dir)),
        })
    }

    /// A running system at `endpoints` (not stopped by [`Live::stop`]).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn running(endpoints: Endpoints) -> anyhow::Result<Self> {
        Ok(Self {
            endpoints,
            http: client()?,
            started: None,
        })
    }

    /// True when the scene started this system (so it may start a second
    /// one with a mechanism switched off).
    pub fn is_embedded(&self) -> bool {
        self.started.is_some()
    }

    /// Stops a system the scene started and removes its data folder; heals
    /// every edge of a running one (`POST /reset`).
    ///
    /// # Errors
    /// A service that stopped with an error.
    pub async fn stop(self) -> anyhow::Result<()> {
        match self.started {
            Some((system, dir)) => {
                let stopped = system.stop().await;
                let _ = std::fs::remove_dir_all(&dir);
                stopped
            }
            None => {
                let url = format!("{}/reset", self.endpoints.faults);
                self.http.post(url).send().await?.error_for_status()?;
                Ok(())
            }
        }
    }

    /// Signs `customer` in through the gateway: their access token.
    ///
    /// # Errors
    /// No answer, or not 200 with an `access_token`.
    pub async fn sign_in(&self, customer: &str) -> anyhow::Result<String> {
        let url = format!("{}/api/session", self.endpoints.gateway);
        let res = self
            .http
            .post(url)
            .json(&json!({ "customer": customer }))
            .send()
            .await?;
        if !res.status().is_success() {
            bail!("signing {customer} in: {}", res.status());
        }
        let body: Value = res.json().await?;
        body["access_token"]
            .as_str()
            .map(str::to_owned)
            .context("the session has no access_token")
    }

    /// The id of the catalogue's `index`-th product (0-based).
    ///
    /// # Errors
    /// The catalogue does not answer or is shorter.
    pub async fn product(&self, index: usize) -> anyhow::Result<String> {
        let url = format!("{}/api/products?limit=100", self.endpoints.gateway);
        let page: Value = self.http.get(url).send().await?.json().await?;
        page["items"][index]["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("the catalogue has no product number {index}"))
    }

    /// `POST /api/orders` of one unit of `product` as the customer whose
    /// token is `token`, with the idempotency key `key`.
    ///
    /// # Errors
    /// No answer at all (a status, even 5xx, is an answer).
    pub async fn order(
        &self,
        token: &str,
        product: &str,
        key: &str,
    ) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}/api/orders", self.endpoints.gateway);
        Ok(self
            .http
            .post(url)
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
            .send()
            .await?)
    }

    /// The customer's orders (`GET /api/orders`), as JSON.
    ///
    /// # Errors
    /// No answer or not JSON.
    pub async fn orders(&self, token: &str) -> anyhow::Result<Value> {
        let url = format!("{}/api/orders?limit=100", self.endpoints.gateway);
        Ok(self
            .http
            .get(url)
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?)
    }

    /// Enables or disables (`down`: refused connections) the proxy on
    /// `edge`.
    ///
    /// # Errors
    /// The fault API does not answer 2xx.
    pub async fn set_enabled(&self, edge: &str, enabled: bool) -> anyhow::Result<()> {
        let url = format!("{}/proxies/{edge}", self.endpoints.faults);
        self.http
            .post(url)
            .json(&json!({ "enabled": enabled }))
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("enabling={enabled} {edge}"))?;
        Ok(())
    }

    /// Adds `toxic` (Toxiproxy JSON) to the proxy on `edge`.
    ///
    /// # Errors
    /// The fault API does not answer 2xx.
    pub async fn add_toxic(&self, edge: &str, toxic: &Value) -> anyhow::Result<()> {
        let url = format!("{}/proxies/{edge}/toxics", self.endpoints.faults);
        self.http
            .post(url)
            .json(toxic)
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("adding a toxic to {edge}"))?;
        Ok(())
    }

    /// Removes the toxic `name` from the proxy on `edge`.
    ///
    /// # Errors
    /// The fault API does not answer 2xx.
    pub async fn remove_toxic(&self, edge: &str, name: &str) -> anyhow::Result<()> {
        let url = format!("{}/proxies/{edge}/toxics/{name}", self.endpoints.faults);
        self.http
            .delete(url)
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("removing toxic {name} from {edge}"))?;
        Ok(())
    }

    /// The fault windows the proxy on `edge` recorded, open at or after
    /// `since_unix_ms`, oldest first.
    ///
    /// # Errors
    /// The fault API does not answer 2xx with a list of windows.
    pub async fn windows(
        &self,
        edge: &str,
        since_unix_ms: u64,
    ) -> anyhow::Result<Vec<ToxicWindow>> {
        let url = format!(
            "{}/proxies/{edge}/windows?since={since_unix_ms}",
            self.endpoints.faults
        );
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Order's `/admin/resilience` (its breakers, budgets and caches).
    ///
    /// # Errors
    /// No answer or not JSON.
    pub async fn resilience(&self) -> anyhow::Result<Value> {
        let url = format!("{}/admin/resilience", self.endpoints.order_admin);
        Ok(self.http.get(url).send().await?.json().await?)
    }

    /// The state of Order's breaker on Inventory (`closed`, `open`,
    /// `half_open`).
    ///
    /// # Errors
    /// As [`Live::resilience`], or no such breaker.
    pub async fn inventory_breaker(&self) -> anyhow::Result<String> {
        let state = self.resilience().await?;
        state["circuit_breakers"]["inventory"]["state"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no inventory breaker in {state}"))
    }

    /// Order's `/metrics` page.
    ///
    /// # Errors
    /// No answer.
    pub async fn metrics(&self) -> anyhow::Result<Counters> {
        let url = format!("{}/metrics", self.endpoints.order_admin);
        let text = self.http.get(url).send().await?.text().await?;
        Ok(Counters::parse(&text))
    }
}

fn client() -> anyhow::Result<reqwest::Client> {
    // No call of a scene may hang the demo: the scene's own settings keep
    // every answer well under this.
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// Now, in Unix milliseconds (the clock the fault windows use).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A `/metrics` page (read by the console's one reader, `prom::Page`),
/// with the sums a scene takes the difference of before and after.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    page: Page,
}

impl Counters {
    /// Parses the text format; comments and lines that are not a sample
    /// are skipped.
    pub fn parse(text: &str) -> Self {
        Self {
            page: Page::parse(text),
        }
    }

    /// The sum of `name` over the series carrying every `(label, value)` of
    /// `with` and none of the `(label, value)`s of `without`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)], without: &[(&str, &str)]) -> f64 {
        self.page
            .matching(name, with)
            .filter(|s| !without.iter().any(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
            .sum::<f64>()
            // As `Page::sum`: an empty f64 sum is -0.0, which prints "-0".
            + 0.0
    }

    /// Calls Order made to Inventory that the breaker let through (every
    /// outcome but a local refusal).
    pub fn inventory_calls(&self) -> f64 {
        self.sum(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "inventory")],
            &[
                ("outcome", "circuit_open"),
                ("outcome", "overloaded"),
                ("outcome", "throttled"),
            ],
        )
    }

    /// Retries Order made on Inventory (`retried` decisions).
    pub fn inventory_retries(&self) -> f64 {
        self.sum(
            "shopeasy_downstream_retries_total",
            &[("target", "inventory"), ("outcome", "retried")],
            &[],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_replace_the_defaults_by_name() {
        let e = Endpoints::parse(&[
            "http://10.0.0.1:8080/".to_owned(),
            "faults=http://10.0.0.1:8474".to_owned(),
        ])
        .unwrap();
        assert_eq!(e.gateway, "http://10.0.0.1:8080");
        assert_eq!(e.faults, "http://10.0.0.1:8474");
        assert_eq!(e.order_admin, "http://127.0.0.1:9082");
        assert!(Endpoints::parse(&["db=http://x".to_owned()]).is_err());
        assert!(Endpoints::parse(&["ftp://x".to_owned()]).is_err());
    }

    #[test]
    fn counters_sum_over_the_labels_left_open_as_the_console_reads_them() {
        let page = Counters::parse(
            "# TYPE x counter\n\
             shopeasy_downstream_request_duration_seconds_count{target=\"inventory\",outcome=\"ok\"} 3 1700000000000\n\
             shopeasy_downstream_request_duration_seconds_count{target=\"inventory\",outcome=\"circuit_open\"} 4\n\
             shopeasy_downstream_request_duration_seconds_count{target=\"product\",outcome=\"ok\"} 5\n\
             shopeasy_downstream_request_duration_seconds_count{target=\"inventory\",outcome=\"throttled\"} 6\n\
             shopeasy_downstream_request_duration_seconds_count{target=\"inventory\",outcome=\"error\",detail=\"a, b\"} 1\n\
             shopeasy_downstream_retries_total{target=\"inventory\",outcome=\"retried\"} 2\n",
        );
        assert!((page.inventory_calls() - 4.0).abs() < f64::EPSILON);
        assert!((page.inventory_retries() - 2.0).abs() < f64::EPSILON);
    }
}
