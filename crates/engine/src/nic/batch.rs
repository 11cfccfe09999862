//! GSO run batching: the packets one `drain_qp` sends to one peer, grouped
//! into the runs a single link call takes.
//!
//! A packet joins the open run if it is no longer than the run's segment
//! size (a shorter one closes it) and the run stays within the GSO limits;
//! a link without GSO gets runs of one packet. Each packet's headers (or all
//! of it) sit in the transmit buffer; a zero-copy packet's payload stays in
//! registered memory, and the run gathers both as pieces. ICRCs are signed
//! as packets join, since a packet's place in its run decides its IPv4 ID.
//!
//! A lent payload shorter than [`COPY_LENT_BELOW`] is copied into the
//! transmit buffer after all: the kernel copies a send's gather list piece
//! by piece, and a GSO run of 62 one-kilobyte packets lent is 124 short
//! copies (each payload, and each trailer merged with the next headers)
//! where the same run copied is one long copy. Our own copy of each
//! kilobyte, from memory the transport just checked, costs less than that
//! (BENCHMARKS.md); the packet is then signed whole, from the buffer.

use crate::counters::{bump, NicCounters};
use crate::icrc::IcrcCache;
use crate::link::{IoPiece, Link, Run, Runs, SendFailure, MAX_TRANSPORT};
use ndverbs_proto::mem::{LentPayload, MAX_LENT_PIECES};
use ndverbs_wire::icrc::ICRC_LEN;
use std::io;
use std::net::SocketAddr;

/// Lent payloads shorter than this are copied into the transmit buffer
/// rather than sent from registered memory (see the module docs): a 4-KiB
/// payload amortises its piece of the gather list.
pub(crate) const COPY_LENT_BELOW: usize = 4096;

/// The runs of one drain (see the module docs).
#[derive(Default)]
pub(crate) struct RunBatch {
    runs: [Run; Runs::MAX],
    /// Zero-copy packets of each closed run.
    lent: [u32; Runs::MAX],
    /// Closed runs in `runs`.
    closed: usize,
    pieces: Vec<IoPiece>,
    /// Bytes of the transmit buffer in use.
    tx_end: usize,
    /// The open run: pieces from `iov_start`, `len` bytes, `count` packets
    /// of `seg` bytes, `lent_count` of them zero-copy.
    iov_start: usize,
    len: usize,
    seg: usize,
    count: usize,
    lent_count: u32,
    /// Packets in the batch (for the counters when a send fails).
    packets: usize,
    /// Most packets per run: 1 when the link has no GSO.
    max_segments: usize,
    /// Destinations already warned about packets too big for their path.
    too_big_warned: Vec<SocketAddr>,
}

impl RunBatch {
    /// Empties the batch for a link with or without GSO.
    pub(crate) fn reset(&mut self, gso: bool) {
        self.clear();
        self.max_segments = if gso { Run::MAX_SEGMENTS } else { 1 };
    }

    fn clear(&mut self) {
        self.closed = 0;
        self.pieces.clear();
        self.tx_end = 0;
        (self.iov_start, self.len, self.seg, self.count, self.packets) = (0, 0, 0, 0, 0);
        self.lent_count = 0;
    }

    /// Bytes of the transmit buffer in use: the next packet goes after them.
    pub(crate) fn tx_end(&self) -> usize {
        self.tx_end
    }

    /// Whether no packet joined the batch since it was last sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// Whether another packet of any size fits in the batch.
    pub(crate) fn has_room(&self, cap: usize) -> bool {
        self.closed + usize::from(self.count > 0) < Runs::MAX
            && self.tx_end + MAX_TRANSPORT <= cap
            && self.pieces.len() - self.iov_start + 2 + MAX_LENT_PIECES <= Run::MAX_PIECES
    }

    /// The packet of `n` buffer bytes just written at `tx[tx_end..]` (plus
    /// `lent`'s payload, if any) joins the batch, its ICRC signed for `dst`.
    pub(crate) fn add(
        &mut self,
        icrc: &mut IcrcCache,
        tx: &mut [u8],
        n: usize,
        lent: &LentPayload,
        dst: SocketAddr,
    ) {
        // A short lent payload joins its headers in the buffer (module docs).
        let (n, lent_len) = match lent.len() {
            0 => (n, 0),
            len if len < COPY_LENT_BELOW => (copy_lent(&mut tx[self.tx_end..], n, lent), 0),
            len => (n, len),
        };
        let total = n + lent_len;
        let fits = self.count > 0
            && total <= self.seg
            && self.len + total <= Run::MAX_BYTES
            && self.count < self.max_segments;
        if !fits {
            self.close();
            self.seg = total;
        }
        let id = self.count as u16;
        let start = self.tx_end;
        let pkt = &mut tx[start..start + n];
        if lent_len == 0 {
            let crc = icrc.sign(dst, id, &[&pkt[..n - ICRC_LEN]]);
            pkt[n - ICRC_LEN..].copy_from_slice(&crc.unwrap_or(0).to_le_bytes());
            self.piece(IoPiece::of(pkt));
        } else {
            let h = lent.hdr_len;
            let mut parts: [&[u8]; MAX_LENT_PIECES + 2] = [&[]; MAX_LENT_PIECES + 2];
            parts[0] = &pkt[..h];
            for (part, bytes) in parts[1..].iter_mut().zip(lent_bytes(lent)) {
                *part = bytes;
            }
            let k = lent.pieces().len();
            parts[1 + k] = &pkt[h..n - ICRC_LEN];
            let crc = icrc.sign(dst, id, &parts[..k + 2]).unwrap_or(0);
            pkt[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
            let pkt = &tx[start..start + n];
            self.piece(IoPiece::of(&pkt[..h]));
            for &(base, len) in lent.pieces() {
                self.piece(IoPiece { base, len });
            }
            self.piece(IoPiece::of(&pkt[h..]));
            self.lent_count += 1;
        }
        self.tx_end += n;
        self.len += total;
        self.count += 1;
        self.packets += 1;
        if total < self.seg {
            // A shorter packet ends a GSO run.
            self.close();
        }
    }

    /// Appends a piece, merged with the previous one of the same run when
    /// they touch (whole packets back to back in the buffer).
    fn piece(&mut self, p: IoPiece) {
        if self.pieces.len() > self.iov_start {
            if let Some(last) = self.pieces.last_mut() {
                if last.base + last.len == p.base {
                    last.len += p.len;
                    return;
                }
            }
        }
        self.pieces.push(p);
    }

    fn close(&mut self) {
        if self.count > 0 {
            self.runs[self.closed] = Run {
                iov: (self.iov_start, self.pieces.len()),
                len: self.len,
                seg: self.seg,
            };
            self.lent[self.closed] = self.lent_count;
            self.closed += 1;
        }
        self.iov_start = self.pieces.len();
        (self.len, self.count, self.lent_count) = (0, 0, 0);
    }

    /// Sends every run to `dst` through `link` and empties the batch.
    /// Packets the link refuses are dropped and counted by cause
    /// ([`SendFailure`]): the transport retransmits them. A run refused for
    /// its size costs only its own packets (warned once per destination);
    /// any other refusal ends the flush.
    pub(crate) fn flush(&mut self, link: &mut impl Link, counters: &NicCounters, dst: SocketAddr) {
        self.close();
        let mut done = 0;
        while done < self.closed {
            // SAFETY: the pieces are the transmit buffer (borrowed by the
            // caller for the call) and regions the memory table lent for
            // this step.
            let runs = unsafe { Runs::new(&self.pieces, &self.runs[done..self.closed]) };
            match runs.and_then(|runs| link.send_runs(runs, dst)) {
                Ok(k) => {
                    bump(&counters.send_calls, 1);
                    for (r, &lent) in self.runs[done..done + k].iter().zip(&self.lent[done..]) {
                        let pkts = r.packets();
                        self.packets -= pkts;
                        bump(&counters.sent_datagrams, pkts as u64);
                        bump(&counters.zero_copy_packets, u64::from(lent));
                        if pkts > 1 {
                            bump(&counters.gso_runs, 1);
                        }
                    }
                    done += k;
                    if k == 0 {
                        break;
                    }
                }
                Err(e) => {
                    let failure = SendFailure::of(&e);
                    if failure == SendFailure::TooBig {
                        // This run only: the runs after it may fit (an ACK
                        // behind a burst of full-size packets).
                        let r = self.runs[done];
                        let pkts = r.packets();
                        self.packets -= pkts;
                        bump(&counters.send_too_big, pkts as u64);
                        if !self.too_big_warned.contains(&dst) {
                            self.too_big_warned.push(dst);
                            warn_too_big(dst, r.seg, pkts);
                        }
                        done += 1;
                        continue;
                    }
                    count_refused(counters, failure, &e, self.packets as u64, dst);
                    break;
                }
            }
        }
        self.clear();
    }
}

/// Puts `lent`'s payload into the packet of `n` bytes at the start of `pkt`
/// (headers, then pad and ICRC placeholder) between its headers and its
/// trailer; returns the whole packet's length.
fn copy_lent(pkt: &mut [u8], n: usize, lent: &LentPayload) -> usize {
    let (h, len) = (lent.hdr_len, lent.len());
    pkt.copy_within(h..n, h + len);
    let mut at = h;
    for src in lent_bytes(lent) {
        pkt[at..at + src.len()].copy_from_slice(src);
        at += src.len();
    }
    n + len
}

/// The bytes of `lent`'s pieces, in order.
fn lent_bytes(lent: &LentPayload) -> impl Iterator<Item = &[u8]> {
    lent.pieces().iter().map(|&(base, len)| {
        // SAFETY: the memory table lent these bytes for this step
        // (`Memory::lend_local`, `Memory::lend_remote`): they stay mapped
        // until it changes, which needs the engine lock, held throughout the
        // drain and its send; they are registered memory, never the transmit
        // buffer.
        unsafe { std::slice::from_raw_parts(base as *const u8, len) }
    })
}

/// Counts `packets` the link refused with `e` (`failure`) — all dropped,
/// left to the transport's retransmission — and logs it: a warning the
/// first time per process for each kind, then at debug (an error repeats
/// for every packet while its cause lasts).
#[cold]
pub(crate) fn count_refused(
    counters: &NicCounters,
    failure: SendFailure,
    e: &io::Error,
    packets: u64,
    dst: SocketAddr,
) {
    match failure {
        SendFailure::WouldBlock => {
            bump(&counters.send_would_block, packets);
            warn_send_buffer_full(dst);
        }
        SendFailure::NoBuffers => {
            bump(&counters.send_no_buffers, packets);
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::warn!(
                    peer = %dst,
                    "no kernel or device buffer for a send (ENOBUFS): packets dropped and left \
                     to retransmission (counted in send_no_buffers)"
                )
            });
            tracing::debug!(peer = %dst, packets, "no buffer for the send (ENOBUFS): dropped");
        }
        SendFailure::TooBig => {
            bump(&counters.send_too_big, packets);
            tracing::debug!(peer = %dst, packets, "packet too big for the path: dropped");
        }
        SendFailure::Other => {
            bump(&counters.send_errors, packets);
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::warn!(
                    error = %e,
                    peer = %dst,
                    "send failed: packets dropped and left to retransmission (counted in \
                     send_errors; later failures are logged at debug)"
                )
            });
            tracing::debug!(error = %e, peer = %dst, packets, "send failed: dropped");
        }
    }
}

/// Warns, once per destination, that packets of `size` bytes (a run of
/// `packets`) are larger than the path to `peer` carries.
#[cold]
fn warn_too_big(peer: SocketAddr, size: usize, packets: usize) {
    tracing::warn!(
        %peer,
        packet_bytes = size,
        packets,
        "packets larger than the path to the peer carries (EMSGSIZE): dropped and counted in \
         send_too_big; the queue pair's path MTU is larger than the interface MTU allows \
         (RoCEv2 adds 58 bytes of IP/UDP/BTH/ICRC): use a smaller path MTU or raise the \
         interface's"
    );
}

/// Warns, once per process, that a link's send buffer was full after a
/// wait (the packets are dropped; the transport retransmits them).
#[cold]
pub(crate) fn warn_send_buffer_full(peer: SocketAddr) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            %peer,
            "UDP send buffer full: packets dropped and left to retransmission (counted in \
             send_would_block; raise net.core.wmem_max)"
        )
    });
}
