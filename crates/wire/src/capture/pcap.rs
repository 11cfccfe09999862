//! Classic libpcap file reader.

use super::bytes::{array, slice, to_usize, Endian};
use super::{CaptureError, Frame, LinkType};

/// Magic of a pcap file whose record timestamps count microseconds.
pub(super) const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// Magic of a pcap file whose record timestamps count nanoseconds.
pub(super) const MAGIC_NANOS: u32 = 0xA1B2_3C4D;
pub(super) const FILE_HEADER_LEN: usize = 24;
pub(super) const RECORD_HEADER_LEN: usize = 16;
pub(super) const VERSION_MAJOR: u16 = 2;
pub(super) const VERSION_MINOR: u16 = 4;

/// What the magic number says about the rest of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Magic {
    endian: Endian,
    nanos: bool,
}

impl Magic {
    /// Recognises the four magic bytes in either byte order; the writer used
    /// its own byte order, and the magic is the only record of which.
    pub(super) fn from_bytes(b: [u8; 4]) -> Option<Self> {
        let (le, be) = (u32::from_le_bytes(b), u32::from_be_bytes(b));
        let (endian, magic) = if le == MAGIC_MICROS || le == MAGIC_NANOS {
            (Endian::Little, le)
        } else if be == MAGIC_MICROS || be == MAGIC_NANOS {
            (Endian::Big, be)
        } else {
            return None;
        };
        Some(Magic {
            endian,
            nanos: magic == MAGIC_NANOS,
        })
    }
}

/// Reads every record of a pcap file whose first four bytes are `magic`.
pub(super) fn read(file: &[u8], magic: Magic) -> Result<Vec<Frame<'_>>, CaptureError> {
    let e = magic.endian;
    let header = slice(file, 0, FILE_HEADER_LEN).ok_or(CaptureError::Truncated {
        what: "pcap file header",
        offset: 0,
        needed: FILE_HEADER_LEN,
        available: file.len(),
    })?;
    let major = e.u16_at(header, 4).unwrap_or_default();
    let minor = e.u16_at(header, 6).unwrap_or_default();
    // Version 2 has been the only layout since 1998; minor versions (2.2,
    // 2.3, 2.4) differ only in what older readers assumed about byte order.
    if major != VERSION_MAJOR {
        return Err(CaptureError::UnsupportedVersion {
            format: "pcap",
            offset: 0,
            major,
            minor,
        });
    }
    // The upper 16 bits may carry FCS-length flags, which do not change the
    // link type.
    let link = LinkType::from_u32(e.u32_at(header, 20).unwrap_or_default() & 0xFFFF);

    let mut frames = Vec::new();
    let mut offset = FILE_HEADER_LEN;
    while offset < file.len() {
        let truncated = |what, at: usize, needed| CaptureError::Truncated {
            what,
            offset: at,
            needed,
            available: file.len().saturating_sub(at),
        };
        let rec: [u8; RECORD_HEADER_LEN] = array(file, offset)
            .ok_or_else(|| truncated("pcap record header", offset, RECORD_HEADER_LEN))?;
        let ts_sec = e.u32_at(&rec, 0).unwrap_or_default();
        let ts_frac = e.u32_at(&rec, 4).unwrap_or_default();
        let caplen = e.u32_at(&rec, 8).unwrap_or_default();
        let orig_len = e.u32_at(&rec, 12).unwrap_or_default();

        let data_at = offset + RECORD_HEADER_LEN;
        let caplen = to_usize(caplen);
        let data = slice(file, data_at, caplen)
            .ok_or_else(|| truncated("pcap packet data", data_at, caplen))?;
        frames.push(Frame {
            number: frames.len() + 1,
            link,
            ts_nanos: timestamp(ts_sec, ts_frac, magic.nanos),
            data,
            orig_len,
        });
        offset = data_at + caplen;
    }
    Ok(frames)
}

fn timestamp(secs: u32, frac: u32, nanos: bool) -> u64 {
    let frac_nanos = if nanos {
        u64::from(frac)
    } else {
        u64::from(frac) * 1_000
    };
    // Cannot overflow (u32::MAX seconds is about 4.3e18 ns), but a corrupt
    // fraction of a second should still not be able to wrap.
    (u64::from(secs) * 1_000_000_000).saturating_add(frac_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::read_frames;

    fn header(e: Endian, magic: u32, link: u32) -> Vec<u8> {
        let mut f = e.u32_bytes(magic).to_vec();
        f.extend_from_slice(&e.u16_bytes(2));
        f.extend_from_slice(&e.u16_bytes(4));
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&e.u32_bytes(65535));
        f.extend_from_slice(&e.u32_bytes(link));
        f
    }

    fn record(f: &mut Vec<u8>, e: Endian, sec: u32, frac: u32, data: &[u8], orig: u32) {
        for v in [sec, frac, data.len() as u32, orig] {
            f.extend_from_slice(&e.u32_bytes(v));
        }
        f.extend_from_slice(data);
    }

    #[test]
    fn big_endian_microseconds() {
        let mut f = header(Endian::Big, MAGIC_MICROS, 101);
        assert_eq!(&f[..4], &[0xA1, 0xB2, 0xC3, 0xD4]);
        record(
            &mut f,
            Endian::Big,
            1_700_000_000,
            123_456,
            &[0x45, 1, 2],
            60,
        );
        record(&mut f, Endian::Big, 1_700_000_001, 0, &[0x60], 1);
        let frames: Vec<_> = read_frames(&f).unwrap().iter().map(Frame::fields).collect();
        assert_eq!(
            frames,
            [
                (
                    1,
                    LinkType::RawIp,
                    1_700_000_000_123_456_000,
                    &[0x45, 1, 2][..],
                    60
                ),
                (2, LinkType::RawIp, 1_700_000_001_000_000_000, &[0x60], 1),
            ]
        );
    }

    #[test]
    fn nanosecond_magic_both_byte_orders() {
        for e in [Endian::Little, Endian::Big] {
            let mut f = header(e, MAGIC_NANOS, 1);
            record(&mut f, e, 10, 999_999_999, &[1, 2, 3, 4], 4);
            let frames = read_frames(&f).unwrap();
            assert_eq!(frames[0].ts_nanos, 10_999_999_999);
            assert_eq!(frames[0].link, LinkType::Ethernet);
        }
    }

    #[test]
    fn fcs_bits_do_not_change_link_type() {
        // LINKTYPE_ETHERNET with "FCS present, 4 bytes" in the upper bits.
        let f = header(Endian::Little, MAGIC_MICROS, 0x9400_0001);
        assert!(read_frames(&f).unwrap().is_empty());
        let mut f = f;
        record(&mut f, Endian::Little, 0, 0, &[0; 14], 14);
        assert_eq!(read_frames(&f).unwrap()[0].link, LinkType::Ethernet);
    }

    #[test]
    fn empty_record_is_a_frame() {
        let mut f = header(Endian::Little, MAGIC_MICROS, 1);
        record(&mut f, Endian::Little, 0, 0, &[], 0);
        record(&mut f, Endian::Little, 0, 0, &[7], 1);
        let frames = read_frames(&f).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].number, 2);
        assert_eq!(frames[1].data, &[7]);
    }

    #[test]
    fn errors_name_what_and_where() {
        let mut f = header(Endian::Little, MAGIC_MICROS, 1);
        f[4] = 3;
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::UnsupportedVersion {
                format: "pcap",
                offset: 0,
                major: 3,
                minor: 4
            })
        );

        let f = header(Endian::Little, MAGIC_MICROS, 1);
        assert_eq!(
            read_frames(&f[..10]),
            Err(CaptureError::Truncated {
                what: "pcap file header",
                offset: 0,
                needed: 24,
                available: 10
            })
        );

        let mut f = f;
        record(&mut f, Endian::Little, 0, 0, &[1, 2, 3], 3);
        let err = read_frames(&f[..f.len() - 1]).unwrap_err();
        assert_eq!(
            err,
            CaptureError::Truncated {
                what: "pcap packet data",
                offset: 40,
                needed: 3,
                available: 2
            }
        );
        assert_eq!(
            err.to_string(),
            "truncated pcap packet data at offset 40: needs 3 bytes, only 2 left in the file"
        );
        let err = read_frames(&f[..30]).unwrap_err();
        assert!(matches!(
            err,
            CaptureError::Truncated {
                what: "pcap record header",
                offset: 24,
                ..
            }
        ));
    }

    #[test]
    fn huge_caplen_is_an_error_not_an_allocation() {
        let mut f = header(Endian::Little, MAGIC_MICROS, 1);
        for v in [0, 0, u32::MAX, u32::MAX] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        assert!(matches!(
            read_frames(&f),
            Err(CaptureError::Truncated {
                what: "pcap packet data",
                ..
            })
        ));
    }
}
