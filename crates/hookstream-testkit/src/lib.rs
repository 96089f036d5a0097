//! Test support for integration tests against the real things: a fresh PostgreSQL database
//! and fresh Kafka topics and consumer group per test (so tests run in parallel), and HTTP
//! receivers on port 0 that check every signature with an independent Standard Webhooks
//! implementation (the `standardwebhooks` crate), not with Hookstream's own code.
//!
//! PostgreSQL and Kafka must be running (`make test` starts them): the base URLs come from
//! `HOOKSTREAM_TEST_DATABASE_URL` and `HOOKSTREAM_TEST_KAFKA_BROKERS`.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod broker;
pub mod busy;
pub mod fixtures;
pub mod partition;
pub mod process;
pub mod receiver;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hookstream_config::{DatabaseConfig, KafkaConfig, RetryConfig, SecretsConfig, TopicsConfig};
use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_kafka::rdkafka::message::Headers as _;
use hookstream_kafka::rdkafka::{Message as _, Offset, TopicPartitionList};
use hookstream_kafka::TopicSpec;
use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx::{self, PgPool};
use uuid::Uuid;

pub use receiver::{Behaviour, Received, Receiver};

/// One test's private database and topics.
pub struct TestEnv {
    pub name: String,
    pub database: DatabaseConfig,
    pub kafka: KafkaConfig,
    pub pool: PgPool,
    pub partitions: i32,
    /// Retry tiers with this test's own topic prefix and group (default schedule; tests that
    /// exercise retries compress it).
    pub retry: RetryConfig,
    /// This test's own key for sealing endpoint secrets.
    pub secrets: SecretsConfig,
}

fn base_database_url() -> String {
    std::env::var("HOOKSTREAM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn brokers() -> String {
    std::env::var("HOOKSTREAM_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

impl TestEnv {
    /// Creates database `hs_test_<id>` (migrated) and topics `test.<id>.*`.
    pub async fn new(partitions: i32) -> anyhow::Result<Self> {
        Self::on_brokers(partitions, &brokers()).await
    }

    /// `new`, on the Kafka at `brokers` (a test's private broker) instead of the shared one.
    pub async fn on_brokers(partitions: i32, brokers: &str) -> anyhow::Result<Self> {
        let id = Uuid::new_v4().simple().to_string()[..12].to_string();
        let name = format!("hs_test_{id}");
        let base = base_database_url();
        let admin = PgPool::connect(&base)
            .await
            .context("connecting to the test PostgreSQL (is it running?)")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await?;
        admin.close().await;
        let mut url = url::Url::parse(&base)?;
        url.set_path(&name);
        let database = DatabaseConfig {
            url: url.to_string(),
            max_connections: 10,
            migrate_on_start: false,
            ..Default::default()
        };
        let pool = hookstream_store::connect(&database).await?;
        hookstream_store::migrate(&pool).await?;

        let topics = TopicsConfig {
            events: format!("test.{id}.events"),
            dlq: format!("test.{id}.dlq"),
            attempts: format!("test.{id}.attempts"),
        };
        let kafka = KafkaConfig {
            brokers: brokers.to_string(),
            topics: topics.clone(),
            group_id: format!("test.{id}.dispatcher"),
            ..Default::default()
        };
        let retry = RetryConfig {
            topic_prefix: format!("test.{id}.retry."),
            group_id: format!("test.{id}.retry"),
            partitions,
            ..Default::default()
        };
        let env = Self {
            name,
            database,
            kafka,
            pool,
            partitions,
            retry,
            secrets: SecretsConfig {
                key: hookstream_store::sealing::Sealer::generate_key("test"),
                ..Default::default()
            },
        };
        // As `hookstream topics create` makes them (the DLQ's record limit included), with this
        // environment's partitions and one replica.
        env.create_main_topics()
            .await
            .context("creating test topics (is Kafka running?)")?;
        Ok(env)
    }

    /// Drops this environment's database and deletes its topics (`test.<id>.*`). For long
    /// runs that make many environments (the load tests); a test keeps its own for a
    /// post-mortem and `make test` drops old databases before it starts.
    pub async fn discard(self) -> anyhow::Result<()> {
        use hookstream_kafka::rdkafka::admin::{AdminClient, AdminOptions};
        use hookstream_kafka::rdkafka::client::DefaultClientContext;
        self.pool.close().await;
        let admin = PgPool::connect(&base_database_url()).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
            .execute(&admin)
            .await?;
        admin.close().await;
        let prefix = self
            .kafka
            .topics
            .events
            .strip_suffix("events")
            .unwrap_or(&self.kafka.topics.events)
            .to_string();
        let kafka = self.kafka.clone();
        let names = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<String>> {
            let consumer: BaseConsumer = hookstream_kafka::client_config(&kafka).create()?;
            let metadata = consumer.fetch_metadata(None, Duration::from_secs(10))?;
            Ok(metadata
                .topics()
                .iter()
                .map(|t| t.name().to_string())
                .filter(|n| n.starts_with(&prefix))
                .collect())
        })
        .await??;
        if !names.is_empty() {
            let admin: AdminClient<DefaultClientContext> =
                hookstream_kafka::client_config(&self.kafka).create()?;
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
            admin.delete_topics(&refs, &opts).await?;
        }
        Ok(())
    }

    /// Deletes one of this environment's topics (as an operator or a cleanup job might).
    pub async fn delete_topic(&self, topic: &str) -> anyhow::Result<()> {
        use hookstream_kafka::rdkafka::admin::{AdminClient, AdminOptions};
        use hookstream_kafka::rdkafka::client::DefaultClientContext;
        let admin: AdminClient<DefaultClientContext> =
            hookstream_kafka::client_config(&self.kafka).create()?;
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        for result in admin.delete_topics(&[topic], &opts).await? {
            result.map_err(|(name, code)| anyhow::anyhow!("deleting {name}: {code}"))?;
        }
        Ok(())
    }

    /// Creates this environment's events, DLQ and attempts topics that do not exist (again).
    pub async fn create_main_topics(&self) -> anyhow::Result<()> {
        let specs: Vec<TopicSpec> = hookstream_kafka::topics::main_specs(&self.kafka)
            .into_iter()
            .map(|s| TopicSpec {
                partitions: self.partitions,
                replication: 1,
                ..s
            })
            .collect();
        hookstream_kafka::ensure_topics(&self.kafka, &specs).await?;
        Ok(())
    }

    /// The DLQ sink's consumer group for this test's dispatchers.
    pub fn dlq_sink_group(&self) -> String {
        format!("{}.dlq-sink", self.kafka.group_id)
    }

    /// The attempt sink's consumer group for this test's dispatchers.
    pub fn attempt_sink_group(&self) -> String {
        format!("{}.attempt-sink", self.kafka.group_id)
    }

    /// Seals and opens endpoint secrets with this test's key.
    pub fn sealer(&self) -> hookstream_store::sealing::Sealer {
        hookstream_store::sealing::Sealer::from_config(&self.secrets).expect("the test key is valid")
    }

    /// The address policy of a test's services: public addresses and loopback (receivers on
    /// 127.0.0.1 are allow-listed, as `process::dispatcher_env` does for the services).
    pub fn address_policy(&self) -> hookstream_egress::AddressPolicy {
        hookstream_egress::AddressPolicy::new(vec!["127.0.0.0/8".parse().expect("a valid cidr")])
    }

    /// A log file path for a child process of this test.
    pub fn log_path(&self, name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join("hookstream-tests").join(&self.name);
        let _ = std::fs::create_dir_all(&dir);
        dir.join(format!("{name}.log"))
    }

    /// A login role of this test's own (`<database>_<suffix>`) and a database config using it,
    /// so that a test can take the database away from one service alone, as an outage or a
    /// revoked password would (`set_reachable`).
    pub async fn login_role(&self, suffix: &str) -> anyhow::Result<(String, DatabaseConfig)> {
        let role = format!("{}_{suffix}", self.name);
        sqlx::query(&format!("CREATE ROLE {role} LOGIN SUPERUSER"))
            .execute(&self.pool)
            .await?;
        let mut url = url::Url::parse(&self.database.url)?;
        url.set_username(&role)
            .map_err(|()| anyhow::anyhow!("cannot set the user of {}", self.database.url))?;
        let database = DatabaseConfig {
            url: url.to_string(),
            ..self.database.clone()
        };
        Ok((role, database))
    }

    /// Takes the database away from `role` (no new logins, its sessions ended) or gives it back.
    pub async fn set_reachable(&self, role: &str, reachable: bool) -> anyhow::Result<()> {
        let login = if reachable { "LOGIN" } else { "NOLOGIN" };
        sqlx::query(&format!("ALTER ROLE {role} {login}"))
            .execute(&self.pool)
            .await?;
        if !reachable {
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
                .bind(role)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    pub async fn tenant(&self, name: &str) -> anyhow::Result<Uuid> {
        Ok(hookstream_store::tenants::create(&self.pool, name).await?.id)
    }

    /// Creates an endpoint for `receiver` and hands the receiver its secret.
    pub async fn endpoint(
        &self,
        tenant: Uuid,
        receiver: &Receiver,
        event_types: &[&str],
    ) -> anyhow::Result<Uuid> {
        let new = hookstream_store::endpoints::NewEndpoint {
            tenant_id: tenant,
            event_types: event_types.iter().map(|s| s.to_string()).collect(),
            timeout_ms: Some(5_000),
            ..Default::default()
        };
        self.endpoint_with(receiver, new).await
    }

    /// Creates an endpoint for `receiver` with `new`'s settings (its url is the receiver's,
    /// unless `new` names one) and hands the receiver its secret (beside any it has: one
    /// receiver may serve several endpoints).
    pub async fn endpoint_with(
        &self,
        receiver: &Receiver,
        new: hookstream_store::endpoints::NewEndpoint,
    ) -> anyhow::Result<Uuid> {
        let url = if new.url.is_empty() {
            receiver.url()
        } else {
            new.url.clone()
        };
        let new = hookstream_store::endpoints::NewEndpoint { url, ..new };
        let (ep, secret) = hookstream_store::endpoint_admin::create_from(
            &self.pool,
            &self.sealer(),
            &self.address_policy(),
            new,
        )
        .await?;
        receiver.add_secret(&secret.expose());
        Ok(ep.id)
    }

    /// Publishes events in one transaction through `hookstream.enqueue`.
    pub async fn publish(&self, events: &[NewEvent]) -> anyhow::Result<Vec<Uuid>> {
        let mut tx = self.pool.begin().await?;
        let mut ids = Vec::with_capacity(events.len());
        for e in events {
            ids.push(hookstream_store::outbox::enqueue(&mut tx, e).await?);
        }
        tx.commit().await?;
        Ok(ids)
    }

    /// Rows still in the outbox.
    pub async fn outbox_len(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM hookstream.outbox")
            .fetch_one(&self.pool)
            .await?)
    }

    /// End offsets (high watermarks) of every partition of a topic. Retries for a while:
    /// a young broker answers "not leader" until partition metadata has settled. (Blocking
    /// Kafka calls run off the runtime's worker threads.)
    pub async fn end_offsets(&self, topic: &str) -> anyhow::Result<Vec<i64>> {
        let (kafka, topic, partitions) = (self.kafka.clone(), topic.to_string(), self.partitions);
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = hookstream_kafka::client_config(&kafka).create()?;
            retry_transient(|| {
                (0..partitions)
                    .map(|p| Ok(consumer.fetch_watermarks(&topic, p, Duration::from_secs(10))?.1))
                    .collect()
            })
        })
        .await?
    }

    /// The offsets the dispatcher's group committed on a topic (-1 where none).
    pub async fn committed_offsets(&self, topic: &str) -> anyhow::Result<Vec<i64>> {
        self.group_offsets(&self.kafka.group_id.clone(), topic).await
    }

    /// The offsets a consumer group committed on a topic (-1 where none).
    pub async fn group_offsets(&self, group: &str, topic: &str) -> anyhow::Result<Vec<i64>> {
        self.in_group(group, topic, Offset::Invalid, |consumer, tpl| {
            let committed =
                retry_transient(|| Ok(consumer.committed_offsets(tpl.clone(), Duration::from_secs(10))?))?;
            Ok(committed
                .elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => o,
                    _ => -1,
                })
                .collect())
        })
        .await
    }

    /// Commits offset 0 on every partition of `topic` for `group`: what a consumer killed
    /// before it stored its offsets leaves behind, so the group's next member handles every
    /// record again. The group must have no members (stop them first); retried while the
    /// broker still counts a leaving member.
    pub async fn rewind_group(&self, group: &str, topic: &str) -> anyhow::Result<()> {
        self.in_group(group, topic, Offset::Offset(0), |consumer, tpl| {
            retry_transient(|| {
                Ok(consumer.commit(&tpl, hookstream_kafka::rdkafka::consumer::CommitMode::Sync)?)
            })
        })
        .await
    }

    /// Runs `f` off the runtime's workers with a consumer of `group` (not subscribed) and
    /// every partition of `topic` listed at `offset`.
    async fn in_group<T: Send + 'static>(
        &self,
        group: &str,
        topic: &str,
        offset: Offset,
        f: impl FnOnce(&BaseConsumer, TopicPartitionList) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let (kafka, topic, partitions, group) = (
            self.kafka.clone(),
            topic.to_string(),
            self.partitions,
            group.to_string(),
        );
        tokio::task::spawn_blocking(move || {
            let mut cfg = hookstream_kafka::client_config(&kafka);
            cfg.set("group.id", &group);
            let consumer: BaseConsumer = cfg.create()?;
            let mut tpl = TopicPartitionList::new();
            for p in 0..partitions {
                tpl.add_partition_offset(&topic, p, offset)?;
            }
            f(&consumer, tpl)
        })
        .await?
    }

    /// Waits until the dispatcher's group has committed every record of the events topic.
    pub async fn committed_to_end(&self, timeout: Duration) -> bool {
        let topic = &self.kafka.topics.events;
        eventually(timeout, move || async move {
            match (self.end_offsets(topic).await, self.committed_offsets(topic).await) {
                (Ok(ends), Ok(committed)) => committed_at_end(&ends, &committed),
                _ => false,
            }
        })
        .await
    }

    /// Reads every record of a topic, from the beginning up to its end offsets as of now.
    pub async fn read_all(&self, topic: &str) -> anyhow::Result<Vec<Record>> {
        let ends = self.end_offsets(topic).await?;
        let total: i64 = ends.iter().sum();
        let records = self
            .read_topic(topic, total as usize, Duration::from_secs(60))
            .await?;
        anyhow::ensure!(
            records.len() as i64 >= total,
            "read {} of {total} records of {topic}",
            records.len()
        );
        Ok(records)
    }

    /// Reads every record of a topic from the beginning until `expected` were read or
    /// `timeout` passed; returns them in partition order.
    pub async fn read_topic(
        &self,
        topic: &str,
        expected: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Record>> {
        let (kafka, topic, partitions) = (self.kafka.clone(), topic.to_string(), self.partitions);
        tokio::task::spawn_blocking(move || read_topic(&kafka, &topic, partitions, expected, timeout)).await?
    }
}

fn read_topic(
    kafka: &KafkaConfig,
    topic: &str,
    partitions: i32,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Record>> {
    let mut cfg = hookstream_kafka::client_config(kafka);
    cfg.set("group.id", format!("reader.{}", Uuid::new_v4()))
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = cfg.create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    while out.len() < expected && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m?;
            out.push(Record {
                partition: m.partition(),
                offset: m.offset(),
                timestamp_ms: m.timestamp().to_millis(),
                key: m
                    .key()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default(),
                payload: m.payload().unwrap_or_default().to_vec(),
                headers: m
                    .headers()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// Whether a group's committed offsets (`group_offsets`, -1 where none) have reached a topic's
/// end offsets on every partition (an empty partition needs no commit).
pub fn committed_at_end(ends: &[i64], committed: &[i64]) -> bool {
    ends.len() == committed.len() && ends.iter().zip(committed).all(|(e, c)| *e == 0 || c == e)
}

/// Runs a blocking Kafka query, retrying errors for up to 15 s (call it off the runtime).
fn retry_transient<T>(mut query: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match query() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A record read back from a topic.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms since the epoch): the broker's append time on the retry
    /// tiers, the producer's elsewhere.
    pub timestamp_ms: Option<i64>,
    pub key: String,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The value of the first header named `key`.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }
}

/// Polls `check` every 50 ms until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counts occurrences of each id.
pub fn counts<I: IntoIterator<Item = String>>(ids: I) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for id in ids {
        *m.entry(id).or_insert(0) += 1;
    }
    m
}

/// The local stack's secured listeners (`scripts/stack/kafka.sh`): SASL_SSL with SCRAM and
/// PLAIN, and TLS with client certificates required, both signed by the stack's own CA.
pub mod secured {
    use std::path::PathBuf;

    use hookstream_config::{KafkaConfig, KafkaSecurity};

    fn port_of(brokers: &str) -> u16 {
        brokers
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("HOOKSTREAM_TEST_KAFKA_BROKERS is host:port")
    }

    /// Where the stack keeps its CA, certificates and SASL password.
    pub fn tls_dir() -> PathBuf {
        if let Ok(dir) = std::env::var("HOOKSTREAM_TEST_KAFKA_TLS_DIR") {
            return dir.into();
        }
        let state = std::env::var("HOOKSTREAM_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.hookstream"));
        state.join("data/kafka/tls")
    }

    fn file(name: &str) -> PathBuf {
        file_in(&tls_dir(), name)
    }

    fn file_in(dir: &std::path::Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        assert!(
            path.exists(),
            "{} is missing: the secured Kafka listeners come from scripts/stack/kafka.sh \
             (restart an older broker: bash scripts/stack/kafka.sh stop; make infra)",
            path.display()
        );
        path
    }

    /// `127.0.0.1:<port>` of the SASL_SSL listener (the plaintext port + 2).
    pub fn sasl_brokers() -> String {
        std::env::var("HOOKSTREAM_TEST_KAFKA_SASL_BROKERS")
            .unwrap_or_else(|_| format!("127.0.0.1:{}", port_of(&super::brokers()) + 2))
    }

    /// `127.0.0.1:<port>` of the mutual-TLS listener (the plaintext port + 3).
    pub fn mtls_brokers() -> String {
        std::env::var("HOOKSTREAM_TEST_KAFKA_MTLS_BROKERS")
            .unwrap_or_else(|_| format!("127.0.0.1:{}", port_of(&super::brokers()) + 3))
    }

    /// The stack's SASL user's password, and the file holding it.
    pub fn sasl_password_file() -> PathBuf {
        file("sasl-password")
    }

    /// `kafka` reached over SASL_SSL with `mechanism` (SCRAM-SHA-256/512 or PLAIN), the
    /// password read from its file, and the stack's CA.
    pub fn sasl(kafka: &KafkaConfig, mechanism: &str) -> KafkaConfig {
        sasl_via(kafka, mechanism, sasl_brokers(), &tls_dir())
    }

    /// `sasl`, on the SASL_SSL listener at `brokers` of a broker whose CA and password are in
    /// `tls` (a private broker's: `broker::PrivateKafka::sasl`).
    pub fn sasl_via(
        kafka: &KafkaConfig,
        mechanism: &str,
        brokers: String,
        tls: &std::path::Path,
    ) -> KafkaConfig {
        let file = |name: &str| file_in(tls, name);
        KafkaConfig {
            brokers,
            security: KafkaSecurity {
                protocol: "sasl_ssl".into(),
                ca_file: Some(file("ca.pem")),
                sasl_mechanism: Some(mechanism.into()),
                sasl_username: Some("hookstream".into()),
                sasl_password_file: Some(file("sasl-password")),
                ..Default::default()
            },
            ..kafka.clone()
        }
    }

    /// `kafka` reached over TLS with the stack's client certificate.
    pub fn mtls(kafka: &KafkaConfig) -> KafkaConfig {
        KafkaConfig {
            brokers: mtls_brokers(),
            security: KafkaSecurity {
                protocol: "ssl".into(),
                ca_file: Some(file("ca.pem")),
                cert_file: Some(file("client.crt")),
                key_file: Some(file("client.key")),
                ..Default::default()
            },
            ..kafka.clone()
        }
    }
}

/// The local PostgreSQL's TLS (`scripts/stack/postgres.sh`): a server certificate for IP
/// 127.0.0.1 only (not `localhost`) signed by the stack's own CA, the role `hookstream_mtls`
/// that logs in only with the client certificate, and the group `hookstream_password_login`
/// whose members must give their password (everyone else is trusted).
pub mod pg_tls {
    use std::path::PathBuf;

    /// The role whose only way in is TLS with the stack's client certificate.
    pub const MTLS_USER: &str = "hookstream_mtls";
    /// Members of this role authenticate with a password (SCRAM), not `trust`.
    pub const PASSWORD_GROUP: &str = "hookstream_password_login";

    /// Where the stack keeps its CA and certificates.
    pub fn tls_dir() -> PathBuf {
        if let Ok(dir) = std::env::var("HOOKSTREAM_TEST_PG_TLS_DIR") {
            return dir.into();
        }
        let state = std::env::var("HOOKSTREAM_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.hookstream"));
        state.join("data/postgres-tls")
    }

    fn file(name: &str) -> PathBuf {
        let path = tls_dir().join(name);
        assert!(
            path.exists(),
            "{} is missing: PostgreSQL's TLS comes from scripts/stack/postgres.sh \
             (restart an older cluster: bash scripts/stack/postgres.sh stop; make infra)",
            path.display()
        );
        path
    }

    /// The CA the server's certificate chains to.
    pub fn ca() -> PathBuf {
        file("ca.pem")
    }

    /// The client certificate and key of [`MTLS_USER`].
    pub fn client_cert() -> PathBuf {
        file("client.crt")
    }

    pub fn client_key() -> PathBuf {
        file("client.key")
    }

    /// The test PostgreSQL's URL (`HOOKSTREAM_TEST_DATABASE_URL`, database `postgres`).
    pub fn database_url() -> String {
        super::base_database_url()
    }
}
