//! An echo server and its clients as tokio tasks: the server task accepts
//! connections as they come and serves each in a task of its own; every
//! client connects, sends a line, checks the echo (upper-cased) and
//! disconnects gracefully. Nothing spins and no thread blocks: connection
//! requests are awaited as futures (`NdPending`), and completions by
//! registering each completion queue's file descriptor with tokio's reactor
//! (`AsyncFd`) and arming it.
//!
//! `cargo run -p ndverbs-nd --example tokio_echo [SERVER_IP CLIENT_IP [N]]`

mod common;

use ndverbs_nd::*;
use std::net::SocketAddr;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

const LINE: usize = 64;

/// A completion queue whose completions are awaited through tokio's reactor.
struct AsyncCq {
    fd: AsyncFd<CompletionQueue>,
}

impl AsyncCq {
    fn new(cq: CompletionQueue) -> std::io::Result<Self> {
        // SAFETY: the descriptor is the queue's eventfd; the queue, owned by
        // the AsyncFd, keeps it open and returns the same one until dropped.
        let fd = unsafe { AsyncFd::register_with_interest(cq, Interest::READABLE) }?;
        Ok(AsyncCq { fd })
    }

    fn cq(&self) -> &CompletionQueue {
        self.fd.get_ref()
    }

    /// The next completion: take one if there is one; else arm the queue,
    /// look once more (a completion may have come before the arm), and sleep
    /// in the reactor until the queue's descriptor fires.
    async fn next(&self) -> NdResult<NdResultEntry> {
        loop {
            if let Some(r) = self.cq().get_result() {
                return Ok(r);
            }
            self.cq().arm(NotifyType::Any);
            if let Some(r) = self.cq().get_result() {
                return Ok(r);
            }
            let mut ready = self
                .fd
                .readable()
                .await
                .map_err(|e| NdError::new(NdStatus::INTERNAL_ERROR, e.to_string()))?;
            self.cq().ack_events();
            ready.clear_ready();
        }
    }

    /// The next completion, which must have succeeded.
    async fn next_ok(&self) -> NdResult<NdResultEntry> {
        let r = self.next().await?;
        if r.status != NdStatus::SUCCESS {
            return Err(NdError::new(
                r.status,
                format!("{:?} failed", r.request_type),
            ));
        }
        Ok(r)
    }
}

/// One connection's queue pair, its completion queue and a registered
/// buffer: `LINE` bytes to receive into, then `LINE` bytes to send from.
///
/// Send and receive completions share the queue and need not come in the
/// order the requests were made: the echo may be taken before the ACK that
/// completes our send (the peer lets the ACK ride behind its answer), so a
/// receive completion met while awaiting a send is kept for `receive`.
struct Conn {
    cq: AsyncCq,
    qp: QueuePair,
    mr: MemoryRegion,
    received: std::sync::Mutex<Option<NdResultEntry>>,
}

impl Conn {
    async fn new(adapter: &Adapter) -> NdResult<Conn> {
        let cq = adapter.create_completion_queue(8)?;
        let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(2, 1))?;
        let mr = adapter.create_memory_region()?;
        mr.register(2 * LINE, MrFlags::ALLOW_LOCAL_WRITE).await?;
        let cq =
            AsyncCq::new(cq).map_err(|e| NdError::new(NdStatus::INTERNAL_ERROR, e.to_string()))?;
        Ok(Conn {
            cq,
            qp,
            mr,
            received: std::sync::Mutex::new(None),
        })
    }

    fn post_receive(&self) -> NdResult<()> {
        let sge = NdSge::new(self.mr.address(), LINE as u32, self.mr.local_token());
        self.qp.receive(1, &[sge])
    }

    /// Sends `data` from the buffer's second half and awaits its completion.
    async fn send(&self, data: &[u8]) -> NdResult<()> {
        self.mr.write(LINE, data)?;
        let sge = NdSge::new(
            self.mr.address() + LINE as u64,
            data.len() as u32,
            self.mr.local_token(),
        );
        self.qp.send(2, &[sge], OpFlags::empty())?;
        loop {
            let r = self.cq.next_ok().await?;
            match r.request_type {
                RequestType::Send => return Ok(()),
                RequestType::Receive => *self.received.lock().unwrap() = Some(r),
                other => panic!("unexpected {other:?} completion"),
            }
        }
    }

    /// Awaits the posted receive and returns what arrived.
    async fn receive(&self) -> NdResult<Vec<u8>> {
        let kept = self.received.lock().unwrap().take();
        let r = match kept {
            Some(r) => r,
            None => self.cq.next_ok().await?,
        };
        assert_eq!(r.request_type, RequestType::Receive);
        let mut data = vec![0u8; r.bytes_transferred as usize];
        self.mr.read(0, &mut data)?;
        Ok(data)
    }
}

/// Serves one accepted connection: echo one line upper-cased, then wait for
/// the client's DREQ and answer it with our Disconnect.
async fn serve(conn: Connector, c: Conn) -> NdResult<usize> {
    let line = c.receive().await?;
    c.send(&line.to_ascii_uppercase()).await?;
    conn.notify_disconnect()?.await?;
    conn.disconnect()?.await?;
    Ok(line.len())
}

/// Accepts `n` connections, each served by a task of its own while the next
/// is accepted; returns the bytes echoed.
async fn server(adapter: Adapter, listener: Listener, n: u32) -> NdResult<usize> {
    let mut served = Vec::new();
    for _ in 0..n {
        let conn = adapter.create_connector()?;
        listener.get_connection_request(&conn)?.await?;
        let c = Conn::new(&adapter).await?;
        // The receive is posted before Accept, so the first SEND finds it.
        c.post_receive()?;
        conn.accept(&c.qp, 0, 0, b"")?.await?;
        served.push(tokio::spawn(serve(conn, c)));
    }
    let mut bytes = 0;
    for t in served {
        bytes += t.await.expect("connection task")?;
    }
    Ok(bytes)
}

async fn client(adapter: Adapter, server: SocketAddr, i: u32) -> NdResult<()> {
    let c = Conn::new(&adapter).await?;
    c.post_receive()?;
    let conn = adapter.create_connector()?;
    conn.connect(&c.qp, server, 0, 0, b"")?.await?;
    conn.complete_connect()?.await?;
    let line = format!("hello from client {i}");
    c.send(line.as_bytes()).await?;
    let echo = c.receive().await?;
    assert_eq!(
        echo,
        line.to_uppercase().as_bytes(),
        "client {i}: wrong echo"
    );
    conn.disconnect()?.await?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();
    let n = common::count(4);

    let server_adapter = Provider.open_adapter(server_ip)?;
    let (listener, addr) = common::listen(&server_adapter, n)?;
    let srv = tokio::spawn(server(server_adapter, listener, n));

    let client_adapter = Provider.open_adapter(client_ip)?;
    let clients: Vec<_> = (0..n)
        .map(|i| tokio::spawn(client(client_adapter.clone(), addr, i)))
        .collect();
    for c in clients {
        c.await.expect("client task")?;
    }
    let bytes = srv.await.expect("server task")?;
    println!("{n} clients echoed ({bytes} bytes) and disconnected");
    Ok(())
}
