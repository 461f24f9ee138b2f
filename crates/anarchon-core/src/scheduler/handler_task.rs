//! The body of a handler's task: resolve the run's data, call the handler, turn a panic
//! into an error, and report back.
//!
//! The task of a run in flight holds this future for as long as the handler runs, so its
//! size is memory per run in flight: a run with no data to resolve (no scheduler, job or
//! manual data) calls the handler at once and keeps only the handler's own (boxed) future;
//! resolving data happens in a boxed future of its own, so its state is paid only by runs
//! that have data.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::JobDef;
use crate::context::{Data, DataSource, JobContext};
use crate::error::{BoxError, Error};

type Outcome = std::result::Result<(), BoxError>;

/// What a run's handler is started with: boxed, so that the task of a run in flight holds a
/// pointer to it only until the handler is called, not its size for the handler's lifetime.
pub(crate) struct Start {
    pub(crate) job: Arc<JobDef>,
    pub(crate) ctx: JobContext,
    /// The scheduler's data, when the job's data is not fixed at registration.
    pub(crate) scheduler_data: Option<Arc<DataSource>>,
    /// `run_now`'s data.
    pub(crate) manual: Option<Data>,
}

/// Runs the job's handler for the context with the scheduler's and the job's data (and
/// `run_now`'s) merged into it. Data functions run at each run's start; if one fails, the
/// run fails. [B-31] A panic, in the handler's future or in the call that makes it, becomes
/// the error "handler panicked: ...".
pub(crate) async fn run_handler(start: Box<Start>) -> Outcome {
    let work = match std::panic::catch_unwind(AssertUnwindSafe(move || begin(*start))) {
        Ok(work) => work,
        Err(panic) => return Err(panicked(panic)),
    };
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => Err(panicked(panic)),
    }
}

impl Start {
    /// A run's start; boxed, see above. The scheduler's data is passed on only for a job whose
    /// data was not fixed at registration (fixed levels are in `job.fixed_data` already).
    pub(crate) fn new(
        job: Arc<JobDef>,
        ctx: JobContext,
        scheduler_data: Option<&Arc<DataSource>>,
        manual: Option<Data>,
    ) -> Box<Start> {
        let scheduler_data = match job.fixed_data {
            Some(_) => None,
            None => scheduler_data.cloned(),
        };
        Box::new(Start {
            job,
            ctx,
            scheduler_data,
            manual,
        })
    }
}

/// The data a job keeps, given the scheduler's (`scheduler_fixed`: the scheduler's data when
/// fixed, merged once, see [`fixed_data`]): when no level is a function, the levels merged
/// once and shared by every run, the job's own source then dropped (one copy per job); a job
/// without data of its own shares the scheduler's. Otherwise the job's own source, resolved
/// at each start. Returns `(JobDef::data, JobDef::fixed_data)`. [B-31]
pub(crate) fn job_data(
    scheduler: Option<&DataSource>,
    scheduler_fixed: Option<&Arc<Data>>,
    own: Option<DataSource>,
) -> (Option<DataSource>, Option<Arc<Data>>) {
    let fixed = match &own {
        None => scheduler_fixed.cloned(),
        Some(own) => fixed_data(scheduler, Some(own)),
    };
    match fixed {
        Some(fixed) => (None, Some(fixed)),
        None => (own, None),
    }
}

/// The data of every run of a job whose levels are all fixed (or absent), merged once:
/// `None` when there is no data at all or a level is a function. [B-31]
pub(crate) fn fixed_data(
    scheduler: Option<&DataSource>,
    job: Option<&DataSource>,
) -> Option<Arc<Data>> {
    let mut data: Option<Data> = None;
    for source in [scheduler, job].into_iter().flatten() {
        match source {
            DataSource::Fixed(d) => data = Some(data.unwrap_or_default().merged_with(d)),
            DataSource::Function(_) => return None,
        }
    }
    data.map(Arc::new)
}

/// The handler's future; a run with data to resolve gets it in a future of its own.
fn begin(start: Start) -> BoxFuture<'static, Outcome> {
    let Start {
        job,
        mut ctx,
        scheduler_data,
        manual,
    } = start;
    match (&job.fixed_data, manual) {
        // Every level is fixed: the data merged at registration, shared.
        (Some(fixed), None) => {
            ctx.data = fixed.clone();
            (job.handler)(ctx)
        }
        // Nothing to merge: `ctx.data` is already the empty data.
        (None, None) if scheduler_data.is_none() && job.data.is_none() => (job.handler)(ctx),
        (_, manual) => Box::pin(with_data(job, ctx, scheduler_data, manual)),
    }
}

/// Resolves and merges the run's data, then runs the handler with it.
async fn with_data(
    job: Arc<JobDef>,
    ctx: JobContext,
    scheduler_data: Option<Arc<DataSource>>,
    manual: Option<Data>,
) -> Outcome {
    // Fixed levels were merged at registration; otherwise each is resolved now.
    let (mut data, sources) = match &job.fixed_data {
        Some(fixed) => (Data::clone(fixed), [None, None]),
        None => (Data::new(), [scheduler_data.as_deref(), job.data.as_ref()]),
    };
    for source in sources.into_iter().flatten() {
        let d = source.resolve().await.map_err(|source| Error::Data {
            job: job.name.to_string(),
            source,
        })?;
        data = data.merged_with(&d);
    }
    if let Some(m) = manual {
        data = data.merged_with(&m);
    }
    let ctx = JobContext {
        data: Arc::new(data),
        ..ctx
    };
    (job.handler)(ctx).await
}

/// The error a panic becomes.
fn panicked(panic: Box<dyn Any + Send>) -> BoxError {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("handler panicked: {msg}").into()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::context::RunControl;
    use crate::ids::JobName;
    use crate::options::{JobKind, JobOptions};
    use crate::slot::Schedule;

    fn job(handler: super::super::shared::Handler, data: Option<DataSource>) -> Arc<JobDef> {
        job_of(handler, None, data)
    }

    /// A job registered on a scheduler with `scheduler` data, as the job builder makes it.
    fn job_of(
        handler: super::super::shared::Handler,
        scheduler: Option<&DataSource>,
        data: Option<DataSource>,
    ) -> Arc<JobDef> {
        let (data, fixed) = job_data(scheduler, fixed_data(scheduler, None).as_ref(), data);
        Arc::new(JobDef {
            name: JobName::new("j").unwrap(),
            kind: JobKind::Every,
            schedule: Schedule::every(Duration::from_secs(1), 0).unwrap(),
            opts: JobOptions::default(),
            handler,
            fixed_data: fixed,
            data,
        })
    }

    fn ctx() -> JobContext {
        crate::context::tests::ctx(Arc::new(RunControl::new(None)))
    }

    fn start(job: Arc<JobDef>, scheduler: Option<DataSource>, manual: Option<Data>) -> Box<Start> {
        Start::new(job, ctx(), scheduler.map(Arc::new).as_ref(), manual)
    }

    #[tokio::test]
    async fn b31_a_panic_in_the_handlers_future_or_in_its_call_is_an_error() {
        let in_future = job(
            Arc::new(|_| Box::pin(async { panic!("in the future") })),
            None,
        );
        let err = run_handler(start(in_future, None, None)).await.unwrap_err();
        assert_eq!(err.to_string(), "handler panicked: in the future");
        let in_call = job(Arc::new(|_| panic!("in the call {}", 1)), None);
        let err = run_handler(start(in_call, None, None)).await.unwrap_err();
        assert_eq!(err.to_string(), "handler panicked: in the call 1");
        // The same with data to merge first (`run_now`'s over the job's).
        let with_data = job(
            Arc::new(|_| panic!("after the data")),
            Some(Data::new().with_key("a", 1).into()),
        );
        let manual = Some(Data::new().with_key("b", 2));
        let err = run_handler(start(with_data, None, manual))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "handler panicked: after the data");
    }

    #[tokio::test]
    async fn b31_data_is_merged_only_when_there_is_some() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let handler: super::super::shared::Handler = Arc::new(move |ctx: JobContext| {
            s.lock().unwrap().push(ctx.data.value().clone());
            Box::pin(async { Ok(()) })
        });
        run_handler(start(job(handler.clone(), None), None, None))
            .await
            .unwrap();
        let scheduler: DataSource = Data::new().with_key("scheduler", 1).into();
        run_handler(start(
            job_of(
                handler.clone(),
                Some(&scheduler),
                Some(Data::new().with_key("job", 2).into()),
            ),
            Some(scheduler),
            Some(Data::new().with_key("manual", 3)),
        ))
        .await
        .unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], Data::new().value().clone());
        assert_eq!(
            seen[1],
            serde_json::json!({"scheduler": 1, "job": 2, "manual": 3})
        );
    }

    /// What each run's handler was given.
    fn recording() -> (
        super::super::shared::Handler,
        Arc<std::sync::Mutex<Vec<Arc<Data>>>>,
    ) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let handler: super::super::shared::Handler = Arc::new(move |ctx: JobContext| {
            s.lock().unwrap().push(ctx.data.clone());
            Box::pin(async { Ok(()) })
        });
        (handler, seen)
    }

    #[tokio::test]
    async fn b31_fixed_data_is_merged_once_and_shared_by_every_run() {
        let (handler, seen) = recording();
        let scheduler: DataSource = Data::new().with_key("a", 1).with_key("b", 1).into();
        let j = job_of(
            handler,
            Some(&scheduler),
            Some(Data::new().with_key("b", 2).into()),
        );
        for _ in 0..2 {
            run_handler(start(j.clone(), Some(scheduler.clone()), None))
                .await
                .unwrap();
        }
        // `run_now`'s data is merged over it, for that run alone.
        run_handler(start(
            j.clone(),
            Some(scheduler.clone()),
            Some(Data::new().with_key("c", 3)),
        ))
        .await
        .unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].value(), &serde_json::json!({"a": 1, "b": 2}));
        assert!(
            Arc::ptr_eq(&seen[0], &seen[1]),
            "runs share the data merged at registration, not a copy each"
        );
        assert_eq!(
            seen[2].value(),
            &serde_json::json!({"a": 1, "b": 2, "c": 3})
        );
        assert_eq!(
            seen[0].value(),
            &serde_json::json!({"a": 1, "b": 2}),
            "the shared data is unchanged by the manual run"
        );
    }

    #[tokio::test]
    async fn b31_a_data_function_at_either_level_runs_at_each_start() {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let function = |key: &'static str| {
            let calls = calls.clone();
            DataSource::function(move || {
                let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                async move { Ok::<_, BoxError>(Data::new().with_key(key, n)) }
            })
        };
        let fixed: DataSource = Data::new().with_key("fixed", 0).with_key("f", 0).into();
        let (handler, seen) = recording();
        // The scheduler's data fixed, the job's a function; then the other way round.
        let job_fn = job_of(handler.clone(), Some(&fixed), Some(function("f")));
        let scheduler_fn = function("s");
        let sched_fn = job_of(handler, Some(&scheduler_fn), Some(fixed.clone()));
        assert!(job_fn.fixed_data.is_none() && sched_fn.fixed_data.is_none());
        for _ in 0..2 {
            run_handler(start(job_fn.clone(), Some(fixed.clone()), None))
                .await
                .unwrap();
        }
        run_handler(start(sched_fn, Some(scheduler_fn), None))
            .await
            .unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].value(), &serde_json::json!({"fixed": 0, "f": 1}));
        assert_eq!(seen[1].value(), &serde_json::json!({"fixed": 0, "f": 2}));
        assert_eq!(
            seen[2].value(),
            &serde_json::json!({"s": 3, "fixed": 0, "f": 0})
        );
    }

    /// The future a run's task holds while its handler runs: the handler's own future is
    /// boxed apart and the start is boxed until the call, so this is a few words (it was
    /// 816 bytes in a debug build when the data merge and the start lived in it).
    #[test]
    fn a_run_without_data_holds_a_small_future() {
        let j = job(Arc::new(|_| Box::pin(async { Ok(()) })), None);
        let fut = run_handler(start(j, None, None));
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 64, "the handler task's future is {size} bytes");
    }
}
