//! Writes a small real history into a SQLite file for trying the `anarchon` command: two
//! instances, a job every 2 s, a failing job, and a long run whose owner crashes so that
//! the other instance takes it over. It keeps running (the taken-over run stays unfinished)
//! for `--hold` seconds, so `anarchon runs` has something to show.
//!
//! ```text
//! cargo run -p anarchon-cli --example demo -- /tmp/demo.db --hold 60 &
//! cargo run -p anarchon-cli -- --store /tmp/demo.db jobs
//! ```

use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::LeaseStore;
use anarchon_core::{HandlerError, JobName, Leased, RunStatus, Scheduler};
use anarchon_sqlite::SqliteStore;

fn node(store: Arc<dyn LeaseStore>, id: &str) -> anarchon_core::Result<Scheduler<Leased>> {
    Scheduler::leased_shared(store)
        .instance_id(id)
        .lease(Duration::from_secs(3))
        .heartbeat(Duration::from_millis(500))
        .jitter(Duration::ZERO)
        .build()
}

/// A run of an hour that gives up when its signal is cancelled (a stop hands it over).
async fn long_run(signal: anarchon_core::CancellationToken) -> Result<(), HandlerError> {
    tokio::select! {
        () = signal.cancelled() => Err(HandlerError::msg("stopped before the export finished")),
        () = tokio::time::sleep(Duration::from_secs(3600)) => Ok(()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: demo PATH [--hold SECONDS]: PATH is the SQLite file to write")?;
    let hold: u64 = match (args.next().as_deref(), args.next()) {
        (Some("--hold"), Some(secs)) => secs.parse()?,
        (None, _) => 30,
        _ => return Err("usage: demo PATH [--hold SECONDS]".into()),
    };
    let open = || SqliteStore::connect(&path);

    let a = node(Arc::new(open().await?), "node-a")?;
    a.every("sync", "2s").handler(|_| async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(())
    })?;
    a.every("report", "5s")
        .handler(|_| async { Err(HandlerError::msg("upstream answered 503")) })?;
    a.every("export", "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(|ctx| long_run(ctx.signal.clone()))?;
    a.start().await?;

    let b = node(Arc::new(open().await?), "node-b")?;
    b.every("export", "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(|ctx| long_run(ctx.signal.clone()))?;
    b.start().await?;

    let reader = open().await?;
    let export = JobName::new("export")?;
    let sync = JobName::new("sync")?;
    use anarchon_core::store::HistoryStore;
    for _ in 0..300 {
        let synced = reader.history(&sync, 10).await?.len();
        let exported = !reader.history(&export, 1).await?.is_empty();
        if synced >= 3 && exported {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.crash();
    for _ in 0..300 {
        let h = reader.history(&export, 5).await?;
        if h.first()
            .is_some_and(|r| r.attempt == 2 && r.status == RunStatus::Running)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("ready: node-a crashed, node-b took export over; holding {hold} s");
    tokio::time::sleep(Duration::from_secs(hold)).await;
    b.stop(Duration::from_secs(1)).await?;
    Ok(())
}
