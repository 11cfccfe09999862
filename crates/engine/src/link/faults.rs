//! A seeded fault layer: a link wrapper that makes the network bad on purpose.
//!
//! Real networks lose, duplicate, reorder, delay and (rarely) corrupt packets.
//! [`FaultLink`] does all five, from one seed so that a run that fails can be
//! replayed, to the packets that **arrive** at the NIC it wraps. It is for
//! ndverbs' own tests and for applications that want to test themselves
//! against a bad network: configure it with [`FaultConfig`] through the API
//! ([`Nic::set_faults`](crate::nic::Nic::set_faults),
//! [`NicConfig::faults`](crate::config::NicConfig::faults)) or the `NDV_FAULTS`
//! environment variable, e.g.
//! `NDV_FAULTS="loss=0.1,dup=0.02,reorder=0.05,delay_us=200,corrupt=0.001,seed=7"`
//! (which logs a warning: a process that inherits it should not lose packets
//! silently).
//!
//! * **loss** — the packet never arrives.
//! * **dup** — it arrives twice.
//! * **reorder** — it is held back and arrives after later packets (when its
//!   hold time, at least 20 µs, expires).
//! * **delay** — it is held back for `delay_us` (plus up to the same again,
//!   at random).
//! * **corrupt** — one random bit is flipped, so the ICRC check must drop it.
//!
//! **Why on arrival.** Faults are effects of the network between two NICs;
//! injecting them where packets arrive leaves every sender on its production
//! path — GSO runs, `sendmmsg`, payloads sent straight from registered
//! memory — so the reliability tests exercise exactly what ships. A
//! GRO-coalesced datagram is split only where one of its packets' fate
//! requires it; the rest is handed on still coalesced. Held packets are
//! released by the engine's clock: the link reports the next release through
//! [`Link::poll_at`](super::Link::poll_at), so a sleeping engine wakes for it.

use super::layer::{Layer, Layered};
use super::Datagram;
use ndverbs_proto::time::Instant;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Probabilities (0.0..=1.0) and parameters of the fault layer.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::link::faults::FaultConfig;
/// use ndverbs_engine::nic::Nic;
/// // The NDV_FAULTS syntax; unnamed values stay zero.
/// let cfg = FaultConfig::parse("loss=0.1,dup=0.02,delay_us=200,seed=7")?;
/// assert_eq!((cfg.loss, cfg.dup, cfg.reorder, cfg.seed), (0.1, 0.02, 0.0, 7));
/// assert!(!cfg.is_off());
/// let a = Nic::open("127.93.20.1".parse().unwrap(), Progress::Thread)?;
/// a.set_faults(Some(cfg))?; // every packet `a` receives from now on
/// assert_eq!(a.fault_counters().unwrap().packets, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    /// Chance a packet is lost.
    pub loss: f64,
    /// Chance a packet arrives twice.
    pub dup: f64,
    /// Chance a packet is held back behind later ones.
    pub reorder: f64,
    /// Chance a packet is delayed.
    pub delay: f64,
    /// Base delay of delayed and held packets.
    pub delay_time: Duration,
    /// Chance one bit of a packet is flipped.
    pub corrupt: f64,
    /// Seed of the fault sequence.
    pub seed: u64,
}

/// Why a fault specification did not parse.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::faults::FaultConfig;
/// let err = FaultConfig::parse("loss=lots").unwrap_err();
/// println!("NDV_FAULTS: {err}");
/// assert!(FaultConfig::parse("flood=1").is_err()); // unknown key
/// assert!(FaultConfig::parse("loss=2").is_err()); // not a probability
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault specification {0:?}: expected key=value pairs among loss, dup, reorder, delay, delay_us, corrupt, seed")]
pub struct FaultSpecError(pub String);

impl FaultConfig {
    /// True if every probability is zero.
    pub fn is_off(&self) -> bool {
        self.loss <= 0.0
            && self.dup <= 0.0
            && self.reorder <= 0.0
            && self.delay <= 0.0
            && self.corrupt <= 0.0
    }

    /// Parses `loss=0.1,dup=0.01,reorder=0.05,delay=0.1,delay_us=200,corrupt=0.001,seed=7`.
    pub fn parse(spec: &str) -> Result<Self, FaultSpecError> {
        let mut c = FaultConfig {
            delay_time: Duration::from_micros(100),
            ..FaultConfig::default()
        };
        let bad = || FaultSpecError(spec.to_string());
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let p = || -> Result<f64, FaultSpecError> {
                let x: f64 = v.trim().parse().map_err(|_| bad())?;
                if (0.0..=1.0).contains(&x) {
                    Ok(x)
                } else {
                    Err(bad())
                }
            };
            match k.trim() {
                "loss" => c.loss = p()?,
                "dup" => c.dup = p()?,
                "reorder" => c.reorder = p()?,
                "delay" => c.delay = p()?,
                "corrupt" => c.corrupt = p()?,
                "delay_us" => {
                    c.delay_time = Duration::from_micros(v.trim().parse().map_err(|_| bad())?)
                }
                "seed" => c.seed = v.trim().parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        Ok(c)
    }
}

/// What the fault layer did, for reports.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::faults::{FaultConfig, Faults};
/// let mut f = Faults::new(FaultConfig::parse("loss=0.5,seed=1").unwrap());
/// for _ in 0..1000 {
///     f.fate(0, 100);
/// }
/// let c = f.counters;
/// assert_eq!(c.packets, 1000);
/// assert!(c.lost > 400 && c.lost < 600, "{c:?}");
/// assert_eq!(c.duplicated + c.reordered + c.delayed + c.corrupted, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets that arrived at the layer.
    pub packets: u64,
    /// Lost.
    pub lost: u64,
    /// Handed on twice.
    pub duplicated: u64,
    /// Held behind later packets.
    pub reordered: u64,
    /// Delayed.
    pub delayed: u64,
    /// Corrupted.
    pub corrupted: u64,
}

/// Decides the fate of each packet, from the seed.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::faults::{Fate, FaultConfig, Faults};
/// // Same seed, same fates: a failing run can be replayed.
/// let cfg = FaultConfig::parse("loss=0.2,reorder=0.2,dup=0.2,seed=42").unwrap();
/// let (mut x, mut y) = (Faults::new(cfg), Faults::new(cfg));
/// for t in 0..100 {
///     assert_eq!(x.fate(t, 64), y.fate(t, 64));
/// }
/// // Off: every packet goes on once, untouched.
/// let mut off = Faults::new(FaultConfig::default());
/// assert_eq!(off.fate(0, 64), Fate::Pass { copies: 1, corrupt: None });
/// ```
#[derive(Debug)]
pub struct Faults {
    cfg: FaultConfig,
    state: u64,
    /// What happened so far.
    pub counters: FaultCounters,
}

/// What happens to one packet.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::faults::{Fate, FaultConfig, Faults};
/// let mut f = Faults::new(FaultConfig::parse("reorder=1,delay_us=50").unwrap());
/// // What the layer does with each packet that arrives.
/// match f.fate(1_000, 64) {
///     Fate::Pass { copies, corrupt } => println!("on {copies}x, flip {corrupt:?}"),
///     Fate::Lose => println!("lost"),
///     Fate::Hold { until, .. } => assert!(until >= 1_000 + 50_000), // overtaken by later packets
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Hand it on (`copies` times; with bit `corrupt` flipped if set).
    Pass {
        /// 1 or 2.
        copies: u8,
        /// Bit to flip.
        corrupt: Option<usize>,
    },
    /// It never arrives.
    Lose,
    /// Hold it until `until` (nanoseconds on the engine clock), with bit
    /// `corrupt` flipped if set.
    Hold {
        /// Release time.
        until: u64,
        /// Bit to flip.
        corrupt: Option<usize>,
    },
}

impl Fate {
    /// Handed on once, untouched.
    const PLAIN: Fate = Fate::Pass {
        copies: 1,
        corrupt: None,
    };
}

impl Faults {
    /// A fault decider with configuration `cfg`.
    pub fn new(cfg: FaultConfig) -> Self {
        Faults {
            cfg,
            state: cfg.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            counters: FaultCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> FaultConfig {
        self.cfg
    }

    fn next(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Decides what happens to a packet of `len` bytes arriving at `now_ns`.
    pub fn fate(&mut self, now_ns: u64, len: usize) -> Fate {
        self.counters.packets += 1;
        if self.next() < self.cfg.loss {
            self.counters.lost += 1;
            return Fate::Lose;
        }
        let corrupt = if self.next() < self.cfg.corrupt && len > 0 {
            self.counters.corrupted += 1;
            Some((self.next() * (len * 8) as f64) as usize % (len * 8))
        } else {
            None
        };
        let base = self.cfg.delay_time.as_nanos() as u64;
        if self.next() < self.cfg.reorder {
            self.counters.reordered += 1;
            // Long enough that the next packets overtake it.
            let until = now_ns + base.max(20_000) + (self.next() * base as f64) as u64;
            return Fate::Hold { until, corrupt };
        }
        if self.next() < self.cfg.delay {
            self.counters.delayed += 1;
            let until = now_ns + base + (self.next() * base as f64) as u64;
            return Fate::Hold { until, corrupt };
        }
        let copies = if self.next() < self.cfg.dup {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        Fate::Pass { copies, corrupt }
    }
}

/// Link `L` with a [`FaultLayer`] around it.
pub type FaultLink<L> = Layered<L, FaultLayer>;

/// Injects faults into what arrives through the link below (see the module
/// docs); sends pass through untouched.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::faults::{FaultConfig, FaultLayer, FaultLink};
/// use ndverbs_engine::link::memory::MemoryLink;
/// use ndverbs_engine::link::{Link, MAX_DATAGRAM};
/// use ndverbs_proto::time::Instant;
/// let (mut a, b) = MemoryLink::pair("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())?;
/// let mut b = FaultLink::new(b, FaultLayer::default());
/// b.layer_mut().set_config(Some(FaultConfig::parse("loss=1")?));
/// a.send(&[0; 64], b.local_addr())?;
/// let mut buf = vec![0; MAX_DATAGRAM];
/// assert!(b.recv(&mut buf, Instant::ZERO)?.is_none()); // lost on the way in
/// assert_eq!(b.layer().counters().map(|c| c.lost), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FaultLayer {
    /// `None`: off (packets still held are released all the same).
    faults: Option<Faults>,
    /// A datagram some of whose packets met a fate, as it arrived (the
    /// corruption applied) ...
    stash: Vec<u8>,
    /// ... and what of it is still to hand on, in order: byte ranges of
    /// `stash` with their segment size.
    ready: VecDeque<Slice>,
    /// The source and destination of the stashed datagram.
    stash_from: (SocketAddr, Option<IpAddr>, u8, Option<u64>),
    /// The fates of a datagram's packets (kept for its allocation).
    fates: Vec<Fate>,
    /// Packets held back, in release order.
    held: VecDeque<Held>,
}

/// Packets of the stashed datagram to hand on as one datagram.
#[derive(Debug, Clone, Copy)]
struct Slice {
    off: usize,
    len: usize,
    seg: usize,
}

/// A packet held back.
#[derive(Debug)]
struct Held {
    until: u64,
    src: SocketAddr,
    dst: Option<IpAddr>,
    ecn: u8,
    bytes: Vec<u8>,
}

impl Default for FaultLayer {
    /// Faults off.
    fn default() -> Self {
        FaultLayer {
            faults: None,
            stash: Vec::new(),
            ready: VecDeque::new(),
            stash_from: (SocketAddr::from(([0, 0, 0, 0], 0)), None, 0, None),
            fates: Vec::new(),
            held: VecDeque::new(),
        }
    }
}

impl FaultLayer {
    /// Turns faults on with `cfg`, or off (`None`, or a configuration that
    /// is all zeros). The sequence restarts from the seed.
    pub fn set_config(&mut self, cfg: Option<FaultConfig>) {
        let cfg = cfg.filter(|c| !c.is_off());
        if let Some(c) = &cfg {
            // Whoever turned it on (API or NDV_FAULTS), losses from here on
            // are on purpose: say so where an operator will look.
            tracing::warn!(
                loss = c.loss,
                dup = c.dup,
                reorder = c.reorder,
                delay = c.delay,
                corrupt = c.corrupt,
                seed = c.seed,
                "fault injection on: received packets are lost, duplicated, delayed or corrupted on purpose"
            );
        }
        self.faults = cfg.map(Faults::new);
    }

    /// What the layer did since it was turned on (`None` when off).
    pub fn counters(&self) -> Option<FaultCounters> {
        self.faults.as_ref().map(|f| f.counters)
    }

    /// Copies `s` of the stash into `buf` as a datagram.
    fn hand_on(&self, s: Slice, buf: &mut [u8]) -> io::Result<Datagram> {
        let to = buf.get_mut(..s.len).ok_or_else(too_small)?;
        to.copy_from_slice(&self.stash[s.off..s.off + s.len]);
        Ok(Datagram {
            src: self.stash_from.0,
            dst: self.stash_from.1,
            len: s.len,
            seg: s.seg,
            ecn: self.stash_from.2,
            rx_time: self.stash_from.3,
        })
    }

    fn hold(&mut self, h: Held) {
        let at = self
            .held
            .iter()
            .position(|x| x.until > h.until)
            .unwrap_or(self.held.len());
        self.held.insert(at, h);
    }

    /// Decides the fate of every packet of `d` (in `buf`); returns `d` if
    /// all of them simply pass, else stashes what passes (to hand on from
    /// the next calls) and holds what is held, and returns `None`.
    fn apply(&mut self, d: Datagram, buf: &mut [u8], now_ns: u64) -> Option<Datagram> {
        let Some(f) = self.faults.as_mut() else {
            return Some(d);
        };
        let mut fates = std::mem::take(&mut self.fates);
        fates.clear();
        fates.extend(d.packets().map(|p| f.fate(now_ns, p.len())));
        if fates.iter().all(|&x| x == Fate::PLAIN) {
            // The common case: handed on as it came, without a copy.
            self.fates = fates;
            return Some(d);
        }
        self.ready.clear();
        self.stash.clear();
        self.stash.extend_from_slice(&buf[..d.len]);
        self.stash_from = (d.src, d.dst, d.ecn, d.rx_time);
        // Packets that pass in a row stay coalesced, as `group`.
        let mut group = 0..0;
        for (p, &fate) in d.packets().zip(&fates) {
            let flip = |stash: &mut [u8], bit: usize| {
                stash[p.start + (bit / 8) % p.len()] ^= 1 << (bit % 8);
            };
            match fate {
                Fate::Pass { copies, corrupt } => {
                    if let Some(bit) = corrupt {
                        flip(&mut self.stash, bit);
                    }
                    group.end = p.end;
                    if copies > 1 {
                        // The copies right behind the original.
                        self.close(&mut group, d.seg);
                        for _ in 1..copies {
                            self.ready.push_back(Slice {
                                off: p.start,
                                len: p.len(),
                                seg: p.len(),
                            });
                        }
                    }
                }
                Fate::Lose => self.close(&mut group, d.seg),
                Fate::Hold { until, corrupt } => {
                    self.close(&mut group, d.seg);
                    if let Some(bit) = corrupt {
                        flip(&mut self.stash, bit);
                    }
                    let h = Held {
                        until,
                        src: d.src,
                        dst: d.dst,
                        ecn: d.ecn,
                        bytes: self.stash[p.clone()].to_vec(),
                    };
                    self.hold(h);
                }
            }
            if group.start == group.end {
                group = p.end..p.end;
            }
        }
        self.close(&mut group, d.seg);
        self.fates = fates;
        None
    }

    /// Queues the packets of `group` as one datagram and starts an empty one.
    fn close(&mut self, group: &mut std::ops::Range<usize>, seg: usize) {
        if group.start < group.end {
            let len = group.end - group.start;
            self.ready.push_back(Slice {
                off: group.start,
                len,
                seg: seg.min(len),
            });
        }
        *group = group.end..group.end;
    }
}

impl Layer for FaultLayer {
    /// The rest of a datagram split before, then what was held and is due.
    fn pending(&mut self, buf: &mut [u8], now: Instant) -> io::Result<Option<Datagram>> {
        if let Some(s) = self.ready.pop_front() {
            return self.hand_on(s, buf).map(Some);
        }
        if self.held.front().is_none_or(|h| h.until > now.as_nanos()) {
            return Ok(None);
        }
        let h = self.held.pop_front().expect("checked");
        buf.get_mut(..h.bytes.len())
            .ok_or_else(too_small)?
            .copy_from_slice(&h.bytes);
        let len = h.bytes.len();
        Ok(Some(Datagram {
            src: h.src,
            dst: h.dst,
            len,
            seg: len,
            ecn: h.ecn,
            // Held back on purpose (a delay fault): it arrives now.
            rx_time: None,
        }))
    }

    fn arrived(&mut self, d: Datagram, buf: &mut [u8], now: Instant) -> Option<Datagram> {
        self.apply(d, buf, now.as_nanos())
    }

    fn poll_at(&self) -> Option<Instant> {
        if self.ready.is_empty() {
            self.held.front().map(|h| Instant::from_nanos(h.until))
        } else {
            Some(Instant::ZERO)
        }
    }
}

fn too_small() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "datagram larger than the receive buffer",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::memory::MemoryLink;
    use crate::link::{IoPiece, Link, Run, Runs, MAX_DATAGRAM};

    /// A memory pair whose second end injects the faults `cfg` describes.
    fn pair(cfg: &str) -> (MemoryLink, FaultLink<MemoryLink>) {
        let (a, b) =
            MemoryLink::pair("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()).unwrap();
        let mut b = FaultLink::new(b, FaultLayer::default());
        b.layer_mut()
            .set_config(Some(FaultConfig::parse(cfg).unwrap()));
        (a, b)
    }

    #[test]
    fn parse_and_rates() {
        let c = FaultConfig::parse("loss=0.1, dup=0.05,reorder=0.02,delay_us=50,seed=3").unwrap();
        assert_eq!((c.loss, c.dup, c.reorder, c.seed), (0.1, 0.05, 0.02, 3));
        assert_eq!(c.delay_time, Duration::from_micros(50));
        assert!(FaultConfig::parse("loss=2").is_err());
        assert!(FaultConfig::parse("jitter=1").is_err());
        assert!(FaultConfig::parse("").unwrap().is_off());
        let mut f = Faults::new(c);
        for i in 0..100_000 {
            let _ = f.fate(i, 100);
        }
        let k = f.counters;
        assert!((9_000..11_000).contains(&k.lost), "{k:?}");
        assert!((4_000..5_000).contains(&k.duplicated), "{k:?}");
        // Same seed, same sequence.
        let mut a = Faults::new(c);
        let mut b = Faults::new(c);
        for i in 0..1000 {
            assert_eq!(a.fate(i, 64), b.fate(i, 64));
        }
    }

    /// Sends runs of 100-byte packets numbered 0.. (first byte) through a
    /// memory pair into a fault layer, and returns what arrives: per
    /// datagram, the numbers of its packets.
    fn through(cfg: &str, runs: &[usize], until_ns: u64) -> (Vec<Vec<u8>>, FaultCounters) {
        let (mut a, mut b) = pair(cfg);
        let mut n = 0u8;
        for &count in runs {
            let mut bytes = Vec::new();
            for _ in 0..count {
                bytes.extend_from_slice(&[n; 100]);
                n += 1;
            }
            let pieces = [IoPiece::of(&bytes)];
            let run = [Run {
                iov: (0, 1),
                len: bytes.len(),
                seg: 100,
            }];
            // SAFETY: a live local buffer.
            let runs = unsafe { Runs::new(&pieces, &run) }.unwrap();
            a.send_runs(runs, b.local_addr()).unwrap();
        }
        let mut buf = vec![0; MAX_DATAGRAM];
        let mut got = Vec::new();
        for t in [0, until_ns] {
            while let Some(d) = b.recv(&mut buf, Instant::from_nanos(t)).unwrap() {
                got.push(d.packets().map(|p| buf[p.start]).collect());
            }
        }
        (got, b.layer().counters().unwrap())
    }

    #[test]
    fn a_datagram_is_split_only_where_a_fate_requires() {
        // No fault met: one coalesced datagram, as it came.
        let (got, c) = through("corrupt=0.0000001,seed=1", &[10], 0);
        assert_eq!(got, vec![(0..10).collect::<Vec<u8>>()]);
        assert_eq!(c.packets, 10);
        // Losses: the packets around each loss stay coalesced.
        let (got, c) = through("loss=0.3,seed=5", &[20], 0);
        let flat: Vec<u8> = got.iter().flatten().copied().collect();
        assert_eq!(flat.len() as u64, 20 - c.lost);
        assert!(flat.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert!(c.lost > 0 && got.iter().any(|d| d.len() > 1), "{got:?}");
        // Duplicates arrive right behind their original.
        let (got, c) = through("dup=0.3,seed=2", &[20], 0);
        let flat: Vec<u8> = got.iter().flatten().copied().collect();
        assert_eq!(flat.len() as u64, 20 + c.duplicated);
        assert!(flat.windows(2).all(|w| w[0] <= w[1]), "{got:?}");
    }

    #[test]
    fn held_packets_arrive_late_and_the_link_says_when() {
        let (mut a, mut b) = pair("reorder=1,delay_us=50");
        a.send(&[1; 64], b.local_addr()).unwrap();
        let mut buf = vec![0; MAX_DATAGRAM];
        assert!(b.recv(&mut buf, Instant::ZERO).unwrap().is_none());
        let due = b.poll_at().expect("a packet is held");
        assert!(due.as_nanos() >= 50_000);
        // Turning faults off does not lose what is held.
        b.layer_mut().set_config(None);
        assert!(b.recv(&mut buf, Instant::from_nanos(1)).unwrap().is_none());
        let d = b.recv(&mut buf, due).unwrap().expect("released");
        assert_eq!((d.len, buf[0]), (64, 1));
        assert_eq!(b.poll_at(), None);
    }

    #[test]
    fn corruption_flips_one_bit() {
        let (mut a, mut b) = pair("corrupt=1");
        a.send(&[0; 64], b.local_addr()).unwrap();
        let mut buf = vec![0; MAX_DATAGRAM];
        let d = b.recv(&mut buf, Instant::ZERO).unwrap().unwrap();
        let ones: u32 = buf[..d.len].iter().map(|b| b.count_ones()).sum();
        assert_eq!(ones, 1);
    }
}
