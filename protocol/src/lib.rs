//! The wire contract of the fencedlock module, defined once.
//!
//! The module parses and answers these commands; the client crate, the CLI and the tests send
//! them and decode the replies. Each fact lives here and nowhere else: a command's name and
//! arguments ([`command`]), each request as one type that both builds and parses it ([`Acquire`],
//! [`Renew`], [`Release`], [`Raise`], and the one token, ttl and decimal rule in [`request`]), the
//! limits both sides check ([`limits`]), the configs ([`config`]), the keys the module writes
//! itself ([`cluster`]), how lock keys and fencedlock's other keys look in a keyspace
//! ([`keyspace`]), the Functions library that serves the same commands without the
//! module ([`functions`]), the `STATUS` reply shapes ([`LockStatus`], [`SemaphoreStatus`]),
//! the error replies ([`ReplyError`]), what a failed request means ([`cause`]) and Redlock's
//! designated master for a key ([`ranking`]).
//!
//! This crate must stay free of dependencies and I/O: the module (a `cdylib` loaded into
//! Redis) and the async client share it without sharing anything else.

#![warn(missing_docs)]

pub mod cause;
pub mod cluster;
pub mod command;
pub mod config;
pub mod contract;
pub mod epoch;
mod error;
pub mod functions;
pub mod key;
pub mod keyspace;
pub mod limits;
pub mod periodic;
pub mod ranking;
pub mod request;
mod sha1;
mod status;

pub use command::{Arg, ArgKind, Command, Opt};
pub use error::ReplyError;
pub use request::{Acquire, AcquireAll, Raise, Release, Renew, Request};
pub use status::{LockStatus, PermitReply, PermitStatus, SemaphoreStatus, StatusError};
