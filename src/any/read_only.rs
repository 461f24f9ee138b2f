//! [`open_read_only`](super::open_read_only): a server store opened to be read, with the
//! check that a store lives under the namespace given, and nothing written. The checks'
//! calls are bounded by the store's own timeouts (Redis's command timeout, PostgreSQL's
//! pool and `statement_timeout`), which `AnyOptions::timeout` sets.

#[cfg(any(feature = "postgres", feature = "redis"))]
use anarchon_core::Error;

/// How many keys one `SCAN` of [`check_redis_prefix`] asks for, and how many pages it reads
/// at most (about 100,000 keys, a few ms each page): enough to name the prefixes of a server
/// that holds a few stores beside other data, without walking a large keyspace.
#[cfg(feature = "redis")]
const REDIS_SCAN: (u32, usize) = (1_000, 100);

/// The number of single-character edits between `a` and `b` (Levenshtein), to name the
/// prefixes nearest a mistyped one first.
#[cfg(feature = "redis")]
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Refuses a Redis prefix under which no anarchon store lives (neither `<prefix>meta`,
/// which every store writes when it starts, nor `<prefix>jobs` exists), so a typo says so
/// instead of answering "no jobs": an [`Error::InvalidOption`] for `prefix` naming the
/// prefixes of the anarchon stores the server does hold, nearest first. It only reads:
/// `EXISTS`, then a short `SCAN` for the `*meta` keys of other prefixes.
#[cfg(feature = "redis")]
pub(super) async fn check_redis_prefix(
    store: &anarchon_redis::RedisStore,
    prefix: &str,
) -> anarchon_core::Result<()> {
    use anarchon_redis::fred::interfaces::ClientLike;
    use anarchon_redis::fred::types::{ClusterHash, CustomCommand, Value};

    const OPERATION: &str = "check the prefix";
    let client = store.client();
    let failed =
        |e: anarchon_redis::fred::error::Error| Error::store("redis", OPERATION, e.to_string());
    let mut found = 0i64;
    // One key at a time: in a cluster the two keys may live on different nodes.
    for key in [format!("{prefix}meta"), format!("{prefix}jobs")] {
        let n: i64 = client
            .custom(
                CustomCommand::new_static("EXISTS", ClusterHash::FirstKey, false),
                vec![key],
            )
            .await
            .map_err(failed)?;
        found += n;
    }
    if found > 0 {
        return Ok(());
    }
    let mut cursor = "0".to_owned();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..REDIS_SCAN.1 {
        let page: Vec<Value> = client
            .custom(
                CustomCommand::new_static("SCAN", ClusterHash::Random, false),
                vec![
                    cursor.clone(),
                    "MATCH".into(),
                    "*meta".into(),
                    "COUNT".into(),
                    REDIS_SCAN.0.to_string(),
                ],
            )
            .await
            .map_err(failed)?;
        let mut page = page.into_iter();
        cursor = page
            .next()
            .and_then(|v| v.into_string())
            .unwrap_or_else(|| "0".into());
        let keys: Vec<String> = match page.next() {
            Some(Value::Array(keys)) => keys.into_iter().filter_map(|k| k.into_string()).collect(),
            _ => Vec::new(),
        };
        for key in keys {
            if let Some(other) = key.strip_suffix("meta")
                && !other.is_empty()
                && other.len() <= 64
            {
                seen.insert(other.to_owned());
            }
        }
        if cursor == "0" || seen.len() >= 1_000 {
            break;
        }
    }
    // The prefixes nearest the one given first (a typo is a few edits away), then only
    // the keys that are an anarchon store's meta hash (it holds `format`).
    let mut seen: Vec<String> = seen.into_iter().collect();
    seen.sort_by_key(|other| (edit_distance(other, prefix), other.clone()));
    let mut stores = Vec::new();
    for other in seen.into_iter().take(10) {
        let is_ours: i64 = client
            .custom(
                CustomCommand::new_static("HEXISTS", ClusterHash::FirstKey, false),
                vec![format!("{other}meta"), "format".to_owned()],
            )
            .await
            .unwrap_or(0);
        if is_ours == 1 {
            // Debug-quoted: a key may hold control characters.
            stores.push(format!("{other:?}"));
        }
    }
    let reason = if stores.is_empty() {
        format!(
            "nothing is stored under {prefix:?}: neither its meta nor its jobs key exists, \
                 and no other anarchon prefix was seen on this server (database); check the \
                 URL's database number and the application's key prefix"
        )
    } else {
        format!(
            "nothing is stored under {prefix:?}: neither its meta nor its jobs key exists; \
                 this server holds anarchon stores under the prefix {}",
            stores.join(", ")
        )
    };
    Err(Error::invalid_option("prefix", reason))
}

/// Refuses a PostgreSQL schema that holds no anarchon tables of the table prefix, so a
/// typo says so instead of failing on the first query (or answering "no jobs"): an
/// [`Error::InvalidOption`] for `table` naming the missing table.
#[cfg(feature = "postgres")]
pub(super) async fn check_postgres_tables(
    store: &anarchon_postgres::PostgresStore,
) -> anarchon_core::Result<()> {
    const OPERATION: &str = "check the tables";
    let (schema, table) = (store.schema(), store.table());
    let names: Vec<String> = ["_meta", "", "_attempts"]
        .iter()
        .map(|suffix| format!("\"{schema}\".\"{table}{suffix}\""))
        .collect();
    let failed = |e: String| Error::store("postgres", OPERATION, e);
    let client = store
        .pool()
        .get()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let row = client
        .query_one(
            "SELECT to_regclass($1)::text, to_regclass($2)::text, to_regclass($3)::text",
            &[&names[0], &names[1], &names[2]],
        )
        .await
        .map_err(|e| failed(e.to_string()))?;
    for (i, name) in names.iter().enumerate() {
        if row.get::<_, Option<String>>(i).is_none() {
            return Err(Error::invalid_option(
                "table",
                format!(
                    "the schema {schema:?} has no table {name} of an anarchon store with \
                         the table prefix {table:?}; nothing was created (an application \
                         creates the tables when it starts)"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    #[test]
    fn prefixes_nearest_a_typo_come_first() {
        assert_eq!(edit_distance("myapp:", "myapp:"), 0);
        assert_eq!(edit_distance("myap:", "myapp:"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let mut seen = ["zzz:", "other:", "myapp:"];
        seen.sort_by_key(|o| edit_distance(o, "mypp:"));
        assert_eq!(seen[0], "myapp:");
    }
}
