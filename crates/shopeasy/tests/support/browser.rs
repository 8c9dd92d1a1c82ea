//! A real headless Chromium for browser tests, driven over WebDriver.
//!
//! [`Browser::start`] finds `chromedriver` and `chromium`, starts the
//! driver on an ephemeral port, waits until it answers and opens a session
//! with a fresh profile. Without a browser it prints `SKIPPED …` and
//! returns `None` — unless `SHOPEASY_REQUIRE_SERVICES=1`, when it panics,
//! as the database tests do (the testkit's [`skip`] convention).
//!
//! Include it from a test with
//! `#[path = "support/browser.rs"] mod browser;` and:
//!
//! ```ignore
//! let Some(browser) = browser::Browser::start().await else { return };
//! browser.goto(&format!("http://{}/", system.addresses.gateway)).await.unwrap();
//! browser.wait_for_text("#status", "confirmed", Duration::from_secs(5)).await;
//! browser.screenshot("confirmed").await;
//! browser.close().await;
//! ```
//!
//! Waits poll the page with a deadline (the testkit's [`poll`]); nothing
//! sleeps a fixed time. Screenshots go to `browser-screenshots/` under
//! `CARGO_TARGET_DIR` (the workspace's `target/` when unset), or to
//! `SHOPEASY_SCREENSHOTS` when set.

#![allow(dead_code, unreachable_pub)]

use std::{
    ops::Deref,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use shopeasy_testkit::{find_program, skip, wait::poll};

/// Variable naming the screenshot folder (overrides the default).
pub const SCREENSHOTS_VAR: &str = "SHOPEASY_SCREENSHOTS";

/// The window size every test sees (the storefront's desktop layout).
pub const WINDOW: (u32, u32) = (1280, 800);

/// How long the driver may take to answer its first `/status`.
const DRIVER_START: Duration = Duration::from_secs(15);

/// A WebDriver session on a headless Chromium of the test's own.
///
/// Derefs to the [`fantoccini::Client`] for anything the helpers do not
/// cover. Dropping it kills chromedriver and the browser it started;
/// [`Browser::close`] also ends the session politely first.
#[derive(Debug)]
pub struct Browser {
    client: Client,
    driver: Child,
    screenshots: PathBuf,
    _profile: tempfile::TempDir,
}

/// How long a page took to load, from the Navigation Timing entry
/// (`performance.getEntriesByType('navigation')[0]`), in milliseconds
/// from navigation start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageLoad {
    /// `domContentLoadedEventEnd`: the document parsed and its deferred
    /// scripts (ES modules) run.
    pub dom_content_loaded_ms: f64,
    /// `loadEventEnd`: every sub-resource loaded.
    pub load_ms: f64,
}

impl Browser {
    /// A fresh headless Chromium at 1280×800, or `None` (after printing
    /// `SKIPPED …`) when `chromedriver` or `chromium` is not installed.
    ///
    /// # Panics
    /// When the browser is missing and `SHOPEASY_REQUIRE_SERVICES=1`, or
    /// when it is installed but does not start.
    pub async fn start() -> Option<Self> {
        let Some(driver_bin) = find_program(&["chromedriver"], "CHROMEDRIVER") else {
            skip(
                "a browser",
                "no browser: chromedriver not found (PATH or CHROMEDRIVER)",
            );
            return None;
        };
        let Some(chromium_bin) = find_program(
            &["chromium", "chromium-browser", "google-chrome"],
            "CHROMIUM",
        ) else {
            skip(
                "a browser",
                "no browser: chromium not found (PATH or CHROMIUM)",
            );
            return None;
        };
        let profile = tempfile::tempdir().expect("a profile folder");
        let port = free_port();
        let log = profile.path().join("chromedriver.log");
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so drop can kill the browsers it starts.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver_bin.display()));
        let webdriver = format!("http://127.0.0.1:{port}");
        let mut browser_guard = DriverGuard(Some(driver));
        wait_until_ready(&webdriver, &log).await;

        let user_data = profile.path().join("user-data");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium_bin,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                    format!("--user-data-dir={}", user_data.display()),
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&webdriver)
            .await
            .unwrap_or_else(|e| panic!("a WebDriver session: {e}; {}", log_tail(&log)));
        let driver = browser_guard.0.take().expect("the driver process");
        Some(Self {
            client,
            driver,
            screenshots: screenshot_dir(),
            _profile: profile,
        })
    }

    /// The WebDriver client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The folder screenshots are written to.
    pub fn screenshot_dir(&self) -> &Path {
        &self.screenshots
    }

    /// Opens `url` (waits for the page's load event, as WebDriver does).
    ///
    /// # Panics
    /// When the browser cannot navigate.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// The first element matching `css`, once there is one.
    ///
    /// # Panics
    /// When none appears within `within` (a screenshot
    /// `timeout-<test>.png` and the page's text are left for the reader).
    pub async fn wait_for(&self, css: &str, within: Duration) -> Element {
        let mut found = None;
        let waited = poll(within, async || {
            found = self.client.find(Locator::Css(css)).await.ok();
            found.is_some()
        })
        .await;
        match (waited, found) {
            (Ok(_), Some(element)) => element,
            (waited, _) => {
                self.fail(&format!("no `{css}` within {within:?} ({waited:?})"))
                    .await
            }
        }
    }

    /// The text of the first element matching `css`, once it contains
    /// `needle`.
    ///
    /// # Panics
    /// When it does not within `within` (screenshot and page text as for
    /// [`Browser::wait_for`]).
    pub async fn wait_for_text(&self, css: &str, needle: &str, within: Duration) -> String {
        let mut last = None;
        let waited = poll(within, async || {
            last = self.text(css).await;
            last.as_deref().is_some_and(|t| t.contains(needle))
        })
        .await;
        match waited {
            Ok(_) => last.unwrap_or_default(),
            Err(e) => {
                self.fail(&format!(
                    "`{css}` did not contain {needle:?} within {within:?} ({e}); last: {last:?}"
                ))
                .await
            }
        }
    }

    /// Waits until the script `js` (a function body returning a value)
    /// returns something truthy; that value.
    ///
    /// # Panics
    /// When it does not within `within`.
    pub async fn wait_for_js(&self, js: &str, within: Duration) -> Value {
        let mut last = Value::Null;
        let waited = poll(within, async || {
            last = self.client.execute(js, vec![]).await.unwrap_or(Value::Null);
            truthy(&last)
        })
        .await;
        match waited {
            Ok(_) => last,
            Err(e) => {
                self.fail(&format!(
                    "`{js}` stayed falsy within {within:?} ({e}); last: {last}"
                ))
                .await
            }
        }
    }

    /// The visible text of the first element matching `css`, if any.
    pub async fn text(&self, css: &str) -> Option<String> {
        let element = self.client.find(Locator::Css(css)).await.ok()?;
        element.text().await.ok()
    }

    /// Clicks the first element matching `css`, waiting for it first.
    ///
    /// # Panics
    /// When it does not appear within `within` or cannot be clicked.
    pub async fn click(&self, css: &str, within: Duration) {
        let element = self.wait_for(css, within).await;
        element
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking `{css}`: {e}"));
    }

    /// Types `text` into the input matching `css` (after clearing it).
    ///
    /// # Panics
    /// When it does not appear within `within` or refuses input.
    pub async fn fill(&self, css: &str, text: &str, within: Duration) {
        let element = self.wait_for(css, within).await;
        element
            .clear()
            .await
            .unwrap_or_else(|e| panic!("clearing `{css}`: {e}"));
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("typing into `{css}`: {e}"));
    }

    /// Enters `token` in the console's admin-token form until the page says
    /// it keeps one. Typing and submitting are repeated: on a loaded machine
    /// the page has once kept no token after a single try (CI, 2026-12-03),
    /// and entering it again is harmless.
    ///
    /// # Panics
    /// When the page keeps no token within `within`.
    pub async fn use_admin_token(&self, token: &str, within: Duration) {
        let mut last = None;
        let waited = poll(within, async || {
            self.fill("#token", token, within).await;
            self.click("#token-save", within).await;
            last = self.text("#token-state").await;
            last.as_deref().is_some_and(|t| t.contains("token set"))
        })
        .await;
        if let Err(e) = waited {
            self.fail(&format!(
                "the console kept no admin token within {within:?} ({e}); last: {last:?}"
            ))
            .await;
        }
    }

    /// Runs `js` (a function body) in the page and returns its value.
    ///
    /// # Panics
    /// When the script throws.
    pub async fn js(&self, js: &str) -> Value {
        self.client
            .execute(js, vec![])
            .await
            .unwrap_or_else(|e| panic!("running `{js}`: {e}"))
    }

    /// The current page's load times (Navigation Timing).
    ///
    /// # Panics
    /// When the page has no navigation entry or has not loaded yet.
    pub async fn page_load(&self) -> PageLoad {
        let value = self
            .wait_for_js(
                "const n = performance.getEntriesByType('navigation')[0];\
                 return n && n.loadEventEnd > 0 ? \
                 [n.domContentLoadedEventEnd - n.startTime, n.loadEventEnd - n.startTime] : null;",
                Duration::from_secs(10),
            )
            .await;
        let ms = |i: usize| value[i].as_f64().expect("a time in ms");
        PageLoad {
            dom_content_loaded_ms: ms(0),
            load_ms: ms(1),
        }
    }

    /// Writes a PNG of the viewport to `<screenshot dir>/<name>.png`
    /// (`name` may end in `.png` already), prints and returns the path.
    ///
    /// # Panics
    /// When the browser cannot take it or the file cannot be written.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("a screenshot: {e}"));
        std::fs::create_dir_all(&self.screenshots).expect("the screenshot folder");
        let file = if name.ends_with(".png") {
            name.to_owned()
        } else {
            format!("{name}.png")
        };
        let path = self.screenshots.join(file);
        std::fs::write(&path, png).expect("writing the screenshot");
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "screenshot: {}", path.display());
        path
    }

    /// Ends the WebDriver session, then stops the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop kills the driver's process group.
    }

    /// Leaves a screenshot and the page's text, then panics with `why`.
    async fn fail(&self, why: &str) -> ! {
        let test = std::thread::current()
            .name()
            .unwrap_or("test")
            .replace("::", "-");
        let shot = format!("timeout-{test}");
        let _ = tokio::time::timeout(Duration::from_secs(5), self.screenshot(&shot)).await;
        let body = tokio::time::timeout(Duration::from_secs(5), self.text("body"))
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let excerpt: String = body.chars().take(2000).collect();
        panic!("{why}\n--- page text ---\n{excerpt}");
    }
}

impl Deref for Browser {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}

/// Kills the driver's process group if [`Browser::start`] panics halfway.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            kill_group(child);
        }
    }
}

/// SIGKILL to the child's process group (chromedriver and the Chromium
/// processes it started), then reaps the child.
fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg("--")
        .arg(format!("-{}", child.id()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

/// A port nobody listens on right now (the driver binds it just after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
}

/// Polls the driver's `/status` until it says it is ready.
async fn wait_until_ready(webdriver: &str, log: &Path) {
    let http = reqwest::Client::new();
    let status = format!("{webdriver}/status");
    let ready = poll(DRIVER_START, async || {
        let Ok(res) = http.get(&status).send().await else {
            return false;
        };
        let body: Value = res.json().await.unwrap_or_default();
        body["value"]["ready"] == true
    })
    .await;
    if let Err(e) = ready {
        panic!(
            "chromedriver at {webdriver} not ready: {e}; {}",
            log_tail(log)
        );
    }
}

/// The end of the driver's log, for a failure message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    format!("chromedriver log tail:\n{tail}")
}

/// Where screenshots go: `SHOPEASY_SCREENSHOTS`, else
/// `$CARGO_TARGET_DIR/browser-screenshots`, else the workspace's
/// `target/browser-screenshots`.
fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(SCREENSHOTS_VAR) {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("browser-screenshots")
}

/// JavaScript truthiness of a JSON value returned by a script.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}
