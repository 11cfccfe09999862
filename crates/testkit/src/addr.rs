//! Test addresses that no other test holds, in this process or any other.
//!
//! Every RoCE device binds UDP 4791 on its own address, and a TCP server of
//! the tools binds its port on it too, so two tests that pick the same address
//! fail each other — also when they run in different processes: nextest runs
//! each test as a process of its own, and several `cargo test` invocations may
//! run at once on one machine. So addresses come from one counter kept in a
//! file in the temporary directory, taken under `flock(2)`: each call hands
//! out addresses nobody was given before (until the range wraps, after
//! hundreds of thousands of addresses).
//!
//! IPv4 addresses come from [`V4_RANGE`], `127.200.0.0/14` on `lo` (every
//! `127/8` address is local on Linux); documentation examples keep their
//! fixed addresses in `127.92.0.0/15`, which the range avoids. IPv6 addresses
//! are unique-local (`fd00:7e57::/32`) and are meant for network namespaces
//! the test creates, where it adds them itself.
//!
//! ```
//! let (server, client) = ndverbs_testkit::addr::pair_v4();
//! assert_ne!(server, client);
//! ```

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// The IPv4 range handed out: `127.200.0.0/14` (first address, prefix length).
pub const V4_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(127, 200, 0, 0), 14);

/// Host numbers used in each /24 of the range: .1 to .254 (no .0 or .255,
/// which read like network and broadcast addresses in a capture).
const HOSTS: u32 = 254;
/// Addresses in the range: 4 × 256 /24s.
const V4_CAPACITY: u32 = 4 * 256 * HOSTS;

/// The counter file: one per user when the shared one is not writable.
fn counter_file() -> File {
    let dir = std::env::temp_dir();
    let open = |p: PathBuf| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
    };
    let shared = dir.join("ndverbs-testkit-addresses");
    match open(shared.clone()) {
        Ok(f) => {
            // Every user's tests share one counter, so they never collide
            // either; a failure only means someone else created the file.
            use std::os::unix::fs::PermissionsExt;
            let _ = f.set_permissions(std::fs::Permissions::from_mode(0o666));
            f
        }
        Err(_) => {
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            let own = dir.join(format!("ndverbs-testkit-addresses-{uid}"));
            open(own.clone()).unwrap_or_else(|e| {
                panic!(
                    "test address counter {} (or {}): {e}",
                    shared.display(),
                    own.display()
                )
            })
        }
    }
}

/// Takes `n` consecutive numbers of the counter and returns the first.
fn take(n: u64) -> u64 {
    let mut f = counter_file();
    // SAFETY: flock on a file descriptor this function owns; the lock goes
    // when the file is closed at the end of the function.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "flock on the test address counter: {}",
        std::io::Error::last_os_error()
    );
    let mut text = String::new();
    f.read_to_string(&mut text)
        .expect("read the address counter");
    let first: u64 = text.trim().parse().unwrap_or(0);
    f.seek(SeekFrom::Start(0))
        .expect("seek the address counter");
    f.set_len(0).expect("truncate the address counter");
    write!(f, "{}", first.wrapping_add(n)).expect("write the address counter");
    first
}

fn v4_at(i: u32) -> IpAddr {
    let i = i % V4_CAPACITY;
    let net = i / HOSTS;
    IpAddr::V4(Ipv4Addr::new(
        127,
        200 + (net / 256) as u8,
        (net % 256) as u8,
        (1 + i % HOSTS) as u8,
    ))
}

/// Takes `n` IPv4 indices that do not wrap in between.
fn take_v4(n: u32) -> u32 {
    loop {
        let first = (take(u64::from(n)) % u64::from(V4_CAPACITY)) as u32;
        if first + n <= V4_CAPACITY {
            return first;
        }
    }
}

/// One fresh loopback IPv4 address.
pub fn v4() -> IpAddr {
    v4_at(take_v4(1))
}

/// Two fresh loopback IPv4 addresses (server and client, or a and b).
pub fn pair_v4() -> (IpAddr, IpAddr) {
    let i = take_v4(2);
    (v4_at(i), v4_at(i + 1))
}

/// `n` fresh loopback IPv4 addresses.
pub fn many_v4(n: usize) -> Vec<IpAddr> {
    let n32 = u32::try_from(n).expect("a sensible number of addresses");
    let i = take_v4(n32);
    (0..n32).map(|k| v4_at(i + k)).collect()
}

/// Two fresh unique-local IPv6 addresses, `…::1` and `…::2` of one /64, for
/// a namespace the test creates (add them with a `/128` on `lo`, or the
/// `/64` on a veth pair).
pub fn pair_v6() -> (IpAddr, IpAddr) {
    let n = take(1);
    let net = |host: u16| {
        IpAddr::V6(Ipv6Addr::new(
            0xfd00,
            0x7e57,
            (n >> 32) as u16,
            (n >> 16) as u16,
            n as u16,
            0,
            0,
            host,
        ))
    };
    (net(1), net(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_and_in_range() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let (a, b) = pair_v4();
            for ip in [a, b, v4()] {
                let IpAddr::V4(v) = ip else { panic!("{ip}") };
                let o = v.octets();
                assert_eq!(o[0], 127);
                assert!(
                    (200..204).contains(&o[1]) && (1..255).contains(&o[3]),
                    "{v}"
                );
                assert!(seen.insert(ip), "{ip} handed out twice");
            }
        }
        let (a, b) = pair_v6();
        assert_ne!(a, b);
        assert!(a.to_string().starts_with("fd00:7e57:"), "{a}");
    }

    #[test]
    fn the_range_wraps_onto_itself() {
        assert_eq!(v4_at(0), IpAddr::from([127, 200, 0, 1]));
        assert_eq!(v4_at(253), IpAddr::from([127, 200, 0, 254]));
        assert_eq!(v4_at(254), IpAddr::from([127, 200, 1, 1]));
        assert_eq!(v4_at(V4_CAPACITY - 1), IpAddr::from([127, 203, 255, 254]));
        assert_eq!(v4_at(V4_CAPACITY), v4_at(0));
    }

    #[test]
    fn concurrent_takers_never_share() {
        let all: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..25).map(|_| take(1)).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let set: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(set.len(), all.len());
    }
}
