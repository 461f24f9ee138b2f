//! Scheduler-level conformance tests: several scheduler instances on one store.

#[doc(hidden)]
#[macro_export]
macro_rules! __runtime_tests {
    ($factory:path, [$($mode:ident)?]) => {};
}
