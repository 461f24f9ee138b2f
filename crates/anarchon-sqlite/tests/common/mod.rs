//! Test helpers: a store on a fresh temporary file that lives as long as the store.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a part of the helpers"
)]

use std::path::PathBuf;
use std::sync::Arc;

use anarchon_core::store::{
    BatchLimits, ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, OwnerWrite, Prepare, Renewal, Result, Retention, RunKey, RunRecord, RunView, Store,
    Takeover, TakeoverOutcome,
};
use anarchon_core::testkit::lease::claim;
use anarchon_core::testkit::unique_job;
use anarchon_sqlite::SqliteStore;
use async_trait::async_trait;
use tempfile::TempDir;

/// A [`SqliteStore`] that owns the temporary directory of its file: the directory goes
/// when the test drops the store.
pub struct TempStore {
    pub store: SqliteStore,
    pub dir: TempDir,
}

impl TempStore {
    pub async fn new() -> TempStore {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::connect(dir.path().join("anarchon.db"))
            .await
            .expect("open store");
        TempStore { store, dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("anarchon.db")
    }

    /// Claims new jobs' runs, 256 a batch, until the WAL holds at least `bytes` (past 1,000
    /// pages, where the store's checkpoint thread is woken: about four pages a won claim);
    /// returns the runs claimed.
    pub async fn claim_until_the_wal_holds(&self, bytes: u64) -> i64 {
        let wal = self.path().with_extension("db-wal");
        let t = self.store.now().await.unwrap();
        let mut claimed = 0i64;
        while std::fs::metadata(&wal).map_or(0, |m| m.len()) < bytes {
            let claims: Vec<_> = (0..256)
                .map(|_| claim(&unique_job("ckpt"), t, "a", t))
                .collect();
            self.store.claim_many(&claims).await.unwrap();
            claimed += 256;
            assert!(claimed < 100_000, "the WAL did not grow");
        }
        claimed
    }
}

/// A fresh store for the conformance kit.
pub async fn fresh() -> Option<Arc<dyn LeaseStore>> {
    Some(Arc::new(TempStore::new().await))
}

#[async_trait]
impl Store for TempStore {
    fn kind(&self) -> &'static str {
        self.store.kind()
    }
    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.store.prepare(prepare).await
    }
    async fn now(&self) -> Result<EpochMs> {
        self.store.now().await
    }
    async fn close(&self) -> Result<()> {
        self.store.close().await
    }
}

#[async_trait]
impl HistoryStore for TempStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.store.history(job, count).await
    }
    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.store.record_manual(record, retention).await
    }
    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.store.known_jobs().await
    }
}

#[async_trait]
impl LeaseStore for TempStore {
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        self.store.claim_many(claims).await
    }
    fn limits(&self) -> BatchLimits {
        self.store.limits()
    }
    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        self.store.heartbeat(leases, lease_ms).await
    }
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        self.store.finish_many(writes).await
    }
    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        self.store.release(lease).await
    }
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        self.store.take_over_many(takeovers).await
    }
    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        self.store.runs(runs).await
    }
    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        self.store.unfinished_runs(jobs).await
    }
    async fn newest_unfinished_runs(
        &self,
        jobs: &[JobName],
        newest: usize,
    ) -> Result<Vec<RunView>> {
        self.store.newest_unfinished_runs(jobs, newest).await
    }
    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<RunKey>> {
        self.store.subscribe_releases()
    }
    fn set_watching(&self, watching: bool) {
        self.store.set_watching(watching)
    }
}
