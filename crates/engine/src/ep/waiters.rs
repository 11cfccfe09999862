//! The completion handles of endpoint requests, kept by the core beside the
//! machine: the machine names requests by [`RequestId`] and says how they
//! ended ([`Outcome`]); this table turns that into the application's
//! [`EpPending`] results, delivered at the end of the step.

use super::machine::{Outcome, RequestId};
use super::types::{ConnectInfo, EpError, EpPending, RequestInfo, SidrInfo};
use crate::pending::{pending, Completion};
use std::collections::HashMap;

type Done<T> = Completion<Result<T, EpError>>;

/// Completions waiting until the step's packets are out.
pub(crate) type Later = Vec<Box<dyn FnOnce() + Send>>;

/// One request's completion handle, typed by what it returns.
enum Waiter {
    Connect(Done<ConnectInfo>),
    Request(Done<RequestInfo>),
    Done(Done<()>),
    Resolve(Done<SidrInfo>),
}

/// A handle dropped without an outcome (a request the machine lost) reads
/// as an internal error: never as device removal or any other state a
/// caller would act on.
fn lost<T>() -> Result<T, EpError> {
    Err(EpError::Lost)
}

/// Request id → completion handle.
#[derive(Default)]
pub(crate) struct Waiters(HashMap<RequestId, Waiter>);

impl Waiters {
    /// The pending result of Connect request `id`.
    pub(crate) fn connect(&mut self, id: RequestId) -> EpPending<ConnectInfo> {
        let (p, done) = pending(lost);
        self.0.insert(id, Waiter::Connect(done));
        p
    }

    /// The pending result of GetConnectionRequest `id`.
    pub(crate) fn request(&mut self, id: RequestId) -> EpPending<RequestInfo> {
        let (p, done) = pending(lost);
        self.0.insert(id, Waiter::Request(done));
        p
    }

    /// The pending result of request `id` that returns nothing.
    pub(crate) fn done(&mut self, id: RequestId) -> EpPending<()> {
        let (p, done) = pending(lost);
        self.0.insert(id, Waiter::Done(done));
        p
    }

    /// Queues request `id`'s completion with `outcome` on `later`.
    pub(crate) fn resolve(&mut self, id: RequestId) -> EpPending<SidrInfo> {
        let (p, done) = pending(lost);
        self.0.insert(id, Waiter::Resolve(done));
        p
    }

    pub(crate) fn complete(&mut self, id: RequestId, outcome: Outcome, later: &mut Later) {
        let Some(w) = self.0.remove(&id) else {
            return;
        };
        match (w, outcome) {
            (Waiter::Connect(d), Outcome::Connect(v)) => {
                later.push(Box::new(move || d.complete(v)))
            }
            (Waiter::Request(d), Outcome::Request(v)) => {
                later.push(Box::new(move || d.complete(v)))
            }
            (Waiter::Done(d), Outcome::Done(v)) => later.push(Box::new(move || d.complete(v))),
            (Waiter::Resolve(d), Outcome::Resolve(v)) => {
                later.push(Box::new(move || d.complete(v)))
            }
            // A kind mismatch is a machine bug: the handle drops and reads
            // as lost rather than hanging.
            (w, _) => later.push(Box::new(move || drop(w))),
        }
    }
}
