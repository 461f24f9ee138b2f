//! The routes: pages, the JSON API, the health checks and (when allowed) run-now.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;

use anarchon_core::{JobInfo, JobName};
use axum::Json;
use axum::extract::{FromRequestParts, OriginalUri, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::error::{Error, Result, bounded};
use crate::html;
use crate::view::{self, HealthView, JobSummary, UnfinishedRun};
use crate::{Dashboard, Source};

type Shared = Arc<Dashboard>;

pub(crate) fn router(dashboard: Dashboard) -> axum::Router {
    let allow_run_now = dashboard.allow_run_now;
    let mut router = axum::Router::new()
        .route("/", get(jobs_page))
        .route("/jobs/{job}", get(job_page))
        .route("/runs", get(runs_page))
        .route("/api/jobs", get(api_jobs))
        .route("/api/jobs/{job}/history", get(api_history))
        .route("/api/runs", get(api_runs))
        .route("/api/health", get(api_health))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    if allow_run_now {
        router = router
            .route("/jobs/{job}/run", post(run_now_form))
            .route("/api/jobs/{job}/run", post(api_run_now));
    }
    router.with_state(Arc::new(dashboard))
}

/// The path the dashboard is mounted under (`""` at the root, `"/ops"` under
/// `nest("/ops", ...)`), so links and forms work wherever it is nested.
struct Prefix(String);

impl<S: Send + Sync> FromRequestParts<S> for Prefix {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        let inner = parts.uri.path().to_owned();
        let full = parts
            .extensions
            .get::<OriginalUri>()
            .map(|o| o.0.path().to_owned())
            .unwrap_or_else(|| inner.clone());
        let prefix = if let Some(p) = full.strip_suffix(inner.as_str()) {
            p.to_owned()
        } else if inner == "/" {
            full.trim_end_matches('/').to_owned()
        } else {
            String::new()
        };
        Ok(Prefix(prefix.trim_end_matches('/').to_owned()))
    }
}

/// An error shown as an HTML page.
struct PageError(String, Error);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.1.status();
        tracing::debug!(error = %self.1, "dashboard page failed");
        (
            status,
            Html(html::error_page(
                &self.0,
                status.as_u16(),
                &self.1.to_string(),
            )),
        )
            .into_response()
    }
}

/// An error answered as `{"error": "..."}`.
struct ApiError(Error);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        tracing::debug!(error = %self.0, "dashboard API call failed");
        (
            self.0.status(),
            Json(json!({ "error": self.0.to_string() })),
        )
            .into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

fn job_name(input: &str) -> Result<JobName> {
    JobName::new(input).map_err(|_| Error::InvalidJobName {
        input: input.to_owned(),
    })
}

fn infos(d: &Dashboard) -> BTreeMap<JobName, JobInfo> {
    d.control
        .as_ref()
        .map(|c| c.jobs().into_iter().map(|j| (j.name.clone(), j)).collect())
        .unwrap_or_default()
}

/// Every job the store knows or the scheduler holds, summarised over its recent history.
async fn summaries(d: &Dashboard) -> Result<Vec<JobSummary>> {
    let store = d.source.history();
    let known = bounded("known_jobs", d.store_timeout, store.known_jobs()).await?;
    let infos = infos(d);
    let names: BTreeSet<JobName> = known.into_iter().chain(infos.keys().cloned()).collect();
    let histories = futures::future::join_all(names.iter().map(|name| {
        bounded(
            "history",
            d.store_timeout,
            store.history(name, d.history_window),
        )
    }))
    .await;
    names
        .into_iter()
        .zip(histories)
        .map(|(name, records)| {
            let records = records?;
            let info = infos.get(&name);
            Ok(view::summarise(name, info, &records))
        })
        .collect()
}

async fn unfinished(d: &Dashboard) -> Result<Option<Vec<UnfinishedRun>>> {
    let Source::Lease(store) = &d.source else {
        return Ok(None);
    };
    let known = bounded("known_jobs", d.store_timeout, store.known_jobs()).await?;
    let mut jobs: BTreeSet<JobName> = known.into_iter().collect();
    jobs.extend(infos(d).into_keys());
    let jobs: Vec<JobName> = jobs.into_iter().collect();
    let mut runs = bounded(
        "unfinished_runs",
        d.store_timeout,
        store.unfinished_runs(&jobs),
    )
    .await?;
    runs.sort_by(|a, b| (&a.run.job, a.run.slot).cmp(&(&b.run.job, b.run.slot)));
    Ok(Some(runs.iter().map(UnfinishedRun::from).collect()))
}

fn health(d: &Dashboard) -> Option<HealthView> {
    d.control.as_ref().map(|c| HealthView::from(&c.health()))
}

async fn jobs_page(State(d): State<Shared>, Prefix(p): Prefix) -> Result<Html<String>, PageError> {
    let jobs = summaries(&d).await.map_err(|e| PageError(p.clone(), e))?;
    Ok(Html(html::jobs_page(&p, &jobs, health(&d).as_ref())))
}

#[derive(Deserialize)]
struct JobQuery {
    started: Option<String>,
}

async fn job_page(
    State(d): State<Shared>,
    Prefix(p): Prefix,
    Path(job): Path<String>,
    Query(q): Query<JobQuery>,
) -> Result<Html<String>, PageError> {
    let fail = |e| PageError(p.clone(), e);
    let job = job_name(&job).map_err(fail)?;
    let store = d.source.history();
    let records = bounded(
        "history",
        d.store_timeout,
        store.history(&job, d.history_window),
    )
    .await
    .map_err(fail)?;
    let infos = infos(&d);
    let info = infos.get(&job);
    if records.is_empty() && info.is_none() {
        let known = bounded("known_jobs", d.store_timeout, store.known_jobs())
            .await
            .map_err(fail)?;
        if !known.contains(&job) {
            return Err(fail(Error::UnknownJob {
                job: job.to_string(),
            }));
        }
    }
    let now = bounded("now", d.store_timeout, store.now())
        .await
        .map_err(fail)?;
    let timeline = view::timeline(&records, now, 900.0);
    let summary = view::summarise(job.clone(), info, &records);
    Ok(Html(html::job_page(
        &p,
        &html::JobPage {
            job: &job,
            summary: &summary,
            timeline: &timeline,
            run_now: d.allow_run_now && info.is_some(),
            started: q.started.is_some(),
        },
    )))
}

async fn runs_page(State(d): State<Shared>, Prefix(p): Prefix) -> Result<Html<String>, PageError> {
    let runs = unfinished(&d).await.map_err(|e| PageError(p.clone(), e))?;
    Ok(Html(html::runs_page(&p, runs.as_deref())))
}

async fn api_jobs(State(d): State<Shared>) -> Result<Json<Vec<JobSummary>>, ApiError> {
    Ok(Json(summaries(&d).await?))
}

#[derive(Deserialize)]
struct HistoryQuery {
    n: Option<usize>,
}

async fn api_history(
    State(d): State<Shared>,
    Path(job): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Vec<anarchon_core::HistoryRecord>>, ApiError> {
    let job = job_name(&job)?;
    let n = q.n.unwrap_or(50).clamp(1, 10_000);
    let records = bounded(
        "history",
        d.store_timeout,
        d.source.history().history(&job, n),
    )
    .await?;
    Ok(Json(records.into_iter().map(Into::into).collect()))
}

async fn api_runs(State(d): State<Shared>) -> Result<Response, ApiError> {
    Ok(match unfinished(&d).await? {
        Some(runs) => Json(runs).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({
                "error": "this store is claim-only: it keeps no lease, so there are no \
                          unfinished runs to list"
            })),
        )
            .into_response(),
    })
}

/// The readiness report: does the store answer, and is the scheduler (if any) healthy.
async fn readiness(d: &Dashboard) -> (bool, serde_json::Value) {
    let store = bounded("now", d.store_timeout, d.source.history().now()).await;
    let scheduler = health(d);
    let ready = store.is_ok() && scheduler.as_ref().is_none_or(|h| h.healthy);
    let body = json!({
        "ready": ready,
        "store": {
            "kind": d.source.history().kind(),
            "reachable": store.is_ok(),
            "error": store.err().map(|e| e.to_string()),
        },
        "scheduler": scheduler,
    });
    (ready, body)
}

async fn api_health(State(d): State<Shared>) -> Json<serde_json::Value> {
    Json(readiness(&d).await.1)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(d): State<Shared>) -> Response {
    let (ready, body) = readiness(&d).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Refuses a POST whose `Origin` names another host than the one it was sent to.
fn same_origin(headers: &HeaderMap) -> Result<()> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    if origin_host.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err(Error::CrossOrigin {
            origin: origin.to_owned(),
            host: host.to_owned(),
        })
    }
}

/// Checks that run-now may start `job` here, and starts it in the background.
fn start_run(
    d: &Dashboard,
    headers: &HeaderMap,
    job: &str,
) -> Result<(
    JobName,
    futures::future::BoxFuture<'static, anarchon_core::Result<anarchon_core::HistoryRecord>>,
)> {
    same_origin(headers)?;
    let job = job_name(job)?;
    let control = d
        .control
        .as_ref()
        .filter(|c| c.jobs().iter().any(|j| j.name == job))
        .ok_or_else(|| Error::NotRunnable {
            job: job.to_string(),
        })?;
    Ok((job.clone(), control.run_now(job.to_string())))
}

fn spawn_run(
    job: JobName,
    run: futures::future::BoxFuture<'static, anarchon_core::Result<anarchon_core::HistoryRecord>>,
) {
    tokio::spawn(async move {
        match run.await {
            Ok(r) => {
                tracing::info!(job = %job, status = %r.status, "run-now from the dashboard finished")
            }
            Err(e) => tracing::warn!(job = %job, error = %e, "run-now from the dashboard failed"),
        }
    });
}

async fn run_now_form(
    State(d): State<Shared>,
    Prefix(p): Prefix,
    headers: HeaderMap,
    Path(job): Path<String>,
) -> Result<Redirect, PageError> {
    let (job, run) = start_run(&d, &headers, &job).map_err(|e| PageError(p.clone(), e))?;
    spawn_run(job.clone(), run);
    Ok(Redirect::to(&format!("{p}/jobs/{job}?started=1")))
}

#[derive(Deserialize)]
struct RunQuery {
    wait: Option<bool>,
}

async fn api_run_now(
    State(d): State<Shared>,
    headers: HeaderMap,
    Path(job): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Response, ApiError> {
    let (job, run) = start_run(&d, &headers, &job)?;
    if q.wait == Some(true) {
        let record = run.await.map_err(|source| Error::Store {
            call: "run_now",
            source,
        })?;
        return Ok(Json(record).into_response());
    }
    spawn_run(job.clone(), run);
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "job": job, "started": true })),
    )
        .into_response())
}
