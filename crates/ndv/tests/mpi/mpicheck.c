/*
 * An MPI checker for ndverbs' tests: point-to-point latency and bandwidth
 * between ranks 0 and 1 (the OSU micro-benchmarks are not packaged in
 * Debian 12), then collectives and one-sided operations with every result
 * checked. Built by the test with mpicc.
 *
 *   mpicheck [ITERATIONS [BW_SIZE]]
 *
 * Rank 0 prints one line per measurement and per check:
 *
 *   latency 8 B: 12.34 us (median 11.02 us)
 *   bandwidth 1048576 B: 2345.67 MB/s (median window 2456.78 MB/s)
 *   allreduce ok
 *   ...
 *   mpicheck ok (N ranks)
 *
 * Any wrong byte prints "FAIL <what>: ..." and aborts the job (non-zero
 * exit). Each rank says "mpicheck: rank R pid P" on stderr after MPI_Init.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

#define FAIL(...)                                                        \
	do {                                                             \
		fprintf(stderr, "FAIL rank %d: ", rank);                 \
		fprintf(stderr, __VA_ARGS__);                            \
		fprintf(stderr, "\n");                                   \
		fflush(stderr);                                          \
		MPI_Abort(MPI_COMM_WORLD, 2);                            \
	} while (0)

/* The byte at offset i of a message numbered seq from rank r. */
static unsigned char pattern(int r, long seq, size_t i)
{
	return (unsigned char)(r * 131 + seq * 7 + i * 13 + (i >> 8));
}

static void fill(unsigned char *b, size_t n, int r, long seq)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(r, seq, i);
}

static void verify(const unsigned char *b, size_t n, int r, long seq, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pattern(r, seq, i))
			FAIL("%s: byte %zu of message %ld from rank %d is %u, not %u", what, i,
			     seq, r, b[i], pattern(r, seq, i));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Ranks 0 and 1 bounce a message of n bytes iters times (after a warm-up);
 * every message is checked. Returns the half round trip in microseconds,
 * the mean, and its median in *med (on a shared host the mean carries
 * every time the scheduler looked away). */
static double pingpong(size_t n, int iters, double *med)
{
	unsigned char *out = malloc(n ? n : 1), *in = malloc(n ? n : 1);
	double *rtt = malloc(iters * sizeof *rtt);
	double t0 = 0, ti = 0;
	int warm = iters / 10 + 1;
	if (!out || !in || !rtt)
		FAIL("malloc");
	for (int i = -warm; i < iters; i++) {
		if (i == 0)
			t0 = MPI_Wtime();
		if (i > 0)
			rtt[i - 1] = MPI_Wtime() - ti;
		ti = MPI_Wtime();
		if (rank == 0) {
			fill(out, n, 0, i);
			MPI_Send(out, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(in, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			verify(in, n, 1, i, "ping-pong");
		} else if (rank == 1) {
			MPI_Recv(in, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			verify(in, n, 0, i, "ping-pong");
			fill(out, n, 1, i);
			MPI_Send(out, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	double end = MPI_Wtime();
	rtt[iters - 1] = end - ti;
	double us = (end - t0) * 1e6 / (2.0 * iters);
	*med = median(rtt, iters) * 1e6 / 2.0;
	free(out);
	free(in);
	free(rtt);
	return us;
}

/* Rank 0 streams windows of 32 messages of n bytes to rank 1, which
 * acknowledges each window, osu_bw's way. The last window's messages are
 * checked. Returns MB/s (10^6 bytes per second) over the whole run, and
 * over the median window in *med. */
static double bandwidth(size_t n, int iters, double *med)
{
	enum { WINDOW = 32 };
	unsigned char *buf = malloc(n * WINDOW);
	double *win = malloc(iters * sizeof *win);
	MPI_Request req[WINDOW];
	char ack = 0;
	double t0 = 0, ti = 0;
	int warm = iters / 10 + 1;
	if (!buf || !win)
		FAIL("malloc");
	for (int i = -warm; i < iters; i++) {
		int last = i == iters - 1;
		if (i == 0)
			t0 = MPI_Wtime();
		if (i > 0)
			win[i - 1] = MPI_Wtime() - ti;
		ti = MPI_Wtime();
		if (rank == 0) {
			if (last)
				for (int w = 0; w < WINDOW; w++)
					fill(buf + w * n, n, 0, w);
			for (int w = 0; w < WINDOW; w++)
				MPI_Isend(buf + w * n, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			if (last)
				memset(buf, 0, n * WINDOW);
			for (int w = 0; w < WINDOW; w++)
				MPI_Irecv(buf + w * n, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			if (last)
				for (int w = 0; w < WINDOW; w++)
					verify(buf + w * n, n, 0, w, "bandwidth");
			MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
		}
	}
	double end = MPI_Wtime();
	win[iters - 1] = end - ti;
	*med = (double)n * WINDOW / median(win, iters) / 1e6;
	free(buf);
	free(win);
	return (double)n * WINDOW * iters / (end - t0) / 1e6;
}

static void collectives(void)
{
	/* Allreduce: the sum over ranks of (rank + 1) * (i + 1), per element. */
	enum { N = 1000 };
	long *v = malloc(N * sizeof *v), *sum = malloc(N * sizeof *sum);
	if (!v || !sum)
		FAIL("malloc");
	for (int i = 0; i < N; i++)
		v[i] = (long)(rank + 1) * (i + 1);
	MPI_Allreduce(v, sum, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long ranks = (long)size * (size + 1) / 2;
	for (int i = 0; i < N; i++)
		if (sum[i] != ranks * (i + 1))
			FAIL("allreduce: element %d is %ld, not %ld", i, sum[i], ranks * (i + 1));
	free(v);
	free(sum);
	if (rank == 0)
		printf("allreduce ok\n");

	/* Bcast: 256 KiB from the last rank. */
	size_t n = 256 * 1024;
	unsigned char *b = malloc(n);
	if (!b)
		FAIL("malloc");
	if (rank == size - 1)
		fill(b, n, size - 1, 42);
	else
		memset(b, 0, n);
	MPI_Bcast(b, (int)n, MPI_BYTE, size - 1, MPI_COMM_WORLD);
	verify(b, n, size - 1, 42, "bcast");
	free(b);
	if (rank == 0)
		printf("bcast ok\n");

	/* Alltoall: block j of rank r is what r sends j; each receives 4 KiB
	 * from every rank. */
	size_t blk = 4096;
	unsigned char *s = malloc(blk * size), *r = malloc(blk * size);
	if (!s || !r)
		FAIL("malloc");
	for (int j = 0; j < size; j++)
		fill(s + j * blk, blk, rank, j);
	memset(r, 0, blk * size);
	MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
	for (int j = 0; j < size; j++)
		verify(r + j * blk, blk, j, rank, "alltoall");
	free(s);
	free(r);
	if (rank == 0)
		printf("alltoall ok\n");
}

static void one_sided(void)
{
	/* Each rank exposes 64 KiB; every rank puts a block into its right
	 * neighbour's window and gets one from its left neighbour's. */
	size_t blk = 16 * 1024, n = 4 * blk;
	unsigned char *win_mem, *got = malloc(blk), *mine = malloc(blk);
	MPI_Win win;
	if (!got || !mine)
		FAIL("malloc");
	if (MPI_Alloc_mem((MPI_Aint)n, MPI_INFO_NULL, &win_mem) != MPI_SUCCESS)
		FAIL("MPI_Alloc_mem");
	fill(win_mem, n, rank, 100);
	MPI_Win_create(win_mem, (MPI_Aint)n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	int right = (rank + 1) % size, left = (rank + size - 1) % size;
	fill(mine, blk, rank, 200);
	MPI_Win_fence(0, win);
	/* Into block 1 of the right neighbour; block 2 of the left one read. */
	MPI_Put(mine, (int)blk, MPI_BYTE, right, (MPI_Aint)blk, (int)blk, MPI_BYTE, win);
	MPI_Get(got, (int)blk, MPI_BYTE, left, (MPI_Aint)(2 * blk), (int)blk, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	verify(win_mem + blk, blk, left, 200, "put");
	for (size_t i = 0; i < blk; i++)
		if (got[i] != pattern(left, 100, 2 * blk + i))
			FAIL("get: byte %zu from rank %d is %u, not %u", i, left, got[i],
			     pattern(left, 100, 2 * blk + i));
	/* The blocks nobody wrote are untouched. */
	for (size_t i = 0; i < n; i++)
		if ((i < blk || i >= 2 * blk) && win_mem[i] != pattern(rank, 100, i))
			FAIL("window byte %zu changed", i);
	MPI_Win_free(&win);
	MPI_Free_mem(win_mem);
	free(got);
	free(mine);
	if (rank == 0)
		printf("put/get ok\n");
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	size_t bw_size = argc > 2 ? (size_t)atol(argv[2]) : 1 << 20;
	if (iters <= 0 || bw_size == 0) {
		fprintf(stderr, "usage: mpicheck [ITERATIONS [BW_SIZE]]\n");
		return 1;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		fprintf(stderr, "mpicheck needs at least 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	/* Who is where: a test kills one rank mid-transfer by its pid. */
	fprintf(stderr, "mpicheck: rank %d pid %ld\n", rank, (long)getpid());
	fflush(stderr);
	double lat_med, big_med, bw_med;
	double lat = pingpong(8, iters, &lat_med);
	double big = pingpong(bw_size, iters / 10 + 1, &big_med);
	double bw = bandwidth(bw_size, iters / 50 + 2, &bw_med);
	if (rank == 0) {
		printf("latency 8 B: %.2f us (median %.2f us)\n", lat, lat_med);
		printf("latency %zu B: %.2f us (median %.2f us)\n", bw_size, big, big_med);
		printf("bandwidth %zu B: %.2f MB/s (median window %.2f MB/s)\n", bw_size, bw,
		       bw_med);
		fflush(stdout);
	}
	collectives();
	one_sided();
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpicheck ok (%d ranks)\n", size);
	MPI_Finalize();
	return 0;
}
