//! The owner side of one run as a state machine without I/O.
//!
//! A run this instance started (won claim, takeover, catch-up, manual run, claim-only win)
//! is an [`OwnerRun`]. The driver feeds it [`OwnerInput`]s (the handler returned, the
//! timeout passed, a renewal was answered, stop ...) and carries out the [`OwnerEffect`]s it
//! hands back (cancel the signal, write the result, emit an event, abort the handler). It
//! reads no clock and touches no store, task or timer, so every transition is a plain unit
//! test, and `docs/architecture.md` holds the table a test walks.
//!
//! Architecture invariant: a run renews its lease only in [`OwnerState::Running`]; once a
//! result is being written, the run is lost or abandoned, nothing renews it again.

use crate::context::CancelCause;
pub(crate) use crate::error::ErrorKind;
pub(crate) use crate::event::FailureCause;
use crate::history::RunStatus;

/// A store call that failed: what kind of failure, and the error's whole chain as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

impl Failed {
    pub(crate) fn of(error: &crate::error::Error) -> Self {
        Failed {
            kind: error.kind(),
            message: crate::scheduler::telemetry::error_chain(error),
        }
    }
}

impl From<&str> for Failed {
    /// A store failure with this message (a batch answered wrongly, tests).
    fn from(message: &str) -> Self {
        Failed {
            kind: ErrorKind::Store,
            message: message.to_owned(),
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The result write an owner makes once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Record the attempt as succeeded or failed.
    Finish {
        status: RunStatus,
        error: Option<String>,
    },
    /// Hand the run over (lease stores) or record it interrupted "stopped" (runs without a
    /// lease).
    Release,
}

pub(crate) use crate::event::InterruptCause;

/// What an owner run reports; the driver turns it into an [`crate::Event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Note {
    /// Self-fenced: the lease could not be renewed in time.
    Fenced,
    /// Another instance owns the run now.
    Lost,
    /// The result was recorded as succeeded.
    Succeeded,
    /// The result was recorded as failed.
    Failed(FailureCause),
    /// The run ended without a result.
    Interrupted(InterruptCause),
    /// The result write failed (store error or timeout).
    WriteFailed(Failed),
}

/// The answer to an owner write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WriteAnswer {
    Done,
    /// The fence no longer matched: another attempt owns the run.
    Lost,
    /// Store error or timeout: the outcome is unknown.
    Failed(Failed),
}

/// The owner's states. The handler runs in `Running` and possibly in `Writing`/`Draining`
/// (after a timeout or a lost lease it keeps running until it returns or is aborted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerState {
    /// The handler runs; a leased run renews its lease. `fenced` once self-fencing
    /// cancelled the signal (reported once).
    Running { fenced: bool },
    /// The result write is in flight; `handler_running` after a timeout. `retry`: a failed
    /// write of a leased run's result is sent once more before the run is left to a backup
    /// (it is fenced, so it records nothing over a newer attempt, and it spares a backup
    /// from running a finished handler again).
    Writing {
        write: Write,
        handler_running: bool,
        retry: bool,
    },
    /// Nothing is left to write; the handler (cancelled) has yet to return.
    Draining,
    /// Done: the driver forgets the run.
    Finished,
}

/// What happens to an owner run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerInput {
    /// The handler returned; `cause` is why its signal was cancelled, if it was.
    HandlerReturned {
        result: Result<(), String>,
        cause: Option<CancelCause>,
    },
    /// The handler returned after a fenced transaction recorded its success and committed
    /// (the store holds the result already: nothing is written).
    HandlerRecorded,
    /// The job's timeout passed.
    TimeoutElapsed,
    /// The handler outlived its timeout by the grace.
    AbortGraceElapsed,
    /// A heartbeat said the lease is another attempt's now.
    RenewalLost,
    /// No renewal succeeded for `lease - heartbeat`: the lease may expire soon.
    RenewalOverdue,
    /// `stop()` was called.
    Stop,
    /// Stop's timeout passed.
    StopDeadline,
    /// The result write was answered.
    WriteAnswered(WriteAnswer),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerEffect {
    /// Cancel the run's signal with this cause.
    Cancel(CancelCause),
    /// Send the result write.
    Write(Write),
    /// Report.
    Emit(Note),
    /// Arm the abort grace timer.
    ArmAbort,
    /// Abort the handler's task now.
    Abort,
    /// Answer a waiting `run_now` caller: the final status, or `None` when the run was
    /// abandoned.
    Reply(Option<(RunStatus, Option<String>)>),
}

/// One run owned by this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnerRun {
    pub(crate) state: OwnerState,
    /// The run holds a lease (lease stores, not manual): it renews and hands over.
    pub(crate) leased: bool,
    /// `stop()` was called: a failed result write is not sent again.
    pub(crate) stopping: bool,
    /// The job's timeout passed: the failure written is the timeout's.
    pub(crate) timed_out: bool,
}

impl OwnerRun {
    pub(crate) fn new(leased: bool) -> Self {
        OwnerRun {
            state: OwnerState::Running { fenced: false },
            leased,
            stopping: false,
            timed_out: false,
        }
    }

    /// A leased run's result (not a hand-over) gets one more try when its write fails.
    fn retries(&self, write: &Write) -> bool {
        self.leased && matches!(write, Write::Finish { .. })
    }

    /// The result write is in flight.
    pub(crate) fn is_writing(&self) -> bool {
        matches!(self.state, OwnerState::Writing { .. })
    }

    /// The lease is renewed in this state.
    pub(crate) fn renews(&self) -> bool {
        self.leased && matches!(self.state, OwnerState::Running { .. })
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.state == OwnerState::Finished
    }

    /// Feeds one input; returns what to do.
    pub(crate) fn handle(&mut self, input: OwnerInput) -> Vec<OwnerEffect> {
        use OwnerEffect as E;
        use OwnerInput as I;
        use OwnerState as S;
        if input == I::Stop {
            self.stopping = true;
        }
        let (next, effects) = match (&self.state, input) {
            // ----- the handler runs
            (S::Running { .. }, I::HandlerReturned { result, cause }) => {
                let write = match result {
                    Ok(()) => Write::Finish {
                        status: RunStatus::Succeeded,
                        error: None,
                    },
                    // An error because the owner had to let go hands the run over. [B-17]
                    Err(_) if cause.is_some_and(CancelCause::hands_over) => Write::Release,
                    Err(e) => Write::Finish {
                        status: RunStatus::Failed,
                        error: Some(e),
                    },
                };
                (
                    S::Writing {
                        retry: self.retries(&write),
                        write: write.clone(),
                        handler_running: false,
                    },
                    vec![E::Write(write)],
                )
            }
            // The handler's own fenced transaction recorded the success: nothing to write.
            (S::Running { .. }, I::HandlerRecorded) if self.leased => (
                S::Finished,
                vec![
                    E::Emit(Note::Succeeded),
                    E::Reply(Some((RunStatus::Succeeded, None))),
                ],
            ),
            // Not leased (never fenceable): an ordinary success.
            (S::Running { .. }, I::HandlerRecorded) => {
                let write = Write::Finish {
                    status: RunStatus::Succeeded,
                    error: None,
                };
                (
                    S::Writing {
                        retry: self.retries(&write),
                        write: write.clone(),
                        handler_running: false,
                    },
                    vec![E::Write(write)],
                )
            }
            (S::Running { .. }, I::TimeoutElapsed) => {
                // [B-21] Failed at once; the handler gets the grace to return, then is aborted.
                self.timed_out = true;
                let write = Write::Finish {
                    status: RunStatus::Failed,
                    error: Some("timed out".into()),
                };
                (
                    S::Writing {
                        retry: self.retries(&write),
                        write: write.clone(),
                        handler_running: true,
                    },
                    vec![
                        E::Cancel(CancelCause::TimedOut),
                        E::Write(write),
                        E::ArmAbort,
                    ],
                )
            }
            (S::Running { .. }, I::RenewalLost) => (
                // [B-16] Nothing of ours may be recorded over the new owner's.
                S::Draining,
                vec![E::Cancel(CancelCause::LeaseLost), E::Emit(Note::Lost)],
            ),
            (S::Running { fenced: false }, I::RenewalOverdue) if self.leased => (
                S::Running { fenced: true },
                vec![
                    E::Cancel(CancelCause::LeaseNotRenewed),
                    E::Emit(Note::Fenced),
                ],
            ),
            (S::Running { fenced }, I::Stop) => (
                S::Running { fenced: *fenced },
                vec![E::Cancel(CancelCause::Stopping)],
            ),
            (S::Running { .. }, I::StopDeadline) => (
                // No more renewals: a backup takes over once the lease expires. [B-17]
                S::Finished,
                vec![
                    E::Emit(Note::Interrupted(InterruptCause::StopTimeout)),
                    E::Abort,
                    E::Reply(None),
                ],
            ),
            // ----- the result is being written
            (
                S::Writing {
                    write,
                    handler_running: true,
                    retry,
                },
                I::HandlerReturned { .. } | I::HandlerRecorded,
            ) => (
                S::Writing {
                    write: write.clone(),
                    handler_running: false,
                    retry: *retry,
                },
                vec![],
            ),
            (
                S::Writing {
                    write,
                    handler_running: true,
                    retry,
                },
                I::AbortGraceElapsed,
            ) => (
                S::Writing {
                    write: write.clone(),
                    handler_running: false,
                    retry: *retry,
                },
                vec![E::Abort],
            ),
            // The write failed or timed out (most often under load): sent once more, unless
            // stopping (stop does not wait for a second round).
            (
                S::Writing {
                    write,
                    handler_running,
                    retry: true,
                },
                I::WriteAnswered(WriteAnswer::Failed(e)),
            ) if !self.stopping => (
                S::Writing {
                    write: write.clone(),
                    handler_running: *handler_running,
                    retry: false,
                },
                vec![E::Emit(Note::WriteFailed(e)), E::Write(write.clone())],
            ),
            (
                S::Writing {
                    write,
                    handler_running,
                    ..
                },
                I::WriteAnswered(answer),
            ) => {
                let (status, error) = match write {
                    Write::Finish { status, error } => (*status, error.clone()),
                    Write::Release => (RunStatus::Interrupted, None),
                };
                let note = match answer {
                    WriteAnswer::Done => match write {
                        Write::Finish {
                            status: RunStatus::Succeeded,
                            ..
                        } => Note::Succeeded,
                        Write::Finish { error, .. } => Note::Failed(if self.timed_out {
                            FailureCause::TimedOut
                        } else {
                            FailureCause::Handler(error.clone().unwrap_or_else(|| "failed".into()))
                        }),
                        Write::Release if self.leased => {
                            Note::Interrupted(InterruptCause::HandedOver)
                        }
                        Write::Release => Note::Interrupted(InterruptCause::Stopped),
                    },
                    WriteAnswer::Lost => Note::Lost,
                    WriteAnswer::Failed(e) => Note::WriteFailed(e),
                };
                let next = if *handler_running {
                    S::Draining
                } else {
                    S::Finished
                };
                (next, vec![E::Emit(note), E::Reply(Some((status, error)))])
            }
            (
                S::Writing {
                    handler_running, ..
                },
                I::StopDeadline,
            ) => {
                // Stop waits for a write no longer: it has its own store timeout.
                let mut effects = vec![E::Reply(None)];
                if *handler_running {
                    effects.insert(0, E::Abort);
                }
                (S::Finished, effects)
            }
            // ----- nothing left to write
            (S::Draining, I::HandlerReturned { .. }) => (S::Finished, vec![]),
            // The lease was reported lost because the handler's fenced transaction had
            // already recorded the success: the store holds it, say so.
            (S::Draining, I::HandlerRecorded) => (S::Finished, vec![E::Emit(Note::Succeeded)]),
            (S::Draining, I::AbortGraceElapsed | I::StopDeadline) => (S::Finished, vec![E::Abort]),
            // Everything else changes nothing: late answers, repeated signals.
            (state, _) => (state.clone(), vec![]),
        };
        self.state = next;
        effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(e: &str) -> Write {
        Write::Finish {
            status: RunStatus::Failed,
            error: Some(e.into()),
        }
    }

    #[test]
    fn stop_then_error_hands_over_and_is_not_a_failure() {
        let mut run = OwnerRun::new(true);
        assert_eq!(
            run.handle(OwnerInput::Stop),
            vec![OwnerEffect::Cancel(CancelCause::Stopping)]
        );
        assert!(run.renews(), "renewed until the handler returns");
        let fx = run.handle(OwnerInput::HandlerReturned {
            result: Err("cancelled".into()),
            cause: Some(CancelCause::Stopping),
        });
        assert_eq!(fx, vec![OwnerEffect::Write(Write::Release)]);
        assert!(!run.renews());
        let fx = run.handle(OwnerInput::WriteAnswered(WriteAnswer::Done));
        assert_eq!(
            fx[0],
            OwnerEffect::Emit(Note::Interrupted(InterruptCause::HandedOver))
        );
        assert!(run.is_finished());
    }

    #[test]
    fn a_run_without_a_lease_stopped_is_recorded_stopped_not_handed_over() {
        let mut run = OwnerRun::new(false);
        run.handle(OwnerInput::Stop);
        let fx = run.handle(OwnerInput::HandlerReturned {
            result: Err("cancelled".into()),
            cause: Some(CancelCause::Stopping),
        });
        assert_eq!(fx, vec![OwnerEffect::Write(Write::Release)]);
        let fx = run.handle(OwnerInput::WriteAnswered(WriteAnswer::Done));
        assert_eq!(
            fx[0],
            OwnerEffect::Emit(Note::Interrupted(InterruptCause::Stopped))
        );
    }

    #[test]
    fn a_run_without_a_lease_writes_its_success_even_if_told_its_handler_recorded_it() {
        // Only a leased run's handler can record its end in a fenced transaction; one
        // without a lease writes its result as usual.
        let mut leased = OwnerRun::new(true);
        let fx = leased.handle(OwnerInput::HandlerRecorded);
        assert_eq!(fx[0], OwnerEffect::Emit(Note::Succeeded));
        assert!(leased.is_finished());
        let mut unleased = OwnerRun::new(false);
        let fx = unleased.handle(OwnerInput::HandlerRecorded);
        assert_eq!(
            fx,
            vec![OwnerEffect::Write(Write::Finish {
                status: RunStatus::Succeeded,
                error: None,
            })]
        );
    }

    #[test]
    fn a_failed_store_call_reads_as_its_message() {
        let failed = Failed::from("the store said no");
        assert_eq!(failed.to_string(), "the store said no");
        assert_eq!(failed.kind, ErrorKind::Store);
    }

    #[test]
    fn timeout_fails_at_once_and_aborts_after_the_grace() {
        let mut run = OwnerRun::new(true);
        let fx = run.handle(OwnerInput::TimeoutElapsed);
        assert_eq!(
            fx,
            vec![
                OwnerEffect::Cancel(CancelCause::TimedOut),
                OwnerEffect::Write(failed("timed out")),
                OwnerEffect::ArmAbort
            ]
        );
        run.handle(OwnerInput::WriteAnswered(WriteAnswer::Done));
        assert_eq!(run.state, OwnerState::Draining);
        assert_eq!(
            run.handle(OwnerInput::AbortGraceElapsed),
            vec![OwnerEffect::Abort]
        );
        assert!(run.is_finished());
    }

    #[test]
    fn a_lost_run_writes_nothing_even_when_its_handler_succeeds() {
        let mut run = OwnerRun::new(true);
        run.handle(OwnerInput::RenewalLost);
        let fx = run.handle(OwnerInput::HandlerReturned {
            result: Ok(()),
            cause: Some(CancelCause::LeaseLost),
        });
        assert!(fx.is_empty());
        assert!(run.is_finished());
    }

    #[test]
    fn a_run_its_transaction_finished_writes_nothing_and_reports_success() {
        let mut run = OwnerRun::new(true);
        let fx = run.handle(OwnerInput::HandlerRecorded);
        assert_eq!(
            fx,
            vec![
                OwnerEffect::Emit(Note::Succeeded),
                OwnerEffect::Reply(Some((RunStatus::Succeeded, None)))
            ]
        );
        assert!(run.is_finished());
        // The heartbeat saw the run finished by the transaction first: reported lost, then
        // the handler's return says what happened.
        let mut run = OwnerRun::new(true);
        run.handle(OwnerInput::RenewalLost);
        assert_eq!(
            run.handle(OwnerInput::HandlerRecorded),
            vec![OwnerEffect::Emit(Note::Succeeded)]
        );
        assert!(run.is_finished());
    }

    #[test]
    fn fencing_is_reported_once_and_only_for_leased_runs() {
        let mut run = OwnerRun::new(true);
        assert_eq!(run.handle(OwnerInput::RenewalOverdue).len(), 2);
        assert!(run.handle(OwnerInput::RenewalOverdue).is_empty());
        let mut manual = OwnerRun::new(false);
        assert!(manual.handle(OwnerInput::RenewalOverdue).is_empty());
    }

    #[test]
    fn a_handler_error_after_the_local_deadline_hands_over() {
        let mut run = OwnerRun::new(true);
        let fx = run.handle(OwnerInput::HandlerReturned {
            result: Err("cancelled".into()),
            cause: Some(CancelCause::LeaseDeadlinePassed),
        });
        assert_eq!(fx, vec![OwnerEffect::Write(Write::Release)]);
    }

    #[test]
    fn a_failed_result_write_is_sent_once_more_unless_stopping() {
        let after_a_failed_write = |stopping: bool| {
            let mut run = OwnerRun::new(true);
            let cause = if stopping {
                run.handle(OwnerInput::Stop);
                Some(CancelCause::Stopping)
            } else {
                None
            };
            let fx = run.handle(OwnerInput::HandlerReturned {
                result: Ok(()),
                cause,
            });
            assert!(
                fx.iter()
                    .any(|e| matches!(e, OwnerEffect::Write(Write::Finish { .. }))),
                "{fx:?}"
            );
            run.handle(OwnerInput::WriteAnswered(WriteAnswer::Failed(
                "down".into(),
            )))
        };
        let sent_again = |fx: &[OwnerEffect]| fx.iter().any(|e| matches!(e, OwnerEffect::Write(_)));
        assert!(sent_again(&after_a_failed_write(false)));
        assert!(
            !sent_again(&after_a_failed_write(true)),
            "stop does not wait for a second round"
        );
    }
}

/// The transition table of [`OwnerRun`], rendered from the machine itself; a test checks
/// that `docs/architecture.md` shows exactly this table.
#[cfg(test)]
pub(crate) mod table {
    use super::*;

    fn states() -> Vec<(&'static str, OwnerState)> {
        vec![
            ("running", OwnerState::Running { fenced: false }),
            ("running, fenced", OwnerState::Running { fenced: true }),
            (
                "writing",
                OwnerState::Writing {
                    write: Write::Finish {
                        status: RunStatus::Succeeded,
                        error: None,
                    },
                    handler_running: false,
                    retry: true,
                },
            ),
            (
                "writing, last try",
                OwnerState::Writing {
                    write: Write::Finish {
                        status: RunStatus::Succeeded,
                        error: None,
                    },
                    handler_running: false,
                    retry: false,
                },
            ),
            (
                "writing, handler running",
                OwnerState::Writing {
                    write: Write::Finish {
                        status: RunStatus::Failed,
                        error: Some("timed out".into()),
                    },
                    handler_running: true,
                    retry: true,
                },
            ),
            ("draining", OwnerState::Draining),
            ("finished", OwnerState::Finished),
        ]
    }

    fn inputs() -> Vec<(&'static str, OwnerInput)> {
        let returned =
            |result: Result<(), String>, cause| OwnerInput::HandlerReturned { result, cause };
        vec![
            ("handler returned Ok", returned(Ok(()), None)),
            (
                "handler returned an error",
                returned(Err("boom".into()), None),
            ),
            (
                "handler returned an error after stop",
                returned(Err("cancelled".into()), Some(CancelCause::Stopping)),
            ),
            (
                "handler returned an error after its lease deadline",
                returned(
                    Err("cancelled".into()),
                    Some(CancelCause::LeaseDeadlinePassed),
                ),
            ),
            (
                "handler returned, its transaction recorded the success",
                OwnerInput::HandlerRecorded,
            ),
            ("timeout", OwnerInput::TimeoutElapsed),
            ("abort grace over", OwnerInput::AbortGraceElapsed),
            ("renewal lost", OwnerInput::RenewalLost),
            ("renewal overdue", OwnerInput::RenewalOverdue),
            ("stop", OwnerInput::Stop),
            ("stop deadline", OwnerInput::StopDeadline),
            ("write done", OwnerInput::WriteAnswered(WriteAnswer::Done)),
            ("write lost", OwnerInput::WriteAnswered(WriteAnswer::Lost)),
            (
                "write failed",
                OwnerInput::WriteAnswered(WriteAnswer::Failed("down".into())),
            ),
        ]
    }

    fn state_name(s: &OwnerState) -> String {
        states()
            .into_iter()
            .find(|(_, x)| x == s)
            .map(|(n, _)| n.to_owned())
            .unwrap_or_else(|| match s {
                OwnerState::Writing {
                    write: Write::Release,
                    ..
                } => "writing (release)".into(),
                OwnerState::Writing {
                    write: Write::Finish { status, .. },
                    handler_running,
                    retry,
                } => format!(
                    "writing ({}){}{}",
                    status.as_str(),
                    if *handler_running {
                        ", handler running"
                    } else {
                        ""
                    },
                    if *retry { "" } else { ", last try" }
                ),
                other => format!("{other:?}"),
            })
    }

    fn write_name(w: &Write) -> String {
        match w {
            Write::Release => "release".into(),
            Write::Finish { status, error } => match error {
                Some(e) => format!("{} ({e})", status.as_str()),
                None => status.as_str().into(),
            },
        }
    }

    fn effect_name(e: &OwnerEffect) -> String {
        match e {
            OwnerEffect::Cancel(c) => format!("cancel ({c})"),
            OwnerEffect::Write(w) => format!("write {}", write_name(w)),
            OwnerEffect::Emit(n) => match n {
                Note::Fenced => "emit fenced".into(),
                Note::Lost => "emit lost".into(),
                Note::Succeeded => "emit success".into(),
                Note::Failed(e) => format!("emit failure ({e})"),
                Note::Interrupted(c) => format!("emit interrupted ({})", c.as_str()),
                Note::WriteFailed(_) => "emit error".into(),
            },
            OwnerEffect::ArmAbort => "arm abort grace".into(),
            OwnerEffect::Abort => "abort handler".into(),
            OwnerEffect::Reply(Some((s, _))) => format!("reply {}", s.as_str()),
            OwnerEffect::Reply(None) => "reply abandoned".into(),
        }
    }

    /// Every (state, input) pair of a leased run, as markdown rows.
    pub(crate) fn render() -> String {
        let mut out = String::from("| state | input | next state | effects |\n|---|---|---|---|\n");
        for (sn, state) in states() {
            for (inn, input) in inputs() {
                let mut run = OwnerRun {
                    timed_out: matches!(
                        state,
                        OwnerState::Writing {
                            handler_running: true,
                            ..
                        }
                    ),
                    state: state.clone(),
                    leased: true,
                    stopping: false,
                };
                let effects = run.handle(input);
                let fx: Vec<String> = effects.iter().map(effect_name).collect();
                let fx = if fx.is_empty() {
                    "—".to_owned()
                } else {
                    fx.join(", ")
                };
                let next = state_name(&run.state);
                out.push_str(&format!("| {sn} | {inn} | {next} | {fx} |\n"));
            }
        }
        out
    }
}
