//! What the library does for `fencedlock_acquireall` beyond the contract's cases, on both forms
//! (`FCALL` and the script through `EVALSHA`): a script is not rolled back, so everything that
//! can refuse a set is checked before the first write, the fence space for all of its new
//! grants included; and one floor covers a set, so every key must be in the floor's slot.

use fencedlock_protocol::functions::{self, LIBRARY, MAX_SAFE_FENCE, WRONG_FLOOR_KEY};
use fencedlock_protocol::ReplyError;
use harness::redis::{self, Value};
use harness::{error_text, Server};

use crate::engines::{managed_with_library, managed_with_script, Library};

/// Both forms of the library on managed servers.
fn both_forms() -> Vec<(Server, Library)> {
    vec![(managed_with_library(LIBRARY), Library::Functions), managed_with_script(functions::eval_script())]
}

/// `fencedlock_acquireall` with exactly these keys (the floor among them, where the caller
/// puts it): the reply, or the error's text.
fn acquire_all(server: &Server, library: &Library, keys: &[Vec<u8>], args: &[&str]) -> Result<Value, String> {
    let function = "fencedlock_acquireall";
    let mut cmd = match library {
        Library::Functions => redis::cmd("FCALL").arg(function).take(),
        Library::Script(sha) => redis::cmd("EVALSHA").arg(sha).take(),
    };
    cmd.arg(keys.len()).arg(keys);
    if matches!(library, Library::Script(_)) {
        cmd.arg(function);
    }
    server.query::<Value>(cmd.arg(args)).map_err(|e| error_text(&e))
}

fn exists(server: &Server, keys: &[&str]) -> i64 {
    server.cmd(&[&["EXISTS"], keys].concat()).expect("EXISTS")
}

#[test]
fn a_set_whose_fences_would_pass_2_to_the_53_writes_nothing() {
    for (server, library) in both_forms() {
        let form = library.name();
        let keys = |names: &[&str]| {
            functions::call_keys_all(&names.iter().map(|n| n.as_bytes()).collect::<Vec<_>>())
        };
        // A first grant records this server's run in the floor; then the floor is moved up to
        // three fences below the bound, keeping the run (no new epoch).
        let first = acquire_all(&server, &library, &keys(&["{x}start"]), &["t", "5000"]);
        assert!(matches!(first, Ok(Value::Array(_))), "{form}: {first:?}");
        let floor = String::from_utf8(functions::floor_key(b"{x}")).expect("ASCII");
        let _: i64 = server.cmd(&["HSET", &floor, "fence", &(MAX_SAFE_FENCE - 2).to_string()]).expect("HSET");

        // Three new grants need MAX_SAFE_FENCE + 1: refused before anything is written.
        let three = acquire_all(&server, &library, &keys(&["{x}a", "{x}b", "{x}c"]), &["t", "5000"]);
        assert_eq!(three, Err(ReplyError::FencesExhausted.message(0)), "{form}");
        assert_eq!(exists(&server, &["{x}a", "{x}b", "{x}c"]), 0, "{form}: a refused set wrote keys");
        let kept: String = server.cmd(&["HGET", &floor, "fence"]).expect("HGET");
        assert_eq!(kept, (MAX_SAFE_FENCE - 2).to_string(), "{form}: the floor moved");

        // Two fit, exactly up to the bound; a re-entered key needs no new fence.
        let two = acquire_all(&server, &library, &keys(&["{x}start", "{x}a", "{x}b"]), &["t", "5000"]);
        let fences: Vec<i64> = redis::from_redis_value(two.expect("granted")).expect("fences");
        let safe = i64::try_from(MAX_SAFE_FENCE).expect("below 2^63");
        assert_eq!(fences[1..], [safe - 1, safe], "{form}");
    }
}

#[test]
fn every_key_of_a_set_must_be_in_its_floors_slot() {
    for (server, library) in both_forms() {
        let form = library.name();
        let floor = functions::floor_key(b"{y}");
        let named = |names: &[&str]| {
            let mut keys: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
            keys.push(floor.clone());
            keys
        };
        // The second key is of another slot: refused, and the first (of the right slot) not
        // created either.
        let spread = acquire_all(&server, &library, &named(&["{y}a", "elsewhere"]), &["t", "5000"]);
        let expected =
            format!("{WRONG_FLOOR_KEY}{}", String::from_utf8_lossy(&functions::floor_key(b"elsewhere")));
        assert_eq!(spread, Err(expected), "{form}");
        assert_eq!(exists(&server, &["{y}a", "elsewhere"]), 0, "{form}");

        // The floor must come last: a lock key there is a wrong floor key.
        let no_floor = ["{y}a", "{y}b"].map(|k| k.as_bytes().to_vec());
        let refused = acquire_all(&server, &library, &no_floor, &["t", "5000"]);
        assert!(refused.as_ref().is_err_and(|e| e.starts_with(WRONG_FLOOR_KEY)), "{form}: {refused:?}");
        // Only the floor: no lock key at all (with words enough to pass the arity check, as
        // `ACQUIREALL 0 t 5000 LABEL l` does on the module).
        let none = acquire_all(&server, &library, std::slice::from_ref(&floor), &["t", "5000", "LABEL", "l"]);
        assert_eq!(none, Err(ReplyError::BadKeys.message(0)), "{form}");
        assert_eq!(exists(&server, &["{y}a", "{y}b"]), 0, "{form}");

        let granted = acquire_all(&server, &library, &named(&["{y}a", "{y}b"]), &["t", "5000"]);
        assert!(matches!(granted, Ok(Value::Array(ref f)) if f.len() == 2), "{form}: {granted:?}");
    }
}
