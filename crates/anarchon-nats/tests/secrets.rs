//! Secrets never leave the NATS store: with a TRACE subscriber capturing every log line
//! (async-nats logs each server address at DEBUG), a password or token holding
//! `/ @ % # ?` in every URL shape (raw, percent-encoded, in a server list, wrong, on a wrong
//! port, over `tls://` to a plain server, with an unsupported scheme) appears in no log
//! line, no error's `Display` or `Debug` and no store `Debug`, whether the connect fails or
//! succeeds.

use std::time::Duration;

use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim};
use anarchon_core::store::{SlotOutcome, Store};
use anarchon_core::testkit::unique_job;
use anarchon_core::{ClaimStore, Error, Reason, RunStatus};
use anarchon_nats::{NatsOptions, NatsStore, Storage};
use anarchon_test_support::{CapturedLogs, OwnNats, spare_port};

/// The halves of the password and the token on both sides of URL delimiters: either one
/// found anywhere means some of a secret leaked, even cut at a delimiter.
const HALVES: [&str; 4] = ["sEcr3tA", "sEcr3tB", "tOkEnA", "tOkEnB"];

fn password() -> String {
    format!("{}/@%#?:{}", HALVES[0], HALVES[1])
}

/// A token has no `:` (that would split it into a user and a password).
fn token() -> String {
    format!("{}/@%#?{}", HALVES[2], HALVES[3])
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
    HALVES.iter().any(|h| text.contains(h))
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

fn opts() -> NatsOptions {
    NatsOptions::default()
        .storage(Storage::Memory)
        .connect_timeout(Duration::from_secs(2))
        .operation_timeout(Duration::from_secs(3))
}

/// Connects, claims, records and reads history: the store at work with the secret.
async fn use_store(url: &str, shown: &mut Vec<String>) {
    let store = match NatsStore::connect_with(url, opts()).await {
        Ok(store) => store,
        Err(e) => panic!("{url} did not connect: {e}"),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_logs_errors_and_debug_in_every_url_shape() {
    let logs = CapturedLogs::install();
    let (pass, tok) = (password(), token());
    let Some(users) = OwnNats::start(&["-js", "--user", "app", "--pass", &pass]) else {
        return;
    };
    let Some(tokens) = OwnNats::start(&["-js", "--auth", &tok]) else {
        return;
    };
    let (up, tp, free) = (users.port, tokens.port, spare_port());
    let (pass_enc, tok_enc) = (encoded(&pass), encoded(&tok));
    let mut shown = Vec::new();
    for url in [
        format!("nats://app:{pass}@127.0.0.1:{up}"),
        format!("nats://app:{pass_enc}@127.0.0.1:{up}"),
        format!("nats://app:{pass}@127.0.0.1:{up},nats://app:{pass}@127.0.0.1:{free}"),
        format!("nats://{tok}@127.0.0.1:{tp}"),
        format!("nats://{tok_enc}@127.0.0.1:{tp}"),
    ] {
        use_store(&url, &mut shown).await;
    }
    let failing = [
        format!("nats://app:{pass}x@127.0.0.1:{up}"),
        format!("nats://app:{pass}@127.0.0.1:{free}"),
        format!("nats://{tok}x@127.0.0.1:{tp}"),
        format!("tls://app:{pass}@127.0.0.1:{up}"),
        format!("tls://{tok}@127.0.0.1:{tp}"),
        format!("ws://app:{pass}@127.0.0.1:{up}"),
        format!("nats://app:{pass}@127.0.0.1:notaport"),
        format!("nats://app:{pass}@"),
        format!("nats://app:{pass}%ff@127.0.0.1:{up}"),
        format!("nats://app:{pass}@127.0.0.1:{up},nats://app:other@127.0.0.1:{tp}"),
        format!("127.0.0.1:{up}"),
    ];
    for url in &failing {
        let err = match NatsStore::connect_with(url, opts()).await {
            Ok(store) => panic!("{url} connected: {store:?}"),
            Err(e) => e,
        };
        shown.push(format!("{err}"));
        shown.push(format!("{err:?}"));
        let core: Error = err.into();
        shown.push(format!("{core}"));
        shown.push(format!("{core:?}"));
    }
    // Let the client's background tasks log what they log after a failed connect.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tracing::trace!("capture check");
    let captured = logs.text();
    assert!(captured.contains("capture check"), "nothing was captured");
    assert!(
        captured.contains("127.0.0.1"),
        "the client logged no server address: the test would not see one with a secret"
    );
    for text in &shown {
        assert!(!leaks(text), "a secret in: {text}");
    }
    let line = captured.lines().find(|l| leaks(l));
    assert!(line.is_none(), "a secret in the log: {line:?}");
}
