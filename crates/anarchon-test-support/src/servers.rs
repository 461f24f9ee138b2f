//! Where a test finds its server and what it does without one.

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anarchon_core::testkit::require_servers;

/// Says that something a test needs cannot be had (`what`: "nats-server is not installed")
/// and how to get it (`how`): a `SKIP` line on stderr, or a panic under
/// `ANARCHON_REQUIRE_SERVERS=1` so CI cannot pass by skipping. The caller then returns.
pub fn unobtainable(what: &str, how: &str) {
    if require_servers() {
        panic!("{what} and ANARCHON_REQUIRE_SERVERS=1: {how}");
    }
    eprintln!("SKIP {what}: this test did not run ({how})");
}

/// Whether something accepts TCP connections at the first `host:port` of `url` (the
/// default port of its scheme when it names none) within `within`. A reachable check
/// before a test that would otherwise hang on a dead server's connect timeout.
///
/// ```
/// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let port = listener.local_addr().unwrap().port();
/// let within = std::time::Duration::from_secs(1);
/// assert!(anarchon_test_support::reachable(&format!("nats://127.0.0.1:{port}"), within));
/// drop(listener);
/// assert!(!anarchon_test_support::reachable(&format!("amqp://u:p@127.0.0.1:{port}/%2f"), within));
/// ```
pub fn reachable(url: &str, within: Duration) -> bool {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest
        .split(['/', '?', ',', '#'])
        .next()
        .unwrap_or(rest)
        .rsplit('@')
        .next()
        .unwrap_or_default();
    let default_port = match scheme {
        "amqp" => 5672,
        "amqps" => 5671,
        "nats" | "tls" => 4222,
        "postgres" | "postgresql" => 5432,
        _ => 6379,
    };
    let address = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    let Ok(addresses) = address.to_socket_addrs() else {
        return false;
    };
    addresses
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, within).is_ok())
}

/// A loopback port nothing listens on (at the moment of the call).
pub fn spare_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Waits until something listens on `127.0.0.1:port`; false after `within`.
pub fn wait_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
