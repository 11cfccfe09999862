"""An RC ping-pong written against pyverbs (Debian's python3-pyverbs, built on
rdma-core's libibverbs), run unmodified over ndverbs by `ndv run`: two QPs of
one device connected to each other, ITERS round trips of SIZE bytes, every
payload checked. Prints `pingpong ok ITERS` on success.

    ndv run -- python3 rc_pingpong.py [DEVICE [ITERS [SIZE]]]
"""
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

DEPTH = 16


def device_name(wanted):
    names = [d.name.decode() for d in get_device_list()]
    if not names:
        sys.exit("no RDMA device")
    if wanted is not None:
        if wanted not in names:
            sys.exit(f"no device {wanted} among {names}")
        return wanted
    return names[0]


class Side:
    def __init__(self, ctx, pd, size):
        self.cq = CQ(ctx, 2 * DEPTH)
        cap = QPCap(max_send_wr=DEPTH, max_recv_wr=DEPTH, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.mr = MR(pd, 2 * size, e.IBV_ACCESS_LOCAL_WRITE)
        self.size = size

    def connect(self, peer, gid, sq_psn, rq_psn):
        gr = GlobalRoute(dgid=gid, sgid_index=0, hop_limit=64)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RESET)
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = peer.qp.qp_num
        attr.rq_psn = rq_psn
        attr.sq_psn = sq_psn
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        self.qp.to_rts(attr)

    def post_recv(self):
        sge = SGE(self.mr.buf + self.size, self.size, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[sge]))

    def send(self, payload):
        self.mr.write(payload, len(payload), 0)
        sge = SGE(self.mr.buf, len(payload), self.mr.lkey)
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        self.qp.post_send(wr)

    def received(self):
        return self.mr.read(self.size, self.size)


def wait(cq, want):
    """Busy-polls `cq` until `want` completions arrived; all must succeed."""
    got = 0
    for _ in range(10_000_000):
        n, wcs = cq.poll(num_entries=want - got)
        for wc in wcs[:n]:
            if wc.status != e.IBV_WC_SUCCESS:
                sys.exit(f"completion error: status {wc.status} opcode {wc.opcode}")
        got += n
        if got == want:
            return
    sys.exit("no completion")


def main():
    name = device_name(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None)
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    ctx = Context(name=name)
    pd = PD(ctx)
    a, b = Side(ctx, pd, size), Side(ctx, pd, size)
    gid = ctx.query_gid(1, 0)
    a.connect(b, gid, 100, 200)
    b.connect(a, gid, 200, 100)
    for i in range(iters):
        ping = bytes([(i + j) % 256 for j in range(size)])
        b.post_recv()
        a.send(ping)
        wait(a.cq, 1)  # a's send
        wait(b.cq, 1)  # b's receive
        if b.received() != ping:
            sys.exit(f"iteration {i}: ping corrupted")
        pong = bytes(reversed(ping))
        a.post_recv()
        b.send(pong)
        wait(b.cq, 1)
        wait(a.cq, 1)
        if a.received() != pong:
            sys.exit(f"iteration {i}: pong corrupted")
    print(f"pingpong ok {iters} on {name} ({gid})")


if __name__ == "__main__":
    main()
