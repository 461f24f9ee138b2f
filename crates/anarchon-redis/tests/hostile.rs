//! Hostile input on the Redis stores: every option and constructor at 0, 1 ns, typical,
//! huge and `MAX` (accepted, or refused with a typed error naming the option; never a
//! panic), the limits themselves against the real server, and handler error text with NUL,
//! control and bidi characters or of any size recorded as it was (or cut, saying so).
// The test-only `unconnected` constructors (feature `testkit`) build a store without
// connecting: what the proptest
// needs to reach the client builder with every option.

mod common;

use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, ClaimStore, Error, Finish, HistoryStore, LeaseClaim, LeaseStore, Overlap,
    Prepare, Reason, Retention, RunKey, RunRecord, RunStatus, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_redis::fred::prelude::{Builder, Config};
use anarchon_redis::{RedisClaimStore, RedisError, RedisOptions, RedisStore, Strategy};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

fn durations() -> impl proptest::strategy::Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_micros(999)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(2)),
        Just(Duration::from_secs(3600)),
        Just(Duration::from_secs(3601)),
        Just(Duration::from_millis(u64::from(u32::MAX) + 1)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_millis),
    ]
}

fn lens() -> impl proptest::strategy::Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(1000),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn prefixes() -> impl proptest::strategy::Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("anarchon:".to_owned()),
        Just("{x}".to_owned()),
        Just("nul\0:".to_owned()),
        Just("esc\x1b:".to_owned()),
        Just("a".repeat(256)),
        Just("a".repeat(257)),
        "[a-z:]{0,20}",
        any::<String>(),
    ]
}

/// The option a validation error names.
fn named(err: &RedisError) -> &'static str {
    match err {
        RedisError::OutOfRange { option, .. } | RedisError::InvalidOption { option, .. } => option,
        RedisError::InvalidPrefix { .. } => "prefix",
        other => panic!("not an option error: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every option at the extremes through every constructor that builds without
    /// connecting (`unconnected` of both stores, `from_client`): Ok, or a typed error
    /// naming the first option out of range, never a panic.
    #[test]
    fn every_option_is_accepted_or_refused_by_name(
        (prefix, cmd, conn, min, max, len) in
            (prefixes(), durations(), durations(), durations(), durations(), lens())
    ) {
        let opts = RedisOptions::default()
            .prefix(prefix.clone())
            .command_timeout(cmd)
            .connect_timeout(conn)
            .reconnect_delay(min, max)
            .stream_max_len(len);
        let t = |v: Duration| (RedisOptions::MIN_TIMEOUT..=RedisOptions::MAX_TIMEOUT).contains(&v);
        let want = if prefix.contains(['{', '}']) || prefix.contains(char::is_control)
            || prefix.len() > RedisOptions::MAX_PREFIX_BYTES
        {
            Some("prefix")
        } else if !t(cmd) {
            Some("command_timeout")
        } else if !t(conn) {
            Some("connect_timeout")
        } else if !t(min) {
            Some("reconnect_delay (min)")
        } else if !t(max) || max < min {
            Some("reconnect_delay (max)")
        } else if !(1..=RedisOptions::MAX_STREAM_MAX_LEN).contains(&len) {
            Some("stream_max_len")
        } else {
            None
        };
        let check = |r: Result<(), RedisError>| -> Result<(), TestCaseError> {
            match (r, want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => {
                    prop_assert_eq!(named(&e), w, "{}", e);
                    if let RedisError::OutOfRange { value, allowed, .. } = &e {
                        prop_assert!(!value.is_empty() && !allowed.is_empty(), "{}", e);
                    }
                    let core: Error = e.into();
                    let is_option_error =
                        matches!(core, Error::OutOfRange { .. } | Error::InvalidOption { .. });
                    prop_assert!(is_option_error, "{:?}", core);
                }
                (got, want) => prop_assert!(false, "gave {:?}, expected {:?}", got, want),
            }
            Ok(())
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = rt.enter();
        check(opts.validate())?;
        let url = "redis://127.0.0.1:1";
        check(RedisStore::unconnected(url, opts.clone()).map(|_| ()))?;
        for strategy in [Strategy::StreamId, Strategy::Idmp, Strategy::Script] {
            check(RedisClaimStore::unconnected(url, strategy, opts.clone()).map(|_| ()))?;
        }
        // `from_client` checks the server at once: with options out of range it must
        // refuse before that, naming the option.
        if let Some(w) = want {
            let client = Builder::from_config(Config::from_url(url).unwrap()).build().unwrap();
            match rt.block_on(RedisStore::from_client(client, opts)) {
                Err(Error::OutOfRange { option, .. } | Error::InvalidOption { option, .. }) => {
                    prop_assert_eq!(option, w);
                }
                other => prop_assert!(false, "from_client gave {:?}", other.map(|_| ())),
            }
        }
    }
}

/// The case of the issue: `command_timeout(Duration::MAX)` was accepted and every script
/// refused its call as late (the deadline wrapped into the past). It and the other
/// overflows are now errors naming the option, the value and the range.
#[test]
fn the_reported_overflows_are_typed_errors() {
    let cases = [
        (
            RedisOptions::default().command_timeout(Duration::MAX),
            "command_timeout",
        ),
        (
            RedisOptions::default().connect_timeout(Duration::MAX),
            "connect_timeout",
        ),
        (
            RedisOptions::default().reconnect_delay(Duration::from_millis(100), Duration::MAX),
            "reconnect_delay (max)",
        ),
        (
            RedisOptions::default().stream_max_len(u64::MAX),
            "stream_max_len",
        ),
    ];
    for (opts, option) in cases {
        let err = opts.validate().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, RedisError::OutOfRange { .. }), "{err:?}");
        assert!(text.contains(option), "{text}");
    }
}

fn prep(job: &anarchon_core::JobName) -> Prepare {
    Prepare {
        jobs: vec![job.clone()],
        instance_id: "i".into(),
        call_timeout: Duration::from_secs(5),
    }
}

/// The largest values work on the server: with the longest command timeout a lease claim
/// wins and its finish is written (the deadline the scripts check is in the future), and
/// the claim streams take `MAXLEN ~ i64::MAX`.
#[tokio::test]
async fn the_limits_work_on_the_server() {
    let Some(url) = server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    let opts = common::options()
        .command_timeout(RedisOptions::MAX_TIMEOUT)
        .connect_timeout(RedisOptions::MAX_TIMEOUT)
        .reconnect_delay(RedisOptions::MAX_TIMEOUT, RedisOptions::MAX_TIMEOUT)
        .stream_max_len(RedisOptions::MAX_STREAM_MAX_LEN);
    let store = RedisStore::connect_with(&url, opts.clone()).await.unwrap();
    let job = unique_job("limits");
    store.prepare(&prep(&job)).await.unwrap();
    let now = store.now().await.unwrap();
    let lease = match store.claim(&lease_claim(&job, now)).await.unwrap() {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("the claim did not win: {other:?}"),
    };
    store
        .finish(&lease, &finish(Some("boom".into())))
        .await
        .unwrap();
    assert_eq!(
        store.history(&job, 1).await.unwrap()[0].status,
        RunStatus::Failed
    );
    store.close().await.unwrap();
    let claims = RedisClaimStore::connect_with(&url, Strategy::StreamId, opts)
        .await
        .unwrap();
    claims.prepare(&prep(&job)).await.unwrap();
    let won = claims
        .claim_slot(&SlotClaim {
            run: RunKey::new(job.clone(), now + 1),
            instance_id: "i".into(),
            not_after: now + 60_000,
        })
        .await
        .unwrap();
    assert_eq!(won, SlotOutcome::Won);
    claims.close().await.unwrap();
}

fn lease_claim(job: &anarchon_core::JobName, now: i64) -> LeaseClaim {
    LeaseClaim {
        scheduled_at: now,
        run: RunKey::new(job.clone(), now),
        instance_id: "i".into(),
        lease_ms: 5_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

fn finish(error: Option<String>) -> Finish {
    Finish {
        status: if error.is_some() {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        },
        error,
        retention: Retention::default(),
    }
}

const HOSTILE: &str = "nul:\0 esc:\x1b[31m osc:\x1b]0;title\x07 bell:\x07 crlf:\r\n \
                       rlo:\u{202e}txt bom:\u{feff} nonchar:\u{ffff} astral:\u{1f600} del:\x7f \
                       \\u0000 %00 \"q\"";

/// Text is data: an error text with NUL, escape, bell, CR/LF, bidi and non-BMP characters
/// comes back from the history exactly, through the lease store's finish and a claim-only
/// store's record; one of 1 MiB is kept up to 64 KiB and says it was cut.
#[tokio::test]
async fn handler_error_text_is_recorded_as_given_or_cut_saying_so() {
    let Some(url) = server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    let huge = "é".repeat(512 * 1024); // 1 MiB
    let check_cut = |cut: &str| {
        assert!(cut.len() < 70 * 1024, "{}", cut.len());
        assert!(cut.starts_with(&"é".repeat(1000)));
        assert!(
            cut.contains("more bytes cut") && cut.contains("65536"),
            "{}",
            &cut[cut.len() - 120..]
        );
    };
    let store = RedisStore::connect_with(&url, common::options())
        .await
        .unwrap();
    let job = unique_job("text");
    store.prepare(&prep(&job)).await.unwrap();
    let now = store.now().await.unwrap();
    for (slot, text) in [(now, HOSTILE.to_owned()), (now + 1, huge.clone())] {
        let ClaimOutcome::Won(lease) = store.claim(&lease_claim(&job, slot)).await.unwrap() else {
            panic!("the claim of {slot} did not win");
        };
        store.finish(&lease, &finish(Some(text))).await.unwrap();
    }
    let history = store.history(&job, 10).await.unwrap();
    let error_of = |slot| {
        history
            .iter()
            .find(|r| r.slot == slot)
            .and_then(|r| r.error.clone())
            .unwrap()
    };
    assert_eq!(error_of(now), HOSTILE);
    check_cut(&error_of(now + 1));
    store.close().await.unwrap();

    let claims = RedisClaimStore::connect_with(&url, Strategy::Script, common::options())
        .await
        .unwrap();
    claims.prepare(&prep(&job)).await.unwrap();
    for (slot, text) in [(1_000, HOSTILE.to_owned()), (2_000, huge)] {
        let record = RunRecord {
            job: job.clone(),
            slot,
            scheduled_at: slot,
            instance_id: "i".into(),
            manual: false,
            attempt: 1,
            reason: Reason::Scheduled,
            status: RunStatus::Failed,
            fence: 0,
            started_at: slot,
            finished_at: Some(slot + 1),
            error: Some(text),
        };
        claims.record(&record, Retention::default()).await.unwrap();
    }
    let history = claims.history(&job, 10).await.unwrap();
    let error_of = |slot| {
        history
            .iter()
            .find(|r| r.slot == slot)
            .and_then(|r| r.error.clone())
            .unwrap()
    };
    assert_eq!(error_of(1_000), HOSTILE);
    check_cut(&error_of(2_000));
    claims.close().await.unwrap();
}
