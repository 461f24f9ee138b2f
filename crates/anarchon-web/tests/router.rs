//! The dashboard served on a real port, asked with real HTTP requests, over a real SQLite
//! history: a takeover after a crash, an unfinished run, a failed run with markup in its
//! error.

mod common;

use std::time::Duration;

use anarchon_web::Dashboard;
use anarchon_web::axum::Router;
use common::{EVIL_ERROR, Fixture, get, send, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_show_jobs_the_takeover_lanes_and_the_unfinished_run() {
    let f = Fixture::new().await;
    let base = serve(
        Dashboard::new(f.store.clone())
            .scheduler(f.beta.clone())
            .router(),
    )
    .await;

    let jobs = get(&format!("{base}/")).await;
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    assert_eq!(
        jobs.headers["content-type"], "text/html; charset=utf-8",
        "pages are HTML"
    );
    for job in ["report", "blocker", "flaky", "migrate"] {
        assert!(
            jobs.body.contains(&format!("href=\"/jobs/{job}\"")),
            "{job} missing: {}",
            jobs.body
        );
    }
    // report: one run (taken over once) that succeeded; flaky: one run that failed.
    assert!(
        jobs.body
            .contains("100% <span class=\"muted\">(1/1)</span>"),
        "{}",
        jobs.body
    );
    assert!(
        jobs.body.contains("0% <span class=\"muted\">(0/1)</span>"),
        "{}",
        jobs.body
    );
    assert!(jobs.body.contains("Scheduler healthy"), "{}", jobs.body);
    assert!(!jobs.body.contains("<script"), "no script on any page");

    let report = get(&format!("{base}/jobs/report")).await;
    assert_eq!(report.status, 200, "{}", report.body);
    let body = &report.body;
    assert!(
        body.contains("<g class=\"lane\" data-instance=\"alpha\">"),
        "{body}"
    );
    assert!(
        body.contains("<g class=\"lane\" data-instance=\"beta\">"),
        "{body}"
    );
    assert!(
        body.contains("class=\"attempt st-lost\" data-attempt=\"1\" data-instance=\"alpha\""),
        "the crashed attempt is drawn as lost: {body}"
    );
    assert!(
        body.contains(
            "class=\"attempt st-succeeded takeover\" data-attempt=\"2\" data-instance=\"beta\""
        ),
        "the takeover is drawn on beta's lane: {body}"
    );
    assert!(body.contains("class=\"link takeover\""), "{body}");
    assert!(body.contains("lease expired"), "{body}");
    assert!(!body.contains("id=\"run-now\""), "read-only by default");

    let migrate = get(&format!("{base}/jobs/migrate")).await;
    assert_eq!(migrate.status, 200);
    let body = &migrate.body;
    assert!(
        body.contains(
            "class=\"attempt st-handed-over\" data-attempt=\"1\" data-instance=\"gamma\""
        ),
        "gamma's stop handed the run over: {body}"
    );
    assert!(
        body.contains(
            "class=\"attempt st-succeeded handover\" data-attempt=\"2\" data-instance=\"beta\""
        ),
        "{body}"
    );
    assert!(body.contains("class=\"link handover\""), "{body}");

    let flaky = get(&format!("{base}/jobs/flaky")).await;
    assert_eq!(flaky.status, 200);
    assert!(
        !flaky.body.contains(EVIL_ERROR) && !flaky.body.contains("<script>"),
        "the error is escaped: {}",
        flaky.body
    );
    assert!(
        flaky.body.contains(
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; upstream said &lt;b&gt;no&lt;/b&gt;"
        ),
        "{}",
        flaky.body
    );

    let runs = get(&format!("{base}/runs")).await;
    assert_eq!(runs.status, 200);
    assert!(
        runs.body.contains("href=\"/jobs/blocker\""),
        "{}",
        runs.body
    );
    assert!(
        runs.body.contains("<td>beta</td>"),
        "owner shown: {}",
        runs.body
    );
    assert!(
        !runs.body.contains("href=\"/jobs/flaky\""),
        "finished runs are not listed"
    );

    let missing = get(&format!("{base}/jobs/nope")).await;
    assert_eq!(missing.status, 404);
    assert!(
        missing.body.contains("no job named `nope`"),
        "{}",
        missing.body
    );
    let bad = get(&format!("{base}/jobs/has%20space")).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("is not a job name"), "{}", bad.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_and_the_health_checks_answer() {
    let f = Fixture::new().await;
    let base = serve(
        Dashboard::new(f.store.clone())
            .scheduler(f.beta.clone())
            .router(),
    )
    .await;

    let jobs = get(&format!("{base}/api/jobs")).await;
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    let jobs = jobs.json();
    let report = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "report")
        .expect("report listed");
    assert_eq!(report["kind"], "every");
    assert_eq!(report["takeovers"], 1);
    assert_eq!(report["success_rate"], 1.0);
    assert_eq!(report["last_status"], "succeeded");
    assert!(report["next_run"].is_string(), "{report}");

    let history = get(&format!("{base}/api/jobs/report/history?n=5"))
        .await
        .json();
    let attempts: Vec<(u64, &str, &str, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["attempt"].as_u64().unwrap(),
                r["instance_id"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            (2, "beta", "takeover", "succeeded"),
            (1, "alpha", "catch-up", "interrupted")
        ],
        "{history}"
    );

    let runs = get(&format!("{base}/api/runs")).await.json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["job"], "blocker");
    assert_eq!(runs[0]["owner"], "beta");
    assert_eq!(runs[0]["attempt"], 1);
    let left = runs[0]["lease_left_ms"].as_i64().unwrap();
    // A 1 s lease renewed every 200 ms; a loaded machine may renew a little late.
    assert!(
        (-1_000..=1_000).contains(&left),
        "beta renews its lease: {left} ms left"
    );

    let healthz = get(&format!("{base}/healthz")).await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok\n"));
    let ready = get(&format!("{base}/readyz")).await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["store"]["kind"], "sqlite");
    assert_eq!(ready["scheduler"]["running"], true);

    // alpha crashed: a dashboard backed by it is alive but not ready.
    let crashed = serve(
        Dashboard::new(f.store.clone())
            .scheduler(f.alpha.clone())
            .router(),
    )
    .await;
    assert_eq!(get(&format!("{crashed}/healthz")).await.status, 200);
    let not_ready = get(&format!("{crashed}/readyz")).await;
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert_eq!(not_ready.json()["scheduler"]["running"], false);

    // Without a scheduler, readiness is the store's answer alone.
    let bare = serve(anarchon_web::router(f.store.clone())).await;
    assert_eq!(get(&format!("{bare}/readyz")).await.status, 200);
    let bare_jobs = get(&format!("{bare}/api/jobs")).await.json();
    assert_eq!(bare_jobs.as_array().unwrap().len(), 4);
    assert!(
        bare_jobs[0]["next_run"].is_null(),
        "no scheduler, no next run"
    );

    let invalid = get(&format!("{base}/api/jobs/a%2Fb/history")).await;
    assert_eq!(invalid.status, 400);
    assert!(
        invalid.json()["error"]
            .as_str()
            .unwrap()
            .contains("is not a job name")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_is_absent_by_default_and_starts_a_manual_run_when_allowed() {
    let f = Fixture::new().await;
    let read_only = serve(
        Dashboard::new(f.store.clone())
            .scheduler(f.beta.clone())
            .router(),
    )
    .await;
    for path in ["/jobs/report/run", "/api/jobs/report/run"] {
        let answer = send("POST", &format!("{read_only}{path}"), &[], "").await;
        assert!(
            answer.status == 404 || answer.status == 405,
            "POST {path} must not exist on a read-only dashboard: {}",
            answer.status
        );
    }

    // Mounted under a prefix, as a user would.
    let app = Router::new().nest(
        "/ops",
        Dashboard::new(f.store.clone())
            .scheduler(f.beta.clone())
            .allow_run_now(true)
            .router(),
    );
    let base = serve(app).await;
    let page = get(&format!("{base}/ops/jobs/report")).await;
    assert!(
        page.body
            .contains("<form method=\"post\" action=\"/ops/jobs/report/run\" id=\"run-now-form\">"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("href=\"/ops/runs\""),
        "links keep the prefix"
    );

    let waited = send(
        "POST",
        &format!("{base}/ops/api/jobs/report/run?wait=true"),
        &[],
        "",
    )
    .await;
    assert_eq!(waited.status, 200, "{}", waited.body);
    let record = waited.json();
    assert_eq!(record["reason"], "manual");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["instance_id"], "beta");

    let form = send(
        "POST",
        &format!("{base}/ops/jobs/report/run"),
        &[("origin", &base)],
        "",
    )
    .await;
    assert_eq!(form.status, 303, "{}", form.body);
    assert_eq!(form.headers["location"], "/ops/jobs/report?started=1");
    let mut manual = 0;
    for _ in 0..60 {
        manual = common::history(&f.store, "report")
            .await
            .iter()
            .filter(|r| r.manual)
            .count();
        if manual == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(manual, 2, "the form started a second manual run");

    let cross = send(
        "POST",
        &format!("{base}/ops/jobs/report/run"),
        &[("origin", "https://evil.example")],
        "",
    )
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    let not_here = send("POST", &format!("{base}/ops/api/jobs/nope/run"), &[], "").await;
    assert_eq!(not_here.status, 404);
    assert!(
        not_here.json()["error"]
            .as_str()
            .unwrap()
            .contains("not registered on the scheduler"),
        "{}",
        not_here.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_only_store_shows_history_but_no_unfinished_runs() {
    use std::sync::Arc;

    use anarchon_core::memory::MemoryStore;
    use anarchon_core::{RunStatus, Scheduler};

    let store = Arc::new(MemoryStore::new());
    let scheduler = Scheduler::claim_only_shared(store.clone())
        .instance_id("solo")
        .build()
        .unwrap();
    scheduler
        .every("ping", "1h")
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    scheduler.start().await.unwrap();
    let record = scheduler.run_now("ping", None).await.unwrap();
    assert_eq!(record.status, RunStatus::Succeeded);

    let app = Router::new().nest(
        "/ops",
        Dashboard::history_only(store)
            .scheduler(scheduler.clone())
            .router(),
    );
    let base = serve(app).await;
    let root = get(&format!("{base}/ops")).await;
    assert_eq!(root.status, 200, "the prefix itself serves the jobs page");
    assert!(
        root.body.contains("href=\"/ops/jobs/ping\""),
        "{}",
        root.body
    );
    let runs = get(&format!("{base}/ops/runs")).await;
    assert!(
        runs.body.contains("This store is claim-only"),
        "{}",
        runs.body
    );
    let api = get(&format!("{base}/ops/api/runs")).await;
    assert_eq!(api.status, 404);
    assert!(api.json()["error"].as_str().unwrap().contains("claim-only"));
    let page = get(&format!("{base}/ops/jobs/ping")).await;
    assert!(
        page.body.contains("class=\"attempt st-succeeded manual\""),
        "{}",
        page.body
    );
    scheduler.stop(Duration::from_secs(5)).await.unwrap();
}
