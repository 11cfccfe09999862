//! Unpredictable keys and queue pair numbers.
//!
//! An R_Key is the only thing standing between a remote peer and local memory,
//! and a QPN plus PSN the only thing standing between a blind attacker and a
//! connection. Both are therefore drawn from a generator seeded by the
//! operating system's CSPRNG, not from a counter: knowing one key tells nothing
//! about the next. (rxe uses 24 bits of index plus an 8-bit key; ndverbs uses all
//! 32 bits for keys and all 24 for QPNs, minus the reserved values.)

/// SplitMix64 seeded from `getrandom`; fast, and good enough to make keys
/// unguessable to a peer that sees only a few of them.
///
/// # Example
///
/// ```
/// use ndverbs_engine::keys::KeyGen;
/// let mut keys = KeyGen::new(); // seeded by the OS
/// let (k1, k2) = (keys.key(), keys.key());
/// assert!(k1 != 0 && k1 != k2);
/// let qpn = keys.qpn();
/// assert!(qpn > 1 && qpn < 0xff_ffff);
/// // Reproducible runs (tests, simulations) seed it themselves.
/// assert_eq!(KeyGen::seeded(3).psn(), KeyGen::seeded(3).psn());
/// ```
#[derive(Debug, Clone)]
pub struct KeyGen {
    state: u64,
}

impl KeyGen {
    /// A generator seeded by the OS.
    pub fn new() -> Self {
        let mut seed = [0u8; 8];
        // Falling back to the address-space/clock mix only if the OS refuses.
        if getrandom::fill(&mut seed).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            seed = (t ^ (&seed as *const _ as u64)).to_le_bytes();
        }
        KeyGen {
            state: u64::from_le_bytes(seed),
        }
    }

    /// A generator with a fixed seed (tests and simulations).
    pub fn seeded(seed: u64) -> Self {
        KeyGen { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A memory key: any 32-bit value except 0 (0 stands for "no key").
    pub fn key(&mut self) -> u32 {
        loop {
            let k = self.next_u64() as u32;
            if k != 0 {
                return k;
            }
        }
    }

    /// A QP number: 24 bits, never 0 or 1 (QP0/QP1 are the management QPs) and
    /// never 0xFFFFFF (multicast).
    pub fn qpn(&mut self) -> u32 {
        loop {
            let q = (self.next_u64() as u32) & 0x00ff_ffff;
            if q > 1 && q != 0x00ff_ffff {
                return q;
            }
        }
    }

    /// A 24-bit starting PSN.
    pub fn psn(&mut self) -> u32 {
        (self.next_u64() as u32) & 0x00ff_ffff
    }
}

impl Default for KeyGen {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_spread() {
        let mut g = KeyGen::seeded(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let q = g.qpn();
            assert!(q > 1 && q < 0xff_ffff);
            assert_ne!(g.key(), 0);
            assert!(g.psn() <= 0xff_ffff);
            seen.insert(q);
        }
        assert!(seen.len() > 9_990, "QPNs repeat too often");
        assert_ne!(KeyGen::new().next_u64(), KeyGen::new().next_u64());
    }
}
