//! The worker of `cargo xtask bench driver`: **not an example to learn from** (read
//! `examples/quick-start.rs` for that). It measures the scheduler alone, without a store's
//! round trips: one process, N distinct `every 1s` jobs on the in-memory store
//! (`anarchon::memory::MemoryStore`, the reference store of the conformance kit), handlers
//! that only count their start. It prints, about every 10 s (0.3 s past a whole second), the starts, the slots reported late,
//! the start lag (p50/p99 over the last 10 s, from a fixed-size histogram), the process's CPU
//! and its RSS per job (RSS minus the RSS before any job was registered, divided by N), so the
//! driver's own ceiling and memory can be read apart from any store's.
//!
//! ```text
//! bench-driver [--jobs N] [--seconds S] [--jitter-ms J] [--history-size H] [--hold-ms M]
//!              [--baseline-seconds B]
//! ```
//!
//! `--hold-ms M` makes each handler hold its run M ms (returning early when its signal is
//! cancelled): with M above the interval every job keeps one run in flight (its next slots
//! are skipped as overlapping), so the memory of N runs in flight reads as the anonymous RSS
//! with them held less the RSS with the jobs registered, per run (`RssAnon`: the heap and
//! stacks, not the binary's mapped file pages). That figure also holds what the jobs cost
//! once running whether or not a run is in flight (the in-memory store's history rows, the
//! core's per-job state, the allocator's warm free lists), so with `--hold-ms` the handlers
//! first run `--baseline-seconds B` (default 20; 10 to 3,600, rounded up to whole 10 s
//! readings; at or past `--seconds` they never hold) without holding: the last
//! column is the anonymous RSS above that baseline, per run in flight, which is what a run
//! being in flight costs (the in-memory store's lease row and the bench handler's own future,
//! about 0.5 KiB of its sleep and select, included).
//!
//! The in-memory store keeps its runs and history in the same process: `--history-size 1`
//! (the default here) keeps that part small, so the RSS is mostly the scheduler's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::{Scheduler, memory::MemoryStore};

/// Start lag histogram: 0.1 ms buckets up to 10 s (the last bucket takes the rest).
struct Lags {
    buckets: Vec<AtomicU64>,
}

const BUCKET_US: u64 = 100;
const BUCKETS: usize = 100_000;

impl Lags {
    fn new() -> Self {
        Lags {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    fn add(&self, lag_us: u64) {
        let i = ((lag_us / BUCKET_US) as usize).min(BUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }
    /// Takes the counts (and clears them): p50 and p99 in ms.
    fn take(&self) -> Option<(f64, f64)> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.swap(0, Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let at = |q: f64| {
            let want = (q * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= want {
                    return (i as u64 + 1) as f64 * BUCKET_US as f64 / 1000.0;
                }
            }
            f64::NAN
        };
        Some((at(0.5), at(0.99)))
    }
}

/// A field (in KiB) of `/proc/self/status`: `VmRSS:` (all resident pages) or `RssAnon:`
/// (the anonymous ones: heap and stacks).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn rss_kb() -> u64 {
    status_kb("VmRSS:")
}

fn anon_kb() -> u64 {
    status_kb("RssAnon:")
}

/// utime + stime of this process in clock ticks (100 a second on Linux).
fn cpu_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some(after.get(11)?.parse::<u64>().ok()? + after.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn arg(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a whole number")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs = arg(&args, "--jobs", 10_000)?.max(1);
    let seconds = arg(&args, "--seconds", 60)?.max(10);
    let jitter = Duration::from_millis(arg(&args, "--jitter-ms", 0)?);
    let history = u32::try_from(arg(&args, "--history-size", 1)?).unwrap_or(u32::MAX);
    let hold_ms = arg(&args, "--hold-ms", 0)?;
    // While the baseline is read, the handlers do not hold their runs.
    let baseline_seconds = if hold_ms == 0 {
        0
    } else {
        // Whole readings (10 s each), at least one, at most an hour.
        arg(&args, "--baseline-seconds", 20)?
            .clamp(10, 3_600)
            .div_ceil(10)
            * 10
    };
    let holding = Arc::new(AtomicU64::new(if baseline_seconds == 0 {
        hold_ms
    } else {
        0
    }));
    let scheduler = Scheduler::leased(MemoryStore::new())
        .jitter(jitter)
        .history_size(history)
        .build()?;
    let starts = Arc::new(AtomicU64::new(0));
    let lags = Arc::new(Lags::new());
    let base = rss_kb();
    for j in 0..jobs {
        let starts = starts.clone();
        let lags = lags.clone();
        let holding = holding.clone();
        scheduler
            .every(&format!("j{j:05}"), Duration::from_secs(1))
            .handler(move |ctx| {
                let slot_us = ctx.slot_ms().max(0) as u64 * 1000;
                lags.add(now_us().saturating_sub(slot_us));
                starts.fetch_add(1, Ordering::Relaxed);
                let signal = ctx.signal.clone();
                let hold = Duration::from_millis(holding.load(Ordering::Relaxed));
                async move {
                    if !hold.is_zero() {
                        tokio::select! {
                            _ = tokio::time::sleep(hold) => {}
                            _ = signal.cancelled() => {}
                        }
                    }
                    Ok(())
                }
            })?;
    }
    let registered = rss_kb();
    let registered_anon = anon_kb();
    scheduler.start().await?;
    let per_job = |kb: u64| kb.saturating_sub(base) as f64 / jobs as f64;
    println!(
        "bench driver: {jobs} `every 1s` jobs, jitter {} ms, history size {history}, handlers hold {hold_ms} ms (after a {baseline_seconds} s baseline without holding), in-memory store, {seconds} s",
        jitter.as_millis(),
    );
    println!(
        "RSS {:.1} MiB with no job; {:.2} KiB per job registered, {:.2} KiB per job started",
        base as f64 / 1024.0,
        per_job(registered),
        per_job(rss_kb())
    );
    println!(
        "|   t | starts / s | late (total) | lag p50 / p99 | CPU | RSS per job | runs in flight | anonymous RSS per run in flight | above the baseline |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut baseline_anon: Option<u64> = None;
    let mut last = (Instant::now(), cpu_ticks(), 0u64);
    for t in 1..=seconds / 10 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Read 0.3 s past a whole second, while the runs of that second's slots are in flight
        // (a 10 s cadence from an unaligned start could read between them every time).
        let past_second = now_us() % 1_000_000;
        tokio::time::sleep(Duration::from_micros((1_300_000 - past_second) % 1_000_000)).await;
        let (now, ticks, done) = (Instant::now(), cpu_ticks(), starts.load(Ordering::Relaxed));
        let wall = now.duration_since(last.0).as_secs_f64();
        let cpu = (ticks - last.1) as f64 / 100.0 / wall;
        let lag = lags.take().map_or("-".to_owned(), |(p50, p99)| {
            format!("{p50:.1} / {p99:.1} ms")
        });
        let health = scheduler.health();
        let held = health.leases_held;
        let anon = anon_kb();
        // Runs in flight, each: the anonymous RSS above the registered jobs', per run, and
        // above the same jobs running without holding.
        let per_run = |above: Option<u64>| match above {
            Some(above) if held >= jobs / 10 => {
                format!("{:.2} KiB", anon.saturating_sub(above) as f64 / held as f64)
            }
            _ => "-".to_owned(),
        };
        let (registered_column, baseline_column) =
            (per_run(Some(registered_anon)), per_run(baseline_anon));
        if t * 10 == baseline_seconds {
            baseline_anon = Some(anon);
            holding.store(hold_ms, Ordering::Relaxed);
        }
        println!(
            "| {:>3} | {:.0} | {} | {lag} | {:.0} % | {:.2} KiB | {held} | {registered_column} | {baseline_column} |",
            t * 10,
            (done - last.2) as f64 / wall,
            health.slots_late,
            cpu * 100.0,
            per_job(rss_kb())
        );
        last = (now, ticks, done);
    }
    scheduler.stop(Duration::from_secs(10)).await?;
    Ok(())
}
