//! Must not compile: bad cron.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[cron("61 * * * *")]
    async fn hourly(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
