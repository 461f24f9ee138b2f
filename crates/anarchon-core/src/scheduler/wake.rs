//! The driver's precise wake-up: a thread that sleeps until the driver's earliest timer with
//! the operating system's precision and then wakes the driver.
//!
//! tokio's timer wheel counts whole milliseconds and rounds every deadline up to the next one,
//! so a slot's timer fired up to 1 ms late, and the start lag of a lone job (a wake-up plus a
//! claim's round trip) was dominated by that rounding. The wake thread waits on a condition
//! variable with a timeout (a futex: tens of µs late on Linux) and notifies the driver, which
//! then handles the timers that are due exactly as it does on tokio's wake-up. tokio's sleep
//! stays armed beside it: whichever fires first wins, and a wake that finds nothing due only
//! costs one empty loop turn.
//!
//! Used with the system clocks only: under `Clock::Tokio` (tests with tokio's paused clock)
//! real time means nothing and tokio's timers are exact already.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// The handle the driver keeps; dropping it stops the thread.
pub(crate) struct PreciseWake {
    state: Arc<State>,
    /// The deadline last handed to the thread, to skip the lock when nothing changed.
    armed: Option<Instant>,
}

struct State {
    slot: Mutex<Slot>,
    changed: Condvar,
    due: Notify,
}

#[derive(Default)]
struct Slot {
    /// The deadline to wake the driver at; `None` while there is none.
    at: Option<Instant>,
    /// The deadline last fired, so the same deadline handed again is not fired twice.
    fired: Option<Instant>,
    stop: bool,
}

impl PreciseWake {
    /// Starts the wake thread; `None` (and tokio's timer alone) if the thread cannot start.
    pub(crate) fn start() -> Option<Self> {
        let state = Arc::new(State {
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
            due: Notify::new(),
        });
        let thread_state = state.clone();
        let spawned = std::thread::Builder::new()
            .name("anarchon-wake".into())
            .stack_size(64 * 1024)
            .spawn(move || wake_loop(&thread_state));
        match spawned {
            Ok(_) => Some(Self { state, armed: None }),
            Err(e) => {
                tracing::warn!(
                    "could not start the anarchon wake thread (timers fall back to tokio's 1 ms wheel): {e}"
                );
                None
            }
        }
    }

    /// Hands the driver's earliest deadline to the thread (no lock when it did not change).
    pub(crate) fn set(&mut self, at: Option<tokio::time::Instant>) {
        let at = at.map(tokio::time::Instant::into_std);
        if at == self.armed {
            return;
        }
        self.armed = at;
        let mut slot = self.state.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.at = at;
        drop(slot);
        self.state.changed.notify_one();
    }

    /// Resolves when the thread says the deadline has come.
    pub(crate) async fn due(&self) {
        self.state.due.notified().await;
    }
}

impl Drop for PreciseWake {
    fn drop(&mut self) {
        let mut slot = self.state.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.stop = true;
        drop(slot);
        self.state.changed.notify_one();
    }
}

fn wake_loop(state: &State) {
    let mut slot = state.slot.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if slot.stop {
            return;
        }
        match slot.at {
            Some(at) if slot.fired != Some(at) => {
                let now = Instant::now();
                if now >= at {
                    slot.fired = Some(at);
                    state.due.notify_one();
                } else {
                    slot = state
                        .changed
                        .wait_timeout(slot, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            _ => {
                slot = state.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wakes_at_the_deadline_and_only_once_per_deadline() {
        let mut wake = PreciseWake::start().expect("thread");
        let at = tokio::time::Instant::now() + Duration::from_millis(20);
        wake.set(Some(at));
        tokio::time::timeout(Duration::from_secs(5), wake.due())
            .await
            .expect("woken");
        assert!(
            tokio::time::Instant::now() >= at,
            "woken before the deadline"
        );
        // The same deadline handed again does not fire again.
        wake.set(None);
        wake.set(Some(at));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), wake.due())
                .await
                .is_err(),
            "the same deadline fired twice"
        );
        // A new deadline does.
        wake.set(Some(tokio::time::Instant::now() + Duration::from_millis(5)));
        tokio::time::timeout(Duration::from_secs(5), wake.due())
            .await
            .expect("woken again");
    }
}
