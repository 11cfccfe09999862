//! Network namespaces for tests: a namespace with extra addresses on `lo`, or
//! two namespaces joined by a veth pair. Needs root; without it `None` comes
//! back after a `SKIPPED` line, and under `CI=true` the test fails instead.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> Result<(), String> {
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

fn skip(what: &str, why: String) -> Option<()> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} needs network namespaces (root) under CI=true: {why}"
    );
    eprintln!("SKIPPED: {what} — needs network namespaces (root): {why}");
    None
}

impl Netns {
    /// A fresh namespace with `lo` up.
    fn create(tag: &str) -> Result<Netns, String> {
        let name = format!(
            "ndvt-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A namespace whose `lo` also has `addrs` (IPv6 `/128` or IPv4 `/32`).
    pub fn with_lo_addrs(what: &str, addrs: &[&str]) -> Option<Netns> {
        let r = (|| {
            let ns = Netns::create("lo")?;
            for a in addrs {
                ns.add_addr("lo", a)?;
            }
            Ok(ns)
        })();
        r.map_err(|e| skip(what, e)).ok()
    }

    /// Two namespaces joined by a veth pair (`veth0` in each), with
    /// `addr_a` and `addr_b` (with prefix, e.g. `fd00:88::1/64`).
    pub fn veth_pair(what: &str, addr_a: &str, addr_b: &str) -> Option<(Netns, Netns)> {
        let r = (|| {
            let a = Netns::create("a")?;
            let b = Netns::create("b")?;
            ip(&[
                "link", "add", "veth0", "netns", &a.name, "type", "veth", "peer", "name", "veth0",
                "netns", &b.name,
            ])?;
            for (ns, addr) in [(&a, addr_a), (&b, addr_b)] {
                ip(&["-n", &ns.name, "link", "set", "veth0", "up"])?;
                ns.add_addr("veth0", addr)?;
            }
            Ok((a, b))
        })();
        r.map_err(|e| skip(what, e)).ok()
    }

    fn add_addr(&self, dev: &str, addr: &str) -> Result<(), String> {
        if addr.contains(':') {
            let a = if addr.contains('/') {
                addr.to_string()
            } else {
                format!("{addr}/128")
            };
            ip(&[
                "-n", &self.name, "-6", "addr", "add", &a, "dev", dev, "nodad",
            ])
        } else {
            let a = if addr.contains('/') {
                addr.to_string()
            } else {
                format!("{addr}/32")
            };
            ip(&["-n", &self.name, "addr", "add", &a, "dev", dev])
        }
    }

    /// `program args…` run inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}
