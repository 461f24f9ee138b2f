//! A private six-node Redis Cluster (three primaries, three replicas) for the tests that kill
//! nodes: its own `redis-server` processes on spare loopback ports, killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One node of the cluster.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

/// The cluster; every node is SIGKILLed and its folder removed on drop.
pub struct OwnCluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

impl OwnCluster {
    /// Starts six nodes with `--cluster-node-timeout node_timeout_ms` and joins them;
    /// `None` (after a SKIP line) when redis-server is not installed.
    pub fn start(node_timeout_ms: u64) -> Option<OwnCluster> {
        if !anarchon_test_support::redis_server_installed() {
            return None;
        }
        let binary = "redis-server";
        // Twelve spare ports: six client ports, six cluster-bus ports.
        let listeners: Vec<TcpListener> = (0..12)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let dir = std::env::temp_dir().join(format!(
            "anarchon-redis-cluster-{}-{:08x}",
            ports[0],
            rand::random::<u32>()
        ));
        let mut cluster = OwnCluster {
            nodes: Vec::new(),
            dir,
        };
        for i in 0..6 {
            let (port, bus) = (ports[i], ports[i + 6]);
            let dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let child = Command::new(binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus.to_string(),
                ])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
                // A replica fails over however long ago it last heard from its primary (the
                // default refuses after 10 node timeouts + 10 s, which an idle test reaches).
                .args(["--cluster-replica-validity-factor", "0"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a cluster node");
            cluster.nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        for node in &cluster.nodes {
            let deadline = Instant::now() + Duration::from_secs(10);
            while cli(node.port, &["PING"]).is_none_or(|o| o.trim() != "PONG") {
                assert!(
                    Instant::now() < deadline,
                    "node {} did not answer",
                    node.port
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(
                cluster
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port)),
            )
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(status.success(), "redis-cli --cluster create failed");
        assert!(
            cluster.wait_ok(Duration::from_secs(30)),
            "the cluster did not reach cluster_state:ok"
        );
        Some(cluster)
    }

    /// fred's cluster URL, naming three nodes.
    pub fn url(&self) -> String {
        format!(
            "redis-cluster://127.0.0.1:{}?node=127.0.0.1:{}&node=127.0.0.1:{}",
            self.nodes[0].port, self.nodes[1].port, self.nodes[2].port
        )
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Waits until every live node reports `cluster_state:ok` and agrees on who serves all
    /// 16384 slots.
    pub fn wait_ok(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let ok = self.live_ports().iter().all(|p| {
                cli(*p, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"))
            });
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The client port of the primary serving hash slot `slot`, as a live node sees it.
    pub fn primary_of(&self, slot: u16) -> Option<u16> {
        let nodes = cli(*self.live_ports().first()?, &["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let mut bounds = range.split('-').filter_map(|b| b.parse::<u16>().ok());
                match (bounds.next(), bounds.next()) {
                    (Some(a), Some(b)) => (a..=b).contains(&slot),
                    (Some(a), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                let address = fields[1].split('@').next()?;
                return address.rsplit(':').next()?.parse().ok();
            }
        }
        None
    }

    /// Waits until every replica of the primary on `port` has acknowledged all it was sent
    /// (`INFO replication`: each replica's offset equals `master_repl_offset`).
    pub fn wait_replicated(&self, port: u16, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(info) = cli(port, &["INFO", "replication"]) {
                let master = info
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("master_repl_offset:"))
                    .and_then(|v| v.parse::<i64>().ok());
                let replicas: Vec<i64> = info
                    .lines()
                    .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                    .filter_map(|l| {
                        l.split(',')
                            .find_map(|f| f.strip_prefix("offset="))
                            .and_then(|v| v.trim().parse().ok())
                    })
                    .collect();
                if let Some(master) = master
                    && !replicas.is_empty()
                    && replicas.iter().all(|r| *r == master)
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Runs `redis-cli -p <port> <args>` (for looking around in a failing test).
    pub fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        cli(port, args)
    }

    /// SIGKILLs the node on `port` (no graceful shutdown: its replica must be elected).
    pub fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster");
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
