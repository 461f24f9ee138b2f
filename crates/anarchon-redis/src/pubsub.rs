//! Fast handover: releases are published on `<prefix>releases`; a separate subscriber
//! connection feeds a broadcast channel and subscribes again after every reconnect.

use std::sync::Arc;

use anarchon_core::store::{JobName, Result, RunKey};
use fred::interfaces::*;
use fred::prelude::Client;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::conn::Conn;

pub(crate) struct Releases {
    pub(crate) tx: broadcast::Sender<RunKey>,
    pub(crate) channel: String,
    state: tokio::sync::Mutex<Option<(Client, JoinHandle<()>)>>,
}

/// The message published for a released run: `<job>:<slot>`.
pub(crate) fn message(run: &RunKey) -> String {
    run.to_string()
}

fn parse(msg: &str) -> Option<RunKey> {
    let (job, slot) = msg.rsplit_once(':')?;
    Some(RunKey::new(JobName::new(job).ok()?, slot.parse().ok()?))
}

impl Releases {
    pub(crate) fn new(prefix: &str) -> Self {
        Releases {
            tx: broadcast::channel(1024).0,
            channel: format!("{prefix}releases"),
            state: tokio::sync::Mutex::new(None),
        }
    }

    /// Opens the subscriber connection and subscribes (once); returns when subscribed.
    pub(crate) async fn start(&self, conn: &Arc<Conn>) -> Result<()> {
        let mut state = self.state.lock().await;
        if state.is_some() || conn.is_closed() {
            return Ok(());
        }
        conn.ensure().await?;
        let sub = conn.client.clone_new();
        match tokio::time::timeout(conn.opts.connect_timeout, sub.init()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let _ = sub.quit().await;
                return Err(conn.unavailable(e));
            }
            Err(_) => {
                let _ =
                    tokio::time::timeout(std::time::Duration::from_millis(200), sub.quit()).await;
                return Err(conn.unavailable("the subscriber connection did not open in time"));
            }
        }
        conn.watch_client(&sub, "subscriber");
        let mut messages = sub.message_rx();
        let mut reconnects = sub.reconnect_rx();
        let timeout = conn.opts.command_timeout;
        let subscribed = tokio::time::timeout(timeout, sub.subscribe(self.channel.clone())).await;
        match subscribed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = sub.quit().await;
                return Err(conn.map_err("subscribe", e));
            }
            Err(_) => {
                let _ = sub.quit().await;
                return Err(anarchon_core::Error::Timeout {
                    store: crate::conn::STORE,
                    operation: "subscribe",
                    after: timeout,
                });
            }
        }
        let tx = self.tx.clone();
        let channel = self.channel.clone();
        let client = sub.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = messages.recv() => match m {
                        Ok(m) => {
                            if let Some(run) = m.value.as_string().as_deref().and_then(parse) {
                                let _ = tx.send(run);
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => break,
                    },
                    r = reconnects.recv() => match r {
                        Ok(_) => {
                            // A new connection has no subscriptions: subscribe again.
                            if let Ok(Err(e)) | Err(e) = tokio::time::timeout(timeout, client.subscribe(channel.clone()))
                                .await
                                .map_err(|_| fred::error::Error::new(fred::error::ErrorKind::Timeout, "subscribe timed out"))
                            {
                                tracing::warn!(target: "anarchon_redis", "resubscribing to {channel} failed: {e}");
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => break,
                    },
                }
            }
        });
        *state = Some((sub, task));
        Ok(())
    }

    pub(crate) async fn stop(&self) {
        if let Some((sub, task)) = self.state.lock().await.take() {
            task.abort();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sub.quit()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_messages_round_trip() {
        let run = RunKey::new(JobName::new("a-b_c").unwrap(), 1_764_460_800_000);
        assert_eq!(parse(&message(&run)), Some(run));
        assert_eq!(parse("garbage"), None);
    }
}
