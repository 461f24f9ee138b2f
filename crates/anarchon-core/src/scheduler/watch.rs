//! The backup side of one run as a state machine without I/O.
//!
//! Every instance that has a job registered backs up each unfinished run of that job. What
//! it knows of a run decides how: a slot it lost (`taken`), skipped (`overlap`, `late`) or
//! whose claim failed or timed out (the outcome is unknown) makes it look out for the job's
//! unfinished runs at the next sweeps (one record per job, in the core), and each run such a
//! sweep lists, a run listed on start, one named by a release notification, or one it lost
//! to another instance becomes a [`Watch`]. The core polls the watched runs every heartbeat
//! with one `newest_unfinished_runs` call over their jobs and the jobs looked out for (each
//! job's newest runs and those handed over; a watched run not listed is fed as
//! [`WatchInput::Missing`]; it reads a run at once on a release notification), feeds the answers in as [`WatchInput`]s and carries out the
//! [`WatchEffect`]s. No clock is read here: the driver passes [`Facts`].
//!
//! Architecture invariant: a watch exists only while its run may still need a backup (not
//! final), and a job is looked out for only while one of its slots may still be claimed or
//! a sweep sent after the slot was lost has yet to answer, so an instance with nothing
//! unfinished sends nothing to the store.

use crate::ids::EpochMs;
use crate::store::{Lease, RunView, TakeoverOutcome};

/// What this instance knows of a run it does not own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchState {
    /// Seen unfinished with a live lease.
    Live,
    /// A takeover call is in flight.
    TakingOver,
    /// Nothing left to watch: the driver forgets it.
    Gone,
}

/// What the driver knows when it feeds an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts<'a> {
    /// Instance clock, epoch ms.
    pub(crate) now: EpochMs,
    /// The job's newest due slot now.
    pub(crate) newest_due: Option<EpochMs>,
    /// This instance's id.
    pub(crate) instance_id: &'a str,
    /// This instance runs the run, or has a claim or takeover of it in flight.
    pub(crate) here: bool,
    /// This instance gave up waiting for a claim or takeover of this run (a timeout or an
    /// error: its outcome is unknown). Only then is a run that shows this instance as its
    /// owner, with nothing running it here, an orphan of this life to release at once; one
    /// of an earlier life (a restart under the same instance id) or one whose result could
    /// not be written is left to expire, so its takeover counts against `max_attempts`.
    pub(crate) gave_up: bool,
    /// `stop()` was called.
    pub(crate) stopping: bool,
}

/// What happens to a watched run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchInput {
    /// A poll or read found the run.
    Seen(RunView),
    /// A poll found no such run.
    Missing,
    /// A release notification named the run.
    Released,
    /// The takeover was answered; `Err` is a store error or timeout (outcome unknown).
    TakeoverAnswered(Result<TakeoverOutcome, crate::scheduler::run::Failed>),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchEffect {
    /// Read this run now instead of at the next poll.
    Read,
    /// Try to take the run over.
    TakeOver {
        /// The attempt seen.
        seen_attempt: u32,
        /// The job's next slot is due: an expired run is replaced, not restarted. [B-15]
        superseded: bool,
    },
    /// The takeover was won: start the handler.
    Start(Lease),
    /// Won while stopping: hand it straight back.
    Release(Lease),
    /// The run is this instance's own (a claim or takeover that committed after this
    /// instance gave up on it) but nothing runs it here: release that attempt so a backup
    /// starts it at once.
    ReleaseOrphan {
        /// The attempt to release.
        attempt: u32,
    },
    /// Report.
    Emit(WatchNote),
    /// The replaced run's job may start its due slot now. [B-15]
    ClaimNewest,
}

/// What a backup reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchNote {
    /// The crash budget was used up: the run failed. [B-14]
    Exhausted,
    /// The expired run was replaced by the next slot. [B-15]
    Replaced,
    /// A store error on the takeover.
    TakeoverFailed(crate::scheduler::run::Failed),
}

/// One watched run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watch {
    pub(crate) state: WatchState,
    /// The run as last seen (for events about it).
    pub(crate) seen: Option<RunView>,
    /// Named by a release notification since it was last seen: handed over, to be
    /// continued as the same slot whatever else its job runs. [B-17]
    pub(crate) named_by_release: bool,
}

impl Watch {
    /// A run known to exist: listed by a sweep or on start, named by an `overlap` answer or
    /// a release notification, lost or written off here.
    pub(crate) fn live() -> Self {
        Watch {
            state: WatchState::Live,
            seen: None,
            named_by_release: false,
        }
    }

    /// A run listed unfinished (by a sweep or on start), as listed: a run listed without an
    /// owner (handed over) is never dropped by the bound on a job's watches before it is
    /// fed in.
    pub(crate) fn listed(view: &RunView) -> Self {
        Watch {
            seen: Some(view.clone()),
            ..Watch::live()
        }
    }

    /// A run a release notification named: handed over by its owner. [B-17]
    pub(crate) fn handed_over() -> Self {
        Watch {
            named_by_release: true,
            ..Watch::live()
        }
    }

    /// May be left to the job's next claim when the job has more runs watched than a
    /// backup keeps (see `Core::watch`): only a run last seen with an owner (or not seen
    /// yet), not named by a release notification since, with no takeover in flight. A run
    /// handed over is continued as the same slot [B-17]; one with an owner whose lease
    /// ends while a newer slot is due is only ever interrupted, which that claim does.
    /// [B-15]
    pub(crate) fn may_be_left_to_the_next_claim(&self) -> bool {
        self.state == WatchState::Live
            && !self.named_by_release
            && self.seen.as_ref().is_none_or(|view| view.owner.is_some())
    }

    /// Polled at the next heartbeat (a takeover in flight is not).
    pub(crate) fn polled(&self) -> bool {
        self.state == WatchState::Live
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.state == WatchState::Gone
    }

    /// Feeds one input; returns what to do.
    pub(crate) fn handle(&mut self, facts: &Facts<'_>, input: WatchInput) -> Vec<WatchEffect> {
        use WatchEffect as E;
        use WatchInput as I;
        use WatchState as S;
        let (next, effects) = match (&self.state, input) {
            (S::Live, I::Seen(view)) => seen(facts, &view),
            (S::Live, I::Missing) => (S::Gone, vec![]),
            (S::Live, I::Released) if !facts.here => (self.state.clone(), vec![E::Read]),
            (S::TakingOver, I::TakeoverAnswered(answer)) => match answer {
                Ok(TakeoverOutcome::Won(lease)) if facts.stopping => {
                    (S::Gone, vec![E::Release(lease)])
                }
                Ok(TakeoverOutcome::Won(lease)) => (S::Gone, vec![E::Start(lease)]),
                // Still live, another backup won, or our deadline passed: watch on.
                Ok(TakeoverOutcome::Live | TakeoverOutcome::Late) => (S::Live, vec![]),
                Ok(TakeoverOutcome::Finished(_)) => (S::Gone, vec![]),
                Ok(TakeoverOutcome::Exhausted) => (S::Gone, vec![E::Emit(WatchNote::Exhausted)]),
                Ok(TakeoverOutcome::Interrupted) => {
                    (S::Gone, vec![E::Emit(WatchNote::Replaced), E::ClaimNewest])
                }
                // Unknown outcome: if it committed, a later poll shows this instance as
                // the owner of a run nothing runs here, and it is released then.
                Err(e) => (S::Live, vec![E::Emit(WatchNote::TakeoverFailed(e))]),
            },
            // A lease won by a takeover this watch no longer waits for is never kept.
            (state, I::TakeoverAnswered(Ok(TakeoverOutcome::Won(lease)))) => {
                (state.clone(), vec![E::Release(lease)])
            }
            (state, _) => (state.clone(), vec![]),
        };
        self.state = next;
        effects
    }
}

fn seen(facts: &Facts<'_>, view: &RunView) -> (WatchState, Vec<WatchEffect>) {
    if view.status.is_final() {
        return (WatchState::Gone, vec![]);
    }
    if facts.stopping || facts.here {
        return (WatchState::Live, vec![]);
    }
    if view.is_takeable() {
        // A released run (graceful handover) is always continued as the same slot [B-17];
        // an expired one is replaced when the job's next slot is due. [B-15]
        let superseded =
            view.owner.is_some() && facts.newest_due.is_some_and(|s| s > view.run.slot);
        return (
            WatchState::TakingOver,
            vec![WatchEffect::TakeOver {
                seen_attempt: view.attempt,
                superseded,
            }],
        );
    }
    if view.owner.as_deref() == Some(facts.instance_id) && facts.gave_up {
        return (
            WatchState::Live,
            vec![WatchEffect::ReleaseOrphan {
                attempt: view.attempt,
            }],
        );
    }
    (WatchState::Live, vec![])
}

/// The transition table of [`Watch`], rendered from the machine itself; a test checks that
/// `docs/architecture.md` shows exactly this table.
#[cfg(test)]
pub(crate) mod table {
    use super::*;
    use crate::history::{Reason, RunStatus};
    use crate::ids::{JobName, RunKey};

    const SLOT: EpochMs = 1_000_000;
    const NOW: EpochMs = 1_000_500;

    fn states() -> Vec<(&'static str, WatchState)> {
        vec![
            ("live", WatchState::Live),
            ("taking over", WatchState::TakingOver),
            ("gone", WatchState::Gone),
        ]
    }

    fn view(status: RunStatus, owner: Option<&str>, expires_at: EpochMs) -> RunView {
        RunView {
            run: RunKey::new(JobName::new("job").unwrap(), SLOT),
            status,
            attempt: 1,
            owner: owner.map(str::to_owned),
            expires_at,
            store_now: NOW,
        }
    }

    fn lease() -> Lease {
        Lease {
            run: RunKey::new(JobName::new("job").unwrap(), SLOT),
            attempt: 2,
            fence: 7,
            instance_id: "me".into(),
            reason: Reason::Takeover,
            scheduled_at: SLOT,
            started_at: NOW,
            expires_at: NOW + 30_000,
        }
    }

    /// (name, input, job's next slot due, run held or in flight here, stopping)
    fn inputs() -> Vec<(&'static str, WatchInput, bool, bool, bool)> {
        use RunStatus::*;
        let seen = |v| WatchInput::Seen(v);
        let answered = |o| WatchInput::TakeoverAnswered(Ok(o));
        vec![
            (
                "seen finished",
                seen(view(Succeeded, Some("x"), NOW)),
                false,
                false,
                false,
            ),
            (
                "seen live, other owner",
                seen(view(Running, Some("x"), NOW + 100)),
                false,
                false,
                false,
            ),
            (
                "seen live, owned by this instance, nothing runs it here, gave up on its claim",
                seen(view(Running, Some("me"), NOW + 100)),
                false,
                false,
                false,
            ),
            (
                "seen live, owned by this instance, nothing runs it here (earlier life)",
                seen(view(Running, Some("me"), NOW + 100)),
                false,
                false,
                false,
            ),
            (
                "seen live, owned by this instance, run or claim here",
                seen(view(Running, Some("me"), NOW + 100)),
                false,
                true,
                false,
            ),
            (
                "seen expired",
                seen(view(Running, Some("x"), NOW - 1)),
                false,
                false,
                false,
            ),
            (
                "seen expired, next slot due",
                seen(view(Running, Some("x"), NOW - 1)),
                true,
                false,
                false,
            ),
            (
                "seen released, next slot due",
                seen(view(Running, None, NOW - 1)),
                true,
                false,
                false,
            ),
            (
                "seen expired, stopping",
                seen(view(Running, Some("x"), NOW - 1)),
                false,
                false,
                true,
            ),
            ("missing", WatchInput::Missing, false, false, false),
            (
                "release notification",
                WatchInput::Released,
                false,
                false,
                false,
            ),
            (
                "takeover won",
                answered(TakeoverOutcome::Won(lease())),
                false,
                false,
                false,
            ),
            (
                "takeover won, stopping",
                answered(TakeoverOutcome::Won(lease())),
                false,
                false,
                true,
            ),
            (
                "takeover: live",
                answered(TakeoverOutcome::Live),
                false,
                false,
                false,
            ),
            (
                "takeover: late",
                answered(TakeoverOutcome::Late),
                false,
                false,
                false,
            ),
            (
                "takeover: finished",
                answered(TakeoverOutcome::Finished(Succeeded)),
                false,
                false,
                false,
            ),
            (
                "takeover: exhausted",
                answered(TakeoverOutcome::Exhausted),
                false,
                false,
                false,
            ),
            (
                "takeover: interrupted",
                answered(TakeoverOutcome::Interrupted),
                false,
                false,
                false,
            ),
            (
                "takeover failed",
                WatchInput::TakeoverAnswered(Err("down".into())),
                false,
                false,
                false,
            ),
        ]
    }

    fn state_name(s: &WatchState) -> &'static str {
        match s {
            WatchState::Live => "live",
            WatchState::TakingOver => "taking over",
            WatchState::Gone => "gone",
        }
    }

    fn effect_name(e: &WatchEffect) -> String {
        match e {
            WatchEffect::Read => "read the run now".into(),
            WatchEffect::TakeOver { superseded, .. } => {
                if *superseded {
                    "take over (superseded)".into()
                } else {
                    "take over".into()
                }
            }
            WatchEffect::Start(_) => "start the handler".into(),
            WatchEffect::Release(_) => "release the won lease".into(),
            WatchEffect::ReleaseOrphan { .. } => "release this instance's orphaned attempt".into(),
            WatchEffect::Emit(WatchNote::Exhausted) => "emit failure (exhausted)".into(),
            WatchEffect::Emit(WatchNote::Replaced) => "emit interrupted (replaced)".into(),
            WatchEffect::Emit(WatchNote::TakeoverFailed(_)) => "emit error".into(),
            WatchEffect::ClaimNewest => "claim the newest due slot".into(),
        }
    }

    #[test]
    fn a_release_notification_of_a_run_held_here_reads_nothing() {
        // The run is this instance's own (or its claim or takeover is in flight): nothing to
        // read, and the watch stays as it was.
        let facts = Facts {
            now: NOW,
            newest_due: Some(SLOT),
            instance_id: "me",
            here: true,
            gave_up: false,
            stopping: false,
        };
        for (name, state) in states() {
            let mut w = Watch {
                state: state.clone(),
                seen: None,
                named_by_release: false,
            };
            let effects = w.handle(&facts, WatchInput::Released);
            assert!(effects.is_empty(), "{name}: {effects:?}");
            assert_eq!(w.state, state, "{name}");
        }
    }

    /// Every (state, input) pair, as markdown rows.
    pub(crate) fn render() -> String {
        let mut out = String::from("| state | input | next state | effects |\n|---|---|---|---|\n");
        for (sn, state) in states() {
            for (inn, input, due, here, stopping) in inputs() {
                let facts = Facts {
                    now: NOW,
                    newest_due: Some(if due { SLOT + 10 } else { SLOT }),
                    instance_id: "me",
                    here,
                    gave_up: inn.contains("gave up"),
                    stopping,
                };
                let mut w = Watch {
                    state: state.clone(),
                    seen: None,
                    named_by_release: false,
                };
                let effects = w.handle(&facts, input);
                let fx: Vec<String> = effects.iter().map(effect_name).collect();
                let fx = if fx.is_empty() {
                    "—".to_owned()
                } else {
                    fx.join(", ")
                };
                out.push_str(&format!(
                    "| {sn} | {inn} | {} | {fx} |\n",
                    state_name(&w.state)
                ));
            }
        }
        out
    }
}
