//! Must not compile: wrong context type.
use anarchon::HandlerError;

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s")]
    async fn refresh(&self, _slot: u64) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
