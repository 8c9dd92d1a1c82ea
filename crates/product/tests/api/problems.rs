//! SPEC §3 over the real router: every error path answers a complete
//! problem (`type`, `title`, `status`, `detail`), the extractor rejections
//! and fallbacks included. (`helpers::problem` checks the members; 503 and
//! 500 are covered next to the mapping, in `http::error`.)

use shopeasy_product::http::BODY_LIMIT;

use crate::helpers::{TOKEN, body, problem, spawn};

#[tokio::test]
async fn every_error_path_answers_a_complete_problem() {
    let app = spawn(shopeasy_testkit::sqlite()).await;
    let product = app.create("PRB-1").await;
    let path = format!("/api/products/{}", product["id"].as_str().unwrap());
    let json = "application/json";
    let new = body("PRB-2").to_string();
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(BODY_LIMIT));

    // `POST /api/products`: (status, why, body, content type, token).
    let posts = [
        (
            400,
            "malformed JSON",
            "{not json".to_owned(),
            json,
            Some(TOKEN),
        ),
        (401, "no token", new.clone(), json, None),
        (401, "a wrong token", new, json, Some("nope")),
        (
            409,
            "a SKU another product has",
            body("PRB-1").to_string(),
            json,
            Some(TOKEN),
        ),
        (413, "over the body limit", big, json, Some(TOKEN)),
        (415, "not JSON", "{}".to_owned(), "text/plain", Some(TOKEN)),
        (422, "invalid fields", "{}".to_owned(), json, Some(TOKEN)),
        (
            422,
            "a field of the wrong type",
            r#"{"price_cents":"ten"}"#.to_owned(),
            json,
            Some(TOKEN),
        ),
    ];
    let mut details = Vec::new();
    for (status, why, text, content_type, token) in posts {
        let mut req = app
            .client
            .post(app.url("/api/products"))
            .header("content-type", content_type)
            .body(text);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let p = problem(req.send().await.unwrap(), status).await;
        details.push((why, p["detail"].as_str().unwrap().to_owned()));
    }
    assert_eq!(
        details[1].1, details[2].1,
        "a missing and a wrong token get the same 401"
    );

    // Reads: an invalid query, an unknown id, a path that is no id, a path
    // no route serves; 405: a known path, an unknown method.
    for (status, path) in [
        (422, "/api/products?limit=0"),
        (404, "/api/products/01890000-0000-7000-8000-000000000000"),
        (404, "/api/products/not-a-uuid"),
        (404, "/api/nothing"),
    ] {
        problem(app.get(path).await, status).await;
    }
    problem(app.client.patch(app.url(&path)).send().await.unwrap(), 405).await;
}
