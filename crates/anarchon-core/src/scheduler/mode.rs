//! The markers in a scheduler's and a job builder's type: the kind of store ([`Leased`],
//! [`ClaimOnly`], sealed under [`Mode`]) and the kind of job ([`kind`]), so an option that
//! does not apply does not exist. [B-22]

/// Marker: the scheduler runs on a lease store (takeover, handover, catch-up ...).
#[derive(Debug, Clone, Copy)]
pub struct Leased;
/// Marker: the scheduler runs on a claim-only store (one winner per slot, nothing more).
#[derive(Debug, Clone, Copy)]
pub struct ClaimOnly;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Leased {}
    impl Sealed for super::ClaimOnly {}
}

/// The kind of store a scheduler runs on, fixed by its constructor. Lease-only options
/// exist only on `Leased` builders. [B-22]
pub trait Mode: sealed::Sealed + Send + Sync + 'static {
    /// True for lease stores.
    const LEASE: bool;
}
impl Mode for Leased {
    const LEASE: bool = true;
}
impl Mode for ClaimOnly {
    const LEASE: bool = false;
}

/// Markers for the kind of job a [`JobBuilder`] builds.
///
/// [`JobBuilder`]: crate::JobBuilder
pub mod kind {
    /// `every`.
    #[derive(Debug)]
    pub struct Every;
    /// `cron`.
    #[derive(Debug)]
    pub struct Cron;
    /// `at`.
    #[derive(Debug)]
    pub struct At;
}
