//! The calls ndv makes on the engine behind a verbs device, past the verbs
//! API: each is one line here so that it can become a verbs call.

use ndverbs_verbs::{Device, Progress, VerbsError};
use std::time::Duration;

/// Whether the application drives `dev`'s engine (no engine thread).
pub fn is_manual(dev: &Device) -> bool {
    dev.adapter().mode() == Progress::Manual
}

/// Runs `dev`'s engine, sleeping up to `limit` for a packet, a post or a
/// timer (manual progress).
pub fn progress_wait(dev: &Device, limit: Duration) -> Result<(), VerbsError> {
    dev.adapter().progress_wait(limit).map_err(VerbsError::from)
}

/// Datagrams received and sent by `dev`, and sends that found the socket
/// buffer full.
pub fn datagram_counters(dev: &Device) -> [u64; 3] {
    use std::sync::atomic::Ordering::Relaxed;
    let c = dev.adapter().counters();
    [
        c.rcvd_datagrams.load(Relaxed),
        c.sent_datagrams.load(Relaxed),
        c.send_would_block.load(Relaxed),
    ]
}

/// Whether a post failed only because the queue is full (with an engine
/// thread a completion can be polled a moment before its slot is released).
pub fn is_queue_full(e: &VerbsError) -> bool {
    e.to_string().starts_with("queue full")
}
