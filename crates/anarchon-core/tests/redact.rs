//! The one redactor against tricky credentials: whatever the shape of the connection string,
//! the secret never appears in what it returns.

use anarchon_core::redact_url;
use proptest::prelude::*;

/// An input, the secrets that must not survive, and the exact output where it is worth
/// pinning (`None` where only "the secret is gone" matters).
struct Case {
    input: &'static str,
    secrets: &'static [&'static str],
    expected: Option<&'static str>,
}

const fn case(
    input: &'static str,
    secrets: &'static [&'static str],
    expected: Option<&'static str>,
) -> Case {
    Case {
        input,
        secrets,
        expected,
    }
}

const CASES: &[Case] = &[
    // Plain URLs: the password goes, the rest stays readable.
    case(
        "postgres://app:hunter2@db:5432/x",
        &["hunter2"],
        Some("postgres://app:***@db:5432/x"),
    ),
    case(
        "redis://:secret@cache:6379",
        &["secret"],
        Some("redis://:***@cache:6379"),
    ),
    case(
        "rediss://default:s3cr3tpw@cache:6380/0",
        &["s3cr3tpw"],
        Some("rediss://default:***@cache:6380/0"),
    ),
    case(
        "amqp://guest:rabbitpw@rabbit:5672/%2f",
        &["rabbitpw"],
        Some("amqp://guest:***@rabbit:5672/%2f"),
    ),
    case(
        "nats://user:natspw@nats:4222",
        &["natspw"],
        Some("nats://user:***@nats:4222"),
    ),
    // NATS puts a token where the user name goes.
    case(
        "nats://s3cr3ttoken@nats:4222",
        &["s3cr3ttoken"],
        Some("nats://***@nats:4222"),
    ),
    case(
        "postgres://app:hunter2@[::1]:5432/x",
        &["hunter2"],
        Some("postgres://app:***@[::1]:5432/x"),
    ),
    // A user name alone is not a secret for PostgreSQL.
    case(
        "postgres://postgres@127.0.0.1:5432/postgres",
        &[],
        Some("postgres://postgres@127.0.0.1:5432/postgres"),
    ),
    // Reserved characters in the password.
    case(
        "postgres://app:pa/ss@db/x",
        &["pa/ss", "ss@db"],
        Some("postgres://***"),
    ),
    case(
        "postgres://app:pa/ss@db",
        &["pa/ss"],
        Some("postgres://***"),
    ),
    case("postgres://app:pa?ss@db/x", &["pa?ss", "ss@"], None),
    case("postgres://app:pa#ss@db/x", &["pa#ss", "ss@"], None),
    case(
        "postgres://app:p@ss@db/x",
        &["p@ss", "p%40ss"],
        Some("postgres://app:***@db/x"),
    ),
    case(
        "postgres://app:pa%25ss@db/x",
        &["pa%25ss"],
        Some("postgres://app:***@db/x"),
    ),
    case("postgres://app:pa%ss@db/x", &["pa%ss"], None),
    case(
        "postgres://app:pa:ss@db/x",
        &["pa:ss", "pa%3Ass"],
        Some("postgres://app:***@db/x"),
    ),
    case(
        "postgres://app:pa ss word@db/x",
        &["pa ss", "pa%20ss", "word"],
        Some("postgres://app:***@db/x"),
    ),
    case("postgres://app:p\\w/d@db/x", &["p\\w", "w/d"], None),
    case(
        "postgres://app:pässwörd@db/x",
        &["pässwörd", "p%C3%A4ss"],
        None,
    ),
    // Secrets in the query string or the fragment.
    case(
        "postgres://db/x?user=a&password=hunter2&sslmode=disable",
        &["hunter2"],
        Some("postgres://db/x?user=a&password=***&sslmode=disable"),
    ),
    case("postgres://db/x?PASSWORD=hunter2", &["hunter2"], None),
    case("postgres://db/x?pass%77ord=hunter2", &["hunter2"], None),
    case(
        "https://db.example.io/?token=abc123secret&x=1",
        &["abc123secret"],
        Some("https://db.example.io/?token=***&x=1"),
    ),
    case(
        "https://db.example.io/?auth_token=abc123secret",
        &["abc123secret"],
        None,
    ),
    case(
        "libsql://db.turso.io?authToken=eyJhbGciOiJFZERTQSJ9.tok",
        &["eyJhbGciOiJFZERTQSJ9"],
        Some("libsql://db.turso.io?authToken=***"),
    ),
    case(
        "postgres://app:hunter2@db/x#fragsecret",
        &["hunter2", "fragsecret"],
        None,
    ),
    // URLs that cannot be read without guessing: everything after the scheme goes.
    case(
        "postgres://app:hunter2@h1:5432,h2:5433/db",
        &["hunter2"],
        None,
    ),
    case(
        "postgres://app:hunter2@db:notaport/x",
        &["hunter2"],
        Some("postgres://***"),
    ),
    case(
        "postgres://db/x password=hunter2",
        &["hunter2"],
        Some("postgres://***"),
    ),
    case(
        "jdbc:postgresql://app:hunter2@db/x",
        &["hunter2"],
        Some("jdbc:postgresql://app:***@db/x"),
    ),
    // PostgreSQL key=value strings, with libpq's quoting.
    case(
        "host=db password=hunter2 user=a",
        &["hunter2"],
        Some("host=db password=*** user=a"),
    ),
    case(
        "host=db password='hunter2 topsecret' user=a",
        &["hunter2", "topsecret"],
        Some("host=db password=*** user=a"),
    ),
    case(
        r"password='it\'s a \\ secret' host=db",
        &["it\\'s", "secret"],
        Some("password=*** host=db"),
    ),
    case(
        "host=db password = 'spaced out' user=a",
        &["spaced", "out'"],
        Some("host=db password = *** user=a"),
    ),
    case(
        r"host=db password=unquoted\ with\ space user=a",
        &["unquoted", "with", "space"],
        Some("host=db password=*** user=a"),
    ),
    // libpq ends an unquoted value at a space, but a password typed with one is secret
    // up to the next `key=`.
    case(
        "host=db password=hunter2 topsecret user=a",
        &["hunter2", "topsecret"],
        Some("host=db password=*** user=a"),
    ),
    case(
        "host=db password=two words and more",
        &["two", "words", "more"],
        Some("host=db password=***"),
    ),
    case(
        "password=a b c dbname = x",
        &["a b", " c "],
        Some("password=*** dbname = x"),
    ),
    case(
        "host=db password=hunter2 \tsecond\tthird\nuser=a",
        &["hunter2", "second", "third"],
        Some("host=db password=***\nuser=a"),
    ),
    // In a libpq string `&` and `;` are a password's characters, not separators.
    case(
        "host=db password=&pw;with spaces user=a",
        &["&pw", "with", "spaces"],
        Some("host=db password=*** user=a"),
    ),
    case(
        "host=db password=trailing ",
        &["trailing"],
        Some("host=db password=***"),
    ),
    case(
        "host=db password='never closed secret",
        &["never", "closed", "secret"],
        Some("host=db password=***"),
    ),
    case(
        "host=db sslpassword=keypw user=a",
        &["keypw"],
        Some("host=db sslpassword=*** user=a"),
    ),
    case(
        "Server=db;User Id=a;Password=hunter2;",
        &["hunter2"],
        Some("Server=db;User Id=a;Password=***;"),
    ),
    // Without a scheme.
    case("app:hunter2@db:5432", &["hunter2"], Some("app:***@db:5432")),
    case(
        "file:anarchon.db?password=hunter2",
        &["hunter2"],
        Some("file:anarchon.db?password=***"),
    ),
    // Nothing secret: unchanged.
    case("/var/lib/anarchon.db", &[], Some("/var/lib/anarchon.db")),
    case("", &[], Some("")),
];

#[test]
fn tricky_credentials_never_survive_redaction() {
    assert!(CASES.len() >= 20);
    for Case {
        input,
        secrets,
        expected,
    } in CASES
    {
        let out = redact_url(input);
        for secret in *secrets {
            assert!(
                !out.contains(secret),
                "{input:?} → {out:?} still shows {secret:?}"
            );
        }
        if let Some(expected) = expected {
            assert_eq!(&out, expected, "{input:?}");
        }
        // Redacting twice changes nothing more.
        assert_eq!(redact_url(&out), out, "{input:?} is not stable");
    }
}

/// The password with libpq's escapes for a single-quoted value.
fn libpq_quoted(password: &str) -> String {
    let mut out = String::from("'");
    for c in password.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

proptest! {
    /// Any printable password, in a URL as a user would paste it or in a key=value string
    /// quoted as libpq wants it, is hidden.
    #[test]
    fn any_password_is_hidden(password in "[ -~]{8,24}") {
        let url = format!("postgres://app:{password}@db.internal:5432/x");
        let kv = format!("host=db.internal password={} user=app", libpq_quoted(&password));
        // Unquoted, as a user types it: a space inside is not libpq's, but still secret.
        let unquoted = format!("host=db.internal password={password} user=app");
        let query = format!(
            "postgres://db.internal/x?password={}&sslmode=require",
            url::form_urlencoded::byte_serialize(password.as_bytes()).collect::<String>()
        );
        for input in [url, kv, query, unquoted] {
            let template = input.replace(&password, "");
            // A password that is a piece of the surrounding text proves nothing.
            prop_assume!(!template.contains(password.trim()));
            let out = redact_url(&input);
            prop_assert!(
                !out.contains(password.trim()),
                "{:?} → {:?}", input, out
            );
        }
    }
}
