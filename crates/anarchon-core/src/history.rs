//! History records: one per attempt, readable from any process. [B-36, B-37]

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{EpochMs, JobName};

/// Why a run was started. [B-30]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The slot came due and this instance won the claim.
    Scheduled,
    /// `run_now` on this instance: no deduplication, no retry.
    Manual,
    /// A slot missed while no instance ran, claimed on start. [B-19]
    CatchUp,
    /// A backup claimed the next attempt of an unfinished run. [B-14, B-17]
    Takeover,
}

impl Reason {
    /// The name as stored and shown (`"catch-up"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Scheduled => "scheduled",
            Reason::Manual => "manual",
            Reason::CatchUp => "catch-up",
            Reason::Takeover => "takeover",
        }
    }

    /// Parses [`Reason::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "scheduled" => Reason::Scheduled,
            "manual" => Reason::Manual,
            "catch-up" => Reason::CatchUp,
            "takeover" => Reason::Takeover,
            _ => return None,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// One attempt of one run, as kept in the store's history. [B-37]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// The job.
    pub job: JobName,
    /// The slot (epoch ms); for a manual run, the time it was started.
    pub slot: EpochMs,
    /// When the slot was due (epoch ms, instance clock).
    pub scheduled_at: EpochMs,
    /// The instance that ran this attempt.
    pub instance_id: String,
    /// Started by `run_now`.
    pub manual: bool,
    /// 1 for the first start, 2 and up after takeovers.
    pub attempt: u32,
    /// Why it started.
    pub reason: Reason,
    /// What became of it.
    pub status: RunStatus,
    /// The fencing token of this attempt (0 for manual runs and claim-only stores).
    pub fence: u64,
    /// When it started (epoch ms, store clock where the store has one).
    pub started_at: EpochMs,
    /// When it ended.
    pub finished_at: Option<EpochMs>,
    /// The error or the cause of an interruption.
    pub error: Option<String>,
}

impl HistoryRecord {
    /// `finished_at - started_at`, once finished.
    pub fn duration_ms(&self) -> Option<i64> {
        self.finished_at.map(|f| (f - self.started_at).max(0))
    }
}

/// How much history a store keeps per job. [B-37]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Runs kept per job, newest first (at least 1).
    pub size: u32,
    /// Runs that finished longer ago than this are pruned (lease stores only).
    pub ttl_ms: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            size: 100,
            ttl_ms: None,
        }
    }
}
