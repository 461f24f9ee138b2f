//! No password leaves the PostgreSQL store: with every log of every crate captured at TRACE
//! (tokio-postgres's `log` records among them), connecting with a password in every shape
//! of connection string — URL with `/ @ % # ?` in it, percent-encoded or not, `?password=`,
//! libpq `key=value`, a wrong port, each TLS mode — prints it nowhere: not in the logs, not
//! in an error, not in a `Debug`. The server trusts local connections, so the connects
//! with the right host succeed and the others fail.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anarchon_core::store::{ClaimOutcome, JobName, LeaseStore, Store};
use anarchon_core::testkit::lease::claim;
use anarchon_postgres::{PostgresOptions, PostgresStore};

const SECRET: &str = "Zq8sEcReT";

fn captured() -> Arc<Mutex<Vec<u8>>> {
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
            .with_ansi(false)
            .with_writer(move || common::LogSink(sink.clone()))
            .try_init()
            .expect("the only subscriber of this test process");
        buf
    })
    .clone()
}

/// Percent-encodes every byte that is not alphanumeric.
fn encode(s: &str) -> String {
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

/// Every shape of connection string with the secret in it, for `host:port` as user `user`.
fn shapes(host: &str, port: u16, user: &str, db: &str) -> Vec<String> {
    let odd = format!("{SECRET}/@%#?'\\ x");
    let mut out = vec![
        format!("postgres://{user}:{SECRET}@{host}:{port}/{db}"),
        format!("postgresql://{user}:{}@{host}:{port}/{db}", encode(&odd)),
        format!("postgres://{user}:{SECRET}/x@{host}:{port}/{db}"),
        format!("postgres://{user}:{SECRET}@x@{host}:{port}/{db}"),
        format!("postgres://{user}:{SECRET}#x@{host}:{port}/{db}"),
        format!("postgres://{user}:{SECRET}?x@{host}:{port}/{db}"),
        format!("postgres://{user}:{SECRET}%zz@{host}:{port}/{db}"),
        format!("postgres://{user}:{SECRET}@{host}:notaport/{db}"),
        format!("postgres://{user}@{host}:{port}/{db}?password={SECRET}"),
        format!(
            "postgres://{user}@{host}:{port}/{db}?password={}",
            encode(&odd)
        ),
        format!("postgres://{user}@{host}:{port}/{db}?password={SECRET}&bogus=1"),
        format!("postgres://{user}@{host}:{port}/{db}?bogus=1&password={SECRET}&connect_timeout=x"),
        format!("host={host} port={port} user={user} dbname={db} password={SECRET}"),
        format!("host={host} port={port} user={user} dbname={db} password='{SECRET} two\\' words'"),
        format!("host={host} port={port} user={user} dbname={db} password='{SECRET} unclosed"),
        format!("host={host} port={port} user={user} password={SECRET} bogus_option=1"),
        format!("host={host} port=notaport user={user} password={SECRET}"),
        format!("host={host} port={port} user={user} password = {SECRET} sslmode=disable"),
        // A password with a space, unquoted: its second word reads as a parameter name.
        format!("host={host} port={port} user={user} dbname={db} password=pw {SECRET}"),
        format!("host={host} port={port} user={user} password=pw {SECRET} sslmode=disable"),
        format!("host={host} port={port} user={user} password=pw {SECRET}=x"),
        format!("host={host} port={port} user={user} password=pw {SECRET}=x sslmode=prefer"),
        // A raw `&` in a URL's password parameter: its tail reads as a parameter name.
        format!("postgres://{user}@{host}:{port}/{db}?password=pw&{SECRET}"),
        format!("postgres://{user}@{host}:{port}/{db}?password=pw&{SECRET}=x&sslmode=disable"),
    ];
    for mode in [
        "disable",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
        "allow",
        "bogus",
    ] {
        out.push(format!(
            "postgres://{user}:{SECRET}@{host}:{port}/{db}?sslmode={mode}"
        ));
        out.push(format!(
            "host={host} port={port} user={user} dbname={db} password='{SECRET}' sslmode={mode}"
        ));
        out.push(format!(
            "postgres://{user}:{SECRET}@{host}:{port}/{db}?sslmode={mode}&sslrootcert=/no/such/ca.crt"
        ));
    }
    out
}

/// [issue 22] The password stays out of the TRACE logs, the errors and the `Debug` output
/// in every shape of connection string, for connects that work (trusted local server) and
/// connects that fail (wrong port, TLS the server does not offer, bad strings).
#[tokio::test(flavor = "multi_thread")]
async fn b42_no_password_reaches_a_log_an_error_or_a_debug() {
    let Some(url) = common::url() else { return };
    let buf = captured();
    tracing::trace!("capture check");
    let cfg: tokio_postgres::Config = url.parse().unwrap();
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user().unwrap_or("postgres").to_owned();
    let db = cfg.get_dbname().unwrap_or("postgres").to_owned();
    let mut shown = Vec::new();
    let mut worked = 0;
    let job = JobName::new("secret").unwrap();
    for target in [(host.as_str(), port), (host.as_str(), 1)] {
        for conn in shapes(target.0, target.1, &user, &db) {
            let options = PostgresOptions::default()
                .schema(common::fresh_schema())
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(3));
            shown.push(format!("{:?}", options.clone().listen_url(&conn)));
            match PostgresStore::connect_with(&conn, options).await {
                Ok(store) => {
                    worked += 1;
                    shown.push(format!("{store:?} {:?}", store.pool()));
                    // The store works, and its listener connects with the same string.
                    store
                        .prepare(&anarchon_core::store::Prepare {
                            jobs: vec![job.clone()],
                            instance_id: "i1".into(),
                            call_timeout: Duration::from_secs(5),
                        })
                        .await
                        .map_err(|e| shown.push(format!("{e} {e:?}")))
                        .ok();
                    let now = store.now().await.unwrap_or(0);
                    match store.claim(&claim(&job, 1_000, "i1", now)).await {
                        Ok(ClaimOutcome::Won(lease)) => shown.push(format!("{lease:?}")),
                        Ok(other) => shown.push(format!("{other:?}")),
                        Err(e) => shown.push(format!("{e} {e:?}")),
                    }
                    let _ = store.close().await;
                    common::drop_schema(&url, store.schema()).await;
                }
                Err(err) => shown.push(format!("{err} {err:?}")),
            }
        }
    }
    assert!(
        worked >= 4,
        "the trusted server took too few of the strings: {worked}"
    );
    let logs = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    assert!(logs.contains("capture check"), "the capture works");
    assert!(
        logs.contains("tokio_postgres"),
        "the driver's own logs are captured too:\n{logs}"
    );
    for text in shown.iter().chain(std::iter::once(&logs)) {
        assert!(!text.contains(SECRET), "the secret was shown:\n{text}");
    }
}
