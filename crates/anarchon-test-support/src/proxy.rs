//! [`FaultProxy`]: a TCP proxy that loses an answer or plays an outage.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Pattern = Arc<Mutex<Option<Vec<u8>>>>;

/// A TCP proxy on a spare loopback port in front of `127.0.0.1:<upstream>`.
///
/// Once [`arm`](Self::arm)ed with a byte pattern, the first client-to-server chunk that
/// contains it is forwarded and then both sides of that connection are closed, and nothing
/// the server sends after the pattern was seen reaches the client: the request arrives, its
/// answer is lost. New connections are forwarded as usual. [`set_down`](Self::set_down)
/// plays an outage. Dropping the proxy stops it.
#[derive(Debug)]
pub struct FaultProxy {
    /// The port clients connect to.
    pub port: u16,
    pattern: Pattern,
    cuts: Arc<AtomicUsize>,
    down: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts the proxy (on the current tokio runtime).
    pub async fn start(upstream: u16) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let pattern: Pattern = Arc::default();
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
        FaultProxy {
            port,
            pattern,
            cuts,
            down,
            task,
        }
    }

    /// Cuts the next connection that sends `pattern`, after forwarding it.
    pub fn arm(&self, pattern: &[u8]) {
        *self.pattern.lock().unwrap_or_else(|e| e.into_inner()) = Some(pattern.to_vec());
    }

    /// Plays an outage: every open connection is closed and new ones are closed at once,
    /// until called again with `false`.
    pub fn set_down(&self, down: bool) {
        let _ = self.down.send(down);
    }

    /// How many connections were cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

async fn pipe(client: TcpStream, server: TcpStream, pattern: Pattern, cuts: Arc<AtomicUsize>) {
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
                let mut p = pattern.lock().unwrap_or_else(|e| e.into_inner());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: the proxy forwards both ways until armed, then loses the answer to
    /// the armed request; an outage closes connections at once.
    #[tokio::test]
    async fn an_armed_pattern_loses_its_answer_and_an_outage_refuses() {
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        let _ = s.write_all(&buf[..n]).await;
                    }
                });
            }
        });
        let proxy = FaultProxy::start(upstream).await;
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let mut buf = [0u8; 16];
        c.write_all(b"ping").await.unwrap();
        let n = c.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"ping");
        proxy.arm(b"claim");
        c.write_all(b"claim 1").await.unwrap();
        assert_eq!(
            c.read(&mut buf).await.unwrap_or(0),
            0,
            "the answer came back"
        );
        assert_eq!(proxy.cuts(), 1);
        proxy.set_down(true);
        let mut d = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let _ = d.write_all(b"ping").await;
        assert_eq!(d.read(&mut buf).await.unwrap_or(0), 0, "an outage answered");
    }
}
