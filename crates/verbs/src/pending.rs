//! Requests that complete later: [`Pending`], a future and a blocking wait.
//!
//! Connection requests (connect, accept, disconnect, waiting for a request
//! or a disconnect) and completion-queue notifications take time; their
//! calls return a [`Pending`] at once (or an [`Error`] if the request was
//! never made). It ends exactly once, with `Ok` or an [`Error`], and can be
//! `.await`ed from any runtime (it keeps a `Waker`, nothing
//! runtime-specific) or waited for by blocking.
//!
//! **Manual progress.** On a device opened with [`Progress::Manual`] no
//! thread runs the engine unless the application does, so waiting runs it:
//! [`Pending::wait`] and [`Pending::wait_timeout`] loop on
//! [`Device::progress_wait`](crate::Device::progress_wait) until the result
//! is there; [`Pending::try_take`] runs one engine step, without blocking,
//! before it looks; polling the future runs one step and, while the request
//! is still pending, asks to be polled again at once (the task stays
//! runnable, as a busy-polling loop would: manual progress trades the idle
//! CPU for latency). Other threads may drive the same device meanwhile; a
//! waiter looks at its result at least every 10 ms.

use crate::config::Progress;
use crate::engine::{Nic, SpinReport};
use crate::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a waiter on a manual-progress device sleeps in the engine at
/// most before looking at its result again (another thread driving the
/// device may have completed it).
const MANUAL_SLICE: Duration = Duration::from_millis(10);

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
///
/// // On a manual-progress device waiting runs the engine: no other thread
/// // needs to.
/// let cfg = DeviceConfig { progress: Progress::Manual, ..DeviceConfig::default() };
/// let manual = Device::open_with("127.92.21.2".parse().unwrap(), &cfg)?;
/// let (pd, cq) = (manual.alloc_pd()?, manual.create_cq(4)?);
/// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
/// qp.to_init(Access::LOCAL_WRITE)?;
/// let (server, client) = (Endpoint::new(&dev)?, Endpoint::new(&manual)?);
/// server.listen(7001, 1)?;
/// let ep = Endpoint::new(&dev)?;
/// let request = server.get_request(&ep)?;
/// let args = ConnectArgs {
///     remote: dev.query().addr,
///     remote_port: 7001,
///     local_port: 40000,
///     responder_resources: 0,
///     initiator_depth: 0,
///     retry_count: 6,
///     rnr_retry_count: 6,
///     path_mtu: PathMtu::Mtu1024,
///     private_data: vec![],
/// };
/// let rep = client.connect(&qp, args)?;
/// // The REQ leaves when the manual device runs: waiting on the REP runs it.
/// assert!(rep.wait_timeout(Duration::from_millis(50)).is_none());
/// request.wait()?;
/// ep.reject(b"")?;
/// assert_eq!(rep.wait().unwrap_err().kind(), ErrorKind::Rejected);
/// # Ok::<(), Error>(())
/// ```
pub struct Pending<T> {
    src: Box<dyn Source<T>>,
    /// The manual-progress device whose engine a waiter runs.
    driver: Option<Nic>,
    /// The thread-progress device a blocking waiter polls for a while
    /// before it sleeps (`Nic::spin_before_sleep`).
    spinner: Option<Nic>,
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
        Pending {
            src,
            driver: None,
            spinner: None,
        }
    }

    /// The same request, waited for by running `nic`'s engine if `nic` is
    /// in manual progress, and by polling `nic` for a while before sleeping
    /// if it has an engine thread.
    pub(crate) fn driven_by(mut self, nic: &Nic) -> Self {
        if nic.progress_mode() == Progress::Manual {
            self.driver = Some(nic.clone());
        } else {
            self.spinner = Some(nic.clone());
        }
        self
    }

    /// The same request, waited for without running the engine: polling
    /// the future only registers its waker (woken when the result
    /// arrives), and `wait`/`try_take` only look. For a caller that waits
    /// for many requests at once on a manual-progress device another
    /// thread runs (a plain poll of the future would run a step and ask to
    /// be polled again at once, which spins). On a thread-progress device
    /// it changes nothing.
    pub fn without_progress(mut self) -> Self {
        self.driver = None;
        self
    }

    /// Thread progress: polls for the NIC's spin window before a sleep;
    /// the result if it came, and the report the sleep completes.
    fn spin(&self, nic: &Nic) -> (Option<Result<T>>, SpinReport) {
        let spin = nic.spin_before_sleep(|| self.src.is_ready());
        let r = if spin.caught() {
            self.src.try_take()
        } else {
            None
        };
        (r, spin)
    }

    /// True once the result arrived (and was not yet taken).
    pub fn is_ready(&self) -> bool {
        self.src.is_ready()
    }

    /// Takes the result if it arrived, without blocking (in manual progress
    /// after one engine step, as polling a CQ does).
    pub fn try_take(&self) -> Option<Result<T>> {
        if let Some(nic) = &self.driver {
            nic.progress();
        }
        self.src.try_take()
    }

    /// Blocks up to `timeout`; `None` if the result did not arrive in time
    /// (the request stays pending).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<T>> {
        let Some(nic) = &self.driver else {
            let Some(nic) = &self.spinner else {
                return self.src.wait_timeout(timeout);
            };
            let (r, spin) = self.spin(nic);
            if r.is_some() {
                return r;
            }
            let r = self.src.wait_timeout(timeout);
            nic.slept(spin, r.is_some());
            return r;
        };
        let t0 = Instant::now();
        loop {
            if let Some(r) = self.src.try_take() {
                return Some(r);
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return None;
            }
            if nic
                .progress_wait_spinning(left.min(MANUAL_SLICE), "Pending::wait")
                .is_err()
            {
                // Removed: the removal ended every request, this one too.
                return self.src.wait_timeout(left);
            }
        }
    }

    /// Blocks until the result arrives.
    pub fn wait(self) -> Result<T> {
        if self.driver.is_none() {
            let Some(nic) = self.spinner.clone() else {
                return self.src.wait();
            };
            let (r, spin) = self.spin(&nic);
            if let Some(r) = r {
                return r;
            }
            let r = self.src.wait();
            nic.slept(spin, true);
            return r;
        }
        loop {
            if let Some(r) = self.wait_timeout(Duration::from_secs(3600)) {
                return r;
            }
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = std::result::Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(nic) = &self.driver {
            nic.progress();
        }
        let r = self.src.poll(cx);
        if r.is_pending() && self.driver.is_some() {
            // Nobody else runs the engine: be polled again to run it.
            cx.waker().wake_by_ref();
        }
        r
    }
}
