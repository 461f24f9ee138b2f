//! Job options, scheduler defaults and their validation. [B-04, B-13, B-22, B-28, B-39]
//!
//! Options are set in code through the typed builders ([`crate::SchedulerBuilder`],
//! [`crate::JobBuilder`]): lease-only options exist only on builders for a lease store, so
//! they cannot be set against a claim-only store. From configuration, [`JobConfig`] takes
//! every option by name and [`JobConfig::validate`] refuses those that do not apply.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::history::Retention;
use crate::slot::{MAX_INTERVAL, Schedule};
use crate::store::{EpochMs, Overlap};

/// The longest value of a duration option (`jitter_ms`, `max_late_ms`, `timeout_ms`,
/// `catch_up_ms`, `lease_ms`, `heartbeat_ms`): one year. Longer values cannot make sense for a
/// scheduler and would come close to overflowing the slot arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The longest `history_ttl_ms` and the largest `offset_ms` (either sign): ten years, the
/// same as [`MAX_INTERVAL`].
pub const MAX_LONG_DURATION: Duration = MAX_INTERVAL;

/// The most runs kept per job (`history_size`).
pub const MAX_HISTORY_SIZE: u32 = 100_000;

/// The largest crash budget (`max_attempts`).
pub const MAX_ATTEMPTS: u32 = 1_000;

/// The most slots one catch-up may run (`CatchUp::All { max }`).
pub const MAX_CATCH_UP_RUNS: usize = 1_000;

/// The latest instant an `at` job may name, 9999-12-31T23:59:59.999Z (the last one RFC 3339
/// can write); the earliest is the epoch.
pub const MAX_AT_MS: EpochMs = 253_402_300_799_999;

/// Refuses `value` ms above `limit`, naming both.
fn at_most(option: &'static str, value: u64, limit: Duration) -> Result<()> {
    if u128::from(value) > limit.as_millis() {
        return Err(Error::OutOfRange {
            option,
            value: value.to_string(),
            allowed: format!(
                "at most {} ms ({})",
                limit.as_millis(),
                human(limit.as_millis())
            ),
        });
    }
    Ok(())
}

/// Refuses a count outside `1..=limit`, naming both.
fn count_in(option: &'static str, value: u64, limit: u64) -> Result<()> {
    if value == 0 {
        return Err(Error::invalid_option(option, "must be at least 1"));
    }
    if value > limit {
        return Err(Error::OutOfRange {
            option,
            value: value.to_string(),
            allowed: format!("from 1 to {limit}"),
        });
    }
    Ok(())
}

/// A length in ms for messages: `"365 days"`, `"5m"`, `"1500 ms"`.
fn human(ms: u128) -> String {
    const DAY: u128 = 86_400_000;
    match ms {
        ms if ms >= DAY && ms % DAY == 0 => format!("{} days", ms / DAY),
        ms if ms >= 60_000 && ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms >= 1_000 && ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

/// An instant for messages, RFC 3339 when chrono can write it.
fn instant(ms: EpochMs) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms since the epoch"), |t| t.to_rfc3339())
}

/// Which slots a job runs when it starts after slots were missed. [B-19, G-05]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum CatchUp {
    /// The most recent missed slot only (the default). [B-19]
    Latest,
    /// Every missed slot inside `catch_up_ms`, oldest first, at most `max` of them (the
    /// newest `max`), one after another.
    All {
        /// The cap, so a long outage cannot start a storm.
        max: usize,
    },
    /// No catch-up.
    None,
}

/// Every job option, resolved (scheduler defaults overridden by the job's). [B-39]
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    /// Random delay 0..=jitter after the slot before claiming. Default 2000. [B-09]
    pub jitter_ms: u64,
    /// A claim later than this after its slot is skipped as `late`. Default 60000. [B-10]
    pub max_late_ms: u64,
    /// Runs kept per job. Default 100. [B-37]
    pub history_size: u32,
    /// Finished runs older than this are pruned (lease stores). Default none.
    pub history_ttl_ms: Option<u64>,
    /// The handler's signal is cancelled and the attempt failed after this. Default none. [B-21]
    pub timeout_ms: Option<u64>,
    /// Overlap policy (lease stores). Default skip. [B-12]
    pub overlap: Overlap,
    /// Crash starts of a run (lease stores). Default 3. [B-14]
    pub max_attempts: u32,
    /// How far back catch-up looks on start (lease stores); 0 turns it off. Default 300000.
    pub catch_up_ms: u64,
    /// Which missed slots are caught up. Default latest.
    pub catch_up: CatchUp,
    /// Grid offset for `every` jobs. Default 0. [B-05]
    pub offset_ms: i64,
    /// IANA timezone for `cron` jobs. Default the scheduler's, else UTC. [B-06]
    pub timezone: Option<String>,
    /// `at` jobs only: register an `at` time that lies too far in the past to run, instead
    /// of refusing it. Default false. [B-03]
    pub allow_past: bool,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            jitter_ms: 2000,
            max_late_ms: 60_000,
            history_size: 100,
            history_ttl_ms: None,
            timeout_ms: None,
            overlap: Overlap::Skip,
            max_attempts: 3,
            catch_up_ms: 300_000,
            catch_up: CatchUp::Latest,
            offset_ms: 0,
            timezone: None,
            allow_past: false,
        }
    }
}

impl JobOptions {
    /// The retention these options ask for.
    pub fn retention(&self) -> Retention {
        Retention {
            size: self.history_size,
            ttl_ms: self.history_ttl_ms,
        }
    }

    /// Checks values that are wrong on their own or together: each duration within
    /// [`MAX_DURATION`] (`history_ttl_ms` and `offset_ms` within [`MAX_LONG_DURATION`]),
    /// counts within their limits, `jitter_ms` not above `max_late_ms`, a known timezone.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the option, the value and the limit;
    /// [`Error::InvalidOption`] for values that contradict each other or mean nothing;
    /// [`Error::UnknownTimezone`].
    ///
    /// ```
    /// use anarchon_core::{Error, options::JobOptions};
    ///
    /// let opts = JobOptions { max_late_ms: u64::MAX, ..JobOptions::default() };
    /// let err = opts.validate().unwrap_err();
    /// assert!(matches!(err, Error::OutOfRange { option: "max_late_ms", .. }), "{err}");
    /// ```
    pub fn validate(&self) -> Result<()> {
        at_most("jitter_ms", self.jitter_ms, MAX_DURATION)?;
        at_most("max_late_ms", self.max_late_ms, MAX_DURATION)?;
        at_most("catch_up_ms", self.catch_up_ms, MAX_DURATION)?;
        if self.timeout_ms == Some(0) {
            return Err(Error::invalid_option(
                "timeout_ms",
                "must be positive; leave it unset for no timeout",
            ));
        }
        if let Some(timeout) = self.timeout_ms {
            at_most("timeout_ms", timeout, MAX_DURATION)?;
        }
        if self.history_ttl_ms == Some(0) {
            return Err(Error::invalid_option(
                "history_ttl_ms",
                "must be positive; leave it unset to keep by count only",
            ));
        }
        if let Some(ttl) = self.history_ttl_ms {
            at_most("history_ttl_ms", ttl, MAX_LONG_DURATION)?;
        }
        at_most(
            "offset_ms",
            self.offset_ms.unsigned_abs(),
            MAX_LONG_DURATION,
        )
        .map_err(|_| Error::OutOfRange {
            option: "offset_ms",
            value: self.offset_ms.to_string(),
            allowed: format!(
                "from -{0} to {0} ms (10 years; it is taken modulo the interval)",
                MAX_LONG_DURATION.as_millis()
            ),
        })?;
        count_in(
            "history_size",
            u64::from(self.history_size),
            u64::from(MAX_HISTORY_SIZE),
        )?;
        count_in(
            "max_attempts",
            u64::from(self.max_attempts),
            u64::from(MAX_ATTEMPTS),
        )?;
        if let CatchUp::All { max: 0 } = self.catch_up {
            return Err(Error::invalid_option(
                "catch_up",
                "`all` needs a max of at least 1",
            ));
        }
        if let CatchUp::All { max } = self.catch_up {
            count_in(
                "catch_up",
                u64::try_from(max).unwrap_or(u64::MAX),
                MAX_CATCH_UP_RUNS as u64,
            )?;
        }
        if self.jitter_ms > self.max_late_ms {
            return Err(Error::invalid_option(
                "jitter_ms",
                format!(
                    "jitter_ms ({}) must not exceed max_late_ms ({}): a claim that waits longer \
                     than max_late_ms after its slot is skipped as late",
                    self.jitter_ms, self.max_late_ms
                ),
            ));
        }
        if let Some(tz) = &self.timezone
            && tz.parse::<chrono_tz::Tz>().is_err()
        {
            return Err(Error::UnknownTimezone { name: tz.clone() });
        }
        Ok(())
    }

    /// Checks the options against the job's schedule when it is registered at `now`
    /// (`lease`: on a lease store, where catch-up may still start a missed `at` job).
    ///
    /// An `at` time must lie between the epoch and [`MAX_AT_MS`], and, unless
    /// [`JobOptions::allow_past`] is set, not so far in the past that no run could start: more
    /// than `max_late_ms` (or, on a lease store with catch-up on, `catch_up_ms` if longer)
    /// before `now`. A cron job must still have a slot after `now`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for `at` outside its range, [`Error::AtInThePast`],
    /// [`Error::InvalidCron`] for a cron job that never fires again.
    ///
    /// ```
    /// use anarchon_core::{Error, options::JobOptions, slot::Schedule};
    ///
    /// let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    /// let last_year = Schedule::at_str("2025-06-01T00:00:00Z")?;
    /// let opts = JobOptions::default();
    /// assert!(matches!(
    ///     opts.check_schedule(&last_year, now, true),
    ///     Err(Error::AtInThePast { .. })
    /// ));
    /// let allowed = JobOptions { allow_past: true, ..JobOptions::default() };
    /// assert!(allowed.check_schedule(&last_year, now, true).is_ok());
    /// # Ok::<(), anarchon_core::Error>(())
    /// ```
    pub fn check_schedule(&self, schedule: &Schedule, now: EpochMs, lease: bool) -> Result<()> {
        match schedule {
            Schedule::At { at_ms } => {
                if !(0..=MAX_AT_MS).contains(at_ms) {
                    return Err(Error::OutOfRange {
                        option: "at",
                        value: instant(*at_ms),
                        allowed: format!("from {} to {}", instant(0), instant(MAX_AT_MS)),
                    });
                }
                let catch_up_on = lease && self.catch_up != CatchUp::None && self.catch_up_ms > 0;
                let grace = if catch_up_on {
                    self.max_late_ms.max(self.catch_up_ms)
                } else {
                    self.max_late_ms
                };
                let too_old = i128::from(now) - i128::from(*at_ms) > i128::from(grace);
                if too_old && !self.allow_past {
                    return Err(Error::AtInThePast {
                        at: instant(*at_ms),
                        now: instant(now),
                        grace: human(u128::from(grace)),
                    });
                }
            }
            Schedule::Cron(cron) => {
                if cron.next_after(now).is_none() {
                    return Err(Error::InvalidCron {
                        expression: cron.expression().to_owned(),
                        reason: format!("it has no occurrence after {}", instant(now)),
                    });
                }
            }
            Schedule::Every { .. } => {}
        }
        Ok(())
    }
}

/// The lease timing of a scheduler: one heartbeat renews every lease it holds. [B-13]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// Lease length. Default 30000.
    pub lease_ms: u64,
    /// Renewal interval; also the backups' polling interval. Default 5000.
    pub heartbeat_ms: u64,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_ms: 30_000,
            heartbeat_ms: 5_000,
        }
    }
}

impl LeaseTiming {
    /// Checks `heartbeat_ms * 2 < lease_ms`, and `lease_ms` within [`MAX_DURATION`]. [B-13]
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for a lease longer than a year, [`Error::InvalidOption`] for a
    /// heartbeat of 0 or one too slow for the lease.
    pub fn validate(&self) -> Result<()> {
        if self.heartbeat_ms == 0 {
            return Err(Error::invalid_option("heartbeat_ms", "must be positive"));
        }
        at_most("lease_ms", self.lease_ms, MAX_DURATION)?;
        at_most("heartbeat_ms", self.heartbeat_ms, MAX_DURATION)?;
        if self.heartbeat_ms.saturating_mul(2) >= self.lease_ms {
            return Err(Error::invalid_option(
                "heartbeat_ms",
                format!(
                    "heartbeat_ms ({}) * 2 must be less than lease_ms ({}), so a lease survives one missed renewal",
                    self.heartbeat_ms, self.lease_ms
                ),
            ));
        }
        Ok(())
    }
}

/// Job options by name, as read from configuration (serde). Every field is optional; unset
/// fields keep the scheduler's defaults. Lease-only options are refused by
/// [`JobConfig::validate`] for a claim-only store. [B-22]
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobConfig {
    /// See [`JobOptions::jitter_ms`].
    pub jitter_ms: Option<u64>,
    /// See [`JobOptions::max_late_ms`].
    pub max_late_ms: Option<u64>,
    /// See [`JobOptions::history_size`].
    pub history_size: Option<u32>,
    /// See [`JobOptions::history_ttl_ms`] (lease stores only).
    pub history_ttl_ms: Option<u64>,
    /// See [`JobOptions::timeout_ms`].
    pub timeout_ms: Option<u64>,
    /// See [`JobOptions::overlap`] (lease stores only).
    pub overlap: Option<Overlap>,
    /// See [`JobOptions::max_attempts`] (lease stores only).
    pub max_attempts: Option<u32>,
    /// See [`JobOptions::catch_up_ms`] (lease stores only).
    pub catch_up_ms: Option<u64>,
    /// See [`JobOptions::catch_up`] (lease stores only).
    pub catch_up: Option<CatchUp>,
    /// See [`JobOptions::offset_ms`] (`every` only).
    pub offset_ms: Option<i64>,
    /// See [`JobOptions::timezone`] (`cron` only).
    pub timezone: Option<String>,
    /// See [`JobOptions::allow_past`] (`at` only).
    pub allow_past: Option<bool>,
    /// Lease length (lease stores only; scheduler level).
    pub lease_ms: Option<u64>,
    /// Heartbeat interval (lease stores only; scheduler level).
    pub heartbeat_ms: Option<u64>,
}

impl JobConfig {
    /// Refuses options that do not apply to the store kind (`lease` false = claim-only) or
    /// to the job kind (`"every"`, `"cron"`, `"at"`), naming the option. [B-03, B-22, B-28]
    pub fn validate(&self, lease: bool, store: &str, job_kind: &str) -> Result<()> {
        let lease_only: [(&'static str, bool); 7] = [
            ("overlap", self.overlap.is_some()),
            ("max_attempts", self.max_attempts.is_some()),
            ("catch_up_ms", self.catch_up_ms.is_some()),
            ("catch_up", self.catch_up.is_some()),
            ("lease_ms", self.lease_ms.is_some()),
            ("heartbeat_ms", self.heartbeat_ms.is_some()),
            ("history_ttl_ms", self.history_ttl_ms.is_some()),
        ];
        if !lease && let Some((name, _)) = lease_only.iter().find(|(_, set)| *set) {
            return Err(Error::invalid_option(
                name,
                format!(
                    "the {store} store is claim-only: it keeps no lease, so there is no backup, \
                     takeover, overlap check, catch-up or TTL; remove `{name}` or use a lease store"
                ),
            ));
        }
        if self.lease_ms.is_some() || self.heartbeat_ms.is_some() {
            let name = if self.lease_ms.is_some() {
                "lease_ms"
            } else {
                "heartbeat_ms"
            };
            return Err(Error::invalid_option(
                name,
                "is a scheduler option (one heartbeat renews every lease): set it on the scheduler",
            ));
        }
        if job_kind == "at" && self.overlap.is_some() {
            return Err(Error::invalid_option(
                "overlap",
                "an `at` job runs once, so it cannot overlap",
            ));
        }
        if job_kind != "every" && self.offset_ms.is_some() {
            return Err(Error::invalid_option(
                "offset_ms",
                "applies to `every` jobs only",
            ));
        }
        if job_kind != "at" && self.allow_past.is_some() {
            return Err(Error::invalid_option(
                "allow_past",
                "applies to `at` jobs only",
            ));
        }
        if job_kind != "cron" && self.timezone.is_some() {
            return Err(Error::invalid_option(
                "timezone",
                "applies to `cron` jobs only",
            ));
        }
        Ok(())
    }

    /// Writes the set fields over `opts`.
    pub fn apply(&self, opts: &mut JobOptions) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f.clone() { opts.$f = v; } )* };
        }
        set!(
            jitter_ms,
            max_late_ms,
            history_size,
            overlap,
            max_attempts,
            catch_up_ms,
            catch_up,
            offset_ms,
            allow_past
        );
        if self.history_ttl_ms.is_some() {
            opts.history_ttl_ms = self.history_ttl_ms;
        }
        if self.timeout_ms.is_some() {
            opts.timeout_ms = self.timeout_ms;
        }
        if self.timezone.is_some() {
            opts.timezone = self.timezone.clone();
        }
    }
}
