//! The shared frame of the store benches: warm-up, a fixed number of timed operations,
//! min/p50/p99/max, and a table (or one JSON object) that puts every row beside a baseline
//! measured in the same run.
//!
//! A store's `benches/claim.rs` (`harness = false`) measures its operations and the in-memory
//! store as the baseline, then reports them:
//!
//! ```no_run
//! # async fn claim_one(_i: usize) {}
//! # async fn run() {
//! use anarchon_core::bench::{BenchConfig, json_requested, measure, report};
//!
//! let cfg = BenchConfig::from_env(BenchConfig { warmup: 100, ops: 2_000 });
//! let memory = measure("memory", &cfg, |i| claim_one(i)).await;
//! let redis = measure("redis lease", &cfg, |i| claim_one(i)).await;
//! report("claim", &[memory, redis], "memory", json_requested());
//! # }
//! ```
//!
//! Operations run one after another, never concurrently: the numbers are per-operation
//! latencies on one connection, and `ops_per_sec` is what one sequential caller gets.
//! `cargo xtask bench <store> [--json]` runs a store's bench with the test servers' URLs.

use std::future::Future;
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};

use crate::store::{
    ClaimOutcome, Finish, JobName, LeaseClaim, LeaseStore, Overlap, OwnerWrite, Reason, Retention,
    RunKey, RunStatus,
};

/// How many operations a measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// Untimed operations first, to fill caches, connection pools and prepared statements.
    pub warmup: usize,
    /// Timed operations.
    pub ops: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            warmup: 100,
            ops: 1_000,
        }
    }
}

impl BenchConfig {
    /// `defaults`, overridden by `ANARCHON_BENCH_WARMUP` and `ANARCHON_BENCH_OPS` where those
    /// are set to numbers (handy for a quick run: `ANARCHON_BENCH_OPS=100`).
    pub fn from_env(defaults: BenchConfig) -> Self {
        let read = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(default)
        };
        Self {
            warmup: read("ANARCHON_BENCH_WARMUP", defaults.warmup),
            ops: read("ANARCHON_BENCH_OPS", defaults.ops),
        }
    }
}

/// The timings of one measured operation.
///
/// In JSON the durations are microseconds as floating-point numbers, under names that say so
/// (`min_us`, `p50_us`, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    /// What was measured, e.g. `redis lease claim`.
    pub name: String,
    /// How many operations were timed.
    pub ops: usize,
    /// The fastest operation.
    #[serde(rename = "min_us", serialize_with = "micros")]
    pub min: Duration,
    /// The median operation (nearest rank).
    #[serde(rename = "p50_us", serialize_with = "micros")]
    pub p50: Duration,
    /// The 99th percentile (nearest rank).
    #[serde(rename = "p99_us", serialize_with = "micros")]
    pub p99: Duration,
    /// The slowest operation.
    #[serde(rename = "max_us", serialize_with = "micros")]
    pub max: Duration,
    /// The mean operation.
    #[serde(rename = "mean_us", serialize_with = "micros")]
    pub mean: Duration,
    /// Timed operations divided by their summed time: one sequential caller's throughput.
    pub ops_per_sec: f64,
}

fn micros<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(value.as_nanos() as f64 / 1e3)
}

impl Measurement {
    /// Builds the summary of a set of per-operation timings (in any order).
    pub fn from_samples(name: &str, samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let ops = sorted.len();
        let mean = u32::try_from(ops)
            .ok()
            .filter(|n| *n > 0)
            .map_or(Duration::ZERO, |n| total / n);
        let ops_per_sec = if total.is_zero() {
            0.0
        } else {
            ops as f64 / total.as_secs_f64()
        };
        Self {
            name: name.to_string(),
            ops,
            min: sorted.first().copied().unwrap_or_default(),
            p50: percentile(&sorted, 50.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied().unwrap_or_default(),
            mean,
            ops_per_sec,
        }
    }
}

/// The nearest-rank percentile of sorted samples: the smallest sample that at least `p`
/// percent of the samples do not exceed. Zero for no samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p.clamp(0.0, 100.0) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs `cfg.warmup` untimed calls, then `cfg.ops` timed calls, one after another.
///
/// `f` receives a running index, `0..warmup` for the warm-up and then
/// `warmup..warmup + ops`, so that each call can work on its own key or slot.
pub async fn measure<F, Fut>(name: &str, cfg: &BenchConfig, mut f: F) -> Measurement
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for i in 0..cfg.warmup {
        f(i).await;
    }
    let mut samples = Vec::with_capacity(cfg.ops);
    for i in cfg.warmup..cfg.warmup + cfg.ops {
        let started = Instant::now();
        f(i).await;
        samples.push(started.elapsed());
    }
    Measurement::from_samples(name, &samples)
}

/// Whether the bench binary was asked for JSON (`cargo bench ... -- --json`).
pub fn json_requested() -> bool {
    std::env::args().skip(1).any(|arg| arg == "--json")
}

/// The table, or the JSON object, that [`report`] prints.
///
/// Each row carries its p50 divided by the baseline row's p50 (`null` in JSON, `-` in the
/// table, when no row is named `baseline`).
pub fn render(title: &str, rows: &[Measurement], baseline: &str, json: bool) -> String {
    let base_p50 = rows
        .iter()
        .find(|row| row.name == baseline)
        .map(|row| row.p50.as_secs_f64());
    let ratio = |row: &Measurement| match base_p50 {
        Some(base) if base > 0.0 => Some(row.p50.as_secs_f64() / base),
        _ => None,
    };
    if json {
        #[derive(Serialize)]
        struct Row<'a> {
            #[serde(flatten)]
            measurement: &'a Measurement,
            p50_vs_baseline: Option<f64>,
        }
        #[derive(Serialize)]
        struct Report<'a> {
            title: &'a str,
            baseline: &'a str,
            rows: Vec<Row<'a>>,
        }
        let report = Report {
            title,
            baseline,
            rows: rows
                .iter()
                .map(|measurement| Row {
                    measurement,
                    p50_vs_baseline: ratio(measurement),
                })
                .collect(),
        };
        return serde_json::to_string(&report)
            .unwrap_or_else(|error| format!(r#"{{"title":{title:?},"error":"{error}"}}"#));
    }
    let width = rows
        .iter()
        .map(|row| row.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!("{title} (baseline: {baseline})\n");
    out.push_str(&format!(
        "{:<width$} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10}\n",
        "name", "ops", "min", "p50", "p99", "max", "mean", "ops/s", "p50/base"
    ));
    for row in rows {
        let versus = ratio(row).map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
        out.push_str(&format!(
            "{:<width$} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11.0} {:>10}\n",
            row.name,
            row.ops,
            human(row.min),
            human(row.p50),
            human(row.p99),
            human(row.max),
            human(row.mean),
            row.ops_per_sec,
            versus
        ));
    }
    out
}

/// Prints the measurements as a table, or as one JSON object on one line when `json` is
/// set, with each row's p50 as a ratio to the row named `baseline`.
pub fn report(title: &str, rows: &[Measurement], baseline: &str, json: bool) {
    let text = render(title, rows, baseline, json);
    if json {
        println!("{text}");
    } else {
        print!("{text}");
    }
}

/// A duration in the unit that keeps it short: `850ns`, `12.3µs`, `4.56ms`, `1.234s`.
fn human(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 1_000_000 {
        format!("{:.1}µs", nanos as f64 / 1e3)
    } else if nanos < 1_000_000_000 {
        format!("{:.2}ms", nanos as f64 / 1e6)
    } else {
        format!("{:.3}s", duration.as_secs_f64())
    }
}

// ----- batch versus single calls, on any lease store -------------------------------------

/// Claims or results in one batch of [`batch_rows`].
pub const BATCH: usize = 256;

/// "256 single claims: per claim", "batch of 256 claims: per claim", "256 single finishes:
/// per finish" and "batch of 256 finishes: per finish", measured in the same run on the same
/// store: `ANARCHON_BENCH_BATCH_ROUNDS` rounds (default 10, after one untimed round) of 256
/// won claims of new jobs each way, alternating which way goes first, then the results of
/// those runs each way (the singly claimed runs finished singly, the batch in a batch). A
/// sample is one round's time divided by 256.
pub async fn batch_rows(store: &dyn LeaseStore, prefix: &str, slot: i64) -> [Measurement; 4] {
    let rounds: usize = std::env::var("ANARCHON_BENCH_BATCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let claims = |kind: &str, round: usize| -> Vec<LeaseClaim> {
        (0..BATCH)
            .map(|i| {
                let job = JobName::new(format!("{prefix}-{kind}-{round}-{i}")).expect("job name");
                LeaseClaim {
                    run: RunKey::new(job, slot),
                    scheduled_at: slot,
                    instance_id: "a".into(),
                    lease_ms: 30_000,
                    not_after: i64::MAX,
                    overlap: Overlap::Allow,
                    reason: Reason::Scheduled,
                    retention: Retention::default(),
                }
            })
            .collect()
    };
    let won = |o: ClaimOutcome| match o {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected to win, got {other:?}"),
    };
    let result = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    let (mut single, mut batched) = (Vec::new(), Vec::new());
    let (mut single_finish, mut batched_finish) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let (one, many) = (claims("one", round), claims("many", round));
        let (mut one_leases, mut many_writes) = (Vec::new(), Vec::new());
        for batch_first in [round % 2 == 1, round % 2 == 0] {
            let started = Instant::now();
            if batch_first {
                let out = store.claim_many(&many).await.expect("claim batch");
                if round > 0 {
                    batched.push(started.elapsed() / BATCH as u32);
                }
                many_writes = out.into_iter().map(|o| (won(o), result.clone())).collect();
            } else {
                for c in &one {
                    one_leases.push(won(store.claim(c).await.expect("claim")));
                }
                if round > 0 {
                    single.push(started.elapsed() / BATCH as u32);
                }
            }
        }
        for batch_first in [round % 2 == 1, round % 2 == 0] {
            let started = Instant::now();
            if batch_first {
                let out = store.finish_many(&many_writes).await.expect("finish batch");
                assert!(out.iter().all(|o| *o == OwnerWrite::Done));
                if round > 0 {
                    batched_finish.push(started.elapsed() / BATCH as u32);
                }
            } else {
                for lease in &one_leases {
                    let out = store.finish(lease, &result).await.expect("finish");
                    assert_eq!(out, OwnerWrite::Done);
                }
                if round > 0 {
                    single_finish.push(started.elapsed() / BATCH as u32);
                }
            }
        }
    }
    [
        Measurement::from_samples("256 single claims: per claim", &single),
        Measurement::from_samples("batch of 256 claims: per claim", &batched),
        Measurement::from_samples("256 single finishes: per finish", &single_finish),
        Measurement::from_samples("batch of 256 finishes: per finish", &batched_finish),
    ]
}

/// Prints the batch rows as "batch: x µs per claim, single: y µs per claim (p50; ratio)", for
/// claims and for results.
pub fn print_batch_ratios(rows: &[Measurement]) {
    let p50 = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map_or(f64::NAN, |r| r.p50.as_secs_f64() * 1e6)
    };
    for (what, plural, single, batched) in [
        (
            "claim",
            "claims",
            "256 single claims: per claim",
            "batch of 256 claims: per claim",
        ),
        (
            "finish",
            "finishes",
            "256 single finishes: per finish",
            "batch of 256 finishes: per finish",
        ),
    ] {
        let (single, batched) = (p50(single), p50(batched));
        println!(
            "batch of 256 {plural}: {batched:.1} µs per {what}, 256 single {plural}: \
             {single:.1} µs per {what} (p50; {:.1}x)",
            single / batched.max(1e-3)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let hundred: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&hundred, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&hundred, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&hundred, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&hundred, 0.0), Duration::from_millis(1));

        let four = ms(&[1, 2, 3, 4]);
        assert_eq!(percentile(&four, 50.0), Duration::from_millis(2));
        assert_eq!(percentile(&four, 99.0), Duration::from_millis(4));

        let one = ms(&[7]);
        assert_eq!(percentile(&one, 50.0), Duration::from_millis(7));
        assert_eq!(percentile(&one, 99.0), Duration::from_millis(7));

        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn summary_of_unsorted_samples() {
        let m = Measurement::from_samples("x", &ms(&[4, 1, 3, 2]));
        assert_eq!(m.ops, 4);
        assert_eq!(m.min, Duration::from_millis(1));
        assert_eq!(m.p50, Duration::from_millis(2));
        assert_eq!(m.p99, Duration::from_millis(4));
        assert_eq!(m.max, Duration::from_millis(4));
        assert_eq!(m.mean, Duration::from_micros(2_500));
        assert!((m.ops_per_sec - 400.0).abs() < 1e-9, "{}", m.ops_per_sec);
    }

    #[test]
    fn no_samples_give_zeros_not_a_panic() {
        let m = Measurement::from_samples("empty", &[]);
        assert_eq!(
            (m.ops, m.p50, m.mean, m.ops_per_sec),
            (0, Duration::ZERO, Duration::ZERO, 0.0)
        );
    }

    #[test]
    fn measure_runs_warmup_then_timed_ops_with_running_indexes() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut seen = Vec::new();
        let cfg = BenchConfig { warmup: 3, ops: 5 };
        let m = runtime.block_on(measure("count", &cfg, |i| {
            seen.push(i);
            async {}
        }));
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
        assert_eq!(m.ops, 5);
        assert!(m.min <= m.p50 && m.p50 <= m.p99 && m.p99 <= m.max);
    }

    #[test]
    fn report_compares_p50_with_the_baseline() {
        let base = Measurement::from_samples("memory", &ms(&[1, 1, 1]));
        let other = Measurement::from_samples("redis", &ms(&[3, 3, 3]));
        let table = render("claim", &[base.clone(), other.clone()], "memory", false);
        assert!(
            table.contains("1.00x") && table.contains("3.00x"),
            "{table}"
        );

        let json = render("claim", &[base, other], "memory", true);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["title"], "claim");
        assert_eq!(value["rows"][1]["name"], "redis");
        assert_eq!(value["rows"][1]["p50_us"], 3000.0);
        assert_eq!(value["rows"][1]["p50_vs_baseline"], 3.0);
        assert!(!json.contains('\n'));

        let unknown = render(
            "claim",
            &[Measurement::from_samples("a", &ms(&[1]))],
            "zzz",
            true,
        );
        let value: serde_json::Value = serde_json::from_str(&unknown).unwrap();
        assert!(value["rows"][0]["p50_vs_baseline"].is_null());
    }
}
