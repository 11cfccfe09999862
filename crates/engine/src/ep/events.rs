//! CM events: each is routed to the endpoint bound to its CM endpoint and
//! takes the parked request (or the listener's queues) on.

use super::machine::{Endpoints, Outcome, State};
use super::types::EpError;
use ndverbs_proto::cm::{CmAgent, CmEvent, DisconnectHow, EndpointId, SidrInfo};
use ndverbs_proto::time::Instant;

/// The name of a CM event, for the logs.
fn cm_event_name(ev: &CmEvent) -> &'static str {
    match ev {
        CmEvent::ConnectRequest(_) => "connect request",
        CmEvent::RepReceived { .. } => "REP received",
        CmEvent::Established { .. } => "established",
        CmEvent::Rejected { .. } => "rejected",
        CmEvent::ConnectTimeout { .. } => "connect timeout",
        CmEvent::Unreachable { .. } => "port unreachable",
        CmEvent::AcceptTimeout { .. } => "accept timeout",
        CmEvent::MraReceived { .. } => "MRA received",
        CmEvent::DreqReceived { .. } => "DREQ received",
        CmEvent::DisconnectDone { .. } => "disconnect done",
        CmEvent::StaleConnection { .. } => "stale connection",
        CmEvent::TimewaitExit { .. } => "time-wait exit",
        CmEvent::DeviceRemoved { .. } => "device removed",
        CmEvent::SidrReply { .. } => "SIDR_REP received",
    }
}

impl Endpoints {
    /// One CM event: logged, routed to its endpoint, and what waited for it
    /// resumed.
    pub fn handle_cm_event(&mut self, now: Instant, cm: &mut CmAgent, ev: CmEvent) {
        let cm_id = match &ev {
            CmEvent::ConnectRequest(req) => req.listener,
            ev => ev.endpoint(),
        };
        let id = self.by_cm.get(&cm_id).copied();
        match &ev {
            CmEvent::ConnectTimeout { .. } | CmEvent::AcceptTimeout { .. } => {
                tracing::warn!(ep = id, event = cm_event_name(&ev), "CM event")
            }
            CmEvent::DisconnectDone {
                how: DisconnectHow::DreqTimedOut,
                ..
            } => tracing::warn!(ep = id, event = "disconnect done", "DREQ timed out"),
            CmEvent::Rejected { reason, .. } => {
                tracing::debug!(ep = id, event = "rejected", reason, "CM event")
            }
            _ => tracing::debug!(ep = id, event = cm_event_name(&ev), "CM event"),
        }
        self.route(now, cm, ev);
        if let Some(id) = id {
            self.note_cm_state(cm, id);
        }
    }

    fn route(&mut self, now: Instant, cm: &mut CmAgent, ev: CmEvent) {
        if let CmEvent::ConnectRequest(req) = ev {
            let Some(&lid) = self.by_cm.get(&req.listener) else {
                let _ = cm.reject(now, req.endpoint, &[]);
                return;
            };
            let Some(State::Listening(l)) = self.eps.get_mut(&lid).map(|e| &mut e.state) else {
                return;
            };
            if l.queue.len() >= l.backlog {
                tracing::debug!(
                    ep = lid,
                    backlog = l.backlog,
                    "connection request rejected: backlog full"
                );
                let _ = cm.reject(now, req.endpoint, &[]);
                return;
            }
            l.queue.push_back(*req);
            self.serve_listener(cm, lid);
            return;
        }
        if let CmEvent::TimewaitExit { local_qpn, .. } = ev {
            self.actions
                .push_back(super::machine::Action::ReleaseQpn(local_qpn));
            return;
        }
        let Some(id) = self.by_cm.get(&ev.endpoint()).copied() else {
            return;
        };
        let Some(e) = self.eps.get_mut(&id) else {
            return;
        };
        if let State::Resolving { .. } = e.state {
            // A UD endpoint's SIDR exchange: over with its first answer.
            let v = match ev {
                CmEvent::SidrReply {
                    status,
                    qpn,
                    qkey,
                    private_data,
                    ..
                } => Ok(SidrInfo {
                    status,
                    qpn,
                    qkey,
                    private_data,
                }),
                CmEvent::ConnectTimeout { .. } => Err(EpError::Timeout),
                CmEvent::Unreachable { .. } => Err(EpError::PortUnreachable),
                CmEvent::DeviceRemoved { .. } => Err(EpError::DeviceRemoved),
                _ => return,
            };
            e.state.close();
            self.end_resolve(id, v);
            return;
        }
        match ev {
            CmEvent::RepReceived { peer, qp, .. } => {
                e.state = match std::mem::replace(&mut e.state, State::Idle) {
                    State::Connecting { cm } | State::RepReceived { cm, .. } => {
                        State::RepReceived { cm, setup: qp }
                    }
                    State::Closed { cm, .. } => State::Closed {
                        cm,
                        setup: Some(qp),
                    },
                    other => other,
                };
                let info = super::machine::connect_info(&peer.private_data, &qp);
                e.info.private_data = info.private_data.clone();
                e.info.read_limits = info.read_limits;
                if e.requests.front().is_some_and(|r| r.job.awaits_rep()) {
                    if let Some(r) = e.requests.pop_front() {
                        self.finish(&r.span, r.id, Outcome::Connect(Ok(info)));
                    }
                }
                self.run(now, cm, id);
            }
            CmEvent::Established { endpoint } => {
                if let State::Accepting { cm, setup } = e.state {
                    e.state = State::Connected { cm, setup };
                }
                self.finish_setup(now, cm, endpoint, Ok(()));
            }
            CmEvent::Rejected {
                endpoint,
                reason,
                private_data,
                ..
            } => {
                e.info.private_data = private_data.clone();
                e.state.rejected();
                let err = EpError::Rejected {
                    reason,
                    private_data,
                };
                self.finish_setup(now, cm, endpoint, Err(err));
                self.fail_notifies(endpoint, EpError::Aborted);
            }
            CmEvent::ConnectTimeout { endpoint } | CmEvent::AcceptTimeout { endpoint } => {
                e.state.close();
                self.finish_setup(now, cm, endpoint, Err(EpError::Timeout));
                self.fail_notifies(endpoint, EpError::Aborted);
            }
            CmEvent::Unreachable { endpoint } => {
                e.state.close();
                self.finish_setup(now, cm, endpoint, Err(EpError::PortUnreachable));
                self.fail_notifies(endpoint, EpError::Aborted);
            }
            CmEvent::DreqReceived { .. } => {
                e.info.dreq_received = true;
                // A DREQ while the REP waits for its RTU: the connection is
                // up and already closing; the Accept has done its job (WV).
                let accepting = e.requests.front().is_some_and(|r| r.job.awaits_rtu());
                if let State::Connected { cm, setup }
                | State::Accepting { cm, setup }
                | State::Disconnecting { cm, setup } = e.state
                {
                    e.state = State::PeerDisconnected { cm, setup };
                }
                // NotifyDisconnect completes; the QP is not touched (rule D6).
                self.end_notifies(id, Ok(()));
                if accepting {
                    if let Some(r) = self.eps.get_mut(&id).and_then(|e| e.requests.pop_front()) {
                        self.finish(&r.span, r.id, Outcome::Done(Ok(())));
                    }
                    self.run(now, cm, id);
                }
            }
            CmEvent::DisconnectDone { how, .. } => {
                e.state.close();
                let outcome = match how {
                    DisconnectHow::DrepReceived
                    | DisconnectHow::DrepSent
                    | DisconnectHow::RejReceived => Ok(()),
                    DisconnectHow::DreqTimedOut => Err(EpError::Timeout),
                };
                if e.requests.front().is_some_and(|r| r.job.awaits_drep()) {
                    if let Some(r) = e.requests.pop_front() {
                        let span = r.span.clone();
                        let step = span.in_scope(|| self.flush(id, r, outcome));
                        self.park(id, step);
                    }
                }
                self.run(now, cm, id);
            }
            CmEvent::DeviceRemoved { .. } => self.fail_ep(id, EpError::DeviceRemoved),
            _ => {}
        }
    }

    /// Ends a Connect waiting for its REP or an Accept waiting for its RTU at
    /// the head of the endpoint bound to `cm_id` with `result` (a Connect
    /// only ever fails here: it succeeds on the REP), then runs the queue on.
    fn finish_setup(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        cm_id: EndpointId,
        result: Result<(), EpError>,
    ) {
        let Some(id) = self.by_cm.get(&cm_id).copied() else {
            return;
        };
        let Some(e) = self.eps.get_mut(&id) else {
            return;
        };
        if !e.requests.front().is_some_and(|r| r.job.awaits_setup()) {
            return;
        }
        let Some(r) = e.requests.pop_front() else {
            return;
        };
        let outcome = if r.job.awaits_rep() {
            Outcome::Connect(Err(result.err().unwrap_or(EpError::InvalidState(
                "connection established without a REP",
            ))))
        } else {
            Outcome::Done(result)
        };
        self.finish(&r.span, r.id, outcome);
        self.run(now, cm, id);
    }

    /// Completes the parked NotifyDisconnects of the endpoint bound to
    /// `cm_id` with `err`.
    fn fail_notifies(&mut self, cm_id: EndpointId, err: EpError) {
        if let Some(id) = self.by_cm.get(&cm_id).copied() {
            self.end_notifies(id, Err(err));
        }
    }

    /// Hands queued connection requests to waiting GetConnectionRequest calls.
    pub(crate) fn serve_listener(&mut self, cm: &CmAgent, lid: u32) {
        loop {
            let Some(State::Listening(l)) = self.eps.get_mut(&lid).map(|e| &mut e.state) else {
                return;
            };
            if l.queue.is_empty() || l.waiters.is_empty() {
                return;
            }
            let (Some(req), Some(w)) = (l.queue.pop_front(), l.waiters.pop_front()) else {
                return;
            };
            // The waiting endpoint was destroyed meanwhile (or listens
            // itself): the request goes back for the next waiter.
            let target_ok = self
                .eps
                .get(&w.new_ep)
                .is_some_and(|e| !matches!(e.state, State::Listening(_)));
            let info = if target_ok {
                self.hand_over(cm, w.new_ep, &req)
            } else {
                None
            };
            let Some(info) = info else {
                if let Some(State::Listening(l)) = self.eps.get_mut(&lid).map(|e| &mut e.state) {
                    l.queue.push_front(req);
                }
                self.finish(&w.span, w.id, Outcome::Request(Err(EpError::Canceled)));
                continue;
            };
            w.span.in_scope(|| {
                tracing::debug!(peer = %info.peer, port = info.peer_port, "connection request handed over")
            });
            self.finish(&w.span, w.id, Outcome::Request(Ok(info)));
            self.note_cm_state(cm, w.new_ep);
        }
    }
}
