//! Answers: duplicates (acknowledged again, or replayed from a saved
//! resource) and the reply queue, turned into packets one at a time.

use super::super::requester::LEND_MIN;
use super::*;

impl Responder {
    /// A request with a PSN already seen.
    pub(super) fn duplicate(&mut self, cx: &mut RespCx<'_>, info: &OpcodeInfo, pkt: &Packet<'_>) {
        let p = pkt.bth.psn;
        match info.operation {
            Operation::Send | Operation::Write => {
                self.ack(cx, psn::sub(self.epsn, 1), Syndrome::ACK);
            }
            Operation::ReadRequest => {
                let Some(reth) = pkt.ext.reth else { return };
                let found = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Read {
                        first_psn,
                        last_psn,
                        va,
                        rkey,
                        len,
                    } if psn::diff(p, first_psn) >= 0 && psn::diff(p, last_psn) <= 0 => {
                        Some((first_psn, va, rkey, len))
                    }
                    _ => None,
                });
                let Some((first_psn, va, rkey, len)) = found else {
                    cx.counters.drops.unmatched_duplicate += 1;
                    return;
                };
                let end = va.checked_add(u64::from(len));
                let sub_end = reth.va.checked_add(u64::from(reth.len));
                let sub_range = reth.va >= va
                    && matches!((sub_end, end), (Some(s), Some(e)) if s <= e)
                    && reth.rkey == rkey;
                if !sub_range {
                    cx.counters.drops.invalid_duplicate += 1;
                    return;
                }
                let msn = self.msn;
                self.queue(
                    cx,
                    Reply::Read {
                        psn: p,
                        va: reth.va,
                        rkey,
                        remaining: reth.len,
                        first: p == first_psn,
                        msn,
                    },
                );
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Atomic { psn, orig } if psn == p => Some(orig),
                    _ => None,
                });
                match found {
                    Some(orig) => {
                        let msn = self.msn;
                        self.queue(cx, Reply::Atomic { psn: p, orig, msn });
                    }
                    None => cx.counters.drops.unmatched_duplicate += 1,
                }
            }
            _ => cx.counters.drops.unmatched_duplicate += 1,
        }
    }

    /// Writes the next reply packet. `Ok(None)`: nothing to send (or no room,
    /// counted). An `Err` means a READ source became inaccessible: the QP must
    /// move to ERR; the NAK is queued as the next (terminal) reply.
    ///
    /// With `lent`, a READ response of at least [`LEND_MIN`] payload bytes
    /// from memory that lends leaves its payload there (as the requester's
    /// packets do, [`crate::rc::RcQp::poll_transmit_lending`]): `buf` gets
    /// the headers, pad and a zero ICRC, `lent` the payload's address.
    pub fn poll(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        mut lent: Option<&mut LentPayload>,
    ) -> Result<Option<usize>, Fatal> {
        if let Some(l) = lent.as_deref_mut() {
            l.clear();
        }
        let p = cx.p;
        let Some(reply) = self.replies.front().copied() else {
            return Ok(None);
        };
        let mut ext = ExtHeaders::default();
        let result = match reply {
            Reply::Ack {
                psn, syndrome, msn, ..
            } => {
                ext.aeth = Some(Aeth::new(syndrome, msn));
                let bth = Bth::new(Opcode::RC_ACK, p.dest_qpn, psn);
                write_packet(buf, bth, &ext, 0, |_| Ok(())).map(|n| (n, None))
            }
            Reply::Atomic { psn, orig, msn } => {
                ext.aeth = Some(Aeth::new(Syndrome::ACK, msn));
                ext.atomic_ack_eth = Some(orig);
                let bth = Bth::new(Opcode::RC_ATOMIC_ACK, p.dest_qpn, psn);
                write_packet(buf, bth, &ext, 0, |_| Ok(())).map(|n| (n, None))
            }
            Reply::Read {
                psn,
                va,
                rkey,
                remaining,
                first,
                msn,
            } => {
                let n = remaining.min(p.mtu);
                let last = remaining <= p.mtu;
                // An empty replay is a whole (ONLY) response, never an empty LAST.
                let first = first || remaining == 0;
                let opcode = match (first, last) {
                    (true, true) => Opcode::RC_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RC_READ_RESPONSE_LAST,
                };
                if first || last {
                    ext.aeth = Some(Aeth::new(Syndrome::ACK, msn));
                }
                let bth = Bth::new(opcode, p.dest_qpn, psn);
                // The payload stays in the region when it lends (checked as
                // `read_remote` would); otherwise it is copied in.
                let lent = match lent {
                    Some(l) if n as usize >= LEND_MIN => {
                        lend_remote(mem, p.pd, rkey, va, n as usize, remaining as usize, &mut *l)
                            .map(|lends| lends.then_some(l))
                    }
                    _ => Ok(None),
                };
                match lent {
                    Ok(Some(l)) => {
                        write_packet_lent(buf, bth, &ext, n as usize).map(|(hdr, len)| {
                            l.hdr_len = hdr;
                            len
                        })
                    }
                    Ok(None) => write_packet(buf, bth, &ext, n as usize, |out| {
                        if out.is_empty() {
                            Ok(())
                        } else {
                            mem.read_remote(p.pd, rkey, va, out)
                        }
                    }),
                    Err(_) => Err(EmitError::Memory),
                }
                .map(|len| (len, Some((n, last))))
            }
        };
        match result {
            Ok((len, read)) => {
                match (read, self.replies.front_mut()) {
                    (
                        Some((n, false)),
                        Some(Reply::Read {
                            psn,
                            va,
                            remaining,
                            first,
                            ..
                        }),
                    ) => {
                        *psn = psn::add(*psn, 1);
                        *va = va.wrapping_add(u64::from(n));
                        *remaining -= n;
                        *first = false;
                    }
                    _ => {
                        self.replies.pop_front();
                    }
                }
                Ok(Some(len))
            }
            Err(EmitError::NoRoom) => {
                cx.counters.drops.tx_no_room += 1;
                Ok(None)
            }
            Err(EmitError::Wire) => {
                self.replies.pop_front();
                Ok(None)
            }
            Err(EmitError::Memory) => {
                let Reply::Read { psn, msn, .. } = reply else {
                    return Ok(None);
                };
                self.replies.pop_front();
                self.replies.push_front(Reply::Ack {
                    psn,
                    syndrome: Syndrome::Nak(NakCode::RemoteAccess),
                    msn,
                    terminal: true,
                });
                Err(Fatal(QpErrorCause::Responder(NakCode::RemoteAccess)))
            }
        }
    }
}
