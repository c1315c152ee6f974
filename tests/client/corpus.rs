//! The client failure corpus (`protocol/corpus/client-faults.json`, read as its README says)
//! run against the Rust client, the reference every other client's runner is held to: each
//! scenario on fresh servers, once per engine it names, with real faults (SIGSTOP, kill, a
//! restart without the module, `DEL`).

use std::time::{Duration, Instant};

use fencedlock::{Cause, Error, KeptLease, Lease, LockConfig, Locker, Redlock};
use fencedlock_protocol::command::STATUS as STATUS_COMMAND;
use fencedlock_protocol::functions::function;
use harness::redis::Value;
use harness::{decode_status, workspace_root, Server};
use serde_json::Value as Json;

use crate::support::nodes;

/// Another owner's lease, long enough to outlast any scenario.
const HOLD_TTL: Duration = Duration::from_secs(60);
/// The key `warm` takes and releases, so that connections are open and engines detected.
const WARM_KEY: &str = "corpus:warm";

fn corpus() -> Json {
    let path = workspace_root().join("protocol/corpus/client-faults.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Engine {
    Module,
    Library,
}

impl Engine {
    fn named(name: &str) -> Engine {
        match name {
            "module" => Engine::Module,
            "library" => Engine::Library,
            other => panic!("the corpus names an engine this runner does not know: {other:?}"),
        }
    }

    fn start(self) -> Server {
        match self {
            Engine::Module => Server::start(),
            Engine::Library => Server::builder().managed().start(),
        }
    }
}

/// What a call gave, in the corpus's words (its `outcomes`).
fn outcome<T>(result: &Result<T, Error>) -> String {
    match result {
        Ok(_) => "granted".into(),
        Err(e) if e.is_unavailable() => "unavailable".into(),
        Err(Error::Contended { .. } | Error::QuorumNotReached(_)) => "held".into(),
        Err(e) if e.cause() == Some(Cause::NoModule) => "no_module".into(),
        Err(e) => format!("another error ({e})"),
    }
}

fn millis(step: &Json, field: &str) -> Option<Duration> {
    step.get(field).map(|v| Duration::from_millis(v.as_u64().unwrap_or_else(|| panic!("{field}: {v}"))))
}

fn indices(v: &Json) -> Vec<usize> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list of server indices, got {v}"))
        .iter()
        .map(|i| usize::try_from(i.as_u64().unwrap_or_else(|| panic!("server index {i}"))).expect("small"))
        .collect()
}

/// The locker under test: one server's, or a Redlock over all of them.
enum Under {
    Single(Locker),
    Redlock(Redlock),
}

impl Under {
    fn locker(&self) -> &Locker {
        match self {
            Under::Single(l) => l,
            Under::Redlock(r) => r,
        }
    }
}

/// One scenario on one engine; `Err` says which step broke the contract and how.
async fn run(scenario: &Json, key: &str, engine: Engine) -> Result<(), String> {
    let count = usize::try_from(scenario["servers"].as_u64().expect("servers")).expect("small");
    let ttl = millis(scenario, "ttl_ms").expect("ttl_ms");
    let timeout = millis(scenario, "timeout_ms").expect("timeout_ms");
    let steps = scenario["steps"].as_array().expect("steps");
    // The locker waits as long as the scenario's longest `acquire` asks; a wait of 0 is one
    // attempt (`try_acquire`).
    let wait = steps
        .iter()
        .filter_map(|s| s.get("acquire").and_then(|a| millis(a, "wait_ms")))
        .max()
        .unwrap_or_default();
    let config = |ttl: Duration| {
        LockConfig::builder()
            .ttl(ttl)
            .node_timeout(timeout)
            .max_wait(wait)
            .backoff(Duration::from_millis(5), Duration::from_millis(50))
            .build()
            .expect("valid corpus config")
    };
    let mut servers: Vec<Server> = (0..count).map(|_| engine.start()).collect();
    let under = match scenario["locker"].as_str() {
        Some("single") => Under::Single(Locker::open(&servers[0].url(), config(ttl)).expect("locker")),
        Some("redlock") => Under::Redlock(Redlock::new(nodes(&servers), config(ttl)).expect("redlock")),
        other => panic!("unknown locker {other:?}"),
    };
    let mut kept: Option<KeptLease> = None;
    let mut holders: Vec<Lease> = Vec::new();
    let mut resumes = Vec::new();
    let result = async {
        for (n, step) in steps.iter().enumerate() {
            let at = |what: String| format!("step {n} ({step}): {what}");
            if let Some(on) = step.get("hold") {
                for i in indices(on) {
                    let other = Locker::open(&servers[i].url(), config(HOLD_TTL)).expect("holder");
                    holders.push(other.try_acquire(key).await.map_err(|e| at(format!("the holder: {e}")))?);
                }
            } else if step.get("warm").is_some() {
                let lease = under.locker().try_acquire(WARM_KEY).await.map_err(|e| at(e.to_string()))?;
                lease.release().await.map_err(|e| at(e.to_string()))?;
            } else if let Some(on) = step.get("stop") {
                indices(on).into_iter().for_each(|i| servers[i].pause());
            } else if let Some(on) = step.get("resume") {
                let pids: Vec<_> = indices(on).into_iter().map(|i| servers[i].pid()).collect();
                let after = millis(step, "after_ms").unwrap_or_default();
                resumes.push(tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    for pid in pids.into_iter().flatten() {
                        let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
                        // SAFETY: kill(2) with a valid signal has no memory effects; the pid is
                        // the server's, which lives until the scenario resumes and stops it.
                        unsafe { libc::kill(pid, libc::SIGCONT) };
                    }
                }));
            } else if let Some(on) = step.get("kill") {
                indices(on).into_iter().for_each(|i| servers[i].kill9());
            } else if let Some(on) = step.get("restart_without_module") {
                for i in indices(on) {
                    servers[i].set_restart_without_module();
                    tokio::task::block_in_place(|| servers[i].restart());
                }
            } else if let Some(on) = step.get("del") {
                for i in indices(on) {
                    let _: i64 = servers[i].admin_cmd(&["DEL", key]).map_err(|e| at(e.to_string()))?;
                }
            } else if let Some(call) = step.get("acquire") {
                let expect = step["expect"].as_str().expect("expect");
                let within = millis(step, "within_ms").expect("within_ms");
                let not_before = millis(step, "not_before_ms").unwrap_or_default();
                let waits = millis(call, "wait_ms").unwrap_or_default() > Duration::ZERO;
                let started = Instant::now();
                let result = if waits {
                    under.locker().acquire(key).await
                } else {
                    under.locker().try_acquire(key).await
                };
                let took = started.elapsed();
                let got = outcome(&result);
                if got != expect || took > within || took < not_before {
                    return Err(at(format!(
                        "expected {expect} in {not_before:?}..={within:?}, got {got} after {took:?}"
                    )));
                }
                if let Ok(lease) = result {
                    if call.get("keep_alive").and_then(Json::as_bool) == Some(true) {
                        kept = Some(lease.keep_alive());
                    } else {
                        holders.push(lease);
                    }
                }
            } else if step.get("lost").is_some() {
                let within = millis(step, "within_ms").expect("within_ms");
                let lease = kept.as_ref().ok_or_else(|| at("no kept lease to lose".into()))?;
                let started = Instant::now();
                tokio::time::timeout(within, lease.lost())
                    .await
                    .map_err(|_| at(format!("no loss signalled within {within:?}")))?;
                let took = started.elapsed();
                if took > within {
                    return Err(at(format!("loss signalled after {took:?}")));
                }
            } else if let Some(on) = step.get("free") {
                let within = millis(step, "within_ms").expect("within_ms");
                let deadline = Instant::now() + within;
                for i in indices(on) {
                    while held(&servers[i], key, engine) {
                        if Instant::now() >= deadline {
                            return Err(at(format!("still held on server {i} after {within:?}")));
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            } else {
                panic!("step {n} is of a kind this runner does not know: {step}");
            }
        }
        Ok(())
    }
    .await;
    for resume in resumes {
        resume.abort();
    }
    servers.iter().for_each(Server::resume);
    drop(kept);
    drop(holders);
    result
}

/// Whether `key` is held on `server`, asked on its admin connection in the engine's own form.
fn held(server: &Server, key: &str, engine: Engine) -> bool {
    let reply: Value = match engine {
        Engine::Module => server.admin_cmd(&[STATUS_COMMAND.name, key]),
        Engine::Library => {
            let status = function(&STATUS_COMMAND).expect("STATUS has a function");
            server.admin_cmd(&["FCALL", status, "1", key])
        }
    }
    .unwrap_or_else(|e| panic!("STATUS on {}: {e}", server.addr()));
    decode_status(&reply).is_some_and(|st| st.held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_passes_the_client_fault_corpus() {
    let corpus = corpus();
    let key = corpus["key"].as_str().expect("key");
    let outcomes = corpus["outcomes"].as_object().expect("outcomes");
    let mut failures = Vec::new();
    let mut ran = 0;
    for scenario in corpus["scenarios"].as_array().expect("scenarios") {
        let name = scenario["name"].as_str().expect("name");
        for step in scenario["steps"].as_array().expect("steps") {
            if let Some(expect) = step.get("expect").and_then(Json::as_str) {
                assert!(outcomes.contains_key(expect), "{name}: outcome {expect:?} is not in `outcomes`");
            }
        }
        for engine in scenario["engines"].as_array().expect("engines") {
            let engine = Engine::named(engine.as_str().expect("engine name"));
            ran += 1;
            if let Err(why) = run(scenario, key, engine).await {
                failures.push(format!("{name} on {engine:?}: {why}"));
            }
        }
    }
    assert!(ran >= 30, "the corpus ran only {ran} scenario-engine pairs");
    assert!(failures.is_empty(), "{} of {ran} failed:\n{}", failures.len(), failures.join("\n"));
}
