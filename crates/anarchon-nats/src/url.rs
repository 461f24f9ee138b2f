//! Reading the NATS URL list into server addresses without credentials and the credentials
//! apart, so that the client never logs them (async-nats logs each server address with
//! `Debug` at DEBUG level) and no error or `Debug` shows them.
//!
//! A later issue merges this with the RabbitMQ store's copy (`anarchon-amqp/src/url.rs`).

use anarchon_core::redact_url;
use async_nats::ServerAddr;

use crate::error::NatsError;

/// The credentials of a URL: a user and password, or a token (a user info without `:`).
/// `Debug` shows neither the password nor the token.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// `user:password@`.
    UserPassword(String, String),
    /// `token@`.
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::UserPassword(user, _) => write!(f, "UserPassword({user:?}, ***)"),
            Credentials::Token(_) => f.write_str("Token(***)"),
        }
    }
}

/// The servers of a URL list and the credentials they carry.
#[derive(Debug)]
pub(crate) struct NatsUrl {
    /// Every server, without user info.
    pub(crate) servers: Vec<ServerAddr>,
    /// The credentials, when any server carries some.
    pub(crate) credentials: Option<Credentials>,
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
/// user info ends at the **last** `@`, so a password or token may hold `/ ? # @ :` without
/// being escaped; an `@` after the host must then be written `%40`.
pub(crate) fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// Parses `nats://[user:password@|token@]host[:port]`, `tls://...`, or several separated
/// by commas (a `,` in a password must be written `%2C`). Every server that carries
/// credentials must carry the same ones. No error carries the user info.
pub(crate) fn parse(url: &str) -> Result<NatsUrl, NatsError> {
    let bad = |reason: String| NatsError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let mut servers = Vec::new();
    let mut credentials: Option<Credentials> = None;
    for part in url.split(',') {
        let part = part.trim();
        let Some((scheme, rest)) = part.split_once("://") else {
            return Err(bad(if part.is_empty() {
                "it names no server".into()
            } else {
                "it has no scheme".into()
            }));
        };
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "nats" | "tls") {
            return Err(bad(format!(
                "the scheme {:?} is not supported (use nats or tls)",
                scheme.escape_debug().to_string()
            )));
        }
        let (userinfo, hostport) = split_userinfo(rest);
        if hostport.is_empty() || hostport.starts_with([':', '/', '?', '#']) {
            return Err(bad("it names no host".into()));
        }
        let addr: ServerAddr = format!("{scheme}://{hostport}")
            .parse()
            .map_err(|_| bad("its host or port could not be parsed".into()))?;
        if addr.host().is_empty() {
            return Err(bad("it names no host".into()));
        }
        if let Some(info) = userinfo.filter(|u| !u.is_empty()) {
            let decode = |part: &str, what: &str| {
                percent_decode(part).ok_or_else(|| {
                    bad(format!(
                        "the {what} is not UTF-8 once its %XX escapes are decoded"
                    ))
                })
            };
            let found = match info.split_once(':') {
                Some((user, pass)) => {
                    Credentials::UserPassword(decode(user, "user")?, decode(pass, "password")?)
                }
                None => Credentials::Token(decode(info, "token")?),
            };
            match &credentials {
                Some(c) if *c != found => {
                    return Err(bad(
                        "its servers carry different credentials; the client logs in to every \
                         server with the same ones"
                            .into(),
                    ));
                }
                _ => credentials = Some(found),
            }
        }
        servers.push(addr);
    }
    Ok(NatsUrl {
        servers,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_apart_from_the_servers_in_every_shape() {
        for secret in [
            "pa/ss", "pa#ss", "pa?ss", "pa@ss", "pa:ss", "pa%ss", "p/@#?:%", "50%",
        ] {
            let u = parse(&format!("nats://app:{secret}@127.0.0.1:4222")).unwrap();
            assert_eq!(
                u.credentials,
                Some(Credentials::UserPassword("app".into(), secret.into()))
            );
            assert_eq!(u.servers.len(), 1);
            assert_eq!(u.servers[0].as_url_str(), "nats://127.0.0.1:4222");
            assert!(!format!("{u:?}").contains(secret), "{u:?}");
            if !secret.contains(':') {
                let u = parse(&format!("tls://{secret}@h")).unwrap();
                assert_eq!(u.credentials, Some(Credentials::Token(secret.into())));
                assert_eq!(u.servers[0].as_url_str(), "tls://h");
                assert!(!format!("{u:?}").contains(secret), "{u:?}");
            }
        }
        let u = parse("nats://a:p%2Cw@h1:4222, nats://a:p%2Cw@h2:4223,nats://h3").unwrap();
        assert_eq!(u.servers.len(), 3);
        assert_eq!(
            u.credentials,
            Some(Credentials::UserPassword("a".into(), "p,w".into()))
        );
        assert!(parse("nats://h").unwrap().credentials.is_none());
    }

    #[test]
    fn bad_urls_are_refused_without_their_secret() {
        for bad in [
            "",
            "127.0.0.1:4222",
            "ws://u:secret@h",
            "nats://u:secret@",
            "nats://u:secret@:4222",
            "nats://u:secret@h:99999",
            "nats://u:secret%ff@h",
            "nats://u:secret@h,nats://u:other@h2",
            "nats://u:secret@h,",
        ] {
            let Err(err) = parse(bad) else {
                panic!("{bad} was accepted");
            };
            assert!(
                matches!(err, NatsError::InvalidUrl { .. }),
                "{bad}: {err:?}"
            );
            assert!(!err.to_string().contains("secret"), "{bad}: {err}");
            assert!(!format!("{err:?}").contains("secret"), "{err:?}");
        }
    }
}
