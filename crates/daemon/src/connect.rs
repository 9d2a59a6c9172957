//! A kube client found as kubectl finds one: `--kubeconfig`, else the files
//! of `$KUBECONFIG` (merged; those that do not exist are skipped, as
//! client-go skips them), else `~/.kube/config`, else the pod's service
//! account (in-cluster); `--context` picks a context of the kubeconfig.
//!
//! Built here, once, rather than in the binary: `kube::Client::try_from`
//! instantiates the whole HTTP stack, and the daemon crate compiles it for
//! every command that talks to an API server.

use std::fmt;
use std::path::PathBuf;

/// Where a client's configuration came from, for messages that say where
/// (a connection error names the server and this).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--kubeconfig FILE` (or a configuration file's `clientConnection.kubeconfig`).
    Flag(String),
    /// The files of `$KUBECONFIG` (the value).
    Env(String),
    /// `~/.kube/config`.
    Home(PathBuf),
    /// The pod's service account.
    InCluster,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(p) => write!(f, "kubeconfig {p}"),
            Origin::Env(v) => write!(f, "kubeconfig $KUBECONFIG={v}"),
            Origin::Home(p) => write!(f, "kubeconfig {}", p.display()),
            Origin::InCluster => f.write_str("in-cluster configuration (service account)"),
        }
    }
}

/// Why no client could be built; each names the source it tried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig cannot be read or parsed, or names no usable context,
    /// cluster or user.
    #[error("{origin}{}", context_note(.context))]
    Kubeconfig {
        /// Where it came from.
        origin: Origin,
        /// The context asked for, if any.
        context: Option<String>,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig anywhere, and not in a cluster.
    #[error("no kubeconfig (--kubeconfig, $KUBECONFIG{}, ~/.kube/config) and not running in a cluster: give --kubeconfig FILE", env_note(.env))]
    Nothing {
        /// `$KUBECONFIG`, when set (none of its files exists).
        env: Option<String>,
        /// Why the in-cluster configuration is not usable.
        #[source]
        source: kube::config::InClusterError,
    },
    /// `--context` without a kubeconfig (in-cluster configuration has no contexts).
    #[error("--context {0}: no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) to pick it from")]
    ContextWithoutKubeconfig(String),
    /// The configuration cannot make a client (TLS material, proxy).
    #[error("building the API client for {server} ({origin})")]
    Client {
        /// The server's URL.
        server: String,
        /// Where the configuration came from.
        origin: Origin,
        /// What went wrong.
        #[source]
        source: kube::Error,
    },
}

fn context_note(c: &Option<String>) -> String {
    c.as_ref().map(|c| format!(" (context {c})")).unwrap_or_default()
}

fn env_note(v: &Option<String>) -> String {
    v.as_ref().map(|v| format!(" (={v}: no such file)")).unwrap_or_default()
}

/// A client and where it points.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The API server's URL.
    pub server: String,
    /// Where the configuration came from.
    pub origin: Origin,
    /// The context used, when a kubeconfig's.
    pub context: Option<String>,
}

impl Connection {
    /// "https://host:6443 (kubeconfig FILE, context C)": for messages.
    pub fn describe(&self) -> String {
        format!("{} ({}{})", self.server, self.origin, self.context.as_ref().map(|c| format!(", context {c}")).unwrap_or_default())
    }
}

/// The configuration kubectl would use: `explicit` (a `--kubeconfig`), else
/// `$KUBECONFIG`, else `~/.kube/config`, else in-cluster; `context` (or the
/// kubeconfig's current context).
pub async fn config(explicit: Option<&str>, context: Option<&str>) -> Result<(kube::Config, Origin, Option<String>), Error> {
    let opts = kube::config::KubeConfigOptions { context: context.map(String::from), ..Default::default() };
    let from = |origin: Origin, read: Result<kube::config::Kubeconfig, kube::config::KubeconfigError>| async move {
        let err = |source| Error::Kubeconfig { origin: origin.clone(), context: context.map(String::from), source };
        let kc = read.map_err(err)?;
        let current = context.map(String::from).or_else(|| kc.current_context.clone());
        let cfg = kube::Config::from_custom_kubeconfig(kc, &opts).await.map_err(err)?;
        Ok::<_, Error>((cfg, origin.clone(), current))
    };
    if let Some(path) = explicit.filter(|p| !p.is_empty()) {
        return from(Origin::Flag(path.to_string()), kube::config::Kubeconfig::read_from(path)).await;
    }
    let env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    if let Some(value) = &env {
        let files: Vec<PathBuf> = std::env::split_paths(value).filter(|p| !p.as_os_str().is_empty() && p.exists()).collect();
        if !files.is_empty() {
            let merged = files.iter().try_fold(kube::config::Kubeconfig::default(), |m, p| kube::config::Kubeconfig::read_from(p).and_then(|c| m.merge(c)));
            return from(Origin::Env(value.to_string_lossy().into_owned()), merged).await;
        }
    } else if let Some(home) = std::env::home_dir().map(|h| h.join(".kube").join("config")).filter(|p| p.exists()) {
        return from(Origin::Home(home.clone()), kube::config::Kubeconfig::read_from(&home)).await;
    }
    if let Some(c) = context {
        return Err(Error::ContextWithoutKubeconfig(c.to_string()));
    }
    let cfg = kube::Config::incluster().map_err(|source| Error::Nothing { env: env.map(|v| v.to_string_lossy().into_owned()), source })?;
    Ok((cfg, Origin::InCluster, None))
}

/// A client for the configuration [`config`] finds.
pub async fn connect(explicit: Option<&str>, context: Option<&str>) -> Result<Connection, Error> {
    let (cfg, origin, context) = config(explicit, context).await?;
    let server = cfg.cluster_url.to_string();
    let client = kube::Client::try_from(cfg).map_err(|source| Error::Client { server: server.clone(), origin: origin.clone(), source })?;
    Ok(Connection { client, server, origin, context })
}

/// A client for [`connect`]'s configuration (without where it points).
pub async fn client(explicit: Option<&str>, context: Option<&str>) -> Result<kube::Client, Error> {
    Ok(connect(explicit, context).await?.client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_names_its_server_and_origin_and_a_bad_one_names_the_file() {
        let dir = std::env::temp_dir().join(format!("berth-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let kc = dir.join("kc");
        let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster: {server: 'https://127.0.0.1:1'}\n- name: b\n  cluster: {server: 'https://127.0.0.2:2'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: one\n  context: {cluster: a, user: u}\n- name: two\n  context: {cluster: b, user: u}\ncurrent-context: one\n";
        std::fs::write(&kc, text).expect("kubeconfig");
        let path = kc.to_string_lossy().into_owned();
        let c = connect(Some(&path), None).await.expect("connects");
        assert_eq!(c.describe(), format!("https://127.0.0.1:1/ (kubeconfig {path}, context one)"));
        let c = connect(Some(&path), Some("two")).await.expect("connects");
        assert_eq!(c.server, "https://127.0.0.2:2/");
        let e = connect(Some(&path), Some("three")).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e, format!("kubeconfig {path} (context three)"));
        let e = connect(Some("/nonexistent/kc"), None).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e, "kubeconfig /nonexistent/kc");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
