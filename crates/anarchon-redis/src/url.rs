//! Taking the credentials out of a Redis URL before fred parses it: the URL the driver sees
//! carries no user info, the user and password are set on its `Config` apart, and no error
//! or `Debug` shows them. A password may then hold `/ ? # @ :` unescaped.

use anarchon_core::redact_url;

use crate::error::RedisError;

/// The query keys fred reads; a `?` followed by one of them starts the query.
const QUERY_KEYS: [&str; 4] = [
    "node=",
    "sentinelServiceName=",
    "sentinelUsername=",
    "sentinelPassword=",
];

/// A Redis URL without its user info, and the credentials it carried. `Debug` shows no
/// password.
pub(crate) struct RedisUrl {
    /// The URL as fred may see it.
    pub(crate) bare: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisUrl")
            .field("bare", &redact_url(&self.bare))
            .field("username", &self.username)
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

/// Splits `url` (`scheme://[[user]:password@]host...`) into the URL without user info and
/// the decoded credentials. The user info ends at the last `@` before the query (a `?`
/// followed by one of fred's keys), so a password may hold `/ ? # @ :`; an `@` after the
/// host must be written `%40`.
pub(crate) fn split(url: &str) -> Result<RedisUrl, RedisError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(RedisUrl {
            bare: url.to_owned(),
            username: None,
            password: None,
        });
    };
    let query = (0..rest.len())
        .filter(|&i| rest.as_bytes()[i] == b'?')
        .find(|&i| QUERY_KEYS.iter().any(|k| rest[i + 1..].starts_with(k)))
        .unwrap_or(rest.len());
    let Some(at) = rest[..query].rfind('@') else {
        return Ok(RedisUrl {
            bare: url.to_owned(),
            username: None,
            password: None,
        });
    };
    let info = &rest[..at];
    let (user, pass) = info.split_once(':').unwrap_or((info, ""));
    let decode = |part: &str, what: &str| {
        percent_decode(part).ok_or_else(|| RedisError::InvalidUrl {
            url: redact_url(url),
            reason: format!("the {what} is not UTF-8 once its %XX escapes are decoded"),
        })
    };
    let (user, pass) = (decode(user, "user")?, decode(pass, "password")?);
    Ok(RedisUrl {
        bare: format!("{scheme}://{}", &rest[at + 1..]),
        username: Some(user).filter(|u| !u.is_empty()),
        password: Some(pass).filter(|p| !p.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_apart_in_every_shape() {
        for pass in [
            "pa/ss", "pa#ss", "pa?ss", "pa@ss", "pa:ss", "pa%ss", "p/@#?:%",
        ] {
            for (url, user) in [
                (format!("redis://:{pass}@h:6379/0"), None),
                (format!("rediss://app:{pass}@h:6380"), Some("app")),
                (
                    format!("redis-cluster://app:{pass}@h:7000?node=h2:7001"),
                    Some("app"),
                ),
            ] {
                let u = split(&url).unwrap();
                assert_eq!(u.password.as_deref(), Some(pass), "{url}");
                assert_eq!(u.username.as_deref(), user, "{url}");
                assert!(
                    !u.bare.contains(pass) && !u.bare.contains('@'),
                    "{}",
                    u.bare
                );
                assert!(!format!("{u:?}").contains(pass), "{u:?}");
            }
        }
        let u =
            split("redis-sentinel://h:26379/0?sentinelServiceName=m&sentinelPassword=a@b").unwrap();
        assert_eq!((u.username, u.password), (None, None));
        let u = split("redis://u:p%40w@h/1").unwrap();
        assert_eq!(u.password.as_deref(), Some("p@w"));
        assert_eq!(u.bare, "redis://h/1");
        let err = split("redis://u:secret%ff@h").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
