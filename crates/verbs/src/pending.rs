//! Requests that complete later: [`Pending`], a future and a blocking wait.
//!
//! Connection requests (connect, accept, disconnect, waiting for a request
//! or a disconnect) and completion-queue notifications take time; their
//! calls return a [`Pending`] at once (or an [`Error`] if the request was
//! never made). It ends exactly once, with `Ok` or an [`Error`], and can be
//! `.await`ed from any runtime (it keeps a `Waker`, nothing
//! runtime-specific) or waited for by blocking.

use crate::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Where a pending request's result comes from (the engine's request,
/// its outcome translated into verbs terms).
pub(crate) trait Source<T>: Send + Sync {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T>>;
    fn try_take(&self) -> Option<Result<T>>;
    fn wait_timeout(&self, timeout: Duration) -> Option<Result<T>>;
    fn wait(self: Box<Self>) -> Result<T>;
    fn is_ready(&self) -> bool;
}

/// A request that completes later, once, with `Ok(T)` or an [`Error`].
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
/// let dev = Device::open("127.92.21.1".parse().unwrap())?;
/// let (listener, ep) = (Endpoint::new(&dev)?, Endpoint::new(&dev)?);
/// listener.listen(7000, 1)?;
/// let request: Pending<RequestInfo> = listener.get_request(&ep)?;
/// // Nobody connects: it stays pending (`.await` works too) …
/// assert!(!request.is_ready());
/// assert!(request.wait_timeout(Duration::from_millis(10)).is_none());
/// // … until cancelled.
/// listener.cancel()?;
/// assert_eq!(request.wait().unwrap_err().kind(), ErrorKind::Canceled);
/// # Ok::<(), Error>(())
/// ```
pub struct Pending<T> {
    src: Box<dyn Source<T>>,
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ready", &self.src.is_ready())
            .finish()
    }
}

impl<T> Pending<T> {
    pub(crate) fn new(src: Box<dyn Source<T>>) -> Self {
        Pending { src }
    }

    /// True once the result arrived (and was not yet taken).
    pub fn is_ready(&self) -> bool {
        self.src.is_ready()
    }

    /// Takes the result if it arrived, without blocking.
    pub fn try_take(&self) -> Option<Result<T>> {
        self.src.try_take()
    }

    /// Blocks up to `timeout`; `None` if the result did not arrive in time
    /// (the request stays pending).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<T>> {
        self.src.wait_timeout(timeout)
    }

    /// Blocks until the result arrives.
    pub fn wait(self) -> Result<T> {
        self.src.wait()
    }
}

impl<T> Future for Pending<T> {
    type Output = std::result::Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.src.poll(cx)
    }
}
