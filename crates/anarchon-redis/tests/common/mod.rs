//! Helpers of the Redis store's own tests: options with a fresh prefix, an admin client, and
//! a Redis Cluster of the test's own ([`cluster`]). A single `redis-server` of the test's own
//! is `anarchon_test_support::OwnRedis`.
#![allow(dead_code, unreachable_pub)] // Each test binary uses a different part of it.

pub mod cluster;

use anarchon_redis::RedisOptions;
use anarchon_redis::fred::prelude::*;

/// Options with a fresh key prefix.
pub fn options() -> RedisOptions {
    RedisOptions::default().prefix(format!("anarchon-test-{:016x}:", rand::random::<u64>()))
}

/// A connected plain client, to look at and tamper with keys.
pub async fn admin(url: &str) -> Client {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    client
}
