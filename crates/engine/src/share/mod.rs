//! Shared ports: any number of processes of one user on one IP address,
//! each with its own NIC, behind one UDP port 4791.
//!
//! Linux Soft-RoCE serves every process of a host through one `rxe0`; an
//! MPI job runs several ranks per host on one address. A process's
//! [`Nic`](crate::nic::Nic) opened with
//! [`NicConfig::share_port`](crate::config::NicConfig::share_port) does not
//! own `<ip>:4791`: it is one *member* of it, and the kernel hands each
//! datagram to the member that owns it. No daemon, no privileges.
//!
//! ## What is steered how
//!
//! Every member's socket binds `<ip>:4791` with `SO_REUSEPORT`, which makes
//! them one reuseport group, and the group carries a classic BPF program
//! (`SO_ATTACH_REUSEPORT_CBPF`, [`cbpf`]) that returns, for each datagram,
//! the index of the socket that gets it ([`steer`] says whose it is):
//!
//! * each member holds a **slot** (0..=254), and every QPN it allocates has
//!   the slot in bits 16..23: a data packet goes to the member of its
//!   destination QPN's high byte;
//! * a CM **REQ** goes to the member listening on its service ID (listeners
//!   are registered host-wide: a second process listening on the same
//!   rdma_cm port gets `EADDRINUSE`, as with the kernel's rdma_cm);
//! * every other **CM message** names our communication ID as its "remote
//!   communication ID", and each member's local communication IDs carry
//!   its slot in the high byte;
//! * a **probe** (an opcode no RoCE peer sends, a magic, a secret nonce)
//!   goes to the index it carries;
//! * anything else (and a slot or service nobody holds) gets an index
//!   past the group's end, so the kernel picks a member by hash: that
//!   member answers it if it can (a REJ for a service nobody listens on) or
//!   counts and drops it.
//!
//! ## Membership ([`table`])
//!
//! Indices are the kernel's: join order, and when a member closes, the
//! *last* member moves into its hole. A survivor cannot know the new order
//! when several members die at once, so members *learn* their index
//! instead. The files of one address (in `/dev/shm/ndverbs-<euid>`, 0700):
//! a host lock, one `flock`ed claim file per live slot (the kernel drops
//! the lock of a process that dies, SIGKILL included), a state file per
//! member (pid, its last probe answer, its listeners), the current probe
//! nonce and the last table attached.
//!
//! **Reconcile** (under the host lock): count the live slots `n`, write a
//! fresh nonce, send one probe per index `0..n` to `<ip>:4791`; each
//! member's receive path records the index its probe carried in its state
//! file ([`SharedPort::handle_probe`]). When every live slot answered
//! exactly once with distinct indices `0..n`, and the live set did not
//! change meanwhile, the coordinator attaches the program built from
//! (slot → index, service ID → index) and records it; otherwise it tries
//! again with a new nonce, and after [`ROUNDS`] rounds attaches what it
//! learned for sure (members that did not answer get no entry: their
//! packets fall back to the hash until the next reconcile).
//!
//! *Why a complete round is right.* Each live slot has exactly one
//! socket in the group, so the group has `g` sockets where `g` is `n` plus
//! sockets of members whose lock is gone but whose socket is not yet
//! closed, minus members that died after they were counted. The probe for
//! index `i < g` reaches the socket at index `i`, one for `i ≥ g` a socket
//! the kernel picks by hash. If `g > n`, either a live member sits at an
//! index `≥ n` and gets no probe (the round is incomplete), or all live
//! members sit below `n` and each gets its own (the extra sockets above
//! them only swap among themselves as they close). If `g < n`, a counted
//! member is dead and never answers, and the surplus probes land on
//! members that then have two (marked ambiguous, left out). So when all
//! `n` live slots answered, unambiguously, with distinct indices, and the
//! live set is the same afterwards, every answer is its member's index.
//! What can still go wrong is a change after the last look, below.
//!
//! **Who reconciles, when.** A joining process, right after binding (its
//! engine does not run yet, so it reads its own socket for its probe);
//! a member that registers or removes a listener; and any member whose
//! receive path finds a packet that is not its own (another slot's QPN or
//! comm ID, a REQ for a service another member listens on): the table is
//! stale, so it counts and drops the packet (`drop_other_process` in the
//! NIC's counters, [`ShareCounters::misdelivered`];
//! RC and the CM retransmit) and starts a reconcile on a thread of its own,
//! at most one at a time, at most one every [`RECONCILE_GAP`].
//!
//! **Leaving.** A member leaves when its NIC is removed
//! ([`Nic::remove`](crate::nic::Nic::remove): the link's descriptor is
//! pointed at an unbound socket, since handles may outlive the removal) or
//! dropped: it frees its slot and sends a *nudge* (a probe with index
//! [`NUDGE_INDEX`], which the kernel hashes to some member) so that a
//! remaining member reconciles; the last one out removes the address's
//! files. A process that ends without either (killed, or exiting while the
//! engine's thread still holds the NIC) leaves as a crash does, below; a
//! later join sweeps the files of addresses left without members.
//!
//! ## Failures
//!
//! * **A member crashes mid-transfer.** Its socket and its slot lock go
//!   with it; the last member takes its index. Packets for the dead slot now
//!   reach a survivor (or the hash), which counts them as misdelivered and
//!   reconciles; after that the dead slot has no entry and its packets are
//!   counted and dropped by whichever member the hash picks. Its peers' RC
//!   QPs time out as with any dead peer. A new process may take the slot at
//!   once: stale packets for the old QPNs find no QP and are counted as
//!   unknown-QP drops.
//! * **The coordinator crashes.** Its host lock is released; the program
//!   attached last stays (it is the group's, not the socket's). The next
//!   misdelivered packet, join or listen reconciles.
//! * **A packet for a process that is gone**: see above — counted, dropped,
//!   never delivered to another process's QP (QPNs and comm IDs differ in
//!   their slot byte, and each member drops what is not its slot's).
//!
//! ## Tests
//!
//! The program against its interpreter and the Rust rule (`cbpf`), the
//! files (`table`), the proof rule for a round's answers and two members
//! on real IPv4 and IPv6 sockets sharing one flow (this module);
//! `tests/share_port.rs` runs members as processes: three on one address,
//! RC traffic to the right one, SIGKILL and a newcomer, two killed at once,
//! five joining at once, host-wide listeners, CM connections to three
//! listeners.
//!
//! ## Limits
//!
//! * One user: the kernel joins only sockets of one effective UID.
//! * 255 members per address; 16 random bits per QPN instead of 24 (and
//!   24 of 32 for communication IDs), which makes them easier to guess for
//!   a blind attacker.
//! * A member answers probes only when its engine runs: a manual-progress
//!   NIC whose application does not call `progress` delays a round until
//!   [`ROUND_TIMEOUT`] and is then left out until the next one.
//! * After a crash, the first packets of the moved member are dropped until
//!   a reconcile (a few milliseconds); RC's retransmission recovers them, a
//!   CM REQ is retransmitted after its timeout (seconds with Linux's CM timers).
//! * Probes are local datagrams; a socket buffer so full that one is lost
//!   costs a round.
//! * No receive GRO on a member's socket: the kernel runs the program once
//!   per datagram, so a GRO-coalesced one (a peer's packets for several
//!   members are one UDP flow, 4791 to 4791) would go whole to the member
//!   of its first packet. A device with `rx-gro-list` (fraglist GRO, off by
//!   default) coalesces regardless and must not carry shared ports.
//! * A member that dies after the coordinator's last look at the live
//!   slots but before its program is attached leaves a stale table behind;
//!   the next misdelivered packet reconciles again.
//! * A QPN's time-wait is per process: a newcomer in a dead member's slot
//!   may draw one of its QPNs (1 in 65 536 per QP) while the dead QP's peer
//!   still sends; those packets then meet the new QP's PSN and source
//!   checks, as after a QPN reuse in the kernel.
//! * The files of an address whose members all died stay until some later
//!   join (of any address) sweeps them. The host lock file goes too: whoever
//!   locks a host lock checks afterwards that its name still names that
//!   file, so a removed one is never held by two coordinators at once.

pub mod cbpf;
pub mod probe;
pub mod steer;
mod sys;
pub mod table;

use crate::link::udp::RoceSocket;
use cbpf::Steering;
use socket2::Socket;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steer::Owner;
use table::{MemberState, Probed, ShareDir, SlotClaim};

/// Probe rounds a reconcile tries before it settles for what it learned.
pub const ROUNDS: usize = 4;
/// How long one round waits for every member's answer.
pub const ROUND_TIMEOUT: Duration = Duration::from_millis(300);
/// The shortest time between two reconciles a member starts for
/// misdelivered packets, after a complete one.
pub const RECONCILE_GAP: Duration = Duration::from_millis(20);
/// The same after a partial one: a member that does not answer (a
/// manual-progress NIC nobody progresses) must not keep the others busy.
pub const PARTIAL_GAP: Duration = Duration::from_secs(1);
/// How long a process waits for another's host lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a leaving member waits for it (to tidy up; it leaves anyway).
pub const LEAVE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);
/// The index of a *nudge*: a probe that asks its receiver to reconcile (a
/// member leaving sends one). No group has 256 members, so the kernel
/// hashes it to some member.
pub const NUDGE_INDEX: u8 = 255;

/// What a member counts.
#[derive(Debug, Default)]
pub struct ShareCounters {
    /// Packets that reached this member but are not its own (another
    /// slot's, a service another member listens on): dropped.
    pub misdelivered: AtomicU64,
    /// Probes of the current round answered.
    pub probes: AtomicU64,
    /// Probes refused (stale or forged nonce, another source).
    pub bad_probes: AtomicU64,
    /// Reconciles this member ran.
    pub reconciles: AtomicU64,
    /// Reconciles that ended without every live member's index.
    pub partial_reconciles: AtomicU64,
}

/// How a reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Every live member has its entry.
    Complete(Steering),
    /// The slots listed did not answer in time and have no entry.
    Partial(Steering, Vec<u8>),
}

/// Runs the owner's engine once while a reconcile waits for its own probe
/// (a manual-progress NIC's step; nothing with a worker thread); false
/// when the NIC is gone, which ends the reconcile.
pub type Pump = Box<dyn Fn() -> bool + Send + Sync>;

/// One live slot's answer to a round: its probe answer and its listeners.
struct Answer {
    slot: u8,
    probed: Option<Probed>,
    listens: Vec<u64>,
}

/// This process's membership in a shared port (see the module docs).
pub struct SharedPort {
    dir: ShareDir,
    ip: IpAddr,
    port: u16,
    slot: u8,
    /// The claim on the slot; taken (released) when the member leaves.
    claim: Mutex<Option<SlotClaim>>,
    /// Another descriptor of the member's socket, to attach programs;
    /// taken (closed) when the member leaves.
    sock: Mutex<Option<Socket>>,
    state: Mutex<MemberState>,
    counters: ShareCounters,
    pump: Mutex<Option<Arc<dyn Fn() -> bool + Send + Sync>>>,
    reconciling: AtomicBool,
    /// When the last reconcile this member started for misdelivered
    /// packets began, and how long to wait before the next.
    last_start: Mutex<Option<(Instant, Duration)>>,
}

impl std::fmt::Debug for SharedPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPort")
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("slot", &self.slot)
            .finish()
    }
}

impl SharedPort {
    /// Joins the shared port `<ip>:<port>` (4791 except in tests): claims
    /// a slot, binds a member socket and reconciles, reading the new socket
    /// for its own probe (datagrams that arrive meanwhile are not this new
    /// member's: counted as misdelivered). Returns the socket for the link.
    pub fn join(dir: ShareDir, ip: IpAddr, port: u16) -> io::Result<(RoceSocket, Arc<SharedPort>)> {
        let _host = dir.lock_host(ip, LOCK_TIMEOUT)?;
        // Files of addresses whose processes all died would stay forever.
        if let Err(e) = dir.sweep(ip) {
            tracing::debug!(error = %e, "cannot sweep the shared-port directory");
        }
        let claim = dir.claim_slot(ip)?;
        let sock = RoceSocket::bind_shared(ip, port)?;
        let me = Arc::new(SharedPort {
            sock: Mutex::new(Some(sock.dup_socket()?)),
            state: Mutex::new(MemberState {
                pid: std::process::id(),
                ..MemberState::default()
            }),
            dir,
            ip,
            port,
            slot: claim.slot(),
            claim: Mutex::new(Some(claim)),
            counters: ShareCounters::default(),
            pump: Mutex::new(None),
            reconciling: AtomicBool::new(false),
            last_start: Mutex::new(None),
        });
        me.save_state()?;
        let buf = std::cell::RefCell::new(vec![0u8; crate::link::MAX_DATAGRAM]);
        let pump = || {
            let mut buf = buf.borrow_mut();
            while let Ok(Some(d)) = sock.recv_datagram(&mut buf) {
                let p = &buf[..d.len];
                if !me.handle_probe(p, d.src.ip()) {
                    me.counters.misdelivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            true
        };
        me.reconcile_locked(&pump)?;
        Ok((sock, me))
    }

    /// The member's slot: the high byte of its QPNs and communication IDs.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// The shared address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// What this member counted.
    pub fn counters(&self) -> &ShareCounters {
        &self.counters
    }

    /// Sets what a reconcile calls while it waits ([`Pump`]).
    pub fn set_pump(&self, pump: Pump) {
        *lock(&self.pump) = Some(Arc::from(pump));
    }

    /// If `p` (a UDP payload from `src`) is a probe, takes it: a probe of
    /// the current round from this address records its index, a nudge
    /// starts a reconcile. Returns whether it was a probe (probes are never
    /// anything else).
    pub fn handle_probe(self: &Arc<Self>, p: &[u8], src: IpAddr) -> bool {
        let Some((index, nonce)) = probe::parse(p) else {
            return false;
        };
        let current = self.dir.read_epoch(self.ip).unwrap_or(0);
        if src != self.ip || nonce != current || nonce == 0 {
            self.counters.bad_probes.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if index == NUDGE_INDEX {
            self.request_reconcile();
            return true;
        }
        let mut st = lock(&self.state);
        let ambiguous = st.probe.is_some_and(|q| q.nonce == nonce);
        st.probe = Some(Probed {
            nonce,
            index,
            ambiguous,
        });
        self.counters.probes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.dir.write_state(self.ip, self.slot, &st) {
            tracing::warn!(error = %e, "cannot record the shared port's probe answer");
        }
        true
    }

    /// Whether this member may take the packet `p` (a verified UDP
    /// payload). A packet of another slot, or a REQ for a service another
    /// member listens on, is counted, dropped, and starts a reconcile.
    pub fn accepts(self: &Arc<Self>, p: &[u8]) -> bool {
        let mine = match steer::owner(p) {
            Owner::Slot(s) => s == self.slot,
            Owner::Service(sid) => {
                lock(&self.state).listens.contains(&sid)
                    || !self
                        .dir
                        .read_services(self.ip)
                        .unwrap_or_default()
                        .contains(&sid)
            }
            Owner::Probe(_) | Owner::Any => true,
        };
        if !mine {
            self.counters.misdelivered.fetch_add(1, Ordering::Relaxed);
            self.request_reconcile();
        }
        mine
    }

    /// Registers `sid` host-wide for this member and steers its REQs here;
    /// `AddrInUse` if another live member listens on it. Returns whether it
    /// was new (false: this member had it already).
    pub fn listen(&self, sid: u64) -> io::Result<bool> {
        let _host = self.dir.lock_host(self.ip, LOCK_TIMEOUT)?;
        for slot in self.dir.live_slots(self.ip, Some(self.slot))? {
            if slot == self.slot {
                continue;
            }
            if let Some(s) = self.dir.read_state(self.ip, slot)? {
                if s.listens.contains(&sid) {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("service ID {sid:#x} is listened on by process {}", s.pid),
                    ));
                }
            }
        }
        {
            let mut st = lock(&self.state);
            if st.listens.contains(&sid) {
                return Ok(false);
            }
            st.listens.push(sid);
        }
        self.save_state()?;
        self.reconcile_with_pump()?;
        Ok(true)
    }

    /// Removes `sid` from this member's listeners and the program.
    pub fn unlisten(&self, sid: u64) -> io::Result<()> {
        let _host = self.dir.lock_host(self.ip, LOCK_TIMEOUT)?;
        lock(&self.state).listens.retain(|&x| x != sid);
        self.save_state()?;
        self.reconcile_with_pump().map(|_| ())
    }

    /// Starts a reconcile on a thread of its own, unless one runs or the
    /// last one started less than [`RECONCILE_GAP`] ago ([`PARTIAL_GAP`]
    /// after a partial one).
    pub fn request_reconcile(self: &Arc<Self>) {
        {
            let mut last = lock(&self.last_start);
            if last.is_some_and(|(t, gap)| t.elapsed() < gap) {
                return;
            }
            if self.reconciling.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some((Instant::now(), RECONCILE_GAP));
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("ndv-share".into())
            .spawn(move || {
                match me.reconcile() {
                    Ok(Reconciled::Complete(_)) => {}
                    Ok(Reconciled::Partial(..)) => {
                        if let Some(l) = lock(&me.last_start).as_mut() {
                            l.1 = PARTIAL_GAP;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "shared port reconcile failed"),
                }
                me.reconciling.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.reconciling.store(false, Ordering::Release);
        }
    }

    /// Reconciles now (takes the host lock; see the module docs).
    pub fn reconcile(&self) -> io::Result<Reconciled> {
        let _host = self.dir.lock_host(self.ip, LOCK_TIMEOUT)?;
        self.reconcile_with_pump()
    }

    fn reconcile_with_pump(&self) -> io::Result<Reconciled> {
        let pump = lock(&self.pump).clone();
        match pump {
            Some(p) => self.reconcile_locked(&*p),
            None => self.reconcile_locked(&|| true),
        }
    }

    /// One reconcile; the caller holds the host lock.
    fn reconcile_locked(&self, pump: &dyn Fn() -> bool) -> io::Result<Reconciled> {
        self.counters.reconciles.fetch_add(1, Ordering::Relaxed);
        let gone = || io::Error::new(io::ErrorKind::NotConnected, "the member has left");
        let mut keys = crate::keys::KeyGen::new();
        let mut best = None;
        for _ in 0..ROUNDS {
            let live = self.dir.live_slots(self.ip, Some(self.slot))?;
            // Odd, so never 0, which no round has.
            let nonce = keys.next_u64() | 1;
            self.dir.write_epoch(self.ip, nonce)?;
            probe::send_round(self.ip, self.port, live.len() as u8, nonce)?;
            let t0 = Instant::now();
            let mut polls = 0u32;
            let answers = loop {
                if !pump() {
                    return Err(gone());
                }
                let answers = self.answers(&live, nonce)?;
                if answers.iter().all(|a| a.probed.is_some()) || t0.elapsed() > ROUND_TIMEOUT {
                    break answers;
                }
                // A member that left (or died) will not answer: every 10 ms
                // look whether the live set changed rather than wait it out.
                polls += 1;
                if polls % 20 == 0 && self.dir.live_slots(self.ip, Some(self.slot))? != live {
                    break answers;
                }
                std::thread::sleep(Duration::from_micros(500));
            };
            let (steering, missing) = steering(live.len(), &answers);
            if self.dir.live_slots(self.ip, Some(self.slot))? != live {
                continue; // someone came or went meanwhile: start over
            }
            if missing.is_empty() {
                self.attach(&steering)?;
                if self.dir.live_slots(self.ip, Some(self.slot))? == live {
                    return Ok(Reconciled::Complete(steering));
                }
                continue;
            }
            best = Some((steering, missing));
        }
        self.counters
            .partial_reconciles
            .fetch_add(1, Ordering::Relaxed);
        // Every round saw the membership change: keep the program there is
        // (the next change reconciles again).
        let (steering, missing) = best.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Interrupted,
                "the shared port's members kept changing",
            )
        })?;
        self.attach(&steering)?;
        tracing::debug!(
            ?missing,
            "shared port: members left out of the steering table"
        );
        Ok(Reconciled::Partial(steering, missing))
    }

    /// Each live slot's answer to round `nonce`.
    fn answers(&self, live: &[u8], nonce: u64) -> io::Result<Vec<Answer>> {
        let mut out = Vec::with_capacity(live.len());
        for &slot in live {
            let st = if slot == self.slot {
                Some(lock(&self.state).clone())
            } else {
                self.dir.read_state(self.ip, slot)?
            };
            let st = st.unwrap_or_default();
            out.push(Answer {
                slot,
                probed: st.probe.filter(|p| p.nonce == nonce),
                listens: st.listens,
            });
        }
        Ok(out)
    }

    fn attach(&self, s: &Steering) -> io::Result<()> {
        let prog = cbpf::program(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        {
            let sock = lock(&self.sock);
            let sock = sock.as_ref().ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotConnected, "the member has left")
            })?;
            sys::attach_reuseport_cbpf(sock.as_raw_fd(), &prog)?;
        }
        self.dir.write_table(self.ip, s)?;
        tracing::debug!(ip = %self.ip, ?s, "shared port: steering attached");
        Ok(())
    }

    fn save_state(&self) -> io::Result<()> {
        let st = lock(&self.state);
        self.dir.write_state(self.ip, self.slot, &st)
    }
}

impl SharedPort {
    /// Leaves the shared port while the link still holds the member socket
    /// as descriptor `link_fd` (a removed NIC, whose handles may live on):
    /// that descriptor is pointed at an unbound socket, so the member
    /// socket closes and leaves the group now rather than when the last
    /// handle goes. Then as when dropped (see [`Drop`]).
    pub fn leave(&self, link_fd: std::os::fd::RawFd) -> io::Result<()> {
        if lock(&self.claim).is_none() {
            return Ok(()); // left already
        }
        sys::detach(link_fd, self.ip.is_ipv6())?;
        self.leave_group();
        Ok(())
    }

    /// Closes this descriptor of the socket, frees the slot, and tidies up
    /// (see [`Drop`]); once.
    fn leave_group(&self) {
        if lock(&self.claim).is_none() {
            return; // left already (removed, then dropped)
        }
        // Out of the group and the live set first, without the host lock:
        // a coordinator that holds it is waiting for this member's answer,
        // which will not come, and its next look at the live set sees the
        // member gone and starts a new round.
        drop(lock(&self.sock).take());
        if lock(&self.claim).take().is_none() {
            return;
        }
        // Under the host lock if it comes soon, so that the last member out
        // may remove the address's files.
        let host = self.dir.lock_host(self.ip, LEAVE_LOCK_TIMEOUT).ok();
        if host.is_some()
            && self
                .dir
                .live_slots(self.ip, None)
                .is_ok_and(|l| l.is_empty())
        {
            if let Err(e) = self.dir.remove_address(self.ip) {
                tracing::debug!(error = %e, "cannot remove a shared port's files");
            }
            return;
        }
        if let Ok(nonce) = self.dir.read_epoch(self.ip) {
            let _ = probe::send_nudge(self.ip, self.port, nonce);
        }
    }
}

impl Drop for SharedPort {
    /// Leaves: closes this descriptor of the socket (the link's closed
    /// first, with the NIC's core), frees the slot, and nudges a remaining
    /// member to reconcile, since the kernel just moved the last member
    /// into this one's index — or, the last member out, removes the
    /// address's files.
    fn drop(&mut self) {
        self.leave_group();
    }
}

/// The table the answers prove, and the live slots left out of it: a slot
/// is in only if it answered once, with an index below the number of live
/// slots `n` that no other slot answered.
fn steering(n: usize, answers: &[Answer]) -> (Steering, Vec<u8>) {
    let mut count = vec![0usize; n];
    for p in answers.iter().filter_map(|a| a.probed) {
        if let Some(c) = count.get_mut(usize::from(p.index)) {
            *c += 1;
        }
    }
    let mut s = Steering::default();
    let mut missing = Vec::new();
    for a in answers {
        match a.probed {
            Some(p) if !p.ambiguous && count.get(usize::from(p.index)) == Some(&1) => {
                let index = u32::from(p.index);
                s.slots.push((a.slot, index));
                for &sid in &a.listens {
                    if !s.services.iter().any(|x| x.0 == sid) {
                        s.services.push((sid, index));
                    }
                }
            }
            _ => missing.push(a.slot),
        }
    }
    (s, missing)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};
    use std::sync::mpsc;

    /// Runs a member's "engine": answers probes, hands every other
    /// datagram's first bytes to the channel.
    fn engine(
        sock: RoceSocket,
        me: Arc<SharedPort>,
        stop: Arc<AtomicBool>,
    ) -> mpsc::Receiver<Vec<u8>> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; crate::link::MAX_DATAGRAM];
            while !stop.load(Ordering::Relaxed) {
                match sock.recv_datagram(&mut buf) {
                    Ok(Some(d)) => {
                        if !me.handle_probe(&buf[..d.len], d.src.ip()) {
                            let _ = tx.send(buf[..d.len].to_vec());
                        }
                    }
                    _ => std::thread::sleep(Duration::from_micros(200)),
                }
            }
        });
        rx
    }

    /// Two members on `ip` (a port of their own, files in a directory of
    /// the test's): the second's join hears from both, and the kernel then
    /// hands each member the packets of its slot.
    fn two_members_steer(ip: IpAddr) {
        let base = std::env::temp_dir().join(format!(
            "ndv-share-steer-{}-{}",
            std::process::id(),
            ip.is_ipv6()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let dir = ShareDir::at(base.clone()).unwrap();
        let port = UdpSocket::bind(SocketAddr::new(ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let stop = Arc::new(AtomicBool::new(false));
        let (s1, m1) = SharedPort::join(dir.clone(), ip, port).unwrap();
        let rx1 = engine(s1, m1.clone(), stop.clone());
        let (s2, m2) = SharedPort::join(dir, ip, port).unwrap();
        let rx2 = engine(s2, m2.clone(), stop.clone());
        assert_eq!(m2.counters().partial_reconciles.load(Ordering::Relaxed), 0);
        let peer = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        let to = SocketAddr::new(ip, port);
        // The same flow (one source port) for both: only the program tells
        // them apart, the kernel's hash would send them to one socket.
        for round in 0..20u8 {
            for (m, rx) in [(&m1, &rx1), (&m2, &rx2)] {
                let mut pkt = [0u8; 40];
                pkt[0] = 0x04; // RC SEND_ONLY
                pkt[5] = m.slot();
                pkt[7] = round | 2;
                peer.send_to(&pkt, to).unwrap();
                let got = rx
                    .recv_timeout(Duration::from_secs(5))
                    .expect("the slot's member gets it");
                assert_eq!((got[5], got[7]), (m.slot(), round | 2));
            }
        }
        assert!(rx1.try_recv().is_err() && rx2.try_recv().is_err());
        stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn two_members_on_one_ipv4_port_get_their_own_packets() {
        two_members_steer("127.0.0.1".parse().unwrap());
    }

    #[test]
    fn two_members_on_one_ipv6_port_get_their_own_packets() {
        two_members_steer("::1".parse().unwrap());
    }

    fn answer(slot: u8, index: Option<u8>, ambiguous: bool, listens: &[u64]) -> Answer {
        Answer {
            slot,
            probed: index.map(|index| Probed {
                nonce: 5,
                index,
                ambiguous,
            }),
            listens: listens.to_vec(),
        }
    }

    #[test]
    fn only_proven_indices_enter_the_table() {
        // Slot 4 got two probes (the group was smaller than counted), slot
        // 6 none, slots 7 and 8 claim the same index: only 1 and 2 are sure.
        let a = [
            answer(1, Some(0), false, &[0x10]),
            answer(2, Some(3), false, &[]),
            answer(4, Some(1), true, &[0x20]),
            answer(6, None, false, &[]),
            answer(7, Some(2), false, &[]),
            answer(8, Some(2), false, &[]),
        ];
        let (s, missing) = steering(6, &a);
        assert_eq!(s.slots, vec![(1, 0), (2, 3)]);
        assert_eq!(s.services, vec![(0x10, 0)]);
        assert_eq!(missing, vec![4, 6, 7, 8]);
        // An index beyond the members counted is no proof either.
        let (s, missing) = steering(1, &[answer(1, Some(1), false, &[])]);
        assert!(s.slots.is_empty());
        assert_eq!(missing, vec![1]);
    }
}
