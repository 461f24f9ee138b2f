//! Quick start: three processes share one SQLite file; each slot runs once, a graceful stop
//! hands the run over at once and a killed runner is taken over after its lease.
//!
//! ```sh
//! cargo run --example quick-start
//! ```
//!
//! No server is needed. The example starts three copies of itself (`n1`, `n2`, `n3`) on a
//! temporary SQLite file, each registering the same job `demo`, and narrates in about 22 s:
//!
//! 1. one process runs the slot, the two others skip it as `taken`;
//! 2. `SIGINT` to the runner: it stops, its handler returns an error because its signal was
//!    cancelled, so the run is handed over and another process starts attempt 2 within two
//!    heartbeats (reason `takeover`); the stopped process is then started again;
//! 3. `SIGKILL` to the runner of the next slot: nobody renews its lease, so another process
//!    waits it out (about 3 s) and starts attempt 2.
//!
//! The numbers: lease 3 s, heartbeat 0.5 s, no jitter, and a job whose run takes 4 s of
//! work, scheduled every 10 s. The 10 s spacing is chosen so the story fits: a takeover
//! after a crash comes one lease (3 s) plus up to a heartbeat after the last renewal, and
//! if the next slot came due before it, the crashed run would be marked `interrupted` and
//! replaced by that slot instead of restarted [B-15]; every 10 s leaves room for the 4 s
//! run of attempt 2 before the next slot. The parent picks the grid offset so the first slot
//! comes 2.5 s after the children start (otherwise the wait for the first slot would vary
//! from run to run), and catch-up is off, since on a fresh file the slot just before the
//! start would otherwise be caught up at once.
//!
//! Each child prints one machine-readable line per scheduler event on its stdout
//! (`EVENT start n1 slot=... attempt=1 reason=scheduled`); the parent reads them, prints a
//! short story (coloured on a terminal), then a summary, and exits non-zero when an
//! expected outcome was not seen, so CI runs it as a smoke test. Unix only (it sends
//! signals with `kill`).

#[cfg(not(unix))]
fn main() {
    eprintln!("quick-start sends SIGINT and SIGKILL to its child processes: it needs Unix");
    std::process::exit(2);
}

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("node") => node::main(&args[1..]),
        None => parent::main(),
        Some(other) => {
            eprintln!("quick-start: unknown role {other:?} (run it without arguments)");
            std::process::ExitCode::from(2)
        }
    }
}

/// The job and lease timing shared by the parent's story and the children.
#[cfg(unix)]
mod timing {
    /// Slots come every 10 s.
    pub(crate) const INTERVAL_MS: u64 = 10_000;
    /// A run takes 4 s of work.
    pub(crate) const WORK_MS: u64 = 4_000;
    /// Lease 3 s ...
    pub(crate) const LEASE_MS: u64 = 3_000;
    /// ... renewed every 0.5 s.
    pub(crate) const HEARTBEAT_MS: u64 = 500;
}

/// A child process: one scheduler instance printing its events.
#[cfg(unix)]
mod node {
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::time::Duration;

    use anarchon::sqlite::SqliteStore;
    use anarchon::{Event, Scheduler};
    use tokio::sync::broadcast::error::RecvError;

    use crate::timing::*;

    pub(crate) fn main(args: &[String]) -> ExitCode {
        let [id, path, offset] = args else {
            eprintln!("usage: quick-start node <id> <sqlite-file> <offset-ms>");
            return ExitCode::from(2);
        };
        let Ok(offset_ms) = offset.parse::<i64>() else {
            eprintln!("quick-start node: offset {offset:?} is not a number of milliseconds");
            return ExitCode::from(2);
        };
        // The parent holds our stdin: if it dies without stopping us, we go too.
        std::thread::spawn(|| {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            std::process::exit(3);
        });
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        match runtime.block_on(run(id.clone(), PathBuf::from(path), offset_ms)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{id}: {e}");
                ExitCode::FAILURE
            }
        }
    }

    async fn run(id: String, path: PathBuf, offset_ms: i64) -> anarchon::Result<()> {
        let store = SqliteStore::connect(&path).await?;
        let scheduler = Scheduler::leased(store)
            .instance_id(&id)
            .lease(Duration::from_millis(LEASE_MS))
            .heartbeat(Duration::from_millis(HEARTBEAT_MS))
            .jitter(Duration::from_millis(0))
            .catch_up_window(Duration::from_millis(0))
            .build()?;
        scheduler
            .every("demo", Duration::from_millis(INTERVAL_MS))
            .offset(Duration::from_millis(
                offset_ms.rem_euclid(INTERVAL_MS as i64) as u64,
            ))
            .handler(|ctx| async move {
                // The work: 4 s, cut short when the signal is cancelled (stop, lost lease).
                tokio::select! {
                    _ = ctx.signal.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(WORK_MS)) => {}
                }
                // An error after cancellation hands the run over to a backup; Ok would
                // record it as succeeded.
                Ok(ctx.check_cancelled()?)
            })?;

        let mut events = scheduler.events();
        let printer = tokio::spawn({
            let id = id.clone();
            async move {
                loop {
                    match events.recv().await {
                        Ok(event) => print_event(&id, &event),
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => break,
                    }
                }
            }
        });

        scheduler.start().await?;
        println!("READY {id} pid={}", std::process::id());
        // A service waits for its stop signal like this; SIGKILL never gets here.
        tokio::signal::ctrl_c().await.ok();
        scheduler.stop(Duration::from_secs(5)).await?;
        drop(scheduler);
        // The events of the stop (the handover) are printed before the process exits.
        let _ = tokio::time::timeout(Duration::from_secs(1), printer).await;
        println!("EXIT {id}");
        Ok(())
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
                error.replace(' ', "_")
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
}

/// The parent: starts the children, sends the signals and tells what happened.
#[cfg(unix)]
mod parent {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, IsTerminal, Write};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, ExitCode, Stdio};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use crate::timing::*;

    /// How long after the children start the first slot comes.
    const LEAD_MS: u64 = 2_500;
    /// How long the runner works before it gets a signal.
    const SIGNAL_AFTER: Duration = Duration::from_millis(1_000);

    /// One line a child printed.
    #[derive(Debug, Clone)]
    struct Ev {
        at: Instant,
        kind: String,
        node: String,
        fields: HashMap<String, String>,
    }

    impl Ev {
        fn slot(&self) -> Option<i64> {
            self.fields.get("slot")?.parse().ok()
        }
        fn attempt(&self) -> Option<u32> {
            self.fields.get("attempt")?.parse().ok()
        }
        fn field(&self, key: &str) -> &str {
            self.fields.get(key).map_or("", String::as_str)
        }
        fn is(&self, kind: &str, slot: i64) -> bool {
            self.kind == kind && self.slot() == Some(slot)
        }
    }

    struct Node {
        name: String,
        child: Child,
    }

    struct Demo {
        begin: Instant,
        exe: PathBuf,
        db: PathBuf,
        offset_ms: i64,
        tx: Sender<Ev>,
        rx: Receiver<Ev>,
        seen: Vec<Ev>,
        nodes: Vec<Node>,
        colour: bool,
        checks: Vec<(bool, String)>,
    }

    pub(crate) fn main() -> ExitCode {
        let colour = std::io::stdout().is_terminal();
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                eprintln!("quick-start: cannot find its own executable: {e}");
                return ExitCode::FAILURE;
            }
        };
        let db = std::env::temp_dir().join(format!(
            "anarchon-quick-start-{}-{}.db",
            std::process::id(),
            now_ms()
        ));
        let (tx, rx) = channel();
        let mut demo = Demo {
            begin: Instant::now(),
            exe,
            db,
            offset_ms: 0,
            tx,
            rx,
            seen: Vec::new(),
            nodes: Vec::new(),
            colour,
            checks: Vec::new(),
        };
        let result = demo.run();
        demo.shutdown();
        remove_db(&demo.db);
        if let Err(e) = result {
            eprintln!("quick-start: {e}");
            return ExitCode::FAILURE;
        }
        demo.summary()
    }

    fn now_ms() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// `hh:mm:ss` UTC of an epoch ms.
    fn clock(ms: i64) -> String {
        let s = ms.div_euclid(1000).rem_euclid(86_400);
        format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }

    fn remove_db(db: &Path) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
    }

    fn secs(d: Duration) -> String {
        format!("{:.2} s", d.as_secs_f64())
    }

    impl Demo {
        fn paint(&self, code: &str, text: &str) -> String {
            if self.colour {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_owned()
            }
        }

        fn node(&self, name: &str) -> String {
            let code = match name {
                "n1" => "36",
                "n2" => "35",
                _ => "33",
            };
            self.paint(&format!("1;{code}"), name)
        }

        fn say(&self, text: &str) {
            let t = self.paint(
                "2",
                &format!("[{:>5.1}s]", self.begin.elapsed().as_secs_f64()),
            );
            println!("{t} {text}");
            let _ = std::io::stdout().flush();
        }

        fn heading(&self, text: &str) {
            println!("{}", self.paint("1", text));
        }

        fn check(&mut self, ok: bool, text: String) {
            self.checks.push((ok, text));
        }

        fn spawn(&mut self, name: &str) -> Result<(), String> {
            let mut child = Command::new(&self.exe)
                .arg("node")
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

        fn pid(&self, name: &str) -> Option<u32> {
            self.nodes
                .iter()
                .find(|n| n.name == name)
                .map(|n| n.child.id())
        }

        /// Reads the children's lines until `found` returns something or `deadline` passes.
        fn wait_for<T>(
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
                    Err(RecvTimeoutError::Timeout) => return None,
                    Err(RecvTimeoutError::Disconnected) => return None,
                }
            }
        }

        /// Pauses, still reading the children's lines.
        fn pause(&mut self, d: Duration) {
            let until = Instant::now() + d;
            self.wait_for(until, |_| None::<()>);
        }

        fn wait_exit(&mut self, name: &str, within: Duration) -> bool {
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

        fn run(&mut self) -> Result<(), String> {
            let first_slot = now_ms() + LEAD_MS as i64;
            self.offset_ms = first_slot.rem_euclid(INTERVAL_MS as i64);
            println!(
                "{} three processes share {}",
                self.paint("1", "anarchon quick start:"),
                self.db.display()
            );
            println!(
                "job `demo` every {} s, each run works {} s; lease {} s, heartbeat {} s",
                INTERVAL_MS / 1000,
                WORK_MS / 1000,
                LEASE_MS / 1000,
                HEARTBEAT_MS as f64 / 1000.0
            );
            for name in ["n1", "n2", "n3"] {
                self.spawn(name)?;
            }
            let ready = self.wait_for(
                Instant::now() + Duration::from_millis(LEAD_MS - 300),
                |seen| (seen.iter().filter(|e| e.kind == "READY").count() >= 3).then_some(()),
            );
            if ready.is_none() {
                return Err("the three processes did not start in time".into());
            }
            let pids: Vec<String> = ["n1", "n2", "n3"]
                .iter()
                .map(|n| format!("{} (pid {})", self.node(n), self.pid(n).unwrap_or(0)))
                .collect();
            self.say(&format!("started {}", pids.join(", ")));

            // 1. One slot, one runner.
            let Some(runner_a) = self.scene_one_runner("1. a slot comes due", first_slot) else {
                return Ok(());
            };

            // 2. SIGINT: graceful stop and handover.
            self.heading("2. SIGINT to the runner: it hands the run over");
            self.pause(SIGNAL_AFTER);
            let sent = self.signal_int(&runner_a);
            let takeover = self.wait_for(sent + Duration::from_secs(3), |seen| {
                seen.iter()
                    .find(|e| {
                        e.is("start", first_slot)
                            && e.attempt() == Some(2)
                            && e.node != runner_a
                            && e.field("reason") == "takeover"
                    })
                    .cloned()
            });
            let handed = self
                .seen
                .iter()
                .any(|e| e.is("interrupted", first_slot) && e.node == runner_a);
            if handed {
                self.say(&format!("{} handed the run over", self.node(&runner_a)));
            }
            let limit = Duration::from_millis(2 * HEARTBEAT_MS);
            match &takeover {
                Some(ev) => {
                    let delay = ev.at.saturating_duration_since(sent);
                    self.say(&format!(
                        "{} starts attempt 2 (takeover), {} after the signal",
                        self.node(&ev.node),
                        secs(delay)
                    ));
                    self.check(
                        handed && delay <= limit,
                        format!(
                            "SIGINT: attempt 2 on {} after {} (two heartbeats: {})",
                            ev.node,
                            secs(delay),
                            secs(limit)
                        ),
                    );
                }
                None => self.check(false, "SIGINT: no process started attempt 2".into()),
            }
            let exited = self.wait_exit(&runner_a, Duration::from_secs(6));
            if exited {
                self.spawn(&runner_a)?;
                self.say(&format!(
                    "{} stopped; started again, it is now a backup",
                    self.node(&runner_a)
                ));
            } else {
                self.check(false, format!("{runner_a} did not exit after SIGINT"));
            }
            if let Some(ev) = &takeover {
                self.expect_success(first_slot, 2, &ev.node.clone(), ev.at);
            }

            // 3. SIGKILL: the lease runs out, a backup takes over.
            let second_slot = first_slot + INTERVAL_MS as i64;
            let Some(runner_b) = self.scene_one_runner("3. the next slot", second_slot) else {
                return Ok(());
            };
            self.heading("   SIGKILL to the runner: its lease runs out");
            self.pause(SIGNAL_AFTER);
            let killed = Instant::now();
            if let Some(i) = self.nodes.iter().position(|n| n.name == runner_b) {
                let _ = self.nodes[i].child.kill();
                let _ = self.nodes[i].child.wait();
                self.nodes.remove(i);
            }
            self.say(&format!("SIGKILL -> {}", self.node(&runner_b)));
            let takeover = self.wait_for(killed + Duration::from_secs(7), |seen| {
                seen.iter()
                    .find(|e| {
                        e.is("start", second_slot)
                            && e.attempt() == Some(2)
                            && e.field("reason") == "takeover"
                    })
                    .cloned()
            });
            match &takeover {
                Some(ev) => {
                    let delay = ev.at.saturating_duration_since(killed);
                    self.say(&format!(
                        "{} starts attempt 2 (takeover), {} after the kill",
                        self.node(&ev.node),
                        secs(delay)
                    ));
                    // A takeover comes one lease after the last renewal, at most a lease and
                    // two heartbeats after it. [B-14]
                    let min = Duration::from_millis(LEASE_MS - HEARTBEAT_MS * 2);
                    let max = Duration::from_millis(LEASE_MS + HEARTBEAT_MS * 3);
                    self.check(
                        delay >= min && delay <= max,
                        format!(
                            "SIGKILL: attempt 2 on {} after {} (lease {})",
                            ev.node,
                            secs(delay),
                            secs(Duration::from_millis(LEASE_MS))
                        ),
                    );
                    self.expect_success(second_slot, 2, &ev.node.clone(), ev.at);
                }
                None => self.check(false, "SIGKILL: no process started attempt 2".into()),
            }
            Ok(())
        }

        /// Waits for `slot`: one process starts it, the two others skip it as taken.
        fn scene_one_runner(&mut self, title: &str, slot: i64) -> Option<String> {
            self.heading(&format!("{title} ({} UTC)", clock(slot)));
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
                (skipped.len() >= 2).then_some(skipped)
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
                    self.say(&format!("{} skip it: taken", names.join(" and ")));
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
                        "slot {}: the two other processes did not skip it as taken",
                        clock(slot)
                    ),
                ),
            }
            Some(start.node)
        }

        fn expect_success(&mut self, slot: i64, attempt: u32, node: &str, started: Instant) {
            let until = started + Duration::from_millis(WORK_MS + 2_000);
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
        fn signal_int(&mut self, name: &str) -> Instant {
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

        /// Stops the children that are left: SIGINT, then SIGKILL after 5 s.
        fn shutdown(&mut self) {
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

        fn summary(&self) -> ExitCode {
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
                println!("every slot started once; a stopped or killed runner was replaced");
                ExitCode::SUCCESS
            } else {
                println!("{}", self.paint("31", "an expected outcome was not seen"));
                ExitCode::FAILURE
            }
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
}
