# shellcheck shell=bash
# Settings and helpers of the interop scripts (sourced, not run).
#
# Where things go:
#   NDV_INTEROP_CACHE  the cache: downloaded .debs (debs/) and the built boot
#                      image (image/). Default ~/.cache/ndverbs/interop, or
#                      $XDG_CACHE_HOME/ndverbs/interop.
#   NDV_INTEROP_RUN    the running guest's state: qemu's pid, the serial log,
#                      the folder shared with the guest. Default
#                      /run/ndverbs-interop.
# The link (fixed: the tests name these addresses):
#   NDV_NETNS          the network namespace our side runs in (ndv-interop)
#   host 10.77.0.1/24 on tap ndvtap0 in that namespace, guest 10.77.0.2/24,
#   MTU 1500, rxe0 on the guest's eth0.

NDV_INTEROP_CACHE=${NDV_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ndverbs/interop}
NDV_INTEROP_RUN=${NDV_INTEROP_RUN:-/run/ndverbs-interop}
NDV_NETNS=${NDV_NETNS:-ndv-interop}
NDV_DEBS=$NDV_INTEROP_CACHE/debs
NDV_IMAGE=$NDV_INTEROP_CACHE/image
NDV_TAP=ndvtap0
NDV_HOST_IP=10.77.0.1
NDV_GUEST_IP=10.77.0.2
NDV_MTU=1500

say() { printf '[interop %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[interop] error: %s\n' "$*" >&2; exit 1; }

# Host programs the scripts call, with the Debian package of each; missing
# ones are installed (the suite's setup contract: a fresh Debian 12 machine
# needs nothing beyond apt).
need_host_tools() {
    local want=(qemu-system-x86_64:qemu-system-x86 cpio:cpio dpkg-deb:dpkg
        modinfo:kmod tcpdump:tcpdump ip:iproute2 gzip:gzip)
    local missing=() t
    for t in "${want[@]}"; do
        command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    [ -n "$(ls /var/lib/apt/lists/*_Packages 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# Identifies what the image is built from: a rebuilt image follows any
# change to the scripts that make it.
image_stamp() {
    local here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    cat "$here/build-image.sh" "$here/init.sh" "$here/lib.sh" | sha256sum | cut -d' ' -f1
}
