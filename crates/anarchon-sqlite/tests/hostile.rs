//! Hostile input on the SQLite store: every option at every extreme is accepted or refused
//! with a typed error (never a panic), and any text a handler returns is recorded.

use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Finish, HistoryStore, JobName, LeaseStore, OwnerWrite, Retention,
};
use anarchon_core::testkit::lease::claim;
use anarchon_core::{Error, RunStatus};
use anarchon_sqlite::{MAX_TIMEOUT, MIN_CALL_TIMEOUT, SqliteOptions, SqliteStore};
use proptest::prelude::*;

/// The durations every option is tried at: 0, 1 ns, typical, just past the limit, huge,
/// `MAX`.
fn extremes() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
        Duration::from_millis(1),
        Duration::from_secs(2),
        MAX_TIMEOUT,
        MAX_TIMEOUT + Duration::from_nanos(1),
        Duration::from_secs(u64::MAX / 2),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        proptest::sample::select(extremes()),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..=40_000_000_000).prop_map(Duration::from_millis),
    ]
}

/// Opens a store on a fresh file with these options and says what happened; panics only
/// if the store did.
fn open(busy: Option<Duration>, call: Option<Duration>, durable: bool) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut options = SqliteOptions::default().durable(durable);
        if let Some(busy) = busy {
            options = options.busy_timeout(busy);
        }
        if let Some(call) = call {
            options = options.call_timeout(call);
        }
        let store = SqliteStore::connect_with(dir.path().join("a.db"), options).await?;
        // A call on the store runs with the options' deadlines.
        let job = JobName::new("bounds").expect("name");
        let now = anarchon_core::store::Store::now(&store).await?;
        store.claim(&claim(&job, 1_000, "i1", now)).await?;
        anarchon_core::store::Store::close(&store).await?;
        Ok(())
    })
}

fn expect_out_of_range(r: Result<(), Error>, option: &str) {
    match r {
        Err(Error::OutOfRange {
            option: o,
            ref value,
            ref allowed,
        }) if o == option => {
            assert!(!value.is_empty() && allowed.contains("to"), "{r:?}");
        }
        other => panic!("{option}: expected OutOfRange, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// [issue 22] `busy_timeout` and `call_timeout` at 0, 1 ns, typical, huge and `MAX`:
    /// a value in range opens a working store, one outside is `OutOfRange` naming the
    /// option; nothing panics (`busy_timeout + 5 s` and a call deadline of now + `MAX` used
    /// to overflow).
    #[test]
    fn b43_every_timeout_is_accepted_or_refused_by_name(
        busy in proptest::option::of(any_duration()),
        call in proptest::option::of(any_duration()),
        durable in any::<bool>(),
    ) {
        let r = open(busy, call, durable);
        let busy_ok = busy.is_none_or(|b| b <= MAX_TIMEOUT);
        let call_ok = call.is_none_or(|c| (MIN_CALL_TIMEOUT..=MAX_TIMEOUT).contains(&c));
        if !busy_ok {
            expect_out_of_range(r, "busy_timeout");
        } else if !call_ok {
            expect_out_of_range(r, "call_timeout");
        } else {
            match r {
                Ok(()) => {}
                // A 1 ms call may time out on a busy machine: a typed answer.
                Err(Error::Timeout { .. }) if call.is_some_and(|c| c < Duration::from_secs(1)) => {}
                Err(e) => panic!("busy {busy:?} call {call:?}: {e:?}"),
            }
        }
    }
}

/// The extremes one by one, so a failure names the value.
#[test]
fn b43_each_extreme_of_each_timeout() {
    for d in extremes() {
        let busy = open(Some(d), None, false);
        if d <= MAX_TIMEOUT {
            assert!(busy.is_ok(), "busy_timeout {d:?}: {busy:?}");
        } else {
            expect_out_of_range(busy, "busy_timeout");
        }
        let call = open(None, Some(d), false);
        if (MIN_CALL_TIMEOUT..=MAX_TIMEOUT).contains(&d) {
            assert!(
                call.is_ok() || matches!(call, Err(Error::Timeout { .. })),
                "call_timeout {d:?}: {call:?}"
            );
        } else {
            expect_out_of_range(call, "call_timeout");
        }
    }
}

/// Odd paths and table prefixes are refused with a typed error, never a panic.
#[tokio::test(flavor = "multi_thread")]
async fn b43_odd_paths_and_prefixes_are_refused_by_type() {
    let dir = tempfile::tempdir().expect("temp dir");
    for table in [
        "",
        "a\0b",
        "x\"; DROP TABLE y; --",
        "\u{202e}runs",
        &"a".repeat(10_000),
    ] {
        let r = SqliteStore::connect_with(
            dir.path().join("t.db"),
            SqliteOptions::default().table(table),
        )
        .await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidOption {
                    option: "table",
                    ..
                })
            ),
            "{table:?}: {r:?}"
        );
    }
    let nul = dir.path().join("a\0b.db");
    let r = SqliteStore::connect(&nul).await;
    assert!(
        matches!(
            r,
            Err(Error::Unavailable { .. } | Error::InvalidOption { .. })
        ),
        "{r:?}"
    );
}

/// The texts a handler may fail with: NUL, other control characters, escapes, quotes,
/// bidi overrides, emoji, a long one.
fn odd_errors() -> Vec<String> {
    vec![
        "boom\0after the NUL".to_owned(),
        "\0".to_owned(),
        "esc \u{1b}[31mred\u{1b}[0m bell \u{7} osc \u{1b}]0;title\u{7}".to_owned(),
        "quotes ' \" \\ ; -- /* */ $1 ?1".to_owned(),
        "bidi \u{202e}txt.exe and emoji 😀 and CRLF\r\n".to_owned(),
        "x".repeat(100_000),
    ]
}

/// [issue 22] A handler error with a NUL byte (or any other text) is recorded as given:
/// SQLite keeps text with its length, so nothing is replaced. Through `finish` and
/// `finish_many`, read back by `history`.
#[tokio::test(flavor = "multi_thread")]
async fn b36_a_handler_error_with_nul_is_recorded_faithfully() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::connect(dir.path().join("t.db"))
        .await
        .expect("store");
    let job = JobName::new("text").expect("name");
    let now = anarchon_core::store::Store::now(&store).await.unwrap();
    for (i, error) in odd_errors().into_iter().enumerate() {
        let slot = 1_000 * (i as i64 + 1);
        let ClaimOutcome::Won(lease) = store.claim(&claim(&job, slot, "i1", now)).await.unwrap()
        else {
            panic!("claim of {slot}");
        };
        let finish = Finish {
            status: RunStatus::Failed,
            error: Some(error.clone()),
            retention: Retention::default(),
        };
        let written = if i % 2 == 0 {
            store.finish(&lease, &finish).await
        } else {
            store
                .finish_many(&[(lease, finish)])
                .await
                .map(|mut v| v.remove(0))
        };
        assert_eq!(written.expect("finish"), OwnerWrite::Done, "{error:?}");
        let history = store.history(&job, 100).await.expect("history");
        let rec = history.iter().find(|r| r.slot == slot).expect("record");
        assert_eq!(rec.status, RunStatus::Failed);
        assert_eq!(rec.error.as_deref(), Some(error.as_str()));
    }
}

/// An instance id with a NUL byte is text like any other on SQLite: claims and finishes
/// work and the history shows it.
#[tokio::test(flavor = "multi_thread")]
async fn b43_an_instance_id_with_nul_still_claims() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::connect(dir.path().join("t.db"))
        .await
        .expect("store");
    let job = JobName::new("owner").expect("name");
    let now = anarchon_core::store::Store::now(&store).await.unwrap();
    let ClaimOutcome::Won(lease) = store
        .claim(&claim(&job, 1_000, "host\0evil", now))
        .await
        .unwrap()
    else {
        panic!("claim");
    };
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(store.finish(&lease, &done).await.unwrap(), OwnerWrite::Done);
    let history = store.history(&job, 10).await.unwrap();
    assert_eq!(history[0].instance_id, "host\0evil");
}
