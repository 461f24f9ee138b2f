//! Must not compile: catch up all without max.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s", catch_up = "all")]
    async fn refresh(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
