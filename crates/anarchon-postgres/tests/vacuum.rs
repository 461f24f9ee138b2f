//! [B-33] `prepare` warns when nothing vacuums the store's tables: the server's `autovacuum`
//! is off, or the runs or history table turned it off. Its own test process: it installs the
//! log subscriber.

mod common;

use std::sync::{Arc, Mutex};

use anarchon_core::store::Store;

async fn server_autovacuum(url: &str) -> bool {
    let (client, task) = common::connect(url).await;
    let on: bool = client
        .query_one("SELECT current_setting('autovacuum') <> 'off'", &[])
        .await
        .unwrap()
        .get(0);
    drop(client);
    let _ = task.await;
    on
}

#[tokio::test(flavor = "multi_thread")]
async fn b33_prepare_warns_when_autovacuum_is_off_for_the_server_or_the_tables() {
    let Some(url) = common::url() else { return };
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || common::LogSink(sink.clone()))
        .try_init()
        .expect("the only subscriber of this test process");
    let read = || String::from_utf8(std::mem::take(&mut *logs.lock().unwrap())).unwrap();
    let server_on = server_autovacuum(&url).await;

    let store = common::fresh_store(&url).await;
    let text = read();
    assert_eq!(
        text.contains("autovacuum is off on this PostgreSQL server"),
        !server_on,
        "server autovacuum {server_on}: {text}"
    );
    assert!(!text.contains("autovacuum is turned off for"), "{text}");

    let schema = store.schema().to_owned();
    common::exec(
        &url,
        &format!("ALTER TABLE \"{schema}\".anarchon_runs SET (autovacuum_enabled = off)"),
    )
    .await
    .unwrap();
    store.prepare(&common::prepare_no_jobs()).await.unwrap();
    let text = read();
    assert!(
        text.contains(&format!(
            "autovacuum is turned off for {schema}.anarchon_runs: every result"
        )),
        "{text}"
    );
    common::drop_schema(&url, &schema).await;
}
