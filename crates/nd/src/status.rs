//! ND status codes: HRESULTs whose values are the NTSTATUS of the same name.
//!
//! The top two bits are the severity: `00` success, `10` warning, `11` error.
//! `FAILED()` is "bit 31 set", so `ND_TIMEOUT` and `ND_PENDING` are *not*
//! failures while warnings such as `ND_BUFFER_OVERFLOW` are. ndverbs returns
//! every status other than `ND_SUCCESS` as an [`NdError`]; ask
//! [`NdStatus::is_failure`] for ND's classification (a Connect that times out
//! returns `ND_TIMEOUT`, success class: retry it on the same connector).

use std::fmt;

/// An ND status code.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// // ND's classes: success, warning (a failure), error (a failure).
/// assert!(!NdStatus::TIMEOUT.is_failure()); // e.g. a Connect timed out: retry it
/// assert!(NdStatus::BUFFER_OVERFLOW.is_failure() && !NdStatus::BUFFER_OVERFLOW.is_error());
/// assert!(NdStatus::CANCELED.is_error());
/// // The numbers are Windows' NTSTATUS values; names print with them.
/// assert_eq!(NdStatus(0xC000_0120), NdStatus::CANCELED);
/// assert_eq!(NdStatus::CANCELED.name(), Some("CANCELED"));
/// assert_eq!(NdStatus::CANCELED.to_string(), "ND_CANCELED (0xc0000120)");
/// // Errors of calls carry one; match on it.
/// let adapter = Provider.open_adapter("127.91.15.1".parse().unwrap())?;
/// match adapter.create_completion_queue(0) {
///     Err(e) if e.status == NdStatus::INVALID_PARAMETER => {}
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), NdError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NdStatus(pub u32);

macro_rules! statuses {
    ($($name:ident = $v:literal),* $(,)?) => {
        impl NdStatus {
            $(
                #[allow(missing_docs)]
                pub const $name: NdStatus = NdStatus($v);
            )*

            /// The symbolic name, if this is a known status.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    SUCCESS = 0x0000_0000,
    TIMEOUT = 0x0000_0102,
    PENDING = 0x0000_0103,
    BUFFER_OVERFLOW = 0x8000_0005,
    DEVICE_BUSY = 0x8000_0011,
    NO_MORE_ENTRIES = 0x8000_001A,
    UNSUCCESSFUL = 0xC000_0001,
    ACCESS_VIOLATION = 0xC000_0005,
    INVALID_HANDLE = 0xC000_0008,
    INVALID_PARAMETER = 0xC000_000D,
    INVALID_DEVICE_REQUEST = 0xC000_0010,
    NO_MEMORY = 0xC000_0017,
    INVALID_PARAMETER_MIX = 0xC000_0030,
    DATA_OVERRUN = 0xC000_003C,
    DATA_ERROR = 0xC000_003E,
    SHARING_VIOLATION = 0xC000_0043,
    INSUFFICIENT_RESOURCES = 0xC000_009A,
    DEVICE_NOT_READY = 0xC000_00A3,
    IO_TIMEOUT = 0xC000_00B5,
    NOT_SUPPORTED = 0xC000_00BB,
    BAD_NETWORK_NAME = 0xC000_00CC,
    INTERNAL_ERROR = 0xC000_00E5,
    INVALID_PARAMETER_1 = 0xC000_00EF,
    INVALID_PARAMETER_2 = 0xC000_00F0,
    INVALID_PARAMETER_3 = 0xC000_00F1,
    INVALID_PARAMETER_4 = 0xC000_00F2,
    INVALID_PARAMETER_5 = 0xC000_00F3,
    INVALID_PARAMETER_6 = 0xC000_00F4,
    INVALID_PARAMETER_7 = 0xC000_00F5,
    INVALID_PARAMETER_8 = 0xC000_00F6,
    INVALID_PARAMETER_9 = 0xC000_00F7,
    INVALID_PARAMETER_10 = 0xC000_00F8,
    CANCELED = 0xC000_0120,
    REMOTE_ERROR = 0xC000_013D,
    INVALID_ADDRESS = 0xC000_0141,
    INVALID_DEVICE_STATE = 0xC000_0184,
    INVALID_BUFFER_SIZE = 0xC000_0206,
    TOO_MANY_ADDRESSES = 0xC000_0209,
    ADDRESS_ALREADY_EXISTS = 0xC000_020A,
    CONNECTION_DISCONNECTED = 0xC000_020C,
    CONNECTION_REFUSED = 0xC000_0236,
    ADDRESS_ALREADY_ASSOCIATED = 0xC000_0238,
    CONNECTION_INVALID = 0xC000_023A,
    CONNECTION_ACTIVE = 0xC000_023B,
    NETWORK_UNREACHABLE = 0xC000_023C,
    HOST_UNREACHABLE = 0xC000_023D,
    CONNECTION_ABORTED = 0xC000_0241,
    DEVICE_REMOVED = 0xC000_02B6,
}

impl NdStatus {
    /// `FAILED()`: bit 31 set (warnings and errors).
    pub fn is_failure(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }

    /// Severity "error" (top bits `11`).
    pub fn is_error(self) -> bool {
        self.0 >> 30 == 3
    }
}

impl fmt::Debug for NdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "ND_{n} ({:#010x})", self.0),
            None => write!(f, "{:#010x}", self.0),
        }
    }
}

impl fmt::Display for NdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A call or request that ended with a status other than `ND_SUCCESS`.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.16.1".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(4)?;
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(1, 1).with_inline(64))?;
/// // A failed call returns an NdError: nothing was queued.
/// let err: NdError = qp.send_inline(1, b"x", OpFlags::empty()).unwrap_err();
/// assert_eq!(err.status, NdStatus::CONNECTION_INVALID);
/// assert!(err.to_string().starts_with("ND_CONNECTION_INVALID (0xc000023a): "));
/// // Your own functions can speak ND too.
/// fn check_len(len: usize) -> NdResult<usize> {
///     if len == 0 {
///         return Err(NdError::new(NdStatus::INVALID_BUFFER_SIZE, "empty buffer"));
///     }
///     Ok(len)
/// }
/// assert_eq!(check_len(0).unwrap_err().status, NdStatus::INVALID_BUFFER_SIZE);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct NdError {
    /// The ND status.
    pub status: NdStatus,
    /// What happened, for humans.
    pub detail: String,
    /// For `ND_BUFFER_OVERFLOW` of a caller's buffer: the size it needs.
    required_size: Option<usize>,
}

impl NdError {
    /// An error with `status` and an explanation.
    pub fn new(status: NdStatus, detail: impl Into<String>) -> Self {
        NdError {
            status,
            detail: detail.into(),
            required_size: None,
        }
    }

    /// `ND_BUFFER_OVERFLOW` for a caller's buffer that needed `required`
    /// bytes: ND's size protocol, where the call returns the size it needs
    /// through its length argument ([`NdError::required_size`] here).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// // A call of yours with a caller-supplied buffer, the ND way.
    /// fn name_into(buf: &mut [u8]) -> NdResult<usize> {
    ///     let name = b"ndverbs";
    ///     match buf.get_mut(..name.len()) {
    ///         Some(out) => {
    ///             out.copy_from_slice(name);
    ///             Ok(name.len())
    ///         }
    ///         None => Err(NdError::buffer_overflow(name.len(), "name")),
    ///     }
    /// }
    /// // Ask with no room to learn the size, then again with room.
    /// let err = name_into(&mut []).unwrap_err();
    /// assert_eq!((err.status, err.required_size()), (NdStatus::BUFFER_OVERFLOW, Some(7)));
    /// let mut buf = vec![0; err.required_size().unwrap()];
    /// assert_eq!(name_into(&mut buf)?, 7);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn buffer_overflow(required: usize, detail: impl Into<String>) -> Self {
        NdError {
            required_size: Some(required),
            ..NdError::new(NdStatus::BUFFER_OVERFLOW, detail)
        }
    }

    /// The size a caller's buffer needs, for an `ND_BUFFER_OVERFLOW` of the
    /// size protocol ([`NdError::buffer_overflow`]); `None` otherwise.
    pub fn required_size(&self) -> Option<usize> {
        self.required_size
    }
}

/// ND's size protocol for a caller-supplied buffer: copies `src` to `dst`
/// and returns its length if it fits; otherwise copies what fits and fails
/// `ND_BUFFER_OVERFLOW` with the size needed (`GetPrivateData`).
pub(crate) fn copy_sized(src: &[u8], dst: &mut [u8]) -> NdResult<usize> {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    if n < src.len() {
        return Err(NdError::buffer_overflow(
            src.len(),
            format!("{} bytes needed, {} given", src.len(), dst.len()),
        ));
    }
    Ok(n)
}

/// Result of ND calls.
///
/// # Example
///
/// ```
/// use ndverbs_nd::{NdError, NdResult, NdStatus};
/// fn check_len(len: usize) -> NdResult<usize> {
///     if len == 0 {
///         return Err(NdError::new(NdStatus::INVALID_PARAMETER, "empty buffer"));
///     }
///     Ok(len)
/// }
/// assert_eq!(check_len(0).unwrap_err().status, NdStatus::INVALID_PARAMETER);
/// assert_eq!(check_len(4).unwrap(), 4);
/// ```
pub type NdResult<T> = Result<T, NdError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(!NdStatus::TIMEOUT.is_failure());
        assert!(!NdStatus::PENDING.is_failure());
        assert!(NdStatus::BUFFER_OVERFLOW.is_failure() && !NdStatus::BUFFER_OVERFLOW.is_error());
        assert!(NdStatus::DEVICE_REMOVED.is_error());
        assert_eq!(
            format!("{}", NdStatus::CANCELED),
            "ND_CANCELED (0xc0000120)"
        );
        assert_eq!(NdStatus(0x1234).name(), None);
    }

    #[test]
    fn size_protocol_copies_what_fits_and_names_the_size() {
        let mut small = [0u8; 3];
        let e = copy_sized(b"hello", &mut small).unwrap_err();
        assert_eq!(
            (e.status, e.required_size()),
            (NdStatus::BUFFER_OVERFLOW, Some(5))
        );
        assert_eq!(&small, b"hel");
        let mut room = [0u8; 8];
        assert_eq!(copy_sized(b"hello", &mut room), Ok(5));
        assert_eq!(&room[..5], b"hello");
        assert_eq!(copy_sized(b"", &mut []), Ok(0));
        assert_eq!(NdError::new(NdStatus::CANCELED, "x").required_size(), None);
    }
}
