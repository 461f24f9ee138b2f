//! The worker process of `cargo xtask bench scale` and `cargo xtask bench precision`: **not an
//! example to learn from** (read `examples/quick-start.rs` for that). xtask builds it with
//! `cargo build --release --example bench-node --features all-stores` and talks to it through
//! its arguments, its stdout lines and the files it writes.
//!
//! ```text
//! bench-node run     --store SPEC --jobs N --id ID --log FILE [--workload every1s|tenants|tenants-cron]
//!                    [--history-size H] [--cron EXPR --grid-ms P]
//!                    [--slow-factor F --slow-from-ms A --slow-until-ms B]
//!                    [--hold-ms M --hold-from-ms T]
//! bench-node ceiling --store SPEC --callers K --seconds S
//! bench-node slot-floor --store SPEC --callers K --jobs N --history H --seconds S [--paced 1]
//!                    [--via store [--race 1]]
//! bench-node floor   --store SPEC --log FILE
//! bench-node clean   --store SPEC
//! bench-node counters --store SPEC [--every-ms 5000]
//! bench-node handover --store SPEC --id ID [--every-ms 5000] [--hold-ms 3000]
//! ```
//!
//! SPEC is `sqlite:<path>`, `redis:<url>#<key prefix>`, `postgres:<url>#<schema>` or
//! `libsql:<url>#<table prefix>`.
//!
//! The environment variable `ANARCHON_BENCH_STANDBY_MS`, when set, is every scheduler's
//! `standby_delay` in ms (`0`: every instance claims at the slot), so that one build is
//! measured both ways; xtask passes its environment on to the nodes. Unset: the default.
//!
//! - `run`: one leased scheduler (jitter 0) with N distinct jobs of the workload:
//!   `every1s` (default) N `every 1s` jobs `j00000..`; `tenants` N `every 1m` jobs `t000000..`
//!   with offsets `j * 60 s / N` spread over the minute; `tenants-cron` N cron jobs
//!   `c000000..` (`--cron`, default `*/5 * * * *`) cycling through 16 IANA timezones
//!   (`--grid-ms`: the UTC grid of its slots, checked in `GRID`).
//!   `--history-size` sets every job's `history_size` (else the default). The store is
//!   wrapped in the bench's slowed store (`bench-node/slow.rs`): with `--slow-factor F`
//!   every store call made while the host clock reads from epoch ms A until B takes its
//!   turn at one lock of the node and answers F times slower; otherwise calls pass
//!   through. With `--hold-ms M`, each handler that starts at or after epoch ms T
//!   (`--hold-from-ms`) holds its run M ms (returning early when its signal is cancelled),
//!   so the nodes first run their jobs without holding and then with about jobs x M / 1 s
//!   runs in flight: the memory per run in flight reads above the same jobs running.
//!   Each handler start
//!   appends `<job> <slot ms> <start µs> <attempt> <id>` to FILE through a fixed 256 KiB
//!   buffer touched before `BASE` (flushed after SIGTERM/SIGINT); the event buffer is a
//!   fixed 4096 (the counts may lag at 10,000 jobs: `lagged=`). Prints `BASE rss_kb=` (store
//!   connected, scheduler built, log buffer touched, no job yet), `REGISTERED rss_kb= ms=`
//!   (jobs registered, not started; registration time), `READY pid= t= rss_kb= start_ms=`
//!   (`start()` time), then every second `SAMPLE t= rss_kb= ticks= held= late= calls=
//!   watched=` (its own VmRSS, utime + stime, the most runs held under a lease at any 10 ms
//!   reading of the second, slots reported late, the most store calls in flight at once in
//!   the second: made and not yet answered or given up, and the runs it backs up now,
//!   `health().runs_watched`), and after the stop
//!   `GRID jobs= off_grid=` (jobs whose next slot is not on the grid the judge assumes),
//!   `COUNTS ...` (events by kind, skips by reason, store errors by operation, lagged events,
//!   `health().slots_late`), `STORE_ANSWERS won= taken= overlap= late= failed=` (the
//!   store's answers to the claims the node sent: `late` counts those the store judged past
//!   their last moment, not those the scheduler shed before asking; `failed` the claims of
//!   calls that failed; a call the scheduler gave up on and dropped counts in none) and
//!   `EXIT`.
//! - `ceiling`: the store's own ceiling for batched claims without the scheduler: K callers,
//!   each repeating one round trip that writes 256 new keys/rows (Redis: a pipeline of 256
//!   `SET NX`; PostgreSQL: one `INSERT .. SELECT unnest(..) ON CONFLICT DO NOTHING`,
//!   committed; SQLite: one `BEGIN IMMEDIATE` transaction of 256 `INSERT OR IGNORE`). Prints
//!   `CEILING batches= rows_per_batch=256 seconds= callers=`, then on PostgreSQL
//!   `SERVER name=value ...` (the server settings a loaded server depends on).
//! - `slot-floor` (PostgreSQL): the physical floor of a won slot on the store's own tables
//!   and indexes (a second table set, `floor`, in the run's schema), without the scheduler,
//!   competing claims or job locks: K callers, each owning `--jobs / K` jobs whose histories
//!   start full (`--history` runs each), repeating two committed set-based statements per 256
//!   jobs and slot: the claim (the run row, which holds its attempt's history, and the fence)
//!   and the finish (the run ended, the run `--history` slots older pruned). Prints
//!   `SLOT_FLOOR slots= seconds= callers=`. With `--paced 1` the same statements run at the
//!   run's own rate instead, each job once a second for `--seconds`, and it prints
//!   `PACED_FLOOR minute= slots= in_second= late=` per minute and `PACED_FLOOR_END`. With
//!   `--via store` the same jobs and histories are claimed and finished through the store's
//!   own `claim_many` / `finish_many` instead (job locks, the claim's checks, pruning), each
//!   caller its own jobs, or with `--race 1` every caller every job; it prints
//!   `STORE_FLOOR slots= taken= overlap= late= seconds= callers=`.
//! - `floor`: until SIGTERM, the bare one-row operation (Redis `PING`; PostgreSQL and SQLite
//!   a one-row `UPDATE`, committed) about 20 times a second, away from whole seconds so it
//!   does not meet the scheduler's claims; FILE gets one duration in µs per line.
//! - `handover` (`cargo xtask bench handover`): one leased scheduler with one job `h` every
//!   `--every-ms` (jitter 0) whose handler holds for `--hold-ms` unless its signal is
//!   cancelled. Prints, each with this process's wall clock in µs: `READY pid= us=`,
//!   `RUN us= slot= attempt= reason=` when a handler starts, `CANCELLED us= slot= attempt=`
//!   when a handler sees its signal cancelled (it then returns the cancellation, so a
//!   stopping owner hands the run over), `SIGNAL us=` when SIGTERM/SIGINT arrives,
//!   `EVENT us= name= slot= attempt= [cause=|op=]` for the scheduler's start, interrupted
//!   (`cause=handed-over`: the release was answered), lost, fenced and error events,
//!   and `EXIT us=` after the stop.
//! - `counters`: every `--every-ms` until SIGTERM, `COUNTERS t= calls= commits= detail=`:
//!   the store server's calls so far (Redis: `INFO commandstats` summed, without `info`,
//!   detail by command; PostgreSQL: `pg_stat_statements` calls of the database if the
//!   extension is there, `pg_stat_database.xact_commit`); server-wide, so other clients count.
//!   PostgreSQL adds `wal_bytes= wal_records= wal_fpi=` (`pg_stat_wal`, server-wide, 14 and
//!   later) and `history_upd= history_hot= runs_upd= runs_hot=` (the run's schema's tables in
//!   `pg_stat_user_tables`: updates, and those written as heap-only tuples).
//! - `clean`: deletes what the run left (Redis keys under the prefix, the PostgreSQL schema;
//!   the SQLite file is removed by xtask).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::{Event, Leased, Scheduler, SchedulerBuilder, SkipReason};
use anyhow::{Context, Result, bail};

#[path = "bench-node/slow.rs"]
mod slow;
use slow::{CallsInFlight, SlowStore, Slowdown};

const BATCH: usize = 256;

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// VmRSS of this process in KiB (0 where /proc is missing).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The store of a run: kind, target (path or URL) and namespace (prefix, schema, table).
struct Spec {
    kind: String,
    target: String,
    namespace: String,
}

impl Spec {
    fn parse(text: &str) -> Result<Spec> {
        let (kind, rest) = text
            .split_once(':')
            .with_context(|| format!("store spec {text:?}: expected <kind>:<target>"))?;
        let (target, namespace) = match kind {
            "sqlite" => (rest.to_owned(), String::new()),
            "redis" | "postgres" | "libsql" => {
                let (t, n) = rest
                    .rsplit_once('#')
                    .with_context(|| format!("store spec {kind}: expected <url>#<namespace>"))?;
                (t.to_owned(), n.to_owned())
            }
            other => bail!("store kind {other:?}: expected sqlite, redis, postgres or libsql"),
        };
        Ok(Spec {
            kind: kind.to_owned(),
            target,
            namespace,
        })
    }

    async fn builder(&self) -> Result<SchedulerBuilder<Leased>> {
        self.slowed_builder(Slowdown::NONE, Arc::default()).await
    }

    /// The scheduler on this store wrapped in a [`SlowStore`]: slowed by `slowdown`, its
    /// calls in flight counted in `calls`.
    async fn slowed_builder(
        &self,
        slowdown: Slowdown,
        calls: Arc<CallsInFlight>,
    ) -> Result<SchedulerBuilder<Leased>> {
        use anarchon::any::{self, AnyOptions};
        let options = match self.kind.as_str() {
            "sqlite" => AnyOptions::default(),
            "redis" => AnyOptions::default().prefix(&self.namespace),
            "postgres" => AnyOptions::default().schema(&self.namespace),
            "libsql" => AnyOptions::default().table(&self.namespace),
            other => bail!("store kind {other:?} has no scheduler here"),
        };
        let url = match self.kind.as_str() {
            "sqlite" => format!("sqlite:{}", self.target),
            _ => self.target.clone(),
        };
        let store = any::open_with(&url, options).await?.into_lease()?;
        let mut builder =
            Scheduler::leased_shared(Arc::new(SlowStore::new(store, slowdown, calls)));
        if let Ok(ms) = std::env::var("ANARCHON_BENCH_STANDBY_MS") {
            builder = builder.standby_delay(Duration::from_millis(ms.parse()?));
        }
        Ok(builder)
    }
}

/// `--name value` pairs after the mode.
struct Args(Vec<(String, String)>);

impl Args {
    fn parse(args: &[String]) -> Result<Args> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(name) = it.next() {
            let value = it.next().with_context(|| format!("{name} needs a value"))?;
            pairs.push((name.trim_start_matches("--").to_owned(), value.clone()));
        }
        Ok(Args(pairs))
    }
    fn get(&self, name: &str) -> Result<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .with_context(|| format!("--{name} is missing"))
    }
    /// `--slow-factor F --slow-from-ms A --slow-until-ms B`, all three or none.
    fn slowdown(&self) -> Result<Slowdown> {
        if self.get("slow-factor").is_err() {
            return Ok(Slowdown::NONE);
        }
        let factor = u32::try_from(self.num("slow-factor")?)
            .ok()
            .filter(|f| *f >= 1)
            .context("--slow-factor: expected a whole number from 1")?;
        let (from_ms, until_ms) = (self.num("slow-from-ms")?, self.num("slow-until-ms")?);
        if until_ms <= from_ms {
            bail!("--slow-until-ms {until_ms} is not after --slow-from-ms {from_ms}");
        }
        Ok(Slowdown {
            factor,
            from_ms: from_ms as i64,
            until_ms: until_ms as i64,
        })
    }
    /// `--hold-ms M --hold-from-ms T`: (M, T), or no hold.
    fn hold(&self) -> Result<Option<(Duration, i64)>> {
        if self.get("hold-ms").is_err() {
            return Ok(None);
        }
        let hold = Duration::from_millis(self.num("hold-ms")?);
        let from_ms = i64::try_from(self.num("hold-from-ms")?)
            .context("--hold-from-ms: expected epoch milliseconds")?;
        Ok(Some((hold, from_ms)))
    }
    fn num(&self, name: &str) -> Result<u64> {
        let v = self.get(name)?;
        v.parse()
            .with_context(|| format!("--{name} {v}: expected a number"))
    }
}

/// Resolves on SIGTERM or SIGINT; registered at once so an early signal is not lost.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[derive(Default)]
struct Counts {
    start: AtomicU64,
    success: AtomicU64,
    failure: AtomicU64,
    interrupted: AtomicU64,
    skip_taken: AtomicU64,
    skip_late: AtomicU64,
    skip_overlap: AtomicU64,
    skip_unknown: AtomicU64,
    lost: AtomicU64,
    fenced: AtomicU64,
    stalled: AtomicU64,
    lagged: AtomicU64,
    errors: Mutex<Vec<(&'static str, u64, String)>>,
}

impl Counts {
    fn add(&self, event: &Event) {
        let counter = match event {
            Event::Start(_) => &self.start,
            Event::Success { .. } => &self.success,
            Event::Failure { .. } => &self.failure,
            Event::Interrupted { .. } => &self.interrupted,
            Event::Skip { reason, .. } => match reason {
                SkipReason::Taken => &self.skip_taken,
                SkipReason::Late => &self.skip_late,
                SkipReason::Overlap => &self.skip_overlap,
                SkipReason::Unknown => &self.skip_unknown,
            },
            Event::Lost(_) => &self.lost,
            Event::Fenced(_) => &self.fenced,
            Event::Stalled { .. } => &self.stalled,
            Event::Error {
                operation, message, ..
            } => {
                let mut errors = self.errors.lock().expect("counts");
                let operation = operation.as_str();
                match errors.iter_mut().find(|(op, _, _)| *op == operation) {
                    Some(entry) => entry.1 += 1,
                    None => errors.push((operation, 1, message.clone())),
                }
                return;
            }
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `COUNTS start=.. ... errors=<n> error_ops=claim:3,finish:1`, then one
    /// `FIRST_ERROR op=.. <message>` line per failing operation.
    fn print(&self, slots_late: u64) {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let errors = self.errors.lock().expect("counts");
        let total: u64 = errors.iter().map(|(_, n, _)| n).sum();
        let ops: Vec<String> = errors
            .iter()
            .map(|(op, n, _)| format!("{op}:{n}"))
            .collect();
        println!(
            "COUNTS start={} success={} failure={} interrupted={} skip_taken={} skip_late={} \
             skip_overlap={} skip_unknown={} lost={} fenced={} stalled={} lagged={} errors={} \
             error_ops={} slots_late={}",
            n(&self.start),
            n(&self.success),
            n(&self.failure),
            n(&self.interrupted),
            n(&self.skip_taken),
            n(&self.skip_late),
            n(&self.skip_overlap),
            n(&self.skip_unknown),
            n(&self.lost),
            n(&self.fenced),
            n(&self.stalled),
            n(&self.lagged),
            total,
            if ops.is_empty() {
                "-".to_owned()
            } else {
                ops.join(",")
            },
            slots_late
        );
        for (op, _, message) in errors.iter() {
            println!("FIRST_ERROR op={op} {}", message.replace('\n', " "));
        }
    }
}

/// The jobs of a `run` node: `--workload` and its options.
struct Workload {
    kind: String,
    jobs: usize,
    history_size: Option<u32>,
    cron: String,
    /// The cron jobs' slot period the judge assumes (`--grid-ms`, default 5 minutes).
    cron_grid_ms: i64,
}

/// IANA zones the `tenants-cron` jobs cycle through: whole, half and quarter hours either
/// side of UTC (every zone's offset is a multiple of 5 minutes, so `*/5` slots of all of
/// them fall on the same UTC 5-minute marks, which the judge checks as a grid).
const ZONES: [&str; 16] = [
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "America/St_Johns",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Tokyo",
    "Asia/Shanghai",
    "Australia/Adelaide",
    "Australia/Eucla",
    "Pacific/Chatham",
    "Pacific/Auckland",
    "Africa/Nairobi",
];

impl Workload {
    fn parse(args: &Args) -> Result<Workload> {
        let kind = args.get("workload").unwrap_or("every1s").to_owned();
        if !matches!(kind.as_str(), "every1s" | "tenants" | "tenants-cron") {
            bail!("--workload {kind}: expected every1s, tenants or tenants-cron");
        }
        let history_size = match args.get("history-size") {
            Ok(_) => Some(u32::try_from(args.num("history-size")?)?),
            Err(_) => None,
        };
        Ok(Workload {
            kind,
            jobs: args.num("jobs")? as usize,
            history_size,
            cron: args.get("cron").unwrap_or("*/5 * * * *").to_owned(),
            cron_grid_ms: args.num("grid-ms").unwrap_or(300_000).max(1) as i64,
        })
    }

    /// The grid job `j`'s slots lie on (period, offset in ms), as the judge assumes it.
    fn grid(&self, j: usize) -> (i64, i64) {
        match self.kind.as_str() {
            "every1s" => (1000, 0),
            "tenants" => (60_000, j as i64 * 60_000 / self.jobs.max(1) as i64),
            _ => (self.cron_grid_ms, 0),
        }
    }

    fn name(&self, j: usize) -> String {
        match self.kind.as_str() {
            "every1s" => format!("j{j:05}"),
            "tenants" => format!("t{j:06}"),
            _ => format!("c{j:06}"),
        }
    }

    /// Registers job `j` with `handler`.
    fn register<F, Fut>(&self, scheduler: &Scheduler, j: usize, handler: F) -> Result<()>
    where
        F: Fn(anarchon::JobContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), anarchon::HandlerError>>
            + Send
            + 'static,
    {
        let name = self.name(j);
        match self.kind.as_str() {
            "every1s" | "tenants" => {
                let (period, offset) = self.grid(j);
                let mut job = scheduler
                    .every(&name, Duration::from_millis(period as u64))
                    .offset(Duration::from_millis(offset as u64));
                if let Some(n) = self.history_size {
                    job = job.history_size(n);
                }
                job.handler(handler)?;
            }
            _ => {
                let mut job = scheduler
                    .cron(&name, &self.cron)
                    .timezone(ZONES[j % ZONES.len()]);
                if let Some(n) = self.history_size {
                    job = job.history_size(n);
                }
                job.handler(handler)?;
            }
        }
        Ok(())
    }
}

/// A start log written through one fixed buffer, touched before `BASE` so the pages it
/// fills are not counted in the node's RSS per job (the bench's own memory).
struct StartLog {
    buf: Vec<u8>,
    file: std::fs::File,
}

impl StartLog {
    const SIZE: usize = 256 * 1024;

    fn create(path: &str) -> Result<StartLog> {
        let file = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
        let mut buf = vec![1u8; StartLog::SIZE];
        buf.clear();
        Ok(StartLog { buf, file })
    }

    fn push(&mut self, line: &[u8]) {
        if self.buf.len() + line.len() > self.buf.capacity() {
            self.flush_buf();
        }
        self.buf.extend_from_slice(line);
    }

    /// A failed write shows as missing starts in the judge's counts.
    fn flush_buf(&mut self) {
        let _ = self.file.write_all(&self.buf);
        self.buf.clear();
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        self.file.flush()
    }
}

/// utime + stime of this process in clock ticks (0 where /proc is missing).
fn cpu_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

async fn run(args: &Args) -> Result<()> {
    let stop = stop_signal()?;
    let spec = Spec::parse(args.get("store")?)?;
    let workload = Workload::parse(args)?;
    let jobs = workload.jobs;
    let id = args.get("id")?.to_owned();
    let log_path = args.get("log")?.to_owned();
    // A fixed event buffer (the counts below may lag behind at 10,000 jobs; `lagged=` says
    // how many they missed): one of jobs * 8 filled 10 MiB at 10,000 jobs, the bench's own
    // memory inside the node's RSS per job.
    let slowdown = args.slowdown()?;
    let hold = args.hold()?;
    let calls = Arc::new(CallsInFlight::default());
    let scheduler = spec
        .slowed_builder(slowdown, calls.clone())
        .await?
        .instance_id(&id)
        .jitter(Duration::ZERO)
        .event_capacity(4096)
        .build()?;
    let counts = Arc::new(Counts::default());
    let mut events = scheduler.events();
    let counter = tokio::spawn({
        let counts = counts.clone();
        async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(event) => counts.add(&event),
                    Err(RecvError::Lagged(n)) => {
                        counts.lagged.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        }
    });
    // ~40 bytes a line, written through a fixed buffer as the run goes, so the node's memory
    // holds no log that grows with the run (RSS per job reads the scheduler alone).
    let log = Arc::new(Mutex::new(StartLog::create(&log_path)?));
    println!("BASE rss_kb={}", rss_kb());

    let node: Arc<str> = id.clone().into();
    let registering = Instant::now();
    for j in 0..jobs {
        let log = log.clone();
        let node = node.clone();
        workload.register(&scheduler, j, move |ctx| {
            let started = now_us();
            let line = format!("{j} {} {started} {} {node}\n", ctx.slot_ms(), ctx.attempt);
            log.lock().expect("log buffer").push(line.as_bytes());
            let hold = hold.and_then(|(hold, from_ms)| (started / 1000 >= from_ms).then_some(hold));
            async move {
                if let Some(hold) = hold {
                    tokio::select! {
                        _ = tokio::time::sleep(hold) => {}
                        _ = ctx.signal.cancelled() => {}
                    }
                }
                Ok(())
            }
        })?;
    }
    println!(
        "REGISTERED rss_kb={} ms={:.1}",
        rss_kb(),
        registering.elapsed().as_secs_f64() * 1000.0
    );
    let starting = Instant::now();
    scheduler.start().await?;
    let start_ms = starting.elapsed().as_secs_f64() * 1000.0;
    println!(
        "READY pid={} t={} rss_kb={} start_ms={start_ms:.1}",
        std::process::id(),
        now_us() / 1000,
        rss_kb()
    );
    // The node's own readings once a second: RSS, CPU ticks, the most runs it held under a
    // lease (in flight) at any 10 ms reading of that second, slots it reported late. Runs
    // of handlers that return at once are held for tens of ms after their slot: a reading
    // once a second would mostly see none.
    let sampler = tokio::spawn({
        let scheduler = scheduler.clone();
        let calls = calls.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut next = Instant::now() + Duration::from_secs(1);
            let mut held = 0;
            loop {
                tick.tick().await;
                let health = scheduler.health();
                held = held.max(health.leases_held);
                if Instant::now() >= next {
                    next += Duration::from_secs(1);
                    say(format_args!(
                        "SAMPLE t={} rss_kb={} ticks={} held={held} late={} calls={} watched={}",
                        now_us() / 1000,
                        rss_kb(),
                        cpu_ticks(),
                        health.slots_late,
                        calls.take_peak(),
                        health.runs_watched
                    ));
                    held = 0;
                }
            }
        }
    });
    stop.await;
    sampler.abort();
    println!("STOPPING t={} rss_kb={}", now_us() / 1000, rss_kb());
    let late = scheduler.health().slots_late;
    // Every job's next slot lies on the grid the judge assumes.
    let off_grid = scheduler
        .jobs()
        .iter()
        .filter(|info| {
            let j = workload_index(info.name.as_str());
            let (period, offset) = workload.grid(j);
            info.next_run
                .is_some_and(|t| (t.timestamp_millis() - offset).rem_euclid(period) != 0)
        })
        .count();
    println!("GRID jobs={jobs} off_grid={off_grid}");
    let stopped = scheduler.stop(Duration::from_secs(10)).await;
    drop(scheduler);
    let _ = tokio::time::timeout(Duration::from_secs(2), counter).await;
    log.lock()
        .expect("log buffer")
        .finish()
        .with_context(|| format!("writing {log_path}"))?;
    counts.print(late);
    let [won, taken, overlap, store_late, failed] = calls.answers();
    println!(
        "STORE_ANSWERS won={won} taken={taken} overlap={overlap} late={store_late} \
         failed={failed}"
    );
    if let Err(e) = stopped {
        println!("STOP_ERROR {}", e.to_string().replace('\n', " "));
    }
    println!("EXIT t={}", now_us() / 1000);
    Ok(())
}

/// The index of a job from its name (`j00012`, `t000012`, `c000012`).
fn workload_index(name: &str) -> usize {
    name.get(1..).and_then(|n| n.parse().ok()).unwrap_or(0)
}

// ----- the store's own ceiling and floor, without the scheduler --------------------------

/// A bare client on the run's store, for the ceiling, the floor and the cleanup.
enum Raw {
    Redis(anarchon::redis::RedisStore, String),
    Postgres(anarchon::postgres::PostgresStore, String),
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
}

impl Raw {
    async fn open(spec: &Spec) -> Result<Raw> {
        Ok(match spec.kind.as_str() {
            "redis" => Raw::Redis(
                anarchon::redis::RedisStore::connect_with(
                    &spec.target,
                    anarchon::redis::RedisOptions::default().prefix(&spec.namespace),
                )
                .await?,
                spec.namespace.clone(),
            ),
            "postgres" => {
                let store = anarchon::postgres::PostgresStore::connect_with(
                    &spec.target,
                    anarchon::postgres::PostgresOptions::default()
                        .schema(&spec.namespace)
                        .pool_size(16),
                )
                .await?;
                Raw::Postgres(store, spec.namespace.clone())
            }
            "sqlite" => {
                let conn = rusqlite::Connection::open(&spec.target)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                // As the store opens its file: WAL, synchronous NORMAL.
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                Raw::Sqlite(Arc::new(Mutex::new(conn)))
            }
            other => bail!("no bare client for {other} (its ceiling is not measured)"),
        })
    }

    /// Creates the scratch tables in the run's namespace.
    async fn setup(&self) -> Result<()> {
        match self {
            Raw::Redis(..) => {}
            Raw::Postgres(store, schema) => {
                let client = store.pool().get().await?;
                client
                    .batch_execute(&format!(
                        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                         CREATE TABLE IF NOT EXISTS \"{schema}\".bench_ceiling
                           (job text NOT NULL, slot bigint NOT NULL, PRIMARY KEY (job, slot));
                         CREATE TABLE IF NOT EXISTS \"{schema}\".bench_floor
                           (id int PRIMARY KEY, n bigint NOT NULL);
                         INSERT INTO \"{schema}\".bench_floor VALUES (1, 0) ON CONFLICT DO NOTHING;"
                    ))
                    .await?;
            }
            Raw::Sqlite(conn) => {
                conn.lock().expect("sqlite").execute_batch(
                    "CREATE TABLE IF NOT EXISTS bench_ceiling
                       (job TEXT NOT NULL, slot INTEGER NOT NULL, PRIMARY KEY (job, slot));
                     CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
                     INSERT OR IGNORE INTO bench_floor VALUES (1, 0);",
                )?;
            }
        }
        Ok(())
    }

    /// The server settings that decide how a loaded PostgreSQL copes (`None` elsewhere):
    /// `name=value` pairs separated by spaces.
    async fn server_settings(&self) -> Result<Option<String>> {
        match self {
            Raw::Postgres(store, _) => {
                let client = store.pool().get().await?;
                let row = client
                    .query_one(
                        "SELECT string_agg(name || '=' || current_setting(name), ' ' \
                         ORDER BY name) FROM pg_settings WHERE name IN ('autovacuum', \
                         'shared_buffers', 'max_wal_size', 'jit', 'synchronous_commit')",
                        &[],
                    )
                    .await?;
                Ok(row.get(0))
            }
            _ => Ok(None),
        }
    }

    /// One batch: 256 new keys/rows for slot `slot` of caller `caller`, in one round trip.
    async fn batch(&self, caller: usize, slot: i64) -> Result<()> {
        match self {
            Raw::Redis(store, prefix) => {
                use anarchon::redis::fred::prelude::*;
                let pipeline = store.client().pipeline();
                for j in 0..BATCH {
                    let () = pipeline
                        .set(
                            format!("{prefix}ceiling:{caller}:{j}:{slot}"),
                            1,
                            Some(Expiration::EX(120)),
                            Some(SetOptions::NX),
                            false,
                        )
                        .await?;
                }
                let _: Vec<Value> = pipeline.all().await?;
            }
            Raw::Postgres(store, schema) => {
                let client = store.pool().get().await?;
                let statement = client
                    .prepare_cached(&format!(
                        "INSERT INTO \"{schema}\".bench_ceiling (job, slot)
                         SELECT j, $2 FROM unnest($1::text[]) AS j ON CONFLICT DO NOTHING"
                    ))
                    .await?;
                let jobs: Vec<String> = (0..BATCH).map(|j| format!("c{caller}j{j}")).collect();
                client.execute(&statement, &[&jobs, &slot]).await?;
            }
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || -> Result<()> {
                    let mut conn = conn.lock().expect("sqlite");
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    {
                        let mut insert = tx.prepare_cached(
                            "INSERT OR IGNORE INTO bench_ceiling (job, slot) VALUES (?1, ?2)",
                        )?;
                        for j in 0..BATCH {
                            insert.execute(rusqlite::params![format!("c{caller}j{j}"), slot])?;
                        }
                    }
                    tx.commit()?;
                    Ok(())
                })
                .await??;
            }
        }
        Ok(())
    }

    /// The bare one-row operation: PING, or a one-row UPDATE committed.
    async fn floor_op(&self) -> Result<()> {
        match self {
            Raw::Redis(store, _) => {
                use anarchon::redis::fred::prelude::*;
                let _: String = store.client().ping(None).await?;
            }
            Raw::Postgres(store, schema) => {
                let client = store.pool().get().await?;
                let statement = client
                    .prepare_cached(&format!(
                        "UPDATE \"{schema}\".bench_floor SET n = n + 1 WHERE id = 1"
                    ))
                    .await?;
                client.execute(&statement, &[]).await?;
            }
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || -> Result<()> {
                    let mut conn = conn.lock().expect("sqlite");
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    tx.execute("UPDATE bench_floor SET n = n + 1 WHERE id = 1", [])?;
                    tx.commit()?;
                    Ok(())
                })
                .await??;
            }
        }
        Ok(())
    }

    /// The store server's call counters: (calls, commits, detail). Redis: the sum of
    /// `INFO commandstats` calls (without this reader's own `info`), commits 0, detail the
    /// counts by command; PostgreSQL: `pg_stat_statements` calls of the database when the
    /// extension is there (else 0), `pg_stat_database.xact_commit`. Server-wide: other
    /// clients of the same server count too (the bench subtracts a baseline).
    /// The server's calls and commits so far, the calls by command, and (PostgreSQL) the
    /// fields of its writes: `wal_bytes= wal_records= wal_fpi=` (`pg_stat_wal`, server-wide,
    /// PostgreSQL 14 and later) and `history_upd= history_hot= runs_upd= runs_hot=` (the
    /// run's schema in `pg_stat_user_tables`), each left out when its view cannot be read.
    async fn counters(&self) -> Result<(u64, u64, String, String)> {
        match self {
            Raw::Redis(store, _) => {
                use anarchon::redis::fred::prelude::*;
                use anarchon::redis::fred::types::InfoKind;
                let text: String = store.client().info(Some(InfoKind::CommandStats)).await?;
                let mut total = 0;
                let mut detail = Vec::new();
                for line in text.lines() {
                    let Some((name, rest)) = line
                        .strip_prefix("cmdstat_")
                        .and_then(|l| l.split_once(':'))
                    else {
                        continue;
                    };
                    let calls: u64 = rest
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("calls="))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if name != "info" {
                        total += calls;
                        detail.push(format!("{name}:{calls}"));
                    }
                }
                Ok((total, 0, detail.join(","), String::new()))
            }
            Raw::Postgres(store, schema) => {
                let client = store.pool().get().await?;
                let row = client
                    .query_one(
                        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                        &[],
                    )
                    .await?;
                let commits: i64 = row.get(0);
                let calls = match client
                    .query_one(
                        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
                         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                        &[],
                    )
                    .await
                {
                    Ok(row) => row.get::<_, i64>(0) as u64,
                    Err(_) => 0,
                };
                let mut writes = String::new();
                if let Ok(row) = client
                    .query_one(
                        "SELECT wal_bytes::int8, wal_records, wal_fpi FROM pg_stat_wal",
                        &[],
                    )
                    .await
                {
                    let (bytes, records, fpi): (i64, i64, i64) =
                        (row.get(0), row.get(1), row.get(2));
                    writes.push_str(&format!(
                        " wal_bytes={bytes} wal_records={records} wal_fpi={fpi}"
                    ));
                }
                if let Ok(rows) = client
                    .query(
                        "SELECT relname::text, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
                         WHERE schemaname = $1",
                        &[schema],
                    )
                    .await
                {
                    for row in rows {
                        let (name, upd, hot): (String, i64, i64) =
                            (row.get(0), row.get(1), row.get(2));
                        let which = if name.ends_with("_attempts") {
                            "history"
                        } else if name == "anarchon_runs" {
                            "runs"
                        } else {
                            continue;
                        };
                        writes.push_str(&format!(" {which}_upd={upd} {which}_hot={hot}"));
                    }
                }
                Ok((calls, commits as u64, "-".to_owned(), writes))
            }
            Raw::Sqlite(_) => bail!("SQLite has no server whose calls could be counted"),
        }
    }

    async fn clean(&self) -> Result<()> {
        match self {
            Raw::Redis(store, prefix) => {
                use anarchon::redis::fred::prelude::*;
                // One SCAN step per call (a bounded piece of work each, unlike one KEYS over
                // a big keyspace, which outlived the client's timeout), until the cursor is 0.
                let script =
                    "local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 5000)
                    if #r[2] > 0 then redis.call('UNLINK', unpack(r[2])) end
                    return {r[1], #r[2]}";
                let (mut cursor, mut n) = ("0".to_owned(), 0i64);
                loop {
                    let (next, found): (String, i64) = store
                        .client()
                        .eval(
                            script,
                            Vec::<String>::new(),
                            vec![cursor.clone(), format!("{prefix}*")],
                        )
                        .await?;
                    n += found;
                    cursor = next;
                    if cursor == "0" {
                        break;
                    }
                }
                println!("CLEANED keys={n}");
            }
            Raw::Postgres(store, schema) => {
                let client = store.pool().get().await?;
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await?;
                println!("CLEANED schema={schema}");
            }
            Raw::Sqlite(_) => println!("CLEANED"),
        }
        Ok(())
    }
}

async fn ceiling(args: &Args) -> Result<()> {
    let spec = Spec::parse(args.get("store")?)?;
    let callers = args.num("callers")?.max(1) as usize;
    let seconds = args.num("seconds")?.max(1);
    let raw = Arc::new(Raw::open(&spec).await?);
    raw.setup().await?;
    // Warm-up: connections, prepared statements, the first pages.
    for c in 0..callers {
        raw.batch(c, -1).await?;
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let raw = raw.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                raw.batch(c, n as i64).await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut batches = 0;
    for task in tasks {
        batches += task.await??;
    }
    println!(
        "CEILING batches={batches} rows_per_batch={BATCH} seconds={:.3} callers={callers}",
        started.elapsed().as_secs_f64()
    );
    if let Some(settings) = raw.server_settings().await? {
        println!("SERVER {settings}");
    }
    Ok(())
}

/// `slot-floor --paced 1`: the floor's statements at the run's own rate for `seconds`: each
/// caller works through its jobs once a second, second k's at the k-th whole second after
/// the start, as the scheduler's slots fall due. A batch not begun by the end of its second
/// is skipped (nothing written: the store answers a claim past its deadline `late` in the
/// same way). Prints `PACED_FLOOR minute= slots= in_second= late=` per minute (slots whose
/// claim committed within their second; skipped) and `PACED_FLOOR_END seconds= callers=`.
async fn paced_floor(
    store: Arc<anarchon::postgres::PostgresStore>,
    names: &[Vec<String>],
    claim: &str,
    finish: &str,
    history: i64,
    seconds: u64,
    first: &[i64],
) -> Result<()> {
    /// Per minute: slots, slots claimed within their second, slots skipped.
    type Minutes = Vec<[u64; 3]>;
    let minutes = usize::try_from(seconds.div_ceil(60)).unwrap_or(usize::MAX);
    // The first second starts on a whole second of the host clock, at least one away.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let t0 = Instant::now() + Duration::from_millis((2_000 - now_ms % 1_000) as u64);
    let tasks: Vec<_> = names
        .iter()
        .zip(first)
        .map(|(mine, &first)| {
            let store = store.clone();
            let chunks: Vec<Vec<String>> = mine.chunks(BATCH).map(<[String]>::to_vec).collect();
            let (claim, finish) = (claim.to_owned(), finish.to_owned());
            tokio::spawn(async move {
                let client = store.pool().get().await?;
                let claim = client.prepare_cached(&claim).await?;
                let finish = client.prepare_cached(&finish).await?;
                let mut counts: Minutes = vec![[0; 3]; minutes];
                for k in 0..seconds {
                    let start = t0 + Duration::from_secs(k);
                    let end = start + Duration::from_secs(1);
                    tokio::time::sleep_until(start.into()).await;
                    let slot = (first + k as i64) * 1000;
                    let minute = &mut counts[(k / 60) as usize];
                    for chunk in &chunks {
                        minute[0] += chunk.len() as u64;
                        if Instant::now() >= end {
                            minute[2] += chunk.len() as u64;
                            continue;
                        }
                        let won = client.execute(&claim, &[chunk, &slot]).await?;
                        if Instant::now() < end {
                            minute[1] += won;
                        }
                        client
                            .execute(&finish, &[chunk, &slot, &(history * 1000)])
                            .await?;
                    }
                }
                anyhow::Ok(counts)
            })
        })
        .collect();
    let mut total: Minutes = vec![[0; 3]; minutes];
    for task in tasks {
        for (sum, counts) in total.iter_mut().zip(task.await??) {
            for (s, c) in sum.iter_mut().zip(counts) {
                *s += c;
            }
        }
    }
    for (m, [slots, in_second, late]) in total.iter().enumerate() {
        println!(
            "PACED_FLOOR minute={} slots={slots} in_second={in_second} late={late}",
            m + 1
        );
    }
    println!("PACED_FLOOR_END seconds={seconds} callers={}", names.len());
    Ok(())
}

/// The physical floor of a won slot on PostgreSQL (see the module docs, `slot-floor`).
async fn slot_floor(args: &Args) -> Result<()> {
    use anarchon::store::{Prepare, Store};
    let spec = Spec::parse(args.get("store")?)?;
    if spec.kind != "postgres" {
        bail!(
            "slot-floor is measured on PostgreSQL only, not {}",
            spec.kind
        );
    }
    let callers = args.num("callers")?.clamp(1, 64) as usize;
    let jobs = args.num("jobs")?.clamp(1, 1_000_000) as usize;
    let history = args.num("history")?.clamp(1, 10_000) as i64;
    // A day at most, as `cargo xtask bench scale` allows: the paced floor keeps a row of
    // counts per minute and slot numbers grow by the second.
    let seconds = args.num("seconds")?.clamp(1, 86_400);
    let per_caller = jobs.div_ceil(callers);
    let store = anarchon::postgres::PostgresStore::connect_with(
        &spec.target,
        anarchon::postgres::PostgresOptions::default()
            .schema(&spec.namespace)
            .table("floor")
            .pool_size(callers + 2),
    )
    .await?;
    let names: Vec<Vec<String>> = (0..callers)
        .map(|c| (0..per_caller).map(|j| format!("f{c}j{j}")).collect())
        .collect();
    let all: Vec<anarchon::JobName> = names
        .iter()
        .flatten()
        .map(|n| anarchon::JobName::new(n.clone()))
        .collect::<std::result::Result<_, _>>()?;
    store
        .prepare(&Prepare {
            jobs: all,
            instance_id: "floor".into(),
            call_timeout: Duration::from_secs(60),
        })
        .await?;
    let ns = &spec.namespace;
    let (runs, attempts, job_rows) = (
        format!("\"{ns}\".\"floor\""),
        format!("\"{ns}\".\"floor_attempts\""),
        format!("\"{ns}\".\"floor_jobs\""),
    );
    // Full histories: `history` finished runs per job, slots 0 .. history-1 (in seconds),
    // about 100,000 rows a statement: each must end within the store's statement timeout
    // (4,096 jobs a statement at a history of 1,000 were 4 million rows and timed out; on a
    // slower machine with autovacuum on, 400,000 rows timed out too).
    {
        let client = store.pool().get().await?;
        let per_statement = (100_000 / history as usize).max(1);
        for chunk in names
            .iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .chunks(per_statement)
        {
            let chunk = chunk.to_vec();
            client
                .execute(
                    &format!(
                        "INSERT INTO {runs} (job, slot, status, attempt, counted_starts, owner,
                                             expires_at, scheduled_at, started_at, instance_id,
                                             reason, fence, finished_at)
                         SELECT j, s * 1000, 'success', 1, 1, NULL, 0, s * 1000, s * 1000,
                                'floor', 'scheduled', s + 1, s * 1000 + 1
                         FROM unnest($1::text[]) AS j, generate_series(0::int8, $2::int8 - 1) AS s
                         ON CONFLICT DO NOTHING"
                    ),
                    &[&chunk, &history],
                )
                .await?;
            client
                .execute(
                    &format!("UPDATE {job_rows} SET fence = $2::int8 WHERE job = ANY($1::text[])"),
                    &[&chunk, &history],
                )
                .await?;
        }
        client
            .batch_execute(&format!(
                "ANALYZE {runs}; ANALYZE {attempts}; ANALYZE {job_rows};"
            ))
            .await?;
    }
    // The rows a won slot writes since the store's schema version 4: the run's row, which
    // holds its attempt's history, and the job's fence; no history row.
    let claim = format!(
        "WITH b AS (SELECT unnest($1::text[]) AS job),
         ins AS (
             INSERT INTO {runs} (job, slot, status, attempt, counted_starts, owner, expires_at,
                                 scheduled_at, started_at, instance_id, reason, fence)
             SELECT b.job, $2::int8, 'running', 1, 1, 'floor', $2::int8 + 30000, $2::int8,
                    $2::int8, 'floor', 'scheduled',
                    (SELECT j.fence + 1 FROM {job_rows} j WHERE j.job = b.job)
             FROM b ORDER BY b.job
             ON CONFLICT (job, slot) DO NOTHING
             RETURNING job)
         UPDATE {job_rows} j SET fence = j.fence + 1, unpruned = j.unpruned + 1,
                                 keys_added = coalesce(j.keys_added, 0) + 1
         FROM ins WHERE j.job = ins.job"
    );
    let finish = format!(
        "WITH b AS (SELECT unnest($1::text[]) AS job),
         r AS (
             UPDATE {runs} x SET status = 'success', owner = NULL, finished_at = $2::int8 + 1
             FROM b WHERE x.job = b.job AND x.slot = $2::int8 AND x.status = 'running'
             RETURNING x.job)
         DELETE FROM {runs} x USING b
         WHERE x.job = b.job AND x.slot = ($2::int8 - $3::int8)
           AND (SELECT count(*) FROM r) >= 0"
    );
    let store = Arc::new(store);
    let run_caller = |c: usize, warm: bool, until: Instant, first: i64| {
        let store = store.clone();
        let mine: Vec<Vec<String>> = names[c].chunks(BATCH).map(<[String]>::to_vec).collect();
        let (claim, finish) = (claim.clone(), finish.clone());
        async move {
            let client = store.pool().get().await?;
            let claim = client.prepare_cached(&claim).await?;
            let finish = client.prepare_cached(&finish).await?;
            let (mut slots, mut n) = (0u64, 0usize);
            let mut slot = first;
            while (warm && n < mine.len()) || (!warm && Instant::now() < until) {
                let chunk = &mine[n % mine.len()];
                let won = client.execute(&claim, &[chunk, &(slot * 1000)]).await?;
                client
                    .execute(&finish, &[chunk, &(slot * 1000), &(history * 1000)])
                    .await?;
                slots += won;
                n += 1;
                if n % mine.len() == 0 {
                    slot += 1;
                }
            }
            anyhow::Ok((slots, slot))
        }
    };
    // Warm-up: one slot of every job (connections, prepared statements, the first pages).
    let mut first = Vec::new();
    for c in 0..callers {
        first.push(run_caller(c, true, Instant::now(), history).await?.1);
    }
    if args.get("paced").is_ok() {
        return paced_floor(store, &names, &claim, &finish, history, seconds, &first).await;
    }
    if args.get("via").is_ok_and(|v| v == "store") {
        let race = args.get("race").is_ok_and(|v| v == "1");
        let from = first.iter().copied().max().unwrap_or(history);
        return store_floor(store, &names, history, seconds, from, race).await;
    }
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..callers)
        .map(|c| tokio::spawn(run_caller(c, false, until, first[c])))
        .collect();
    let mut slots = 0;
    for task in tasks {
        slots += task.await??.0;
    }
    println!(
        "SLOT_FLOOR slots={slots} seconds={:.3} callers={callers}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `slot-floor --via store [--race 1]`: the same jobs and full histories as the floor, each
/// slot claimed and finished through the store's own batch calls (`claim_many`,
/// `finish_many`: job locks, the claim's checks, pruning), 256 claims a call, as fast as they
/// go. Without `--race` each caller claims its own jobs only (every claim wins, like the
/// floor); with `--race 1` every caller claims every job, caller c starting at the c-th
/// caller's jobs (so a slot is won by one and lost by the others, as the instances race).
/// Prints `STORE_FLOOR slots= taken= overlap= late= seconds= callers=`.
async fn store_floor(
    store: Arc<anarchon::postgres::PostgresStore>,
    names: &[Vec<String>],
    history: i64,
    seconds: u64,
    first: i64,
    race: bool,
) -> Result<()> {
    use anarchon::LeaseStore;
    use anarchon::history::Retention;
    use anarchon::ids::RunKey;
    use anarchon::store::{ClaimOutcome, Finish, LeaseClaim, Store};
    let callers = names.len();
    let jobs: Vec<Vec<Vec<anarchon::JobName>>> = (0..callers)
        .map(|c| {
            let order: Vec<usize> = if race {
                (0..callers).map(|k| (c + k) % callers).collect()
            } else {
                vec![c]
            };
            order
                .iter()
                .flat_map(|&p| names[p].iter())
                .map(|n| anarchon::JobName::new(n.clone()))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(|all| all.chunks(BATCH).map(<[_]>::to_vec).collect())
        })
        .collect::<std::result::Result<_, _>>()?;
    let retention = Retention {
        size: history as u32,
        ttl_ms: None,
    };
    // Every caller claims second k's slot of every job of its list, then moves on to k + 1
    // (racing callers meet on each slot); no caller waits for another.
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            let mine = jobs[c].clone();
            let id = format!("floor{c}");
            tokio::spawn(async move {
                let mut counts = [0u64; 4];
                let mut slot = first;
                'outer: while Instant::now() < until {
                    // One clock read per slot: its claims' deadlines lie a minute past it.
                    let now = store.now().await?;
                    for chunk in &mine {
                        if Instant::now() >= until {
                            break 'outer;
                        }
                        let claims: Vec<LeaseClaim> = chunk
                            .iter()
                            .map(|job| LeaseClaim {
                                run: RunKey::new(job.clone(), slot * 1000),
                                scheduled_at: slot * 1000,
                                instance_id: id.clone(),
                                lease_ms: 30_000,
                                not_after: now + 60_000,
                                overlap: anarchon::Overlap::Skip,
                                reason: anarchon::Reason::Scheduled,
                                retention,
                            })
                            .collect();
                        let mut won = Vec::new();
                        for outcome in store.claim_many(&claims).await? {
                            match outcome {
                                ClaimOutcome::Won(lease) => won.push((
                                    lease,
                                    Finish {
                                        status: anarchon::RunStatus::Succeeded,
                                        error: None,
                                        retention,
                                    },
                                )),
                                ClaimOutcome::Taken => counts[1] += 1,
                                ClaimOutcome::Overlap { .. } => counts[2] += 1,
                                ClaimOutcome::Late { .. } => counts[3] += 1,
                            }
                        }
                        counts[0] += won.len() as u64;
                        if !won.is_empty() {
                            store.finish_many(&won).await?;
                        }
                    }
                    slot += 1;
                }
                anyhow::Ok(counts)
            })
        })
        .collect();
    let mut total = [0u64; 4];
    for task in tasks {
        for (t, c) in total.iter_mut().zip(task.await??) {
            *t += c;
        }
    }
    let [slots, taken, overlap, late] = total;
    println!(
        "STORE_FLOOR slots={slots} taken={taken} overlap={overlap} late={late} seconds={:.3} \
         callers={callers}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn floor(args: &Args) -> Result<()> {
    let stop = stop_signal()?;
    let spec = Spec::parse(args.get("store")?)?;
    let log_path = args.get("log")?.to_owned();
    let raw = Raw::open(&spec).await?;
    raw.setup().await?;
    for _ in 0..20 {
        raw.floor_op().await?;
    }
    println!("READY pid={} t={}", std::process::id(), now_us() / 1000);
    let mut stop = std::pin::pin!(stop);
    let mut samples = Vec::new();
    loop {
        // Between 200 and 800 ms past the second, every 50 ms.
        let ms = (now_us() / 1000).rem_euclid(1000);
        let wait = if ms < 200 {
            200 - ms
        } else if ms >= 800 {
            1200 - ms
        } else {
            50 - ms % 50
        };
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
        }
        let started = Instant::now();
        raw.floor_op().await?;
        samples.push(started.elapsed().as_micros() as u64);
    }
    write_samples(&log_path, &samples)?;
    println!("EXIT t={} samples={}", now_us() / 1000, samples.len());
    Ok(())
}

fn write_samples(path: &str, samples: &[u64]) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for s in samples {
        writeln!(out, "{s}")?;
    }
    out.flush()?;
    Ok(())
}

// ----- graceful handover ----------------------------------------------------------------

/// Prints one line at once (stdout is line-buffered), so xtask reads it as it happens.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn handover(args: &Args) -> Result<()> {
    let stop = stop_signal()?;
    let spec = Spec::parse(args.get("store")?)?;
    let id = args.get("id")?.to_owned();
    let every = Duration::from_millis(args.num("every-ms").unwrap_or(5000).max(100));
    let hold = Duration::from_millis(args.num("hold-ms").unwrap_or(3000));
    let scheduler = spec
        .builder()
        .await?
        .instance_id(&id)
        .jitter(Duration::ZERO)
        .build()?;
    let mut events = scheduler.events();
    let listener = tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(n)) => {
                    say(format_args!("EVENT us={} name=lagged n={n}", now_us()));
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            let us = now_us();
            match &event {
                Event::Start(run) | Event::Lost(run) | Event::Fenced(run) => say(format_args!(
                    "EVENT us={us} name={} slot={} attempt={}",
                    event.name(),
                    run.slot_ms(),
                    run.attempt
                )),
                Event::Interrupted { run, cause } => say(format_args!(
                    "EVENT us={us} name=interrupted slot={} attempt={} cause={}",
                    run.slot_ms(),
                    run.attempt,
                    cause.as_str().replace(' ', "-")
                )),
                Event::Error {
                    operation, message, ..
                } => say(format_args!(
                    "EVENT us={us} name=error op={operation} message={}",
                    message.replace(['\n', ' '], "_")
                )),
                _ => {}
            }
        }
    });
    scheduler.every("h", every).handler(move |ctx| async move {
        say(format_args!(
            "RUN us={} slot={} attempt={} reason={:?}",
            now_us(),
            ctx.slot_ms(),
            ctx.attempt,
            ctx.reason
        ));
        tokio::select! {
            _ = tokio::time::sleep(hold) => Ok(()),
            _ = ctx.signal.cancelled() => {
                say(format_args!(
                    "CANCELLED us={} slot={} attempt={}",
                    now_us(),
                    ctx.slot_ms(),
                    ctx.attempt
                ));
                ctx.check_cancelled().map_err(Into::into)
            }
        }
    })?;
    scheduler.start().await?;
    say(format_args!(
        "READY pid={} us={}",
        std::process::id(),
        now_us()
    ));
    stop.await;
    say(format_args!("SIGNAL us={}", now_us()));
    let stopped = scheduler.stop(Duration::from_secs(10)).await;
    drop(scheduler);
    let _ = tokio::time::timeout(Duration::from_secs(2), listener).await;
    if let Err(e) = stopped {
        say(format_args!(
            "STOP_ERROR {}",
            e.to_string().replace('\n', " ")
        ));
    }
    say(format_args!("EXIT us={}", now_us()));
    Ok(())
}

/// `counters`: the store server's call counters every `--every-ms` until SIGTERM.
async fn counters(args: &Args) -> Result<()> {
    let stop = stop_signal()?;
    let spec = Spec::parse(args.get("store")?)?;
    let every = Duration::from_millis(args.num("every-ms").unwrap_or(5000).max(100));
    let raw = Raw::open(&spec).await?;
    let mut stop = std::pin::pin!(stop);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        let t = now_us() / 1000;
        match raw.counters().await {
            Ok((calls, commits, detail, writes)) => say(format_args!(
                "COUNTERS t={t} calls={calls} commits={commits} detail={detail}{writes}"
            )),
            Err(e) => say(format_args!(
                "COUNTERS_ERROR t={t} {}",
                e.to_string().replace('\n', " ")
            )),
        }
    }
    say(format_args!("EXIT t={}", now_us() / 1000));
    Ok(())
}

async fn clean(args: &Args) -> Result<()> {
    let spec = Spec::parse(args.get("store")?)?;
    if spec.kind == "libsql" {
        println!(
            "CLEANED nothing: drop the tables {}* by hand",
            spec.namespace
        );
        return Ok(());
    }
    Raw::open(&spec).await?.clean().await
}

#[tokio::main]
async fn main() -> Result<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((mode, rest)) = argv.split_first() else {
        bail!(
            "usage: bench-node run|ceiling|floor|clean|handover|counters --store SPEC ... (see the file's header)"
        );
    };
    let args = Args::parse(rest)?;
    match mode.as_str() {
        "run" => run(&args).await,
        "ceiling" => ceiling(&args).await,
        "floor" => floor(&args).await,
        "slot-floor" => slot_floor(&args).await,
        "clean" => clean(&args).await,
        "handover" => handover(&args).await,
        "counters" => counters(&args).await,
        other => bail!(
            "unknown mode {other:?}: expected run, ceiling, floor, clean, handover or counters"
        ),
    }
}
