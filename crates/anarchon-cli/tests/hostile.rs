//! The `anarchon` binary against hostile input: it never writes into a file it reads (a
//! foreign SQLite file, an empty one, a `--table` typo on a real store), it writes store text
//! to the terminal with control and bidi characters escaped, and it never echoes a
//! `--store` value that may hold a password.

use std::path::Path;

use anarchon_core::JobName;
use anarchon_core::store::HistoryStore;
use anarchon_core::store::{Reason, Retention, RunRecord, RunStatus};
use anarchon_sqlite::SqliteStore;

/// What one run of the binary printed.
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(args: &[&str]) -> Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_anarchon"))
        .args(args)
        .env_remove("ANARCHON_STORE")
        .env_remove("LIBSQL_AUTH_TOKEN")
        .output()
        .expect("run the anarchon binary");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A file's name, length and a hash of its bytes.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FileState {
    name: String,
    len: usize,
    hash: u64,
}

/// Every file of `dir`, sorted by name: the state a refused run must keep.
fn snapshot(dir: &Path) -> Vec<FileState> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            use std::hash::{Hash, Hasher};
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap();
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            FileState {
                name: e.file_name().to_string_lossy().into_owned(),
                len: bytes.len(),
                hash: hasher.finish(),
            }
        })
        .collect();
    files.sort();
    files
}

/// SQLite's journal mode of the file, read without changing it.
fn journal_mode(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

fn foreign_db(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
         INSERT INTO users (name) VALUES ('ada'), ('grace');",
    )
    .unwrap();
}

#[test]
fn cli_refuses_a_foreign_sqlite_file_and_leaves_it_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("some-app.db");
    foreign_db(&db);
    let before = snapshot(dir.path());
    for command in [&["jobs"][..], &["runs"], &["history", "sync"]] {
        let mut args = vec!["--store", db.to_str().unwrap()];
        args.extend_from_slice(command);
        let out = cli(&args);
        assert_eq!(out.code, 2, "{command:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("is not an anarchon store")
                && out.stderr.contains("some-app.db")
                && out.stderr.contains("anarchon_runs_meta")
                && out.stderr.contains("changed nothing"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(
        snapshot(dir.path()),
        before,
        "the file or its folder changed"
    );
    assert_eq!(journal_mode(&db), "delete", "switched to WAL");
}

#[test]
fn cli_refuses_an_empty_file_and_a_missing_one_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let out = cli(&["--store", empty.to_str().unwrap(), "jobs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no anarchon tables"), "{}", out.stderr);
    let missing = dir.path().join("missing.db");
    let out = cli(&["--store", missing.to_str().unwrap(), "runs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("no SQLite database file"),
        "{}",
        out.stderr
    );
    let after = snapshot(dir.path());
    assert_eq!(after.len(), 1, "a file was created: {after:?}");
    assert_eq!((after[0].name.as_str(), after[0].len), ("empty.db", 0));
}

#[test]
fn cli_refuses_a_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database, just text\n".repeat(200)).unwrap();
    let before = snapshot(dir.path());
    let out = cli(&["--store", text.to_str().unwrap(), "jobs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("not a SQLite database"),
        "{}",
        out.stderr
    );
    assert_eq!(snapshot(dir.path()), before);
}

fn record(job: &str, instance: &str, error: &str) -> RunRecord {
    RunRecord {
        job: JobName::new(job).unwrap(),
        slot: 1_796_061_600_000,
        scheduled_at: 1_796_061_600_000,
        instance_id: instance.to_owned(),
        manual: true,
        attempt: 1,
        reason: Reason::Manual,
        status: RunStatus::Failed,
        fence: 0,
        started_at: 1_796_061_600_000,
        finished_at: Some(1_796_061_601_000),
        error: Some(error.to_owned()),
    }
}

/// A real store with one run of `sync` whose instance id and error carry terminal escapes.
async fn real_store(path: &Path) {
    let store = SqliteStore::connect(path).await.unwrap();
    store
        .record_manual(
            &record(
                "sync",
                "node\u{1b}]0;owned\u{7}-\u{202e}1",
                "boom \u{1b}[2J\u{1b}[31mred\u{9b}1m \u{2066}x\u{2069} \u{200f}",
            ),
            Retention::default(),
        )
        .await
        .unwrap();
    anarchon_core::store::Store::close(&store).await.unwrap();
}

#[tokio::test]
async fn cli_refuses_a_table_typo_on_a_real_store_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.db");
    real_store(&db).await;
    let before = snapshot(dir.path());
    let out = cli(&[
        "--store",
        db.to_str().unwrap(),
        "--table",
        "anarchon_rnus",
        "jobs",
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("anarchon_rnus_meta") && out.stderr.contains("--table anarchon_runs"),
        "the error names the missing table and the prefix the file has: {}",
        out.stderr
    );
    // The store is in WAL mode: SQLite's read-only reader needs the shared-memory index
    // (`-shm`) and leaves an empty `-wal` beside it, as any reader of a WAL file does. The
    // database itself is byte-identical.
    let after: Vec<FileState> = snapshot(dir.path())
        .into_iter()
        .filter(|f| !(f.name.ends_with("-shm") || f.name.ends_with("-wal") && f.len == 0))
        .collect();
    assert_eq!(after, before, "a typo wrote into the store");
    let out = cli(&[
        "--store",
        db.to_str().unwrap(),
        "--table",
        "bad prefix!",
        "jobs",
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("invalid --table"), "{}", out.stderr);
    // The right prefix reads, and reading leaves the database file as it was.
    let db_before = std::fs::read(&db).unwrap();
    let out = cli(&["--store", db.to_str().unwrap(), "jobs", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("\"sync\""), "{}", out.stdout);
    assert!(
        std::fs::read(&db).unwrap() == db_before,
        "reading changed the file"
    );
}

/// Whether `text` holds a character a terminal would obey or reorder by.
fn has_unsafe(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[tokio::test]
async fn cli_tables_escape_control_and_bidi_characters_of_store_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.db");
    real_store(&db).await;
    let path = db.to_str().unwrap();
    for args in [
        vec!["--store", path, "jobs"],
        vec!["--store", path, "history", "sync"],
        vec!["--store", path, "inspect", "sync", "1796061600000"],
    ] {
        let out = cli(&args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(!has_unsafe(&out.stdout), "{args:?}: {:?}", out.stdout);
        assert!(
            out.stdout.contains("node\\u{1b}]0;owned\\u{7}-\\u{202e}1"),
            "{args:?}: the instance is shown escaped: {}",
            out.stdout
        );
    }
    let out = cli(&["--store", path, "history", "sync"]);
    assert!(
        out.stdout
            .contains("boom \\u{1b}[2J\\u{1b}[31mred\\u{9b}1m \\u{2066}x\\u{2069} \\u{200f}"),
        "{}",
        out.stdout
    );
    // JSON keeps the text as it is (escaped the JSON way).
    let out = cli(&["--store", path, "history", "sync", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        json["runs"][0]["instance_id"],
        "node\u{1b}]0;owned\u{7}-\u{202e}1"
    );
    assert!(
        !out.stdout.contains(['\u{1b}', '\u{7}']),
        "{:?}",
        out.stdout
    );
}

#[test]
fn cli_never_echoes_a_store_value_that_may_hold_a_password() {
    for (store, secret) in [
        (
            "host=nowhere.invalid user=app password=hunter2x",
            "hunter2x",
        ),
        (
            "host=nowhere.invalid password='two words pw'",
            "two words pw",
        ),
        ("password = \"dq-secret\" host=nowhere.invalid", "dq-secret"),
        ("postgres:user:pw12345@nowhere.invalid", "pw12345"),
        ("postgres:user:pw12345@nowhere.invalid/db", "pw12345"),
        ("user:pw67890@nowhere.invalid", "pw67890"),
        ("nosuchdir/app.db?password=qs-secret", "qs-secret"),
        ("sqlite://u:pw-in-sqlite@x/app.db", "pw-in-sqlite"),
        ("mysql://u:my-secret@h/db", "my-secret"),
        ("redis://:r3d1s-pw@nowhere.invalid:1", "r3d1s-pw"),
    ] {
        let out = cli(&["--store", store, "--timeout", "2s", "jobs"]);
        assert_ne!(out.code, 0, "{store}");
        assert!(
            !out.stderr.contains(secret) && !out.stdout.contains(secret),
            "{store}: {}",
            out.stderr
        );
    }
}

#[test]
fn cli_reads_a_key_value_postgres_string_as_postgres() {
    let out = cli(&[
        "--store",
        "host=nowhere.invalid user=app password=kv-secret-1",
        "--timeout",
        "2s",
        "jobs",
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("postgres") && !out.stderr.contains("no SQLite database file"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn cli_refuses_missing_postgres_tables_without_creating_them() {
    let Some(url) = anarchon_core::testkit::server_url("ANARCHON_POSTGRES_URL") else {
        return;
    };
    let table = format!("cli_typo_{}", std::process::id());
    let out = cli(&["--store", &url, "--table", &table, "jobs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("{table}_meta")) && out.stderr.contains("--table"),
        "{}",
        out.stderr
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname LIKE $1",
            &[&format!("{table}%")],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0, "the command created tables");
}

#[tokio::test]
async fn cli_bounds_the_timeout_instead_of_panicking_in_a_driver() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.db");
    real_store(&db).await;
    for timeout in ["100d", "1h1ms", "2562047788015215h"] {
        let out = cli(&[
            "--store",
            db.to_str().unwrap(),
            "--timeout",
            timeout,
            "jobs",
        ]);
        assert_eq!(out.code, 2, "{timeout}: {}", out.stderr);
        assert!(
            out.stderr.contains("1ms to 1h") || out.stderr.contains("too large"),
            "{}",
            out.stderr
        );
    }
    let out = cli(&["--store", db.to_str().unwrap(), "--timeout", "1h", "jobs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// Asserts the command refused a prefix that holds no store: exit 2, and a message that
/// names the store, the prefix and that nothing was created.
fn refused_prefix(out: &Output, store: &str, prefix: &str) {
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains(&format!("holds no anarchon {store} store under the prefix"))
            && out.stderr.contains(prefix)
            && out.stderr.contains("it created nothing")
            && out.stderr.contains("--prefix"),
        "{}",
        out.stderr
    );
}

/// RabbitMQ: reading a prefix with no store declares no queue (asked with a passive
/// declare, which creates nothing) and says so; reading a real store declares nothing
/// either, not even a missing job's history queue.
#[tokio::test]
async fn cli_never_declares_a_rabbitmq_queue_and_names_a_missing_prefix() {
    use anarchon_amqp::amqprs::channel::{QueueDeclareArguments, QueueDeleteArguments};
    use anarchon_amqp::amqprs::connection::{Connection, OpenConnectionArguments};
    use anarchon_core::store::Store;
    let Some(url) = anarchon_core::testkit::server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let prefix = format!("anarchon-cli-ro-{:08x}", rand::random::<u32>());
    for args in [
        vec!["jobs"],
        vec!["history", "sync"],
        vec!["runs"],
        vec!["inspect", "sync", "1000"],
    ] {
        let mut all = vec!["--store", url.as_str(), "--prefix", prefix.as_str()];
        all.extend(args);
        refused_prefix(&cli(&all), "RabbitMQ", &prefix);
    }
    // The test servers use RabbitMQ's default user on loopback.
    let port = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.split('/').next()?.parse().ok())
        .unwrap_or(5672);
    let conn = Connection::open(&OpenConnectionArguments::new(
        "127.0.0.1",
        port,
        "guest",
        "guest",
    ))
    .await
    .unwrap();
    let exists = async |queue: &str| {
        let ch = conn.open_channel(None).await.unwrap();
        ch.queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
            .await
            .is_ok()
    };
    for queue in [format!("{prefix}.jobs"), format!("{prefix}.history.sync")] {
        assert!(!exists(&queue).await, "the command declared {queue}");
    }

    // A real store: read, and still nothing declared.
    let job = JobName::new("sync").unwrap();
    let store = anarchon_amqp::AmqpStore::connect_with(
        &url,
        anarchon_amqp::AmqpOptions::default().prefix(prefix.clone()),
    )
    .await
    .unwrap();
    store
        .prepare(&anarchon_core::store::Prepare {
            jobs: vec![job.clone()],
            instance_id: "t".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    store.close().await.unwrap();
    let jobs = cli(&["--store", &url, "--prefix", &prefix, "jobs"]);
    assert_eq!(jobs.code, 0, "{}", jobs.stderr);
    assert!(jobs.stdout.contains("sync"), "{}", jobs.stdout);
    let history = cli(&["--store", &url, "--prefix", &prefix, "history", "sync"]);
    assert_eq!(history.code, 0, "{}", history.stderr);
    assert!(exists(&format!("{prefix}.jobs")).await);
    assert!(
        !exists(&format!("{prefix}.history.sync")).await,
        "reading the history of a job that never ran declared its queue"
    );
    let ch = conn.open_channel(None).await.unwrap();
    let _ = ch
        .queue_delete(QueueDeleteArguments::new(&format!("{prefix}.jobs")))
        .await;
    let _ = conn.close().await;
}

/// NATS: reading a prefix with no stream creates none (asked with a stream info request)
/// and says so.
#[tokio::test]
async fn cli_never_creates_a_nats_stream_and_names_a_missing_prefix() {
    let Some(url) = anarchon_core::testkit::server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let prefix = format!("anarchon-cli-ro-{:08x}", rand::random::<u32>());
    for args in [vec!["jobs"], vec!["history", "sync"], vec!["runs"]] {
        let mut all = vec!["--store", url.as_str(), "--prefix", prefix.as_str()];
        all.extend(args);
        refused_prefix(&cli(&all), "NATS", &prefix);
    }
    let client = anarchon_nats::async_nats::connect(&url).await.unwrap();
    let js = anarchon_nats::async_nats::jetstream::new(client);
    assert!(
        js.get_stream(&prefix).await.is_err(),
        "the command created the stream {prefix}"
    );
    // A stream of that name is read (and not changed).
    let store = anarchon_nats::NatsStore::connect_with(
        &url,
        anarchon_nats::NatsOptions::default()
            .prefix(prefix.clone())
            .storage(anarchon_nats::Storage::Memory),
    )
    .await
    .unwrap();
    use anarchon_core::store::Store;
    store
        .prepare(&anarchon_core::store::Prepare {
            jobs: vec![JobName::new("sync").unwrap()],
            instance_id: "t".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    let messages = |js: anarchon_nats::async_nats::jetstream::Context, prefix: String| async move {
        let mut stream = js.get_stream(&prefix).await.unwrap();
        stream.info().await.unwrap().state.messages
    };
    let before = messages(js.clone(), prefix.clone()).await;
    let jobs = cli(&["--store", &url, "--prefix", &prefix, "jobs"]);
    assert_eq!(jobs.code, 0, "{}", jobs.stderr);
    assert!(jobs.stdout.contains("sync"), "{}", jobs.stdout);
    assert_eq!(messages(js.clone(), prefix.clone()).await, before);
    let _ = js.delete_stream(&prefix).await;
    store.close().await.unwrap();
}

/// Redis: a `--prefix` typo is refused (exit 2) instead of answering "no jobs", naming the
/// prefix the server does hold, and the command writes no key under either.
#[tokio::test]
async fn cli_names_a_redis_prefix_typo_and_the_prefixes_it_sees() {
    use anarchon_core::store::Store;
    use anarchon_redis::fred::interfaces::ClientLike;
    use anarchon_redis::fred::types::{ClusterHash, CustomCommand, Value};
    let Some(url) = anarchon_core::testkit::server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    // Database 9: the default one holds every other test's keys, more than the CLI scans.
    let url = if url.trim_end_matches('/').splitn(4, '/').count() == 3 {
        format!("{}/9", url.trim_end_matches('/'))
    } else {
        url
    };
    let prefix = format!("anarchon-cli-ro-{:08x}:", rand::random::<u32>());
    let typo = format!("{}x:", prefix.trim_end_matches(':'));
    let store = anarchon_redis::RedisStore::connect_with(
        &url,
        anarchon_redis::RedisOptions::default().prefix(prefix.clone()),
    )
    .await
    .unwrap();
    store
        .prepare(&anarchon_core::store::Prepare {
            jobs: vec![JobName::new("sync").unwrap()],
            instance_id: "t".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    let keys = async |pattern: String| -> Vec<String> {
        let found: Vec<Value> = store
            .client()
            .custom(
                CustomCommand::new_static("KEYS", ClusterHash::Random, false),
                vec![pattern],
            )
            .await
            .unwrap();
        let mut found: Vec<String> = found.into_iter().filter_map(|k| k.into_string()).collect();
        found.sort();
        found
    };
    let ours = keys(format!("{prefix}*")).await;
    assert!(ours.contains(&format!("{prefix}meta")), "{ours:?}");
    for args in [vec!["jobs"], vec!["history", "sync"], vec!["runs"]] {
        let mut all = vec!["--store", url.as_str(), "--prefix", typo.as_str()];
        all.extend(args);
        let out = cli(&all);
        refused_prefix(&out, "Redis", &typo);
        assert!(
            out.stderr
                .contains(&format!("stores under the prefix \"{prefix}\"")),
            "the prefix the server holds is not named: {}",
            out.stderr
        );
    }
    assert!(keys(format!("{typo}*")).await.is_empty());
    assert_eq!(keys(format!("{prefix}*")).await, ours);
    // The right prefix reads.
    let out = cli(&["--store", &url, "--prefix", &prefix, "jobs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("sync"), "{}", out.stdout);
    let _: i64 = store
        .client()
        .custom(
            CustomCommand::new_static("DEL", ClusterHash::FirstKey, false),
            ours,
        )
        .await
        .unwrap();
    store.close().await.unwrap();
}
