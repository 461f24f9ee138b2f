//! Registering whole objects: one type declares its jobs with `#[anarchon::jobs]`, and two
//! tenants of that type are registered under their own prefixes, each with its own data and
//! timezone. Runs by itself in about four seconds on a temporary SQLite file.
//!
//! ```sh
//! cargo run --example register
//! ```
//!
//! Job names are `prefix-Type-method` (`acme-Tenant-sync`); a third object under a prefix
//! that is already taken is refused with an error naming the job.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anarchon::registration::Registration;
use anarchon::sqlite::SqliteStore;
use anarchon::{Data, HandlerError, JobContext, RunStatus, Scheduler};

/// One customer of a multi-tenant service.
struct Tenant {
    name: &'static str,
    synced: AtomicU32,
}

#[anarchon::jobs]
impl Tenant {
    /// Every second, on every tenant: data comes from the tenant's registration.
    #[every("1s", timeout = "5s")]
    async fn sync(&self, ctx: JobContext) -> Result<(), HandlerError> {
        ctx.check_cancelled()?;
        let n = self.synced.fetch_add(1, Ordering::SeqCst) + 1;
        println!(
            "run     {:<18} tenant {:<6} region {} (run {n}, slot {})",
            ctx.name.as_str(),
            self.name,
            ctx.value("region").and_then(|v| v.as_str()).unwrap_or("?"),
            ctx.slot.format("%H:%M:%S"),
        );
        Ok(())
    }

    /// Weekday mornings at nine in the tenant's own timezone (the registration's default).
    #[cron("0 9 * * 1-5", timeout = "10m", name = "morning-report")]
    async fn morning_report(&self, _ctx: JobContext) -> Result<(), HandlerError> {
        println!("report  for {}", self.name);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join(format!("anarchon-register-{}.db", std::process::id()));
    let store = SqliteStore::connect(&path).await?;
    let scheduler = Scheduler::leased(store).jitter(Duration::ZERO).build()?;

    // Two objects of one type: distinct prefixes, and defaults for all of each one's jobs.
    let tenants = [
        (Arc::new(Tenant::new("acme")), "eu", "Europe/Berlin"),
        (Arc::new(Tenant::new("globex")), "us", "America/New_York"),
    ];
    for (tenant, region, timezone) in &tenants {
        let names = scheduler.register(
            tenant.clone(),
            Registration::new()
                .prefix(tenant.name)
                .timezone(*timezone)
                .data(Data::new().with_key("region", *region)),
        )?;
        let names: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        println!("registered {} as {}", tenant.name, names.join(", "));
    }

    // A third object under a prefix already taken: refused, and nothing of it registered.
    match scheduler.register(
        Arc::new(Tenant::new("acme")),
        Registration::new().prefix("acme"),
    ) {
        Ok(_) => anyhow::bail!("a duplicate prefix was accepted"),
        Err(e) => println!("refused: {e}"),
    }

    for job in scheduler.jobs() {
        let next = job.next_run.map(|t| t.to_rfc3339()).unwrap_or_default();
        println!(
            "job     {:<22} {:<5} next {next}",
            job.name.as_str(),
            job.kind.as_str()
        );
    }

    scheduler.start().await?;
    tokio::time::sleep(Duration::from_millis(3_300)).await;

    // The history is read from the store, so before `stop` closes it.
    let mut all_ran = true;
    for (tenant, _, _) in &tenants {
        let job = format!("{}-Tenant-sync", tenant.name);
        let history = scheduler.history(&job, 100).await?;
        let ok = history
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .count();
        println!("history {job}: {ok} succeeded runs");
        all_ran &= ok >= 2;
    }
    scheduler.stop(Duration::from_secs(5)).await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    anyhow::ensure!(
        all_ran,
        "each tenant's sync job should have run at least twice"
    );
    println!("done: two tenants, one type, separate jobs and data");
    Ok(())
}

impl Tenant {
    fn new(name: &'static str) -> Self {
        Tenant {
            name,
            synced: AtomicU32::new(0),
        }
    }
}
