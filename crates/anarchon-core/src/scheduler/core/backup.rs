//! Runs this instance backs up: each a [`Watch`] machine, polled every heartbeat and read at
//! once on a release notification; the takeover decision is the machine's, carried out here.

use std::collections::HashMap;
use std::sync::Arc;

use super::Core;
use super::types::{Micros, Timer};
use crate::event::{Event, FailureCause, RunInfo, StoreOperation};
use crate::history::{Reason, to_datetime};
use crate::ids::RunKey;
use crate::scheduler::JobDef;
use crate::scheduler::watch::{Facts, Watch, WatchEffect, WatchInput, WatchNote, WatchState};
use crate::store::{Lease, RunView, Takeover, TakeoverOutcome};

impl Core {
    /// Starts watching a run of a registered job (or upgrades a pending watch once the run
    /// was seen). [B-14]
    pub(super) fn watch(&mut self, key: RunKey, watch: Watch) {
        if self.stopping || !self.jobs.contains_key(&key.job) {
            return;
        }
        match self.watches.get_mut(&key) {
            Some(existing) => {
                if matches!(existing.state, WatchState::Pending { .. })
                    && watch.state == WatchState::Live
                {
                    existing.state = WatchState::Live;
                }
            }
            None => {
                self.watches.insert(key, watch);
            }
        }
        if !self.watch_armed {
            self.watch_armed = true;
            let every = self.heartbeat_every();
            self.arm_after(every, Timer::Watch);
        }
    }

    /// The backup poll: one `unfinished_runs` call over the jobs of every polled watch (the
    /// sweep). A watched run the store does not list as unfinished has ended (or was never
    /// claimed): it is not read run by run, so a backup's cost per heartbeat follows the
    /// runs still unfinished, not every run it learned of since the last poll.
    pub(super) fn watch_tick(&mut self) {
        self.drop_pending_past_their_window();
        if self.watches.is_empty() {
            self.watch_armed = false;
            return;
        }
        let asked: Vec<RunKey> = self
            .watches
            .iter()
            .filter(|(_, w)| w.polled())
            .map(|(k, _)| k.clone())
            .collect();
        if !self.watch_in_flight && !asked.is_empty() {
            self.watch_in_flight = true;
            self.sweep(asked);
        }
        let every = self.heartbeat_every();
        self.arm_after(every, Timer::Watch);
    }

    /// Pending watches (a slot someone may still claim, never seen as a run: claims that were
    /// late, skipped as overlap, or failed with an unknown outcome) whose window is over and
    /// whose job has a newer slot due end here, without waiting for a sweep to say the run
    /// does not exist. While the store answers, the sweep ends them the same way (`Missing`
    /// past the window); while it does not (an outage, a store 100 times slower), every
    /// failed claim left one such watch per job and slot and they piled up with the length of
    /// the stall (measured: 230,000 per instance after 2 minutes at 2,000 `every 1s` jobs).
    /// If such a run does exist (a claim that committed although its answer was lost), the
    /// job's later slots deal with it: their claim interrupts it once its lease ended, or
    /// answers `overlap` naming it, which makes the claimer watch it (B-15, B-12). So a job
    /// keeps at most about `lease / interval + 1` pending watches, whatever the store does.
    fn drop_pending_past_their_window(&mut self) {
        let now = self.now_ms();
        let jobs = &self.jobs;
        let over: Vec<RunKey> = self
            .watches
            .iter()
            .filter(|(key, w)| {
                matches!(w.state, WatchState::Pending { until } if until < now)
                    && jobs
                        .get(&key.job)
                        .and_then(|j| j.schedule.newest_due(now))
                        .is_some_and(|newest| newest > key.slot)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in over {
            self.watches.remove(&key);
            self.gave_up.remove(&key);
            self.written_off.remove(&key);
        }
    }

    /// A sweep (`swept`) or a `runs` read was answered.
    pub(super) fn watched(
        &mut self,
        asked: Vec<RunKey>,
        sent: Micros,
        views: Vec<RunView>,
        swept: bool,
    ) {
        if let Some(v) = views.first() {
            self.clock = super::ClockSample::measure(v.store_now, sent, self.now);
        }
        let mut by_key: HashMap<RunKey, RunView> =
            views.into_iter().map(|v| (v.run.clone(), v)).collect();
        for key in asked {
            match by_key.remove(&key) {
                Some(view) => self.feed_watch(&key, WatchInput::Seen(view)),
                // Ended: by whom? For a run whose write this instance gave up on, read it
                // once by key (its final attempt says whether another instance ended it).
                None if swept && self.written_off.contains_key(&key) => self.queues.reads.push(key),
                None => self.feed_watch(&key, WatchInput::Missing),
            }
        }
        if swept {
            // The sweep lists every unfinished run of the jobs it asked about, also runs this
            // instance never heard of: a slot that only one instance claimed (its clock was
            // behind, or it alone caught the slot up) and whose owner then crashed would
            // otherwise be continued by nobody. Back them up like any lost run. [B-14]
            for (key, view) in by_key {
                if !self.watches.contains_key(&key)
                    && !self.is_here(&key)
                    && self.jobs.contains_key(&key.job)
                {
                    self.watch(key.clone(), Watch::live());
                    self.feed_watch(&key, WatchInput::Seen(view));
                }
            }
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
