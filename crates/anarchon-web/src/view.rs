//! What the pages and the JSON API show, computed from store records without I/O.

use std::collections::BTreeMap;

use anarchon_core::chrono::{DateTime, Utc};
use anarchon_core::history::to_datetime;
use anarchon_core::store::{RunRecord, RunView};
use anarchon_core::{Health, HistoryRecord, JobInfo, JobName, Reason, RunStatus};
use serde::Serialize;

/// One row of the jobs page and of `GET /api/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    /// The job.
    pub name: JobName,
    /// `every`, `cron` or `at` when the dashboard's scheduler holds the job, else `None`
    /// (a job known only from the store).
    pub kind: Option<&'static str>,
    /// The schedule (`every 10s`, `cron 0 9 * * * (Europe/Berlin)`, `at ...`) when the
    /// dashboard's scheduler holds the job.
    pub schedule: Option<String>,
    /// The next slot, when the dashboard's scheduler holds the job.
    pub next_run: Option<DateTime<Utc>>,
    /// Status of the newest attempt read.
    pub last_status: Option<RunStatus>,
    /// When the newest attempt started.
    pub last_started_at: Option<DateTime<Utc>>,
    /// Where the newest attempt ran.
    pub last_instance: Option<String>,
    /// Runs (slots and manual runs) in the history read.
    pub runs: usize,
    /// Of those, finished ones.
    pub finished: usize,
    /// Of those, the ones whose last attempt succeeded.
    pub succeeded: usize,
    /// `succeeded / finished`, when anything finished.
    pub success_rate: Option<f64>,
    /// Attempts started by a takeover, in the history read.
    pub takeovers: usize,
}

/// An unfinished run, for the runs page and `GET /api/runs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnfinishedRun {
    /// The job.
    pub job: JobName,
    /// The slot.
    pub slot: DateTime<Utc>,
    /// The attempt running now.
    pub attempt: u32,
    /// The owner; `None` once a handover released the run.
    pub owner: Option<String>,
    /// When the lease ends (store clock).
    pub lease_expires_at: DateTime<Utc>,
    /// Milliseconds of lease left at the store's now (negative: ended that long ago).
    pub lease_left_ms: i64,
    /// The lease ended or was released: a backup may take the run over.
    pub takeable: bool,
}

impl From<&RunView> for UnfinishedRun {
    fn from(v: &RunView) -> Self {
        UnfinishedRun {
            job: v.run.job.clone(),
            slot: to_datetime(v.run.slot),
            attempt: v.attempt,
            owner: v.owner.clone(),
            lease_expires_at: to_datetime(v.expires_at),
            lease_left_ms: v.expires_at.saturating_sub(v.store_now),
            takeable: v.is_takeable(),
        }
    }
}

/// The scheduler's health as `GET /api/health` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthView {
    /// `start` ran and `stop` did not.
    pub running: bool,
    /// The watchdog saw the driver loop stop turning.
    pub stalled: bool,
    /// Milliseconds since the driver loop last turned.
    pub driver_idle_ms: u64,
    /// Runs this instance owns under a lease now.
    pub leases_held: u64,
    /// The last store error since the store last answered.
    pub last_error: Option<String>,
    /// False after several consecutive failed store calls.
    pub store_reachable: bool,
    /// Running, not stalled, and the store answers.
    pub healthy: bool,
}

impl From<&Health> for HealthView {
    fn from(h: &Health) -> Self {
        HealthView {
            running: h.running,
            stalled: h.stalled,
            driver_idle_ms: u64::try_from(h.driver_idle.as_millis()).unwrap_or(u64::MAX),
            leases_held: h.leases_held,
            last_error: h.last_error.clone(),
            store_reachable: h.store_reachable,
            healthy: h.is_healthy(),
        }
    }
}

/// How an attempt is drawn: its status, refined by why an interrupted attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Running,
    Succeeded,
    Failed,
    /// Released by a graceful stop: the next attempt is a handover.
    HandedOver,
    /// Its lease expired (the runner died or froze): the next attempt is a takeover.
    Lost,
    /// Interrupted otherwise (stopped, superseded by the next slot).
    Interrupted,
}

impl Class {
    pub(crate) fn of(r: &RunRecord) -> Self {
        match r.status {
            RunStatus::Running => Class::Running,
            RunStatus::Succeeded => Class::Succeeded,
            RunStatus::Failed => Class::Failed,
            RunStatus::Interrupted => match r.error.as_deref() {
                Some("handed over") => Class::HandedOver,
                Some("lease expired") => Class::Lost,
                _ => Class::Interrupted,
            },
        }
    }

    /// The CSS class (`st-lost`) and the legend's words.
    pub(crate) fn css(self) -> &'static str {
        match self {
            Class::Running => "st-running",
            Class::Succeeded => "st-succeeded",
            Class::Failed => "st-failed",
            Class::HandedOver => "st-handed-over",
            Class::Lost => "st-lost",
            Class::Interrupted => "st-interrupted",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Class::Running => "running",
            Class::Succeeded => "succeeded",
            Class::Failed => "failed",
            Class::HandedOver => "handed over",
            Class::Lost => "lost (lease expired)",
            Class::Interrupted => "interrupted",
        }
    }

    pub(crate) fn colour(self) -> &'static str {
        match self {
            Class::Running => "#2f6fdb",
            Class::Succeeded => "#2e9d4e",
            Class::Failed => "#d0342c",
            Class::HandedOver => "#e69f00",
            Class::Lost => "#7b3fb5",
            Class::Interrupted => "#8a8f98",
        }
    }

    pub(crate) const ALL: [Class; 6] = [
        Class::Running,
        Class::Succeeded,
        Class::Failed,
        Class::HandedOver,
        Class::Lost,
        Class::Interrupted,
    ];
}

/// A run: every attempt of one slot (or one manual run), oldest attempt first.
fn group_runs(records: &[RunRecord]) -> BTreeMap<(i64, bool, String), Vec<&RunRecord>> {
    let mut runs: BTreeMap<(i64, bool, String), Vec<&RunRecord>> = BTreeMap::new();
    for r in records {
        // Manual runs are keyed by (job, slot, instance); scheduled ones by (job, slot).
        let instance = if r.manual {
            r.instance_id.clone()
        } else {
            String::new()
        };
        runs.entry((r.slot, r.manual, instance))
            .or_default()
            .push(r);
    }
    for attempts in runs.values_mut() {
        attempts.sort_by_key(|r| (r.attempt, r.started_at));
    }
    runs
}

/// Summarises a job's history (newest first, as the store returns it).
pub(crate) fn summarise(
    name: JobName,
    info: Option<&JobInfo>,
    records: &[RunRecord],
) -> JobSummary {
    let newest = records.first();
    let runs = group_runs(records);
    let mut finished = 0;
    let mut succeeded = 0;
    for attempts in runs.values() {
        let last = attempts.last().map(|r| r.status);
        match last {
            Some(RunStatus::Running) | None => {}
            Some(status) => {
                finished += 1;
                if status == RunStatus::Succeeded {
                    succeeded += 1;
                }
            }
        }
    }
    JobSummary {
        name,
        kind: info.map(|i| i.kind.as_str()),
        schedule: info.map(|i| i.schedule.clone()),
        next_run: info.and_then(|i| i.next_run),
        last_status: newest.map(|r| r.status),
        last_started_at: newest.map(|r| to_datetime(r.started_at)),
        last_instance: newest.map(|r| r.instance_id.clone()),
        runs: runs.len(),
        finished,
        succeeded,
        success_rate: (finished > 0).then(|| succeeded as f64 / finished as f64),
        takeovers: records
            .iter()
            .filter(|r| r.reason == Reason::Takeover)
            .count(),
    }
}

/// One attempt placed on the timeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bar {
    pub(crate) lane: usize,
    pub(crate) x: f64,
    pub(crate) width: f64,
    pub(crate) class: Class,
    pub(crate) record: HistoryRecord,
    /// For a takeover or handover: the bar (index) of the attempt it followed.
    pub(crate) follows: Option<usize>,
}

/// The timeline of one job: lanes per instance, bars per attempt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Timeline {
    /// Instance ids, in the order they first ran something.
    pub(crate) lanes: Vec<String>,
    pub(crate) bars: Vec<Bar>,
    pub(crate) from: DateTime<Utc>,
    pub(crate) to: DateTime<Utc>,
    /// Width of the drawing area in px.
    pub(crate) width: f64,
}

/// The narrowest bar, so a run of a few milliseconds still shows.
pub(crate) const MIN_BAR: f64 = 4.0;

/// Lays out `records` (any order) on `width` px; a running attempt reaches `now`.
pub(crate) fn timeline(records: &[RunRecord], now_ms: i64, width: f64) -> Timeline {
    let mut sorted: Vec<&RunRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.started_at, r.slot, r.attempt));
    let mut lanes: Vec<String> = Vec::new();
    for r in &sorted {
        if !lanes.contains(&r.instance_id) {
            lanes.push(r.instance_id.clone());
        }
    }
    let end_of = |r: &RunRecord| r.finished_at.unwrap_or(now_ms.max(r.started_at));
    let from = sorted.iter().map(|r| r.started_at).min().unwrap_or(now_ms);
    let to = sorted
        .iter()
        .map(|r| end_of(r))
        .max()
        .unwrap_or(now_ms)
        .max(from + 1);
    let span = (to - from) as f64;
    let scale = |t: i64| (t - from) as f64 / span * width;
    let mut bars: Vec<Bar> = Vec::with_capacity(sorted.len());
    for r in &sorted {
        let x = scale(r.started_at);
        let width_px = (scale(end_of(r)) - x)
            .max(MIN_BAR)
            .min(width - x)
            .max(MIN_BAR);
        let follows = if r.attempt > 1 {
            bars.iter().rposition(|b| {
                b.record.slot_ms() == r.slot
                    && !b.record.manual
                    && !r.manual
                    && b.record.attempt + 1 == r.attempt
            })
        } else {
            None
        };
        bars.push(Bar {
            lane: lanes.iter().position(|l| *l == r.instance_id).unwrap_or(0),
            x,
            width: width_px,
            class: Class::of(r),
            record: HistoryRecord::from((*r).clone()),
            follows,
        });
    }
    Timeline {
        lanes,
        bars,
        from: to_datetime(from),
        to: to_datetime(to),
        width,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[allow(
        clippy::too_many_arguments,
        reason = "one column per field of a record"
    )]
    pub(crate) fn record(
        slot: i64,
        attempt: u32,
        instance: &str,
        status: RunStatus,
        reason: Reason,
        started: i64,
        finished: Option<i64>,
        error: Option<&str>,
    ) -> RunRecord {
        RunRecord {
            job: JobName::new("job").unwrap(),
            slot,
            scheduled_at: slot,
            instance_id: instance.into(),
            manual: reason == Reason::Manual,
            attempt,
            reason,
            status,
            fence: u64::from(attempt),
            started_at: started,
            finished_at: finished,
            error: error.map(Into::into),
        }
    }

    /// A slot lost by `a` and taken over by `b`, then a slot `a` ran well, newest first.
    pub(crate) fn takeover_history() -> Vec<RunRecord> {
        vec![
            record(
                2_000,
                1,
                "a",
                RunStatus::Succeeded,
                Reason::Scheduled,
                2_000,
                Some(2_100),
                None,
            ),
            record(
                1_000,
                2,
                "b",
                RunStatus::Succeeded,
                Reason::Takeover,
                1_600,
                Some(1_700),
                None,
            ),
            record(
                1_000,
                1,
                "a",
                RunStatus::Interrupted,
                Reason::Scheduled,
                1_000,
                Some(1_600),
                Some("lease expired"),
            ),
        ]
    }

    #[test]
    fn success_rate_counts_runs_by_their_last_attempt() {
        let s = summarise(JobName::new("job").unwrap(), None, &takeover_history());
        assert_eq!((s.runs, s.finished, s.succeeded, s.takeovers), (2, 2, 2, 1));
        assert_eq!(s.success_rate, Some(1.0));
        assert_eq!(s.last_status, Some(RunStatus::Succeeded));
        assert_eq!(s.last_instance.as_deref(), Some("a"));
    }

    #[test]
    fn a_running_run_is_not_counted_as_finished() {
        let records = vec![
            record(
                2_000,
                1,
                "a",
                RunStatus::Running,
                Reason::Scheduled,
                2_000,
                None,
                None,
            ),
            record(
                1_000,
                1,
                "a",
                RunStatus::Failed,
                Reason::Scheduled,
                1_000,
                Some(1_100),
                Some("boom"),
            ),
        ];
        let s = summarise(JobName::new("job").unwrap(), None, &records);
        assert_eq!((s.runs, s.finished, s.succeeded), (2, 1, 0));
        assert_eq!(s.success_rate, Some(0.0));
    }

    #[test]
    fn interrupted_attempts_are_told_apart_by_their_cause() {
        let r = |e| {
            record(
                1,
                1,
                "a",
                RunStatus::Interrupted,
                Reason::Scheduled,
                1,
                Some(2),
                e,
            )
        };
        assert_eq!(Class::of(&r(Some("lease expired"))), Class::Lost);
        assert_eq!(Class::of(&r(Some("handed over"))), Class::HandedOver);
        assert_eq!(Class::of(&r(Some("stopped"))), Class::Interrupted);
        assert_eq!(Class::of(&r(None)), Class::Interrupted);
    }

    #[test]
    fn the_timeline_puts_each_instance_on_its_lane_and_links_the_takeover() {
        let t = timeline(&takeover_history(), 3_000, 1_000.0);
        assert_eq!(t.lanes, ["a", "b"]);
        assert_eq!(t.bars.len(), 3);
        let lost = &t.bars[0];
        assert_eq!((lost.lane, lost.class, lost.x), (0, Class::Lost, 0.0));
        let takeover = &t.bars[1];
        assert_eq!((takeover.lane, takeover.follows), (1, Some(0)));
        assert_eq!(takeover.record.reason, Reason::Takeover);
        // 1_600 of the span 1_000..2_100 on 1_000 px.
        assert!((takeover.x - 600.0 / 1_100.0 * 1_000.0).abs() < 1e-9);
        assert!(
            t.bars
                .iter()
                .all(|b| b.width >= MIN_BAR && b.x + b.width <= 1_000.0 + 1e-9)
        );
    }

    #[test]
    fn a_running_attempt_reaches_now_and_an_empty_history_has_no_lanes() {
        let running = vec![record(
            1_000,
            1,
            "a",
            RunStatus::Running,
            Reason::Scheduled,
            1_000,
            None,
            None,
        )];
        let t = timeline(&running, 2_000, 100.0);
        assert_eq!(t.bars[0].width, 100.0);
        let empty = timeline(&[], 2_000, 100.0);
        assert!(empty.lanes.is_empty() && empty.bars.is_empty());
    }
}
