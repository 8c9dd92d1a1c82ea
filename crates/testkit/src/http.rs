//! Reading a JSON answer over HTTP, the one request chain every crate's
//! tests repeat (GET, send, decode), written once.

use serde_json::Value;

/// `GET url` with `http`, decoded as JSON: the document a test then
/// asserts on. Whatever the status, the body must be JSON.
///
/// # Panics
/// When the request cannot be sent or the body is not JSON: in a test
/// either is a failure to report, not to handle.
pub async fn get_json(http: &reqwest::Client, url: impl reqwest::IntoUrl) -> Value {
    let url = url.into_url().expect("a valid URL");
    let res = http
        .get(url.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    res.json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: the body is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use super::get_json;

    /// One canned HTTP/1.1 answer on 127.0.0.1:0, to the first request.
    async fn answer_once(status: &str, body: &str) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before its request head");
                head.extend_from_slice(&buf[..n]);
            }
            assert!(head.starts_with(b"GET /state "), "{head:?}");
            socket.write_all(reply.as_bytes()).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn the_body_is_decoded_whatever_the_status() {
        let addr = answer_once("503 Service Unavailable", r#"{"ready":false,"n":[1,2]}"#).await;
        let doc = get_json(&reqwest::Client::new(), format!("http://{addr}/state")).await;
        assert_eq!(doc, json!({"ready": false, "n": [1, 2]}));
    }

    #[tokio::test]
    #[should_panic(expected = "the body is not JSON")]
    async fn a_body_that_is_not_json_fails_the_test() {
        let addr = answer_once("200 OK", "<html>").await;
        get_json(&reqwest::Client::new(), format!("http://{addr}/state")).await;
    }
}
