//! Store calls as values: what the core asks ([`Request`]), what comes back ([`Answer`]),
//! which calls go out together (the per-turn queues), and the bounds on what is in flight.
//!
//! Calls that fall due in the same turn go out together where the store batches them:
//! claims (in the instance's own order of jobs, [`claim_rank`](super::claim_rank), so the
//! instances' batches of the same due slots differ),
//! takeovers and results, in chunks of the store's limits; the runs to read after release
//! notifications go out as one `runs` call.
//!
//! Bounds: on a store that gathers claims (PostgreSQL), while [`CLAIM_CALLS_IN_FLIGHT`]
//! claim calls are out, a batch that is not full waits (claims falling due meanwhile gather
//! into it; full batches always leave), and at most [`MAX_CLAIMS_IN_FLIGHT`] claims are
//! sent and unanswered at once; on such a store, once it has answered for a second, at most
//! its pace times [`PACE_TARGET_MS`](super::pace::PACE_TARGET_MS) (see
//! [`pace`](super::pace)).
//! Results gather the same way on such a store: while
//! [`RESULT_CALLS_IN_FLIGHT`] result calls are out, a result batch that is not full waits.
//! Claims
//! beyond it wait in a queue that holds at most one slot per job (a newer slot of the same
//! job replaces the older, which is reported `late`), and a queued claim whose last moment
//! passes is reported `late` and backed up. So what an instance holds for claims does not
//! depend on how fast the store answers.
//!
//! Catch-up claims yield to slots due now: they go out after every other queued claim, and
//! at most [`catch_up_in_flight`] of them (one call's batch) are in flight at once, so a
//! start that catches up 100,000 jobs' missed slots sends them a batch at a time, a claim
//! call stays free for the slots that fall due meanwhile, and those wait behind at most that
//! batch at the store, not behind all of them. A job's catch-up still waiting when the
//! job's newer slot is claimed is superseded: late under `CatchUp::Latest`, sent ahead of
//! the newer claim under `CatchUp::All`. [B-19]

use std::sync::Arc;

use super::Core;
use super::types::{
    Answer, CLAIM_CALLS_IN_FLIGHT, CallId, HeldKey, MIN_PACED_CLAIMS, PACED_FLOOR_BATCHES, Pending,
    QueuedClaim, RESULT_CALLS_IN_FLIGHT, Request, RunId,
};
use crate::error::{Error, Result};
use crate::event::{Event, SkipReason, StoreOperation};
use crate::history::{Reason, to_datetime};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::options::CatchUp;
use crate::scheduler::JobDef;
use crate::scheduler::run::Failed;
use crate::scheduler::run::{OwnerInput, WriteAnswer};
use crate::scheduler::watch::{Watch, WatchInput};
use crate::store::{Finish, Lease, OwnerWrite, RunView, SlotClaim};

/// `queue` in chunks of at most `limit` (at least 1), in order.
pub(super) fn in_batches<T>(queue: Vec<T>, limit: usize) -> Vec<Vec<T>> {
    let limit = limit.max(1);
    let mut out = Vec::with_capacity(queue.len().div_ceil(limit));
    let mut queue = queue.into_iter().peekable();
    while queue.peek().is_some() {
        out.push(queue.by_ref().take(limit).collect());
    }
    out
}

/// The answer of a batch call, one per item: the item's outcome, or the batch's error text
/// for each item when the call failed or answered the wrong number of items.
fn per_item<T>(
    items: usize,
    what: &str,
    result: Result<Vec<T>>,
) -> Vec<std::result::Result<T, Failed>> {
    let failed = |f: Failed| (0..items).map(|_| Err(f.clone())).collect();
    match result {
        Ok(outcomes) if outcomes.len() == items => outcomes.into_iter().map(Ok).collect(),
        Ok(outcomes) => failed(Failed::from(
            format!(
                "a batch of {items} {what} was answered with {} outcomes",
                outcomes.len()
            )
            .as_str(),
        )),
        Err(e) => failed(Failed::of(&e)),
    }
}

/// How often (instance time) queued claims are checked for being late while the bound holds
/// them back.
const SHED_EVERY_MS: EpochMs = 50;

/// Catch-up claims in flight at most: one claim batch (the claim calls but one, so that on a
/// store that gathers claims a call is always free for the slots due now,
/// [`CLAIM_CALLS_IN_FLIGHT`]), at least [`MIN_CATCH_UPS_IN_FLIGHT`] for a store that takes
/// claims one per call.
pub(super) fn catch_up_in_flight(claims_per_batch: usize) -> usize {
    claims_per_batch
        .saturating_mul(CLAIM_CALLS_IN_FLIGHT - 1)
        .max(MIN_CATCH_UPS_IN_FLIGHT)
}

/// See [`catch_up_in_flight`].
const MIN_CATCH_UPS_IN_FLIGHT: usize = 64;

/// How many of `items` are catch-up claims.
fn catch_ups<'a>(reasons: impl Iterator<Item = &'a Reason>) -> usize {
    reasons.filter(|r| **r == Reason::CatchUp).count()
}

impl Core {
    /// Sends a call: an effect for the shell, remembered until answered.
    pub(super) fn call(&mut self, request: Request, pending: Pending, run: Option<RunId>) {
        self.next_call += 1;
        let id = self.next_call;
        self.calls.insert(id, pending);
        self.push(super::Effect::Call { id, request, run });
    }

    /// The claims that may be in flight now: on a store that gathers batches, the store's
    /// recent pace, within the paced floor and the configured maximum (see
    /// [`pace`](super::pace)); on any other, the maximum.
    pub(super) fn claims_bound(&mut self) -> usize {
        if !self.cfg.limits.gather_batches {
            return self.cfg.limits.claims_in_flight;
        }
        let floor = self
            .cfg
            .limits
            .claims
            .saturating_mul(PACED_FLOOR_BATCHES)
            .max(MIN_PACED_CLAIMS);
        self.queues
            .pace
            .bound(self.now.mono, floor, self.cfg.limits.claims_in_flight)
    }

    /// Queues a claim for the end of the turn.
    pub(super) fn queue_claim(&mut self, queued: QueuedClaim) {
        self.queues.claims.push(queued);
    }

    /// A queued claim that cannot go out in time: reported late, backed up.
    fn shed(&mut self, q: QueuedClaim) {
        self.flight_end(&q.claim.run);
        if q.standby {
            // Standbys' claims wait behind the others: under overload they may be shed
            // slot after slot. The job's next slot is claimed at once and in turn with the
            // claims that may win, so a job whose last winner is gone is still started.
            self.standby.remove(&q.job.name);
        }
        self.note_late(&q.job.name, 1);
        self.emit(Event::Skip {
            job: q.job.name.clone(),
            slot: to_datetime(q.slot),
            reason: SkipReason::Late,
        });
        let until = self.claimable_until(&q.job, q.slot);
        self.look_out(&q.job.name, until);
        if q.reason == Reason::CatchUp {
            self.advance_catch_up(&q.job);
        }
    }

    /// While claims wait, at most every [`SHED_EVERY_MS`] of instance time: a claim whose
    /// last moment passed is late, and so is one held back by the bound on claims in flight
    /// whose job has a newer slot queued. So the queue holds about one slot per job, and the
    /// pass costs O(queue) a few times a second, not per claim.
    pub(super) fn shed_queued_claims(&mut self) {
        let bound = (self.queues.claims_in_flight >= self.claims_bound()
            || (self.cfg.limits.gather_batches
                && self.cfg.limits.claims > 1
                && self.queues.claim_calls >= CLAIM_CALLS_IN_FLIGHT))
            && !self.queues.claims.is_empty();
        if !bound && self.queues.catch_ups.is_empty() {
            return;
        }
        let now = self.now_ms();
        if now < self.queues.next_shed_ms {
            return;
        }
        self.queues.next_shed_ms = now.saturating_add(SHED_EVERY_MS);
        let late_catch_ups: Vec<HeldKey> = self
            .queues
            .catch_ups
            .iter()
            .filter(|(_, q)| q.claim.not_after < now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut late: Vec<QueuedClaim> = late_catch_ups
            .iter()
            .filter_map(|k| self.queues.catch_ups.remove(k))
            .collect();
        if bound {
            let mut newest: std::collections::HashMap<(JobName, Reason), EpochMs> =
                std::collections::HashMap::new();
            for q in &self.queues.claims {
                let e = newest
                    .entry((q.job.name.clone(), q.reason))
                    .or_insert(q.slot);
                *e = (*e).max(q.slot);
            }
            // In place: the queue keeps its buffer (a new one every pass, megabytes under
            // overload, was page faults and zeroed pages in the kernel).
            late.extend(self.queues.claims.extract_if(.., |q| {
                q.claim.not_after < now
                    || newest
                        .get(&(q.job.name.clone(), q.reason))
                        .is_some_and(|&n| n > q.slot)
            }));
        }
        for q in late {
            self.shed(q);
        }
    }

    /// On stop, claims not sent yet are dropped (nothing new starts).
    pub(super) fn drop_queued_claims(&mut self) {
        let catch_ups = std::mem::take(&mut self.queues.catch_ups).into_values();
        for q in std::mem::take(&mut self.queues.claims)
            .into_iter()
            .chain(catch_ups)
        {
            self.flight_end(&q.claim.run);
        }
    }

    /// Sends the claims queued in this turn (as many as the bound lets out), then catch-ups
    /// as their own bound lets them (see the module docs), in batches the store takes in one
    /// round trip.
    ///
    /// It runs at the end of every turn, and under overload thousands of claims wait
    /// through hundreds of turns a second: a turn that sends nothing leaves the queue as it
    /// is, and one that sends picks its claims in O(queue) (a selection by the key drawn
    /// when each was queued), sorts only those, and keeps the queue's buffer. (Sorting and
    /// reallocating the whole queue in every turn took most of a node's CPU once SQLite
    /// fell behind at 3 x 10,000 `every 1s` jobs, and the store ran in the same processes.)
    pub(super) fn flush_claims(&mut self) {
        if self.queues.claims.is_empty() && self.queues.catch_ups.is_empty() {
            return;
        }
        let room = self
            .claims_bound()
            .saturating_sub(self.queues.claims_in_flight);
        if room == 0 {
            return;
        }
        if !self.queues.catch_ups.is_empty()
            || self
                .queues
                .claims
                .iter()
                .any(|q| q.reason == Reason::CatchUp)
        {
            let queue = std::mem::take(&mut self.queues.claims);
            self.queues.claims = self.hold_catch_ups(queue);
        }
        let limit = self.cfg.limits.claims.max(1);
        let queued = self.queues.claims.len();
        let mut send = queued.min(room);
        if queued > room && self.queues.claims_in_flight > 0 {
            // Held back by the bound: full batches only (a store that takes a batch in one
            // transaction does the most per transaction with full ones); the rest waits for
            // the next answer, which frees room.
            send = room / limit * limit;
        }
        // Held catch-ups fill the room the claims due now leave.
        let held = if queued > send {
            0
        } else {
            (room - send)
                .min(
                    catch_up_in_flight(self.cfg.limits.claims)
                        .saturating_sub(self.queues.catch_ups_in_flight),
                )
                .min(self.queues.catch_ups.len())
        };
        let mut total = send + held;
        // A batch that is not full waits while CLAIM_CALLS_IN_FLIGHT calls are out (a store
        // taking one claim a call cannot gather them): the claims falling due meanwhile
        // join it. Full batches always leave, so a burst reaches the store at once.
        if self.cfg.limits.gather_batches
            && limit > 1
            && self.queues.claim_calls >= CLAIM_CALLS_IN_FLIGHT
        {
            total = total / limit * limit;
        }
        if total == 0 {
            return;
        }
        let send = send.min(total);
        // In this instance's own order of jobs, drawn anew for every slot
        // (`slot_claim_rank`), so that the instances' batches of the same due slots differ
        // and, under overload, no job waits behind the others slot after slot; one job's
        // catch-up ahead of its newer claim. Stores that lock a batch's jobs lock them in
        // name order themselves, so batches that share jobs wait for each other but never
        // deadlock. Standbys' claims (most likely `taken`) after the others, so that under
        // overload the store's time goes to the claims that may win.
        if send < queued {
            self.queues
                .claims
                .select_nth_unstable_by_key(send, |q| q.order);
        }
        let mut queue: Vec<QueuedClaim> = self.queues.claims.drain(..send).collect();
        queue.sort_unstable_by_key(|q| q.order);
        for _ in send..total {
            match self.queues.catch_ups.pop_first() {
                Some((_, q)) => queue.push(q),
                None => break,
            }
        }
        if queue.is_empty() {
            return;
        }
        // Never commit after this instance stopped waiting for the call. [B-10]
        let deadline = self.call_deadline();
        if self.cfg.limits.gather_batches {
            self.queues
                .pace
                .sent(self.now.mono, self.queues.claims_in_flight);
        }
        self.queues.claims_in_flight += queue.len();
        self.queues.catch_ups_in_flight += catch_ups(queue.iter().map(|q| &q.reason));
        for batch in in_batches(queue, limit) {
            let mut items = Vec::with_capacity(batch.len());
            let mut claims = Vec::with_capacity(batch.len());
            for q in batch {
                items.push((q.job, q.slot, q.reason));
                let mut claim = q.claim;
                claim.not_after = claim.not_after.min(deadline);
                claims.push(claim);
            }
            let sent = self.now.mono;
            self.queues.claim_calls += 1;
            self.call(
                Request::Claim { claims },
                Pending::Claims { items, sent },
                None,
            );
        }
    }

    /// Moves the catch-ups of `queue` to the held catch-ups, except those of jobs with a
    /// newer claim in `queue`, and takes held catch-ups of such jobs out again. Such a
    /// catch-up is superseded by its job's newer slot: under `CatchUp::Latest` it is late
    /// (sent first, it would win and make the slot due now skip as overlap); under
    /// `CatchUp::All` it goes out ahead of the newer claim, the order the policy replays
    /// slots in. Returns what stays in the queue.
    fn hold_catch_ups(&mut self, queue: Vec<QueuedClaim>) -> Vec<QueuedClaim> {
        let key = self.claim_key;
        let mut due: std::collections::HashMap<JobName, EpochMs> = std::collections::HashMap::new();
        for q in queue.iter().filter(|q| q.reason != Reason::CatchUp) {
            let newest = due.entry(q.job.name.clone()).or_insert(q.slot);
            *newest = (*newest).max(q.slot);
        }
        let mut keep = Vec::with_capacity(queue.len());
        let mut superseded = Vec::new();
        for q in queue {
            if q.reason != Reason::CatchUp {
                keep.push(q);
            } else if !due.contains_key(&q.job.name) {
                let rank = super::claim_rank(key, q.job.name.as_str());
                self.queues
                    .catch_ups
                    .insert((rank, q.job.name.clone(), q.slot), q);
            } else {
                superseded.push(q);
            }
        }
        for job in due.keys() {
            let rank = super::claim_rank(key, job.as_str());
            let held: Vec<HeldKey> = self
                .queues
                .catch_ups
                .range((rank, job.clone(), EpochMs::MIN)..=(rank, job.clone(), EpochMs::MAX))
                .map(|(k, _)| k.clone())
                .collect();
            superseded.extend(held.iter().filter_map(|k| self.queues.catch_ups.remove(k)));
        }
        for q in superseded {
            let replays = matches!(q.job.opts.catch_up, CatchUp::All { .. });
            if replays || q.slot >= due[&q.job.name] {
                keep.push(q);
            } else {
                self.shed(q);
            }
        }
        keep
    }

    /// Reads the runs released in this turn in one call (a burst of release notifications,
    /// a stopping instance handing over many runs, is one read, not one per run).
    pub(super) fn flush_reads(&mut self) {
        if self.queues.reads.is_empty() {
            return;
        }
        let mut keys = std::mem::take(&mut self.queues.reads);
        keys.sort();
        keys.dedup();
        self.read_runs(keys);
    }

    /// Sends the takeovers queued in this turn, in batches.
    pub(super) fn flush_takeovers(&mut self) {
        if self.queues.takeovers.is_empty() {
            return;
        }
        let limit = self.cfg.limits.takeovers;
        for batch in in_batches(std::mem::take(&mut self.queues.takeovers), limit) {
            let keys: Vec<RunKey> = batch.iter().map(|t| t.run.clone()).collect();
            self.call(
                Request::TakeOver { takeovers: batch },
                Pending::Takeovers {
                    keys,
                    sent: self.now.mono,
                },
                None,
            );
        }
    }

    /// Sends the results queued in this turn, in batches.
    pub(super) fn flush_finishes(&mut self) {
        if self.queues.finishes.is_empty() {
            return;
        }
        let limit = self.cfg.limits.finishes;
        let mut queue = std::mem::take(&mut self.queues.finishes);
        // As claims: a batch that is not full waits while RESULT_CALLS_IN_FLIGHT result
        // calls are out, and the results ending meanwhile join it.
        if self.cfg.limits.gather_results
            && limit > 1
            && self.queues.result_calls >= RESULT_CALLS_IN_FLIGHT
        {
            let full = queue.len() / limit * limit;
            self.queues.finishes = queue.split_off(full);
        }
        for batch in in_batches(queue, limit) {
            let (ids, writes): (Vec<RunId>, Vec<(Lease, Finish)>) = batch
                .into_iter()
                .map(|(id, lease, finish)| (id, (lease, finish)))
                .unzip();
            // A batch of one stays in its run's span; a larger one has no single parent.
            let parent = match ids.as_slice() {
                [id] => Some(*id),
                _ => None,
            };
            self.queues.result_calls += 1;
            self.call(Request::Finish { writes }, Pending::Writes { ids }, parent);
        }
    }

    /// Routes an answer to what asked for it.
    pub(super) fn answered(&mut self, id: CallId, answer: Answer) {
        let Some(pending) = self.calls.remove(&id) else {
            return;
        };
        match (pending, answer) {
            (Pending::Claims { items, sent }, Answer::Claims(result)) => {
                self.queues.claim_calls = self.queues.claim_calls.saturating_sub(1);
                self.queues.claims_in_flight =
                    self.queues.claims_in_flight.saturating_sub(items.len());
                if self.cfg.limits.gather_batches {
                    // Only a store that gathers batches is paced (see `claims_bound`).
                    let answered = if result.as_ref().is_ok_and(|o| o.len() == items.len()) {
                        items.len()
                    } else {
                        0
                    };
                    self.queues.pace.answered(
                        self.now.mono,
                        answered,
                        self.queues.claims_in_flight,
                    );
                }
                self.queues.catch_ups_in_flight = self
                    .queues
                    .catch_ups_in_flight
                    .saturating_sub(catch_ups(items.iter().map(|(_, _, r)| r)));
                self.claims_answered(items, sent, result);
            }
            (Pending::Slot { job, slot }, Answer::Slot(result)) => {
                self.slot_claimed(job, slot, result)
            }
            (Pending::Heartbeat { ids, sent }, Answer::Renewals(result)) => {
                self.heartbeat_done(ids, sent, result)
            }
            (Pending::Runs { asked, sent }, Answer::Runs(result)) => {
                self.count(result.is_ok());
                match result {
                    Ok(views) => self.watched(asked, sent, views, None),
                    Err(e) => self.error(StoreOperation::Runs, None, &e),
                }
            }
            (Pending::Sweep { asked, sent, sweep }, Answer::Runs(result)) => {
                self.watch_in_flight = false;
                self.count(result.is_ok());
                match result {
                    Ok(views) => self.watched(asked, sent, views, Some(sweep)),
                    Err(e) => self.error(StoreOperation::Sweep, None, &e),
                }
            }
            (Pending::Takeovers { keys, sent }, Answer::Takeovers(result)) => {
                // One call, however many takeovers it carried: health counts calls.
                self.count(result.is_ok());
                let answers = per_item(keys.len(), "takeovers", result);
                self.takeover_sent = Some(sent);
                for (key, answer) in keys.into_iter().zip(answers) {
                    self.flight_end(&key);
                    if answer.is_err() && self.watches.contains_key(&key) {
                        self.gave_up.insert(key.clone());
                    }
                    self.feed_watch(&key, WatchInput::TakeoverAnswered(answer));
                }
                self.takeover_sent = None;
            }
            (Pending::Writes { ids }, Answer::Writes(result)) => {
                // Only result batches answer `Writes` (see flush_finishes).
                self.queues.result_calls = self.queues.result_calls.saturating_sub(1);
                self.count(result.is_ok());
                let answers = per_item(ids.len(), "results", result)
                    .into_iter()
                    .map(|a| match a {
                        Ok(OwnerWrite::Done) => WriteAnswer::Done,
                        Ok(OwnerWrite::Lost) => WriteAnswer::Lost,
                        Err(message) => WriteAnswer::Failed(message),
                    });
                for (id, answer) in ids.into_iter().zip(answers) {
                    self.feed_owner(id, OwnerInput::WriteAnswered(answer));
                }
            }
            (Pending::Writes { ids }, Answer::Released(result)) => {
                let result = result.map(|w| vec![w]);
                self.answered_writes(ids, result);
            }
            (Pending::Writes { ids }, Answer::Recorded(result)) => {
                let result = result.map(|()| vec![OwnerWrite::Done]);
                self.answered_writes(ids, result);
            }
            (Pending::SideRelease { key }, Answer::Released(result)) => {
                self.side_writes = self.side_writes.saturating_sub(1);
                self.count(result.is_ok());
                if let Err(e) = result {
                    self.error(StoreOperation::Release, Some(&key.job), &e);
                    // Unknown: keep watching it (not while stopping).
                    self.watch(key, Watch::live());
                }
            }
            (Pending::StartRecord { run, job }, Answer::Recorded(result)) => {
                if let Err(e) = result {
                    self.emit(Event::Error {
                        operation: StoreOperation::Record,
                        kind: e.kind(),
                        job: Some(job),
                        message: e.to_string(),
                    });
                }
                self.start_recorded(run);
            }
            (Pending::Unfinished, Answer::Runs(result)) => {
                self.adopt(result);
                self.start_catch_up();
            }
            (Pending::Adopt, Answer::Runs(result)) => self.adopt(result),
            (pending, answer) => {
                // A shell bug: an answer of the wrong kind. Report it; the call's subject is
                // left to its timers and watches.
                let e = Error::store(
                    self.cfg.store_kind,
                    "answer",
                    format!("the answer {answer:?} does not fit the call {pending:?}"),
                );
                self.error(StoreOperation::Answer, None, &e);
            }
        }
    }

    /// The unfinished runs listed on start or for a job added while running: orphans are
    /// taken over, the rest watched. [B-19]
    fn adopt(&mut self, result: Result<Vec<RunView>>) {
        self.count(result.is_ok());
        match result {
            Ok(views) => {
                for v in views {
                    let key = v.run.clone();
                    self.watch(key.clone(), Watch::listed(&v));
                    self.feed_watch(&key, WatchInput::Seen(v));
                }
            }
            Err(e) => self.error(StoreOperation::UnfinishedRuns, None, &e),
        }
    }

    fn answered_writes(&mut self, ids: Vec<RunId>, result: Result<Vec<OwnerWrite>>) {
        self.count(result.is_ok());
        let answers = per_item(ids.len(), "results", result);
        for (id, answer) in ids.into_iter().zip(answers) {
            let answer = match answer {
                Ok(OwnerWrite::Done) => WriteAnswer::Done,
                Ok(OwnerWrite::Lost) => WriteAnswer::Lost,
                Err(message) => WriteAnswer::Failed(message),
            };
            self.feed_owner(id, OwnerInput::WriteAnswered(answer));
        }
    }

    /// A claim-only claim.
    pub(super) fn claim_slot(&mut self, job: Arc<JobDef>, slot: EpochMs, not_after: EpochMs) {
        let claim = SlotClaim {
            run: RunKey::new(job.name.clone(), slot),
            instance_id: self.cfg.instance_id.to_string(),
            not_after,
        };
        self.call(Request::ClaimSlot(claim), Pending::Slot { job, slot }, None);
    }

    /// Reads the watched runs released in this turn (the poll is `Core::sweep`).
    pub(super) fn read_runs(&mut self, asked: Vec<RunKey>) {
        if !self.cfg.lease_store {
            return;
        }
        let sent = self.now.mono;
        self.call(
            Request::Runs(asked.clone()),
            Pending::Runs { asked, sent },
            None,
        );
    }

    /// The backup poll: lists the unfinished runs of the jobs of `asked` and of the jobs
    /// looked out for in one call; every asked run missing from the answer is fed as
    /// `WatchInput::Missing` (ended).
    pub(super) fn sweep(&mut self, asked: Vec<RunKey>) {
        if !self.cfg.lease_store {
            self.watch_in_flight = false;
            return;
        }
        let mut jobs: Vec<JobName> = asked
            .iter()
            .map(|k| k.job.clone())
            .chain(self.job_watches.keys().cloned())
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        self.sweeps_sent += 1;
        let sweep = self.sweeps_sent;
        let sent = self.now.mono;
        self.call(
            Request::Sweep(jobs),
            Pending::Sweep { asked, sent, sweep },
            None,
        );
    }

    /// Releases a lease this instance holds but will not run (won while stopping, or an
    /// orphan of its own), tracked so stop waits for it.
    pub(super) fn side_release(&mut self, lease: Lease) {
        if !self.cfg.lease_store {
            return;
        }
        self.side_writes += 1;
        let key = lease.run.clone();
        self.call(Request::Release(lease), Pending::SideRelease { key }, None);
    }

    /// Lists the unfinished runs of the jobs at start. [B-19]
    pub(super) fn list_unfinished(&mut self, names: Vec<JobName>) {
        self.call(Request::Unfinished(names), Pending::Unfinished, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_order_and_respect_the_limit() {
        let batches = in_batches((0..7).collect::<Vec<_>>(), 3);
        assert_eq!(batches, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        assert_eq!(in_batches(vec![1, 2], 0), vec![vec![1], vec![2]]);
        assert!(in_batches(Vec::<u8>::new(), 4).is_empty());
    }

    #[test]
    fn a_short_batch_answer_fails_every_item() {
        let answers = per_item(3, "claims", Ok(vec![1, 2]));
        assert!(answers.iter().all(|a| {
            a.as_ref().is_err_and(|e| {
                e.message
                    .contains("a batch of 3 claims was answered with 2")
            })
        }));
    }
}
