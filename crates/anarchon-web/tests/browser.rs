//! The dashboard in headless Chromium, driven through chromedriver (W3C WebDriver): open the
//! jobs page, click through to a job's timeline, see the takeover on the backup's lane, post
//! run-now and see the new attempt. Saves a screenshot of the timeline in the target folder;
//! with `ANARCHON_UPDATE_SCREENSHOT=1` also as `docs/img/dashboard-timeline.png`.
//!
//! Without `chromium` and `chromedriver` on the PATH (Debian: `apt-get install chromium
//! chromium-driver`, or `cargo xtask test-servers --install`) it prints a SKIP line; with
//! `ANARCHON_REQUIRE_SERVERS=1` it fails instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_web::Dashboard;
use common::{Fixture, send, serve};
use serde_json::{Value, json};

/// The W3C name of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// The browser and its driver, or `None` after a SKIP line (a panic when servers are
/// required).
fn chromium() -> Option<(PathBuf, PathBuf)> {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|p| on_path(p));
    let driver = on_path("chromedriver");
    match (browser, driver) {
        (Some(b), Some(d)) => Some((b, d)),
        _ => {
            let msg = "chromium and chromedriver are not both on the PATH: install them \
                       (apt-get install chromium chromium-driver, or cargo xtask test-servers \
                       --install)";
            if std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
                panic!("{msg}; ANARCHON_REQUIRE_SERVERS=1 makes its absence a failure");
            }
            eprintln!("SKIP browser test: {msg}");
            None
        }
    }
}

/// chromedriver on a free port; killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver(program: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Ok(answer)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::spawn(probe(format!("{}/status", driver.url))),
        )
        .await
            && answer
        {
            return driver;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn probe(url: String) -> bool {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Full<anarchon_web::axum::body::Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    match url.parse() {
        Ok(uri) => client.get(uri).await.is_ok_and(|r| r.status().is_success()),
        Err(_) => false,
    }
}

/// One WebDriver session.
struct Session {
    base: String,
}

impl Session {
    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let body = if method == "GET" || method == "DELETE" {
            String::new()
        } else {
            body.to_string()
        };
        let answer = send(method, &url, &[("content-type", "application/json")], &body).await;
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
        answer.json()["value"].clone()
    }

    async fn open(driver: &Driver, browser: &Path, profile: &Path) -> Session {
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser.to_string_lossy(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,820",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let answer = send(
            "POST",
            &format!("{}/session", driver.url),
            &[("content-type", "application/json")],
            &caps.to_string(),
        )
        .await;
        assert_eq!(answer.status, 200, "new session: {}", answer.body);
        let id = answer.json()["value"]["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        Session {
            base: format!("{}/session/{id}", driver.url),
        }
    }

    async fn go(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url })).await;
    }

    async fn url(&self) -> String {
        self.call("GET", "/url", Value::Null)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Every element matching `css`, as WebDriver element ids.
    async fn find_all(&self, css: &str) -> Vec<String> {
        let found = self
            .call(
                "POST",
                "/elements",
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        found
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting up to `ms` for it (reloading meanwhile
    /// when `reload`).
    async fn wait_for(&self, css: &str, ms: u64, reload: bool) -> String {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            if let Some(id) = self.find_all(css).await.into_iter().next() {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` on {} after {ms} ms",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            if reload {
                self.call("POST", "/refresh", json!({})).await;
            }
        }
    }

    async fn click(&self, element: &str) {
        self.call("POST", &format!("/element/{element}/click"), json!({}))
            .await;
    }

    async fn text(&self, element: &str) -> String {
        self.call("GET", &format!("/element/{element}/text"), Value::Null)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
        .await
    }

    async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call("GET", "/screenshot", Value::Null).await;
        base64_decode(b64.as_str().expect("base64 PNG"))
    }

    async fn close(&self) {
        self.call("DELETE", "", Value::Null).await;
    }
}

/// Standard base64 (what WebDriver screenshots are), padding optional.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let digits: Vec<u32> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | d << (18 - 6 * i));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_decodes_what_webdriver_sends() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_takeover_and_runs_a_job_in_headless_chromium() {
    let Some((browser, driver_program)) = chromium() else {
        return;
    };
    let begun = Instant::now();
    let f = Fixture::new().await;
    let base = serve(
        Dashboard::new(f.store.clone())
            .scheduler(f.beta.clone())
            .allow_run_now(true)
            .router(),
    )
    .await;
    let driver = start_driver(&driver_program).await;
    let profile = tempfile::tempdir().expect("profile dir");
    let s = Session::open(&driver, &browser, profile.path()).await;

    // The jobs page, then a click through to report's timeline.
    s.go(&format!("{base}/")).await;
    let link = s
        .wait_for("a.job-link[href='/jobs/report']", 5_000, false)
        .await;
    assert_eq!(s.text(&link).await, "report");
    s.click(&link).await;
    s.wait_for("svg#timeline", 5_000, false).await;
    assert!(s.url().await.ends_with("/jobs/report"), "{}", s.url().await);

    // The crashed attempt on alpha's lane, the takeover on beta's, the arrow between.
    s.wait_for("g.lane[data-instance='alpha']", 1_000, false)
        .await;
    s.wait_for("g.lane[data-instance='beta']", 1_000, false)
        .await;
    s.wait_for(
        "rect.st-lost[data-instance='alpha'][data-attempt='1']",
        1_000,
        false,
    )
    .await;
    let takeover = s
        .wait_for(
            "rect.takeover[data-instance='beta'][data-attempt='2']",
            1_000,
            false,
        )
        .await;
    let box_ = s
        .call("GET", &format!("/element/{takeover}/rect"), Value::Null)
        .await;
    assert!(
        box_["width"].as_f64().unwrap_or(0.0) >= 4.0,
        "the takeover bar is visible: {box_}"
    );
    s.wait_for("line.link.takeover", 1_000, false).await;
    let legend = s.wait_for("#legend", 1_000, false).await;
    assert!(s.text(&legend).await.contains("takeover"));

    // Nothing was fetched from elsewhere: no script, stylesheet, font or image.
    let resources = s
        .script("return performance.getEntriesByType('resource').map(e => e.name)")
        .await;
    assert_eq!(
        resources,
        json!([]),
        "the page loads nothing besides itself"
    );

    let png = s.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let target = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let shot = target.join("dashboard-timeline.png");
    std::fs::write(&shot, &png).expect("write screenshot");
    eprintln!("screenshot of the timeline: {}", shot.display());
    if std::env::var("ANARCHON_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
        std::fs::create_dir_all(&docs).expect("docs/img");
        std::fs::write(docs.join("dashboard-timeline.png"), &png).expect("write docs image");
    }

    // Run-now: the form posts, the page says so, and a manual attempt appears on beta.
    let button = s.wait_for("#run-now", 1_000, false).await;
    s.click(&button).await;
    s.wait_for("#run-now-started", 5_000, false).await;
    assert!(
        s.url().await.ends_with("/jobs/report?started=1"),
        "{}",
        s.url().await
    );
    s.wait_for("rect.manual[data-instance='beta']", 10_000, true)
        .await;
    let rows = s.find_all("#attempts tbody tr").await;
    assert_eq!(rows.len(), 3, "lost, takeover and the manual run");

    // The handover: gamma's graceful stop released `migrate`, beta continued it.
    s.go(&format!("{base}/jobs/migrate")).await;
    s.wait_for("rect.st-handed-over[data-instance='gamma']", 5_000, false)
        .await;
    s.wait_for(
        "rect.handover[data-instance='beta'][data-attempt='2']",
        1_000,
        false,
    )
    .await;
    s.wait_for("line.link.handover", 1_000, false).await;

    // The unfinished runs page through the navigation.
    let nav = s.wait_for("#nav-runs", 1_000, false).await;
    s.click(&nav).await;
    let table = s.wait_for("table#runs", 5_000, false).await;
    let text = s.text(&table).await;
    assert!(text.contains("blocker") && text.contains("beta"), "{text}");

    s.close().await;
    drop(driver);
    eprintln!("browser test took {:?}", begun.elapsed());
}
