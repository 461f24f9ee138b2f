//! Hostile input on the libSQL store: every option at every extreme is accepted or refused
//! with a typed error (never a panic), odd URLs and tokens are refused without being shown,
//! and any text a handler returns is recorded. Runs on the Hrana test double.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Finish, HistoryStore, JobName, LeaseStore, OwnerWrite, Retention, Store,
};
use anarchon_core::testkit::lease::claim;
use anarchon_core::{Error, RunStatus};
use anarchon_libsql::{LibsqlOptions, LibsqlStore, MAX_CALL_TIMEOUT, MIN_CALL_TIMEOUT};
use proptest::prelude::*;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime")
    })
}

fn extremes() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
        Duration::from_secs(5),
        MAX_CALL_TIMEOUT,
        MAX_CALL_TIMEOUT + Duration::from_nanos(1),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        proptest::sample::select(extremes()),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Builds a store in each of the three ways with this call timeout; panics only if the
/// store did.
fn build_all(url: &str, call: Duration) -> Vec<Result<(), Error>> {
    runtime().block_on(async {
        let options = || {
            LibsqlOptions::default()
                .table(common::prefix("bounds"))
                .call_timeout(call)
        };
        let mut out = Vec::new();
        let store = LibsqlStore::connect_with(url, options()).await;
        out.push(match store {
            Ok(store) => store.now().await.map(drop),
            Err(e) => Err(e),
        });
        let db = libsql::Builder::new_remote(url.to_owned(), String::new())
            .build()
            .await
            .expect("database");
        out.push(LibsqlStore::from_database(db, options()).await.map(drop));
        out
    })
}

fn check(call: Duration, results: Vec<Result<(), Error>>) {
    for r in results {
        if (MIN_CALL_TIMEOUT..=MAX_CALL_TIMEOUT).contains(&call) {
            assert!(
                r.is_ok()
                    || (call < Duration::from_secs(1) && matches!(r, Err(Error::Timeout { .. }))),
                "call_timeout {call:?}: {r:?}"
            );
        } else {
            assert!(
                matches!(
                    r,
                    Err(Error::OutOfRange {
                        option: "call_timeout",
                        ..
                    })
                ),
                "call_timeout {call:?}: {r:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// [issue 22] `call_timeout` at 0, 1 ns, typical, huge and `MAX`, through every
    /// constructor: in range a working store, outside `OutOfRange` naming the option,
    /// never a panic (a deadline of now + `MAX` used to overflow).
    #[test]
    fn b44_every_call_timeout_is_accepted_or_refused_by_name(call in any_duration()) {
        let Some(url) = common::double_url() else { return Ok(()) };
        check(call, build_all(&url, call));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// [issue 22] The scheduler's store timeout handed over by `prepare`, at any length
    /// from 2 s to `MAX`, leaves calls working (its milliseconds are saturated to 64 bits,
    /// no longer cut, which could leave a call 1 ms).
    #[test]
    fn b44_any_caller_timeout_from_prepare_leaves_calls_working(
        secs in 2u64..=u64::MAX,
        nanos in 0u32..1_000_000_000,
    ) {
        let Some(url) = common::double_url() else { return Ok(()) };
        runtime().block_on(async {
            let store = LibsqlStore::connect_with(
                url,
                LibsqlOptions::default().table(common::prefix("prep")),
            )
            .await
            .expect("store");
            store
                .prepare(&anarchon_core::store::Prepare {
                    jobs: vec![],
                    instance_id: "i1".into(),
                    call_timeout: Duration::new(secs, nanos),
                })
                .await
                .expect("prepare");
            store.now().await.expect("a call after prepare");
            store.schema_version().await.expect("a call after prepare");
        });
    }
}

#[test]
fn b44_each_extreme_of_the_call_timeout() {
    let Some(url) = common::double_url() else {
        return;
    };
    for call in extremes() {
        check(call, build_all(&url, call));
    }
}

/// URLs that are no remote libSQL URL, or that carry a secret, and tokens no HTTP header
/// can carry, are refused with a typed error that does not show the secret.
#[tokio::test]
async fn b44_odd_urls_and_tokens_are_refused_without_showing_them() {
    for (url, secret) in [
        ("http://user:s3cr3t-pw@127.0.0.1:1", "s3cr3t-pw"),
        ("libsql://:s3cr3t-pw@db.example.com", "s3cr3t-pw"),
        ("https://s3cr3t-tok@db.example.com", "s3cr3t-tok"),
        ("http://user:pa/s3cr3t@127.0.0.1:1", "s3cr3t"),
        ("http://user:pa?s3cr3t@127.0.0.1:1", "s3cr3t"),
        ("http://user:pa#s3cr3t@127.0.0.1:1", "s3cr3t"),
        ("http://user:pa%40s3cr3t@127.0.0.1:1", "s3cr3t"),
        ("http://127.0.0.1:1?authToken=s3cr3t", "s3cr3t"),
        ("http://127.0.0.1:1/db?token=s3cr3t&x=1", "s3cr3t"),
        ("http://127.0.0.1:1#s3cr3t", "s3cr3t"),
        ("http://", "\0"),
        ("http://a b", "\0"),
        ("http://a\0b", "\0"),
        ("file:/tmp/x.db", "\0"),
        ("", "\0"),
    ] {
        let err = LibsqlStore::connect(url).await.expect_err(url);
        let shown = format!("{err} {err:?}");
        assert!(
            matches!(err, Error::InvalidOption { option: "url", .. }),
            "{url:?}: {shown}"
        );
        assert!(!shown.contains(secret), "{url:?}: {shown}");
    }
    for token in ["s3cr3t\n", "s3cr3t\0", "s3cr3t\u{e9}", "\r\nX-Evil: s3cr3t"] {
        let err = LibsqlStore::connect_with(
            "http://127.0.0.1:1",
            LibsqlOptions::default().auth_token(token),
        )
        .await
        .expect_err(token);
        let shown = format!("{err} {err:?}");
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "auth_token",
                    ..
                }
            ),
            "{shown}"
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}

/// The texts a handler may fail with.
fn odd_errors() -> Vec<String> {
    vec![
        "boom\0after the NUL".to_owned(),
        "\0".to_owned(),
        "esc \u{1b}[31mred\u{1b}[0m bell \u{7} osc \u{1b}]0;title\u{7}".to_owned(),
        "quotes ' \" \\ ; -- /* */ $1 ?1 X'00'".to_owned(),
        "bidi \u{202e}txt.exe and emoji 😀 and CRLF\r\n".to_owned(),
        "x".repeat(20_000),
    ]
}

/// [issue 22] A handler error with a NUL byte (or any other text) is recorded as given,
/// through `finish` (an interactive transaction, the error bound as a parameter) and
/// `finish_many` (a Hrana batch, the error written as a hex literal).
#[tokio::test]
async fn b36_a_handler_error_with_nul_is_recorded_faithfully() {
    let Some(url) = common::server().await else {
        return;
    };
    let store =
        LibsqlStore::connect_with(url, LibsqlOptions::default().table(common::prefix("text")))
            .await
            .expect("store");
    let job = JobName::new("text").expect("name");
    let now = store.now().await.unwrap();
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
        assert_eq!(rec.error.as_deref(), Some(error.as_str()), "finish #{i}");
    }
}

/// Serves every HTTP request with `status` and the raw `body`, on a port of its own.
fn answer_always(status: &'static str, body: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut seen = Vec::new();
                // Read the head and the body (Content-Length) of one request, then answer.
                loop {
                    let Ok(n) = stream.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_lowercase();
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= head_end + 4 + len {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body);
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// A server (or a proxy in front of it) that answers an error status with a body that is
/// not UTF-8 makes the `libsql` client panic; the store answers an error instead, and the
/// caller's task goes on.
#[tokio::test]
async fn b44_a_server_answer_the_client_panics_on_is_an_error() {
    let url = answer_always("502 Bad Gateway", b"\xff\xfe\x00binary");
    let err = LibsqlStore::connect_with(
        url,
        LibsqlOptions::default().call_timeout(Duration::from_secs(5)),
    )
    .await
    .expect_err("no store on such a server");
    assert!(
        matches!(err, Error::Store { .. } | Error::Unavailable { .. }),
        "{err:?}"
    );
}
