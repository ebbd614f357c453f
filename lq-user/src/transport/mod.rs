//! IPFIX transports (RFC 7011 section 10): the UDP exporter ([`udp`]), exporter sessions over TCP ([`tcp`]) and TLS 1.3
//! ([`tls`]), the collector of both ([`collector`]), on std sockets and rustls. Socket options that
//! need a system call are set through [`crate::sys::socket`].

pub mod collector;
pub mod tcp;
pub mod tls;
pub mod udp;
