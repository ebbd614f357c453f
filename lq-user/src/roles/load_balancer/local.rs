//! `[local-quality] source = "measured"`: the uplinks' local quality (seed 003 section 6.3)
//! from the Appendix A pipeline on their egress (`core::controller::local_quality` says
//! why), read by the kernel sampler the helper role uses, on a thread of its own.

use std::sync::{Arc, atomic::AtomicU64};

use tracing::{debug, info, warn};

use super::{LoadBalancer, LoadBalancerError};
use crate::{
    core::controller::{local_quality::LocalQualityMeter, path_quality::UplinkId},
    roles::helper::{
        SampleBatch, SampleSource, SampledLink, kernel_source_for, spawn_sampler_thread,
    },
    sys::netlink::ifindex,
    views::snapshot::{LinkReportView, UplinkView, UplinksView},
};

/// The measured local quality of a load balancer's uplinks.
pub(super) struct MeasuredLocal {
    meter: LocalQualityMeter,
    /// The counter source, until [`LoadBalancer::spawn_local_sampler`] moves it to its
    /// thread.
    source: Option<Box<dyn SampleSource + Send>>,
    /// Batches the sampler thread dropped because the loop had 4 not taken yet (the next
    /// batch's deltas span them: no counts are lost, the interval is longer).
    dropped: Arc<AtomicU64>,
    /// `dropped` when last logged.
    dropped_logged: u64,
    /// Sample batches whose counters could not be read.
    read_errors: u64,
}

impl LoadBalancer {
    /// Measures the uplinks' local quality from now on (`pfc_pin_dir`: the PFC counters'
    /// pins, for the pause time of uplinks in `[pfc] interfaces`; `ecn_pin_dir`: where the
    /// ECN-eligible counter pins its map and links). Samples come once
    /// [`LoadBalancer::spawn_local_sampler`] has started their thread.
    pub fn measure_local_quality(
        &mut self,
        pfc_pin_dir: Option<&std::path::Path>,
        ecn_pin_dir: Option<&std::path::Path>,
    ) -> Result<(), LoadBalancerError> {
        let links: Vec<SampledLink> = self
            .cfg
            .uplink
            .iter()
            .map(|u| SampledLink {
                interface: &u.interface,
                rate_mbit: u.rate_mbit,
                pfc_priorities: &[],
            })
            .collect();
        let mut ids = Vec::with_capacity(links.len());
        for u in &self.cfg.uplink {
            ids.push((UplinkId::from(u.id), ifindex(&u.interface)?));
        }
        let source = kernel_source_for(&self.cfg, &links, pfc_pin_dir, ecn_pin_dir)
            .map_err(LoadBalancerError::LocalQuality)?;
        let params = self.cfg.helper_params();
        info!(
            uplinks = ids.len(),
            t_sample_ms = params.t_sample.as_millis() as u64,
            change_threshold = params.change_threshold,
            "local quality measured on the uplinks (seed 003 section 6.3, Appendix A)"
        );
        self.measured_local = Some(MeasuredLocal {
            meter: LocalQualityMeter::new(&ids, &params),
            source: Some(source),
            dropped: Arc::default(),
            dropped_logged: 0,
            read_errors: 0,
        });
        Ok(())
    }

    /// Starts the thread that samples the uplinks every `t_sample` (see
    /// [`spawn_sampler_thread`]); `None` when local quality is not measured.
    pub fn spawn_local_sampler(
        &mut self,
        t_sample: std::time::Duration,
        realtime: bool,
    ) -> std::io::Result<Option<tokio::sync::mpsc::Receiver<SampleBatch>>> {
        let Some(m) = self.measured_local.as_mut() else {
            return Ok(None);
        };
        let Some(source) = m.source.take() else {
            return Ok(None);
        };
        spawn_sampler_thread(
            "lqd-local-sampler",
            source,
            t_sample,
            realtime,
            m.dropped.clone(),
        )
        .map(Some)
    }

    /// One batch of uplink samples: returns whether an uplink's local quality changed
    /// (then the weights are due for a step).
    pub fn on_local_batch(&mut self, batch: SampleBatch) -> bool {
        let Some(m) = self.measured_local.as_mut() else {
            return false;
        };
        let samples = match batch.samples {
            Ok(s) => s,
            Err(e) => {
                m.read_errors += 1;
                // At 1, 2, 4, ... errors: a link that vanished fails every T_sample.
                if m.read_errors.is_power_of_two() {
                    warn!(error = %e, errors = m.read_errors, "reading the uplinks' counters failed; local quality keeps its last values");
                }
                return false;
            }
        };
        let dropped = m.dropped.load(std::sync::atomic::Ordering::Relaxed);
        // Logged when the count has doubled since: a loop that stays behind logs rarely.
        if dropped > 0 && dropped >= m.dropped_logged.saturating_mul(2).max(1) {
            warn!(
                dropped,
                "uplink samples dropped so far: the loop fell 4 batches behind the local-quality sampler thread (the next sample's deltas span them)"
            );
            m.dropped_logged = dropped;
        }
        let changed = m.meter.on_samples(&samples, batch.t_ns);
        for (uplink, q) in &changed {
            debug!(uplink, local_quality = q, "measured local quality applied");
        }
        !changed.is_empty()
    }

    /// The measured local quality of `uplink`, when measured.
    pub(super) fn measured_quality(&self, uplink: UplinkId) -> Option<u8> {
        self.measured_local
            .as_ref()
            .and_then(|m| m.meter.quality(uplink))
    }

    /// `lqd show uplinks`: link state and local quality of every uplink, with the
    /// pipeline's report where measured.
    pub(super) fn uplinks_view(&self) -> UplinksView {
        let metered = self
            .measured_local
            .as_ref()
            .map(|m| m.meter.view())
            .unwrap_or_default();
        let uplinks = self
            .cfg
            .uplink
            .iter()
            .map(|u| {
                let id = UplinkId::from(u.id);
                let m = metered.iter().find(|m| m.uplink == id);
                UplinkView {
                    id: u.id,
                    interface: u.interface.clone(),
                    spine: std::net::Ipv4Addr::from(u.spine.0),
                    oper_up: self.links.is_up(&u.interface),
                    local_quality: self.local.get(id),
                    applied_quality: m.and_then(|m| m.applied),
                    report: m
                        .and_then(|m| m.report.as_ref())
                        .map(|r| LinkReportView::of(r, None)),
                }
            })
            .collect();
        let (source, read_errors, samples_dropped) = match &self.measured_local {
            Some(m) => (
                "measured",
                m.read_errors,
                m.dropped.load(std::sync::atomic::Ordering::Relaxed),
            ),
            None => ("link-state", 0, 0),
        };
        UplinksView {
            source: source.into(),
            uplinks,
            read_errors,
            samples_dropped,
        }
    }
}
