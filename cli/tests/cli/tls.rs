//! `--redis rediss://…` with `--tls-cacert`, `--tls-cert`, `--tls-key` (or their
//! `FENCEDLOCK_TLS_*` variables): leases over TLS and mutual TLS, and certificates that do not
//! match, which exit 78 (configuration), not 69: retrying or `--on-unavailable run` cannot fix them.

use harness::{Certs, ClientAuth, Flavor};

use crate::support::*;

fn tls_server(certs: &Certs, auth: ClientAuth) -> Server {
    // The Valkey build the suite downloads has no TLS (see `ServerBuilder::tls`).
    Server::builder().flavor(Flavor::Redis).tls(certs, auth).start()
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn run_and_acquire_over_tls_with_a_private_ca() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::None);
    let url = server.tls_url();
    let out = run(&["run", "-k", "tls", "--redis", &url, "--tls-cacert", path(&certs.ca()), "--", "true"]);
    assert_eq!(out.code(), 0, "{out:?}");
    // The same through the environment, as cron jobs set it.
    let out = spawn_cmd(
        fencedlock()
            .args(["acquire", "-k", "tls", "--ttl", "30s", "--redis", &url])
            .env("FENCEDLOCK_TLS_CACERT", certs.ca()),
    )
    .finish();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(server.lock_held("tls"));
}

#[test]
fn mutual_tls_needs_a_client_certificate_of_the_servers_ca() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::Required);
    let url = server.tls_url();
    let ca = certs.ca();
    let (cert, key) = certs.client();
    let out = run(&[
        "acquire",
        "-k",
        "m",
        "--redis",
        &url,
        "--tls-cacert",
        path(&ca),
        "--tls-cert",
        path(&cert),
        "--tls-key",
        path(&key),
    ]);
    assert_eq!(out.code(), 0, "{out:?}");

    let (other_cert, other_key) = certs.other_client();
    for args in [
        vec!["acquire", "-k", "n", "--redis", &url, "--tls-cacert", path(&ca)],
        vec![
            "acquire",
            "-k",
            "n",
            "--redis",
            &url,
            "--tls-cacert",
            path(&ca),
            "--tls-cert",
            path(&other_cert),
            "--tls-key",
            path(&other_key),
        ],
    ] {
        let out = run(&args);
        assert_one_line_error(&out, CONFIG, &["TLS handshake", "--tls-cert"]);
    }
    assert!(!server.lock_held("n"));
}

#[test]
fn a_server_certificate_that_does_not_verify_exits_78_whatever_the_policy() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::None);
    let url = server.tls_url();
    let other = certs.other_ca();
    for policy in ["fail", "skip", "run"] {
        let out = run(&[
            "run",
            "-k",
            "w",
            "--redis",
            &url,
            "--tls-cacert",
            path(&other),
            "--on-unavailable",
            policy,
            "--",
            "true",
        ]);
        assert_one_line_error(&out, CONFIG, &["TLS handshake", "--tls-cacert"]);
    }
    // A Redlock of TLS masters says the same.
    let more: Vec<Server> = (0..2).map(|_| tls_server(&certs, ClientAuth::None)).collect();
    let urls = [url.clone(), more[0].tls_url(), more[1].tls_url()].join(",");
    let out = run(&["acquire", "-k", "w", "--redis", &urls, "--tls-cacert", path(&other)]);
    assert_one_line_error(&out, CONFIG, &["TLS handshake"]);
}

#[test]
fn tls_options_are_checked_before_anything_connects() {
    let certs = Certs::generate();
    let ca = certs.ca();
    let missing = certs.dir().join("absent.pem");
    for args in [
        // TLS options with a plaintext URL: refused, never sent in the clear.
        vec!["acquire", "-k", "k", "--redis", "redis://127.0.0.1:1", "--tls-cacert", path(&ca)],
        vec!["acquire", "-k", "k", "--redis", "rediss://127.0.0.1:1", "--tls-cacert", path(&missing)],
    ] {
        let out = run(&args);
        assert_one_line_error(&out, USAGE, &["TLS"]);
    }
    // A certificate without its key.
    let out = run(&["acquire", "-k", "k", "--redis", "rediss://127.0.0.1:1", "--tls-cert", path(&ca)]);
    assert_eq!(out.code(), USAGE, "{out:?}");
    assert!(out.stderr.contains("--tls-key"), "{out:?}");
}
