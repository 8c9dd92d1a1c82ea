//! The target process's open descriptors and resident set, from `/proc`
//! (Linux; elsewhere both are unknown), and how many of the descriptors
//! are its clients' connections; its CPU time and how long its threads
//! waited for a core, and the machine's CPU pressure.
//!
//! The split matters for a soak: an open-loop generator opens connections
//! as its latency rises and closes them when they idle, so the target's
//! descriptor count swings with the generator's choices. A leak is growth
//! in the *rest* (files, upstream pools, listeners, the proxies'
//! connections); the client connections are bounded by the gateway's own
//! connection cap.

/// What `/proc` says of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// Entries of `/proc/<pid>/fd`.
    pub open_fds: Option<u64>,
    /// `VmRSS` of `/proc/<pid>/status`, in KiB.
    pub rss_kib: Option<u64>,
    /// Of `open_fds`, the established TCP connections accepted on the
    /// listener port asked for (its clients'; `None` when unasked or
    /// unreadable).
    pub client_connections: Option<u64>,
}

/// Reads `pid`'s descriptors and RSS, and how many of the descriptors are
/// connections accepted on `listener_port` (each `None` when unreadable).
pub fn read(pid: u32, listener_port: Option<u16>) -> ProcStats {
    let fds: Option<Vec<String>> = std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|target| target.to_string_lossy().into_owned())
            .collect()
    });
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| rss_of_status(&s));
    let client_connections = match (&fds, listener_port) {
        (Some(fds), Some(port)) => {
            let sockets: std::collections::HashSet<u64> =
                fds.iter().filter_map(|t| socket_inode(t)).collect();
            let tables = ["tcp", "tcp6"]
                .map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok());
            tables.iter().any(Option::is_some).then(|| {
                tables
                    .iter()
                    .flatten()
                    .map(|table| established_on(table, port, &sockets))
                    .sum()
            })
        }
        _ => None,
    };
    ProcStats {
        open_fds: fds.map(|f| f.len() as u64),
        rss_kib,
        client_connections,
    }
}

/// CPU time `pid` has used so far (user + system, all its threads), in
/// seconds; `None` when unreadable. A step's difference over its length is
/// the cores it kept busy: with the generator on the target's machine,
/// what the generator takes as the offered load rises is taken from the
/// target.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_of_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` in seconds from the text of `/proc/<pid>/stat`. The
/// command name (field 2) may hold spaces and parentheses, so the fields
/// are counted from after its last `)`; the ticks are `USER_HZ`, which
/// Linux fixes at 100 for this file on every architecture.
pub fn cpu_of_stat(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    // After ")": state (field 3) … utime (14), stime (15).
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)]
    Some((utime + stime) as f64 / USER_HZ)
}

/// What the scheduler says of one thread (`/proc/<pid>/task/<tid>/schedstat`):
/// time on a CPU, time runnable but waiting for one, and time slices run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Nanoseconds on a CPU.
    pub on_cpu_ns: u64,
    /// Nanoseconds runnable on a run queue, waiting for a CPU.
    pub waiting_ns: u64,
    /// Time slices run (about one per wake-up for a thread that sleeps
    /// between short bursts, as an async worker does).
    pub slices: u64,
}

/// [`SchedStat`] of each thread of a process, by thread id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Threads(std::collections::BTreeMap<u32, SchedStat>);

impl Threads {
    /// The mean wait for a CPU per time slice since `earlier` (a reading
    /// of the same process); `None` without a slice. Summed over the
    /// threads of this reading (a thread new since counts from its start;
    /// one that ended meanwhile is left out), so threads that come and go
    /// do not skew it. On a machine whose cores are all busy, a sleeping
    /// worker woken for a request waits about this long before it runs,
    /// once in every process the request crosses: a latency no admission
    /// control inside the process can shorten.
    pub fn wait_per_slice_since(&self, earlier: &Self) -> Option<std::time::Duration> {
        let (mut waited, mut slices) = (0_u64, 0_u64);
        for (tid, now) in &self.0 {
            let before = earlier.0.get(tid).copied().unwrap_or_default();
            waited += now.waiting_ns.saturating_sub(before.waiting_ns);
            slices += now.slices.saturating_sub(before.slices);
        }
        (slices > 0).then(|| std::time::Duration::from_nanos(waited / slices))
    }
}

/// `pid`'s threads' scheduler statistics; `None` when unreadable (not
/// Linux, or a kernel without `CONFIG_SCHED_INFO`).
pub fn sched_stats(pid: u32) -> Option<Threads> {
    let mut threads = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let task = task.ok()?;
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that ended after the listing has no file any more.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        threads.insert(tid, sched_stat_of_text(&text)?);
    }
    Some(Threads(threads))
}

/// One thread's `schedstat` text: three numbers, nanoseconds on a CPU,
/// nanoseconds waiting on a run queue, time slices.
pub fn sched_stat_of_text(text: &str) -> Option<SchedStat> {
    let mut n = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedStat {
        on_cpu_ns: n.next()?.ok()?,
        waiting_ns: n.next()?.ok()?,
        slices: n.next()?.ok()?,
    })
}

/// Microseconds so far in which at least one runnable task of this machine
/// (its cgroup, in a container) waited for a CPU: the `some` line's
/// `total` of `/proc/pressure/cpu` (pressure stall information, Linux
/// 4.20+ with PSI on); `None` when unreadable. A step's difference over
/// its length is the share of the step the cores were oversubscribed.
pub fn cpu_pressure_us() -> Option<u64> {
    cpu_pressure_of_text(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

/// The `some` line's `total=` from the text of `/proc/pressure/cpu`.
pub fn cpu_pressure_of_text(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The inode of a descriptor whose link reads `socket:[inode]`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// How many rows of a `/proc/net/tcp{,6}` table are established
/// connections with local port `port` whose inode is in `sockets` (the
/// process's own: the table lists the whole network namespace).
fn established_on(table: &str, port: u16, sockets: &std::collections::HashSet<u64>) -> u64 {
    const ESTABLISHED: &str = "01";
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            let inode = f.get(9).and_then(|i| i.parse::<u64>().ok());
            local_port == Some(port)
                && f.get(3) == Some(&ESTABLISHED)
                && inode.is_some_and(|i| sockets.contains(&i))
        })
        .count() as u64
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

    #[test]
    fn cpu_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (shop (easy) x) S 1 4242 4242 0 -1 4194560 2171 0 0 0 250 125 0 0 20 0 9 0 123 456 789";
        assert_eq!(cpu_of_stat(stat), Some(3.75));
        assert_eq!(cpu_of_stat("4242 (x) S 1"), None, "too few fields");
        assert_eq!(cpu_of_stat("no parenthesis"), None);
    }

    #[test]
    fn established_connections_on_the_port_are_counted_when_they_are_ours() {
        // Local 127.0.0.1:8080 (0x1F90): established and ours, established
        // but another process's, listening; and an outgoing connection of
        // ours to port 8080 (remote port, not local).
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:1F90 0100007F:D432 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 100 0 0 10 0
   3: 0100007F:D433 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 20 4 30 10 -1
";
        let ours = [111, 333, 444].into_iter().collect();
        assert_eq!(established_on(table, 8080, &ours), 1);
        assert_eq!(established_on(table, 8081, &ours), 0);
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn a_threads_schedstat_is_three_numbers() {
        let s = sched_stat_of_text("8116 1200 3\n").unwrap();
        assert_eq!((s.on_cpu_ns, s.waiting_ns, s.slices), (8116, 1200, 3));
        assert_eq!(sched_stat_of_text("8116 1200"), None, "too few");
        assert_eq!(sched_stat_of_text("8116 x 3"), None);
    }

    #[test]
    fn the_wait_per_slice_counts_new_threads_and_leaves_out_ended_ones() {
        let at = |entries: &[(u32, u64, u64)]| {
            Threads(
                entries
                    .iter()
                    .map(|&(tid, waiting_ns, slices)| {
                        let s = SchedStat {
                            on_cpu_ns: 0,
                            waiting_ns,
                            slices,
                        };
                        (tid, s)
                    })
                    .collect(),
            )
        };
        // Thread 1 waited 3 ms over 10 slices since; thread 2 is new (1 ms
        // over 2 slices); thread 3 ended (its large sums must not make the
        // difference negative or count).
        let before = at(&[(1, 1_000_000, 5), (3, 900_000_000, 1_000)]);
        let after = at(&[(1, 4_000_000, 15), (2, 1_000_000, 2)]);
        assert_eq!(
            after.wait_per_slice_since(&before),
            Some(std::time::Duration::from_nanos(4_000_000 / 12))
        );
        assert_eq!(before.wait_per_slice_since(&before), None, "no slice");
    }

    #[test]
    fn cpu_pressure_is_the_some_lines_total() {
        let text = "some avg10=23.67 avg60=64.01 avg300=61.09 total=1187542004\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(cpu_pressure_of_text(text), Some(1_187_542_004));
        assert_eq!(cpu_pressure_of_text("full avg10=0.00 total=7\n"), None);
        assert_eq!(cpu_pressure_of_text("some avg10=1.00\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn this_process_has_descriptors_a_resident_set_and_its_clients() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let s = read(std::process::id(), Some(port));
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.rss_kib.is_some_and(|n| n > 0), "{s:?}");
        // Spinning shows as CPU time (the scale of a tick is checked on a
        // fixed text above; other tests' threads may add to this process's).
        let before = cpu_seconds(std::process::id()).expect("this process's CPU time");
        let spin = tokio::time::Instant::now();
        let mut used = 0.0;
        while used < 0.03 && spin.elapsed() < std::time::Duration::from_secs(10) {
            std::hint::black_box((0..10_000_u64).sum::<u64>());
            used = cpu_seconds(std::process::id()).unwrap() - before;
        }
        assert!(used >= 0.03, "10 s of spinning read as {used} s of CPU");
        // Its threads' scheduler statistics are read, and running counts
        // time slices.
        let threads = sched_stats(std::process::id()).expect("this process's schedstat");
        let slices = |t: &Threads| t.0.values().map(|s| s.slices).sum::<u64>();
        assert!(slices(&threads) > 0, "{threads:?}");
        assert!(threads.0.values().any(|s| s.on_cpu_ns > 0), "{threads:?}");
        if std::path::Path::new("/proc/pressure/cpu").exists() {
            assert!(cpu_pressure_us().is_some(), "unreadable pressure");
        }
        assert_eq!(s.client_connections, Some(0), "{s:?}");
        let _a = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let _b = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let accepted = (
            listener.accept().await.unwrap(),
            listener.accept().await.unwrap(),
        );
        let s = read(std::process::id(), Some(port));
        // Both ends live in this process: the two accepted sockets have
        // local port `port`, the connecting ones do not.
        assert_eq!(s.client_connections, Some(2), "{s:?}");
        drop(accepted);
        assert_eq!(read(std::process::id(), None).client_connections, None);
    }
}
