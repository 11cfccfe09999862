//! A peer that dies without a word (its process killed): the survivor's
//! outstanding Send completes `ND_IO_TIMEOUT` once its transport retries
//! ([`ND_RETRY_COUNT`]) are spent, within a stated bound — it does not hang.
//!
//! The peer is this test binary run again as [`peer_process`], killed with
//! SIGKILL once the connection carried one message.

use ndverbs_nd::*;
use ndverbs_testkit::{addr, nd::results};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the peer process listens (set for it by the survivor).
const PEER_ENV: &str = "NDV_TEST_DEAD_PEER_ADDR";

/// The local ACK timeout of an ND connection: 4.096 µs × 2^19, from Linux's
/// CM settings on RoCE (packet life time 18, CA ACK delay 15).
const ACK_TIMEOUT: Duration = Duration::from_nanos(4096 << 19);

/// The peer: listens, accepts one connection with a receive posted, says
/// so, and waits to be killed.
#[test]
#[ignore = "the peer of survivor_gets_io_timeout, which runs it"]
fn peer_process() {
    let Ok(ip) = std::env::var(PEER_ENV) else {
        return;
    };
    let ad = Provider.open_adapter(ip.parse().unwrap()).unwrap();
    let cq = ad.create_completion_queue(8).unwrap();
    let qp = ad
        .create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))
        .unwrap();
    qp.receive(1, &[]).unwrap();
    let listener = ad.create_listener().unwrap();
    listener.bind(SocketAddr::new(ad.address(), 0)).unwrap();
    listener.listen(1).unwrap();
    let conn = ad.create_connector().unwrap();
    let request = listener.get_connection_request(&conn).unwrap();
    println!("listening {}", listener.get_local_address().unwrap().port());
    request.wait().unwrap();
    conn.accept(&qp, 0, 0, b"").unwrap().wait().unwrap();
    println!("connected");
    loop {
        std::thread::park();
    }
}

#[test]
fn survivor_gets_io_timeout() {
    let (peer_ip, own_ip): (IpAddr, IpAddr) = addr::pair_v4();
    let mut peer = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "peer_process", "--ignored", "--nocapture"])
        .env(PEER_ENV, peer_ip.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(peer.stdout.take().unwrap()).lines();
    let mut next_line = |prefix: &str| loop {
        let line = lines.next().expect("the peer ended").unwrap();
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    };
    let port: u16 = next_line("listening").parse().unwrap();

    let ad = Provider.open_adapter(own_ip).unwrap();
    let cq = ad.create_completion_queue(8).unwrap();
    let qp = ad
        .create_queue_pair(&cq, &cq, 5, QueuePairSizes::new(4, 1))
        .unwrap();
    assert_eq!(qp.retry_count(), ND_RETRY_COUNT);
    let conn = ad.create_connector().unwrap();
    conn.connect(&qp, SocketAddr::new(peer_ip, port), 0, 0, b"")
        .unwrap()
        .wait()
        .unwrap();
    conn.complete_connect().unwrap().wait().unwrap();
    next_line("connected");
    // The connection works …
    qp.send(1, &[], OpFlags::empty()).unwrap();
    assert_eq!(results(&cq, 1)[0].status, NdStatus::SUCCESS);
    // … until the peer dies without a word.
    peer.kill().unwrap();
    peer.wait().unwrap();
    let t0 = Instant::now();
    qp.send(2, &[], OpFlags::empty()).unwrap();
    let r = results(&cq, 1);
    let took = t0.elapsed();
    assert_eq!(
        (r[0].status, r[0].request_context, r[0].queue_pair_context),
        (NdStatus::IO_TIMEOUT, 2, 5)
    );
    // The first transmission and each retry wait one ACK timeout.
    let transmissions = u32::from(ND_RETRY_COUNT) + 1;
    let bound = ACK_TIMEOUT * transmissions + Duration::from_secs(3);
    assert!(
        took < bound,
        "ND_IO_TIMEOUT after {took:?}, bound {bound:?}"
    );
    assert!(
        took >= ACK_TIMEOUT * (transmissions - 1),
        "ND_IO_TIMEOUT after {took:?}: fewer retries than {ND_RETRY_COUNT}"
    );
}
