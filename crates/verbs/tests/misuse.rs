//! API misuse, as property tests: invalid arguments to every public call of
//! `ndverbs-verbs` return a typed error (the variant is asserted, not just
//! `is_err`), or — where rdma-core and rxe accept the post and fail the
//! work request — a completion with the error status rxe gives; nothing
//! panics. Two loopback devices (on addresses from the test kit) serve most
//! cases; the removal case opens its own.
//!
//! The public calls and where they are misused:
//!
//! | call | misuse (expected outcome) |
//! |---|---|
//! | `Device::open`, `open_with` | address not on this host (`AddressNotAvailable`), address already open (`AddressInUse`) |
//! | `Device::query`, `gid`, `progress_mode`, `progress`, `is_removed`, `stats`, `publish_stats`, `capture_path` | no arguments: called after removal, must not panic |
//! | `Device::set_capture` | unwritable path (`Io`); after removal |
//! | `Device::alloc_pd` | after removal (`DeviceRemoved`) |
//! | `Device::create_cq` | depth 0 or above `max_cqe` (`InvalidArgument`) |
//! | `Device::remove` | twice; then every call below (`DeviceRemoved`) |
//! | `Pd::reg_mr` | length 0 (`InvalidArgument`, "empty"), above `LIMITS.max_mr_size` (`InvalidArgument`, "largest registration"), remote write/atomic without local write (`InvalidArgument`, "local write") |
//! | `Pd::reg_mr_raw` | length 0 (`InvalidArgument`, "empty"), above `LIMITS.max_mr_size` |
//! | `Pd::alloc_mw`, `create_qp`, `create_srq`, `device` | after removal; bad sizes below |
//! | `Pd::create_qp` | send/receive depths 0 or above `max_qp_wr`, SGE counts or inline size above the limits (`InvalidArgument`); a CQ or SRQ of another device (`InvalidArgument`, as `ibv_create_qp`'s EINVAL) |
//! | `Pd::create_srq` | depth or SGE count 0 or above the limits (`InvalidArgument`) |
//! | `Cq::resize` | 0 or above `max_cqe` (`InvalidArgument`), fewer than queued (`Overflow`) |
//! | `Cq::poll`, `poll_one`, `wait_one`, `notify`, `cancel_notifies`, `req_notify`, `ack_events`, `fd`, `len`, `is_empty`, `depth`, `overflowed`, `device` | empty output slice, zero timeout; after removal (`wait_one` and `notify`: `DeviceRemoved`) |
//! | `Mr::read`, `write`, `to_vec` | ranges past the end, offsets and lengths near `usize::MAX` (`Access`, `AccessError::OutOfBounds`) |
//! | `Mr::sge`, `lkey`, `rkey`, `addr`, `len`, `is_empty`, `access`, `as_ptr` | accessors; a stale or out-of-range SGE is misused at post time (below) |
//! | `Mr::deregister` | with a window bound (`Err((mr, Busy))`, the region still usable); after removal (works: cleanup); dropping the handle with a window bound kills the region's keys at once, the window's grant lives until invalidated |
//! | `Mr::rereg_raw` | rights refused, a PD of another device (`InvalidArgument`), a window bound (`Busy`): `Err((mr, _))`, the region unchanged and still reachable (`tests/rereg.rs`) |
//! | `Mw::bind` | region of another PD (`Access`, `PdMismatch`), range outside the region (`Access`, `OutOfBounds`), a right the region lacks (`Access`, `NoPermission`), region of another device (`InvalidArgument`) |
//! | `Mw::invalidate`, `rkey` | twice; after removal (`DeviceRemoved`) |
//! | `Qp::modify`, `to_error` | random walks of transitions and attribute masks: transitions the IBTA forbids (RTS before RTR, …) give `InvalidState` with `ModifyError::IllegalTransition`, missing or extra attributes `MissingAttribute`/`UnexpectedAttribute`, values out of range `InvalidValue`, a wrong `cur_qp_state` `CurrentStateMismatch`; the state never changes on an error |
//! | `Qp::post_send` | in RESET/INIT/RTR (`InvalidState`, `PostError::InvalidState`); in ERR accepted and flushed (`WrFlushErr`, as rxe); too many SGEs (`TooManySges`), inline too large (`InlineTooLarge`), inline with SGEs or on READ/atomics (`InlineNotAllowed`), atomic not 8 bytes (`AtomicLength`), more than 2^31 bytes (`MessageTooLong`), queue full (`QueueFull`, kind `QueueFull`); an L_Key of another PD, deregistered, unknown or out of range: accepted, completes `LocProtErr` (rxe: `IBV_WC_LOC_PROT_ERR`), QP to ERR; an R_Key of another PD or out of range: `RemAccessErr` |
//! | `Qp::post_recv` | in RESET (`PostError::InvalidState`), too many SGEs, queue full; on a QP with an SRQ (`InvalidArgument`); an L_Key of another PD: the receive completes `LocProtErr` when a SEND lands in it |
//! | `Qp::query`, `counters`, `qpn`, `state` | after removal (`DeviceRemoved`) |
//! | `Srq::post_recv` | too many SGEs (`TooManySges`), queue full (`QueueFull`); after removal |
//! | `Endpoint::new`, `id`, `device`, `info` | after removal (`DeviceRemoved`) |
//! | `Endpoint::cancel` | after removal (works: cleanup) |
//! | `Endpoint::listen` | twice, or on a port already listened on (`Busy`), on a connecting endpoint (`Busy`) |
//! | `Endpoint::get_request` | on an endpoint that is not listening (`InvalidArgument`); into an endpoint of another device (`InvalidArgument`) |
//! | `Endpoint::connect` | twice (`Busy`), on a listener (`Busy`), with a destroyed QP (`NotFound`), with too much private data (completes `InvalidArgument` with `CmError::PrivateDataTooLong`) |
//! | `Endpoint::complete_connect`, `accept` | without a REP or a request (completes `InvalidState`, as rdma_cm's EINVAL) |
//! | `Endpoint::reject` | without a request (`InvalidArgument`) |
//! | `Endpoint::disconnect`, `notify_disconnect` | before any connection (`NotConnected`) |
//! | `Endpoint::cancel` | with nothing pending (Ok, nothing happens) |
//! | `QpInitAttr::new`, `QpId::from` | constructors |

use ndverbs_proto::cm::CmError;
use ndverbs_testkit::{addr, verbs as kit, verbs::wait_wc as one};
use ndverbs_verbs::*;
use proptest::prelude::*;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

/// Cases per property; `PROPTEST_CASES` overrides.
fn cases(n: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n)
}

const T: Duration = Duration::from_secs(10);

/// The world's two device addresses and a third that nobody opens: where
/// QPs that must never reach a peer point.
fn addrs() -> (IpAddr, IpAddr, IpAddr) {
    static A: OnceLock<Vec<IpAddr>> = OnceLock::new();
    let v = A.get_or_init(|| addr::many_v4(3));
    (v[0], v[1], v[2])
}

struct World {
    a: Device,
    b: Device,
    pa: Pd,
    pb: Pd,
    cqa: Cq,
    cqb: Cq,
    /// Regions: A's first PD, A's second PD, B's PD (all rights, 64 KiB).
    ma: Mr,
    ma2: Mr,
    mb: Mr,
    /// A region of B's second PD.
    mb2: Mr,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let a = Device::open(addrs().0).unwrap();
        let b = Device::open(addrs().1).unwrap();
        let pa = a.alloc_pd().unwrap();
        let pa2 = a.alloc_pd().unwrap();
        let pb = b.alloc_pd().unwrap();
        let reg = |pd: &Pd| pd.reg_mr(64 << 10, Access::ALL).unwrap();
        let pb2 = b.alloc_pd().unwrap();
        World {
            mb2: reg(&pb2),
            ma: reg(&pa),
            ma2: reg(&pa2),
            mb: reg(&pb),
            cqa: a.create_cq(4096).unwrap(),
            cqb: b.create_cq(4096).unwrap(),
            a,
            b,
            pa,
            pb,
        }
    })
}

/// The error inside `r`, or a description of what came instead.
fn verbs_err<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<Error, String> {
    match r {
        Err(e) => Ok(e),
        other => Err(format!("expected an error, got {other:?}")),
    }
}

/// The kind of the error inside `r`.
fn kind<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<ErrorKind, String> {
    Ok(verbs_err(r)?.kind())
}

fn post_err<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<PostError, String> {
    let e = verbs_err(r)?;
    let p = e
        .post_error()
        .ok_or(format!("expected a post error, got {e:?}"))?;
    // The kind follows the rule broken.
    let want = match p {
        PostError::InvalidState(_) => ErrorKind::InvalidState,
        PostError::QueueFull(_) => ErrorKind::QueueFull,
        _ => ErrorKind::InvalidArgument,
    };
    if e.kind() != want {
        return Err(format!("{p:?} with kind {:?}", e.kind()));
    }
    Ok(p)
}

fn modify_err<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<ModifyError, String> {
    let e = verbs_err(r)?;
    e.modify_error()
        .ok_or(format!("expected a modify error, got {e:?}"))
}

/// The refused access inside `r` (kind `Access`).
fn access_err<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<AccessError, String> {
    let e = verbs_err(r)?;
    match (e.kind(), e.access_error()) {
        (ErrorKind::Access, Some(a)) => Ok(a),
        _ => Err(format!("expected an access error, got {e:?}")),
    }
}

/// An `InvalidArgument` whose message mentions `what`.
fn invalid<T: std::fmt::Debug>(r: Result<T>, what: &str) -> std::result::Result<(), String> {
    let e = verbs_err(r)?;
    if e.kind() == ErrorKind::InvalidArgument && e.to_string().contains(what) {
        Ok(())
    } else {
        Err(format!(
            "expected an invalid argument about {what:?}, got {e:?}"
        ))
    }
}

/// A QP with its own CQ (so cases do not see each other's completions).
fn qp_on(pd: &Pd, depth: u32) -> (Qp, Cq) {
    let cq = pd.device().create_cq(1024).unwrap();
    let mut init = QpInitAttr::new(&cq, &cq);
    init.caps.max_send_wr = depth;
    init.max_recv_wr = depth;
    let qp = pd.create_qp(&init).unwrap();
    (qp, cq)
}

/// The connections of these tests: both PSNs 0x100, a short ACK timeout.
fn rc() -> kit::RcParams {
    kit::RcParams {
        sq_psn: 0x100,
        rq_psn: 0x100,
        timeout: 10,
        ..kit::RcParams::default()
    }
}

fn to_err(qp: &Qp) {
    let (a, m) = rc().init();
    qp.modify(&a, m).unwrap();
    qp.to_error().unwrap();
    assert_eq!(qp.state(), QpState::Err);
}

/// A connected pair: a QP in `pa`'s PD on A, one in B's PD, both in RTS.
fn pair(pa: &Pd) -> ((Qp, Cq), (Qp, Cq)) {
    let w = world();
    let (qa, ca) = qp_on(pa, 64);
    let (qb, cb) = qp_on(&w.pb, 64);
    kit::connect_qps(&qa, w.a.query().addr, &qb, w.b.query().addr, &rc());
    ((qa, ca), (qb, cb))
}

/// Every QP state, for strategies.
const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

/// Every attribute mask bit.
const MASKS: [AttrMask; 17] = [
    AttrMask::STATE,
    AttrMask::CUR_STATE,
    AttrMask::ACCESS_FLAGS,
    AttrMask::PKEY_INDEX,
    AttrMask::PORT,
    AttrMask::AV,
    AttrMask::PATH_MTU,
    AttrMask::TIMEOUT,
    AttrMask::RETRY_CNT,
    AttrMask::RNR_RETRY,
    AttrMask::RQ_PSN,
    AttrMask::MAX_QP_RD_ATOMIC,
    AttrMask::MIN_RNR_TIMER,
    AttrMask::SQ_PSN,
    AttrMask::MAX_DEST_RD_ATOMIC,
    AttrMask::DEST_QPN,
    AttrMask::UDP_SPORT,
];

/// The IBTA transitions (as rxe and this stack implement them; RESET → ERR
/// is refused).
fn legal(from: QpState, to: QpState) -> bool {
    use QpState::*;
    match (from, to) {
        (_, Reset) => true,
        (Reset, Err) => false,
        (_, Err) => true,
        (Reset, Init) | (Init, Init) | (Init, Rtr) | (Rtr, Rts) => true,
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) | (Rts, Sqd) | (Sqd, Sqd) => true,
        _ => false,
    }
}

/// One step of a modify walk: a target state, and either the attributes
/// that transition needs (valid values) or a random mask with random values.
#[derive(Debug, Clone)]
struct Step {
    to: QpState,
    proper: bool,
    mask_bits: Vec<usize>,
    cur: QpState,
    values: [u32; 8],
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::sample::select(STATES.to_vec()),
        any::<bool>(),
        prop::collection::vec(0..MASKS.len(), 0..6),
        prop::sample::select(STATES.to_vec()),
        any::<[u32; 8]>(),
    )
        .prop_map(|(to, proper, mask_bits, cur, values)| Step {
            to,
            proper,
            mask_bits,
            cur,
            values,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), .. ProptestConfig::default() })]

    /// CQ depths out of range, resizes out of range or below what is queued.
    #[test]
    fn cq_depths_and_resizes(
        bad_depth in prop_oneof![Just(0u32), (LIMITS.max_cqe + 1)..=u32::MAX],
        good_depth in 1u32..64,
        queued in 1usize..8,
    ) {
        let w = world();
        let e = kind(w.a.create_cq(bad_depth)).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, ErrorKind::InvalidArgument);
        let cq = w.a.create_cq(good_depth).unwrap();
        prop_assert_eq!(kind(cq.resize(bad_depth)), Ok(ErrorKind::InvalidArgument));
        // Queue flush completions: receives posted on a QP in ERR.
        let mut init = QpInitAttr::new(&cq, &cq);
        init.max_recv_wr = 16;
        let qp = w.pa.create_qp(&init).unwrap();
        to_err(&qp);
        for i in 0..queued {
            qp.post_recv(RecvWr::new(i as u64, vec![w.ma.sge(0, 64)])).unwrap();
        }
        let t0 = std::time::Instant::now();
        while cq.len() < queued.min(good_depth as usize) {
            prop_assert!(t0.elapsed() < T, "flushes did not arrive");
            std::thread::sleep(Duration::from_millis(1));
        }
        let n = cq.len();
        if n > 1 {
            let e = verbs_err(cq.resize(n as u32 - 1)).map_err(TestCaseError::fail)?;
            prop_assert_eq!(e.kind(), ErrorKind::Overflow);
            prop_assert!(e.to_string().contains(&format!("{n} completions queued")), "{e}");
        }
        prop_assert!(cq.resize(n.max(1) as u32).is_ok());
        let mut out = [];
        prop_assert_eq!(cq.poll(&mut out), 0);
        let mut got = 0;
        while cq.poll_one().is_some() {
            got += 1;
        }
        prop_assert_eq!(got, n);
        prop_assert!(cq.wait_one(Duration::ZERO).unwrap().is_none());
    }

    /// Zero, huge, and remote-write-without-local-write registrations.
    #[test]
    fn registrations(
        huge in prop_oneof![
            Just(LIMITS.max_mr_size as usize + 1),
            (LIMITS.max_mr_size as usize + 1)..=usize::MAX,
        ],
        bits in 0u32..16,
    ) {
        let w = world();
        invalid(w.pa.reg_mr(0, Access::ALL), "empty").map_err(TestCaseError::fail)?;
        // Beyond the device's limit: refused before anything is allocated.
        invalid(w.pa.reg_mr(huge, Access::LOCAL_WRITE), "largest registration").map_err(TestCaseError::fail)?;
        let p = std::ptr::NonNull::<u8>::dangling();
        // SAFETY: refused before the memory is looked at.
        invalid(unsafe { w.pa.reg_mr_raw(p, huge, Access::LOCAL_WRITE) }, "largest registration").map_err(TestCaseError::fail)?;
        let access = Access::from_bits(bits).unwrap();
        let r = w.pa.reg_mr(64, access);
        let needs_local = access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
        if needs_local && !access.contains(Access::LOCAL_WRITE) {
            invalid(r, "local write").map_err(TestCaseError::fail)?;
        } else {
            let mr = r.unwrap();
            prop_assert_eq!(mr.access(), access);
            prop_assert!(mr.deregister().is_ok());
        }
        let p = std::ptr::NonNull::<u8>::dangling();
        // SAFETY: zero bytes are never touched.
        invalid(unsafe { w.pa.reg_mr_raw(p, 0, Access::LOCAL_WRITE) }, "empty")
            .map_err(TestCaseError::fail)?;
    }

    /// Copies in and out of a region at random offsets and lengths: inside
    /// they work, past the end they fail with `OutOfBounds`.
    #[test]
    fn region_copies(
        offset in prop_oneof![0usize..(80 << 10), (usize::MAX - 64)..=usize::MAX],
        len in prop_oneof![0usize..(16 << 10), (usize::MAX - 64)..=usize::MAX],
    ) {
        let w = world();
        // Its own region: other cases compare the shared ones byte for byte.
        let mr = &w.pa.reg_mr(64 << 10, Access::LOCAL_WRITE).unwrap();
        let inside = offset.checked_add(len).is_some_and(|end| end <= mr.len());
        let r = mr.to_vec(offset, len);
        if inside {
            prop_assert_eq!(r.unwrap().len(), len);
            let data = vec![0x5a; len];
            mr.write(offset, &data).unwrap();
            let mut back = vec![0; len];
            mr.read(offset, &mut back).unwrap();
            prop_assert!(back == data);
        } else {
            let e = access_err(r).map_err(TestCaseError::fail)?;
            prop_assert!(matches!(e, AccessError::OutOfBounds { .. }), "{e:?}");
            if len < (1 << 20) {
                let e = access_err(mr.write(offset, &vec![0; len])).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, AccessError::OutOfBounds { .. }), "{e:?}");
                let e = access_err(mr.read(offset, &mut vec![0; len])).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, AccessError::OutOfBounds { .. }), "{e:?}");
            }
        }
    }

    /// Window binds: foreign device, foreign PD, rights the region lacks,
    /// ranges outside; the checks come in that order.
    #[test]
    fn window_binds(
        which in 0usize..3,
        region_bits in 1u32..16,
        bind_bits in 0u32..16,
        off in prop_oneof![0u64..8192, (u64::MAX - 8192)..=u64::MAX],
        len in prop_oneof![0u64..8192, (u64::MAX - 8192)..=u64::MAX],
    ) {
        let w = world();
        let region_access = Access::from_bits(region_bits | 1).unwrap();
        let bind_access = Access::from_bits(bind_bits).unwrap();
        let mw = w.pa.alloc_mw().unwrap();
        let local = w.pa.reg_mr(4096, region_access).unwrap();
        let mr = [&local, &w.ma2, &w.mb][which];
        let addr = mr.addr().wrapping_add(off);
        let r = mw.bind(mr, addr, len, bind_access);
        let inside = off.checked_add(len).is_some_and(|end| end <= mr.len() as u64);
        let lacks = [Access::REMOTE_READ, Access::REMOTE_WRITE, Access::REMOTE_ATOMIC]
            .into_iter()
            .any(|x| bind_access.contains(x) && !region_access.contains(x));
        match which {
            2 => {
                invalid(r, "another device").map_err(TestCaseError::fail)?;
            }
            1 => {
                let e = access_err(r).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, AccessError::PdMismatch { .. }), "{e:?}");
            }
            // Rights before bounds: proto's one check order (rxe's).
            _ if lacks => {
                let e = access_err(r).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, AccessError::NoPermission { .. }), "{e:?}");
            }
            _ if !inside => {
                let e = access_err(r).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, AccessError::OutOfBounds { .. }), "{e:?}");
            }
            _ => {
                let key = r.unwrap();
                prop_assert_eq!(key, mw.rkey());
                // Bound: the region cannot go, and stays usable.
                let (local, e) = local.deregister().unwrap_err();
                prop_assert_eq!(e.kind(), ErrorKind::Busy);
                prop_assert!(e.to_string().contains("1 memory windows"), "{e}");
                local.write(0, b"still here").unwrap();
                mw.invalidate().unwrap();
                mw.invalidate().unwrap();
                prop_assert!(local.deregister().is_ok());
                return Ok(());
            }
        }
        // A failed bind leaves the window unbound: the region deregisters.
        prop_assert!(local.deregister().is_ok());
    }

    /// QP and SRQ sizes out of range, CQs and SRQs of another device.
    #[test]
    fn qp_and_srq_sizes(
        send_wr in prop_oneof![Just(0u32), 1..=LIMITS.max_qp_wr, (LIMITS.max_qp_wr + 1)..=u32::MAX],
        recv_wr in prop_oneof![Just(0u32), 1..=LIMITS.max_qp_wr, (LIMITS.max_qp_wr + 1)..=u32::MAX],
        send_sge in prop_oneof![0..=LIMITS.max_sge, (LIMITS.max_sge + 1)..=u32::MAX],
        recv_sge in prop_oneof![0..=LIMITS.max_sge, (LIMITS.max_sge + 1)..=u32::MAX],
        inline in prop_oneof![0..=LIMITS.max_inline_data, (LIMITS.max_inline_data + 1)..=u32::MAX],
        foreign in 0usize..4,
    ) {
        let w = world();
        let mut init = QpInitAttr::new(&w.cqa, &w.cqa);
        init.caps.max_send_wr = if send_wr > LIMITS.max_qp_wr || send_wr == 0 { send_wr } else { send_wr.min(64) };
        init.max_recv_wr = if recv_wr > LIMITS.max_qp_wr || recv_wr == 0 { recv_wr } else { recv_wr.min(64) };
        init.caps.max_send_sge = send_sge;
        init.max_recv_sge = recv_sge;
        init.caps.max_inline_data = inline;
        let bad = init.caps.max_send_wr == 0
            || init.caps.max_send_wr > LIMITS.max_qp_wr
            || init.max_recv_wr == 0
            || init.max_recv_wr > LIMITS.max_qp_wr
            || send_sge > LIMITS.max_sge
            || recv_sge > LIMITS.max_sge
            || inline > LIMITS.max_inline_data;
        let r = w.pa.create_qp(&init);
        if bad {
            prop_assert_eq!(kind(r), Ok(ErrorKind::InvalidArgument));
        } else {
            prop_assert_eq!(r.unwrap().state(), QpState::Reset);
        }
        // SRQ sizes.
        let srq_bad = recv_wr == 0 || recv_wr > LIMITS.max_qp_wr || recv_sge == 0 || recv_sge > LIMITS.max_sge;
        let srq_wr = if srq_bad { recv_wr } else { recv_wr.min(64) };
        let r = w.pa.create_srq(srq_wr, recv_sge);
        if srq_bad {
            prop_assert_eq!(kind(r), Ok(ErrorKind::InvalidArgument));
        } else {
            r.unwrap();
        }
        // Objects of another device: the send CQ, the receive CQ, an SRQ.
        let srq_b = w.pb.create_srq(4, 1).unwrap();
        let mut init = QpInitAttr::new(&w.cqa, &w.cqa);
        match foreign {
            0 => init.send_cq = &w.cqb,
            1 => init.recv_cq = &w.cqb,
            2 => init.srq = Some(&srq_b),
            _ => {
                init.send_cq = &w.cqb;
                init.recv_cq = &w.cqb;
            }
        }
        invalid(w.pa.create_qp(&init), "the QP's device").map_err(TestCaseError::fail)?;
    }

    /// Random walks of `modify`: illegal transitions, missing, unexpected
    /// and out-of-range attributes all fail with their `ModifyError` and
    /// leave the state alone; posts are refused in RESET, INIT (sends) and
    /// RTR (sends) and flushed in ERR.
    #[test]
    fn modify_walks(steps in prop::collection::vec(step(), 1..12)) {
        let w = world();
        let (qp, cq) = qp_on(&w.pa, 64);
        let nobody = addrs().2;
        let mut state = QpState::Reset;
        let mut wr_id = 0u64;
        for s in steps {
            let (attr, mask) = if s.proper {
                match (state, s.to) {
                    (QpState::Reset, QpState::Init) | (QpState::Init, QpState::Init) => rc().init(),
                    (QpState::Init, QpState::Rtr) => rc().rtr(0x12_3456, nobody),
                    (QpState::Rtr, QpState::Rts) => rc().rts(),
                    _ => (QpAttr { qp_state: s.to, ..QpAttr::default() }, AttrMask::STATE),
                }
            } else {
                let v = s.values;
                let mut a = QpAttr {
                    qp_state: s.to,
                    cur_qp_state: s.cur,
                    qp_access_flags: Access::from_bits(v[0] & 0xf).unwrap(),
                    pkey_index: (v[0] >> 8) as u16 & 1,
                    port_num: 1 + ((v[0] >> 16) & 1) as u8,
                    dest_qp_num: v[1] & if v[7] & 1 == 0 { 0xff_ffff } else { u32::MAX },
                    rq_psn: v[2] & if v[7] & 2 == 0 { 0xff_ffff } else { u32::MAX },
                    sq_psn: v[3] & if v[7] & 4 == 0 { 0xff_ffff } else { u32::MAX },
                    timeout: v[4] as u8 & 0x3f,
                    retry_cnt: (v[4] >> 8) as u8 & 0xf,
                    rnr_retry: (v[4] >> 16) as u8 & 0xf,
                    min_rnr_timer: (v[4] >> 24) as u8 & 0x3f,
                    max_rd_atomic: v[5] as u8,
                    max_dest_rd_atomic: (v[5] >> 8) as u8,
                    path_mtu: PathMtu::Mtu1024,
                    ..QpAttr::default()
                };
                a.av.dgid = ndverbs_wire::cma::gid_of(nobody).octets();
                a.av.flow_label = v[6] & if v[7] & 8 == 0 { 0xf_ffff } else { u32::MAX };
                let mask = s.mask_bits.iter().fold(AttrMask::STATE, |m, &i| m | MASKS[i]);
                (a, mask)
            };
            let r = qp.modify(&attr, mask);
            let to = attr.qp_state;
            if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != state {
                prop_assert_eq!(kind(r.clone()), Ok(ErrorKind::InvalidState));
                let e = modify_err(r).map_err(TestCaseError::fail)?;
                prop_assert!(matches!(e, ModifyError::CurrentStateMismatch { .. }), "{e:?}");
            } else if !legal(state, to) {
                prop_assert_eq!(kind(r.clone()), Ok(ErrorKind::InvalidState));
                let e = modify_err(r).map_err(TestCaseError::fail)?;
                prop_assert_eq!(e, ModifyError::IllegalTransition { from: state, to });
            } else {
                match r {
                    Ok(()) => state = to,
                    Err(r) => {
                        prop_assert_eq!(r.kind(), ErrorKind::InvalidArgument);
                        let e = modify_err::<()>(Err(r)).map_err(TestCaseError::fail)?;
                        prop_assert!(
                            matches!(
                                e,
                                ModifyError::MissingAttribute { .. }
                                    | ModifyError::UnexpectedAttribute { .. }
                                    | ModifyError::InvalidValue { .. }
                            ),
                            "{e:?}"
                        );
                    }
                }
            }
            prop_assert_eq!(qp.state(), state);
            prop_assert_eq!(qp.query().unwrap().qp_state, state);
            // Posting in this state.
            wr_id += 1;
            let send = SendWr::new(wr_id, SendOp::Send, vec![w.ma.sge(0, 16)]);
            match state {
                QpState::Reset | QpState::Init | QpState::Rtr => {
                    let e = post_err(qp.post_send(send)).map_err(TestCaseError::fail)?;
                    prop_assert_eq!(e, PostError::InvalidState(state));
                }
                QpState::Err => {
                    qp.post_send(send).unwrap();
                    let wc = one(&cq);
                    prop_assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::WrFlushErr));
                }
                // RTS/SQD/SQE would send to nobody: not posted here.
                _ => {}
            }
            let recv = RecvWr::new(wr_id, vec![w.ma.sge(0, 16)]);
            match state {
                QpState::Reset => {
                    let e = post_err(qp.post_recv(recv)).map_err(TestCaseError::fail)?;
                    prop_assert_eq!(e, PostError::InvalidState(QpState::Reset));
                }
                QpState::Err => {
                    qp.post_recv(recv).unwrap();
                    let wc = one(&cq);
                    prop_assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::WrFlushErr));
                }
                _ => {}
            }
        }
    }

    /// Work requests a post refuses at once (as rxe's `post_send`: EINVAL,
    /// ENOMEM), on a QP in ERR (nothing is sent) and in RTS towards nobody.
    #[test]
    fn refused_posts(
        sges in 5usize..40,
        inline_len in 257usize..2000,
        atomic_len in prop_oneof![0u32..8, 9u32..4096],
        huge in ((1u64 << 31) + 1)..(1u64 << 33),
        rts in any::<bool>(),
    ) {
        let w = world();
        let (qp, cq) = qp_on(&w.pa, 4);
        if rts {
            rc().connect(&qp, 0x12_3456, addrs().2).unwrap();
        } else {
            to_err(&qp);
        }
        let sge = w.ma.sge(0, 8);
        let remote = RemoteAddr { va: w.mb.addr(), rkey: w.mb.rkey() };
        let e = post_err(qp.post_send(SendWr::new(1, SendOp::Send, vec![sge; sges]))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::TooManySges { given: sges, max: 4 });
        let mut wr = SendWr::new(2, SendOp::Send, vec![]);
        wr.inline = Some(vec![1; inline_len]);
        let e = post_err(qp.post_send(wr)).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::InlineTooLarge { len: inline_len, max: 256 });
        for (op, sgl) in [
            (SendOp::Send, vec![sge]),
            (SendOp::Read(remote), vec![]),
            (SendOp::FetchAdd { remote, add: 1 }, vec![]),
        ] {
            let mut wr = SendWr::new(3, op, sgl);
            wr.inline = Some(vec![1; 8]);
            let e = post_err(qp.post_send(wr)).map_err(TestCaseError::fail)?;
            prop_assert_eq!(e, PostError::InlineNotAllowed);
        }
        let op = if atomic_len % 2 == 0 {
            SendOp::FetchAdd { remote, add: 1 }
        } else {
            SendOp::CompareSwap { remote, compare: 1, swap: 2 }
        };
        let e = post_err(qp.post_send(SendWr::new(4, op, vec![w.ma.sge(0, atomic_len)]))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::AtomicLength(u64::from(atomic_len)));
        let parts = huge.div_ceil(u64::from(u32::MAX));
        let sgl: Vec<Sge> = (0..parts)
            .map(|i| w.ma.sge(0, (huge - i * u64::from(u32::MAX)).min(u64::from(u32::MAX)) as u32))
            .collect();
        let e = post_err(qp.post_send(SendWr::new(5, SendOp::Write(remote), sgl))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::MessageTooLong(huge));
        prop_assert!(cq.poll_one().is_none(), "a refused post completed");
        // The receive queue: too many SGEs, then full.
        let e = post_err(qp.post_recv(RecvWr::new(6, vec![sge; sges]))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::TooManySges { given: sges, max: 4 });
        if rts {
            for i in 0..4 {
                qp.post_recv(RecvWr::new(10 + i, vec![sge])).unwrap();
            }
            let e = post_err(qp.post_recv(RecvWr::new(14, vec![sge]))).map_err(TestCaseError::fail)?;
            prop_assert_eq!(e, PostError::QueueFull(4));
            // And the send queue (towards nobody: nothing completes).
            for i in 0..4 {
                qp.post_send(SendWr::new(20 + i, SendOp::Send, vec![sge])).unwrap();
            }
            let e = post_err(qp.post_send(SendWr::new(24, SendOp::Send, vec![sge]))).map_err(TestCaseError::fail)?;
            prop_assert_eq!(e, PostError::QueueFull(4));
        }
        // A QP on an SRQ has no receive queue of its own; the SRQ's limits.
        let srq = w.pa.create_srq(2, 1).unwrap();
        let mut init = QpInitAttr::new(&cq, &cq);
        init.srq = Some(&srq);
        let sq = w.pa.create_qp(&init).unwrap();
        to_err(&sq);
        prop_assert_eq!(kind(sq.post_recv(RecvWr::new(7, vec![sge]))), Ok(ErrorKind::InvalidArgument));
        let e = post_err(srq.post_recv(RecvWr::new(8, vec![sge, sge]))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::TooManySges { given: 2, max: 1 });
        srq.post_recv(RecvWr::new(9, vec![sge])).unwrap();
        srq.post_recv(RecvWr::new(10, vec![sge])).unwrap();
        let e = post_err(srq.post_recv(RecvWr::new(11, vec![sge]))).map_err(TestCaseError::fail)?;
        prop_assert_eq!(e, PostError::QueueFull(2));
    }
}

/// Local keys a QP must not use.
#[derive(Debug, Clone, Copy)]
enum BadLocal {
    /// A region of another PD on the same device.
    OtherPd,
    /// A region of the other device.
    OtherDevice,
    /// A deregistered region.
    Deregistered,
    /// A random key.
    Random(u32),
    /// A valid key, a range past the region's end.
    OutOfRange(u32),
}

/// Remote keys the peer must refuse.
#[derive(Debug, Clone, Copy)]
enum BadRemote {
    OtherPd,
    Random(u32),
    OutOfRange(u32),
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), .. ProptestConfig::default() })]

    /// Memory of another PD or device, stale, unknown or out-of-range keys in
    /// work requests: the post is accepted (rdma-core cannot check keys at
    /// post time either) and the request completes with rxe's status —
    /// `LocProtErr` locally, `RemAccessErr` for the peer's refusal — the QP
    /// goes to ERR and later posts flush; the memory involved is unchanged.
    #[test]
    fn foreign_and_stale_keys(
        local in prop_oneof![
            Just(BadLocal::OtherPd),
            Just(BadLocal::OtherDevice),
            Just(BadLocal::Deregistered),
            any::<u32>().prop_map(BadLocal::Random),
            (1u32..4096).prop_map(BadLocal::OutOfRange),
        ],
        remote in prop_oneof![
            Just(BadRemote::OtherPd),
            any::<u32>().prop_map(BadRemote::Random),
            (1u32..4096).prop_map(BadRemote::OutOfRange),
        ],
        on_recv in any::<bool>(),
        write in any::<bool>(),
    ) {
        let w = world();
        let ((qa, ca), (qb, cb)) = pair(&w.pa);
        let len = 64u32;
        let known = [w.ma.lkey(), w.ma2.lkey(), w.mb.lkey(), w.mb2.lkey()];
        if let BadLocal::Random(k) | BadLocal::OutOfRange(k) = local {
            prop_assume!(!known.contains(&k));
        }
        if let BadRemote::Random(k) = remote {
            prop_assume!(!known.contains(&k));
        }
        // The bad SGE for a QP on `own`'s device (`other_pd`: same device,
        // another PD; `other_dev`: the other device).
        let bad = |pd: &Pd, own: &Mr, other_pd: &Mr, other_dev: &Mr| match local {
            BadLocal::OtherPd => other_pd.sge(0, len),
            BadLocal::OtherDevice => other_dev.sge(0, len),
            BadLocal::Deregistered => {
                let mr = pd.reg_mr(4096, Access::ALL).unwrap();
                let sge = mr.sge(0, len);
                mr.deregister().unwrap();
                sge
            }
            BadLocal::Random(k) => Sge::new(own.addr(), len, k),
            BadLocal::OutOfRange(o) => {
                Sge::new(own.addr() + own.len() as u64 - u64::from(o % len), len, own.lkey())
            }
        };
        let snapshot = || [&w.ma, &w.ma2, &w.mb, &w.mb2].map(|m| m.to_vec(0, 8192).unwrap());
        let before = snapshot();
        if on_recv {
            // B posts a receive into memory its QP may not use; A's SEND
            // lands there: B's receive fails, A's SEND is NAKed.
            let sge = bad(&w.pb, &w.mb, &w.mb2, &w.ma);
            qb.post_recv(RecvWr::new(1, vec![sge])).unwrap();
            qa.post_send(SendWr::new(2, SendOp::Send, vec![w.ma.sge(0, len)])).unwrap();
            let wb = one(&cb);
            prop_assert_eq!((wb.wr_id, wb.status), (1, WcStatus::LocProtErr));
            prop_assert_eq!(qb.state(), QpState::Err);
            let wa = one(&ca);
            prop_assert_eq!((wa.wr_id, wa.status), (2, WcStatus::RemOpErr));
        } else if write {
            // A gathers a WRITE from a bad SGE.
            let sge = bad(&w.pa, &w.ma, &w.ma2, &w.mb);
            let to = RemoteAddr { va: w.mb.addr(), rkey: w.mb.rkey() };
            qa.post_send(SendWr::new(3, SendOp::Write(to), vec![sge])).unwrap();
            let wc = one(&ca);
            prop_assert_eq!((wc.wr_id, wc.status), (3, WcStatus::LocProtErr));
        } else {
            // B writes to a target in A that A's QP must refuse.
            let target = match remote {
                BadRemote::OtherPd => RemoteAddr { va: w.ma2.addr(), rkey: w.ma2.rkey() },
                BadRemote::Random(k) => RemoteAddr { va: w.ma.addr(), rkey: k },
                BadRemote::OutOfRange(o) => RemoteAddr {
                    va: w.ma.addr() + w.ma.len() as u64 - u64::from(o % len),
                    rkey: w.ma.rkey(),
                },
            };
            qb.post_send(SendWr::new(4, SendOp::Write(target), vec![w.mb.sge(0, len)])).unwrap();
            let wc = one(&cb);
            prop_assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemAccessErr));
            prop_assert_eq!(qb.state(), QpState::Err);
            qb.post_send(SendWr::new(5, SendOp::Send, vec![w.mb.sge(0, 8)])).unwrap();
            let wc = one(&cb);
            prop_assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WrFlushErr));
            prop_assert!(snapshot() == before, "memory changed");
            return Ok(());
        }
        prop_assert_eq!(qa.state(), QpState::Err);
        // Posts on the failed QP flush.
        qa.post_send(SendWr::new(9, SendOp::Send, vec![w.ma.sge(0, 8)])).unwrap();
        let wc = one(&ca);
        prop_assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
        prop_assert!(snapshot() == before, "memory changed");
    }
}

/// Endpoints used in the wrong state.
#[test]
fn endpoints_in_the_wrong_state() {
    let w = world();
    let (qp, _cq) = qp_on(&w.pa, 8);
    let (a, m) = rc().init();
    qp.modify(&a, m).unwrap();
    let ep = Endpoint::new(&w.a).unwrap();
    // Nothing connected yet.
    assert_eq!(kind(ep.disconnect(&qp)), Ok(ErrorKind::NotConnected));
    assert_eq!(kind(ep.notify_disconnect()), Ok(ErrorKind::NotConnected));
    invalid(ep.reject(b"no"), "no connection to reject").unwrap();
    let other = Endpoint::new(&w.a).unwrap();
    invalid(ep.get_request(&other), "not listening").unwrap();
    // Accept and CompleteConnect with nothing to answer end with an error.
    let r = ep.accept(&qp, accept_args()).unwrap().wait_timeout(T);
    assert_eq!(kind(r.expect("ended")), Ok(ErrorKind::InvalidState));
    let r = ep.complete_connect(&qp).unwrap().wait_timeout(T);
    assert_eq!(kind(r.expect("ended")), Ok(ErrorKind::InvalidState));
    assert_eq!(qp.state(), QpState::Init, "a refused call moved the QP");
    ep.cancel().unwrap();
    assert!(ep.info().unwrap().cm_state.is_none());
    // A QP that was destroyed.
    let gone = QpId::from(&qp_on(&w.pa, 8).0);
    assert_eq!(
        kind(ep.connect(gone, connect_args(7301))),
        Ok(ErrorKind::NotFound)
    );
    // Listening: twice, on a port in use, then connecting the listener.
    let l = Endpoint::new(&w.b).unwrap();
    l.listen(7301, 4).unwrap();
    assert_eq!(kind(l.listen(7302, 4)), Ok(ErrorKind::Busy));
    let l2 = Endpoint::new(&w.b).unwrap();
    assert_eq!(kind(l2.listen(7301, 4)), Ok(ErrorKind::Busy));
    let (qb, _cqb) = qp_on(&w.pb, 8);
    qb.modify(&a, m).unwrap();
    assert_eq!(
        kind(l.connect(&qb, connect_args(7301))),
        Ok(ErrorKind::Busy)
    );
    // get_request into an endpoint of another device.
    invalid(l.get_request(&ep), "another device").unwrap();
    // Too much private data: the connect ends with an error.
    let ep2 = Endpoint::new(&w.a).unwrap();
    let mut args = connect_args(7301);
    args.private_data = vec![7; 200];
    let e = verbs_err(
        ep2.connect(&qp, args)
            .unwrap()
            .wait_timeout(T)
            .expect("ended"),
    )
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        matches!(e.cm_error(), Some(CmError::PrivateDataTooLong { .. })),
        "{e:?}"
    );
    // Connect twice: the second is refused at once.
    let ep3 = Endpoint::new(&w.a).unwrap();
    let first = ep3.connect(&qp, connect_args(7301)).unwrap();
    assert_eq!(
        kind(ep3.connect(&qp, connect_args(7301))),
        Ok(ErrorKind::Busy)
    );
    assert_eq!(kind(ep3.listen(7303, 1)), Ok(ErrorKind::Busy));
    ep3.cancel().unwrap();
    assert_eq!(
        kind(first.wait_timeout(T).expect("cancelled")),
        Ok(ErrorKind::Canceled)
    );
}

fn connect_args(port: u16) -> ConnectArgs {
    kit::connect_args(addrs().1, port)
}

fn accept_args() -> AcceptArgs {
    AcceptArgs {
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        private_data: Vec::new(),
    }
}

/// Opening an address that is not local, or one already open.
#[test]
fn opening_bad_addresses() {
    let w = world();
    let e = verbs_err(Device::open("192.0.2.77".parse().unwrap())).unwrap();
    assert_eq!(e.kind(), ErrorKind::AddressNotAvailable, "{e:?}");
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
    let manual = DeviceConfig {
        progress: Progress::Manual,
        ..DeviceConfig::default()
    };
    let e = verbs_err(Device::open_with(w.a.query().addr, &manual)).unwrap();
    assert_eq!(e.kind(), ErrorKind::AddressInUse, "{e:?}");
    assert_eq!(e.errno(), libc::EADDRINUSE);
    let e =
        verbs_err(w.a.set_capture(Some(std::path::Path::new("/nonexistent/dir/x.pcap")))).unwrap();
    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
    assert_eq!(
        e.io_error().map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound)
    );
    assert!(e.to_string().contains("/nonexistent/dir/x.pcap"), "{e}");
    assert!(w.a.capture_path().is_none());
}

/// After removal every call fails cleanly (`DeviceRemoved`), cleanup works,
/// and nothing panics — also when the handles are dropped afterwards.
#[test]
fn removed_device_fails_every_call() {
    let dev = Device::open(addr::v4()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let mr = pd.reg_mr(4096, Access::ALL).unwrap();
    let mr2 = pd.reg_mr(4096, Access::ALL).unwrap();
    let mw = pd.alloc_mw().unwrap();
    mw.bind(&mr2, mr2.addr(), 64, Access::REMOTE_READ).unwrap();
    let srq = pd.create_srq(4, 1).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq)).unwrap();
    let (a, m) = rc().init();
    qp.modify(&a, m).unwrap();
    qp.post_recv(RecvWr::new(1, vec![mr.sge(0, 64)])).unwrap();
    let ep = Endpoint::new(&dev).unwrap();
    let waiting = cq.notify(NotifyOn::Any);
    dev.remove();
    dev.remove();
    assert!(dev.is_removed());
    // The outstanding receive is flushed, the waiter ends.
    let wc = cq.poll_one().expect("flushed receive");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr));
    assert_eq!(
        kind(waiting.wait_timeout(T).expect("ended")),
        Ok(ErrorKind::DeviceRemoved)
    );
    let removed = |r: Result<()>| assert_eq!(kind(r), Ok(ErrorKind::DeviceRemoved));
    removed(dev.alloc_pd().map(drop));
    removed(dev.create_cq(16).map(drop));
    removed(pd.reg_mr(64, Access::ALL).map(drop));
    removed(pd.alloc_mw().map(drop));
    removed(pd.create_srq(4, 1).map(drop));
    removed(pd.create_qp(&QpInitAttr::new(&cq, &cq)).map(drop));
    removed(qp.modify(&a, m));
    removed(qp.to_error());
    removed(qp.query().map(drop));
    removed(qp.post_send(SendWr::new(2, SendOp::Send, vec![mr.sge(0, 8)])));
    removed(qp.post_recv(RecvWr::new(3, vec![mr.sge(0, 8)])));
    removed(srq.post_recv(RecvWr::new(4, vec![mr.sge(0, 8)])));
    removed(mw.bind(&mr, mr.addr(), 64, Access::REMOTE_READ).map(drop));
    removed(mw.invalidate());
    removed(Endpoint::new(&dev).map(drop));
    removed(ep.listen(7400, 1));
    removed(ep.info().map(drop));
    removed(ep.disconnect(&qp).map(drop));
    removed(ep.notify_disconnect().map(drop));
    removed(ep.connect(&qp, connect_args(7400)).map(drop));
    removed(ep.accept(&qp, accept_args()).map(drop));
    removed(ep.complete_connect(&qp).map(drop));
    removed(ep.reject(b"").map(drop));
    removed(ep.get_request(&ep).map(drop));
    removed(cq.wait_one(Duration::from_millis(10)).map(drop));
    assert_eq!(
        kind(cq.notify(NotifyOn::Any).wait_timeout(T).expect("ended")),
        Ok(ErrorKind::DeviceRemoved)
    );
    // Cleanup and the plain accessors still work: cancelling (the removal
    // left nothing to cancel), polling, releasing.
    ep.cancel()
        .expect("cancelling is cleanup: it works after removal");
    assert!(cq.poll_one().is_none() && cq.is_empty());
    assert_eq!(cq.len(), 0);
    assert_eq!(cq.poll(&mut []), 0);
    cq.req_notify(NotifyOn::Any);
    cq.cancel_notifies();
    let _ = (
        cq.ack_events(),
        cq.fd(),
        cq.depth(),
        cq.overflowed(),
        cq.device().gid(),
    );
    let _ = cq.resize(32);
    dev.progress();
    let _ = (
        dev.query(),
        dev.stats(),
        dev.capture_path(),
        qp.qpn(),
        qp.state(),
        qp.counters(),
    );
    dev.publish_stats();
    assert!(mr.to_vec(0, 8).is_ok());
    mr.deregister()
        .expect("deregistering is cleanup: it works after removal");
    drop((mw, mr2, qp, srq, ep, cq, pd));
}

/// A region dropped while a window is bound to it: its own keys stop
/// working at once (the handle is gone, nobody can deregister it later),
/// the window keeps its grant until it is invalidated, and then nothing of
/// the region is reachable.
#[test]
fn a_region_dropped_with_a_window_bound() {
    let w = world();
    let mr = w.pa.reg_mr(8192, Access::ALL).unwrap();
    let (lkey, rkey, addr) = (mr.lkey(), mr.rkey(), mr.addr());
    let mw = w.pa.alloc_mw().unwrap();
    let wkey = mw.bind(&mr, addr, 4096, Access::REMOTE_WRITE).unwrap();
    drop(mr);
    let write = |qb: &Qp, cb: &Cq, to: RemoteAddr, id: u64| {
        qb.post_send(SendWr::new(id, SendOp::Write(to), vec![w.mb.sge(0, 64)]))
            .unwrap();
        one(cb).status
    };
    // The same bytes, through the region's R_Key and through the window's.
    let region = RemoteAddr { va: addr, rkey };
    let window = RemoteAddr {
        rkey: wkey,
        ..region
    };
    // The region's R_Key is dead; so is its L_Key.
    let ((_qa, _ca), (qb, cb)) = pair(&w.pa);
    assert_eq!(write(&qb, &cb, region, 1), WcStatus::RemAccessErr);
    let ((qa, ca), _b) = pair(&w.pa);
    qa.post_send(SendWr::new(
        2,
        SendOp::Write(RemoteAddr {
            va: w.mb.addr(),
            rkey: w.mb.rkey(),
        }),
        vec![Sge::new(addr, 64, lkey)],
    ))
    .unwrap();
    assert_eq!(one(&ca).status, WcStatus::LocProtErr);
    // The window still works until invalidated.
    let ((_qa, _ca), (qb, cb)) = pair(&w.pa);
    assert_eq!(write(&qb, &cb, window, 3), WcStatus::Success);
    mw.invalidate().unwrap();
    assert_eq!(write(&qb, &cb, window, 4), WcStatus::RemAccessErr);
    drop(mw);
}
