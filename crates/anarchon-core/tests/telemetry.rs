//! Tracing spans seen from outside: a test subscriber records the spans and events a run
//! produces. (Metrics are in tests/metrics.rs: a process of their own, since tracing caches
//! callsite interest process-wide.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anarchon_core::memory::MemoryStore;
use anarchon_core::testkit::runtime::{Instance, node, wait_for};
use anarchon_core::{Clock, HandlerError, JobContext, LeaseStore};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span or an event as the test layer saw it.
#[derive(Debug, Clone)]
struct Seen {
    kind: &'static str,
    name: String,
    fields: String,
    /// The enclosing span (for an event) or the parent (for a span): name and fields.
    parent: Option<(String, String)>,
}

#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

/// Fields of a span, kept in its extensions so events and children can name them.
struct SpanFields(String);

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut text = Text::default();
        attrs.record(&mut text);
        let span = ctx.span(id).expect("the new span");
        let parent = span.parent().map(|p| {
            let fields = p
                .extensions()
                .get::<SpanFields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            (p.name().to_string(), fields)
        });
        span.extensions_mut().insert(SpanFields(text.0.clone()));
        self.0.lock().unwrap().push(Seen {
            kind: "span",
            name: attrs.metadata().name().to_string(),
            fields: text.0,
            parent,
        });
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        let mut text = Text::default();
        values.record(&mut text);
        let span = ctx.span(id).expect("the span");
        if let Some(f) = span.extensions_mut().get_mut::<SpanFields>() {
            f.0.push_str(&text.0);
        }
        self.0.lock().unwrap().push(Seen {
            kind: "record",
            name: span.name().to_string(),
            fields: text.0,
            parent: None,
        });
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut text = Text::default();
        event.record(&mut text);
        let parent = ctx.event_span(event).map(|s| {
            let fields = s
                .extensions()
                .get::<SpanFields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            (s.name().to_string(), fields)
        });
        self.0.lock().unwrap().push(Seen {
            kind: "event",
            name: event.metadata().name().to_string(),
            fields: text.0,
            parent,
        });
    }
}

/// [G-12] A run's span names it; the handler's own lines and the run's writes are inside it.
#[tokio::test(start_paused = true)]
async fn every_run_executes_in_a_span_naming_it_and_its_store_writes_are_child_spans() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let clock = Clock::tokio();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let inst = Instance::new(store);
    let s = node(&inst, "node-a").clock(clock).build().unwrap();
    s.every("report", "2s")
        .handler(|ctx: JobContext| async move {
            tracing::info!(attempt = ctx.attempt, "inside the handler");
            Ok::<(), HandlerError>(())
        })
        .unwrap();
    s.start().await.unwrap();
    let done = wait_for(10_000, || {
        capture.0.lock().unwrap().iter().any(|r| {
            r.kind == "span" && r.name == "anarchon.store" && r.fields.contains("operation=finish")
        })
    })
    .await;
    s.stop(Duration::from_secs(5)).await.unwrap();
    assert!(done, "no finish span");
    let seen = capture.0.lock().unwrap().clone();

    let run = seen
        .iter()
        .find(|r| r.kind == "span" && r.name == "anarchon.run")
        .expect("a run span");
    for field in [
        "job=report",
        "attempt=1",
        "fence=",
        "reason=",
        "instance=node-a",
        "slot=",
    ] {
        assert!(run.fields.contains(field), "{field} in {run:?}");
    }
    // The slot is a time, not milliseconds.
    assert!(
        run.fields.contains('T') && run.fields.contains('Z'),
        "{run:?}"
    );

    let inside = seen
        .iter()
        .find(|r| r.kind == "event" && r.fields.contains("inside the handler"))
        .expect("the handler's own event");
    let (parent, fields) = inside
        .parent
        .clone()
        .expect("the handler logs inside a span");
    assert_eq!(parent, "anarchon.run");
    assert!(fields.contains("job=report"), "{fields}");

    let finish = seen
        .iter()
        .find(|r| {
            r.kind == "span" && r.name == "anarchon.store" && r.fields.contains("operation=finish")
        })
        .unwrap();
    let (parent, fields) = finish.parent.clone().expect("finish has a parent span");
    assert_eq!(parent, "anarchon.run", "{finish:?}");
    assert!(fields.contains("job=report"), "{fields}");
    assert!(
        finish.fields.contains("store=memory"),
        "the store kind is named: {finish:?}"
    );

    assert!(
        seen.iter().any(|r| r.kind == "record"
            && r.name == "anarchon.run"
            && r.fields.contains("status=success")),
        "the run span records how the handler ended"
    );
    // Claims are store calls too (outside any run: the run does not exist yet).
    assert!(seen.iter().any(|r| r.kind == "span"
        && r.name == "anarchon.store"
        && r.fields.contains("operation=claim")));
}

/// [G-12] A failed store call records its error chain on its span.
#[tokio::test(start_paused = true)]
async fn a_failed_store_call_carries_its_error_in_its_span() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let clock = Clock::tokio();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let inst = Instance::new(store);
    let s = node(&inst, "node-a").clock(clock).build().unwrap();
    s.every("report", "2s")
        .handler(|_ctx: JobContext| async move { Ok::<(), HandlerError>(()) })
        .unwrap();
    s.start().await.unwrap();
    inst.fail_all(true);
    let failed = wait_for(10_000, || {
        capture.0.lock().unwrap().iter().any(|r| {
            r.kind == "record" && r.name == "anarchon.store" && r.fields.contains("error=")
        })
    })
    .await;
    inst.fail_all(false);
    s.stop(Duration::from_secs(5)).await.unwrap();
    assert!(failed, "a failed call records `error` on its span");
}
