//! Packet capture: every RoCEv2 datagram an adapter sends or receives, written
//! to a pcap file that Wireshark, tshark and `ndv decode` read as RoCE.
//!
//! The socket only shows the UDP payload, so each record is rebuilt as the
//! packet was on the wire: an IPv4 or IPv6 header and a UDP header around the
//! transport packet (BTH through ICRC). The file's link type is raw IP
//! (`LINKTYPE_RAW`), so no link-layer addresses have to be invented.
//!
//! * **Sent** packets get the headers the kernel writes for ndverbs' socket:
//!   IPv4 with DF and ID 0, TTL 64 (hop limit 64 for IPv6), source port 4791.
//!   The ICRC in the record is the one sent (after the fault layer's
//!   corruption, if any): what a capture on the interface would show.
//! * **Received** packets get the sender's address and port and, for IPv4,
//!   the ID recovered from the ICRC (see [`crate::udp`]), so their ICRC
//!   verifies in the capture exactly as it did on the wire. Datagrams dropped
//!   for a bad ICRC are not recorded (their IPv4 ID is unknowable).
//! * Fields the ICRC does not cover and the socket does not report — TTL on
//!   receive, the IPv6 flow label, traffic class — are written as 64, 0, 0.
//!   The UDP checksum is computed (Linux always sends one).
//!
//! A packet between two adapters of one process that share a capture file is
//! recorded once, when sent, as a capture on a loopback interface would show
//! it. Records are flushed as they are written (`tcpdump -U`), so a capture is
//! complete even if the process is killed.
//!
//! Switch it on with [`Adapter::set_capture`](crate::adapter::Adapter::set_capture),
//! or for every adapter a process opens with the environment variable
//! [`PCAP_ENV`] (`NDV_PCAP=FILE`, which `ndv --pcap FILE` sets). Adapters of
//! one process naming the same file share it; the first one truncates it, and
//! adapters opened later in the same process append.

use crate::adapter::{Adapter, EngineError};
use crate::udp::{Received, RoceSocket};
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

/// The environment variable naming a capture file for every adapter.
pub const PCAP_ENV: &str = "NDV_PCAP";

/// Direction of a recorded packet.
///
/// # Example
///
/// ```
/// use ndverbs_engine::capture::{Capture, Dir};
/// let path = std::env::temp_dir().join(format!("ndverbs-doc-dir-{}.pcap", std::process::id()));
/// let (me, peer): (std::net::SocketAddr, std::net::SocketAddr) = ("10.0.0.1:4791".parse().unwrap(), "10.0.0.2:4791".parse().unwrap());
/// let cap = Capture::open(&path, me.ip())?;
/// let ack = [0x11, 0, 0xff, 0xff, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
/// cap.record(Dir::Tx, me, peer, 0, &ack);
/// cap.record(Dir::Rx, peer, me, 0x1234, &ack); // the peer's reply, with its IPv4 ID
/// // A packet between two adapters of this process sharing the file is kept once,
/// // when sent: its receive is skipped.
/// cap.record(Dir::Rx, me, peer, 0, &ack);
/// assert_eq!(cap.packets(), 2);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Sent by the adapter.
    Tx,
    /// Received by the adapter.
    Rx,
}

struct Inner {
    w: PcapWriter<BufWriter<File>>,
    /// Addresses of the adapters writing to this file.
    locals: Vec<IpAddr>,
    packets: u64,
    failed: bool,
}

/// An open capture file, shared by the adapters of a process that name it.
///
/// # Example
///
/// ```
/// use ndverbs_engine::capture::{Capture, Dir};
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
    /// Opens `path` for the adapter at `local`: the already open capture of
    /// that file if another adapter of this process writes it, otherwise the
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

    /// The adapter at `local` no longer writes here.
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

/// The capture an adapter writes to, if any (cheap to check per packet).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    on: AtomicBool,
    cap: Mutex<Option<(Arc<Capture>, IpAddr)>>,
}

impl Slot {
    /// Replaces the capture of the adapter at `local` (detaching it from the
    /// old one).
    pub(crate) fn set(&self, c: Option<Arc<Capture>>, local: IpAddr) {
        let mut g = lock(&self.cap);
        if let Some((old, at)) = g.take() {
            old.detach(at);
        }
        self.on.store(c.is_some(), Ordering::Release);
        *g = c.map(|c| (c, local));
    }

    /// Whether a capture is on.
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// The capture, if on.
    pub(crate) fn get(&self) -> Option<Arc<Capture>> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.cap).as_ref().map(|(c, _)| c.clone())
    }

    /// Records a packet `sock` sent to `dst:dst_port` with IPv4 ID `ipv4_id`
    /// (0 for a plain send; segment `i` of a UDP GSO send carries ID `i`).
    #[inline]
    pub(crate) fn tx(
        &self,
        sock: &RoceSocket,
        dst: IpAddr,
        dst_port: u16,
        ipv4_id: u16,
        transport: &[u8],
    ) {
        if let Some(c) = self.get() {
            let src = SocketAddr::new(sock.local(), sock.port());
            c.record(
                Dir::Tx,
                src,
                SocketAddr::new(dst, dst_port),
                ipv4_id,
                transport,
            );
        }
    }

    /// Records the packets of one batch send ([`RoceSocket::send_segments`]):
    /// `seg`-byte packets back to back in `buf`. Segment `i` of a UDP GSO
    /// send carries IPv4 ID `i`; a batch the socket sent one packet at a time
    /// carries ID 0 throughout — each packet's ICRC says which.
    #[inline]
    pub(crate) fn tx_segments(
        &self,
        sock: &RoceSocket,
        dst: IpAddr,
        dst_port: u16,
        buf: &[u8],
        seg: usize,
    ) {
        if self.on.load(Ordering::Acquire) && seg > 0 {
            let src = SocketAddr::new(sock.local(), sock.port());
            let to = SocketAddr::new(dst, dst_port);
            for (i, p) in buf.chunks(seg).enumerate() {
                let id = if i > 0 && dst.is_ipv4() {
                    let gso = frame(src, to, i as u16, p)
                        .is_some_and(|f| ndverbs_wire::icrc::verify(&f).unwrap_or(false));
                    if gso {
                        i as u16
                    } else {
                        0
                    }
                } else {
                    0
                };
                self.tx(sock, dst, dst_port, id, p);
            }
        }
    }

    /// Records a packet the adapter received (its ICRC verified); `buf`
    /// starts with the packet's `r.len` bytes.
    #[inline]
    pub(crate) fn rx(&self, r: &Received, local_port: u16, buf: &[u8]) {
        if let Some(c) = self.get() {
            c.record(
                Dir::Rx,
                r.src,
                SocketAddr::new(r.dst, local_port),
                r.ipv4_id.unwrap_or(0),
                &buf[..r.len.min(buf.len())],
            );
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((c, at)) = lock(&self.cap).take() {
            c.detach(at);
        }
    }
}

/// The capture file named by [`PCAP_ENV`], if set and not empty.
pub fn env_path() -> Option<PathBuf> {
    std::env::var_os(PCAP_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Switches capture on for a new adapter if [`PCAP_ENV`] names a file.
pub(crate) fn from_env(slot: &Slot, local: IpAddr) -> Result<(), EngineError> {
    if let Some(p) = env_path() {
        let c = Capture::open(&p, local).map_err(|e| {
            EngineError::Io(io::Error::new(
                e.kind(),
                format!("{PCAP_ENV}={}: {e}", p.display()),
            ))
        })?;
        slot.set(Some(c), local);
    }
    Ok(())
}

impl Adapter {
    /// Starts writing every packet this adapter sends and receives to the
    /// pcap file `path` (see [`crate::capture`]), or stops with `None`.
    /// Replaces a capture already on (including one from [`PCAP_ENV`]).
    ///
    /// ```no_run
    /// # use ndverbs_engine::adapter::{Adapter, Progress};
    /// let a = Adapter::open("127.0.0.1".parse().unwrap(), Progress::Thread)?;
    /// a.set_capture(Some(std::path::Path::new("/tmp/roce.pcap")))?;
    /// // … traffic …
    /// a.set_capture(None)?;
    /// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
    /// ```
    pub fn set_capture(&self, path: Option<&Path>) -> Result<(), EngineError> {
        let local = self.local();
        let c = path.map(|p| Capture::open(p, local)).transpose()?;
        self.shared().capture.set(c, local);
        Ok(())
    }

    /// The capture this adapter writes to, if any.
    pub fn capture(&self) -> Option<Arc<Capture>> {
        self.shared().capture.get()
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
