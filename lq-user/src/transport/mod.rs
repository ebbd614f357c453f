//! Byte streams and datagrams to and from peers, on std sockets and rustls:
//!
//! * IPFIX (RFC 7011 section 10): the UDP exporter ([`udp`]), exporter sessions over TCP
//!   ([`tcp`]) and TLS 1.3 ([`tls`]), the collector of both ([`collector`]).
//! * [`bmp`]: lqd as a BMP station (RFC 7854) for the slow plane's NNH mapping.
//!
//! Socket options that need a system call are set through [`crate::sys::socket`].

pub mod bmp;
pub mod collector;
pub mod tcp;
pub mod tls;
pub mod udp;
