//! Soak: connect / transfer / disconnect cycles through the ND API on
//! loopback (two addresses from the test kit), with fresh queue pairs, connectors and
//! memory regions every cycle, rotating through the disconnect cases
//! (crossing DREQs, client first, server first after NotifyDisconnect).
//! Every transfer is verified. After a warm-up the process's resident set
//! (`VmRSS`) and open file descriptors must stay flat.
//!
//! ```sh
//! cargo test -p ndverbs-nd --test soak -- --nocapture                          # 2,000 cycles (and 3 s of warm-up)
//! NDV_SOAK_CYCLES=100000 cargo test --release -p ndverbs-nd --test soak -- --nocapture
//! ```

use ndverbs_nd::*;
use ndverbs_testkit::nd::results;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PORT: u16 = 6100;
const LEN: usize = 8192;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn region(ad: &Adapter) -> MemoryRegion {
    let mr = ad.create_memory_region().unwrap();
    mr.register(
        LEN,
        MrFlags::ALLOW_REMOTE_READ | MrFlags::ALLOW_REMOTE_WRITE,
    )
    .wait()
    .unwrap();
    mr
}

fn sge(mr: &MemoryRegion, off: usize, len: u32) -> NdSge {
    NdSge::new(mr.address() + off as u64, len, mr.local_token())
}

fn cycle(
    i: u64,
    a: &Adapter,
    b: &Adapter,
    acq: &CompletionQueue,
    bcq: &CompletionQueue,
    l: &Listener,
) {
    let aqp = a
        .create_queue_pair(acq, acq, i, QueuePairSizes::new(4, 1).with_inline(64))
        .unwrap();
    let bqp = b
        .create_queue_pair(bcq, bcq, i, QueuePairSizes::new(4, 1).with_inline(64))
        .unwrap();
    let (amr, bmr) = (region(a), region(b));
    let data: Vec<u8> = (0..LEN as u64)
        .map(|k| (k.wrapping_mul(31) ^ i) as u8)
        .collect();
    amr.write(0, &data).unwrap();
    bqp.receive(1, &[sge(&bmr, 0, 4096)]).unwrap();

    let cb = b.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.create_connector().unwrap();
    let conn = ca
        .connect(&aqp, SocketAddr::new(b.address(), PORT), 1, 1, b"soak")
        .unwrap();
    req.wait().unwrap();
    let acc = cb.accept(&bqp, 1, 1, b"ok").unwrap();
    conn.wait().unwrap();
    ca.complete_connect().unwrap().wait().unwrap();
    acc.wait().unwrap();

    // SEND 4 KiB, WRITE 4 KiB into the second half, READ it back.
    let flags = OpFlags::empty();
    let (half, token) = (bmr.address() + 4096, bmr.remote_token());
    aqp.send(2, &[sge(&amr, 0, 4096)], flags).unwrap();
    aqp.write(3, &[sge(&amr, 4096, 4096)], half, token, flags)
        .unwrap();
    let r = results(acq, 2);
    assert!(r.iter().all(|e| e.status == NdStatus::SUCCESS), "{r:?}");
    let r = results(bcq, 1);
    assert_eq!(
        (r[0].status, r[0].bytes_transferred),
        (NdStatus::SUCCESS, 4096)
    );
    aqp.read(4, &[sge(&amr, 0, 4096)], half, token, flags)
        .unwrap();
    let r = results(acq, 1);
    assert_eq!(r[0].status, NdStatus::SUCCESS, "{r:?}");
    let mut got = vec![0u8; LEN];
    bmr.read(0, &mut got).unwrap();
    assert!(got == data, "cycle {i}: data differs at the server");
    amr.read(0, &mut got[..4096]).unwrap();
    assert!(got[..4096] == data[4096..], "cycle {i}: READ differs");

    match i % 3 {
        0 => {
            let (da, db) = (ca.disconnect().unwrap(), cb.disconnect().unwrap());
            da.wait().unwrap();
            db.wait().unwrap();
        }
        1 => {
            let notify = cb.notify_disconnect().unwrap();
            let da = ca.disconnect().unwrap();
            notify.wait().unwrap();
            cb.disconnect().unwrap().wait().unwrap();
            da.wait().unwrap();
        }
        _ => {
            let notify = ca.notify_disconnect().unwrap();
            let db = cb.disconnect().unwrap();
            notify.wait().unwrap();
            ca.disconnect().unwrap().wait().unwrap();
            db.wait().unwrap();
        }
    }
    amr.deregister().wait().unwrap();
    bmr.deregister().wait().unwrap();
}

#[test]
fn soak_rss_and_fds_stay_flat() {
    let cycles: u64 = std::env::var("NDV_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let (a_ip, b_ip) = ndverbs_testkit::addr::pair_v4();
    let a = Provider.open_adapter(a_ip).unwrap();
    let b = Provider.open_adapter(b_ip).unwrap();
    let acq = a.create_completion_queue(64).unwrap();
    let bcq = b.create_completion_queue(64).unwrap();
    let l = b.create_listener().unwrap();
    l.bind(SocketAddr::new(b.address(), PORT)).unwrap();
    l.listen(16).unwrap();
    let t0 = Instant::now();
    let (mut rss0, mut fd0) = (0, 0);
    let mut warmup = None;
    let (mut rss_max, mut fd_max) = (0, 0);
    let mut samples = Vec::new();
    // At least `cycles` cycles, and at least half as many after the warm-up.
    let mut i = 0;
    while i < cycles || warmup.is_none_or(|w| i < w + cycles / 2) {
        cycle(i, &a, &b, &acq, &bcq, &l);
        i += 1;
        // Warm-up: until the time-wait population (connections of the last
        // 2 s) and the allocator have settled: 3 s, however many cycles that
        // takes (a fast machine runs 20,000 in under 4 s, and the tables
        // that hold time-wait connections still grow at 2 s).
        if warmup.is_none() && t0.elapsed() >= Duration::from_secs(3) {
            warmup = Some(i);
            (rss0, fd0) = (rss_kib(), fds());
        }
        if warmup.is_some() {
            rss_max = rss_max.max(rss_kib());
            fd_max = fd_max.max(fds());
        }
        if i % (cycles / 10).max(1) == 0 {
            samples.push((i, rss_kib(), fds()));
        }
    }
    let cycles = i;
    let secs = t0.elapsed().as_secs_f64();
    let (rss1, fd1) = (rss_kib(), fds());
    println!(
        "soak: {cycles} cycles in {secs:.1} s ({:.0}/s); after warm-up ({} cycles): RSS {rss0} KiB, fds {fd0}; end: RSS {rss1} KiB (max {rss_max}), fds {fd1} (max {fd_max})",
        cycles as f64 / secs,
        warmup.unwrap_or(0)
    );
    println!("samples (cycle, RSS KiB, fds): {samples:?}");
    assert!(
        fd_max <= fd0 + 2,
        "open file descriptors grew: {fd0} after warm-up, {fd_max} at most later"
    );
    // Allocator noise is bounded; a leak of 100 bytes per cycle over
    // 100,000 cycles is not.
    let allowed = 4 * 1024 + rss0 / 10;
    assert!(
        rss_max <= rss0 + allowed,
        "RSS grew from {rss0} KiB to {rss_max} KiB (allowed +{allowed} KiB)"
    );
}
