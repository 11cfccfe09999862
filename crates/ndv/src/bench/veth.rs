//! The rows a user meets: two network namespaces joined by a veth pair with
//! an Ethernet MTU (1500 bytes, so the port's active MTU is 1024), the tools
//! run with their defaults.
//!
//! | | ndverbs | baseline |
//! |---|---|---|
//! | R1 | `ndv perf write_bw -s 65536 -D secs` (defaults otherwise) | one iperf3 TCP stream |
//! | R2 | `ndv perf send_lat -s 8 -n iters`, t_typical | busy-polling UDP ping-pong, median half round trip |
//! | R6 | bytes moved per CPU-second of both processes (user + system) in R1's runs | the same of iperf3's |
//!
//! Creating namespaces needs root (`CAP_SYS_ADMIN`); without it the rows are
//! skipped with a line saying so. CPU time is the children's (`getrusage`
//! with `RUSAGE_CHILDREN` around each run: `ip netns exec` becomes the
//! program it runs, so both sides are this process's children).

use super::child::Peer;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The server's and the client's address on the veth pair.
const A_IP: &str = "10.97.0.1";
const B_IP: &str = "10.97.0.2";

/// Two namespaces joined by veth (MTU 1500), deleted on drop.
pub struct VethPair {
    a: String,
    b: String,
}

/// What one run measured: its figure and the CPU both sides used.
pub struct Measured {
    /// Gb/s (R1) or microseconds (R2).
    pub value: f64,
    /// Bytes moved per CPU-second of both processes (R1 only).
    pub bytes_per_cpu_s: f64,
}

fn ip(args: &[&str]) -> Result<()> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !o.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// The CPU seconds (user + system) of every child waited for so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid selector.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

impl VethPair {
    /// Creates the pair, or `Ok(None)` with the reason when this process
    /// may not (not root).
    pub fn create() -> Result<Option<VethPair>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "veth rows (R1, R2, R6) skipped: creating network namespaces needs root \
                 (run ndv bench as root for them)"
            );
            return Ok(None);
        }
        let tag = std::process::id();
        let p = VethPair {
            a: format!("ndvbench-a-{tag}"),
            b: format!("ndvbench-b-{tag}"),
        };
        ip(&["netns", "add", &p.a])?;
        ip(&["netns", "add", &p.b])?;
        ip(&[
            "link", "add", "veth0", "netns", &p.a, "type", "veth", "peer", "name", "veth0",
            "netns", &p.b,
        ])?;
        for (ns, addr) in [(&p.a, A_IP), (&p.b, B_IP)] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", "veth0", "mtu", "1500", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "veth0",
            ])?;
        }
        Ok(Some(p))
    }

    /// `program` run inside namespace `ns`.
    fn command(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    /// Waits until TCP `port` listens in the server namespace.
    fn wait_listening(&self, port: u16, server: &mut Child) -> Result<()> {
        let needle = format!(":{port} ");
        let t0 = Instant::now();
        loop {
            let o = Self::command(&self.a, "ss").arg("-ltnH").output()?;
            if String::from_utf8_lossy(&o.stdout).contains(&needle) {
                return Ok(());
            }
            if let Some(st) = server.try_wait()? {
                bail!("the server exited ({st}) before listening");
            }
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("the server did not listen on {port} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A server in A and a client in B (told A's address last), both
    /// waited for; the client's output and the CPU seconds both used.
    fn run_pair(&self, port: u16, server: &[&str], client: &[&str]) -> Result<(Output, f64)> {
        self.run_programs(port, server, client, |c| {
            c.arg(A_IP);
        })
    }

    fn run_programs(
        &self,
        port: u16,
        server: &[&str],
        client: &[&str],
        finish_client: impl FnOnce(&mut Command),
    ) -> Result<(Output, f64)> {
        let cpu0 = children_cpu();
        let mut s = Self::command(&self.a, server[0])
            .args(&server[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", server[0]))?;
        if let Err(e) = self.wait_listening(port, &mut s) {
            let _ = s.kill();
            let _ = s.wait();
            return Err(e);
        }
        let mut c = Self::command(&self.b, client[0]);
        c.args(&client[1..]);
        finish_client(&mut c);
        let out = c.output().with_context(|| format!("running {}", client[0]));
        let st = s.wait()?;
        let out = out?;
        if !out.status.success() || !st.success() {
            bail!(
                "{} failed (client {}, server {st}): {}",
                client[0],
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok((out, children_cpu() - cpu0))
    }

    /// R1 and R6 for ndverbs: `ndv perf write_bw -s 65536 -D secs`.
    pub fn write_bw(&self, ndv: &Path, secs: f64, port: u16) -> Result<Measured> {
        let ndv = ndv.to_str().context("ndv's path")?;
        let (p, d) = (port.to_string(), format!("{}", secs.ceil().max(1.0) as u32));
        let args = [
            ndv,
            "perf",
            "write_bw",
            "-s",
            "65536",
            "-D",
            &d,
            "-p",
            &p,
            "--report_gbits",
        ];
        let (out, cpu) = self.run_pair(port, &args, &args)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let row = result_row(&text).with_context(|| format!("no result row in:\n{text}"))?;
        // #bytes #iterations peak average msgrate (Gb/s with --report_gbits).
        let gbps = *row.get(3).context("BW average column")?;
        let bytes = gbps * 1e9 / 8.0 * secs.ceil().max(1.0);
        Ok(Measured {
            value: gbps,
            bytes_per_cpu_s: bytes / cpu,
        })
    }

    /// R1 and R6 for TCP: one iperf3 stream B → A for `secs`.
    pub fn iperf3(&self, secs: f64, port: u16) -> Result<Measured> {
        let p = port.to_string();
        let t = format!("{}", secs.ceil().max(1.0) as u32);
        let server = ["iperf3", "-s", "-1", "-B", A_IP, "-p", &p];
        let client = ["iperf3", "-J", "-B", B_IP, "-p", &p, "-t", &t, "-c"];
        let (out, cpu) = self.run_pair(port, &server, &client)?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let end = &v["end"]["sum_received"];
        let bps = end["bits_per_second"]
            .as_f64()
            .context("iperf3 gave no result")?;
        let bytes = end["bytes"].as_f64().unwrap_or(bps / 8.0 * secs);
        Ok(Measured {
            value: bps / 1e9,
            bytes_per_cpu_s: bytes / cpu,
        })
    }

    /// R2 for ndverbs: `ndv perf send_lat -s 8 -n iters`, t_typical in µs.
    pub fn send_lat(&self, ndv: &Path, iters: u64, port: u16) -> Result<Measured> {
        let ndv = ndv.to_str().context("ndv's path")?;
        let (p, n) = (port.to_string(), iters.to_string());
        let args = [ndv, "perf", "send_lat", "-s", "8", "-n", &n, "-p", &p];
        let (out, _) = self.run_pair(port, &args, &args)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let row = result_row(&text).with_context(|| format!("no result row in:\n{text}"))?;
        // #bytes #iterations t_min t_max t_typical …
        Ok(Measured {
            value: *row.get(4).context("t_typical column")?,
            bytes_per_cpu_s: f64::NAN,
        })
    }

    /// R2's baseline: this binary's busy-polling UDP ping-pong roles, one in
    /// each namespace; the median half round trip in µs.
    pub fn udp_pingpong(&self, exe: &Path, iters: u64) -> Result<Measured> {
        let n = iters.to_string();
        let role = |ns: &str, role: &str, ipa: &str, peer: &str| -> Result<Peer> {
            let args: Vec<String> = [
                "netns",
                "exec",
                ns,
                exe.to_str().context("ndv's path")?,
                "bench",
                "--role",
                role,
                "--ip",
                ipa,
                "--peer",
                peer,
                "-n",
                &n,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            Peer::spawn(role, Path::new("ip"), &args)
        };
        let s = role(&self.a, "udp-echo", A_IP, B_IP)?;
        let r = super::child::measure(s, || role(&self.b, "udp-ping", B_IP, A_IP))?;
        let median_ns: f64 = r
            .get(2)
            .and_then(|x| x.parse().ok())
            .with_context(|| format!("bad result {r:?}"))?;
        Ok(Measured {
            value: median_ns / 2.0 / 1e3,
            bytes_per_cpu_s: f64::NAN,
        })
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The numbers of the first perftest result row (a blank, then a digit).
fn result_row(out: &str) -> Option<Vec<f64>> {
    out.lines()
        .find(|l| l.starts_with(' ') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            l.split_whitespace()
                .map(|w| w.parse().unwrap_or(f64::NAN))
                .collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_rows_of_both_tools() {
        let bw =
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n \
                  65536      29000          0.00               15.20              0.029000\n";
        assert_eq!(result_row(bw).unwrap()[3], 15.20);
        let lat = " 8       1000          5.10           40.00        6.84             7.00 \n";
        assert_eq!(result_row(lat).unwrap()[4], 6.84);
        assert!(result_row("no rows\n").is_none());
    }
}
