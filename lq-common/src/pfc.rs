//! PFC telemetry: the contract between the tc PFC counter (`lq-ebpf/src/pfc.rs`) and
//! `lqd` (`lq-user/src/pfc`), and the pure receive rules both sides share.
//!
//! The counter follows the IPFIX PFC draft (seed 000, `spec/pfc-ipfix.md`): it counts every
//! valid received PFC frame (no sampling) per (interface, priority), before and regardless
//! of local PFC enablement, one increment per SET bit of the class-enable vector
//! (zero-quanta resume requests included, clear bits never). A valid received frame is
//! (IEEE 802.3 Annex 31B/31D, 802.1Q clause 36):
//!
//! * untagged (a VLAN-tagged frame is not a MAC Control frame), EtherType 0x8808;
//! * opcode 0x0101;
//! * destination 01-80-C2-00-00-01 or the receiving interface's own unicast address;
//! * at least 60 octets without the FCS (frames with an FCS error never reach software
//!   unless the NIC is set to `rx-all`, which the loader refuses).
//!
//! Every struct is `#[repr(C)]` with explicit padding and an asserted size.

/// Per-CPU received-frame counters: [`PfcKey`] -> `u64` (a `PERCPU_HASH`; sum the CPUs).
pub const PFC_RX_COUNTER_MAP: &str = "PFC_RX_COUNTERS";
/// Pause-duration accounting: [`PfcKey`] -> [`PfcPause`].
pub const PFC_PAUSE_MAP: &str = "PFC_PAUSE";
/// Per-interface configuration written by `lqd`: ifindex (`u32`) -> [`PfcIfConfig`].
pub const PFC_IF_CONFIG_MAP: &str = "PFC_IF_CONFIG";
/// Per-CPU `u64` counters of frames not counted, indexed by [`PfcReject`].
pub const PFC_REJECT_MAP: &str = "PFC_REJECTS";
/// The tc classifier's name in the object.
pub const PFC_PROGRAM: &str = "lq_pfc_ingress";
/// The empty tc classifier (`TC_ACT_OK`) the benchmarks compare [`PFC_PROGRAM`] against.
pub const TC_BASELINE_PROGRAM: &str = "lq_tc_baseline";

/// Interfaces the counter can hold.
pub const PFC_IF_CAPACITY: u32 = 256;
/// Priorities of the class-enable vector (bits 0..=7).
pub const PFC_PRIORITIES: u32 = 8;
/// Entries of the per-(interface, priority) maps.
pub const PFC_KEY_CAPACITY: u32 = PFC_IF_CAPACITY * PFC_PRIORITIES;

/// MAC Control EtherType.
pub const ETH_P_MAC_CONTROL: u16 = 0x8808;
/// PFC (class-based flow control) opcode.
pub const PFC_OPCODE: u16 = 0x0101;
/// The reserved multicast destination of MAC Control PAUSE / PFC frames.
pub const PFC_MULTICAST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
/// Minimum frame length without FCS.
pub const MIN_FRAME_LEN: usize = 60;
/// Octets a PFC frame needs after the Ethernet header: opcode, vector, 8 pause times.
pub const PFC_BODY_LEN: usize = 2 + 2 + 16;
/// One pause quantum is the time to transmit 512 bits.
pub const BITS_PER_QUANTUM: u64 = 512;

/// Key of the per-(interface, priority) maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(C)]
pub struct PfcKey {
    /// The receiving interface's ifindex (in the namespace the program is attached in).
    pub ifindex: u32,
    /// Priority n = bit n of the class-enable vector, 0..=7.
    pub priority: u32,
}
const _: () = assert!(core::mem::size_of::<PfcKey>() == 8);

/// Pause-duration state of one (interface, priority), with IEEE timer semantics: a frame
/// with the priority's bit set replaces the running pause, which then ends at
/// `now + quanta x 512 bit-times` at the link speed; a zero-quanta frame ends it at once.
///
/// This refines seed 003 A.2 ("summing their pause quanta"): summed quanta over-count when
/// a refresh arrives before the previous pause expired, and ignore resumes; the timer
/// model counts the time the peer was actually asked to stay paused.
///
/// The paused time up to `now` (CLOCK_MONOTONIC ns) is [`PfcPause::paused_until`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PfcPause {
    /// Paused nanoseconds of pauses already ended or replaced.
    pub closed_ns: u64,
    /// When the running pause started (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// When it ends (== `start_ns`: none running).
    pub end_ns: u64,
    /// Frames that could not be converted to time because the link speed was unknown.
    pub unknown_speed_frames: u64,
}
const _: () = assert!(core::mem::size_of::<PfcPause>() == 32);

impl PfcPause {
    /// Applies a frame received at `now` with `quanta` for this priority (its bit set) on a
    /// link of `speed_mbps` (0: unknown, the frame then only ends the running pause).
    pub fn apply(&mut self, now: u64, quanta: u16, speed_mbps: u32) {
        let end = if self.end_ns < now { self.end_ns } else { now };
        if end > self.start_ns {
            self.closed_ns = self.closed_ns.wrapping_add(end - self.start_ns);
        }
        self.start_ns = now;
        self.end_ns = now;
        if quanta != 0 {
            match quanta_ns(quanta, speed_mbps) {
                Some(ns) => self.end_ns = now + ns,
                None => self.unknown_speed_frames += 1,
            }
        }
    }

    /// Total paused nanoseconds up to `now` (ended pauses plus the running one's elapsed
    /// part). Differences of two readings give the paused time of the interval.
    pub fn paused_until(&self, now: u64) -> u64 {
        let end = if self.end_ns < now { self.end_ns } else { now };
        let running = end.saturating_sub(self.start_ns);
        self.closed_ns.wrapping_add(running)
    }
}

/// Nanoseconds of `quanta` pause quanta at `speed_mbps` Mb/s; `None` when the speed is
/// unknown (0).
#[inline(always)]
pub const fn quanta_ns(quanta: u16, speed_mbps: u32) -> Option<u64> {
    if speed_mbps == 0 {
        return None;
    }
    // One bit at S Mb/s lasts 1000 / S ns.
    Some(quanta as u64 * BITS_PER_QUANTUM * 1000 / speed_mbps as u64)
}

/// `PfcIfConfig::flags`: the entry is valid (written by `lqd`).
pub const PFC_IF_CONFIGURED: u32 = 1;

/// Per-interface configuration, written by `lqd` for each attached interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PfcIfConfig {
    /// The interface's own unicast MAC address (a valid PFC destination besides the
    /// reserved multicast one).
    pub mac: [u8; 6],
    /// Padding, always 0.
    pub _pad: [u8; 2],
    /// Link speed in Mb/s for the pause timer (0: unknown).
    pub speed_mbps: u32,
    /// `PFC_IF_*` flags.
    pub flags: u32,
    /// The counter epoch of this interface's eight counters (seed 000 section 6): set when
    /// `lqd` attaches a new counting program to the interface (the counters start at zero
    /// then), kept while a pinned link counts on across restarts of `lqd`. Read only by
    /// `lqd`; the program ignores it.
    pub epoch: u32,
}
const _: () = assert!(core::mem::size_of::<PfcIfConfig>() == 20);

/// Why a frame was not counted (index of [`PFC_REJECT_MAP`]). Frames of other EtherTypes
/// are not MAC Control frames and are not tallied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum PfcReject {
    /// A MAC Control frame carrying a VLAN tag (in the frame or stripped to metadata).
    VlanTagged = 0,
    /// A MAC Control frame with another opcode (e.g. 0x0001 PAUSE).
    BadOpcode = 1,
    /// A PFC frame to neither 01-80-C2-00-00-01 nor the interface's address.
    BadDestination = 2,
    /// A MAC Control frame shorter than 60 octets.
    Short = 3,
    /// No configuration for the interface (only multicast destinations are accepted).
    NoConfig = 4,
}

/// Number of reject counters.
pub const PFC_REJECT_COUNT: u32 = 5;

impl PfcReject {
    /// Every reason, in index order.
    pub const ALL: [PfcReject; PFC_REJECT_COUNT as usize] = [
        Self::VlanTagged,
        Self::BadOpcode,
        Self::BadDestination,
        Self::Short,
        Self::NoConfig,
    ];

    /// The reason's name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::VlanTagged => "vlan_tagged",
            Self::BadOpcode => "bad_opcode",
            Self::BadDestination => "bad_destination",
            Self::Short => "short",
            Self::NoConfig => "no_config",
        }
    }
}

/// A valid received PFC frame's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcFrame {
    /// The class-enable vector's low 8 bits (the high 8 are reserved and ignored).
    pub enable: u8,
    /// Pause time of each priority, in quanta.
    pub quanta: [u16; 8],
}

/// What the receive rules make of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfcClass {
    /// Not a MAC Control frame (another EtherType): ignored.
    NotMacControl,
    /// A MAC Control frame that is not a valid PFC frame.
    Rejected(PfcReject),
    /// A valid PFC frame.
    Pfc(PfcFrame),
}

/// The reference receive rules over a frame as tc sees it (from the destination address,
/// without FCS). `vlan_tagged`: the frame arrived with a VLAN tag stripped into metadata.
/// `own_mac`: the interface's address when configured.
pub fn classify(frame: &[u8], vlan_tagged: bool, own_mac: Option<[u8; 6]>) -> PfcClass {
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    if frame.len() < 14 {
        return PfcClass::NotMacControl;
    }
    let ethertype = be16(12);
    if ethertype == crate::frame::ETH_P_8021Q || ethertype == crate::frame::ETH_P_8021AD {
        // Up to two tags (802.1ad outer + 802.1Q inner): a tagged MAC Control frame is
        // rejected (IEEE 802.1Qbb: PFC frames are untagged).
        let mut inner = if frame.len() >= 18 { be16(16) } else { 0 };
        if inner == crate::frame::ETH_P_8021Q || inner == crate::frame::ETH_P_8021AD {
            inner = if frame.len() >= 22 { be16(20) } else { 0 };
        }
        if inner == ETH_P_MAC_CONTROL {
            return PfcClass::Rejected(PfcReject::VlanTagged);
        }
        return PfcClass::NotMacControl;
    }
    if ethertype != ETH_P_MAC_CONTROL {
        return PfcClass::NotMacControl;
    }
    if vlan_tagged {
        return PfcClass::Rejected(PfcReject::VlanTagged);
    }
    if frame.len() < MIN_FRAME_LEN {
        return PfcClass::Rejected(PfcReject::Short);
    }
    if be16(14) != PFC_OPCODE {
        return PfcClass::Rejected(PfcReject::BadOpcode);
    }
    let dst: [u8; 6] = [frame[0], frame[1], frame[2], frame[3], frame[4], frame[5]];
    if dst != PFC_MULTICAST {
        match own_mac {
            None => return PfcClass::Rejected(PfcReject::NoConfig),
            Some(mac) if mac != dst => return PfcClass::Rejected(PfcReject::BadDestination),
            Some(_) => {}
        }
    }
    let mut quanta = [0u16; 8];
    for (n, q) in quanta.iter_mut().enumerate() {
        *q = be16(18 + 2 * n);
    }
    PfcClass::Pfc(PfcFrame {
        enable: frame[17],
        quanta,
    })
}

/// Builds a PFC frame (padded to 60 octets): for tests and fixtures.
pub fn build_frame(dst: [u8; 6], src: [u8; 6], enable: u16, quanta: [u16; 8]) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ETH_P_MAC_CONTROL.to_be_bytes());
    f[14..16].copy_from_slice(&PFC_OPCODE.to_be_bytes());
    f[16..18].copy_from_slice(&enable.to_be_bytes());
    for (n, q) in quanta.iter().enumerate() {
        f[18 + 2 * n..20 + 2 * n].copy_from_slice(&q.to_be_bytes());
    }
    f
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] plain integers with explicit padding and asserted sizes.
    unsafe impl aya::Pod for super::PfcKey {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PfcPause {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PfcIfConfig {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn receive_rules() {
        let f = build_frame(PFC_MULTICAST, SRC, 0x0005, [7, 1, 0, 0, 0, 0, 0, 9]);
        assert_eq!(
            classify(&f, false, None),
            PfcClass::Pfc(PfcFrame {
                enable: 5,
                quanta: [7, 1, 0, 0, 0, 0, 0, 9]
            })
        );
        // The reserved high byte of the vector is ignored.
        let f = build_frame(PFC_MULTICAST, SRC, 0xff01, [0; 8]);
        assert!(matches!(classify(&f, false, None), PfcClass::Pfc(p) if p.enable == 1));
        assert_eq!(
            classify(&f, true, None),
            PfcClass::Rejected(PfcReject::VlanTagged)
        );
        assert_eq!(
            classify(&f[..59], false, None),
            PfcClass::Rejected(PfcReject::Short)
        );
        let own = build_frame(OWN, SRC, 1, [0; 8]);
        assert!(matches!(classify(&own, false, Some(OWN)), PfcClass::Pfc(_)));
        assert_eq!(
            classify(&own, false, Some(SRC)),
            PfcClass::Rejected(PfcReject::BadDestination)
        );
        assert_eq!(
            classify(&own, false, None),
            PfcClass::Rejected(PfcReject::NoConfig)
        );
        let mut pause = f;
        pause[14] = 0; // 0x0001: PAUSE
        assert_eq!(
            classify(&pause, false, None),
            PfcClass::Rejected(PfcReject::BadOpcode)
        );
        let mut ip = f;
        ip[12] = 8;
        ip[13] = 0;
        assert_eq!(classify(&ip, false, None), PfcClass::NotMacControl);
        // Tagged in the frame: 802.1Q, and QinQ (802.1ad outer, 802.1Q inner).
        let tag = |outer: &[u8], inner: &[u8]| {
            let mut t = f[..12].to_vec();
            t.extend_from_slice(outer);
            t.extend_from_slice(inner);
            t.extend_from_slice(&f[12..]);
            t
        };
        let vlan = tag(&[0x81, 0, 0, 5], &[]);
        let qinq = tag(&[0x88, 0xa8, 0, 7], &[0x81, 0, 0, 5]);
        for t in [&vlan, &qinq] {
            assert_eq!(
                classify(t, false, None),
                PfcClass::Rejected(PfcReject::VlanTagged)
            );
        }
        let mut qinq_ip = qinq.clone();
        qinq_ip[20..22].copy_from_slice(&[8, 0]);
        assert_eq!(classify(&qinq_ip, false, None), PfcClass::NotMacControl);
    }

    #[test]
    fn pause_timer_semantics() {
        // 100 Gb/s: one quantum = 5.12 ns; 1000 quanta = 5120 ns.
        assert_eq!(quanta_ns(1000, 100_000), Some(5120));
        assert_eq!(quanta_ns(1, 0), None);
        let mut p = PfcPause::default();
        p.apply(1_000, 1000, 100_000); // paused until 6120
        assert_eq!(p.paused_until(2_000), 1_000);
        // A refresh at 3000 replaces the pause: ends at 8120.
        p.apply(3_000, 1000, 100_000);
        assert_eq!(p.paused_until(3_000), 2_000);
        assert_eq!(p.paused_until(100_000), 2_000 + 5_120);
        // A resume at 5000 ends it.
        p.apply(5_000, 0, 100_000);
        assert_eq!(p.paused_until(100_000), 4_000);
        // A pause that expires before the next frame counts only its length.
        p.apply(10_000, 1000, 100_000);
        p.apply(50_000, 0, 100_000);
        assert_eq!(p.paused_until(60_000), 4_000 + 5_120);
        p.apply(70_000, 5, 0);
        assert_eq!(p.unknown_speed_frames, 1);
        assert_eq!(p.paused_until(80_000), 4_000 + 5_120);
    }
}
