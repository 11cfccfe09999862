//! pcapng file reader.

use super::bytes::{array, pad4, slice, to_usize, Endian};
use super::{CaptureError, Frame, LinkType};

const SHB_TYPE: u32 = 0x0A0D_0D0A;
/// The section header type is a byte palindrome, so it can be recognised
/// before the byte order it announces is known.
pub(super) const SHB_TYPE_BYTES: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const IDB_TYPE: u32 = 1;
/// The obsolete Packet Block, replaced by the EPB but still in old files.
const PB_TYPE: u32 = 2;
const SPB_TYPE: u32 = 3;
const EPB_TYPE: u32 = 6;

/// Type, leading length and trailing length.
const BLOCK_OVERHEAD: usize = 12;
/// Fixed part of an SHB body: byte-order magic, versions, section length.
const SHB_FIXED: usize = 16;
/// Fixed part of an IDB body: link type, reserved, snaplen.
const IDB_FIXED: usize = 8;
/// Fixed part of an EPB (and PB) body: interface, timestamp, two lengths.
const EPB_FIXED: usize = 20;
/// Fixed part of an SPB body: original length.
const SPB_FIXED: usize = 4;

const OPT_ENDOFOPT: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;

/// Human name of a block type, for error messages.
pub(super) fn block_name(block_type: u32) -> &'static str {
    match block_type {
        SHB_TYPE => "pcapng section header block",
        IDB_TYPE => "pcapng interface description block",
        PB_TYPE => "pcapng packet block",
        SPB_TYPE => "pcapng simple packet block",
        EPB_TYPE => "pcapng enhanced packet block",
        _ => "pcapng block",
    }
}

/// Byte order announced by a section header's byte-order magic.
pub(super) fn byte_order(magic: [u8; 4]) -> Option<Endian> {
    if u32::from_le_bytes(magic) == BYTE_ORDER_MAGIC {
        Some(Endian::Little)
    } else if u32::from_be_bytes(magic) == BYTE_ORDER_MAGIC {
        Some(Endian::Big)
    } else {
        None
    }
}

/// Reads every packet of a pcapng file that starts with a section header.
pub(super) fn read(file: &[u8]) -> Result<Vec<Frame<'_>>, CaptureError> {
    let mut frames = Vec::new();
    // Interface ids count interface description blocks from the start of the
    // section, so a new section starts the list afresh.
    let mut interfaces: Vec<Interface> = Vec::new();
    // Only a placeholder: the first block is a section header, which brings
    // its own byte order.
    let mut endian = Endian::Little;
    let mut offset = 0;
    while offset < file.len() {
        let block = Block::parse(file, offset, endian)?;
        match block.block_type {
            SHB_TYPE => {
                block.check_section_header()?;
                endian = block.endian;
                interfaces.clear();
            }
            IDB_TYPE => interfaces.push(Interface::parse(&block)?),
            EPB_TYPE | PB_TYPE => frames.push(block.packet(&interfaces, frames.len() + 1)?),
            SPB_TYPE => frames.push(block.simple_packet(&interfaces, frames.len() + 1)?),
            // Statistics, name resolution, secrets, custom blocks: nothing
            // in them changes which bytes were captured.
            _ => {}
        }
        offset += block.total_len;
    }
    Ok(frames)
}

/// One block, framed and checked, with its body borrowed from the file.
struct Block<'a> {
    block_type: u32,
    offset: usize,
    /// Total length as read, for error messages.
    length: u32,
    total_len: usize,
    endian: Endian,
    body: &'a [u8],
}

impl<'a> Block<'a> {
    fn parse(file: &'a [u8], offset: usize, section: Endian) -> Result<Self, CaptureError> {
        let available = file.len().saturating_sub(offset);
        let truncated = |what, needed| CaptureError::Truncated {
            what,
            offset,
            needed,
            available,
        };
        let [t0, t1, t2, t3, l0, l1, l2, l3] =
            array(file, offset).ok_or_else(|| truncated("pcapng block header", 8))?;
        let type_bytes = [t0, t1, t2, t3];
        let endian = if type_bytes == SHB_TYPE_BYTES {
            let magic = array(file, offset + 8)
                .ok_or_else(|| truncated("pcapng section header block", BLOCK_OVERHEAD))?;
            byte_order(magic).ok_or(CaptureError::BadByteOrderMagic {
                offset: offset + 8,
                magic: u32::from_be_bytes(magic),
            })?
        } else {
            section
        };
        let block_type = endian.u32(type_bytes);
        let length = endian.u32([l0, l1, l2, l3]);
        let bad_length = |reason| CaptureError::BadBlockLength {
            block_type,
            offset,
            length,
            reason,
        };

        let total_len = to_usize(length);
        if total_len < BLOCK_OVERHEAD {
            return Err(bad_length("below the 12-byte minimum"));
        }
        // Blocks are 32-bit aligned; an unaligned length is corruption, and
        // trusting it would misframe every block after it.
        if total_len % 4 != 0 {
            return Err(bad_length("not a multiple of 4"));
        }
        let whole = slice(file, offset, total_len)
            .ok_or_else(|| truncated(block_name(block_type), total_len))?;
        let trailing = endian
            .u32_at(whole, total_len - 4)
            .ok_or_else(|| truncated(block_name(block_type), total_len))?;
        if trailing != length {
            return Err(CaptureError::LengthMismatch {
                block_type,
                offset,
                leading: length,
                trailing,
            });
        }
        let body = whole
            .get(8..total_len - 4)
            .ok_or_else(|| truncated(block_name(block_type), total_len))?;
        Ok(Block {
            block_type,
            offset,
            length,
            total_len,
            endian,
            body,
        })
    }

    fn too_short(&self) -> CaptureError {
        CaptureError::BadBlockLength {
            block_type: self.block_type,
            offset: self.offset,
            length: self.length,
            reason: "too short for the fixed fields of its block type",
        }
    }

    fn u16_at(&self, at: usize) -> Result<u16, CaptureError> {
        self.endian
            .u16_at(self.body, at)
            .ok_or_else(|| self.too_short())
    }

    fn u32_at(&self, at: usize) -> Result<u32, CaptureError> {
        self.endian
            .u32_at(self.body, at)
            .ok_or_else(|| self.too_short())
    }

    fn check_section_header(&self) -> Result<(), CaptureError> {
        if self.body.len() < SHB_FIXED {
            return Err(self.too_short());
        }
        let major = self.u16_at(4)?;
        let minor = self.u16_at(6)?;
        // Minor versions 0 and 2 share a layout (2 only dropped features);
        // a new major would mean a layout we cannot frame. The section
        // length that follows is ignored: it may be -1 ("unknown"), and
        // walking block by block finds the next section anyway.
        if major != 1 {
            return Err(CaptureError::UnsupportedVersion {
                format: "pcapng",
                offset: self.offset,
                major,
                minor,
            });
        }
        Ok(())
    }

    fn interface<'i>(
        &self,
        interfaces: &'i [Interface],
        interface_id: u32,
    ) -> Result<&'i Interface, CaptureError> {
        usize::try_from(interface_id)
            .ok()
            .and_then(|i| interfaces.get(i))
            .ok_or(CaptureError::UnknownInterface {
                block_type: self.block_type,
                offset: self.offset,
                interface_id,
                described: interfaces.len(),
            })
    }

    /// An enhanced packet block, or its obsolete predecessor, which differs
    /// only in having a 16-bit interface id followed by a drop count.
    fn packet(&self, interfaces: &[Interface], number: usize) -> Result<Frame<'a>, CaptureError> {
        if self.body.len() < EPB_FIXED {
            return Err(self.too_short());
        }
        let interface_id = if self.block_type == PB_TYPE {
            u32::from(self.u16_at(0)?)
        } else {
            self.u32_at(0)?
        };
        let iface = self.interface(interfaces, interface_id)?;
        let ticks = u64::from(self.u32_at(4)?) << 32 | u64::from(self.u32_at(8)?);
        let caplen = self.u32_at(12)?;
        let orig_len = self.u32_at(16)?;
        let room = self.body.len() - EPB_FIXED;
        let data =
            slice(self.body, EPB_FIXED, to_usize(caplen)).ok_or(CaptureError::PacketOverrun {
                block_type: self.block_type,
                offset: self.offset,
                caplen,
                room,
            })?;
        Ok(Frame {
            number,
            link: iface.link,
            ts_nanos: iface.nanos(ticks),
            data,
            orig_len,
        })
    }

    /// A simple packet block: always interface 0, no timestamp, and no
    /// captured length, which has to be inferred.
    fn simple_packet(
        &self,
        interfaces: &[Interface],
        number: usize,
    ) -> Result<Frame<'a>, CaptureError> {
        let orig_len = self.u32_at(0)?;
        let iface = self.interface(interfaces, 0)?;
        let data = self.body.get(SPB_FIXED..).unwrap_or_default();
        // The spec's rule: the original length, cut to the interface's snap
        // length (0 = unlimited). Capping at the block's room as well keeps a
        // hostile original length from reaching past the body, and drops the
        // padding when nothing was cut.
        let mut caplen = to_usize(orig_len).min(data.len());
        if iface.snaplen != 0 {
            caplen = caplen.min(to_usize(iface.snaplen));
        }
        Ok(Frame {
            number,
            link: iface.link,
            ts_nanos: 0,
            data: data.get(..caplen).unwrap_or_default(),
            orig_len,
        })
    }
}

/// What an interface description block says that decoding packets needs.
#[derive(Debug)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    resolution: Resolution,
    /// `if_tsoffset`: seconds to add to every timestamp.
    offset_secs: i64,
}

impl Interface {
    fn parse(block: &Block<'_>) -> Result<Self, CaptureError> {
        if block.body.len() < IDB_FIXED {
            return Err(block.too_short());
        }
        let mut iface = Interface {
            link: LinkType::from_u32(u32::from(block.u16_at(0)?)),
            snaplen: block.u32_at(4)?,
            resolution: Resolution::MICROS,
            offset_secs: 0,
        };
        let bad = |offset, code, reason| CaptureError::BadOption {
            block_type: block.block_type,
            offset,
            code,
            reason,
        };
        for_each_option(block, IDB_FIXED, |code, at, value| {
            match code {
                IF_TSRESOL => {
                    let &[v] = value else {
                        return Err(bad(at, code, "if_tsresol must be 1 byte long"));
                    };
                    iface.resolution = Resolution::from_option(v);
                }
                IF_TSOFFSET => {
                    let v = value
                        .try_into()
                        .map_err(|_| bad(at, code, "if_tsoffset must be 8 bytes long"))?;
                    iface.offset_secs = block.endian.i64(v);
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(iface)
    }

    fn nanos(&self, ticks: u64) -> u64 {
        let nanos = i128::try_from(self.resolution.to_nanos(ticks)).unwrap_or(i128::MAX);
        let shifted = nanos.saturating_add(i128::from(self.offset_secs) * 1_000_000_000);
        u64::try_from(shifted.max(0)).unwrap_or(u64::MAX)
    }
}

/// Unit of an interface's timestamps (`if_tsresol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    /// Ticks of 10^-n seconds.
    Decimal(u8),
    /// Ticks of 2^-n seconds.
    Binary(u8),
}

impl Resolution {
    /// The default when an interface has no `if_tsresol`.
    const MICROS: Resolution = Resolution::Decimal(6);

    fn from_option(v: u8) -> Self {
        if v & 0x80 == 0 {
            Resolution::Decimal(v)
        } else {
            Resolution::Binary(v & 0x7F)
        }
    }

    /// In u128 so that no resolution can overflow: the largest product,
    /// 2^64 ticks times 10^9, is below 2^94.
    fn to_nanos(self, ticks: u64) -> u128 {
        let ticks = u128::from(ticks);
        match self {
            Resolution::Decimal(n) if n <= 9 => ticks * 10u128.pow(u32::from(9 - n)),
            // Past 10^-38 s the divisor no longer fits and the answer is 0.
            Resolution::Decimal(n) => 10u128
                .checked_pow(u32::from(n - 9))
                .map_or(0, |div| ticks / div),
            // n is at most 127 after masking, so the shift is defined.
            Resolution::Binary(n) => (ticks * 1_000_000_000) >> n,
        }
    }
}

/// Calls `f(code, offset_in_file, value)` for each option of `block` from
/// body offset `start` up to `opt_endofopt` or the end of the body.
fn for_each_option<'a>(
    block: &Block<'a>,
    start: usize,
    mut f: impl FnMut(u16, usize, &'a [u8]) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    let mut pos = start;
    while pos < block.body.len() {
        let at = block.offset + 8 + pos;
        let overrun = || CaptureError::OptionOverrun {
            block_type: block.block_type,
            offset: at,
        };
        let code = block.endian.u16_at(block.body, pos).ok_or_else(overrun)?;
        let len = block
            .endian
            .u16_at(block.body, pos + 2)
            .ok_or_else(overrun)?;
        if code == OPT_ENDOFOPT {
            break;
        }
        let len = usize::from(len);
        let value = slice(block.body, pos + 4, len).ok_or_else(overrun)?;
        f(code, at, value)?;
        pos += 4 + pad4(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::read_frames;

    /// Builds pcapng files in either byte order, one block at a time.
    struct Builder {
        e: Endian,
        out: Vec<u8>,
    }

    impl Builder {
        fn new(e: Endian) -> Self {
            let mut b = Builder { e, out: Vec::new() };
            b.section(e);
            b
        }

        /// Starts a new section, possibly in another byte order.
        fn section(&mut self, e: Endian) -> &mut Self {
            self.e = e;
            let mut body = e.u32_bytes(BYTE_ORDER_MAGIC).to_vec();
            body.extend_from_slice(&e.u16_bytes(1));
            body.extend_from_slice(&e.u16_bytes(0));
            body.extend_from_slice(&e.i64_bytes(-1));
            self.block(SHB_TYPE, &body)
        }

        fn block(&mut self, block_type: u32, body: &[u8]) -> &mut Self {
            let mut padded = body.to_vec();
            padded.resize(pad4(body.len()), 0);
            let len = (padded.len() + BLOCK_OVERHEAD) as u32;
            let e = self.e;
            self.out.extend_from_slice(&e.u32_bytes(block_type));
            self.out.extend_from_slice(&e.u32_bytes(len));
            self.out.extend_from_slice(&padded);
            self.out.extend_from_slice(&e.u32_bytes(len));
            self
        }

        fn idb(&mut self, link: u16, snaplen: u32, options: &[(u16, &[u8])]) -> &mut Self {
            let e = self.e;
            let mut body = e.u16_bytes(link).to_vec();
            body.extend_from_slice(&[0, 0]);
            body.extend_from_slice(&e.u32_bytes(snaplen));
            if !options.is_empty() {
                for (code, value) in options {
                    body.extend_from_slice(&e.u16_bytes(*code));
                    body.extend_from_slice(&e.u16_bytes(value.len() as u16));
                    body.extend_from_slice(value);
                    body.resize(pad4(body.len()), 0);
                }
                body.extend_from_slice(&[0; 4]);
            }
            self.block(IDB_TYPE, &body)
        }

        fn epb(&mut self, iface: u32, ticks: u64, data: &[u8], orig: u32) -> &mut Self {
            let e = self.e;
            let mut body = e.u32_bytes(iface).to_vec();
            body.extend_from_slice(&e.u32_bytes((ticks >> 32) as u32));
            body.extend_from_slice(&e.u32_bytes(ticks as u32));
            body.extend_from_slice(&e.u32_bytes(data.len() as u32));
            body.extend_from_slice(&e.u32_bytes(orig));
            body.extend_from_slice(data);
            self.block(EPB_TYPE, &body)
        }

        fn pb(&mut self, iface: u16, ticks: u64, data: &[u8]) -> &mut Self {
            let e = self.e;
            let mut body = e.u16_bytes(iface).to_vec();
            body.extend_from_slice(&e.u16_bytes(0));
            body.extend_from_slice(&e.u32_bytes((ticks >> 32) as u32));
            body.extend_from_slice(&e.u32_bytes(ticks as u32));
            body.extend_from_slice(&e.u32_bytes(data.len() as u32));
            body.extend_from_slice(&e.u32_bytes(data.len() as u32));
            body.extend_from_slice(data);
            self.block(PB_TYPE, &body)
        }

        fn spb(&mut self, orig: u32, data: &[u8]) -> &mut Self {
            let mut body = self.e.u32_bytes(orig).to_vec();
            body.extend_from_slice(data);
            self.block(SPB_TYPE, &body)
        }

        fn bytes(&self) -> Vec<u8> {
            self.out.clone()
        }
    }

    const BOTH: [Endian; 2] = [Endian::Little, Endian::Big];

    #[test]
    fn two_interfaces_spb_pb_and_unknown_blocks() {
        for e in BOTH {
            let file = Builder::new(e)
                .idb(1, 0, &[])
                .block(0x0000_0BAD, &[1, 2, 3, 4, 5])
                .idb(101, 0, &[(2, b"tun0"), (IF_TSRESOL, &[9])])
                .epb(0, 1_700_000_000_000_001, &[0xE0; 14], 60)
                .block(5, &[0; 8]) // interface statistics
                .epb(1, 1_700_000_000_000_000_007, &[0x45, 0], 2)
                .spb(3, &[0xAA, 0xBB, 0xCC])
                .pb(1, 42, &[0x60])
                .bytes();
            let frames: Vec<_> = read_frames(&file)
                .unwrap()
                .iter()
                .map(Frame::fields)
                .collect();
            assert_eq!(
                frames,
                [
                    (
                        1,
                        LinkType::Ethernet,
                        1_700_000_000_000_001_000,
                        &[0xE0; 14][..],
                        60
                    ),
                    (2, LinkType::RawIp, 1_700_000_000_000_000_007, &[0x45, 0], 2),
                    (3, LinkType::Ethernet, 0, &[0xAA, 0xBB, 0xCC], 3),
                    (4, LinkType::RawIp, 42, &[0x60], 1),
                ],
                "{e:?}"
            );
        }
    }

    #[test]
    fn sections_switch_byte_order_and_restart_interfaces() {
        for (first, second) in [(Endian::Little, Endian::Big), (Endian::Big, Endian::Little)] {
            let mut b = Builder::new(first);
            b.idb(1, 0, &[])
                .idb(113, 0, &[])
                .epb(1, 1, &[1], 1)
                .section(second)
                .idb(276, 0, &[])
                .epb(0, 2, &[2], 1);
            let frames = read_frames(&b.out).unwrap();
            assert_eq!(frames.len(), 2);
            assert_eq!(frames[0].link, LinkType::LinuxSll);
            assert_eq!(frames[1].link, LinkType::LinuxSll2);
            assert_eq!(frames[1].number, 2);
            assert_eq!(frames[1].ts_nanos, 2_000);

            // Interface 1 belonged to the first section only.
            let shb2_and_idb = b.out.len();
            b.epb(1, 3, &[3], 1);
            assert_eq!(
                read_frames(&b.bytes()),
                Err(CaptureError::UnknownInterface {
                    block_type: EPB_TYPE,
                    offset: shb2_and_idb,
                    interface_id: 1,
                    described: 1,
                })
            );
        }
    }

    #[test]
    fn timestamp_resolution_and_offset() {
        for e in BOTH {
            let file = Builder::new(e)
                .idb(1, 0, &[(IF_TSRESOL, &[3])]) // milliseconds
                .idb(1, 0, &[(IF_TSRESOL, &[0x80 | 10])]) // 1/1024 s
                .idb(1, 0, &[(IF_TSRESOL, &[12])]) // picoseconds
                .idb(1, 0, &[(IF_TSOFFSET, &e.i64_bytes(100))])
                .idb(1, 0, &[(IF_TSOFFSET, &e.i64_bytes(-100))])
                .idb(1, 0, &[(IF_TSRESOL, &[0x7F])]) // absurdly fine
                .idb(1, 0, &[(IF_TSRESOL, &[0xFF])]) // absurdly fine, binary
                .idb(1, 0, &[(IF_TSRESOL, &[0])]) // whole seconds
                .epb(0, 1_500, &[], 0)
                .epb(1, 3 * 1024 + 512, &[], 0)
                .epb(2, 5_000_000, &[], 0)
                .epb(3, 7, &[], 0)
                .epb(4, 7, &[], 0)
                .epb(5, u64::MAX, &[], 0)
                .epb(6, u64::MAX, &[], 0)
                .epb(7, u64::MAX, &[], 0)
                .bytes();
            let ts: Vec<u64> = read_frames(&file)
                .unwrap()
                .iter()
                .map(|f| f.ts_nanos)
                .collect();
            assert_eq!(
                ts,
                [
                    1_500_000_000,
                    3_500_000_000,
                    5_000,
                    100_000_007_000,
                    0,
                    0,
                    0,
                    u64::MAX
                ],
                "{e:?}"
            );
        }
    }

    #[test]
    fn spb_is_cut_to_snaplen() {
        let file = Builder::new(Endian::Little)
            .idb(1, 4, &[])
            .spb(10, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
            .spb(2, &[1, 2])
            // A hostile original length cannot reach past the block.
            .spb(u32::MAX, &[9])
            .bytes();
        let frames = read_frames(&file).unwrap();
        assert_eq!(frames[0].data, &[1, 2, 3, 4]);
        assert_eq!(frames[0].orig_len, 10);
        assert_eq!(frames[1].data, &[1, 2]);
        assert_eq!(frames[2].data, &[9, 0, 0, 0]);
    }

    #[test]
    fn spb_without_interface_is_an_error() {
        let file = Builder::new(Endian::Big).spb(1, &[1]).bytes();
        let err = read_frames(&file).unwrap_err();
        assert_eq!(
            err,
            CaptureError::UnknownInterface {
                block_type: SPB_TYPE,
                offset: 28,
                interface_id: 0,
                described: 0,
            }
        );
        assert_eq!(
            err.to_string(),
            "pcapng simple packet block (type 0x3) at offset 28 refers to interface 0, \
             but its section has described only 0 interface(s) so far"
        );
    }

    /// A valid little-endian file: SHB (28 bytes), IDB at 28 (20 bytes),
    /// EPB at 48 (36 bytes).
    fn small() -> Vec<u8> {
        Builder::new(Endian::Little)
            .idb(1, 0, &[])
            .epb(0, 0, &[1, 2, 3, 4], 4)
            .bytes()
    }

    fn set_u32(file: &mut [u8], at: usize, v: u32) {
        file[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn framing_errors() {
        let mut f = small();
        set_u32(&mut f, 48 + 4, 37);
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::BadBlockLength {
                block_type: EPB_TYPE,
                offset: 48,
                length: 37,
                reason: "not a multiple of 4",
            })
        );

        let mut f = small();
        set_u32(&mut f, 48 + 4, 8);
        assert!(matches!(
            read_frames(&f),
            Err(CaptureError::BadBlockLength { length: 8, .. })
        ));

        let mut f = small();
        set_u32(&mut f, 48 + 4, 40);
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::Truncated {
                what: "pcapng enhanced packet block",
                offset: 48,
                needed: 40,
                available: 36,
            })
        );

        let mut f = small();
        set_u32(&mut f, 28 + 16, 24);
        let err = read_frames(&f).unwrap_err();
        assert_eq!(
            err,
            CaptureError::LengthMismatch {
                block_type: IDB_TYPE,
                offset: 28,
                leading: 20,
                trailing: 24,
            }
        );
        assert_eq!(
            err.to_string(),
            "pcapng interface description block (type 0x1) at offset 28 has total length 20 \
             but its trailing copy says 24"
        );

        let mut f = small();
        f.extend_from_slice(&[6, 0, 0]);
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::Truncated {
                what: "pcapng block header",
                offset: 84,
                needed: 8,
                available: 3,
            })
        );
    }

    #[test]
    fn block_too_short_for_its_fields() {
        let file = Builder::new(Endian::Little)
            .idb(1, 0, &[])
            .block(EPB_TYPE, &[0; 16])
            .bytes();
        assert_eq!(
            read_frames(&file),
            Err(CaptureError::BadBlockLength {
                block_type: EPB_TYPE,
                offset: 48,
                length: 28,
                reason: "too short for the fixed fields of its block type",
            })
        );
        let file = Builder::new(Endian::Big).block(IDB_TYPE, &[0; 4]).bytes();
        assert!(matches!(
            read_frames(&file),
            Err(CaptureError::BadBlockLength {
                block_type: IDB_TYPE,
                ..
            })
        ));
    }

    #[test]
    fn packet_overrun() {
        let mut f = small();
        set_u32(&mut f, 48 + 8 + 12, 5); // caplen 5, but 4 bytes of room
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::PacketOverrun {
                block_type: EPB_TYPE,
                offset: 48,
                caplen: 5,
                room: 4,
            })
        );
    }

    #[test]
    fn section_header_errors() {
        let mut f = small();
        f[8..12].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::BadByteOrderMagic {
                offset: 8,
                magic: 0x0102_0304
            })
        );

        let mut f = small();
        f[12] = 2;
        assert_eq!(
            read_frames(&f),
            Err(CaptureError::UnsupportedVersion {
                format: "pcapng",
                offset: 0,
                major: 2,
                minor: 0
            })
        );

        assert_eq!(
            read_frames(&small()[..10]),
            Err(CaptureError::Truncated {
                what: "pcapng section header block",
                offset: 0,
                needed: 12,
                available: 10,
            })
        );

        let f = Builder::new(Endian::Little)
            .block(SHB_TYPE, &{
                let mut b = BYTE_ORDER_MAGIC.to_le_bytes().to_vec();
                b.extend_from_slice(&[1, 0, 0, 0]);
                b
            })
            .bytes();
        assert!(matches!(
            read_frames(&f),
            Err(CaptureError::BadBlockLength {
                block_type: SHB_TYPE,
                offset: 28,
                ..
            })
        ));
    }

    #[test]
    fn option_errors() {
        // An if_tsresol claiming 200 bytes, in a block that has 4.
        let f = Builder::new(Endian::Little)
            .block(
                IDB_TYPE,
                &[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 200, 0, 9, 0, 0, 0],
            )
            .bytes();
        let err = read_frames(&f).unwrap_err();
        assert_eq!(
            err,
            CaptureError::OptionOverrun {
                block_type: IDB_TYPE,
                offset: 44,
            }
        );
        assert_eq!(
            err.to_string(),
            "option at offset 44 in the pcapng interface description block (type 0x1) \
             runs past the end of the block"
        );

        for e in BOTH {
            let f = Builder::new(e).idb(1, 0, &[(IF_TSRESOL, &[6, 6])]).bytes();
            assert_eq!(
                read_frames(&f),
                Err(CaptureError::BadOption {
                    block_type: IDB_TYPE,
                    offset: 44,
                    code: IF_TSRESOL,
                    reason: "if_tsresol must be 1 byte long",
                })
            );
            let f = Builder::new(e)
                .idb(1, 0, &[(2, b"eth0"), (IF_TSOFFSET, &[0; 4])])
                .bytes();
            assert!(matches!(
                read_frames(&f),
                Err(CaptureError::BadOption {
                    code: IF_TSOFFSET,
                    offset: 52,
                    ..
                })
            ));
        }
    }

    #[test]
    fn options_without_end_marker_are_accepted() {
        let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&[IF_TSRESOL as u8, 0, 1, 0, 9, 0, 0, 0]);
        let file = Builder::new(Endian::Little)
            .block(IDB_TYPE, &body)
            .epb(0, 5, &[], 0)
            .bytes();
        assert_eq!(read_frames(&file).unwrap()[0].ts_nanos, 5);
    }
}
