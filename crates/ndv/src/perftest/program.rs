//! The eight perftest programs (`ib_send_bw` … `ib_atomic_lat`) and the
//! two roles each runs in.

/// Which end of the TCP connection: the client was given a host name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connects; writes first in every exchange.
    Client,
    /// Listens; reads first in every exchange.
    Server,
}

/// The RDMA operation measured (perftest's `VerbType`, in its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `ib_send_*`
    Send,
    /// `ib_write_*`
    Write,
    /// `ib_read_*`
    Read,
    /// `ib_atomic_*`
    Atomic,
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `*_bw`
    Bw,
    /// `*_lat`
    Lat,
}

/// One of the eight perftest programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfTest {
    /// The operation.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
}

impl PerfTest {
    /// All eight, in the order `ib_send_bw`, `ib_write_bw`, `ib_read_bw`,
    /// `ib_atomic_bw`, `ib_send_lat`, … .
    pub const ALL: [PerfTest; 8] = [
        PerfTest::new(Verb::Send, Kind::Bw),
        PerfTest::new(Verb::Write, Kind::Bw),
        PerfTest::new(Verb::Read, Kind::Bw),
        PerfTest::new(Verb::Atomic, Kind::Bw),
        PerfTest::new(Verb::Send, Kind::Lat),
        PerfTest::new(Verb::Write, Kind::Lat),
        PerfTest::new(Verb::Read, Kind::Lat),
        PerfTest::new(Verb::Atomic, Kind::Lat),
    ];

    /// The test `verb`/`kind`.
    pub const fn new(verb: Verb, kind: Kind) -> Self {
        PerfTest { verb, kind }
    }

    /// The program name, e.g. `ib_write_bw`.
    pub fn program(self) -> &'static str {
        match (self.verb, self.kind) {
            (Verb::Send, Kind::Bw) => "ib_send_bw",
            (Verb::Write, Kind::Bw) => "ib_write_bw",
            (Verb::Read, Kind::Bw) => "ib_read_bw",
            (Verb::Atomic, Kind::Bw) => "ib_atomic_bw",
            (Verb::Send, Kind::Lat) => "ib_send_lat",
            (Verb::Write, Kind::Lat) => "ib_write_lat",
            (Verb::Read, Kind::Lat) => "ib_read_lat",
            (Verb::Atomic, Kind::Lat) => "ib_atomic_lat",
        }
    }

    /// The test named `send_bw` or `ib_send_bw` (and so on).
    pub fn from_name(name: &str) -> Option<PerfTest> {
        let n = name.strip_prefix("ib_").unwrap_or(name);
        PerfTest::ALL.into_iter().find(|t| &t.program()[3..] == n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names() {
        assert_eq!(
            PerfTest::from_name("write_bw"),
            Some(PerfTest::new(Verb::Write, Kind::Bw))
        );
        assert_eq!(
            PerfTest::from_name("ib_atomic_lat"),
            Some(PerfTest::new(Verb::Atomic, Kind::Lat))
        );
        assert_eq!(PerfTest::from_name("write"), None);
    }
}
