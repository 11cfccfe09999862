//! Pending requests: one value, delivered once, awaited by a future or a
//! blocking call.
//!
//! Every engine operation that can take time (connect, accept, disconnect,
//! waiting for a disconnect or a connection request) returns a [`Pending`].
//! The engine keeps the matching [`Completion`] and fills it exactly once —
//! dropping an unfilled `Completion` is a bug the type makes loud: it fills the
//! pending request with the fallback value given to [`pending`]. The
//! application can `.await` the `Pending` from any async runtime (it stores a
//! `Waker`, nothing runtime-specific), or block on [`Pending::wait`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

struct Slot<T> {
    value: Option<T>,
    taken: bool,
    waker: Option<Waker>,
}

struct Inner<T> {
    slot: Mutex<Slot<T>>,
    cv: Condvar,
}

/// The application's side of a pending request.
///
/// # Example
///
/// ```
/// use ndverbs_engine::pending::{pending, ready, Pending};
/// use std::time::Duration;
/// // The engine keeps the `Completion` and fills it from another thread.
/// let (p, done) = pending::<Result<u32, &str>>(|| Err("dropped"));
/// std::thread::spawn(move || done.complete(Ok(42)));
/// assert_eq!(p.wait_timeout(Duration::from_secs(5)), Some(Ok(42)));
/// // Already known results come ready; `Pending` is also a `Future`.
/// let r: Pending<u8> = ready(1);
/// assert_eq!(r.try_take(), Some(1));
/// ```
pub struct Pending<T> {
    inner: Arc<Inner<T>>,
}

/// The engine's side: fills the request exactly once.
///
/// # Example
///
/// ```
/// use ndverbs_engine::pending::pending;
/// let (p, done) = pending::<Result<(), &str>>(|| Err("device removed"));
/// // Dropped without `complete`: the request still ends, with the fallback.
/// drop(done);
/// assert!(p.is_done());
/// assert_eq!(p.wait(), Err("device removed"));
/// ```
pub struct Completion<T> {
    inner: Option<Arc<Inner<T>>>,
    fallback: Option<fn() -> T>,
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("done", &self.is_done())
            .finish()
    }
}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").finish()
    }
}

/// A new pending request and the handle that completes it. `fallback` is the
/// value the request gets if the completion is dropped unfilled.
pub fn pending<T>(fallback: fn() -> T) -> (Pending<T>, Completion<T>) {
    let inner = Arc::new(Inner {
        slot: Mutex::new(Slot {
            value: None,
            taken: false,
            waker: None,
        }),
        cv: Condvar::new(),
    });
    (
        Pending {
            inner: inner.clone(),
        },
        Completion {
            inner: Some(inner),
            fallback: Some(fallback),
        },
    )
}

/// A request that is already complete.
pub fn ready<T>(v: T) -> Pending<T> {
    let (p, c) = pending(|| unreachable!("completed at creation"));
    c.complete(v);
    p
}

impl<T> Completion<T> {
    /// Delivers the result (wakes the future or the blocked thread).
    pub fn complete(mut self, v: T) {
        self.fill(v);
    }

    fn fill(&mut self, v: T) {
        if let Some(inner) = self.inner.take() {
            let waker = {
                let mut s = inner.slot.lock().unwrap_or_else(|e| e.into_inner());
                s.value = Some(v);
                s.waker.take()
            };
            inner.cv.notify_all();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        if self.inner.is_some() {
            if let Some(f) = self.fallback.take() {
                self.fill(f());
            }
        }
    }
}

impl<T> Pending<T> {
    /// True once the result arrived (and was not yet taken).
    pub fn is_done(&self) -> bool {
        self.inner
            .slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .value
            .is_some()
    }

    /// Takes the result if it arrived.
    pub fn try_take(&self) -> Option<T> {
        let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        let v = s.value.take();
        if v.is_some() {
            s.taken = true;
        }
        v
    }

    /// Blocks until the result arrives.
    pub fn wait(self) -> T {
        let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = s.value.take() {
                s.taken = true;
                return v;
            }
            s = self.inner.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks up to `timeout`; `None` if the result did not arrive in time
    /// (the request stays pending).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = s.value.take() {
                s.taken = true;
                return Some(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            s = self
                .inner
                .cv
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = s.value.take() {
            s.taken = true;
            return Poll::Ready(v);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_and_dropped_completions() {
        let (p, c) = pending::<u32>(|| 99);
        std::thread::spawn(move || c.complete(7));
        assert_eq!(p.wait(), 7);
        let (p, c) = pending::<u32>(|| 99);
        drop(c);
        assert_eq!(p.try_take(), Some(99));
        let (p, _c) = pending::<u32>(|| 0);
        assert_eq!(p.wait_timeout(Duration::from_millis(5)), None);
        assert_eq!(ready(5).wait(), 5);
    }

    #[test]
    fn as_a_future() {
        use std::task::Wake;
        struct Flag(std::sync::atomic::AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut p, c) = pending::<&str>(|| "dropped");
        assert!(Pin::new(&mut p).poll(&mut cx).is_pending());
        c.complete("done");
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(Pin::new(&mut p).poll(&mut cx), Poll::Ready("done"));
    }
}
