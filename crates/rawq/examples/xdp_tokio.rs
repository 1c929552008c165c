//! Receives a steered UDP flow through tokio: the queue's notification fd in an `AsyncFd`, so
//! that the task sleeps in the runtime's epoll until frames arrive (no core spun), following the
//! order that loses no wake-up (see `rawq::queue`): drain, arm, re-poll, sleep, take the
//! notification.
//!
//! ```sh
//! cargo run --example xdp_tokio -- --dev veth1 --port 9000 --count 100 --timeout 10
//! ```
//!
//! Prints `ready` once the port is open, then `received N` and exits 0 once `--count` frames
//! came; exits 1 with the cause on an error or when `--timeout` passes first.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use io::Interest;
use rawq::{Backend, Port};
use tokio::io::{self, unix::AsyncFd};

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
}

async fn receive(a: &Args) -> rawq::Result<u64> {
    let rule = format!("udp dst-port {} -> queue 0", a.port).parse()?;
    let mut port = Port::builder(Backend::Xdp {
        ifname: a.dev.clone(),
    })
    .queues(1)
    .rule(rule)
    .open()?;
    let mut q = port.take_queues().remove(0);
    // tokio gets a duplicate of the queue's fd (the same socket or channel): it owns and closes
    // that one, the queue its own.
    let owned = q
        .rx_fd()?
        .try_clone_to_owned()
        .map_err(|e| rawq::Error::os("dup(queue fd)", e))?;
    // SAFETY: `owned` is a valid descriptor the AsyncFd owns; nothing else closes or replaces
    // it while it is registered.
    let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
        .map_err(|e| rawq::Error::os("AsyncFd::register(queue fd)", e.into()))?;
    println!("ready");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout);
    let mut burst = Vec::with_capacity(64);
    let mut got = 0u64;
    loop {
        // 1. Drain.
        loop {
            let n = q.rx_burst(&mut burst, 64);
            got += n as u64;
            burst.clear();
            if n == 0 {
                break;
            }
        }
        if got >= a.count {
            return Ok(got);
        }
        // 2. Arm; 3. re-poll: a frame that came in between is taken here.
        q.rx_arm()?;
        if q.rx_burst(&mut burst, 64) > 0 {
            got += burst.len() as u64;
            burst.clear();
            continue;
        }
        // 4. Sleep in the runtime until the fd is readable, then take the notification.
        let mut guard = match tokio::time::timeout_at(deadline, fd.readable()).await {
            Ok(r) => r.map_err(|e| rawq::Error::os("AsyncFd::readable", e))?,
            Err(_) => {
                return Err(rawq::Error::Config(format!(
                    "timed out after {} s with {got} of {} frames",
                    a.timeout, a.count
                )))
            }
        };
        guard.clear_ready();
        q.rx_ack()?;
    }
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
