//! NATS JetStream claim-only store for anarchon: one instance wins each slot through
//! JetStream's message deduplication ([`NatsStore`]).
//!
//! ```no_run
//! # async fn demo() -> anarchon_core::Result<()> {
//! use anarchon_core::Scheduler;
//! use anarchon_nats::{NatsOptions, NatsStore};
//!
//! let store = NatsStore::connect_with("nats://127.0.0.1:4222", NatsOptions::default()).await?;
//! let scheduler = Scheduler::claim_only(store).build()?;
//! scheduler
//!     .every("sync", "10s")
//!     .handler(|ctx| async move {
//!         println!("slot {} on {}", ctx.slot, ctx.instance_id);
//!         Ok(())
//!     })?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```
//!
//! # What a claim-only store does not give you
//! There is no lease: a run that dies is not taken over, a slot missed while every instance
//! was down is not caught up, a failed run is not retried and runs of one job may overlap.
//! Use a lease store (PostgreSQL, Redis `lease`, SQLite) where that matters.
//!
//! # Servers
//! nats-server 2.9 or newer with JetStream enabled (`-js`); checked by `prepare`, which
//! also creates the stream or refuses an existing one with other settings.
//!
//! # Feature flags
//! None: `nats://` and `tls://` URLs both work (TLS through rustls with the ring provider).
//!
//! # MSRV
//! The workspace's `rust-version`; raising it is a minor-version change.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod options;
mod store;
mod url;

/// The store kind in errors and logs.
pub(crate) const STORE: &str = "nats";

/// The `async-nats` crate this store is built on, to build a client of your own.
pub use async_nats;
pub use error::NatsError;
pub use options::{NatsOptions, Storage};
pub use store::NatsStore;
