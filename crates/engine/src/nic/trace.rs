//! What the engine reports through `tracing`, and the helpers that keep the
//! packet path cheap while doing it.
//!
//! The engine never prints. Per-packet paths only test whether a level is on;
//! what they would log per packet is summed instead: a queue pair's retries,
//! NAKs and drops are reported once per step from the difference of its
//! counters (`debug`, drops by cause at `trace`), flushes once per step with
//! their number, MADs with their CM message name and transaction ID.

use super::tables::QpEntry;
use ndverbs_proto::rc::{Counters, WcStatus, WorkCompletion};
use std::net::IpAddr;

impl QpEntry {
    /// Reports what the protocol counted since the last report: retries and
    /// NAKs at `debug`, drops by cause at `trace` (exhausted retries are
    /// reported with their completion). Called only while `debug` is on.
    #[cold]
    pub(super) fn log_counters(&mut self) {
        let (old, new) = (&self.logged, self.qp.counters());
        if old == new {
            return;
        }
        let qp = self.qp.qpn();
        // One `debug` event per counter that moved, with how much.
        let since = |count: fn(&Counters) -> u64| count(new).wrapping_sub(count(old));
        for (n, what) in [
            (
                since(|c| c.completer_retry_err),
                "retransmitting (timeout or sequence NAK)",
            ),
            (
                since(|c| c.rcvd_rnr_err),
                "RNR NAK received: the peer had no receive posted",
            ),
            (since(|c| c.send_rnr_err), "RNR NAK sent: no receive posted"),
            (since(|c| c.rcvd_seq_err), "sequence NAK received"),
            (
                since(|c| c.out_of_seq_request),
                "sequence NAK sent: PSN gap",
            ),
            (
                since(|c| c.duplicate_request),
                "duplicate requests answered",
            ),
        ] {
            if n > 0 {
                tracing::debug!(qp, count = n, "{what}");
            }
        }
        if old.drops != new.drops && tracing::enabled!(tracing::Level::TRACE) {
            for ((cause, a), (_, b)) in old.drops.pairs().into_iter().zip(new.drops.pairs()) {
                if b != a {
                    tracing::trace!(qp, cause, packets = b.wrapping_sub(a), "packets dropped");
                }
            }
        }
        self.logged = *new;
    }
}

/// Reports a completion with an error status; returns 1 for a flush (counted
/// and reported per step by the caller), else 0.
#[cold]
pub(super) fn log_error_completion(wc: &WorkCompletion) -> u32 {
    match wc.status {
        WcStatus::WrFlushErr => return 1,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => tracing::warn!(
            qp = wc.qpn,
            wr_id = wc.wr_id,
            status = ?wc.status,
            "retries exhausted: the request failed and the QP went to error"
        ),
        _ => tracing::debug!(
            qp = wc.qpn,
            wr_id = wc.wr_id,
            status = ?wc.status,
            opcode = ?wc.opcode,
            "work request completed with an error"
        ),
    }
    0
}

/// The CM message name of a MAD (its attribute ID), for the logs.
pub(super) fn mad_name(mad: &[u8]) -> &'static str {
    // Attribute ID: bytes 16..18 of the MAD header.
    ndverbs_wire::cm::attr::name(u16::from_be_bytes([mad[16], mad[17]]))
}

/// The transaction ID of a MAD (bytes 8..16 of its header).
pub(super) fn mad_tid(mad: &[u8]) -> u64 {
    u64::from_be_bytes(mad[8..16].try_into().expect("8 bytes"))
}

/// Reports a MAD the CM agent took, and why it dropped it if it did.
#[cold]
pub(super) fn log_mad_received(
    src: IpAddr,
    mad: &[u8],
    before: &ndverbs_proto::cm::CmCounters,
    after: &ndverbs_proto::cm::CmCounters,
) {
    let (name, tid) = (mad_name(mad), mad_tid(mad));
    let drop = [
        (before.rx_malformed, after.rx_malformed, "malformed"),
        (before.rx_unsupported, after.rx_unsupported, "unsupported"),
        (
            before.rx_unmatched,
            after.rx_unmatched,
            "no such connection",
        ),
        (before.rx_wrong_state, after.rx_wrong_state, "wrong state"),
        (
            before.rx_dreq_bad_qpn,
            after.rx_dreq_bad_qpn,
            "DREQ for another QP",
        ),
        (
            before.rx_after_removal,
            after.rx_after_removal,
            "device removed",
        ),
    ]
    .into_iter()
    .find(|(b, a, _)| a != b);
    match drop {
        Some((_, _, cause)) => tracing::debug!(from = %src, mad = name, tid, cause, "MAD dropped"),
        None if after.rx_duplicates != before.rx_duplicates => {
            tracing::debug!(from = %src, mad = name, tid, "MAD received (a retransmission)")
        }
        None => tracing::debug!(from = %src, mad = name, tid, "MAD received"),
    }
}
