//! Slot math: intervals, the epoch grid, cron in IANA timezones, `at`, jitter. Pure but for
//! [`jitter`], which draws from the thread's random number generator: every function takes
//! "now" as an argument and never reads a clock. [B-01..B-10]
//!
//! A *slot* is one occurrence of a job, named by its instant in milliseconds since the epoch
//! ([`EpochMs`]). Every instance computes the same slots from the same schedule, so the slot is
//! the unit the stores deduplicate on.
//!
//! - [`Schedule::every`]: slots on the grid `k * interval + offset` counted from
//!   1970-01-01T00:00:00Z, whatever the time an instance started. [B-05]
//! - [`Schedule::cron`]: the occurrences of a cron expression in an IANA timezone, as UTC
//!   instants, with the daylight-saving rules below. [B-06, B-07]
//! - [`Schedule::at_str`] / [`Schedule::at_ms`]: one slot. [B-03]
//!
//! # Daylight saving time [B-07]
//!
//! A cron job is one of two kinds, decided by its second, minute and hour fields:
//!
//! - **Wall-clock jobs** (each of those fields is a plain value, list or range, such as
//!   `30 2 * * *` or `0 9,17 * * 1-5`) fire once for each wall-clock time they name. A time
//!   that a spring-forward gap skips fires once, at the first instant after the gap; a time
//!   that a fall-back overlap repeats fires once, at its first occurrence. Several skipped
//!   times share that one instant, so they make one slot.
//! - **Elapsed-time jobs** (a `*` wildcard or a `/` step in the second, minute or hour field,
//!   or a field that lists every value, such as `*/15 * * * *` or `0 * * * *`) follow real
//!   elapsed time: wall-clock times inside a gap do not exist and are skipped, and the times
//!   of a repeated hour fire in both passes.
//!
//! `docs/schedules.md` has a worked example.
//!
//! # Example
//!
//! ```
//! use anarchon_core::slot::{Schedule, parse_interval};
//!
//! // `every 10s` sits on the epoch grid: :00, :10, :20 ...
//! let every = Schedule::every(parse_interval("10s")?, 0)?;
//! assert_eq!(every.newest_due(1_000_015_000), Some(1_000_010_000));
//! assert_eq!(every.next_after(1_000_015_000), Some(1_000_020_000));
//!
//! // 02:30 every day in Berlin. 2026-03-29 has no 02:30 (clocks jump from 02:00 to 03:00),
//! // so that day's run is at 03:00 CEST, 2026-03-29T01:00:00Z.
//! let cron = Schedule::cron("30 2 * * *", Some("Europe/Berlin"))?;
//! let midnight_utc = 1_774_742_400_000; // 2026-03-29T00:00:00Z
//! assert_eq!(cron.next_after(midnight_utc), Some(1_774_746_000_000));
//! # Ok::<(), anarchon_core::Error>(())
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, LocalResult, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::{Error, Result};
use crate::store::EpochMs;

const SECOND_MS: i64 = 1_000;
const HOUR_MS: i64 = 3_600_000;

/// How far, in hours, a wall clock can be from UTC (or jump) in any timezone, with margin.
/// Offsets in the IANA database lie within -12h..+15h, so a wall clock never moves more
/// than 27 hours away from where the instant alone would put it.
const REACH_HOURS: i64 = 27;

/// The most wall-clock matches one search inspects before it gives up. Only a job that fires
/// every second around a fall-back transition comes near it (3 600 per hour repeated).
const SEARCH_LIMIT: usize = 200_000;

/// The units of an interval, largest first, with their length in ms.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses an interval: `"250ms"`, `"10s"`, `"35m"`, `"1h30m"`, `"2d"`. [B-01]
///
/// An interval is one or more `<digits><unit>` parts with the units `d`, `h`, `m`, `s` and
/// `ms`, largest first and each at most once (`"1h30m15s"`, `"1d 12h"`). Whitespace around
/// the whole and between parts is ignored. Units are lower case (`M` is not minutes).
///
/// # Errors
///
/// [`Error::InvalidInterval`] naming the input and the reason when the input is empty, zero,
/// negative, has a fraction, a missing or unknown unit, units out of order, or does not fit in
/// `i64` milliseconds.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::slot::parse_interval;
///
/// assert_eq!(parse_interval("1h30m")?, Duration::from_secs(5_400));
/// assert_eq!(parse_interval(" 250ms ")?, Duration::from_millis(250));
/// assert!(parse_interval("0s").is_err());
/// # Ok::<(), anarchon_core::Error>(())
/// ```
pub fn parse_interval(input: &str) -> Result<Duration> {
    parse_span(input, false)
}

/// Parses a length option (`timeout`, `jitter`, `max_late` ...): the grammar of
/// [`parse_interval`], and zero too, written `"0"` or as a zero of one unit (`"0s"`, `"0ms"`,
/// `"0h0m"`). The one parser of length text behind the builders, `JobConfig`, the
/// `#[anarchon::jobs]` attributes and the CLI, so the same text means the same length in
/// each.
///
/// # Errors
///
/// [`Error::InvalidInterval`] naming the input and the reason, as [`parse_interval`] (except
/// for zero): `"0smhd"` is refused (`smhd` is no unit), not read as zero.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::slot::parse_length;
///
/// assert_eq!(parse_length("1m30s")?, Duration::from_secs(90));
/// assert_eq!(parse_length("0")?, Duration::ZERO);
/// assert_eq!(parse_length(" 0ms ")?, Duration::ZERO);
/// let err = parse_length("0smhd").unwrap_err().to_string();
/// assert!(err.contains("\"0smhd\"") && err.contains("unknown unit \"smhd\""), "{err}");
/// assert!(parse_length("ms").is_err());
/// # Ok::<(), anarchon_core::Error>(())
/// ```
pub fn parse_length(input: &str) -> Result<Duration> {
    let text = input.trim();
    if !text.is_empty() && text.bytes().all(|b| b == b'0') {
        return Ok(Duration::ZERO);
    }
    parse_span(input, true)
}

/// [`parse_interval`] and [`parse_length`]: `zero` says whether a zero total is allowed.
fn parse_span(input: &str, zero: bool) -> Result<Duration> {
    // Only text gets the hint on how to write it.
    let refuse = |reason: String| Error::InvalidInterval {
        input: input.to_owned(),
        reason: format!("{reason}; write it like \"250ms\", \"10s\", \"1h30m\" or \"2d\""),
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(refuse("it is empty".to_owned()));
    }

    let mut rest = text;
    let mut total_ms: u64 = 0;
    // Index into UNITS of the last unit seen, to keep units largest first and unique.
    let mut last_unit: Option<usize> = None;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let digits_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits_len == 0 {
            return Err(refuse(match rest.chars().next() {
                Some('-') if zero => "it is negative; a length cannot be (for a grid laid \
                                      early, give the interval minus the lead as the offset: \
                                      \"9s\" on a 10s grid is 1 s early)"
                    .to_owned(),
                Some('-') => "it is negative; an interval must be positive".to_owned(),
                _ => format!("expected a number at {rest:?}"),
            }));
        }
        let (digits, after) = rest.split_at(digits_len);
        if after.starts_with(['.', ',']) {
            return Err(refuse(format!(
                "fractions are not supported at {rest:?}; use a smaller unit (\"1h30m\", not \"1.5h\")"
            )));
        }
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(refuse(format!(
                "{digits} has no unit; add ms, s, m, h or d"
            )));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(refuse(format!(
                "unknown unit {unit:?}; use ms, s, m, h or d"
            )));
        };
        if last_unit.is_some_and(|last| last >= index) {
            return Err(refuse(
                "units must go from largest to smallest (d, h, m, s, ms), each at most once"
                    .to_owned(),
            ));
        }
        last_unit = Some(index);
        let too_large = || refuse("it is too large".to_owned());
        let count: u64 = digits.parse().map_err(|_| too_large())?;
        total_ms = count
            .checked_mul(UNITS[index].1)
            .and_then(|part| total_ms.checked_add(part))
            .ok_or_else(too_large)?;
        rest = after;
    }

    if total_ms == 0 && !zero {
        return Err(refuse(
            "it is zero; an interval must be positive".to_owned(),
        ));
    }
    if i64::try_from(total_ms).is_err() {
        return Err(refuse("it is too large".to_owned()));
    }
    Ok(Duration::from_millis(total_ms))
}

/// Reads an IANA timezone name (`"Europe/Berlin"`, `"UTC"`), ignoring whitespace around it:
/// the one reading of timezone text behind cron schedules, the `#[anarchon::jobs]`
/// attributes and the CLI. Names are case-sensitive as IANA writes them, and a space inside
/// one is not an underscore (`"America/New York"` is refused; write `America/New_York`).
///
/// # Errors
///
/// [`Error::UnknownTimezone`] naming the input as given.
///
/// ```
/// use anarchon_core::slot::parse_timezone;
///
/// assert_eq!(parse_timezone(" Europe/Berlin ")?, chrono_tz::Europe::Berlin);
/// assert!(parse_timezone("America/New York").is_err());
/// # Ok::<(), anarchon_core::Error>(())
/// ```
pub fn parse_timezone(name: &str) -> Result<Tz> {
    name.trim()
        .parse::<Tz>()
        .map_err(|_| Error::UnknownTimezone {
            name: name.to_owned(),
        })
}

/// The longest interval of an `every` job: ten years. A longer one would fire at most once
/// in the life of any service, and its slot arithmetic would come close to overflowing.
pub const MAX_INTERVAL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// An interval from milliseconds, as `every` jobs accept it, signed or not. [B-01]
///
/// # Errors
///
/// [`Error::InvalidInterval`] naming the number when it is zero, negative or longer than
/// [`MAX_INTERVAL`].
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::slot::interval_from_ms;
///
/// assert_eq!(interval_from_ms(10_000)?, Duration::from_secs(10));
/// let err = interval_from_ms(u64::MAX).unwrap_err().to_string();
/// assert!(err.contains("18446744073709551615") && !err.contains("-1"), "{err}");
/// # Ok::<(), anarchon_core::Error>(())
/// ```
pub fn interval_from_ms(ms: impl Into<i128>) -> Result<Duration> {
    let ms: i128 = ms.into();
    let refuse = |reason: String| Error::InvalidInterval {
        input: ms.to_string(),
        reason,
    };
    if ms == 0 {
        return Err(refuse(
            "it is zero; an interval must be positive".to_owned(),
        ));
    }
    if ms < 0 {
        return Err(refuse(
            "it is negative; an interval must be positive".to_owned(),
        ));
    }
    if ms > MAX_INTERVAL.as_millis() as i128 {
        return Err(refuse(too_long_interval()));
    }
    // At most MAX_INTERVAL, so it fits.
    Ok(Duration::from_millis(ms as u64))
}

/// Why an interval above [`MAX_INTERVAL`] is refused.
fn too_long_interval() -> String {
    format!(
        "it is longer than the longest interval, 10 years ({} ms); use cron or `at` for rarer jobs",
        MAX_INTERVAL.as_millis()
    )
}

/// A random delay in `0..=max_ms` ms that an instance waits after a slot's time before it
/// claims, to spread the load on the store and vary the winner, drawn from `state` (a
/// xorshift64* generator the caller seeds and keeps: jitter needs spread between instances,
/// not secrecy, and the slot math reads no random source of its own). [B-09]
///
/// ```
/// use anarchon_core::slot::jitter;
///
/// let mut state = 42;
/// let draws: Vec<u64> = (0..100).map(|_| jitter(&mut state, 2_000)).collect();
/// assert!(draws.iter().all(|&d| d <= 2_000));
/// assert_eq!(jitter(&mut state, 0), 0);
/// ```
pub fn jitter(state: &mut u64, max_ms: u64) -> u64 {
    if max_ms == 0 {
        return 0;
    }
    let mut x = *state | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
    match max_ms.checked_add(1) {
        Some(n) => r % n,
        None => r,
    }
}

/// Whether a claim judged at `judged_at` (the store's clock where it has one) is too late for
/// `slot`: more than `max_late_ms` after it. Such a claim is skipped as `late`. [B-10]
///
/// ```
/// use anarchon_core::slot::is_late;
///
/// assert!(!is_late(10_000, 70_000, 60_000)); // exactly 60 s late is still on time
/// assert!(is_late(10_000, 70_001, 60_000));
/// assert!(!is_late(10_000, 5_000, 60_000)); // a clock behind the slot is not late
/// ```
pub fn is_late(slot: EpochMs, judged_at: EpochMs, max_late_ms: u64) -> bool {
    i128::from(judged_at) - i128::from(slot) > i128::from(max_late_ms)
}

/// When a job's slots fall.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// `every`: slots on the grid `k * interval + offset` from the epoch. [B-05]
    ///
    /// [`Schedule::every`] keeps `offset_ms` in `0..interval_ms`; a value built by hand is
    /// taken modulo the interval, and an `interval_ms` of 0 (or above `i64::MAX`) has no slots.
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

/// `every 10s` (with ` offset 2s` when there is one), `cron 0 9 * * * (Europe/Berlin)`,
/// `at 2027-01-01T00:00:00Z`: the schedule as a person would write it.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::slot::Schedule;
///
/// assert_eq!(Schedule::every(Duration::from_secs(90), 0)?.to_string(), "every 90s");
/// assert_eq!(Schedule::every(Duration::from_secs(3600), 0)?.to_string(), "every 1h");
/// let cron = Schedule::cron("0 9 * * 1-5", Some("Europe/Berlin"))?;
/// assert_eq!(cron.to_string(), "cron 0 9 * * 1-5 (Europe/Berlin)");
/// # Ok::<_, anarchon_core::Error>(())
/// ```
impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn length(ms: u64) -> String {
            for (unit, size) in [
                ("d", 86_400_000),
                ("h", 3_600_000),
                ("m", 60_000),
                ("s", 1_000),
            ] {
                if ms >= size && ms.is_multiple_of(size) {
                    return format!("{}{unit}", ms / size);
                }
            }
            format!("{ms}ms")
        }
        match self {
            Schedule::Every {
                interval_ms,
                offset_ms,
            } => {
                write!(f, "every {}", length(*interval_ms))?;
                if *offset_ms != 0 {
                    write!(f, " offset {}", length(offset_ms.unsigned_abs()))?;
                }
                Ok(())
            }
            Schedule::Cron(cron) => write!(f, "cron {} ({})", cron.expression(), cron.timezone()),
            Schedule::At { at_ms } => match chrono::DateTime::from_timestamp_millis(*at_ms) {
                Some(t) => write!(
                    f,
                    "at {}",
                    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                ),
                None => write!(f, "at {at_ms} ms"),
            },
        }
    }
}

/// A parsed cron expression with its timezone. [B-02, B-06, B-07]
///
/// Its slots are the UTC instants of the expression's occurrences in the timezone, with the
/// daylight-saving rules of the [module docs](self).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    // Shared by every job with the same expression, so that a `Schedule` stays small and
    // cheap to clone.
    cron: Arc<SharedCron>,
    timezone: Tz,
    /// The expression as given, when it is not the trimmed text the pattern was parsed
    /// from (which `cron` holds, once for every job with the expression).
    given: Option<Box<str>>,
    elapsed_time: bool,
}

/// A parsed pattern and the trimmed expression it was parsed from.
#[derive(Debug)]
struct SharedCron {
    cron: Cron,
    text: Box<str>,
}

impl Schedule {
    /// An `every` schedule: slots at `k * interval + offset_ms` ms since the epoch. [B-05]
    ///
    /// The interval is rounded down to whole milliseconds. The offset is normalised into
    /// `0..interval` (an offset of `-1s` on a `10s` grid is stored as `9s`), which names the
    /// same slots.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInterval`] when the interval is shorter than 1 ms or longer than
    /// [`MAX_INTERVAL`].
    pub fn every(interval: Duration, offset_ms: i64) -> Result<Self> {
        let refuse = |reason: &str| Error::InvalidInterval {
            input: format!("{interval:?}"),
            reason: reason.to_owned(),
        };
        let interval_ms = interval.as_millis();
        if interval_ms == 0 {
            return Err(refuse(
                "it is shorter than 1ms; an interval must be positive",
            ));
        }
        if interval > MAX_INTERVAL {
            return Err(refuse(&too_long_interval()));
        }
        let interval_ms = i64::try_from(interval_ms).map_err(|_| refuse("it is too large"))?;
        Ok(Schedule::Every {
            interval_ms: interval_ms.unsigned_abs(),
            offset_ms: offset_ms.rem_euclid(interval_ms),
        })
    }

    /// A `cron` schedule in `timezone` (IANA name; `None` = UTC).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCron`] naming the expression, [`Error::UnknownTimezone`] naming the
    /// timezone.
    pub fn cron(expression: &str, timezone: Option<&str>) -> Result<Self> {
        CronSchedule::parse(expression, timezone).map(Schedule::Cron)
    }

    /// An `at` schedule from an RFC 3339 / ISO 8601 string with an offset or `Z`
    /// (`"2026-12-01T09:00:00Z"`, `"2026-12-01T10:00:00.250+01:00"`) or a string of digits
    /// (milliseconds since the epoch). Surrounding whitespace is ignored. [B-03]
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAt`] naming the input, also for a time without an offset, which would
    /// mean a different instant on each instance's timezone.
    pub fn at_str(input: &str) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidAt {
            input: input.to_owned(),
            reason,
        };
        let text = input.trim();
        if text.is_empty() {
            return Err(refuse("it is empty".to_owned()));
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse::<i64>()
                .map(Schedule::at_ms)
                .map_err(|_| refuse("the milliseconds do not fit in an i64".to_owned()));
        }
        let parsed = DateTime::parse_from_rfc3339(text)
            .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z"))
            .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%z"));
        match parsed {
            Ok(at) => Ok(Schedule::at_ms(at.timestamp_millis())),
            Err(_) => {
                let no_offset = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                    .or_else(|_| {
                        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                    })
                    .is_ok();
                Err(refuse(if no_offset {
                    "it has no UTC offset; add \"Z\" or one such as \"+01:00\"".to_owned()
                } else {
                    "it is neither RFC 3339 nor a number of milliseconds".to_owned()
                }))
            }
        }
    }

    /// An `at` schedule from a [`SystemTime`]. [B-03]
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAt`] when the time is out of the `i64` millisecond range.
    pub fn at_system_time(time: SystemTime) -> Result<Self> {
        let refuse = || Error::InvalidAt {
            input: format!("{time:?}"),
            reason: "it is too far from 1970 to count in i64 milliseconds".to_owned(),
        };
        let ms = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_millis()).map_err(|_| refuse())?,
            Err(before) => {
                let before = before.duration();
                // Round towards the past, as the grid does: 0.5 ms before the epoch is -1 ms.
                let ms = before.as_millis() + u128::from(before.subsec_nanos() % 1_000_000 != 0);
                -i64::try_from(ms).map_err(|_| refuse())?
            }
        };
        Ok(Schedule::at_ms(ms))
    }

    /// An `at` schedule from a [`DateTime`] in any timezone. [B-03]
    pub fn at_datetime<Z: TimeZone>(at: &DateTime<Z>) -> Self {
        Schedule::at_ms(at.timestamp_millis())
    }

    /// An `at` schedule from epoch ms.
    pub fn at_ms(at_ms: EpochMs) -> Self {
        Schedule::At { at_ms }
    }

    /// The newest slot at or before `now` (`None` if there is none).
    pub fn newest_due(&self, now: EpochMs) -> Option<EpochMs> {
        match self {
            Schedule::Every {
                interval_ms,
                offset_ms,
            } => {
                let (interval, offset) = grid(*interval_ms, *offset_ms)?;
                let slot = (i128::from(now) - offset).div_euclid(interval) * interval + offset;
                i64::try_from(slot).ok()
            }
            Schedule::Cron(cron) => cron.newest_due(now),
            Schedule::At { at_ms } => (*at_ms <= now).then_some(*at_ms),
        }
    }

    /// The first slot strictly after `after` (`None` if there is none).
    pub fn next_after(&self, after: EpochMs) -> Option<EpochMs> {
        match self {
            Schedule::Every {
                interval_ms,
                offset_ms,
            } => {
                let (interval, offset) = grid(*interval_ms, *offset_ms)?;
                let slot = (i128::from(after) - offset).div_euclid(interval) * interval
                    + offset
                    + interval;
                i64::try_from(slot).ok()
            }
            Schedule::Cron(cron) => cron.next_after(after),
            Schedule::At { at_ms } => (*at_ms > after).then_some(*at_ms),
        }
    }

    /// Slots in `(from, to]`, oldest first, at most `max` of them (the newest `max`).
    pub fn due_between(&self, from: EpochMs, to: EpochMs, max: usize) -> Vec<EpochMs> {
        if max == 0 || to <= from {
            return Vec::new();
        }
        if let Schedule::Every { interval_ms, .. } = self {
            // The grid is arithmetic: no need to walk it slot by slot.
            let (Some(first), Some(last)) = (self.next_after(from), self.newest_due(to)) else {
                return Vec::new();
            };
            if first > last {
                return Vec::new();
            }
            let interval = i128::from(*interval_ms);
            let count = (i128::from(last) - i128::from(first)) / interval + 1;
            let take = count.min(max as i128);
            let start = i128::from(last) - (take - 1) * interval;
            return (0..take)
                .filter_map(|k| i64::try_from(start + k * interval).ok())
                .collect();
        }
        let mut slots = Vec::new();
        let mut cursor = self.newest_due(to);
        while let Some(slot) = cursor {
            if slot <= from || slots.len() == max {
                break;
            }
            slots.push(slot);
            cursor = slot
                .checked_sub(1)
                .and_then(|before| self.newest_due(before));
        }
        slots.reverse();
        slots
    }
}

/// The interval and the normalised offset of an `every` grid, or `None` for an interval of 0.
fn grid(interval_ms: u64, offset_ms: i64) -> Option<(i128, i128)> {
    if interval_ms == 0 || i64::try_from(interval_ms).is_err() {
        return None;
    }
    let interval = i128::from(interval_ms);
    Some((interval, i128::from(offset_ms).rem_euclid(interval)))
}

/// The cron parser anarchon uses: optional seconds, no year, `N/step` accepted (as Vixie
/// cron, cronie and most crontabs do: `0/15` = `0-59/15`), and the days combined by AND when
/// `days_and` (Vixie's rule, decided by [`CronSchedule::parse`]).
fn cron_parser(days_and: bool) -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .sloppy_ranges(true)
        .dom_and_dow(days_and)
        .build()
}

/// The name and the accepted values of each cron field, seconds first.
const CRON_FIELDS: [(&str, &str); 6] = [
    ("seconds", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L or nW"),
    ("month", "1-12 or JAN-DEC"),
    (
        "day-of-week",
        "0-7 (0 and 7 are Sunday) or SUN-SAT, with L or #n",
    ),
];

/// Checks each field of a 5- or 6-field expression on its own, so that an error names the
/// field and its value (croner's own message names neither).
fn check_cron_fields(fields: &[&str]) -> std::result::Result<(), String> {
    let names = &CRON_FIELDS[6 - fields.len()..];
    for (index, (field, (name, accepted))) in fields.iter().zip(names).enumerate() {
        let refuse = |why: &str| format!("the {name} field {field:?} {why}; it takes {accepted}");
        // croner's lenient mode would read `/10` as `*/10`; crontab refuses it.
        if field.split(',').any(|part| part.starts_with('/')) {
            return Err(refuse(
                "has a step without a start; write `*/n` or `start/n`",
            ));
        }
        check_cron_parts(name, field).map_err(|why| refuse(&why))?;
        let mut probe = vec!["*"; fields.len()];
        probe[index] = *field;
        if let Err(e) = cron_parser(false).parse(&probe.join(" ")) {
            return Err(refuse(&format!("is invalid: {}", croner_reason(&e))));
        }
    }
    Ok(())
}

/// The last instant a cron schedule yields, 5000-01-01T00:00:00Z: croner, the cron library,
/// searches no further, so [`CronSchedule::next_after`] answers `None` from there on. It is
/// also the latest instant an `at` job may name
/// ([`MAX_AT_MS`](crate::options::MAX_AT_MS)), so the two kinds of calendar schedule end
/// together: a later `at` is refused with `OutOfRange` naming this bound.
pub const CRON_LAST_MS: EpochMs = 95_617_584_000_000;

/// The names a month or day-of-week field may use.
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The checks croner's lenient reading skips or words in its own terms: an empty list item
/// (`0,,0` would be read as `0`), croner's `+` day-of-week modifier, a character or a name
/// the field does not take, and a range that runs backwards (`5-1`).
fn check_cron_parts(name: &str, field: &str) -> std::result::Result<(), String> {
    if field.split(',').any(str::is_empty) {
        return Err(
            "has an empty list item; separate values with one comma each (\"0,30\", not \"0,,30\")"
                .to_owned(),
        );
    }
    if field.contains('+') {
        return Err(
            "uses croner's `+` modifier, which anarchon does not take: it follows crontab's \
             day rule (both day fields restricted = either matches; see the schedules docs)"
                .to_owned(),
        );
    }
    let names: &[&str] = match name {
        "month" => &MONTH_NAMES,
        "day-of-week" => &DAY_NAMES,
        _ => &[],
    };
    for part in field.split(',') {
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | '-' | '/' | '?' | '#')))
        {
            return Err(format!(
                "holds the character {c:?}, which cron does not use"
            ));
        }
        let range = part.split('/').next().unwrap_or("");
        for word in range.split(['-', '#']) {
            let letters = word.trim_start_matches(|c: char| c.is_ascii_digit());
            let allowed_suffix = matches!(
                (name, letters.to_ascii_uppercase().as_str()),
                ("day-of-month", "L" | "W" | "LW") | ("day-of-week", "L")
            );
            if matches!(letters, "" | "*" | "?") || allowed_suffix {
                continue;
            }
            if !(word == letters && names.iter().any(|n| n.eq_ignore_ascii_case(word))) {
                return Err(if names.is_empty() {
                    format!("holds {word:?}, which is not a number")
                } else {
                    format!(
                        "holds the unknown name {word:?}; the names are {}",
                        names.join(", ")
                    )
                });
            }
        }
        let value = |word: &str| -> Option<usize> {
            word.parse().ok().or_else(|| {
                names
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(word))
                    .map(|i| {
                        // Months are numbered from 1, days of the week from 0 (Sunday).
                        if name == "month" { i + 1 } else { i }
                    })
            })
        };
        if let Some((low, high)) = range.split_once('-')
            && let (Some(a), Some(b)) = (value(low), value(high))
            && a > b
        {
            return Err(format!(
                "has the range {range:?}, which runs backwards; write the smaller value first \
                 ({high}-{low}), or two ranges for one that wraps around ({low}-max,min-{high})"
            ));
        }
    }
    Ok(())
}

/// croner's message, as a clause of ours.
type CronCache =
    std::sync::Mutex<std::collections::HashMap<(String, bool), std::sync::Weak<SharedCron>>>;

fn cron_cache() -> &'static CronCache {
    static CACHE: std::sync::OnceLock<CronCache> = std::sync::OnceLock::new();
    CACHE.get_or_init(CronCache::default)
}

/// The parsed pattern of `trimmed` if a live job holds it.
fn cached_cron(trimmed: &str, days_and: bool) -> Option<Arc<SharedCron>> {
    cron_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(trimmed.to_owned(), days_and))
        .and_then(std::sync::Weak::upgrade)
}

/// Why [`shared_cron`] refused an expression.
enum SharedCronError {
    Parse(croner::errors::CronError),
    NeverFires,
}

/// Parses a cron expression once per process: jobs with the same expression share one
/// parsed pattern. A parse costs about 120 µs and several KiB (croner keeps a bit per year up
/// to year 5000), which 100,000 tenants' jobs with a handful of distinct expressions would
/// pay 100,000 times (measured: 10,000 `*/5 * * * *` jobs took 1.2 s to register and
/// 6 KiB each). The expression's text is shared too (a string of its own per job: 0.51 KiB
/// per registered cron job in `bench scale --workload tenants-cron`, 0.47-0.48 shared).
/// Entries are weak: a pattern no job holds any more is dropped.
fn shared_cron(
    trimmed: &str,
    days_and: bool,
) -> std::result::Result<Arc<SharedCron>, SharedCronError> {
    if let Some(cron) = cached_cron(trimmed, days_and) {
        return Ok(cron);
    }
    let key = (trimmed.to_owned(), days_and);
    let cron = cron_parser(days_and)
        .parse(trimmed)
        .map_err(SharedCronError::Parse)?;
    // A pattern such as `0 0 30 2 *` parses but never fires; croner would search for
    // centuries on every call, so refuse it once here.
    let probe = DateTime::<Utc>::from_timestamp(0, 0).expect("the epoch is a valid time");
    if cron.find_next_occurrence(&probe, true).is_err() {
        return Err(SharedCronError::NeverFires);
    }
    let cron = Arc::new(SharedCron {
        cron,
        text: trimmed.into(),
    });
    let mut map = cron_cache().lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= 4_096 {
        map.retain(|_, w| w.strong_count() > 0);
    }
    map.insert(key, Arc::downgrade(&cron));
    Ok(cron)
}

fn croner_reason(e: &croner::errors::CronError) -> String {
    use croner::errors::CronError;
    let text = match e {
        CronError::ComponentError(text)
        | CronError::InvalidPattern(text)
        | CronError::IllegalCharacters(text) => text.clone(),
        other => other.to_string(),
    };
    let text = text.trim().trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "croner refused it".to_owned(),
    }
}

/// What a wall-clock time is in a timezone on a given day.
enum Local {
    /// It happens once, at this instant.
    Single(i64),
    /// A fall-back overlap repeats it: the first and the second instant.
    Repeated(i64, i64),
    /// A spring-forward gap skips it.
    Skipped,
}

impl CronSchedule {
    /// Parses `expression` (5 fields, or 6 with seconds first, or an alias such as `@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`) in `timezone` (an IANA name such as
    /// `"Europe/Berlin"`; `None` = UTC). [B-02, B-06]
    ///
    /// Two rules follow crontab (Vixie cron) where croner's defaults differ:
    ///
    /// - `N/step` runs from `N` to the field's maximum: `0/15` in the minute field is
    ///   `0,15,30,45`.
    /// - When the day-of-month or the day-of-week field starts with `*`, a day must match
    ///   both fields; when both are restricted, either one: `0 0 */2 * 1` fires on odd days
    ///   that are Mondays, `0 0 1,15 * 1` on the 1st, the 15th and every Monday.
    ///
    /// ```
    /// use anarchon_core::slot::Schedule;
    ///
    /// let quarters = Schedule::cron("0/15 2 * * *", None)?;
    /// let midnight = 1_767_225_600_000; // 2026-01-01T00:00:00Z, a Thursday
    /// assert_eq!(quarters.next_after(midnight), Some(midnight + 2 * 3_600_000));
    ///
    /// let odd_mondays = Schedule::cron("0 0 */2 * 1", None)?;
    /// let jan_5 = midnight + 4 * 86_400_000; // the first Monday, an odd day
    /// let jan_19 = jan_5 + 14 * 86_400_000; // Jan 12 is even
    /// assert_eq!(odd_mondays.next_after(midnight), Some(jan_5));
    /// assert_eq!(odd_mondays.next_after(jan_5), Some(jan_19));
    ///
    /// let err = Schedule::cron("61 * * * *", None).unwrap_err().to_string();
    /// assert!(err.contains("minute field \"61\""), "{err}");
    /// # Ok::<(), anarchon_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCron`] naming the expression and, for a bad field, the field and its
    /// value (also for an expression that never fires, such as `0 0 30 2 *`);
    /// [`Error::UnknownTimezone`] naming the timezone.
    pub fn parse(expression: &str, timezone: Option<&str>) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidCron {
            expression: expression.to_owned(),
            reason,
        };
        let trimmed = expression.trim();
        if trimmed.is_empty() {
            return Err(refuse("it is empty".to_owned()));
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        // Vixie cron's day rule: when day-of-month or day-of-week starts with `*` (or `?`),
        // a day must match both fields (one of them matches every day, so in effect the
        // other one alone); when both are restricted, either may match.
        let days_and = if trimmed.starts_with('@') {
            // The aliases leave one of the two day fields `*`, where croner agrees already.
            false
        } else {
            if fields.len() != 5 && fields.len() != 6 {
                return Err(refuse(format!(
                    "it has {} field{}; use 5 fields (minute hour day-of-month month \
                     day-of-week) or 6 with seconds first",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                )));
            }
            let (dom, dow) = (fields[fields.len() - 3], fields[fields.len() - 1]);
            [dom, dow].iter().any(|f| f.starts_with(['*', '?']))
        };
        // An expression another job parsed already was checked then.
        if !trimmed.starts_with('@') && cached_cron(trimmed, days_and).is_none() {
            check_cron_fields(&fields).map_err(refuse)?;
        }
        let cron = shared_cron(trimmed, days_and).map_err(|e| {
            refuse(match e {
                SharedCronError::Parse(_) if trimmed.starts_with('@') => {
                    "it is not a known alias; use @yearly, @annually, @monthly, @weekly, \
                     @daily or @hourly, or 5 fields"
                        .to_owned()
                }
                SharedCronError::Parse(e) => croner_reason(&e),
                SharedCronError::NeverFires => {
                    "it never fires (no date matches its fields)".to_owned()
                }
            })
        })?;

        let timezone = match timezone {
            None => Tz::UTC,
            Some(name) => parse_timezone(name)?,
        };

        let pattern = &cron.cron.pattern;
        let elapsed_time = [&pattern.seconds, &pattern.minutes, &pattern.hours]
            .into_iter()
            .any(|field| {
                field.from_wildcard
                    || field.step > 1
                    || field.values().len() == usize::from(field.max - field.min) + 1
            });

        Ok(CronSchedule {
            given: (expression != trimmed).then(|| expression.into()),
            cron,
            timezone,
            elapsed_time,
        })
    }

    /// The expression as it was given.
    pub fn expression(&self) -> &str {
        self.given.as_deref().unwrap_or(&self.cron.text)
    }

    /// The timezone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The parsed croner expression.
    pub fn cron(&self) -> &Cron {
        &self.cron.cron
    }

    /// True for an elapsed-time job (a `*` or a `/` step in its second, minute or hour field),
    /// false for a wall-clock job; see the DST rules in the [module docs](self). [B-07]
    pub fn follows_elapsed_time(&self) -> bool {
        self.elapsed_time
    }

    /// The first slot strictly after `after` (`None` if there is none). [B-06, B-07]
    pub fn next_after(&self, after: EpochMs) -> Option<EpochMs> {
        if !self.elapsed_time {
            // Wall-clock job: the slot of wall time `w` is the first instant whose wall clock
            // has reached `w`. That is monotone in `w`, and it is after `after` exactly when
            // `w` is past the highest wall clock time seen up to `after`.
            let high = self.max_wall_until(after)?;
            let mut wall = self.match_at_or_after(high.checked_add(1)?)?;
            for _ in 0..SEARCH_LIMIT {
                match self.first_instant_reaching(wall) {
                    Some(slot) if slot > after => return Some(slot),
                    _ => wall = self.match_at_or_after(wall.checked_add(1)?)?,
                }
            }
            return None;
        }
        // Elapsed-time job: the slots are all instants whose wall clock matches. Around a
        // fall-back their order differs from the wall-clock order, so walk the wall clock from
        // the lowest time it shows after `after` until it passes the highest time it showed
        // up to the best slot found.
        let mut wall = self.match_at_or_after(self.min_wall_after(after)?)?;
        let mut best: Option<i64> = None;
        let mut bound = i64::MAX;
        for _ in 0..SEARCH_LIMIT {
            if wall > bound {
                break;
            }
            for instant in self.instants(wall) {
                if instant > after && best.is_none_or(|b| instant < b) {
                    best = Some(instant);
                    bound = self.max_wall_until(instant)?;
                }
            }
            match wall
                .checked_add(1)
                .and_then(|next| self.match_at_or_after(next))
            {
                Some(next) => wall = next,
                None => break,
            }
        }
        best
    }

    /// The newest slot at or before `now` (`None` if there is none). [B-06, B-07]
    pub fn newest_due(&self, now: EpochMs) -> Option<EpochMs> {
        let high = self.max_wall_until(now)?;
        if !self.elapsed_time {
            let mut wall = self.match_at_or_before(high)?;
            for _ in 0..SEARCH_LIMIT {
                match self.first_instant_reaching(wall) {
                    Some(slot) if slot <= now => return Some(slot),
                    _ => wall = self.match_at_or_before(wall.checked_sub(1)?)?,
                }
            }
            return None;
        }
        let mut wall = self.match_at_or_before(high)?;
        let mut best: Option<i64> = None;
        let mut bound = i64::MIN;
        for _ in 0..SEARCH_LIMIT {
            if wall < bound {
                break;
            }
            for instant in self.instants(wall) {
                if instant <= now && best.is_none_or(|b| instant > b) {
                    best = Some(instant);
                    bound = self.min_wall_after(instant)?;
                }
            }
            match wall
                .checked_sub(1)
                .and_then(|next| self.match_at_or_before(next))
            {
                Some(next) => wall = next,
                None => break,
            }
        }
        best
    }

    // Wall-clock times are handled as ms on a naive "local epoch": the local date and time
    // read as if it were UTC. croner then searches them in UTC, where no DST exists, and this
    // type alone decides how a wall-clock time maps to instants.

    /// The first wall-clock time at or after `wall` that the expression matches.
    fn match_at_or_after(&self, wall: i64) -> Option<i64> {
        let second = wall.div_euclid(SECOND_MS) + i64::from(wall.rem_euclid(SECOND_MS) != 0);
        let start = DateTime::<Utc>::from_timestamp(second, 0)?;
        let found = self.cron.cron.find_next_occurrence(&start, true).ok()?;
        Some(found.timestamp_millis())
    }

    /// The last wall-clock time at or before `wall` that the expression matches.
    fn match_at_or_before(&self, wall: i64) -> Option<i64> {
        let start = DateTime::<Utc>::from_timestamp(wall.div_euclid(SECOND_MS), 0)?;
        let found = self.cron.cron.find_previous_occurrence(&start, true).ok()?;
        Some(found.timestamp_millis())
    }

    /// The timezone's offset from UTC at `instant`, in ms.
    fn offset(&self, instant: i64) -> Option<i64> {
        let utc = DateTime::<Utc>::from_timestamp_millis(instant)?;
        let seconds = self
            .timezone
            .offset_from_utc_datetime(&utc.naive_utc())
            .fix()
            .local_minus_utc();
        Some(i64::from(seconds) * SECOND_MS)
    }

    /// The wall clock at `instant`, in local-epoch ms.
    fn wall(&self, instant: i64) -> Option<i64> {
        instant.checked_add(self.offset(instant)?)
    }

    /// What wall-clock time `wall` is in the timezone.
    fn resolve(&self, wall: i64) -> Option<Local> {
        let naive = DateTime::<Utc>::from_timestamp_millis(wall)?.naive_utc();
        Some(match self.timezone.from_local_datetime(&naive) {
            LocalResult::Single(at) => Local::Single(at.timestamp_millis()),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.timestamp_millis(), b.timestamp_millis());
                Local::Repeated(a.min(b), a.max(b))
            }
            LocalResult::None => Local::Skipped,
        })
    }

    /// The instants at which an elapsed-time job fires for wall-clock time `wall`: once, both
    /// passes of a repeated time, none for a skipped one.
    fn instants(&self, wall: i64) -> Vec<i64> {
        match self.resolve(wall) {
            Some(Local::Single(at)) => vec![at],
            Some(Local::Repeated(first, second)) => vec![first, second],
            Some(Local::Skipped) | None => Vec::new(),
        }
    }

    /// The first instant whose wall clock shows `wall` or later: the slot of a wall-clock
    /// job's time `wall`. For a repeated time that is its first occurrence, for a skipped one
    /// the first instant after the gap.
    fn first_instant_reaching(&self, wall: i64) -> Option<i64> {
        match self.resolve(wall)? {
            Local::Single(at) => Some(at),
            Local::Repeated(first, _) => Some(first),
            Local::Skipped => {
                // The gap is the only jump across `wall` within a day of it, so "the wall
                // clock has reached `wall`" is monotone over this window: bisect it.
                let mut low = wall.checked_sub(REACH_HOURS * HOUR_MS)?;
                let mut high = wall.checked_add(REACH_HOURS * HOUR_MS)?;
                if self.wall(low)? >= wall || self.wall(high)? < wall {
                    return None;
                }
                while high - low > 1 {
                    let mid = low + (high - low) / 2;
                    if self.wall(mid)? >= wall {
                        high = mid;
                    } else {
                        low = mid;
                    }
                }
                Some(high)
            }
        }
    }

    /// The first instant in `(low, high]` with another offset than `low`, given that the
    /// offsets at `low` and `high` differ and one transition lies between them.
    fn transition_between(&self, mut low: i64, mut high: i64) -> Option<i64> {
        let before = self.offset(low)?;
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.offset(mid)? == before {
                low = mid;
            } else {
                high = mid;
            }
        }
        Some(high)
    }

    /// The highest wall clock time shown at or before `instant`. After a fall-back it is the
    /// time just before the clocks went back, until the wall clock passes it again.
    ///
    /// Transitions are found by probing the offset every hour over the reach of any offset,
    /// which assumes no two transitions lie within one hour (true of the IANA database).
    fn max_wall_until(&self, instant: i64) -> Option<i64> {
        let mut highest = self.wall(instant)?;
        let (mut later, mut later_offset) = (instant, self.offset(instant)?);
        for hours in 1..=REACH_HOURS {
            let probe = instant.checked_sub(hours * HOUR_MS)?;
            let offset = self.offset(probe)?;
            if offset != later_offset {
                let change = self.transition_between(probe, later)?;
                highest = highest.max(self.wall(change - 1)?);
            }
            (later, later_offset) = (probe, offset);
        }
        Some(highest)
    }

    /// The lowest wall clock time shown after `instant`. Before a fall-back it is the time the
    /// clocks go back to, once that is below the wall clock at `instant`.
    fn min_wall_after(&self, instant: i64) -> Option<i64> {
        let start = instant.checked_add(1)?;
        let mut lowest = self.wall(start)?;
        let (mut earlier, mut earlier_offset) = (start, self.offset(start)?);
        for hours in 1..=REACH_HOURS {
            let probe = start.checked_add(hours * HOUR_MS)?;
            let offset = self.offset(probe)?;
            if offset != earlier_offset {
                let change = self.transition_between(earlier, probe)?;
                lowest = lowest.min(self.wall(change)?);
            }
            (earlier, earlier_offset) = (probe, offset);
        }
        Some(lowest)
    }
}

/// How the daylight-saving rules of the [module docs](self) placed one slot of a cron
/// schedule, as [`CronSchedule::dst_rule`] reports it. [B-07]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DstRule {
    /// A wall-clock job's time fell in a spring-forward gap, where it does not exist: it runs
    /// once, at the first instant after the gap (this slot). `skipped` is the earliest local
    /// time of the expression inside the gap (the local date and time, without an offset).
    MovedForward {
        /// The first local time of the expression that the gap skipped.
        skipped: chrono::NaiveDateTime,
    },
    /// A wall-clock job's time is repeated by a fall-back overlap: it runs once, at its first
    /// occurrence (this slot), and not in the second pass.
    RepeatedOnce,
    /// An elapsed-time job's time is repeated by a fall-back overlap and runs in both passes:
    /// this slot is the first pass.
    FirstPass,
    /// An elapsed-time job's time is repeated by a fall-back overlap and runs in both passes:
    /// this slot is the second pass.
    SecondPass,
    /// An elapsed-time job: a spring-forward gap lies between the previous slot and this
    /// one, and the expression's local times inside it (from `skipped`) do not exist, so they
    /// did not run.
    AfterGap {
        /// The first local time of the expression that the gap skipped.
        skipped: chrono::NaiveDateTime,
    },
}

impl CronSchedule {
    /// Which daylight-saving rule placed `slot`, a slot of this schedule; `None` when the
    /// slot is an ordinary local time (no gap or overlap touched it), or is no slot of this
    /// schedule's. [B-07]
    ///
    /// ```
    /// use anarchon_core::slot::{DstRule, Schedule};
    ///
    /// let Schedule::Cron(cron) = Schedule::cron("30 2 * * *", Some("Europe/Berlin"))? else {
    ///     unreachable!()
    /// };
    /// // 2026-03-29: 02:30 does not exist in Berlin; the run is at 03:00 CEST (01:00Z).
    /// let slot = cron.next_after(1_774_742_400_000).unwrap(); // after 2026-03-29T00:00Z
    /// assert_eq!(slot, 1_774_746_000_000);
    /// assert!(matches!(cron.dst_rule(slot), Some(DstRule::MovedForward { skipped })
    ///     if skipped.to_string() == "2026-03-29 02:30:00"));
    /// // The day before is an ordinary day.
    /// assert_eq!(cron.dst_rule(slot - 86_400_000 + 1_800_000), None);
    /// # Ok::<(), anarchon_core::Error>(())
    /// ```
    pub fn dst_rule(&self, slot: EpochMs) -> Option<DstRule> {
        let naive = |wall: i64| DateTime::<Utc>::from_timestamp_millis(wall).map(|t| t.naive_utc());
        let wall = self.wall(slot)?;
        if let Some(Local::Repeated(first, second)) = self.resolve(wall) {
            return match (self.elapsed_time, slot) {
                (false, s) if s == first => Some(DstRule::RepeatedOnce),
                (true, s) if s == first => Some(DstRule::FirstPass),
                (true, s) if s == second => Some(DstRule::SecondPass),
                _ => None,
            };
        }
        if !self.elapsed_time {
            // A moved slot sits exactly at the end of a gap: the wall clock jumps between the
            // millisecond before it and it, and the expression matches inside the jump.
            let before = self.wall(slot.checked_sub(1)?)?;
            if wall - before <= 1 {
                return None;
            }
            let skipped = self.match_at_or_after(before.checked_add(1)?)?;
            return if skipped < wall {
                Some(DstRule::MovedForward {
                    skipped: naive(skipped)?,
                })
            } else {
                None
            };
        }
        // Elapsed-time job: look for a gap between the previous slot and this one.
        // Only the last day before the slot is searched: no timezone has two transitions
        // that close, so one bisection finds the gap.
        let previous = self
            .newest_due(slot.checked_sub(1)?)?
            .max(slot.checked_sub(REACH_HOURS * HOUR_MS)?);
        let (from, to) = (self.offset(previous)?, self.offset(slot)?);
        if to <= from {
            return None;
        }
        let change = self.transition_between(previous, slot)?;
        let gap_start = self.wall(change.checked_sub(1)?)?.checked_add(1)?;
        let skipped = self.match_at_or_after(gap_start)?;
        (skipped < self.wall(change)?)
            .then(|| naive(skipped).map(|skipped| DstRule::AfterGap { skipped }))
            .flatten()
    }
}

#[cfg(test)]
mod shared_cron_tests {
    use super::*;

    #[test]
    fn jobs_with_one_expression_share_one_parsed_pattern_while_any_holds_it() {
        let a = CronSchedule::parse("*/7 * * * *", Some("Europe/Berlin")).unwrap();
        let b = CronSchedule::parse("*/7 * * * *", Some("Asia/Tokyo")).unwrap();
        assert!(
            Arc::ptr_eq(&a.cron, &b.cron),
            "one parse for one expression"
        );
        let c = CronSchedule::parse("*/8 * * * *", None).unwrap();
        assert!(!Arc::ptr_eq(&a.cron, &c.cron));
        // The text too: one copy for the jobs, the expression as given where it differs.
        assert_eq!(
            (a.expression(), b.expression()),
            ("*/7 * * * *", "*/7 * * * *")
        );
        assert!(a.given.is_none() && b.given.is_none());
        let spaced = CronSchedule::parse(" */7 * * * * ", None).unwrap();
        assert!(Arc::ptr_eq(&a.cron, &spaced.cron));
        assert_eq!(spaced.expression(), " */7 * * * * ");
        // A refused expression is refused every time, never cached as a pattern.
        for _ in 0..2 {
            assert!(CronSchedule::parse("0 0 30 2 *", None).is_err());
        }
    }

    #[test]
    fn a_full_cache_drops_the_patterns_no_job_holds_and_keeps_the_rest() {
        let held = CronSchedule::parse("13 13 13 * *", None).unwrap();
        // More distinct expressions than the cache keeps, each dropped at once.
        for n in 0..4_200 {
            let (minute, hour, day) = (n % 60, (n / 60) % 24, 1 + n / 1_440);
            drop(CronSchedule::parse(&format!("{minute} {hour} {day} 1 *"), None).unwrap());
        }
        let again = CronSchedule::parse("13 13 13 * *", None).unwrap();
        assert!(
            Arc::ptr_eq(&held.cron, &again.cron),
            "a pattern a job holds survives the cache's clean-up"
        );
        let len = cron_cache().lock().unwrap_or_else(|e| e.into_inner()).len();
        assert!(len < 4_200, "the dropped patterns went: {len} kept");
    }
}
