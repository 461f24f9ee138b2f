//! `cargo xtask test-servers --cluster`: a Redis Cluster of six `redis-server` processes
//! (three primaries, three replicas) on spare loopback ports, data under
//! `target/test-servers/redis-cluster/<port>/`.
//!
//! Each node gets a spare client port and a spare cluster-bus port (`--cluster-port`), so no
//! port arithmetic can run past 65535. The cluster is made with `redis-cli --cluster create
//! ... --cluster-replicas 1 --cluster-yes`, and is ready when every node reports
//! `cluster_state:ok`. A cluster with a node gone is made again from scratch.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{How, Started, State, comm_of, data_dir, run_logged, terminate, wait_for_pid_file};
use crate::util;

/// The variable `--cluster` exports.
pub(super) const ENV: &str = "ANARCHON_REDIS_CLUSTER_URL";

const NODES: usize = 6;
const PREFIX: &str = "redis-cluster-";

/// What the cluster line says, and the variable to export.
pub(super) struct Report {
    pub(super) lines: Vec<String>,
    pub(super) exported: Vec<(&'static str, String)>,
    pub(super) failed: bool,
}

/// fred's cluster URL: the first node, the others as `node=` parameters.
fn url(ports: &[u16]) -> String {
    let mut url = format!("redis-cluster://127.0.0.1:{}", ports[0]);
    for (i, port) in ports.iter().enumerate().skip(1).take(2) {
        url.push(if i == 1 { '?' } else { '&' });
        url.push_str(&format!("node=127.0.0.1:{port}"));
    }
    url
}

fn ours(state: &State) -> Vec<&Started> {
    let mut nodes: Vec<&Started> = state
        .servers
        .iter()
        .filter(|s| s.name.starts_with(PREFIX))
        .collect();
    nodes.sort_by_key(|s| s.name.clone());
    nodes
}

/// `redis-cli -p <port> <args>`, its output when it answered within 5 s.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    util::output_within(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
        Duration::from_secs(5),
    )
}

fn state_ok(port: u16) -> bool {
    cli(port, &["CLUSTER", "INFO"]).is_some_and(|info| info.contains("cluster_state:ok"))
}

/// Starts the cluster (when `start` and it is not running), and reports a running one.
pub(super) fn up(start: bool, state: &mut State) -> Result<Report> {
    let mut report = Report {
        lines: Vec::new(),
        exported: Vec::new(),
        failed: false,
    };
    let nodes = ours(state);
    let whole = nodes.len() == NODES && nodes.iter().all(|n| n.alive());
    if whole {
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        if ports.iter().all(|p| state_ok(*p)) {
            report.lines.push(format!(
                "{:<12} {:<46} started earlier by xtask (6 nodes, cluster_state:ok)",
                "redis-cluster",
                url(&ports)
            ));
            report.exported.push((ENV, url(&ports)));
            return Ok(report);
        }
    }
    if !start {
        if !nodes.is_empty() {
            report.lines.push(format!(
                "{:<12} not healthy (a node is gone or cluster_state is not ok): run \
                 `cargo xtask test-servers --cluster` to make it again",
                "redis-cluster"
            ));
        }
        return Ok(report);
    }
    // Whatever is left of an earlier cluster goes: a cluster is made whole or not at all.
    stop_all(state)?;
    match create(state) {
        Ok((ports, took)) => {
            report.lines.push(format!(
                "{:<12} {:<46} started (6 nodes: 3 primaries, 3 replicas, in {})",
                "redis-cluster",
                url(&ports),
                util::secs(took)
            ));
            report.exported.push((ENV, url(&ports)));
        }
        Err(error) => {
            report
                .lines
                .push(format!("{:<12} FAILED: {error:#}", "redis-cluster"));
            report.failed = true;
        }
    }
    Ok(report)
}

/// Stops every cluster node of ours and forgets them.
fn stop_all(state: &mut State) -> Result<()> {
    for node in state.servers.iter().filter(|s| s.name.starts_with(PREFIX)) {
        if let How::Process { pid, comm } = &node.how {
            terminate(*pid, comm)?;
        }
    }
    state.servers.retain(|s| !s.name.starts_with(PREFIX));
    Ok(())
}

/// Two spare ports per node: the client port and the cluster bus.
fn spare_ports(count: usize) -> Result<Vec<u16>> {
    // All listeners stay open until every port is chosen, so no port comes twice.
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .context("finding spare ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn create(state: &mut State) -> Result<(Vec<u16>, Duration)> {
    let begun = Instant::now();
    let binary = util::which("redis-server")
        .context("redis-server is not installed: run `cargo xtask test-servers --install`")?;
    if util::which("redis-cli").is_none() {
        bail!("redis-cli is missing (Debian package redis-tools): apt-get install redis-tools");
    }
    let all = spare_ports(NODES * 2)?;
    let (ports, buses) = all.split_at(NODES);
    let root = data_dir("redis-cluster")?;
    for (i, (port, bus)) in ports.iter().zip(buses).enumerate() {
        let dir = root.join(port.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let pid_file = dir.join("server.pid");
        let mut command = Command::new(&binary);
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus.to_string(),
            ])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "2000"])
            // A replica fails over however long ago it last heard from its primary: an idle
            // test cluster would otherwise refuse a failover after 10 node timeouts + 10 s.
            .args(["--cluster-replica-validity-factor", "0"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
            .arg("--dir")
            .arg(&dir)
            .arg("--pidfile")
            .arg(&pid_file)
            .arg("--logfile")
            .arg(dir.join("server.log"));
        run_logged(&mut command, &dir.join("start.log"))?;
        let pid = wait_for_pid_file(&pid_file, Duration::from_secs(10))?;
        let comm = comm_of(pid).unwrap_or_else(|| "redis-server".into());
        state.servers.push(Started {
            name: format!("{PREFIX}{i}"),
            port: *port,
            stop: format!("kill {pid}"),
            how: How::Process { pid, comm },
        });
    }
    for port in ports {
        let begun = Instant::now();
        while cli(*port, &["PING"]).is_none_or(|out| out.trim() != "PONG") {
            if begun.elapsed() > Duration::from_secs(10) {
                bail!("cluster node on port {port} does not answer PING");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let mut create = Command::new("redis-cli");
    create.args(["--cluster", "create"]);
    create.args(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    create.args(["--cluster-replicas", "1", "--cluster-yes"]);
    run_logged(&mut create, &root.join("create.log"))
        .with_context(|| format!("log: {}", root.join("create.log").display()))?;
    let waited = Instant::now();
    while !ports.iter().all(|p| state_ok(*p)) {
        if waited.elapsed() > Duration::from_secs(30) {
            bail!("the cluster did not reach cluster_state:ok within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((ports.to_vec(), begun.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::url;

    #[test]
    fn the_url_names_three_nodes_in_freds_form() {
        assert_eq!(
            url(&[7000, 7001, 7002, 7003, 7004, 7005]),
            "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001&node=127.0.0.1:7002"
        );
    }
}
