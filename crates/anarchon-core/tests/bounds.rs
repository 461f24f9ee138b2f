//! Every option and input is bounded: a value that would overflow or make no sense is a typed
//! error naming the value and the limit, and anything accepted is a schedule that still fires.
//! [B-01, B-03, B-39]

use std::time::{Duration, SystemTime};

use anarchon_core::memory::MemoryStore;
use anarchon_core::options::{
    CatchUp, JobConfig, JobOptions, LeaseTiming, MAX_AT_MS, MAX_ATTEMPTS, MAX_CATCH_UP_RUNS,
    MAX_DURATION, MAX_HISTORY_SIZE, MAX_LONG_DURATION,
};
use anarchon_core::slot::MAX_INTERVAL;
use anarchon_core::{Error, JobContext, Scheduler};
use proptest::prelude::*;

fn handler()
-> impl Fn(JobContext) -> futures::future::Ready<Result<(), anarchon_core::HandlerError>> + Send + Sync
{
    |_ctx| futures::future::ready(Ok(()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

const YEAR_MS: u64 = 365 * 86_400_000;

// ---------------------------------------------------------------------------------------------
// The bad inputs a user met, one by one.

#[test]
fn b39_a_duration_option_beyond_a_year_names_the_value_and_the_limit() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    type Set =
        fn(
            anarchon_core::JobBuilder<'_, anarchon_core::Leased, anarchon_core::kind::Cron>,
        )
            -> anarchon_core::JobBuilder<'_, anarchon_core::Leased, anarchon_core::kind::Cron>;
    let cases: [(&str, Set); 4] = [
        ("max_late", |b| b.max_late(Duration::from_millis(u64::MAX))),
        ("jitter", |b| {
            b.jitter(Duration::from_millis(u64::MAX))
                .max_late(Duration::from_millis(YEAR_MS))
        }),
        ("catch_up_window", |b| {
            b.catch_up_window(Duration::from_millis(u64::MAX))
        }),
        ("timeout", |b| b.timeout(Duration::from_millis(u64::MAX))),
    ];
    for (name, set) in cases {
        let err = set(s.cron("c", "*/5 * * * *"))
            .handler(handler())
            .unwrap_err();
        match &err {
            Error::OutOfRange { option, value, .. } => {
                assert_eq!(*option, name);
                assert_eq!(value, &format!("{} ms", u64::MAX));
            }
            other => panic!("{name}: {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(name)
                && text.contains("18446744073709551615")
                && text.contains(&YEAR_MS.to_string())
                && text.contains("365 days"),
            "{text}"
        );
    }
    // Exactly a year is still accepted.
    s.cron("c", "*/5 * * * *")
        .max_late(Duration::from_millis(YEAR_MS))
        .jitter(Duration::from_millis(YEAR_MS))
        .catch_up_window(Duration::from_millis(YEAR_MS))
        .timeout(Duration::from_millis(YEAR_MS))
        .handler(handler())
        .unwrap();
}

#[test]
fn b22_a_configured_duration_that_is_a_unit_without_a_number_is_refused() {
    for text in ["ms", "s", "m", "h", "d", " ms "] {
        let json = format!(r#"{{"jitter": "{text}"}}"#);
        let err = serde_json::from_str::<JobConfig>(&json)
            .expect_err(&format!("{json} was read as a duration"));
        assert!(err.to_string().contains("jitter"), "{err}");
    }
    // Zero written with a unit stays zero.
    for text in ["0", "0s", "0ms", "00m"] {
        let json = format!(r#"{{"jitter": "{text}"}}"#);
        let cfg: JobConfig = serde_json::from_str(&json).expect(&json);
        assert_eq!(cfg.jitter, Some(Duration::ZERO), "{json}");
    }
}

#[test]
fn b09_jitter_longer_than_max_late_is_refused() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    let err = s
        .cron("c", "0 * * * *")
        .jitter(Duration::from_secs(120))
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "jitter",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max_late (1m)"), "{err}");
}

#[test]
fn b13_lease_timing_beyond_a_year_is_refused() {
    let err = Scheduler::leased(MemoryStore::new())
        .lease(Duration::from_millis(u64::MAX))
        .heartbeat(Duration::from_secs(5))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "lease",
                ..
            }
        ),
        "{err}"
    );
    let err = Scheduler::leased(MemoryStore::new())
        .heartbeat(Duration::from_millis(u64::MAX))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("heartbeat"), "{err}");
}

#[test]
fn b01_an_interval_of_u64_max_ms_is_refused_by_its_own_value() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    let err = s.every("e", u64::MAX).handler(handler()).unwrap_err();
    assert!(matches!(err, Error::InvalidInterval { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("18446744073709551615")
            && !text.contains("\"-1\"")
            && text.contains("10 years"),
        "{text}"
    );
    for too_long in [
        Duration::MAX,
        MAX_INTERVAL + Duration::from_millis(1),
        Duration::from_millis(i64::MAX as u64),
    ] {
        let err = s.every("e", too_long).handler(handler()).unwrap_err();
        assert!(text_has(&err, "10 years"), "{err}");
    }
    let err = s.every("e", "3651d").handler(handler()).unwrap_err();
    assert!(text_has(&err, "10 years"), "{err}");
    s.every("e", MAX_INTERVAL).handler(handler()).unwrap();
    assert!(s.next_run("e").unwrap().is_some());
}

fn text_has(err: &Error, part: &str) -> bool {
    err.to_string().contains(part)
}

#[test]
fn b03_an_at_time_in_the_past_is_refused_unless_allowed() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    let err = s
        .at("once", "2020-01-01T00:00:00Z")
        .handler(handler())
        .unwrap_err();
    assert!(matches!(err, Error::AtInThePast { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("2020-01-01T00:00:00") && text.contains("allow_past(true)"),
        "{text}"
    );
    // A time just missed can still start (late limit, catch-up window): not refused.
    s.at("just-missed", now_ms() - 30_000)
        .handler(handler())
        .unwrap();
    // Explicitly allowed, in code or from configuration.
    s.at("once", "2020-01-01T00:00:00Z")
        .allow_past(true)
        .handler(handler())
        .unwrap();
    let cfg: JobConfig = serde_json::from_str(r#"{"allowPast": true}"#).unwrap();
    s.at("once-cfg", "2020-01-01T00:00:00Z")
        .config(cfg)
        .handler(handler())
        .unwrap();
    // `allowPast` means nothing on other kinds.
    let cfg: JobConfig = serde_json::from_str(r#"{"allowPast": true}"#).unwrap();
    let err = s
        .every("e", "1s")
        .config(cfg)
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "allow_past",
                ..
            }
        ),
        "{err}"
    );
    // Outside 1970 ..= 5000 (`MAX_AT_MS`) even `allow_past` does not help.
    for at in [i64::MIN, -1, MAX_AT_MS + 1, i64::MAX] {
        let err = s
            .at("far", at)
            .allow_past(true)
            .handler(handler())
            .unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { option: "at", .. }),
            "{at}: {err}"
        );
    }
}

#[test]
fn b03_on_a_claim_only_store_the_grace_is_the_late_limit() {
    let s = Scheduler::claim_only(MemoryStore::new()).build().unwrap();
    let err = s
        .at("once", now_ms() - 120_000)
        .handler(handler())
        .unwrap_err();
    assert!(matches!(err, Error::AtInThePast { .. }), "{err}");
    // On a lease store catch-up (5 minutes by default) may still start it.
    let l = Scheduler::leased(MemoryStore::new()).build().unwrap();
    l.at("once", now_ms() - 120_000).handler(handler()).unwrap();
}

#[tokio::test]
async fn b34_registering_after_stop_is_refused() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    s.every("before", "1s").handler(handler()).unwrap();
    s.start().await.unwrap();
    s.stop(Duration::from_secs(1)).await.unwrap();
    let err = s.every("after", "1s").handler(handler()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::State {
                state: anarchon_core::SchedulerState::Stopped,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("new scheduler"), "{err}");
    // Also when it was never started.
    let idle = Scheduler::leased(MemoryStore::new()).build().unwrap();
    idle.stop(Duration::from_secs(1)).await.unwrap();
    assert!(idle.cron("c", "* * * * *").handler(handler()).is_err());
}

#[test]
fn b37_history_and_attempt_counts_are_bounded() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    let err = s
        .every("e", "1s")
        .history_size(u32::MAX)
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "history_size",
                ..
            }
        ) && text_has(&err, &MAX_HISTORY_SIZE.to_string()),
        "{err}"
    );
    let err = s
        .every("e", "1s")
        .max_attempts(u32::MAX)
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "max_attempts",
                ..
            }
        ),
        "{err}"
    );
    let err = s
        .every("e", "1s")
        .catch_up(CatchUp::All { max: usize::MAX })
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "catch_up",
                ..
            }
        ),
        "{err}"
    );
    let err = s
        .every("e", "1s")
        .history_ttl(Duration::from_millis(u64::MAX))
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "history_ttl",
                ..
            }
        ),
        "{err}"
    );
    let err = s
        .every("e", "1s")
        .offset(Duration::MAX)
        .handler(handler())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "offset",
                ..
            }
        ) && text_has(&err, &Duration::MAX.as_millis().to_string()),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Extreme values everywhere: an error, or a schedule that still fires.

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(999),
        Just(60_000),
        Just(YEAR_MS),
        Just(YEAR_MS + 1),
        Just(MAX_LONG_DURATION.as_millis() as u64),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::MAX - 1),
        Just(u64::MAX),
        any::<u64>(),
        0u64..10_000_000,
    ]
}

fn extreme_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MIN + 1),
        Just(-1),
        Just(0),
        Just(1),
        Just(i64::MAX - 1),
        Just(i64::MAX),
        Just(MAX_AT_MS),
        Just(MAX_AT_MS + 1),
        any::<i64>(),
        -10_000_000i64..10_000_000,
    ]
}

fn extreme_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(MAX_ATTEMPTS),
        Just(MAX_ATTEMPTS + 1),
        Just(MAX_HISTORY_SIZE),
        Just(MAX_HISTORY_SIZE + 1),
        Just(u32::MAX),
        any::<u32>(),
    ]
}

fn extreme_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(" ".to_owned()),
        Just("-1s".to_owned()),
        Just("-9223372036854775808ms".to_owned()),
        Just("9223372036854775807ms".to_owned()),
        Just("18446744073709551615ms".to_owned()),
        Just("99999999999999999999999999d".to_owned()),
        Just("3650d".to_owned()),
        Just("3651d".to_owned()),
        Just("1ms".to_owned()),
        Just("1s".to_owned()),
        Just("9".repeat(400)),
        Just(format!("-{}", "9".repeat(400))),
        Just("1d".repeat(500)),
        Just("* * * * *".to_owned()),
        Just("0/15 2 * * *".to_owned()),
        Just("0 0 */2 * 1".to_owned()),
        Just("0 0 29 2 *".to_owned()),
        Just("0 0 31 4 *".to_owned()),
        Just("59 59 23 31 12 *".to_owned()),
        Just("-1 * * * *".to_owned()),
        Just("* * * * * * * *".to_owned()),
        Just("9999-12-31T23:59:59.999Z".to_owned()),
        Just("10000-01-01T00:00:00Z".to_owned()),
        Just("+262143-12-31T23:59:59Z".to_owned()),
        Just("1969-12-31T23:59:59Z".to_owned()),
        Just("2099-01-01T00:00:00+14:00".to_owned()),
        Just("9223372036854775807".to_owned()),
        Just("Europe/Berlin".to_owned()),
        Just("Etc/GMT+12".to_owned()),
        "\\PC{0,40}",
        "[0-9*/,\\- ]{0,30}",
    ]
}

/// One job, with any option set to an extreme value or left alone.
#[derive(Debug, Clone)]
struct Job {
    kind: Kind,
    jitter: Option<u64>,
    max_late: Option<u64>,
    history_size: Option<u32>,
    timeout: Option<u64>,
    max_attempts: Option<u32>,
    catch_up_ms: Option<u64>,
    catch_up_all: Option<usize>,
    history_ttl: Option<u64>,
    offset: Option<i64>,
    timezone: Option<String>,
    lease: Option<u64>,
    heartbeat: Option<u64>,
}

#[derive(Debug, Clone)]
enum Kind {
    EveryMs(u64),
    EveryText(String),
    EveryDuration(u64, u32),
    Cron(String),
    AtMs(i64),
    AtText(String),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        extreme_u64().prop_map(Kind::EveryMs),
        extreme_text().prop_map(Kind::EveryText),
        (extreme_u64(), any::<u32>()).prop_map(|(s, n)| Kind::EveryDuration(s, n)),
        extreme_text().prop_map(Kind::Cron),
        extreme_i64().prop_map(Kind::AtMs),
        extreme_text().prop_map(Kind::AtText),
    ]
}

/// An option left alone most of the time, so that jobs with one or two extreme options
/// register often enough to be checked for firing.
fn maybe<S: Strategy>(values: S) -> impl Strategy<Value = Option<S::Value>> {
    proptest::option::weighted(0.15, values)
}

fn job() -> impl Strategy<Value = Job> {
    (
        (
            kind(),
            maybe(extreme_u64()),
            maybe(extreme_u64()),
            maybe(extreme_u32()),
            maybe(extreme_u64()),
            maybe(extreme_u32()),
            maybe(extreme_u64()),
        ),
        (
            maybe(prop_oneof![
                Just(0usize),
                Just(1),
                Just(MAX_CATCH_UP_RUNS),
                Just(MAX_CATCH_UP_RUNS + 1),
                Just(usize::MAX),
            ]),
            maybe(extreme_u64()),
            maybe(extreme_i64()),
            maybe(extreme_text()),
            maybe(extreme_u64()),
            maybe(extreme_u64()),
        ),
    )
        .prop_map(
            |(
                (kind, jitter, max_late, history_size, timeout, max_attempts, catch_up_ms),
                (catch_up_all, history_ttl, offset, timezone, lease, heartbeat),
            )| Job {
                kind,
                jitter,
                max_late,
                history_size,
                timeout,
                max_attempts,
                catch_up_ms,
                catch_up_all,
                history_ttl,
                offset,
                timezone,
                lease,
                heartbeat,
            },
        )
}

/// The `at` time of a job, if it is an `at` job with a readable time.
fn at_ms(kind: &Kind) -> Option<i64> {
    let schedule = match kind {
        Kind::AtMs(ms) => anarchon_core::slot::Schedule::at_ms(*ms),
        Kind::AtText(text) => anarchon_core::slot::Schedule::at_str(text).ok()?,
        _ => return None,
    };
    match schedule {
        anarchon_core::slot::Schedule::At { at_ms } => Some(at_ms),
        _ => None,
    }
}

/// Builds a scheduler with the job's scheduler options and registers the job.
fn register(job: &Job) -> Result<Scheduler, Error> {
    let mut builder = Scheduler::leased(MemoryStore::new());
    if let Some(ms) = job.lease {
        builder = builder.lease(Duration::from_millis(ms));
    }
    if let Some(ms) = job.heartbeat {
        builder = builder.heartbeat(Duration::from_millis(ms));
    }
    let s = builder.build()?;
    macro_rules! options {
        ($b:expr) => {{
            let mut b = $b;
            if let Some(v) = job.jitter {
                b = b.jitter(Duration::from_millis(v));
            }
            if let Some(v) = job.max_late {
                b = b.max_late(Duration::from_millis(v));
            }
            if let Some(v) = job.history_size {
                b = b.history_size(v);
            }
            if let Some(v) = job.timeout {
                b = b.timeout(Duration::from_millis(v));
            }
            if let Some(v) = job.max_attempts {
                b = b.max_attempts(v);
            }
            if let Some(v) = job.catch_up_ms {
                b = b.catch_up_window(Duration::from_millis(v));
            }
            if let Some(max) = job.catch_up_all {
                b = b.catch_up(CatchUp::All { max });
            }
            if let Some(v) = job.history_ttl {
                b = b.history_ttl(Duration::from_millis(v));
            }
            b
        }};
    }
    match &job.kind {
        Kind::EveryMs(ms) => {
            let b = options!(s.every("j", *ms));
            let b = match job.offset {
                Some(o) => b.offset(Duration::from_millis(o.unsigned_abs())),
                None => b,
            };
            b.handler(handler())?
        }
        Kind::EveryText(text) => {
            let b = options!(s.every("j", text.as_str()));
            let b = match job.offset {
                Some(o) => b.offset(Duration::from_millis(o.unsigned_abs())),
                None => b,
            };
            b.handler(handler())?
        }
        Kind::EveryDuration(secs, nanos) => {
            options!(s.every("j", Duration::new(*secs, nanos % 1_000_000_000))).handler(handler())?
        }
        Kind::Cron(expression) => {
            let b = options!(s.cron("j", expression));
            let b = match &job.timezone {
                Some(tz) => b.timezone(tz.as_str()),
                None => b,
            };
            b.handler(handler())?
        }
        Kind::AtMs(ms) => options!(s.at("j", *ms)).handler(handler())?,
        Kind::AtText(text) => options!(s.at("j", text.as_str())).handler(handler())?,
    }
    Ok(s)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Whatever the values, registration either fails with an error or leaves a job whose
    /// next slot exists and lies after now.
    #[test]
    fn b39_extreme_options_give_an_error_or_a_schedule_that_fires(job in job()) {
        let before = now_ms();
        match register(&job) {
            Err(e) => {
                // Every refusal says something.
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(s) => {
                let next = s.next_run("j").unwrap();
                // An `at` time just missed is accepted: a late claim or catch-up still starts
                // it, within the late limit or the catch-up window (at most a year).
                let just_missed = at_ms(&job.kind)
                    .is_some_and(|at| at <= before && (before - at) as u64 <= YEAR_MS);
                prop_assert!(
                    next.is_some_and(|t| t.timestamp_millis() > before) || just_missed,
                    "{:?} registered but its next slot is {:?} (now {})", job, next, before
                );
            }
        }
    }

    /// Options that pass validation keep the slot arithmetic far from overflow: a slot
    /// anywhere in 1970..=5000 plus any accepted jitter, late limit, catch-up window or
    /// timeout still fits in i64 ms.
    #[test]
    fn b39_accepted_options_stay_within_their_limits(
        jitter in extreme_u64(),
        max_late in extreme_u64(),
        catch_up in extreme_u64(),
        timeout in proptest::option::of(extreme_u64()),
        ttl in proptest::option::of(extreme_u64()),
        offset in extreme_i64(),
        history_size in extreme_u32(),
        max_attempts in extreme_u32(),
        lease in extreme_u64(),
        heartbeat in extreme_u64(),
    ) {
        let opts = JobOptions {
            jitter: Duration::from_millis(jitter),
            max_late: Duration::from_millis(max_late),
            catch_up_window: Duration::from_millis(catch_up),
            timeout: timeout.map(Duration::from_millis),
            history_ttl: ttl.map(Duration::from_millis),
            offset: Duration::from_millis(offset.unsigned_abs()),
            history_size,
            max_attempts,
            ..JobOptions::default()
        };
        if opts.validate().is_ok() {
            let year = MAX_DURATION.as_millis() as u64;
            prop_assert!(jitter <= max_late && max_late <= year && catch_up <= year);
            prop_assert!(timeout.is_none_or(|t| (1..=year).contains(&t)));
            let long = MAX_LONG_DURATION.as_millis() as u64;
            prop_assert!(ttl.is_none_or(|t| (1..=long).contains(&t)));
            prop_assert!(offset.unsigned_abs() <= long);
            prop_assert!((1..=MAX_HISTORY_SIZE).contains(&history_size));
            prop_assert!((1..=MAX_ATTEMPTS).contains(&max_attempts));
            let widest = jitter + max_late + catch_up + timeout.unwrap_or(0);
            prop_assert!(MAX_AT_MS.checked_add(widest as i64).is_some());
        }
        let timing = LeaseTiming {
            lease: Duration::from_millis(lease),
            heartbeat: Duration::from_millis(heartbeat),
        };
        if timing.validate().is_ok() {
            prop_assert!(heartbeat >= 1 && heartbeat * 2 < lease);
            prop_assert!(u128::from(lease) <= MAX_DURATION.as_millis());
        }
    }
}

#[tokio::test]
async fn b36_history_takes_any_count() {
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    s.every("e", "1h").handler(handler()).unwrap();
    s.start().await.unwrap();
    assert!(s.history("e", usize::MAX).await.unwrap().len() <= 1);
    assert!(s.history("e", 0).await.unwrap().is_empty());
    s.stop(Duration::from_secs(1)).await.unwrap();
}

#[test]
fn b39_a_store_timeout_too_short_for_any_claim_is_refused_naming_why() {
    // 1 ms used to be accepted: every claim's deadline then lay in the past and the job never
    // ran, with every slot reported late and no error.
    for short in [Duration::from_millis(1), Duration::from_millis(49)] {
        let err = Scheduler::leased(MemoryStore::new())
            .store_timeout(short)
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, Error::OutOfRange { option: "store_timeout", allowed, .. }
                if allowed.contains("at least 50ms") && allowed.contains("late")),
            "{err}"
        );
    }
    assert!(
        Scheduler::leased(MemoryStore::new())
            .store_timeout(Duration::from_millis(50))
            .build()
            .is_ok()
    );
}

#[test]
fn s11_a_stall_after_shorter_than_four_watchdog_ticks_is_refused() {
    // 40 ms used to be accepted and health flapped to stalled while the loop was fine.
    let err = Scheduler::leased(MemoryStore::new())
        .stall_after(Duration::from_millis(40))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::OutOfRange { option: "stall_after", allowed, .. }
            if allowed.contains("200ms")),
        "{err}"
    );
    assert!(
        Scheduler::leased(MemoryStore::new())
            .stall_after(Duration::from_millis(200))
            .build()
            .is_ok()
    );
}

#[test]
fn b10_a_standby_delay_from_zero_to_a_year_is_taken_and_a_longer_one_refused() {
    for delay in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs(365 * 86_400),
    ] {
        assert!(
            Scheduler::leased(MemoryStore::new())
                .standby_delay(delay)
                .build()
                .is_ok(),
            "{delay:?}"
        );
    }
    for delay in [Duration::from_secs(365 * 86_400 + 1), Duration::MAX] {
        let err = Scheduler::leased(MemoryStore::new())
            .standby_delay(delay)
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, Error::OutOfRange { option: "standby_delay", allowed, .. }
                if allowed.contains("365 days")),
            "{err}"
        );
    }
}

#[test]
fn b32_an_instance_id_with_a_control_character_is_refused() {
    for id in ["a\0b", "line\nbreak", "esc\u{1b}[31m"] {
        let err = Scheduler::leased(MemoryStore::new())
            .instance_id(id)
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidOption { option: "instance_id", reason }
                if reason.contains("control character")),
            "{err}"
        );
        assert!(
            !err.to_string().contains('\0'),
            "the error shows it escaped"
        );
    }
    assert!(
        Scheduler::leased(MemoryStore::new())
            .instance_id("worker-1 (eu-west)")
            .build()
            .is_ok()
    );
}

#[test]
fn b39_the_same_text_means_the_same_in_the_builder_and_in_job_config() {
    // "0smhd" used to read as zero in JobConfig.
    let err = serde_json::from_str::<JobConfig>(r#"{"jitter": "0smhd"}"#).unwrap_err();
    assert!(err.to_string().contains("0smhd"), "{err}");
    assert_eq!(
        serde_json::from_str::<JobConfig>(r#"{"jitter": "0ms"}"#)
            .unwrap()
            .jitter,
        Some(Duration::ZERO)
    );
    assert!(anarchon_core::options::parse_length("0smhd").is_err());
    // A timezone with surrounding spaces: accepted by both, as by the macros and the CLI.
    let cfg: JobConfig = serde_json::from_str(r#"{"timezone": " Europe/Berlin "}"#).unwrap();
    assert_eq!(cfg.timezone, Some(chrono_tz::Europe::Berlin));
    let s = Scheduler::leased(MemoryStore::new()).build().unwrap();
    s.cron("c", "0 3 * * *")
        .timezone(" Europe/Berlin ")
        .handler(handler())
        .unwrap();
}

#[test]
fn b19_catch_up_in_configuration_takes_a_word_or_an_object_and_explains_a_bad_one() {
    let read = |json: &str| serde_json::from_str::<JobConfig>(json).map(|c| c.catch_up);
    assert_eq!(
        read(r#"{"catchUp": "latest"}"#).unwrap(),
        Some(CatchUp::Latest)
    );
    assert_eq!(read(r#"{"catchUp": "none"}"#).unwrap(), Some(CatchUp::None));
    assert_eq!(
        read(r#"{"catchUp": "all"}"#).unwrap(),
        Some(CatchUp::All {
            max: MAX_CATCH_UP_RUNS
        })
    );
    assert_eq!(
        read(r#"{"catchUp": {"policy": "all", "max": 5}}"#).unwrap(),
        Some(CatchUp::All { max: 5 })
    );
    assert_eq!(
        read(r#"{"catchUp": {"policy": "latest"}}"#).unwrap(),
        Some(CatchUp::Latest)
    );
    for bad in [
        r#"{"catchUp": "sometimes"}"#,
        r#"{"catchUp": {"policy": "all", "max": -1}}"#,
        r#"{"catchUp": {"max": 3}}"#,
        r#"{"catchUp": 3}"#,
    ] {
        let err = read(bad).unwrap_err().to_string();
        assert!(
            err.contains("catchUp") && err.contains("\"latest\""),
            "{bad}: {err}"
        );
        assert!(!err.contains("internally tagged"), "{err}");
    }
}
