//! Completions at the NetworkDirect level.
//!
//! ND results are polled, not waited for one at a time: [`results`] collects
//! the next `n` of a completion queue with a time limit, the loop every ND
//! test needs after posting.

use ndverbs_nd::{CompletionQueue, NdResultEntry, NdStatus, RequestType};
use std::time::{Duration, Instant};

/// How long [`results`] waits.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The next `n` results of `cq`, within [`LIMIT`] (the test fails with
/// what arrived otherwise).
#[track_caller]
pub fn results(cq: &CompletionQueue, n: usize) -> Vec<NdResultEntry> {
    let t0 = Instant::now();
    let mut got = Vec::with_capacity(n);
    let mut buf = [NdResultEntry {
        status: NdStatus::SUCCESS,
        bytes_transferred: 0,
        queue_pair_context: 0,
        request_context: 0,
        request_type: RequestType::Send,
    }; 8];
    while got.len() < n {
        let want = (n - got.len()).min(buf.len());
        let k = cq.get_results(&mut buf[..want]);
        got.extend_from_slice(&buf[..k]);
        if k == 0 {
            assert!(
                t0.elapsed() < LIMIT,
                "{} of {n} results within {LIMIT:?}: {got:?}",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    got
}
