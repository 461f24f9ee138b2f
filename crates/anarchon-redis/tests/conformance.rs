//! The core conformance kit on Redis and Valkey: the lease kit for `RedisStore` and the
//! claim-only kit for each claim-only strategy, on single servers and on a Redis Cluster
//! (`ANARCHON_REDIS_CLUSTER_URL`, from `cargo xtask test-servers --cluster`). [B-44]

use std::sync::Arc;

use anarchon_core::store::{ClaimStore, LeaseStore};
use anarchon_core::testkit::server_url;
use anarchon_redis::{RedisClaimStore, RedisOptions, RedisStore, Strategy};

/// A fresh key prefix per store, so tests sharing a server never see each other's keys.
fn options() -> RedisOptions {
    RedisOptions::default().prefix(format!("anarchon-test-{:016x}:", rand::random::<u64>()))
}

async fn lease(var: &str) -> Option<Arc<dyn LeaseStore>> {
    let url = server_url(var)?;
    Some(Arc::new(
        RedisStore::connect_with(&url, options())
            .await
            .expect("store"),
    ))
}

async fn claim(var: &str, strategy: Strategy) -> Option<Arc<dyn ClaimStore>> {
    let url = server_url(var)?;
    Some(Arc::new(
        RedisClaimStore::connect_with(&url, strategy, options())
            .await
            .expect("store"),
    ))
}

async fn redis_lease() -> Option<Arc<dyn LeaseStore>> {
    lease("ANARCHON_REDIS_URL").await
}
async fn valkey_lease() -> Option<Arc<dyn LeaseStore>> {
    lease("ANARCHON_VALKEY_URL").await
}
/// The six-node cluster of `cargo xtask test-servers --cluster`.
async fn cluster_lease() -> Option<Arc<dyn LeaseStore>> {
    lease("ANARCHON_REDIS_CLUSTER_URL").await
}
async fn cluster_stream_id() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_REDIS_CLUSTER_URL", Strategy::StreamId).await
}
async fn cluster_script() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_REDIS_CLUSTER_URL", Strategy::Script).await
}
async fn redis_stream_id() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_REDIS_URL", Strategy::StreamId).await
}
async fn redis_script() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_REDIS_URL", Strategy::Script).await
}
async fn valkey_stream_id() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_VALKEY_URL", Strategy::StreamId).await
}
async fn valkey_script() -> Option<Arc<dyn ClaimStore>> {
    claim("ANARCHON_VALKEY_URL", Strategy::Script).await
}
/// `idmp` needs Redis 8.6: only where `ANARCHON_REDIS86_URL` points to one. It is optional
/// even under `ANARCHON_REQUIRE_SERVERS=1`, since few machines have such a server yet.
async fn redis86_idmp() -> Option<Arc<dyn ClaimStore>> {
    match std::env::var("ANARCHON_REDIS86_URL") {
        Ok(url) if !url.trim().is_empty() => Some(Arc::new(
            RedisClaimStore::connect_with(&url, Strategy::Idmp, options())
                .await
                .expect("store"),
        )),
        _ => {
            eprintln!(
                "SKIP ANARCHON_REDIS86_URL is not set: the idmp strategy needs Redis 8.6 and was not tested"
            );
            None
        }
    }
}

mod redis_lease {
    anarchon_core::lease_store_suite!(super::redis_lease);
}
/// Valkey runs the store contract only: it takes the same scripts and commands as Redis 7,
/// and the runtime half (the scheduler's behaviours through the store trait) runs once per
/// store family: on Redis 7 (`redis_lease`) and on the Redis Cluster (`cluster_lease`,
/// where keys, scripts and release notifications are routed per hash slot).
mod valkey_lease {
    anarchon_core::lease_store_contract!(super::valkey_lease);
}
mod redis_stream_id {
    anarchon_core::claim_store_suite!(super::redis_stream_id);
}
mod redis_script {
    anarchon_core::claim_store_suite!(super::redis_script);
}
mod valkey_stream_id {
    anarchon_core::claim_store_suite!(super::valkey_stream_id);
}
mod valkey_script {
    anarchon_core::claim_store_suite!(super::valkey_script);
}
mod redis86_idmp {
    anarchon_core::claim_store_suite!(super::redis86_idmp);
}
mod cluster_lease {
    anarchon_core::lease_store_suite!(super::cluster_lease);
}
mod cluster_stream_id {
    anarchon_core::claim_store_suite!(super::cluster_stream_id);
}
mod cluster_script {
    anarchon_core::claim_store_suite!(super::cluster_script);
}
