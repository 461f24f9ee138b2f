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

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::scheduler::{ClaimOnly, Leased, Scheduler};

/// A scheduler of either mode.
#[derive(Clone)]
enum Entry {
    Leased(Scheduler<Leased>),
    ClaimOnly(Scheduler<ClaimOnly>),
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
        let started = match &entry {
            Entry::Leased(s) => s.health().running,
            Entry::ClaimOnly(s) => s.health().running,
        };
        if started {
            continue;
        }
        match entry {
            Entry::Leased(s) => s.start().await?,
            Entry::ClaimOnly(s) => s.start().await?,
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
