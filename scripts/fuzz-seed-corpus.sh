#!/usr/bin/env bash
# Builds the seed corpus of the fuzz targets in fuzz/ from the real captures
# in testdata/captures/.
#
#   fuzz/corpus/wire_parse/<capture>-<frame>.bin   the IP packet of every
#       Ethernet frame carrying UDP to port 4791 (RoCEv2), cut at the IP
#       length (Ethernet padding and FCS dropped), frame numbers 1-based as
#       Wireshark shows them
#   fuzz/corpus/capture_parse/<capture>.pcap        the capture files as they are
#
# Only classic pcap with link type Ethernet (14-byte header, no VLAN tag) is
# read; other files are reported and skipped. The script is deterministic:
# running it twice gives the same files. Existing files in those corpus
# directories that the script did not make (libFuzzer's own finds, if someone
# committed them) are left alone.
#
# If the wire_parse seeds would exceed MAX_BYTES (default 2 MB) in total, only
# the first frame of each distinct (BTH opcode, IP length) pair per capture is
# kept.
#
# usage: scripts/fuzz-seed-corpus.sh [CAPTURE...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -eq 0 ]; then
    set -- "$root"/testdata/captures/*.pcap
fi

exec python3 - "$root/fuzz/corpus" "${MAX_BYTES:-2000000}" "$@" <<'PY'
import os, shutil, struct, sys

out, max_bytes, captures = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
wire_dir = os.path.join(out, "wire_parse")
cap_dir = os.path.join(out, "capture_parse")
os.makedirs(wire_dir, exist_ok=True)
os.makedirs(cap_dir, exist_ok=True)

MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",  # little-endian us / ns
    b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">",  # big-endian us / ns
}
LINKTYPE_ETHERNET = 1
ROCEV2_PORT = 4791


def frames(path):
    """Yields (1-based frame number, frame bytes) of a classic Ethernet pcap."""
    data = open(path, "rb").read()
    order = MAGICS.get(data[:4])
    if order is None or len(data) < 24:
        raise ValueError("not a classic pcap file")
    linktype = struct.unpack(order + "I", data[20:24])[0] & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"link type {linktype}, not Ethernet")
    off, n = 24, 0
    while off + 16 <= len(data):
        caplen = struct.unpack(order + "I", data[off + 8:off + 12])[0]
        off += 16
        if off + caplen > len(data):
            raise ValueError(f"record {n + 1} truncated")
        n += 1
        yield n, data[off:off + caplen]
        off += caplen


def rocev2_ip_packet(frame):
    """The IP packet of an Ethernet frame carrying UDP to 4791, or None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack(">H", frame[12:14])[0]
    ip = frame[14:]
    if ethertype == 0x0800 and len(ip) >= 20 and ip[0] >> 4 == 4:
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        if ip[9] != 17 or len(ip) < ihl + 8:
            return None
        udp = ihl
    elif ethertype == 0x86DD and len(ip) >= 48 and ip[0] >> 4 == 6:
        total = 40 + struct.unpack(">H", ip[4:6])[0]
        if ip[6] != 17:
            return None
        udp = 40
    else:
        return None
    if struct.unpack(">H", ip[udp + 2:udp + 4])[0] != ROCEV2_PORT:
        return None
    # Cut Ethernet padding / FCS off; keep a truncated packet as it is.
    return ip[:total] if udp < total <= len(ip) else ip


seeds = []  # (capture stem, frame number, opcode, bytes)
for path in sorted(captures):
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        found = 0
        for number, frame in frames(path):
            pkt = rocev2_ip_packet(frame)
            if pkt is None:
                continue
            udp = 20 if pkt[0] >> 4 == 4 else 40
            opcode = pkt[udp + 8] if len(pkt) > udp + 8 else -1
            seeds.append((stem, number, opcode, pkt))
            found += 1
    except (OSError, ValueError) as e:
        print(f"{path}: skipped: {e}", file=sys.stderr)
        continue
    shutil.copyfile(path, os.path.join(cap_dir, os.path.basename(path)))
    print(f"{path}: {found} RoCEv2 frames")

total = sum(len(s[3]) for s in seeds)
if total > max_bytes:
    seen, kept = set(), []
    for s in seeds:
        key = (s[0], s[2], len(s[3]))
        if key not in seen:
            seen.add(key)
            kept.append(s)
    print(f"{total} bytes of seeds > {max_bytes}: kept {len(kept)} of {len(seeds)}"
          " (one per capture, opcode and length)")
    seeds = kept

for stem, number, _, pkt in seeds:
    with open(os.path.join(wire_dir, f"{stem}-{number:04d}.bin"), "wb") as f:
        f.write(pkt)
print(f"wrote {len(seeds)} seeds ({sum(len(s[3]) for s in seeds)} bytes) to {wire_dir}")
PY
