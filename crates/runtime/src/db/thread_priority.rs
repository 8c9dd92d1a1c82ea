//! SQLite's threads ahead of the async runtime's workers on the CPU.
//!
//! sqlx runs each SQLite connection on a thread of its own
//! (`sqlx-sqlite-worker-N`), and every statement is a round trip between
//! the async task and that thread. In overload the embedded system's
//! capacity is order's one writer (`group_commit`), and its thread competes
//! for the cores with the async workers, which stay busy admitting,
//! refusing and proxying: it waits for a core in the middle of its
//! transaction, its holds stretch, and goodput falls just when it is needed
//! most. Giving the bottleneck the CPU first keeps it working at its own
//! pace; the work that feeds it waits instead (measured on two vCPUs: the
//! README's overload table).
//!
//! So each new SQLite connection raises every SQLite thread of the process
//! by [`RAISE`] nice steps above the thread that connects. **Why a scan of
//! `/proc/self/task`:** sqlx spawns and names the threads itself and offers
//! no hook on them (the `Any` driver takes no thread options), and a thread
//! inherits its creator's nice value, so lowering the async workers instead
//! would lower the SQLite threads they spawn with them. A connection's
//! thread exists before its `after_connect` runs, so every thread is raised
//! by its own connection's scan at the latest.
//!
//! Raising needs `CAP_SYS_NICE` (root, or a container granted it) or an
//! `RLIMIT_NICE` that allows it. Without either nothing changes (the
//! threads share the CPU as before) and it is logged once. Linux only.

use std::io;

/// How many nice steps SQLite's threads run above the async workers: five
/// give a SQLite thread about three times a worker's share of a busy core.
/// Ten (nine times) gave about the same goodput in overload and made the
/// refusals, which the workers write, wait longer for a core.
pub const RAISE: i32 = 5;

/// The start of sqlx's SQLite thread names, as `/proc` shows them (a
/// thread's `comm` is cut at 15 bytes).
const NAME: &str = "sqlx-sqlite-wor";

/// Raises this process's SQLite threads (see the module); logs once when
/// it may not.
pub(crate) fn raise() {
    static DENIED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match raise_sqlite_threads() {
        Ok(raised) if raised > 0 => tracing::debug!(raised, "SQLite threads raised"),
        Ok(_) => {}
        Err(error) => {
            if !DENIED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(
                    %error,
                    "cannot raise SQLite's threads above the async workers \
                     (needs CAP_SYS_NICE): they share the CPU equally"
                );
            }
        }
    }
}

/// Sets every SQLite thread of this process that runs at a lower priority
/// than the calling thread's minus [`RAISE`] to that priority; returns how
/// many it changed.
///
/// # Errors
/// When `/proc/self/task` cannot be read or a priority cannot be set
/// (`EACCES` / `EPERM` without `CAP_SYS_NICE`).
#[cfg(target_os = "linux")]
pub fn raise_sqlite_threads() -> io::Result<usize> {
    use rustix::process::{Pid, getpriority_process, setpriority_process};
    // On Linux `PRIO_PROCESS` with a thread id (or 0: the caller) is one
    // thread's nice value.
    let target = (getpriority_process(None)? - RAISE).max(-20);
    let mut raised = 0;
    for (tid, nice) in sqlite_threads()? {
        if nice > target {
            match setpriority_process(Pid::from_raw(tid), target) {
                Ok(()) => raised += 1,
                // It ended since the listing.
                Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(raised)
}

/// Elsewhere there is nothing to raise.
#[cfg(not(target_os = "linux"))]
pub fn raise_sqlite_threads() -> io::Result<usize> {
    Ok(0)
}

/// This process's SQLite threads: `(thread id, nice value)`.
///
/// # Errors
/// When `/proc/self/task` cannot be read.
#[cfg(target_os = "linux")]
pub fn sqlite_threads() -> io::Result<Vec<(i32, i32)>> {
    use rustix::process::{Pid, getpriority_process};
    let mut threads = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A thread that ended between the listing and here: skipped.
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with(NAME) {
            continue;
        }
        if let Ok(nice) = getpriority_process(Pid::from_raw(tid)) {
            threads.push((tid, nice));
        }
    }
    Ok(threads)
}
