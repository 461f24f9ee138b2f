//! Errors of opening an SQLite store. They convert into [`anarchon_core::Error`], which is
//! what every method returns, so an application handles one error type.

use std::path::PathBuf;

use anarchon_core::BoxError;

/// Why an SQLite store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The `table` option is not a usable SQL identifier.
    #[error(
        "invalid table prefix {table:?}: {reason}; use an SQL identifier such as \"anarchon_runs\""
    )]
    InvalidTable {
        /// What was given.
        table: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The path names a database no other process can open (`""`, `":memory:"`, a
    /// `file:` URI in memory), so instances could not coordinate through it.
    #[error(
        "the SQLite path {path:?} opens {what} that no other process can see, so instances \
         could not coordinate through it: give a file path every instance opens, such as \
         \"/var/lib/myapp/anarchon.db\" (for tests in one process, use the memory store)"
    )]
    PrivateDatabase {
        /// What was given.
        path: String,
        /// What SQLite would open instead of a shared file.
        what: &'static str,
    },
    /// The directory the database file should be in does not exist.
    #[error(
        "cannot open the SQLite file {path}: its directory {dir} does not exist; create it first"
    )]
    MissingDirectory {
        /// The database file.
        path: PathBuf,
        /// Its missing directory.
        dir: PathBuf,
    },
    /// The file (or its directory) can only be opened for reading.
    #[error(
        "the SQLite file {path} can only be opened read-only; anarchon writes to it on every \
         claim: give this process write access to the file and to its directory"
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
    },
    /// The file exists but is not an SQLite database.
    #[error(
        "{path} is not an SQLite database ({detail}); give anarchon a new file or one it \
         created (nothing was changed)"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// An option is outside the range the store can honour (a timeout of zero or of
    /// centuries): nothing was opened.
    #[error("`{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option's name, as its setter is named (`busy_timeout`).
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted, with the limits.
        allowed: String,
    },
    /// Any other failure to open the file.
    #[error("cannot open the SQLite file {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

impl From<SqliteError> for anarchon_core::Error {
    fn from(e: SqliteError) -> Self {
        match e {
            SqliteError::InvalidTable { .. } => {
                anarchon_core::Error::invalid_option("table", e.to_string())
            }
            SqliteError::PrivateDatabase { .. } => {
                anarchon_core::Error::invalid_option("path", e.to_string())
            }
            SqliteError::OutOfRange {
                option,
                value,
                allowed,
            } => anarchon_core::Error::OutOfRange {
                option,
                value,
                allowed,
            },
            SqliteError::NotADatabase { ref path, .. } => anarchon_core::Error::Corrupt {
                store: "sqlite",
                location: path.display().to_string(),
                reason: e.to_string(),
            },
            SqliteError::MissingDirectory { ref path, .. }
            | SqliteError::ReadOnly { ref path }
            | SqliteError::Open { ref path, .. } => anarchon_core::Error::Unavailable {
                store: "sqlite",
                target: path.display().to_string(),
                source: Box::new(e),
            },
        }
    }
}

/// Refuses a path that gives each connection a database of its own: the empty path (a
/// temporary file SQLite deletes on close), `:memory:`, and `file:` URIs that ask for memory
/// (`file::memory:`, `file:x?mode=memory`). Only a real file coordinates processes.
pub(crate) fn check_shared_path(path: &std::path::Path) -> Result<(), SqliteError> {
    let text = path.to_string_lossy();
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let what = if trimmed.is_empty() {
        Some("a private temporary database")
    } else if lower == ":memory:"
        || (lower.starts_with("file:")
            && (lower.contains(":memory:") || lower.contains("mode=memory")))
    {
        Some("an in-memory database")
    } else {
        None
    };
    match what {
        Some(what) => Err(SqliteError::PrivateDatabase {
            path: text.into_owned(),
            what,
        }),
        None => Ok(()),
    }
}

/// Checks that `value` lies in `min..=max`: [`SqliteError::OutOfRange`] naming `option`
/// otherwise.
pub(crate) fn check_duration(
    option: &'static str,
    value: std::time::Duration,
    min: std::time::Duration,
    max: std::time::Duration,
) -> Result<(), SqliteError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(SqliteError::OutOfRange {
        option,
        value: format!("{value:?}"),
        allowed: format!("from {min:?} to {max:?}"),
    })
}
