//! Shared ports across processes: several processes open a NIC on one
//! address, RC traffic and UD datagrams reach the right one, a killed member frees its
//! share, packets for a gone process are counted and dropped, listeners
//! are host-wide, and SIDR (UD service ID resolution) finds its listener
//! and its requester.
//!
//! Each member is this test binary run again (`harness = false`: `main`
//! tells a member from the test run by [`ROLE`]), driven by lines on its
//! stdin and answering on its stdout, so a member can be SIGKILLed like a
//! crashing MPI rank. The other side of the traffic runs in the test
//! process, on an address of its own.

use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::cq::CompletionQueue;
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, SidrArgs};
use ndverbs_engine::mr::{Region, RegionBuf};
use ndverbs_engine::nic::{Nic, QpInit, QpShared};
use ndverbs_proto::mem::{Access, Sge};
use ndverbs_proto::rc::{
    AttrMask, PathMtu, QpAttr, QpCaps, QpState, RcConnection, RecvWr, SendOp, SendWr, WcStatus,
};
use ndverbs_proto::ud::{UdDest, UdSendWr, GRH_LEN};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set in a member's environment: its progress mode (`thread`/`manual`).
const ROLE: &str = "NDV_SHARE_TEST_MEMBER";
/// How long any one answer may take.
const LIMIT: Duration = Duration::from_secs(20);
/// The Q_Key of the UD QPs.
const UD_QKEY: u32 = 0x5151_0000;

/// One side's objects: NIC, CQ, one RC QP, a 4 KiB region.
struct Side {
    nic: Nic,
    cq: Arc<CompletionQueue>,
    qps: Vec<Arc<QpShared>>,
    mr: Arc<Region>,
    pd: u32,
    cq_id: u32,
}

impl Side {
    fn open(ip: IpAddr, share: bool, progress: Progress) -> Side {
        let cfg = NicConfig {
            progress,
            share_port: share,
            ..NicConfig::default()
        };
        let nic = Nic::open_with(ip, cfg).expect("open the NIC");
        let pd = nic.alloc_pd().unwrap();
        let (cq_id, cq) = nic.create_cq(256).unwrap();
        let mr = nic
            .reg_mr(pd, RegionBuf::alloc(4096).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        Side {
            nic,
            cq,
            qps: Vec::new(),
            mr,
            pd,
            cq_id,
        }
    }

    /// What both kinds of QP are created with: the side's PD and CQ, 64
    /// receives of one SGE.
    fn qp_init(&self) -> QpInit {
        QpInit {
            pd: self.pd,
            send_cq: self.cq_id,
            recv_cq: self.cq_id,
            srq: None,
            caps: QpCaps::default(),
            max_recv_wr: 64,
            max_recv_sge: 1,
        }
    }

    /// A new QP; returns its index.
    fn qp(&mut self) -> usize {
        let qp = self.nic.create_qp(self.qp_init()).unwrap();
        self.qps.push(qp);
        self.qps.len() - 1
    }

    /// A new UD QP in RTS with Q_Key [`UD_QKEY`]; returns its index.
    fn ud_qp(&mut self) -> usize {
        let qp = self.nic.create_ud_qp(self.qp_init()).unwrap();
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qkey: UD_QKEY,
            ..QpAttr::default()
        };
        let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
        self.nic.modify_qp(qp.qpn(), &a, init).unwrap();
        a.qp_state = QpState::Rtr;
        self.nic.modify_qp(qp.qpn(), &a, AttrMask::STATE).unwrap();
        a.qp_state = QpState::Rts;
        let rts = AttrMask::STATE | AttrMask::SQ_PSN;
        self.nic.modify_qp(qp.qpn(), &a, rts).unwrap();
        self.qps.push(qp);
        self.qps.len() - 1
    }

    /// Sends `text` as a datagram from UD QP `i` to QP `qpn` at `to`.
    fn send_ud(&self, i: usize, to: IpAddr, qpn: u32, text: &str) {
        self.mr.write(0, text.as_bytes()).unwrap();
        let sge = Sge::new(self.mr.addr(), text.len() as u32, self.mr.lkey());
        let dest = UdDest::new(to, qpn, UD_QKEY);
        self.nic
            .post_ud_send(&self.qps[i], UdSendWr::new(9, dest, vec![sge]))
            .unwrap();
    }

    /// Connects QP `i` with the default retries: a packet dropped while a
    /// member's steering is being fixed is sent again.
    fn connect(&self, i: usize, peer: IpAddr, peer_qpn: u32) {
        self.connect_with(i, RcConnection::new(peer_qpn).to_peer(peer));
    }

    fn connect_with(&self, i: usize, c: RcConnection) {
        for (attr, mask) in c.steps() {
            self.nic.modify_qp(self.qps[i].qpn(), &attr, mask).unwrap();
        }
    }

    /// A new QP towards the QPN of a dead process, which gives up after
    /// one retry 4 ms later.
    fn dead_end(&mut self, peer: IpAddr, peer_qpn: u32) -> usize {
        let i = self.qp();
        let mut c = RcConnection::new(peer_qpn).to_peer(peer);
        c.retry_cnt = 1;
        c.timeout = 10;
        self.connect_with(i, c);
        i
    }

    fn post_recv(&self, i: usize) {
        let sge = Sge::new(self.mr.addr() + 2048, 2048, self.mr.lkey());
        self.nic
            .post_recv(&self.qps[i], RecvWr::new(7, vec![sge]))
            .unwrap();
    }

    fn send(&self, i: usize, text: &str) {
        self.mr.write(0, text.as_bytes()).unwrap();
        let sge = Sge::new(self.mr.addr(), text.len() as u32, self.mr.lkey());
        self.nic
            .post_send(&self.qps[i], SendWr::new(9, SendOp::Send, vec![sge]))
            .unwrap();
    }

    /// The next completion (progressing a manual NIC), within [`LIMIT`].
    fn completion(&self) -> Option<ndverbs_proto::rc::WorkCompletion> {
        let t0 = Instant::now();
        while t0.elapsed() < LIMIT {
            if self.nic.mode() == Progress::Manual {
                self.nic.progress();
            }
            if let Some(wc) = self.cq.poll_one() {
                return Some(wc);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    }
}

// ---- the member process -------------------------------------------------

/// A member: opens the shared NIC on the address in its first argument and
/// follows commands, one per line (see `Member`'s methods for the answers).
fn member(progress: Progress, ip: IpAddr) {
    let mut side = Side::open(ip, true, progress);
    let port = side.nic.shared_port().expect("a shared port");
    let out = std::io::stdout();
    let say = |s: String| {
        let mut o = out.lock();
        let _ = writeln!(o, "{s}");
        let _ = o.flush();
    };
    say(format!("ready {}", port.slot()));
    // A manual-progress member runs its engine between commands too.
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    loop {
        let line = match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if progress == Progress::Manual {
                    side.nic.progress();
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stdin closed: leave as a program that removes its device
                // does (the engine's thread would otherwise still hold the
                // NIC when the process ends, which is a crash to the others).
                side.nic.remove();
                return;
            }
        };
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["qp", peer, peer_qpn] => {
                let i = side.qp();
                let qpn = side.qps[i].qpn();
                side.connect(i, peer.parse().unwrap(), peer_qpn.parse().unwrap());
                for _ in 0..8 {
                    side.post_recv(i);
                }
                say(format!("qp {qpn}"));
            }
            ["udqp"] => {
                let i = side.ud_qp();
                for _ in 0..8 {
                    side.post_recv(i);
                }
                say(format!("udqp {}", side.qps[i].qpn()));
            }
            ["udexpect"] => {
                // A datagram within 300 ms (UD loses what it loses: the
                // test sends again), its text behind the GRH area.
                let t0 = Instant::now();
                let wc = loop {
                    if progress == Progress::Manual {
                        side.nic.progress();
                    }
                    if let Some(wc) = side.cq.poll_one() {
                        break Some(wc);
                    }
                    if t0.elapsed() > Duration::from_millis(300) {
                        break None;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                };
                match wc {
                    Some(wc) if wc.status == WcStatus::Success && wc.grh => {
                        let mut buf = vec![0; wc.byte_len as usize - GRH_LEN];
                        side.mr.read(2048 + GRH_LEN, &mut buf).unwrap();
                        // The receive it took, posted again.
                        if let Some(i) = side.qps.iter().position(|q| q.qpn() == wc.qpn) {
                            side.post_recv(i);
                        }
                        say(format!("got {}", String::from_utf8_lossy(&buf)));
                    }
                    None => say("none".into()),
                    other => say(format!("failed {other:?}")),
                }
            }
            ["newqp"] => {
                let i = side.qp();
                say(format!("newqp {i} {}", side.qps[i].qpn()));
            }
            ["connect", i, peer, peer_qpn] => {
                let i: usize = i.parse().unwrap();
                side.connect(i, peer.parse().unwrap(), peer_qpn.parse().unwrap());
                for _ in 0..8 {
                    side.post_recv(i);
                }
                say("connected".into());
            }
            ["expect"] => match side.completion() {
                Some(wc) if wc.status == WcStatus::Success => {
                    let mut buf = vec![0; wc.byte_len as usize];
                    side.mr.read(2048, &mut buf).unwrap();
                    say(format!("got {}", String::from_utf8_lossy(&buf)));
                }
                other => say(format!("failed {other:?}")),
            },
            ["listen", p] => match side.nic.create_ep() {
                Ok(ep) => match side.nic.ep_listen(ep, p.parse().unwrap(), 4) {
                    Ok(()) => say("listening".into()),
                    Err(ndverbs_engine::error::EngineError::Io(e)) => {
                        say(format!("refused {:?}", e.kind()))
                    }
                    Err(e) => say(format!("refused {e}")),
                },
                Err(e) => say(format!("refused {e}")),
            },
            ["serve", p] => {
                // Listen on rdma_cm port `p`, accept one connection into a
                // new QP, and post receives on it.
                let i = side.qp();
                let qp = side.qps[i].clone();
                let (init, mask) = RcConnection::new(0).init();
                side.nic.modify_qp(qp.qpn(), &init, mask).unwrap();
                let (l, e) = (side.nic.create_ep().unwrap(), side.nic.create_ep().unwrap());
                side.nic.ep_listen(l, p.parse().unwrap(), 4).unwrap();
                let req = side.nic.ep_get_request(l, e).unwrap();
                say("serving".into());
                req.wait().unwrap();
                let args = AcceptArgs {
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    private_data: Vec::new(),
                };
                let rtu = side.nic.ep_accept(e, qp.ident(), args).unwrap();
                for _ in 0..8 {
                    side.post_recv(i);
                }
                rtu.wait().unwrap();
                // The peer's DREQ must reach this process too; its
                // Disconnect then answers with the DREP.
                let dreq = side.nic.ep_notify_disconnect(e).unwrap();
                say(format!("accepted {}", qp.qpn()));
                let nic = side.nic.clone();
                std::thread::spawn(move || {
                    let got = dreq.wait().is_ok();
                    let drep = nic.ep_disconnect(e, qp.ident()).map(|p| p.wait().is_ok());
                    let mut o = std::io::stdout().lock();
                    let _ = writeln!(o, "dreq {got} {}", drep.unwrap_or(false));
                    let _ = o.flush();
                });
            }
            ["udserve", p] => {
                // Listen on rdma_cm UDP port `p` and answer one SIDR
                // request with a new UD QP.
                let i = side.ud_qp();
                for _ in 0..8 {
                    side.post_recv(i);
                }
                let qpn = side.qps[i].qpn();
                let (l, e) = (side.nic.create_ep().unwrap(), side.nic.create_ep().unwrap());
                let ps = ndverbs_wire::cma::RDMA_PS_UDP;
                side.nic.ep_listen_ps(l, ps, p.parse().unwrap(), 4).unwrap();
                let req = side.nic.ep_get_request(l, e).unwrap();
                say("serving".into());
                let r = req.wait().unwrap();
                side.nic.ep_accept_ud(e, qpn, UD_QKEY, b"").unwrap();
                say(format!("udserved {qpn} {}", r.peer));
            }
            ["resolve", peer, p] => {
                let ep = side.nic.create_ep().unwrap();
                let args = SidrArgs {
                    remote: peer.parse().unwrap(),
                    remote_port: p.parse().unwrap(),
                    local_port: 40000,
                    private_data: Vec::new(),
                };
                match side.nic.ep_resolve(ep, args).unwrap().wait() {
                    Ok(i) => say(format!("resolved {} {} {:#x}", i.status, i.qpn, i.qkey)),
                    Err(e) => say(format!("failed {e}")),
                }
            }
            ["remove"] => {
                side.nic.remove();
                say("removed".into());
            }
            ["counters"] => {
                let c = port.counters();
                say(format!(
                    "counters {} {} {}",
                    side.nic.stats().get("drop_other_process"),
                    side.nic.counters().drop_unknown_qp.load(Ordering::Relaxed),
                    c.partial_reconciles.load(Ordering::Relaxed)
                ));
            }
            _ => say(format!("unknown {line}")),
        }
    }
}

// ---- driving members from the test --------------------------------------

/// A member process and its answers.
struct Member {
    child: Child,
    /// Closed to make the member leave cleanly.
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    slot: u8,
}

impl Member {
    fn spawn(ip: IpAddr, progress: &str) -> Member {
        let mut m = Member::start(ip, progress);
        m.ready();
        m
    }

    /// Waits for the member's NIC to be open.
    fn ready(&mut self) {
        self.slot = self.answer("ready")[0].parse().unwrap();
    }

    /// Starts a member without waiting for it.
    fn start(ip: IpAddr, progress: &str) -> Member {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg(ip.to_string())
            .env(ROLE, progress)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Member {
            child,
            stdin: Some(stdin),
            lines,
            slot: 0,
        }
    }

    /// The words after `word` of the next answer, which must start with it.
    fn answer(&mut self, word: &str) -> Vec<String> {
        let l = self
            .lines
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("no '{word}' from the member"));
        let mut w = l.split_whitespace().map(String::from);
        assert_eq!(w.next().as_deref(), Some(word), "member said {l:?}");
        w.collect()
    }

    fn ask(&mut self, cmd: &str, word: &str) -> Vec<String> {
        self.tell(cmd);
        self.answer(word)
    }

    fn tell(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().expect("the member's stdin");
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    /// A QP on the member connected to `peer`'s QP `peer_qpn`; its QPN.
    fn qp_to(&mut self, peer: IpAddr, peer_qpn: u32) -> u32 {
        self.ask(&format!("qp {peer} {peer_qpn}"), "qp")[0]
            .parse()
            .unwrap()
    }

    /// (another process's packets dropped, unknown-QP drops) of the member.
    fn counters(&mut self) -> (u64, u64) {
        let c = self.ask("counters", "counters");
        (c[0].parse().unwrap(), c[1].parse().unwrap())
    }

    /// The member's reconciles that did not learn every member's index.
    fn partial_reconciles(&mut self) -> u64 {
        self.ask("counters", "counters")[2].parse().unwrap()
    }

    fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }
}

impl Drop for Member {
    /// Ends the member as a program ends: it leaves (and the last one out
    /// removes the address's files); killed if it does not within 5 s.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects a new QP of `x` with a new QP of member `m` (on `y`); returns
/// the QP's index on `x` and the member's QPN.
fn link(x: &mut Side, x_ip: IpAddr, m: &mut Member, y: IpAddr) -> (usize, u32) {
    let i = x.qp();
    let m_qpn = m.qp_to(x_ip, x.qps[i].qpn());
    x.connect(i, y, m_qpn);
    (i, m_qpn)
}

/// `x` sends `text` on QP `i`; the member must receive exactly it.
fn deliver(x: &Side, i: usize, m: &mut Member, text: &str) {
    x.send(i, text);
    m.tell("expect");
    let got = m.answer("got").join(" ");
    assert_eq!(got, text);
    let wc = x.completion().expect("send completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
}

// ---- the tests ----------------------------------------------------------

fn three_processes_open_one_address() {
    let y = ndverbs_testkit::addr::v4();
    let mut ms: Vec<Member> = (0..3).map(|_| Member::spawn(y, "thread")).collect();
    let mut slots: Vec<u8> = ms.iter().map(|m| m.slot).collect();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2]);
    // Without sharing the address is taken.
    let e = Nic::open(y, Progress::Manual).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    for m in &mut ms {
        assert_eq!(m.counters().1, 0);
    }
    // A removed NIC leaves at once, although its process lives on: the
    // next process takes its slot.
    let freed = ms[1].slot;
    ms[1].ask("remove", "removed");
    let mut m = Member::spawn(y, "thread");
    assert_eq!(m.slot, freed);
    // Its join heard from every socket in the group: the removed NIC's
    // socket is out of it (one that stayed would never answer a probe).
    assert_eq!(m.partial_reconciles(), 0);
}

fn rc_traffic_reaches_the_right_process() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    let mut m1 = Member::spawn(y, "thread");
    let mut m2 = Member::spawn(y, "manual");
    let (i1, q1) = link(&mut x, x_ip, &mut m1, y);
    let (i2, q2) = link(&mut x, x_ip, &mut m2, y);
    assert_eq!(q1 >> 16, u32::from(m1.slot));
    assert_eq!(q2 >> 16, u32::from(m2.slot));
    for n in 0..5 {
        deliver(&x, i1, &mut m1, &format!("to one #{n}"));
        deliver(&x, i2, &mut m2, &format!("to two #{n}"));
    }
    // Both leave; the last one out removes the address's files.
    drop((m1, m2));
    let dir = ndverbs_engine::share::table::ShareDir::for_user().unwrap();
    let prefix = format!("{y}.");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `x` sends `text` from UD QP `i` to member `m`'s UD QP `qpn` at `y`
/// until it arrives (a datagram lost while the group's steering settles is
/// simply lost); the member must receive exactly it.
fn deliver_ud(x: &Side, i: usize, y: IpAddr, m: &mut Member, qpn: u32, text: &str) {
    for _ in 0..20 {
        x.send_ud(i, y, qpn, text);
        let wc = x.completion().expect("send completion");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        m.tell("udexpect");
        let l = m.lines.recv_timeout(LIMIT).expect("an answer to udexpect");
        if l == "none" {
            continue;
        }
        assert_eq!(l, format!("got {text}"));
        return;
    }
    panic!("{text:?} never reached the member");
}

fn ud_datagrams_reach_the_right_process() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    let i = x.ud_qp();
    let mut m1 = Member::spawn(y, "thread");
    let mut m2 = Member::spawn(y, "manual");
    let q1: u32 = m1.ask("udqp", "udqp")[0].parse().unwrap();
    let q2: u32 = m2.ask("udqp", "udqp")[0].parse().unwrap();
    // UD QPNs carry the slot as RC QPNs do: the kernel steers by it.
    assert_eq!(q1 >> 16, u32::from(m1.slot));
    assert_eq!(q2 >> 16, u32::from(m2.slot));
    for n in 0..5 {
        deliver_ud(&x, i, y, &mut m1, q1, &format!("datagram to one #{n}"));
        deliver_ud(&x, i, y, &mut m2, q2, &format!("datagram to two #{n}"));
    }
}

fn sigkill_frees_the_share_and_stale_packets_are_dropped() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    let mut m1 = Member::spawn(y, "thread");
    let mut m2 = Member::spawn(y, "thread");
    let mut m3 = Member::spawn(y, "thread");
    let (i1, dead_qpn) = link(&mut x, x_ip, &mut m1, y);
    let (i2, _) = link(&mut x, x_ip, &mut m2, y);
    let (i3, _) = link(&mut x, x_ip, &mut m3, y);
    deliver(&x, i1, &mut m1, "before");
    deliver(&x, i2, &mut m2, "before");
    deliver(&x, i3, &mut m3, "before");
    // Kill the first member: the last one takes its index in the kernel.
    let dead_slot = m1.slot;
    m1.kill();
    // Survivors still get their own traffic (misdelivered packets make
    // them reconcile; RC retransmits what was dropped meanwhile).
    deliver(&x, i2, &mut m2, "after the kill");
    deliver(&x, i3, &mut m3, "after the kill");
    // A packet for the dead process's QPN, while nobody holds its slot: the
    // kernel hashes it to a survivor, which counts it and drops it.
    let misdelivered = |m2: &mut Member, m3: &mut Member| m2.counters().0 + m3.counters().0;
    let before = misdelivered(&mut m2, &mut m3);
    let dead = x.dead_end(y, dead_qpn);
    x.send(dead, "to nobody");
    let wc = x.completion().expect("the send to the dead QP ends");
    assert_ne!(wc.status, WcStatus::Success, "{wc:?}");
    let after = misdelivered(&mut m2, &mut m3);
    assert!(after > before, "misdelivered {before} → {after}");
    // A new process joins at once and takes the dead one's slot.
    let t0 = Instant::now();
    let mut m4 = Member::spawn(y, "thread");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "join took {:?}",
        t0.elapsed()
    );
    assert_eq!(m4.slot, dead_slot);
    let (i4, _) = link(&mut x, x_ip, &mut m4, y);
    deliver(&x, i4, &mut m4, "newcomer");
    deliver(&x, i2, &mut m2, "still there");
    deliver(&x, i3, &mut m3, "still there");
    // X still sends to the dead process's QP: the packets reach the slot's
    // new owner, which has no such QP, counts them and drops them. (The QP
    // is in the error state after the last send: a fresh one.)
    let before = m4.counters().1;
    let dead = x.dead_end(y, dead_qpn);
    x.send(dead, "to the dead");
    let wc = x.completion().expect("the send to the dead QP ends");
    assert_ne!(wc.status, WcStatus::Success, "{wc:?}");
    let (_, after) = m4.counters();
    assert!(after > before, "unknown-QP drops {before} → {after}");
    // Nobody else ever completed it: the survivors' receive queues still
    // hold their receives (a further message arrives in order).
    deliver(&x, i2, &mut m2, "last");
}

fn members_join_and_die_together() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    // Five processes open the address at the same moment.
    let mut ms: Vec<Member> = (0..5)
        .map(|n| Member::start(y, if n % 2 == 0 { "thread" } else { "manual" }))
        .collect();
    for m in &mut ms {
        m.ready();
    }
    let mut slots: Vec<u8> = ms.iter().map(|m| m.slot).collect();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2, 3, 4]);
    let mut qps = Vec::new();
    for m in &mut ms {
        qps.push(link(&mut x, x_ip, m, y).0);
    }
    for (m, &i) in ms.iter_mut().zip(&qps) {
        deliver(&x, i, m, "all five");
    }
    // Two die at once: the kernel moves members in an order nobody sees;
    // the survivors' traffic still reaches each of them.
    let (mut b, mut a) = (ms.remove(3), ms.remove(1));
    qps.remove(3);
    qps.remove(1);
    a.child.kill().unwrap();
    b.child.kill().unwrap();
    a.child.wait().unwrap();
    b.child.wait().unwrap();
    for round in 0..3 {
        for (m, &i) in ms.iter_mut().zip(&qps) {
            deliver(&x, i, m, &format!("survivor {round}"));
        }
    }
}

fn listeners_are_host_wide() {
    let y = ndverbs_testkit::addr::v4();
    let mut m1 = Member::spawn(y, "thread");
    let mut m2 = Member::spawn(y, "manual");
    assert!(m1.ask("listen 7100", "listening").is_empty());
    // As the kernel's rdma_cm: EADDRINUSE.
    assert_eq!(m2.ask("listen 7100", "refused"), ["AddrInUse"]);
    m2.ask("listen 7101", "listening");
    // The listener's process dies: its port is free for another.
    m1.kill();
    m2.ask("listen 7100", "listening");
}

fn cm_connections_reach_their_listeners() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    let mut ms: Vec<Member> = (0..3).map(|_| Member::spawn(y, "thread")).collect();
    // Each member listens on a port of its own; X connects to each.
    let mut conns = Vec::new();
    for (n, m) in ms.iter_mut().enumerate() {
        m.ask(&format!("serve {}", 7200 + n), "serving");
    }
    for (n, m) in ms.iter_mut().enumerate() {
        let i = x.qp();
        let qp = x.qps[i].clone();
        let (init, mask) = RcConnection::new(0).init();
        x.nic.modify_qp(qp.qpn(), &init, mask).unwrap();
        let ep = x.nic.create_ep().unwrap();
        let args = ConnectArgs {
            remote: y,
            remote_port: 7200 + n as u16,
            local_port: 40000 + n as u16,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: PathMtu::Mtu1024,
            private_data: Vec::new(),
        };
        let rep = x.nic.ep_connect(ep, qp.ident(), args).unwrap();
        rep.wait().expect("REP from the listener's process");
        x.nic
            .ep_complete_connect(ep, qp.ident())
            .unwrap()
            .wait()
            .unwrap();
        let q: u32 = m.answer("accepted")[0].parse().unwrap();
        assert_eq!(q >> 16, u32::from(m.slot));
        conns.push((i, ep, qp));
    }
    for (n, m) in ms.iter_mut().enumerate() {
        deliver(&x, conns[n].0, m, &format!("over CM to {n}"));
    }
    // DREQ and DREP find their processes by the comm IDs' slots.
    for (n, m) in ms.iter_mut().enumerate() {
        let (_, ep, qp) = &conns[n];
        let done = x.nic.ep_disconnect(*ep, qp.ident()).unwrap();
        assert_eq!(m.answer("dreq"), ["true", "true"]);
        done.wait().expect("DREP");
    }
    for m in &mut ms {
        assert_eq!(
            m.counters().1,
            0,
            "a member dropped packets for unknown QPs"
        );
    }
}

fn sidr_reaches_its_listener_and_its_requester() {
    let (x_ip, y) = ndverbs_testkit::addr::pair_v4();
    let mut x = Side::open(x_ip, false, Progress::Thread);
    let i = x.ud_qp();
    let mut ms: Vec<Member> = (0..3).map(|_| Member::spawn(y, "thread")).collect();
    // Each member serves a UDP port of its own: X's SIDR_REQ for it is
    // steered by service ID, and the datagrams then by QPN.
    for (n, m) in ms.iter_mut().enumerate() {
        m.ask(&format!("udserve {}", 7300 + n), "serving");
    }
    for (n, m) in ms.iter_mut().enumerate() {
        let ep = x.nic.create_ep().unwrap();
        let args = SidrArgs {
            remote: y,
            remote_port: 7300 + n as u16,
            local_port: 41000 + n as u16,
            private_data: Vec::new(),
        };
        let info = x
            .nic
            .ep_resolve(ep, args)
            .unwrap()
            .wait()
            .expect("SIDR_REP");
        let w = m.answer("udserved");
        assert_eq!(w[1], x_ip.to_string());
        let qpn: u32 = w[0].parse().unwrap();
        assert_eq!((info.status, info.qpn, info.qkey), (0, qpn, UD_QKEY));
        assert_eq!(qpn >> 16, u32::from(m.slot));
        deliver_ud(&x, i, y, m, qpn, &format!("resolved datagram to {n}"));
    }
    // The other way: every member resolves X's service at once, from the
    // one shared address; each SIDR_REP finds its requester by the slot in
    // its request ID.
    let l = x.nic.create_ep().unwrap();
    x.nic
        .ep_listen_ps(l, ndverbs_wire::cma::RDMA_PS_UDP, 7310, 8)
        .unwrap();
    for m in ms.iter_mut() {
        m.tell(&format!("resolve {x_ip} 7310"));
    }
    for n in 0..ms.len() {
        let e = x.nic.create_ep().unwrap();
        let req = x.nic.ep_get_request(l, e).unwrap().wait().unwrap();
        assert_eq!(req.peer, y);
        // A QPN per request: each member must get its own answer.
        x.nic
            .ep_accept_ud(e, 0x100 + n as u32, 0x1234, b"")
            .unwrap();
    }
    let mut got: Vec<u32> = ms
        .iter_mut()
        .map(|m| {
            let w = m.answer("resolved");
            assert_eq!((w[0].as_str(), w[2].as_str()), ("0", "0x1234"));
            w[1].parse().unwrap()
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [0x100, 0x101, 0x102]);
    for m in &mut ms {
        assert_eq!(m.counters().1, 0, "a member dropped packets");
    }
}

fn main() {
    if let Ok(mode) = std::env::var(ROLE) {
        let ip = std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .expect("member address");
        let progress = if mode == "manual" {
            Progress::Manual
        } else {
            Progress::Thread
        };
        member(progress, ip);
        return;
    }
    let tests: [(&str, fn()); 8] = [
        (
            "three_processes_open_one_address",
            three_processes_open_one_address,
        ),
        (
            "rc_traffic_reaches_the_right_process",
            rc_traffic_reaches_the_right_process,
        ),
        (
            "ud_datagrams_reach_the_right_process",
            ud_datagrams_reach_the_right_process,
        ),
        (
            "sigkill_frees_the_share_and_stale_packets_are_dropped",
            sigkill_frees_the_share_and_stale_packets_are_dropped,
        ),
        (
            "members_join_and_die_together",
            members_join_and_die_together,
        ),
        ("listeners_are_host_wide", listeners_are_host_wide),
        (
            "cm_connections_reach_their_listeners",
            cm_connections_reach_their_listeners,
        ),
        (
            "sidr_reaches_its_listener_and_its_requester",
            sidr_reaches_its_listener_and_its_requester,
        ),
    ];
    // `cargo test -- <filter>` runs the tests whose names contain it.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut ran = 0;
    for (name, f) in tests {
        if !filter.is_empty() && !filter.iter().any(|p| name.contains(p.as_str())) {
            continue;
        }
        eprintln!("test {name} ...");
        let t0 = Instant::now();
        f();
        eprintln!("test {name} ... ok ({:?})", t0.elapsed());
        ran += 1;
    }
    eprintln!("{ran} shared-port tests passed");
}
