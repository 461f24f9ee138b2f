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
    /// The scheduler's data.
    pub(crate) scheduler_data: Option<DataSource>,
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

/// The handler's future; a run with data to resolve gets it in a future of its own.
fn begin(start: Start) -> BoxFuture<'static, Outcome> {
    let Start {
        job,
        ctx,
        scheduler_data,
        manual,
    } = start;
    if scheduler_data.is_none() && job.data.is_none() && manual.is_none() {
        // Nothing to merge: `ctx.data` is already the empty data.
        (job.handler)(ctx)
    } else {
        Box::pin(with_data(job, ctx, scheduler_data, manual))
    }
}

/// Resolves and merges the run's data, then runs the handler with it.
async fn with_data(
    job: Arc<JobDef>,
    ctx: JobContext,
    scheduler_data: Option<DataSource>,
    manual: Option<Data>,
) -> Outcome {
    let mut data = Data::new();
    for source in [scheduler_data.as_ref(), job.data.as_ref()]
        .into_iter()
        .flatten()
    {
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
        Arc::new(JobDef {
            name: JobName::new("j").unwrap(),
            kind: JobKind::Every,
            schedule: Schedule::every(Duration::from_secs(1), 0).unwrap(),
            opts: JobOptions::default(),
            handler,
            data,
        })
    }

    fn ctx() -> JobContext {
        crate::context::tests::ctx(Arc::new(RunControl::new(None)))
    }

    fn start(job: Arc<JobDef>, scheduler: Option<DataSource>, manual: Option<Data>) -> Box<Start> {
        Box::new(Start {
            job,
            ctx: ctx(),
            scheduler_data: scheduler,
            manual,
        })
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
        // The same with data to resolve first.
        let with_data = job(
            Arc::new(|_| panic!("after the data")),
            Some(Data::new().with_key("a", 1).into()),
        );
        let err = run_handler(start(with_data, None, None)).await.unwrap_err();
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
        run_handler(start(
            job(handler.clone(), Some(Data::new().with_key("job", 2).into())),
            Some(Data::new().with_key("scheduler", 1).into()),
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
