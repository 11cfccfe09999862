//! Link wrappers as layers: what a wrapper does, apart from the link it
//! wraps.
//!
//! A wrapper in the manner of smoltcp's `phy` middleware changes some of the
//! traffic and none of the rest: capture watches what is sent and received,
//! faults rework what arrives, and neither has a say in the link's address,
//! its GSO support, its file descriptor, how packets leave or the errors the
//! network reports (those pass straight through). A [`Layer`]
//! says only what it does — sees what was sent, hands out datagrams of its
//! own, reworks what arrives; each hook defaults to "nothing" — and
//! [`Layered`] makes it a link around any other, passing the rest straight
//! through. The stack stays generic (`Layered<Layered<NicLink, _>, _>`), so
//! the packet path makes no indirect call, and a hook a layer does not
//! override compiles to nothing.

use super::{Datagram, Link, LinkError, Runs};
use ndverbs_proto::time::Instant;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// What a link wrapper does to the traffic of the link below it (see the
/// module docs). Every hook has a default that leaves the traffic alone.
pub trait Layer {
    /// `pkt` has just been sent to `dst`.
    #[inline]
    fn sent(&mut self, _pkt: &[u8], _dst: SocketAddr) {}

    /// `runs` (those the link took) have just been sent to `dst`.
    #[inline]
    fn sent_runs(&mut self, _runs: Runs<'_>, _dst: SocketAddr) {}

    /// A datagram the layer hands out itself before the link is asked for
    /// more (one it held back, now due), copied into `buf`.
    #[inline]
    fn pending(&mut self, _buf: &mut [u8], _now: Instant) -> io::Result<Option<Datagram>> {
        Ok(None)
    }

    /// `d` has just arrived in `buf`: what to hand on (`None`: nothing for
    /// now, and the link is asked again).
    #[inline]
    fn arrived(&mut self, d: Datagram, _buf: &mut [u8], _now: Instant) -> Option<Datagram> {
        Some(d)
    }

    /// When the layer will have a datagram to hand out by itself, as
    /// [`Link::poll_at`].
    #[inline]
    fn poll_at(&self) -> Option<Instant> {
        None
    }
}

/// Link `L` with layer `Y` around it: a link (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::layer::{Layer, Layered};
/// use ndverbs_engine::link::memory::MemoryLink;
/// use ndverbs_engine::link::{Link, MAX_DATAGRAM};
/// use ndverbs_proto::time::Instant;
/// use std::net::SocketAddr;
/// /// Counts what is sent; everything else is the link's own.
/// #[derive(Default)]
/// struct Count(usize);
/// impl Layer for Count {
///     fn sent(&mut self, _: &[u8], _: SocketAddr) {
///         self.0 += 1;
///     }
/// }
/// let (a, mut b) = MemoryLink::pair("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())?;
/// let mut a = Layered::new(a, Count::default());
/// a.send(&[0; 64], b.local_addr())?;
/// assert_eq!(a.layer().0, 1);
/// assert_eq!(a.local_addr(), a.inner().local_addr());
/// let mut buf = vec![0; MAX_DATAGRAM];
/// assert_eq!(b.recv(&mut buf, Instant::ZERO)?.map(|d| d.len), Some(64));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Layered<L, Y> {
    link: L,
    layer: Y,
}

impl<L, Y> Layered<L, Y> {
    /// `layer` around `link`.
    pub fn new(link: L, layer: Y) -> Self {
        Layered { link, layer }
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.link
    }

    /// The wrapped link.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.link
    }

    /// The layer.
    pub fn layer(&self) -> &Y {
        &self.layer
    }

    /// The layer.
    pub fn layer_mut(&mut self) -> &mut Y {
        &mut self.layer
    }
}

impl<L: Link, Y: Layer> Link for Layered<L, Y> {
    #[inline]
    fn local_addr(&self) -> SocketAddr {
        self.link.local_addr()
    }

    #[inline]
    fn gso(&self) -> bool {
        self.link.gso()
    }

    #[inline]
    fn fd(&self) -> RawFd {
        self.link.fd()
    }

    #[inline]
    fn send(&mut self, pkt: &[u8], dst: SocketAddr) -> io::Result<()> {
        self.link.send(pkt, dst)?;
        self.layer.sent(pkt, dst);
        Ok(())
    }

    #[inline]
    fn send_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
        let k = self.link.send_runs(runs, dst)?;
        self.layer.sent_runs(runs.take(k), dst);
        Ok(k)
    }

    #[inline]
    fn recv(&mut self, buf: &mut [u8], now: Instant) -> io::Result<Option<Datagram>> {
        loop {
            if let Some(d) = self.layer.pending(buf, now)? {
                return Ok(Some(d));
            }
            let Some(d) = self.link.recv(buf, now)? else {
                return Ok(None);
            };
            if let Some(d) = self.layer.arrived(d, buf, now) {
                return Ok(Some(d));
            }
            // The layer kept all of it (lost, held back, or stashed to hand
            // out in parts): around again.
        }
    }

    #[inline]
    fn errors_pending(&self) -> bool {
        self.link.errors_pending()
    }

    fn note_error_event(&self) {
        self.link.note_error_event()
    }

    fn recv_error(&mut self) -> io::Result<Option<LinkError>> {
        self.link.recv_error()
    }

    #[inline]
    fn poll_at(&self) -> Option<Instant> {
        match (self.layer.poll_at(), self.link.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
