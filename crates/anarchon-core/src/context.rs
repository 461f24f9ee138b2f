//! What a handler receives: the run's identity, its cancellation signal and its data.
//! [B-30, B-31]

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use crate::cancel::CancelCause;
use crate::error::{BoxError, Error, Result};
use crate::history::Reason;
use crate::ids::{EpochMs, JobName, RunKey};

/// Data for handlers, given at the scheduler, job and manual-run level. [B-31]
///
/// It holds a JSON-like value (plain values; maps merge shallowly, the more specific keys
/// win; other values are replaced by the more specific one) and typed extensions (clients,
/// secrets), merged by type. Data is never stored or sent to other instances.
///
/// ```
/// use anarchon_core::Data;
/// use serde_json::json;
///
/// #[derive(Debug, PartialEq)]
/// struct ApiKey(&'static str);
///
/// let scheduler_level = Data::from_value(json!({"region": "eu", "batch": 10})).with(ApiKey("k1"));
/// let job_level = Data::from_value(json!({"batch": 50}));
/// let merged = scheduler_level.merged_with(&job_level);
/// assert_eq!(merged.value(), &json!({"region": "eu", "batch": 50}));
/// assert_eq!(merged.get::<ApiKey>().as_deref(), Some(&ApiKey("k1")));
/// ```
#[derive(Clone, Default)]
pub struct Data {
    value: Value,
    extensions: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Data")
            .field("value", &self.value)
            .field("extensions", &self.extensions.len())
            .finish()
    }
}

impl Data {
    /// Empty data.
    pub fn new() -> Self {
        Self::default()
    }

    /// Data holding a plain value.
    pub fn from_value(value: Value) -> Self {
        Data {
            value,
            extensions: HashMap::new(),
        }
    }

    /// Adds a typed extension (a client, a secret), replacing one of the same type.
    pub fn with<T: Any + Send + Sync>(mut self, ext: T) -> Self {
        self.extensions.insert(TypeId::of::<T>(), Arc::new(ext));
        self
    }

    /// Sets one key of the map value (turning a non-map value into a map).
    pub fn with_key(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        if !self.value.is_object() {
            self.value = Value::Object(Default::default());
        }
        if let Value::Object(map) = &mut self.value {
            map.insert(key.into(), value.into());
        }
        self
    }

    /// The plain value (`Null` when none was given).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// One key of the map value.
    pub fn key(&self, key: &str) -> Option<&Value> {
        self.value.get(key)
    }

    /// The extension of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.extensions
            .get(&TypeId::of::<T>())
            .cloned()
            .and_then(|a| a.downcast::<T>().ok())
    }

    /// This data overridden by the more specific `other`. [B-31]
    pub fn merged_with(&self, other: &Data) -> Data {
        let value = match (&self.value, &other.value) {
            (Value::Object(a), Value::Object(b)) => {
                let mut m = a.clone();
                m.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())));
                Value::Object(m)
            }
            (a, Value::Null) => a.clone(),
            (_, b) => b.clone(),
        };
        let mut extensions = self.extensions.clone();
        extensions.extend(other.extensions.iter().map(|(k, v)| (*k, v.clone())));
        Data { value, extensions }
    }
}

/// A data function: evaluated at each run's start; if it fails, the run fails. [B-31]
pub type DataFn =
    Arc<dyn Fn() -> BoxFuture<'static, std::result::Result<Data, BoxError>> + Send + Sync>;

/// Data given at one level: fixed, or a function evaluated at each run's start.
#[derive(Clone)]
pub enum DataSource {
    /// Fixed data.
    Fixed(Data),
    /// Evaluated at each run's start.
    Function(DataFn),
}

impl fmt::Debug for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Fixed(d) => d.fmt(f),
            DataSource::Function(_) => f.write_str("DataSource::Function"),
        }
    }
}

impl DataSource {
    /// A data function from an async closure.
    pub fn function<F, Fut, E>(f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Data, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        DataSource::Function(Arc::new(move || {
            let fut = f();
            Box::pin(async move { fut.await.map_err(Into::into) })
        }))
    }

    pub(crate) async fn resolve(&self) -> std::result::Result<Data, BoxError> {
        match self {
            DataSource::Fixed(d) => Ok(d.clone()),
            DataSource::Function(f) => f().await,
        }
    }
}

impl From<Data> for DataSource {
    fn from(d: Data) -> Self {
        DataSource::Fixed(d)
    }
}

/// The part of a run that its handler and the scheduler share: the signal, why it was
/// cancelled, and the local lease deadline.
#[derive(Debug)]
pub(crate) struct RunControl {
    token: CancellationToken,
    cause: OnceLock<CancelCause>,
    /// Last confirmed renewal + lease - margin, on the monotonic clock; `None` for runs
    /// without a lease (manual runs, claim-only stores).
    deadline: Mutex<Option<tokio::time::Instant>>,
    /// A fenced transaction recorded the attempt's success.
    finished_in_transaction: AtomicBool,
}

impl RunControl {
    pub(crate) fn new(deadline: Option<tokio::time::Instant>) -> Self {
        RunControl {
            token: CancellationToken::new(),
            cause: OnceLock::new(),
            deadline: Mutex::new(deadline),
            finished_in_transaction: AtomicBool::new(false),
        }
    }

    /// Cancels the signal; the first cause given is the one reported.
    pub(crate) fn cancel(&self, cause: CancelCause) {
        let _ = self.cause.set(cause);
        self.token.cancel();
    }

    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    pub(crate) fn cause(&self) -> Option<CancelCause> {
        self.cause.get().copied()
    }

    pub(crate) fn set_deadline(&self, deadline: Option<tokio::time::Instant>) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
    }

    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mark_finished_in_transaction(&self) {
        self.finished_in_transaction.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_finished_in_transaction(&self) -> bool {
        self.finished_in_transaction.load(Ordering::SeqCst)
    }

    /// Trips the signal when the lease deadline has passed, and says whether the signal is
    /// cancelled.
    pub(crate) fn check(&self) -> bool {
        if !self.token.is_cancelled()
            && self
                .deadline()
                .is_some_and(|d| tokio::time::Instant::now() >= d)
        {
            self.cancel(CancelCause::LeaseDeadlinePassed);
        }
        self.token.is_cancelled()
    }
}

/// What a handler receives. [B-30]
#[derive(Clone, Debug)]
pub struct JobContext {
    /// The job's name.
    pub name: JobName,
    /// The slot; for a manual run, when it was started. [`JobContext::slot_ms`] gives it in
    /// milliseconds since the epoch (the form the stores key runs by).
    pub slot: DateTime<Utc>,
    /// When the slot was due.
    pub scheduled_at: DateTime<Utc>,
    /// This instance's id.
    pub instance_id: Arc<str>,
    /// Started by `run_now`.
    pub manual: bool,
    /// 1 on the first start, 2 and up after takeovers.
    pub attempt: u32,
    /// Why it started.
    pub reason: Reason,
    /// The per-job, strictly increasing fencing token of this attempt: hand it to a
    /// downstream system so it can reject writes from a stale owner (0 for manual runs and
    /// claim-only stores).
    pub fence: u64,
    /// Cancelled on stop, timeout, lost lease and self-fencing. It is also cancelled by
    /// [`JobContext::check_cancelled`] once the local lease deadline has passed.
    pub signal: CancellationToken,
    /// The merged data of the scheduler, the job and the manual run.
    pub data: Arc<Data>,
    pub(crate) control: Arc<RunControl>,
}

impl JobContext {
    /// Returns [`Error::Cancelled`] once the signal is cancelled or the lease deadline
    /// ([`JobContext::lease_deadline`]) has passed: call it between steps, before side
    /// effects. The deadline is read here, on the monotonic clock, so an owner that wakes
    /// from a freeze fails this check before the scheduler has even noticed its lapsed
    /// lease.
    ///
    /// ```
    /// # async fn step(ctx: anarchon_core::JobContext) -> anarchon_core::Result<()> {
    /// for item in 0..100 {
    ///     ctx.check_cancelled()?;
    ///     // ... work on item ...
    /// #   let _ = item;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn check_cancelled(&self) -> Result<()> {
        if self.control.check() {
            Err(Error::Cancelled {
                job: self.name.to_string(),
                cause: self.control.cause(),
            })
        } else {
            Ok(())
        }
    }

    /// The slot in milliseconds since the epoch.
    ///
    /// ```
    /// # fn demo(ctx: anarchon_core::JobContext) {
    /// assert_eq!(ctx.slot_ms(), ctx.slot.timestamp_millis());
    /// # }
    /// ```
    pub fn slot_ms(&self) -> EpochMs {
        self.slot.timestamp_millis()
    }

    /// Why the signal was cancelled, if it was.
    pub fn cancel_cause(&self) -> Option<CancelCause> {
        self.control.cause()
    }

    /// The moment this attempt's lease can no longer be counted on: the last confirmed
    /// renewal + lease − one heartbeat, on the monotonic clock. `None` for runs without a
    /// lease (manual runs, claim-only stores). It moves forward with every renewal.
    pub fn lease_deadline(&self) -> Option<std::time::Instant> {
        self.control.deadline().map(tokio::time::Instant::into_std)
    }

    /// One key of the data's map value.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.data.key(key)
    }

    /// The data extension of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.data.get::<T>()
    }
}

/// This attempt of this run: what a fenced transaction checks in the store (the run row's
/// attempt, owner and fence, as written by the claim or takeover that started it).
///
/// ```
/// # fn demo(ctx: &anarchon_core::JobContext) -> anarchon_core::Result<()> {
/// let key = ctx.attempt_key()?; // an error for manual runs and claim-only stores
/// assert_eq!(key.attempt, ctx.attempt);
/// assert_eq!(key.fence, ctx.fence);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptKey {
    /// The run (job and slot).
    pub run: RunKey,
    /// The attempt (1, 2 ...).
    pub attempt: u32,
    /// The owner as recorded in the store (this instance's id).
    pub instance_id: String,
    /// The attempt's fencing token.
    pub fence: u64,
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} attempt {} (fence {})",
            self.run, self.attempt, self.fence
        )
    }
}

impl JobContext {
    /// The attempt a fenced transaction checks. An error ([`Error::NotFenceable`]) for
    /// manual runs and runs on claim-only stores, which hold no lease to check.
    pub fn attempt_key(&self) -> Result<AttemptKey> {
        if self.manual || self.fence == 0 {
            return Err(Error::NotFenceable {
                job: self.name.to_string(),
                why: if self.manual {
                    "a manual run (run_now) holds no lease"
                } else {
                    "runs on claim-only stores hold no lease"
                },
            });
        }
        Ok(AttemptKey {
            run: RunKey::new(self.name.clone(), self.slot_ms()),
            attempt: self.attempt,
            instance_id: self.instance_id.to_string(),
            fence: self.fence,
        })
    }

    /// Tells the scheduler that a fenced transaction recorded this attempt `succeeded` and
    /// committed. Store crates call it right after that commit; the scheduler then writes no
    /// result of its own for this attempt, whatever the handler returns, and reports a
    /// success. Called without such a commit, the run stays `running` in the store until its
    /// lease expires and a backup runs it again.
    pub fn mark_finished_in_transaction(&self) {
        self.control.mark_finished_in_transaction();
    }

    /// Whether a fenced transaction recorded this attempt's success
    /// ([`JobContext::mark_finished_in_transaction`]).
    pub fn is_finished_in_transaction(&self) -> bool {
        self.control.is_finished_in_transaction()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A context of a run of `job` (also the handler task's tests).
    pub(crate) fn ctx(control: Arc<RunControl>) -> JobContext {
        JobContext {
            name: JobName::new("job").unwrap(),
            slot: DateTime::UNIX_EPOCH,
            scheduled_at: DateTime::UNIX_EPOCH,
            instance_id: Arc::from("me"),
            manual: false,
            attempt: 1,
            reason: Reason::Scheduled,
            fence: 1,
            signal: control.token(),
            data: Arc::new(Data::new()),
            control,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_deadline_trips_the_check_and_the_signal_without_the_scheduler() {
        let now = tokio::time::Instant::now();
        let control = Arc::new(RunControl::new(Some(
            now + std::time::Duration::from_secs(1),
        )));
        let ctx = ctx(control.clone());
        assert!(ctx.check_cancelled().is_ok());
        assert!(ctx.lease_deadline().is_some());
        // A renewal moves the deadline forward.
        control.set_deadline(Some(now + std::time::Duration::from_secs(2)));
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        assert!(ctx.check_cancelled().is_ok());
        // Nothing renews it (a frozen process wakes up past it): the handler's own check
        // fails, and the signal trips with it.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        let err = ctx.check_cancelled().unwrap_err();
        assert!(matches!(
            err,
            Error::Cancelled {
                cause: Some(CancelCause::LeaseDeadlinePassed),
                ..
            }
        ));
        assert!(ctx.signal.is_cancelled());
        assert_eq!(ctx.cancel_cause(), Some(CancelCause::LeaseDeadlinePassed));
    }

    #[test]
    fn a_run_without_a_lease_has_no_deadline() {
        let ctx = ctx(Arc::new(RunControl::new(None)));
        assert!(ctx.lease_deadline().is_none());
        assert!(ctx.check_cancelled().is_ok());
        ctx.control.cancel(CancelCause::Stopping);
        ctx.control.cancel(CancelCause::TimedOut);
        assert_eq!(
            ctx.cancel_cause(),
            Some(CancelCause::Stopping),
            "the first cause stays"
        );
    }
}
