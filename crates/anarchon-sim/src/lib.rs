//! The deterministic simulator's runner: many seeds of
//! [`anarchon_core::sim::run`], their figures summed, violations caught and counted.
//!
//! `anarchon-sim --seed S` replays one seed exactly; `--seeds N` runs seeds `first..first+N`.
//! See docs/testing.md, "Deterministic simulation".

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

pub use anarchon_core::sim::{Faults, Report, SimConfig, run};

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
