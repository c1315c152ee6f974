//! TLS for `rediss://` servers: which certificate authority to trust and, for mutual TLS,
//! which certificate to present, applied the same way to a single server, a Redis Cluster and
//! each Redlock master.
//!
//! A handshake that fails (a server certificate that does not verify, a client certificate
//! the server refuses, TLS spoken to a plaintext port) is reported as a configuration error
//! ([`redis::ErrorKind::InvalidClientConfig`]), never as an outage: retrying cannot fix it, and
//! a fail-open policy must not run unlocked work because a certificate expired. There is no
//! fallback to plaintext.

use std::path::Path;

use redis::RedisError;
#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, ErrorKind, TlsCertificates};

use crate::error::Error;

/// TLS settings for `rediss://` URLs. The default trusts the system's certificate
/// authorities and presents no client certificate.
///
/// ```no_run
/// # fn main() -> Result<(), fencedlock::Error> {
/// use fencedlock::{LockConfig, Locker, Tls};
/// let tls = Tls::from_files(Some("ca.pem".as_ref()), Some(("client.pem".as_ref(), "client.key".as_ref())))?;
/// let config = LockConfig::builder().tls(tls).build()?;
/// let locker = Locker::open("rediss://redis.internal:6380", config)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// PEM certificates of the authorities to trust instead of the system's.
    ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to the server.
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The default: the system's authorities, no client certificate.
    pub fn new() -> Tls {
        Tls::default()
    }

    /// Trust only the authorities in `pem` (a private CA) instead of the system's.
    pub fn ca_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Tls {
        self.ca = Some(pem.into());
        self
    }

    /// Present this certificate chain and private key (PEM) for mutual TLS.
    pub fn client_cert_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Tls {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// Settings read from PEM files: an authority to trust and a client certificate with its
    /// key, each optional. [`Error::Config`] names a file that cannot be read.
    pub fn from_files(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> Result<Tls, Error> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| Error::Config(format!("cannot read the TLS {what} {}: {e}", path.display())))
        };
        let mut tls = Tls::new();
        if let Some(ca) = ca {
            tls = tls.ca_cert_pem(read("CA certificate", ca)?);
        }
        if let Some((cert, key)) = client {
            tls = tls.client_cert_pem(read("client certificate", cert)?, read("client key", key)?);
        }
        Ok(tls)
    }

    /// Whether anything differs from the default (which a plaintext URL would ignore).
    pub(crate) fn is_configured(&self) -> bool {
        self != &Tls::default()
    }

    /// A client for the server at `url` with these settings.
    pub(crate) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if self.is_configured() {
            return redis::Client::build_with_tls(url, self.certificates());
        }
        redis::Client::open(url)
    }

    /// A cluster client for `seeds` with these settings.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_client(
        &self,
        seeds: Vec<&str>,
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let builder = redis::cluster::ClusterClient::builder(seeds);
        #[cfg(feature = "tls")]
        let builder = if self.is_configured() { builder.certs(self.certificates()) } else { builder };
        builder.build()
    }

    /// `builder` presenting these settings to the sentinels and to the primary they name.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel_client(
        &self,
        builder: redis::sentinel::SentinelClientBuilder,
    ) -> redis::sentinel::SentinelClientBuilder {
        #[cfg(feature = "tls")]
        if self.is_configured() {
            return builder
                .set_client_to_redis_certificates(self.certificates())
                .set_client_to_sentinel_certificates(self.certificates());
        }
        builder
    }

    /// The settings as the `redis` crate takes them.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self
                .identity
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
            root_cert: self.ca.clone(),
        }
    }

    /// Refuses settings that `url` would silently ignore (a plaintext URL with TLS options),
    /// and a TLS URL in a build without the `tls` feature.
    pub(crate) fn check_url(&self, url: &str) -> Result<(), Error> {
        if is_tls_url(url) {
            supported()?;
        }
        if self.is_configured() && !is_tls_url(url) {
            return Err(Error::Config(format!(
                "TLS options were given but {url:?} is plaintext: use rediss:// for a TLS server"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Tls {
    /// Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("client_cert", &self.identity.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

/// Whether `url` asks for TLS.
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.trim_start().get(..9).is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// `Ok` in a build with the `tls` feature; without it, the error a TLS URL gets.
pub(crate) fn supported() -> Result<(), Error> {
    if cfg!(feature = "tls") {
        return Ok(());
    }
    Err(Error::Config("this build of fencedlock has no TLS: enable the client's `tls` feature".into()))
}

/// `err` as a configuration error if a TLS handshake failed, else unchanged. The `redis`
/// crate reports a failed handshake as an I/O error, which would read as an outage.
pub(crate) fn classify(err: RedisError) -> RedisError {
    #[cfg(feature = "tls")]
    if let Some(reason) = handshake_failure(&err) {
        return RedisError::from((ErrorKind::InvalidClientConfig, "TLS handshake failed", reason));
    }
    err
}

/// The TLS error inside `err`, as text. rustls reports it inside an I/O error, which the
/// `redis` crate keeps behind an `Arc` (the chain's links are typed, so this is no text match).
#[cfg(feature = "tls")]
fn handshake_failure(err: &RedisError) -> Option<String> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(error) = cause {
        let error: &(dyn std::error::Error + 'static) = match error.downcast_ref::<Shared>() {
            Some(shared) => shared.as_ref(),
            None => error,
        };
        let io_inner = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        let tls = match io_inner {
            Some(inner) => inner.downcast_ref::<rustls::Error>(),
            None => error.downcast_ref::<rustls::Error>(),
        };
        if let Some(tls) = tls {
            return Some(tls.to_string());
        }
        cause = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "tls"))]
    #[test]
    fn without_the_feature_a_tls_url_is_a_configuration_error() {
        assert!(matches!(Tls::new().check_url("rediss://127.0.0.1:1"), Err(Error::Config(_))));
        assert!(Tls::new().check_url("redis://127.0.0.1:1").is_ok());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_plaintext_url_with_tls_options_is_refused() {
        let tls = Tls::new().ca_cert_pem("x");
        assert!(matches!(tls.check_url("redis://127.0.0.1:1"), Err(Error::Config(_))));
        assert!(tls.check_url("rediss://127.0.0.1:1").is_ok());
        assert!(tls.check_url("REDISS://127.0.0.1:1").is_ok());
        assert!(Tls::new().check_url("redis://127.0.0.1:1").is_ok());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_failed_handshake_is_a_configuration_error_and_other_errors_are_unchanged() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let err = classify(RedisError::from(io));
        assert_eq!(err.kind(), ErrorKind::InvalidClientConfig, "{err}");
        assert!(!err.is_io_error());
        let refused = classify(RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
        assert!(refused.is_io_error());
    }

    #[test]
    fn the_key_is_never_printed() {
        let tls = Tls::new().client_cert_pem("CERT", "SECRET KEY");
        assert!(!format!("{tls:?}").contains("SECRET"));
    }
}
