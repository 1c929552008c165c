//! AF_XDP on veth pairs between throwaway namespaces: ports and their XDP program, the
//! steering program against the reference matcher (`BPF_PROG_TEST_RUN`), VLAN stripping,
//! transmit offloads, examples/xdp_tokio (the tokio adapter) and examples/smoltcp_echo (smoltcp's
//! TCP against the kernel's). (A million frames through the rings is
//! `tests/xdp_rings.rs`, alone.)

mod offloads;
mod port;
mod port_attach;
mod prog;
mod smoltcp_tcp;
mod tokio_example;
mod vlan;
