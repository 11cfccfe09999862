/*
 * Unreliable datagram QPs through the C API as applications use them, built
 * against rdma-core's headers and run with ndverbs' libibverbs.so.1 first on
 * the library path. One device (ndv0, 127.0.0.1 in a namespace of its own);
 * UD QPs of this process send to each other through address handles: the
 * ibv_post_send path with wr.ud, the GRH area and the completion's fields,
 * an answer addressed by ibv_create_ah_from_wc, the Q_Key check, what a UD
 * QP refuses, the ibv_wr_* path with ibv_wr_set_ud_addr, and a CQ that
 * cannot shrink below its completions. Prints
 * "ok ud" or "FAIL ud: why" and exits non-zero on the first failure.
 *
 *   ud ud
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL ud: ");                                   \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));    \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define QKEY 0x11111111u
#define SLOT 8192

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char *buf;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The next completion of cq within `secs`; returns 0 if none came. */
static int next_wc(struct ibv_wc *wc, double secs)
{
	double t0 = now_s();
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return 1;
		if (now_s() - t0 > secs)
			return 0;
	}
}

static struct ibv_wc wait_wc(const char *what)
{
	struct ibv_wc wc;
	CHECK(next_wc(&wc, 10), "%s: no completion in 10 s", what);
	CHECK(wc.status == IBV_WC_SUCCESS, "%s: status %s", what, ibv_wc_status_str(wc.status));
	return wc;
}

/* RESET -> INIT (Q_Key) -> RTR -> RTS, checking what UD refuses on the way. */
static void ud_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qkey = QKEY };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL,
	      "INIT without a Q_Key");
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_QKEY) == 0,
	      "INIT");
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = 5;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN) == EINVAL,
	      "RTR with a destination QP");
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "RTS");
	CHECK(qp->state == IBV_QPS_RTS, "qp->state not mirrored");
}

static struct ibv_qp *ud_qp(void)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16,
						.max_send_sge = 1, .max_recv_sge = 1,
						.max_inline_data = 64 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp && qp->qp_type == IBV_QPT_UD, "ibv_create_qp UD");
	ud_ready(qp);
	return qp;
}

static void post_recv(struct ibv_qp *qp, uint64_t id, int slot)
{
	struct ibv_sge s = { .addr = (uintptr_t)(buf + slot * SLOT), .length = SLOT,
			     .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

/* A UD send of `len` bytes at slot `slot`; returns ibv_post_send's result. */
static int send_ud(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey,
		   uint64_t id, int slot, uint32_t len, int opcode, unsigned flags)
{
	struct ibv_sge s = { .addr = (uintptr_t)(buf + slot * SLOT), .length = len,
			     .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = opcode,
				  .send_flags = IBV_SEND_SIGNALED | flags,
				  .imm_data = htobe32(0x1234) },
			   *bad = NULL;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	int rc = ibv_post_send(qp, &wr, &bad);
	CHECK(rc == 0 || bad == &wr, "bad_wr not set");
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], "ud") != 0) {
		fprintf(stderr, "usage: %s ud\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd, cq");
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
	uint32_t mtu = 128u << pa.active_mtu;
	CHECK(mtu + 40 <= SLOT, "MTU %u", mtu);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	buf = calloc(8, SLOT);
	mr = ibv_reg_mr(pd, buf, 8 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	CHECK(buf && mr, "ibv_reg_mr");

	struct ibv_qp *a = ud_qp(), *b = ud_qp();
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(b, &qa, IBV_QP_QKEY | IBV_QP_STATE, &qi) == 0 && qa.qkey == QKEY &&
		      qa.qp_state == IBV_QPS_RTS && qi.qp_type == IBV_QPT_UD,
	      "ibv_query_qp: qkey %#x state %d type %d", qa.qkey, qa.qp_state, qi.qp_type);

	/* Every bit of the flow label set, as UCX's ud_verbs does (~0 for
	 * path 0): the kernel keeps the header's 20 bits. */
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1,
					   .flow_label = 0xffffffff } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "ibv_create_ah");

	/* A -> B: a SEND with immediate, found behind B's GRH area. */
	post_recv(b, 1, 0);
	memcpy(buf + 4 * SLOT, "hello", 5);
	CHECK(send_ud(a, ah, b->qp_num, QKEY, 10, 4, 5, IBV_WR_SEND_WITH_IMM, 0) == 0, "send");
	struct ibv_wc w1 = wait_wc("send"), w2 = wait_wc("recv");
	struct ibv_wc s = w1.opcode == IBV_WC_SEND ? w1 : w2, r = w1.opcode == IBV_WC_SEND ? w2 : w1;
	CHECK(s.wr_id == 10 && s.qp_num == a->qp_num && s.byte_len == 5, "send completion");
	CHECK(r.wr_id == 1 && r.opcode == IBV_WC_RECV && r.qp_num == b->qp_num &&
		      r.src_qp == a->qp_num && r.byte_len == 40 + 5 && r.pkey_index == 0,
	      "recv completion: id %lu qp %#x src %#x len %u", (unsigned long)r.wr_id,
	      r.qp_num, r.src_qp, r.byte_len);
	CHECK((r.wc_flags & IBV_WC_GRH) && (r.wc_flags & IBV_WC_WITH_IMM) &&
		      r.imm_data == htobe32(0x1234),
	      "wc_flags %#x imm %#x", r.wc_flags, r.imm_data);
	/* sl is the RoCE packet type, as libmlx5 reports it: 2 for IPv4 (UCX's
	 * ud_verbs finds the destination address in the GRH area by it). */
	CHECK(r.sl == 2 && s.sl == 0, "sl: recv %d send %d", r.sl, s.sl);
	static const unsigned char zero[20];
	unsigned char *g = (unsigned char *)buf;
	CHECK(memcmp(g, zero, 20) == 0 && g[20] == 0x45 && g[29] == 17, "GRH area: IPv4 header");
	CHECK(memcmp(g + 32, &gid.raw[12], 4) == 0 && memcmp(g + 36, &gid.raw[12], 4) == 0,
	      "GRH area: addresses");
	CHECK(memcmp(buf + 40, "hello", 5) == 0, "payload after the GRH area");

	/* B answers from the completion: ibv_create_ah_from_wc and the
	 * sender's QPN, with its own Q_Key (top bit set). */
	struct ibv_ah_attr back;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &r, (struct ibv_grh *)buf, &back) == 0, "init_ah_from_wc");
	CHECK(back.is_global && memcmp(back.grh.dgid.raw, gid.raw, 16) == 0 &&
		      back.grh.sgid_index == 0 && back.port_num == 1,
	      "ah attr from wc");
	struct ibv_ah *reply = ibv_create_ah_from_wc(pd, &r, (struct ibv_grh *)buf, 1);
	CHECK(reply, "ibv_create_ah_from_wc");
	post_recv(a, 2, 1);
	memcpy(buf + 5 * SLOT, "pong", 4);
	CHECK(send_ud(b, reply, r.src_qp, 0x80000000u, 11, 5, 4, IBV_WR_SEND, IBV_SEND_INLINE) == 0,
	      "reply");
	w1 = wait_wc("reply send");
	w2 = wait_wc("reply recv");
	r = w1.opcode == IBV_WC_RECV ? w1 : w2;
	CHECK(r.wr_id == 2 && r.src_qp == b->qp_num && r.byte_len == 44 &&
		      !(r.wc_flags & IBV_WC_WITH_IMM) &&
		      memcmp(buf + SLOT + 40, "pong", 4) == 0,
	      "reply received");

	/* What a UD QP refuses at post: longer than the MTU, not a SEND. */
	CHECK(send_ud(a, ah, b->qp_num, QKEY, 12, 4, mtu + 1, IBV_WR_SEND, 0) == EINVAL,
	      "a datagram longer than the MTU");
	CHECK(send_ud(a, ah, b->qp_num, QKEY, 13, 4, 4, IBV_WR_RDMA_WRITE, 0) == EINVAL,
	      "RDMA WRITE on UD");
	struct ibv_wc none;
	CHECK(!next_wc(&none, 0.05), "a refused post completed");

	/* A wrong Q_Key is dropped: the receive stays for the right one. */
	post_recv(b, 3, 2);
	CHECK(send_ud(a, ah, b->qp_num, QKEY + 1, 14, 4, 5, IBV_WR_SEND, 0) == 0, "wrong qkey");
	s = wait_wc("wrong-qkey send");
	CHECK(s.wr_id == 14, "the send completes: UD does not know");
	CHECK(!next_wc(&none, 0.2), "a wrong Q_Key was delivered (wr_id %lu)",
	      (unsigned long)none.wr_id);
	CHECK(send_ud(a, ah, b->qp_num, QKEY, 15, 4, 5, IBV_WR_SEND, 0) == 0, "right qkey");
	w1 = wait_wc("right-qkey 1");
	w2 = wait_wc("right-qkey 2");
	r = w1.opcode == IBV_WC_RECV ? w1 : w2;
	CHECK(r.wr_id == 3 && r.byte_len == 45, "the receive took the right Q_Key's datagram");

	/* The ibv_wr_* API: ibv_wr_set_ud_addr addresses each request. */
	struct ibv_qp_init_attr_ex xa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp *x = ibv_create_qp_ex(ctx, &xa);
	CHECK(x, "ibv_create_qp_ex UD");
	ud_ready(x);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(x);
	CHECK(qx, "ibv_qp_to_qp_ex");
	post_recv(b, 4, 3);
	ibv_wr_start(qx);
	qx->wr_id = 20;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htobe32(7));
	ibv_wr_set_ud_addr(qx, ah, b->qp_num, QKEY);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(buf + 4 * SLOT), 5);
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_complete");
	w1 = wait_wc("wr send 1");
	w2 = wait_wc("wr send 2");
	r = w1.opcode == IBV_WC_RECV ? w1 : w2;
	s = w1.opcode == IBV_WC_RECV ? w2 : w1;
	CHECK(s.wr_id == 20 && r.wr_id == 4 && r.src_qp == x->qp_num &&
		      r.imm_data == htobe32(7) && memcmp(buf + 3 * SLOT + 40, "hello", 5) == 0,
	      "ibv_wr_* datagram");
	/* Without an address the batch is refused. */
	ibv_wr_start(qx);
	qx->wr_id = 21;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(buf + 4 * SLOT), 5);
	CHECK(ibv_wr_complete(qx) == EINVAL, "a UD request without ibv_wr_set_ud_addr");

	/* A CQ does not shrink below the completions it holds: EINVAL, as
	 * rxe's rxe_cq_chk_attr (pyverbs' test_resize_cq). */
	for (int i = 0; i < 2; i++)
		CHECK(send_ud(a, ah, b->qp_num, QKEY, 30 + i, 4, 5, IBV_WR_SEND, 0) == 0, "send");
	/* (A UD send completes when ibv_post_send hands it to the socket.) */
	CHECK(ibv_resize_cq(cq, 1) == EINVAL, "shrinking below two completions");
	wait_wc("first of two");
	wait_wc("second of two");
	CHECK(ibv_resize_cq(cq, 1) == 0 && cq->cqe >= 1, "shrinking an empty CQ");

	CHECK(ibv_destroy_qp(x) == 0 && ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0,
	      "destroy qps");
	CHECK(ibv_destroy_ah(reply) == 0 && ibv_destroy_ah(ah) == 0, "destroy ahs");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "cleanup");
	printf("ok ud\n");
	return 0;
}
