//! Per-QP counters, named after Linux rxe's hardware counters where one applies
//! (`rxe_hw_counters.c`), plus one counter per reason a packet is dropped.

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident,)* }
     $($(#[$nm:meta])* nested $nested:ident: $nty:ty)?) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
            $($(#[$nm])* pub $nested: $nty,)?
        }

        impl $name {
            /// Every counter as `(name, value)`, in declaration order (nested
            /// drop counters last).
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                #[allow(unused_mut)]
                let mut v = vec![$((stringify!($field), self.$field),)*];
                $(v.extend(self.$nested.pairs());)?
                v
            }
        }
    };
}

counters! {
    /// Packet and event counts of one QP.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{QpCaps, RcQp};
    /// let qp = RcQp::new(1, 0, QpCaps::default());
    /// let c = qp.counters();
    /// assert_eq!(c.sent_pkts, 0);
    /// // `pairs` lists them under rxe's hw_counters names, drops last.
    /// let names: Vec<_> = c.pairs().into_iter().map(|(name, _)| name).collect();
    /// assert_eq!(names[..2], ["sent_pkts", "rcvd_pkts"]);
    /// assert!(names.contains(&"wrong_qpn"));
    /// ```
    Counters {
        /// Packets handed out by `poll_transmit`.
        sent_pkts,
        /// Packets given to `handle_packet` (before any check).
        rcvd_pkts,
        /// Responder: requests with an already-seen PSN.
        duplicate_request,
        /// Responder: PSN-sequence NAKs sent for a PSN gap.
        out_of_seq_request,
        /// Responder: PSN gaps that a late request filled while the
        /// requests ahead of it were held (a reordering, not a loss).
        resequenced,
        /// Completer: RNR NAKs received.
        rcvd_rnr_err,
        /// Responder: RNR NAKs sent (no receive posted).
        send_rnr_err,
        /// Completer: PSN-sequence NAKs received.
        rcvd_seq_err,
        /// Responder: ACKs merged into a later queued ACK (coalescing).
        ack_deferred,
        /// Completer: transport retries exhausted.
        retry_exceeded_err,
        /// Completer: RNR retries exhausted.
        retry_rnr_exceeded_err,
        /// Completer: go-back-N retries started (timeout, sequence NAK, lost response).
        completer_retry_err,
        /// Requester: send requests failed locally (bad SGE).
        send_err,
        /// Completed SEND work requests.
        rdma_sends,
        /// Completed receive work requests.
        rdma_recvs,
        /// Requester: PSNs sent for the first time (a READ request counts
        /// the response PSNs it asks for).
        req_psns_first,
        /// Requester: PSNs sent again by go-back-N (the share of these in
        /// all PSNs sent is what loss costs the path).
        req_psns_resent,
    }
    /// Packets dropped, by cause.
    nested drops: Drops
}

counters! {
    /// Packets dropped without effect, by cause.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::mem::testing::VecMemory;
    /// use ndverbs_proto::rc::{QpCaps, RcQp, RecvQueue};
    /// use ndverbs_proto::time::Instant;
    /// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
    /// // A SEND addressed to QP 2 reaches QP 1: counted and dropped, nothing else happens.
    /// let mut qp = RcQp::new(1, 0, QpCaps::default());
    /// let pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 2, 0));
    /// qp.handle_packet(Instant::ZERO, &pkt, &mut VecMemory::new(), &mut RecvQueue::new(1, 1));
    /// assert_eq!(qp.counters().drops.wrong_qpn, 1);
    /// assert_eq!(qp.counters().drops.pairs().iter().map(|p| p.1).sum::<u64>(), 1);
    /// ```
    Drops {
        /// DestQP is not this QP.
        wrong_qpn,
        /// P_Key is not the default partition.
        bad_pkey,
        /// Opcode of another transport (UC, UD, CNP) or an unknown one.
        not_rc,
        /// The QP state does not accept this packet class.
        bad_state,
        /// Responder: out-of-order request after the one sequence NAK.
        out_of_seq,
        /// Responder: duplicate READ/atomic with no saved resource.
        unmatched_duplicate,
        /// Responder: duplicate READ that is not a sub-range of the original.
        invalid_duplicate,
        /// Responder: reply queue full (the request is treated as lost).
        reply_queue_full,
        /// Completer: response to a PSN never sent, or nothing outstanding.
        ghost_response,
        /// Completer: response for a PSN already acknowledged.
        stale_response,
        /// Completer: READ/atomic response ahead of the one expected.
        out_of_order_response,
        /// Completer: ACK/NAK that does not apply (reserved syndrome, ACK inside a READ).
        unexpected_ack,
        /// Completer: a retry or RNR NAK while a retry is already under way.
        redundant_nak,
        /// `poll_transmit` buffer too small for the next packet.
        tx_no_room,
        /// UD: the DETH's Q_Key is not the QP's.
        bad_qkey,
        /// UD: no receive was posted (the datagram is lost, as UD allows).
        no_recv,
    }
}
