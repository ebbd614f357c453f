//! Waiting for a condition another process or the kernel brings about: the daemons, FRR
//! and the kernel's tables change on their own time, so a test looks again at an interval
//! and gives up at a deadline, saying what it waited for and what it saw last.

use std::time::{Duration, Instant};

/// Calls `probe` every `every` until it returns `Ok`, for at most `limit`, and returns that
/// value. The probe's `Err` carries what it saw instead (the value, a count, or `()`). At
/// the deadline, checked after each look that failed, the error reads "timed out after
/// LIMIT waiting for WHAT", then what `context` makes of the last `Err` (that value, a
/// daemon's log): after ": ", or directly when it starts a new line, or not at all when
/// it is empty.
///
/// An error, not a panic: library code hands it on with `?`, a test unwraps it (and the
/// panic names the test's line). The interval is the caller's because some tests report
/// how long a wait took, which is only as precise as the interval.
pub fn poll_until<T, S>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, S>,
    context: impl FnOnce(S) -> String,
) -> anyhow::Result<T> {
    let start = Instant::now();
    loop {
        let last = match probe() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if start.elapsed() >= limit {
            let context = context(last);
            let sep = if context.is_empty() || context.starts_with('\n') {
                ""
            } else {
                ": "
            };
            anyhow::bail!("timed out after {limit:?} waiting for {what}{sep}{context}");
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_first_ok_after_the_probe_looked_again() {
        let mut n = 0;
        let got = poll_until(
            "three probes",
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                if n == 3 { Ok(n * 10) } else { Err(n) }
            },
            |n| format!("{n} probes"),
        );
        assert_eq!(got.ok(), Some(30));
    }

    #[test]
    fn the_timeout_names_what_the_limit_and_the_last_value_seen() {
        let mut n = 0;
        let e = poll_until(
            "a count of 1000",
            Duration::from_millis(30),
            Duration::from_millis(5),
            || -> Result<(), u32> {
                n += 1;
                Err(n)
            },
            |n| format!("the count is {n}\nlog line"),
        )
        .expect_err("the count never gets there");
        // The last value seen, not the first: the deadline comes after several looks.
        assert!(n > 1, "{n} looks");
        assert_eq!(
            e.to_string(),
            format!("timed out after 30ms waiting for a count of 1000: the count is {n}\nlog line")
        );
    }

    #[test]
    fn a_log_starts_its_own_line_and_an_empty_context_adds_nothing() {
        let timeout = |context: &'static str| {
            poll_until(
                "x",
                Duration::ZERO,
                Duration::ZERO,
                || Err::<(), ()>(()),
                |()| context.to_string(),
            )
            .map_or_else(|e| e.to_string(), |()| "no timeout".to_string())
        };
        assert_eq!(timeout("\nlog"), "timed out after 0ns waiting for x\nlog");
        assert_eq!(timeout(""), "timed out after 0ns waiting for x");
    }
}
