//! Helpers for the PFC tests: raw frame injection on an AF_PACKET socket inside a
//! namespace, and a PFC counter loaded into a private pin folder removed afterwards.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use lq_user::sys::bpf::pfc::{Attached, PfcCounter, PfcReader};

use crate::netns::NetNs;

/// Sends each frame as-is (no padding) out of `iface` in `ns`.
pub fn send_frames(ns: &NetNs, iface: &str, frames: Vec<Vec<u8>>) -> Result<()> {
    let iface = iface.to_owned();
    ns.run_in(move || -> Result<()> {
        let cname = std::ffi::CString::new(iface.clone())?;
        // SAFETY: a valid C string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            bail!("no interface {iface}");
        }
        // SAFETY: plain socket call; protocol 0: send only.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain data.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        addr.sll_halen = 6;
        let mut result = Ok(());
        for f in &frames {
            // SAFETY: sends f.len() octets from f to a valid sockaddr_ll.
            let n = unsafe {
                libc::sendto(
                    fd,
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&addr as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if n != f.len() as isize {
                result = Err(anyhow::anyhow!(
                    "sendto ({} octets): {}",
                    f.len(),
                    std::io::Error::last_os_error()
                ));
                break;
            }
        }
        // SAFETY: closing the socket opened above.
        unsafe { libc::close(fd) };
        result
    })?
}

/// A PFC counter in a private pin folder (removed on drop).
pub struct TestPfc {
    /// The counter (None after [`TestPfc::restart`] dropped it and before it reloaded).
    pub counter: Option<PfcCounter>,
    /// The pin folder.
    pub pin_dir: PathBuf,
}

impl TestPfc {
    /// Loads the counter into a fresh pin folder.
    pub fn load() -> Result<Self> {
        crate::require_root();
        let pin_dir = PathBuf::from("/sys/fs/bpf").join(crate::unique_name("lq-pfc-test"));
        let counter = PfcCounter::load(&pin_dir).context("load PFC counter")?;
        Ok(Self {
            counter: Some(counter),
            pin_dir,
        })
    }

    /// Attaches to `iface` inside `ns` (the attach must run in the interface's namespace).
    pub fn attach(&mut self, ns: &NetNs, iface: &str, speed_mbps: Option<u32>) -> Result<Attached> {
        let mut counter = self.counter.take().context("not loaded")?;
        let iface = iface.to_owned();
        let (counter, r) = ns.run_in(move || {
            let r = counter.attach(&iface, speed_mbps);
            (counter, r)
        })?;
        self.counter = Some(counter);
        Ok(r?)
    }

    /// Drops the counter as a stopping daemon does: its pinned links go on counting.
    pub fn stop(&mut self) {
        self.counter = None;
    }

    /// Loads the counter again at the same pins, adopting what they hold: what a daemon
    /// restart does (attach the interfaces again to adopt their links).
    pub fn restart(&mut self) -> Result<()> {
        self.counter = None;
        self.counter = Some(PfcCounter::load(&self.pin_dir)?);
        Ok(())
    }

    /// A reader of the pinned maps.
    pub fn reader(&self) -> Result<PfcReader> {
        Ok(PfcReader::open(&self.pin_dir)?)
    }
}

impl Drop for TestPfc {
    fn drop(&mut self) {
        self.counter = None;
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}
