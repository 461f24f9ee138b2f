//! `anarchon-sim`: the deterministic simulator of an anarchon cluster (dev-only).
//!
//! ```text
//! anarchon-sim [--seed S | --seeds N [--first F]] [--hours H] [--nodes N] [--no-faults]
//!              [--verbose] [--full-timeline]
//! ```
//!
//! `--seed S` replays one seed exactly (a violation prints the seed, the invariant and the
//! slot's timeline); `--seeds N` runs seeds F..F+N (F = 1) and prints the figures summed.
//! Exits 1 on any violation, 2 on a bad argument.

use std::process::ExitCode;

use anarchon_sim::{Faults, SimConfig, run_many};

const USAGE: &str = "usage: anarchon-sim [--seed S | --seeds N [--first F]] [--hours H] \
                     [--nodes N] [--no-faults] [--verbose] [--full-timeline]";

struct Args {
    first: u64,
    count: u64,
    hours: f64,
    nodes: usize,
    faults: bool,
    verbose: bool,
    full_timeline: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        first: 1,
        count: 1,
        hours: 1.0,
        nodes: 5,
        faults: true,
        verbose: false,
        full_timeline: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let number = |name: &str, v: String| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{name} {v}: expected a whole number >= 0"))
        };
        match arg.as_str() {
            "--seed" => {
                a.first = number("--seed", value("--seed")?)?;
                a.count = 1;
            }
            "--seeds" => a.count = number("--seeds", value("--seeds")?)?,
            "--first" => a.first = number("--first", value("--first")?)?,
            "--hours" => {
                let v = value("--hours")?;
                a.hours = v
                    .parse::<f64>()
                    .ok()
                    .filter(|h| h.is_finite() && *h > 0.0 && *h <= 10_000.0)
                    .ok_or_else(|| format!("--hours {v}: expected a number in (0, 10000]"))?;
            }
            "--nodes" => {
                let v = value("--nodes")?;
                a.nodes = number("--nodes", v.clone())?
                    .try_into()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| format!("--nodes {v}: expected 1 to 64"))?;
            }
            "--no-faults" => a.faults = false,
            "--verbose" => a.verbose = true,
            "--full-timeline" => a.full_timeline = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("anarchon-sim: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut template = SimConfig::new(a.first, a.nodes, a.hours);
    template.full_timeline = a.full_timeline;
    if !a.faults {
        template.faults = Faults::none();
    }
    // A violation is a panic whose message (seed, invariant, timeline) is printed below.
    std::panic::set_hook(Box::new(|_| {}));
    let verbose = a.verbose || a.count == 1;
    let summary = run_many(&template, a.first, a.count, |seed, outcome| match outcome {
        Ok(r) if verbose => println!(
            "seed {seed}: {} jobs, {} runs, {} takeovers, {} handovers, hash {:016x}",
            r.jobs, r.runs, r.takeovers, r.handovers, r.hash
        ),
        Ok(_) => {}
        Err(message) => println!("seed {seed}: {message}"),
    });
    print!("{}", summary.render());
    if summary.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        let seeds: Vec<String> = summary
            .violations
            .iter()
            .map(|(s, _)| s.to_string())
            .collect();
        println!(
            "replay with: cargo xtask simulate --seed S --hours {} --nodes {} (S in {})",
            a.hours,
            a.nodes,
            seeds.join(", ")
        );
        ExitCode::FAILURE
    }
}
