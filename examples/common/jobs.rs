//! The jobs the Redis and PostgreSQL examples share: run the example in three terminals and
//! watch each slot start on one instance; Ctrl+C on the instance running `report` hands it
//! over to another at once.

use std::time::Duration;

use anarchon::{Event, Leased, Scheduler};

/// Registers `sync` (every 10 s, one second of work) and `report` (every 30 s, 20 seconds of
/// work that stops at the signal, so a stopping instance hands it over).
pub(crate) fn register(scheduler: &Scheduler<Leased>) -> anarchon::Result<()> {
    scheduler.every("sync", "10s").handler(|ctx| async move {
        println!(
            "  sync: slot {} on {} (attempt {})",
            ctx.slot, ctx.instance_id, ctx.attempt
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    })?;
    scheduler.every("report", "30s").handler(|ctx| async move {
        println!(
            "  report: started (attempt {}, reason {}, fence {})",
            ctx.attempt, ctx.reason, ctx.fence
        );
        for step in 1..=20 {
            // Stop between steps when asked: returning the error hands the run over.
            ctx.check_cancelled()?;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = ctx.signal.cancelled() => {}
            }
            if step % 5 == 0 {
                println!("  report: {step}/20");
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Prints what happens on this instance.
pub(crate) fn narrate(scheduler: &Scheduler<Leased>) {
    let mut events = scheduler.events();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            match event {
                Event::Start(run) => println!(
                    "start   {} slot {} attempt {} ({})",
                    run.job, run.slot, run.attempt, run.reason
                ),
                Event::Success { run, duration } => {
                    println!(
                        "success {} slot {} in {} ms",
                        run.job,
                        run.slot,
                        duration.as_millis()
                    )
                }
                Event::Failure { run, error } => {
                    println!("failure {} slot {}: {error}", run.job, run.slot)
                }
                Event::Interrupted { run, cause } => {
                    println!("interrupted {} slot {}: {cause}", run.job, run.slot)
                }
                Event::Skip { job, slot, reason } => {
                    println!("skip    {job} slot {slot}: {}", reason.as_str())
                }
                Event::Lost(run) => println!("lost    {} slot {}", run.job, run.slot),
                Event::Error {
                    operation, message, ..
                } => println!("error   {operation}: {message}"),
                other => println!("{other:?}"),
            }
        }
    });
}

/// Runs until Ctrl+C, then stops (handing running jobs over).
pub(crate) async fn run(scheduler: Scheduler<Leased>) -> anarchon::Result<()> {
    register(&scheduler)?;
    narrate(&scheduler);
    scheduler.start().await?;
    println!(
        "instance {} started; Ctrl+C to stop",
        scheduler.instance_id()
    );
    tokio::signal::ctrl_c().await.ok();
    println!("stopping: running jobs are handed over");
    scheduler.stop(Duration::from_secs(30)).await
}
