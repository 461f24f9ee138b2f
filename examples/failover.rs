//! Failover: three instances share one SQLite file; the one running a long job is killed
//! with SIGKILL, and a backup starts attempt 2 of the same slot once the killed instance's
//! lease has run out. Ends with the job's history, read from the file, as a table.
//!
//! ```sh
//! cargo run --example failover
//! ```
//!
//! `cargo run --example failover -- /tmp/failover.db` keeps the file (it must not exist yet)
//! instead of a temporary one deleted at the end. No server is needed; it takes about 18 s.
//!
//! The example starts three copies of itself (`n1`, `n2`, `n3`), each running the scheduler
//! in `instance` below with the job `long` (every 10 s, 5 s of work). Lease 3 s, heartbeat
//! 0.5 s: the runner renews its lease every 0.5 s, and every other instance backs the run up.
//! One second into the first run, the parent kills the runner with SIGKILL, so it cannot hand
//! the run over or record anything; about 3 s later its lease has run out and a backup starts
//! attempt 2 (reason `takeover`), which the history shows beside the interrupted attempt 1.
//! The next slot then runs once as usual on one of the two instances left. The parent exits
//! non-zero when an expected outcome was not seen. The story is told by
//! `examples/common/cluster.rs` on the process harness `examples/common/process.rs`. Unix only
//! (it sends signals).

#[path = "common/cluster.rs"]
mod cluster;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anarchon::sqlite::SqliteStore;
use anarchon::{HistoryRecord, Scheduler};
use cluster::{Cluster, Timing, clock};

/// Slots every 10 s; a run works 5 s; lease 3 s, renewed every 0.5 s.
const INTERVAL: Duration = Duration::from_secs(10);
const WORK: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_millis(500);
const JOB: &str = "long";

/// One instance (a child process): a scheduler on the shared file with one long job.
async fn instance(me: cluster::Instance) -> anarchon::Result<()> {
    let store = SqliteStore::connect(&me.db).await?;
    let scheduler = Scheduler::leased(store)
        .instance_id(&me.id)
        .lease(LEASE)
        .heartbeat(HEARTBEAT)
        .jitter(Duration::ZERO)
        .catch_up_window(Duration::ZERO)
        .build()?;
    scheduler
        .every(JOB, INTERVAL)
        .offset(me.offset)
        .handler(|ctx| async move {
            // Long work, cut short only by a graceful stop or a lost lease.
            tokio::select! {
                _ = ctx.signal.cancelled() => {}
                _ = tokio::time::sleep(WORK) => {}
            }
            Ok(ctx.check_cancelled()?)
        })?;
    let printer = cluster::print_events(&me.id, scheduler.events());
    scheduler.start().await?;
    cluster::ready(&me.id);
    tokio::signal::ctrl_c().await.ok();
    scheduler.stop(Duration::from_secs(5)).await?;
    drop(scheduler);
    cluster::exited(&me.id, printer).await;
    Ok(())
}

/// The job's history from the file, oldest first: any process can read it, even one that
/// never starts its scheduler.
async fn history(db: &Path) -> anarchon::Result<Vec<HistoryRecord>> {
    let reader = Scheduler::leased(SqliteStore::connect(db).await?).build()?;
    let mut runs = reader.history(JOB, 100).await?;
    runs.sort_by_key(|r| (r.slot, r.attempt));
    Ok(runs)
}

fn main() -> ExitCode {
    if cfg!(not(unix)) {
        eprintln!("failover kills its child processes with SIGKILL: it needs Unix");
        return ExitCode::from(2);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(cluster::NODE_ARG) => cluster::child("failover", &args[1..], instance),
        None => parent(cluster::temp_db("failover"), false),
        Some(path) if args.len() == 1 && !path.starts_with('-') => {
            let db = PathBuf::from(path);
            if db.exists() {
                eprintln!(
                    "failover: {path} exists; give a path to a new file, the example fills it"
                );
                return ExitCode::from(2);
            }
            parent(db, true)
        }
        Some(_) => {
            eprintln!("usage: failover [new-sqlite-file]");
            ExitCode::from(2)
        }
    }
}

/// Starts the children, kills the runner, then prints and checks the history.
fn parent(db: PathBuf, keep: bool) -> ExitCode {
    let timing = Timing {
        interval: INTERVAL,
        work: WORK,
        lease: LEASE,
        heartbeat: HEARTBEAT,
    };
    let mut c = match Cluster::new(db, timing) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("failover: {e}");
            return ExitCode::FAILURE;
        }
    };
    let story = story(&mut c);
    c.shutdown();
    let runs = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(history(&c.db)).map_err(|e| e.to_string()));
    if !keep {
        cluster::remove_sqlite(&c.db);
    }
    let (story, runs) = match (story, runs) {
        (Ok(story), Ok(runs)) => (story, runs),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("failover: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_table(&c, &runs, keep);
    check_history(&mut c, &runs, story.as_ref());
    let Some(Outcome {
        killed,
        slot,
        taker,
    }) = story
    else {
        return c.summary("");
    };
    c.summary(&format!(
        "{killed} was killed while it ran slot {}; once its lease ran out, {taker} started \
         attempt 2 of that slot. Every slot started once, and again only by a takeover.",
        clock(slot)
    ))
}

/// What the story saw: the runner killed during `slot`, and the instance that took over.
struct Outcome {
    killed: String,
    slot: i64,
    taker: String,
}

fn story(c: &mut Cluster) -> Result<Option<Outcome>, String> {
    const LEAD: Duration = Duration::from_millis(2_500);
    let first_slot = c.first_slot_in(LEAD);
    c.intro("anarchon failover:", "three instances share", JOB);
    c.spawn_all(&["n1", "n2", "n3"], LEAD - Duration::from_millis(300))?;

    // 1. One instance runs the long job; the two others skip the slot as taken.
    let Some(runner) = c
        .one_runner("1. a slot comes due", first_slot)
        .map(|e| e.node)
    else {
        return Ok(None);
    };

    // 2. Kill it: no handover, no record; its lease runs out, a backup starts attempt 2.
    c.heading("2. SIGKILL to the runner: it cannot hand over; its lease runs out");
    c.pause(Duration::from_secs(1));
    let killed = c.sigkill(&runner);
    let Some(takeover) = c.expect_takeover(first_slot, &runner, killed) else {
        return Ok(None);
    };
    c.expect_success(first_slot, 2, &takeover.node, takeover.at);

    // 3. Life goes on: the next slot runs once, on one of the two left.
    let second_slot = c.next_slot(first_slot);
    if let Some(start) = c.one_runner("3. the next slot runs as usual", second_slot) {
        c.expect_success(second_slot, 1, &start.node, start.at);
    }
    c.heading("4. stop the instances; read the history from the file");
    Ok(Some(Outcome {
        killed: runner,
        slot: first_slot,
        taker: takeover.node,
    }))
}

/// `hh:mm:ss.mmm` UTC.
fn slot_text(run: &HistoryRecord) -> String {
    run.slot.format("%H:%M:%S%.3f").to_string()
}

fn print_table(c: &Cluster, runs: &[HistoryRecord], keep: bool) {
    let kept = if keep { " (kept)" } else { "" };
    println!(
        "history of `{JOB}` in {}{kept}, oldest first:",
        c.db.display()
    );
    println!(
        "  {:<12}  {:>7}  {:<8}  {:<11}  {:<9}  cause",
        "slot (UTC)", "attempt", "instance", "status", "reason"
    );
    for run in runs {
        println!(
            "  {:<12}  {:>7}  {:<8}  {:<11}  {:<9}  {}",
            slot_text(run),
            run.attempt,
            run.instance_id,
            run.status.as_str(),
            run.reason.as_str(),
            run.error.as_deref().unwrap_or("-")
        );
    }
}

/// What the history must show: attempt 2 of the killed slot on another instance, and no
/// slot started twice without a takeover.
fn check_history(c: &mut Cluster, runs: &[HistoryRecord], story: Option<&Outcome>) {
    if let Some(Outcome {
        killed,
        slot,
        taker,
    }) = story
    {
        let of_slot: Vec<&HistoryRecord> = runs.iter().filter(|r| r.slot_ms() == *slot).collect();
        let first = of_slot.iter().find(|r| r.attempt == 1);
        let second = of_slot.iter().find(|r| r.attempt == 2);
        let ok = first.is_some_and(|r| r.instance_id == *killed)
            && second.is_some_and(|r| {
                r.instance_id == *taker
                    && r.instance_id != *killed
                    && r.reason == anarchon::Reason::Takeover
            });
        let text = format!(
            "history: slot {} attempt 1 on {killed}, attempt 2 on {taker} (takeover)",
            clock(*slot)
        );
        c.check(ok, text);
    }
    let mut clean = !runs.is_empty();
    for (i, run) in runs.iter().enumerate() {
        let expected = if i > 0 && runs[i - 1].slot == run.slot {
            runs[i - 1].attempt + 1
        } else {
            1
        };
        let takeover = run.reason == anarchon::Reason::Takeover;
        clean &= run.attempt == expected && (run.attempt > 1) == takeover;
    }
    c.check(
        clean,
        format!(
            "history: {} attempts; every slot started once, and again only by a takeover",
            runs.len()
        ),
    );
}
