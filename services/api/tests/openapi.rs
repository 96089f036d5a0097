//! The OpenAPI document is generated from the handlers; `services/api/openapi.json` is its
//! committed copy, and this test fails when they differ. After changing a route or a model,
//! run `UPDATE_OPENAPI=1 cargo test -p api --test openapi` and commit the file.

#[test]
fn the_committed_openapi_document_is_what_the_code_generates() {
    let doc = api::openapi();
    let generated = format!("{}\n", doc.to_pretty_json().expect("the document serialises"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "services/api/openapi.json differs from what the code generates: run \
         `UPDATE_OPENAPI=1 cargo test -p api --test openapi` and commit it"
    );
    let value: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(
        value["openapi"].as_str().unwrap().starts_with("3.1"),
        "OpenAPI 3.1"
    );
    for path in [
        "/api/v1/app",
        "/api/v1/app/{app_id}/msg",
        "/api/v1/event-type/{event_type_name}",
    ] {
        assert!(value["paths"].get(path).is_some(), "{path} documented");
    }
}
