//! Which request packets ask for an ACK (BTH AckReq): in a stream of
//! messages, one packet in every `MAX_PKT_PER_ACK` (at most half a window
//! apart) and the end of the burst's last message; the end of any message
//! that nothing sendable follows at once; every message's end when resent,
//! and under a congestion controller's budget (as rxe).

use super::two::{pair, Two};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::{Duration, Instant};

/// Path MTU of [`pair`]'s connection.
const MTU: u32 = 1024;
/// Packets of one 64-KiB message.
const PKTS: usize = 64;

/// Posts `n` more 64-KiB WRITEs at A (work requests `first`, `first + 1`,
/// …), each from and to its own bytes; `fence` fences the first of them.
fn post_writes(t: &mut Two, first: u64, n: u32, fence: bool) {
    let len = PKTS as u32 * MTU;
    let va = |base: u64| base + (first << 24);
    let src = t.mem_a.register_bytes(
        1,
        va(0x4000_0000),
        vec![9; (len * n) as usize],
        Access::NONE,
    );
    let dst = t.mem_b.register(
        1,
        va(0x5000_0000),
        len * n,
        Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    );
    for i in 0..n {
        let at = RemoteAddr {
            va: dst.addr + u64::from(i * len),
            rkey: dst.rkey,
        };
        let mut wr = SendWr::new(
            first + u64::from(i),
            SendOp::Write(at),
            vec![src.sge(i * len, len)],
        );
        wr.fence = fence && i == 0;
        t.a.post_send(wr).unwrap();
    }
}

/// Positions (0-based, in sending order) of the packets asking for an ACK.
fn asking(sent: &[(u32, bool)]) -> Vec<usize> {
    sent.iter()
        .enumerate()
        .filter_map(|(i, &(_, ack))| ack.then_some(i))
        .collect()
}

/// Sends everything A has, delivered, lets B answer, checks that the `n`
/// work requests completed; returns the packets that asked for an ACK.
fn exchange(t: &mut Two, n: u64) -> Vec<usize> {
    let now = Instant::ZERO;
    let sent = t.a_sends(now, |_| false);
    t.b_replies(now);
    completed(t, n);
    asking(&sent)
}

/// All work requests completed successfully, in order.
fn completed(t: &mut Two, n: u64) {
    for id in 1..=n {
        let wc = t.a.poll_completion().expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    assert!(t.a.poll_completion().is_none());
}

#[test]
fn a_lone_message_asks_at_its_end() {
    let mut t = pair(PKTS as u32 * MTU);
    assert_eq!(exchange(&mut t, 1), [PKTS - 1]);
}

#[test]
fn a_stream_asks_once_per_max_pkt_per_ack_and_at_its_end() {
    assert_eq!(MAX_PKT_PER_ACK, 128);
    let mut t = pair(PKTS as u32 * MTU);
    post_writes(&mut t, 2, 4, false);
    // Messages end at 63, 127, 191, 255 and 319: the 128th packets ask,
    // and the last message's end.
    assert_eq!(exchange(&mut t, 5), [127, 255, 5 * PKTS - 1]);
}

#[test]
fn under_a_budget_every_message_end_asks_as_rxe() {
    let mut t = pair(PKTS as u32 * MTU);
    post_writes(&mut t, 2, 2, false);
    t.a.set_send_budget(Some(u64::MAX));
    assert_eq!(RXE_MAX_PKT_PER_ACK as usize, PKTS);
    assert_eq!(exchange(&mut t, 3), [PKTS - 1, 2 * PKTS - 1, 3 * PKTS - 1]);
}

#[test]
fn a_message_asks_when_a_read_or_a_fence_follows() {
    // A READ behind: the WRITE's end asks (a READ may wait for a slot).
    let mut t = pair(PKTS as u32 * MTU);
    let dst = t.mem_a.register(1, 0x6000_0000, 64, Access::LOCAL_WRITE);
    let src = t
        .mem_b
        .register_bytes(1, 0x7000_0000, vec![3; 64], Access::REMOTE_READ);
    let at = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    t.a.post_send(SendWr::new(2, SendOp::Read(at), vec![dst.sge(0, 64)]))
        .unwrap();
    assert_eq!(exchange(&mut t, 2), [PKTS - 1, PKTS]);

    // A fenced WRITE behind: the same.
    let mut t = pair(PKTS as u32 * MTU);
    post_writes(&mut t, 2, 1, true);
    assert_eq!(exchange(&mut t, 2), [PKTS - 1, 2 * PKTS - 1]);
}

#[test]
fn resent_messages_ask_at_every_end() {
    let mut t = pair(PKTS as u32 * MTU);
    post_writes(&mut t, 2, 1, false);
    let now = Instant::ZERO;
    // The first transmission is lost whole; a third WRITE is posted after.
    let first = t.a_sends(now, |_| true);
    assert_eq!(asking(&first), [2 * PKTS - 1]);
    post_writes(&mut t, 3, 1, false);
    let due = t.a.poll_timeout().expect("an ACK timeout");
    let later = due + Duration::from_micros(1);
    t.a.handle_timeout(later);
    let again = t.a_sends(later, |_| false);
    assert_eq!(again.len(), 3 * PKTS);
    // The second message is resent ahead of a fresh one: it asks too.
    assert_eq!(asking(&again), [PKTS - 1, 2 * PKTS - 1, 3 * PKTS - 1]);
    t.b_replies(later);
    completed(&mut t, 3);
}
