//! Connection endpoints (the connection manager side of a connection).
//!
//! An [`Endpoint`] speaks the IB CM (rdma_cm compatible) for one connection or
//! listens for many. Its long-running calls return an [`EpPending`], which is
//! both a future (any runtime) and a blocking wait. The endpoint and the QP
//! are tied together only per call: Connect, CompleteConnect, Accept and
//! Disconnect take the QP, and run on the engine in phases (see the engine's
//! `ep` module for the phase table and the disconnect rules). They take the QP
//! as a [`QpId`] — a number, not a reference: the endpoint never holds the QP.

use crate::device::Device;
use crate::qp::QpId;
use crate::{Result, VerbsError};
use ndverbs_engine::adapter::EngineError;
pub use ndverbs_engine::ep::{
    AcceptArgs, ConnectArgs, ConnectInfo, EpError, EpInfo, EpPending, RequestInfo,
};

/// A connection endpoint. Dropping it destroys it (the CM endpoint ends the
/// Linux way: REJ, DREQ or DREP as its state demands).
#[derive(Debug)]
pub struct Endpoint {
    dev: Device,
    id: u32,
}

impl Endpoint {
    /// A fresh endpoint on `dev`.
    pub fn new(dev: &Device) -> Result<Endpoint> {
        Ok(Endpoint {
            dev: dev.clone(),
            id: dev.adapter.create_ep()?,
        })
    }

    /// The engine id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Listens on rdma_cm port `port` with room for `backlog` unanswered requests.
    pub fn listen(&self, port: u16, backlog: usize) -> Result<()> {
        Ok(self.dev.adapter.ep_listen(self.id, port, backlog)?)
    }

    /// Waits for a connection request and binds it to `into`.
    pub fn get_request(&self, into: &Endpoint) -> Result<EpPending<RequestInfo>> {
        // Endpoint ids are per device: another device's would name one of ours.
        if !self.dev.adapter.same_as(&into.dev.adapter) && !self.dev.is_removed() {
            return Err(VerbsError::Engine(EngineError::InvalidArgument(
                "the endpoint belongs to another device",
            )));
        }
        Ok(self.dev.adapter.ep_get_request(self.id, into.id)?)
    }

    /// Connects `qp` (in INIT). Completes when the peer's REP arrives.
    pub fn connect(
        &self,
        qp: impl Into<QpId>,
        args: ConnectArgs,
    ) -> Result<EpPending<ConnectInfo>> {
        Ok(self.dev.adapter.ep_connect(self.id, qp.into().0, args)?)
    }

    /// After `connect` completed: QP to RTS, then RTU.
    pub fn complete_connect(&self, qp: impl Into<QpId>) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_complete_connect(self.id, qp.into().0)?)
    }

    /// Accepts the request bound to this endpoint with `qp`; completes on RTU.
    pub fn accept(&self, qp: impl Into<QpId>, args: AcceptArgs) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_accept(self.id, qp.into().0, args)?)
    }

    /// Rejects the request (or the REP) bound to this endpoint.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        Ok(self.dev.adapter.ep_reject(self.id, private_data)?)
    }

    /// DREQ (or DREP if the peer's DREQ arrived), then `qp` to ERR.
    pub fn disconnect(&self, qp: impl Into<QpId>) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_disconnect(self.id, qp.into().0)?)
    }

    /// Completes when the peer's DREQ arrives.
    pub fn notify_disconnect(&self) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_notify_disconnect(self.id)?)
    }

    /// Completes every pending request of the endpoint with [`EpError::Canceled`].
    pub fn cancel(&self) -> Result<()> {
        Ok(self.dev.adapter.ep_cancel(self.id)?)
    }

    /// State, peer, private data, read limits.
    pub fn info(&self) -> Result<EpInfo> {
        Ok(self.dev.adapter.ep_info(self.id)?)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.dev.adapter.destroy_ep(self.id);
    }
}
