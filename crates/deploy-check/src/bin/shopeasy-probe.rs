//! `shopeasy-probe URL`: a container health check for images without a shell.
//!
//! The runtime image is distroless (no shell, no curl), yet Docker Compose
//! health checks run a command inside the container. This binary sends one
//! `GET` to a plain-`http://` URL — the service's own `/health/ready` on its
//! admin listener — and exits 0 when the answer is 2xx, 1 otherwise (refused,
//! timed out, not 2xx, or a bad URL). Every step is bounded by
//! [`TIMEOUT`], well inside compose's own `timeout`.
//!
//! Kubernetes does not need it: its probes are `httpGet` done by the kubelet.

use std::{
    io::{Read, Write},
    net::{TcpStream, ToSocketAddrs},
    process::ExitCode,
    time::Duration,
};

/// Bound of connecting, and of each read and write.
const TIMEOUT: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: shopeasy-probe http://HOST:PORT/PATH");
        return ExitCode::FAILURE;
    };
    match probe(&url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("shopeasy-probe: {url}: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Sends `GET` and checks for a 2xx status line.
fn probe(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority} has no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| e.to_string())?;
    // One write: a server that answers and closes after the first bytes
    // must not turn the rest of our request into a broken pipe.
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: shopeasy-probe\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    // The status line fits in the first bytes; the body does not matter.
    let mut head = [0_u8; 64];
    let mut len = 0;
    while len < head.len() {
        match stream.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) => return Err(e.to_string()),
        }
        if head[..len].contains(&b'\n') {
            break;
        }
    }
    let line = String::from_utf8_lossy(&head[..len]);
    let status = line.split_whitespace().nth(1).unwrap_or_default();
    if line.starts_with("HTTP/1.") && status.len() == 3 && status.starts_with('2') {
        Ok(())
    } else {
        Err(format!(
            "not healthy: {}",
            line.lines().next().unwrap_or("no answer")
        ))
    }
}
