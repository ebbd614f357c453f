//! IPFIX transports (RFC 7011 section 10): sessions over TCP ([`tcp`]) and TLS 1.3 ([`tls`])
//! for the exporter and the collector, on std sockets and rustls. Socket options that
//! need a system call are set through [`crate::sys::socket`].
//!
//! [`bmp`]: lqd as a BMP station (RFC 7854) for the slow plane's NNH mapping.

pub mod bmp;
pub mod tcp;
pub mod tls;
