//! The whole public API on one SQLite file, in about ten seconds: `every`, `cron` and `at`
//! jobs with options, events, `run_now`, history, `remove` and `stop`.
//!
//! ```sh
//! cargo run --example newcomer            # writes newcomer.db in the current directory
//! cargo run --example newcomer -- /tmp/x.db
//! ```
//!
//! Start it in two terminals on the same file and each slot runs in one of them only.
//! Switching store changes one line: `RedisStore::connect(url)`,
//! `PostgresStore::connect(url)` or `LibsqlStore::connect(url)` instead of
//! `SqliteStore::connect(path)` (with the crate feature `redis`, `postgres` or `libsql`).

use std::time::Duration;

use anarchon::chrono::Utc;
use anarchon::sqlite::SqliteStore;
use anarchon::{CatchUp, Event, HandlerError, Overlap, RunStatus, Scheduler};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "newcomer.db".into());

    // 1. A store and a scheduler. The store is ready when `connect` returns.
    let store = SqliteStore::connect(&path).await?;
    let scheduler = Scheduler::leased(store)
        .lease(Duration::from_secs(10))
        .heartbeat(Duration::from_secs(2))
        .jitter(Duration::from_millis(200))
        .history_size(50)
        .build()?;

    // 2. Events: what happens on this instance. `Display` writes one line each.
    let mut events = scheduler.events();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            match &event {
                Event::Failure { run, error } => eprintln!("!! {} failed: {error}", run.job),
                Event::Skip { .. } | Event::Start(_) | Event::Success { .. } => {
                    println!("event  {event}")
                }
                other => println!("event  {other}"),
            }
        }
    });

    // 3. Jobs. Handlers return `Result<(), HandlerError>`: `?` works on any error and
    //    `Ok(())` needs no annotation.
    scheduler
        .every("sync", "2s")
        .timeout(Duration::from_secs(5))
        .overlap(Overlap::Skip)
        .handler(|ctx| async move {
            ctx.check_cancelled()?; // before each side effect
            println!(
                "sync   slot {} (attempt {}, fence {})",
                ctx.slot, ctx.attempt, ctx.fence
            );
            Ok(())
        })?;
    scheduler
        .cron("report", "*/5 * * * * *") // six fields: with seconds
        .timezone("Europe/Berlin")
        .catch_up(CatchUp::Latest)
        .handler(|ctx| async move {
            let n: u32 = "42".parse()?; // any error converts into HandlerError
            println!("report slot {} in Berlin: {n}", ctx.slot);
            Ok(())
        })?;
    let in_three_seconds = Utc::now() + Duration::from_secs(3);
    scheduler
        .at("once", in_three_seconds)
        .handler(|ctx| async move {
            println!("once   ran at {}", ctx.slot);
            Ok(())
        })?;
    scheduler
        .every("flaky", "1h")
        .handler(|_ctx| async move { Err(HandlerError::msg("it always fails")) })?;

    for job in scheduler.jobs() {
        println!(
            "job    {} ({}) next at {:?}",
            job.name, job.kind, job.next_run
        );
    }

    // 4. Start, let it run, run one job by hand.
    scheduler.start().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let manual = scheduler.run_now("flaky", None).await?;
    println!(
        "manual run of flaky: {} ({:?})",
        manual.status, manual.error
    );
    assert_eq!(manual.status, RunStatus::Failed);

    // 5. Remove a job: no new slots of it start here (a running one finishes).
    scheduler.remove("sync")?;
    println!("next sync: {:?}", scheduler.next_run("sync").ok());
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 6. History: every attempt of every instance, newest first.
    for run in scheduler.history("sync", 5).await? {
        println!(
            "history sync slot {} by {} attempt {}: {} in {:?}",
            run.slot,
            run.instance_id,
            run.attempt,
            run.status,
            run.duration()
        );
    }
    println!("health: {:?}", scheduler.health());

    // 7. Stop: running handlers see their signal cancelled; a lease run they give up is
    //    handed over to another instance at once.
    scheduler.stop(Duration::from_secs(10)).await?;
    Ok(())
}
