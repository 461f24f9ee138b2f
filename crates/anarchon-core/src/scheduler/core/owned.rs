//! Runs this instance owns: starting them, their result writes (each an
//! [`OwnerRun`] machine, whose effects are carried out here), heartbeats and self-fencing.

use std::sync::Arc;
use std::time::Duration;

use super::Core;
use super::types::{Effect, HandlerStart, Micros, Owned, Pending, ReplyTo, Request, RunId, Timer};
use crate::context::{CancelCause, Data};
use crate::error::{Error, Result};
use crate::event::{Event, InterruptCause, RunInfo, StoreOperation};
use crate::history::{Reason, RunStatus};
use crate::ids::EpochMs;
use crate::scheduler::JobDef;
use crate::scheduler::run::{Note, OwnerEffect, OwnerInput, OwnerRun, Write};
use crate::scheduler::telemetry;
use crate::scheduler::watch::Watch;
use crate::store::{Finish, Lease, Renewal};

/// The run holds its lease for `health().leases_held`: running, or writing its result.
fn holds_lease(o: &Owned) -> bool {
    o.lease.is_some() && (o.machine.renews() || o.machine.is_writing())
}

impl Core {
    /// How long after its last confirmed renewal a lease can no longer be counted on: the
    /// lease less one heartbeat. Self-fencing and the handler's lease deadline use it.
    fn lease_margin(&self) -> Duration {
        Duration::from_millis(
            self.lease_ms()
                .saturating_sub(self.cfg.timing.heartbeat_ms()),
        )
    }

    /// Starts a run from a lease won by a claim or a takeover.
    /// Starts a run from a lease won by a claim or a takeover sent at `sent`. The lease is
    /// counted from when the call was sent, as a renewal is: an answer that arrives after
    /// the lease can no longer be counted on (a process frozen or starved while the call was
    /// out) starts nothing here, since a backup may already have taken the run over; the
    /// slot is `late` here and the run is backed up like any other. [B-16, G-02]
    pub(super) fn start_leased(&mut self, job: Arc<JobDef>, lease: Lease, sent: Micros) {
        if self.now.mono.saturating_sub(sent) >= super::micros(self.lease_margin()) {
            let key = lease.run.clone();
            self.note_late(&key.job, 1);
            self.emit(Event::Skip {
                job: key.job.clone(),
                slot: crate::history::to_datetime(key.slot),
                reason: crate::event::SkipReason::Late,
            });
            self.watch(key, Watch::live());
            return;
        }
        let info = super::info_of(&lease);
        let started_at = lease.started_at;
        self.start_run(job, info, Some(lease), started_at, (None, None), sent);
    }

    /// Starts a run without a lease (manual, claim-only) and writes its `running` record.
    pub(super) fn start_unleased(
        &mut self,
        job: Arc<JobDef>,
        info: RunInfo,
        started_at: EpochMs,
        data: Option<Data>,
        reply: Option<ReplyTo>,
    ) {
        let now = self.now.mono;
        let id = self.start_run(job, info, None, started_at, (data, reply), now);
        let Some(o) = self.runs.get_mut(&id) else {
            return;
        };
        o.start_pending = true;
        let record = o.record(RunStatus::Running, None, None);
        let retention = o.job.opts.retention();
        let claim_only = !self.cfg.lease_store && !o.info.manual;
        let job = o.info.job.clone();
        self.call(
            Request::Record {
                record,
                retention,
                claim_only,
            },
            Pending::StartRecord { run: id, job },
            Some(id),
        );
    }

    fn start_run(
        &mut self,
        job: Arc<JobDef>,
        info: RunInfo,
        lease: Option<Lease>,
        started_at: EpochMs,
        (data, reply): (Option<Data>, Option<ReplyTo>),
        renewed: Micros,
    ) -> RunId {
        self.next_run += 1;
        let id = self.next_run;
        let now = self.now.mono;
        let lease_deadline = lease
            .as_ref()
            .and_then(|_| renewed.checked_add(super::micros(self.lease_margin())));
        let scheduled_at = lease.as_ref().map_or(info.slot_ms(), |l| l.scheduled_at);
        if let Some(l) = &lease {
            self.held.insert(l.run.clone(), id);
        }
        let leased = lease.is_some();
        if !info.manual {
            let lag = self.now_ms().saturating_sub(info.slot_ms()).max(0);
            telemetry::start_lag(
                &self.cfg.instance_id,
                info.job.as_str(),
                info.reason,
                Duration::from_millis(lag as u64),
            );
        }
        self.emit(Event::Start(info.clone()));
        self.push(Effect::StartHandler(Box::new(HandlerStart {
            run: id,
            job: job.clone(),
            info: info.clone(),
            scheduled_at,
            lease_deadline,
            data,
        })));
        if let Some(timeout) = job.opts.timeout {
            self.arm_after(timeout, Timer::Timeout { run: id });
        }
        self.runs.insert(
            id,
            Owned {
                job,
                info,
                lease,
                machine: OwnerRun::new(leased),
                started: now,
                started_at,
                scheduled_at,
                last_renewed: renewed,
                start_pending: false,
                held_write: None,
                reply,
            },
        );
        if leased && !self.heartbeat_armed {
            self.heartbeat_armed = true;
            let every = self.heartbeat_every();
            self.arm_after(every, Timer::Heartbeat);
        }
        if leased {
            self.health.leases_held = self.health.leases_held.saturating_add(1);
        }
        id
    }

    /// A handler returned; `cause` is why its signal was cancelled, if it was. `recorded`:
    /// its fenced transaction recorded the attempt's success and committed
    /// ([`crate::JobContext::mark_finished_in_transaction`]), so the store holds the result
    /// and nothing is written for it, whatever the handler returned.
    pub(crate) fn handler_returned(
        &mut self,
        now: super::Now,
        run: RunId,
        result: std::result::Result<(), String>,
        cause: Option<CancelCause>,
        recorded: bool,
    ) {
        self.now = now;
        let input = if recorded {
            OwnerInput::HandlerRecorded
        } else {
            OwnerInput::HandlerReturned { result, cause }
        };
        self.feed_owner(run, input);
    }

    /// Feeds an owner run's machine and carries out its effects.
    pub(super) fn feed_owner(&mut self, id: RunId, input: OwnerInput) {
        let Some(o) = self.runs.get_mut(&id) else {
            return;
        };
        let counted = holds_lease(o);
        let effects = o.machine.handle(input);
        for effect in effects {
            self.owner_effect(id, effect);
        }
        let Some(o) = self.runs.get(&id) else {
            return;
        };
        // `leases_held` counts runs whose lease is theirs until their result is written: a
        // run recorded failed (timed out) whose handler still runs under its abort grace is
        // no longer one.
        if counted && !holds_lease(o) {
            self.health.leases_held = self.health.leases_held.saturating_sub(1);
        }
        if o.machine.is_finished() {
            if let Some(l) = &o.lease
                && self.held.get(&l.run) == Some(&id)
            {
                self.held.remove(&l.run);
            }
            self.runs.remove(&id);
            self.push(Effect::Forget { run: id });
        }
    }

    fn owner_effect(&mut self, id: RunId, effect: OwnerEffect) {
        let Some(o) = self.runs.get_mut(&id) else {
            return;
        };
        match effect {
            OwnerEffect::Cancel(cause) => self.push(Effect::Cancel { run: id, cause }),
            OwnerEffect::Write(write) => self.write_result(id, write),
            OwnerEffect::ArmAbort => {
                let grace = self.cfg.abort_grace;
                self.arm_after(grace, Timer::AbortGrace { run: id });
            }
            OwnerEffect::Abort => self.push(Effect::Abort { run: id }),
            OwnerEffect::Reply(outcome) => {
                let Some(to) = o.reply.take() else {
                    return;
                };
                let answer = match outcome {
                    Some((status, error)) => {
                        let error = match (status, error) {
                            (RunStatus::Interrupted, None) => Some("stopped".to_owned()),
                            (_, e) => e,
                        };
                        Ok(o.record(status, error, Some(self.now.epoch_ms())))
                    }
                    None => Err(Error::State {
                        state: crate::error::SchedulerState::Stopped,
                        hint: "the run outlived stop()'s timeout",
                    }),
                };
                self.push(Effect::Reply { to, answer });
            }
            OwnerEffect::Emit(note) => self.owner_note(id, note),
        }
    }

    fn owner_note(&mut self, id: RunId, note: Note) {
        let Some(o) = self.runs.get(&id) else {
            return;
        };
        let info = o.info.clone();
        let job = o.job.clone();
        let key = o.lease.as_ref().map(|l| l.run.clone());
        let duration = Duration::from_micros(self.now.mono.saturating_sub(o.started));
        // A write that failed and is sent once more leaves the run in `writing`.
        let retrying = o.machine.is_writing();
        let terminal = match note {
            Note::Fenced => false,
            Note::WriteFailed(_) => !retrying,
            _ => true,
        };
        match note {
            Note::Fenced => self.emit(Event::Fenced(info.clone())),
            Note::Lost => {
                // [B-16] Another instance owns the run now; back it up.
                self.emit(Event::Lost(info.clone()));
                if let Some(key) = key {
                    self.watch(key, Watch::live());
                }
            }
            Note::Succeeded => self.emit(Event::Success {
                run: info.clone(),
                duration,
            }),
            Note::Failed(error) => self.emit(Event::Failure {
                run: info.clone(),
                error,
            }),
            Note::Interrupted(cause) => {
                self.emit(Event::Interrupted {
                    run: info.clone(),
                    cause,
                });
                // Handed over after self-fencing (not stopping): this instance still has the
                // job and knows the run is unfinished, so it backs up the next attempt like
                // every other instance (`watch` ignores it while stopping). Found by the
                // simulator, seed 68: the only instance not frozen was the one that had
                // handed the run over, and nobody continued the expired next attempt.
                if cause == InterruptCause::HandedOver
                    && let Some(key) = key
                {
                    self.watch(key, Watch::live());
                }
            }
            Note::WriteFailed(failed) => {
                self.emit(Event::Error {
                    operation: StoreOperation::Finish,
                    kind: failed.kind,
                    job: Some(info.job.clone()),
                    message: failed.message,
                });
                // The outcome is unknown and no retry is left: if the run is still ours in
                // the store, the watch releases it to a backup once it is gone here.
                if !retrying && let Some(key) = key {
                    self.written_off.insert(key.clone(), info.clone());
                    self.watch(key, Watch::live());
                }
            }
        }
        if terminal && info.reason == Reason::CatchUp {
            self.advance_catch_up(&job);
        }
    }

    fn write_result(&mut self, id: RunId, write: Write) {
        let Some(o) = self.runs.get_mut(&id) else {
            return;
        };
        let retention = o.job.opts.retention();
        let finished_at = self.now.epoch_ms();
        let Some(lease) = o.lease.clone() else {
            // Manual runs and claim-only runs: history only.
            let (status, error) = match &write {
                Write::Finish { status, error } => (*status, error.clone()),
                Write::Release => (RunStatus::Interrupted, Some("stopped".into())),
            };
            let record = o.record(status, error, Some(finished_at));
            let request = Request::Record {
                record,
                retention,
                claim_only: !self.cfg.lease_store && !o.info.manual,
            };
            if o.start_pending {
                o.held_write = Some(Box::new(request));
            } else {
                self.call(request, Pending::Writes { ids: vec![id] }, Some(id));
            }
            return;
        };
        match write {
            Write::Finish { status, error } => {
                let finish = Finish {
                    status,
                    error,
                    retention,
                };
                // Results of runs that end in one turn of the loop go out together.
                self.queues.finishes.push((id, lease, finish));
            }
            Write::Release => {
                self.call(
                    Request::Release(lease),
                    Pending::Writes { ids: vec![id] },
                    Some(id),
                );
            }
        }
    }

    /// The `running` record of a run without a lease was answered: its final record, if it
    /// is waiting, goes out now.
    pub(super) fn start_recorded(&mut self, id: RunId) {
        let Some(o) = self.runs.get_mut(&id) else {
            return;
        };
        o.start_pending = false;
        if let Some(request) = o.held_write.take() {
            self.call(*request, Pending::Writes { ids: vec![id] }, Some(id));
        }
    }

    // ----- heartbeat and self-fencing ------------------------------------------------------

    pub(super) fn heartbeat(&mut self) {
        let lease_ms = self.lease_ms();
        let now = self.now.mono;
        // Self-fencing: cancel before the lease can have expired, judged on the monotonic
        // clock from the last renewal that succeeded (counted from when it was sent).
        let fence_after = super::micros(self.lease_margin());
        let mut overdue: Vec<RunId> = self
            .runs
            .iter()
            .filter(|(_, o)| {
                o.machine.renews() && now.saturating_sub(o.last_renewed) >= fence_after
            })
            .map(|(id, _)| *id)
            .collect();
        overdue.sort_unstable();
        for id in overdue {
            self.feed_owner(id, OwnerInput::RenewalOverdue);
        }
        // A run whose handler ended holds its lease until its result is written. While the
        // result waits for a batch or its call is out, the lease is renewed too once less
        // than two heartbeats of the self-fencing margin are left, or a slow store (or
        // results gathered behind other result calls) would let it expire and a backup run
        // the slot again although its handler finished. [B-13, B-16] Not at every
        // heartbeat: the result normally lands long before (the default lease is 30 s, the
        // wait two store timeouts at worst), and on PostgreSQL a renewal of a row that a
        // result batch holds waits for that batch while holding the rows it renewed.
        let writing_after = fence_after.saturating_sub(super::micros(self.heartbeat_every()));
        let mut renew: Vec<(RunId, Lease)> = self
            .runs
            .iter()
            .filter(|(_, o)| {
                o.machine.renews()
                    || (o.machine.is_writing()
                        && now.saturating_sub(o.last_renewed) >= writing_after)
            })
            .filter_map(|(id, o)| o.lease.clone().map(|l| (*id, l)))
            .collect();
        if !self.runs.values().any(holds_lease) {
            self.heartbeat_armed = false;
            return;
        }
        renew.sort_unstable_by_key(|(id, _)| *id);
        if !self.heartbeat_in_flight && !renew.is_empty() {
            self.heartbeat_in_flight = true;
            let (ids, leases): (Vec<RunId>, Vec<Lease>) = renew.into_iter().unzip();
            self.call(
                Request::Heartbeat { leases, lease_ms },
                Pending::Heartbeat { ids, sent: now },
                None,
            );
        }
        let every = self.heartbeat_every();
        self.arm_after(every, Timer::Heartbeat);
    }

    pub(super) fn heartbeat_done(
        &mut self,
        ids: Vec<RunId>,
        sent: Micros,
        result: Result<Vec<Renewal>>,
    ) {
        self.heartbeat_in_flight = false;
        self.count(result.is_ok());
        let renewals = match result {
            Ok(renewals) => renewals,
            Err(e) => {
                self.error(StoreOperation::Heartbeat, None, &e);
                return;
            }
        };
        let mut store_now = None;
        let deadline = sent.checked_add(super::micros(self.lease_margin()));
        for (id, renewal) in ids.into_iter().zip(renewals) {
            let Some(o) = self.runs.get_mut(&id) else {
                continue;
            };
            if o.machine.is_writing() {
                // Its result's own answer says how the run ended: a renewal that lost the
                // race with the result (the run is no longer running) changes nothing.
                if let (Renewal::Renewed { expires_at }, Some(l)) = (&renewal, o.lease.as_mut()) {
                    l.expires_at = *expires_at;
                    o.last_renewed = o.last_renewed.max(sent);
                }
                continue;
            }
            if !o.machine.renews() {
                continue;
            }
            match renewal {
                Renewal::Renewed { expires_at } => {
                    o.last_renewed = o.last_renewed.max(sent);
                    if let Some(l) = o.lease.as_mut() {
                        l.expires_at = expires_at;
                    }
                    if let Some(at) = deadline {
                        self.push(Effect::ExtendDeadline { run: id, at });
                    }
                    store_now =
                        Some(expires_at.saturating_sub(
                            self.cfg.timing.lease_ms().min(i64::MAX as u64) as EpochMs,
                        ));
                }
                // [B-16] Another instance owns the run now.
                Renewal::Lost => self.feed_owner(id, OwnerInput::RenewalLost),
            }
        }
        if let Some(store_now) = store_now {
            self.clock = super::ClockSample::measure(store_now, sent, self.now);
            let due = self
                .last_skew_event
                .is_none_or(|t| self.now.mono.saturating_sub(t) > 60_000_000);
            let rtt = (self.now.mono.saturating_sub(sent) / 1_000).min(i64::MAX as u64) as i64;
            if due
                && let Some(event) =
                    super::skew_event(self.now_ms(), store_now, rtt, self.cfg.skew_threshold_ms)
            {
                self.last_skew_event = Some(self.now.mono);
                self.emit(event);
            }
        }
    }
}
