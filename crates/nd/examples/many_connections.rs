//! One server thread serving many clients: each connection gets its own
//! connector and queue pair from one listener; every client sends its number,
//! the server echoes it back doubled, and both sides disconnect.
//!
//! `cargo run -p ndverbs-nd --example many_connections [SERVER_IP CLIENT_IP [N]]`

mod common;

use ndverbs_nd::*;
use std::net::SocketAddr;

fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();
    let n: u64 = std::env::args()
        .nth(3)
        .map_or(8, |s| s.parse().expect("count"));

    let server = Provider.open_adapter(server_ip)?;
    let listener = server.create_listener()?;
    listener.bind(SocketAddr::new(server_ip, 0))?;
    listener.listen(n as u32)?;
    let port = listener.get_local_address()?.port();
    let srv = std::thread::spawn(move || -> NdResult<u64> {
        // One CQ for every connection; each QP's context says which one.
        let cq = server.create_completion_queue(4 * n as u32)?;
        let mr = server.create_memory_region()?;
        mr.register(8 * n as usize, mr_flags::ALLOW_LOCAL_WRITE)
            .wait()?;
        let mut conns = Vec::new();
        for i in 0..n {
            let qp = server.create_queue_pair(&cq, &cq, i, 2, 2, 1, 1, 16)?;
            let c = server.create_connector()?;
            listener.get_connection_request(&c)?.wait()?;
            qp.receive(i, &[NdSge::new(mr.address() + 8 * i, 8, mr.local_token())])?;
            c.accept(&qp, 0, 0, b"")?.wait()?;
            conns.push((c, qp));
        }
        let mut served = 0;
        while served < n {
            let r = cq.wait_result()?;
            assert_eq!(r.status, NdStatus::SUCCESS);
            if r.request_type == RequestType::Receive {
                let mut v = [0u8; 8];
                mr.read(8 * r.request_context as usize, &mut v)?;
                let (_, qp) = &conns[r.queue_pair_context as usize];
                qp.send_inline(
                    100,
                    &(2 * u64::from_le_bytes(v)).to_le_bytes(),
                    op_flags::SILENT_SUCCESS,
                )?;
                served += 1;
            }
        }
        for (c, _) in &conns {
            c.notify_disconnect()?.wait()?;
            c.disconnect()?.wait()?;
        }
        Ok(served)
    });

    let client = Provider.open_adapter(client_ip)?;
    let cq = client.create_completion_queue(4 * n as u32)?;
    let mr = client.create_memory_region()?;
    mr.register(8 * n as usize, mr_flags::ALLOW_LOCAL_WRITE)
        .wait()?;
    let mut conns = Vec::new();
    for i in 0..n {
        let qp = client.create_queue_pair(&cq, &cq, i, 2, 2, 1, 1, 16)?;
        qp.receive(i, &[NdSge::new(mr.address() + 8 * i, 8, mr.local_token())])?;
        let c = client.create_connector()?;
        c.connect(&qp, SocketAddr::new(server_ip, port), 0, 0, b"")?
            .wait()?;
        c.complete_connect()?.wait()?;
        qp.send_inline(200, &i.to_le_bytes(), op_flags::SILENT_SUCCESS)?;
        conns.push((c, qp));
    }
    for _ in 0..n {
        let r = cq.wait_result()?;
        assert_eq!(
            (r.status, r.request_type),
            (NdStatus::SUCCESS, RequestType::Receive)
        );
        let mut v = [0u8; 8];
        mr.read(8 * r.request_context as usize, &mut v)?;
        assert_eq!(u64::from_le_bytes(v), 2 * r.request_context);
    }
    for (c, _) in &conns {
        c.disconnect()?.wait()?;
    }
    let served = srv.join().expect("server thread")?;
    println!("{served} connections served, every answer checked");
    Ok(())
}
