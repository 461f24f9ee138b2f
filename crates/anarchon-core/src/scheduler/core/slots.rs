//! Slots: when each job's next slot is due, which slot is claimed, what a claim's outcome
//! means (start, back up, skip), and catch-up after a restart or an outage.

use std::collections::VecDeque;
use std::sync::Arc;

use super::Core;
use super::types::{Micros, QueuedClaim, Timer, UNREACHABLE_AFTER};
use crate::error::{Error, Result};
use crate::event::{Event, RunInfo, SkipReason, StoreOperation};
use crate::history::{Reason, to_datetime};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::options::CatchUp;
use crate::scheduler::JobDef;
use crate::scheduler::telemetry;
use crate::scheduler::watch::Watch;
use crate::slot::Schedule;
use crate::store::{ClaimOutcome, LeaseClaim, SlotOutcome};

/// How many slots from `from` (included) to `to` (excluded): counted one by one up to a cap,
/// so a process paused for a day costs bounded work (the count then says "at least").
pub(super) fn slots_between(schedule: &Schedule, from: EpochMs, to: EpochMs) -> u64 {
    const CAP: u64 = 100_000;
    let mut n = 0;
    let mut at = from;
    while at < to && n < CAP {
        n += 1;
        match schedule.next_after(at) {
            Some(next) if next > at => at = next,
            _ => break,
        }
    }
    n
}

/// `ms` as a signed duration, saturating.
fn signed(ms: u64) -> EpochMs {
    ms.min(i64::MAX as u64) as EpochMs
}

impl Core {
    /// Schedules every job and lists the unfinished runs (orphans first, then catch-up).
    pub(super) fn begin(&mut self, jobs: Vec<Arc<JobDef>>) {
        let names: Vec<JobName> = jobs.iter().map(|j| j.name.clone()).collect();
        for job in jobs {
            self.jobs.insert(job.name.clone(), job.clone());
            self.schedule_next(&job, self.now_ms());
        }
        if self.cfg.lease_store {
            // Orphans first, then catch-up. [B-19]
            self.list_unfinished(names);
        }
    }

    /// Arms the timer of the job's next slot after `after` (plus its jitter).
    pub(super) fn schedule_next(&mut self, job: &Arc<JobDef>, after: EpochMs) {
        let Some(slot) = job.schedule.next_after(after) else {
            return;
        };
        let mut jitter = job.opts.jitter_ms();
        if let Schedule::Every { interval_ms, .. } = job.schedule {
            // Never jitter past the next slot: a fast job would skip slots.
            jitter = jitter.min(interval_ms / 2);
        }
        let jitter = signed(self.random_up_to(jitter));
        // A slot too far ahead to represent is simply never due.
        if let Some(at) = self.mono_at(slot.saturating_add(jitter)) {
            self.arm(
                at,
                Timer::Due {
                    job: job.clone(),
                    slot,
                },
            );
        }
    }

    /// A job's slot timer fired.
    pub(super) fn slot_due(&mut self, job: Arc<JobDef>, slot: EpochMs) {
        let current = self
            .jobs
            .get(&job.name)
            .is_some_and(|j| Arc::ptr_eq(j, &job));
        if !current || self.stopping {
            return;
        }
        // The timer runs on the monotonic clock, armed from a reading of the instance clock;
        // if that clock was slewed or set back since, the timer fires before the slot by the
        // instance clock (seen: 1.3 ms early after a minute). Never claim before the slot:
        // wait for the rest.
        if self.now.epoch_us < slot.saturating_mul(1_000)
            && let Some(at) = self.mono_at(slot)
        {
            self.arm(at, Timer::Due { job, slot });
            return;
        }
        // A standby of the job (it lost the job's last claim) claims a little after the slot,
        // so the instance that won the last one claims alone first. [B-10]
        if let Some(from) = self.standby_from(&job, slot)
            && self.now.epoch_us < from.saturating_mul(1_000)
            && let Some(at) = self.mono_at(from)
        {
            self.arm(at, Timer::Due { job, slot });
            return;
        }
        // Only the newest due slot is ever claimed. [B-10]
        let now = self.now_ms();
        let newest = job.schedule.newest_due(now).map_or(slot, |n| n.max(slot));
        if newest > slot {
            // The timer fired after a newer slot was due (an overloaded or paused process):
            // the armed slot and any between are not claimed here. Say so, and back the
            // armed slot up in case another instance claimed it. [B-10]
            let skipped = slots_between(&job.schedule, slot, newest);
            self.note_late(&job.name, skipped);
            self.emit(Event::Skip {
                job: job.name.clone(),
                slot: to_datetime(slot),
                reason: SkipReason::Late,
            });
            if self.cfg.lease_store {
                let until = self.claimable_until(&job, slot);
                self.look_out(&job.name, until);
            }
        }
        let slot = newest;
        let not_after = slot.saturating_add(signed(job.opts.max_late_ms()));
        self.claim(job.clone(), slot, Reason::Scheduled, not_after);
        self.schedule_next(&job, slot.max(now));
    }

    /// When this instance claims `slot` of `job` if it is the job's standby (it lost the
    /// job's last claim): `standby_delay` after the slot, at most half the way to the next
    /// slot and half the job's `max_late`, so a standby's claim is never late by its own
    /// doing and never meets the next slot. `None`: at the slot (the instance won the last
    /// claim, has not claimed the job yet, or the delay is zero).
    ///
    /// Why: every instance claims every slot, and all but one lose. Claiming at the same
    /// instant, they queue behind each other at the store (PostgreSQL's job rows, SQLite's
    /// write lock, Redis's one thread) and the winner's start waits for the herd. An
    /// instance that lost the last slot of a job most likely loses the next one too, so it
    /// lets the last winner claim alone first and claims after it: by then the run exists and
    /// its claim is answered `Taken` from a read, and it backs the run up as before. If the
    /// last winner is gone or slow, a standby wins the slot `standby_delay` late and is the
    /// one that claims first from then on. Nothing is decided by the delay: the store's
    /// claim still decides who runs the slot.
    pub(super) fn standby_from(&self, job: &JobDef, slot: EpochMs) -> Option<EpochMs> {
        let delay = self.cfg.standby_delay.as_millis().min(u64::MAX as u128) as u64;
        if delay == 0 || !self.standby.contains(&job.name) {
            return None;
        }
        let gap = job
            .schedule
            .next_after(slot)
            .map_or(u64::MAX, |next| next.saturating_sub(slot).max(0) as u64);
        let delay = delay.min(gap / 2).min(job.opts.max_late_ms() / 2);
        (delay > 0).then(|| slot.saturating_add(signed(delay)))
    }

    /// The last moment (instance clock) any instance may still claim `slot`: a scheduled
    /// claim until `max_late`, a catch-up until `catch_up`, plus one lease of slack for a
    /// claim in flight. Instances claim only the newest due slot (and catch-up `Latest`
    /// only the newest too), so unless the job replays every missed slot (`CatchUp::All`)
    /// nobody claims `slot` once the next one is due: a job is looked out for (one record,
    /// `look_out`) about a lease past its last slot lost or skipped, and its claims given up
    /// on are remembered about that long.
    pub(super) fn claimable_until(&self, job: &JobDef, slot: EpochMs) -> EpochMs {
        let slack = signed(self.lease_ms());
        let catch_up = match job.opts.catch_up {
            CatchUp::None => 0,
            _ => job.opts.catch_up_ms(),
        };
        let window = signed(job.opts.max_late_ms().max(catch_up));
        let by_window = slot.saturating_add(window).saturating_add(slack);
        match (job.opts.catch_up, job.schedule.next_after(slot)) {
            (CatchUp::All { .. }, _) | (_, None) => by_window,
            (_, Some(next)) => by_window.min(next.saturating_add(slack)),
        }
    }

    /// The store-clock moment this instance stops waiting for a call sent now, less the
    /// error of the clock measurement, so the store can refuse to commit after it.
    pub(super) fn call_deadline(&self) -> EpochMs {
        let budget = self.cfg.store_timeout.as_millis().min(i64::MAX as u128) as i64;
        let margin = self.clock.rtt_ms.saturating_add(10);
        self.now_ms()
            .saturating_add(self.clock.offset_ms)
            .saturating_add(budget)
            .saturating_sub(margin)
    }

    /// Claims `slot` of `job`: queued for the end of the turn on a lease store, sent at once
    /// on a claim-only one.
    pub(super) fn claim(
        &mut self,
        job: Arc<JobDef>,
        slot: EpochMs,
        reason: Reason,
        not_after: EpochMs,
    ) {
        if !self.cfg.lease_store {
            self.claim_slot(job, slot, not_after);
            return;
        }
        let run = RunKey::new(job.name.clone(), slot);
        let claim = LeaseClaim {
            run: run.clone(),
            scheduled_at: slot,
            instance_id: self.cfg.instance_id.to_string(),
            lease_ms: self.lease_ms(),
            // The job's late limit; the moment this instance stops waiting for the call is
            // added when the claim is sent (`flush_claims`): a claim may wait in the queue.
            not_after,
            overlap: job.opts.overlap,
            reason,
            retention: job.opts.retention(),
        };
        self.flight_start(&run);
        let standby = reason == Reason::Scheduled
            && !self.cfg.standby_delay.is_zero()
            && self.standby.contains(&job.name);
        let order = (
            standby,
            super::slot_claim_rank(self.claim_key, job.name.as_str(), slot),
            reason != Reason::CatchUp,
        );
        self.queue_claim(QueuedClaim {
            job,
            slot,
            reason,
            claim,
            standby,
            order,
        });
    }

    /// The answer to a batch of claims (one call).
    pub(super) fn claims_answered(
        &mut self,
        items: Vec<(Arc<JobDef>, EpochMs, Reason)>,
        sent: Micros,
        result: Result<Vec<ClaimOutcome>>,
    ) {
        let e = match result {
            Ok(outcomes) if outcomes.len() == items.len() => {
                for ((job, slot, reason), outcome) in items.into_iter().zip(outcomes) {
                    self.claimed(job, slot, reason, sent, Ok(outcome));
                }
                return;
            }
            Ok(outcomes) => Error::store(
                self.cfg.store_kind,
                "claim",
                format!(
                    "a batch of {} claims was answered with {} outcomes",
                    items.len(),
                    outcomes.len()
                ),
            ),
            Err(e) => e,
        };
        // Every claim of a failed batch has an unknown outcome: each is handled as a failed
        // claim (reported once, then watched). One failed call, however many claims it
        // carried: health counts calls.
        let failures_before = self.failures;
        let mut first = Some(e);
        for (job, slot, reason) in items {
            let err = if let Some(e) = first.take() {
                e
            } else {
                Error::store(
                    self.cfg.store_kind,
                    "claim",
                    "the batch this claim was in failed (reported above)",
                )
            };
            self.claimed(job, slot, reason, sent, Err(err));
        }
        self.failures = failures_before.saturating_add(1);
        self.health.store_unreachable = self.failures >= UNREACHABLE_AFTER;
    }

    /// One claim's outcome: start, back up, or skip. [B-10, B-14]
    fn claimed(
        &mut self,
        job: Arc<JobDef>,
        slot: EpochMs,
        reason: Reason,
        sent: Micros,
        result: Result<ClaimOutcome>,
    ) {
        let key = RunKey::new(job.name.clone(), slot);
        self.flight_end(&key);
        self.count(result.is_ok());
        let outcome = match &result {
            Ok(ClaimOutcome::Won(_)) => "won",
            Ok(ClaimOutcome::Taken) => "taken",
            Ok(ClaimOutcome::Late { .. }) => "late",
            Ok(ClaimOutcome::Overlap { .. }) => "overlap",
            Err(_) => "error",
        };
        telemetry::claim(&self.cfg.instance_id, job.name.as_str(), outcome);
        let skip = |reason| Event::Skip {
            job: job.name.clone(),
            slot: to_datetime(slot),
            reason,
        };
        match &result {
            // A claim the store judged late: the next slot is claimed at once, as by an
            // instance that never lost the job (see `shed`).
            Ok(ClaimOutcome::Won(_) | ClaimOutcome::Late { .. }) => {
                self.standby.remove(&job.name);
            }
            // Standbys are only kept when they wait (`standby_delay` above zero): with the
            // default a set of every job another instance won would be held for nothing.
            Ok(ClaimOutcome::Taken)
                if !self.cfg.standby_delay.is_zero() && !self.standby.contains(&job.name) =>
            {
                self.standby.insert(job.name.clone());
            }
            _ => {}
        }
        match result {
            Ok(ClaimOutcome::Won(lease)) => {
                self.clock = super::ClockSample::measure(lease.started_at, sent, self.now);
                if self.stopping {
                    // Won while stopping: hand it straight over before stop returns. [B-34]
                    self.side_release(lease);
                    return;
                }
                // The job as registered now, as a won takeover starts it (`feed_watch`).
                match self.jobs.get(&job.name).cloned() {
                    Some(job) => self.start_leased(job, lease, sent),
                    None => {
                        // Won after the job was removed here (the claim was in flight): no
                        // handler of a job this instance no longer has; the run is handed
                        // straight over, to a backup that still has the job or to whichever
                        // instance registers it next. [B-35, B-19]
                        tracing::info!(
                            run = %key,
                            "handing over a run claimed just before its job was removed here"
                        );
                        self.side_release(lease);
                    }
                }
                return;
            }
            Ok(ClaimOutcome::Taken) => {
                self.emit(skip(SkipReason::Taken));
                // A backup watches the run it lost: the next sweep lists it. [B-14]
                let now = self.now_ms();
                self.look_out(&job.name, now);
            }
            Ok(ClaimOutcome::Late { .. }) => {
                self.note_late(&job.name, 1);
                self.emit(skip(SkipReason::Late));
                // Another instance may have claimed it in time, or may still (catch-up).
                let until = self.claimable_until(&job, slot);
                self.look_out(&job.name, until);
            }
            Ok(ClaimOutcome::Overlap { running_slot }) => {
                self.emit(skip(SkipReason::Overlap));
                self.watch(RunKey::new(job.name.clone(), running_slot), Watch::live());
                // The skipped slot may still be started by another instance's catch-up.
                let until = self.claimable_until(&job, slot);
                self.look_out(&job.name, until);
            }
            Err(e) => {
                // Unknown outcome: the claim may have committed. Watch the run; if it is
                // ours, it is released to a backup at once. [B-14]
                self.error(StoreOperation::Claim, Some(&job.name), &e);
                self.missed.insert(job.name.clone());
                let until = self.claimable_until(&job, slot);
                self.look_out(&job.name, until);
                if self.job_watches.contains_key(&key.job) {
                    self.gave_up.insert(key);
                }
            }
        }
        if reason == Reason::CatchUp {
            self.advance_catch_up(&job);
        }
    }

    /// A claim-only claim's outcome. [B-29]
    pub(super) fn slot_claimed(
        &mut self,
        job: Arc<JobDef>,
        slot: EpochMs,
        result: Result<SlotOutcome>,
    ) {
        self.count(result.is_ok());
        let outcome = match &result {
            Ok(SlotOutcome::Won) => "won",
            Ok(SlotOutcome::Late) => "late",
            Ok(SlotOutcome::Unknown) => "unknown",
            Ok(_) => "taken",
            Err(_) => "error",
        };
        telemetry::claim(&self.cfg.instance_id, job.name.as_str(), outcome);
        if matches!(result, Ok(SlotOutcome::Late)) {
            self.note_late(&job.name, 1);
        }
        let reason = match result {
            Ok(SlotOutcome::Won) => {
                // Won while stopping, or after the job was removed here: a claim-only store
                // has no handover, so the slot is not run (at most once). [B-34, B-35]
                if self.stopping || !self.jobs.contains_key(&job.name) {
                    return;
                }
                let info = RunInfo {
                    job: job.name.clone(),
                    slot: to_datetime(slot),
                    attempt: 1,
                    fence: 0,
                    reason: Reason::Scheduled,
                    manual: false,
                    instance_id: self.cfg.instance_id.to_string(),
                };
                let now = self.now_ms();
                self.start_unleased(job, info, now, None, None);
                return;
            }
            Ok(SlotOutcome::Late) => SkipReason::Late,
            Ok(SlotOutcome::Unknown) => SkipReason::Unknown,
            Ok(_) => SkipReason::Taken,
            Err(e) => {
                // The answer is lost: skip rather than risk a duplicate.
                self.error(StoreOperation::Claim, Some(&job.name), &e);
                SkipReason::Unknown
            }
        };
        self.emit(Event::Skip {
            job: job.name.clone(),
            slot: to_datetime(slot),
            reason,
        });
    }

    /// `run_now`: a manual run on this instance, no claim. [B-35]
    pub(super) fn run_now(
        &mut self,
        job: Arc<JobDef>,
        data: Option<crate::context::Data>,
        reply: super::ReplyTo,
    ) {
        if self.stopping {
            self.push(super::Effect::Reply {
                to: reply,
                answer: Err(Error::State {
                    state: crate::error::SchedulerState::Stopping,
                    hint: "run_now after stop()",
                }),
            });
            return;
        }
        let now = self.now_ms();
        let info = RunInfo {
            job: job.name.clone(),
            slot: to_datetime(now),
            attempt: 1,
            fence: 0,
            reason: Reason::Manual,
            manual: true,
            instance_id: self.cfg.instance_id.to_string(),
        };
        self.start_unleased(job, info, now, data, Some(reply));
    }

    // ----- catch-up --------------------------------------------------------------------------

    pub(super) fn start_catch_up(&mut self) {
        let mut jobs: Vec<Arc<JobDef>> = self.jobs.values().cloned().collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        for job in jobs {
            self.catch_up_job(&job);
        }
    }

    /// Queues the job's missed slots by its catch-up policy and claims the first. [B-19]
    pub(super) fn catch_up_job(&mut self, job: &Arc<JobDef>) {
        if self.stopping || !self.cfg.lease_store {
            return;
        }
        let now = self.now_ms();
        let window = signed(job.opts.catch_up_ms());
        let slots: VecDeque<EpochMs> = match job.opts.catch_up {
            _ if window == 0 => VecDeque::new(),
            CatchUp::None => VecDeque::new(),
            CatchUp::Latest => job
                .schedule
                .newest_due(now)
                .filter(|s| now.saturating_sub(*s) <= window)
                .into_iter()
                .collect(),
            CatchUp::All { max } => job
                .schedule
                .due_between(now.saturating_sub(window).saturating_sub(1), now, max)
                .into(),
        };
        let queued = self.catch_up.get(&job.name).unwrap_or(&slots);
        if let Some(newest) = job.schedule.newest_due(now)
            && !queued.contains(&newest)
        {
            self.back_up_unclaimed_slot(job, newest);
        }
        if !slots.is_empty() && !self.catch_up.contains_key(&job.name) {
            self.catch_up.insert(job.name.clone(), slots);
            self.advance_catch_up(job);
        }
    }

    /// Backs up `slot` of `job`, due before this instance scheduled the job (at start, after
    /// the store came back, or when the job was added) and not claimed here, for as long as
    /// another instance may still claim it. Such an instance (its clock behind, or it
    /// scheduled the job earlier) may be the only one that knows of the run; were it to
    /// crash, nobody would continue the run before the job's next slot (a day, for a daily
    /// job). Until the window closes the sweep looks for the run; once seen it is backed up
    /// like any other. [B-14]
    pub(super) fn back_up_unclaimed_slot(&mut self, job: &Arc<JobDef>, slot: EpochMs) {
        if !self.cfg.lease_store {
            return;
        }
        let until = self.claimable_until(job, slot);
        if until >= self.now_ms() {
            self.look_out(&job.name, until);
        }
    }

    /// Claims the next queued catch-up slot of a job, one at a time.
    pub(super) fn advance_catch_up(&mut self, job: &Arc<JobDef>) {
        if self.stopping {
            return;
        }
        let Some(queue) = self.catch_up.get_mut(&job.name) else {
            return;
        };
        let Some(slot) = queue.pop_front() else {
            self.catch_up.remove(&job.name);
            return;
        };
        let not_after = slot.saturating_add(signed(job.opts.catch_up_ms()));
        self.claim(job.clone(), slot, Reason::CatchUp, not_after);
    }

    /// The replaced run's job may start its due slot now: it may have been skipped for
    /// overlap while the dead run still looked live. [B-15]
    pub(super) fn claim_newest(&mut self, job: Option<Arc<JobDef>>) {
        if let Some(job) = job
            && !self.stopping
            && let Some(slot) = job.schedule.newest_due(self.now_ms())
        {
            let not_after = slot.saturating_add(signed(job.opts.max_late_ms()));
            self.claim(job, slot, Reason::Scheduled, not_after);
        }
    }
}
