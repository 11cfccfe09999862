//! Connectors and listeners: connection set-up and teardown (networkdirect.md
//! §5–§6).
//!
//! A connector remembers the *identity* of the queue pair given to Connect
//! or Accept (its number and which QP had it), never the queue pair itself,
//! and hands it to each phased request (rule D8): a queue pair released
//! meanwhile is never confused with a newer one that got its number.
//! Status mapping of the requests:
//!
//! | request | outcome → status |
//! |---|---|
//! | Connect | REP → `ND_SUCCESS`; REQ retries exhausted → `ND_TIMEOUT` (success class: retry on the same connector); REJ, or ICMP port unreachable from the peer's host (no RoCE endpoint) → `ND_CONNECTION_REFUSED`; queue pair released → `ND_CANCELED` |
//! | Accept | RTU → `ND_SUCCESS`; no RTU → `ND_IO_TIMEOUT`; REJ → `ND_CONNECTION_REFUSED`; peer gone → `ND_CONNECTION_ABORTED`; queue pair released → `ND_CANCELED` |
//! | Disconnect | DREP received or sent → `ND_SUCCESS`; DREQ timed out → `ND_TIMEOUT` — each only once the queue pair is in ERROR and its flushed requests (`ND_CANCELED`) are on the CQ; while our DREQ is outstanding nothing is flushed. The peer ended the connection with a REJ → `ND_SUCCESS` (nothing sent, the queue pair flushed). Queue pair released → `ND_CANCELED` after the DREQ/DREP. At once: never connected, still connecting (Connect pending, before CompleteConnect, Accept waiting for the RTU: nothing sent, queue pair untouched), or already disconnected → `ND_CONNECTION_INVALID` |
//! | NotifyDisconnect | the peer's DREQ → `ND_SUCCESS` (at once if it already arrived on this connection); pending through our own Disconnect it stays pending → `ND_CANCELED` by `CancelOverlappedRequests` or release; the connection failed without a DREQ (REJ, CM timeout) → `ND_CONNECTION_ABORTED`; at once: never connected, Connect/Accept failed, or the connection ended without a DREQ → `ND_CONNECTION_INVALID` |
//! | any | cancelled or the connector released → `ND_CANCELED`; adapter removed → `ND_DEVICE_REMOVED`; a request the engine lost → `ND_INTERNAL_ERROR` |
//!
//! `GetReadLimits` reports this side's (inbound, outbound) limits: before
//! Accept, the peer's outbound and inbound limits from its Connect. A
//! passive connector's `GetLocalAddress` is its listener's address once a
//! request was handed to it.

use crate::adapter::{nd_err, nd_status, Adapter, MAX_CALLEE_DATA, MAX_CALLER_DATA};
use crate::pending::NdPending;
use crate::qp::QueuePair;
use crate::status::{copy_sized, NdError, NdResult, NdStatus};
use ndverbs_verbs::{AcceptArgs, ConnectArgs, Endpoint, Error, ErrorKind, Pending, QpId, LIMITS};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// RNR retries an ND connection asks of its peer: finite, so a Send that
/// never meets a Receive ends in `ND_IO_TIMEOUT` (ndsendnoreceive).
pub const ND_RNR_RETRY: u8 = 6;

/// The status of a connection request that ended badly. A request's
/// timeout means different things per request (see the table above), and a
/// few kinds read differently for a request than for a call: a busy
/// endpoint is an active connection, a QP that went away while the request
/// waited has had its requests cancelled with it, and a request the engine
/// lost is its internal error.
fn ep_error(e: Error, timeout: NdStatus) -> NdError {
    let status = match e.kind() {
        ErrorKind::TimedOut => timeout,
        ErrorKind::Busy => NdStatus::CONNECTION_ACTIVE,
        ErrorKind::NotFound => NdStatus::CANCELED,
        ErrorKind::Internal => NdStatus::INTERNAL_ERROR,
        kind => nd_status(kind),
    };
    NdError::new(status, e.to_string())
}

/// `ND_INVALID_BUFFER_SIZE` for private data longer than `max` bytes (ND's
/// `limit`: MaxCallerData for Connect, MaxCalleeData for Accept and Reject).
fn check_private_data(data: &[u8], max: usize, limit: &str) -> NdResult<()> {
    if data.len() > max {
        return Err(NdError::new(
            NdStatus::INVALID_BUFFER_SIZE,
            format!("private data longer than {limit}"),
        ));
    }
    Ok(())
}

/// The inbound and outbound read limits of a Connect or Accept, clamped
/// silently to the adapter's: what the CM calls responder resources and
/// initiator depth.
fn read_limits(inbound: u32, outbound: u32) -> (u8, u8) {
    let max = LIMITS.max_qp_rd_atom;
    let clamp = |limit: u32| u8::try_from(limit).unwrap_or(u8::MAX).min(max);
    (clamp(inbound), clamp(outbound))
}

/// An endpoint request as ND sees it: its outcome mapped to ND's statuses,
/// `timeout` being what its timing out means.
fn nd_request<U: Send + 'static>(p: Pending<U>, timeout: NdStatus) -> NdPending<()> {
    NdPending::map(p, move |r| r.map(|_| ()).map_err(|e| ep_error(e, timeout)))
}

/// What a connector and a listener both are: an rdma_cm-style endpoint of
/// one adapter, with at most one local port from the adapter's port space,
/// given back when the endpoint is dropped.
struct CmId {
    adapter: Adapter,
    ep: Endpoint,
    port: Mutex<Option<u16>>,
}

impl CmId {
    fn new(adapter: &Adapter) -> NdResult<Self> {
        Ok(CmId {
            adapter: adapter.clone(),
            ep: Endpoint::new(adapter.device()).map_err(nd_err)?,
            port: Mutex::new(None),
        })
    }

    fn port_slot(&self) -> std::sync::MutexGuard<'_, Option<u16>> {
        self.port.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Bind` to a local address of the adapter and a port (0: an ephemeral
    /// one). Binding twice fails with 0xC0000238
    /// (`STATUS_ADDRESS_ALREADY_ASSOCIATED`), as does a port in use.
    fn bind(&self, local: SocketAddr, what: &str) -> NdResult<()> {
        self.adapter.check_local(local.ip())?;
        let mut port = self.port_slot();
        if port.is_some() {
            return Err(NdError::new(
                NdStatus::ADDRESS_ALREADY_ASSOCIATED,
                format!("{what} already bound"),
            ));
        }
        *port = Some(self.adapter.reserve_port(local.port())?);
        Ok(())
    }

    /// The local port, binding an ephemeral one first if there is none
    /// (Connect binds implicitly, as in ND).
    fn bound_port(&self) -> NdResult<u16> {
        let mut port = self.port_slot();
        match *port {
            Some(p) => Ok(p),
            None => Ok(*port.insert(self.adapter.reserve_port(0)?)),
        }
    }

    /// `GetLocalAddress`; `unbound` is the status when there is no port yet.
    fn local_address(&self, unbound: NdStatus) -> NdResult<SocketAddr> {
        let port = self
            .port_slot()
            .ok_or_else(|| NdError::new(unbound, "not bound"))?;
        Ok(SocketAddr::new(self.adapter.address(), port))
    }

    /// `CancelOverlappedRequests`: pending requests complete `ND_CANCELED`.
    fn cancel(&self) -> NdResult<()> {
        self.ep.cancel().map_err(nd_err)
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("ep", &self.ep.id())
            .field("port", &*self.port_slot())
            .finish()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(p) = *self.port_slot() {
            self.adapter.release_port(p);
        }
    }
}

/// A connector's connection: the QP it was given and whether a Connect or
/// Accept is under way. Pending requests share it to undo `connecting`.
#[derive(Debug, Default)]
struct ConnState {
    qp: Option<QpId>,
    connecting: bool,
    /// The address of the listener whose GetConnectionRequest this
    /// connector was given to: a passive connection's local address.
    listener: Option<SocketAddr>,
}

/// A connector.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// use std::net::SocketAddr;
/// let server = Provider.open_adapter("127.91.12.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.12.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1))?;
/// sqp.receive(1, &[])?;
/// let listener = server.create_listener()?;
/// listener.bind(SocketAddr::new(server.address(), 0))?;
/// listener.listen(1)?;
/// // Passive side: a connector takes the next connection request.
/// let passive = server.create_connector()?;
/// let request = listener.get_connection_request(&passive)?;
/// // Active side: Connect (REQ, completes on the REP) …
/// let active = client.create_connector()?;
/// let rep = active.connect(&cqp, listener.get_local_address()?, 0, 0, b"hi")?;
/// request.wait()?;
/// assert!(passive.get_private_data()?.starts_with(b"hi"));
/// let rtu = passive.accept(&sqp, 0, 0, b"")?;
/// rep.wait()?;
/// // … then CompleteConnect (QP to RTS, RTU), which completes the Accept.
/// active.complete_connect()?.wait()?;
/// rtu.wait()?;
/// // Teardown. NotifyDisconnect completes when the peer's DREQ arrives.
/// let dreq = passive.notify_disconnect()?;
/// let bye = active.disconnect()?; // DREQ; completes on the DREP
/// dreq.wait()?;
/// // An incoming DREQ flushes nothing: the server's receive is still posted …
/// assert_eq!(scq.get_result(), None);
/// // … until its own Disconnect, which sends the DREP and flushes its QP.
/// passive.disconnect()?.wait()?;
/// bye.wait()?;
/// assert_eq!(scq.wait_result()?.status, NdStatus::CANCELED);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug)]
pub struct Connector {
    cm: CmId,
    state: Arc<Mutex<ConnState>>,
}

impl Connector {
    pub(crate) fn create(adapter: &Adapter) -> NdResult<Self> {
        Ok(Connector {
            cm: CmId::new(adapter)?,
            state: Arc::default(),
        })
    }

    fn st(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The QP given to Connect or Accept, or `ND_CONNECTION_INVALID` (with
    /// `missing` as the message) before either.
    fn connection_qp(&self, missing: &str) -> NdResult<QpId> {
        let qp = self.st().qp;
        qp.ok_or_else(|| NdError::new(NdStatus::CONNECTION_INVALID, missing))
    }

    /// Starts a Connect or Accept with `qp`: one at a time per connector.
    fn start(&self, qp: &QueuePair) -> NdResult<()> {
        let mut st = self.st();
        if st.connecting {
            return Err(NdError::new(
                NdStatus::CONNECTION_ACTIVE,
                "a connection is already active",
            ));
        }
        st.connecting = true;
        st.qp = Some(qp.id());
        Ok(())
    }

    /// `Bind` to a local address and port (0: an ephemeral port). A second
    /// bind fails with 0xC0000238 (`STATUS_ADDRESS_ALREADY_ASSOCIATED`).
    pub fn bind(&self, local: SocketAddr) -> NdResult<()> {
        self.cm.bind(local, "connector")
    }

    /// `Connect` `qp` to `remote`. Read limits above the adapter's are
    /// clamped silently; private data beyond 56 bytes is `ND_INVALID_BUFFER_SIZE`.
    pub fn connect(
        &self,
        qp: &QueuePair,
        remote: SocketAddr,
        inbound_read_limit: u32,
        outbound_read_limit: u32,
        private_data: &[u8],
    ) -> NdResult<NdPending<()>> {
        check_private_data(private_data, MAX_CALLER_DATA, "MaxCallerData")?;
        if self.cm.adapter.is_removed() {
            return Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"));
        }
        let local_port = self.cm.bound_port()?;
        self.start(qp)?;
        let (responder_resources, initiator_depth) =
            read_limits(inbound_read_limit, outbound_read_limit);
        let args = ConnectArgs {
            remote: remote.ip(),
            remote_port: remote.port(),
            local_port,
            responder_resources,
            initiator_depth,
            retry_count: qp.retry_count(),
            rnr_retry_count: ND_RNR_RETRY,
            // The port's, as rdma_cm takes it from the net device's MTU.
            path_mtu: self.cm.adapter.device().active_mtu(),
            private_data: private_data.to_vec(),
        };
        let p = match self.cm.ep.connect(qp.id(), args) {
            Ok(p) => p,
            Err(e) => {
                self.st().connecting = false;
                let mut err = nd_err(e);
                if err.status == NdStatus::DEVICE_BUSY {
                    err.status = NdStatus::CONNECTION_ACTIVE;
                }
                return Err(err);
            }
        };
        let state = self.state.clone();
        Ok(NdPending::map(p, move |r| {
            r.map(|_| ()).map_err(|e| {
                // A failed Connect leaves QP and connector reusable.
                state.lock().unwrap_or_else(|e| e.into_inner()).connecting = false;
                ep_error(e, NdStatus::TIMEOUT)
            })
        }))
    }

    /// `CompleteConnect`: QP to RTS, then RTU.
    pub fn complete_connect(&self) -> NdResult<NdPending<()>> {
        let qp = self.connection_qp("no Connect")?;
        let p = self.cm.ep.complete_connect(qp).map_err(nd_err)?;
        Ok(nd_request(p, NdStatus::IO_TIMEOUT))
    }

    /// `Accept` a connection request with `qp`; completes on RTU. Read limits
    /// are clamped to the adapter's and the peer's offer.
    pub fn accept(
        &self,
        qp: &QueuePair,
        inbound_read_limit: u32,
        outbound_read_limit: u32,
        private_data: &[u8],
    ) -> NdResult<NdPending<()>> {
        check_private_data(private_data, MAX_CALLEE_DATA, "MaxCalleeData")?;
        self.start(qp)?;
        let (responder_resources, initiator_depth) =
            read_limits(inbound_read_limit, outbound_read_limit);
        let args = AcceptArgs {
            responder_resources,
            initiator_depth,
            rnr_retry_count: ND_RNR_RETRY,
            private_data: private_data.to_vec(),
        };
        let p = self.cm.ep.accept(qp.id(), args).map_err(nd_err)?;
        Ok(nd_request(p, NdStatus::IO_TIMEOUT))
    }

    /// `Reject` the connection request (passive) or the REP (active).
    pub fn reject(&self, private_data: &[u8]) -> NdResult<()> {
        check_private_data(private_data, MAX_CALLEE_DATA, "MaxCalleeData")?;
        self.cm.ep.reject(private_data).map_err(|e| {
            let mut err = nd_err(e);
            if err.status == NdStatus::INVALID_PARAMETER {
                err.status = NdStatus::CONNECTION_INVALID;
            }
            err
        })
    }

    /// `GetReadLimits`: (inbound, outbound), already clamped.
    pub fn get_read_limits(&self) -> NdResult<(u32, u32)> {
        let i = self.cm.ep.info().map_err(nd_err)?;
        Ok((u32::from(i.read_limits.0), u32::from(i.read_limits.1)))
    }

    /// `GetPrivateData`: the peer's private data (REQ, REP or REJ).
    pub fn get_private_data(&self) -> NdResult<Vec<u8>> {
        Ok(self.cm.ep.info().map_err(nd_err)?.private_data)
    }

    /// `GetPrivateData` into `buf`, with ND's size protocol: the length if
    /// it fits; otherwise what fits is copied and the call fails
    /// `ND_BUFFER_OVERFLOW` with the size needed in
    /// [`NdError::required_size`].
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// use std::net::SocketAddr;
    /// let server = Provider.open_adapter("127.91.12.3".parse().unwrap())?;
    /// let client = Provider.open_adapter("127.91.12.4".parse().unwrap())?;
    /// let cq = client.create_completion_queue(4)?;
    /// let qp = client.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(1, 1))?;
    /// let listener = server.create_listener()?;
    /// listener.bind(SocketAddr::new(server.address(), 0))?;
    /// listener.listen(1)?;
    /// let passive = server.create_connector()?;
    /// let request = listener.get_connection_request(&passive)?;
    /// let active = client.create_connector()?;
    /// let _rep = active.connect(&qp, listener.get_local_address()?, 0, 0, b"hello")?;
    /// request.wait()?;
    /// // ndmw's way: ask with no room to learn the size, then with room.
    /// let err = passive.get_private_data_into(&mut []).unwrap_err();
    /// assert_eq!(err.status, NdStatus::BUFFER_OVERFLOW);
    /// let mut data = vec![0; err.required_size().unwrap()];
    /// assert_eq!(passive.get_private_data_into(&mut data)?, data.len());
    /// assert!(data.starts_with(b"hello"));
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn get_private_data_into(&self, buf: &mut [u8]) -> NdResult<usize> {
        copy_sized(&self.get_private_data()?, buf)
    }

    /// `GetLocalAddress`: the bound address (active), or the listener's
    /// once a connection request was handed to this connector (passive).
    pub fn get_local_address(&self) -> NdResult<SocketAddr> {
        let bound = self.cm.local_address(NdStatus::CONNECTION_INVALID);
        let listener = self.st().listener;
        match (bound, listener) {
            (Ok(a), _) => Ok(a),
            (Err(e), Some(l)) => {
                let handed_over = self.cm.ep.info().map_err(nd_err)?.peer.is_some();
                if handed_over {
                    Ok(l)
                } else {
                    Err(e)
                }
            }
            (Err(e), None) => Err(e),
        }
    }

    /// `GetPeerAddress` (valid on a passive connector before Accept).
    pub fn get_peer_address(&self) -> NdResult<SocketAddr> {
        let i = self.cm.ep.info().map_err(nd_err)?;
        let ip = i
            .peer
            .ok_or_else(|| NdError::new(NdStatus::CONNECTION_INVALID, "no peer"))?;
        Ok(SocketAddr::new(ip, i.peer_port))
    }

    /// `NotifyDisconnect`: completes when the peer's DREQ arrives (statuses
    /// in the table above). It never flushes anything (rule D6).
    pub fn notify_disconnect(&self) -> NdResult<NdPending<()>> {
        let p = self.cm.ep.notify_disconnect().map_err(nd_err)?;
        Ok(nd_request(p, NdStatus::TIMEOUT))
    }

    /// `Disconnect`: DREQ (or DREP if the peer's DREQ arrived), then the QP
    /// to ERROR, which flushes every outstanding request (`ND_CANCELED`);
    /// completes once those flushes are on the CQ (statuses in the table
    /// above).
    pub fn disconnect(&self) -> NdResult<NdPending<()>> {
        let qp = self.connection_qp("never connected")?;
        let p = self.cm.ep.disconnect(qp).map_err(nd_err)?;
        Ok(nd_request(p, NdStatus::TIMEOUT))
    }

    /// `CancelOverlappedRequests`: pending requests complete `ND_CANCELED`.
    pub fn cancel_overlapped_requests(&self) -> NdResult<()> {
        self.cm.cancel()
    }
}

/// A listener.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// use std::net::SocketAddr;
/// let server = Provider.open_adapter("127.91.13.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.13.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// let listener = server.create_listener()?;
/// listener.bind(SocketAddr::new(server.address(), 0))?; // port 0: an ephemeral one
/// listener.listen(4)?;
/// let addr = listener.get_local_address()?;
/// // A port has one listener.
/// let err = server.create_listener()?.bind(addr).unwrap_err();
/// assert_eq!(err.status, NdStatus::ADDRESS_ALREADY_ASSOCIATED);
/// // Each GetConnectionRequest hands the next request to a connector.
/// let passive = server.create_connector()?;
/// let request = listener.get_connection_request(&passive)?;
/// let qp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(1, 1))?;
/// let active = client.create_connector()?;
/// let rep = active.connect(&qp, addr, 0, 0, b"")?;
/// request.wait()?;
/// // Who is asking? Accept, or turn the request down.
/// assert_eq!(passive.get_peer_address()?.ip(), client.address());
/// passive.reject(b"busy")?;
/// assert_eq!(rep.wait().unwrap_err().status, NdStatus::CONNECTION_REFUSED);
/// # let _ = scq;
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug)]
pub struct Listener {
    cm: CmId,
}

impl Listener {
    pub(crate) fn create(adapter: &Adapter) -> NdResult<Self> {
        Ok(Listener {
            cm: CmId::new(adapter)?,
        })
    }

    /// `Bind`: a second listener on the same port fails with 0xC0000238.
    pub fn bind(&self, local: SocketAddr) -> NdResult<()> {
        self.cm.bind(local, "listener")
    }

    /// `Listen` with room for `backlog` unanswered requests (needs a bound port).
    pub fn listen(&self, backlog: u32) -> NdResult<()> {
        let port = self
            .cm
            .local_address(NdStatus::INVALID_DEVICE_STATE)?
            .port();
        self.cm
            .ep
            .listen(port, backlog.max(1) as usize)
            .map_err(|e| {
                let mut err = nd_err(e);
                if err.status == NdStatus::DEVICE_BUSY {
                    err.status = NdStatus::ADDRESS_ALREADY_ASSOCIATED;
                }
                err
            })
    }

    /// `GetConnectionRequest`: the next request is handed to `connector`
    /// (several may be outstanding).
    pub fn get_connection_request(&self, connector: &Connector) -> NdResult<NdPending<()>> {
        let p = self.cm.ep.get_request(&connector.cm.ep).map_err(nd_err)?;
        connector.st().listener = self.get_local_address().ok();
        Ok(nd_request(p, NdStatus::TIMEOUT))
    }

    /// `GetLocalAddress`.
    pub fn get_local_address(&self) -> NdResult<SocketAddr> {
        self.cm.local_address(NdStatus::INVALID_DEVICE_STATE)
    }

    /// `CancelOverlappedRequests`.
    pub fn cancel_overlapped_requests(&self) -> NdResult<()> {
        self.cm.cancel()
    }
}
