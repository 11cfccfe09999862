#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Idempotent;
# installs only what is missing. Run as root on Debian 12 (CI runs it from
# scripts/test.sh).
#   tshark   decode cross-checks and capture tests
#   python3  helper scripts (tshark comparison)
#   nftables kernel packet drops between test namespaces (no netem here)
#   iperf3   the TCP baseline of `ndv bench` (P1 and the -a sweep)
#   iputils-ping  queueing delay in scripts/ccbed.py's full run
#   ibverbs-utils rdmacm-utils perftest
#            the unmodified Debian programs run over the C ABI libraries
#            (ndverbs-cabi) and against ndv's tools
#   libibverbs-dev librdmacm-dev gcc
#            rdma-core's headers and a C compiler, for the C API tests of
#            ndverbs-cabi (tests/c/*.c)
#   python3-pyverbs rdma-core's Python binding, run over the C ABI libraries
#   libfabric-bin openmpi-bin libopenmpi-dev
#            fi_info/fi_pingpong (libfabric's verbs provider) and Open MPI
#            (mpirun, mpicc) over the C ABI libraries
#   ucx-utils  ucx_info and ucx_perftest (UCX 1.13, libucx0) over the C ABI
#            libraries through `ndv run --ucx`
#   mpich libmpich-dev
#            MPICH (ch4:ucx: mpirun.mpich, mpicc.mpich and its headers)
#            over UCX through `ndv run --ucx`
set -euo pipefail
need=()
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v editcap >/dev/null 2>&1 || need+=(wireshark-common)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ibv_rc_pingpong >/dev/null 2>&1 || need+=(ibverbs-utils)
command -v rping >/dev/null 2>&1 || need+=(rdmacm-utils)
command -v ib_write_bw >/dev/null 2>&1 || need+=(perftest)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -d /usr/lib/python3/dist-packages/pyverbs ] || need+=(python3-pyverbs)
command -v fi_pingpong >/dev/null 2>&1 || need+=(libfabric-bin)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
dpkg -s libopenmpi-dev >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v ucx_perftest >/dev/null 2>&1 || need+=(ucx-utils)
command -v mpirun.mpich >/dev/null 2>&1 || need+=(mpich)
dpkg -s libmpich-dev >/dev/null 2>&1 || need+=(libmpich-dev)
if ((${#need[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing ${need[*]}; run as root (apt-get) to install" >&2
        exit 1
    fi
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Non-root packet capture is not needed; answer the wireshark-common question.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    # ndv bench starts its own iperf3 servers; no system daemon.
    echo "iperf3 iperf3/start_daemon boolean false" | debconf-set-selections
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! iperf3 --version >/dev/null 2>&1; then
    echo "setup: iperf3 is installed but does not run" >&2
    exit 1
fi
echo "setup: ok"
