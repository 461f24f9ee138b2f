//! The workspace's one real-process harness: a parent that starts scheduler nodes as child
//! processes, reads the lines they print and signals them by PID ([`Procs`]), and the
//! child's side, which prints one line per scheduler event ([`print_events`]).
//!
//! Used by the multi-process examples (`quick-start` and `failover` through
//! `examples/common/cluster.rs`, `exactly-once` directly) and by the slow real-process tests
//! (`tests/support/mod.rs` takes this file in with `#[path]`). It lives among the examples,
//! not in the `anarchon-test-support` crate, because the examples are part of the published
//! `anarchon` package and that crate is not published: `cargo package` strips a
//! dev-dependency without a version, so an example must compile from files of its own.
//!
//! The lines: `EVENT <name> <node> t=<ms> slot=<ms> attempt=<n> reason=<r> fence=<f>
//! [ms=..] [skip=..] [cause=..]` (spaces in causes written as `_`), `READY <node> t=<ms>
//! pid=<pid>`, `STOPPING <node> t=<ms> cause=<why>`, `EXIT <node> t=<ms>`, `FAILED <node>
//! <error>`, `LAGGED <node> n=<missed>`, and the lines of an example's own that its parent
//! asks for ([`Procs::reading`]). A child exits when its stdin, held by the parent, closes
//! ([`exit_with_parent`], [`parent_gone`]), so no child outlives its parent.
// Each example and test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::Event;
use tokio::sync::broadcast::{self, error::RecvError};

// ----- the host clock -------------------------------------------------------------------

/// Milliseconds since the epoch on the host clock (every process of a run shares it).
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

/// `hh:mm:ss.mmm` UTC of an epoch ms.
pub(crate) fn clock_ms(ms: i64) -> String {
    format!("{}.{:03}", clock(ms), ms.rem_euclid(1000))
}

/// `2.51 s`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

// ----- temporary SQLite files -----------------------------------------------------------

/// A temporary SQLite path for `name`, unique to this run; [`remove_sqlite`] deletes it.
pub(crate) fn temp_db(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "anarchon-{name}-{}-{}.db",
        std::process::id(),
        now_ms()
    ))
}

/// Deletes an SQLite file and its WAL companions.
pub(crate) fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// A temporary SQLite file ([`temp_db`]), deleted with its companions when dropped.
pub(crate) struct TempDb(pub(crate) PathBuf);

impl TempDb {
    /// A fresh temporary path for `name`.
    pub(crate) fn new(name: &str) -> Self {
        TempDb(temp_db(name))
    }

    /// The path.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// The store spec of this file for the tests' nodes: `sqlite:<path>`.
    pub(crate) fn spec(&self) -> String {
        format!("sqlite:{}", self.0.display())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        remove_sqlite(&self.0);
    }
}

// ----- the child ------------------------------------------------------------------------

/// Exits the process (code 3) when its stdin closes: the parent holds it, so a child never
/// outlives a parent that died without stopping it.
pub(crate) fn exit_with_parent() {
    std::thread::spawn(|| {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(3);
    });
}

/// Resolves when stdin closes: the parent's graceful stop (it drops the child's stdin) or
/// its death.
pub(crate) async fn parent_gone() {
    let _ = tokio::task::spawn_blocking(|| {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    })
    .await;
}

/// The `EVENT` line of `event` on node `id`, stamped with the host clock.
pub(crate) fn event_line(id: &str, event: &Event) -> String {
    let t = now_ms();
    let run = |r: &anarchon::RunInfo| {
        format!(
            "slot={} attempt={} reason={} fence={}",
            r.slot_ms(),
            r.attempt,
            r.reason,
            r.fence
        )
    };
    let rest = match event {
        Event::Start(r) | Event::Lost(r) | Event::Fenced(r) => run(r),
        Event::Success { run: r, duration } => format!("{} ms={}", run(r), duration.as_millis()),
        Event::Failure { run: r, error } => {
            format!("{} cause={}", run(r), error.to_string().replace(' ', "_"))
        }
        Event::Interrupted { run: r, cause } => {
            format!("{} cause={}", run(r), cause.as_str().replace(' ', "_"))
        }
        Event::Skip { slot, reason, .. } => {
            format!("slot={} skip={}", slot.timestamp_millis(), reason.as_str())
        }
        Event::Error {
            operation, message, ..
        } => format!("op={operation} cause={}", message.replace(' ', "_")),
        other => format!("cause={}", format!("{other:?}").replace(' ', "_")),
    };
    format!("EVENT {} {id} t={t} {rest}", event.name())
}

/// Prints each event of `events` as one `EVENT` line (a `LAGGED` line for missed ones)
/// until the scheduler is dropped; await the task (see [`exited`]) to print the last ones.
pub(crate) fn print_events(
    id: &str,
    mut events: broadcast::Receiver<Event>,
) -> tokio::task::JoinHandle<()> {
    let id = id.to_owned();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => println!("{}", event_line(&id, &event)),
                Err(RecvError::Lagged(n)) => println!("LAGGED {id} n={n}"),
                Err(RecvError::Closed) => break,
            }
        }
    })
}

/// Tells the parent the node has started its scheduler.
pub(crate) fn ready(id: &str) {
    println!("READY {id} t={} pid={}", now_ms(), std::process::id());
}

/// Tells the parent the node is stopping, and why (`SIGINT`, `SIGTERM` ...).
pub(crate) fn stopping(id: &str, cause: &str) {
    println!("STOPPING {id} t={} cause={cause}", now_ms());
}

/// Prints the events of the stop (the handover) once the scheduler is dropped, then tells
/// the parent the node is done.
pub(crate) async fn exited(id: &str, printer: tokio::task::JoinHandle<()>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), printer).await;
    println!("EXIT {id} t={}", now_ms());
}

// ----- the parent -----------------------------------------------------------------------

/// A signal the parent sends a child by its PID (with the `kill` command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGINT: a graceful stop (Ctrl-C).
    Int,
    /// SIGTERM: a graceful stop.
    Term,
    /// SIGSTOP: frozen until SIGCONT.
    Stop,
    /// SIGCONT: thawed.
    Cont,
    /// SIGKILL: dead at once, nothing handed over; the parent reaps it.
    Kill,
}

impl Signal {
    /// `INT`, `TERM`, `STOP`, `CONT`, `KILL`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::Int => "INT",
            Signal::Term => "TERM",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Kill => "KILL",
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How [`Procs::shutdown`] asks the children to stop before it kills what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Farewell {
    /// This signal (SIGINT by default).
    Signal(Signal),
    /// Their stdin closes.
    CloseStdin,
}

/// One line a child printed.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    /// `start`, `skip`, `success` ... for an `EVENT` line, else its first word (`READY`,
    /// `STOPPING`, `EXIT`, `FAILED`, `LAGGED`, or a tag of [`Procs::reading`]).
    pub(crate) kind: String,
    /// The child that printed it (the name it was started with).
    pub(crate) node: String,
    /// When the child printed it (its `t=` field, host clock, epoch ms), else when the
    /// parent read it.
    pub(crate) t: i64,
    /// When the parent read it.
    pub(crate) at: Instant,
    /// The `key=value` words, `_` turned back into spaces.
    pub(crate) fields: HashMap<String, String>,
    /// The line from its tag on.
    pub(crate) text: String,
}

impl Ev {
    /// The slot, if any.
    pub(crate) fn slot(&self) -> Option<i64> {
        self.fields.get("slot")?.parse().ok()
    }
    /// The attempt, if any.
    pub(crate) fn attempt(&self) -> Option<u32> {
        self.fields.get("attempt")?.parse().ok()
    }
    /// A field, or "".
    pub(crate) fn field(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
    /// This kind of event about this slot.
    pub(crate) fn is(&self, kind: &str, slot: i64) -> bool {
        self.kind == kind && self.slot() == Some(slot)
    }
}

/// The tags of the harness's own lines.
const TAGS: [&str; 6] = ["EVENT", "READY", "STOPPING", "EXIT", "FAILED", "LAGGED"];

/// Parses a line of `node` that carries one of `tags`: text before the tag (libtest may
/// print `test child_node ... ` in front of a node's first line) is dropped.
fn parse(node: &str, line: &str, tags: &[&'static str]) -> Option<Ev> {
    let at = tags
        .iter()
        .filter_map(|tag| {
            line.match_indices(tag)
                .map(|(i, _)| i)
                .find(|&i| line[i + tag.len()..].starts_with(' ') || i + tag.len() == line.len())
        })
        .min()?;
    let text = &line[at..];
    let mut words = text.split_whitespace();
    let mut kind = words.next()?.to_owned();
    if kind == "EVENT" {
        kind = words.next()?.to_owned();
    }
    let _node = words.next();
    let fields: HashMap<String, String> = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('_', " ")))
        .collect();
    let t = fields
        .get("t")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(now_ms);
    Some(Ev {
        kind,
        node: node.to_owned(),
        t,
        at: Instant::now(),
        fields,
        text: text.to_owned(),
    })
}

/// The children a parent started, everything they printed, and the signals it sent. Drop
/// stops the children that are left ([`Procs::shutdown`]).
pub(crate) struct Procs {
    children: Vec<(String, Child)>,
    frozen: Vec<String>,
    tags: Vec<&'static str>,
    farewell: Farewell,
    grace: Duration,
    tx: Sender<Ev>,
    rx: Receiver<Ev>,
    /// Every line read so far, in arrival order.
    pub(crate) seen: Vec<Ev>,
    /// `(epoch ms, "SIG<name> -> <child>")` of each signal sent, for the log.
    pub(crate) signals: Vec<(i64, String)>,
}

impl Default for Procs {
    fn default() -> Self {
        Self::new()
    }
}

impl Procs {
    /// No child yet; [`shutdown`](Self::shutdown) sends SIGINT and kills after 5 s.
    pub(crate) fn new() -> Self {
        let (tx, rx) = channel();
        Procs {
            children: Vec::new(),
            frozen: Vec::new(),
            tags: TAGS.to_vec(),
            farewell: Farewell::Signal(Signal::Int),
            grace: Duration::from_secs(5),
            tx,
            rx,
            seen: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Also keeps the lines that start with these tags (besides the harness's own).
    pub(crate) fn reading(mut self, tags: &[&'static str]) -> Self {
        self.tags.extend_from_slice(tags);
        self
    }

    /// How [`shutdown`](Self::shutdown) stops the children, and how long it gives them.
    pub(crate) fn stopped_by(mut self, farewell: Farewell, grace: Duration) -> Self {
        self.farewell = farewell;
        self.grace = grace;
        self
    }

    /// Starts `command` as the child `name`, its stdin and stdout piped to us (its stderr
    /// goes to ours); returns its PID. A child of that name started before (a node started
    /// again after it stopped) is forgotten once exited; while it still runs it keeps only
    /// the shutdown's attention, and the name means the new one.
    pub(crate) fn spawn(&mut self, name: &str, mut command: Command) -> Result<u32, String> {
        self.children
            .retain_mut(|(n, c)| n != name || matches!(c.try_wait(), Ok(None)));
        for (n, _) in self.children.iter_mut().filter(|(n, _)| n == name) {
            n.push_str(" (replaced)");
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {name} ({command:?}): {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, node, tags) = (self.tx.clone(), name.to_owned(), self.tags.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(ev) = parse(&node, &line, &tags)
                    && tx.send(ev).is_err()
                {
                    break;
                }
            }
        });
        let pid = child.id();
        self.children.push((name.to_owned(), child));
        Ok(pid)
    }

    /// The children still running (or not reaped yet).
    pub(crate) fn running(&self) -> usize {
        self.children.len()
    }

    /// The PID of a child, while the parent holds it.
    pub(crate) fn pid(&self, name: &str) -> Option<u32> {
        let (_, child) = self.children.iter().find(|(n, _)| n == name)?;
        Some(child.id())
    }

    /// True while the child's process is alive.
    pub(crate) fn is_running(&mut self, name: &str) -> bool {
        self.children
            .iter_mut()
            .find(|(n, _)| n == name)
            .is_some_and(|(_, c)| matches!(c.try_wait(), Ok(None)))
    }

    /// The next line any child prints within `within` (kept in [`seen`](Self::seen) too).
    pub(crate) fn next_line(&mut self, within: Duration) -> Option<Ev> {
        let ev = self.rx.recv_timeout(within).ok()?;
        self.seen.push(ev.clone());
        Some(ev)
    }

    /// Reads lines until `found` returns something or `deadline` passes.
    pub(crate) fn wait_until<T>(
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

    /// Reads lines until `found` returns something or `within` passes.
    pub(crate) fn wait_for<T>(
        &mut self,
        within: Duration,
        found: impl FnMut(&[Ev]) -> Option<T>,
    ) -> Option<T> {
        self.wait_until(Instant::now() + within, found)
    }

    /// Waits for the first line matching `pred` (searching everything seen so far).
    pub(crate) fn wait_event(
        &mut self,
        within: Duration,
        pred: impl Fn(&Ev) -> bool,
    ) -> Option<Ev> {
        self.wait_for(within, |seen| seen.iter().find(|e| pred(e)).cloned())
    }

    /// Waits until each of `names` printed `READY` after line `since` of
    /// [`seen`](Self::seen); an error names a child that printed `FAILED` or the timeout.
    pub(crate) fn wait_ready(
        &mut self,
        names: &[&str],
        since: usize,
        within: Duration,
    ) -> Result<(), String> {
        let outcome = self.wait_for(within, |seen| {
            let seen = seen.get(since..).unwrap_or_default();
            if let Some(f) = seen.iter().find(|e| e.kind == "FAILED") {
                return Some(Err(format!("{} failed: {}", f.node, f.text)));
            }
            let ready = names
                .iter()
                .all(|n| seen.iter().any(|e| e.kind == "READY" && e.node == *n));
            ready.then_some(Ok(()))
        });
        outcome.unwrap_or_else(|| Err(format!("{names:?} did not start within {within:?}")))
    }

    /// Keeps reading lines for `d`.
    pub(crate) fn pause(&mut self, d: Duration) {
        self.wait_for(d, |_| None::<()>);
    }

    /// Keeps reading lines until the host clock reaches `t` (epoch ms).
    pub(crate) fn pause_until(&mut self, t: i64) {
        let d = (t - now_ms()).max(0) as u64;
        self.pause(Duration::from_millis(d));
    }

    /// Sends `sig` to the child `name` by its PID; returns when (epoch ms). A SIGKILLed
    /// child is reaped and forgotten; a SIGSTOPped one gets SIGCONT before the shutdown.
    pub(crate) fn send(&mut self, name: &str, sig: Signal) -> Result<i64, String> {
        let pid = self
            .pid(name)
            .ok_or_else(|| format!("no child {name} to send SIG{} to", sig.name()))?;
        let t = now_ms();
        let sent = Command::new("kill")
            .args(["-s", sig.name(), &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !sent {
            return Err(format!("kill -s {} {pid} ({name}) failed", sig.name()));
        }
        self.signals
            .push((t, format!("SIG{} -> {name}", sig.name())));
        match sig {
            Signal::Stop => self.frozen.push(name.to_owned()),
            Signal::Cont => self.frozen.retain(|f| f != name),
            Signal::Kill => self.reap(name),
            Signal::Int | Signal::Term => {}
        }
        Ok(t)
    }

    /// [`send`](Self::send), panicking when it could not be sent (for tests).
    pub(crate) fn signal(&mut self, name: &str, sig: Signal) -> i64 {
        self.send(name, sig).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits for the child `name` to exit and forgets it (after it exited, or was killed).
    pub(crate) fn reap(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.children.remove(i);
            let _ = child.wait();
        }
        self.frozen.retain(|f| f != name);
    }

    /// Waits until the child `name` exits, reading lines meanwhile; false if it still runs
    /// after `within`.
    pub(crate) fn wait_exit(&mut self, name: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let exited = match self.children.iter_mut().find(|(n, _)| n == name) {
                None => true,
                Some((_, c)) => !matches!(c.try_wait(), Ok(None)),
            };
            if exited {
                self.reap(name);
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.pause(Duration::from_millis(25));
        }
    }

    /// Stops every child left: SIGCONT to the frozen ones, then the farewell
    /// ([`stopped_by`](Self::stopped_by): SIGINT unless told otherwise), and SIGKILL to what
    /// still runs after the grace time.
    pub(crate) fn shutdown(&mut self) {
        for name in std::mem::take(&mut self.frozen) {
            if let Some(pid) = self.pid(&name) {
                let _ = Command::new("kill")
                    .args(["-s", "CONT", &pid.to_string()])
                    .status();
            }
        }
        for (_, child) in &mut self.children {
            match self.farewell {
                Farewell::Signal(sig) => {
                    let _ = Command::new("kill")
                        .args(["-s", sig.name(), &child.id().to_string()])
                        .status();
                }
                Farewell::CloseStdin => drop(child.stdin.take()),
            }
        }
        let deadline = Instant::now() + self.grace;
        for (_, child) in &mut self.children {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.children.clear();
    }

    /// Every line read and every signal sent, in time order, for a failure message.
    pub(crate) fn log(&self) -> String {
        let t0 = self.seen.first().map_or(0, |e| e.t);
        let mut lines: Vec<(i64, String)> = self
            .seen
            .iter()
            .map(|e| {
                let mut f: Vec<String> = e
                    .fields
                    .iter()
                    .filter(|(k, _)| k.as_str() != "t")
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                f.sort();
                (e.t, format!("{} {} {}", e.node, e.kind, f.join(" ")))
            })
            .collect();
        lines.extend(self.signals.iter().cloned());
        lines.sort_by_key(|(t, _)| *t);
        lines
            .iter()
            .map(|(t, l)| format!("  {:>7.3}s {l}", (t - t0) as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `Deref` and `DerefMut` from a type that wraps [`Procs`] (in the field named) to it, so
/// the wrapper reads, waits and signals as `Procs` does.
#[allow(unused_macros)] // exactly-once uses `Procs` itself.
macro_rules! wraps_procs {
    ($wrapper:ty, $field:ident) => {
        impl std::ops::Deref for $wrapper {
            type Target = Procs;
            fn deref(&self) -> &Procs {
                &self.$field
            }
        }

        impl std::ops::DerefMut for $wrapper {
            fn deref_mut(&mut self) -> &mut Procs {
                &mut self.$field
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use wraps_procs;
