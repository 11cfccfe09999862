//! One server thread serving many clients: each connection gets its own
//! connector and queue pair from one listener; every client sends its number,
//! the server echoes it back doubled, and both sides disconnect.
//!
//! `cargo run -p ndverbs-nd --example many_connections [SERVER_IP CLIENT_IP [N]]`

mod common;

use ndverbs_nd::*;

/// What each side sets up for `n` connections: one CQ for all of them
/// (each QP's context says which connection a completion belongs to) and a
/// region of one 8-byte slot per connection.
fn resources(adapter: &Adapter, n: u64) -> NdResult<(CompletionQueue, MemoryRegion)> {
    let cq = adapter.create_completion_queue(4 * n as u32)?;
    let mr = adapter.create_memory_region()?;
    mr.register(8 * n as usize, MrFlags::ALLOW_LOCAL_WRITE)
        .wait()?;
    Ok((cq, mr))
}

/// Connection `i`'s connector and queue pair, with a receive into slot `i`
/// posted before it connects, so the peer's first SEND finds it.
fn connection(
    adapter: &Adapter,
    (cq, mr): &(CompletionQueue, MemoryRegion),
    i: u64,
) -> NdResult<(Connector, QueuePair)> {
    let qp = adapter.create_queue_pair(cq, cq, i, QueuePairSizes::new(2, 1).with_inline(16))?;
    qp.receive(i, &[NdSge::new(mr.address() + 8 * i, 8, mr.local_token())])?;
    Ok((adapter.create_connector()?, qp))
}

fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();
    let n = u64::from(common::count(8));

    let server = Provider.open_adapter(server_ip)?;
    let (listener, at) = common::listen(&server, n as u32)?;
    let srv = std::thread::spawn(move || -> NdResult<u64> {
        let res = resources(&server, n)?;
        let accept = |i| {
            let (c, qp) = connection(&server, &res, i)?;
            listener.get_connection_request(&c)?.wait()?;
            c.accept(&qp, 0, 0, b"")?.wait()?;
            Ok((c, qp))
        };
        let conns = (0..n).map(accept).collect::<NdResult<Vec<_>>>()?;
        // Answer each number, doubled, on the connection it came from.
        let (cq, mr) = &res;
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
                    OpFlags::SILENT_SUCCESS,
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
    let res = resources(&client, n)?;
    let connect = |i: u64| {
        let (c, qp) = connection(&client, &res, i)?;
        c.connect(&qp, at, 0, 0, b"")?.wait()?;
        c.complete_connect()?.wait()?;
        qp.send_inline(200, &i.to_le_bytes(), OpFlags::SILENT_SUCCESS)?;
        Ok((c, qp))
    };
    let conns = (0..n).map(connect).collect::<NdResult<Vec<_>>>()?;
    let (cq, mr) = &res;
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
