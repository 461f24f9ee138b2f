//! `cargo xtask`: project tasks (test servers, tests, scenarios, benches).
//!
//! Run `cargo xtask help` for the list. Every subcommand lives in its own module; the shared
//! helpers (paths, processes, the env file) are in `util`, the wire-level server checks in
//! `probe`.

mod bench;
mod chaos;
mod install;
mod probe;
mod scenarios;
mod simulate;
mod test;
mod test_servers;
#[cfg(test)]
mod tidy;
mod util;

use std::process::ExitCode;

const HELP: &str = "\
cargo xtask <command>

commands:
  test-servers [--install] [--brokers] [--tls] [--cluster] [--stop] [--status] [--local]
               [--port-offset N]
      Bring up the servers the tests use (Redis 7, Valkey, PostgreSQL, and where their
      binaries exist Redis >= 8.6 and sqld; --brokers adds RabbitMQ and NATS JetStream).
      Reuses servers already listening, uses Docker Compose where an engine answers
      (unless --local), writes the URLs to target/test-servers/env.
      --install first installs the missing Debian packages (as root; Valkey from
      bookworm-backports on Debian 12); --tls adds a TLS-only PostgreSQL and redis-server
      on spare ports with a test CA; --cluster adds a six-node Redis Cluster (3 primaries,
      3 replicas) on spare ports; --stop stops what this command started;
      --status tells what answers.
  test [--slow] [-- <runner args>]
      Run the workspace tests (cargo-nextest if installed, else cargo test) with the URLs
      from target/test-servers/env; --slow adds the real-process suites (ANARCHON_SLOW=1).
  scenarios [--fast]
      Run the failure scenarios (docs/scenarios.md) against the test servers, and the
      outage, clock-skew and crowd scenarios on servers they start themselves.
  chaos [--store sqlite|redis|postgres] [--instances N] [--seconds S] [--seed X]
      Random SIGKILL/SIGSTOP/SIGTERM (and store server crashes on Redis/PostgreSQL) against
      N instances for S seconds, then check the store's history against the handlers' own
      log; exits non-zero on any violation and prints the seed to replay it.
  simulate [--seed S | --seeds N [--first F]] [--hours H] [--nodes N] [--no-faults]
           [--verbose] [--full-timeline]
      The deterministic simulator (crates/anarchon-sim, release): N instances' scheduler
      cores on virtual time against the in-memory store's model, every fault from one seed;
      invariants checked as it runs. --seed S replays seed S exactly; prints faults per
      kind, runs, takeovers, handovers, violations and simulated instance-hours per second
      (defaults: seed 1, 1 hour, 5 instances). Exits 1 on any violation.
  bench <store> [--json]
      Run the claim bench of crates/anarchon-<store> (cargo bench --bench claim).
  bench scale --store redis|postgres|sqlite|libsql [--jobs N] [--instances K] [--seconds S]
              [--ceiling-seconds C] [--json] [--keep]
      K scheduler processes (examples/bench-node.rs, release) with N `every 1s` jobs each
      on a fresh namespace of the store for S seconds: slots started within their second,
      missed, duplicates, start lag, CPU and RSS per instance, beside the store's own
      ceiling for batches of 256 writes measured in the same run (defaults 1000, 3, 60).
  bench precision [--store sqlite,redis,postgres] [--seconds S] [--instances K] [--json]
      Start lag of one `every 1s` job on K instances (3) per store for S seconds (30),
      beside the p99 of the store's bare one-row operation (PING, a committed UPDATE).
  bench handover [--store sqlite,redis,postgres] [--rounds N] [--every-ms MS] [--hold-ms MS]
      3 scheduler processes share one long job (every 5 s, handler holds 3 s); each round
      sends SIGTERM to attempt 1's owner and times signal -> attempt 2 started on another
      process (p50/p99/max, target 50 ms) with its split, beside the bare one-row op (20).
  bench driver [--jobs N] [--seconds S] [--jitter-ms J] [--history-size H]
      The scheduler alone: one process, N `every 1s` jobs (10,000) on the in-memory store;
      runs per second, slots late, start lag, CPU and RSS per job every 10 s.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "test-servers" => test_servers::run(rest),
        "test" => test::run(rest),
        "scenarios" => scenarios::run(rest),
        "chaos" => chaos::run(rest),
        "bench" => bench::run(rest),
        "simulate" => simulate::run(rest),
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(anyhow::anyhow!(
            "unknown command `{other}`; run `cargo xtask help`"
        )),
    };
    result.unwrap_or_else(|error| {
        eprintln!("xtask: error: {error:#}");
        ExitCode::FAILURE
    })
}
