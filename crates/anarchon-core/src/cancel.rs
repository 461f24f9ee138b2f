//! Why a run's cancellation signal fired ([`CancelCause`]): named by the handler's context
//! and by [`Error::Cancelled`](crate::Error::Cancelled), so it lives below both.

use std::fmt;

/// Why a run's signal was cancelled. [B-16, B-17, B-21]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelCause {
    /// The scheduler is stopping: return an error to hand the run over.
    Stopping,
    /// The job's `timeout` passed: the attempt is recorded as failed.
    TimedOut,
    /// Another instance took the run over: this attempt's result is not recorded.
    LeaseLost,
    /// This instance could not renew the lease in time and cancelled the run before the
    /// lease could have expired (self-fencing).
    LeaseNotRenewed,
    /// The handler itself saw the local lease deadline pass (for example after the process
    /// was frozen) before the scheduler could renew the lease.
    LeaseDeadlinePassed,
}

impl CancelCause {
    /// `"stopping"`, `"timed out"`, `"lease lost"`, `"lease not renewed"` or
    /// `"lease deadline passed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelCause::Stopping => "stopping",
            CancelCause::TimedOut => "timed out",
            CancelCause::LeaseLost => "lease lost",
            CancelCause::LeaseNotRenewed => "lease not renewed",
            CancelCause::LeaseDeadlinePassed => "lease deadline passed",
        }
    }

    /// True for the causes after which a handler's error hands the run over instead of
    /// failing it: the run did not fail, its owner had to let go.
    pub(crate) fn hands_over(self) -> bool {
        matches!(
            self,
            CancelCause::Stopping | CancelCause::LeaseNotRenewed | CancelCause::LeaseDeadlinePassed
        )
    }
}

impl fmt::Display for CancelCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
