//! The port's active MTU bounds every queue pair's path MTU: an
//! application's modification above it is refused with the reason named,
//! and what the connection manager negotiates is lowered to it (a REQ from
//! a peer on a wider link must not make this side send datagrams its own
//! link cannot carry).

mod common;

use common::cm::{self, accept_args, connect_args};
use common::{cm_side, connection, Shape, Side};
use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::error::EngineError;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{ModifyError, PathMtu, QpState};
use std::net::IpAddr;

fn nic(ip: IpAddr, active_mtu: PathMtu) -> Nic {
    let config = NicConfig {
        progress: Progress::Thread,
        active_mtu,
        ..NicConfig::default()
    };
    Nic::open_with(ip, config).unwrap()
}

fn side(ip: IpAddr, active_mtu: PathMtu) -> Side {
    cm_side(nic(ip, active_mtu), Shape::queues(16, 1, 16, 16, 1 << 12))
}

#[test]
fn a_path_mtu_above_the_active_one_is_refused_and_the_qp_left_as_it_was() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (a, b) = (side(ia, PathMtu::Mtu1024), side(ib, PathMtu::Mtu4096));
    let mut steps = connection(&a, &b, PathMtu::Mtu4096).steps().into_iter();
    steps.next(); // INIT: cm_side is there already.
    let (rtr, mask) = steps.next().unwrap();
    let e = a.nic.modify_qp(a.qp.qpn(), &rtr, mask).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::Modify(ModifyError::PathMtuAboveActive {
                requested: PathMtu::Mtu4096,
                active: PathMtu::Mtu1024
            })
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("path MTU 4096"), "{e}");
    assert_eq!(a.nic.query_qp(a.qp.qpn()).unwrap().qp_state, QpState::Init);
    // The active MTU itself is fine.
    a.modify(
        connection(&a, &b, PathMtu::Mtu1024)
            .steps()
            .into_iter()
            .skip(1),
    );
    assert_eq!(a.nic.query_qp(a.qp.qpn()).unwrap().qp_state, QpState::Rts);
    assert_eq!(a.nic.active_mtu(), PathMtu::Mtu1024);
}

#[test]
fn the_cm_lowers_a_negotiated_mtu_to_each_sides_active_mtu() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    // A's REQ asks for 4096; B's link carries 1024; A's own link 2048.
    let (a, b) = (side(ia, PathMtu::Mtu2048), side(ib, PathMtu::Mtu1024));
    let l = cm::listen(&b, 7001);
    let args = ndverbs_engine::ep::ConnectArgs {
        path_mtu: PathMtu::Mtu4096,
        ..connect_args(b.nic.local(), 7001)
    };
    cm::establish(&a, &b, l, args, accept_args());
    let mtu = |s: &Side| s.nic.query_qp(s.qp.qpn()).unwrap().path_mtu;
    assert_eq!(mtu(&a), PathMtu::Mtu2048);
    assert_eq!(mtu(&b), PathMtu::Mtu1024);
}
