//! Must not compile: not async.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s")]
    fn refresh(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
