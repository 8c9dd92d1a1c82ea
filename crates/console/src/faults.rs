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
//! Only these shapes are forwarded (names of letters, digits, `-`, `_`,
//! `.`), so the console cannot be used to reach any other path. The fault
//! API's answer — status and problem+json — is passed back unchanged: its
//! `detail` already says what was wrong with a toxic.

use axum::{
    body::Bytes,
    extract::State,
    http::{Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::Path;

use crate::{error::ConsoleError, server::AppState};

/// Forwards one change to the fault API.
///
/// # Errors
/// A path that is not a fault control (400), or a fault API that does not
/// answer (502).
pub async fn forward(
    State(state): State<AppState>,
    method: Method,
    Path(path): Path<String>,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    check_path(&path)?;
    let url = format!("{}/{path}", state.faults_url);
    let mut request = state.http.request(method, &url);
    if !body.is_empty() {
        request = request
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
    }
    let res = request
        .send()
        .await
        .map_err(|e| ConsoleError::Upstream(format!("the fault API did not answer: {e}")))?;
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
        .map_err(|e| ConsoleError::Upstream(format!("the fault API's answer broke off: {e}")))?;
    tracing::info!(%path, %status, "fault change forwarded");
    Ok((status, [(header::CONTENT_TYPE, content_type)], bytes).into_response())
}

/// `reset`, `proxies/{p}`, `proxies/{p}/toxics`, `proxies/{p}/toxics/{t}`.
fn check_path(path: &str) -> Result<(), ConsoleError> {
    let parts: Vec<&str> = path.split('/').collect();
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s != "."
            && s != ".."
    };
    let ok = match parts.as_slice() {
        ["reset"] => true,
        ["proxies", p] => name(p),
        ["proxies", p, "toxics"] => name(p),
        ["proxies", p, "toxics", t] => name(p) && name(t),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ConsoleError::BadRequest(format!(
            "/api/faults/{} is not a fault control; use reset, proxies/{{edge}}, \
             proxies/{{edge}}/toxics or proxies/{{edge}}/toxics/{{name}}",
            path.chars().take(100).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fault_controls_are_forwarded() {
        for ok in [
            "reset",
            "proxies/order-inventory",
            "proxies/order-inventory/toxics",
            "proxies/order-inventory/toxics/hang_1",
        ] {
            check_path(ok).unwrap();
        }
        for bad in [
            "",
            "version",
            "populate",
            "proxies",
            "proxies/../reset",
            "proxies/a/toxics/b/c",
            "proxies/a b",
            "windows",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
