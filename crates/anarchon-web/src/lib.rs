//! A web dashboard for anarchon: an [axum] [`Router`] you mount in your own server.
//!
//! It reads the store (any process can: it needs no job of its own) and, when you give it a
//! scheduler handle, that scheduler's jobs, next runs and health. It serves:
//!
//! | route | what |
//! |---|---|
//! | `GET /` | jobs: schedule kind, next run, last status, success rate, takeovers |
//! | `GET /jobs/{job}` | the job's timeline: one lane per instance, one bar per attempt; takeovers, handovers, interrupted and lost attempts by colour, arrow and tooltip |
//! | `GET /runs` | unfinished runs now: owner, attempt, lease left |
//! | `POST /jobs/{job}/run` | run-now form (only with [`Dashboard::allow_run_now`]) |
//! | `GET /api/jobs` | the jobs as JSON |
//! | `GET /api/jobs/{job}/history?n=50` | the job's attempts, newest first |
//! | `GET /api/runs` | unfinished runs |
//! | `GET /api/health` | the scheduler's health and whether the store answers |
//! | `POST /api/jobs/{job}/run[?wait=true]` | run-now (only with [`Dashboard::allow_run_now`]) |
//! | `GET /healthz` | 200 while the process serves requests |
//! | `GET /readyz` | 200 when the store answers and the scheduler runs, is not stalled and reaches its store; else 503 |
//!
//! Pages are server-rendered HTML with inline CSS and SVG: no script, no CDN, nothing fetched
//! from elsewhere, so the dashboard works offline. Everything read from the store is
//! HTML-escaped.
//!
//! The dashboard is **read-only by default**: the run-now routes do not exist (a POST gets
//! 405) until [`Dashboard::allow_run_now`] turns them on. It has **no authentication** of its
//! own: put your auth layer in front of it, as below. Run-now forms are refused when the
//! browser says they come from another origin (`Origin` differs from `Host`), so another site
//! cannot post them with your users' cookies, and run-now answers only for the hosts of
//! [`Dashboard::allowed_hosts`] (by default localhost and IP addresses), so a site whose name
//! an attacker points at your server (DNS rebinding) cannot either.
//!
//! Bad input gets the documented error answers: a query parameter that cannot be read or is
//! out of range (`n` of the history API takes 1 to 10000, `wait` takes `true` or `false`),
//! a job name that breaks the naming rule or a path that is not UTF-8 answer 400, as
//! `{"error": "..."}` on the API and as an error page on the pages. Unknown query
//! parameters are ignored.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use anarchon_core::{memory::MemoryStore, Scheduler};
//! use anarchon_web::axum::{
//!     Router,
//!     extract::Request,
//!     http::StatusCode,
//!     middleware::{self, Next},
//!     response::Response,
//! };
//! use anarchon_web::Dashboard;
//!
//! // Your auth, as a tower layer (here axum's `from_fn`): the dashboard has none.
//! async fn require_token(request: Request, next: Next) -> Result<Response, StatusCode> {
//!     let auth = request.headers().get("authorization").and_then(|v| v.to_str().ok());
//!     match auth {
//!         Some("Bearer let-me-in") => Ok(next.run(request).await),
//!         _ => Err(StatusCode::UNAUTHORIZED),
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let scheduler = Scheduler::leased_shared(store.clone()).build()?;
//! scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
//! scheduler.start().await?;
//!
//! let dashboard = Dashboard::new(store)
//!     .scheduler(scheduler.clone())
//!     .allow_run_now(true)
//!     .router();
//! let app = Router::new()
//!     .nest("/ops", dashboard)
//!     .layer(middleware::from_fn(require_token));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! anarchon_web::axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! Mounted under a prefix (`nest("/ops", ...)`), every link and form points under it.
//!
//! # Claim-only stores
//! [`Dashboard::history_only`] takes a store without leases (RabbitMQ, NATS, the naive Redis
//! strategies): jobs and timelines work, the unfinished-runs page says there is nothing to
//! show.
//!
//! # MSRV
//! Rust 1.89 (edition 2024), as the rest of anarchon.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod control;
mod error;
mod html;
mod routes;
mod view;

use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::{HistoryStore, LeaseStore};
use anarchon_core::{Mode, Scheduler};
use axum::Router;

pub use error::{Error, Result};
pub use html::escape;
pub use view::{HealthView, JobSummary, UnfinishedRun};

/// Re-exported so that you build your server on the axum version the dashboard uses.
pub use axum;

/// The store the dashboard reads.
#[derive(Clone)]
pub(crate) enum Source {
    Lease(Arc<dyn LeaseStore>),
    History(Arc<dyn HistoryStore>),
}

impl Source {
    pub(crate) fn history(&self) -> &dyn HistoryStore {
        match self {
            Source::Lease(s) => &**s,
            Source::History(s) => &**s,
        }
    }
}

/// Builds the dashboard's [`Router`]; see the [crate docs](crate).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use anarchon_core::memory::MemoryStore;
///
/// let router: anarchon_web::axum::Router = anarchon_web::Dashboard::new(Arc::new(MemoryStore::new()))
///     .store_timeout(Duration::from_secs(2))?
///     .history_window(200)
///     .router();
/// # let _ = router;
/// # Ok::<(), anarchon_web::Error>(())
/// ```
#[derive(Clone)]
pub struct Dashboard {
    source: Source,
    control: Option<Arc<dyn control::Control>>,
    allow_run_now: bool,
    store_timeout: Duration,
    history_window: usize,
    /// The hosts run-now answers for (lower case); `None` = localhost and IP addresses.
    allowed_hosts: Option<Vec<String>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("store", &self.source.history().kind())
            .field("scheduler", &self.control.is_some())
            .field("allow_run_now", &self.allow_run_now)
            .field("store_timeout", &self.store_timeout)
            .field("history_window", &self.history_window)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl Dashboard {
    /// A dashboard over a lease store (SQLite, libSQL, PostgreSQL, Redis `lease`, memory):
    /// jobs, timelines and unfinished runs. Read-only, with no scheduler, until you add them.
    pub fn new(store: Arc<dyn LeaseStore>) -> Self {
        Self::with_source(Source::Lease(store))
    }

    /// A dashboard over a claim-only store: jobs and timelines; no unfinished runs, since such
    /// a store keeps no lease.
    pub fn history_only(store: Arc<dyn HistoryStore>) -> Self {
        Self::with_source(Source::History(store))
    }

    fn with_source(source: Source) -> Self {
        Dashboard {
            source,
            control: None,
            allow_run_now: false,
            store_timeout: Duration::from_secs(5),
            history_window: 100,
            allowed_hosts: None,
        }
    }

    /// The scheduler whose jobs (kind, next run), health (`/readyz`, `/api/health`) and
    /// run-now the dashboard shows. Jobs other instances registered still show, from the
    /// store, without a next run.
    pub fn scheduler<M: Mode>(mut self, scheduler: Scheduler<M>) -> Self {
        self.control = Some(Arc::new(scheduler));
        self
    }

    /// Adds the run-now routes (`POST /jobs/{job}/run`, `POST /api/jobs/{job}/run`) and the
    /// form on each job page. Off by default: without it those routes do not exist. A run
    /// starts on the scheduler given to [`Dashboard::scheduler`], which must hold the job.
    /// Guard the routes with your auth layer.
    pub fn allow_run_now(mut self, allow: bool) -> Self {
        self.allow_run_now = allow;
        self
    }

    /// The host names (as the `Host` header gives them: `"ops.example.com"`, or with a port,
    /// `"ops.example.com:8443"`, which then must match too) that run-now answers for. A
    /// run-now POST sent to any other host is refused with 403: a page on another site whose
    /// name an attacker points at your server (DNS rebinding) sends its own name as `Host`.
    /// By default only `localhost` and IP addresses are allowed; set the dashboard's own
    /// name(s) here when you serve it under one.
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_hosts = Some(
            hosts
                .into_iter()
                .map(|h| h.into().trim().to_ascii_lowercase())
                .collect(),
        );
        self
    }

    /// How long a store call may take before the request answers 504 (default 5 s), from
    /// [`MIN_STORE_TIMEOUT`](Self::MIN_STORE_TIMEOUT) (50 ms, as the scheduler's own
    /// `store_timeout`) to [`MAX_STORE_TIMEOUT`](Self::MAX_STORE_TIMEOUT) (1 h).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the option, the value and the range for a timeout
    /// outside it: a zero timeout made every request answer 504, and one of days would hold
    /// a request (and a store connection) long after any client gave up.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use anarchon_core::memory::MemoryStore;
    /// use anarchon_web::{Dashboard, Error};
    ///
    /// let dashboard = Dashboard::new(Arc::new(MemoryStore::new()));
    /// let err = dashboard.clone().store_timeout(Duration::ZERO).unwrap_err();
    /// assert!(matches!(err, Error::OutOfRange { option: "store_timeout", .. }));
    /// let router = dashboard.store_timeout(Duration::from_secs(2))?.router();
    /// # let _ = router;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn store_timeout(mut self, timeout: Duration) -> Result<Self> {
        if !(Self::MIN_STORE_TIMEOUT..=Self::MAX_STORE_TIMEOUT).contains(&timeout) {
            return Err(Error::OutOfRange {
                option: "store_timeout",
                value: format!("{timeout:?}"),
                allowed: format!(
                    "from {:?} to {:?}: a shorter bound answers 504 before a store can reply, \
                     a longer one holds requests after their clients gave up",
                    Self::MIN_STORE_TIMEOUT,
                    Self::MAX_STORE_TIMEOUT
                ),
            });
        }
        self.store_timeout = timeout;
        Ok(self)
    }

    /// The shortest [`store_timeout`](Self::store_timeout): 50 ms.
    pub const MIN_STORE_TIMEOUT: Duration = Duration::from_millis(50);
    /// The longest [`store_timeout`](Self::store_timeout): 1 h.
    pub const MAX_STORE_TIMEOUT: Duration = Duration::from_secs(3600);

    /// How many of a job's newest attempts the jobs page and the timeline read (default
    /// 100; a value outside 1 to 10000, the history API's own bound, is taken as the nearer
    /// end, so no page asks a store for more than it can answer in one call).
    pub fn history_window(mut self, attempts: usize) -> Self {
        self.history_window = attempts.clamp(1, routes::MAX_HISTORY);
        self
    }

    /// The router, ready to serve or to `nest` under a prefix.
    pub fn router(self) -> Router {
        routes::router(self)
    }
}

/// A read-only dashboard over a lease store, with no scheduler: [`Dashboard::new`] then
/// [`Dashboard::router`].
pub fn router(store: Arc<dyn LeaseStore>) -> Router {
    Dashboard::new(store).router()
}
