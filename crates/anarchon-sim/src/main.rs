//! `anarchon-sim`: the deterministic simulator of an anarchon cluster (dev-only).
//!
//! ```text
//! anarchon-sim [--seed S | --seeds N [--first F]] [--hours H] [--nodes N] [--no-faults]
//!              [--faults LIST] [--jobs LIST] [--shrink] [--plant-bug no-self-fencing]
//!              [--verbose] [--full-timeline]
//! ```
//!
//! `--seed S` replays one seed exactly (a violation prints the seed, the invariant and the
//! slot's timeline); `--seeds N` runs seeds F..F+N (F = 1) and prints the figures summed.
//! `--faults a,b` turns on only those faults (`none`: none), `--jobs 0,2` runs only those of
//! the seed's jobs; `--shrink` shrinks each failing seed to a smallest configuration that
//! still fails the same way and prints the command line that replays it, and a test.
//! `--plant-bug no-self-fencing` plants a bug in the harness (to watch the checks and the
//! shrinker catch it). Exits 1 on any violation, 2 on a bad argument.

use std::process::ExitCode;

use anarchon_sim::{Faults, Planted, SimConfig, command_of, run_many, shrink};

const USAGE: &str = "usage: anarchon-sim [--seed S | --seeds N [--first F]] [--hours H] \
                     [--nodes N] [--no-faults] [--faults LIST] [--jobs LIST] [--shrink] \
                     [--plant-bug no-self-fencing] [--verbose] [--full-timeline]";

struct Args {
    first: u64,
    count: u64,
    hours: f64,
    nodes: usize,
    faults: Faults,
    jobs: Option<Vec<usize>>,
    shrink: bool,
    planted: Option<Planted>,
    verbose: bool,
    full_timeline: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        first: 1,
        count: 1,
        hours: 1.0,
        nodes: 5,
        faults: Faults::default(),
        jobs: None,
        shrink: false,
        planted: None,
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
            "--no-faults" => a.faults = Faults::none(),
            "--faults" => {
                let v = value("--faults")?;
                a.faults = Faults::only(list(&v))?;
            }
            "--jobs" => {
                let v = value("--jobs")?;
                a.jobs = Some(
                    list(&v)
                        .map(|j| {
                            j.parse::<usize>().map_err(|_| {
                                format!("--jobs {v}: expected job indexes like 0,2 (or none)")
                            })
                        })
                        .collect::<Result<_, _>>()?,
                );
            }
            "--shrink" => a.shrink = true,
            "--plant-bug" => match value("--plant-bug")?.as_str() {
                "no-self-fencing" => a.planted = Some(Planted::NoSelfFencing),
                other => {
                    return Err(format!("--plant-bug {other}: expected no-self-fencing"));
                }
            },
            "--verbose" => a.verbose = true,
            "--full-timeline" => a.full_timeline = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(a)
}

/// The configuration of the first seed the arguments name.
fn config(a: &Args) -> SimConfig {
    let mut template = SimConfig::new(a.first, a.nodes, a.hours);
    template.full_timeline = a.full_timeline;
    template.faults = a.faults.clone();
    template.jobs = a.jobs.clone();
    template.planted = a.planted;
    template
}

/// The items of a comma-separated list; `none` is the empty list.
fn list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',')
        .map(str::trim)
        .filter(move |s| !s.is_empty() && v.trim() != "none")
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
    let template = config(&a);
    // A violation is a panic whose message (seed, invariant, timeline) is printed below.
    std::panic::set_hook(Box::new(|_| {}));
    let verbose = a.verbose || a.count == 1;
    let summary = run_many(&template, a.first, a.count, |seed, outcome| match outcome {
        Ok(r) if verbose => println!(
            "seed {seed}: {} jobs, {} runs, {} takeovers, {} handovers, hash {:016x}",
            r.jobs, r.runs, r.takeovers, r.handovers, r.hash
        ),
        Ok(_) => {}
        Err(message) if a.shrink => println!(
            "seed {seed}: {}",
            message.lines().next().unwrap_or_default()
        ),
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
        let replay = command_of(&SimConfig {
            seed: 0,
            ..template.clone()
        })
        .replace("--seed 0", "--seed S");
        println!("replay with: {replay} (S in {})", seeds.join(", "));
        if a.shrink {
            for (seed, _) in &summary.violations {
                let cfg = SimConfig {
                    seed: *seed,
                    ..template.clone()
                };
                println!("\nshrinking seed {seed} ...");
                match shrink(&cfg, 400) {
                    Some(s) => println!(
                        "{}\n\nshrunk in {} runs: {}\nreplay: {}\nas a test:\n{}",
                        s.failure.message,
                        s.tries,
                        s.failure.invariant,
                        s.command(),
                        s.as_test()
                    ),
                    None => println!("seed {seed} did not fail again (a bug of the simulator)"),
                }
            }
        }
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(command: &str) -> SimConfig {
        let args: Vec<String> = command
            .strip_prefix("cargo xtask simulate ")
            .expect("an xtask command")
            .split(' ')
            .map(str::to_owned)
            .collect();
        config(&parse(&args).expect("it parses"))
    }

    #[test]
    fn a_printed_command_line_parses_back_to_its_configuration() {
        let mut cfg = SimConfig::new(77, 2, 0.041_944_444_444_444_44);
        assert_eq!(parsed(&command_of(&cfg)), cfg);
        cfg.faults = Faults::only(["freeze", "outage", "handler-long"]).unwrap();
        cfg.jobs = Some(vec![0, 3]);
        cfg.planted = Some(Planted::NoSelfFencing);
        let command = command_of(&cfg);
        assert_eq!(parsed(&command), cfg, "{command}");
        cfg.faults = Faults::none();
        cfg.jobs = Some(vec![]);
        let command = command_of(&cfg);
        assert_eq!(parsed(&command), cfg, "{command}");
    }

    #[test]
    fn an_unknown_fault_is_refused_with_the_known_ones() {
        let args = vec!["--faults".to_owned(), "freeze,meteor".to_owned()];
        let e = parse(&args).err().expect("refused");
        assert!(e.contains("meteor") && e.contains("lost-answer"), "{e}");
    }
}
