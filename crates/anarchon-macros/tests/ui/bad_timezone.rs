//! Must not compile: bad timezone.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[cron("0 9 * * *", timezone = "Mars/Olympus")]
    async fn morning(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
