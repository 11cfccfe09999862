//! Queue pairs and shared receive queues.

use crate::device::{Cq, CqInner, Pd, PdInner};
use crate::{Result, VerbsError};
use ndverbs_engine::adapter::EngineError;
use ndverbs_engine::adapter::{QpInit, QpShared, SrqShared};
use ndverbs_proto::rc::{AttrMask, Counters, QpAttr, QpCaps, QpState, RecvWr, SendWr};
use std::sync::Arc;

/// A queue pair's identity (its QP number): what connection endpoints are
/// given instead of a reference to the QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpId(pub u32);

impl From<&Qp> for QpId {
    fn from(qp: &Qp) -> QpId {
        QpId(qp.qpn())
    }
}

/// Creation parameters of a queue pair.
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue instead of the QP's own.
    pub srq: Option<&'a Srq>,
    /// Send queue limits.
    pub caps: QpCaps,
    /// Receive queue depth (own receive queue only).
    pub max_recv_wr: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
}

impl<'a> QpInitAttr<'a> {
    /// Defaults: 128 sends and receives, 4 SGEs each, 256 inline bytes.
    pub fn new(send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpInitAttr {
            send_cq,
            recv_cq,
            srq: None,
            caps: QpCaps {
                max_send_wr: 128,
                max_send_sge: 4,
                max_inline_data: 256,
                sq_sig_all: false,
            },
            max_recv_wr: 128,
            max_recv_sge: 4,
        }
    }
}

/// A reliable connected queue pair. Dropping it destroys it (outstanding
/// requests are flushed to its CQs first).
#[derive(Debug)]
pub struct Qp {
    shared: Arc<QpShared>,
    pd: Arc<PdInner>,
    _cqs: (Arc<CqInner>, Arc<CqInner>),
    _srq: Option<Arc<SrqInner>>,
}

impl Qp {
    pub(crate) fn create(pd: &Pd, init: &QpInitAttr<'_>) -> Result<Qp> {
        // Ids are per device: another device's CQ or SRQ would name some
        // object of this one (ibv_create_qp fails with EINVAL).
        let dev = &pd.inner.dev.adapter;
        let foreign = !dev.same_as(&init.send_cq.inner.dev.adapter)
            || !dev.same_as(&init.recv_cq.inner.dev.adapter)
            || init
                .srq
                .is_some_and(|s| !dev.same_as(&s.inner.pd.dev.adapter));
        if foreign && !dev.is_removed() {
            return Err(VerbsError::Engine(EngineError::InvalidArgument(
                "the CQs and SRQ must belong to the QP's device",
            )));
        }
        let shared = pd.inner.dev.adapter.create_qp(QpInit {
            pd: pd.inner.id,
            send_cq: init.send_cq.inner.id,
            recv_cq: init.recv_cq.inner.id,
            srq: init.srq.map(|s| s.inner.shared.id()),
            caps: init.caps,
            max_recv_wr: init.max_recv_wr,
            max_recv_sge: init.max_recv_sge,
        })?;
        Ok(Qp {
            shared,
            pd: pd.inner.clone(),
            _cqs: (init.send_cq.inner.clone(), init.recv_cq.inner.clone()),
            _srq: init.srq.map(|s| s.inner.clone()),
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.shared.qpn()
    }

    /// The state as of the engine's last step.
    pub fn state(&self) -> QpState {
        self.shared.state()
    }

    /// Modifies attributes/state (runs on the engine; typed errors name the
    /// bad attribute). The peer's address comes from `attr.av.dgid`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        Ok(self.pd.dev.adapter.modify_qp(self.qpn(), attr, mask)?)
    }

    /// Current attributes.
    pub fn query(&self) -> Result<QpAttr> {
        Ok(self.pd.dev.adapter.query_qp(self.qpn())?)
    }

    /// Posts a send request.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        Ok(self.pd.dev.adapter.post_send(&self.shared, wr)?)
    }

    /// Posts a receive (QPs without an SRQ).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        Ok(self.pd.dev.adapter.post_recv(&self.shared, wr)?)
    }

    /// Per-QP counters (rxe names).
    pub fn counters(&self) -> Result<Counters> {
        Ok(self.pd.dev.adapter.qp_counters(self.qpn())?)
    }

    /// Moves the QP to ERR: every outstanding request completes with a flush status.
    pub fn to_error(&self) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        )
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.pd.dev.adapter.destroy_qp(self.qpn());
    }
}

#[derive(Debug)]
pub(crate) struct SrqInner {
    shared: Arc<SrqShared>,
    pd: Arc<PdInner>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let _ = self.pd.dev.adapter.destroy_srq(self.shared.id());
    }
}

/// A shared receive queue.
#[derive(Debug, Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    pub(crate) fn create(pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let shared = pd
            .inner
            .dev
            .adapter
            .create_srq(pd.inner.id, max_wr, max_sge)?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                shared,
                pd: pd.inner.clone(),
            }),
        })
    }

    /// Posts a receive.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        Ok(self
            .inner
            .pd
            .dev
            .adapter
            .post_srq_recv(&self.inner.shared, wr)?)
    }
}
