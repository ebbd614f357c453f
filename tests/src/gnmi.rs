//! What the gNMI test and benchmark share (issue 40): a test PKI made with rcgen, and
//! pygnmi (`tests/gnmi/pygnmi_client.py`) run in a namespace, the independent client.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::Value;

use crate::{
    daemon::Sender,
    netns::NetNs,
    packet::{entry, header, ip4},
};

/// Two spines in `ns` (10.1.1.1 and 10.1.2.1, node ids 10.0.0.1 and 10.0.0.2): every 20 ms
/// each advertises the remote leaf 10.0.1.4 with its LQS from `lqs`, until `stop`.
pub fn two_spines(ns: &NetNs, lqs: Arc<[AtomicU8; 2]>, stop: Arc<AtomicBool>) -> Result<()> {
    ns.run_in(move || {
        std::thread::spawn(move || -> Result<()> {
            let mut socks: Vec<Sender> = (1..=2u8)
                .map(|k| Sender::bind(SocketAddr::new(Ipv4Addr::new(10, 1, k, 1).into(), 0), 255))
                .collect::<Result<_>>()?;
            let mut seq = 1u16;
            while !stop.load(Ordering::Relaxed) {
                for (k, s) in socks.iter_mut().enumerate() {
                    let h = header(ip4(10, 0, 0, k as u8 + 1), seq);
                    let q = lqs[k].load(Ordering::Relaxed);
                    let to = SocketAddr::new(Ipv4Addr::new(10, 1, k as u8 + 1, 2).into(), 52525);
                    s.send(to, &h, &[entry(ip4(10, 0, 1, 4), 1, q, 0)])?;
                }
                seq = seq.wrapping_add(1);
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        })
    })?;
    Ok(())
}

/// A CA: its PEM and the issuer that signs leaves.
pub fn make_ca(name: &str) -> Result<(String, Issuer<'static, KeyPair>)> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok((cert.pem(), Issuer::new(p, key)))
}

/// A leaf certificate for `dns` (and `ip`), a server's or a client's, written as
/// `DIR/FILE.pem` and `DIR/FILE.key` (mode 0600); returns both paths.
pub fn leaf(
    dir: &Path,
    file: &str,
    issuer: &Issuer<'static, KeyPair>,
    dns: &str,
    ip: Option<IpAddr>,
    server: bool,
) -> Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut p = CertificateParams::new(vec![dns.to_string()])?;
    if let Some(ip) = ip {
        p.subject_alt_names.push(SanType::IpAddress(ip));
    }
    p.distinguished_name.push(DnType::CommonName, dns);
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, issuer)?;
    let (c, k) = (
        dir.join(format!("{file}.pem")),
        dir.join(format!("{file}.key")),
    );
    std::fs::write(&c, cert.pem())?;
    std::fs::write(&k, key.serialize_pem())?;
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600))?;
    Ok((c, k))
}

/// pygnmi in a namespace, as one client: its CA, its identity (none: no certificate).
pub struct PyGnmi<'a> {
    /// Where the client runs.
    pub ns: &'a NetNs,
    /// `HOST:PORT` of the target.
    pub target: String,
    /// The name the target's certificate must carry.
    pub server_name: String,
    /// The CA that signed the target's certificate; `None`: plaintext (`--insecure`, a
    /// target on loopback).
    pub ca: Option<PathBuf>,
    /// The client's certificate and key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl PyGnmi<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("gnmi/pygnmi_client.py");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns.name(), "/usr/bin/python3"])
            .arg(&script)
            .args(["--target", &self.target]);
        match &self.ca {
            Some(ca) => {
                c.args(["--override", &self.server_name])
                    .arg("--ca")
                    .arg(ca);
            }
            None => {
                c.arg("--insecure");
            }
        }
        if let Some((cert, key)) = &self.identity {
            c.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        c.args(args);
        c
    }

    /// Runs the client to its end: its JSON output (one value, or an array of its lines),
    /// or the error it reported (`{"error": CODE, ...}`).
    pub fn run(&self, args: &[&str]) -> Result<Result<Value, Value>> {
        let out = self
            .command(args)
            .output()
            .context("python3 (cargo xtask setup installs pygnmi)")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let parsed: Vec<Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ok(match (out.status.code(), parsed.as_slice()) {
            (Some(0), [one]) => Ok(one.clone()),
            (Some(0), many) => Ok(Value::Array(many.to_vec())),
            (Some(3), [e]) => Err(e.clone()),
            _ => anyhow::bail!(
                "pygnmi_client {args:?} failed: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }

    /// The values a `stream` command printed (its stdout): each update's first value, in
    /// the order received.
    pub fn streamed_values(stdout: &str) -> Vec<Value> {
        stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|m| m["update"]["update"].as_array()?.first().cloned())
            .map(|u| u["val"].clone())
            .collect()
    }

    /// Starts the client with its stdout and stderr piped (a `stream` or `load` command).
    pub fn spawn(&self, args: &[&str]) -> Result<Child> {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("python3 (cargo xtask setup installs pygnmi)")
    }
}
