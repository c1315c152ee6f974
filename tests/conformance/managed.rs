//! The managed-service servers the suite runs the Functions engine on: the default user may
//! not run MODULE, CONFIG or DEBUG (nor, with `deny_functions`, FUNCTION), while the harness's
//! own helpers still work through its full-rights user.

use fencedlock_protocol::functions::{self, LIBRARY};
use harness::redis::Value;
use harness::{error_text, Server};

/// The default user's reply to `args`: `Err(text)` for a refusal.
fn as_default(server: &Server, args: &[&str]) -> Result<Value, String> {
    server.cmd::<Value>(args).map_err(|e| error_text(&e))
}

fn refused(server: &Server, args: &[&str]) {
    match as_default(server, args) {
        Err(text) => assert!(text.starts_with("NOPERM"), "{args:?}: {text}"),
        Ok(v) => panic!("{args:?} was allowed for the default user of a managed server: {v:?}"),
    }
}

#[test]
fn a_managed_server_refuses_module_config_and_debug_but_runs_functions() {
    let server = Server::builder().managed().start();
    assert!(server.is_managed());
    refused(&server, &["MODULE", "LIST"]);
    refused(&server, &["CONFIG", "GET", "maxmemory"]);
    refused(&server, &["DEBUG", "SLEEP", "0"]);
    let name: String =
        server.cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY]).expect("FUNCTION LOAD as default");
    assert_eq!(name, functions::NAME);
    let fence: u64 = server.cmd(&["FCALL", "fencedlock_acquire", "1", "m:k", "t", "2000"]).expect("FCALL");
    assert!(fence > 0);
    let version: u64 = server.cmd(&["FCALL_RO", functions::VERSION_FUNCTION, "0"]).expect("FCALL_RO");
    assert_eq!(version, functions::VERSION);
    // The harness's own CONFIG and DEBUG helpers go through its full-rights user.
    assert_eq!(server.config_get("maxmemory"), "0");
    assert!(!server.digest().is_empty());
    let modules: Vec<Value> = server.admin_cmd(&["MODULE", "LIST"]).expect("MODULE LIST as the harness");
    // Valkey 9 lists its Lua engine as a module (`lua`); the point is that ours is not there.
    assert!(
        !format!("{modules:?}").contains("fencedlock"),
        "no fencedlock module on a managed server: {modules:?}"
    );
}

#[test]
fn deny_functions_refuses_function_load_but_not_fcall() {
    let mut server = Server::builder().deny_functions().start();
    refused(&server, &["FUNCTION", "LOAD", "REPLACE", LIBRARY]);
    refused(&server, &["FUNCTION", "LIST"]);
    refused(&server, &["CONFIG", "GET", "maxmemory"]);
    let _: String =
        server.admin_cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY]).expect("loaded by the harness");
    let fence: u64 = server.cmd(&["FCALL", "fencedlock_acquire", "1", "m:k", "t", "2000"]).expect("FCALL");
    assert!(fence > 0);
    // The restriction survives a restart (the ACL is in the config file).
    server.restart();
    refused(&server, &["FUNCTION", "LIST"]);
}
