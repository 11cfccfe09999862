//! The same pending requests, awaited as futures: a tiny runtime-agnostic
//! `block_on` (no dependency) drives connect/accept/disconnect, showing that
//! `NdPending` needs nothing from any particular async runtime.
//!
//! `cargo run -p ndverbs-nd --example async_futures [SERVER_IP CLIENT_IP]`

mod common;

use ndverbs_nd::*;
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Runs a future to completion on this thread, sleeping until it is woken.
fn block_on<F: Future>(f: F) -> F::Output {
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
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        let mut woken = s.0.lock().unwrap();
        while !*woken {
            woken = s.1.wait(woken).unwrap();
        }
        *woken = false;
    }
}

fn main() -> NdResult<()> {
    let (server_ip, client_ip) = common::addresses();
    let (server, client) = (
        Provider.open_adapter(server_ip)?,
        Provider.open_adapter(client_ip)?,
    );
    let (scq, ccq) = (
        server.create_completion_queue(8)?,
        client.create_completion_queue(8)?,
    );
    let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(2, 1))?;
    let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(2, 1))?;
    let (listener, at) = common::listen(&server, 1)?;
    let (sconn, cconn) = (server.create_connector()?, client.create_connector()?);

    block_on(async {
        let request = listener.get_connection_request(&sconn)?;
        let connect = cconn.connect(&cqp, at, 0, 0, b"async")?;
        request.await?;
        let accept = sconn.accept(&sqp, 0, 0, b"")?;
        connect.await?;
        cconn.complete_connect()?.await?;
        accept.await?;
        println!(
            "connected (peer said {:?})",
            String::from_utf8_lossy(&sconn.get_private_data()?[..5])
        );
        let peer_gone = sconn.notify_disconnect()?;
        let bye = cconn.disconnect()?;
        peer_gone.await?;
        sconn.disconnect()?.await?;
        bye.await?;
        println!("disconnected on both sides");
        Ok::<(), NdError>(())
    })
}
