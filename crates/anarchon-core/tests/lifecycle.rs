//! Scheduler lifecycle on the in-memory store: extreme `at` instants, handlers that outlive
//! their timeout, dropping the last handle, a parent cancellation token, and store outages
//! reported through `health()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anarchon_core::memory::MemoryStore;
use anarchon_core::testkit::runtime::{Instance, node, wait_for};
use anarchon_core::{CancellationToken, Clock, LeaseStore, Reason, RunStatus, Scheduler};

/// Sets its flag when dropped: tells whether a handler's task was aborted.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn s11_an_at_far_in_the_future_never_fires_and_breaks_nothing() {
    let s = Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .jitter(Duration::from_millis(0))
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    // Either refused with a typed error or accepted and simply never due.
    let far = s.at("far", i64::MAX).handler(|_ctx| async { Ok(()) });
    if let Err(e) = &far {
        assert!(!e.to_string().is_empty());
    }
    let r = runs.clone();
    s.every("tick", "1s")
        .handler(move |_ctx| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(runs.load(Ordering::SeqCst) >= 3, "the other job stopped");
    assert!(s.health().running, "{:?}", s.health());
    s.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn b21_a_handler_past_its_timeout_is_aborted_after_the_grace() {
    let store = MemoryStore::new();
    let s = Scheduler::leased(store.clone())
        .clock(Clock::tokio())
        .jitter(Duration::from_millis(0))
        .catch_up_window(Duration::from_millis(0))
        .abort_grace(Duration::from_millis(1_000))
        .build()
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (d, st) = (dropped.clone(), started.clone());
    s.every("stuck", "1h")
        .timeout(Duration::from_millis(500))
        .handler(move |_ctx| {
            let flag = DropFlag(d.clone());
            st.store(true, Ordering::SeqCst);
            async move {
                // Ignores its signal and never returns.
                let _flag = flag;
                std::future::pending::<()>().await;
                Ok(())
            }
        })
        .unwrap();
    s.start().await.unwrap();
    s.run_now("stuck", None).await.ok();
    assert!(started.load(Ordering::SeqCst));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!dropped.load(Ordering::SeqCst), "aborted before the grace");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "a handler past its timeout + grace must be aborted"
    );
    let h = s.history("stuck", 5).await.unwrap();
    assert_eq!(h[0].status, RunStatus::Failed);
    assert_eq!(h[0].error.as_deref(), Some("timed out"));
    s.stop(Duration::from_secs(1)).await.unwrap();
}

/// Who started which attempt, and why.
type Starts = Arc<std::sync::Mutex<Vec<(String, u32, Reason)>>>;

/// Two instances on one store; `a` runs a long job that hands over when cancelled.
async fn runner_and_backup(
    store: &Arc<dyn LeaseStore>,
    a_builder: impl FnOnce(
        anarchon_core::SchedulerBuilder<anarchon_core::Leased>,
    ) -> anarchon_core::SchedulerBuilder<anarchon_core::Leased>,
    starts: &Starts,
) -> (
    Scheduler<anarchon_core::Leased>,
    Scheduler<anarchon_core::Leased>,
) {
    let clock = Clock::tokio();
    let mk = |id: &str| {
        let starts = starts.clone();
        let id = id.to_owned();
        move |ctx: anarchon_core::JobContext| {
            starts
                .lock()
                .unwrap()
                .push((id.clone(), ctx.attempt, ctx.reason));
            async move {
                ctx.signal.cancelled().await;
                Err(ctx.check_cancelled().unwrap_err().into())
            }
        }
    };
    let a = a_builder(node(&Instance::new(store.clone()), "a").clock(clock))
        .build()
        .unwrap();
    a.every("long", "2s").handler(mk("a")).unwrap();
    let b = node(&Instance::new(store.clone()), "b")
        .clock(clock)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every("long", "2s").handler(mk("b")).unwrap();
    a.start().await.unwrap();
    assert!(
        wait_for(2_500, || !starts.lock().unwrap().is_empty()).await,
        "a did not start"
    );
    b.start().await.unwrap();
    (a, b)
}

#[tokio::test(start_paused = true)]
async fn b17_dropping_the_last_handle_stops_the_scheduler_and_hands_runs_over() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let starts = Arc::default();
    let (a, b) = runner_and_backup(&store, |b| b, &starts).await;
    let a2 = a.clone();
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(starts.lock().unwrap().len(), 1, "a clone keeps it running");
    drop(a2);
    assert!(
        wait_for(600, || starts.lock().unwrap().len() == 2).await,
        "the run was not handed over within a heartbeat: {:?}",
        starts.lock().unwrap()
    );
    assert_eq!(
        starts.lock().unwrap()[1],
        ("b".to_owned(), 2, Reason::Takeover)
    );
    b.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn b17_a_cancelled_parent_token_stops_the_scheduler() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let starts = Arc::default();
    let token = CancellationToken::new();
    let t = token.clone();
    let (a, b) = runner_and_backup(&store, move |b| b.stop_on(t), &starts).await;
    token.cancel();
    assert!(
        wait_for(600, || starts.lock().unwrap().len() == 2).await,
        "the run was not handed over: {:?}",
        starts.lock().unwrap()
    );
    assert!(
        wait_for(500, || !a.health().running).await,
        "{:?}",
        a.health()
    );
    a.stop(Duration::from_secs(1)).await.unwrap();
    b.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn s11_health_reports_an_outage_and_the_recovery_catches_up_the_missed_slot() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let inst = Instance::new(store.clone());
    let clock = Clock::tokio();
    let s = node(&inst, "a")
        .clock(clock)
        .catch_up_window(Duration::from_secs(10))
        .build()
        .unwrap();
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let st = starts.clone();
    s.every("job", "4s")
        .handler(move |ctx| {
            st.lock().unwrap().push((ctx.slot_ms(), ctx.reason));
            async { Ok(()) }
        })
        .unwrap();
    s.start().await.unwrap();
    // Let the start-up catch-up pass, then go down just before a slot.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let now = clock.now_ms();
    let mut slot = (now / 4_000 + 1) * 4_000;
    if slot - now < 600 {
        slot += 4_000;
    }
    tokio::time::sleep(Duration::from_millis((slot - now - 300) as u64)).await;
    inst.fail_all(true);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let h = s.health();
    assert!(!h.store_reachable && !h.is_healthy(), "{h:?}");
    assert!(h.last_error.is_some());
    assert!(!starts.lock().unwrap().iter().any(|(s, _)| *s == slot));
    inst.fail_all(false);
    assert!(
        wait_for(1_500, || starts
            .lock()
            .unwrap()
            .contains(&(slot, Reason::CatchUp)))
        .await,
        "the slot missed in the outage was not caught up: {:?}",
        starts.lock().unwrap()
    );
    let h = s.health();
    assert!(
        h.store_reachable && h.is_healthy() && h.last_error.is_none(),
        "{h:?}"
    );
    s.stop(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn s11_event_capacity_takes_extreme_values_and_a_slow_receiver_lags() {
    for capacity in [0, 1, usize::MAX] {
        Scheduler::leased(MemoryStore::new())
            .event_capacity(capacity)
            .build()
            .unwrap();
    }
    let s = Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .jitter(Duration::ZERO)
        .event_capacity(2)
        .build()
        .unwrap();
    let mut rx = s.events();
    s.every("tick", "1s")
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    // Several runs' events went by: the receiver that never read lost the oldest.
    assert!(matches!(
        rx.recv().await,
        Err(tokio::sync::broadcast::error::RecvError::Lagged(_))
    ));
    s.stop(Duration::from_secs(1)).await.unwrap();
}

/// A job whose claims keep failing watches each missed slot only while someone may still
/// claim it (until its next slot is due, with the default catch-up): the backup poll stays
/// a couple of runs long instead of growing by one run per slot for minutes.
#[tokio::test(start_paused = true)]
async fn s11_pending_watches_of_missed_slots_stay_bounded() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let inst = Instance::new(store.clone());
    inst.fail_claims(true);
    let s = node(&inst, "a").clock(Clock::tokio()).build().unwrap();
    s.every("often", "1s")
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    s.start().await.unwrap();
    let mut most = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        most = most.max(s.health().runs_watched);
    }
    assert!(
        (1..=3).contains(&most),
        "{most} runs watched at once after 20 missed slots"
    );
    s.stop(Duration::from_secs(1)).await.unwrap();
}
