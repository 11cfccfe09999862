//! The "keys" a perftest program tells its peer about each QP (`struct
//! pingpong_dest`), in both encodings: the text message of the TCP
//! exchange (`ethernet_write_keys`/`ethernet_read_keys`) and the binary one
//! of the rdma_cm control channel (`rdma_write_keys`/`rdma_read_keys`).
//!
//! # The text message
//!
//! ```text
//! "%04x:%04x:%06x:%06x:%08x:%016llx:" LID, outstanding reads, QPN, PSN, RKey, VAddr
//! + 16 x "%02x:"                       GID bytes in order
//! + "%08x:"                            SRQ number
//! = 107 characters + NUL = 108 bytes (KEY_MSG_SIZE_GID, PerftestDest::TEXT_LEN)
//!
//! 0000:0001:00002f:e9d901:000037d4:0000561374b66000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0
//! ```
//!
//! Without a GID index the message is `"%04x:%04x:%06x:%06x:%08x:%016llx:%08x"`,
//! 59 bytes (`KEY_MSG_SIZE`), but on an Ethernet (RoCE) port perftest always
//! picks a GID index (`-x`, or the best RoCE v2 entry), so RoCE peers always
//! use the 108-byte form, the only one written here (the parser reads both).
//! Each side picks the size to *read* from its own setting.
//!
//! Outstanding reads is the device's `max_qp_rd_atom` (128 on rxe) for
//! READ/atomic tests and 1 otherwise; RKey is 0 for SEND tests (rxe gives
//! an MR without remote access rkey 0); SRQN is 0 without SRQ/XRC/DC.
//!
//! # The binary message
//!
//! Over rdma_cm (`-R`) the struct itself goes out, every field in network
//! byte order: 56 bytes ([`PerftestDest::CM_LEN`], [`PerftestDest::to_cm_wire`]).

use crate::oob::{c_text, malformed, parse_hex, OobError};

/// A QP's keys as perftest exchanges them (`struct pingpong_dest`, the
/// fields that go on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PerftestDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA reads/atomics (responder resources asked of the
    /// peer): the device maximum for READ/atomic tests, else 1.
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// rkey of the buffer (0 for SEND tests on rxe).
    pub rkey: u32,
    /// Virtual address of the buffer the peer reads/writes.
    pub vaddr: u64,
    /// GID bytes (all zero in the no-GID form).
    pub gid: [u8; 16],
    /// SRQ number (0 unless XRC/DC).
    pub srqn: u32,
}

impl PerftestDest {
    /// Size of the text message with a GID, NUL included (perftest's
    /// `KEY_MSG_SIZE_GID`).
    pub const TEXT_LEN: usize = 108;
    /// Size of `struct pingpong_dest` (perftest 4.5, x86-64): the key message
    /// over rdma_cm and the size of the control QP's receive buffer.
    pub const CM_LEN: usize = 56;

    /// The key message with the GID; QPN and PSN are masked to 24 bits.
    pub fn to_wire(self) -> Vec<u8> {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut out = text.into_bytes();
        out.push(0);
        debug_assert_eq!(out.len(), Self::TEXT_LEN);
        out
    }

    /// Parses a key message of either form (told apart by the number of
    /// `:`-separated fields before the NUL).
    pub fn from_wire(buf: &[u8]) -> Result<Self, OobError> {
        const WHAT: &str = "perftest key message";
        let text = c_text(buf);
        let f: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        let field = |i: usize, bits: u32, name: &str| {
            parse_hex(f[i], bits).ok_or_else(|| malformed(WHAT, format!("bad {name}"), buf))
        };
        let (gid, srqn) = match f.len() {
            // 6 fields, 16 GID bytes, SRQN, and the empty field after the last ':'.
            24 if f[23].is_empty() => {
                let mut gid = [0u8; 16];
                for (i, g) in gid.iter_mut().enumerate() {
                    *g = field(6 + i, 8, "GID byte")? as u8;
                }
                (gid, field(22, 32, "SRQN")?)
            }
            7 => ([0; 16], field(6, 32, "SRQN")?),
            _ => return Err(malformed(WHAT, "wrong number of fields", buf)),
        };
        Ok(PerftestDest {
            lid: field(0, 16, "LID")? as u16,
            out_reads: field(1, 16, "outstanding reads")? as u16,
            qpn: field(2, 24, "QPN")? as u32,
            psn: field(3, 24, "PSN")? as u32,
            rkey: field(4, 32, "RKey")? as u32,
            vaddr: field(5, 64, "VAddr")?,
            gid,
            srqn: srqn as u32,
        })
    }

    /// `struct pingpong_dest` as `rdma_write_keys` sends it: `lid, out_reads,
    /// qpn, psn, rkey` as big-endian 32-bit words, 4 bytes of padding, `vaddr`
    /// big-endian 64-bit, the 16 GID bytes, `srqn` and `gid_index` big-endian.
    pub fn to_cm_wire(self, gid_index: i32) -> [u8; Self::CM_LEN] {
        let d = self;
        let mut b = [0u8; Self::CM_LEN];
        b[0..4].copy_from_slice(&u32::from(d.lid).to_be_bytes());
        b[4..8].copy_from_slice(&u32::from(d.out_reads).to_be_bytes());
        b[8..12].copy_from_slice(&d.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&d.psn.to_be_bytes());
        b[16..20].copy_from_slice(&d.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&d.gid);
        b[48..52].copy_from_slice(&d.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&gid_index.to_be_bytes());
        b
    }

    /// Parses what [`PerftestDest::to_cm_wire`] writes (`rdma_read_keys`,
    /// which ignores `srqn` and `gid_index`). Values that do not fit the key
    /// fields (a QPN or PSN beyond 24 bits, a LID beyond 16) are a malformed
    /// message.
    pub fn from_cm_wire(b: &[u8]) -> Result<PerftestDest, OobError> {
        const WHAT: &str = "rdma_cm key message";
        let bad = |reason: &str| OobError::Malformed {
            what: WHAT,
            reason: reason.to_string(),
            text: b.iter().map(|x| format!("{x:02x}")).collect(),
        };
        if b.len() < Self::CM_LEN {
            return Err(bad("too short"));
        }
        let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (lid, out_reads, qpn, psn) = (w(0), w(4), w(8), w(12));
        if lid > 0xffff || out_reads > 0xffff || qpn > 0xff_ffff || psn > 0xff_ffff {
            return Err(bad("field out of range"));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        let mut va = [0u8; 8];
        va.copy_from_slice(&b[24..32]);
        Ok(PerftestDest {
            lid: lid as u16,
            out_reads: out_reads as u16,
            qpn,
            psn,
            rkey: w(16),
            vaddr: u64::from_be_bytes(va),
            gid,
            srqn: w(48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::roce_gid;
    use super::*;
    use crate::oob::testutil::unhex;

    // shared/reference/rxe-linux-6.1/ib_send_bw.pcap frames 14 and 15: perftest
    // 4.5 `ib_send_bw -d rxe0 -x 1 -n 5 -s 4096`, client 10.77.0.2, server 10.77.0.3.
    const SEND_BW_CLIENT: &[u8] = b"0000:0001:000015:cbd3ac:00000000:0000562be1525000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0";
    const SEND_BW_SERVER: &[u8] = b"0000:0001:000015:973ddb:00000000:000055e9de06a000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:03:00000000:\0";

    #[test]
    fn key_messages_match_captures() {
        let c = PerftestDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x15,
            psn: 0xcbd3ac,
            rkey: 0,
            vaddr: 0x562b_e152_5000,
            gid: roce_gid(2),
            srqn: 0,
        };
        let s = PerftestDest {
            psn: 0x973ddb,
            vaddr: 0x55e9_de06_a000,
            gid: roce_gid(3),
            ..c
        };
        assert_eq!(c.to_wire(), SEND_BW_CLIENT);
        assert_eq!(s.to_wire(), SEND_BW_SERVER);
        assert_eq!(PerftestDest::from_wire(SEND_BW_CLIENT).unwrap(), c);
        assert_eq!(PerftestDest::from_wire(SEND_BW_SERVER).unwrap(), s);
        // ib_read_bw (same capture session): 128 outstanding reads.
        let read = b"0000:0080:00001f:cb31f6:000027fd:000055d638de7000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0";
        let r = PerftestDest::from_wire(read).unwrap();
        assert_eq!((r.out_reads, r.qpn, r.rkey), (0x80, 0x1f, 0x27fd));
        assert_eq!(r.to_wire(), read);
    }

    #[test]
    fn key_message_without_gid() {
        let d = PerftestDest {
            lid: 0x1234,
            out_reads: 16,
            qpn: 0xabcdef,
            psn: 0x12,
            rkey: 0xdeadbeef,
            vaddr: u64::MAX,
            gid: [0; 16],
            srqn: 7,
        };
        // The 59-byte form of a peer without a GID index (InfiniBand).
        let w = b"1234:0010:abcdef:000012:deadbeef:ffffffffffffffff:00000007\0";
        assert_eq!(PerftestDest::from_wire(w).unwrap(), d);
        let g = PerftestDest {
            gid: [0xfe; 16],
            ..d
        };
        assert_eq!(PerftestDest::from_wire(&g.to_wire()).unwrap(), g);
    }

    #[test]
    fn malformed_keys() {
        let mut bad = SEND_BW_CLIENT.to_vec();
        bad[20] = b'x';
        assert!(matches!(
            PerftestDest::from_wire(&bad),
            Err(OobError::Malformed { .. })
        ));
        assert!(PerftestDest::from_wire(b"0000:0001\0").is_err());
        // The GID form must end with ':'.
        let mut no_colon = SEND_BW_CLIENT.to_vec();
        no_colon[106] = 0;
        assert!(PerftestDest::from_wire(&no_colon).is_err());
    }

    #[test]
    fn cm_keys_match_capture() {
        // shared/reference/rxe-linux-6.1/ib_send_bw_R.pcap frame 31: the
        // client's keys over the rdma_cm control QP.
        let wire = unhex(
            "0000000000000001000000170046cde200000000000000000000559646d26000\
             00000000000000000000ffff0a4d00020000000000000001",
        );
        let d = PerftestDest::from_cm_wire(&wire).unwrap();
        assert_eq!((d.lid, d.out_reads, d.qpn, d.psn), (0, 1, 0x17, 0x46cde2));
        assert_eq!((d.rkey, d.vaddr), (0, 0x5596_46d2_6000));
        assert_eq!(&d.gid[10..], &[0xff, 0xff, 10, 77, 0, 2]);
        assert_eq!(d.to_cm_wire(1).as_slice(), wire.as_slice());
        // The all-zero keys of the two hand shakes around the CM connection.
        assert_eq!(
            PerftestDest::from_cm_wire(&[0; PerftestDest::CM_LEN]).unwrap(),
            PerftestDest::default()
        );
    }

    #[test]
    fn cm_keys_malformed() {
        assert!(PerftestDest::from_cm_wire(&[0; 20]).is_err());
        let mut w = [0u8; PerftestDest::CM_LEN];
        w[8] = 1; // QPN beyond 24 bits
        assert!(PerftestDest::from_cm_wire(&w).is_err());
    }
}
