//! Metrics seen from outside (feature `metrics`): a debugging recorder records the metrics
//! of a claim, a graceful handover and the backup's takeover, and of slots a late timer
//! passed over.
#![cfg(feature = "metrics")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anarchon_core::memory::MemoryStore;
use anarchon_core::testkit::runtime::{Instance, node, wait_for};
use anarchon_core::{Clock, HandlerError, JobContext, LeaseStore};
use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use anarchon_core::testkit::runtime::record_events;
use anarchon_core::{Event, InterruptCause};

type Key = (String, Vec<(String, String)>);

fn snapshot(recorder: &DebuggingRecorder) -> HashMap<Key, DebugValue> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            ((key.name().to_string(), labels), value)
        })
        .collect()
}

/// The values of `name` whose labels include every one of `labels`.
fn matching<'a>(
    m: &'a HashMap<Key, DebugValue>,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = &'a DebugValue> + 'a {
    m.iter()
        .filter(move |((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, v)| v)
}

fn counter(m: &HashMap<Key, DebugValue>, name: &str, labels: &[(&str, &str)]) -> u64 {
    matching(m, name, labels)
        .map(|v| match v {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

fn histogram_len(m: &HashMap<Key, DebugValue>, name: &str, labels: &[(&str, &str)]) -> usize {
    matching(m, name, labels)
        .map(|v| match v {
            DebugValue::Histogram(h) => h.len(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .sum()
}

/// [G-12, B-14, B-17] Claims by outcome, the graceful handover, the backup's takeover,
/// latencies and gauges reach the metrics recorder.
#[test]
fn claims_handover_takeover_and_latencies_are_counted() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let events = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let clock = Clock::tokio();
            let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
            let inst = Instance::new(store);
            // A long handler that gives up when asked to stop: its run is handed over.
            let long = |ctx: JobContext| async move {
                ctx.signal.cancelled().await;
                ctx.check_cancelled()?;
                Ok::<(), HandlerError>(())
            };
            let a = node(&inst, "a").clock(clock).build().unwrap();
            a.every("sync", "4s").handler(long).unwrap();
            let b = node(&inst, "b").clock(clock).build().unwrap();
            b.every("sync", "4s").handler(long).unwrap();
            let ea = record_events(&a);
            let eb = record_events(&b);
            a.start().await.unwrap();
            b.start().await.unwrap();
            let started = |e: &Arc<Mutex<Vec<Event>>>| {
                e.lock()
                    .unwrap()
                    .iter()
                    .any(|e| matches!(e, Event::Start(_)))
            };
            assert!(wait_for(10_000, || started(&ea) || started(&eb)).await);
            // Whoever runs it stops gracefully: the run is handed over to the other.
            let (owner, backup, eo, eb2) = if started(&ea) {
                (a, b, ea, eb)
            } else {
                (b, a, eb, ea)
            };
            // A few heartbeats renew the run's lease first.
            tokio::time::sleep(Duration::from_millis(700)).await;
            owner.stop(Duration::from_secs(5)).await.unwrap();
            let took_over = wait_for(5_000, || {
                eb2.lock().unwrap().iter().any(
                    |e| matches!(e, Event::Start(r) if r.reason == anarchon_core::Reason::Takeover),
                )
            })
            .await;
            assert!(
                took_over,
                "the backup took the run over: owner {:#?} backup {:#?}",
                eo.lock().unwrap(),
                eb2.lock().unwrap()
            );
            let _ = backup.stop(Duration::from_secs(1)).await;
            let handed = eo.lock().unwrap().iter().any(|e| {
                matches!(e, Event::Interrupted { cause, .. } if *cause == InterruptCause::HandedOver)
            });
            assert!(handed, "the owner handed over: {:#?}", eo.lock().unwrap());
            (owner.instance_id().to_string(), backup.instance_id().to_string())
        })
    });
    let (owner, backup) = events;
    let m = snapshot(&recorder);
    let o = owner.as_str();
    let b = backup.as_str();
    assert_eq!(
        counter(
            &m,
            "anarchon_claims_total",
            &[("instance", o), ("outcome", "won")]
        ),
        1,
        "{m:#?}"
    );
    assert!(
        counter(
            &m,
            "anarchon_claims_total",
            &[("instance", b), ("outcome", "taken")]
        ) >= 1
    );
    assert_eq!(
        counter(
            &m,
            "anarchon_handovers_total",
            &[("instance", o), ("job", "sync")]
        ),
        1
    );
    assert_eq!(
        counter(
            &m,
            "anarchon_takeovers_total",
            &[("instance", b), ("job", "sync")]
        ),
        1
    );
    assert_eq!(
        counter(&m, "anarchon_takeovers_total", &[("instance", o)]),
        0
    );
    assert!(histogram_len(&m, "anarchon_start_lag_seconds", &[("instance", o)]) >= 1);
    assert!(
        histogram_len(
            &m,
            "anarchon_start_lag_seconds",
            &[("instance", b), ("reason", "takeover")]
        ) >= 1
    );
    assert!(histogram_len(&m, "anarchon_store_call_seconds", &[("operation", "claim")]) >= 2);
    assert!(
        histogram_len(
            &m,
            "anarchon_store_call_seconds",
            &[("operation", "heartbeat")]
        ) >= 1
    );
    assert!(
        histogram_len(
            &m,
            "anarchon_handler_seconds",
            &[("instance", o), ("job", "sync")]
        ) >= 1
    );
    assert!(
        counter(
            &m,
            "anarchon_runs_finished_total",
            &[("instance", o), ("status", "interrupted")]
        ) >= 1
    );
    let gauges: Vec<_> = m
        .iter()
        .filter(|((n, _), _)| n == "anarchon_runs_owned" || n == "anarchon_runs_watched")
        .collect();
    assert!(gauges.len() >= 2, "both gauges are published: {gauges:?}");
}

/// [B-10, B-38] A slot the timer reached after a newer one was due is a `skip: late` event
/// and counted, in `health()` and the metric alike.
#[test]
fn a_timer_that_fires_after_the_next_slot_is_due_counts_the_slots_late() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let late = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            // The instance's clock jumps 10 s ahead of the timers (a process paused, then
            // resumed): the armed slot and the ones after it are due at once.
            let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
            let inst = Instance::new(store);
            let clock = Clock::tokio();
            let s = node(&inst, "a").clock(clock).build().unwrap();
            s.every("tick", "1s")
                .handler(|_ctx: JobContext| async move { Ok::<(), HandlerError>(()) })
                .unwrap();
            let events = record_events(&s);
            s.start().await.unwrap();
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            // Block the runtime's thread: no timer fires for 5 s of real time... under a
            // paused clock, an `advance` without yielding does the same.
            tokio::time::advance(Duration::from_millis(5_000)).await;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            s.stop(Duration::from_secs(5)).await.unwrap();
            let skipped = events
                .lock()
                .unwrap()
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        Event::Skip {
                            reason: anarchon_core::SkipReason::Late,
                            ..
                        }
                    )
                })
                .count();
            (skipped, s.health().slots_late)
        })
    });
    let (skip_events, health_late) = late;
    let m = snapshot(&recorder);
    let counted = counter(&m, "anarchon_slots_late_total", &[("job", "tick")]);
    assert!(skip_events >= 1, "a skip: late event");
    assert_eq!(counted, health_late, "health and the metric agree");
    assert!(counted >= 4, "the slots passed over are counted: {counted}");
}
