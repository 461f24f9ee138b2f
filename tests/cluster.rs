//! The slow multi-process test: three OS processes on one SQLite file with a real clock,
//! killed, frozen and stopped by real signals. Runs with `ANARCHON_SLOW=1`
//! (`cargo xtask test --slow`); lease 1.5 s, heartbeat 0.3 s.
//!
//! Each test re-executes this test binary three times as nodes (its `child_node` test, see
//! `tests/support`), reads their events from their stdout, and checks the outcome in the
//! store's history from this process.

mod support;

use std::time::Duration;

use anarchon::RunStatus;
use support::{Cluster, NodeConfig, Signal, TempDb, attempts_of};

const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// Not a test: the body of a node process (does nothing in an ordinary run). Ignored, so
/// the runner never counts it; the harness runs it by name with `--ignored --exact`.
#[test]
#[ignore = "not a test: the node process of the real-process harness (tests/support)"]
fn child_node() {
    support::child_main();
}

/// Waits for attempt 1 of `slot` to start; returns the runner.
fn runner_of(c: &mut Cluster, slot: i64) -> support::Ev {
    let wait = Duration::from_millis((slot - support::now_ms()).max(0) as u64 + 3_000);
    c.wait_event(wait, |e| e.is("start", slot) && e.attempt() == Some(1))
        .unwrap_or_else(|| panic!("nobody started slot {slot}\n{}", c.log()))
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b11_each_slot_starts_exactly_once_across_three_processes() {
    let db = TempDb::new("cluster-b11");
    let mut cfg = NodeConfig::new(db.spec(), "b11", 1_000, 300);
    let first = cfg.first_slot_in(2_000);
    let mut c = Cluster::new(cfg);
    c.start(&NODES);
    let slots: Vec<i64> = (0..6).map(|k| first + k * 1_000).collect();
    let last = *slots.last().expect("slots");
    // Until the last slot's run succeeded and the losers reported.
    c.wait_event(Duration::from_secs(12), |e| e.is("success", last));
    c.pause(Duration::from_millis(300));
    let mut winners = Vec::new();
    for &slot in &slots {
        let starts = c.events("start", slot);
        let taken = c
            .events("skip", slot)
            .iter()
            .filter(|e| e.field("skip") == "taken")
            .count();
        assert_eq!(starts.len(), 1, "slot {slot}: starts\n{}", c.log());
        assert_eq!(taken, 2, "slot {slot}: skips as taken\n{}", c.log());
        winners.push(starts[0].node.clone());
    }
    let history = c.history(100);
    for (&slot, winner) in slots.iter().zip(&winners) {
        let attempts = attempts_of(&history, slot);
        assert_eq!(attempts.len(), 1, "slot {slot}: {attempts:?}");
        let a = &attempts[0];
        assert_eq!(
            (a.attempt, a.status, a.instance_id.as_str()),
            (1, RunStatus::Succeeded, winner.as_str()),
            "slot {slot}: {a:?}"
        );
    }
    eprintln!(
        "b11: {} slots, one start each; winners {}",
        slots.len(),
        winners.join(" ")
    );
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b14_sigkill_of_the_runner_leads_to_attempt_2_after_the_lease() {
    let db = TempDb::new("cluster-b14");
    let mut cfg = NodeConfig::new(db.spec(), "b14", 4_000, 2_000);
    let slot = cfg.first_slot_in(2_000);
    let (lease, hb) = (cfg.lease_ms as i64, cfg.heartbeat_ms as i64);
    let mut c = Cluster::new(cfg);
    c.start(&NODES);
    let runner = runner_of(&mut c, slot);
    c.pause_until(runner.t + 500);
    let killed = c.signal(&runner.node, Signal::Kill);
    let takeover = c
        .wait_event(Duration::from_secs(5), |e| {
            e.is("start", slot) && e.attempt() == Some(2)
        })
        .unwrap_or_else(|| panic!("no attempt 2 after SIGKILL\n{}", c.log()));
    let delay = takeover.t - killed;
    assert_ne!(takeover.node, runner.node);
    assert_eq!(takeover.field("reason"), "takeover");
    // One lease after the last renewal (up to a heartbeat before the kill), noticed at the
    // next poll: lease - hb .. lease + 2 hb, with a heartbeat of slack. [B-14]
    assert!(
        (lease - 2 * hb..=lease + 3 * hb).contains(&delay),
        "takeover {delay} ms after SIGKILL (lease {lease} ms)\n{}",
        c.log()
    );
    c.wait_event(Duration::from_secs(5), |e| {
        e.is("success", slot) && e.attempt() == Some(2)
    })
    .unwrap_or_else(|| panic!("attempt 2 did not succeed\n{}", c.log()));
    let attempts = attempts_of(&c.history(20), slot);
    let summary: Vec<(u32, RunStatus, String)> = attempts
        .iter()
        .map(|a| (a.attempt, a.status, a.instance_id.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, RunStatus::Interrupted, runner.node.clone()),
            (2, RunStatus::Succeeded, takeover.node.clone()),
        ],
        "{attempts:#?}"
    );
    eprintln!(
        "b14: SIGKILL {} -> attempt 2 on {} after {delay} ms (lease {lease} ms)",
        runner.node, takeover.node
    );
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b16_a_frozen_runner_is_replaced_and_its_result_is_not_recorded() {
    let db = TempDb::new("cluster-b16");
    let mut cfg = NodeConfig::new(db.spec(), "b16", 6_000, 2_500);
    let handler_log = support::temp_db("cluster-b16-handlers");
    cfg.handler_log = handler_log.display().to_string();
    let slot = cfg.first_slot_in(2_000);
    let lease = cfg.lease_ms as i64;
    let mut c = Cluster::new(cfg);
    c.start(&NODES);
    let runner = runner_of(&mut c, slot);
    // Freeze between two heartbeats (300 ms apart): a process stopped inside its write
    // transaction holds SQLite's file lock until it resumes (docs/guarantees.md).
    c.pause_until(runner.t + 450);
    let frozen = c.signal(&runner.node, Signal::Stop);
    let takeover = c
        .wait_event(Duration::from_secs(5), |e| {
            e.is("start", slot) && e.attempt() == Some(2)
        })
        .unwrap_or_else(|| panic!("no takeover of the frozen run\n{}", c.log()));
    assert_ne!(takeover.node, runner.node);
    assert_eq!(takeover.field("reason"), "takeover");
    // Frozen for longer than the lease, then woken while the new owner still runs.
    c.pause_until(frozen + lease + 1_000);
    let woken = c.signal(&runner.node, Signal::Cont);
    let noticed = c
        .wait_event(Duration::from_secs(3), |e| {
            e.node == runner.node
                && (e.is("lost", slot) || e.is("fenced", slot))
                && e.attempt() == Some(1)
        })
        .unwrap_or_else(|| panic!("the woken runner did not report lost/fenced\n{}", c.log()));
    c.wait_event(Duration::from_secs(5), |e| {
        e.is("success", slot) && e.attempt() == Some(2)
    })
    .unwrap_or_else(|| panic!("attempt 2 did not succeed\n{}", c.log()));
    c.pause(Duration::from_millis(500));
    let old_success = c
        .events("success", slot)
        .iter()
        .any(|e| e.node == runner.node);
    assert!(
        !old_success,
        "the frozen runner reported success\n{}",
        c.log()
    );
    let attempts = attempts_of(&c.history(20), slot);
    let summary: Vec<(u32, RunStatus, String)> = attempts
        .iter()
        .map(|a| (a.attempt, a.status, a.instance_id.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, RunStatus::Interrupted, runner.node.clone()),
            (2, RunStatus::Succeeded, takeover.node.clone()),
        ],
        "{attempts:#?}\n{}",
        c.log()
    );
    let reported: Vec<&str> = c
        .seen
        .iter()
        .filter(|e| e.node == runner.node && e.slot() == Some(slot))
        .filter(|e| e.kind == "lost" || e.kind == "fenced")
        .map(|e| e.kind.as_str())
        .collect();
    // The woken runner's own check failed before any further step: its first line after
    // waking is a failed check, and it did no step after the takeover (lease-aware
    // cancellation, judged from the handler's own log).
    let lines = support::read_handler_log(&handler_log);
    let _ = std::fs::remove_file(&handler_log);
    let after_wake: Vec<&str> = lines
        .iter()
        .filter(|l| l.node == runner.node && l.slot == slot && l.attempt == 1 && l.t >= woken)
        .map(|l| l.what.as_str())
        .collect();
    assert_eq!(
        after_wake.first().copied(),
        Some("STEP-ERR"),
        "the woken runner's first step after waking: {after_wake:?}\n{}",
        c.log()
    );
    assert!(
        !lines.iter().any(|l| l.node == runner.node
            && l.slot == slot
            && l.what == "STEP-OK"
            && l.t >= takeover.t),
        "the frozen runner worked after the takeover: {lines:?}"
    );
    eprintln!(
        "b16: SIGSTOP {} -> attempt 2 on {} after {} ms; SIGCONT -> {} reported {} {} ms later",
        runner.node,
        takeover.node,
        takeover.t - frozen,
        runner.node,
        reported.join("+"),
        noticed.t - woken
    );
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b17_sigterm_and_sigint_hand_the_run_over_at_once() {
    let db = TempDb::new("cluster-b17");
    let mut cfg = NodeConfig::new(db.spec(), "b17", 6_000, 2_500);
    // Handovers do not count against the crash budget: with one attempt allowed, the run
    // must still move twice. [B-17]
    cfg.max_attempts = 1;
    let slot = cfg.first_slot_in(2_000);
    let hb = cfg.heartbeat_ms as i64;
    let mut c = Cluster::new(cfg);
    c.start(&NODES);
    let first = runner_of(&mut c, slot);
    let mut runners = vec![first.node.clone()];
    let mut delays = Vec::new();
    let mut at = first.t;
    for (attempt, sig) in [(2, Signal::Term), (3, Signal::Int)] {
        c.pause_until(at + 400);
        let current = runners.last().expect("runner").clone();
        let sent = c.signal(&current, sig);
        let next = c
            .wait_event(Duration::from_secs(3), |e| {
                e.is("start", slot) && e.attempt() == Some(attempt)
            })
            .unwrap_or_else(|| panic!("no attempt {attempt} after SIG{sig}\n{}", c.log()));
        assert!(!runners.contains(&next.node), "{}", c.log());
        assert_eq!(next.field("reason"), "takeover");
        let delay = next.t - sent;
        // Within two heartbeats (the backups poll every heartbeat), plus scheduling slack.
        assert!(
            delay <= 2 * hb + 200,
            "attempt {attempt} {delay} ms after SIG{sig}\n{}",
            c.log()
        );
        assert!(
            c.wait_exit(&current, Duration::from_secs(5)),
            "{current} did not exit"
        );
        let handed = c.seen.iter().any(|e| {
            e.node == current && e.is("interrupted", slot) && e.field("cause") == "handed over"
        });
        assert!(handed, "{current} did not hand over\n{}", c.log());
        delays.push(format!("SIG{sig} {current} -> {} in {delay} ms", next.node));
        runners.push(next.node.clone());
        at = next.t;
    }
    c.wait_event(Duration::from_secs(5), |e| {
        e.is("success", slot) && e.attempt() == Some(3)
    })
    .unwrap_or_else(|| panic!("attempt 3 did not succeed\n{}", c.log()));
    let attempts = attempts_of(&c.history(20), slot);
    let summary: Vec<(u32, RunStatus, String)> = attempts
        .iter()
        .map(|a| (a.attempt, a.status, a.instance_id.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, RunStatus::Interrupted, runners[0].clone()),
            (2, RunStatus::Interrupted, runners[1].clone()),
            (3, RunStatus::Succeeded, runners[2].clone()),
        ],
        "{attempts:#?}"
    );
    eprintln!("b17: {}", delays.join("; "));
}
