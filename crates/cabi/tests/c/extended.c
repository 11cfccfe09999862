/*
 * The extended verbs as applications use them, built against rdma-core's
 * headers (so ibv_create_cq_ex, ibv_create_qp_ex, ibv_start_poll and the
 * ibv_wr_* calls are verbs.h's inlines reaching our verbs_context and
 * struct slots) and run with ndverbs' libibverbs.so.1 first on the library
 * path; ibv_rereg_mr (an exported call) too. One device (ndv0), RC QPs
 * connected to each other in this process. Each check prints "ok NAME" or
 * "FAIL NAME: why" and the program exits non-zero on the first failure.
 *
 *   extended CHECK      CHECK: cq_ex, qp_ex, rereg, threads
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(name, cond, ...)                                                 \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL %s: ", name);                             \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));    \
			exit(1);                                               \
		}                                                              \
	} while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void open_first(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK("open", list && n >= 1, "no device list");
	ctx = ibv_open_device(list[0]);
	CHECK("open", ctx, "ibv_open_device");
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	CHECK("open", pd, "ibv_alloc_pd");
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion from cq within 10 s, through ibv_poll_cq. */
static struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double t0 = now_s();
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(what, n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return wc;
		CHECK(what, now_s() - t0 < 10, "no completion in 10 s");
	}
}

/* No completion shows up on cq for 0.2 s. */
static void expect_none(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double t0 = now_s();
	while (now_s() - t0 < 0.2)
		CHECK(what, ibv_poll_cq(cq, 1, &wc) == 0, "unexpected completion wr_id %lu",
		      (unsigned long)wc.wr_id);
}

/* Moves qp[0] and qp[1] (this process) to RTS, connected to each other. */
static void connect_qps(struct ibv_qp *qp[2])
{
	union ibv_gid gid;
	CHECK("connect", ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_ATOMIC,
		};
		CHECK("connect", ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
			.dest_qp_num = qp[1 - i]->qp_num, .rq_psn = 7,
			.max_dest_rd_atomic = 4, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 64 } },
		};
		CHECK("connect", ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV |
					       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
		      "to RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 7;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		CHECK("connect", ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					       IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					       IBV_QP_MAX_QP_RD_ATOMIC) == 0, "to RTS");
	}
}

static struct ibv_cq_ex *cq_ex(uint64_t wc_flags, uint32_t comp_mask, uint32_t flags, int cqe)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = cqe, .cq_context = (void *)7, .wc_flags = wc_flags,
		.comp_mask = comp_mask, .flags = flags,
	};
	errno = 0;
	return ibv_create_cq_ex(ctx, &a);
}

/* Refused with `err` and nothing created. */
static void cq_ex_refused(uint64_t wc_flags, uint32_t comp_mask, uint32_t flags, int cqe,
			  int err, const char *what)
{
	struct ibv_cq_ex *cq = cq_ex(wc_flags, comp_mask, flags, cqe);
	CHECK("cq_ex", !cq && errno == err, "%s: expected errno %d", what, err);
}

/* The next completion of an extended CQ within 10 s: start_poll when
 * `started` is 0, next_poll otherwise. */
static void poll_ex(struct ibv_cq_ex *cq, int started, const char *what)
{
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	double t0 = now_s();
	for (;;) {
		int r = started ? ibv_next_poll(cq) : ibv_start_poll(cq, &pa);
		if (r == 0)
			return;
		CHECK(what, r == ENOENT, "poll returned %d", r);
		CHECK(what, now_s() - t0 < 10, "no completion in 10 s");
	}
}

static void check_cq_ex(void)
{
	struct ibv_device_attr da;
	CHECK("cq_ex", ibv_query_device(ctx, &da) == 0, "query_device");
	/* What no software device fills in honestly, as rxe refuses it. */
	cq_ex_refused(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, 0, 0, 16, EOPNOTSUPP, "timestamp");
	cq_ex_refused(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, 0, 0, 16, EOPNOTSUPP,
		      "wallclock");
	cq_ex_refused(IBV_WC_EX_WITH_CVLAN, 0, 0, 16, EOPNOTSUPP, "cvlan");
	cq_ex_refused(IBV_WC_EX_WITH_TM_INFO, 0, 0, 16, EOPNOTSUPP, "tm info");
	cq_ex_refused(0, IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN, 16,
		      EOPNOTSUPP, "ignore overrun");
	cq_ex_refused(0, IBV_CQ_INIT_ATTR_MASK_FLAGS, 1 << 5, 16, EOPNOTSUPP, "unknown flag");
	cq_ex_refused(0, IBV_CQ_INIT_ATTR_MASK_PD, 0, 16, EOPNOTSUPP, "parent domain");
	cq_ex_refused(0, 1 << 4, 0, 16, EOPNOTSUPP, "unknown comp_mask");
	cq_ex_refused(0, 0, 0, da.max_cqe + 1, EINVAL, "too many cqe");
	cq_ex_refused(0, 0, 0, 0, EINVAL, "no cqe");
	{
		struct ibv_cq_init_attr_ex a = { .cqe = 16, .comp_vector = 1 };
		errno = 0;
		CHECK("cq_ex", !ibv_create_cq_ex(ctx, &a) && errno == EINVAL, "comp_vector 1");
	}
	/* A hint that changes nothing is accepted. */
	struct ibv_cq_ex *st = cq_ex(0, IBV_CQ_INIT_ATTR_MASK_FLAGS,
				     IBV_CREATE_CQ_ATTR_SINGLE_THREADED, 16);
	CHECK("cq_ex", st, "single threaded");
	/* Only the slots of the flags asked for are filled (rxe's rule). */
	CHECK("cq_ex", st->start_poll && st->read_opcode && st->read_wc_flags &&
	      !st->read_byte_len && !st->read_imm_data && !st->read_completion_ts,
	      "slots of a CQ without wc_flags");
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	CHECK("cq_ex", ibv_start_poll(st, &pa) == ENOENT, "empty CQ start_poll");
	struct ibv_poll_cq_attr bad = { .comp_mask = 1 };
	CHECK("cq_ex", ibv_start_poll(st, &bad) == EINVAL, "start_poll comp_mask");
	CHECK("cq_ex", ibv_destroy_cq(ibv_cq_ex_to_cq(st)) == 0, "destroy");

	/* Traffic: one extended CQ per QP, with the standard flags. */
	struct ibv_cq_ex *cq[2];
	struct ibv_qp *qp[2];
	for (int i = 0; i < 2; i++) {
		cq[i] = cq_ex(IBV_WC_STANDARD_FLAGS, 0, 0, 64);
		CHECK("cq_ex", cq[i], "create with the standard flags");
		CHECK("cq_ex", cq[i]->read_byte_len && cq[i]->read_imm_data && cq[i]->read_qp_num &&
		      cq[i]->read_src_qp && cq[i]->read_slid && cq[i]->read_sl &&
		      cq[i]->read_dlid_path_bits && !cq[i]->read_completion_ts,
		      "standard slots");
		CHECK("cq_ex", cq[i]->cq_context == (void *)7 && cq[i]->cqe >= 64 &&
		      cq[i]->context == ctx, "ibv_cq fields");
		struct ibv_qp_init_attr ia = {
			.send_cq = ibv_cq_ex_to_cq(cq[i]), .recv_cq = ibv_cq_ex_to_cq(cq[i]),
			.cap = { .max_send_wr = 32, .max_recv_wr = 32,
				 .max_send_sge = 2, .max_recv_sge = 2 },
			.qp_type = IBV_QPT_RC,
		};
		qp[i] = ibv_create_qp(pd, &ia);
		CHECK("cq_ex", qp[i], "ibv_create_qp on an extended CQ");
		/* A plain QP has no ibv_wr_* API. */
		CHECK("cq_ex", ibv_qp_to_qp_ex(qp[i]) == NULL, "qp_to_qp_ex of a plain QP");
	}
	connect_qps(qp);
	char *buf = aligned_alloc(4096, 8192);
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE);
	CHECK("cq_ex", mr, "reg");
	for (int i = 0; i < 3; i++) {
		struct ibv_sge rs = { (uintptr_t)(buf + 4096 + 64 * i), 64, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 10 + i, .sg_list = &rs, .num_sge = 1 }, *rb;
		CHECK("cq_ex", ibv_post_recv(qp[1], &rw, &rb) == 0, "post_recv");
	}
	for (int i = 0; i < 3; i++) {
		sprintf(buf + 64 * i, "message %d", i);
		struct ibv_sge s = { (uintptr_t)(buf + 64 * i), 10, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 20 + i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htobe32(0xabc000 + i) }, *b;
		CHECK("cq_ex", ibv_post_send(qp[0], &w, &b) == 0, "post_send");
	}
	/* Receives: start_poll, then next_poll, each completion read by the
	 * inline readers. */
	for (int i = 0; i < 3; i++) {
		poll_ex(cq[1], i > 0, "cq_ex recv");
		CHECK("cq_ex", cq[1]->status == IBV_WC_SUCCESS && cq[1]->wr_id == 10 + i,
		      "recv %d status %d wr_id %lu", i, cq[1]->status,
		      (unsigned long)cq[1]->wr_id);
		CHECK("cq_ex", ibv_wc_read_opcode(cq[1]) == IBV_WC_RECV &&
		      ibv_wc_read_byte_len(cq[1]) == 10 &&
		      (ibv_wc_read_wc_flags(cq[1]) & IBV_WC_WITH_IMM) &&
		      be32toh(ibv_wc_read_imm_data(cq[1])) == 0xabc000 + i &&
		      ibv_wc_read_qp_num(cq[1]) == qp[1]->qp_num &&
		      ibv_wc_read_src_qp(cq[1]) == qp[0]->qp_num &&
		      ibv_wc_read_vendor_err(cq[1]) == 0 && ibv_wc_read_slid(cq[1]) == 0 &&
		      ibv_wc_read_sl(cq[1]) == 0 && ibv_wc_read_dlid_path_bits(cq[1]) == 0,
		      "recv %d fields: op %d len %u imm %x", i, ibv_wc_read_opcode(cq[1]),
		      ibv_wc_read_byte_len(cq[1]), be32toh(ibv_wc_read_imm_data(cq[1])));
		char want[16];
		sprintf(want, "message %d", i);
		CHECK("cq_ex", strcmp(buf + 4096 + 64 * i, want) == 0, "data %d", i);
	}
	/* The CQ is drained: next_poll says so, and end_poll releases it. */
	CHECK("cq_ex", ibv_next_poll(cq[1]) == ENOENT, "next_poll on a drained CQ");
	ibv_end_poll(cq[1]);
	/* Sends: the first through the extended API, the rest through
	 * ibv_poll_cq on the same CQ (one ring). */
	poll_ex(cq[0], 0, "cq_ex send");
	CHECK("cq_ex", cq[0]->status == IBV_WC_SUCCESS && cq[0]->wr_id == 20 &&
	      ibv_wc_read_opcode(cq[0]) == IBV_WC_SEND, "send completion");
	ibv_end_poll(cq[0]);
	for (int i = 1; i < 3; i++) {
		struct ibv_wc wc = wait_wc(ibv_cq_ex_to_cq(cq[0]), "cq_ex send poll_cq");
		CHECK("cq_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 20 + i, "send %d", i);
	}
	/* A failed completion: its status, through the extended API. */
	struct ibv_sge s = { (uintptr_t)buf, 8, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 99, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = { (uintptr_t)buf, mr->rkey ^ 0x5a5a } }, *b;
	CHECK("cq_ex", ibv_post_send(qp[0], &w, &b) == 0, "post bad write");
	poll_ex(cq[0], 0, "cq_ex bad write");
	CHECK("cq_ex", cq[0]->wr_id == 99 && cq[0]->status == IBV_WC_REM_ACCESS_ERR,
	      "bad write status %d", cq[0]->status);
	ibv_end_poll(cq[0]);
	/* A CQ in use by a QP stays. */
	CHECK("cq_ex", ibv_destroy_cq(ibv_cq_ex_to_cq(cq[0])) == EBUSY, "destroy in use");
	ibv_dereg_mr(mr);
	free(buf);
	for (int i = 0; i < 2; i++) {
		CHECK("cq_ex", ibv_destroy_qp(qp[i]) == 0, "destroy qp");
		CHECK("cq_ex", ibv_destroy_cq(ibv_cq_ex_to_cq(cq[i])) == 0, "destroy cq");
	}

	/* Completion events: an extended CQ on a channel, armed through
	 * ibv_cq_ex_to_cq, says it fired, then polls with the extended API. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK("cq_ex", ch, "channel");
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .cq_context = (void *)9, .channel = ch,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	struct ibv_cq_ex *ecq = ibv_create_cq_ex(ctx, &ca);
	CHECK("cq_ex", ecq && ecq->channel == ch, "create on a channel");
	struct ibv_cq *pcq[2] = { ibv_cq_ex_to_cq(ecq), ibv_create_cq(ctx, 16, NULL, NULL, 0) };
	CHECK("cq_ex", pcq[1], "plain cq");
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = pcq[i], .recv_cq = pcq[i],
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1, .max_inline_data = 16 },
			.qp_type = IBV_QPT_RC,
		};
		qp[i] = ibv_create_qp(pd, &ia);
		CHECK("cq_ex", qp[i], "qp on the channel's CQ");
	}
	connect_qps(qp);
	CHECK("cq_ex", ibv_req_notify_cq(ibv_cq_ex_to_cq(ecq), 0) == 0, "arm");
	char msg[] = "evented";
	struct ibv_sge es = { (uintptr_t)msg, 8, 0 };
	struct ibv_send_wr ew = { .wr_id = 77, .sg_list = &es, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *eb;
	/* A WRITE to a bad key: it completes (in error) without a receiver. */
	ew.wr.rdma.remote_addr = 4096;
	ew.wr.rdma.rkey = 1;
	CHECK("cq_ex", ibv_post_send(qp[0], &ew, &eb) == 0, "post");
	struct ibv_cq *evcq;
	void *evctx;
	CHECK("cq_ex", ibv_get_cq_event(ch, &evcq, &evctx) == 0 && evcq == ibv_cq_ex_to_cq(ecq) &&
	      evctx == (void *)9, "the event names the extended CQ");
	ibv_ack_cq_events(evcq, 1);
	poll_ex(ecq, 0, "cq_ex evented");
	CHECK("cq_ex", ecq->wr_id == 77 && ecq->status == IBV_WC_REM_ACCESS_ERR,
	      "evented completion %d", ecq->status);
	ibv_end_poll(ecq);
	for (int i = 0; i < 2; i++) {
		CHECK("cq_ex", ibv_destroy_qp(qp[i]) == 0, "destroy qp");
		CHECK("cq_ex", ibv_destroy_cq(pcq[i]) == 0, "destroy cq");
	}
	CHECK("cq_ex", ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	printf("ok cq_ex\n");
}

/* ibv_create_qp_ex with these attributes. */
static struct ibv_qp *qp_ex(struct ibv_cq *cq, uint32_t comp_mask, uint64_t ops, int type,
			    uint32_t create_flags)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 32 },
		.qp_type = type, .comp_mask = comp_mask, .pd = pd,
		.create_flags = create_flags, .send_ops_flags = ops,
	};
	errno = 0;
	return ibv_create_qp_ex(ctx, &a);
}

static void qp_ex_refused(struct ibv_cq *cq, uint32_t comp_mask, uint64_t ops, int type,
			  uint32_t create_flags, int err, const char *what)
{
	struct ibv_qp *qp = qp_ex(cq, comp_mask, ops, type, create_flags);
	CHECK("qp_ex", !qp && errno == err, "%s: expected errno %d", what, err);
}

#define PD_OPS (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)

static void check_qp_ex(void)
{
	struct ibv_cq *cq[2];
	for (int i = 0; i < 2; i++) {
		cq[i] = ibv_create_cq(ctx, 64, NULL, NULL, 0);
		CHECK("qp_ex", cq[i], "create cq");
	}
	/* Refusals, as rxe's check_qp_init_attr (and what ndverbs lacks). */
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_BIND_MW, IBV_QPT_RC, 0, EOPNOTSUPP,
		      "bind mw");
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_LOCAL_INV, IBV_QPT_RC, 0, EOPNOTSUPP,
		      "local inv");
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_QPT_RC, 0, EOPNOTSUPP,
		      "atomic write");
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_TSO, IBV_QPT_RC, 0, EOPNOTSUPP, "tso");
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_SEND, IBV_QPT_UC, 0, EOPNOTSUPP, "UC");
	/* UD QPs send SENDs only (rxe's set). */
	qp_ex_refused(cq[0], PD_OPS, IBV_QP_EX_WITH_RDMA_WRITE, IBV_QPT_UD, 0, EOPNOTSUPP,
		      "UD write");
	qp_ex_refused(cq[0], PD_OPS | IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_EX_WITH_SEND,
		      IBV_QPT_RC, IBV_QP_CREATE_SCATTER_FCS, EOPNOTSUPP, "create flags");
	qp_ex_refused(cq[0], PD_OPS | IBV_QP_INIT_ATTR_XRCD, IBV_QP_EX_WITH_SEND, IBV_QPT_RC,
		      0, EOPNOTSUPP, "xrcd");
	qp_ex_refused(cq[0], IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_EX_WITH_SEND, IBV_QPT_RC,
		      0, EINVAL, "no pd");
	qp_ex_refused(NULL, PD_OPS, IBV_QP_EX_WITH_SEND, IBV_QPT_RC, 0, EINVAL, "no cq");

	/* qp[0] posts everything the engine has; qp[1] only SEND (for the
	 * refused-operation checks) and receives. */
	uint64_t all = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
		       IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct ibv_qp *qp[2] = {
		qp_ex(cq[0], PD_OPS | IBV_QP_INIT_ATTR_CREATE_FLAGS, all, IBV_QPT_RC, 0),
		qp_ex(cq[1], PD_OPS, IBV_QP_EX_WITH_SEND, IBV_QPT_RC, 0),
	};
	CHECK("qp_ex", qp[0] && qp[1], "ibv_create_qp_ex");
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp[0]);
	struct ibv_qp_ex *x1 = ibv_qp_to_qp_ex(qp[1]);
	CHECK("qp_ex", x && (void *)x == (void *)qp[0] && x1, "ibv_qp_to_qp_ex");
	connect_qps(qp);
	uint64_t *mem = aligned_alloc(4096, 16384);
	memset(mem, 0, 16384);
	char *c = (char *)mem;
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 16384, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK("qp_ex", mr, "reg");
	for (int i = 0; i < 6; i++) {
		struct ibv_sge rs = { (uintptr_t)(c + 8192 + 128 * i), 128, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &rs, .num_sge = 1 }, *rb;
		CHECK("qp_ex", ibv_post_recv(qp[1], &rw, &rb) == 0, "post_recv");
	}
	struct ibv_wc wc;

	/* SEND with immediate from one SGE and an inline SEND, one batch. */
	strcpy(c, "from an sge");
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htobe32(0x1234));
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)c, 12);
	char tmp[32] = "inline bytes";
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, tmp, 13);
	memset(tmp, 0, sizeof tmp); /* copied when set */
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete send batch");
	wc = wait_wc(cq[1], "qp_ex recv 1");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 && wc.byte_len == 12 &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x1234 &&
	      strcmp(c + 8192, "from an sge") == 0, "send imm: status %d len %u",
	      wc.status, wc.byte_len);
	wc = wait_wc(cq[1], "qp_ex recv 2");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 101 && wc.byte_len == 13 &&
	      strcmp(c + 8192 + 128, "inline bytes") == 0, "inline send");
	for (int i = 1; i <= 2; i++) {
		wc = wait_wc(cq[0], "qp_ex send");
		CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i &&
		      wc.opcode == IBV_WC_SEND, "send completion %d", i);
	}
	/* Inline data from a list, and a SEND from an SGE list of two. */
	char p1[] = "in", p2[] = "line ", p3[] = "list";
	struct ibv_data_buf bufs[3] = { { p1, 2 }, { p2, 5 }, { p3, 5 } };
	strcpy(c + 256, "two ");
	strcpy(c + 512, "sges");
	struct ibv_sge two[2] = { { (uintptr_t)(c + 256), 4, mr->lkey },
				  { (uintptr_t)(c + 512), 5, mr->lkey } };
	ibv_wr_start(x);
	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 3, bufs);
	x->wr_id = 4;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, two);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete list batch");
	wc = wait_wc(cq[1], "qp_ex recv 3");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.byte_len == 12 &&
	      strcmp(c + 8192 + 256, "inline list") == 0, "inline list: %u '%s'", wc.byte_len,
	      c + 8192 + 256);
	wc = wait_wc(cq[1], "qp_ex recv 4");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.byte_len == 9 &&
	      strcmp(c + 8192 + 384, "two sges") == 0, "sge list");
	wait_wc(cq[0], "qp_ex send 3");
	wait_wc(cq[0], "qp_ex send 4");

	/* RDMA WRITE, WRITE with immediate (consumes a receive), READ back. */
	strcpy(c + 1024, "written remotely");
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)(c + 6000));
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(c + 1024), 17);
	x->wr_id = 6;
	ibv_wr_rdma_write_imm(x, mr->rkey, (uintptr_t)(c + 7000), htobe32(77));
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(c + 1024), 8);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete write batch");
	wc = wait_wc(cq[0], "qp_ex write");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 5 &&
	      wc.opcode == IBV_WC_RDMA_WRITE && strcmp(c + 6000, "written remotely") == 0,
	      "write");
	wc = wait_wc(cq[0], "qp_ex write imm");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 6, "write imm");
	wc = wait_wc(cq[1], "qp_ex recv write imm");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      be32toh(wc.imm_data) == 77 && memcmp(c + 7000, "written ", 8) == 0,
	      "write imm at the responder: op %d", wc.opcode);
	ibv_wr_start(x);
	x->wr_id = 7;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, mr->rkey, (uintptr_t)(c + 6000));
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(c + 1536), 17);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete read");
	wc = wait_wc(cq[0], "qp_ex read");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
	      wc.byte_len == 17 && strcmp(c + 1536, "written remotely") == 0, "read");

	/* Atomics on mem[1000]. */
	mem[1000] = 40;
	ibv_wr_start(x);
	x->wr_id = 8;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, mr->rkey, (uintptr_t)&mem[1000], 2);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)&mem[10], 8);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete fetch add");
	wc = wait_wc(cq[0], "qp_ex fetch add");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
	      mem[10] == 40 && mem[1000] == 42, "fetch add %lu %lu", mem[10], mem[1000]);
	ibv_wr_start(x);
	x->wr_id = 9;
	ibv_wr_atomic_cmp_swp(x, mr->rkey, (uintptr_t)&mem[1000], 42, 7);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)&mem[11], 8);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete cmp swp");
	wc = wait_wc(cq[0], "qp_ex cmp swp");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
	      mem[11] == 42 && mem[1000] == 7, "cmp swp");

	/* Unsignaled: posted, no completion (sq_sig_all is 0). */
	ibv_wr_start(x);
	x->wr_id = 10;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)(c + 6100));
	ibv_wr_set_inline_data(x, "quiet", 6);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete unsignaled");
	expect_none(cq[0], "qp_ex unsignaled");
	CHECK("qp_ex", strcmp(c + 6100, "quiet") == 0, "unsignaled write landed");

	/* Mistakes: ibv_wr_complete returns them and posts nothing. */
	ibv_wr_start(x1);
	x1->wr_id = 50;
	x1->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x1, mr->rkey, (uintptr_t)(c + 6200)); /* not created for it */
	ibv_wr_set_sge(x1, mr->lkey, (uintptr_t)c, 4);
	CHECK("qp_ex", ibv_wr_complete(x1) == EOPNOTSUPP, "operation not asked for");
	ibv_wr_start(x);
	x->wr_id = 51;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	char big[64] = { 0 };
	ibv_wr_set_inline_data(x, big, 33); /* max_inline_data is 32 */
	CHECK("qp_ex", ibv_wr_complete(x) == ENOSPC, "inline too large");
	struct ibv_sge three[3] = { two[0], two[1], two[0] };
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 3, three); /* max_send_sge is 2 */
	CHECK("qp_ex", ibv_wr_complete(x) == ENOSPC, "too many sges");
	ibv_wr_start(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)c, 4); /* no request to set */
	CHECK("qp_ex", ibv_wr_complete(x) == EINVAL, "setter before a builder");
	ibv_wr_start(x);
	for (int i = 0; i < 9; i++) /* max_send_wr is 8 */
		ibv_wr_send(x);
	CHECK("qp_ex", ibv_wr_complete(x) == ENOSPC, "more than the send queue");
	ibv_wr_start(x);
	x->wr_flags = 1 << 20;
	ibv_wr_send(x);
	CHECK("qp_ex", ibv_wr_complete(x) == EINVAL, "unknown wr_flags");
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, NULL, 0, NULL);
	CHECK("qp_ex", ibv_wr_complete(x) == EOPNOTSUPP, "bind mw");
	/* Abort drops the batch. */
	ibv_wr_start(x);
	x->wr_id = 52;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)c, 4);
	ibv_wr_abort(x);
	CHECK("qp_ex", ibv_wr_complete(x) == EINVAL, "complete without start");
	expect_none(cq[0], "qp_ex refused and aborted");
	expect_none(cq[1], "qp_ex refused and aborted (peer)");
	/* The QP still works after all that. */
	ibv_wr_start(x);
	x->wr_id = 53;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "after", 6);
	CHECK("qp_ex", ibv_wr_complete(x) == 0, "complete after mistakes");
	wc = wait_wc(cq[0], "qp_ex after");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.wr_id == 53, "send after mistakes");
	wc = wait_wc(cq[1], "qp_ex after recv");
	CHECK("qp_ex", wc.status == IBV_WC_SUCCESS && wc.byte_len == 6, "recv after mistakes");

	/* The engine's own checks run at ibv_wr_complete: an atomic of 4 bytes. */
	ibv_wr_start(x);
	ibv_wr_atomic_fetch_add(x, mr->rkey, (uintptr_t)&mem[1000], 1);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)&mem[12], 4);
	CHECK("qp_ex", ibv_wr_complete(x) == EINVAL, "atomic of 4 bytes");

	for (int i = 0; i < 2; i++) {
		CHECK("qp_ex", ibv_destroy_qp(qp[i]) == 0, "destroy qp");
		CHECK("qp_ex", ibv_destroy_cq(cq[i]) == 0, "destroy cq");
	}
	ibv_dereg_mr(mr);
	free(mem);
	printf("ok qp_ex\n");
}

/* Several threads posting batches to one extended QP and polling one
 * extended CQ: every request completes once, seen by exactly one poller. */
#define T_POSTERS 2
#define T_BATCHES 100
#define T_PER_BATCH 2
#define T_TOTAL (T_POSTERS * T_BATCHES * T_PER_BATCH)

static struct ibv_qp_ex *t_qpx;
static struct ibv_cq_ex *t_cq;
static struct ibv_mr *t_mr;
static char *t_buf;
static int t_seen[T_TOTAL];
static int t_done;

static void *t_post(void *arg)
{
	int who = (int)(uintptr_t)arg;
	for (int b = 0; b < T_BATCHES; b++) {
		ibv_wr_start(t_qpx);
		for (int k = 0; k < T_PER_BATCH; k++) {
			int id = (who * T_BATCHES + b) * T_PER_BATCH + k;
			t_qpx->wr_id = id;
			t_qpx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(t_qpx, t_mr->rkey, (uintptr_t)(t_buf + 8 * (id % 512)));
			ibv_wr_set_inline_data(t_qpx, &id, sizeof id);
		}
		int r = ibv_wr_complete(t_qpx);
		CHECK("threads", r == 0, "wr_complete %d", r);
	}
	return NULL;
}

static void *t_poll(void *arg)
{
	(void)arg;
	struct ibv_poll_cq_attr pa = { 0 };
	double t0 = now_s();
	while (__atomic_load_n(&t_done, __ATOMIC_SEQ_CST) < T_TOTAL) {
		CHECK("threads", now_s() - t0 < 20, "only %d completions in 20 s", t_done);
		if (ibv_start_poll(t_cq, &pa) != 0)
			continue;
		int r = 0;
		while (r == 0) {
			uint64_t id = t_cq->wr_id;
			CHECK("threads", t_cq->status == IBV_WC_SUCCESS && id < T_TOTAL &&
			      ibv_wc_read_opcode(t_cq) == IBV_WC_RDMA_WRITE,
			      "completion %lu status %d", (unsigned long)id, t_cq->status);
			__atomic_fetch_add(&t_seen[id], 1, __ATOMIC_SEQ_CST);
			__atomic_fetch_add(&t_done, 1, __ATOMIC_SEQ_CST);
			r = ibv_next_poll(t_cq);
		}
		CHECK("threads", r == ENOENT, "next_poll %d", r);
		ibv_end_poll(t_cq);
	}
	return NULL;
}

static void check_threads(void)
{
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	t_cq = cq_ex(IBV_WC_STANDARD_FLAGS, 0, 0, 2 * T_TOTAL);
	CHECK("threads", rcq && t_cq, "cqs");
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(t_cq), .recv_cq = rcq,
		.cap = { .max_send_wr = T_TOTAL, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 16 },
		.qp_type = IBV_QPT_RC, .comp_mask = PD_OPS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qp[2];
	qp[0] = ibv_create_qp_ex(ctx, &a);
	a.send_cq = rcq;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	qp[1] = ibv_create_qp_ex(ctx, &a);
	CHECK("threads", qp[0] && qp[1], "qps");
	t_qpx = ibv_qp_to_qp_ex(qp[0]);
	connect_qps(qp);
	t_buf = aligned_alloc(4096, 4096);
	t_mr = ibv_reg_mr(pd, t_buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK("threads", t_mr, "reg");
	pthread_t th[2 * T_POSTERS];
	for (int i = 0; i < T_POSTERS; i++) {
		pthread_create(&th[i], NULL, t_post, (void *)(uintptr_t)i);
		pthread_create(&th[T_POSTERS + i], NULL, t_poll, NULL);
	}
	for (int i = 0; i < 2 * T_POSTERS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < T_TOTAL; i++)
		CHECK("threads", t_seen[i] == 1, "request %d completed %d times", i, t_seen[i]);
	CHECK("threads", t_done == T_TOTAL, "%d completions", t_done);
	for (int i = 0; i < 2; i++)
		CHECK("threads", ibv_destroy_qp(qp[i]) == 0, "destroy qp");
	CHECK("threads", ibv_destroy_cq(ibv_cq_ex_to_cq(t_cq)) == 0 && ibv_destroy_cq(rcq) == 0,
	      "destroy cqs");
	ibv_dereg_mr(t_mr);
	printf("ok threads\n");
}

/* A connected pair of plain RC QPs on one new CQ each. */
static void new_pair(struct ibv_cq *cq[2], struct ibv_qp *qp[2])
{
	for (int i = 0; i < 2; i++) {
		cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK("pair", cq[i], "create cq");
		struct ibv_qp_init_attr ia = {
			.send_cq = cq[i], .recv_cq = cq[i],
			.cap = { .max_send_wr = 8, .max_recv_wr = 8,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		qp[i] = ibv_create_qp(pd, &ia);
		CHECK("pair", qp[i], "create qp");
	}
	connect_qps(qp);
}

static void free_pair(struct ibv_cq *cq[2], struct ibv_qp *qp[2])
{
	for (int i = 0; i < 2; i++) {
		CHECK("pair", ibv_destroy_qp(qp[i]) == 0, "destroy qp");
		CHECK("pair", ibv_destroy_cq(cq[i]) == 0, "destroy cq");
	}
}

/* An RDMA WRITE of `len` bytes from src (lkey) to raddr/rkey; the status. */
static int write_status(struct ibv_qp *qp, struct ibv_cq *cq, void *src, uint32_t lkey,
			void *raddr, uint32_t rkey, uint32_t len)
{
	struct ibv_sge s = { (uintptr_t)src, len, lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = { (uintptr_t)raddr, rkey } }, *b;
	CHECK("write", ibv_post_send(qp, &w, &b) == 0, "post write");
	return wait_wc(cq, "write").status;
}

static void check_rereg(void)
{
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	new_pair(cq, qp);
	char *src = aligned_alloc(4096, 4096), *b1 = aligned_alloc(4096, 4096),
	     *b2 = aligned_alloc(4096, 4096);
	memset(b1, 0, 4096);
	memset(b2, 0, 4096);
	strcpy(src, "rereg payload");
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, b1, 4096, rw);
	CHECK("rereg", smr && mr, "reg");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;

	/* rdma-core's input checks: -1 (IBV_REREG_MR_ERR_INPUT), EINVAL. */
	errno = 0;
	CHECK("rereg", ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "unknown flag");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2, 0, 0) ==
	      IBV_REREG_MR_ERR_INPUT, "translation without length");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, rw) ==
	      IBV_REREG_MR_ERR_INPUT, "access without its flag");
	CHECK("rereg", ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw) ==
	      IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "NULL region");
	/* The kernel's: -4 (IBV_REREG_MR_ERR_CMD) with its errno. */
	errno = 0;
	CHECK("rereg", ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL, "no flag");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, (struct ibv_pd *)src, NULL, 0,
				    0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "not a PD");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				    IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL, "remote write without local write");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				    IBV_ACCESS_ON_DEMAND) == IBV_REREG_MR_ERR_CMD &&
	      errno == EOPNOTSUPP, "on demand");
	/* Refused calls changed nothing: same keys, still writable remotely. */
	CHECK("rereg", mr->lkey == lkey && mr->rkey == rkey && mr->addr == b1 && mr->pd == pd,
	      "refusals changed the region");
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b1, mr->rkey, 14) ==
	      IBV_WC_SUCCESS && strcmp(b1, "rereg payload") == 0, "write before");

	/* New translation: the region is b2 now, under the same keys (a peer
	 * keeps the R_Key it has, as with rxe). */
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2, 4096, 0) == 0,
	      "translation");
	CHECK("rereg", mr->addr == b2 && mr->length == 4096 && mr->rkey == rkey &&
	      mr->lkey == lkey, "new struct");
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b2 + 100, mr->rkey, 14) ==
	      IBV_WC_SUCCESS && strcmp(b2 + 100, "rereg payload") == 0, "write to b2");
	/* The old memory is out of the region. */
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b1, rkey, 14) ==
	      IBV_WC_REM_ACCESS_ERR, "old address");
	free_pair(cq, qp);

	/* Another PD: the region is in use there, and out of reach of QPs in
	 * the first. */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK("rereg", pd2, "alloc pd");
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "pd");
	CHECK("rereg", mr->pd == pd2 && mr->addr == b2, "pd in struct");
	CHECK("rereg", ibv_dealloc_pd(pd2) == EBUSY, "dealloc pd2 in use");
	new_pair(cq, qp);
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b2, mr->rkey, 14) ==
	      IBV_WC_REM_ACCESS_ERR, "write into a region of another PD");
	free_pair(cq, qp);

	/* Back to the first PD, without remote write. */
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd,
				    NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0, "pd and access");
	CHECK("rereg", ibv_dealloc_pd(pd2) == 0, "dealloc pd2 unused");
	new_pair(cq, qp);
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b2, mr->rkey, 14) ==
	      IBV_WC_REM_ACCESS_ERR, "write without the right");
	free_pair(cq, qp);
	/* And with it again. */
	CHECK("rereg", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw) == 0,
	      "access back");
	new_pair(cq, qp);
	memset(b2, 0, 4096);
	CHECK("rereg", write_status(qp[0], cq[0], src, smr->lkey, b2, mr->rkey, 14) ==
	      IBV_WC_SUCCESS && strcmp(b2, "rereg payload") == 0, "write with the right back");
	free_pair(cq, qp);
	CHECK("rereg", ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(smr) == 0, "dereg");
	printf("ok rereg\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CHECK\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	open_first();
	if (strcmp(argv[1], "cq_ex") == 0)
		check_cq_ex();
	else if (strcmp(argv[1], "qp_ex") == 0)
		check_qp_ex();
	else if (strcmp(argv[1], "rereg") == 0)
		check_rereg();
	else if (strcmp(argv[1], "threads") == 0)
		check_threads();
	else
		return 2;
	return 0;
}
