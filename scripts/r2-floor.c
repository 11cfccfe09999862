/*
 * The system-call floor of R2: a UDP ping-pong that makes ndverbs' system
 * calls for a one-way trip and does nothing else in user space.
 *
 *   r2-floor STEPS server|client LOCAL PEER ITERS
 *
 * STEPS picks what each side does, one letter per difference from a plain
 * ping-pong (sendto of 24 bytes, recv):
 *   r  receive with recvmsg and a control-message buffer (ndverbs: always)
 *   g  UDP_GRO on the socket (ndverbs: on unless the port is shared)
 *   s  send the 24-byte answer and a 20-byte ACK as one UDP GSO run
 *      (UDP_SEGMENT 24), as ndverbs' riding ACK does
 *   m  send with sendmmsg (ndverbs: every GSO run) instead of sendto/sendmsg
 * "p" (or any string without those letters) is the plain ping-pong.
 * Both sides use unconnected sockets bound to LOCAL:4792, IP_PMTUDISC_DO
 * and IP_RECVERR, as ndverbs' socket on 4791 does; they spin on
 * non-blocking receives. The client prints the median half round trip in
 * microseconds; the server echoes until it is killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define PORT 4792

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct steps {
	int recvmsg, gro, gso, mmsg;
};

static int send_one(int s, const struct steps *st, struct sockaddr_in *peer, char *out)
{
	if (!st->gso && !st->mmsg)
		return sendto(s, out, 24, 0, (struct sockaddr *)peer, sizeof *peer) < 0 ? -1 : 0;
	struct iovec iov = { out, st->gso ? 44 : 24 };
	char c[CMSG_SPACE(sizeof(uint16_t))];
	struct mmsghdr m;
	memset(&m, 0, sizeof m);
	memset(c, 0, sizeof c);
	m.msg_hdr.msg_name = peer;
	m.msg_hdr.msg_namelen = sizeof *peer;
	m.msg_hdr.msg_iov = &iov;
	m.msg_hdr.msg_iovlen = 1;
	if (st->gso) {
		m.msg_hdr.msg_control = c;
		m.msg_hdr.msg_controllen = sizeof c;
		struct cmsghdr *h = CMSG_FIRSTHDR(&m.msg_hdr);
		h->cmsg_level = SOL_UDP;
		h->cmsg_type = UDP_SEGMENT;
		h->cmsg_len = CMSG_LEN(sizeof(uint16_t));
		*(uint16_t *)CMSG_DATA(h) = 24;
	}
	if (st->mmsg)
		return sendmmsg(s, &m, 1, 0) == 1 ? 0 : -1;
	return sendmsg(s, &m.msg_hdr, 0) < 0 ? -1 : 0;
}

/* Spins until a datagram arrives; -1 on an error other than EAGAIN. */
static int recv_one(int s, const struct steps *st, char *in, size_t len)
{
	char cbuf[256];
	for (;;) {
		ssize_t n;
		if (st->recvmsg) {
			struct sockaddr_in from;
			struct iovec iov = { in, len };
			struct msghdr mh = { &from, sizeof from, &iov, 1, cbuf, sizeof cbuf, 0 };
			n = recvmsg(s, &mh, 0);
		} else {
			n = recv(s, in, len, 0);
		}
		if (n > 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
	}
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: r2-floor STEPS server|client LOCAL PEER ITERS\n");
		return 2;
	}
	struct steps st = {
		.recvmsg = strchr(argv[1], 'r') != NULL,
		.gro = strchr(argv[1], 'g') != NULL,
		.gso = strchr(argv[1], 's') != NULL,
		.mmsg = strchr(argv[1], 'm') != NULL,
	};
	int client = strcmp(argv[2], "client") == 0;
	long iters = atol(argv[5]);
	if (iters <= 0) {
		fprintf(stderr, "r2-floor: ITERS must be positive\n");
		return 2;
	}
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	if (inet_pton(AF_INET, argv[3], &me.sin_addr) != 1 ||
	    inet_pton(AF_INET, argv[4], &peer.sin_addr) != 1) {
		fprintf(stderr, "r2-floor: LOCAL and PEER are IPv4 addresses\n");
		return 2;
	}
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&me, sizeof me) != 0) {
		perror("r2-floor: socket");
		return 1;
	}
	int one = 1, pmtu = IP_PMTUDISC_DO;
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
	setsockopt(s, IPPROTO_IP, IP_RECVERR, &one, sizeof one);
	if (st.gro && setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) {
		perror("r2-floor: UDP_GRO");
		return 1;
	}
	char out[64], in[65536];
	memset(out, 0x5a, sizeof out);
	if (!client) {
		for (;;) {
			if (recv_one(s, &st, in, sizeof in) || send_one(s, &st, &peer, out)) {
				perror("r2-floor: server");
				return 1;
			}
		}
	}
	long warm = iters / 10 + 100;
	uint64_t *rtt = malloc(sizeof *rtt * (size_t)iters);
	if (!rtt)
		return 1;
	for (long i = 0; i < warm + iters; i++) {
		uint64_t t = now_ns();
		if (send_one(s, &st, &peer, out) || recv_one(s, &st, in, sizeof in)) {
			perror("r2-floor: client");
			return 1;
		}
		if (i >= warm)
			rtt[i - warm] = now_ns() - t;
	}
	qsort(rtt, (size_t)iters, sizeof *rtt, cmp_u64);
	printf("%.2f\n", (double)rtt[iters / 2] / 2000.0);
	return 0;
}
