//! Resolve (SIDR) on UD endpoints: the SIDR_REP's answer, refusals,
//! timeouts, cancel and destroy, and the passive side's accept and reject.

use super::*;
use crate::ep::types::{SidrArgs, SidrInfo};
use ndverbs_wire::cma::RDMA_PS_UDP;

fn sargs(to: IpAddr) -> SidrArgs {
    SidrArgs {
        remote: to,
        remote_port: PORT,
        local_port: 41000,
        private_data: b"udp".to_vec(),
    }
}

impl Side {
    fn resolve(&mut self, ep: u32, to: IpAddr) -> Result<RequestId, Refused> {
        let now = self.now;
        let r = self.eps.resolve(now, &mut self.cm, ep, sargs(to));
        self.then(r)
    }

    fn resolve_result(&self, id: RequestId) -> Option<Result<SidrInfo, EpError>> {
        match self.done.get(&id)? {
            Outcome::Resolve(r) => Some(r.clone()),
            o => panic!("{id:?} is not a Resolve: {o:?}"),
        }
    }

    fn listen_ud(&mut self, ep: u32) {
        let r = self.eps.listen_ps(&mut self.cm, ep, RDMA_PS_UDP, PORT, 4);
        self.then(r).unwrap();
    }
}

/// B listens on UDP `PORT`; A's Resolve is out and B holds the request.
fn requested(p: &mut Pair) -> (u32, RequestId, u32) {
    let (l, eb) = (p.b.create(), p.b.create());
    p.b.listen_ud(l);
    let got = p.b.get_request(l, eb).unwrap();
    let ea = p.a.create();
    let to = p.b.ip();
    let r = p.a.resolve(ea, to).unwrap();
    p.pump();
    let info = p.b.request_result(got).unwrap().unwrap();
    assert_eq!(info.peer, p.a.ip());
    assert!(info.private_data.starts_with(b"udp"));
    assert_eq!(p.a.state_name(ea), "Resolving");
    (ea, r, eb)
}

#[test]
fn accepted_resolve_completes_with_the_qpn_and_qkey() {
    let mut p = Pair::new();
    let (ea, r, eb) = requested(&mut p);
    assert!(p.a.pending(r));
    p.b.eps
        .accept_ud(&mut p.b.cm, eb, 0x4242, 0x0123_4567, b"hi")
        .unwrap();
    p.pump();
    let info = p.a.resolve_result(r).unwrap().unwrap();
    assert_eq!((info.status, info.qpn, info.qkey), (0, 0x4242, 0x0123_4567));
    assert!(info.private_data.starts_with(b"hi"));
    assert_eq!(p.a.state_name(ea), "Closed");
    assert_eq!(p.b.state_name(eb), "Closed");
    // No QP was touched on either side; one SIDR_REQ, one SIDR_REP.
    assert!(p.a.ops.is_empty() && p.b.ops.is_empty());
    assert_eq!(p.sent(Who::A), [attr::SIDR_REQ]);
    assert_eq!(p.sent(Who::B), [attr::SIDR_REP]);
    // Accepting twice is refused; the endpoint may resolve again.
    assert!(p.b.eps.accept_ud(&mut p.b.cm, eb, 0x4242, 1, b"").is_err());
    let to = p.b.ip();
    assert!(p.a.resolve(ea, to).is_ok());
}

#[test]
fn rejected_and_unlistened_resolves_report_the_status() {
    let mut p = Pair::new();
    let (_, r, eb) = requested(&mut p);
    p.b.reject(eb, b"no").unwrap();
    p.pump();
    let info = p.a.resolve_result(r).unwrap().unwrap();
    assert_eq!(info.status, 2);
    assert!(info.private_data.starts_with(b"no"));
    // Nobody listens on the port: status 1.
    let mut p = Pair::new();
    let ea = p.a.create();
    let to = p.b.ip();
    let r = p.a.resolve(ea, to).unwrap();
    p.pump();
    assert_eq!(p.a.resolve_result(r).unwrap().unwrap().status, 1);
}

#[test]
fn unanswered_resolve_times_out_and_busy_endpoints_refuse() {
    let mut p = Pair::new();
    p.drop.push((Who::A, attr::SIDR_REQ));
    let ea = p.a.create();
    let to = p.b.ip();
    let r = p.a.resolve(ea, to).unwrap();
    // One at a time: a second Resolve (or a Connect) is refused.
    assert!(matches!(p.a.resolve(ea, to), Err(Refused::Busy(_))));
    let qp = p.a.qp();
    assert!(matches!(p.a.connect(ea, qp, to), Err(Refused::Busy(_))));
    p.advance(Duration::from_secs(5));
    assert_eq!(p.a.resolve_result(r), Some(Err(EpError::Timeout)));
    // The SIDR_REQ and its three retransmissions.
    assert_eq!(p.sent(Who::A), [attr::SIDR_REQ; 4]);
}

#[test]
fn cancel_destroy_and_removal_end_a_resolve() {
    let mut p = Pair::new();
    p.drop.push((Who::A, attr::SIDR_REQ));
    let to = p.b.ip();
    let (e1, e2, e3) = (p.a.create(), p.a.create(), p.a.create());
    let (r1, r2, r3) = (
        p.a.resolve(e1, to).unwrap(),
        p.a.resolve(e2, to).unwrap(),
        p.a.resolve(e3, to).unwrap(),
    );
    p.a.cancel(e1).unwrap();
    assert_eq!(p.a.resolve_result(r1), Some(Err(EpError::Canceled)));
    assert_eq!(p.a.state_name(e1), "Idle");
    p.a.destroy(e2).unwrap();
    assert_eq!(p.a.resolve_result(r2), Some(Err(EpError::Canceled)));
    p.a.remove_device();
    assert_eq!(p.a.resolve_result(r3), Some(Err(EpError::DeviceRemoved)));
    // Nothing retransmits for the ended ones.
    let before = p.sent(Who::A).len();
    p.advance(Duration::from_secs(5));
    assert_eq!(p.sent(Who::A).len(), before);
}

#[test]
fn destroying_an_unanswered_request_refuses_it() {
    let mut p = Pair::new();
    let (_, r, eb) = requested(&mut p);
    p.b.destroy(eb).unwrap();
    p.pump();
    assert_eq!(p.a.resolve_result(r).unwrap().unwrap().status, 2);
}
