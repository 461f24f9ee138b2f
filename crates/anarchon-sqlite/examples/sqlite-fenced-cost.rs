//! What a fenced transaction costs beside a plain one on the same file, in the same run.
//!
//! ```text
//! cargo run --release -p anarchon-sqlite --example sqlite-fenced-cost [-- N]
//! ```
//!
//! On a temporary store file, N times, interleaved: a plain transaction (`BEGIN IMMEDIATE`,
//! insert one row, `COMMIT`) and a fenced one (`FencedTransaction::begin` for one claimed
//! run, the same insert, `commit`), both on one connection from `open_connection`. Then N
//! fenced transactions that also finish their run (`commit_finished`, one claimed run
//! each; the claims are not timed), and N/10 through the async `fenced_transaction` (a new
//! connection on tokio's blocking pool each). Prints p50 / p99 per transaction and
//! transactions per second.

use std::time::{Duration, Instant};

use anarchon_core::store::{ClaimOutcome, JobName, Lease, LeaseStore, Overlap, Store};
use anarchon_core::testkit::context_for;
use anarchon_core::testkit::lease::claim;
use anarchon_sqlite::{FencedTransaction, SqliteStore};

type BoxError = anarchon_core::BoxError;

struct Figures {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Figures {
    fn new(name: &'static str, n: usize) -> Self {
        Figures {
            name,
            samples: Vec::with_capacity(n),
        }
    }

    fn print(&mut self) {
        self.samples.sort_unstable();
        let total: Duration = self.samples.iter().sum();
        let at = |q: f64| {
            let i = ((self.samples.len() as f64 - 1.0) * q).round() as usize;
            self.samples[i].as_secs_f64() * 1e6
        };
        println!(
            "{:<38} {:>6} {:>9.1} {:>9.1} {:>10.0}",
            self.name,
            self.samples.len(),
            at(0.50),
            at(0.99),
            self.samples.len() as f64 / total.as_secs_f64()
        );
    }
}

async fn won(store: &SqliteStore, job: &JobName, slot: i64) -> Result<Lease, BoxError> {
    let now = store.now().await?;
    let mut c = claim(job, slot, "bench", now);
    c.lease_ms = 600_000;
    c.overlap = Overlap::Allow; // slot 1 stays running beside the others
    match store.claim(&c).await? {
        ClaimOutcome::Won(lease) => Ok(lease),
        other => Err(format!("claim of slot {slot}: {other:?}").into()),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5_000);
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::connect(dir.path().join("cost.db")).await?;
    let mut conn = store.open_connection()?;
    conn.execute_batch(
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY, slot INTEGER NOT NULL, amount INTEGER NOT NULL)",
    )?;
    let job = JobName::new("fenced-cost")?;
    let lease = won(&store, &job, 1).await?;
    let ctx = context_for(&lease);

    let mut plain = Figures::new("plain (BEGIN IMMEDIATE+insert+COMMIT)", n);
    let mut fenced = Figures::new("fenced (begin+insert+commit)", n);
    for i in 0..n {
        let i = i64::try_from(i)?;
        let t = Instant::now();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute("INSERT INTO ledger (slot, amount) VALUES (?1, ?2)", (1, i))?;
        tx.commit()?;
        plain.samples.push(t.elapsed());

        let t = Instant::now();
        let tx = FencedTransaction::begin(&mut conn, &store, &ctx)?;
        tx.execute("INSERT INTO ledger (slot, amount) VALUES (?1, ?2)", (1, i))?;
        tx.commit()?;
        fenced.samples.push(t.elapsed());
    }

    let mut leases = Vec::with_capacity(n);
    for i in 0..n {
        leases.push(won(&store, &job, 1_000 + i64::try_from(i)?).await?);
    }
    let mut finished = Figures::new("fenced + finish (commit_finished)", n);
    for lease in &leases {
        let ctx = context_for(lease);
        let t = Instant::now();
        let tx = FencedTransaction::begin(&mut conn, &store, &ctx)?;
        tx.execute(
            "INSERT INTO ledger (slot, amount) VALUES (?1, 1)",
            [lease.run.slot],
        )?;
        tx.commit_finished()?;
        finished.samples.push(t.elapsed());
    }

    let m = (n / 10).max(1);
    let mut async_form = Figures::new("async fenced_transaction (new conn)", m);
    for i in 0..m {
        let i = i64::try_from(i)?;
        let t = Instant::now();
        store
            .fenced_transaction(&ctx, move |tx| -> Result<(), BoxError> {
                tx.execute("INSERT INTO ledger (slot, amount) VALUES (?1, ?2)", (1, i))?;
                tx.commit()?;
                Ok(())
            })
            .await?;
        async_form.samples.push(t.elapsed());
    }

    println!(
        "{:<38} {:>6} {:>9} {:>9} {:>10}",
        "transaction", "n", "p50 µs", "p99 µs", "per second"
    );
    plain.print();
    fenced.print();
    finished.print();
    async_form.print();
    store.close().await?;
    Ok(())
}
