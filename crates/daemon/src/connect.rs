//! A kube client from a kubeconfig, or from the pod's service account.
//!
//! Built here, once, rather than in the binary: `kube::Client::try_from`
//! instantiates the whole HTTP stack, and the daemon crate compiles it for
//! every command that talks to an API server.

/// Why no client could be built; each names the flag or the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file cannot be read or parsed.
    #[error("--kubeconfig {path}: {source}")]
    Read {
        /// The file given.
        path: String,
        /// What went wrong.
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig names no usable context, cluster or user.
    #[error("--kubeconfig {path}: {source}")]
    Config {
        /// The file given.
        path: String,
        /// What went wrong.
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given, and neither the in-cluster service account nor
    /// the default kubeconfig is usable.
    #[error("no --kubeconfig given and no in-cluster or default configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration cannot make a client (TLS material, proxy).
    #[error("building the API client: {0}")]
    Client(#[from] kube::Error),
}

/// A client for the kubeconfig at `path` (its `context`, or the current
/// one); without a path, the in-cluster configuration, else the default
/// kubeconfig.
pub async fn client(path: Option<&str>, context: Option<&str>) -> Result<kube::Client, Error> {
    let cfg = match path {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| Error::Read { path: path.to_string(), source })?;
            let opts = kube::config::KubeConfigOptions { context: context.map(String::from), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kc, &opts).await.map_err(|source| Error::Config { path: path.to_string(), source })?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => kube::Config::infer().await?,
        },
    };
    Ok(kube::Client::try_from(cfg)?)
}
