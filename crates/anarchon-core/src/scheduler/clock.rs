//! Where the scheduler reads the time: [`Clock`] and the system clock reads behind it.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::ids::EpochMs;

/// Where the scheduler reads the time for slots. [B-20]
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// The system clock (keep instances NTP-synced).
    System,
    /// The system time at creation, then tokio's clock: for tests under
    /// `tokio::time::pause()`.
    Tokio {
        /// Epoch ms at the anchor.
        anchor_ms: EpochMs,
        /// Tokio's instant at the anchor.
        anchor: tokio::time::Instant,
    },
    /// The system clock shifted by `offset_ms` (positive: ahead), to show what a skewed
    /// instance does (the clock-skew scenario). Test-only: behind the `testkit` feature.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    SystemShifted {
        /// Added to the system clock, ms.
        offset_ms: i64,
    },
}

impl Clock {
    /// A tokio-driven clock starting at the system time now.
    pub fn tokio() -> Self {
        Clock::Tokio {
            anchor_ms: system_ms(),
            anchor: tokio::time::Instant::now(),
        }
    }

    /// Epoch ms now.
    pub fn now_ms(&self) -> EpochMs {
        match self {
            Clock::System => system_ms(),
            Clock::Tokio { anchor_ms, anchor } => {
                anchor_ms + anchor.elapsed().as_millis() as EpochMs
            }
            #[cfg(feature = "testkit")]
            Clock::SystemShifted { offset_ms } => system_ms().saturating_add(*offset_ms),
        }
    }
}

impl Clock {
    /// Epoch µs now (timers are armed from this, so a slot's timer is not up to 1 ms late
    /// for a clock read in whole ms).
    pub(crate) fn now_micros(&self) -> i64 {
        match self {
            Clock::System => system_micros(),
            Clock::Tokio { anchor_ms, anchor } => anchor_ms
                .saturating_mul(1_000)
                .saturating_add(anchor.elapsed().as_micros() as i64),
            #[cfg(feature = "testkit")]
            Clock::SystemShifted { offset_ms } => {
                system_micros().saturating_add(offset_ms.saturating_mul(1_000))
            }
        }
    }
}

fn system_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn system_ms() -> EpochMs {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as EpochMs)
        .unwrap_or(0)
}
