//! The RC queue pair set-up every tool repeats: create it, move it
//! RESET → INIT, and (without a connection manager) INIT → RTR → RTS with the
//! peer's QPN, PSN and GID, as `ibv_rc_pingpong` and perftest's `ctx_connect`
//! do after their TCP exchange.

use anyhow::{Context, Result};
use ndverbs_verbs::{
    Access, AddressVector, Cq, PathMtu, Pd, Qp, QpCaps, QpInitAttr, RcConnection, LIMITS,
};
use std::net::{IpAddr, Ipv6Addr};

/// A random 24-bit first PSN (`lrand48() & 0xffffff` in the C tools).
pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // A failed draw leaves zeros: PSN 0 is as valid as any.
    let _ = getrandom::fill(&mut b);
    u32::from_le_bytes(b) & 0x00ff_ffff
}

/// Queue sizes of an RC QP (one SGE per request, completions on request).
#[derive(Debug, Clone, Copy)]
pub struct QpSize {
    /// Send queue depth.
    pub send: u32,
    /// Receive queue depth.
    pub recv: u32,
    /// Max inline data.
    pub inline: u32,
}

/// Creates an RC QP on `pd` and moves it to INIT with `access` remote rights.
pub fn create_rc_qp(
    pd: &Pd,
    send_cq: &Cq,
    recv_cq: &Cq,
    size: QpSize,
    access: Access,
) -> Result<Qp> {
    let mut init = QpInitAttr::new(send_cq, recv_cq);
    init.caps = QpCaps {
        max_send_wr: size.send,
        max_send_sge: 1,
        max_inline_data: size.inline,
        sq_sig_all: false,
    };
    init.max_recv_wr = size.recv;
    init.max_recv_sge = 1;
    let qp = pd.create_qp(&init).context("Couldn't create QP")?;
    qp.to_init(access).context("Failed to modify QP to INIT")?;
    Ok(qp)
}

/// What INIT → RTR → RTS needs besides the peer's QPN and PSN.
#[derive(Debug, Clone, Copy)]
pub struct RcPath {
    /// Path MTU.
    pub mtu: PathMtu,
    /// IP TTL / hop limit of the packets (`ibv_rc_pingpong` sends 1,
    /// perftest 0xff).
    pub hop_limit: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^t).
    pub timeout: u8,
    /// READs/atomics the peer may have outstanding at us (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// READs/atomics we may have outstanding at the peer (`max_rd_atomic`).
    pub initiator_depth: u8,
}

impl RcPath {
    /// `ibv_rc_pingpong`'s path: hop limit 1, ACK timeout 14, one
    /// outstanding READ each way.
    pub fn pingpong(mtu: PathMtu) -> RcPath {
        RcPath {
            mtu,
            hop_limit: 1,
            timeout: 14,
            responder_resources: 1,
            initiator_depth: 1,
        }
    }
}

/// The peer's end of the connection.
#[derive(Debug, Clone, Copy)]
pub struct RcPeer {
    /// Its QP number.
    pub qpn: u32,
    /// Its first PSN (our receive PSN).
    pub psn: u32,
    /// Its GID.
    pub gid: Ipv6Addr,
}

/// The GID to send to: the one the peer announced, or, when that is zero (a
/// peer run without a GID index), the GID of `fallback`, the address it was
/// reached at.
pub fn peer_gid(announced: [u8; 16], fallback: Option<IpAddr>) -> Ipv6Addr {
    let gid = Ipv6Addr::from(announced);
    match (gid.is_unspecified(), fallback) {
        (true, Some(ip)) => ndverbs_wire::cma::gid_of(ip),
        _ => gid,
    }
}

/// A READ/atomic depth as the QP attributes take it: at least 1, at most
/// the device's `max_qp_rd_atom`.
pub fn rd_atomic(v: u16) -> u8 {
    v.clamp(1, u16::from(LIMITS.max_qp_rd_atom)) as u8
}

/// INIT → RTR → RTS towards `peer`, sending from `my_psn`; RNR timer 12,
/// retry and RNR retry 7.
pub fn connect_rc(qp: &Qp, my_psn: u32, peer: &RcPeer, path: &RcPath) -> Result<()> {
    let c = RcConnection {
        av: AddressVector {
            dgid: peer.gid.octets(),
            hop_limit: path.hop_limit,
            ..AddressVector::default()
        },
        rq_psn: peer.psn,
        sq_psn: my_psn,
        path_mtu: path.mtu,
        max_dest_rd_atomic: path.responder_resources,
        max_rd_atomic: path.initiator_depth,
        timeout: path.timeout,
        ..RcConnection::new(peer.qpn)
    };
    qp.connect(&c)
        .with_context(|| format!("Failed to connect QP {:#x} to RTS", qp.qpn()))
}

/// The path MTU `-m` asks for, if it does: 256, 512, 1024, 2048 or 4096
/// bytes, anything else an error naming the choices.
pub fn requested_mtu(m: Option<u32>) -> Result<Option<PathMtu>> {
    m.map(|m| {
        PathMtu::at_most(m as usize)
            .filter(|p| p.bytes() == m)
            .with_context(|| format!("invalid MTU {m} (256, 512, 1024, 2048 or 4096)"))
    })
    .transpose()
}

/// The path MTU to run with: `requested` unless it is above the port's
/// `active` one (or absent), as perftest's `set_mtu`; with perftest's words
/// (for stdout) when it was lowered.
pub fn run_mtu(requested: Option<PathMtu>, active: PathMtu) -> (PathMtu, Option<String>) {
    match requested {
        Some(m) if m > active => (
            active,
            Some(format!(
                "Requested mtu is higher than active mtu \nChanging to active mtu - {}\n",
                active as u8
            )),
        ),
        Some(m) => (m, None),
        None => (active, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_gid_falls_back_to_the_peer_address() {
        let ip: IpAddr = "10.77.0.3".parse().unwrap();
        let mapped: Ipv6Addr = "::ffff:10.77.0.3".parse().unwrap();
        assert_eq!(peer_gid([0; 16], Some(ip)), mapped);
        let other: Ipv6Addr = "fd00::2".parse().unwrap();
        assert_eq!(peer_gid(other.octets(), Some(ip)), other);
        assert!(peer_gid([0; 16], None).is_unspecified());
        assert_eq!(rd_atomic(0), 1);
        assert_eq!(rd_atomic(1000), LIMITS.max_qp_rd_atom);
        assert!(random_psn() <= 0xff_ffff);
    }

    #[test]
    fn the_run_mtu_is_the_requested_one_up_to_the_active_one() {
        use super::{requested_mtu, run_mtu};
        assert!(requested_mtu(Some(1500)).is_err());
        assert_eq!(requested_mtu(None).unwrap(), None);
        let m2048 = requested_mtu(Some(2048)).unwrap();
        assert_eq!(run_mtu(m2048, PathMtu::Mtu4096), (PathMtu::Mtu2048, None));
        assert_eq!(run_mtu(None, PathMtu::Mtu1024), (PathMtu::Mtu1024, None));
        let (m, said) = run_mtu(m2048, PathMtu::Mtu1024);
        assert_eq!(m, PathMtu::Mtu1024);
        assert_eq!(
            said.as_deref(),
            Some("Requested mtu is higher than active mtu \nChanging to active mtu - 3\n")
        );
    }
}
