//! A seeded fault layer on the engine's packet path.
//!
//! Real networks lose, duplicate, reorder, delay and (rarely) corrupt packets.
//! This layer does all five to the packets an adapter sends, from one seed, so a
//! run that fails can be replayed. It is for ndverbs' own tests and for
//! applications that want to test themselves against a bad network: configure
//! it through [`FaultConfig`] in the API, or the `NDV_FAULTS` environment
//! variable, e.g. `NDV_FAULTS="loss=0.1,dup=0.02,reorder=0.05,delay_us=200,corrupt=0.001,seed=7"`.
//!
//! * **loss** — the packet is not sent.
//! * **dup** — it is sent twice.
//! * **reorder** — it is held back and sent after the next packet instead
//!   (or when its hold time expires).
//! * **delay** — every held packet waits `delay_us` (plus up to the same again,
//!   at random) before it goes out.
//! * **corrupt** — one random bit is flipped after the ICRC was computed, so the
//!   receiver must drop it.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

/// Probabilities (0.0..=1.0) and parameters of the fault layer.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// use ndverbs_engine::faults::FaultConfig;
/// // The NDV_FAULTS syntax; unnamed values stay zero.
/// let cfg = FaultConfig::parse("loss=0.1,dup=0.02,delay_us=200,seed=7")?;
/// assert_eq!((cfg.loss, cfg.dup, cfg.reorder, cfg.seed), (0.1, 0.02, 0.0, 7));
/// assert!(!cfg.is_off());
/// let a = Adapter::open("127.93.20.1".parse().unwrap(), Progress::Thread)?;
/// a.set_faults(Some(cfg))?; // every packet `a` sends from now on
/// assert_eq!(a.fault_counters().unwrap().packets, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    /// Chance a packet is dropped.
    pub loss: f64,
    /// Chance a packet is sent twice.
    pub dup: f64,
    /// Chance a packet is held back behind the next one.
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
/// use ndverbs_engine::faults::FaultConfig;
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

    /// The configuration in `NDV_FAULTS`, if set.
    pub fn from_env() -> Result<Option<Self>, FaultSpecError> {
        match std::env::var("NDV_FAULTS") {
            Ok(s) if !s.trim().is_empty() => Self::parse(&s).map(Some),
            _ => Ok(None),
        }
    }
}

/// What the fault layer did, for reports.
///
/// # Example
///
/// ```
/// use ndverbs_engine::faults::{FaultConfig, Faults};
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
    /// Packets offered.
    pub packets: u64,
    /// Dropped.
    pub lost: u64,
    /// Sent twice.
    pub duplicated: u64,
    /// Held behind a later packet.
    pub reordered: u64,
    /// Delayed.
    pub delayed: u64,
    /// Corrupted.
    pub corrupted: u64,
}

/// A packet waiting in the fault layer.
///
/// # Example
///
/// ```
/// use ndverbs_engine::faults::{Faults, FaultConfig, Held};
/// let mut f = Faults::new(FaultConfig::default());
/// let pkt = |release_ns| Held { release_ns, dst: "10.0.0.2".parse().unwrap(), bytes: vec![0; 16], corrupt: None };
/// f.hold(pkt(2_000));
/// f.hold(pkt(1_000)); // kept in release order
/// assert_eq!(f.next_release(), Some(1_000));
/// assert_eq!(f.due(1_500).map(|h| h.release_ns), Some(1_000));
/// assert!(f.due(1_500).is_none()); // the other is not due yet
/// ```
#[derive(Debug)]
pub struct Held {
    /// When it may go.
    pub release_ns: u64,
    /// Destination.
    pub dst: IpAddr,
    /// Transport bytes (BTH through ICRC placeholder).
    pub bytes: Vec<u8>,
    /// Flip a bit after the ICRC is computed.
    pub corrupt: Option<usize>,
}

/// Decides the fate of each packet.
///
/// # Example
///
/// ```
/// use ndverbs_engine::faults::{Fate, FaultConfig, Faults};
/// // Same seed, same fates: a failing run can be replayed.
/// let cfg = FaultConfig::parse("loss=0.2,reorder=0.2,dup=0.2,seed=42").unwrap();
/// let (mut x, mut y) = (Faults::new(cfg), Faults::new(cfg));
/// for t in 0..100 {
///     assert_eq!(x.fate(t, 64), y.fate(t, 64));
/// }
/// // Off: every packet goes out once, untouched.
/// let mut off = Faults::new(FaultConfig::default());
/// assert_eq!(off.fate(0, 64), Fate::Send { copies: 1, corrupt: None });
/// ```
#[derive(Debug)]
pub struct Faults {
    cfg: FaultConfig,
    state: u64,
    /// Packets held for reordering or delay, in release order.
    pub held: VecDeque<Held>,
    /// What happened so far.
    pub counters: FaultCounters,
}

/// What to do with one packet now.
///
/// # Example
///
/// ```
/// use ndverbs_engine::faults::{Fate, FaultConfig, Faults};
/// let mut f = Faults::new(FaultConfig::parse("reorder=1,delay_us=50").unwrap());
/// // What the engine does with each packet it is about to send.
/// match f.fate(1_000, 64) {
///     Fate::Send { copies, corrupt } => println!("send {copies}x, flip {corrupt:?}"),
///     Fate::Drop => println!("lost"),
///     Fate::Hold(until) => assert!(until >= 1_000 + 50_000), // held back, overtaken by the next
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Send it (`copies` times; flip bit `corrupt` after the ICRC if set).
    Send {
        /// 1 or 2.
        copies: u8,
        /// Bit to flip.
        corrupt: Option<usize>,
    },
    /// Drop it.
    Drop,
    /// Hold it until the given time (nanoseconds on the engine clock).
    Hold(u64),
}

impl Faults {
    /// A fault layer with configuration `cfg`.
    pub fn new(cfg: FaultConfig) -> Self {
        Faults {
            cfg,
            state: cfg.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            held: VecDeque::new(),
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

    /// Decides what happens to a packet of `len` bytes sent at `now_ns`.
    pub fn fate(&mut self, now_ns: u64, len: usize) -> Fate {
        self.counters.packets += 1;
        if self.next() < self.cfg.loss {
            self.counters.lost += 1;
            return Fate::Drop;
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
            return Fate::Hold(now_ns + base.max(20_000) + (self.next() * base as f64) as u64);
        }
        if self.next() < self.cfg.delay {
            self.counters.delayed += 1;
            return Fate::Hold(now_ns + base + (self.next() * base as f64) as u64);
        }
        let copies = if self.next() < self.cfg.dup {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        Fate::Send { copies, corrupt }
    }

    /// Queues a held packet (kept in release order).
    pub fn hold(&mut self, h: Held) {
        let pos = self
            .held
            .iter()
            .position(|x| x.release_ns > h.release_ns)
            .unwrap_or(self.held.len());
        self.held.insert(pos, h);
    }

    /// The next held packet due by `now_ns`.
    pub fn due(&mut self, now_ns: u64) -> Option<Held> {
        if self.held.front().is_some_and(|h| h.release_ns <= now_ns) {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// When the next held packet is due.
    pub fn next_release(&self) -> Option<u64> {
        self.held.front().map(|h| h.release_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
