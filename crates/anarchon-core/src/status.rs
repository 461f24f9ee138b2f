//! The status of a run, apart from the history types so that the error type can name it
//! without reaching the identifiers (which name the error type).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The status of a run or of one attempt. [B-37]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Started and not finished.
    Running,
    /// The handler returned `Ok`.
    Succeeded,
    /// The handler returned an error, timed out, or the crash budget was used up.
    Failed,
    /// The runner died or froze, handed the run over, or was stopped.
    Interrupted,
}

impl RunStatus {
    /// The name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// Parses [`RunStatus::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }

    /// True for every status but `Running`.
    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
