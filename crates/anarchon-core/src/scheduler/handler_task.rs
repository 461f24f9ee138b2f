//! The body of a handler's task: resolve the run's data, call the handler, turn a panic
//! into an error, and report back.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use super::JobDef;
use crate::context::{Data, DataSource, JobContext};
use crate::error::{BoxError, Error};

/// Runs `job`'s handler for `ctx` with the scheduler's and the job's data (and `manual`,
/// `run_now`'s data) merged into it. Data functions run at each run's start; if one fails,
/// the run fails. [B-31] A panic becomes the error "handler panicked: ...".
pub(crate) async fn run_handler(
    job: Arc<JobDef>,
    ctx: JobContext,
    scheduler_data: Option<DataSource>,
    manual: Option<Data>,
) -> std::result::Result<(), BoxError> {
    let work = async move {
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
    };
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("handler panicked: {msg}").into())
        }
    }
}
