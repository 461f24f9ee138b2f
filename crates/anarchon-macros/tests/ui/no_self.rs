//! Must not compile: no self.
use anarchon::{HandlerError, JobContext};

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s")]
    async fn refresh(_ctx: JobContext) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
