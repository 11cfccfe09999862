//! The endpoint machine without sockets: two [`Endpoints`] over two
//! `CmAgent`s wired back to back in memory (MADs carried by the harness,
//! time advanced by the test), each with a table of fake QPs answering the
//! machine's QP operations. The tests pin what every request returns in
//! each case, which MADs go out and what happens to the QPs. They start
//! from a [`Pair`] fixture that has taken a connection as far as they need:
//! `connecting`, `requested`, `accepted`, `rtu_lost` or `connected`.

mod connect;
mod disconnect;
mod lifecycle;
mod sidr;

use super::machine::{Action, Endpoints, Outcome, QpError, QpOp, Refused, RequestId, State};
use super::types::{AcceptArgs, ConnectArgs, ConnectInfo, EpError, QpIdent, RequestInfo};
use crate::keys::KeyGen;
use ndverbs_proto::cm::{CmAgent, CmConfig};
use ndverbs_proto::rc::{ModifyError, PathMtu, QpState};
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::cm::attr;
use ndverbs_wire::mad::Mad;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

pub(super) const PORT: u16 = 7000;

/// Which side of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Who {
    A,
    B,
}

/// The kind of a QP operation, for comparing logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    CheckInit,
    ToRts,
    ToError,
}

impl Op {
    fn of(op: &QpOp) -> Op {
        match op {
            QpOp::CheckInit | QpOp::CheckReady => Op::CheckInit,
            QpOp::ToRts(_) => Op::ToRts,
            QpOp::ToError => Op::ToError,
        }
    }
}

/// One NIC's worth: CM agent, endpoint machine, fake QPs, and what the
/// machine asked for.
pub(super) struct Side {
    pub cm: CmAgent,
    pub eps: Endpoints,
    now: Instant,
    /// The QPs the "core" has, by identity: a QP released and a new one
    /// with its number are two entries' worth.
    pub qps: BTreeMap<QpIdent, QpState>,
    next_qpn: u32,
    next_generation: u64,
    /// QPNs reserved for time-wait.
    pub reserved: BTreeSet<u32>,
    /// Every completed request, once.
    pub done: BTreeMap<RequestId, Outcome>,
    /// Every QP operation asked for, in order.
    pub ops: Vec<(QpIdent, Op)>,
    /// Destroy this QP just before the machine's next operation of this
    /// kind on it (the application released it between phases).
    pub vanish: Option<(QpIdent, Op)>,
    /// QPs the application moved past INIT itself: (peer QPN, receive
    /// PSN, send PSN).
    pub moved: BTreeMap<QpIdent, (u32, u32, u32)>,
}

impl Side {
    fn new(ip: &str, guid: u64) -> Self {
        let mut cfg = CmConfig::new(ip.parse().unwrap(), guid, guid);
        // Short timers: REQ/REP/DREQ retries every ~50 ms, 3 retries.
        cfg.packet_life_time = 12;
        cfg.cm_response_timeout = 12;
        cfg.max_cm_retries = 3;
        Side {
            cm: CmAgent::new(cfg),
            eps: Endpoints::new(KeyGen::seeded(guid)),
            now: Instant::ZERO,
            qps: BTreeMap::new(),
            next_qpn: 0x100 * guid as u32,
            next_generation: 0,
            reserved: BTreeSet::new(),
            done: BTreeMap::new(),
            ops: Vec::new(),
            vanish: None,
            moved: BTreeMap::new(),
        }
    }

    pub fn ip(&self) -> IpAddr {
        self.cm.config().local_addr
    }

    /// A new QP in INIT.
    pub fn qp(&mut self) -> QpIdent {
        self.next_qpn += 1;
        self.qp_numbered(self.next_qpn)
    }

    /// A new QP in INIT with number `qpn` (one released before, say).
    pub fn qp_numbered(&mut self, qpn: u32) -> QpIdent {
        self.next_generation += 1;
        let id = QpIdent {
            qpn,
            generation: self.next_generation,
        };
        self.qps.insert(id, QpState::Init);
        id
    }

    /// The application moves QP `qp` to RTS itself with `s`'s attributes
    /// (rdma_cm's `qp_num` mode).
    pub fn move_to_rts(&mut self, qp: QpIdent, s: &ndverbs_proto::cm::QpSetup) {
        self.qps.insert(qp, QpState::Rts);
        self.moved.insert(qp, (s.dest_qpn, s.rq_psn, s.sq_psn));
    }

    /// The application releases QP `qp` and creates a new one, which gets
    /// the same number (QPNs are random: it can happen).
    pub fn reuse(&mut self, qp: QpIdent) -> QpIdent {
        self.qps.remove(&qp);
        self.qp_numbered(qp.qpn)
    }

    /// Applies the machine's actions and the CM's events until both are quiet.
    pub fn settle(&mut self) {
        loop {
            let mut busy = false;
            while let Some(a) = self.eps.poll_action() {
                self.apply(a);
                busy = true;
            }
            while let Some(ev) = self.cm.poll_event() {
                self.eps.handle_cm_event(self.now, &mut self.cm, ev);
                busy = true;
            }
            if !busy {
                return;
            }
        }
    }

    fn apply(&mut self, a: Action) {
        match a {
            Action::Qp {
                request, qp, op, ..
            } => {
                let kind = Op::of(&op);
                self.ops.push((qp, kind));
                if self.vanish == Some((qp, kind)) {
                    self.qps.remove(&qp);
                    self.vanish = None;
                }
                let r = self.fake_qp(qp, &op);
                self.eps
                    .handle_qp_result(self.now, &mut self.cm, request, r);
            }
            Action::Complete { request, outcome } => {
                let again = self.done.insert(request, outcome);
                assert!(again.is_none(), "{request:?} completed twice");
            }
            Action::ReserveQpn(q) => {
                self.reserved.insert(q);
            }
            Action::ReleaseQpn(q) => {
                self.reserved.remove(&q);
            }
        }
    }

    /// What the engine's QP table answers.
    fn fake_qp(&mut self, qp: QpIdent, op: &QpOp) -> Result<(), QpError> {
        let Some(state) = self.qps.get_mut(&qp) else {
            return Err(QpError::Gone);
        };
        match op {
            QpOp::CheckInit if *state == QpState::Init => Ok(()),
            QpOp::CheckInit => Err(QpError::NotInit),
            QpOp::CheckReady if matches!(*state, QpState::Init | QpState::Rtr | QpState::Rts) => {
                Ok(())
            }
            QpOp::CheckReady => Err(QpError::NotInit),
            QpOp::ToRts(s) if matches!(*state, QpState::Rtr | QpState::Rts) => {
                let rts = *state == QpState::Rts;
                match self.moved.get(&qp) {
                    Some(&(qpn, rq, sq))
                        if (qpn, rq) == (s.dest_qpn, s.rq_psn) && (!rts || sq == s.sq_psn) =>
                    {
                        Ok(())
                    }
                    _ => Err(QpError::OtherConnection),
                }
            }
            QpOp::ToRts(_) if *state == QpState::Init => {
                *state = QpState::Rts;
                Ok(())
            }
            QpOp::ToRts(_) => Err(QpError::Refused(ModifyError::IllegalTransition {
                from: *state,
                to: QpState::Rtr,
            })),
            QpOp::ToError => {
                *state = QpState::Err;
                Ok(())
            }
        }
    }

    /// The QP operations asked for on `qp`, in order.
    pub fn ops_on(&self, qp: QpIdent) -> Vec<Op> {
        self.ops
            .iter()
            .filter(|(q, _)| *q == qp)
            .map(|(_, o)| *o)
            .collect()
    }

    pub fn state(&self, ep: u32) -> &State {
        &self.eps.eps[&ep].state
    }

    /// The endpoint's state, by name (`Debug` of the variant, no fields).
    pub fn state_name(&self, ep: u32) -> String {
        let s = format!("{:?}", self.state(ep));
        s.split([' ', '(']).next().unwrap_or_default().to_string()
    }

    pub fn pending(&self, id: RequestId) -> bool {
        !self.done.contains_key(&id)
    }

    /// The outcome of a request that returns nothing (`None`: pending).
    pub fn result(&self, id: RequestId) -> Option<Result<(), EpError>> {
        match self.done.get(&id)? {
            Outcome::Done(r) => Some(r.clone()),
            o => panic!("{id:?} is not a unit request: {o:?}"),
        }
    }

    /// The outcome of a Connect.
    pub fn connect_result(&self, id: RequestId) -> Option<Result<ConnectInfo, EpError>> {
        match self.done.get(&id)? {
            Outcome::Connect(r) => Some(r.clone()),
            o => panic!("{id:?} is not a Connect: {o:?}"),
        }
    }

    /// The outcome of a GetConnectionRequest.
    pub fn request_result(&self, id: RequestId) -> Option<Result<RequestInfo, EpError>> {
        match self.done.get(&id)? {
            Outcome::Request(r) => Some(r.clone()),
            o => panic!("{id:?} is not a GetConnectionRequest: {o:?}"),
        }
    }

    /// The private data of the connection request GetConnectionRequest `id`
    /// handed over: the three-byte word a test sent (the CM pads it).
    pub fn request_data(&self, id: RequestId) -> Vec<u8> {
        let info = self.request_result(id).unwrap().unwrap();
        info.private_data[..3].to_vec()
    }

    // ---- the application's calls, each followed by what the core does ----

    pub fn create(&mut self) -> u32 {
        self.eps.create()
    }

    fn then<T>(&mut self, r: T) -> T {
        self.settle();
        r
    }

    pub fn listen(&mut self, ep: u32, backlog: usize) -> Result<(), Refused> {
        let r = self.eps.listen(&mut self.cm, ep, PORT, backlog);
        self.then(r)
    }

    pub fn get_request(&mut self, listener: u32, new_ep: u32) -> Result<RequestId, Refused> {
        let r = self.eps.get_request(&self.cm, listener, new_ep);
        self.then(r)
    }

    pub fn connect(&mut self, ep: u32, qp: QpIdent, to: IpAddr) -> Result<RequestId, Refused> {
        self.connect_with(ep, qp, cargs(to))
    }

    pub fn connect_with(
        &mut self,
        ep: u32,
        qp: QpIdent,
        args: ConnectArgs,
    ) -> Result<RequestId, Refused> {
        let exists = self.qps.contains_key(&qp);
        let r = self
            .eps
            .connect(self.now, &mut self.cm, ep, qp, args, exists);
        self.then(r)
    }

    /// A fresh endpoint connecting a fresh QP (in INIT) as `args` say:
    /// (endpoint, QP, the Connect).
    pub fn connect_new(&mut self, args: ConnectArgs) -> (u32, QpIdent, RequestId) {
        let (qp, ep) = (self.qp(), self.create());
        let connect = self.connect_with(ep, qp, args).unwrap();
        (ep, qp, connect)
    }

    pub fn complete_connect(&mut self, ep: u32, qp: QpIdent) -> Result<RequestId, Refused> {
        let r = self.eps.complete_connect(self.now, &mut self.cm, ep, qp);
        self.then(r)
    }

    pub fn accept(&mut self, ep: u32, qp: QpIdent) -> Result<RequestId, Refused> {
        let r = self.eps.accept(self.now, &mut self.cm, ep, qp, aargs());
        self.then(r)
    }

    pub fn reject(&mut self, ep: u32, pd: &[u8]) -> Result<(), Refused> {
        let r = self.eps.reject(self.now, &mut self.cm, ep, pd);
        self.then(r)
    }

    pub fn disconnect(&mut self, ep: u32, qp: QpIdent) -> Result<RequestId, Refused> {
        let r = self.eps.disconnect(self.now, &mut self.cm, ep, qp);
        self.then(r)
    }

    pub fn notify(&mut self, ep: u32) -> Result<RequestId, Refused> {
        let r = self.eps.notify_disconnect(ep);
        self.then(r)
    }

    pub fn cancel(&mut self, ep: u32) -> Result<(), Refused> {
        let r = self.eps.cancel(self.now, &mut self.cm, ep);
        self.then(r)
    }

    pub fn destroy(&mut self, ep: u32) -> Result<(), Refused> {
        let r = self.eps.destroy(self.now, &mut self.cm, ep);
        self.then(r)
    }

    pub fn remove_device(&mut self) {
        self.eps.remove_device(&mut self.cm);
        self.settle();
    }
}

pub(super) fn cargs(to: IpAddr) -> ConnectArgs {
    ConnectArgs {
        remote: to,
        remote_port: PORT,
        local_port: 40000,
        responder_resources: 4,
        initiator_depth: 2,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: PathMtu::Mtu1024,
        private_data: b"from a".to_vec(),
    }
}

pub(super) fn aargs() -> AcceptArgs {
    AcceptArgs {
        responder_resources: 8,
        initiator_depth: 8,
        rnr_retry_count: 7,
        private_data: b"from b".to_vec(),
    }
}

/// Two sides and the wire between them.
pub(super) struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    /// Every MAD put on the wire: (sender, attribute, dropped).
    pub wire: Vec<(Who, u16, bool)>,
    /// Drop every MAD with this attribute from this sender.
    pub drop: Vec<(Who, u16)>,
}

impl Pair {
    pub fn new() -> Self {
        Pair {
            a: Side::new("10.0.0.1", 1),
            b: Side::new("10.0.0.2", 2),
            now: Instant::ZERO,
            wire: Vec::new(),
            drop: Vec::new(),
        }
    }

    pub fn side(&mut self, who: Who) -> &mut Side {
        match who {
            Who::A => &mut self.a,
            Who::B => &mut self.b,
        }
    }

    /// Carries MADs both ways until both sides are quiet.
    pub fn pump(&mut self) {
        loop {
            self.a.settle();
            self.b.settle();
            let mut moved = false;
            for from in [Who::A, Who::B] {
                while let Some(t) = self.side(from).cm.poll_transmit() {
                    let attr = Mad::parse(&t.mad).expect("a MAD").header.attr_id;
                    let dropped = self.drop.contains(&(from, attr));
                    self.wire.push((from, attr, dropped));
                    if dropped {
                        continue;
                    }
                    let src = self.side(from).ip();
                    let to = match from {
                        Who::A => &mut self.b,
                        Who::B => &mut self.a,
                    };
                    to.cm.handle_mad(self.now, src, &t.mad);
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Lets `d` pass, firing every CM timer due on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = [self.a.cm.poll_timeout(), self.b.cm.poll_timeout()]
                .into_iter()
                .flatten()
                .filter(|&t| t <= end)
                .min();
            self.now = next.unwrap_or(end);
            self.a.now = self.now;
            self.b.now = self.now;
            for s in [Who::A, Who::B] {
                let now = self.now;
                let side = self.side(s);
                if side.cm.poll_timeout().is_some_and(|t| t <= now) {
                    side.cm.handle_timeout(now);
                }
            }
            self.pump();
            if next.is_none() {
                return;
            }
        }
    }

    /// The attributes `from` sent (dropped ones included), in order.
    pub fn sent(&self, from: Who) -> Vec<u16> {
        self.wire
            .iter()
            .filter(|(w, _, _)| *w == from)
            .map(|(_, a, _)| *a)
            .collect()
    }

    /// Request `id` of `who`'s, whose QP `qp` was released just before the
    /// machine's next operation on it, failed at once with `NoQp`, and
    /// carrying the MADs puts no `attr` of `who`'s on the wire.
    #[track_caller]
    pub fn lost_its_qp(&mut self, who: Who, id: RequestId, qp: QpIdent, attr: u16) {
        let failure = self.side(who).done.get(&id).and_then(Outcome::error);
        assert_eq!(failure, Some(&EpError::NoQp(qp.qpn)));
        self.pump();
        assert!(!self.sent(who).contains(&attr));
    }

    /// The states of both ends of `c`, by name (see [`Side::state_name`]).
    pub fn states(&self, c: &Conn) -> [String; 2] {
        [self.a.state_name(c.ea), self.b.state_name(c.eb)]
    }

    /// Forgets the MADs sent so far.
    pub fn clear_wire(&mut self) {
        self.wire.clear();
    }

    /// B listens with one GetConnectionRequest waiting on a fresh endpoint:
    /// (listener, eb, the GetConnectionRequest).
    pub fn listen(&mut self) -> (u32, u32, RequestId) {
        let l = self.b.create();
        self.b.listen(l, 4).unwrap();
        let eb = self.b.create();
        let get = self.b.get_request(l, eb).unwrap();
        (l, eb, get)
    }

    /// A's endpoint `ea` connects QP `qa` to B again, and the REQ reaches
    /// B's waiting GetConnectionRequest `get`: the endpoint is usable anew.
    pub fn connect_again(&mut self, ea: u32, qa: QpIdent, get: RequestId) {
        let to = self.b.ip();
        self.a.connect(ea, qa, to).unwrap();
        self.pump();
        assert!(self.b.request_result(get).unwrap().is_ok());
    }

    // ---- a connection taken as far as a test needs it, each fixture one
    // step past the one it starts from ----

    /// B listens with a GetConnectionRequest waiting, and a fresh endpoint
    /// of A's has started a Connect to it (the REQ not yet carried): the
    /// ids, and the Connect.
    pub fn connecting() -> (Pair, Conn, RequestId) {
        let mut p = Pair::new();
        let (listener, eb, get) = p.listen();
        let qb = p.b.qp();
        let to = p.b.ip();
        let (ea, qa, connect) = p.a.connect_new(cargs(to));
        let c = Conn {
            ea,
            eb,
            qa,
            qb,
            listener,
            get,
        };
        (p, c, connect)
    }

    /// The REQ has arrived: B's GetConnectionRequest is done, A's Connect
    /// waits for the REP (returned).
    pub fn requested() -> (Pair, Conn, RequestId) {
        let (mut p, c, connect) = Pair::connecting();
        p.pump();
        assert!(p.b.request_result(c.get).unwrap().is_ok());
        (p, c, connect)
    }

    /// B accepted and its REP arrived: A's Connect is done, B's Accept
    /// (returned) waits for the RTU.
    pub fn accepted() -> (Pair, Conn, RequestId) {
        let (mut p, c, connect) = Pair::requested();
        let accept = p.b.accept(c.eb, c.qb).unwrap();
        p.pump();
        assert!(p.a.connect_result(connect).unwrap().is_ok());
        (p, c, accept)
    }

    /// A completed the connection but its RTU was lost: A's endpoint is
    /// connected, B's Accept (returned) still waits.
    pub fn rtu_lost() -> (Pair, Conn, RequestId) {
        let (mut p, c, accept) = Pair::accepted();
        p.drop.push((Who::A, RTU));
        p.a.complete_connect(c.ea, c.qa).unwrap();
        p.pump();
        assert!(p.b.pending(accept));
        (p, c, accept)
    }

    /// A connected pair, every request done, and the wire forgotten.
    pub fn connected() -> (Pair, Conn) {
        let (mut p, c, accept) = Pair::accepted();
        let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
        p.pump();
        assert_eq!(p.a.result(complete), Some(Ok(())));
        assert_eq!(p.b.result(accept), Some(Ok(())));
        assert_eq!(p.states(&c), ["Connected", "Connected"]);
        p.clear_wire();
        (p, c)
    }
}

/// The REJ reason and private data a request failed with; a panic if it
/// did not fail with `Rejected`.
#[track_caller]
pub(super) fn rejected<T: std::fmt::Debug>(outcome: Option<Result<T, EpError>>) -> (u16, Vec<u8>) {
    match outcome {
        Some(Err(EpError::Rejected {
            reason,
            private_data,
        })) => (reason, private_data),
        other => panic!("not rejected: {other:?}"),
    }
}

/// The ids of a connection made by the [`Pair`] fixtures.
#[derive(Debug, Clone, Copy)]
pub(super) struct Conn {
    pub ea: u32,
    pub eb: u32,
    pub qa: QpIdent,
    pub qb: QpIdent,
    pub listener: u32,
    /// B's GetConnectionRequest, which `eb` waited on.
    pub get: RequestId,
}

pub(super) const REQ: u16 = attr::REQ;
pub(super) const REJ: u16 = attr::REJ;
pub(super) const REP: u16 = attr::REP;
pub(super) const RTU: u16 = attr::RTU;
pub(super) const DREQ: u16 = attr::DREQ;
pub(super) const DREP: u16 = attr::DREP;
pub(super) const MRA: u16 = attr::MRA;

/// Long enough for every CM retry to run out (and time-wait to end).
pub(super) const LONG: Duration = Duration::from_secs(30);

#[test]
fn the_machine_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Endpoints>();
}
