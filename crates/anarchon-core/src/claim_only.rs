//! What the claim-only broker stores share (RabbitMQ in `anarchon-amqp`, NATS JetStream in
//! `anarchon-nats`): the decision around a claim's publish, the host clock they both use,
//! the prefix rule, the text a record may carry, the order of history and, behind
//! `testkit`, the body of their claim benches.
//!
//! A broker has no clock to read and no way to take a slot back: a claim is one publish
//! that the broker either keeps (the first one: `Won`) or refuses as a duplicate
//! (`Taken`). What surrounds that publish is the same on every broker and lives here, so
//! the two stores cannot drift apart on the rules of [B-10], [B-28] and [B-29]:
//!
//! ```
//! use anarchon_core::claim_only::{self, Delivery};
//! use anarchon_core::store::{RunKey, SlotClaim, SlotOutcome};
//! use anarchon_core::JobName;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let claim = SlotClaim {
//!     run: RunKey::new(JobName::new("sync")?, 1_000),
//!     instance_id: "a".into(),
//!     not_after: claim_only::host_now() + 60_000,
//! };
//! // The broker kept the message: this instance won.
//! let won = claim_only::claim_slot(&claim, || async { Ok(Delivery::First) }).await?;
//! assert_eq!(won, SlotOutcome::Won);
//! // The answer never came back: the slot is skipped rather than run twice. [B-29]
//! let lost = claim_only::claim_slot(&claim, || async { Ok(Delivery::AnswerLost) }).await?;
//! assert_eq!(lost, SlotOutcome::Unknown);
//! # Ok::<_, anarchon_core::Error>(()) }).unwrap();
//! ```
//!
//! It lives in `anarchon-core` (not in a crate of its own, nor in one broker crate that the
//! other includes) because both brokers already depend on core and nothing else: no new
//! crate, no dependency between the brokers, and the rules sit beside the
//! [`ClaimStore`](crate::store::ClaimStore) contract they implement.

use std::borrow::Cow;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::history::RunRecord;
use crate::ids::EpochMs;
use crate::store::{SlotClaim, SlotOutcome};

/// The host's clock in epoch milliseconds: the clock of a store whose server has none
/// (RabbitMQ and NATS cannot be asked for the time; an SQLite file has no clock, so every
/// process that opens it reads this one), and of the conformance kit. A clock before 1970
/// reads as 0.
///
/// ```
/// let now = anarchon_core::claim_only::host_now();
/// assert!(now > 1_700_000_000_000);
/// ```
pub fn host_now() -> EpochMs {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        EpochMs::try_from(d.as_millis()).unwrap_or(EpochMs::MAX)
    })
}

/// What the broker said to a claim's publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The broker kept the message: it was the first one for this run.
    First,
    /// The broker refused it or kept an earlier one (a nack, a duplicate id).
    Duplicate,
    /// The publish may have reached the broker and its answer was lost (connection or
    /// channel gone, timeout): nobody can say whether this instance won.
    AnswerLost,
}

/// Claims `claim`'s slot through `publish`, the broker's one publish for it, with the
/// rules every claim-only store shares:
///
/// - a claim past its deadline (`not_after`, on the host clock) publishes nothing and is
///   [`SlotOutcome::Late`] [B-10];
/// - [`Delivery::First`] is `Won`, [`Delivery::Duplicate`] `Taken`;
/// - [`Delivery::AnswerLost`] is `Unknown`, logged as a warning: the slot is skipped on
///   this instance rather than risk a second run [B-29];
/// - an error of `publish` (nothing was sent) is returned as it is.
///
/// ```
/// use anarchon_core::claim_only::{self, Delivery};
/// use anarchon_core::store::{RunKey, SlotClaim, SlotOutcome};
/// use anarchon_core::JobName;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let late = SlotClaim {
///     run: RunKey::new(JobName::new("sync")?, 1_000),
///     instance_id: "a".into(),
///     not_after: claim_only::host_now() - 1,
/// };
/// let outcome = claim_only::claim_slot(&late, || async {
///     unreachable!("a late claim publishes nothing");
///     #[allow(unreachable_code)]
///     Ok(Delivery::First)
/// })
/// .await?;
/// assert_eq!(outcome, SlotOutcome::Late);
/// # Ok::<_, anarchon_core::Error>(()) }).unwrap();
/// ```
pub async fn claim_slot<F, Fut>(claim: &SlotClaim, publish: F) -> Result<SlotOutcome>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Delivery>>,
{
    if host_now() > claim.not_after {
        return Ok(SlotOutcome::Late);
    }
    Ok(match publish().await? {
        Delivery::First => SlotOutcome::Won,
        Delivery::Duplicate => SlotOutcome::Taken,
        Delivery::AnswerLost => {
            tracing::warn!(run = %claim.run, "the answer to a claim was lost; the slot is skipped");
            SlotOutcome::Unknown
        }
    })
}

/// The error of a write (`prepare`, a claim, a record) on a store opened read-only;
/// `opener` names the constructor to use instead (`AmqpStore::connect_with`).
///
/// ```
/// let err = anarchon_core::claim_only::read_only_refusal("nats", "claim", "NatsStore::connect_with");
/// assert!(err.to_string().contains("read-only"));
/// ```
pub fn read_only_refusal(store: &'static str, operation: &'static str, opener: &str) -> Error {
    Error::store(
        store,
        operation,
        format!(
            "this store was opened read-only and writes nothing; open it with {opener} to run \
             jobs"
        ),
    )
}

/// The longest prefix a broker store takes (it names queues, a stream and subjects).
pub const MAX_PREFIX_LEN: usize = 64;

/// Checks a broker store's prefix: 1 to [`MAX_PREFIX_LEN`] ASCII letters, digits, `_` or
/// `-`, which every broker takes in a queue, stream or subject name and which never holds a
/// subject's `.`, `*` or `>`. The error is the reason, for the store's own error type.
///
/// ```
/// use anarchon_core::claim_only::check_prefix;
/// assert!(check_prefix("billing-2").is_ok());
/// assert!(check_prefix("a.b").unwrap_err().contains("\"a.b\""));
/// assert!(check_prefix("").is_err());
/// ```
pub fn check_prefix(prefix: &str) -> std::result::Result<(), String> {
    let fits = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if fits {
        return Ok(());
    }
    Err(format!(
        "{:?} must be 1 to {MAX_PREFIX_LEN} ASCII letters, digits, '_' or '-'",
        prefix.chars().take(80).collect::<String>()
    ))
}

/// Checks that `value` lies in `min..=max`; the error is the allowed range, for the
/// store's own `OutOfRange` error.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::claim_only::check_within;
/// let (min, max) = (Duration::from_secs(1), Duration::from_secs(60));
/// assert!(check_within(Duration::from_secs(5), min, max).is_ok());
/// assert_eq!(check_within(Duration::ZERO, min, max).unwrap_err(), "from 1s to 60s");
/// ```
pub fn check_within(
    value: Duration,
    min: Duration,
    max: Duration,
) -> std::result::Result<(), String> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!("from {min:?} to {max:?}"))
    }
}

/// The most bytes of a handler's error text a broker record keeps (64 KiB).
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// `text` cut to at most `max` bytes (at a character boundary) followed by a note saying
/// how many bytes were left out and which store (`store`) keeps how many; unchanged when it
/// fits. Any other UTF-8 is kept as it is: JSON escapes NUL and control characters and gives
/// them back unchanged.
///
/// ```
/// use anarchon_core::claim_only::cap_text;
/// assert_eq!(cap_text("short", 64, "NATS"), "short");
/// let long = "é".repeat(100);
/// let cut = cap_text(&long, 51, "NATS");
/// assert!(cut.starts_with(&"é".repeat(25)) && cut.contains("150 more bytes cut"));
/// ```
pub fn cap_text<'a>(text: &'a str, max: usize, store: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… [anarchon: {} more bytes cut; the {store} store keeps at most {max} bytes of an \
         error text]",
        &text[..end],
        text.len() - end
    ))
}

/// The record as a broker stores it: its error text capped by [`cap_text`] at `max` bytes
/// ([`MAX_ERROR_BYTES`] unless the broker's message size leaves less room).
///
/// ```
/// # use anarchon_core::{JobName, Reason, RunStatus};
/// use anarchon_core::claim_only::storable;
/// use anarchon_core::store::RunRecord;
/// # let record = RunRecord { job: JobName::new("sync").unwrap(), slot: 0, scheduled_at: 0,
/// #     instance_id: "a".into(), manual: false, attempt: 1, reason: Reason::Scheduled,
/// #     status: RunStatus::Failed, fence: 0, started_at: 0, finished_at: Some(1), error: None };
/// let failed = RunRecord { error: Some("x".repeat(100)), ..record };
/// let stored = storable(&failed, "RabbitMQ", 10);
/// assert!(stored.error.as_deref().unwrap().contains("90 more bytes cut"));
/// ```
pub fn storable<'a>(record: &'a RunRecord, store: &str, max: usize) -> Cow<'a, RunRecord> {
    match record.error.as_deref().map(|e| cap_text(e, max, store)) {
        Some(Cow::Owned(capped)) => {
            let mut r = record.clone();
            r.error = Some(capped);
            Cow::Owned(r)
        }
        _ => Cow::Borrowed(record),
    }
}

/// The last record written for each attempt — (slot, attempt, manual, instance), the key a
/// record replaces under [B-28] — of records read in the order they were written.
///
/// ```
/// # use anarchon_core::{JobName, Reason, RunStatus};
/// use anarchon_core::claim_only::latest_per_attempt;
/// use anarchon_core::store::RunRecord;
/// # let started = RunRecord { job: JobName::new("sync").unwrap(), slot: 0, scheduled_at: 0,
/// #     instance_id: "a".into(), manual: false, attempt: 1, reason: Reason::Scheduled,
/// #     status: RunStatus::Running, fence: 0, started_at: 0, finished_at: None, error: None };
/// let finished = RunRecord { status: RunStatus::Succeeded, finished_at: Some(5), ..started.clone() };
/// let kept = latest_per_attempt([started, finished.clone()]);
/// assert_eq!(kept, vec![finished]);
/// ```
pub fn latest_per_attempt(written: impl IntoIterator<Item = RunRecord>) -> Vec<RunRecord> {
    let mut latest = std::collections::HashMap::new();
    for r in written {
        latest.insert((r.slot, r.attempt, r.manual, r.instance_id.clone()), r);
    }
    latest.into_values().collect()
}

/// Keeps the newest `keep` runs by (slot, attempt): the retention by count a record's
/// writer asked for [B-28].
pub fn keep_newest_runs(records: &mut Vec<RunRecord>, keep: usize) {
    records.sort_by_key(|r| std::cmp::Reverse((r.slot, r.attempt)));
    records.truncate(keep);
}

/// Puts history in the order [`HistoryStore::history`](crate::store::HistoryStore::history)
/// answers, newest first (by start, then slot, then attempt), and keeps the first `count`.
///
/// ```
/// # use anarchon_core::{JobName, Reason, RunStatus};
/// use anarchon_core::claim_only::newest_first;
/// # let r = |started_at: i64| anarchon_core::store::RunRecord { job: JobName::new("sync").unwrap(),
/// #     slot: started_at, scheduled_at: 0, instance_id: "a".into(), manual: false, attempt: 1,
/// #     reason: Reason::Scheduled, status: RunStatus::Succeeded, fence: 0, started_at,
/// #     finished_at: None, error: None };
/// let records = newest_first(vec![r(1), r(3), r(2)], 2);
/// assert_eq!(records.iter().map(|r| r.started_at).collect::<Vec<_>>(), [3, 2]);
/// ```
pub fn newest_first(mut records: Vec<RunRecord>, count: usize) -> Vec<RunRecord> {
    records.sort_by_key(|r| std::cmp::Reverse((r.started_at, r.slot, r.attempt)));
    records.truncate(count);
    records
}

/// The body of a broker's claim bench (`benches/claim.rs`): a plain publish of the broker
/// (the baseline) and a won claim alternate in one loop so both see the same load, then a
/// lost claim, a record and a history read, reported beside the baseline.
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod bench {
    use std::future::Future;
    use std::time::{Duration, Instant};

    use super::host_now;
    use crate::bench::{BenchConfig, Measurement, measure, report};
    use crate::history::{Reason, Retention, RunRecord, RunStatus};
    use crate::ids::{EpochMs, JobName};
    use crate::store::{ClaimStore, Prepare, RunKey, SlotClaim, SlotOutcome};

    /// The instance id the bench claims and records as (and the baseline's payload).
    pub const INSTANCE: &str = "bench-instance";

    /// What a broker's bench calls its rows.
    #[derive(Debug, Clone)]
    pub struct Rows {
        /// The title above the table, e.g. `anarchon-nats claim bench (nats-server 2.10)`.
        pub title: String,
        /// The baseline: a plain publish of the same size, e.g. `jetstream publish (baseline)`.
        pub baseline: &'static str,
        /// The record row, e.g. `record (append)`.
        pub record: &'static str,
        /// The history read of 100 records.
        pub history: String,
        /// At most this many history reads are timed (they are slow on a long stream).
        pub history_ops: usize,
        /// Said after the ratio of a won claim to the baseline (what a claim does more).
        pub ratio_note: &'static str,
    }

    /// Runs the bench on `store` (claim-only, prepared here for a fresh job), with
    /// `baseline(slot)` as one plain publish, and prints the table (or JSON).
    pub async fn run<S, F, Fut>(
        store: &S,
        rows: Rows,
        cfg: &BenchConfig,
        json: bool,
        mut baseline: F,
    ) where
        S: ClaimStore + ?Sized,
        F: FnMut(EpochMs, &JobName) -> Fut,
        Fut: Future<Output = ()>,
    {
        let job = JobName::new(format!("bench-{:08x}", rand::random::<u32>())).expect("job name");
        store
            .prepare(&Prepare {
                jobs: vec![job.clone()],
                instance_id: "bench".into(),
                call_timeout: Duration::from_secs(5),
            })
            .await
            .expect("prepare");
        let base = host_now() - 10_000_000;
        let claim = |slot: EpochMs, instance: &str| SlotClaim {
            run: RunKey::new(job.clone(), slot),
            instance_id: instance.into(),
            not_after: host_now() + 3_600_000,
        };

        // A plain publish and a won claim alternate in one loop, so both see the same load.
        let (mut plain, mut won) = (Vec::with_capacity(cfg.ops), Vec::with_capacity(cfg.ops));
        for i in 0..cfg.warmup + cfg.ops {
            let slot = base + i as EpochMs;
            let started = Instant::now();
            baseline(slot, &job).await;
            let plain_took = started.elapsed();
            let started = Instant::now();
            let outcome = store
                .claim_slot(&claim(slot, INSTANCE))
                .await
                .expect("claim");
            let won_took = started.elapsed();
            assert_eq!(outcome, SlotOutcome::Won, "claim {i} of slot {slot}");
            if i >= cfg.warmup {
                plain.push(plain_took);
                won.push(won_took);
            }
        }
        let mut table = vec![
            Measurement::from_samples(rows.baseline, &plain),
            Measurement::from_samples("claim (won)", &won),
        ];
        table.push(
            measure("claim (taken)", cfg, |_| {
                let c = claim(base, "other");
                async move {
                    assert_eq!(
                        store.claim_slot(&c).await.expect("claim"),
                        SlotOutcome::Taken
                    );
                }
            })
            .await,
        );
        let keep = Retention {
            size: 100,
            ttl_ms: None,
        };
        table.push(
            measure(rows.record, cfg, |i| {
                let at = base + i as EpochMs;
                let rec = RunRecord {
                    job: job.clone(),
                    slot: at,
                    scheduled_at: at,
                    instance_id: INSTANCE.into(),
                    manual: false,
                    attempt: 1,
                    reason: Reason::Scheduled,
                    status: RunStatus::Succeeded,
                    fence: 0,
                    started_at: at,
                    finished_at: Some(at + 1),
                    error: None,
                };
                async move { store.record(&rec, keep).await.expect("record") }
            })
            .await,
        );
        let small = BenchConfig {
            warmup: cfg.warmup.min(10),
            ops: cfg.ops.min(rows.history_ops),
        };
        let job = &job;
        table.push(
            measure(&rows.history, &small, |_| async move {
                assert_eq!(store.history(job, 100).await.expect("history").len(), 100);
            })
            .await,
        );
        report(&rows.title, &table, rows.baseline, json);
        if !json {
            let p50 = |name: &str| table.iter().find(|r| r.name == name).map(|r| r.p50);
            if let (Some(c), Some(b)) = (p50("claim (won)"), p50(rows.baseline)) {
                println!(
                    "claim (won) p50 / {} p50 = {:.2}{}",
                    rows.baseline.trim_end_matches(" (baseline)"),
                    c.as_secs_f64() / b.as_secs_f64(),
                    rows.ratio_note
                );
            }
            println!();
        }
    }

    /// The URL in `var` for a bench, or `None` after a `SKIP` line naming `store` and how
    /// to start the servers.
    pub fn url(var: &str, store: &str) -> Option<String> {
        let url = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
        if url.is_none() {
            eprintln!(
                "SKIP {var} is not set: nothing to bench (cargo xtask test-servers --brokers, \
                 then cargo xtask bench {store})"
            );
        }
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobName;
    use crate::store::RunKey;

    fn claim(not_after: EpochMs) -> SlotClaim {
        SlotClaim {
            run: RunKey::new(JobName::new("sync").unwrap(), 1),
            instance_id: "a".into(),
            not_after,
        }
    }

    #[tokio::test]
    async fn b29_each_delivery_maps_to_its_outcome_and_errors_pass_through() {
        let c = claim(host_now() + 60_000);
        for (delivery, outcome) in [
            (Delivery::First, SlotOutcome::Won),
            (Delivery::Duplicate, SlotOutcome::Taken),
            (Delivery::AnswerLost, SlotOutcome::Unknown),
        ] {
            let got = claim_slot(&c, || async move { Ok(delivery) })
                .await
                .unwrap();
            assert_eq!(got, outcome, "{delivery:?}");
        }
        let err = claim_slot(&c, || async { Err(Error::store("x", "claim", "down")) }).await;
        assert!(matches!(err, Err(Error::Store { .. })), "{err:?}");
    }

    #[tokio::test]
    async fn b10_a_late_claim_publishes_nothing() {
        let published = std::sync::atomic::AtomicBool::new(false);
        let got = claim_slot(&claim(host_now() - 1), || async {
            published.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(Delivery::First)
        })
        .await
        .unwrap();
        assert_eq!(got, SlotOutcome::Late);
        assert!(!published.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn prefixes_take_what_every_broker_names_take() {
        for ok in ["a", "billing_2-x", &"p".repeat(MAX_PREFIX_LEN)] {
            assert!(check_prefix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a.b",
            "a*",
            "a>",
            "a b",
            "é",
            &"p".repeat(MAX_PREFIX_LEN + 1),
        ] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn b28_the_newest_runs_are_kept_and_history_is_newest_first() {
        let r = |slot: EpochMs, attempt: u32, started_at: EpochMs| RunRecord {
            job: JobName::new("sync").unwrap(),
            slot,
            scheduled_at: slot,
            instance_id: "a".into(),
            manual: false,
            attempt,
            reason: crate::history::Reason::Scheduled,
            status: crate::history::RunStatus::Succeeded,
            fence: 0,
            started_at,
            finished_at: None,
            error: None,
        };
        let mut records = vec![r(1, 1, 10), r(3, 1, 5), r(2, 2, 20), r(2, 1, 15)];
        keep_newest_runs(&mut records, 3);
        let kept: Vec<_> = records.iter().map(|r| (r.slot, r.attempt)).collect();
        assert_eq!(kept, [(3, 1), (2, 2), (2, 1)]);
        let shown: Vec<_> = newest_first(records, 2)
            .iter()
            .map(|r| r.started_at)
            .collect();
        assert_eq!(shown, [20, 15]);
    }

    #[test]
    fn long_text_is_cut_at_a_char_boundary_and_says_so() {
        assert_eq!(cap_text("short\0text", 64, "x"), "short\0text");
        let long = "é".repeat(100); // 200 bytes
        let cut = cap_text(&long, 51, "x");
        assert!(cut.starts_with(&"é".repeat(25)), "{cut}");
        assert!(cut.contains("150 more bytes cut"), "{cut}");
        assert!(cut.contains("at most 51 bytes"), "{cut}");
    }
}
