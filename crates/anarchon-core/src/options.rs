//! Job options, scheduler defaults and their validation. [B-04, B-13, B-22, B-28, B-39]
//!
//! Options are set in code through the typed builders ([`crate::SchedulerBuilder`],
//! [`crate::JobBuilder`]): lease-only options exist only on builders for a lease store, so
//! they cannot be set against a claim-only store. From configuration, [`JobConfig`] takes
//! every option by name and [`JobConfig::validate`] refuses those that do not apply.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result, human};
use crate::history::Retention;
use crate::slot::{MAX_INTERVAL, Schedule};
use crate::store::{EpochMs, Overlap};

/// The longest value of a duration option (`jitter`, `max_late`, `timeout`,
/// `catch_up_window`, `lease`, `heartbeat`): one year. Longer values cannot make sense for a
/// scheduler and would come close to overflowing the slot arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The longest `history_ttl` and the largest `offset`: ten years, the
/// same as [`MAX_INTERVAL`].
pub const MAX_LONG_DURATION: Duration = MAX_INTERVAL;

/// The most runs kept per job (`history_size`).
pub const MAX_HISTORY_SIZE: u32 = 100_000;

/// The largest crash budget (`max_attempts`).
pub const MAX_ATTEMPTS: u32 = 1_000;

/// The most slots one catch-up may run (`CatchUp::All { max }`).
pub const MAX_CATCH_UP_RUNS: usize = 1_000;

/// The latest instant an `at` job may name, 5000-01-01T00:00:00Z: the last instant a cron
/// schedule yields ([`CRON_LAST_MS`](crate::slot::CRON_LAST_MS)), so that every schedule
/// ends at the same instant. The earliest is the epoch.
pub const MAX_AT_MS: EpochMs = crate::slot::CRON_LAST_MS;

/// Refuses a duration above `limit`, naming both.
fn at_most(option: &'static str, value: Duration, limit: Duration) -> Result<()> {
    if value > limit {
        return Err(Error::OutOfRange {
            option,
            value: show(value),
            allowed: format!(
                "at most {} ms ({})",
                limit.as_millis(),
                human(limit.as_millis())
            ),
        });
    }
    Ok(())
}

/// A duration for messages, in whole ms (`"18446744073709551615 ms"`) rather than
/// `Debug`'s fractions of seconds.
fn show(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Milliseconds of a duration, saturating at `u64::MAX` (bounded durations never get there).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
    /// Every missed slot inside `catch_up_window`, oldest first, at most `max` of them (the
    /// newest `max`), one after another.
    All {
        /// The cap, so a long outage cannot start a storm.
        max: usize,
    },
    /// No catch-up.
    None,
}

/// Every job option, resolved (scheduler defaults overridden by the job's). [B-39]
///
/// Users set these through the builders ([`crate::SchedulerBuilder`], [`crate::JobBuilder`])
/// or by name through [`JobConfig`]; the struct is public so configuration code can build
/// and [validate](JobOptions::validate) a set of options ahead of time.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    /// Random delay from zero to this after the slot before claiming. Default 2 s. [B-09]
    pub jitter: Duration,
    /// A claim later than this after its slot is skipped as `late`. Default 60 s. [B-10]
    pub max_late: Duration,
    /// Runs kept per job. Default 100. [B-37]
    pub history_size: u32,
    /// Finished runs older than this are pruned (lease stores). Default none.
    pub history_ttl: Option<Duration>,
    /// The handler's signal is cancelled and the attempt failed after this. Default none. [B-21]
    pub timeout: Option<Duration>,
    /// Overlap policy (lease stores). Default skip. [B-12]
    pub overlap: Overlap,
    /// Crash starts of a run (lease stores). Default 3. [B-14]
    pub max_attempts: u32,
    /// How far back catch-up looks on start (lease stores); zero turns it off. Default 5 min.
    pub catch_up_window: Duration,
    /// Which missed slots are caught up. Default latest.
    pub catch_up: CatchUp,
    /// Grid offset for `every` jobs: slots at `k * interval + offset`. Default zero. [B-05]
    pub offset: Duration,
    /// IANA timezone for `cron` jobs. Default the scheduler's, else UTC. [B-06]
    pub timezone: Option<chrono_tz::Tz>,
    /// `at` jobs only: register an `at` time that lies too far in the past to run, instead
    /// of refusing it. Default false. [B-03]
    pub allow_past: bool,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            jitter: Duration::from_secs(2),
            max_late: Duration::from_secs(60),
            history_size: 100,
            history_ttl: None,
            timeout: None,
            overlap: Overlap::Skip,
            max_attempts: 3,
            catch_up_window: Duration::from_secs(300),
            catch_up: CatchUp::Latest,
            offset: Duration::ZERO,
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
            ttl_ms: self.history_ttl.map(ms),
        }
    }

    pub(crate) fn jitter_ms(&self) -> u64 {
        ms(self.jitter)
    }
    pub(crate) fn max_late_ms(&self) -> u64 {
        ms(self.max_late)
    }
    pub(crate) fn catch_up_ms(&self) -> u64 {
        ms(self.catch_up_window)
    }
    pub(crate) fn offset_ms(&self) -> i64 {
        i64::try_from(ms(self.offset)).unwrap_or(i64::MAX)
    }

    /// Checks values that are wrong on their own or together: each duration within
    /// [`MAX_DURATION`] (`history_ttl` and `offset` within [`MAX_LONG_DURATION`]), counts
    /// within their limits, `jitter` not above `max_late`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the option, the value and the limit;
    /// [`Error::InvalidOption`] for values that contradict each other or mean nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{Error, options::JobOptions};
    ///
    /// let opts = JobOptions { max_late: Duration::MAX, ..JobOptions::default() };
    /// let err = opts.validate().unwrap_err();
    /// assert!(matches!(err, Error::OutOfRange { option: "max_late", .. }), "{err}");
    /// ```
    pub fn validate(&self) -> Result<()> {
        at_most("jitter", self.jitter, MAX_DURATION)?;
        at_most("max_late", self.max_late, MAX_DURATION)?;
        at_most("catch_up_window", self.catch_up_window, MAX_DURATION)?;
        if let Some(timeout) = self.timeout {
            if timeout < Duration::from_millis(1) {
                return Err(Error::invalid_option(
                    "timeout",
                    "must be at least 1 ms; leave it unset for no timeout",
                ));
            }
            at_most("timeout", timeout, MAX_DURATION)?;
        }
        if let Some(ttl) = self.history_ttl {
            if ttl < Duration::from_millis(1) {
                return Err(Error::invalid_option(
                    "history_ttl",
                    "must be at least 1 ms; leave it unset to keep by count only",
                ));
            }
            at_most("history_ttl", ttl, MAX_LONG_DURATION)?;
        }
        at_most("offset", self.offset, MAX_LONG_DURATION).map_err(|_| Error::OutOfRange {
            option: "offset",
            value: show(self.offset),
            allowed: format!(
                "at most {} ms (10 years; it is taken modulo the interval)",
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
        if self.jitter > self.max_late {
            return Err(Error::invalid_option(
                "jitter",
                format!(
                    "jitter ({}) must not exceed max_late ({}): a claim that waits longer \
                     than max_late after its slot is skipped as late",
                    human(self.jitter.as_millis()),
                    human(self.max_late.as_millis())
                ),
            ));
        }
        Ok(())
    }

    /// Checks the options against the job's schedule when it is registered at `now`
    /// (`lease`: on a lease store, where catch-up may still start a missed `at` job).
    ///
    /// An `at` time must lie between the epoch and [`MAX_AT_MS`], and, unless
    /// [`JobOptions::allow_past`] is set, not so far in the past that no run could start: more
    /// than `max_late` (or, on a lease store with catch-up on, `catch_up_window` if longer)
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
    /// let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z in epoch ms
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
                let catch_up_on =
                    lease && self.catch_up != CatchUp::None && !self.catch_up_window.is_zero();
                let grace = if catch_up_on {
                    self.max_late_ms().max(self.catch_up_ms())
                } else {
                    self.max_late_ms()
                };
                let too_old = i128::from(now) - i128::from(*at_ms) > i128::from(grace);
                if too_old && !self.allow_past {
                    return Err(Error::AtInThePast {
                        at: instant(*at_ms),
                        now: instant(now),
                        grace: Duration::from_millis(grace),
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
    /// Lease length. Default 30 s.
    pub lease: Duration,
    /// Renewal interval; also the backups' polling interval. Default 5 s.
    pub heartbeat: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
        }
    }
}

impl LeaseTiming {
    /// The lease in ms (what the store traits take).
    pub(crate) fn lease_ms(&self) -> u64 {
        ms(self.lease)
    }
    /// The heartbeat in ms.
    pub(crate) fn heartbeat_ms(&self) -> u64 {
        ms(self.heartbeat)
    }

    /// Checks `heartbeat * 2 < lease`, a heartbeat of at least 1 ms, and `lease` within
    /// [`MAX_DURATION`]. [B-13]
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for a lease longer than a year, [`Error::InvalidOption`] for a
    /// heartbeat under 1 ms or one too slow for the lease.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::options::LeaseTiming;
    ///
    /// let slow = LeaseTiming { lease: Duration::from_secs(10), heartbeat: Duration::from_secs(5) };
    /// assert!(slow.validate().is_err(), "a lease must survive one missed renewal");
    /// assert!(LeaseTiming::default().validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if self.heartbeat < Duration::from_millis(1) {
            return Err(Error::invalid_option("heartbeat", "must be at least 1 ms"));
        }
        at_most("lease", self.lease, MAX_DURATION)?;
        at_most("heartbeat", self.heartbeat, MAX_DURATION)?;
        if self.heartbeat.saturating_mul(2) >= self.lease {
            return Err(Error::invalid_option(
                "heartbeat",
                format!(
                    "heartbeat ({}) * 2 must be less than lease ({}), so a lease survives one missed renewal",
                    human(self.heartbeat.as_millis()),
                    human(self.lease.as_millis())
                ),
            ));
        }
        Ok(())
    }
}

/// A duration as configuration gives it: a number of milliseconds or text like `"30s"`.
fn config_duration(key: &str, value: &serde_json::Value) -> std::result::Result<Duration, String> {
    match value {
        serde_json::Value::Number(n) => n.as_u64().map(Duration::from_millis).ok_or_else(|| {
            format!("`{key}` = {n}: give a whole, non-negative number of milliseconds or text like \"30s\"")
        }),
        // "0", "0s", "0ms": zero is a valid length for some options (jitter); "0smhd" or a
        // unit with no number ("ms") is refused by the one length grammar.
        serde_json::Value::String(text) => {
            crate::slot::parse_length(text).map_err(|e| format!("`{key}`: {e}"))
        }
        other => Err(format!(
            "`{key}` = {other}: give a number of milliseconds or text like \"30s\", \"5m\", \"1h30m\""
        )),
    }
}

/// The catch-up policy as configuration gives it: `"latest"`, `"none"`, `"all"` (at most
/// [`MAX_CATCH_UP_RUNS`] slots), or an object `{"policy": "latest" | "none"}` /
/// `{"policy": "all", "max": N}`.
fn config_catch_up(value: &serde_json::Value) -> std::result::Result<CatchUp, String> {
    let shapes = "write \"latest\", \"none\", \"all\", or {\"policy\": \"all\", \"max\": 10}";
    let policy = |name: &str, max: Option<&serde_json::Value>| match (name, max) {
        ("latest", None) => Ok(CatchUp::Latest),
        ("none", None) => Ok(CatchUp::None),
        ("all", None) => Ok(CatchUp::All {
            max: MAX_CATCH_UP_RUNS,
        }),
        ("all", Some(n)) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(|max| CatchUp::All { max })
            .ok_or_else(|| {
                format!("`catchUp`: `max` = {n} is not a whole number of slots; {shapes}")
            }),
        (other, None) => Err(format!("`catchUp`: {other:?} is not a policy; {shapes}")),
        (other, Some(_)) => Err(format!(
            "`catchUp`: only \"all\" takes `max`, not {other:?}; {shapes}"
        )),
    };
    match value {
        serde_json::Value::String(name) => policy(name.trim(), None),
        serde_json::Value::Object(map) => {
            if let Some(key) = map.keys().find(|k| *k != "policy" && *k != "max") {
                return Err(format!("`catchUp`: unknown key {key:?}; {shapes}"));
            }
            match map.get("policy") {
                Some(serde_json::Value::String(name)) => policy(name.trim(), map.get("max")),
                _ => Err(format!(
                    "`catchUp`: the object needs a \"policy\"; {shapes}"
                )),
            }
        }
        other => Err(format!("`catchUp` = {other}: {shapes}")),
    }
}

/// Job options by name, as read from configuration (serde). Every field is optional; unset
/// fields keep the scheduler's defaults. Lease-only options are refused by
/// [`JobConfig::validate`] for a claim-only store. [B-22]
///
/// Keys are camelCase. Durations take text (`"30s"`, `"5m"`, `"1h30m"`, `"250ms"`) or a
/// number of milliseconds; the older `…Ms` keys (`jitterMs`) are accepted too. A value that
/// cannot be read is an error naming its key; the timezone is checked here, once.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::JobConfig;
///
/// let cfg: JobConfig = serde_json::from_str(r#"{"jitter": "500ms", "maxLate": 30000, "timezone": "Europe/Berlin"}"#)?;
/// assert_eq!(cfg.jitter, Some(Duration::from_millis(500)));
/// assert_eq!(cfg.max_late, Some(Duration::from_secs(30)));
/// assert_eq!(cfg.timezone, Some(chrono_tz::Europe::Berlin));
///
/// let err = serde_json::from_str::<JobConfig>(r#"{"timeout": "ten seconds"}"#).unwrap_err();
/// assert!(err.to_string().contains("`timeout`"), "{err}");
/// let err = serde_json::from_str::<JobConfig>(r#"{"timezone": "Mars/Olympus"}"#).unwrap_err();
/// assert!(err.to_string().contains("Mars/Olympus"), "{err}");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(try_from = "RawJobConfig")]
pub struct JobConfig {
    /// See [`JobOptions::jitter`].
    pub jitter: Option<Duration>,
    /// See [`JobOptions::max_late`].
    pub max_late: Option<Duration>,
    /// See [`JobOptions::history_size`].
    pub history_size: Option<u32>,
    /// See [`JobOptions::history_ttl`] (lease stores only).
    pub history_ttl: Option<Duration>,
    /// See [`JobOptions::timeout`].
    pub timeout: Option<Duration>,
    /// See [`JobOptions::overlap`] (lease stores only).
    pub overlap: Option<Overlap>,
    /// See [`JobOptions::max_attempts`] (lease stores only).
    pub max_attempts: Option<u32>,
    /// See [`JobOptions::catch_up_window`] (lease stores only).
    pub catch_up_window: Option<Duration>,
    /// See [`JobOptions::catch_up`] (lease stores only).
    pub catch_up: Option<CatchUp>,
    /// See [`JobOptions::offset`] (`every` only).
    pub offset: Option<Duration>,
    /// See [`JobOptions::timezone`] (`cron` only).
    pub timezone: Option<chrono_tz::Tz>,
    /// See [`JobOptions::allow_past`] (`at` only).
    pub allow_past: Option<bool>,
    /// Lease length (lease stores only; scheduler level: refused on a job).
    pub lease: Option<Duration>,
    /// Heartbeat interval (lease stores only; scheduler level: refused on a job).
    pub heartbeat: Option<Duration>,
}

/// What serde reads before the durations and the timezone are checked with their keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawJobConfig {
    jitter: Option<serde_json::Value>,
    max_late: Option<serde_json::Value>,
    history_size: Option<u32>,
    history_ttl: Option<serde_json::Value>,
    timeout: Option<serde_json::Value>,
    overlap: Option<Overlap>,
    max_attempts: Option<u32>,
    catch_up_window: Option<serde_json::Value>,
    catch_up: Option<serde_json::Value>,
    offset: Option<serde_json::Value>,
    timezone: Option<String>,
    allow_past: Option<bool>,
    lease: Option<serde_json::Value>,
    heartbeat: Option<serde_json::Value>,
}

impl TryFrom<RawJobConfig> for JobConfig {
    type Error = String;

    fn try_from(raw: RawJobConfig) -> std::result::Result<Self, String> {
        let d = |key: &str, v: Option<serde_json::Value>| {
            v.map(|v| config_duration(key, &v)).transpose()
        };
        let timezone = raw
            .timezone
            .map(|name| crate::slot::parse_timezone(&name).map_err(|e| format!("`timezone`: {e}")))
            .transpose()?;
        let catch_up = raw.catch_up.map(|v| config_catch_up(&v)).transpose()?;
        Ok(JobConfig {
            jitter: d("jitter", raw.jitter)?,
            max_late: d("maxLate", raw.max_late)?,
            history_size: raw.history_size,
            history_ttl: d("historyTtl", raw.history_ttl)?,
            timeout: d("timeout", raw.timeout)?,
            overlap: raw.overlap,
            max_attempts: raw.max_attempts,
            catch_up_window: d("catchUpWindow", raw.catch_up_window)?,
            catch_up,
            offset: d("offset", raw.offset)?,
            timezone,
            allow_past: raw.allow_past,
            lease: d("lease", raw.lease)?,
            heartbeat: d("heartbeat", raw.heartbeat)?,
        })
    }
}

/// How a store coordinates instances: what [`JobConfig::validate`] checks options against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreShape {
    /// A lease store ([`crate::LeaseStore`], `Scheduler::leased`): leases, backups,
    /// takeover, overlap checks, catch-up and history TTLs.
    Leased,
    /// A claim-only store ([`crate::ClaimStore`], `Scheduler::claim_only`): one winner
    /// per slot and nothing after it.
    ClaimOnly,
}

impl JobConfig {
    /// Refuses options that do not apply to the store's shape or to the job kind, naming
    /// the option; `store` is the store's kind as [`crate::store::Store::kind`] gives it
    /// (`"sqlite"`, `"redis-naive"`), for the message. [B-03, B-22, B-28]
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first option that does not apply.
    ///
    /// ```
    /// use anarchon_core::{JobConfig, JobKind, StoreShape};
    ///
    /// let cfg: JobConfig = serde_json::from_str(r#"{"overlap": "allow"}"#).unwrap();
    /// assert!(cfg.validate(StoreShape::Leased, "sqlite", JobKind::Every).is_ok());
    /// assert!(cfg.validate(StoreShape::ClaimOnly, "redis-naive", JobKind::Every).is_err());
    /// assert!(cfg.validate(StoreShape::Leased, "sqlite", JobKind::At).is_err());
    /// ```
    pub fn validate(
        &self,
        shape: StoreShape,
        store: &'static str,
        job_kind: JobKind,
    ) -> Result<()> {
        let lease_only: [(&'static str, bool); 7] = [
            ("overlap", self.overlap.is_some()),
            ("max_attempts", self.max_attempts.is_some()),
            ("catch_up_window", self.catch_up_window.is_some()),
            ("catch_up", self.catch_up.is_some()),
            ("lease", self.lease.is_some()),
            ("heartbeat", self.heartbeat.is_some()),
            ("history_ttl", self.history_ttl.is_some()),
        ];
        if shape == StoreShape::ClaimOnly
            && let Some((name, _)) = lease_only.iter().find(|(_, set)| *set)
        {
            return Err(Error::invalid_option(
                name,
                format!(
                    "the {store} store is claim-only: it keeps no lease, so there is no backup, \
                     takeover, overlap check, catch-up or TTL; remove `{name}` or use a lease store"
                ),
            ));
        }
        if self.lease.is_some() || self.heartbeat.is_some() {
            let name = if self.lease.is_some() {
                "lease"
            } else {
                "heartbeat"
            };
            return Err(Error::invalid_option(
                name,
                "is a scheduler option (one heartbeat renews every lease): set it on the scheduler",
            ));
        }
        if job_kind == JobKind::At && self.overlap.is_some() {
            return Err(Error::invalid_option(
                "overlap",
                "an `at` job runs once, so it cannot overlap",
            ));
        }
        if job_kind != JobKind::Every && self.offset.is_some() {
            return Err(Error::invalid_option(
                "offset",
                "applies to `every` jobs only",
            ));
        }
        if job_kind != JobKind::At && self.allow_past.is_some() {
            return Err(Error::invalid_option(
                "allow_past",
                "applies to `at` jobs only",
            ));
        }
        if job_kind != JobKind::Cron && self.timezone.is_some() {
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
            jitter,
            max_late,
            history_size,
            overlap,
            max_attempts,
            catch_up_window,
            catch_up,
            offset,
            allow_past
        );
        if self.history_ttl.is_some() {
            opts.history_ttl = self.history_ttl;
        }
        if self.timeout.is_some() {
            opts.timeout = self.timeout;
        }
        if self.timezone.is_some() {
            opts.timezone = self.timezone;
        }
    }
}

/// The kind of a job: how its slots are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobKind {
    /// `every`: a fixed interval on the epoch grid.
    Every,
    /// `cron`: a cron expression in a timezone.
    Cron,
    /// `at`: once, at an instant.
    At,
}

impl JobKind {
    /// `"every"`, `"cron"` or `"at"`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Every => "every",
            JobKind::Cron => "cron",
            JobKind::At => "at",
        }
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a length option as configuration and the `#[anarchon::jobs]` attributes write it:
/// `"250ms"`, `"30s"`, `"5m"`, `"1h30m"`, or zero (`"0"`, `"0s"`), which some options take
/// (`jitter`). The same parser as intervals, plus zero.
///
/// # Errors
///
/// [`Error::InvalidInterval`] naming the text.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::options::parse_length;
///
/// assert_eq!(parse_length("1m30s")?, Duration::from_secs(90));
/// assert_eq!(parse_length("0s")?, Duration::ZERO);
/// assert!(parse_length("ten seconds").is_err());
/// assert!(parse_length("ms").is_err());
/// # Ok::<(), anarchon_core::Error>(())
/// ```
pub fn parse_length(text: &str) -> Result<Duration> {
    // One grammar for every surface: the builder, `JobConfig`, the macros and the CLI.
    crate::slot::parse_length(text)
}
