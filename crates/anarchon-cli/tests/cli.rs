//! The `anarchon` binary against real stores: real schedulers write real history (runs, a
//! blocked run, a crash and a takeover), then the command's tables and JSON are checked.
//! SQLite always runs; PostgreSQL and Redis read `ANARCHON_POSTGRES_URL` and
//! `ANARCHON_REDIS_URL` (skipped with a SKIP line without them, a failure under
//! `ANARCHON_REQUIRE_SERVERS=1`). libSQL runs against `ANARCHON_LIBSQL_URL` where it is set,
//! else against the Hrana test double of `anarchon-libsql` (`tests/hrana_double.py`, not
//! sqld: it checks the command's libSQL client path), and prints a SKIP line without python3.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anarchon_core::store::LeaseStore;
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{HandlerError, JobName, Leased, RunStatus, Scheduler};
use serde_json::Value;

const LEASE: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_millis(500);

/// What one run of the binary printed.
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Output {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", self.stdout))
    }
}

/// Runs `anarchon` with `args` (no `ANARCHON_STORE` unless `env_store` is given).
async fn cli(args: &[&str], env_store: Option<&str>) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_anarchon"));
    command.args(args).env_remove("ANARCHON_STORE");
    if let Some(store) = env_store {
        command.env("ANARCHON_STORE", store);
    }
    let out = command.output().await.expect("run the anarchon binary");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `anarchon` and expects success.
async fn ok(args: &[&str]) -> Output {
    let out = cli(args, None).await;
    assert_eq!(
        out.code, 0,
        "anarchon {args:?} failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    out
}

fn node(store: Arc<dyn LeaseStore>, id: &str) -> Scheduler<Leased> {
    Scheduler::leased_shared(store)
        .instance_id(id)
        .lease(LEASE)
        .heartbeat(HEARTBEAT)
        .jitter(Duration::ZERO)
        .build()
        .expect("a scheduler")
}

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The whole story on one store: `open` opens a new connection to it each call, and `args`
/// are the CLI's store arguments (`--store URL` and options).
async fn scenario<F, Fut>(open: F, args: &[&str], store_shown: &str)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Arc<dyn LeaseStore>>,
{
    let tick = unique_job("tick");
    let slow = unique_job("slow");
    let with = |more: &[&str]| -> Vec<String> {
        args.iter()
            .chain(more)
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
    };
    let run = |more: Vec<String>| async move {
        let refs: Vec<&str> = more.iter().map(String::as_str).collect();
        ok(&refs).await
    };

    // Instance a: `tick` every second, and `slow`, whose handler blocks.
    let a = node(open().await, "node-a");
    a.every(tick.as_str(), "1s")
        .handler(|_| async { Ok::<(), HandlerError>(()) })
        .unwrap();
    a.every(slow.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(|_| async {
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok::<(), HandlerError>(())
        })
        .unwrap();
    a.start().await.unwrap();
    let reader = open().await;
    let succeeded = |job: JobName, n: usize| {
        let reader = reader.clone();
        move || {
            let reader = reader.clone();
            let job = job.clone();
            async move {
                reader.history(&job, 20).await.is_ok_and(|h| {
                    h.iter()
                        .filter(|r| r.status == RunStatus::Succeeded)
                        .count()
                        >= n
                })
            }
        }
    };
    wait_until(
        "two runs of tick",
        Duration::from_secs(30),
        succeeded(tick.clone(), 2),
    )
    .await;
    wait_until("slow to start", Duration::from_secs(30), || {
        let reader = reader.clone();
        let slow = slow.clone();
        async move { reader.history(&slow, 5).await.is_ok_and(|h| !h.is_empty()) }
    })
    .await;

    // `runs` shows the blocked run: owner, attempt, lease left.
    let runs = run(with(&["runs", "--json"])).await.json();
    assert_eq!(runs["store"], store_shown);
    assert_eq!(runs["leases"], true);
    let line = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job"] == slow.as_str())
        .unwrap_or_else(|| panic!("no unfinished run of {slow}: {runs:#}"));
    assert_eq!(line["owner"], "node-a", "{line:#}");
    assert_eq!(line["attempt"], 1);
    assert_eq!(line["status"], "running");
    let left = line["lease_left_ms"].as_i64().unwrap();
    assert!(left > 0 && left <= LEASE.as_millis() as i64, "{line:#}");
    let table = run(with(&["runs"])).await.stdout;
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("JOB") && header.contains("OWNER") && header.contains("LEASE LEFT"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with(slow.as_str()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("running") && row.contains("node-a"), "{row}");

    // Instance b watches `slow`; a crashes; b takes the run over as attempt 2.
    let b = node(open().await, "node-b");
    b.every(slow.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(|_| async { Ok::<(), HandlerError>(()) })
        .unwrap();
    b.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.crash();
    wait_until(
        "the takeover of slow",
        Duration::from_secs(30),
        succeeded(slow.clone(), 1),
    )
    .await;

    // `jobs`: both jobs with their last run.
    let jobs = run(with(&["jobs", "--json"])).await.json();
    let find = |name: &JobName| {
        jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in {jobs:#}"))
            .clone()
    };
    let last = &find(&slow)["last_run"];
    assert_eq!(
        (
            &last["instance_id"],
            &last["attempt"],
            &last["reason"],
            &last["status"]
        ),
        (
            &Value::from("node-b"),
            &Value::from(2),
            &Value::from("takeover"),
            &Value::from("succeeded")
        ),
        "{last:#}"
    );
    assert_eq!(find(&tick)["last_run"]["instance_id"], "node-a");
    let table = run(with(&["jobs"])).await.stdout;
    assert!(table.starts_with("JOB"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with(slow.as_str()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains("succeeded") && row.contains("takeover") && row.contains("node-b"),
        "{row}"
    );

    // `history -n 2`: tick's two newest runs, newest first.
    let history = run(with(&["history", tick.as_str(), "-n", "2", "--json"]))
        .await
        .json();
    let records = history["runs"].as_array().unwrap();
    assert_eq!(records.len(), 2, "{history:#}");
    let slot = |r: &Value| {
        r["slot"]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
    };
    assert!(slot(&records[0]).unwrap() > slot(&records[1]).unwrap());
    let table = run(with(&["history", tick.as_str(), "-n", "2"]))
        .await
        .stdout;
    assert_eq!(table.lines().count(), 3, "a header and two runs: {table}");
    assert!(table.lines().nth(1).unwrap().contains("node-a"), "{table}");

    // `inspect`: both attempts of slow's slot, by RFC 3339 and by epoch ms.
    let slot_ms = last["slot"]
        .as_str()
        .unwrap()
        .parse::<chrono::DateTime<chrono::Utc>>()
        .unwrap()
        .timestamp_millis();
    let inspect = run(with(&[
        "inspect",
        slow.as_str(),
        &slot_ms.to_string(),
        "--json",
    ]))
    .await
    .json();
    let attempts = inspect["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{inspect:#}");
    assert_eq!(
        (&attempts[0]["attempt"], &attempts[0]["instance_id"]),
        (&Value::from(1), &Value::from("node-a"))
    );
    assert_eq!(attempts[0]["status"], "interrupted", "{inspect:#}");
    assert_eq!(
        (
            &attempts[1]["attempt"],
            &attempts[1]["instance_id"],
            &attempts[1]["reason"]
        ),
        (
            &Value::from(2),
            &Value::from("node-b"),
            &Value::from("takeover")
        )
    );
    assert_eq!(inspect["now"]["status"], "succeeded", "{inspect:#}");
    let rfc3339 = last["slot"].as_str().unwrap().to_owned();
    let table = run(with(&["inspect", slow.as_str(), &rfc3339]))
        .await
        .stdout;
    assert!(
        table.contains("interrupted") && table.contains("takeover") && table.contains("node-b"),
        "{table}"
    );
    assert!(table.contains("now: succeeded attempt 2"), "{table}");

    // The taken-over run is finished: `runs` no longer lists it.
    let runs = run(with(&["runs", "--json"])).await.json();
    assert!(
        !runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["job"] == slow.as_str()),
        "{runs:#}"
    );

    b.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reads_jobs_history_runs_and_a_takeover_from_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let file = path.to_str().unwrap().to_owned();
    let open = || {
        let path = path.clone();
        async move {
            Arc::new(anarchon_sqlite::SqliteStore::connect(path).await.unwrap())
                as Arc<dyn LeaseStore>
        }
    };
    let url = format!("sqlite://{file}");
    scenario(open, &["--store", &url], &url).await;

    // ANARCHON_STORE is the default for --store, and a bare path is a SQLite file.
    let out = cli(&["jobs"], Some(&file)).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("JOB"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reads_jobs_history_runs_and_a_takeover_from_postgres() {
    let Some(url) = server_url("ANARCHON_POSTGRES_URL") else {
        return;
    };
    // The local server trusts its users, so a password in the URL is ignored by the server
    // but must never appear in the output.
    let url = with_password(&url, "s3cret-pw");
    let schema = format!("anarchon_cli_{:08x}", rand::random::<u32>());
    let open = || {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let options = anarchon_postgres::PostgresOptions::default().schema(schema);
            Arc::new(
                anarchon_postgres::PostgresStore::connect_with(&url, options)
                    .await
                    .unwrap(),
            ) as Arc<dyn LeaseStore>
        }
    };
    let shown = anarchon_core::redact_url(&url);
    assert!(!shown.contains("s3cret-pw"));
    scenario(open, &["--store", &url, "--schema", &schema], &shown).await;

    // Drop the test's schema.
    let store = anarchon_postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    let client = store.pool().get().await.unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reads_jobs_history_runs_and_a_takeover_from_redis() {
    let Some(url) = server_url("ANARCHON_REDIS_URL") else {
        return;
    };
    let prefix = format!("anarchon-cli-test-{:08x}:", rand::random::<u32>());
    let open = || {
        let (url, prefix) = (url.clone(), prefix.clone());
        async move {
            let options = anarchon_redis::RedisOptions::default().prefix(prefix);
            Arc::new(
                anarchon_redis::RedisStore::connect_with(&url, options)
                    .await
                    .unwrap(),
            ) as Arc<dyn LeaseStore>
        }
    };
    let shown = anarchon_core::redact_url(&url);
    scenario(open, &["--store", &url, "--prefix", &prefix], &shown).await;
}

/// A Hrana test double on a free port (killed on drop), or `None` after a SKIP line.
struct HranaDouble {
    url: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for HranaDouble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hrana_double() -> Option<HranaDouble> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../anarchon-libsql/tests/hrana_double.py"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new("python3")
        .arg(script)
        .arg("--db")
        .arg(dir.path().join("libsql.db"))
        .arg("--port")
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(child) = child else {
        eprintln!(
            "SKIP libSQL: neither ANARCHON_LIBSQL_URL nor python3 (for the Hrana test double)"
        );
        return None;
    };
    let double = HranaDouble {
        url: format!("http://127.0.0.1:{port}"),
        child,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            eprintln!("SKIP libSQL: the Hrana test double did not listen within 10 s");
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(double)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reads_jobs_history_runs_and_a_takeover_from_libsql() {
    // A libSQL server is optional, as in anarchon-libsql's own tests.
    let (url, _double) = match std::env::var("ANARCHON_LIBSQL_URL") {
        Ok(url) if !url.trim().is_empty() => (url, None),
        _ => match hrana_double() {
            Some(double) => {
                eprintln!("NOTE libSQL runs against the Hrana test double (not sqld)");
                (double.url.clone(), Some(double))
            }
            None => return,
        },
    };
    let token = std::env::var("ANARCHON_LIBSQL_AUTH_TOKEN").unwrap_or_default();
    let table = format!("anarchon_cli_{:08x}", rand::random::<u32>());
    let open = || {
        let (url, table, token) = (url.clone(), table.clone(), token.clone());
        async move {
            let options = anarchon_libsql::LibsqlOptions::default()
                .table(table)
                .auth_token(token);
            Arc::new(
                anarchon_libsql::LibsqlStore::connect_with(url, options)
                    .await
                    .unwrap(),
            ) as Arc<dyn LeaseStore>
        }
    };
    let shown = anarchon_core::redact_url(&url);
    let mut args = vec!["--store", url.as_str(), "--table", table.as_str()];
    if !token.is_empty() {
        args.extend(["--auth-token", token.as_str()]);
    }
    scenario(open, &args, &shown).await;

    // A table typo is refused by name, and the command creates nothing on the server.
    let typo = format!("{table}_typo");
    let mut args = vec!["--store", url.as_str(), "--table", typo.as_str(), "jobs"];
    if !token.is_empty() {
        args.extend(["--auth-token", token.as_str()]);
    }
    let out = cli(&args, None).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("{typo}_meta"))
            && out.stderr.contains(&format!("--table {table}")),
        "{}",
        out.stderr
    );
    let db = libsql::Builder::new_remote(url.clone(), token.clone())
        .build()
        .await
        .unwrap();
    let conn = db.connect().unwrap();
    let mut rows = conn
        .query(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE ?1",
            [format!("{typo}%")],
        )
        .await
        .unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get::<i64>(0).unwrap(), 0, "the command created tables");
}

/// `postgres://user@host/db` with `:password` added to the user (unchanged if it has one).
fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) if !user.contains(':') => {
            format!("{scheme}://{user}:{password}@{host}")
        }
        _ => url.to_owned(),
    }
}

#[tokio::test]
async fn store_errors_exit_1_and_never_show_the_password() {
    for url in [
        "postgres://app:pg-s3cret@127.0.0.1:1/app",
        "redis://:redis-s3cret@127.0.0.1:1",
    ] {
        let out = cli(&["--store", url, "--timeout", "3s", "jobs"], None).await;
        assert_eq!(out.code, 1, "{url}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            !out.stderr.contains("s3cret") && out.stderr.contains("***"),
            "{url}: {}",
            out.stderr
        );
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
    }
}

#[tokio::test]
async fn bad_input_exits_2_with_a_helpful_message() {
    let cases: [(&[&str], &[&str]); 9] = [
        (
            &["--store", "mysql://u:my-s3cret@h/db", "jobs"],
            &["unknown store scheme \"mysql\"", "postgres://"],
        ),
        (
            &["next", "61 * * * *"],
            &["invalid schedule", "minute field \"61\""],
        ),
        (
            &["next", "0 3 * * *", "--tz", "Mars/Olympus"],
            &["\"Mars/Olympus\"", "IANA"],
        ),
        (&["next", "10x"], &["\"10x\""]),
        (&["jobs"], &["no store given", "ANARCHON_STORE"]),
        (
            &["--store", "/nonexistent/jobs.db", "jobs"],
            &["no SQLite database file", "/nonexistent/jobs.db"],
        ),
        (
            &["--store", "jobs.db", "history", "no spaces"],
            &["invalid job name \"no spaces\""],
        ),
        (
            &["--store", "jobs.db", "inspect", "sync", "yesterday"],
            &["invalid slot \"yesterday\"", "RFC 3339"],
        ),
        (&["next", "5m", "--count", "0"], &["--count"]),
    ];
    for (args, needles) in cases {
        let out = cli(args, None).await;
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        for needle in needles {
            assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        }
        assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    }
}

#[tokio::test]
async fn next_shows_the_dst_rule_of_each_instant() {
    let out = ok(&[
        "next",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-03-27T12:00:00Z",
        "--count",
        "3",
    ])
    .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].contains("wall-clock"), "{}", out.stdout);
    assert!(lines[1].starts_with('#') && lines[1].contains("DST"));
    assert!(
        lines[3].contains("2026-03-29T01:00:00.000Z")
            && lines[3].contains("2026-03-29T03:00:00.000+02:00")
            && lines[3].contains("moved-forward"),
        "{}",
        out.stdout
    );
    assert!(!lines[2].contains("moved") && !lines[4].contains("moved"));

    let out = ok(&[
        "next",
        "30 * * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-10-25T00:00:00Z",
        "--count",
        "3",
        "--json",
    ])
    .await;
    let json = out.json();
    let rules: Vec<Value> = json["instants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["dst"]["rule"].clone())
        .collect();
    assert_eq!(
        rules,
        [
            Value::from("first-pass"),
            Value::from("second-pass"),
            Value::Null
        ]
    );
    assert_eq!(json["rules"], "elapsed-time");

    let out = ok(&["next", "10s", "--count", "2", "--json"]).await;
    let json = out.json();
    let ms: Vec<i64> = json["instants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["at_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(ms[0] % 10_000, 0);
    assert_eq!(ms[1] - ms[0], 10_000);
}

#[tokio::test]
async fn a_claim_only_store_says_it_has_no_leases() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    // The command reads only a store that exists: an application's, here one of the test.
    use anarchon_core::store::Store;
    let prefix = format!("anarchon-cli-{:08x}", rand::random::<u32>());
    let store = anarchon_amqp::AmqpStore::connect_with(
        &url,
        anarchon_amqp::AmqpOptions::default().prefix(prefix.clone()),
    )
    .await
    .unwrap();
    store
        .prepare(&anarchon_core::store::Prepare {
            jobs: vec![],
            instance_id: "t".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    let out = ok(&["--store", &url, "--prefix", &prefix, "runs"]).await;
    assert!(
        out.stdout.contains("claim-only") && out.stdout.contains("no leases"),
        "{}",
        out.stdout
    );
    let json = ok(&["--store", &url, "--prefix", &prefix, "runs", "--json"])
        .await
        .json();
    assert_eq!(json["leases"], false);
    assert_eq!(json["runs"], Value::Array(vec![]));
    store.close().await.unwrap();
}
