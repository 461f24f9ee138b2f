//! One measured session: K bench nodes with N jobs each on one store for S seconds (and,
//! for the precision bench, the floor probe beside them), with CPU, RSS and the start logs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::hold::Hold;
use super::node::{self, Node, RunDir, StoreKind};
use super::slow::{Slow, SlowWindow};
use super::stats::{self, Counter, Sample, Start};

/// What one node did.
pub(crate) struct NodeResult {
    pub(crate) name: String,
    /// CPU over the measured stretch, in cores (1.0 = one core busy).
    pub(crate) cores: f64,
    /// VmRSS (KiB): store connected and scheduler built, no job yet.
    pub(crate) rss_base: u64,
    /// VmRSS (KiB) with the jobs registered, before `start`.
    pub(crate) rss_registered: u64,
    /// VmRSS (KiB) right after `start`.
    pub(crate) rss_ready: u64,
    /// VmRSS (KiB) every 10 s of the measured stretch and at its end.
    pub(crate) rss_series: Vec<u64>,
    /// The node's `COUNTS` line.
    pub(crate) counts: String,
    /// Its `STORE_ANSWERS` line: the store's answers to the claims it sent.
    pub(crate) answers: String,
    /// Its `FIRST_ERROR` and `STOP_ERROR` lines.
    pub(crate) errors: Vec<String>,
    /// Log lines that were not starts.
    pub(crate) bad_lines: usize,
    /// Registration of its jobs, in ms (`REGISTERED ms=`).
    pub(crate) register_ms: f64,
    /// Its `start()`, in ms (`READY start_ms=`).
    pub(crate) start_ms: f64,
    /// Its own readings once a second (`SAMPLE` lines).
    pub(crate) samples: Vec<Sample>,
    /// Jobs whose next slot was not on the judged grid (`GRID off_grid=`).
    pub(crate) off_grid: Option<u64>,
}

impl NodeResult {
    /// VmRSS at the end of the measured stretch.
    pub(crate) fn rss_end(&self) -> u64 {
        self.rss_series.last().copied().unwrap_or(0)
    }
}

/// What a session measured.
pub(crate) struct Session {
    pub(crate) nodes: Vec<NodeResult>,
    pub(crate) starts: Vec<Start>,
    /// All nodes ready (host clock, ms) ...
    pub(crate) from_ms: i64,
    /// ... to the stop signal.
    pub(crate) to_ms: i64,
    /// The store server's CPU over the stretch, in cores (none for SQLite).
    pub(crate) server_cores: Option<f64>,
    /// The share of all CPUs busy over the stretch (0..=1).
    pub(crate) machine_busy: Option<f64>,
    /// Load averages at the end of the stretch.
    pub(crate) load_end: String,
    /// The floor probe's samples (µs), when it ran.
    pub(crate) floor_us: Vec<f64>,
    /// The store server's call counters, from before the nodes started to their stop.
    pub(crate) counters: Vec<Counter>,
    /// When the nodes were spawned (host clock, ms): counters before it are the baseline.
    pub(crate) spawned_ms: i64,
    /// Clock ticks per second of the CPU figures.
    pub(crate) ticks_per_second: f64,
    /// The 1-minute load average every 10 s of the measured stretch (host clock ms, load).
    pub(crate) loads: Vec<(i64, f64)>,
    /// When the nodes' store was slowed, on the host clock.
    pub(crate) slow: Option<SlowWindow>,
    /// When the nodes' handlers began to hold their runs, on the host clock.
    pub(crate) hold_from_ms: Option<i64>,
}

/// What to run.
pub(crate) struct Plan<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) dir: &'a RunDir,
    pub(crate) kind: StoreKind,
    pub(crate) spec: &'a str,
    pub(crate) jobs: u32,
    pub(crate) instances: u32,
    pub(crate) seconds: u64,
    pub(crate) floor: bool,
    /// The node's `--workload`, `--history-size` and `--cron` arguments.
    pub(crate) node_args: Vec<String>,
    /// Seconds of the store's call counters read before the nodes start (0: no counters).
    pub(crate) baseline_seconds: u64,
    /// Slow the nodes' store, counted from their spawn.
    pub(crate) slow: Option<Slow>,
    /// Make the nodes' handlers hold their runs, counted from their spawn.
    pub(crate) hold: Option<Hold>,
}

/// Starts the nodes, waits until all are ready, measures for `seconds`, stops them with
/// SIGTERM and reads what they wrote.
pub(crate) fn run(plan: &Plan<'_>) -> Result<Session> {
    let store = ["--store".to_owned(), plan.spec.to_owned()];
    let mut floor = None;
    if plan.floor {
        let mut args = store.to_vec();
        args.extend(["--log".into(), path_arg(&plan.dir.file("floor.log"))]);
        let mut probe = Node::spawn(
            "floor",
            plan.bin,
            "floor",
            &args,
            &plan.dir.file("floor.err"),
        )?;
        probe.wait_for("READY", Duration::from_secs(60))?;
        floor = Some(probe);
    }
    // The store's call counters (Redis, PostgreSQL) every 5 s, from a baseline before the
    // nodes to their stop.
    let mut counters = None;
    if plan.baseline_seconds > 0 && plan.kind.has_counters() {
        let mut args = store.to_vec();
        args.extend(["--every-ms".into(), "5000".into()]);
        let probe = Node::spawn(
            "counters",
            plan.bin,
            "counters",
            &args,
            &plan.dir.file("counters.err"),
        )?;
        std::thread::sleep(Duration::from_secs(plan.baseline_seconds));
        counters = Some(probe);
    }
    let spawned_ms = node::now_ms();
    let slow = plan.slow.map(|s| s.window(spawned_ms));
    let mut nodes = Vec::new();
    for i in 1..=plan.instances {
        let name = format!("n{i}");
        let mut args = store.to_vec();
        args.extend([
            "--jobs".into(),
            plan.jobs.to_string(),
            "--id".into(),
            name.clone(),
            "--log".into(),
            path_arg(&plan.dir.file(&format!("{name}.log"))),
        ]);
        args.extend(plan.node_args.iter().cloned());
        if let Some(w) = &slow {
            args.extend(w.node_args());
        }
        if let Some(h) = plan.hold {
            args.extend(h.node_args(spawned_ms));
        }
        nodes.push(Node::spawn(
            &name,
            plan.bin,
            "run",
            &args,
            &plan.dir.file(&format!("{name}.err")),
        )?);
    }
    // Registering 10,000 jobs and preparing the store takes a while on a busy machine.
    for n in &mut nodes {
        n.wait_for("READY", Duration::from_secs(600))?;
    }
    let tps = node::ticks_per_second();
    let from_ms = node::now_ms();
    let started = Instant::now();
    let ticks0: Vec<Option<u64>> = nodes.iter().map(|n| node::cpu_ticks(n.pid())).collect();
    let server0 = node::ticks_of_named(plan.kind.server_processes());
    let machine0 = node::machine_ticks();
    let mut series: Vec<Vec<u64>> = vec![Vec::new(); nodes.len()];
    let mut loads = Vec::new();
    let total = Duration::from_secs(plan.seconds);
    loop {
        let left = total.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_secs(10)));
        for (n, s) in nodes.iter().zip(&mut series) {
            s.push(node::rss_kb(n.pid()).unwrap_or(0));
        }
        if let Some(one) = node::load().split_whitespace().next()
            && let Ok(one) = one.parse()
        {
            loads.push((node::now_ms(), one));
        }
    }
    let wall = started.elapsed();
    let ticks1: Vec<Option<u64>> = nodes.iter().map(|n| node::cpu_ticks(n.pid())).collect();
    let server1 = node::ticks_of_named(plan.kind.server_processes());
    let machine1 = node::machine_ticks();
    let to_ms = node::now_ms();
    let load_end = node::load();
    for n in &nodes {
        n.terminate()?;
    }
    if let Some(probe) = &floor {
        probe.terminate()?;
    }
    if let Some(probe) = &counters {
        probe.terminate()?;
    }
    let mut results = Vec::new();
    let mut starts = Vec::new();
    for (i, n) in nodes.iter_mut().enumerate() {
        n.finish(Duration::from_secs(120))?;
        let log = plan.dir.file(&format!("{}.log", n.name));
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("node {} wrote no log {}", n.name, log.display()))?;
        let (mut own, bad_lines) = stats::parse_log(&text);
        starts.append(&mut own);
        let rss = |tag: &str| {
            n.line(tag)
                .and_then(|l| node::num_field(l, "rss_kb"))
                .unwrap_or(0.0) as u64
        };
        let cores = match (ticks0[i], ticks1[i]) {
            (Some(a), Some(b)) => node::cores(b.saturating_sub(a), tps, wall),
            _ => f64::NAN,
        };
        results.push(NodeResult {
            name: n.name.clone(),
            cores,
            rss_base: rss("BASE"),
            rss_registered: rss("REGISTERED"),
            rss_ready: rss("READY"),
            rss_series: series[i].clone(),
            counts: n.line("COUNTS").unwrap_or("COUNTS (none)").to_owned(),
            answers: n
                .line("STORE_ANSWERS")
                .unwrap_or("STORE_ANSWERS (none)")
                .to_owned(),
            errors: n
                .seen
                .iter()
                .filter(|l| l.starts_with("FIRST_ERROR") || l.starts_with("STOP_ERROR"))
                .cloned()
                .collect(),
            bad_lines,
            register_ms: n
                .line("REGISTERED")
                .and_then(|l| node::num_field(l, "ms"))
                .unwrap_or(f64::NAN),
            start_ms: n
                .line("READY")
                .and_then(|l| node::num_field(l, "start_ms"))
                .unwrap_or(f64::NAN),
            samples: n
                .seen
                .iter()
                .filter_map(|l| stats::parse_sample(l))
                .collect(),
            off_grid: n
                .line("GRID")
                .and_then(|l| node::num_field(l, "off_grid"))
                .map(|v| v as u64),
        });
    }
    let mut floor_us = Vec::new();
    if let Some(mut probe) = floor {
        probe.finish(Duration::from_secs(30))?;
        let text = std::fs::read_to_string(plan.dir.file("floor.log")).unwrap_or_default();
        floor_us = stats::parse_samples(&text);
    }
    let mut counter_lines = Vec::new();
    if let Some(mut probe) = counters {
        probe.finish(Duration::from_secs(30))?;
        counter_lines = probe
            .seen
            .iter()
            .filter_map(|l| stats::parse_counter(l))
            .collect();
    }
    let server_cores = match (server0, server1) {
        (Some(a), Some(b)) => Some(node::cores(b.saturating_sub(a), tps, wall)),
        _ => None,
    };
    let machine_busy = node::busy_share(machine0, machine1);
    Ok(Session {
        nodes: results,
        starts,
        from_ms,
        to_ms,
        server_cores,
        machine_busy,
        load_end,
        floor_us,
        counters: counter_lines,
        spawned_ms,
        ticks_per_second: tps,
        loads,
        slow,
        hold_from_ms: plan.hold.map(|h| h.begins_at_ms(spawned_ms)),
    })
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Removes what a run left in its store and its folder, whatever happened (unless kept).
pub(crate) struct Cleanup<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) dir: &'a RunDir,
    pub(crate) spec: String,
    pub(crate) keep: bool,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Err(e) = node::run_node(
            self.bin,
            "clean",
            &["--store".to_owned(), self.spec.clone()],
            Duration::from_secs(120),
        ) {
            eprintln!("bench: could not clean the store after the run: {e:#}");
        }
        if self.keep {
            eprintln!("bench: logs kept in {}", self.dir.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir.path);
        }
    }
}
