//! Hostile input on the NATS store: every option and constructor at 0, 1 ns, typical, huge
//! and `MAX` (accepted, or refused with a typed error naming the option; never a panic),
//! the limits themselves against a real server, handler error text with NUL, control and
//! bidi characters or of any size recorded as it was (or cut, saying so), and a record the
//! server refuses for its size reported as `OutOfRange` at once, not retried.

use std::time::Duration;

use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim};
use anarchon_core::store::{SlotOutcome, Store};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, JobName, Reason, RunStatus};
use anarchon_nats::{NatsError, NatsOptions, NatsStore, Storage};
use anarchon_test_support::OwnNats;
use proptest::prelude::*;

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(1)),
        Just(Duration::from_secs(5)),
        Just(Duration::from_secs(300)),
        Just(Duration::from_secs(3600)),
        Just(Duration::from_secs(365 * 86_400)),
        Just(Duration::from_secs(365 * 86_400 + 1)),
        Just(Duration::from_secs(u64::MAX / 2)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_millis),
    ]
}

fn prefixes() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("anarchon".to_owned()),
        Just("a".repeat(64)),
        Just("a".repeat(65)),
        Just("a.b".to_owned()),
        Just("a>".to_owned()),
        Just("nul\0".to_owned()),
        "[a-zA-Z0-9_\\-]{1,70}",
        any::<String>(),
    ]
}

/// The option a validation error names.
fn named(err: &NatsError) -> &'static str {
    match err {
        NatsError::OutOfRange { option, .. } | NatsError::InvalidOption { option, .. } => option,
        other => panic!("not an option error: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every option at the extremes: `validate` and `connect_with` give Ok or a typed error
    /// naming the first option out of range (with its value and the range), never a panic.
    /// A valid set goes on to connect to a closed port and gets `Connect`.
    #[test]
    fn every_option_is_accepted_or_refused_by_name(
        (prefix, window, memory, op, conn) in
            (prefixes(), durations(), any::<bool>(), durations(), durations())
    ) {
        let opts = NatsOptions::default()
            .prefix(prefix.clone())
            .duplicate_window(window)
            .storage(if memory { Storage::Memory } else { Storage::File })
            .operation_timeout(op)
            .connect_timeout(conn);
        let prefix_ok = (1..=64).contains(&prefix.len())
            && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let t = |v: Duration| (NatsOptions::MIN_TIMEOUT..=NatsOptions::MAX_TIMEOUT).contains(&v);
        let want = if !prefix_ok {
            Some("prefix")
        } else if !(NatsOptions::MIN_DUPLICATE_WINDOW..=NatsOptions::MAX_DUPLICATE_WINDOW)
            .contains(&window)
        {
            Some("duplicate_window")
        } else if !t(op) {
            Some("operation_timeout")
        } else if !t(conn) {
            Some("connect_timeout")
        } else {
            None
        };
        match (opts.validate(), want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) => {
                prop_assert_eq!(named(&e), w, "{}", e);
                if let NatsError::OutOfRange { value, allowed, .. } = &e {
                    prop_assert!(!value.is_empty() && allowed.starts_with("from"), "{}", e);
                }
                let core: Error = e.into();
                let is_option_error =
                    matches!(core, Error::OutOfRange { .. } | Error::InvalidOption { .. });
                prop_assert!(is_option_error, "{:?}", core);
            }
            (got, want) => prop_assert!(false, "validate gave {:?}, expected {:?}", got, want),
        }
        let port = anarchon_test_support::spare_port();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // A short connect timeout keeps valid sets quick; the value under test was checked
        // above, and below it goes through `connect_with` as given when it is refused.
        let opts = if want.is_none() { opts.connect_timeout(Duration::from_millis(500)) } else { opts };
        let r = rt.block_on(NatsStore::connect_with(&format!("nats://127.0.0.1:{port}"), opts));
        match (r, want) {
            (Err(NatsError::Connect { .. }), None) => {}
            (Err(e), Some(w)) => prop_assert_eq!(named(&e), w),
            (other, _) => prop_assert!(false, "connect_with gave {:?}", other.map(|_| ())),
        }
    }
}

/// The case of the issue: `connect_timeout(Duration::MAX)` panicked (`* 2`); every timeout
/// at `MAX` is now an error naming it, its value and the range.
#[test]
fn the_reported_overflows_are_typed_errors() {
    let cases = [
        (
            NatsOptions::default().connect_timeout(Duration::MAX),
            "connect_timeout",
        ),
        (
            NatsOptions::default().operation_timeout(Duration::MAX),
            "operation_timeout",
        ),
        (
            NatsOptions::default().duplicate_window(Duration::MAX),
            "duplicate_window",
        ),
    ];
    for (opts, option) in cases {
        let err = opts.validate().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, NatsError::OutOfRange { .. }), "{err:?}");
        assert!(text.contains(option) && text.contains("from "), "{text}");
    }
}

fn record(job: &JobName, slot: i64, instance: &str, error: Option<String>) -> RunRecord {
    RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: instance.into(),
        manual: false,
        attempt: 1,
        reason: Reason::Scheduled,
        status: if error.is_some() {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        },
        fence: 0,
        started_at: slot,
        finished_at: Some(slot + 1),
        error,
    }
}

fn prep(job: &JobName) -> Prepare {
    Prepare {
        jobs: vec![job.clone()],
        instance_id: "i".into(),
        call_timeout: Duration::from_secs(5),
    }
}

/// The largest and smallest values of every bounded option work on the server: a stream
/// with the longest and the shortest duplicate window is created and claims, records and
/// history work with the longest timeouts.
#[tokio::test]
async fn the_limits_work_on_the_server() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    for window in [
        NatsOptions::MAX_DUPLICATE_WINDOW,
        NatsOptions::MIN_DUPLICATE_WINDOW,
    ] {
        let prefix = format!("anarchon-test-{:016x}", rand::random::<u64>());
        let opts = NatsOptions::default()
            .prefix(&prefix)
            .duplicate_window(window)
            .storage(Storage::Memory)
            .operation_timeout(NatsOptions::MAX_TIMEOUT)
            .connect_timeout(NatsOptions::MAX_TIMEOUT);
        let store = NatsStore::connect_with(&url, opts).await.unwrap();
        let job = unique_job("limits");
        store.prepare(&prep(&job)).await.unwrap();
        let now = store.now().await.unwrap();
        let won = store
            .claim_slot(&SlotClaim {
                run: RunKey::new(job.clone(), now),
                instance_id: "i".into(),
                not_after: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(won, SlotOutcome::Won, "window {window:?}");
        store
            .record(&record(&job, now, "i", None), Retention::default())
            .await
            .unwrap();
        assert_eq!(store.history(&job, 10).await.unwrap().len(), 1);
        delete_stream(&store, &prefix).await;
        store.close().await.unwrap();
    }
}

/// Deletes a stream a test made on the shared server.
async fn delete_stream(store: &NatsStore, name: &str) {
    let js = anarchon_nats::async_nats::jetstream::new(store.client().clone());
    let _ = js.delete_stream(name).await;
}

const HOSTILE: &str = "nul:\0 esc:\x1b[31m osc:\x1b]0;title\x07 bell:\x07 crlf:\r\n \
                       rlo:\u{202e}txt bom:\u{feff} nonchar:\u{ffff} astral:\u{1f600} del:\x7f \
                       \\u0000 %00 \"q\"";

/// Text is data: an error text with NUL, escape, bell, CR/LF, bidi and non-BMP characters
/// comes back from the history exactly; one of 1 MiB is kept up to 64 KiB and says it was
/// cut. Neither is retried or refused.
#[tokio::test]
async fn handler_error_text_is_recorded_as_given_or_cut_saying_so() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let prefix = format!("anarchon-test-{:016x}", rand::random::<u64>());
    let store = NatsStore::connect_with(
        &url,
        NatsOptions::default()
            .prefix(&prefix)
            .storage(Storage::Memory),
    )
    .await
    .unwrap();
    let job = unique_job("text");
    store.prepare(&prep(&job)).await.unwrap();
    let huge = "é".repeat(512 * 1024); // 1 MiB
    store
        .record(
            &record(&job, 1_000, "i", Some(HOSTILE.into())),
            Retention::default(),
        )
        .await
        .unwrap();
    store
        .record(&record(&job, 2_000, "i", Some(huge)), Retention::default())
        .await
        .unwrap();
    let history = store.history(&job, 10).await.unwrap();
    let by_slot = |slot| {
        history
            .iter()
            .find(|r| r.slot == slot)
            .and_then(|r| r.error.clone())
            .unwrap()
    };
    assert_eq!(by_slot(1_000), HOSTILE);
    let cut = by_slot(2_000);
    assert!(cut.len() < 70 * 1024, "{}", cut.len());
    assert!(cut.starts_with(&"é".repeat(1000)));
    assert!(
        cut.contains("more bytes cut"),
        "{}",
        &cut[cut.len() - 120..]
    );
    delete_stream(&store, &prefix).await;
    store.close().await.unwrap();
}

/// An instance id too long for a record's subject (which holds it hex-encoded) is refused
/// with `OutOfRange` naming `instance_id`, instead of a subject beyond the server's control
/// line, for which the server drops the connection; the store goes on working.
#[tokio::test]
async fn an_instance_id_too_long_for_a_subject_is_refused_and_the_connection_lives() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let prefix = format!("anarchon-test-{:016x}", rand::random::<u64>());
    let store = NatsStore::connect_with(
        &url,
        NatsOptions::default()
            .prefix(&prefix)
            .storage(Storage::Memory)
            .operation_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let job = unique_job("long-id");
    store.prepare(&prep(&job)).await.unwrap();
    let err = store
        .record(
            &record(&job, 1_000, &"i".repeat(3000), None),
            Retention::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                option: "instance_id",
                ..
            }
        ),
        "{err:?}"
    );
    store
        .record(
            &record(&job, 2_000, &"i".repeat(1000), None),
            Retention::default(),
        )
        .await
        .unwrap();
    assert_eq!(store.history(&job, 10).await.unwrap().len(), 1);
    delete_stream(&store, &prefix).await;
    store.close().await.unwrap();
}

/// On a server with a small `max_payload` (1 KiB) a 64 KiB error text is cut further to
/// fit and recorded, saying so; a record that cannot fit at all (an instance id of 1400
/// bytes) is refused at once with `OutOfRange` naming the server's limit, not retried.
#[tokio::test]
async fn a_record_too_large_for_the_server_is_cut_to_fit_or_refused_at_once() {
    let dir =
        std::env::temp_dir().join(format!("anarchon-nats-conf-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("small.conf");
    std::fs::write(&conf, "max_payload: 1024\n").unwrap();
    let Some(server) = OwnNats::start(&["-js", "-c", conf.to_str().unwrap()]) else {
        return;
    };
    let store = NatsStore::connect_with(&server.url(), NatsOptions::default())
        .await
        .unwrap();
    let job = unique_job("payload");
    store.prepare(&prep(&job)).await.unwrap();
    store
        .record(
            &record(&job, 1_000, "i", Some("x".repeat(64 * 1024))),
            Retention::default(),
        )
        .await
        .unwrap();
    let history = store.history(&job, 10).await.unwrap();
    let text = history[0].error.clone().unwrap();
    assert!(text.len() < 1024, "{}", text.len());
    assert!(text.contains("more bytes cut"), "{text}");
    let began = std::time::Instant::now();
    let err = store
        .record(
            &record(&job, 2_000, &"i".repeat(1400), None),
            Retention::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutOfRange { .. }), "{err:?}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("1024"), "{err}");
    assert!(began.elapsed() < Duration::from_secs(2));
    store.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
