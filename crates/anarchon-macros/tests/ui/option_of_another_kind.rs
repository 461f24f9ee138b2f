//! Must not compile: option of another kind.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s", timezone = "Europe/Berlin")]
    async fn refresh(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
