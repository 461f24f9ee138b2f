//! Runs this instance backs up: each a [`Watch`] machine, polled every heartbeat and read at
//! once on a release notification; the takeover decision is the machine's, carried out here.

use std::collections::HashMap;
use std::sync::Arc;

use super::Core;
use super::types::{JobWatch, Micros, Timer, WATCHED_PER_JOB};
use crate::event::{Event, FailureCause, RunInfo, StoreOperation};
use crate::history::{Reason, to_datetime};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::scheduler::JobDef;
use crate::scheduler::watch::{Facts, Watch, WatchEffect, WatchInput, WatchNote};
use crate::store::{Lease, RunView, Takeover, TakeoverOutcome};

impl Core {
    /// Starts watching a run of a registered job that was seen unfinished (or named by a
    /// release notification, or written off). [B-14]
    ///
    /// A backup watches at most [`WATCHED_PER_JOB`] runs of a job besides its newest and
    /// those handed over or being taken over: when a job has more, the oldest of those
    /// whose slot is older than the job's newest due slot are no longer watched. Such a
    /// run, if its lease ends unfinished, is only ever interrupted as replaced by a newer
    /// slot, and the job's next claim does that on every lease store; a backup watching it
    /// only did it sooner. Without the bound, a store that takes claims but answers
    /// results too late leaves about `lease / interval` unfinished runs per job, every
    /// sweep lists them all, and a backup held a watch for each (3 x 10,000 `every 1s` on
    /// a saturated PostgreSQL: 270,000-541,000 watches per node by minute 6, and the
    /// node's memory grew with them). [B-14, B-15]
    pub(super) fn watch(&mut self, key: RunKey, watch: Watch) {
        if self.stopping || !self.jobs.contains_key(&key.job) {
            return;
        }
        if let std::collections::btree_map::Entry::Vacant(entry) = self.watches.entry(key) {
            let job = entry.key().job.clone();
            entry.insert(watch);
            self.leave_oldest_watches_to_the_next_claim(&job);
        }
        self.arm_watch();
    }

    /// Keeps the runs watched of `job` within the bound of [`Core::watch`].
    fn leave_oldest_watches_to_the_next_claim(&mut self, job: &JobName) {
        let of_job =
            RunKey::new(job.clone(), EpochMs::MIN)..=RunKey::new(job.clone(), EpochMs::MAX);
        let watched = self.watches.range(of_job.clone()).count();
        if watched <= WATCHED_PER_JOB + 1 {
            return;
        }
        let Some(newest_due) = self
            .jobs
            .get(job)
            .and_then(|j| j.schedule.newest_due(self.now_ms()))
        else {
            return;
        };
        let newest = self
            .watches
            .range(of_job.clone())
            .next_back()
            .map(|(k, _)| k.slot);
        let left: Vec<RunKey> = self
            .watches
            .range(of_job)
            .filter(|(k, w)| {
                Some(k.slot) != newest && k.slot < newest_due && w.may_be_left_to_the_next_claim()
            })
            .take(watched - (WATCHED_PER_JOB + 1))
            .map(|(k, _)| k.clone())
            .collect();
        for key in left {
            self.watches.remove(&key);
            // Its write was given up on: a run only ever interrupted now, never taken over,
            // so there is no `Lost` to learn of it. [B-16]
            self.written_off.remove(&key);
        }
    }

    /// Looks for the unfinished runs of `job` at every sweep until `until` (instance clock)
    /// and at least once more: the instance knows a slot of the job may have a run it does
    /// not own (it lost the claim, skipped the slot as late or overlapping, or its claim's
    /// outcome is unknown) but holds no record of that run. A sweep lists every unfinished
    /// run of the jobs it asks about, so the run, once it exists, is found there and watched
    /// like any other; until then the job is all there is to remember. One record per job
    /// however many of its slots were lost or skipped: under a store that answers nothing
    /// in time, every slot of every job is such a slot, and a record per slot would hold
    /// about `lease / interval + 1` of them per job. [B-14]
    pub(super) fn look_out(&mut self, job: &JobName, until: EpochMs) {
        if self.stopping || !self.cfg.lease_store || !self.jobs.contains_key(job) {
            return;
        }
        let noted_after = self.sweeps_sent;
        self.job_watches
            .entry(job.clone())
            .and_modify(|w| {
                w.until = w.until.max(until);
                w.noted_after = noted_after;
            })
            .or_insert(JobWatch { until, noted_after });
        self.arm_watch();
    }

    fn arm_watch(&mut self) {
        if !self.watch_armed {
            self.watch_armed = true;
            let every = self.heartbeat_every();
            self.arm_after(every, Timer::Watch);
        }
    }

    /// The backup poll: one `newest_unfinished_runs` call over the jobs of every polled
    /// watch and every job looked out for (the sweep), asking for [`super::SWEPT_PER_JOB`]
    /// runs of each job besides those handed over. A watched run the store does not list
    /// has ended (or is one of its job's older runs, which the bound of [`Core::watch`]
    /// drops anyway): it is not read run by run, so a backup's cost per heartbeat
    /// follows the runs still unfinished and the jobs, not every run it learned of since
    /// the last poll.
    pub(super) fn watch_tick(&mut self) {
        self.forget_given_up_past_their_window();
        if self.watches.is_empty() && self.job_watches.is_empty() {
            self.watch_armed = false;
            return;
        }
        let asked: Vec<RunKey> = self
            .watches
            .iter()
            .filter(|(_, w)| w.polled())
            .map(|(k, _)| k.clone())
            .collect();
        if !self.watch_in_flight && (!asked.is_empty() || !self.job_watches.is_empty()) {
            self.watch_in_flight = true;
            self.sweep(asked);
        }
        let every = self.heartbeat_every();
        self.arm_after(every, Timer::Watch);
    }

    /// Claims whose outcome this instance gave up on, of slots whose window is over and
    /// whose job has a newer slot due, with no run seen, are forgotten here without waiting
    /// for a sweep to say the run does not exist: while the store answers nothing, every
    /// failed claim leaves one such mark per job and slot. If such a run does exist (a claim
    /// that committed although its answer was lost), the job's later slots deal with it:
    /// their claim interrupts it once its lease ended, or answers `overlap` naming it (B-15,
    /// B-12). So a job keeps at most about `lease / interval + 1` marks, whatever the store
    /// does.
    fn forget_given_up_past_their_window(&mut self) {
        if self.gave_up.is_empty() {
            return;
        }
        let now = self.now_ms();
        let mut gave_up = std::mem::take(&mut self.gave_up);
        let mut newest: Option<(JobName, Option<EpochMs>)> = None;
        gave_up.retain(|name, slot| {
            let Some(job) = self.jobs.get(name) else {
                return true;
            };
            let newest_due = match &newest {
                Some((n, due)) if n == name => *due,
                _ => {
                    let due = job.schedule.newest_due(now);
                    newest = Some((name.clone(), due));
                    due
                }
            };
            let over = self.claimable_until(job, slot) < now
                && newest_due.is_some_and(|n| n > slot)
                && !self.watches.contains_key(&RunKey::new(name.clone(), slot));
            !over
        });
        self.gave_up = gave_up;
    }

    /// A sweep answered: the jobs looked out for since before it was sent whose window is
    /// over are no longer looked for (their runs, if any, were listed and are watched now).
    pub(super) fn end_job_watches(&mut self, sweep: u64) {
        let now = self.now_ms();
        self.job_watches
            .retain(|_, w| w.noted_after >= sweep || w.until >= now);
    }

    /// A sweep (`swept`) or a `runs` read was answered.
    pub(super) fn watched(
        &mut self,
        asked: Vec<RunKey>,
        sent: Micros,
        views: Vec<RunView>,
        sweep: Option<u64>,
    ) {
        let swept = sweep.is_some();
        if let Some(v) = views.first() {
            self.clock = super::ClockSample::measure(v.store_now, sent, self.now);
        }
        let mut by_key: HashMap<RunKey, RunView> =
            views.into_iter().map(|v| (v.run.clone(), v)).collect();
        for key in asked {
            match by_key.remove(&key) {
                Some(view) => self.feed_watch(&key, WatchInput::Seen(view)),
                // Ended: by whom? For a run whose write this instance gave up on, read it
                // once by key (its final attempt says whether another instance ended it; one
                // of the older runs a sweep leaves out is read so until the bound drops it or
                // the job's next claim ends it).
                None if swept && self.written_off.contains_key(&key) => self.queues.reads.push(key),
                // Ended, or (a sweep lists only the newest `SWEPT_PER_JOB` runs of a job and
                // those handed over) one of a job's older runs with an owner: no longer
                // watched either way, as the bound of `Core::watch` would have it. [B-14]
                None => self.feed_watch(&key, WatchInput::Missing),
            }
        }
        if swept {
            // The sweep lists every unfinished run of the jobs it asked about, also runs this
            // instance never heard of: a slot that only one instance claimed (its clock was
            // behind, or it alone caught the slot up) and whose owner then crashed would
            // otherwise be continued by nobody. Back them up like any lost run. [B-14]
            // In key order: the releases of orphans found here go out in it (a `HashMap`'s
            // order differs between runs, and so did the simulator's timelines).
            let mut unheard: Vec<(RunKey, RunView)> = by_key.into_iter().collect();
            unheard.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for (key, view) in unheard {
                if !self.watches.contains_key(&key)
                    && !self.is_here(&key)
                    && self.jobs.contains_key(&key.job)
                {
                    self.watch(key.clone(), Watch::listed(&view));
                    self.feed_watch(&key, WatchInput::Seen(view));
                }
            }
        }
        if let Some(sweep) = sweep {
            self.end_job_watches(sweep);
        }
    }

    /// Feeds a watched run's machine and carries out its effects.
    pub(super) fn feed_watch(&mut self, key: &RunKey, input: WatchInput) {
        let now = self.now_ms();
        let job = self.jobs.get(&key.job).cloned();
        let here = self.is_here(key);
        let gave_up = self.gave_up.contains(key);
        let stopping = self.stopping;
        let Some(w) = self.watches.get_mut(key) else {
            // No longer watched (job removed, stop): a takeover won now is handed back.
            if let WatchInput::TakeoverAnswered(Ok(TakeoverOutcome::Won(lease))) = input {
                self.side_release(lease);
            }
            return;
        };
        let facts = Facts {
            now,
            newest_due: job.as_ref().and_then(|j| j.schedule.newest_due(now)),
            instance_id: &self.cfg.instance_id,
            here,
            gave_up,
            stopping,
        };
        if let WatchInput::Seen(view) = &input {
            w.seen = Some(view.clone());
            w.named_by_release = false;
        }
        // A run whose write this instance gave up on now shows a newer attempt: it learned
        // that it lost the run. [B-16]
        let lost = match &input {
            WatchInput::Seen(view) => self
                .written_off
                .get(key)
                .filter(|held| view.attempt > held.attempt)
                .cloned(),
            _ => None,
        };
        if lost.is_some() || matches!(input, WatchInput::Missing) {
            self.written_off.remove(key);
        }
        let Some(w) = self.watches.get_mut(key) else {
            return;
        };
        let seen = w.seen.clone();
        let effects = w.handle(&facts, input);
        if w.is_gone() {
            self.watches.remove(key);
            self.gave_up.remove(key);
            self.written_off.remove(key);
        }
        if let Some(info) = lost {
            self.emit(Event::Lost(info));
        }
        for effect in effects {
            self.watch_effect(key, job.clone(), seen.as_ref(), effect);
        }
    }

    fn watch_effect(
        &mut self,
        key: &RunKey,
        job: Option<Arc<JobDef>>,
        seen: Option<&RunView>,
        effect: WatchEffect,
    ) {
        let info = || RunInfo {
            job: key.job.clone(),
            slot: to_datetime(key.slot),
            attempt: seen.map_or(0, |v| v.attempt),
            fence: 0,
            reason: Reason::Takeover,
            manual: false,
            instance_id: seen.and_then(|v| v.owner.clone()).unwrap_or_default(),
        };
        match effect {
            // Read with the other runs released in this turn: one call. [B-17]
            WatchEffect::Read => self.queues.reads.push(key.clone()),
            WatchEffect::TakeOver {
                seen_attempt,
                superseded,
            } => {
                let Some(job) = job.filter(|_| self.cfg.lease_store) else {
                    self.watches.remove(key);
                    return;
                };
                let takeover = Takeover {
                    run: key.clone(),
                    seen_attempt,
                    instance_id: self.cfg.instance_id.to_string(),
                    lease_ms: self.lease_ms(),
                    max_attempts: job.opts.max_attempts,
                    superseded,
                    not_after: self.call_deadline(),
                };
                self.flight_start(key);
                // Takeovers decided in one turn (an instance with many runs died) go out
                // together.
                self.queues.takeovers.push(takeover);
            }
            WatchEffect::Start(lease) => match job {
                Some(job) => {
                    let sent = self.takeover_sent.unwrap_or(self.now.mono);
                    self.start_leased(job, lease, sent)
                }
                None => self.side_release(lease),
            },
            WatchEffect::Release(lease) => self.side_release(lease),
            WatchEffect::ReleaseOrphan { attempt } => {
                let lease = Lease {
                    run: key.clone(),
                    attempt,
                    fence: 0,
                    instance_id: self.cfg.instance_id.to_string(),
                    reason: Reason::Takeover,
                    scheduled_at: key.slot,
                    started_at: 0,
                    expires_at: 0,
                };
                tracing::info!(
                    run = %key,
                    attempt,
                    "releasing a run this instance claimed after it had given up on the claim"
                );
                self.side_release(lease);
            }
            WatchEffect::Emit(note) => match note {
                WatchNote::Exhausted => {
                    let max = job.as_ref().map_or(0, |j| j.opts.max_attempts);
                    self.emit(Event::Failure {
                        run: info(),
                        error: FailureCause::Exhausted { max_attempts: max },
                    });
                }
                WatchNote::Replaced => self.emit(Event::Interrupted {
                    run: info(),
                    cause: crate::event::InterruptCause::ReplacedByNextSlot,
                }),
                WatchNote::TakeoverFailed(failed) => self.emit(Event::Error {
                    operation: StoreOperation::TakeOver,
                    kind: failed.kind,
                    job: Some(key.job.clone()),
                    message: failed.message,
                }),
            },
            WatchEffect::ClaimNewest => self.claim_newest(job),
        }
    }

    /// Watches still polled (for tests and the bounds).
    #[cfg(test)]
    pub(super) fn watched_runs(&self) -> usize {
        self.watches.len()
    }
}
