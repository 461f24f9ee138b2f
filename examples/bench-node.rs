//! The worker process of `cargo xtask bench scale` and `cargo xtask bench precision`: **not an
//! example to learn from** (read `examples/quick-start.rs` for that). xtask builds it with
//! `cargo build --release --example bench-node --features all-stores` and talks to it through
//! its arguments, its stdout lines and the files it writes.
//!
//! ```text
//! bench-node run     --store SPEC --jobs N --id ID --log FILE
//! bench-node ceiling --store SPEC --callers K --seconds S
//! bench-node floor   --store SPEC --log FILE
//! bench-node clean   --store SPEC
//! bench-node handover --store SPEC --id ID [--every-ms 5000] [--hold-ms 3000]
//! ```
//!
//! SPEC is `sqlite:<path>`, `redis:<url>#<key prefix>`, `postgres:<url>#<schema>` or
//! `libsql:<url>#<table prefix>`.
//!
//! - `run`: one leased scheduler with N distinct `every 1s` jobs (jitter 0, other options at
//!   their defaults). Each handler start appends `<job> <slot ms> <start µs> <attempt> <id>`
//!   to FILE through a fixed 256 KiB buffer (flushed after SIGTERM/SIGINT). Prints `BASE rss_kb=` (store connected,
//!   scheduler built, no job yet), `REGISTERED rss_kb=` (jobs registered, not started),
//!   `READY pid= t= rss_kb=`, and after the stop `COUNTS ...` (events by kind, skips by
//!   reason, store errors by operation, lagged events) and `EXIT`.
//! - `ceiling`: the store's own ceiling for batched claims without the scheduler: K callers,
//!   each repeating one round trip that writes 256 new keys/rows (Redis: a pipeline of 256
//!   `SET NX`; PostgreSQL: one `INSERT .. SELECT unnest(..) ON CONFLICT DO NOTHING`,
//!   committed; SQLite: one `BEGIN IMMEDIATE` transaction of 256 `INSERT OR IGNORE`). Prints
//!   `CEILING batches= rows_per_batch=256 seconds= callers=`.
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
//! - `clean`: deletes what the run left (Redis keys under the prefix, the PostgreSQL schema;
//!   the SQLite file is removed by xtask).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::{Event, Leased, Scheduler, SchedulerBuilder, SkipReason};
use anyhow::{Context, Result, bail};

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
        Ok(Scheduler::leased_shared(store))
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
    fn print(&self) {
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
             error_ops={}",
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
            }
        );
        for (op, _, message) in errors.iter() {
            println!("FIRST_ERROR op={op} {}", message.replace('\n', " "));
        }
    }
}

async fn run(args: &Args) -> Result<()> {
    let stop = stop_signal()?;
    let spec = Spec::parse(args.get("store")?)?;
    let jobs = args.num("jobs")? as usize;
    let id = args.get("id")?.to_owned();
    let log_path = args.get("log")?.to_owned();
    // Room for a few seconds of events (start, success and skips of every job) so the
    // counter below never lags; allocated at build, so BASE includes it.
    let capacity = (jobs * 8).clamp(1024, 1 << 20);
    let scheduler = spec
        .builder()
        .await?
        .instance_id(&id)
        .jitter(Duration::ZERO)
        .event_capacity(capacity)
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
    println!("BASE rss_kb={}", rss_kb());

    // ~40 bytes a line, written through a fixed buffer as the run goes, so the node's memory
    // holds no log that grows with the run (RSS per job reads the scheduler alone).
    let file = std::fs::File::create(&log_path).with_context(|| format!("creating {log_path}"))?;
    let log = Arc::new(Mutex::new(std::io::BufWriter::with_capacity(
        256 * 1024,
        file,
    )));
    let node: Arc<str> = id.clone().into();
    for j in 0..jobs {
        let log = log.clone();
        let node = node.clone();
        scheduler
            .every(&format!("j{j:05}"), Duration::from_secs(1))
            .handler(move |ctx| {
                let started = now_us();
                let line = format!("{j} {} {started} {} {node}\n", ctx.slot_ms(), ctx.attempt);
                // A failed write shows as missing starts in the judge's counts.
                let _ = std::io::Write::write_all(
                    &mut *log.lock().expect("log buffer"),
                    line.as_bytes(),
                );
                async { Ok(()) }
            })?;
    }
    println!("REGISTERED rss_kb={}", rss_kb());
    scheduler.start().await?;
    println!(
        "READY pid={} t={} rss_kb={}",
        std::process::id(),
        now_us() / 1000,
        rss_kb()
    );
    stop.await;
    println!("STOPPING t={} rss_kb={}", now_us() / 1000, rss_kb());
    let stopped = scheduler.stop(Duration::from_secs(10)).await;
    drop(scheduler);
    let _ = tokio::time::timeout(Duration::from_secs(2), counter).await;
    std::io::Write::flush(&mut *log.lock().expect("log buffer"))
        .with_context(|| format!("writing {log_path}"))?;
    counts.print();
    if let Err(e) = stopped {
        println!("STOP_ERROR {}", e.to_string().replace('\n', " "));
    }
    println!("EXIT t={}", now_us() / 1000);
    Ok(())
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
            "usage: bench-node run|ceiling|floor|clean|handover --store SPEC ... (see the file's header)"
        );
    };
    let args = Args::parse(rest)?;
    match mode.as_str() {
        "run" => run(&args).await,
        "ceiling" => ceiling(&args).await,
        "floor" => floor(&args).await,
        "clean" => clean(&args).await,
        "handover" => handover(&args).await,
        other => bail!("unknown mode {other:?}: expected run, ceiling, floor, clean or handover"),
    }
}
