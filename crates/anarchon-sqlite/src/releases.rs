//! In-process release notifications: fast handover between the instances of one process.
//!
//! SQLite has no way to tell another process that a row changed: while a scheduler watches,
//! the store's watcher (`watcher.rs`) reads the file's change counter every 15 ms and
//! announces other processes' releases here. Instances in the same process (tests, the quick-start's
//! threads, an application that runs several schedulers) share one broadcast channel per
//! database and table prefix, and a released run reaches their backups at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use anarchon_core::store::RunKey;
use tokio::sync::broadcast;

/// Notifications kept for a slow receiver before it lags (it then polls, as without them).
const CAPACITY: usize = 1024;

type Registry = Mutex<HashMap<String, Weak<broadcast::Sender<RunKey>>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// The channel of one database and prefix (`key` names both), shared by every store of
/// this process that was opened on them. Dropped when the last such store is.
pub fn channel(key: &str) -> Arc<broadcast::Sender<RunKey>> {
    let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = map.get(key).and_then(Weak::upgrade) {
        return tx;
    }
    map.retain(|_, w| w.strong_count() > 0);
    let tx = Arc::new(broadcast::channel(CAPACITY).0);
    map.insert(key.to_owned(), Arc::downgrade(&tx));
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_on_one_database_share_a_channel() {
        let a = channel("k1");
        let b = channel("k1");
        let c = channel("k2");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
