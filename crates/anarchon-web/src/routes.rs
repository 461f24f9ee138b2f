//! The routes: pages, the JSON API, the health checks and (when allowed) run-now.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;

use anarchon_core::{JobInfo, JobName};
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, OriginalUri, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::error::{Error, Result, bounded, shorten};
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
        input: shorten(input, 140),
    })
}

/// The `{job}` segment of the path, or the documented 400 (axum's own rejection is plain
/// text).
fn job_path(path: std::result::Result<Path<String>, PathRejection>) -> Result<JobName> {
    match path {
        Ok(Path(job)) => job_name(&job),
        Err(rejection) => Err(Error::Unreadable {
            part: "path",
            reason: shorten(&rejection.body_text(), 200),
        }),
    }
}

/// The query parameters, in order (values percent-decoded).
type Params = Vec<(String, String)>;

/// Reads the query string; a query that cannot be read is the documented 400.
fn params(query: std::result::Result<Query<Params>, QueryRejection>) -> Result<Params> {
    query
        .map(|Query(p)| p)
        .map_err(|rejection| Error::Unreadable {
            part: "query string",
            reason: shorten(&rejection.body_text(), 200),
        })
}

/// The one value of the query parameter `name`, refusing it given twice.
fn param<'p>(params: &'p Params, name: &'static str) -> Result<Option<&'p str>> {
    let mut values = params.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
    match (values.next(), values.next()) {
        (first, None) => Ok(first.map(String::as_str)),
        (Some(_), Some(second)) => Err(Error::InvalidQuery {
            parameter: name,
            value: shorten(second, 40),
            reason: "it is given twice; give it once",
        }),
        (None, Some(_)) => unreachable!("a second value comes after a first"),
    }
}

/// The largest `n` of the history API.
pub(crate) const MAX_HISTORY: usize = 10_000;

/// `n` of the history API: 1 to [`MAX_HISTORY`], default 50.
fn history_count(params: &Params) -> Result<usize> {
    let Some(text) = param(params, "n")? else {
        return Ok(50);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_HISTORY).contains(&n) => Ok(n),
        _ => Err(Error::InvalidQuery {
            parameter: "n",
            value: shorten(text, 40),
            reason: "it takes a whole number from 1 to 10000",
        }),
    }
}

/// `wait` of the run-now API: `true` or `false` (default false).
fn wait_flag(params: &Params) -> Result<bool> {
    match param(params, "wait")? {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Error::InvalidQuery {
            parameter: "wait",
            value: shorten(other, 40),
            reason: "it takes true or false",
        }),
    }
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

async fn job_page(
    State(d): State<Shared>,
    Prefix(p): Prefix,
    path: std::result::Result<Path<String>, PathRejection>,
    query: std::result::Result<Query<Params>, QueryRejection>,
) -> Result<Html<String>, PageError> {
    let fail = |e| PageError(p.clone(), e);
    let job = job_path(path).map_err(fail)?;
    // `started` is a flag: present (any value) after the run-now form redirected here.
    let started = param(&params(query).map_err(fail)?, "started")
        .map_err(fail)?
        .is_some();
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
            started,
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

async fn api_history(
    State(d): State<Shared>,
    path: std::result::Result<Path<String>, PathRejection>,
    query: std::result::Result<Query<Params>, QueryRejection>,
) -> Result<Json<Vec<anarchon_core::HistoryRecord>>, ApiError> {
    let job = job_path(path)?;
    let n = history_count(&params(query)?)?;
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

/// Refuses a run-now request sent to a host the dashboard does not answer run-now for
/// (DNS rebinding): [`Dashboard::allowed_hosts`], by default localhost and IP addresses.
fn allowed_host(d: &Dashboard, headers: &HeaderMap) -> Result<()> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    // The name without the port: `[::1]:8080` → `::1`, `host:8080` → `host`.
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host.as_str(),
        }
    };
    let allowed = !name.is_empty()
        && match &d.allowed_hosts {
            Some(list) => list.iter().any(|entry| entry == &host || entry == name),
            None => name == "localhost" || name.parse::<std::net::IpAddr>().is_ok(),
        };
    if allowed {
        Ok(())
    } else {
        Err(Error::HostNotAllowed {
            host: shorten(&host, 100),
        })
    }
}

/// Checks that run-now may start `job` here, and starts it in the background.
fn start_run(
    d: &Dashboard,
    headers: &HeaderMap,
    job: std::result::Result<Path<String>, PathRejection>,
) -> Result<(
    JobName,
    futures::future::BoxFuture<'static, anarchon_core::Result<anarchon_core::HistoryRecord>>,
)> {
    allowed_host(d, headers)?;
    same_origin(headers)?;
    let job = job_path(job)?;
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
    job: std::result::Result<Path<String>, PathRejection>,
) -> Result<Redirect, PageError> {
    let (job, run) = start_run(&d, &headers, job).map_err(|e| PageError(p.clone(), e))?;
    spawn_run(job.clone(), run);
    Ok(Redirect::to(&format!("{p}/jobs/{job}?started=1")))
}

async fn api_run_now(
    State(d): State<Shared>,
    headers: HeaderMap,
    job: std::result::Result<Path<String>, PathRejection>,
    query: std::result::Result<Query<Params>, QueryRejection>,
) -> Result<Response, ApiError> {
    // The query is checked first: a bad `wait` starts nothing.
    let wait = wait_flag(&params(query)?)?;
    let (job, run) = start_run(&d, &headers, job)?;
    if wait {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with(name: &str, value: &str) -> Params {
        vec![(name.to_owned(), value.to_owned())]
    }

    #[test]
    fn history_count_takes_1_to_10000_and_refuses_the_rest_by_name() {
        assert_eq!(history_count(&Vec::new()).unwrap(), 50);
        assert_eq!(history_count(&with("n", "1")).unwrap(), 1);
        assert_eq!(history_count(&with("n", "10000")).unwrap(), 10_000);
        for bad in [
            "0",
            "-1",
            "10001",
            "abc",
            "",
            "1e3",
            "99999999999999999999999",
            "1.5",
        ] {
            let err = history_count(&with("n", bad)).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidQuery { parameter: "n", .. }),
                "{bad:?}: {err}"
            );
            assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        }
        let twice = vec![
            ("n".to_owned(), "1".to_owned()),
            ("n".to_owned(), "2".to_owned()),
        ];
        assert!(
            history_count(&twice)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }

    fn dashboard(hosts: Option<&[&str]>) -> Dashboard {
        let d = Dashboard::new(Arc::new(anarchon_core::memory::MemoryStore::new()));
        match hosts {
            Some(h) => d.allowed_hosts(h.iter().copied()),
            None => d,
        }
    }

    fn host(d: &Dashboard, value: &str) -> Result<()> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, value.parse().unwrap());
        allowed_host(d, &headers)
    }

    #[test]
    fn the_history_window_stays_within_the_api_bound() {
        assert_eq!(dashboard(None).history_window(0).history_window, 1);
        assert_eq!(
            dashboard(None).history_window(usize::MAX).history_window,
            MAX_HISTORY
        );
    }

    #[test]
    fn run_now_answers_only_for_allowed_hosts() {
        let default = dashboard(None);
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:9",
            "[::1]:8080",
            "10.0.0.5",
        ] {
            assert!(host(&default, ok).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
        ] {
            let err = host(&default, bad).unwrap_err();
            assert_eq!(err.status(), StatusCode::FORBIDDEN, "{bad}");
        }
        assert!(
            allowed_host(&default, &HeaderMap::new()).is_err(),
            "no Host header"
        );
        let named = dashboard(Some(&["Ops.Example.com", "other.example:8443"]));
        assert!(host(&named, "ops.example.com").is_ok());
        assert!(host(&named, "ops.example.com:443").is_ok());
        assert!(host(&named, "other.example:8443").is_ok());
        assert!(host(&named, "other.example:9999").is_err());
        assert!(
            host(&named, "127.0.0.1").is_err(),
            "a list replaces the default"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any query value and any Host header is read or refused with the documented error
        /// (400 for parameters, 403 for hosts); nothing panics.
        #[test]
        fn params_and_hosts_at_extremes_answer_ok_or_the_documented_error(
            n in prop_oneof![
                "\\PC{0,30}",
                "-?[0-9]{1,30}",
                Just(usize::MAX.to_string()),
                Just("0".to_owned()),
            ],
            wait in "\\PC{0,12}",
            host_value in prop_oneof!["[ -~]{0,300}", "\\[[0-9a-f:]{0,40}\\](:[0-9]{0,7})?"],
        ) {
            match history_count(&with("n", &n)) {
                Ok(count) => prop_assert!((1..=MAX_HISTORY).contains(&count)),
                Err(e) => prop_assert_eq!(e.status(), StatusCode::BAD_REQUEST),
            }
            match wait_flag(&with("wait", &wait)) {
                Ok(_) => prop_assert!(wait == "true" || wait == "false"),
                Err(e) => prop_assert_eq!(e.status(), StatusCode::BAD_REQUEST),
            }
            if let Ok(value) = host_value.parse() {
                let mut headers = HeaderMap::new();
                headers.insert(header::HOST, value);
                if let Err(e) = allowed_host(&dashboard(None), &headers) {
                    prop_assert_eq!(e.status(), StatusCode::FORBIDDEN);
                    prop_assert!(e.to_string().chars().count() < 600);
                }
            }
        }
    }
}
