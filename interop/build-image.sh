#!/usr/bin/env bash
# Builds the interop guest's boot image: Debian 12's kernel and an initramfs
# holding busybox, the kernel's Soft-RoCE driver (rdma_rxe and the modules it
# needs) and rdma-core's programs (ibv_*, rping, ucmatose, rdma_server/client,
# cmtime, perftest, the iproute2 `rdma` and `ss` tools).
#
#   interop/build-image.sh          build (or rebuild) the image
#
# Everything comes from Debian's own packages, fetched with `apt-get
# download` into the cache and reused afterwards: the first build downloads
# about 90 MB and takes a minute or two, later ones about 15 s and no network.
# Needs root (dpkg-deb keeps file ownership; the image holds device nodes).
#
# Environment: NDV_INTEROP_CACHE (see interop/lib.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

# What the guest runs. Their dependency closure is unpacked whole, minus the
# packages below that only serve dpkg's maintainer scripts, logins, the
# /usr merge and Perl, which a guest booted straight into /init never runs.
GUEST_PACKAGES="busybox-static bash iproute2 libibverbs1 ibverbs-providers
 librdmacm1 ibverbs-utils rdmacm-utils perftest procps"
NOT_NEEDED="adduser base-files base-passwd cdebconf debconf debianutils dpkg
 install-info passwd tar libcap2-bin libpam-modules libpam-modules-bin
 libpam0g libpam-runtime libsemanage-common libsemanage2 libdebian-installer4
 libnewt0.52 libslang2 libtextwrap1 readline-common init-system-helpers
 lsb-base sensible-utils perl-base sysvinit-utils gawk mawk original-awk
 libmpfr6 libsigsegv2 coreutils dash usrmerge usr-is-merged perl perl-modules-5.36
 libperl5.36 libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl
 libgdbm6 libgdbm-compat4 libelogind0"
# Kernel modules loaded at boot (their dependencies are found with modinfo
# and loaded first): the virtio NIC, the 9p shared folder the host drives
# the guest through, and Soft-RoCE with the CRC32 rxe's ICRC asks the
# crypto API for by name (so no module dependency pulls it in).
GUEST_MODULES="virtio_pci virtio_net 9p 9pnet_virtio crc32_generic rdma_rxe
 ib_uverbs rdma_ucm ib_umad"

[ "$(id -u)" = 0 ] || die "build-image.sh needs root"
t0=$(date +%s)
need_host_tools
mkdir -p "$NDV_DEBS" "$NDV_IMAGE"

# ---- which packages, at which version -------------------------------------
kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
if [ -z "$kernel_pkg" ]; then
    say "apt-get update (no package lists)"
    apt-get update -qq || die "apt-get update failed"
    kernel_pkg=$(apt-cache depends linux-image-amd64 |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$kernel_pkg" ] || die "no linux-image-amd64 in the apt sources"
# shellcheck disable=SC2086
closure=$(apt-cache depends --recurse --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances $GUEST_PACKAGES |
    grep -v '^[ <]' | sed 's/:amd64$//' | sort -u)
packages=()
for p in $closure; do
    case " $(echo $NOT_NEEDED) " in *" $p "*) continue ;; esac
    packages+=("$p")
done

# The newest version a source still serves (an installed candidate may no
# longer be downloadable); `apt-cache madison` lists those, newest first.
declare -A version
while read -r p v; do
    [ -n "${version[$p]:-}" ] || version[$p]=$v
done < <(apt-cache madison "${packages[@]}" "$kernel_pkg" |
    awk -F'|' '{ gsub(/ /, ""); print $1, $2 }')
cached_deb() { # package -> its .deb in the cache, if there
    local f
    for f in "$NDV_DEBS/${1}_${version[$1]//:/%3a}_"*.deb; do
        [ -s "$f" ] && { echo "$f"; return; }
    done
}
missing=()
for p in "${packages[@]}" "$kernel_pkg"; do
    [ -n "${version[$p]:-}" ] || die "no downloadable version of $p (apt-get update?)"
    [ -n "$(cached_deb "$p")" ] || missing+=("$p=${version[$p]}")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "downloading ${#missing[@]} Debian packages into $NDV_DEBS"
    (cd "$NDV_DEBS" && apt-get download -q "${missing[@]}" 2>&1 |
        grep -v 'unsandboxed' | grep -v '^Get:' || true)
    for p in "${missing[@]}"; do
        [ -n "$(cached_deb "${p%%=*}")" ] || die "apt-get download $p failed"
    done
fi

# ---- unpack --------------------------------------------------------------
work=$(mktemp -d "$NDV_INTEROP_CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root kernel=$work/kernel
mkdir -p "$root" "$kernel"
for p in "${packages[@]}"; do dpkg-deb -x "$(cached_deb "$p")" "$root"; done
dpkg-deb -x "$(cached_deb "$kernel_pkg")" "$kernel"
# Debian 12 is merged-/usr: /bin, /sbin and /lib are links into /usr, which
# dpkg-deb -x does not create (base-files does, and it is not unpacked).
for d in bin sbin lib lib64; do
    if [ -d "$root/$d" ] && [ ! -L "$root/$d" ]; then
        mkdir -p "$root/usr/$d"
        cp -a "$root/$d/." "$root/usr/$d/"
        rm -rf "${root:?}/$d"
    fi
    mkdir -p "$root/usr/$d"
    ln -s "usr/$d" "$root/$d"
done
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion,zsh,menu} \
    "$root"/usr/lib/systemd "$root"/usr/lib/udev "$root"/etc/init.d

# busybox gives every command no package brings (sh, mount, insmod, …).
for applet in $("$root/bin/busybox" --list); do
    found=
    for d in bin sbin; do [ -e "$root/usr/$d/$applet" ] && found=1; done
    [ -n "$found" ] || ln -s busybox "$root/usr/bin/$applet"
done

# ---- kernel modules, dependencies first ----------------------------------
kver=$(ls "$kernel/lib/modules")
kmods=$kernel/lib/modules/$kver
declare -A module_file loaded
while read -r f; do
    n=$(basename "$f" .ko); module_file[${n//-/_}]=$f
done < <(find "$kmods/kernel" -name '*.ko')
order=()
add_module() {
    local m=${1//-/_} dep
    [ -z "${loaded[$m]:-}" ] || return 0
    loaded[$m]=1
    [ -n "${module_file[$m]:-}" ] || die "kernel module $m is not in $kernel_pkg"
    for dep in $(modinfo -F depends "${module_file[$m]}" | tr , ' '); do add_module "$dep"; done
    order+=("${module_file[$m]}")
}
for m in $GUEST_MODULES; do add_module "$m"; done
mkdir -p "$root/lib/modules/$kver" "$root/etc/ndv"
for f in "${order[@]}"; do
    cp "$f" "$root/lib/modules/$kver/"
    basename "$f" >> "$root/etc/ndv/modules"
done

# ---- the rest of a root file system ---------------------------------------
mkdir -p "$root"/{proc,sys,dev,run,tmp,root,mnt/host,var/tmp}
chmod 1777 "$root/tmp" "$root/var/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n%s ndv-host\n%s ndv-guest\n' "$NDV_HOST_IP" "$NDV_GUEST_IP" >"$root/etc/hosts"
echo 'hosts: files' >"$root/etc/nsswitch.conf"
mknod -m 600 "$root/dev/console" c 5 1
mknod -m 666 "$root/dev/null" c 1 3
install -m 755 "$here/init.sh" "$root/init"

# ---- pack ----------------------------------------------------------------
(cd "$root" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet --reproducible) | gzip -6 -n >"$work/initramfs.gz"
mv "$work/initramfs.gz" "$NDV_IMAGE/initramfs.gz"
cp "$kernel/boot/vmlinuz-$kver" "$NDV_IMAGE/vmlinuz"
{
    echo "kernel $kver ($kernel_pkg ${version[$kernel_pkg]})"
    echo "modules: $(tr '\n' ' ' <"$root/etc/ndv/modules")"
    for p in "${packages[@]}"; do echo "$p ${version[$p]}"; done
} >"$NDV_IMAGE/manifest.txt"
image_stamp >"$NDV_IMAGE/stamp"
say "image built in $(($(date +%s) - t0)) s: $NDV_IMAGE ($(du -h "$NDV_IMAGE/initramfs.gz" | cut -f1) initramfs, kernel $kver)"
