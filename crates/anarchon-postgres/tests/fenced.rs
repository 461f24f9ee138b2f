//! Fenced transactions on a real PostgreSQL server: each test on a schema of its own, with
//! the store's `LeaseStore` calls standing in for the scheduler and for a backup instance,
//! and a `ledger` table standing in for the handler's own writes.

mod common;

use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Error, FenceLoss, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore,
    Overlap, OwnerWrite, Prepare, Reason, Renewal, Retention, RunKey, RunStatus, Store, Takeover,
    TakeoverOutcome,
};
use anarchon_core::testkit::context_for;
use anarchon_postgres::{PostgresOptions, PostgresStore};
use tokio_postgres::{Client, NoTls};

/// A prepared store on a fresh schema, with a `ledger` table beside its tables.
struct Fixture {
    url: String,
    schema: String,
    store: PostgresStore,
}

impl Fixture {
    async fn new() -> Option<Fixture> {
        Fixture::with(PostgresOptions::default()).await
    }

    async fn with(options: PostgresOptions) -> Option<Fixture> {
        let url = common::url()?;
        common::drop_old_schemas(&url).await;
        let schema = common::fresh_schema();
        let store = PostgresStore::connect_with(&url, options.schema(&schema).pool_size(4))
            .await
            .expect("connect");
        store
            .prepare(&Prepare {
                jobs: vec![],
                instance_id: "test".into(),
                call_timeout: Duration::from_secs(5),
            })
            .await
            .expect("prepare");
        common::exec(
            &url,
            &format!(
                "CREATE TABLE \"{schema}\".ledger (job text NOT NULL, slot int8 NOT NULL, \
                 attempt int4 NOT NULL)"
            ),
        )
        .await
        .expect("ledger table");
        Some(Fixture { url, schema, store })
    }

    /// A connection of the handler's own.
    async fn client(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
    }

    /// The handler's write.
    fn insert(&self) -> String {
        format!(
            "INSERT INTO \"{}\".ledger (job, slot, attempt) VALUES ($1, $2, $3)",
            self.schema
        )
    }

    /// The ledger rows of a run, read on a connection of their own.
    async fn ledger(&self, run: &RunKey) -> Vec<i32> {
        let client = self.client().await;
        client
            .query(
                &format!(
                    "SELECT attempt FROM \"{}\".ledger WHERE job = $1 AND slot = $2 ORDER BY attempt",
                    self.schema
                ),
                &[&run.job.as_str(), &run.slot],
            )
            .await
            .expect("read the ledger")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Claims `slot` of `job` for `instance` with a lease of `lease_ms`.
    async fn claim(&self, job: &JobName, slot: i64, instance: &str, lease_ms: u64) -> Lease {
        let now = self.store.now().await.expect("now");
        let claim = LeaseClaim {
            run: RunKey::new(job.clone(), slot),
            scheduled_at: slot,
            instance_id: instance.into(),
            lease_ms,
            not_after: now + 60_000,
            overlap: Overlap::Allow,
            reason: Reason::Scheduled,
            retention: Retention::default(),
        };
        match self.store.claim(&claim).await.expect("claim") {
            ClaimOutcome::Won(lease) => lease,
            other => panic!("claim of {job} {slot}: {other:?}"),
        }
    }

    /// A backup's takeover of `lease`'s run.
    async fn take_over(&self, lease: &Lease, instance: &str) -> TakeoverOutcome {
        self.store
            .take_over(&self.takeover(lease, instance).await)
            .await
            .expect("take over")
    }

    async fn takeover(&self, lease: &Lease, instance: &str) -> Takeover {
        let now = self.store.now().await.expect("now");
        Takeover {
            run: lease.run.clone(),
            seen_attempt: lease.attempt,
            instance_id: instance.into(),
            lease_ms: 30_000,
            max_attempts: 5,
            superseded: false,
            not_after: now + 60_000,
        }
    }

    async fn status(&self, run: &RunKey) -> RunStatus {
        let views = self
            .store
            .runs(std::slice::from_ref(run))
            .await
            .expect("runs");
        views.first().expect("the run").status
    }

    /// Waits on the store's clock until `lease` has ended.
    async fn outlive(&self, lease: &Lease) {
        loop {
            let now = self.store.now().await.expect("now");
            if now > lease.expires_at {
                return;
            }
            tokio::time::sleep(Duration::from_millis(
                u64::try_from(lease.expires_at - now).unwrap_or(0) + 5,
            ))
            .await;
        }
    }

    async fn cleanup(self) {
        let _ = self.store.close().await;
        common::drop_schema(&self.url, &self.schema).await;
    }
}

fn job(prefix: &str) -> JobName {
    anarchon_core::testkit::unique_job(prefix)
}

fn loss(e: Error) -> FenceLoss {
    match e {
        Error::Fenced { loss, .. } => loss,
        other => panic!("expected Error::Fenced, got {other:?}"),
    }
}

#[tokio::test]
async fn b45_commit_finished_records_the_success_with_the_write_and_a_takeover_finds_it() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-finish");
    let lease = f.claim(&job, 1_000, "owner", 30_000).await;
    let ctx = context_for(&lease);
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &ctx)
        .await
        .expect("begin");
    assert_eq!(tx.attempt_key(), &ctx.attempt_key().unwrap());
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    assert!(!ctx.is_finished_in_transaction());
    tx.commit_finished().await.expect("commit finished");
    assert!(ctx.is_finished_in_transaction(), "the scheduler is told");

    assert_eq!(f.ledger(&lease.run).await, vec![1]);
    assert_eq!(f.status(&lease.run).await, RunStatus::Succeeded);
    let history = f.store.history(&job, 10).await.expect("history");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].status, RunStatus::Succeeded);
    assert_eq!(history[0].attempt, 1);
    assert!(history[0].finished_at.is_some(), "{history:?}");
    assert_eq!(history[0].error, None);
    // The owner finds the run finished (no second result), the backup too.
    let finish = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(
        f.store.finish(&lease, &finish).await.unwrap(),
        OwnerWrite::Lost
    );
    f.outlive(&lease).await;
    assert_eq!(
        f.take_over(&lease, "backup").await,
        TakeoverOutcome::Finished(RunStatus::Succeeded)
    );
    // The connection is usable after the commit.
    client.simple_query("SELECT 1").await.expect("usable");
    f.cleanup().await;
}

#[tokio::test]
async fn b45_an_open_transaction_holds_takeover_off_after_the_lease_ended_but_not_heartbeats() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-live");
    let lease = f.claim(&job, 1_000, "owner", 300).await;
    // A run of another job whose lease ends too, taken over in the same batch.
    let other_job = self::job("fenced-other");
    let other = f.claim(&other_job, 1_000, "owner", 300).await;
    let ctx = context_for(&lease);
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &ctx)
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    f.outlive(&lease).await;
    f.outlive(&other).await;

    // The open transaction's run is live; the other run of the batch is taken at once.
    let batch = [
        f.takeover(&lease, "backup").await,
        f.takeover(&other, "backup").await,
    ];
    let started = std::time::Instant::now();
    let outcomes = f.store.take_over_many(&batch).await.expect("take over");
    assert_eq!(outcomes[0], TakeoverOutcome::Live, "{outcomes:?}");
    assert!(
        matches!(outcomes[1], TakeoverOutcome::Won(_)),
        "{outcomes:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the takeover did not wait for the transaction"
    );

    // The owner's heartbeat renews the lease while the transaction is open.
    let renewed = tokio::time::timeout(
        Duration::from_secs(2),
        f.store.heartbeat(std::slice::from_ref(&lease), 300),
    )
    .await
    .expect("a heartbeat is not held up by the transaction")
    .expect("heartbeat");
    assert!(matches!(renewed[0], Renewal::Renewed { .. }), "{renewed:?}");
    let renewed_lease = Lease {
        expires_at: match renewed[0] {
            Renewal::Renewed { expires_at } => expires_at,
            Renewal::Lost => unreachable!(),
        },
        ..lease.clone()
    };
    f.outlive(&renewed_lease).await;
    assert_eq!(f.take_over(&lease, "backup").await, TakeoverOutcome::Live);

    tx.commit_finished().await.expect("commit finished");
    assert_eq!(
        f.take_over(&lease, "backup").await,
        TakeoverOutcome::Finished(RunStatus::Succeeded)
    );
    assert_eq!(f.ledger(&lease.run).await, vec![1]);
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_plain_commit_keeps_the_run_running_and_a_later_takeover_sees_the_write() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-plain");
    let lease = f.claim(&job, 1_000, "owner", 300).await;
    let ctx = context_for(&lease);
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &ctx)
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    f.outlive(&lease).await;
    assert_eq!(f.take_over(&lease, "backup").await, TakeoverOutcome::Live);
    // The lease ended, but no one took the run: the commit keeps the write.
    tx.commit().await.expect("commit");
    assert!(!ctx.is_finished_in_transaction());
    assert_eq!(f.status(&lease.run).await, RunStatus::Running);
    // Now the backup takes over, and its attempt sees attempt 1's write.
    let TakeoverOutcome::Won(second) = f.take_over(&lease, "backup").await else {
        panic!("the takeover wins once the transaction ended");
    };
    assert_eq!(second.attempt, 2);
    assert_eq!(f.ledger(&lease.run).await, vec![1]);
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_transaction_is_refused_with_the_right_loss_when_the_attempt_does_not_own_the_run() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let mut client = f.client().await;

    // Taken over before the transaction began: superseded, and nothing is written.
    let job = job("fenced-refused");
    let lease = f.claim(&job, 1_000, "owner", 200).await;
    f.outlive(&lease).await;
    let TakeoverOutcome::Won(second) = f.take_over(&lease, "backup").await else {
        panic!("takeover");
    };
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&lease))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer owns the run"), "{err}");
    assert_eq!(loss(err), FenceLoss::Superseded);
    assert!(f.ledger(&lease.run).await.is_empty());
    // The connection is ready for the next statement (the refusal rolled back).
    client.simple_query("SELECT 1").await.expect("usable");

    // The new owner's transaction is accepted; with a stale fence it is not.
    let tx = f
        .store
        .fenced_transaction(&mut client, &context_for(&second))
        .await
        .expect("the new owner begins");
    tx.rollback().await.expect("rollback");
    let stale_fence = Lease {
        fence: second.fence + 1,
        ..second.clone()
    };
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&stale_fence))
        .await
        .unwrap_err();
    assert_eq!(loss(err), FenceLoss::Superseded);

    // Lease ended (nobody took over yet).
    let ended = f.claim(&job, 2_000, "owner", 100).await;
    f.outlive(&ended).await;
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&ended))
        .await
        .unwrap_err();
    assert_eq!(loss(err), FenceLoss::LeaseEnded);

    // Handed over.
    let released = f.claim(&job, 3_000, "owner", 30_000).await;
    assert_eq!(f.store.release(&released).await.unwrap(), OwnerWrite::Done);
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&released))
        .await
        .unwrap_err();
    assert_eq!(loss(err), FenceLoss::Released);

    // Finished.
    let done = f.claim(&job, 4_000, "owner", 30_000).await;
    let finish = Finish {
        status: RunStatus::Failed,
        error: Some("boom".into()),
        retention: Retention::default(),
    };
    assert_eq!(
        f.store.finish(&done, &finish).await.unwrap(),
        OwnerWrite::Done
    );
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&done))
        .await
        .unwrap_err();
    assert_eq!(loss(err), FenceLoss::Finished(RunStatus::Failed));

    // Never claimed.
    let missing = Lease {
        run: RunKey::new(job.clone(), 9_000),
        ..done.clone()
    };
    let err = f
        .store
        .fenced_transaction(&mut client, &context_for(&missing))
        .await
        .unwrap_err();
    assert_eq!(loss(err), FenceLoss::Missing);
    client.simple_query("SELECT 1").await.expect("usable");
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_claim_that_interrupts_the_run_meanwhile_makes_the_commit_fail_and_keeps_nothing() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-interrupted");
    let lease = f.claim(&job, 1_000, "owner", 300).await;
    let ctx = context_for(&lease);
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &ctx)
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    f.outlive(&lease).await;
    // The next slot's claim marks the ended run interrupted (the transaction does not hold
    // claims off).
    let _next = f.claim(&job, 2_000, "other", 30_000).await;
    assert_eq!(f.status(&lease.run).await, RunStatus::Interrupted);
    let err = tx.commit_finished().await.unwrap_err();
    assert_eq!(loss(err), FenceLoss::Finished(RunStatus::Interrupted));
    assert!(!ctx.is_finished_in_transaction());
    assert!(f.ledger(&lease.run).await.is_empty(), "nothing was kept");
    assert_eq!(f.status(&lease.run).await, RunStatus::Interrupted);
    client.simple_query("SELECT 1").await.expect("usable");
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_handover_while_the_transaction_is_open_makes_the_commit_fail() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-released");
    let lease = f.claim(&job, 1_000, "owner", 30_000).await;
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &context_for(&lease))
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    assert_eq!(f.store.release(&lease).await.unwrap(), OwnerWrite::Done);
    // The backup waits while the transaction is open ...
    assert_eq!(f.take_over(&lease, "backup").await, TakeoverOutcome::Live);
    let err = tx.commit().await.unwrap_err();
    assert_eq!(loss(err), FenceLoss::Released);
    assert!(f.ledger(&lease.run).await.is_empty());
    // ... and takes the run once it ended.
    assert!(matches!(
        f.take_over(&lease, "backup").await,
        TakeoverOutcome::Won(_)
    ));
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_dropped_connection_frees_the_run_and_keeps_nothing() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-dropped");
    let lease = f.claim(&job, 1_000, "owner", 200).await;
    let (mut client, connection) = tokio_postgres::connect(&f.url, NoTls).await.unwrap();
    let task = tokio::spawn(connection);
    {
        let tx = f
            .store
            .fenced_transaction(&mut client, &context_for(&lease))
            .await
            .expect("begin");
        tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
            .await
            .expect("insert");
        f.outlive(&lease).await;
        assert_eq!(f.take_over(&lease, "backup").await, TakeoverOutcome::Live);
        // The process dies mid-transaction: its socket closes without a ROLLBACK.
        std::mem::forget(tx);
    }
    task.abort();
    drop(client);
    let won = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let TakeoverOutcome::Won(l) = f.take_over(&lease, "backup").await {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the server ends the session and frees the run");
    assert_eq!(won.attempt, 2);
    assert!(f.ledger(&lease.run).await.is_empty());
    f.cleanup().await;
}

#[tokio::test]
async fn b45_an_owner_frozen_with_the_transaction_open_is_cut_off_by_the_idle_bound() {
    let Some(f) =
        Fixture::with(PostgresOptions::default().fenced_idle_timeout(Duration::from_millis(500)))
            .await
    else {
        return;
    };
    let job = job("fenced-frozen");
    let lease = f.claim(&job, 1_000, "owner", 200).await;
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &context_for(&lease))
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    // The owner sends nothing from here on, as a stopped process would: the idle bound
    // (500 ms) counts from its last statement.
    let started = std::time::Instant::now();
    f.outlive(&lease).await;
    assert_eq!(f.take_over(&lease, "backup").await, TakeoverOutcome::Live);
    let won = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let TakeoverOutcome::Won(l) = f.take_over(&lease, "backup").await {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the server ends the idle session and frees the run");
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "freed {:?} after the owner's last statement: before the idle bound (500 ms)",
        started.elapsed()
    );
    assert_eq!(won.attempt, 2);
    // The owner wakes and commits: refused, nothing kept.
    let err = tx.commit_finished().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("nothing of the transaction was kept"),
        "{err}"
    );
    assert!(f.ledger(&lease.run).await.is_empty());
    assert_eq!(f.status(&lease.run).await, RunStatus::Running);
    f.cleanup().await;
}

#[tokio::test]
async fn b45_a_failed_statement_makes_the_commit_fail_and_keeps_nothing() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-aborted");
    let lease = f.claim(&job, 1_000, "owner", 30_000).await;
    let ctx = context_for(&lease);
    let mut client = f.client().await;
    let tx = f
        .store
        .fenced_transaction(&mut client, &ctx)
        .await
        .expect("begin");
    tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
        .await
        .expect("insert");
    assert!(tx.execute("SELECT 1/0", &[]).await.is_err());
    let err = tx.commit_finished().await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(!ctx.is_finished_in_transaction());
    assert!(f.ledger(&lease.run).await.is_empty());
    assert_eq!(f.status(&lease.run).await, RunStatus::Running);
    client.simple_query("SELECT 1").await.expect("usable");
    f.cleanup().await;
}

#[tokio::test]
async fn b45_the_stores_pool_and_quoted_instance_ids_work_and_a_nul_is_refused() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let job = job("fenced-pool_x");
    let owner = "o'brien \"the\" owner; DROP TABLE x; --";
    let lease = f.claim(&job, 1_000, owner, 30_000).await;
    let ctx = context_for(&lease);
    {
        let mut conn = f.store.connection().await.expect("pooled connection");
        let tx = f
            .store
            .fenced_transaction(&mut conn, &ctx)
            .await
            .expect("begin");
        tx.execute(&f.insert(), &[&job.as_str(), &1_000_i64, &1_i32])
            .await
            .expect("insert");
        tx.commit_finished().await.expect("commit finished");
    }
    assert!(ctx.is_finished_in_transaction());
    assert_eq!(f.ledger(&lease.run).await, vec![1]);
    assert_eq!(f.status(&lease.run).await, RunStatus::Succeeded);

    let nul = Lease {
        instance_id: "bad\0id".into(),
        ..lease.clone()
    };
    let mut conn = f.store.connection().await.expect("pooled connection");
    let err = f
        .store
        .fenced_transaction(&mut conn, &context_for(&nul))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err:?}");
    drop(conn);

    // A manual run holds no lease.
    let mut manual = context_for(&lease);
    manual.manual = true;
    let mut conn = f.store.connection().await.expect("pooled connection");
    let err = f
        .store
        .fenced_transaction(&mut conn, &manual)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFenceable { .. }), "{err:?}");
    f.cleanup().await;
}

/// The owner (its lease ending about when it begins) and a backup (taking over as soon as
/// the lease ended) race on many slots, each through fenced transactions: every slot ends
/// with exactly one ledger row and the run succeeded, whichever side won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b45_owner_and_backup_racing_write_exactly_one_row_per_slot() {
    let Some(f) = Fixture::new().await else {
        return;
    };
    let f = std::sync::Arc::new(f);
    let job = job("fenced-race");
    let mut by_owner = 0;
    let mut by_backup = 0;
    for slot in 0..40_i64 {
        let lease = f.claim(&job, slot, "owner", 40).await;
        let owner = {
            let f = f.clone();
            let lease = lease.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 60)).await;
                let mut client = f.client().await;
                let ctx = context_for(&lease);
                let tx = match f.store.fenced_transaction(&mut client, &ctx).await {
                    Ok(tx) => tx,
                    Err(Error::Fenced { .. }) => return false,
                    Err(e) => panic!("begin: {e}"),
                };
                tx.execute(
                    &f.insert(),
                    &[&lease.run.job.as_str(), &lease.run.slot, &1_i32],
                )
                .await
                .expect("insert");
                match tx.commit_finished().await {
                    Ok(()) => true,
                    Err(Error::Fenced { .. }) => false,
                    Err(e) => panic!("commit: {e}"),
                }
            })
        };
        let backup = {
            let f = f.clone();
            let lease = lease.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 80)).await;
                loop {
                    match f.take_over(&lease, "backup").await {
                        TakeoverOutcome::Live => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        TakeoverOutcome::Finished(RunStatus::Succeeded) => return false,
                        TakeoverOutcome::Won(second) => {
                            let mut client = f.client().await;
                            let tx = f
                                .store
                                .fenced_transaction(&mut client, &context_for(&second))
                                .await
                                .expect("the backup's attempt owns the run");
                            tx.execute(
                                &f.insert(),
                                &[&second.run.job.as_str(), &second.run.slot, &2_i32],
                            )
                            .await
                            .expect("insert");
                            tx.commit_finished().await.expect("commit");
                            return true;
                        }
                        other => panic!("takeover: {other:?}"),
                    }
                }
            })
        };
        let (owner_wrote, backup_wrote) = (owner.await.unwrap(), backup.await.unwrap());
        assert!(owner_wrote != backup_wrote, "slot {slot}: one side writes");
        by_owner += usize::from(owner_wrote);
        by_backup += usize::from(backup_wrote);
        let rows = f.ledger(&lease.run).await;
        assert_eq!(rows.len(), 1, "slot {slot}: {rows:?}");
        assert_eq!(rows[0], if owner_wrote { 1 } else { 2 });
        assert_eq!(f.status(&lease.run).await, RunStatus::Succeeded);
    }
    eprintln!("slots written by the owner: {by_owner}, by the backup: {by_backup}");
    match std::sync::Arc::try_unwrap(f) {
        Ok(f) => f.cleanup().await,
        Err(_) => panic!("the fixture is still shared"),
    }
}
