//! Redis example: `REDIS_URL` (default `redis://localhost:6379`). Run it in three terminals:
//! each `sync` slot runs on one instance; Ctrl+C on the instance running `report` hands it
//! over to another at once.
//!
//! ```sh
//! cargo run --example basic --features redis
//! ```

#[path = "common/jobs.rs"]
mod jobs;

use anarchon::{Scheduler, redis::RedisStore};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://localhost:6379".into());
    let store = RedisStore::connect(&url).await?;
    let scheduler = Scheduler::leased(store).build()?;
    jobs::run(scheduler).await?;
    Ok(())
}
