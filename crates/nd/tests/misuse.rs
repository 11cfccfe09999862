//! API misuse, as property tests: random invalid arguments to the ND calls
//! (unknown flags, lengths, keys, addresses, queue depths, calls in the
//! wrong state) return a typed `NdError` with an ND status — and nothing
//! panics. One loopback adapter serves every case; its peer address (from the
//! test kit, like its own) has nobody on it.

mod common;

use common::{side, Side};
use ndverbs_nd::*;
use proptest::prelude::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

/// The adapter every case uses (opened by the first), and an address nobody
/// opened.
static WORLD: LazyLock<(Side, IpAddr)> = LazyLock::new(|| {
    let (own, nobody) = ndverbs_testkit::addr::pair_v4();
    (side(own), nobody)
});

/// The call failed with an ND error status (not success, not a panic).
fn failed<T: std::fmt::Debug>(r: NdResult<T>) -> bool {
    match r {
        Ok(_) => false,
        Err(e) => e.status != NdStatus::SUCCESS,
    }
}

/// An overlapped call that fails: at once, or its request completes with an
/// error status (within a second).
fn fails_pending<T: std::fmt::Debug + Send + Clone + 'static>(r: NdResult<NdPending<T>>) -> bool {
    match r {
        Err(e) => e.status != NdStatus::SUCCESS,
        Ok(mut p) => matches!(
            p.wait_timeout(std::time::Duration::from_secs(1)),
            Some(Err(_))
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Unknown registration flags and zero lengths are refused.
    #[test]
    fn register_rejects_bad_flags_and_lengths(flags in any::<u32>(), len in 0usize..3) {
        let w = &WORLD.0;
        let mr = w.ad.create_memory_region().unwrap();
        let flags = MrFlags::from_bits_retain(flags);
        let bad_flags = !MrFlags::all().contains(flags);
        let r = mr.register(if bad_flags { 64 } else { 0 }, flags).wait();
        prop_assert!(failed(r));
        let _ = len;
        // Deregistering what was never registered is an error too.
        prop_assert!(failed(mr.deregister().wait()));
    }

    /// Posting with unknown operation flags fails with an ND status.
    #[test]
    fn posts_reject_unknown_flags(flags in any::<u32>(), ctx in any::<u64>()) {
        let w = &WORLD.0;
        let known = OpFlags::SILENT_SUCCESS | OpFlags::READ_FENCE | OpFlags::SEND_AND_SOLICIT_EVENT;
        let flags = OpFlags::from_bits_retain(flags);
        prop_assume!(!known.contains(flags));
        let sge = NdSge::new(w.mr.address(), 8, w.mr.local_token());
        prop_assert!(failed(w.qp.send(ctx, &[sge], flags)));
        prop_assert!(failed(w.qp.write(ctx, &[sge], 0, 0, flags)));
        prop_assert!(failed(w.qp.read(ctx, &[sge], 0, 0, flags | OpFlags::from_bits_retain(0x8000_0000))));
    }

    /// Too many SGEs, oversize inline data: refused at post time.
    #[test]
    fn posts_reject_bad_sizes(n_sge in 3usize..40, inline in 65usize..5000) {
        let w = &WORLD.0;
        let sge = NdSge::new(w.mr.address(), 8, w.mr.local_token());
        let many = vec![sge; n_sge];
        prop_assert!(failed(w.qp.send(1, &many, OpFlags::empty())));
        prop_assert!(failed(w.qp.receive(1, &many)));
        prop_assert!(failed(w.qp.send_inline(1, &vec![0u8; inline], OpFlags::empty())));
    }

    /// Connector calls out of order, bad addresses and oversize private data.
    #[test]
    fn connector_misuse(port in any::<u16>(), host in 3u8..250, data_len in 57usize..400) {
        let (w, nobody) = &*WORLD;
        let c = w.ad.create_connector().unwrap();
        prop_assert!(fails_pending(c.complete_connect()));
        prop_assert!(fails_pending(c.accept(&w.qp, 1, 1, b"")));
        prop_assert!(fails_pending(c.disconnect()));
        prop_assert!(failed(c.get_peer_address()));
        prop_assert!(failed(c.reject(b"")));
        // An address that is not the adapter's.
        let foreign = SocketAddr::new(IpAddr::from([10, 99, host, 1]), port);
        prop_assert!(failed(c.bind(foreign)));
        let remote = SocketAddr::new(*nobody, port.max(1));
        prop_assert!(fails_pending(c.connect(&w.qp, remote, 1, 1, &vec![0u8; data_len])));
        let l = w.ad.create_listener().unwrap();
        prop_assert!(failed(l.bind(foreign)));
        prop_assert!(fails_pending(l.get_connection_request(&c)));
    }

    /// Queue sizes and CQ resizes out of range.
    #[test]
    fn bad_depths(depth in prop_oneof![Just(0u32), (1u32 << 20)..u32::MAX], sge in prop_oneof![Just(0u32), 1024u32..u32::MAX]) {
        let w = &WORLD.0;
        prop_assert!(failed(w.ad.create_completion_queue(depth)));
        prop_assert!(failed(w.ad.create_queue_pair(&w.cq, &w.cq, 0, QueuePairSizes::new(depth, sge).with_inline(u32::MAX))));
        prop_assert!(failed(w.cq.resize(depth)));
    }
}
