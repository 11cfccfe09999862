//! Connection teardown: DREQ and DREP (laid out as an RTU, [`IdsAndData`]).

use super::fields::{array, comm_ids, put_comm_ids};
use super::pdata;
use super::setup::IdsAndData;
use crate::be::{put_u24, u24_at};

/// Disconnect request.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Dreq};
/// use ndverbs_wire::mad::Mad;
/// // Names the receiver's QPN: Linux drops a DREQ for another QP.
/// let m = Dreq { local_comm_id: 1, remote_comm_id: 2, remote_qpn: 0x22, private_data: [0; 220] };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Dreq(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Dreq(m));
/// assert_eq!(back.local_comm_id(), 1);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits): Linux drops a DREQ whose QPN is not its own.
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; pdata::DREQ],
}

impl Dreq {
    pub(super) fn parse(b: &[u8]) -> Self {
        let (local_comm_id, remote_comm_id) = comm_ids(b);
        Dreq {
            local_comm_id,
            remote_comm_id,
            remote_qpn: u24_at(b, 8),
            private_data: array(b, 12),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_comm_ids(b, self.local_comm_id, self.remote_comm_id);
        put_u24(b, 8, self.remote_qpn);
        b[12..].copy_from_slice(&self.private_data);
    }
}

/// Disconnect reply.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Drep};
/// use ndverbs_wire::mad::Mad;
/// let m = Drep { local_comm_id: 2, remote_comm_id: 1, private_data: private_data("DREP", b"bye")? };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Drep(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Drep(m));
/// assert!(back.private_data().starts_with(b"bye"));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
pub type Drep = IdsAndData;
