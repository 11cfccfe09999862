//! The agent's timer queue: one deadline per endpoint at most.
//!
//! An endpoint waits for at most one thing at a time — the answer to the one
//! message it retransmits (REQ, REP or DREQ), or the end of time-wait — so a
//! single deadline per endpoint suffices. The queue orders `(deadline, id)`
//! pairs so that [`poll_timeout`](super::CmAgent::poll_timeout) is the first
//! element and expiry walks them in time order (ties by endpoint id: the run
//! is deterministic).

use super::ids::EndpointId;
use crate::time::Instant;
use std::collections::{BTreeSet, HashMap};

/// Deadlines by time, with the reverse index needed to cancel one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timers {
    by_time: BTreeSet<(Instant, EndpointId)>,
    by_ep: HashMap<EndpointId, Instant>,
}

impl Timers {
    /// Arms (or re-arms) `ep`'s deadline.
    pub(crate) fn set(&mut self, ep: EndpointId, at: Instant) {
        self.cancel(ep);
        self.by_time.insert((at, ep));
        self.by_ep.insert(ep, at);
    }

    /// Disarms `ep`'s deadline, if any.
    pub(crate) fn cancel(&mut self, ep: EndpointId) {
        if let Some(at) = self.by_ep.remove(&ep) {
            self.by_time.remove(&(at, ep));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|&(t, _)| t)
    }

    /// Removes and returns the earliest endpoint whose deadline is `<= now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<EndpointId> {
        let &(t, ep) = self.by_time.first()?;
        if t > now {
            return None;
        }
        self.by_time.remove(&(t, ep));
        self.by_ep.remove(&ep);
        Some(ep)
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.by_time.clear();
        self.by_ep.clear();
    }
}
