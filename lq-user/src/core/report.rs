//! How an error reads in a log line: its message and every source after it, joined by
//! ": ". lq's error types show their own message only and keep the cause as `source()`
//! (so that `anyhow`'s `{:#}` at the top prints each cause once); a log line that prints
//! such an error with `%e` would lose the cause, so the daemon logs `%Chain(&e)`.

use std::{error::Error, fmt};

/// Displays `error` followed by its sources.
pub struct Chain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("map LQ_PATHS")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_once() {
        let e = Outer(std::io::Error::other("permission denied"));
        assert_eq!(Chain(&e).to_string(), "map LQ_PATHS: permission denied");
    }
}
