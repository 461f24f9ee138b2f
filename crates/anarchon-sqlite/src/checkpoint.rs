//! Checkpoints off the write path: the store's connection does not checkpoint the WAL in its
//! own commits; its WAL hook (which replaces SQLite's automatic checkpoint) tells a thread of
//! the store with a connection of its own once a commit leaves [`DUE_PAGES`] pages or more in
//! the WAL, as SQLite's own hook would have checkpointed, and the thread checkpoints at most
//! every [`EVERY`].
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages,
//! on the committing connection: the pages written since are copied into the database file
//! and both files are flushed to disk, and the store's thread, the only one serving its
//! calls, waits for that before the next claim. With three processes writing 10,000 runs a
//! second into one file that was a checkpoint every few tens of milliseconds in every
//! process, and 70 % of the time from a transaction's `BEGIN` to the end of its `COMMIT` was
//! the `COMMIT` (measured: docs/performance.md). A `PASSIVE` checkpoint needs no write lock
//! (it copies what no reader still needs and leaves the rest for the next), so on a thread of
//! its own it no longer holds up the calls; the WAL is checkpointed at the same size as before
//! (or later, at most [`EVERY`], under load), and never while the store is idle. A WAL grown
//! past [`RESTART_FRAMES`] is restarted by a `RESTART` checkpoint, so it stays bounded while
//! commits never pause.
//!
//! The thread ends when the store's connection closes (the notifying side is dropped), and
//! closes its connection after the store's.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

/// The least time between two checkpoints of one store: the commits in between share one.
pub(crate) const EVERY: Duration = Duration::from_millis(50);

/// The WAL's length in pages from which a commit makes a checkpoint due: SQLite's default
/// for its automatic checkpoint (`wal_autocheckpoint`), so a lightly loaded store checkpoints
/// (and flushes the file) no more often than SQLite would.
pub(crate) const DUE_PAGES: i32 = 1_000;

/// The WAL's length in frames (pages) past which the thread's checkpoint also restarts it
/// (`RESTART`: it takes the write lock, copies what is left and waits for readers to leave
/// the WAL, at most [`OPEN_WAIT`] each), so that the next commit writes the WAL from its
/// start and cuts the file back to the store's `journal_size_limit`. A `PASSIVE`
/// checkpoint never blocks a writer, so while commits follow each other without a pause
/// (one process's burst, or several processes) the WAL is never all copied when the next
/// write begins and would grow without end: 16,384 frames, 64 MiB at the default page
/// size, the size the WAL is cut back to.
const RESTART_FRAMES: i64 = 16_384;

/// How long the checkpoint's connection waits for a lock: to open and read the file, and in
/// a `RESTART` for the write lock and for readers to leave the WAL.
const OPEN_WAIT: Duration = Duration::from_millis(100);

/// Tells the store's checkpoint thread that its connection committed. Dropping it ends the
/// thread and waits for it, so the file is let go of when the store's connection closes.
pub(crate) struct Checkpointer {
    /// Set by the WAL hook, cleared by the thread as it starts a checkpoint: only the first
    /// commit that makes a checkpoint due wakes the thread (a wake-up per commit cost the store's
    /// thread more than the commit itself: an empty transaction took 24 µs instead of 5).
    due: Arc<AtomicBool>,
    committed: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens the checkpoint's connection to the file at `path` (already in WAL mode) and
    /// starts its thread. `None` when either fails: the store's connection then checkpoints
    /// as SQLite does by default.
    pub(crate) fn start(path: &Path, synchronous: &'static str) -> Option<Checkpointer> {
        let conn = open(path, synchronous)?;
        let (committed, commits) = mpsc::sync_channel::<()>(1);
        let path = path.to_owned();
        let due = Arc::new(AtomicBool::new(false));
        let thread_due = due.clone();
        let thread = std::thread::Builder::new()
            .name("anarchon-sqlite-checkpoint".into())
            .spawn(move || run(&path, &conn, &thread_due, &commits))
            .inspect_err(|e| {
                tracing::warn!(error = %e, "could not start the SQLite checkpoint thread");
            })
            .ok()?;
        Some(Checkpointer {
            due,
            committed: Some(committed),
            thread: Some(thread),
        })
    }

    /// Installs the WAL hook on the store's connection `conn`, in place of SQLite's automatic
    /// checkpoint: a commit that leaves [`DUE_PAGES`] or more pages in the WAL makes a
    /// checkpoint due on the thread. The hook holds a sender of the thread's channel, so the
    /// connection must close before the `Checkpointer` is dropped (the `Worker`'s field order).
    pub(crate) fn hook(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let (due, Some(committed)) = (self.due.clone(), self.committed.clone()) else {
            return Ok(());
        };
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            // Already due: the thread is awake or about to be, and this commit's pages go
            // with the checkpoint it is waiting to run.
            if pages >= DUE_PAGES && !due.swap(true, Ordering::AcqRel) {
                let _ = committed.try_send(());
            }
            Ok(())
        }))
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.committed = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checkpoints after a commit, at most every [`EVERY`]; returns once the store's side is
/// gone (SQLite checkpoints at the close of the file's last connection).
fn run(path: &Path, conn: &Connection, due: &AtomicBool, commits: &mpsc::Receiver<()>) {
    let mut last = Instant::now() - EVERY;
    let mut warned: Option<Instant> = None;
    while commits.recv().is_ok() {
        // The commits that come until EVERY has passed since the last checkpoint go in
        // this one (no commit sends while it is due, so this only wakes for the close).
        let at = last + EVERY;
        loop {
            let now = Instant::now();
            if now >= at {
                break;
            }
            match commits.recv_timeout(at - now) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        // Cleared before the checkpoint: a commit from now on wakes the thread again, and
        // its pages go in the next one.
        due.store(false, Ordering::Release);
        last = Instant::now();
        // Busy (another process's checkpoint is running) is an answer, not an error: its
        // first column is 1 then, and that checkpoint copies these pages too. The second
        // column is the WAL's length in frames.
        let passive = checkpoint(conn, Mode::Passive);
        let checkpointed = match passive {
            Ok(frames) if frames >= RESTART_FRAMES => {
                checkpoint(conn, Mode::Restart).map(|_| ()).or_else(|e| {
                    // Busy past `OPEN_WAIT`: a writer or reader held on; the next try comes.
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
            }
            other => other.map(|_| ()),
        };
        if let Err(e) = checkpointed
            && warned.is_none_or(|w| w.elapsed() >= Duration::from_secs(60))
        {
            warned = Some(Instant::now());
            tracing::warn!(
                path = %path.display(),
                error = %e,
                "an SQLite checkpoint failed; the WAL grows until one succeeds"
            );
        }
    }
}

/// The checkpoints the thread runs.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Copies what no reader needs; never waits, never blocks a writer.
    Passive,
    /// Takes the write lock, copies the rest and waits for readers to leave the WAL, so the
    /// next commit writes the WAL from its start; every writer of the file waits meanwhile.
    Restart,
}

impl Mode {
    fn pragma(self) -> &'static str {
        match self {
            Mode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
            Mode::Restart => "PRAGMA wal_checkpoint(RESTART)",
        }
    }
}

/// Runs one checkpoint and returns the WAL's length in frames. What it did and how long it
/// took is a `debug` event (target `anarchon_sqlite::checkpoint`), so a stall of the file's
/// writers can be laid beside the checkpoints of the moment: a `RESTART` holds every writer
/// of the file while it runs (docs/performance.md measured 20-50 % of the time in them on a
/// file past its capacity).
fn checkpoint(conn: &Connection, mode: Mode) -> rusqlite::Result<i64> {
    let started = Instant::now();
    let answer = conn.query_row(mode.pragma(), [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    let took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    match &answer {
        Ok((busy, frames, copied)) => tracing::debug!(
            ?mode,
            busy = *busy != 0,
            wal_frames = *frames,
            copied_frames = *copied,
            took_us,
            "SQLite checkpoint"
        ),
        Err(e) => tracing::debug!(?mode, error = %e, took_us, "SQLite checkpoint"),
    }
    answer.map(|(_, frames, _)| frames)
}

fn open(path: &Path, synchronous: &str) -> Option<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .inspect_err(|e| {
            tracing::warn!(path = %path.display(), error = %e,
                "could not open the SQLite checkpoint connection");
        })
        .ok()?;
    conn.busy_timeout(OPEN_WAIT).ok()?;
    conn.pragma_update(None, "synchronous", synchronous).ok()?;
    conn.pragma_update(None, "journal_size_limit", crate::store::WAL_SIZE_LIMIT)
        .ok()?;
    Some(conn)
}
