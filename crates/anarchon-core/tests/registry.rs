//! The process-wide registry of named schedulers: configure, take by name, start all, stop
//! all within one timeout. [B-40]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anarchon_core::memory::MemoryStore;
use anarchon_core::{Clock, Error, Scheduler, registry};

fn leased() -> Scheduler {
    Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .jitter(Duration::ZERO)
        .build()
        .unwrap()
}

#[tokio::test]
async fn b40_names_are_configured_once_and_taken_by_name() {
    registry::configure("reg-a", leased()).unwrap();
    assert!(matches!(
        registry::configure("reg-a", leased()),
        Err(Error::DuplicateScheduler { name }) if name == "reg-a"
    ));
    assert!(registry::leased("reg-a").is_ok());
    let err = registry::leased("reg-nobody").unwrap_err();
    assert!(matches!(&err, Error::UnknownScheduler { name } if name == "reg-nobody"));
    assert!(
        err.to_string().contains("configure(\"reg-nobody\""),
        "{err}"
    );
    // A lease-store scheduler is not a claim-only one.
    assert!(matches!(
        registry::claim_only("reg-a"),
        Err(Error::UnknownScheduler { .. })
    ));
    assert!(registry::names().contains(&"reg-a".to_owned()));
    assert!(registry::remove("reg-a"));
    assert!(!registry::remove("reg-a"));
}

#[tokio::test(start_paused = true)]
async fn b40_start_all_then_stop_all_stops_every_scheduler_within_one_timeout() {
    let started = Arc::new(AtomicUsize::new(0));
    for name in ["reg-x", "reg-y"] {
        let s = leased();
        let st = started.clone();
        // Handlers that ignore their signal: each stop waits out the whole timeout.
        s.every("stubborn", "1s")
            .handler(move |_ctx| {
                st.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(Duration::from_secs(3_600)).await;
                    Ok(())
                }
            })
            .unwrap();
        registry::configure(name, s).unwrap();
    }
    registry::start_all().await.unwrap();
    // Started already: a second call starts nothing twice.
    registry::start_all().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(started.load(Ordering::SeqCst) >= 2, "both ran");
    let begun = tokio::time::Instant::now();
    registry::stop_all(Duration::from_secs(2)).await.unwrap();
    let took = begun.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "stop_all took {took:?}: the schedulers were stopped one after the other"
    );
    for name in ["reg-x", "reg-y"] {
        assert!(!registry::leased(name).unwrap().health().running);
        registry::remove(name);
    }
}
