//! The dedicated LISTEN connection that turns release notifications into a broadcast of run
//! keys (fast handover, [G-03]).
//!
//! A pooled deadpool connection cannot be used: its connection task discards
//! notifications. This task owns its connection, polls it with `poll_message`, and
//! reconnects with backoff when it is lost. Notifications sent while it is disconnected are
//! lost (PostgreSQL does not keep them), which is why backups also poll every heartbeat.

use std::time::Duration;

use anarchon_core::store::{JobName, RunKey};
use futures::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Parses a release payload `<job>:<slot>`.
pub(crate) fn parse_payload(payload: &str) -> Option<RunKey> {
    let (job, slot) = payload.rsplit_once(':')?;
    Some(RunKey::new(JobName::new(job).ok()?, slot.parse().ok()?))
}

/// Runs until `shutdown` is cancelled.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    config: tokio_postgres::Config,
    connector: crate::tls::Connector,
    channel: String,
    releases: broadcast::Sender<RunKey>,
    state: watch::Sender<bool>,
    target: String,
    connect_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut backoff = BACKOFF_START;
    loop {
        let connected = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(connect_timeout.saturating_add(Duration::from_secs(1)), config.connect(crate::tls::share(&connector))) => r,
        };
        let reason = match connected {
            Ok(Ok((client, mut connection))) => {
                let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                let statement = format!("LISTEN \"{channel}\"");
                let listen = client.batch_execute(&statement);
                tokio::pin!(listen);
                let mut listening = false;
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        r = &mut listen, if !listening => match r {
                            Ok(()) => {
                                listening = true;
                                backoff = BACKOFF_START;
                                state.send_replace(true);
                                tracing::debug!(channel = %channel, "postgres release listener is listening");
                            }
                            Err(e) => break e.to_string(),
                        },
                        m = messages.next() => match m {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                if let Some(key) = parse_payload(n.payload()) {
                                    // No receiver is not an error: nobody is a backup now.
                                    let _ = releases.send(key);
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => break e.to_string(),
                            None => break "connection closed".to_owned(),
                        },
                    }
                }
            }
            Ok(Err(e)) => match crate::tls::handshake_failed(e) {
                Ok(failed) => failed.to_string(),
                Err(e) => e.to_string(),
            },
            Err(_) => "timed out opening the connection".to_owned(),
        };
        state.send_replace(false);
        tracing::warn!(
            target_url = %target,
            "postgres release listener lost its connection ({reason}); reconnecting in {backoff:?}, \
             backups poll meanwhile"
        );
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_payload;

    #[test]
    fn payload_round_trips() {
        let k = parse_payload("nightly-report_2:1700000000000").unwrap();
        assert_eq!(k.to_string(), "nightly-report_2:1700000000000");
        assert!(parse_payload("nope").is_none());
        assert!(parse_payload("bad name:1").is_none());
    }
}
