//! Slot math: intervals, the epoch grid, cron in IANA timezones, `at`, jitter. Pure: every
//! function takes "now" as an argument and never reads a clock. [B-01..B-10]

use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::EpochMs;

/// Parses an interval: `"250ms"`, `"10s"`, `"35m"`, `"1h30m"`, `"2d"`. [B-01]
pub fn parse_interval(input: &str) -> Result<Duration> {
    let _ = input;
    todo!("slot helper")
}

/// When a job's slots fall.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// `every`: slots on the grid `k * interval + offset` from the epoch. [B-05]
    Every {
        /// The interval in ms (> 0).
        interval_ms: u64,
        /// The offset in ms.
        offset_ms: i64,
    },
    /// `cron`: the occurrences of an expression in a timezone. [B-06, B-07]
    Cron(CronSchedule),
    /// `at`: one slot. [B-03]
    At {
        /// The instant, epoch ms.
        at_ms: EpochMs,
    },
}

/// A parsed cron expression with its timezone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    _private: (),
}

impl Schedule {
    /// An `every` schedule.
    pub fn every(interval: Duration, offset_ms: i64) -> Result<Self> {
        let _ = (interval, offset_ms);
        todo!()
    }
    /// A `cron` schedule in `timezone` (IANA name; `None` = UTC).
    pub fn cron(expression: &str, timezone: Option<&str>) -> Result<Self> {
        let _ = (expression, timezone);
        let _ = Error::InvalidCron { expression: String::new(), reason: String::new() };
        todo!()
    }
    /// An `at` schedule from an RFC 3339 string or digits (epoch ms).
    pub fn at_str(input: &str) -> Result<Self> {
        let _ = input;
        todo!()
    }
    /// An `at` schedule from epoch ms.
    pub fn at_ms(at_ms: EpochMs) -> Self {
        Schedule::At { at_ms }
    }
    /// The newest slot at or before `now` (`None` if there is none).
    pub fn newest_due(&self, now: EpochMs) -> Option<EpochMs> {
        let _ = now;
        todo!()
    }
    /// The first slot strictly after `after` (`None` if there is none).
    pub fn next_after(&self, after: EpochMs) -> Option<EpochMs> {
        let _ = after;
        todo!()
    }
    /// Slots in `(from, to]`, oldest first, at most `max` of them (the newest `max`).
    pub fn due_between(&self, from: EpochMs, to: EpochMs, max: usize) -> Vec<EpochMs> {
        let _ = (from, to, max);
        todo!()
    }
}
