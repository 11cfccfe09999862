//! The thread that turns finished connection requests into events.
//!
//! Verbs' endpoint calls (connect, accept, wait for a request or for the
//! peer's DREQ) return `Pending`s that end later; the kernel's rdma_cm
//! would report each ending as an event on the id's channel. One thread per
//! process waits for all of them: each outstanding request is a small
//! future (the `Pending`, then what its outcome means for the id), polled
//! by this thread's executor and woken by the engine when the request
//! ends. The requests are taken [`without_progress`]: this thread never runs
//! an engine (the program's polls or the pump of `crate::nic` do), it only
//! hears of endings. It also keeps timers (`TIMEWAIT_EXIT`).
//!
//! [`without_progress`]: ndverbs_verbs::Pending::without_progress

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;
type Timer = (Instant, Box<dyn FnOnce() + Send>);

#[derive(Default)]
struct Inbox {
    tasks: Vec<Task>,
    timers: Vec<Timer>,
    woken: bool,
}

struct Exec {
    inbox: Mutex<Inbox>,
    cv: Condvar,
}

impl Wake for Exec {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).woken = true;
        self.cv.notify_one();
    }
}

fn exec() -> &'static Arc<Exec> {
    static E: OnceLock<Arc<Exec>> = OnceLock::new();
    E.get_or_init(|| {
        let e = Arc::new(Exec {
            inbox: Mutex::new(Inbox::default()),
            cv: Condvar::new(),
        });
        let run = e.clone();
        std::thread::Builder::new()
            .name("ndv-rdmacm".into())
            .spawn(move || run_loop(&run))
            .expect("spawning the rdma_cm event thread");
        e
    })
}

/// Runs `f` on the event thread until it ends.
pub(crate) fn spawn(f: impl Future<Output = ()> + Send + 'static) {
    let e = exec();
    let mut i = e.inbox.lock().unwrap_or_else(|e| e.into_inner());
    i.tasks.push(Box::pin(f));
    i.woken = true;
    e.cv.notify_one();
}

/// Runs `f` on the event thread after `delay`.
pub(crate) fn after(delay: Duration, f: impl FnOnce() + Send + 'static) {
    let e = exec();
    let mut i = e.inbox.lock().unwrap_or_else(|e| e.into_inner());
    i.timers.push((Instant::now() + delay, Box::new(f)));
    i.woken = true;
    e.cv.notify_one();
}

fn run_loop(e: &Arc<Exec>) {
    let waker = Waker::from(e.clone());
    let mut cx = Context::from_waker(&waker);
    let mut tasks: Vec<Task> = Vec::new();
    let mut timers: Vec<Timer> = Vec::new();
    loop {
        {
            let mut i = e.inbox.lock().unwrap_or_else(|e| e.into_inner());
            tasks.append(&mut i.tasks);
            timers.append(&mut i.timers);
            i.woken = false;
        }
        // Every task shares the one waker: a wake polls them all (there
        // are few, and polling an unfinished one is a lock and a look).
        tasks.retain_mut(
            |t| match catch_unwind(AssertUnwindSafe(|| t.as_mut().poll(&mut cx))) {
                Ok(p) => p.is_pending(),
                Err(_) => false,
            },
        );
        let now = Instant::now();
        let (due, later): (Vec<Timer>, Vec<Timer>) = timers.drain(..).partition(|t| t.0 <= now);
        timers = later;
        for (_, f) in due {
            let _ = catch_unwind(AssertUnwindSafe(f));
        }
        let next = timers.iter().map(|t| t.0).min();
        let mut i = e.inbox.lock().unwrap_or_else(|e| e.into_inner());
        while !i.woken {
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            if wait.is_zero() {
                break;
            }
            let (g, to) =
                e.cv.wait_timeout(i, wait)
                    .unwrap_or_else(|e| e.into_inner());
            i = g;
            if to.timed_out() {
                break;
            }
        }
    }
}
