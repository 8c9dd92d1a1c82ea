//! The accept loop every wire stub ([`stub`](crate::stub),
//! [`pgwire`](crate::pgwire), [`resp`](crate::resp)) shares, the [`Log`]
//! of what a stub saw, and reading an HTTP/1 request head off a raw socket.

use std::{
    future::Future,
    sync::{Mutex, PoisonError},
};

use tokio::{
    io::AsyncReadExt,
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

/// Accepts connections on `listener` until `stop` is cancelled, serving
/// each in a task of its own with `serve`. Cancelling `stop` also drops
/// (closes) every connection still open, so a dropped stub leaves nothing
/// running.
pub fn accept_until<F, Fut>(listener: TcpListener, stop: CancellationToken, serve: F)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((socket, _)) = accepted else {
                continue;
            };
            let connection = serve(socket);
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = connection => {}
                }
            });
        }
    });
}

/// Reads `socket` up to the end of an HTTP/1 request head (the small
/// bodies the stubs get are left unread). `false` when the peer closed or
/// failed first.
pub async fn read_head(socket: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// What a stub saw (statements, commands), in arrival order: written by
/// its connection tasks, read by the test. A connection task that
/// panicked does not hide what the others recorded.
#[derive(Debug, Default)]
pub struct Log<T>(Mutex<Vec<T>>);

impl<T: Clone> Log<T> {
    /// Records one more entry.
    pub fn push(&self, entry: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }

    /// Every entry so far, in order.
    pub fn all(&self) -> Vec<T> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many entries so far satisfy `which`.
    pub fn count(&self, which: impl Fn(&T) -> bool) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| which(e))
            .count()
    }
}
