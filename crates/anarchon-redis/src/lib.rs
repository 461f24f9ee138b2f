//! Redis and Valkey stores for anarchon: the `lease` strategy ([`RedisStore`], default) and
//! the claim-only strategies `stream-id`, `idmp` and `script` ([`RedisClaimStore`]).
//!
//! ```no_run
//! # async fn demo() -> anarchon_core::Result<()> {
//! use anarchon_core::Scheduler;
//! use anarchon_redis::{RedisOptions, RedisStore};
//!
//! let store = RedisStore::connect_with(
//!     "redis://127.0.0.1:6379",
//!     RedisOptions::default().prefix("myapp:"),
//! )
//! .await?;
//! let scheduler = Scheduler::leased(store).build()?;
//! # let _ = scheduler; Ok(()) }
//! ```
//!
//! # Building a store
//! The same three ways in every anarchon store crate:
//! - [`RedisStore::connect`]`(url)`: connects at once and checks the server;
//! - [`RedisStore::connect_with`]`(url, options)`: the same with [`RedisOptions`];
//! - [`RedisStore::from_client`]`(client, options)`: on your own `fred` client.
//!
//! [`RedisClaimStore`] has the same three, each with a [`Strategy`].
//!
//! # Servers
//! `lease`, `stream-id` and `script` need Redis 5.0 or newer, or any Valkey; `idmp` needs
//! Redis 8.6 or newer (stream idempotency) and is refused on Valkey. The server is
//! recognised from `INFO server` (`valkey_version` / `server_name`).
//!
//! # Keys
//! Every key starts with the prefix (default `anarchon:`) and then the job's hash tag, so
//! all keys of one job sit in one hash slot and the store works on a Redis Cluster:
//! `anarchon:{nightly}:run:1764460800000`. Besides: `anarchon:jobs` (known jobs),
//! `anarchon:meta` (key format version, 2) and the pub/sub channel `anarchon:releases`. A
//! key of the wrong type under the prefix is reported as [`anarchon_core::Error::Corrupt`]
//! naming it, with nothing half-written (a failed claim may have advanced the job's fence
//! counter, nothing else); nothing anarchon did not write is deleted. Keys of format 1 are
//! refused by `prepare`, not migrated: delete them or use another prefix.
//!
//! # Feature flags
//! - `tls` (default): `rediss://` URLs, through rustls.
//!
//! # MSRV
//! The workspace's `rust-version`; raising it is a minor-version change.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod claim;
mod conn;
mod error;
mod lease;
mod options;
mod pubsub;
mod scripts;
mod text;
mod url;

pub use claim::{RedisClaimStore, Strategy};
pub use error::RedisError;
/// The `fred` crate this store is built on, to build a client of your own.
pub use fred;
pub use lease::RedisStore;
pub use options::RedisOptions;
