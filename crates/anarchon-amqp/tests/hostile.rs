//! Hostile input on the RabbitMQ store: every option and constructor at 0, 1 ns, typical,
//! huge and `MAX` (accepted, or refused with a typed error naming the option; never a
//! panic), the limits themselves against the real server, and handler error text with NUL,
//! control and bidi characters or of any size recorded as it was (or cut, saying so).

use std::time::Duration;

use anarchon_amqp::{AmqpError, AmqpOptions, AmqpStore};
use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim};
use anarchon_core::store::{SlotOutcome, Store};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, Reason, RunStatus};
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
        Just(Duration::from_millis(u64::from(u32::MAX))),
        Just(Duration::from_millis(u64::from(u32::MAX) + 1)),
        Just(Duration::from_secs(100 * 365 * 86_400)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_millis),
    ]
}

fn sizes() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(64 * 1024 - 1),
        Just(64 * 1024),
        Just(8 << 20),
        Just(1 << 40),
        Just((1 << 40) + 1),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn prefixes() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("anarchon".to_owned()),
        Just("a".repeat(64)),
        Just("a".repeat(65)),
        Just("a.b".to_owned()),
        Just("nul\0".to_owned()),
        Just("é".to_owned()),
        "[a-zA-Z0-9_\\-]{1,70}",
        any::<String>(),
    ]
}

/// The option a validation error names.
fn named(err: &AmqpError) -> &'static str {
    match err {
        AmqpError::OutOfRange { option, .. } | AmqpError::InvalidOption { option, .. } => option,
        other => panic!("not an option error: {other:?}"),
    }
}

/// What each option must do by itself, from the documented bounds.
fn expected(opts: &AmqpOptions, d: &Set) -> Option<&'static str> {
    let p = opts.queue_prefix();
    let prefix_ok = (1..=64).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let t = |v: Duration| (AmqpOptions::MIN_TIMEOUT..=AmqpOptions::MAX_TIMEOUT).contains(&v);
    if !prefix_ok {
        Some("prefix")
    } else if !(AmqpOptions::MIN_SLOT_TTL..=AmqpOptions::MAX_SLOT_TTL).contains(&d.ttl) {
        Some("slot_ttl")
    } else if !(AmqpOptions::MIN_HISTORY_MAX_BYTES..=AmqpOptions::MAX_HISTORY_MAX_BYTES)
        .contains(&d.bytes)
    {
        Some("history_max_bytes")
    } else if !t(d.op) {
        Some("operation_timeout")
    } else if !t(d.conn) {
        Some("connect_timeout")
    } else if d.ttl <= d.op {
        Some("slot_ttl")
    } else {
        None
    }
}

/// The values given to the options (their fields are private).
struct Set {
    ttl: Duration,
    bytes: u64,
    op: Duration,
    conn: Duration,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every option at the extremes: `validate` and both constructors give Ok or a typed
    /// error naming the first option out of range (with its value and the range), never a
    /// panic. A valid set goes on to connect to a closed port and gets `Connect`.
    #[test]
    fn every_option_is_accepted_or_refused_by_name(
        (prefix, ttl, bytes, durable, op, conn) in
            (prefixes(), durations(), sizes(), any::<bool>(), durations(), durations())
    ) {
        let opts = AmqpOptions::default()
            .prefix(prefix)
            .slot_ttl(ttl)
            .history_max_bytes(bytes)
            .durable_gates(durable)
            .operation_timeout(op)
            .connect_timeout(conn);
        let want = expected(&opts, &Set { ttl, bytes, op, conn });
        match (opts.validate(), want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) => {
                prop_assert_eq!(named(&e), w, "{}", e);
                if let AmqpError::OutOfRange { value, allowed, .. } = &e {
                    prop_assert!(!value.is_empty() && (allowed.starts_with("from") || allowed.starts_with("longer than")), "{}", e);
                }
                let core: Error = e.into();
                let is_option_error =
                    matches!(core, Error::OutOfRange { .. } | Error::InvalidOption { .. });
                prop_assert!(is_option_error, "{:?}", core);
            }
            (got, want) => prop_assert!(false, "validate gave {:?}, expected {:?}", got, want),
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(AmqpStore::connect_with(
            &format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            opts,
        ));
        match (r, want) {
            (Err(AmqpError::Connect { .. }), None) => {}
            (Err(e), Some(w)) => prop_assert_eq!(named(&e), w),
            (other, _) => prop_assert!(false, "connect_with gave {:?}", other.map(|_| ())),
        }
    }
}

/// The cases of the issue: each names the option, the value and the range.
#[test]
fn the_reported_overflows_are_typed_errors() {
    let cases = [
        (
            AmqpOptions::default().operation_timeout(Duration::MAX),
            "operation_timeout",
        ),
        (
            AmqpOptions::default().connect_timeout(Duration::MAX),
            "connect_timeout",
        ),
        (
            AmqpOptions::default().history_max_bytes(u64::MAX),
            "history_max_bytes",
        ),
        (AmqpOptions::default().slot_ttl(Duration::MAX), "slot_ttl"),
        (
            AmqpOptions::default().operation_timeout(Duration::from_nanos(1)),
            "operation_timeout",
        ),
    ];
    for (opts, option) in cases {
        let err = opts.validate().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, AmqpError::OutOfRange { .. }), "{err:?}");
        assert!(text.contains(option) && text.contains("from "), "{text}");
    }
    let err = AmqpOptions::default()
        .slot_ttl(Duration::from_secs(5))
        .operation_timeout(Duration::from_secs(5))
        .validate()
        .unwrap_err();
    assert!(
        matches!(
            err,
            AmqpError::OutOfRange {
                option: "slot_ttl",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("operation_timeout"), "{err}");
    let text = AmqpOptions::default()
        .history_max_bytes(u64::MAX)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(text.contains("18446744073709551615"), "{text}");
}

fn record(job: &anarchon_core::JobName, slot: i64, error: Option<String>) -> RunRecord {
    RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: "i".into(),
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

/// The largest and smallest values of every bounded option are accepted by RabbitMQ: the
/// gate queue takes `x-expires` = `MAX_SLOT_TTL`, the stream takes `MAX_HISTORY_MAX_BYTES`
/// (and its segment size), the longest timeouts work. (A slot TTL must also outlive a
/// claim, `operation_timeout`: see `the_reported_overflows_are_typed_errors`.)
#[tokio::test]
async fn the_limits_work_on_the_server() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    for (ttl, bytes, op) in [
        (
            AmqpOptions::MAX_SLOT_TTL,
            AmqpOptions::MAX_HISTORY_MAX_BYTES,
            AmqpOptions::MAX_TIMEOUT,
        ),
        (
            AmqpOptions::MIN_SLOT_TTL,
            AmqpOptions::MIN_HISTORY_MAX_BYTES,
            Duration::from_millis(900),
        ),
    ] {
        let prefix = format!("anarchon-test-{:016x}", rand::random::<u64>());
        let opts = AmqpOptions::default()
            .prefix(&prefix)
            .slot_ttl(ttl)
            .history_max_bytes(bytes)
            .operation_timeout(op)
            .connect_timeout(AmqpOptions::MAX_TIMEOUT);
        let store = AmqpStore::connect_with(&url, opts).await.unwrap();
        let job = unique_job("limits");
        store
            .prepare(&Prepare {
                jobs: vec![job.clone()],
                instance_id: "i".into(),
                call_timeout: Duration::from_secs(5),
            })
            .await
            .unwrap();
        let now = store.now().await.unwrap();
        let won = store
            .claim_slot(&SlotClaim {
                run: RunKey::new(job.clone(), now),
                instance_id: "i".into(),
                not_after: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(won, SlotOutcome::Won, "ttl {ttl:?}");
        store
            .record(&record(&job, now, None), Retention::default())
            .await
            .unwrap();
        assert_eq!(store.history(&job, 10).await.unwrap().len(), 1);
        store.close().await.unwrap();
        common::cleanup(&url, &prefix, &[&job]).await;
    }
}

/// Text is data: an error text with NUL, escape, bell, CR/LF, bidi and non-BMP characters
/// comes back from the history exactly; one of 1 MiB is kept up to 64 KiB and says it was
/// cut. Neither is retried or refused.
#[tokio::test]
async fn handler_error_text_is_recorded_as_given_or_cut_saying_so() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let prefix = format!("anarchon-test-{:016x}", rand::random::<u64>());
    let store = AmqpStore::connect_with(
        &url,
        AmqpOptions::default()
            .prefix(&prefix)
            .history_max_bytes(4 << 20),
    )
    .await
    .unwrap();
    let job = unique_job("text");
    let hostile = "nul:\0 esc:\x1b[31m osc:\x1b]0;title\x07 bell:\x07 crlf:\r\n rlo:\u{202e}txt \
                   bom:\u{feff} nonchar:\u{ffff} astral:\u{1f600} del:\x7f \\u0000 %00 \"q\""
        .to_string();
    let huge = "é".repeat(512 * 1024); // 1 MiB
    store
        .record(
            &record(&job, 1_000, Some(hostile.clone())),
            Retention::default(),
        )
        .await
        .unwrap();
    store
        .record(
            &record(&job, 2_000, Some(huge.clone())),
            Retention::default(),
        )
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
    assert_eq!(by_slot(1_000), hostile);
    let cut = by_slot(2_000);
    assert!(cut.len() < 70 * 1024, "{}", cut.len());
    assert!(cut.starts_with(&"é".repeat(1000)));
    assert!(
        cut.contains("more bytes cut") && cut.contains("65536"),
        "{}",
        &cut[cut.len() - 120..]
    );
    store.close().await.unwrap();
    common::cleanup(&url, &prefix, &[&job]).await;
}

mod common {
    use anarchon_amqp::amqprs::channel::QueueDeleteArguments;
    use anarchon_amqp::amqprs::connection::{Connection, OpenConnectionArguments};
    use anarchon_core::JobName;

    /// Deletes the streams a test left.
    pub(super) async fn cleanup(url: &str, prefix: &str, jobs: &[&JobName]) {
        let port = url
            .rsplit_once(':')
            .and_then(|(_, p)| p.split('/').next()?.parse().ok())
            .unwrap_or(5672);
        let args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest");
        let Ok(conn) = Connection::open(&args).await else {
            return;
        };
        if let Ok(ch) = conn.open_channel(None).await {
            let mut queues = vec![format!("{prefix}.jobs")];
            queues.extend(jobs.iter().map(|j| format!("{prefix}.history.{j}")));
            for q in queues {
                let _ = ch.queue_delete(QueueDeleteArguments::new(&q)).await;
            }
        }
        let _ = conn.close().await;
    }
}
