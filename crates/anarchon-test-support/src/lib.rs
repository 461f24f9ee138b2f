//! Test support of the anarchon workspace, a dev-dependency of the store crates and the root
//! tests (never published): what several test suites had a copy of.
//!
//! - [`FaultProxy`]: a TCP proxy on a spare loopback port that loses the answer to a chosen
//!   request, or plays an outage.
//! - [`server_url`], [`require_servers`], [`unobtainable`]: where a test finds its server and
//!   what it does without one — a visible `SKIP` line, or a failure under
//!   `ANARCHON_REQUIRE_SERVERS=1`.
//! - [`reachable`], [`spare_port`], [`wait_port`]: is something listening, and where can a
//!   server of the test's own listen.
//! - [`OwnNats`], [`OwnRedis`], [`OwnPostgres`], [`SqliteLock`]: servers (and an SQLite
//!   lock holder) a test starts for itself, to freeze, kill and restart.
//! - [`CapturedLogs`]: everything the process logs, read back as text.
//!
//! ```no_run
//! # async fn demo() {
//! use anarchon_test_support::{FaultProxy, server_url};
//!
//! let Some(url) = server_url("ANARCHON_NATS_URL") else { return };
//! let proxy = FaultProxy::start(4222).await;
//! proxy.arm(b"PUB anarchon.claim.");
//! // ... connect the store to 127.0.0.1:{proxy.port}: the next claim's answer is lost.
//! # let _ = url; }
//! ```

mod logs;
mod own;
mod proxy;
mod servers;

pub use anarchon_core::testkit::{require_servers, server_url};
pub use logs::CapturedLogs;
pub use own::{OwnNats, OwnPostgres, OwnRedis, SqliteLock, redis_server_installed};
pub use proxy::FaultProxy;
pub use servers::{reachable, spare_port, unobtainable, wait_port};
