//! The engine reports through `tracing`: a recording subscriber sees a
//! loopback connect, a SEND and a disconnect as the spans and events the
//! NIC documentation promises — request spans with the endpoint and QP
//! ids, their CM and QP phases in order, QP state changes, CM state changes,
//! MADs, flushes, the NIC's opening and closing — and nothing per packet
//! at `debug`; an unanswered SEND warns when its retries run out; device
//! removal is an `info` span.

mod common;

use common::cm::{self, accept_args, connect_args, done, CM_LIMIT as T};
use common::{cm_side, wait_n, Shape, Side};
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs};
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{SendOp, SendWr, WcStatus};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

type Fields = BTreeMap<String, String>;

/// One span opened or one event, with the spans around it (outermost first).
#[derive(Debug, Clone)]
struct Rec {
    span: bool,
    level: Level,
    /// Span name, or the event's message.
    name: String,
    fields: Fields,
    scope: Vec<(String, Fields)>,
}

impl Rec {
    fn field(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }

    /// The innermost enclosing span called `name`.
    fn within(&self, name: &str) -> Option<&Fields> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f)
    }

    fn nic(&self) -> Option<&str> {
        self.within("nic")
            .and_then(|f| f.get("local"))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct Visitor(Fields);

impl Visit for Visitor {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("{v:?}"));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().into(), v.into());
    }
}

struct SpanFields(Fields);

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Rec>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut v = Visitor::default();
        attrs.record(&mut v);
        let span = ctx.span(id).expect("new span");
        let scope = span
            .parent()
            .map(|p| {
                p.scope()
                    .from_root()
                    .map(|s| {
                        let f = s.extensions().get::<SpanFields>().map(|f| f.0.clone());
                        (s.name().to_string(), f.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        span.extensions_mut().insert(SpanFields(v.0.clone()));
        self.0.lock().unwrap().push(Rec {
            span: true,
            level: *attrs.metadata().level(),
            name: attrs.metadata().name().into(),
            fields: v.0,
            scope,
        });
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut v = Visitor::default();
        event.record(&mut v);
        let scope = ctx
            .event_scope(event)
            .map(|sc| {
                sc.from_root()
                    .map(|s| {
                        let f = s.extensions().get::<SpanFields>().map(|f| f.0.clone());
                        (s.name().to_string(), f.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let name = v.0.remove("message").unwrap_or_default();
        self.0.lock().unwrap().push(Rec {
            span: false,
            level: *event.metadata().level(),
            name,
            fields: v.0,
            scope,
        });
    }
}

/// The process-wide recorder (the engine logs from its worker threads, so it
/// must be the global subscriber).
fn recorder() -> &'static Recorder {
    static R: OnceLock<Recorder> = OnceLock::new();
    R.get_or_init(|| {
        let r = Recorder::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(r.clone()))
            .expect("no other subscriber");
        r
    })
}

fn records() -> Vec<Rec> {
    recorder().0.lock().unwrap().clone()
}

/// A NIC with one QP in INIT; `fast`: short CM timers, hence short
/// transport timeouts (else Linux's, so that a loaded machine does not make
/// the transport retransmit).
fn side(ip: IpAddr, fast: bool) -> Side {
    let nic = if fast {
        let config = NicConfig {
            progress: Progress::Thread,
            cm_timers: FAST,
            ..NicConfig::default()
        };
        Nic::open_with(ip, config).unwrap()
    } else {
        Nic::open(ip, Progress::Thread).unwrap()
    };
    cm_side(nic, Shape::queues(256, 1, 0, 256, 1 << 12))
}

/// Two sides on a fresh address pair, connected through the CM, with the
/// recorder listening.
struct Traced {
    a: Side,
    b: Side,
    /// The addresses as the `nic` spans write them.
    ia: String,
    ib: String,
    ea: u32,
    eb: u32,
}

/// [`Traced`] sides (see [`side`] for `fast`), B listening on `port`, A
/// connecting with `retry_count` transport retries.
fn traced(fast: bool, port: u16, retry_count: u8) -> Traced {
    recorder();
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (a, b) = (side(ia, fast), side(ib, fast));
    let (ea, eb) = connect(&a, &b, port, retry_count);
    Traced {
        a,
        b,
        ia: ia.to_string(),
        ib: ib.to_string(),
        ea,
        eb,
    }
}

/// Connects `a` to `b` listening on `port` (one READ/atomic each way);
/// returns (ep_a, ep_b).
fn connect(a: &Side, b: &Side, port: u16, retry_count: u8) -> (u32, u32) {
    let args = ConnectArgs {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count,
        ..connect_args(b.nic.local(), port)
    };
    let accept = AcceptArgs {
        responder_resources: 1,
        initiator_depth: 1,
        ..accept_args()
    };
    let c = cm::establish(a, b, cm::listen(b, port), args, accept);
    (c.ea, c.eb)
}

/// The spans called `name` opened on NIC `local` with these fields.
fn spans<'a>(recs: &'a [Rec], local: &str, name: &str, fields: &[(&str, String)]) -> Vec<&'a Rec> {
    recs.iter()
        .filter(|r| r.span && r.name == name && r.nic() == Some(local))
        .filter(|r| fields.iter().all(|(k, v)| r.field(k) == Some(v.as_str())))
        .collect()
}

/// The names of the spans opened directly inside the `request` span with
/// these `ep` and `qp` fields, in the order they opened.
fn phases(recs: &[Rec], local: &str, request: &str, ep: u32, qp: u32) -> Vec<String> {
    recs.iter()
        .filter(|r| r.span && r.nic() == Some(local))
        .filter(|r| {
            r.scope.last().is_some_and(|(n, f)| {
                n == request
                    && f.get("ep") == Some(&ep.to_string())
                    && f.get("qp") == Some(&qp.to_string())
            })
        })
        .map(|r| r.name.clone())
        .collect()
}

/// (from, to) of every "QP state" event of QP `qp`.
fn qp_states(recs: &[Rec], qp: u32) -> Vec<(String, String)> {
    recs.iter()
        .filter(|r| !r.span && r.name == "QP state" && r.field("qp") == Some(&qp.to_string()))
        .map(|r| {
            (
                r.field("from").unwrap().into(),
                r.field("to").unwrap().into(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn connect_send_disconnect_as_spans_and_events() {
    let Traced {
        a,
        b,
        ia,
        ib,
        ea,
        eb,
    } = traced(false, 7201, 7);
    let (ia, ib, qa, qb) = (ia.as_str(), ib.as_str(), a.qp.qpn(), b.qp.qpn());

    // Data: 200 SENDs (and as many ACKs) must not add a single event at
    // debug or above: nothing is logged per packet.
    let before = records().len();
    for i in 0..200u64 {
        b.post_recv(i, 0, 64);
    }
    a.mr.write(0, b"ping").unwrap();
    for i in 0..200u64 {
        let mut wr = SendWr::new(i, SendOp::Send, vec![a.sge(0, 4)]);
        wr.signaled = true;
        a.post_send(wr);
        if i % 32 == 31 {
            wait_n(&a, 32);
        }
    }
    wait_n(&a, 200 - 192);
    let got = wait_n(&b, 200);
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    let chatter: Vec<Rec> = records()[before..]
        .iter()
        .filter(|r| !r.span && r.level <= Level::DEBUG)
        .filter(|r| matches!(r.nic(), Some(l) if l == ia || l == ib))
        .cloned()
        .collect();
    assert!(chatter.is_empty(), "per-packet logging: {chatter:#?}");

    // One receive outstanding on B: B's Disconnect flushes it.
    b.post_recv(999, 0, 64);
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(notify, "notify");
    done(
        b.nic.ep_disconnect(eb, b.qp.ident()).unwrap(),
        "B disconnect",
    );
    done(da, "A disconnect");
    let flushed = wait_n(&b, 1);
    assert_eq!(flushed[0].status, WcStatus::WrFlushErr);

    let recs = records();
    // Request spans carry the endpoint and QP ids, inside their NIC's span.
    let id = |ep: u32, qp: u32| [("ep", ep.to_string()), ("qp", qp.to_string())];
    for (local, name, ep, qp) in [
        (ia, "ep_connect", ea, qa),
        (ia, "ep_complete_connect", ea, qa),
        (ia, "ep_disconnect", ea, qa),
        (ib, "ep_accept", eb, qb),
        (ib, "ep_disconnect", eb, qb),
    ] {
        assert_eq!(
            spans(&recs, local, name, &id(ep, qp)).len(),
            1,
            "one {name} span with ep={ep} qp={qp} on {local}"
        );
    }
    assert_eq!(
        spans(&recs, ib, "ep_notify_disconnect", &[("ep", eb.to_string())]).len(),
        1
    );
    // Phases in the documented order.
    let (cm_only, qp_cm, cm_qp) = (
        &["cm_phase"][..],
        &["qp_phase", "cm_phase"][..],
        &["cm_phase", "qp_phase"][..],
    );
    for (local, request, ep, qp, order) in [
        (ia, "ep_connect", ea, qa, cm_only),
        (ia, "ep_complete_connect", ea, qa, qp_cm),
        (ib, "ep_accept", eb, qb, qp_cm),
        (ia, "ep_disconnect", ea, qa, cm_qp),
        (ib, "ep_disconnect", eb, qb, cm_qp),
    ] {
        assert_eq!(
            phases(&recs, local, request, ep, qp),
            order,
            "{request} on {local}"
        );
    }
    // Every QP state change, once; the ones a request made sit in its QP phase.
    let up = [
        ("Reset", "Init"),
        ("Init", "Rtr"),
        ("Rtr", "Rts"),
        ("Rts", "Err"),
    ];
    assert_eq!(qp_states(&recs, qa), pairs(&up));
    assert_eq!(qp_states(&recs, qb), pairs(&up));
    for (local, request, ep, qp, to) in [
        (ia, "ep_complete_connect", ea, qa, "Rts"),
        (ib, "ep_accept", eb, qb, "Rts"),
        (ia, "ep_disconnect", ea, qa, "Err"),
        (ib, "ep_disconnect", eb, qb, "Err"),
    ] {
        let e = recs
            .iter()
            .find(|r| {
                !r.span
                    && r.name == "QP state"
                    && r.field("qp") == Some(&qp.to_string())
                    && r.field("to") == Some(to)
            })
            .expect("state event");
        assert_eq!(e.nic(), Some(local));
        let req = e.within(request).expect("inside the request span");
        assert_eq!(req.get("ep"), Some(&ep.to_string()));
        assert!(e.within("qp_phase").is_some() && e.within("modify_qp").is_some());
    }
    // Each request says how it ended, in its own span.
    for (local, request, ep) in [
        (ia, "ep_connect", ea),
        (ia, "ep_complete_connect", ea),
        (ia, "ep_disconnect", ea),
        (ib, "ep_accept", eb),
        (ib, "ep_disconnect", eb),
        (ib, "ep_notify_disconnect", eb),
    ] {
        assert!(
            recs.iter().any(|r| !r.span
                && r.name == "request completed"
                && r.nic() == Some(local)
                && r.within(request).and_then(|f| f.get("ep")) == Some(&ep.to_string())),
            "{request} on {local} completed"
        );
    }
    // CM state transitions of both endpoints.
    let cm = |local: &str, ep: u32| -> Vec<String> {
        recs.iter()
            .filter(|r| !r.span && r.name == "CM state" && r.nic() == Some(local))
            .filter(|r| r.field("ep") == Some(&ep.to_string()))
            .map(|r| r.field("to").unwrap().to_string())
            .collect()
    };
    assert_eq!(
        cm(ia, ea),
        ["ReqSent", "RepRcvd", "Established", "DreqSent", "Timewait"]
    );
    assert_eq!(
        cm(ib, eb),
        ["ReqRcvd", "RepSent", "Established", "DreqRcvd", "Timewait"]
    );
    // MADs, both ways.
    let mads = |local: &str, what: &str| -> Vec<String> {
        recs.iter()
            .filter(|r| !r.span && r.name == what && r.nic() == Some(local))
            .map(|r| r.field("mad").unwrap().to_string())
            .collect()
    };
    assert_eq!(mads(ia, "MAD sent"), ["REQ", "RTU", "DREQ"]);
    assert_eq!(mads(ib, "MAD received"), ["REQ", "RTU", "DREQ"]);
    assert_eq!(mads(ib, "MAD sent"), ["REP", "DREP"]);
    assert_eq!(mads(ia, "MAD received"), ["REP", "DREP"]);
    // The flush, counted, on B's QP, inside B's disconnect.
    let flush = recs
        .iter()
        .find(|r| !r.span && r.name == "work requests flushed" && r.nic() == Some(ib))
        .expect("flush event");
    assert_eq!(flush.field("qp"), Some(qb.to_string().as_str()));
    assert_eq!(flush.field("requests"), Some("1"));
    assert_eq!(flush.level, Level::DEBUG);
    // Both NICs' opening was a span of its own, and so is their closing
    // once the application lets go of them.
    for local in [ia, ib] {
        assert!(recs
            .iter()
            .any(|r| r.span && r.name == "nic_open" && r.field("local") == Some(local)));
    }
    drop((a, b));
    let t0 = std::time::Instant::now();
    let closed = |local: &str| {
        records().iter().any(|r| {
            !r.span
                && r.name == "NIC closed"
                && r.within("nic_close").and_then(|f| f.get("local")) == Some(&local.to_string())
        })
    };
    while !(closed(ia) && closed(ib)) {
        assert!(t0.elapsed() < T, "no nic_close span for {ia} and {ib}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exhausted_retries_warn_and_removal_is_a_span() {
    // One transport retry, so that the unanswered SEND gives up soon.
    let Traced { a, b, ia, ib, .. } = traced(true, 7202, 1);
    let (ia, ib, qa, qb) = (ia.as_str(), ib.as_str(), a.qp.qpn(), b.qp.qpn());
    b.post_recv(5, 0, 64);
    // B goes away: its receive flushes inside the removal span, and A's
    // SEND is never answered.
    b.nic.remove();
    assert_eq!(wait_n(&b, 1)[0].status, WcStatus::WrFlushErr);
    let mut wr = SendWr::new(77, SendOp::Send, vec![a.sge(0, 4)]);
    wr.signaled = true;
    a.post_send(wr);
    let w = wait_n(&a, 1);
    assert_eq!(w[0].status, WcStatus::RetryExcErr);

    let recs = records();
    let warn = recs
        .iter()
        .find(|r| !r.span && r.level == Level::WARN && r.field("qp") == Some(&qa.to_string()))
        .expect("a warning for the exhausted retries");
    assert_eq!(warn.field("wr_id"), Some("77"));
    assert_eq!(warn.nic(), Some(ia));
    assert!(
        recs.iter().any(|r| !r.span
            && r.name.starts_with("retransmitting")
            && r.field("qp") == Some(&qa.to_string())),
        "the retransmission is reported"
    );
    assert_eq!(
        qp_states(&recs, qa).last(),
        Some(&("Rts".to_string(), "Err".to_string()))
    );
    let removal = spans(&recs, ib, "remove_device", &[("local", ib.to_string())]);
    assert_eq!(removal.len(), 1);
    assert_eq!(removal[0].level, Level::INFO);
    let flush = recs
        .iter()
        .find(|r| {
            !r.span && r.name == "work requests flushed" && r.field("qp") == Some(&qb.to_string())
        })
        .expect("B's flush");
    assert!(flush.within("remove_device").is_some());
}
