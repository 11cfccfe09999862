//! The QP counters of a NIC summed for a snapshot, a few hundred queue
//! pairs per hold of the core lock.
//!
//! A snapshot adds up every QP's counters (plus those of the QPs already
//! destroyed, `Tables::retired`). With 10,000 QPs that took 0.4–0.6 ms
//! under the core lock, twice a second while counters are published: long
//! enough for every packet and poll of that moment to wait on it. So the
//! QPNs are listed once and summed in chunks of [`CHUNK`], the lock let go
//! between chunks (about 15 µs each).
//!
//! Why the result is still a snapshot a reader may subtract from the next:
//! a QP created meanwhile is not in the list (counted next time, from its
//! start); a QP's counters only grow, so one read early counts a little
//! less than it will; and a QP destroyed meanwhile would be counted twice
//! (read in a chunk, then again in `retired`) or not at all — so if
//! `retired` changed since the list was taken, the sum is done again in one
//! hold, as it always was.
//!
//! **A sum is reused while nothing moved.** Counters are published twice a
//! second whether or not anything happens, and an idle process with
//! thousands of QPs spent most of its CPU summing them again. The core
//! counts the moments a QP's counters may change (`Core::qp_changes`: a
//! step that finished with work, a packet a QP sent, a control call); a
//! snapshot taken at the same count returns the last sum. Debug builds
//! check every reuse against a fresh sum, so a path that changes counters
//! without counting fails the tests that read counters twice.

use super::core::Core;
use super::Nic;
use ndverbs_proto::cm::CmCounters;
use ndverbs_proto::rc::Counters;
use std::sync::MutexGuard;

/// Queue pairs summed per hold of the core lock.
pub(super) const CHUNK: usize = 256;

impl Nic {
    /// Every QP's counters summed (destroyed ones included), and the CM's;
    /// the last sum if `reuse` and nothing moved since; `between` runs each
    /// time the lock is let go (tests put a destroy there).
    pub(super) fn counter_sum(
        &self,
        chunk: usize,
        reuse: bool,
        between: &mut dyn FnMut(),
    ) -> (Counters, CmCounters) {
        let chunk = chunk.max(1);
        let (changes, retired, listed) = {
            let mut c = self.counters_lock();
            if let Some(sum) = reusable_sum(&c).filter(|_| reuse) {
                return (sum, *c.cm.counters());
            }
            if c.tables.qps.len() + c.tables.ud.len() <= chunk {
                return whole_remembered(&mut c);
            }
            let rc = c.tables.qps.keys().map(|&q| Listed::Rc(q));
            let ud = c.tables.ud.keys().map(|&q| Listed::Ud(q));
            let listed = rc.chain(ud).collect::<Vec<_>>();
            (c.qp_changes, c.tables.retired, listed)
        };
        let mut sum = retired;
        let mut parts = listed.chunks(chunk);
        loop {
            between();
            let mut c = self.counters_lock();
            if c.tables.retired != retired {
                return whole_remembered(&mut c);
            }
            let Some(part) = parts.next() else {
                // Exact for the count it started at; a change meanwhile
                // moved the count, so the next snapshot sums again.
                c.last_sum = Some((changes, sum));
                return (sum, *c.cm.counters());
            };
            for q in part {
                match *q {
                    Listed::Rc(q) => {
                        if let Some(e) = c.tables.qps.get(&q) {
                            crate::stats::add(&mut sum, e.qp.counters());
                        }
                    }
                    Listed::Ud(q) => {
                        if let Some(e) = c.tables.ud.get(&q) {
                            crate::stats::add(&mut sum, &e.qp.counters().to_counters());
                        }
                    }
                }
            }
        }
    }

    /// The core lock for reading counters only: unlike `core_lock` it does
    /// not wake an idle waiter (nothing read here gives the engine work)
    /// nor count as a change.
    fn counters_lock(&self) -> MutexGuard<'_, Core> {
        self.shared.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The last sum, if it was taken at the core's present count of changes.
fn reusable_sum(c: &Core) -> Option<Counters> {
    let (at, sum) = c.last_sum?;
    if at != c.qp_changes {
        return None;
    }
    debug_assert_eq!(
        whole(c).0,
        sum,
        "a QP's counters changed without Core::qp_changes counting it"
    );
    Some(sum)
}

/// The sum in one hold of the lock, remembered.
fn whole_remembered(c: &mut Core) -> (Counters, CmCounters) {
    let (sum, cm) = whole(c);
    c.last_sum = Some((c.qp_changes, sum));
    (sum, cm)
}

/// A QP listed for a chunked sum, by table.
enum Listed {
    Rc(u32),
    Ud(u32),
}

/// The sum in one hold of the lock.
fn whole(c: &Core) -> (Counters, CmCounters) {
    let mut sum = c.tables.retired;
    for e in c.tables.qps.values() {
        crate::stats::add(&mut sum, e.qp.counters());
    }
    for e in c.tables.ud.values() {
        crate::stats::add(&mut sum, &e.qp.counters().to_counters());
    }
    (sum, *c.cm.counters())
}
