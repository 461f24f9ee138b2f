//! `cargo xtask test-servers --tls`: a test CA and server certificate, a TLS-only PostgreSQL
//! cluster and a TLS-only redis-server, each on a spare loopback port.
//!
//! The certificates are made with the `openssl` command under `target/test-servers/tls/`:
//! `ca.crt` (the CA that signed the servers' certificate), `server.crt`/`server.key` (for
//! `127.0.0.1` and `localhost`) and `other-ca.crt`, a second CA that signed nothing (to
//! test that a wrong CA is refused). The PostgreSQL cluster (`initdb` under
//! `target/test-servers/postgres-tls/`) accepts only TLS connections (`hostssl` lines, every
//! `hostnossl` rejected); the redis-server listens on a TLS port only (`--port 0`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{
    How, Started, State, as_user, check, comm_of, data_dir, data_dir_for, postgres_bindir,
    run_logged, wait_for_pid_file,
};
use crate::util;

/// The state-file names of the two servers.
const POSTGRES: &str = "postgres-tls";
const REDIS: &str = "redis-tls";

/// The variables `--tls` exports.
pub(super) const POSTGRES_ENV: &str = "ANARCHON_POSTGRES_TLS_URL";
pub(super) const REDIS_ENV: &str = "ANARCHON_REDIS_TLS_URL";
pub(super) const CA_ENV: &str = "ANARCHON_TLS_CA";
pub(super) const OTHER_CA_ENV: &str = "ANARCHON_TLS_OTHER_CA";

/// The folder of the certificates.
fn cert_dir() -> PathBuf {
    util::servers_dir().join("tls")
}

/// Files of the test PKI.
struct Certs {
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) -> Result<()> {
    let mut command = Command::new("openssl");
    command.current_dir(dir).args(args);
    check(&mut command)
}

/// Whether a certificate exists and stays valid for at least a day.
fn valid_for_a_day(cert: &Path) -> bool {
    cert.is_file()
        && util::succeeds(
            Command::new("openssl")
                .args(["x509", "-noout", "-checkend", "86400", "-in"])
                .arg(cert),
        )
}

/// Makes the CA, the other CA and the server certificate unless valid ones exist.
fn certs() -> Result<Certs> {
    let dir = cert_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let certs = Certs {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    if [&certs.ca, &certs.other_ca, &certs.cert]
        .iter()
        .all(|c| valid_for_a_day(c))
        && certs.key.is_file()
    {
        return Ok(certs);
    }
    if util::which("openssl").is_none() {
        bail!(
            "--tls makes its certificates with the openssl command, which is missing: run \
             `cargo xtask test-servers --install --tls`, or apt-get install openssl"
        );
    }
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for (name, subject) in [
        ("ca", "/CN=anarchon test CA"),
        ("other-ca", "/CN=anarchon other test CA"),
    ] {
        let key = format!("{name}.key");
        let crt = format!("{name}.crt");
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "3650",
            "-subj",
            subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&args, &dir)?;
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&args, &dir)?;
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "825",
            "-extfile",
            "server.ext",
        ],
        &dir,
    )?;
    println!(
        "test-servers: made a test CA and a certificate for 127.0.0.1/localhost in {}",
        dir.display()
    );
    Ok(certs)
}

/// A port nothing listens on now.
fn spare_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a spare port")?;
    Ok(listener.local_addr()?.port())
}

/// The port a live server of ours named `name` has, if any.
fn running(state: &State, name: &str) -> Option<u16> {
    state
        .servers
        .iter()
        .find(|s| s.name == name && s.alive())
        .map(|s| s.port)
}

/// What one TLS server line says, and the variables to export.
pub(super) struct Report {
    pub(super) lines: Vec<String>,
    pub(super) exported: Vec<(&'static str, String)>,
    pub(super) failed: bool,
}

fn postgres_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require")
}

fn redis_url(port: u16) -> String {
    format!("rediss://127.0.0.1:{port}")
}

/// Starts what `--tls` asks for (when `start`), and reports every TLS server of ours that
/// answers: the URLs are exported also by a later `test-servers` without `--tls`.
pub(super) fn up(start: bool, state: &mut State) -> Result<Report> {
    let mut report = Report {
        lines: Vec::new(),
        exported: Vec::new(),
        failed: false,
    };
    if !start && running(state, POSTGRES).is_none() && running(state, REDIS).is_none() {
        return Ok(report);
    }
    let certs = match certs() {
        Ok(certs) => certs,
        Err(error) if start => {
            report.lines.push(format!("tls       FAILED: {error:#}"));
            report.failed = true;
            return Ok(report);
        }
        Err(_) => return Ok(report),
    };
    let mut any = false;

    let how = |port: Option<u16>| {
        if port.is_some() {
            "started earlier by xtask"
        } else {
            "started"
        }
    };
    let pg_port = running(state, POSTGRES);
    if pg_port.is_some() || start {
        let outcome = match pg_port {
            Some(port) => check_postgres(port, &certs).map(|()| port),
            None => start_postgres(state, &certs),
        };
        match outcome {
            Ok(port) => {
                any = true;
                report.lines.push(format!(
                    "{POSTGRES:<12} {:<46} {}",
                    postgres_url(port),
                    how(pg_port)
                ));
                report.exported.push((POSTGRES_ENV, postgres_url(port)));
            }
            Err(error) => {
                report
                    .lines
                    .push(format!("{POSTGRES:<12} FAILED: {error:#}"));
                // Only a run that asked for --tls fails for it.
                report.failed |= start;
            }
        }
    }
    let redis_port = running(state, REDIS);
    if redis_port.is_some() || start {
        let outcome = match redis_port {
            Some(port) => check_redis(port, &certs).map(|()| port),
            None => start_redis(state, &certs),
        };
        match outcome {
            Ok(port) => {
                any = true;
                report.lines.push(format!(
                    "{REDIS:<12} {:<46} {}",
                    redis_url(port),
                    how(redis_port)
                ));
                report.exported.push((REDIS_ENV, redis_url(port)));
            }
            Err(error) => {
                report.lines.push(format!("{REDIS:<12} FAILED: {error:#}"));
                report.failed |= start;
            }
        }
    }
    if any {
        report
            .exported
            .push((CA_ENV, certs.ca.display().to_string()));
        report
            .exported
            .push((OTHER_CA_ENV, certs.other_ca.display().to_string()));
        report
            .lines
            .push(format!("{:<12} {}", "tls CA", certs.ca.display()));
    }
    Ok(report)
}

/// `initdb` (once), TLS settings, `pg_ctl start`, then a `verify-full` query through psql.
fn start_postgres(state: &mut State, certs: &Certs) -> Result<u16> {
    let bindir = postgres_bindir()
        .context("PostgreSQL is not installed: run `cargo xtask test-servers --install`")?;
    let pg_ctl = bindir.join("pg_ctl");
    let user = util::running_as_root().then_some("postgres");
    let dir = data_dir_for(POSTGRES, user)?;
    let data = dir.join("data");
    let log = dir.join("server.log");
    if !data.join("PG_VERSION").is_file() {
        let _ = std::fs::remove_dir_all(&data);
        let mut initdb = as_user(user, &bindir.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run_logged(&mut initdb, &dir.join("initdb.log"))?;
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)?;
        text.push_str(
            "\n# Added by cargo xtask test-servers --tls.\ninclude_if_exists = 'anarchon.conf'\n",
        );
        std::fs::write(&conf, text)?;
    }
    // Only TLS connections are let in.
    std::fs::write(
        data.join("pg_hba.conf"),
        "# Written by cargo xtask test-servers --tls: TLS only.\n\
         hostssl all all 127.0.0.1/32 trust\n\
         hostnossl all all 0.0.0.0/0 reject\n",
    )?;
    // The key must belong to the server's user and be readable by it alone.
    std::fs::copy(&certs.cert, data.join("server.crt"))?;
    std::fs::copy(&certs.key, data.join("server.key"))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            data.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )?;
    }
    if let Some(user) = user {
        for file in ["server.crt", "server.key", "pg_hba.conf"] {
            check(
                Command::new("chown")
                    .arg(format!("{user}:"))
                    .arg(data.join(file)),
            )?;
        }
    }
    let port = spare_port()?;
    std::fs::write(
        data.join("anarchon.conf"),
        format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n\
             ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             max_connections = 100\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
        ),
    )?;
    let mut start = as_user(user, &pg_ctl);
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(&log)
        .args(["-w", "-t", "60", "start"]);
    run_logged(&mut start, &dir.join("start.log"))?;
    let mut stop_hint = as_user(user, &pg_ctl);
    stop_hint.arg("-D").arg(&data).args(["-m", "fast", "stop"]);
    state.servers.retain(|s| s.name != POSTGRES);
    state.servers.push(Started {
        name: POSTGRES.into(),
        port,
        stop: util::show(&stop_hint),
        how: How::PgCtl {
            pg_ctl,
            data,
            user: user.map(str::to_string),
        },
    });
    check_postgres(port, certs).with_context(|| format!("log: {}", log.display()))?;
    Ok(port)
}

/// A query through libpq with `sslmode=verify-full` against the test CA, within 20 s.
fn check_postgres(port: u16, certs: &Certs) -> Result<()> {
    let conninfo = format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=verify-full \
         sslrootcert={} connect_timeout=3",
        certs.ca.display()
    );
    let begun = Instant::now();
    loop {
        let mut psql = Command::new("psql");
        psql.args([
            "-X",
            "-A",
            "-t",
            "-c",
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ])
        .arg(&conninfo);
        match util::output_within(&mut psql, Duration::from_secs(5)) {
            Some(out) if out.trim() == "t" => return Ok(()),
            _ if begun.elapsed() > Duration::from_secs(20) => {
                bail!("psql could not run a query over TLS (verify-full) on port {port}")
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// `redis-server --port 0 --tls-port P`, daemonized, then a `PING` through `redis-cli --tls`.
fn start_redis(state: &mut State, certs: &Certs) -> Result<u16> {
    let binary = util::which("redis-server")
        .context("redis-server is not installed: run `cargo xtask test-servers --install`")?;
    let dir = data_dir(REDIS)?;
    let pid_file = dir.join("server.pid");
    let log = dir.join("server.log");
    let _ = std::fs::remove_file(&pid_file);
    let port = spare_port()?;
    let mut command = Command::new(&binary);
    command
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--tls-cert-file")
        .arg(&certs.cert)
        .arg("--tls-key-file")
        .arg(&certs.key)
        .arg("--tls-ca-cert-file")
        .arg(&certs.ca)
        .args(["--tls-auth-clients", "no"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
        .arg("--dir")
        .arg(&dir)
        .arg("--pidfile")
        .arg(&pid_file)
        .arg("--logfile")
        .arg(&log);
    run_logged(&mut command, &dir.join("start.log"))?;
    let pid = wait_for_pid_file(&pid_file, Duration::from_secs(10))?;
    let comm = comm_of(pid).unwrap_or_else(|| "redis-server".into());
    state.servers.retain(|s| s.name != REDIS);
    state.servers.push(Started {
        name: REDIS.into(),
        port,
        stop: format!("kill {pid}"),
        how: How::Process { pid, comm },
    });
    check_redis(port, certs).with_context(|| format!("log: {}", log.display()))?;
    Ok(port)
}

/// `redis-cli --tls --cacert ca.crt PING` answers `PONG` within 10 s.
fn check_redis(port: u16, certs: &Certs) -> Result<()> {
    let begun = Instant::now();
    loop {
        let mut cli = Command::new("redis-cli");
        cli.args(["--tls", "--cacert"]).arg(&certs.ca).args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "PING",
        ]);
        match util::output_within(&mut cli, Duration::from_secs(5)) {
            Some(out) if out.trim() == "PONG" => return Ok(()),
            _ if begun.elapsed() > Duration::from_secs(10) => {
                bail!("redis-cli --tls could not PING port {port}")
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
