/*
 * Exercises the librdmacm C API the way applications use it, built against
 * rdma-core's headers (librdmacm-dev) and run with ndverbs' librdmacm.so.1
 * first on the library path. Connections go from this process to itself
 * over 127.0.0.1 (or to 127.0.0.2 where two addresses are needed). Each
 * check prints "ok NAME" or "FAIL NAME: why" and the program exits non-zero
 * on the first failure.
 *
 *   rdmacm CHECK   CHECK: errors, channel, destroy, getaddrinfo, connect, sync, ownqp, drain,
 *                  ud, udsync
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(name, cond, ...)                                                 \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL %s: ", name);                             \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));    \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* -1 with errno e. */
#define FAILS_WITH(name, call, e)                                              \
	do {                                                                   \
		errno = 0;                                                     \
		int r_ = (call);                                               \
		CHECK(name, r_ == -1 && errno == (e), "%s gave %d, errno %d, " \
		      "expected -1 and %d", #call, r_, errno, (e));            \
	} while (0)

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in s;
	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The next event on ch, which must be `want`, within 10 s. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch,
				    enum rdma_cm_event_type want, const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(what, poll(&p, 1, 10000) == 1, "no event in 10 s (waiting for %s)",
	      rdma_event_str(want));
	struct rdma_cm_event *e;
	CHECK(what, rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(what, e->event == want, "got %s (status %d), expected %s",
	      rdma_event_str(e->event), e->status, rdma_event_str(want));
	return e;
}

static void check_errors(void)
{
	const char *n = "errors";
	struct rdma_cm_id *id, *id2;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(n, ch, "rdma_create_event_channel");

	FAILS_WITH(n, rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	FAILS_WITH(n, rdma_create_id(ch, &id, NULL, 0x9999), EINVAL);
	FAILS_WITH(n, rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB), EOPNOTSUPP);
	CHECK(n, rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0, "UDP id");
	CHECK(n, id->ps == RDMA_PS_UDP && id->qp_type == IBV_QPT_UD, "UDP id fields");
	FAILS_WITH(n, rdma_connect(id, NULL), EINVAL);
	FAILS_WITH(n, rdma_accept(id, NULL), EINVAL);
	CHECK(n, rdma_destroy_id(id) == 0, "destroy UDP id");
	FAILS_WITH(n, rdma_create_id((void *)&n, &id, NULL, RDMA_PS_TCP), EINVAL);
	FAILS_WITH(n, rdma_destroy_id(NULL), EINVAL);
	FAILS_WITH(n, rdma_destroy_id((void *)&n), EINVAL);
	FAILS_WITH(n, rdma_get_cm_event(NULL, NULL), EINVAL);
	FAILS_WITH(n, rdma_ack_cm_event((void *)&n), EINVAL);
	FAILS_WITH(n, rdma_bind_addr(NULL, NULL), EINVAL);

	CHECK(n, rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(n, id->channel == ch && id->verbs == NULL && id->ps == RDMA_PS_TCP &&
	      id->qp_type == IBV_QPT_RC, "fresh id fields");
	/* Wrong state for everything but binding and resolving. */
	FAILS_WITH(n, rdma_resolve_route(id, 100), EINVAL);
	FAILS_WITH(n, rdma_connect(id, NULL), EINVAL);
	FAILS_WITH(n, rdma_accept(id, NULL), EINVAL);
	FAILS_WITH(n, rdma_reject(id, NULL, 0), EINVAL);
	FAILS_WITH(n, rdma_disconnect(id), EINVAL);
	FAILS_WITH(n, rdma_get_request(id, &id2), EINVAL);
	FAILS_WITH(n, rdma_bind_addr(id, NULL), EINVAL);
	struct sockaddr_in bad = sin4("127.0.0.1", 0);
	bad.sin_family = AF_UNIX;
	FAILS_WITH(n, rdma_bind_addr(id, (struct sockaddr *)&bad), EAFNOSUPPORT);

	/* Options: as rdma-core and the kernel take them. */
	uint8_t tos = 32;
	int one = 1;
	CHECK(n, rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
	FAILS_WITH(n, rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4), EINVAL);
	CHECK(n, rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one,
				 sizeof one) == 0, "REUSEADDR");
	FAILS_WITH(n, rdma_set_option(id, RDMA_OPTION_ID, 77, &one, sizeof one), ENOSYS);
	FAILS_WITH(n, rdma_set_option(id, 99, 0, &one, sizeof one), ENOSYS);
	FAILS_WITH(n, rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one,
				      sizeof one), EINVAL);
	FAILS_WITH(n, rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 1), EINVAL);

	/* Binding: not this host's address, then port 0 (ephemeral) and a port
	 * in use. */
	struct sockaddr_in far = sin4("192.0.2.1", 7500);
	FAILS_WITH(n, rdma_bind_addr(id, (struct sockaddr *)&far), EADDRNOTAVAIL);
	struct sockaddr_in lo = sin4("127.0.0.1", 0);
	CHECK(n, rdma_bind_addr(id, (struct sockaddr *)&lo) == 0, "bind port 0");
	int port = ntohs(rdma_get_src_port(id));
	CHECK(n, port >= 32768 && port <= 60999, "ephemeral port %d", port);
	/* Loopback binds like the wildcard in the kernel (cma_any_addr): no
	 * device yet (libfabric's localhost probe depends on it). */
	CHECK(n, id->verbs == NULL, "a loopback-bound id has no device");
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(id);
	CHECK(n, src->sin_family == AF_INET && ntohs(src->sin_port) == port,
	      "local address");
	FAILS_WITH(n, rdma_bind_addr(id, (struct sockaddr *)&lo), EINVAL);
	FAILS_WITH(n, rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one,
				      sizeof one), EINVAL);
	CHECK(n, rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0, "second id");
	struct sockaddr_in same = sin4("127.0.0.1", port);
	FAILS_WITH(n, rdma_bind_addr(id2, (struct sockaddr *)&same), EADDRINUSE);
	struct sockaddr_in any = sin4("0.0.0.0", port);
	FAILS_WITH(n, rdma_bind_addr(id2, (struct sockaddr *)&any), EADDRINUSE);
	/* A QP needs a device: neither id has one; a resolved id has. */
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	FAILS_WITH(n, rdma_create_qp(id2, NULL, &qa), EINVAL);
	FAILS_WITH(n, rdma_create_qp(id, NULL, &qa), EINVAL);
	struct rdma_cm_id *rid;
	CHECK(n, rdma_create_id(ch, &rid, NULL, RDMA_PS_TCP) == 0, "third id");
	struct sockaddr_in peer = sin4("127.0.0.1", 7501);
	CHECK(n, rdma_resolve_addr(rid, NULL, (struct sockaddr *)&peer, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rid->verbs && rid->port_num == 1 && rid->pd, "resolved id has device, port, PD");
	FAILS_WITH(n, rdma_create_qp(rid, NULL, NULL), EINVAL);
	CHECK(n, rdma_create_qp(rid, NULL, &qa) == 0, "rdma_create_qp");
	CHECK(n, rid->qp && rid->qp->state == IBV_QPS_INIT && rid->send_cq && rid->recv_cq &&
	      rid->send_cq_channel && rid->recv_cq_channel && rid->qp->pd == rid->pd,
	      "QP in INIT with the default PD and CQs of its own");
	FAILS_WITH(n, rdma_create_qp(rid, NULL, &qa), EINVAL);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask = 0;
	CHECK(n, rdma_init_qp_attr(rid, &a, &mask) == 0 &&
	      mask == (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) &&
	      a.port_num == 1, "rdma_init_qp_attr INIT");
	a.qp_state = IBV_QPS_RTR;
	FAILS_WITH(n, rdma_init_qp_attr(rid, &a, &mask), EINVAL);
	rdma_destroy_qp(rid);
	CHECK(n, !rid->qp && !rid->send_cq && !rid->recv_cq, "rdma_destroy_qp");
	CHECK(n, rdma_destroy_id(rid) == 0, "destroy");
	/* A listener's port is nobody else's, reuse or not. */
	CHECK(n, rdma_listen(id, 0) == 0, "listen");
	CHECK(n, id->verbs == NULL, "a loopback listener has no single device");
	FAILS_WITH(n, rdma_listen(id, 0), EINVAL);
	CHECK(n, rdma_destroy_id(id2) == 0, "destroy");
	CHECK(n, rdma_destroy_id(id) == 0, "destroy");
	/* The port is free again. */
	CHECK(n, rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(n, rdma_bind_addr(id, (struct sockaddr *)&same) == 0, "rebind the port");
	CHECK(n, rdma_destroy_id(id) == 0, "destroy");
	/* Devices: our libibverbs contexts. */
	int num = 0;
	struct ibv_context **devs = rdma_get_devices(&num);
	CHECK(n, devs && num >= 1 && devs[num] == NULL && devs[0]->device, "rdma_get_devices");
	struct ibv_device_attr da;
	CHECK(n, ibv_query_device(devs[0], &da) == 0, "a usable context");
	rdma_free_devices(devs);
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

static void check_channel(void)
{
	const char *n = "channel";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(n, ch && ch->fd >= 0, "channel");
	CHECK(n, fcntl(ch->fd, F_GETFD) & FD_CLOEXEC, "close-on-exec");
	struct rdma_cm_id *id;
	CHECK(n, rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "id");
	/* Non-blocking: nothing yet is EAGAIN, and poll says so. */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(n, fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	struct rdma_cm_event *e;
	FAILS_WITH(n, rdma_get_cm_event(ch, &e), EAGAIN);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(n, poll(&p, 1, 0) == 0, "poll: nothing to read");
	struct sockaddr_in dst = sin4("127.0.0.1", 7520);
	CHECK(n, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	CHECK(n, poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "poll: readable");
	CHECK(n, rdma_get_cm_event(ch, &e) == 0, "event");
	CHECK(n, e->event == RDMA_CM_EVENT_ADDR_RESOLVED && e->status == 0 && e->id == id &&
	      e->id->context == (void *)0x1234 && e->listen_id == NULL, "ADDR_RESOLVED");
	CHECK(n, id->verbs != NULL, "resolved id has its device");
	CHECK(n, rdma_ack_cm_event(e) == 0, "ack");
	FAILS_WITH(n, rdma_ack_cm_event(e), EINVAL);
	FAILS_WITH(n, rdma_get_cm_event(ch, &e), EAGAIN);
	/* Resolving twice is the wrong state; the route is next. */
	FAILS_WITH(n, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), EINVAL);
	/* Blocking again: the route's event is read by a blocking call. */
	CHECK(n, fcntl(ch->fd, F_SETFL, fl) == 0, "blocking");
	CHECK(n, rdma_resolve_route(id, 2000) == 0, "route");
	CHECK(n, rdma_get_cm_event(ch, &e) == 0 && e->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "ROUTE_RESOLVED");
	CHECK(n, id->route.num_paths == 1 && id->route.path_rec &&
	      id->route.path_rec->pkey == htobe16(0xffff), "the route");
	CHECK(n, rdma_ack_cm_event(e) == 0, "ack");
	/* A connect nobody listens for: REJECTED, reason 8 (invalid service ID),
	 * moved with the id to another channel. */
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	CHECK(n, rdma_create_qp(id, NULL, &qa) == 0, "QP");
	struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(n, rdma_connect(id, &cp) == 0, "connect");
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	CHECK(n, ch2, "second channel");
	CHECK(n, rdma_migrate_id(id, ch2) == 0 && id->channel == ch2, "migrate");
	e = expect(ch2, RDMA_CM_EVENT_REJECTED, n);
	CHECK(n, e->status == 8 && e->id == id, "REJECTED status %d", e->status);
	CHECK(n, rdma_ack_cm_event(e) == 0, "ack");
	CHECK(n, id->qp->state == IBV_QPS_ERR, "a rejected QP goes to ERR");
	rdma_destroy_qp(id);
	CHECK(n, rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

static volatile int destroyed;

static void *destroy_thread(void *id)
{
	rdma_destroy_id(id);
	destroyed = 1;
	return NULL;
}

static void check_destroy(void)
{
	const char *n = "destroy";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	CHECK(n, ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	struct sockaddr_in dst = sin4("127.0.0.1", 7521);
	CHECK(n, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n);
	/* rdma_destroy_id waits for the event to be acknowledged. */
	pthread_t t;
	pthread_create(&t, NULL, destroy_thread, id);
	usleep(300 * 1000);
	CHECK(n, !destroyed, "rdma_destroy_id returned with an event unacknowledged");
	CHECK(n, rdma_ack_cm_event(e) == 0, "ack");
	double t0 = now_s();
	while (!destroyed && now_s() - t0 < 5)
		usleep(1000);
	CHECK(n, destroyed, "rdma_destroy_id still waiting after the ack");
	pthread_join(t, NULL);
	/* Events still queued for a destroyed id are dropped with it. */
	CHECK(n, rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(n, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	CHECK(n, rdma_destroy_id(id) == 0, "destroy with an event queued");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	FAILS_WITH(n, rdma_get_cm_event(ch, &e), EAGAIN);
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

static void check_getaddrinfo(void)
{
	const char *n = "getaddrinfo";
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(n, rdma_getaddrinfo("127.0.0.1", "7530", &hints, &res) == 0, "active");
	struct sockaddr_in *d = (struct sockaddr_in *)res->ai_dst_addr;
	CHECK(n, res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC &&
	      res->ai_port_space == RDMA_PS_TCP && res->ai_dst_len == sizeof *d &&
	      d->sin_family == AF_INET && ntohs(d->sin_port) == 7530 &&
	      d->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && !res->ai_src_addr &&
	      !(res->ai_flags & RAI_PASSIVE) && !res->ai_next, "active result");
	rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_PASSIVE;
	CHECK(n, rdma_getaddrinfo(NULL, "7531", &hints, &res) == 0, "passive");
	struct sockaddr_in *s = (struct sockaddr_in *)res->ai_src_addr;
	CHECK(n, (res->ai_flags & RAI_PASSIVE) && s && ntohs(s->sin_port) == 7531 &&
	      !res->ai_dst_addr, "passive result");
	rdma_freeaddrinfo(res);
	/* With a source address in the hints. */
	struct sockaddr_in from = sin4("127.0.0.1", 0);
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_src_addr = (struct sockaddr *)&from;
	hints.ai_src_len = sizeof from;
	CHECK(n, rdma_getaddrinfo("127.0.0.1", "7532", &hints, &res) == 0 &&
	      res->ai_src_len == sizeof from && res->ai_dst_len, "source from hints");
	rdma_freeaddrinfo(res);
	hints.ai_src_addr = NULL;
	hints.ai_src_len = 0;
	/* Names are getaddrinfo's business, its errors returned as they are. */
	int r = rdma_getaddrinfo("not-a-number", "7533", &hints, &res);
	CHECK(n, r == EAI_NONAME, "numeric host required: %d", r);
	errno = 0;
	CHECK(n, rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL,
	      "nothing to resolve");
	rdma_freeaddrinfo(NULL);
	printf("ok %s\n", n);
}

/* One RC SEND of `len` bytes from a to b through their QPs. */
static void send_across(struct rdma_cm_id *a, struct rdma_cm_id *b, const char *what)
{
	static char out[64] = "over rdma_cm", in[64];
	struct ibv_mr *mo = rdma_reg_msgs(a, out, sizeof out);
	struct ibv_mr *mi = rdma_reg_msgs(b, in, sizeof in);
	CHECK(what, mo && mi, "rdma_reg_msgs");
	CHECK(what, rdma_post_recv(b, NULL, in, sizeof in, mi) == 0, "post recv");
	CHECK(what, rdma_post_send(a, NULL, out, sizeof out, mo, IBV_SEND_SIGNALED) == 0,
	      "post send");
	struct ibv_wc wc;
	CHECK(what, rdma_get_send_comp(a, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "send completion");
	CHECK(what, rdma_get_recv_comp(b, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      wc.byte_len == sizeof out && strcmp(in, out) == 0, "receive");
	rdma_dereg_mr(mo);
	rdma_dereg_mr(mi);
}

static void check_connect(void)
{
	const char *n = "connect";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *cli, *srv;
	struct rdma_cm_event *e;
	CHECK(n, ch, "channel");
	/* The listener bound to the wildcard address: no device of its own. */
	CHECK(n, rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "listen id");
	struct sockaddr_in any = sin4("0.0.0.0", 7540);
	CHECK(n, rdma_bind_addr(listen, (struct sockaddr *)&any) == 0, "bind");
	CHECK(n, rdma_listen(listen, 4) == 0 && listen->verbs == NULL, "listen");
	/* The client, with private data. */
	CHECK(n, rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP) == 0, "client id");
	struct sockaddr_in dst = sin4("127.0.0.1", 7540);
	CHECK(n, rdma_resolve_addr(cli, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rdma_resolve_route(cli, 2000) == 0, "route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, n));
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	CHECK(n, rdma_create_qp(cli, NULL, &qa) == 0, "client QP");
	struct rdma_conn_param cp = { .private_data = "hello", .private_data_len = 6,
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7 };
	struct rdma_conn_param big = cp;
	char lots[100] = { 0 };
	big.private_data = lots;
	big.private_data_len = 57;
	FAILS_WITH(n, rdma_connect(cli, &big), EINVAL);
	CHECK(n, rdma_connect(cli, &cp) == 0, "connect");
	/* The request: a new id on the listener's channel, with the device it
	 * arrived on, the client's private data and addresses. */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	srv = e->id;
	CHECK(n, e->listen_id == listen && srv != listen && srv->channel == ch &&
	      srv->verbs != NULL && e->param.conn.private_data &&
	      e->param.conn.private_data_len >= 6 &&
	      memcmp(e->param.conn.private_data, "hello", 6) == 0 &&
	      e->param.conn.initiator_depth == 1 && e->param.conn.responder_resources == 1,
	      "CONNECT_REQUEST");
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(srv);
	CHECK(n, peer->sin_family == AF_INET && peer->sin_port == rdma_get_src_port(cli) &&
	      rdma_get_src_port(srv) == htons(7540) && rdma_get_dst_port(cli) == htons(7540),
	      "the request's addresses");
	/* Accepting needs a QP (ours are on the id) and fits the REP. */
	FAILS_WITH(n, rdma_accept(srv, NULL), EINVAL);
	/* rdma_create_qp wrote the client's CQs back into qa, as rdma-core's. */
	CHECK(n, qa.send_cq == cli->send_cq && qa.recv_cq == cli->recv_cq, "attributes back");
	qa.send_cq = qa.recv_cq = NULL;
	CHECK(n, rdma_create_qp(srv, NULL, &qa) == 0, "server QP");
	struct rdma_conn_param ap = { .private_data = "welcome", .private_data_len = 8,
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7 };
	CHECK(n, rdma_accept(srv, &ap) == 0, "accept");
	CHECK(n, srv->qp->state == IBV_QPS_RTS, "accept moves the QP to RTS before the REP");
	CHECK(n, rdma_ack_cm_event(e) == 0, "ack");
	/* Both ends established: the client with the REP's private data. */
	int cli_up = 0, srv_up = 0;
	while (!cli_up || !srv_up) {
		e = expect(ch, RDMA_CM_EVENT_ESTABLISHED, n);
		if (e->id == cli) {
			CHECK(n, e->param.conn.private_data &&
			      memcmp(e->param.conn.private_data, "welcome", 8) == 0,
			      "REP private data");
			cli_up = 1;
		} else {
			CHECK(n, e->id == srv, "ESTABLISHED for an unknown id");
			srv_up = 1;
		}
		rdma_ack_cm_event(e);
	}
	CHECK(n, cli->qp->state == IBV_QPS_RTS, "client QP in RTS");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask;
	CHECK(n, rdma_init_qp_attr(cli, &a, &mask) == 0 && (mask & IBV_QP_DEST_QPN) &&
	      a.dest_qp_num == srv->qp->qp_num, "rdma_init_qp_attr RTR after the connection");
	send_across(cli, srv, n);
	send_across(srv, cli, n);
	/* A second request, turned down with private data. */
	struct rdma_cm_id *cli2;
	CHECK(n, rdma_create_id(ch, &cli2, NULL, RDMA_PS_TCP) == 0, "client 2");
	CHECK(n, rdma_resolve_addr(cli2, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rdma_resolve_route(cli2, 2000) == 0, "route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, n));
	qa.send_cq = qa.recv_cq = NULL;
	CHECK(n, rdma_create_qp(cli2, NULL, &qa) == 0, "client 2 QP");
	CHECK(n, rdma_connect(cli2, &cp) == 0, "connect 2");
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	struct rdma_cm_id *srv2 = e->id;
	CHECK(n, rdma_reject(srv2, "busy", 5) == 0, "reject");
	FAILS_WITH(n, rdma_accept(srv2, NULL), EINVAL);
	rdma_ack_cm_event(e);
	e = expect(ch, RDMA_CM_EVENT_REJECTED, n);
	CHECK(n, e->id == cli2 && e->status == 28 && e->param.conn.private_data &&
	      memcmp(e->param.conn.private_data, "busy", 5) == 0,
	      "REJECTED: consumer reject (28) with the private data, status %d", e->status);
	rdma_ack_cm_event(e);
	CHECK(n, rdma_destroy_id(srv2) == 0, "destroy");
	rdma_destroy_qp(cli2);
	CHECK(n, rdma_destroy_id(cli2) == 0, "destroy");
	/* Disconnect: the QP goes to ERR at once, both ends hear of it once. */
	CHECK(n, rdma_disconnect(cli) == 0, "disconnect");
	CHECK(n, cli->qp->state == IBV_QPS_ERR, "disconnect moves the QP to ERR first");
	int cli_down = 0, srv_down = 0;
	while (!cli_down || !srv_down) {
		e = expect(ch, RDMA_CM_EVENT_DISCONNECTED, n);
		if (e->id == cli)
			cli_down++;
		else if (e->id == srv) {
			srv_down++;
			CHECK(n, rdma_disconnect(srv) == 0, "the passive side's disconnect");
		}
		rdma_ack_cm_event(e);
	}
	/* Later, time-wait ends (and nothing else comes). */
	e = expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, n);
	rdma_ack_cm_event(e);
	CHECK(n, rdma_disconnect(cli) == 0, "a second disconnect does nothing");
	rdma_destroy_qp(cli);
	rdma_destroy_qp(srv);
	CHECK(n, rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0 &&
	      rdma_destroy_id(listen) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

/* A connection on `port` between a client id on `cc` and a server id on
 * `sc` (the listener's channel), both with QPs, both ESTABLISHED. */
static void connected_pair(struct rdma_event_channel *cc, struct rdma_event_channel *sc,
			   int port, struct rdma_cm_id **listen, struct rdma_cm_id **cli,
			   struct rdma_cm_id **srv, const char *n)
{
	struct rdma_cm_event *e;
	struct sockaddr_in at = sin4("127.0.0.1", port);
	CHECK(n, rdma_create_id(sc, listen, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_bind_addr(*listen, (struct sockaddr *)&at) == 0 &&
	      rdma_listen(*listen, 1) == 0, "listen");
	CHECK(n, rdma_create_id(cc, cli, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_resolve_addr(*cli, NULL, (struct sockaddr *)&at, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(cc, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rdma_resolve_route(*cli, 2000) == 0, "route");
	rdma_ack_cm_event(expect(cc, RDMA_CM_EVENT_ROUTE_RESOLVED, n));
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	CHECK(n, rdma_create_qp(*cli, NULL, &qa) == 0, "client QP");
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
		.retry_count = 7, .rnr_retry_count = 7 };
	CHECK(n, rdma_connect(*cli, &cp) == 0, "connect");
	e = expect(sc, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	*srv = e->id;
	qa.send_cq = qa.recv_cq = NULL;
	CHECK(n, rdma_create_qp(*srv, NULL, &qa) == 0 && rdma_accept(*srv, &cp) == 0,
	      "accept");
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(expect(cc, RDMA_CM_EVENT_ESTABLISHED, n));
	rdma_ack_cm_event(expect(sc, RDMA_CM_EVENT_ESTABLISHED, n));
}

/* The peer's DREQ comes after its last message: the passive side hears of
 * the disconnection only once it has polled that message (with a NIC it
 * would have long before the event arrived; libfabric's rxm closes the
 * connection on the event), or, if it never polls, a moment later. */
static void check_drain(void)
{
	const char *n = "drain";
	struct rdma_event_channel *cc = rdma_create_event_channel();
	struct rdma_event_channel *sc = rdma_create_event_channel();
	CHECK(n, cc && sc, "channels");
	static char out[32] = "last words", in[32];
	for (int polls = 1; polls >= 0; polls--) {
		struct rdma_cm_id *listen, *cli, *srv;
		connected_pair(cc, sc, 7550 + polls, &listen, &cli, &srv, n);
		struct ibv_mr *mo = rdma_reg_msgs(cli, out, sizeof out);
		struct ibv_mr *mi = rdma_reg_msgs(srv, in, sizeof in);
		CHECK(n, mo && mi, "rdma_reg_msgs");
		CHECK(n, rdma_post_recv(srv, NULL, in, sizeof in, mi) == 0, "post recv");
		CHECK(n, rdma_post_send(cli, NULL, out, sizeof out, mo, IBV_SEND_SIGNALED) == 0,
		      "post send");
		struct ibv_wc wc;
		/* Acknowledged: the server has the message. */
		CHECK(n, rdma_get_send_comp(cli, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
		      "send completion");
		CHECK(n, rdma_disconnect(cli) == 0, "disconnect");
		if (polls) {
			struct pollfd p = { .fd = sc->fd, .events = POLLIN };
			CHECK(n, poll(&p, 1, 50) == 0,
			      "DISCONNECTED before the last message was polled");
			CHECK(n, rdma_get_recv_comp(srv, &wc) == 1 &&
			      wc.status == IBV_WC_SUCCESS && strcmp(in, out) == 0, "receive");
		}
		rdma_ack_cm_event(expect(sc, RDMA_CM_EVENT_DISCONNECTED, n));
		CHECK(n, rdma_disconnect(srv) == 0, "the passive side's disconnect");
		rdma_ack_cm_event(expect(cc, RDMA_CM_EVENT_DISCONNECTED, n));
		rdma_dereg_mr(mo);
		rdma_dereg_mr(mi);
		rdma_destroy_qp(cli);
		rdma_destroy_qp(srv);
		CHECK(n, rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0 &&
		      rdma_destroy_id(listen) == 0, "destroy");
	}
	rdma_destroy_event_channel(cc);
	rdma_destroy_event_channel(sc);
	printf("ok %s\n", n);
}

/* An application's own QP (rping -q's way): created with ibv_create_qp on
 * the id's context and moved to INIT with no rights. */
struct own {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char buf[64];
	struct ibv_mr *mr;
};

static void own_qp(struct own *o, struct rdma_cm_id *id, const char *what)
{
	o->pd = ibv_alloc_pd(id->verbs);
	o->cq = o->pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	CHECK(what, o->pd && o->cq, "PD and CQ");
	struct ibv_qp_init_attr ia = { .send_cq = o->cq, .recv_cq = o->cq,
		.qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 } };
	o->qp = ibv_create_qp(o->pd, &ia);
	CHECK(what, o->qp, "ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = id->port_num };
	CHECK(what, ibv_modify_qp(o->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	o->mr = ibv_reg_mr(o->pd, o->buf, sizeof o->buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(what, o->mr, "ibv_reg_mr");
}

static void own_free(struct own *o)
{
	ibv_dereg_mr(o->mr);
	ibv_destroy_qp(o->qp);
	ibv_destroy_cq(o->cq);
	ibv_dealloc_pd(o->pd);
}

/* INIT, RTR and RTS from rdma_init_qp_attr, checking the masks. */
static void own_to_rts(struct own *o, struct rdma_cm_id *id, struct ibv_qp_attr *rtr,
		       struct ibv_qp_attr *rts, const char *what)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask;
	CHECK(what, rdma_init_qp_attr(id, &a, &mask) == 0 &&
	      mask == (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) &&
	      a.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC), "INIT attributes: access %x",
	      a.qp_access_flags);
	CHECK(what, ibv_modify_qp(o->qp, &a, mask) == 0, "INIT to INIT");
	memset(rtr, 0, sizeof *rtr);
	rtr->qp_state = IBV_QPS_RTR;
	CHECK(what, rdma_init_qp_attr(id, rtr, &mask) == 0 &&
	      mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) &&
	      rtr->ah_attr.is_global && rtr->ah_attr.grh.hop_limit &&
	      rtr->path_mtu >= IBV_MTU_256 && rtr->max_dest_rd_atomic == 1,
	      "RTR attributes: mask %x", mask);
	CHECK(what, ibv_modify_qp(o->qp, rtr, mask) == 0, "to RTR");
	memset(rts, 0, sizeof *rts);
	rts->qp_state = IBV_QPS_RTS;
	CHECK(what, rdma_init_qp_attr(id, rts, &mask) == 0 &&
	      mask == (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) &&
	      rts->retry_cnt == 7 && rts->rnr_retry == 7 && rts->max_rd_atomic == 1 &&
	      rts->timeout, "RTS attributes: mask %x", mask);
	CHECK(what, ibv_modify_qp(o->qp, rts, mask) == 0, "to RTS");
	CHECK(what, o->qp->state == IBV_QPS_RTS, "in RTS");
}

/* One SEND from a's QP to b's, polled from their CQs. */
static void own_send(struct own *a, struct own *b, const char *text, const char *what)
{
	struct ibv_sge rs = { (uintptr_t)b->buf, sizeof b->buf, b->mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(what, ibv_post_recv(b->qp, &rwr, &rbad) == 0, "post recv");
	snprintf(a->buf, sizeof a->buf, "%s", text);
	struct ibv_sge ss = { (uintptr_t)a->buf, sizeof a->buf, a->mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(what, ibv_post_send(a->qp, &swr, &sbad) == 0, "post send");
	int sent = 0, got = 0;
	double t0 = now_s();
	while ((!sent || !got) && now_s() - t0 < 10) {
		struct ibv_wc wc;
		if (ibv_poll_cq(a->cq, 1, &wc) == 1) {
			CHECK(what, wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "send wc %d",
			      wc.status);
			sent = 1;
		}
		if (ibv_poll_cq(b->cq, 1, &wc) == 1) {
			CHECK(what, wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 &&
			      wc.byte_len == sizeof b->buf, "recv wc %d", wc.status);
			got = 1;
		}
	}
	CHECK(what, sent && got && strcmp(b->buf, text) == 0, "SEND across (%d %d)", sent, got);
}

static void check_ownqp(void)
{
	const char *n = "ownqp";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *cli, *srv;
	struct rdma_cm_event *e;
	CHECK(n, ch, "channel");
	CHECK(n, rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "listen id");
	struct sockaddr_in at = sin4("127.0.0.1", 7560);
	CHECK(n, rdma_bind_addr(listen, (struct sockaddr *)&at) == 0, "bind");
	CHECK(n, rdma_listen(listen, 4) == 0, "listen");
	CHECK(n, rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP) == 0, "client id");
	CHECK(n, rdma_resolve_addr(cli, NULL, (struct sockaddr *)&at, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rdma_resolve_route(cli, 2000) == 0, "route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, n));
	struct own c, s;
	own_qp(&c, cli, n);
	/* Before the connection: INIT without rights, nothing for RTR, and
	 * nothing to establish. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask;
	CHECK(n, rdma_init_qp_attr(cli, &a, &mask) == 0 && a.qp_access_flags == 0,
	      "INIT before the connection");
	a.qp_state = IBV_QPS_RTR;
	FAILS_WITH(n, rdma_init_qp_attr(cli, &a, &mask), EINVAL);
	FAILS_WITH(n, rdma_establish(cli), EINVAL);
	/* A qp_num that is no QP of ours; no conn_param at all. */
	struct rdma_conn_param cp = { .private_data = "own", .private_data_len = 4,
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7, .qp_num = c.qp->qp_num ^ 0x800000 };
	FAILS_WITH(n, rdma_connect(cli, &cp), EINVAL);
	FAILS_WITH(n, rdma_connect(cli, NULL), EINVAL);
	cp.qp_num = c.qp->qp_num;
	CHECK(n, rdma_connect(cli, &cp) == 0, "connect with qp_num");
	FAILS_WITH(n, rdma_establish(cli), EINVAL);
	/* The server sets its own QP up from the request, then accepts. */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	srv = e->id;
	CHECK(n, srv->qp == NULL && srv->verbs && e->param.conn.qp_num == c.qp->qp_num,
	      "a request without a QP, naming the client's");
	own_qp(&s, srv, n);
	struct ibv_qp_attr srtr, srts, crtr, crts;
	own_to_rts(&s, srv, &srtr, &srts, n);
	CHECK(n, srtr.dest_qp_num == c.qp->qp_num, "the server's peer is the client's QP");
	struct rdma_conn_param ap = { .private_data = "yours", .private_data_len = 6,
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
		.qp_num = 0xabcdef };
	if (ap.qp_num == s.qp->qp_num)
		ap.qp_num ^= 1;
	FAILS_WITH(n, rdma_accept(srv, &ap), EINVAL);
	ap.qp_num = s.qp->qp_num;
	CHECK(n, rdma_accept(srv, &ap) == 0, "accept with qp_num");
	CHECK(n, s.qp->state == IBV_QPS_RTS, "the server's QP stays as it moved it");
	rdma_ack_cm_event(e);
	/* The client hears CONNECT_RESPONSE, moves its QP and establishes. */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, n);
	CHECK(n, e->id == cli && e->status == 0 && e->param.conn.private_data &&
	      memcmp(e->param.conn.private_data, "yours", 6) == 0 &&
	      e->param.conn.qp_num == s.qp->qp_num,
	      "CONNECT_RESPONSE with the REP's private data and QP number");
	rdma_ack_cm_event(e);
	CHECK(n, c.qp->state == IBV_QPS_INIT, "the client's QP untouched");
	own_to_rts(&c, cli, &crtr, &crts, n);
	CHECK(n, crtr.dest_qp_num == s.qp->qp_num && crts.sq_psn == srtr.rq_psn &&
	      srts.sq_psn == crtr.rq_psn, "each side sends from the PSN the other expects");
	CHECK(n, rdma_establish(cli) == 0, "rdma_establish");
	FAILS_WITH(n, rdma_establish(cli), EINVAL);
	e = expect(ch, RDMA_CM_EVENT_ESTABLISHED, n);
	CHECK(n, e->id == srv, "the server is established by the RTU");
	rdma_ack_cm_event(e);
	own_send(&c, &s, "client to server", n);
	own_send(&s, &c, "server to client", n);
	/* rping -q's disconnect: its QP to ERR, then rdma_disconnect. */
	a.qp_state = IBV_QPS_ERR;
	CHECK(n, ibv_modify_qp(c.qp, &a, IBV_QP_STATE) == 0, "client QP to ERR");
	CHECK(n, rdma_disconnect(cli) == 0, "disconnect");
	int cli_down = 0, srv_down = 0;
	while (!cli_down || !srv_down) {
		e = expect(ch, RDMA_CM_EVENT_DISCONNECTED, n);
		if (e->id == cli)
			cli_down++;
		else if (e->id == srv) {
			srv_down++;
			CHECK(n, rdma_disconnect(srv) == 0, "the passive side's disconnect");
		}
		rdma_ack_cm_event(e);
	}
	own_free(&c);
	own_free(&s);
	CHECK(n, rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0 &&
	      rdma_destroy_id(listen) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

/* The synchronous API (rdma_server/rdma_client's): no channel. */
static struct rdma_addrinfo *passive_res;

static void *sync_server(void *arg)
{
	const char *n = "sync server";
	struct rdma_cm_id *listen = arg, *id;
	CHECK(n, rdma_get_request(listen, &id) == 0, "rdma_get_request");
	CHECK(n, id->qp && id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST,
	      "a request with its QP");
	static char in[64];
	struct ibv_mr *mr = rdma_reg_msgs(id, in, sizeof in);
	CHECK(n, mr && rdma_post_recv(id, NULL, in, sizeof in, mr) == 0, "recv");
	CHECK(n, rdma_accept(id, NULL) == 0, "accept (returns once established)");
	struct ibv_wc wc;
	CHECK(n, rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      strcmp(in, "sync") == 0, "receive");
	CHECK(n, rdma_disconnect(id) == 0, "disconnect");
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return NULL;
}

static void check_sync(void)
{
	const char *n = "sync";
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_flags = RAI_PASSIVE;
	CHECK(n, rdma_getaddrinfo(NULL, "7550", &hints, &passive_res) == 0, "passive info");
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 }, .sq_sig_all = 1 };
	struct rdma_cm_id *listen, *id;
	CHECK(n, rdma_create_ep(&listen, passive_res, NULL, &qa) == 0, "passive endpoint");
	CHECK(n, listen->channel && !listen->qp, "its own channel, no QP yet");
	CHECK(n, rdma_listen(listen, 0) == 0, "listen");
	pthread_t t;
	pthread_create(&t, NULL, sync_server, listen);
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(n, rdma_getaddrinfo("127.0.0.1", "7550", &hints, &res) == 0, "active info");
	CHECK(n, rdma_create_ep(&id, res, NULL, &qa) == 0, "active endpoint");
	CHECK(n, id->qp && id->verbs && id->pd && id->send_cq && id->recv_cq,
	      "resolved, with a QP");
	CHECK(n, rdma_connect(id, NULL) == 0, "connect (returns once established)");
	CHECK(n, id->qp->state == IBV_QPS_RTS, "RTS");
	static char out[64] = "sync";
	struct ibv_mr *mr = rdma_reg_msgs(id, out, sizeof out);
	CHECK(n, mr && rdma_post_send(id, NULL, out, sizeof out, mr, 0) == 0, "send");
	struct ibv_wc wc;
	CHECK(n, rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "sent");
	CHECK(n, rdma_disconnect(id) == 0, "disconnect (returns once disconnected)");
	pthread_join(t, NULL);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen);
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(passive_res);
	/* Nobody listens: a synchronous connect fails with ECONNREFUSED. */
	qa.send_cq = qa.recv_cq = NULL;
	CHECK(n, rdma_getaddrinfo("127.0.0.1", "7551", &hints, &res) == 0, "info");
	CHECK(n, rdma_create_ep(&id, res, NULL, &qa) == 0, "endpoint");
	FAILS_WITH(n, rdma_connect(id, NULL), ECONNREFUSED);
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	printf("ok %s\n", n);
}

/* A UDP-space id resolved to 127.0.0.1:port with a UD QP; connected with
 * `data` (NUL-terminated). */
static struct rdma_cm_id *ud_client(struct rdma_event_channel *ch, int port, const char *data,
				    const char *n)
{
	struct rdma_cm_id *id;
	CHECK(n, rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0, "client id");
	CHECK(n, id->qp_type == IBV_QPT_UD, "a UDP id is UD");
	struct sockaddr_in dst = sin4("127.0.0.1", port);
	CHECK(n, rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, n));
	CHECK(n, rdma_resolve_route(id, 2000) == 0, "route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, n));
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	CHECK(n, rdma_create_qp(id, NULL, &qa) == 0, "client QP");
	struct rdma_conn_param cp = { .private_data = data,
		.private_data_len = strlen(data) + 1 };
	CHECK(n, rdma_connect(id, &cp) == 0, "connect");
	return id;
}

static void check_ud(void)
{
	const char *n = "ud";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *cli, *srv;
	struct rdma_cm_event *e;
	CHECK(n, ch, "channel");
	CHECK(n, rdma_create_id(ch, &listen, NULL, RDMA_PS_UDP) == 0, "listen id");
	struct sockaddr_in any = sin4("0.0.0.0", 7550);
	CHECK(n, rdma_bind_addr(listen, (struct sockaddr *)&any) == 0, "bind");
	CHECK(n, rdma_listen(listen, 4) == 0, "listen");
	/* The port spaces' ports are apart, as the kernel's. */
	struct rdma_cm_id *tcp, *udp2;
	CHECK(n, rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_create_id(ch, &udp2, NULL, RDMA_PS_UDP) == 0, "more ids");
	CHECK(n, rdma_bind_addr(tcp, (struct sockaddr *)&any) == 0 && rdma_listen(tcp, 1) == 0,
	      "TCP 7550 beside UDP 7550");
	FAILS_WITH(n, rdma_bind_addr(udp2, (struct sockaddr *)&any), EADDRINUSE);
	rdma_destroy_id(tcp);
	rdma_destroy_id(udp2);

	/* A UD QP on an id goes to RTS at once with the rdma_cm Q_Key, and
	 * rdma_init_qp_attr says so. */
	cli = ud_client(ch, 7550, "refuse me", n);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK(n, ibv_query_qp(cli->qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia) == 0 &&
	      a.qp_state == IBV_QPS_RTS && a.qkey == RDMA_UDP_QKEY, "UD QP in RTS, Q_Key");
	int mask = 0;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	CHECK(n, rdma_init_qp_attr(cli, &a, &mask) == 0 && a.qkey == RDMA_UDP_QKEY &&
	      mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "rdma_init_qp_attr on a UD id");
	/* The SIDR request: the private data after the rdma_cm header, no
	 * QP, Q_Key or address handle yet (as the kernel's). */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	srv = e->id;
	CHECK(n, e->listen_id == listen && srv->qp_type == IBV_QPT_UD &&
	      e->param.ud.private_data_len == 180 &&
	      strcmp(e->param.ud.private_data, "refuse me") == 0 &&
	      e->param.ud.qp_num == 0 && e->param.ud.qkey == 0 &&
	      e->param.ud.ah_attr.is_global == 0, "CONNECT_REQUEST param.ud");
	char lots[200] = { 0 };
	FAILS_WITH(n, rdma_reject(srv, lots, 137), EINVAL);
	CHECK(n, rdma_reject(srv, "busy", 5) == 0, "reject");
	rdma_ack_cm_event(e);
	/* Rejected: UNREACHABLE with the SIDR status (2, IB_SIDR_REJECT). */
	e = expect(ch, RDMA_CM_EVENT_UNREACHABLE, n);
	CHECK(n, e->id == cli && e->status == 2 && e->param.ud.private_data &&
	      strcmp(e->param.ud.private_data, "busy") == 0, "rejected: status 2");
	rdma_ack_cm_event(e);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	rdma_destroy_id(srv);

	/* Accepted: ESTABLISHED with the server's QP, Q_Key, an address
	 * handle to reach it and the SIDR_REP's private data. */
	cli = ud_client(ch, 7550, "hello", n);
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, n);
	srv = e->id;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	CHECK(n, rdma_create_qp(srv, NULL, &qa) == 0, "server QP");
	static char in[40 + 64];
	struct ibv_mr *mi = rdma_reg_msgs(srv, in, sizeof in);
	CHECK(n, mi && rdma_post_recv(srv, NULL, in, sizeof in, mi) == 0, "post recv");
	struct rdma_conn_param ap = { .private_data = lots, .private_data_len = 137 };
	FAILS_WITH(n, rdma_accept(srv, &ap), EINVAL);
	ap.private_data = "welcome";
	ap.private_data_len = 8;
	CHECK(n, rdma_accept(srv, &ap) == 0, "accept");
	rdma_ack_cm_event(e);
	e = expect(ch, RDMA_CM_EVENT_ESTABLISHED, n);
	static const uint8_t mapped[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					    127, 0, 0, 1 };
	CHECK(n, e->id == cli && e->status == 0 && e->param.ud.qp_num == srv->qp->qp_num &&
	      e->param.ud.qkey == RDMA_UDP_QKEY && e->param.ud.private_data_len == 136 &&
	      strcmp(e->param.ud.private_data, "welcome") == 0 &&
	      e->param.ud.ah_attr.is_global == 1 && e->param.ud.ah_attr.port_num == 1 &&
	      memcmp(e->param.ud.ah_attr.grh.dgid.raw, mapped, 16) == 0,
	      "ESTABLISHED param.ud");
	/* What the event gave reaches the server's QP. */
	struct ibv_ah *ah = ibv_create_ah(cli->pd, &e->param.ud.ah_attr);
	CHECK(n, ah, "ibv_create_ah from param.ud.ah_attr");
	static char out[64] = "a datagram";
	struct ibv_mr *mo = rdma_reg_msgs(cli, out, sizeof out);
	CHECK(n, mo, "reg");
	CHECK(n, rdma_post_ud_send(cli, NULL, out, sizeof out, mo, IBV_SEND_SIGNALED, ah,
				   e->param.ud.qp_num) == 0, "UD send");
	rdma_ack_cm_event(e);
	struct ibv_wc wc;
	CHECK(n, rdma_get_send_comp(cli, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send comp");
	CHECK(n, rdma_get_recv_comp(srv, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == cli->qp->qp_num &&
	      strcmp(in + 40, out) == 0, "the datagram, behind its GRH");
	ibv_destroy_ah(ah);
	rdma_dereg_mr(mo);
	rdma_dereg_mr(mi);

	/* Nobody listens on UDP 7551 (the engine is up): status 1,
	 * IB_SIDR_UNSUPPORTED, after the library's no-listener window. */
	struct rdma_cm_id *lone = ud_client(ch, 7551, "anyone?", n);
	e = expect(ch, RDMA_CM_EVENT_UNREACHABLE, n);
	CHECK(n, e->id == lone && e->status == 1, "no listener: status 1");
	rdma_ack_cm_event(e);
	rdma_destroy_qp(lone);
	rdma_destroy_id(lone);
	rdma_destroy_qp(cli);
	rdma_destroy_qp(srv);
	rdma_destroy_id(cli);
	rdma_destroy_id(srv);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
	printf("ok %s\n", n);
}

static void *ud_sync_server(void *arg)
{
	const char *n = "ud sync server";
	struct rdma_cm_id *listen = arg, *id;
	CHECK(n, rdma_get_request(listen, &id) == 0, "rdma_get_request");
	CHECK(n, id->qp && id->qp->qp_type == IBV_QPT_UD && id->qp->state == IBV_QPS_RTS &&
	      id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
	      strcmp(id->event->param.ud.private_data, "sync ud") == 0,
	      "a SIDR request with a UD QP in RTS");
	static char in[40 + 64];
	struct ibv_mr *mr = rdma_reg_msgs(id, in, sizeof in);
	CHECK(n, mr && rdma_post_recv(id, NULL, in, sizeof in, mr) == 0, "recv");
	CHECK(n, rdma_accept(id, NULL) == 0, "accept (nothing to wait for)");
	struct ibv_wc wc;
	CHECK(n, rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      strcmp(in + 40, "sync datagram") == 0, "receive");
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return NULL;
}

/* rdma_create_ep on the UDP port space: synchronous resolve and accept. */
static void check_ud_sync(void)
{
	const char *n = "udsync";
	struct rdma_addrinfo hints, *passive, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_flags = RAI_PASSIVE;
	CHECK(n, rdma_getaddrinfo(NULL, "7552", &hints, &passive) == 0, "passive info");
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_UD, .cap = { .max_send_wr = 4,
		.max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 }, .sq_sig_all = 1 };
	struct rdma_cm_id *listen, *id;
	CHECK(n, rdma_create_ep(&listen, passive, NULL, &qa) == 0, "passive endpoint");
	CHECK(n, listen->ps == RDMA_PS_UDP && listen->qp_type == IBV_QPT_UD, "a UD id");
	CHECK(n, rdma_listen(listen, 0) == 0, "listen");
	pthread_t t;
	pthread_create(&t, NULL, ud_sync_server, listen);
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(n, rdma_getaddrinfo("127.0.0.1", "7552", &hints, &res) == 0, "active info");
	CHECK(n, rdma_create_ep(&id, res, NULL, &qa) == 0, "active endpoint");
	struct rdma_conn_param cp = { .private_data = "sync ud", .private_data_len = 8 };
	CHECK(n, rdma_connect(id, &cp) == 0, "connect (returns once resolved)");
	CHECK(n, id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED &&
	      id->event->param.ud.qkey == RDMA_UDP_QKEY, "the event kept on the id");
	struct ibv_ah *ah = ibv_create_ah(id->pd, &id->event->param.ud.ah_attr);
	CHECK(n, ah, "ibv_create_ah");
	static char out[64] = "sync datagram";
	struct ibv_mr *mr = rdma_reg_msgs(id, out, sizeof out);
	CHECK(n, mr && rdma_post_ud_send(id, NULL, out, sizeof out, mr, 0, ah,
					 id->event->param.ud.qp_num) == 0, "send");
	struct ibv_wc wc;
	CHECK(n, rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "sent");
	pthread_join(t, NULL);
	ibv_destroy_ah(ah);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen);
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(passive);
	printf("ok %s\n", n);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CHECK\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	if (strcmp(argv[1], "errors") == 0)
		check_errors();
	else if (strcmp(argv[1], "channel") == 0)
		check_channel();
	else if (strcmp(argv[1], "destroy") == 0)
		check_destroy();
	else if (strcmp(argv[1], "getaddrinfo") == 0)
		check_getaddrinfo();
	else if (strcmp(argv[1], "connect") == 0)
		check_connect();
	else if (strcmp(argv[1], "sync") == 0)
		check_sync();
	else if (strcmp(argv[1], "ownqp") == 0)
		check_ownqp();
	else if (strcmp(argv[1], "drain") == 0)
		check_drain();
	else if (strcmp(argv[1], "ud") == 0)
		check_ud();
	else if (strcmp(argv[1], "udsync") == 0)
		check_ud_sync();
	else
		return 2;
	return 0;
}
