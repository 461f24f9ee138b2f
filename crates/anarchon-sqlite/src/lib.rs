//! SQLite lease store for anarchon: every process that opens the same file on one host
//! starts each slot of a job once, and a backup takes over a crashed run. [B-43]
//!
//! ```no_run
//! # async fn f() -> anarchon_core::Result<()> {
//! use anarchon_core::Scheduler;
//! use anarchon_sqlite::SqliteStore;
//!
//! let store = SqliteStore::connect("anarchon.db").await?;
//! let scheduler = Scheduler::leased(store).build()?;
//! # let _ = scheduler; Ok(()) }
//! ```
//!
//! # Building a store
//! The same ways as in every anarchon store crate: [`SqliteStore::connect`]`(path)` and
//! [`SqliteStore::connect_with`]`(path, `[`SqliteOptions`]`)`, both async and ready when
//! they return. (The `from_*` form of the other crates has no counterpart here: the store
//! needs its own connection on its own thread, so it takes the file's path.)
//!
//! The store uses `rusqlite` with its bundled SQLite (3.54), so no system library is
//! needed. It opens the file in WAL mode with a busy timeout, runs every write as one
//! `BEGIN IMMEDIATE` transaction, judges leases on the host clock (all processes share the
//! host), keeps a per-job strictly increasing fence, and records its schema version in
//! `<prefix>_meta`. Blocking calls run on a thread of their own, never on the runtime's
//! workers. File locks must work: NFS and other network filesystems are not supported
//! (use PostgreSQL, Redis or a libSQL server across machines).
//!
//! # Fenced transactions
//! A handler whose side effects are rows in the store's own file can write them in a
//! [`FencedTransaction`]: `BEGIN IMMEDIATE` on a connection to the file
//! ([`SqliteStore::open_connection`]), a check that the handler's attempt still owns its
//! run, the handler's statements, and a commit that can record the run's success in the
//! same commit ([`FencedTransaction::commit_finished`]). The write lock is held from the
//! check to the commit, so no takeover, claim, heartbeat or result of any process runs in
//! between: the rows commit while the attempt owns the run, or not at all
//! ([`anarchon_core::Error::Fenced`]). [`SqliteStore::fenced_transaction`] is the async
//! form. The lock is the file's: a transaction open for N ms delays every writer of the
//! file by up to N ms. Attached databases are refused (in WAL mode SQLite commits each
//! file on its own).
//!
//! # Feature flags
//! - `rusqlite` (default): the store on a local file ([`SqliteStore`]).
//! - `unstable-sql`: makes public the modules `sql` (the schema, the statements and the
//!   row mapping, which the libSQL store `anarchon-libsql` runs on a remote server and the
//!   `anarchon` command reads with) and `releases`. They are shared code of the anarchon
//!   crates, not an API: they may change in any release.
//! - `testkit`: test-only hooks (`SqliteStore::empty_write`, the benchmark's baseline).
//!
//! # Versions
//! The bundled SQLite is 3.54; the SQL needs SQLite ≥ 3.35 (`RETURNING`). MSRV: the
//! workspace's `rust-version`, raised only with a minor release.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The SQL the libSQL store and the `anarchon` command share with this store: public only
// with the `unstable-sql` feature, for those crates, outside the semver promise.
#[cfg(feature = "unstable-sql")]
#[cfg_attr(docsrs, doc(cfg(feature = "unstable-sql")))]
pub mod releases;
#[cfg(not(feature = "unstable-sql"))]
#[allow(unreachable_pub, dead_code)]
mod releases;
#[cfg(feature = "unstable-sql")]
#[cfg_attr(docsrs, doc(cfg(feature = "unstable-sql")))]
pub mod sql;
#[cfg(not(feature = "unstable-sql"))]
#[allow(unreachable_pub, dead_code)]
mod sql;

#[cfg(feature = "rusqlite")]
mod checkpoint;
#[cfg(feature = "rusqlite")]
mod error;
#[cfg(feature = "rusqlite")]
mod fenced;
#[cfg(feature = "rusqlite")]
mod store;
#[cfg(feature = "rusqlite")]
mod watcher;

#[cfg(feature = "rusqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "rusqlite")))]
pub use error::SqliteError;
#[cfg(feature = "rusqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "rusqlite")))]
pub use fenced::FencedTransaction;
#[cfg(feature = "rusqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "rusqlite")))]
pub use store::{DEFAULT_BUSY_TIMEOUT, MAX_TIMEOUT, MIN_CALL_TIMEOUT, SqliteOptions, SqliteStore};
