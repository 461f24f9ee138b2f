//! Slot math: interval parsing, the epoch grid, cron with IANA timezones and the defined DST
//! rules, `at`, jitter and the late rule. [B-01..B-10]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anarchon_core::Error;
use anarchon_core::slot::{
    CronSchedule, DstRule, Schedule, interval_from_ms, is_late, jitter, parse_interval,
};
use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

/// A UTC instant in epoch ms.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
        .unwrap()
        .timestamp_millis()
}

/// Renders epoch ms as a UTC timestamp, for readable assertion failures.
fn show(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339()
}

fn cron(expression: &str, tz: &str) -> Schedule {
    Schedule::cron(expression, Some(tz)).unwrap()
}

/// The slots in `(from, to]` by walking `next_after`, rendered as UTC.
fn slots(schedule: &Schedule, from: i64, to: i64) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = from;
    while let Some(slot) = schedule.next_after(cursor) {
        if slot > to {
            break;
        }
        out.push(show(slot));
        cursor = slot;
    }
    out
}

fn shown(instants: &[i64]) -> Vec<String> {
    instants.iter().map(|&ms| show(ms)).collect()
}

// ---------------------------------------------------------------------------------------------
// B-01: intervals

#[test]
fn b01_parses_every_unit_and_combination() {
    let table: &[(&str, u64)] = &[
        ("250ms", 250),
        ("10s", 10_000),
        ("35m", 35 * 60_000),
        ("1h", 3_600_000),
        ("2d", 2 * 86_400_000),
        ("1h30m", 90 * 60_000),
        ("1h30m15s", 5_415_000),
        (
            "1d2h3m4s5ms",
            86_400_000 + 2 * 3_600_000 + 3 * 60_000 + 4_000 + 5,
        ),
        ("  10s\t", 10_000),
        ("1h 30m", 90 * 60_000),
        ("0h1s", 1_000),
        ("90s", 90_000),
        ("1500ms", 1_500),
        ("007s", 7_000),
    ];
    for &(input, ms) in table {
        assert_eq!(
            parse_interval(input).unwrap(),
            Duration::from_millis(ms),
            "{input:?}"
        );
    }
}

#[test]
fn b01_rejects_bad_intervals_naming_the_input_and_the_reason() {
    let table: &[(&str, &str)] = &[
        ("", "empty"),
        ("   ", "empty"),
        ("0s", "zero"),
        ("0ms", "zero"),
        ("0h0m", "zero"),
        ("-5s", "negative"),
        ("1h-5m", "negative"),
        ("10", "no unit"),
        ("1h30", "no unit"),
        ("10x", "unknown unit"),
        ("10sec", "unknown unit"),
        ("10S", "unknown unit"),
        ("5M", "unknown unit"),
        ("1.5h", "fractions"),
        ("h", "expected a number"),
        ("+10s", "expected a number"),
        ("10s!", "expected a number"),
        ("ten seconds", "expected a number"),
        ("1 h", "no unit"),
        ("30m1h", "largest to smallest"),
        ("1s1s", "largest to smallest"),
        ("99999999999999999999s", "too large"),
        ("106751991168d", "too large"),
        ("9223372036854775808ms", "too large"),
    ];
    for &(input, reason) in table {
        let err = parse_interval(input).unwrap_err();
        match &err {
            Error::InvalidInterval {
                input: named,
                reason: why,
            } => {
                assert_eq!(named, input);
                assert!(
                    why.contains(reason),
                    "{input:?}: reason {why:?} lacks {reason:?}"
                );
            }
            other => panic!("{input:?}: wrong error {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(&format!("{input:?}")), "{message}");
        assert!(
            message.contains("1h30m"),
            "the message shows the format: {message}"
        );
    }
}

#[test]
fn b01_accepts_the_largest_interval_that_fits_in_i64_ms() {
    let max = format!("{}ms", i64::MAX);
    assert_eq!(
        parse_interval(&max).unwrap(),
        Duration::from_millis(i64::MAX as u64)
    );
}

#[test]
fn b01_interval_from_ms_refuses_zero_and_negative() {
    assert_eq!(interval_from_ms(1).unwrap(), Duration::from_millis(1));
    assert_eq!(interval_from_ms(10_000).unwrap(), Duration::from_secs(10));
    for ms in [0, -1, i64::MIN] {
        match interval_from_ms(ms).unwrap_err() {
            Error::InvalidInterval { input, .. } => assert_eq!(input, ms.to_string()),
            other => panic!("wrong error {other:?}"),
        }
    }
}

#[test]
fn b01_rejects_zero_interval() {
    for interval in [Duration::ZERO, Duration::from_micros(999)] {
        assert!(matches!(
            Schedule::every(interval, 0),
            Err(Error::InvalidInterval { .. })
        ));
    }
    assert!(matches!(
        Schedule::every(Duration::from_millis(u64::MAX), 0),
        Err(Error::InvalidInterval { .. })
    ));
}

proptest! {
    #[test]
    fn b01_parse_interval_round_trips_its_parts(
        d in 0u64..100, h in 0u64..100, m in 0u64..100, s in 0u64..100, ms in 0u64..2000,
    ) {
        let total = (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + ms;
        let text = format!("{d}d{h}h{m}m{s}s{ms}ms");
        match parse_interval(&text) {
            Ok(parsed) => prop_assert_eq!(parsed, Duration::from_millis(total)),
            Err(_) => prop_assert_eq!(total, 0),
        }
    }

    #[test]
    fn b01_parse_interval_never_panics(input in "\\PC{0,20}") {
        let _ = parse_interval(&input);
    }
}

// ---------------------------------------------------------------------------------------------
// B-05: the epoch grid

#[test]
fn b05_every_10s_is_on_the_epoch_grid() {
    let every = Schedule::every(parse_interval("10s").unwrap(), 0).unwrap();
    // Whatever "now" is, slots are at :00, :10, :20 ...
    let start = utc(2026, 5, 1, 12, 0, 3) + 417;
    assert_eq!(every.newest_due(start), Some(utc(2026, 5, 1, 12, 0, 0)));
    assert_eq!(every.next_after(start), Some(utc(2026, 5, 1, 12, 0, 10)));
    assert_eq!(
        every.next_after(utc(2026, 5, 1, 12, 0, 10)),
        Some(utc(2026, 5, 1, 12, 0, 20))
    );
    assert_eq!(
        every.newest_due(utc(2026, 5, 1, 12, 0, 10)),
        Some(utc(2026, 5, 1, 12, 0, 10))
    );
    assert_eq!(every.newest_due(0), Some(0));
    assert_eq!(every.newest_due(-1), Some(-10_000));
}

#[test]
fn b05_offset_shifts_the_grid_and_is_normalised() {
    let every = Schedule::every(Duration::from_secs(60), 5_000).unwrap();
    assert_eq!(
        every.next_after(utc(2026, 5, 1, 12, 0, 0)),
        Some(utc(2026, 5, 1, 12, 0, 5))
    );
    assert_eq!(
        every.newest_due(utc(2026, 5, 1, 12, 0, 4)),
        Some(utc(2026, 5, 1, 11, 59, 5))
    );

    let negative = Schedule::every(Duration::from_secs(60), -1_000).unwrap();
    assert!(matches!(
        negative,
        Schedule::Every {
            interval_ms: 60_000,
            offset_ms: 59_000
        }
    ));
    let large = Schedule::every(Duration::from_secs(60), 125_000).unwrap();
    assert!(matches!(
        large,
        Schedule::Every {
            offset_ms: 5_000,
            ..
        }
    ));
    assert_eq!(large.next_after(0), every.next_after(0));
}

#[test]
fn b05_sub_millisecond_parts_of_an_interval_are_dropped() {
    let every = Schedule::every(Duration::from_micros(1_500), 0).unwrap();
    assert!(matches!(every, Schedule::Every { interval_ms: 1, .. }));
}

#[test]
fn b05_hand_built_grid_with_zero_interval_has_no_slots() {
    let broken = Schedule::Every {
        interval_ms: 0,
        offset_ms: 0,
    };
    assert_eq!(broken.newest_due(1_000), None);
    assert_eq!(broken.next_after(1_000), None);
    assert!(broken.due_between(0, 1_000, 10).is_empty());
}

#[test]
fn b05_due_between_keeps_the_newest_max_oldest_first() {
    let every = Schedule::every(Duration::from_secs(10), 0).unwrap();
    let from = utc(2026, 5, 1, 12, 0, 0);
    let to = utc(2026, 5, 1, 12, 1, 0);
    // (from, to]: :10 .. 1:00, six slots; `from` itself is excluded, `to` included.
    assert_eq!(every.due_between(from, to, 100).len(), 6);
    assert_eq!(
        every.due_between(from, to, 2),
        vec![utc(2026, 5, 1, 12, 0, 50), utc(2026, 5, 1, 12, 1, 0)]
    );
    assert!(every.due_between(from, to, 0).is_empty());
    assert!(every.due_between(to, from, 10).is_empty());
    assert!(every.due_between(from, from + 9_999, 10).is_empty());
}

#[test]
fn b05_grid_does_not_overflow_at_the_ends_of_time() {
    let every = Schedule::every(Duration::from_secs(7), 3).unwrap();
    assert!(every.next_after(i64::MAX).is_none());
    assert!(every.newest_due(i64::MIN).is_none());
    let near_max = every.newest_due(i64::MAX).unwrap();
    assert!(i64::MAX - near_max < 7_000);
    let _ = every.due_between(i64::MIN, i64::MAX, 3);
}

proptest! {
    #[test]
    fn b05_grid_slots_bracket_now(
        interval in 1u64..200_000_000,
        offset in -1_000_000_000i64..1_000_000_000,
        now in -4_000_000_000_000i64..4_000_000_000_000,
    ) {
        let every = Schedule::every(Duration::from_millis(interval), offset).unwrap();
        let due = every.newest_due(now).unwrap();
        let next = every.next_after(now).unwrap();
        prop_assert!(due <= now && now < next);
        prop_assert_eq!(next - due, interval as i64);
        prop_assert_eq!((due - offset).rem_euclid(interval as i64), 0);
        prop_assert_eq!((next - offset).rem_euclid(interval as i64), 0);
        prop_assert_eq!(every.next_after(due), Some(next));
        prop_assert_eq!(every.newest_due(next - 1), Some(due));
        prop_assert_eq!(every.newest_due(due), Some(due));
    }

    #[test]
    fn b05_due_between_matches_walking_the_grid(
        interval in 1u64..100_000,
        offset in -100_000i64..100_000,
        from in -1_000_000i64..1_000_000,
        span in 0i64..1_000_000,
        max in 0usize..20,
    ) {
        let every = Schedule::every(Duration::from_millis(interval), offset).unwrap();
        let to = from + span;
        let mut walked = Vec::new();
        let mut cursor = from;
        while let Some(slot) = every.next_after(cursor) {
            if slot > to { break; }
            walked.push(slot);
            cursor = slot;
        }
        let newest: Vec<i64> = walked[walked.len().saturating_sub(max)..].to_vec();
        prop_assert_eq!(every.due_between(from, to, max), newest);
    }
}

// ---------------------------------------------------------------------------------------------
// B-02, B-06: cron parsing and timezones

#[test]
fn b02_rejects_bad_cron_naming_the_expression() {
    for expression in [
        "",
        "   ",
        "* * * *",
        "0 0 0 * * * *",
        "0 0 0 * * * 2026",
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "a b c d e",
        "@every 5m",
        "@reboot",
        "0 0 30 2 *",
        "*/0 * * * *",
    ] {
        let err = Schedule::cron(expression, None).unwrap_err();
        match &err {
            Error::InvalidCron {
                expression: named,
                reason,
            } => {
                assert_eq!(named, expression);
                assert!(!reason.is_empty());
            }
            other => panic!("{expression:?}: wrong error {other:?}"),
        }
        assert!(
            err.to_string().contains(&format!("{expression:?}")),
            "{err}"
        );
    }
}

#[test]
fn b02_accepts_five_and_six_fields_and_aliases() {
    for expression in [
        "*/5 * * * *",
        "0 9 * * MON-FRI",
        "30 2 1 JAN *",
        "15 30 2 * * *",
        "0 0 L * *",
        "0 0 * * 5L",
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
        "  @DAILY  ",
    ] {
        let schedule = Schedule::cron(expression, None).unwrap();
        let Schedule::Cron(parsed) = &schedule else {
            panic!("not a cron schedule")
        };
        assert_eq!(parsed.expression(), expression);
        assert_eq!(parsed.timezone(), Tz::UTC);
        assert!(
            schedule.next_after(utc(2026, 1, 1, 0, 0, 0)).is_some(),
            "{expression}"
        );
    }
}

#[test]
fn b06_unknown_timezone_is_named() {
    for name in ["Europe/Berlinn", "europe/berlin", "CEST", "", "+01:00"] {
        match Schedule::cron("0 * * * *", Some(name)).unwrap_err() {
            Error::UnknownTimezone { name: named } => assert_eq!(named, name),
            other => panic!("{name:?}: wrong error {other:?}"),
        }
    }
    let Schedule::Cron(parsed) = cron("0 * * * *", "America/New_York") else {
        panic!()
    };
    assert_eq!(parsed.timezone(), chrono_tz::America::New_York);
}

#[test]
fn b06_daily_and_hourly_in_utc() {
    let daily = Schedule::cron("@daily", None).unwrap();
    let now = utc(2026, 5, 1, 12, 34, 56);
    assert_eq!(daily.newest_due(now), Some(utc(2026, 5, 1, 0, 0, 0)));
    assert_eq!(daily.next_after(now), Some(utc(2026, 5, 2, 0, 0, 0)));
    assert_eq!(
        daily.newest_due(utc(2026, 5, 1, 0, 0, 0)),
        Some(utc(2026, 5, 1, 0, 0, 0))
    );
    assert_eq!(
        daily.next_after(utc(2026, 5, 1, 0, 0, 0)),
        Some(utc(2026, 5, 2, 0, 0, 0))
    );

    let hourly = Schedule::cron("@hourly", None).unwrap();
    assert_eq!(hourly.newest_due(now), Some(utc(2026, 5, 1, 12, 0, 0)));
    assert_eq!(hourly.next_after(now), Some(utc(2026, 5, 1, 13, 0, 0)));
    assert_eq!(
        hourly.due_between(utc(2026, 5, 1, 0, 0, 0), now, 3),
        vec![
            utc(2026, 5, 1, 10, 0, 0),
            utc(2026, 5, 1, 11, 0, 0),
            utc(2026, 5, 1, 12, 0, 0)
        ]
    );
}

#[test]
fn b06_daily_follows_the_timezone_midnight() {
    // Midnight in New York is 04:00Z in summer time and 05:00Z in winter time.
    let daily = cron("@daily", "America/New_York");
    assert_eq!(
        slots(
            &daily,
            utc(2026, 10, 30, 12, 0, 0),
            utc(2026, 11, 3, 12, 0, 0)
        ),
        [
            "2026-10-31T04:00:00+00:00",
            "2026-11-01T04:00:00+00:00",
            "2026-11-02T05:00:00+00:00",
            "2026-11-03T05:00:00+00:00",
        ]
    );
}

#[test]
fn b06_six_field_seconds_are_honoured() {
    let every_20s = Schedule::cron("*/20 * * * * *", None).unwrap();
    let now = utc(2026, 5, 1, 12, 0, 30);
    assert_eq!(every_20s.newest_due(now), Some(utc(2026, 5, 1, 12, 0, 20)));
    assert_eq!(every_20s.next_after(now), Some(utc(2026, 5, 1, 12, 0, 40)));
    assert_eq!(
        every_20s.next_after(now + 1),
        Some(utc(2026, 5, 1, 12, 0, 40))
    );
    assert_eq!(
        every_20s.newest_due(now - 1),
        Some(utc(2026, 5, 1, 12, 0, 20))
    );
}

#[test]
fn b06_weekday_and_month_fields_use_the_local_date() {
    // 23:30 on Mondays in Berlin is Monday 21:30Z in summer.
    let monday = cron("30 23 * * MON", "Europe/Berlin");
    assert_eq!(
        monday.next_after(utc(2026, 6, 1, 0, 0, 0)),
        Some(utc(2026, 6, 1, 21, 30, 0))
    );
    // 00:30 on Tuesdays in Berlin is Monday 22:30Z in summer.
    let tuesday = cron("30 0 * * TUE", "Europe/Berlin");
    assert_eq!(
        tuesday.next_after(utc(2026, 6, 1, 0, 0, 0)),
        Some(utc(2026, 6, 1, 22, 30, 0))
    );
}

#[test]
fn b06_sub_second_now_is_handled() {
    let every_minute = Schedule::cron("* * * * *", None).unwrap();
    let minute = utc(2026, 5, 1, 12, 0, 0);
    assert_eq!(every_minute.newest_due(minute + 999), Some(minute));
    assert_eq!(every_minute.next_after(minute - 1), Some(minute));
    assert_eq!(every_minute.next_after(minute), Some(minute + 60_000));
    assert_eq!(every_minute.newest_due(minute - 1), Some(minute - 60_000));
}

// ---------------------------------------------------------------------------------------------
// B-07: DST, Europe/Berlin (2026-03-29 02:00 CET -> 03:00 CEST at 01:00Z;
//                          2026-10-25 03:00 CEST -> 02:00 CET at 01:00Z)

#[test]
fn b07_berlin_spring_forward_fixed_time_fires_once_after_the_gap() {
    for expression in ["30 2 * * *", "0 30 2 * * *"] {
        let job = cron(expression, "Europe/Berlin");
        assert_eq!(
            slots(&job, utc(2026, 3, 27, 12, 0, 0), utc(2026, 3, 31, 12, 0, 0)),
            [
                "2026-03-28T01:30:00+00:00", // 02:30 CET
                "2026-03-29T01:00:00+00:00", // no 02:30: 03:00 CEST, the first instant after
                "2026-03-30T00:30:00+00:00", // 02:30 CEST
                "2026-03-31T00:30:00+00:00",
            ],
            "{expression}"
        );
    }
    // Seconds inside the gap land on the same first instant after it.
    let job = cron("15 30 2 * * *", "Europe/Berlin");
    assert_eq!(
        job.next_after(utc(2026, 3, 28, 12, 0, 0)),
        Some(utc(2026, 3, 29, 1, 0, 0))
    );
    assert_eq!(
        job.newest_due(utc(2026, 3, 29, 1, 0, 0)),
        Some(utc(2026, 3, 29, 1, 0, 0))
    );
    assert_eq!(
        job.newest_due(utc(2026, 3, 29, 0, 59, 59)),
        Some(utc(2026, 3, 28, 1, 30, 15))
    );
}

#[test]
fn b07_berlin_spring_forward_skipped_times_of_a_list_make_one_slot() {
    // 02:00 and 02:30 are both skipped: they fire once, together, at 03:00 CEST; 03:00 itself
    // is the same instant, so one slot.
    let job = cron("0,30 2,3 * * *", "Europe/Berlin");
    assert_eq!(
        slots(&job, utc(2026, 3, 28, 12, 0, 0), utc(2026, 3, 29, 12, 0, 0)),
        [
            "2026-03-29T01:00:00+00:00", // 02:00, 02:30, 03:00 CEST
            "2026-03-29T01:30:00+00:00", // 03:30 CEST
        ]
    );
}

#[test]
fn b07_berlin_spring_forward_wildcard_hour_skips_the_gap() {
    let hourly = cron("30 * * * *", "Europe/Berlin");
    assert_eq!(
        slots(
            &hourly,
            utc(2026, 3, 28, 23, 0, 0),
            utc(2026, 3, 29, 3, 0, 0)
        ),
        [
            "2026-03-28T23:30:00+00:00", // 00:30 CET
            "2026-03-29T00:30:00+00:00", // 01:30 CET
            "2026-03-29T01:30:00+00:00", // 03:30 CEST: 02:30 does not exist
            "2026-03-29T02:30:00+00:00", // 04:30 CEST
        ]
    );
    let quarter = cron("0 */15 * * * *", "Europe/Berlin");
    assert_eq!(
        slots(
            &quarter,
            utc(2026, 3, 29, 0, 30, 0),
            utc(2026, 3, 29, 1, 15, 0)
        ),
        [
            "2026-03-29T00:45:00+00:00", // 01:45 CET
            "2026-03-29T01:00:00+00:00", // 03:00 CEST
            "2026-03-29T01:15:00+00:00", // 03:15 CEST
        ]
    );
}

#[test]
fn b07_berlin_fall_back_fixed_time_fires_at_the_first_occurrence_only() {
    for expression in ["30 2 * * *", "0 30 2 * * *"] {
        let job = cron(expression, "Europe/Berlin");
        assert_eq!(
            slots(
                &job,
                utc(2026, 10, 23, 12, 0, 0),
                utc(2026, 10, 26, 12, 0, 0)
            ),
            [
                "2026-10-24T00:30:00+00:00", // 02:30 CEST
                "2026-10-25T00:30:00+00:00", // 02:30 CEST, the first pass; not 01:30Z (CET)
                "2026-10-26T01:30:00+00:00", // 02:30 CET
            ],
            "{expression}"
        );
        // During the second pass of the hour, the newest due slot is still the first pass.
        assert_eq!(
            job.newest_due(utc(2026, 10, 25, 1, 45, 0)),
            Some(utc(2026, 10, 25, 0, 30, 0))
        );
        assert_eq!(
            job.next_after(utc(2026, 10, 25, 1, 29, 0)),
            Some(utc(2026, 10, 26, 1, 30, 0))
        );
    }
    // 03:00 only happens once (clocks go back at 03:00 CEST): 03:00 CET.
    let three = cron("0 3 * * *", "Europe/Berlin");
    assert_eq!(
        three.next_after(utc(2026, 10, 24, 12, 0, 0)),
        Some(utc(2026, 10, 25, 2, 0, 0))
    );
    // A list and a range are wall-clock times too: each repeated time fires once.
    let list = cron("0,30 1-2 * * *", "Europe/Berlin");
    assert_eq!(
        slots(
            &list,
            utc(2026, 10, 24, 22, 0, 0),
            utc(2026, 10, 25, 12, 0, 0)
        ),
        [
            "2026-10-24T23:00:00+00:00", // 01:00 CEST
            "2026-10-24T23:30:00+00:00", // 01:30 CEST
            "2026-10-25T00:00:00+00:00", // 02:00 CEST
            "2026-10-25T00:30:00+00:00", // 02:30 CEST
        ]
    );
}

#[test]
fn b07_berlin_fall_back_wildcard_hour_fires_in_both_passes() {
    let hourly = cron("30 * * * *", "Europe/Berlin");
    assert_eq!(
        slots(
            &hourly,
            utc(2026, 10, 24, 23, 0, 0),
            utc(2026, 10, 25, 3, 0, 0)
        ),
        [
            "2026-10-24T23:30:00+00:00", // 01:30 CEST
            "2026-10-25T00:30:00+00:00", // 02:30 CEST
            "2026-10-25T01:30:00+00:00", // 02:30 CET
            "2026-10-25T02:30:00+00:00", // 03:30 CET
        ]
    );
    // From inside the second pass, the newest due slot is the second pass.
    assert_eq!(
        hourly.newest_due(utc(2026, 10, 25, 1, 45, 0)),
        Some(utc(2026, 10, 25, 1, 30, 0))
    );
    assert_eq!(
        hourly.newest_due(utc(2026, 10, 25, 1, 15, 0)),
        Some(utc(2026, 10, 25, 0, 30, 0))
    );
    assert_eq!(
        hourly.next_after(utc(2026, 10, 25, 0, 45, 0)),
        Some(utc(2026, 10, 25, 1, 30, 0))
    );

    let seconds = cron("*/20 59 2 * * *", "Europe/Berlin");
    assert_eq!(
        slots(
            &seconds,
            utc(2026, 10, 25, 0, 0, 0),
            utc(2026, 10, 25, 2, 0, 0)
        ),
        [
            "2026-10-25T00:59:00+00:00",
            "2026-10-25T00:59:20+00:00",
            "2026-10-25T00:59:40+00:00",
            "2026-10-25T01:59:00+00:00",
            "2026-10-25T01:59:20+00:00",
            "2026-10-25T01:59:40+00:00",
        ]
    );
}

#[test]
fn b07_every_second_job_runs_through_both_passes_of_the_repeated_hour() {
    let every_second = cron("* * * * * *", "Europe/Berlin");
    let change = utc(2026, 10, 25, 1, 0, 0);
    assert_eq!(every_second.next_after(change - 1_000), Some(change));
    assert_eq!(every_second.newest_due(change + 500), Some(change));
    assert_eq!(every_second.newest_due(change - 1), Some(change - 1_000));
    assert_eq!(
        every_second.due_between(change - 2_000, change + 2_000, 10),
        vec![change - 1_000, change, change + 1_000, change + 2_000]
    );
    // And a gap: 01:59:59 CET is followed by 03:00:00 CEST, one second later.
    let gap = utc(2026, 3, 29, 1, 0, 0);
    assert_eq!(every_second.next_after(gap - 1_000), Some(gap));
    assert_eq!(every_second.newest_due(gap - 1), Some(gap - 1_000));
}

// ---------------------------------------------------------------------------------------------
// B-07: DST, America/New_York (2026-03-08 02:00 EST -> 03:00 EDT at 07:00Z;
//                              2026-11-01 02:00 EDT -> 01:00 EST at 06:00Z)

#[test]
fn b07_new_york_spring_forward() {
    let fixed = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        slots(&fixed, utc(2026, 3, 7, 0, 0, 0), utc(2026, 3, 9, 12, 0, 0)),
        [
            "2026-03-07T07:30:00+00:00", // 02:30 EST
            "2026-03-08T07:00:00+00:00", // 03:00 EDT
            "2026-03-09T06:30:00+00:00", // 02:30 EDT
        ]
    );
    let six = cron("45 59 2 * * *", "America/New_York");
    assert_eq!(
        six.next_after(utc(2026, 3, 7, 12, 0, 0)),
        Some(utc(2026, 3, 8, 7, 0, 0))
    );

    let hourly = cron("@hourly", "America/New_York");
    assert_eq!(
        slots(&hourly, utc(2026, 3, 8, 5, 30, 0), utc(2026, 3, 8, 8, 0, 0)),
        [
            "2026-03-08T06:00:00+00:00", // 01:00 EST
            "2026-03-08T07:00:00+00:00", // 03:00 EDT; 02:00 does not exist
            "2026-03-08T08:00:00+00:00", // 04:00 EDT
        ]
    );
}

#[test]
fn b07_new_york_fall_back() {
    let fixed = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        slots(
            &fixed,
            utc(2026, 10, 31, 12, 0, 0),
            utc(2026, 11, 2, 12, 0, 0)
        ),
        [
            "2026-11-01T05:30:00+00:00", // 01:30 EDT; not 06:30Z (01:30 EST)
            "2026-11-02T06:30:00+00:00", // 01:30 EST
        ]
    );
    let six = cron("0 30 1 * * *", "America/New_York");
    assert_eq!(
        six.newest_due(utc(2026, 11, 1, 6, 45, 0)),
        Some(utc(2026, 11, 1, 5, 30, 0))
    );

    let hourly = cron("@hourly", "America/New_York");
    assert_eq!(
        slots(
            &hourly,
            utc(2026, 11, 1, 3, 30, 0),
            utc(2026, 11, 1, 7, 0, 0)
        ),
        [
            "2026-11-01T04:00:00+00:00", // 00:00 EDT
            "2026-11-01T05:00:00+00:00", // 01:00 EDT
            "2026-11-01T06:00:00+00:00", // 01:00 EST
            "2026-11-01T07:00:00+00:00", // 02:00 EST
        ]
    );
    let steps = cron("0 */2 * * *", "America/New_York");
    assert_eq!(
        slots(
            &steps,
            utc(2026, 11, 1, 3, 30, 0),
            utc(2026, 11, 1, 9, 0, 0)
        ),
        [
            "2026-11-01T04:00:00+00:00", // 00:00 EDT
            "2026-11-01T07:00:00+00:00", // 02:00 EST
            "2026-11-01T09:00:00+00:00", // 04:00 EST
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// B-07: DST, Australia/Lord_Howe, a 30-minute shift
// (2026-04-05 02:00 LHDT +11 -> 01:30 LHST +10:30 at 2026-04-04T15:00Z;
//  2026-10-04 02:00 LHST +10:30 -> 02:30 LHDT +11 at 2026-10-03T15:30Z)

#[test]
fn b07_lord_howe_fall_back_half_hour() {
    let fixed = cron("45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(&fixed, utc(2026, 4, 3, 12, 0, 0), utc(2026, 4, 5, 23, 0, 0)),
        [
            "2026-04-03T14:45:00+00:00", // 01:45 LHDT
            "2026-04-04T14:45:00+00:00", // 01:45 LHDT, first pass; not 15:15Z (LHST)
            "2026-04-05T15:15:00+00:00", // 01:45 LHST
        ]
    );
    let six = cron("30 45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        six.newest_due(utc(2026, 4, 4, 15, 20, 0)),
        Some(utc(2026, 4, 4, 14, 45, 30))
    );

    let quarter = cron("*/15 * * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(
            &quarter,
            utc(2026, 4, 4, 14, 20, 0),
            utc(2026, 4, 4, 15, 30, 0)
        ),
        [
            "2026-04-04T14:30:00+00:00", // 01:30 LHDT
            "2026-04-04T14:45:00+00:00", // 01:45 LHDT
            "2026-04-04T15:00:00+00:00", // 01:30 LHST
            "2026-04-04T15:15:00+00:00", // 01:45 LHST
            "2026-04-04T15:30:00+00:00", // 02:00 LHST
        ]
    );
}

#[test]
fn b07_lord_howe_spring_forward_half_hour() {
    let fixed = cron("15 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(
            &fixed,
            utc(2026, 10, 2, 12, 0, 0),
            utc(2026, 10, 4, 23, 0, 0)
        ),
        [
            "2026-10-02T15:45:00+00:00", // 02:15 LHST
            "2026-10-03T15:30:00+00:00", // no 02:15: 02:30 LHDT, the first instant after
            "2026-10-04T15:15:00+00:00", // 02:15 LHDT
        ]
    );
    // 02:30 exists (it is the first time after the gap) and is fixed: it fires normally.
    let half = cron("0 30 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        half.next_after(utc(2026, 10, 3, 12, 0, 0)),
        Some(utc(2026, 10, 3, 15, 30, 0))
    );
    // Times in the gap and 02:45 are distinct slots; the skipped two share one.
    let list = cron("0,15,45 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(
            &list,
            utc(2026, 10, 3, 12, 0, 0),
            utc(2026, 10, 3, 18, 0, 0)
        ),
        ["2026-10-03T15:30:00+00:00", "2026-10-03T15:45:00+00:00"]
    );

    let quarter = cron("*/15 * * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(
            &quarter,
            utc(2026, 10, 3, 15, 0, 0),
            utc(2026, 10, 3, 15, 45, 0)
        ),
        [
            "2026-10-03T15:15:00+00:00", // 01:45 LHST
            "2026-10-03T15:30:00+00:00", // 02:30 LHDT; 02:00 and 02:15 do not exist
            "2026-10-03T15:45:00+00:00", // 02:45 LHDT
        ]
    );
    let hourly = cron("0 * * * *", "Australia/Lord_Howe");
    assert_eq!(
        slots(
            &hourly,
            utc(2026, 10, 3, 14, 0, 0),
            utc(2026, 10, 3, 16, 0, 0)
        ),
        [
            "2026-10-03T14:30:00+00:00", // 01:00 LHST
            "2026-10-03T16:00:00+00:00", // 03:00 LHDT; 02:00 does not exist
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// B-07: Antarctica/Troll steps two hours (2026-03-29 01:00 +00 -> 03:00 +02 at 01:00Z;
//                                         2026-10-25 03:00 +02 -> 01:00 +00 at 01:00Z)

#[test]
fn b07_troll_two_hour_fall_back_fires_a_fixed_time_once() {
    let job = cron("30 2 * * *", "Antarctica/Troll");
    assert_eq!(
        slots(
            &job,
            utc(2026, 10, 24, 12, 0, 0),
            utc(2026, 10, 26, 12, 0, 0)
        ),
        [
            "2026-10-25T00:30:00+00:00", // 02:30 +02, the first pass
            "2026-10-26T02:30:00+00:00", // 02:30 +00, the next day
        ]
    );
    // More than an hour into the overlap (02:15 +00, the wall clock has not yet passed
    // 02:59 +02 again): 02:30 has run today, the next slot is tomorrow's.
    let inside = utc(2026, 10, 25, 2, 15, 0);
    assert_eq!(job.next_after(inside), Some(utc(2026, 10, 26, 2, 30, 0)));
    assert_eq!(job.newest_due(inside), Some(utc(2026, 10, 25, 0, 30, 0)));
    // Spring: 01:00-03:00 local does not exist; 02:30 runs once, at 03:00 +02.
    assert_eq!(
        slots(&job, utc(2026, 3, 28, 12, 0, 0), utc(2026, 3, 30, 12, 0, 0)),
        [
            "2026-03-29T01:00:00+00:00", // 03:00 +02, after the gap
            "2026-03-30T00:30:00+00:00", // 02:30 +02
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// B-07: the rule each slot was placed by, as `CronSchedule::dst_rule` reports it (the CLI's
// `next` prints it beside each instant).

fn cron_schedule(expression: &str, tz: &str) -> CronSchedule {
    match cron(expression, tz) {
        Schedule::Cron(parsed) => parsed,
        other => panic!("not a cron schedule: {other:?}"),
    }
}

/// A local time as `DstRule` reports a skipped one.
fn local(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(y, mo, d)
        .unwrap()
        .and_hms_opt(h, mi, 0)
        .unwrap()
}

#[test]
fn b07_dst_rule_names_the_rule_that_placed_each_slot() {
    let moved = |skipped| Some(DstRule::MovedForward { skipped });
    let after_gap = |skipped| Some(DstRule::AfterGap { skipped });
    // (expression, zone, slot, the rule); Berlin's gap is 02:00-03:00 CET at 01:00Z on
    // 2026-03-29, its overlap 02:00-03:00 at 00:00Z-02:00Z on 2026-10-25.
    let table: Vec<(&str, &str, i64, Option<DstRule>)> = vec![
        // Wall-clock jobs.
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            moved(local(2026, 3, 29, 2, 30)),
        ),
        (
            "0 2 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            moved(local(2026, 3, 29, 2, 0)),
        ),
        (
            "0,45 2 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            moved(local(2026, 3, 29, 2, 0)),
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 3, 28, 1, 30, 0),
            None,
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 3, 30, 0, 30, 0),
            None,
        ),
        // 03:00 exists: the first instant after the gap is its own ordinary time.
        (
            "0 3 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            None,
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 0, 30, 0),
            Some(DstRule::RepeatedOnce),
        ),
        // The second pass of a repeated wall-clock time is no slot of the job's.
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 1, 30, 0),
            None,
        ),
        (
            "30 3 * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 2, 30, 0),
            None,
        ),
        (
            "30 1 * * *",
            "Antarctica/Troll",
            utc(2026, 3, 29, 1, 0, 0),
            moved(local(2026, 3, 29, 1, 30)),
        ),
        (
            "30 1 * * *",
            "Antarctica/Troll",
            utc(2026, 10, 24, 23, 30, 0),
            Some(DstRule::RepeatedOnce),
        ),
        // Elapsed-time jobs.
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 0, 30, 0),
            Some(DstRule::FirstPass),
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 1, 30, 0),
            Some(DstRule::SecondPass),
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 10, 24, 23, 30, 0),
            None,
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 2, 30, 0),
            None,
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 0, 30, 0),
            None,
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 30, 0),
            after_gap(local(2026, 3, 29, 2, 30)),
        ),
        (
            "0 * * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            after_gap(local(2026, 3, 29, 2, 0)),
        ),
        // Three hours after the slot before it: the gap is found more than an hour back.
        (
            "0 2-23/3 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 3, 0, 0),
            after_gap(local(2026, 3, 29, 2, 0)),
        ),
        // The gap lies a day back, not between this slot and the one before it.
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 2, 30, 0),
            None,
        ),
        (
            "30 * * * *",
            "Europe/Berlin",
            utc(2026, 3, 30, 0, 30, 0),
            None,
        ),
        // Nothing of the expression falls in the gap: 03:00 is after it.
        (
            "0 */3 * * *",
            "Europe/Berlin",
            utc(2026, 3, 29, 1, 0, 0),
            None,
        ),
        (
            "30 * * * *",
            "Antarctica/Troll",
            utc(2026, 3, 29, 1, 30, 0),
            after_gap(local(2026, 3, 29, 1, 30)),
        ),
        (
            "30 * * * *",
            "Antarctica/Troll",
            utc(2026, 10, 25, 1, 30, 0),
            Some(DstRule::SecondPass),
        ),
        (
            "30 * * * *",
            "Antarctica/Troll",
            utc(2026, 10, 24, 23, 30, 0),
            Some(DstRule::FirstPass),
        ),
        // UTC has no transitions.
        ("30 * * * *", "UTC", utc(2026, 3, 29, 1, 30, 0), None),
        ("30 2 * * *", "UTC", utc(2026, 3, 29, 2, 30, 0), None),
    ];
    for (expression, zone, slot, rule) in table {
        let job = cron_schedule(expression, zone);
        // Each row's instant is a slot of the job's, unless the row says it is not one.
        let is_slot = job.next_after(slot - 1) == Some(slot);
        assert!(
            is_slot || rule.is_none(),
            "{expression} in {zone}: {} is no slot",
            show(slot)
        );
        assert_eq!(
            job.dst_rule(slot),
            rule,
            "{expression} in {zone} at {}",
            show(slot)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// B-07: the rules, checked against a brute-force model second by second around each
// transition, and the consistency of newest_due / next_after / due_between.

/// The zones and transitions the model checks, as (zone, transition instant).
fn transitions() -> Vec<(&'static str, i64)> {
    vec![
        ("Europe/Berlin", utc(2026, 3, 29, 1, 0, 0)),
        ("Europe/Berlin", utc(2026, 10, 25, 1, 0, 0)),
        ("America/New_York", utc(2026, 3, 8, 7, 0, 0)),
        ("America/New_York", utc(2026, 11, 1, 6, 0, 0)),
        ("Australia/Lord_Howe", utc(2026, 4, 4, 15, 0, 0)),
        ("Australia/Lord_Howe", utc(2026, 10, 3, 15, 30, 0)),
        // Two-hour steps (+00 <-> +02): the overlap lasts longer than one hour.
        ("Antarctica/Troll", utc(2026, 3, 29, 1, 0, 0)),
        ("Antarctica/Troll", utc(2026, 10, 25, 1, 0, 0)),
    ]
}

const PATTERNS: &[&str] = &[
    "30 2 * * *",
    "15 1 * * *",
    "0,30 1,2 * * *",
    "0 1-3 * * *",
    "45 59 1 * * *",
    "30 * * * *",
    "*/15 * * * *",
    "0 */2 * * *",
    "*/10 2 * * *",
    "@hourly",
    "@daily",
    "0 */20 * * * *",
];

/// The wall clock of an instant as a naive "UTC" time, the form croner matches.
fn wall(tz: Tz, ms: i64) -> DateTime<Utc> {
    let at = DateTime::<Utc>::from_timestamp_millis(ms).unwrap();
    let offset = tz
        .offset_from_utc_datetime(&at.naive_utc())
        .fix()
        .local_minus_utc();
    at + chrono::Duration::seconds(i64::from(offset))
}

/// The slots in `[from, to]`, straight from the definition: an elapsed-time job fires at
/// every instant whose wall clock matches; a wall-clock job fires at the first instant whose
/// wall clock reaches each matching time (so once, at the first occurrence or, for a skipped
/// time, at the first instant after the gap).
fn model(expression: &str, tz: Tz, elapsed: bool, from: i64, to: i64) -> Vec<i64> {
    let cron: croner::Cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expression)
        .unwrap();
    let mut out = Vec::new();
    let mut highest = wall(tz, from - 1_000);
    let mut at = from;
    while at <= to {
        let now = wall(tz, at);
        if elapsed {
            if cron.is_time_matching(&now).unwrap() {
                out.push(at);
            }
        } else if now > highest {
            let first_new = highest + chrono::Duration::seconds(1);
            if cron
                .find_next_occurrence(&first_new, true)
                .is_ok_and(|m| m <= now)
            {
                out.push(at);
            }
        }
        highest = highest.max(now);
        at += 1_000;
    }
    out
}

#[test]
fn b07_cron_matches_the_model_around_every_transition() {
    for (zone, change) in transitions() {
        let tz: Tz = zone.parse().unwrap();
        let (from, to) = (change - 3 * 3_600_000, change + 3 * 3_600_000);
        for expression in PATTERNS {
            let schedule = cron(expression, zone);
            let Schedule::Cron(parsed) = &schedule else {
                panic!()
            };
            let expected = model(expression, tz, parsed.follows_elapsed_time(), from, to);
            assert_eq!(
                slots(&schedule, from - 1, to),
                shown(&expected),
                "{expression} in {zone} around {}",
                show(change)
            );
            let due = schedule.due_between(from - 1, to, usize::MAX);
            assert_eq!(
                shown(&due),
                shown(&expected),
                "due_between {expression} in {zone}"
            );
        }
    }
}

#[test]
fn b07_job_kinds_follow_the_hour_minute_and_second_fields() {
    let kind = |expression: &str| {
        let Schedule::Cron(parsed) = cron(expression, "UTC") else {
            panic!()
        };
        parsed.follows_elapsed_time()
    };
    for wall_clock in [
        "30 2 * * *",
        "0,30 2 * * *",
        "0 1-3 * * *",
        "@daily",
        "5 4 3 2 1 *",
    ] {
        assert!(!kind(wall_clock), "{wall_clock}");
    }
    for elapsed in [
        "* 2 * * *",
        "*/15 2 * * *",
        "0 * * * *",
        "@hourly",
        "* 0 2 * * *",
        "0 0-23 * * *",
    ] {
        assert!(kind(elapsed), "{elapsed}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn b07_cron_slots_are_consistent_around_transitions(
        which in 0usize..6,
        pattern in 0usize..PATTERNS.len(),
        delta in -30 * 3_600_000i64..30 * 3_600_000,
        max in 1usize..6,
    ) {
        let (zone, change) = transitions()[which];
        let schedule = cron(PATTERNS[pattern], zone);
        let now = change + delta;
        let due = schedule.newest_due(now).unwrap();
        let next = schedule.next_after(now).unwrap();
        prop_assert!(due <= now && now < next);
        prop_assert_eq!(schedule.next_after(due), Some(next));
        prop_assert_eq!(schedule.newest_due(next - 1), Some(due));
        prop_assert_eq!(schedule.newest_due(due), Some(due));
        prop_assert!(schedule.newest_due(due - 1).unwrap() < due);

        let from = now - 4 * 3_600_000;
        let between = schedule.due_between(from, now, max);
        prop_assert!(between.len() <= max);
        prop_assert!(between.windows(2).all(|pair| pair[0] < pair[1]));
        prop_assert!(between.iter().all(|&slot| from < slot && slot <= now));
        if let Some(&last) = between.last() {
            prop_assert_eq!(last, due);
        }
        for pair in between.windows(2) {
            prop_assert_eq!(schedule.next_after(pair[0]), Some(pair[1]));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// B-03: at

#[test]
fn b03_at_parses_rfc3339_and_epoch_ms() {
    let table: &[(&str, i64)] = &[
        ("2026-12-01T09:00:00Z", utc(2026, 12, 1, 9, 0, 0)),
        ("2026-12-01T10:00:00+01:00", utc(2026, 12, 1, 9, 0, 0)),
        ("2026-12-01T04:00:00-05:00", utc(2026, 12, 1, 9, 0, 0)),
        ("2026-12-01t09:00:00z", utc(2026, 12, 1, 9, 0, 0)),
        ("2026-12-01 09:00:00Z", utc(2026, 12, 1, 9, 0, 0)),
        ("2026-12-01T09:00:00.250Z", utc(2026, 12, 1, 9, 0, 0) + 250),
        ("2026-12-01T10:00:00+0100", utc(2026, 12, 1, 9, 0, 0)),
        ("  2026-12-01T09:00:00Z ", utc(2026, 12, 1, 9, 0, 0)),
        ("1798189200000", 1_798_189_200_000),
        ("0", 0),
    ];
    for &(input, at) in table {
        match Schedule::at_str(input).unwrap() {
            Schedule::At { at_ms } => assert_eq!(at_ms, at, "{input:?}"),
            other => panic!("{input:?}: {other:?}"),
        }
    }
}

#[test]
fn b03_at_rejects_bad_times_naming_the_input() {
    let table: &[(&str, &str)] = &[
        ("", "empty"),
        ("tomorrow", "neither"),
        ("2026-12-01T09:00:00", "no UTC offset"),
        ("2026-12-01 09:00:00", "no UTC offset"),
        ("2026-12-01", "neither"),
        ("2026-13-01T09:00:00Z", "neither"),
        ("99999999999999999999", "i64"),
        ("-5", "neither"),
        ("12.5", "neither"),
    ];
    for &(input, reason) in table {
        let err = Schedule::at_str(input).unwrap_err();
        match &err {
            Error::InvalidAt {
                input: named,
                reason: why,
            } => {
                assert_eq!(named, input);
                assert!(why.contains(reason), "{input:?}: {why:?} lacks {reason:?}");
            }
            other => panic!("{input:?}: wrong error {other:?}"),
        }
        assert!(err.to_string().contains(&format!("{input:?}")));
    }
}

#[test]
fn b03_at_has_one_slot() {
    let at = utc(2026, 12, 1, 9, 0, 0);
    let job = Schedule::at_ms(at);
    assert_eq!(job.newest_due(at - 1), None);
    assert_eq!(job.newest_due(at), Some(at));
    assert_eq!(job.newest_due(at + 86_400_000), Some(at));
    assert_eq!(job.next_after(at - 1), Some(at));
    assert_eq!(job.next_after(at), None);
    assert_eq!(job.due_between(at - 1, at, 5), vec![at]);
    assert!(job.due_between(at, at + 10, 5).is_empty());
    assert!(job.due_between(at - 10, at, 0).is_empty());
}

#[test]
fn b03_at_from_system_time_and_datetime() {
    let at = UNIX_EPOCH + Duration::from_millis(1_798_189_200_123);
    assert!(matches!(
        Schedule::at_system_time(at).unwrap(),
        Schedule::At {
            at_ms: 1_798_189_200_123
        }
    ));
    let before = UNIX_EPOCH - Duration::from_micros(1_500);
    assert!(matches!(
        Schedule::at_system_time(before).unwrap(),
        Schedule::At { at_ms: -2 }
    ));
    let before = UNIX_EPOCH - Duration::from_millis(3);
    assert!(matches!(
        Schedule::at_system_time(before).unwrap(),
        Schedule::At { at_ms: -3 }
    ));
    if let Some(far) = UNIX_EPOCH.checked_add(Duration::from_secs(u64::MAX / 2)) {
        assert!(matches!(
            Schedule::at_system_time(far),
            Err(Error::InvalidAt { .. })
        ));
    }
    let _ = SystemTime::now();

    let berlin = chrono_tz::Europe::Berlin
        .with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .unwrap();
    assert!(matches!(
        Schedule::at_datetime(&berlin),
        Schedule::At { at_ms } if at_ms == utc(2026, 12, 1, 9, 0, 0)
    ));
}

// ---------------------------------------------------------------------------------------------
// B-09, B-10: jitter and the late rule

#[test]
fn b09_jitter_stays_within_zero_and_max() {
    let mut state = 7;
    assert_eq!(jitter(&mut state, 0), 0);
    let draws: Vec<u64> = (0..2_000).map(|_| jitter(&mut state, 3)).collect();
    assert!(draws.iter().all(|&d| d <= 3));
    for value in 0..=3 {
        assert!(draws.contains(&value), "{value} never drawn");
    }
    let _ = jitter(&mut state, u64::MAX);
    assert!(
        (0..100)
            .map(|_| jitter(&mut state, 2_000))
            .all(|d| d <= 2_000)
    );
    // Seeded: the same seed draws the same delays, another seed others.
    let run = |seed: u64| {
        let mut s = seed;
        (0..20).map(|_| jitter(&mut s, 2_000)).collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn b09_jitter_is_xorshift64_star() {
    // Worked out apart from this code: xorshift64* (12, 25, 27; the multiplier
    // 0x2545F4914F6CDD1D) from 42, each draw reduced modulo max + 1.
    let mut state = 42;
    let draws: Vec<u64> = (0..4).map(|_| jitter(&mut state, 1_000_000)).collect();
    assert_eq!(draws, vec![144_849, 371_070, 724_958, 611_056]);
    assert_eq!(state, 0x6059_D700_A25A_FFAA);
}

#[test]
fn b01_the_longest_interval_itself_is_accepted() {
    use anarchon_core::slot::MAX_INTERVAL;
    assert!(Schedule::every(MAX_INTERVAL, 0).is_ok());
    assert!(Schedule::every(MAX_INTERVAL + Duration::from_millis(1), 0).is_err());
    let ms = MAX_INTERVAL.as_millis() as i64;
    assert_eq!(interval_from_ms(ms).unwrap(), MAX_INTERVAL);
    assert!(interval_from_ms(ms + 1).is_err());
}

#[test]
fn b01_a_schedule_shows_its_interval_in_the_largest_whole_unit() {
    let every = |ms: u64| {
        Schedule::every(Duration::from_millis(ms), 0)
            .unwrap()
            .to_string()
    };
    assert_eq!(every(90_000), "every 90s");
    assert_eq!(every(3_600_000), "every 1h");
    assert_eq!(every(2 * 86_400_000), "every 2d");
    assert_eq!(every(1_500), "every 1500ms");
}

#[test]
fn b02_month_names_count_from_one_like_month_numbers() {
    // FEB is month 2: the range 2-FEB is one month, not a range that runs backwards.
    let s = Schedule::cron("0 0 1 2-FEB *", None).unwrap();
    assert_eq!(
        s.next_after(utc(2026, 1, 5, 0, 0, 0)),
        Some(utc(2026, 2, 1, 0, 0, 0))
    );
    let err = Schedule::cron("0 0 1 3-FEB *", None).unwrap_err();
    assert!(err.to_string().contains("runs backwards"), "{err}");
}

#[test]
fn b10_a_claim_more_than_max_late_after_its_slot_is_late() {
    let slot = utc(2026, 5, 1, 12, 0, 0);
    assert!(!is_late(slot, slot, 60_000));
    assert!(!is_late(slot, slot + 60_000, 60_000));
    assert!(is_late(slot, slot + 60_001, 60_000));
    assert!(!is_late(slot, slot - 5_000, 60_000));
    assert!(is_late(slot, slot + 1, 0));
    assert!(!is_late(slot, slot, 0));
    assert!(is_late(i64::MIN, i64::MAX, u64::MAX / 2));
    assert!(!is_late(i64::MAX, i64::MIN, 0));
    assert!(!is_late(i64::MIN, i64::MAX, u64::MAX));
}

// ---------------------------------------------------------------------------------------------
// Lengths, timezones and the end of cron: one reading of each text everywhere

#[test]
fn lengths_allow_zero_but_refuse_unit_soup() {
    use anarchon_core::slot::parse_length;
    for zero in ["0", "000", "0s", "0ms", " 0m ", "0h0m", "0d"] {
        assert_eq!(parse_length(zero).unwrap(), Duration::ZERO, "{zero:?}");
    }
    assert_eq!(parse_length("1m30s").unwrap(), Duration::from_secs(90));
    for bad in [
        "0smhd", "0sm", "0hm", "0mh", "0dd", "0x", "ms", "s", "", "-0s", "0.5s",
    ] {
        let err = parse_length(bad).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInterval { input, .. } if input == bad),
            "{bad:?}: {err}"
        );
    }
    let err = parse_length("0smhd").unwrap_err().to_string();
    assert!(err.contains("unknown unit \"smhd\""), "{err}");
    // A negative offset, as the docs once wrote it, says what to write instead.
    let err = parse_length("-1s").unwrap_err().to_string();
    assert!(
        err.contains("negative") && err.contains("\"9s\" on a 10s grid"),
        "{err}"
    );
    // The interval parser keeps refusing zero.
    assert!(parse_interval("0s").is_err());
}

#[test]
fn timezones_are_read_the_same_with_whitespace_around() {
    use anarchon_core::slot::parse_timezone;
    assert_eq!(
        parse_timezone("\tEurope/Berlin ").unwrap(),
        chrono_tz::Europe::Berlin
    );
    let err = parse_timezone("America/New York").unwrap_err();
    assert!(
        matches!(&err, Error::UnknownTimezone { name } if name == "America/New York"),
        "{err}"
    );
    // A cron schedule reads its timezone the same way.
    assert!(Schedule::cron("0 9 * * *", Some(" Europe/Berlin ")).is_ok());
}

#[test]
fn cron_stops_at_year_5000_as_documented() {
    use anarchon_core::slot::CRON_LAST_MS;
    assert_eq!(show(CRON_LAST_MS), show(utc(5000, 1, 1, 0, 0, 0)));
    let every_minute = cron("* * * * *", "UTC");
    assert_eq!(
        every_minute.next_after(CRON_LAST_MS - 60_000),
        Some(CRON_LAST_MS)
    );
    assert_eq!(every_minute.next_after(CRON_LAST_MS), None);
}

/// `at` and cron end at one instant: an `at` job may name the last instant a cron schedule
/// yields and no later one (the bound was the year 9999, where cron had stopped long
/// before), and the refusal names the bound.
#[test]
fn at_and_cron_end_at_the_same_instant() {
    use anarchon_core::options::{JobOptions, MAX_AT_MS};
    use anarchon_core::slot::CRON_LAST_MS;
    assert_eq!(MAX_AT_MS, CRON_LAST_MS);
    let now = utc(2026, 1, 1, 0, 0, 0);
    let opts = JobOptions::default();
    let last = Schedule::at_str("5000-01-01T00:00:00Z").unwrap();
    assert!(opts.check_schedule(&last, now, true).is_ok());
    assert_eq!(last.next_after(now), Some(CRON_LAST_MS));
    for beyond in [
        "5000-01-01T00:00:00.001Z",
        "5000-06-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z",
    ] {
        let at = Schedule::at_str(beyond).unwrap();
        let err = opts.check_schedule(&at, now, true).unwrap_err();
        assert!(
            matches!(&err, Error::OutOfRange { option: "at", .. }),
            "{beyond}: {err}"
        );
        assert!(err.to_string().contains("5000-01-01T00:00:00"), "{err}");
    }
    // The yearly cron job fires at that same instant and never after.
    let yearly = cron("0 0 1 1 *", "UTC");
    assert_eq!(yearly.next_after(CRON_LAST_MS - 1), Some(CRON_LAST_MS));
    assert_eq!(yearly.next_after(CRON_LAST_MS), None);
}

/// The reason of a refused cron expression.
fn cron_refusal(expression: &str) -> String {
    match Schedule::cron(expression, None) {
        Err(Error::InvalidCron { reason, .. }) => reason,
        other => panic!("{expression:?} was not refused as invalid cron: {other:?}"),
    }
}

#[test]
fn confusing_cron_fields_are_refused_in_plain_words() {
    let r = cron_refusal("0 9 * * FUNDAY");
    assert!(
        r.contains("day-of-week field \"FUNDAY\"")
            && r.contains("unknown name")
            && r.contains("MON"),
        "{r}"
    );
    assert!(!r.contains("cronPattern"), "no internal names: {r}");
    let r = cron_refusal("0 9 * JANUARY *");
    assert!(
        r.contains("unknown name \"JANUARY\"") && r.contains("JAN"),
        "{r}"
    );
    let r = cron_refusal("0,,0 * * * *");
    assert!(r.contains("empty list item"), "{r}");
    let r = cron_refusal("5-1 * * * *");
    assert!(r.contains("runs backwards") && r.contains("1-5"), "{r}");
    let r = cron_refusal("0 0 * * FRI-MON");
    assert!(r.contains("runs backwards"), "{r}");
    let r = cron_refusal("0 0 * * +MON");
    assert!(r.contains("`+` modifier"), "{r}");
    let r = cron_refusal("0 0 1 * +5");
    assert!(r.contains("`+` modifier"), "{r}");
    let r = cron_refusal("0 0 * * 1h");
    assert!(r.contains("\"1h\"") && !r.contains("cronPattern"), "{r}");
    let r = cron_refusal("0 9 * MON");
    assert!(r.contains("4 fields"), "{r}");
    // What crontab accepts stays accepted.
    for ok in [
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 0 * * 5#2",
        "0 0 ? * *",
        "0 0 * * MON-FRI",
        "0 0 * jan-mar mon",
        "*/15 * * * *",
        "0/15 * * * *",
        "0 0 * * 0-7",
        "@daily",
        "15 30 2 * * *",
    ] {
        assert!(Schedule::cron(ok, None).is_ok(), "{ok:?} is refused");
    }
}
