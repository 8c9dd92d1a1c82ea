//! Seeing the request framing that hyper resolves silently.
//!
//! A request with both `Content-Length` and `Transfer-Encoding` can be read
//! two ways, which is how requests are smuggled past proxies. hyper follows
//! RFC 9112 §6.3: it drops `Content-Length`, reads the body as chunked and
//! closes the connection afterwards, so the header never reaches the
//! service. SPEC §6 asks for more: reject such a request with 400. Since
//! hyper no longer shows both headers, the gateway watches the bytes hyper
//! reads: [`Sniffed`] wraps each client connection and follows HTTP/1.1
//! framing (heads, `Content-Length` bodies, chunked bodies and trailers)
//! just far enough to note, for every request head in order, whether it
//! carried both headers. The proxy takes one note per request from the
//! connection's [`FramingWatch`]. Body bytes are skipped in bulk, not
//! scanned; a connection the watcher cannot follow (a head line longer than
//! hyper's read buffer, a non-chunked `Transfer-Encoding`: both rejected by
//! hyper, which then closes the connection) is no longer watched.

use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::Mutex,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest head line followed: the largest read buffer hyper may be given
/// ([`crate::server::MAX_BUF`]), so the watcher never gives up on a head
/// hyper would still accept (hyper's own buffer, capped near
/// `limits.max_header_bytes`, stops a longer one first).
const MAX_LINE: usize = crate::server::MAX_BUF;

/// One note per request head seen on a connection, in order.
#[derive(Debug, Default)]
pub(crate) struct FramingWatch {
    heads: Mutex<VecDeque<bool>>,
}

impl FramingWatch {
    /// Whether the next request (in arrival order) had both
    /// `Content-Length` and `Transfer-Encoding`. Call once per request.
    pub(crate) fn next_is_ambiguous(&self) -> bool {
        self.heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
            .unwrap_or(false)
    }

    fn push(&self, ambiguous: bool) {
        self.heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(ambiguous);
    }
}

/// A client connection whose reads are followed by a [`Scanner`].
#[derive(Debug)]
pub(crate) struct Sniffed<S> {
    inner: S,
    scanner: Scanner,
    watch: std::sync::Arc<FramingWatch>,
}

impl<S> Sniffed<S> {
    /// Watches `inner`, noting into `watch`.
    pub(crate) fn new(inner: S, watch: std::sync::Arc<FramingWatch>) -> Self {
        Self {
            inner,
            scanner: Scanner::default(),
            watch,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniffed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let watch = &this.watch;
            this.scanner
                .scan(&buf.filled()[before..], &mut |ambiguous| {
                    watch.push(ambiguous)
                });
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sniffed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Where the scanner is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Reading a request head, line by line.
    #[default]
    Head,
    /// Skipping this many body bytes.
    Body(u64),
    /// Reading a chunk-size line (size so far; whether in an extension).
    ChunkSize(u64, bool),
    /// Skipping chunk data.
    ChunkData(u64),
    /// The CRLF after chunk data.
    ChunkEnd,
    /// Trailer lines; `true` while the current line is empty.
    Trailer(bool),
    /// No longer followed.
    Off,
}

/// Follows HTTP/1.1 request framing over a byte stream.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    state: State,
    line: Vec<u8>,
    request_line_seen: bool,
    content_length: Option<u64>,
    transfer_encoding: Option<bool>,
}

impl Scanner {
    /// Feeds `bytes`; `note` is called once per complete request head with
    /// whether it was ambiguous.
    pub(crate) fn scan(&mut self, mut bytes: &[u8], note: &mut dyn FnMut(bool)) {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Off => return,
                State::Body(n) | State::ChunkData(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(bytes.len());
                    bytes = &bytes[k..];
                    let left = n - k as u64;
                    self.state = match (self.state, left) {
                        (State::Body(_), 0) => State::Head,
                        (State::Body(_), _) => State::Body(left),
                        (_, 0) => State::ChunkEnd,
                        _ => State::ChunkData(left),
                    };
                    continue;
                }
                State::Head => self.head_byte(b, note),
                State::ChunkSize(n, ext) => {
                    self.state = match (b, ext) {
                        (b'\n', _) if n == 0 => State::Trailer(true),
                        (b'\n', _) => State::ChunkData(n),
                        (_, true) | (b'\r', _) => State::ChunkSize(n, true),
                        (b';' | b' ' | b'\t', _) => State::ChunkSize(n, true),
                        _ => match (b as char).to_digit(16) {
                            Some(d) if n < (1 << 56) => {
                                State::ChunkSize(n * 16 + u64::from(d), false)
                            }
                            _ => State::Off,
                        },
                    };
                }
                State::ChunkEnd => {
                    if b == b'\n' {
                        self.state = State::ChunkSize(0, false);
                    }
                }
                State::Trailer(empty) => {
                    self.state = match b {
                        b'\n' if empty => State::Head,
                        b'\n' => State::Trailer(true),
                        b'\r' => State::Trailer(empty),
                        _ => State::Trailer(false),
                    };
                }
            }
            bytes = rest;
        }
    }

    fn head_byte(&mut self, b: u8, note: &mut dyn FnMut(bool)) {
        if b != b'\n' {
            if self.line.len() >= MAX_LINE {
                self.state = State::Off;
            } else {
                self.line.push(b);
            }
            return;
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        if self.line.is_empty() {
            if self.request_line_seen {
                self.end_of_head(note);
            }
            return;
        }
        if !self.request_line_seen {
            self.request_line_seen = true;
        } else if let Some(colon) = self.line.iter().position(|&c| c == b':') {
            let (name, value) = (&self.line[..colon], &self.line[colon + 1..]);
            let value = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
            if name.eq_ignore_ascii_case(b"content-length") {
                self.content_length = Some(value.parse().unwrap_or(0));
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|t| t.trim() == "chunked");
                self.transfer_encoding = Some(chunked);
            }
        }
        self.line.clear();
        // Keep a long line's memory no longer than that line.
        self.line.shrink_to(256);
    }

    fn end_of_head(&mut self, note: &mut dyn FnMut(bool)) {
        let ambiguous = self.content_length.is_some() && self.transfer_encoding.is_some();
        note(ambiguous);
        self.state = match (self.transfer_encoding, self.content_length) {
            // hyper closes the connection after an ambiguous request, and
            // rejects a non-chunked Transfer-Encoding: nothing more to follow.
            _ if ambiguous => State::Off,
            (Some(true), _) => State::ChunkSize(0, false),
            (Some(false), _) => State::Off,
            (None, Some(n)) if n > 0 => State::Body(n),
            _ => State::Head,
        };
        self.request_line_seen = false;
        self.content_length = None;
        self.transfer_encoding = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes(stream: &[u8], step: usize) -> Vec<bool> {
        let mut s = Scanner::default();
        let mut out = Vec::new();
        for piece in stream.chunks(step) {
            s.scan(piece, &mut |a| out.push(a));
        }
        out
    }

    #[test]
    fn follows_keep_alive_requests_with_every_framing() {
        let stream = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n\
            POST /b HTTP/1.1\r\ncontent-length: 32\r\n\r\n\r\ntransfer-encoding: chunked\r\n\r\n\
            POST /c HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1A\r\nContent-Length: 1\r\n\r\n01234\r\n0\r\nx-trailer: 1\r\n\r\n\
            POST /d HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
            GET /never-followed HTTP/1.1\r\n\r\n";
        for step in [1, 3, 7, stream.len()] {
            assert_eq!(
                notes(stream, step),
                [false, false, false, true],
                "in pieces of {step}: bodies that look like headers are skipped"
            );
        }
    }

    #[test]
    fn either_order_of_the_two_headers_is_ambiguous() {
        let stream = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\ncontent-length: 3\r\n\r\n";
        assert_eq!(notes(stream, 5), [true]);
    }

    #[test]
    fn watch_hands_out_one_note_per_request() {
        let w = FramingWatch::default();
        w.push(false);
        w.push(true);
        assert!(!w.next_is_ambiguous());
        assert!(w.next_is_ambiguous());
        assert!(!w.next_is_ambiguous(), "no note: not ambiguous");
    }
}
