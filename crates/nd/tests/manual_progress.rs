//! Manual progress through the ND API: no engine thread, so whoever waits
//! runs the engine. A whole connection — connect, accept, send, receive,
//! NotifyDisconnect, Disconnect — completes with every wait on one thread:
//! blocking waits, or futures polled by a plain loop (both sides on that
//! thread). Each case runs under a watchdog, so a wait that never drives the
//! engine fails the test instead of hanging it.

use ndverbs_nd::*;
use ndverbs_testkit::addr;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `f` on a thread of its own and fails if it takes longer than
/// [`WATCHDOG`].
fn within_watchdog<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(WATCHDOG)
        .expect("the waits did not complete: nothing ran the manual-progress engine")
}

fn manual(ip: IpAddr) -> Adapter {
    let cfg = DeviceConfig {
        progress: Progress::Manual,
        ..DeviceConfig::default()
    };
    Provider.open_adapter_with(ip, &cfg).unwrap()
}

fn region(ad: &Adapter, len: usize) -> NdResult<MemoryRegion> {
    let mr = ad.create_memory_region()?;
    mr.register(len, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
    Ok(mr)
}

fn ok(r: NdResultEntry) -> NdResult<NdResultEntry> {
    match r.status {
        NdStatus::SUCCESS => Ok(r),
        s => Err(NdError::new(s, format!("{r:?}"))),
    }
}

/// A manual-progress client on one thread, with blocking waits only,
/// against a server with its engine thread.
#[test]
fn blocking_waits_drive_a_manual_adapter() {
    let (server_ip, client_ip) = addr::pair_v4();
    let server = Provider.open_adapter(server_ip).unwrap();
    let listener = server.create_listener().unwrap();
    listener.bind(SocketAddr::new(server_ip, 0)).unwrap();
    listener.listen(1).unwrap();
    let at = listener.get_local_address().unwrap();
    let srv = std::thread::spawn(move || -> NdResult<Vec<u8>> {
        let cq = server.create_completion_queue(8)?;
        let qp =
            server.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
        let mr = region(&server, 64)?;
        qp.receive(1, &[NdSge::new(mr.address(), 64, mr.local_token())])?;
        let conn = server.create_connector()?;
        listener.get_connection_request(&conn)?.wait()?;
        conn.accept(&qp, 0, 0, b"")?.wait()?;
        let dreq = conn.notify_disconnect()?;
        let r = ok(cq.wait_result()?)?;
        let mut text = vec![0; r.bytes_transferred as usize];
        mr.read(0, &mut text)?;
        qp.send_inline(2, b"pong", OpFlags::empty())?;
        ok(cq.wait_result()?)?;
        dreq.wait()?;
        conn.disconnect()?.wait()?;
        Ok(text)
    });
    let got = within_watchdog(move || -> NdResult<Vec<u8>> {
        let client = manual(client_ip);
        assert_eq!(client.device().progress_mode(), Progress::Manual);
        let cq = client.create_completion_queue(8)?;
        let qp =
            client.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
        let mr = region(&client, 64)?;
        qp.receive(1, &[NdSge::new(mr.address(), 64, mr.local_token())])?;
        let conn = client.create_connector()?;
        conn.connect(&qp, at, 0, 0, b"")?.wait()?;
        conn.complete_connect()?.wait()?;
        qp.send_inline(2, b"ping", OpFlags::empty())?;
        // Two results, in either order: our send, the server's pong.
        let (a, b) = (ok(cq.wait_result()?)?, ok(cq.wait_result()?)?);
        let received = if a.request_type == RequestType::Receive {
            a
        } else {
            b
        };
        let mut text = vec![0; received.bytes_transferred as usize];
        mr.read(0, &mut text)?;
        conn.disconnect()?.wait()?;
        Ok(text)
    });
    assert_eq!(got.unwrap(), b"pong");
    assert_eq!(srv.join().unwrap().unwrap(), b"ping");
}

/// Polls two futures on this thread until both are done, sleeping while
/// neither asked to be polled again.
fn block_on_both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    struct Signal(Mutex<bool>, Condvar);
    impl Wake for Signal {
        fn wake(self: Arc<Self>) {
            *self.0.lock().unwrap() = true;
            self.1.notify_one();
        }
    }
    let s = Arc::new(Signal(Mutex::new(false), Condvar::new()));
    let waker = Waker::from(s.clone());
    let mut cx = Context::from_waker(&waker);
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut ra, mut rb) = (None, None);
    loop {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(&mut cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(&mut cx) {
                rb = Some(v);
            }
        }
        if let (Some(_), Some(_)) = (&ra, &rb) {
            return (ra.unwrap(), rb.unwrap());
        }
        let mut woken = s.0.lock().unwrap();
        while !*woken {
            woken = s.1.wait(woken).unwrap();
        }
        *woken = false;
    }
}

/// The next result of `cq`, awaiting its Notify while it is empty.
async fn next_result(cq: &CompletionQueue) -> NdResult<NdResultEntry> {
    loop {
        if let Some(r) = cq.get_result() {
            return ok(r);
        }
        cq.notify(NotifyType::Any).await?;
    }
}

/// Both sides manual, both on one thread: the futures run the engines.
#[test]
fn futures_drive_two_manual_adapters_on_one_thread() {
    let (server_ip, client_ip) = addr::pair_v4();
    let r = within_watchdog(move || {
        let (server, client) = (manual(server_ip), manual(client_ip));
        let listener = server.create_listener()?;
        listener.bind(SocketAddr::new(server_ip, 0))?;
        listener.listen(1)?;
        let at = listener.get_local_address()?;
        let serve = async {
            let cq = server.create_completion_queue(8)?;
            let qp = server.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))?;
            let mr = region(&server, 64)?;
            qp.receive(1, &[NdSge::new(mr.address(), 64, mr.local_token())])?;
            let conn = server.create_connector()?;
            listener.get_connection_request(&conn)?.await?;
            conn.accept(&qp, 0, 0, b"")?.await?;
            let dreq = conn.notify_disconnect()?;
            let r = next_result(&cq).await?;
            let mut text = vec![0; r.bytes_transferred as usize];
            mr.read(0, &mut text)?;
            dreq.await?;
            conn.disconnect()?.await?;
            // Our Disconnect flushed nothing left: the receive was taken.
            assert_eq!(cq.get_result(), None);
            Ok::<_, NdError>(text)
        };
        let call = async {
            let cq = client.create_completion_queue(8)?;
            let qp =
                client.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
            let conn = client.create_connector()?;
            conn.connect(&qp, at, 0, 0, b"")?.await?;
            conn.complete_connect()?.await?;
            qp.send_inline(1, b"on one thread", OpFlags::empty())?;
            next_result(&cq).await?;
            conn.disconnect()?.await?;
            Ok::<_, NdError>(())
        };
        let (text, called) = block_on_both(serve, call);
        called?;
        text
    });
    assert_eq!(r.unwrap(), b"on one thread");
}
