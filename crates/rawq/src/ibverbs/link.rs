//! An RDMA port's link, as the verbs and DV backends give it to the port
//! ([`crate::link::PortLink`]): state from `ibv_query_port` plus the netdev the port is bound to,
//! events from the device's asynchronous event queue on a context of their own (see
//! [`crate::link`] for why).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::Context;
use crate::error::Result;
use crate::link::{
    ib_rate_mbps, netdev, Link, LinkEvent, LinkEvents, PortEvents, PortLink, Source,
};

/// Port `port` of RDMA device `device`.
#[derive(Debug)]
struct RdmaPort {
    device: String,
    port: u8,
}

/// The link source of port `port` of RDMA device `device`.
pub(crate) fn source(device: &str, port: u8) -> Source {
    Source::Port(Arc::new(RdmaPort {
        device: device.to_owned(),
        port,
    }))
}

impl PortLink for RdmaPort {
    fn link(&self) -> Result<Link> {
        let (device, port) = (self.device.as_str(), self.port);
        let ctx = super::device::open(device)?;
        let a = ctx.query_port(port)?;
        let nd = super::context::port_netdev(device, port);
        let net = nd.as_deref().and_then(|n| netdev(n).ok());
        Ok(Link {
            ifname: nd,
            carrier: a.is_active(),
            oper_state: a.state_name().to_owned(),
            admin_up: net.as_ref().and_then(|n| n.admin_up),
            speed_mbps: ib_rate_mbps(a.active_speed, a.active_width)
                .or_else(|| net.as_ref().and_then(|n| n.speed_mbps)),
            mtu: net
                .as_ref()
                .and_then(|n| n.mtu)
                .or_else(|| Some(a.active_mtu_bytes()).filter(|&m| m > 0)),
            mac: ctx.port_mac(port),
        })
    }

    fn events(&self) -> Result<LinkEvents> {
        LinkEvents::rdma(&self.device, self.port)
    }
}

impl LinkEvents {
    /// Watches port `port` of RDMA device `device` (on a context of its own).
    ///
    /// # Errors
    /// What opening the device reports.
    pub fn rdma(device: &str, port: u8) -> Result<LinkEvents> {
        let ctx = super::device::open(device)?;
        Ok(LinkEvents::from_port(
            &format!("{device} port {port}"),
            Box::new(RdmaEvents { ctx, port }),
        ))
    }
}

/// The device's asynchronous event queue, read for one port's events.
struct RdmaEvents {
    ctx: Context,
    port: u8,
}

impl PortEvents for RdmaEvents {
    fn fd(&self) -> RawFd {
        self.ctx.async_fd()
    }

    fn read(&mut self, out: &mut VecDeque<LinkEvent>) -> Result<()> {
        let e = self.ctx.get_async_event()?;
        use super::ffi::ibv_event_type as t;
        let mine = e.port.is_none_or(|p| p == self.port);
        let ev = match e.event_type {
            x if x == t::IBV_EVENT_PORT_ERR as u32 && mine => Some(LinkEvent::LinkDown),
            x if x == t::IBV_EVENT_PORT_ACTIVE as u32 && mine => Some(LinkEvent::LinkUp),
            x if x == t::IBV_EVENT_DEVICE_FATAL as u32 => Some(LinkEvent::DeviceFatal),
            _ => None,
        };
        out.extend(ev);
        Ok(())
    }
}
