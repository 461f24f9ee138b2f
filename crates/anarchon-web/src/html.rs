//! Server-rendered pages: plain HTML with inline CSS and SVG, no script, nothing fetched from
//! elsewhere, so the dashboard works offline. Everything that comes from the store goes
//! through [`escape`].

use std::fmt::Write;

use anarchon_core::chrono::{DateTime, Utc};
use anarchon_core::{JobName, Reason};

use crate::view::{Class, HealthView, JobSummary, Timeline, UnfinishedRun};

/// Escapes text for HTML content and quoted attribute values.
///
/// ```
/// assert_eq!(
///     anarchon_web::escape(r#"<b class="x">Tom & 'Jerry'</b>"#),
///     "&lt;b class=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/b&gt;"
/// );
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}\
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}\
header a{color:#cfd8ea;text-decoration:none}header a:hover{color:#fff}\
header .brand{font-weight:600;color:#fff;font-size:16px}\
main{padding:16px 24px;max-width:1200px}\
h1{font-size:20px;margin:8px 0 16px}h2{font-size:16px;margin:24px 0 8px}\
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px rgba(0,0,0,.08)}\
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e4e7ec;vertical-align:top}\
th{background:#eef1f5;font-weight:600}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}\
.status{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}\
.muted{color:#6b7280}.error{color:#b42318}\
.notice{background:#e8f1ff;border:1px solid #b6d0ff;padding:8px 12px;margin:0 0 12px}\
.problem{background:#fdecea;border:1px solid #f5b5ae;padding:8px 12px;margin:0 0 12px}\
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:8px 0;padding:0;list-style:none}\
.legend li{display:flex;align-items:center;gap:6px}\
.swatch{width:14px;height:14px;display:inline-block;border-radius:2px}\
svg.timeline{background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08);max-width:100%;height:auto}\
svg .lane-label{font-size:12px;fill:#1d2330}svg .tick{font-size:11px;fill:#6b7280}\
svg rect.attempt:hover{opacity:.8}\
button{background:#2f6fdb;color:#fff;border:0;border-radius:4px;padding:6px 14px;cursor:pointer;font-size:14px}\
button:hover{background:#2559b3}\
";

/// The page frame: header with navigation, the body, no outside resources.
pub(crate) fn page(prefix: &str, title: &str, body: &str) -> String {
    let title = escape(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · anarchon</title><style>{CSS}</style></head><body>\
         <header><span class=\"brand\">anarchon</span>\
         <a href=\"{prefix}/\" id=\"nav-jobs\">Jobs</a>\
         <a href=\"{prefix}/runs\" id=\"nav-runs\">Unfinished runs</a>\
         <a href=\"{prefix}/api/health\">Health (JSON)</a></header>\
         <main>{body}</main></body></html>\n"
    )
}

/// `2026-11-30 18:40:05 UTC`.
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `340 ms`, `12.5 s`, `3 min 4 s`, `2 h 5 min`.
pub(crate) fn span_ms(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let text = if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000)
    } else {
        format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000)
    };
    format!("{sign}{text}")
}

fn badge(class: Class) -> String {
    format!(
        "<span class=\"status {}\" style=\"background:{}\">{}</span>",
        class.css(),
        class.colour(),
        class.label()
    )
}

fn status_badge(status: anarchon_core::RunStatus) -> String {
    let class = match status {
        anarchon_core::RunStatus::Running => Class::Running,
        anarchon_core::RunStatus::Succeeded => Class::Succeeded,
        anarchon_core::RunStatus::Failed => Class::Failed,
        anarchon_core::RunStatus::Interrupted => Class::Interrupted,
    };
    format!(
        "<span class=\"status {}\" style=\"background:{}\">{}</span>",
        class.css(),
        class.colour(),
        status.as_str()
    )
}

fn health_line(health: Option<&HealthView>) -> String {
    match health {
        None => String::new(),
        Some(h) if h.healthy => format!(
            "<p class=\"muted\" id=\"health\">Scheduler healthy · {} lease(s) held · driver \
             turned {} ago</p>",
            h.leases_held,
            span_ms(i64::try_from(h.driver_idle_ms).unwrap_or(i64::MAX))
        ),
        Some(h) => format!(
            "<p class=\"problem\" id=\"health\">Scheduler not healthy: running {}, stalled {}, \
             store reachable {}{}</p>",
            h.running,
            h.stalled,
            h.store_reachable,
            h.last_error
                .as_deref()
                .map(|e| format!(" · last error: {}", escape(e)))
                .unwrap_or_default()
        ),
    }
}

/// The jobs page.
pub(crate) fn jobs_page(prefix: &str, jobs: &[JobSummary], health: Option<&HealthView>) -> String {
    let mut body = String::from("<h1>Jobs</h1>");
    body.push_str(&health_line(health));
    if jobs.is_empty() {
        body.push_str(
            "<p class=\"muted\">No job is known to the store yet: jobs appear once an \
             instance registered or ran them.</p>",
        );
        return page(prefix, "Jobs", &body);
    }
    body.push_str(
        "<table id=\"jobs\"><thead><tr><th>Job</th><th>Schedule</th><th>Next run</th>\
         <th>Last status</th><th>Last started</th><th>Success rate</th>\
         <th>Takeovers</th></tr></thead><tbody>",
    );
    for j in jobs {
        let name = escape(j.name.as_str());
        let rate = match j.success_rate {
            Some(rate) => format!(
                "{:.0}% <span class=\"muted\">({}/{})</span>",
                rate * 100.0,
                j.succeeded,
                j.finished
            ),
            None => "<span class=\"muted\">—</span>".into(),
        };
        let _ = write!(
            body,
            "<tr data-job=\"{name}\"><td><a class=\"job-link\" href=\"{prefix}/jobs/{name}\">{name}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{rate}</td>\
             <td class=\"num\">{}</td></tr>",
            j.schedule.as_deref().map_or_else(
                || "<span class=\"muted\">not on this scheduler</span>".to_owned(),
                escape
            ),
            j.next_run
                .map(time)
                .unwrap_or_else(|| "<span class=\"muted\">—</span>".into()),
            j.last_status
                .map(status_badge)
                .unwrap_or_else(|| "<span class=\"muted\">never ran</span>".into()),
            j.last_started_at
                .map(|t| format!(
                    "{} <span class=\"muted\">on {}</span>",
                    time(t),
                    escape(j.last_instance.as_deref().unwrap_or(""))
                ))
                .unwrap_or_default(),
            j.takeovers,
        );
    }
    body.push_str("</tbody></table>");
    let _ = write!(
        body,
        "<p class=\"muted\">The success rate counts the runs in the history read (a run \
         taken over counts once, by its last attempt). JSON: <a href=\"{prefix}/api/jobs\">\
         {prefix}/api/jobs</a></p>"
    );
    page(prefix, "Jobs", &body)
}

/// The lanes' drawing: what a takeover and a handover look like.
fn legend() -> String {
    let mut out = String::from("<ul class=\"legend\" id=\"legend\">");
    for class in Class::ALL {
        let _ = write!(
            out,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>",
            class.colour(),
            class.label()
        );
    }
    out.push_str(
        "<li><svg width=\"34\" height=\"14\"><line x1=\"2\" y1=\"7\" x2=\"26\" y2=\"7\" \
         stroke=\"#1d2330\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\
         <path d=\"M26 3 L33 7 L26 11 Z\" fill=\"#1d2330\"/></svg>takeover (black outline: \
         the attempt a backup started after the lease expired)</li>\
         <li><svg width=\"34\" height=\"14\"><line x1=\"2\" y1=\"7\" x2=\"26\" y2=\"7\" \
         stroke=\"#e69f00\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\
         <path d=\"M26 3 L33 7 L26 11 Z\" fill=\"#e69f00\"/></svg>handover (after a \
         graceful stop)</li></ul>",
    );
    out
}

const LABEL_W: f64 = 150.0;
const LANE_H: f64 = 36.0;
const BAR_H: f64 = 22.0;
const AXIS_H: f64 = 28.0;

fn tooltip(bar: &crate::view::Bar, handover: bool) -> String {
    let r = &bar.record;
    let reason = match (r.reason, handover) {
        (Reason::Takeover, true) => "handover".to_string(),
        (reason, _) => reason.as_str().to_string(),
    };
    let mut text = format!(
        "slot {} · attempt {} on {} · {} · {}",
        time(r.slot),
        r.attempt,
        r.instance_id,
        reason,
        bar.class.label()
    );
    if let Some(d) = r.duration() {
        let _ = write!(
            text,
            " · {}",
            span_ms(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        );
    }
    if let Some(e) = &r.error {
        let _ = write!(text, " · {e}");
    }
    escape(&text)
}

/// The timeline as inline SVG: one lane per instance, one bar per attempt, a dashed arrow
/// from a lost or handed-over attempt to the attempt that continued it.
pub(crate) fn timeline_svg(t: &Timeline) -> String {
    let plot_w = t.width;
    let w = LABEL_W + plot_w + 20.0;
    let h = LANE_H * t.lanes.len().max(1) as f64 + AXIS_H;
    let mut out = format!(
        "<svg class=\"timeline\" id=\"timeline\" \
         width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"attempts per instance over time\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
         <path d=\"M0 0 L10 5 L0 10 Z\" fill=\"context-stroke\"/></marker></defs>"
    );
    for (i, lane) in t.lanes.iter().enumerate() {
        let y = LANE_H * i as f64;
        let fill = if i % 2 == 0 { "#f8f9fb" } else { "#ffffff" };
        let _ = write!(
            out,
            "<g class=\"lane\" data-instance=\"{lane}\"><rect x=\"0\" y=\"{y}\" width=\"{w}\" \
             height=\"{LANE_H}\" fill=\"{fill}\"/><text class=\"lane-label\" x=\"8\" y=\"{}\">{lane}\
             </text></g>",
            y + LANE_H / 2.0 + 4.0,
            lane = escape(lane)
        );
    }
    // Time axis with five ticks.
    let axis_y = LANE_H * t.lanes.len().max(1) as f64;
    let span_ms = (t.to - t.from).num_milliseconds().max(1);
    for k in 0..=4_i32 {
        let x = LABEL_W + plot_w * f64::from(k) / 4.0;
        let at = t.from + anarchon_core::chrono::Duration::milliseconds(span_ms * i64::from(k) / 4);
        let anchor = match k {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<line x1=\"{x}\" y1=\"0\" x2=\"{x}\" y2=\"{axis_y}\" stroke=\"#e4e7ec\"/>\
             <text class=\"tick\" x=\"{x}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            axis_y + 18.0,
            at.format("%H:%M:%S%.3f")
        );
    }
    // Links first, so bars are drawn over them.
    for bar in &t.bars {
        let Some(prev) = bar.follows.map(|i| &t.bars[i]) else {
            continue;
        };
        let handover = prev.class == Class::HandedOver;
        let colour = if handover { "#e69f00" } else { "#1d2330" };
        let kind = if handover { "handover" } else { "takeover" };
        let _ = write!(
            out,
            "<line class=\"link {kind}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{colour}\" \
             stroke-width=\"1.5\" stroke-dasharray=\"4 3\" marker-end=\"url(#arrow)\"/>",
            LABEL_W + prev.x + prev.width,
            LANE_H * prev.lane as f64 + LANE_H / 2.0,
            LABEL_W + bar.x,
            LANE_H * bar.lane as f64 + LANE_H / 2.0,
        );
    }
    for bar in &t.bars {
        let handover = bar
            .follows
            .is_some_and(|i| t.bars[i].class == Class::HandedOver);
        let mut classes = format!("attempt {}", bar.class.css());
        let mut stroke = String::new();
        if bar.record.reason == Reason::Takeover {
            classes.push_str(if handover { " handover" } else { " takeover" });
            stroke = format!(
                " stroke=\"{}\" stroke-width=\"2\"",
                if handover { "#e69f00" } else { "#1d2330" }
            );
        }
        if bar.record.manual {
            classes.push_str(" manual");
        }
        let _ = write!(
            out,
            "<rect class=\"{classes}\" data-attempt=\"{}\" data-instance=\"{}\" \
             data-slot=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{BAR_H}\" rx=\"3\" \
             fill=\"{}\"{stroke}><title>{}</title></rect>",
            bar.record.attempt,
            escape(&bar.record.instance_id),
            bar.record.slot_ms(),
            LABEL_W + bar.x,
            LANE_H * bar.lane as f64 + (LANE_H - BAR_H) / 2.0,
            bar.width,
            bar.class.colour(),
            tooltip(bar, handover),
        );
        // A label where it fits, so a takeover reads as one without hovering.
        let label = match (bar.record.reason, handover, bar.record.manual) {
            (Reason::Takeover, true, _) => format!("#{} handover", bar.record.attempt),
            (Reason::Takeover, false, _) => format!("#{} takeover", bar.record.attempt),
            (_, _, true) => "manual".to_string(),
            _ => format!("#{}", bar.record.attempt),
        };
        if bar.width >= 7.0 * label.len() as f64 + 8.0 {
            let _ = write!(
                out,
                "<text class=\"bar-label\" x=\"{}\" y=\"{}\" fill=\"#fff\" font-size=\"11\" \
                 pointer-events=\"none\">{label}</text>",
                LABEL_W + bar.x + 5.0,
                LANE_H * bar.lane as f64 + LANE_H / 2.0 + 4.0,
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// What the job page shows besides the timeline.
pub(crate) struct JobPage<'a> {
    pub(crate) job: &'a JobName,
    pub(crate) summary: &'a JobSummary,
    pub(crate) timeline: &'a Timeline,
    /// Show the run-now form.
    pub(crate) run_now: bool,
    /// A run-now was just requested.
    pub(crate) started: bool,
}

/// The per-job page: summary, timeline, legend, the attempts as a table.
pub(crate) fn job_page(prefix: &str, p: &JobPage<'_>) -> String {
    let name = escape(p.job.as_str());
    let mut body = format!("<h1>Job <code id=\"job-name\">{name}</code></h1>");
    if p.started {
        body.push_str(
            "<p class=\"notice\" id=\"run-now-started\">Run-now requested: the new attempt \
             (reason <code>manual</code>) appears below once it has started; reload to follow \
             it.</p>",
        );
    }
    let s = p.summary;
    let _ = write!(
        body,
        "<p>{} · next run {} · {} run(s) read, {} finished, {} succeeded · {} takeover(s)</p>",
        s.schedule
            .as_deref()
            .map_or_else(|| "not on this dashboard's scheduler".to_owned(), escape),
        s.next_run.map(time).unwrap_or_else(|| "—".into()),
        s.runs,
        s.finished,
        s.succeeded,
        s.takeovers
    );
    if p.run_now {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{prefix}/jobs/{name}/run\" id=\"run-now-form\">\
             <button type=\"submit\" id=\"run-now\">Run now</button> \
             <span class=\"muted\">runs the job once on this dashboard's scheduler, recorded \
             as manual</span></form>"
        );
    }
    body.push_str("<h2>Timeline</h2>");
    if p.timeline.bars.is_empty() {
        body.push_str("<p class=\"muted\">No attempt recorded yet.</p>");
    } else {
        let _ = write!(
            body,
            "<p class=\"muted\">{} → {}; one lane per instance; hover a bar for details.</p>",
            time(p.timeline.from),
            time(p.timeline.to)
        );
        body.push_str(&timeline_svg(p.timeline));
        body.push_str(&legend());
    }
    body.push_str(
        "<h2>Attempts</h2><table id=\"attempts\"><thead><tr><th>Slot</th><th>Attempt</th>\
         <th>Instance</th><th>Reason</th><th>Status</th><th>Started</th><th>Duration</th>\
         <th>Fence</th><th>Error</th></tr></thead><tbody>",
    );
    for bar in p.timeline.bars.iter().rev() {
        let r = &bar.record;
        let _ = write!(
            body,
            "<tr class=\"{}\"><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"error\">{}</td></tr>",
            bar.class.css(),
            time(r.slot),
            r.attempt,
            escape(&r.instance_id),
            r.reason,
            badge(bar.class),
            time(r.started_at),
            r.duration()
                .map(|d| span_ms(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
                .unwrap_or_default(),
            r.fence,
            escape(r.error.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</tbody></table>");
    let _ = write!(
        body,
        "<p class=\"muted\">JSON: <a href=\"{prefix}/api/jobs/{name}/history\">\
         {prefix}/api/jobs/{name}/history</a></p>"
    );
    page(prefix, p.job.as_str(), &body)
}

/// The unfinished runs page.
pub(crate) fn runs_page(prefix: &str, runs: Option<&[UnfinishedRun]>) -> String {
    let mut body = String::from("<h1>Unfinished runs</h1>");
    let Some(runs) = runs else {
        body.push_str(
            "<p class=\"muted\">This store is claim-only: it keeps no lease, so there is no \
             owner or lease to show.</p>",
        );
        return page(prefix, "Unfinished runs", &body);
    };
    if runs.is_empty() {
        body.push_str("<p class=\"muted\" id=\"no-runs\">Nothing is running now.</p>");
        return page(prefix, "Unfinished runs", &body);
    }
    body.push_str(
        "<table id=\"runs\"><thead><tr><th>Job</th><th>Slot</th><th>Owner</th>\
         <th>Attempt</th><th>Lease left</th></tr></thead><tbody>",
    );
    for r in runs {
        let name = escape(r.job.as_str());
        let lease = if r.owner.is_none() {
            "<span class=\"muted\">released: waiting for a backup</span>".to_string()
        } else if r.lease_left_ms <= 0 {
            format!(
                "<span class=\"error\">expired {} ago: a backup takes over</span>",
                span_ms(-r.lease_left_ms)
            )
        } else {
            span_ms(r.lease_left_ms)
        };
        let _ = write!(
            body,
            "<tr><td><a href=\"{prefix}/jobs/{name}\">{name}</a></td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{lease}</td></tr>",
            time(r.slot),
            r.owner
                .as_deref()
                .map(escape)
                .unwrap_or_else(|| "<span class=\"muted\">none</span>".into()),
            r.attempt,
        );
    }
    body.push_str("</tbody></table>");
    page(prefix, "Unfinished runs", &body)
}

/// An error page; the message is escaped.
pub(crate) fn error_page(prefix: &str, status: u16, message: &str) -> String {
    page(
        prefix,
        "Error",
        &format!(
            "<h1>Error {status}</h1><p class=\"problem\" id=\"error\">{}</p>",
            escape(message)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{summarise, tests::takeover_history, timeline};

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span_ms(340), "340 ms");
        assert_eq!(span_ms(12_500), "12.5 s");
        assert_eq!(span_ms(184_000), "3 min 4 s");
        assert_eq!(span_ms(-1_500), "-1.5 s");
    }

    #[test]
    fn store_text_is_escaped_everywhere_it_shows() {
        let mut records = takeover_history();
        records[0].instance_id = "<script>alert(1)</script>".into();
        records[0].error = Some("\"><img src=x onerror=alert(2)>".into());
        let t = timeline(&records, 3_000, 600.0);
        let job = JobName::new("job").unwrap();
        let s = summarise(job.clone(), None, &records);
        let html = job_page(
            "",
            &JobPage {
                job: &job,
                summary: &s,
                timeline: &t,
                run_now: false,
                started: false,
            },
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        let jobs = jobs_page("", &[s], None);
        assert!(!jobs.contains("<script>"));
    }

    #[test]
    fn the_svg_marks_the_takeover_and_the_lost_attempt() {
        let t = timeline(&takeover_history(), 3_000, 600.0);
        let svg = timeline_svg(&t);
        assert!(
            svg.contains("class=\"attempt st-succeeded takeover\""),
            "{svg}"
        );
        assert!(svg.contains("class=\"attempt st-lost\""), "{svg}");
        assert!(svg.contains("class=\"link takeover\""), "{svg}");
        assert!(svg.contains("<title>slot 1970-01-01 00:00:01 UTC · attempt 2 on b · takeover"));
        assert_eq!(svg.matches("class=\"lane\"").count(), 2);
    }

    #[test]
    fn no_page_loads_anything_from_elsewhere() {
        let html = jobs_page("/ops", &[], None);
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("<script")
        );
        assert!(html.contains("href=\"/ops/runs\""));
    }
}
