//! rdma_cm compatibility: which service IDs carry the rdma_cm header, how the
//! active side fills it, how the passive side checks it, and the flow label.
//!
//! Linux's rdma_cm maps (port space, port) to the service ID
//! `port_space << 16 | port` (RDMA_PS_TCP = 0x0106: rping's 7174 is
//! `0x01061C06`) and puts a 36-byte header first in the REQ's private data:
//! version 0, IP version, the active side's port, source and destination
//! address ([`ndverbs_wire::cma`]). The application gets the other 56 bytes.
//! Other messages carry no header.
//!
//! The passive rdma_cm refuses a REQ whose header it cannot use with REJ 28
//! (consumer defined) and no private data; a REQ for a service ID nobody
//! listens on gets REJ 8 from the IB CM below it. We check: version 0, IP
//! version 4/6 of the same family as ours, the destination address is ours
//! (every listener of an agent listens on the agent's one address), and the
//! source is a unicast, specified address. Linux additionally checks routes
//! and rejects loopback sources; ndverbs' own tests run on 127.0.0.x, so
//! loopback is accepted.
//!
//! The flow label: rdma_cm on RoCEv2 sets `(sport · 31 + dport) & 0xFFFFF`
//! from the rdma_cm ports (`rdma_get_udp_sport`'s input). Every REQ in the
//! captures matches: rping 50269 → 7174 gives 0x7e349.

use ndverbs_wire::cma::{self, CmaHeader, CMA_HEADER_LEN};
use std::net::IpAddr;

/// True if REQs for `service_id` carry the rdma_cm header (port spaces TCP,
/// UDP and IPoIB; not RDMA_PS_IB, whose AF_IB ids have none).
pub fn uses_cma_header(service_id: u64) -> bool {
    matches!(
        cma::split_service_id(service_id),
        Some((cma::RDMA_PS_TCP | cma::RDMA_PS_UDP | cma::RDMA_PS_IPOIB, _))
    )
}

/// rdma_cm's RoCEv2 flow label for a connection from `sport` to `dport`.
pub fn flow_label(sport: u16, dport: u16) -> u32 {
    (u32::from(sport) * 31 + u32::from(dport)) & 0xf_ffff
}

/// Private data capacity left to a `connect` caller for `service_id`.
pub fn max_req_private_data(service_id: u64) -> usize {
    if uses_cma_header(service_id) {
        cma::REQ_USER_PRIVATE_DATA
    } else {
        ndverbs_wire::cm::pdata::REQ
    }
}

/// Fills REQ private data: the rdma_cm header (if the service ID wants one),
/// then `user`. The caller has checked lengths and address families.
pub(crate) fn req_private_data(
    service_id: u64,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    user: &[u8],
) -> [u8; ndverbs_wire::cm::pdata::REQ] {
    let mut pd = [0u8; ndverbs_wire::cm::pdata::REQ];
    let off = if uses_cma_header(service_id) {
        // Same family checked by the caller: cannot fail.
        CmaHeader::new(src, sport, dst)
            .write(&mut pd)
            .unwrap_or(CMA_HEADER_LEN)
    } else {
        0
    };
    let n = user.len().min(pd.len() - off);
    pd[off..off + n].copy_from_slice(&user[..n]);
    pd
}

/// The passive checks of the rdma_cm header; `Err` names the failed check.
pub(crate) fn check_req_header(pd: &[u8], local: IpAddr) -> Result<CmaHeader, &'static str> {
    let h = CmaHeader::parse(pd).map_err(|_| "IP version")?;
    if h.version != 0 {
        return Err("cma_version");
    }
    if h.dst != local {
        return Err("destination is not this adapter's address");
    }
    if h.src.is_unspecified() || h.src.is_multicast() {
        return Err("source address");
    }
    if h.src.is_ipv4() != local.is_ipv4() {
        return Err("address family");
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_labels_of_the_captures() {
        assert_eq!(flow_label(50269, 7174), 0x7e349); // rping
        assert_eq!(flow_label(57780, 7174), 0xb70d2); // rping, unanswered
        assert_eq!(flow_label(49489, 7471), 0x785fe); // rdma_client
        assert_eq!(flow_label(39522, 18515), 0x2fa31); // ib_send_bw -R
        assert_eq!(flow_label(34675, 18515), 0x0af40);
    }

    #[test]
    fn header_rules() {
        let sid = cma::service_id(cma::RDMA_PS_TCP, 7174);
        assert!(uses_cma_header(sid));
        assert!(!uses_cma_header(cma::service_id(cma::RDMA_PS_IB, 1)));
        assert!(!uses_cma_header(0x1234_5678_9abc));
        assert_eq!(max_req_private_data(sid), 56);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let pd = req_private_data(sid, a, 4000, b, b"hi");
        assert_eq!(&pd[36..38], b"hi");
        assert_eq!(check_req_header(&pd, b).unwrap().src_port, 4000);
        assert!(check_req_header(&pd, a).is_err());
        let mut bad = pd;
        bad[0] = 1;
        assert_eq!(check_req_header(&bad, b), Err("cma_version"));
        bad = pd;
        bad[1] = 0x50;
        assert_eq!(check_req_header(&bad, b), Err("IP version"));
        assert!(check_req_header(&[0u8; 92], b).is_err());
    }
}
