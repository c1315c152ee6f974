//! The acquisition layer: how a lease is taken, kept and given back on the locker's nodes.
//!
//! The [`coordinator`] alone knows the topology (one server, replica-confirmed or not, or a
//! Redlock majority) and picks the round or waiting step to run: the plain [`rounds`] (with
//! fenced Redlock's [`fenced`] raise step), the replica-confirmed round ([`confirm`]), or a
//! step that [`waiting`] on the server. The [`lease`] holds what a grant gave and the claim
//! that releases it; [`trailing`] keeps a release left behind from being overtaken; [`round`]
//! counts the votes of one round; [`terms`] builds each request.

pub(crate) mod confirm;
pub(crate) mod coordinator;
pub(crate) mod fenced;
pub(crate) mod lease;
pub(crate) mod round;
pub(crate) mod rounds;
pub(crate) mod terms;
pub(crate) mod trailing;
pub(crate) mod waiting;
