//! Identifiers: endpoint handles, local communication IDs, transaction IDs.
//!
//! * An [`EndpointId`] is this crate's handle for an endpoint. It is never
//!   reused, never goes on the wire, and stays valid (as an unknown id) after
//!   the endpoint is gone.
//! * A **local communication ID** names one connection attempt on the wire;
//!   the peer echoes it as its "remote comm ID" in every later message. It
//!   must be hard to guess (a blind attacker who guesses it can DREQ the
//!   connection) and must not be reused while an old connection with it may
//!   still be in a peer's tables. Linux uses an allocator index XOR a random
//!   value; we encrypt a counter with a keyed 32-bit Feistel permutation: as
//!   unpredictable as the key, and a permutation, so no value repeats until
//!   the counter wraps after 2^32 connections. 0 is never used (a REQ's REJ
//!   names "no comm ID" with 0).
//! * A **transaction ID** sits in the MAD header. Linux forms the TID of a
//!   REQ or DREQ as `(MAD agent hi_tid << 32) | low`, where `low` is the
//!   local comm ID *as its big-endian bytes read by a little-endian CPU*:
//!   the captures show comm ID `0x36f572c3` with TID `0x00000002c372f536`.
//!   [`form_tid`] reproduces that; REP, RTU, MRA and REJ echo the REQ's TID,
//!   DREP echoes the DREQ's.

use std::fmt;

/// Handle of one CM endpoint (listener or connection) of a [`CmAgent`](super::CmAgent).
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// let (mut a, _b) = agents();
/// let l1 = a.listen(1)?;
/// let l2 = a.listen(2)?;
/// assert_ne!(l1, l2);
/// assert_eq!(a.state(l1), Some(CmState::Listen));
/// a.destroy(Instant::ZERO, l1)?;
/// assert_eq!(a.state(l1), None); // gone: calls with it fail
/// assert_eq!(a.destroy(Instant::ZERO, l1), Err(CmError::UnknownEndpoint));
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u64);

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ep{}", self.0)
    }
}

/// The TID Linux (on a little-endian CPU) puts on a REQ or DREQ it originates.
pub fn form_tid(hi_tid: u32, local_comm_id: u32) -> u64 {
    (u64::from(hi_tid) << 32) | u64::from(local_comm_id.swap_bytes())
}

/// splitmix64 step: expands the seed into round keys.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Allocates local communication IDs: `feistel(counter)` with a secret key.
#[derive(Debug, Clone)]
pub(crate) struct CommIdAllocator {
    keys: [u32; 4],
    counter: u32,
}

impl CommIdAllocator {
    pub(crate) fn new(seed: u64) -> Self {
        let mut s = seed;
        let a = splitmix(&mut s);
        let b = splitmix(&mut s);
        CommIdAllocator {
            keys: [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32],
            counter: splitmix(&mut s) as u32,
        }
    }

    fn permute(&self, x: u32) -> u32 {
        let (mut l, mut r) = ((x >> 16) as u16, x as u16);
        for k in self.keys {
            let f = (u32::from(r) ^ k).wrapping_mul(0x9e37_79b1);
            let f = ((f >> 16) ^ f) as u16;
            (l, r) = (r, l ^ f);
        }
        (u32::from(l) << 16) | u32::from(r)
    }

    /// The next ID that is neither 0 nor `in_use`.
    pub(crate) fn next(&mut self, in_use: impl Fn(u32) -> bool) -> u32 {
        loop {
            let id = self.permute(self.counter);
            self.counter = self.counter.wrapping_add(1);
            if id != 0 && !in_use(id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tid_matches_linux_captures() {
        // rping_cm.txt: comm ID 0x36f572c3, TID 0x00000002c372f536.
        assert_eq!(form_tid(2, 0x36f5_72c3), 0x0000_0002_c372_f536);
        // ib_send_bw_R_cm.txt, the passive side's DREQ.
        assert_eq!(form_tid(2, 0xe1ad_981b), 0x0000_0002_1b98_ade1);
    }

    #[test]
    fn comm_ids_are_distinct_nonzero_and_seed_dependent() {
        let mut a = CommIdAllocator::new(1);
        let mut seen = HashSet::new();
        for _ in 0..100_000 {
            let id = a.next(|_| false);
            assert_ne!(id, 0);
            assert!(seen.insert(id));
        }
        let mut b = CommIdAllocator::new(2);
        let mut a = CommIdAllocator::new(1);
        let same = (0..64)
            .filter(|_| a.next(|_| false) == b.next(|_| false))
            .count();
        assert!(same < 2);
        // Skips what is in use.
        let mut c = CommIdAllocator::new(3);
        let first = c.clone().next(|_| false);
        assert_ne!(c.next(|x| x == first), first);
    }
}
