//! The bound on claims in flight that follows how fast the store answers them.
//!
//! Claims a store has not reached wait at the store (in its connection pool, in its lock
//! queues): by Little's law each waits about what is in flight over what the store answers
//! per second. A fixed bound lets that wait grow with the store's slowness: 3 x 10,000
//! `every 1s` on a saturated PostgreSQL held the fixed 16,384 claims in flight per instance
//! and every claim waited 2.6-2.9 s there, so every slot started late, and the store spent
//! its time on claims that were late before it reached them.
//!
//! So on a store that gathers batches (PostgreSQL; see `Core::claims_bound`), once the
//! store has answered for a [window](PACE_WINDOW_US), the claims in flight are bounded by
//! its pace times [`PACE_TARGET_MS`]: a claim sent waits about that long at a store that
//! keeps its recent pace. The rest wait in the instance's own queue, one per job (a job's
//! newer slot supersedes its older, which is reported `late` and backed up: see
//! `Core::shed_queued_claims`), where waiting costs the store nothing. (On SQLite the paced
//! bound started a tenth fewer slots near the file's capacity: a claim waiting at the
//! instance is shed when its job's next slot comes, where one waiting at the file still
//! starts, late.)
//!
//! The pace is what the store answered in the last window over the time claims were in
//! flight in it, not over the whole window: slots that fall due together (10,000 `every 1s`
//! jobs) reach the store as one burst a second, which a fast store answers in a fraction of
//! the second, and the claims answered in such a second are the demand, not what the store
//! can do (Redis, paced by them, started its slots later than unpaced). A saturated store
//! always has claims in flight, and the two agree. The bound never falls below a floor (a
//! few batches, so a store that speeds up is seen at once: each window's answers raise the
//! next window's bound by the ratio of the target to the store's real wait) and never rises
//! above the fixed maximum. Only answered claims count (a failed call says nothing of the
//! store's pace), and until the first window of answers has passed the bound is the
//! maximum, so a start's first burst goes out whole.

/// Monotonic µs (the core's `Micros`, which this file does not import: `types` holds a
/// [`ClaimPace`]).
type Micros = u64;

/// The window over which answered claims are counted, µs.
pub(crate) const PACE_WINDOW_US: Micros = 1_000_000;

/// How long a claim should wait at the store at most, at its recent pace, ms: a quarter of
/// a second leaves most of a slot's second for the claims still waiting at the instance.
/// Measured (3 x 10,000 `every 1s` on PostgreSQL, 240 s, past the pruning point, one fixed
/// claim order per instance and the pace counted over the whole second, before both were
/// changed): 500 ms gave 98.03 / 50.07 / 24.91 / 23.45 % of slots in their second per
/// minute, 250 ms 94.59 / 72.81 / 33.49 / 29.45 %, the fixed bound alone 0-5 % from minute
/// 3; in the simulator (`b10_a_saturated_store_…`), 14,088 and 16,091 of 20,000.
pub(crate) const PACE_TARGET_MS: u64 = 250;

/// The window's buckets.
const BUCKETS: usize = 10;

/// Bucket width, µs.
const WIDTH: Micros = PACE_WINDOW_US / BUCKETS as Micros;

/// Claims answered and time busy (claims in flight) per bucket: the bucket being filled and
/// the [`BUCKETS`] before it, which make the last window (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ClaimPace {
    answered: [u64; BUCKETS + 1],
    busy_us: [Micros; BUCKETS + 1],
    /// The bucket being filled.
    head: usize,
    /// When the head bucket began (monotonic µs; a multiple of [`WIDTH`]).
    head_start: Option<Micros>,
    /// Claims are in flight, busy time counted up to this moment.
    busy_since: Option<Micros>,
    /// When the first answer came.
    first: Option<Micros>,
}

impl ClaimPace {
    /// Moves the head to the bucket of `now`, emptying the buckets passed, and counts the
    /// busy time up to `now`.
    fn advance(&mut self, now: Micros) {
        let Some(mut start) = self.head_start else {
            self.head_start = Some(now - now % WIDTH);
            if self.busy_since.is_some() {
                self.busy_since = Some(now);
            }
            return;
        };
        let now = now.max(start);
        let mut turned = 0;
        while now >= start.saturating_add(WIDTH) {
            let end = start + WIDTH;
            if let Some(since) = self.busy_since {
                self.busy_us[self.head] += end.saturating_sub(since.max(start));
                self.busy_since = Some(end);
            }
            self.head = (self.head + 1) % (BUCKETS + 1);
            self.answered[self.head] = 0;
            self.busy_us[self.head] = 0;
            turned += 1;
            start = end;
            if turned > BUCKETS {
                // A long quiet: every bucket is empty; jump to the bucket of `now`.
                start = now - (now - start) % WIDTH;
                if self.busy_since.is_some() {
                    self.busy_since = Some(start);
                }
                break;
            }
        }
        self.head_start = Some(start);
        if let Some(since) = self.busy_since {
            self.busy_us[self.head] += now.saturating_sub(since.max(start));
            self.busy_since = Some(now);
        }
    }

    /// Claims leave at `now` while `in_flight` claims were in flight before them.
    pub(crate) fn sent(&mut self, now: Micros, in_flight: usize) {
        self.advance(now);
        if in_flight == 0 {
            self.busy_since = Some(now);
        }
    }

    /// `claims` answered by the store at `now` (0 for a call that failed, which says
    /// nothing of the store's pace), `in_flight` claims still in flight after them.
    pub(crate) fn answered(&mut self, now: Micros, claims: usize, in_flight: usize) {
        self.advance(now);
        self.answered[self.head] = self.answered[self.head].saturating_add(claims as u64);
        if in_flight == 0 {
            self.busy_since = None;
        }
        if claims > 0 {
            self.first.get_or_insert(now);
        }
    }

    /// Of the [`BUCKETS`] whole buckets before the one `now` falls in: the claims answered
    /// and the time claims were in flight, µs.
    fn window(&mut self, now: Micros) -> (u64, Micros) {
        self.advance(now);
        let head = self.head;
        let whole = |a: &[u64; BUCKETS + 1]| a.iter().sum::<u64>() - a[head];
        (whole(&self.answered), whole(&self.busy_us))
    }

    /// Claims answered in the last window.
    #[cfg(test)]
    pub(crate) fn answered_in_window(&mut self, now: Micros) -> u64 {
        self.window(now).0
    }

    /// The store's pace at `now`, claims a second: what it answered in the last window over
    /// the time claims were in flight in it (`None`: less than a tenth of the window busy).
    pub(crate) fn pace(&mut self, now: Micros) -> Option<u64> {
        let (answered, busy) = self.window(now);
        (busy >= WIDTH).then(|| answered.saturating_mul(1_000_000) / busy)
    }

    /// The claims that may be in flight at `now`: the store's [pace](Self::pace) times
    /// [`PACE_TARGET_MS`], within `floor..=max` (`max` alone before a window of answers,
    /// and while claims were in flight for less than a tenth of the last window: a store
    /// that answers that fast needs no pacing).
    pub(crate) fn bound(&mut self, now: Micros, floor: usize, max: usize) -> usize {
        match self.first {
            Some(first) if now.saturating_sub(first) >= PACE_WINDOW_US => {}
            _ => return max,
        }
        let Some(pace) = self.pace(now) else {
            return max;
        };
        let paced = pace.saturating_mul(PACE_TARGET_MS) / 1_000;
        usize::try_from(paced)
            .unwrap_or(usize::MAX)
            .clamp(floor.min(max), max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;
    const MS: Micros = 1_000;

    #[test]
    fn the_bound_is_the_maximum_until_a_window_of_answers_passed() {
        let mut pace = ClaimPace::default();
        assert_eq!(pace.bound(0, 100, 16_384), 16_384);
        pace.sent(10 * S, 0);
        pace.answered(10 * S + S / 2, 50, 1);
        assert_eq!(pace.bound(10 * S + S / 2, 100, 16_384), 16_384);
        assert_eq!(
            pace.bound(11 * S + S / 2, 100, 16_384),
            100,
            "50 a second: the floor"
        );
    }

    #[test]
    fn a_saturated_store_is_paced_by_what_it_answered_in_the_last_second() {
        let mut pace = ClaimPace::default();
        // Always claims in flight; 4,000 claims a second answered every 10 ms for 3 s.
        pace.sent(0, 0);
        for i in 1..=300 {
            pace.answered(i * 10 * MS, 40, 1);
        }
        assert_eq!(pace.answered_in_window(3 * S), 4_000);
        assert_eq!(pace.pace(3 * S), Some(4_000));
        let expected = 4_000 * PACE_TARGET_MS as usize / 1_000;
        assert_eq!(pace.bound(3 * S, 100, 16_384), expected);
        // A store that stops answering: the bound falls to the floor within a window.
        assert_eq!(pace.bound(4 * S + WIDTH, 100, 16_384), 100);
        // Never above the maximum, never below a floor above it.
        for i in 1..=100 {
            pace.answered(5 * S + i * 10 * MS, 1_000, 1);
        }
        assert_eq!(pace.bound(6 * S, 100, 16_384), 16_384);
        assert_eq!(pace.bound(6 * S, 20_000, 16_384), 16_384);
    }

    #[test]
    fn a_burst_a_second_is_paced_by_how_fast_the_store_answered_it() {
        let mut pace = ClaimPace::default();
        // 10,000 slots due at each whole second, answered within 150 ms: the store is busy
        // 150 ms a second and answers 66,666 claims a second while it is.
        for s in 0..3 {
            pace.sent(s * S, 0);
            pace.answered(s * S + 50 * MS, 5_000, 5_000);
            pace.answered(s * S + 150 * MS, 5_000, 0);
        }
        assert_eq!(pace.answered_in_window(3 * S), 10_000);
        assert_eq!(pace.pace(3 * S), Some(66_666));
        assert_eq!(pace.bound(3 * S, 100, 100_000), 66_666 * 250 / 1_000);
        // Claims in flight for less than a tenth of the window: no pacing.
        let mut fast = ClaimPace::default();
        for s in 0..3 {
            fast.sent(s * S, 0);
            fast.answered(s * S + 5 * MS, 10, 0);
        }
        assert_eq!(fast.pace(3 * S), None);
        assert_eq!(fast.bound(3 * S, 100, 16_384), 16_384);
    }

    #[test]
    fn answers_older_than_the_window_do_not_count() {
        let mut pace = ClaimPace::default();
        pace.answered(0, 1_000, 0);
        pace.answered(S / 2, 1_000, 0);
        assert_eq!(
            pace.answered_in_window(S / 2 + WIDTH / 2),
            1_000,
            "the head is not whole"
        );
        assert_eq!(pace.answered_in_window(S / 2 + WIDTH), 2_000);
        assert_eq!(pace.answered_in_window(S + WIDTH / 2), 2_000);
        assert_eq!(pace.answered_in_window(S + WIDTH), 1_000);
        assert_eq!(pace.answered_in_window(50 * S), 0);
        pace.answered(50 * S + 1, 7, 0);
        assert_eq!(pace.answered_in_window(50 * S + WIDTH), 7);
    }
}
