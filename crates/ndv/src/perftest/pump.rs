//! A helper thread that drives the engine (manual progress) while the main
//! thread is blocked in a TCP read or a CM request, paused while the main
//! thread measures and drives the engine itself.

use ndverbs_verbs::{Device, Progress};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs the engine from a helper thread while the main thread waits on
/// something else (manual progress mode only).
pub struct Pump {
    state: Arc<PumpState>,
    handle: Option<JoinHandle<()>>,
}

struct PumpState {
    paused: Mutex<bool>,
    cv: Condvar,
    parked: AtomicBool,
    stop: AtomicBool,
}

impl Pump {
    /// Starts pumping `dev` (nothing to do with an engine thread).
    pub fn start(dev: &Device) -> Pump {
        let state = Arc::new(PumpState {
            paused: Mutex::new(false),
            cv: Condvar::new(),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let handle = (dev.progress_mode() == Progress::Manual).then(|| {
            let s = state.clone();
            let dev = dev.clone();
            std::thread::spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    {
                        let mut p = s.paused.lock().unwrap_or_else(|e| e.into_inner());
                        while *p && !s.stop.load(Ordering::Acquire) {
                            s.parked.store(true, Ordering::Release);
                            p = s.cv.wait(p).unwrap_or_else(|e| e.into_inner());
                        }
                        s.parked.store(false, Ordering::Release);
                    }
                    if dev.progress_wait(Duration::from_millis(2)).is_err() {
                        break;
                    }
                }
            })
        });
        Pump { state, handle }
    }

    /// Stops pumping until [`Pump::resume`]; returns once the thread is parked.
    pub fn pause(&self) {
        if self.handle.is_none() {
            return;
        }
        *self.state.paused.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let t0 = Instant::now();
        while !self.state.parked.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Pumps again.
    pub fn resume(&self) {
        *self.state.paused.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.state.cv.notify_all();
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.resume();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
