//! PostgreSQL example: the same jobs as the Redis example, on `DATABASE_URL` (default
//! `postgres://localhost/postgres`). Run it in three terminals.
//!
//! ```sh
//! cargo run --example postgres --features postgres
//! ```

#[path = "common/jobs.rs"]
mod jobs;

use anarchon::{Scheduler, postgres::PostgresStore};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://localhost/postgres".into());
    let store = PostgresStore::connect(&url).await?;
    let scheduler = Scheduler::leased(store).build()?;
    jobs::run(scheduler).await?;
    Ok(())
}
