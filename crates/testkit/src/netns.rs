//! Network namespaces for tests: a private copy of the network stack with
//! addresses, links, MTUs and packet filters that nothing else on the host
//! sees, removed again when the test ends (also when it panics).
//!
//! Use one when a test needs what `lo` of the host cannot give: IPv6
//! addresses of its own, a real link with an MTU (a veth pair between two
//! namespaces), a link to take down, or the kernel dropping packets (nftables
//! rules). Plain loopback tests need none: [`crate::addr`] gives them
//! addresses on the host's `lo`.
//!
//! Two ways to run code inside: [`Netns::command`] for a program (`ip netns
//! exec`), [`Netns::run`] for a closure (on a thread that entered the
//! namespace; sockets belong to the namespace of the thread that creates
//! them, so a device opened there lives there).
//!
//! Namespaces need root: the constructors that return `Option` apply the
//! skip rule ([`crate::skip`]) when they cannot create one.
//!
//! ```no_run
//! use ndverbs_testkit::{addr, netns::Netns};
//! let (a_ip, b_ip) = addr::pair_v6();
//! let Some((a, b)) = Netns::veth_pair(&format!("{a_ip}/64"), &format!("{b_ip}/64")) else {
//!     return; // SKIPPED (or failed under CI=true)
//! };
//! a.set_mtu(ndverbs_testkit::netns::VETH, 1500).unwrap();
//! let dev = a.run(|| ndverbs_verbs::Device::open(a_ip)).unwrap();
//! ```

use crate::skip;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The name of the veth device in each namespace of [`Netns::veth_pair`].
pub const VETH: &str = "veth0";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; the error names the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace; deleted on drop when this handle created it.
#[derive(Debug)]
pub struct Netns {
    name: String,
    owned: bool,
}

impl Netns {
    /// A fresh namespace with `lo` up, named after this process (unique
    /// across processes: the PID is in the name).
    pub fn new() -> Result<Netns, String> {
        let name = format!(
            "ndvt-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name, owned: true };
        ns.set_link("lo", true)?;
        Ok(ns)
    }

    /// A namespace someone else made (such as the interop guest's): used,
    /// never deleted.
    pub fn existing(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
            owned: false,
        }
    }

    /// A fresh namespace whose `lo` also has `addrs` (IPv6 as `/128`, IPv4
    /// as `/32`), or `None` after the skip rule.
    #[track_caller]
    pub fn with_lo_addrs(addrs: &[std::net::IpAddr]) -> Option<Netns> {
        let r = Netns::new().and_then(|ns| {
            for a in addrs {
                ns.add_addr("lo", &a.to_string())?;
            }
            Ok(ns)
        });
        skip::or_skip(r, "a network namespace (root)")
    }

    /// Two fresh namespaces joined by a veth pair ([`VETH`] in each, up,
    /// MTU 1500), with `addr_a` and `addr_b` (with a prefix, such as
    /// `fd00:7e57:0:1::1/64` or `10.99.1.1/24`), or `None` after the skip
    /// rule.
    #[track_caller]
    pub fn veth_pair(addr_a: &str, addr_b: &str) -> Option<(Netns, Netns)> {
        let r = (|| -> Result<(Netns, Netns), String> {
            let a = Netns::new()?;
            let b = Netns::new()?;
            ip(&[
                "link", "add", VETH, "netns", &a.name, "type", "veth", "peer", "name", VETH,
                "netns", &b.name,
            ])?;
            for (ns, addr) in [(&a, addr_a), (&b, addr_b)] {
                ns.set_link(VETH, true)?;
                ns.add_addr(VETH, addr)?;
            }
            // The carrier comes up a moment after both ends are set up (a
            // long moment on a busy host); until then a device on the veth
            // reports its port DOWN and perftest refuses it.
            a.wait_running(VETH)?;
            b.wait_running(VETH)?;
            Ok((a, b))
        })();
        skip::or_skip(r, "two network namespaces joined by veth (root)")
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds `addr` to `dev`; without a prefix IPv6 gets `/128` and IPv4
    /// `/32`. IPv6 addresses skip duplicate address detection (usable at once).
    pub fn add_addr(&self, dev: &str, addr: &str) -> Result<(), String> {
        let v6 = addr.contains(':');
        let with_prefix = if addr.contains('/') {
            addr.to_string()
        } else {
            format!("{addr}/{}", if v6 { 128 } else { 32 })
        };
        if v6 {
            self.ip(&["-6", "addr", "add", &with_prefix, "dev", dev, "nodad"])
        } else {
            self.ip(&["addr", "add", &with_prefix, "dev", dev])
        }
    }

    /// Sets `dev` up or down.
    pub fn set_link(&self, dev: &str, up: bool) -> Result<(), String> {
        self.ip(&["link", "set", dev, if up { "up" } else { "down" }])
    }

    /// Waits (up to 10 s) until `dev` is operationally up (`IFF_RUNNING`).
    pub fn wait_running(&self, dev: &str) -> Result<(), String> {
        let t0 = std::time::Instant::now();
        loop {
            let out = Command::new("ip")
                .args(["-n", &self.name, "-o", "link", "show", "dev", dev])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains(" state UP ") {
                return Ok(());
            }
            if t0.elapsed() > std::time::Duration::from_secs(10) {
                return Err(format!(
                    "{dev} in {} is not up after 10 s: {text}",
                    self.name
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Sets the MTU of `dev`.
    pub fn set_mtu(&self, dev: &str, mtu: u32) -> Result<(), String> {
        self.ip(&["link", "set", dev, "mtu", &mtu.to_string()])
    }

    /// `ip -n NAME ARGS`.
    fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Loads an nftables ruleset (`nft -f -`) in the namespace, such as a
    /// table that drops a share of the UDP 4791 packets arriving
    /// (`numgen random mod 10 == 0 counter drop`). Rules go with the
    /// namespace; [`Netns::nft_delete_table`] removes them earlier.
    pub fn nft(&self, ruleset: &str) -> Result<(), String> {
        let mut c = self
            .command("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("nft: {e}"))?;
        c.stdin
            .take()
            .expect("piped stdin")
            .write_all(ruleset.as_bytes())
            .map_err(|e| format!("nft: {e}"))?;
        let out = c.wait_with_output().map_err(|e| format!("nft: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "nft -f: {}\n{ruleset}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Packets counted by the first `counter` of nftables table `family
    /// name` (`"inet ndv"`), 0 when there is none.
    pub fn nft_packets(&self, table: &str) -> u64 {
        let mut args = vec!["list", "table"];
        args.extend(table.split_whitespace());
        let out = self.command("nft").args(args).output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        text.split("packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Deletes nftables table `family name` (`"inet ndv"`); a table that is
    /// not there is no error.
    pub fn nft_delete_table(&self, table: &str) {
        let mut args = vec!["delete", "table"];
        args.extend(table.split_whitespace());
        let _ = self.command("nft").args(args).output();
    }

    /// `program` to run inside the namespace (`ip netns exec NAME program`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a thread inside the namespace and returns what it
    /// returns. Sockets created there (a device's UDP 4791) stay in the
    /// namespace; so do threads `f` starts, and programs it runs.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                // SAFETY: setns on a valid namespace fd; it moves only this
                // helper thread, which ends with the scope.
                let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.owned {
            let _ = ip(&["netns", "del", &self.name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_created_used_and_removed() {
        let (a_ip, b_ip) = crate::addr::pair_v6();
        let Some((a, b)) = Netns::veth_pair(&format!("{a_ip}/64"), &format!("{b_ip}/64")) else {
            return;
        };
        let name = a.name().to_string();
        a.set_mtu(VETH, 1400).unwrap();
        let out = a
            .command("ip")
            .args(["link", "show", VETH])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("mtu 1400"));
        // A socket opened by `run` lives in the namespace: b's address is
        // bindable there and not on the host.
        let bound = b.run(move || std::net::UdpSocket::bind((b_ip, 0)).is_ok());
        assert!(bound);
        assert!(std::net::UdpSocket::bind((b_ip, 0)).is_err());
        let nft = Command::new("nft").arg("--version").output();
        if nft.is_ok_and(|o| o.status.success()) {
            a.nft("table inet ndvt {\n chain input {\n  type filter hook input priority 0;\n  udp dport 9 counter drop\n }\n}\n")
                .unwrap();
            let sender = b.run(move || std::net::UdpSocket::bind((b_ip, 0)).unwrap());
            sender.send_to(b"x", (a_ip, 9)).unwrap();
            let t0 = std::time::Instant::now();
            while a.nft_packets("inet ndvt") == 0 {
                assert!(t0.elapsed().as_secs() < 10, "nft counted nothing");
                std::thread::yield_now();
            }
            a.nft_delete_table("inet ndvt");
        }
        drop((a, b));
        assert!(!std::path::Path::new(&format!("/run/netns/{name}")).exists());
    }
}
