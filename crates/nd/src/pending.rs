//! Overlapped requests in Rust: [`NdPending`], a future and a blocking wait.
//!
//! ND methods that can take time take an OVERLAPPED and return `ND_PENDING`;
//! the final status arrives later. Here such a method returns an
//! [`NdPending`] at once (or an error: the request was never queued), which
//! can be `.await`ed from any runtime or waited on with [`NdPending::wait`].

use crate::status::{NdError, NdStatus};
use ndverbs_verbs::{Error, Pending};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

trait Source<T>: Send {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, NdError>>;
    fn wait_timeout(&mut self, d: Duration) -> Option<Result<T, NdError>>;
    fn try_take(&mut self) -> Option<Result<T, NdError>>;
}

/// Turns the verbs-level result into the ND one.
type MapFn<U, T> = Box<dyn FnOnce(Result<U, Error>) -> Result<T, NdError> + Send>;

struct Mapped<U, T> {
    p: Pending<U>,
    f: Option<MapFn<U, T>>,
}

impl<U: Send + 'static, T> Mapped<U, T> {
    fn map(&mut self, u: Result<U, Error>) -> Result<T, NdError> {
        match self.f.take() {
            Some(f) => f(u),
            None => Err(NdError::new(
                NdStatus::INVALID_DEVICE_REQUEST,
                "result already taken",
            )),
        }
    }
}

impl<U: Send + 'static, T> Source<T> for Mapped<U, T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, NdError>> {
        match Pin::new(&mut self.p).poll(cx) {
            Poll::Ready(u) => Poll::Ready(self.map(u)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn wait_timeout(&mut self, d: Duration) -> Option<Result<T, NdError>> {
        let u = self.p.wait_timeout(d)?;
        Some(self.map(u))
    }

    fn try_take(&mut self) -> Option<Result<T, NdError>> {
        let u = self.p.try_take()?;
        Some(self.map(u))
    }
}

struct Ready<T>(Option<Result<T, NdError>>);

impl<T: Send> Source<T> for Ready<T> {
    fn poll(&mut self, _: &mut Context<'_>) -> Poll<Result<T, NdError>> {
        Poll::Ready(self.take())
    }

    fn wait_timeout(&mut self, _: Duration) -> Option<Result<T, NdError>> {
        Some(self.take())
    }

    fn try_take(&mut self) -> Option<Result<T, NdError>> {
        Some(self.take())
    }
}

impl<T> Ready<T> {
    fn take(&mut self) -> Result<T, NdError> {
        self.0.take().unwrap_or_else(|| {
            Err(NdError::new(
                NdStatus::INVALID_DEVICE_REQUEST,
                "result already taken",
            ))
        })
    }
}

/// A pending ND request.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// use std::time::Duration;
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     struct Unpark(std::thread::Thread);
/// #     impl std::task::Wake for Unpark {
/// #         fn wake(self: std::sync::Arc<Self>) {
/// #             self.0.unpark()
/// #         }
/// #     }
/// #     let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop {
/// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
/// #             return v;
/// #         }
/// #         std::thread::park();
/// #     }
/// # }
/// let adapter = Provider.open_adapter("127.91.14.1".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(4)?;
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(1, 1))?;
/// // A Notify on an empty queue pends: look without blocking, or for a while …
/// let mut notify = cq.notify(NotifyType::Any);
/// assert!(notify.try_take().is_none());
/// assert!(notify.wait_timeout(Duration::from_millis(10)).is_none());
/// // … or block until it completes.
/// qp.receive(1, &[])?;
/// qp.flush()?;
/// notify.wait()?;
/// // Every NdPending is also a future, for any async runtime (here a
/// // ten-line block_on).
/// let mr = adapter.create_memory_region()?;
/// block_on(mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE))?;
/// assert_eq!(mr.len(), 4096);
/// # Ok::<(), NdError>(())
/// ```
pub struct NdPending<T> {
    src: Box<dyn Source<T>>,
}

impl<T> std::fmt::Debug for NdPending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NdPending")
    }
}

impl<T: Send + 'static> NdPending<T> {
    pub(crate) fn map<U: Send + 'static>(
        p: Pending<U>,
        f: impl FnOnce(Result<U, Error>) -> Result<T, NdError> + Send + 'static,
    ) -> Self {
        NdPending {
            src: Box::new(Mapped {
                p,
                f: Some(Box::new(f)),
            }),
        }
    }

    pub(crate) fn ready(r: Result<T, NdError>) -> Self {
        NdPending {
            src: Box::new(Ready(Some(r))),
        }
    }

    /// Blocks until the request completes.
    pub fn wait(mut self) -> Result<T, NdError> {
        loop {
            if let Some(r) = self.src.wait_timeout(Duration::from_secs(3600)) {
                return r;
            }
        }
    }

    /// Blocks up to `d`; `None` if still pending (`GetOverlappedResult` without wait).
    pub fn wait_timeout(&mut self, d: Duration) -> Option<Result<T, NdError>> {
        self.src.wait_timeout(d)
    }

    /// The result if the request already completed.
    pub fn try_take(&mut self) -> Option<Result<T, NdError>> {
        self.src.try_take()
    }
}

impl<T> Future for NdPending<T> {
    type Output = Result<T, NdError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.src.poll(cx)
    }
}
