//! The orchestration the multi-process examples (`quick-start`, `failover`) share, so that
//! each example file shows the scheduler API and its story, not the plumbing.
//!
//! An example runs as a parent that starts copies of itself as child processes with the
//! arguments `--node <id> <sqlite-file> <offset-ms>` ([`child`]). Each child runs one
//! scheduler instance and prints one machine-readable line per scheduler event on its stdout
//! ([`print_events`]: `EVENT start n1 slot=... attempt=1 reason=scheduled`). The parent
//! ([`Cluster`]) reads those lines, sends the signals, tells the story (coloured on a
//! terminal) and collects checks for a summary. A child exits when its stdin (held by the
//! parent) closes, so no child outlives its parent.
// Each example uses a different part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::Event;
use tokio::sync::broadcast::{self, error::RecvError};

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
    std::thread::spawn(|| {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(3);
    });
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

/// Prints each event of `events` as one `EVENT` line for the parent, until the scheduler is
/// dropped; await the task (see [`exited`]) to print the last ones.
pub(crate) fn print_events(
    id: &str,
    mut events: broadcast::Receiver<Event>,
) -> tokio::task::JoinHandle<()> {
    let id = id.to_owned();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => print_event(&id, &event),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            }
        }
    })
}

/// Tells the parent the instance is started.
pub(crate) fn ready(id: &str) {
    println!("READY {id} pid={}", std::process::id());
}

/// Prints the events of the stop (the handover) once the scheduler is dropped, then tells
/// the parent the instance is done.
pub(crate) async fn exited(id: &str, printer: tokio::task::JoinHandle<()>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), printer).await;
    println!("EXIT {id}");
}

/// `EVENT <name> <node> slot=<ms> attempt=<n> reason=<r> [skip=<why>] [cause=<why>]`,
/// with spaces in causes written as `_`.
fn print_event(id: &str, event: &Event) {
    let name = event.name();
    let line = match event {
        Event::Start(run) | Event::Lost(run) | Event::Fenced(run) => format!(
            "slot={} attempt={} reason={}",
            run.slot_ms(),
            run.attempt,
            run.reason
        ),
        Event::Success { run, duration } => format!(
            "slot={} attempt={} reason={} ms={}",
            run.slot_ms(),
            run.attempt,
            run.reason,
            duration.as_millis()
        ),
        Event::Failure { run, error } => format!(
            "slot={} attempt={} reason={} cause={}",
            run.slot_ms(),
            run.attempt,
            run.reason,
            error.to_string().replace(' ', "_")
        ),
        Event::Interrupted { run, cause } => format!(
            "slot={} attempt={} reason={} cause={}",
            run.slot_ms(),
            run.attempt,
            run.reason,
            cause.as_str().replace(' ', "_")
        ),
        Event::Skip { slot, reason, .. } => {
            format!("slot={} skip={}", slot.timestamp_millis(), reason.as_str())
        }
        Event::Error {
            operation, message, ..
        } => format!("op={operation} cause={}", message.replace(' ', "_")),
        other => format!("cause={:?}", format!("{other:?}").replace(' ', "_")),
    };
    println!("EVENT {name} {id} {line}");
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

/// One line a child printed.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    /// When the parent read it.
    pub(crate) at: Instant,
    /// `start`, `success`, `skip` ..., or `READY` / `EXIT`.
    pub(crate) kind: String,
    /// The child that printed it.
    pub(crate) node: String,
    fields: HashMap<String, String>,
}

impl Ev {
    /// The slot (epoch ms).
    pub(crate) fn slot(&self) -> Option<i64> {
        self.fields.get("slot")?.parse().ok()
    }
    /// The attempt.
    pub(crate) fn attempt(&self) -> Option<u32> {
        self.fields.get("attempt")?.parse().ok()
    }
    /// A field by name, empty when absent.
    pub(crate) fn field(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
    /// An event of this kind for this slot.
    pub(crate) fn is(&self, kind: &str, slot: i64) -> bool {
        self.kind == kind && self.slot() == Some(slot)
    }
}

struct Node {
    name: String,
    child: Child,
}

/// The parent's view: the children, what they printed, the story and its checks.
pub(crate) struct Cluster {
    begin: Instant,
    exe: PathBuf,
    /// The SQLite file the children share.
    pub(crate) db: PathBuf,
    timing: Timing,
    offset_ms: i64,
    tx: Sender<Ev>,
    rx: Receiver<Ev>,
    /// Every line read so far, in order.
    pub(crate) seen: Vec<Ev>,
    nodes: Vec<Node>,
    colour: bool,
    checks: Vec<(bool, String)>,
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `hh:mm:ss` UTC of an epoch ms.
pub(crate) fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// `2.51 s`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// A temporary SQLite path for `example`, unique to this run.
pub(crate) fn temp_db(example: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "anarchon-{example}-{}-{}.db",
        std::process::id(),
        now_ms()
    ))
}

/// Deletes an SQLite file and its WAL companions.
pub(crate) fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

impl Cluster {
    /// A cluster of children sharing `db`, whose job runs with `timing`.
    pub(crate) fn new(db: PathBuf, timing: Timing) -> Result<Self, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find its own executable: {e}"))?;
        let (tx, rx) = channel();
        Ok(Cluster {
            begin: Instant::now(),
            exe,
            db,
            timing,
            offset_ms: 0,
            tx,
            rx,
            seen: Vec::new(),
            nodes: Vec::new(),
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
        let mut child = Command::new(&self.exe)
            .arg(NODE_ARG)
            .arg(name)
            .arg(&self.db)
            .arg(self.offset_ms.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let tx = self.tx.clone();
        let node = name.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(ev) = parse(&node, &line)
                    && tx.send(ev).is_err()
                {
                    break;
                }
            }
        });
        self.nodes.push(Node {
            name: name.to_owned(),
            child,
        });
        Ok(())
    }

    /// Starts the children `names` and waits until each has started its scheduler.
    pub(crate) fn spawn_all(&mut self, names: &[&str], within: Duration) -> Result<(), String> {
        for name in names {
            self.spawn(name)?;
        }
        let ready = self.wait_for(Instant::now() + within, |seen| {
            (seen.iter().filter(|e| e.kind == "READY").count() >= names.len()).then_some(())
        });
        if ready.is_none() {
            return Err(format!(
                "the {} processes did not start in time",
                names.len()
            ));
        }
        let pids: Vec<String> = names
            .iter()
            .map(|n| format!("{} (pid {})", self.node(n), self.pid(n).unwrap_or(0)))
            .collect();
        self.say(&format!("started {}", pids.join(", ")));
        Ok(())
    }

    /// The process id of a running child.
    pub(crate) fn pid(&self, name: &str) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.child.id())
    }

    /// Reads the children's lines until `found` returns something or `deadline` passes.
    pub(crate) fn wait_for<T>(
        &mut self,
        deadline: Instant,
        mut found: impl FnMut(&[Ev]) -> Option<T>,
    ) -> Option<T> {
        loop {
            if let Some(t) = found(&self.seen) {
                return Some(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.rx.recv_timeout(left) {
                Ok(ev) => self.seen.push(ev),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Pauses, still reading the children's lines.
    pub(crate) fn pause(&mut self, d: Duration) {
        let until = Instant::now() + d;
        self.wait_for(until, |_| None::<()>);
    }

    /// Waits until the child `name` has exited; false if it is still running after `within`.
    pub(crate) fn wait_exit(&mut self, name: &str, within: Duration) -> bool {
        let Some(i) = self.nodes.iter().position(|n| n.name == name) else {
            return true;
        };
        let until = Instant::now() + within;
        loop {
            if let Ok(Some(_)) = self.nodes[i].child.try_wait() {
                self.nodes.remove(i);
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            self.pause(Duration::from_millis(50));
        }
    }

    /// Waits for `slot`: one process starts it (attempt 1), every other running process skips
    /// it as taken. Returns the start.
    pub(crate) fn one_runner(&mut self, title: &str, slot: i64) -> Option<Ev> {
        self.heading(&format!("{title} ({} UTC)", clock(slot)));
        let others = self.nodes.len().saturating_sub(1);
        let wait = Duration::from_millis((slot - now_ms()).max(0) as u64 + 2_000);
        let start = self.wait_for(Instant::now() + wait, |seen| {
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
        let skips = self.wait_for(start.at + Duration::from_secs(1), |seen| {
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
        self.wait_for(deadline, |seen| {
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
        let done = self.wait_for(until, |seen| {
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

    /// Sends SIGINT with the `kill` command; returns when it was sent.
    pub(crate) fn sigint(&mut self, name: &str) -> Instant {
        let pid = self.pid(name).unwrap_or(0);
        let sent = Instant::now();
        let ok = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            self.say(&format!("SIGINT -> {}", self.node(name)));
        } else {
            self.check(
                false,
                format!("could not send SIGINT to {name} (pid {pid})"),
            );
        }
        sent
    }

    /// Kills the child `name` with SIGKILL and reaps it; returns when it was sent.
    pub(crate) fn sigkill(&mut self, name: &str) -> Instant {
        let killed = Instant::now();
        if let Some(i) = self.nodes.iter().position(|n| n.name == name) {
            let _ = self.nodes[i].child.kill();
            let _ = self.nodes[i].child.wait();
            self.nodes.remove(i);
        }
        self.say(&format!("SIGKILL -> {}", self.node(name)));
        killed
    }

    /// Stops the children that are left: SIGINT, then SIGKILL after 5 s.
    pub(crate) fn shutdown(&mut self) {
        for n in &self.nodes {
            let _ = Command::new("kill")
                .args(["-INT", &n.child.id().to_string()])
                .status();
        }
        let until = Instant::now() + Duration::from_secs(5);
        for n in &mut self.nodes {
            while Instant::now() < until {
                if let Ok(Some(_)) = n.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !matches!(n.child.try_wait(), Ok(Some(_))) {
                let _ = n.child.kill();
                let _ = n.child.wait();
            }
        }
        self.nodes.clear();
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

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Parses a child's `READY`/`EXIT`/`EVENT` line.
fn parse(node: &str, line: &str) -> Option<Ev> {
    let mut words = line.split_whitespace();
    let kind = match words.next()? {
        "EVENT" => {
            let kind = words.next()?.to_owned();
            words.next()?;
            kind
        }
        tag @ ("READY" | "EXIT") => {
            words.next()?;
            tag.to_owned()
        }
        _ => return None,
    };
    let fields = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('_', " ")))
        .collect();
    Some(Ev {
        at: Instant::now(),
        kind,
        node: node.to_owned(),
        fields,
    })
}
