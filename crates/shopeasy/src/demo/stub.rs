//! A scripted HTTP upstream on loopback: each request it receives gets the
//! next answer of a script (an HTTP status, or no answer for a while), and
//! its arrival time is recorded — the provider's side of the story, which
//! is where the lesson counts calls.
//!
//! It speaks just enough HTTP/1.1 for the scenes' clients: requests with no
//! body, answers with an empty one, connections kept alive.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::{JoinHandle, JoinSet},
    time::Instant,
};

/// One scripted answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Answer at once with this status.
    Status(u16),
    /// Say nothing for this long, then answer 200 (to nobody, usually).
    Silence(Duration),
    /// 503 with `Retry-After: N` (seconds).
    Busy(u32),
}

#[derive(Debug)]
struct Script {
    answers: VecDeque<Answer>,
    /// The answer once the script is used up.
    then: Answer,
    arrivals: Vec<Arrival>,
}

/// A request that arrived: when, on the monotonic clock and in Unix
/// milliseconds (the clock of the fault proxy's windows), and its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The request's path (`/attempt/2`).
    pub path: String,
    /// Monotonic.
    pub at: Instant,
    /// Wall clock, Unix milliseconds.
    pub unix_ms: u64,
}

/// A running stub; stops when dropped.
#[derive(Debug)]
pub struct Stub {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    task: JoinHandle<()>,
}

impl Stub {
    /// A stub answering `answers` in turn, then `then` for ever.
    ///
    /// # Errors
    /// No loopback port to listen on.
    pub async fn start(answers: &[Answer], then: Answer) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script = Arc::new(Mutex::new(Script {
            answers: answers.iter().copied().collect(),
            then,
            arrivals: Vec::new(),
        }));
        let shared = script.clone();
        let task = tokio::spawn(async move {
            // Dropped with the accept loop: aborting the task ends every
            // connection too.
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, shared.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Self { addr, script, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// When each request arrived, in order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .arrivals
            .clone()
    }

    /// Forgets the arrivals so far and answers `answers` in turn, then
    /// `then`, from now on.
    pub fn script(&self, answers: &[Answer], then: Answer) {
        let mut script = self
            .script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        script.arrivals.clear();
        script.answers = answers.iter().copied().collect();
        script.then = then;
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection: read a request head, record it, answer, repeat.
async fn serve(mut stream: TcpStream, script: Arc<Mutex<Script>>) {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 1024];
    loop {
        let end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head: Vec<u8> = buffer.drain(..end).collect();
        let path = std::str::from_utf8(&head)
            .ok()
            .and_then(|h| h.split(' ').nth(1))
            .unwrap_or_default()
            .to_owned();
        let answer = {
            let mut s = script
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.arrivals.push(Arrival {
                path,
                at: Instant::now(),
                unix_ms: super::live::unix_ms(),
            });
            let then = s.then;
            s.answers.pop_front().unwrap_or(then)
        };
        let (status, extra) = match answer {
            Answer::Status(status) => (status, String::new()),
            Answer::Silence(pause) => {
                tokio::time::sleep(pause).await;
                (200, String::new())
            }
            Answer::Busy(seconds) => (503, format!("retry-after: {seconds}\r\n")),
        };
        let head = format!(
            "HTTP/1.1 {status} {}\r\n{extra}content-length: 0\r\n\r\n",
            reason(status)
        );
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
