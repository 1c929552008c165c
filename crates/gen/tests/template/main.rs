//! The traffic generator's frame templates, checked by independent parsers: pnet_packet and
//! tshark.

mod pnet;
mod tshark;
