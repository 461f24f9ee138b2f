//! The claim-only strategies: [`RedisClaimStore`] with `stream-id`, `idmp` or `script`.
//! One winner per slot, no lease: no backup, takeover, overlap check, catch-up or retry.
//! [B-22..B-25]

use std::sync::Arc;

use anarchon_core::store::{
    ClaimStore, EpochMs, Error, HistoryStore, JobName, Prepare, Result, Retention, RunRecord,
    SlotClaim, SlotOutcome, Store,
};
use async_trait::async_trait;
use fred::interfaces::*;
use fred::prelude::{Client, Value};
use fred::types::{ClusterHash, CustomCommand};

use crate::conn::{Conn, STORE, int};
use crate::error::RedisError;
use crate::options::RedisOptions;
use crate::scripts;

/// How a [`RedisClaimStore`] picks the one winner of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// `XADD` with the explicit entry id `<slot>-1` on the job's stream: it is accepted only
    /// if newer than the stream's last id, so the first claim of a slot wins. [B-23]
    /// Redis 5.0+ or Valkey.
    StreamId,
    /// `XADD ... IDMP anarchon <slot>` (Redis 8.6 stream idempotency): the server keeps the
    /// first entry per slot; the winner is the claim whose entry is on top of the stream in
    /// the same transaction. Redis 8.6+ only. [B-24]
    Idmp,
    /// A Lua script checks the job's stream for the slot and appends it if absent, judging
    /// lateness on the server clock. Redis 5.0+ or Valkey. [B-25]
    Script,
}

impl Strategy {
    /// The strategy's name as in configuration (`"stream-id"`, `"idmp"`, `"script"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::StreamId => "stream-id",
            Strategy::Idmp => "idmp",
            Strategy::Script => "script",
        }
    }

    /// Parses [`Strategy::as_str`]'s output. `"lease"` is not a claim-only strategy: use
    /// [`crate::RedisStore`] for it.
    pub fn parse(s: &str) -> std::result::Result<Self, RedisError> {
        match s {
            "stream-id" => Ok(Strategy::StreamId),
            "idmp" => Ok(Strategy::Idmp),
            "script" => Ok(Strategy::Script),
            other => Err(RedisError::InvalidOption {
                option: "strategy",
                reason: format!(
                    "{other:?} is not a claim-only strategy: use \"stream-id\", \"idmp\" or \"script\" \
                     (the lease strategy is RedisStore)"
                ),
            }),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A claim-only Redis/Valkey store (strategies `stream-id`, `idmp`, `script`). History is
/// kept by count only. [B-22..B-25, B-28]
///
/// The claim streams are `<prefix>{<job>}:claims` (`stream-id`, `script`) and
/// `<prefix>{<job>}:idmp`, trimmed to about [`RedisOptions::stream_max_len`] entries.
#[derive(Clone)]
pub struct RedisClaimStore {
    conn: Arc<Conn>,
    strategy: Strategy,
}

impl std::fmt::Debug for RedisClaimStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClaimStore")
            .field("strategy", &self.strategy)
            .field("target", &self.conn.target)
            .field("prefix", &self.conn.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisClaimStore {
    /// Connects to `url` with default options and checks that the server supports the
    /// strategy.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a URL that cannot be read, [`Error::Unavailable`] when
    /// the server cannot be reached, [`Error::ServerTooOld`] when it lacks what the strategy
    /// needs.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::Scheduler;
    /// use anarchon_redis::{RedisClaimStore, Strategy};
    ///
    /// let store = RedisClaimStore::connect("redis://127.0.0.1:6379", Strategy::StreamId).await?;
    /// let scheduler = Scheduler::claim_only(store).build()?;
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub async fn connect(url: &str, strategy: Strategy) -> Result<Self> {
        Self::connect_with(url, strategy, RedisOptions::default()).await
    }

    /// [`RedisClaimStore::connect`] with these options.
    ///
    /// # Errors
    ///
    /// As [`RedisClaimStore::connect`], and [`Error::InvalidOption`] for a bad prefix.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_redis::{RedisClaimStore, RedisOptions, Strategy};
    ///
    /// let options = RedisOptions::default().prefix("myapp:");
    /// let store =
    ///     RedisClaimStore::connect_with("redis://127.0.0.1:6379", Strategy::Script, options).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(
        url: &str,
        strategy: Strategy,
        options: RedisOptions,
    ) -> Result<Self> {
        let store = Self::unconnected_with(url, strategy, options)?;
        store.ready().await?;
        Ok(store)
    }

    /// A store on the user's own `fred` client, checking that the server supports the
    /// strategy ([`Store::close`] leaves the client open).
    ///
    /// # Errors
    ///
    /// As [`RedisClaimStore::connect_with`].
    ///
    /// ```no_run
    /// # async fn demo(client: anarchon_redis::fred::clients::Client) -> anarchon_core::Result<()> {
    /// use anarchon_redis::{RedisClaimStore, RedisOptions, Strategy};
    ///
    /// let store =
    ///     RedisClaimStore::from_client(client, Strategy::StreamId, RedisOptions::default()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn from_client(
        client: Client,
        strategy: Strategy,
        options: RedisOptions,
    ) -> Result<Self> {
        let conn = Conn::from_client(client, options, scripts::claim_scripts().to_vec())?;
        let store = RedisClaimStore {
            conn: Arc::new(conn),
            strategy,
        };
        store.ready().await?;
        Ok(store)
    }

    /// A store on its own connection to `url` that connects at its first call: only the
    /// URL and the options are checked here (test-only, feature `testkit`: use
    /// [`RedisClaimStore::connect_with`]).
    ///
    /// # Errors
    ///
    /// [`RedisError`] for a URL or a prefix that cannot be used.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn unconnected(
        url: &str,
        strategy: Strategy,
        options: RedisOptions,
    ) -> std::result::Result<Self, RedisError> {
        Self::unconnected_with(url, strategy, options)
    }

    fn unconnected_with(
        url: &str,
        strategy: Strategy,
        options: RedisOptions,
    ) -> std::result::Result<Self, RedisError> {
        let conn = Conn::from_url(url, options, scripts::claim_scripts().to_vec())?;
        Ok(RedisClaimStore {
            conn: Arc::new(conn),
            strategy,
        })
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The server found, e.g. `Redis 7.0.15` (connects if needed).
    pub async fn server(&self) -> Result<String> {
        Ok(self.conn.ensure().await?.to_string())
    }

    /// The connection the store uses.
    pub fn client(&self) -> &Client {
        &self.conn.client
    }

    /// Connects and checks that the server supports the strategy.
    async fn ready(&self) -> Result<()> {
        let server = self.conn.ensure().await?;
        if self.strategy == Strategy::Idmp && (server.is_valkey() || server.version < (8, 6, 0)) {
            return Err(Error::ServerTooOld {
                store: STORE,
                found: server.to_string(),
                required: "Redis 8.6 (stream idempotency, needed by the idmp strategy; \
                           Valkey has no equivalent: use stream-id or script there)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Client-side lateness check for the strategies that cannot read the server clock in
    /// the same command (`stream-id`, `idmp`): judged on the server clock estimated from
    /// the last reply that carried it.
    async fn late(&self, not_after: EpochMs) -> Result<bool> {
        let now = match self.conn.estimated_now() {
            Some(now) => now,
            None => self.conn.server_now().await?,
        };
        Ok(now > not_after)
    }

    async fn claim_stream_id(&self, c: &SlotClaim, key: String) -> Result<SlotOutcome> {
        let args: Vec<Value> = vec![
            key.clone().into(),
            "MAXLEN".into(),
            "~".into(),
            i64::try_from(self.conn.opts.stream_max_len)
                .unwrap_or(i64::MAX)
                .into(),
            format!("{}-1", c.run.slot).into(),
            "i".into(),
            c.instance_id.clone().into(),
        ];
        let r: Result<Value> = self.conn.command("claim", "XADD", args).await;
        match r {
            Ok(_) => Ok(SlotOutcome::Won),
            Err(Error::Store { source, .. }) if source.to_string().contains("equal or smaller") => {
                Ok(SlotOutcome::Taken)
            }
            Err(Error::Corrupt { .. }) => Err(crate::conn::corrupt(
                &key,
                "value of another type",
                "stream",
            )),
            Err(e) => Err(e),
        }
    }

    async fn claim_idmp(&self, c: &SlotClaim, key: String) -> Result<SlotOutcome> {
        let nonce = format!("{:016x}", rand::random::<u64>());
        let trx = self.conn.client.multi();
        let xadd = CustomCommand::new_static("XADD", ClusterHash::FirstKey, false);
        let args: Vec<Value> = vec![
            key.clone().into(),
            "IDMP".into(),
            "anarchon".into(),
            c.run.slot.to_string().into(),
            "MAXLEN".into(),
            "~".into(),
            i64::try_from(self.conn.opts.stream_max_len)
                .unwrap_or(i64::MAX)
                .into(),
            "*".into(),
            "i".into(),
            c.instance_id.clone().into(),
            "n".into(),
            nonce.clone().into(),
        ];
        let queued = async {
            let _: () = trx.custom(xadd, args).await?;
            let top = CustomCommand::new_static("XREVRANGE", ClusterHash::FirstKey, false);
            let _: () = trx
                .custom(
                    top,
                    vec![
                        Value::from(key.clone()),
                        "+".into(),
                        "-".into(),
                        "COUNT".into(),
                        1.into(),
                    ],
                )
                .await?;
            trx.exec::<Value>(true).await
        };
        let timeout = self.conn.opts.command_timeout;
        let reply = match tokio::time::timeout(timeout, queued).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(self.conn.map_err("claim", e)),
            Err(_) => {
                return Err(Error::Timeout {
                    store: STORE,
                    operation: "claim",
                    after: timeout,
                });
            }
        };
        // [xadd id, [[id, [field, value, ...]]]]: we won if the top entry carries our nonce.
        let parts = reply.into_array();
        let top = parts
            .get(1)
            .cloned()
            .map(Value::into_array)
            .unwrap_or_default();
        let fields = top
            .first()
            .cloned()
            .map(Value::into_array)
            .unwrap_or_default();
        let fields = fields
            .get(1)
            .cloned()
            .map(Value::into_array)
            .unwrap_or_default();
        let mine = fields.chunks(2).any(|kv| {
            kv.len() == 2
                && kv[0].as_string().as_deref() == Some("n")
                && kv[1].as_string().as_deref() == Some(nonce.as_str())
        });
        Ok(if mine {
            SlotOutcome::Won
        } else {
            SlotOutcome::Taken
        })
    }

    async fn claim_script(&self, c: &SlotClaim, key: String) -> Result<SlotOutcome> {
        let base = self.conn.base(&c.run.job);
        let args = vec![
            base,
            self.conn.deadline(),
            c.run.slot.to_string(),
            c.not_after.to_string(),
            c.instance_id.clone(),
            self.conn.opts.stream_max_len.to_string(),
        ];
        let v = self
            .conn
            .eval("claim", &scripts::SLOT_CLAIM, vec![key], args)
            .await?
            .into_array();
        if let Some(now) = int(v.get(1)) {
            self.conn.observe_clock(now);
        }
        match int(v.first()) {
            Some(1) => Ok(SlotOutcome::Won),
            Some(0) => Ok(SlotOutcome::Taken),
            Some(-1) => Ok(SlotOutcome::Late),
            // The client already gave up on this command; it had no effect.
            Some(-2) => Ok(SlotOutcome::Unknown),
            _ => Err(Error::store(
                STORE,
                "claim",
                format!("unexpected script reply {v:?}"),
            )),
        }
    }
}

#[async_trait]
impl Store for RedisClaimStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.ready().await?;
        self.conn.check_meta().await?;
        self.conn.note_jobs(&prepare.jobs).await
    }

    async fn now(&self) -> Result<EpochMs> {
        self.conn.server_now().await
    }

    async fn close(&self) -> Result<()> {
        self.conn.close().await;
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for RedisClaimStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.conn.history(job, count).await
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.conn
            .note_jobs(std::slice::from_ref(&record.job))
            .await?;
        let id = format!("m:{}|{}", record.slot, record.instance_id);
        let member = format!("m:{}", record.slot);
        let retention = Retention {
            ttl_ms: None,
            ..retention
        };
        self.conn.put_row(record, id, member, retention).await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.conn.known_jobs().await
    }
}

#[async_trait]
impl ClaimStore for RedisClaimStore {
    async fn claim_slot(&self, c: &SlotClaim) -> Result<SlotOutcome> {
        self.ready().await?;
        self.conn
            .note_jobs(std::slice::from_ref(&c.run.job))
            .await?;
        let base = self.conn.base(&c.run.job);
        if self.strategy != Strategy::Script && self.late(c.not_after).await? {
            return Ok(SlotOutcome::Late);
        }
        let outcome = match self.strategy {
            Strategy::StreamId => self.claim_stream_id(c, format!("{base}claims")).await,
            Strategy::Idmp => self.claim_idmp(c, format!("{base}idmp")).await,
            Strategy::Script => self.claim_script(c, format!("{base}claims")).await,
        };
        match outcome {
            // The answer was lost: skip the slot rather than risk a duplicate. [B-29]
            Err(Error::Timeout { .. }) => Ok(SlotOutcome::Unknown),
            other => other,
        }
    }

    async fn record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        // `c:` (claim-only) and `m:` (manual) runs keep their rows in hashes of their own;
        // `l:` is the lease store's, whose rows live in the run hash.
        let kind = if record.manual { "m" } else { "c" };
        let id = format!(
            "{kind}:{}|{}|{}|{}",
            record.slot,
            record.attempt,
            if record.manual { "m" } else { "r" },
            record.instance_id
        );
        let member = format!("{kind}:{}", record.slot);
        let retention = Retention {
            ttl_ms: None,
            ..retention
        };
        self.conn.put_row(record, id, member, retention).await
    }
}
