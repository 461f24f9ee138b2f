//! `#[anarchon::jobs]` and `Scheduler::register`: names, options, prefixes, defaults and a
//! registered method firing on the memory store under tokio's paused clock. [B-31, B-35]

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anarchon::chrono::Timelike;
use anarchon::memory::MemoryStore;
use anarchon::registration::{Jobs, Registration, Trigger};
use anarchon::{
    CatchUp, Clock, Data, Error, HandlerError, JobConfig, JobContext, JobKind, Overlap, RunStatus,
    Scheduler,
};

/// A tenant's jobs; every run writes what it saw into `seen`.
struct Tenant {
    id: &'static str,
    runs: AtomicUsize,
    seen: Mutex<Vec<String>>,
}

impl Tenant {
    fn new(id: &'static str) -> Arc<Self> {
        Arc::new(Tenant {
            id,
            runs: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        })
    }
}

#[anarchon::jobs]
impl Tenant {
    #[every("1s", jitter = "0s", max_late = "30s", timeout = "5s")]
    async fn sync(&self, ctx: JobContext) -> Result<(), HandlerError> {
        ctx.check_cancelled()?;
        self.runs.fetch_add(1, Ordering::SeqCst);
        let line = format!(
            "{} {} region={} batch={}",
            self.id,
            ctx.name,
            ctx.value("region").map_or("-".into(), |v| v.to_string()),
            ctx.value("batch").map_or("-".into(), |v| v.to_string()),
        );
        self.seen.lock().unwrap().push(line);
        Ok(())
    }

    /// Takes the registration's timezone.
    #[cron("0 9 * * *", overlap = "allow", catch_up = "all", catch_up_max = 5)]
    async fn morning(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }

    /// Keeps its own timezone whatever the registration says.
    #[cron("0 9 * * *", timezone = "America/New_York", name = "ny-open")]
    async fn new_york(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }

    #[at("2099-01-01T00:00:00Z", history_size = 7, max_attempts = 2)]
    async fn once(&self, _ctx: JobContext) -> Result<(), std::io::Error> {
        Err(std::io::Error::other(format!("{} refuses", self.id)))
    }

    /// Not a job: left as it is.
    fn label(&self) -> String {
        format!("tenant {}", self.id)
    }
}

fn scheduler() -> Scheduler {
    Scheduler::leased(MemoryStore::new())
        .clock(Clock::tokio())
        .jitter(Duration::ZERO)
        .build()
        .unwrap()
}

fn names<M: anarchon::Mode>(s: &Scheduler<M>) -> Vec<String> {
    s.jobs().iter().map(|j| j.name.to_string()).collect()
}

#[test]
fn b35_the_macro_lists_each_marked_method_with_its_name_trigger_and_options() {
    let specs = Tenant::jobs();
    let listed: Vec<(&str, JobKind)> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.trigger.kind()))
        .collect();
    assert_eq!(
        listed,
        [
            ("Tenant-sync", JobKind::Every),
            ("Tenant-morning", JobKind::Cron),
            ("ny-open", JobKind::Cron),
            ("Tenant-once", JobKind::At),
        ]
    );
    assert_eq!(specs[0].trigger, Trigger::Every(Duration::from_secs(1)));
    assert_eq!(
        specs[0].options,
        JobConfig {
            jitter: Some(Duration::ZERO),
            max_late: Some(Duration::from_secs(30)),
            timeout: Some(Duration::from_secs(5)),
            ..JobConfig::default()
        }
    );
    assert_eq!(specs[1].trigger, Trigger::Cron("0 9 * * *".into()));
    assert_eq!(specs[1].options.overlap, Some(Overlap::Allow));
    assert_eq!(specs[1].options.catch_up, Some(CatchUp::All { max: 5 }));
    assert_eq!(
        specs[2].options.timezone,
        Some(anarchon::chrono_tz::America::New_York)
    );
    assert_eq!(
        specs[3].trigger,
        Trigger::At("2099-01-01T00:00:00Z".parse().unwrap())
    );
    assert_eq!(specs[3].options.history_size, Some(7));
    assert_eq!(specs[3].options.max_attempts, Some(2));
    assert!(specs.iter().all(|s| s.scheduler.is_none()));
    // Unmarked methods stay ordinary methods.
    assert_eq!(Tenant::new("a").label(), "tenant a");
}

#[test]
fn b35_two_objects_of_one_type_need_distinct_prefixes() {
    let s = scheduler();
    let first = s.register(Tenant::new("a"), Registration::new()).unwrap();
    assert_eq!(
        first.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["Tenant-sync", "Tenant-morning", "ny-open", "Tenant-once"]
    );
    // The same type again without a prefix: refused, naming the job, and nothing added.
    let err = s
        .register(Tenant::new("b"), Registration::new())
        .unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateJob { name } if name == "Tenant-sync"),
        "{err}"
    );
    assert!(err.to_string().contains("\"Tenant-sync\""), "{err}");
    assert_eq!(s.jobs().len(), 4);

    // Distinct prefixes: both register, `prefix-` before every name.
    let s = scheduler();
    s.register(Tenant::new("a"), Registration::new().prefix("acme"))
        .unwrap();
    s.register(Tenant::new("b"), Registration::new().prefix("globex"))
        .unwrap();
    assert_eq!(
        names(&s),
        [
            "acme-Tenant-morning",
            "acme-Tenant-once",
            "acme-Tenant-sync",
            "acme-ny-open",
            "globex-Tenant-morning",
            "globex-Tenant-once",
            "globex-Tenant-sync",
            "globex-ny-open",
        ]
    );
    // The same prefix twice collides too.
    let err = s
        .register(Tenant::new("c"), Registration::new().prefix("acme"))
        .unwrap_err();
    assert!(err.to_string().contains("acme-Tenant-sync"), "{err}");
    assert_eq!(s.jobs().len(), 8, "a refused registration adds nothing");
}

#[test]
fn b35_a_bad_prefix_or_timezone_is_refused_naming_it() {
    let s = scheduler();
    let err = s
        .register(Tenant::new("a"), Registration::new().prefix("a b"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "prefix",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("\"a b\""), "{err}");
    let err = s
        .register(
            Tenant::new("a"),
            Registration::new().timezone("Mars/Olympus"),
        )
        .unwrap_err();
    assert!(matches!(&err, Error::UnknownTimezone { name } if name == "Mars/Olympus"));
    assert!(s.jobs().is_empty());
}

#[test]
fn b31_registration_defaults_apply_where_they_fit_and_methods_override_them() {
    let s = scheduler();
    s.register(
        Tenant::new("a"),
        Registration::new()
            .prefix("t")
            // 09:00 in Tokyo is 00:00 UTC all year round.
            .timezone("Asia/Tokyo")
            // Fits every job: applied; the methods that set their own jitter keep theirs.
            .defaults(JobConfig {
                history_size: Some(3),
                ..JobConfig::default()
            }),
    )
    .unwrap();
    let next_hour = |name: &str| s.next_run(name).unwrap().unwrap().hour();
    assert_eq!(
        next_hour("t-Tenant-morning"),
        0,
        "the registration's timezone"
    );
    let ny = next_hour("t-ny-open");
    assert!(ny == 13 || ny == 14, "the method's own timezone: {ny}h UTC");
    // The timezone default did not reach the `every` and `at` jobs (it would be refused).
    assert!(s.next_run("t-Tenant-sync").unwrap().is_some());

    // A lease-only default on a claim-only scheduler is refused, naming it.
    let claim = Scheduler::claim_only(MemoryStore::new()).build().unwrap();
    let err = claim
        .register(
            Tenant::new("a"),
            Registration::new().defaults(JobConfig {
                max_attempts: Some(5),
                ..JobConfig::default()
            }),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "max_attempts",
                ..
            }
        ),
        "{err}"
    );
    assert!(claim.jobs().is_empty());
}

/// Only methods without lease-only options, for a claim-only store.
struct Pinger;

#[anarchon::jobs]
impl Pinger {
    #[every("30s", timeout = "1s")]
    async fn ping(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[test]
fn b22_an_object_without_lease_options_registers_on_a_claim_only_store() {
    let claim = Scheduler::claim_only(MemoryStore::new()).build().unwrap();
    claim
        .register(Arc::new(Pinger), Registration::new())
        .unwrap();
    assert_eq!(names(&claim), ["Pinger-ping"]);
    // The Tenant's `catch_up`/`max_attempts` attributes do not apply there.
    let err = claim
        .register(Tenant::new("a"), Registration::new())
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err}");
    assert_eq!(names(&claim), ["Pinger-ping"]);
}

#[tokio::test(start_paused = true)]
async fn b31_data_levels_merge_and_a_method_error_fails_the_run() {
    let s = scheduler();
    let tenant = Tenant::new("a");
    s.register(
        tenant.clone(),
        Registration::new()
            .prefix("acme")
            .data(Data::new().with_key("region", "eu").with_key("batch", 10)),
    )
    .unwrap();
    s.start().await.unwrap();
    let run = s
        .run_now("acme-Tenant-sync", Some(Data::new().with_key("batch", 50)))
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    let failed = s.run_now("acme-Tenant-once", None).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(
        failed
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("a refuses"),
        "{failed:?}"
    );
    s.stop(Duration::from_secs(5)).await.unwrap();
    // The run-now data overrides the registration's `batch`; scheduled runs (the paused
    // clock may have let some happen meanwhile) see the registration's.
    let seen = tenant.seen.lock().unwrap().clone();
    let manual = "a acme-Tenant-sync region=\"eu\" batch=50";
    assert_eq!(seen.iter().filter(|l| *l == manual).count(), 1, "{seen:?}");
    assert!(
        seen.iter()
            .all(|l| l == manual || l == "a acme-Tenant-sync region=\"eu\" batch=10"),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn b01_a_registered_method_fires_on_its_schedule() {
    let s = scheduler();
    let tenant = Tenant::new("a");
    s.register(tenant.clone(), Registration::new().prefix("p"))
        .unwrap();
    s.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    s.stop(Duration::from_secs(5)).await.unwrap();
    let runs = tenant.runs.load(Ordering::SeqCst);
    // Three or four slots in 3.5 s, and perhaps the slot just before start, caught up.
    assert!(
        (3..=5).contains(&runs),
        "every 1s for 3.5s ran {runs} times"
    );
    let history = s.history("p-Tenant-sync", 10).await.unwrap();
    assert!(history.iter().all(|r| r.status == RunStatus::Succeeded));
}

/// A job that names a registry scheduler.
struct Routed;

#[anarchon::jobs]
impl Routed {
    #[every("1h", scheduler = "elsewhere")]
    async fn hourly(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[test]
fn b40_a_job_that_names_a_scheduler_is_not_registered_on_another_one() {
    let s = scheduler();
    assert_eq!(Routed::jobs()[0].scheduler.as_deref(), Some("elsewhere"));
    let err = s
        .register(Arc::new(Routed), Registration::new())
        .unwrap_err();
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
    assert!(err.to_string().contains("elsewhere"), "{err}");
    let err = s
        .register(Arc::new(Pinger), Registration::new().scheduler("x"))
        .unwrap_err();
    assert!(err.to_string().contains("registry::register"), "{err}");
    assert!(s.jobs().is_empty());
}

/// Generic types and paths work; the default name uses the type's last path segment.
mod nested {
    use super::*;

    pub(crate) struct Queue<T: Send + Sync + 'static>(pub(crate) std::marker::PhantomData<T>);

    #[anarchon::jobs]
    impl<T: Send + Sync + 'static> Queue<T> {
        #[every("5m")]
        async fn drain(&self, _ctx: JobContext) -> Result<(), HandlerError> {
            Ok(())
        }
    }
}

#[test]
fn b35_generic_impl_blocks_name_jobs_after_the_type() {
    let s = scheduler();
    let q = Arc::new(nested::Queue::<u8>(std::marker::PhantomData));
    s.register(q, Registration::new()).unwrap();
    assert_eq!(names(&s), ["Queue-drain"]);
}

/// Code that depends on `anarchon-core` directly names it with `crate = "..."`; the
/// options not used above are read here.
mod core_only {
    use anarchon_core::registration::{Jobs, Trigger};
    use anarchon_core::{CatchUp, HandlerError, JobContext, Overlap};
    use std::time::Duration;

    pub(crate) struct Archive;

    #[anarchon_macros::jobs(crate = "anarchon_core")]
    impl Archive {
        #[every(
            "1h",
            offset = "15m",
            history_ttl = "30d",
            catch_up_window = "2h",
            catch_up = "none",
            overlap = "skip"
        )]
        async fn compact(&self, _ctx: JobContext) -> Result<(), HandlerError> {
            Ok(())
        }

        #[at("2099-06-01T12:00:00.250Z", allow_past = true, catch_up = "latest")]
        async fn migrate(&self, _ctx: JobContext) -> Result<(), HandlerError> {
            Ok(())
        }
    }

    #[test]
    fn b39_every_option_reaches_the_job_spec() {
        let specs = Archive::jobs();
        let o = &specs[0].options;
        assert_eq!(specs[0].trigger, Trigger::Every(Duration::from_secs(3_600)));
        assert_eq!(o.offset, Some(Duration::from_secs(900)));
        assert_eq!(o.history_ttl, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(o.catch_up_window, Some(Duration::from_secs(7_200)));
        assert_eq!(o.catch_up, Some(CatchUp::None));
        assert_eq!(o.overlap, Some(Overlap::Skip));
        let o = &specs[1].options;
        assert_eq!(
            specs[1].trigger,
            Trigger::At("2099-06-01T12:00:00.250Z".parse().unwrap())
        );
        assert_eq!(o.allow_past, Some(true));
        assert_eq!(o.catch_up, Some(CatchUp::Latest));
    }
}
