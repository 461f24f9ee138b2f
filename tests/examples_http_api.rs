//! Slow suite (ignored unless `ANARCHON_SLOW=1 cargo xtask test`): builds and starts `examples/http-api.rs`, then asks it with
//! real HTTP requests: the health checks, the jobs with their next and last run, a job's
//! history, the auth layer in front of run-now, and run-now on the worker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use anarchon::serde_json::{self, Value};
use support::examples::build_example;

/// The running example; killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn http(addr: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, body.to_owned())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn http_api_example_serves_jobs_history_health_and_run_now() {
    let exe = build_example("http-api", &["web"]);
    let dir = std::env::temp_dir().join(format!("anarchon-http-api-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("jobs.db");
    let mut child = Command::new(exe)
        .args(["--listen", "127.0.0.1:0", "--for", "120", "--db"])
        .arg(&db)
        .env("API_TOKEN", "let-me-in")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().unwrap();
    let _server = Server(child);
    let mut lines = BufReader::new(stdout);
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    // Keep reading, so the example never writes into a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
    let addr = first
        .strip_prefix("listening on http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();

    assert_eq!(http(&addr, "GET", "/healthz", &[]), (200, "ok\n".into()));
    let (status, body) = http(&addr, "GET", "/readyz", &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["scheduler"]["healthy"], true);

    // The worker catches up each job's current slot on start: wait for a last run of each.
    let deadline = Instant::now() + Duration::from_secs(15);
    let jobs = loop {
        let (status, body) = http(&addr, "GET", "/api/jobs", &[]);
        assert_eq!(status, 200, "{body}");
        let jobs = json(&body);
        let all_ran = jobs
            .as_array()
            .is_some_and(|all| all.len() == 3 && all.iter().all(|j| j["last_status"].is_string()));
        if all_ran {
            break jobs;
        }
        assert!(Instant::now() < deadline, "jobs never all ran: {jobs}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cleanup", "heartbeat", "report"]);
    assert!(
        jobs.as_array()
            .unwrap()
            .iter()
            .all(|j| j["next_run"].is_string()),
        "{jobs}"
    );

    // The newest run may still be going (the jobs keep firing): judge the newest finished one.
    let finished = loop {
        let (status, body) = http(&addr, "GET", "/api/jobs/cleanup/history?n=5", &[]);
        assert_eq!(status, 200, "{body}");
        let history = json(&body);
        let done = history
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["status"] != "running").cloned());
        if let Some(run) = done {
            break run;
        }
        assert!(
            Instant::now() < deadline,
            "no finished cleanup run: {history}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(finished["status"], "failed", "{finished}");
    assert_eq!(finished["error"], "the archive volume is full");

    // The auth layer guards run-now; with the token it runs on the worker.
    let (status, _) = http(&addr, "POST", "/api/jobs/report/run?wait=true", &[]);
    assert_eq!(status, 401);
    let (status, body) = http(
        &addr,
        "POST",
        "/api/jobs/report/run?wait=true",
        &["Authorization: Bearer let-me-in"],
    );
    assert_eq!(status, 200, "{body}");
    let run = json(&body);
    assert_eq!(
        (&run["reason"], &run["status"], &run["instance_id"]),
        (
            &Value::from("manual"),
            &Value::from("succeeded"),
            &Value::from("worker-1")
        )
    );

    let (status, page) = http(&addr, "GET", "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains("href=\"/jobs/report\""), "{page}");
    let _ = std::fs::remove_dir_all(&dir);
}
