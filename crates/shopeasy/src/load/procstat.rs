//! The target process's open descriptors and resident set, from `/proc`
//! (Linux; elsewhere both are unknown).

/// What `/proc` says of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// Entries of `/proc/<pid>/fd`.
    pub open_fds: Option<u64>,
    /// `VmRSS` of `/proc/<pid>/status`, in KiB.
    pub rss_kib: Option<u64>,
}

/// Reads `pid`'s descriptors and RSS (each `None` when unreadable).
pub fn read(pid: u32) -> ProcStats {
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64);
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| rss_of_status(&s));
    ProcStats { open_fds, rss_kib }
}

/// `VmRSS` in KiB from the text of `/proc/<pid>/status`.
pub fn rss_of_status(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The one process named `shopeasy` other than this one (the embedded
/// system), if there is exactly one.
pub fn find_shopeasy() -> Option<u32> {
    let me = std::process::id();
    let mut found = std::fs::read_dir("/proc").ok()?.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (pid != me && comm.trim() == "shopeasy").then_some(pid)
    });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_the_status_text() {
        let status = "Name:\tshopeasy\nVmPeak:\t  99 kB\nVmRSS:\t   34816 kB\nThreads:\t9\n";
        assert_eq!(rss_of_status(status), Some(34_816));
        assert_eq!(rss_of_status("Name: x\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_descriptors_and_a_resident_set() {
        let s = read(std::process::id());
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.rss_kib.is_some_and(|n| n > 0), "{s:?}");
    }
}
