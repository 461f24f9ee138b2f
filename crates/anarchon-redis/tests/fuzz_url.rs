//! Fuzzing of the URLs the Redis stores read (`redis://`, `rediss://`, cluster and sentinel
//! forms, with fred's query parameters): each must build a store or be refused with a
//! `RedisError` (an `InvalidOption` for the core), never panic. Nothing connects: building a
//! store only parses. A fixed number of cases keeps CI quick; `ANARCHON_FUZZ_CASES=<n>` runs
//! more.
// The test-only `unconnected` constructors (feature `testkit`) build a store without
// connecting: what these tests need (a parse, or an error seen at the first call).

use anarchon_core::Error;
use anarchon_redis::{
    RedisClaimStore, RedisError, RedisOptions, RedisStore, Strategy as ClaimStrategy,
};
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

fn url() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("redis://"),
            Just("rediss://"),
            Just("valkey://"),
            Just("valkeys://"),
            Just("redis-cluster://"),
            Just("rediss-cluster://"),
            Just("redis-sentinel://"),
            Just("redis+unix://"),
            Just("REDIS://"),
            Just("http://"),
            Just("redis:"),
        ],
        prop_oneof![
            Just(String::new()),
            "[a-z]{1,6}@",
            ":[a-z%]{0,8}@",
            "[a-z]{1,6}:[a-z%@:]{0,8}@",
        ],
        prop_oneof![
            Just("127.0.0.1".to_owned()),
            Just("[::1]".to_owned()),
            Just(String::new()),
            Just("[::1".to_owned()),
            "[a-z0-9.\\-_]{1,12}",
        ],
        prop_oneof![
            Just(String::new()),
            Just(":6379".to_owned()),
            Just(":".to_owned()),
            Just(":0".to_owned()),
            Just(":65536".to_owned()),
            ":[0-9a-z\\-]{1,6}",
        ],
        prop_oneof![
            Just(""),
            Just("/0"),
            Just("/15"),
            Just("/255"),
            Just("/256"),
            Just("/x"),
            Just("/1/2"),
            Just("/"),
        ],
        prop::collection::vec(
            (
                prop_oneof![
                    Just("node"),
                    Just("sentinelServiceName"),
                    Just("sentinelUsername"),
                    Just("sentinelPassword"),
                    Just("x"),
                ],
                prop_oneof![
                    "127\\.0\\.0\\.1:[0-9]{1,6}",
                    "[a-z]{0,5}:[a-z0-9]{0,5}",
                    "\\PC{0,8}",
                ],
            ),
            0..4,
        ),
    )
        .prop_map(|(scheme, user, host, port, path, pairs)| {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            format!("{scheme}{user}{host}{port}{path}{query}")
        })
}

fn refused(input: &str, e: RedisError) -> Result<(), TestCaseError> {
    let core = Error::from(e);
    prop_assert!(
        matches!(core, Error::InvalidOption { .. }),
        "{input:?}: {core:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn urls_build_a_store_or_are_refused_with_a_redis_error(
        input in prop_oneof![url(), "\\PC{0,60}"],
        strategy in prop_oneof![
            Just(ClaimStrategy::StreamId),
            Just(ClaimStrategy::Script),
            Just(ClaimStrategy::Idmp),
        ],
    ) {
        if let Err(e) = RedisStore::unconnected(&input, RedisOptions::default()) {
            refused(&input, e)?;
        }
        if let Err(e) = RedisClaimStore::unconnected(&input, strategy, RedisOptions::default()) {
            refused(&input, e)?;
        }
    }
}
