//! Capture files: reading pcap and pcapng, writing pcap.
//!
//! RoCEv2 is debugged with packet captures, so the tools of this workspace
//! read whatever `tcpdump`, `dumpcap` or Wireshark wrote, and write files that
//! all of them open. Files are read whole from memory: captures of RDMA tests
//! are megabytes, and borrowing packet bytes straight out of the file buffer
//! means a [`Frame`] copies nothing.
//!
//! # Classic pcap
//!
//! A 24-byte file header, then records back to back with no other framing:
//!
//! ```text
//! file header  magic u32 | major u16 | minor u16 | thiszone i32 | sigfigs u32
//!              | snaplen u32 | linktype u32
//! record       ts_sec u32 | ts_frac u32 | caplen u32 | orig_len u32
//!              | caplen bytes of packet
//! ```
//!
//! There is no byte-order field: the writer used its own byte order, and the
//! reader learns which from how the magic reads. `0xa1b2c3d4` means `ts_frac`
//! counts microseconds, `0xa1b23c4d` nanoseconds; read byte-swapped, either
//! means every other field is swapped too. A file has one link type for all
//! its records. Only version 2.x exists in the wild, and `thiszone` and
//! `sigfigs` are always 0 in practice, so they are ignored; so are the FCS
//! flags some writers put in the upper 16 bits of `linktype`. (The patched
//! "Kuznetzov" variant, magic `0xa1b2cd34`, is not read: nothing current
//! writes it.)
//!
//! # pcapng
//!
//! A sequence of blocks, each `type u32 | total_length u32 | body |
//! total_length u32` with the body padded to 32 bits (the repeated length lets
//! tools walk the file backwards, and lets us detect a corrupt length).
//! Variable-length fields are options, `code u16 | length u16 | value`, each
//! padded to 32 bits, ended by code 0. The blocks we read:
//!
//! - **Section Header Block** (type `0x0a0d0d0a`, a palindrome so that it is
//!   found before the byte order is known): its byte-order magic `0x1a2b3c4d`
//!   fixes the byte order of every block up to the next section header. A file
//!   may concatenate sections written by machines of either endianness, and
//!   interface ids restart in each section.
//! - **Interface Description Block** (1): link type and snap length of the
//!   section's next interface (ids count these blocks from 0). Of its
//!   options we need `if_tsresol`, the timestamp unit (10^-n seconds, or
//!   2^-n if the top bit is set; microseconds when absent), and
//!   `if_tsoffset`, seconds to add to every timestamp.
//! - **Enhanced Packet Block** (6): interface id, a 64-bit timestamp split
//!   into high and low 32-bit halves, captured and original length, data.
//! - **Simple Packet Block** (3): just the original length and data, from
//!   interface 0, with no timestamp (reported as 0) and no captured length
//!   (the original length cut to the snap length and to the block).
//! - **Packet Block** (2): the obsolete predecessor of the EPB, with a 16-bit
//!   interface id; old files still contain it.
//!
//! Every other block (statistics, name resolution, decryption secrets, custom
//! blocks) is skipped by its length: none of it changes which bytes were on
//! the wire. The section length in a section header is ignored too; it may be
//! -1 ("unknown"), and walking the blocks finds the next section anyway.
//!
//! # How strict
//!
//! Framing is checked strictly, because a reader that guesses past a broken
//! length reads garbage as packets: every length is checked against the bytes
//! that are really there before use, and a block's trailing length must match
//! its leading one. Problems are a [`CaptureError`] that names the structure
//! and its byte offset. Nothing is allocated on the strength of a length
//! field, and no input makes the readers panic. Values that do not affect
//! framing (unknown options, unknown blocks, minor versions) are accepted.
//!
//! # Link layers and writing
//!
//! [`ip_packet`] strips whichever link-layer header a capture has to get at
//! the IPv4 or IPv6 packet, where RoCEv2's UDP (port 4791) lives.
//! [`PcapWriter`] writes classic little-endian microsecond pcap, the format
//! every tool reads.

mod bytes;
mod error;
mod link;
mod pcap;
mod pcapng;
mod writer;

pub use error::CaptureError;
pub use link::{ip_packet, IpVersion, LinkType};
pub use writer::PcapWriter;

/// One packet record of a capture file, borrowing its bytes from the file.
///
/// # Example
///
/// ```
/// use ndverbs_wire::capture::{read_frames, LinkType, PcapWriter};
/// let mut w = PcapWriter::new(Vec::new(), LinkType::RawIp)?;
/// w.write_packet(1_700_000_000_000_000_000, &[0x45; 20])?;
/// let file = w.into_inner();
/// let frames = read_frames(&file).unwrap();
/// let f = &frames[0];
/// assert_eq!((f.number, f.link, f.orig_len), (1, LinkType::RawIp, 20));
/// assert_eq!(f.ts_nanos, 1_700_000_000_000_000_000); // pcap keeps microseconds
/// assert_eq!(f.data, [0x45; 20]);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// 1-based position among all packet records of the file, as Wireshark
    /// numbers them: every pcap record, EPB, SPB and packet block counts,
    /// whatever it contains.
    pub number: usize,
    /// Link-layer type of `data`.
    pub link: LinkType,
    /// Capture time in nanoseconds since the Unix epoch; 0 for pcapng simple
    /// packet blocks, which have none.
    pub ts_nanos: u64,
    /// The captured bytes, starting with the link-layer header; shorter than
    /// `orig_len` when the capture was cut at the snap length.
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub orig_len: u32,
}

#[cfg(test)]
impl<'a> Frame<'a> {
    /// The fields as a tuple — number, link, timestamp, bytes, original
    /// length — so a test states every frame of a file in one assertion.
    pub(crate) fn fields(&self) -> (usize, LinkType, u64, &'a [u8], u32) {
        (
            self.number,
            self.link,
            self.ts_nanos,
            self.data,
            self.orig_len,
        )
    }
}

/// Reads every packet of a pcap or pcapng file held in memory.
///
/// The format is told from the magic number; see the [module
/// docs](self) for what each format supports.
///
/// # Errors
///
/// A [`CaptureError`] naming what is wrong and at which byte offset, for a
/// file that is not a capture, has a version we cannot read, or is corrupt or
/// truncated anywhere. A file cut short in the middle of a record is an error,
/// not a shorter list.
pub fn read_frames(file: &[u8]) -> Result<Vec<Frame<'_>>, CaptureError> {
    let magic = bytes::array(file, 0).ok_or(CaptureError::Truncated {
        what: "capture file magic",
        offset: 0,
        needed: 4,
        available: file.len(),
    })?;
    if let Some(magic) = pcap::Magic::from_bytes(magic) {
        pcap::read(file, magic)
    } else if magic == pcapng::SHB_TYPE_BYTES {
        pcapng::read(file)
    } else {
        Err(CaptureError::UnknownMagic {
            magic: u32::from_be_bytes(magic),
        })
    }
}

/// Whether `file` starts like a pcap or pcapng file.
///
/// Looks only at the magic (and, for pcapng, the byte-order magic of the first
/// section header), so a `true` does not promise that [`read_frames`]
/// succeeds.
#[must_use]
pub fn is_capture(file: &[u8]) -> bool {
    match bytes::array(file, 0) {
        Some(magic) if pcap::Magic::from_bytes(magic).is_some() => true,
        Some(pcapng::SHB_TYPE_BYTES) => {
            bytes::array(file, 8).and_then(pcapng::byte_order).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small valid pcap of two records, from the writer.
    fn sample_pcap() -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        w.write_packet(1_000_001_000, &[0xAA; 20]).unwrap();
        w.write_packet(2_000_000_000, &[0xBB; 3]).unwrap();
        w.into_inner()
    }

    /// A small valid pcapng (SHB, IDB, EPB, unknown block, SPB), spelled out
    /// byte by byte so that it cannot share a misreading of the spec with the
    /// block builder that the pcapng tests use.
    fn sample_pcapng() -> Vec<u8> {
        #[rustfmt::skip]
        let file = vec![
            // SHB, 28 bytes, little-endian, version 1.0, section length -1.
            0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0,
            0x4D, 0x3C, 0x2B, 0x1A, 1, 0, 0, 0,
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            28, 0, 0, 0,
            // IDB, 32 bytes: Ethernet, snaplen 0, if_tsresol = 9 (ns).
            1, 0, 0, 0, 32, 0, 0, 0,
            1, 0, 0, 0, 0, 0, 0, 0,
            9, 0, 1, 0, 9, 0, 0, 0,
            0, 0, 0, 0,
            32, 0, 0, 0,
            // EPB, 36 bytes: interface 0, ts 0x1_0000_0002, 3 of 5 bytes.
            6, 0, 0, 0, 36, 0, 0, 0,
            0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0,
            0xDE, 0xAD, 0xBE, 0x00,
            36, 0, 0, 0,
            // Unknown block type 0x0BAD, 16 bytes, skipped.
            0xAD, 0x0B, 0, 0, 16, 0, 0, 0, 1, 2, 3, 4, 16, 0, 0, 0,
            // SPB, 24 bytes: original length 6, data padded to 8.
            3, 0, 0, 0, 24, 0, 0, 0, 6, 0, 0, 0,
            1, 2, 3, 4, 5, 6, 0, 0,
            24, 0, 0, 0,
        ];
        file
    }

    #[test]
    fn hand_written_pcapng() {
        let file = sample_pcapng();
        assert!(is_capture(&file));
        let frames = read_frames(&file).unwrap();
        assert_eq!(
            frames,
            [
                Frame {
                    number: 1,
                    link: LinkType::Ethernet,
                    ts_nanos: 0x1_0000_0002,
                    data: &[0xDE, 0xAD, 0xBE],
                    orig_len: 5,
                },
                Frame {
                    number: 2,
                    link: LinkType::Ethernet,
                    ts_nanos: 0,
                    data: &[1, 2, 3, 4, 5, 6],
                    orig_len: 6,
                },
            ]
        );
    }

    #[test]
    fn magic_detection() {
        assert!(is_capture(&sample_pcap()));
        assert!(is_capture(&[0xA1, 0xB2, 0xC3, 0xD4]));
        assert!(is_capture(&[0x4D, 0x3C, 0xB2, 0xA1]));
        assert!(is_capture(&[0xA1, 0xB2, 0x3C, 0x4D]));
        assert!(!is_capture(&[0xA1, 0xB2, 0xC3]));
        assert!(!is_capture(b"GET / HTTP/1.1"));
        // A pcapng magic is not enough without a byte-order magic.
        assert!(!is_capture(&[0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0]));

        assert_eq!(
            read_frames(b"PK\x03\x04zip"),
            Err(CaptureError::UnknownMagic { magic: 0x504B_0304 })
        );
        assert_eq!(
            read_frames(&[0xD4, 0xC3]).unwrap_err().to_string(),
            "truncated capture file magic at offset 0: needs 4 bytes, only 2 left in the file"
        );
        assert!(read_frames(&[]).is_err());
    }

    /// Everything a caller might do with a frame, so that the fuzz loops also
    /// exercise the link decoders on garbage.
    fn consume(file: &[u8]) -> Result<usize, CaptureError> {
        let frames = read_frames(file)?;
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(f.number, i + 1);
            let _ = ip_packet(f.link, f.data);
            for link in [LinkType::Ethernet, LinkType::Null, LinkType::LinuxSll2] {
                let _ = ip_packet(link, f.data);
            }
        }
        Ok(frames.len())
    }

    #[test]
    fn every_prefix_is_handled() {
        for file in [sample_pcap(), sample_pcapng()] {
            let full = consume(&file).unwrap();
            for cut in 0..file.len() {
                match consume(&file[..cut]) {
                    // A cut at a record boundary is a valid, shorter file.
                    Ok(n) => assert!(n < full, "cut {cut}"),
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
            }
        }
    }

    #[test]
    fn byte_flips_never_panic() {
        for file in [sample_pcap(), sample_pcapng()] {
            for at in 0..file.len() {
                for mask in [0x01, 0x80, 0xFF, 0x10] {
                    let mut bad = file.clone();
                    bad[at] ^= mask;
                    let _ = consume(&bad);
                }
                for value in [0x00, 0xFF, 0x7F, 0x0C] {
                    let mut bad = file.clone();
                    bad[at] = value;
                    let _ = consume(&bad);
                }
            }
        }
    }

    #[test]
    fn random_garbage_never_panics() {
        // xorshift64: deterministic, so a failure reproduces.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let heads: [&[u8]; 3] = [
            &[0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0],
            &[0xA1, 0xB2, 0x3C, 0x4D, 0, 2, 0, 4],
            &[
                0x0A, 0x0D, 0x0D, 0x0A, 0, 0, 0, 28, 0x1A, 0x2B, 0x3C, 0x4D, 0, 1,
            ],
        ];
        for round in 0..3000 {
            let mut file = heads[round % heads.len()].to_vec();
            let len = (next() % 200) as usize;
            // Small values make plausible lengths and types; large ones make
            // hostile ones.
            file.extend((0..len).map(|_| {
                let r = next();
                if r % 3 == 0 {
                    (r >> 8) as u8
                } else {
                    (r >> 8) as u8 & 0x1F
                }
            }));
            let _ = consume(&file);
        }
    }

    /// Counts the `frames` that carry IPv4/UDP to port 4791, with
    /// just enough IPv4 parsing to find the UDP header.
    fn rocev2_frames(frames: &[Frame<'_>]) -> usize {
        frames
            .iter()
            .filter(|f| {
                let Some((IpVersion::V4, ip)) = ip_packet(f.link, f.data) else {
                    return false;
                };
                let ihl = usize::from(ip.first().map_or(0, |b| b & 0x0F)) * 4;
                let udp = ip.get(9) == Some(&17);
                let port = ip.get(ihl + 2..ihl + 4);
                udp && ihl >= 20 && port == Some(&4791u16.to_be_bytes()[..])
            })
            .count()
    }

    #[test]
    fn real_captures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/captures");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no captures in {dir}");
        for path in files {
            let file = std::fs::read(&path).unwrap();
            assert!(is_capture(&file), "{}", path.display());
            let frames = read_frames(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!frames.is_empty(), "{}: no frames", path.display());
            assert!(
                rocev2_frames(&frames) > 0,
                "{}: no UDP/4791 frames",
                path.display()
            );
            for pair in frames.windows(2) {
                assert!(pair[0].ts_nanos <= pair[1].ts_nanos, "{}", path.display());
            }
        }
    }
}
