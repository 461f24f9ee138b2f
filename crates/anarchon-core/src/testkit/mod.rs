//! The conformance kit every store runs against itself (feature `testkit`). [B-44]
//!
//! A store crate writes one test file:
//!
//! ```ignore
//! use std::sync::Arc;
//! use anarchon_core::LeaseStore;
//!
//! async fn store() -> Option<Arc<dyn LeaseStore>> {
//!     let url = anarchon_core::testkit::server_url("ANARCHON_REDIS_URL")?;
//!     Some(Arc::new(my_store_with_a_fresh_prefix(&url).await))
//! }
//!
//! anarchon_core::lease_store_suite!(store);
//! ```
//!
//! The macro expands to one `#[tokio::test]` per behaviour, named after it with its id in
//! `docs/behaviour.md` (`b14_takeover_after_expiry_...`; `s11_...` for the goals G-01 to
//! G-12), so a failure names what broke. The factory must
//! return a **fresh** store (new file, schema or key prefix) on every call, or `None` when
//! its server is not configured (after [`server_url`] printed why). Core runs the same kit on
//! [`crate::memory::MemoryStore`] under tokio's paused clock (`lease_store_suite!(f, paused)`).
//!
//! The kit has two parts: [`lease`] and [`claim`] call the store traits directly and check
//! the contract in [`crate::store`]; [`runtime`] drives schedulers (several instances on one
//! store) through the lease behaviours B-11 to B-21 with short leases.

pub mod claim;
pub mod lease;
pub mod runtime;

use std::sync::Arc;
use std::time::Duration;

use crate::store::{EpochMs, JobName, RunKey};

/// Reads a server URL from `var` (`ANARCHON_REDIS_URL` ...). When it is unset, prints a
/// `SKIP` line naming the variable and how to start the server, and returns `None`; with
/// `ANARCHON_REQUIRE_SERVERS=1` it panics instead, so CI cannot pass by skipping.
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            if require_servers() {
                panic!(
                    "{var} is not set and ANARCHON_REQUIRE_SERVERS=1: start the test servers with \
                     `cargo xtask test-servers --brokers` and run the tests with `cargo xtask test`"
                );
            }
            eprintln!(
                "SKIP {var} is not set: this server-backed test did not run \
                 (start servers with `cargo xtask test-servers`, then `cargo xtask test`)"
            );
            None
        }
    }
}

/// True when `ANARCHON_REQUIRE_SERVERS=1`.
pub fn require_servers() -> bool {
    std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// True when the slow suite (real processes and clocks) is selected (`ANARCHON_SLOW=1`).
pub fn slow_enabled() -> bool {
    std::env::var("ANARCHON_SLOW").is_ok_and(|v| v == "1")
}

/// A job name unique to this test run, so tests sharing a server never collide.
pub fn unique_job(prefix: &str) -> JobName {
    let n: u32 = rand::random();
    JobName::new(format!("{prefix}-{n:08x}")).expect("valid job name")
}

/// The run key of `job` at `slot`.
pub fn key(job: &JobName, slot: EpochMs) -> RunKey {
    RunKey::new(job.clone(), slot)
}

/// A handler's context for the attempt `lease` holds (what the scheduler would hand the
/// handler it starts for that lease), for store crates' tests of fenced transactions.
pub fn context_for(lease: &crate::store::Lease) -> crate::context::JobContext {
    let control = Arc::new(crate::context::RunControl::new(None));
    let slot = chrono::DateTime::from_timestamp_millis(lease.run.slot).unwrap_or_default();
    crate::context::JobContext {
        name: lease.run.job.clone(),
        slot,
        scheduled_at: chrono::DateTime::from_timestamp_millis(lease.scheduled_at).unwrap_or(slot),
        instance_id: Arc::from(lease.instance_id.as_str()),
        manual: false,
        attempt: lease.attempt,
        reason: lease.reason,
        fence: lease.fence,
        signal: control.token(),
        data: Arc::new(crate::context::Data::new()),
        control,
    }
}

/// Sleeps on tokio's clock (advanced instantly under a paused clock).
pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Shared handle type the kit uses.
pub type Shared<T> = Arc<T>;

#[doc(hidden)]
#[macro_export]
macro_rules! __kit_test {
    ($factory:path, [], $module:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Some(store) = $factory().await {
                $crate::testkit::$module::$name(store).await;
            }
        }
    };
    ($factory:path, [paused], $module:ident, $name:ident) => {
        #[tokio::test(start_paused = true)]
        async fn $name() {
            if let Some(store) = $factory().await {
                $crate::testkit::$module::$name(store).await;
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kit_tests {
    ($factory:path, $mode:tt, $module:ident, $($name:ident),* $(,)?) => {
        $( $crate::__kit_test!($factory, $mode, $module, $name); )*
    };
}

/// Expands to the whole lease-store conformance suite: one test per behaviour, the store
/// contract ([`lease_store_contract!`](crate::lease_store_contract)) and the runtime
/// behaviours ([`lease_runtime_suite!`](crate::lease_runtime_suite)). See the
/// [module docs](crate::testkit).
#[macro_export]
macro_rules! lease_store_suite {
    ($factory:path $(, $mode:ident)?) => {
        $crate::__lease_store_tests!($factory, [$($mode)?]);
        $crate::__runtime_tests!($factory, [$($mode)?]);
    };
}

/// Expands to the store-level half of the lease suite only (the trait contract, called
/// directly). For a stand-in server too slow for the runtime half's short leases.
#[macro_export]
macro_rules! lease_store_contract {
    ($factory:path $(, $mode:ident)?) => {
        $crate::__lease_store_tests!($factory, [$($mode)?]);
    };
}

/// Expands to the runtime half of the lease suite only (several schedulers on one store).
#[macro_export]
macro_rules! lease_runtime_suite {
    ($factory:path $(, $mode:ident)?) => {
        $crate::__runtime_tests!($factory, [$($mode)?]);
    };
}

/// Expands to the claim-only conformance suite: one test per behaviour.
#[macro_export]
macro_rules! claim_store_suite {
    ($factory:path $(, $mode:ident)?) => {
        $crate::__claim_store_tests!($factory, [$($mode)?]);
    };
}
