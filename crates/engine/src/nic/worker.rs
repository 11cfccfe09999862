//! Who runs the engine loop, and the engine's clock.
//!
//! With [`Progress::Thread`](crate::config::Progress::Thread) a worker
//! thread per NIC steps, then sleeps in `poll` on the link and a doorbell
//! until a packet, a queued post or the next deadline (a QP or CM timer, or
//! a packet the link holds back) — 100 ms at most, a second while nothing
//! on the NIC can need it before a packet, a post or a control call wakes
//! it (no timer, no postponed ACK: an unused device, or queue pairs
//! connected and quiet, cost one wake-up a second). With
//! [`Progress::Manual`](crate::config::Progress::Manual) there is no
//! thread: [`Nic::progress`] (called by polling a CQ in the layers above)
//! runs the same step inline, which is how latency gets close to a raw UDP
//! ping-pong on a 2-core machine, and [`Nic::progress_wait`] sleeps in the
//! same `poll` the worker would.
//!
//! **Busy-poll hand-off.** With an engine thread, an application that
//! busy-polls its CQ runs engine steps itself when the queue is empty
//! ([`Nic::poll_step`]). While it does (it polled within
//! [`BUSY_POLL_HANDOFF`]), the engine thread stops watching the link: it
//! sleeps on its doorbell and its deadlines only, so a packet is taken by
//! the polling thread instead of waking the engine thread, which would then
//! hold the engine while the poller spins (a context switch and a lock
//! hand-over per packet — the cost that kept `ndv bench` P2t at 4×
//! a UDP ping-pong). The thread checks again at least every
//! `BUSY_POLL_HANDOFF`, so a poller that stops without saying so delays a
//! packet by at most that; arming a CQ for a notification (the poller is
//! about to sleep) ends the hand-off at once ([`Nic::end_busy_poll`]).
//! The poller's steps behave as manual-progress steps: they stop receiving
//! at a completion and let a plain ACK wait for the answer to ride with;
//! an ACK left waiting when the poller stops goes when the engine thread
//! next wakes, within the hand-off (a thread asleep for longer is woken).
//!
//! **Spinning before sleeping.** A thread that waits for an answer of its
//! own polls the link for a while before it sleeps, so an answer that comes
//! within microseconds costs no wake-up: in manual progress
//! [`Nic::progress_wait_spinning`] (what verbs' request and completion
//! waits call), with an engine thread [`Nic::spin_before_sleep`] (steps
//! only when no other thread runs one; the engine thread keeps the link).
//! The window adapts and backs off where spinning does not pay
//! (`nic/spin.rs`); [`Nic::progress_wait`], for a thread that runs the
//! engine for others, and the engine thread itself never spin.
//!
//! Time is `CLOCK_MONOTONIC` in nanoseconds since the NIC opened, read once
//! per step and passed to the sans-IO state machines as an
//! [`Instant`](ndverbs_proto::time::Instant).

use super::core::Shared;
use super::spin::{preemptions, WaitOutcome};
use super::Nic;
use crate::config::Progress;
use crate::error::EngineError;
use crate::event::wait_events;
use ndverbs_proto::time::Instant;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

/// [`Nic::progress`] on the NIC's shared state (also for those that hold
/// it weakly, as a shared port's reconcile does).
pub(super) fn progress_shared(shared: &Shared) -> bool {
    step_shared(shared, false)
}

/// One step if no other thread runs one; `empty_poll`: run by a thread
/// whose CQ poll found nothing (it polls again soon).
fn step_shared(shared: &Shared, empty_poll: bool) -> bool {
    if shared.removed.load(Ordering::Acquire) {
        return false;
    }
    match shared.core.try_lock() {
        Ok(mut c) => {
            let _nic = shared.span.enter();
            let now = shared.now();
            c.empty_poll = empty_poll;
            c.step(shared, now);
            c.empty_poll = false;
            true
        }
        Err(_) => false,
    }
}

impl Nic {
    /// The engine's clock.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// Whether work items wait for the next step: posts that found the
    /// engine busy (see [`Nic::post_send`]), QP and CM requests. A post
    /// that went straight into the protocol leaves none.
    pub fn has_queued_work(&self) -> bool {
        !self.shared.work.is_empty()
    }

    /// Runs one step of the engine loop if no other thread is running it;
    /// returns true if it ran. In manual mode this is how work gets done.
    pub fn progress(&self) -> bool {
        progress_shared(&self.shared)
    }

    /// One step for a caller that found its completion queue empty, if no
    /// other thread runs the engine: in manual progress this is
    /// [`Nic::progress`]; with an engine thread it lets a busy-polling
    /// application take its packets itself instead of waiting for the
    /// sleeping thread's wake-up, and wakes that thread only if the step
    /// armed a timer it would serve too late (as a direct post does).
    pub fn poll_step(&self) -> bool {
        self.poll_step_as(true)
    }

    /// [`Nic::poll_step`] for a thread that polls a CQ it armed and will
    /// sleep on next: its step neither holds the link for it nor lets an
    /// ACK wait for an answer (nothing it will poll again soon).
    pub fn poll_step_before_sleep(&self) -> bool {
        self.poll_step_as(false)
    }

    fn poll_step_as(&self, spinning: bool) -> bool {
        if self.shared.mode == Progress::Manual {
            return step_shared(&self.shared, spinning);
        }
        if self.is_removed() {
            return false;
        }
        let now = self.now();
        if spinning {
            // (`max(1)`: 0 means nobody polls.)
            let before = self
                .shared
                .busy_poll_ns
                .swap(now.as_nanos().max(1), Ordering::Relaxed);
            // A poller that starts: an engine thread asleep on the link
            // wakes once, to sleep on its doorbell instead.
            if handoff_left(before, now.as_nanos()).is_none()
                && self.shared.sleeping.load(Ordering::Relaxed)
            {
                self.shared.doorbell.signal();
            }
        }
        let Ok(mut c) = self.shared.core.try_lock() else {
            return false;
        };
        let _nic = self.shared.span.enter();
        // A spinning caller's step runs as a manual-progress step: the
        // caller looks at its CQ next. An ACK it postpones leaves with the
        // caller's answer or its next poll; if no poll comes, the engine
        // thread sends it when it wakes, within the busy-poll hand-off (see
        // the module docs). A caller about to sleep leaves nothing waiting.
        c.empty_poll = spinning;
        c.step(&self.shared, now);
        c.empty_poll = false;
        if !spinning {
            c.flush_acks(&self.shared, now);
        }
        let wake = self.shared.worker_wake_ns.load(Ordering::Relaxed);
        let late_timer = c
            .next_deadline()
            .is_some_and(|d| wakes_too_late(wake, d.as_nanos(), now.as_nanos()));
        // A postponed ACK must not wait for a thread that sleeps long (it
        // went to sleep before this poller came).
        let handoff = BUSY_POLL_HANDOFF.as_nanos() as u64;
        let late_ack = !c.acks.is_empty() && wake > now.as_nanos().saturating_add(handoff);
        if late_timer || late_ack {
            drop(c);
            self.shared.doorbell.signal();
        }
        true
    }

    /// Before a thread-progress waiter sleeps on its own notification (a
    /// CQ's, a request's): runs engine steps when no other thread does
    /// ([`Nic::poll_step_before_sleep`]) until `ready` says its event came
    /// or the NIC's spin window passes (see `nic/spin.rs`). If the spin
    /// missed, the caller sleeps and reports the sleep with
    /// [`SpinReport::slept`]. In manual progress, or with spinning off, it
    /// looks once.
    pub fn spin_before_sleep(&self, mut ready: impl FnMut() -> bool) -> SpinReport {
        if ready() {
            return SpinReport {
                window: Duration::ZERO,
                caught: true,
                since: 0,
            };
        }
        let window = if self.shared.mode == Progress::Manual {
            Duration::ZERO
        } else {
            self.shared.spin.get()
        };
        // Not as a busy poller: the engine thread keeps the link (taking it
        // over would wake that thread twice per wait, and each wake-up lands
        // on a core a spinner holds).
        self.spin_for(
            window,
            || {
                self.poll_step_before_sleep();
            },
            ready,
        )
    }

    /// Spins up to `window`: runs `step`, then asks `ready`, until it says
    /// yes or the window passes; records a catch or a lost core (see
    /// `nic/spin.rs`). A report of a missed spin holds when the sleep after
    /// it began.
    fn spin_for(
        &self,
        window: Duration,
        mut step: impl FnMut(),
        mut ready: impl FnMut() -> bool,
    ) -> SpinReport {
        let mut report = SpinReport {
            window,
            caught: false,
            since: 0,
        };
        if !window.is_zero() {
            let preempted_before = preemptions();
            let end = monotonic_ns().saturating_add(window.as_nanos() as u64);
            loop {
                step();
                if ready() {
                    self.shared.spin.record(WaitOutcome::Caught);
                    report.caught = true;
                    return report;
                }
                if monotonic_ns() >= end {
                    break;
                }
                std::hint::spin_loop();
            }
            if preemptions() != preempted_before {
                // Its sleep says nothing more.
                self.shared.spin.record(WaitOutcome::Preempted);
                return report;
            }
        }
        report.since = monotonic_ns();
        report
    }

    /// Ends the busy-poll hand-off (see the module docs): the application
    /// is about to sleep until a completion notifies it, so the engine
    /// thread must watch the link again, now.
    pub fn end_busy_poll(&self) {
        if self.shared.busy_poll_ns.swap(0, Ordering::SeqCst) != 0
            && self.shared.sleeping.load(Ordering::SeqCst)
        {
            self.shared.doorbell.signal();
        }
    }

    /// Manual mode: blocks until a packet or post arrives, the next timer is
    /// due, or `timeout` passes — then runs one step.
    /// It sleeps at once: a thread that runs the engine for others (a helper
    /// thread, a pump) has no answer of its own to catch, and spinning
    /// there would only keep a core busy (and, receiving a stream, take
    /// packets in smaller batches: `ndv perf write_bw` over veth fell from
    /// 1.12x to 0.77x of TCP when its server's pump spun).
    pub fn progress_wait(&self, timeout: Duration) -> Result<(), EngineError> {
        self.wait_then_step(timeout, timeout, false)
    }

    /// [`Nic::progress_wait`] for a thread that waits for an answer of its
    /// own (a request's result, a completion): it polls the link for the
    /// NIC's adaptive spin window first (see `nic/spin.rs`), so an answer
    /// that comes within microseconds costs no wake-up.
    pub fn progress_wait_spinning(&self, timeout: Duration) -> Result<(), EngineError> {
        self.wait_then_step(timeout, timeout, true)
    }

    /// [`Nic::progress_wait`] for a helper thread that runs the engine for
    /// the application: when nothing on the NIC can need the engine before
    /// a packet arrives (no queue pair, no endpoint, no timer), it sleeps up
    /// to `idle` instead of `timeout`, and any thread that takes the engine
    /// to change that (creating a QP or an endpoint, say) wakes it, as does
    /// [`Nic::wake`]. An open but unused device then costs no periodic
    /// wake-ups.
    pub fn progress_wait_or_idle(
        &self,
        timeout: Duration,
        idle: Duration,
    ) -> Result<(), EngineError> {
        self.wait_then_step(timeout, idle, false)
    }

    fn wait_then_step(
        &self,
        timeout: Duration,
        idle: Duration,
        spinning: bool,
    ) -> Result<(), EngineError> {
        self.check()?;
        let rcvd = &self.shared.counters.rcvd_datagrams;
        let before = rcvd.load(Ordering::Relaxed);
        // Whether this call sleeps long (then it, and only it, clears the
        // mark it set).
        let mut long = false;
        let (deadline, delivered) = {
            let _nic = self.shared.span.enter();
            let mut c = self.lock_for_step();
            let now = self.now();
            let d0 = c.deliveries.count;
            c.step(&self.shared, now);
            // About to sleep: nothing may wait for a next step.
            c.flush_acks(&self.shared, now);
            if idle > timeout && c.is_idle() && self.shared.work.is_empty() {
                // Under the lock: whoever takes it next sees this (see
                // `Nic::core_lock`).
                self.shared.idle_sleep.store(true, Ordering::Relaxed);
                long = true;
            }
            (c.next_deadline(), c.deliveries.count != d0)
        };
        // The step just took packets or delivered completions or request
        // results (a phase that needed no packet, such as CompleteConnect):
        // return to the caller instead of sleeping on a link that is now
        // empty.
        let mut took = delivered || rcvd.load(Ordering::Relaxed) != before;
        let slept = if took || !self.shared.work.is_empty() {
            Ok(())
        } else {
            let timeout = if long { idle } else { timeout };
            let wait = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(self.now()).min(timeout)
            });
            // A long sleep has nothing to wait for but a new peer: no spin,
            // and nothing to learn about spinning.
            let spin = (spinning && !long).then(|| {
                let rcvd_moved = || rcvd.load(Ordering::Relaxed) != before;
                self.spin_for(
                    wait.min(self.shared.spin.get()),
                    || {
                        self.progress();
                    },
                    || rcvd_moved() || !self.shared.work.is_empty(),
                )
            });
            if spin.as_ref().is_some_and(SpinReport::caught) {
                took = true;
                Ok(())
            } else {
                let woken = self.shared.wait(Some(wait));
                if let Some(spin) = spin {
                    spin.slept(self, !matches!(woken, Ok(false)));
                }
                woken.map(drop)
            }
        };
        if long {
            self.shared.idle_sleep.store(false, Ordering::Relaxed);
        }
        slept?;
        if !took {
            self.progress();
        }
        Ok(())
    }

    /// Ends a [`Nic::progress_wait_or_idle`] asleep in another thread: it
    /// runs its step and returns (its caller looks at its own state again,
    /// a stop flag for instance).
    pub fn wake(&self) {
        self.shared.doorbell.signal();
    }
}

impl Shared {
    /// The engine's clock: nanoseconds since the NIC opened.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_ns().saturating_sub(self.epoch_ns))
    }

    /// Sleeps until the link or the doorbell is readable, or `timeout`
    /// passes; drains the doorbell and notes an error condition of the link
    /// (`POLLERR`: its error queue wants reading, or `poll` would report it
    /// again at once).
    /// Returns whether a descriptor woke it (false: the timeout did).
    fn wait(&self, timeout: Option<Duration>) -> std::io::Result<bool> {
        let ev = wait_events(&[self.link_fd, self.doorbell.fd()], timeout)?;
        if ev.first().is_some_and(|e| e & libc::POLLERR != 0) {
            self.link_error.store(true, Ordering::Relaxed);
        }
        self.doorbell.drain();
        Ok(ev.iter().any(|&e| e != 0))
    }

    /// Sleeps until the doorbell rings or `timeout` passes, leaving the link
    /// to a busy-polling application (see the module docs).
    fn wait_doorbell(&self, timeout: Duration) -> std::io::Result<()> {
        wait_events(&[self.doorbell.fd()], Some(timeout))?;
        self.doorbell.drain();
        Ok(())
    }

    /// How much longer the busy-poll hand-off lasts at `now` (engine
    /// nanoseconds); `None` if no application thread polls.
    fn busy_poll_left(&self, now: u64) -> Option<Duration> {
        // SeqCst: ordered with `sleeping`, as in `Nic::end_busy_poll`.
        handoff_left(self.busy_poll_ns.load(Ordering::SeqCst), now)
    }
}

/// How a thread-progress waiter's spin went ([`Nic::spin_before_sleep`]),
/// to be completed by how its sleep went.
#[derive(Debug)]
#[must_use = "a spin that missed is followed by a sleep to report"]
pub struct SpinReport {
    window: Duration,
    caught: bool,
    /// When the sleep began (engine clock source, nanoseconds); 0: nothing
    /// to report (the event came, or the spin lost its core).
    since: u64,
}

impl SpinReport {
    /// The event came while spinning (or had already come).
    pub fn caught(&self) -> bool {
        self.caught
    }

    /// Reports the sleep that followed a missed spin: `woken` by the event
    /// (false: by its timeout).
    pub fn slept(self, nic: &Nic, woken: bool) {
        if self.caught || self.since == 0 {
            return;
        }
        nic.shared.spin.record(WaitOutcome::Slept {
            spun: !self.window.is_zero(),
            slept: Duration::from_nanos(monotonic_ns().saturating_sub(self.since)),
            timed_out: !woken,
        });
    }
}

/// How long an engine thread may leave the link to an application thread
/// that last polled at `polled` (0: none), at `now` (engine nanoseconds).
fn handoff_left(polled: u64, now: u64) -> Option<Duration> {
    if polled == 0 {
        return None;
    }
    let since = now.saturating_sub(polled);
    let window = BUSY_POLL_HANDOFF.as_nanos() as u64;
    (since < window).then(|| Duration::from_nanos(window - since))
}

/// How long after an application thread's last poll of an empty CQ the
/// engine thread leaves the link to it (see the module docs): long enough
/// that a spinning poller (a poll every microsecond or so) keeps it, short
/// enough that a poller that stops without arming a CQ delays little.
pub(crate) const BUSY_POLL_HANDOFF: Duration = Duration::from_micros(200);

/// Whether an engine thread that wakes by itself at `wake` would serve a
/// timer due at `deadline` (armed at `now`) later than the timer's own
/// length (all in engine nanoseconds): then a post must wake it.
pub(super) fn wakes_too_late(wake: u64, deadline: u64, now: u64) -> bool {
    wake.saturating_sub(deadline) > deadline.saturating_sub(now)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock of `std::time::Instant`,
/// read without its `Duration` arithmetic: every step reads it).
pub(super) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// Longest sleep of an engine thread while the NIC has work of its own
/// coming (a timer, a postponed ACK, a shared port to keep): a lost
/// wake-up costs at most this.
const GUARD_SLEEP: Duration = Duration::from_millis(100);
/// Longest sleep of an engine thread while nothing on the NIC can need the
/// engine before a packet arrives, a post is made or a thread takes the
/// engine (`Core::is_quiet`: a device opened and not used yet, or queue
/// pairs connected and quiet). Each of those wakes it.
const QUIET_SLEEP: Duration = Duration::from_secs(1);

/// The worker thread: step, then sleep until a packet, a post or a deadline.
///
/// It holds the shared state only weakly between turns: when the
/// application drops its last handle it is told to stop and woken
/// (`AppHandles`), and as it ends the state (link, tables) is freed,
/// releasing UDP port 4791.
pub(super) fn worker(weak: std::sync::Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else { return };
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let (wait, quiet) = {
            let _nic = shared.span.enter();
            let mut c = shared.core.lock().unwrap_or_else(|e| e.into_inner());
            let now = shared.now();
            c.step(&shared, now);
            let quiet = c.is_quiet() && shared.work.is_empty();
            if quiet {
                // Under the lock: whoever takes it next sees this.
                shared.idle_sleep.store(true, Ordering::Relaxed);
            }
            let max = if quiet { QUIET_SLEEP } else { GUARD_SLEEP };
            let wait = c.next_deadline().map_or(max, |d| {
                Duration::from_nanos(d.as_nanos().saturating_sub(now.as_nanos())).min(max)
            });
            // Published while the lock is held: a post that takes the lock
            // later sees the wake-up this thread will sleep until.
            shared.worker_wake_ns.store(
                now.as_nanos().saturating_add(wait.as_nanos() as u64),
                Ordering::Relaxed,
            );
            (wait, quiet)
        };
        shared.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if shared.work.is_empty() && !shared.stop.load(Ordering::Acquire) {
            sleep(&shared, wait);
        }
        shared.sleeping.store(false, Ordering::SeqCst);
        if quiet {
            shared.idle_sleep.store(false, Ordering::Relaxed);
        }
    }
}

/// The engine thread's sleep: on the link and its doorbell up to `wait`,
/// or, while an application thread busy-polls, on the doorbell only.
fn sleep(shared: &Shared, wait: Duration) {
    let now_ns = shared.now().as_nanos();
    let _ = match shared.busy_poll_left(now_ns) {
        Some(left) => {
            let wait = wait.min(left);
            // The wake-up a poller's postponed ACK can count on.
            shared.worker_wake_ns.store(
                now_ns.saturating_add(wait.as_nanos() as u64),
                Ordering::Relaxed,
            );
            shared.wait_doorbell(wait)
        }
        None => shared.wait(Some(wait)).map(drop),
    };
}

#[cfg(test)]
mod tests {
    use super::{handoff_left, wakes_too_late, BUSY_POLL_HANDOFF};
    use std::time::Duration;

    #[test]
    fn the_link_is_left_to_a_poller_only_within_the_handoff_window() {
        let w = BUSY_POLL_HANDOFF.as_nanos() as u64;
        assert_eq!(handoff_left(0, 5 * w), None, "nobody polls");
        assert_eq!(handoff_left(1_000, 1_000), Some(BUSY_POLL_HANDOFF));
        assert_eq!(
            handoff_left(1_000, 1_000 + w / 2),
            Some(Duration::from_nanos(w - w / 2))
        );
        assert_eq!(handoff_left(1_000, 1_000 + w), None, "the window ended");
        // A poll stamped after the thread read its clock: the whole window.
        assert_eq!(handoff_left(2_000, 1_000), Some(BUSY_POLL_HANDOFF));
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_post_wakes_the_engine_thread_only_for_a_timer_it_would_serve_too_late() {
        // Asleep until 100 ms: a 67 ms ACK timeout armed at 0 would fire
        // 33 ms late, less than its length: no wake-up.
        assert!(!wakes_too_late(100 * MS, 67 * MS, 0));
        // A 4 ms timeout would fire 96 ms late: wake it.
        assert!(wakes_too_late(100 * MS, 4 * MS, 0));
        // Exactly one length late is still tolerated.
        assert!(!wakes_too_late(100 * MS, 50 * MS, 0));
        // A thread that wakes before the deadline anyway, or is awake (its
        // last wake-up in the past), needs nothing.
        assert!(!wakes_too_late(3 * MS, 4 * MS, 0));
        assert!(!wakes_too_late(0, 4 * MS, 2 * MS));
        // A timer already due: any lateness is too much.
        assert!(wakes_too_late(10 * MS, 5 * MS, 5 * MS));
    }
}
