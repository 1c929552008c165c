//! The kernel's half of the smoltcp tests (`examples/smoltcp_echo` on the rawq side): a TCP
//! client that sends a known stream and checks its echo, and a TCP echo server, each on a
//! thread inside a namespace, with deadlines (a hang fails the test); and [`Exchange`], one
//! whole run of the example against them, checked as every smoltcp test checks it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::NetnsPair;

/// The i-th byte of the stream (the example's `pattern`).
pub fn pattern(i: usize) -> u8 {
    (i * 7 + i / 251) as u8
}

/// The first `n` bytes of the stream.
pub fn stream(n: usize) -> Vec<u8> {
    (0..n).map(pattern).collect()
}

/// From a thread in namespace `ns`: connects to `to` (retrying refusals and timeouts for up to
/// 15 s: the far side may still be resolving ARP), sends `n` bytes of the stream while reading
/// the echo, shuts its sending half, reads to the end, and returns what came back.
pub fn kernel_client(p: &NetnsPair, ns: &str, to: SocketAddr, n: usize) -> Vec<u8> {
    p.run_in(ns, move || {
        let end = Instant::now() + Duration::from_secs(15);
        let s = loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(3)) {
                Ok(s) => break s,
                Err(e) if Instant::now() < end => {
                    eprintln!("connect {to}: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("connect {to} for 15 s: {e}"),
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            w.write_all(&stream(n))?;
            w.shutdown(Shutdown::Write)
        });
        let mut got = Vec::with_capacity(n);
        let mut r = s;
        // A failure shows as a short echo (the caller compares), with the cause here.
        if let Err(e) = r.read_to_end(&mut got) {
            eprintln!(
                "reading the echo from {to}: {e} (after {} bytes)",
                got.len()
            );
        }
        if let Err(e) = writer.join().unwrap() {
            eprintln!("sending the stream to {to}: {e}");
        }
        got
    })
}

/// A TCP echo server on `0.0.0.0:port` in namespace `ns` (listening when this returns):
/// echoes one connection until the client closes, closes, and returns the bytes it echoed.
/// It waits 300 s at most for the connection (the emulator may be built first).
pub fn kernel_echo_server(
    p: &NetnsPair,
    ns: &str,
    port: u16,
) -> JoinHandle<std::io::Result<Vec<u8>>> {
    let l = p
        .run_in(ns, move || TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
        .expect("listen in the namespace");
    std::thread::spawn(move || {
        l.set_nonblocking(true)?;
        let end = Instant::now() + Duration::from_secs(300);
        let (mut s, _) = loop {
            match l.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        let mut all = Vec::new();
        let mut buf = [0u8; 16384];
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n])?;
            all.extend_from_slice(&buf[..n]);
        }
        s.shutdown(Shutdown::Write)?;
        Ok(all)
    })
}

/// Starts `cmd` (stdout piped) and waits for its `ready` line (returned in `.2`); panics with
/// its output if it ends first.
pub fn start_ready(
    mut cmd: Command,
) -> (Child, std::io::BufReader<std::process::ChildStdout>, String) {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the example");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if !line.starts_with("ready") {
        let o = super::emu::wait_for(child, Duration::from_secs(5));
        panic!(
            "the example did not open its port: {line}{}",
            super::emu::text(&o)
        );
    }
    (child, out, line.trim().to_string())
}

/// Waits (120 s at most: past the example's own `--timeout`) for a child [`start_ready`]
/// started; asserts it succeeded and returns the rest of its stdout.
pub fn finish(child: Child, mut out: std::io::BufReader<std::process::ChildStdout>) -> String {
    let o = super::emu::wait_for(child, Duration::from_secs(120));
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(
        o.status.success(),
        "the example failed ({}): {rest}\n{}",
        o.status,
        super::emu::text(&o)
    );
    rest
}

/// The example smoltcp_echo.
pub fn example() -> PathBuf {
    super::example("smoltcp_echo")
}

/// One run of the example against the kernel's TCP in namespace `ns` of `pair`, `bytes` each
/// way, checked as every smoltcp test checks it: the example's `ready` line (what it says of
/// its port) contains `ready_says`, the example reports every byte echoed (`echoed N`) or
/// verified (`verified N`), and the kernel's side got the whole stream back, or echoed it.
pub struct Exchange<'a> {
    /// The namespaces.
    pub pair: &'a NetnsPair,
    /// The kernel's namespace (its client or echo server runs there).
    pub ns: String,
    /// Bytes each way.
    pub bytes: usize,
    /// What the example's `ready` line must contain: its port's largest frame and who
    /// computes the transmit checksums (smoltcp, or the device).
    pub ready_says: &'a str,
}

impl Exchange<'_> {
    /// smoltcp serves: `example` (the example with `--listen PORT` among its options) starts
    /// and opens its port, `up` runs (the emulated NIC's TAP gets its address there), then the
    /// kernel's client connects to `to` (smoltcp's address and that port), sends the stream
    /// and reads the echo.
    pub fn smoltcp_serves(&self, example: Command, up: impl FnOnce(), to: SocketAddr) {
        let (child, out, ready) = start_ready(example);
        up();
        let got = kernel_client(self.pair, &self.ns, to, self.bytes);
        let rest = finish(child, out);
        let bytes = self.bytes;
        assert!(ready.contains(self.ready_says), "{ready}");
        assert_eq!(rest.trim(), format!("echoed {bytes}"));
        assert!(
            got == stream(bytes),
            "the echo differs: {} of {bytes} bytes",
            got.len()
        );
    }

    /// smoltcp connects: the kernel's echo server listens on `port` (in `ns`), then `example`
    /// (the example with `--connect ADDR:PORT --bytes N` among its options, the kernel's
    /// address and that port) starts and opens its port, `up` runs, and the example sends the
    /// stream and checks the echo.
    pub fn smoltcp_connects(&self, port: u16, example: Command, up: impl FnOnce()) {
        let server = kernel_echo_server(self.pair, &self.ns, port);
        let (child, out, ready) = start_ready(example);
        up();
        let rest = finish(child, out);
        let bytes = self.bytes;
        assert!(ready.contains(self.ready_says), "{ready}");
        assert_eq!(rest.trim(), format!("verified {bytes}"));
        let echoed = server.join().unwrap().expect("the kernel's echo server");
        assert!(
            echoed == stream(bytes),
            "the kernel got {} bytes, not the stream",
            echoed.len()
        );
    }
}
