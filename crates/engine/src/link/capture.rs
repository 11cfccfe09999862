//! Packet capture: a link wrapper that writes every RoCEv2 packet a NIC sends
//! or receives to a pcap file that Wireshark, tshark and `ndv decode` read as
//! RoCE.
//!
//! A link shows only the UDP payload, so each record is rebuilt as the packet
//! was on the wire: an IPv4 or IPv6 header and a UDP header around the
//! transport packet (BTH through ICRC). The file's link type is raw IP
//! (`LINKTYPE_RAW`), so no link-layer addresses have to be invented.
//!
//! * **Sent** packets get the headers the kernel writes for ndverbs' socket:
//!   IPv4 with DF and the ID the ICRC was computed for — 0 for a lone packet,
//!   `i` for segment `i` of a GSO run (as rxe's own captures show consecutive
//!   IDs) — TTL 64 (hop limit 64 for IPv6), source port 4791. The wrapper
//!   gathers a packet's pieces itself, so payloads sent straight from
//!   registered memory are recorded as sent, and capture costs the send path
//!   nothing when it is off.
//! * **Received** packets get the sender's address and port and, for IPv4,
//!   the ID recovered from the ICRC (see [`crate::icrc`]), so their ICRC
//!   verifies in the capture exactly as it did on the wire. Packets with a
//!   bad ICRC are not recorded (their IPv4 ID is unknowable). Under injected
//!   faults ([`super::faults`]) what is recorded is what arrived.
//! * Fields the ICRC does not cover and the link does not report — TTL on
//!   receive, the IPv6 flow label, traffic class — are written as 64, 0, 0.
//!   The UDP checksum is computed (Linux always sends one).
//!
//! A packet between two NICs of one process that share a capture file is
//! recorded once, when sent, as a capture on a loopback interface would show
//! it. Records are flushed as they are written (`tcpdump -U`), so a capture is
//! complete even if the process is killed.
//!
//! Switch it on with [`Nic::set_capture`](crate::nic::Nic::set_capture), or
//! for every NIC a process opens with the environment variable `NDV_PCAP=FILE`
//! (which `ndv --pcap FILE` sets; see [`crate::config`]). NICs of one process
//! naming the same file share it; the first one truncates it, and NICs opened
//! later in the same process append.

use super::layer::{Layer, Layered};
use super::{Datagram, Runs};
use ndverbs_proto::time::Instant;
use ndverbs_wire::capture::{LinkType, PcapWriter};
use ndverbs_wire::ip::{Envelope, IpHeader};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// Direction of a recorded packet.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::capture::{Capture, Dir};
/// let path = std::env::temp_dir().join(format!("ndverbs-doc-dir-{}.pcap", std::process::id()));
/// let (me, peer): (std::net::SocketAddr, std::net::SocketAddr) = ("10.0.0.1:4791".parse().unwrap(), "10.0.0.2:4791".parse().unwrap());
/// let cap = Capture::open(&path, me.ip())?;
/// let ack = [0x11, 0, 0xff, 0xff, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
/// cap.record(Dir::Tx, me, peer, 0, &ack);
/// cap.record(Dir::Rx, peer, me, 0x1234, &ack); // the peer's reply, with its IPv4 ID
/// // A packet between two NICs of this process sharing the file is kept once,
/// // when sent: its receive is skipped.
/// cap.record(Dir::Rx, me, peer, 0, &ack);
/// assert_eq!(cap.packets(), 2);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Sent by the NIC.
    Tx,
    /// Received by the NIC.
    Rx,
}

struct Inner {
    w: PcapWriter<BufWriter<File>>,
    /// Addresses of the NICs writing to this file.
    locals: Vec<IpAddr>,
    packets: u64,
    failed: bool,
}

/// An open capture file, shared by the NICs of a process that name it.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::capture::{Capture, Dir};
/// use ndverbs_wire::{capture::{ip_packet, read_frames}, ip::Envelope, packet::Packet};
/// let path = std::env::temp_dir().join(format!("ndverbs-doc-capture-{}.pcap", std::process::id()));
/// let (src, dst): (std::net::SocketAddr, _) = ("10.0.0.1:4791".parse().unwrap(), "10.0.0.2:4791".parse().unwrap());
/// let cap = Capture::open(&path, src.ip())?;
/// // An RC ACKNOWLEDGE (BTH + AETH + ICRC), recorded with the IPv4/UDP headers it had.
/// let ack = [0x11, 0, 0xff, 0xff, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
/// cap.record(Dir::Tx, src, dst, 0, &ack);
/// // What Wireshark (or `ndv decode`) reads back.
/// let file = std::fs::read(cap.path())?;
/// let frames = read_frames(&file).unwrap();
/// let (_, ip) = ip_packet(frames[0].link, frames[0].data).unwrap();
/// let (env, transport) = Envelope::parse(ip).unwrap();
/// assert_eq!((env.ip.src(), env.udp.dst_port), (src.ip(), 4791));
/// assert_eq!(Packet::parse(transport).unwrap().bth.dqpn, 5);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Capture {
    path: PathBuf,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("path", &self.path).finish()
    }
}

/// Files open in this process, and every file this process has created (those
/// are appended to, never truncated again).
struct Registry {
    open: Vec<Weak<Capture>>,
    created: HashSet<PathBuf>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        Mutex::new(Registry {
            open: Vec::new(),
            created: HashSet::new(),
        })
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The absolute form of `path` (the file may not exist yet).
fn key(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map(|d| d.join(name))
            .unwrap_or_else(|_| abs.clone()),
        _ => abs,
    }
}

impl Capture {
    /// Opens `path` for the NIC at `local`: the already open capture of
    /// that file if another NIC of this process writes it, otherwise the
    /// file, created (or truncated) the first time this process opens it and
    /// appended to afterwards.
    pub fn open(path: &Path, local: IpAddr) -> io::Result<Arc<Capture>> {
        let k = key(path);
        let mut reg = lock(registry());
        reg.open.retain(|w| w.strong_count() > 0);
        if let Some(c) = reg
            .open
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| c.path == k)
        {
            lock(&c.inner).locals.push(local);
            return Ok(c);
        }
        let append = reg.created.contains(&k)
            && std::fs::metadata(&k).is_ok_and(|m| m.len() >= 24 && m.is_file());
        let w = if append {
            let f = OpenOptions::new().append(true).open(&k)?;
            PcapWriter::append(BufWriter::new(f))
        } else {
            let f = File::create(&k)?;
            PcapWriter::new(BufWriter::new(f), LinkType::RawIp)?
        };
        reg.created.insert(k.clone());
        let c = Arc::new(Capture {
            path: k,
            inner: Mutex::new(Inner {
                w,
                locals: vec![local],
                packets: 0,
                failed: false,
            }),
        });
        reg.open.push(Arc::downgrade(&c));
        tracing::info!(path = %c.path.display(), %local, append, "packet capture on");
        Ok(c)
    }

    /// The file (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        lock(&self.inner).packets
    }

    /// The NIC at `local` no longer writes here.
    pub(crate) fn detach(&self, local: IpAddr) {
        let mut g = lock(&self.inner);
        if let Some(i) = g.locals.iter().position(|a| *a == local) {
            g.locals.swap_remove(i);
        }
        let _ = g.w.flush();
    }

    /// Records one datagram: `transport` (BTH through ICRC) from `src` to
    /// `dst`; `ipv4_id` is the IPv4 ID it carried (0 for what ndverbs sends).
    pub fn record(
        &self,
        dir: Dir,
        src: SocketAddr,
        dst: SocketAddr,
        ipv4_id: u16,
        transport: &[u8],
    ) {
        let mut g = lock(&self.inner);
        if g.failed || (dir == Dir::Rx && g.locals.contains(&src.ip())) {
            // Already recorded when the local sender sent it.
            return;
        }
        let frame = match frame(src, dst, ipv4_id, transport) {
            Some(f) => f,
            None => return,
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let r = g.w.write_packet(ts, &frame).and_then(|()| g.w.flush());
        match r {
            Ok(()) => g.packets += 1,
            Err(e) => {
                g.failed = true;
                tracing::warn!(path = %self.path.display(), error = %e, "packet capture stopped");
            }
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let g = lock(&self.inner);
        tracing::info!(path = %self.path.display(), packets = g.packets, "packet capture off");
    }
}

/// The IP packet (IP + UDP headers + transport) as it was on the wire.
pub fn frame(src: SocketAddr, dst: SocketAddr, ipv4_id: u16, transport: &[u8]) -> Option<Vec<u8>> {
    let (s, d) = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (IpAddr::V4(s), IpAddr::V4(d)),
        (IpAddr::V6(s), IpAddr::V6(d)) => (IpAddr::V6(s), IpAddr::V6(d)),
        _ => return None,
    };
    let mut env = Envelope::new_rocev2(s, d, src.port(), transport.len());
    env.udp.dst_port = dst.port();
    if let IpHeader::V4(h) = &mut env.ip {
        h.id = ipv4_id;
        h.checksum = h.compute_checksum();
    }
    let hl = env.len();
    let mut out = vec![0u8; hl + transport.len()];
    env.write(&mut out).ok()?;
    out[hl..].copy_from_slice(transport);
    let ck = udp_checksum(s, d, &out[env.ip.len()..]);
    let at = env.ip.len() + 6;
    out[at..at + 2].copy_from_slice(&ck.to_be_bytes());
    Some(out)
}

/// The UDP checksum of `udp` (header with a zero checksum, then payload).
fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            sum += u64::from(w);
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
            add(&[0, 17]);
            add(&(udp.len() as u16).to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            add(&v6(s));
            add(&v6(d));
            add(&(udp.len() as u32).to_be_bytes());
            add(&[0, 0, 0, 17]);
        }
    }
    add(udp);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

/// The capture a NIC writes to, if any: shared between the NIC's handle,
/// which switches it, and its [`CaptureLayer`], which writes (cheap to check
/// per call).
#[derive(Debug, Default)]
pub struct CaptureSlot {
    on: AtomicBool,
    cap: Mutex<Option<(Arc<Capture>, IpAddr)>>,
}

impl CaptureSlot {
    /// Replaces the capture of the NIC at `local` (detaching it from the
    /// old one).
    pub fn set(&self, c: Option<Arc<Capture>>, local: IpAddr) {
        let mut g = lock(&self.cap);
        if let Some((old, at)) = g.take() {
            old.detach(at);
        }
        self.on.store(c.is_some(), Ordering::Release);
        *g = c.map(|c| (c, local));
    }

    /// Whether a capture is on.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// The capture, if on.
    pub fn get(&self) -> Option<Arc<Capture>> {
        if !self.is_on() {
            return None;
        }
        lock(&self.cap).as_ref().map(|(c, _)| c.clone())
    }
}

impl Drop for CaptureSlot {
    fn drop(&mut self) {
        if let Some((c, at)) = lock(&self.cap).take() {
            c.detach(at);
        }
    }
}

/// Link `L` with a [`CaptureLayer`] around it.
pub type CaptureLink<L> = Layered<L, CaptureLayer>;

/// Records what passes through the link below while its slot holds a
/// capture (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::capture::{Capture, CaptureLayer, CaptureLink, CaptureSlot};
/// use ndverbs_engine::link::memory::MemoryLink;
/// use ndverbs_engine::link::{IoPiece, Link, Run, Runs};
/// use std::sync::Arc;
/// let path = std::env::temp_dir().join(format!("ndverbs-doc-link-{}.pcap", std::process::id()));
/// let (a, b) = MemoryLink::pair("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())?;
/// let slot = Arc::new(CaptureSlot::default());
/// let at = a.local_addr();
/// let mut a = CaptureLink::new(a, CaptureLayer::new(slot.clone(), at));
/// let cap = Capture::open(&path, a.local_addr().ip())?;
/// slot.set(Some(cap.clone()), a.local_addr().ip());
/// // A GSO run of two packets, gathered from two pieces: two records.
/// let (p0, p1) = ([0x04u8; 40], [0x04u8; 40]);
/// let (pieces, run) = ([IoPiece::of(&p0), IoPiece::of(&p1)], [Run { iov: (0, 2), len: 80, seg: 40 }]);
/// // SAFETY: live local buffers.
/// a.send_runs(unsafe { Runs::new(&pieces, &run) }?, b.local_addr())?;
/// assert_eq!(cap.packets(), 2);
/// # drop(a);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct CaptureLayer {
    slot: Arc<CaptureSlot>,
    /// The address of the link below (packets it sends leave from there).
    local: SocketAddr,
    /// A run's bytes, gathered for recording.
    scratch: Vec<u8>,
}

impl CaptureLayer {
    /// Records, while `slot` holds a capture, the traffic of the link at
    /// `local`.
    pub fn new(slot: Arc<CaptureSlot>, local: SocketAddr) -> Self {
        CaptureLayer {
            slot,
            local,
            scratch: Vec::new(),
        }
    }

    /// Records the packets of `runs`, each run gathered from its pieces.
    #[cold]
    fn record_runs(&mut self, cap: &Capture, runs: Runs<'_>, dst: SocketAddr) {
        for (i, r) in runs.runs().iter().enumerate() {
            self.scratch.clear();
            runs.gather(i, &mut self.scratch);
            for (id, p) in self.scratch.chunks(r.seg.max(1)).enumerate() {
                cap.record(Dir::Tx, self.local, dst, id as u16, p);
            }
        }
    }

    /// Records the packets of a received datagram whose ICRC verifies.
    #[cold]
    fn record_received(&self, cap: &Capture, d: &Datagram, buf: &[u8]) {
        let to = SocketAddr::new(d.dst.unwrap_or(self.local.ip()), self.local.port());
        for p in d.packets() {
            if let Ok(r) = crate::icrc::verify(&buf[p.clone()], d.src, to) {
                cap.record(
                    Dir::Rx,
                    d.src,
                    to,
                    r.ipv4_id.unwrap_or(0),
                    &buf[p.start..p.start + r.len],
                );
            }
        }
    }
}

impl Layer for CaptureLayer {
    #[inline]
    fn sent(&mut self, pkt: &[u8], dst: SocketAddr) {
        if let Some(c) = self.slot.get() {
            c.record(Dir::Tx, self.local, dst, 0, pkt);
        }
    }

    #[inline]
    fn sent_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) {
        if let Some(c) = self.slot.get() {
            self.record_runs(&c, runs, dst);
        }
    }

    #[inline]
    fn arrived(&mut self, d: Datagram, buf: &mut [u8], _now: Instant) -> Option<Datagram> {
        if let Some(c) = self.slot.get() {
            self.record_received(&c, &d, buf);
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_wire::icrc;

    #[test]
    fn frames_verify_and_checksum() {
        for (s, d) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            let s: SocketAddr = SocketAddr::new(s.parse().unwrap(), 4791);
            let d: SocketAddr = SocketAddr::new(d.parse().unwrap(), 4791);
            let mut t = vec![0u8; 12 + 8 + 4];
            t[0] = 0x04; // RC SEND ONLY
            t[2] = 0xff;
            t[3] = 0xff;
            let env = Envelope::new_rocev2(s.ip(), d.ip(), 4791, t.len());
            let mut hdr = [0u8; 48];
            let n = env.write(&mut hdr).unwrap();
            let body = t.len() - 4;
            let c = icrc::compute_split(&hdr[..n], &t[..body]).unwrap();
            t[body..].copy_from_slice(&c.to_le_bytes());
            let f = frame(s, d, 0, &t).unwrap();
            let (e, payload) = Envelope::parse(&f).unwrap();
            assert_eq!(payload, &t[..]);
            assert_eq!((e.ip.src(), e.ip.dst()), (s.ip(), d.ip()));
            // The UDP checksum verifies: summing with it gives 0xffff.
            let hl = e.ip.len();
            let mut z = f[hl..].to_vec();
            let carried = u16::from_be_bytes([z[6], z[7]]);
            z[6] = 0;
            z[7] = 0;
            assert_eq!(udp_checksum(s.ip(), d.ip(), &z), carried);
            assert_ne!(carried, 0);
        }
    }
}
