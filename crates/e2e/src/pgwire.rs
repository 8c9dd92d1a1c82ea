//! [`PgStub`]: a Postgres that answers, but with an error (F7 on the
//! `service → Postgres` edges), speaking just enough of the wire protocol
//! (v3) for sqlx.
//!
//! A real server cannot be made to answer `53300 too_many_connections`,
//! `57P03 cannot_connect_now` or `40001 serialization_failure` on demand,
//! so a test puts this test double behind an edge's proxy
//! ([`crate::Cluster::redirect`]). Two modes:
//!
//! - [`PgStub::refuse_startup`]: every connection is refused after its
//!   `StartupMessage` with a `FATAL` `ErrorResponse` carrying the code, then
//!   closed — what a full or starting server does. sqlx's pool treats
//!   `53300` and `57P03` as transient *at connect* and tries again with a
//!   doubling backoff until its acquire timeout.
//! - [`PgStub::fail_statements`]: the startup completes (`AuthenticationOk`,
//!   a few `ParameterStatus`, `BackendKeyData`, `ReadyForQuery`), then every
//!   statement fails with an `ERROR` carrying the code, except session and
//!   transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`, `SET`, `RESET`,
//!   `DISCARD`) and the readiness probe `SELECT 1` (as a simple query),
//!   which succeed. So the pool connects (its `after_connect` runs `SET`s),
//!   transactions begin, and their first real statement fails, as a
//!   serialization failure does.
//!
//! Protocol coverage: `SSLRequest` and `GSSENCRequest` are declined (`N`);
//! simple `Query` is split on `;` (no quoting rules: a test double) and
//! answered statement by statement, stopping at the first error; extended
//! `Parse` of a failing statement answers the error and, as a real server
//! does, everything up to the next `Sync` is discarded (control statements
//! prepared are acknowledged and answered at `Execute`); `Sync` answers
//! `ReadyForQuery` with the transaction status (`I`, `T`, or `E` after an
//! error inside a transaction). Authentication is always `Ok`.
//!
//! Counted: TCP connections, completed startups, connections given up
//! before their startup, transactions (`BEGIN`s), errors sent, and the text
//! of every statement, so a test can count the transactions of one kind
//! (for example the ones whose statement is `INSERT INTO reservations`).

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

use crate::listen::{Log, accept_until};

/// Protocol 3.0, the `StartupMessage` code.
const PROTOCOL_3: u32 = 196_608;
/// The `SSLRequest` code.
const SSL_REQUEST: u32 = 80_877_103;
/// The `GSSENCRequest` code.
const GSSENC_REQUEST: u32 = 80_877_104;
/// Larger messages are refused (a test double never needs them).
const MAX_MESSAGE: usize = 16 << 20;

/// What the stub does with each connection.
#[derive(Debug, Clone)]
enum Mode {
    /// `FATAL` at startup, then close.
    RefuseStartup,
    /// Startup completes; statements fail.
    FailStatements,
}

/// The error the stub answers with.
#[derive(Debug)]
struct Failure {
    mode: Mode,
    code: String,
    message: String,
}

/// What the stub saw.
#[derive(Debug, Default)]
struct Seen {
    connections: AtomicU64,
    startups: AtomicU64,
    abandoned: AtomicU64,
    transactions: AtomicU64,
    errors: AtomicU64,
    statements: Log<String>,
}

/// A Postgres wire-protocol stub on 127.0.0.1:0, stopped on drop.
#[derive(Debug)]
pub struct PgStub {
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: CancellationToken,
}

impl PgStub {
    /// Starts one refusing every connection at startup with SQLSTATE `code`
    /// (`FATAL`), for example `53300` (too many connections) or `57P03`
    /// (the database system is starting up).
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn refuse_startup(code: &str, message: &str) -> std::io::Result<Self> {
        Self::start(Failure {
            mode: Mode::RefuseStartup,
            code: code.to_owned(),
            message: message.to_owned(),
        })
        .await
    }

    /// Starts one accepting connections and failing every statement but
    /// session and transaction control (and `SELECT 1`) with SQLSTATE
    /// `code` (`ERROR`), for example `40001` (could not serialize access).
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn fail_statements(code: &str, message: &str) -> std::io::Result<Self> {
        Self::start(Failure {
            mode: Mode::FailStatements,
            code: code.to_owned(),
            message: message.to_owned(),
        })
        .await
    }

    async fn start(failure: Failure) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Seen::default());
        let stop = CancellationToken::new();
        let failure = Arc::new(failure);
        let count = seen.clone();
        accept_until(listener, stop.clone(), move |socket| {
            count.connections.fetch_add(1, Ordering::Relaxed);
            let session = Session {
                socket,
                failure: failure.clone(),
                seen: count.clone(),
                status: b'I',
            };
            async move {
                let _ = session.run().await;
            }
        });
        Ok(Self { addr, seen, stop })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.seen.connections.load(Ordering::Relaxed)
    }

    /// `StartupMessage`s read so far (one per connection that got that far).
    pub fn startups(&self) -> u64 {
        self.seen.startups.load(Ordering::Relaxed)
    }

    /// Connections that ended before their `StartupMessage` (closed, or
    /// sent a cancel request or something unknown): a client that gave its
    /// connect up half-way, as a pool does when the acquire that started
    /// it is cancelled or times out. Once every accepted connection has
    /// got that far or given up, `startups() + abandoned() ==
    /// connections()`.
    pub fn abandoned(&self) -> u64 {
        self.seen.abandoned.load(Ordering::Relaxed)
    }

    /// Transactions begun so far (`BEGIN` / `START TRANSACTION`).
    pub fn transactions(&self) -> u64 {
        self.seen.transactions.load(Ordering::Relaxed)
    }

    /// `ErrorResponse`s sent so far (startup refusals and failed statements).
    pub fn errors(&self) -> u64 {
        self.seen.errors.load(Ordering::Relaxed)
    }

    /// Every statement seen so far, in order (trimmed SQL text).
    pub fn statements(&self) -> Vec<String> {
        self.seen.statements.all()
    }

    /// How many statements seen so far contain `needle` (case-sensitive).
    pub fn statements_containing(&self, needle: &str) -> usize {
        self.seen.statements.count(|s| s.contains(needle))
    }
}

impl Drop for PgStub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One client connection.
struct Session {
    socket: TcpStream,
    failure: Arc<Failure>,
    seen: Arc<Seen>,
    /// The transaction status of `ReadyForQuery`: `I`, `T` or `E`.
    status: u8,
}

/// How the stub answers one statement.
enum Answer {
    /// `CommandComplete` with this tag.
    Complete(&'static str),
    /// `SELECT 1`: one row, one `int4` column.
    One,
    /// `EmptyQueryResponse`.
    Empty,
    /// The configured error.
    Fail,
}

impl Session {
    /// Startup: SSL/GSS requests first, declined, then the
    /// `StartupMessage`. Whether it came.
    async fn read_startup(&mut self) -> std::io::Result<bool> {
        loop {
            let len = self.socket.read_u32().await? as usize;
            if !(8..=MAX_MESSAGE).contains(&len) {
                return Ok(false);
            }
            let mut body = vec![0; len - 4];
            self.socket.read_exact(&mut body).await?;
            let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            match code {
                SSL_REQUEST | GSSENC_REQUEST => self.socket.write_all(b"N").await?,
                PROTOCOL_3 => return Ok(true),
                // CancelRequest or an unknown protocol: nothing to do.
                _ => return Ok(false),
            }
        }
    }

    async fn run(mut self) -> std::io::Result<()> {
        if !matches!(self.read_startup().await, Ok(true)) {
            self.seen.abandoned.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.seen.startups.fetch_add(1, Ordering::Relaxed);
        if matches!(self.failure.mode, Mode::RefuseStartup) {
            let refusal = self.error("FATAL");
            self.socket.write_all(&refusal).await?;
            return self.socket.shutdown().await;
        }
        let mut out = message(b'R', &0u32.to_be_bytes());
        for (name, value) in [
            ("server_version", "16.0"),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
        ] {
            out.extend(message(b'S', &[cstr(name), cstr(value)].concat()));
        }
        out.extend(message(
            b'K',
            &[4242u32.to_be_bytes(), 1u32.to_be_bytes()].concat(),
        ));
        out.extend(self.ready());
        self.socket.write_all(&out).await?;

        // Messages: a tag byte, then a length that counts itself.
        let mut discarding = false;
        let mut prepared = String::new();
        loop {
            let tag = self.socket.read_u8().await?;
            let len = self.socket.read_u32().await? as usize;
            if !(4..=MAX_MESSAGE).contains(&len) {
                return Ok(());
            }
            let mut body = vec![0; len - 4];
            self.socket.read_exact(&mut body).await?;
            let mut out = Vec::new();
            match tag {
                // Query: answer each statement, stop at the first error.
                b'Q' => {
                    let sql = first_cstr(&body);
                    let parts: Vec<&str> = sql
                        .split(';')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .collect();
                    if parts.is_empty() {
                        out.extend(message(b'I', &[]));
                    }
                    for part in parts {
                        let (answer, failed) = self.answer(part);
                        out.extend(answer);
                        if failed {
                            break;
                        }
                    }
                    out.extend(self.ready());
                }
                // Parse: a failing statement answers its error at once (and
                // what follows up to Sync is discarded); control is kept for
                // Execute, which answers it as Query would.
                b'P' if !discarding => {
                    let sql = nth_cstr(&body, 1).trim().to_owned();
                    if matches!(self.classify(&sql), Answer::Fail | Answer::One) {
                        self.record(&sql);
                        out.extend(self.fail());
                        discarding = true;
                    } else {
                        out.extend(message(b'1', &[]));
                        prepared = sql;
                    }
                }
                b'B' if !discarding => out.extend(message(b'2', &[])),
                b'D' if !discarding => {
                    // Control statements have no parameters and no rows.
                    if body.first() == Some(&b'S') {
                        out.extend(message(b't', &0u16.to_be_bytes()));
                    }
                    out.extend(message(b'n', &[]));
                }
                b'E' if !discarding => {
                    let sql = std::mem::take(&mut prepared);
                    out.extend(self.answer(&sql).0);
                }
                b'C' if !discarding => out.extend(message(b'3', &[])),
                b'S' => {
                    discarding = false;
                    out.extend(self.ready());
                }
                b'X' => return Ok(()),
                // Flush, or anything after an error before Sync.
                _ => {}
            }
            if !out.is_empty() {
                self.socket.write_all(&out).await?;
            }
        }
    }

    /// Records `sql` and answers it; true when it failed.
    fn answer(&mut self, sql: &str) -> (Vec<u8>, bool) {
        self.record(sql);
        match self.classify(sql) {
            Answer::Complete(tag) => {
                match tag {
                    "BEGIN" => {
                        self.seen.transactions.fetch_add(1, Ordering::Relaxed);
                        self.status = b'T';
                    }
                    "COMMIT" if self.status == b'E' => {
                        self.status = b'I';
                        return (message(b'C', &cstr("ROLLBACK")), false);
                    }
                    "COMMIT" | "ROLLBACK" => self.status = b'I',
                    _ => {}
                }
                (message(b'C', &cstr(tag)), false)
            }
            Answer::One => {
                // RowDescription: "?column?", int4; DataRow "1"; complete.
                let mut field = cstr("?column?");
                field.extend(0u32.to_be_bytes()); // table oid
                field.extend(0u16.to_be_bytes()); // column number
                field.extend(23u32.to_be_bytes()); // int4
                field.extend(4i16.to_be_bytes()); // size
                field.extend((-1i32).to_be_bytes()); // modifier
                field.extend(0u16.to_be_bytes()); // text format
                let mut out = message(b'T', &[&1u16.to_be_bytes()[..], &field].concat());
                out.extend(message(
                    b'D',
                    &[&1u16.to_be_bytes()[..], &1u32.to_be_bytes(), b"1"].concat(),
                ));
                out.extend(message(b'C', &cstr("SELECT 1")));
                (out, false)
            }
            Answer::Empty => (message(b'I', &[]), false),
            Answer::Fail => (self.fail(), true),
        }
    }

    /// The configured error; a transaction in progress is now failed.
    fn fail(&mut self) -> Vec<u8> {
        if self.status == b'T' {
            self.status = b'E';
        }
        self.error("ERROR")
    }

    fn classify(&self, sql: &str) -> Answer {
        let upper = sql.to_ascii_uppercase();
        let word = upper.split_whitespace().next().unwrap_or("");
        match word {
            "" => Answer::Empty,
            "BEGIN" | "START" => Answer::Complete("BEGIN"),
            "COMMIT" | "END" => Answer::Complete("COMMIT"),
            "ROLLBACK" | "ABORT" => Answer::Complete("ROLLBACK"),
            "SET" => Answer::Complete("SET"),
            "RESET" => Answer::Complete("RESET"),
            "DISCARD" => Answer::Complete("DISCARD ALL"),
            _ if upper == "SELECT 1" => Answer::One,
            _ => Answer::Fail,
        }
    }

    fn record(&self, sql: &str) {
        self.seen.statements.push(sql.to_owned());
    }

    /// An `ErrorResponse` with `severity` and the configured code.
    fn error(&self, severity: &str) -> Vec<u8> {
        self.seen.errors.fetch_add(1, Ordering::Relaxed);
        let mut fields = Vec::new();
        for (kind, value) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', self.failure.code.as_str()),
            (b'M', self.failure.message.as_str()),
        ] {
            fields.push(kind);
            fields.extend(cstr(value));
        }
        fields.push(0);
        message(b'E', &fields)
    }

    fn ready(&self) -> Vec<u8> {
        message(b'Z', &[self.status])
    }
}

/// A backend message: tag, length (counting itself), body.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len() + 4).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(tag);
    out.extend(len.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A NUL-terminated string.
fn cstr(s: &str) -> Vec<u8> {
    let mut out = s.as_bytes().to_vec();
    out.push(0);
    out
}

/// The first NUL-terminated string of `body`.
fn first_cstr(body: &[u8]) -> String {
    nth_cstr(body, 0)
}

/// The `n`th NUL-terminated string of `body` (empty when there is none).
fn nth_cstr(body: &[u8], n: usize) -> String {
    body.split(|&b| b == 0)
        .nth(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor, postgres::PgConnection};

    use super::PgStub;

    fn url(stub: &PgStub) -> String {
        format!("postgres://e2e@{}/e2e", stub.addr())
    }

    #[tokio::test]
    async fn sqlx_sees_the_code_at_startup_as_transient() {
        let stub = PgStub::refuse_startup("53300", "sorry, too many clients already")
            .await
            .expect("stub");
        let err = PgConnection::connect(&url(&stub))
            .await
            .expect_err("refused at startup");
        let db = err.as_database_error().expect("a database error");
        assert_eq!(db.code().as_deref(), Some("53300"));
        assert!(db.is_transient_in_connect_phase(), "the pool retries it");
        assert_eq!(
            (stub.connections(), stub.startups(), stub.errors()),
            (1, 1, 1)
        );
        assert_eq!(stub.abandoned(), 0);
    }

    #[tokio::test]
    async fn a_connection_closed_before_its_startup_is_counted_as_abandoned() {
        let stub = PgStub::refuse_startup("53300", "sorry, too many clients already")
            .await
            .expect("stub");
        // What a pool leaves when the acquire that started a connect is
        // dropped after the TCP handshake, before the startup was sent.
        drop(
            tokio::net::TcpStream::connect(stub.addr())
                .await
                .expect("connect"),
        );
        shopeasy_testkit::assert_eventually(
            std::time::Duration::from_secs(5),
            "the stub sees it close",
            async || stub.abandoned() == 1,
        )
        .await;
        assert_eq!(
            (stub.connections(), stub.startups(), stub.errors()),
            (1, 0, 0)
        );
    }

    #[tokio::test]
    async fn sqlx_transactions_fail_at_their_first_statement() {
        let stub = PgStub::fail_statements("40001", "could not serialize access")
            .await
            .expect("stub");
        let mut conn = PgConnection::connect(&url(&stub))
            .await
            .expect("startup completes");
        conn.execute("SET statement_timeout = 100; SET lock_timeout = 100")
            .await
            .expect("SET succeeds");
        conn.execute("SELECT 1").await.expect("the readiness probe");
        conn.ping().await.expect("ping");
        let mut tx = conn.begin().await.expect("BEGIN");
        let err = sqlx::query("INSERT INTO t (x) VALUES ($1)")
            .bind(1_i64)
            .execute(&mut *tx)
            .await
            .expect_err("the statement fails");
        let code = err.as_database_error().and_then(|d| d.code());
        assert_eq!(code.as_deref(), Some("40001"));
        tx.rollback().await.expect("ROLLBACK");
        conn.ping().await.expect("still usable");
        assert_eq!(stub.transactions(), 1);
        assert_eq!(stub.statements_containing("INSERT INTO t"), 1);
        assert_eq!(stub.statements_containing("ROLLBACK"), 1);
    }
}
