//! What every backend's `open` hands back to the port: its queues, its description and its
//! control-path objects ([`Opened`]), and what the port asks of those objects ([`Control`]).
//!
//! This sits below the backends with [`crate::config`]: the backends implement and return these
//! types, and [`crate::port`] (which picks the backend and drives it) uses them, so that no
//! backend imports the module that imports it.

use std::any::Any;

use crate::config::PortInfo;
use crate::error::Result;
use crate::flow::Rule;
use crate::queue::Queue;

/// What a backend's `open` returns: the port's queues, its description, and its control-path
/// objects, which live as long as the port.
pub(crate) type Opened = (Vec<Queue>, PortInfo, Box<dyn Control>);

/// A backend's control-path objects (flows, programs, device objects), kept by the port, and
/// what it does with rules added and removed while the port runs. Rules are known to the
/// backend by the number [`RuleHandle::id`](crate::port::RuleHandle::id) gives them; the rules
/// given at open are numbered 0, 1, ... in their order. The port has validated every rule it
/// passes in and checks every number it passes to `remove_rule`.
pub(crate) trait Control: Send + 'static {
    /// The objects themselves (for the backend-specific accessors of
    /// [`Port`](crate::port::Port), which only the mlx5 backends have so far).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    fn as_any(&self) -> &dyn Any;

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
}
