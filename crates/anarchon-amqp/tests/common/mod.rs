//! Helpers of the RabbitMQ tests: a TCP proxy in front of the server that can cut a
//! connection right after it forwarded a given message, or play an outage.

#![allow(dead_code, unreachable_pub)] // Each test file uses a part of these helpers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TCP proxy on a spare loopback port in front of `upstream`. Once [`Proxy::arm`]ed with a
/// byte pattern, the first client-to-server chunk that contains it is forwarded and then
/// both sides of that connection are closed, and nothing the server sends after the
/// pattern was seen reaches the client: the request arrives, its answer is lost. New
/// connections are forwarded as usual.
pub struct Proxy {
    pub port: u16,
    pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
    down: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>> = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (p, c) = (pattern.clone(), cuts.clone());
        let (down, down_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if *down_rx.borrow() {
                    // An outage: the connection is closed at once.
                    continue;
                }
                let (p, c, mut d) = (p.clone(), c.clone(), down_rx.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = pipe(client, server, p, c) => {}
                        _ = d.wait_for(|down| *down) => {}
                    }
                });
            }
        });
        Proxy {
            port,
            pattern,
            cuts,
            down,
            task,
        }
    }

    /// Cuts the next connection that sends `pattern`, after forwarding it.
    pub fn arm(&self, pattern: &[u8]) {
        *self.pattern.lock().unwrap() = Some(pattern.to_vec());
    }

    /// Plays a broker outage: every open connection is closed and new ones are closed at
    /// once, until called again with `false`.
    pub fn set_down(&self, down: bool) {
        let _ = self.down.send(down);
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
