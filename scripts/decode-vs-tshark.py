#!/usr/bin/env python3
"""Cross-checks `ndv decode --json` against tshark and an independent ICRC.

For every capture given, every RoCEv2 frame (UDP dport 4791) that tshark
dissects must appear in ndv's output with the same field values, and
`icrc_ok` must agree with an ICRC computed here with zlib (so the two
implementations check each other). Prints one line per capture and ends with
"N passed, N failed"; exits non-zero on any mismatch.

usage: decode-vs-tshark.py NDV_BINARY CAPTURE...
"""
import ipaddress, json, os, struct, subprocess, sys, tempfile, zlib

FIELDS = [
    "frame.number", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "udp.srcport", "udp.dstport",
    "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
    "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
    "infiniband.bth.psn", "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.deth.q_key", "infiniband.deth.srcqp",
    "infiniband.immdt", "infiniband.ieth", "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt", "infiniband.payload",
    "infiniband.mad.baseversion", "infiniband.mad.mgmtclass", "infiniband.mad.classversion",
    "infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.transactionid",
    "infiniband.mad.attributeid", "infiniband.mad.attributemodifier",
    "infiniband.cm.req", "infiniband.cm.req.serviceid", "infiniband.cm.req.localcaguid",
    "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn", "infiniband.cm.req.pppmtu",
    "infiniband.cm.req.retrcount", "infiniband.cm.req.rnrretrcount", "infiniband.cm.req.maxcmretr",
    "infiniband.cm.req.prim_localgid", "infiniband.cm.req.prim_remotegid",
    "infiniband.cm.req.prim_localgid_ipv4", "infiniband.cm.req.prim_remotegid_ipv4",
    "infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn", "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
    "infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.reason",
    "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
    "infiniband.cm.req.remoteqpneecn", "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid",
]

# (ndv json path, tshark field, converter)
def num(v):
    v = v.split(",")[0]
    if v in ("True", "true"):
        return 1
    if v in ("False", "false"):
        return 0
    return int(v, 0)

def hexbytes(v):
    return int(v.replace(":", ""), 16)

def gid(v):
    return str(ipaddress.IPv6Address(v))

COMMON = [
    ("sport", "udp.srcport", num), ("dport", "udp.dstport", num),
    ("bth.opcode", "infiniband.bth.opcode", num), ("bth.se", "infiniband.bth.se", num),
    ("bth.m", "infiniband.bth.m", num), ("bth.pad", "infiniband.bth.padcnt", num),
    ("bth.tver", "infiniband.bth.tver", num), ("bth.pkey", "infiniband.bth.p_key", num),
    ("bth.dqpn", "infiniband.bth.destqp", num), ("bth.ackreq", "infiniband.bth.a", num),
    ("bth.psn", "infiniband.bth.psn", num),
    ("reth.va", "infiniband.reth.va", num), ("reth.rkey", "infiniband.reth.r_key", num),
    ("reth.len", "infiniband.reth.dmalen", num),
    ("aeth.syndrome", "infiniband.aeth.syndrome", num), ("aeth.msn", "infiniband.aeth.msn", num),
    ("deth.qkey", "infiniband.deth.q_key", num), ("deth.src_qpn", "infiniband.deth.srcqp", num),
    ("immdt", "infiniband.immdt", hexbytes), ("ieth", "infiniband.ieth", hexbytes),
    ("atomiceth.swap_add", "infiniband.atomiceth.swapdt", num),
    ("atomiceth.compare", "infiniband.atomiceth.cmpdt", num),
    ("atomicacketh.orig", "infiniband.atomicacketh.origremdt", num),
    ("mad.base_version", "infiniband.mad.baseversion", num),
    ("mad.mgmt_class", "infiniband.mad.mgmtclass", num),
    ("mad.class_version", "infiniband.mad.classversion", num),
    ("mad.method", "infiniband.mad.method", num), ("mad.status", "infiniband.mad.status", num),
    ("mad.tid", "infiniband.mad.transactionid", num), ("mad.attr_id", "infiniband.mad.attributeid", num),
    ("mad.attr_mod", "infiniband.mad.attributemodifier", num),
]
CM = {
    "REQ": [("cm.local_comm_id", "infiniband.cm.req", num),
            ("cm.service_id", "infiniband.cm.req.serviceid", num),
            ("cm.local_ca_guid", "infiniband.cm.req.localcaguid", num),
            ("cm.local_qpn", "infiniband.cm.req.localqpn", num),
            ("cm.starting_psn", "infiniband.cm.req.startpsn", num),
            ("cm.path_mtu", "infiniband.cm.req.pppmtu", num),
            ("cm.retry_count", "infiniband.cm.req.retrcount", num),
            ("cm.rnr_retry_count", "infiniband.cm.req.rnrretrcount", num),
            ("cm.max_cm_retries", "infiniband.cm.req.maxcmretr", num)],
    "REP": [("cm.local_comm_id", "infiniband.cm.rep", num),
            ("cm.remote_comm_id", "infiniband.cm.rep.remotecommid", num),
            ("cm.local_qpn", "infiniband.cm.rep.localqpn", num),
            ("cm.starting_psn", "infiniband.cm.rep.startpsn", num)],
    "RTU": [("cm.local_comm_id", "infiniband.cm.rtu.localcommid", num),
            ("cm.remote_comm_id", "infiniband.cm.rtu.remotecommid", num)],
    "REJ": [("cm.local_comm_id", "infiniband.cm.rej.localcommid", num),
            ("cm.remote_comm_id", "infiniband.cm.rej.remotecommid", num),
            ("cm.reason", "infiniband.cm.rej.reason", num)],
    "DREQ": [("cm.local_comm_id", "infiniband.cm.dreq.localcommid", num),
             ("cm.remote_comm_id", "infiniband.cm.dreq.remotecommid", num),
             ("cm.remote_qpn", "infiniband.cm.req.remoteqpneecn", num)],
    "DREP": [("cm.local_comm_id", "infiniband.cm.drsp.localcommid", num),
             ("cm.remote_comm_id", "infiniband.cm.drsp.remotecommid", num)],
}

def get(d, path):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d

def pcap_frames(path):
    """Raw frames of a capture (pcapng converted to pcap by editcap)."""
    data = open(path, "rb").read()
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        with tempfile.NamedTemporaryFile(suffix=".pcap") as t:
            subprocess.run(["editcap", "-F", "pcap", path, t.name], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            data = open(t.name, "rb").read()
    magic = data[:4]
    e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    link = struct.unpack(e + "I", data[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return link, out

def ip_of(link, f):
    if link == 1:
        off, et = 14, f[12:14]
        while et in (b"\x81\x00", b"\x88\xa8"):
            et, off = f[off + 2:off + 4], off + 4
        return f[off:]
    if link == 113:
        return f[16:]
    if link == 276:
        return f[20:]
    return f  # raw IP

def icrc_ok(ip):
    """Independent ICRC check (zlib CRC-32 over the masked packet)."""
    if ip[0] >> 4 == 4:
        total = struct.unpack(">H", ip[2:4])[0]
        p = bytearray(ip[:total]); h = 20
        p[1] = 0xFF; p[8] = 0xFF; p[10:12] = b"\xff\xff"
    else:
        total = 40 + struct.unpack(">H", ip[4:6])[0]
        p = bytearray(ip[:total]); h = 40
        p[0] |= 0x0F; p[1:4] = b"\xff\xff\xff"; p[7] = 0xFF
    p[h + 6:h + 8] = b"\xff\xff"
    p[h + 12] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + bytes(p[:-4]))
    return struct.pack("<I", crc) == bytes(p[-4:])

def check(ndv, path):
    errors = []
    ours = {}
    out = subprocess.run([ndv, "decode", "--json", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        o = json.loads(line)
        ours[o["frame"]] = o
    ts = subprocess.run(["tshark", "-r", path, "-Y", "udp.dstport == 4791 && !icmp && !icmpv6", "-T", "fields",
                         "-E", "separator=\t", "-E", "occurrence=f"] + sum([["-e", f] for f in FIELDS], []),
                        check=True, capture_output=True, text=True).stdout
    link, raw = pcap_frames(path)
    seen = 0
    for line in ts.splitlines():
        t = dict(zip(FIELDS, line.split("\t")))
        n = int(t["frame.number"])
        seen += 1
        o = ours.get(n)
        if o is None:
            errors.append(f"frame {n}: missing from ndv output"); continue
        src = t["ip.src"] or t["ipv6.src"]; dst = t["ip.dst"] or t["ipv6.dst"]
        if (o["src"], o["dst"]) != (str(ipaddress.ip_address(src)), str(ipaddress.ip_address(dst))):
            errors.append(f"frame {n}: addresses {o['src']}->{o['dst']} vs {src}->{dst}")
        want_icrc = icrc_ok(ip_of(link, raw[n - 1]))
        if o["icrc_ok"] != want_icrc:
            errors.append(f"frame {n}: icrc_ok {o['icrc_ok']} vs independent {want_icrc}")
        checks = list(COMMON)
        msg = get(o, "cm.msg")
        checks += CM.get(msg, [])
        for ours_path, field, conv in checks:
            tv = t.get(field, "")
            ov = get(o, ours_path)
            if tv == "":
                if ov is not None and not ours_path.startswith(("reth.", "atomiceth.")):
                    errors.append(f"frame {n}: ndv has {ours_path}={ov}, tshark has no {field}")
                continue
            try:
                tvv = conv(tv)
            except ValueError:
                errors.append(f"frame {n}: cannot read tshark {field}={tv!r}"); continue
            if ours_path.startswith("reth.") and ov is None:
                # tshark shows AtomicETH's VA and R_Key under reth.*
                ov = get(o, "atomiceth." + ours_path.split(".")[1])
            if ov != tvv:
                errors.append(f"frame {n}: {ours_path}={ov} but tshark {field}={tvv}")
        if msg == "REQ":
            for side in ("local", "remote"):
                g6, g4 = t[f"infiniband.cm.req.prim_{side}gid"], t[f"infiniband.cm.req.prim_{side}gid_ipv4"]
                want = gid(g6) if g6 else str(ipaddress.IPv4Address(g4).ipv4_mapped) if hasattr(ipaddress.IPv4Address(g4), "ipv4_mapped") else "::ffff:" + g4
                if get(o, f"cm.primary_{side}_gid") != want:
                    errors.append(f"frame {n}: primary_{side}_gid {get(o, f'cm.primary_{side}_gid')} vs {want}")
        pl = t["infiniband.payload"]
        if pl and "mad" not in o and o.get("payload_len") != len(pl.replace(":", "")) // 2:
            errors.append(f"frame {n}: payload_len {o.get('payload_len')} vs tshark {len(pl.replace(':', '')) // 2}")
    extra = set(ours) - {int(l.split("\t")[0]) for l in ts.splitlines()}
    for n in sorted(extra):
        errors.append(f"frame {n}: ndv reports a frame tshark does not see as RoCEv2")
    return seen, errors

def main():
    ndv, paths = sys.argv[1], sys.argv[2:]
    passed = failed = 0
    for p in paths:
        seen, errors = check(ndv, p)
        if errors or seen == 0:
            failed += 1
            print(f"FAIL {os.path.basename(p)}: {seen} frames, {len(errors)} mismatches")
            for e in errors[:20]:
                print("   ", e)
        else:
            passed += 1
            print(f"ok   {os.path.basename(p)}: {seen} RoCEv2 frames agree with tshark")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

main()
