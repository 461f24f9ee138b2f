//! Must not compile: bad name.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s", name = "daily report")]
    async fn refresh(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
