//! Carries out the core's store requests on the real store, each bounded by the store
//! timeout, and `start()`'s synchronous part (prepare the store, measure the clocks).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Answer, ClockSample, Now, Request, SWEPT_PER_JOB, skew_event};
use super::{Backend, JobDef, Shared};
use crate::error::{Error, Result};
use crate::store::Prepare;

/// `start()`'s `prepare` call may take this many store timeouts (see [`prepare`]).
const PREPARE_BOUND_FACTOR: u32 = 4;

/// Runs a store call under the scheduler's store timeout.
pub(crate) async fn bounded<T>(
    shared: &Shared,
    operation: &'static str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    within(shared, shared.cfg.store_timeout, operation, fut).await
}

async fn within<T>(
    shared: &Shared,
    after: Duration,
    operation: &'static str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(after, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            store: shared.backend.history().kind(),
            operation,
            after,
        }),
    }
}

/// The instance clock and the shell's monotonic clock, read together.
pub(crate) fn now(shared: &Shared, origin: Instant) -> Now {
    Now {
        mono: super::core::micros(origin.elapsed()),
        epoch_us: shared.cfg.clock.now_micros(),
    }
}

/// `start()`'s synchronous part: prepare the store and check the clocks. [B-20, B-33]
pub(crate) async fn prepare(shared: &Arc<Shared>, jobs: &[Arc<JobDef>]) -> Result<ClockSample> {
    let store = shared.backend.history();
    let prep = Prepare {
        jobs: jobs.iter().map(|j| j.name.clone()).collect(),
        instance_id: shared.cfg.instance_id.to_string(),
        call_timeout: shared.cfg.store_timeout,
    };
    // Preparing creates the schema and registers every job, possibly waiting for other
    // instances doing the same at once (thousands of jobs on a few instances): it gets
    // `PREPARE_BOUND_FACTOR` store timeouts, every other call one.
    let after = shared
        .cfg
        .store_timeout
        .saturating_mul(PREPARE_BOUND_FACTOR);
    within(shared, after, "prepare", store.prepare(&prep)).await?;
    let origin = Instant::now();
    let store_now = bounded(shared, "now", store.now()).await?;
    let at = now(shared, origin);
    // A claim must commit before the call's timeout less the round trip and 10 ms: a
    // timeout no longer than that would make every claim late, silently.
    let rtt = origin.elapsed();
    if shared.cfg.store_timeout <= rtt + Duration::from_millis(10) {
        return Err(Error::OutOfRange {
            option: "store_timeout",
            value: format!("{:?}", shared.cfg.store_timeout),
            allowed: format!(
                "longer than the store's round trip plus 10 ms ({:?} measured now): every \
                 claim would reach the store after its deadline",
                rtt + Duration::from_millis(10)
            ),
        });
    }
    if let Some(event) = skew_event(at.epoch_ms(), store_now, 0, shared.cfg.skew_threshold_ms) {
        super::telemetry::warn_skew(&event);
        let _ = shared.events.send(event);
    }
    Ok(ClockSample::measure(store_now, 0, at))
}

/// Sends one request to the store, bounded by the store timeout.
pub(crate) async fn execute(shared: &Shared, request: Request) -> Answer {
    let operation = request.operation();
    let shape = request.shape();
    match within(
        shared,
        shared.cfg.store_timeout,
        operation,
        send(&shared.backend, request),
    )
    .await
    {
        Ok(answer) => answer,
        Err(e) => shape.failed(e),
    }
}

/// The request on the store; a failure is the store's error.
async fn send(backend: &Backend, request: Request) -> Result<Answer> {
    let lease_store = || match backend {
        Backend::Lease(s) => Ok(s),
        Backend::Claim(s) => Err(Error::store(
            s.kind(),
            "call",
            "a lease call reached a claim-only store (a bug in anarchon)",
        )),
    };
    Ok(match request {
        Request::Claim { claims } => Answer::Claims(lease_store()?.claim_many(&claims).await),
        Request::ClaimSlot(claim) => match backend {
            Backend::Claim(s) => Answer::Slot(s.claim_slot(&claim).await),
            Backend::Lease(s) => Answer::Slot(Err(Error::store(
                s.kind(),
                "claim",
                "a claim-only call reached a lease store (a bug in anarchon)",
            ))),
        },
        Request::Heartbeat { leases, lease_ms } => {
            Answer::Renewals(lease_store()?.heartbeat(&leases, lease_ms).await)
        }
        Request::Runs(keys) => Answer::Runs(lease_store()?.runs(&keys).await),
        Request::Unfinished(jobs) => Answer::Runs(lease_store()?.unfinished_runs(&jobs).await),
        Request::Sweep(jobs) => Answer::Runs(
            lease_store()?
                .newest_unfinished_runs(&jobs, SWEPT_PER_JOB)
                .await,
        ),
        Request::TakeOver { takeovers } => {
            Answer::Takeovers(lease_store()?.take_over_many(&takeovers).await)
        }
        Request::Finish { writes } => Answer::Writes(lease_store()?.finish_many(&writes).await),
        Request::Release(lease) => Answer::Released(lease_store()?.release(&lease).await),
        Request::Record {
            record,
            retention,
            claim_only,
        } => Answer::Recorded(match backend {
            Backend::Claim(s) if claim_only => s.record(&record, retention).await,
            other => other.history().record_manual(&record, retention).await,
        }),
    })
}
