//! The slow test of the multi-process examples: runs `cargo run --example failover`'s binary
//! to completion on an SQLite file of its own and checks its output against the history it
//! leaves in that file; runs `quick-start` to completion too. Runs with `ANARCHON_SLOW=1`
//! (`cargo xtask test --slow`), about 45 s (the two run one after the other, since both
//! measure takeover times).
//!
//! The examples are built with `cargo build --workspace --example ...` into this test's own
//! target directory (found from the test binary's path), with the features this test was
//! built with; after `cargo test --workspace [--all-features]` (`cargo xtask test`), which
//! builds the examples too, that build has nothing left to do.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anarchon::sqlite::SqliteStore;
use anarchon::{HistoryRecord, Reason, RunStatus, Scheduler};
use support::TempDb;
use support::examples::{build_example, run_example};

/// One row of the history table the example prints.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    slot: String,
    attempt: u32,
    instance: String,
    status: String,
    reason: String,
}

impl From<&HistoryRecord> for Row {
    fn from(r: &HistoryRecord) -> Self {
        Row {
            slot: r.slot.format("%H:%M:%S%.3f").to_string(),
            attempt: r.attempt,
            instance: r.instance_id.clone(),
            status: r.status.as_str().to_owned(),
            reason: r.reason.as_str().to_owned(),
        }
    }
}

/// The rows of the table under `history of ...`, after its header line.
fn table(output: &str) -> Vec<Row> {
    output
        .lines()
        .skip_while(|l| !l.starts_with("history of `long`"))
        .skip(2)
        .take_while(|l| l.starts_with("  ") && !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert!(cells.len() >= 6, "a table row has 6 cells: {l:?}");
            Row {
                slot: cells[0].to_owned(),
                attempt: cells[1].parse().expect("an attempt number"),
                instance: cells[2].to_owned(),
                status: cells[3].to_owned(),
                reason: cells[4].to_owned(),
            }
        })
        .collect()
}

/// The word after `prefix` on the first line that contains it.
fn word_after<'a>(output: &'a str, prefix: &str) -> Option<&'a str> {
    output.lines().find_map(|l| {
        let at = l.find(prefix)? + prefix.len();
        l[at..].split_whitespace().next()
    })
}

/// The node named at the start of a story line ending in `suffix` (after `[  6.0s] `).
fn node_before<'a>(output: &'a str, suffix: &str) -> Option<&'a str> {
    output
        .lines()
        .find(|l| l.contains(suffix))
        .and_then(|l| l.split_once("] "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
}

async fn history(db: &Path) -> Vec<HistoryRecord> {
    let store = SqliteStore::connect(db)
        .await
        .expect("open the example's file");
    let reader = Scheduler::leased(store).build().expect("a reader");
    let mut runs = reader.history("long", 1_000).await.expect("the history");
    runs.sort_by_key(|r| (r.slot, r.attempt));
    runs
}

/// One test, so the two examples run one after the other under any runner (nextest runs
/// each test in a process of its own): both measure takeover delays, which running them at
/// once would skew.
#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b14_failover_and_quick_start_examples_run_to_completion() {
    failover_example_shows_a_takeover_on_another_instance();
    quick_start_example_runs_to_completion();
}

fn failover_example_shows_a_takeover_on_another_instance() {
    let exe = build_example("failover", &[]);
    let db = TempDb::new("failover-example");
    let (code, out) = run_example(&exe, &[&db.0], Duration::from_secs(60));
    eprintln!("{out}");
    assert_eq!(code, Some(0), "the example reported a failure:\n{out}");

    // From the output: who was killed, who took over, and the table.
    let killed = word_after(&out, "SIGKILL -> ").expect("a `SIGKILL -> <node>` line");
    let taker = node_before(&out, "starts attempt 2 (takeover)").expect("a takeover line");
    assert_ne!(
        killed, taker,
        "the killed instance cannot take over its own run"
    );
    let printed = table(&out);
    let killed_slot = printed
        .iter()
        .find(|r| r.attempt == 1 && r.instance == killed && r.status == "interrupted")
        .unwrap_or_else(|| panic!("no interrupted attempt 1 of {killed} in the table:\n{out}"))
        .slot
        .clone();
    assert!(
        printed.iter().any(|r| r.slot == killed_slot
            && r.attempt == 2
            && r.instance == taker
            && r.reason == "takeover"
            && r.status == "succeeded"),
        "the table shows no succeeded attempt 2 of {killed_slot} on {taker}:\n{out}"
    );
    assert!(
        out.contains("Every slot started once, and again only by a takeover."),
        "{out}"
    );

    // From the file: the table is the history, and the history shows the takeover.
    let runs = tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(history(&db.0));
    let stored: Vec<Row> = runs.iter().map(Row::from).collect();
    assert_eq!(
        printed, stored,
        "the printed table is not the stored history"
    );
    let of_killed: Vec<&HistoryRecord> = runs
        .iter()
        .filter(|r| Row::from(*r).slot == killed_slot)
        .collect();
    assert_eq!(
        of_killed.len(),
        2,
        "two attempts of the killed slot: {of_killed:#?}"
    );
    let (first, second) = (of_killed[0], of_killed[1]);
    assert_eq!((first.attempt, first.instance_id.as_str()), (1, killed));
    assert_eq!(first.status, RunStatus::Interrupted);
    assert_eq!(first.error.as_deref(), Some("lease expired"));
    assert_eq!(second.attempt, 2);
    assert_ne!(
        second.instance_id, first.instance_id,
        "attempt 2 ran on another instance"
    );
    assert_eq!(second.reason, Reason::Takeover);
    assert_eq!(second.status, RunStatus::Succeeded);
    assert!(
        second.fence > first.fence,
        "a takeover carries a newer fence"
    );

    // No slot started twice without a takeover: per slot, attempts 1..n once each, and
    // every start after the first is a takeover.
    let mut slots: BTreeMap<i64, Vec<&HistoryRecord>> = BTreeMap::new();
    for run in &runs {
        slots.entry(run.slot_ms()).or_default().push(run);
    }
    assert!(
        slots.len() >= 2,
        "the killed slot and the next one: {runs:#?}"
    );
    for (slot, attempts) in &slots {
        let numbers: Vec<u32> = attempts.iter().map(|r| r.attempt).collect();
        let expected: Vec<u32> = (1..=attempts.len() as u32).collect();
        assert_eq!(numbers, expected, "slot {slot}: attempts {numbers:?}");
        let fresh = attempts
            .iter()
            .filter(|r| r.reason != Reason::Takeover)
            .count();
        assert_eq!(
            fresh, 1,
            "slot {slot} started {fresh} times without a takeover"
        );
    }
}

fn quick_start_example_runs_to_completion() {
    let exe = build_example("quick-start", &[]);
    let (code, out) = run_example::<&str>(&exe, &[], Duration::from_secs(60));
    eprintln!("{out}");
    assert_eq!(code, Some(0), "the quick start reported a failure:\n{out}");
    assert!(
        out.contains("every slot started once; a stopped or killed runner was replaced"),
        "{out}"
    );
    assert_eq!(
        out.matches("  ok   ").count(),
        6,
        "six checks passed:\n{out}"
    );
}
