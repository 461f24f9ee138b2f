//! The conversions the builders take: an interval ([`IntoInterval`]), an `at` time
//! ([`IntoAt`]) and a timezone ([`IntoTimezone`]).

use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::slot::{Schedule, parse_interval};

/// An interval: `"10s"`, a `Duration`, or milliseconds. [B-01]
pub trait IntoInterval {
    /// The interval.
    fn into_interval(self) -> Result<Duration>;
}
impl IntoInterval for &str {
    fn into_interval(self) -> Result<Duration> {
        parse_interval(self)
    }
}
impl IntoInterval for String {
    fn into_interval(self) -> Result<Duration> {
        parse_interval(&self)
    }
}
impl IntoInterval for Duration {
    fn into_interval(self) -> Result<Duration> {
        if self.is_zero() {
            return Err(Error::InvalidInterval {
                input: format!("{self:?}"),
                reason: "must be positive".into(),
            });
        }
        Ok(self)
    }
}
impl IntoInterval for u64 {
    fn into_interval(self) -> Result<Duration> {
        crate::slot::interval_from_ms(self)
    }
}

/// An instant for `at`: RFC 3339 text, a `SystemTime`, or epoch milliseconds (`i64`). [B-03]
pub trait IntoAt {
    /// The schedule.
    fn into_at(self) -> Result<Schedule>;
}
impl IntoAt for &str {
    fn into_at(self) -> Result<Schedule> {
        Schedule::at_str(self)
    }
}
impl IntoAt for SystemTime {
    fn into_at(self) -> Result<Schedule> {
        Schedule::at_system_time(self)
    }
}
impl IntoAt for i64 {
    fn into_at(self) -> Result<Schedule> {
        Ok(Schedule::at_ms(self))
    }
}
impl IntoAt for chrono::DateTime<chrono::Utc> {
    fn into_at(self) -> Result<Schedule> {
        Ok(Schedule::at_ms(self.timestamp_millis()))
    }
}

/// A timezone for cron jobs: an IANA name (`"Europe/Berlin"`, checked once, when the
/// builder is used) or a [`chrono_tz::Tz`].
pub trait IntoTimezone {
    /// The timezone.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTimezone`] naming the input.
    fn into_timezone(self) -> Result<chrono_tz::Tz>;
}
impl IntoTimezone for chrono_tz::Tz {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        Ok(self)
    }
}
impl IntoTimezone for &str {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        // The same rule as `JobConfig`, the macros and the CLI (surrounding spaces trimmed).
        crate::slot::parse_timezone(self)
    }
}
impl IntoTimezone for String {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        self.as_str().into_timezone()
    }
}
