//! `cargo xtask bench scale`: K scheduler processes with N distinct `every 1s` jobs each on
//! one store for S seconds; prints the share of slots started within their second, missed
//! slots, duplicates, start lag, CPU and RSS per instance, and the store's own ceiling for
//! the same work measured in the same run.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::node::{self, RunDir, StoreKind};
use super::session::{self, Cleanup, Plan, Session};
use super::stats::{SlotStats, Window, slot_stats};

const USAGE: &str = "bench scale --store redis|postgres|sqlite|libsql [--jobs N] [--instances K] \
                     [--seconds S] [--ceiling-seconds C] [--json] [--keep]";

/// The options of `bench scale`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScaleArgs {
    pub(crate) store: StoreKind,
    pub(crate) jobs: u32,
    pub(crate) instances: u32,
    pub(crate) seconds: u64,
    pub(crate) ceiling_seconds: u64,
    pub(crate) json: bool,
    pub(crate) keep: bool,
}

/// `cargo xtask bench scale`: K scheduler processes with N `every 1s` jobs each on a fresh
/// namespace of one store for S seconds, beside the store's own ceiling.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// The store: redis, postgres, sqlite or libsql.
    #[arg(long, value_parser = StoreKind::parse)]
    store: Option<StoreKind>,
    /// `every 1s` jobs per instance (at most 100000).
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: u32,
    /// Scheduler processes (at most 16).
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    instances: u32,
    /// How long the jobs run (5 or more: 3 s of margin are not judged).
    #[arg(long, value_name = "S", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// How long the store's ceiling is measured.
    #[arg(long, value_name = "C", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    ceiling_seconds: u64,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Keep the run's folder (the nodes' logs).
    #[arg(long)]
    keep: bool,
}

impl Opts {
    /// Checks what clap cannot say alone.
    pub(crate) fn check(self) -> Result<ScaleArgs> {
        let store = self
            .store
            .with_context(|| format!("bench scale: which store? ({USAGE})"))?;
        if self.seconds < 5 {
            bail!(
                "bench scale: --seconds {} is too short: 3 s of margin are not judged; use 5 or more",
                self.seconds
            );
        }
        Ok(ScaleArgs {
            store,
            jobs: self.jobs,
            instances: self.instances,
            seconds: self.seconds,
            ceiling_seconds: self.ceiling_seconds,
            json: self.json,
            keep: self.keep,
        })
    }
}

/// Parses `bench scale`'s arguments (without the words `bench scale`).
#[cfg(test)]
pub(crate) fn parse_args(args: &[String]) -> Result<ScaleArgs> {
    super::parse_with::<Opts>(args)?.check()
}

/// The store's ceiling: batches of 256 writes per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ceiling {
    pub(crate) batches_per_s: f64,
    pub(crate) rows_per_s: f64,
    pub(crate) callers: u32,
    pub(crate) seconds: f64,
}

pub(crate) fn parse_ceiling(out: &str) -> Option<Ceiling> {
    let line = out.lines().find(|l| l.starts_with("CEILING "))?;
    let batches = node::num_field(line, "batches")?;
    let rows = node::num_field(line, "rows_per_batch")?;
    let seconds = node::num_field(line, "seconds")?;
    let callers = node::num_field(line, "callers")? as u32;
    (seconds > 0.0).then(|| Ceiling {
        batches_per_s: batches / seconds,
        rows_per_s: batches * rows / seconds,
        callers,
        seconds,
    })
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let args = opts.check()?;
    let url = node::server_url(args.store)?;
    let bin = node::build_node()?;
    let dir = RunDir::create(&format!("scale-{}", args.store.name()))?;
    let spec = dir.store_spec(args.store, url.as_deref());
    let _cleanup = Cleanup {
        bin: &bin,
        dir: &dir,
        spec: spec.clone(),
        keep: args.keep,
    };
    let load_before = node::load();
    let ceiling = if args.store.has_raw_client() {
        eprintln!(
            "bench scale: measuring the store's ceiling ({} callers, {} s) ...",
            args.instances, args.ceiling_seconds
        );
        let out = node::run_node(
            &bin,
            "ceiling",
            &[
                "--store".into(),
                spec.clone(),
                "--callers".into(),
                args.instances.to_string(),
                "--seconds".into(),
                args.ceiling_seconds.to_string(),
            ],
            Duration::from_secs(args.ceiling_seconds + 120),
        )?;
        Some(parse_ceiling(&out).with_context(|| format!("no CEILING line in {out:?}"))?)
    } else {
        None
    };
    eprintln!(
        "bench scale: {} instances x {} jobs on {} for {} s ...",
        args.instances,
        args.jobs,
        args.store.name(),
        args.seconds
    );
    let session = session::run(&Plan {
        bin: &bin,
        dir: &dir,
        kind: args.store,
        spec: &spec,
        jobs: args.jobs,
        instances: args.instances,
        seconds: args.seconds,
        floor: false,
    })?;
    let window = Window::between(args.jobs, session.from_ms, session.to_ms);
    let stats = slot_stats(&session.starts, window);
    if args.json {
        println!(
            "{}",
            report_json(&args, &session, &stats, ceiling, &load_before)
        );
    } else {
        print!(
            "{}",
            report_text(&args, &session, &stats, ceiling, &load_before)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// KiB per job above the node's own RSS before it registered anything.
fn per_job(rss: u64, base: u64, jobs: u32) -> f64 {
    (rss as f64 - base as f64) / f64::from(jobs)
}

/// Thousands separated by commas, for counts in a table.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn report_text(
    args: &ScaleArgs,
    session: &Session,
    stats: &SlotStats,
    ceiling: Option<Ceiling>,
    load_before: &str,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let jobs = args.jobs;
    let needed = f64::from(args.instances) * f64::from(jobs);
    let cores = mean(session.nodes.iter().map(|n| n.cores));
    let max_cores = session
        .nodes
        .iter()
        .map(|n| n.cores)
        .fold(f64::NAN, f64::max);
    let rss_start = mean(
        session
            .nodes
            .iter()
            .map(|n| per_job(n.rss_ready, n.rss_base, jobs)),
    );
    let rss_end = mean(
        session
            .nodes
            .iter()
            .map(|n| per_job(n.rss_end(), n.rss_base, jobs)),
    );
    let (p50, p99) = stats
        .lag_ms
        .map_or((f64::NAN, f64::NAN), |l| (l.p50, l.p99));
    let _ = writeln!(
        out,
        "\nbench scale: {}, {} instances x {} `every 1s` jobs (jitter 0), {} s, release build",
        args.store.name(),
        args.instances,
        grouped(u64::from(jobs)),
        args.seconds
    );
    let _ = writeln!(
        out,
        "machine: {}; load before {load_before}, at the end {}; all CPUs {} busy during the run",
        node::machine(),
        session.load_end,
        session
            .machine_busy
            .map_or("?".to_owned(), |b| format!("{:.0} %", b * 100.0))
    );
    let ratio = match ceiling {
        Some(c) => {
            let _ = writeln!(
                out,
                "store ceiling (same run, before the nodes; {} callers, {:.1} s): {:.0} {}/s = {} rows/s; \
                 the run needs {} claims/s (instances x jobs) = {:.1} % of it",
                c.callers,
                c.seconds,
                c.batches_per_s,
                args.store.ceiling_name(),
                grouped(c.rows_per_s as u64),
                grouped(needed as u64),
                100.0 * needed / c.rows_per_s
            );
            format!("{:.1} %", 100.0 * needed / c.rows_per_s)
        }
        None => {
            let _ = writeln!(out, "store ceiling: not measured for {}", args.store.name());
            "-".to_owned()
        }
    };
    let _ = writeln!(
        out,
        "\n| store | instances × jobs | slots judged | started within their second | missed | duplicates | start lag p50 / p99 | CPU per instance | store server CPU | RSS per job at start / end | claims needed / store ceiling | load (1 min) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| {} | {} × {} | {} | {:.2} % | {} | {} | {:.1} / {:.1} ms | {:.0} % (max {:.0} %) | {} | {:.2} / {:.2} KiB | {} | {} |",
        args.store.name(),
        args.instances,
        grouped(u64::from(jobs)),
        grouped(stats.slots),
        stats.within_percent(),
        grouped(stats.missed),
        stats.duplicates,
        p50,
        p99,
        cores * 100.0,
        max_cores * 100.0,
        session
            .server_cores
            .map_or("-".to_owned(), |c| format!("{:.0} %", c * 100.0)),
        rss_start,
        rss_end,
        ratio,
        session.load_end.split_whitespace().next().unwrap_or("?"),
    );
    // Memory once warm: the sample 60 s after READY against the last one, so a run of ten
    // minutes shows whether the steady state is flat.
    let warm: Vec<(u64, u64, u64)> = session
        .nodes
        .iter()
        .filter(|n| n.rss_series.len() > 6)
        .map(|n| (n.rss_base, n.rss_series[5], n.rss_end()))
        .collect();
    if !warm.is_empty() {
        let at_60 = mean(warm.iter().map(|&(b, w, _)| per_job(w, b, jobs)));
        let grown = mean(
            warm.iter()
                .map(|&(_, w, e)| (e as f64 - w as f64) / f64::from(jobs)),
        );
        let span = (session.nodes[0].rss_series.len() - 6) * 10;
        let _ = writeln!(
            out,
            "memory once warm: RSS {at_60:.2} KiB per job 60 s after start, then {grown:+.2} KiB \
             per job over the next {span} s (mean of the nodes)"
        );
    }
    let _ = writeln!(
        out,
        "\nslots judged: every job's whole seconds from 1 s after all nodes were ready to 2 s \
         before the stop ({} s); started {} ({} late), takeovers (attempt >= 2) {}, starts \
         outside the window {}",
        Window::between(jobs, session.from_ms, session.to_ms).seconds(),
        grouped(stats.started),
        grouped(stats.started - stats.within_second),
        stats.takeovers,
        grouped(stats.outside)
    );
    if let Some(l) = stats.lag_ms {
        let _ = writeln!(
            out,
            "start lag (first start of each slot): min {:.1} ms, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            l.min, l.p50, l.p99, l.max
        );
    }
    for n in &session.nodes {
        let starts = stats
            .per_instance
            .iter()
            .find(|(name, _)| *name == n.name)
            .map_or(0, |(_, s)| *s);
        let series: Vec<String> = n
            .rss_series
            .iter()
            .map(|kb| format!("{:.1}", *kb as f64 / 1024.0))
            .collect();
        let _ = writeln!(
            out,
            "{}: {} starts in the window, CPU {:.0} %, RSS {:.1} MiB with no job, +{:.1} MiB registered, \
             +{:.1} MiB started, then every 10 s (MiB): {}",
            n.name,
            grouped(starts),
            n.cores * 100.0,
            n.rss_base as f64 / 1024.0,
            (n.rss_registered as f64 - n.rss_base as f64) / 1024.0,
            (n.rss_ready as f64 - n.rss_base as f64) / 1024.0,
            series.join(" ")
        );
        let _ = writeln!(out, "    {}", n.counts);
        for e in &n.errors {
            let _ = writeln!(out, "    {e}");
        }
        if n.bad_lines > 0 {
            let _ = writeln!(out, "    {} log lines were not starts", n.bad_lines);
        }
    }
    out
}

fn report_json(
    args: &ScaleArgs,
    session: &Session,
    stats: &SlotStats,
    ceiling: Option<Ceiling>,
    load_before: &str,
) -> serde_json::Value {
    let needed = f64::from(args.instances) * f64::from(args.jobs);
    json!({
        "bench": "scale",
        "store": args.store.name(),
        "jobs": args.jobs,
        "instances": args.instances,
        "seconds": args.seconds,
        "machine": node::machine(),
        "load_before": load_before,
        "load_end": session.load_end,
        "machine_busy": session.machine_busy,
        "slots": stats.slots,
        "started": stats.started,
        "within_second": stats.within_second,
        "within_second_percent": stats.within_percent(),
        "missed": stats.missed,
        "duplicates": stats.duplicates,
        "takeovers": stats.takeovers,
        "outside_window": stats.outside,
        "lag_ms": stats.lag_ms.map(|l| json!({
            "min": l.min, "p50": l.p50, "p99": l.p99, "max": l.max, "n": l.n
        })),
        "server_cores": session.server_cores,
        "ceiling": ceiling.map(|c| json!({
            "work": args.store.ceiling_name(),
            "batches_per_s": c.batches_per_s,
            "rows_per_s": c.rows_per_s,
            "callers": c.callers,
            "seconds": c.seconds,
            "claims_needed_per_s": needed,
            "needed_share": needed / c.rows_per_s,
        })),
        "instances_detail": session.nodes.iter().map(|n| json!({
            "name": n.name,
            "cores": n.cores,
            "rss_base_kb": n.rss_base,
            "rss_registered_kb": n.rss_registered,
            "rss_start_kb": n.rss_ready,
            "rss_series_kb": n.rss_series,
            "rss_per_job_start_kb": per_job(n.rss_ready, n.rss_base, args.jobs),
            "rss_per_job_end_kb": per_job(n.rss_end(), n.rss_base, args.jobs),
            "counts": n.counts,
            "errors": n.errors,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn scale_options_parse_with_defaults() {
        let a = parse_args(&args(&["--store", "redis"])).unwrap();
        assert_eq!(
            a,
            ScaleArgs {
                store: StoreKind::Redis,
                jobs: 1_000,
                instances: 3,
                seconds: 60,
                ceiling_seconds: 5,
                json: false,
                keep: false
            }
        );
        let a = parse_args(&args(&[
            "--jobs",
            "10000",
            "--store",
            "postgres",
            "--instances",
            "1",
            "--seconds",
            "30",
            "--json",
        ]))
        .unwrap();
        assert_eq!(
            (a.store, a.jobs, a.instances, a.seconds, a.json),
            (StoreKind::Postgres, 10_000, 1, 30, true)
        );
    }

    #[test]
    fn bad_scale_options_are_named() {
        for (bad, named) in [
            (vec!["--jobs", "10"], "which store"),
            (vec!["--store", "mysql"], "mysql"),
            (vec!["--store", "redis", "--jobs", "0"], "--jobs"),
            (
                vec!["--store", "redis", "--jobs", "ten"],
                "'ten' for '--jobs",
            ),
            (vec!["--store", "redis", "--jobs", "100001"], "--jobs"),
            (vec!["--store", "redis", "--seconds"], "'--seconds <S>'"),
            (vec!["--store", "redis", "--seconds", "3"], "too short"),
            (vec!["--store", "redis", "--fast"], "--fast"),
        ] {
            let err = parse_args(&args(&bad)).unwrap_err().to_string();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_ceiling_line_reads_as_rates() {
        let c = parse_ceiling(
            "noise\nCEILING batches=500 rows_per_batch=256 seconds=5.000 callers=3\n",
        )
        .unwrap();
        assert_eq!(
            (c.batches_per_s, c.rows_per_s, c.callers),
            (100.0, 25_600.0, 3)
        );
        assert!(parse_ceiling("CEILING batches=1").is_none());
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
