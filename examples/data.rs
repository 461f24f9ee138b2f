//! The three levels of handler data — scheduler, job and run-now — and a data function that
//! opens a client for each run. Runs by itself in about three seconds on a temporary SQLite
//! file.
//!
//! ```sh
//! cargo run --example data
//! ```
//!
//! Data is merged per run: the scheduler's, then the job's, then what `run_now` passes (for
//! map values the more specific keys win; typed extensions such as clients merge by type).
//! A data function runs at the start of each run; if it fails, the run fails.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anarchon::sqlite::SqliteStore;
use anarchon::{Data, DataSource, HandlerError, JobContext, Scheduler};

/// Stands for a client of another system (a database, an HTTP API): here an append-only
/// report file, opened by the data function at the start of each run.
struct ReportClient {
    file: Mutex<std::fs::File>,
    opened_for: u64,
}

impl ReportClient {
    fn open(path: &PathBuf, run: u64) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(ReportClient {
            file: Mutex::new(file),
            opened_for: run,
        })
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(file, "{line}")
    }
}

async fn export(ctx: JobContext) -> Result<(), HandlerError> {
    ctx.check_cancelled()?;
    let client = ctx
        .get::<ReportClient>()
        .ok_or_else(|| HandlerError::msg("no report client: the data function did not run"))?;
    let env = ctx.value("env").and_then(|v| v.as_str()).unwrap_or("?");
    let batch = ctx.value("batch").and_then(|v| v.as_u64()).unwrap_or(0);
    let table = ctx.value("table").and_then(|v| v.as_str()).unwrap_or("?");
    let line = format!(
        "{} env={env} table={table} batch={batch} manual={} client#{}",
        ctx.slot.format("%H:%M:%S%.3f"),
        ctx.manual,
        client.opened_for
    );
    client.write(&line)?;
    println!("run     {line}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let db = dir.join(format!("anarchon-data-{pid}.db"));
    let report = dir.join(format!("anarchon-data-{pid}.log"));

    // Level 1, the scheduler: data every run of every job sees.
    let scheduler = Scheduler::leased(SqliteStore::connect(&db).await?)
        .jitter(Duration::ZERO)
        .data(Data::new().with_key("env", "demo").with_key("batch", 10))
        .build()?;

    // Level 2, the job: a data function that opens a client at the start of each run, and
    // overrides the scheduler's `batch`.
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let path = report.clone();
    let counter = opened.clone();
    let job_data = DataSource::function(move || {
        let path = path.clone();
        let run = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        async move {
            let client = ReportClient::open(&path, run)?;
            Ok::<_, std::io::Error>(
                Data::new()
                    .with(client)
                    .with_key("table", "orders")
                    .with_key("batch", 100),
            )
        }
    });
    scheduler
        .every("export", "1s")
        .data(job_data)
        .handler(export)?;

    scheduler.start().await?;
    tokio::time::sleep(Duration::from_millis(2_200)).await;

    // Level 3, run-now: the most specific data, for this one run.
    let manual = scheduler
        .run_now("export", Some(Data::new().with_key("batch", 500)))
        .await?;
    println!("run-now {} ({:?})", manual.status, manual.error);
    scheduler.stop(Duration::from_secs(5)).await?;

    let lines = std::fs::read_to_string(&report)?;
    let written = lines.lines().count();
    println!(
        "report  {written} lines written by {} clients opened",
        opened.load(std::sync::atomic::Ordering::SeqCst)
    );
    let manual_line = lines.lines().find(|l| l.contains("manual=true"));
    let scheduled_line = lines.lines().find(|l| l.contains("manual=false"));
    let _ = std::fs::remove_file(&report);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    anyhow::ensure!(
        scheduled_line.is_some_and(|l| l.contains("env=demo table=orders batch=100")),
        "a scheduled run sees the scheduler's env and the job's table and batch"
    );
    anyhow::ensure!(
        manual_line.is_some_and(|l| l.contains("env=demo table=orders batch=500")),
        "the run-now batch overrides the job's"
    );
    println!("done: scheduler, job and run-now data merged; one client opened per run");
    Ok(())
}
