//! Lists the RDMA devices, their ports, link layers, MAC addresses and the capabilities rawq
//! uses. With no device it prints why (and what to do) and exits with status 1.
//!
//! ```text
//! cargo run --example devinfo
//! ```

fn main() {
    match rawq::ibverbs::describe_all() {
        Ok(listing) => print!("{listing}"),
        Err(e) => {
            eprintln!("devinfo: {e}");
            std::process::exit(1);
        }
    }
}
