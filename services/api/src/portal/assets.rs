//! The portal's stylesheet and script, served as files (the CSP allows no inline style or
//! script). Compiled in: no build step, no file system at run time.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/portal.css");
const JS: &str = include_str!("assets/portal.js");

pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "portal.css" => (CSS, "text/css; charset=utf-8"),
        "portal.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "not found").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
