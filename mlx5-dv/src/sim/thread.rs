//! The device thread: started and stopped through [`Device`], pinned beside
//! the host's threads, spinning, then yielding, then sleeping while idle.

use super::exec::run_all;
use super::{Device, Inner, SimError};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

impl Device {
    /// Starts a device thread that executes WQEs as doorbells arrive. When the
    /// calling thread may run on two or more CPUs, the device thread takes the
    /// last of them ([`device_cpu`]), as a NIC runs beside the host. It stops
    /// when [`Self::stop`] is called or every handle to the device is gone.
    pub fn start(&self) -> Result<(), SimError> {
        let mut t = self.inner.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_some() {
            return Ok(());
        }
        self.inner.stop.store(false, Ordering::SeqCst);
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        // Chosen from the starting thread's CPUs (the new thread inherits them).
        let cpu = device_cpu();
        *t = Some(
            std::thread::Builder::new()
                .name("mlx5-sim".into())
                .spawn(move || device_thread(weak, cpu))
                .map_err(|e| SimError::Os(format!("spawn the device thread: {e}")))?,
        );
        Ok(())
    }

    /// Stops the device thread, if one runs, and waits for it.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let t = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// How long the idle device thread spins before it starts yielding its core
/// (so a waiter sharing the core can run), and before it starts sleeping
/// (200 us a time). Spinning is what keeps its reaction to a doorbell short.
const SPIN_FOR: Duration = Duration::from_micros(20);
const SLEEP_AFTER: Duration = Duration::from_millis(10);

/// CPUs this thread may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// The CPU the device thread takes when the process may use two or more: the
/// last one. Callers that spin on the device (benchmarks) stay off it.
pub fn device_cpu() -> Option<usize> {
    let cpus = allowed_cpus();
    (cpus.len() >= 2).then(|| cpus[cpus.len() - 1])
}

/// Device threads running in this process now.
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many sim device threads run in this process: a waiter spinning on
/// a sim must let them have the CPU now and then; on a kernel device there
/// is none to wait for.
pub fn device_threads() -> usize {
    RUNNING.load(Ordering::Relaxed)
}

struct Running;

impl Running {
    fn new() -> Self {
        RUNNING.fetch_add(1, Ordering::Relaxed);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

fn device_thread(weak: Weak<Inner>, cpu: Option<usize>) {
    let _running = Running::new();
    // Like a NIC, the device runs beside the host's threads, not on their core:
    // two spinning threads sharing one core wait out each other's time slices.
    if let Some(cpu) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
    let mut idle_passes: u32 = 0;
    let mut idle_since: Option<Instant> = None;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let n = run_all(&mut inner.state.lock().unwrap_or_else(|e| e.into_inner()));
        drop(inner);
        if n > 0 {
            idle_passes = 0;
            idle_since = None;
            continue;
        }
        idle_passes = idle_passes.wrapping_add(1);
        if !idle_passes.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle > SLEEP_AFTER {
            std::thread::sleep(Duration::from_micros(200));
        } else if idle > SPIN_FOR {
            std::thread::yield_now();
        }
    }
}
