//! Fuzzing of the connection strings `PostgresStore::unconnected` reads: URLs and libpq `key=value`
//! lists, with every parameter tokio-postgres knows plus `sslmode` / `sslrootcert`. Each must
//! build a store or be refused with a `PostgresError` (an `InvalidOption` for the core),
//! never panic. Nothing connects: `unconnected` only parses. A fixed number of cases keeps CI quick;
//! `ANARCHON_FUZZ_CASES=<n>` runs more.
// The test-only `PostgresStore::unconnected` (feature `testkit`) parses a URL without
// connecting: what these tests need.

use anarchon_core::Error;
use anarchon_postgres::{PostgresError, PostgresOptions, PostgresStore};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("ANARCHON_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(512);
    ProptestConfig {
        cases,
        max_shrink_iters: 2_048,
        ..ProptestConfig::default()
    }
}

fn key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("sslmode"),
        Just("sslrootcert"),
        Just("sslnegotiation"),
        Just("sslcert"),
        Just("host"),
        Just("hostaddr"),
        Just("port"),
        Just("user"),
        Just("password"),
        Just("dbname"),
        Just("options"),
        Just("application_name"),
        Just("connect_timeout"),
        Just("tcp_user_timeout"),
        Just("keepalives"),
        Just("keepalives_idle"),
        Just("keepalives_interval"),
        Just("keepalives_retries"),
        Just("target_session_attrs"),
        Just("channel_binding"),
        Just("load_balance_hosts"),
        Just("unknown"),
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "(disable|allow|prefer|require|verify-ca|verify-full|VERIFY-FULL|system|direct|postgres)",
        "(any|read-write|read-only|random|true|false|on|0|1|-1)",
        "[0-9]{1,25}",
        "-[0-9]{1,20}",
        "127\\.0\\.0\\.[0-9]{1,3}(,[a-z]{1,5})?",
        "(/nonexistent/ca\\.crt|/etc/hostname|/|\\.)",
        "%[0-9a-fA-FxZ]{0,2}",
        "[a-z_ '\\\\=&%]{0,12}",
        "\\PC{0,12}",
    ]
}

fn url() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("postgres://"),
            Just("postgresql://"),
            Just("postgres:/"),
            Just("http://"),
        ],
        prop_oneof![
            Just(String::new()),
            "[a-z]{1,6}@",
            "[a-z]{1,6}:[a-z%@:]{0,8}@",
            "%[0-9a-fZ]{0,2}@",
        ],
        prop_oneof![
            Just("127.0.0.1".to_owned()),
            Just("[::1]".to_owned()),
            Just(String::new()),
            Just("db1,db2".to_owned()),
            Just("%2Ftmp".to_owned()),
            Just("[::1".to_owned()),
            "[a-z0-9.\\-]{1,12}",
        ],
        prop_oneof![
            Just(String::new()),
            Just(":5432".to_owned()),
            Just(":".to_owned()),
            Just(":99999".to_owned()),
            Just(":5432,5433".to_owned()),
            ":[0-9a-z\\-]{1,6}",
        ],
        prop_oneof![Just(""), Just("/db"), Just("/"), Just("/%ff"), Just("/a/b")],
        prop::collection::vec((key(), value()), 0..5),
        prop_oneof![Just(""), Just("&"), Just("&x"), Just("#frag")],
    )
        .prop_map(|(scheme, user, host, port, path, pairs, tail)| {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            format!("{scheme}{user}{host}{port}{path}{query}{tail}")
        })
}

fn key_values() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            key(),
            prop_oneof![Just("="), Just(" = "), Just("=\t"), Just(" "), Just("")],
            value(),
            prop_oneof![Just(false), Just(true)],
        ),
        0..6,
    )
    .prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, eq, v, quoted)| {
                if quoted {
                    format!("{k}{eq}'{}'", v.replace('\'', "\\'"))
                } else {
                    format!("{k}{eq}{v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn check(input: &str) -> Result<(), TestCaseError> {
    match PostgresStore::unconnected(input, PostgresOptions::default()) {
        Ok(_) => Ok(()),
        Err(e @ (PostgresError::InvalidUrl { .. } | PostgresError::Pool { .. })) => {
            let core = Error::from(e);
            prop_assert!(
                matches!(core, Error::InvalidOption { option: "url", .. }),
                "{input:?}: {core:?}"
            );
            Ok(())
        }
        // A value the URL may carry but past its bound (a `connect_timeout` over a year) is
        // refused as out of range, naming the URL's option and the allowed range.
        Err(PostgresError::OutOfRange {
            option, allowed, ..
        }) if option.ends_with("(in the URL)") => {
            prop_assert!(allowed.contains("from"), "{input:?}: {allowed}");
            Ok(())
        }
        Err(other) => Err(TestCaseError::fail(format!("{input:?}: {other:?}"))),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn urls_build_a_store_or_are_refused_as_invalid(input in prop_oneof![url(), "\\PC{0,60}"]) {
        check(&input)?;
    }

    #[test]
    fn key_value_lists_build_a_store_or_are_refused_as_invalid(input in key_values()) {
        check(&input)?;
    }
}

/// The options' `Debug` output never shows the LISTEN URL's password.
#[test]
fn options_debug_hides_the_listen_urls_password() {
    let options = PostgresOptions::default().listen_url("postgres://app:s3cr3t-pw@db:5432/app");
    let text = format!("{options:?}");
    assert!(!text.contains("s3cr3t-pw"), "{text}");
    assert!(text.contains("listen_url"), "{text}");
}
