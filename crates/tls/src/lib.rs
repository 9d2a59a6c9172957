//! berth's TLS front door, shared by the servers that speak HTTPS (the
//! daemon's admin port and the local cluster): the rustls provider (ring,
//! as kube's client already uses), server and client configurations for
//! HTTP/1.1, certificates made with rcgen (validity in whole days,
//! self-signed for localhost), and the accept step that answers plain HTTP
//! on a TLS port as Go's `net/http` does
//! (`400 Client sent an HTTP request to an HTTPS server.`).
//!
//! What it must never depend on: kube, axum, hyper or any berth crate. It
//! sits below both the daemon and the local cluster (`ci/deps.sh`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};

pub use rcgen;
pub use tokio_rustls;

/// A certificate chain (leaf first) and its private key.
pub type CertifiedKey = (Vec<pki_types::CertificateDer<'static>>, pki_types::PrivateKeyDer<'static>);

/// Go's answer to plain HTTP on a TLS port.
pub const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The crypto provider of every TLS configuration here (ring).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration for HTTP/1.1 with `chain` and `key`.
pub fn server_config(chain: Vec<pki_types::CertificateDer<'static>>, key: pki_types::PrivateKeyDer<'static>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?.with_no_client_auth().with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client configuration for HTTP/1.1 that trusts `roots` only.
pub fn client_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?.with_root_certificates(roots).with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Valid from yesterday for `days` days (whole days, as rcgen dates go).
pub fn valid_for(p: &mut rcgen::CertificateParams, days: i64) {
    use chrono::Datelike;
    let day = |t: chrono::DateTime<chrono::Utc>| rcgen::date_time_ymd(t.year(), u8::try_from(t.month()).unwrap_or(1), u8::try_from(t.day()).unwrap_or(1));
    let now = chrono::Utc::now();
    p.not_before = day(now - chrono::Duration::days(1));
    p.not_after = day(now + chrono::Duration::days(days));
}

/// A private key as rustls takes it.
pub fn private_key(key: &rcgen::KeyPair) -> pki_types::PrivateKeyDer<'static> {
    pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()))
}

/// A fresh self-signed certificate for the DNS `names` and `ips`, named
/// `common_name`, valid for `days` days (as upstream makes one in memory
/// when no certificate is given).
pub fn self_signed(names: &[&str], ips: &[IpAddr], common_name: &str, days: i64) -> Result<CertifiedKey, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    params.subject_alt_names.extend(ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
    valid_for(&mut params, days);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((vec![cert.der().clone()], private_key(&key)))
}

/// The TLS handshake of one accepted connection, bounded as a whole by
/// `timeout` (one deadline from the accept to the end of the handshake, so
/// a slow client cannot stretch it step by step). A plain-HTTP request gets Go's 400 ([`PLAIN_HTTP_ANSWER`])
/// and `None`, as does a failed or slow handshake (logged at debug under
/// `server`'s name).
pub async fn accept(mut tcp: TcpStream, acceptor: &TlsAcceptor, timeout: Duration, server: &str) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await {
        // A TLS handshake record.
        Ok(Ok(1)) if first[0] == 0x16 => {}
        Ok(Ok(1)) if first[0].is_ascii_alphabetic() => {
            // Read the request head first: closing with it unread would
            // reset the connection and lose the answer.
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let (mut buf, mut seen) = ([0u8; 4096], Vec::new());
                while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") || seen.len() > 16 * 1024 {
                        break;
                    }
                }
                let _ = tcp.write_all(PLAIN_HTTP_ANSWER).await;
                let _ = tcp.shutdown().await;
            })
            .await;
            return None;
        }
        _ => return None,
    }
    match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "{server}: TLS handshake failed");
            None
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_self_signed_server_answers_tls_and_tells_plain_http_what_it_did() {
        let (chain, key) = self_signed(&["localhost"], &[IpAddr::from([127, 0, 0, 1])], "test", 1).unwrap_or_else(|e| panic!("{e}"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(chain[0].clone()).unwrap_or_else(|e| panic!("{e}"));
        let acceptor = TlsAcceptor::from(server_config(chain, key).unwrap_or_else(|e| panic!("{e}")));
        let connector = tokio_rustls::TlsConnector::from(client_config(roots).unwrap_or_else(|e| panic!("{e}")));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (tcp, _) = l.accept().await.unwrap_or_else(|e| panic!("{e}"));
                if let Some(mut s) = accept(tcp, &acceptor, Duration::from_secs(5), "test").await {
                    let mut b = [0u8; 2];
                    let _ = s.read_exact(&mut b).await;
                    let _ = s.write_all(b"ok").await;
                    let _ = s.shutdown().await;
                }
            }
        });
        let tcp = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
        let mut c = connector.connect(pki_types::ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap_or_else(|e| panic!("{e}"));
        c.write_all(b"hi").await.unwrap_or_else(|e| panic!("{e}"));
        let mut b = [0u8; 2];
        c.read_exact(&mut b).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&b, b"ok");
        let mut plain = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
        plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap_or_else(|e| panic!("{e}"));
        let mut out = Vec::new();
        let _ = plain.read_to_end(&mut out).await;
        assert_eq!(out, PLAIN_HTTP_ANSWER);
        server.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
