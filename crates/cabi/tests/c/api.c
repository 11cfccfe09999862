/*
 * Exercises the libibverbs C API the way applications use it, built against
 * rdma-core's headers and run with ndverbs' libibverbs.so.1 first on the
 * library path. One device (ndv0), QPs connected to each other in this
 * process. Each check prints "ok NAME" or "FAIL NAME: why" and the program
 * exits non-zero on the first failure.
 *
 *   api CHECK      CHECK: devices, errors, mr, channel, loop, srq, unmapped,
 *                  drain, idle
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
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

/* One completion from cq within 10 s. */
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

struct pair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
};

/* Two RC QPs of this process connected to each other (RESET..RTS). */
static struct pair connect_pair(struct ibv_srq *srq, struct ibv_comp_channel *ch)
{
	struct pair p;
	union ibv_gid gid;
	CHECK("connect", ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	for (int i = 0; i < 2; i++) {
		p.cq[i] = ibv_create_cq(ctx, 64, (void *)(uintptr_t)(100 + i), ch, 0);
		CHECK("connect", p.cq[i], "ibv_create_cq");
		struct ibv_qp_init_attr ia = {
			.send_cq = p.cq[i],
			.recv_cq = p.cq[i],
			.srq = i == 1 ? srq : NULL,
			.cap = { .max_send_wr = 32, .max_recv_wr = 32,
				 .max_send_sge = 2, .max_recv_sge = 2,
				 .max_inline_data = 64 },
			.qp_type = IBV_QPT_RC,
		};
		p.qp[i] = ibv_create_qp(pd, &ia);
		CHECK("connect", p.qp[i], "ibv_create_qp");
		CHECK("connect", ia.cap.max_send_wr >= 32 && ia.cap.max_inline_data >= 64,
		      "caps not written back");
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_ATOMIC,
		};
		CHECK("connect", ibv_modify_qp(p.qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
		CHECK("connect", p.qp[i]->state == IBV_QPS_INIT, "qp->state not mirrored");
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
			.dest_qp_num = p.qp[1 - i]->qp_num, .rq_psn = 7,
			.max_dest_rd_atomic = 4, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 64 } },
		};
		/* UCX's RoCE address vectors set every bit of the flow label
		 * (~0 for path 0); the kernel keeps the header's 20 bits. */
		if (i == 1)
			a.ah_attr.grh.flow_label = 0xffffffff;
		CHECK("connect", ibv_modify_qp(p.qp[i], &a, IBV_QP_STATE | IBV_QP_AV |
					       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
		      "to RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 7;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		CHECK("connect", ibv_modify_qp(p.qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					       IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					       IBV_QP_MAX_QP_RD_ATOMIC) == 0, "to RTS");
	}
	return p;
}

static void check_devices(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK("devices", list && n >= 1 && list[n] == NULL, "list of %d", n);
	const char *name = ibv_get_device_name(list[0]);
	CHECK("devices", name && strncmp(name, "ndv", 3) == 0, "name %s", name);
	CHECK("devices", list[0]->transport_type == IBV_TRANSPORT_IB &&
	      list[0]->node_type == IBV_NODE_CA, "types");
	CHECK("devices", ibv_get_device_guid(list[0]) != 0, "guid");
	struct ibv_context *c1 = ibv_open_device(list[0]);
	struct ibv_context *c2 = ibv_open_device(list[0]);
	CHECK("devices", c1 && c2 && c1 != c2, "two contexts on one device");
	CHECK("devices", c1->async_fd >= 0 && c1->num_comp_vectors >= 1, "context fields");
	struct ibv_device_attr da;
	CHECK("devices", ibv_query_device(c1, &da) == 0 && da.phys_port_cnt == 1 &&
	      da.max_qp_rd_atom >= 1 && da.vendor_id == 0xffffff, "query_device");
	struct ibv_device_attr_ex dx;
	CHECK("devices", ibv_query_device_ex(c1, NULL, &dx) == 0 &&
	      dx.orig_attr.max_cqe == da.max_cqe && dx.odp_caps.general_caps == 0 &&
	      dx.phys_port_cnt_ex == da.phys_port_cnt,
	      "query_device_ex (phys_port_cnt_ex as phys_port_cnt below 256 ports)");
	struct ibv_port_attr pa;
	memset(&pa, 0xff, sizeof pa);
	CHECK("devices", ibv_query_port(c1, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
	      pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len == 1 &&
	      pa.pkey_tbl_len == 1 && pa.port_cap_flags2 == 0, "query_port");
	CHECK("devices", ibv_query_port(c1, 2, &pa) == EINVAL, "port 2");
	union ibv_gid gid;
	CHECK("devices", ibv_query_gid(c1, 1, 0, &gid) == 0 && gid.raw[10] == 0xff, "gid");
	CHECK("devices", ibv_query_gid(c1, 1, 1, &gid) == -1, "gid 1");
	struct ibv_gid_entry ge;
	CHECK("devices", ibv_query_gid_ex(c1, 1, 0, &ge, 0) == 0 &&
	      ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.ndev_ifindex != 0, "gid_ex");
	__be16 pkey;
	CHECK("devices", ibv_query_pkey(c1, 1, 0, &pkey) == 0 && pkey == 0xffff, "pkey");
	/* The extended context: verbs_get_ctx finds it and sz covers it. */
	CHECK("devices", verbs_get_ctx(c1) && verbs_get_ctx(c1)->sz == sizeof(struct verbs_context),
	      "verbs_context");
	CHECK("devices", ibv_close_device(c2) == 0 && ibv_close_device(c1) == 0, "close");
	ibv_free_device_list(list);
	printf("ok devices\n");
}

static void check_errors(void)
{
	char junk[512] = { 0 };
	errno = 0;
	CHECK("errors", ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "alloc_pd(NULL)");
	errno = 0;
	CHECK("errors", ibv_alloc_pd((struct ibv_context *)junk) == NULL && errno == EINVAL,
	      "alloc_pd(foreign)");
	CHECK("errors", ibv_dealloc_pd((struct ibv_pd *)junk) == EINVAL, "dealloc_pd(foreign)");
	CHECK("errors", ibv_destroy_cq(NULL) == EINVAL, "destroy_cq(NULL)");
	CHECK("errors", ibv_destroy_qp((struct ibv_qp *)junk) == EINVAL, "destroy_qp(foreign)");
	CHECK("errors", ibv_dereg_mr((struct ibv_mr *)junk) == EINVAL, "dereg_mr(foreign)");
	errno = 0;
	CHECK("errors", ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL, "cqe 0");
	CHECK("errors", ibv_create_cq(ctx, 4, NULL, NULL, 1) == NULL && errno == EINVAL,
	      "comp_vector 1");
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	errno = 0;
	CHECK("errors", ibv_create_qp(pd, &ia) == NULL && errno == EOPNOTSUPP, "UC QP");
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = (struct ibv_cq *)junk;
	CHECK("errors", ibv_create_qp(pd, &ia) == NULL && errno == EINVAL, "foreign CQ");
	ia.send_cq = cq;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK("errors", qp, "create_qp");
	/* RESET -> RTR is not a transition; a QP in RESET refuses posts. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	CHECK("errors", ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RESET->RTR");
	CHECK("errors", ibv_modify_qp(qp, &a, 1 << 30) == EINVAL, "unknown mask bit");
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK("errors", ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post in RESET");
	wr.opcode = 77;
	bad = NULL;
	CHECK("errors", ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "bad opcode");
	/* An object in use cannot go. */
	CHECK("errors", ibv_destroy_cq(cq) == EBUSY, "CQ in use");
	CHECK("errors", ibv_dealloc_pd(pd) == EBUSY, "PD in use");
	CHECK("errors", ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "cleanup");
	CHECK("errors", ibv_destroy_qp(qp) == EINVAL, "destroyed twice");
	CHECK("errors", ibv_qp_to_qp_ex(qp) == NULL, "qp_to_qp_ex");
	errno = 0;
	CHECK("errors", ibv_alloc_mw(pd, IBV_MW_TYPE_2) == NULL && errno == EOPNOTSUPP, "alloc_mw");
	printf("ok errors\n");
}

static void check_mr(void)
{
	static char data[8192];
	char stack[256];
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
	void *heap = malloc(100000);
	void *map = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *bufs[] = { data, stack, heap, map };
	size_t lens[] = { sizeof data, sizeof stack, 100000, 1 << 20 };
	for (int i = 0; i < 4; i++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, bufs[i], lens[i], all);
		CHECK("mr", mr && mr->addr == bufs[i] && mr->length == lens[i] &&
		      mr->lkey && mr->rkey && mr->pd == pd && mr->context == ctx, "reg %d", i);
		CHECK("mr", ibv_dereg_mr(mr) == 0, "dereg %d", i);
	}
	/* The full access-flag set, through reg_mr_iova2 with relaxed ordering. */
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, map, 4096, (uintptr_t)map,
					     all | IBV_ACCESS_RELAXED_ORDERING);
	CHECK("mr", mr, "reg_mr_iova2");
	ibv_dereg_mr(mr);
	errno = 0;
	CHECK("mr", !ibv_reg_mr(pd, map, 0, 0) && errno == EINVAL, "zero length");
	errno = 0;
	CHECK("mr", !ibv_reg_mr(pd, map, 4096, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "remote write without local write");
	errno = 0;
	CHECK("mr", !ibv_reg_mr(pd, map, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) &&
	      errno == EOPNOTSUPP, "on demand");
	errno = 0;
	CHECK("mr", !ibv_reg_mr(pd, (void *)16, 4096, 0) && errno == EFAULT, "unmapped");
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK("mr", (mr = ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_REMOTE_READ)), "read-only, read");
	ibv_dereg_mr(mr);
	errno = 0;
	CHECK("mr", !ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "read-only, write");
	errno = 0;
	CHECK("mr", !ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, 0) && errno == EOPNOTSUPP, "dmabuf");
	free(heap);
	printf("ok mr\n");
}

/* One channel for two CQs: events say which CQ fired, the descriptor polls,
 * goes non-blocking, and destroy waits for acknowledgements. */
static void check_channel(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK("channel", ch && ch->fd >= 0 && ch->context == ctx, "create");
	struct pair p = connect_pair(NULL, ch);
	CHECK("channel", ch->refcnt == 2, "refcnt %d", ch->refcnt);
	CHECK("channel", ibv_destroy_comp_channel(ch) == EBUSY, "busy");
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 2; i++)
			CHECK("channel", ibv_req_notify_cq(p.cq[i], 0) == 0, "arm");
		struct ibv_sge sge = { (uintptr_t)buf, 16, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *rbad;
		CHECK("channel", ibv_post_recv(p.qp[1], &rw, &rbad) == 0, "post_recv");
		struct ibv_send_wr sw = { .wr_id = 8, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		CHECK("channel", ibv_post_send(p.qp[0], &sw, &sbad) == 0, "post_send");
		/* Both CQs fire: one event each, which one told by the channel. */
		int seen[2] = { 0, 0 };
		for (int k = 0; k < 2; k++) {
			struct pollfd pfd = { ch->fd, POLLIN, 0 };
			CHECK("channel", poll(&pfd, 1, 10000) == 1, "poll readable");
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			CHECK("channel", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "get_cq_event");
			int i = ev_cq == p.cq[0] ? 0 : ev_cq == p.cq[1] ? 1 : -1;
			CHECK("channel", i >= 0 && ev_ctx == (void *)(uintptr_t)(100 + i),
			      "which CQ");
			seen[i]++;
			ibv_ack_cq_events(ev_cq, 1);
			struct ibv_wc wc = wait_wc(ev_cq, "channel");
			CHECK("channel", wc.status == IBV_WC_SUCCESS, "status %d", wc.status);
		}
		CHECK("channel", seen[0] == 1 && seen[1] == 1, "one event per CQ");
	}
	/* Nothing armed, nothing pending: non-blocking get fails with EAGAIN. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	CHECK("channel", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "EAGAIN");
	/* The async descriptor polls and goes non-blocking too. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ae;
	errno = 0;
	CHECK("channel", ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, "async EAGAIN");
	for (int i = 0; i < 2; i++)
		CHECK("channel", ibv_destroy_qp(p.qp[i]) == 0 && ibv_destroy_cq(p.cq[i]) == 0,
		      "destroy");
	CHECK("channel", ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	ibv_dereg_mr(mr);
	free(buf);
	printf("ok channel\n");
}

/* SEND with immediate, inline SEND, WRITE, READ and both atomics between two
 * QPs; completions and memory checked. */
static void check_loop(void)
{
	struct pair p = connect_pair(NULL, NULL);
	uint64_t *mem = aligned_alloc(4096, 8192);
	memset(mem, 0, 8192);
	char *c = (char *)mem;
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 8192, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK("loop", mr, "reg");
	struct ibv_sge rsge = { (uintptr_t)(c + 4096), 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK("loop", ibv_post_recv(p.qp[1], &rw, &rbad) == 0, "post_recv");
	strcpy(c, "hello over ndverbs");
	struct ibv_sge sge = { (uintptr_t)c, 19, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htobe32(0x12345678) }, *sbad;
	CHECK("loop", ibv_post_send(p.qp[0], &sw, &sbad) == 0, "post SEND_WITH_IMM");
	struct ibv_wc wc = wait_wc(p.cq[1], "loop recv");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 1 &&
	      wc.byte_len == 19 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      be32toh(wc.imm_data) == 0x12345678 && wc.qp_num == p.qp[1]->qp_num &&
	      wc.src_qp == p.qp[0]->qp_num, "recv wc status %d op %d len %u imm %x", wc.status,
	      wc.opcode, wc.byte_len, be32toh(wc.imm_data));
	CHECK("loop", strcmp(c + 4096, "hello over ndverbs") == 0, "received data");
	wc = wait_wc(p.cq[0], "loop send");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 2,
	      "send wc");
	/* Inline: the buffer is free once the post returns. */
	char tmp[32] = "inline bytes";
	struct ibv_sge isge = { (uintptr_t)tmp, 13, 0 };
	CHECK("loop", ibv_post_recv(p.qp[1], &rw, &rbad) == 0, "post_recv 2");
	struct ibv_send_wr iw = { .wr_id = 3, .sg_list = &isge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	CHECK("loop", ibv_post_send(p.qp[0], &iw, &sbad) == 0, "post inline");
	memset(tmp, 0, sizeof tmp);
	wc = wait_wc(p.cq[1], "loop inline recv");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && strcmp(c + 4096, "inline bytes") == 0,
	      "inline data");
	wait_wc(p.cq[0], "loop inline send");
	/* WRITE then READ back. */
	strcpy(c + 128, "written remotely");
	struct ibv_sge wsge = { (uintptr_t)(c + 128), 17, mr->lkey };
	struct ibv_send_wr ww = { .wr_id = 4, .sg_list = &wsge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { (uintptr_t)(c + 6000), mr->rkey } };
	CHECK("loop", ibv_post_send(p.qp[0], &ww, &sbad) == 0, "post WRITE");
	wc = wait_wc(p.cq[0], "loop write");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE &&
	      strcmp(c + 6000, "written remotely") == 0, "write");
	struct ibv_sge gsge = { (uintptr_t)(c + 256), 17, mr->lkey };
	struct ibv_send_wr rr = { .wr_id = 5, .sg_list = &gsge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { (uintptr_t)(c + 6000), mr->rkey } };
	CHECK("loop", ibv_post_send(p.qp[0], &rr, &sbad) == 0, "post READ");
	wc = wait_wc(p.cq[0], "loop read");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
	      wc.byte_len == 17 && strcmp(c + 256, "written remotely") == 0, "read");
	/* Atomics on mem[1000]. */
	mem[1000] = 40;
	struct ibv_sge asge = { (uintptr_t)&mem[10], 8, mr->lkey };
	struct ibv_send_wr fa = { .wr_id = 6, .sg_list = &asge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.atomic = { (uintptr_t)&mem[1000], 2, 0, mr->rkey } };
	CHECK("loop", ibv_post_send(p.qp[0], &fa, &sbad) == 0, "post FETCH_ADD");
	wc = wait_wc(p.cq[0], "loop fetch add");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
	      mem[10] == 40 && mem[1000] == 42, "fetch add: %lu %lu", mem[10], mem[1000]);
	struct ibv_send_wr cs = fa;
	cs.wr_id = 7;
	cs.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	cs.wr.atomic.compare_add = 42;
	cs.wr.atomic.swap = 7;
	CHECK("loop", ibv_post_send(p.qp[0], &cs, &sbad) == 0, "post CMP_SWP");
	wc = wait_wc(p.cq[0], "loop cmp swp");
	CHECK("loop", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
	      mem[10] == 42 && mem[1000] == 7, "cmp swp");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK("loop", ibv_query_qp(p.qp[1], &qa, IBV_QP_STATE, &qi) == 0 &&
	      qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == p.qp[0]->qp_num &&
	      qa.path_mtu == IBV_MTU_1024 && qa.ah_attr.is_global == 1, "query_qp");
	/* A bad rkey: remote access error, and the QP goes to ERR. */
	ww.wr.rdma.rkey ^= 0x5a5a;
	CHECK("loop", ibv_post_send(p.qp[0], &ww, &sbad) == 0, "post bad WRITE");
	wc = wait_wc(p.cq[0], "loop bad rkey");
	CHECK("loop", wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey status %d", wc.status);
	CHECK("loop", ibv_query_qp(p.qp[0], &qa, IBV_QP_STATE, &qi) == 0 &&
	      qa.qp_state == IBV_QPS_ERR && qi.send_cq == p.cq[0] && qi.cap.max_send_wr >= 32,
	      "query_qp state %d", qa.qp_state);
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(p.qp[i]);
		ibv_destroy_cq(p.cq[i]);
	}
	ibv_dereg_mr(mr);
	printf("ok loop\n");
}

static void check_srq(void)
{
	struct ibv_srq_init_attr sa = { .srq_context = (void *)5,
					.attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK("srq", srq && srq->srq_context == (void *)5 && sa.attr.max_wr >= 16, "create");
	struct pair p = connect_pair(srq, NULL);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)(buf + 1024 * i), 1024, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 10 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK("srq", ibv_post_srq_recv(srq, &r, &bad) == 0, "post_srq_recv");
	}
	struct ibv_recv_wr r = { .wr_id = 1 }, *bad;
	CHECK("srq", ibv_post_recv(p.qp[1], &r, &bad) != 0, "QP with SRQ refuses own receives");
	struct ibv_srq_attr q;
	struct ibv_srq_attr lim = { .srq_limit = 2 };
	CHECK("srq", ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "modify limit");
	CHECK("srq", ibv_query_srq(srq, &q) == 0 && q.srq_limit == 2 && q.max_wr >= 16, "query");
	CHECK("srq", ibv_destroy_srq(srq) == EBUSY, "SRQ in use");
	for (int i = 0; i < 2; i++) {
		struct ibv_send_wr s = { .wr_id = 20 + i, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *sb;
		CHECK("srq", ibv_post_send(p.qp[0], &s, &sb) == 0, "post_send");
		struct ibv_wc wc = wait_wc(p.cq[1], "srq recv");
		CHECK("srq", wc.status == IBV_WC_SUCCESS && wc.wr_id == 10 + i &&
		      wc.qp_num == p.qp[1]->qp_num, "recv from the SRQ: %lu", wc.wr_id);
		wait_wc(p.cq[0], "srq send");
	}
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(p.qp[i]);
		ibv_destroy_cq(p.cq[i]);
	}
	CHECK("srq", ibv_destroy_srq(srq) == 0, "destroy");
	ibv_dereg_mr(mr);
	printf("ok srq\n");
}

/* A peer WRITEs to and READs from registered memory this program has
 * unmapped: the program survives, and the peer ends up with a remote access
 * error. */
static void check_unmapped(void)
{
	struct pair p = connect_pair(NULL, NULL);
	size_t len = 1 << 16;
	char *victim = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *vmr = ibv_reg_mr(pd, victim, len, IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	char *src = calloc(1, 4096);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("unmapped", vmr && smr, "reg");
	CHECK("unmapped", munmap(victim, len) == 0, "munmap");
	int err = 0, ops = 0;
	for (int i = 0; i < 200 && !err; i++) {
		struct ibv_sge s = { (uintptr_t)src, 4096, smr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
					 .opcode = i % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = { (uintptr_t)victim + 4096 * (i % 8), vmr->rkey } },
				   *bad;
		CHECK("unmapped", ibv_post_send(p.qp[0], &w, &bad) == 0, "post %d", i);
		struct ibv_wc wc = wait_wc(p.cq[0], "unmapped");
		ops++;
		if (wc.status == IBV_WC_REM_ACCESS_ERR)
			err = 1;
		else
			CHECK("unmapped", wc.status == IBV_WC_SUCCESS, "status %d", wc.status);
		usleep(1000);
	}
	CHECK("unmapped", err, "no remote access error after %d accesses", ops);
	CHECK("unmapped", ibv_dereg_mr(vmr) == 0, "dereg after revocation");
	printf("ok unmapped after %d accesses\n", ops);
}

/*
 * libfabric's verbs provider reads a CQ one completion at a time until it
 * is empty, and its rxm layer then reads once more: the library takes an
 * empty ring right after a poll that took completions at its word (no
 * engine step for a moment). A ping-pong in that pattern between two QPs
 * of one engine, in one thread, must still see every message, in order:
 * the next poll after the moment runs the engine again.
 */
static void check_drain(void)
{
	enum { ROUNDS = 2000 };
	struct pair p = connect_pair(NULL, NULL);
	uint32_t *mem = aligned_alloc(4096, 4096);
	memset(mem, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("drain", mr, "reg");
	double t0 = now_s();
	for (uint32_t i = 0; i < ROUNDS; i++) {
		int from = i % 2, to = 1 - from;
		uint32_t *rbuf = mem + 16 * to, *sbuf = mem + 512 + 16 * from;
		struct ibv_sge rsge = { (uintptr_t)rbuf, 4, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1000 + i, .sg_list = &rsge, .num_sge = 1 }, *rbad;
		CHECK("drain", ibv_post_recv(p.qp[to], &rw, &rbad) == 0, "post_recv %u", i);
		*sbuf = i;
		struct ibv_sge sge = { (uintptr_t)sbuf, 4, mr->lkey };
		struct ibv_send_wr sw = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		CHECK("drain", ibv_post_send(p.qp[from], &sw, &sbad) == 0, "post_send %u", i);
		int got_recv = 0, got_send = 0;
		while (!got_recv || !got_send) {
			CHECK("drain", now_s() - t0 < 20, "round %u: recv %d send %d after 20 s", i,
			      got_recv, got_send);
			struct ibv_wc wc;
			int n = ibv_poll_cq(p.cq[to], 1, &wc);
			CHECK("drain", n >= 0, "poll %d", n);
			if (n == 1) {
				CHECK("drain", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
				      wc.wr_id == 1000 + i && *rbuf == i,
				      "round %u: wc %llu status %d, payload %u", i,
				      (unsigned long long)wc.wr_id, wc.status, *rbuf);
				got_recv = 1;
				/* The drain: read on until the CQ says it is empty, twice. */
				n = ibv_poll_cq(p.cq[to], 1, &wc);
				if (n == 0)
					n = ibv_poll_cq(p.cq[to], 1, &wc);
				CHECK("drain", n == 0, "round %u: a second receive", i);
			}
			n = ibv_poll_cq(p.cq[from], 1, &wc);
			if (n == 1) {
				CHECK("drain", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND &&
				      wc.wr_id == i, "round %u: send wc %llu status %d", i,
				      (unsigned long long)wc.wr_id, wc.status);
				got_send = 1;
			}
		}
	}
	printf("ok drain %d round trips, %.1f us each\n", ROUNDS, (now_s() - t0) / ROUNDS * 1e6);
	CHECK("drain", ibv_dereg_mr(mr) == 0, "dereg");
}

/* Voluntary context switches of this process's pump threads so far. */
static long pump_wakeups(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK("idle", d, "opendir /proc/self/task");
	long total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[64] = "", line[256];
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		int got = fgets(comm, sizeof comm, f) != NULL;
		fclose(f);
		if (!got || strncmp(comm, "ndv-pump", 8) != 0)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f))
			if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
				total += atol(line + 24);
		fclose(f);
	}
	closedir(d);
	return total;
}

/*
 * A device that is open, with a PD, but has no QP and no rdma_cm id (what
 * libfabric leaves behind for every address it lists) needs no engine
 * step until a packet arrives or the program creates something: its pump
 * sleeps instead of looking every few milliseconds (a hundred wake-ups a
 * second per device before). Then a QP pair works at once, and closing
 * the device does not wait for the pump's long sleep.
 */
static void check_idle(void)
{
	usleep(50000);
	long before = pump_wakeups();
	sleep(1);
	long idle = pump_wakeups() - before;
	CHECK("idle", idle <= 5, "%ld pump wake-ups in a second with nothing to do", idle);
	struct pair p = connect_pair(NULL, NULL);
	uint32_t *mem = aligned_alloc(4096, 4096);
	memset(mem, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("idle", mr, "reg");
	struct ibv_sge rsge = { (uintptr_t)mem, 4, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK("idle", ibv_post_recv(p.qp[1], &rw, &rbad) == 0, "post_recv");
	mem[16] = 42;
	struct ibv_sge sge = { (uintptr_t)(mem + 16), 4, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *sbad;
	CHECK("idle", ibv_post_send(p.qp[0], &sw, &sbad) == 0, "post_send");
	struct ibv_wc wc = wait_wc(p.cq[1], "idle");
	CHECK("idle", wc.status == IBV_WC_SUCCESS && mem[0] == 42, "receive: status %d", wc.status);
	wc = wait_wc(p.cq[0], "idle");
	CHECK("idle", wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "send: status %d", wc.status);
	for (int i = 0; i < 2; i++) {
		CHECK("idle", ibv_destroy_qp(p.qp[i]) == 0, "destroy_qp");
		CHECK("idle", ibv_destroy_cq(p.cq[i]) == 0, "destroy_cq");
	}
	CHECK("idle", ibv_dereg_mr(mr) == 0, "dereg");
	CHECK("idle", ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	double t0 = now_s();
	CHECK("idle", ibv_close_device(ctx) == 0, "close");
	printf("ok idle %ld pump wake-ups in an idle second, closed in %.0f ms\n", idle,
	       (now_s() - t0) * 1e3);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CHECK\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	if (strcmp(argv[1], "devices") == 0) {
		check_devices();
		return 0;
	}
	open_first();
	if (strcmp(argv[1], "errors") == 0)
		check_errors();
	else if (strcmp(argv[1], "mr") == 0)
		check_mr();
	else if (strcmp(argv[1], "channel") == 0)
		check_channel();
	else if (strcmp(argv[1], "loop") == 0)
		check_loop();
	else if (strcmp(argv[1], "srq") == 0)
		check_srq();
	else if (strcmp(argv[1], "unmapped") == 0)
		check_unmapped();
	else if (strcmp(argv[1], "drain") == 0)
		check_drain();
	else if (strcmp(argv[1], "idle") == 0)
		check_idle();
	else
		return 2;
	return 0;
}
