//! # ndverbs-cabi: `libibverbs.so.1` over ndverbs
//!
//! A binary-compatible replacement for rdma-core 44's `libibverbs.so.1`,
//! built on the verbs crate, so that unmodified programs built against
//! rdma-core (Debian 12's `ibv_devices`, `ibv_devinfo`, `ibv_rc_pingpong`,
//! perftest, …) run over ndverbs' RoCEv2 engine with no kernel module, no
//! RDMA hardware and no root. `ndv run PROGRAM` puts it first on the
//! program's library path.
//!
//! ## One object, four names, one engine
//!
//! The library is one shared object, linked from this crate's static
//! library by [`install::link`] (rustc's `cdylib` cannot carry symbol
//! versions: see [`install`]). It is installed as `libibverbs.so.1` (its
//! SONAME) with `librdmacm.so.1`, `libmlx5.so.1` and `libefa.so.1` as
//! symbolic links to it, and defines the version nodes of all four:
//! `IBVERBS_1.0` … `IBVERBS_1.14` and `IBVERBS_PRIVATE_34`, `RDMACM_1.0` …
//! `RDMACM_1.3`, `MLX5_1.1` … `MLX5_1.21`, `EFA_1.1` and `EFA_1.2`
//! (`exports.map`, checked by the tests against rdma-core's export lists
//! and the Debian programs' imports). The dynamic loader recognises the
//! four names as one file (same inode) and maps it once, so a program that
//! links several of them gets one copy of this library's state: one device
//! table, one engine per local address (`nic`), one set of objects.
//! librdmacm's calls live in this same object (`rdmacm`) and use the
//! contexts, PDs, CQs and QPs of the verbs calls directly, with no private
//! ABI between two libraries.
//! The vendor libraries are there only because perftest, libfabric and UCX
//! link them and bind every symbol at load time (`vendor`).
//!
//! ## The ABI
//!
//! The data path of libibverbs is inline in the application: `verbs.h`
//! turns `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`,
//! `ibv_poll_cq` and `ibv_req_notify_cq` into calls through
//! `obj->context->ops`, so the structures must be laid out to the byte
//! (`abi`, whose layout assertions fail the build on a mistake) and every
//! object must start with its context. Everything else is an exported
//! function with rdma-core's name, version and errno conventions (`ffi`).
//!
//! The modules (private: `cargo doc --document-private-items` shows them):
//!
//! | area | module |
//! |---|---|
//! | device list, contexts, device/port/GID/P_Key queries | `device` |
//! | the engine per address, and who runs it | `nic` |
//! | PDs and memory regions | `pd` |
//! | registered memory the program unmaps | `guard` |
//! | CQs, completion channels | `cq` |
//! | extended CQs: `ibv_create_cq_ex`, `ibv_start_poll` … | `cq_ex` |
//! | QPs and the post path | `qp` |
//! | extended QPs: `ibv_create_qp_ex`, the `ibv_wr_*` post API | `qp_ex` |
//! | SRQs | `srq` |
//! | address handles | `ah` |
//! | the async event descriptor | `events` |
//! | names, rates, sysfs, fork, unsupported kernel-object calls | `misc` |
//! | librdmacm: ids, event channels, connections over verbs' endpoints | `rdmacm` |
//!
//! ## Bad input
//!
//! NULL, a destroyed object or another library's pointer passed to a
//! control-path call is `EINVAL` (every object handed out is recorded and
//! looked up before use); unsupported flags, QP types and extended verbs
//! fail with the errno rdma-core gives for them (`EINVAL`, `EOPNOTSUPP`) and
//! change nothing; a panic inside never unwinds into C. What C cannot check
//! — a pointer to too few bytes, an object destroyed while another thread
//! uses it — is undefined, as it is with rdma-core. A peer's access to
//! registered memory the program has since unmapped does not crash the
//! program (`guard`).

#![warn(missing_docs)]
#![allow(
    clippy::missing_safety_doc,
    reason = "the exported functions are libibverbs' C API: their safety contract is rdma-core's documentation of each call"
)]

mod abi;
mod ah;
mod cq;
mod cq_ex;
mod device;
mod events;
mod ffi;
mod guard;
pub mod install;
mod misc;
mod nic;
mod pd;
mod qp;
mod qp_ex;
mod rdmacm;
mod srq;
mod sys;
mod vendor;

pub use nic::PROGRESS_ENV;
