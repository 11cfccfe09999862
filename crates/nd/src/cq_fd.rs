//! The completion queue's file descriptor, for event loops: epoll, mio, or
//! tokio's `AsyncFd` (see `examples/tokio_echo.rs`).
//!
//! The descriptor (an eventfd) becomes readable when a completion of the
//! armed kind arrives after [`CompletionQueue::arm`]; one arm, one
//! notification. Completions already waiting when the queue is armed do not
//! fire it, so the loop is: take results; if there were none, arm, take
//! results again (one may have slipped in before the arm), and only then wait
//! for the descriptor; after it fired, [`CompletionQueue::ack_events`] and
//! start over.

use crate::cq::{CompletionQueue, NotifyType};
use ndverbs_verbs::NotifyOn;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

impl CompletionQueue {
    /// Arms the file descriptor: the next completion of kind `t` (any, a
    /// solicited one, or an error) makes it readable, once.
    pub fn arm(&self, t: NotifyType) {
        self.inner.cq.req_notify(match t {
            NotifyType::Any => NotifyOn::Any,
            NotifyType::Solicited => NotifyOn::Solicited,
            NotifyType::Errors => NotifyOn::Errors,
        });
    }

    /// Consumes the notifications that made the file descriptor readable
    /// (it is not readable afterwards); returns how many there were.
    pub fn ack_events(&self) -> u64 {
        self.inner.cq.ack_events()
    }
}

/// The notification eventfd; valid while any clone of the queue lives.
impl AsRawFd for CompletionQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.cq.fd()
    }
}

impl AsFd for CompletionQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the eventfd belongs to the engine's completion queue, which
        // `self.inner` keeps alive (and open) for at least as long as `self`.
        unsafe { BorrowedFd::borrow_raw(self.inner.cq.fd()) }
    }
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn readable(fd: i32, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    /// Armed, the descriptor fires on the next completion and once only;
    /// acknowledged, it is quiet again.
    #[test]
    fn fd_fires_once_per_arm() {
        let ad = Provider
            .open_adapter("127.89.40.1".parse().unwrap())
            .unwrap();
        let cq = ad.create_completion_queue(8).unwrap();
        let qp = ad
            .create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))
            .unwrap();
        let mr = ad.create_memory_region().unwrap();
        mr.register(64, MrFlags::ALLOW_LOCAL_WRITE).wait().unwrap();
        let fd = cq.as_raw_fd();
        assert!(!readable(fd, 0));
        cq.arm(NotifyType::Any);
        qp.receive(1, &[NdSge::new(mr.address(), 64, mr.local_token())])
            .unwrap();
        qp.receive(2, &[NdSge::new(mr.address(), 64, mr.local_token())])
            .unwrap();
        // Flushing completes both receives: one notification.
        qp.flush().unwrap();
        assert!(readable(fd, 5_000), "armed CQ fd did not fire");
        assert_eq!(cq.ack_events(), 1);
        assert!(!readable(fd, 50));
        let mut r = [NdResultEntry {
            status: NdStatus::SUCCESS,
            bytes_transferred: 0,
            queue_pair_context: 0,
            request_context: 0,
            request_type: RequestType::Send,
        }; 4];
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while n < 2 && t0.elapsed() < Duration::from_secs(5) {
            n += cq.get_results(&mut r[n..]);
        }
        assert_eq!(n, 2);
        assert!(r[..2].iter().all(|e| e.status == NdStatus::CANCELED));
    }
}
