//! Authentication of API requests, as kube-apiserver's bearer-token
//! authenticators: a request's `Authorization: Bearer TOKEN` names a
//! static token of [`AuthConfig::tokens`] (kube-apiserver's
//! `--token-auth-file`; the cluster's admin token is one, in
//! `system:masters`) or a ServiceAccount token the store issued
//! (TokenRequest, see [`Store::review_token`]). An authenticated user is
//! also in `system:authenticated`; a request without a bearer token is
//! `system:anonymous` in `system:unauthenticated`; an unknown or malformed
//! token is refused (401 Unauthorized, never anonymous).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::auth::AuthConfig;
use crate::rbac::{ALL_AUTHENTICATED, SYSTEM_MASTERS, UserInfo};
use crate::store::Store;

/// Why a request could not be authenticated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The bearer token is not one the cluster knows (or has expired).
    #[error("Unauthorized")]
    Unauthorized,
}

impl Error {
    /// The `metav1.Status` kube-apiserver answers (401).
    pub fn status(&self) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    }
}

/// The user name of the admin token the cluster makes when its
/// [`AuthConfig`] has no token in `system:masters`.
pub const ADMIN_USER: &str = "berth-admin";

/// A fresh admin token (`berth-admin.` and 32 random hex digits).
pub fn new_admin_token() -> String {
    format!("berth-admin.{:032x}", rand::random::<u128>())
}

/// The first static token in `system:masters`, if any.
pub fn admin_token(auth: &AuthConfig) -> Option<&str> {
    auth.tokens.iter().find(|t| t.groups.iter().any(|g| g == SYSTEM_MASTERS)).map(|t| t.token.as_str())
}

/// Authenticates requests: static tokens, then the store's ServiceAccount tokens.
#[derive(Clone, Debug)]
pub struct Authenticator {
    tokens: Arc<HashMap<String, UserInfo>>,
    store: Arc<Store>,
}

/// `user` with `system:authenticated` added (as upstream's authenticator
/// group adder), unless it is there already.
fn with_authenticated(mut user: UserInfo) -> UserInfo {
    if !user.in_group(ALL_AUTHENTICATED) {
        user.groups.push(ALL_AUTHENTICATED.into());
    }
    user
}

impl Authenticator {
    /// An authenticator over `auth`'s static tokens and `store`'s issued tokens.
    pub fn new(auth: &AuthConfig, store: Arc<Store>) -> Self {
        let tokens = auth
            .tokens
            .iter()
            .map(|t| (t.token.clone(), with_authenticated(UserInfo { name: t.user.clone(), uid: t.uid.clone(), groups: t.groups.clone(), ..UserInfo::default() })))
            .collect();
        Authenticator { tokens: Arc::new(tokens), store }
    }

    /// The user `token` authenticates, if any.
    pub fn token(&self, token: &str) -> Option<UserInfo> {
        if let Some(u) = self.tokens.get(token) {
            return Some(u.clone());
        }
        let u = self.store.review_token(token)?;
        Some(with_authenticated(UserInfo { name: u.username, uid: u.uid, groups: u.groups, ..UserInfo::default() }))
    }

    /// The user a request's headers authenticate: anonymous without a
    /// bearer token (upstream reads `Authorization` as `Bearer TOKEN`,
    /// anything else is no token), [`Error::Unauthorized`] when the token is unknown.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<UserInfo, Error> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(UserInfo::anonymous()) };
        let Ok(value) = value.to_str() else { return Err(Error::Unauthorized) };
        let mut parts = value.split_whitespace();
        let scheme = parts.next().unwrap_or_default();
        let token = parts.next().unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Ok(UserInfo::anonymous());
        }
        self.token(token).ok_or(Error::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::StaticToken;
    use axum::http::HeaderValue;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap_or_else(|e| panic!("{e}")));
        }
        h
    }

    #[test]
    fn static_tokens_anonymous_and_unknown_tokens() {
        let cfg = AuthConfig { tokens: vec![StaticToken::new("root-token", "root", &[SYSTEM_MASTERS])], ..AuthConfig::default() };
        let a = Authenticator::new(&cfg, Arc::new(Store::new(Default::default())));
        let root = a.authenticate(&headers(Some("Bearer root-token"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(root.name, "root");
        assert_eq!(root.groups, vec![SYSTEM_MASTERS.to_string(), ALL_AUTHENTICATED.to_string()]);
        assert_eq!(a.authenticate(&headers(None)), Ok(UserInfo::anonymous()));
        assert_eq!(a.authenticate(&headers(Some("Basic abc"))), Ok(UserInfo::anonymous()));
        assert_eq!(a.authenticate(&headers(Some("Bearer nope"))), Err(Error::Unauthorized));
        assert_eq!(admin_token(&cfg), Some("root-token"));
        assert_eq!(admin_token(&AuthConfig::default()), None);
    }
}
