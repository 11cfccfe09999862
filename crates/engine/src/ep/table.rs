//! The core's endpoint table: the machine and the completion handles of its
//! requests (the core drives both from `crate::nic::endpoints`).

use super::machine::{Endpoints, Refused};
use super::waiters::Waiters;
use crate::error::EngineError;
use crate::keys::KeyGen;
/// The core's endpoint table: the machine and the completion handles of
/// its requests.
pub(crate) struct EpTable {
    pub(crate) machine: Endpoints,
    pub(crate) waiters: Waiters,
}

impl Default for EpTable {
    fn default() -> Self {
        EpTable {
            machine: Endpoints::new(KeyGen::new()),
            waiters: Waiters::default(),
        }
    }
}

impl From<Refused> for EngineError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::NoEndpoint(id) => EngineError::NotFound {
                what: "endpoint",
                id,
            },
            Refused::NoQp(id) => EngineError::NotFound { what: "QP", id },
            Refused::Busy(s) => EngineError::Busy(s),
            Refused::InvalidArgument(s) => EngineError::InvalidArgument(s),
            Refused::NotConnected => EngineError::NotConnected,
        }
    }
}
