//! Scheduler API tests on the in-memory store: registration errors, claim-only mode,
//! watchdog, clock skew, store timeouts, adding and removing jobs while running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anarchon_core::memory::{Health, MemoryStore};
use anarchon_core::testkit::runtime::{Instance, node, record_events, wait_for};
use anarchon_core::{
    ClaimOnly, Clock, Error, ErrorKind, Event, JobConfig, LeaseStore, Reason, RunStatus, Scheduler,
    SchedulerState, SkipReason, StoreOperation,
};

fn sched() -> Scheduler {
    Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .build()
        .unwrap()
}

fn ok()
-> impl Fn(anarchon_core::JobContext) -> futures::future::Ready<Result<(), anarchon_core::HandlerError>>
+ Send
+ Sync
+ 'static {
    |_ctx| futures::future::ready(Ok(()))
}

/// A scheduler on `store` that gives up on a store call after 500 ms, with no jitter and no
/// catch-up, on tokio's (paused) clock.
fn quick_timeouts(store: &MemoryStore) -> Scheduler {
    Scheduler::leased(store.clone())
        .store_timeout(Duration::from_millis(500))
        .jitter(Duration::from_millis(0))
        .catch_up_window(Duration::from_millis(0))
        .clock(Clock::tokio())
        .build()
        .unwrap()
}

/// Every event the scheduler emits from now on, in order.
fn collect_events(s: &Scheduler) -> Arc<Mutex<Vec<Event>>> {
    let mut rx = s.events();
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    tokio::spawn(async move {
        while let Ok(e) = rx.recv().await {
            o.lock().unwrap().push(e);
        }
    });
    out
}

#[tokio::test]
async fn b01_bad_intervals_are_refused_naming_the_input() {
    let s = sched();
    for bad in ["", "0s", "-5s", "10", "ten seconds", "5x"] {
        let err = s.every("j", bad).handler(ok()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInterval { .. }),
            "{bad:?}: {err}"
        );
        assert!(
            err.to_string().contains(&format!("{bad:?}")),
            "message names the input: {err}"
        );
    }
    assert!(s.every("j", Duration::ZERO).handler(ok()).is_err());
    assert!(s.every("j", 0u64).handler(ok()).is_err());
    s.every("j", 250u64).handler(ok()).unwrap();
}

#[tokio::test]
async fn b02_bad_cron_and_b06_unknown_timezone_are_refused() {
    let s = sched();
    let err = s.cron("c", "61 * * * *").handler(ok()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidCron { .. }) && err.to_string().contains("61 * * * *"),
        "{err}"
    );
    let err = s
        .cron("c", "0 3 * * *")
        .timezone("Mars/Olympus")
        .handler(ok())
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownTimezone { .. }) && err.to_string().contains("Mars/Olympus"),
        "{err}"
    );
    let err = Scheduler::leased(MemoryStore::new())
        .timezone("Nowhere")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("Nowhere"));
    s.cron("c", "0 3 * * *")
        .timezone("Europe/Berlin")
        .handler(ok())
        .unwrap();
    s.cron("c6", "*/5 * * * * *").handler(ok()).unwrap();
}

#[tokio::test]
async fn b03_bad_at_is_refused_and_b04_names_are_checked() {
    let s = sched();
    let err = s.at("a", "tomorrow-ish").handler(ok()).unwrap_err();
    assert!(matches!(err, Error::InvalidAt { .. }) && err.to_string().contains("tomorrow-ish"));
    s.at("a", "2030-01-01T00:00:00Z").handler(ok()).unwrap();
    for bad in ["", "has space", "slash/name", "ü", &"x".repeat(129)] {
        let err = s.every(bad, "1s").handler(ok()).unwrap_err();
        assert!(matches!(err, Error::InvalidJobName { .. }), "{bad:?}");
    }
    s.every(&"x".repeat(128), "1s").handler(ok()).unwrap();
    let err = s.every("a", "1s").handler(ok()).unwrap_err();
    assert!(matches!(err, Error::DuplicateJob { .. }), "{err}");
}

#[tokio::test]
async fn b13_heartbeat_must_be_under_half_the_lease() {
    let err = Scheduler::leased(MemoryStore::new())
        .lease(Duration::from_secs(1))
        .heartbeat(Duration::from_millis(500))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "heartbeat",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        Scheduler::leased(MemoryStore::new())
            .lease(Duration::from_secs(1))
            .heartbeat(Duration::from_millis(499))
            .build()
            .is_ok()
    );
    let err = Scheduler::leased(MemoryStore::new())
        .max_attempts(0)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidOption {
            option: "max_attempts",
            ..
        }
    ));
}

#[tokio::test]
async fn b22_lease_options_from_config_are_refused_on_a_claim_only_store() {
    let s: Scheduler<ClaimOnly> = Scheduler::claim_only(MemoryStore::new()).build().unwrap();
    let cfg: JobConfig = serde_json::from_str(r#"{"overlap": "allow"}"#).unwrap();
    let err = s.every("j", "1s").config(cfg).handler(ok()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "overlap",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("claim-only"), "{err}");
    for field in [
        r#"{"maxAttempts": 2}"#,
        r#"{"catchUpWindow": 0}"#,
        r#"{"historyTtl": 5}"#,
    ] {
        let cfg: JobConfig = serde_json::from_str(field).unwrap();
        assert!(
            s.every("k", "1s").config(cfg).handler(ok()).is_err(),
            "{field}"
        );
    }
    let cfg: JobConfig = serde_json::from_str(r#"{"jitter": 10, "historySize": 5}"#).unwrap();
    s.every("j", "1s").config(cfg).handler(ok()).unwrap();
    // The `*Ms` keys of earlier drafts are unknown keys now.
    for old in [
        r#"{"jitterMs": 10}"#,
        r#"{"maxLateMs": 10}"#,
        r#"{"historyTtlMs": 10}"#,
        r#"{"timeoutMs": 10}"#,
        r#"{"catchUpMs": 10}"#,
        r#"{"offsetMs": 10}"#,
        r#"{"leaseMs": 10}"#,
        r#"{"heartbeatMs": 10}"#,
    ] {
        assert!(serde_json::from_str::<JobConfig>(old).is_err(), "{old}");
    }
    // An `at` job cannot overlap, even from configuration on a lease store. [B-03]
    let l = sched();
    let cfg: JobConfig = serde_json::from_str(r#"{"overlap": "allow"}"#).unwrap();
    assert!(l.at("once", 0i64).config(cfg).handler(ok()).is_err());
    assert!(
        serde_json::from_str::<JobConfig>(r#"{"bogus": 1}"#).is_err(),
        "unknown option names are refused"
    );
}

#[tokio::test(start_paused = true)]
async fn b11_claim_only_store_runs_each_slot_once_with_no_takeover() {
    let store = MemoryStore::new();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut nodes = Vec::new();
    for i in 0..3 {
        let s = Scheduler::claim_only(store.clone())
            .instance_id(format!("c{i}"))
            .jitter(Duration::from_millis(50))
            .clock(Clock::tokio())
            .build()
            .unwrap();
        let runs = runs.clone();
        s.every("tick", "1s")
            .handler(move |ctx| {
                runs.lock().unwrap().push(ctx.slot_ms());
                assert_eq!((ctx.attempt, ctx.fence), (1, 0));
                async { Ok(()) }
            })
            .unwrap();
        s.start().await.unwrap();
        nodes.push(s);
    }
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    for s in &nodes {
        s.stop(Duration::from_secs(1)).await.unwrap();
    }
    let mut slots = runs.lock().unwrap().clone();
    let n = slots.len();
    slots.sort_unstable();
    slots.dedup();
    assert!(
        n >= 3 && slots.len() == n,
        "{n} runs, {} distinct",
        slots.len()
    );
    let h = nodes[0].history("tick", 10).await.unwrap();
    assert_eq!(h.len(), n, "every run recorded");
}

#[tokio::test(start_paused = true)]
async fn b04_jobs_can_be_added_and_removed_while_running() {
    let s = sched();
    let count = Arc::new(AtomicUsize::new(0));
    s.start().await.unwrap();
    let c = count.clone();
    s.every("late", "1s")
        .jitter(Duration::from_millis(0))
        .handler(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .unwrap();
    assert_eq!(s.jobs().len(), 1);
    assert!(s.next_run("late").unwrap().unwrap().timestamp_millis() % 1000 == 0);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let seen = count.load(Ordering::SeqCst);
    assert!(seen >= 2, "{seen}");
    s.remove("late").unwrap();
    assert!(matches!(s.remove("late"), Err(Error::UnknownJob { .. })));
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        seen,
        "a removed job kept running"
    );
    s.stop(Duration::from_secs(1)).await.unwrap();
    assert!(matches!(s.start().await, Err(Error::State { .. })));
}

/// A call the scheduler's state does not allow names that state as a `SchedulerState`, and
/// its message says which state and what to do.
#[tokio::test(start_paused = true)]
async fn wrong_state_calls_name_the_state() {
    let s = sched();
    s.every("j", "1s").handler(ok()).unwrap();
    let state = |r: Result<_, Error>| match r {
        Err(Error::State { state, .. }) => state,
        other => panic!("expected Error::State, got {other:?}"),
    };
    let early = s.run_now("j", None).await.map(drop);
    assert_eq!(state(early), SchedulerState::NotStarted);
    s.start().await.unwrap();
    let twice = s.start().await.unwrap_err();
    assert!(
        twice
            .to_string()
            .starts_with("the scheduler is running: call start() once"),
        "{twice}"
    );
    assert_eq!(state(Err(twice)), SchedulerState::Running);
    s.stop(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(s.start().await), SchedulerState::Stopped);
    assert_eq!(
        state(s.run_now("j", None).await.map(drop)),
        SchedulerState::Stopped
    );
    let late = s.every("k", "1s").handler(ok()).map(drop).unwrap_err();
    assert!(late.to_string().contains("is stopped"), "{late}");
    assert_eq!(state(Err(late)), SchedulerState::Stopped);
}

/// An `at` time in the past names how late a run could still start, as a `Duration`.
#[test]
fn at_in_the_past_carries_its_grace_as_a_duration() {
    let s = Scheduler::leased(MemoryStore::new())
        .max_late(Duration::from_secs(90))
        .catch_up_window(Duration::ZERO)
        .build()
        .unwrap();
    let err = s.at("old", 1_000i64).handler(ok()).map(drop).unwrap_err();
    match &err {
        Error::AtInThePast { grace, .. } => assert_eq!(*grace, Duration::from_secs(90)),
        other => panic!("expected AtInThePast, got {other:?}"),
    }
    assert!(err.to_string().contains("at most 90s late"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn s11_hung_store_calls_time_out_and_are_reported() {
    let store = MemoryStore::new();
    let s = quick_timeouts(&store);
    let events = collect_events(&s);
    s.every("j", "1s").handler(ok()).unwrap();
    s.start().await.unwrap();
    store.set_health(Health::Hanging);
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let errors: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| {
            if let Event::Error {
                operation: StoreOperation::Claim,
                kind: ErrorKind::Timeout,
                message,
                ..
            } = e
            {
                Some(message.clone())
            } else {
                None
            }
        })
        .collect();
    assert!(
        !errors.is_empty() && errors[0].contains("did not answer `claim` within 500ms"),
        "{errors:?}"
    );
    assert!(s.health().last_error.is_some());
    store.set_health(Health::Healthy);
    s.stop(Duration::from_secs(1)).await.unwrap();
    // Start against a dead store fails within the timeout, naming it.
    let dead = MemoryStore::new();
    dead.set_health(Health::Unavailable);
    let s2 = Scheduler::leased(dead).build().unwrap();
    assert!(matches!(s2.start().await, Err(Error::Unavailable { .. })));
}

#[test]
fn s11_watchdog_reports_a_blocked_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = Scheduler::leased(MemoryStore::new())
            .stall_after(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut rx = s.events();
        s.start().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(s.health().is_healthy());
        // Block the only runtime thread: the driver cannot turn.
        std::thread::sleep(Duration::from_millis(900));
        assert!(s.health().stalled, "{:?}", s.health());
        let mut stalled = false;
        while let Ok(e) = rx.try_recv() {
            stalled |= matches!(e, Event::Stalled { idle } if idle >= Duration::from_millis(200));
        }
        assert!(stalled, "no stalled event");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!s.health().stalled, "recovers once the loop turns again");
        s.stop(Duration::from_secs(1)).await.unwrap();
    });
}

/// A result whose write timed out is sent once more: the run is recorded as it ended
/// (attempt 1, succeeded) instead of being left running until a backup ran it again.
#[tokio::test(start_paused = true)]
async fn s11_a_result_whose_write_timed_out_is_written_once_more() {
    let store = MemoryStore::new();
    let s = quick_timeouts(&store);
    let events = collect_events(&s);
    let first_slot = Arc::new(Mutex::new(None));
    let (hang, slot_seen) = (store.clone(), first_slot.clone());
    s.every("j", "1s")
        .handler(move |ctx| {
            let mut seen = slot_seen.lock().unwrap();
            if seen.is_none() {
                // The store stops answering as this run ends, so its result write times
                // out; it answers again 250 ms later, before the write's 500 ms are over.
                *seen = Some(ctx.slot_ms());
                hang.set_health(Health::Hanging);
                let back = hang.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    back.set_health(Health::Healthy);
                });
            }
            futures::future::ready(Ok(()))
        })
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let slot = first_slot.lock().unwrap().expect("the job ran");
    let events = events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Error {
                operation: StoreOperation::Finish,
                ..
            }
        )),
        "the first result write did not fail: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Success { run, .. } if run.slot_ms() == slot)),
        "the run's success was never reported: {events:?}"
    );
    let history = s.history("j", 20).await.unwrap();
    let attempts: Vec<_> = history.iter().filter(|r| r.slot_ms() == slot).collect();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].attempt, 1);
    assert_eq!(attempts[0].status, RunStatus::Succeeded, "{attempts:?}");
    s.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn b20_clock_skew_beyond_the_threshold_is_reported() {
    // A store whose clock runs 5 s ahead of this instance.
    let store = MemoryStore::starting_at(Clock::System.now_ms() + 5_000);
    let s = Scheduler::leased(store).build().unwrap();
    let mut rx = s.events();
    s.start().await.unwrap();
    let e = rx.try_recv().expect("an event");
    assert!(
        matches!(e, Event::ClockSkew { skew } if (-5_100..=-4_900).contains(&skew.num_milliseconds())),
        "{e:?}"
    );
    s.stop(Duration::from_secs(1)).await.unwrap();
    let fine = Scheduler::leased(MemoryStore::new()).build().unwrap();
    let mut rx = fine.events();
    fine.start().await.unwrap();
    assert!(rx.try_recv().is_err(), "no skew event when clocks agree");
    fine.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn b03_at_job_runs_once_and_b06_cron_with_seconds_fires_each_second() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let inst = Instance::new(store.clone());
    let s = node(&inst, "n")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    let events = record_events(&s);
    let at = Clock::tokio().now_ms() + 1_500;
    s.at("once", at).handler(ok()).unwrap();
    s.cron("sec", "* * * * * *").handler(ok()).unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_200)).await;
    s.stop(Duration::from_secs(1)).await.unwrap();
    let ev = events.lock().unwrap().clone();
    let starts = |job: &str| {
        ev.iter()
            .filter(|e| matches!(e, Event::Start(r) if r.job.as_str() == job))
            .count()
    };
    assert_eq!(starts("once"), 1);
    assert!((4..=5).contains(&starts("sec")), "{}", starts("sec"));
    assert!(s.next_run("once").unwrap().is_none());
    assert!(ev.iter().all(|e| !matches!(
        e,
        Event::Skip {
            reason: SkipReason::Late,
            ..
        }
    )));
    let h = s.history("once", 5).await.unwrap();
    assert_eq!(
        (h.len(), h[0].slot_ms(), h[0].reason),
        (1, at, Reason::Scheduled)
    );
}

#[tokio::test(start_paused = true)]
async fn b38_an_error_nobody_listens_to_is_logged() {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = MemoryStore::new();
    let s = Scheduler::leased(store.clone())
        .jitter(Duration::from_millis(0))
        .catch_up_window(Duration::from_millis(0))
        .clock(Clock::tokio())
        .build()
        .unwrap();
    s.every("j", "1s").handler(ok()).unwrap();
    s.start().await.unwrap();
    store.set_health(Health::Unavailable);
    wait_for(3_000, || {
        String::from_utf8_lossy(&buf.0.lock().unwrap()).contains("ERROR")
    })
    .await;
    let log = String::from_utf8_lossy(&buf.0.lock().unwrap()).to_string();
    assert!(
        log.contains("ERROR") && log.contains("memory store is unavailable"),
        "{log}"
    );
    store.set_health(Health::Healthy);
    s.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn b37_a_stopped_claim_only_run_is_recorded_interrupted() {
    let store = MemoryStore::new();
    let s = Scheduler::claim_only(store.clone())
        .jitter(Duration::from_millis(0))
        .clock(Clock::tokio())
        .build()
        .unwrap();
    let mut rx = s.events();
    s.every("wait", "1s")
        .handler(|ctx| async move {
            ctx.signal.cancelled().await;
            Ok(ctx.check_cancelled()?)
        })
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    s.stop(Duration::from_secs(1)).await.unwrap();
    // Claim-only stores have no overlap check: one or two slots may have started by now.
    let h = s.history("wait", 5).await.unwrap();
    assert!(!h.is_empty(), "no run recorded");
    for r in &h {
        assert_eq!(
            (r.status, r.error.as_deref()),
            (anarchon_core::RunStatus::Interrupted, Some("stopped")),
            "{h:?}"
        );
    }
    let mut interrupted = false;
    while let Ok(e) = rx.try_recv() {
        interrupted |= matches!(e, Event::Interrupted { ref cause, .. } if *cause == anarchon_core::InterruptCause::Stopped);
    }
    assert!(interrupted);
}

/// Configuration takes lengths as text or milliseconds, refuses the drafts' `...Ms` keys as
/// unknown, and names the key of a value it cannot read.
#[test]
fn job_config_reads_humane_lengths_and_names_bad_keys() {
    let cfg: JobConfig = serde_json::from_str(
        r#"{"jitter": "1s", "maxLate": 90000, "timeout": "1h30m", "catchUpWindow": "0s", "offset": "250ms"}"#,
    )
    .unwrap();
    assert_eq!(cfg.jitter, Some(Duration::from_secs(1)));
    assert_eq!(cfg.max_late, Some(Duration::from_secs(90)));
    assert_eq!(cfg.timeout, Some(Duration::from_secs(5400)));
    assert_eq!(cfg.catch_up_window, Some(Duration::ZERO));
    assert_eq!(cfg.offset, Some(Duration::from_millis(250)));
    let old = serde_json::from_str::<JobConfig>(r#"{"jitterMs": 10}"#).unwrap_err();
    assert!(old.to_string().contains("jitterMs"), "{old}");
    for (text, key) in [
        (r#"{"maxLate": "soon"}"#, "`maxLate`"),
        (r#"{"jitter": -5}"#, "`jitter`"),
        (r#"{"timeout": true}"#, "`timeout`"),
        (r#"{"historyTtl": "1.5h"}"#, "`historyTtl`"),
        (r#"{"timezone": "Europe/Atlantis"}"#, "Europe/Atlantis"),
    ] {
        let err = serde_json::from_str::<JobConfig>(text)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

/// Kinds and causes are enums with their names as text.
#[test]
fn kinds_and_causes_are_enums() {
    let s = sched();
    s.every("e", "1s").handler(ok()).unwrap();
    s.cron("c", "* * * * *").handler(ok()).unwrap();
    let kinds: Vec<_> = s.jobs().iter().map(|j| j.kind).collect();
    assert!(kinds.contains(&anarchon_core::JobKind::Every));
    assert!(kinds.contains(&anarchon_core::JobKind::Cron));
    assert_eq!(anarchon_core::JobKind::Every.to_string(), "every");
    assert_eq!(
        anarchon_core::InterruptCause::HandedOver.to_string(),
        "handed over"
    );
}

/// [B-14] An instance that dies with several runs leaves them to a backup that takes them
/// over together: on a store that batches takeovers, in fewer calls than runs.
#[tokio::test(start_paused = true)]
async fn b14_runs_of_a_dead_instance_are_taken_over_in_batches() {
    // A fixed start one second after a minute: read from the system clock, the takeovers
    // (due once the lease expires, seconds after the crash) could meet the next slot of
    // these minute jobs, which replaces the runs instead (seen once in CI at hh:mm:5x).
    let start_ms: i64 = 1_796_083_201_000; // 2026-12-01T00:00:01Z
    let clock = Clock::Tokio {
        anchor_ms: start_ms,
        anchor: tokio::time::Instant::now(),
    };
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::starting_at(start_ms));
    assert!(store.limits().takeovers > 1, "the memory store batches");
    let (ia, ib) = (Instance::new(store.clone()), Instance::new(store));
    let long = |_ctx: anarchon_core::JobContext| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<(), anarchon_core::HandlerError>(())
    };
    let a = node(&ia, "a").clock(clock).build().unwrap();
    let b = node(&ib, "b").clock(clock).build().unwrap();
    let jobs = ["t1", "t2", "t3", "t4", "t5"];
    for job in jobs {
        a.every(job, "60s").handler(long).unwrap();
        b.every(job, "60s").handler(long).unwrap();
    }
    let eb = record_events(&b);
    // `a` alone catches every job's last slot up, then `b` starts and watches those runs.
    a.start().await.unwrap();
    assert!(wait_for(2_000, || a.health().leases_held == jobs.len() as u64).await);
    b.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.crash();
    let all = wait_for(10_000, || {
        eb.lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::Start(r) if r.reason == Reason::Takeover))
            .count()
            == jobs.len()
    })
    .await;
    b.stop(Duration::from_secs(1)).await.ok();
    assert!(all, "every run was taken over: {:#?}", eb.lock().unwrap());
    // A takeover may be tried again (answered `live` once); what matters is that they went
    // out together: fewer calls than takeovers.
    assert!(ib.takeovers() >= jobs.len());
    assert!(
        ib.takeover_batches() < ib.takeovers() && ib.takeover_batches() >= 1,
        "{} takeovers went out in {} calls",
        ib.takeovers(),
        ib.takeover_batches()
    );
}

/// [B-45] A run whose handler's fenced transaction recorded the success gets no second
/// write from the scheduler, whatever the handler returns; the success is reported. (The
/// in-memory store holds no fenced transaction: the handler only marks the context, so the
/// store shows that nothing was written after the claim.)
#[tokio::test]
async fn b45_a_run_finished_in_its_own_transaction_is_not_written_again() {
    let store = MemoryStore::new();
    let s = quick_timeouts(&store);
    let events = collect_events(&s);
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    s.every("j", "1s")
        .handler(move |ctx| {
            let key = ctx.attempt_key().ok();
            seen.lock().unwrap().push((ctx.slot_ms(), ctx.fence, key));
            ctx.mark_finished_in_transaction();
            assert!(ctx.is_finished_in_transaction());
            futures::future::ready(Err(anarchon_core::HandlerError::msg(
                "returned after the commit: ignored",
            )))
        })
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    s.stop(Duration::from_secs(1)).await.unwrap();
    let keys = keys.lock().unwrap().clone();
    let (slot, fence, key) = keys.first().cloned().expect("the job ran");
    let key = key.expect("a leased run has an attempt key");
    assert_eq!((key.run.slot, key.attempt, key.fence), (slot, 1, fence));
    assert_eq!(key.instance_id, s.instance_id().to_string());
    let events = events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Success { run, .. } if run.slot_ms() == slot)),
        "the success was not reported: {events:?}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::Failure { .. })),
        "the handler's error after its commit was recorded: {events:?}"
    );
    let history = s.history("j", 20).await.unwrap();
    let record = history
        .iter()
        .find(|r| r.slot_ms() == slot)
        .expect("the claim's record");
    assert_eq!(
        record.status,
        RunStatus::Running,
        "the scheduler wrote a result over the transaction's: {record:?}"
    );
}

#[tokio::test]
async fn b45_a_manual_run_has_no_attempt_to_fence() {
    let s = sched();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    s.every("j", "1h")
        .handler(move |ctx| {
            // Only the manual run (the job's own slot may fall due in the test at an hour
            // boundary).
            if ctx.manual {
                seen.lock()
                    .unwrap()
                    .push(ctx.attempt_key().unwrap_err().to_string());
            }
            futures::future::ready(Ok(()))
        })
        .unwrap();
    s.start().await.unwrap();
    s.run_now("j", None).await.unwrap();
    s.stop(Duration::from_secs(1)).await.unwrap();
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("manual run") && errors[0].contains("plain transaction"),
        "{errors:?}"
    );
}
