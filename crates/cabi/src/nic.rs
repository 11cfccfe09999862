//! One engine per local address per process, shared by every context, and
//! who runs it.
//!
//! A device (`ndvN`) is a local address, and its engine owns UDP port 4791
//! there, so a process opens it once: every `ibv_open_device` of the same
//! device, and later every rdma_cm id on it, shares one [`Nic`]. It is
//! opened on first need — the first PD or CQ — not by `ibv_open_device`,
//! so listing and querying devices (`ibv_devinfo`) binds nothing and works
//! next to the process that owns the address. It closes when the last
//! context and the last object that uses it are gone.
//!
//! # Progress
//!
//! By default (`NDV_PROGRESS` unset or `adaptive`) the engine runs in verbs'
//! manual progress mode: an application thread that polls a CQ runs the
//! engine itself when the CQ is empty, the way `ndv perf` measures, so a
//! busy-polling program pays no thread hand-off per packet. Programs also
//! block (in `ibv_get_cq_event`, or in a TCP exchange while the peer's
//! packets need answers) or spin on their own memory between polls
//! (`ib_write_lat` waits for the peer's WRITE to land), so a helper thread
//! per NIC — the *pump* — runs the engine whenever the application is not
//! polling without pause: it sleeps in the engine's own wait (socket
//! readable, post, timer) and runs it, and only naps ([`NAP`] at a time)
//! while polls and posts keep coming with no gap longer than [`GAP`] between
//! one call's return and the next call (seen at its next look: a program that
//! was preempted once is not given a competing thread at once; the time a
//! gap's thread spent runnable but not running is not counted, see
//! `Activity::after_gap`). Arming a CQ
//! for an event and a thread about to block on a completion channel wake it
//! at once. While the device has no QP, no rdma_cm id and no timer (a
//! device listed and opened but not used: libfabric opens every address it
//! finds), the pump sleeps until a packet arrives or a thread takes the
//! engine to create one, not [`ACTIVE_WAIT`] at a time.
//! `NDV_PROGRESS=thread` uses an engine thread instead and no pump.
//!
//! Configuration is read from the environment here, on purpose and once:
//! a C program has no other way to configure the library. The `NDV_*`
//! variables verbs knows (`NDV_PCAP`, `NDV_STAT`, `NDV_FAULTS`) come through
//! [`DeviceConfig::from_env`], plus `NDV_PROGRESS`.

use ndverbs_verbs::{Device, DeviceConfig, Progress};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the pump naps while the application is polling.
pub(crate) const NAP: Duration = Duration::from_millis(1);

/// The longest pause between two polls of a program that drives the engine
/// by polling; a longer one means it does something else in between (and
/// the pump must run the engine meanwhile).
pub(crate) const GAP: Duration = Duration::from_micros(5);

/// How long after a gap the pump keeps running the engine.
const GAPPY_HOLD: Duration = Duration::from_millis(2);

/// The longest the pump sleeps in the engine's wait before looking again.
const ACTIVE_WAIT: Duration = Duration::from_millis(10);

/// The longest the pump sleeps in the engine's wait while nothing on the
/// NIC can need it (no QP, no endpoint, no timer): what creates one wakes
/// it, so this bounds nothing but a missed case.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// `NDV_PROGRESS`: `adaptive` (the default) or `thread`.
pub const PROGRESS_ENV: &str = "NDV_PROGRESS";

/// The device configuration of this process: the `NDV_*` variables, read once.
fn config() -> Result<&'static DeviceConfig, libc::c_int> {
    static C: OnceLock<Result<DeviceConfig, libc::c_int>> = OnceLock::new();
    C.get_or_init(|| {
        let mut c = DeviceConfig::from_env().map_err(|e| e.errno())?;
        c.progress = match std::env::var(PROGRESS_ENV).as_deref() {
            Ok("thread") => Progress::Thread,
            Ok("adaptive") | Ok("") | Err(_) => Progress::Manual,
            Ok(_) => return Err(libc::EINVAL),
        };
        Ok(c)
    })
    .as_ref()
    .map_err(|e| *e)
}

/// What the application threads tell the pump.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Polls and posts so far (any object of the NIC): while they keep
    /// coming, the application runs the engine (a direct post runs it too).
    calls: AtomicU64,
    /// When the last poll or post returned ([`ticks`]).
    last_return: AtomicU64,
    /// Until when the pump keeps running the engine because polls came
    /// with gaps ([`ticks`]).
    gappy_until: AtomicU64,
    /// The pump is napping (a gap must wake it).
    napping: AtomicBool,
    /// There is a pump (manual progress).
    has_pump: AtomicBool,
    /// Threads blocked waiting for a completion event.
    waiters: AtomicU32,
    stop: AtomicBool,
    nap: Mutex<()>,
    wake: Condvar,
}

impl Activity {
    /// A thread enters a call that may run the engine (a poll, which runs
    /// it when the CQ is empty, or a post); the returned guard notes when it
    /// returns. A pause longer than [`GAP`] since the previous such return
    /// means the program does something else between calls: the pump must
    /// run the engine meanwhile.
    #[inline]
    pub(crate) fn entering(&self) -> Returning<'_> {
        let now = ticks();
        self.calls.fetch_add(1, Ordering::Relaxed);
        let last = self.last_return.load(Ordering::Relaxed);
        let gap = now.saturating_sub(last);
        Returning {
            act: self,
            gap: if gap > clock().gap { gap } else { 0 },
        }
    }

    /// The call that ended a gap of `gap` ticks returns. The program is
    /// back; unless the scheduler made the gap, the pump takes over for
    /// its next pause from its next look on (a program preempted once does
    /// not get a pump that competes with it right away).
    ///
    /// A gap the thread spent runnable but not running — preempted, often
    /// by the peer's pump that its own send woke — is no pause of the
    /// program's: counting it made each pump's wake-ups the other side's
    /// gaps (MPI over rxm: 0.32 preemptions per round trip). The time the
    /// thread waited to run since the last gap it saw
    /// (`/proc/thread-self/schedstat`'s `run_delay`) is taken off the gap.
    #[cold]
    #[inline(never)]
    fn after_gap(&self, gap: u64) {
        let waited = run_delay_since_last_gap().unwrap_or(0);
        if gap.saturating_sub(waited.saturating_mul(clock().per_us) / 1000) > clock().gap {
            self.gappy_until
                .store(ticks() + clock().hold, Ordering::Relaxed);
        }
    }

    /// A CQ was armed: the program means to wait for its event, often
    /// without calling into the library again (epoll on the channel), so
    /// the pump must run the engine now.
    pub(crate) fn armed(&self) {
        self.pause_at(ticks());
    }

    /// The program pauses (or is about to) at `now`: the pump runs the
    /// engine for the next [`GAPPY_HOLD`] at least.
    fn pause_at(&self, now: u64) {
        self.gappy_until
            .store(now + clock().hold, Ordering::Relaxed);
        // Pairs with the pump's fence before its last look: either it sees
        // the new hold or this sees it napping (else it would nap its full
        // `NAP` past an arm).
        fence(Ordering::SeqCst);
        if self.napping.load(Ordering::Relaxed) {
            let _g = self.nap.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }

    /// Whether a pump is running the engine now (not napping): a post may
    /// then have been queued behind its step (see [`Nic::posted`]).
    #[inline]
    fn pump_running(&self) -> bool {
        self.has_pump.load(Ordering::Relaxed) && !self.napping.load(Ordering::Relaxed)
    }

    fn gappy(&self) -> bool {
        ticks() < self.gappy_until.load(Ordering::Relaxed)
    }

    /// A thread is about to block until a completion event: the pump must
    /// run the engine meanwhile. Undone when the returned guard drops.
    pub(crate) fn blocking(&self) -> BlockingGuard<'_> {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let _g = self.nap.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.notify_all();
        BlockingGuard(self)
    }
}

/// Stamps the return time of a poll or post (see [`Activity::entering`]).
pub(crate) struct Returning<'a> {
    act: &'a Activity,
    /// The gap this call ended, in ticks (0: none).
    gap: u64,
}

impl Drop for Returning<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.gap > 0 {
            self.act.after_gap(self.gap);
        }
        self.act.last_return.store(ticks(), Ordering::Relaxed);
    }
}

/// How long (ns) the calling thread waited runnable since it last asked;
/// `None` the first time, or without `/proc/thread-self/schedstat`.
fn run_delay_since_last_gap() -> Option<u64> {
    use std::cell::RefCell;
    use std::os::unix::fs::FileExt;
    thread_local! {
        static STAT: RefCell<Option<(std::fs::File, u64)>> = const { RefCell::new(None) };
    }
    STAT.with(|st| {
        let mut st = st.borrow_mut();
        let read = |f: &std::fs::File| -> Option<u64> {
            let mut buf = [0u8; 96];
            let n = f.read_at(&mut buf, 0).ok()?;
            // "<on-cpu ns> <run_delay ns> <timeslices>"
            std::str::from_utf8(&buf[..n])
                .ok()?
                .split_ascii_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        match st.as_mut() {
            Some((f, last)) => {
                let now = read(f)?;
                Some(now.saturating_sub(std::mem::replace(last, now)))
            }
            None => {
                let f = std::fs::File::open("/proc/thread-self/schedstat").ok()?;
                let now = read(&f)?;
                *st = Some((f, now));
                None
            }
        }
    })
}

/// Undoes [`Activity::blocking`].
pub(crate) struct BlockingGuard<'a>(&'a Activity);

impl Drop for BlockingGuard<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The engine of one local address in this process.
pub(crate) struct Nic {
    pub(crate) dev: Device,
    pub(crate) activity: Arc<Activity>,
    pump: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic").field("dev", &self.dev).finish()
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        self.activity.stop.store(true, Ordering::Release);
        self.activity.wake.notify_all();
        // The pump may be asleep in the engine's wait (up to `IDLE_WAIT`).
        self.dev.wake();
        if let Some(h) = self.pump.take() {
            let _ = h.join();
        }
    }
}

fn nics() -> &'static Mutex<HashMap<IpAddr, Weak<Nic>>> {
    static N: OnceLock<Mutex<HashMap<IpAddr, Weak<Nic>>>> = OnceLock::new();
    N.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Nic {
    /// After a post: when the pump runs the engine, the post may have found
    /// it busy and been queued for the next step, and the pump may already
    /// be asleep in the engine's wait, which a queued post does not end; so
    /// this thread runs a step itself (waiting out the pump's) — only if
    /// something is queued: a post that found the engine free went straight
    /// into the protocol, and a step after it would be one more `recvmsg`
    /// that finds nothing. A program that polls without pause runs the
    /// next step anyway.
    #[inline]
    pub(crate) fn posted(&self) {
        if self.activity.pump_running() && self.dev.has_queued_work() {
            // A removed device runs nothing (and never will).
            while !self.dev.try_progress() && !self.dev.is_removed() {
                std::thread::yield_now();
            }
        }
    }

    /// The process's engine for `addr`, opened if nobody holds it.
    pub(crate) fn get(addr: IpAddr) -> Result<Arc<Nic>, libc::c_int> {
        let mut map = nics().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get(&addr).and_then(Weak::upgrade) {
            return Ok(n);
        }
        let cfg = config()?;
        clock();
        let dev = Device::open_with(addr, cfg).map_err(|e| e.errno())?;
        let activity = Arc::new(Activity::default());
        let manual = dev.progress_mode() == Progress::Manual;
        activity.has_pump.store(manual, Ordering::Relaxed);
        let pump = manual.then(|| {
            let (dev, act) = (dev.clone(), activity.clone());
            std::thread::Builder::new()
                .name(format!("ndv-pump {addr}"))
                .spawn(move || pump(&dev, &act))
        });
        let pump = match pump {
            Some(Ok(h)) => Some(h),
            Some(Err(_)) => return Err(libc::EAGAIN),
            None => None,
        };
        let nic = Arc::new(Nic {
            dev,
            activity,
            pump,
        });
        map.insert(addr, Arc::downgrade(&nic));
        Ok(nic)
    }
}

/// The pump: naps while application threads poll without pause, runs the
/// engine otherwise (see the module docs).
fn pump(dev: &Device, act: &Activity) {
    let mut seen = act.calls.load(Ordering::Relaxed);
    let mut active = true;
    while !act.stop.load(Ordering::Acquire) {
        let needed = || act.waiters.load(Ordering::Acquire) > 0 || act.gappy();
        if active || needed() {
            if dev.progress_wait_or_idle(ACTIVE_WAIT, IDLE_WAIT).is_err() {
                // Removed: nothing left to run.
                return;
            }
            let now = act.calls.load(Ordering::Relaxed);
            // Napping again once the application polls without pause (and
            // nobody waits for an event).
            active = now == seen || needed();
            seen = now;
        } else {
            let g = act.nap.lock().unwrap_or_else(|e| e.into_inner());
            act.napping.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !act.stop.load(Ordering::Acquire) && !needed() {
                drop(act.wake.wait_timeout(g, NAP));
            }
            act.napping.store(false, Ordering::Relaxed);
            let now = act.calls.load(Ordering::Relaxed);
            active = now == seen || needed();
            seen = now;
        }
    }
}

/// The time stamp counter: two of these per poll and per post tell a
/// program that polls without pause from one that does something else in
/// between, and the vDSO clock would cost several times as much.
#[inline]
pub(crate) fn ticks() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 processor and has no
    // preconditions.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// [`GAP`], [`GAPPY_HOLD`] and [`crate::cq::FRESH`] in [`ticks`].
pub(crate) struct Clock {
    gap: u64,
    hold: u64,
    pub(crate) fresh: u64,
    /// Ticks per 1000 ns.
    per_us: u64,
}

/// The tick rate, measured once against `CLOCK_MONOTONIC` (a millisecond,
/// the first time an engine opens). The counter runs at a constant rate on
/// every processor of the last fifteen years; the thresholds it feeds are
/// heuristics, so a rough rate is enough.
pub(crate) fn clock() -> &'static Clock {
    static C: OnceLock<Clock> = OnceLock::new();
    C.get_or_init(|| {
        let (t0, n0) = (ticks(), monotonic_ns());
        while monotonic_ns() - n0 < 1_000_000 {
            std::hint::spin_loop();
        }
        let per_ns = (ticks() - t0) as f64 / (monotonic_ns() - n0) as f64;
        let per_ns = if per_ns.is_finite() && per_ns > 0.0 {
            per_ns
        } else {
            3.0
        };
        Clock {
            gap: (GAP.as_nanos() as f64 * per_ns) as u64,
            hold: (GAPPY_HOLD.as_nanos() as f64 * per_ns) as u64,
            fresh: (crate::cq::FRESH.as_nanos() as f64 * per_ns) as u64,
            per_us: (1000.0 * per_ns) as u64,
        }
    })
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn monotonic_ns() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::run_delay_since_last_gap;

    /// The first look only records; a later one returns the wait since,
    /// which grows while the thread is runnable but another runs on its
    /// core.
    #[test]
    fn run_delay_is_counted_from_the_last_look() {
        if std::fs::metadata("/proc/thread-self/schedstat").is_err() {
            eprintln!("SKIPPED: run_delay_is_counted_from_the_last_look — no schedstat");
            return;
        }
        std::thread::spawn(|| {
            assert_eq!(run_delay_since_last_gap(), None, "first look");
            // SAFETY: no arguments, no preconditions.
            let cpu = unsafe { libc::sched_getcpu() };
            // Another busy thread pinned to this thread's core, and this
            // thread pinned there too, until it has waited to run.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            // SAFETY: cpu_set_t is plain data; the set outlives the call.
            let pin = move || unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            };
            pin();
            let s = stop.clone();
            let hog = std::thread::spawn(move || {
                pin();
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            let t0 = std::time::Instant::now();
            let mut waited = 0;
            while waited == 0 && t0.elapsed() < std::time::Duration::from_secs(5) {
                let spin = std::time::Instant::now();
                while spin.elapsed() < std::time::Duration::from_millis(20) {
                    std::hint::spin_loop();
                }
                waited += run_delay_since_last_gap().expect("a later look");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            hog.join().unwrap();
            assert!(waited > 0, "a thread sharing its core waited to run");
        })
        .join()
        .unwrap();
    }
}
