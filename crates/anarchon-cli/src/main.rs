//! `anarchon`: see what an anarchon store holds — the known jobs, a job's history, the runs
//! unfinished now, every attempt of one slot — and the next instants of a schedule.
//!
//! ```text
//! anarchon --store jobs.db jobs
//! anarchon --store postgres://app@db/app history sync -n 20
//! anarchon --store redis://cache:6379 runs --json
//! anarchon --store jobs.db inspect sync 2026-11-30T18:00:00Z
//! anarchon next "30 2 * * *" --tz Europe/Berlin --count 5
//! ```
//!
//! The store comes from `--store` or `ANARCHON_STORE`: a SQLite file path or
//! `sqlite://PATH`, `postgres://`, `postgresql://`, `redis://`, `rediss://`, `libsql://`,
//! `http(s)://` (libSQL), `amqp(s)://` (RabbitMQ) or `nats://`; each store is a cargo feature,
//! all on by default. Output is a table, or one JSON document with `--json`. The URL is only
//! ever shown redacted. Exit codes: 0 done, 1 the store failed, 2 bad input.

// A build with some stores left out leaves their variants, options and helpers unused.
#![cfg_attr(
    not(all(
        feature = "sqlite",
        feature = "libsql",
        feature = "postgres",
        feature = "redis",
        feature = "amqp",
        feature = "nats"
    )),
    allow(
        dead_code,
        unused_variables,
        reason = "a store left out of the build uses none of them"
    )
)]

mod commands;
mod error;
mod next;
mod output;
#[cfg(any(feature = "sqlite", feature = "libsql"))]
mod readonly;
mod store;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::error::CliError;
use crate::store::StoreArgs;

/// See what an anarchon store holds, and when a schedule fires.
#[derive(Debug, Parser)]
#[command(name = "anarchon", version, about, long_about = None)]
struct Cli {
    /// The store: a SQLite file path or sqlite://PATH, postgres://, redis://, rediss://,
    /// libsql://, http(s)://, amqp://, nats://.
    #[arg(long, global = true, env = "ANARCHON_STORE", hide_env_values = true)]
    store: Option<String>,
    /// Print one JSON document on stdout instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Bound on connecting and on each store call ("500ms", "10s", "1m"; 1ms to 1h).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_timeout)]
    timeout: Duration,
    /// The store's prefix: Redis keys (default "anarchon:"), RabbitMQ queues or the NATS
    /// stream (default "anarchon").
    #[arg(long, global = true)]
    prefix: Option<String>,
    /// Table prefix of a SQLite, libSQL or PostgreSQL store (the store's default).
    #[arg(long, global = true)]
    table: Option<String>,
    /// Schema of a PostgreSQL store (the store's default).
    #[arg(long, global = true)]
    schema: Option<String>,
    /// Auth token of a libSQL server.
    #[arg(long, global = true, env = "LIBSQL_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The jobs the store knows, with their last run.
    Jobs,
    /// A job's latest attempts, newest first.
    History {
        /// The job's name.
        job: String,
        /// How many attempts to show.
        #[arg(short = 'n', long = "count", default_value_t = 20,
              value_parser = clap::value_parser!(u32).range(1..=100_000))]
        count: u32,
    },
    /// The runs unfinished now: job, slot, owner instance, attempt, lease left.
    Runs,
    /// The next instants of a cron expression or an interval, with the DST rule applied
    /// to each (no store needed).
    Next {
        /// A cron expression ("30 2 * * *", "*/15 * * * *", "@daily") or an interval
        /// ("10s", "5m", "1h30m").
        schedule: String,
        /// The IANA timezone the cron expression is read in and the instants are shown in
        /// (default UTC).
        #[arg(long)]
        tz: Option<String>,
        /// How many instants.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        count: u32,
        /// Start after this instant (RFC 3339 or epoch ms) instead of now.
        #[arg(long)]
        from: Option<String>,
    },
    /// Every attempt of one slot of a job: instance, attempt, status, reason, times, error.
    Inspect {
        /// The job's name.
        job: String,
        /// The slot: an RFC 3339 time ("2026-11-30T18:00:00Z") or epoch milliseconds.
        slot: String,
        /// How many of the job's newest history records to search.
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        depth: u32,
    },
}

/// The longest `--timeout`: a read that takes longer is not coming back, and the drivers'
/// own limits (SQLite's busy timeout is an `i32` of ms, PostgreSQL's `statement_timeout` an
/// `i32` too) lie not far above.
const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

fn parse_timeout(input: &str) -> Result<Duration, String> {
    let timeout = anarchon_core::slot::parse_interval(input).map_err(|e| e.to_string())?;
    if timeout > MAX_TIMEOUT {
        return Err(format!(
            "{input:?} is longer than the longest timeout, 1h; give 1ms to 1h"
        ));
    }
    Ok(timeout)
}

/// Writes `report` as JSON or as a table.
fn emit<T: serde::Serialize>(
    json: bool,
    report: &T,
    table: impl FnOnce(&T, &mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        table(report, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let json = cli.json;
    if let Command::Next {
        schedule,
        tz,
        count,
        from,
    } = &cli.command
    {
        let after = match from {
            Some(from) => commands::instant("--from", from)?,
            None => chrono::Utc::now(),
        };
        let report = next::next(schedule, tz.as_deref(), *count as usize, after)?;
        return emit(json, &report, |r, out| r.write_table(out));
    }

    // The arguments are checked before the store is opened: bad input costs no connection.
    let (job, slot) = match &cli.command {
        Command::History { job, .. } => (Some(commands::job_name(job)?), None),
        Command::Inspect { job, slot, .. } => (
            Some(commands::job_name(job)?),
            Some(commands::instant("slot", slot)?),
        ),
        _ => (None, None),
    };
    let url = cli.store.clone().ok_or(CliError::MissingStore)?;
    let store = store::open(&StoreArgs {
        url,
        timeout: cli.timeout,
        prefix: cli.prefix.clone(),
        table: cli.table.clone(),
        schema: cli.schema.clone(),
        auth_token: cli.auth_token.clone(),
    })
    .await?;
    let result = async {
        match (&cli.command, job, slot) {
            (Command::Jobs, _, _) => {
                let report = commands::jobs(&store).await?;
                emit(json, &report, |r, out| r.write_table(out))
            }
            (Command::History { count, .. }, Some(job), _) => {
                let report = commands::history(&store, job, *count as usize).await?;
                emit(json, &report, |r, out| r.write_table(out))
            }
            (Command::Runs, _, _) => {
                let report = commands::runs(&store).await?;
                emit(json, &report, |r, out| r.write_table(out))
            }
            (Command::Inspect { depth, .. }, Some(job), Some(slot)) => {
                let report = commands::inspect(&store, job, slot, *depth as usize).await?;
                emit(json, &report, |r, out| r.write_table(out))
            }
            _ => unreachable!("the job and slot were read above for the commands that take them"),
        }
    }
    .await;
    store.close().await;
    result
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ANARCHON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .init();
    let store_url = cli.store.clone();
    let auth_token = cli.auth_token.clone();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            // The sources' text is in the message already for store errors; show only what
            // it does not contain.
            while let Some(s) = source {
                let part = s.to_string();
                if !text.contains(&part) {
                    text.push_str(": ");
                    text.push_str(&part);
                }
                source = s.source();
            }
            // Errors quote store text and input: escape it as the tables do.
            let mut text = error::scrub(&text, store_url.as_deref());
            if let Some(token) = auth_token.as_deref().filter(|t| t.len() >= 2) {
                text = text.replace(token, "***");
            }
            eprintln!("error: {}", output::escape(&text));
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Text at the extremes for any argument: empty, zero, huge, negative, controls, URLs.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("0".to_owned()),
            Just("0smhd".to_owned()),
            Just("1ms".to_owned()),
            Just(u64::MAX.to_string()),
            Just(format!("{}ms", u64::MAX)),
            Just(i64::MIN.to_string()),
            Just("-1".to_owned()),
            Just("9999-12-31T23:59:59Z".to_owned()),
            Just("host=x password=y".to_owned()),
            Just("postgres:u:p@h".to_owned()),
            "[0-9]{1,30}(ms|s|m|h|d)?",
            "[0-9*/,\\- ]{0,20}",
            "\\PC{0,30}",
            "[\\x00-\\x1f\\x7f\u{202e}]{0,8}",
        ]
    }

    fn flag() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "--timeout",
            "--store",
            "--table",
            "--schema",
            "--prefix",
            "--tz",
            "--count",
            "--from",
            "-n",
            "--depth",
        ])
    }

    fn command() -> impl Strategy<Value = Vec<&'static str>> {
        prop::sample::select(vec![
            vec!["jobs"],
            vec!["runs"],
            vec!["history"],
            vec!["next"],
            vec!["inspect", "sync"],
        ])
    }

    #[test]
    fn timeout_is_bounded_to_an_hour() {
        assert_eq!(parse_timeout("1h").unwrap(), MAX_TIMEOUT);
        assert_eq!(parse_timeout("1ms").unwrap(), Duration::from_millis(1));
        for bad in ["1h1ms", "100d", "0s", "-1s", "0smhd"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any argument list parses or is refused by clap; whatever parses is then read by
        /// the command's own parsers (time, job, store URL, schedule) to Ok or a typed error
        /// with the right exit code, never a panic. No store is opened.
        #[test]
        fn options_at_extremes_parse_or_are_refused_never_panic(
            cmd in command(),
            positional in text(),
            pairs in prop::collection::vec((flag(), text()), 0..4),
        ) {
            let mut args = vec!["anarchon".to_owned()];
            for (f, v) in &pairs {
                args.push((*f).to_owned());
                args.push(v.clone());
            }
            args.extend(cmd.iter().map(|s| (*s).to_owned()));
            args.push(positional.clone());
            let Ok(cli) = Cli::try_parse_from(&args) else {
                return Ok(());
            };
            if let Some(url) = &cli.store
                && let Err(e) = store::kind_of(url)
            {
                prop_assert_eq!(e.exit_code(), 2);
            }
            match &cli.command {
                Command::Next { schedule, tz, count, from } => {
                    let after = from
                        .as_deref()
                        .map(|f| commands::instant("--from", f))
                        .transpose();
                    match after {
                        Ok(after) => {
                            let after = after.unwrap_or_else(chrono::Utc::now);
                            // Few instants: the property is about input, not volume.
                            let count = (*count as usize).min(3);
                            match next::next(schedule, tz.as_deref(), count, after) {
                                Ok(report) => {
                                    let mut out = Vec::new();
                                    report.write_table(&mut out).unwrap();
                                    let text = String::from_utf8(out).unwrap();
                                    prop_assert!(
                                        !text.chars().any(|c| output::is_unsafe(c) && c != '\n'),
                                        "{:?}", text
                                    );
                                }
                                Err(e) => prop_assert_eq!(e.exit_code(), 2),
                            }
                        }
                        Err(e) => prop_assert_eq!(e.exit_code(), 2),
                    }
                }
                Command::History { job, .. } => {
                    if let Err(e) = commands::job_name(job) {
                        prop_assert_eq!(e.exit_code(), 2);
                    }
                }
                Command::Inspect { job, slot, .. } => {
                    if let Err(e) = commands::job_name(job) {
                        prop_assert_eq!(e.exit_code(), 2);
                    }
                    if let Err(e) = commands::instant("slot", slot) {
                        prop_assert_eq!(e.exit_code(), 2);
                    }
                }
                Command::Jobs | Command::Runs => {}
            }
            // An error message never carries a control character to the terminal.
            let scrubbed = output::escape(&error::scrub(&positional, cli.store.as_deref()));
            prop_assert!(!scrubbed.chars().any(output::is_unsafe));
        }
    }
}
