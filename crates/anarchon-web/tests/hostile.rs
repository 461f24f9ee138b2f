//! Every route probed with bad input over real HTTP: garbage, huge, negative, repeated and
//! missing query parameters, undecodable paths, and run-now sent under another host name
//! (DNS rebinding). The API answers the documented `{"error": "..."}` with 400 or 403, the
//! pages an error page; nothing answers 500 or axum's plain-text rejections.

mod common;

use std::sync::Arc;

use anarchon_core::memory::MemoryStore;
use anarchon_core::{HandlerError, Scheduler};
use anarchon_web::Dashboard;
use common::{get, send, serve};

/// A dashboard with run-now on, over a memory store with one job, `sync`.
async fn dashboard(allowed: Option<&[&str]>) -> (String, Scheduler) {
    let store = Arc::new(MemoryStore::new());
    let scheduler = Scheduler::leased_shared(store.clone()).build().unwrap();
    scheduler
        .every("sync", "1h")
        .handler(|_| async { Ok::<(), HandlerError>(()) })
        .unwrap();
    scheduler.start().await.unwrap();
    let mut d = Dashboard::new(store)
        .scheduler(scheduler.clone())
        .allow_run_now(true);
    if let Some(hosts) = allowed {
        d = d.allowed_hosts(hosts.iter().copied());
    }
    (serve(d.router()).await, scheduler)
}

/// Asserts the documented JSON error with `status`, whose text contains `needle`.
fn api_error(answer: &common::Answer, status: u16, needle: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    let json = answer.json();
    let text = json["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {json}"));
    assert!(text.contains(needle), "{needle:?} not in {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_api_refuses_bad_n_with_its_json_error() {
    let (base, _s) = dashboard(None).await;
    let ok = get(&format!("{base}/api/jobs/sync/history?n=5")).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let default = get(&format!("{base}/api/jobs/sync/history")).await;
    assert_eq!(default.status, 200, "a missing n means 50");
    let huge = "9".repeat(400);
    for n in [
        "abc",
        "-1",
        "0",
        "10001",
        "1.5",
        "",
        "%FF",
        huge.as_str(),
        "18446744073709551616",
    ] {
        let answer = get(&format!("{base}/api/jobs/sync/history?n={n}")).await;
        api_error(&answer, 400, "`n`");
        assert!(
            answer.body.len() < 1_000,
            "the value is shortened: {}",
            answer.body.len()
        );
    }
    let twice = get(&format!("{base}/api/jobs/sync/history?n=1&n=2")).await;
    api_error(&twice, 400, "twice");
    // Unknown parameters are ignored.
    let extra = get(&format!("{base}/api/jobs/sync/history?n=2&cachebust=1")).await;
    assert_eq!(extra.status, 200, "{}", extra.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_answer_the_documented_errors() {
    let (base, _s) = dashboard(None).await;
    let long = "x".repeat(5_000);
    for job in ["bad%20name", "%FF%FE", long.as_str(), "a.b", "%00"] {
        let api = get(&format!("{base}/api/jobs/{job}/history")).await;
        assert_eq!(api.status, 400, "{job}: {}", api.body);
        assert!(api.json()["error"].is_string());
        assert!(
            api.body.len() < 1_000,
            "the input is shortened: {}",
            api.body.len()
        );
        let page = get(&format!("{base}/jobs/{job}")).await;
        assert_eq!(page.status, 400, "{job}");
        assert!(
            page.body.contains("<html") || page.body.contains("<!DOCTYPE"),
            "{}",
            page.body
        );
    }
    let unknown = get(&format!("{base}/api/jobs/nope/history")).await;
    assert_eq!(unknown.status, 200, "an unknown job has an empty history");
    let page = get(&format!("{base}/jobs/sync?started=1&started=2")).await;
    assert_eq!(page.status, 400, "{}", page.body);
    let page = get(&format!("{base}/jobs/sync?started=%FF")).await;
    assert!(page.status == 200 || page.status == 400, "{}", page.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_refuses_a_bad_wait_before_starting_anything() {
    let (base, s) = dashboard(None).await;
    for wait in ["maybe", "1", "TRUE", "", "%FF"] {
        let answer = send(
            "POST",
            &format!("{base}/api/jobs/sync/run?wait={wait}"),
            &[],
            "",
        )
        .await;
        api_error(&answer, 400, "`wait`");
    }
    let history = s.history("sync", 10).await.unwrap();
    // The schedule may catch up a slot on start; no run may be manual.
    assert!(
        !history.iter().any(|r| r.manual),
        "a refused request started a run: {history:?}"
    );
    let ok = send(
        "POST",
        &format!("{base}/api/jobs/sync/run?wait=true"),
        &[],
        "",
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_is_refused_for_a_host_the_dashboard_does_not_answer_for() {
    let (base, s) = dashboard(None).await;
    // A rebinding page: its own name as Host, and as Origin (so the origin check passes).
    let rebinding = [
        ("host", "evil.example:8080"),
        ("origin", "http://evil.example:8080"),
    ];
    let api = send(
        "POST",
        &format!("{base}/api/jobs/sync/run?wait=true"),
        &rebinding,
        "",
    )
    .await;
    api_error(&api, 403, "allowed_hosts");
    let form = send("POST", &format!("{base}/jobs/sync/run"), &rebinding, "").await;
    assert_eq!(form.status, 403, "{}", form.body);
    let history = s.history("sync", 10).await.unwrap();
    assert!(
        !history.iter().any(|r| r.manual),
        "a refused run ran: {history:?}"
    );

    // With the name allowed, the same request runs.
    let (named, _s2) = dashboard(Some(&["evil.example"])).await;
    let api = send(
        "POST",
        &format!("{named}/api/jobs/sync/run?wait=true"),
        &rebinding,
        "",
    )
    .await;
    assert_eq!(api.status, 200, "{}", api.body);
    // And the list replaces the default: the IP address is no longer enough.
    let api = send("POST", &format!("{named}/api/jobs/sync/run"), &[], "").await;
    api_error(&api, 403, "127.0.0.1");
}

/// `store_timeout` outside 50 ms ..= 1 h is refused when it is set, naming the option, the
/// value and the range (a zero one made every request answer 504); the bounds themselves
/// are taken, and a dashboard with one serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_timeout_out_of_range_is_a_typed_error_naming_it() {
    use std::time::Duration;
    let store = Arc::new(MemoryStore::new());
    for bad in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_millis(49),
        Duration::from_secs(3600) + Duration::from_nanos(1),
        Duration::from_secs(365 * 24 * 3600),
        Duration::MAX,
    ] {
        let err = Dashboard::new(store.clone())
            .store_timeout(bad)
            .expect_err("out of range");
        match &err {
            anarchon_web::Error::OutOfRange { option, value, .. } => {
                assert_eq!(*option, "store_timeout");
                assert_eq!(value, &format!("{bad:?}"));
            }
            other => panic!("{bad:?}: {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("store_timeout") && text.contains("50ms") && text.contains("3600s"),
            "{text}"
        );
    }
    for good in [
        Dashboard::MIN_STORE_TIMEOUT,
        Duration::from_secs(5),
        Dashboard::MAX_STORE_TIMEOUT,
    ] {
        Dashboard::new(store.clone())
            .store_timeout(good)
            .unwrap_or_else(|e| panic!("{good:?}: {e}"));
    }
    let base = serve(
        Dashboard::new(store)
            .store_timeout(Dashboard::MIN_STORE_TIMEOUT)
            .unwrap()
            .router(),
    )
    .await;
    let jobs = get(&format!("{base}/api/jobs")).await;
    assert_eq!(jobs.status, 200, "{}", jobs.body);
}
