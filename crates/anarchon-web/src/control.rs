//! The scheduler handle behind the dashboard, whatever its mode (leased or claim-only).

use anarchon_core::{Health, HistoryRecord, JobInfo, Mode, Scheduler};
use futures::future::BoxFuture;

/// What the dashboard asks of a scheduler.
pub(crate) trait Control: Send + Sync + 'static {
    fn jobs(&self) -> Vec<JobInfo>;
    fn health(&self) -> Health;
    fn run_now(&self, job: String) -> BoxFuture<'static, anarchon_core::Result<HistoryRecord>>;
}

impl<M: Mode> Control for Scheduler<M> {
    fn jobs(&self) -> Vec<JobInfo> {
        Scheduler::jobs(self)
    }

    fn health(&self) -> Health {
        Scheduler::health(self)
    }

    fn run_now(&self, job: String) -> BoxFuture<'static, anarchon_core::Result<HistoryRecord>> {
        let scheduler = self.clone();
        Box::pin(async move { scheduler.run_now(&job, None).await })
    }
}
