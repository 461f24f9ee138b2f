//! Pruning after a batch: the jobs a claim or result batch found due to prune (see
//! `sql::PRUNE_EVERY`) are pruned by a statement of their own (`sql::prune_sql`), after the
//! batch committed and outside its job locks, by one background task per store
//! ([`Inner::prune_later`]): [`PRUNED_PER_STATEMENT`] jobs a statement, one statement after
//! the other. The claims' and results' answers do not wait for it (a result's call that
//! also waited for its prune ran past the scheduler's timeout on a loaded server, and the
//! results it had committed were reported as unknown), and a store never has more than one
//! such statement on the server.
//!
//! **The window** (opt-in). With a prune window (`PostgresOptions::prune_window`, zero by
//! default) the task waits for the next multiple of it on the wall clock before it prunes,
//! and then prunes every waiting job in job order. Every instance so prunes at the same
//! moments, and a job is found due every few won claims (see `sql::PRUNE_EVERY`), so at a
//! window's end nearly every job claimed every second is pruned, each of the rows of the
//! same slots: rows that the claims wrote side by side, into the same table pages, and that
//! a prune of jobs one by one as each was found due read and wrote page by page, each page
//! once for each of its rows' jobs. 3 x 10,000 `every 1s` jobs on 2 cores, PostgreSQL with
//! autovacuum, minutes 6 to 10: 7,430 prune statements and 132 s of the server's time
//! without the window, 1,360 statements and 70 s with it, 1,298 and 84 s in a second run
//! (`pg_stat_statements`; the share of slots started in their second did not move beyond the
//! runs' noise, and with autovacuum off the window saved nothing; hence off by default). A
//! store dropped or closed meanwhile ends the wait, and with it the task; `pruning_settled`
//! (tests) ends it too.
//!
//! Pruning is never needed for correctness, only to keep a job's history bounded, so a
//! prune that fails (a timeout, a deadlock with another instance's prune of the same job) is
//! logged and left to the job's next prune, which removes everything below the job's cut,
//! not only what the failed one would have. When [`PENDING_JOBS`] jobs wait already (the
//! server cannot keep up), a result batch prunes its own due jobs before it returns
//! ([`Inner::prune_now`]), so the results slow down rather than the histories grow; a
//! claim batch leaves them out (its claims must not wait), and its jobs are pruned by
//! their next results or due claims.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anarchon_core::store::{Result, Retention};
use tokio_postgres::types::Type;

use crate::Inner;
use crate::store::{Batch, JobLock, Step};

/// The most jobs one prune statement prunes: each costs an ordered scan of up to `size`
/// history keys and the deletes below the cut, so a statement of 128 jobs at 100 runs each
/// stays well within the store's timeout.
pub(crate) const PRUNED_PER_STATEMENT: usize = 128;

/// The most jobs waiting for the background prune of one store.
pub(crate) const PENDING_JOBS: usize = 65_536;

/// The jobs waiting for the background prune, with the retention each is pruned to, in job
/// order.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    jobs: BTreeMap<String, Retention>,
    /// True from the background task's start, through its wait for the window, until it
    /// finds no job waiting and ends.
    running: bool,
}

/// Clears [`Pending::running`] if the background task ends without clearing it itself (a
/// panic in it, or the task dropped): the next [`Inner::prune_later`] then starts a new
/// task, instead of leaving the jobs to wait for one that no longer runs (and
/// `pruning_settled` waiting for ever). The task disarms it where it ends on its own, in
/// the same critical section that finds no job waiting.
struct RunningGuard<'a> {
    pending: &'a Mutex<Pending>,
    armed: bool,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .running = false;
        }
    }
}

impl Inner {
    /// Prunes `due` (a job may appear more than once; its last retention counts) now, in
    /// statements of [`PRUNED_PER_STATEMENT`] jobs.
    pub(crate) async fn prune_now<'j>(
        &self,
        due: impl IntoIterator<Item = (&'j str, Retention)>,
    ) -> Result<()> {
        let jobs: Vec<(&str, Retention)> = due
            .into_iter()
            .collect::<HashMap<_, _>>()
            .into_iter()
            .collect();
        for chunk in jobs.chunks(PRUNED_PER_STATEMENT) {
            self.prune_statement(chunk).await?;
        }
        Ok(())
    }

    /// Adds `due` to the jobs the background task prunes, and starts it when it is not
    /// running. Returns at once, with the jobs left out because [`PENDING_JOBS`] jobs
    /// wait already.
    pub(crate) fn prune_later<'j>(
        self: &Arc<Self>,
        due: impl IntoIterator<Item = (&'j str, Retention)>,
    ) -> Vec<(String, Retention)> {
        let mut pending = self
            .pending_prunes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut left_out = Vec::new();
        for (job, retention) in due {
            if let Some(kept) = pending.jobs.get_mut(job) {
                *kept = retention;
            } else if pending.jobs.len() < PENDING_JOBS {
                pending.jobs.insert(job.to_owned(), retention);
            } else {
                left_out.push((job.to_owned(), retention));
            }
        }
        if !left_out.is_empty() {
            tracing::debug!(
                left_out = left_out.len(),
                "postgres pruning is behind: {PENDING_JOBS} jobs wait for it"
            );
        }
        if !pending.running && !pending.jobs.is_empty() {
            pending.running = true;
            // The task holds the store only once the window ends, so a store dropped
            // meanwhile is not kept (with its pool) for up to a window.
            let store: Weak<Inner> = Arc::downgrade(self);
            let wait = until_window_ends(self.prune_window, SystemTime::now());
            let wake = Arc::clone(&self.prune_wake);
            let shutdown = self.shutdown.clone();
            tokio::spawn(async move {
                if !wait.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = wake.notified() => {}
                        () = shutdown.cancelled() => {}
                    }
                }
                if let Some(inner) = store.upgrade() {
                    inner.prune_pending().await;
                }
            });
        }
        left_out
    }

    /// The background task: prunes the waiting jobs until none waits or the store closes.
    async fn prune_pending(self: Arc<Self>) {
        let mut guard = RunningGuard {
            pending: &self.pending_prunes,
            armed: true,
        };
        loop {
            let batch: Vec<(String, Retention)> = {
                let mut pending = self
                    .pending_prunes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if pending.jobs.is_empty() || self.closed.load(Ordering::SeqCst) {
                    pending.running = false;
                    guard.armed = false;
                    return;
                }
                let jobs: Vec<String> = pending
                    .jobs
                    .keys()
                    .take(PRUNED_PER_STATEMENT)
                    .cloned()
                    .collect();
                jobs.into_iter()
                    .filter_map(|job| pending.jobs.remove(&job).map(|r| (job, r)))
                    .collect()
            };
            let jobs: Vec<(&str, Retention)> =
                batch.iter().map(|(j, r)| (j.as_str(), *r)).collect();
            if let Err(e) = self.prune_statement(&jobs).await {
                tracing::warn!(
                    target_url = %self.target,
                    jobs = jobs.len(),
                    "postgres pruning after claims failed (the jobs' next prune makes up for it): {e}"
                );
            }
        }
    }

    /// Waits until no job waits for the background prune and the task is idle, waking the
    /// task if it waits for its window.
    pub(crate) async fn pruning_settled(&self) {
        loop {
            self.prune_wake.notify_one();
            {
                let pending = self
                    .pending_prunes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if !pending.running && pending.jobs.is_empty() {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// One prune statement for `jobs` (each once), in a transaction of its own that takes no
    /// job lock, after `sql::Sql::prune_settings` and the lock of the jobs' remembered cuts
    /// (`sql::Sql::lock_cuts`: the prunes of a job take turns).
    async fn prune_statement(&self, jobs: &[(&str, Retention)]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = jobs.iter().map(|(j, _)| *j).collect();
        let sizes: Vec<i64> = jobs.iter().map(|(_, r)| i64::from(r.size)).collect();
        let ttls: Vec<Option<i64>> = jobs
            .iter()
            .map(|(_, r)| r.ttl_ms.map(|t| i64::try_from(t).unwrap_or(i64::MAX / 2)))
            .collect();
        let steps = [
            Step {
                sql: &self.sql.prune_settings,
                types: &[],
                params: Vec::new(),
                counted: false,
            },
            Step {
                sql: &self.sql.lock_cuts,
                types: &[Type::TEXT_ARRAY],
                params: vec![&names],
                counted: false,
            },
            Step {
                sql: &self.sql.prune,
                types: &[Type::TEXT_ARRAY, Type::INT8_ARRAY, Type::INT8_ARRAY],
                params: vec![&names, &sizes, &ttls],
                counted: true,
            },
        ];
        match self
            .locked_batch("prune", JobLock::None, &steps, None, &self.pruning)
            .await?
        {
            Batch::LockWaitEnded => return Err(self.lock_wait_ended("prune")),
            Batch::Committed(_) | Batch::RolledBack(_) | Batch::PastDeadline { .. } => {}
        }
        Ok(())
    }
}

/// How long a background prune started at `now` waits: until the next multiple of `window`
/// since the Unix epoch (a whole window at a multiple itself); zero for a zero window or a
/// clock before the epoch.
pub(crate) fn until_window_ends(window: Duration, now: SystemTime) -> Duration {
    let Ok(since) = now.duration_since(UNIX_EPOCH) else {
        return Duration::ZERO;
    };
    let window_ns = window.as_nanos();
    if window_ns == 0 {
        return Duration::ZERO;
    }
    let into = since.as_nanos() % window_ns;
    // Below `window`, at most an hour: fits.
    Duration::from_nanos(u64::try_from(window_ns - into).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_prune_waits_for_the_next_multiple_of_its_window() {
        let w = Duration::from_secs(16);
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(until_window_ends(w, at(1_600_000)), w);
        assert_eq!(
            until_window_ends(w, at(1_600_001)),
            Duration::from_millis(15_999)
        );
        assert_eq!(
            until_window_ends(w, at(1_615_999)),
            Duration::from_millis(1)
        );
        // Every instance ends its windows at the same moments, whenever it starts to wait.
        for start in [1_600_100, 1_607_000, 1_615_500] {
            assert_eq!(at(start) + until_window_ends(w, at(start)), at(1_616_000));
        }
        // The extremes: no window, the longest, a clock before the epoch, a far future.
        assert_eq!(until_window_ends(Duration::ZERO, at(1_234)), Duration::ZERO);
        let hour = crate::MAX_PRUNE_WINDOW;
        assert_eq!(
            until_window_ends(hour, at(3_600_000 * 5 + 1)),
            hour - Duration::from_millis(1)
        );
        assert_eq!(
            until_window_ends(w, UNIX_EPOCH - Duration::from_secs(1)),
            Duration::ZERO
        );
        let far = UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 64);
        assert!(until_window_ends(hour, far) <= hour);
    }

    #[test]
    fn a_background_prune_that_panics_leaves_the_next_one_free_to_start() {
        let pending = Mutex::new(Pending {
            jobs: BTreeMap::new(),
            running: true,
        });
        let unwound = std::panic::catch_unwind(|| {
            let _guard = RunningGuard {
                pending: &pending,
                armed: true,
            };
            panic!("a prune task panics");
        });
        assert!(unwound.is_err());
        assert!(!pending.lock().unwrap().running, "still marked running");
    }

    #[test]
    fn a_background_prune_that_ends_on_its_own_leaves_the_flag_to_the_task() {
        // Disarmed where the task cleared the flag itself: a task started meanwhile keeps it.
        let pending = Mutex::new(Pending {
            jobs: BTreeMap::new(),
            running: true,
        });
        drop(RunningGuard {
            pending: &pending,
            armed: false,
        });
        assert!(pending.lock().unwrap().running);
    }
}
