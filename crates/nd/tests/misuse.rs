//! API misuse, as property tests: random invalid arguments to the ND calls
//! (unknown flags, lengths, keys, addresses, queue depths, calls in the
//! wrong state) end with the one ND status each case calls for — and
//! nothing panics. Posts go to a *connected* queue pair, so the only reason
//! one is refused is the argument under test. One connected pair of
//! loopback adapters serves every case; an address from the test kit that
//! nobody opened stands for a peer that is not there.

mod common;

use common::{connect_qps, side, status, Connection, Side};
use ndverbs_nd::*;
use proptest::prelude::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;
use std::time::Duration;

/// The connected pair every case uses (made by the first), with a spare
/// queue pair in INIT for the connector cases, and an address nobody opened.
struct World {
    /// The active side: its QP (16 × 2 SGEs, 64 bytes inline) is connected.
    a: Side,
    b: Side,
    _connection: Connection,
    spare: QueuePair,
    window: MemoryWindow,
    nobody: IpAddr,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let [own, peer, nobody] = ndverbs_testkit::addr::many_v4(3)[..] else {
        unreachable!()
    };
    let (a, b) = (side(own), side(peer));
    let connection = connect_qps((&a.ad, &a.qp), (&b.ad, &b.qp));
    // Connected: a good post goes through (and every case below posts
    // nothing that is accepted, so it stays that way).
    let buf = NdSge::new(b.mr.address(), 64, b.mr.local_token());
    b.qp.receive(0, &[buf]).unwrap();
    a.qp.send_inline(0, b"hello", OpFlags::empty()).unwrap();
    assert_eq!(a.cq.wait_result().unwrap().status, NdStatus::SUCCESS);
    let spare =
        a.ad.create_queue_pair(&a.cq, &a.cq, 0, QueuePairSizes::new(1, 1))
            .unwrap();
    let window = a.ad.create_memory_window().unwrap();
    World {
        a,
        b,
        _connection: connection,
        spare,
        window,
        nobody,
    }
});

/// The status an overlapped call ends with: at once, or when its request
/// completes (within a few seconds).
fn pending_status<T: Send + 'static>(r: NdResult<NdPending<T>>) -> NdStatus {
    match r {
        Err(e) => e.status,
        Ok(mut p) => match p.wait_timeout(Duration::from_secs(5)) {
            Some(r) => status(r),
            None => NdStatus::PENDING,
        },
    }
}

/// `flags` with the bits of `allowed` cleared and at least one other set.
fn bad(flags: u32, allowed: OpFlags) -> OpFlags {
    let extra = match flags & !allowed.bits() {
        0 => 0x8000_0000,
        extra => extra,
    };
    OpFlags::from_bits_retain(extra | (flags & allowed.bits()))
}

/// What Send and Write take.
const TO_PEER: OpFlags = OpFlags::SILENT_SUCCESS
    .union(OpFlags::READ_FENCE)
    .union(OpFlags::SEND_AND_SOLICIT_EVENT)
    .union(OpFlags::INLINE);
/// What Read and Invalidate take.
const ANY_REQUEST: OpFlags = OpFlags::SILENT_SUCCESS.union(OpFlags::READ_FENCE);
/// What Bind takes.
const BIND: OpFlags = ANY_REQUEST
    .union(OpFlags::ALLOW_READ)
    .union(OpFlags::ALLOW_WRITE);

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Registration lengths of 0 or beyond `MaxRegistrationSize` are
    /// `ND_INVALID_BUFFER_SIZE` (checked first), unknown flags
    /// `ND_INVALID_PARAMETER_3`; the rest registers, and deregisters once.
    #[test]
    fn register_rejects_bad_flags_and_lengths(
        flags in prop_oneof![any::<u32>(), (0u32..16).prop_map(|f| f | 0x8000_0000)],
        len in prop_oneof![Just(0usize), 1usize..8192, Just(usize::MAX), (1usize << 40) + 1..usize::MAX],
    ) {
        let w = &WORLD.a;
        let max = w.ad.query(ND_VERSION_2).unwrap().max_registration_size;
        let mr = w.ad.create_memory_region().unwrap();
        let flags = MrFlags::from_bits_retain(flags);
        let expected = if len == 0 || len > max {
            NdStatus::INVALID_BUFFER_SIZE
        } else if !MrFlags::all().contains(flags) {
            NdStatus::INVALID_PARAMETER_3
        } else {
            NdStatus::SUCCESS
        };
        prop_assert_eq!(status(mr.register(len, flags).wait()), expected);
        let registered = expected == NdStatus::SUCCESS;
        prop_assert_eq!(mr.len(), if registered { len } else { 0 });
        let deregistered = if registered { NdStatus::SUCCESS } else { NdStatus::INVALID_DEVICE_STATE };
        prop_assert_eq!(status(mr.deregister().wait()), deregistered);
        // Deregistering twice is an error too.
        prop_assert_eq!(status(mr.deregister().wait()), NdStatus::INVALID_DEVICE_STATE);
    }

    /// Flags a request does not take fail its post with the status naming
    /// the flags parameter — on a connected queue pair, where the same
    /// request with good flags would go.
    #[test]
    fn posts_reject_unknown_flags(flags in any::<u32>(), ctx in 0..=MAX_CONTEXT) {
        let w = &*WORLD;
        let qp = &w.a.qp;
        let sge = [NdSge::new(w.a.mr.address(), 8, w.a.mr.local_token())];
        let (addr, token) = (w.b.mr.address(), w.b.mr.remote_token());
        prop_assert_eq!(status(qp.send(ctx, &sge, bad(flags, TO_PEER))), NdStatus::INVALID_PARAMETER_4);
        prop_assert_eq!(status(qp.send_inline(ctx, b"x", bad(flags, TO_PEER))), NdStatus::INVALID_PARAMETER_4);
        prop_assert_eq!(status(qp.write(ctx, &sge, addr, token, bad(flags, TO_PEER))), NdStatus::INVALID_PARAMETER_6);
        prop_assert_eq!(status(qp.write_inline(ctx, b"x", addr, token, bad(flags, TO_PEER))), NdStatus::INVALID_PARAMETER_6);
        prop_assert_eq!(status(qp.read(ctx, &sge, addr, token, bad(flags, ANY_REQUEST))), NdStatus::INVALID_PARAMETER_6);
        prop_assert_eq!(
            status(qp.bind(ctx, &w.a.mr, &w.window, w.a.mr.address(), 8, bad(flags, BIND))),
            NdStatus::INVALID_PARAMETER_6
        );
        prop_assert_eq!(status(qp.invalidate(ctx, &w.window, bad(flags, ANY_REQUEST))), NdStatus::INVALID_PARAMETER_3);
        // A good request with a context beyond 61 bits.
        prop_assert_eq!(status(qp.send(ctx | (1 << 63), &sge, OpFlags::empty())), NdStatus::INVALID_PARAMETER_1);
    }

    /// Too many SGEs, more inline data than the QP's inline size, a message
    /// beyond `MaxTransferLength`: refused at post time, on a connected
    /// queue pair.
    #[test]
    fn posts_reject_bad_sizes(n_sge in 3usize..40, inline in 65usize..5000) {
        let w = &*WORLD;
        let qp = &w.a.qp;
        let sge = NdSge::new(w.a.mr.address(), 8, w.a.mr.local_token());
        let many = vec![sge; n_sge];
        let (addr, token) = (w.b.mr.address(), w.b.mr.remote_token());
        let none = OpFlags::empty();
        prop_assert_eq!(status(qp.send(1, &many, none)), NdStatus::DATA_OVERRUN);
        prop_assert_eq!(status(qp.write(1, &many, addr, token, none)), NdStatus::DATA_OVERRUN);
        prop_assert_eq!(status(qp.read(1, &many, addr, token, none)), NdStatus::DATA_OVERRUN);
        prop_assert_eq!(status(qp.receive(1, &many)), NdStatus::DATA_OVERRUN);
        prop_assert_eq!(status(qp.send_inline(1, &vec![0u8; inline], none)), NdStatus::BUFFER_OVERFLOW);
        prop_assert_eq!(status(qp.write_inline(1, &vec![0u8; inline], addr, token, none)), NdStatus::BUFFER_OVERFLOW);
        // INLINE takes any number of SGEs, but not more bytes than fit.
        let big = [NdSge::new(w.a.mr.address(), inline as u32, w.a.mr.local_token())];
        prop_assert_eq!(status(qp.send(1, &big, OpFlags::INLINE)), NdStatus::BUFFER_OVERFLOW);
        prop_assert_eq!(status(qp.write(1, &big, addr, token, OpFlags::INLINE)), NdStatus::BUFFER_OVERFLOW);
        // Two SGEs (the QP's limit) adding up to more than 2^31 bytes.
        let max = w.a.ad.query(ND_VERSION_2).unwrap().max_transfer_length;
        let half = max / 2 + 1 + inline as u32;
        let huge = [NdSge::new(w.a.mr.address(), half, w.a.mr.local_token()); 2];
        prop_assert_eq!(status(qp.send(1, &huge, none)), NdStatus::BUFFER_OVERFLOW);
        prop_assert_eq!(status(qp.read(1, &huge, addr, token, none)), NdStatus::BUFFER_OVERFLOW);
    }

    /// Connector calls out of order, bad addresses and oversize private data.
    #[test]
    fn connector_misuse(port in any::<u16>(), host in 3u8..250, data_len in 57usize..400) {
        let w = &*WORLD;
        let ad = &w.a.ad;
        let c = ad.create_connector().unwrap();
        prop_assert_eq!(pending_status(c.complete_connect()), NdStatus::CONNECTION_INVALID);
        prop_assert_eq!(pending_status(c.disconnect()), NdStatus::CONNECTION_INVALID);
        prop_assert_eq!(pending_status(c.notify_disconnect()), NdStatus::CONNECTION_INVALID);
        prop_assert_eq!(status(c.get_peer_address()), NdStatus::CONNECTION_INVALID);
        prop_assert_eq!(status(c.get_local_address()), NdStatus::CONNECTION_INVALID);
        prop_assert_eq!(status(c.reject(b"")), NdStatus::CONNECTION_INVALID);
        // An address that is not the adapter's.
        let foreign = SocketAddr::new(IpAddr::from([10, 99, host, 1]), port);
        prop_assert_eq!(status(c.bind(foreign)), NdStatus::INVALID_ADDRESS);
        let remote = SocketAddr::new(w.nobody, port.max(1));
        let data = vec![0u8; data_len];
        prop_assert_eq!(pending_status(c.connect(&w.spare, remote, 1, 1, &data)), NdStatus::INVALID_BUFFER_SIZE);
        prop_assert_eq!(
            pending_status(c.accept(&w.spare, 1, 1, &vec![0u8; data_len + MAX_CALLEE_DATA])),
            NdStatus::INVALID_BUFFER_SIZE
        );
        let l = ad.create_listener().unwrap();
        prop_assert_eq!(status(l.bind(foreign)), NdStatus::INVALID_ADDRESS);
        prop_assert_eq!(status(l.listen(1)), NdStatus::INVALID_DEVICE_STATE);
        prop_assert_eq!(status(l.get_local_address()), NdStatus::INVALID_DEVICE_STATE);
        prop_assert_eq!(pending_status(l.get_connection_request(&c)), NdStatus::INVALID_PARAMETER);
    }

    /// Queue sizes and CQ resizes out of range.
    #[test]
    fn bad_depths(
        cq_depth in prop_oneof![Just(0u32), Just(1 << 20 | 1), (1u32 << 20) + 1..u32::MAX],
        qp_depth in prop_oneof![Just(16_385u32), 16_385u32..u32::MAX],
        sge in prop_oneof![Just(33u32), 33u32..u32::MAX],
    ) {
        let w = &WORLD.a;
        let info = w.ad.query(ND_VERSION_2).unwrap();
        let too_big = if cq_depth == 0 { NdStatus::INVALID_PARAMETER } else { NdStatus::INSUFFICIENT_RESOURCES };
        prop_assert!(cq_depth == 0 || cq_depth > info.max_completion_queue_depth);
        prop_assert_eq!(status(w.ad.create_completion_queue(cq_depth)), too_big);
        prop_assert_eq!(status(w.cq.resize(cq_depth)), NdStatus::INVALID_PARAMETER);
        prop_assert!(qp_depth > info.max_receive_queue_depth && sge > info.max_receive_sge);
        let ok = QueuePairSizes::new(1, 1);
        for sizes in [
            QueuePairSizes { receive_queue_depth: qp_depth, ..ok },
            QueuePairSizes { initiator_queue_depth: qp_depth, ..ok },
            QueuePairSizes { max_receive_sge: sge, ..ok },
            QueuePairSizes { max_initiator_sge: sge, ..ok },
            ok.with_inline(info.max_inline_data_size + 1 + sge),
        ] {
            prop_assert_eq!(status(w.ad.create_queue_pair(&w.cq, &w.cq, 0, sizes)), NdStatus::INVALID_PARAMETER);
        }
        prop_assert_eq!(status(w.ad.create_shared_receive_queue(qp_depth, 1, 0)), NdStatus::INVALID_PARAMETER);
        prop_assert_eq!(status(w.ad.create_shared_receive_queue(1, sge, 0)), NdStatus::INVALID_PARAMETER);
    }
}
