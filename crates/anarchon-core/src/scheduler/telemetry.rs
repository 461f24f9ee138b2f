//! Metrics through the `metrics` facade (feature `metrics`), and the error chains that logs
//! and events carry.
//!
//! Every function here is a no-op without the feature, so the driver calls them
//! unconditionally. Names and labels are listed in docs/operations.md; a test renders the
//! list from [`METRICS`] and fails if the page differs.

use std::time::Duration;

use crate::event::Event;
#[cfg(feature = "metrics")]
use crate::event::InterruptCause;
use crate::history::Reason;

/// Every metric the scheduler records: name, kind, labels, meaning.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const METRICS: &[(&str, &str, &str, &str)] = &[
    (
        "anarchon_claims_total",
        "counter",
        "instance, job, outcome",
        "claims of a slot by outcome: won, taken, late, overlap, unknown (claim-only store lost the answer), error",
    ),
    (
        "anarchon_slots_late_total",
        "counter",
        "instance, job",
        "slots this instance could not claim in time: its timer fired after a newer slot was due, or the store judged the claim late",
    ),
    (
        "anarchon_takeovers_total",
        "counter",
        "instance, job",
        "runs this instance took over from an expired or released lease",
    ),
    (
        "anarchon_handovers_total",
        "counter",
        "instance, job",
        "runs this instance handed over (released on a graceful stop, to be continued elsewhere)",
    ),
    (
        "anarchon_catch_ups_total",
        "counter",
        "instance, job",
        "missed slots started on start-up or recovery",
    ),
    (
        "anarchon_runs_lost_total",
        "counter",
        "instance, job",
        "runs whose lease was lost (renewal refused or overdue)",
    ),
    (
        "anarchon_runs_fenced_total",
        "counter",
        "instance, job",
        "result writes refused because another instance holds the run now",
    ),
    (
        "anarchon_runs_finished_total",
        "counter",
        "instance, job, status",
        "handler runs that ended: success, failure, interrupted",
    ),
    (
        "anarchon_store_errors_total",
        "counter",
        "instance, operation",
        "store calls that failed or timed out",
    ),
    (
        "anarchon_start_lag_seconds",
        "histogram",
        "instance, job, reason",
        "slot time to handler start, on this instance's clock",
    ),
    (
        "anarchon_store_call_seconds",
        "histogram",
        "instance, operation",
        "store call latency by operation: claim, heartbeat (renewal), take_over, runs, finish, release, record ...",
    ),
    (
        "anarchon_handler_seconds",
        "histogram",
        "instance, job, status",
        "handler duration by how it ended",
    ),
    (
        "anarchon_runs_owned",
        "gauge",
        "instance",
        "leased runs this instance owns now",
    ),
    (
        "anarchon_runs_watched",
        "gauge",
        "instance",
        "runs of other instances this instance backs up now",
    ),
];

/// The text of an error and of every error in its `source()` chain, joined by `: `, leaving
/// out a source whose text the message already contains.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        let part = source.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = source.source();
    }
    text
}

/// Counts what an event reports (runs started by reason, ended, lost, fenced, handed over).
pub(crate) fn event(instance: &str, event: &Event) {
    #[cfg(feature = "metrics")]
    {
        // Events that count nothing (skips, the watchdog's) allocate nothing.
        if matches!(
            event,
            Event::Skip { .. } | Event::Stalled { .. } | Event::ClockSkew { .. }
        ) {
            return;
        }
        let instance = instance.to_string();
        match event {
            Event::Start(run) => match run.reason {
                Reason::Takeover => {
                    metrics::counter!("anarchon_takeovers_total", "instance" => instance, "job" => run.job.to_string()).increment(1)
                }
                Reason::CatchUp => {
                    metrics::counter!("anarchon_catch_ups_total", "instance" => instance, "job" => run.job.to_string()).increment(1)
                }
                Reason::Scheduled | Reason::Manual => {}
            },
            Event::Success { run, .. } => finished(instance, run.job.as_str(), "success"),
            Event::Failure { run, .. } => finished(instance, run.job.as_str(), "failure"),
            Event::Interrupted { run, cause } => {
                finished(instance.clone(), run.job.as_str(), "interrupted");
                if *cause == InterruptCause::HandedOver {
                    metrics::counter!("anarchon_handovers_total", "instance" => instance, "job" => run.job.to_string()).increment(1);
                }
            }
            Event::Lost(run) => {
                metrics::counter!("anarchon_runs_lost_total", "instance" => instance, "job" => run.job.to_string()).increment(1)
            }
            Event::Fenced(run) => {
                metrics::counter!("anarchon_runs_fenced_total", "instance" => instance, "job" => run.job.to_string()).increment(1)
            }
            Event::Error { operation, .. } => {
                metrics::counter!("anarchon_store_errors_total", "instance" => instance, "operation" => operation.as_str()).increment(1)
            }
            Event::Skip { .. } | Event::Stalled { .. } | Event::ClockSkew { .. } => {}
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, event);
}

#[cfg(feature = "metrics")]
fn finished(instance: String, job: &str, status: &'static str) {
    metrics::counter!("anarchon_runs_finished_total", "instance" => instance, "job" => job.to_string(), "status" => status).increment(1);
}

/// One claim's outcome (`won`, `taken`, `late`, `overlap`, `unknown`, `error`).
pub(crate) fn claim(instance: &str, job: &str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("anarchon_claims_total", "instance" => instance.to_string(), "job" => job.to_string(), "outcome" => outcome).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, job, outcome);
}

/// `count` slots of `job` that this instance could not claim in time.
pub(crate) fn slots_late(instance: &str, job: &str, count: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!("anarchon_slots_late_total", "instance" => instance.to_string(), "job" => job.to_string()).increment(count);
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, job, count);
}

/// Slot → handler start.
pub(crate) fn start_lag(instance: &str, job: &str, reason: Reason, lag: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("anarchon_start_lag_seconds", "instance" => instance.to_string(), "job" => job.to_string(), "reason" => reason.as_str()).record(lag.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, job, reason, lag);
}

/// One store call's latency (answered or failed).
pub(crate) fn store_call(instance: &str, operation: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("anarchon_store_call_seconds", "instance" => instance.to_string(), "operation" => operation).record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, operation, took);
}

/// A handler's duration, by how it ended (`success`, `failure`, `interrupted`).
pub(crate) fn handler(instance: &str, job: &str, status: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("anarchon_handler_seconds", "instance" => instance.to_string(), "job" => job.to_string(), "status" => status).record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, job, status, took);
}

/// Runs owned and watched now.
pub(crate) fn gauges(instance: &str, owned: usize, watched: usize) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!("anarchon_runs_owned", "instance" => instance.to_string())
            .set(owned as f64);
        metrics::gauge!("anarchon_runs_watched", "instance" => instance.to_string())
            .set(watched as f64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (instance, owned, watched);
}

/// The metrics table of docs/operations.md, rendered from [`METRICS`].
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn metrics_table() -> String {
    let mut out = String::from("| name | kind | labels | what it counts |\n|---|---|---|---|\n");
    for (name, kind, labels, meaning) in METRICS {
        out.push_str(&format!("| `{name}` | {kind} | {labels} | {meaning} |\n"));
    }
    out
}

/// Logs an event: a store error at `error` when nobody listens to the events (else `warn`),
/// clock skew as a warning, everything else at `debug` (at thousands of jobs, `info` would
/// flood the log).
pub(crate) fn log(event: &Event, listened: bool) {
    match event {
        Event::Error {
            operation,
            kind,
            job,
            message,
        } => {
            let operation = operation.as_str();
            if listened {
                tracing::warn!(operation, ?kind, job = ?job, "anarchon store error: {message}");
            } else {
                tracing::error!(operation, ?kind, job = ?job, "anarchon store error: {message}");
            }
        }
        Event::Skip { job, slot, reason } => {
            tracing::debug!(%job, %slot, reason = reason.as_str(), "skip")
        }
        Event::ClockSkew { .. } => warn_skew(event),
        other => tracing::debug!(event = other.name(), "{other}"),
    }
}

/// Logs a clock-skew event.
pub(crate) fn warn_skew(event: &crate::event::Event) {
    if let crate::event::Event::ClockSkew { skew } = event {
        let skew_ms = skew.num_milliseconds();
        tracing::warn!(
            skew_ms,
            "this instance's clock differs from the store's by {skew_ms} ms: slots follow the \
             instance clock and leases the store's, keep clocks NTP-synced"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_table_in_docs_operations_is_the_one_recorded() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let doc = std::fs::read_to_string(path).expect("docs/operations.md");
        let (begin, end) = ("<!-- begin metrics -->\n", "<!-- end metrics -->");
        let from = doc.find(begin).expect("the begin marker") + begin.len();
        let to = doc[from..].find(end).expect("the end marker") + from;
        let rendered = metrics_table();
        assert!(
            doc[from..to] == rendered,
            "docs/operations.md's metrics table differs; the code records:\n{rendered}"
        );
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn error_chain_joins_sources_and_skips_repeats() {
        let e = Layer(
            "claim failed",
            Some(Box::new(Layer(
                "connection reset",
                Some(Box::new(Layer("os error 104", None))),
            ))),
        );
        assert_eq!(
            error_chain(&e),
            "claim failed: connection reset: os error 104"
        );
        let repeated = Layer(
            "claim failed: connection reset",
            Some(Box::new(Layer("connection reset", None))),
        );
        assert_eq!(error_chain(&repeated), "claim failed: connection reset");
    }
}
