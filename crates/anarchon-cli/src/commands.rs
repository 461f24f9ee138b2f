//! The store commands: `jobs`, `history`, `runs` and `inspect`. Each builds a report (the
//! JSON document) and can write it as a table.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

use anarchon_core::history::to_datetime;
use anarchon_core::store::{RunKey, RunView};
use anarchon_core::{HistoryRecord, JobName, RunStatus};

use crate::error::CliError;
use crate::output::{Table, escape, length_ms, or_dash, time};
use crate::store::Opened;

/// Reads a job name, as the stores spell them.
pub(crate) fn job_name(input: &str) -> Result<JobName, CliError> {
    JobName::new(input).map_err(|_| CliError::InvalidJob {
        input: input.to_owned(),
    })
}

/// Reads a slot or time: RFC 3339 with an offset, or epoch milliseconds.
pub(crate) fn instant(what: &'static str, input: &str) -> Result<DateTime<Utc>, CliError> {
    let text = input.trim();
    let invalid = |reason: String| CliError::InvalidTime {
        what,
        input: input.to_owned(),
        reason,
    };
    if !text.is_empty()
        && text
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        let ms: i64 = text
            .parse()
            .map_err(|_| invalid("it is too large".to_owned()))?;
        return DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| invalid("it is out of range".to_owned()));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| invalid(format!("it is not RFC 3339 ({e})")))
}

fn status_cell(record: &HistoryRecord) -> String {
    record.status.to_string()
}

fn duration_cell(record: &HistoryRecord) -> String {
    or_dash(record.duration().map(|d| length_ms(d.as_millis() as i64)))
}

fn error_cell(record: &HistoryRecord) -> String {
    or_dash(record.error.clone())
}

// ---------------------------------------------------------------------------------------
// jobs
// ---------------------------------------------------------------------------------------

/// The answer of `jobs`.
#[derive(Debug, Serialize)]
pub(crate) struct JobsReport {
    store: String,
    kind: &'static str,
    jobs: Vec<JobLine>,
}

#[derive(Debug, Serialize)]
struct JobLine {
    job: JobName,
    last_run: Option<HistoryRecord>,
}

/// `jobs`: the known jobs with their last run.
pub(crate) async fn jobs(store: &Opened) -> Result<JobsReport, CliError> {
    let names = store.known_jobs().await?;
    let mut jobs = Vec::with_capacity(names.len());
    for job in names {
        let last = store.last_run(&job).await?;
        jobs.push(JobLine {
            job,
            last_run: last.map(HistoryRecord::from),
        });
    }
    Ok(JobsReport {
        store: store.shown.clone(),
        kind: store.kind(),
        jobs,
    })
}

impl JobsReport {
    /// Writes the report as a table.
    pub(crate) fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut table = Table::new(&[
            "JOB",
            "LAST SLOT",
            "STATUS",
            "ATTEMPT",
            "REASON",
            "INSTANCE",
            "DURATION",
        ]);
        for line in &self.jobs {
            match &line.last_run {
                Some(r) => table.row(vec![
                    line.job.to_string(),
                    time(r.slot),
                    status_cell(r),
                    r.attempt.to_string(),
                    r.reason.to_string(),
                    r.instance_id.clone(),
                    duration_cell(r),
                ]),
                None => table.row(vec![
                    line.job.to_string(),
                    "-".into(),
                    "never ran".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]),
            }
        }
        if table.is_empty() {
            return writeln!(
                out,
                "no jobs in the {} store {}",
                self.kind,
                escape(&self.store)
            );
        }
        table.write(out)
    }
}

// ---------------------------------------------------------------------------------------
// history
// ---------------------------------------------------------------------------------------

/// The answer of `history`.
#[derive(Debug, Serialize)]
pub(crate) struct HistoryReport {
    store: String,
    job: JobName,
    runs: Vec<HistoryRecord>,
}

/// `history JOB -n N`: the job's latest attempts, newest first.
pub(crate) async fn history(
    store: &Opened,
    job: JobName,
    count: usize,
) -> Result<HistoryReport, CliError> {
    let records = store.history(&job, count).await?;
    Ok(HistoryReport {
        store: store.shown.clone(),
        job,
        runs: records.into_iter().map(HistoryRecord::from).collect(),
    })
}

impl HistoryReport {
    /// Writes the report as a table.
    pub(crate) fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        if self.runs.is_empty() {
            return writeln!(
                out,
                "no runs of job {:?} in {} (`anarchon jobs` lists the jobs it knows)",
                self.job.as_str(),
                escape(&self.store)
            );
        }
        let mut table = Table::new(&[
            "SLOT", "ATTEMPT", "REASON", "STATUS", "INSTANCE", "STARTED", "DURATION", "ERROR",
        ]);
        for r in &self.runs {
            table.row(vec![
                time(r.slot),
                r.attempt.to_string(),
                if r.manual {
                    format!("{} (manual)", r.reason)
                } else {
                    r.reason.to_string()
                },
                status_cell(r),
                r.instance_id.clone(),
                time(r.started_at),
                duration_cell(r),
                error_cell(r),
            ]);
        }
        table.write(out)
    }
}

// ---------------------------------------------------------------------------------------
// runs
// ---------------------------------------------------------------------------------------

/// One run that is not finished, as JSON.
#[derive(Debug, Serialize)]
struct RunLine {
    job: JobName,
    slot: DateTime<Utc>,
    slot_ms: i64,
    status: RunStatus,
    /// The instance that holds the lease; `None` after a hand-over, until a backup takes it.
    owner: Option<String>,
    attempt: u32,
    lease_expires_at: DateTime<Utc>,
    /// Milliseconds until the lease expires on the store's clock; negative once it expired.
    lease_left_ms: i64,
    /// True when a backup may take the run over now (no owner, or the lease expired).
    takeable: bool,
}

impl From<&RunView> for RunLine {
    fn from(v: &RunView) -> Self {
        RunLine {
            job: v.run.job.clone(),
            slot: to_datetime(v.run.slot),
            slot_ms: v.run.slot,
            status: v.status,
            owner: v.owner.clone(),
            attempt: v.attempt,
            lease_expires_at: to_datetime(v.expires_at),
            lease_left_ms: v.expires_at.saturating_sub(v.store_now),
            takeable: v.is_takeable(),
        }
    }
}

fn lease_cell(line: &RunLine) -> String {
    if line.owner.is_none() {
        "handed over: a backup takes it".to_owned()
    } else if line.lease_left_ms > 0 {
        length_ms(line.lease_left_ms)
    } else {
        format!(
            "expired {} ago: a backup takes it",
            length_ms(-line.lease_left_ms)
        )
    }
}

/// The answer of `runs`.
#[derive(Debug, Serialize)]
pub(crate) struct RunsReport {
    store: String,
    kind: &'static str,
    /// False for a claim-only store, which keeps no leases and so no unfinished runs.
    leases: bool,
    runs: Vec<RunLine>,
}

/// `runs`: what is unfinished now, over the known jobs.
pub(crate) async fn runs(store: &Opened) -> Result<RunsReport, CliError> {
    let runs = if store.has_leases() {
        let jobs = store.known_jobs().await?;
        store
            .unfinished_runs(&jobs)
            .await?
            .map(|views| views.iter().map(RunLine::from).collect())
    } else {
        None
    };
    Ok(RunsReport {
        store: store.shown.clone(),
        kind: store.kind(),
        leases: runs.is_some(),
        runs: runs.unwrap_or_default(),
    })
}

impl RunsReport {
    /// Writes the report as a table.
    pub(crate) fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        if !self.leases {
            return writeln!(
                out,
                "the {} store {} is claim-only: it keeps no leases, so no run is unfinished \
                 there (a crashed run is not taken over); `anarchon history JOB` shows what ran",
                self.kind,
                escape(&self.store)
            );
        }
        if self.runs.is_empty() {
            return writeln!(out, "no unfinished runs in {}", escape(&self.store));
        }
        let mut table = Table::new(&["JOB", "SLOT", "STATUS", "OWNER", "ATTEMPT", "LEASE LEFT"]);
        for line in &self.runs {
            table.row(vec![
                line.job.to_string(),
                time(line.slot),
                line.status.to_string(),
                or_dash(line.owner.clone()),
                line.attempt.to_string(),
                lease_cell(line),
            ]);
        }
        table.write(out)
    }
}

// ---------------------------------------------------------------------------------------
// inspect
// ---------------------------------------------------------------------------------------

/// The answer of `inspect`.
#[derive(Debug, Serialize)]
pub(crate) struct InspectReport {
    store: String,
    job: JobName,
    slot: DateTime<Utc>,
    slot_ms: i64,
    /// Every attempt of the slot still in the history, oldest first.
    attempts: Vec<HistoryRecord>,
    /// The run as the lease store holds it now (`None` on claim-only stores, or when the
    /// store keeps no run for the slot any more).
    now: Option<RunLine>,
    /// How many of the job's newest history records were searched.
    searched: usize,
}

/// `inspect JOB SLOT`: every attempt of one slot, and the run's state now.
pub(crate) async fn inspect(
    store: &Opened,
    job: JobName,
    slot: DateTime<Utc>,
    depth: usize,
) -> Result<InspectReport, CliError> {
    let slot_ms = slot.timestamp_millis();
    let records = store.history(&job, depth).await?;
    let searched = records.len();
    let mut attempts: Vec<HistoryRecord> = records
        .into_iter()
        .filter(|r| r.slot == slot_ms)
        .map(HistoryRecord::from)
        .collect();
    attempts.sort_by_key(|r| (r.attempt, r.started_at, r.manual));
    let key = RunKey::new(job.clone(), slot_ms);
    let now = store
        .runs(std::slice::from_ref(&key))
        .await?
        .and_then(|views| views.iter().find(|v| v.run == key).map(RunLine::from));
    Ok(InspectReport {
        store: store.shown.clone(),
        job,
        slot,
        slot_ms,
        attempts,
        now,
        searched,
    })
}

impl InspectReport {
    /// Writes the report as a table.
    pub(crate) fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "job {} slot {} ({} ms)",
            self.job,
            time(self.slot),
            self.slot_ms
        )?;
        if self.attempts.is_empty() {
            writeln!(
                out,
                "no attempt of this slot among the job's {} newest history records \
                 (`anarchon history {}` lists the slots; raise --depth to search further)",
                self.searched, self.job
            )?;
        } else {
            let mut table = Table::new(&[
                "ATTEMPT", "INSTANCE", "REASON", "STATUS", "STARTED", "FINISHED", "DURATION",
                "ERROR",
            ]);
            for r in &self.attempts {
                table.row(vec![
                    r.attempt.to_string(),
                    r.instance_id.clone(),
                    if r.manual {
                        format!("{} (manual)", r.reason)
                    } else {
                        r.reason.to_string()
                    },
                    status_cell(r),
                    time(r.started_at),
                    or_dash(r.finished_at.map(time)),
                    duration_cell(r),
                    error_cell(r),
                ]);
            }
            table.write(out)?;
        }
        if let Some(now) = &self.now {
            writeln!(
                out,
                "now: {} attempt {}, owner {}, lease {}",
                now.status,
                now.attempt,
                escape(&or_dash(now.owner.clone())),
                if now.status == RunStatus::Running {
                    lease_cell(now)
                } else {
                    "released".to_owned()
                }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_read_rfc3339_and_epoch_ms() {
        let a = instant("slot", "2026-11-30T18:00:00Z").unwrap();
        let b = instant("slot", "1796061600000").unwrap();
        let c = instant("slot", "2026-11-30T19:00:00+01:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        let e = instant("slot", "yesterday").unwrap_err();
        assert!(e.to_string().contains("\"yesterday\""), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(instant("slot", "2026-11-30T18:00:00").is_err(), "no offset");
    }
}
