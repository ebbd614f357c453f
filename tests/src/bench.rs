//! Output and statistics shared by the `bench_*` programs (the `LQ-METRIC` convention of
//! `xtask/src/bench.rs`).

use std::process::ExitCode;

use serde_json::json;

/// The `main` of a `bench_*` program: runs `run` and reports its error chain.
pub fn main_of(program: &str, run: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `clock` (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, ...) in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// System (kernel) CPU time of the calling thread so far, in ns (getrusage RUSAGE_THREAD):
/// what the kernel spent on this thread's system calls.
pub fn thread_sys_ns() -> u64 {
    // SAFETY: rusage is plain data; getrusage only writes it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return 0;
    }
    u.ru_stime.tv_sec as u64 * 1_000_000_000 + u.ru_stime.tv_usec as u64 * 1_000
}

/// Prints one metric line, values rounded to 3 decimals.
pub fn emit(name: &str, value: f64, unit: &str, goal: Option<&str>, baseline: Option<f64>) {
    let m = json!({
        "name": name,
        "value": round3(value),
        "unit": unit,
        "goal": goal,
        "baseline": baseline.map(round3),
    });
    println!("LQ-METRIC {m}");
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The median (mean of the two middle values for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted samples; NaN when there are none.
///
/// Benchmarks pass every trial: a trial that timed out is a sample equal to the timeout
/// ([`Trials`]), so a tail never looks better by losing its worst trials.
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency samples of a benchmark where every trial counts: a trial that saw no result
/// within its timeout is recorded as the timeout itself.
#[derive(Debug, Default)]
pub struct Trials {
    samples: Vec<f64>,
    timeouts: usize,
}

impl Trials {
    /// A trial that produced `value`.
    pub fn done(&mut self, value: f64) {
        self.samples.push(value);
    }

    /// A trial that timed out after `timeout` (same unit as the values).
    pub fn timed_out(&mut self, timeout: f64) {
        self.samples.push(timeout);
        self.timeouts += 1;
    }

    /// Takes in every trial of `other`, its timeouts counted as such.
    pub fn extend(&mut self, other: &Trials) {
        self.samples.extend_from_slice(&other.samples);
        self.timeouts += other.timeouts;
    }

    /// How many trials timed out.
    pub fn timeouts(&self) -> usize {
        self.timeouts
    }

    /// Every trial, timeouts included.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// No trial yet.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Nearest-rank percentile over every trial.
    pub fn percentile(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        nearest_rank(&s, p)
    }

    /// `n=.. timeouts=.. min p50 p90 p99 max` for the human summary.
    pub fn summary(&self) -> String {
        format!(
            "n={} timeouts={} min={:.1} p50={:.1} p90={:.1} p99={:.1} max={:.1}",
            self.len(),
            self.timeouts,
            self.percentile(0.0),
            self.percentile(50.0),
            self.percentile(90.0),
            self.percentile(99.0),
            self.percentile(100.0)
        )
    }
}

/// `min / median / max` for the human summary.
pub fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("min {min:.2} / median {:.2} / max {max:.2}", median(v))
}

/// Pins thread or process `pid` (0: the caller) to `cpus`.
pub fn pin_to_cpus(pid: libc::pid_t, cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity only read
    // and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Pins thread or process `pid` (0: the caller) to one CPU.
pub fn pin_to_cpu(pid: libc::pid_t, cpu: usize) {
    pin_to_cpus(pid, &[cpu]);
}

/// One CPU line of /proc/stat (`cpu` for the whole machine, `cpuN` for one CPU), in
/// USER_HZ ticks: the first eight fields (guest time is already counted in `user`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    /// Time the hypervisor ran something else while this vCPU wanted to run.
    pub steal: u64,
}

impl CpuTicks {
    /// All but idle and iowait: work, interrupts, and time the hypervisor stole.
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }

    /// Busy, idle and iowait: the line's whole time.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait
    }

    fn parse(fields: &str) -> anyhow::Result<Self> {
        let v: Vec<u64> = fields
            .split_whitespace()
            .take(8)
            .map(|f| f.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("/proc/stat field: {e}"))?;
        anyhow::ensure!(
            v.len() == 8,
            "a /proc/stat cpu line with {} fields",
            v.len()
        );
        Ok(Self {
            user: v[0],
            nice: v[1],
            system: v[2],
            idle: v[3],
            iowait: v[4],
            irq: v[5],
            softirq: v[6],
            steal: v[7],
        })
    }
}

/// The CPU lines of /proc/stat: the whole machine's (all CPUs summed) and each CPU's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub machine: CpuTicks,
    pub per_cpu: Vec<CpuTicks>,
}

impl ProcStat {
    /// Reads /proc/stat now.
    pub fn read() -> anyhow::Result<Self> {
        let text = std::fs::read_to_string("/proc/stat")
            .map_err(|e| anyhow::anyhow!("read /proc/stat: {e}"))?;
        Self::parse(&text)
    }

    /// Parses the text of /proc/stat.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut machine = None;
        let mut per_cpu = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("cpu ") {
                machine = Some(CpuTicks::parse(rest)?);
            } else if let Some(rest) = line.strip_prefix("cpu") {
                // "cpuN fields...": skip the CPU number.
                let (_, fields) = rest
                    .split_once(' ')
                    .ok_or_else(|| anyhow::anyhow!("a /proc/stat line {line:?}"))?;
                per_cpu.push(CpuTicks::parse(fields)?);
            }
        }
        Ok(Self {
            machine: machine.ok_or_else(|| anyhow::anyhow!("no cpu line in /proc/stat"))?,
            per_cpu,
        })
    }
}

/// Length of one /proc/stat tick (USER_HZ), in ns.
pub fn tick_ns() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    1_000_000_000 / hz
}

/// CPU time of every thread of `pid`, in ns (schedstat's first field).
pub fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    sum_over_threads(pid, "schedstat", |s| {
        s.split_whitespace()
            .next()
            .and_then(|x| x.parse::<u64>().ok())
            .unwrap_or(0)
    })
}

/// Times every thread of `pid` was switched out (`voluntary_ctxt_switches` and
/// `nonvoluntary_ctxt_switches` of each thread's status): a thread that sleeps in its
/// event loop counts one voluntary switch per wake-up.
pub fn process_context_switches(pid: u32) -> anyhow::Result<u64> {
    sum_over_threads(pid, "status", context_switches_of)
}

/// `value` of the file `file` of each thread of `pid` (`/proc/<pid>/task/<tid>/<file>`),
/// summed; a thread that ended meanwhile counts 0.
fn sum_over_threads(pid: u32, file: &str, value: impl Fn(&str) -> u64) -> anyhow::Result<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Ok(s) = std::fs::read_to_string(t?.path().join(file)) {
            total += value(&s);
        }
    }
    Ok(total)
}

/// The sum of a status file's two context-switch counts (0 for a line missing).
fn context_switches_of(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches")
                .then(|| v.trim().parse::<u64>().ok())?
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_are_the_sum_of_both_counts() {
        let status = "Name:\tlqd\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(context_switches_of(status), 127);
        assert_eq!(context_switches_of("Name:\tlqd\n"), 0);
    }

    #[test]
    fn proc_stat_lines_parse_into_ticks() {
        // A 6.x kernel's /proc/stat, shortened: ten fields per cpu line, then other lines.
        let text = "cpu  1700931 0 140190 6965365 8339 0 17806 81202 0 0\n\
                    cpu0 846596 0 74916 3482357 4974 0 8197 41120 0 0\n\
                    cpu1 854335 0 65274 3483008 3365 0 9609 40082 0 0\n\
                    intr 1 2 3\nctxt 42\nprocs_running 1\n";
        let s = ProcStat::parse(text).unwrap();
        assert_eq!(s.per_cpu.len(), 2);
        assert_eq!(s.machine.steal, 81202);
        assert_eq!(s.per_cpu[1].user, 854335);
        assert_eq!(s.per_cpu[0].steal, 41120);
        assert_eq!(s.machine.busy(), 1700931 + 140190 + 17806 + 81202);
        assert_eq!(s.machine.total(), s.machine.busy() + 6965365 + 8339);
        assert!(ProcStat::parse("intr 1\n").is_err());
        assert!(ProcStat::parse("cpu  1 2 3\n").is_err());
        assert!(ProcStat::parse("cpu  1 2 3 4 5 6 7 x 0 0\n").is_err());
    }
}
