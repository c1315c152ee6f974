//! The shape of a contract case: a named sequence of requests on the case's own key, with
//! raw set-up commands (a string or list key for WRONGTYPE) and bounded sleeps between them.

use fencedlock_protocol::command::Command;

use crate::engines::Keys;

/// One argument after the key.
#[derive(Debug, Clone)]
pub enum Arg {
    /// These bytes.
    Lit(Vec<u8>),
    /// The highest fence this side replied so far in the case, plus this (may be negative):
    /// fences differ between engines, so RAISE's argument is relative to them.
    FencePlus(i64),
    /// The case's key (in a raw set-up command).
    Key,
}

/// One step of a case.
#[derive(Debug, Clone)]
pub enum Step {
    /// A contract request, compared between the engines.
    Call {
        command: Command,
        keys: Keys,
        args: Vec<Arg>,
        /// `Some(ms)`: the request carries `BLOCK ms`; whether the reply waited is compared too.
        timed: Option<u64>,
    },
    /// A plain command sent to both servers (set-up; must not fail).
    Raw(Vec<Arg>),
    /// A pause on both sides (after each side's previous step).
    Sleep(u64),
}

/// A named sequence of steps on its own key.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub key: Vec<u8>,
    pub steps: Vec<Step>,
}

impl Case {
    /// A case on the key `conformance:{name}` (every name is unique, so every key is fresh).
    pub fn new(name: impl Into<String>, steps: Vec<Step>) -> Case {
        let name = name.into();
        Case { key: format!("conformance:{name}").into_bytes(), name, steps }
    }

    /// A case of several lock keys on `{conformance:name}` and its members (the key with a
    /// suffix, [`member`], [`set`]): one hash tag, so every key is in the slot of one floor,
    /// as the library's `ACQUIREALL` needs.
    pub fn of_keys(name: impl Into<String>, steps: Vec<Step>) -> Case {
        let name = name.into();
        Case { key: format!("{{conformance:{name}}}").into_bytes(), name, steps }
    }

    /// The same case on another key (binary key bytes, the issue's `invoice:inv_72`).
    pub fn on_key(mut self, key: impl Into<Vec<u8>>) -> Case {
        self.key = key.into();
        self
    }
}

/// Argument bytes from anything byte-like.
pub fn lit(a: impl AsRef<[u8]>) -> Arg {
    Arg::Lit(a.as_ref().to_vec())
}

/// `command key args…` in the client's form (with the floor key).
pub fn call<A: AsRef<[u8]>>(command: Command, args: &[A]) -> Step {
    call_args(command, args.iter().map(lit).collect())
}

/// [`call`] with arguments built by the caller (e.g. [`Arg::FencePlus`]).
pub fn call_args(command: Command, args: Vec<Arg>) -> Step {
    Step::Call { command, keys: Keys::WithFloor, args, timed: None }
}

/// `command key args…` with numkeys 1 on the Functions side (as typed in redis-cli).
pub fn call_key_only<A: AsRef<[u8]>>(command: Command, args: &[A]) -> Step {
    Step::Call { command, keys: Keys::KeyOnly, args: args.iter().map(lit).collect(), timed: None }
}

/// `command` with no key at all (numkeys 0 on the Functions side).
pub fn call_keyless(command: Command) -> Step {
    Step::Call { command, keys: Keys::None, args: Vec::new(), timed: None }
}

/// `ACQUIREALL` of the case's key with each of `suffixes` (see [`Case::of_keys`]).
pub fn set<A: AsRef<[u8]>>(suffixes: &'static [&'static str], args: &[A]) -> Step {
    let command = fencedlock_protocol::command::ACQUIREALL;
    Step::Call { command, keys: Keys::Set(suffixes), args: args.iter().map(lit).collect(), timed: None }
}

/// `command` on the case's key with `suffix` (see [`Case::of_keys`]).
pub fn member<A: AsRef<[u8]>>(command: Command, suffix: &'static str, args: &[A]) -> Step {
    Step::Call { command, keys: Keys::Member(suffix), args: args.iter().map(lit).collect(), timed: None }
}

/// A request with `BLOCK block_ms` among `args`: whether the reply waited is compared too.
pub fn call_timed<A: AsRef<[u8]>>(command: Command, args: &[A], block_ms: u64) -> Step {
    Step::Call { command, keys: Keys::WithFloor, args: args.iter().map(lit).collect(), timed: Some(block_ms) }
}

/// A raw command; `KEY` in `words` stands for the case's key.
pub fn raw(words: &[&str]) -> Step {
    Step::Raw(words.iter().map(|w| if *w == KEY { Arg::Key } else { lit(w) }).collect())
}

/// The case's key in [`raw`].
pub const KEY: &str = "{KEY}";

/// A bounded pause.
pub fn sleep(ms: u64) -> Step {
    Step::Sleep(ms)
}
