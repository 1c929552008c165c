//! The plan for varying the frame the kernel copies: where the varying fields sit and the sums
//! of everything constant. The generator (`rawq-gen`'s `live_plan`) builds it from a frame spec.

/// Where the varying fields sit in the frame and the sums of everything constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivePlan {
    /// Frame length.
    pub len: usize,
    /// Offset of the UDP header.
    pub l4: usize,
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// Number of flows.
    pub flows: u32,
    /// The flows vary the source address (its last 16-bit word); else the source port.
    pub src_ip: bool,
    /// Value of the varying 16-bit word for flow 0 (source port, or last word of the source
    /// address).
    pub flow_base: u16,
    /// Offset of that word.
    pub flow_off: usize,
    /// Flows varying the source address with the destination in the source's /16 (/112): the
    /// flow index from which the word steps over the destination's (`index + 1` from there
    /// on), so that no frame is sent from the destination address.
    pub flow_skip: Option<u16>,
    /// Sequence stamps on.
    pub stamp: bool,
    /// UDP checksum sum (pseudo-header included) of every constant word, folded to 16 bits, not
    /// inverted.
    pub udp_sum: u16,
    /// IPv4 header sum without the checksum and the varying source word (only used when the
    /// source address varies), folded, not inverted.
    pub ip_sum: u16,
}

impl LivePlan {
    /// True if the program must write anything into the frame.
    pub fn writes(&self) -> bool {
        self.flows > 1 || self.stamp
    }

    /// Checks the plan against `frame`: every field the program writes lies inside it.
    pub(super) fn check(&self, frame: &[u8]) -> crate::Result<()> {
        let pay = self.l4 + super::UDP + if self.stamp { 16 } else { 0 };
        let flow_end = if self.flows > 1 { self.flow_off + 2 } else { 0 };
        if frame.len() != self.len || pay > self.len || flow_end > self.len {
            return Err(crate::Error::Config(format!(
                "live plan for a {}-byte frame (fields up to byte {}) given a {}-byte frame: \
                 build both with rawq-gen's live_plan",
                self.len,
                pay.max(flow_end),
                frame.len()
            )));
        }
        if self.len > super::MAX_FRAME {
            return Err(crate::Error::Config(format!(
                "frame size {}: the live engine sends frames of at most {} bytes (one page \
                 with the kernel's headroom)",
                self.len,
                super::MAX_FRAME
            )));
        }
        Ok(())
    }
}
