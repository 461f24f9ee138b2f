//! What a fenced transaction checks: this attempt of this run, and why it can lose.
//!
//! A handler whose side effects are rows in the same database as the scheduler's runs
//! (PostgreSQL, SQLite) can commit them in a *fenced transaction* that the store crate opens
//! from the handler's [`JobContext`]: the transaction first checks, inside itself, that the
//! attempt in [`AttemptKey`] still owns the run and holds that fact until commit. Either it
//! commits while this attempt owns the run, or it fails with [`Error::Fenced`] and nothing of
//! it is kept. When it also records the run's success in the same commit, the scheduler
//! writes no result of its own for the attempt ([`JobContext::mark_finished_in_transaction`]):
//! the side effect and "this slot is done" are one commit, exactly once.
//!
//! The store crates (`anarchon-postgres`, `anarchon-sqlite`) hold the transactions; this
//! module only names what they check.

use std::fmt;

use crate::context::JobContext;
use crate::error::{Error, Result};
use crate::history::RunStatus;
use crate::ids::RunKey;

/// This attempt of this run: what a fenced transaction checks in the store (the run row's
/// attempt, owner and fence, as written by the claim or takeover that started it).
///
/// ```
/// # fn demo(ctx: &anarchon_core::JobContext) -> anarchon_core::Result<()> {
/// let key = ctx.attempt_key()?; // an error for manual runs and claim-only stores
/// assert_eq!(key.attempt, ctx.attempt);
/// assert_eq!(key.fence, ctx.fence);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptKey {
    /// The run (job and slot).
    pub run: RunKey,
    /// The attempt (1, 2 ...).
    pub attempt: u32,
    /// The owner as recorded in the store (this instance's id).
    pub instance_id: String,
    /// The attempt's fencing token.
    pub fence: u64,
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} attempt {} (fence {})",
            self.run, self.attempt, self.fence
        )
    }
}

/// Why a fenced transaction was refused or rolled back: what the store found instead of
/// this attempt owning the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FenceLoss {
    /// No run row for the job and slot (pruned, or never claimed).
    Missing,
    /// The run is final already (succeeded, failed or interrupted).
    Finished(RunStatus),
    /// Another attempt or owner holds the run now (taken over after this attempt's lease
    /// ended).
    Superseded,
    /// The run was handed over (graceful stop): it waits for a backup.
    Released,
    /// This attempt's lease had ended on the store's clock when the transaction began.
    LeaseEnded,
}

impl fmt::Display for FenceLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceLoss::Missing => f.write_str("the run is not in the store"),
            FenceLoss::Finished(status) => write!(f, "the run is already {status}"),
            FenceLoss::Superseded => f.write_str("another attempt owns the run"),
            FenceLoss::Released => f.write_str("the run was handed over"),
            FenceLoss::LeaseEnded => f.write_str("this attempt's lease has ended"),
        }
    }
}

impl JobContext {
    /// The attempt a fenced transaction checks. An error ([`Error::NotFenceable`]) for
    /// manual runs and runs on claim-only stores, which hold no lease to check.
    pub fn attempt_key(&self) -> Result<AttemptKey> {
        if self.manual || self.fence == 0 {
            return Err(Error::NotFenceable {
                job: self.name.to_string(),
                why: if self.manual {
                    "a manual run (run_now) holds no lease"
                } else {
                    "runs on claim-only stores hold no lease"
                },
            });
        }
        Ok(AttemptKey {
            run: RunKey::new(self.name.clone(), self.slot_ms()),
            attempt: self.attempt,
            instance_id: self.instance_id.to_string(),
            fence: self.fence,
        })
    }

    /// Tells the scheduler that a fenced transaction recorded this attempt `succeeded` and
    /// committed. Store crates call it right after that commit; the scheduler then writes no
    /// result of its own for this attempt, whatever the handler returns, and reports a
    /// success. Called without such a commit, the run stays `running` in the store until its
    /// lease expires and a backup runs it again.
    pub fn mark_finished_in_transaction(&self) {
        self.control.mark_finished_in_transaction();
    }

    /// Whether a fenced transaction recorded this attempt's success
    /// ([`JobContext::mark_finished_in_transaction`]).
    pub fn is_finished_in_transaction(&self) -> bool {
        self.control.is_finished_in_transaction()
    }
}
