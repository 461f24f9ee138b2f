//! `bench scale --hold-ms M [--hold-from S]`: the nodes' handlers return at once until S
//! seconds after the nodes were spawned, then hold each run M ms, so every node keeps about
//! its won slots per second x M runs in flight. The memory per run in flight then reads on
//! the real store, above the same jobs running without holding in the same run: the RSS
//! growth between the two stretches over the growth of the runs held.

use anyhow::{Result, bail};
use serde_json::{Value, json};

use super::stats::{Sample, mean};

/// Seconds of readings each stretch needs at least (the stretch before holding and the one
/// after it settled).
pub(crate) const STRETCH_MIN_S: u64 = 60;

/// Seconds after the runs held stopped climbing (M ms after holding began) that are not
/// read: the allocator's first growth settles.
pub(crate) const SETTLE_S: i64 = 20;

/// The longest hold (a minute): the bench's jobs are due every second to every minute.
const MAX_HOLD_MS: u64 = 60_000;

/// What a run asks for: hold `ms` from `from_s` seconds after the nodes were spawned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) ms: u64,
    pub(crate) from_s: u64,
}

impl Hold {
    /// Checks `--hold-ms` and `--hold-from` against the run's `--seconds` and the jobs'
    /// period (ms).
    pub(crate) fn check(
        ms: Option<u64>,
        from_s: Option<u64>,
        seconds: u64,
        period_ms: i64,
    ) -> Result<Option<Hold>> {
        let Some(ms) = ms else {
            if let Some(from) = from_s {
                bail!("bench scale: --hold-from {from} applies with --hold-ms MS only");
            }
            return Ok(None);
        };
        if ms == 0 || ms > MAX_HOLD_MS {
            bail!("bench scale: --hold-ms {ms}: give 1 to {MAX_HOLD_MS} ms");
        }
        if i64::try_from(ms).map_or(true, |ms| ms >= period_ms) {
            bail!(
                "bench scale: --hold-ms {ms} is not shorter than the jobs' period ({period_ms} \
                 ms): each run would still be held when its job's next slot is due, and that \
                 slot is skipped as overlap; hold less than the period"
            );
        }
        let from_s = from_s.unwrap_or(seconds / 2);
        let hold = Hold { ms, from_s };
        let needed_after = STRETCH_MIN_S + hold.unread_s();
        if from_s < STRETCH_MIN_S || seconds.saturating_sub(from_s) < needed_after {
            bail!(
                "bench scale: --hold-from {from_s} with --seconds {seconds}: the memory per run \
                 in flight needs {STRETCH_MIN_S} s of readings before holding and {needed_after} \
                 s after it (the first {} s of holding, while the runs held climb and settle, \
                 are not read); raise --seconds to {} or more, or move --hold-from",
                hold.unread_s(),
                from_s.max(STRETCH_MIN_S).saturating_add(needed_after)
            );
        }
        Ok(Some(hold))
    }

    /// Seconds after holding began that are not read: the hold itself (the runs held climb
    /// for that long), rounded up, and [`SETTLE_S`].
    pub(crate) fn unread_s(self) -> u64 {
        self.ms.div_ceil(1000) + SETTLE_S as u64
    }

    /// When holding begins, on the host clock, for nodes spawned at `spawned_ms`.
    pub(crate) fn begins_at_ms(self, spawned_ms: i64) -> i64 {
        spawned_ms + 1000 * self.from_s as i64
    }

    /// The `bench-node run` arguments that make its handlers hold.
    pub(crate) fn node_args(self, spawned_ms: i64) -> Vec<String> {
        vec![
            "--hold-ms".to_owned(),
            self.ms.to_string(),
            "--hold-from-ms".to_owned(),
            self.begins_at_ms(spawned_ms).to_string(),
        ]
    }
}

/// One node's readings before and while it held its runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Held {
    /// Mean RSS (KiB) over the last [`STRETCH_MIN_S`] s before holding.
    pub(crate) rss_before_kb: f64,
    /// Mean of the most runs held in each second of that stretch.
    pub(crate) held_before: f64,
    /// Mean of the runs the node backed up (watched) at each reading of that stretch.
    pub(crate) watched_before: f64,
    /// Mean RSS (KiB) from [`Hold::unread_s`] after holding began to the end.
    pub(crate) rss_holding_kb: f64,
    /// Mean of the most runs held in each second of that stretch.
    pub(crate) held_holding: f64,
    /// Mean of the runs the node backed up (watched) at each reading of that stretch.
    pub(crate) watched_holding: f64,
    /// Mean RSS (KiB) over the first and the last 30 s of the holding stretch.
    pub(crate) rss_holding_first_kb: f64,
    pub(crate) rss_holding_last_kb: f64,
}

impl Held {
    /// KiB per run in flight: the RSS growth over the growth of the runs held (`None` when
    /// the runs held did not grow). Counts what the node spends on the runs it backs up
    /// too, which also grow while the other nodes hold theirs.
    pub(crate) fn kib_per_run(&self) -> Option<f64> {
        let runs = self.held_holding - self.held_before;
        (runs >= 1.0).then(|| (self.rss_holding_kb - self.rss_before_kb) / runs)
    }

    /// KiB per run the node knows in flight: the RSS growth over the growth of the runs it
    /// holds plus those it backs up (`None` when they did not grow).
    pub(crate) fn kib_per_run_known(&self) -> Option<f64> {
        let runs =
            self.held_holding + self.watched_holding - self.held_before - self.watched_before;
        (runs >= 1.0).then(|| (self.rss_holding_kb - self.rss_before_kb) / runs)
    }
}

/// A node's [`Held`] from its readings, holding from `hold_from_ms` to `to_ms` (the stop),
/// the first `unread_s` seconds of holding not read; `None` when a stretch has no reading.
pub(crate) fn held(
    samples: &[Sample],
    hold_from_ms: i64,
    unread_s: u64,
    to_ms: i64,
) -> Option<Held> {
    let stretch = |from: i64, to: i64| -> Vec<&Sample> {
        samples
            .iter()
            .filter(|s| s.t_ms >= from && s.t_ms < to)
            .collect()
    };
    let before = stretch(hold_from_ms - 1000 * STRETCH_MIN_S as i64, hold_from_ms);
    let holding = stretch(hold_from_ms + 1000 * unread_s as i64, to_ms + 1);
    let rss = |s: &[&Sample]| mean(s.iter().map(|s| s.rss_kb as f64));
    let runs = |s: &[&Sample]| mean(s.iter().map(|s| s.held as f64));
    let watched = |s: &[&Sample]| mean(s.iter().map(|s| s.watched as f64));
    let first_ms = holding.first()?.t_ms;
    let last_ms = holding.last()?.t_ms;
    let first: Vec<&Sample> = holding
        .iter()
        .copied()
        .filter(|s| s.t_ms < first_ms + 30_000)
        .collect();
    let last: Vec<&Sample> = holding
        .iter()
        .copied()
        .filter(|s| s.t_ms > last_ms - 30_000)
        .collect();
    Some(Held {
        rss_before_kb: rss(&before)?,
        held_before: runs(&before)?,
        watched_before: watched(&before)?,
        rss_holding_kb: rss(&holding)?,
        held_holding: runs(&holding)?,
        watched_holding: watched(&holding)?,
        rss_holding_first_kb: rss(&first)?,
        rss_holding_last_kb: rss(&last)?,
    })
}

/// The report's lines for the nodes (`names`) and their [`Held`] readings.
pub(crate) fn text(hold: Hold, names: &[&str], held: &[Option<Held>]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nruns in flight: handlers returned at once until {} s after the nodes were spawned, \
         then held each run {} ms; each stretch read once a second (RSS; the most runs held \
         at any 10 ms reading of the second): the {STRETCH_MIN_S} s before holding, and from \
         {} s after it began to the stop. Where every job's run is in flight at some moment of \
         each second already (slots of every job due in the same instant, runs shorter than \
         the period), holding adds few runs: the figure needs jobs whose held runs outlast \
         the spacing of their slots' instants (the tenants workload, a hold of seconds)",
        hold.from_s,
        hold.ms,
        hold.unread_s()
    );
    let _ = writeln!(
        out,
        "| node | RSS MiB before / holding | runs held before / holding | runs backed up before / holding | KiB per run held (RSS growth / runs held's growth) | KiB per run held or backed up | RSS MiB first / last 30 s of holding |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for (name, h) in names.iter().zip(held) {
        match h {
            Some(h) => {
                let _ = writeln!(
                    out,
                    "| {name} | {:.1} / {:.1} | {:.0} / {:.0} | {:.0} / {:.0} | {} | {} | {:.1} / {:.1} |",
                    h.rss_before_kb / 1024.0,
                    h.rss_holding_kb / 1024.0,
                    h.held_before,
                    h.held_holding,
                    h.watched_before,
                    h.watched_holding,
                    h.kib_per_run()
                        .map_or("- (the runs held did not grow)".to_owned(), |k| format!(
                            "{k:.2}"
                        )),
                    h.kib_per_run_known()
                        .map_or("-".to_owned(), |k| format!("{k:.2}")),
                    h.rss_holding_first_kb / 1024.0,
                    h.rss_holding_last_kb / 1024.0,
                );
            }
            None => {
                let _ = writeln!(out, "| {name} | - (a stretch had no reading) | | | | | |");
            }
        }
    }
    out
}

pub(crate) fn json(hold: Hold, held: &[Option<Held>]) -> Value {
    json!({
        "hold_ms": hold.ms,
        "hold_from_s": hold.from_s,
        "nodes": held.iter().map(|h| h.map(|h| json!({
            "rss_before_kb": h.rss_before_kb,
            "held_before": h.held_before,
            "rss_holding_kb": h.rss_holding_kb,
            "held_holding": h.held_holding,
            "watched_before": h.watched_before,
            "watched_holding": h.watched_holding,
            "kib_per_run_in_flight": h.kib_per_run(),
            "kib_per_run_held_or_backed_up": h.kib_per_run_known(),
            "rss_holding_first_kb": h.rss_holding_first_kb,
            "rss_holding_last_kb": h.rss_holding_last_kb,
        }))).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, rss_kb: u64, held: u64) -> Sample {
        Sample {
            t_ms,
            rss_kb,
            ticks: 0,
            held,
            late: 0,
            calls: 0,
            watched: 0,
        }
    }

    #[test]
    fn a_hold_must_be_shorter_than_the_period_and_leave_both_stretches() {
        assert_eq!(Hold::check(None, None, 300, 1000).unwrap(), None);
        assert!(Hold::check(None, Some(100), 300, 1000).is_err());
        assert_eq!(
            Hold::check(Some(500), None, 300, 1000).unwrap(),
            Some(Hold {
                ms: 500,
                from_s: 150
            })
        );
        for (ms, from, seconds) in [
            (0, None, 300),
            (1000, None, 300),
            (u64::MAX, None, 300),
            (500, Some(30), 300),
            (500, Some(250), 300),
            (500, Some(221), 300),
            (30_000, Some(200), 300),
            (500, None, 100),
            (500, Some(u64::MAX), 300),
        ] {
            assert!(
                Hold::check(Some(ms), from, seconds, 1000).is_err(),
                "{ms} {from:?} {seconds}"
            );
        }
        // A minute's period allows longer holds.
        assert!(
            Hold::check(Some(30_000), None, 300, 60_000)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn the_memory_per_run_is_the_rss_growth_over_the_runs_growth() {
        let from = 100_000;
        let mut samples = Vec::new();
        for s in 0..200i64 {
            let t = s * 1000;
            // Before: 100 runs at 50 MiB; holding: 2,100 runs at 58 MiB (8 MiB for 2,000),
            // and 2,000 more runs backed up.
            let (rss, held, watched) = if t < from {
                (51_200, 100, 0)
            } else {
                (59_392, 2_100, 2_000)
            };
            samples.push(Sample {
                watched,
                ..sample(t, rss, held)
            });
        }
        let h = held(&samples, from, 20, 199_000).unwrap();
        assert_eq!(h.held_before, 100.0);
        assert_eq!(h.held_holding, 2_100.0);
        assert!((h.kib_per_run().unwrap() - 4.096).abs() < 1e-9);
        assert!((h.kib_per_run_known().unwrap() - 2.048).abs() < 1e-9);
        assert_eq!(h.rss_holding_first_kb, h.rss_holding_last_kb);
        // The first seconds of holding are not read.
        samples[101].rss_kb = 1_000_000;
        assert_eq!(
            held(&samples, from, 20, 199_000).unwrap().rss_holding_kb,
            59_392.0
        );
        // No growth of the runs held: no figure; no reading in a stretch: none at all.
        let flat: Vec<Sample> = (0..200).map(|s| sample(s * 1000, 51_200, 100)).collect();
        assert_eq!(held(&flat, from, 20, 199_000).unwrap().kib_per_run(), None);
        assert_eq!(held(&samples[..50], from, 20, 199_000), None);
    }
}
