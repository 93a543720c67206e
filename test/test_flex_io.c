/*
 * test_flex_io.c - the default I/O table (flex_io_posix), the loop helpers
 * and flex_strerror/flex_version.
 *
 * The batch calls have two implementations, io_uring and a pread/pwrite
 * loop, chosen once per process.  Behavioural tests therefore run their body
 * twice: in the test process (io_uring when the kernel allows it) and in a
 * forked child that sets FLEX_NO_IO_URING=1 before its first batch call.
 * The parent has already used its own ring by then, so the child also
 * exercises the per-process re-probe and the discarding of an inherited
 * ring.  Bodies report failure as a message rather than through cr_assert,
 * because a forked child must not talk to the Criterion runner.
 *
 * Random tests print their seed; FLEX_TEST_SEED=N replays one.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flex_common.h"
#include "flex_io.h"

/* More elements than the ring depth (64), so the in-flight window refills
 * several times within one batch. */
#define NELEM 300

static char tmpdir[64];

static void setup(void)
{
	strcpy(tmpdir, "/tmp/flex_io_test_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(tmpdir);
}

/* A broken ring (e.g. one shared with a forked child) tends to hang rather
 * than fail; the timeout turns that into a failure.  Forked children arm
 * their own alarm so that none is left behind. */
#ifndef TEST_TIMEOUT
#define TEST_TIMEOUT 120
#endif
TestSuite(flex_io, .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT);

/* ---- helpers ------------------------------------------------------------ */

static uint64_t test_seed(void)
{
	const char *s = getenv("FLEX_TEST_SEED");
	uint64_t seed;

	if (s && *s)
		seed = strtoull(s, NULL, 0);
	else
		seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	fprintf(stderr, "flex_io: seed %" PRIu64 " (FLEX_TEST_SEED=%" PRIu64 " replays)\n",
		seed, seed);
	return seed;
}

/* splitmix64: tiny, seedable, good enough to scatter offsets. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", tmpdir, name);
}

static int open_tmp(const char *name)
{
	char path[PATH_MAX];
	tmp_path(path, sizeof(path), name);
	return flex_io_posix()->open(flex_io_posix(), path, O_RDWR | O_CREAT | O_TRUNC, 0600);
}

/* Failure messages of test bodies; FAIL returns 1 from the body. */
struct why {
	char msg[256];
};

static int failf(struct why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(struct why *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
	va_end(ap);
	return 1;
}

#define CHECK(w, cond, ...)                               \
	do {                                              \
		if (!(cond))                              \
			return failf((w), __VA_ARGS__);   \
	} while (0)

/* Size of element i: mostly small, some large, a few empty. */
static size_t elem_size(uint64_t *s)
{
	uint64_t k = rnd(s) % 100;
	if (k < 3)
		return 0;
	if (k < 10)
		return 65536 + rnd(s) % 200000;
	return 1 + rnd(s) % 8192;
}

/*
 * Writes n scattered, non-overlapping elements of random size at random
 * offsets above `base` in one write_batch (in shuffled order), checks them
 * with plain pread, then reads them back with one read_batch.
 */
static int roundtrip(int fd, uint64_t base, uint64_t seed, int n, struct why *w)
{
	const struct flex_io *io = flex_io_posix();
	struct flex_iovec *v = calloc((size_t)n, sizeof(*v));
	struct flex_iovec *r = calloc((size_t)n, sizeof(*r));
	uint64_t s = seed, off = base;
	int rc = 0;

	CHECK(w, v && r, "out of memory");
	for (int i = 0; i < n; i++) {
		off += rnd(&s) % 10000; /* a gap, so elements are scattered */
		v[i].len = elem_size(&s);
		v[i].off = off;
		off += v[i].len;
		v[i].buf = malloc(v[i].len ? v[i].len : 1);
		r[i].buf = malloc(v[i].len ? v[i].len : 1);
		CHECK(w, v[i].buf && r[i].buf, "out of memory");
		for (size_t j = 0; j < v[i].len; j++)
			((unsigned char *)v[i].buf)[j] = (unsigned char)rnd(&s);
	}
	/* Shuffle so that submission order is not file order. */
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(rnd(&s) % (uint64_t)(i + 1));
		struct flex_iovec t = v[i];
		v[i] = v[j];
		v[j] = t;
		void *b = r[i].buf;
		r[i].buf = r[j].buf;
		r[j].buf = b;
	}
	int e = io->write_batch(io, fd, v, n);
	if (e != 0) {
		rc = failf(w, "write_batch: %d (%s)", e, flex_strerror(e));
		goto out;
	}
	for (int i = 0; i < n && !rc; i++) {
		e = flex_io_read_full(io, fd, r[i].buf, v[i].len, v[i].off);
		if (e != 0)
			rc = failf(w, "read_full of element %d: %s", i, flex_strerror(e));
		else if (v[i].len && memcmp(r[i].buf, v[i].buf, v[i].len) != 0)
			rc = failf(w, "element %d differs after write_batch (seed %" PRIu64 ")", i,
				   seed);
	}
	if (rc)
		goto out;
	for (int i = 0; i < n; i++) {
		memset(r[i].buf, 0xAA, v[i].len);
		r[i].len = v[i].len;
		r[i].off = v[i].off;
	}
	e = io->read_batch(io, fd, r, n);
	if (e != 0) {
		rc = failf(w, "read_batch: %d (%s)", e, flex_strerror(e));
		goto out;
	}
	for (int i = 0; i < n && !rc; i++)
		if (v[i].len && memcmp(r[i].buf, v[i].buf, v[i].len) != 0)
			rc = failf(w, "element %d differs after read_batch (seed %" PRIu64 ")", i,
				   seed);
out:
	for (int i = 0; i < n; i++) {
		free(v[i].buf);
		free(r[i].buf);
	}
	free(v);
	free(r);
	return rc;
}

/* Runs body in a forked child; with no_uring, the child sets
 * FLEX_NO_IO_URING=1 before its first batch call. */
static void run_in_child(int (*body)(struct why *, void *), void *arg, int no_uring)
{
	int pipefd[2];
	cr_assert_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct why w = {""};
		int rc;
		alarm(TEST_TIMEOUT);
		close(pipefd[0]);
		if (no_uring)
			setenv("FLEX_NO_IO_URING", "1", 1);
		if (no_uring && flex_io_uring_active())
			rc = failf(&w, "FLEX_NO_IO_URING=1 did not disable io_uring in the child");
		else
			rc = body(&w, arg);
		if (rc && write(pipefd[1], w.msg, strlen(w.msg)) < 0)
			rc = 2;
		_exit(rc ? 1 : 0);
	}
	close(pipefd[1]);
	char msg[257] = "";
	ssize_t got = read(pipefd[0], msg, sizeof(msg) - 1);
	msg[got > 0 ? got : 0] = '\0';
	close(pipefd[0]);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed: %s", msg);
}

static void run_in_fallback_child(int (*body)(struct why *, void *), void *arg)
{
	run_in_child(body, arg, 1);
}

/* Runs body here (io_uring when available), then in a fallback child, then
 * here again to show the child did not disturb this process's ring. */
static void run_both_paths(int (*body)(struct why *, void *), void *arg)
{
	struct why w = {""};
	if (!getenv("FLEX_NO_IO_URING") && !flex_io_uring_active())
		fprintf(stderr, "warning: io_uring is unavailable here; both runs use the fallback\n");
	cr_assert_eq(body(&w, arg), 0, "%s", w.msg);
	run_in_fallback_child(body, arg);
	cr_assert_eq(body(&w, arg), 0, "after fork: %s", w.msg);
}

/* ---- batches ------------------------------------------------------------ */

static int body_roundtrip(struct why *w, void *arg)
{
	uint64_t seed = *(uint64_t *)arg;
	int fd = open_tmp(flex_io_uring_active() ? "rt_uring" : "rt_fallback");
	int rc;
	CHECK(w, fd >= 0, "open: %s", flex_strerror(fd));
	rc = roundtrip(fd, 0, seed, NELEM, w);
	/* The same ring again: nothing may be left over from the last call. */
	if (!rc)
		rc = roundtrip(fd, 1u << 20, seed + 1, NELEM, w);
	flex_io_posix()->close(flex_io_posix(), fd);
	return rc;
}

Test(flex_io, batch_roundtrip_of_scattered_iovecs_in_both_paths)
{
	uint64_t seed = test_seed();
	run_both_paths(body_roundtrip, &seed);
}

Test(flex_io, fallback_is_forced_by_env_in_a_fresh_process)
{
	/* The child has never probed: the env var alone decides. */
	uint64_t seed = test_seed();
	run_in_fallback_child(body_roundtrip, &seed);
}

static int body_fork_child_own_ring(struct why *w, void *arg)
{
	(void)arg;
	int fd = open_tmp("fork_child");
	CHECK(w, fd >= 0, "open: %s", flex_strerror(fd));
	return roundtrip(fd, 0, 7, 100, w);
}

Test(flex_io, forked_child_does_not_reuse_the_parents_ring)
{
	struct why w = {""};
	int fd = open_tmp("fork_parent");
	cr_assert_geq(fd, 0);
	cr_assert_eq(roundtrip(fd, 0, 1, 100, &w), 0, "%s", w.msg);
	/* Sharing the parent's ring would hang or corrupt both processes. */
	run_in_child(body_fork_child_own_ring, NULL, 0);
	cr_assert_eq(roundtrip(fd, 0, 2, 100, &w), 0, "parent after fork: %s", w.msg);
	close(fd);
}

struct ringless {
	int fd;
	int rc;
	struct why w;
};

static void *ringless_main(void *p)
{
	struct ringless *r = p;
	r->rc = roundtrip(r->fd, 0, 3, 100, &r->w);
	return NULL;
}

/* With io_uring active, a thread that cannot create its own ring (here: no
 * descriptor left for it) must still get its batches done. */
static int body_ringless_thread(struct why *w, void *arg)
{
	(void)arg;
	struct ringless r = {.fd = open_tmp("ringless")};
	struct rlimit rl;
	pthread_t th;
	int rc;

	CHECK(w, r.fd >= 0, "open: %s", flex_strerror(r.fd));
	if (!flex_io_uring_active())
		return 0; /* nothing to fall back from */
	CHECK(w, getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
	rl.rlim_cur = rl.rlim_max < 256 ? rl.rlim_max : 256;
	CHECK(w, setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
	while (dup(r.fd) >= 0)
		;
	CHECK(w, errno == EMFILE, "dup stopped with %s", strerror(errno));
	CHECK(w, pthread_create(&th, NULL, ringless_main, &r) == 0, "pthread_create");
	pthread_join(th, NULL);
	rc = r.rc ? failf(w, "ringless thread: %s", r.w.msg) : 0;
	return rc;
}

Test(flex_io, thread_whose_ring_cannot_be_created_falls_back)
{
	run_in_child(body_ringless_thread, NULL, 0);
}

static int body_eof(struct why *w, void *arg)
{
	const struct flex_io *io = flex_io_posix();
	char data[100], buf[4096];
	int fd = open_tmp("eof"), e;
	(void)arg;
	CHECK(w, fd >= 0, "open: %s", flex_strerror(fd));
	memset(data, 'x', sizeof(data));
	CHECK(w, flex_io_write_full(io, fd, data, sizeof(data), 0) == 0, "write_full");

	/* Straddling the end: a short transfer, then nothing. */
	struct flex_iovec straddle = {buf, 200, 50};
	e = io->read_batch(io, fd, &straddle, 1);
	CHECK(w, e == -ENODATA, "straddling EOF: %d, want -ENODATA", e);

	/* Entirely beyond the end. */
	struct flex_iovec beyond = {buf, 10, 1000};
	e = io->read_batch(io, fd, &beyond, 1);
	CHECK(w, e == -ENODATA, "beyond EOF: %d, want -ENODATA", e);

	/* Among good elements, more than a ring's worth of them. */
	struct flex_iovec v[100];
	for (int i = 0; i < 100; i++)
		v[i] = (struct flex_iovec){buf + i, 1, (uint64_t)i};
	e = io->read_batch(io, fd, v, 100);
	CHECK(w, e == 0, "exactly up to EOF: %d", e);
	v[70].off = 100;
	e = io->read_batch(io, fd, v, 100);
	CHECK(w, e == -ENODATA, "one element at EOF: %d, want -ENODATA", e);

	/* Up to the end exactly is fine. */
	struct flex_iovec exact = {buf, 100, 0};
	CHECK(w, io->read_batch(io, fd, &exact, 1) == 0, "exact read failed");
	CHECK(w, memcmp(buf, data, 100) == 0, "exact read differs");
	io->close(io, fd);
	return 0;
}

Test(flex_io, read_past_eof_gives_enodata)
{
	run_both_paths(body_eof, NULL);
}

static int body_badfd(struct why *w, void *arg)
{
	const struct flex_io *io = flex_io_posix();
	char buf[64] = {0};
	struct flex_iovec v[3] = {{buf, 10, 0}, {buf + 10, 10, 100}, {buf + 20, 10, 4096}};
	int e;
	(void)arg;

	e = io->read_batch(io, -1, v, 3);
	CHECK(w, e == -EBADF, "read_batch(-1): %d, want -EBADF", e);
	e = io->write_batch(io, -1, v, 3);
	CHECK(w, e == -EBADF, "write_batch(-1): %d, want -EBADF", e);

	/* Writing through a read-only descriptor. */
	char path[PATH_MAX];
	tmp_path(path, sizeof(path), "ro");
	int fd = io->open(io, path, O_RDWR | O_CREAT, 0600);
	CHECK(w, fd >= 0, "open: %s", flex_strerror(fd));
	io->close(io, fd);
	fd = io->open(io, path, O_RDONLY, 0);
	CHECK(w, fd >= 0, "open ro: %s", flex_strerror(fd));
	e = io->write_batch(io, fd, v, 3);
	CHECK(w, e == -EBADF, "write_batch on O_RDONLY: %d, want -EBADF", e);
	io->close(io, fd);
	return 0;
}

Test(flex_io, bad_fd_gives_ebadf_not_a_crash)
{
	run_both_paths(body_badfd, NULL);
}

Test(flex_io, batch_argument_checks)
{
	const struct flex_io *io = flex_io_posix();
	char buf[16];
	int fd = open_tmp("args");
	cr_assert_geq(fd, 0);
	struct flex_iovec v = {buf, sizeof(buf), 0};

	cr_assert_eq(io->write_batch(io, fd, &v, 0), 0);
	cr_assert_eq(io->read_batch(io, fd, NULL, 0), 0);
	cr_assert_eq(io->write_batch(io, fd, &v, -1), -EINVAL);
	cr_assert_eq(io->write_batch(io, fd, NULL, 1), -EINVAL);
	/* (uint64_t)-1 would mean "current position" to io_uring. */
	v.off = UINT64_MAX;
	cr_assert_eq(io->write_batch(io, fd, &v, 1), -EINVAL);
	v.off = (uint64_t)INT64_MAX - 4;
	cr_assert_eq(io->read_batch(io, fd, &v, 1), -EINVAL);
	/* Zero-length elements transfer nothing and succeed. */
	struct flex_iovec empty[2] = {{NULL, 0, 0}, {buf, 0, 12345}};
	cr_assert_eq(io->read_batch(io, fd, empty, 2), 0);
	cr_assert_eq(io->write_batch(io, fd, empty, 2), 0);
	uint64_t size = 1;
	cr_assert_eq(io->fsize(io, fd, &size), 0);
	cr_assert_eq(size, 0);
	io->close(io, fd);
}

/* ---- concurrency -------------------------------------------------------- */

struct worker {
	int fd;
	int id;
	uint64_t seed;
	int rc;
	struct why w;
};

static void *worker_main(void *p)
{
	struct worker *wk = p;
	/* Disjoint 256 MiB regions of one shared file. */
	for (int it = 0; it < 4 && !wk->rc; it++)
		wk->rc = roundtrip(wk->fd, (uint64_t)wk->id << 28,
				   wk->seed + (uint64_t)(wk->id * 100 + it), 150, &wk->w);
	return NULL;
}

static int body_threads(struct why *w, void *arg)
{
	struct worker wk[4];
	pthread_t th[4];
	int fd = open_tmp("threads");
	CHECK(w, fd >= 0, "open: %s", flex_strerror(fd));
	for (int i = 0; i < 4; i++) {
		wk[i] = (struct worker){.fd = fd, .id = i, .seed = *(uint64_t *)arg};
		CHECK(w, pthread_create(&th[i], NULL, worker_main, &wk[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	close(fd);
	for (int i = 0; i < 4; i++)
		CHECK(w, wk[i].rc == 0, "thread %d: %s", i, wk[i].w.msg);
	return 0;
}

Test(flex_io, concurrent_batches_from_four_threads)
{
	uint64_t seed = test_seed();
	run_both_paths(body_threads, &seed);
}

/* ---- single operations and loop helpers --------------------------------- */

Test(flex_io, file_operations_basics)
{
	const struct flex_io *io = flex_io_posix();
	char path[PATH_MAX];
	uint64_t size = 0;
	int fd, e;

	tmp_path(path, sizeof(path), "missing");
	cr_assert_eq(io->open(io, path, O_RDONLY, 0), -ENOENT);

	fd = open_tmp("basics");
	cr_assert_geq(fd, 0);
	cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC, "descriptors are close-on-exec");

	cr_assert_eq(io->pwrite(io, fd, "hello", 5, 10), 5);
	cr_assert_eq(io->fsize(io, fd, &size), 0);
	cr_assert_eq(size, 15);
	char buf[16] = {0};
	cr_assert_eq(io->pread(io, fd, buf, sizeof(buf), 10), 5, "short read at end of file");
	cr_assert_str_eq(buf, "hello");
	cr_assert_eq(io->pread(io, fd, buf, 4, 100), 0);

	cr_assert_eq(io->fsync(io, fd), 0);
	cr_assert_eq(io->fdatasync(io, fd), 0);

	cr_assert_eq(io->ftruncate(io, fd, 12345), 0);
	cr_assert_eq(io->fsize(io, fd, &size), 0);
	cr_assert_eq(size, 12345);
	cr_assert_eq(io->ftruncate(io, fd, 3), 0);
	cr_assert_eq(io->fsize(io, fd, &size), 0);
	cr_assert_eq(size, 3);
	cr_assert_eq(io->ftruncate(io, fd, UINT64_MAX), -EINVAL);

	e = io->fallocate(io, fd, 0, 0, 1 << 20);
	if (e == -EOPNOTSUPP) {
		fprintf(stderr, "warning: fallocate unsupported on %s\n", tmpdir);
	} else {
		cr_assert_eq(e, 0, "fallocate: %s", flex_strerror(e));
		cr_assert_eq(io->fsize(io, fd, &size), 0);
		cr_assert_eq(size, 1 << 20);
		cr_assert_eq(io->fallocate(io, fd, FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20), 0);
		cr_assert_eq(io->fsize(io, fd, &size), 0);
		cr_assert_eq(size, 1 << 20, "KEEP_SIZE leaves the size alone");
	}
	cr_assert_eq(io->fallocate(io, fd, 0, 0, 0), -EINVAL);

	cr_assert_eq(io->close(io, fd), 0);
	cr_assert_eq(io->close(io, fd), -EBADF);
	cr_assert_eq(io->fsync(io, fd), -EBADF);
	cr_assert_eq(io->fdatasync(io, fd), -EBADF);
	cr_assert_eq(io->fsize(io, fd, &size), -EBADF);
	cr_assert_eq(io->pread(io, fd, buf, 1, 0), -EBADF);
	cr_assert_eq(io->pwrite(io, fd, buf, 1, 0), -EBADF);
	cr_assert_eq(io->ftruncate(io, fd, 0), -EBADF);
}

Test(flex_io, read_full_and_write_full_transfer_everything)
{
	const struct flex_io *io = flex_io_posix();
	size_t len = 3 << 20;
	unsigned char *a = malloc(len), *b = malloc(len);
	uint64_t s = test_seed();
	int fd = open_tmp("full");

	cr_assert(a && b && fd >= 0);
	for (size_t i = 0; i < len; i++)
		a[i] = (unsigned char)rnd(&s);
	cr_assert_eq(flex_io_write_full(io, fd, a, len, 4096), 0);
	cr_assert_eq(flex_io_read_full(io, fd, b, len, 4096), 0);
	cr_assert_eq(memcmp(a, b, len), 0);
	cr_assert_eq(flex_io_read_full(io, fd, b, 10, len + 4096 - 5), -ENODATA);
	cr_assert_eq(flex_io_read_full(io, fd, b, 0, 1u << 30), 0, "empty read anywhere");
	cr_assert_eq(flex_io_read_full(io, -1, b, 10, 0), -EBADF);
	cr_assert_eq(flex_io_write_full(io, -1, a, 10, 0), -EBADF);
	cr_assert_eq(flex_io_read_full(NULL, fd, b, 10, 0), -EINVAL);
	cr_assert_eq(flex_io_write_full(io, fd, a, 10, UINT64_MAX), -EINVAL);
	close(fd);
	free(a);
	free(b);
}

/* A table that transfers at most 7 bytes per call, or none at all. */
static ssize_t stingy_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	size_t cap = *(const size_t *)io->ctx;
	if (cap == 0)
		return 0;
	return flex_io_posix()->pread(flex_io_posix(), fd, buf, len < cap ? len : cap, off);
}

static ssize_t stingy_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
			     uint64_t off)
{
	size_t cap = *(const size_t *)io->ctx;
	if (cap == 0)
		return 0;
	return flex_io_posix()->pwrite(flex_io_posix(), fd, buf, len < cap ? len : cap, off);
}

Test(flex_io, full_helpers_loop_over_short_transfers_and_stop_on_no_progress)
{
	size_t cap = 7;
	struct flex_io stingy = *flex_io_posix();
	stingy.pread = stingy_pread;
	stingy.pwrite = stingy_pwrite;
	stingy.ctx = &cap;

	char out[1000], in[1000];
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (char)(i * 31);
	int fd = open_tmp("stingy");
	cr_assert_geq(fd, 0);
	cr_assert_eq(flex_io_write_full(&stingy, fd, out, sizeof(out), 3), 0);
	cr_assert_eq(flex_io_read_full(&stingy, fd, in, sizeof(in), 3), 0);
	cr_assert_eq(memcmp(in, out, sizeof(in)), 0);

	cap = 0;
	cr_assert_eq(flex_io_write_full(&stingy, fd, out, 10, 0), -EIO, "0 from pwrite is -EIO");
	cr_assert_eq(flex_io_read_full(&stingy, fd, in, 10, 0), -ENODATA);
	close(fd);
}

Test(flex_io, posix_table_is_static_and_complete)
{
	const struct flex_io *io = flex_io_posix();
	cr_assert_not_null(io);
	cr_assert_eq(io, flex_io_posix());
	cr_assert_eq(flex_io_check(io), 0);
	int a = flex_io_uring_active();
	cr_assert(a == 0 || a == 1);
	cr_assert_eq(a, flex_io_uring_active(), "probed once");
	/* A table missing any one operation is incomplete, but for the
	 * advisory writeback. */
	cr_assert_eq(flex_io_check(NULL), FLEX_EOPTION);
	size_t nops = offsetof(struct flex_io, ctx) / sizeof(void (*)(void));
	size_t wb = offsetof(struct flex_io, writeback) / sizeof(void (*)(void));
	for (size_t i = 0; i < nops; i++) {
		struct flex_io t = *io;
		memset((char *)&t + i * sizeof(void (*)(void)), 0, sizeof(void (*)(void)));
		cr_assert_eq(flex_io_check(&t), i == wb ? 0 : FLEX_EOPTION, "operation %zu unset",
			     i);
	}
}

Test(flex_io, writeback_starts_a_range_and_checks_its_arguments)
{
	const struct flex_io *io = flex_io_posix();
	cr_assert_not_null(io->writeback);
	char path[128];
	snprintf(path, sizeof(path), "%s/wb", tmpdir);
	int fd = io->open(io, path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	static uint8_t buf[1 << 16];
	memset(buf, 'w', sizeof(buf));
	cr_assert_eq(flex_io_write_full(io, fd, buf, sizeof(buf), 0), 0);
	cr_assert_eq(io->writeback(io, fd, 0, sizeof(buf)), 0);
	cr_assert_eq(io->writeback(io, fd, 4096, 8192), 0);
	/* Past the end is nothing to start; not an error. */
	cr_assert_eq(io->writeback(io, fd, 1 << 20, 4096), 0);
	cr_assert_eq(io->writeback(io, fd, UINT64_MAX - 10, 100), -EINVAL);
	cr_assert_eq(io->writeback(io, fd, 0, UINT64_MAX), -EINVAL);
	/* It makes nothing durable and changes nothing: the bytes read back
	 * and a sync still works. */
	uint8_t back[sizeof(buf)];
	cr_assert_eq(flex_io_read_full(io, fd, back, sizeof(back), 0), 0);
	cr_assert_eq(memcmp(back, buf, sizeof(buf)), 0);
	cr_assert_eq(io->fdatasync(io, fd), 0);
	cr_assert_eq(io->close(io, fd), 0);
	cr_assert_eq(io->writeback(io, -1, 0, 4096), -EBADF);
	cr_assert_eq(io->unlink(io, path), 0);
}

static int count_names(void *arg, const char *name)
{
	cr_assert(strcmp(name, ".") && strcmp(name, ".."));
	return ++*(int *)arg == 100 ? 7 : 0;
}

Test(flex_io, names_make_list_rename_remove_and_lock)
{
	const struct flex_io *io = flex_io_posix();
	char d[300], f[320], g[320];
	snprintf(d, sizeof(d), "%s/sub", tmpdir);
	snprintf(f, sizeof(f), "%s/a", d);
	snprintf(g, sizeof(g), "%s/b", d);
	cr_assert_eq(io->mkdir(io, d, 0755), 0);
	cr_assert_eq(io->mkdir(io, d, 0755), -EEXIST);
	int n = 0;
	cr_assert_eq(io->list(io, d, count_names, &n), 0);
	cr_assert_eq(n, 0, "an empty directory lists nothing");
	int fd = io->open(io, f, O_RDWR | O_CREAT, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(io->list(io, d, count_names, &n), 0);
	cr_assert_eq(n, 1);
	/* Locks: exclusive once; a second descriptor is refused either way. */
	int fd2 = io->open(io, f, O_RDONLY, 0);
	cr_assert_geq(fd2, 0);
	cr_assert_eq(io->lock(io, fd, 1), 0);
	cr_assert_eq(io->lock(io, fd2, 0), -EWOULDBLOCK);
	cr_assert_eq(io->lock(io, fd2, 1), -EWOULDBLOCK);
	io->close(io, fd);
	cr_assert_eq(io->lock(io, fd2, 0), 0, "closing drops the lock");
	io->close(io, fd2);
	cr_assert_eq(io->lock(io, -1, 0), -EBADF);
	cr_assert_eq(io->rename(io, f, g), 0);
	cr_assert_eq(access(f, F_OK), -1);
	cr_assert_eq(io->rename(io, f, g), -ENOENT);
	cr_assert_eq(io->rmdir(io, d), -ENOTEMPTY);
	cr_assert_eq(io->unlink(io, g), 0);
	cr_assert_eq(io->unlink(io, g), -ENOENT);
	/* fn's nonzero return stops the listing and is returned. */
	for (int i = 0; i < 150; i++) {
		char p[340];
		snprintf(p, sizeof(p), "%s/n%d", d, i);
		cr_assert_eq(io->mkdir(io, p, 0755), 0);
	}
	n = 0;
	cr_assert_eq(io->list(io, d, count_names, &n), 7);
	cr_assert_eq(n, 100);
	for (int i = 0; i < 150; i++) {
		char p[340];
		snprintf(p, sizeof(p), "%s/n%d", d, i);
		cr_assert_eq(io->rmdir(io, p), 0);
	}
	cr_assert_eq(io->rmdir(io, d), 0);
	cr_assert_eq(io->list(io, d, count_names, &n), -ENOENT);
	cr_assert_eq(io->rmdir(io, d), -ENOENT);
}

/* ---- status text and version -------------------------------------------- */

Test(flex_io, strerror_describes_every_code)
{
	static const int codes[] = {FLEX_ECORRUPT, FLEX_EBUSY,   FLEX_EFAILED,  FLEX_EVERSION,
				    FLEX_ETOOBIG,  FLEX_EOPTION, FLEX_EREADONLY};
	size_t n = sizeof(codes) / sizeof(codes[0]);

	for (size_t i = 0; i < n; i++) {
		const char *s = flex_strerror(codes[i]);
		cr_assert_not_null(s);
		cr_assert_gt(strlen(s), 10, "code %d", codes[i]);
		cr_assert_null(strstr(s, "unknown"), "code %d has no text", codes[i]);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(s, flex_strerror(codes[j]), "codes share text");
	}
	cr_assert_str_eq(flex_strerror(FLEX_EBUSY),
			 "store or file is in use by another handle or process");
	cr_assert_str_eq(flex_strerror(0), "success");
	cr_assert_str_eq(flex_strerror(-ENOENT), "No such file or directory");
	cr_assert_str_eq(flex_strerror(-ENODATA), strerrordesc_np(ENODATA));
	cr_assert_not_null(strstr(flex_strerror(1), "not an error"));
	cr_assert_not_null(strstr(flex_strerror(INT_MAX), "not an error"));
	cr_assert_str_eq(flex_strerror(-99999), "unknown error");
	cr_assert_str_eq(flex_strerror(INT_MIN), "unknown error");
	cr_assert_not_null(strstr(flex_strerror(FLEX_ERANGE_LAST), "unknown"));
	cr_assert_not_null(strstr(flex_strerror(-10050), "unknown"));
	/* Static: the same pointer every time. */
	cr_assert_eq(flex_strerror(FLEX_ECORRUPT), flex_strerror(FLEX_ECORRUPT));
}

Test(flex_io, version_matches_macros)
{
	int ma = -1, mi = -1, pa = -1;
	cr_assert_str_eq(flex_version(&ma, &mi, &pa), FLEX_VERSION_STRING);
	cr_assert_eq(ma, FLEX_VERSION_MAJOR);
	cr_assert_eq(mi, FLEX_VERSION_MINOR);
	cr_assert_eq(pa, FLEX_VERSION_PATCH);
	cr_assert_str_eq(flex_version(NULL, NULL, NULL), FLEX_VERSION_STRING);
	char buf[32];
	snprintf(buf, sizeof(buf), "%d.%d.%d", ma, mi, pa);
	cr_assert_str_eq(buf, FLEX_VERSION_STRING);
	cr_assert_eq(FLEX_VERSION_NUMBER, ma * 10000 + mi * 100 + pa);
}
