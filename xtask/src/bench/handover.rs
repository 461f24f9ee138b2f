//! `cargo xtask bench handover`: graceful handover across processes. Three bench nodes
//! (`bench-node handover`, release build) share one job whose handler holds for a while; each
//! round sends SIGTERM to the node running attempt 1 of the current slot and times how long
//! until attempt 2 of that slot runs on another node (its handler's own line, µs clock), then
//! restarts the stopped node. Beside it, in the same run, the store's bare one-row operation
//! (as `bench precision` measures it), and the split of each handover from the nodes' lines:
//! signal delivered, handler cancelled, release answered, takeover started, handler running.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::node::{self, Node, RunDir, StoreKind};
use super::session::Cleanup;
use super::stats::{self, Summary};

/// The target: signal -> attempt 2 started elsewhere, in ms.
const TARGET_MS: f64 = 50.0;

/// How many nodes share the job.
const NODES: usize = 3;

/// The options of `bench handover`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HandoverArgs {
    /// The stores, in order; empty: SQLite, and Redis and PostgreSQL where their URL is set.
    pub(crate) stores: Vec<StoreKind>,
    pub(crate) rounds: u32,
    /// The job's interval.
    pub(crate) every_ms: u64,
    /// How long a handler runs when nobody stops it.
    pub(crate) hold_ms: u64,
    pub(crate) keep: bool,
}

/// `cargo xtask bench handover`: 3 scheduler processes share one long job; each round
/// sends SIGTERM to attempt 1's owner and times signal -> attempt 2 started elsewhere.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// Stores, comma-separated or repeated (sqlite, redis, postgres); default: SQLite, and
    /// Redis and PostgreSQL where their URL is set.
    #[arg(long, value_delimiter = ',', value_parser = StoreKind::parse)]
    store: Vec<StoreKind>,
    /// Handovers per store (1 to 10,000).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rounds: u32,
    /// The job's interval (at most an hour).
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    every_ms: u64,
    /// How long a handler runs when nobody stops it (at least 1000, and 1000 below
    /// --every-ms).
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    hold_ms: u64,
    /// Keep the run's folders (the nodes' logs).
    #[arg(long)]
    keep: bool,
}

impl Opts {
    /// Checks what clap cannot say alone.
    pub(crate) fn check(self) -> Result<HandoverArgs> {
        let mut parsed = HandoverArgs {
            stores: Vec::new(),
            rounds: self.rounds,
            every_ms: self.every_ms,
            hold_ms: self.hold_ms,
            keep: self.keep,
        };
        for kind in self.store {
            if kind == StoreKind::Libsql {
                bail!(
                    "bench handover: --store libsql: libSQL has no server here (only a \
                     test double); use sqlite, redis or postgres"
                );
            }
            if !parsed.stores.contains(&kind) {
                parsed.stores.push(kind);
            }
        }
        if parsed.hold_ms < 1000 || parsed.hold_ms + 1000 > parsed.every_ms {
            bail!(
                "bench handover: --hold-ms {} with --every-ms {}: the handler must hold for at \
                 least 1000 ms (the signal goes 500 ms into it) and end 1000 ms before the next \
                 slot; e.g. --every-ms 5000 --hold-ms 3000",
                parsed.hold_ms,
                parsed.every_ms
            );
        }
        Ok(parsed)
    }
}

/// Parses `bench handover`'s arguments (without the words `bench handover`).
#[cfg(test)]
pub(crate) fn parse_args(args: &[String]) -> Result<HandoverArgs> {
    super::parse_with::<Opts>(args)?.check()
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// One stdout line of a node process.
#[derive(Debug, Clone)]
struct Line {
    /// The node (0..NODES).
    node: usize,
    /// Which start of that node printed it (0 first, 1 after the first restart ...).
    life: u32,
    text: String,
}

impl Line {
    fn tag(&self) -> &str {
        self.text.split_whitespace().next().unwrap_or("")
    }
    fn int(&self, key: &str) -> Option<i64> {
        node::field(&self.text, key)?.parse().ok()
    }
    fn is(&self, tag: &str) -> bool {
        self.tag() == tag
    }
}

/// A node process whose stdout lines go to the shared channel.
struct Proc {
    child: Child,
    life: u32,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The nodes of one store and every line they printed.
struct Cluster<'a> {
    bin: &'a Path,
    dir: &'a RunDir,
    spec: String,
    every_ms: u64,
    hold_ms: u64,
    procs: Vec<Option<Proc>>,
    tx: Sender<Line>,
    rx: Receiver<Line>,
    lines: Vec<Line>,
}

impl<'a> Cluster<'a> {
    fn new(bin: &'a Path, dir: &'a RunDir, spec: String, args: &HandoverArgs) -> Cluster<'a> {
        let (tx, rx) = channel();
        Cluster {
            bin,
            dir,
            spec,
            every_ms: args.every_ms,
            hold_ms: args.hold_ms,
            procs: (0..NODES).map(|_| None).collect(),
            tx,
            rx,
            lines: Vec::new(),
        }
    }

    fn name(i: usize) -> String {
        format!("n{}", i + 1)
    }

    /// Starts node `i` (again) and returns at once.
    fn spawn(&mut self, i: usize) -> Result<()> {
        let life = self.procs[i].as_ref().map_or(0, |p| p.life + 1);
        let name = Self::name(i);
        let stderr_path = self.dir.file(&format!("{name}-{life}.err"));
        let stderr = std::fs::File::create(&stderr_path)
            .with_context(|| format!("could not create {}", stderr_path.display()))?;
        let mut command = Command::new(self.bin);
        command
            .args(["handover", "--store", &self.spec, "--id", &name])
            .args(["--every-ms", &self.every_ms.to_string()])
            .args(["--hold-ms", &self.hold_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start node {name} ({})", self.bin.display()))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines() {
                let Ok(text) = text else { break };
                if tx
                    .send(Line {
                        node: i,
                        life,
                        text,
                    })
                    .is_err()
                {
                    break;
                }
            }
        });
        self.procs[i] = Some(Proc { child, life });
        Ok(())
    }

    fn pid(&self, i: usize) -> Option<u32> {
        self.procs[i].as_ref().map(|p| p.child.id())
    }

    fn life(&self, i: usize) -> u32 {
        self.procs[i].as_ref().map_or(0, |p| p.life)
    }

    /// Reads lines until one at index `from` or later matches, or `limit` passes.
    fn wait(&mut self, from: usize, limit: Duration, pred: impl Fn(&Line) -> bool) -> Option<Line> {
        let deadline = Instant::now() + limit;
        let mut checked = from;
        loop {
            if let Some(l) = self.lines[checked.min(self.lines.len())..]
                .iter()
                .find(|l| pred(l))
            {
                return Some(l.clone());
            }
            checked = self.lines.len();
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.lines.push(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Takes every line printed so far without waiting.
    fn drain(&mut self) {
        while let Ok(line) = self.rx.try_recv() {
            self.lines.push(line);
        }
    }

    fn wait_ready(&mut self, i: usize) -> Result<()> {
        let life = self.life(i);
        self.wait(0, Duration::from_secs(60), |l| {
            l.node == i && l.life == life && l.is("READY")
        })
        .with_context(|| {
            format!(
                "node {} printed no READY within 60 s (see {})",
                Self::name(i),
                self.dir.path.display()
            )
        })?;
        Ok(())
    }

    /// Stops every node with SIGTERM and waits for them to exit.
    fn stop_all(&mut self) {
        for i in 0..NODES {
            if let Some(pid) = self.pid(i) {
                let _ = term(pid);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for p in self.procs.iter_mut().flatten() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = p.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.drain();
    }
}

/// Sends SIGTERM to `pid` (at the end of the run).
fn term(pid: u32) -> Result<()> {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("could not run `kill`")?;
    if !status.success() {
        bail!("could not send SIGTERM to pid {pid} ({status})");
    }
    Ok(())
}

/// A shell waiting on its stdin to send SIGTERM to one pid: started ahead of time, so the
/// measured moment is one pipe write away from the `kill` (its builtin), not a fork and exec
/// of `kill` away (3.4 ms on the loaded bench machine).
struct ArmedKill {
    child: Child,
}

impl ArmedKill {
    fn arm(pid: u32) -> Result<ArmedKill> {
        let child = Command::new("sh")
            .args(["-c", &format!("read go && kill -TERM {pid}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("could not start `sh` to send the signal")?;
        Ok(ArmedKill { child })
    }

    /// Sends the signal; returns the host clock (µs) just before.
    fn fire(mut self) -> Result<i64> {
        use std::io::Write;
        let mut stdin = self.child.stdin.take().context("sh stdin")?;
        let sent = now_us();
        stdin
            .write_all(b"go\n")
            .context("writing to the armed `sh`")?;
        drop(stdin);
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the armed `sh` could not send SIGTERM ({status})");
        }
        Ok(sent)
    }
}

/// One handover, times in µs on the host clock.
#[derive(Debug, Clone, Default)]
struct Round {
    slot: i64,
    /// The owner of attempt 1 (the node stopped) and the backup that ran attempt 2.
    from: usize,
    to: Option<usize>,
    /// Just before `kill` was started.
    sent: i64,
    /// The stopped node's signal handler ran.
    signal: Option<i64>,
    /// Its handler saw the cancellation.
    cancelled: Option<i64>,
    /// Its scheduler reported the run interrupted, cause handed over: the release answered.
    released: Option<i64>,
    /// Attempt 2's handler line.
    attempt2: Option<i64>,
    /// What went wrong, if anything.
    problem: Option<String>,
}

impl Round {
    fn total_ms(&self) -> Option<f64> {
        Some((self.attempt2? - self.sent) as f64 / 1000.0)
    }
}

fn gap(a: Option<i64>, b: Option<i64>) -> Option<f64> {
    Some((b? - a?) as f64 / 1000.0)
}

/// What one store measured.
struct StoreRun {
    kind: StoreKind,
    rounds: Vec<Round>,
    floor_ms: Option<Summary>,
    load_end: String,
}

fn one_round(c: &mut Cluster<'_>, after_slot: i64) -> Result<Round> {
    // Attempt 1 of a slot later than the last one, started once every node was up (so
    // every other node is a backup watching it).
    let from = c.lines.len();
    let up = now_us();
    let period = Duration::from_millis(c.every_ms);
    let run1 = c
        .wait(from, 3 * period, |l| {
            l.is("RUN")
                && l.int("attempt") == Some(1)
                && l.int("slot") > Some(after_slot)
                && l.int("us") > Some(up)
        })
        .with_context(|| {
            format!(
                "no node started attempt 1 of a slot within {} ms",
                3 * c.every_ms
            )
        })?;
    let slot = run1.int("slot").unwrap_or(0);
    let owner = run1.node;
    let life = run1.life;
    let at = run1.int("us").unwrap_or(0) + 500_000;
    let pid = c.pid(owner).context("the owner has no process")?;
    let armed = ArmedKill::arm(pid)?;
    let wait = at - now_us();
    if wait > 0 {
        std::thread::sleep(Duration::from_micros(wait as u64));
    }
    c.drain();
    let sent = armed.fire()?;
    let mut round = Round {
        slot,
        from: owner,
        sent,
        ..Round::default()
    };
    let mark = c.lines.len();
    let limit = Duration::from_millis(c.hold_ms + 10_000);
    let run2 = c.wait(mark, limit, |l| {
        l.is("RUN") && l.int("slot") == Some(slot) && l.int("attempt") == Some(2)
    });
    // The stopped node's last lines (up to EXIT).
    let exited = c
        .wait(mark, Duration::from_secs(15), |l| {
            l.node == owner && l.life == life && l.is("EXIT")
        })
        .is_some();
    c.drain();
    let own = |tag: &str, extra: &dyn Fn(&Line) -> bool| {
        c.lines[mark..]
            .iter()
            .find(|l| l.node == owner && l.life == life && l.is(tag) && extra(l))
            .and_then(|l| l.int("us"))
    };
    round.signal = own("SIGNAL", &|_| true);
    round.cancelled = own("CANCELLED", &|l| l.int("slot") == Some(slot));
    round.released = own("EVENT", &|l| {
        l.text.contains("name=interrupted")
            && l.int("slot") == Some(slot)
            && l.text.contains("cause=handed-over")
    });
    match &run2 {
        Some(l) if l.node != owner => {
            round.to = Some(l.node);
            round.attempt2 = l.int("us");
        }
        Some(l) => {
            round.problem = Some(format!(
                "attempt 2 ran on the stopped node {}",
                Cluster::name(l.node)
            ))
        }
        None => {
            round.problem = Some(format!(
                "no attempt 2 within {} ms{}",
                limit.as_millis(),
                if round.released.is_none() {
                    " (the stopped node reported no handover)"
                } else {
                    ""
                }
            ))
        }
    }
    if !exited {
        round.problem.get_or_insert_with(|| {
            format!("node {} did not exit within 15 s", Cluster::name(owner))
        });
    }
    // Restart the stopped node; the next round waits for all three.
    if let Some(mut p) = c.procs[owner].take() {
        let _ = p.child.kill();
        let _ = p.child.wait();
        c.procs[owner] = Some(p);
    }
    c.spawn(owner)?;
    c.wait_ready(owner)?;
    Ok(round)
}

fn run_store(
    bin: &Path,
    kind: StoreKind,
    url: Option<&str>,
    args: &HandoverArgs,
) -> Result<StoreRun> {
    let dir = RunDir::create(&format!("handover-{}", kind.name()))?;
    let spec = dir.store_spec(kind, url);
    let _cleanup = Cleanup {
        bin,
        dir: &dir,
        spec: spec.clone(),
        keep: args.keep,
    };
    let store = ["--store".to_owned(), spec.clone()];
    let mut floor = None;
    if kind.has_raw_client() {
        let mut a = store.to_vec();
        a.extend([
            "--log".into(),
            dir.file("floor.log").to_string_lossy().into_owned(),
        ]);
        let mut probe = Node::spawn("floor", bin, "floor", &a, &dir.file("floor.err"))?;
        probe.wait_for("READY", Duration::from_secs(60))?;
        floor = Some(probe);
    }
    let mut c = Cluster::new(bin, &dir, spec.clone(), args);
    for i in 0..NODES {
        c.spawn(i)?;
    }
    for i in 0..NODES {
        c.wait_ready(i)?;
    }
    let mut rounds = Vec::new();
    let mut after_slot = 0;
    for r in 0..args.rounds {
        let round = one_round(&mut c, after_slot)
            .with_context(|| format!("{} round {}", kind.name(), r + 1))?;
        after_slot = round.slot;
        eprintln!(
            "  {} round {:>2}: {} -> {}: {}{}",
            kind.name(),
            r + 1,
            Cluster::name(round.from),
            round.to.map_or("-".to_owned(), Cluster::name),
            round
                .total_ms()
                .map_or("-".to_owned(), |t| format!("{t:.1} ms")),
            round
                .problem
                .as_deref()
                .map_or(String::new(), |p| format!(" ({p})"))
        );
        rounds.push(round);
    }
    let load_end = node::load();
    c.stop_all();
    for l in &c.lines {
        if l.text.contains("name=error") || l.is("STOP_ERROR") {
            eprintln!("  {} {}: {}", kind.name(), Cluster::name(l.node), l.text);
        }
    }
    let mut floor_ms = None;
    if let Some(mut probe) = floor {
        probe.terminate()?;
        probe.finish(Duration::from_secs(30))?;
        let text = std::fs::read_to_string(dir.file("floor.log")).unwrap_or_default();
        let samples: Vec<f64> = stats::parse_samples(&text)
            .iter()
            .map(|us| us / 1000.0)
            .collect();
        floor_ms = Summary::of(&samples);
    }
    Ok(StoreRun {
        kind,
        rounds,
        floor_ms,
        load_end,
    })
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let args = opts.check()?;
    let plan = node::store_plan(&args.stores)?;
    let bin = node::build_node()?;
    let load_before = node::load();
    let mut runs = Vec::new();
    for (kind, url) in plan {
        eprintln!(
            "bench handover: {} nodes, 1 job every {} ms (handler holds {} ms), {} rounds on {} ...",
            NODES,
            args.every_ms,
            args.hold_ms,
            args.rounds,
            kind.name()
        );
        runs.push(run_store(&bin, kind, url.as_deref(), &args)?);
    }
    print!("{}", report_text(&args, &runs, &load_before));
    Ok(ExitCode::SUCCESS)
}

fn ms(v: f64) -> String {
    if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn three(s: Option<Summary>) -> String {
    s.map_or("-".to_owned(), |s| {
        format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
    })
}

fn p50(samples: Vec<f64>) -> String {
    Summary::of(&samples).map_or("-".to_owned(), |s| ms(s.p50))
}

fn report_text(args: &HandoverArgs, runs: &[StoreRun], load_before: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nbench handover: {NODES} nodes, 1 job every {} ms (jitter 0, handler holds {} ms), \
         SIGTERM to the owner 500 ms into attempt 1, {} rounds per store, release build",
        args.every_ms, args.hold_ms, args.rounds
    );
    let _ = writeln!(
        out,
        "machine: {}; load before {load_before}",
        node::machine()
    );
    let _ = writeln!(
        out,
        "\n| store | rounds | handed over | signal -> attempt 2 elsewhere p50 / p99 / max (ms) | <= {TARGET_MS} ms | bare op (same run) p50 / p99 (ms) | load (1 min) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for r in runs {
        let totals: Vec<f64> = r.rounds.iter().filter_map(Round::total_ms).collect();
        let summary = Summary::of(&totals);
        let within = totals.iter().filter(|t| **t <= TARGET_MS).count();
        let verdict = match summary {
            Some(s) if s.max <= TARGET_MS && totals.len() == r.rounds.len() => "met".to_owned(),
            Some(_) => format!("not met ({within} of {} rounds)", r.rounds.len()),
            None => "no handover seen".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {verdict} | {} ({}) | {} |",
            r.kind.name(),
            r.rounds.len(),
            totals.len(),
            three(summary),
            r.floor_ms.map_or("-".to_owned(), |f| format!(
                "{} / {} (n={})",
                ms(f.p50),
                ms(f.p99),
                f.n
            )),
            r.kind.floor_name(),
            r.load_end.split_whitespace().next().unwrap_or("?"),
        );
    }
    let _ = writeln!(
        out,
        "\nsplit, p50 (ms): signal sent -> delivered (node's handler) -> handler cancelled -> \
         release answered (event `interrupted`, handed over) -> attempt 2's handler running on \
         the backup (release notified, run read, takeover won, handler started; the takeover's \
         own answer is not visible from outside the driver)\n"
    );
    let _ = writeln!(
        out,
        "| store | delivered | cancelled | release answered | attempt 2 running | worst round (total: pieces) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for r in runs {
        let piece = |f: &dyn Fn(&Round) -> Option<f64>| r.rounds.iter().filter_map(f).collect();
        let worst = r
            .rounds
            .iter()
            .filter(|x| x.total_ms().is_some())
            .max_by(|a, b| {
                a.total_ms()
                    .unwrap_or(0.0)
                    .total_cmp(&b.total_ms().unwrap_or(0.0))
            });
        let opt = |v: Option<f64>| v.map_or("-".to_owned(), ms);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            r.kind.name(),
            p50(piece(&|x| gap(Some(x.sent), x.signal))),
            p50(piece(&|x| gap(x.signal, x.cancelled))),
            p50(piece(&|x| gap(x.cancelled, x.released))),
            p50(piece(&|x| gap(x.released, x.attempt2))),
            worst.map_or("-".to_owned(), |w| format!(
                "{}: {} / {} / {} / {}",
                opt(w.total_ms()),
                opt(gap(Some(w.sent), w.signal)),
                opt(gap(w.signal, w.cancelled)),
                opt(gap(w.cancelled, w.released)),
                opt(gap(w.released, w.attempt2)),
            )),
        );
    }
    for r in runs {
        for (i, x) in r.rounds.iter().enumerate() {
            if let Some(p) = &x.problem {
                let _ = writeln!(out, "{} round {}: {p}", r.kind.name(), i + 1);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn handover_options_parse_with_defaults() {
        let a = parse_args(&[]).unwrap();
        assert_eq!(
            a,
            HandoverArgs {
                stores: vec![],
                rounds: 20,
                every_ms: 5000,
                hold_ms: 3000,
                keep: false
            }
        );
        let a = parse_args(&args(&["--store", "redis,sqlite", "--rounds", "5"])).unwrap();
        assert_eq!(a.stores, vec![StoreKind::Redis, StoreKind::Sqlite]);
        assert_eq!(a.rounds, 5);
    }

    #[test]
    fn bad_handover_options_are_named() {
        for (bad, named) in [
            (vec!["--store", "libsql"], "libsql"),
            (vec!["--rounds", "0"], "--rounds"),
            (vec!["--rounds", "4294967295"], "--rounds"),
            (vec!["--every-ms", "18446744073709551615"], "--every-ms"),
            (vec!["--hold-ms", "18446744073709551615"], "--hold-ms"),
            (vec!["--hold-ms", "4500"], "--hold-ms 4500"),
            (vec!["--every-ms"], "'--every-ms <MS>'"),
            (vec!["redis"], "redis"),
        ] {
            let err = parse_args(&args(&bad)).unwrap_err().to_string();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
    }

    #[test]
    fn lines_give_their_fields() {
        let l = Line {
            node: 1,
            life: 0,
            text: "RUN us=1700000000123456 slot=1700000000000 attempt=2 reason=Takeover".into(),
        };
        assert!(l.is("RUN"));
        assert_eq!(l.int("us"), Some(1_700_000_000_123_456));
        assert_eq!(l.int("attempt"), Some(2));
        let r = Round {
            sent: 1_000_000,
            signal: Some(1_000_500),
            attempt2: Some(1_012_000),
            ..Round::default()
        };
        assert_eq!(r.total_ms(), Some(12.0));
        assert_eq!(gap(Some(r.sent), r.signal), Some(0.5));
        assert_eq!(gap(r.cancelled, r.released), None);
    }
}
