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

/// The slots a run is judged on: every whole second from `first_ms` to `last_ms`
/// (inclusive) of every job `0..jobs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) jobs: u32,
    pub(crate) first_ms: i64,
    pub(crate) last_ms: i64,
}

impl Window {
    /// The slots fully inside a measurement from `from_ms` (all nodes ready) to `to_ms` (the
    /// stop signal): from the first whole second at least 1 s after the start to the last
    /// one at least 2 s before the stop, so every slot had its whole second and more.
    pub(crate) fn between(jobs: u32, from_ms: i64, to_ms: i64) -> Window {
        let first_ms = (from_ms + 1000).div_euclid(1000) * 1000 + 1000;
        let last_ms = (to_ms - 2000).div_euclid(1000) * 1000;
        Window {
            jobs,
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
        self.seconds() * u64::from(self.jobs)
    }

    fn contains(&self, start: &Start) -> bool {
        start.job < self.jobs
            && start.slot_ms >= self.first_ms
            && start.slot_ms <= self.last_ms
            && start.slot_ms.rem_euclid(1000) == 0
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

/// Judges the starts of all nodes on a window.
pub(crate) fn slot_stats(starts: &[Start], window: Window) -> SlotStats {
    #[derive(Default)]
    struct Slot {
        first_us: Option<i64>,
        attempt1: u32,
    }
    let mut slots: HashMap<(u32, i64), Slot> = HashMap::new();
    let mut per_instance: HashMap<&str, u64> = HashMap::new();
    let mut outside = 0;
    let mut takeovers = 0;
    for start in starts {
        if !window.contains(start) {
            outside += 1;
            continue;
        }
        *per_instance.entry(start.instance.as_str()).or_default() += 1;
        let slot = slots.entry((start.job, start.slot_ms)).or_default();
        slot.first_us = Some(
            slot.first_us
                .map_or(start.start_us, |f| f.min(start.start_us)),
        );
        if start.attempt == 1 {
            slot.attempt1 += 1;
        } else {
            takeovers += 1;
        }
    }
    let mut lags = Vec::with_capacity(slots.len());
    let mut within_second = 0;
    let mut duplicates = 0;
    for ((_, slot_ms), slot) in &slots {
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
    let started = slots.len() as u64;
    let total = window.slots();
    let mut per_instance: Vec<(String, u64)> = per_instance
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
        takeovers,
        lag_ms: Summary::of(&lags),
        per_instance,
        outside,
    }
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
            jobs: 2,
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
    fn floor_samples_skip_blank_and_odd_lines() {
        assert_eq!(parse_samples("120\n\n95\nx\n"), vec![120.0, 95.0]);
    }
}
