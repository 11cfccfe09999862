//! SEND/RECEIVE between a server thread and a client thread, then a graceful
//! disconnect: each side waits for the other's "bye" (NotifyDisconnect on the
//! server), and both call Disconnect.
//!
//! `cargo run -p ndverbs-nd --example send_receive [SERVER_IP CLIENT_IP]`

mod common;

use ndverbs_nd::*;
use std::net::SocketAddr;

/// Waits for one completion and checks it succeeded.
fn one(cq: &CompletionQueue) -> NdResult<NdResultEntry> {
    let r = cq.wait_result()?;
    assert_eq!(r.status, NdStatus::SUCCESS, "{r:?}");
    Ok(r)
}

fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();
    let server = Provider.open_adapter(server_ip)?;
    let listener = server.create_listener()?;
    listener.bind(SocketAddr::new(server_ip, 0))?;
    listener.listen(4)?;
    let port = listener.get_local_address()?.port();

    let srv = std::thread::spawn(move || -> NdResult<String> {
        let cq = server.create_completion_queue(16)?;
        let qp =
            server.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
        let mr = server.create_memory_region()?;
        mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
        let conn = server.create_connector()?;
        listener.get_connection_request(&conn)?.wait()?;
        // Post the receive before accepting, so the first SEND finds it.
        qp.receive(1, &[NdSge::new(mr.address(), 4096, mr.local_token())])?;
        conn.accept(&qp, 0, 0, b"")?.wait()?;
        let bye = conn.notify_disconnect()?;
        let r = one(&cq)?;
        let mut text = vec![0u8; r.bytes_transferred as usize];
        mr.read(0, &mut text)?;
        qp.send_inline(2, b"hello, client", OpFlags::empty())?;
        one(&cq)?;
        bye.wait()?; // the client said goodbye (its DREQ arrived) …
        conn.disconnect()?.wait()?; // … and our Disconnect answers with the DREP.
        Ok(String::from_utf8_lossy(&text).into_owned())
    });

    let client = Provider.open_adapter(client_ip)?;
    let cq = client.create_completion_queue(16)?;
    let qp = client.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
    let mr = client.create_memory_region()?;
    mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
    qp.receive(1, &[NdSge::new(mr.address(), 4096, mr.local_token())])?;
    let conn = client.create_connector()?;
    conn.connect(&qp, SocketAddr::new(server_ip, port), 0, 0, b"")?
        .wait()?;
    conn.complete_connect()?.wait()?;
    qp.send_inline(2, b"hello, server", OpFlags::empty())?;
    let mut got = [one(&cq)?, one(&cq)?];
    got.sort_by_key(|r| r.request_type as u8);
    let mut text = vec![0u8; got[0].bytes_transferred as usize];
    mr.read(0, &mut text)?;
    conn.disconnect()?.wait()?;
    let heard = srv.join().expect("server thread")?;
    println!(
        "server heard {heard:?}, client heard {:?}",
        String::from_utf8_lossy(&text)
    );
    Ok(())
}
