//! The portal's guards, route by route and string by string, against a real API (and, where
//! deliveries are needed, a real relay and dispatcher) on this test's own PostgreSQL database
//! and Kafka topics:
//!
//! Longer than 800 lines: one guard per route and per string, in tables that are most of its
//! length.
//!
//! - a read-only session changes nothing through any POST route of `portal::ROUTES` but the
//!   login and the logout: each answers 403 "Read-only access" to a valid form (the session's
//!   CSRF token, same origin, the tenant's own endpoint and event ids), and the endpoints, their
//!   secrets, the messages, the dead letters, the retry tiers and the receiver are as they were.
//!   The same forms from a writable session do change them, so the forms are valid and each
//!   change would have been seen. A POST route added to `ROUTES` that this file cannot fill
//!   fails the test (`write_for`).
//! - markup a tenant or a receiver controls (the application's name, an endpoint's URL and
//!   description, the catalogue's descriptions, groups and examples, an event's payload and
//!   aggregate, a receiver's response body and headers, the fields of a refused form, the
//!   delivery log's filters) is shown escaped on every page that shows it, never as markup.
//! - a session past its expiry (or past its app-portal token's) gets no page, 401, on every
//!   GET and POST route that needs a session; using it does not extend it, and signing in
//!   again from the browser that holds it starts another session and ends that one for good.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use hookstream_store::endpoint_admin::{self, ManagedEndpoint};
use hookstream_store::sqlx;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common;
use common::Api;

// ---- a browser's requests, with a session ----

/// A portal session as a browser holds it: its cookie and the CSRF token of its forms.
struct Browser<'a> {
    api: &'a Api,
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

/// An answer of the portal.
struct Page {
    status: StatusCode,
    /// The cookie the answer sets, if any.
    set_cookie: Option<String>,
    body: String,
}

impl<'a> Browser<'a> {
    /// Opens a portal link for `app` (`common::portal_session`).
    async fn open(api: &'a Api, app: &str, read_only: bool) -> Self {
        let (cookie, csrf) = common::portal_session(api, app, read_only).await;
        Self {
            api,
            http: common::no_redirects(),
            cookie,
            csrf,
        }
    }

    async fn answer(r: reqwest::Response) -> Page {
        Page {
            status: r.status(),
            set_cookie: r
                .headers()
                .get("set-cookie")
                .map(|v| v.to_str().unwrap().to_string()),
            body: r.text().await.unwrap(),
        }
    }

    async fn get(&self, path: &str) -> Page {
        let r = self
            .http
            .get(format!("{}{path}", self.api.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        Self::answer(r).await
    }

    /// A form post as the portal's own page sends it: same origin, with the session's CSRF
    /// token and `fields`.
    async fn post(&self, path: &str, fields: &[(&str, String)]) -> Page {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("csrf", &self.csrf);
        for (k, v) in fields {
            form.append_pair(k, v);
        }
        let r = self
            .http
            .post(format!("{}{path}", self.api.base))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", &self.api.base)
            .header("sec-fetch-site", "same-origin")
            .body(form.finish())
            .send()
            .await
            .unwrap();
        Self::answer(r).await
    }
}

// ---- the tenant's things, and what the write routes are sent ----

/// The tenant's ids the write routes are filled with.
struct Ids {
    /// The main endpoint (enabled; one failed delivery of `event`, dead-lettered).
    ep: Uuid,
    /// Its URL as the portal shows it (what its edit form holds).
    ep_url: String,
    /// An enabled endpoint to disable and delete.
    spare: Uuid,
    /// A disabled endpoint to enable.
    off: Uuid,
    /// An event of the tenant, delivered to `ep` and failed.
    event: Uuid,
    /// A URL new endpoints may have.
    hook: String,
}

/// What a write route does when a writable session sends its form.
#[derive(Debug, Clone, Copy)]
enum Effect {
    NewEndpoint,
    Described(Uuid),
    Disabled(Uuid),
    Enabled(Uuid),
    Deleted(Uuid),
    /// Shows the endpoint's secret in the answer; changes nothing.
    ShowsSecret,
    SecretRotated,
    NewMessage,
    /// Replays the endpoint's dead letters (marked in PostgreSQL, sent to the retry tier).
    DeadLettersReplayed,
    /// Sends the event again (to the retry tier).
    Resent,
    /// Erases the tenant's payloads (an audit record).
    Erased,
}

/// A write route's request: its path with the tenant's own ids, its form (beyond the CSRF
/// token) and its effect.
struct Write {
    path: String,
    form: Vec<(&'static str, String)>,
    effect: Effect,
}

/// How this file sends the POST route `template` of `portal::ROUTES`; None for a route it does
/// not know (which fails the tests that go through every route: a new route needs a case).
fn write_for(template: &str, ids: &Ids) -> Option<Write> {
    let on = |id: Uuid| template.replace("{endpoint_id}", &id.to_string());
    let (path, form, effect) = match template {
        "/portal/endpoints" => (
            template.to_string(),
            vec![
                ("url", format!("{}/created", ids.hook)),
                ("description", "made through the form".into()),
            ],
            Effect::NewEndpoint,
        ),
        "/portal/endpoints/{endpoint_id}" => (
            on(ids.ep),
            vec![
                ("url", ids.ep_url.clone()),
                ("description", "changed through the form".into()),
                ("event_types", String::new()),
                ("rate", String::new()),
                ("timeout_ms", String::new()),
                ("max_in_flight", String::new()),
            ],
            Effect::Described(ids.ep),
        ),
        "/portal/endpoints/{endpoint_id}/disable" => (on(ids.spare), vec![], Effect::Disabled(ids.spare)),
        "/portal/endpoints/{endpoint_id}/enable" => (on(ids.off), vec![], Effect::Enabled(ids.off)),
        "/portal/endpoints/{endpoint_id}/delete" => (on(ids.spare), vec![], Effect::Deleted(ids.spare)),
        "/portal/endpoints/{endpoint_id}/secret" => (on(ids.ep), vec![], Effect::ShowsSecret),
        "/portal/endpoints/{endpoint_id}/secret/rotate" => {
            (on(ids.ep), vec![("grace_s", "0".into())], Effect::SecretRotated)
        }
        "/portal/endpoints/{endpoint_id}/test" => {
            (on(ids.ep), vec![("example", "ping".into())], Effect::NewMessage)
        }
        "/portal/endpoints/{endpoint_id}/replay" => {
            let since = (Utc::now() - TimeDelta::hours(1))
                .format("%Y-%m-%dT%H:%M")
                .to_string();
            (on(ids.ep), vec![("since", since)], Effect::DeadLettersReplayed)
        }
        "/portal/events/{event_id}/resend/{endpoint_id}" => (
            on(ids.ep).replace("{event_id}", &ids.event.to_string()),
            vec![],
            Effect::Resent,
        ),
        "/portal/erase" => (template.to_string(), vec![], Effect::Erased),
        _ => return None,
    };
    Some(Write { path, form, effect })
}

/// The POST routes of `portal::ROUTES` that change something (all but the login and logout).
fn write_routes() -> Vec<&'static str> {
    api::portal::ROUTES
        .iter()
        .filter(|(method, template)| {
            *method == "POST" && !matches!(*template, "/portal/login" | "/portal/logout")
        })
        .map(|(_, template)| *template)
        .collect()
}

/// What the portal could change, as PostgreSQL and Kafka have it.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    /// The tenant's endpoints (without `failing_since`, the dispatcher's health record).
    endpoints: Vec<ManagedEndpoint>,
    /// Every secret row of the tenant's endpoints: id and a digest of the whole row.
    secrets: Vec<(i64, String)>,
    messages: i64,
    /// The tenant's dead letters: id, replay count, replayed, claimed by a replay.
    dead_letters: Vec<(i64, i32, bool, bool)>,
    /// Records on the events topic and on the retry tiers (where resends and replays go).
    events_records: i64,
    tier_records: i64,
    /// Requests the receiver got.
    deliveries: usize,
    /// Erasures of the tenant's payloads (`hookstream.erasures`).
    erasures: i64,
}

async fn snapshot(env: &TestEnv, tenant: Uuid, receiver: Option<&Receiver>) -> Snapshot {
    let mut endpoints = endpoint_admin::list(&env.pool, tenant, None, false, 1_000)
        .await
        .unwrap();
    for e in &mut endpoints {
        e.failing_since = None;
    }
    let secrets = sqlx::query_as(
        "SELECT s.id, md5(s::text) FROM hookstream.endpoint_secrets s
           JOIN hookstream.endpoints e ON e.id = s.endpoint_id
          WHERE e.tenant_id = $1 ORDER BY s.id",
    )
    .bind(tenant)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let erasures = sqlx::query_scalar("SELECT count(*) FROM hookstream.erasures WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let messages = sqlx::query_scalar("SELECT count(*) FROM hookstream.messages WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let dead_letters = sqlx::query_as(
        "SELECT id, replay_count, replayed_at IS NOT NULL, replay_claim IS NOT NULL
           FROM hookstream.dead_letters WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let records = |topic: String| async move {
        env.end_offsets(&topic)
            .await
            .unwrap_or_else(|e| panic!("end offsets of {topic}: {e}"))
            .iter()
            .sum::<i64>()
    };
    let events_records = records(env.kafka.topics.events.clone()).await;
    let mut tier_records = 0;
    for tier in common::retry(env).tiers() {
        tier_records += records(tier.topic).await;
    }
    Snapshot {
        endpoints,
        secrets,
        messages,
        dead_letters,
        events_records,
        tier_records,
        deliveries: receiver.map_or(0, Receiver::count),
        erasures,
    }
}

impl Effect {
    /// Whether `after` shows this effect over `before`.
    fn seen(self, before: &Snapshot, after: &Snapshot) -> bool {
        let find = |s: &Snapshot, id: Uuid| s.endpoints.iter().find(|e| e.id == id).cloned();
        match self {
            Effect::NewEndpoint => after.endpoints.len() == before.endpoints.len() + 1,
            Effect::Described(id) => {
                find(after, id).map(|e| e.description) != find(before, id).map(|e| e.description)
            }
            Effect::Disabled(id) => find(after, id).is_some_and(|e| !e.enabled),
            Effect::Enabled(id) => find(after, id).is_some_and(|e| e.enabled),
            Effect::Deleted(id) => find(after, id).is_none(),
            Effect::ShowsSecret => true,
            Effect::SecretRotated => after.secrets != before.secrets,
            Effect::NewMessage => after.messages == before.messages + 1,
            // A dead letter stored before was replayed (not merely a new one stored).
            Effect::DeadLettersReplayed => after
                .dead_letters
                .iter()
                .any(|a| before.dead_letters.iter().any(|b| a.0 == b.0 && a.1 > b.1)),
            Effect::Resent => after.tier_records > before.tier_records,
            Effect::Erased => after.erasures > before.erasures,
        }
    }
}

/// Creates an endpoint of `acme` through the API; returns its id.
async fn endpoint(api: &Api, body: Value) -> Uuid {
    let (s, ep) = api
        .op(Method::POST, "/api/v1/app/acme/endpoint", Some(body))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ep}");
    ep["id"].as_str().unwrap().parse().unwrap()
}

/// Creates the application `acme` named `name`; returns its id.
async fn app(api: &Api, name: &str) -> Uuid {
    let (s, a) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": name, "uid": "acme"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    a["id"].as_str().unwrap().parse().unwrap()
}

/// Creates a message of `acme` through the API; returns its id.
async fn message(api: &Api, body: Value) -> Uuid {
    let (s, m) = api.op(Method::POST, "/api/v1/app/acme/msg", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{m}");
    m["id"].as_str().unwrap().parse().unwrap()
}

async fn current_secret(env: &TestEnv, ep: Uuid) -> String {
    endpoint_admin::current_secret(&env.pool, &env.sealer(), ep)
        .await
        .unwrap()
        .expose()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_changes_nothing_on_any_write_route() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let pipeline = common::start_pipeline(&env);
    // Every delivery fails for good (a 4xx): the event gets a dead letter a replay would send.
    let receiver = Receiver::start(Behaviour::Status(400)).await;
    let tenant = app(&api, "Acme").await;
    let ep = endpoint(&api, json!({"url": receiver.url(), "description": "orders"})).await;
    let spare = endpoint(&api, json!({"url": format!("{}/spare", receiver.url())})).await;
    let off = endpoint(
        &api,
        json!({"url": format!("{}/off", receiver.url()), "disabled": true}),
    )
    .await;
    let (_, shown) = api
        .op(Method::GET, &format!("/api/v1/app/acme/endpoint/{ep}"), None)
        .await;
    let event = message(
        &api,
        json!({"eventType": "order.created", "payload": {"order": 1}}),
    )
    .await;
    // Delivered (and failed) to the two enabled endpoints, both dead-lettered.
    assert!(
        eventually(Duration::from_secs(60), || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM hookstream.dead_letters WHERE event_id = $1 AND replayed_at IS NULL",
            )
            .bind(event)
            .fetch_one(&env.pool)
            .await
            .unwrap();
            n == 2 && receiver.count() == 2
        })
        .await,
        "the event's two dead letters within 60 s"
    );
    let ids = Ids {
        ep,
        ep_url: shown["url"].as_str().unwrap().to_string(),
        spare,
        off,
        event,
        hook: receiver.url(),
    };

    let ro = Browser::open(&api, "acme", true).await;
    let before = snapshot(&env, tenant, Some(&receiver)).await;
    assert_eq!(before.endpoints.len(), 3);
    assert_eq!(before.dead_letters.len(), 2);
    let secret = current_secret(&env, ep).await;
    let routes = write_routes();
    let unknown: Vec<&str> = routes
        .iter()
        .copied()
        .filter(|t| write_for(t, &ids).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "POST routes of portal::ROUTES this test cannot send (add them to `write_for`): {unknown:?}"
    );
    assert!(routes.len() >= 10, "{routes:?}");

    // Every write route: 403 "Read-only access", no secret shown, nothing changed.
    for template in &routes {
        let w = write_for(template, &ids).unwrap();
        let r = ro.post(&w.path, &w.form).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "POST {template} ({}) from a read-only session:\n{}",
            w.path,
            r.body
        );
        assert!(
            r.body.contains("Read-only access"),
            "POST {template}: refused as read-only, not for another reason:\n{}",
            r.body
        );
        assert!(!r.body.contains(&secret), "POST {template} shows the secret");
        assert_eq!(
            snapshot(&env, tenant, Some(&receiver)).await,
            before,
            "POST {template} from a read-only session changed something"
        );
    }
    // Nothing happens later either (a replay runs in the background; a resend is delivered
    // after the first tier's delay, 1 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(snapshot(&env, tenant, Some(&receiver)).await, before);
    assert_eq!(current_secret(&env, ep).await, secret);

    // The pages that only serve to change something are refused too, and the read-only pages
    // offer no form to a write route.
    for path in [
        "/portal/endpoints/new".to_string(),
        format!("/portal/endpoints/{ep}/edit"),
    ] {
        let r = ro.get(&path).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "GET {path}: {}", r.body);
    }
    for path in [
        "/portal".to_string(),
        format!("/portal/endpoints/{ep}"),
        format!("/portal/endpoints/{spare}"),
        format!("/portal/endpoints/{off}"),
        format!("/portal/events/{event}"),
    ] {
        let r = ro.get(&path).await;
        assert_eq!(r.status, StatusCode::OK, "GET {path}");
        for template in &routes {
            let w = write_for(template, &ids).unwrap();
            assert!(
                !r.body.contains(&format!("action=\"{}\"", w.path)),
                "the read-only page {path} has a form posting to {}",
                w.path
            );
        }
    }

    // The same forms from a writable session: accepted, and each change is seen, so the forms
    // above were valid and a change would have been caught.
    let rw = Browser::open(&api, "acme", false).await;
    for template in &routes {
        let w = write_for(template, &ids).unwrap();
        let before = snapshot(&env, tenant, Some(&receiver)).await;
        let secret = current_secret(&env, ep).await;
        let r = rw.post(&w.path, &w.form).await;
        assert!(
            r.status == StatusCode::SEE_OTHER || r.status == StatusCode::OK,
            "POST {template} from a writable session: {}\n{}",
            r.status,
            r.body
        );
        if matches!(w.effect, Effect::ShowsSecret) {
            assert!(r.body.contains(&secret), "POST {template} shows the secret");
        }
        let start = Instant::now();
        loop {
            if w.effect
                .seen(&before, &snapshot(&env, tenant, Some(&receiver)).await)
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "POST {template} from a writable session: {:?} not seen",
                w.effect
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    println!("{} write routes refused to a read-only session", routes.len());
    pipeline.cancel();
}

// ---- markup ----

const SCRIPT: &str = "<script>alert(1)</script>";
const BREAKOUT: &str = "\"><img src=x onerror=alert(1)>";

/// Markup labelled `label` (so that a page showing it names where it came from).
fn markup(label: &str) -> String {
    format!("{label}:{SCRIPT}{BREAKOUT}")
}

/// `s` as maud escapes it (text and double-quoted attributes).
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `markup(label)` inside JSON (a payload, an example), escaped.
fn escaped_json(label: &str) -> String {
    escaped(&serde_json::to_string(&markup(label)).unwrap())
}

/// No markup of ours is markup on this page.
fn assert_inert(what: &str, body: &str) {
    for raw in [SCRIPT, "<img src=x", "\"><img"] {
        assert!(!body.contains(raw), "{what} shows {raw:?} unescaped:\n{body}");
    }
}

/// A receiver on 127.0.0.1:0 that answers every request, whatever its path, 400 with markup
/// in its body and in a header. Returns its base URL.
async fn start_markup_receiver() -> String {
    let app = axum::Router::new().fallback(|| async {
        (
            StatusCode::BAD_REQUEST,
            [("x-receiver-says", markup("header"))],
            markup("body"),
        )
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_tenants_and_receivers_is_escaped() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let pipeline = common::start_pipeline(&env);
    let receiver = start_markup_receiver().await;

    app(&api, &markup("app")).await;
    // Event type names cannot carry markup (the API refuses them); descriptions, groups and
    // examples can.
    let (s, refused) = api
        .op(
            Method::POST,
            "/api/v1/event-type",
            Some(json!({"name": markup("type"), "description": "x"})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let (s, refused) = api
        .op(
            Method::POST,
            "/api/v1/app/acme/msg",
            Some(json!({"eventType": markup("type"), "payload": {}})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let (s, et) = api
        .op(
            Method::POST,
            "/api/v1/event-type",
            Some(json!({
                "name": "order.created",
                "description": markup("type-description"),
                "groupName": markup("group"),
                "schemas": {"1": {"type": "object", "examples": [{"note": markup("example")}]}},
            })),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{et}");
    // The URL parser percent-encodes `<`, `>` and `"` and the display form hides encoded
    // segments; `'` and `&` stay.
    let ep = endpoint(
        &api,
        json!({
            "url": format!("{receiver}/hook/it's/a&b/{SCRIPT}?x&{BREAKOUT}=1"),
            "description": markup("description"),
        }),
    )
    .await;
    let (_, shown) = api
        .op(Method::GET, &format!("/api/v1/app/acme/endpoint/{ep}"), None)
        .await;
    let url = shown["url"].as_str().unwrap().to_string();
    assert!(url.contains("it's/a&b"), "{url}");
    assert!(!url.contains(['<', '>', '"']), "{url}");
    let event = message(
        &api,
        json!({
            "eventType": "order.created",
            "payload": {"note": markup("payload"), markup("key"): [markup("item")]},
            "aggregateType": markup("aggregate-type"),
            "aggregateId": markup("aggregate-id"),
        }),
    )
    .await;

    let b = Browser::open(&api, "acme", false).await;
    // The dispatcher delivers the event; the receiver's 400 is recorded with its response.
    let event_page = format!("/portal/events/{event}");
    assert!(
        eventually(Duration::from_secs(60), || async {
            let r = b.get(&event_page).await;
            r.body.contains("HTTP 400") && r.body.contains("class=\"status bad\">failed")
        })
        .await,
        "the failed attempt on the event's page within 60 s"
    );

    let text = |label: &str| escaped(&markup(label));
    let url_shown = escaped(&url);
    let pages: Vec<(String, Vec<String>)> = vec![
        ("/portal".into(), vec![text("description"), url_shown.clone()]),
        (
            format!("/portal/endpoints/{ep}"),
            vec![text("description"), url_shown.clone()],
        ),
        (
            format!("/portal/endpoints/{ep}/edit"),
            vec![text("description"), url_shown.clone()],
        ),
        (
            "/portal/event-types".into(),
            vec![text("type-description"), text("group"), escaped_json("example")],
        ),
        ("/portal/deliveries".into(), vec![url_shown.clone()]),
        (
            event_page.clone(),
            vec![
                escaped_json("payload"),
                escaped_json("key"),
                escaped_json("item"),
                text("aggregate-type"),
                text("aggregate-id"),
                url_shown.clone(),
                text("body"),
                text("header"),
            ],
        ),
    ];
    for (path, shows) in &pages {
        let r = b.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "GET {path}");
        assert_inert(&format!("GET {path}"), &r.body);
        for expected in shows.iter().chain([&text("app")]) {
            assert!(
                r.body.contains(expected.as_str()),
                "GET {path} does not show {expected}:\n{}",
                r.body
            );
        }
    }

    // What a request carries back: the delivery log's filters, and refused forms (create and
    // edit) show the fields as typed, escaped.
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, label) in [
        ("status", "status"),
        ("event_type", "filter-type"),
        ("after", "filter-after"),
        ("before", "filter-before"),
    ] {
        q.append_pair(k, &markup(label));
    }
    let path = format!("/portal/deliveries?{}", q.finish());
    let r = b.get(&path).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_inert("the filtered delivery log", &r.body);
    for label in ["filter-type", "filter-after", "filter-before"] {
        assert!(r.body.contains(&text(label)), "the filter {label}:\n{}", r.body);
    }
    let fields = |prefix: &str| -> Vec<(&'static str, String)> {
        [
            "url",
            "description",
            "event_types",
            "rate",
            "timeout_ms",
            "max_in_flight",
        ]
        .into_iter()
        .map(|f| (f, markup(&format!("{prefix}-{f}"))))
        .collect()
    };
    for (path, prefix) in [
        ("/portal/endpoints".to_string(), "new"),
        (format!("/portal/endpoints/{ep}"), "edit"),
    ] {
        let form = fields(prefix);
        let r = b.post(&path, &form).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "POST {path}:\n{}",
            r.body
        );
        assert_inert(&format!("the refused form of POST {path}"), &r.body);
        for (field, value) in &form {
            assert!(
                r.body.contains(&escaped(value)),
                "POST {path} shows its {field} as typed, escaped:\n{}",
                r.body
            );
        }
    }
    // An edit form whose URL the API refuses (the numbers are fine): the refusal and the URL.
    let bad_url = vec![
        ("url", markup("edit-url")),
        ("description", markup("edit-description")),
    ];
    let r = b.post(&format!("/portal/endpoints/{ep}"), &bad_url).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_inert("the edit form with a refused URL", &r.body);
    assert!(r.body.contains(&text("edit-url")), "{}", r.body);
    assert!(r.body.contains("id=\"url-error\""), "{}", r.body);

    // Markup in query strings and paths that are not shown (notices are fixed texts; an id
    // that is not one is not found).
    let m = form_urlencoded::byte_serialize(markup("probe").as_bytes()).collect::<String>();
    for path in [
        format!("/portal?notice={m}&after={m}"),
        format!("/portal/endpoints/{ep}?notice={m}"),
        format!("/portal/events/{event}?notice={m}"),
        format!("/portal/endpoints/{m}"),
        format!("/portal/events/{m}"),
        format!("/portal/deliveries?endpoint={m}"),
        format!("/portal/deliveries?cursor={m}"),
    ] {
        let r = b.get(&path).await;
        assert_inert(&format!("GET {path}"), &r.body);
        assert!(
            !r.body.contains("probe:"),
            "GET {path} shows the probe:\n{}",
            r.body
        );
    }

    // The login page names the application.
    let link = common::portal_link(&api, "acme", false).await;
    let path = &link[link.find("/portal/login").unwrap()..];
    let r = common::no_redirects()
        .get(format!("{}{path}", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert_inert("the login page", &body);
    assert!(body.contains(&format!("Sign in to {}", text("app"))), "{body}");
    pipeline.cancel();
}

// ---- expiry ----

/// Sets the expiry of the session whose cookie is `cookie` (`hs_portal=…`); returns it.
async fn expire_session(env: &TestEnv, cookie: &str) -> chrono::DateTime<Utc> {
    let id = cookie.strip_prefix("hs_portal=").unwrap();
    sqlx::query_scalar(
        "UPDATE hookstream.portal_sessions SET expires_at = now() - interval '1 second'
          WHERE hash = $1 RETURNING expires_at",
    )
    .bind(hookstream_store::portal::hash(id).as_slice())
    .fetch_one(&env.pool)
    .await
    .expect("the session's row")
}

/// The stored expiry of the session whose cookie is `cookie`, if it is still stored.
async fn session_expiry(env: &TestEnv, cookie: &str) -> Option<chrono::DateTime<Utc>> {
    let id = cookie.strip_prefix("hs_portal=").unwrap();
    sqlx::query_scalar("SELECT expires_at FROM hookstream.portal_sessions WHERE hash = $1")
        .bind(hookstream_store::portal::hash(id).as_slice())
        .fetch_optional(&env.pool)
        .await
        .unwrap()
}

/// A request of a session that has ended: 401, the signed-out page (nothing of the tenant, no
/// form), and no cookie set or deleted: a deletion would also delete the cookie a sign-in in
/// another tab set while this request was under way (a browser applies responses as they
/// arrive, and a deletion cannot name the cookie value it means).
fn assert_refused(what: &str, r: &Page, csrf: &str) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}:\n{}", r.body);
    assert!(
        r.body.contains("Your portal session has ended"),
        "{what}:\n{}",
        r.body
    );
    assert!(!r.body.contains("Acme"), "{what} names the tenant:\n{}", r.body);
    assert!(!r.body.contains(csrf), "{what} carries the session's token");
    assert_eq!(r.set_cookie, None, "{what} sets and deletes no cookie");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_refused() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    // The retry tiers the snapshot counts (a dispatcher would make them; none runs here).
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &hookstream_kafka::topics::tier_specs(&env.kafka, &common::retry(&env)),
    )
    .await
    .unwrap();
    let tenant = app(&api, "Acme").await;
    // Never delivered (no dispatcher): nothing here needs a delivery.
    let ep = endpoint(
        &api,
        json!({"url": "http://127.0.0.1:9/hook", "description": "orders"}),
    )
    .await;
    let spare = endpoint(&api, json!({"url": "http://127.0.0.1:9/spare"})).await;
    let off = endpoint(&api, json!({"url": "http://127.0.0.1:9/off", "disabled": true})).await;
    let event = message(
        &api,
        json!({"eventType": "order.created", "payload": {"order": 1}}),
    )
    .await;
    let ids = Ids {
        ep,
        ep_url: "http://127.0.0.1:9/hook".into(),
        spare,
        off,
        event,
        hook: "http://127.0.0.1:9/hook".into(),
    };

    let b = Browser::open(&api, "acme", false).await;
    assert_eq!(b.get("/portal").await.status, StatusCode::OK, "a live session");
    let expired_at = expire_session(&env, &b.cookie).await;
    let before = snapshot(&env, tenant, None).await;

    // Every route that needs a session (all but the login and the static files).
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (method, template) in api::portal::ROUTES {
        if matches!(*template, "/portal/login" | "/portal/assets/{file}") {
            continue;
        }
        let r = match *method {
            "GET" => {
                let path = template
                    .replace("{endpoint_id}", &ep.to_string())
                    .replace("{event_id}", &event.to_string());
                b.get(&path).await
            }
            _ if *template == "/portal/logout" => b.post(template, &[]).await,
            _ => match write_for(template, &ids) {
                Some(w) => b.post(&w.path, &w.form).await,
                None => {
                    unknown.push(*template);
                    continue;
                }
            },
        };
        assert_refused(
            &format!("{method} {template} with an expired session"),
            &r,
            &b.csrf,
        );
        checked += 1;
    }
    assert!(
        unknown.is_empty(),
        "POST routes of portal::ROUTES this test cannot send (add them to `write_for`): {unknown:?}"
    );
    assert_eq!(checked, api::portal::ROUTES.len() - 3);
    assert_eq!(snapshot(&env, tenant, None).await, before, "nothing changed");
    // Using it did not extend it.
    assert_eq!(session_expiry(&env, &b.cookie).await, Some(expired_at));

    // Without a cookie, or with two (one may have been set by a sibling host), the answer is
    // the same page and sets nothing: there is no cookie of ours to delete.
    for (what, cookie) in [
        ("no cookie", None),
        ("two cookies", Some(format!("{}; {}", b.cookie, b.cookie))),
    ] {
        let mut req = b.http.get(format!("{}/portal", api.base));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        let r = Browser::answer(req.send().await.unwrap()).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}");
        assert!(r.body.contains("Your portal session has ended"), "{what}");
        assert_eq!(r.set_cookie, None, "{what}: sets no cookie");
    }

    // Signing in again from the browser that holds it: another session, and the expired one
    // is gone for good (the old cookie stays refused).
    let link = common::portal_link(&api, "acme", false).await;
    let r = common::follow_portal_link_with(&b.http, &api, &link, Some(&b.cookie)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let fresh = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_ne!(fresh, b.cookie, "a new session id");
    assert_eq!(
        session_expiry(&env, &b.cookie).await,
        None,
        "the expired session is gone"
    );
    let r = b.get("/portal").await;
    assert_refused("the expired cookie after a new sign-in", &r, &b.csrf);
    let again = Browser {
        api: &api,
        http: common::no_redirects(),
        csrf: String::new(),
        cookie: fresh,
    };
    assert_eq!(
        again.get("/portal").await.status,
        StatusCode::OK,
        "the new session"
    );

    // A session never outlives its app-portal token: past the token's expiry, the session
    // (whose own expiry is hours away) is refused too.
    let page = again.get("/portal").await.body;
    let again = Browser {
        csrf: common::csrf_of(&page),
        ..again
    };
    let id = again.cookie.strip_prefix("hs_portal=").unwrap();
    let done = sqlx::query(
        "UPDATE hookstream.api_keys SET expires_at = now() - interval '1 second'
          WHERE id = (SELECT key_id FROM hookstream.portal_sessions WHERE hash = $1)",
    )
    .bind(hookstream_store::portal::hash(id).as_slice())
    .execute(&env.pool)
    .await
    .unwrap();
    assert_eq!(done.rows_affected(), 1);
    assert!(session_expiry(&env, &again.cookie).await.unwrap() > Utc::now());
    assert_refused(
        "GET /portal past the token's expiry",
        &again.get("/portal").await,
        &again.csrf,
    );
    let w = write_for("/portal/endpoints", &ids).unwrap();
    assert_refused(
        "POST /portal/endpoints past the token's expiry",
        &again.post(&w.path, &w.form).await,
        &again.csrf,
    );
    assert_eq!(snapshot(&env, tenant, None).await, before, "nothing changed");
}
