//! Core of anarchon: slot math, the lease state machine, the store traits, the scheduler
//! runtime and the store conformance kit.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod error;
pub mod history;
pub mod memory;
pub mod slot;
pub mod store;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use error::{BoxError, Error, Result, redact_url};
pub use history::{HistoryRecord, Reason, Retention, RunStatus};
pub use store::{
    ClaimOutcome, ClaimStore, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, Overlap, OwnerWrite, Prepare, Renewal, RunKey, RunView, SlotClaim, SlotOutcome,
    Store, Takeover, TakeoverOutcome,
};
