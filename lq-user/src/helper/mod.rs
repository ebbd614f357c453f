//! The deterministic, I/O-free core of the helper (spine) role, seed 003 Appendix A and
//! section 7.2: from counter samples to LQS and CL per egress link, and from those to the
//! advertisement datagrams and `lq-threshold-crossed` notifications. Time is always an
//! input (nanoseconds on a monotonic clock) and the periodic jitter comes from an injected
//! random number generator, so everything here runs reproducibly in virtual time.
//!
//! * [`params`]: pipeline and wire parameters with their ranges (Appendix A, section 10).
//! * [`pipeline`]: per-link derived metrics, EWMA, LQS, CL, hysteresis (A.2-A.6, 5.4, 5.5).
//! * [`advertiser`]: periodic and triggered schedule, datagram splitting, sequence numbers
//!   (7.2 and `spec/lq-udp-wire.md`).
//! * [`notification`]: the `lq-threshold-crossed` notification and its RFC 7951 JSON.
//!
//! The I/O shell (not here) reads the counters every T_sample, feeds
//! [`pipeline::LinkPipeline::on_sample`], passes the reports to
//! [`advertiser::Advertiser::on_sample`], sends the returned payloads out of every link, and
//! sleeps until the next sample or [`advertiser::Advertiser::next_due`], whichever is first.

pub mod advertiser;
pub mod notification;
pub mod params;
pub mod pipeline;
