//! [`NatsStore`]: the claim, the stream it lives on, history and known jobs.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use anarchon_core::claim_only::{self, Delivery, host_now};
use anarchon_core::store::RunRecord;
use anarchon_core::store::{HistoryStore, Prepare, Retention, SlotClaim, SlotOutcome, Store};
use anarchon_core::{ClaimStore, EpochMs, Error, JobName, Result, redact_url};
use async_nats::connection::State;
use async_nats::jetstream::context::{GetStreamErrorKind, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config, StorageType, Stream};
use async_nats::jetstream::{self, ErrorCode};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::RwLock;

use crate::STORE;
use crate::error::NatsError;
use crate::options::{NatsOptions, Storage};
use crate::url::Credentials;

/// The longest subject the store publishes to: well within the server's control line
/// (`max_control_line`, 4 KiB by default), which also holds the reply subject.
const MAX_SUBJECT_BYTES: usize = 3072;

/// The oldest NATS server this store is tested against.
const MIN_VERSION: (u32, u32) = (2, 9);

/// A claim-only store on NATS JetStream. One winner per slot, no lease: no backup, takeover,
/// overlap check, catch-up or retry. History is kept by count only. [B-22, B-27, B-28]
///
/// # How a claim works
/// Every instance publishes to `<prefix>.claim.<job>` with the header
/// `Nats-Msg-Id: <job>:<slot>`. The stream keeps the first message with that id for its
/// duplicate window; every later one is acknowledged with `duplicate: true`. The first
/// publisher wins, the others are told `taken`. A claim whose acknowledgement does not come
/// back (connection dropped, timeout) is `unknown` and the slot is skipped on this instance
/// rather than risk a second run. [B-29]
///
/// # What it stores
/// One stream named after the prefix, subjects `<prefix>.>`, one message kept per subject:
/// - `<prefix>.claim.<job>`: the latest claim of the job (the ids of older ones are
///   remembered for the duplicate window);
/// - `<prefix>.hist.<job>.<slot>.<attempt>.<r|m>.<instance in hex>`: one history record
///   (JSON), replaced at the run's finish; beyond `history_size` per job the oldest are
///   purged;
/// - `<prefix>.job.<job>`: the job is known (an empty message).
///
/// The store's clock is the host's: NATS has no clock to read.
pub struct NatsStore {
    client: async_nats::Client,
    js: jetstream::Context,
    opts: NatsOptions,
    owned: bool,
    target: String,
    /// The stream once created or checked; cleared when the server says it is gone.
    stream: RwLock<Option<Stream>>,
    noted: Mutex<HashSet<JobName>>,
    /// Opened by [`NatsStore::open_read_only`]: finds the stream, never creates it, and
    /// publishes nothing.
    read_only: bool,
}

impl std::fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsStore")
            .field("target", &self.target)
            .field("stream", &self.opts.prefix)
            .field("duplicate_window", &self.opts.duplicate_window)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn connect_reason(e: &async_nats::ConnectError) -> String {
    use async_nats::ConnectErrorKind as K;
    match e.kind() {
        K::ServerParse => "the server address could not be parsed".into(),
        K::Dns => "the host name could not be resolved".into(),
        K::Authentication | K::AuthorizationViolation => {
            "the server refused the credentials; check the user and password (or token) in the \
             URL"
            .into()
        }
        K::TimedOut => "the connection timed out; check that the server runs and the port".into(),
        K::Tls => format!("TLS failed ({e}); check the certificates and the tls:// URL"),
        K::Io => {
            "the connection was refused or broke; check that the server runs and the port".into()
        }
        K::MaxReconnects => "gave up reconnecting".into(),
    }
}

impl NatsStore {
    /// Connects to `url` (`nats://[user:password@]host:4222`, `tls://host:4222`, or several
    /// separated by commas) with default options. The connection is made now: a refused
    /// connection or wrong credentials are an error here. Once connected, the client
    /// reconnects by itself, forever.
    pub async fn connect(url: &str) -> std::result::Result<Self, NatsError> {
        Self::connect_with(url, NatsOptions::default()).await
    }

    /// Connects to `url` with these options.
    pub async fn connect_with(
        url: &str,
        opts: NatsOptions,
    ) -> std::result::Result<Self, NatsError> {
        opts.validate()?;
        let (client, target) = Self::connect_client(url, &opts).await?;
        Ok(Self::build(client, opts, true, target))
    }

    /// Opens the store under `opts`'s prefix on `url` to read it, without writing anything:
    /// the stream is looked up, never created, and nothing is published or purged. This is
    /// how the `anarchon` command reads.
    ///
    /// The stream must exist: when it does not, the answer is [`NatsError::NotAStore`], with
    /// nothing created. It must take the store's subjects (`<prefix>.>`); its other settings
    /// (the duplicate window, the storage) are not checked, since a reader does not depend
    /// on them. Every write (`prepare`, a claim, a record) is refused with [`Error::Store`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use anarchon_core::store::HistoryStore;
    /// use anarchon_nats::{NatsError, NatsOptions, NatsStore};
    ///
    /// let opts = NatsOptions::default().prefix("billing");
    /// match NatsStore::open_read_only("nats://127.0.0.1:4222", opts).await {
    ///     Ok(store) => println!("{:?}", store.known_jobs().await?),
    ///     Err(NatsError::NotAStore { stream, .. }) => println!("no stream {stream}"),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn open_read_only(
        url: &str,
        opts: NatsOptions,
    ) -> std::result::Result<Self, NatsError> {
        opts.validate()?;
        let (client, target) = Self::connect_client(url, &opts).await?;
        let mut store = Self::build(client, opts, true, target);
        store.read_only = true;
        match store.ensure().await {
            Ok(_) => Ok(store),
            Err(e) => {
                let _ = store.close().await;
                let stream = store.opts.prefix.clone();
                let target = store.target.clone();
                Err(match e {
                    Error::InvalidOption {
                        option: "prefix", ..
                    } => NatsError::NotAStore { target, stream },
                    other => NatsError::Connect {
                        target,
                        reason: other.to_string(),
                    },
                })
            }
        }
    }

    /// Whether the store was opened with [`NatsStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `operation` on a read-only store.
    fn writable(&self, operation: &'static str) -> Result<()> {
        if self.read_only {
            return Err(claim_only::read_only_refusal(
                STORE,
                operation,
                "NatsStore::connect_with",
            ));
        }
        Ok(())
    }

    /// The client connected to `url`, and the URL redacted.
    async fn connect_client(
        url: &str,
        opts: &NatsOptions,
    ) -> std::result::Result<(async_nats::Client, String), NatsError> {
        let parsed = crate::url::parse(url)?;
        let target = redact_url(url);
        // The client is given the servers without their user info, and the credentials
        // apart: it logs each server's address at DEBUG.
        let mut connect = async_nats::ConnectOptions::new();
        match parsed.credentials {
            Some(Credentials::UserPassword(user, pass)) => {
                connect = connect.user_and_password(user, pass);
            }
            Some(Credentials::Token(token)) => connect = connect.token(token),
            None => {}
        }
        let connect = connect
            .name("anarchon")
            .connection_timeout(opts.connect_timeout)
            .request_timeout(Some(opts.operation_timeout))
            // Reconnect quickly after a broker restart, at most every 2 s.
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((100u64 << attempts.min(5)).min(2_000))
            })
            .event_callback(|event| async move {
                match event {
                    async_nats::Event::Disconnected => tracing::warn!("NATS connection lost"),
                    async_nats::Event::Connected => tracing::info!("NATS connected"),
                    other => tracing::debug!(event = %other, "NATS event"),
                }
            })
            .connect(parsed.servers);
        // The client bounds each attempt; this bounds DNS and the whole handshake too.
        let whole = opts.connect_timeout.saturating_mul(2);
        let client = match tokio::time::timeout(whole, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(NatsError::Connect {
                    reason: connect_reason(&e),
                    target,
                });
            }
            Err(_) => {
                return Err(NatsError::Connect {
                    target,
                    reason: format!("no answer within {whole:?}; check the host and port"),
                });
            }
        };
        Ok((client, target))
    }

    /// A store on the user's own client ([`Store::close`] leaves it open).
    pub fn from_client(
        client: async_nats::Client,
        opts: NatsOptions,
    ) -> std::result::Result<Self, NatsError> {
        opts.validate()?;
        let info = client.server_info();
        let target = format!("{}:{}", info.host, info.port);
        Ok(Self::build(client, opts, false, target))
    }

    fn build(client: async_nats::Client, opts: NatsOptions, owned: bool, target: String) -> Self {
        let mut js = jetstream::new(client.clone());
        js.set_timeout(opts.operation_timeout);
        NatsStore {
            client,
            js,
            opts,
            owned,
            target,
            stream: RwLock::new(None),
            noted: Mutex::default(),
            read_only: false,
        }
    }

    /// The client the store uses.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The options in use.
    pub fn options(&self) -> &NatsOptions {
        &self.opts
    }

    /// The server's name and version as it announced them, e.g. `nats-server 2.10.22`.
    pub fn server(&self) -> String {
        format!("nats-server {}", self.client.server_info().version)
    }

    fn unavailable(&self, source: impl Into<anarchon_core::BoxError>) -> Error {
        Error::Unavailable {
            store: STORE,
            target: self.target.clone(),
            source: source.into(),
        }
    }

    /// Runs `fut` bounded by the operation timeout.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.opts.operation_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                store: STORE,
                operation,
                after: self.opts.operation_timeout,
            }),
        }
    }

    fn config(&self) -> Config {
        Config {
            name: self.opts.prefix.clone(),
            subjects: vec![format!("{}.>", self.opts.prefix)],
            duplicate_window: self.opts.duplicate_window,
            max_messages_per_subject: 1,
            storage: match self.opts.storage {
                Storage::File => StorageType::File,
                Storage::Memory => StorageType::Memory,
            },
            ..Default::default()
        }
    }

    /// Checks the server (version, JetStream), then finds the stream or creates it, and
    /// refuses one whose settings would break the claim.
    async fn ensure(&self) -> Result<Stream> {
        if let Some(stream) = self.stream.read().await.as_ref() {
            return Ok(stream.clone());
        }
        let mut slot = self.stream.write().await;
        if let Some(stream) = slot.as_ref() {
            return Ok(stream.clone());
        }
        self.check_server()?;
        let stream = self.bounded("prepare", self.find_or_create()).await?;
        *slot = Some(stream.clone());
        Ok(stream)
    }

    fn check_server(&self) -> Result<()> {
        let info = self.client.server_info();
        let mut parts = info
            .version
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if !info.version.is_empty() && version < MIN_VERSION {
            return Err(Error::ServerTooOld {
                store: STORE,
                found: format!("nats-server {}", info.version),
                required: format!("nats-server {}.{}", MIN_VERSION.0, MIN_VERSION.1),
            });
        }
        if !info.version.is_empty() && !info.jetstream {
            return Err(self.unavailable(format!(
                "JetStream is not enabled on this server (nats-server {}); start it with -js \
                 (or `jetstream {{}}` in its configuration)",
                info.version
            )));
        }
        Ok(())
    }

    async fn find_or_create(&self) -> Result<Stream> {
        let name = &self.opts.prefix;
        match self.js.get_stream(name).await {
            Ok(stream) => {
                self.check_stream(&stream)?;
                return Ok(stream);
            }
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND && self.read_only =>
                {
                    return Err(Error::invalid_option(
                        "prefix",
                        format!(
                            "there is no stream {name:?} on {}: nothing is recorded under this \
                             prefix (a read-only store creates nothing)",
                            self.target
                        ),
                    ));
                }
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND => {}
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                        || js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
                {
                    return Err(self.unavailable(format!(
                        "JetStream is not enabled for this account ({js}); start the server with \
                         -js or enable JetStream for the account"
                    )));
                }
                _ => return Err(self.request_err("prepare", e)),
            },
        }
        match self.js.create_stream(self.config()).await {
            Ok(stream) => {
                tracing::info!(stream = %name, "created the NATS stream");
                Ok(stream)
            }
            Err(e) => {
                // Another instance created it at the same moment (with the same settings the
                // create is accepted; with others it is refused): read it and check it.
                let stream = self
                    .js
                    .get_stream(name)
                    .await
                    .map_err(|_| Error::store(STORE, "prepare", e))?;
                self.check_stream(&stream)?;
                Ok(stream)
            }
        }
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        let config = &stream.cached_info().config;
        let want = self.config();
        let mut problems = Vec::new();
        if config.subjects != want.subjects {
            problems.push(format!(
                "its subjects are {:?}, anarchon needs exactly {:?}",
                config.subjects, want.subjects
            ));
        }
        // A reader depends on the subjects only.
        if !self.read_only && config.duplicate_window != want.duplicate_window {
            problems.push(format!(
                "its duplicate_window is {:?}, this store is configured with {:?} (set the \
                 store's duplicate_window to match, or use another prefix)",
                config.duplicate_window, want.duplicate_window
            ));
        }
        if !self.read_only && config.max_messages_per_subject != 1 {
            problems.push(format!(
                "it keeps {} messages per subject, anarchon needs 1",
                config.max_messages_per_subject
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Corrupt {
                store: STORE,
                location: format!("stream {:?}", self.opts.prefix),
                reason: format!("{}; nothing was changed", problems.join("; ")),
            })
        }
    }

    fn request_err(
        &self,
        operation: &'static str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        let text = e.to_string();
        if text.contains("no responders") {
            self.unavailable(format!(
                "{text}: JetStream does not answer; is the server started with -js?"
            ))
        } else if text.contains("timed out") {
            Error::Timeout {
                store: STORE,
                operation,
                after: self.opts.operation_timeout,
            }
        } else {
            Error::store(STORE, operation, e)
        }
    }

    /// Forgets the stream so that the next call finds or creates it again (after the
    /// server lost it: a memory stream on a restarted server).
    async fn forget_stream(&self) {
        *self.stream.write().await = None;
    }

    fn subject(&self, kind: &str, job: &JobName) -> String {
        format!("{}.{kind}.{job}", self.opts.prefix)
    }

    /// Publishes and waits for the stream's acknowledgement.
    async fn publish(
        &self,
        operation: &'static str,
        subject: String,
        message: PublishMessage,
    ) -> Result<async_nats::jetstream::publish::PublishAck> {
        let r = self
            .bounded(operation, async {
                let ack =
                    self.js
                        .send_publish(subject, message)
                        .await
                        .map_err(|e| match e.kind() {
                            // Refused for its size: sending it again cannot help.
                            PublishErrorKind::MaxPayloadExceeded => Error::OutOfRange {
                                option: "record",
                                value: format!("the message of `{operation}`"),
                                allowed: format!(
                                    "at most the server's max_payload ({} bytes): {e}",
                                    self.client.server_info().max_payload
                                ),
                            },
                            _ => Error::store(STORE, operation, e),
                        })?;
                ack.await.map_err(|e| match e.kind() {
                    PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => Error::Timeout {
                        store: STORE,
                        operation,
                        after: self.opts.operation_timeout,
                    },
                    PublishErrorKind::StreamNotFound => Error::Corrupt {
                        store: STORE,
                        location: format!("stream {:?}", self.opts.prefix),
                        reason: "no stream takes the store's subjects (was it deleted?); it is \
                                 created again on the next call"
                            .into(),
                    },
                    _ => Error::store(STORE, operation, e),
                })
            })
            .await;
        if let Err(Error::Corrupt { .. }) = &r {
            self.forget_stream().await;
        }
        r
    }

    async fn note_jobs(&self, jobs: &[JobName]) -> Result<()> {
        for job in jobs {
            if self
                .noted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(job)
            {
                continue;
            }
            self.publish(
                "note job",
                self.subject("job", job),
                PublishMessage::build().payload(Default::default()),
            )
            .await?;
            self.noted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(job.clone());
        }
        Ok(())
    }

    /// The subjects (and so the records) under a filter.
    async fn subjects(&self, stream: &Stream, filter: String) -> Result<Vec<String>> {
        self.bounded("list", async {
            let info = stream
                .info_with_subjects(filter)
                .await
                .map_err(|e| self.request_err("list", e))?;
            info.map_ok(|(subject, _)| subject)
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| self.request_err("list", e))
        })
        .await
    }

    async fn put_record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.writable("record")?;
        let stream = self.ensure().await?;
        self.note_jobs(std::slice::from_ref(&record.job)).await?;
        let subject = format!(
            "{}.{}.{}.{}.{}",
            self.subject("hist", &record.job),
            record.slot,
            record.attempt,
            if record.manual { "m" } else { "r" },
            hex(&record.instance_id)
        );
        // The server reads a subject within its control line (4 KiB by default) and drops
        // the connection for a longer one: refuse it here instead.
        if subject.len() > MAX_SUBJECT_BYTES {
            return Err(Error::OutOfRange {
                option: "instance_id",
                value: format!("{} bytes", record.instance_id.len()),
                allowed: format!(
                    "at most about {} bytes on the NATS store: a record's subject holds it \
                     hex-encoded and stays within {MAX_SUBJECT_BYTES} bytes",
                    MAX_SUBJECT_BYTES.saturating_sub(subject.len() - 2 * record.instance_id.len())
                        / 2
                ),
            });
        }
        let body = self.record_body(record)?;
        self.publish(
            "record",
            subject,
            PublishMessage::build().payload(body.into()),
        )
        .await?;
        self.prune(&stream, &record.job, retention.size as usize)
            .await
    }

    /// The record as JSON, its error text cut to 64 KiB and further to fit the server's
    /// `max_payload` (a message above it is refused). Each cut leaves out at least the
    /// bytes that were too many (a text byte is at least one JSON byte), so a few rounds
    /// settle it; what still does not fit is refused by the publish as `OutOfRange`.
    fn record_body(&self, record: &RunRecord) -> Result<Vec<u8>> {
        let max_payload = self.client.server_info().max_payload;
        let mut cap = claim_only::MAX_ERROR_BYTES;
        loop {
            let stored = claim_only::storable(record, "NATS", cap);
            let body = serde_json::to_vec(stored.as_ref())
                .map_err(|e| Error::store(STORE, "record", e))?;
            let over = body.len().saturating_sub(max_payload);
            if over == 0 || max_payload == 0 || cap == 0 || record.error.is_none() {
                return Ok(body);
            }
            // The note the cut adds is under 200 bytes.
            cap = cap.saturating_sub(over.saturating_add(200));
        }
    }

    /// Purges the job's oldest records (by slot, then attempt) beyond `keep`.
    async fn prune(&self, stream: &Stream, job: &JobName, keep: usize) -> Result<()> {
        let base = self.subject("hist", job);
        let mut subjects: Vec<(i64, u32, String)> = self
            .subjects(stream, format!("{base}.>"))
            .await?
            .into_iter()
            .filter_map(|s| {
                let mut parts = s.strip_prefix(&base)?.strip_prefix('.')?.split('.');
                let slot = parts.next()?.parse().ok()?;
                let attempt = parts.next()?.parse().ok()?;
                Some((slot, attempt, s))
            })
            .collect();
        if subjects.len() <= keep {
            return Ok(());
        }
        subjects.sort();
        let excess = subjects.len() - keep;
        for (_, _, subject) in subjects.into_iter().take(excess) {
            self.bounded("prune", async {
                stream
                    .purge()
                    .filter(subject)
                    .await
                    .map(|_| ())
                    .map_err(|e| self.request_err("prune", e))
            })
            .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Store for NatsStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.writable("prepare")?;
        self.ensure().await?;
        self.note_jobs(&prepare.jobs).await
    }

    async fn now(&self) -> Result<EpochMs> {
        Ok(host_now())
    }

    async fn close(&self) -> Result<()> {
        if self.owned {
            // Drain flushes what was published and closes the connection; bounded, so a
            // dead server cannot hold `stop` up.
            let _ = tokio::time::timeout(self.opts.operation_timeout, self.client.drain()).await;
        }
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for NatsStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let stream = self.ensure().await?;
        let subjects = self
            .subjects(&stream, format!("{}.>", self.subject("hist", job)))
            .await?;
        let stream = &stream;
        let records: Vec<RunRecord> = self
            .bounded("history", async {
                futures::stream::iter(subjects)
                    .map(|subject| async move {
                        match stream.get_last_raw_message_by_subject(&subject).await {
                            Ok(m) => Ok(serde_json::from_slice::<RunRecord>(&m.payload).ok()),
                            // Pruned between the listing and the read.
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound
                                ) =>
                            {
                                Ok(None)
                            }
                            Err(e) => Err(self.request_err("history", e)),
                        }
                    })
                    .buffer_unordered(16)
                    .try_filter_map(|r| async move { Ok(r) })
                    .try_collect()
                    .await
            })
            .await?;
        Ok(claim_only::newest_first(records, count))
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.put_record(record, retention).await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        let stream = self.ensure().await?;
        let base = format!("{}.job.", self.opts.prefix);
        let mut jobs: Vec<JobName> = self
            .subjects(&stream, format!("{base}*"))
            .await?
            .into_iter()
            .filter_map(|s| JobName::new(s.strip_prefix(&base)?).ok())
            .collect();
        jobs.sort();
        jobs.dedup();
        Ok(jobs)
    }
}

#[async_trait]
impl ClaimStore for NatsStore {
    async fn claim_slot(&self, c: &SlotClaim) -> Result<SlotOutcome> {
        self.writable("claim")?;
        self.ensure().await?;
        claim_only::claim_slot(c, || async {
            // Nothing is sent while the client is between connections: an error, not a
            // claim that might arrive later.
            if self.client.connection_state() == State::Disconnected {
                return Err(self.unavailable("the connection to the server is down; reconnecting"));
            }
            let message = PublishMessage::build()
                .message_id(c.run.to_string())
                .payload(c.instance_id.clone().into_bytes().into());
            match self
                .publish("claim", self.subject("claim", &c.run.job), message)
                .await
            {
                Ok(ack) if ack.duplicate => Ok(Delivery::Duplicate),
                Ok(_) => Ok(Delivery::First),
                // The publish may have reached the stream.
                Err(Error::Timeout { .. }) => Ok(Delivery::AnswerLost),
                Err(e) => Err(e),
            }
        })
        .await
    }

    async fn record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.put_record(record, retention).await
    }

    fn claim_window(&self) -> Option<Duration> {
        Some(self.opts.duplicate_window)
    }
}
