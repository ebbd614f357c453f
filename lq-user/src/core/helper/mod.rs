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

#[cfg(test)]
mod tests {
    use super::advertiser::{Advertiser, Identity, MonitoredLink, PathMtu, RemoteNode};
    use super::params::HelperParams;
    use super::pipeline::{LinkPipeline, RawSample};
    use lq_common::wire::{DecodePolicy, Mode, decode};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const MS: u64 = 1_000_000;
    const SPEED: u64 = 400_000_000_000;
    const BUF: u64 = 1_000_000;

    /// Appendix B end to end in virtual time: S2's link to L4 is steady at LQS 237, then
    /// congests towards B.2's U = 0.55, D = 0.30, E = 0.15. The pipeline and the advertiser
    /// together send a triggered advertisement in the very first congested sample, raise
    /// `lq-threshold-crossed` 0 -> 3 when the CL rises, and settle at LQS 72 / CL 3.
    #[test]
    fn appendix_b_congestion_end_to_end() {
        let params = HelperParams::default();
        let mut pipes = [LinkPipeline::new(1, &params), LinkPipeline::new(2, &params)];
        let links = vec![
            MonitoredLink {
                link_id: 1,
                remotes: vec![RemoteNode {
                    node_id: 0x0a00_0104,
                    node_as: 0,
                }],
            },
            MonitoredLink {
                link_id: 2,
                remotes: vec![RemoteNode {
                    node_id: 0x0a00_0101,
                    node_as: 0,
                }],
            },
        ];
        let id = Identity {
            node_id: 0x0a00_0002,
            node_as: None,
            pfc_fabric: false,
        };
        let mut adv = Advertiser::new(
            params,
            id,
            links,
            PathMtu::default(),
            4242,
            SmallRng::seed_from_u64(9),
        )
        .unwrap();
        let mut s = [RawSample {
            t_ns: 0,
            max_buffer_bytes: BUF,
            link_speed_bps: SPEED,
            oper_up: true,
            ..RawSample::default()
        }; 2];
        // Advances both links by 2 ms; link 0 at (u, e, d), link 1 steady at U = 0.07.
        let step = |s: &mut [RawSample; 2], u: f64, e: f64, d: f64| {
            for (i, (u, e, d)) in [(u, e, d), (0.07, 0.0, 0.0)].into_iter().enumerate() {
                s[i].t_ns += 2 * MS;
                s[i].tx_bytes += (u * SPEED as f64 / 8.0 * 0.002) as u64;
                s[i].ecn_eligible += 1000;
                s[i].ecn_marked += (e * 1000.0) as u64;
                s[i].queue_depth_bytes = (d * BUF as f64) as u64;
            }
        };
        let mut sent = Vec::new();
        let mut feed =
            |pipes: &mut [LinkPipeline; 2], adv: &mut Advertiser<SmallRng>, s: &[RawSample; 2]| {
                let reports: Vec<_> = pipes
                    .iter_mut()
                    .zip(s)
                    .filter_map(|(p, s)| p.on_sample(s))
                    .collect();
                let out = adv.on_sample(s[0].t_ns, &reports);
                if let Some(o) = &out {
                    sent.push((s[0].t_ns, o.mode));
                }
                (reports, out)
            };
        feed(&mut pipes, &mut adv, &s);
        for _ in 0..50 {
            step(&mut s, 0.07, 0.0, 0.0);
            feed(&mut pipes, &mut adv, &s);
        }
        assert_eq!(pipes[0].report().map(|r| (r.lqs, r.cl)), Some((237, 0)));
        assert_eq!(adv.lqs_last_sent(1), Some(237));
        // Congestion starts.
        step(&mut s, 0.55, 0.15, 0.30);
        let congested_at = s[0].t_ns;
        let (reports, out) = feed(&mut pipes, &mut adv, &s);
        let out = out.expect("triggered in the first congested sample");
        assert_eq!(out.mode, Mode::Triggered);
        assert!(reports[0].lqs < 237 - 25);
        let a = decode(&out.datagrams[0], &DecodePolicy::ANY).unwrap();
        assert_eq!(a.header.sequence, out.first_sequence);
        // Keep it congested until the EWMA has converged.
        for _ in 0..40 {
            step(&mut s, 0.55, 0.15, 0.30);
            feed(&mut pipes, &mut adv, &s);
        }
        let r = pipes[0].report().unwrap();
        assert_eq!((r.lqs, r.cl), (72, 3));
        let ev = adv.take_notifications();
        assert_eq!(ev.len(), 1);
        assert_eq!((ev[0].link_id, ev[0].old_cl, ev[0].new_cl), (1, 0, 3));
        assert_eq!(
            ev[0].t_ns,
            congested_at + 2 * MS,
            "E_smooth passes 0.10 in the second sample"
        );
        // Periodic sends never come more than 22 ms apart.
        for w in sent.windows(2) {
            assert!(w[1].0 - w[0].0 <= 22 * MS + 2 * MS);
        }
    }
}
