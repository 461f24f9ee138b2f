//! Core of anarchon: slot math, options, the store traits, the scheduler runtime, the
//! in-memory reference store and the store conformance kit.
//!
//! anarchon lets many instances of a service register the same scheduled jobs while each
//! occurrence (slot) of a job is started by one instance only. Instances claim a slot
//! atomically in a shared store; on lease stores the winner renews a lease by heartbeat and
//! backups take over when it expires. The guarantee is **at-least-once after a failure**,
//! never exactly-once side effects: handlers must be idempotent.
//!
//! ```
//! use std::time::Duration;
//! use anarchon_core::{memory::MemoryStore, Scheduler};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
//! scheduler.cron("report", "0 3 * * *").timezone("Europe/Berlin").handler(|ctx| async move {
//!     println!("report for slot {} (fence {})", ctx.slot, ctx.fence);
//!     Ok(())
//! })?;
//! scheduler.start().await?;
//! scheduler.stop(Duration::from_secs(5)).await?;
//! # Ok::<_, anarchon_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Where things live
//! - The crate root: what a user of the scheduler needs — [`Scheduler`] and its builders,
//!   [`JobContext`], [`HandlerError`], [`Event`], [`HistoryRecord`], the option types and
//!   [`Error`]. Times are [`chrono::DateTime<Utc>`](chrono::DateTime) (re-exported as
//!   [`chrono`]), durations `std::time::Duration`.
//! - [`store`]: what a store author needs — the [`LeaseStore`] / [`ClaimStore`] traits,
//!   their contract and argument types ([`store::LeaseClaim`], [`store::Renewal`],
//!   [`store::RunRecord`] ...), all in epoch milliseconds.
//! - [`slot`]: pure slot math (interval grid, cron in IANA timezones, `at`, jitter).
//! - [`options`]: job options, scheduler defaults, validation.
//! - [`event`], [`history`], [`context`]: what the runtime reports, keeps and hands to handlers.
//! - [`memory`]: the in-memory reference store, for tests of your own jobs.
//! - [`registration`]: objects whose methods are jobs ([`registration::Jobs`], written by
//!   `#[anarchon::jobs]`), registered with [`Scheduler::register`]; [`registry`]: named
//!   schedulers for the whole process.
//!
//! # Feature flags
//! - `testkit` (off by default): the store conformance kit and the bench frame, for store
//!   crates' tests.
//!
//! # MSRV
//! Rust 1.89 (edition 2024); raised only in a minor release.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod bench;
mod cancel;
/// Shared by the claim-only broker stores (RabbitMQ, NATS), written once.
pub mod claim_only;
pub mod context;
pub mod error;
pub mod event;
pub mod fenced;
pub mod history;
pub mod ids;
pub mod memory;
pub mod options;
pub mod registration;
pub mod registry;
mod scheduler;
/// The deterministic simulator's entry points (feature `sim`, for `crates/anarchon-sim`):
/// a whole cluster of scheduler cores on virtual time against the in-memory store's model,
/// every fault from one seed. Not a stable API.
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim {
    pub use crate::scheduler::sim::{
        Faults, Planted, Report, SimConfig, jobs_drawn, run, timeline_of,
    };
}
pub mod slot;
mod status;
pub mod store;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use context::AttemptKey;
pub use context::{CancelCause, Data, DataFn, DataSource, JobContext};
pub use error::{BoxError, Error, ErrorKind, HandlerError, Result, SchedulerState, redact_url};
pub use event::{Event, FailureCause, InterruptCause, RunInfo, SkipReason, StoreOperation};
pub use fenced::FenceLoss;
pub use history::{HistoryRecord, Reason, RunStatus};
pub use ids::{EpochMs, InstanceId, JobName};
pub use options::{CatchUp, JobConfig, JobKind, JobOptions, LeaseTiming, StoreShape};
pub use scheduler::{
    ClaimOnly, Clock, Health, IntoAt, IntoInterval, IntoTimezone, JobBuilder, JobInfo, Leased,
    Mode, Scheduler, SchedulerBuilder, kind,
};
pub use store::{ClaimStore, LeaseStore, Overlap};

/// Re-exported: the times in contexts, events and history are `chrono::DateTime<Utc>`.
pub use chrono;
/// Re-exported: timezones of cron jobs.
pub use chrono_tz;
/// Re-exported: [`Data`] holds a `serde_json::Value`.
pub use serde_json;
/// Re-exported so users and store crates name one version.
pub use tokio_util::sync::CancellationToken;
