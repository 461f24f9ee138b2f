//! What a fenced transaction checks: this attempt of this run, and why it can lose.
//!
//! A handler whose side effects are rows in the same database as the scheduler's runs
//! (PostgreSQL, SQLite) can commit them in a *fenced transaction* that the store crate opens
//! from the handler's [`crate::JobContext`]: the transaction first checks, inside itself, that the
//! attempt in [`crate::AttemptKey`] still owns the run and holds that fact until commit. Either it
//! commits while this attempt owns the run, or it fails with [`crate::Error::Fenced`] and nothing of
//! it is kept. When it also records the run's success in the same commit, the scheduler
//! writes no result of its own for the attempt ([`crate::JobContext::mark_finished_in_transaction`]):
//! the side effect and "this slot is done" are one commit, exactly once.
//!
//! The store crates (`anarchon-postgres`, `anarchon-sqlite`) hold the transactions; this
//! module names why one can lose ([`FenceLoss`]); [`crate::AttemptKey`] (beside the
//! context) is what they check.

use std::fmt;

use crate::status::RunStatus;

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
