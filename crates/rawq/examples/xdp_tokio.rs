//! Receives a steered UDP flow through tokio with `rawq::adapters::tokio::AsyncQueue`: its
//! `rx_burst` awaits frames, the task sleeping in the runtime's epoll on the queue's
//! notification fd until they arrive (no core spun; the adapter follows the order that loses no
//! wake-up, see `rawq::queue`).
//!
//! ```sh
//! cargo run --example xdp_tokio --features tokio -- --dev veth1 --port 9000 --count 100 --timeout 10
//! ```
//!
//! Prints `ready` once the port is open, then `received N` and exits 0 once `--count` frames
//! came; exits 1 with the cause on an error or when `--timeout` passes first. With `--idle-ms
//! MS` it prints `idle` once it has `--idle-after` frames, then sleeps in the adapter: the
//! test measures the CPU time it spends while nothing is sent.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rawq::adapters::tokio::AsyncQueue;
use rawq::{Backend, Port};

/// Receives `--count` frames of UDP port `--port` on `--dev` over AF_XDP, sleeping in tokio.
#[derive(Debug, Parser)]
struct Args {
    /// The interface.
    #[arg(long)]
    dev: String,
    /// UDP destination port steered to rawq.
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Frames to receive before exiting.
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Print `idle` once this many frames came (for a test that then measures the CPU time
    /// spent waiting); 0: never.
    #[arg(long, default_value_t = 0)]
    idle_after: u64,
}

async fn receive(a: &Args) -> rawq::Result<u64> {
    let rule = format!("udp dst-port {} -> queue 0", a.port).parse()?;
    let mut port = Port::builder(Backend::Xdp {
        ifname: a.dev.clone(),
    })
    .queues(1)
    .rule(rule)
    .open()?;
    let mut q = AsyncQueue::new(port.take_queues().remove(0))?;
    println!("ready");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout);
    let mut burst = Vec::with_capacity(64);
    let mut got = 0u64;
    while got < a.count {
        let n = match tokio::time::timeout_at(deadline, q.rx_burst(&mut burst, 64)).await {
            Ok(n) => n?,
            Err(_) => {
                return Err(rawq::Error::Config(format!(
                    "timed out after {} s with {got} of {} frames",
                    a.timeout, a.count
                )))
            }
        };
        burst.clear();
        let before = got;
        got += n as u64;
        if a.idle_after > 0 && before < a.idle_after && got >= a.idle_after {
            println!("idle");
        }
    }
    Ok(got)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xdp_tokio: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(receive(&a)) {
        Ok(n) => {
            println!("received {n}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xdp_tokio: {e}");
            ExitCode::FAILURE
        }
    }
}
