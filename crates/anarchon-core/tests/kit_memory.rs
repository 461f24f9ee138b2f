//! The conformance kit against the in-memory reference store, under tokio's paused clock.

use std::sync::Arc;

use anarchon_core::memory::MemoryStore;
use anarchon_core::{ClaimStore, LeaseStore};

async fn lease_store() -> Option<Arc<dyn LeaseStore>> {
    Some(Arc::new(MemoryStore::new()))
}

async fn claim_store() -> Option<Arc<dyn ClaimStore>> {
    Some(Arc::new(MemoryStore::new()))
}

anarchon_core::lease_store_suite!(lease_store, paused);
anarchon_core::claim_store_suite!(claim_store, paused);
