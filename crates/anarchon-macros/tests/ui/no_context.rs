//! Must not compile: no context.
use anarchon::HandlerError;

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s")]
    async fn refresh(&self) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
