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
//! Waking is itself a cost: the thread's timed wait ends some tens of µs late (the kernel's
//! timer slack, an idle virtual CPU coming back), and the notify then has to bring a parked
//! tokio worker back, which costs as much again. So for a *sparse* deadline (none fired in the
//! [`MIN_GAP`] before it) the thread wakes the driver [`LEAD`] early and the driver waits the
//! rest out on its running worker, yielding between looks at the clock ([`wait_out`]): the
//! timed waits' lateness is spent before the deadline instead of after it. That spends at most
//! `LEAD` of one CPU per `MIN_GAP` (2 %), and for a job every second 0.04 %; dense deadlines
//! (a busy scheduler, whose worker is awake anyway) are never led.
//!
//! Used with the system clocks only: under `Clock::Tokio` (tests with tokio's paused clock)
//! real time means nothing and tokio's timers are exact already.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long before a sparse deadline the thread wakes the driver.
const LEAD: Duration = Duration::from_micros(400);
/// A deadline is led only if the thread fired nothing in this long before it.
const MIN_GAP: Duration = Duration::from_millis(20);

/// The handle the driver keeps; dropping it stops the thread.
pub(crate) struct PreciseWake {
    state: Arc<State>,
    /// The deadline last handed to the thread, to skip the lock when nothing changed.
    armed: Option<Instant>,
    /// The deadline the thread last woke the driver for, so a led wait that another select
    /// branch interrupted is taken up again instead of waiting for a wake that already came.
    woken_for: Option<Instant>,
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
    /// When the thread last fired (real time), for [`MIN_GAP`].
    fired_when: Option<Instant>,
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
            Ok(_) => Some(Self {
                state,
                armed: None,
                woken_for: None,
            }),
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

    /// Resolves when the deadline `at` (the one last [`set`](Self::set)) has come: the
    /// thread's wake, then a led wake's last µs waited out on this worker ([`wait_out`]).
    /// Cancel-safe: dropped while waiting it loses no wake and no led wait.
    pub(crate) async fn due(&mut self, at: tokio::time::Instant) {
        let at = at.into_std();
        if self.woken_for != Some(at) {
            self.state.due.notified().await;
            self.woken_for = Some(at);
        }
        if !wait_out(at).await {
            // Woken for a deadline since moved later: one empty turn, then its own wake.
            self.woken_for = None;
        }
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
                let wake_at = wake_at(at, slot.fired_when);
                if now >= wake_at {
                    slot.fired = Some(at);
                    slot.fired_when = Some(now);
                    state.due.notify_one();
                } else {
                    slot = state
                        .changed
                        .wait_timeout(slot, wake_at - now)
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

/// When the thread wakes the driver for the deadline `at`, given when it last fired: [`LEAD`]
/// early if nothing fired in the [`MIN_GAP`] before that, else at `at` itself.
fn wake_at(at: Instant, fired_when: Option<Instant>) -> Instant {
    let Some(led) = at.checked_sub(LEAD) else {
        return at;
    };
    match fired_when {
        Some(last) if led < last + MIN_GAP => at,
        _ => led,
    }
}

/// The driver's side of a led wake: waits until `at` on the running worker, yielding to the
/// worker's other tasks between looks at the clock. Returns `false` at once for a deadline
/// more than [`LEAD`] away (a wake for a deadline since moved later: the driver turns once,
/// finds nothing due, and waits again), so it never holds a worker longer than `LEAD`.
async fn wait_out(at: Instant) -> bool {
    if at.saturating_duration_since(Instant::now()) > LEAD {
        return false;
    }
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_thread_fires_a_led_wake_once_per_deadline() {
        let mut wake = PreciseWake::start().expect("thread");
        let at = tokio::time::Instant::now() + Duration::from_millis(20);
        wake.set(Some(at));
        tokio::time::timeout(Duration::from_secs(5), wake.state.due.notified())
            .await
            .expect("woken");
        // A first deadline is sparse: led, so woken at most `LEAD` early.
        assert!(
            tokio::time::Instant::now() + LEAD >= at,
            "woken more than LEAD before the deadline"
        );
        // The same deadline handed again does not fire again.
        wake.set(None);
        wake.set(Some(at));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), wake.state.due.notified())
                .await
                .is_err(),
            "the same deadline fired twice"
        );
        // A new deadline does.
        wake.set(Some(tokio::time::Instant::now() + Duration::from_millis(5)));
        tokio::time::timeout(Duration::from_secs(5), wake.state.due.notified())
            .await
            .expect("woken again");
    }

    #[tokio::test]
    async fn due_resolves_at_the_deadline_not_before() {
        let mut wake = PreciseWake::start().expect("thread");
        let at = tokio::time::Instant::now() + Duration::from_millis(30);
        wake.set(Some(at));
        tokio::time::timeout(Duration::from_secs(5), wake.due(at))
            .await
            .expect("woken");
        assert!(
            tokio::time::Instant::now() >= at,
            "resolved before the deadline"
        );
        assert_eq!(
            wake.woken_for,
            Some(at.into_std()),
            "the wake is remembered"
        );
        // Taken up again (another branch won the turn): no second wake is waited for.
        tokio::time::timeout(Duration::from_millis(100), wake.due(at))
            .await
            .expect("an interrupted led wait is taken up again without a new wake");
    }

    #[tokio::test]
    async fn a_wake_for_a_deadline_since_moved_later_is_one_empty_turn() {
        let mut wake = PreciseWake::start().expect("thread");
        let first = tokio::time::Instant::now() + Duration::from_millis(10);
        wake.set(Some(first));
        // The driver's deadline moved a second later before the thread fired.
        let later = first + Duration::from_secs(1);
        tokio::time::timeout(Duration::from_millis(500), wake.due(later))
            .await
            .expect("resolved at the old wake without waiting out a second");
        assert!(
            tokio::time::Instant::now() < later,
            "held the worker until the later deadline"
        );
        assert_eq!(
            wake.woken_for, None,
            "the later deadline waits for its own wake"
        );
    }

    #[test]
    fn only_sparse_deadlines_are_led() {
        let at = Instant::now() + Duration::from_secs(10);
        assert_eq!(wake_at(at, None), at - LEAD, "the first deadline is led");
        assert_eq!(
            wake_at(at, Some(at - Duration::from_secs(1))),
            at - LEAD,
            "a deadline a second after the last wake is led"
        );
        assert_eq!(
            wake_at(at, Some(at - LEAD - MIN_GAP)),
            at - LEAD,
            "exactly MIN_GAP of quiet is enough"
        );
        assert_eq!(
            wake_at(at, Some(at - Duration::from_millis(5))),
            at,
            "a deadline 5 ms after the last wake is not led"
        );
    }

    #[tokio::test]
    async fn a_far_deadline_is_not_waited_out() {
        let far = Instant::now() + LEAD * 4;
        let started = Instant::now();
        assert!(
            !wait_out(far).await,
            "a deadline beyond LEAD is left to its own wake"
        );
        assert!(started.elapsed() < LEAD * 4, "wait_out held the worker");
        assert!(wait_out(Instant::now()).await, "a deadline now is due");
    }
}
