//! Secrets never leave the RabbitMQ store: with a TRACE subscriber capturing every log line
//! (the `log` records of the drivers too), a password holding `/ @ % # ? :` in every URL
//! shape (raw, percent-encoded, wrong, on a wrong port, with an unsupported scheme or a
//! query) appears in no log line, no error's `Display` or `Debug` and no store `Debug`,
//! whether the connect fails or succeeds.

use std::process::Command;
use std::time::Duration;

use anarchon_amqp::{AmqpOptions, AmqpStore};
use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim};
use anarchon_core::store::{SlotOutcome, Store};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, Reason, RunStatus};
use anarchon_test_support::CapturedLogs;

/// Two halves of the secret on both sides of URL delimiters: either one found anywhere
/// means some of the secret leaked, even cut at a delimiter.
const HALF_A: &str = "sEcr3tA";
const HALF_B: &str = "sEcr3tB";

fn secret() -> String {
    format!("{HALF_A}/@%#?:{HALF_B}")
}

fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn leaks(text: &str) -> bool {
    text.contains(HALF_A) || text.contains(HALF_B)
}

/// `-n <node>` when `ANARCHON_RABBITMQ_NODE` names the server's node.
fn node() -> Vec<String> {
    std::env::var("ANARCHON_RABBITMQ_NODE")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .map(|n| vec!["-n".to_owned(), n])
        .unwrap_or_default()
}

/// A user whose password is the secret, made with `rabbitmqctl` (deleted on drop); `None`
/// when `rabbitmqctl` cannot reach the node (then only failing connects are tried).
struct SecretUser(String);

impl SecretUser {
    fn create() -> Option<SecretUser> {
        let name = format!("anarchon-secret-{:08x}", rand::random::<u32>());
        let ok = |args: &[&str]| {
            Command::new("rabbitmqctl")
                .args(node())
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !ok(&["add_user", &name, &secret()]) {
            return None;
        }
        let user = SecretUser(name);
        ok(&["set_permissions", "-p", "/", &user.0, ".*", ".*", ".*"]).then_some(user)
    }
}

impl Drop for SecretUser {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(node())
            .args(["delete_user", &self.0])
            .output();
    }
}

fn record(job: &anarchon_core::JobName, slot: i64) -> RunRecord {
    RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: "i".into(),
        manual: false,
        attempt: 1,
        reason: Reason::Scheduled,
        status: RunStatus::Succeeded,
        fence: 0,
        started_at: slot,
        finished_at: Some(slot + 1),
        error: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_logs_errors_and_debug_in_every_url_shape() {
    let logs = CapturedLogs::install();
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let hostport = url
        .split_once("://")
        .map(|(_, r)| r.rsplit_once('@').map_or(r, |(_, h)| h))
        .and_then(|r| r.split('/').next())
        .unwrap()
        .to_owned();
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (raw, enc) = (secret(), encoded(&secret()));
    let user = SecretUser::create();
    if user.is_none() {
        // Not a missing server but a missing tool (or a node it cannot reach): the failing
        // shapes still run.
        eprintln!(
            "SKIP rabbitmqctl could not add a user (set ANARCHON_RABBITMQ_NODE to the node's \
             name): the succeeding connects were not tried"
        );
    }
    let mut shown = Vec::new();
    let opts = || {
        AmqpOptions::default()
            .prefix(format!("anarchon-test-{:016x}", rand::random::<u64>()))
            .connect_timeout(Duration::from_secs(3))
            .operation_timeout(Duration::from_secs(3))
    };
    // Connects that must succeed: the password raw (delimiters unescaped) and encoded.
    if let Some(user) = &user {
        for pass in [&raw, &enc] {
            let u = format!("amqp://{}:{pass}@{hostport}/%2f", user.0);
            let store = match AmqpStore::connect_with(&u, opts()).await {
                Ok(store) => store,
                Err(e) => panic!("{u} did not connect: {e}"),
            };
            let job = unique_job("secret");
            store
                .prepare(&Prepare {
                    jobs: vec![job.clone()],
                    instance_id: "i".into(),
                    call_timeout: Duration::from_secs(5),
                })
                .await
                .unwrap();
            let now = store.now().await.unwrap();
            let outcome = store
                .claim_slot(&SlotClaim {
                    run: RunKey::new(job.clone(), now),
                    instance_id: "i".into(),
                    not_after: now + 60_000,
                })
                .await
                .unwrap();
            assert_eq!(outcome, SlotOutcome::Won);
            store
                .record(&record(&job, now), Retention::default())
                .await
                .unwrap();
            store.history(&job, 5).await.unwrap();
            shown.push(format!("{store:?}"));
            store.close().await.unwrap();
        }
    }
    // Connects that must fail, each with a typed error.
    let failing = [
        format!("amqp://guest:{raw}@{hostport}/%2f"),
        format!("amqp://guest:{enc}@{hostport}/%2f"),
        format!("amqp://guest:{raw}@127.0.0.1:{free}/%2f"),
        format!("amqp://guest:{raw}@{hostport}/no-such-vhost"),
        format!("amqp://guest:{raw}@{hostport}/%2f?heartbeat=5"),
        format!("amqp://guest:{raw}@{hostport}:notaport/%2f"),
        format!("amqps://guest:{raw}@{hostport}/%2f"),
        format!("amqp://{raw}@{hostport}/%2f"),
        format!("amqp://guest:{raw}%ff@{hostport}/%2f"),
        format!("http://guest:{raw}@{hostport}/"),
    ];
    for u in &failing {
        let err = match AmqpStore::connect_with(u, opts()).await {
            Ok(store) => panic!("{u} connected: {store:?}"),
            Err(e) => e,
        };
        shown.push(format!("{err}"));
        shown.push(format!("{err:?}"));
        let core: Error = err.into();
        shown.push(format!("{core}"));
        shown.push(format!("{core:?}"));
    }
    tracing::trace!("capture check");
    drop(user);
    let captured = logs.text();
    assert!(captured.contains("capture check"), "nothing was captured");
    for text in &shown {
        assert!(!leaks(text), "a secret in: {text}");
    }
    let line = captured.lines().find(|l| leaks(l));
    assert!(line.is_none(), "a secret in the log: {line:?}");
}
