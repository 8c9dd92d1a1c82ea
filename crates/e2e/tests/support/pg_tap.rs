//! [`PgTap`]: a Postgres wire-protocol tap that counts the statements a
//! service executes (F9 counts the product service's queries with it:
//! `pg_stat_statements` is not loaded on the shared server).

/// A Postgres wire-protocol tap: a TCP relay that records every statement
/// a client executes (extended protocol `Parse`/`Bind`, or simple `Query`)
/// while passing every byte on unchanged. It answers `SSLRequest` with
/// `N` itself, so the client talks plaintext and the tap can read it.
pub struct PgTap {
    addr: std::net::SocketAddr,
    executed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PgTap {
    /// Starts a tap on 127.0.0.1:0 relaying to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("tap listener");
        let addr = listener.local_addr().expect("tap address");
        let executed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = executed.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, log) = (upstream.clone(), log.clone());
                connections.spawn(async move {
                    let _ = pg_tap_connection(client, &upstream, &log).await;
                });
            }
        });
        Self {
            addr,
            executed,
            task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Statements executed so far whose SQL contains `needle`.
    pub fn executions(&self, needle: &str) -> usize {
        self.executed
            .lock()
            .expect("tap log")
            .iter()
            .filter(|sql| sql.contains(needle))
            .count()
    }
}

impl Drop for PgTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The SQL `ProductStore::get` runs (one product by id).
pub const PRODUCT_BY_ID_SQL: &str = "FROM products WHERE id = $1";

/// Splits a NUL-terminated string off the front of `bytes`.
fn cstr(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let rest = bytes.get(end + 1..).unwrap_or(&[]);
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), rest)
}

async fn pg_tap_connection(
    mut client: tokio::net::TcpStream,
    upstream: &str,
    executed: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SSL_REQUEST: u32 = 80_877_103;
    const GSSENC_REQUEST: u32 = 80_877_104;
    let mut server = tokio::net::TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    // Start-up messages have no type byte: length, then a code.
    loop {
        let mut head = [0u8; 8];
        client.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            client.write_all(b"N").await?;
            continue;
        }
        let mut message = head.to_vec();
        message.resize(len.max(8), 0);
        client.read_exact(&mut message[8..]).await?;
        server.write_all(&message).await?;
        break;
    }
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let responses = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut statements = std::collections::HashMap::new();
    let result = async {
        loop {
            let mut head = [0u8; 5];
            client_read.read_exact(&mut head).await?;
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut message = head.to_vec();
            message.resize(len.max(4) + 1, 0);
            client_read.read_exact(&mut message[5..]).await?;
            let body = &message[5..];
            match head[0] {
                b'P' => {
                    let (name, rest) = cstr(body);
                    statements.insert(name, cstr(rest).0);
                }
                b'B' => {
                    let (_portal, rest) = cstr(body);
                    if let Some(sql) = statements.get(&cstr(rest).0) {
                        executed.lock().expect("tap log").push(sql.clone());
                    }
                }
                b'Q' => executed.lock().expect("tap log").push(cstr(body).0),
                _ => {}
            }
            server_write.write_all(&message).await?;
        }
    }
    .await;
    let _ = server_write.shutdown().await;
    responses.abort();
    result
}
