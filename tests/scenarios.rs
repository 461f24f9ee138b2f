//! The failure scenarios of docs/behaviour.md, naive versus lease, with real processes,
//! real clocks and real signals: `cargo xtask scenarios` (`ANARCHON_SLOW=1`), `--fast` for CI
//! (`ANARCHON_SCENARIOS_FAST=1`: the same seven scenarios with the timings roughly halved).
//!
//! Each scenario starts three nodes (this test binary re-executed in child mode, see
//! `tests/support`) on one store, acts on them with signals, and prints one verdict line:
//!
//! ```text
//! VERDICT sqlite lease overlap ok: one at a time (max 1 running) ...
//! ```
//!
//! "Lease" runs on SQLite always, and on Redis (`lease`) and PostgreSQL when their
//! `ANARCHON_*_URL` is set and the binary was built with their feature. "Naive" is the
//! claim-only Redis `stream-id` strategy (one winner per slot, no lease): it needs Redis; it
//! also runs on RabbitMQ and NATS (claim-only stores) when built with `amqp`/`nats`.
//! docs/scenarios.md holds the table of what each scenario showed.

mod support;

use std::time::Duration;

use anarchon::RunStatus;
use support::{Cluster, Ev, NodeConfig, Signal, StoreSpec, now_ms};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// The first slot comes this long after the nodes are started.
const LEAD_MS: u64 = 2_000;

/// Not a test: the body of a node process (does nothing in an ordinary run). Ignored, so
/// the runner never counts it; the harness runs it by name with `--ignored --exact`.
#[test]
#[ignore = "not a test: the node process of the real-process harness (tests/support)"]
fn child_node() {
    support::child_main();
}

/// The timings of one run of the scenarios.
#[derive(Debug, Clone, Copy)]
struct Scale {
    lease_ms: u64,
    heartbeat_ms: u64,
    /// (interval, work) of the overlap scenario: a job longer than its interval.
    overlap: (u64, u64),
    /// (interval, work) of the failure scenarios: room for a takeover before the next slot.
    crash: (u64, u64),
}

/// The catalogue's numbers: a 7 s job every 3 s; lease 3 s, heartbeat 0.5 s.
const FULL: Scale = Scale {
    lease_ms: 3_000,
    heartbeat_ms: 500,
    overlap: (3_000, 7_000),
    crash: (10_000, 4_000),
};

/// About half of [`FULL`], for CI.
const FAST: Scale = Scale {
    lease_ms: 1_500,
    heartbeat_ms: 300,
    overlap: (1_500, 3_500),
    crash: (5_000, 2_500),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A lease store: takeover, handover, overlap check, catch-up.
    Lease,
    /// A claim-only store: one winner per slot and nothing more.
    // The Redis `stream-id` strategy, RabbitMQ and NATS are naive.
    #[cfg_attr(
        not(any(feature = "redis", feature = "amqp", feature = "nats")),
        allow(dead_code)
    )]
    Naive,
}

/// One store under test.
struct Env {
    store: &'static str,
    spec: StoreSpec,
    mode: Mode,
    scale: Scale,
    tag: String,
}

impl Env {
    fn new(store: &'static str, spec: StoreSpec, mode: Mode) -> Self {
        let fast = std::env::var("ANARCHON_SCENARIOS_FAST").is_ok_and(|v| v == "1");
        Env {
            store,
            spec,
            mode,
            scale: if fast { FAST } else { FULL },
            tag: format!("{}-{}", std::process::id(), now_ms() % 10_000_000),
        }
    }

    fn mode(&self) -> &'static str {
        match self.mode {
            Mode::Lease => "lease",
            Mode::Naive => "naive",
        }
    }

    /// Three nodes of a fresh job; returns them and the first slot.
    fn cluster(&self, scenario: &str, (interval, work): (u64, u64)) -> (Cluster, i64) {
        let job = format!("{scenario}-{}-{}", self.mode(), self.tag);
        let mut cfg = NodeConfig::new(self.spec.clone(), &job, interval, work);
        cfg.lease_ms = self.scale.lease_ms;
        cfg.heartbeat_ms = self.scale.heartbeat_ms;
        let first = cfg.first_slot_in(LEAD_MS);
        let mut c = Cluster::new(cfg);
        c.start(&NODES);
        (c, first)
    }

    fn lease_ms(&self) -> i64 {
        self.scale.lease_ms as i64
    }

    fn heartbeat_ms(&self) -> i64 {
        self.scale.heartbeat_ms as i64
    }

    /// Runs every scenario, prints a verdict line each, panics at the end if one failed.
    fn run_all(&self) {
        type Scenario = fn(&Env, &mut Option<Cluster>) -> Result<String, String>;
        let scenarios: [(&str, Scenario); 7] = [
            ("overlap", overlap),
            ("winner-killed", winner_killed),
            ("winner-frozen", winner_frozen),
            ("non-winner-restart", non_winner_restart),
            ("winner-sigterm", winner_sigterm),
            ("all-killed-restart", all_killed_restart),
            ("all-down-at-slot", all_down_at_slot),
        ];
        println!(
            "scenarios on {} ({}): lease {} ms, heartbeat {} ms; overlap job {} ms every {} ms; \
             failure scenarios {} ms every {} ms",
            self.store,
            self.mode(),
            self.scale.lease_ms,
            self.scale.heartbeat_ms,
            self.scale.overlap.1,
            self.scale.overlap.0,
            self.scale.crash.1,
            self.scale.crash.0,
        );
        let mut failed = Vec::new();
        for (name, scenario) in scenarios {
            let mut cluster = None;
            let result = scenario(self, &mut cluster);
            let (word, text) = match &result {
                Ok(t) => ("ok", t.clone()),
                Err(t) => ("FAIL", t.clone()),
            };
            println!(
                "VERDICT {} {} {name} {word}: {text}",
                self.store,
                self.mode()
            );
            if result.is_err() {
                if let Some(c) = &cluster {
                    eprintln!(
                        "--- {} {} {name}: what the nodes printed\n{}",
                        self.store,
                        self.mode(),
                        c.log()
                    );
                }
                failed.push(name);
            }
        }
        assert!(
            failed.is_empty(),
            "{} {}: scenarios failed: {failed:?}",
            self.store,
            self.mode()
        );
    }
}

fn secs(ms: i64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

/// Waits for attempt 1 of `slot`; returns the runner's start event.
fn runner(c: &mut Cluster, slot: i64) -> Result<Ev, String> {
    let wait = Duration::from_millis((slot - now_ms()).max(0) as u64 + 3_000);
    c.wait_event(wait, |e| e.is("start", slot) && e.attempt() == Some(1))
        .ok_or_else(|| "nobody started the slot".to_string())
}

/// The status of a slot's newest attempt in the store's history.
fn status_of(c: &Cluster, slot: i64) -> Option<RunStatus> {
    support::attempts_of(&c.history(50), slot)
        .last()
        .map(|r| r.status)
}

/// Other starts of `slot` than `runner`'s.
fn other_starts(c: &Cluster, slot: i64, runner: &Ev) -> usize {
    c.events("start", slot)
        .iter()
        .filter(|e| !(e.node == runner.node && e.attempt() == runner.attempt()))
        .count()
}

/// A job longer than its interval: naive runs pile up, lease runs one at a time. [B-12]
fn overlap(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (interval, work) = env.scale.overlap;
    let (c, first) = env.cluster("overlap", (interval, work));
    let c = keep.insert(c);
    let slots: Vec<i64> = (0..6).map(|k| first + k * interval as i64).collect();
    let last = *slots.last().expect("slots");
    c.pause_until(last + 1_500);
    let started: Vec<i64> = slots
        .iter()
        .copied()
        .filter(|&s| !c.events("start", s).is_empty())
        .collect();
    let overlapped = slots
        .iter()
        .filter(|&&s| {
            c.events("skip", s)
                .iter()
                .any(|e| e.field("skip") == "overlap")
        })
        .count();
    // A slot started twice is two starts of the same attempt. A takeover (attempt 2 after the
    // owner fenced itself or handed over, which a loaded machine can cause) is the at-least-once
    // guarantee at work, not an overlap: it is counted and shown, and must not overlap either.
    let twice = slots.iter().any(|&s| {
        let mut attempts: Vec<_> = c.events("start", s).iter().map(|e| e.attempt()).collect();
        let all = attempts.len();
        attempts.sort();
        attempts.dedup();
        attempts.len() < all
    });
    let taken_over = slots
        .iter()
        .map(|&s| {
            c.events("start", s)
                .iter()
                .filter(|e| e.attempt().is_some_and(|a| a > 1))
                .count()
        })
        .sum::<usize>();
    let max = c.max_concurrent(first, last);
    let what = format!(
        "{} ms job every {} ms over {} slots: {} started, {overlapped} skipped as overlap, \
         {taken_over} taken over, at most {max} running at once",
        work,
        interval,
        slots.len(),
        started.len()
    );
    match env.mode {
        Mode::Lease if max == 1 && overlapped >= 2 && started.len() >= 2 && !twice => {
            Ok(format!("one at a time. {what}"))
        }
        Mode::Naive if max >= 2 && started.len() == slots.len() && !twice => {
            Ok(format!("up to {max} copies at once. {what}"))
        }
        _ => Err(what),
    }
}

/// SIGKILL of the runner: naive runs stay `running`, lease runs are taken over. [B-14]
fn winner_killed(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("killed", env.scale.crash);
    let c = keep.insert(c);
    let r = runner(c, slot)?;
    c.pause_until(r.t + 500);
    let killed = c.signal(&r.node, Signal::Kill);
    let (lease, hb) = (env.lease_ms(), env.heartbeat_ms());
    match env.mode {
        Mode::Lease => {
            let wait = Duration::from_millis((lease + 4 * hb + 1_000) as u64);
            let next = c
                .wait_event(wait, |e| e.is("start", slot) && e.attempt() == Some(2))
                .ok_or("no attempt 2 after SIGKILL")?;
            let delay = next.t - killed;
            let text = format!(
                "SIGKILL {} -> attempt 2 ({}) on {} {} later (lease {})",
                r.node,
                next.field("reason"),
                next.node,
                secs(delay),
                secs(lease)
            );
            let in_range = (lease - 2 * hb..=lease + 3 * hb).contains(&delay);
            if in_range && next.node != r.node && next.field("reason") == "takeover" {
                Ok(text)
            } else {
                Err(text)
            }
        }
        Mode::Naive => {
            c.pause(Duration::from_millis((lease + 3 * hb + 1_000) as u64));
            let others = other_starts(c, slot, &r);
            let status = status_of(c, slot);
            let text = format!(
                "SIGKILL {}: {others} other starts in {}; history says {:?}",
                r.node,
                secs(now_ms() - killed),
                status.map(RunStatus::as_str)
            );
            if others == 0 && status == Some(RunStatus::Running) {
                Ok(format!("run stays `running`, nobody restarts it. {text}"))
            } else {
                Err(text)
            }
        }
    }
}

/// SIGSTOP of the runner for longer than the lease, then SIGCONT. [B-14, B-16]
fn winner_frozen(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("frozen", env.scale.crash);
    let c = keep.insert(c);
    let r = runner(c, slot)?;
    // Freeze between two heartbeats: a process stopped inside its write transaction holds
    // SQLite's file lock, and every other process's writes wait until it resumes (see
    // docs/guarantees.md); this scenario is about a freeze longer than the lease.
    c.pause_until(r.t + 500 + env.heartbeat_ms() / 2);
    let stopped = c.signal(&r.node, Signal::Stop);
    let (lease, hb) = (env.lease_ms(), env.heartbeat_ms());
    let work = env.scale.crash.1 as i64;
    match env.mode {
        Mode::Lease => {
            let wait = Duration::from_millis((lease + 4 * hb + 1_000) as u64);
            let next = c
                .wait_event(wait, |e| e.is("start", slot) && e.attempt() == Some(2))
                .ok_or("no takeover of the frozen run")?;
            c.pause_until(stopped + lease + 1_000);
            let woken = c.signal(&r.node, Signal::Cont);
            let noticed = c
                .wait_event(Duration::from_secs(3), |e| {
                    e.node == r.node && (e.is("lost", slot) || e.is("fenced", slot))
                })
                .ok_or("the woken runner reported neither lost nor fenced")?;
            c.pause(Duration::from_millis(300));
            let old_success = c.events("success", slot).iter().any(|e| e.node == r.node);
            let text = format!(
                "SIGSTOP {} -> attempt 2 on {} {} later; SIGCONT after {} -> `{}` {} ms later",
                r.node,
                next.node,
                secs(next.t - stopped),
                secs(woken - stopped),
                noticed.kind,
                noticed.t - woken
            );
            if next.node != r.node && !old_success {
                Ok(text)
            } else {
                Err(text)
            }
        }
        Mode::Naive => {
            c.pause_until(stopped + lease + 1_000);
            let others = other_starts(c, slot, &r);
            let woken = c.signal(&r.node, Signal::Cont);
            let done = c.wait_event(Duration::from_millis(work as u64 + 1_000), |e| {
                e.node == r.node && e.is("success", slot)
            });
            let text = format!(
                "SIGSTOP {} for {}: {others} other starts; woken, it {}",
                r.node,
                secs(woken - stopped),
                match &done {
                    Some(d) => format!("finished {} later", secs(d.t - woken)),
                    None => "did not finish".into(),
                }
            );
            if others == 0 && done.is_some() {
                Ok(format!("nobody notices; the run resumes late. {text}"))
            } else {
                Err(text)
            }
        }
    }
}

/// SIGKILL and restart of a node that did not win: nothing happens to the run.
fn non_winner_restart(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("bystander", env.scale.crash);
    let c = keep.insert(c);
    let r = runner(c, slot)?;
    let other = NODES
        .iter()
        .find(|n| **n != r.node)
        .expect("a non-winner")
        .to_string();
    c.pause_until(r.t + 500);
    c.signal(&other, Signal::Kill);
    // The restarted node catches up the newest slot if nobody claimed it: it was claimed.
    c.cfg.catch_up_ms = env.scale.crash.0;
    c.start(&[other.as_str()]);
    let work = env.scale.crash.1;
    let done = c.wait_event(Duration::from_millis(work + 2_000), |e| {
        e.is("success", slot) || e.is("failure", slot)
    });
    c.pause(Duration::from_millis(300));
    let others = other_starts(c, slot, &r);
    let text = format!(
        "SIGKILL + restart of {other} while {} ran: {others} other starts; the run {}",
        r.node,
        match &done {
            Some(d) => format!(
                "ended `{}` on {} (attempt {})",
                d.kind,
                d.node,
                d.field("attempt")
            ),
            None => "did not end".into(),
        }
    );
    match done {
        Some(d) if others == 0 && d.kind == "success" && d.node == r.node => {
            Ok(format!("no effect. {text}"))
        }
        _ => Err(text),
    }
}

/// SIGTERM to the runner: naive loses the run, lease hands it over at once. [B-17]
fn winner_sigterm(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("sigterm", env.scale.crash);
    let c = keep.insert(c);
    let r = runner(c, slot)?;
    c.pause_until(r.t + 500);
    let sent = c.signal(&r.node, Signal::Term);
    let (lease, hb) = (env.lease_ms(), env.heartbeat_ms());
    match env.mode {
        Mode::Lease => {
            let next = c
                .wait_event(Duration::from_millis((lease + 1_000) as u64), |e| {
                    e.is("start", slot) && e.attempt() == Some(2)
                })
                .ok_or("no attempt 2 after SIGTERM")?;
            let delay = next.t - sent;
            let exited = c.wait_exit(&r.node, Duration::from_secs(5));
            let handed = c.seen.iter().any(|e| {
                e.node == r.node && e.is("interrupted", slot) && e.field("cause") == "handed over"
            });
            let text = format!(
                "SIGTERM {} -> handed over, attempt 2 ({}) on {} {} later (two heartbeats: {})",
                r.node,
                next.field("reason"),
                next.node,
                secs(delay),
                secs(2 * hb)
            );
            if handed && exited && delay <= 2 * hb + 200 && next.field("reason") == "takeover" {
                Ok(text)
            } else {
                Err(text)
            }
        }
        Mode::Naive => {
            let exited = c.wait_exit(&r.node, Duration::from_secs(5));
            c.pause(Duration::from_millis((lease + 3 * hb) as u64));
            let others = other_starts(c, slot, &r);
            let status = status_of(c, slot);
            let text = format!(
                "SIGTERM {}: it stopped the run; {others} other starts; history says {:?}",
                r.node,
                status.map(RunStatus::as_str)
            );
            if exited && others == 0 && status != Some(RunStatus::Succeeded) {
                Ok(format!("run lost. {text}"))
            } else {
                Err(text)
            }
        }
    }
}

/// All three nodes die mid-run, then restart: lease re-runs the slot as attempt 2. [B-19]
fn all_killed_restart(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("allkilled", env.scale.crash);
    let c = keep.insert(c);
    let r = runner(c, slot)?;
    c.pause_until(r.t + 500);
    let killed = now_ms();
    for n in NODES {
        c.signal(n, Signal::Kill);
    }
    c.pause_until(killed + env.lease_ms() + 500);
    let restarted = now_ms();
    c.start(&NODES);
    match env.mode {
        Mode::Lease => {
            let next = c
                .wait_event(Duration::from_secs(3), |e| {
                    e.is("start", slot) && e.attempt() == Some(2)
                })
                .ok_or("the slot was not re-run after the restart")?;
            let text = format!(
                "SIGKILL to all three during the run of {}; restarted {} later -> attempt 2 ({}) \
                 on {} {} after the restart",
                r.node,
                secs(restarted - killed),
                next.field("reason"),
                next.node,
                secs(next.t - restarted)
            );
            if next.field("reason") == "takeover" {
                Ok(text)
            } else {
                Err(text)
            }
        }
        Mode::Naive => {
            c.pause(Duration::from_millis(1_500));
            let others = other_starts(c, slot, &r);
            let status = status_of(c, slot);
            let text = format!(
                "SIGKILL to all three, restart {} later: {others} other starts; history says {:?}",
                secs(restarted - killed),
                status.map(RunStatus::as_str)
            );
            if others == 0 {
                Ok(format!("run lost. {text}"))
            } else {
                Err(text)
            }
        }
    }
}

/// Every node is down when the slot comes due, back soon after: lease catches it up. [B-19]
fn all_down_at_slot(env: &Env, keep: &mut Option<Cluster>) -> Result<String, String> {
    let (c, slot) = env.cluster("alldown", env.scale.crash);
    let c = keep.insert(c);
    for n in NODES {
        c.signal(n, Signal::Term);
    }
    for n in NODES {
        if !c.wait_exit(n, Duration::from_secs(5)) {
            return Err(format!("{n} did not stop"));
        }
    }
    if now_ms() >= slot {
        return Err("the nodes took until the slot to stop".into());
    }
    c.pause_until(slot + 1_000);
    c.cfg.catch_up_ms = 60_000;
    let restarted = now_ms();
    c.start(&NODES);
    match env.mode {
        Mode::Lease => {
            let run = c
                .wait_event(Duration::from_secs(3), |e| e.is("start", slot))
                .ok_or("the missed slot was not caught up")?;
            c.pause(Duration::from_millis(500));
            let starts = c.events("start", slot).len();
            let text = format!(
                "restart {} after the slot -> {} ran it ({}, attempt {}) {} after the restart; \
                 {starts} start(s)",
                secs(restarted - slot),
                run.node,
                run.field("reason"),
                run.field("attempt"),
                secs(run.t - restarted)
            );
            if starts == 1 && run.field("reason") == "catch-up" {
                Ok(format!("caught up. {text}"))
            } else {
                Err(text)
            }
        }
        Mode::Naive => {
            c.pause(Duration::from_millis(1_500));
            let starts = c.events("start", slot).len();
            let text = format!(
                "restart {} after the slot: {starts} start(s) of it",
                secs(restarted - slot)
            );
            if starts == 0 {
                Ok(format!("job lost. {text}"))
            } else {
                Err(text)
            }
        }
    }
}

#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_lease_on_sqlite() {
    let db = support::TempDb::new("scenarios");
    Env::new("sqlite", db.spec(), Mode::Lease).run_all();
}

#[cfg(feature = "redis")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_lease_on_redis() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    Env::new(
        "redis",
        format!("redis-lease:{}", support::redis_target(&url)),
        Mode::Lease,
    )
    .run_all();
}

/// The lease column on a Redis Cluster (`cargo xtask test-servers --cluster`): keys are
/// hash-tagged per job, so every script of a job runs on the primary of one hash slot.
#[cfg(feature = "redis")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_lease_on_redis_cluster() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_REDIS_CLUSTER_URL") else {
        return;
    };
    Env::new(
        "redis-cluster",
        format!("redis-lease:{}", support::redis_target(&url)),
        Mode::Lease,
    )
    .run_all();
}

#[cfg(feature = "redis")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_naive_on_redis_stream_id() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    Env::new(
        "redis",
        format!("redis-naive:{}", support::redis_target(&url)),
        Mode::Naive,
    )
    .run_all();
}

#[cfg(feature = "amqp")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_naive_on_rabbitmq() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    Env::new("rabbitmq", format!("amqp-naive:{url}"), Mode::Naive).run_all();
}

#[cfg(feature = "nats")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_naive_on_nats() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_NATS_URL") else {
        return;
    };
    Env::new("nats", format!("nats-naive:{url}"), Mode::Naive).run_all();
}

/// Stands for the RabbitMQ and NATS scenarios in a build without their features, so the
/// runner reports them as skipped with the reason; run with `--include-ignored`, it fails.
#[cfg(not(all(feature = "amqp", feature = "nats")))]
#[test]
#[ignore = "not built: the RabbitMQ and NATS scenarios need --features amqp,nats (cargo xtask test builds --all-features)"]
fn s9_broker_stores_need_their_features() {
    panic!(
        "the RabbitMQ and NATS scenarios are not in this build: build with `--features amqp,nats`"
    );
}

#[cfg(feature = "postgres")]
#[test]
#[ignore = "failure scenario (slow suite): ANARCHON_SLOW=1 cargo xtask test, or cargo xtask scenarios"]
fn s9_lease_on_postgres() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_POSTGRES_URL") else {
        return;
    };
    Env::new("postgres", format!("postgres:{url}"), Mode::Lease).run_all();
}

/// Stands for the Redis and PostgreSQL scenarios in a build without their features (see
/// `s9_broker_stores_need_their_features`).
#[cfg(not(all(feature = "redis", feature = "postgres")))]
#[test]
#[ignore = "not built: the Redis and PostgreSQL scenarios need --features redis,postgres (cargo xtask test builds --all-features)"]
fn s9_other_stores_need_their_features() {
    panic!(
        "the Redis and PostgreSQL scenarios (and the naive column) are not in this build: build \
         with `--features redis,postgres`"
    );
}
