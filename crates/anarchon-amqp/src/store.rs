//! [`AmqpStore`]: the connection, the gate queue claim, history streams and known jobs.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicPublishArguments, BasicQosArguments, Channel,
    ConfirmSelectArguments, QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{
    Ack, BasicProperties, Cancel, Close, CloseChannel, DELIVERY_MODE_PERSISTENT,
    DELIVERY_MODE_TRANSIENT, FieldTable, FieldValue, Nack, Return,
};
use anarchon_core::claim_only::{self, Delivery, host_now};
use anarchon_core::store::RunRecord;
use anarchon_core::store::{HistoryStore, Prepare, Retention, SlotClaim, SlotOutcome, Store};
use anarchon_core::{ClaimStore, EpochMs, Error, JobName, Result, redact_url};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::STORE;
use crate::error::AmqpError;
use crate::options::AmqpOptions;

/// The largest segment of a stream queue RabbitMQ accepts (`x-stream-max-segment-size-bytes`).
const MAX_SEGMENT_BYTES: i64 = 3_000_000_000;

/// The oldest RabbitMQ this store supports: streams (history) arrived in 3.9.
const MIN_VERSION: (u32, u32) = (3, 9);

type AmqpResult<T> = std::result::Result<T, amqprs::error::Error>;

fn field(name: &str) -> amqprs::FieldName {
    name.try_into().expect("a short field name")
}

/// Publisher confirms of one channel: delivery tags are 1, 2, 3 ... in publish order.
#[derive(Default)]
struct Confirms {
    next: u64,
    pending: BTreeMap<u64, oneshot::Sender<bool>>,
}

type SharedConfirms = Arc<Mutex<Confirms>>;

fn resolve(confirms: &SharedConfirms, tag: u64, multiple: bool, ack: bool) {
    let mut c = confirms.lock().unwrap_or_else(|e| e.into_inner());
    let tags: Vec<u64> = if multiple {
        c.pending.range(..=tag).map(|(t, _)| *t).collect()
    } else {
        vec![tag]
    };
    for t in tags {
        if let Some(tx) = c.pending.remove(&t) {
            let _ = tx.send(ack);
        }
    }
}

/// Routes confirms to their publishers and remembers why the server closed the channel.
struct ChannelEvents {
    confirms: SharedConfirms,
    closed: Arc<Mutex<Option<String>>>,
}

#[async_trait]
impl ChannelCallback for ChannelEvents {
    async fn close(&mut self, _channel: &Channel, close: CloseChannel) -> AmqpResult<()> {
        let reason = format!("{} {}", close.reply_code(), close.reply_text());
        tracing::debug!(%reason, "RabbitMQ closed a channel");
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        // The publishers waiting on this channel learn at once that no confirm will come.
        self.confirms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pending
            .clear();
        Ok(())
    }
    async fn cancel(&mut self, _channel: &Channel, _cancel: Cancel) -> AmqpResult<()> {
        Ok(())
    }
    async fn flow(&mut self, _channel: &Channel, active: bool) -> AmqpResult<bool> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        // (sic: amqprs spells it `mutiple`.)
        resolve(&self.confirms, ack.delivery_tag(), ack.mutiple(), true);
    }
    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        resolve(&self.confirms, nack.delivery_tag(), nack.multiple(), false);
    }
    async fn publish_return(
        &mut self,
        _channel: &Channel,
        _ret: Return,
        _properties: BasicProperties,
        _content: Vec<u8>,
    ) {
    }
}

struct ConnectionEvents;

#[async_trait]
impl ConnectionCallback for ConnectionEvents {
    async fn close(&mut self, _connection: &Connection, close: Close) -> AmqpResult<()> {
        tracing::warn!(code = close.reply_code(), reason = %close.reply_text(), "RabbitMQ closed the connection");
        Ok(())
    }
    async fn blocked(&mut self, _connection: &Connection, reason: String) {
        tracing::warn!(%reason, "RabbitMQ blocked the connection (resource alarm)");
    }
    async fn unblocked(&mut self, _connection: &Connection) {
        tracing::info!("RabbitMQ unblocked the connection");
    }
    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// A connection and its channel in confirm mode.
struct Live {
    conn: Connection,
    channel: Channel,
    confirms: SharedConfirms,
    closed: Arc<Mutex<Option<String>>>,
    /// Held from taking a delivery tag to handing the publish to the connection, so tags
    /// follow publish order.
    publish: tokio::sync::Mutex<()>,
    /// Held around each synchronous method (declare): amqprs waits for one answer of a
    /// kind per channel at a time.
    rpc: tokio::sync::Mutex<()>,
}

impl Live {
    fn usable(&self) -> bool {
        self.conn.is_open() && self.channel.is_open()
    }

    /// Publishes to the default exchange; the receiver gets `true` for an ack, `false` for
    /// a nack, and an error when the channel closed first.
    async fn publish(
        &self,
        queue: &str,
        properties: BasicProperties,
        body: Vec<u8>,
    ) -> AmqpResult<oneshot::Receiver<bool>> {
        let _order = self.publish.lock().await;
        let (tx, rx) = oneshot::channel();
        let tag = {
            let mut c = self.confirms.lock().unwrap_or_else(|e| e.into_inner());
            c.next += 1;
            let tag = c.next;
            c.pending.insert(tag, tx);
            tag
        };
        if let Err(e) = self
            .channel
            .basic_publish(properties, body, BasicPublishArguments::new("", queue))
            .await
        {
            self.confirms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pending
                .remove(&tag);
            return Err(e);
        }
        Ok(rx)
    }

    fn close_reason(&self) -> Option<String> {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

enum Source {
    /// The connection arguments and the password (to keep it out of error messages).
    Url(Box<OpenConnectionArguments>, String),
    User(Connection),
}

/// How a read of a stream knows it reached the end.
enum End {
    /// At the marker message with this id, appended just before the read.
    Marker(String),
    /// When nothing came for a while (a read-only store may not append a marker); `count`
    /// is the message count the server gave, which may lag.
    Quiet {
        /// The server's message count.
        count: u32,
    },
}

/// How long a read-only read of a stream waits for the next message before it takes the
/// stream as read to its end.
const QUIET: Duration = Duration::from_millis(250);

/// The same while fewer messages came than the server counted.
const QUIET_SHORT_OF_COUNT: Duration = Duration::from_secs(1);

/// One history entry as written to a job's stream.
#[derive(Serialize, Deserialize)]
struct Entry {
    /// `history_size` when it was written: the newest entry's value applies.
    keep: u32,
    record: RunRecord,
}

/// A claim-only store on RabbitMQ. One winner per slot, no lease: no backup, takeover,
/// overlap check, catch-up or retry. History is kept by count only. [B-22, B-26, B-28]
///
/// # How a claim works
/// Every instance declares the run's gate queue `<prefix>.gate.<job>.<slot>` (`x-max-length`
/// 1, `x-overflow` `reject-publish`, `x-expires` = `slot_ttl`; transient unless
/// [`AmqpOptions::durable_gates`]) and publishes one message to it on a channel in confirm
/// mode. The queue takes the
/// first message; every later one is refused and confirmed with a nack. Ack: this instance
/// won; nack: `taken`. A claim whose confirm does not come back (connection dropped,
/// timeout) is `unknown` and the slot is skipped on this instance rather than risk a second
/// run. [B-29] The gate queue disappears `slot_ttl` after its last claim; nothing consumes
/// it.
///
/// # History: a stream per job
/// RabbitMQ has no way to read a classic queue without consuming it, so history lives in a
/// stream queue per job, `<prefix>.history.<job>` (`x-queue-type` `stream`, bounded by
/// [`AmqpOptions::history_max_bytes`]), which any number of readers can read from its
/// start without taking anything away. Each record is appended at a run's start and again
/// at its finish; a reader keeps the newest entry per (slot, attempt, instance) and the
/// newest `history_size` runs (by count, as the record's writer asked). A stream does not
/// tell a reader where it ends, so a reader first appends a small marker message of its own
/// and reads until it meets it; markers are skipped and count towards the stream's bytes.
/// Known jobs are appended to the stream `<prefix>.jobs` (once per job and process). All of
/// it is readable from a process that registered no jobs.
///
/// The store's clock is the host's: RabbitMQ has no clock to read.
pub struct AmqpStore {
    source: Source,
    opts: AmqpOptions,
    target: String,
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    streams: Mutex<HashSet<String>>,
    noted: Mutex<HashSet<JobName>>,
    /// Opened by [`AmqpStore::open_read_only`]: declares nothing, publishes nothing.
    read_only: bool,
}

impl std::fmt::Debug for AmqpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpStore")
            .field("target", &self.target)
            .field("prefix", &self.opts.prefix)
            .field("slot_ttl", &self.opts.slot_ttl)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// The connection arguments of `url` and its password (kept to scrub it from driver
/// errors).
fn parse_url(url: &str) -> std::result::Result<(OpenConnectionArguments, String), AmqpError> {
    let u = crate::url::parse(url)?;
    let mut args = OpenConnectionArguments::new(&u.host, u.port, &u.user, &u.password);
    args.virtual_host(&u.vhost).connection_name("anarchon");
    Ok((args, u.password))
}

/// A reason for a failed connection that never carries the credentials.
fn connect_reason(e: &amqprs::error::Error, password: &str) -> String {
    let text = e.to_string();
    let upper = text.to_ascii_uppercase();
    if upper.contains("ACCESS_REFUSED") || upper.contains("403") || upper.contains("AUTH") {
        "the server refused the credentials; check the user and password in the URL".into()
    } else if upper.contains("NOT_ALLOWED") || upper.contains("530") || upper.contains("VHOST") {
        "the virtual host does not exist or the user may not use it; check the URL's path".into()
    } else if upper.contains("RESET BY PEER")
        || upper.contains("EOF")
        || upper.contains("CONNECTION CLOSED")
    {
        // RabbitMQ drops the connection during the handshake when the credentials are
        // wrong (a client must ask for a proper close, which amqprs does not).
        "the server closed the connection during the handshake: most likely the user or \
         password is wrong, or the user may not use the virtual host; check the URL"
            .into()
    } else if upper.contains("REFUSED") {
        "the connection was refused; check that the server runs and the port".into()
    } else if password.is_empty() {
        text
    } else {
        text.replace(password, "***")
    }
}

/// What a channel closed with 406 (`PRECONDITION_FAILED`) means. Neither is worth sending
/// again: a message larger than the server's `max_message_size` is `OutOfRange`; anything
/// else is a queue of that name declared with other settings, `Corrupt`.
fn refusal(reason: &str, queue: &str) -> Error {
    if reason.contains("max size") {
        return Error::OutOfRange {
            option: "record",
            value: format!("a message to {queue:?}"),
            allowed: format!("what the server's max_message_size lets through; it said: {reason}"),
        };
    }
    Error::Corrupt {
        store: STORE,
        location: format!("queue {queue:?}"),
        reason: format!(
            "it exists with other settings ({reason}); every instance must use the same store \
             options (slot_ttl, history_max_bytes), or delete the queue"
        ),
    }
}

fn parse_version(v: &str) -> (u32, u32) {
    let mut parts = v
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Refuses a server that is not RabbitMQ 3.9 or newer (from the connection's server
/// properties).
fn check_server(product: &str, version: &str) -> Result<()> {
    if product != "RabbitMQ" || parse_version(version) < MIN_VERSION {
        return Err(Error::ServerTooOld {
            store: STORE,
            found: format!("{product} {version}"),
            required: format!(
                "RabbitMQ {}.{} (stream queues keep the history)",
                MIN_VERSION.0, MIN_VERSION.1
            ),
        });
    }
    Ok(())
}

impl AmqpStore {
    /// Connects to `url` (`amqp://user:password@host:5672/vhost`) with default options.
    /// The connection is made now: a refused connection or wrong credentials are an error
    /// here. A connection lost later is opened again by the next call.
    pub async fn connect(url: &str) -> std::result::Result<Self, AmqpError> {
        Self::connect_with(url, AmqpOptions::default()).await
    }

    /// Connects to `url` with these options.
    pub async fn connect_with(
        url: &str,
        opts: AmqpOptions,
    ) -> std::result::Result<Self, AmqpError> {
        Self::open_url(url, opts, false).await
    }

    /// Checks the options, parses `url` (its password kept apart) and connects once.
    async fn open_url(
        url: &str,
        opts: AmqpOptions,
        read_only: bool,
    ) -> std::result::Result<Self, AmqpError> {
        opts.validate()?;
        let (args, pass) = parse_url(url)?;
        let store = AmqpStore {
            source: Source::Url(Box::new(args), pass),
            opts,
            target: redact_url(url),
            live: tokio::sync::Mutex::new(None),
            streams: Mutex::default(),
            noted: Mutex::default(),
            read_only,
        };
        store.first_connection().await?;
        Ok(store)
    }

    /// Opens the store under `opts`'s prefix on `url` to read it, without writing anything:
    /// no queue is declared and no message published, not even the marker an ordinary
    /// reader appends to find the end of a stream. This is how the `anarchon` command
    /// reads.
    ///
    /// Every queue is looked up with a passive declare. The store must exist: when the
    /// queue of known jobs (`<prefix>.jobs`) does not, the answer is
    /// [`AmqpError::NotAStore`], with nothing created. A job with no history queue has an
    /// empty history. A stream is read from its start until it has been quiet for a
    /// moment (250 ms, 1 s while fewer messages came than the server counted), since a
    /// reader that may not write cannot mark its end. Every write (`prepare`, a claim, a
    /// record) is refused with [`Error::Store`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use anarchon_amqp::{AmqpError, AmqpOptions, AmqpStore};
    /// use anarchon_core::store::HistoryStore;
    ///
    /// let opts = AmqpOptions::default().prefix("billing");
    /// match AmqpStore::open_read_only("amqp://guest:guest@127.0.0.1:5672/%2f", opts).await {
    ///     Ok(store) => println!("{:?}", store.known_jobs().await?),
    ///     Err(AmqpError::NotAStore { prefix, .. }) => println!("nothing under {prefix}"),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn open_read_only(
        url: &str,
        opts: AmqpOptions,
    ) -> std::result::Result<Self, AmqpError> {
        let store = Self::open_url(url, opts, true).await?;
        let target = store.target.clone();
        let queue = store.jobs_queue();
        let found = store
            .queue_exists("open", &queue)
            .await
            .map_err(|e| AmqpError::Connect {
                target: target.clone(),
                reason: e.to_string(),
            })?;
        if found.is_none() {
            let _ = store.close().await;
            return Err(AmqpError::NotAStore {
                target,
                prefix: store.opts.prefix.clone(),
                queue,
            });
        }
        Ok(store)
    }

    /// Opens the first connection, as an [`AmqpError::Connect`] when it fails.
    async fn first_connection(&self) -> std::result::Result<(), AmqpError> {
        let target = self.target.clone();
        match self.live().await {
            Ok(_) => Ok(()),
            Err(Error::Unavailable { source, .. }) => Err(AmqpError::Connect {
                target,
                reason: source.to_string(),
            }),
            Err(Error::Timeout { after, .. }) => Err(AmqpError::Connect {
                target,
                reason: format!("no answer within {after:?}; check the host and port"),
            }),
            Err(e) => Err(AmqpError::Connect {
                target,
                reason: e.to_string(),
            }),
        }
    }

    /// Whether the store was opened with [`AmqpStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `operation` on a read-only store.
    fn writable(&self, operation: &'static str) -> Result<()> {
        if self.read_only {
            return Err(claim_only::read_only_refusal(
                STORE,
                operation,
                "AmqpStore::connect_with",
            ));
        }
        Ok(())
    }

    /// Whether `queue` exists (with the server's message count, which may lag a few
    /// seconds), asked with a passive declare that creates nothing. It runs on a channel of
    /// its own: the server closes the channel of a passive declare that names no queue.
    async fn queue_exists(&self, operation: &'static str, queue: &str) -> Result<Option<u32>> {
        let live = self.live().await?;
        let closed = Arc::new(Mutex::new(None::<String>));
        self.bounded(operation, async {
            let channel = live
                .conn
                .open_channel(None)
                .await
                .map_err(|e| self.unavailable(e.to_string()))?;
            channel
                .register_callback(ChannelEvents {
                    confirms: SharedConfirms::default(),
                    closed: closed.clone(),
                })
                .await
                .map_err(|e| Error::store(STORE, operation, e.to_string()))?;
            let answer = channel
                .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
                .await;
            let reason = closed.lock().unwrap_or_else(|e| e.into_inner()).clone();
            match answer {
                Ok(found) => {
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(5), channel.close()).await;
                    });
                    Ok(Some(found.map_or(0, |(_, count, _)| count)))
                }
                Err(_) if reason.as_deref().is_some_and(|r| r.starts_with("404")) => Ok(None),
                Err(e) => Err(Error::store(
                    STORE,
                    operation,
                    format!(
                        "looking up the queue {queue:?}: {}",
                        reason.unwrap_or_else(|| e.to_string())
                    ),
                )),
            }
        })
        .await
    }

    /// A store on the user's own, open connection. The store opens its channels on it and
    /// never closes it ([`Store::close`] closes only the store's channels); if it closes,
    /// every call fails until the store is built again on a new one.
    pub fn from_connection(
        connection: Connection,
        opts: AmqpOptions,
    ) -> std::result::Result<Self, AmqpError> {
        opts.validate()?;
        let target = format!("connection {:?}", connection.connection_name());
        Ok(AmqpStore {
            source: Source::User(connection),
            opts,
            target,
            live: tokio::sync::Mutex::new(None),
            streams: Mutex::default(),
            noted: Mutex::default(),
            read_only: false,
        })
    }

    /// The options in use.
    pub fn options(&self) -> &AmqpOptions {
        &self.opts
    }

    /// The server's product and version, e.g. `RabbitMQ 3.13.7` (connects if needed).
    pub async fn server(&self) -> Result<String> {
        let live = self.live().await?;
        let props = live.conn.server_properties();
        Ok(format!("{} {}", props.product(), props.version()))
    }

    fn unavailable(&self, source: impl Into<anarchon_core::BoxError>) -> Error {
        Error::Unavailable {
            store: STORE,
            target: self.target.clone(),
            source: source.into(),
        }
    }

    fn timeout(&self, operation: &'static str) -> Error {
        Error::Timeout {
            store: STORE,
            operation,
            after: self.opts.operation_timeout,
        }
    }

    async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.opts.operation_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(self.timeout(operation)),
        }
    }

    /// The live connection and channel, opened (again) where needed.
    async fn live(&self) -> Result<Arc<Live>> {
        let mut slot = self.live.lock().await;
        if let Some(live) = slot.as_ref()
            && live.usable()
        {
            return Ok(live.clone());
        }
        let reuse = slot
            .as_ref()
            .map(|l| l.conn.clone())
            .filter(|c| c.is_open());
        let conn = match (reuse, &self.source) {
            (Some(conn), _) => conn,
            (None, Source::User(conn)) if conn.is_open() => conn.clone(),
            (None, Source::User(_)) => {
                return Err(self.unavailable(
                    "the connection given to the store is closed; build the store again on an \
                     open one",
                ));
            }
            (None, Source::Url(args, pass)) => {
                let timeout = self.opts.connect_timeout;
                let conn = match tokio::time::timeout(timeout, Connection::open(args)).await {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => {
                        return Err(self.unavailable(connect_reason(&e, pass)));
                    }
                    Err(_) => {
                        return Err(Error::Timeout {
                            store: STORE,
                            operation: "connect",
                            after: timeout,
                        });
                    }
                };
                let _ = conn.register_callback(ConnectionEvents).await;
                conn
            }
        };
        let props = conn.server_properties();
        check_server(props.product(), props.version())?;
        let live = self
            .bounded("connect", async {
                let channel = conn
                    .open_channel(None)
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
                let confirms = SharedConfirms::default();
                let closed = Arc::new(Mutex::new(None));
                channel
                    .register_callback(ChannelEvents {
                        confirms: confirms.clone(),
                        closed: closed.clone(),
                    })
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
                channel
                    .confirm_select(ConfirmSelectArguments::default())
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
                Ok(Live {
                    conn: conn.clone(),
                    channel,
                    confirms,
                    closed,
                    publish: tokio::sync::Mutex::new(()),
                    rpc: tokio::sync::Mutex::new(()),
                })
            })
            .await?;
        let live = Arc::new(live);
        *slot = Some(live.clone());
        Ok(live)
    }

    /// Maps a failed channel call: a channel the server closed with 406 means a queue of
    /// that name exists with other settings.
    fn channel_err(
        &self,
        live: &Live,
        operation: &'static str,
        queue: &str,
        e: impl ToString,
    ) -> Error {
        match live.close_reason() {
            Some(reason) if reason.starts_with("406") => refusal(&reason, queue),
            Some(reason) => Error::store(STORE, operation, format!("channel closed: {reason}")),
            None if !live.conn.is_open() => {
                self.unavailable(format!("connection lost: {}", e.to_string()))
            }
            None => Error::store(STORE, operation, e.to_string()),
        }
    }

    fn gate_args(&self) -> FieldTable {
        let mut args = FieldTable::new();
        args.insert(field("x-max-length"), FieldValue::l(1));
        args.insert(field("x-overflow"), FieldValue::from("reject-publish"));
        args.insert(
            field("x-expires"),
            // Bounded by `AmqpOptions::MAX_SLOT_TTL` (u32 ms): the conversion cannot fail.
            FieldValue::l(i64::try_from(self.opts.slot_ttl.as_millis()).unwrap_or(i64::MAX)),
        );
        args
    }

    fn stream_args(&self) -> FieldTable {
        // Bounded by `AmqpOptions::MAX_HISTORY_MAX_BYTES` (1 TiB): the conversion cannot fail.
        let max = i64::try_from(self.opts.history_max_bytes).unwrap_or(i64::MAX);
        let mut args = FieldTable::new();
        args.insert(field("x-queue-type"), FieldValue::from("stream"));
        args.insert(field("x-max-length-bytes"), FieldValue::l(max));
        // Retention drops whole segments: small ones keep the bound close.
        args.insert(
            field("x-stream-max-segment-size-bytes"),
            // RabbitMQ refuses a segment above 3 GB; up to that, the same value as ever (a
            // stream declared with other arguments is refused with 406).
            FieldValue::l((max / 8).clamp(16 * 1024, MAX_SEGMENT_BYTES)),
        );
        args
    }

    /// Declares a stream queue once per process.
    async fn declare_stream(&self, live: &Live, queue: &str) -> Result<()> {
        if self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(queue)
        {
            return Ok(());
        }
        self.bounded("declare", async {
            let _one = live.rpc.lock().await;
            live.channel
                .queue_declare(
                    QueueDeclareArguments::durable_client_named(queue)
                        .arguments(self.stream_args())
                        .finish(),
                )
                .await
                .map_err(|e| self.channel_err(live, "declare", queue, e))
        })
        .await?;
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(queue.to_string());
        Ok(())
    }

    /// Publishes and waits for the confirm: `Ok(true)` ack, `Ok(false)` nack.
    async fn publish_confirmed(
        &self,
        live: &Live,
        operation: &'static str,
        queue: &str,
        properties: BasicProperties,
        body: Vec<u8>,
    ) -> Result<bool> {
        let rx = live
            .publish(queue, properties, body)
            .await
            .map_err(|e| self.channel_err(live, operation, queue, e))?;
        self.await_confirm(live, operation, queue, rx).await
    }

    /// Waits for a confirm, giving up as soon as the channel or connection is gone (the
    /// server closing a connection does not resolve the confirms it never sent).
    async fn await_confirm(
        &self,
        live: &Live,
        operation: &'static str,
        queue: &str,
        rx: oneshot::Receiver<bool>,
    ) -> Result<bool> {
        let start = tokio::time::Instant::now();
        tokio::pin!(rx);
        loop {
            tokio::select! {
                r = &mut rx => {
                    return r.map_err(|_| self.channel_err(live, operation, queue, "no confirm"));
                }
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    if !live.usable() {
                        return Err(self.channel_err(live, operation, queue, "the channel closed"));
                    }
                    if start.elapsed() >= self.opts.operation_timeout {
                        return Err(self.timeout(operation));
                    }
                }
            }
        }
    }

    /// Appends a message to a stream queue and waits for its confirm, retrying twice on a
    /// lost connection or confirm. A stream that another instance declared a moment ago
    /// may have no leader yet, and RabbitMQ 3.10 then drops the publishing connection;
    /// readers ignore a repeated entry, so a retry is harmless.
    async fn append(
        &self,
        operation: &'static str,
        queue: &str,
        properties: BasicProperties,
        body: Vec<u8>,
    ) -> Result<()> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = async {
                let live = self.live().await?;
                self.declare_stream(&live, queue).await?;
                self.publish_confirmed(&live, operation, queue, properties.clone(), body.clone())
                    .await
            }
            .await;
            match result {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    return Err(Error::store(
                        STORE,
                        operation,
                        format!("the server refused the message to {queue:?} (nack)"),
                    ));
                }
                // Refused for what it is (another queue of the name, a message too large):
                // sending it again cannot help.
                Err(e @ (Error::Corrupt { .. } | Error::OutOfRange { .. })) => return Err(e),
                Err(e) if tries >= 3 => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, %queue, "retrying an append to a stream");
                    tokio::time::sleep(Duration::from_millis(200 * tries)).await;
                }
            }
        }
    }

    fn jobs_queue(&self) -> String {
        format!("{}.jobs", self.opts.prefix)
    }

    fn history_queue(&self, job: &JobName) -> String {
        format!("{}.history.{job}", self.opts.prefix)
    }

    async fn note_jobs(&self, jobs: &[JobName]) -> Result<()> {
        let queue = self.jobs_queue();
        if jobs.is_empty() {
            let live = self.live().await?;
            return self.declare_stream(&live, &queue).await;
        }
        for job in jobs {
            if self
                .noted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(job)
            {
                continue;
            }
            let props = BasicProperties::default()
                .with_delivery_mode(DELIVERY_MODE_PERSISTENT)
                .with_message_type("job")
                .finish();
            self.append("note job", &queue, props, job.as_str().as_bytes().to_vec())
                .await?;
            self.noted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(job.clone());
        }
        Ok(())
    }

    async fn put_record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.writable("record")?;
        self.note_jobs(std::slice::from_ref(&record.job)).await?;
        let queue = self.history_queue(&record.job);
        let body = serde_json::to_vec(&Entry {
            keep: retention.size,
            record: claim_only::storable(record, "RabbitMQ", claim_only::MAX_ERROR_BYTES)
                .into_owned(),
        })
        .map_err(|e| Error::store(STORE, "record", e))?;
        let props = BasicProperties::default()
            .with_delivery_mode(DELIVERY_MODE_PERSISTENT)
            .with_message_type("record")
            .finish();
        self.append("record", &queue, props, body).await
    }

    /// Every message of a stream queue but the markers, oldest first: appends a marker of
    /// its own, then reads from the start until it meets it. A read-only store appends
    /// nothing: it reads a stream that exists (none: no message) until it is quiet.
    async fn read_stream(
        &self,
        operation: &'static str,
        queue: &str,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        if self.read_only {
            return match self.queue_exists(operation, queue).await? {
                Some(count) => self.consume(operation, queue, End::Quiet { count }).await,
                None => Ok(Vec::new()),
            };
        }
        let nonce = format!("{:016x}", rand::random::<u64>());
        let marker = BasicProperties::default()
            .with_message_type("marker")
            .with_message_id(&nonce)
            .finish();
        self.append(operation, queue, marker, Vec::new()).await?;
        self.consume(operation, queue, End::Marker(nonce)).await
    }

    /// Reads a stream queue from its start until `end`: every message but the markers,
    /// oldest first.
    async fn consume(
        &self,
        operation: &'static str,
        queue: &str,
        end: End,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let live = self.live().await?;
        let closed = Arc::new(Mutex::new(None));
        let channel = self
            .bounded(operation, async {
                let channel = live
                    .conn
                    .open_channel(None)
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
                channel
                    .register_callback(ChannelEvents {
                        confirms: SharedConfirms::default(),
                        closed: closed.clone(),
                    })
                    .await
                    .map_err(|e| Error::store(STORE, operation, e.to_string()))?;
                Ok(channel)
            })
            .await?;
        let result = self
            .bounded(operation, async {
                channel
                    .basic_qos(BasicQosArguments::new(0, 500, false))
                    .await
                    .map_err(|e| Error::store(STORE, operation, e.to_string()))?;
                let mut args = FieldTable::new();
                args.insert(field("x-stream-offset"), FieldValue::from("first"));
                let (_tag, mut rx) = channel
                    .basic_consume_rx(
                        BasicConsumeArguments::new(queue, "")
                            .manual_ack(true)
                            .arguments(args)
                            .finish(),
                    )
                    .await
                    .map_err(|e| Error::store(STORE, operation, e.to_string()))?;
                let mut out = Vec::new();
                let mut unacked = 0u32;
                let mut seen = 0u64;
                loop {
                    let next = match &end {
                        End::Marker(_) => rx.recv().await,
                        End::Quiet { count } => {
                            // The server's count lags by a few seconds: while fewer came,
                            // wait longer before taking a pause for the end.
                            let quiet = if seen < u64::from(*count) {
                                QUIET_SHORT_OF_COUNT
                            } else {
                                QUIET
                            };
                            match tokio::time::timeout(quiet, rx.recv()).await {
                                Ok(next) => next,
                                Err(_) => break,
                            }
                        }
                    };
                    seen += 1;
                    let Some(message) = next else {
                        let reason = closed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone()
                            .unwrap_or_else(|| "the channel closed".into());
                        return Err(Error::store(STORE, operation, reason));
                    };
                    let tag = message.deliver.as_ref().map(|d| d.delivery_tag());
                    let (kind, id) = message
                        .basic_properties
                        .as_ref()
                        .map(|p| {
                            (
                                p.message_type().cloned().unwrap_or_default(),
                                p.message_id().cloned(),
                            )
                        })
                        .unwrap_or_default();
                    if let End::Marker(nonce) = &end
                        && kind == "marker"
                        && id.as_deref() == Some(nonce.as_str())
                    {
                        break;
                    }
                    if kind != "marker" {
                        out.push((kind, message.content.unwrap_or_default()));
                    }
                    unacked += 1;
                    if unacked >= 250
                        && let Some(tag) = tag
                    {
                        unacked = 0;
                        channel
                            .basic_ack(BasicAckArguments::new(tag, true))
                            .await
                            .map_err(|e| Error::store(STORE, operation, e.to_string()))?;
                    }
                }
                Ok(out)
            })
            .await;
        // Closing the channel ends the consumer; it is not worth waiting for.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), channel.close()).await;
        });
        result
    }
}

#[async_trait]
impl Store for AmqpStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.writable("prepare")?;
        self.note_jobs(&prepare.jobs).await
    }

    async fn now(&self) -> Result<EpochMs> {
        Ok(host_now())
    }

    async fn close(&self) -> Result<()> {
        let live = self.live.lock().await.take();
        if let Some(live) = live {
            let timeout = self.opts.operation_timeout;
            let _ = tokio::time::timeout(timeout, live.channel.clone().close()).await;
            if matches!(self.source, Source::Url(..)) {
                let _ = tokio::time::timeout(timeout, live.conn.clone().close()).await;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for AmqpStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let messages = self
            .read_stream("history", &self.history_queue(job))
            .await?;
        let mut keep = u32::MAX;
        let written = messages
            .into_iter()
            .filter(|(kind, _)| kind == "record")
            .filter_map(|(_, body)| serde_json::from_slice::<Entry>(&body).ok())
            .map(|entry| {
                keep = entry.keep.max(1);
                entry.record
            });
        let mut records = claim_only::latest_per_attempt(written);
        // Retention by count: the newest `keep` runs, as the newest writer asked.
        claim_only::keep_newest_runs(&mut records, keep as usize);
        Ok(claim_only::newest_first(records, count))
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.put_record(record, retention).await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        let messages = self.read_stream("known jobs", &self.jobs_queue()).await?;
        let mut jobs: Vec<JobName> = messages
            .into_iter()
            .filter(|(kind, _)| kind == "job")
            .filter_map(|(_, body)| JobName::new(String::from_utf8_lossy(&body)).ok())
            .collect();
        jobs.sort();
        jobs.dedup();
        Ok(jobs)
    }
}

#[async_trait]
impl ClaimStore for AmqpStore {
    async fn claim_slot(&self, c: &SlotClaim) -> Result<SlotOutcome> {
        self.writable("claim")?;
        let live = self.live().await?;
        claim_only::claim_slot(c, || async {
            let queue = format!("{}.gate.{}.{}", self.opts.prefix, c.run.job, c.run.slot);
            self.bounded("claim", async {
                let _one = live.rpc.lock().await;
                live.channel
                    .queue_declare(
                        QueueDeclareArguments::new(&queue)
                            .durable(self.opts.durable_gates)
                            .arguments(self.gate_args())
                            .finish(),
                    )
                    .await
                    .map_err(|e| self.channel_err(&live, "claim", &queue, e))
            })
            .await?;
            let props = BasicProperties::default()
                .with_delivery_mode(if self.opts.durable_gates {
                    DELIVERY_MODE_PERSISTENT
                } else {
                    DELIVERY_MODE_TRANSIENT
                })
                .finish();
            // A publish that could not be handed to the connection was not sent: an error.
            let rx = live
                .publish(&queue, props, c.instance_id.as_bytes().to_vec())
                .await
                .map_err(|e| self.channel_err(&live, "claim", &queue, e))?;
            Ok(match self.await_confirm(&live, "claim", &queue, rx).await {
                Ok(true) => Delivery::First,
                Ok(false) => Delivery::Duplicate,
                // The publish may have reached the queue and its confirm was lost
                // (connection or channel gone, timeout).
                Err(_) => Delivery::AnswerLost,
            })
        })
        .await
    }

    async fn record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.put_record(record, retention).await
    }

    fn claim_window(&self) -> Option<Duration> {
        Some(self.opts.slot_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_406_for_the_size_is_out_of_range_and_any_other_406_corrupt() {
        let size = refusal(
            "406 PRECONDITION_FAILED - message size 134217729 is larger than configured max \
             size 134217728",
            "q",
        );
        assert!(
            matches!(
                size,
                Error::OutOfRange {
                    option: "record",
                    ..
                }
            ),
            "{size:?}"
        );
        assert!(!size.is_transient() && size.to_string().contains("134217728"));
        let args = refusal(
            "406 PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'q' in vhost '/'",
            "q",
        );
        assert!(matches!(args, Error::Corrupt { .. }), "{args:?}");
    }

    #[test]
    fn b26_rabbitmq_older_than_3_9_is_refused_with_its_version() {
        let err = check_server("RabbitMQ", "3.8.27").unwrap_err();
        assert!(matches!(err, Error::ServerTooOld { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("3.8.27") && text.contains("3.9"), "{text}");
        assert!(check_server("RabbitMQ", "3.9.0").is_ok());
        assert!(check_server("RabbitMQ", "3.13.7").is_ok());
        assert!(check_server("RabbitMQ", "4.0.5").is_ok());
        assert!(check_server("LavinMQ", "1.2.0").is_err());
    }
}
