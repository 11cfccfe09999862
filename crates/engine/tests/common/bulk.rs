//! Bulk transfers between two connected [`Side`]s for the reliability tests:
//! `n` operations of `chunk` bytes with `slots` in flight, run by the test
//! kit's pump (every work request completes exactly once, successfully) and
//! every byte verified.
//!
//! Each side's region holds two halves of `slots` chunks: WRITE goes from
//! a's first half into b's first half, READ from b's first half into a's
//! second half, SEND from a's first half into receives in b's second half.
//! Each operation writes a fresh pattern first (seeded by its number, with
//! one seed range per kind), so no chunk can pass by carrying stale bytes.

use super::{pattern, Side, WC_LIMIT};
use ndverbs_proto::rc::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use ndverbs_testkit::verbs::Pump;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Seeds of the READ and SEND patterns (WRITE's start at 0).
const READ_SEED: u64 = 1_000_000;
const SEND_SEED: u64 = 2_000_000;

/// Bulk transfers from `a` to `b` (see the module docs).
pub struct Bulk<'s> {
    /// The requester.
    pub a: &'s Side,
    /// The responder.
    pub b: &'s Side,
    /// Bytes per operation.
    pub chunk: usize,
    /// Operations in flight.
    pub slots: usize,
    /// How long each run of operations may take.
    pub limit: Duration,
}

impl<'s> Bulk<'s> {
    /// `chunk`-byte operations from `a` to `b`, `slots` in flight, 10
    /// minutes for each run.
    pub fn new(a: &'s Side, b: &'s Side, chunk: usize, slots: usize) -> Self {
        Bulk {
            a,
            b,
            chunk,
            slots,
            limit: Duration::from_secs(600),
        }
    }

    fn offset(&self, i: u64) -> usize {
        (i % self.slots as u64) as usize * self.chunk
    }

    fn upper(&self) -> usize {
        self.slots * self.chunk
    }

    #[track_caller]
    fn fits(&self, s: &Side, halves: usize) {
        assert!(
            s.mr.len() >= halves * self.upper(),
            "{halves} × {} slots of {} bytes do not fit a {}-byte region",
            self.slots,
            self.chunk,
            s.mr.len()
        );
    }

    #[track_caller]
    fn pump(&self, n: usize, issue: impl FnMut(u64), check: impl FnMut(&WorkCompletion)) {
        Pump::new(self.slots).limit(self.limit).run(
            n as u64,
            || self.a.cq.poll_one(),
            issue,
            check,
        );
    }

    /// [`Bulk::write`], [`Bulk::read`] and [`Bulk::send`] of `n` operations
    /// each, in that order (`after` as for `write`); returns how long each
    /// took.
    #[track_caller]
    pub fn all(&self, n: usize, after: impl FnMut(usize)) -> [Duration; 3] {
        let t0 = Instant::now();
        self.write(n, after);
        let t1 = Instant::now();
        self.read(n);
        let t2 = Instant::now();
        self.send(n);
        [t1 - t0, t2 - t1, t2.elapsed()]
    }

    /// `n` WRITEs, each verified in b's memory when it completes;
    /// `after(done)` runs after each completion (to disturb the link
    /// midway, say).
    #[track_caller]
    pub fn write(&self, n: usize, mut after: impl FnMut(usize)) {
        let (a, b, len) = (self.a, self.b, self.chunk);
        self.fits(a, 1);
        self.fits(b, 1);
        let mut done = 0;
        self.pump(
            n,
            |i| {
                let off = self.offset(i);
                a.mr.write(off, &pattern(i, len)).unwrap();
                let wr = SendWr::new(i, SendOp::Write(b.remote(off)), vec![a.sge(off, len)]);
                a.nic.post_send(&a.qp, wr).unwrap();
            },
            |wc| {
                let i = wc.wr_id;
                assert!(
                    b.bytes(self.offset(i), len) == pattern(i, len),
                    "WRITE chunk {i} corrupted"
                );
                done += 1;
                after(done);
            },
        );
    }

    /// `n` READs of fresh patterns in b's memory, each verified in a's
    /// second half when it completes.
    #[track_caller]
    pub fn read(&self, n: usize) {
        let (a, b, len) = (self.a, self.b, self.chunk);
        self.fits(a, 2);
        self.fits(b, 1);
        self.pump(
            n,
            |i| {
                let off = self.offset(i);
                b.mr.write(off, &pattern(READ_SEED + i, len)).unwrap();
                let into = a.sge(self.upper() + off, len);
                let wr = SendWr::new(i, SendOp::Read(b.remote(off)), vec![into]);
                a.nic.post_send(&a.qp, wr).unwrap();
            },
            |wc| {
                let i = wc.wr_id;
                let got = a.bytes(self.upper() + self.offset(i), len);
                assert!(
                    got == pattern(READ_SEED + i, len),
                    "READ chunk {i} corrupted"
                );
            },
        );
    }

    /// `n` SENDs into receives posted in b's second half (`slots` of them,
    /// each posted again once verified): every message arrives once, in
    /// order, whole and with its bytes, and nothing more arrives.
    #[track_caller]
    pub fn send(&self, n: usize) {
        let (a, b, len) = (self.a, self.b, self.chunk);
        self.fits(a, 1);
        self.fits(b, 2);
        let post_recv = |wr_id: u64| {
            let into = b.sge(self.upper() + self.offset(wr_id), len);
            b.nic
                .post_recv(&b.qp, RecvWr::new(wr_id, vec![into]))
                .unwrap();
        };
        for wr_id in 0..self.slots.min(n) as u64 {
            post_recv(wr_id);
        }
        let received = Cell::new(0u64);
        // Receives are taken in the order they were posted, so message
        // `received` lands in the receive with that id.
        let take_receives = || {
            while let Some(w) = b.cq.poll_one() {
                let m = received.get();
                assert_eq!(
                    (w.status, w.opcode, w.byte_len as usize, w.wr_id),
                    (WcStatus::Success, WcOpcode::Recv, len, m),
                    "{w:?}"
                );
                let got = b.bytes(self.upper() + self.offset(w.wr_id), len);
                assert!(
                    got == pattern(SEND_SEED + m, len),
                    "SEND message {m} corrupted"
                );
                received.set(m + 1);
                if w.wr_id + (self.slots as u64) < n as u64 {
                    post_recv(w.wr_id + self.slots as u64);
                }
            }
        };
        self.pump(
            n,
            |i| {
                let off = self.offset(i);
                a.mr.write(off, &pattern(SEND_SEED + i, len)).unwrap();
                let wr = SendWr::new(i, SendOp::Send, vec![a.sge(off, len)]);
                a.nic.post_send(&a.qp, wr).unwrap();
            },
            |_| take_receives(),
        );
        // The last receive completions may trail the last send completion.
        let t0 = Instant::now();
        while received.get() < n as u64 {
            assert!(
                t0.elapsed() < WC_LIMIT,
                "{} of {n} receives completed",
                received.get()
            );
            take_receives();
            std::thread::yield_now();
        }
        assert!(b.cq.poll_one().is_none(), "a receive completed twice");
    }
}
