//! `shopeasy-probe`, the compose health check: 0 on 2xx, 1 on anything
//! else, and bounded when nobody answers.

use std::{
    io::{Read, Write},
    net::TcpListener,
    process::{Command, Output},
};

/// Serves one connection with `status`, on a thread; returns the URL.
fn answer_once(status: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            // Read the whole request head before answering.
            let mut request = Vec::new();
            let mut byte = [0_u8; 1];
            while !request.ends_with(b"\r\n\r\n") && matches!(stream.read(&mut byte), Ok(1)) {
                request.push(byte[0]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
            );
        }
    });
    format!("http://{addr}/health/ready")
}

fn probe(url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shopeasy-probe"))
        .arg(url)
        .output()
        .expect("run shopeasy-probe")
}

#[test]
fn ready_service_exits_zero() {
    let out = probe(&answer_once("200 OK"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unready_service_exits_one_naming_the_status() {
    let out = probe(&answer_once("503 Service Unavailable"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("503"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn refused_connection_and_bad_urls_exit_one() {
    // A port nothing listens on: bind, note it, close.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    assert_eq!(
        probe(&format!("http://127.0.0.1:{port}/health/ready"))
            .status
            .code(),
        Some(1)
    );
    assert_eq!(probe("https://127.0.0.1:1/").status.code(), Some(1));
    let out = Command::new(env!("CARGO_BIN_EXE_shopeasy-probe"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "no URL");
}

#[test]
fn silent_server_is_given_up_on_within_the_bound() {
    // Accepts but never answers: the probe's 2 s read timeout ends it.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/health/ready",
        listener.local_addr().expect("addr")
    );
    let holder = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let out = probe(&url);
    assert_eq!(out.status.code(), Some(1));
    drop(holder.join());
}
