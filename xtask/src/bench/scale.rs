//! `cargo xtask bench scale`: K scheduler processes with N distinct `every 1s` jobs each on
//! one store for S seconds; prints the share of slots started within their second, missed
//! slots, duplicates, start lag, CPU and RSS per instance, and the store's own ceiling for
//! the same work measured in the same run.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::hold::{self, Held, Hold};
use super::node::{self, RunDir, StoreKind};
use super::session::{self, Cleanup, Plan, Session};
use super::slow::{self, Slow};
use super::stats::{
    self as stats, CallRate, Grid, MinuteStats, NodeStretch, SlotStats, Start, Window, WriteCounts,
    Writes, call_rate, minute_stats, node_stretch, slot_stats,
};

const USAGE: &str = "bench scale --store redis|postgres|sqlite|libsql \
                     [--workload every1s|tenants|tenants-cron] [--jobs N] [--instances K] \
                     [--seconds S] [--history-size H] [--cron EXPR] [--ceiling-seconds C] \
                     [--slow F [--slow-from S] [--slow-for D]] [--hold-ms MS [--hold-from S]] \
                     [--no-floor] [--json] [--keep]";

/// Seconds of the store's call counters read before the nodes start (the same-run
/// baseline of a shared server's calls).
const BASELINE_SECONDS: u64 = 10;

/// The jobs every node registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// N `every 1s` jobs (offset 0).
    #[value(name = "every1s")]
    EverySecond,
    /// N `every 1m` jobs with offsets spread over the minute (one job per tenant).
    Tenants,
    /// N cron jobs (`*/5 * * * *` by default) in 16 timezones.
    TenantsCron,
}

impl Workload {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::EverySecond => "every1s",
            Workload::Tenants => "tenants",
            Workload::TenantsCron => "tenants-cron",
        }
    }

    fn default_jobs(self) -> u32 {
        match self {
            Workload::EverySecond => 1_000,
            Workload::Tenants | Workload::TenantsCron => 100_000,
        }
    }

    fn default_instances(self) -> u32 {
        match self {
            Workload::EverySecond => 3,
            Workload::Tenants | Workload::TenantsCron => 5,
        }
    }

    /// The slots' period in ms (cron: the default `*/5`).
    fn period_ms(self) -> i64 {
        match self {
            Workload::EverySecond => 1_000,
            Workload::Tenants => 60_000,
            Workload::TenantsCron => 300_000,
        }
    }

    /// The default run: every1s passes the pruning point (`history_size` slots) and then
    /// runs two more minutes, in whole minutes (240 s at the default 100); tenants runs 5
    /// minutes (5 slots of each job); tenants-cron two periods and a minute (660 s for
    /// `*/5`: two marks).
    fn default_seconds(self, history_size: u32, period_ms: i64) -> u64 {
        match self {
            Workload::EverySecond => (u64::from(history_size) + 120).div_ceil(60) * 60,
            Workload::Tenants => 300,
            Workload::TenantsCron => 2 * period_ms as u64 / 1000 + 60,
        }
    }

    fn describe(self, cron: &str) -> String {
        match self {
            Workload::EverySecond => "`every 1s` jobs (jitter 0)".to_owned(),
            Workload::Tenants => {
                "`every 1m` jobs, offsets spread over the minute (jitter 0)".to_owned()
            }
            Workload::TenantsCron => format!("cron `{cron}` jobs in 16 timezones (jitter 0)"),
        }
    }
}

/// The job option `history_size` when not given (the scheduler's default).
const DEFAULT_HISTORY_SIZE: u32 = 100;
/// The longest run `--seconds` asks for: a day.
const MAX_SECONDS: u64 = 86_400;
/// The longest `--ceiling-seconds`: an hour.
const MAX_CEILING_SECONDS: u64 = 3_600;

/// The options of `bench scale`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScaleArgs {
    pub(crate) store: StoreKind,
    pub(crate) workload: Workload,
    pub(crate) jobs: u32,
    pub(crate) instances: u32,
    pub(crate) seconds: u64,
    /// Given with `--history-size` (passed to the nodes), else `None` (the default, 100).
    pub(crate) history_size: Option<u32>,
    pub(crate) cron: String,
    /// The tenants-cron jobs' slot period (the UTC grid every zone shares), in ms.
    pub(crate) cron_period_ms: i64,
    pub(crate) ceiling_seconds: u64,
    /// The store slowed for a while (`--slow`), else `None`.
    pub(crate) slow: Option<Slow>,
    /// The handlers hold their runs for a while (`--hold-ms`), else `None`.
    pub(crate) hold: Option<Hold>,
    /// Measure the won slot's floor where the bench can (PostgreSQL every1s); `--no-floor`
    /// clears it.
    pub(crate) floor: bool,
    /// Run that floor at the run's own rate for the run's length (`--paced-floor`).
    pub(crate) paced_floor: bool,
    /// Measure the store's own claim path beside the floor (`--store-path`).
    pub(crate) store_path: bool,
    pub(crate) json: bool,
    pub(crate) keep: bool,
}

impl ScaleArgs {
    fn history(&self) -> u32 {
        self.history_size.unwrap_or(DEFAULT_HISTORY_SIZE)
    }

    /// The slots' period in ms.
    fn period_ms(&self) -> i64 {
        match self.workload {
            Workload::TenantsCron => self.cron_period_ms,
            w => w.period_ms(),
        }
    }

    fn grid(&self) -> Grid {
        Grid {
            jobs: self.jobs,
            period_ms: self.period_ms(),
            spread: self.workload == Workload::Tenants,
        }
    }

    /// When every job holds `history_size` runs and each claim starts to prune, in seconds
    /// after the start.
    fn pruning_point_s(&self) -> u64 {
        u64::from(self.history()) * self.period_ms() as u64 / 1000
    }

    fn node_args(&self) -> Vec<String> {
        let mut args = vec!["--workload".to_owned(), self.workload.name().to_owned()];
        if let Some(h) = self.history_size {
            args.extend(["--history-size".to_owned(), h.to_string()]);
        }
        if self.workload == Workload::TenantsCron {
            args.extend(["--cron".to_owned(), self.cron.clone()]);
            args.extend(["--grid-ms".to_owned(), self.cron_period_ms.to_string()]);
        }
        args
    }
}

const DEFAULT_CRON: &str = "*/5 * * * *";

/// The period of a cron expression the judge can lay on one UTC grid for every zone:
/// `* * * * *` or `*/N * * * *` with N dividing 15 (every zone's offset from UTC is a
/// multiple of 15 minutes, so such marks coincide in all zones).
pub(crate) fn cron_period_ms(expr: &str) -> Result<i64> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let minutes = match fields.as_slice() {
        ["*", "*", "*", "*", "*"] => Some(1),
        [m, "*", "*", "*", "*"] => m.strip_prefix("*/").and_then(|n| n.parse::<i64>().ok()),
        _ => None,
    };
    match minutes {
        Some(n @ (1 | 3 | 5 | 15)) => Ok(n * 60_000),
        _ => bail!(
            "bench scale: --cron {expr:?}: the judge lays slots on one UTC grid for all 16 \
             zones, which holds for `* * * * *` and `*/N * * * *` with N = 3, 5 or 15; use one \
             of those"
        ),
    }
}

/// `cargo xtask bench scale`: K scheduler processes with N jobs each (the same N on every
/// node) on a fresh namespace of one store for S seconds, beside the store's own ceiling;
/// figures for the whole run and for each minute.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// The store: redis, postgres, sqlite or libsql.
    #[arg(long, value_parser = StoreKind::parse)]
    store: Option<StoreKind>,
    /// The jobs: every1s (N `every 1s`), tenants (N `every 1m`, offsets spread over the
    /// minute), tenants-cron (N cron `*/5 * * * *` in 16 timezones).
    #[arg(long, value_enum, default_value_t = Workload::EverySecond)]
    workload: Workload,
    /// Jobs per instance, the same on every instance (at most 100000; default 1000, or
    /// 100000 for the tenants workloads).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: Option<u32>,
    /// Scheduler processes (at most 16; default 3, or 5 for the tenants workloads).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=16))]
    instances: Option<u32>,
    /// How long the jobs run (5 s to a day: 3 s of margin are not judged). Default: every1s
    /// past its pruning point (history size x 1 s) plus 2 minutes, in whole minutes (240 s);
    /// tenants 300 s; tenants-cron 660 s (two `*/5` marks).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    seconds: Option<u64>,
    /// The job option `history_size` of every job (default: the scheduler's, 100); every
    /// job holds this many runs, and each claim prunes, from H slots after the start on.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    history_size: Option<u32>,
    /// The cron expression of the tenants-cron jobs.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// How long the store's ceiling is measured (1 to 3600 s).
    #[arg(long, value_name = "C", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=MAX_CEILING_SECONDS))]
    ceiling_seconds: u64,
    /// Make every node's store FACTOR times slower (2 to 1000) for a while: each store
    /// call takes its turn at one lock of the node and answers after FACTOR x its own
    /// duration. The run is then also judged by phase (before, slowed, after) and by 30 s.
    #[arg(long, value_name = "FACTOR", value_parser = clap::value_parser!(u32).range(2..=1000))]
    slow: Option<u32>,
    /// Seconds after the nodes were spawned when the slowdown begins (default 60; with
    /// --slow only).
    #[arg(long, value_name = "S")]
    slow_from: Option<u64>,
    /// Seconds the slowdown lasts (default 120; with --slow only); the run must last 30 s
    /// more to see the recovery.
    #[arg(long, value_name = "D", value_parser = clap::value_parser!(u64).range(1..))]
    slow_for: Option<u64>,
    /// Make each handler hold its run MS ms (1 to 60,000, less than the jobs' period) from
    /// `--hold-from` on: the memory per run in flight then reads above the same jobs running
    /// without holding, in the same run.
    #[arg(long, value_name = "MS")]
    hold_ms: Option<u64>,
    /// Seconds after the nodes were spawned when the handlers begin to hold (default: half
    /// of --seconds; with --hold-ms only). 60 s of readings are needed before and 80 s after.
    #[arg(long, value_name = "S")]
    hold_from: Option<u64>,
    /// Skip the won slot's floor (PostgreSQL, every1s): it first fills every job's
    /// history (jobs x history size rows), which takes minutes at large history sizes.
    #[arg(long)]
    no_floor: bool,
    /// Run the won slot's floor (PostgreSQL, every1s) at the run's own rate for the run's
    /// length instead of as fast as it goes for a few seconds: each job once a second, per
    /// minute the share of slots whose claim committed within their second, and the
    /// server's CPU. Shows whether the bare statements themselves keep up past the pruning
    /// point on this server (the run takes twice as long).
    #[arg(long, conflicts_with = "no_floor")]
    paced_floor: bool,
    /// Beside the won slot's floor (PostgreSQL, every1s), the store's own claim path on the
    /// same tables and histories without the scheduler: `claim_many` / `finish_many`, each
    /// caller its own jobs, then every caller every job, 90 s each (long enough for every
    /// job's prunes to find their cut upwards), after filling the histories again for each.
    #[arg(long, conflicts_with_all = ["no_floor", "paced_floor"])]
    store_path: bool,
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
        let workload = self.workload;
        if self.cron.is_some() && workload != Workload::TenantsCron {
            bail!(
                "bench scale: --cron applies to --workload tenants-cron only (this run is {})",
                workload.name()
            );
        }
        if self.paced_floor && (store != StoreKind::Postgres || workload != Workload::EverySecond) {
            bail!(
                "bench scale: --paced-floor measures the won slot's floor of PostgreSQL's every1s \
                 workload (this run is {} on {}): drop it, or run --store postgres --workload every1s",
                workload.name(),
                store.name()
            );
        }
        if self.store_path && (store != StoreKind::Postgres || workload != Workload::EverySecond) {
            bail!(
                "bench scale: --store-path measures PostgreSQL's claim path beside the every1s \
                 floor (this run is {} on {}): drop it, or run --store postgres --workload every1s",
                workload.name(),
                store.name()
            );
        }
        let cron = self.cron.unwrap_or_else(|| DEFAULT_CRON.to_owned());
        let cron_period_ms = cron_period_ms(&cron)?;
        let history = self.history_size.unwrap_or(DEFAULT_HISTORY_SIZE);
        let seconds = self
            .seconds
            .unwrap_or_else(|| workload.default_seconds(history, cron_period_ms));
        if seconds < 5 {
            bail!(
                "bench scale: --seconds {seconds} is too short: 3 s of margin are not judged; use 5 or more"
            );
        }
        if seconds > MAX_SECONDS {
            bail!(
                "bench scale: --seconds {seconds} is longer than a day ({MAX_SECONDS} s): the \
                 nodes' start logs (about 40 bytes a slot) are read whole after the run; run a \
                 day or less"
            );
        }
        let slow = Slow::check(self.slow, self.slow_from, self.slow_for, seconds)?;
        let period_ms = match workload {
            Workload::TenantsCron => cron_period_ms,
            w => w.period_ms(),
        };
        let hold = Hold::check(self.hold_ms, self.hold_from, seconds, period_ms)?;
        Ok(ScaleArgs {
            store,
            workload,
            jobs: self.jobs.unwrap_or_else(|| workload.default_jobs()),
            instances: self
                .instances
                .unwrap_or_else(|| workload.default_instances()),
            seconds,
            history_size: self.history_size,
            cron,
            cron_period_ms,
            ceiling_seconds: self.ceiling_seconds,
            slow,
            hold,
            floor: !self.no_floor,
            paced_floor: self.paced_floor,
            store_path: self.store_path,
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

/// The line of a node's output that starts with `tag` and a space, with its `seconds`
/// (only when positive) and `callers` fields.
fn measured_line<'o>(out: &'o str, tag: &str) -> Option<(&'o str, f64, u32)> {
    let line = out.lines().find(|l| {
        l.strip_prefix(tag)
            .is_some_and(|rest| rest.starts_with(' '))
    })?;
    let seconds = node::num_field(line, "seconds")?;
    let callers = node::num_field(line, "callers")? as u32;
    (seconds > 0.0).then_some((line, seconds, callers))
}

/// The server settings a node printed (`SERVER name=value ...`, PostgreSQL).
pub(crate) fn parse_server(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix("SERVER "))
        .map(|s| s.trim().to_owned())
}

pub(crate) fn parse_ceiling(out: &str) -> Option<Ceiling> {
    let (line, seconds, callers) = measured_line(out, "CEILING")?;
    let batches = node::num_field(line, "batches")?;
    let rows = node::num_field(line, "rows_per_batch")?;
    Some(Ceiling {
        batches_per_s: batches / seconds,
        rows_per_s: batches * rows / seconds,
        callers,
        seconds,
    })
}

/// The physical floor of a won slot (PostgreSQL): slots per second that two committed
/// set-based statements per 256 jobs (claim; finish and prune) reach on the store's own
/// tables with full histories, without the scheduler or competing claims.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotFloor {
    pub(crate) slots_per_s: f64,
    pub(crate) callers: u32,
    pub(crate) seconds: f64,
}

pub(crate) fn parse_slot_floor(out: &str) -> Option<SlotFloor> {
    let (line, seconds, callers) = measured_line(out, "SLOT_FLOOR")?;
    let slots = node::num_field(line, "slots")?;
    Some(SlotFloor {
        slots_per_s: slots / seconds,
        callers,
        seconds,
    })
}

/// How long each measurement of `--store-path` runs: in a run of 30 s a fifth of the prunes
/// were each job's first (which reads its cut from the top); 90 s of `every 1s` slots give
/// every job five to six prunes.
const STORE_PATH_SECONDS: u64 = 90;

/// The store's own claim path without the scheduler (PostgreSQL): the floor's jobs and full
/// histories claimed and finished through `claim_many` / `finish_many`, 256 a call, as fast
/// as they go; `racing`: every caller claims every job (each slot won by one, lost by the
/// others), else each caller its own jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StorePath {
    pub(crate) won_per_s: f64,
    pub(crate) taken_per_s: f64,
    pub(crate) seconds: f64,
}

/// Reads the `STORE_FLOOR slots= taken= overlap= late= seconds= callers=` line.
pub(crate) fn parse_store_path(out: &str) -> Option<StorePath> {
    let (line, seconds, _) = measured_line(out, "STORE_FLOOR")?;
    Some(StorePath {
        won_per_s: node::num_field(line, "slots")? / seconds,
        taken_per_s: node::num_field(line, "taken")? / seconds,
        seconds,
    })
}

/// The floor's statements run at the run's own rate (`--paced-floor`): per minute, the slots
/// due, those whose claim committed within their second and those skipped (not begun by the
/// end of their second), and the server's CPU over it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PacedFloor {
    pub(crate) minutes: Vec<PacedMinute>,
    pub(crate) callers: u32,
    /// The share of all CPUs busy while it ran (`None`: not read).
    pub(crate) machine_busy: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PacedMinute {
    pub(crate) slots: u64,
    pub(crate) in_second: u64,
    pub(crate) skipped: u64,
}

impl PacedMinute {
    fn percent(self) -> f64 {
        100.0 * self.in_second as f64 / (self.slots.max(1)) as f64
    }
}

/// Reads the `PACED_FLOOR minute= slots= in_second= late=` lines and the callers of the
/// `PACED_FLOOR_END` line (`None` without it).
pub(crate) fn parse_paced_floor(out: &str) -> Option<PacedFloor> {
    let end = out.lines().find(|l| l.starts_with("PACED_FLOOR_END "))?;
    let callers = node::num_field(end, "callers")? as u32;
    let minutes = out
        .lines()
        .filter(|l| l.starts_with("PACED_FLOOR minute="))
        .map(|l| {
            Some(PacedMinute {
                slots: node::num_field(l, "slots")? as u64,
                in_second: node::num_field(l, "in_second")? as u64,
                skipped: node::num_field(l, "late")? as u64,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(PacedFloor {
        minutes,
        callers,
        machine_busy: None,
    })
}

/// The bench node's `slot-floor` arguments: the run's store, instances (as callers), jobs
/// and history size, for `seconds`.
fn slot_floor_args(args: &ScaleArgs, spec: &str, seconds: u64) -> Vec<String> {
    vec![
        "--store".into(),
        spec.to_owned(),
        "--callers".into(),
        args.instances.to_string(),
        "--jobs".into(),
        args.jobs.to_string(),
        "--history".into(),
        args.history().to_string(),
        "--seconds".into(),
        seconds.to_string(),
    ]
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
    let (ceiling, server) = if args.store.has_raw_client() {
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
        (
            Some(parse_ceiling(&out).with_context(|| format!("no CEILING line in {out:?}"))?),
            parse_server(&out),
        )
    } else {
        (None, None)
    };
    // The floor of `every1s` jobs (with full histories it is millions of rows for tenants).
    let floor_applies =
        args.floor && args.store == StoreKind::Postgres && args.workload == Workload::EverySecond;
    let paced_floor = if floor_applies && args.paced_floor {
        eprintln!(
            "bench scale: the won slot's floor at the run's rate ({} jobs once a second on {} \
             callers, {} s) ...",
            args.jobs, args.instances, args.seconds
        );
        let before = node::machine_ticks();
        let mut floor_args = slot_floor_args(&args, &spec, args.seconds);
        floor_args.extend(["--paced".into(), "1".into()]);
        let out = node::run_node(
            &bin,
            "slot-floor",
            &floor_args,
            Duration::from_secs(args.seconds + 600),
        )?;
        let mut paced =
            parse_paced_floor(&out).with_context(|| format!("no PACED_FLOOR lines in {out:?}"))?;
        // The machine's, not the server processes': the floor's backends end with it, and
        // their ticks with them. Nothing else runs meanwhile but the floor's own process.
        paced.machine_busy = node::busy_share(before, node::machine_ticks());
        Some(paced)
    } else {
        None
    };
    let slot_floor = if floor_applies && !args.paced_floor {
        eprintln!(
            "bench scale: measuring a won slot's floor on the store's tables ({} callers, {} s) ...",
            args.instances, args.ceiling_seconds
        );
        let out = node::run_node(
            &bin,
            "slot-floor",
            &slot_floor_args(&args, &spec, args.ceiling_seconds),
            Duration::from_secs(args.ceiling_seconds + 300),
        )?;
        Some(parse_slot_floor(&out).with_context(|| format!("no SLOT_FLOOR line in {out:?}"))?)
    } else {
        None
    };
    // Beside the floor, the store's own batch calls on the same tables and histories: what
    // the claim path costs apart from the scheduler, alone and with the instances racing.
    let store_path = if slot_floor.is_some() && args.store_path {
        let mut paths = Vec::new();
        for race in ["0", "1"] {
            eprintln!(
                "bench scale: the store's claim path on the floor's tables ({} callers, {} s{}) ...",
                args.instances,
                STORE_PATH_SECONDS,
                if race == "1" { ", racing" } else { "" }
            );
            let mut path_args = slot_floor_args(&args, &spec, STORE_PATH_SECONDS);
            path_args.extend(["--via".into(), "store".into(), "--race".into(), race.into()]);
            let out = node::run_node(
                &bin,
                "slot-floor",
                &path_args,
                Duration::from_secs(STORE_PATH_SECONDS + 300),
            )?;
            paths.push(
                parse_store_path(&out)
                    .with_context(|| format!("no STORE_FLOOR line in {out:?}"))?,
            );
        }
        Some((paths[0], paths[1]))
    } else {
        None
    };
    eprintln!(
        "bench scale: {} instances x {} {} jobs on {} for {} s ...",
        args.instances,
        args.jobs,
        args.workload.name(),
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
        node_args: args.node_args(),
        baseline_seconds: BASELINE_SECONDS,
        slow: args.slow,
        hold: args.hold,
    })?;
    let window = Window::on_grid(args.grid(), session.from_ms, session.to_ms);
    let mut report = Report::of(&args, &session, window, ceiling, server, load_before);
    report.slot_floor = slot_floor;
    report.store_path = store_path;
    report.paced_floor = paced_floor;
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}

/// [`stats::mean`], NaN (printed as such) without a finite value.
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    stats::mean(values).unwrap_or(f64::NAN)
}

/// KiB per job above the node's own RSS before it registered anything.
fn per_job(rss: u64, base: u64, jobs: u32) -> f64 {
    (rss as f64 - base as f64) / f64::from(jobs)
}

/// What the server wrote (PostgreSQL), for `--json`.
fn writes_json(w: &Writes) -> serde_json::Value {
    json!({
        "seconds": w.seconds,
        "first_starts": w.starts,
        "wal_bytes": w.delta.wal_bytes,
        "wal_records": w.delta.wal_records,
        "wal_fpi": w.delta.wal_fpi,
        "wal_bytes_per_start": w.per_start(w.delta.wal_bytes),
        "wal_records_per_start": w.per_start(w.delta.wal_records),
        "history_updates": w.delta.history_upd,
        "history_hot_percent": Writes::share(w.delta.history_hot, w.delta.history_upd),
        "runs_updates": w.delta.runs_upd,
        "runs_hot_percent": Writes::share(w.delta.runs_hot, w.delta.runs_upd),
    })
}

/// The report's line of what the server wrote (PostgreSQL).
fn writes_text(w: &Writes) -> String {
    let or_dash = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_owned(), f);
    let d = &w.delta;
    format!(
        "server writes (PostgreSQL: `pg_stat_wal`, server-wide, so other clients count; the \
         run's tables in `pg_stat_user_tables`) over {:.0} s while the nodes ran, {} first \
         starts: WAL {} = {} bytes and {} records per slot started, {} full-page images ({} per \
         slot started); updates written as heap-only tuples (HOT, no index entry): history {} \
         of {}, runs {} of {}\n",
        w.seconds,
        grouped(w.starts),
        d.wal_bytes
            .map_or("-".to_owned(), |b| format!("{:.2} GB", b as f64 / 1e9)),
        or_dash(w.per_start(d.wal_bytes), &|v| format!("{v:.0}")),
        or_dash(w.per_start(d.wal_records), &|v| format!("{v:.1}")),
        d.wal_fpi.map_or("-".to_owned(), grouped),
        or_dash(w.per_start(d.wal_fpi), &|v| format!("{v:.3}")),
        or_dash(Writes::share(d.history_hot, d.history_upd), &|v| format!(
            "{v:.1} %"
        )),
        d.history_upd.map_or("-".to_owned(), grouped),
        or_dash(Writes::share(d.runs_hot, d.runs_upd), &|v| format!(
            "{v:.1} %"
        )),
        d.runs_upd.map_or("-".to_owned(), grouped),
    )
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

/// One minute of the run: the slots' figures and every node's own readings.
struct Minute {
    slots: MinuteStats,
    /// Per node, in the order of the session's nodes (`None`: no reading in the minute).
    nodes: Vec<Option<NodeStretch>>,
    /// The 1-minute load average at the minute's last reading.
    load: Option<f64>,
}

impl Minute {
    /// KiB per registered job at the minute's end, mean of the nodes (above `BASE`).
    fn kib_per_job(&self, session: &Session, jobs: u32) -> f64 {
        mean(
            session
                .nodes
                .iter()
                .zip(&self.nodes)
                .filter_map(|(n, m)| Some(per_job(m.as_ref()?.rss_end_kb, n.rss_base, jobs))),
        )
    }

    /// KiB per run in flight: the minute's highest RSS above the node's RSS with its jobs
    /// registered, over the most runs it held at once in the minute; mean of the nodes that
    /// held at least a tenth of the jobs at once (with fewer, the growth is not the runs').
    fn kib_per_run(&self, session: &Session, jobs: u32) -> f64 {
        mean(session.nodes.iter().zip(&self.nodes).filter_map(|(n, m)| {
            let m = m.as_ref()?;
            (m.held_max > 0 && m.held_max * 10 >= u64::from(jobs))
                .then(|| (m.rss_max_kb as f64 - n.rss_registered as f64) / m.held_max as f64)
        }))
    }
}

/// The store server's calls: before the nodes (baseline), while they ran, and in the idle
/// stretches (see [`Quiet::idle`]).
struct Calls {
    baseline: Option<CallRate>,
    running: Option<CallRate>,
    idle: Option<CallRate>,
    /// Calls by command over the idle stretches (Redis), most first.
    idle_by_command: Vec<(String, u64)>,
}

/// The calls by command between two `detail` strings of counter readings.
fn detail_delta(a: &str, b: &str) -> Vec<(String, u64)> {
    let parse = |d: &str| -> Vec<(String, u64)> {
        d.split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect()
    };
    let before = parse(a);
    parse(b)
        .into_iter()
        .map(|(k, v)| {
            let was = before.iter().find(|(n, _)| *n == k).map_or(0, |(_, v)| *v);
            (k, v.saturating_sub(was))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The idle stretches of a run: no slot due and no run started.
struct Quiet {
    window: Window,
    /// When every logged start happened, in ms, sorted: the window's slots and the start's
    /// catch-ups of a slot due before it (which the grid does not know of).
    starts_ms: Vec<i64>,
}

impl Quiet {
    fn of(window: Window, starts: &[Start]) -> Quiet {
        let mut starts_ms: Vec<i64> = starts.iter().map(|s| s.start_us.div_euclid(1000)).collect();
        starts_ms.sort_unstable();
        Quiet { window, starts_ms }
    }

    /// Whether a reading interval `from..=to` (ms) is idle: inside the window, no slot of
    /// the grid due and no run started in it nor in the 5 s before it. The starts count
    /// too because a burst of slots (a cron mark, the start's catch-up of the slot before
    /// the window) may take seconds to claim: its calls are the due slots' work, not idle
    /// traffic.
    fn idle(&self, from: i64, to: i64) -> bool {
        let since = from - 5_000;
        let first_at_or_after = self.starts_ms.partition_point(|&t| t < since);
        from >= self.window.first_ms
            && to <= self.window.last_ms
            && self.window.grid.idle_between(since, to)
            && self
                .starts_ms
                .get(first_at_or_after)
                .is_none_or(|&t| t > to)
    }
}

impl Calls {
    fn of(session: &Session, quiet: &Quiet) -> Option<Calls> {
        let c = &session.counters;
        if c.len() < 2 {
            return None;
        }
        let mut by_command: Vec<(String, u64)> = Vec::new();
        for pair in c.windows(2) {
            if quiet.idle(pair[0].t_ms, pair[1].t_ms) {
                for (k, v) in detail_delta(&pair[0].detail, &pair[1].detail) {
                    match by_command.iter_mut().find(|(n, _)| *n == k) {
                        Some(e) => e.1 += v,
                        None => by_command.push((k, v)),
                    }
                }
            }
        }
        by_command.sort_by_key(|e| std::cmp::Reverse(e.1));
        Some(Calls {
            baseline: call_rate(c, |_, to| to <= session.spawned_ms),
            running: call_rate(c, |from, to| {
                from >= quiet.window.first_ms && to <= quiet.window.last_ms
            }),
            idle: call_rate(c, |from, to| quiet.idle(from, to)),
            idle_by_command: by_command,
        })
    }
}

/// Everything the report shows.
struct Report<'a> {
    args: &'a ScaleArgs,
    session: &'a Session,
    window: Window,
    stats: SlotStats,
    minutes: Vec<Minute>,
    calls: Option<Calls>,
    /// Node CPU (cores, mean of the nodes) in idle stretches, and their seconds.
    idle_cores: Option<(f64, f64)>,
    ceiling: Option<Ceiling>,
    /// The server settings a loaded server depends on, read before the nodes (PostgreSQL).
    server: Option<String>,
    /// A won slot's floor on the store's tables, same run (PostgreSQL).
    slot_floor: Option<SlotFloor>,
    /// The store's own claim path on the floor's tables, each caller its own jobs and all
    /// racing, same run (PostgreSQL).
    store_path: Option<(StorePath, StorePath)>,
    /// The floor at the run's own rate (`--paced-floor`, PostgreSQL).
    paced_floor: Option<PacedFloor>,
    load_before: String,
    /// The run judged by phase, when the store was slowed.
    slowed: Option<slow::Judged>,
    /// Each node's runs in flight and memory before and while its handlers held their runs.
    held: Option<(Hold, Vec<Option<Held>>)>,
    /// What the server wrote while the nodes ran (PostgreSQL).
    writes: Option<Writes>,
}

impl<'a> Report<'a> {
    fn of(
        args: &'a ScaleArgs,
        session: &'a Session,
        window: Window,
        ceiling: Option<Ceiling>,
        server: Option<String>,
        load_before: String,
    ) -> Report<'a> {
        let stats = slot_stats(&session.starts, window);
        let tps = session.ticks_per_second;
        let minutes = minute_stats(&session.starts, window)
            .into_iter()
            .map(|slots| Minute {
                nodes: session
                    .nodes
                    .iter()
                    .map(|n| node_stretch(&n.samples, slots.from_ms, slots.to_ms + 999, tps))
                    .collect(),
                load: session
                    .loads
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= slots.to_ms + 999)
                    .map(|(_, l)| *l),
                slots,
            })
            .collect();
        let quiet = Quiet::of(window, &session.starts);
        let idle_cores = {
            let (mut ticks, mut ms, mut nodes) = (0u64, 0i64, 0u32);
            for n in &session.nodes {
                nodes += 1;
                for pair in n.samples.windows(2) {
                    if quiet.idle(pair[0].t_ms, pair[1].t_ms) {
                        ticks += pair[1].ticks.saturating_sub(pair[0].ticks);
                        ms += pair[1].t_ms - pair[0].t_ms;
                    }
                }
            }
            (ms > 0).then(|| {
                (
                    ticks as f64 / tps / (ms as f64 / 1000.0),
                    ms as f64 / 1000.0 / f64::from(nodes.max(1)),
                )
            })
        };
        let slowed = session.slow.map(|w| {
            let samples: Vec<&[super::stats::Sample]> =
                session.nodes.iter().map(|n| n.samples.as_slice()).collect();
            slow::judge(w, &session.starts, window, &samples, tps)
        });
        let held = args.hold.zip(session.hold_from_ms).map(|(hold, from_ms)| {
            let held = session
                .nodes
                .iter()
                .map(|n| hold::held(&n.samples, from_ms, hold.unread_s(), session.to_ms))
                .collect();
            (hold, held)
        });
        let writes = stats::writes(
            &session.counters,
            &session.starts,
            window.first_ms,
            window.last_ms + 999,
        )
        .filter(|w| w.delta != WriteCounts::default());
        Report {
            writes,
            held,
            slowed,
            args,
            session,
            window,
            stats,
            minutes,
            calls: Calls::of(session, &quiet),
            idle_cores,
            ceiling,
            server,
            slot_floor: None,
            store_path: None,
            paced_floor: None,
            load_before,
        }
    }

    /// Claims the run needs per second: instances x jobs per period.
    fn needed_per_s(&self) -> f64 {
        f64::from(self.args.instances) * f64::from(self.args.jobs) * 1000.0
            / self.args.period_ms() as f64
    }

    fn text(&self) -> String {
        use std::fmt::Write;
        let (args, session, stats) = (self.args, self.session, &self.stats);
        let mut out = String::new();
        let jobs = args.jobs;
        let needed = self.needed_per_s();
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
            "\nbench scale: {} workload {}, {} instances x {} {}, {} s, history_size {}{}, release build",
            args.store.name(),
            args.workload.name(),
            args.instances,
            grouped(u64::from(jobs)),
            args.workload.describe(&args.cron),
            args.seconds,
            args.history(),
            if args.history_size.is_some() {
                ""
            } else {
                " (default)"
            },
        );
        let prune = args.pruning_point_s();
        let _ = writeln!(
            out,
            "pruning point: every job holds {} runs about {prune} s after the start (minute {} of \
             the window); {}",
            args.history(),
            prune / 60 + 1,
            if prune + 60 <= args.seconds {
                "this run passes it by a minute or more"
            } else {
                "THIS RUN ENDS BEFORE OR JUST AFTER IT (raise --seconds or lower --history-size)"
            }
        );
        let _ = writeln!(
            out,
            "machine: {}; load before {}, at the end {}; all CPUs {} busy during the run",
            node::machine(),
            self.load_before,
            session.load_end,
            session
                .machine_busy
                .map_or("?".to_owned(), |b| format!("{:.0} %", b * 100.0))
        );
        if let Some(server) = &self.server {
            let _ = writeln!(out, "store server settings: {server}");
        }
        let ratio = match self.ceiling {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "store ceiling (same run, before the nodes; {} callers, {:.1} s): {:.0} {}/s = {} rows/s; \
                     the run needs {} claims/s on average (instances x jobs / period) = {:.1} % of it{}",
                    c.callers,
                    c.seconds,
                    c.batches_per_s,
                    args.store.ceiling_name(),
                    grouped(c.rows_per_s as u64),
                    grouped(needed as u64),
                    100.0 * needed / c.rows_per_s,
                    if args.workload == Workload::TenantsCron {
                        format!(
                            "; each mark brings {} claims at once = {:.1} s of the ceiling",
                            grouped(u64::from(args.instances) * u64::from(jobs)),
                            f64::from(args.instances) * f64::from(jobs) / c.rows_per_s
                        )
                    } else {
                        String::new()
                    }
                );
                format!("{:.1} %", 100.0 * needed / c.rows_per_s)
            }
            None => {
                let _ = writeln!(out, "store ceiling: not measured for {}", args.store.name());
                "-".to_owned()
            }
        };
        if let Some(f) = self.slot_floor {
            let needed_slots = f64::from(args.jobs) * 1000.0 / args.period_ms() as f64;
            let started_per_s = stats.started as f64 / self.window.seconds().max(1) as f64;
            let _ = writeln!(
                out,
                "a won slot's floor (same run, before the nodes; {} callers, {:.1} s; the store's \
                 own tables and indexes with full histories, per 256 jobs one committed claim \
                 statement (run, fence, attempt) and one finish (both ended, the oldest pruned), \
                 no competing claims, no job locks): {} slots/s; the run needs {} slots/s = \
                 {:.1} % of it; the claim path started {} slots/s = {:.1} % of the floor",
                f.callers,
                f.seconds,
                grouped(f.slots_per_s as u64),
                grouped(needed_slots as u64),
                100.0 * needed_slots / f.slots_per_s,
                grouped(started_per_s as u64),
                100.0 * started_per_s / f.slots_per_s
            );
            if let Some((alone, racing)) = self.store_path {
                let _ = writeln!(
                    out,
                    "the store's claim path on the same tables (same run, {:.1} s each, \
                     `--store-path`; \
                     claim_many and finish_many of 256 with their job locks and pruning, no \
                     scheduler): each caller its own jobs {} slots/s = {:.1} % of the floor; \
                     every caller claiming every job {} won slots/s = {:.1} % of the floor \
                     ({} lost claims/s); the run needs {:.1} % of the racing figure",
                    alone.seconds,
                    grouped(alone.won_per_s as u64),
                    100.0 * alone.won_per_s / f.slots_per_s,
                    grouped(racing.won_per_s as u64),
                    100.0 * racing.won_per_s / f.slots_per_s,
                    grouped(racing.taken_per_s as u64),
                    100.0 * needed_slots / racing.won_per_s.max(1.0)
                );
            }
        }
        if let Some(p) = &self.paced_floor {
            let _ = writeln!(
                out,
                "the floor at the run's rate (same run, before the nodes; {} callers; the floor's \
                 statements for each job once a second as its slots fall due; a batch not begun \
                 by the end of its second skipped; all CPUs {} busy meanwhile, the floor's own \
                 process included):",
                p.callers,
                p.machine_busy
                    .map_or("-".to_owned(), |c| format!("{:.0} %", 100.0 * c))
            );
            let _ = writeln!(
                out,
                "\n| minute | floor: slots | floor: claimed within their second | floor: skipped | the run: within their second |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|");
            for (i, m) in p.minutes.iter().enumerate() {
                let run = self.minutes.get(i).map_or("-".to_owned(), |r| {
                    format!("{:.2} %", r.slots.within_percent())
                });
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.2} % | {} | {run} |",
                    i + 1,
                    grouped(m.slots),
                    m.percent(),
                    grouped(m.skipped),
                );
            }
        }
        let _ = writeln!(
            out,
            "\n| store | workload | instances × jobs | slots judged | started within their second | missed | duplicates | start lag p50 / p99 | CPU per instance | store server CPU | RSS per job at start / end | claims needed / store ceiling | load (1 min) |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let _ = writeln!(
            out,
            "| {} | {} | {} × {} | {} | {:.2} % | {} | {} | {:.1} / {:.1} ms | {:.0} % (max {:.0} %) | {} | {:.2} / {:.2} KiB | {} | {} |",
            args.store.name(),
            args.workload.name(),
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
        let names: Vec<&str> = session.nodes.iter().map(|n| n.name.as_str()).collect();
        let _ = writeln!(
            out,
            "\nper minute of the window (by slot; the last minute may be partial; RSS and CPU are \
             the nodes' own readings, {}):\n",
            names.join(" / ")
        );
        let _ = writeln!(
            out,
            "| minute | slots | within their second | missed | jobs started | duplicates | lag p50 / p99 | RSS MiB at the end | KiB per job | runs in flight (max) | KiB per run in flight | CPU | late | load |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for m in &self.minutes {
            let s = &m.slots;
            let per_node = |f: &dyn Fn(&NodeStretch) -> String| {
                m.nodes
                    .iter()
                    .map(|n| n.as_ref().map_or("-".to_owned(), f))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let lag = s.lag_ms.map_or("-".to_owned(), |l| {
                format!("{:.1} / {:.1} ms", l.p50, l.p99)
            });
            let within = if s.slots == 0 {
                "- (no slot)".to_owned()
            } else {
                format!("{:.2} %", s.within_percent())
            };
            let _ = writeln!(
                out,
                "| {}{} | {} | {within} | {} | {} | {} | {lag} | {} | {:.2} | {} | {} | {} | {} | {} |",
                s.minute + 1,
                if s.to_ms - s.from_ms < 59_000 {
                    format!(" ({} s)", (s.to_ms - s.from_ms) / 1000 + 1)
                } else {
                    String::new()
                },
                grouped(s.slots),
                grouped(s.missed),
                grouped(s.jobs_started),
                s.duplicates,
                per_node(&|n| format!("{:.1}", n.rss_end_kb as f64 / 1024.0)),
                m.kib_per_job(session, jobs),
                per_node(&|n| grouped(n.held_max)),
                Some(m.kib_per_run(session, jobs))
                    .filter(|k| k.is_finite())
                    .map_or("- (< jobs / 10 held)".to_owned(), |k| format!("{k:.2}")),
                per_node(&|n| format!("{:.0} %", n.cores * 100.0)),
                per_node(&|n| grouped(n.late)),
                m.load.map_or("?".to_owned(), |l| format!("{l:.2}")),
            );
        }
        if let Some(slowed) = &self.slowed {
            out.push_str(&slowed.text(&self.window, &names));
        }
        if let Some((hold, held)) = &self.held {
            out.push_str(&hold::text(*hold, &names, held));
        }
        let registered = mean(
            session
                .nodes
                .iter()
                .map(|n| (n.rss_registered as f64 - n.rss_base as f64) / f64::from(jobs)),
        );
        let _ = writeln!(
            out,
            "\nmemory: {registered:.2} KiB per registered job (RSS with the jobs registered, before \
             start, above the node's RSS before it registered any; mean of the nodes); per minute \
             above: KiB per job = RSS at the minute's end above that base / jobs; KiB per run in \
             flight = the minute's highest RSS above the registered RSS / the most runs the node \
             held at once (its own `health().leases_held`, read every 10 ms; only for nodes that \
             held at least a tenth of the jobs at once)"
        );
        let _ = writeln!(
            out,
            "registration / start(): {}",
            session
                .nodes
                .iter()
                .map(|n| format!(
                    "{} {:.2} s / {:.2} s",
                    n.name,
                    n.register_ms / 1000.0,
                    n.start_ms / 1000.0
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        match &self.calls {
            Some(c) => {
                let rate = |r: Option<CallRate>| {
                    r.map_or("- (no reading)".to_owned(), |r| {
                        format!(
                            "{:.0} calls/s{} over {:.0} s",
                            r.calls_per_s,
                            if args.store == StoreKind::Postgres {
                                format!(", {:.1} commits/s", r.commits_per_s)
                            } else {
                                String::new()
                            },
                            r.seconds
                        )
                    })
                };
                let what = match args.store {
                    StoreKind::Redis => {
                        "Redis `INFO commandstats` calls (commands, also those a script runs; without `info`)"
                    }
                    _ => {
                        "PostgreSQL `pg_stat_statements` calls of the database (0 without the extension) and `pg_stat_database.xact_commit`"
                    }
                };
                let _ = writeln!(
                    out,
                    "store calls ({what}; server-wide, so other clients count: the baseline is the \
                     same server in the {BASELINE_SECONDS} s before the nodes started):"
                );
                let _ = writeln!(out, "    baseline: {}", rate(c.baseline));
                let per_slot = match (c.running, c.baseline) {
                    (Some(r), Some(b)) if needed > 0.0 => format!(
                        " = {:.2} calls per due claim above the baseline",
                        (r.calls_per_s - b.calls_per_s) / needed
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(out, "    with the nodes: {}{per_slot}", rate(c.running));
                let _ = writeln!(
                    out,
                    "    idle seconds (no slot due and no run started in the reading's 5 s nor 5 s \
                     before): {}{}",
                    if c.idle.is_some() {
                        rate(c.idle)
                    } else {
                        "none in this workload (slots are due every second)".to_owned()
                    },
                    if c.idle_by_command.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; by command: {}",
                            c.idle_by_command
                                .iter()
                                .take(8)
                                .map(|(k, v)| format!("{k} {v}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                );
            }
            None if args.store == StoreKind::Sqlite => {
                let _ = writeln!(
                    out,
                    "store calls: not counted on SQLite (no server: the store runs inside the \
                     nodes, and the file shows no call count); the nodes' CPU in idle seconds \
                     stands in for it below"
                );
            }
            None => {
                let _ = writeln!(out, "store calls: not read for {}", args.store.name());
            }
        }
        if let Some(w) = &self.writes {
            out.push_str(&writes_text(w));
        }
        let _ = writeln!(
            out,
            "node CPU in idle seconds (no slot due and no run started in the reading's second nor \
             5 s before): {}",
            self.idle_cores.map_or(
                "none in this workload (slots are due every second)".to_owned(),
                |(c, s)| format!("{:.1} % of a core per node over {s:.0} s", c * 100.0)
            )
        );
        let _ = writeln!(
            out,
            "\nslots judged: every slot of every job from the first whole second 1 s after all \
             nodes were ready to the last whole second 2 s before the stop ({} s); started {} \
             ({} late), takeovers (attempt >= 2) {}, starts outside the window {}",
            self.window.seconds(),
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
            let _ = writeln!(
                out,
                "{}: {} starts in the window, CPU {:.0} %, RSS {:.1} MiB with no job, +{:.1} MiB registered, \
                 +{:.1} MiB started, {:.1} MiB at the end{}",
                n.name,
                grouped(starts),
                n.cores * 100.0,
                n.rss_base as f64 / 1024.0,
                (n.rss_registered as f64 - n.rss_base as f64) / 1024.0,
                (n.rss_ready as f64 - n.rss_base as f64) / 1024.0,
                n.rss_end() as f64 / 1024.0,
                match n.off_grid {
                    Some(0) | None => String::new(),
                    Some(k) => format!(
                        "; {k} JOBS HAD THEIR NEXT SLOT OFF THE JUDGED GRID (the figures are wrong)"
                    ),
                }
            );
            let _ = writeln!(out, "    {}", n.counts);
            let _ = writeln!(out, "    {}", n.answers);
            for e in &n.errors {
                let _ = writeln!(out, "    {e}");
            }
            if n.bad_lines > 0 {
                let _ = writeln!(out, "    {} log lines were not starts", n.bad_lines);
            }
        }
        out
    }

    fn minutes_json(&self) -> serde_json::Value {
        let (args, session) = (self.args, self.session);
        let node = |n: &super::session::NodeResult, r: &Option<NodeStretch>| {
            json!({
                "name": n.name,
                "rss_end_kb": r.map(|r| r.rss_end_kb),
                "rss_max_kb": r.map(|r| r.rss_max_kb),
                "cores": r.map(|r| r.cores),
                "runs_in_flight_max": r.map(|r| r.held_max),
                "late": r.map(|r| r.late),
            })
        };
        serde_json::Value::Array(self.minutes.iter().map(|m| {
                let s = &m.slots;
                json!({
                    "minute": s.minute + 1,
                    "seconds": (s.to_ms - s.from_ms) / 1000 + 1,
                    "slots": s.slots,
                    "started": s.started,
                    "within_second": s.within_second,
                    "within_second_percent": s.within_percent(),
                    "missed": s.missed,
                    "jobs_started": s.jobs_started,
                    "duplicates": s.duplicates,
                    "lag_ms": s.lag_ms.map(|l| json!({"p50": l.p50, "p99": l.p99, "max": l.max})),
                    "kib_per_job": m.kib_per_job(session, args.jobs),
                    "kib_per_run_in_flight": Some(m.kib_per_run(session, args.jobs)).filter(|k| k.is_finite()),
                    "load": m.load,
                    "nodes": session.nodes.iter().zip(&m.nodes).map(|(n, r)| node(n, r)).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>())
    }

    fn json(&self) -> serde_json::Value {
        let (args, session, stats) = (self.args, self.session, &self.stats);
        let needed = self.needed_per_s();
        let rate = |r: Option<CallRate>| {
            r.map(|r| {
                json!({
                    "seconds": r.seconds, "calls_per_s": r.calls_per_s,
                    "commits_per_s": r.commits_per_s
                })
            })
        };
        let ceiling = self.ceiling.map(|c| {
            json!({
                "work": args.store.ceiling_name(),
                "batches_per_s": c.batches_per_s,
                "rows_per_s": c.rows_per_s,
                "callers": c.callers,
                "seconds": c.seconds,
                "claims_needed_per_s": needed,
                "needed_share": needed / c.rows_per_s,
            })
        });
        let store_calls = self.calls.as_ref().map(|c| {
            json!({
                "baseline": rate(c.baseline),
                "with_nodes": rate(c.running),
                "idle": rate(c.idle),
                "idle_by_command": c.idle_by_command,
            })
        });
        let instances_detail = session
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "name": n.name,
                    "cores": n.cores,
                    "register_ms": n.register_ms,
                    "start_ms": n.start_ms,
                    "rss_base_kb": n.rss_base,
                    "rss_registered_kb": n.rss_registered,
                    "rss_start_kb": n.rss_ready,
                    "rss_series_kb": n.rss_series,
                    "rss_per_job_start_kb": per_job(n.rss_ready, n.rss_base, args.jobs),
                    "rss_per_job_end_kb": per_job(n.rss_end(), n.rss_base, args.jobs),
                    "off_grid": n.off_grid,
                    "counts": n.counts,
                    "answers": n.answers,
                    "errors": n.errors,
                })
            })
            .collect::<Vec<_>>();
        json!({
            "bench": "scale",
            "store": args.store.name(),
            "workload": args.workload.name(),
            "cron": (args.workload == Workload::TenantsCron).then_some(&args.cron),
            "jobs": args.jobs,
            "instances": args.instances,
            "seconds": args.seconds,
            "history_size": args.history(),
            "pruning_point_s": args.pruning_point_s(),
            "machine": node::machine(),
            "load_before": self.load_before,
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
            "ceiling": ceiling,
            "server_settings": self.server,
            "slot_floor_per_s": self.slot_floor.map(|f| f.slots_per_s),
            "store_path": self.store_path.map(|(alone, racing)| json!({
                "own_jobs_won_per_s": alone.won_per_s,
                "racing_won_per_s": racing.won_per_s,
                "racing_taken_per_s": racing.taken_per_s,
                "seconds": alone.seconds,
            })),
            "paced_floor": self.paced_floor.as_ref().map(|p| json!({
                "callers": p.callers,
                "machine_busy": p.machine_busy,
                "minutes": p.minutes.iter().map(|m| json!({
                    "slots": m.slots,
                    "in_second": m.in_second,
                    "skipped": m.skipped,
                    "in_second_percent": m.percent(),
                })).collect::<Vec<_>>(),
            })),
            "kib_per_registered_job": mean(session.nodes.iter().map(|n| {
                (n.rss_registered as f64 - n.rss_base as f64) / f64::from(args.jobs)
            })),
            "minutes": self.minutes_json(),
            "slow": self.slowed.as_ref().map(|s| s.json()),
            "hold": self.held.as_ref().map(|(hold, held)| hold::json(*hold, held)),
            "server_writes": self.writes.as_ref().map(writes_json),
            "store_calls": store_calls,
            "node_cores_idle": self.idle_cores.map(|(c, _)| c),
            "instances_detail": instances_detail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_paced_floor_is_postgres_every1s_only_and_not_with_no_floor() {
        let a = parse_args(&args(&["--store", "postgres", "--paced-floor"])).unwrap();
        assert!(a.paced_floor && a.floor);
        for other in [
            &["--store", "redis", "--paced-floor"][..],
            &[
                "--store",
                "postgres",
                "--workload",
                "tenants",
                "--paced-floor",
            ],
        ] {
            let e = parse_args(&args(other)).unwrap_err().to_string();
            assert!(e.contains("--paced-floor measures"), "{other:?}: {e}");
        }
        let e = parse_args(&args(&[
            "--store",
            "postgres",
            "--paced-floor",
            "--no-floor",
        ]));
        assert!(e.is_err(), "--paced-floor with --no-floor");
    }

    #[test]
    fn the_store_path_is_postgres_every1s_only_beside_the_plain_floor() {
        let a = parse_args(&args(&["--store", "postgres", "--store-path"])).unwrap();
        assert!(a.store_path && a.floor && !a.paced_floor);
        assert!(
            !parse_args(&args(&["--store", "postgres"]))
                .unwrap()
                .store_path
        );
        let e = parse_args(&args(&["--store", "sqlite", "--store-path"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--store-path measures"), "{e}");
        for other in [&["--no-floor"][..], &["--paced-floor"][..]] {
            let mut a = vec!["--store", "postgres", "--store-path"];
            a.extend_from_slice(other);
            assert!(parse_args(&args(&a)).is_err(), "{other:?}");
        }
    }

    #[test]
    fn scale_options_parse_with_defaults() {
        let a = parse_args(&args(&["--store", "redis"])).unwrap();
        assert_eq!(
            a,
            ScaleArgs {
                store: StoreKind::Redis,
                workload: Workload::EverySecond,
                jobs: 1_000,
                instances: 3,
                // Past the pruning point (100 s) by two minutes, in whole minutes.
                seconds: 240,
                history_size: None,
                cron: DEFAULT_CRON.to_owned(),
                cron_period_ms: 300_000,
                ceiling_seconds: 5,
                slow: None,
                hold: None,
                floor: true,
                paced_floor: false,
                store_path: false,
                json: false,
                keep: false
            }
        );
        assert_eq!(a.pruning_point_s(), 100);
        assert!(a.node_args().iter().all(|a| a != "--history-size"));
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
            "--no-floor",
        ]))
        .unwrap();
        assert_eq!(
            (a.store, a.jobs, a.instances, a.seconds, a.json, a.floor),
            (StoreKind::Postgres, 10_000, 1, 30, true, false)
        );
    }

    #[test]
    fn workloads_bring_their_defaults_and_history_size_moves_the_pruning_point() {
        let a = parse_args(&args(&["--store", "sqlite", "--history-size", "20"])).unwrap();
        assert_eq!(
            (a.history_size, a.seconds, a.pruning_point_s()),
            (Some(20), 180, 20)
        );
        assert_eq!(
            a.node_args(),
            args(&["--workload", "every1s", "--history-size", "20"])
        );
        let t = parse_args(&args(&["--store", "redis", "--workload", "tenants"])).unwrap();
        assert_eq!(
            (t.jobs, t.instances, t.seconds, t.pruning_point_s()),
            (100_000, 5, 300, 6_000)
        );
        assert_eq!(
            t.grid(),
            Grid {
                jobs: 100_000,
                period_ms: 60_000,
                spread: true
            }
        );
        let c = parse_args(&args(&[
            "--store",
            "redis",
            "--workload",
            "tenants-cron",
            "--jobs",
            "10000",
        ]))
        .unwrap();
        assert_eq!((c.jobs, c.instances, c.seconds), (10_000, 5, 660));
        assert_eq!(
            c.grid(),
            Grid {
                jobs: 10_000,
                period_ms: 300_000,
                spread: false
            }
        );
        assert_eq!(
            c.node_args(),
            args(&[
                "--workload",
                "tenants-cron",
                "--cron",
                "*/5 * * * *",
                "--grid-ms",
                "300000"
            ])
        );
        let m = parse_args(&args(&[
            "--store",
            "redis",
            "--workload",
            "tenants-cron",
            "--cron",
            "* * * * *",
        ]))
        .unwrap();
        assert_eq!(
            (m.cron_period_ms, m.seconds, m.period_ms()),
            (60_000, 180, 60_000)
        );
    }

    #[test]
    fn slow_options_reach_the_run() {
        let a = parse_args(&args(&[
            "--store",
            "sqlite",
            "--jobs",
            "2000",
            "--seconds",
            "300",
            "--slow",
            "100",
            "--slow-for",
            "90",
        ]))
        .unwrap();
        assert_eq!(
            a.slow,
            Some(Slow {
                factor: 100,
                from_s: 60,
                for_s: 90
            })
        );
        // The window goes to the nodes through the session, not the workload's arguments.
        assert!(a.node_args().iter().all(|a| !a.starts_with("--slow")));
    }

    #[test]
    fn hold_options_reach_the_run_and_respect_the_period() {
        let a = parse_args(&args(&[
            "--store",
            "redis",
            "--seconds",
            "300",
            "--hold-ms",
            "500",
        ]))
        .unwrap();
        assert_eq!(
            a.hold,
            Some(Hold {
                ms: 500,
                from_s: 150
            })
        );
        assert!(a.node_args().iter().all(|a| !a.starts_with("--hold")));
        // Every second: a hold of a second or more would skip every next slot.
        assert!(parse_args(&args(&["--store", "redis", "--hold-ms", "1000"])).is_err());
        // Every minute: it may.
        let a = parse_args(&args(&[
            "--store",
            "redis",
            "--workload",
            "tenants",
            "--hold-ms",
            "5000",
        ]))
        .unwrap();
        assert_eq!(a.hold.map(|h| h.ms), Some(5000));
        assert!(parse_args(&args(&["--store", "redis", "--hold-from", "100"])).is_err());
    }

    #[test]
    fn cron_periods_are_those_every_zone_shares() {
        assert_eq!(cron_period_ms("*/5 * * * *").unwrap(), 300_000);
        assert_eq!(cron_period_ms("* * * * *").unwrap(), 60_000);
        assert_eq!(cron_period_ms("*/15  * * * *").unwrap(), 900_000);
        // :45 zones (Kathmandu) are off a 10-minute grid; hours are not minutes.
        for bad in [
            "*/10 * * * *",
            "0 * * * *",
            "*/5 * * *",
            "*/x * * * *",
            "*/5 3 * * *",
        ] {
            assert!(cron_period_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reading_is_idle_only_with_no_slot_due_and_no_run_started() {
        // Cron */5: marks at 300 s and 600 s; the window from 12 s to 898 s.
        let grid = Grid {
            jobs: 10,
            period_ms: 300_000,
            spread: false,
        };
        let window = Window::on_grid(grid, 10_300, 900_700);
        let start = |slot_ms: i64, at_ms: i64| Start {
            job: 1,
            slot_ms,
            start_us: at_ms * 1000,
            attempt: 1,
            instance: "n1".into(),
        };
        // The start's catch-up of the mark before the window ran until 19 s; the mark at
        // 300 s took until 307 s.
        let starts = vec![start(0, 15_000), start(0, 19_000), start(300_000, 307_000)];
        let quiet = Quiet::of(window, &starts);
        // The grid alone calls 20-25 s idle; the catch-up's last start says it is not.
        assert!(grid.idle_between(15_000, 25_000));
        assert!(!quiet.idle(20_000, 25_000));
        assert!(quiet.idle(25_000, 30_000));
        // After a mark: not idle while its runs start, nor 5 s after the last of them.
        assert!(!quiet.idle(305_000, 310_000));
        assert!(!quiet.idle(310_000, 315_000));
        assert!(quiet.idle(315_000, 320_000));
        // Outside the window: never.
        assert!(!quiet.idle(5_000, 11_000));
    }

    #[test]
    fn idle_calls_subtract_command_counts() {
        assert_eq!(
            detail_delta("get:5,evalsha:10", "get:7,evalsha:10,ping:1"),
            vec![("get".to_owned(), 2), ("ping".to_owned(), 1)]
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
            (
                vec!["--store", "redis", "--seconds", "86401"],
                "longer than a day",
            ),
            (
                vec!["--store", "redis", "--seconds", "18446744073709551615"],
                "longer than a day",
            ),
            (
                vec![
                    "--store",
                    "redis",
                    "--ceiling-seconds",
                    "18446744073709551615",
                ],
                "--ceiling-seconds",
            ),
            (vec!["--store", "redis", "--fast"], "--fast"),
            (vec!["--store", "redis", "--slow", "1"], "--slow <FACTOR>"),
            (
                vec!["--store", "redis", "--slow", "10x"],
                "'10x' for '--slow",
            ),
            (
                vec!["--store", "redis", "--slow-from", "60"],
                "--slow-from 60 applies with --slow FACTOR only",
            ),
            (
                vec!["--store", "redis", "--slow", "10", "--seconds", "200"],
                "raise --seconds to 210",
            ),
            (vec!["--store", "redis", "--workload", "daily"], "daily"),
            (
                vec!["--store", "redis", "--history-size", "0"],
                "--history-size",
            ),
            (
                vec!["--store", "redis", "--cron", "* * * * *"],
                "--workload tenants-cron only",
            ),
            (
                vec![
                    "--store",
                    "redis",
                    "--workload",
                    "tenants-cron",
                    "--cron",
                    "0 3 * * *",
                ],
                "0 3 * * *",
            ),
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
    fn the_server_line_reads_as_its_settings() {
        let out = "CEILING batches=5 rows_per_batch=256 seconds=1 callers=3\n\
                   SERVER autovacuum=off jit=on shared_buffers=128MB\n";
        assert_eq!(
            parse_server(out).as_deref(),
            Some("autovacuum=off jit=on shared_buffers=128MB")
        );
        assert_eq!(parse_server("CEILING batches=5\nSERVERS x=1\n"), None);
    }

    #[test]
    fn the_paced_floor_lines_read_as_minutes() {
        let out = "PACED_FLOOR minute=1 slots=600000 in_second=599000 late=0\n\
                   PACED_FLOOR minute=2 slots=600000 in_second=300000 late=256000\n\
                   PACED_FLOOR_END seconds=120 callers=3\n";
        let p = parse_paced_floor(out).unwrap();
        assert_eq!(p.callers, 3);
        assert_eq!(
            p.minutes,
            vec![
                PacedMinute {
                    slots: 600_000,
                    in_second: 599_000,
                    skipped: 0
                },
                PacedMinute {
                    slots: 600_000,
                    in_second: 300_000,
                    skipped: 256_000
                },
            ]
        );
        assert_eq!(p.minutes[1].percent(), 50.0);
        // Without the end line the floor did not finish.
        assert!(parse_paced_floor("PACED_FLOOR minute=1 slots=1 in_second=1 late=0\n").is_none());
        assert!(parse_paced_floor("PACED_FLOOR minute=1 slots=x in_second=1 late=0\nPACED_FLOOR_END seconds=1 callers=1\n").is_none());
    }

    #[test]
    fn the_slot_floor_line_reads_as_slots_per_second() {
        let f = parse_slot_floor("SLOT_FLOOR slots=54493 seconds=5.000 callers=3\n").unwrap();
        assert_eq!((f.slots_per_s.round(), f.callers), (10_899.0, 3));
        // No time measured, or another tag that begins alike: no figure.
        assert!(parse_slot_floor("SLOT_FLOOR slots=10 seconds=0 callers=3").is_none());
        assert!(parse_slot_floor("SLOT_FLOORS slots=10 seconds=1 callers=3").is_none());
        assert!(parse_ceiling("SLOT_FLOOR slots=10 seconds=1 callers=3").is_none());
    }

    #[test]
    fn the_store_path_line_reads_as_won_and_lost_per_second() {
        let p = parse_store_path(
            "fill ...\nSTORE_FLOOR slots=300000 taken=600000 overlap=0 late=0 seconds=30.000 \
             callers=3\n",
        )
        .unwrap();
        assert_eq!(
            (p.won_per_s, p.taken_per_s, p.seconds),
            (10_000.0, 20_000.0, 30.0)
        );
        assert!(parse_store_path("STORE_FLOOR slots=1 taken=0 seconds=0 callers=3").is_none());
        assert!(parse_store_path("STORE_FLOOR slots=1 seconds=1 callers=3").is_none());
        assert!(parse_store_path("SLOT_FLOOR slots=1 taken=0 seconds=1 callers=3").is_none());
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
