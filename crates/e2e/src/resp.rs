//! [`RespStub`]: a Redis that answers, but with an error (F7 on the
//! `service → Redis` edges): `LOADING` (a restarted server reading its
//! dataset), `BUSY` (a script running too long), `OOM` (`maxmemory`
//! reached).
//!
//! A real Redis cannot be held in those states on demand, so a test puts
//! this test double behind an edge's proxy ([`crate::Cluster::redirect`]).
//! It speaks RESP2 and RESP3 requests (arrays of bulk strings, and inline
//! commands) and answers:
//!
//! - the connection handshake with success, so the client connects as it
//!   would to a real server in that state (which accepts these even while
//!   loading): `HELLO` (a server-info map in RESP3 for `HELLO 3`, an array
//!   otherwise), `AUTH`, `SELECT`, `CLIENT …` (redis-rs pipelines `CLIENT
//!   SETINFO LIB-NAME`/`LIB-VER` on every new connection) → `+OK`; `QUIT`
//!   → `+OK` and close;
//! - every other command, `PING` included (a loading server refuses it
//!   too), with the one fixed error line, for example
//!   `-LOADING Redis is loading the dataset in memory`.
//!
//! Counted: TCP connections, and every command's name (`GET`, `EVAL`,
//! `CLIENT SETINFO`, …), so a test can tell the handshake from the calls a
//! request made.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::listen::{Log, accept_until};

/// Commands answered with success: the connection handshake.
const HANDSHAKE: [&str; 5] = ["HELLO", "AUTH", "SELECT", "CLIENT", "QUIT"];
/// Larger requests are refused (a test double never needs them).
const MAX_REQUEST: usize = 16 << 20;

/// What the stub saw.
#[derive(Debug, Default)]
struct Seen {
    connections: AtomicU64,
    commands: Log<String>,
}

/// A RESP stub on 127.0.0.1:0 answering every non-handshake command with
/// one error; stopped on drop.
#[derive(Debug)]
pub struct RespStub {
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: CancellationToken,
}

impl RespStub {
    /// Starts one answering every command but the handshake with
    /// `-{error}` (for example `LOADING Redis is loading the dataset in
    /// memory`; the first word is the error code clients classify by).
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(error: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Seen::default());
        let stop = CancellationToken::new();
        let refusal: Arc<[u8]> = format!("-{}\r\n", error.replace(['\r', '\n'], " "))
            .into_bytes()
            .into();
        let count = seen.clone();
        accept_until(listener, stop.clone(), move |socket| {
            count.connections.fetch_add(1, Ordering::Relaxed);
            let (seen, refusal) = (count.clone(), refusal.clone());
            async move {
                let _ = serve(socket, &seen, &refusal).await;
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

    /// Every command seen so far, in order: its name in upper case, with
    /// the subcommand for `CLIENT` (`CLIENT SETINFO`).
    pub fn commands(&self) -> Vec<String> {
        self.seen.commands.all()
    }

    /// Commands seen so far that were answered with the error (everything
    /// but the handshake): the calls the clients actually made.
    pub fn refused(&self) -> usize {
        self.seen.commands.count(|c| !is_handshake(c))
    }
}

impl Drop for RespStub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn is_handshake(command: &str) -> bool {
    let name = command.split(' ').next().unwrap_or("");
    HANDSHAKE.contains(&name)
}

/// Answers one connection's commands until it closes.
async fn serve(mut socket: TcpStream, seen: &Seen, refusal: &[u8]) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Answer every complete command buffered (clients pipeline).
        let mut out = Vec::new();
        let mut quit = false;
        while let Some((args, used)) = parse(&buffer) {
            buffer.drain(..used);
            let Some(first) = args.first() else {
                continue;
            };
            let name = String::from_utf8_lossy(first).to_ascii_uppercase();
            let command = match (name.as_str(), args.get(1)) {
                ("CLIENT", Some(sub)) => {
                    format!(
                        "CLIENT {}",
                        String::from_utf8_lossy(sub).to_ascii_uppercase()
                    )
                }
                _ => name.clone(),
            };
            seen.commands.push(command);
            match name.as_str() {
                "HELLO" => {
                    let resp3 = args.get(1).is_some_and(|v| v.as_slice() == b"3");
                    out.extend_from_slice(if resp3 {
                        b"%3\r\n+server\r\n+redis\r\n+version\r\n+7.2.0\r\n+proto\r\n:3\r\n"
                            .as_slice()
                    } else {
                        b"*6\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n$5\r\nproto\r\n:2\r\n"
                            .as_slice()
                    });
                }
                "QUIT" => {
                    out.extend_from_slice(b"+OK\r\n");
                    quit = true;
                    break;
                }
                n if HANDSHAKE.contains(&n) => out.extend_from_slice(b"+OK\r\n"),
                _ => out.extend_from_slice(refusal),
            }
        }
        if !out.is_empty() {
            socket.write_all(&out).await?;
        }
        if quit || buffer.len() > MAX_REQUEST {
            return socket.shutdown().await;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// One complete command at the start of `buffer`: its arguments and the
/// bytes it used; `None` until it is complete.
fn parse(buffer: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let (first, mut at) = line(buffer, 0)?;
    let Some(count) = first.strip_prefix(b"*") else {
        // An inline command: words on one line.
        let args = first
            .split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Some((args, at));
    };
    let count: usize = std::str::from_utf8(count).ok()?.parse().ok()?;
    let mut args = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (header, next) = line(buffer, at)?;
        let len: usize = std::str::from_utf8(header.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        let end = next.checked_add(len)?;
        if buffer.len() < end + 2 {
            return None;
        }
        args.push(buffer[next..end].to_vec());
        at = end + 2;
    }
    Some((args, at))
}

/// The line starting at `from` (without its CRLF) and where the next begins.
fn line(buffer: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buffer.get(from..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], from + end + 2))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_arrays_inline_commands_and_waits_for_the_rest() {
        let (args, used) = parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1").expect("complete");
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(used, 20);
        assert!(parse(b"*2\r\n$3\r\nGET\r\n$1\r\n").is_none());
        let (args, _) = parse(b"PING  x\r\n").expect("inline");
        assert_eq!(args, vec![b"PING".to_vec(), b"x".to_vec()]);
    }
}
