//! HTTPS for the local cluster, as kube-apiserver serves it: at start the
//! cluster has a certificate authority (a self-signed CA, kept in the data
//! directory as `ca.crt` and `ca.key` when there is one, so a restarted
//! cluster keeps its identity and the kubeconfigs written before stay
//! valid) and a fresh serving certificate signed by it for `localhost`,
//! `127.0.0.1`, `::1`, `kubernetes.default.svc` and the listen address.
//! The kubeconfig carries the CA (`certificate-authority-data`), so
//! client-go, kubectl, helm and kube-rs verify the server, and client-go
//! sends the kubeconfig's token (it sends none over plain HTTP).
//!
//! A plain-HTTP request to the TLS port is answered as Go's `net/http`
//! answers it (`400 Client sent an HTTP request to an HTTPS server.`); the
//! provider, the configurations and that answer are `berth-tls`'s, shared
//! with the daemon's admin port.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use berth_tls::tokio_rustls::rustls::{self, pki_types};
use berth_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use berth_tls::rcgen;

/// Why the cluster's TLS identity could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Making or signing a certificate failed.
    #[error("making the cluster's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The CA kept in the data directory could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The CA's subject (the same on every start, so a CA read back from the
/// data directory signs serving certificates that chain to it).
const CA_NAME: &str = "berth-local-ca";
/// Files of the CA in the data directory.
const CA_CERT_FILE: &str = "ca.crt";
const CA_KEY_FILE: &str = "ca.key";
/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A certificate authority: its certificate and private key (PEM).
#[derive(Clone)]
pub struct Ca {
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// The cluster's CA and serving certificate.
#[derive(Clone)]
pub struct Identity {
    ca: Ca,
    ca_der: Vec<u8>,
    server: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

fn ca_params() -> Result<rcgen::CertificateParams, Error> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, CA_NAME);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign, rcgen::KeyUsagePurpose::DigitalSignature];
    berth_tls::valid_for(&mut p, 3650);
    Ok(p)
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::File { path: path.display().to_string(), message: e.to_string() }
}

/// The CA: read from `dir` when it holds one, else made (and written
/// there when `dir` is given, the key readable by its owner only).
fn ca(dir: Option<&Path>) -> Result<Ca, Error> {
    if let Some(dir) = dir {
        let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        if cert_path.exists() && key_path.exists() {
            let cert_pem = std::fs::read_to_string(&cert_path).map_err(|e| file_err(&cert_path, e))?;
            let key_pem = std::fs::read_to_string(&key_path).map_err(|e| file_err(&key_path, e))?;
            return Ok(Ca { cert_pem, key_pem });
        }
    }
    let key = rcgen::KeyPair::generate()?;
    let cert = ca_params()?.self_signed(&key)?;
    let ca = Ca { cert_pem: cert.pem(), key_pem: key.serialize_pem() };
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
        let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        write_private(&key_path, ca.key_pem.as_bytes()).map_err(|e| file_err(&key_path, e))?;
        std::fs::write(&cert_path, ca.cert_pem.as_bytes()).map_err(|e| file_err(&cert_path, e))?;
    }
    Ok(ca)
}

/// Writes `bytes` to a new file readable by its owner only (on Unix).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    std::io::Write::write_all(&mut o.open(path)?, bytes)
}

impl Identity {
    /// The CA (`given`, else the one of `data_dir`, else a new one) and a
    /// serving certificate for `listen` signed by it.
    pub fn new(listen: SocketAddr, data_dir: Option<&Path>, given: Option<&Ca>) -> Result<Identity, Error> {
        use pki_types::pem::PemObject as _;
        let ca = match given {
            Some(c) => c.clone(),
            None => ca(data_dir)?,
        };
        let bad = |message: String| Error::File { path: CA_CERT_FILE.into(), message };
        let ca_der = pki_types::CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
        let ca_key = rcgen::KeyPair::from_pem(&ca.key_pem).map_err(|e| Error::File { path: CA_KEY_FILE.into(), message: e.to_string() })?;
        let issuer = rcgen::Issuer::new(ca_params()?, ca_key);
        let names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"];
        let mut p = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        let mut ips: Vec<IpAddr> = vec![IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)];
        if !listen.ip().is_unspecified() && !ips.contains(&listen.ip()) {
            ips.push(listen.ip());
        }
        p.subject_alt_names.extend(ips.into_iter().map(rcgen::SanType::IpAddress));
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, "kube-apiserver");
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        berth_tls::valid_for(&mut p, 365);
        let key = rcgen::KeyPair::generate()?;
        let leaf = p.signed_by(&key, &issuer)?;
        let chain = vec![leaf.der().clone(), ca_der.clone()];
        let server = berth_tls::server_config(chain, berth_tls::private_key(&key))?;
        Ok(Identity { ca, ca_der: ca_der.as_ref().to_vec(), server })
    }

    /// The CA certificate (PEM), as a kubeconfig's `certificate-authority-data` decodes.
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert_pem
    }

    /// The CA (certificate and key), for another cluster that must be
    /// the same server to its clients ([`crate::ClusterConfig::ca`]).
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The CA certificate (DER), as kube-rs' `Config::root_cert` takes it.
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// A TLS connector that trusts this cluster's CA only.
    pub fn connector(&self) -> Result<TlsConnector, Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki_types::CertificateDer::from(self.ca_der.clone()))?;
        Ok(TlsConnector::from(berth_tls::client_config(roots)?))
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server.clone())
    }
}

/// A byte stream to the cluster: TLS or plain TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection to the cluster (see [`crate::LocalCluster::connect`]).
pub type Conn = Pin<Box<dyn Io>>;

/// Connects to `addr` (an unspecified address means loopback) over TLS
/// trusting `identity`'s CA, or over plain TCP when `identity` is None.
pub async fn connect(addr: SocketAddr, identity: Option<&Identity>) -> std::io::Result<Conn> {
    let addr = if addr.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], addr.port())) } else { addr };
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let Some(id) = identity else {
        let c: Conn = Box::pin(tcp);
        return Ok(c);
    };
    let connector = id.connector().map_err(std::io::Error::other)?;
    let s = connector.connect(pki_types::ServerName::IpAddress(addr.ip().into()), tcp).await?;
    let c: Conn = Box::pin(s);
    Ok(c)
}

/// Accepts TCP connections and hands over those whose TLS handshake
/// completed (handshakes run concurrently, each bounded in time), for
/// `axum::serve`. Dropping it stops accepting and frees the address.
pub(crate) struct TlsListener {
    rx: mpsc::Receiver<(berth_tls::tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(128);
        let task = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    r = listener.accept() => r,
                    _ = tx.closed() => return,
                };
                let (tcp, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        // EMFILE and friends: wait rather than spin.
                        tracing::debug!(error = %e, "local cluster: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let (tx, acceptor) = (tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    if let Some(s) = berth_tls::accept(tcp, &acceptor, HANDSHAKE_TIMEOUT, "local cluster").await {
                        let _ = tx.send((s, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener { rx, addr, task })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = berth_tls::tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task is gone (aborted): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_client_trusting_the_ca_talks_to_the_server_and_the_ca_is_kept() {
        let dir = std::env::temp_dir().join(format!("berth-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let id = Identity::new(SocketAddr::from(([127, 0, 0, 1], 0)), Some(&dir), None).unwrap_or_else(|e| panic!("{e}"));
        let again = Identity::new(SocketAddr::from(([127, 0, 0, 1], 0)), Some(&dir), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id.ca_pem(), again.ca_pem(), "the data directory keeps the CA");
        let other = Identity::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(id.ca_pem(), other.ca_pem());

        let l = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        // Served by the certificate of the restarted identity.
        let mut tls = TlsListener::new(l, again.acceptor()).unwrap_or_else(|e| panic!("{e}"));
        let server = tokio::spawn(async move {
            let (mut s, _) = axum::serve::Listener::accept(&mut tls).await;
            let mut b = [0u8; 2];
            let _ = s.read_exact(&mut b).await;
            let _ = s.write_all(b"ok").await;
            let _ = s.shutdown().await;
            // A plain-HTTP client is told what it did.
            tls
        });
        let mut c = connect(addr, Some(&id)).await.unwrap_or_else(|e| panic!("{e}"));
        c.write_all(b"hi").await.unwrap_or_else(|e| panic!("{e}"));
        let mut b = [0u8; 2];
        c.read_exact(&mut b).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&b, b"ok");
        let _tls = server.await.unwrap_or_else(|e| panic!("{e}"));
        let mut plain = connect(addr, None).await.unwrap_or_else(|e| panic!("{e}"));
        plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap_or_else(|e| panic!("{e}"));
        let mut out = Vec::new();
        let _ = plain.read_to_end(&mut out).await;
        assert!(String::from_utf8_lossy(&out).contains("Client sent an HTTP request to an HTTPS server."));
        // A client trusting another CA refuses the server.
        assert!(connect(addr, Some(&other)).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
