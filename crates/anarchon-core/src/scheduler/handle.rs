//! The [`Scheduler`] handle: its constructors, [`SchedulerBuilder::build`], registering jobs,
//! `start`/`stop`, `run_now`, the history and the [`Health`] snapshot. The top of the
//! scheduler's files: nothing else in `scheduler/` depends on it.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::builder::SchedulerBuilder;
use super::convert::{IntoAt, IntoInterval};
use super::driver;
use super::job_builder::{JobBuilder, Spec};
use super::mode::{ClaimOnly, Leased, Mode, kind};
use super::shared::{Backend, Command, DriverState, JobDef, Shared};
use crate::context::Data;
use crate::error::{Error, Result, SchedulerState};
use crate::event::Event;
use crate::history::{HistoryRecord, to_datetime};
use crate::ids::{InstanceId, JobName};
use crate::options::JobKind;
use crate::store::{ClaimStore, LeaseStore};

/// Cancels the scheduler's shutdown token when the last [`Scheduler`] handle is dropped.
struct HandleGuard {
    shutdown: CancellationToken,
}

impl Drop for HandleGuard {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A snapshot of the scheduler's health, for a health check endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `start` ran and `stop` did not.
    pub running: bool,
    /// The watchdog saw the driver loop stop turning.
    pub stalled: bool,
    /// Time since the driver loop last turned.
    pub driver_idle: Duration,
    /// Runs this instance owns under a lease now (running, or writing their result).
    pub leases_held: u64,
    /// The last store error since the store last answered, if any (cleared when a store
    /// call succeeds again).
    pub last_error: Option<String>,
    /// False after several consecutive store calls failed; true again at the next answer.
    pub store_reachable: bool,
    /// Slots this instance could not claim in time since it was built: its timer fired after
    /// a newer slot was already due (an overloaded or paused process), or the store judged
    /// the claim late. Each is also reported as a `skip` event with reason `late`.
    pub slots_late: u64,
    /// Runs of other instances this instance backs up now (it takes each over if its lease
    /// expires): each unfinished run it watches, plus one for each job whose lost or skipped
    /// slot it still looks for. At most five per job plus the runs handed over or being taken
    /// over, whatever the store does: of a job with more unfinished runs, only the newest are
    /// watched and the older ones are left to the job's next claim, which interrupts them
    /// once their lease ended.
    pub runs_watched: u64,
}

impl Health {
    /// Running, not stalled, and the store answers.
    pub fn is_healthy(&self) -> bool {
        self.running && !self.stalled && self.store_reachable
    }
}

/// A registered job, as [`Scheduler::jobs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The name.
    pub name: JobName,
    /// `every`, `cron` or `at`.
    pub kind: JobKind,
    /// The schedule as a person would write it: `every 10s`, `cron 0 9 * * * (Europe/Berlin)`,
    /// `at 2027-01-01T00:00:00Z`.
    pub schedule: String,
    /// The next slot after now, if any.
    pub next_run: Option<DateTime<Utc>>,
}

/// The scheduler: register jobs, `start`, `stop`. Clone it freely (a handle).
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::{memory::MemoryStore, Scheduler};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let scheduler = Scheduler::leased(MemoryStore::new())
///     .lease(Duration::from_secs(30))
///     .heartbeat(Duration::from_secs(5))
///     .build()?;
/// scheduler.every("sync", "10s").jitter(Duration::from_millis(500)).handler(|ctx| async move {
///     ctx.check_cancelled()?;
///     println!("slot {} attempt {}", ctx.slot, ctx.attempt);
///     Ok(())
/// })?;
/// scheduler.start().await?;
/// scheduler.stop(Duration::from_secs(30)).await?;
/// # Ok::<_, anarchon_core::Error>(())
/// # }).unwrap();
/// ```
///
/// Dropping the last handle stops the scheduler in the background, as `stop()` with the
/// builder's [stop timeout](SchedulerBuilder::stop_timeout) would (runs are handed over);
/// call `stop()` to wait for that.
pub struct Scheduler<M = Leased> {
    shared: Arc<Shared>,
    guard: Arc<HandleGuard>,
    _mode: PhantomData<M>,
}

impl<M> Clone for Scheduler<M> {
    fn clone(&self) -> Self {
        Scheduler {
            shared: self.shared.clone(),
            guard: self.guard.clone(),
            _mode: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for Scheduler<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("instance_id", &self.shared.cfg.instance_id)
            .finish_non_exhaustive()
    }
}

impl Scheduler<Leased> {
    /// A scheduler on a lease store (SQLite, libSQL, PostgreSQL, Redis `lease`, the memory
    /// store): takeover by a backup, handover on stop, overlap check, catch-up.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// # let _ = scheduler;
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn leased<S: LeaseStore>(store: S) -> SchedulerBuilder<Leased> {
        SchedulerBuilder::new(Backend::Lease(Arc::new(store)))
    }

    /// A scheduler on a shared lease store handle.
    pub fn leased_shared(store: Arc<dyn LeaseStore>) -> SchedulerBuilder<Leased> {
        SchedulerBuilder::new(Backend::Lease(store))
    }
}

impl Scheduler<ClaimOnly> {
    /// A scheduler on a claim-only store (RabbitMQ, NATS, Redis naive strategies): one
    /// winner per slot and nothing more; the lease-only options do not exist on its builder.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::claim_only(MemoryStore::new()).build()?;
    /// scheduler.every("ping", "30s").handler(|_ctx| async { Ok(()) })?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn claim_only<S: ClaimStore>(store: S) -> SchedulerBuilder<ClaimOnly> {
        SchedulerBuilder::new(Backend::Claim(Arc::new(store)))
    }

    /// A scheduler on a shared claim-only store handle.
    pub fn claim_only_shared(store: Arc<dyn ClaimStore>) -> SchedulerBuilder<ClaimOnly> {
        SchedulerBuilder::new(Backend::Claim(store))
    }
}

impl<M: Mode> SchedulerBuilder<M> {
    /// Validates the options and builds the scheduler.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::InvalidOption`] naming the first bad option,
    /// [`Error::UnknownTimezone`].
    pub fn build(self) -> Result<Scheduler<M>> {
        let shared = self.into_shared()?;
        Ok(Scheduler {
            guard: Arc::new(HandleGuard {
                shutdown: shared.shutdown.clone(),
            }),
            shared,
            _mode: PhantomData,
        })
    }
}

impl<M: Mode> Scheduler<M> {
    /// Registers a job on the epoch grid: `every("sync", "10s")`. The interval is text
    /// (`"250ms"`, `"10s"`, `"1h30m"`), a `Duration` or milliseconds. [B-01, B-05]
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler
    ///     .every("poll", Duration::from_millis(1500))
    ///     .offset(Duration::from_millis(500)) // slots at ...00.5, ...02.0, ...03.5
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// assert!(scheduler.every("bad", "10").handler(|_ctx| async { Ok(()) }).is_err());
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn every(&self, name: &str, interval: impl IntoInterval) -> JobBuilder<'_, M, kind::Every> {
        JobBuilder::new(
            &self.shared,
            name,
            interval.into_interval().map(Spec::Every),
        )
    }

    /// Registers a cron job: `cron("report", "0 3 * * *")`: five fields, or six with
    /// seconds first, in the job's timezone (default the scheduler's, else UTC). [B-02, B-06]
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler
    ///     .cron("report", "0 3 * * 1-5")
    ///     .timezone("America/New_York")
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// let err = scheduler.cron("bad", "61 * * * *").handler(|_ctx| async { Ok(()) }).unwrap_err();
    /// assert!(matches!(err, Error::InvalidCron { .. }), "{err}");
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn cron(&self, name: &str, expression: &str) -> JobBuilder<'_, M, kind::Cron> {
        JobBuilder::new(&self.shared, name, Ok(Spec::Cron(expression.to_owned())))
    }

    /// Registers a job that runs once: `at("migrate", "2026-12-01T09:00:00Z")`. The time is
    /// RFC 3339 text, a `chrono::DateTime<Utc>`, a `SystemTime` or epoch milliseconds; one
    /// too far in the past is refused unless [`JobBuilder::allow_past`]. [B-03]
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{chrono::Utc, memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler
    ///     .at("migrate", Utc::now() + Duration::from_secs(60))
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// let err = scheduler.at("old", "2001-01-01T00:00:00Z").handler(|_ctx| async { Ok(()) });
    /// assert!(matches!(err, Err(Error::AtInThePast { .. })));
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn at(&self, name: &str, when: impl IntoAt) -> JobBuilder<'_, M, kind::At> {
        JobBuilder::new(&self.shared, name, when.into_at().map(Spec::At))
    }

    fn driver(&self) -> std::sync::MutexGuard<'_, DriverState> {
        self.shared.driver_state()
    }

    fn job(&self, name: &str) -> Result<Arc<JobDef>> {
        let name = JobName::new(name)?;
        self.shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned()
            .ok_or_else(|| Error::UnknownJob {
                name: name.to_string(),
            })
    }

    /// This instance's id.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    /// let scheduler = Scheduler::leased(MemoryStore::new()).instance_id("worker-1").build()?;
    /// assert_eq!(scheduler.instance_id(), "worker-1");
    /// # Ok::<(), anarchon_core::Error>(())
    /// ```
    pub fn instance_id(&self) -> InstanceId {
        InstanceId::checked(self.shared.cfg.instance_id.clone())
    }

    /// Subscribes to the events of this instance (a `tokio::sync::broadcast` receiver: a
    /// receiver that falls more than [`SchedulerBuilder::event_capacity`] (1024) events
    /// behind loses the oldest and gets `RecvError::Lagged`). See [`Event`] for
    /// an example. [B-38]
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// Checks the store (connection, version, schema), then schedules the jobs and, in the
    /// background, handles orphans and catch-up. [B-19, B-33]
    ///
    /// # Errors
    ///
    /// The store's error (unreachable, too old, a schema written by a newer anarchon) and
    /// [`Error::State`] when called twice or after `stop()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.start().await?;
    /// assert!(matches!(scheduler.start().await, Err(Error::State { .. })));
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// // A stopped scheduler takes no new job.
    /// assert!(scheduler.every("late", "10s").handler(|_ctx| async { Ok(()) }).is_err());
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn start(&self) -> Result<()> {
        {
            let d = self.driver();
            match &*d {
                DriverState::Idle => {}
                DriverState::Running { .. } => {
                    return Err(Error::State {
                        state: SchedulerState::Running,
                        hint: "call start() once",
                    });
                }
                DriverState::Stopped => {
                    return Err(Error::State {
                        state: SchedulerState::Stopped,
                        hint: "build a new scheduler to start again",
                    });
                }
            }
        }
        let jobs: Vec<Arc<JobDef>> = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let clock = driver::prepare(&self.shared, &jobs).await?;
        let mut d = self.driver();
        match *d {
            DriverState::Idle => {}
            DriverState::Running { .. } => {
                return Err(Error::State {
                    state: SchedulerState::Running,
                    hint: "call start() once",
                });
            }
            DriverState::Stopped => {
                return Err(Error::State {
                    state: SchedulerState::Stopped,
                    hint: "build a new scheduler to start again",
                });
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(driver::run(
            self.shared.clone(),
            jobs,
            clock,
            rx,
            self.shared.shutdown.clone(),
        ));
        *d = DriverState::Running { tx, handle };
        Ok(())
    }

    /// Stops scheduling, cancels the signals of running handlers, waits up to `timeout` for
    /// them (a handler that returns an error after cancellation hands its run over), closes
    /// the connections anarchon opened, and sends nothing to the store after it returns.
    ///
    /// A claim or takeover this instance wins while stopping is handed over before `stop()`
    /// returns, and result writes in flight are waited for within `timeout`. It returns an
    /// error only if the scheduler's driver task panicked (a bug).
    /// [B-17, B-34]
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the driver task panicked.
    ///
    /// ```no_run
    /// # async fn demo(scheduler: anarchon_core::Scheduler) -> anarchon_core::Result<()> {
    /// use std::time::Duration;
    ///
    /// tokio::signal::ctrl_c().await.ok();
    /// scheduler.stop(Duration::from_secs(30)).await?; // running lease runs are handed over
    /// # Ok(()) }
    /// ```
    pub async fn stop(&self, timeout: Duration) -> Result<()> {
        let prev = std::mem::replace(&mut *self.driver(), DriverState::Stopped);
        match prev {
            DriverState::Running { tx, handle } => {
                let (reply, done) = oneshot::channel();
                let _ = tx.send(Command::Stop { timeout, reply });
                let _ = done.await;
                match handle.await {
                    Err(e) if e.is_panic() => Err(Error::State {
                        state: SchedulerState::Failed,
                        hint: "the scheduler's driver task panicked (a bug in anarchon): \
                               its runs were not handed over; see the log",
                    }),
                    _ => Ok(()),
                }
            }
            DriverState::Idle => {
                let _ = self.shared.backend.history().close().await;
                Ok(())
            }
            DriverState::Stopped => Ok(()),
        }
    }

    /// Runs a job on this instance now: no deduplication, no retry, recorded as `manual`.
    /// Returns the finished run's record. [B-35]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`], [`Error::State`] before `start()` or after `stop()`, a store
    /// error writing the record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Data, Reason, RunStatus, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("report", "1h").handler(|ctx| async move {
    ///     println!("requested by {:?}", ctx.value("by"));
    ///     Ok(())
    /// })?;
    /// scheduler.start().await?;
    /// let run = scheduler.run_now("report", Some(Data::new().with_key("by", "ops"))).await?;
    /// assert_eq!((run.status, run.reason, run.manual), (RunStatus::Succeeded, Reason::Manual, true));
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn run_now(&self, name: &str, data: Option<Data>) -> Result<HistoryRecord> {
        let job = self.job(name)?;
        let (reply, done) = oneshot::channel();
        {
            let d = self.driver();
            let tx = match &*d {
                DriverState::Running { tx, .. } => tx,
                DriverState::Idle => {
                    return Err(Error::State {
                        state: SchedulerState::NotStarted,
                        hint: "call start() before run_now()",
                    });
                }
                DriverState::Stopped => {
                    return Err(Error::State {
                        state: SchedulerState::Stopped,
                        hint: "a stopped scheduler runs nothing: build a new scheduler",
                    });
                }
            };
            let _ = tx.send(Command::RunNow { job, data, reply });
        }
        done.await
            .map_err(|_| Error::State {
                state: SchedulerState::Stopping,
                hint: "the run was abandoned by stop()",
            })?
            .map(HistoryRecord::from)
    }

    /// Stops scheduling a job on this instance; a running run of it continues. Other
    /// instances that registered the job keep running it. [B-35]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`] when no job of that name is registered here.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.remove("sync")?;
    /// assert!(scheduler.jobs().is_empty());
    /// assert!(matches!(scheduler.remove("sync"), Err(Error::UnknownJob { .. })));
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn remove(&self, name: &str) -> Result<()> {
        let name = JobName::new(name)?;
        let removed = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        if removed.is_none() {
            return Err(Error::UnknownJob {
                name: name.to_string(),
            });
        }
        if let DriverState::Running { tx, .. } = &*self.driver() {
            let _ = tx.send(Command::Remove(name));
        }
        Ok(())
    }

    /// The latest `count` attempts of a job from all instances, newest first. Works in a
    /// process that registered no jobs once the store's tables exist. [B-36]
    ///
    /// # Errors
    ///
    /// An invalid job name, a store error or timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, RunStatus, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "1h").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.start().await?;
    /// scheduler.run_now("sync", None).await?;
    /// let runs = scheduler.history("sync", 10).await?;
    /// assert_eq!(runs[0].status, RunStatus::Succeeded);
    /// println!("{} attempt {} took {:?}", runs[0].slot, runs[0].attempt, runs[0].duration());
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn history(&self, name: &str, count: usize) -> Result<Vec<HistoryRecord>> {
        let name = JobName::new(name)?;
        let records = driver::bounded(
            &self.shared,
            "history",
            self.shared.backend.history().history(&name, count),
        )
        .await?;
        Ok(records.into_iter().map(HistoryRecord::from).collect())
    }

    /// The newest attempt of a job, as [`Scheduler::history`] with a count of 1. [B-36]
    ///
    /// # Errors
    ///
    /// An invalid job name, a store error or timeout.
    pub async fn last_run(&self, name: &str) -> Result<Option<HistoryRecord>> {
        let name = JobName::new(name)?;
        let record = driver::bounded(
            &self.shared,
            "last_run",
            self.shared.backend.history().last_run(&name),
        )
        .await?;
        Ok(record.map(HistoryRecord::from))
    }

    /// The next slot of a registered job after now; `None` for an `at` job whose time has
    /// passed. [B-36]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`].
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// let next = scheduler.next_run("sync")?.expect("an every job always has a next slot");
    /// assert_eq!(next.timestamp_millis() % 10_000, 0);
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn next_run(&self, name: &str) -> Result<Option<DateTime<Utc>>> {
        let job = self.job(name)?;
        Ok(job
            .schedule
            .next_after(self.shared.cfg.clock.now_ms())
            .map(to_datetime))
    }

    /// The jobs registered on this scheduler, by name. [B-36]
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, JobKind, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.cron("report", "0 3 * * *").handler(|_ctx| async { Ok(()) })?;
    /// let jobs = scheduler.jobs();
    /// assert_eq!((jobs[0].name.as_str(), jobs[0].kind), ("report", JobKind::Cron));
    /// assert!(jobs[0].next_run.is_some());
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn jobs(&self) -> Vec<JobInfo> {
        let now = self.shared.cfg.clock.now_ms();
        self.shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|j| JobInfo {
                name: j.name.clone(),
                kind: j.kind,
                schedule: j.schedule.to_string(),
                next_run: j.schedule.next_after(now).map(to_datetime),
            })
            .collect()
    }

    /// Simulates a crash (SIGKILL) for tests: the driver stops at once without releasing,
    /// finishing or closing anything, so leases simply expire. Running handlers are left
    /// to themselves. Test-only: behind the `testkit` feature.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn crash(&self) {
        if let DriverState::Running { handle, .. } =
            std::mem::replace(&mut *self.driver(), DriverState::Stopped)
        {
            handle.abort();
        }
    }

    /// A snapshot of the scheduler's health, for a health check endpoint.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// assert!(!scheduler.health().is_healthy(), "not started yet");
    /// scheduler.start().await?;
    /// let health = scheduler.health();
    /// assert!(health.is_healthy(), "{health:?}");
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// assert!(!scheduler.health().running);
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn health(&self) -> Health {
        let h = &self.shared.health;
        let running =
            matches!(&*self.driver(), DriverState::Running { handle, .. } if !handle.is_finished());
        let last = h.last_turn_ms.load(Ordering::Relaxed);
        Health {
            running,
            stalled: h.stalled.load(Ordering::Relaxed),
            driver_idle: Duration::from_millis(if running {
                driver::mono_ms().saturating_sub(last)
            } else {
                0
            }),
            leases_held: h.leases_held.load(Ordering::Relaxed),
            last_error: h
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            store_reachable: !h.store_unreachable.load(Ordering::Relaxed),
            slots_late: h.slots_late.load(Ordering::Relaxed),
            runs_watched: h.runs_watched.load(Ordering::Relaxed),
        }
    }
}
