//! Reading an `amqp://` URL into its parts, the credentials kept apart so that they never
//! reach an error, a log line or a `Debug`.
//!
//! A later issue merges this with the NATS store's copy (`anarchon-nats/src/url.rs`).

use anarchon_core::redact_url;

use crate::error::AmqpError;

/// The parts of an `amqp://` URL. `Debug` shows no password.
pub(crate) struct AmqpUrl {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) password: String,
    pub(crate) vhost: String,
}

impl std::fmt::Debug for AmqpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("vhost", &self.vhost)
            .finish_non_exhaustive()
    }
}

/// Decodes the `%XX` escapes of a URL part. A `%` not followed by two hex digits stays as
/// it is (a password may hold a bare `%`). `None` when the decoded bytes are not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(&h), Some(&l)) = (bytes.get(i + 1), bytes.get(i + 2))
            && let (Some(h), Some(l)) = (hex(h), hex(l))
        {
            // Two hex digits make at most 255: the cast cannot truncate.
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Splits `rest` (what follows `scheme://`) into the user info and what follows it. The
/// user info ends at the **last** `@`, so a password may hold `/ ? # @ :` without being
/// escaped; an `@` in the virtual host or the query must then be written `%40`.
pub(crate) fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// Parses `amqp://[user[:password]@]host[:port][/vhost]` (user and password default to
/// `guest`, the port to 5672, the virtual host to `/`). No error carries the user info.
pub(crate) fn parse(url: &str) -> Result<AmqpUrl, AmqpError> {
    let bad = |reason: String| AmqpError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some((scheme, rest)) = url.trim().split_once("://") else {
        return Err(bad("it has no scheme".into()));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "amqp" => {}
        "amqps" => {
            return Err(bad(
                "amqps is not built into this store yet; open a TLS connection with amqprs (its \
                 `tls` feature) and pass it to AmqpStore::from_connection"
                    .into(),
            ));
        }
        other => {
            return Err(bad(format!(
                "the scheme {:?} is not supported (use amqp)",
                other.escape_debug().to_string()
            )));
        }
    }
    let (userinfo, after) = split_userinfo(rest);
    // The host ends at the first `/`, `?` or `#` after the user info.
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (hostport, tail) = after.split_at(end);
    let (path, query) = match tail.strip_prefix('/') {
        Some(p) => match p.find(['?', '#']) {
            Some(i) => (&p[..i], &p[i..]),
            None => (p, ""),
        },
        None => ("", tail),
    };
    if !query.trim_start_matches(['?', '#']).is_empty() {
        return Err(bad(
            "query parameters are not read by this store; set timeouts with AmqpOptions and \
             remove the `?...` part"
                .into(),
        ));
    }
    let (user, password) = match userinfo {
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let decode = |part: &str, what: &str| {
                percent_decode(part).ok_or_else(|| {
                    bad(format!(
                        "the {what} is not UTF-8 once its %XX escapes are decoded"
                    ))
                })
            };
            (decode(user, "user")?, decode(pass, "password")?)
        }
        None => ("guest".into(), "guest".into()),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err(bad("its IPv6 host has no closing ']'".into()));
        };
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(bad("text follows its IPv6 host; write [::1]:5672".into())),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => 5672,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => {
                return Err(bad(format!(
                    "the port {:?} is not a number from 1 to 65535",
                    p.escape_debug().to_string()
                )));
            }
            Ok(p) => p,
        },
    };
    if host.is_empty() {
        return Err(bad("it names no host".into()));
    }
    if host.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(bad("its host holds spaces or control characters".into()));
    }
    let vhost = if path.is_empty() {
        "/".to_string()
    } else {
        percent_decode(path)
            .ok_or_else(|| bad("the virtual host is not UTF-8 once decoded".into()))?
    };
    Ok(AmqpUrl {
        host: host.to_string(),
        port,
        user,
        password,
        vhost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_with_defaults_and_decoded_parts() {
        let u = parse("amqp://app:p%40ss@mq.example:5673/prod").unwrap();
        assert_eq!(u.password, "p@ss");
        assert_eq!((u.host.as_str(), u.port), ("mq.example", 5673));
        assert_eq!(u.vhost, "prod");
        let u = parse("amqp://localhost").unwrap();
        assert_eq!(
            (u.port, u.vhost.as_str(), u.password.as_str()),
            (5672, "/", "guest")
        );
        assert_eq!(parse("amqp://localhost/%2f").unwrap().vhost, "/");
        let u = parse("amqp://u:p@[::1]:5673/v").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 5673));
    }

    #[test]
    fn a_password_may_hold_any_url_delimiter_unescaped() {
        for pass in [
            "pa/ss", "pa#ss", "pa?ss", "pa@ss", "pa:ss", "pa%ss", "p/@#?:%", "%zz", "50%",
        ] {
            let u = parse(&format!("amqp://guest:{pass}@host:5672/%2f")).unwrap();
            assert_eq!(u.password, pass, "{pass}");
            assert_eq!(
                (u.host.as_str(), u.port, u.vhost.as_str()),
                ("host", 5672, "/")
            );
            assert_eq!(u.user, "guest");
            assert!(!format!("{u:?}").contains(pass), "{u:?}");
        }
        let u = parse("amqp://guest:a%2Fb%23c@host/v").unwrap();
        assert_eq!(u.password, "a/b#c");
    }

    #[test]
    fn bad_urls_are_refused_without_their_secret() {
        for bad in [
            "localhost:5672",
            "http://x",
            "amqp://",
            "amqp://u:secret@:5672",
            "amqp://h:port",
            "amqp://u:secret@h:0",
            "amqp://u:secret@h:70000",
            "amqp://u:secret@[::1",
            "amqp://u:secret@h/v?heartbeat=5",
            "amqp://u:secret%ff@h",
            "amqps://u:secret@h",
        ] {
            let Err(err) = parse(bad) else {
                panic!("{bad} was accepted");
            };
            assert!(
                matches!(err, AmqpError::InvalidUrl { .. }),
                "{bad}: {err:?}"
            );
            assert!(!err.to_string().contains("secret"), "{err}");
            assert!(!format!("{err:?}").contains("secret"), "{err:?}");
        }
    }
}
