//! `bench scale --slow F [--slow-from S] [--slow-for D]`: the store made F times slower for
//! D seconds from S seconds after the nodes were spawned (the nodes' slowed store,
//! `examples/bench-node/slow.rs`), and the run judged by phase (before, slowed, after) and
//! by 30 s stretches, with the time the slots took to come on time again.

use anyhow::{Result, bail};

use super::stats::{MinuteStats, NodeStretch, Sample, Start, Window, node_stretch, stretch_stats};

/// Seconds the run must last after the slowdown, to see the recovery.
pub(crate) const AFTER_MIN_S: u64 = 30;

/// A second is on time when at least this share (percent) of its slots started within
/// their second ...
pub(crate) const ON_TIME_PERCENT: f64 = 99.0;

/// ... and the slots came on time again at the first of this many on-time seconds in a row
/// (or of the rest of the run when it is shorter).
pub(crate) const ON_TIME_RUN_S: usize = 10;

/// The slowdown a run asks for: `factor` times slower for `for_s` seconds from `from_s`
/// seconds after the nodes were spawned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slow {
    pub(crate) factor: u32,
    pub(crate) from_s: u64,
    pub(crate) for_s: u64,
}

/// `--slow-from` and `--slow-for` at most (a week): beyond it the window's epoch times could
/// overflow, and no bench run lasts that long.
const MAX_WINDOW_S: u64 = 7 * 86_400;

/// `--slow-from` when not given.
pub(crate) const DEFAULT_FROM_S: u64 = 60;
/// `--slow-for` when not given.
pub(crate) const DEFAULT_FOR_S: u64 = 120;

impl Slow {
    /// Checks `--slow`, `--slow-from` and `--slow-for` against the run's `--seconds`.
    pub(crate) fn check(
        factor: Option<u32>,
        from_s: Option<u64>,
        for_s: Option<u64>,
        seconds: u64,
    ) -> Result<Option<Slow>> {
        let Some(factor) = factor else {
            if let Some((name, value)) = from_s
                .map(|v| ("--slow-from", v))
                .or(for_s.map(|v| ("--slow-for", v)))
            {
                bail!("bench scale: {name} {value} applies with --slow FACTOR only");
            }
            return Ok(None);
        };
        let slow = Slow {
            factor,
            from_s: from_s.unwrap_or(DEFAULT_FROM_S),
            for_s: for_s.unwrap_or(DEFAULT_FOR_S),
        };
        for (name, value) in [("--slow-from", slow.from_s), ("--slow-for", slow.for_s)] {
            if value > MAX_WINDOW_S {
                bail!(
                    "bench scale: {name} {value} is past a week ({MAX_WINDOW_S} s);                      give seconds within the run"
                );
            }
        }
        let end = slow.from_s + slow.for_s;
        if end + AFTER_MIN_S > seconds {
            bail!(
                "bench scale: --slow-from {} + --slow-for {} = {end} s leave less than \
                 {AFTER_MIN_S} s of --seconds {seconds} after the slowdown to see the recovery; \
                 raise --seconds to {} or more",
                slow.from_s,
                slow.for_s,
                end + AFTER_MIN_S
            );
        }
        Ok(Some(slow))
    }

    /// The window on the host clock for nodes spawned at `spawned_ms`.
    pub(crate) fn window(self, spawned_ms: i64) -> SlowWindow {
        let from_ms = spawned_ms + 1000 * self.from_s as i64;
        SlowWindow {
            factor: self.factor,
            from_ms,
            until_ms: from_ms + 1000 * self.for_s as i64,
        }
    }
}

/// The slowdown on the host clock: epoch ms `from_ms..until_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlowWindow {
    pub(crate) factor: u32,
    pub(crate) from_ms: i64,
    pub(crate) until_ms: i64,
}

impl SlowWindow {
    /// The `bench-node run` arguments that slow its store.
    pub(crate) fn node_args(&self) -> Vec<String> {
        vec![
            "--slow-factor".to_owned(),
            self.factor.to_string(),
            "--slow-from-ms".to_owned(),
            self.from_ms.to_string(),
            "--slow-until-ms".to_owned(),
            self.until_ms.to_string(),
        ]
    }

    /// The phases of the judged `window` by slot time (`from_ms..=to_ms`): before, slowed,
    /// after; empty phases are left out.
    pub(crate) fn phases(&self, window: &Window) -> Vec<(&'static str, i64, i64)> {
        [
            ("before", window.first_ms, self.from_ms - 1),
            ("slowed", self.from_ms, self.until_ms - 1),
            ("after", self.until_ms, window.last_ms),
        ]
        .into_iter()
        .map(|(name, from, to)| (name, from.max(window.first_ms), to.min(window.last_ms)))
        .filter(|(_, from, to)| from <= to)
        .collect()
    }

    /// Which phases the slots `from_ms..=to_ms` fall in: `before`, `slowed`, `after`, or
    /// those it spans joined by `/`.
    pub(crate) fn label(&self, from_ms: i64, to_ms: i64) -> String {
        let spans = [
            ("before", from_ms < self.from_ms),
            ("slowed", from_ms < self.until_ms && to_ms >= self.from_ms),
            ("after", to_ms >= self.until_ms),
        ];
        spans
            .iter()
            .filter(|(_, yes)| *yes)
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Stretches of `seconds` s of the judged window, from its first slot (the last may be
/// partial).
pub(crate) fn stretches(window: &Window, seconds: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut from = window.first_ms;
    while from <= window.last_ms {
        out.push((from, (from + seconds * 1000 - 1).min(window.last_ms)));
        from += seconds * 1000;
    }
    out
}

/// Seconds from the slowdown's end to the first slot second that begins
/// [`ON_TIME_RUN_S`] on-time seconds in a row (or the rest of the window, when shorter);
/// `None` when the slots never came on time again. `seconds` are the judged seconds from
/// the slowdown's end on, in order.
pub(crate) fn recovery_s(seconds: &[MinuteStats], until_ms: i64) -> Option<f64> {
    let on_time: Vec<bool> = seconds
        .iter()
        .map(|s| s.slots > 0 && s.within_percent() >= ON_TIME_PERCENT)
        .collect();
    (0..on_time.len())
        .find(|&i| {
            on_time[i..(i + ON_TIME_RUN_S).min(on_time.len())]
                .iter()
                .all(|ok| *ok)
        })
        .map(|i| (seconds[i].from_ms - until_ms).max(0) as f64 / 1000.0)
}

/// One row of the phase tables: what the slots of a stretch did and each node's readings.
pub(crate) struct Row {
    pub(crate) label: String,
    pub(crate) slots: MinuteStats,
    pub(crate) nodes: Vec<Option<NodeStretch>>,
}

/// The slowed run, judged: by phase, by 30 s stretches, and the recovery.
pub(crate) struct Judged {
    pub(crate) window: SlowWindow,
    pub(crate) phases: Vec<Row>,
    pub(crate) stretches: Vec<Row>,
    pub(crate) recovery_s: Option<f64>,
}

/// Judges a slowed run: `samples` are each node's own readings, in the order of the
/// session's nodes.
pub(crate) fn judge(
    slow: SlowWindow,
    starts: &[Start],
    window: Window,
    samples: &[&[Sample]],
    ticks_per_second: f64,
) -> Judged {
    let rows = |ranges: Vec<(String, i64, i64)>| -> Vec<Row> {
        let spans: Vec<(i64, i64)> = ranges.iter().map(|(_, f, t)| (*f, *t)).collect();
        stretch_stats(starts, window, &spans)
            .into_iter()
            .zip(ranges)
            .map(|(slots, (label, from, to))| Row {
                label,
                nodes: samples
                    .iter()
                    // Readings taken while the stretch's slots were due (the last
                    // stretch's last second included).
                    .map(|s| {
                        let to = if to == window.last_ms { to + 999 } else { to };
                        node_stretch(s, from, to, ticks_per_second)
                    })
                    .collect(),
                slots,
            })
            .collect()
    };
    let phases = rows(
        slow.phases(&window)
            .into_iter()
            .map(|(name, from, to)| (name.to_owned(), from, to))
            .collect(),
    );
    let stretches = rows(
        stretches(&window, 30)
            .into_iter()
            .map(|(from, to)| {
                let label = format!(
                    "{}-{} s ({})",
                    (from - window.first_ms) / 1000,
                    (to - window.first_ms) / 1000 + 1,
                    slow.label(from, to)
                );
                (label, from, to)
            })
            .collect(),
    );
    let first_after = slow.until_ms.div_euclid(1000) * 1000
        + if slow.until_ms.rem_euclid(1000) == 0 {
            0
        } else {
            1000
        };
    let seconds: Vec<(i64, i64)> = (first_after.max(window.first_ms)..=window.last_ms)
        .step_by(1000)
        .map(|t| (t, t + 999))
        .collect();
    let recovery_s = recovery_s(&stretch_stats(starts, window, &seconds), slow.until_ms);
    Judged {
        window: slow,
        phases,
        stretches,
        recovery_s,
    }
}

impl Judged {
    /// The phase table, the 30 s table, the recovery and the memory, as text.
    pub(crate) fn text(&self, window: &Window, names: &[&str]) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let w = &self.window;
        let _ = writeln!(
            out,
            "\nstore {}x slower (each node's store calls take turns at one lock and answer {} \
             times slower) for slots {:.0} s to {:.0} s of the window; by phase and by 30 s of \
             the window (nodes {}; late = slots the nodes reported late, `health().slots_late`; \
             store calls in flight = made by the scheduler and not yet answered or given up, \
             the most at once; runs backed up = `health().runs_watched`):\n",
            w.factor,
            w.factor,
            (w.from_ms - window.first_ms) as f64 / 1000.0,
            (w.until_ms - window.first_ms) as f64 / 1000.0,
            names.join(" / ")
        );
        let _ = writeln!(
            out,
            "| phase | slots | within their second | late | missed | duplicates | lag p50 / p99 | RSS MiB max | runs in flight (max) | store calls in flight (max) | runs backed up (max) | CPU |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in self.phases.iter().chain(&self.stretches) {
            let s = &row.slots;
            let per_node = |f: &dyn Fn(&NodeStretch) -> String| {
                row.nodes
                    .iter()
                    .map(|n| n.as_ref().map_or("-".to_owned(), f))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.label,
                super::scale::grouped(s.slots),
                if s.slots == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.2} %", s.within_percent())
                },
                per_node(&|n| super::scale::grouped(n.late)),
                super::scale::grouped(s.missed),
                s.duplicates,
                s.lag_ms.map_or("-".to_owned(), |l| format!(
                    "{:.0} / {:.0} ms",
                    l.p50, l.p99
                )),
                per_node(&|n| format!("{:.1}", n.rss_max_kb as f64 / 1024.0)),
                per_node(&|n| super::scale::grouped(n.held_max)),
                per_node(&|n| n.calls_max.to_string()),
                per_node(&|n| super::scale::grouped(n.watched_max)),
                per_node(&|n| format!("{:.0} %", n.cores * 100.0)),
            );
        }
        let _ = writeln!(
            out,
            "\nrecovery: {}",
            match self.recovery_s {
                Some(s) => format!(
                    "the slots came on time again {s:.0} s after the slowdown ended (the first of \
                     {ON_TIME_RUN_S} seconds in a row with >= {ON_TIME_PERCENT:.0} % of their \
                     slots started within their second)"
                ),
                None => format!(
                    "NOT ON TIME AGAIN by the end of the run (no {ON_TIME_RUN_S} seconds in a row \
                     with >= {ON_TIME_PERCENT:.0} % of their slots within their second)"
                ),
            }
        );
        let _ = writeln!(out, "memory under the slowdown: {}", self.memory());
        out
    }

    /// The most RSS of each node in each phase, and the most any node grew over its
    /// `before` phase.
    pub(crate) fn memory(&self) -> String {
        let max_of = |name: &str, i: usize| {
            self.phases
                .iter()
                .find(|r| r.label == name)
                .and_then(|r| r.nodes.get(i)?.as_ref().map(|n| n.rss_max_kb))
        };
        let nodes = self.phases.first().map_or(0, |r| r.nodes.len());
        let mut growth: Option<i64> = None;
        for i in 0..nodes {
            if let Some(before) = max_of("before", i) {
                for phase in ["slowed", "after"] {
                    if let Some(m) = max_of(phase, i) {
                        let g = m as i64 - before as i64;
                        growth = Some(growth.map_or(g, |x| x.max(g)));
                    }
                }
            }
        }
        match growth {
            Some(g) => format!(
                "the most RSS any node reached while slowed or after is {:+.1} MiB from its \
                 most before the slowdown",
                g as f64 / 1024.0
            ),
            None => "no reading before the slowdown to compare with".to_owned(),
        }
    }

    /// The phases as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        let rows = |rows: &[Row]| {
            rows.iter()
                .map(|r| {
                    let s = &r.slots;
                    serde_json::json!({
                        "label": r.label,
                        "from_ms": s.from_ms,
                        "to_ms": s.to_ms,
                        "slots": s.slots,
                        "within_second_percent": s.within_percent(),
                        "missed": s.missed,
                        "duplicates": s.duplicates,
                        "lag_ms": s.lag_ms.map(|l| serde_json::json!({"p50": l.p50, "p99": l.p99, "max": l.max})),
                        "nodes": r.nodes.iter().map(|n| n.map(|n| serde_json::json!({
                            "late": n.late,
                            "rss_max_kb": n.rss_max_kb,
                            "runs_in_flight_max": n.held_max,
                            "calls_in_flight_max": n.calls_max,
                            "runs_backed_up_max": n.watched_max,
                            "cores": n.cores,
                        }))).collect::<Vec<_>>(),
                    })
                })
                .collect::<Vec<_>>()
        };
        serde_json::json!({
            "factor": self.window.factor,
            "from_ms": self.window.from_ms,
            "until_ms": self.window.until_ms,
            "phases": rows(&self.phases),
            "stretches_30s": rows(&self.stretches),
            "recovery_s": self.recovery_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::{Grid, parse_log};

    #[test]
    fn slow_options_need_the_factor_and_room_for_the_recovery() {
        assert_eq!(Slow::check(None, None, None, 300).unwrap(), None);
        for (from, for_) in [(u64::MAX, 5), (5, u64::MAX), (u64::MAX, u64::MAX)] {
            let err = Slow::check(Some(10), Some(from), Some(for_), u64::MAX)
                .unwrap_err()
                .to_string();
            assert!(err.contains("past a week"), "{err}");
        }
        assert_eq!(
            Slow::check(Some(10), None, None, 300).unwrap(),
            Some(Slow {
                factor: 10,
                from_s: 60,
                for_s: 120
            })
        );
        assert_eq!(
            Slow::check(Some(100), Some(30), Some(60), 120).unwrap(),
            Some(Slow {
                factor: 100,
                from_s: 30,
                for_s: 60
            })
        );
        for (factor, from, for_s, seconds, named) in [
            (None, Some(60), None, 300, "--slow-from 60"),
            (None, None, Some(90), 300, "--slow-for 90"),
            (Some(10), None, None, 200, "--seconds 200"),
            (
                Some(10),
                Some(100),
                Some(100),
                229,
                "raise --seconds to 230",
            ),
        ] {
            let err = Slow::check(factor, from, for_s, seconds)
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{err}");
        }
    }

    #[test]
    fn the_window_sits_on_the_host_clock_from_the_spawn_and_reaches_the_nodes() {
        let w = Slow {
            factor: 10,
            from_s: 60,
            for_s: 120,
        }
        .window(1_000_500);
        assert_eq!((w.from_ms, w.until_ms), (1_060_500, 1_180_500));
        assert_eq!(
            w.node_args(),
            [
                "--slow-factor",
                "10",
                "--slow-from-ms",
                "1060500",
                "--slow-until-ms",
                "1180500"
            ]
        );
    }

    fn window(first_s: i64, last_s: i64) -> Window {
        Window {
            grid: Grid::every_second(1),
            first_ms: first_s * 1000,
            last_ms: last_s * 1000,
        }
    }

    #[test]
    fn phases_split_the_window_by_slot_time() {
        let slow = SlowWindow {
            factor: 10,
            from_ms: 60_500,
            until_ms: 180_500,
        };
        let w = window(10, 299);
        assert_eq!(
            slow.phases(&w),
            vec![
                ("before", 10_000, 60_499),
                ("slowed", 60_500, 180_499),
                ("after", 180_500, 299_000)
            ]
        );
        // A window that starts inside the slowdown has no `before`.
        assert_eq!(slow.phases(&window(100, 299))[0].0, "slowed");
        assert_eq!(slow.label(40_000, 69_999), "before/slowed");
        assert_eq!(slow.label(70_000, 99_999), "slowed");
        assert_eq!(slow.label(180_500, 200_000), "after");
        assert_eq!(slow.label(40_000, 200_000), "before/slowed/after");
        let s = stretches(&w, 30);
        assert_eq!(s.len(), 10);
        assert_eq!((s[0], s[9]), ((10_000, 39_999), (280_000, 299_000)));
    }

    /// One every-1s job: on time, then 10x slower from 20 s to 40 s (late or missed), then
    /// late until 45 s, one blip at 50 s, on time from 51 s on.
    #[test]
    fn a_slowed_run_is_judged_by_phase_with_its_recovery() {
        let slow = SlowWindow {
            factor: 10,
            from_ms: 20_000,
            until_ms: 40_000,
        };
        let mut log = String::new();
        for s in 10..=79i64 {
            let lag_us = match s {
                20..=45 | 50 => 3_000_000,
                _ => 2_000,
            };
            if s != 30 {
                log += &format!("0 {} {} 1 n1\n", s * 1000, s * 1_000_000 + lag_us);
            }
        }
        let (starts, _) = parse_log(&log);
        let samples: Vec<Sample> = (10..=80)
            .map(|s| Sample {
                t_ms: s * 1000 + 5,
                rss_kb: if (20..40).contains(&s) {
                    11_264
                } else {
                    10_240
                },
                ticks: s as u64,
                held: 1,
                late: if s >= 30 { 4 } else { 0 },
                calls: if (20..40).contains(&s) { 12 } else { 2 },
                watched: 0,
            })
            .collect();
        let judged = judge(slow, &starts, window(10, 79), &[&samples], 100.0);
        let row = |r: &Row| {
            let n = r.nodes[0].unwrap();
            (
                r.label.clone(),
                r.slots.slots,
                r.slots.within_second,
                r.slots.missed,
                n.late,
                n.rss_max_kb,
                n.calls_max,
            )
        };
        assert_eq!(
            judged.phases.iter().map(row).collect::<Vec<_>>(),
            vec![
                ("before".to_owned(), 10, 10, 0, 0, 10_240, 2),
                ("slowed".to_owned(), 20, 0, 1, 4, 11_264, 12),
                ("after".to_owned(), 40, 33, 0, 0, 10_240, 2),
            ]
        );
        assert_eq!(judged.stretches.len(), 3);
        assert_eq!(judged.stretches[0].label, "0-30 s (before/slowed)");
        // On time from 46 s, but 50 s breaks the run of ten: recovered at 51 s.
        assert_eq!(judged.recovery_s, Some(11.0));
        assert!(judged.memory().contains("+1.0 MiB"), "{}", judged.memory());
        let text = judged.text(&window(10, 79), &["n1"]);
        assert!(
            text.contains("| slowed | 20 | 0.00 % | 4 | 1 | 0 |"),
            "{text}"
        );
        assert!(text.contains("11 s after the slowdown ended"), "{text}");
        // Never on time again.
        let late = recovery_s(
            &judged.phases[1..2]
                .iter()
                .map(|r| r.slots.clone())
                .collect::<Vec<_>>(),
            0,
        );
        assert_eq!(late, None);
    }
}
