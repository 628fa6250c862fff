//! A headless Chromium driven through WebDriver (Debian's `chromium` and `chromium-driver`, which
//! tests/run.sh installs): open pages, run scripts in them, type, click, take screenshots.
//!
//! WebDriver is JSON over HTTP, spoken here with the reqwest the crate already has, so the
//! tests need no client crate of their own.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use base64::Engine as _;
use serde_json::{Value, json};

use super::fixtures::wait_until;

/// Where Debian puts the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's ChromeDriver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One browser session of a ChromeDriver of its own, ended when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    _profile: tempfile::TempDir,
}

#[allow(dead_code)] // used by some test crates only
impl Browser {
    /// Starts ChromeDriver on a free port and a headless Chromium session in it.
    pub async fn start() -> Self {
        assert!(
            Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists(),
            "the browser tests need Debian's chromium and chromium-driver: `apt-get install -y chromium chromium-driver` (tests/run.sh does)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        wait_until("chromedriver to answer", Duration::from_secs(20), || {
            let (http, url) = (http.clone(), format!("{base}/status"));
            async move {
                let body = http.get(url).send().await.ok()?.bytes().await.ok()?;
                let status: Value = serde_json::from_slice(&body).ok()?;
                (status["value"]["ready"] == true).then_some(())
            }
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,1000", format!("--user-data-dir={}", profile.path().display())],
            },
        }}});
        let mut browser = Self {
            driver,
            http,
            session: base,
            _profile: profile,
        };
        let answer = browser.call("POST", "/session", Some(capabilities)).await;
        let id = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"));
        browser.session = format!("{}/session/{id}", browser.session);
        browser
    }

    /// Sends one WebDriver command; returns its `value`, panicking on a WebDriver error.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}"))
    }

    /// Sends one WebDriver command; returns its `value`, or the WebDriver error's.
    async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Value> {
        let url = format!("{}{path}", self.session);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body.unwrap_or(json!({}))).unwrap()),
        };
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let bytes = response.bytes().await.unwrap();
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if answer["value"]["error"].is_string() {
            return Err(answer["value"].clone());
        }
        Ok(answer.get("value").cloned().map_or(answer, |value| {
            if value.is_null() { Value::Null } else { value }
        }))
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// Runs `script` (a function body; `return` gives its answer) in the page.
    pub async fn run(&self, script: &str) -> Value {
        let body = json!({ "script": script, "args": [] });
        self.call("POST", "/execute/sync", Some(body)).await
    }

    /// Runs `script` in the page; it answers by calling `arguments[0]`.
    pub async fn run_async(&self, script: &str) -> Value {
        let body = json!({ "script": script, "args": [] });
        self.call("POST", "/execute/async", Some(body)).await
    }

    /// The page's text as shown.
    pub async fn text(&self) -> String {
        let text = self.run("return document.body.innerText;").await;
        text.as_str().unwrap_or_default().to_owned()
    }

    /// The element `css` selects, as WebDriver names it.
    async fn find(&self, css: &str) -> String {
        let body = json!({ "using": "css selector", "value": css });
        let found = self.call("POST", "/element", Some(body)).await;
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        let path = format!("/element/{element}/value");
        self.call("POST", &path, Some(json!({ "text": text })))
            .await;
    }

    /// Clicks the element `css` selects. A live page may replace the element between finding
    /// and clicking it (WebDriver's "stale element reference"): it is found again, a few times.
    pub async fn click(&self, css: &str) {
        for _ in 0..10 {
            let element = self.find(css).await;
            match self
                .try_call("POST", &format!("/element/{element}/click"), None)
                .await
            {
                Ok(_) => return,
                Err(e) if e["error"] == "stale element reference" => continue,
                Err(e) => panic!("WebDriver click on {css}: {e}"),
            }
        }
        panic!("the element {css} was replaced under every click of 10");
    }

    /// Presses keys (WebDriver key codes allowed, e.g. `\u{E004}` for Tab) in the focused element.
    pub async fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                let c = c.to_string();
                [
                    json!({"type": "keyDown", "value": c}),
                    json!({"type": "keyUp", "value": c}),
                ]
            })
            .collect();
        let body = json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]});
        self.call("POST", "/actions", Some(body)).await;
    }

    /// What axe-core (fetched by `kind/axe.sh`) finds against WCAG 2 A and AA in the page as it
    /// stands: one line per rule broken, with the rule, its help and the elements that break it.
    pub async fn accessibility_violations(&self) -> Vec<String> {
        let axe = axe_source();
        // Loaded by the driver, not by the page: the page's CSP allows no script but its own.
        self.run(&format!("{axe}\nreturn typeof axe;")).await;
        let found = self
            .run_async(
                "const done = arguments[0];
                 axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}})
                   .then(r => done(r.violations.map(v => v.id + ': ' + v.help + ' (' +
                       v.nodes.map(n => n.target.join(' ')).slice(0, 5).join(', ') + ')')))
                   .catch(e => done(['axe failed: ' + e]));",
            )
            .await;
        serde_json::from_value(found.clone())
            .unwrap_or_else(|e| panic!("axe answered {found}: {e}"))
    }

    /// Saves a screenshot of the page as `path` (PNG), making its folder.
    pub async fn screenshot(&self, path: &Path) -> PathBuf {
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        path.to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the driver's session closes its browser; the driver goes after.
        let url = self.session.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = reqwest::Client::new()
                    .delete(url)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
            });
        })
        .join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The source of axe-core's `axe.min.js`, fetched (once, cached) by `kind/axe.sh`.
fn axe_source() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kind/axe.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{} cannot run: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed: is npm there and the npm registry reachable?",
        script.display()
    );
    let path = String::from_utf8(out.stdout).unwrap();
    std::fs::read_to_string(path.trim())
        .unwrap_or_else(|e| panic!("axe-core at {} cannot be read: {e}", path.trim()))
}
