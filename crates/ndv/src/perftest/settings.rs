//! The run parameters perftest 4.5 shows in its header and measures with:
//! its defaults per program and how the options depend on each other
//! (`init_perftest_params`, `force_dependecies`).

use super::program::{Kind, PerfTest, Role, Verb};
use super::schedule::Flow;

/// Atomic operation of the atomic tests (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicOp {
    /// `CMP_AND_SWAP`
    CmpAndSwap,
    /// `FETCH_AND_ADD` (the default)
    #[default]
    FetchAndAdd,
}

impl AtomicOp {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// How connections are set up (`-R`, `-z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CmMode {
    /// TCP exchange, QPs connected by hand (the default).
    #[default]
    Off,
    /// `-R`: QPs connected by rdma_cm (exchange too).
    Qps,
}

/// Bandwidth units of the BW tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BwUnits {
    /// MB/sec, meaning 2^20 bytes per second (the default).
    #[default]
    MiBps,
    /// Gb/sec, 10^9 bits per second (`--report_gbits`).
    Gbps,
}

impl BwUnits {
    /// Bytes per unit per second (`format_factor`).
    pub fn factor(self) -> u64 {
        match self {
            BwUnits::MiBps => 0x100000,
            BwUnits::Gbps => 125_000_000,
        }
    }
}

/// Run parameters that the header shows and the statistics need, with
/// perftest's defaults and inter-dependencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `-s`: message size.
    pub size: u64,
    /// `-n`: iterations (0 after [`Settings::resolve`] with `-D`).
    pub iters: u64,
    /// `-t`: send queue depth.
    pub tx_depth: u32,
    /// `-r`: receive queue depth (SEND tests).
    pub rx_depth: u32,
    /// `-Q`: one signalled completion per this many sends (BW).
    pub cq_mod: u32,
    /// Whether `-Q` was given.
    pub cq_mod_requested: bool,
    /// `-D`: seconds, time-based run.
    pub duration: Option<u32>,
    /// `-b`: bidirectional (BW).
    pub duplex: bool,
    /// `-a`: all sizes.
    pub all_sizes: bool,
    /// `-e`: completion events.
    pub events: bool,
    /// `-N`, or implied (see [`Settings::resolve`]): no peak BW.
    pub no_peak: bool,
    /// `-l`: work requests per post.
    pub post_list: u32,
}

impl Settings {
    /// The options among these that change a program's sequence of steps
    /// ([`super::schedule::schedule`]).
    pub fn flow(&self) -> Flow {
        Flow {
            duplex: self.duplex,
            duration: self.duration.is_some(),
            all_sizes: self.all_sizes,
        }
    }

    /// perftest's defaults for `test` (`init_perftest_params`): size 65536
    /// (BW), 2 (LAT), 8 (atomic); 5000 iterations for `ib_write_bw`, else
    /// 1000; TX depth 128 (BW) or 1 (LAT); RX depth 512 (SEND); CQ
    /// moderation 100.
    pub fn defaults(test: PerfTest) -> Settings {
        let bw = test.kind == Kind::Bw;
        Settings {
            size: match (test.verb, bw) {
                (Verb::Atomic, _) => 8,
                (_, true) => 65536,
                (_, false) => 2,
            },
            iters: if bw && test.verb == Verb::Write {
                5000
            } else {
                1000
            },
            tx_depth: if bw { 128 } else { 1 },
            rx_depth: if test.verb == Verb::Send { 512 } else { 1 },
            cq_mod: 100,
            cq_mod_requested: false,
            duration: None,
            duplex: false,
            all_sizes: false,
            events: false,
            no_peak: false,
            post_list: 1,
        }
    }

    /// The values perftest actually uses (`force_dependecies`, RC): TX/RX
    /// depth at most the iterations (iteration runs), CQ moderation 1 for
    /// messages above 8 KiB unless `-Q`/`-a`/`-e`, CQ moderation at most the
    /// TX depth, the post list as CQ moderation unless `-Q`, no peak for `-D`,
    /// for the server of a unidirectional `ib_send_bw` and above 20000
    /// iterations, an odd SEND RX depth rounded up (not with `-a`).
    pub fn resolve(&self, test: PerfTest, role: Role) -> Settings {
        let mut s = self.clone();
        let send = test.verb == Verb::Send;
        let bw = test.kind == Kind::Bw;
        if s.duration.is_none() {
            s.tx_depth = s.tx_depth.min(clamp_u32(s.iters));
            if send {
                s.rx_depth = s.rx_depth.min(clamp_u32(s.iters));
            }
        }
        if s.size > 8192 && !s.all_sizes && !s.events && !s.cq_mod_requested {
            s.cq_mod = 1;
        }
        if s.cq_mod > s.tx_depth {
            s.cq_mod = s.tx_depth;
        }
        if s.all_sizes {
            s.size = 1 << 23;
        }
        if s.post_list > 1 && bw && !s.cq_mod_requested {
            s.cq_mod = s.post_list;
        }
        if s.duration.is_some() {
            s.iters = 0;
            s.no_peak = true;
        }
        if send && bw && role == Role::Server && !s.duplex {
            s.no_peak = true;
        }
        if send && s.rx_depth % 2 == 1 && !s.all_sizes {
            s.rx_depth += 1;
        }
        if s.duration.is_none() && s.iters > 20000 && bw {
            s.no_peak = true;
        }
        s
    }
}

fn clamp_u32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::super::testing::{with, ATOMIC_BW, SEND_BW, SEND_LAT, WRITE_BW};
    use super::*;

    #[test]
    fn settings_like_perftest() {
        let r = |t: PerfTest, role, f: fn(&mut Settings)| with(t, f).resolve(t, role);
        // Defaults: 65536-byte messages disable CQ moderation.
        let s = r(WRITE_BW, Role::Client, |_| {});
        assert_eq!(
            (s.size, s.iters, s.tx_depth, s.cq_mod),
            (65536, 5000, 128, 1)
        );
        let s = r(SEND_BW, Role::Server, |_| {});
        assert_eq!((s.iters, s.rx_depth, s.no_peak), (1000, 512, true));
        let s = r(SEND_LAT, Role::Client, |_| {});
        assert_eq!((s.size, s.tx_depth, s.rx_depth), (2, 1, 512));
        let s = r(ATOMIC_BW, Role::Client, |_| {});
        assert_eq!((s.size, s.cq_mod), (8, 100));
        // -n 5: depths clamped, odd SEND RX depth rounded up, CQ moderation <= TX depth.
        let s = r(SEND_BW, Role::Server, |s| {
            s.iters = 5;
            s.size = 4096;
        });
        assert_eq!((s.tx_depth, s.rx_depth, s.cq_mod), (5, 6, 5));
        // -Q keeps CQ moderation for big messages; -D: no peak, no clamping.
        let s = r(WRITE_BW, Role::Client, |s| {
            s.cq_mod_requested = true;
            s.duration = Some(8);
        });
        assert_eq!(
            (s.cq_mod, s.iters, s.no_peak, s.tx_depth),
            (100, 0, true, 128)
        );
        let s = r(WRITE_BW, Role::Client, |s| s.iters = 30000);
        assert!(s.no_peak);
        let s = r(SEND_BW, Role::Client, |s| {
            s.size = 64;
            s.post_list = 8;
        });
        assert_eq!(s.cq_mod, 8);
    }
}
