//! The one error type of verbs calls and requests.
//!
//! Every fallible call returns [`Error`], and so does every pending request
//! ([`crate::Pending`]) that ends badly. Callers branch on its
//! [`ErrorKind`], a short list in the manner of `std::io::ErrorKind` whose
//! members are the conditions ibverbs and librdmacm report with errno values;
//! [`Error::errno`] gives that value, so a C layer over verbs returns what
//! rdma-core would. The details a caller may act on stay reachable: the
//! refused post ([`Error::post_error`]), QP modification
//! ([`Error::modify_error`]) or memory access ([`Error::access_error`]), the
//! connection manager's refusal ([`Error::cm_error`]), the peer's rejection
//! ([`Error::rejection`]) and the system error ([`Error::io_error`]).
//!
//! The kinds and their errnos are tabled on [`ErrorKind`].

use ndverbs_proto::cm::CmError;
use ndverbs_proto::mem::AccessError;
use ndverbs_proto::rc::{ModifyError, PostError};
use std::borrow::Cow;
use std::fmt;
use std::io;
use std::sync::Arc;

/// What kind of failure an [`Error`] is, and the errno ibverbs and librdmacm
/// report for it ([`ErrorKind::errno`]):
///
/// | kind | errno | meaning |
/// |---|---|---|
/// | `InvalidArgument` | `EINVAL` | an argument out of range or not allowed with the others |
/// | `InvalidState` | `EINVAL` | the object's state does not allow the call (QP transition, post in RESET, CM request out of order) |
/// | `NotFound` | `ENOENT` | a handle, key or QP number that names nothing (destroyed, never existed) |
/// | `Busy` | `EBUSY` | the object is still in use (PD with objects, region with windows, endpoint already in use) |
/// | `QueueFull` | `ENOMEM` | a work queue holds its maximum (rxe and mlx5 say `ENOMEM`) |
/// | `NoMemory` | `ENOMEM` | an allocation failed |
/// | `Overflow` | `EOVERFLOW` | a completion queue lost completions, or cannot shrink below those it holds |
/// | `Access` | `EACCES` | a memory access outside a region or without the right |
/// | `DeviceRemoved` | `ENODEV` | the device was removed: only cleanup works |
/// | `NotConnected` | `ENOTCONN` | the endpoint has no connection |
/// | `Rejected` | `ECONNREFUSED` | the peer rejected the connection (REJ) |
/// | `PortUnreachable` | `ECONNREFUSED` | the peer's host answered ICMP port unreachable: no RoCE endpoint there (nothing on UDP 4791), so the connect ended without its REQ retries; `ECONNREFUSED` as the kernel reports this ICMP on a UDP socket and a TCP connect to a closed port (no [`Error::rejection`]) |
/// | `TimedOut` | `ETIMEDOUT` | the peer did not answer in time |
/// | `Canceled` | `ECANCELED` | the application cancelled the request |
/// | `ConnectionAborted` | `ECONNABORTED` | the connection went away before the request finished |
/// | `AddressInUse` | `EADDRINUSE` | the address (UDP 4791) is already open |
/// | `AddressNotAvailable` | `EADDRNOTAVAIL` | the address is not on this host |
/// | `Unreachable` | `ENETUNREACH` | no route to the destination |
/// | `Io` | the system's, else `EIO` | any other system call failure |
/// | `Internal` | `EIO` | the engine lost a request without an outcome: a bug, never a state of the device or connection |
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.20.1".parse().unwrap())?;
/// let err = dev.create_cq(0).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidArgument);
/// assert_eq!(err.kind().errno(), libc::EINVAL);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument out of range, or not allowed together with the others.
    InvalidArgument,
    /// The object's state does not allow the call.
    InvalidState,
    /// A handle, key or QP number that names nothing.
    NotFound,
    /// The object is still in use.
    Busy,
    /// A work queue holds its maximum of outstanding requests.
    QueueFull,
    /// An allocation failed.
    NoMemory,
    /// A completion queue lost completions, or cannot hold those it has.
    Overflow,
    /// A memory access outside a region or without the right.
    Access,
    /// The device was removed: only cleanup works.
    DeviceRemoved,
    /// The endpoint has no connection.
    NotConnected,
    /// The peer rejected the connection.
    Rejected,
    /// The peer's host has no RoCE endpoint: it answered ICMP port
    /// unreachable.
    PortUnreachable,
    /// The peer did not answer in time.
    TimedOut,
    /// Cancelled by the application.
    Canceled,
    /// The connection went away before the request finished.
    ConnectionAborted,
    /// The address is already open.
    AddressInUse,
    /// The address is not on this host.
    AddressNotAvailable,
    /// No route to the destination.
    Unreachable,
    /// Another system call failure.
    Io,
    /// The engine lost a request without an outcome (a bug in the engine).
    Internal,
}

impl ErrorKind {
    /// The errno ibverbs and librdmacm report for this kind (table above).
    /// [`Error::errno`] refines `Io` with the system's own value.
    pub fn errno(self) -> i32 {
        use ErrorKind::*;
        match self {
            InvalidArgument | InvalidState => libc::EINVAL,
            NotFound => libc::ENOENT,
            Busy => libc::EBUSY,
            // rxe and mlx5 refuse a post to a full queue with ENOMEM.
            QueueFull | NoMemory => libc::ENOMEM,
            Overflow => libc::EOVERFLOW,
            Access => libc::EACCES,
            DeviceRemoved => libc::ENODEV,
            NotConnected => libc::ENOTCONN,
            Rejected | PortUnreachable => libc::ECONNREFUSED,
            TimedOut => libc::ETIMEDOUT,
            Canceled => libc::ECANCELED,
            ConnectionAborted => libc::ECONNABORTED,
            AddressInUse => libc::EADDRINUSE,
            AddressNotAvailable => libc::EADDRNOTAVAIL,
            Unreachable => libc::ENETUNREACH,
            Io | Internal => libc::EIO,
        }
    }

    fn describe(self) -> &'static str {
        use ErrorKind::*;
        match self {
            InvalidArgument => "invalid argument",
            InvalidState => "not allowed in the object's state",
            NotFound => "no such object",
            Busy => "still in use",
            QueueFull => "queue full",
            NoMemory => "out of memory",
            Overflow => "completion queue overflow",
            Access => "memory access refused",
            DeviceRemoved => "the device was removed",
            NotConnected => "not connected",
            Rejected => "rejected by the peer",
            PortUnreachable => "no RoCE endpoint at the peer (ICMP port unreachable)",
            TimedOut => "timed out",
            Canceled => "canceled",
            ConnectionAborted => "connection aborted",
            AddressInUse => "address already in use",
            AddressNotAvailable => "address not available",
            Unreachable => "no route to the destination",
            Io => "I/O error",
            Internal => "internal error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The peer's rejection of a connection: the REJ's reason code and private
/// data.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// fn why(e: &Error) -> String {
///     match e.rejection() {
///         // Reason 28 is "consumer reject": the application said no.
///         Some(r) if r.reason == 28 => format!("refused: {:?}", String::from_utf8_lossy(&r.private_data)),
///         Some(r) => format!("refused by the CM (reason {})", r.reason),
///         None => e.to_string(),
///     }
/// }
/// # let _ = why;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// REJ reason code (IBTA table 112: 8 invalid service ID, 28 consumer reject, …).
    pub reason: u16,
    /// The REJ's private data (zero-padded as on the wire).
    pub private_data: Vec<u8>,
}

/// What an error carries beyond its kind.
#[derive(Debug, Clone)]
enum Detail {
    None,
    Text(Cow<'static, str>),
    Post(PostError),
    Modify(ModifyError),
    Access(AccessError),
    Cm(CmError),
    // Shared so that errors stay `Clone` (requests may hand one to several
    // waiters); with what it was about (a file name) when the system's
    // message does not say.
    Io(Arc<io::Error>, Option<String>),
    Rejected(Rejection),
}

/// A failed verbs call or request: a [kind](ErrorKind), the call that failed,
/// and what exactly went wrong. Nothing was done when a call returns one.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.12.1".parse().unwrap())?;
/// let pd = dev.alloc_pd()?;
/// let mr = pd.reg_mr(16, Access::LOCAL_WRITE)?;
/// // Outside the region: an access error, nothing copied.
/// let err = mr.read(10, &mut [0; 10]).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Access);
/// assert!(matches!(err.access_error(), Some(AccessError::OutOfBounds { .. })));
/// println!("{err}"); // Mr::read: key 0x…: 10 bytes at 0x… are outside the region
/// // A send on a QP that was never connected: refused in its state.
/// let cq = dev.create_cq(4)?;
/// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
/// let err = qp.post_send(SendWr::new(1, SendOp::Send, vec![])).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidState);
/// assert_eq!(err.post_error(), Some(PostError::InvalidState(QpState::Reset)));
/// assert_eq!(err.errno(), libc::EINVAL); // what ibv_post_send returns
/// // After removal only cleanup works.
/// dev.remove();
/// assert_eq!(dev.create_cq(4).unwrap_err().kind(), ErrorKind::DeviceRemoved);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    /// The call or request that failed, as `Type::method`.
    op: &'static str,
    detail: Detail,
}

impl Error {
    fn with(kind: ErrorKind, op: &'static str, detail: Detail) -> Error {
        Error { kind, op, detail }
    }

    /// An error with nothing to say beyond its kind.
    pub(crate) fn kind_only(kind: ErrorKind, op: &'static str) -> Error {
        Error::with(kind, op, Detail::None)
    }

    /// An error with an explanation.
    pub(crate) fn new(
        kind: ErrorKind,
        op: &'static str,
        text: impl Into<Cow<'static, str>>,
    ) -> Error {
        Error::with(kind, op, Detail::Text(text.into()))
    }

    /// A refused post.
    pub(crate) fn post(op: &'static str, e: PostError) -> Error {
        let kind = match e {
            PostError::InvalidState(_) => ErrorKind::InvalidState,
            PostError::QueueFull(_) => ErrorKind::QueueFull,
            _ => ErrorKind::InvalidArgument,
        };
        Error::with(kind, op, Detail::Post(e))
    }

    /// A refused QP modification: a transition or claim about the state
    /// is a state error, the rest are bad arguments (ibv_modify_qp says
    /// EINVAL to both).
    pub(crate) fn modify(op: &'static str, e: ModifyError) -> Error {
        let kind = match e {
            ModifyError::IllegalTransition { .. } | ModifyError::CurrentStateMismatch { .. } => {
                ErrorKind::InvalidState
            }
            _ => ErrorKind::InvalidArgument,
        };
        Error::with(kind, op, Detail::Modify(e))
    }

    /// A refused memory access.
    pub(crate) fn access(op: &'static str, e: AccessError) -> Error {
        Error::with(ErrorKind::Access, op, Detail::Access(e))
    }

    /// A call the connection manager refused.
    pub(crate) fn cm(op: &'static str, e: CmError) -> Error {
        let kind = match e {
            CmError::UnknownEndpoint => ErrorKind::NotFound,
            CmError::InvalidState(_) => ErrorKind::InvalidState,
            CmError::DeviceRemoved => ErrorKind::DeviceRemoved,
            CmError::ServiceIdBusy(_) => ErrorKind::Busy,
            CmError::PrivateDataTooLong { .. } | CmError::InvalidParameter(_) => {
                ErrorKind::InvalidArgument
            }
            _ => ErrorKind::Internal,
        };
        Error::with(kind, op, Detail::Cm(e))
    }

    /// A system call failure; the address errors of opening a device get
    /// kinds of their own (rdma_bind_addr's errnos).
    pub(crate) fn io(op: &'static str, e: io::Error) -> Error {
        Error::io_about(op, None, e)
    }

    /// A system call failure about `what` (a path, say).
    pub(crate) fn io_about(op: &'static str, what: Option<String>, e: io::Error) -> Error {
        let kind = match e.kind() {
            io::ErrorKind::AddrInUse => ErrorKind::AddressInUse,
            io::ErrorKind::AddrNotAvailable => ErrorKind::AddressNotAvailable,
            io::ErrorKind::OutOfMemory => ErrorKind::NoMemory,
            _ => ErrorKind::Io,
        };
        Error::with(kind, op, Detail::Io(Arc::new(e), what))
    }

    /// The peer's REJ.
    pub(crate) fn rejected(op: &'static str, reason: u16, private_data: Vec<u8>) -> Error {
        Error::with(
            ErrorKind::Rejected,
            op,
            Detail::Rejected(Rejection {
                reason,
                private_data,
            }),
        )
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The errno an ibverbs or librdmacm call reports for this failure: the
    /// kind's ([`ErrorKind::errno`]), or the system's own for a system call
    /// that failed.
    pub fn errno(&self) -> i32 {
        match &self.detail {
            Detail::Io(e, _) => e.raw_os_error().unwrap_or_else(|| self.kind.errno()),
            _ => self.kind.errno(),
        }
    }

    /// The refused post, if this is one (its rule: state, queue full, SGE
    /// count, inline size, …).
    pub fn post_error(&self) -> Option<PostError> {
        match self.detail {
            Detail::Post(e) => Some(e),
            _ => None,
        }
    }

    /// The refused QP modification, if this is one (the transition or the
    /// attribute at fault).
    pub fn modify_error(&self) -> Option<ModifyError> {
        match self.detail {
            Detail::Modify(e) => Some(e),
            _ => None,
        }
    }

    /// The refused memory access, if this is one (also a window bind the
    /// region does not allow).
    pub fn access_error(&self) -> Option<AccessError> {
        match self.detail {
            Detail::Access(e) => Some(e),
            _ => None,
        }
    }

    /// The connection manager's refusal, if this is one.
    pub fn cm_error(&self) -> Option<&CmError> {
        match &self.detail {
            Detail::Cm(e) => Some(e),
            _ => None,
        }
    }

    /// The peer's rejection, if the connection was rejected.
    pub fn rejection(&self) -> Option<&Rejection> {
        match &self.detail {
            Detail::Rejected(r) => Some(r),
            _ => None,
        }
    }

    /// The system error, if a system call failed.
    pub fn io_error(&self) -> Option<&io::Error> {
        match &self.detail {
            Detail::Io(e, _) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.op)?;
        match &self.detail {
            Detail::None => write!(f, "{}", self.kind),
            Detail::Text(t) => f.write_str(t),
            Detail::Post(e) => write!(f, "{e}"),
            Detail::Modify(e) => write!(f, "{e}"),
            Detail::Access(e) => write!(f, "{e}"),
            Detail::Cm(e) => write!(f, "{e}"),
            Detail::Io(e, None) => write!(f, "{e}"),
            Detail::Io(e, Some(what)) => write!(f, "{what}: {e}"),
            Detail::Rejected(r) => write!(f, "rejected by the peer (reason {})", r.reason),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.detail {
            Detail::Post(e) => Some(e),
            Detail::Modify(e) => Some(e),
            Detail::Access(e) => Some(e),
            Detail::Cm(e) => Some(e),
            Detail::Io(e, _) => Some(e.as_ref()),
            Detail::None | Detail::Text(_) | Detail::Rejected(_) => None,
        }
    }
}

/// Result of verbs calls.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::{Device, Result};
/// fn open_pd(addr: &str) -> Result<ndverbs_verbs::Pd> {
///     let dev = Device::open(addr.parse().unwrap())?;
///     dev.alloc_pd()
/// }
/// assert!(open_pd("127.93.30.1").is_ok());
/// ```
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors cross threads and tasks (requests complete on the engine's).
    #[test]
    fn errors_and_requests_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Error>();
        both::<crate::Pending<crate::ConnectInfo>>();
    }

    #[test]
    fn display_names_the_call_and_io_keeps_the_system_errno() {
        let e = Error::kind_only(ErrorKind::DeviceRemoved, "Device::alloc_pd");
        assert_eq!(e.to_string(), "Device::alloc_pd: the device was removed");
        assert_eq!(e.errno(), libc::ENODEV);
        let e = Error::io(
            "Device::open",
            io::Error::from_raw_os_error(libc::EADDRINUSE),
        );
        assert_eq!(
            (e.kind(), e.errno()),
            (ErrorKind::AddressInUse, libc::EADDRINUSE)
        );
        let e = Error::io(
            "Device::set_capture",
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!((e.kind(), e.errno()), (ErrorKind::Io, libc::ENOSPC));
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::rejected("Endpoint::connect", 28, b"busy".to_vec());
        assert_eq!(e.rejection().map(|r| r.reason), Some(28));
        assert_eq!(e.errno(), libc::ECONNREFUSED);
    }
}
