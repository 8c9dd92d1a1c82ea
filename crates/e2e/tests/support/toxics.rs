//! The toxic of each FAULTS.md column, as the matrix files apply it.

use std::time::Duration;

use shopeasy_faults::{Stream, Toxic, ToxicKind};

/// F2: `reset_peer` at once on `stream` (upstream: the request is never
/// delivered; downstream: processed, the answer lost).
pub fn reset(stream: Stream) -> Toxic {
    Toxic::new(ToxicKind::ResetPeer { timeout: 0 }, stream)
}

/// F2 upstream, `ms` after each connection's first bytes: the request is
/// on the wire (undelivered) when the reset comes. Where a test counts
/// calls by connections over HTTP/2 this matters: reset at the first byte,
/// the preface, a fresh tonic connection can be found dead before its
/// request is sent, and the channel opens another for the same call (one
/// call, two connections).
pub fn reset_after_request(ms: u64) -> Toxic {
    Toxic::new(ToxicKind::ResetPeer { timeout: ms }, Stream::Upstream)
}

/// F3: a black hole (data swallowed, the connection left open); from the
/// network, the same as a frozen process.
pub fn hang() -> Toxic {
    Toxic::new(ToxicKind::Timeout { timeout: 0 }, Stream::Downstream)
}

/// F4: `ms` added to every downstream chunk, no jitter.
pub fn latency(ms: u64) -> Toxic {
    Toxic::new(
        ToxicKind::Latency {
            latency: ms,
            jitter: 0,
        },
        Stream::Downstream,
    )
}

/// F5: downstream bytes in pieces of `size` with `gap` between them.
///
/// # Panics
/// When `gap` does not fit in `u64` microseconds.
pub fn slicer(size: u64, gap: Duration) -> Toxic {
    Toxic::new(
        ToxicKind::Slicer {
            average_size: size,
            size_variation: 0,
            delay: u64::try_from(gap.as_micros()).expect("gap in µs"),
        },
        Stream::Downstream,
    )
}

/// F5: a downstream link of `kb_per_second`.
pub fn bandwidth(kb_per_second: u64) -> Toxic {
    Toxic::new(
        ToxicKind::Bandwidth {
            rate: kb_per_second,
        },
        Stream::Downstream,
    )
}
