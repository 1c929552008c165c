//! Lists the RDMA devices, their ports, link layers, MAC addresses and the capabilities rawq
//! uses. With no device it prints why (and what to do) and exits with status 1.
//!
//! ```text
//! cargo run -p rawq-tools --bin rawq-devinfo
//! ```

#[macro_use]
extern crate rawq_tools;

use clap::Parser;

/// devinfo: lists the RDMA devices, their ports (state, link layer, MAC, MTU, netdev) and the
/// capabilities rawq uses (flow steering, RSS, TSO, mlx5 Direct Verbs). With no device it
/// says why and exits with status 1.
#[derive(Parser)]
#[command(name = "devinfo", version)]
struct Args {}

fn main() -> std::process::ExitCode {
    if let Err(code) = rawq_tools::generate::matches_of(<Args as clap::CommandFactory>::command()) {
        return code;
    }
    match rawq::describe_devices() {
        Ok(listing) => {
            out!("{listing}");
            rawq_tools::out::status()
        }
        Err(e) => {
            say!("devinfo: {e}");
            std::process::exit(1);
        }
    }
}
