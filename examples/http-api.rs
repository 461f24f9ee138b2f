//! An HTTP API and dashboard beside a worker: list jobs with their next and last run, read
//! history, see unfinished runs, run a job now on the worker, and answer `/healthz` and
//! `/readyz` from the scheduler's health and watchdog.
//!
//! ```sh
//! cargo run --example http-api --features web    # then open http://127.0.0.1:8080/
//! ```
//!
//! Options: `--listen ADDR` (default `127.0.0.1:8080`; port 0 picks a free one), `--db PATH`
//! (default: a new file in a temporary folder), `--for SECS` (stop by itself; default: at
//! Ctrl-C). With `API_TOKEN` set, every request other than a GET needs `Authorization:
//! Bearer $API_TOKEN`: the dashboard has no auth of its own, so this is where yours goes.
//!
//! # Design: who runs the jobs
//! The HTTP side registers no job: it reads the shared store through a connection of its
//! own, as an API server in a separate process would. The jobs belong to a **worker**: a
//! scheduler that holds their handlers. Run-now runs a handler, so it must go to a scheduler
//! that has it; here the worker runs in the same process and the dashboard is given its
//! handle (`Dashboard::scheduler`), which also backs `/readyz` and the next-run column. With
//! workers in other processes, either mount the dashboard (run-now on) inside each worker, or
//! keep a separate API process read-only (`Dashboard::new(store)` without a scheduler):
//! anarchon does not ship run requests between processes.
//!
//! Try it:
//! ```sh
//! curl -s 127.0.0.1:8080/api/jobs
//! curl -s 127.0.0.1:8080/api/jobs/report/history?n=5
//! curl -s -X POST '127.0.0.1:8080/api/jobs/report/run?wait=true'
//! curl -si 127.0.0.1:8080/readyz
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anarchon::sqlite::SqliteStore;
use anarchon::store::LeaseStore;
use anarchon::web::Dashboard;
use anarchon::web::axum::{
    self, Router,
    extract::Request,
    http::{Method, StatusCode},
    middleware::{self, Next},
    response::Response,
};
use anarchon::{HandlerError, Scheduler};

struct Options {
    listen: SocketAddr,
    db: Option<String>,
    run_for: Option<Duration>,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        listen: "127.0.0.1:8080".parse()?,
        db: None,
        run_for: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--listen" => o.listen = value()?.parse()?,
            "--db" => o.db = Some(value()?),
            "--for" => o.run_for = Some(Duration::from_secs(value()?.parse()?)),
            other => anyhow::bail!("unknown option {other} (expected --listen, --db, --for)"),
        }
    }
    Ok(o)
}

/// Your auth goes here, as a tower layer: with `API_TOKEN` set, anything but GET needs it.
async fn require_token(request: Request, next: Next) -> Result<Response, StatusCode> {
    let Ok(token) = std::env::var("API_TOKEN") else {
        return Ok(next.run(request).await);
    };
    let given = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if request.method() == Method::GET || given == Some(token.as_str()) {
        Ok(next.run(request).await)
    } else {
        Err(StatusCode::UNAUTHORIZED)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,anarchon_web=info".into()),
        )
        .init();
    let o = options()?;
    let tmp = std::env::temp_dir().join(format!("anarchon-http-api-{}", std::process::id()));
    let db = match &o.db {
        Some(path) => path.clone(),
        None => {
            std::fs::create_dir_all(&tmp)?;
            tmp.join("jobs.db").to_string_lossy().into_owned()
        }
    };

    // The worker: it owns the jobs and their handlers.
    let worker = Scheduler::leased(SqliteStore::connect(&db).await?)
        .instance_id("worker-1")
        .lease(Duration::from_secs(10))
        .heartbeat(Duration::from_secs(2))
        .build()?;
    worker
        .every("heartbeat", "5s")
        .handler(|_ctx| async { Ok(()) })?;
    worker.every("report", "30s").handler(|ctx| async move {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => Ok(()),
            _ = ctx.signal.cancelled() => Err(HandlerError::msg("stopped while writing the report")),
        }
    })?;
    worker
        .cron("cleanup", "* * * * *")
        .handler(|_ctx| async { Err(HandlerError::msg("the archive volume is full")) })?;
    worker.start().await?;

    // The HTTP side: its own store connection, no jobs; run-now and readiness go to the
    // worker's handle.
    let api_store: Arc<dyn LeaseStore> = Arc::new(SqliteStore::connect(&db).await?);
    let app = Router::new()
        .merge(
            Dashboard::new(api_store)
                .scheduler(worker.clone())
                .allow_run_now(true)
                .store_timeout(Duration::from_secs(3))?
                .router(),
        )
        .layer(middleware::from_fn(require_token));

    let listener = tokio::net::TcpListener::bind(o.listen).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}/ (store {db})");
    println!("  GET  /            jobs        GET /api/jobs");
    println!("  GET  /runs        unfinished  GET /api/runs");
    println!("  POST /api/jobs/report/run?wait=true   run-now on worker-1");
    println!("  GET  /healthz /readyz");

    let stop = async move {
        match o.run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    // Hand running runs over to another worker, if there is one, and close the store.
    worker.stop(Duration::from_secs(10)).await?;
    if o.db.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    println!("stopped");
    Ok(())
}
