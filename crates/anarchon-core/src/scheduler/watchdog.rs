//! The watchdog thread: reports a driver loop that stopped turning (`Event::Stalled`,
//! `health().stalled`). [G-04]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{DriverState, Shared};
use crate::event::Event;

/// Milliseconds on a process-wide monotonic clock (real time, also under a paused tokio
/// clock), for the watchdog.
pub(crate) fn mono_ms() -> u64 {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// How often the watchdog looks, and the driver turns at least.
pub(crate) fn tick(shared: &Shared) -> Duration {
    (shared.cfg.stall_after / 4).max(Duration::from_millis(50))
}

/// Starts the watchdog thread; it ends when `stop` is set or the scheduler is gone.
pub(crate) fn spawn(shared: &Arc<Shared>, stop: Arc<AtomicBool>) {
    let weak = Arc::downgrade(shared);
    let stall = shared.cfg.stall_after;
    let period = tick(shared);
    let spawned = std::thread::Builder::new()
        .name("anarchon-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(period);
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(shared) = weak.upgrade() else { return };
                if !matches!(
                    *shared.driver.lock().unwrap_or_else(|e| e.into_inner()),
                    DriverState::Running { .. }
                ) {
                    return;
                }
                let idle =
                    mono_ms().saturating_sub(shared.health.last_turn_ms.load(Ordering::Relaxed));
                let stalled = idle > stall.as_millis() as u64;
                if stalled && !shared.health.stalled.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        idle_ms = idle,
                        "anarchon driver loop has not turned for {idle} ms"
                    );
                    let _ = shared.events.send(Event::Stalled {
                        idle: Duration::from_millis(idle),
                    });
                } else if !stalled {
                    shared.health.stalled.store(false, Ordering::Relaxed);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("could not start the anarchon watchdog thread: {e}");
    }
}
