//! Fuzzing of every parser a user can feed (proptest, a fixed number of cases so CI stays
//! quick): intervals, cron expressions with timezones, `at` strings, job names and
//! `JobConfig` from JSON. Each must return, never panic, and refuse with its typed error.
//! The crate reads no TOML, so there is no TOML parser to fuzz.
//!
//! Inputs come from three kinds of strategies: any printable text, text over the parser's own
//! alphabet (digits, units, cron symbols ...), and near-valid inputs built from its grammar
//! with one part bent, which is where parsers break.

use std::time::Duration;

use anarchon_core::slot::{CronSchedule, Schedule, parse_interval};
use anarchon_core::{Error, JobConfig, JobKind, JobName, JobOptions, StoreShape};
use proptest::prelude::*;

/// Cases per property: enough to reach the odd corners, few enough for CI (the whole file
/// runs in about a second). `ANARCHON_FUZZ_CASES=<n>` runs more, for a deeper local run.
const CASES: u32 = 512;

fn config() -> ProptestConfig {
    let cases = std::env::var("ANARCHON_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        // Shrinking a failure is what makes it readable; keep it bounded.
        max_shrink_iters: 2_048,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Intervals

/// One `<digits><unit>` part, sometimes bent: huge numbers, fractions, signs, unknown units.
fn interval_part() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            "[0-9]{1,3}",
            "[0-9]{15,25}",
            Just("0".to_owned()),
            Just("-1".to_owned()),
            "[0-9]{1,2}[.,][0-9]{1,2}",
        ],
        prop_oneof![
            Just("ms"),
            Just("s"),
            Just("m"),
            Just("h"),
            Just("d"),
            Just(""),
            Just("M"),
            Just("us"),
            Just("w"),
            Just("µs"),
        ],
        prop_oneof![Just(""), Just(" "), Just("\t")],
    )
        .prop_map(|(n, unit, space)| format!("{n}{unit}{space}"))
}

fn interval_input() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        "[0-9dhms .,\\-+]{0,24}",
        prop::collection::vec(interval_part(), 0..5).prop_map(|parts| parts.concat()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn intervals_parse_or_refuse_with_invalid_interval(input in interval_input()) {
        match parse_interval(&input) {
            Ok(interval) => {
                prop_assert!(interval > Duration::ZERO);
                prop_assert!(i64::try_from(interval.as_millis()).is_ok());
                // What parses also builds a schedule, or is refused as out of range.
                match Schedule::every(interval, 0) {
                    Ok(_) | Err(Error::OutOfRange { .. } | Error::InvalidInterval { .. }) => {}
                    Err(other) => prop_assert!(false, "{input:?}: every: {other:?}"),
                }
            }
            Err(Error::InvalidInterval { input: named, .. }) => prop_assert_eq!(&named, &input),
            Err(other) => prop_assert!(false, "{input:?}: not InvalidInterval: {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Lengths are intervals plus zero: the same text means the same length in both, and
    /// zero is only what is written as zero (`"0smhd"` is refused).
    #[test]
    fn lengths_agree_with_intervals_and_read_zero_only_as_zero(input in interval_input()) {
        use anarchon_core::slot::parse_length;
        match (parse_length(&input), parse_interval(&input)) {
            (Ok(length), Ok(interval)) => prop_assert_eq!(length, interval),
            (Ok(length), Err(_)) => {
                prop_assert_eq!(length, Duration::ZERO, "{:?}", input);
                let digits: String = input.chars().filter(char::is_ascii_digit).collect();
                prop_assert!(digits.bytes().all(|b| b == b'0'), "{:?}", input);
            }
            (Err(Error::InvalidInterval { input: named, .. }), Err(_)) => {
                prop_assert_eq!(&named, &input);
            }
            (Err(e), Ok(_)) => prop_assert!(false, "{input:?}: an interval but no length: {e}"),
            (Err(other), _) => prop_assert!(false, "{input:?}: not InvalidInterval: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cron expressions and timezones

/// One cron field, from the forms croner knows, with bent values among them.
fn cron_field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        Just("?".to_owned()),
        "[0-9]{1,2}",
        "[0-9]{3,12}",
        "\\*/[0-9]{1,3}",
        "[0-9]{1,2}-[0-9]{1,2}",
        "[0-9]{1,2}-[0-9]{1,2}/[0-9]{1,2}",
        "[0-9]{1,2},[0-9]{1,2},[0-9]{1,2}",
        "(MON|TUE|FRI|SUN|JAN|DEC|mon|Foo)",
        "(MON|SUN)-(FRI|SAT)",
        "[0-9]L",
        "L",
        "LW",
        "[0-9]{1,2}W",
        "[0-7]#[0-9]",
        "-[0-9]",
        "[0-9]{1,2}/0",
        "\\PC{1,3}",
    ]
}

fn cron_expression() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        "[0-9*/,\\-LW#?@ a-zA-Z]{0,40}",
        prop::collection::vec(cron_field(), 4..8).prop_map(|fields| fields.join(" ")),
        prop::collection::vec(cron_field(), 5..=5).prop_map(|fields| fields.join(" ")),
        prop::collection::vec(cron_field(), 6..=6).prop_map(|fields| fields.join("  ")),
        "@(yearly|annually|monthly|weekly|daily|midnight|hourly|reboot|every|)",
        "@\\PC{0,10}",
    ]
}

fn timezone() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("UTC".to_owned())),
        Just(Some("Europe/Berlin".to_owned())),
        Just(Some("America/St_Johns".to_owned())),
        Just(Some("Australia/Lord_Howe".to_owned())),
        Just(Some("Asia/Kathmandu".to_owned())),
        Just(Some(String::new())),
        Just(Some("Europe/Nowhere".to_owned())),
        Just(Some("utc".to_owned())),
        Just(Some("+01:00".to_owned())),
        "\\PC{0,20}".prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn cron_parses_or_refuses_with_a_typed_error(
        expression in cron_expression(),
        zone in timezone(),
        now in 0i64..4_102_444_800_000,
    ) {
        match CronSchedule::parse(&expression, zone.as_deref()) {
            Ok(cron) => {
                // A schedule that parses can be asked for its slots.
                let schedule = Schedule::Cron(cron);
                if let Some(next) = schedule.next_after(now) {
                    prop_assert!(next > now);
                }
                if let Some(due) = schedule.newest_due(now) {
                    prop_assert!(due <= now);
                }
            }
            Err(Error::InvalidCron { expression: named, .. }) => prop_assert_eq!(&named, &expression),
            Err(Error::UnknownTimezone { .. }) => prop_assert!(zone.is_some()),
            Err(other) => prop_assert!(false, "{expression:?} in {zone:?}: {other:?}"),
        }
        // `Schedule::cron` is the same parser.
        let typed = matches!(
            Schedule::cron(&expression, zone.as_deref()),
            Ok(_) | Err(Error::InvalidCron { .. } | Error::UnknownTimezone { .. })
        );
        prop_assert!(typed, "{:?} in {:?}", expression, zone);
    }
}

// ---------------------------------------------------------------------------------------------
// `at` strings

fn at_input() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        "[0-9]{0,25}",
        "-[0-9]{1,20}",
        "[0-9T:.\\-+Z ]{0,32}",
        // RFC 3339 with every part varied (months 13, hour 24, leap seconds, long fractions).
        (
            "[0-9]{4,6}",
            "[0-9]{1,2}",
            "[0-9]{1,2}",
            "[Tt ]",
            "[0-9]{2}",
            "[0-9]{2}",
            "(:[0-9]{2})?",
            "(\\.[0-9]{1,12})?",
            "(Z|z|[+-][0-9]{2}:[0-9]{2}|[+-][0-9]{4}|)",
        )
            .prop_map(|(y, mo, d, t, h, mi, s, f, z)| format!("{y}-{mo}-{d}{t}{h}:{mi}{s}{f}{z}")),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn at_strings_parse_or_refuse_with_invalid_at(input in at_input()) {
        match Schedule::at_str(&input) {
            Ok(schedule) => {
                let _ = schedule.next_after(0);
            }
            Err(Error::InvalidAt { input: named, .. }) => prop_assert_eq!(&named, &input),
            Err(other) => prop_assert!(false, "{input:?}: not InvalidAt: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Job names

proptest! {
    #![proptest_config(config())]

    #[test]
    fn job_names_are_accepted_or_refused_with_invalid_job_name(
        name in prop_oneof!["\\PC{0,80}", "[a-zA-Z0-9_\\-.:{} ]{0,70}", "[a-z]{100,300}"],
    ) {
        match JobName::new(&name) {
            Ok(job) => prop_assert_eq!(job.as_str(), name.as_str()),
            Err(Error::InvalidJobName { .. }) => {}
            Err(other) => prop_assert!(false, "{name:?}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `JobConfig` from JSON

/// A JSON value of any shape a hand-written config may hold by mistake.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("1e300".to_owned()),
        Just("1.5".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        "\"(skip|allow|queue|latest|all|none|Europe/Berlin|UTC|\\PC{0,8})\"",
        (
            "\"(latest|all|none|every|\\PC{0,4})\"",
            prop_oneof![Just(None), any::<i64>().prop_map(Some)],
        )
            .prop_map(|(policy, max)| match max {
                Some(max) => format!("{{\"policy\":{policy},\"max\":{max}}}"),
                None => format!("{{\"policy\":{policy}}}"),
            }),
    ]
}

fn json_key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("jitter"),
        Just("maxLate"),
        Just("historySize"),
        Just("historyTtl"),
        Just("timeout"),
        Just("overlap"),
        Just("maxAttempts"),
        Just("catchUpWindow"),
        Just("catchUp"),
        Just("offset"),
        Just("timezone"),
        Just("allowPast"),
        Just("lease"),
        Just("heartbeat"),
        Just("jitterMs"),
        Just("jitter_ms"),
        Just("unknown"),
    ]
}

fn job_config_json() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        prop::collection::vec((json_key(), json_value()), 0..6).prop_map(|pairs| {
            let body: Vec<String> = pairs
                .into_iter()
                .map(|(key, value)| format!("\"{key}\":{value}"))
                .collect();
            format!("{{{}}}", body.join(","))
        }),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn job_config_from_json_is_refused_with_typed_errors(
        json in job_config_json(),
        lease in any::<bool>(),
        kind in prop_oneof![Just(JobKind::Every), Just(JobKind::Cron), Just(JobKind::At)],
    ) {
        // serde_json refuses malformed or mistyped input with its own typed error.
        let Ok(config) = serde_json::from_str::<JobConfig>(&json) else {
            return Ok(());
        };
        let shape = if lease { StoreShape::Leased } else { StoreShape::ClaimOnly };
        match config.validate(shape, "memory", kind) {
            Ok(()) => {}
            Err(
                Error::InvalidOption { .. }
                | Error::UnknownTimezone { .. }
                | Error::OutOfRange { .. },
            ) => {}
            Err(other) => prop_assert!(false, "{json}: validate: {other:?}"),
        }
        let mut options = JobOptions::default();
        config.apply(&mut options);
        match options.validate() {
            Ok(()) => {}
            Err(
                Error::InvalidOption { .. }
                | Error::UnknownTimezone { .. }
                | Error::OutOfRange { .. },
            ) => {}
            Err(other) => prop_assert!(false, "{json}: options: {other:?}"),
        }
    }
}
