//! # ndverbs-testkit: what the tests of ndverbs share
//!
//! A dev-dependency of the verbs, nd and ndv crates (never published). Each
//! module holds one piece of test plumbing, written once:
//!
//! | need | use |
//! |---|---|
//! | a test that needs root, a tool or the guest, on a machine without it | [`skip`]: print `SKIPPED: <test>: <why>` and pass — or fail under `CI=true` |
//! | an address to open a device on (UDP 4791), or a server/client pair | [`addr`]: [`addr::v4`], [`addr::pair_v4`], unique across threads *and* processes; [`addr::pair_v6`] inside a namespace |
//! | IPv6 on `lo`, a real link with an MTU, a link to take down, kernel packet loss | [`netns`]: [`netns::Netns`] with addresses, a veth pair, nftables rules, code or programs run inside; removed on drop |
//! | Linux Soft-RoCE and rdma-core's tools as the peer | [`guest`]: [`guest::Guest`], its namespace, jobs, listening checks, captures |
//! | an `ndv` server, then a client | [`process`]: [`process::start_server`] returns once the server logged that it is ready; [`process::server_then_client`] runs both |
//! | whether a run of Debian 12's `rping` ended well (its CM thread's exit race, fixed upstream later) | [`rping`]: [`rping::ended_well`] |
//! | two connected verbs devices and bulk transfers | [`verbs`]: [`verbs::Pair`], the RC ladder ([`verbs::RcParams`]), [`verbs::Pump`] |
//! | ND completions | [`nd::results`] |
//!
//! Addresses: tests never pick `127.x.y.z` by hand (two tests of different
//! crates once shared one and failed each other under a parallel runner);
//! documentation examples keep their fixed addresses in `127.92.0.0/15`,
//! outside the kit's range.
//!
//! ```no_run
//! use ndverbs_testkit::{netns::Netns, addr};
//! // A test that needs a namespace: skipped (or failed under CI) without root.
//! let (a, b) = addr::pair_v6();
//! let Some(ns) = Netns::with_lo_addrs(&[a, b]) else { return };
//! ```

#![warn(missing_docs)]

pub mod addr;
pub mod guest;
pub mod nd;
pub mod netns;
pub mod process;
pub mod rping;
pub mod skip;
pub mod verbs;
