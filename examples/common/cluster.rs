//! The story the multi-process examples (`quick-start`, `failover`) share, so that each
//! example file shows the scheduler API and its story, not the plumbing.
//!
//! An example runs as a parent that starts copies of itself as child processes with the
//! arguments `--node <id> <sqlite-file> <offset-ms>` ([`child`]). Each child runs one
//! scheduler instance and prints one machine-readable line per scheduler event on its stdout
//! ([`print_events`]: `EVENT start n1 t=... slot=... attempt=1 reason=scheduled`). The
//! parent ([`Cluster`]) reads those lines, sends the signals, tells the story (coloured on a
//! terminal) and collects checks for a summary. The process plumbing (spawning, the lines,
//! signals by PID, temporary files) is the harness in `process.rs` beside this file, which
//! the slow tests use too.
// Each example uses a different part of this module.
#![allow(dead_code)]

#[path = "process.rs"]
mod process;

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

pub(crate) use process::{
    Ev, Procs, Signal, clock, exited, now_ms, print_events, ready, remove_sqlite, secs, temp_db,
};

/// The first argument that makes an example run as a child instance.
pub(crate) const NODE_ARG: &str = "--node";

// ----- the child ------------------------------------------------------------------------

/// What a child instance is told by its parent.
pub(crate) struct Instance {
    /// Its instance id (`n1`, `n2` ...).
    pub(crate) id: String,
    /// The SQLite file every instance shares.
    pub(crate) db: PathBuf,
    /// The offset of the job's grid, so the first slot comes when the parent expects it.
    pub(crate) offset: Duration,
}

/// Runs a child instance: `args` are `<id> <sqlite-file> <offset-ms>` (after [`NODE_ARG`]),
/// `run` builds, starts and stops its scheduler.
pub(crate) fn child<F, Fut>(example: &str, args: &[String], run: F) -> ExitCode
where
    F: FnOnce(Instance) -> Fut,
    Fut: Future<Output = anarchon::Result<()>>,
{
    let [id, db, offset] = args else {
        eprintln!("usage: {example} {NODE_ARG} <id> <sqlite-file> <offset-ms>");
        return ExitCode::from(2);
    };
    let Ok(offset_ms) = offset.parse::<u64>() else {
        eprintln!("{example} {NODE_ARG}: offset {offset:?} is not a number of milliseconds");
        return ExitCode::from(2);
    };
    // The parent holds our stdin: if it dies without stopping us, we go too.
    process::exit_with_parent();
    let instance = Instance {
        id: id.clone(),
        db: PathBuf::from(db),
        offset: Duration::from_millis(offset_ms),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run(instance)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{id}: {e}");
            ExitCode::FAILURE
        }
    }
}

// ----- the parent -----------------------------------------------------------------------

/// The job and lease timing of an example, for the story's waits and checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Slots come every ...
    pub(crate) interval: Duration,
    /// ... and a run works this long.
    pub(crate) work: Duration,
    /// The lease ...
    pub(crate) lease: Duration,
    /// ... and its heartbeat.
    pub(crate) heartbeat: Duration,
}

/// The parent's view: the children, what they printed, the story and its checks.
pub(crate) struct Cluster {
    begin: Instant,
    exe: PathBuf,
    /// The SQLite file the children share.
    pub(crate) db: PathBuf,
    timing: Timing,
    offset_ms: i64,
    procs: Procs,
    colour: bool,
    checks: Vec<(bool, String)>,
}

process::wraps_procs!(Cluster, procs);

impl Cluster {
    /// A cluster of children sharing `db`, whose job runs with `timing`.
    pub(crate) fn new(db: PathBuf, timing: Timing) -> Result<Self, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find its own executable: {e}"))?;
        Ok(Cluster {
            begin: Instant::now(),
            exe,
            db,
            timing,
            offset_ms: 0,
            procs: Procs::new(),
            colour: std::io::stdout().is_terminal(),
            checks: Vec::new(),
        })
    }

    /// Shifts the job's grid so its first slot comes `lead` from now; returns that slot.
    pub(crate) fn first_slot_in(&mut self, lead: Duration) -> i64 {
        let slot = now_ms() + lead.as_millis() as i64;
        self.offset_ms = slot.rem_euclid(self.timing.interval.as_millis() as i64);
        slot
    }

    /// The slot after `slot`.
    pub(crate) fn next_slot(&self, slot: i64) -> i64 {
        slot + self.timing.interval.as_millis() as i64
    }

    /// Prints the example's title, what the children share and the timing of `job`.
    pub(crate) fn intro(&self, title: &str, what: &str, job: &str) {
        let t = self.timing;
        println!("{} {what} {}", self.paint("1", title), self.db.display());
        println!(
            "job `{job}` every {} s, each run works {} s; lease {} s, heartbeat {} s",
            t.interval.as_secs_f64(),
            t.work.as_secs_f64(),
            t.lease.as_secs_f64(),
            t.heartbeat.as_secs_f64()
        );
    }

    /// `text` in an ANSI style when stdout is a terminal.
    pub(crate) fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A node's name in its colour.
    pub(crate) fn node(&self, name: &str) -> String {
        let code = match name {
            "n1" => "36",
            "n2" => "35",
            _ => "33",
        };
        self.paint(&format!("1;{code}"), name)
    }

    /// One line of the story, with the seconds since the start.
    pub(crate) fn say(&self, text: &str) {
        let t = self.paint(
            "2",
            &format!("[{:>5.1}s]", self.begin.elapsed().as_secs_f64()),
        );
        println!("{t} {text}");
        let _ = std::io::stdout().flush();
    }

    /// A heading of the story.
    pub(crate) fn heading(&self, text: &str) {
        println!("{}", self.paint("1", text));
    }

    /// Records an expected outcome for the summary.
    pub(crate) fn check(&mut self, ok: bool, text: String) {
        self.checks.push((ok, text));
    }

    /// Starts a child instance `name`.
    pub(crate) fn spawn(&mut self, name: &str) -> Result<(), String> {
        let mut command = Command::new(&self.exe);
        command
            .arg(NODE_ARG)
            .arg(name)
            .arg(&self.db)
            .arg(self.offset_ms.to_string());
        self.procs.spawn(name, command)?;
        Ok(())
    }

    /// Starts the children `names` and waits until each has started its scheduler.
    pub(crate) fn spawn_all(&mut self, names: &[&str], within: Duration) -> Result<(), String> {
        let since = self.seen.len();
        for name in names {
            self.spawn(name)?;
        }
        self.procs.wait_ready(names, since, within)?;
        let pids: Vec<String> = names
            .iter()
            .map(|n| format!("{} (pid {})", self.node(n), self.pid(n).unwrap_or(0)))
            .collect();
        self.say(&format!("started {}", pids.join(", ")));
        Ok(())
    }

    /// Waits for `slot`: one process starts it (attempt 1), every other running process skips
    /// it as taken. Returns the start.
    pub(crate) fn one_runner(&mut self, title: &str, slot: i64) -> Option<Ev> {
        self.heading(&format!("{title} ({} UTC)", clock(slot)));
        let others = self.running().saturating_sub(1);
        let wait = Duration::from_millis((slot - now_ms()).max(0) as u64 + 2_000);
        let start = self.wait_until(Instant::now() + wait, |seen| {
            seen.iter()
                .find(|e| e.is("start", slot) && e.attempt() == Some(1))
                .cloned()
        });
        let Some(start) = start else {
            self.check(false, format!("slot {}: nobody started it", clock(slot)));
            return None;
        };
        self.say(&format!(
            "{} runs it (attempt 1, {})",
            self.node(&start.node),
            start.field("reason")
        ));
        let skips = self.wait_until(start.at + Duration::from_secs(1), |seen| {
            let skipped: Vec<String> = seen
                .iter()
                .filter(|e| e.is("skip", slot) && e.field("skip") == "taken")
                .map(|e| e.node.clone())
                .collect();
            (skipped.len() >= others).then_some(skipped)
        });
        let starts = self
            .seen
            .iter()
            .filter(|e| e.is("start", slot) && e.attempt() == Some(1))
            .count();
        match skips {
            Some(mut skipped) => {
                skipped.sort();
                let names: Vec<String> = skipped.iter().map(|n| self.node(n)).collect();
                let verb = if skipped.len() == 1 { "skips" } else { "skip" };
                self.say(&format!("{} {verb} it: taken", names.join(" and ")));
                self.check(
                    starts == 1,
                    format!(
                        "slot {}: {} ran it, {} skipped it as taken",
                        clock(slot),
                        start.node,
                        skipped.join(" and ")
                    ),
                );
            }
            None => self.check(
                false,
                format!(
                    "slot {}: the {others} other processes did not skip it as taken",
                    clock(slot)
                ),
            ),
        }
        Some(start)
    }

    /// Waits until `deadline` for a process other than `not_on` to start attempt 2 of `slot`
    /// as a takeover.
    pub(crate) fn wait_takeover(
        &mut self,
        slot: i64,
        not_on: &str,
        deadline: Instant,
    ) -> Option<Ev> {
        self.wait_until(deadline, |seen| {
            seen.iter()
                .find(|e| {
                    e.is("start", slot)
                        && e.attempt() == Some(2)
                        && e.node != not_on
                        && e.field("reason") == "takeover"
                })
                .cloned()
        })
    }

    /// Tells that `ev` (a takeover) came, and how long after `since` (the `what`: the signal,
    /// the kill); returns that delay.
    pub(crate) fn took_over(&self, ev: &Ev, since: Instant, what: &str) -> Duration {
        let delay = ev.at.saturating_duration_since(since);
        self.say(&format!(
            "{} starts attempt 2 (takeover), {} after the {what}",
            self.node(&ev.node),
            secs(delay)
        ));
        delay
    }

    /// After SIGINT to `runner` at `sent`: it must hand attempt 1 of `slot` over, and another
    /// process must start attempt 2 within two heartbeats (the backups poll every heartbeat;
    /// on SQLite the file watcher tells them within about 15 ms). Returns that start.
    pub(crate) fn expect_handover(&mut self, slot: i64, runner: &str, sent: Instant) -> Option<Ev> {
        let takeover = self.wait_takeover(slot, runner, sent + Duration::from_secs(3));
        let handed = (self.seen.iter()).any(|e| e.is("interrupted", slot) && e.node == runner);
        if handed {
            self.say(&format!("{} handed the run over", self.node(runner)));
        }
        let limit = 2 * self.timing.heartbeat;
        match &takeover {
            Some(ev) => {
                let delay = self.took_over(ev, sent, "signal");
                let text = format!(
                    "SIGINT: attempt 2 on {} after {} (two heartbeats: {})",
                    ev.node,
                    secs(delay),
                    secs(limit)
                );
                self.check(handed && delay <= limit, text);
            }
            None => self.check(false, "SIGINT: no process started attempt 2".into()),
        }
        takeover
    }

    /// After SIGKILL to `runner` at `killed`: another process must start attempt 2 of `slot`
    /// once the lease has run out. Returns that start.
    pub(crate) fn expect_takeover(
        &mut self,
        slot: i64,
        runner: &str,
        killed: Instant,
    ) -> Option<Ev> {
        let Timing {
            lease, heartbeat, ..
        } = self.timing;
        let takeover = self.wait_takeover(slot, runner, killed + lease + 8 * heartbeat);
        match &takeover {
            Some(ev) => {
                let delay = self.took_over(ev, killed, "kill");
                // A takeover comes one lease after the last renewal, at most a lease and two
                // heartbeats after it. [B-14]
                let (min, max) = (lease - 2 * heartbeat, lease + 3 * heartbeat);
                let text = format!(
                    "SIGKILL: attempt 2 on {} after {} (lease {})",
                    ev.node,
                    secs(delay),
                    secs(lease)
                );
                self.check(delay >= min && delay <= max, text);
            }
            None => self.check(false, "SIGKILL: no process started attempt 2".into()),
        }
        takeover
    }

    /// Waits for attempt `attempt` of `slot`, started on `node` at `started`, to succeed.
    pub(crate) fn expect_success(&mut self, slot: i64, attempt: u32, node: &str, started: Instant) {
        let until = started + self.timing.work + Duration::from_secs(2);
        let done = self.wait_until(until, |seen| {
            seen.iter()
                .find(|e| {
                    (e.is("success", slot) || e.is("failure", slot) || e.is("lost", slot))
                        && e.attempt() == Some(attempt)
                })
                .cloned()
        });
        match done {
            Some(ev) if ev.kind == "success" => {
                self.say(&format!(
                    "{} finished attempt {attempt}: succeeded",
                    self.node(&ev.node)
                ));
                self.check(
                    ev.node == node,
                    format!("slot {}: attempt {attempt} succeeded", clock(slot)),
                );
            }
            Some(ev) => self.check(
                false,
                format!(
                    "slot {}: attempt {attempt} ended with {} on {}",
                    clock(slot),
                    ev.kind,
                    ev.node
                ),
            ),
            None => self.check(
                false,
                format!("slot {}: attempt {attempt} did not finish", clock(slot)),
            ),
        }
    }

    /// Sends SIGINT by the child's PID; returns when it was sent.
    pub(crate) fn sigint(&mut self, name: &str) -> Instant {
        let sent = Instant::now();
        match self.procs.send(name, Signal::Int) {
            Ok(_) => self.say(&format!("SIGINT -> {}", self.node(name))),
            Err(e) => self.check(false, format!("could not send SIGINT: {e}")),
        }
        sent
    }

    /// Kills the child `name` with SIGKILL and reaps it; returns when it was sent.
    pub(crate) fn sigkill(&mut self, name: &str) -> Instant {
        let killed = Instant::now();
        match self.procs.send(name, Signal::Kill) {
            Ok(_) => self.say(&format!("SIGKILL -> {}", self.node(name))),
            Err(e) => self.check(false, format!("could not send SIGKILL: {e}")),
        }
        killed
    }

    /// Prints the checks; success (and `all_ok`) when every one passed.
    pub(crate) fn summary(&self, all_ok: &str) -> ExitCode {
        let all = !self.checks.is_empty() && self.checks.iter().all(|(ok, _)| *ok);
        self.heading(&format!(
            "summary ({:.1} s)",
            self.begin.elapsed().as_secs_f64()
        ));
        for (ok, text) in &self.checks {
            let mark = if *ok {
                self.paint("32", "ok  ")
            } else {
                self.paint("31", "FAIL")
            };
            println!("  {mark} {text}");
        }
        if all {
            println!("{all_ok}");
            ExitCode::SUCCESS
        } else {
            println!("{}", self.paint("31", "an expected outcome was not seen"));
            ExitCode::FAILURE
        }
    }
}
