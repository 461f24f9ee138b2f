//! Wire-level checks that a server answers, and which version it is.
//!
//! Each check opens a TCP connection to 127.0.0.1, speaks just enough of the protocol to get
//! a version string (Redis `INFO server`, PostgreSQL's startup handshake, AMQP's
//! `Connection.Start`, NATS's `INFO` line, sqld's HTTP `/health`), and closes it. No client
//! crates: xtask stays small.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// What a server said about itself.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// Product and version, e.g. `Redis 7.0.15` or `PostgreSQL 15.19`.
    pub(crate) version: String,
    /// Set when the server answers but is not what the tests need (wrong product or version).
    pub(crate) unfit: Option<String>,
}

impl Answer {
    fn fit(version: String) -> Self {
        Self {
            version,
            unfit: None,
        }
    }
}

/// The protocols the test servers speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Redis 7.x (any Redis-compatible server is accepted).
    Redis,
    /// Valkey (a Redis without `valkey_version` is accepted with a note).
    Valkey,
    /// Redis at version 8.6 or newer.
    Redis86,
    Postgres,
    /// sqld (libSQL server) over HTTP.
    Libsql,
    Amqp,
    Nats,
}

/// Whether anything accepts TCP connections on the port.
pub(crate) fn port_open(port: u16) -> bool {
    connect(port).is_ok()
}

/// Checks the server on `port` at the protocol level.
pub(crate) fn probe(protocol: Protocol, port: u16) -> Result<Answer> {
    let stream = connect(port)?;
    match protocol {
        Protocol::Redis | Protocol::Valkey | Protocol::Redis86 => redis(stream, protocol),
        Protocol::Postgres => postgres(stream),
        Protocol::Libsql => libsql(stream, port),
        Protocol::Amqp => amqp(stream),
        Protocol::Nats => nats(stream),
    }
}

fn connect(port: u16) -> Result<TcpStream> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)
        .with_context(|| format!("nothing listens on 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(stream)
}

fn redis(mut stream: TcpStream, protocol: Protocol) -> Result<Answer> {
    stream.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header)?;
    let header = header.trim_end();
    if let Some(error) = header.strip_prefix('-') {
        bail!("answers with an error: {error}");
    }
    let length: usize = header
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("not a Redis reply: {header:?}"))?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let info = String::from_utf8_lossy(&body);
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(|value| value.trim().to_string())
    };
    let redis_version = field("redis_version").unwrap_or_else(|| "?".into());
    let answer = match field("valkey_version") {
        Some(valkey) => Answer::fit(format!("Valkey {valkey}")),
        None => Answer::fit(format!("Redis {redis_version}")),
    };
    Ok(match protocol {
        Protocol::Valkey if !answer.version.starts_with("Valkey") => Answer {
            unfit: Some("a Redis, not Valkey: the Valkey suite runs against it anyway".into()),
            ..answer
        },
        Protocol::Redis86
            if answer.version.starts_with("Valkey") || !at_least(&redis_version, (8, 6)) =>
        {
            Answer {
                unfit: Some("needs Redis >= 8.6".into()),
                ..answer
            }
        }
        _ => answer,
    })
}

/// Compares a dotted version with (major, minor).
pub(crate) fn at_least(version: &str, wanted: (u32, u32)) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    let major = parts
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    let minor = parts
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    (major, minor) >= wanted
}

fn postgres(mut stream: TcpStream) -> Result<Answer> {
    // StartupMessage, protocol 3.0, as user postgres to database postgres: the tests' URL.
    let mut body = Vec::new();
    body.extend_from_slice(&196_608_u32.to_be_bytes());
    for part in [
        "user",
        "postgres",
        "database",
        "postgres",
        "application_name",
        "anarchon-xtask",
    ] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    stream.write_all(&message)?;

    let mut version = None;
    loop {
        let mut header = [0_u8; 5];
        stream.read_exact(&mut header)?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if !(4..=1 << 20).contains(&length) {
            bail!("not a PostgreSQL reply");
        }
        let mut payload = vec![0; length - 4];
        stream.read_exact(&mut payload)?;
        match header[0] {
            b'R' => {
                let code = payload
                    .get(..4)
                    .map_or(u32::MAX, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                if code != 0 {
                    bail!(
                        "asks user postgres for a password (auth request {code}); the tests expect \
                         trust auth on 127.0.0.1"
                    );
                }
            }
            b'S' => {
                let mut fields = payload.split(|b| *b == 0);
                if fields.next() == Some(b"server_version") {
                    let value = String::from_utf8_lossy(fields.next().unwrap_or_default());
                    let short = value.split_whitespace().next().unwrap_or("?");
                    version = Some(format!("PostgreSQL {short}"));
                }
            }
            b'E' => {
                let text = payload
                    .split(|b| *b == 0)
                    .find_map(|field| field.strip_prefix(b"M"))
                    .map(|m| String::from_utf8_lossy(m).into_owned())
                    .unwrap_or_else(|| "error".into());
                bail!("answers with an error: {text}");
            }
            b'Z' => break,
            _ => {}
        }
    }
    // Terminate, so the server does not log an unexpected EOF.
    let _ = stream.write_all(&[b'X', 0, 0, 0, 4]);
    Ok(Answer::fit(
        version.unwrap_or_else(|| "PostgreSQL ?".into()),
    ))
}

fn libsql(mut stream: TcpStream, port: u16) -> Result<Answer> {
    let health = http_get(&mut stream, port, "/health")?;
    if !health.0.starts_with("HTTP/1.1 200") && !health.0.starts_with("HTTP/1.0 200") {
        bail!("GET /health answered {}", health.0);
    }
    let version = connect(port)
        .and_then(|mut again| http_get(&mut again, port, "/version"))
        .ok()
        .filter(|(status, _)| status.contains(" 200"))
        .map(|(_, body)| body.trim().to_string())
        .filter(|body| !body.is_empty() && body.len() < 80)
        .unwrap_or_else(|| "?".into());
    Ok(Answer::fit(format!("sqld {version}")))
}

fn http_get(stream: &mut TcpStream, port: u16, path: &str) -> Result<(String, String)> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut reply)?;
    let reply = String::from_utf8_lossy(&reply);
    let status = reply.lines().next().unwrap_or_default().trim().to_string();
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    if !status.starts_with("HTTP/") {
        bail!("not an HTTP reply");
    }
    Ok((status, body))
}

fn amqp(mut stream: TcpStream) -> Result<Answer> {
    stream.write_all(b"AMQP\x00\x00\x09\x01")?;
    let mut header = [0_u8; 7];
    stream.read_exact(&mut header)?;
    if header[0] != 1 {
        bail!("not an AMQP 0-9-1 reply");
    }
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    if size > 1 << 20 {
        bail!("not an AMQP 0-9-1 reply");
    }
    let mut payload = vec![0; size];
    stream.read_exact(&mut payload)?;
    // class 10 (connection), method 10 (start), version-major, version-minor, properties.
    if payload.get(..4) != Some(&[0, 10, 0, 10]) {
        bail!("AMQP frame is not Connection.Start");
    }
    let properties = amqp_table(payload.get(6..).unwrap_or_default());
    let product = properties
        .iter()
        .find(|(k, _)| k == "product")
        .map_or("AMQP", |(_, v)| v.as_str());
    let version = properties
        .iter()
        .find(|(k, _)| k == "version")
        .map_or("?", |(_, v)| v.as_str());
    Ok(Answer::fit(format!("{product} {version}")))
}

/// Reads the long-string entries of an AMQP field table (enough for server properties).
fn amqp_table(bytes: &[u8]) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let Some(length) = bytes
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return entries;
    };
    let table = bytes.get(4..4 + length).unwrap_or_default();
    let mut at = 0;
    while at < table.len() {
        let key_len = table[at] as usize;
        let Some(key) = table.get(at + 1..at + 1 + key_len) else {
            break;
        };
        at += 1 + key_len;
        let Some(&kind) = table.get(at) else { break };
        at += 1;
        match kind {
            b'S' | b'F' => {
                let Some(len) = table
                    .get(at..at + 4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                else {
                    break;
                };
                if kind == b'S' {
                    let value = table.get(at + 4..at + 4 + len).unwrap_or_default();
                    entries.push((
                        String::from_utf8_lossy(key).into_owned(),
                        String::from_utf8_lossy(value).into_owned(),
                    ));
                }
                at += 4 + len;
            }
            b't' | b'b' | b'B' => at += 1,
            // Other field types do not appear in server properties; stop rather than guess.
            _ => break,
        }
    }
    entries
}

fn nats(stream: TcpStream) -> Result<Answer> {
    let mut line = String::new();
    BufReader::new(stream)
        .take(64 * 1024)
        .read_line(&mut line)?;
    let json = line
        .strip_prefix("INFO ")
        .with_context(|| format!("not a NATS greeting: {:?}", line.trim_end()))?;
    let info: serde_json::Value =
        serde_json::from_str(json.trim()).context("NATS INFO is not JSON")?;
    let version = info["version"].as_str().unwrap_or("?");
    let answer = Answer::fit(format!("NATS {version}"));
    Ok(if info["jetstream"].as_bool() == Some(true) {
        answer
    } else {
        Answer {
            unfit: Some("JetStream is off (start nats-server with -js)".into()),
            ..answer
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_major_then_minor() {
        assert!(at_least("8.6.0", (8, 6)));
        assert!(at_least("9.0.1", (8, 6)));
        assert!(at_least("8.10.0", (8, 6)));
        assert!(!at_least("8.4.2", (8, 6)));
        assert!(!at_least("7.0.15", (8, 6)));
        assert!(!at_least("", (8, 6)));
    }

    #[test]
    fn amqp_server_properties_are_read_past_nested_tables() {
        let mut table = Vec::new();
        let mut entry = |key: &str, kind: u8, value: &[u8]| {
            table.push(key.len() as u8);
            table.extend_from_slice(key.as_bytes());
            table.push(kind);
            table.extend_from_slice(&(value.len() as u32).to_be_bytes());
            table.extend_from_slice(value);
        };
        entry("capabilities", b'F', &[0; 6]);
        entry("product", b'S', b"RabbitMQ");
        entry("version", b'S', b"3.10.8");
        let mut bytes = (table.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&table);
        let entries = amqp_table(&bytes);
        assert_eq!(
            entries,
            vec![
                ("product".to_string(), "RabbitMQ".to_string()),
                ("version".to_string(), "3.10.8".to_string())
            ]
        );
    }
}
