//! `ibv_rc_pingpong`'s output (rdma-core 44, `libibverbs/examples/rc_pingpong.c`).
//!
//! ```text
//!   local address:  LID 0x0000, QPN 0x000013, PSN 0x158069, GID ::ffff:10.77.0.2
//!   remote address: LID 0x0000, QPN 0x000013, PSN 0xd50ec4, GID ::ffff:10.77.0.3
//! 24576 bytes in 0.00 seconds = 41.06 Mbit/sec
//! 3 iters in 0.00 seconds = 1596.00 usec/iter
//! ```
//!
//! * Address lines: `"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"`
//!   (note the two blanks after `local address:`) and the same with
//!   `remote address: `; the GID is `inet_ntop(AF_INET6)`.
//! * Summary: the elapsed time is `gettimeofday` microseconds held in a C
//!   **`float`**; bytes = size × iters × 2 (both directions);
//!   `"%lld bytes in %.2f seconds = %.2f Mbit/sec\n"` with Mbit/s =
//!   bytes × 8 / µs, and `"%d iters in %.2f seconds = %.2f usec/iter\n"`
//!   where µs/iter is computed in `float` too.
//!
//! Both sides print the summary of their own clock; the values above are
//! the client's in shared/reference/rxe-linux-6.1/ibv_rc_pingpong.log.

use super::exchange::PingpongDest;
use crate::printf::c_fixed;
use std::time::Duration;

/// The address line for `side` (`"local"` or `"remote"`), without newline.
pub fn address_line(side: &str, dest: &PingpongDest) -> String {
    format!(
        "  {:<16}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        format!("{side} address:"),
        dest.lid,
        dest.qpn,
        dest.psn,
        inet_ntop6(&dest.gid)
    )
}

/// The two summary lines (without newlines) for a run of `iters` exchanges
/// of `size` bytes that took `elapsed` (truncated to whole microseconds, as
/// `gettimeofday` differences are).
pub fn summary(size: u32, iters: u32, elapsed: Duration) -> [String; 2] {
    summary_usec(
        size,
        iters,
        elapsed.as_micros().min(i64::MAX as u128) as i64,
    )
}

/// [`summary`] from the elapsed time in microseconds.
pub fn summary_usec(size: u32, iters: u32, elapsed_usec: i64) -> [String; 2] {
    // float usec = (end.tv_sec - start.tv_sec) * 1000000 + (end.tv_usec - start.tv_usec);
    let usec = elapsed_usec as f32;
    // long long bytes = (long long) size * iters * 2;
    let bytes = i64::from(size) * i64::from(iters) * 2;
    let seconds = f64::from(usec) / 1_000_000.0;
    let mbit = bytes as f64 * 8.0 / f64::from(usec);
    // usec / iters: float divided by int is a float division.
    let per_iter = f64::from(usec / iters as f32);
    [
        format!(
            "{bytes} bytes in {} seconds = {} Mbit/sec",
            c_fixed(seconds, 2),
            c_fixed(mbit, 2)
        ),
        format!(
            "{iters} iters in {} seconds = {} usec/iter",
            c_fixed(seconds, 2),
            c_fixed(per_iter, 2)
        ),
    ]
}

/// glibc's `inet_ntop(AF_INET6, …)`: lowercase hex groups without leading
/// zeros, the first longest run of two or more zero groups as `::`, and the
/// last 32 bits in dotted decimal for `::ffff:a.b.c.d` and `::a.b.c.d`.
pub fn inet_ntop6(gid: &[u8; 16]) -> String {
    let words: Vec<u16> = gid
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    // Longest run of zero words (first one wins a tie), at least 2 long,
    // as (first word, length).
    type Run = Option<(usize, usize)>;
    let (mut best, mut cur): (Run, Run) = (None, None);
    for (i, &w) in words.iter().enumerate() {
        if w == 0 {
            cur = Some(cur.map_or((i, 1), |(b, l)| (b, l + 1)));
        } else if let Some(c) = cur.take() {
            if best.is_none_or(|b| c.1 > b.1) {
                best = Some(c);
            }
        }
    }
    if let Some(c) = cur {
        if best.is_none_or(|b| c.1 > b.1) {
            best = Some(c);
        }
    }
    let best = best.filter(|&(_, len)| len >= 2);
    let mut out = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    out.push(':');
                }
                i += 1;
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 {
            if let Some((0, len)) = best {
                if len == 6 || (len == 5 && words[5] == 0xffff) {
                    out.push_str(&format!("{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15]));
                    return out;
                }
            }
        }
        out.push_str(&format!("{:x}", words[i]));
        i += 1;
    }
    if let Some((base, len)) = best {
        if base + len == 8 {
            out.push(':');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(qpn: u32, psn: u32, last: u8) -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn,
            psn,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, last],
        }
    }

    #[test]
    fn matches_reference_log() {
        // shared/reference/rxe-linux-6.1/ibv_rc_pingpong.log:
        // `ibv_rc_pingpong -d rxe0 -g 1 -n 3` (size 4096), client then server.
        let client = dest(0x13, 0x158069, 2);
        let server = dest(0x13, 0xd50ec4, 3);
        assert_eq!(
            address_line("local", &client),
            "  local address:  LID 0x0000, QPN 0x000013, PSN 0x158069, GID ::ffff:10.77.0.2"
        );
        assert_eq!(
            address_line("remote", &server),
            "  remote address: LID 0x0000, QPN 0x000013, PSN 0xd50ec4, GID ::ffff:10.77.0.3"
        );
        // 24576 B over 4788 us (client) and 12307 us (server), the only
        // elapsed times consistent with the printed lines.
        assert_eq!(
            summary_usec(4096, 3, 4788),
            [
                "24576 bytes in 0.00 seconds = 41.06 Mbit/sec",
                "3 iters in 0.00 seconds = 1596.00 usec/iter"
            ]
        );
        assert_eq!(
            summary_usec(4096, 3, 12307),
            [
                "24576 bytes in 0.01 seconds = 15.98 Mbit/sec",
                "3 iters in 0.01 seconds = 4102.33 usec/iter"
            ]
        );
        assert_eq!(
            summary(4096, 3, Duration::from_nanos(4_788_999)),
            summary_usec(4096, 3, 4788)
        );
    }

    #[test]
    fn float_precision_like_c() {
        // 16777217 us is not representable in a float: C prints ...216.
        let [_, per] = summary_usec(1, 1, 16_777_217);
        assert_eq!(per, "1 iters in 16.78 seconds = 16777216.00 usec/iter");
        // usec/iter divides in float: 10000001 / 3 is 3333333.75 in f32
        // (3333333.67 in double).
        let [_, per] = summary_usec(1, 3, 10_000_001);
        assert_eq!(per, "3 iters in 10.00 seconds = 3333333.75 usec/iter");
    }

    #[test]
    fn ntop_like_glibc() {
        let g = |s: &str| -> [u8; 16] { s.parse::<std::net::Ipv6Addr>().unwrap().octets() };
        for (addr, want) in [
            ("::", "::"),
            ("::1", "::1"),
            ("::ffff:10.77.0.2", "::ffff:10.77.0.2"),
            ("::10.77.0.2", "::10.77.0.2"),
            ("::2", "::2"),
            ("fe80::5054:ff:fe77:2", "fe80::5054:ff:fe77:2"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("1::", "1::"),
            ("0:0:0:0:0:ffff:0:1", "::ffff:0.0.0.1"),
            ("0:0:0:0:1:ffff:0:1", "::1:ffff:0:1"),
            ("2001:db8::ffff:1", "2001:db8::ffff:1"),
        ] {
            assert_eq!(inet_ntop6(&g(addr)), want, "{addr}");
        }
    }
}
