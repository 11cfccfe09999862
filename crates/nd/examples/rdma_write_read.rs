//! RDMA WRITE into the peer's memory and READ it back, with the peer's
//! address and token exchanged in the connection's private data.
//!
//! `cargo run -p ndverbs-nd --example rdma_write_read [SERVER_IP CLIENT_IP]`

mod common;

use ndverbs_nd::*;

/// Waits for one completion and checks it succeeded.
fn done(cq: &CompletionQueue) -> NdResult<()> {
    let r = cq.wait_result()?;
    assert_eq!(r.status, NdStatus::SUCCESS, "{r:?}");
    Ok(())
}

fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();

    // The server exposes 1 MiB for remote READ and WRITE.
    let server = Provider.open_adapter(server_ip)?;
    let scq = server.create_completion_queue(16)?;
    let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
    let smr = server.create_memory_region()?;
    smr.register(
        1 << 20,
        MrFlags::ALLOW_REMOTE_READ | MrFlags::ALLOW_REMOTE_WRITE,
    )
    .wait()?;
    let (listener, at) = common::listen(&server, 1)?;
    let sconn = server.create_connector()?;
    let req = listener.get_connection_request(&sconn)?;

    let client = Provider.open_adapter(client_ip)?;
    let ccq = client.create_completion_queue(16)?;
    let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1))?;
    let cmr = client.create_memory_region()?;
    cmr.register(2 << 20, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
    let cconn = client.create_connector()?;
    let connecting = cconn.connect(&cqp, at, 1, 1, b"")?;

    req.wait()?;
    // Accept with {address, token} of the exposed region as private data.
    let mut desc = smr.address().to_le_bytes().to_vec();
    desc.extend_from_slice(&smr.remote_token().to_le_bytes());
    let accepting = sconn.accept(&sqp, 1, 1, &desc)?;
    connecting.wait()?;
    let pd = cconn.get_private_data()?;
    let remote = u64::from_le_bytes(pd[..8].try_into().expect("8 bytes"));
    let token = u32::from_le_bytes(pd[8..12].try_into().expect("4 bytes"));
    cconn.complete_connect()?.wait()?;
    accepting.wait()?;

    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    cmr.write(0, &data)?;
    cqp.write(
        1,
        &[NdSge::new(cmr.address(), 1 << 20, cmr.local_token())],
        remote,
        token,
        OpFlags::empty(),
    )?;
    done(&ccq)?;
    cqp.read(
        2,
        &[NdSge::new(
            cmr.address() + (1 << 20),
            1 << 20,
            cmr.local_token(),
        )],
        remote,
        token,
        OpFlags::empty(),
    )?;
    done(&ccq)?;
    let mut back = vec![0u8; 1 << 20];
    cmr.read(1 << 20, &mut back)?;
    assert_eq!(back, data);
    println!("wrote and read back 1 MiB: identical");
    let d = cconn.disconnect()?;
    sconn.disconnect()?.wait()?;
    d.wait()?;
    Ok(())
}
