//! `cargo xtask test-servers`: bring up the servers the server-backed tests use.
//!
//! For each server: if something already answers on its port, reuse it; otherwise start it,
//! through Docker Compose where a Docker engine answers, else from the local binary with its
//! data under `target/test-servers/<name>/`. Then wait until it answers at the protocol level,
//! print one line per server, write the URLs of those that answer to
//! `target/test-servers/env`, and record what was started in `target/test-servers/started.json`
//! so that `--stop` stops exactly those and nothing else.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

mod cluster;
mod tls;

use crate::install::{self, postgres_bindir};
use crate::probe::{self, Answer, Protocol};
use crate::util;

/// One server the tests can use.
struct Spec {
    /// Short name: used for lines, the data folder and the compose service.
    name: &'static str,
    /// The variable the tests read.
    env: &'static str,
    port: u16,
    protocol: Protocol,
    /// Only with `--brokers`.
    broker: bool,
    /// Started only where its binary exists; its absence fails nothing.
    optional: bool,
}

const SERVERS: [Spec; 7] = [
    Spec {
        name: "redis",
        env: "ANARCHON_REDIS_URL",
        port: 6379,
        protocol: Protocol::Redis,
        broker: false,
        optional: false,
    },
    Spec {
        name: "valkey",
        env: "ANARCHON_VALKEY_URL",
        port: 6380,
        protocol: Protocol::Valkey,
        broker: false,
        optional: false,
    },
    Spec {
        name: "redis86",
        env: "ANARCHON_REDIS86_URL",
        port: 6386,
        protocol: Protocol::Redis86,
        broker: false,
        optional: true,
    },
    Spec {
        name: "postgres",
        env: "ANARCHON_POSTGRES_URL",
        port: 5432,
        protocol: Protocol::Postgres,
        broker: false,
        optional: false,
    },
    Spec {
        name: "libsql",
        env: "ANARCHON_LIBSQL_URL",
        port: 8080,
        protocol: Protocol::Libsql,
        broker: false,
        optional: true,
    },
    Spec {
        name: "rabbitmq",
        env: "ANARCHON_AMQP_URL",
        port: 5672,
        protocol: Protocol::Amqp,
        broker: true,
        optional: false,
    },
    Spec {
        name: "nats",
        env: "ANARCHON_NATS_URL",
        port: 4222,
        protocol: Protocol::Nats,
        broker: true,
        optional: false,
    },
];

/// The env variables `test-servers` exports, with the suite each one enables (for `test`):
/// the variable, the suite's name, and the flag of `test-servers` that starts its server
/// (`""` for none).
pub(crate) fn suites() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    SERVERS
        .iter()
        .map(|spec| {
            (
                spec.env,
                spec.name,
                if spec.broker { "--brokers" } else { "" },
            )
        })
        .chain([
            (tls::POSTGRES_ENV, "postgres-tls", "--tls"),
            (tls::REDIS_ENV, "redis-tls", "--tls"),
            (cluster::ENV, "redis-cluster", "--cluster"),
        ])
}

/// `cargo xtask test-servers`: reuses what answers, starts what is missing (Docker Compose
/// where an engine answers, else the local binaries), writes target/test-servers/env.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Args {
    /// First install the missing Debian packages (as root; Valkey from bookworm-backports on
    /// Debian 12).
    #[arg(long)]
    install: bool,
    /// Also RabbitMQ and NATS JetStream.
    #[arg(long)]
    brokers: bool,
    /// Also a TLS-only PostgreSQL and redis-server on spare ports, with a test CA.
    #[arg(long)]
    tls: bool,
    /// Also a six-node Redis Cluster (3 primaries, 3 replicas) on spare ports.
    #[arg(long)]
    cluster: bool,
    /// Stop what this command started (and nothing else).
    #[arg(long)]
    stop: bool,
    /// Tell what answers on each port and whether xtask started it.
    #[arg(long)]
    status: bool,
    /// Never use Docker: start the local binaries.
    #[arg(long)]
    local: bool,
    /// Add N to every port (with --local), for a machine whose ports are taken.
    #[arg(long, value_name = "N", default_value_t = 0)]
    port_offset: u16,
}

type Options = Args;

pub(crate) fn run(options: Args) -> Result<ExitCode> {
    std::fs::create_dir_all(util::servers_dir())
        .with_context(|| format!("creating {}", util::servers_dir().display()))?;
    if options.install && !options.stop && !options.status {
        install::install(install::Wanted {
            brokers: options.brokers,
            tls: options.tls,
        })?;
    }
    if options.stop {
        stop(&options)
    } else if options.status {
        status(&options)
    } else {
        up(&options)
    }
}

impl Spec {
    fn port(&self, options: &Options) -> Result<u16> {
        self.port.checked_add(options.port_offset).with_context(|| {
            format!(
                "port {} + offset {} is past 65535",
                self.port, options.port_offset
            )
        })
    }

    fn url(&self, port: u16) -> String {
        match self.protocol {
            Protocol::Redis | Protocol::Valkey | Protocol::Redis86 => {
                format!("redis://127.0.0.1:{port}")
            }
            Protocol::Postgres => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            Protocol::Libsql => format!("http://127.0.0.1:{port}"),
            Protocol::Amqp => format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            Protocol::Nats => format!("nats://127.0.0.1:{port}"),
        }
    }

    /// How long a freshly started server may take to answer.
    fn start_timeout(&self) -> Duration {
        match self.protocol {
            Protocol::Amqp => Duration::from_secs(120),
            Protocol::Postgres | Protocol::Libsql => Duration::from_secs(60),
            _ => Duration::from_secs(20),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What was started, and how to stop it.

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    servers: Vec<Started>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Started {
    name: String,
    port: u16,
    /// For people reading the file: how to stop it by hand.
    stop: String,
    how: How,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum How {
    /// A daemon we signal by pid; `comm` guards against a reused pid.
    Process { pid: u32, comm: String },
    /// PostgreSQL, stopped with `pg_ctl stop` (as `user` when set).
    PgCtl {
        pg_ctl: PathBuf,
        data: PathBuf,
        user: Option<String>,
    },
    /// RabbitMQ, stopped with `rabbitmqctl -n <node> stop`.
    Rabbitmq {
        rabbitmqctl: PathBuf,
        node: String,
        pid_file: PathBuf,
    },
    /// A Docker Compose service.
    Compose { file: PathBuf, service: String },
}

fn state_file() -> PathBuf {
    util::servers_dir().join("started.json")
}

impl State {
    fn load() -> Self {
        std::fs::read_to_string(state_file())
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }

    fn save(&self) -> Result<()> {
        if self.servers.is_empty() {
            let _ = std::fs::remove_file(state_file());
            return Ok(());
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(state_file(), text + "\n").context("writing started.json")
    }

    fn find(&self, name: &str, port: u16) -> Option<&Started> {
        self.servers
            .iter()
            .find(|s| s.name == name && s.port == port)
    }
}

impl Started {
    fn alive(&self) -> bool {
        match &self.how {
            How::Process { pid, comm } => process_alive(*pid, comm),
            How::PgCtl { data, .. } => pid_file_alive(&data.join("postmaster.pid")),
            How::Rabbitmq { pid_file, .. } => pid_file_alive(pid_file),
            How::Compose { .. } => true,
        }
    }
}

fn process_alive(pid: u32, comm: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|found| found.trim() == comm)
}

fn pid_file_alive(pid_file: &Path) -> bool {
    read_pid(pid_file).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

fn read_pid(pid_file: &Path) -> Option<u32> {
    std::fs::read_to_string(pid_file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|comm| comm.trim().to_string())
}

// ---------------------------------------------------------------------------------------------
// The three modes.

/// What one server line says.
enum Outcome {
    Answers {
        answer: Answer,
        how: String,
    },
    Missing(String),
    Failed(String),
    NotRequested,
    /// Only for --status: nothing listens.
    Silent,
}

fn print_line(spec: &Spec, port: u16, outcome: &Outcome) {
    let url = anarchon_core::redact_url(&spec.url(port));
    let (version, how) = match outcome {
        Outcome::Answers { answer, how } => match &answer.unfit {
            Some(why) => (answer.version.clone(), format!("{how}, NOT USED: {why}")),
            None => (answer.version.clone(), how.clone()),
        },
        Outcome::Missing(hint) => ("-".into(), format!("missing: {hint}")),
        Outcome::Failed(why) => ("-".into(), format!("FAILED: {why}")),
        Outcome::NotRequested => ("-".into(), "not requested (add --brokers)".into()),
        Outcome::Silent => ("-".into(), "not answering".into()),
    };
    println!("{:<9} {:<18} {:<46} {how}", spec.name, version, url);
}

fn up(options: &Options) -> Result<ExitCode> {
    let begun = Instant::now();
    let mut state = State::load();
    // Entries whose process is gone are forgotten; the rest may be reused below.
    state.servers.retain(Started::alive);

    let mut outcomes: HashMap<&'static str, Outcome> = HashMap::new();
    let mut to_start: Vec<&Spec> = Vec::new();
    for spec in &SERVERS {
        let port = spec.port(options)?;
        let requested = options.brokers || !spec.broker;
        match probe::probe(spec.protocol, port) {
            Ok(answer) => {
                let how = match (state.find(spec.name, port), requested) {
                    (Some(_), _) => "started earlier by xtask",
                    (None, true) => "reused",
                    (None, false) => "reused (answers, not requested)",
                };
                outcomes.insert(
                    spec.name,
                    Outcome::Answers {
                        answer,
                        how: how.into(),
                    },
                );
            }
            Err(_) if !requested => {
                outcomes.insert(spec.name, Outcome::NotRequested);
            }
            Err(error) if probe::port_open(port) => {
                outcomes.insert(
                    spec.name,
                    Outcome::Failed(format!(
                        "port {port} is taken but does not answer as {}: {error:#}",
                        spec.name
                    )),
                );
            }
            Err(_) => to_start.push(spec),
        }
    }

    if !to_start.is_empty() {
        let compose = !options.local && docker_engine_answers() && compose_available();
        if compose {
            start_with_compose(options, &to_start, &mut state, &mut outcomes)?;
        } else {
            start_locally(options, &to_start, &mut state, &mut outcomes)?;
        }
    }
    // Started earlier with --tls: still exported, so a plain rerun keeps their URLs.
    let tls = tls::up(options.tls, &mut state)?;
    let cluster = cluster::up(options.cluster, &mut state)?;
    state.save()?;

    let mut failed = tls.failed || cluster.failed;
    let mut exported = Vec::new();
    for spec in &SERVERS {
        let port = spec.port(options)?;
        let outcome = outcomes.remove(spec.name).unwrap_or(Outcome::NotRequested);
        print_line(spec, port, &outcome);
        match &outcome {
            Outcome::Answers { answer, .. } if answer.unfit.is_none() => {
                exported.push((spec.env, spec.url(port)))
            }
            // An optional server (Redis >= 8.6, sqld) never fails the command: its suite
            // prints SKIP lines.
            _ if spec.optional => {}
            Outcome::NotRequested => {}
            _ => failed = true,
        }
    }
    let servers = exported.len();
    for line in tls.lines.iter().chain(&cluster.lines) {
        println!("{line}");
    }
    exported.extend(tls.exported);
    exported.extend(cluster.exported);
    write_env(&exported)?;
    println!(
        "wrote {} ({} of {} servers) in {}; `cargo xtask test` reads it",
        util::env_file().display(),
        servers,
        SERVERS.len(),
        util::secs(begun.elapsed())
    );
    if failed {
        eprintln!("test-servers: a requested server is not available (see the lines above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn status(options: &Options) -> Result<ExitCode> {
    let mut state = State::load();
    for spec in &SERVERS {
        let port = spec.port(options)?;
        let outcome = match probe::probe(spec.protocol, port) {
            Ok(answer) => {
                let how = match state.find(spec.name, port) {
                    Some(started) => format!("answers, started by xtask (stop: {})", started.stop),
                    None => "answers, not started by xtask".into(),
                };
                Outcome::Answers { answer, how }
            }
            Err(error) if probe::port_open(port) => Outcome::Failed(format!("{error:#}")),
            Err(_) => Outcome::Silent,
        };
        print_line(spec, port, &outcome);
    }
    // The TLS servers and the cluster, when xtask started them.
    let tls = tls::up(false, &mut state)?;
    let cluster = cluster::up(false, &mut state)?;
    for line in tls.lines.iter().chain(&cluster.lines) {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

fn stop(options: &Options) -> Result<ExitCode> {
    let mut state = State::load();
    if state.servers.is_empty() {
        println!("test-servers: nothing was started by xtask; nothing to stop");
    }
    let mut kept = Vec::new();
    for started in std::mem::take(&mut state.servers) {
        match stop_one(&started) {
            Ok(()) => println!("{:<9} stopped ({})", started.name, started.stop),
            Err(error) => {
                println!("{:<9} could NOT be stopped: {error:#}", started.name);
                kept.push(started);
            }
        }
    }
    state.servers = kept;
    state.save()?;
    // What still answers (servers we did not start) stays in the env file.
    let mut exported = Vec::new();
    for spec in &SERVERS {
        let port = spec.port(options)?;
        if probe::probe(spec.protocol, port).is_ok_and(|answer| answer.unfit.is_none()) {
            exported.push((spec.env, spec.url(port)));
        }
    }
    write_env(&exported)?;
    Ok(if state.servers.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn write_env(exported: &[(&str, String)]) -> Result<()> {
    let mut text =
        String::from("# Written by `cargo xtask test-servers`: the servers that answered.\n");
    for (key, url) in exported {
        text.push_str(&format!("{key}={url}\n"));
    }
    let path = util::env_file();
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &path).with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Waiting.

/// Polls the server until it answers or its time is up.
fn wait_for(spec: &Spec, port: u16, limit: Duration) -> Result<Answer> {
    let begun = Instant::now();
    loop {
        match probe::probe(spec.protocol, port) {
            Ok(answer) => return Ok(answer),
            Err(error) if begun.elapsed() > limit => {
                bail!("did not answer within {}: {error:#}", util::secs(limit))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Docker Compose.

fn compose_file() -> PathBuf {
    util::project_root()
        .join("compose")
        .join("test-servers.yml")
}

fn docker_engine_answers() -> bool {
    util::which("docker").is_some()
        && util::output_within(
            Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]),
            Duration::from_secs(10),
        )
        .is_some()
}

fn compose_available() -> bool {
    util::output_within(
        Command::new("docker").args(["compose", "version"]),
        Duration::from_secs(10),
    )
    .is_some()
}

fn start_with_compose(
    options: &Options,
    to_start: &[&Spec],
    state: &mut State,
    outcomes: &mut HashMap<&'static str, Outcome>,
) -> Result<()> {
    if options.port_offset != 0 {
        bail!("--port-offset works only with local binaries: add --local");
    }
    let file = compose_file();
    let mut command = Command::new("docker");
    command
        .arg("compose")
        .arg("-f")
        .arg(&file)
        .args(["up", "--detach", "--wait"]);
    // Naming a service also enables its profile (redis86, libsql, brokers).
    command.args(to_start.iter().map(|spec| spec.name));
    let status = util::run_visible(&mut command)?;
    if !status.success() {
        eprintln!("test-servers: docker compose up failed ({status}); checking each server anyway");
    }
    for spec in to_start {
        let port = spec.port(options)?;
        let outcome = match wait_for(spec, port, spec.start_timeout()) {
            Ok(answer) => {
                state.servers.push(Started {
                    name: spec.name.into(),
                    port,
                    stop: format!(
                        "docker compose -f {} rm --stop --force {}",
                        file.display(),
                        spec.name
                    ),
                    how: How::Compose {
                        file: file.clone(),
                        service: spec.name.into(),
                    },
                });
                Outcome::Answers {
                    answer,
                    how: "compose".into(),
                }
            }
            Err(error) => Outcome::Failed(format!("compose service {}: {error:#}", spec.name)),
        };
        outcomes.insert(spec.name, outcome);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Local binaries.

/// A server that was launched and is being waited for.
struct Launched {
    started: Started,
    log: PathBuf,
}

fn start_locally(
    options: &Options,
    to_start: &[&Spec],
    state: &mut State,
    outcomes: &mut HashMap<&'static str, Outcome>,
) -> Result<()> {
    // Launch everything first, then wait: RabbitMQ's boot overlaps the others'.
    let mut launched = Vec::new();
    for spec in to_start {
        let port = spec.port(options)?;
        match find_binary(spec) {
            Err(hint) => {
                outcomes.insert(spec.name, Outcome::Missing(hint));
            }
            Ok(binary) => match launch(spec, port, &binary) {
                Ok(one) => launched.push((*spec, port, one)),
                Err(error) => {
                    outcomes.insert(spec.name, Outcome::Failed(format!("{error:#}")));
                }
            },
        }
    }
    for (spec, port, one) in launched {
        let outcome = match wait_for(spec, port, spec.start_timeout()) {
            Ok(answer) => Outcome::Answers {
                answer,
                how: "started".into(),
            },
            Err(error) => Outcome::Failed(format!("{error:#}; log: {}", one.log.display())),
        };
        // Recorded even when it did not answer in time, so that --stop can clean it up.
        state
            .servers
            .retain(|s| !(s.name == spec.name && s.port == port));
        state.servers.push(one.started);
        outcomes.insert(spec.name, outcome);
    }
    Ok(())
}

/// Finds a server's binary, or says which package provides it.
fn find_binary(spec: &Spec) -> std::result::Result<PathBuf, String> {
    let on_path = |program: &str| {
        util::which(program).or_else(|| {
            ["/usr/sbin", "/usr/local/sbin", "/sbin"]
                .iter()
                .map(|dir| Path::new(dir).join(program))
                .find(|path| path.is_file())
        })
    };
    let from_env = |variable: &str| {
        std::env::var_os(variable)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    // A required server's hint is the exact command that installs it.
    let package = |name: &str| {
        format!(
            "run `cargo xtask test-servers --install{}`, or as root: {}",
            if spec.broker { " --brokers" } else { "" },
            install::manual_commands(&[name])
        )
    };
    match spec.protocol {
        Protocol::Redis => on_path("redis-server").ok_or_else(|| package("redis-server")),
        Protocol::Valkey => on_path("valkey-server").ok_or_else(|| package("valkey-server")),
        Protocol::Redis86 => from_env("ANARCHON_REDIS86_SERVER")
            .into_iter()
            .chain(on_path("redis-server"))
            .find(|binary| redis_server_version(binary).is_some_and(|v| probe::at_least(&v, (8, 6))))
            .ok_or_else(|| {
                "a redis-server >= 8.6 (no Debian package has one): set \
                 ANARCHON_REDIS86_SERVER=/path/to/redis-server, or use Docker (compose profile redis86)"
                    .into()
            }),
        Protocol::Postgres => postgres_bindir()
            .map(|dir| dir.join("pg_ctl"))
            .ok_or_else(|| package("postgresql")),
        Protocol::Libsql => from_env("ANARCHON_SQLD").or_else(|| on_path("sqld")).ok_or_else(|| {
            "sqld, the libSQL server (no Debian package): put sqld on PATH or set \
             ANARCHON_SQLD=/path/to/sqld, or use Docker (compose profile libsql)"
                .into()
        }),
        Protocol::Amqp => on_path("rabbitmq-server").ok_or_else(|| package("rabbitmq-server")),
        Protocol::Nats => on_path("nats-server").ok_or_else(|| package("nats-server")),
    }
}

/// `redis-server --version` prints `Redis server v=7.0.15 sha=...`.
fn redis_server_version(binary: &Path) -> Option<String> {
    let out = util::output_within(
        Command::new(binary).arg("--version"),
        Duration::from_secs(5),
    )?;
    out.split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .map(str::to_string)
}

fn launch(spec: &Spec, port: u16, binary: &Path) -> Result<Launched> {
    match spec.protocol {
        Protocol::Redis | Protocol::Valkey | Protocol::Redis86 => launch_redis(spec, port, binary),
        Protocol::Postgres => launch_postgres(spec, port, binary),
        Protocol::Libsql => launch_sqld(spec, port, binary),
        Protocol::Amqp => launch_rabbitmq(spec, port, binary),
        Protocol::Nats => launch_nats(spec, port, binary),
    }
}

/// A fresh data folder for the server (old contents are kept: a restart reuses them).
fn data_dir(name: &str) -> Result<PathBuf> {
    let dir = util::servers_dir().join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A data folder that `user` can write to when we are root (PostgreSQL refuses to run as
/// root; Debian's RabbitMQ switches to its own user). If the project sits where that user
/// cannot reach (under a private home folder, say), a folder under /tmp is used instead.
fn data_dir_for(name: &str, user: Option<&str>) -> Result<PathBuf> {
    let dir = data_dir(name)?;
    let Some(user) = user else { return Ok(dir) };
    let owned_and_writable = |dir: &Path| {
        util::succeeds(
            Command::new("chown")
                .arg("-R")
                .arg(format!("{user}:"))
                .arg(dir),
        ) && util::succeeds(
            Command::new("runuser")
                .args(["-u", user, "--", "test", "-w"])
                .arg(dir),
        )
    };
    if owned_and_writable(&dir) {
        return Ok(dir);
    }
    let fallback = std::env::temp_dir()
        .join("anarchon-test-servers")
        .join(name);
    std::fs::create_dir_all(&fallback)?;
    if !owned_and_writable(&fallback) {
        bail!(
            "user {user} cannot write to {} nor {}",
            dir.display(),
            fallback.display()
        );
    }
    println!(
        "test-servers: {user} cannot write under {}; {name} keeps its data in {}",
        dir.display(),
        fallback.display()
    );
    Ok(fallback)
}

/// Starts a command in its own process group, so a Ctrl-C meant for xtask does not reach it.
fn spawn_detached(command: &mut Command, log: &Path) -> Result<std::process::Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    command
        .spawn()
        .with_context(|| format!("could not start `{}`", util::show(command)))
}

/// Runs a start command to its end (for daemons that fork), with its output in the log.
fn run_logged(command: &mut Command, log: &Path) -> Result<()> {
    let status = spawn_detached(command, log)?.wait()?;
    if !status.success() {
        bail!(
            "`{}` failed ({status}); log: {}",
            util::show(command),
            log.display()
        );
    }
    Ok(())
}

fn wait_for_pid_file(pid_file: &Path, limit: Duration) -> Result<u32> {
    let begun = Instant::now();
    loop {
        if let Some(pid) = read_pid(pid_file) {
            return Ok(pid);
        }
        if begun.elapsed() > limit {
            bail!(
                "no pid in {} after {}",
                pid_file.display(),
                util::secs(limit)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn launch_redis(spec: &Spec, port: u16, binary: &Path) -> Result<Launched> {
    let dir = data_dir(spec.name)?;
    let pid_file = dir.join("server.pid");
    let log = dir.join("server.log");
    let _ = std::fs::remove_file(&pid_file);
    let mut command = Command::new(binary);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
        .arg("--dir")
        .arg(&dir)
        .arg("--pidfile")
        .arg(&pid_file)
        .arg("--logfile")
        .arg(&log);
    run_logged(&mut command, &dir.join("start.log"))?;
    let pid = wait_for_pid_file(&pid_file, Duration::from_secs(10))?;
    let comm = comm_of(pid).unwrap_or_else(|| "redis-server".into());
    Ok(Launched {
        started: Started {
            name: spec.name.into(),
            port,
            stop: format!("kill {pid}"),
            how: How::Process { pid, comm },
        },
        log,
    })
}

fn launch_nats(spec: &Spec, port: u16, binary: &Path) -> Result<Launched> {
    let dir = data_dir(spec.name)?;
    let log = dir.join("server.log");
    let mut command = Command::new(binary);
    command
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.join("jetstream"))
        .arg("-P")
        .arg(dir.join("server.pid"))
        .arg("-l")
        .arg(&log);
    let child = spawn_detached(&mut command, &dir.join("start.log"))?;
    let pid = child.id();
    Ok(Launched {
        started: Started {
            name: spec.name.into(),
            port,
            stop: format!("kill {pid}"),
            how: How::Process {
                pid,
                comm: "nats-server".into(),
            },
        },
        log,
    })
}

fn launch_sqld(spec: &Spec, port: u16, binary: &Path) -> Result<Launched> {
    let dir = data_dir(spec.name)?;
    let log = dir.join("server.log");
    let mut command = Command::new(binary);
    command
        .arg("--db-path")
        .arg(dir.join("data.sqld"))
        .arg("--http-listen-addr")
        .arg(format!("127.0.0.1:{port}"));
    let child = spawn_detached(&mut command, &log)?;
    let pid = child.id();
    // Wait a moment for the comm name: a wrapper script would show its interpreter's.
    std::thread::sleep(Duration::from_millis(100));
    let comm = comm_of(pid).unwrap_or_else(|| "sqld".into());
    Ok(Launched {
        started: Started {
            name: spec.name.into(),
            port,
            stop: format!("kill {pid}"),
            how: How::Process { pid, comm },
        },
        log,
    })
}

/// A command run as `user` when we are root, else as ourselves.
fn as_user(user: Option<&str>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

fn launch_postgres(spec: &Spec, port: u16, pg_ctl: &Path) -> Result<Launched> {
    let bindir = pg_ctl.parent().context("pg_ctl has no folder")?;
    let user = util::running_as_root().then_some("postgres");
    let dir = data_dir_for(spec.name, user)?;
    let data = dir.join("data");
    let log = dir.join("server.log");
    if !data.join("PG_VERSION").is_file() {
        let _ = std::fs::remove_dir_all(&data);
        let mut initdb = as_user(user, &bindir.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run_logged(&mut initdb, &dir.join("initdb.log"))?;
        let include =
            "\n# Added by cargo xtask test-servers.\ninclude_if_exists = 'anarchon.conf'\n";
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)?;
        text.push_str(include);
        std::fs::write(&conf, text)?;
    }
    // Rewritten at every start so that --port-offset takes effect. Test data need no
    // durability; no Unix socket keeps clear of a system server's socket folder.
    let settings = format!(
        "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n\
         max_connections = 200\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
    );
    std::fs::write(data.join("anarchon.conf"), settings)?;
    let mut start = as_user(user, pg_ctl);
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(&log)
        .args(["-w", "-t", "60", "start"]);
    run_logged(&mut start, &dir.join("start.log"))?;
    let mut stop_hint = as_user(user, pg_ctl);
    stop_hint.arg("-D").arg(&data).args(["-m", "fast", "stop"]);
    Ok(Launched {
        started: Started {
            name: spec.name.into(),
            port,
            stop: util::show(&stop_hint),
            how: How::PgCtl {
                pg_ctl: pg_ctl.to_path_buf(),
                data,
                user: user.map(str::to_string),
            },
        },
        log,
    })
}

fn launch_rabbitmq(spec: &Spec, port: u16, server: &Path) -> Result<Launched> {
    // Debian's wrapper switches to the rabbitmq user when run as root.
    let user = util::running_as_root().then_some("rabbitmq");
    let dir = data_dir_for(spec.name, user)?;
    let node = format!("anarchon-{port}@localhost");
    let pid_file = dir.join("rabbitmq.pid");
    let dist_port = port
        .checked_add(20_000)
        .context("RabbitMQ's distribution port (port + 20000) is past 65535")?;
    // Our own config files, so the system's /etc/rabbitmq does not decide the listener.
    std::fs::write(
        dir.join("rabbitmq.conf"),
        format!("listeners.tcp.local = 127.0.0.1:{port}\nloopback_users.guest = true\n"),
    )?;
    std::fs::write(dir.join("rabbitmq-env.conf"), "")?;
    std::fs::write(dir.join("enabled_plugins"), "[].\n")?;
    for sub in ["mnesia", "log"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    if let Some(user) = user {
        check(
            Command::new("chown")
                .arg("-R")
                .arg(format!("{user}:"))
                .arg(&dir),
        )?;
    }
    let _ = std::fs::remove_file(&pid_file);
    let mut command = Command::new(server);
    command
        .arg("-detached")
        .env("RABBITMQ_NODENAME", &node)
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", dist_port.to_string())
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        // Erlang's distribution port too listens on loopback only.
        .env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}",
        );
    run_logged(&mut command, &dir.join("start.log"))?;
    let rabbitmqctl = server.with_file_name("rabbitmqctl");
    Ok(Launched {
        started: Started {
            name: spec.name.into(),
            port,
            stop: format!("{} -n {node} stop", rabbitmqctl.display()),
            how: How::Rabbitmq {
                rabbitmqctl,
                node,
                pid_file: dir.join("rabbitmq.pid"),
            },
        },
        log: dir.join("log"),
    })
}

// ---------------------------------------------------------------------------------------------
// Stopping.

fn stop_one(started: &Started) -> Result<()> {
    if !started.alive() {
        return Ok(());
    }
    match &started.how {
        How::Process { pid, comm } => terminate(*pid, comm),
        How::PgCtl { pg_ctl, data, user } => {
            let mut command = as_user(user.as_deref(), pg_ctl);
            command
                .arg("-D")
                .arg(data)
                .args(["-m", "fast", "-w", "stop"]);
            check(&mut command)
        }
        How::Rabbitmq {
            rabbitmqctl,
            node,
            pid_file,
        } => {
            let mut command = Command::new(rabbitmqctl);
            command.args(["-n", node, "stop"]);
            if check(&mut command).is_ok() || !pid_file_alive(pid_file) {
                return Ok(());
            }
            let pid = read_pid(pid_file).context("no pid file")?;
            let comm = comm_of(pid).unwrap_or_default();
            terminate(pid, &comm)
        }
        How::Compose { file, service } => {
            let mut command = Command::new("docker");
            command
                .arg("compose")
                .arg("-f")
                .arg(file)
                .args(["rm", "--stop", "--force", service]);
            check(&mut command)
        }
    }
}

fn check(command: &mut Command) -> Result<()> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not run `{}`", util::show(command)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            util::show(command),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// SIGTERM, up to 15 s of grace, then SIGKILL; only while the pid still names `comm`.
fn terminate(pid: u32, comm: &str) -> Result<()> {
    let signal = |name: &str| {
        util::succeeds(
            Command::new("kill")
                .arg(format!("-{name}"))
                .arg(pid.to_string()),
        )
    };
    if !process_alive(pid, comm) {
        return Ok(());
    }
    signal("TERM");
    let begun = Instant::now();
    while process_alive(pid, comm) {
        if begun.elapsed() > Duration::from_secs(15) {
            signal("KILL");
            std::thread::sleep(Duration::from_millis(200));
            if process_alive(pid, comm) {
                bail!("pid {pid} ({comm}) survived SIGKILL");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_has_its_own_port_and_variable() {
        for (i, a) in SERVERS.iter().enumerate() {
            for b in &SERVERS[i + 1..] {
                assert_ne!(a.port, b.port, "{} and {}", a.name, b.name);
                assert_ne!(a.env, b.env, "{} and {}", a.name, b.name);
            }
            assert!(a.env.starts_with("ANARCHON_") && a.env.ends_with("_URL"));
        }
    }

    #[test]
    fn the_state_file_round_trips() {
        let state = State {
            servers: vec![Started {
                name: "valkey".into(),
                port: 6380,
                stop: "kill 42".into(),
                how: How::Process {
                    pid: 42,
                    comm: "valkey-server".into(),
                },
            }],
        };
        let text = serde_json::to_string(&state).unwrap();
        assert!(text.contains(r#""kind":"process""#), "{text}");
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back.servers[0].port, 6380);
    }
}
