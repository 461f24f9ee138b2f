//! What a fenced transaction costs beside a plain one, in the same run on the same
//! connection: each transaction inserts one row and commits.
//!
//! ```text
//! cargo run -p anarchon-postgres --example postgres-fenced-cost -- [postgres-url] [transactions]
//! ```
//!
//! The URL defaults to `ANARCHON_POSTGRES_URL`, the count to 2000. The three kinds take
//! turns (plain, fenced + `commit`, fenced + `commit_finished`), first with the server's
//! `synchronous_commit` on (every commit waits for its WAL flush), then off (the round trips
//! and the server's work alone). Each `commit_finished` ends a run of its own, claimed
//! before the clock starts. The tables live in a fresh schema, dropped at the end.

use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, Lease, LeaseClaim, LeaseStore, Overlap, Prepare, Reason, Retention, RunKey, Store,
};
use anarchon_core::{JobName, testkit::context_for};
use anarchon_postgres::{PostgresOptions, PostgresStore};
use tokio_postgres::{Client, NoTls, Statement};

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> BoxResult<()> {
    let mut args = std::env::args().skip(1);
    let url = match args.next() {
        Some(url) => url,
        None => std::env::var("ANARCHON_POSTGRES_URL")
            .map_err(|_| "give a PostgreSQL URL, or set ANARCHON_POSTGRES_URL")?,
    };
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let schema = format!("anarchon_cost_{:08x}", rand::random::<u32>());
    let store =
        PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema)).await?;
    store
        .prepare(&Prepare {
            jobs: vec![],
            instance_id: "cost".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await?;
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".ledger (id bigserial PRIMARY KEY, slot int8 NOT NULL, \
             kind text NOT NULL)"
        ))
        .await?;
    let insert = client
        .prepare(&format!(
            "INSERT INTO \"{schema}\".ledger (slot, kind) VALUES ($1, $2)"
        ))
        .await?;

    println!("{n} transactions of each kind, each inserting one row and committing");
    let result = async {
        for sync in [true, false] {
            client
                .batch_execute(if sync {
                    "SET synchronous_commit = on"
                } else {
                    "SET synchronous_commit = off"
                })
                .await?;
            measure(&store, &mut client, &insert, n, sync).await?;
        }
        BoxResult::Ok(())
    }
    .await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await;
    store.close().await?;
    result
}

/// Claims `n` runs of a fresh job (each `commit_finished` ends one), outside the timing.
async fn claim_runs(store: &PostgresStore, job: &JobName, n: usize) -> BoxResult<Vec<Lease>> {
    let now = store.now().await?;
    let claims: Vec<LeaseClaim> = (0..n)
        .map(|i| LeaseClaim {
            run: RunKey::new(job.clone(), i as i64),
            scheduled_at: i as i64,
            instance_id: "cost".into(),
            lease_ms: 600_000,
            not_after: now + 600_000,
            overlap: Overlap::Allow,
            reason: Reason::Scheduled,
            retention: Retention {
                size: u32::try_from(n).unwrap_or(u32::MAX).saturating_add(1),
                ttl_ms: None,
            },
        })
        .collect();
    let mut leases = Vec::with_capacity(n);
    for outcome in store.claim_many(&claims).await? {
        match outcome {
            ClaimOutcome::Won(lease) => leases.push(lease),
            other => return Err(format!("claim: {other:?}").into()),
        }
    }
    Ok(leases)
}

async fn measure(
    store: &PostgresStore,
    client: &mut Client,
    insert: &Statement,
    n: usize,
    sync: bool,
) -> BoxResult<()> {
    let tag = if sync { "on" } else { "off" };
    let job = JobName::new(format!("cost-{tag}-{:08x}", rand::random::<u32>()))?;
    let held_job = JobName::new(format!("{job}-held"))?;
    let held = claim_runs(store, &held_job, 1).await?.remove(0);
    let held_ctx = context_for(&held);
    let finished = claim_runs(store, &job, n).await?;
    let mut times: [Vec<Duration>; 3] = Default::default();
    let mut totals = [Duration::ZERO; 3];
    for (i, run) in finished.iter().enumerate() {
        for turn in 0..3 {
            // The kinds take turns, each in every position, so drift hits them alike.
            let kind = (i + turn) % 3;
            let slot = i as i64;
            let started = Instant::now();
            match kind {
                0 => {
                    let tx = client.transaction().await?;
                    tx.execute(insert, &[&slot, &"plain"]).await?;
                    tx.commit().await?;
                }
                1 => {
                    let tx = store.fenced_transaction(client, &held_ctx).await?;
                    tx.execute(insert, &[&slot, &"fenced"]).await?;
                    tx.commit().await?;
                }
                _ => {
                    let ctx = context_for(run);
                    let tx = store.fenced_transaction(client, &ctx).await?;
                    tx.execute(insert, &[&slot, &"finished"]).await?;
                    tx.commit_finished().await?;
                }
            }
            let took = started.elapsed();
            times[kind].push(took);
            totals[kind] += took;
        }
    }
    println!("\nsynchronous_commit = {tag}");
    println!(
        "{:<32} {:>10} {:>10} {:>12}",
        "kind", "p50 (ms)", "p99 (ms)", "per second"
    );
    let names = [
        "plain (BEGIN, INSERT, COMMIT)",
        "fenced + commit",
        "fenced + commit_finished",
    ];
    for (kind, name) in names.iter().enumerate() {
        let t = &mut times[kind];
        t.sort();
        let pct = |p: f64| t[((t.len() as f64 * p) as usize).min(t.len() - 1)];
        println!(
            "{:<32} {:>10.3} {:>10.3} {:>12.0}",
            name,
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            n as f64 / totals[kind].as_secs_f64()
        );
    }
    Ok(())
}
