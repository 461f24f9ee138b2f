//! Cron as crontab reads it: `N/step` in every field, Vixie cron's day-of-month /
//! day-of-week rule, and errors that name the field and the value. Occurrences are computed by
//! hand from the calendar (2026-01-01 is a Thursday). [B-02, B-06]

use anarchon_core::Error;
use anarchon_core::slot::Schedule;
use chrono::{DateTime, TimeZone, Utc};

/// A UTC instant in epoch ms.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
        .unwrap()
        .timestamp_millis()
}

fn show(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d %a %H:%M:%S")
        .to_string()
}

/// The first `n` slots of a UTC cron expression strictly after `from`.
fn first(expression: &str, from: i64, n: usize) -> Vec<String> {
    let schedule = Schedule::cron(expression, None)
        .unwrap_or_else(|e| panic!("{expression:?} is refused: {e}"));
    let mut out = Vec::new();
    let mut cursor = from;
    while out.len() < n {
        let slot = schedule
            .next_after(cursor)
            .unwrap_or_else(|| panic!("{expression:?} stops after {out:?}"));
        out.push(show(slot));
        cursor = slot;
    }
    out
}

fn times(list: &[(i32, u32, u32, u32, u32, u32)]) -> Vec<String> {
    list.iter()
        .map(|&(y, mo, d, h, mi, s)| show(utc(y, mo, d, h, mi, s)))
        .collect()
}

const NEW_YEAR: (i32, u32, u32, u32, u32, u32) = (2026, 1, 1, 0, 0, 0);

fn new_year() -> i64 {
    let (y, mo, d, h, mi, s) = NEW_YEAR;
    utc(y, mo, d, h, mi, s)
}

// ---------------------------------------------------------------------------------------------
// `N/step`: from N to the field's maximum, every step.

#[test]
fn b02_single_number_step_in_the_minute_field() {
    assert_eq!(
        first("0/15 2 * * *", new_year(), 5),
        times(&[
            (2026, 1, 1, 2, 0, 0),
            (2026, 1, 1, 2, 15, 0),
            (2026, 1, 1, 2, 30, 0),
            (2026, 1, 1, 2, 45, 0),
            (2026, 1, 2, 2, 0, 0),
        ])
    );
    // The same slots as the explicit range.
    assert_eq!(
        first("0/15 2 * * *", new_year(), 9),
        first("0-59/15 2 * * *", new_year(), 9)
    );
    assert_eq!(
        first("5/20 * * * *", new_year(), 4),
        times(&[
            (2026, 1, 1, 0, 5, 0),
            (2026, 1, 1, 0, 25, 0),
            (2026, 1, 1, 0, 45, 0),
            (2026, 1, 1, 1, 5, 0),
        ])
    );
}

#[test]
fn b02_single_number_step_in_every_other_field() {
    // Seconds (6 fields).
    assert_eq!(
        first("10/20 * * * * *", new_year(), 4),
        times(&[
            (2026, 1, 1, 0, 0, 10),
            (2026, 1, 1, 0, 0, 30),
            (2026, 1, 1, 0, 0, 50),
            (2026, 1, 1, 0, 1, 10),
        ])
    );
    // Hour.
    assert_eq!(
        first("0 1/6 * * *", new_year(), 5),
        times(&[
            (2026, 1, 1, 1, 0, 0),
            (2026, 1, 1, 7, 0, 0),
            (2026, 1, 1, 13, 0, 0),
            (2026, 1, 1, 19, 0, 0),
            (2026, 1, 2, 1, 0, 0),
        ])
    );
    // Day of month: 10, 20, 30 (February has no 30th).
    assert_eq!(
        first("0 0 10/10 * *", new_year(), 6),
        times(&[
            (2026, 1, 10, 0, 0, 0),
            (2026, 1, 20, 0, 0, 0),
            (2026, 1, 30, 0, 0, 0),
            (2026, 2, 10, 0, 0, 0),
            (2026, 2, 20, 0, 0, 0),
            (2026, 3, 10, 0, 0, 0),
        ])
    );
    // Month: March, July, November.
    assert_eq!(
        first("0 0 1 3/4 *", new_year(), 4),
        times(&[
            (2026, 3, 1, 0, 0, 0),
            (2026, 7, 1, 0, 0, 0),
            (2026, 11, 1, 0, 0, 0),
            (2027, 3, 1, 0, 0, 0),
        ])
    );
    // Day of week: 2/2 = 2, 4, 6 = Tuesday, Thursday, Saturday (3/2 would reach 7, Sunday).
    assert_eq!(
        first("0 0 * * 2/2", new_year(), 4),
        times(&[
            (2026, 1, 3, 0, 0, 0),
            (2026, 1, 6, 0, 0, 0),
            (2026, 1, 8, 0, 0, 0),
            (2026, 1, 10, 0, 0, 0),
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// Vixie's day rule: a day field that starts with `*` makes the two day fields match by AND.

#[test]
fn b02_a_starred_day_field_makes_the_days_match_by_and() {
    // Odd days of the month that are Mondays: Mondays of 2026 start on Jan 5.
    assert_eq!(
        first("0 0 */2 * 1", new_year(), 5),
        times(&[
            (2026, 1, 5, 0, 0, 0),
            (2026, 1, 19, 0, 0, 0),
            (2026, 2, 9, 0, 0, 0),
            (2026, 2, 23, 0, 0, 0),
            (2026, 3, 9, 0, 0, 0),
        ])
    );
    // Both starred: days 1, 11, 21, 31 that are a Sunday, Wednesday or Saturday.
    assert_eq!(
        first("0 0 */10 * */3", new_year(), 6),
        times(&[
            (2026, 1, 11, 0, 0, 0),
            (2026, 1, 21, 0, 0, 0),
            (2026, 1, 31, 0, 0, 0),
            (2026, 2, 1, 0, 0, 0),
            (2026, 2, 11, 0, 0, 0),
            (2026, 2, 21, 0, 0, 0),
        ])
    );
    // A plain `*` (or `?`) leaves the other field alone in charge.
    let mondays = times(&[
        (2026, 1, 5, 0, 0, 0),
        (2026, 1, 12, 0, 0, 0),
        (2026, 1, 19, 0, 0, 0),
    ]);
    assert_eq!(first("0 0 * * 1", new_year(), 3), mondays);
    assert_eq!(first("0 0 ? * MON", new_year(), 3), mondays);
    assert_eq!(
        first("0 0 13 * *", new_year(), 2),
        times(&[(2026, 1, 13, 0, 0, 0), (2026, 2, 13, 0, 0, 0)])
    );
}

#[test]
fn b02_two_restricted_day_fields_match_by_or() {
    // The 1st, the 15th, and every Monday.
    assert_eq!(
        first("0 0 1,15 * 1", new_year(), 7),
        times(&[
            (2026, 1, 5, 0, 0, 0),
            (2026, 1, 12, 0, 0, 0),
            (2026, 1, 15, 0, 0, 0),
            (2026, 1, 19, 0, 0, 0),
            (2026, 1, 26, 0, 0, 0),
            (2026, 2, 1, 0, 0, 0),
            (2026, 2, 2, 0, 0, 0),
        ])
    );
    // Friday or the 13th.
    assert_eq!(
        first("0 0 13 * 5", new_year(), 3),
        times(&[
            (2026, 1, 2, 0, 0, 0),
            (2026, 1, 9, 0, 0, 0),
            (2026, 1, 13, 0, 0, 0),
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// Errors name the field and the value; the field-count hint only when the count is wrong.

#[test]
fn b02_errors_name_the_field_and_the_value() {
    for (expression, field, value) in [
        ("61 * * * *", "minute", "\"61\""),
        ("* 24 * * *", "hour", "\"24\""),
        ("* * 32 * *", "day-of-month", "\"32\""),
        ("* * 0 * *", "day-of-month", "\"0\""),
        ("* * * 13 *", "month", "\"13\""),
        ("* * * * 8", "day-of-week", "\"8\""),
        ("61 * * * * *", "seconds", "\"61\""),
        ("0 61 * * * *", "minute", "\"61\""),
        ("*/0 * * * *", "minute", "\"*/0\""),
        ("/10 * * * *", "minute", "\"/10\""),
        ("0 0 5-1 * *", "day-of-month", "\"5-1\""),
        ("a * * * *", "minute", "\"a\""),
        ("0 0 1,40 * *", "day-of-month", "\"1,40\""),
    ] {
        let err = Schedule::cron(expression, None).unwrap_err();
        assert!(matches!(err, Error::InvalidCron { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("the {field} field {value}")),
            "{expression:?}: {text}"
        );
        assert!(
            !text.contains("use 5 fields"),
            "{expression:?}: the field count was right: {text}"
        );
    }
}

#[test]
fn b02_the_field_count_hint_comes_only_with_a_wrong_count() {
    for (expression, count) in [
        ("* * * *", "4 fields"),
        ("0 0 0 * * * 2026", "7 fields"),
        ("daily", "1 field;"),
    ] {
        let text = Schedule::cron(expression, None).unwrap_err().to_string();
        assert!(
            text.contains(count) && text.contains("use 5 fields"),
            "{expression:?}: {text}"
        );
    }
    let never = Schedule::cron("0 0 30 2 *", None).unwrap_err().to_string();
    assert!(
        never.contains("never fires") && !never.contains("use 5 fields"),
        "{never}"
    );
}
