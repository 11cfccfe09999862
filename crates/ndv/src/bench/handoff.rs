//! How long one CPU takes to hand a cache line to another: a probe of the
//! machine's state, printed with each round of `ndv bench`.
//!
//! Every two-host row here moves data between two processes on different
//! CPUs: the sender's system call writes the payload into kernel buffers
//! and the socket's queue, and the receiver reads them. On a virtual machine
//! the host may place two vCPUs on cores that share a cache or on cores that
//! do not, and may move them while a benchmark runs. On the VM these
//! benchmarks were developed on the handoff took 26–39 ns or 147–179 ns,
//! the state lasting from a tenth of a second to minutes, and bandwidth over
//! the veth followed: the kernel's copy into socket buffers took a quarter
//! of the sender's time in one state and over half in the other
//! (BENCHMARKS.md). A ratio is only meaningful between runs in the same
//! state; the probe says which state a round started in.
//!
//! The probe is a ping-pong on one atomic: two threads pinned to the first
//! two CPUs the process may use, each waiting for the other's value and
//! answering with the next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Handoffs per probe: a few milliseconds in either state.
const HANDOFFS: u64 = 100_000;

/// A value no side ever waits for: the other side gave up.
const GAVE_UP: u64 = u64::MAX;

/// The median of three probes of the one-way handoff time between the
/// first two CPUs this process may run on, or `None` with fewer than two or
/// when pinning fails.
pub fn probe() -> Option<Duration> {
    let cpus = allowed_cpus();
    let (a, b) = (*cpus.first()?, *cpus.get(1)?);
    let mut runs = [once(a, b)?, once(a, b)?, once(a, b)?];
    runs.sort();
    Some(runs[1])
}

/// One probe: `HANDOFFS` one-way handoffs between threads on CPUs `a` and
/// `b`, their mean. Both are spawned threads, so the caller's affinity
/// stays as it was.
fn once(a: usize, b: usize) -> Option<Duration> {
    // Its own cache line: nothing else on the line bounces with it.
    #[repr(align(128))]
    struct Line(AtomicU64);
    let line = Line(AtomicU64::new(0));
    let flag = &line.0;
    std::thread::scope(|s| {
        let first = s.spawn(move || side(flag, a, 0));
        let second = s.spawn(move || side(flag, b, 1));
        let second = second.join().ok().flatten();
        let first = first.join().ok().flatten();
        first.zip(second).map(|(t, _)| t / HANDOFFS as u32)
    })
}

/// One side of the ping-pong, pinned to `cpu`: waits for each value of its
/// parity and answers with the next; how long all of it took.
fn side(flag: &AtomicU64, cpu: usize, parity: u64) -> Option<Duration> {
    if !pin(cpu) {
        flag.store(GAVE_UP, Ordering::Release);
        return None;
    }
    let t0 = Instant::now();
    let mut i = parity;
    while i < HANDOFFS {
        match flag.load(Ordering::Acquire) {
            GAVE_UP => return None,
            v if v == i => {
                flag.store(i + 1, Ordering::Release);
                i += 2;
            }
            _ => std::hint::spin_loop(),
        }
    }
    Some(t0.elapsed())
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes
    // at most its size into it, and CPU_ISSET reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set, CPU_SET writes inside it,
    // and sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_handoff_takes_a_plausible_time() {
        // Any machine with two CPUs: more than nothing, far less than a
        // scheduler time slice (the two threads spin on separate CPUs).
        if let Some(d) = super::probe() {
            assert!(
                d > std::time::Duration::ZERO && d < std::time::Duration::from_micros(50),
                "{d:?}"
            );
        }
    }
}
