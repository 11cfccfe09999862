//! The baselines written in the repo: a raw UDP ping-pong and a TCP
//! connect/accept/close loop (child roles, same protocol as the RDMA sides),
//! and the iperf3 runner.

use super::child::{emit, expect, stop_flag};
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server side's start: announces its port and that it is ready; the
/// flag is set when the parent says stop.
fn serve(port: u16) -> Arc<AtomicBool> {
    emit(&format!("info {port}"));
    let stop = stop_flag();
    emit("ready");
    stop
}

/// A client side's start: announces no port of its own and reads the
/// server's from the `peer <port>` line.
fn server_port() -> Result<u16> {
    emit("info 0");
    let l = expect("peer")?;
    l.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("bad peer line {l:?}"))
}

/// UDP echo server, busy-polling a non-blocking socket (as the RDMA side does).
pub fn udp_echo(ip: IpAddr) -> Result<()> {
    let s = UdpSocket::bind(SocketAddr::new(ip, 0))?;
    s.set_nonblocking(true)?;
    let stop = serve(s.local_addr()?.port());
    let mut buf = [0u8; 2048];
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        match s.recv_from(&mut buf) {
            Ok((n, from)) => {
                idle = 0;
                let _ = s.send_to(&buf[..n], from);
            }
            Err(_) => {
                idle += 1;
                if idle > 1_000_000 {
                    // Nobody is pinging: stop spinning so the other benchmarks
                    // have the machine.
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    Ok(())
}

/// UDP ping client: `size`-byte datagrams, one in flight, busy-polling.
pub fn udp_ping(ip: IpAddr, server: IpAddr, size: usize, iters: u64) -> Result<()> {
    let s = UdpSocket::bind(SocketAddr::new(ip, 0))?;
    s.set_nonblocking(true)?;
    let port = server_port()?;
    s.connect(SocketAddr::new(server, port))?;
    emit("ready");
    expect("go")?;
    let msg = vec![0x5au8; size];
    let mut buf = [0u8; 2048];
    let warm = iters / 10 + 100;
    let mut t0 = Instant::now();
    let mut rtt = Vec::with_capacity(iters as usize);
    let mut lost = 0u32;
    for i in 0..warm + iters {
        if i == warm {
            t0 = Instant::now();
        }
        let t = Instant::now();
        s.send(&msg)?;
        loop {
            match s.recv(&mut buf) {
                Ok(_) => {
                    if i >= warm {
                        rtt.push(t.elapsed().as_nanos() as u64);
                    }
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // UDP may drop under load: resend (the sample counts).
                    if t.elapsed() > Duration::from_millis(200) * (lost + 1) {
                        lost += 1;
                        if lost > 50 {
                            bail!("UDP ping: more than 50 losses");
                        }
                        s.send(&msg)?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    emit(&format!("result {iters} {secs} {}", median_ns(&mut rtt)));
    Ok(())
}

/// The median of round-trip samples in nanoseconds.
pub fn median_ns(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let m = v.len() / 2;
    *v.select_nth_unstable(m).1
}

/// TCP server: accept, read the 8-byte message, close (first, so TIME_WAIT
/// stays on the server's side and the client never runs out of ports).
pub fn tcp_accept(ip: IpAddr) -> Result<()> {
    let l = TcpListener::bind(SocketAddr::new(ip, 0))?;
    l.set_nonblocking(true)?;
    let stop = serve(l.local_addr()?.port());
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let (mut c, _) = match l.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Blocking accept with a timeout: poll the listener.
                let mut p = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&l),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live pollfd.
                unsafe { libc::poll(&mut p, 1, 50) };
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        c.set_nonblocking(false)?;
        c.set_nodelay(true)?;
        let _ = c.read_exact(&mut buf[..8]);
    }
    Ok(())
}

/// TCP client: connect, write 8 bytes, read to the server's EOF, close — for
/// `secs`; prints `result <cycles> <seconds>`.
pub fn tcp_connect(ip: IpAddr, server: IpAddr, secs: f64) -> Result<()> {
    let port = server_port()?;
    emit("ready");
    expect("go")?;
    let dst = SocketAddr::new(server, port);
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut buf = [0u8; 8];
    while t0.elapsed().as_secs_f64() < secs {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        // Pick the port at connect time, so that ports in TIME_WAIT are
        // reused (net.ipv4.tcp_tw_reuse, on for loopback by default) and a
        // long run does not run out of them.
        // SAFETY: plain integer option on a live socket.
        unsafe {
            let one: libc::c_int = 1;
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        s.bind(&SocketAddr::new(ip, 0).into())?;
        s.connect(&dst.into())?;
        let mut c: TcpStream = s.into();
        c.set_nodelay(true)?;
        c.write_all(&[1u8; 8])?;
        let _ = c.read(&mut buf)?;
        n += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    emit(&format!("result {n} {secs}"));
    Ok(())
}

/// Whether iperf3 is on the PATH.
pub fn have_iperf3() -> bool {
    Command::new("iperf3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Largest write iperf3 accepts (`-l`).
pub const IPERF3_MAX_BLOCK: usize = 1 << 20;

/// A free TCP port on `ip` (bound then released).
fn free_port(ip: IpAddr) -> Result<u16> {
    Ok(TcpListener::bind(SocketAddr::new(ip, 0))?
        .local_addr()?
        .port())
}

/// One iperf3 TCP stream from `client` to `server` for `secs`, writes of
/// `len` bytes (iperf3's default 128 KiB when `None`); bytes per second as
/// the receiver counted them.
pub fn iperf3(client: IpAddr, server: IpAddr, secs: f64, len: Option<usize>) -> Result<f64> {
    let port = free_port(server)?.to_string();
    let mut srv = Command::new("iperf3")
        .args(["-s", "-1", "-B", &server.to_string(), "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("iperf3 (scripts/setup.sh installs it)")?;
    let mut out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(50));
        let mut c = Command::new("iperf3");
        c.args(["-c", &server.to_string(), "-B", &client.to_string()])
            .args(["-p", &port, "-J", "-t", &format!("{secs}")]);
        if let Some(l) = len {
            // iperf3 refuses blocks over 1 MiB.
            c.args(["-l", &l.min(IPERF3_MAX_BLOCK).to_string()]);
        }
        let o = c.stderr(Stdio::null()).output()?;
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
            out = Some(bps / 8.0);
            break;
        }
        let err = v["error"].as_str().unwrap_or("");
        if !err.contains("connect") {
            let _ = srv.kill();
            let _ = srv.wait();
            bail!("iperf3 failed: {err}");
        }
    }
    let _ = srv.kill();
    let _ = srv.wait();
    out.context("iperf3 server never came up")
}
