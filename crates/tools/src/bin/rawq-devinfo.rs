//! Lists the RDMA devices, their ports, link layers, MAC addresses and the capabilities rawq
//! uses. With no device it prints why (and what to do) and exits with status 1.
//!
//! ```text
//! cargo run -p rawq-tools --bin rawq-devinfo
//! ```

use clap::Parser;

/// devinfo: lists the RDMA devices, their ports (state, link layer, MAC, MTU, netdev) and the
/// capabilities rawq uses (flow steering, RSS, TSO, mlx5 Direct Verbs). With no device it
/// says why and exits with status 1.
#[derive(Parser)]
#[command(name = "devinfo", version)]
struct Args {}

fn main() {
    Args::parse();
    match rawq::ibverbs::describe_all() {
        Ok(listing) => print!("{listing}"),
        Err(e) => {
            eprintln!("devinfo: {e}");
            std::process::exit(1);
        }
    }
}
