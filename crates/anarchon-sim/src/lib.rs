//! The deterministic simulator's runner: many seeds of
//! [`anarchon_core::sim::run`], their figures summed, violations caught and counted.
//!
//! `anarchon-sim --seed S` replays one seed exactly; `--seeds N` runs seeds `first..first+N`;
//! [`shrink`] reduces a failing configuration to a smaller one that fails the same way.
//! See docs/testing.md, "Deterministic simulation".

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

pub use anarchon_core::sim::{Faults, Planted, Report, SimConfig, jobs_drawn, run};

/// What a set of seeds did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Faults injected, by kind, over every seed.
    pub faults: BTreeMap<&'static str, u64>,
    /// Handlers started.
    pub runs: u64,
    /// Attempts started by a backup.
    pub takeovers: u64,
    /// Runs handed over by a stopping owner.
    pub handovers: u64,
    /// Expired leases the liveness check watched.
    pub liveness_checks: u64,
    /// Store calls.
    pub calls: u64,
    /// Simulated instance-hours.
    pub instance_hours: f64,
    /// Simulated cluster-hours.
    pub cluster_hours: f64,
    /// Seeds that broke an invariant, with the violation's first line.
    pub violations: Vec<(u64, String)>,
    /// Wall time.
    pub elapsed: Duration,
    /// CPU time of this process while the seeds ran (Linux; `None` elsewhere).
    pub cpu: Option<Duration>,
}

impl Summary {
    /// Adds one seed's report.
    pub fn add(&mut self, r: &Report) {
        self.seeds += 1;
        for (k, v) in &r.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.runs += r.runs;
        self.takeovers += r.takeovers;
        self.handovers += r.handovers;
        self.liveness_checks += r.liveness_checks;
        self.calls += r.calls;
        self.instance_hours += r.instance_hours();
        self.cluster_hours += r.simulated_secs / 3_600.0;
    }

    /// Adds another summary's figures (not its times).
    pub fn merge(&mut self, other: Summary) {
        self.seeds += other.seeds;
        for (k, v) in other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.runs += other.runs;
        self.takeovers += other.takeovers;
        self.handovers += other.handovers;
        self.liveness_checks += other.liveness_checks;
        self.calls += other.calls;
        self.instance_hours += other.instance_hours;
        self.cluster_hours += other.cluster_hours;
        self.violations.extend(other.violations);
    }

    /// Simulated instance-hours per wall-clock second.
    pub fn speed(&self) -> f64 {
        self.instance_hours / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Simulated instance-hours per CPU second (what one core does, on a shared machine).
    pub fn cpu_speed(&self) -> Option<f64> {
        self.cpu
            .map(|c| self.instance_hours / c.as_secs_f64().max(1e-9))
    }

    /// The figures, one per line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("seeds            {}\n", self.seeds));
        out.push_str(&format!("cluster-hours    {:.1}\n", self.cluster_hours));
        out.push_str(&format!("instance-hours   {:.1}\n", self.instance_hours));
        out.push_str(&format!("runs             {}\n", self.runs));
        out.push_str(&format!("takeovers        {}\n", self.takeovers));
        out.push_str(&format!("handovers        {}\n", self.handovers));
        out.push_str(&format!("expired leases   {}\n", self.liveness_checks));
        out.push_str(&format!("store calls      {}\n", self.calls));
        out.push_str("faults:\n");
        for (k, v) in &self.faults {
            out.push_str(&format!("  {k:<24} {v}\n"));
        }
        out.push_str(&format!("violations       {}\n", self.violations.len()));
        for (seed, what) in &self.violations {
            out.push_str(&format!("  seed {seed}: {what}\n"));
        }
        out.push_str(&format!(
            "wall             {:.2} s\nspeed            {:.1} simulated instance-hours per wall second ({:.0}x real time per instance)\n",
            self.elapsed.as_secs_f64(),
            self.speed(),
            self.speed() * 3_600.0,
        ));
        if let (Some(cpu), Some(speed)) = (self.cpu, self.cpu_speed()) {
            out.push_str(&format!(
                "cpu              {:.2} s\ncpu speed        {speed:.1} simulated instance-hours per CPU second\n",
                cpu.as_secs_f64()
            ));
        }
        out
    }
}

/// Runs one seed; a violation (a panic) comes back as its message. A run without detail
/// that breaks an invariant is replayed with detail (the same run, every input and effect in
/// its timeline) for the message.
pub fn run_one(cfg: &SimConfig) -> Result<Report, String> {
    let attempt = |cfg: &SimConfig| {
        catch_unwind(AssertUnwindSafe(|| run(cfg))).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned())
        })
    };
    match attempt(cfg) {
        Err(lean) if !cfg.detail => {
            let detailed = SimConfig {
                detail: true,
                ..cfg.clone()
            };
            match attempt(&detailed) {
                Err(message) => Err(message),
                Ok(_) => Err(format!(
                    "{lean}\n(NOT reproduced with detail: the detail changed the run, a bug of \
                     the simulator)"
                )),
            }
        }
        other => other,
    }
}

/// Runs seeds `first..first + count` with `template`'s other settings; `each` sees every
/// seed's outcome as it ends.
pub fn run_many(
    template: &SimConfig,
    first: u64,
    count: u64,
    mut each: impl FnMut(u64, &Result<Report, String>),
) -> Summary {
    let start = Instant::now();
    let cpu_start = cpu_time();
    let mut summary = Summary::default();
    for seed in first..first.saturating_add(count) {
        let cfg = SimConfig {
            seed,
            ..template.clone()
        };
        let outcome = run_one(&cfg);
        match &outcome {
            Ok(r) => summary.add(r),
            Err(message) => {
                let first_line = message.lines().next().unwrap_or_default().to_owned();
                summary.violations.push((seed, first_line));
            }
        }
        each(seed, &outcome);
    }
    summary.elapsed = start.elapsed();
    summary.cpu = cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    summary
}

/// Runs seeds `first..first + count` as [`run_many`] does, on `threads` threads (each seed is
/// a pure function of its configuration, so the figures are the same on any number); `each`
/// sees every seed's outcome as it ends, from the thread that ran it.
///
/// ```no_run
/// use anarchon_sim::{SimConfig, run_parallel};
///
/// // Seeds 1..=20, an hour each on 3 instances, on 2 threads.
/// let summary = run_parallel(&SimConfig::new(1, 3, 1.0), 1, 20, 2, |_, _| {});
/// assert!(summary.violations.is_empty(), "{}", summary.render());
/// ```
pub fn run_parallel(
    template: &SimConfig,
    first: u64,
    count: u64,
    threads: usize,
    each: impl Fn(u64, &Result<Report, String>) + Sync,
) -> Summary {
    let start = Instant::now();
    let cpu_start = cpu_time();
    let threads = threads.clamp(1, count.max(1) as usize);
    let next = std::sync::atomic::AtomicU64::new(first);
    let end = first.saturating_add(count);
    let parts: Vec<Summary> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut part = Summary::default();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed >= end {
                            return part;
                        }
                        let one = run_many(template, seed, 1, &each);
                        part.merge(one);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a simulator thread"))
            .collect()
    });
    let mut summary = Summary::default();
    for part in parts {
        summary.merge(part);
    }
    summary.violations.sort();
    summary.elapsed = start.elapsed();
    summary.cpu = cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    summary
}

/// This process's CPU time (user + system) from /proc/self/stat, in clock ticks of 10 ms
/// (the Linux default); `None` where that file is not.
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (in parentheses, which may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// What broke in a failing run: the invariant's name and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The invariant (`two handlers of one slot at once`, ...), or the panic's first line
    /// when the run panicked otherwise.
    pub invariant: String,
    /// Simulated seconds from the start when it was seen (`None`: not a violation message).
    pub at_secs: Option<f64>,
    /// The whole message.
    pub message: String,
}

impl Failure {
    /// Reads a violation message (`VIOLATION seed S at T s: INVARIANT: detail ...`); any other
    /// panic message is a failure of its own first line.
    pub fn parse(message: &str) -> Failure {
        let first = message.lines().next().unwrap_or_default();
        let parsed = first.strip_prefix("VIOLATION seed ").and_then(|rest| {
            let (_, rest) = rest.split_once(" at ")?;
            let (at, rest) = rest.split_once("s: ")?;
            let (invariant, _) = rest.split_once(": ")?;
            Some((invariant.to_owned(), at.parse::<f64>().ok()?))
        });
        match parsed {
            Some((invariant, at)) => Failure {
                invariant,
                at_secs: Some(at),
                message: message.to_owned(),
            },
            None => Failure {
                invariant: first.to_owned(),
                at_secs: None,
                message: message.to_owned(),
            },
        }
    }
}

/// Runs `cfg` without detail (faster; no replay): the failure, if it breaks anything.
fn failure_of(cfg: &SimConfig) -> Option<Failure> {
    failure_of_detailed(&SimConfig {
        detail: false,
        ..cfg.clone()
    })
}

/// Runs `cfg` as it is: the failure, if it breaks anything.
fn failure_of_detailed(cfg: &SimConfig) -> Option<Failure> {
    catch_unwind(AssertUnwindSafe(|| run(cfg)))
        .err()
        .map(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned())
        })
        .map(|m| Failure::parse(&m))
}

/// A failing configuration shrunk.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The configuration given.
    pub original: SimConfig,
    /// The smallest configuration found that breaks the same invariant.
    pub config: SimConfig,
    /// How it fails (with detail: the slot's whole timeline).
    pub failure: Failure,
    /// Runs tried while shrinking.
    pub tries: u32,
}

impl Shrunk {
    /// The command line that replays the shrunk configuration.
    pub fn command(&self) -> String {
        command_of(&self.config)
    }

    /// A test that replays it, to paste beside the core's tests (it panics while the bug is
    /// there).
    pub fn as_test(&self) -> String {
        let c = &self.config;
        let mut body = format!(
            "    let mut cfg = SimConfig::new({}, {}, {});\n",
            c.seed,
            c.nodes,
            hours_text(c.hours)
        );
        if c.faults != Faults::default() {
            let on: Vec<String> = c.faults.on().iter().map(|n| format!("{n:?}")).collect();
            body.push_str(&format!(
                "    cfg.faults = Faults::only([{}]).unwrap();\n",
                on.join(", ")
            ));
        }
        if let Some(jobs) = &c.jobs {
            body.push_str(&format!("    cfg.jobs = Some(vec!{jobs:?});\n"));
        }
        if let Some(p) = c.planted {
            body.push_str(&format!("    cfg.planted = Some(Planted::{p:?});\n"));
        }
        format!(
            "// use anarchon_sim::{{Faults, Planted, SimConfig, run}};\n\
             /// {}\n#[test]\nfn seed_{}_shrunk() {{\n{body}    run(&cfg);\n}}\n",
            self.failure.invariant, c.seed
        )
    }
}

/// `hours` as the shortest text that reads back as the same number.
fn hours_text(hours: f64) -> String {
    let text = format!("{hours}");
    if text.contains('.') || text.contains('e') {
        text
    } else {
        format!("{text}.0")
    }
}

/// `cargo xtask simulate ...` for `cfg` (its faults by name when not all are on).
pub fn command_of(cfg: &SimConfig) -> String {
    let mut out = format!(
        "cargo xtask simulate --seed {} --nodes {} --hours {}",
        cfg.seed, cfg.nodes, cfg.hours
    );
    if cfg.faults != Faults::default() {
        let on = cfg.faults.on();
        out.push_str(" --faults ");
        out.push_str(&if on.is_empty() {
            "none".to_owned()
        } else {
            on.join(",")
        });
    }
    if let Some(jobs) = &cfg.jobs {
        let list: Vec<String> = jobs.iter().map(ToString::to_string).collect();
        out.push_str(" --jobs ");
        out.push_str(&if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(",")
        });
    }
    if cfg.planted == Some(Planted::NoSelfFencing) {
        out.push_str(" --plant-bug no-self-fencing");
    }
    out
}

/// One step of [`shrink`], applied to the smallest failing configuration so far.
#[derive(Debug, Clone, Copy)]
enum Step {
    Nodes(usize),
    NoFault(&'static str),
    NoJob(usize),
    HalfHours,
}

impl Step {
    /// `best` with this step, or `None` when it changes nothing.
    fn apply(self, best: &SimConfig) -> Option<SimConfig> {
        let mut c = best.clone();
        match self {
            Step::Nodes(n) if n < best.nodes => c.nodes = n,
            Step::NoFault(name) => match c.faults.rate_mut(name) {
                Some(rate) if *rate > 0.0 => *rate = 0.0,
                _ => return None,
            },
            Step::NoJob(j) => {
                let jobs = c
                    .jobs
                    .get_or_insert_with(|| (0..jobs_drawn(best.seed)).collect());
                if jobs.len() <= 1 || !jobs.contains(&j) {
                    return None;
                }
                jobs.retain(|k| *k != j);
            }
            Step::HalfHours if best.hours > 1.0 / 60.0 => c.hours = best.hours / 2.0,
            _ => return None,
        }
        Some(c)
    }
}

/// Shrinks a failing `cfg`: fewer instances, fewer faults, fewer jobs and a shorter horizon,
/// one step at a time, keeping each step under which the run still breaks the same
/// invariant, until no single step does (or `max_tries` runs were made). A run is a pure
/// function of its configuration, so each step is a plain re-run. `None` when `cfg` does not
/// fail.
///
/// The horizon is cut to the second after the violation whenever it shrinks: a run's first
/// hours do not depend on how many follow, so the same violation comes at the same time in
/// the shorter run.
///
/// ```no_run
/// use anarchon_sim::{SimConfig, shrink};
///
/// // Seed 42 on 5 instances for an hour, every fault on: if it fails, how small can it get?
/// if let Some(s) = shrink(&SimConfig::new(42, 5, 1.0), 300) {
///     println!("{}\n{}\n{}", s.failure.message, s.command(), s.as_test());
/// }
/// ```
pub fn shrink(cfg: &SimConfig, max_tries: u32) -> Option<Shrunk> {
    let mut failure = failure_of(cfg)?;
    let mut best = cfg.clone();
    let mut tries = 1;
    // Cuts the horizon to the second after the violation (when it came before the quiet end).
    let cut = |best: &mut SimConfig, failure: &Failure| {
        if let Some(at) = failure.at_secs {
            let hours = (at.ceil() + 1.0) / 3_600.0;
            if hours < best.hours {
                best.hours = hours;
            }
        }
    };
    cut(&mut best, &failure);
    loop {
        let mut steps: Vec<Step> = (1..best.nodes).map(Step::Nodes).collect();
        steps.extend(best.faults.on().into_iter().map(Step::NoFault));
        steps.extend((0..jobs_drawn(best.seed)).map(Step::NoJob));
        steps.push(Step::HalfHours);
        let mut changed = false;
        for step in steps {
            if tries >= max_tries {
                break;
            }
            let Some(c) = step.apply(&best) else {
                continue;
            };
            tries += 1;
            if let Some(f) = failure_of(&c).filter(|f| f.invariant == failure.invariant) {
                failure = f;
                best = c;
                cut(&mut best, &failure);
                changed = true;
            }
        }
        if !changed || tries >= max_tries {
            break;
        }
    }
    // The message with detail: every input and effect in the slot's timeline.
    tries += 1;
    let detailed = SimConfig {
        detail: true,
        ..best.clone()
    };
    if let Some(f) = failure_of_detailed(&detailed).filter(|f| f.invariant == failure.invariant) {
        failure = f;
    }
    Some(Shrunk {
        original: cfg.clone(),
        config: best,
        failure,
        tries,
    })
}
