//! A process-wide registry of named schedulers: configure each once (at start-up, from the
//! code that knows its store), take it by name anywhere else, and start or stop them all at
//! once — for example from the task that waits for SIGTERM. [B-40]
//!
//! ```
//! use std::time::Duration;
//! use anarchon_core::{memory::MemoryStore, registry, Scheduler};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let reports = Scheduler::leased(MemoryStore::new()).build()?;
//! registry::configure("reports", reports)?;
//! // Elsewhere: register jobs on it by name.
//! registry::leased("reports")?
//!     .every("digest", "1h")
//!     .handler(|_ctx| async { Ok(()) })?;
//! registry::start_all().await?;
//! // On SIGTERM: hand every running job over and stop, all within one timeout.
//! registry::stop_all(Duration::from_secs(5)).await?;
//! # registry::remove("reports");
//! # Ok::<_, anarchon_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! The choice for a name nobody configured: taking it is an error naming it
//! ([`Error::UnknownScheduler`]); no default store is made up. Configuring a name twice is an
//! error too ([`Error::DuplicateScheduler`]).
//!
//! [`configure_with`] and [`RegistryOptions::auto_start`] start a scheduler as it is
//! configured. Objects whose jobs name their scheduler (the `scheduler = "..."` option of
//! `#[anarchon::jobs]`, or [`Registration::scheduler`] for all of an object's jobs) are
//! registered with [`register`], which finds each job's scheduler here:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use anarchon_core::registration::{JobFuture, JobSpec, Jobs, Registration, Trigger};
//! use anarchon_core::registry::{self, RegistryOptions};
//! use anarchon_core::{memory::MemoryStore, JobConfig, JobContext, Scheduler};
//!
//! struct Cleanup;
//! impl Jobs for Cleanup {
//!     fn jobs() -> Vec<JobSpec<Self>> {
//!         fn purge(_this: Arc<Cleanup>, _ctx: JobContext) -> JobFuture {
//!             Box::pin(async { Ok(()) })
//!         }
//!         vec![JobSpec::new("Cleanup-purge", Trigger::Every(Duration::from_secs(60)), JobConfig::default(), purge)]
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let maintenance = Scheduler::leased(MemoryStore::new()).build()?;
//! registry::configure_with("maintenance", maintenance, RegistryOptions { auto_start: true }).await?;
//! registry::register(Arc::new(Cleanup), Registration::new().scheduler("maintenance"))?;
//! assert!(registry::leased("maintenance")?.health().running);
//! registry::stop_all(Duration::from_secs(5)).await?;
//! # registry::remove("maintenance");
//! # Ok::<_, anarchon_core::Error>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::ids::JobName;
use crate::registration::{JobSpec, Jobs, Registration};
use crate::scheduler::{ClaimOnly, Leased, Scheduler};

/// A scheduler of either mode.
#[derive(Clone)]
enum Entry {
    Leased(Scheduler<Leased>),
    ClaimOnly(Scheduler<ClaimOnly>),
}

impl Entry {
    fn running(&self) -> bool {
        match self {
            Entry::Leased(s) => s.health().running,
            Entry::ClaimOnly(s) => s.health().running,
        }
    }

    async fn start(&self) -> Result<()> {
        match self {
            Entry::Leased(s) => s.start().await,
            Entry::ClaimOnly(s) => s.start().await,
        }
    }

    fn register_specs<T: Jobs>(
        &self,
        object: &Arc<T>,
        specs: Vec<JobSpec<T>>,
        registration: &Registration,
    ) -> Result<Vec<JobName>> {
        match self {
            Entry::Leased(s) => s.register_specs(object, specs, registration),
            Entry::ClaimOnly(s) => s.register_specs(object, specs, registration),
        }
    }

    fn remove(&self, job: &JobName) {
        let _ = match self {
            Entry::Leased(s) => s.remove(job.as_str()),
            Entry::ClaimOnly(s) => s.remove(job.as_str()),
        };
    }
}

/// A scheduler that can be put in the registry.
pub trait Registered: sealed::Sealed {
    #[doc(hidden)]
    fn into_entry(self) -> EntryBox;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Scheduler<super::Leased> {}
    impl Sealed for super::Scheduler<super::ClaimOnly> {}
}

#[doc(hidden)]
pub struct EntryBox(Entry);

impl Registered for Scheduler<Leased> {
    fn into_entry(self) -> EntryBox {
        EntryBox(Entry::Leased(self))
    }
}

impl Registered for Scheduler<ClaimOnly> {
    fn into_entry(self) -> EntryBox {
        EntryBox(Entry::ClaimOnly(self))
    }
}

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<String, Entry>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<String, Entry>>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Puts `scheduler` in the registry under `name`.
///
/// # Errors
/// [`Error::DuplicateScheduler`] when the name is taken.
pub fn configure(name: &str, scheduler: impl Registered) -> Result<()> {
    let mut reg = registry();
    if reg.contains_key(name) {
        return Err(Error::DuplicateScheduler {
            name: name.to_owned(),
        });
    }
    reg.insert(name.to_owned(), scheduler.into_entry().0);
    Ok(())
}

/// How [`configure_with`] puts a scheduler in the registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    /// Start the scheduler as it is configured (default false: it waits for
    /// [`start_all`] or its own `start()`). Jobs registered on it later are added to the
    /// running scheduler.
    pub auto_start: bool,
}

/// Puts `scheduler` in the registry under `name`, as [`configure`], then starts it if
/// `options.auto_start`.
///
/// # Errors
/// [`Error::DuplicateScheduler`] when the name is taken; the scheduler's start error (the
/// store unreachable, too old ...), in which case it stays configured, not started, and a
/// later [`start_all`] tries again.
pub async fn configure_with(
    name: &str,
    scheduler: impl Registered,
    options: RegistryOptions,
) -> Result<()> {
    let entry = scheduler.into_entry().0;
    {
        let mut reg = registry();
        if reg.contains_key(name) {
            return Err(Error::DuplicateScheduler {
                name: name.to_owned(),
            });
        }
        reg.insert(name.to_owned(), entry.clone());
    }
    if options.auto_start && !entry.running() {
        entry.start().await?;
    }
    Ok(())
}

/// Registers every job of `object` on the registry scheduler it names: a job's own
/// `scheduler` (the `scheduler = "..."` option of `#[anarchon::jobs]`), else the
/// registration's [`Registration::scheduler`]. One object's jobs may so go to several
/// schedulers. All or nothing, as [`Scheduler::register`]: on an error no job of the object
/// stays registered anywhere.
///
/// # Errors
/// [`Error::InvalidOption`] (`scheduler`) for a job that names no scheduler,
/// [`Error::UnknownScheduler`] for a name nobody configured, and every error of
/// [`Scheduler::register`].
pub fn register<T: Jobs>(object: Arc<T>, registration: Registration) -> Result<Vec<JobName>> {
    let mut groups: BTreeMap<String, Vec<JobSpec<T>>> = BTreeMap::new();
    for spec in T::jobs() {
        let Some(name) = spec
            .scheduler
            .clone()
            .or_else(|| registration.scheduler_name().map(str::to_owned))
        else {
            return Err(Error::invalid_option(
                "scheduler",
                format!(
                    "job {:?} names no registry scheduler: give it `scheduler = \"...\"` or \
                     register the object with Registration::new().scheduler(\"...\")",
                    spec.name
                ),
            ));
        };
        groups.entry(name).or_default().push(spec);
    }
    let mut plan = Vec::with_capacity(groups.len());
    {
        let reg = registry();
        for (name, specs) in groups {
            let entry = reg
                .get(&name)
                .cloned()
                .ok_or(Error::UnknownScheduler { name })?;
            plan.push((entry, specs));
        }
    }
    let mut done: Vec<(Entry, Vec<JobName>)> = Vec::with_capacity(plan.len());
    for (entry, specs) in plan {
        match entry.register_specs(&object, specs, &registration) {
            Ok(names) => done.push((entry, names)),
            Err(e) => {
                for (entry, names) in &done {
                    names.iter().for_each(|job| entry.remove(job));
                }
                return Err(e);
            }
        }
    }
    Ok(done.into_iter().flat_map(|(_, names)| names).collect())
}

/// The lease-store scheduler configured as `name`.
///
/// # Errors
/// [`Error::UnknownScheduler`] when no lease-store scheduler has that name.
pub fn leased(name: &str) -> Result<Scheduler<Leased>> {
    match registry().get(name) {
        Some(Entry::Leased(s)) => Ok(s.clone()),
        _ => Err(Error::UnknownScheduler {
            name: name.to_owned(),
        }),
    }
}

/// The claim-only scheduler configured as `name`.
///
/// # Errors
/// [`Error::UnknownScheduler`] when no claim-only scheduler has that name.
pub fn claim_only(name: &str) -> Result<Scheduler<ClaimOnly>> {
    match registry().get(name) {
        Some(Entry::ClaimOnly(s)) => Ok(s.clone()),
        _ => Err(Error::UnknownScheduler {
            name: name.to_owned(),
        }),
    }
}

/// The configured names, sorted.
pub fn names() -> Vec<String> {
    registry().keys().cloned().collect()
}

/// Takes `name` out of the registry (it keeps running until stopped); true if it was there.
pub fn remove(name: &str) -> bool {
    registry().remove(name).is_some()
}

/// Starts every configured scheduler that has not started yet, one after the other.
///
/// # Errors
/// The first scheduler's start error, naming nothing more than that scheduler's error does;
/// the ones before it stay started.
pub async fn start_all() -> Result<()> {
    let all: Vec<Entry> = registry().values().cloned().collect();
    for entry in all {
        if !entry.running() {
            entry.start().await?;
        }
    }
    Ok(())
}

/// Stops every configured scheduler at once, each with `timeout` (so all within about one
/// timeout): runs are handed over as by `stop()`. Safe to call from a signal-handling task;
/// the schedulers stay configured (stopped).
///
/// # Errors
/// The first error a `stop()` returned; the others are stopped all the same.
pub async fn stop_all(timeout: Duration) -> Result<()> {
    let all: Vec<Entry> = registry().values().cloned().collect();
    let stops = all.into_iter().map(|entry| async move {
        match entry {
            Entry::Leased(s) => s.stop(timeout).await,
            Entry::ClaimOnly(s) => s.stop(timeout).await,
        }
    });
    let results = futures::future::join_all(stops).await;
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}
