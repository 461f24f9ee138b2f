//! Helpers of the NATS tests: a nats-server of the test's own on a spare loopback port, and
//! a TCP proxy that can cut a connection right after it forwarded a given message.

#![allow(dead_code, unreachable_pub)] // Each test file uses a part of these helpers.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Finds nats-server: `ANARCHON_NATS_SERVER`, then `nats-server` on `PATH`, then
/// `/usr/sbin/nats-server`. Without one it prints a SKIP line (a failure under
/// `ANARCHON_REQUIRE_SERVERS=1`).
pub fn nats_server_binary() -> Option<String> {
    let candidates = std::env::var("ANARCHON_NATS_SERVER")
        .ok()
        .into_iter()
        .chain([
            "nats-server".to_string(),
            "/usr/sbin/nats-server".to_string(),
        ]);
    for c in candidates {
        let ok = Command::new(&c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(c);
        }
    }
    if anarchon_core::testkit::require_servers() {
        panic!(
            "nats-server is not installed and ANARCHON_REQUIRE_SERVERS=1: install it (apt-get \
             install nats-server) or point ANARCHON_NATS_SERVER at one"
        );
    }
    eprintln!("SKIP nats-server is not installed: this test starts its own server and did not run");
    None
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A nats-server this test started; SIGKILLed and its folder removed on drop.
pub struct OwnNats {
    binary: String,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl OwnNats {
    /// Starts nats-server with these extra arguments (`-js` for JetStream).
    pub fn start(extra: &[&str]) -> Option<OwnNats> {
        let binary = nats_server_binary()?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "anarchon-nats-test-{port}-{:08x}",
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = OwnNats {
            binary,
            port,
            dir,
            args: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        s.spawn();
        Some(s)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("start nats-server"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the server.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and storage folder.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP proxy on a spare loopback port in front of `upstream`. Once [`Proxy::arm`]ed with a
/// byte pattern, the first client-to-server chunk that contains it is forwarded and then
/// both sides of that connection are closed, and nothing the server sends after the
/// pattern was seen reaches the client: the request arrives, its answer is lost. New
/// connections are forwarded as usual.
pub struct Proxy {
    pub port: u16,
    pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>> = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (p, c) = (pattern.clone(), cuts.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let (p, c) = (p.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    pipe(client, server, p, c).await;
                });
            }
        });
        Proxy {
            port,
            pattern,
            cuts,
            task,
        }
    }

    /// Cuts the next connection that sends `pattern`, after forwarding it.
    pub fn arm(&self, pattern: &[u8]) {
        *self.pattern.lock().unwrap() = Some(pattern.to_vec());
    }

    /// How many connections were cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    let cut2 = cut.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let hit = {
                let mut p = pattern.lock().unwrap();
                let hit = p.as_deref().is_some_and(|p| contains(&buf[..n], p));
                if hit {
                    *p = None;
                }
                hit
            };
            if hit {
                // From now on nothing goes back to the client: the answer is lost.
                cut2.store(true, Ordering::SeqCst);
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
            if hit {
                let _ = sw.flush().await;
                cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) || cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either side ending closes both (the halves are dropped here).
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
