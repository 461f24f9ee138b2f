//! Fenced transactions: a handler's writes to the scheduler's own database, committed only
//! while its attempt still owns the run, and optionally in the same commit as the run's
//! success. See [`PostgresStore::fenced_transaction`].
//!
//! How the fence holds, on PostgreSQL:
//!
//! - **Start**: `START TRANSACTION ISOLATION LEVEL READ COMMITTED`, then, pipelined in one
//!   round trip: `lock_timeout` lowered to the store's timeout and
//!   `idle_in_transaction_session_timeout` set to [`crate::PostgresOptions::fenced_idle_timeout`]
//!   (both `SET LOCAL`: they end with the transaction), `pg_advisory_xact_lock` of the run's
//!   key, and the check of the run row (running, attempt, owner, the attempt's fence, lease
//!   not ended on the database clock). The check is a statement of its own, so its snapshot
//!   is taken once the lock is granted and sees every takeover that committed before.
//! - **While open**: the transaction holds the run's advisory lock and no row lock.
//!   A takeover tries that lock without waiting (`pg_try_advisory_xact_lock`) and answers
//!   `Live` while it is held; heartbeats, which take no advisory lock, keep renewing the
//!   lease. Claims, releases and finishes are not held off: whatever they change is found
//!   by the check before commit.
//! - **Commit**: pipelined in one round trip with the `COMMIT`: the run row is locked
//!   (`FOR NO KEY UPDATE`) and checked again (running, attempt, owner, fence; the lease is
//!   not judged again, since no takeover could happen meanwhile); a loss fails the
//!   statement, so the `COMMIT` after it rolls back. `commit_finished` also writes the run
//!   `succeeded` (its row holds the attempt's history), as `LeaseStore::finish` does.
//!
//! READ COMMITTED is required, not a default: under REPEATABLE READ or SERIALIZABLE the
//! transaction's snapshot is taken by its first statement, before the lock is granted, so
//! the start's check could miss a takeover that committed while it waited, and the check
//! before commit would fail with a serialization error after every heartbeat.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use anarchon_core::JobContext;
use anarchon_core::store::{AttemptKey, Error, FenceLoss, Result, RunStatus};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::error::KIND;
use crate::sql::FENCED_LOSS;
use crate::store::check_instance;
use crate::{Inner, PostgresStore};

/// How much longer than the store's timeout the client waits for the answers to a fenced
/// transaction's own statements: the server's `lock_timeout` (the store's timeout) ends a
/// lock wait first, so the answer says what happened rather than nothing.
const CLIENT_MARGIN: Duration = Duration::from_secs(1);

/// Lowers `lock_timeout` for the start's lock wait (saving the session's value, which the
/// check restores) and bounds the transaction's idle time. `set_config(.., true)` is
/// `SET LOCAL`. The target list is evaluated left to right: the value is saved first.
const START_SETTINGS: &str = "SELECT set_config('anarchon.saved_lock_timeout', \
     current_setting('lock_timeout'), true), set_config('lock_timeout', $1, true), \
     set_config('idle_in_transaction_session_timeout', $2, true)";

/// Bounds the wait for the run row's lock before commit.
const COMMIT_SETTINGS: &str = "SELECT set_config('lock_timeout', $1, true)";

/// Takes the run's advisory lock until the transaction ends.
const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";

/// A transaction on the scheduler's PostgreSQL database that commits only while the
/// handler's attempt still owns its run: open it with
/// [`PostgresStore::fenced_transaction`].
///
/// It dereferences to the [`tokio_postgres::Transaction`] for the handler's own
/// statements (savepoints included). End it with [`FencedTransaction::commit`] (its writes
/// only), [`FencedTransaction::commit_finished`] (its writes and the run's success, in one
/// commit) or [`FencedTransaction::rollback`]; dropping it rolls back. Do not send
/// `COMMIT` or `ROLLBACK` yourself, nor change the isolation level: the fence is only
/// checked by this type's methods.
pub struct FencedTransaction<'a> {
    tx: Transaction<'a>,
    store: PostgresStore,
    key: AttemptKey,
    ctx: JobContext,
}

impl std::fmt::Debug for FencedTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("attempt", &self.key)
            .finish_non_exhaustive()
    }
}

impl<'a> Deref for FencedTransaction<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl DerefMut for FencedTransaction<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// A duration as the text of a whole number of milliseconds (rounded up, at least 1), as
/// `set_config` takes a time setting.
fn ms_text(d: Duration) -> String {
    d.as_micros().div_ceil(1_000).max(1).to_string()
}

/// Reads a loss as the check statements write it (see `sql::fenced_check_sql`).
fn parse_loss(text: &str) -> Option<FenceLoss> {
    Some(match text {
        "missing" => FenceLoss::Missing,
        "superseded" => FenceLoss::Superseded,
        "released" => FenceLoss::Released,
        "lease ended" => FenceLoss::LeaseEnded,
        other => FenceLoss::Finished(RunStatus::parse(other.strip_prefix("finished:")?)?),
    })
}

/// The loss a failing check before commit carries in its error message, if `e` is that.
fn loss_in(e: &tokio_postgres::Error) -> Option<FenceLoss> {
    let db = e.as_db_error()?;
    if *db.code() != SqlState::INVALID_TEXT_REPRESENTATION {
        return None;
    }
    let message = db.message();
    let rest = &message[message.find(FENCED_LOSS)? + FENCED_LOSS.len()..];
    parse_loss(rest.split('"').next()?)
}

/// The error of a transaction that found its attempt no longer owns the run.
fn fenced(key: &AttemptKey, loss: FenceLoss) -> Error {
    tracing::debug!(
        job = %key.run.job,
        slot = key.run.slot,
        attempt = key.attempt,
        fence = key.fence,
        %loss,
        "postgres fenced transaction lost its run"
    );
    Error::Fenced {
        job: key.run.job.to_string(),
        slot: key.run.slot,
        attempt: key.attempt,
        loss,
    }
}

/// Why a commit's outcome is not known: the connection failed or went silent after the
/// `COMMIT` was sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} after COMMIT was sent for {key}: whether the fenced transaction committed is \
     unknown; read the run's status (succeeded means it did), and drop this connection"
)]
struct CommitUnknown {
    what: String,
    key: String,
}

impl Inner {
    fn closed_check(&self) -> Result<()> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(self.closed_error());
        }
        Ok(())
    }

    /// The client-side bound of one round trip of a fenced transaction.
    fn fenced_bound(&self) -> Duration {
        self.timeout.saturating_add(CLIENT_MARGIN)
    }

    /// A driver error of a fenced transaction's own statement: a lock wait ended by
    /// `lock_timeout` is a timeout like a statement cut by `statement_timeout`.
    fn fenced_error(&self, e: tokio_postgres::Error, operation: &'static str) -> Error {
        if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return Error::Timeout {
                store: KIND,
                operation,
                after: self.timeout,
            };
        }
        self.pg(e, operation)
    }
}

impl PostgresStore {
    /// Opens a fenced transaction on `client` for the attempt `ctx` runs: a READ COMMITTED
    /// transaction that has checked, inside itself, that this attempt still owns the run
    /// (running, same attempt, owner and fence, lease not ended on the database clock) and
    /// holds that until it ends. Either it commits while this attempt owns the run, or it
    /// fails with [`Error::Fenced`] and nothing of it is kept.
    ///
    /// `client` must reach the database that holds the store's tables (any connection to
    /// it: your own, or [`PostgresStore::connection`] from the store's pool). While the
    /// transaction is open no backup takes the run over, even after the lease ended (a
    /// takeover answers `Live`), and heartbeats go on; a claim of a later slot may still
    /// mark an ended run `interrupted`, a graceful stop may hand it over, and then the
    /// commit fails `Fenced`. An owner frozen with the transaction open holds the takeover
    /// off until the server ends its idle session
    /// ([`crate::PostgresOptions::fenced_idle_timeout`]).
    ///
    /// Two round trips; the commit is one more (with the `COMMIT`). Each is bounded by the
    /// store's timeout: on the server by `lock_timeout`, and on the client by the timeout
    /// plus one second.
    ///
    /// # Errors
    ///
    /// [`Error::NotFenceable`] for a manual run; [`Error::Fenced`] when this attempt no
    /// longer owns the run (nothing was written, the transaction is rolled back);
    /// [`Error::Timeout`] when the run's lock was not granted in time (another fenced
    /// transaction of the same attempt is open); [`Error::Unavailable`] and
    /// [`Error::Store`] for the connection and the server; [`Error::Unavailable`] after
    /// the store was closed.
    ///
    /// ```no_run
    /// # async fn handler(
    /// #     store: anarchon_postgres::PostgresStore,
    /// #     ctx: anarchon_core::JobContext,
    /// # ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// // In the handler: credit an account once per slot, and record the run's success in
    /// // the same commit.
    /// let mut conn = store.connection().await?;
    /// let tx = store.fenced_transaction(&mut conn, &ctx).await?;
    /// tx.execute(
    ///     "INSERT INTO ledger (slot, amount) VALUES ($1, $2)",
    ///     &[&ctx.slot_ms(), &10_i64],
    /// )
    /// .await?;
    /// tx.commit_finished().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fenced_transaction<'a>(
        &self,
        client: &'a mut Client,
        ctx: &JobContext,
    ) -> Result<FencedTransaction<'a>> {
        let key = ctx.attempt_key()?;
        self.begin_fenced(client, key, ctx.clone()).await
    }

    /// A connection of the store's pool, for [`PostgresStore::fenced_transaction`]
    /// (it dereferences to a [`tokio_postgres::Client`]): the pool's settings apply to
    /// your statements too, `statement_timeout` = the store's timeout among them (raise it
    /// with `SET LOCAL statement_timeout` inside the transaction). Dropping it returns it
    /// to the pool. Bounded by the store's timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] and [`Error::Timeout`] when no connection could be had, or
    /// after the store was closed.
    pub async fn connection(&self) -> Result<deadpool_postgres::Object> {
        self.inner.client("fenced connection").await
    }

    /// Opens a fenced transaction for `key` (see [`PostgresStore::fenced_transaction`]).
    async fn begin_fenced<'a>(
        &self,
        client: &'a mut Client,
        key: AttemptKey,
        ctx: JobContext,
    ) -> Result<FencedTransaction<'a>> {
        const OP: &str = "fenced transaction";
        let inner = &*self.inner;
        inner.closed_check()?;
        check_instance(&key.instance_id)?;
        let bound = inner.fenced_bound();
        let start = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start();
        let tx = match tokio::time::timeout(bound, start).await {
            Ok(Ok(tx)) => tx,
            Ok(Err(e)) => return Err(inner.fenced_error(e, OP)),
            Err(_) => {
                return Err(Error::Timeout {
                    store: KIND,
                    operation: OP,
                    after: bound,
                });
            }
        };
        let lock_ms = ms_text(inner.timeout);
        let idle_ms = ms_text(inner.fenced_idle_timeout);
        let job = key.run.job.as_str();
        let slot = key.run.slot;
        let lock_key = inner.names.run_lock_key(job, slot);
        let attempt = i32::try_from(key.attempt).unwrap_or(i32::MAX);
        let fence = i64::try_from(key.fence).unwrap_or(i64::MAX);
        let owner = key.instance_id.as_str();
        let check_lease = true;
        let settings: [(&(dyn ToSql + Sync), Type); 2] =
            [(&lock_ms, Type::TEXT), (&idle_ms, Type::TEXT)];
        let lock: [(&(dyn ToSql + Sync), Type); 1] = [(&lock_key, Type::INT8)];
        let check: [(&(dyn ToSql + Sync), Type); 6] = [
            (&job, Type::TEXT),
            (&slot, Type::INT8),
            (&attempt, Type::INT4),
            (&owner, Type::TEXT),
            (&fence, Type::INT8),
            (&check_lease, Type::BOOL),
        ];
        // One round trip: tokio-postgres sends each request at its future's first poll, and
        // `join!` polls them in order.
        let work = async {
            let (set, locked, checked) = futures::join!(
                tx.query_typed(START_SETTINGS, &settings),
                tx.query_typed(LOCK, &lock),
                tx.query_typed(&inner.sql.fenced_check, &check),
            );
            set?;
            locked?;
            checked
        };
        let rows = match tokio::time::timeout(bound, work).await {
            Ok(Ok(rows)) => rows,
            // Dropping `tx` sends the ROLLBACK.
            Ok(Err(e)) => return Err(inner.fenced_error(e, OP)),
            Err(_) => {
                return Err(Error::Timeout {
                    store: KIND,
                    operation: OP,
                    after: bound,
                });
            }
        };
        let loss: Option<String> = match rows.first().map(|r| r.try_get(1)) {
            Some(Ok(loss)) => loss,
            Some(Err(e)) => return Err(Error::store(KIND, OP, e)),
            None => return Err(Error::store(KIND, OP, "the check answered no row")),
        };
        if let Some(loss) = loss {
            let loss = parse_loss(&loss).ok_or_else(|| {
                Error::store(
                    KIND,
                    OP,
                    format!("the check answered an unknown loss {loss:?}"),
                )
            })?;
            // Rolled back before the error is returned, so the connection is ready for
            // the caller's next statement.
            let _ = tokio::time::timeout(bound, tx.rollback()).await;
            return Err(fenced(&key, loss));
        }
        Ok(FencedTransaction {
            tx,
            store: self.clone(),
            key,
            ctx,
        })
    }
}

impl FencedTransaction<'_> {
    /// The attempt this transaction is fenced on.
    pub fn attempt_key(&self) -> &AttemptKey {
        &self.key
    }

    /// Commits the transaction's writes if this attempt still owns the run; the run stays
    /// `running` (the scheduler records its end as usual). One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Fenced`] when the run was finished, interrupted, handed over or pruned
    /// meanwhile: rolled back, nothing kept. [`Error::Timeout`], [`Error::Store`] (a
    /// statement of the transaction had failed, a deferred constraint) or
    /// [`Error::Unavailable`]: rolled back, except when the error says the outcome is
    /// unknown (the connection was lost after `COMMIT` was sent).
    pub async fn commit(self) -> Result<()> {
        self.end(false).await
    }

    /// Commits the transaction's writes and records the run `succeeded` (the run row, which
    /// holds this attempt's history, `finished_at` on the database clock) in the same commit,
    /// if this attempt still owns the run; then tells the scheduler
    /// ([`JobContext::mark_finished_in_transaction`]), which writes no result of its own
    /// for the attempt. One round trip. The job's older runs are pruned by its next
    /// claims, not by this commit.
    ///
    /// # Errors
    ///
    /// As [`FencedTransaction::commit`]; on any error the run is not recorded either.
    pub async fn commit_finished(self) -> Result<()> {
        self.end(true).await
    }

    /// Rolls the transaction back (as dropping it does), and waits for the answer.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], [`Error::Unavailable`] or [`Error::Store`] when the rollback
    /// got no clean answer; the server rolls back a transaction whose session ends anyway.
    pub async fn rollback(self) -> Result<()> {
        const OP: &str = "fenced rollback";
        let inner = &*self.store.inner;
        let bound = inner.fenced_bound();
        match tokio::time::timeout(bound, self.tx.rollback()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(inner.fenced_error(e, OP)),
            Err(_) => Err(Error::Timeout {
                store: KIND,
                operation: OP,
                after: bound,
            }),
        }
    }

    /// The check before commit, the run's success when `finished`, and the `COMMIT`, in
    /// one round trip.
    async fn end(self, finished: bool) -> Result<()> {
        const OP: &str = "fenced commit";
        let FencedTransaction {
            tx,
            store,
            key,
            ctx,
        } = self;
        let inner = &*store.inner;
        if tx.client().is_closed() {
            // Nothing was sent: the server ended the session (idle longer than
            // `fenced_idle_timeout`, terminated, or the connection broke) and rolled back.
            return Err(Error::Unavailable {
                store: KIND,
                target: inner.target.clone(),
                source: format!(
                    "the connection of the fenced transaction of {key} was closed before its \
                     commit (the server ended the session: terminated, restarted, or idle in \
                     the transaction longer than fenced_idle_timeout; or the network broke); \
                     nothing of the transaction was kept"
                )
                .into(),
            });
        }
        let bound = inner.fenced_bound();
        let lock_ms = ms_text(inner.timeout);
        let job = key.run.job.as_str();
        let slot = key.run.slot;
        let attempt = i32::try_from(key.attempt).unwrap_or(i32::MAX);
        let fence = i64::try_from(key.fence).unwrap_or(i64::MAX);
        let owner = key.instance_id.as_str();
        let check_lease = false;
        let settings: [(&(dyn ToSql + Sync), Type); 1] = [(&lock_ms, Type::TEXT)];
        let check: [(&(dyn ToSql + Sync), Type); 6] = [
            (&job, Type::TEXT),
            (&slot, Type::INT8),
            (&attempt, Type::INT4),
            (&owner, Type::TEXT),
            (&fence, Type::INT8),
            (&check_lease, Type::BOOL),
        ];
        let finish: [(&(dyn ToSql + Sync), Type); 4] = [
            (&job, Type::TEXT),
            (&slot, Type::INT8),
            (&attempt, Type::INT4),
            (&owner, Type::TEXT),
        ];
        let work = async {
            futures::join!(
                tx.query_typed(COMMIT_SETTINGS, &settings),
                tx.query_typed(&inner.sql.fenced_recheck, &check),
                async {
                    if finished {
                        tx.query_typed(&inner.sql.fenced_finish, &finish)
                            .await
                            .map(Some)
                    } else {
                        Ok(None)
                    }
                },
                tx.batch_execute("COMMIT"),
            )
        };
        let answer = tokio::time::timeout(bound, work).await;
        // The COMMIT was sent: the transaction ends there (committed or, after an error
        // before it, rolled back), so `tx` must not send its ROLLBACK on drop. It holds a
        // reference and no allocation, so forgetting it leaks nothing.
        std::mem::forget(tx);
        let unknown = |what: String| {
            Error::store(
                KIND,
                OP,
                CommitUnknown {
                    what,
                    key: key.to_string(),
                },
            )
        };
        let (set, checked, written, committed) = match answer {
            Ok(results) => results,
            Err(_) => return Err(unknown(format!("no answer within {bound:?}"))),
        };
        // A statement the server refused before the COMMIT made it a rollback: that
        // statement's error says why. An error without an answer from the server (a lost
        // connection) leaves the outcome unknown.
        for result in [set.map(drop), checked.map(drop), written.map(drop)] {
            if let Err(e) = result {
                if let Some(loss) = loss_in(&e) {
                    return Err(fenced(&key, loss));
                }
                if e.as_db_error().is_none() {
                    return Err(unknown(e.to_string()));
                }
                return Err(inner.fenced_error(e, OP));
            }
        }
        match committed {
            Ok(()) => {
                if finished {
                    ctx.mark_finished_in_transaction();
                }
                Ok(())
            }
            Err(e) if e.as_db_error().is_none() => Err(unknown(e.to_string())),
            // The server refused the COMMIT (a deferred constraint): rolled back.
            Err(e) => Err(inner.fenced_error(e, OP)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ms_text, parse_loss};
    use anarchon_core::store::{FenceLoss, RunStatus};
    use std::time::Duration;

    #[test]
    fn losses_read_as_the_statements_write_them() {
        assert_eq!(parse_loss("missing"), Some(FenceLoss::Missing));
        assert_eq!(parse_loss("superseded"), Some(FenceLoss::Superseded));
        assert_eq!(parse_loss("released"), Some(FenceLoss::Released));
        assert_eq!(parse_loss("lease ended"), Some(FenceLoss::LeaseEnded));
        assert_eq!(
            parse_loss("finished:interrupted"),
            Some(FenceLoss::Finished(RunStatus::Interrupted))
        );
        assert_eq!(
            parse_loss("finished:succeeded"),
            Some(FenceLoss::Finished(RunStatus::Succeeded))
        );
        assert_eq!(parse_loss("finished:nonsense"), None);
        assert_eq!(parse_loss("other"), None);
    }

    #[test]
    fn settings_are_whole_milliseconds_rounded_up() {
        assert_eq!(ms_text(Duration::from_secs(30)), "30000");
        assert_eq!(ms_text(Duration::from_micros(1_500)), "2");
        assert_eq!(ms_text(Duration::from_micros(1)), "1");
    }
}
