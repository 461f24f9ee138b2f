//! The bench's slowed store (`bench-node run --slow-factor F --slow-from-ms A
//! --slow-until-ms B`): a [`LeaseStore`] around the node's real store that, while the host
//! clock reads from epoch ms A until B, answers F times slower. Inside the window every call
//! waits for one lock of the node (the slowed store serves one call at a time, so its
//! throughput drops by the factor, not only its latency), makes the real call, then sleeps
//! (F - 1) x that call's own duration before it answers and lets the next call in. Outside
//! the window, and for a call whose turn comes after the window ended, it passes the call
//! through. Every call of the node counts as in flight from the moment the scheduler makes
//! it until it is answered or dropped (the scheduler's own timeout), slowed or not: the
//! `calls=` reading of the node's `SAMPLE` lines.
//!
//! Bench tooling, not library API: the trait methods are written out as `async_trait`
//! expands them (the example does not depend on that crate).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anarchon::LeaseStore;
use anarchon::store::{
    BatchLimits, ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    OwnerWrite, Prepare, Renewal, Result, Retention, RunKey, RunRecord, RunView, Store, Takeover,
    TakeoverOutcome,
};

/// When and how much slower: epoch ms `from_ms..until_ms` on the host clock, `factor`
/// times slower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slowdown {
    /// How many times slower (1 passes every call through).
    pub(crate) factor: u32,
    /// The window's first epoch ms.
    pub(crate) from_ms: i64,
    /// The first epoch ms after it.
    pub(crate) until_ms: i64,
}

impl Slowdown {
    /// No slowdown: every call passes through.
    pub(crate) const NONE: Slowdown = Slowdown {
        factor: 1,
        from_ms: 0,
        until_ms: 0,
    };

    fn active(&self, now_ms: i64) -> bool {
        self.factor > 1 && now_ms >= self.from_ms && now_ms < self.until_ms
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The store calls the node has made and not had answered: now, and the most since the
/// last [`CallsInFlight::take_peak`].
#[derive(Debug, Default)]
pub(crate) struct CallsInFlight {
    now: AtomicU64,
    peak: AtomicU64,
    /// The store's answers to the node's claims: won, taken, overlap, late, failed calls.
    answers: [AtomicU64; 5],
}

impl CallsInFlight {
    /// The most calls in flight at once since the last reading (at least those in flight
    /// now); starts the next reading.
    pub(crate) fn take_peak(&self) -> u64 {
        let now = self.now.load(Ordering::Relaxed);
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }

    /// The store's answers to the node's claims so far: won, taken, overlap, late (judged
    /// by the store, not shed by the scheduler before it asked), and claims whose call failed
    /// (a call the scheduler dropped at its timeout counts in none).
    pub(crate) fn answers(&self) -> [u64; 5] {
        std::array::from_fn(|i| self.answers[i].load(Ordering::Relaxed))
    }

    fn tally(&self, answers: Option<&[ClaimOutcome]>, claims: usize) {
        let add = |i: usize, n: usize| {
            self.answers[i].fetch_add(n as u64, Ordering::Relaxed);
        };
        match answers {
            Some(outcomes) => {
                for o in outcomes {
                    add(
                        match o {
                            ClaimOutcome::Won(_) => 0,
                            ClaimOutcome::Taken => 1,
                            ClaimOutcome::Overlap { .. } => 2,
                            ClaimOutcome::Late { .. } => 3,
                        },
                        1,
                    );
                }
            }
            None => add(4, claims),
        }
    }

    fn enter(&self) -> InFlight<'_> {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(n, Ordering::Relaxed);
        InFlight(self)
    }
}

/// One call in flight; answered or dropped when this drops.
struct InFlight<'a>(&'a CallsInFlight);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The node's store, slowed inside its window. See the module's doc.
pub(crate) struct SlowStore {
    inner: Arc<dyn LeaseStore>,
    slowdown: Slowdown,
    /// One call at a time inside the window.
    turn: tokio::sync::Mutex<()>,
    calls: Arc<CallsInFlight>,
}

impl SlowStore {
    /// Wraps `inner`; `calls` counts the calls in flight.
    pub(crate) fn new(
        inner: Arc<dyn LeaseStore>,
        slowdown: Slowdown,
        calls: Arc<CallsInFlight>,
    ) -> SlowStore {
        SlowStore {
            inner,
            slowdown,
            turn: tokio::sync::Mutex::new(()),
            calls,
        }
    }

    /// The real call `call`, slowed if the window is open when it is made and still open
    /// when its turn comes.
    fn slowed<'a, T: Send + 'a>(
        &'a self,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move {
            let _in_flight = self.calls.enter();
            if !self.slowdown.active(now_ms()) {
                return call.await;
            }
            let _turn = self.turn.lock().await;
            if !self.slowdown.active(now_ms()) {
                return call.await;
            }
            let started = Instant::now();
            let answer = call.await;
            let took = started.elapsed();
            tokio::time::sleep(took.saturating_mul(self.slowdown.factor - 1)).await;
            answer
        })
    }
}

/// A boxed store answer, as `async_trait` has the trait's methods return it.
type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

impl Store for SlowStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn prepare<'s, 'p, 'a>(&'s self, prepare: &'p Prepare) -> Answer<'a, ()>
    where
        's: 'a,
        'p: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.prepare(prepare))
    }
    fn now<'s, 'a>(&'s self) -> Answer<'a, EpochMs>
    where
        's: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.now())
    }
    fn close<'s, 'a>(&'s self) -> Answer<'a, ()>
    where
        's: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.close())
    }
}

impl HistoryStore for SlowStore {
    fn history<'s, 'j, 'a>(&'s self, job: &'j JobName, count: usize) -> Answer<'a, Vec<RunRecord>>
    where
        's: 'a,
        'j: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.history(job, count))
    }
    fn last_run<'s, 'j, 'a>(&'s self, job: &'j JobName) -> Answer<'a, Option<RunRecord>>
    where
        's: 'a,
        'j: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.last_run(job))
    }
    fn record_manual<'s, 'r, 'a>(
        &'s self,
        record: &'r RunRecord,
        retention: Retention,
    ) -> Answer<'a, ()>
    where
        's: 'a,
        'r: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.record_manual(record, retention))
    }
    fn known_jobs<'s, 'a>(&'s self) -> Answer<'a, Vec<JobName>>
    where
        's: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.known_jobs())
    }
}

impl LeaseStore for SlowStore {
    fn claim_many<'s, 'c, 'a>(&'s self, claims: &'c [LeaseClaim]) -> Answer<'a, Vec<ClaimOutcome>>
    where
        's: 'a,
        'c: 'a,
        Self: 'a,
    {
        Box::pin(async move {
            let answers = self.slowed(self.inner.claim_many(claims)).await;
            self.calls
                .tally(answers.as_ref().ok().map(Vec::as_slice), claims.len());
            answers
        })
    }
    fn heartbeat<'s, 'l, 'a>(
        &'s self,
        leases: &'l [Lease],
        lease_ms: u64,
    ) -> Answer<'a, Vec<Renewal>>
    where
        's: 'a,
        'l: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.heartbeat(leases, lease_ms))
    }
    fn finish_many<'s, 'w, 'a>(
        &'s self,
        writes: &'w [(Lease, Finish)],
    ) -> Answer<'a, Vec<OwnerWrite>>
    where
        's: 'a,
        'w: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.finish_many(writes))
    }
    fn release<'s, 'l, 'a>(&'s self, lease: &'l Lease) -> Answer<'a, OwnerWrite>
    where
        's: 'a,
        'l: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.release(lease))
    }
    fn take_over_many<'s, 't, 'a>(
        &'s self,
        takeovers: &'t [Takeover],
    ) -> Answer<'a, Vec<TakeoverOutcome>>
    where
        's: 'a,
        't: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.take_over_many(takeovers))
    }
    fn limits(&self) -> BatchLimits {
        self.inner.limits()
    }
    fn claim<'s, 'c, 'a>(&'s self, claim: &'c LeaseClaim) -> Answer<'a, ClaimOutcome>
    where
        's: 'a,
        'c: 'a,
        Self: 'a,
    {
        Box::pin(async move {
            let answer = self.slowed(self.inner.claim(claim)).await;
            self.calls
                .tally(answer.as_ref().ok().map(std::slice::from_ref), 1);
            answer
        })
    }
    fn finish<'s, 'l, 'f, 'a>(
        &'s self,
        lease: &'l Lease,
        finish: &'f Finish,
    ) -> Answer<'a, OwnerWrite>
    where
        's: 'a,
        'l: 'a,
        'f: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.finish(lease, finish))
    }
    fn take_over<'s, 't, 'a>(&'s self, takeover: &'t Takeover) -> Answer<'a, TakeoverOutcome>
    where
        's: 'a,
        't: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.take_over(takeover))
    }
    fn runs<'s, 'r, 'a>(&'s self, runs: &'r [RunKey]) -> Answer<'a, Vec<RunView>>
    where
        's: 'a,
        'r: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.runs(runs))
    }
    fn unfinished_runs<'s, 'j, 'a>(&'s self, jobs: &'j [JobName]) -> Answer<'a, Vec<RunView>>
    where
        's: 'a,
        'j: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.unfinished_runs(jobs))
    }
    fn newest_unfinished_runs<'s, 'j, 'a>(
        &'s self,
        jobs: &'j [JobName],
        newest: usize,
    ) -> Answer<'a, Vec<RunView>>
    where
        's: 'a,
        'j: 'a,
        Self: 'a,
    {
        self.slowed(self.inner.newest_unfinished_runs(jobs, newest))
    }
    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<RunKey>> {
        self.inner.subscribe_releases()
    }
    fn set_watching(&self, watching: bool) {
        self.inner.set_watching(watching)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anarchon::memory::MemoryStore;
    use std::time::Duration;

    /// A real call that takes 20 ms.
    async fn call_of_20ms() -> Result<()> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }

    fn store(from_ms: i64, until_ms: i64, calls: Arc<CallsInFlight>) -> SlowStore {
        let slowdown = Slowdown {
            factor: 10,
            from_ms,
            until_ms,
        };
        SlowStore::new(Arc::new(MemoryStore::new()), slowdown, calls)
    }

    #[tokio::test]
    async fn inside_the_window_calls_take_turns_and_answer_factor_times_slower() {
        let calls = Arc::new(CallsInFlight::default());
        let store = store(now_ms() - 1_000, now_ms() + 60_000, calls.clone());
        let started = Instant::now();
        store.slowed(call_of_20ms()).await.unwrap();
        let one = started.elapsed();
        // 20 ms of real call, then 9 x 20 ms.
        assert!(one >= Duration::from_millis(200), "{one:?}");
        assert!(one < Duration::from_millis(400), "{one:?}");
        // Two calls made together take turns: the second answers after both had theirs.
        let started = Instant::now();
        let (a, b) = tokio::join!(store.slowed(call_of_20ms()), store.slowed(call_of_20ms()));
        let both = started.elapsed();
        assert!(a.is_ok() && b.is_ok());
        assert!(both >= Duration::from_millis(400), "{both:?}");
        assert_eq!(calls.take_peak(), 2);
        assert_eq!(calls.take_peak(), 0);
        // The trait's methods go through it too (the memory store answers at once).
        assert!(store.known_jobs().await.unwrap().is_empty());
        assert_eq!(calls.take_peak(), 1);
    }

    #[tokio::test]
    async fn outside_the_window_calls_pass_through_at_once_and_together() {
        let calls = Arc::new(CallsInFlight::default());
        for (from, until) in [(now_ms() + 60_000, now_ms() + 120_000), (0, now_ms() - 1)] {
            let store = store(from, until, calls.clone());
            let started = Instant::now();
            let (a, b) = tokio::join!(store.slowed(call_of_20ms()), store.slowed(call_of_20ms()));
            let both = started.elapsed();
            assert!(a.is_ok() && b.is_ok());
            assert!(both < Duration::from_millis(150), "{both:?}");
        }
        assert!(!Slowdown::NONE.active(now_ms()));
    }
}
