//! `cargo xtask bench precision`: the start lag of one `every 1s` job on K instances (3 by
//! default) per store, beside the p99 of the store's bare one-row operation (Redis `PING`, a
//! committed one-row `UPDATE` on PostgreSQL and SQLite) measured by a probe in the same run.

use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::json;

use super::node::{self, RunDir, StoreKind};
use super::session::{self, Cleanup, Plan, Session};
use super::stats::{SlotStats, Summary, Window, slot_stats};

/// The options of `bench precision`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrecisionArgs {
    /// The stores, in order; empty: SQLite, and Redis and PostgreSQL where their URL is set.
    pub(crate) stores: Vec<StoreKind>,
    pub(crate) seconds: u64,
    pub(crate) instances: u32,
    pub(crate) json: bool,
    pub(crate) keep: bool,
}

/// `cargo xtask bench precision`: the start lag of one `every 1s` job on K instances per
/// store, beside the p99 of the store's bare one-row operation.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// Stores, comma-separated or repeated (sqlite, redis, postgres, libsql); default:
    /// SQLite, and Redis and PostgreSQL where their URL is set.
    #[arg(long, value_delimiter = ',', value_parser = StoreKind::parse)]
    store: Vec<StoreKind>,
    /// How long each store runs (5 s to a day: 3 s of margin are not judged).
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// Scheduler processes per store (at most 16).
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    instances: u32,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Keep the run's folders (the nodes' logs).
    #[arg(long)]
    keep: bool,
}

impl Opts {
    /// Checks what clap cannot say alone.
    pub(crate) fn check(self) -> Result<PrecisionArgs> {
        if self.seconds < 5 {
            bail!(
                "bench precision: --seconds {} is too short: 3 s of margin are not judged; use 5 or more",
                self.seconds
            );
        }
        let mut stores = Vec::new();
        for kind in self.store {
            if !stores.contains(&kind) {
                stores.push(kind);
            }
        }
        Ok(PrecisionArgs {
            stores,
            seconds: self.seconds,
            instances: self.instances,
            json: self.json,
            keep: self.keep,
        })
    }
}

/// Parses `bench precision`'s arguments (without the words `bench precision`).
#[cfg(test)]
pub(crate) fn parse_args(args: &[String]) -> Result<PrecisionArgs> {
    super::parse_with::<Opts>(args)?.check()
}

/// The target of the issue for a store, given the bare operation's p99 (ms).
fn target(kind: StoreKind, floor_p99_ms: Option<f64>) -> (String, Option<f64>) {
    match kind {
        StoreKind::Redis | StoreKind::Sqlite => ("p99 <= 1 ms".to_owned(), Some(1.0)),
        StoreKind::Postgres => (
            "p99 <= 1.5x the bare commit's p99".to_owned(),
            floor_p99_ms.map(|f| 1.5 * f),
        ),
        StoreKind::Libsql => ("none".to_owned(), None),
    }
}

struct Row {
    kind: StoreKind,
    session: Session,
    stats: SlotStats,
    floor_ms: Option<Summary>,
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let args = opts.check()?;
    let plan = node::store_plan(&args.stores)?;
    let bin = node::build_node()?;
    let load_before = node::load();
    let mut rows = Vec::new();
    for (kind, url) in plan {
        eprintln!(
            "bench precision: {} instances x 1 job on {} for {} s ...",
            args.instances,
            kind.name(),
            args.seconds
        );
        let dir = RunDir::create(&format!("precision-{}", kind.name()))?;
        let spec = dir.store_spec(kind, url.as_deref());
        let _cleanup = Cleanup {
            bin: &bin,
            dir: &dir,
            spec: spec.clone(),
            keep: args.keep,
        };
        let session = session::run(&Plan {
            bin: &bin,
            dir: &dir,
            kind,
            spec: &spec,
            jobs: 1,
            instances: args.instances,
            seconds: args.seconds,
            floor: kind.has_raw_client(),
            node_args: Vec::new(),
            baseline_seconds: 0,
            slow: None,
            hold: None,
        })?;
        let stats = slot_stats(
            &session.starts,
            Window::between(1, session.from_ms, session.to_ms),
        );
        let floor_ms = Summary::of(
            &session
                .floor_us
                .iter()
                .map(|us| us / 1000.0)
                .collect::<Vec<_>>(),
        );
        rows.push(Row {
            kind,
            session,
            stats,
            floor_ms,
        });
    }
    if args.json {
        println!("{}", report_json(&args, &rows, &load_before));
    } else {
        print!("{}", report_text(&args, &rows, &load_before));
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn report_text(args: &PrecisionArgs, rows: &[Row], load_before: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nbench precision: 1 `every 1s` job (jitter 0) on {} instances per store, {} s each, release build",
        args.instances, args.seconds
    );
    let _ = writeln!(
        out,
        "machine: {}; load before {load_before}",
        node::machine()
    );
    let _ = writeln!(
        out,
        "\n| store | slots | started within their second | duplicates | start lag p50 / p99 / max | bare op (same run) | op p50 / p99 | lag p99 / op p99 | target | load (1 min) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let lag = r.stats.lag_ms;
        let floor_p99 = r.floor_ms.map(|f| f.p99);
        let (target_text, limit) = target(r.kind, floor_p99);
        let verdict = match (lag, limit) {
            (Some(l), Some(limit)) if l.p99 <= limit => format!("{target_text}: met"),
            (Some(_), Some(limit)) => format!("{target_text} ({} ms): not met", ms(limit)),
            _ => target_text,
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} % | {} | {} | {} | {} | {} | {} | {} |",
            r.kind.name(),
            r.stats.slots,
            r.stats.within_percent(),
            r.stats.duplicates,
            lag.map_or("-".to_owned(), |l| format!(
                "{} / {} / {} ms",
                ms(l.p50),
                ms(l.p99),
                ms(l.max)
            )),
            r.kind.floor_name(),
            r.floor_ms.map_or("-".to_owned(), |f| format!(
                "{} / {} ms (n={})",
                ms(f.p50),
                ms(f.p99),
                f.n
            )),
            match (lag, floor_p99) {
                (Some(l), Some(f)) if f > 0.0 => format!("{:.2}", l.p99 / f),
                _ => "-".to_owned(),
            },
            verdict,
            r.session.load_end.split_whitespace().next().unwrap_or("?"),
        );
    }
    for r in rows {
        for n in &r.session.nodes {
            let _ = writeln!(out, "{} {}: {}", r.kind.name(), n.name, n.counts);
            for e in &n.errors {
                let _ = writeln!(out, "    {e}");
            }
        }
    }
    out
}

fn report_json(args: &PrecisionArgs, rows: &[Row], load_before: &str) -> serde_json::Value {
    let summary = |s: Option<Summary>| {
        s.map(|l| json!({"min": l.min, "p50": l.p50, "p99": l.p99, "max": l.max, "n": l.n}))
    };
    json!({
        "bench": "precision",
        "instances": args.instances,
        "seconds": args.seconds,
        "machine": node::machine(),
        "load_before": load_before,
        "stores": rows.iter().map(|r| json!({
            "store": r.kind.name(),
            "slots": r.stats.slots,
            "within_second": r.stats.within_second,
            "missed": r.stats.missed,
            "duplicates": r.stats.duplicates,
            "lag_ms": summary(r.stats.lag_ms),
            "bare_op": r.kind.floor_name(),
            "bare_op_ms": summary(r.floor_ms),
            "load_end": r.session.load_end,
            "counts": r.session.nodes.iter().map(|n| n.counts.clone()).collect::<Vec<_>>(),
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
    fn precision_options_parse_with_defaults() {
        let a = parse_args(&[]).unwrap();
        assert_eq!(
            a,
            PrecisionArgs {
                stores: vec![],
                seconds: 30,
                instances: 3,
                json: false,
                keep: false
            }
        );
        let a = parse_args(&args(&[
            "--store",
            "redis,sqlite",
            "--store",
            "postgres",
            "--store",
            "redis",
            "--seconds",
            "60",
            "--json",
        ]))
        .unwrap();
        assert_eq!(
            a.stores,
            vec![StoreKind::Redis, StoreKind::Sqlite, StoreKind::Postgres]
        );
        assert_eq!((a.seconds, a.json), (60, true));
    }

    #[test]
    fn bad_precision_options_are_named() {
        for (bad, named) in [
            (vec!["--store", "mongo"], "mongo"),
            (vec!["--seconds", "2"], "too short"),
            (vec!["--seconds", "x"], "'x' for '--seconds"),
            (vec!["--seconds", "18446744073709551615"], "--seconds"),
            (vec!["--instances"], "'--instances <K>'"),
            (vec!["redis"], "redis"),
        ] {
            let err = parse_args(&args(&bad)).unwrap_err().to_string();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
    }

    #[test]
    fn targets_follow_the_store() {
        assert_eq!(target(StoreKind::Redis, Some(0.1)).1, Some(1.0));
        assert_eq!(target(StoreKind::Postgres, Some(4.0)).1, Some(6.0));
        assert_eq!(target(StoreKind::Postgres, None).1, None);
    }
}
