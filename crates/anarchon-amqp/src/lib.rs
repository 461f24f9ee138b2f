//! RabbitMQ claim-only store for anarchon: one instance wins each slot through a gate queue
//! that holds one message and publisher confirms ([`AmqpStore`]).
//!
//! ```no_run
//! # async fn demo() -> anarchon_core::Result<()> {
//! use anarchon_amqp::{AmqpOptions, AmqpStore};
//! use anarchon_core::Scheduler;
//!
//! let store =
//!     AmqpStore::connect_with("amqp://guest:guest@127.0.0.1:5672/%2f", AmqpOptions::default())
//!         .await?;
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
//! RabbitMQ 3.9 or newer (stream queues keep the history), recognised from the server
//! properties of the connection; an older server is refused with
//! [`anarchon_core::Error::ServerTooOld`].
//!
//! # Feature flags
//! None. `amqps://` is not built in yet: pass a TLS connection of your own to
//! [`AmqpStore::from_connection`].
//!
//! # MSRV
//! The workspace's `rust-version`; raising it is a minor-version change.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod options;
mod store;
mod url;

/// The store kind in errors and logs.
pub(crate) const STORE: &str = "rabbitmq";

/// The `amqprs` crate this store is built on, to open a connection of your own.
pub use amqprs;
pub use error::AmqpError;
pub use options::AmqpOptions;
pub use store::AmqpStore;
