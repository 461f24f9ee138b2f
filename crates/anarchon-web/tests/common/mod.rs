//! Real history for the dashboard's tests: two schedulers on one SQLite file, a takeover
//! after the owner crashed, an unfinished run, a failed run with markup in its error; and a
//! plain HTTP client.
// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::LeaseStore;
use anarchon_core::{HandlerError, JobName, Reason, RunStatus, Scheduler};
use anarchon_sqlite::SqliteStore;
use anarchon_web::axum::{self, Router, body::Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The error of the failing job: markup that must be shown, never executed.
pub(crate) const EVIL_ERROR: &str = "<script>alert('x')</script> upstream said <b>no</b>";

/// Three instances on one SQLite file and the history they left.
pub(crate) struct Fixture {
    /// The database file's folder; removed on drop.
    pub(crate) dir: tempfile::TempDir,
    /// The dashboard's own connection to the file.
    pub(crate) store: Arc<dyn LeaseStore>,
    /// `alpha`: claimed `report`'s slot, then crashed.
    pub(crate) alpha: Scheduler,
    /// `beta`: took `report` over, was handed `migrate`, runs `blocker` (unfinished) and
    /// `flaky` (failed).
    pub(crate) beta: Scheduler,
}

/// A handler that works until its signal is cancelled, then gives up (so a graceful stop
/// hands its run over).
async fn until_cancelled(ctx: anarchon_core::JobContext) -> Result<(), HandlerError> {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(120)) => Ok(()),
        _ = ctx.signal.cancelled() => Err(HandlerError::msg("stopping")),
    }
}

fn node(store: SqliteStore, id: &str) -> Scheduler {
    Scheduler::leased(store)
        .instance_id(id)
        .lease(Duration::from_millis(1_000))
        .heartbeat(Duration::from_millis(200))
        .jitter(Duration::ZERO)
        .store_timeout(Duration::from_secs(2))
        .build()
        .expect("scheduler")
}

async fn wait_until<F, Fut>(what: &str, ms: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {ms} ms waiting for {what}");
}

/// The newest attempts of `job`.
pub(crate) async fn history(
    store: &Arc<dyn LeaseStore>,
    job: &str,
) -> Vec<anarchon_core::store::RunRecord> {
    store
        .history(&JobName::new(job).unwrap(), 20)
        .await
        .expect("history")
}

impl Fixture {
    /// Builds the history: about three seconds.
    pub(crate) async fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("dashboard.db");
        let open = || SqliteStore::connect(&path);
        let store: Arc<dyn LeaseStore> = Arc::new(open().await.expect("sqlite"));

        // alpha claims the current slot of `report` (catch-up on start) and hangs in it.
        let alpha = node(open().await.unwrap(), "alpha");
        alpha
            .every("report", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(|_ctx| async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                Ok(())
            })
            .unwrap();
        alpha.start().await.unwrap();
        wait_until("alpha to start report", 5_000, || async {
            history(&store, "report")
                .await
                .iter()
                .any(|r| r.instance_id == "alpha" && r.status == RunStatus::Running)
        })
        .await;

        // gamma claims `migrate` and will stop gracefully: a handover.
        let gamma = node(open().await.unwrap(), "gamma");
        gamma
            .every("migrate", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(until_cancelled)
            .unwrap();
        gamma.start().await.unwrap();
        wait_until("gamma to start migrate", 5_000, || async {
            history(&store, "migrate")
                .await
                .iter()
                .any(|r| r.instance_id == "gamma" && r.status == RunStatus::Running)
        })
        .await;

        let beta = node(open().await.unwrap(), "beta");
        beta.every("migrate", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(|_ctx| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(())
            })
            .unwrap();
        beta.every("report", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(|_ctx| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(())
            })
            .unwrap();
        beta.every("blocker", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(|ctx| async move {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(120)) => {}
                    _ = ctx.signal.cancelled() => {}
                }
                Ok(())
            })
            .unwrap();
        beta.every("flaky", "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(|_ctx| async { Err(HandlerError::msg(EVIL_ERROR)) })
            .unwrap();
        beta.start().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        // alpha dies without a word: its lease expires and beta takes the run over.
        alpha.crash();
        gamma.stop(Duration::from_secs(5)).await.unwrap();
        wait_until("beta to be handed migrate and finish it", 8_000, || async {
            history(&store, "migrate").await.iter().any(|r| {
                r.instance_id == "beta" && r.attempt == 2 && r.status == RunStatus::Succeeded
            })
        })
        .await;
        wait_until("beta to take report over and finish it", 8_000, || async {
            history(&store, "report").await.iter().any(|r| {
                r.instance_id == "beta"
                    && r.attempt == 2
                    && r.reason == Reason::Takeover
                    && r.status == RunStatus::Succeeded
            })
        })
        .await;
        wait_until("blocker to run and flaky to fail", 5_000, || async {
            history(&store, "blocker")
                .await
                .first()
                .is_some_and(|r| r.status == RunStatus::Running)
                && history(&store, "flaky")
                    .await
                    .first()
                    .is_some_and(|r| r.status == RunStatus::Failed)
        })
        .await;
        Fixture {
            dir,
            store,
            alpha,
            beta,
        }
    }
}

/// Serves `router` on 127.0.0.1 with a free port; the base URL (`http://127.0.0.1:PORT`).
pub(crate) async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.expect("serve");
    });
    format!("http://{addr}")
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request with a plain HTTP/1 client (hyper-util).
pub(crate) async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = axum::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(20), client.request(request))
        .await
        .unwrap_or_else(|_| panic!("{method} {url} timed out"))
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// `GET url`.
pub(crate) async fn get(url: &str) -> Answer {
    send("GET", url, &[], "").await
}
