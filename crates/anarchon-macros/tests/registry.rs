//! The process-wide registry with registered objects: auto-start, jobs that name their
//! scheduler, and `stop_all` from a signal-handling task. [B-40]
//!
//! The registry is one per process, so the tests here take turns (`serial`) and each uses
//! names of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anarchon::memory::MemoryStore;
use anarchon::registration::Registration;
use anarchon::registry::{self, RegistryOptions};
use anarchon::{Clock, Error, Event, HandlerError, InterruptCause, JobContext, Scheduler};

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

fn leased() -> Scheduler {
    Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .jitter(Duration::ZERO)
        .build()
        .unwrap()
}

fn job_names(name: &str) -> Vec<String> {
    registry::leased(name)
        .unwrap()
        .jobs()
        .iter()
        .map(|j| j.name.to_string())
        .collect()
}

/// Jobs split over two schedulers: `reports` named by the method, the rest by the
/// registration.
struct Shop {
    runs: AtomicUsize,
}

#[anarchon::jobs]
impl Shop {
    #[cron("0 6 * * *", scheduler = "reg-m-reports")]
    async fn daily_report(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }

    #[every("1s")]
    async fn sync(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn b40_auto_start_starts_a_scheduler_as_it_is_configured() {
    let _turn = serial().await;
    registry::configure_with("reg-m-auto", leased(), RegistryOptions { auto_start: true })
        .await
        .unwrap();
    registry::configure_with("reg-m-manual", leased(), RegistryOptions::default())
        .await
        .unwrap();
    assert!(registry::leased("reg-m-auto").unwrap().health().running);
    assert!(!registry::leased("reg-m-manual").unwrap().health().running);
    // A job registered on the auto-started scheduler is added to it while it runs.
    let shop = Arc::new(Shop {
        runs: AtomicUsize::new(0),
    });
    registry::configure("reg-m-reports", leased()).unwrap();
    registry::register(shop.clone(), Registration::new().scheduler("reg-m-auto")).unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(shop.runs.load(Ordering::SeqCst) >= 2, "the sync job ran");
    // A duplicate name is refused before anything starts.
    let err =
        registry::configure_with("reg-m-auto", leased(), RegistryOptions { auto_start: true })
            .await
            .unwrap_err();
    assert!(matches!(err, Error::DuplicateScheduler { .. }), "{err}");
    registry::start_all().await.unwrap();
    assert!(registry::leased("reg-m-manual").unwrap().health().running);
    registry::stop_all(Duration::from_secs(2)).await.unwrap();
    for name in ["reg-m-auto", "reg-m-manual", "reg-m-reports"] {
        assert!(registry::remove(name));
    }
}

#[tokio::test(start_paused = true)]
async fn b40_each_job_goes_to_the_scheduler_it_names() {
    let _turn = serial().await;
    registry::configure("reg-m-reports", leased()).unwrap();
    registry::configure("reg-m-main", leased()).unwrap();
    let shop = || {
        Arc::new(Shop {
            runs: AtomicUsize::new(0),
        })
    };

    // A job with no scheduler of its own and none from the registration: refused.
    let err = registry::register(shop(), Registration::new()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "scheduler",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("Shop-sync"), "{err}");
    // An unknown scheduler: refused, naming it, and nothing registered anywhere.
    let err =
        registry::register(shop(), Registration::new().scheduler("reg-m-nobody")).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownScheduler { name } if name == "reg-m-nobody"),
        "{err}"
    );
    assert!(job_names("reg-m-reports").is_empty());

    let names = registry::register(
        shop(),
        Registration::new().prefix("eu").scheduler("reg-m-main"),
    )
    .unwrap();
    assert_eq!(names.len(), 2);
    assert_eq!(job_names("reg-m-reports"), ["eu-Shop-daily_report"]);
    assert_eq!(job_names("reg-m-main"), ["eu-Shop-sync"]);

    // The same prefix again: the collision on one scheduler undoes the other's jobs.
    registry::leased("reg-m-main")
        .unwrap()
        .remove("eu-Shop-sync")
        .unwrap();
    let err = registry::register(
        shop(),
        Registration::new().prefix("eu").scheduler("reg-m-main"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("eu-Shop-daily_report"), "{err}");
    assert!(job_names("reg-m-main").is_empty(), "rolled back");

    for name in ["reg-m-reports", "reg-m-main"] {
        assert!(registry::remove(name));
    }
}

/// A handler that works until its signal is cancelled, then hands its run over.
struct Worker {
    started: AtomicUsize,
}

#[anarchon::jobs]
impl Worker {
    #[every("1s", timeout = "1h")]
    async fn long(&self, ctx: JobContext) -> Result<(), HandlerError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        ctx.signal.cancelled().await;
        ctx.check_cancelled()?;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn b40_stop_all_from_a_signal_handling_task_hands_runs_over() {
    let _turn = serial().await;
    for name in ["reg-m-sig-a", "reg-m-sig-b"] {
        registry::configure(name, leased()).unwrap();
    }
    let worker = Arc::new(Worker {
        started: AtomicUsize::new(0),
    });
    let mut events = Vec::new();
    for name in ["reg-m-sig-a", "reg-m-sig-b"] {
        events.push(registry::leased(name).unwrap().events());
        registry::register(worker.clone(), Registration::new().scheduler(name)).unwrap();
    }
    registry::start_all().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(worker.started.load(Ordering::SeqCst) >= 2, "both run");

    // What a SIGTERM handler does: a spawned task that stops everything.
    let signal_task = tokio::spawn(async { registry::stop_all(Duration::from_secs(5)).await });
    let begun = tokio::time::Instant::now();
    signal_task.await.expect("the task ran").unwrap();
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "handed over at once"
    );
    for (name, mut rx) in ["reg-m-sig-a", "reg-m-sig-b"].into_iter().zip(events) {
        assert!(!registry::leased(name).unwrap().health().running);
        let mut handed_over = false;
        while let Ok(event) = rx.try_recv() {
            if let Event::Interrupted { cause, .. } = &event {
                handed_over |= *cause == InterruptCause::HandedOver;
            }
        }
        assert!(handed_over, "{name}: its running run was handed over");
        assert!(registry::remove(name));
    }
}
