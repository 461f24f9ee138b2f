//! Quick start: three processes share one SQLite file; each slot runs once, a graceful stop
//! hands the run over at once and a killed runner is taken over after its lease.
//!
//! ```sh
//! cargo run --example quick-start
//! ```
//!
//! No server is needed. The example starts three copies of itself (`n1`, `n2`, `n3`) on a
//! temporary SQLite file, each registering the same job `demo` (`instance` below: the whole
//! scheduler API it uses), and narrates in about 22 s:
//!
//! 1. one process runs the slot, the two others skip it as `taken`;
//! 2. `SIGINT` to the runner: it stops, its handler returns an error because its signal was
//!    cancelled, so the run is handed over and another process starts attempt 2 within two
//!    heartbeats (reason `takeover`); the stopped process is then started again;
//! 3. `SIGKILL` to the runner of the next slot: nobody renews its lease, so another process
//!    waits it out (about 3 s) and starts attempt 2.
//!
//! The numbers: lease 3 s, heartbeat 0.5 s, no jitter, and a job whose run takes 4 s of
//! work, scheduled every 10 s. A takeover after a crash comes one lease (3 s) plus up to a
//! heartbeat after the last renewal; had the next slot come due before it, the crashed run
//! would be marked `interrupted` and replaced by that slot instead of restarted [B-15], so
//! every 10 s leaves room for attempt 2. The first slot comes 2.5 s after the children start
//! (the parent shifts the grid with `offset`), and catch-up is off, since on a fresh file the
//! slot just before the start would otherwise be caught up at once.
//!
//! The parent reads the events the children print, tells the story (coloured on a terminal),
//! then a summary, and exits non-zero when an expected outcome was not seen, so CI runs it as
//! a smoke test. The process plumbing is in `examples/common/cluster.rs` and the process
//! harness under it, `examples/common/process.rs`. Unix only (it sends signals with `kill`).

#[path = "common/cluster.rs"]
mod cluster;

use std::process::ExitCode;
use std::time::Duration;

use anarchon::Scheduler;
use anarchon::sqlite::SqliteStore;
use cluster::{Cluster, Timing};

/// Slots every 10 s; a run works 4 s; lease 3 s, renewed every 0.5 s.
const INTERVAL: Duration = Duration::from_secs(10);
const WORK: Duration = Duration::from_secs(4);
const LEASE: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_millis(500);

/// One instance (a child process): a scheduler on the shared file with one job.
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
        .every("demo", INTERVAL)
        .offset(me.offset)
        .handler(|ctx| async move {
            // The work: 4 s, cut short when the signal is cancelled (stop, lost lease).
            tokio::select! {
                _ = ctx.signal.cancelled() => {}
                _ = tokio::time::sleep(WORK) => {}
            }
            // An error after cancellation hands the run over to a backup; Ok would record
            // it as succeeded.
            Ok(ctx.check_cancelled()?)
        })?;
    let printer = cluster::print_events(&me.id, scheduler.events());
    scheduler.start().await?;
    cluster::ready(&me.id);
    // A service waits for its stop signal like this; SIGKILL never gets here.
    tokio::signal::ctrl_c().await.ok();
    scheduler.stop(Duration::from_secs(5)).await?;
    drop(scheduler);
    cluster::exited(&me.id, printer).await;
    Ok(())
}

fn main() -> ExitCode {
    if cfg!(not(unix)) {
        eprintln!("quick-start sends SIGINT and SIGKILL to its child processes: it needs Unix");
        return ExitCode::from(2);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(cluster::NODE_ARG) => cluster::child("quick-start", &args[1..], instance),
        None => parent(),
        Some(other) => {
            eprintln!("quick-start: unexpected argument {other:?} (run it without arguments)");
            ExitCode::from(2)
        }
    }
}

/// Starts the three children, sends the signals and tells what happened.
fn parent() -> ExitCode {
    let timing = Timing {
        interval: INTERVAL,
        work: WORK,
        lease: LEASE,
        heartbeat: HEARTBEAT,
    };
    let mut c = match Cluster::new(cluster::temp_db("quick-start"), timing) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quick-start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = story(&mut c);
    c.shutdown();
    cluster::remove_sqlite(&c.db);
    if let Err(e) = result {
        eprintln!("quick-start: {e}");
        return ExitCode::FAILURE;
    }
    c.summary("every slot started once; a stopped or killed runner was replaced")
}

fn story(c: &mut Cluster) -> Result<(), String> {
    const LEAD: Duration = Duration::from_millis(2_500);
    const SIGNAL_AFTER: Duration = Duration::from_secs(1);
    let first_slot = c.first_slot_in(LEAD);
    c.intro("anarchon quick start:", "three processes share", "demo");
    c.spawn_all(&["n1", "n2", "n3"], LEAD - Duration::from_millis(300))?;

    // 1. One slot, one runner: the two others skip it as taken.
    let Some(runner) = c
        .one_runner("1. a slot comes due", first_slot)
        .map(|e| e.node)
    else {
        return Ok(());
    };

    // 2. SIGINT: a graceful stop hands the run over; a backup starts attempt 2 at once.
    c.heading("2. SIGINT to the runner: it hands the run over");
    c.pause(SIGNAL_AFTER);
    let sent = c.sigint(&runner);
    let takeover = c.expect_handover(first_slot, &runner, sent);
    if c.wait_exit(&runner, Duration::from_secs(6)) {
        c.spawn(&runner)?;
        let who = c.node(&runner);
        c.say(&format!("{who} stopped; started again, it is now a backup"));
    } else {
        c.check(false, format!("{runner} did not exit after SIGINT"));
    }
    if let Some(ev) = takeover {
        c.expect_success(first_slot, 2, &ev.node, ev.at);
    }

    // 3. SIGKILL: nobody renews the lease; a backup takes over once it runs out.
    let second_slot = c.next_slot(first_slot);
    let Some(runner) = c
        .one_runner("3. the next slot", second_slot)
        .map(|e| e.node)
    else {
        return Ok(());
    };
    c.heading("   SIGKILL to the runner: its lease runs out");
    c.pause(SIGNAL_AFTER);
    let killed = c.sigkill(&runner);
    if let Some(ev) = c.expect_takeover(second_slot, &runner, killed) {
        c.expect_success(second_slot, 2, &ev.node, ev.at);
    }
    Ok(())
}
