//! One proxied connection: a pump per direction moving bytes from one socket
//! to the other, applying whatever toxics the proxy has *now*.
//!
//! Each pump watches the proxy's toxic set (a `tokio::sync::watch`), so a
//! toxic added or removed while a connection is open takes effect on it at
//! once, as in Toxiproxy: also on the chunk already on its way, whose every
//! wait (latency, pacing, the reset's or the close's delay) watches the set
//! too. Whether a toxic applies to this connection is rolled once per
//! (connection, toxic) with the connection's seeded generator. Both pumps
//! run inside the connection's task; the connection ends when both
//! directions have closed, or at once when a toxic closes or resets it or
//! the proxy is disabled or stopped.
//!
//! A write waiting on a slow reader (its socket's buffers full) watches the
//! set as well: a `reset_peer` or `timeout` added then acts at once, rather
//! than once the reader has made room.

use std::{collections::HashMap, io, sync::Arc, time::Duration};

use rand::{Rng, SeedableRng, rngs::SmallRng};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpStream,
        tcp::{ReadHalf, WriteHalf},
    },
    sync::{mpsc, watch},
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;

use crate::proxy::ToxicSet;
use crate::toxic::{Stream, ToxicKind};

/// Bytes read at a time in each direction.
const CHUNK: usize = 32 * 1024;

/// The longest wait the pumps schedule (30 years, as tokio's own "never"):
/// attributes set in process are not bounded as the API's are
/// ([`crate::toxic::MAX_WAIT_MS`]), and an `Instant` must not overflow.
const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// Chunks read but not yet written, per direction (at most 512 KiB).
const IN_FLIGHT: usize = 16;

/// What the reading side of a pump hands to the writing side.
#[derive(Debug)]
enum Input {
    /// Bytes, and when they arrived.
    Data(Vec<u8>, Instant),
    /// The source closed cleanly.
    Eof,
    /// The source was reset by its peer.
    Reset,
    /// Reading failed otherwise.
    Failed,
}

/// Reads `src` into `tx` until the source closes or the writer is gone.
async fn read_into(src: &mut ReadHalf<'_>, tx: mpsc::Sender<Input>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let input = match src.read(&mut buf).await {
            Ok(0) => Input::Eof,
            Ok(n) => Input::Data(buf[..n].to_vec(), Instant::now()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Input::Reset,
            Err(_) => Input::Failed,
        };
        let last = !matches!(input, Input::Data(..));
        if tx.send(input).await.is_err() || last {
            return;
        }
    }
}

/// How a direction (or the whole connection) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The source closed; the close was passed on. The other direction goes on.
    Eof,
    /// Close both sockets now (FIN).
    Close,
    /// Reset both sockets now (RST).
    Reset,
}

/// Proxies one accepted connection to `upstream` until it ends or `cancel`
/// fires (proxy disabled or stopped).
///
/// The client is closed when the upstream cannot be reached: refused, or
/// not accepting within `connect_timeout` (a black-holed upstream would
/// otherwise hold it for the kernel's SYN retries, about two minutes).
pub(crate) async fn serve(
    mut client: TcpStream,
    upstream: Arc<str>,
    connect_timeout: Duration,
    toxics: watch::Receiver<ToxicSet>,
    cancel: CancellationToken,
    seed: u64,
) {
    let connect = tokio::time::timeout(connect_timeout, TcpStream::connect(&*upstream));
    let connected = tokio::select! {
        () = cancel.cancelled() => return,
        connected = connect => connected,
    };
    let mut server = match connected {
        Ok(Ok(server)) => server,
        Ok(Err(e)) => {
            tracing::debug!(%upstream, error = %e, "upstream refused; closing the client");
            return;
        }
        Err(_elapsed) => {
            tracing::debug!(
                %upstream,
                ?connect_timeout,
                "upstream did not accept in time; closing the client"
            );
            return;
        }
    };
    // Small writes must not wait for Nagle: the proxy must add no latency.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let end = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let requests = Pump::new(Stream::Upstream, toxics.clone(), seed)
            .run(&mut client_read, &mut server_write);
        let responses = Pump::new(Stream::Downstream, toxics, seed.rotate_left(32) ^ 0x9e37)
            .run(&mut server_read, &mut client_write);
        tokio::select! {
            () = cancel.cancelled() => End::Close,
            end = both(requests, responses) => end,
        }
    };
    if end == End::Reset {
        reset(&client);
        reset(&server);
    }
}

/// Runs both directions; a `Close` or `Reset` from either ends both.
async fn both(requests: impl Future<Output = End>, responses: impl Future<Output = End>) -> End {
    tokio::pin!(requests, responses);
    let (mut requests_done, mut responses_done) = (false, false);
    loop {
        let end = tokio::select! {
            end = &mut requests, if !requests_done => { requests_done = true; end }
            end = &mut responses, if !responses_done => { responses_done = true; end }
        };
        if end != End::Eof {
            return end;
        }
        if requests_done && responses_done {
            return End::Eof;
        }
    }
}

/// Makes the coming close of `stream` a TCP RST instead of a FIN.
fn reset(stream: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO)) {
        tracing::debug!(error = %e, "cannot set SO_LINGER 0; the close will be a FIN");
    }
}

/// What the toxics that apply to one direction of this connection do now.
#[derive(Debug, Default)]
struct Effects {
    /// `timeout`: drop all data.
    black_hole: bool,
    /// `timeout` > 0: close the connection at this instant.
    close_at: Option<Instant>,
    /// `reset_peer`: on data, wait this long and reset.
    reset_after: Option<Duration>,
    /// `latency`: summed latency and jitter in ms.
    latency: Option<(u64, u64)>,
    /// `bandwidth`: the lowest rate in KB/s.
    rate: Option<u64>,
    /// `slicer`: (average size, variation, delay µs).
    slicer: Option<(u64, u64, u64)>,
    /// `slow_close`: delay before passing the close on.
    slow_close: Option<Duration>,
    /// `limit_data`: bytes still allowed.
    bytes_left: Option<u64>,
}

/// One direction of a connection.
struct Pump {
    stream: Stream,
    toxics: watch::Receiver<ToxicSet>,
    rng: SmallRng,
    /// Per toxic id: does it apply to this connection (rolled once)?
    rolls: HashMap<u64, bool>,
    /// Per toxic id: when this pump first saw it, and how many bytes had
    /// passed by then (the clocks of `timeout` and `limit_data`).
    seen: HashMap<u64, (Instant, u64)>,
    effects: Effects,
    /// Bytes passed on so far.
    transferred: u64,
}

impl Pump {
    fn new(stream: Stream, toxics: watch::Receiver<ToxicSet>, seed: u64) -> Self {
        Self {
            stream,
            toxics,
            rng: SmallRng::seed_from_u64(seed),
            rolls: HashMap::new(),
            seen: HashMap::new(),
            effects: Effects::default(),
            transferred: 0,
        }
    }

    /// Reads `src` and writes `dst` concurrently: the reader stamps each
    /// chunk with its arrival time, so `latency` delays every chunk by the
    /// same amount from its arrival (throughput is kept, as in Toxiproxy),
    /// and toxics are applied on the writing side.
    async fn run(self, src: &mut ReadHalf<'_>, dst: &mut WriteHalf<'_>) -> End {
        let (tx, rx) = mpsc::channel(IN_FLIGHT);
        let reader = async {
            read_into(src, tx).await;
            std::future::pending::<()>().await;
        };
        // Both sides are polled together: the reader keeps stamping
        // arrivals while the writer sleeps out a toxic.
        tokio::select! {
            end = self.write_from(rx, dst) => end,
            () = reader => End::Close, // never: the reader pends once done
        }
    }

    /// The writing side: applies the current toxics to each chunk.
    async fn write_from(mut self, mut rx: mpsc::Receiver<Input>, dst: &mut WriteHalf<'_>) -> End {
        self.refresh();
        loop {
            let close_at = self.effects.close_at;
            tokio::select! {
                biased;
                changed = self.toxics.changed() => {
                    if changed.is_err() {
                        return End::Close; // the proxy is gone
                    }
                    self.refresh();
                }
                () = sleep_until(close_at.unwrap_or_else(Instant::now)), if close_at.is_some() => {
                    return End::Close;
                }
                input = rx.recv() => match input {
                    Some(Input::Data(data, arrived)) => {
                        if let Some(end) = self.deliver(&data, arrived, dst).await {
                            return end;
                        }
                    }
                    Some(Input::Eof) | None => return self.eof(dst).await,
                    Some(Input::Reset) => return End::Reset,
                    Some(Input::Failed) => return End::Close,
                },
            }
        }
    }

    /// Recomputes [`Effects`] from the proxy's current toxic set.
    fn refresh(&mut self) {
        let set = self.toxics.borrow_and_update().clone();
        let now = Instant::now();
        let mut effects = Effects::default();
        for entry in set.iter().filter(|e| e.toxic.stream == self.stream) {
            let rng = &mut self.rng;
            let toxicity = entry.toxic.toxicity;
            let applies = *self
                .rolls
                .entry(entry.id)
                .or_insert_with(|| toxicity >= 1.0 || rng.random::<f32>() < toxicity);
            if !applies {
                continue;
            }
            let (since, bytes_then) = *self.seen.entry(entry.id).or_insert((now, self.transferred));
            match entry.toxic.kind {
                ToxicKind::Timeout { timeout } => {
                    effects.black_hole = true;
                    if timeout > 0 {
                        let at = later(since, Duration::from_millis(timeout));
                        effects.close_at = Some(effects.close_at.map_or(at, |t| t.min(at)));
                    }
                }
                ToxicKind::ResetPeer { timeout } => {
                    effects
                        .reset_after
                        .get_or_insert(Duration::from_millis(timeout));
                }
                ToxicKind::Latency { latency, jitter } => {
                    let (l, j) = effects.latency.unwrap_or((0, 0));
                    effects.latency = Some((l.saturating_add(latency), j.saturating_add(jitter)));
                }
                ToxicKind::Bandwidth { rate } if rate > 0 => {
                    effects.rate = Some(effects.rate.map_or(rate, |r| r.min(rate)));
                }
                ToxicKind::Bandwidth { .. } => {}
                ToxicKind::Slicer {
                    average_size,
                    size_variation,
                    delay,
                } => {
                    effects
                        .slicer
                        .get_or_insert((average_size.max(1), size_variation, delay));
                }
                ToxicKind::SlowClose { delay } => {
                    effects
                        .slow_close
                        .get_or_insert(Duration::from_millis(delay));
                }
                ToxicKind::LimitData { bytes } => {
                    let left = bytes.saturating_sub(self.transferred - bytes_then);
                    effects.bytes_left = Some(effects.bytes_left.map_or(left, |b| b.min(left)));
                }
            }
        }
        self.effects = effects;
        // Forget the toxics that are gone (an id is never used again), so a
        // long connection under toggled toxics does not grow.
        self.rolls.retain(|id, _| set.iter().any(|e| e.id == *id));
        self.seen.retain(|id, _| set.iter().any(|e| e.id == *id));
    }

    /// Passes one chunk on through the toxics; `Some` ends the connection.
    ///
    /// A change of the toxic set during any of its waits applies to the
    /// rest of the chunk at once: removed latency lets it go, a new black
    /// hole drops it, a removed `reset_peer` lets it through, new pacing
    /// paces the bytes not yet written.
    async fn deliver(
        &mut self,
        data: &[u8],
        arrived: Instant,
        dst: &mut WriteHalf<'_>,
    ) -> Option<End> {
        let mut chunk = Chunk {
            rest: data,
            arrived,
            delay: None,
            reset_from: None,
            last_piece: None,
            piece_left: None,
        };
        loop {
            match self.advance(&mut chunk, dst).await {
                Ok(end) => return end,
                Err(Interrupt::Changed) => {} // go on under the new toxics
                Err(Interrupt::Close) => return Some(End::Close),
            }
        }
    }

    /// Takes `chunk` as far as the current toxics let it: `Ok` once it is
    /// written or dropped (`Some` ends the connection), `Err` when a wait
    /// was cut short; called again, it resumes where it stopped.
    async fn advance(
        &mut self,
        chunk: &mut Chunk<'_>,
        dst: &mut WriteHalf<'_>,
    ) -> Result<Option<End>, Interrupt> {
        if self.effects.black_hole {
            return Ok(None); // what is left is dropped
        }
        if let Some(after) = self.effects.reset_after {
            let from = *chunk.reset_from.get_or_insert_with(Instant::now);
            self.wait_until(later(from, after)).await?;
            return Ok(Some(End::Reset)); // the data is dropped
        }
        chunk.reset_from = None;
        if let Some(latency) = self.effects.latency {
            let delay = match chunk.delay {
                Some((drawn_for, delay)) if drawn_for == latency => delay,
                _ => {
                    let delay = self.jittered(latency.0, latency.1);
                    chunk.delay = Some((latency, delay));
                    delay
                }
            };
            self.wait_until(later(chunk.arrived, Duration::from_millis(delay)))
                .await?;
        }
        loop {
            if let Some((written, size)) = chunk.last_piece {
                let pause = self.pause(size, !chunk.rest.is_empty());
                self.wait_until(later(written, pause)).await?;
                chunk.last_piece = None;
            }
            if chunk.rest.is_empty() {
                return Ok(None);
            }
            let (size, then_close) = match chunk.piece_left.take() {
                Some(left) => left,
                None => {
                    let size = self.piece_size(chunk.rest.len());
                    match self.effects.bytes_left {
                        Some(left) if (size as u64) >= left => {
                            (usize::try_from(left).unwrap_or(size), true)
                        }
                        _ => (size, false),
                    }
                }
            };
            if size == 0 {
                return Ok(Some(End::Close)); // the byte budget is spent
            }
            // Cut short by a change, nothing of the piece was written: it is
            // sized again under the new toxics.
            let written = match self.write_some(&chunk.rest[..size], dst).await? {
                Ok(0) | Err(_) => return Ok(Some(End::Close)),
                Ok(n) => n,
            };
            chunk.rest = &chunk.rest[written..];
            self.transferred += written as u64;
            if let Some(left) = self.effects.bytes_left.as_mut() {
                *left = left.saturating_sub(written as u64);
            }
            if written < size {
                // The socket took part of it (a slow reader): the rest of
                // the same piece follows, without a pause.
                chunk.piece_left = Some((size - written, then_close));
                continue;
            }
            if then_close {
                return Ok(Some(End::Close));
            }
            if self.effects.slicer.is_some() || self.effects.rate.is_some() {
                chunk.last_piece = Some((Instant::now(), size as u64));
            }
        }
    }

    /// The size of the next piece of the `len` bytes left: all of them,
    /// unless `slicer` or `bandwidth` cut them.
    fn piece_size(&mut self, len: usize) -> usize {
        let mut size = len as u64;
        if let Some((average, variation, _)) = self.effects.slicer {
            size = size.min(self.jittered(average, variation).max(1));
        }
        if let Some(rate) = self.effects.rate {
            // At most 100 ms worth of bytes per write; 1 KB = 1000 bytes.
            size = size.min(rate.saturating_mul(100).max(1));
        }
        usize::try_from(size).unwrap_or(len)
    }

    /// How long a piece of `size` bytes holds the next one back under the
    /// toxics *now* (so a change re-paces what is left): `slicer`'s delay
    /// when `more` of the chunk follows, and the time `bandwidth` gives the
    /// piece.
    fn pause(&self, size: u64, more: bool) -> Duration {
        let slicer = match self.effects.slicer {
            Some((_, _, delay)) if more => Duration::from_micros(delay),
            _ => Duration::ZERO,
        };
        let bandwidth = self.effects.rate.map_or(Duration::ZERO, |rate| {
            Duration::from_micros(size.saturating_mul(1000) / rate)
        });
        slicer.saturating_add(bandwidth)
    }

    /// The source closed: pass the close on (late, under `slow_close`,
    /// counted from the close while the toxics are watched).
    async fn eof(&mut self, dst: &mut WriteHalf<'_>) -> End {
        let closed = Instant::now();
        loop {
            if self.effects.black_hole {
                return End::Close;
            }
            let Some(delay) = self.effects.slow_close else {
                break;
            };
            match self.wait_until(later(closed, delay)).await {
                Ok(()) => break,
                Err(Interrupt::Changed) => {} // decide again under the new toxics
                Err(Interrupt::Close) => return End::Close,
            }
        }
        let _ = dst.shutdown().await;
        End::Eof
    }

    /// Writes what `dst` takes of `piece` now, unless the toxic set changes
    /// first or the connection must close ([`Pump::interruptible`]): a
    /// reader that does not read leaves the write waiting in the kernel for
    /// as long as it likes, and a toxic added meanwhile (`reset_peer`,
    /// `timeout`) must not wait for it. A write cut short wrote nothing
    /// (`write` is cancel safe), so the piece is simply offered again.
    async fn write_some(
        &mut self,
        piece: &[u8],
        dst: &mut WriteHalf<'_>,
    ) -> Result<io::Result<usize>, Interrupt> {
        self.interruptible(dst.write(piece)).await
    }

    /// Sleeps until `deadline` ([`Pump::interruptible`]). A deadline
    /// already past returns at once.
    async fn wait_until(&mut self, deadline: Instant) -> Result<(), Interrupt> {
        if deadline <= Instant::now() {
            return Ok(());
        }
        self.interruptible(sleep_until(deadline)).await
    }

    /// Runs `work` unless the toxic set changes first (the effects are
    /// refreshed and the caller decides again) or the connection must
    /// close: `timeout`'s clock ran out, or the proxy is gone.
    async fn interruptible<T>(&mut self, work: impl Future<Output = T>) -> Result<T, Interrupt> {
        let close_at = self.effects.close_at;
        tokio::select! {
            biased;
            changed = self.toxics.changed() => {
                if changed.is_err() {
                    return Err(Interrupt::Close); // the proxy is gone
                }
                self.refresh();
                Err(Interrupt::Changed)
            }
            () = sleep_until(close_at.unwrap_or_else(Instant::now)), if close_at.is_some() => {
                Err(Interrupt::Close)
            }
            done = work => Ok(done),
        }
    }

    /// `base` ± a uniform draw of up to `spread`, never below 0.
    fn jittered(&mut self, base: u64, spread: u64) -> u64 {
        if spread == 0 {
            return base;
        }
        let offset = self.rng.random_range(0..=spread.saturating_mul(2));
        base.saturating_add(offset).saturating_sub(spread)
    }
}

/// A chunk on its way through the toxics: what is left of it, and the
/// clocks that go on when the toxic set changes under it.
#[derive(Debug)]
struct Chunk<'a> {
    /// Not written yet.
    rest: &'a [u8],
    /// When it was read: `latency` counts from here.
    arrived: Instant,
    /// The latency drawn for it, with the (latency, jitter) it was drawn
    /// for: drawn again only when those change.
    delay: Option<((u64, u64), u64)>,
    /// When it met `reset_peer`: the reset's clock.
    reset_from: Option<Instant>,
    /// When its last piece was written, and the piece's size: what the
    /// pacing of the next piece counts from.
    last_piece: Option<(Instant, u64)>,
    /// What the socket has not taken yet of the piece being written (a
    /// slow reader), and whether the connection closes after it
    /// (`limit_data`).
    piece_left: Option<(usize, bool)>,
}

/// Why a wait inside a delivery ended early.
#[derive(Debug)]
enum Interrupt {
    /// The toxic set changed (the effects are refreshed): go on under the
    /// new toxics.
    Changed,
    /// Close the connection now.
    Close,
}

/// `from` + `by`, at most [`FOREVER`] ahead.
fn later(from: Instant, by: Duration) -> Instant {
    from + by.min(FOREVER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Toxic, proxy::ToxicEntry};

    fn entry(id: u64, kind: ToxicKind) -> ToxicEntry {
        ToxicEntry {
            id,
            toxic: Toxic::new(kind, Stream::Downstream).named(format!("t{id}")),
        }
    }

    fn ids(map: &HashMap<u64, impl Sized>) -> Vec<u64> {
        let mut ids: Vec<u64> = map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// A connection open for hours under toxics toggled every few seconds
    /// (a demo, a soak) must not keep a roll and a clock per toxic it ever
    /// saw: only those of the toxics there now.
    #[tokio::test]
    async fn a_pump_forgets_the_toxics_that_are_gone() {
        let latency = ToxicKind::Latency {
            latency: 1,
            jitter: 0,
        };
        let (toxics, watched) = watch::channel(Arc::new(vec![
            entry(1, latency.clone()),
            entry(2, ToxicKind::SlowClose { delay: 1 }),
        ]));
        let mut pump = Pump::new(Stream::Downstream, watched, 7);
        pump.refresh();
        assert_eq!(
            (ids(&pump.rolls), ids(&pump.seen)),
            (vec![1, 2], vec![1, 2])
        );

        for id in 3..100 {
            toxics.send_replace(Arc::new(vec![
                entry(2, ToxicKind::SlowClose { delay: 1 }),
                entry(id, latency.clone()),
            ]));
            pump.refresh();
        }
        assert_eq!(
            (ids(&pump.rolls), ids(&pump.seen)),
            (vec![2, 99], vec![2, 99])
        );

        toxics.send_replace(Arc::new(Vec::new()));
        pump.refresh();
        assert!(pump.rolls.is_empty() && pump.seen.is_empty());
        assert!(pump.effects.latency.is_none());
    }

    /// Leaves a pump waiting in its write to a socket whose reader never
    /// reads (the kernel's buffers full), adds a toxic of `kind`, and tells
    /// how the pump ended, if it did within 5 s.
    async fn a_blocked_write_meets(kind: ToxicKind) -> Option<End> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_reader, _) = listener.accept().await.unwrap();
        let junk = vec![0u8; 1 << 20];
        loop {
            match writer.try_write(&junk) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the socket: {e}"),
            }
        }
        let (toxics, watched) = watch::channel(Arc::new(Vec::new()));
        let (tx, rx) = mpsc::channel(IN_FLIGHT);
        // More than the buffers can take even if some room came back.
        tx.send(Input::Data(vec![1u8; 8 << 20], Instant::now()))
            .await
            .unwrap();
        let (_, mut dst) = writer.split();
        let pump = Pump::new(Stream::Downstream, watched, 7).write_from(rx, &mut dst);
        tokio::pin!(pump);
        // One poll takes the chunk in and leaves the pump waiting in its
        // write: nothing else can keep it.
        std::future::poll_fn(|cx| {
            assert!(pump.as_mut().poll(cx).is_pending(), "the write completed");
            std::task::Poll::Ready(())
        })
        .await;
        toxics.send_replace(Arc::new(vec![entry(1, kind)]));
        let end = tokio::time::timeout(Duration::from_secs(5), pump)
            .await
            .ok();
        drop(tx);
        end
    }

    /// A `reset_peer` added while the answer waits on a client that does
    /// not read resets the connection at once; it used to wait for the
    /// client to make room (here, for ever).
    #[tokio::test]
    async fn reset_peer_added_during_a_blocked_write_resets_at_once() {
        let end = a_blocked_write_meets(ToxicKind::ResetPeer { timeout: 0 }).await;
        assert_eq!(end, Some(End::Reset));
    }

    /// A `timeout` added then drops what was not written and closes the
    /// connection when its clock runs out, without waiting for the reader.
    #[tokio::test]
    async fn timeout_added_during_a_blocked_write_closes_on_time() {
        let end = a_blocked_write_meets(ToxicKind::Timeout { timeout: 100 }).await;
        assert_eq!(end, Some(End::Close));
    }
}
