//! Job options, scheduler defaults and their validation. [B-04, B-13, B-22, B-28, B-39]
//!
//! Options are set in code through the typed builders ([`crate::SchedulerBuilder`],
//! [`crate::JobBuilder`]): lease-only options exist only on builders for a lease store, so
//! they cannot be set against a claim-only store. From configuration, [`JobConfig`] takes
//! every option by name and [`JobConfig::validate`] refuses those that do not apply.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::history::Retention;
use crate::store::Overlap;

/// Which slots a job runs when it starts after slots were missed. [B-19]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum CatchUp {
    /// The most recent missed slot only (default, as the original).
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

    /// Checks values that are wrong on their own.
    pub fn validate(&self) -> Result<()> {
        if self.history_size == 0 {
            return Err(Error::invalid_option("history_size", "must be at least 1"));
        }
        if self.max_attempts == 0 {
            return Err(Error::invalid_option("max_attempts", "must be at least 1"));
        }
        if self.timeout_ms == Some(0) {
            return Err(Error::invalid_option(
                "timeout_ms",
                "must be positive; leave it unset for no timeout",
            ));
        }
        if self.history_ttl_ms == Some(0) {
            return Err(Error::invalid_option(
                "history_ttl_ms",
                "must be positive; leave it unset to keep by count only",
            ));
        }
        if let CatchUp::All { max: 0 } = self.catch_up {
            return Err(Error::invalid_option(
                "catch_up",
                "`all` needs a max of at least 1",
            ));
        }
        if let Some(tz) = &self.timezone
            && tz.parse::<chrono_tz::Tz>().is_err()
        {
            return Err(Error::UnknownTimezone { name: tz.clone() });
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
    /// Checks `heartbeat_ms * 2 < lease_ms`. [B-13]
    pub fn validate(&self) -> Result<()> {
        if self.heartbeat_ms == 0 {
            return Err(Error::invalid_option("heartbeat_ms", "must be positive"));
        }
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
            offset_ms
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
