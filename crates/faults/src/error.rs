//! The crate's one error type. The HTTP API maps it onto Toxiproxy's status
//! codes in one place (`api`); the in-process API returns it as is.

use std::io;

/// What can go wrong when managing proxies and toxics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No proxy has this name.
    #[error("proxy not found")]
    ProxyNotFound,
    /// A proxy with this name exists already.
    #[error("proxy already exists")]
    ProxyExists,
    /// The proxy has no toxic with this name.
    #[error("toxic not found")]
    ToxicNotFound,
    /// The proxy has a toxic with this name already.
    #[error("toxic already exists")]
    ToxicExists,
    /// A toxic's `stream` is neither `upstream` nor `downstream`.
    #[error("stream was invalid, can be either upstream or downstream")]
    InvalidStream,
    /// A toxic's `type` is not one this proxy implements.
    #[error("invalid toxic type: {0:?}")]
    InvalidToxicType(String),
    /// A required field is missing or empty.
    #[error("missing required field: {0}")]
    MissingField(&'static str),
    /// The request body is not the JSON expected, or a value is out of range.
    #[error("bad request body: {0}")]
    BadBody(String),
    /// The request body is larger than the API reads
    /// ([`crate::api::BODY_LIMIT`] bytes).
    #[error("request body is larger than {0} bytes")]
    BodyTooLarge(usize),
    /// A path segment does not decode to UTF-8 (`/proxies/%FF`).
    #[error("bad path: {0}")]
    BadPath(String),
    /// A query parameter is unknown or not the value expected (for example
    /// `since` not a number of Unix milliseconds).
    #[error("bad query: {0}")]
    BadQuery(String),
    /// A proxy created or moved through the HTTP API may listen on
    /// loopback only (or an address allowed with `--allow-listen`), so a
    /// request cannot open a port on the machine's other interfaces.
    #[error(
        "listen address {0} is not allowed: use a loopback address (127.0.0.1:PORT, localhost:PORT, [::1]:PORT) or start the proxy with --allow-listen"
    )]
    ListenNotAllowed(String),
    /// The proxy's listen address cannot be bound (in use, or not an address
    /// of this host).
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        /// The address asked for.
        listen: String,
        /// Why binding failed.
        #[source]
        source: io::Error,
    },
}
