//! [`JobBuilder`]: one job's schedule, options and data, registered with its handler. The
//! kind markers in its type let each method exist only where it applies.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::convert::IntoTimezone;
use super::mode::{Leased, Mode, kind};
use super::shared::{Backend, Handler, JobDef, Shared};
use crate::context::{DataSource, JobContext};
use crate::error::{BoxError, Error, HandlerError, Result};
use crate::ids::JobName;
use crate::options::{CatchUp, JobConfig, JobKind, JobOptions};
use crate::slot::Schedule;
use crate::store::Overlap;

/// A job's schedule as the handle's `every`, `cron` or `at` was given it, checked at
/// [`JobBuilder::handler`].
pub(super) enum Spec {
    Every(Duration),
    Cron(String),
    At(Schedule),
}

/// Registers one job: options, data, then [`JobBuilder::handler`]. Methods exist only where
/// they apply: `overlap` not on `at` jobs, lease options only on lease stores, `offset`
/// only on `every`, `timezone` only on `cron`. [B-03, B-22, B-39]
///
/// Built by [`Scheduler::every`], [`Scheduler::cron`] and [`Scheduler::at`]; nothing is
/// registered until `.handler(...)`, which reports every bad input as an error naming it.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::{memory::MemoryStore, CatchUp, Overlap, Scheduler};
///
/// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
/// scheduler
///     .cron("report", "0 3 * * *")
///     .timezone("Europe/Berlin")
///     .timeout(Duration::from_secs(600))
///     .overlap(Overlap::Skip)
///     .catch_up(CatchUp::Latest)
///     .handler(|ctx| async move {
///         println!("report for {}", ctx.slot);
///         Ok(())
///     })?;
/// let err = scheduler.every("bad", "10s").jitter(Duration::MAX).handler(|_| async { Ok(()) });
/// assert!(err.is_err());
/// # Ok::<_, anarchon_core::Error>(())
/// ```
///
/// [`Scheduler::every`]: crate::Scheduler::every
/// [`Scheduler::cron`]: crate::Scheduler::cron
/// [`Scheduler::at`]: crate::Scheduler::at
#[must_use = "a job is registered only by `.handler(...)`"]
pub struct JobBuilder<'s, M, K> {
    shared: &'s Shared,
    name: String,
    spec: Result<Spec>,
    opts: JobOptions,
    config: Option<JobConfig>,
    data: Option<DataSource>,
    error: Option<Error>,
    _mode: PhantomData<&'s M>,
    _kind: PhantomData<K>,
}

impl<'s, M: Mode, K> JobBuilder<'s, M, K> {
    /// A builder for a job of the scheduler whose state is `shared`, with the scheduler's
    /// default options.
    pub(super) fn new(shared: &'s Shared, name: &str, spec: Result<Spec>) -> Self {
        JobBuilder {
            shared,
            name: name.to_owned(),
            spec,
            opts: shared.cfg.defaults.clone(),
            config: None,
            data: None,
            error: None,
            _mode: PhantomData,
            _kind: PhantomData,
        }
    }
}

impl<M: Mode, K> JobBuilder<'_, M, K> {
    /// Jitter for this job: a random delay from zero to this after each slot before
    /// claiming (at most `max_late`). [B-09]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.opts.jitter = jitter;
        self
    }
    /// How late after its slot a claim may still start a run of this job. [B-10]
    pub fn max_late(mut self, max_late: Duration) -> Self {
        self.opts.max_late = max_late;
        self
    }
    /// Runs of this job kept in the history. [B-37]
    pub fn history_size(mut self, n: u32) -> Self {
        self.opts.history_size = n;
        self
    }
    /// Timeout of this job's handler: its signal is cancelled and the attempt failed after
    /// this. [B-21]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.opts.timeout = Some(timeout);
        self
    }
    /// Job-level data (fixed or a function). [B-31]
    pub fn data(mut self, data: impl Into<DataSource>) -> Self {
        self.data = Some(data.into());
        self
    }
    /// Options by name from configuration; those that do not apply are an error at
    /// [`JobBuilder::handler`]. [B-22]
    pub fn config(mut self, config: JobConfig) -> Self {
        self.config = Some(config);
        self
    }

    fn kind(&self) -> JobKind {
        match self.spec {
            Ok(Spec::Every(_)) => JobKind::Every,
            Ok(Spec::Cron(_)) => JobKind::Cron,
            Ok(Spec::At(_)) | Err(_) => JobKind::At,
        }
    }

    /// Registers the job with its handler: an async function of a [`JobContext`] returning
    /// `Result<(), HandlerError>`. Any error converts into [`HandlerError`] with `?`, so a
    /// closure `|ctx| async move { ...; Ok(()) }` needs no type annotation. Errors name the
    /// bad input. Jobs may be added while the scheduler runs. [B-04, B-30]
    ///
    /// # Errors
    ///
    /// The first bad input: the name, the interval, cron expression or `at` time, an option
    /// out of range ([`Error::OutOfRange`]), one that does not apply
    /// ([`Error::InvalidOption`]), an `at` time in the past ([`Error::AtInThePast`]), a
    /// name already registered ([`Error::DuplicateJob`]), a stopped scheduler
    /// ([`Error::State`]).
    pub fn handler<F, Fut>(self, f: F) -> Result<()>
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        if let Some(e) = self.error {
            return Err(e);
        }
        let name = JobName::new(&self.name)?;
        let kind = self.kind();
        let mut opts = self.opts;
        if let Some(cfg) = &self.config {
            let shape = if M::LEASE {
                crate::options::StoreShape::Leased
            } else {
                crate::options::StoreShape::ClaimOnly
            };
            cfg.validate(shape, self.shared.backend.history().kind(), kind)?;
            cfg.apply(&mut opts);
        }
        opts.validate()?;
        if let Backend::Claim(store) = &self.shared.backend {
            crate::store::check_claim_window(store.as_ref(), opts.jitter_ms(), opts.max_late_ms())?;
        }
        let schedule = match self.spec? {
            Spec::Every(interval) => Schedule::every(interval, opts.offset_ms())?,
            Spec::Cron(expr) => Schedule::cron(&expr, opts.timezone.map(|tz| tz.name()))?,
            Spec::At(s) => s,
        };
        opts.check_schedule(&schedule, self.shared.cfg.clock.now_ms(), M::LEASE)?;
        let handler: Handler = Arc::new(move |ctx| {
            let fut = f(ctx);
            Box::pin(async move { fut.await.map_err(BoxError::from) })
        });
        let (data, fixed_data) = super::handler_task::job_data(
            self.shared.cfg.data.as_deref(),
            self.shared.cfg.fixed_data.as_ref(),
            self.data,
        );
        let def = Arc::new(JobDef {
            name: name.clone(),
            kind,
            schedule,
            opts,
            handler,
            data,
            fixed_data,
        });
        self.shared.add_job(def)
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::Every> {
    /// Grid offset: slots at `k * interval + offset` (taken modulo the interval, so an
    /// offset of `interval - 5s` lays the grid 5 s early). [B-05]
    pub fn offset(mut self, offset: Duration) -> Self {
        self.opts.offset = offset;
        self
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::At> {
    /// Registers the job even when its time lies too far in the past to run (default
    /// false: such a time is [`Error::AtInThePast`]), for registration code that runs
    /// again after the job ran. [B-03]
    pub fn allow_past(mut self, allow: bool) -> Self {
        self.opts.allow_past = allow;
        self
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::Cron> {
    /// IANA timezone of the expression (`"Europe/Berlin"` or a [`chrono_tz::Tz`]); an
    /// unknown name is an error at [`JobBuilder::handler`]. [B-06]
    pub fn timezone(mut self, tz: impl IntoTimezone) -> Self {
        match tz.into_timezone() {
            Ok(tz) => self.opts.timezone = Some(tz),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }
}

impl<K> JobBuilder<'_, Leased, K> {
    /// Crash budget of a run. [B-14]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.opts.max_attempts = n;
        self
    }
    /// Catch-up window on start: how far back missed slots are looked for; zero turns
    /// catch-up off. [B-19]
    pub fn catch_up_window(mut self, window: Duration) -> Self {
        self.opts.catch_up_window = window;
        self
    }
    /// Catch-up policy. [G-05]
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.opts.catch_up = policy;
        self
    }
    /// History TTL: finished runs older than this are pruned. [B-37]
    pub fn history_ttl(mut self, ttl: Duration) -> Self {
        self.opts.history_ttl = Some(ttl);
        self
    }
}

impl JobBuilder<'_, Leased, kind::Every> {
    /// Overlap policy. [B-12]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.opts.overlap = overlap;
        self
    }
}

impl JobBuilder<'_, Leased, kind::Cron> {
    /// Overlap policy. [B-12]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.opts.overlap = overlap;
        self
    }
}
