//! anarchon: a distributed job scheduler. Many instances register the same `every` /
//! `cron` / `at` jobs; each occurrence (slot) of a job starts on **one** instance only, and a
//! crashed run is taken over by a backup.
//!
//! Instances claim each slot atomically in a shared store. On the lease stores (SQLite,
//! libSQL, PostgreSQL, Redis/Valkey `lease`) the winner renews a lease by heartbeat; when it
//! stops renewing, a backup starts attempt 2; a graceful stop hands the run over at once;
//! missed slots are caught up on start. The guarantee is **at-least-once after a failure**:
//! handlers must be idempotent, and a process frozen longer than its lease can overlap
//! briefly with the instance that replaced it (its signal is cancelled as soon as it knows).
//!
//! ```no_run
//! use std::time::Duration;
//! use anarchon::{Scheduler, sqlite::SqliteStore};
//!
//! # async fn demo() -> anarchon::Result<()> {
//! let store = SqliteStore::connect("jobs.db").await?;
//! let scheduler = Scheduler::leased(store).build()?;
//! scheduler.every("sync", "10s").handler(|ctx| async move {
//!     ctx.check_cancelled()?;
//!     println!("slot {} attempt {}", ctx.slot, ctx.attempt);
//!     Ok(())
//! })?;
//! scheduler.start().await?;
//! tokio::signal::ctrl_c().await.ok();
//! scheduler.stop(Duration::from_secs(30)).await?;
//! # Ok(()) }
//! ```
//!
//! # Feature flags
//! | feature | store | crate |
//! |---|---|---|
//! | `sqlite` (default) | SQLite file, several processes on one host | `anarchon-sqlite` |
//! | `libsql` | libSQL server (`libsql://`, `http(s)://`) | `anarchon-libsql` |
//! | `postgres` | PostgreSQL ≥ 9.5 | `anarchon-postgres` |
//! | `redis` | Redis ≥ 5, Valkey | `anarchon-redis` |
//! | `amqp` | RabbitMQ ≥ 3.9 (claim-only) | `anarchon-amqp` |
//! | `nats` | NATS JetStream, nats-server ≥ 2.9 (claim-only) | `anarchon-nats` |
//! | `all-stores` | all of the above | |
//!
//! Everything else is re-exported from [`anarchon_core`]: at the root what a user of the
//! scheduler needs (times are `chrono::DateTime<Utc>`, lengths `std::time::Duration`,
//! handlers return `Result<(), HandlerError>`), and under [`store`] what a store author
//! needs. Next steps — events, history, `run_now`, `remove`, other stores, production
//! settings — are in the repository's `docs/guide.md` and `examples/newcomer.rs`.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use anarchon_core::*;

pub mod any;

/// Turns the methods of an `impl` block marked `#[every("10s")]`, `#[cron("0 9 * * *")]` or
/// `#[at("2027-01-01T00:00:00Z")]` into jobs; register an object with
/// [`Scheduler::register`] (see [`registration`] and the `anarchon-macros` crate for the
/// attribute options).
///
/// ```
/// use std::sync::Arc;
/// use anarchon::{memory::MemoryStore, registration::Registration, HandlerError, JobContext, Scheduler};
///
/// struct Billing;
///
/// #[anarchon::jobs]
/// impl Billing {
///     #[every("1h", timeout = "5m")]
///     async fn invoice(&self, ctx: JobContext) -> Result<(), HandlerError> {
///         ctx.check_cancelled()?;
///         Ok(())
///     }
/// }
///
/// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
/// scheduler.register(Arc::new(Billing), Registration::new().prefix("eu"))?;
/// assert_eq!(scheduler.jobs()[0].name.as_str(), "eu-Billing-invoice");
/// # Ok::<_, anarchon::Error>(())
/// ```
pub use anarchon_macros::jobs;

/// The SQLite store.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use anarchon_sqlite as sqlite;

/// The libSQL store.
#[cfg(feature = "libsql")]
#[cfg_attr(docsrs, doc(cfg(feature = "libsql")))]
pub use anarchon_libsql as libsql;

/// The PostgreSQL store.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use anarchon_postgres as postgres;

/// The Redis / Valkey stores.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use anarchon_redis as redis;

/// The RabbitMQ store (claim-only).
#[cfg(feature = "amqp")]
#[cfg_attr(docsrs, doc(cfg(feature = "amqp")))]
pub use anarchon_amqp as amqp;

/// The NATS JetStream store (claim-only).
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub use anarchon_nats as nats;

/// The README's code, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// docs/guide.md's snippets, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
struct GuideDoctests;

/// The web dashboard (an axum `Router`).
#[cfg(feature = "web")]
#[cfg_attr(docsrs, doc(cfg(feature = "web")))]
pub use anarchon_web as web;
