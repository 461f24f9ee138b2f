//! Hostile input on the PostgreSQL store, against the real server: every option at every
//! extreme is accepted or refused with a typed error (never a panic), and any text a
//! handler returns is recorded (NUL bytes, which PostgreSQL text cannot hold, as U+FFFD).

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Finish, HistoryStore, JobName, LeaseStore, OwnerWrite, Prepare, Retention,
    RunRecord, Store,
};
use anarchon_core::testkit::lease::claim;
use anarchon_core::{Error, Reason, RunStatus};
use anarchon_postgres::{
    MAX_CONNECT_TIMEOUT, MAX_POOL_SIZE, MAX_PRUNE_WINDOW, MAX_TIMEOUT, MIN_TIMEOUT,
    PostgresOptions, PostgresStore,
};
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

fn durations() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(1_500),
        Duration::from_secs(3),
        MAX_TIMEOUT,
        MAX_TIMEOUT + Duration::from_millis(1),
        MAX_CONNECT_TIMEOUT,
        MAX_CONNECT_TIMEOUT + Duration::from_nanos(1),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ]
}

fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        8,
        MAX_POOL_SIZE,
        MAX_POOL_SIZE + 1,
        usize::MAX / 2,
        usize::MAX,
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        proptest::sample::select(durations()),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_size() -> impl Strategy<Value = usize> {
    prop_oneof![proptest::sample::select(sizes()), any::<usize>()]
}

/// What must come of these options: `None` for a store, else the option refused.
fn expected(timeout: Duration, connect: Duration, pool: usize) -> Option<&'static str> {
    if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
        Some("timeout")
    } else if !(MIN_TIMEOUT..=MAX_CONNECT_TIMEOUT).contains(&connect) {
        Some("connect_timeout")
    } else if !(1..=MAX_POOL_SIZE).contains(&pool) {
        Some("pool_size")
    } else {
        None
    }
}

fn check(what: &str, r: Result<(), Error>, expect: Option<&'static str>) {
    match (expect, r) {
        (None, Ok(())) => {}
        // A 1 ms bound may be too short for a round trip on a busy machine: a typed answer.
        (None, Err(Error::Timeout { .. } | Error::Unavailable { .. })) => {}
        (
            Some(option),
            Err(Error::OutOfRange {
                option: o,
                ref allowed,
                ..
            }),
        ) if o == option => {
            assert!(allowed.contains("from"), "{allowed}");
        }
        (expect, other) => panic!("{what}: expected {expect:?}, got {other:?}"),
    }
}

/// Builds a store from the URL and from a pool with these options; panics only if the
/// store did.
fn build_both(url: &str, timeout: Duration, connect: Duration, pool: usize) {
    build_both_with(url, timeout, connect, pool, true, true);
}

fn build_both_with(
    url: &str,
    timeout: Duration,
    connect: Duration,
    pool: usize,
    fast_handover: bool,
    synchronous_commit: bool,
) {
    runtime().block_on(async {
        let options = PostgresOptions::default()
            .timeout(timeout)
            .connect_timeout(connect)
            .pool_size(pool)
            .fast_handover(fast_handover)
            .synchronous_commit(synchronous_commit);
        let expect = expected(timeout, connect, pool);
        let r = PostgresStore::connect_with(url, options.clone()).await;
        let r = match r {
            Ok(store) => store.now().await.map(drop),
            Err(e) => Err(e),
        };
        check("connect_with", r, expect);
        let cfg: tokio_postgres::Config = url.parse().unwrap();
        let manager =
            anarchon_postgres::deadpool_postgres::Manager::new(cfg, tokio_postgres::NoTls);
        let users = anarchon_postgres::deadpool_postgres::Pool::builder(manager)
            .max_size(1)
            .build()
            .unwrap();
        let r = PostgresStore::from_pool(users, options.listen_url(url)).await;
        check("from_pool", r.map(drop), expect);
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// [issue 22] `timeout`, `connect_timeout` and `pool_size` at 0, 1 ns, typical, huge
    /// and `MAX`, through `connect_with` and `from_pool`: in range a working store,
    /// outside `OutOfRange` naming the option, never a panic (`connect_timeout + 500 ms`
    /// and `usize::MAX` connections used to panic; `timeout` past `int4` milliseconds
    /// reached the server as a `statement_timeout` it refuses).
    #[test]
    fn b42_every_option_is_accepted_or_refused_by_name(
        timeout in any_duration(),
        connect in any_duration(),
        pool in any_size(),
        fast_handover in any::<bool>(),
        synchronous_commit in any::<bool>(),
    ) {
        let Some(url) = common::url() else { return Ok(()) };
        build_both_with(&url, timeout, connect, pool, fast_handover, synchronous_commit);
    }
}

/// Each extreme of each option alone, so a failure names the value.
#[test]
fn b42_each_extreme_of_each_option() {
    let Some(url) = common::url() else { return };
    let typical = Duration::from_secs(3);
    for d in durations() {
        build_both(&url, d, typical, 2);
        build_both(&url, typical, d, 2);
    }
    for n in sizes() {
        build_both(&url, typical, typical, n);
    }
}

/// `prune_window` from zero (prune at once) to an hour is accepted; longer is refused by
/// name, before anything is sent.
#[tokio::test]
async fn b42_a_prune_window_past_an_hour_is_refused_by_name() {
    let Some(url) = common::url() else { return };
    let mut windows = durations();
    windows.extend([MAX_PRUNE_WINDOW, MAX_PRUNE_WINDOW + Duration::from_nanos(1)]);
    for window in windows {
        let built =
            PostgresStore::connect_with(&url, PostgresOptions::default().prune_window(window))
                .await;
        if window <= MAX_PRUNE_WINDOW {
            built
                .unwrap_or_else(|e| panic!("{window:?}: {e}"))
                .close()
                .await
                .unwrap();
        } else {
            let err = built.expect_err("refused");
            assert!(
                matches!(
                    err,
                    Error::OutOfRange {
                        option: "prune_window",
                        ..
                    }
                ),
                "{window:?}: {err:?}"
            );
            assert!(err.to_string().contains("prune_window"), "{err}");
        }
    }
}

/// Table prefixes and schemas that are no plain identifier are refused by name, before
/// anything is sent.
#[tokio::test]
async fn b42_odd_tables_and_schemas_are_refused_by_name() {
    let Some(url) = common::url() else { return };
    for name in [
        "",
        "a\0b",
        "Runs",
        "x\"; DROP TABLE y; --",
        "\u{202e}runs",
        &"a".repeat(100),
    ] {
        let err = PostgresStore::connect_with(&url, PostgresOptions::default().table(name))
            .await
            .expect_err(name);
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "table",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = PostgresStore::connect_with(&url, PostgresOptions::default().schema(name))
            .await
            .expect_err(name);
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "schema",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

/// A `connect_timeout` in the URL (whole seconds, up to `i64::MAX`) is bounded like the
/// option's, and refused by name; the listen URL's too.
#[tokio::test]
async fn b42_a_huge_connect_timeout_in_the_url_is_refused_by_name() {
    let Some(url) = common::url() else { return };
    let sep = if url.contains('?') { '&' } else { '?' };
    for secs in ["9223372036854775807", "31536001"] {
        let huge = format!("{url}{sep}connect_timeout={secs}");
        let err = PostgresStore::connect(&huge).await.expect_err("refused");
        assert!(
            matches!(
                err,
                Error::OutOfRange {
                    option: "connect_timeout (in the URL)",
                    ..
                }
            ),
            "{err:?}"
        );
        let cfg: tokio_postgres::Config = url.parse().unwrap();
        let manager =
            anarchon_postgres::deadpool_postgres::Manager::new(cfg, tokio_postgres::NoTls);
        let pool = anarchon_postgres::deadpool_postgres::Pool::builder(manager)
            .max_size(1)
            .build()
            .unwrap();
        let err = PostgresStore::from_pool(pool, PostgresOptions::default().listen_url(&huge))
            .await
            .expect_err("refused");
        assert!(matches!(err, Error::OutOfRange { .. }), "{err:?}");
    }
    let ok = format!("{url}{sep}connect_timeout=3");
    PostgresStore::connect(&ok).await.expect("3 s is fine");
}

/// The texts a handler may fail with, and what PostgreSQL records for each.
fn odd_errors() -> Vec<(String, String)> {
    let same = |s: &str| (s.to_owned(), s.to_owned());
    vec![
        (
            "boom\0after the NUL".to_owned(),
            "boom\u{FFFD}after the NUL".to_owned(),
        ),
        ("\0".to_owned(), "\u{FFFD}".to_owned()),
        same("esc \u{1b}[31mred\u{1b}[0m bell \u{7} osc \u{1b}]0;title\u{7}"),
        same("quotes ' \" \\ ; -- /* */ $1 E'\\x00' \\0"),
        same("bidi \u{202e}txt.exe and emoji 😀 and CRLF\r\n"),
        same(&"x".repeat(100_000)),
    ]
}

async fn prepared(url: &str) -> PostgresStore {
    common::fresh_store(url).await
}

/// [issue 22] A handler error with a NUL byte is recorded with each NUL replaced by
/// U+FFFD (PostgreSQL text holds no NUL: the write used to fail, and the run was taken
/// over again and again); every other text is recorded as given. Through `finish`,
/// `finish_many` and `record_manual`, read back by `history`.
#[tokio::test(flavor = "multi_thread")]
async fn b36_a_handler_error_with_nul_is_recorded_with_a_replacement_character() {
    let Some(url) = common::url() else { return };
    let store = prepared(&url).await;
    let job = JobName::new("text").expect("name");
    let now = store.now().await.unwrap();
    for (i, (error, recorded)) in odd_errors().into_iter().enumerate() {
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
        assert_eq!(rec.error.as_deref(), Some(recorded.as_str()), "finish #{i}");
    }
    let manual = RunRecord {
        job: job.clone(),
        slot: now,
        scheduled_at: now,
        instance_id: "i1".into(),
        manual: true,
        attempt: 1,
        reason: Reason::Manual,
        status: RunStatus::Failed,
        fence: 0,
        started_at: now,
        finished_at: Some(now + 1),
        error: Some("manual\0nul".into()),
    };
    store
        .record_manual(&manual, Retention::default())
        .await
        .expect("record_manual");
    let history = store.history(&job, 100).await.unwrap();
    let rec = history.iter().find(|r| r.manual).expect("manual record");
    assert_eq!(rec.error.as_deref(), Some("manual\u{FFFD}nul"));
}

/// [issue 22] An instance id with a NUL byte is refused by a typed error naming it, at
/// `prepare` and at every write, instead of a driver error on every claim.
#[tokio::test(flavor = "multi_thread")]
async fn b42_an_instance_id_with_nul_is_refused_by_name() {
    let Some(url) = common::url() else { return };
    let store = prepared(&url).await;
    let job = JobName::new("owner").expect("name");
    let now = store.now().await.unwrap();
    let is_refused = |r: &Error| matches!(r, Error::InvalidOption { option: "instance_id", reason } if reason.contains("host\\0evil"));
    let err = store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "host\0evil".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    let err = store
        .claim(&claim(&job, 1_000, "host\0evil", now))
        .await
        .unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    let err = store
        .claim_many(&[claim(&job, 2_000, "host\0evil", now)])
        .await
        .unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    // A good id still claims on the same store.
    let ClaimOutcome::Won(mut lease) = store.claim(&claim(&job, 3_000, "host", now)).await.unwrap()
    else {
        panic!("claim");
    };
    lease.instance_id = "host\0evil".into();
    let err = store.heartbeat(&[lease.clone()], 1_000).await.unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    let err = store.release(&lease).await.unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    let err = store.finish(&lease, &done).await.unwrap_err();
    assert!(is_refused(&err), "{err:?}");
    lease.instance_id = "host".into();
    assert_eq!(store.finish(&lease, &done).await.unwrap(), OwnerWrite::Done);
    // A long id, and one with other odd characters, are text like any other.
    for id in [
        "h".repeat(20_000),
        "esc \u{1b}[31m \u{202e} 😀 ' \" \\".to_owned(),
    ] {
        let slot = 10_000 + id.len() as i64;
        let ClaimOutcome::Won(lease) = store.claim(&claim(&job, slot, &id, now)).await.unwrap()
        else {
            panic!("claim by {id:?}");
        };
        assert_eq!(store.finish(&lease, &done).await.unwrap(), OwnerWrite::Done);
        let history = store.history(&job, 100).await.unwrap();
        assert!(
            history
                .iter()
                .any(|r| r.slot == slot && r.instance_id == id)
        );
    }
}
