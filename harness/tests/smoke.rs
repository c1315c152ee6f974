//! Self-tests of the harness with plain servers (no module), so harness bugs show up apart
//! from module bugs.

use std::time::Duration;

use harness::{error_text, redis, Flavor, Server};

fn plain(flavor: Flavor) -> Server {
    Server::builder().flavor(flavor).without_module().start()
}

#[test]
fn starts_and_answers_on_its_port() {
    let server = Server::builder().without_module().start();
    assert!((harness::PORT_MIN..=harness::PORT_MAX).contains(&server.port()));
    let pong: String = server.cmd(&["PING"]).unwrap();
    assert_eq!(pong, "PONG");
    let mut conn = server.conn();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut conn).unwrap();
    let v: String = server.cmd(&["GET", "k"]).unwrap();
    assert_eq!(v, "v");
    assert!(server.dir().join("server.conf").is_file());
    assert!(server.log_contents().contains("Ready to accept connections"));
}

#[test]
fn error_text_reassembles_server_errors() {
    let server = Server::builder().without_module().start();
    let _: () = server.cmd(&["SET", "s", "v"]).unwrap();
    let err = server.cmd::<i64>(&["LPUSH", "s", "x"]).unwrap_err();
    assert!(error_text(&err).starts_with("WRONGTYPE "), "{}", error_text(&err));
    let err = server.cmd::<i64>(&["GET"]).unwrap_err();
    assert!(error_text(&err).starts_with("ERR wrong number of arguments"), "{}", error_text(&err));
}

#[test]
fn restart_from_rdb_keeps_data_and_port() {
    let mut server = Server::builder().without_module().start();
    let port = server.port();
    let _: () = server.cmd(&["SET", "k", "v"]).unwrap();
    server.save();
    server.kill9();
    assert!(!server.is_running());
    server.restart();
    assert_eq!(server.port(), port);
    let v: String = server.cmd(&["GET", "k"]).unwrap();
    assert_eq!(v, "v");
}

#[test]
fn restart_from_aof_after_rewrite() {
    let mut server = Server::builder().without_module().arg("appendonly", "yes").start();
    let _: () = server.cmd(&["SET", "a", "1"]).unwrap();
    server.rewrite_aof();
    let _: () = server.cmd(&["SET", "b", "2"]).unwrap();
    server.stop();
    server.restart();
    let v: Vec<String> = server.cmd(&["MGET", "a", "b"]).unwrap();
    assert_eq!(v, ["1", "2"]);
}

#[test]
fn debug_command_is_enabled() {
    let server = Server::builder().without_module().start();
    let _: () = server.cmd(&["SET", "k", "v"]).unwrap();
    let _: () = server.cmd(&["DEBUG", "RELOAD"]).unwrap();
    let digest: Vec<String> = server.cmd(&["DEBUG", "DIGEST-VALUE", "k"]).unwrap();
    assert_eq!(digest.len(), 1);
    assert_eq!(digest[0].len(), 40, "{digest:?}");
}

#[test]
fn replica_syncs_and_promotes() {
    let primary = Server::builder().without_module().start();
    let replica = primary.start_replica();
    let _: () = primary.cmd(&["SET", "k", "v"]).unwrap();
    primary.wait_for_replicas(1, Duration::from_secs(5));
    let v: String = replica.cmd(&["GET", "k"]).unwrap();
    assert_eq!(v, "v");
    assert_eq!(replica.info_field("replication", "role").as_deref(), Some("slave"));
    replica.promote();
    let _: () = replica.cmd(&["SET", "k2", "v"]).unwrap();
}

#[test]
fn pause_and_resume() {
    let server = Server::builder().without_module().start();
    server.pause();
    // The kernel still accepts the TCP connection; the frozen server answers nothing, so
    // either the client's handshake or the PING times out.
    let paused =
        server.client().get_connection_with_timeout(Duration::from_millis(300)).and_then(|mut conn| {
            conn.set_read_timeout(Some(Duration::from_millis(300)))?;
            redis::cmd("PING").query::<String>(&mut conn)
        });
    assert!(paused.is_err(), "a paused server must not answer");
    server.resume();
    let pong: String = server.cmd(&["PING"]).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn drop_kills_the_process() {
    let server = Server::builder().without_module().start();
    let port = server.port();
    drop(server);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_bad_config_fails_with_the_servers_words() {
    let err = Server::builder().without_module().arg("no-such-directive", "1").try_start().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no-such-directive") || msg.contains("Bad directive"), "{msg}");
}

#[test]
fn redis_cli_runs_against_the_server() {
    let server = Server::builder().without_module().start();
    let out = server.redis_cli(["SET", "k", "hello"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    let out = server.redis_cli(["GET", "k"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello");
}

#[tokio::test]
async fn async_connection_works() {
    let server = Server::builder().without_module().start();
    let mut conn = server.async_conn().await;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn valkey_starts_too() {
    // Both flavors are targets; this fails (with install instructions) if Valkey is missing.
    let server = plain(Flavor::Valkey);
    let info = server.info("server");
    assert!(info.contains_key("valkey_version") || info.contains_key("server_name"), "{info:?}");
}

#[test]
fn cluster_of_three_reaches_ok() {
    let cluster = harness::Cluster::builder().node(|b| b.without_module()).start();
    assert_eq!(cluster.nodes().len(), 3);
    for n in cluster.nodes() {
        assert_eq!(n.info_field("cluster", "cluster_enabled").as_deref(), Some("1"));
    }
}
