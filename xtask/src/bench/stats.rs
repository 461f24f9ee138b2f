//! The statistics of the scale and precision benches, from the nodes' start logs: which slots
//! started, how late, how often twice; percentiles of durations.

use std::collections::HashMap;

/// One handler start, as a node logs it: `<job> <slot ms> <start µs> <attempt> <instance>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) job: u32,
    pub(crate) slot_ms: i64,
    pub(crate) start_us: i64,
    pub(crate) attempt: u32,
    pub(crate) instance: String,
}

/// Parses one log line; `None` for a line that is not a start (a torn last line).
pub(crate) fn parse_start(line: &str) -> Option<Start> {
    let mut words = line.split_whitespace();
    let start = Start {
        job: words.next()?.parse().ok()?,
        slot_ms: words.next()?.parse().ok()?,
        start_us: words.next()?.parse().ok()?,
        attempt: words.next()?.parse().ok()?,
        instance: words.next()?.to_owned(),
    };
    words.next().is_none().then_some(start)
}

/// Parses a whole log; returns the starts and how many lines were not starts.
pub(crate) fn parse_log(text: &str) -> (Vec<Start>, usize) {
    let mut starts = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match parse_start(line) {
            Some(s) => starts.push(s),
            None => bad += 1,
        }
    }
    (starts, bad)
}

/// The mean of the finite values, `None` without one.
pub(crate) fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0u32);
    for v in values.filter(|v| v.is_finite()) {
        sum += v;
        n += 1;
    }
    (n > 0).then(|| sum / f64::from(n))
}

/// Min, p50, p99 and max of a set of samples (any unit), by nearest rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    pub(crate) n: usize,
    pub(crate) min: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Summary {
    /// `None` without samples.
    pub(crate) fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Summary {
            n: sorted.len(),
            min: sorted[0],
            p50: percentile(&sorted, 50.0),
            p99: percentile(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// The nearest-rank percentile of sorted samples (`p` in 0..=100).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Where a run's jobs have their slots: job `j` at every `k * period_ms + offset(j)`, where
/// the offset is 0, or `j * period_ms / jobs` when the offsets are spread over the period
/// (the tenants workload: `every 1m` jobs spread over the minute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    pub(crate) jobs: u32,
    pub(crate) period_ms: i64,
    pub(crate) spread: bool,
}

impl Grid {
    /// `jobs` jobs `every 1s`, offset 0.
    pub(crate) fn every_second(jobs: u32) -> Grid {
        Grid {
            jobs,
            period_ms: 1000,
            spread: false,
        }
    }

    /// The offset of job `job` on the grid, in ms (`0..period_ms`).
    pub(crate) fn offset_ms(&self, job: u32) -> i64 {
        if self.spread {
            i64::from(job) * self.period_ms / i64::from(self.jobs.max(1))
        } else {
            0
        }
    }

    /// Whether `slot_ms` is a slot of `job`.
    pub(crate) fn is_slot(&self, job: u32, slot_ms: i64) -> bool {
        job < self.jobs && (slot_ms - self.offset_ms(job)).rem_euclid(self.period_ms) == 0
    }

    /// Slots of `job` in `from_ms..=to_ms` (0 when the range is empty).
    pub(crate) fn slots_of(&self, job: u32, from_ms: i64, to_ms: i64) -> u64 {
        if to_ms < from_ms {
            return 0;
        }
        let o = self.offset_ms(job);
        // k from ceil((from - o) / p) to floor((to - o) / p).
        let first = (from_ms - o + self.period_ms - 1).div_euclid(self.period_ms);
        let last = (to_ms - o).div_euclid(self.period_ms);
        (last - first + 1).max(0) as u64
    }

    /// Slots of all jobs in `from_ms..=to_ms`.
    pub(crate) fn slots_between(&self, from_ms: i64, to_ms: i64) -> u64 {
        if !self.spread {
            return self.slots_of(0, from_ms, to_ms) * u64::from(self.jobs);
        }
        (0..self.jobs)
            .map(|j| self.slots_of(j, from_ms, to_ms))
            .sum()
    }

    /// Whether no job has a slot in `from_ms..=to_ms`.
    pub(crate) fn idle_between(&self, from_ms: i64, to_ms: i64) -> bool {
        if !self.spread {
            return self.slots_of(0, from_ms, to_ms) == 0;
        }
        // Spread offsets: some job is due at least every period / jobs.
        let gap = self.period_ms / i64::from(self.jobs.max(1));
        to_ms - from_ms + 1 < gap && self.slots_between(from_ms, to_ms) == 0
    }
}

/// How long before the stop a burst of a grid's marks must fall to be judged (see
/// [`Window::on_grid`]): a mark of 100,000 cron jobs on five instances took up to 15 s to
/// start every slot on 2 CPUs, and a mark 8 s before the stop was once counted as 51,240
/// slots missed. A 660 s run of `*/5` marks still judges two of them.
pub(crate) const BURST_SETTLE_MS: i64 = 30_000;

/// The slots a run is judged on: every slot of the grid from `first_ms` to `last_ms`
/// (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) grid: Grid,
    pub(crate) first_ms: i64,
    pub(crate) last_ms: i64,
}

impl Window {
    /// The slots of `jobs` `every 1s` jobs fully inside a measurement from `from_ms` (all
    /// nodes ready) to `to_ms` (the stop signal); see [`Window::on_grid`].
    pub(crate) fn between(jobs: u32, from_ms: i64, to_ms: i64) -> Window {
        Window::on_grid(Grid::every_second(jobs), from_ms, to_ms)
    }

    /// The slots of `grid` fully inside a measurement from `from_ms` (all nodes ready) to
    /// `to_ms` (the stop signal): from the first whole second at least 1 s after the start
    /// to the last one at least 2 s before the stop, so every slot had its whole second and
    /// more. On a grid of bursts (every job due at one instant, a minute or more apart: the
    /// cron marks) the window ends [`BURST_SETTLE_MS`] before the stop instead, so a mark
    /// whose claims the nodes were still answering when they stopped is not judged as missed.
    pub(crate) fn on_grid(grid: Grid, from_ms: i64, to_ms: i64) -> Window {
        let first_ms = (from_ms + 1000).div_euclid(1000) * 1000 + 1000;
        let settle = if !grid.spread && grid.period_ms >= 60_000 {
            BURST_SETTLE_MS
        } else {
            2000
        };
        let last_ms = (to_ms - settle).div_euclid(1000) * 1000;
        Window {
            grid,
            first_ms,
            last_ms,
        }
    }

    /// Seconds in the window (0 when it is empty).
    pub(crate) fn seconds(&self) -> u64 {
        if self.last_ms < self.first_ms {
            0
        } else {
            ((self.last_ms - self.first_ms) / 1000 + 1) as u64
        }
    }

    /// Slots in the window.
    pub(crate) fn slots(&self) -> u64 {
        self.grid.slots_between(self.first_ms, self.last_ms)
    }

    /// Minutes of the window, counted from its first slot (the last one may be partial).
    pub(crate) fn minutes(&self) -> usize {
        self.seconds().div_ceil(60) as usize
    }

    /// The part of minute `m` of the window: `first_ms..=last_ms` of it.
    pub(crate) fn minute_range(&self, m: usize) -> (i64, i64) {
        let from = self.first_ms + 60_000 * m as i64;
        (from, (from + 59_999).min(self.last_ms))
    }

    fn contains(&self, start: &Start) -> bool {
        start.slot_ms >= self.first_ms
            && start.slot_ms <= self.last_ms
            && self.grid.is_slot(start.job, start.slot_ms)
    }
}

/// What happened to the slots of a window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlotStats {
    /// Slots in the window.
    pub(crate) slots: u64,
    /// Slots started at all (any attempt).
    pub(crate) started: u64,
    /// Slots whose first start came less than 1 s after the slot.
    pub(crate) within_second: u64,
    /// Slots never started.
    pub(crate) missed: u64,
    /// Slots whose attempt 1 started more than once (two instances ran the same slot
    /// without a takeover).
    pub(crate) duplicates: u64,
    /// Starts of attempt 2 or later (takeovers).
    pub(crate) takeovers: u64,
    /// Start lag of each started slot's first start, in ms.
    pub(crate) lag_ms: Option<Summary>,
    /// Starts per instance, in the window.
    pub(crate) per_instance: Vec<(String, u64)>,
    /// Starts outside the window (before it, after it): not judged.
    pub(crate) outside: u64,
}

impl SlotStats {
    /// Percent of the window's slots started within their second.
    pub(crate) fn within_percent(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            100.0 * self.within_second as f64 / self.slots as f64
        }
    }
}

/// What happened to the slots of one minute of a window (the last one may be partial).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MinuteStats {
    /// The minute's index in the window (0 = the first).
    pub(crate) minute: usize,
    /// The slots of the minute: `from_ms..=to_ms`.
    pub(crate) from_ms: i64,
    pub(crate) to_ms: i64,
    pub(crate) slots: u64,
    pub(crate) started: u64,
    pub(crate) within_second: u64,
    pub(crate) missed: u64,
    pub(crate) duplicates: u64,
    pub(crate) lag_ms: Option<Summary>,
    /// Jobs with at least one slot of the minute started: below the jobs due in it when the
    /// nodes leave some jobs out altogether (an overloaded store that serves some jobs every
    /// second and others never shows a fair share otherwise).
    pub(crate) jobs_started: u64,
}

impl MinuteStats {
    /// Percent of the minute's slots started within their second.
    pub(crate) fn within_percent(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            100.0 * self.within_second as f64 / self.slots as f64
        }
    }
}

/// The first start of a slot and how many starts of attempt 1 it had.
#[derive(Default)]
struct Judged {
    first_us: Option<i64>,
    attempt1: u32,
}

/// The starts of the window by slot, with what fell outside.
struct Collected<'a> {
    slots: HashMap<(u32, i64), Judged>,
    per_instance: HashMap<&'a str, u64>,
    outside: u64,
    takeovers: u64,
}

fn collect(starts: &[Start], window: Window) -> Collected<'_> {
    let mut c = Collected {
        slots: HashMap::new(),
        per_instance: HashMap::new(),
        outside: 0,
        takeovers: 0,
    };
    for start in starts {
        if !window.contains(start) {
            c.outside += 1;
            continue;
        }
        *c.per_instance.entry(start.instance.as_str()).or_default() += 1;
        let slot = c.slots.entry((start.job, start.slot_ms)).or_default();
        slot.first_us = Some(
            slot.first_us
                .map_or(start.start_us, |f| f.min(start.start_us)),
        );
        if start.attempt == 1 {
            slot.attempt1 += 1;
        } else {
            c.takeovers += 1;
        }
    }
    c
}

/// Lags (ms), starts within the second and duplicates of a set of judged slots.
fn tally<'a>(slots: impl Iterator<Item = (i64, &'a Judged)>) -> (Vec<f64>, u64, u64, u64) {
    let mut lags = Vec::new();
    let (mut within_second, mut duplicates, mut started) = (0, 0, 0);
    for (slot_ms, slot) in slots {
        started += 1;
        if let Some(first) = slot.first_us {
            let lag_us = first - slot_ms * 1000;
            lags.push(lag_us as f64 / 1000.0);
            if lag_us < 1_000_000 {
                within_second += 1;
            }
        }
        if slot.attempt1 > 1 {
            duplicates += 1;
        }
    }
    (lags, started, within_second, duplicates)
}

/// Judges the starts of all nodes on a window.
pub(crate) fn slot_stats(starts: &[Start], window: Window) -> SlotStats {
    let c = collect(starts, window);
    let (lags, started, within_second, duplicates) =
        tally(c.slots.iter().map(|((_, slot_ms), s)| (*slot_ms, s)));
    let total = window.slots();
    let mut per_instance: Vec<(String, u64)> = c
        .per_instance
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    per_instance.sort();
    SlotStats {
        slots: total,
        started,
        within_second,
        missed: total.saturating_sub(started),
        duplicates,
        takeovers: c.takeovers,
        lag_ms: Summary::of(&lags),
        per_instance,
        outside: c.outside,
    }
}

/// Judges the starts of all nodes minute by minute of the window (by the minute of each
/// slot, counted from the window's first slot; the last minute may be partial).
pub(crate) fn minute_stats(starts: &[Start], window: Window) -> Vec<MinuteStats> {
    let ranges: Vec<(i64, i64)> = (0..window.minutes())
        .map(|m| window.minute_range(m))
        .collect();
    stretch_stats(starts, window, &ranges)
}

/// Judges the starts of all nodes on stretches of the window: `ranges` of slot times
/// (`from_ms..=to_ms`, ascending, not overlapping); slots of the window outside every range
/// are left out. The `minute` of each result is the range's index.
pub(crate) fn stretch_stats(
    starts: &[Start],
    window: Window,
    ranges: &[(i64, i64)],
) -> Vec<MinuteStats> {
    let c = collect(starts, window);
    let mut by_range: Vec<Vec<(i64, &Judged)>> = vec![Vec::new(); ranges.len()];
    let mut jobs: Vec<std::collections::HashSet<u32>> = vec![Default::default(); ranges.len()];
    for ((job, slot_ms), slot) in &c.slots {
        // The last range starting at or before the slot, if the slot is inside it.
        let i = ranges.partition_point(|(from, _)| *from <= *slot_ms);
        if i > 0 && *slot_ms <= ranges[i - 1].1 {
            by_range[i - 1].push((*slot_ms, slot));
            jobs[i - 1].insert(*job);
        }
    }
    by_range
        .into_iter()
        .enumerate()
        .map(|(minute, slots)| {
            let (from_ms, to_ms) = ranges[minute];
            let total = window.grid.slots_between(from_ms, to_ms);
            let (lags, started, within_second, duplicates) = tally(slots.into_iter());
            MinuteStats {
                minute,
                from_ms,
                to_ms,
                slots: total,
                started,
                within_second,
                missed: total.saturating_sub(started),
                duplicates,
                lag_ms: Summary::of(&lags),
                jobs_started: jobs[minute].len() as u64,
            }
        })
        .collect()
}

/// One of a node's own readings (`SAMPLE t= rss_kb= ticks= held= late=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) t_ms: i64,
    pub(crate) rss_kb: u64,
    pub(crate) ticks: u64,
    /// Runs held under a lease (in flight).
    pub(crate) held: u64,
    /// Slots reported late so far.
    pub(crate) late: u64,
    /// The most store calls in flight at once in the second (0 from a node that does not
    /// report them).
    pub(crate) calls: u64,
    /// Runs the node backs up at the reading (`health().runs_watched`; 0 from a node that
    /// does not report them).
    pub(crate) watched: u64,
}

/// The value of `key=` in a `TAG key=value ...` line.
fn word<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// Parses a `SAMPLE` line; `None` for any other line.
pub(crate) fn parse_sample(line: &str) -> Option<Sample> {
    let rest = line.strip_prefix("SAMPLE ")?;
    Some(Sample {
        t_ms: word(rest, "t")?,
        rss_kb: word(rest, "rss_kb")?,
        ticks: word(rest, "ticks")?,
        held: word(rest, "held")?,
        late: word(rest, "late")?,
        calls: word(rest, "calls").unwrap_or(0),
        watched: word(rest, "watched").unwrap_or(0),
    })
}

/// One reading of the store server's call counters (`COUNTERS t= calls= commits=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counter {
    pub(crate) t_ms: i64,
    pub(crate) calls: u64,
    pub(crate) commits: u64,
    /// Calls by command (Redis), `name:calls` separated by commas.
    pub(crate) detail: String,
    /// The server's writes so far (PostgreSQL), where it could read them.
    pub(crate) writes: WriteCounts,
}

/// What a PostgreSQL server wrote so far: its WAL (`pg_stat_wal`, server-wide) and the
/// updates of the run's history and runs tables, and how many of them were heap-only
/// (HOT: no index entry written). `None` where the reading had no such field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WriteCounts {
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) wal_records: Option<u64>,
    pub(crate) wal_fpi: Option<u64>,
    pub(crate) history_upd: Option<u64>,
    pub(crate) history_hot: Option<u64>,
    pub(crate) runs_upd: Option<u64>,
    pub(crate) runs_hot: Option<u64>,
}

/// The server's writes between two readings, beside the slots started meanwhile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Writes {
    pub(crate) seconds: f64,
    /// First starts (attempt 1) whose start time lies between the two readings.
    pub(crate) starts: u64,
    /// The differences of [`WriteCounts`] between the readings.
    pub(crate) delta: WriteCounts,
}

impl Writes {
    /// `value` per slot started, when both are known.
    pub(crate) fn per_start(&self, value: Option<u64>) -> Option<f64> {
        (self.starts > 0).then_some(value? as f64 / self.starts as f64)
    }

    /// The share (percent) of `of` that `part` is.
    pub(crate) fn share(part: Option<u64>, of: Option<u64>) -> Option<f64> {
        let of = of?;
        (of > 0).then_some(part? as f64 * 100.0 / of as f64)
    }
}

/// The server's writes from the first reading at or after `from_ms` to the last at or
/// before `to_ms`, with the first starts between them; `None` without two such readings.
pub(crate) fn writes(
    counters: &[Counter],
    starts: &[Start],
    from_ms: i64,
    to_ms: i64,
) -> Option<Writes> {
    let first = counters.iter().find(|c| c.t_ms >= from_ms)?;
    let last = counters.iter().rev().find(|c| c.t_ms <= to_ms)?;
    if last.t_ms <= first.t_ms {
        return None;
    }
    let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
    let (a, b) = (first.writes, last.writes);
    let started = starts
        .iter()
        .filter(|s| s.attempt == 1 && (first.t_ms * 1000..last.t_ms * 1000).contains(&s.start_us))
        .count() as u64;
    Some(Writes {
        seconds: (last.t_ms - first.t_ms) as f64 / 1000.0,
        starts: started,
        delta: WriteCounts {
            wal_bytes: d(a.wal_bytes, b.wal_bytes),
            wal_records: d(a.wal_records, b.wal_records),
            wal_fpi: d(a.wal_fpi, b.wal_fpi),
            history_upd: d(a.history_upd, b.history_upd),
            history_hot: d(a.history_hot, b.history_hot),
            runs_upd: d(a.runs_upd, b.runs_upd),
            runs_hot: d(a.runs_hot, b.runs_hot),
        },
    })
}

/// Parses a `COUNTERS` line; `None` for any other line.
pub(crate) fn parse_counter(line: &str) -> Option<Counter> {
    let rest = line.strip_prefix("COUNTERS ")?;
    Some(Counter {
        t_ms: word(rest, "t")?,
        calls: word(rest, "calls")?,
        commits: word(rest, "commits")?,
        detail: word(rest, "detail").unwrap_or_default(),
        writes: WriteCounts {
            wal_bytes: word(rest, "wal_bytes"),
            wal_records: word(rest, "wal_records"),
            wal_fpi: word(rest, "wal_fpi"),
            history_upd: word(rest, "history_upd"),
            history_hot: word(rest, "history_hot"),
            runs_upd: word(rest, "runs_upd"),
            runs_hot: word(rest, "runs_hot"),
        },
    })
}

/// A node over one stretch (a minute of the window): its RSS at the stretch's last reading
/// and at most, its CPU (cores), the most runs it held at once, the slots it reported late.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NodeStretch {
    pub(crate) rss_end_kb: u64,
    pub(crate) rss_max_kb: u64,
    pub(crate) cores: f64,
    pub(crate) held_max: u64,
    pub(crate) late: u64,
    /// The most store calls in flight at once.
    pub(crate) calls_max: u64,
    /// The most runs backed up at a reading.
    pub(crate) watched_max: u64,
}

/// A node's readings in `from_ms..=to_ms`, CPU from the last reading before the stretch (or
/// its first one) to its last one; `None` without a reading in the stretch.
pub(crate) fn node_stretch(
    samples: &[Sample],
    from_ms: i64,
    to_ms: i64,
    ticks_per_second: f64,
) -> Option<NodeStretch> {
    let inside: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_ms >= from_ms && s.t_ms <= to_ms)
        .collect();
    let last = **inside.last()?;
    let before = samples
        .iter()
        .rev()
        .find(|s| s.t_ms < from_ms)
        .copied()
        .unwrap_or(*inside[0]);
    let secs = (last.t_ms - before.t_ms) as f64 / 1000.0;
    Some(NodeStretch {
        rss_end_kb: last.rss_kb,
        rss_max_kb: inside.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        cores: if secs > 0.0 {
            last.ticks.saturating_sub(before.ticks) as f64 / ticks_per_second / secs
        } else {
            f64::NAN
        },
        held_max: inside.iter().map(|s| s.held).max().unwrap_or(0),
        late: last.late.saturating_sub(before.late),
        calls_max: inside.iter().map(|s| s.calls).max().unwrap_or(0),
        watched_max: inside.iter().map(|s| s.watched).max().unwrap_or(0),
    })
}

/// Store calls per second over some stretches of counter readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CallRate {
    /// Seconds covered.
    pub(crate) seconds: f64,
    pub(crate) calls_per_s: f64,
    pub(crate) commits_per_s: f64,
}

/// The call rate over consecutive readings whose interval `keep(from_ms, to_ms)` accepts;
/// `None` when none does.
pub(crate) fn call_rate(counters: &[Counter], keep: impl Fn(i64, i64) -> bool) -> Option<CallRate> {
    let (mut ms, mut calls, mut commits) = (0i64, 0u64, 0u64);
    for pair in counters.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.t_ms > a.t_ms && keep(a.t_ms, b.t_ms) {
            ms += b.t_ms - a.t_ms;
            calls += b.calls.saturating_sub(a.calls);
            commits += b.commits.saturating_sub(a.commits);
        }
    }
    (ms > 0).then(|| {
        let s = ms as f64 / 1000.0;
        CallRate {
            seconds: s,
            calls_per_s: calls as f64 / s,
            commits_per_s: commits as f64 / s,
        }
    })
}

/// One number per line (the floor's samples in µs); other lines are skipped.
pub(crate) fn parse_samples(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(job: u32, slot_ms: i64, lag_us: i64, attempt: u32, node: &str) -> String {
        format!(
            "{job} {slot_ms} {} {attempt} {node}\n",
            slot_ms * 1000 + lag_us
        )
    }

    #[test]
    fn log_lines_parse_and_torn_lines_are_counted() {
        let text = format!("{}3 5000 50", line(2, 4000, 1500, 1, "n1"));
        let (starts, bad) = parse_log(&text);
        assert_eq!(bad, 1);
        assert_eq!(
            starts,
            vec![Start {
                job: 2,
                slot_ms: 4000,
                start_us: 4_001_500,
                attempt: 1,
                instance: "n1".into()
            }]
        );
        assert_eq!(parse_start("1 2 3 4 n1 extra"), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p99, s.max),
            (100, 1.0, 50.0, 99.0, 100.0)
        );
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn the_window_keeps_whole_seconds_with_a_margin() {
        // Ready at 10.300 s, stopped at 20.700 s: slots 12 s ..= 18 s.
        let w = Window::between(5, 10_300, 20_700);
        assert_eq!((w.first_ms, w.last_ms), (12_000, 18_000));
        assert_eq!((w.seconds(), w.slots()), (7, 35));
        assert_eq!(Window::between(5, 10_000, 12_000).seconds(), 0);
    }

    #[test]
    fn slots_are_judged_started_late_missed_and_duplicated() {
        // Two jobs, slots 10 s and 11 s: four slots.
        let window = Window {
            grid: Grid::every_second(2),
            first_ms: 10_000,
            last_ms: 11_000,
        };
        let mut log = String::new();
        log += &line(0, 10_000, 2_000, 1, "n1"); // on time
        log += &line(0, 10_000, 3_000, 1, "n2"); // the same slot again: a duplicate
        log += &line(1, 10_000, 1_500_000, 1, "n2"); // started, but 1.5 s late
        log += &line(0, 11_000, 4_000, 1, "n1"); // on time; its takeover below
        log += &line(0, 11_000, 600_000, 2, "n3"); // attempt 2: not a duplicate
        // job 1 slot 11 s: missed.
        log += &line(0, 9_000, 1_000, 1, "n1"); // before the window
        log += &line(5, 10_000, 1_000, 1, "n1"); // a job the run did not register
        let (starts, bad) = parse_log(&log);
        assert_eq!(bad, 0);
        let s = slot_stats(&starts, window);
        assert_eq!(s.slots, 4);
        assert_eq!(s.started, 3);
        assert_eq!(s.within_second, 2);
        assert_eq!(s.missed, 1);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.takeovers, 1);
        assert_eq!(s.outside, 2);
        assert_eq!(s.within_percent(), 50.0);
        let lag = s.lag_ms.unwrap();
        assert_eq!((lag.n, lag.min, lag.max), (3, 2.0, 1500.0));
        assert_eq!(
            s.per_instance,
            vec![("n1".into(), 2), ("n2".into(), 2), ("n3".into(), 1)]
        );
    }

    #[test]
    fn grids_count_spread_offsets_and_know_idle_stretches() {
        // 4 jobs every 60 s spread over the minute: offsets 0, 15, 30, 45 s.
        let g = Grid {
            jobs: 4,
            period_ms: 60_000,
            spread: true,
        };
        assert_eq!(
            (0..4).map(|j| g.offset_ms(j)).collect::<Vec<_>>(),
            vec![0, 15_000, 30_000, 45_000]
        );
        assert!(g.is_slot(1, 75_000) && !g.is_slot(1, 60_000) && !g.is_slot(4, 0));
        assert_eq!(g.slots_between(0, 59_999), 4);
        assert_eq!(g.slots_between(14_000, 31_000), 2);
        assert_eq!(g.slots_between(16_000, 29_000), 0);
        assert!(g.idle_between(16_000, 29_000));
        assert!(!g.idle_between(16_000, 31_000));
        // every 1s: never idle over a second.
        assert!(!Grid::every_second(3).idle_between(1_001, 2_000));
        assert_eq!(Grid::every_second(3).slots_between(1_000, 3_000), 9);
        // cron */5: idle between the marks.
        let c = Grid {
            jobs: 10,
            period_ms: 300_000,
            spread: false,
        };
        assert!(c.idle_between(300_001, 599_999) && !c.idle_between(299_000, 300_000));
        // A burst grid's window ends 30 s before the stop: a mark at 600 s is judged when
        // the nodes stop at 630.7 s, not when they stop at 629.7 s (2 s would have let it in).
        assert_eq!(Window::on_grid(c, 10_300, 630_700).last_ms, 600_000);
        assert_eq!(Window::on_grid(c, 10_300, 629_700).last_ms, 599_000);
        assert_eq!(Window::on_grid(c, 10_300, 629_700).slots(), 10);
        // A window on a grid counts only its slots; starts off the grid are outside.
        let w = Window::on_grid(g, 10_300, 130_700);
        assert_eq!((w.first_ms, w.last_ms, w.minutes()), (12_000, 128_000, 2));
        assert_eq!(w.slots(), 8);
        let (starts, _) = parse_log(&(line(1, 15_000, 5, 1, "n1") + &line(1, 16_000, 5, 1, "n1")));
        let s = slot_stats(&starts, w);
        assert_eq!((s.started, s.outside, s.missed), (1, 1, 7));
    }

    #[test]
    fn minutes_judge_their_own_slots_and_the_last_one_is_partial() {
        // One every-1s job, window 10 s ..= 139 s: minutes 10-69, 70-129, 130-139.
        let window = Window {
            grid: Grid::every_second(1),
            first_ms: 10_000,
            last_ms: 139_000,
        };
        let mut log = String::new();
        for s in 10..=139 {
            let slot = s * 1000;
            match s {
                // Minute 1: all on time; one duplicate.
                10..=69 => log += &line(0, slot, 3_000, 1, "n1"),
                // Minute 2: ten late, five missed, the rest on time.
                70..=79 => log += &line(0, slot, 2_500_000, 1, "n1"),
                80..=84 => {}
                85..=129 => log += &line(0, slot, 1_000, 1, "n2"),
                // Minute 3 (10 s): all late.
                _ => log += &line(0, slot, 1_200_000, 1, "n1"),
            }
        }
        log += &line(0, 20_000, 9_000, 1, "n2");
        let (starts, _) = parse_log(&log);
        let m = minute_stats(&starts, window);
        assert_eq!(m.len(), 3);
        let row = |m: &MinuteStats| {
            (
                m.from_ms,
                m.to_ms,
                m.slots,
                m.started,
                m.within_second,
                m.missed,
                m.duplicates,
            )
        };
        assert_eq!(row(&m[0]), (10_000, 69_999, 60, 60, 60, 0, 1));
        assert_eq!(row(&m[1]), (70_000, 129_999, 60, 55, 45, 5, 0));
        assert_eq!(row(&m[2]), (130_000, 139_000, 10, 10, 0, 0, 0));
        assert_eq!(m[1].within_percent(), 75.0);
        assert_eq!(m[2].lag_ms.unwrap().p50, 1200.0);
        assert_eq!(m[0].lag_ms.unwrap().p99, 3.0);
        // The minutes add up to the whole window.
        let all = slot_stats(&starts, window);
        assert_eq!(m.iter().map(|m| m.slots).sum::<u64>(), all.slots);
        assert_eq!(m.iter().map(|m| m.missed).sum::<u64>(), all.missed);
        assert_eq!(m.iter().map(|m| m.duplicates).sum::<u64>(), all.duplicates);
    }

    #[test]
    fn each_minute_counts_the_jobs_it_started() {
        // Three every-1s jobs, two minutes: job 0 starts every slot, job 1 only in minute 1,
        // job 2 never.
        let window = Window {
            grid: Grid::every_second(3),
            first_ms: 0,
            last_ms: 119_000,
        };
        let mut log = String::new();
        for s in 0..120 {
            log += &line(0, s * 1000, 2_000, 1, "n1");
            if s < 60 {
                log += &line(1, s * 1000, 2_000, 1, "n2");
            }
        }
        let (starts, _) = parse_log(&log);
        let m = minute_stats(&starts, window);
        let jobs: Vec<u64> = m.iter().map(|m| m.jobs_started).collect();
        assert_eq!(jobs, vec![2, 1]);
        assert_eq!(m[1].missed, 120);
    }

    #[test]
    fn stretches_judge_their_own_slots_and_leave_the_gaps_out() {
        // Two every-1s jobs, window 10 s ..= 39 s; slots 20-24 s late, 25 s missed.
        let window = Window {
            grid: Grid::every_second(2),
            first_ms: 10_000,
            last_ms: 39_000,
        };
        let mut log = String::new();
        for s in 10..=39 {
            for job in 0..2 {
                match s {
                    20..=24 => log += &line(job, s * 1000, 1_500_000, 1, "n1"),
                    25 => {}
                    _ => log += &line(job, s * 1000, 2_000, 1, "n2"),
                }
            }
        }
        log += &line(1, 30_000, 4_000, 1, "n1");
        let (starts, _) = parse_log(&log);
        let ranges = [(10_000, 19_999), (20_000, 25_999), (30_000, 30_999)];
        let r = stretch_stats(&starts, window, &ranges);
        let row = |m: &MinuteStats| {
            (
                m.minute,
                m.slots,
                m.started,
                m.within_second,
                m.missed,
                m.duplicates,
            )
        };
        assert_eq!(row(&r[0]), (0, 20, 20, 20, 0, 0));
        assert_eq!(row(&r[1]), (1, 12, 10, 0, 2, 0));
        assert_eq!(row(&r[2]), (2, 2, 2, 2, 0, 1));
        assert_eq!(r[1].lag_ms.unwrap().p50, 1500.0);
    }

    #[test]
    fn node_readings_parse_and_read_per_stretch() {
        assert_eq!(
            parse_sample("SAMPLE t=1000 rss_kb=2048 ticks=10 held=3 late=0"),
            Some(Sample {
                t_ms: 1000,
                rss_kb: 2048,
                ticks: 10,
                held: 3,
                late: 0,
                calls: 0,
                watched: 0
            })
        );
        assert_eq!(
            parse_sample("SAMPLE t=1000 rss_kb=2048 ticks=10 held=3 late=0 calls=4 watched=5")
                .map(|s| (s.calls, s.watched)),
            Some((4, 5))
        );
        assert_eq!(parse_sample("READY pid=1 t=5"), None);
        assert_eq!(parse_sample("SAMPLE t=1000 rss_kb=x"), None);
        let samples: Vec<Sample> = (0..=10)
            .map(|i| Sample {
                t_ms: i * 1000,
                rss_kb: 1000 + (i as u64) * 10,
                // Half a core, and a burst of 100 ticks between 2 s and 3 s.
                ticks: (i as u64) * 50 + if i >= 3 { 100 } else { 0 },
                held: if i == 4 { 7 } else { 1 },
                late: if i >= 8 { 2 } else { 0 },
                calls: if i == 5 { 9 } else { 1 },
                watched: 0,
            })
            .collect();
        // 100 ticks/s; the stretch 3-8 s counts from the reading before it (2 s), so the
        // burst that ended at 3 s is in it: 400 ticks over 6 s.
        let s = node_stretch(&samples, 3_000, 8_000, 100.0).unwrap();
        assert_eq!(
            (s.rss_end_kb, s.rss_max_kb, s.held_max, s.late, s.calls_max),
            (1080, 1080, 7, 2, 9)
        );
        assert!((s.cores - 4.0 / 6.0).abs() < 1e-9, "{}", s.cores);
        // From the first reading on, nothing before it: 350 ticks over 5 s.
        let first = node_stretch(&samples, 0, 5_000, 100.0).unwrap();
        assert_eq!(first.cores, 350.0 / 100.0 / 5.0);
        assert!(node_stretch(&samples, 20_000, 30_000, 100.0).is_none());
    }

    #[test]
    fn store_calls_are_rated_over_the_kept_intervals() {
        let c = |t_ms, calls, commits| Counter {
            t_ms,
            calls,
            commits,
            detail: String::new(),
            writes: WriteCounts::default(),
        };
        assert_eq!(
            parse_counter("COUNTERS t=5 calls=7 commits=2 detail=get:7"),
            Some(Counter {
                t_ms: 5,
                calls: 7,
                commits: 2,
                detail: "get:7".into(),
                writes: WriteCounts::default(),
            })
        );
        let readings = [
            c(0, 0, 0),
            c(5_000, 50, 5),
            c(10_000, 1_050, 10),
            c(15_000, 1_100, 15),
        ];
        let all = call_rate(&readings, |_, _| true).unwrap();
        assert_eq!(
            (all.seconds, all.calls_per_s, all.commits_per_s),
            (15.0, 1100.0 / 15.0, 1.0)
        );
        // Without the busy interval 5-10 s: 100 calls over 10 s.
        let quiet = call_rate(&readings, |from, _| from != 5_000).unwrap();
        assert_eq!(quiet.calls_per_s, 10.0);
        assert!(call_rate(&readings, |_, _| false).is_none());
    }

    #[test]
    fn server_writes_are_read_between_two_readings_beside_the_slots_started() {
        let line = |t: i64, wal: u64, upd: u64, hot: u64| {
            format!(
                "COUNTERS t={t} calls=0 commits=9 detail=- wal_bytes={wal} wal_records={} \
                 wal_fpi=3 history_upd={upd} history_hot={hot} runs_upd={upd} runs_hot=0",
                wal / 100
            )
        };
        let readings: Vec<Counter> = [
            line(0, 1_000, 0, 0),
            line(5_000, 21_000, 100, 90),
            line(10_000, 41_000, 200, 180),
        ]
        .iter()
        .map(|l| parse_counter(l).unwrap())
        .collect();
        assert_eq!(readings[1].writes.history_hot, Some(90));
        let start = |us: i64, attempt| Start {
            job: 0,
            slot_ms: us / 1000,
            start_us: us,
            attempt,
            instance: "n1".into(),
        };
        // From the reading at 5 s to the one at 10 s: the starts in 5-10 s, first attempts only.
        let starts = [
            start(4_999_000, 1),
            start(5_000_000, 1),
            start(7_000_000, 1),
            start(8_000_000, 2),
            start(10_000_000, 1),
        ];
        let w = writes(&readings, &starts, 1, 10_000).unwrap();
        assert_eq!((w.seconds, w.starts), (5.0, 2));
        assert_eq!(w.delta.wal_bytes, Some(20_000));
        assert_eq!(w.per_start(w.delta.wal_bytes), Some(10_000.0));
        assert_eq!(
            Writes::share(w.delta.history_hot, w.delta.history_upd),
            Some(90.0)
        );
        assert_eq!(Writes::share(w.delta.runs_hot, w.delta.runs_upd), Some(0.0));
        // A server that reported no WAL (before 14): no figure, not zero.
        let bare: Vec<Counter> = [
            "COUNTERS t=0 calls=0 commits=0",
            "COUNTERS t=9000 calls=0 commits=5",
        ]
        .iter()
        .map(|l| parse_counter(l).unwrap())
        .collect();
        let w = writes(&bare, &starts, 0, 9_000).unwrap();
        assert_eq!(w.starts, 3);
        assert_eq!(w.per_start(w.delta.wal_bytes), None);
        assert!(writes(&readings, &starts, 6_000, 9_000).is_none());
    }

    #[test]
    fn floor_samples_skip_blank_and_odd_lines() {
        assert_eq!(parse_samples("120\n\n95\nx\n"), vec![120.0, 95.0]);
    }
}
