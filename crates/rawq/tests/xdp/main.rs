//! AF_XDP on veth pairs between throwaway namespaces: ports and their XDP program, the
//! steering program against the reference matcher (`BPF_PROG_TEST_RUN`), VLAN stripping,
//! transmit offloads, and examples/xdp_tokio. (A million frames through the rings is
//! `tests/xdp_rings.rs`, alone.)

mod offloads;
mod port;
mod port_attach;
mod prog;
mod tokio_example;
mod vlan;
