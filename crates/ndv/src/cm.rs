//! Connecting an RC QP through the connection manager the way librdmacm's
//! `rdma_connect`/`rdma_accept` do (rping, perftest `-R`): retry and RNR
//! retry 7, equal responder resources and initiator depth, an ephemeral
//! source port as rdma_cm picks it.

use anyhow::{anyhow, Context, Result};
use ndverbs_verbs::{AcceptArgs, ConnectArgs, Endpoint, ErrorKind, PathMtu, Pending, Qp};
use std::net::IpAddr;
use std::time::Duration;

/// Where and how to connect.
#[derive(Debug, Clone, Copy)]
pub struct CmConnect {
    /// The server's address.
    pub server: IpAddr,
    /// Its rdma_cm port.
    pub port: u16,
    /// Path MTU.
    pub mtu: PathMtu,
    /// Responder resources and initiator depth (outstanding READs/atomics).
    pub rd_atomic: u8,
}

/// Waits for an endpoint request: at most `limit`, or for good with `None`.
pub fn wait<T>(p: Pending<T>, limit: Option<Duration>, what: &str) -> Result<T> {
    match limit {
        Some(t) => p
            .wait_timeout(t)
            .ok_or_else(|| anyhow!("{what}: no answer in {t:?}"))?,
        None => p.wait(),
    }
    .with_context(|| what.to_string())
}

/// Connects `qp` (in INIT) through `ep`: REQ, the REP, then the RTU that
/// moves it to RTS.
pub fn connect(ep: &Endpoint, qp: &Qp, c: &CmConnect, limit: Option<Duration>) -> Result<()> {
    let args = ConnectArgs {
        remote: c.server,
        remote_port: c.port,
        local_port: ephemeral_port(),
        responder_resources: c.rd_atomic,
        initiator_depth: c.rd_atomic,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: c.mtu,
        private_data: vec![],
    };
    let rep = ep.connect(qp, args).context("rdma_connect")?;
    wait(rep, limit, "rdma_connect").map_err(|e| no_endpoint(e, c.server))?;
    let rtu = ep.complete_connect(qp).context("rdma_connect")?;
    wait(rtu, limit, "rdma_connect: RTU")
}

/// `e`, or — when the server's host answered the REQ with ICMP port
/// unreachable — the plain statement that nothing speaks RoCE there (a host
/// that runs RoCE but has no listener on the port answers with a REJ
/// instead, which stays `e`).
fn no_endpoint(e: anyhow::Error, server: IpAddr) -> anyhow::Error {
    match e.downcast_ref::<ndverbs_verbs::Error>() {
        Some(v) if v.kind() == ErrorKind::PortUnreachable => {
            anyhow!("{server} has no RoCE endpoint (ICMP port unreachable)")
        }
        _ => e,
    }
}

/// Waits for the next connection request of `listener` and binds it to `ep`;
/// returns the peer's address.
pub fn next_request(listener: &Endpoint, ep: &Endpoint, limit: Option<Duration>) -> Result<IpAddr> {
    let req = listener.get_request(ep).context("rdma_get_request")?;
    Ok(wait(req, limit, "rdma_cm connection request")?.peer)
}

/// Accepts the request bound to `ep` with `qp` (in INIT), until the RTU.
pub fn accept(ep: &Endpoint, qp: &Qp, rd_atomic: u8, limit: Option<Duration>) -> Result<()> {
    let args = AcceptArgs {
        responder_resources: rd_atomic,
        initiator_depth: rd_atomic,
        rnr_retry_count: 7,
        private_data: vec![],
    };
    let rtu = ep.accept(qp, args).context("rdma_accept")?;
    wait(rtu, limit, "rdma_accept")
}

/// A random source port in 32768..=65535, as rdma_cm binds a client.
fn ephemeral_port() -> u16 {
    let mut b = [0u8; 2];
    // A failed draw leaves port 32768: still a valid source port.
    let _ = getrandom::fill(&mut b);
    32768 | (u16::from_le_bytes(b) & 0x7fff)
}
