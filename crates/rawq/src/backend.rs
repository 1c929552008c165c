//! What every backend's `open` hands back to the port: its queues, its description and its
//! control-path objects ([`Opened`]), and what the port asks of those objects ([`Control`]).
//!
//! This sits below the backends with [`crate::config`]: the backends implement and return these
//! types, and [`crate::port`] (which picks the backend and drives it) uses them, so that no
//! backend imports the module that imports it. The port asks every question through
//! [`Control`] (rules, link, device counters, clock): it never asks which backend it has.
//! What a backend cannot do it refuses in its own `open` (e.g. loopback refuses `vlan_strip`),
//! and what it does it reports in [`PortInfo::offloads`](crate::config::PortInfo::offloads).
//! What only the mlx5 backends have (a device clock, the model's device) they fill in at open
//! (`crate::dv::Mlx5Extras`), so that this contract names no backend's type.

use crate::config::PortInfo;
use crate::counters::DeviceCounters;
use crate::error::Result;
use crate::flow::Rule;
use crate::queue::Queue;

/// What a backend's `open` returns: the port's queues, its description, and its control-path
/// objects, which live as long as the port.
pub(crate) type Opened = (Vec<Queue>, PortInfo, Box<dyn Control>);

/// A backend's control-path objects (flows, programs, device objects), kept by the port, and
/// what the port asks of them: rules added and removed while the port runs, where its link is,
/// what its device counted. Rules are known to the backend by the number
/// [`RuleHandle::id`](crate::port::RuleHandle::id) gives them; the rules given at open are
/// numbered 0, 1, ... in their order. The port has validated every rule it passes in and checks
/// every number it passes to `remove_rule`.
pub(crate) trait Control: Send + 'static {
    /// Installs `rule` as number `id`, after all the rules installed before it: among equal
    /// priorities it comes last.
    fn add_rule(&mut self, id: u64, rule: &Rule) -> Result<()>;

    /// Removes rule number `id` (installed, never removed before).
    fn remove_rule(&mut self, id: u64) -> Result<()>;

    /// Frames rule number `id` has taken since it was installed, where the backend counts.
    fn rule_hits(&self, id: u64) -> Result<Option<u64>> {
        let _ = id;
        Ok(None)
    }

    /// Where the port's link state and link events are read (default: a link that is always
    /// up, of no MTU, as loopback's).
    fn link_source(&self) -> crate::link::Source {
        crate::link::Source::Always { mtu: None }
    }

    /// The device's own drop counters as they read now (absolute: the port subtracts what
    /// they read when it opened); all `None` (the default) where the backend has none.
    fn device_counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}
