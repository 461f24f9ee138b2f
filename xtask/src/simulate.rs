//! `cargo xtask simulate`: the deterministic simulator (`crates/anarchon-sim`), built in
//! release, with the arguments passed through (`--seed S` replays one seed exactly;
//! `--seeds N`, `--first F`, `--hours H`, `--nodes N`, `--no-faults`, `--faults LIST`,
//! `--jobs LIST`, `--shrink`, `--plant-bug no-self-fencing`, `--verbose`, `--full-timeline`;
//! the simulator parses them). Exits as the simulator does: 1 on any violation.

use std::process::ExitCode;

use anyhow::Result;

use crate::util;

/// `cargo xtask simulate`: every argument goes to the simulator unchanged (`--help` too), so
/// its options live in one place, crates/anarchon-sim.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub(crate) struct Args {
    /// The simulator's arguments (--seed S | --seeds N [--first F], --hours H, --nodes N,
    /// --no-faults, --verbose, --full-timeline, --help).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub(crate) fn run(Args { args }: Args) -> Result<ExitCode> {
    let mut command = util::cargo();
    command
        .current_dir(util::project_root())
        .args(["run", "--release", "--quiet", "-p", "anarchon-sim", "--"])
        .args(args);
    let status = util::run_visible(&mut command)?;
    Ok(util::exit_code(status))
}
