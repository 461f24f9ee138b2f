//! `anarchon next`: the next instants of a cron expression or an interval, with the
//! daylight-saving rule the library applied to each (no store needed).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use anarchon_core::slot::{CronSchedule, DstRule, Schedule, parse_interval};

use crate::error::CliError;
use crate::output::{Table, time};

/// The answer of `next`, as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct NextReport {
    /// The schedule as given.
    schedule: String,
    /// `cron` or `every`.
    kind: &'static str,
    /// The timezone the instants are shown (and a cron expression is read) in.
    timezone: String,
    /// For cron: `wall-clock` or `elapsed-time` (which DST rules apply); for every: `utc-grid`.
    rules: &'static str,
    /// The instants are the first ones after this.
    after: DateTime<Utc>,
    /// The instants, oldest first.
    instants: Vec<Instant>,
    /// Why there are fewer instants than asked for (absent when there are all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
}

/// One instant of `next`.
#[derive(Debug, Serialize)]
struct Instant {
    /// The slot in UTC.
    at: DateTime<Utc>,
    /// The slot in epoch milliseconds (as the stores key it).
    at_ms: i64,
    /// The slot as local time with its offset.
    local: String,
    /// The abbreviation of the local offset (`CET`, `CEST`).
    zone: String,
    /// The DST rule that placed this instant, if one did.
    dst: Option<DstNote>,
}

/// A DST rule applied to one instant.
#[derive(Debug, Serialize)]
struct DstNote {
    /// `moved-forward`, `repeated-once`, `first-pass`, `second-pass` or `after-gap`.
    rule: &'static str,
    /// The local time a gap skipped, for `moved-forward` and `after-gap`.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    /// The rule in words.
    note: String,
}

fn note(rule: DstRule) -> Option<DstNote> {
    let at = |t: chrono::NaiveDateTime| t.format("%Y-%m-%d %H:%M:%S").to_string();
    Some(match rule {
        DstRule::MovedForward { skipped } => DstNote {
            rule: "moved-forward",
            skipped: Some(at(skipped)),
            note: format!(
                "{} does not exist (spring-forward gap): run once at the first instant after it",
                at(skipped)
            ),
        },
        DstRule::RepeatedOnce => DstNote {
            rule: "repeated-once",
            skipped: None,
            note: "this local time repeats (fall-back overlap): run once, at its first \
                   occurrence"
                .to_owned(),
        },
        DstRule::FirstPass => DstNote {
            rule: "first-pass",
            skipped: None,
            note: "this local time repeats (fall-back overlap): elapsed-time job, first of \
                   two runs"
                .to_owned(),
        },
        DstRule::SecondPass => DstNote {
            rule: "second-pass",
            skipped: None,
            note: "this local time repeats (fall-back overlap): elapsed-time job, second of \
                   two runs"
                .to_owned(),
        },
        DstRule::AfterGap { skipped } => DstNote {
            rule: "after-gap",
            skipped: Some(at(skipped)),
            note: format!(
                "the times from {} were skipped by a spring-forward gap (elapsed-time job: \
                 they do not exist)",
                at(skipped)
            ),
        },
        _ => return None,
    })
}

/// Whether `input` reads as interval text: every word is digits and/or letters (`5m`,
/// `1h 30m`, `10 s`), with at least one digit and one letter, and no word is a cron field
/// (`*`, `,`, `-`, `/`, `?`) or an alias (`@daily`).
pub(crate) fn is_interval_text(input: &str) -> bool {
    let words: Vec<&str> = input.split_whitespace().collect();
    !words.is_empty()
        && words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_alphanumeric()))
        && input.contains(|c: char| c.is_ascii_digit())
        && input.contains(|c: char| c.is_ascii_alphabetic())
        && words.len() < 5
}

/// Computes the next `count` instants of `input` after `after`.
pub(crate) fn next(
    input: &str,
    timezone: Option<&str>,
    count: usize,
    after: DateTime<Utc>,
) -> Result<NextReport, CliError> {
    let invalid = |source| CliError::InvalidSchedule {
        input: input.to_owned(),
        source,
    };
    let tz: Tz = match timezone {
        None => Tz::UTC,
        Some(name) => name
            .trim()
            .parse()
            .map_err(|_| anarchon_core::Error::UnknownTimezone {
                name: name.to_owned(),
            })
            .map_err(invalid)?,
    };
    // An interval is made of `<digits><unit>` parts ("5m", "1h 30m"); anything else is read
    // as cron, whose error then names the field count or the bad field. So "0 9 * MON" (a
    // cron expression missing a field) is never read as an interval.
    let looks_like_interval = is_interval_text(input);
    let (schedule, kind, rules) = if looks_like_interval {
        let interval = parse_interval(input).map_err(invalid)?;
        (
            Schedule::every(interval, 0).map_err(invalid)?,
            "every",
            "utc-grid",
        )
    } else {
        let cron = CronSchedule::parse(input, timezone).map_err(invalid)?;
        let rules = if cron.follows_elapsed_time() {
            "elapsed-time"
        } else {
            "wall-clock"
        };
        (Schedule::Cron(cron), "cron", rules)
    };

    let mut instants = Vec::with_capacity(count);
    let mut from = after.timestamp_millis();
    while instants.len() < count {
        let Some(slot) = schedule.next_after(from) else {
            break;
        };
        let at = anarchon_core::history::to_datetime(slot);
        let local = at.with_timezone(&tz);
        let dst = match &schedule {
            Schedule::Cron(cron) => cron.dst_rule(slot).and_then(note),
            _ => None,
        };
        instants.push(Instant {
            at,
            at_ms: slot,
            local: local.format("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string(),
            zone: local.format("%Z").to_string(),
            dst,
        });
        from = slot;
    }
    // A cron expression that parsed fires again within a few years (one that never fires is
    // refused), so a cron list cut short reached croner's end of time.
    let end = (instants.len() < count).then(|| match kind {
        "cron" => "cron schedules end at 5000-01-01T00:00:00Z (croner, the cron library, \
                   searches no further)"
            .to_owned(),
        _ => "no further instant fits in the range of times anarchon handles".to_owned(),
    });
    Ok(NextReport {
        schedule: input.to_owned(),
        kind,
        timezone: tz.name().to_owned(),
        rules,
        after,
        instants,
        end,
    })
}

impl NextReport {
    /// Writes the report as a table.
    pub(crate) fn write_table(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let rules = match self.rules {
            "wall-clock" => {
                "wall-clock job: a time skipped by DST runs at the end of the gap, a repeated \
                 time runs once"
            }
            "elapsed-time" => {
                "elapsed-time job: times inside a DST gap are skipped, repeated times run in \
                 both passes"
            }
            _ => "interval on the UTC grid from the epoch: DST does not move it",
        };
        writeln!(
            out,
            "{} {} in {} ({rules})",
            self.kind,
            crate::output::escape(&format!("{:?}", self.schedule)),
            self.timezone
        )?;
        let mut table = Table::new(&["#", "UTC", "LOCAL", "ZONE", "DST"]);
        for (i, instant) in self.instants.iter().enumerate() {
            table.row(vec![
                (i + 1).to_string(),
                time(instant.at),
                instant.local.clone(),
                instant.zone.clone(),
                instant
                    .dst
                    .as_ref()
                    .map_or_else(String::new, |d| format!("{}: {}", d.rule, d.note)),
            ]);
        }
        table.write(out)?;
        if let Some(end) = &self.end {
            let last = self.instants.last().map_or(self.after, |i| i.at);
            writeln!(out, "(no instant after {}: {end})", time(last))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn berlin_spring_forward_moves_a_wall_clock_time() {
        let r = next(
            "30 2 * * *",
            Some("Europe/Berlin"),
            3,
            at("2026-03-27T12:00:00Z"),
        )
        .unwrap();
        let times: Vec<_> = r.instants.iter().map(|i| time(i.at)).collect();
        assert_eq!(
            times,
            [
                "2026-03-28T01:30:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-30T00:30:00.000Z"
            ]
        );
        assert!(r.instants[0].dst.is_none());
        let dst = r.instants[1].dst.as_ref().unwrap();
        assert_eq!(
            (dst.rule, dst.skipped.as_deref()),
            ("moved-forward", Some("2026-03-29 02:30:00"))
        );
        assert_eq!(r.instants[1].zone, "CEST");
    }

    #[test]
    fn berlin_fall_back_runs_wall_clock_once_and_elapsed_twice() {
        let once = next(
            "30 2 * * *",
            Some("Europe/Berlin"),
            1,
            at("2026-10-24T12:00:00Z"),
        )
        .unwrap();
        assert_eq!(time(once.instants[0].at), "2026-10-25T00:30:00.000Z");
        assert_eq!(once.instants[0].dst.as_ref().unwrap().rule, "repeated-once");

        let twice = next(
            "30 * * * *",
            Some("Europe/Berlin"),
            2,
            at("2026-10-25T00:00:00Z"),
        )
        .unwrap();
        let rules: Vec<_> = twice
            .instants
            .iter()
            .map(|i| i.dst.as_ref().map(|d| d.rule))
            .collect();
        assert_eq!(rules, [Some("first-pass"), Some("second-pass")]);
    }

    #[test]
    fn elapsed_time_job_notes_the_gap_it_skipped() {
        let r = next(
            "30 * * * *",
            Some("Europe/Berlin"),
            2,
            at("2026-03-29T00:00:00Z"),
        )
        .unwrap();
        // 01:30 CET, then 03:30 CEST (02:30 does not exist).
        assert_eq!(time(r.instants[1].at), "2026-03-29T01:30:00.000Z");
        let dst = r.instants[1].dst.as_ref().unwrap();
        assert_eq!(
            (dst.rule, dst.skipped.as_deref()),
            ("after-gap", Some("2026-03-29 02:30:00"))
        );
    }

    #[test]
    fn intervals_sit_on_the_epoch_grid() {
        let r = next("5m", None, 2, at("2026-01-01T00:01:00Z")).unwrap();
        assert_eq!(r.kind, "every");
        assert_eq!(time(r.instants[0].at), "2026-01-01T00:05:00.000Z");
        assert_eq!(time(r.instants[1].at), "2026-01-01T00:10:00.000Z");
    }

    #[test]
    fn cron_says_why_it_ends_at_year_5000() {
        let r = next("0 0 1 1 *", None, 5, at("4997-06-01T00:00:00Z")).unwrap();
        assert_eq!(r.instants.len(), 3);
        assert_eq!(time(r.instants[2].at), "5000-01-01T00:00:00.000Z");
        let end = r.end.as_deref().unwrap();
        assert!(
            end.contains("5000-01-01T00:00:00Z") && end.contains("croner"),
            "{end}"
        );
        let mut out = Vec::new();
        r.write_table(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("cron schedules end at 5000"), "{text}");
        let none = next("* * * * *", None, 2, at("5000-01-01T00:00:00Z")).unwrap();
        assert!(none.instants.is_empty());
        assert!(none.end.as_deref().unwrap().contains("croner"));
        let full = next("5m", None, 2, at("2026-01-01T00:00:00Z")).unwrap();
        assert!(full.end.is_none());
    }

    #[test]
    fn a_cron_expression_missing_a_field_is_read_as_cron() {
        let e = next("0 9 * MON", None, 1, Utc::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("4 fields"), "{e}");
        assert!(is_interval_text("1h 30m") && is_interval_text("5m") && is_interval_text("10 s"));
        assert!(!is_interval_text("0 9 * MON") && !is_interval_text("@daily"));
        assert!(
            !is_interval_text("1 2 3 4 5m"),
            "five words are a cron expression"
        );
    }

    #[test]
    fn bad_input_names_itself() {
        let e = next("61 * * * *", None, 1, Utc::now()).unwrap_err();
        assert!(e.to_string().contains("minute field \"61\""), "{e}");
        let e = next("5m", Some("Mars/Olympus"), 1, Utc::now()).unwrap_err();
        assert!(e.to_string().contains("Mars/Olympus"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let e = next("10x", None, 1, Utc::now()).unwrap_err();
        assert!(e.to_string().contains("\"10x\""), "{e}");
    }
}
