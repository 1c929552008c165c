//! AF_XDP on veth pairs between throwaway namespaces: ports and their XDP program, the
//! steering program against the reference matcher (`BPF_PROG_TEST_RUN`), the rings, VLAN
//! stripping, transmit offloads, and examples/xdp_tokio.

mod offloads;
mod port;
mod port_attach;
mod prog;
mod rings;
mod tokio_example;
mod vlan;
