//! ServiceAccount tokens the store issues (`serviceaccounts/token`) and
//! reviews (TokenReview).

use serde_json::{Value, json};

use crate::object::{now_rfc3339, set_path};
use crate::resources as res;

use super::{Error, Result, Store, is_deleting, new_uid};

/// A ServiceAccount token the store issued (a bound token: valid while
/// the account exists with the same uid, until it expires).
#[derive(Debug, Clone)]
pub(super) struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    audiences: Vec<String>,
    pub(super) expires: chrono::DateTime<chrono::Utc>,
}

impl IssuedToken {
    /// Its JSON, as a data directory keeps it.
    pub(super) fn to_json(&self) -> Vec<u8> {
        let v = json!({"namespace": self.namespace, "name": self.name, "uid": self.uid, "audiences": self.audiences,
            "expires": self.expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
        v.to_string().into_bytes()
    }

    /// Read back from [`IssuedToken::to_json`] (`None` if it does not read).
    pub(super) fn from_json(bytes: &[u8]) -> Option<IssuedToken> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let audiences = v.get("audiences")?.as_array()?.iter().filter_map(|a| a.as_str().map(str::to_string)).collect();
        let expires = chrono::DateTime::parse_from_rfc3339(&s("expires")?).ok()?.with_timezone(&chrono::Utc);
        Some(IssuedToken { namespace: s("namespace")?, name: s("name")?, uid: s("uid")?, audiences, expires })
    }
}

/// The user a ServiceAccount token authenticates (for TokenReview).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    /// The account's uid.
    pub uid: String,
    /// `system:serviceaccounts`, `system:serviceaccounts:<namespace>`, `system:authenticated`.
    pub groups: Vec<String>,
    /// The audiences the token was issued for.
    pub audiences: Vec<String>,
}

impl Store {
    /// POST serviceaccounts/<name>/token: issue a token for the account
    /// (TokenRequest: `spec.expirationSeconds`, default 3600 and at least
    /// 600; `spec.audiences`). Returns the TokenRequest with its status.
    pub fn request_token(&self, ns: &str, name: &str, body: Value) -> Result<Value> {
        let mut b = body;
        res::check_type(&mut b, "authentication.k8s.io/v1", "TokenRequest").map_err(|e| Error::BadRequest(e.to_string()))?;
        let req: k8s_openapi::api::authentication::v1::TokenRequest =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid TokenRequest: {e}")))?;
        let sa = self.get(res::SERVICE_ACCOUNTS, ns, name)?;
        let req_spec = req.spec.unwrap_or_default();
        let seconds = req_spec.expiration_seconds.unwrap_or(3600);
        if seconds < 600 {
            return Err(Error::Invalid {
                kind: "TokenRequest.authentication.k8s.io".into(),
                name: name.into(),
                message: "spec.expirationSeconds: Invalid value: ".to_string() + &seconds.to_string() + ": may not specify a duration less than 10 minutes",
            });
        }
        let expires = chrono::Utc::now() + chrono::Duration::seconds(seconds);
        let token = format!("berth-sa.{}{}", new_uid().replace('-', ""), new_uid().replace('-', ""));
        let issued = IssuedToken { namespace: ns.into(), name: name.into(), uid: sa.uid().into(), audiences: req_spec.audiences.clone().unwrap_or_default(), expires };
        let mut tokens = match self.tokens.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let now = chrono::Utc::now();
        tokens.retain(|_, t| t.expires > now);
        self.persist_token(&token, &issued);
        tokens.insert(token.clone(), issued);
        let mut spec = serde_json::to_value(&req_spec).map_err(|e| Error::Internal(e.to_string()))?;
        set_path(&mut spec, &["expirationSeconds"], json!(seconds));
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": now_rfc3339()},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
        }))
    }

    /// The user a token issued by [`Store::request_token`] authenticates,
    /// if it is known, unexpired and its account still exists.
    pub fn review_token(&self, token: &str) -> Option<TokenUser> {
        let t = {
            let tokens = match self.tokens.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            tokens.get(token).cloned()?
        };
        if t.expires <= chrono::Utc::now() {
            return None;
        }
        let sa = self.get(res::SERVICE_ACCOUNTS, &t.namespace, &t.name).ok()?;
        if sa.uid() != t.uid || is_deleting(&sa.value) {
            return None;
        }
        Some(TokenUser {
            username: format!("system:serviceaccount:{}:{}", t.namespace, t.name),
            uid: t.uid,
            groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{}", t.namespace), "system:authenticated".into()],
            audiences: t.audiences,
        })
    }
}
