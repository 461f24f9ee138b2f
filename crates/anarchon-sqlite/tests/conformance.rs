//! The store conformance kit of `anarchon-core` on a fresh temporary SQLite file per test. [B-44]

mod common;

anarchon_core::lease_store_suite!(common::fresh);
