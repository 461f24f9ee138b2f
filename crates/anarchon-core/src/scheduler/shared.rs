//! The state one scheduler's handles and its driver task share: the store ([`Backend`]),
//! the configuration, the registered jobs, the commands to the driver, the driver's state and
//! the health figures.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use crate::context::{Data, DataSource, JobContext};
use crate::error::{BoxError, Error, Result};
use crate::event::Event;
use crate::history::RunRecord;
use crate::ids::JobName;
use crate::options::{JobKind, JobOptions, LeaseTiming};
use crate::slot::Schedule;
use crate::store::{ClaimStore, HistoryStore, LeaseStore};

/// The store a scheduler runs on, by kind.
#[derive(Clone)]
pub(crate) enum Backend {
    Lease(Arc<dyn LeaseStore>),
    Claim(Arc<dyn ClaimStore>),
}

impl Backend {
    pub(crate) fn history(&self) -> &dyn HistoryStore {
        match self {
            Backend::Lease(s) => s.as_ref(),
            Backend::Claim(s) => s.as_ref(),
        }
    }
}

/// A job's handler, boxed.
pub(crate) type Handler =
    Arc<dyn Fn(JobContext) -> BoxFuture<'static, std::result::Result<(), BoxError>> + Send + Sync>;

/// The scheduler's options, fixed by [`SchedulerBuilder::build`](crate::SchedulerBuilder::build).
pub(crate) struct Config {
    pub(crate) instance_id: Arc<str>,
    pub(crate) timing: LeaseTiming,
    pub(crate) defaults: JobOptions,
    /// The scheduler's data, shared by every run (an `Arc`: fixed data is not copied per run).
    pub(crate) data: Option<Arc<DataSource>>,
    /// The scheduler's data when it is fixed, shared by the jobs that have none of their own.
    pub(crate) fixed_data: Option<Arc<Data>>,
    pub(crate) store_timeout: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) skew_threshold_ms: u64,
    pub(crate) clock: Clock,
    /// How long a handler may outlive its timeout before its task is aborted.
    pub(crate) abort_grace: Duration,
    /// How long after a slot a standby of the job claims it (see `Core::standby_from`).
    pub(crate) standby_delay: Duration,
    /// The stop timeout when the scheduler stops by itself (last handle dropped, parent
    /// token cancelled).
    pub(crate) default_stop_timeout: Duration,
}

/// A registered job.
pub(crate) struct JobDef {
    pub(crate) name: JobName,
    pub(crate) kind: JobKind,
    pub(crate) schedule: Schedule,
    pub(crate) opts: JobOptions,
    pub(crate) handler: Handler,
    /// The job's own data while it has a function to run at each start (`None` once merged
    /// into `fixed_data`).
    pub(crate) data: Option<DataSource>,
    /// The data of every run without `run_now` data when no level is a function: the
    /// scheduler's fixed data merged with the job's once, at registration, and shared by
    /// every run. `None` when there is no data or a function runs at each start. [B-31]
    pub(crate) fixed_data: Option<Arc<Data>>,
}

/// What a handle asks of the running driver.
pub(crate) enum Command {
    Add(Arc<JobDef>),
    Remove(JobName),
    RunNow {
        job: Arc<JobDef>,
        data: Option<Data>,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    Stop {
        timeout: Duration,
        reply: oneshot::Sender<()>,
    },
}

/// Whether the driver task runs: the handles' view of it.
pub(crate) enum DriverState {
    Idle,
    Running {
        tx: mpsc::UnboundedSender<Command>,
        handle: tokio::task::JoinHandle<()>,
    },
    Stopped,
}

/// What every handle of one scheduler and its driver task share.
pub(crate) struct Shared {
    /// Cancelled when the last handle is dropped or the parent token is cancelled.
    pub(super) shutdown: CancellationToken,
    pub(crate) backend: Backend,
    pub(crate) cfg: Config,
    pub(super) jobs: Mutex<BTreeMap<JobName, Arc<JobDef>>>,
    pub(crate) events: broadcast::Sender<Event>,
    pub(super) driver: Mutex<DriverState>,
    pub(crate) health: Arc<HealthState>,
}

impl Shared {
    /// The driver's state, locked.
    pub(super) fn driver_state(&self) -> std::sync::MutexGuard<'_, DriverState> {
        self.driver.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a job, and hands it to the driver if it runs.
    pub(super) fn add_job(&self, def: Arc<JobDef>) -> Result<()> {
        if matches!(*self.driver_state(), DriverState::Stopped) {
            return Err(Error::State {
                state: crate::error::SchedulerState::Stopped,
                hint: "a stopped scheduler runs no job: register jobs before stop(), or build a new scheduler",
            });
        }
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.contains_key(&def.name) {
            return Err(Error::DuplicateJob {
                name: def.name.to_string(),
            });
        }
        jobs.insert(def.name.clone(), def.clone());
        drop(jobs);
        if let DriverState::Running { tx, .. } = &*self.driver_state() {
            let _ = tx.send(Command::Add(def));
        }
        Ok(())
    }
}

/// Liveness figures the driver updates and the watchdog reads.
#[derive(Debug, Default)]
pub(crate) struct HealthState {
    /// Milliseconds since the process-wide monotonic origin when the driver last turned.
    pub(crate) last_turn_ms: AtomicU64,
    pub(crate) stalled: std::sync::atomic::AtomicBool,
    pub(crate) leases_held: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Set after consecutive failed store calls, cleared by the next answer.
    pub(crate) store_unreachable: std::sync::atomic::AtomicBool,
    /// Slots not claimed in time (see [`Health::slots_late`](crate::Health::slots_late)).
    pub(crate) slots_late: AtomicU64,
    /// Runs backed up now (see [`Health::runs_watched`](crate::Health::runs_watched)).
    pub(crate) runs_watched: AtomicU64,
}

/// The driver ended by itself (stopped through the shutdown token): later `stop()` calls
/// and `health()` see a stopped scheduler.
pub(crate) fn driver_ended(shared: &Shared) {
    let mut d = shared.driver.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*d, DriverState::Running { .. }) {
        *d = DriverState::Stopped;
    }
}
