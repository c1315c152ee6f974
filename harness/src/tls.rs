//! Certificates for TLS tests, made by `openssl` in a temp dir: a test CA, a server
//! certificate for 127.0.0.1 signed by it, a client certificate signed by it (mutual TLS), and
//! a second, unrelated CA with a client certificate of its own (the "wrong CA" cases).
//!
//! Keys are P-256 (fast to make; rustls and OpenSSL both take them), valid for two days.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::error::{HarnessError, Result};

/// A set of test certificates; the files go when it is dropped.
#[derive(Debug)]
pub struct Certs {
    dir: TempDir,
}

/// Whether a TLS server asks clients for a certificate signed by its CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `tls-auth-clients no`: server authentication only.
    None,
    /// `tls-auth-clients yes`: mutual TLS.
    Required,
}

impl Certs {
    /// Makes the CA, the server's and the clients' certificates; panics with openssl's output
    /// if it fails (the tests cannot run without them).
    pub fn generate() -> Certs {
        Certs::try_generate().unwrap_or_else(|e| panic!("making test certificates with openssl: {e}"))
    }

    /// [`Certs::generate`], returning the failure.
    pub fn try_generate() -> Result<Certs> {
        let certs = Certs { dir: tempfile::Builder::new().prefix("fencedlock-tls-").tempdir()? };
        for ca in ["ca", "other-ca"] {
            certs.new_key(ca, &["-x509", "-days", "2"])?;
        }
        certs.leaf(
            "server",
            "ca",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
        )?;
        certs.leaf("client", "ca", "extendedKeyUsage=clientAuth")?;
        certs.leaf("other-client", "other-ca", "extendedKeyUsage=clientAuth")?;
        Ok(certs)
    }

    /// A new P-256 key `name.key` and, with `-x509` in `extra`, a self-signed certificate
    /// `name.pem`; otherwise a signing request `name.csr`.
    fn new_key(&self, name: &str, extra: &[&str]) -> Result<()> {
        let (key, subject) = (format!("{name}.key"), format!("/CN=fencedlock test {name}"));
        let out = if extra.contains(&"-x509") { format!("{name}.pem") } else { format!("{name}.csr") };
        let mut args = vec!["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        args.extend(["-keyout", &key, "-out", &out, "-subj", &subject]);
        args.extend(extra);
        self.openssl(&args)
    }

    /// A key and a certificate `name.key`/`name.pem` signed by `ca`, with `extensions`.
    fn leaf(&self, name: &str, ca: &str, extensions: &str) -> Result<()> {
        std::fs::write(self.dir.path().join(format!("{name}.ext")), extensions)?;
        self.new_key(name, &[])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ])
    }

    fn openssl(&self, args: &[&str]) -> Result<()> {
        let out = Command::new("openssl").args(args).current_dir(self.dir.path()).output().map_err(|e| {
            HarnessError::Build(format!(
                "cannot run openssl ({e}); install it with `apt-get install openssl`"
            ))
        })?;
        if !out.status.success() {
            return Err(HarnessError::Build(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The test CA's certificate (PEM): what clients trust.
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }

    /// The server's certificate and key, for 127.0.0.1.
    pub fn server(&self) -> (PathBuf, PathBuf) {
        (self.file("server.pem"), self.file("server.key"))
    }

    /// A client certificate and key signed by the test CA.
    pub fn client(&self) -> (PathBuf, PathBuf) {
        (self.file("client.pem"), self.file("client.key"))
    }

    /// An unrelated CA, which did not sign the server's certificate.
    pub fn other_ca(&self) -> PathBuf {
        self.file("other-ca.pem")
    }

    /// A client certificate and key signed by the unrelated CA, which the server refuses.
    pub fn other_client(&self) -> (PathBuf, PathBuf) {
        (self.file("other-client.pem"), self.file("other-client.key"))
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
