//! Registering whole objects: a type lists its jobs once ([`Jobs`], usually written by the
//! `#[anarchon::jobs]` attribute macro of the `anarchon` crate), and
//! [`Scheduler::register`] adds one object's jobs under a prefix, with defaults for all of
//! them. [B-31, B-35]
//!
//! Job names are `Type-method` by default (or the name the method's attribute gives); a
//! registration's prefix is put in front with [`Registration::SEPARATOR`] (`-`), so the
//! method `daily` of `Reports` registered with the prefix `acme` is the job
//! `acme-Reports-daily`. Two objects of one type need distinct prefixes: the second
//! registration fails with [`Error::DuplicateJob`] naming the first name that is taken, and
//! registers nothing.
//!
//! Without the macro, implement [`Jobs`] by hand:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use anarchon_core::registration::{JobFuture, JobSpec, Jobs, Registration, Trigger};
//! use anarchon_core::{memory::MemoryStore, Data, JobConfig, JobContext, Scheduler};
//!
//! struct Tenant {
//!     name: String,
//! }
//!
//! impl Jobs for Tenant {
//!     fn jobs() -> Vec<JobSpec<Self>> {
//!         fn sync(this: Arc<Tenant>, ctx: JobContext) -> JobFuture {
//!             Box::pin(async move {
//!                 println!("sync {} region {:?}", this.name, ctx.value("region"));
//!                 Ok(())
//!             })
//!         }
//!         vec![JobSpec::new("Tenant-sync", Trigger::Every(Duration::from_secs(10)), JobConfig::default(), sync)]
//!     }
//! }
//!
//! let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
//! for name in ["acme", "globex"] {
//!     let tenant = Arc::new(Tenant { name: name.into() });
//!     let registration = Registration::new()
//!         .prefix(name)
//!         .data(Data::new().with_key("region", "eu"));
//!     scheduler.register(tenant, registration)?;
//! }
//! let names: Vec<String> = scheduler.jobs().iter().map(|j| j.name.to_string()).collect();
//! assert_eq!(names, ["acme-Tenant-sync", "globex-Tenant-sync"]);
//!
//! // A third object without a prefix of its own collides, and the error names the job.
//! let again = Arc::new(Tenant { name: "acme".into() });
//! let err = scheduler.register(again, Registration::new().prefix("acme")).unwrap_err();
//! assert!(err.to_string().contains("acme-Tenant-sync"), "{err}");
//! # Ok::<_, anarchon_core::Error>(())
//! ```

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::context::{DataSource, JobContext};
use crate::error::{Error, HandlerError, Result};
use crate::ids::JobName;
use crate::options::{JobConfig, JobKind};
use crate::scheduler::{IntoTimezone, Mode, Scheduler};

/// The future a registered method returns, boxed.
pub type JobFuture = Pin<Box<dyn Future<Output = std::result::Result<(), HandlerError>> + Send>>;

/// Calls one method of the object: what the macro generates for each marked method.
pub type MethodHandler<T> = fn(Arc<T>, JobContext) -> JobFuture;

/// When a registered method runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// On the epoch grid, every this long (`#[every("10s")]`).
    Every(Duration),
    /// A cron expression (`#[cron("0 9 * * *")]`), in the job's timezone.
    Cron(String),
    /// Once, at this instant (`#[at("2027-01-01T00:00:00Z")]`).
    At(DateTime<Utc>),
}

impl Trigger {
    /// The kind of job this trigger makes.
    pub fn kind(&self) -> JobKind {
        match self {
            Trigger::Every(_) => JobKind::Every,
            Trigger::Cron(_) => JobKind::Cron,
            Trigger::At(_) => JobKind::At,
        }
    }
}

/// One job of a type: its name before the prefix, trigger, options and method.
pub struct JobSpec<T: ?Sized> {
    /// The name before the registration's prefix (default `Type-method`).
    pub name: String,
    /// When it runs.
    pub trigger: Trigger,
    /// Its own options; they override the registration's defaults, which override the
    /// scheduler's.
    pub options: JobConfig,
    /// The scheduler of the process-wide [registry](crate::registry) it belongs to, if it
    /// names one (used by [`crate::registry::register`]).
    pub scheduler: Option<String>,
    /// The method.
    pub handler: MethodHandler<T>,
}

impl<T: ?Sized> JobSpec<T> {
    /// A job spec that names no scheduler.
    pub fn new(
        name: impl Into<String>,
        trigger: Trigger,
        options: JobConfig,
        handler: MethodHandler<T>,
    ) -> Self {
        JobSpec {
            name: name.into(),
            trigger,
            options,
            scheduler: None,
            handler,
        }
    }

    /// Names the registry scheduler this job belongs to.
    pub fn scheduler(mut self, name: impl Into<String>) -> Self {
        self.scheduler = Some(name.into());
        self
    }
}

impl<T: ?Sized> std::fmt::Debug for JobSpec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSpec")
            .field("name", &self.name)
            .field("trigger", &self.trigger)
            .field("options", &self.options)
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

/// A type whose methods are jobs. `#[anarchon::jobs]` on an `impl` block writes this;
/// see the [module docs](self) for a hand-written one.
pub trait Jobs: Send + Sync + 'static {
    /// Every job of the type, in the order of its methods.
    fn jobs() -> Vec<JobSpec<Self>>
    where
        Self: Sized;
}

/// How one object is registered: a name prefix, defaults for all its jobs, and (for
/// [`crate::registry::register`]) the scheduler it goes to.
///
/// Defaults apply to the jobs they fit: a timezone to `cron` jobs, an `offset` to `every`
/// jobs, `allow_past` to `at` jobs, `overlap` to `every` and `cron` jobs, the others to all.
/// A method's own attribute options override them. Data is merged as everywhere else:
/// scheduler data, then the registration's, then a run-now's.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::registration::Registration;
/// use anarchon_core::{Data, JobConfig};
///
/// let registration = Registration::new()
///     .prefix("acme")
///     .timezone("Europe/Berlin")
///     .data(Data::new().with_key("tenant", "acme"))
///     .defaults(JobConfig { timeout: Some(Duration::from_secs(60)), ..JobConfig::default() });
/// # let _ = registration;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registration {
    prefix: Option<String>,
    defaults: JobConfig,
    data: Option<DataSource>,
    scheduler: Option<String>,
    /// A timezone name that is not in the IANA database, reported at registration.
    bad_timezone: Option<String>,
}

impl Registration {
    /// Between the prefix and the job name: `acme` + `-` + `Reports-daily`.
    pub const SEPARATOR: &'static str = "-";

    /// No prefix, no defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `prefix` and [`Registration::SEPARATOR`] before every job name. The prefix
    /// takes the characters of job names: ASCII letters, digits, `_` and `-`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Default options of the object's jobs: the fields set in `defaults` are added to
    /// (or replace) those set before, [`Registration::timezone`] included; each job's own
    /// attribute options win over them.
    pub fn defaults(mut self, defaults: JobConfig) -> Self {
        overlay(&mut self.defaults, &defaults);
        self
    }

    /// Default IANA timezone of the object's `cron` jobs. An unknown name is an error at
    /// registration.
    pub fn timezone(mut self, tz: impl IntoTimezone) -> Self {
        match tz.into_timezone() {
            Ok(tz) => self.defaults.timezone = Some(tz),
            Err(Error::UnknownTimezone { name }) => {
                self.bad_timezone.get_or_insert(name);
            }
            Err(e) => {
                self.bad_timezone.get_or_insert(e.to_string());
            }
        }
        self
    }

    /// Data (fixed or a function) handed to every job of the object, between the
    /// scheduler's data and a run-now's. [B-31]
    pub fn data(mut self, data: impl Into<DataSource>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// The [registry](crate::registry) scheduler the object's jobs go to by default, for
    /// [`crate::registry::register`].
    pub fn scheduler(mut self, name: impl Into<String>) -> Self {
        self.scheduler = Some(name.into());
        self
    }

    /// The registry scheduler this registration names, if any.
    pub fn scheduler_name(&self) -> Option<&str> {
        self.scheduler.as_deref()
    }

    /// The full name of a job: the prefix, the separator, then `name`.
    pub fn job_name(&self, name: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{}{name}", Self::SEPARATOR),
            None => name.to_owned(),
        }
    }

    /// Checks the registration itself (the timezone and the prefix).
    fn check(&self) -> Result<()> {
        if let Some(name) = &self.bad_timezone {
            return Err(Error::UnknownTimezone { name: name.clone() });
        }
        if let Some(prefix) = &self.prefix
            && JobName::new(prefix).is_err()
        {
            return Err(Error::invalid_option(
                "prefix",
                format!(
                    "{prefix:?} is not a valid prefix: use 1 to 128 ASCII letters, digits, `_` or `-`"
                ),
            ));
        }
        Ok(())
    }

    /// The registration defaults that fit a job of `kind`, overridden by its own options.
    fn options_for(&self, kind: JobKind, own: &JobConfig) -> JobConfig {
        let mut merged = self.defaults.clone();
        if kind != JobKind::Cron {
            merged.timezone = None;
        }
        if kind != JobKind::Every {
            merged.offset = None;
        }
        if kind != JobKind::At {
            merged.allow_past = None;
        }
        if kind == JobKind::At {
            merged.overlap = None;
        }
        overlay(&mut merged, own);
        merged
    }
}

/// Writes the fields set in `top` over `base`.
fn overlay(base: &mut JobConfig, top: &JobConfig) {
    macro_rules! over {
        ($($f:ident),*) => { $( if top.$f.is_some() { base.$f = top.$f.clone(); } )* };
    }
    over!(
        jitter,
        max_late,
        history_size,
        history_ttl,
        timeout,
        overlap,
        max_attempts,
        catch_up_window,
        catch_up,
        offset,
        timezone,
        allow_past,
        lease,
        heartbeat
    );
}

impl<M: Mode> Scheduler<M> {
    /// Registers every job of `object` ([`Jobs`], usually from `#[anarchon::jobs]`) with the
    /// registration's prefix and defaults, and returns their names. All or nothing: on an
    /// error no job of the object stays registered.
    ///
    /// The object is shared by its jobs (each run calls its method on the same `Arc`). Jobs
    /// that name a registry scheduler, and a registration that names one, belong to
    /// [`crate::registry::register`].
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateJob`] naming the first full name already registered (two objects
    /// of one type need distinct prefixes), [`Error::InvalidOption`] for a bad prefix or
    /// timezone, an option that does not apply, or a job that names a scheduler, and every
    /// error of [`crate::JobBuilder::handler`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use anarchon_core::registration::{JobFuture, JobSpec, Jobs, Registration, Trigger};
    /// use anarchon_core::{memory::MemoryStore, JobConfig, JobContext, Scheduler};
    ///
    /// struct Reports;
    /// impl Jobs for Reports {
    ///     fn jobs() -> Vec<JobSpec<Self>> {
    ///         fn daily(_this: Arc<Reports>, _ctx: JobContext) -> JobFuture {
    ///             Box::pin(async { Ok(()) })
    ///         }
    ///         vec![JobSpec::new("Reports-daily", Trigger::Cron("0 9 * * *".into()), JobConfig::default(), daily)]
    ///     }
    /// }
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// let names = scheduler.register(Arc::new(Reports), Registration::new().timezone("Europe/Berlin"))?;
    /// assert_eq!(names[0].as_str(), "Reports-daily");
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn register<T: Jobs>(
        &self,
        object: Arc<T>,
        registration: Registration,
    ) -> Result<Vec<JobName>> {
        let specs = T::jobs();
        if let Some(name) = registration.scheduler_name() {
            return Err(names_scheduler("the registration", name));
        }
        if let Some(spec) = specs.iter().find(|s| s.scheduler.is_some()) {
            return Err(names_scheduler(
                &format!("job {:?}", spec.name),
                spec.scheduler.as_deref().unwrap_or_default(),
            ));
        }
        self.register_specs(&object, specs, &registration)
    }

    /// Registers `specs` of `object`, all or nothing.
    pub(crate) fn register_specs<T: Jobs>(
        &self,
        object: &Arc<T>,
        specs: Vec<JobSpec<T>>,
        registration: &Registration,
    ) -> Result<Vec<JobName>> {
        registration.check()?;
        let taken: BTreeSet<String> = self.jobs().into_iter().map(|j| j.name.into()).collect();
        let mut seen = BTreeSet::new();
        for spec in &specs {
            let full = registration.job_name(&spec.name);
            if taken.contains(&full) || !seen.insert(full.clone()) {
                return Err(Error::DuplicateJob { name: full });
            }
        }
        let mut added: Vec<JobName> = Vec::with_capacity(specs.len());
        for spec in specs {
            match self.register_one(object, spec, registration) {
                Ok(name) => added.push(name),
                Err(e) => {
                    for name in &added {
                        let _ = self.remove(name.as_str());
                    }
                    return Err(e);
                }
            }
        }
        Ok(added)
    }

    fn register_one<T: Jobs>(
        &self,
        object: &Arc<T>,
        spec: JobSpec<T>,
        registration: &Registration,
    ) -> Result<JobName> {
        let full = registration.job_name(&spec.name);
        let name = JobName::new(&full)?;
        let options = registration.options_for(spec.trigger.kind(), &spec.options);
        let method = spec.handler;
        let object = object.clone();
        let handler = move |ctx: JobContext| method(object.clone(), ctx);
        let data = registration.data.clone();
        macro_rules! finish {
            ($builder:expr) => {{
                let builder = $builder.config(options);
                match data {
                    Some(data) => builder.data(data).handler(handler),
                    None => builder.handler(handler),
                }
            }};
        }
        match spec.trigger {
            Trigger::Every(interval) => finish!(self.every(&full, interval)),
            Trigger::Cron(expression) => finish!(self.cron(&full, &expression)),
            Trigger::At(at) => finish!(self.at(&full, at)),
        }?;
        Ok(name)
    }
}

fn names_scheduler(what: &str, scheduler: &str) -> Error {
    Error::invalid_option(
        "scheduler",
        format!(
            "{what} names the registry scheduler {scheduler:?}: register it with \
             anarchon::registry::register, or drop the scheduler name to register it here"
        ),
    )
}

/// What the `#[anarchon::jobs]` macro calls; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// A timezone the macro checked at compile time.
    pub fn timezone(name: &str) -> chrono_tz::Tz {
        name.parse()
            .unwrap_or_else(|_| panic!("{name:?} was checked by #[anarchon::jobs]"))
    }

    /// An instant the macro checked at compile time.
    pub fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms)
            .unwrap_or_else(|| panic!("{ms} was checked by #[anarchon::jobs]"))
    }

    /// A method's result as a handler's.
    pub fn into_result<E: Into<HandlerError>>(
        result: std::result::Result<(), E>,
    ) -> std::result::Result<(), HandlerError> {
        result.map_err(Into::into)
    }
}
