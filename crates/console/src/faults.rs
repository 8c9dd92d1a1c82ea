//! The fault controls: `/api/faults/<path>` forwarded to the fault API's
//! `/<path>` (Toxiproxy's paths and JSON), behind [`crate::guard`] (same
//! origin, admin token).
//!
//! | console route | fault API |
//! |---|---|
//! | `POST /api/faults/proxies/{edge}/toxics` | add a toxic |
//! | `DELETE /api/faults/proxies/{edge}/toxics/{name}` | remove it |
//! | `POST /api/faults/proxies/{edge}` `{"enabled": false}` | disable the edge |
//! | `POST /api/faults/reset` | heal everything |
//!
//! Only these four are forwarded — each path shape with its own method
//! (names of letters, digits, `-`, `_`, `.`), and on an edge itself only
//! `{"enabled": true|false}` — so the console cannot be used to reach any
//! other path, delete an edge for good (Heal everything cannot bring it
//! back) or point it at another upstream. Anything else is refused with a
//! problem whose `detail` says what is accepted: 400 for another path or
//! body, 405 for another method. The fault API's answer — status and
//! problem+json — is passed back unchanged: its `detail` already says what
//! was wrong with a toxic.

use axum::{
    body::Bytes,
    extract::State,
    http::{Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};
use shopeasy_runtime::problem::Path;

use crate::{error::ConsoleError, server::AppState};

/// Who the page's fault changes go through, as a refusal names it.
const FAULT_API: &str = "the fault API";

/// One fault control the console forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Control {
    /// `POST reset`: heal everything.
    Reset,
    /// `POST proxies/{edge}` `{"enabled": …}`: enable or disable an edge.
    Enable(bool),
    /// `POST proxies/{edge}/toxics`: add a toxic (the fault API checks it).
    AddToxic,
    /// `DELETE proxies/{edge}/toxics/{name}`: remove one.
    RemoveToxic,
}

/// Forwards one change to the fault API.
///
/// # Errors
/// A path that is not a fault control or a body it does not take (400),
/// a method it does not take (405), or a fault API that does not answer
/// (502).
pub async fn forward(
    State(state): State<AppState>,
    method: Method,
    Path(path): Path<String>,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    let checked = control(&method, &path, &body)?;
    let url = format!("{}/{path}", state.faults_url);
    let mut request = state.http.request(method, &url);
    // Only what was checked travels: a toxic as sent (the fault API reads
    // it), an edge's switch rebuilt from the value read.
    let forwarded = match checked {
        Control::Reset | Control::RemoveToxic => None,
        Control::Enable(enabled) => Some(Bytes::from(json!({ "enabled": enabled }).to_string())),
        Control::AddToxic => Some(body),
    };
    if let Some(body) = forwarded {
        request = request
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
    }
    let res = request
        .send()
        .await
        .map_err(|e| ConsoleError::upstream(FAULT_API, e))?;
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let bytes = res
        .bytes()
        .await
        .map_err(|e| ConsoleError::upstream(FAULT_API, e))?;
    tracing::info!(%path, %status, "fault change forwarded");
    Ok((status, [(header::CONTENT_TYPE, content_type)], bytes).into_response())
}

/// The control `method` on `path` with `body` is: `POST reset`,
/// `POST proxies/{p}` `{"enabled": bool}`, `POST proxies/{p}/toxics`,
/// `DELETE proxies/{p}/toxics/{t}`.
///
/// # Errors
/// Another path ([`ConsoleError::BadRequest`]), another method on one of
/// these paths ([`ConsoleError::WrongMethod`]), or anything but
/// `{"enabled": bool}` on an edge ([`ConsoleError::BadRequest`]).
fn control(method: &Method, path: &str, body: &[u8]) -> Result<Control, ConsoleError> {
    let parts: Vec<&str> = path.split('/').collect();
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s != "."
            && s != ".."
    };
    let (allow, what) = match parts.as_slice() {
        ["reset"] => ("POST", "reset (heal everything)"),
        ["proxies", p] if name(p) => ("POST", "proxies/{edge} (enable or disable it)"),
        ["proxies", p, "toxics"] if name(p) => ("POST", "proxies/{edge}/toxics (add a toxic)"),
        ["proxies", p, "toxics", t] if name(p) && name(t) => {
            ("DELETE", "proxies/{edge}/toxics/{name} (remove a toxic)")
        }
        _ => {
            return Err(ConsoleError::BadRequest(format!(
                "/api/faults/{} is not a fault control; use POST reset, POST proxies/{{edge}}, \
                 POST proxies/{{edge}}/toxics or DELETE proxies/{{edge}}/toxics/{{name}}",
                path.chars().take(100).collect::<String>()
            )));
        }
    };
    if method.as_str() != allow {
        return Err(ConsoleError::WrongMethod {
            allow,
            detail: format!("{what} takes {allow}, not {method}"),
        });
    }
    Ok(match parts.as_slice() {
        ["reset"] => Control::Reset,
        ["proxies", _] => Control::Enable(enabled(body)?),
        ["proxies", _, "toxics"] => Control::AddToxic,
        _ => Control::RemoveToxic,
    })
}

/// The one thing the page may change on an edge itself: `{"enabled":
/// bool}` and nothing else (`upstream` or `listen` would move the edge).
fn enabled(body: &[u8]) -> Result<bool, ConsoleError> {
    let only = serde_json::from_slice::<Map<String, Value>>(body)
        .ok()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get("enabled").and_then(Value::as_bool));
    only.ok_or_else(|| {
        ConsoleError::BadRequest(
            "an edge takes only {\"enabled\": true} or {\"enabled\": false}: its upstream and \
             listen address are not changed from the console"
                .into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: &[u8] = br#"{"enabled": false}"#;

    #[test]
    fn only_fault_controls_are_forwarded() {
        for (method, path, body, expected) in [
            (Method::POST, "reset", &b""[..], Control::Reset),
            (
                Method::POST,
                "proxies/order-inventory",
                OFF,
                Control::Enable(false),
            ),
            (
                Method::POST,
                "proxies/order-inventory",
                &br#"{"enabled":true}"#[..],
                Control::Enable(true),
            ),
            (
                Method::POST,
                "proxies/order-inventory/toxics",
                &br#"{"type":"timeout"}"#[..],
                Control::AddToxic,
            ),
            (
                Method::DELETE,
                "proxies/order-inventory/toxics/hang_1",
                &b""[..],
                Control::RemoveToxic,
            ),
        ] {
            assert_eq!(control(&method, path, body).unwrap(), expected, "{path}");
        }
        // Each with a body that would pass, so only the path is wrong.
        for bad in [
            "",
            "version",
            "populate",
            "proxies",
            // `..` and `.` as a name: on their own, so the name rule (not
            // the number of parts) is what refuses them.
            "proxies/..",
            "proxies/.",
            "proxies/../toxics",
            "proxies/a/toxics/..",
            "proxies/../reset",
            "proxies/a/toxics/b/c",
            "proxies/a b",
            "windows",
        ] {
            for method in [Method::POST, Method::DELETE] {
                assert!(
                    matches!(control(&method, bad, OFF), Err(ConsoleError::BadRequest(_))),
                    "{method} {bad}"
                );
            }
        }
    }

    #[test]
    fn each_control_takes_only_its_own_method() {
        for (method, path) in [
            (Method::DELETE, "proxies/order-inventory"),
            (Method::PATCH, "proxies/order-inventory"),
            (Method::DELETE, "reset"),
            (Method::DELETE, "proxies/order-inventory/toxics"),
            (Method::POST, "proxies/order-inventory/toxics/hang_1"),
            (Method::PATCH, "proxies/order-inventory/toxics/hang_1"),
        ] {
            let e = control(&method, path, OFF).unwrap_err();
            assert!(
                matches!(e, ConsoleError::WrongMethod { .. }),
                "{method} {path}: {e}"
            );
            assert!(e.to_string().contains(method.as_str()), "{e}");
        }
    }

    #[test]
    fn an_edge_takes_only_its_switch() {
        for body in [
            &br#"{"upstream": "10.0.0.5:80"}"#[..],
            &br#"{"enabled": false, "upstream": "10.0.0.5:80"}"#[..],
            &br#"{"listen": "0.0.0.0:1"}"#[..],
            &br#"{"enabled": "false"}"#[..],
            &br#"[false]"#[..],
            &b""[..],
        ] {
            let e = control(&Method::POST, "proxies/order-inventory", body).unwrap_err();
            assert!(
                matches!(&e, ConsoleError::BadRequest(d) if d.contains("enabled")),
                "{}: {e}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
