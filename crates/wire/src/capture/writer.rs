//! Classic pcap writer.

use std::io::{self, Write};

use super::pcap::{FILE_HEADER_LEN, MAGIC_MICROS, RECORD_HEADER_LEN, VERSION_MAJOR, VERSION_MINOR};
use super::LinkType;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Writes a classic pcap file: little-endian, microsecond timestamps,
/// version 2.4, snap length [`PcapWriter::SNAPLEN`].
///
/// This is the one format that every tool reads, which matters more for
/// captures handed to other people than pcapng's extra features.
/// Timestamps are truncated to microseconds.
///
/// Each call writes straight to `out`; wrap it in a [`std::io::BufWriter`]
/// when writing to a file.
///
/// # Example
///
/// ```
/// use ndverbs_wire::capture::{is_capture, read_frames, LinkType, PcapWriter};
/// // Any `Write` will do: a file, a socket, a Vec.
/// let mut w = PcapWriter::new(Vec::new(), LinkType::RawIp)?;
/// w.write_packet(0, &[0x45, 0, 0, 20])?;
/// w.write_packet(1_000, &[0x45, 0, 0, 21])?;
/// let file = w.into_inner();
/// assert!(is_capture(&file));
/// assert_eq!(read_frames(&file).unwrap().len(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Snap length written in the header; longer packets are truncated to it.
    /// It is what `tcpdump` uses by default and more than any RoCE MTU.
    pub const SNAPLEN: u32 = 262_144;

    /// Writes the file header for packets of link type `link`.
    ///
    /// # Errors
    ///
    /// Any error from writing to `out`.
    pub fn new(mut out: W, link: LinkType) -> io::Result<Self> {
        let mut header = [0u8; FILE_HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        header[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        header[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // thiszone and sigfigs stay 0, as every writer since the 1990s does.
        header[16..20].copy_from_slice(&Self::SNAPLEN.to_le_bytes());
        header[20..24].copy_from_slice(&link.to_u32().to_le_bytes());
        out.write_all(&header)?;
        Ok(PcapWriter { out })
    }

    /// Continues a pcap file whose header is already written (`out` positioned
    /// at its end, e.g. opened in append mode); records must match that
    /// header's link type.
    pub fn append(out: W) -> Self {
        PcapWriter { out }
    }

    /// Appends one packet captured at `ts_nanos` (nanoseconds since the Unix
    /// epoch).
    ///
    /// Packets longer than [`PcapWriter::SNAPLEN`] are truncated, with their
    /// full length recorded as the original length.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for timestamps after 2106-02-07, which
    /// pcap's 32-bit seconds cannot hold (nothing is written then), and any
    /// error from writing to the underlying writer.
    pub fn write_packet(&mut self, ts_nanos: u64, data: &[u8]) -> io::Result<()> {
        let secs = u32::try_from(ts_nanos / NANOS_PER_SEC).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("timestamp {ts_nanos} ns is past what pcap's 32-bit seconds can hold"),
            )
        })?;
        let micros = u32::try_from(ts_nanos % NANOS_PER_SEC / 1_000).unwrap_or_default();
        let orig_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let captured = data.get(..Self::SNAPLEN as usize).unwrap_or(data);
        let caplen = u32::try_from(captured.len()).unwrap_or(Self::SNAPLEN);

        let mut header = [0u8; RECORD_HEADER_LEN];
        header[0..4].copy_from_slice(&secs.to_le_bytes());
        header[4..8].copy_from_slice(&micros.to_le_bytes());
        header[8..12].copy_from_slice(&caplen.to_le_bytes());
        header[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(captured)
    }

    /// Flushes the underlying writer.
    ///
    /// # Errors
    ///
    /// Any error from flushing it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    ///
    /// A flush error is discarded here because the writer is handed back
    /// either way; call [`PcapWriter::flush`] first to see it.
    pub fn into_inner(mut self) -> W {
        let _ = self.out.flush();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::link::tests::EVERY_KIND;
    use crate::capture::read_frames;

    #[test]
    fn header_bytes() {
        let out = PcapWriter::new(Vec::new(), LinkType::Ethernet)
            .unwrap()
            .into_inner();
        assert_eq!(
            out,
            [0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0]
        );
    }

    #[test]
    fn round_trip() {
        let packets: [(u64, &[u8]); 3] = [
            (1_700_000_000_123_456_789, &[0x45, 0, 0, 20]),
            (1_700_000_000_123_457_000, &[]),
            (0, &[0x60; 100]),
        ];
        let mut w = PcapWriter::new(Vec::new(), LinkType::RawIp).unwrap();
        for (ts, data) in packets {
            w.write_packet(ts, data).unwrap();
        }
        w.flush().unwrap();
        let file = w.into_inner();
        let frames = read_frames(&file).unwrap();
        assert_eq!(frames.len(), packets.len());
        for (i, (frame, (ts, data))) in frames.iter().zip(packets).enumerate() {
            assert_eq!(frame.number, i + 1);
            assert_eq!(frame.link, LinkType::RawIp);
            assert_eq!(frame.ts_nanos, ts / 1_000 * 1_000, "truncated to µs");
            assert_eq!(frame.data, data);
            assert_eq!(frame.orig_len as usize, data.len());
        }
    }

    #[test]
    fn every_link_type_round_trips() {
        for link in EVERY_KIND {
            let mut w = PcapWriter::new(Vec::new(), link).unwrap();
            w.write_packet(5, &[1]).unwrap();
            let file = w.into_inner();
            assert_eq!(read_frames(&file).unwrap()[0].link, link);
        }
    }

    #[test]
    fn oversized_packet_is_truncated_to_snaplen() {
        let big = vec![0xAB; PcapWriter::<Vec<u8>>::SNAPLEN as usize + 10];
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        w.write_packet(1, &big).unwrap();
        let file = w.into_inner();
        let frames = read_frames(&file).unwrap();
        assert_eq!(
            frames[0].data.len(),
            PcapWriter::<Vec<u8>>::SNAPLEN as usize
        );
        assert_eq!(frames[0].orig_len as usize, big.len());
    }

    #[test]
    fn timestamp_past_2106_is_rejected() {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        let last = u64::from(u32::MAX) * NANOS_PER_SEC + 999_999_999;
        w.write_packet(last, &[1]).unwrap();
        let err = w.write_packet(last + 1, &[1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        // Nothing of the rejected packet reached the output.
        let file = w.into_inner();
        assert_eq!(file.len(), FILE_HEADER_LEN + RECORD_HEADER_LEN + 1);
        assert_eq!(
            read_frames(&file).unwrap()[0].ts_nanos,
            last / 1_000 * 1_000
        );
    }
}
