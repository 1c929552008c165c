//! A TCP echo server or client in smoltcp over a rawq port (`rawq::adapters::smoltcp`): the
//! kernel keeps the interface's own traffic; the frames to smoltcp's MAC address (and the
//! broadcasts, for ARP) are steered to queue 0, where smoltcp's Ethernet interface answers.
//!
//! ```sh
//! # echo server on 10.0.0.2:7000 (smoltcp's own MAC 02:00:00:00:00:02):
//! cargo run --example smoltcp_echo --features smoltcp -- -b xdp -d veth1 \
//!     --ip 10.0.0.2/24 --listen 7000
//! # client: sends 100000 bytes to an echo server at 10.0.0.1:7000, checks what comes back:
//! cargo run --example smoltcp_echo --features smoltcp -- -b xdp -d veth1 \
//!     --ip 10.0.0.2/24 --connect 10.0.0.1:7000 --bytes 100000
//! ```
//!
//! Prints `ready` once the port is open (with the largest frame and who computes the transmit
//! checksums: `ready: max frame 1514, tx checksums by the device|smoltcp`); the server then prints `echoed N` when its peer has
//! closed, the client `verified N` when all N bytes came back equal. Exits 1 with the cause on
//! an error, a difference, or when `--timeout` passes first. The bytes are
//! `(i * 7 + i / 251) as u8` for the i-th byte (not a multiple of any small period).
//!
//! On AF_XDP the broadcast rule takes every broadcast frame from the kernel (AF_XDP cannot copy
//! a frame to both); on dv and verbs the kernel keeps a copy. A NIC (not a veth) delivers
//! frames to smoltcp's MAC only in promiscuous mode or with that MAC added to the interface.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rawq::adapters::smoltcp::RawqDevice;
use rawq::{Backend, Port};
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Cidr};

/// A smoltcp TCP echo server (--listen) or client (--connect) over a rawq port.
#[derive(Debug, Parser)]
struct Args {
    /// Backend: xdp, dv, verbs, model, loopback.
    #[arg(short, long, default_value = "xdp")]
    backend: String,
    /// Interface (xdp) or RDMA device (dv, verbs).
    #[arg(short, long)]
    dev: String,
    /// smoltcp's IPv4 address and prefix, e.g. 10.0.0.2/24.
    #[arg(long, value_parser = |s: &str| s.parse::<Ipv4Cidr>().map_err(|()| "want A.B.C.D/LEN"))]
    ip: Ipv4Cidr,
    /// smoltcp's MAC address (not the interface's: the kernel keeps that one).
    #[arg(long, default_value = "02:00:00:00:00:02",
          value_parser = |s: &str| s.parse::<EthernetAddress>().map_err(|()| "want aa:bb:cc:dd:ee:ff"))]
    mac: EthernetAddress,
    /// Serve: echo what one client sends on this TCP port, until it closes.
    #[arg(long, conflicts_with = "connect")]
    listen: Option<u16>,
    /// Connect to an echo server at IP:PORT, send --bytes bytes and check the echo.
    #[arg(long)]
    connect: Option<std::net::SocketAddrV4>,
    /// Bytes the client sends.
    #[arg(long, default_value_t = 100_000)]
    bytes: usize,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

/// The i-th byte of the stream.
fn pattern(i: usize) -> u8 {
    (i * 7 + i / 251) as u8
}

fn run(a: &Args) -> Result<String, String> {
    if a.listen.is_none() && a.connect.is_none() {
        return Err("give --listen PORT or --connect IP:PORT".into());
    }
    let backend = Backend::named(&a.backend, &a.dev, 1).map_err(|e| e.to_string())?;
    let rules = [
        format!(
            "eth dst {} -> queue 0",
            a.mac.0.map(|b| format!("{b:02x}")).join(":")
        ),
        "eth dst ff:ff:ff:ff:ff:ff -> queue 0".to_string(),
    ];
    let mut b = Port::builder(backend).queues(1);
    for r in &rules {
        b = b.rule(
            r.parse()
                .map_err(|e: rawq::flow::RuleError| e.to_string())?,
        );
    }
    let mut port = b.open().map_err(|e| e.to_string())?;
    let q = port.take_queues().remove(0);
    let mut dev = RawqDevice::new(&port, q).map_err(|e| e.to_string())?;

    let mut cfg = Config::new(a.mac.into());
    cfg.random_seed = u64::from(std::process::id());
    let mut iface = Interface::new(cfg, &mut dev, Instant::now());
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(IpCidr::Ipv4(a.ip));
    });
    let mut sockets = SocketSet::new(Vec::new());
    let buf = || tcp::SocketBuffer::new(vec![0u8; 64 * 1024]);
    let h = sockets.add(tcp::Socket::new(buf(), buf()));
    {
        let s = sockets.get_mut::<tcp::Socket>(h);
        if let Some(port) = a.listen {
            s.listen(port).map_err(|e| format!("listen: {e}"))?;
        } else if let Some(to) = a.connect {
            let remote = IpEndpoint::new(IpAddress::Ipv4(*to.ip()), to.port());
            s.connect(
                iface.context(),
                remote,
                49152 + (std::process::id() % 8192) as u16,
            )
            .map_err(|e| format!("connect: {e}"))?;
        }
    }
    let by = match dev.tx_checksums_by_device() {
        (true, true) => "the device",
        (false, false) => "smoltcp",
        _ => "the device (IPv4) and smoltcp (TCP/UDP)",
    };
    println!("ready: max frame {}, tx checksums by {by}", dev.max_frame());

    let deadline = std::time::Instant::now() + Duration::from_secs(a.timeout);
    let (mut sent, mut got, mut echoed) = (0usize, 0usize, 0usize);
    let mut was_open = false;
    loop {
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {} s (sent {sent}, received {got}, echoed {echoed}; tcp state {})",
                a.timeout,
                sockets.get::<tcp::Socket>(h).state()
            ));
        }
        let now = Instant::now();
        iface.poll(now, &mut dev, &mut sockets);
        let s = sockets.get_mut::<tcp::Socket>(h);
        if a.listen.is_some() {
            // Connected (not merely a SYN received, when nothing can be received yet).
            was_open |= s.may_send();
            // Echo: what came in goes back out, as far as the send buffer takes it.
            while s.can_recv() && s.send_capacity() > s.send_queue() {
                let room = s.send_capacity() - s.send_queue();
                let mut tmp = [0u8; 4096];
                let n = s
                    .recv_slice(&mut tmp[..room.min(4096)])
                    .map_err(|e| format!("recv: {e}"))?;
                let m = s.send_slice(&tmp[..n]).map_err(|e| format!("send: {e}"))?;
                echoed += m;
                if n == 0 {
                    break;
                }
            }
            // The client closed and everything went back: close too, and end once the
            // client has our FIN (its ACK of it moves the socket to Closed).
            if was_open && !s.may_recv() && s.send_queue() == 0 {
                s.close();
                if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    return Ok(format!("echoed {echoed}"));
                }
            }
        } else {
            if s.can_send() && sent < a.bytes {
                sent += s
                    .send(|room| {
                        let n = room.len().min(a.bytes - sent);
                        for (i, b) in room[..n].iter_mut().enumerate() {
                            *b = pattern(sent + i);
                        }
                        (n, n)
                    })
                    .map_err(|e| format!("send: {e}"))?;
            }
            if s.can_recv() {
                let start = got;
                let bad = s
                    .recv(|data| {
                        let bad = data
                            .iter()
                            .enumerate()
                            .find(|&(i, &b)| b != pattern(start + i))
                            .map(|(i, _)| start + i);
                        (data.len(), (data.len(), bad))
                    })
                    .map_err(|e| format!("recv: {e}"))?;
                if let Some(i) = bad.1 {
                    return Err(format!("byte {i} of the echo differs"));
                }
                got += bad.0;
            }
            if got >= a.bytes {
                // Close, and end once the server has our FIN and closed too.
                s.close();
                if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    return Ok(format!("verified {got}"));
                }
            } else if !s.is_open() && sent > 0 {
                return Err(format!(
                    "the connection closed after {got} of {} bytes came back",
                    a.bytes
                ));
            }
        }
        // Sleep until a frame comes or smoltcp has a timer due (a retransmission, ...).
        let wait = iface
            .poll_delay(Instant::now(), &sockets)
            .map_or(Duration::from_millis(100), |d| {
                Duration::from_micros(d.total_micros())
            })
            .min(if dev.tx_pending() > 0 {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(100)
            });
        match dev.queue_mut().rx_wait(Some(wait)) {
            Ok(_) => {}
            Err(rawq::Error::Unsupported(_)) => std::thread::yield_now(),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("smoltcp_echo: {e}");
            ExitCode::FAILURE
        }
    }
}
