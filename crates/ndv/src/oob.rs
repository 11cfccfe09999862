//! What the out-of-band TCP exchanges of the RDMA test tools we
//! interoperate with have in common: fixed-size NUL-terminated text
//! messages, read whole, with hexadecimal fields.
//!
//! Before two RC queue pairs can talk, each side must learn the other's QP
//! number, starting PSN, GID and (for RDMA READ/WRITE/atomics) an rkey and a
//! virtual address. `ibv_rc_pingpong` and perftest (without `-R`) do this over
//! a plain TCP connection, default port 18515, with ASCII messages of a fixed
//! size. Nothing here touches the RDMA engine: the functions read and write
//! any [`std::io::Read`] + [`std::io::Write`] stream (a [`std::net::TcpStream`]
//! in the tools, an in-memory pipe in tests) and hand back plain data.
//!
//! * `pingpong::exchange`: rdma-core's `libibverbs/examples/rc_pingpong.c`
//!   (verified against rdma-core 44): one 52-byte message each way, client
//!   first, then the client writes `"done"`.
//! * `perftest::exchange`: linux-rdma/perftest 4.5 (`ib_{send,write,read,atomic}_{bw,lat}`,
//!   verified against perftest 4.5-0.17 whose version string is `"6.06"`): a
//!   version/system/MTU preamble, then a variable number of 108-byte key
//!   "hand shakes" that double as barriers, optional binary result
//!   exchanges, and a closing `"done"`.
//!
//! The C tools read each message with a single `read(2)` of the exact message
//! size, so every message here is written with one `write_all` of a buffer
//! holding the whole message (one TCP segment in practice). Reads are more
//! forgiving than the C tools: they loop until the whole message arrived.

use std::io::{self, Read};

/// What can go wrong in an out-of-band exchange.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// The TCP stream failed.
    #[error("TCP exchange failed: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection in the middle of a message.
    #[error("peer closed the connection after {got} of the {expected} bytes of the {what}")]
    Short {
        /// Which message was being read.
        what: &'static str,
        /// Its size.
        expected: usize,
        /// Bytes received before end of stream.
        got: usize,
    },
    /// A message arrived whole but does not parse.
    #[error("malformed {what}: {reason} (received {text:?})")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
        /// The message as received, up to its NUL, lossily decoded.
        text: String,
    },
    /// A perftest peer older than 5.70: perftest 4.5 itself refuses those.
    #[error("peer perftest version {remote:?} is older than 5.70 and not compatible")]
    IncompatibleVersion {
        /// The version string the peer sent.
        remote: String,
    },
    /// The callback that connects the local QP (rc_pingpong server) failed.
    #[error("connecting the QP to the peer failed: {0}")]
    Connect(#[source] io::Error),
}

/// Reads exactly `buf.len()` bytes; end of stream before that is
/// [`OobError::Short`] naming `what`.
pub(crate) fn read_full<S: Read + ?Sized>(
    stream: &mut S,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), OobError> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(OobError::Short {
                    what,
                    expected: buf.len(),
                    got,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The text of a NUL-terminated message: the bytes before the first NUL (all
/// of them if there is none), lossily decoded for error messages.
pub(crate) fn c_text(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

/// [`OobError::Malformed`] for `buf`.
pub(crate) fn malformed(what: &'static str, reason: impl Into<String>, buf: &[u8]) -> OobError {
    OobError::Malformed {
        what,
        reason: reason.into(),
        text: String::from_utf8_lossy(c_text(buf)).into_owned(),
    }
}

/// Parses a hexadecimal field the way `strtoul(s, NULL, 16)`/`sscanf("%x")`
/// accept the fields the C tools write: optional `0x`, at least one digit,
/// nothing else; the value must fit in `bits` bits.
pub(crate) fn parse_hex(field: &[u8], bits: u32) -> Option<u64> {
    let digits = field
        .strip_prefix(b"0x")
        .or_else(|| field.strip_prefix(b"0X"))
        .unwrap_or(field);
    if digits.is_empty() || digits.len() > 32 {
        return None;
    }
    let mut v: u128 = 0;
    for &d in digits {
        v = (v << 4) | u128::from((d as char).to_digit(16)?);
    }
    (v >> bits == 0).then_some(v as u64)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! An in-memory, single-threaded stand-in for one end of a TCP connection:
    //! reads come from a script of the peer's bytes, writes are recorded.

    use std::io::{self, Read, Write};

    /// One end of a scripted connection.
    pub struct Scripted {
        /// What the peer "sends": consumed by `read`.
        pub input: io::Cursor<Vec<u8>>,
        /// Every `write` call's bytes, one entry per call.
        pub writes: Vec<Vec<u8>>,
    }

    impl Scripted {
        pub fn new(input: Vec<u8>) -> Self {
            Scripted {
                input: io::Cursor::new(input),
                writes: Vec::new(),
            }
        }

        /// True when all the scripted input was consumed.
        pub fn input_done(&self) -> bool {
            self.input.position() as usize == self.input.get_ref().len()
        }
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // Deliver at most 7 bytes per call so that short reads are exercised.
            let n = buf.len().min(7);
            self.input.read(&mut buf[..n])
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes.push(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Decodes a hex string (test vectors copied from tshark's `tcp.payload`).
    pub fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_fields() {
        assert_eq!(parse_hex(b"00001b", 24), Some(0x1b));
        assert_eq!(parse_hex(b"0x1B", 24), Some(0x1b));
        assert_eq!(parse_hex(b"ffffff", 24), Some(0xff_ffff));
        assert_eq!(parse_hex(b"1000000", 24), None);
        assert_eq!(parse_hex(b"", 24), None);
        assert_eq!(parse_hex(b"12g4", 24), None);
        assert_eq!(parse_hex(b"0000562be1525000", 64), Some(0x562b_e152_5000));
    }

    #[test]
    fn short_read_is_typed() {
        let mut s = testutil::Scripted::new(b"abc".to_vec());
        let mut buf = [0u8; 5];
        match read_full(&mut s, &mut buf, "test message") {
            Err(OobError::Short {
                what: "test message",
                expected: 5,
                got: 3,
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}
