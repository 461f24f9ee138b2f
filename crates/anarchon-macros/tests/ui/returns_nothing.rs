//! Must not compile: returns nothing.
use anarchon::JobContext;

struct Reports;

#[anarchon::jobs]
impl Reports {
    #[every("10s")]
    async fn refresh(&self, _ctx: JobContext) {}
}

fn main() {}
