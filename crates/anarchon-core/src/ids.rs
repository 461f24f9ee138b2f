//! The identifiers every module shares: job names, run keys and epoch milliseconds.
//!
//! They live apart from the store traits and the history types so that neither needs the
//! other to name a run.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Milliseconds since 1970-01-01T00:00:00Z.
pub type EpochMs = i64;

/// A 64-bit mix (splitmix64's finalizer): a bijection whose output bits each depend on every
/// input bit.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of `name` (FNV-1a 64) mixed with `key` ([`mix64`]): the same in every process and
/// build, for the claim order of the scheduler and the pruning phase of the stores.
pub(crate) fn name_hash(key: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix64(h ^ key)
}

/// A job name: 1–128 ASCII letters, digits, `_` and `-`, the same rule on every store. [B-04]
///
/// ```
/// use anarchon_core::JobName;
/// assert!(JobName::new("nightly-report_2").is_ok());
/// assert!(JobName::new("has space").is_err());
/// assert!(JobName::new("").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobName(Arc<str>);

impl JobName {
    /// Checks the naming rule.
    pub fn new(name: impl AsRef<str>) -> Result<Self> {
        let name = name.as_ref();
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(JobName(Arc::from(name)))
        } else {
            Err(Error::InvalidJobName {
                name: name.to_owned(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobName {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        JobName::new(value)
    }
}

impl From<JobName> for String {
    fn from(value: JobName) -> Self {
        value.0.to_string()
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// The longest instance id, in bytes.
pub const MAX_INSTANCE_ID_LEN: usize = 200;

/// The id of one scheduler instance: 1–200 bytes of text without control characters
/// (stores record it as text, and it shows in logs, history and the dashboard). [B-32]
///
/// ```
/// use anarchon_core::InstanceId;
/// let id = InstanceId::new("worker-1 (eu-west)").unwrap();
/// assert_eq!(id, "worker-1 (eu-west)");
/// assert!(InstanceId::new("").is_err());
/// assert!(InstanceId::new("line\nbreak").is_err());
/// assert!(InstanceId::new("x".repeat(201)).is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InstanceId(Arc<str>);

impl InstanceId {
    /// Checks the rule.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `instance_id`, for an empty id, one longer than
    /// [`MAX_INSTANCE_ID_LEN`] bytes or one with a control character.
    pub fn new(id: impl AsRef<str>) -> Result<Self> {
        let id = id.as_ref();
        if id.is_empty() || id.len() > MAX_INSTANCE_ID_LEN {
            return Err(Error::invalid_option(
                "instance_id",
                format!(
                    "must be 1 to {MAX_INSTANCE_ID_LEN} bytes (this one has {})",
                    id.len()
                ),
            ));
        }
        if id.chars().any(char::is_control) {
            return Err(Error::invalid_option(
                "instance_id",
                format!(
                    "{:?} holds a control character (NUL, newline, escape ...): stores \
                     record the id as text, use printable characters",
                    id.escape_debug().to_string()
                ),
            ));
        }
        Ok(InstanceId(Arc::from(id)))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as the shared string the runtime hands to handlers.
    pub(crate) fn into_arc(self) -> Arc<str> {
        self.0
    }

    /// An id already checked (the runtime's own copy).
    pub(crate) fn checked(id: Arc<str>) -> Self {
        InstanceId(id)
    }
}

impl TryFrom<String> for InstanceId {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        InstanceId::new(value)
    }
}

impl TryFrom<&str> for InstanceId {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        InstanceId::new(value)
    }
}

impl From<InstanceId> for String {
    fn from(value: InstanceId) -> Self {
        value.0.to_string()
    }
}

impl AsRef<str> for InstanceId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for InstanceId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for InstanceId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for InstanceId {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// One run: a job and one of its slots. Displayed as `<job>:<slot-ms>`, the unit of
/// deduplication in every store. [B-08]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunKey {
    /// The job.
    pub job: JobName,
    /// The slot, epoch ms.
    pub slot: EpochMs,
}

impl RunKey {
    /// A run key.
    pub fn new(job: JobName, slot: EpochMs) -> Self {
        RunKey { job, slot }
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.job, self.slot)
    }
}
