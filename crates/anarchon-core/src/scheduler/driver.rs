//! The driver: the tokio shell around the scheduler's [`Core`].
//!
//! It owns what the core may not: the tokio tasks (store calls bounded by `store_timeout`,
//! handlers), the channels, the timers (tokio's and the precise wake thread), the watchdog
//! and the runs' cancellation controls and spans. It turns what happens into the core's
//! inputs, with the time read once per input, and carries out the effects the core hands
//! back. It decides nothing about a run or a slot.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::core::{
    Answer, CallId, ClockSample, Core, CoreCommand, CoreConfig, CoreHealth, Effect, HandlerStart,
    Limits, Micros, Request, RunId,
};
use super::wake::PreciseWake;
use super::{Backend, Command, JobDef, Shared, telemetry};
use crate::context::{Data, JobContext, RunControl};
use crate::error::{BoxError, Result};
use crate::event::Event;
use crate::history::{RunRecord, to_datetime};
use crate::ids::RunKey;

pub(crate) use super::exec::{bounded, prepare};
pub(crate) use super::watchdog::mono_ms;

/// Messages the loop handles in one turn beyond the first (see [`run`]).
const INBOX_DRAIN: usize = 1024;

enum Msg {
    Answer {
        id: CallId,
        answer: Answer,
    },
    HandlerDone {
        run: RunId,
        result: std::result::Result<(), BoxError>,
    },
}

/// What the shell keeps of a run the core owns.
struct RunTask {
    control: Arc<RunControl>,
    handler: Option<AbortHandle>,
    /// The run's `anarchon.run` span: its store writes are children of it.
    span: tracing::Span,
    started: Instant,
}

struct Shell {
    shared: Arc<Shared>,
    core: Core,
    /// The monotonic clock's origin: the core's µs count from it.
    origin: Instant,
    msgs: mpsc::UnboundedSender<Msg>,
    tasks: JoinSet<()>,
    runs: HashMap<RunId, RunTask>,
    replies: HashMap<u64, oneshot::Sender<Result<RunRecord>>>,
    next_reply: u64,
    stop_replies: Vec<oneshot::Sender<()>>,
    published: CoreHealth,
    /// The data of a run with none (no scheduler, job or manual data): one shared value
    /// rather than one allocation per run.
    no_data: Arc<Data>,
}

/// The core's configuration from the scheduler's.
fn core_config(shared: &Shared) -> CoreConfig {
    let (lease_store, limits) = match &shared.backend {
        Backend::Lease(s) => (true, Limits::of(Some(s.limits()))),
        Backend::Claim(_) => (false, Limits::of(None)),
    };
    let cfg = &shared.cfg;
    // Jitter needs spread between instances, not secrecy: the instance id and the time.
    let seed = cfg
        .instance_id
        .bytes()
        .fold(cfg.clock.now_micros() as u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    CoreConfig {
        instance_id: cfg.instance_id.clone(),
        timing: cfg.timing,
        store_timeout: cfg.store_timeout,
        skew_threshold_ms: cfg.skew_threshold_ms,
        abort_grace: cfg.abort_grace,
        lease_store,
        store_kind: shared.backend.history().kind(),
        limits,
        seed,
        standby_delay: cfg.standby_delay,
    }
}

/// The driver task's body.
pub(crate) async fn run(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobDef>>,
    clock: ClockSample,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let (msgs, mut inbox) = mpsc::unbounded_channel();
    let watchdog_stop = Arc::new(AtomicBool::new(false));
    super::watchdog::spawn(&shared, watchdog_stop.clone());
    let mut releases = match &shared.backend {
        Backend::Lease(s) => s.subscribe_releases(),
        Backend::Claim(_) => None,
    };
    let origin = Instant::now();
    let core = Core::new(
        core_config(&shared),
        super::exec::now(&shared, origin),
        clock,
        jobs,
    );
    let mut s = Shell {
        shared,
        core,
        origin,
        msgs,
        tasks: JoinSet::new(),
        runs: HashMap::new(),
        replies: HashMap::new(),
        next_reply: 0,
        stop_replies: Vec::new(),
        published: CoreHealth::default(),
        no_data: Arc::new(Data::new()),
    };
    let tick = super::watchdog::tick(&s.shared);
    let mut next_tick = Instant::now() + tick;
    // On the system clock a thread wakes the driver at its timers to the tens of µs; tokio's
    // wheel (1 ms, rounded up) stays armed beside it. See `wake`.
    let mut precise = match s.shared.cfg.clock {
        super::Clock::System => PreciseWake::start(),
        #[cfg(feature = "testkit")]
        super::Clock::SystemShifted { .. } => PreciseWake::start(),
        super::Clock::Tokio { .. } => None,
    };
    s.perform();
    loop {
        s.shared
            .health
            .last_turn_ms
            .store(mono_ms(), Ordering::Relaxed);
        let next = s.core.poll_timeout().map(|at| s.instant(at));
        if let Some(p) = precise.as_mut() {
            p.set(next);
        }
        tokio::select! {
            biased;
            Some(cmd) = commands.recv() => s.command(cmd),
            _ = shutdown.cancelled(), if !s.stopping() => {
                // The last handle was dropped, or the parent token was cancelled.
                let timeout = s.shared.cfg.default_stop_timeout;
                s.input(|core, now| core.handle_command(now, CoreCommand::Stop { timeout }));
            }
            Some(msg) = inbox.recv() => {
                s.message(msg);
                // Answers that arrived together are handled in one turn, so what they
                // cause (results to write, claims) goes out in one batch. Bounded, so
                // commands and timers wait at most one such turn.
                for _ in 0..INBOX_DRAIN {
                    match inbox.try_recv() {
                        Ok(msg) => s.message(msg),
                        Err(_) => break,
                    }
                }
            }
            Some(key) = recv_release(&mut releases) => {
                s.input(|core, now| core.handle_release(now, key));
            }
            // One tokio timer for the core's next wake-up and the watchdog's tick: the loop
            // turns at least every tick.
            _ = tokio::time::sleep_until(next.map_or(next_tick, |n| n.min(next_tick))) => {
                if Instant::now() >= next_tick {
                    next_tick = Instant::now() + tick;
                }
                s.input(Core::handle_timeout);
            }
            _ = precise_due(precise.as_mut(), next), if next.is_some() => {
                s.input(Core::handle_timeout);
            }
            // Let joined store tasks go (their results came through `inbox`).
            Some(_) = s.tasks.join_next(), if !s.tasks.is_empty() => {
                while s.tasks.try_join_next().is_some() {}
            }
        }
        s.input(Core::end_turn);
        s.publish_health();
        if s.core.is_done() {
            break;
        }
    }
    s.finish(watchdog_stop).await;
}

/// Resolves when the wake thread says the deadline `at` has come (see `wake`).
async fn precise_due(wake: Option<&mut PreciseWake>, at: Option<Instant>) {
    match (wake, at) {
        (Some(w), Some(at)) => w.due(at).await,
        _ => std::future::pending().await,
    }
}

async fn recv_release(rx: &mut Option<tokio::sync::broadcast::Receiver<RunKey>>) -> Option<RunKey> {
    let Some(r) = rx.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match r.recv().await {
            Ok(k) => return Some(k),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                *rx = None;
                return std::future::pending().await;
            }
        }
    }
}

impl Shell {
    /// The tokio instant of the core's µs `at` (saturating far ahead).
    fn instant(&self, at: Micros) -> Instant {
        let far = Duration::from_secs(86_400 * 365 * 30);
        self.origin
            .checked_add(Duration::from_micros(at))
            .unwrap_or_else(|| self.origin + far)
    }

    fn stopping(&self) -> bool {
        !self.stop_replies.is_empty() || self.core.is_stopping()
    }

    /// Feeds the core one input at the time read now, and carries out what it caused (so
    /// the core's effect queue holds one input's effects, not a whole turn's).
    fn input(&mut self, f: impl FnOnce(&mut Core, super::core::Now)) {
        let now = super::exec::now(&self.shared, self.origin);
        f(&mut self.core, now);
        self.perform();
    }

    fn command(&mut self, cmd: Command) {
        let command = match cmd {
            Command::Add(job) => CoreCommand::Add(job),
            Command::Remove(name) => CoreCommand::Remove(name),
            Command::RunNow { job, data, reply } => {
                self.next_reply += 1;
                self.replies.insert(self.next_reply, reply);
                CoreCommand::RunNow {
                    job,
                    data,
                    reply: self.next_reply,
                }
            }
            Command::Stop { timeout, reply } => {
                self.stop_replies.push(reply);
                CoreCommand::Stop { timeout }
            }
        };
        self.input(|core, now| core.handle_command(now, command));
    }

    fn message(&mut self, msg: Msg) {
        match msg {
            Msg::Answer { id, answer } => {
                self.input(|core, now| core.handle_answer(now, id, answer));
            }
            Msg::HandlerDone { run, result } => {
                let Some(t) = self.runs.get_mut(&run) else {
                    return;
                };
                t.handler = None;
                let cause = t.control.cause();
                // Its fenced transaction recorded the success: whatever it returned.
                let recorded = t.control.is_finished_in_transaction();
                let status = match (&result, cause) {
                    _ if recorded => "success",
                    (Ok(()), _) => "success",
                    (Err(_), Some(_)) => "interrupted",
                    (Err(_), None) => "failure",
                };
                t.span.record("status", status);
                let result = result.map_err(|e| telemetry::error_chain(&*e));
                let took = t.started.elapsed();
                self.handler_metric(run, status, took);
                self.input(|core, now| core.handler_returned(now, run, result, cause, recorded));
            }
        }
    }

    fn handler_metric(&self, run: RunId, status: &'static str, took: Duration) {
        if let Some(job) = self.core.job_of(run) {
            telemetry::handler(&self.shared.cfg.instance_id, job.as_str(), status, took);
        }
    }

    /// Carries out the core's effects.
    fn perform(&mut self) {
        while let Some(effect) = self.core.poll_effect() {
            match effect {
                Effect::Call { id, request, run } => self.call(id, request, run),
                Effect::StartHandler(start) => self.start_handler(*start),
                Effect::Cancel { run, cause } => {
                    if let Some(t) = self.runs.get(&run) {
                        t.control.cancel(cause);
                    }
                }
                Effect::ExtendDeadline { run, at } => {
                    let at = self.instant(at);
                    if let Some(t) = self.runs.get(&run)
                        && !t.control.check()
                    {
                        t.control.set_deadline(Some(at));
                    }
                }
                Effect::Abort { run } => {
                    if let Some(h) = self.runs.get_mut(&run).and_then(|t| t.handler.take()) {
                        h.abort();
                    }
                }
                Effect::Forget { run } => {
                    self.runs.remove(&run);
                }
                Effect::Emit(event) => self.emit(event),
                Effect::Reply { to, answer } => {
                    if let Some(reply) = self.replies.remove(&to) {
                        let _ = reply.send(answer);
                    }
                }
                Effect::Watching(on) => {
                    if let Backend::Lease(store) = &self.shared.backend {
                        store.set_watching(on);
                    }
                }
            }
        }
    }

    /// Spawns a bounded store call whose answer comes back as a message, inside an
    /// `anarchon.store` span (at debug) whose parent is the run's span for a run's writes.
    fn call(&mut self, id: CallId, request: Request, run: Option<RunId>) {
        use tracing::Instrument;
        let parent = run
            .and_then(|r| self.runs.get(&r))
            .map_or_else(tracing::Span::none, |t| t.span.clone());
        let operation = request.operation();
        let span = tracing::debug_span!(
            parent: &parent,
            "anarchon.store",
            operation,
            store = self.shared.backend.history().kind(),
            error = tracing::field::Empty,
        );
        let shared = self.shared.clone();
        let tx = self.msgs.clone();
        self.tasks.spawn(
            async move {
                let sent = Instant::now();
                let answer = super::exec::execute(&shared, request).await;
                telemetry::store_call(&shared.cfg.instance_id, operation, sent.elapsed());
                if let Some(e) = answer.error() {
                    tracing::Span::current().record("error", telemetry::error_chain(e).as_str());
                }
                let _ = tx.send(Msg::Answer { id, answer });
            }
            .instrument(span),
        );
    }

    fn start_handler(&mut self, start: HandlerStart) {
        let HandlerStart {
            run,
            job,
            info,
            scheduled_at,
            lease_deadline,
            data,
        } = start;
        let control = Arc::new(RunControl::new(lease_deadline.map(|at| self.instant(at))));
        // Every run executes in a span naming it; its store writes are child spans.
        let span = tracing::info_span!(
            "anarchon.run",
            job = %info.job,
            slot = %info.slot.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            attempt = info.attempt,
            fence = info.fence,
            reason = info.reason.as_str(),
            instance = %info.instance_id,
            status = tracing::field::Empty,
        );
        let ctx = JobContext {
            name: info.job.clone(),
            slot: info.slot,
            scheduled_at: to_datetime(scheduled_at),
            instance_id: self.shared.cfg.instance_id.clone(),
            manual: info.manual,
            attempt: info.attempt,
            reason: info.reason,
            fence: info.fence,
            signal: control.token(),
            data: self.no_data.clone(),
            control: control.clone(),
        };
        // Boxed: the task keeps a pointer to it until the handler is called, not its size.
        let start = super::handler_task::Start::new(job, ctx, self.shared.cfg.data.as_ref(), data);
        let tx = self.msgs.clone();
        use tracing::Instrument;
        let handle = tokio::spawn(
            async move {
                let result = super::handler_task::run_handler(start).await;
                let _ = tx.send(Msg::HandlerDone { run, result });
            }
            .instrument(span.clone()),
        );
        self.runs.insert(
            run,
            RunTask {
                control,
                handler: Some(handle.abort_handle()),
                span,
                started: Instant::now(),
            },
        );
    }

    fn emit(&self, event: Event) {
        telemetry::event(&self.shared.cfg.instance_id, &event);
        telemetry::log(&event, self.shared.events.receiver_count() > 0);
        let _ = self.shared.events.send(event);
    }

    /// Publishes the core's health figures where `health()` reads them.
    fn publish_health(&mut self) {
        let now = self.core.health();
        if *now == self.published {
            return;
        }
        let h = &self.shared.health;
        h.leases_held.store(now.leases_held, Ordering::Relaxed);
        h.store_unreachable
            .store(now.store_unreachable, Ordering::Relaxed);
        h.slots_late.store(now.slots_late, Ordering::Relaxed);
        h.runs_watched.store(now.runs_watched, Ordering::Relaxed);
        if now.last_error != self.published.last_error {
            *h.last_error.lock().unwrap_or_else(|e| e.into_inner()) = now.last_error.clone();
        }
        self.published = now.clone();
    }

    /// Stop: nothing may reach the store after `stop()` returns. [B-34]
    async fn finish(mut self, watchdog_stop: Arc<AtomicBool>) {
        if self.core.is_watching()
            && let Backend::Lease(store) = &self.shared.backend
        {
            store.set_watching(false);
        }
        self.tasks.shutdown().await;
        for t in self.runs.values() {
            if let Some(h) = &t.handler {
                h.abort();
            }
        }
        let _ = bounded(&self.shared, "close", self.shared.backend.history().close()).await;
        watchdog_stop.store(true, Ordering::Relaxed);
        self.shared.health.leases_held.store(0, Ordering::Relaxed);
        super::driver_ended(&self.shared);
        for reply in self.stop_replies.drain(..) {
            let _ = reply.send(());
        }
    }
}
