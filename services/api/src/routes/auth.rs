//! App-portal access: a tenant-scoped API token (`hsp_…`, Svix's `token`) and a login link to
//! the tenant portal (`portal/`): `<portal_url>/login?token=…`, short-lived
//! (`api.portal_link_ttl_s`) and single-use; and logout of such a token.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use hookstream_store::api_keys::{self, KeyKind, NewKey};
use hookstream_store::applications::{self, AppRef};

use super::Errors;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::models::{AppPortalAccessIn, AppPortalAccessOut, ApplicationTokenExpireIn};
use crate::AppState;

/// Longest lifetime a portal token may ask for.
const MAX_EXPIRY_S: u64 = 365 * 86_400;

/// Get a portal token for an application
///
/// Mints an expiring token that sees only this application (read-only when asked). Operators
/// may ask for any application (creating it from `application` when the path names a uid that
/// does not exist); a tenant key only for its own.
#[utoipa::path(post, path = "/api/v1/auth/app-portal-access/{app_id}", operation_id = "v1.authentication.app-portal-access", tag = "Authentication",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    request_body = AppPortalAccessIn,
    responses((status = 200, body = AppPortalAccessOut), Errors))]
pub async fn app_portal_access(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<AppPortalAccessIn>,
) -> ApiResult<axum::Json<AppPortalAccessOut>> {
    // A portal token minting another would outlive its own expiry and logout.
    if matches!(
        who,
        Principal::Tenant {
            kind: KeyKind::Portal,
            ..
        }
    ) {
        return Err(ApiError::Forbidden(
            "an app-portal token cannot get portal access: use the application's key".into(),
        ));
    }
    let app_ref = AppRef::parse(&app_id);
    let tenant = match applications::resolve(&state.pool, &app_ref, who.scope()).await? {
        Some(t) => t,
        None => match (&app_ref, input.application.clone(), who.is_operator()) {
            (AppRef::Uid(uid), Some(mut app), true) => {
                super::check_uid(uid, "application.uid")?;
                app.uid = Some(uid.clone());
                applications::create(&state.pool, &super::apps::fields(app)?)
                    .await?
                    .id
            }
            _ => return Err(ApiError::not_found("application")),
        },
    };
    let expiry = input.expiry.unwrap_or(state.cfg.portal_token_ttl_s);
    if !(1..=MAX_EXPIRY_S).contains(&expiry) {
        return Err(ApiError::body(
            "expiry",
            format!("must be 1 to {MAX_EXPIRY_S} seconds"),
        ));
    }
    // A read-only caller can only hand out read-only access.
    let caller_read_only = matches!(who, Principal::Tenant { read_only: true, .. });
    let read_only = input.read_only.unwrap_or(false) || caller_read_only;
    // Revoking the tenant key that mints the token revokes the token, its links and sessions.
    let minted_by = match who {
        Principal::Tenant { key_id, .. } => Some(key_id),
        Principal::Operator { .. } => None,
    };
    let (key, token) = api_keys::create(
        &state.pool,
        &NewKey {
            tenant_id: tenant,
            kind: KeyKind::Portal,
            name: within_bytes(input.session_id.unwrap_or_default(), 200),
            read_only,
            expires_at: Some(Utc::now() + chrono::Duration::seconds(expiry as i64)),
            minted_by,
        },
    )
    .await?;
    let link_expiry = Utc::now() + chrono::Duration::seconds(state.cfg.portal_link_ttl_s as i64);
    // The link, and the session it opens, live only while this token does.
    let link = hookstream_store::portal::create_link(&state.pool, key.id, read_only, link_expiry).await?;
    Ok(axum::Json(AppPortalAccessOut {
        url: format!(
            "{}/login?token={link}",
            state.cfg.portal_url.trim_end_matches('/')
        ),
        token,
    }))
}

/// Log out an app-portal token
///
/// Revokes the portal token the request is made with; other tokens are refused.
#[utoipa::path(post, path = "/api/v1/auth/logout", operation_id = "v1.authentication.logout", tag = "Authentication",
    responses((status = 204), Errors))]
pub async fn logout(State(state): State<AppState>, who: Principal) -> ApiResult<StatusCode> {
    match who {
        Principal::Tenant {
            key_id,
            tenant,
            kind: KeyKind::Portal,
            ..
        } => {
            api_keys::revoke(&state.pool, key_id, Some(tenant)).await?;
            state.auth.forget(key_id);
            Ok(StatusCode::NO_CONTENT)
        }
        _ => Err(ApiError::Forbidden("only an app-portal token can log out".into())),
    }
}

/// Longest grace `expire-all` may give the tokens it ends.
const MAX_EXPIRE_GRACE_S: i64 = 86_400;

/// Most `sessionIds` one `expire-all` names.
const MAX_EXPIRE_SESSION_IDS: usize = 100;

/// Expire all of an application's portal tokens
///
/// Every app-portal token of the application (or only those minted with one of
/// `sessionIds`) expires in `expiry` seconds (at once by default), and with it every portal
/// session and unopened login link it made. Operators, or the application's tenant key.
#[utoipa::path(post, path = "/api/v1/auth/app/{app_id}/expire-all", operation_id = "v1.authentication.expire-all", tag = "Authentication",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    request_body = ApplicationTokenExpireIn,
    responses((status = 204), Errors))]
pub async fn expire_all(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<ApplicationTokenExpireIn>,
) -> ApiResult<StatusCode> {
    if matches!(
        who,
        Principal::Tenant {
            kind: KeyKind::Portal,
            ..
        }
    ) {
        return Err(ApiError::Forbidden(
            "an app-portal token cannot expire tokens: use the application's key".into(),
        ));
    }
    let tenant = super::tenant_of(&state, &who, &app_id).await?;
    let grace = input.expiry.unwrap_or(0);
    if !(0..=MAX_EXPIRE_GRACE_S).contains(&grace) {
        return Err(ApiError::body(
            "expiry",
            format!("must be 0 to {MAX_EXPIRE_GRACE_S} seconds"),
        ));
    }
    if input
        .session_ids
        .as_ref()
        .is_some_and(|ids| ids.len() > MAX_EXPIRE_SESSION_IDS)
    {
        return Err(ApiError::body(
            "sessionIds",
            format!("at most {MAX_EXPIRE_SESSION_IDS} session ids"),
        ));
    }
    let at = Utc::now() + chrono::Duration::seconds(grace);
    let ended = api_keys::expire_portal_tokens(&state.pool, tenant, at, input.session_ids.as_deref()).await?;
    state.auth.forget_where(|k| ended.contains(&k.id));
    Ok(StatusCode::NO_CONTENT)
}

/// `text` cut to at most `max` bytes, at a character boundary (a key's name is limited in
/// bytes; `sessionId` is free text the portal does not use).
fn within_bytes(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_session_id_is_cut_within_the_name_limit_at_a_character() {
        let cut = super::within_bytes("é".repeat(150), 200);
        assert_eq!((cut.len(), cut.chars().count()), (200, 100));
        assert_eq!(super::within_bytes("ab".into(), 200), "ab");
        assert_eq!(super::within_bytes("aé".into(), 2), "a");
    }
}
