//! The error of engine calls.
//!
//! Every call on a [`Nic`](crate::nic::Nic) that can fail returns
//! [`EngineError`]: handles are plain ids, so a stale or foreign one is a typed
//! error ([`EngineError::NotFound`]), never a crash, and a removed NIC answers
//! every call but cleanup with [`EngineError::Removed`].

use crate::mr::MemError;
use ndverbs_proto::rc::{ModifyError, PostError};
use std::io;

/// Errors of engine calls.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::error::EngineError;
/// use ndverbs_engine::nic::Nic;
/// let a = Nic::open("127.93.3.1".parse().unwrap(), Progress::Thread)?;
/// // Handles are plain ids: a stale one is an error, never a crash.
/// let err = a.destroy_qp(0x1234).unwrap_err();
/// assert!(matches!(err, EngineError::NotFound { what: "QP", id: 0x1234 }), "{err}");
/// assert!(matches!(a.create_cq(0), Err(EngineError::InvalidArgument(_))));
/// a.remove();
/// assert!(matches!(a.alloc_pd(), Err(EngineError::Removed)));
/// # Ok::<(), EngineError>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The NIC was removed; only cleanup works.
    #[error("the device was removed")]
    Removed,
    /// No object with this id (already destroyed, or never existed).
    #[error("no {what} with id {id:#x}")]
    NotFound {
        /// Object kind.
        what: &'static str,
        /// The id.
        id: u32,
    },
    /// The endpoint has no connection (never connected, or already disconnected).
    #[error("the endpoint is not connected")]
    NotConnected,
    /// The object is still in use by others.
    #[error("{0}")]
    Busy(&'static str),
    /// An argument out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// Socket or system call failure.
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    /// Refused QP modification.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// Refused post.
    #[error(transparent)]
    Post(#[from] PostError),
    /// Refused memory registration/window operation.
    #[error(transparent)]
    Mem(#[from] MemError),
}
