//! Connections through the CM between two [`Side`]s whose QPs are in INIT
//! ([`super::cm_side`]): the four requests of the rdma_cm handshake
//! (listen and get-request on the passive side, connect and accept, then
//! complete-connect) in one call.

use super::Side;
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, ConnectInfo, EpError, EpPending, RequestInfo};
use std::time::Duration;

/// How long one CM request may take.
pub const CM_LIMIT: Duration = Duration::from_secs(30);

/// A connect to `remote:port` (the test kit's, the same for engine and
/// verbs tests: rdma_cm port 40001, 4 READ/atomics each way, 7 retries of
/// each kind, path MTU 1024, no private data).
pub use ndverbs_testkit::verbs::connect_args;

/// An accept matching [`connect_args`]: 4 READ/atomics each way, RNR
/// retries forever, no private data.
pub fn accept_args() -> AcceptArgs {
    AcceptArgs {
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        private_data: Vec::new(),
    }
}

/// A listening endpoint of `s` on rdma_cm port `port`.
pub fn listen(s: &Side, port: u16) -> u32 {
    let l = s.nic.create_ep().unwrap();
    s.nic.ep_listen(l, port, 8).unwrap();
    l
}

/// A fresh endpoint of `b` waiting on `listener` for a connection request.
pub fn wait_request(b: &Side, listener: u32) -> (u32, EpPending<RequestInfo>) {
    let eb = b.nic.create_ep().unwrap();
    let req = b.nic.ep_get_request(listener, eb).unwrap();
    (eb, req)
}

/// A fresh endpoint of `a` connecting its QP as `args` say (the request in
/// flight).
pub fn start_connect(a: &Side, args: ConnectArgs) -> (u32, EpPending<ConnectInfo>) {
    let ea = a.nic.create_ep().unwrap();
    let conn = a.nic.ep_connect(ea, a.qp.ident(), args).unwrap();
    (ea, conn)
}

/// An established connection: both endpoints and what each side learned.
pub struct Established {
    /// The active side's endpoint.
    pub ea: u32,
    /// The passive side's endpoint.
    pub eb: u32,
    /// The request as the passive side saw it.
    pub request: RequestInfo,
    /// The reply as the active side saw it.
    pub reply: ConnectInfo,
}

/// Connects `a` to `b`, whose endpoint `listener` listens on the port
/// `args` names: both QPs end in RTS.
#[track_caller]
pub fn establish(
    a: &Side,
    b: &Side,
    listener: u32,
    args: ConnectArgs,
    accept: AcceptArgs,
) -> Established {
    let (eb, req) = wait_request(b, listener);
    let (ea, conn) = start_connect(a, args);
    let request = done(req, "connection request");
    let acc = b.nic.ep_accept(eb, b.qp.ident(), accept).unwrap();
    let reply = done(conn, "connect");
    let complete = a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap();
    done(complete, "complete connect");
    done(acc, "accept");
    Established {
        ea,
        eb,
        request,
        reply,
    }
}

/// Connects `a` to `b` listening on `port` with [`connect_args`] and
/// [`accept_args`]; returns (a's endpoint, b's endpoint).
#[track_caller]
pub fn connect(a: &Side, b: &Side, port: u16) -> (u32, u32) {
    let l = listen(b, port);
    let c = establish(a, b, l, connect_args(b.nic.local(), port), accept_args());
    (c.ea, c.eb)
}

/// How CM request `p` ended, within [`CM_LIMIT`] (`what` names it when
/// it does not end).
#[track_caller]
pub fn outcome<T>(p: EpPending<T>, what: &str) -> Result<T, EpError> {
    p.wait_timeout(CM_LIMIT)
        .unwrap_or_else(|| panic!("{what}: not done within {CM_LIMIT:?}"))
}

/// The result of CM request `p`, which must succeed within [`CM_LIMIT`].
#[track_caller]
pub fn done<T>(p: EpPending<T>, what: &str) -> T {
    outcome(p, what).unwrap_or_else(|e| panic!("{what}: {e:?}"))
}
