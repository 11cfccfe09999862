//! `Device::stats`: rxe-named counters summed over the device's queue pairs,
//! kept after a QP is destroyed; `link_downed` after removal.

use ndverbs_testkit::verbs::Pair;
use ndverbs_verbs::*;

#[test]
fn counters_sum_over_queue_pairs_and_survive_them() {
    let mut pair = Pair::new();
    for round in 0..2 {
        if round > 0 {
            // The previous QPs are destroyed: the totals must keep them.
            pair.new_qps();
        }
        pair.send(5, 100, 1);
        assert_eq!(pair.a.qp.counters().unwrap().rdma_sends, 5);
        let (sa, sb) = (pair.a.dev.stats(), pair.b.dev.stats());
        assert_eq!(sa.get("rdma_sends"), 5 * (round + 1), "{sa:?}");
        assert_eq!(sb.get("rdma_recvs"), 5 * (round + 1), "{sb:?}");
        assert!(sa.get("sent_pkts") >= 5 * (round + 1));
        assert!(sb.get("rcvd_pkts") >= 5 * (round + 1));
    }
    let da = &pair.a.dev;
    let s = da.stats();
    let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..15], RXE_COUNTERS);
    assert_eq!(s.get("link_downed"), 0);
    da.remove();
    assert_eq!(da.stats().get("link_downed"), 1);
    assert!(s.to_json().starts_with("{\"sent_pkts\":"));
}

/// One HTTP/1.1 exchange with the metrics endpoint: the whole answer.
/// `stall`: keep the connection open after the request instead of closing
/// the sending half.
fn http_with(at: std::net::SocketAddr, request: &[u8], stall: bool) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(at).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    c.write_all(request).unwrap();
    if !stall {
        c.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    String::from_utf8(answer).unwrap()
}

fn http(at: std::net::SocketAddr, request: &[u8]) -> String {
    http_with(at, request, false)
}

#[test]
fn one_metrics_endpoint_per_process_serving_every_device_asking() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let a = Device::open(ia).unwrap();
    let at = a.serve_metrics((ia, 0).into()).unwrap();
    assert_eq!(at.ip(), ia);
    assert_ne!(at.port(), 0);
    // Another device cannot move the endpoint, only join it.
    let b = Device::open(ib).unwrap();
    let e = b.serve_metrics((ib, 0).into()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    assert_eq!(b.serve_metrics(at).unwrap(), at);
    let scrape = || http(at, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    let text = scrape();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains(&format!("\r\nContent-Type: {OPENMETRICS_CONTENT_TYPE}\r\n")),
        "{head}"
    );
    assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
    let pid = std::process::id();
    for ip in [ia, ib] {
        let sample = format!("addr=\"{ip}\",pid=\"{pid}\"}} ");
        assert!(body.contains(&sample), "{ip} missing: {body}");
    }
    assert!(body.ends_with("# EOF\n"));
    // A device that is gone is no longer served.
    drop(b);
    let body = scrape();
    assert!(!body.contains(&format!("addr=\"{ib}\"")), "{body}");
    assert!(body.contains(&format!("addr=\"{ia}\"")));
    // Anything but GET/HEAD /metrics is refused, and the endpoint goes on.
    for (req, status) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], "404 Not Found"),
        (b"GET /metricsx HTTP/1.1\r\n\r\n", "404 Not Found"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed"),
        (b"nonsense\r\n\r\n", "400 Bad Request"),
        (b"GET /metrics HTTP/9\r\n\r\n", "400 Bad Request"),
        (b"\xff\xff\xff\r\n\r\n", "400 Bad Request"),
        (b"GET /metrics HTTP/1.1\r\n", "400 Bad Request"), // ends mid-head
    ] {
        let answer = http(at, req);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}\r\n")),
            "{:?}: {answer}",
            String::from_utf8_lossy(req)
        );
    }
    // A client that stops mid-head is answered after the server's timeout.
    let stalled = http_with(at, b"GET /metrics HTTP/1.1\r\n", true);
    assert!(
        stalled.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{stalled}"
    );
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(20_000));
    assert!(http(at, long.as_bytes()).starts_with("HTTP/1.1 400 Bad Request\r\n"));
    let head_only = http(at, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert!(head_only.starts_with("HTTP/1.1 200 OK\r\n") && head_only.ends_with("\r\n\r\n"));
    assert!(scrape().starts_with("HTTP/1.1 200 OK\r\n"));
}
