//! Exactly-once writes: a job credits an account once per slot, in a fenced transaction
//! that also records the run's success, while its runners are killed at every point of the
//! handler. Ends with the ledger, read from the database, and checks it: one row per slot.
//!
//! ```sh
//! cargo run --example exactly-once                        # SQLite, a temporary file
//! cargo run --example exactly-once -- /tmp/eo.db          # SQLite, a new file that is kept
//! cargo run --example exactly-once --features postgres -- postgres://postgres@127.0.0.1/postgres
//! ```
//!
//! Options (before the store): `--secs N` (how long slots come due, 20 by default; a run
//! takes about 10 s more to drain), `--nodes N` (runner processes, 3), `--seed N` (the
//! random plan), `--plan before,inside,...` (the point of each slot in turn instead of a
//! random plan), `--job NAME` (the job's name, `credit-<time>` by default).
//!
//! The example starts copies of itself, each a scheduler instance with four jobs
//! `<job>-0` .. `<job>-3` (each every 4 s, one a second after the other, so one slot comes
//! due every second; lease 1.5 s, heartbeat 0.3 s). The handler opens a fenced transaction
//! (`FencedTransaction` on SQLite, `PostgresStore::fenced_transaction` on PostgreSQL),
//! inserts a ledger row (slot, attempt, instance, amount), adds the amount to the account's
//! balance and commits with `commit_finished`: the rows and the run's success in one
//! commit. For some slots (a random plan; the first attempt only) the handler stops at a
//! point and prints `PARK <node> <slot> <attempt> <point>`, and the parent acts at once:
//!
//! | point | where the handler stops | what the parent does |
//! |---|---|---|
//! | `before` | before the transaction | SIGKILL |
//! | `inside` | after its writes, before the commit | SIGKILL |
//! | `after` | after the commit, before the handler returns to the scheduler | SIGKILL |
//! | `stop` | before the transaction | SIGSTOP, SIGCONT 3 s later (past the lease) |
//! | `term` | inside the transaction | SIGTERM (a graceful stop hands the run over) |
//! | `pgkill` | inside the transaction (PostgreSQL only) | `pg_terminate_backend` of every node's connection |
//!
//! A killed or stopped runner is replaced by a new process. A backup takes a killed run over
//! once its lease ended and does the work once; the thawed runner's transaction answers
//! `Fenced` and keeps nothing; a run killed after its commit is already `succeeded` and no
//! backup runs it again. The parent then reads the ledger and the job's history and checks:
//! exactly one ledger row per slot that succeeded (by the attempt that succeeded), none for
//! the others, every planned slot succeeded, more than one attempt for the slots killed
//! before their commit, one attempt for those killed after it, and the balance is the sum of
//! the ledger. It exits non-zero when a check fails. Unix only (it sends signals).

#[path = "common/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[cfg(feature = "postgres")]
use anarchon::postgres::PostgresStore;
use anarchon::sqlite::{FencedTransaction, SqliteStore};
use anarchon::{
    BoxError, Error, HandlerError, HistoryRecord, JobContext, Overlap, RunStatus, Scheduler,
};
use process::{Ev, Farewell, Procs, Signal, clock_ms as clock, now_ms};

/// The first argument that makes the example run as a child instance.
const NODE_ARG: &str = "--node";
/// Four jobs, each every 4 s, one a second after the other: one slot comes due every
/// second. A slot's run must be taken over before its job's next slot is claimed (that
/// claim replaces an expired run), so the interval is longer than the lease and the
/// takeover's delay.
const JOBS: i64 = 4;
const TICK: Duration = Duration::from_secs(1);
const INTERVAL: Duration = Duration::from_secs(4);
/// Lease 1.5 s, renewed every 0.3 s.
const LEASE: Duration = Duration::from_millis(1_500);
const HEARTBEAT: Duration = Duration::from_millis(300);
/// What each slot credits.
const AMOUNT: i64 = 10;
/// How long a handler waits at a point for the parent's signal before it goes on.
const PARK: Duration = Duration::from_secs(5);
/// How long a `pgkill` handler waits inside its transaction for the connection kill.
const PG_PARK: Duration = Duration::from_millis(800);

/// Where a handler stops, and what the parent does there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Point {
    None,
    Before,
    Inside,
    After,
    Stop,
    Term,
    PgKill,
}

impl Point {
    const ALL: [Point; 7] = [
        Point::None,
        Point::Before,
        Point::Inside,
        Point::After,
        Point::Stop,
        Point::Term,
        Point::PgKill,
    ];

    fn name(self) -> &'static str {
        match self {
            Point::None => "none",
            Point::Before => "before",
            Point::Inside => "inside",
            Point::After => "after",
            Point::Stop => "stop",
            Point::Term => "term",
            Point::PgKill => "pgkill",
        }
    }

    fn parse(text: &str) -> Option<Point> {
        Point::ALL.into_iter().find(|p| p.name() == text)
    }

    /// True when the run must be done by a later attempt (the first wrote nothing).
    fn needs_takeover(self) -> bool {
        matches!(
            self,
            Point::Before | Point::Inside | Point::Stop | Point::Term
        )
    }
}

/// The plan as the children get it: the point of the slot due at `first + i * TICK` (of
/// whichever job it is) is `points[i]`.
#[derive(Debug, Clone)]
struct Plan {
    first: i64,
    points: Vec<Point>,
}

impl Plan {
    fn at(&self, slot: i64) -> Point {
        let step = TICK.as_millis() as i64;
        if slot < self.first || (slot - self.first) % step != 0 {
            return Point::None;
        }
        let i = ((slot - self.first) / step) as usize;
        self.points.get(i).copied().unwrap_or(Point::None)
    }

    fn text(&self) -> String {
        let names: Vec<&str> = self.points.iter().map(|p| p.name()).collect();
        names.join(",")
    }

    fn parse_points(text: &str) -> Result<Vec<Point>, String> {
        text.split(',')
            .map(|p| Point::parse(p.trim()).ok_or_else(|| format!("unknown point {p:?}")))
            .collect()
    }
}

/// The run's jobs: `<job>-0` .. `<job>-3`; they credit one account, `<job>`.
fn job_names(job: &str) -> Vec<String> {
    (0..JOBS).map(|k| format!("{job}-{k}")).collect()
}

// ----- the database ---------------------------------------------------------------------

/// The scheduler's store, where the ledger lives too.
#[derive(Clone)]
enum Db {
    Sqlite(SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(PostgresStore),
}

/// One row of the ledger.
#[derive(Debug, Clone)]
struct Entry {
    slot: i64,
    attempt: i64,
    instance: String,
    amount: i64,
}

const SQLITE_TABLES: &str = "CREATE TABLE IF NOT EXISTS eo_ledger (job TEXT NOT NULL, \
     slot INTEGER NOT NULL, attempt INTEGER NOT NULL, instance TEXT NOT NULL, \
     amount INTEGER NOT NULL, fence INTEGER NOT NULL); \
     CREATE TABLE IF NOT EXISTS eo_accounts (job TEXT PRIMARY KEY, balance INTEGER NOT NULL);";

#[cfg(feature = "postgres")]
const POSTGRES_TABLES: &str = "CREATE TABLE IF NOT EXISTS eo_ledger (job TEXT NOT NULL, \
     slot BIGINT NOT NULL, attempt BIGINT NOT NULL, instance TEXT NOT NULL, \
     amount BIGINT NOT NULL, fence BIGINT NOT NULL); \
     CREATE TABLE IF NOT EXISTS eo_accounts (job TEXT PRIMARY KEY, balance BIGINT NOT NULL);";

impl Db {
    async fn open(target: &str) -> Result<Db, BoxError> {
        if target.starts_with("postgres://") || target.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Ok(Db::Postgres(PostgresStore::connect(target).await?));
            #[cfg(not(feature = "postgres"))]
            return Err("a PostgreSQL URL needs the feature: \
                 cargo run --example exactly-once --features postgres -- <url>"
                .into());
        }
        Ok(Db::Sqlite(SqliteStore::connect(target).await?))
    }

    fn kind(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "SQLite",
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => "PostgreSQL",
        }
    }

    /// Creates the ledger and the job's account (balance 0).
    async fn setup(&self, job: &str) -> Result<(), BoxError> {
        match self {
            Db::Sqlite(store) => {
                let conn = store.open_connection()?;
                conn.execute_batch(SQLITE_TABLES)?;
                conn.execute(
                    "INSERT OR IGNORE INTO eo_accounts (job, balance) VALUES (?1, 0)",
                    [job],
                )?;
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(store) => {
                let conn = store.connection().await?;
                conn.batch_execute(POSTGRES_TABLES).await?;
                conn.execute(
                    "INSERT INTO eo_accounts (job, balance) VALUES ($1, 0) \
                     ON CONFLICT (job) DO NOTHING",
                    &[&job],
                )
                .await?;
            }
        }
        Ok(())
    }

    /// The job's ledger, by slot and attempt, and its balance.
    async fn ledger(&self, job: &str) -> Result<(Vec<Entry>, i64), BoxError> {
        const LEDGER: &str = "SELECT slot, attempt, instance, amount FROM eo_ledger \
             WHERE job = $1 ORDER BY slot, attempt";
        const BALANCE: &str = "SELECT balance FROM eo_accounts WHERE job = $1";
        match self {
            Db::Sqlite(store) => {
                let conn = store.open_connection()?;
                let mut stmt = conn.prepare(&LEDGER.replace("$1", "?1"))?;
                let rows = stmt
                    .query_map([job], |r| {
                        Ok(Entry {
                            slot: r.get(0)?,
                            attempt: r.get(1)?,
                            instance: r.get(2)?,
                            amount: r.get(3)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                let balance = conn.query_row(&BALANCE.replace("$1", "?1"), [job], |r| r.get(0))?;
                Ok((rows, balance))
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(store) => {
                let conn = store.connection().await?;
                let rows = conn
                    .query(LEDGER, &[&job])
                    .await?
                    .iter()
                    .map(|r| Entry {
                        slot: r.get(0),
                        attempt: r.get(1),
                        instance: r.get(2),
                        amount: r.get(3),
                    })
                    .collect();
                let balance = conn.query_one(BALANCE, &[&job]).await?.get(0);
                Ok((rows, balance))
            }
        }
    }

    /// The history of the run's jobs, oldest first.
    async fn history(&self, job: &str) -> Result<Vec<HistoryRecord>, BoxError> {
        let reader = match self.clone() {
            Db::Sqlite(store) => Scheduler::leased(store).build()?,
            #[cfg(feature = "postgres")]
            Db::Postgres(store) => Scheduler::leased(store).build()?,
        };
        let mut runs = Vec::new();
        for name in job_names(job) {
            runs.extend(reader.history(&name, 10_000).await?);
        }
        runs.sort_by_key(|r| (r.slot, r.attempt));
        Ok(runs)
    }

    /// Ends every server connection whose `application_name` is `app` (PostgreSQL only);
    /// returns how many.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    async fn terminate(&self, app: &str) -> Result<i64, BoxError> {
        match self {
            Db::Sqlite(_) => Ok(0),
            #[cfg(feature = "postgres")]
            Db::Postgres(store) => {
                let conn = store.connection().await?;
                let row = conn
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                        &[&app],
                    )
                    .await?;
                Ok(row.get(0))
            }
        }
    }
}

// ----- the child ------------------------------------------------------------------------

/// What a child is told: `--node <id> <store> <job> <first-slot-ms> <plan>`.
struct Node {
    id: String,
    store: String,
    job: String,
    plan: Plan,
}

/// Prints one line for the parent.
fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The handler's stop at `point` if the plan puts this slot's first attempt there: prints
/// `PARK` and waits for the parent (a `term` point until the run is cancelled).
async fn park(node: &Node, ctx: &JobContext, point: Point) {
    if ctx.attempt != 1 || node.plan.at(ctx.slot_ms()) != point {
        return;
    }
    say(format!(
        "PARK {} {} {} {}",
        node.id,
        ctx.slot_ms(),
        ctx.attempt,
        point.name()
    ));
    let wait = if point == Point::PgKill {
        PG_PARK
    } else {
        PARK
    };
    if point == Point::Term {
        tokio::select! {
            _ = ctx.signal.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    } else {
        tokio::time::sleep(wait).await;
    }
}

/// The same stop for the blocking code inside an SQLite transaction.
fn park_blocking(node: &Node, ctx: &JobContext, point: Point) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build();
    if let Ok(rt) = rt {
        rt.block_on(park(node, ctx, point));
    }
}

/// True when `e` (or what it wraps) is a lost fence or a cancelled run: not worth a retry.
fn final_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(Error::Fenced { .. } | Error::Cancelled { .. }) = err.downcast_ref::<Error>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The handler: credit the account once for this slot, in one fenced transaction with the
/// run's success. Errors of the connection (a killed backend) are retried; a lost fence is
/// the answer for a superseded attempt, and ends the handler.
async fn credit(node: std::sync::Arc<Node>, db: Db, ctx: JobContext) -> Result<(), HandlerError> {
    park(&node, &ctx, Point::Before).await;
    park(&node, &ctx, Point::Stop).await;
    let mut tries = 0;
    loop {
        tries += 1;
        let done = credit_once(&node, &db, &ctx, tries == 1).await;
        match done {
            Ok(()) => break,
            Err(e) => {
                let fenced = final_error(e.as_ref());
                say(format!(
                    "{} {} {} {} {e}",
                    if fenced { "FENCED" } else { "RETRY" },
                    node.id,
                    ctx.slot_ms(),
                    ctx.attempt
                ));
                if fenced || tries >= 10 {
                    return Err(HandlerError::from_boxed(e));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    say(format!(
        "CREDITED {} {} {}",
        node.id,
        ctx.slot_ms(),
        ctx.attempt
    ));
    park(&node, &ctx, Point::After).await;
    Ok(())
}

/// One try of the credit; the points inside the transaction are visited on the first try
/// only.
async fn credit_once(
    node: &std::sync::Arc<Node>,
    db: &Db,
    ctx: &JobContext,
    first_try: bool,
) -> Result<(), BoxError> {
    let slot = ctx.slot_ms();
    let attempt = i64::from(ctx.attempt);
    let fence = ctx.fence as i64;
    let instance = node.id.clone();
    match db {
        Db::Sqlite(store) => {
            let (node, ctx2, store2) = (node.clone(), ctx.clone(), store.clone());
            tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
                let mut conn = store2.open_connection()?;
                let tx = FencedTransaction::begin(&mut conn, &store2, &ctx2)?;
                tx.execute(
                    "INSERT INTO eo_ledger (job, slot, attempt, instance, amount, fence) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    rusqlite::params![node.job, slot, attempt, instance, AMOUNT, fence],
                )?;
                tx.execute(
                    "UPDATE eo_accounts SET balance = balance + ?1 WHERE job = ?2",
                    rusqlite::params![AMOUNT, node.job],
                )?;
                if first_try {
                    park_blocking(&node, &ctx2, Point::Inside);
                    park_blocking(&node, &ctx2, Point::Term);
                }
                handed_over(&node, &ctx2)?;
                tx.commit_finished()?;
                Ok(())
            })
            .await?
        }
        #[cfg(feature = "postgres")]
        Db::Postgres(store) => {
            let mut conn = store.connection().await?;
            let tx = store.fenced_transaction(&mut conn, ctx).await?;
            tx.execute(
                "INSERT INTO eo_ledger (job, slot, attempt, instance, amount, fence) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&node.job, &slot, &attempt, &instance, &AMOUNT, &fence],
            )
            .await?;
            tx.execute(
                "UPDATE eo_accounts SET balance = balance + $1 WHERE job = $2",
                &[&AMOUNT, &node.job],
            )
            .await?;
            if first_try {
                park(node, ctx, Point::Inside).await;
                park(node, ctx, Point::Term).await;
                park(node, ctx, Point::PgKill).await;
            }
            handed_over(node, ctx)?;
            tx.commit_finished().await?;
            Ok(())
        }
    }
}

/// A run cancelled by a graceful stop is handed over: the transaction is dropped (rolled
/// back) and the next attempt does the work.
fn handed_over(node: &Node, ctx: &JobContext) -> Result<(), BoxError> {
    if ctx.attempt == 1 && node.plan.at(ctx.slot_ms()) == Point::Term {
        ctx.check_cancelled()?;
    }
    Ok(())
}

/// Resolves on SIGTERM (Ctrl-C elsewhere).
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn child(args: &[String]) -> ExitCode {
    let [id, store, job, first, plan] = args else {
        eprintln!("usage: exactly-once {NODE_ARG} <id> <store> <job> <first-slot-ms> <plan>");
        return ExitCode::from(2);
    };
    let (Ok(first), Ok(points)) = (first.parse::<i64>(), Plan::parse_points(plan)) else {
        eprintln!("exactly-once: bad child arguments {args:?}");
        return ExitCode::from(2);
    };
    let node = std::sync::Arc::new(Node {
        id: id.clone(),
        store: store.clone(),
        job: job.clone(),
        plan: Plan { first, points },
    });
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{id}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(instance(node.clone())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", node.id);
            ExitCode::FAILURE
        }
    }
}

/// One instance: a scheduler with the four jobs until SIGTERM or its stdin closes.
async fn instance(node: std::sync::Arc<Node>) -> Result<(), BoxError> {
    let db = Db::open(&node.store).await?;
    let builder = match db.clone() {
        Db::Sqlite(store) => Scheduler::leased(store),
        #[cfg(feature = "postgres")]
        Db::Postgres(store) => Scheduler::leased(store),
    };
    let scheduler = builder
        .instance_id(&node.id)
        .lease(LEASE)
        .heartbeat(HEARTBEAT)
        .jitter(Duration::ZERO)
        .catch_up_window(Duration::ZERO)
        .overlap(Overlap::Allow)
        .max_attempts(10)
        .build()?;
    let (n, d) = (node.clone(), db.clone());
    for (k, name) in job_names(&node.job).into_iter().enumerate() {
        let (n, d) = (n.clone(), d.clone());
        scheduler
            .every(&name, INTERVAL)
            .offset(TICK * k as u32)
            .handler(move |ctx| credit(n.clone(), d.clone(), ctx))?;
    }
    scheduler.start().await?;
    say(format!("READY {}", node.id));
    tokio::select! {
        _ = terminated() => {}
        _ = process::parent_gone() => {}
    }
    scheduler.stop(Duration::from_secs(3)).await?;
    say(format!("EXIT {}", node.id));
    Ok(())
}

// ----- the parent -----------------------------------------------------------------------

struct Options {
    secs: u64,
    nodes: usize,
    seed: u64,
    plan: Option<Vec<Point>>,
    job: Option<String>,
    store: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        secs: 20,
        nodes: 3,
        seed: now_ms() as u64,
        plan: None,
        job: None,
        store: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--secs" => {
                o.secs = value("--secs")?
                    .parse()
                    .map_err(|e| format!("--secs: {e}"))?
            }
            "--nodes" => {
                o.nodes = value("--nodes")?
                    .parse()
                    .map_err(|e| format!("--nodes: {e}"))?;
            }
            "--seed" => {
                o.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--plan" => o.plan = Some(Plan::parse_points(&value("--plan")?)?),
            "--job" => o.job = Some(value("--job")?),
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            s if o.store.is_none() => o.store = Some(s.to_owned()),
            s => return Err(format!("one store only: {s}")),
        }
    }
    if o.nodes < 2 {
        return Err("--nodes: at least 2 (one runs, one takes over)".into());
    }
    Ok(o)
}

/// A small xorshift generator: the random plan needs no dependency.
fn random_plan(seed: u64, slots: usize, postgres: bool) -> Vec<Point> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // About half the slots are left alone; the others are spread over the points.
    let mut disturb = vec![
        Point::Before,
        Point::Inside,
        Point::After,
        Point::Stop,
        Point::Term,
    ];
    if postgres {
        disturb.push(Point::PgKill);
    }
    (0..slots)
        .map(|_| {
            let r = next();
            if r % 2 == 0 {
                Point::None
            } else {
                disturb[((r >> 8) % disturb.len() as u64) as usize]
            }
        })
        .collect()
}

/// The parent: the runners it started (the harness's [`Procs`]) and what it tells them.
struct Parent {
    exe: PathBuf,
    store: String,
    job: String,
    plan: Plan,
    app: String,
    procs: Procs,
    next_id: usize,
    started: Instant,
}

impl Parent {
    fn say(&self, text: &str) {
        println!("[{:>5.1}s] {text}", self.started.elapsed().as_secs_f64());
    }

    /// Starts a new runner; returns its id.
    fn spawn(&mut self) -> Result<String, String> {
        self.next_id += 1;
        let id = format!("n{}", self.next_id);
        let mut command = Command::new(&self.exe);
        command
            .args([NODE_ARG, &id, &self.store, &self.job])
            .arg(self.plan.first.to_string())
            .arg(self.plan.text());
        self.procs.spawn(&id, command)?;
        Ok(id)
    }

    /// Sends `sig` to a runner; a failure is told, not fatal (the runner may have exited).
    fn signal(&mut self, id: &str, sig: Signal) {
        if let Err(e) = self.procs.send(id, sig) {
            self.say(&e);
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(NODE_ARG) {
        return child(&args[1..]);
    }
    let options = match parse_options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "exactly-once: {e}\nusage: exactly-once [--secs N] [--nodes N] [--seed N] \
                 [--plan p,p,...] [--job NAME] [new-sqlite-file | postgres://...]"
            );
            return ExitCode::from(2);
        }
    };
    match parent(options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("exactly-once: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Counts of what the parent did, by point.
type Done = BTreeMap<Point, usize>;

fn parent(o: Options) -> Result<bool, BoxError> {
    let rt = tokio::runtime::Runtime::new()?;
    let (target, temp) = match &o.store {
        Some(s) if s.starts_with("postgres://") || s.starts_with("postgresql://") => {
            (s.clone(), None)
        }
        Some(path) => {
            if PathBuf::from(path).exists() {
                return Err(format!("{path} exists; give a path to a new file").into());
            }
            (path.clone(), None)
        }
        None => {
            let path = process::temp_db("exactly-once");
            (path.display().to_string(), Some(path))
        }
    };
    let postgres = target.starts_with("postgres");
    let job = o
        .job
        .clone()
        .unwrap_or_else(|| format!("credit-{}", now_ms()));
    let app = format!("anarchon-eo-{}", std::process::id());
    // Every node's connections carry an application name of this run: `pgkill` ends those.
    let store = if postgres {
        let sep = if target.contains('?') { '&' } else { '?' };
        format!("{target}{sep}application_name={app}")
    } else {
        target.clone()
    };
    let db = rt.block_on(Db::open(&store))?;
    rt.block_on(db.setup(&job))?;

    let lead = 2_500;
    // A multiple of the interval: the slot due at `first` is the first job's.
    let grid = INTERVAL.as_millis() as i64;
    let first = (now_ms() + lead + grid - 1) / grid * grid;
    let points = match o.plan.clone() {
        Some(p) => p,
        None => random_plan(
            o.seed,
            (o.secs * 1_000 / TICK.as_millis() as u64) as usize,
            postgres,
        ),
    };
    let plan = Plan { first, points };
    let mut p = Parent {
        exe: std::env::current_exe()?,
        store,
        job: job.clone(),
        plan: plan.clone(),
        app,
        // A runner stops when its stdin closes (SIGINT is not one of its stops).
        procs: Procs::new()
            .reading(&["PARK", "FENCED", "RETRY"])
            .stopped_by(Farewell::CloseStdin, Duration::from_secs(8)),
        next_id: 0,
        started: Instant::now(),
    };
    println!(
        "anarchon exactly-once on {} ({}): jobs `{job}-0`..`{job}-{}` credit {AMOUNT} per \
         slot to one account, each every {} s, one slot a second; lease {} ms; {} runners; \
         {} planned slots from {} (seed {})",
        db.kind(),
        anarchon::redact_url(&target),
        JOBS - 1,
        INTERVAL.as_secs(),
        LEASE.as_millis(),
        o.nodes,
        plan.points.len(),
        clock(first),
        o.seed
    );
    println!("PLAN first={first} points={}", plan.text());
    for _ in 0..o.nodes {
        p.spawn()?;
    }
    let done = drive(&mut p, &db, &rt)?;
    p.procs.shutdown();
    let (ledger, balance) = rt.block_on(db.ledger(&job))?;
    let runs = rt.block_on(db.history(&job))?;
    let ok = report(&plan, &done, &ledger, balance, &runs);
    drop(p);
    if let Some(path) = temp {
        process::remove_sqlite(&path);
    }
    Ok(ok)
}

/// Reacts to the children's lines until every planned slot succeeded (or a deadline).
fn drive(p: &mut Parent, db: &Db, rt: &tokio::runtime::Runtime) -> Result<Done, BoxError> {
    let step = TICK.as_millis() as i64;
    let last = p.plan.first + step * (p.plan.points.len() as i64 - 1);
    let give_up = last + 30_000 + 2 * LEASE.as_millis() as i64;
    let mut done = Done::new();
    let mut frozen: Vec<(Instant, String)> = Vec::new();
    let mut dead: Vec<String> = Vec::new();
    let mut next_check = last + 1_000;
    loop {
        if let Some(line) = p.procs.next_line(Duration::from_millis(50)) {
            on_line(p, db, rt, &line, &mut done, &mut frozen, &mut dead)?;
        }
        let now = Instant::now();
        while let Some(i) = frozen.iter().position(|(at, _)| *at <= now) {
            let (_, id) = frozen.remove(i);
            p.signal(&id, Signal::Cont);
            p.say(&format!("SIGCONT -> {id}"));
        }
        let t = now_ms();
        if t >= next_check && frozen.is_empty() {
            next_check = t + 500;
            let runs = rt.block_on(db.history(&p.job))?;
            let succeeded: std::collections::HashSet<i64> = runs
                .iter()
                .filter(|r| r.status == RunStatus::Succeeded)
                .map(|r| r.slot_ms())
                .collect();
            let all = (0..p.plan.points.len() as i64)
                .all(|i| succeeded.contains(&(p.plan.first + i * step)));
            if all {
                p.say("every planned slot succeeded; stopping the runners");
                return Ok(done);
            }
            if t > give_up {
                p.say("not every planned slot succeeded in time; stopping the runners");
                return Ok(done);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn on_line(
    p: &mut Parent,
    db: &Db,
    rt: &tokio::runtime::Runtime,
    line: &Ev,
    done: &mut Done,
    frozen: &mut Vec<(Instant, String)>,
    dead: &mut Vec<String>,
) -> Result<(), BoxError> {
    let words: Vec<&str> = line.text.split_whitespace().collect();
    match words.as_slice() {
        ["PARK", node, slot, attempt, point] => {
            let (Some(point), Ok(slot)) = (Point::parse(point), slot.parse::<i64>()) else {
                return Ok(());
            };
            if dead.iter().any(|d| d == node) {
                return Ok(());
            }
            let what = format!("slot {} attempt {attempt} on {node}", clock(slot));
            match point {
                Point::Before | Point::Inside | Point::After => {
                    p.signal(node, Signal::Kill);
                    dead.push((*node).to_owned());
                    p.say(&format!("SIGKILL {node} {}: {what}", point.name()));
                    let new = p.spawn()?;
                    p.say(&format!("started {new}"));
                }
                Point::Stop => {
                    p.signal(node, Signal::Stop);
                    frozen.push((
                        Instant::now() + LEASE + Duration::from_millis(1_500),
                        (*node).to_owned(),
                    ));
                    p.say(&format!("SIGSTOP {node} stop: {what}"));
                    let new = p.spawn()?;
                    p.say(&format!("started {new}"));
                }
                Point::Term => {
                    p.signal(node, Signal::Term);
                    dead.push((*node).to_owned());
                    p.say(&format!("SIGTERM {node} term: {what}"));
                    let new = p.spawn()?;
                    p.say(&format!("started {new}"));
                }
                Point::PgKill => {
                    let n = rt.block_on(db.terminate(&p.app))?;
                    p.say(&format!(
                        "TERMINATE {n} backends pgkill: {what} (pg_terminate_backend)"
                    ));
                }
                Point::None => return Ok(()),
            }
            *done.entry(point).or_default() += 1;
        }
        ["FENCED", node, slot, attempt, rest @ ..] => {
            let slot = slot.parse::<i64>().unwrap_or(0);
            p.say(&format!(
                "{node}: slot {} attempt {attempt} refused: {}",
                clock(slot),
                rest.join(" ")
            ));
        }
        ["EXIT", node] => p.procs.reap(node),
        ["RETRY", node, slot, attempt, rest @ ..] => {
            let slot = slot.parse::<i64>().unwrap_or(0);
            p.say(&format!(
                "{node}: slot {} attempt {attempt} retries: {}",
                clock(slot),
                rest.join(" ")
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Prints the ledger beside the history and checks it; true when every check passed.
fn report(
    plan: &Plan,
    done: &Done,
    ledger: &[Entry],
    balance: i64,
    runs: &[HistoryRecord],
) -> bool {
    let mut by_slot: BTreeMap<i64, (Vec<&HistoryRecord>, Vec<&Entry>)> = BTreeMap::new();
    for r in runs {
        by_slot.entry(r.slot_ms()).or_default().0.push(r);
    }
    for e in ledger {
        by_slot.entry(e.slot).or_default().1.push(e);
    }
    println!();
    println!(
        "  {:<12}  {:<6}  {:<40}  ledger",
        "slot (UTC)", "point", "attempts (history)"
    );
    let mut failures: Vec<String> = Vec::new();
    let mut finished = 0;
    let mut duplicates = 0;
    let mut taken_over = 0;
    for (slot, (attempts, rows)) in &by_slot {
        let point = plan.at(*slot);
        let text: Vec<String> = attempts
            .iter()
            .map(|r| format!("{} {} {}", r.attempt, r.instance_id, r.status.as_str()))
            .collect();
        let rows_text: Vec<String> = rows
            .iter()
            .map(|e| format!("attempt {} {} +{}", e.attempt, e.instance, e.amount))
            .collect();
        println!(
            "  {:<12}  {:<6}  {:<40}  {}",
            clock(*slot),
            point.name(),
            text.join(", "),
            if rows_text.is_empty() {
                "-".to_owned()
            } else {
                rows_text.join(", ")
            }
        );
        let won: Vec<&&HistoryRecord> = attempts
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .collect();
        if rows.len() > 1 {
            duplicates += rows.len() - 1;
        }
        match (won.as_slice(), rows.as_slice()) {
            ([w], [e]) => {
                finished += 1;
                if i64::from(w.attempt) != e.attempt || w.instance_id != e.instance {
                    failures.push(format!(
                        "slot {}: the row is attempt {} on {}, the success attempt {} on {}",
                        clock(*slot),
                        e.attempt,
                        e.instance,
                        w.attempt,
                        w.instance_id
                    ));
                }
                if w.attempt > 1 {
                    taken_over += 1;
                }
            }
            ([], []) => {}
            _ => failures.push(format!(
                "slot {}: {} succeeded attempts and {} ledger rows",
                clock(*slot),
                won.len(),
                rows.len()
            )),
        }
        let planned = *slot >= plan.first && point != Point::None;
        if planned && won.len() == 1 {
            let w = won[0];
            if point.needs_takeover() && w.attempt < 2 {
                failures.push(format!(
                    "slot {} ({}): done by attempt 1, which was stopped before its commit",
                    clock(*slot),
                    point.name()
                ));
            }
            if point == Point::After && (w.attempt != 1 || attempts.len() != 1) {
                failures.push(format!(
                    "slot {} (after): {} attempts; the killed attempt 1 had committed",
                    clock(*slot),
                    attempts.len()
                ));
            }
        }
    }
    let step = TICK.as_millis() as i64;
    let missing: Vec<String> = (0..plan.points.len() as i64)
        .map(|i| plan.first + i * step)
        .filter(|s| {
            !by_slot
                .get(s)
                .is_some_and(|(a, _)| a.iter().any(|r| r.status == RunStatus::Succeeded))
        })
        .map(clock)
        .collect();
    if !missing.is_empty() {
        failures.push(format!(
            "planned slots that did not succeed: {}",
            missing.join(" ")
        ));
    }
    let sum: i64 = ledger.iter().map(|e| e.amount).sum();
    if sum != balance {
        failures.push(format!("balance {balance}, ledger sum {sum}"));
    }
    let kills: Vec<String> = done
        .iter()
        .map(|(p, n)| format!("{} {n}", p.name()))
        .collect();
    println!();
    println!(
        "RESULT slots={} finished={finished} rows={} duplicates={duplicates} taken_over={taken_over} \
         balance={balance} missing={} actions: {}",
        by_slot.len(),
        ledger.len(),
        missing.len(),
        if kills.is_empty() {
            "none".to_owned()
        } else {
            kills.join(", ")
        }
    );
    if failures.is_empty() {
        println!(
            "  ok   exactly one ledger row per finished slot ({finished}), written by the attempt \
             that finished it; {taken_over} slots done by a later attempt; balance {balance} = \
             {finished} x {AMOUNT}"
        );
        true
    } else {
        for f in &failures {
            println!("  FAIL {f}");
        }
        false
    }
}
