//! The accept loop every wire stub ([`stub`](crate::stub),
//! [`pgwire`](crate::pgwire), [`resp`](crate::resp)) shares, and reading
//! an HTTP/1 request head off a raw socket.

use std::future::Future;

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
