//! The address exchange of rdma-core's `ibv_rc_pingpong`.
//!
//! Source: `libibverbs/examples/rc_pingpong.c` (`pp_client_exch_dest`,
//! `pp_server_exch_dest`) and `pingpong.c` (`gid_to_wire_gid`,
//! `wire_gid_to_gid`), rdma-core 44. Default TCP port 18515.
//!
//! # The message
//!
//! Each side sends one fixed-size ASCII message, `sizeof
//! "0000:000000:000000:00000000000000000000000000000000"` = **52 bytes**
//! including the terminating NUL:
//!
//! ```text
//! sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid)
//!
//! 0000:000013:158069:00000000000000000000ffff0a4d0002\0
//! LID  QPN    PSN    GID: 32 hex digits, the 16 raw bytes in order
//! ```
//!
//! `gid_to_wire_gid` prints the GID as four `%08x` of `htobe32()` of the
//! native 32-bit words, which comes out as the 16 bytes in wire order. On
//! RoCE the LID is 0 and the GID is the `::ffff:a.b.c.d` entry (`-g 1` on
//! rxe); without `-g` the GID is all zeros.
//!
//! # The sequence
//!
//! ```text
//! client                                  server
//!   connect ------------------------------> accept
//!   52-byte message ----------------------> read 52
//!                                           parse, QP -> RTR -> RTS
//!   read 52 <------------------------------ 52-byte message
//!   "done\0" (5 bytes) -------------------> read, must be 5 bytes
//!   close                                   close
//!   parse, QP -> RTR -> RTS
//! ```
//!
//! The server moves its QP to RTS *before* answering, so when the client
//! has the answer it may send right away. The C server does a single
//! `read(connfd, msg, sizeof msg)` and fails unless it returns exactly
//! `sizeof "done"` = 5 bytes; `"done"` itself is never compared.
//!
//! Captured between two Linux rxe peers (shared/reference/rxe-linux-6.1/
//! ibv_rc_pingpong.pcap): client `0000:000013:158069:…0a4d0002\0`, server
//! `0000:000013:d50ec4:…0a4d0003\0`, client `done\0`, then both close.

use crate::oob::{malformed, parse_hex, read_full, OobError};
use std::io::{self, Read, Write};

/// Size of the address message, NUL included.
pub const WIRE_LEN: usize = 52;

/// The client's closing message: `sizeof "done"` bytes, NUL included.
pub const DONE: &[u8; 5] = b"done\0";

/// Default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// One side's address, `struct pingpong_dest` of rc_pingpong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PingpongDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// GID, raw bytes in network order (`::ffff:a.b.c.d` on RoCEv2/IPv4).
    pub gid: [u8; 16],
}

impl PingpongDest {
    /// The 52-byte message. QPN and PSN are masked to 24 bits (the C tool
    /// would overflow its buffer with wider values).
    pub fn to_wire(self) -> [u8; WIRE_LEN] {
        let mut text = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; WIRE_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses a message: the text up to the first NUL must be
    /// `LID:QPN:PSN:GID` in hex (what `sscanf("%x:%x:%x:%s")` +
    /// `wire_gid_to_gid` read), with exactly 32 GID digits.
    pub fn from_wire(buf: &[u8]) -> Result<Self, OobError> {
        const WHAT: &str = "rc_pingpong address";
        let text = crate::oob::c_text(buf);
        let fields: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        let [lid, qpn, psn, gid] = fields[..] else {
            return Err(malformed(WHAT, "expected LID:QPN:PSN:GID", buf));
        };
        let lid = parse_hex(lid, 16).ok_or_else(|| malformed(WHAT, "bad LID", buf))?;
        let qpn = parse_hex(qpn, 24).ok_or_else(|| malformed(WHAT, "bad QPN", buf))?;
        let psn = parse_hex(psn, 24).ok_or_else(|| malformed(WHAT, "bad PSN", buf))?;
        if gid.len() != 32 {
            return Err(malformed(WHAT, "GID must be 32 hex digits", buf));
        }
        let mut g = [0u8; 16];
        for (i, pair) in gid.chunks(2).enumerate() {
            g[i] = parse_hex(pair, 8).ok_or_else(|| malformed(WHAT, "bad GID", buf))? as u8;
        }
        Ok(PingpongDest {
            lid: lid as u16,
            qpn: qpn as u32,
            psn: psn as u32,
            gid: g,
        })
    }
}

/// The client's side: send our address, read the server's, send `"done"`.
///
/// When this returns the server's QP is already in RTS; the caller connects
/// its own QP with the returned address and may then send.
pub fn client_exchange<S: Read + Write>(
    stream: &mut S,
    mine: &PingpongDest,
) -> Result<PingpongDest, OobError> {
    stream.write_all(&mine.to_wire())?;
    let mut msg = [0u8; WIRE_LEN];
    read_full(stream, &mut msg, "rc_pingpong address")?;
    stream.write_all(DONE)?;
    stream.flush()?;
    PingpongDest::from_wire(&msg)
}

/// The server's side on an accepted connection: read the client's address,
/// call `connect` with it (move the local QP to RTR and RTS, as
/// `pp_connect_ctx` does before answering), send our address, then wait for
/// the client's `"done"`.
///
/// An error from `connect` is [`OobError::Connect`] and nothing is sent.
pub fn server_exchange<S, F>(
    stream: &mut S,
    mine: &PingpongDest,
    connect: F,
) -> Result<PingpongDest, OobError>
where
    S: Read + Write,
    F: FnOnce(&PingpongDest) -> io::Result<()>,
{
    let mut msg = [0u8; WIRE_LEN];
    read_full(stream, &mut msg, "rc_pingpong address")?;
    let remote = PingpongDest::from_wire(&msg)?;
    connect(&remote).map_err(OobError::Connect)?;
    stream.write_all(&mine.to_wire())?;
    stream.flush()?;
    let mut done = [0u8; DONE.len()];
    read_full(stream, &mut done, "rc_pingpong \"done\"")?;
    if &done != DONE {
        return Err(malformed(
            "rc_pingpong \"done\"",
            "expected \"done\\0\"",
            &done,
        ));
    }
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::testutil::Scripted;

    // Captured between two Linux 6.1 rxe guests running rdma-core 44
    // `ibv_rc_pingpong -d rxe0 -g 1 -n 3` (shared/reference/rxe-linux-6.1/
    // ibv_rc_pingpong.pcap, frames 4, 6 and 8: client 10.77.0.2, server 10.77.0.3).
    const CLIENT_MSG: &[u8; 52] = b"0000:000013:158069:00000000000000000000ffff0a4d0002\0";
    const SERVER_MSG: &[u8; 52] = b"0000:000013:d50ec4:00000000000000000000ffff0a4d0003\0";

    fn gid(last: u8) -> [u8; 16] {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, last]
    }

    fn client_dest() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: 0x13,
            psn: 0x158069,
            gid: gid(2),
        }
    }

    fn server_dest() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: 0x13,
            psn: 0xd50ec4,
            gid: gid(3),
        }
    }

    #[test]
    fn wire_matches_capture() {
        assert_eq!(&client_dest().to_wire(), CLIENT_MSG);
        assert_eq!(&server_dest().to_wire(), SERVER_MSG);
        assert_eq!(PingpongDest::from_wire(CLIENT_MSG).unwrap(), client_dest());
        assert_eq!(PingpongDest::from_wire(SERVER_MSG).unwrap(), server_dest());
    }

    #[test]
    fn round_trip_extremes() {
        for d in [
            PingpongDest::default(),
            PingpongDest {
                lid: 0xffff,
                qpn: 0xff_ffff,
                psn: 0xff_ffff,
                gid: [0xff; 16],
            },
            PingpongDest {
                lid: 1,
                qpn: 1,
                psn: 0,
                gid: *b"\xfe\x80\0\0\0\0\0\0\x50\x54\0\xff\xfe\x77\0\x02",
            },
        ] {
            let w = d.to_wire();
            assert_eq!(w[51], 0);
            assert_eq!(PingpongDest::from_wire(&w).unwrap(), d);
        }
        // 24-bit fields are masked rather than overflowing the message.
        let wide = PingpongDest {
            qpn: 0x1ff_ffff,
            ..Default::default()
        };
        assert_eq!(
            PingpongDest::from_wire(&wide.to_wire()).unwrap().qpn,
            0xff_ffff
        );
    }

    #[test]
    fn malformed_messages() {
        for bad in [
            &b"0000:000013:158069\0"[..],
            b"0000:000013:158069:00000000000000000000ffff0a4d00\0",
            b"0000:0000zz:158069:00000000000000000000ffff0a4d0002\0",
            b"0000:000013:158069:00000000000000000000ffff0a4d0002:7\0",
        ] {
            assert!(matches!(
                PingpongDest::from_wire(bad),
                Err(OobError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn client_sequence_matches_capture() {
        // The peer (a real rc_pingpong server) answers with its 52 bytes.
        let mut s = Scripted::new(SERVER_MSG.to_vec());
        let remote = client_exchange(&mut s, &client_dest()).unwrap();
        assert_eq!(remote, server_dest());
        // We sent exactly what the real client sent: 52 bytes, then "done\0",
        // each in one write.
        assert_eq!(s.writes, vec![CLIENT_MSG.to_vec(), DONE.to_vec()]);
        assert!(s.input_done());
    }

    #[test]
    fn server_sequence_matches_capture() {
        let mut input = CLIENT_MSG.to_vec();
        input.extend_from_slice(DONE);
        let mut s = Scripted::new(input);
        let mut connected = None;
        let remote = server_exchange(&mut s, &server_dest(), |r| {
            connected = Some(*r);
            Ok(())
        })
        .unwrap();
        assert_eq!(remote, client_dest());
        assert_eq!(connected, Some(client_dest()));
        assert_eq!(s.writes, vec![SERVER_MSG.to_vec()]);
        assert!(s.input_done());
    }

    #[test]
    fn server_connect_failure_sends_nothing() {
        let mut s = Scripted::new(CLIENT_MSG.to_vec());
        let r = server_exchange(&mut s, &server_dest(), |_| Err(io::Error::other("no")));
        assert!(matches!(r, Err(OobError::Connect(_))));
        assert!(s.writes.is_empty());
    }

    #[test]
    fn server_needs_done() {
        let mut s = Scripted::new(CLIENT_MSG.to_vec());
        let r = server_exchange(&mut s, &server_dest(), |_| Ok(()));
        assert!(matches!(r, Err(OobError::Short { got: 0, .. })));
    }

    #[test]
    fn over_tcp() {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            server_exchange(&mut s, &server_dest(), |_| Ok(())).unwrap()
        });
        let mut c = TcpStream::connect(addr).unwrap();
        assert_eq!(
            client_exchange(&mut c, &client_dest()).unwrap(),
            server_dest()
        );
        assert_eq!(server.join().unwrap(), client_dest());
    }
}
