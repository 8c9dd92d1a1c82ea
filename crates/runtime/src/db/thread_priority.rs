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
//! runs in `docs/overload.md`).
//!
//! So each new SQLite connection raises every SQLite thread of the process
//! to [`RAISE`] nice steps above the process's own (its main thread's,
//! which the async workers inherit). **Why a scan of `/proc/self/task`:**
//! sqlx spawns and names the threads itself and offers no hook on them (the
//! `Any` driver takes no thread options), and a thread inherits its
//! creator's nice value, so lowering the async workers instead would lower
//! the SQLite threads they spawn with them. A connection's thread exists
//! before its `after_connect` runs, so every thread is raised by its own
//! connection's scan at the latest. The group-commit combiner's thread
//! ([`COMBINER_THREAD`](super::group_commit::COMBINER_THREAD)), which
//! drives the writer's statements, raises itself as it starts.
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

/// The starts of SQLite's thread names, as `/proc` shows them (a thread's
/// `comm` is cut at 15 bytes): sqlx's, one per connection, and the
/// group-commit combiner's.
const NAMES: [&str; 2] = ["sqlx-sqlite-wor", super::group_commit::COMBINER_THREAD];

/// Raises this process's SQLite threads (see the module); logs once when
/// it may not.
pub(crate) fn raise() {
    match raise_sqlite_threads() {
        Ok(raised) if raised > 0 => tracing::debug!(raised, "SQLite threads raised"),
        Ok(_) => {}
        Err(error) => denied(&error),
    }
}

/// Raises the calling thread (the combiner's, as it starts); logs once
/// when it may not.
pub(crate) fn raise_this_thread() {
    if let Err(error) = raise_current_thread() {
        denied(&error);
    }
}

/// Says once per process that the raise is not allowed here.
fn denied(error: &io::Error) {
    static DENIED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DENIED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(
            %error,
            "cannot raise SQLite's threads above the async workers \
             (needs CAP_SYS_NICE): they share the CPU equally"
        );
    }
}

/// The nice value SQLite's threads are raised to: [`RAISE`] steps above
/// the process's main thread (whose value the async workers inherit), so
/// it does not depend on which thread connects.
#[cfg(target_os = "linux")]
fn target() -> io::Result<i32> {
    use rustix::process::{getpid, getpriority_process};
    // On Linux `PRIO_PROCESS` with a thread id is one thread's nice value;
    // the process id is its main thread's id.
    Ok((getpriority_process(Some(getpid()))? - RAISE).max(-20))
}

/// Sets the calling thread to the raised priority (see [`raise_sqlite_threads`]).
///
/// # Errors
/// When a priority cannot be read or set (`EACCES` / `EPERM` without
/// `CAP_SYS_NICE`).
#[cfg(target_os = "linux")]
pub fn raise_current_thread() -> io::Result<()> {
    use rustix::process::{getpriority_process, setpriority_process};
    let target = target()?;
    if getpriority_process(None)? > target {
        setpriority_process(None, target)?;
    }
    Ok(())
}

/// Elsewhere there is nothing to raise.
#[cfg(not(target_os = "linux"))]
pub fn raise_current_thread() -> io::Result<()> {
    Ok(())
}

/// Sets every SQLite thread of this process that runs at a lower priority
/// than [`RAISE`] steps above the process's main thread to that priority;
/// returns how many it changed.
///
/// # Errors
/// When `/proc/self/task` cannot be read or a priority cannot be set
/// (`EACCES` / `EPERM` without `CAP_SYS_NICE`).
#[cfg(target_os = "linux")]
pub fn raise_sqlite_threads() -> io::Result<usize> {
    use rustix::process::{Pid, setpriority_process};
    let target = target()?;
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

/// This process's SQLite threads (sqlx's and the combiners'): `(thread id,
/// nice value)`.
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
        if !NAMES.iter().any(|name| comm.starts_with(name)) {
            continue;
        }
        if let Ok(nice) = getpriority_process(Pid::from_raw(tid)) {
            threads.push((tid, nice));
        }
    }
    Ok(threads)
}
