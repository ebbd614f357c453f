//! IPFIX over UDP (RFC 7011 section 10.3): templates first, refreshed every
//! `template_refresh` (section 8.4), then data.

use std::{
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use crate::ipfix::{ExportError, ExporterConfig, PfcRecord, encode};

/// IPFIX over UDP: templates first, then data; templates again every
/// `template_refresh`.
pub struct UdpExporter {
    socket: UdpSocket,
    encoder: encode::Encoder,
    last_templates: Option<std::time::Instant>,
    refresh: Duration,
}

impl UdpExporter {
    /// A socket connected to `collector` (bound in the calling thread's namespace).
    pub fn connect(collector: SocketAddr, config: ExporterConfig) -> Result<Self, ExportError> {
        config.elements.validate()?;
        let bind: SocketAddr = if collector.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(collector)?;
        let refresh = config.template_refresh;
        Ok(Self {
            socket,
            encoder: encode::Encoder::new(config)?,
            last_templates: None,
            refresh,
        })
    }

    /// Sends `records` (templates first when due); returns the messages sent.
    pub fn export(&mut self, records: &[PfcRecord]) -> Result<usize, ExportError> {
        let now = crate::sys::clock::unix_seconds();
        let mut sent = 0;
        if self
            .last_templates
            .is_none_or(|t| t.elapsed() >= self.refresh)
        {
            let messages = self.encoder.template_messages(now);
            sent += self.send_all(&messages)?;
            self.last_templates = Some(std::time::Instant::now());
        }
        let messages = self.encoder.data_messages(records, now);
        sent += self.send_all(&messages)?;
        Ok(sent)
    }

    /// Sends `messages` in order; at the first that fails, the encoder's sequence number
    /// goes back to it (its records and the later ones' were not sent).
    fn send_all(&mut self, messages: &[Vec<u8>]) -> Result<usize, ExportError> {
        for m in messages {
            if let Err(e) = self.socket.send(m) {
                self.encoder.unsent_from(m);
                return Err(e.into());
            }
        }
        Ok(messages.len())
    }

    /// The socket's descriptor (for DSCP and SO_PRIORITY).
    pub fn socket(&self) -> &std::net::UdpSocket {
        &self.socket
    }

    /// The encoder (sequence numbers).
    pub fn encoder(&self) -> &encode::Encoder {
        &self.encoder
    }
}
