/*
 * test_flextree_file.c - Criterion suite for FlexTree (include/flextree.h),
 * the tree in a file: commit and reopen, crashes, failed commits, damaged
 * files, locking and slot recycling.  The in-memory tests are in
 * test_flextree.c; the model and helpers are in flextree_model.h.
 *
 * Like test_flextree.c, this suite is built twice by `make test`: against the
 * normal tree and, as test_flextree_file_tiny, against tiny node capacities.
 *
 * Every test works in a fresh directory under /tmp.  Crashes are simulated
 * three ways: a forked child that _exit()s without committing, a child
 * killed with SIGKILL between commits, and an I/O table (flex_io.h) that
 * fails every write and sync from the Nth call on, which leaves the file
 * exactly as the last completed commit left it.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "flextree.h"
#include "lib/flextree_model.h"
/* After the model, which tells the tiny build by -DFT_LEAF_CAP. */
#include "../flextree/flextree_int.h"

static void model_copy(struct model *dst, const struct model *src)
{
	model_reserve(dst, src->n);
	if (src->n)
		memcpy(dst->v, src->v, src->n * sizeof(*src->v));
	dst->n = src->n;
	dst->size = src->size;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void tmpd_make(struct tmpd *d)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/flextree-test-XXXXXX");
	cr_assert_not_null(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
	snprintf(d->path, sizeof(d->path), "%s/tree", d->dir);
}

static void tmpd_remove(struct tmpd *d)
{
	nftw(d->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

/* The file's slot size (docs/FORMAT.md): two header copies, then nodes. */
#define SLOT 4096u

/* ------------------------------------------------------------------------ */
/* Files and faults                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t file_size(const char *path)
{
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0, "stat(%s): %s", path, strerror(errno));
	return (uint64_t)sb.st_size;
}

static void xor_bytes(const char *path, uint64_t off, size_t len, uint8_t x)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open(%s): %s", path, strerror(errno));
	uint8_t buf[SLOT];
	cr_assert_leq(len, sizeof(buf));
	cr_assert_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len, "pread");
	for (size_t i = 0; i < len; i++)
		buf[i] ^= x;
	cr_assert_eq(pwrite(fd, buf, len, (off_t)off), (ssize_t)len, "pwrite");
	close(fd);
}

static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(in >= 0 && out >= 0, "copy %s -> %s: %s", from, to, strerror(errno));
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
}

/* An I/O table that fails every write, sync, truncate and allocate from the
 * fail_at-th such call on (-1: never).  Reads pass through, so the file stays
 * exactly as the last completed write left it: a process crash, in-process. */
struct fault_ctx {
	long calls;
	long fail_at;
	int nosync; /* syncs succeed without syncing: for tests of memory, not
		     * durability, that commit thousands of times */
};

static const struct flex_io *px(void)
{
	return flex_io_posix();
}

static bool fault_hit(const struct flex_io *io)
{
	struct fault_ctx *c = io->ctx;
	long n = c->calls++;
	return c->fail_at >= 0 && n >= c->fail_at;
}

static int f_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	return px()->open(px(), path, flags, mode);
}

static int f_close(const struct flex_io *io, int fd)
{
	(void)io;
	return px()->close(px(), fd);
}

static ssize_t f_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	(void)io;
	return px()->pread(px(), fd, buf, len, off);
}

static ssize_t f_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len, uint64_t off)
{
	if (fault_hit(io))
		return -EIO;
	return px()->pwrite(px(), fd, buf, len, off);
}

static int f_fsync(const struct flex_io *io, int fd)
{
	if (fault_hit(io))
		return -EIO;
	return ((struct fault_ctx *)io->ctx)->nosync ? 0 : px()->fsync(px(), fd);
}

static int f_fdatasync(const struct flex_io *io, int fd)
{
	if (fault_hit(io))
		return -EIO;
	return ((struct fault_ctx *)io->ctx)->nosync ? 0 : px()->fdatasync(px(), fd);
}

static int f_ftruncate(const struct flex_io *io, int fd, uint64_t size)
{
	if (fault_hit(io))
		return -EIO;
	return px()->ftruncate(px(), fd, size);
}

static int f_fallocate(const struct flex_io *io, int fd, int mode, uint64_t off, uint64_t len)
{
	if (fault_hit(io))
		return -EIO;
	return px()->fallocate(px(), fd, mode, off, len);
}

static int f_fsize(const struct flex_io *io, int fd, uint64_t *size)
{
	(void)io;
	return px()->fsize(px(), fd, size);
}

static int f_write_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	if (fault_hit(io))
		return -EIO;
	return px()->write_batch(px(), fd, v, n);
}

static int f_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	return px()->read_batch(px(), fd, v, n);
}

static void fault_io_init(struct flex_io *io, struct fault_ctx *c)
{
	c->calls = 0;
	c->fail_at = -1;
	c->nosync = 0;
	/* Names pass through: the tree file never makes or removes one. */
	*io = *px();
	io->open = f_open;
	io->close = f_close;
	io->pread = f_pread;
	io->pwrite = f_pwrite;
	io->fsync = f_fsync;
	io->fdatasync = f_fdatasync;
	io->ftruncate = f_ftruncate;
	io->fallocate = f_fallocate;
	io->fsize = f_fsize;
	io->write_batch = f_write_batch;
	io->read_batch = f_read_batch;
	io->ctx = c;
}

static void fault_arm(struct fault_ctx *c, long at)
{
	c->calls = 0;
	c->fail_at = at;
}

/* ======================================================================== */
/* Persistence                                                                */
/* ======================================================================== */

Test(flextree, new_file_is_created_committed_as_version_one)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.version, 1);
	cr_expect_eq(st.size, 0);
	cr_expect_geq(st.file_bytes, 2 * SLOT);
	cr_expect_eq(st.dirty_nodes, 0);
	assert_check(t);
	cr_expect_eq(flextree_close(t), 0);
	cr_expect_geq(file_size(d.path), 2 * SLOT);
	t = open_ok(d.path, NULL);
	cr_expect_eq(stats_of(t).version, 1);
	cr_expect_eq(flextree_size(t), 0);
	flextree_close(t);
	tmpd_remove(&d);
}

Test(flextree, commit_then_reopen_equals_model)
{
	uint64_t seed = test_seed("commit_then_reopen_equals_model");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct opcfg cfg = {0, 0, TINY ? 400 : 3000};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);

	for (int i = 0; i < 3000; i++) {
		int e = random_op(&r, &m, t, &cfg, NULL);
		cr_assert_eq(e, 0, "op %d (line %d, seed=%llu)", i, e, U(seed));
	}
	struct flextree_stats st = stats_of(t);
	uint64_t c0 = st.commits, b0 = st.bytes_written;
	cr_expect_gt(st.dirty_nodes, 0);
	cr_assert_eq(flextree_commit(t), 0);
	st = stats_of(t);
	cr_expect_eq(st.version, 2);
	cr_expect_eq(st.dirty_nodes, 0);
	cr_expect_eq(st.commits, c0 + 1);
	cr_expect_gt(st.bytes_written, b0);
	cr_expect_eq(st.file_bytes, file_size(d.path));
	assert_model(t, &m, &cr, "after commit", seed);
	cr_assert_eq(flextree_close(t), 0);

	t = open_ok(d.path, NULL);
	assert_model(t, &m, &cr, "after reopen", seed);
	st = stats_of(t);
	cr_expect_eq(st.version, 2);
	cr_expect_eq(st.dirty_nodes, 0);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, commit_of_unchanged_tree_writes_nothing)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	struct flextree_stats st = stats_of(t);
	/* Creating the file may count as this handle's first commit. */
	uint64_t c0 = st.commits, b0 = st.bytes_written;
	cr_assert_eq(flextree_commit(t), 0);
	st = stats_of(t);
	cr_expect_eq(st.version, 1);
	cr_expect_eq(st.commits, c0);
	cr_expect_eq(st.bytes_written, b0);
	ins(t, NULL, 0, 100, 10);
	cr_assert_eq(flextree_commit(t), 0);
	st = stats_of(t);
	cr_expect_eq(st.version, 2);
	cr_expect_eq(st.commits, c0 + 1);
	cr_expect_gt(st.bytes_written, b0);
	uint64_t written = st.bytes_written;
	cr_assert_eq(flextree_commit(t), 0);
	st = stats_of(t);
	cr_expect_eq(st.version, 2);
	cr_expect_eq(st.commits, c0 + 1);
	cr_expect_eq(st.bytes_written, written);
	/* Reads do not dirty anything. */
	uint64_t p;
	cr_assert_eq(flextree_lookup(t, 3, &p, NULL), 0);
	cr_expect_eq(stats_of(t).dirty_nodes, 0);
	cr_expect_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	cr_expect_eq(stats_of(t).version, 2);
	expect_lookup(t, 3, 103, 7);
	flextree_close(t);
	tmpd_remove(&d);
}

Test(flextree, close_commits)
{
	uint64_t seed = test_seed("close_commits");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	build_extents(t, &m, &r, TINY ? 50 : 1000, 500);
	cr_assert_eq(flextree_tag_set(t, 3, 33), 0);
	model_tag_set(&m, 3, 33);
	cr_assert_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	assert_model(t, &m, &cr, "after close and reopen", seed);
	cr_expect_eq(stats_of(t).version, 2);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, changes_after_commit_vanish_after_abrupt_exit)
{
	uint64_t seed = test_seed("changes_after_commit_vanish_after_abrupt_exit");
	struct opcfg cfg = {0, 0, TINY ? 300 : 2000};
	struct tmpd d;
	tmpd_make(&d);

	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rng r = {seed};
		struct model m = {0};
		struct flextree *t = NULL;
		if (flextree_open(d.path, NULL, &t))
			_exit(10);
		for (int i = 0; i < 2000; i++)
			if (random_op(&r, &m, t, &cfg, NULL))
				_exit(11);
		if (flextree_commit(t))
			_exit(12);
		for (int i = 0; i < 500; i++)
			if (random_op(&r, &m, t, &cfg, NULL))
				_exit(13);
		if (op_insert(&r, &m, t, &cfg, false, NULL))
			_exit(14);
		_exit(0); /* no commit, no close */
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: status %d", status);

	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	for (int i = 0; i < 2000; i++)
		random_op(&r, &m, NULL, &cfg, NULL);
	struct flextree *t = open_ok(d.path, NULL);
	cr_expect_eq(stats_of(t).version, 2);
	assert_model(t, &m, &cr, "reopened after the child exited", seed);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

/* One batch of the crash test: random ops then an insert, so that every
 * batch changes the tree and its commit makes exactly one new version. */
static int crash_batch(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg)
{
	for (int i = 0; i < 10; i++) {
		int e = random_op(r, m, t, cfg, NULL);
		if (e)
			return e;
	}
	return op_insert(r, m, t, cfg, false, NULL);
}

/* Rounds of: a child makes random batches and commits each, and is killed
 * at a random point; the reopened tree must be at the last acknowledged
 * version or the one after, equal to the model of that version.  o (may be
 * NULL) is used by the child and the reopen. */
static void killed_writer_rounds(const char *name, const struct flextree_options *o)
{
	uint64_t seed = test_seed(name);
	struct rng pr = {seed ^ 77};
	struct opcfg cfg = {0, 0, TINY ? 300 : 1500};
	int rounds = (int)(3 * test_scale());

	for (int round = 0; round < rounds; round++) {
		uint64_t rseed = seed + (uint64_t)round;
		struct tmpd d;
		int fds[2];
		tmpd_make(&d);
		cr_assert_eq(pipe(fds), 0);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			alarm(120); /* a writer that hangs dies instead of blocking the read */
			struct rng r = {rseed};
			struct model m = {0};
			struct flextree *t = NULL;
			if (flextree_open(d.path, o, &t))
				_exit(10);
			for (uint64_t b = 1; b < 100000; b++) {
				if (crash_batch(&r, &m, t, &cfg))
					_exit(11);
				if (flextree_commit(t))
					_exit(12);
				uint64_t v = b + 1;
				if (write(fds[1], &v, sizeof(v)) != sizeof(v))
					_exit(13);
			}
			_exit(0);
		}
		close(fds[1]);
		uint64_t last = 1, v;
		int got = 0;
		while (got < 5 + (int)rng_below(&pr, 40) &&
		       read(fds[0], &v, sizeof(v)) == (ssize_t)sizeof(v)) {
			last = v;
			got++;
		}
		usleep((useconds_t)rng_below(&pr, 20000));
		kill(pid, SIGKILL);
		int status = 0;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
			      (WIFEXITED(status) && WEXITSTATUS(status) == 0),
			  "writer failed before the kill: status %d (seed=%llu)", status, U(rseed));
		while (read(fds[0], &v, sizeof(v)) == (ssize_t)sizeof(v))
			last = v;
		close(fds[0]);

		/* The killed writer's lock can outlive waitpid(): with io_uring the
		 * kernel drops the ring's file references asynchronously.  Allow
		 * it a bounded time, and say so when it happens. */
		struct flextree *t = NULL;
		int orc, waited_ms = 0;
		while ((orc = flextree_open(d.path, o, &t)) == FLEX_EBUSY && waited_ms < 5000) {
			usleep(1000);
			waited_ms++;
		}
		if (waited_ms)
			fprintf(stderr,
				"note: reopen after SIGKILL got FLEX_EBUSY for ~%d ms after the "
				"writer was reaped (io_uring=%d)\n",
				waited_ms, flex_io_uring_active());
		cr_assert_eq(orc, 0, "reopen after SIGKILL = %d (seed=%llu)", orc, U(rseed));
		uint64_t version = stats_of(t).version;
		cr_assert(version == last || version == last + 1,
			  "reopened at version %llu, last acknowledged %llu (seed=%llu)",
			  U(version), U(last), U(rseed));
		struct rng r = {rseed}, cr = {rseed ^ 1};
		struct model m = {0};
		for (uint64_t b = 1; b + 1 <= version; b++)
			crash_batch(&r, &m, NULL, &cfg);
		assert_model(t, &m, &cr, "reopened after SIGKILL", rseed);
		fprintf(stderr, "killed writer: reopened at version %llu (acknowledged %llu)\n",
			U(version), U(last));
		flextree_close(t);
		model_free(&m);
		tmpd_remove(&d);
	}
}

Test(flextree, killed_writer_reopens_at_a_committed_version, .timeout = 300)
{
	killed_writer_rounds("killed_writer_reopens_at_a_committed_version", NULL);
}

/*
 * Commit/reopen cycles with random ops.  Each cycle ends by closing (which
 * commits), by a simulated crash (every write fails, so the file keeps the
 * last commit), or by commit-then-crash.  Between, commits happen at random.
 */
Test(flextree, commit_reopen_cycles_with_random_ops_match_model, .timeout = 600)
{
	uint64_t seed = test_seed("commit_reopen_cycles_with_random_ops_match_model");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0}, committed = {0};
	struct opcfg cfg = {0, 0, TINY ? 400 : 2500};
	struct fault_ctx fc;
	struct flex_io fio;
	struct tmpd d;
	uint64_t cycles = 40 * test_scale(), commits = 0;

	tmpd_make(&d);
	fault_io_init(&fio, &fc);
	struct flextree_options o = {.io = &fio};

	for (uint64_t cyc = 0; cyc < cycles; cyc++) {
		fault_arm(&fc, -1);
		struct flextree *t = open_ok(d.path, &o);
		assert_model(t, &committed, &cr, "reopened", seed);
		model_copy(&m, &committed);
		unsigned nops = (unsigned)rng_range(&r, 1, 400);
		for (unsigned i = 0; i < nops; i++) {
			int e = random_op(&r, &m, t, &cfg, NULL);
			cr_assert_eq(e, 0, "cycle %llu op %u (line %d, seed=%llu)", U(cyc), i, e,
				     U(seed));
			if (rng_pct(&r, 2)) {
				cr_assert_eq(flextree_commit(t), 0);
				model_copy(&committed, &m);
				commits++;
				assert_check(t);
			}
		}
		assert_check(t);
		unsigned end = (unsigned)rng_below(&r, 3);
		if (end == 2) {
			cr_assert_eq(flextree_commit(t), 0);
			model_copy(&committed, &m);
		}
		if (end == 0) {
			cr_assert_eq(flextree_close(t), 0);
			model_copy(&committed, &m);
		} else {
			fault_arm(&fc, 0); /* crash: nothing more reaches the file */
			flextree_close(t);
		}
	}
	struct flextree *t = open_ok(d.path, NULL);
	assert_model(t, &committed, &cr, "final reopen", seed);
	fprintf(stderr, "commit cycles: %llu cycles, %llu mid-cycle commits, file %llu bytes\n",
		U(cycles), U(commits), U(stats_of(t).file_bytes));
	flextree_close(t);
	model_free(&m);
	model_free(&committed);
	tmpd_remove(&d);
}

/*
 * Targeted collapse patterns with commits and reopens in between: these
 * drive leaf and internal-node merges, root shrinking and slot recycling,
 * where copy-on-write bugs hide (a slot freed since the last commit must not
 * be reused before the next commit is durable).
 */
static void reopen_and_compare(struct flextree **t, const char *path, const struct model *m,
			       struct rng *cr, const char *what, uint64_t seed)
{
	assert_check(*t);
	cr_assert_eq(flextree_commit(*t), 0, "%s: commit", what);
	assert_check(*t);
	cr_assert_eq(flextree_close(*t), 0, "%s: close", what);
	*t = open_ok(path, NULL);
	assert_model(*t, m, cr, what, seed);
}

Test(flextree, collapse_patterns_with_commits_reopen_exactly, .timeout = 600)
{
	uint64_t seed = test_seed("collapse_patterns_with_commits_reopen_exactly");
	struct rng r = {seed}, cr = {seed ^ 1};
	size_t n = TINY ? 300 : 12000;

	for (int pattern = 0; pattern < 8; pattern++) {
		struct model m = {0};
		struct tmpd d;
		tmpd_make(&d);
		struct flextree *t = open_ok(d.path, NULL);
		build_extents(t, &m, &r, n, 64);
		for (size_t i = 0; i < m.n; i += 7) {
			uint64_t s = model_start(&m, i);
			cr_assert_eq(flextree_tag_set(t, s, (uint16_t)(i % 65535 + 1)), 0);
			model_tag_set(&m, s, (uint16_t)(i % 65535 + 1));
		}
		reopen_and_compare(&t, d.path, &m, &cr, "built", seed);
		uint32_t h0 = stats_of(t).height;

		switch (pattern) {
		case 0: /* from the front, an eighth at a time */
			while (m.n) {
				size_t k = m.n / 8 + 1;
				col(t, &m, 0, model_start(&m, k < m.n ? k : m.n));
				reopen_and_compare(&t, d.path, &m, &cr, "front", seed);
			}
			break;
		case 1: /* from the back */
			while (m.n) {
				size_t k = m.n / 8 + 1;
				uint64_t s = model_start(&m, m.n > k ? m.n - k : 0);
				col(t, &m, s, m.size - s);
				reopen_and_compare(&t, d.path, &m, &cr, "back", seed);
			}
			break;
		case 2: /* the middle third, repeatedly, mid-extent ends */
			while (m.size > 3) {
				uint64_t a = m.size / 3, b = 2 * m.size / 3 + 1;
				col(t, &m, a, b - a);
				reopen_and_compare(&t, d.path, &m, &cr, "middle", seed);
			}
			break;
		case 3: /* every other extent, commits in between */
		{
			size_t step = 0;
			for (size_t i = m.n; i-- > 0;) {
				if (i % 2)
					continue;
				col(t, &m, model_start(&m, i), m.v[i].len);
				if (++step % (n / 10 + 1) == 0) {
					cr_assert_eq(flextree_commit(t), 0);
					assert_check(t);
				}
				if (step % (n / 3 + 1) == 0)
					reopen_and_compare(&t, d.path, &m, &cr, "alternate", seed);
			}
			reopen_and_compare(&t, d.path, &m, &cr, "alternate", seed);
			break;
		}
		case 4: /* all but the first and last extent */
			col(t, &m, model_start(&m, 1),
			    model_start(&m, m.n - 1) - model_start(&m, 1));
			reopen_and_compare(&t, d.path, &m, &cr, "all but ends", seed);
			cr_expect_leq(stats_of(t).height, 1);
			break;
		case 5: /* down to one extent, reopen, grow back, reopen */
			col(t, &m, m.v[0].len, m.size - m.v[0].len);
			reopen_and_compare(&t, d.path, &m, &cr, "one extent", seed);
			build_extents(t, &m, &r, n, 64);
			reopen_and_compare(&t, d.path, &m, &cr, "regrown", seed);
			cr_expect_eq(stats_of(t).height, h0);
			break;
		case 6: /* random spans with commits after each, interleaved inserts */
			for (int k = 0; k < 40 && m.size; k++) {
				uint64_t a = rng_below(&r, m.size);
				uint64_t len =
				    1 + rng_below(&r, min_u64(m.size - a, m.size / 4 + 1));
				col(t, &m, a, len);
				if (k % 3 == 0)
					build_extents(t, &m, &r, (size_t)rng_below(&r, n / 10 + 1),
						      64);
				cr_assert_eq(flextree_commit(t), 0);
				assert_check(t);
				if (k % 8 == 7)
					reopen_and_compare(&t, d.path, &m, &cr, "spans", seed);
			}
			reopen_and_compare(&t, d.path, &m, &cr, "spans", seed);
			break;
		default: /* everything, twice, with reuse */
			col(t, &m, 0, m.size);
			reopen_and_compare(&t, d.path, &m, &cr, "emptied", seed);
			build_extents(t, &m, &r, n / 2, 64);
			reopen_and_compare(&t, d.path, &m, &cr, "refilled", seed);
			col(t, &m, 0, m.size);
			reopen_and_compare(&t, d.path, &m, &cr, "emptied again", seed);
			break;
		}
		flextree_close(t);
		model_free(&m);
		tmpd_remove(&d);
	}
}

Test(flextree, persistent_large_tree_survives_collapses_with_commits, .timeout = 600)
{
	uint64_t seed = test_seed("persistent_large_tree_survives_collapses_with_commits");
	struct rng r = {seed};
	const uint64_t L = 4;
	size_t n = TINY ? 8000 : 150000;
	uint32_t *ids = xrealloc(NULL, n * sizeof(*ids));
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);

	for (size_t i = 0; i < n; i++) {
		ids[i] = (uint32_t)i;
		ins(t, NULL, i * L, 2 * L * i, L);
	}
	cr_assert_eq(flextree_commit(t), 0);
	cr_assert_geq(stats_of(t).height, 3);
	cr_assert_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	assert_check(t);
	cr_assert_eq(stats_of(t).extents, n);

	for (int round = 0; n; round++) {
		size_t a = (size_t)rng_below(&r, n);
		size_t cnt = 1 + (size_t)rng_below(&r, round % 4 == 0 ? n / 3 + 1 : 500);
		if (a + cnt > n || round > 60)
			cnt = n - a;
		col(t, NULL, a * L, cnt * L);
		memmove(&ids[a], &ids[a + cnt], (n - a - cnt) * sizeof(*ids));
		n -= cnt;
		cr_assert_eq(flextree_commit(t), 0);
		if (round % 5 == 4) {
			cr_assert_eq(flextree_close(t), 0);
			t = open_ok(d.path, NULL);
		}
		assert_check(t);
		cr_assert_eq(flextree_size(t), n * L);
		cr_assert_eq(stats_of(t).extents, n);
		for (int k = 0; k < 100 && n; k++) {
			uint64_t loff = rng_below(&r, n * L), p;
			cr_assert_eq(flextree_lookup(t, loff, &p, NULL), 0);
			cr_assert_eq(p, 2 * L * ids[loff / L] + loff % L,
				     "lookup(%llu) (seed=%llu)", U(loff), U(seed));
		}
	}
	flextree_close(t);
	free(ids);
	tmpd_remove(&d);
}

Test(flextree, slot_recycling_keeps_file_size_bounded, .timeout = 300)
{
	uint64_t seed = test_seed("slot_recycling_keeps_file_size_bounded");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	size_t n = TINY ? 200 : 3000;
	uint64_t ref = 0;

	build_extents(t, &m, &r, n, 100);
	cr_assert_eq(flextree_commit(t), 0);
	for (int cyc = 0; cyc < 60; cyc++) {
		/* Churn: remove a random tenth, put as many back elsewhere. */
		uint64_t a = rng_below(&r, m.size / 2);
		col(t, &m, a, m.size / 10);
		while (m.n < n) {
			uint64_t at = rng_below(&r, m.size + 1);
			ins(t, &m, at, (rng_below(&r, 1 << 20) * 2) << 20, rng_range(&r, 1, 100));
		}
		cr_assert_eq(flextree_commit(t), 0);
		uint64_t fb = stats_of(t).file_bytes;
		if (cyc == 10)
			ref = fb;
		if (cyc > 10)
			cr_assert_leq(fb, 2 * ref + 64 * SLOT,
				      "file grew from %llu to %llu bytes by cycle %d: slots leak "
				      "(seed=%llu)",
				      U(ref), U(fb), cyc, U(seed));
	}
	reopen_and_compare(&t, d.path, &m, &cr, "after churn", seed);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, second_opener_gets_ebusy)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	ins(t, NULL, 0, 100, 10);
	cr_assert_eq(flextree_commit(t), 0);

	struct flextree *t2 = (struct flextree *)&t2;
	cr_expect_eq(flextree_open(d.path, NULL, &t2), FLEX_EBUSY);
	cr_expect_null(t2);

	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flextree *c = (struct flextree *)&c;
		int rc = flextree_open(d.path, NULL, &c);
		_exit(rc == FLEX_EBUSY && c == NULL ? 0 : 1);
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "forked child was not refused with FLEX_EBUSY");

	cr_assert_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	expect_lookup(t, 0, 100, 10);
	flextree_close(t);
	tmpd_remove(&d);
}

Test(flextree, read_only_open_refuses_changes)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	ins(t, NULL, 0, 100, 10);
	cr_assert_eq(flextree_close(t), 0);

	struct flextree_options o = {.read_only = 1};
	t = open_ok(d.path, &o);
	expect_lookup(t, 0, 100, 10);
	cr_expect_eq(flextree_insert(t, 0, 5, 5), FLEX_EREADONLY);
	cr_expect_eq(flextree_collapse(t, 0, 5), FLEX_EREADONLY);
	cr_expect_eq(flextree_repoint(t, 0, 7, 5), FLEX_EREADONLY);
	cr_expect_eq(flextree_tag_set(t, 0, 5), FLEX_EREADONLY);
	cr_expect_eq(flextree_commit(t), FLEX_EREADONLY);
	expect_lookup(t, 0, 100, 10);
	assert_check(t);
	cr_expect_eq(flextree_close(t), 0);
	uint64_t before = file_size(d.path);
	t = open_ok(d.path, NULL);
	cr_expect_eq(stats_of(t).version, 2);
	cr_expect_eq(file_size(d.path), before);
	flextree_close(t);

	struct flextree *u = (struct flextree *)&u;
	char missing[160];
	snprintf(missing, sizeof(missing), "%s/absent", d.dir);
	cr_expect_lt(flextree_open(missing, &o, &u), 0, "read-only open must not create");
	cr_expect_null(u);
	tmpd_remove(&d);
}

/* volatile_changes: a read-only tree changes in memory, commits nothing,
 * and the file keeps every byte; a second read-only handle shares it. */
Test(flextree, read_only_volatile_changes_stay_in_memory)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	ins(t, NULL, 0, 100, 10);
	cr_assert_eq(flextree_close(t), 0);
	FILE *f = fopen(d.path, "rb");
	cr_assert_not_null(f);
	static uint8_t img[1 << 16], img2[1 << 16];
	size_t n = fread(img, 1, sizeof(img), f);
	fclose(f);

	struct flextree_options o = {.read_only = 1, .volatile_changes = 1};
	t = open_ok(d.path, &o);
	struct flextree *u = open_ok(d.path, &o);
	cr_expect_eq(flextree_insert(t, 0, 500, 5), 0);
	cr_expect_eq(flextree_tag_set(t, 5, 3), 0);
	cr_expect_eq(flextree_collapse(t, 12, 2), 0);
	expect_lookup(t, 0, 500, 5);
	cr_expect_eq(flextree_size(t), 13);
	cr_expect_eq(flextree_pressure(t), 0);
	assert_check(t);
	cr_expect_eq(flextree_commit(t), FLEX_EREADONLY);
	expect_lookup(u, 0, 100, 10);
	struct flextree *w = (struct flextree *)&o;
	cr_expect_eq(flextree_open(d.path, NULL, &w), FLEX_EBUSY, "a writer beside readers");
	cr_expect_eq(flextree_close(t), 0);
	cr_expect_eq(flextree_close(u), 0);
	f = fopen(d.path, "rb");
	cr_assert_not_null(f);
	cr_expect_eq(fread(img2, 1, sizeof(img2), f), n);
	fclose(f);
	cr_expect(!memcmp(img, img2, n), "the file changed");
	t = open_ok(d.path, NULL);
	expect_lookup(t, 0, 100, 10);
	cr_expect_eq(flextree_size(t), 10);
	flextree_close(t);
	tmpd_remove(&d);
}

/* ------------------------------------------------------------------------ */
/* Damaged files                                                              */
/* ------------------------------------------------------------------------ */

static int try_open(const char *path, int read_only)
{
	struct flextree_options o = {.read_only = read_only};
	struct flextree *t = (struct flextree *)&o;
	int rc = flextree_open(path, &o, &t);
	if (rc == 0) {
		cr_assert_not_null(t);
		flextree_close(t);
	} else {
		cr_assert_null(t, "failed open left *out set");
	}
	return rc;
}

/* A committed multi-node tree in d->path, mirrored in m. */
static void make_committed_tree(struct tmpd *d, struct model *m, struct rng *r, size_t n)
{
	tmpd_make(d);
	struct flextree *t = open_ok(d->path, NULL);
	build_extents(t, m, r, n, 100);
	cr_assert_eq(flextree_tag_set(t, 1, 11), 0);
	model_tag_set(m, 1, 11);
	cr_assert_eq(flextree_close(t), 0);
}

Test(flextree, corrupt_header_copies_are_detected)
{
	uint64_t seed = test_seed("corrupt_header_copies_are_detected");
	struct rng r = {seed};
	struct model m = {0};
	struct tmpd d;
	make_committed_tree(&d, &m, &r, TINY ? 40 : 600);
	char copy[160];
	snprintf(copy, sizeof(copy), "%s/copy", d.dir);

	for (uint64_t off = 0; off < 64; off++) {
		copy_file(d.path, copy);
		xor_bytes(copy, off, 1, 0x10);
		xor_bytes(copy, SLOT + off, 1, 0x10);
		int rc = try_open(copy, 0);
		cr_expect(rc == FLEX_ECORRUPT || rc == FLEX_EVERSION,
			  "byte %llu flipped in both header copies: open = %d", U(off), rc);
	}
	/* Both copies entirely garbage. */
	copy_file(d.path, copy);
	xor_bytes(copy, 0, SLOT, 0xa5);
	xor_bytes(copy, SLOT, SLOT, 0x5a);
	cr_expect_eq(try_open(copy, 0), FLEX_ECORRUPT);
	cr_expect_eq(try_open(copy, 1), FLEX_ECORRUPT);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, one_corrupt_header_copy_falls_back_to_a_committed_version)
{
	uint64_t seed = test_seed("one_corrupt_header_copy_falls_back_to_a_committed_version");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m1 = {0}, m2 = {0};
	struct tmpd d;
	tmpd_make(&d);
	char copy[160];
	snprintf(copy, sizeof(copy), "%s/copy", d.dir);

	struct flextree *t = open_ok(d.path, NULL);
	build_extents(t, &m1, &r, TINY ? 40 : 600, 100);
	cr_assert_eq(flextree_commit(t), 0); /* version 2 = m1 */
	model_copy(&m2, &m1);
	col(t, &m2, 10, m2.size / 2);
	build_extents(t, &m2, &r, 20, 100);
	cr_assert_eq(flextree_close(t), 0); /* version 3 = m2 */

	/* Damaging the older copy must leave the newest version.  Damaging the
	 * newest may fall back to the previous version, or report
	 * FLEX_ECORRUPT if that version's slots were already released
	 * (docs/FORMAT.md), but never give a wrong tree. */
	int newest_kept = 0;
	for (int which = 0; which < 2; which++) {
		int all_v3 = 1;
		for (uint64_t off = 0; off < 64; off += 5) {
			copy_file(d.path, copy);
			xor_bytes(copy, (uint64_t)which * SLOT + off, 1, 0x01);
			int rc = try_open(copy, 0);
			if (rc) {
				cr_expect_eq(rc, FLEX_ECORRUPT,
					     "header copy %d byte %llu: open = %d", which, U(off),
					     rc);
				all_v3 = 0;
				continue;
			}
			t = open_ok(copy, NULL);
			uint64_t v = stats_of(t).version;
			cr_assert(v == 2 || v == 3, "header copy %d byte %llu: version %llu", which,
				  U(off), U(v));
			all_v3 &= v == 3;
			assert_model(t, v == 2 ? &m1 : &m2, &cr, "one header copy damaged", seed);
			flextree_close(t);
		}
		newest_kept += all_v3;
	}
	cr_expect_eq(newest_kept, 1, "damaging one header copy must leave the other's version");
	model_free(&m1);
	model_free(&m2);
	tmpd_remove(&d);
}

Test(flextree, corrupt_node_slot_is_detected, .timeout = 300)
{
	uint64_t seed = test_seed("corrupt_node_slot_is_detected");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct tmpd d;
	make_committed_tree(&d, &m, &r, TINY ? 60 : 1500);
	struct flextree *t = open_ok(d.path, NULL);
	struct flextree_stats st = stats_of(t);
	flextree_close(t);
	cr_assert_gt(st.leaves + st.internals, 1, "need a multi-node tree");
	uint64_t slots = file_size(d.path) / SLOT;
	cr_assert_geq(slots, 2 + st.leaves + st.internals);

	/* Garbage over each node slot in turn: a slot the committed tree uses
	 * must be refused, any other must not change what open returns. */
	uint64_t refused = 0;
	for (uint64_t s = 2; s < slots; s++) {
		xor_bytes(d.path, s * SLOT, SLOT, 0x5a);
		int rc = try_open(d.path, 1);
		if (rc == 0) {
			struct flextree_options o = {.read_only = 1};
			t = open_ok(d.path, &o);
			assert_model(t, &m, &cr, "unused slot damaged", seed);
			flextree_close(t);
		} else {
			cr_expect_eq(rc, FLEX_ECORRUPT, "slot %llu garbage: open = %d", U(s), rc);
			refused++;
		}
		xor_bytes(d.path, s * SLOT, SLOT, 0x5a);
	}
	cr_expect_geq(refused, st.leaves + st.internals,
		      "only %llu of %llu damaged node slots detected", U(refused),
		      U(st.leaves + st.internals));

	/* One flipped byte near the start of each slot (inside any node header). */
	refused = 0;
	for (uint64_t s = 2; s < slots; s++) {
		uint64_t off = s * SLOT + rng_below(&r, 16);
		xor_bytes(d.path, off, 1, 0x04);
		int rc = try_open(d.path, 1);
		if (rc)
			refused++;
		cr_expect(rc == 0 || rc == FLEX_ECORRUPT, "slot %llu byte flip: open = %d", U(s),
			  rc);
		xor_bytes(d.path, off, 1, 0x04);
	}
	cr_expect_geq(refused, st.leaves + st.internals,
		      "only %llu of %llu single-byte node flips detected", U(refused),
		      U(st.leaves + st.internals));
	t = open_ok(d.path, NULL);
	assert_model(t, &m, &cr, "restored file", seed);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, empty_garbage_and_truncated_files_are_rejected)
{
	uint64_t seed = test_seed("empty_garbage_and_truncated_files_are_rejected");
	struct rng r = {seed};
	struct tmpd d;
	tmpd_make(&d);
	char p[200];

	snprintf(p, sizeof(p), "%s/empty", d.dir);
	int fd = open(p, O_CREAT | O_WRONLY, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	/* A zero-length file is what a crash during creation leaves; the format
	 * (docs/FORMAT.md) initialises it as a new tree.  Either that or
	 * FLEX_ECORRUPT is acceptable; read-only cannot initialise it. */
	int rc = try_open(p, 1);
	cr_expect(rc == FLEX_ECORRUPT, "zero-length file, read-only: open = %d", rc);
	rc = try_open(p, 0);
	cr_expect(rc == 0 || rc == FLEX_ECORRUPT, "zero-length file: open = %d", rc);
	if (rc == 0) {
		struct flextree *z = open_ok(p, NULL);
		cr_expect_eq(flextree_size(z), 0);
		cr_expect_eq(stats_of(z).version, 1);
		assert_check(z);
		flextree_close(z);
	}

	static const size_t sizes[] = {1, 100, SLOT, 2 * SLOT, 3 * SLOT, 10 * SLOT + 17};
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		snprintf(p, sizeof(p), "%s/garbage%zu", d.dir, k);
		fd = open(p, O_CREAT | O_WRONLY, 0644);
		cr_assert_geq(fd, 0);
		for (size_t i = 0; i < sizes[k]; i++) {
			uint8_t b = (uint8_t)rng_next(&r);
			cr_assert_eq(write(fd, &b, 1), 1);
		}
		close(fd);
		cr_expect_eq(try_open(p, 0), FLEX_ECORRUPT, "%zu bytes of garbage", sizes[k]);
		cr_expect_eq(file_size(p), sizes[k], "open rewrote a damaged file");
	}

	/* A committed multi-node tree cut short. */
	struct model m = {0};
	struct flextree *t = open_ok(d.path, NULL);
	build_extents(t, &m, &r, TINY ? 60 : 1500, 100);
	cr_assert_eq(flextree_close(t), 0);
	uint64_t full = file_size(d.path);
	snprintf(p, sizeof(p), "%s/cut", d.dir);
	static const uint64_t cuts[] = {1, 2 * SLOT, 2 * SLOT + 1, 3 * SLOT};
	for (size_t k = 0; k < 4; k++) {
		if (cuts[k] >= full)
			continue;
		copy_file(d.path, p);
		cr_assert_eq(truncate(p, (off_t)cuts[k]), 0);
		rc = try_open(p, 1);
		cr_expect_eq(rc, FLEX_ECORRUPT, "file cut to %llu of %llu bytes: open = %d",
			     U(cuts[k]), U(full), rc);
	}
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, open_in_missing_directory_fails_with_errno)
{
	struct flextree *t = (struct flextree *)&t;
	int rc = flextree_open("/tmp/flextree-test-no-such-dir-8c1f/sub/tree", NULL, &t);
	cr_expect_eq(rc, -ENOENT, "open = %d", rc);
	cr_expect_null(t);
}

/*
 * Fault injection: fail the k-th write/sync of a commit (and everything
 * after it), for every k until the commit succeeds.  The commit must report
 * the failure, the handle must then refuse changes with FLEX_EFAILED, and a
 * reopen must find exactly the previous or the new version.
 */
Test(flextree, failed_commit_leaves_old_or_new_version, .timeout = 300)
{
	uint64_t seed = test_seed("failed_commit_leaves_old_or_new_version");
	struct rng cr = {seed ^ 1};
	struct opcfg cfg = {0, 0, TINY ? 200 : 1500};
	struct fault_ctx fc;
	struct flex_io fio;
	struct flextree_options o = {.io = &fio};
	long k;

	fault_io_init(&fio, &fc);
	for (k = 0; k < 400; k++) {
		struct rng r = {seed};
		struct model m1 = {0}, m2 = {0};
		struct tmpd d;
		tmpd_make(&d);
		fault_arm(&fc, -1);
		struct flextree *t = open_ok(d.path, &o);
		for (int i = 0; i < 400; i++)
			cr_assert_eq(random_op(&r, &m1, t, &cfg, NULL), 0);
		cr_assert_eq(flextree_commit(t), 0);
		model_copy(&m2, &m1);
		for (int i = 0; i < 300; i++)
			cr_assert_eq(random_op(&r, &m2, t, &cfg, NULL), 0);
		cr_assert_eq(op_insert(&r, &m2, t, &cfg, false, NULL), 0);

		fault_arm(&fc, k);
		int rc = flextree_commit(t);
		bool done = rc == 0;
		if (!done) {
			cr_expect_lt(rc, 0);
			int c = flextree_insert(t, 0, 1, 1);
			cr_expect_eq(c, FLEX_EFAILED, "insert after failed commit = %d", c);
			c = flextree_commit(t);
			cr_expect_lt(c, 0, "commit after failed commit = %d", c);
			uint64_t p;
			if (m2.size)
				cr_expect_eq(flextree_lookup(t, 0, &p, NULL), 0,
					     "a failed handle can still be read");
		}
		flextree_close(t);

		t = open_ok(d.path, NULL);
		uint64_t v = stats_of(t).version;
		cr_assert(v == 2 || v == 3, "fail at call %ld: version %llu", k, U(v));
		if (done)
			cr_assert_eq(v, 3);
		assert_model(t, v == 2 ? &m1 : &m2, &cr, "after failed commit", seed);
		flextree_close(t);
		model_free(&m1);
		model_free(&m2);
		tmpd_remove(&d);
		if (done)
			break;
	}
	fprintf(stderr, "failed commit: a commit made %ld failable I/O calls\n", k);
	cr_expect_lt(k, 400, "commit never succeeded");
}

/* ======================================================================== */
/* Leaf cache: a persistent tree keeps only cache_size bytes of leaves       */
/* ======================================================================== */

/* A budget of `leaves` clean leaves. */
static struct flextree_options tiny_cache(uint64_t leaves, int lazy)
{
	struct flextree *v = open_vol();
	uint64_t lb = stats_of(v).leaf_bytes;
	flextree_close(v);
	return (struct flextree_options){.cache_size = leaves * lb, .lazy_open = lazy};
}

/* Between operations only dirty leaves may exceed the budget; right after
 * a commit none do. */
static void assert_within_budget(const struct flextree *t, const char *what)
{
	struct flextree_stats st = stats_of(t);
	cr_assert_leq(st.cached_leaves, st.cache_leaves + st.dirty_nodes,
		      "%s: %llu leaves cached, budget %llu, %llu dirty nodes", what,
		      U(st.cached_leaves), U(st.cache_leaves), U(st.dirty_nodes));
	if (st.dirty_nodes == 0)
		cr_assert_leq(st.cached_leaves, st.cache_leaves, "%s: %llu clean leaves cached",
			      what, U(st.cached_leaves));
}

/*
 * The random stream of commit_reopen_cycles_with_random_ops_match_model
 * with a cache of two leaves: nearly every leaf an operation reaches is
 * read back from the file, merges and splits read siblings, and commits
 * come both at random and whenever flextree_pressure() asks.  Every other
 * cycle opens lazily; cycles end by close, crash, or commit-then-crash.
 */
Test(flextree, tiny_cache_commit_reopen_cycles_match_model, .timeout = 600)
{
	uint64_t seed = test_seed("tiny_cache_commit_reopen_cycles_match_model");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0}, committed = {0};
	struct opcfg cfg = {0, 0, TINY ? 400 : 2500};
	struct fault_ctx fc;
	struct flex_io fio;
	struct tmpd d;
	uint64_t cycles = 30 * test_scale(), commits = 0, pressured = 0, reads = 0;

	tmpd_make(&d);
	fault_io_init(&fio, &fc);
	fc.nosync = 1; /* crashes here are the process's, not the machine's */
	for (uint64_t cyc = 0; cyc < cycles; cyc++) {
		struct flextree_options o = tiny_cache(2, (int)(cyc & 1));
		o.io = &fio;
		fault_arm(&fc, -1);
		struct flextree *t = open_ok(d.path, &o);
		assert_within_budget(t, "after open");
		assert_model(t, &committed, &cr, "reopened", seed);
		model_copy(&m, &committed);
		unsigned nops = (unsigned)rng_range(&r, 1, 600);
		for (unsigned i = 0; i < nops; i++) {
			int e = random_op(&r, &m, t, &cfg, NULL);
			cr_assert_eq(e, 0, "cycle %llu op %u (line %d, seed=%llu)", U(cyc), i, e,
				     U(seed));
			assert_within_budget(t, "after an operation");
			int press = flextree_pressure(t);
			if (press || rng_pct(&r, 2)) {
				cr_assert_eq(flextree_commit(t), 0);
				model_copy(&committed, &m);
				commits++;
				pressured += (uint64_t)press;
				assert_within_budget(t, "after a commit");
				if (rng_pct(&r, 20))
					assert_check(t);
			}
		}
		assert_check(t);
		assert_model(t, &m, &cr, "end of cycle", seed);
		reads += stats_of(t).leaf_reads;
		unsigned end = (unsigned)rng_below(&r, 3);
		if (end == 2) {
			cr_assert_eq(flextree_commit(t), 0);
			model_copy(&committed, &m);
		}
		if (end == 0) {
			cr_assert_eq(flextree_close(t), 0);
			model_copy(&committed, &m);
		} else {
			fault_arm(&fc, 0); /* crash: nothing more reaches the file */
			flextree_close(t);
		}
	}
	struct flextree_options o = tiny_cache(2, 0);
	struct flextree *t = open_ok(d.path, &o);
	assert_model(t, &committed, &cr, "final reopen", seed);
	cr_expect_gt(reads, 0, "the cache never read a leaf back");
	fprintf(stderr,
		"tiny cache cycles: %llu cycles, %llu commits (%llu asked by pressure), %llu leaf "
		"reads, %llu leaves at the end\n",
		U(cycles), U(commits), U(pressured), U(reads), U(stats_of(t).leaves));
	flextree_close(t);
	model_free(&m);
	model_free(&committed);
	tmpd_remove(&d);
}

/* The collapse patterns that found the recycling bug, on a cache of one
 * leaf: every merge reads its sibling back from the committed file. */
Test(flextree, tiny_cache_collapses_with_commits_reopen_exactly, .timeout = 600)
{
	uint64_t seed = test_seed("tiny_cache_collapses_with_commits_reopen_exactly");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree_options o = tiny_cache(1, 1);
	struct flextree *t = open_ok(d.path, &o);
	build_extents(t, &m, &r, TINY ? 300 : 3000, 100);
	cr_assert_eq(flextree_commit(t), 0);
	for (int round = 0; round < 60 && m.size > 0; round++) {
		uint64_t at = rng_below(&r, m.size);
		uint64_t len = rng_range(&r, 1, min_u64(m.size - at, round % 3 ? 400 : 20000));
		col(t, &m, at, len);
		if (round % 4 == 0) {
			cr_assert_eq(flextree_commit(t), 0);
			assert_within_budget(t, "after a commit");
		}
		if (round % 10 == 9) {
			assert_check(t);
			cr_assert_eq(flextree_close(t), 0);
			t = open_ok(d.path, &o);
			assert_model(t, &m, &cr, "reopened", seed);
		}
	}
	assert_check(t);
	cr_assert_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	assert_model(t, &m, &cr, "final reopen", seed);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

/* The tree grows to hundreds of times its cache; committing whenever
 * flextree_pressure() asks keeps the leaves in memory near the budget, and
 * a lazily reopened tree reads every leaf back for a full pass of lookups
 * without ever holding more than the budget. */
Test(flextree, cached_leaves_stay_within_budget_while_tree_grows, .timeout = 300)
{
	uint64_t seed = test_seed("cached_leaves_stay_within_budget_while_tree_grows");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct tmpd d;
	tmpd_make(&d);
	const uint64_t budget = 4;
	struct fault_ctx fc;
	struct flex_io fio;
	fault_io_init(&fio, &fc);
	fc.nosync = 1; /* thousands of commits: memory is the point here */
	struct flextree_options o = tiny_cache(budget, 1);
	o.io = &fio;
	struct flextree *t = open_ok(d.path, &o);
	uint64_t n = TINY ? 3000 : 120000, commits = 0, peak = 0;
	for (uint64_t i = 0; i < n; i++) {
		/* Mostly appends (cheap commits), some inserts anywhere. */
		uint64_t at = rng_pct(&r, 70) ? m.size : rng_below(&r, m.size + 1);
		uint64_t poff = ((rng_below(&r, 1 << 20) * 2) << 20);
		ins(t, &m, at, poff, rng_range(&r, 1, 1000));
		struct flextree_stats st = stats_of(t);
		if (st.cached_leaves > peak)
			peak = st.cached_leaves;
		cr_assert_leq(st.cached_leaves, budget + st.dirty_nodes, "insert %llu", U(i));
		if (flextree_pressure(t)) {
			cr_assert_eq(flextree_commit(t), 0);
			commits++;
			cr_assert_leq(stats_of(t).cached_leaves, budget);
		}
	}
	cr_assert_eq(flextree_commit(t), 0);
	struct flextree_stats st = stats_of(t);
	cr_assert_geq(st.leaves, 100 * budget, "only %llu leaves", U(st.leaves));
	cr_assert_leq(st.cached_leaves, budget);
	/* Pressure means more dirty nodes than the budget, and a commit
	 * follows at once: never more than budget + 1 dirty leaves plus the
	 * internal nodes of their paths. */
	cr_assert_leq(peak, 2 * budget + 2 * st.height + 2, "peak %llu leaves", U(peak));
	assert_check(t);
	cr_assert_eq(flextree_close(t), 0);

	t = open_ok(d.path, &o);
	cr_assert_eq(stats_of(t).cached_leaves, 0, "a lazy open read leaves");
	for (uint64_t x = 0; x < m.size; x += rng_range(&r, 1, 500)) {
		uint64_t p, run;
		cr_assert_eq(flextree_lookup(t, x, &p, &run), 0);
		cr_assert_eq(piece_matches_model(&m, x, p, run), 0, "lookup(%llu)", U(x));
		cr_assert_leq(stats_of(t).cached_leaves, budget);
	}
	assert_model(t, &m, &cr, "after the lookups", seed);
	st = stats_of(t);
	cr_assert_leq(st.cached_leaves, budget);
	cr_assert_geq(st.leaf_reads, st.leaves, "%llu leaf reads for %llu leaves",
		      U(st.leaf_reads), U(st.leaves));
	fprintf(stderr,
		"budget: %llu leaves of %llu bytes; %llu leaves, %llu extents, %llu pressure "
		"commits, peak %llu cached; lookups read %llu leaves, evicted %llu\n",
		U(budget), U(st.leaf_bytes), U(st.leaves), U(st.extents), U(commits), U(peak),
		U(st.leaf_reads), U(st.leaf_evictions));
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

/* With a lazy open, damage in a leaf is not seen by open but by the first
 * call that reads the leaf and by the deep check: FLEX_ECORRUPT, never a
 * wrong mapping.  Every node slot is damaged in turn. */
Test(flextree, lazy_open_reports_a_damaged_leaf_when_it_is_read, .timeout = 300)
{
	uint64_t seed = test_seed("lazy_open_reports_a_damaged_leaf_when_it_is_read");
	struct rng r = {seed};
	struct model m = {0};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	build_extents(t, &m, &r, TINY ? 60 : 1500, 100);
	struct flextree_stats st0 = stats_of(t);
	cr_assert_eq(flextree_close(t), 0);
	cr_assert_gt(st0.leaves, 2);
	uint64_t slots = file_size(d.path) / SLOT, at_open = 0, at_read = 0, harmless = 0;
	for (uint64_t s = 2; s < slots; s++) {
		uint64_t off = s * SLOT + rng_below(&r, 64);
		xor_bytes(d.path, off, 1, 0x10);
		struct flextree_options o = tiny_cache(1, 1);
		o.read_only = 1;
		int rc = flextree_open(d.path, &o, &t);
		if (rc) {
			cr_expect_eq(rc, FLEX_ECORRUPT, "slot %llu: open = %d", U(s), rc);
			at_open++;
		} else {
			cr_expect_eq(stats_of(t).cached_leaves, 0, "a lazy open read leaves");
			int bad = 0;
			for (size_t i = 0; i < m.n; i++) {
				uint64_t x = model_start(&m, i), p, run;
				int lrc = flextree_lookup(t, x, &p, &run);
				if (lrc) {
					cr_expect_eq(lrc, FLEX_ECORRUPT, "slot %llu: lookup = %d",
						     U(s), lrc);
					bad = 1;
				} else {
					cr_expect_eq(piece_matches_model(&m, x, p, run), 0,
						     "slot %llu: wrong mapping at %llu", U(s), U(x));
				}
			}
			int crc = flextree_check(t);
			cr_expect_eq(crc, bad ? FLEX_ECORRUPT : 0, "slot %llu: check = %d", U(s),
				     crc);
			at_read += (uint64_t)bad;
			harmless += (uint64_t)!bad;
			flextree_close(t);
		}
		xor_bytes(d.path, off, 1, 0x10);
	}
	/* Slots the committed tree does not use are harmless. */
	cr_expect_geq(at_open + at_read, st0.leaves + st0.internals,
		     "%llu slots damaged, %llu caught at open, %llu by reads, %llu harmless",
		     U(slots - 2), U(at_open), U(at_read), U(harmless));
	fprintf(stderr, "lazy open damage: %llu node slots, caught at open %llu, by reads %llu\n",
		U(slots - 2), U(at_open), U(at_read));
	t = open_ok(d.path, NULL);
	assert_check(t);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

/* A leaf that cannot be read back is an error status of the call that
 * needed it, for readers and writers alike; the tree stays sound and works
 * again once reads do. */
static int read_fail; /* nonzero: every read fails with -EIO */

static ssize_t rf_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	(void)io;
	return read_fail ? -EIO : px()->pread(px(), fd, buf, len, off);
}

static int rf_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	return read_fail ? -EIO : px()->read_batch(px(), fd, v, n);
}

Test(flextree, leaf_read_errors_are_returned_and_leave_the_tree_sound, .timeout = 300)
{
	uint64_t seed = test_seed("leaf_read_errors_are_returned_and_leave_the_tree_sound");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct opcfg cfg = {0, 0, TINY ? 300 : 2000};
	struct fault_ctx fc;
	struct flex_io fio;
	struct tmpd d;
	tmpd_make(&d);
	fault_io_init(&fio, &fc);
	fio.pread = rf_pread;
	fio.read_batch = rf_read_batch;
	struct flextree_options o = tiny_cache(1, 1);
	o.io = &fio;
	struct flextree *t = open_ok(d.path, &o);
	build_extents(t, &m, &r, TINY ? 100 : 2000, 100);
	cr_assert_eq(flextree_commit(t), 0);
	uint64_t failed = 0;
	for (int round = 0; round < 200; round++) {
		read_fail = 1;
		uint64_t x = rng_below(&r, m.size), p, run;
		int rc = flextree_lookup(t, x, &p, &run);
		cr_assert(rc == 0 || rc == -EIO, "lookup with failing reads = %d", rc);
		if (rc == 0)
			cr_assert_eq(piece_matches_model(&m, x, p, run), 0);
		struct flextree_mapping mp[4];
		ssize_t q = flextree_query(t, x, m.size - x, mp, 4);
		cr_assert(q > 0 || q == -EIO, "query with failing reads = %zd", q);
		/* A change that needs an evicted leaf fails and changes nothing
		 * the model can see. */
		rc = flextree_insert(t, x, HOLE, 1);
		cr_assert(rc == 0 || rc == -EIO, "insert with failing reads = %d", rc);
		if (rc == 0)
			model_insert(&m, x, HOLE, 1);
		failed += rc != 0;
		read_fail = 0;
		assert_check(t);
		for (int i = 0; i < 5; i++)
			cr_assert_eq(random_op(&r, &m, t, &cfg, NULL), 0);
		if (round % 7 == 0)
			cr_assert_eq(flextree_commit(t), 0);
	}
	read_fail = 0;
	cr_assert_gt(failed, 0, "no change ever needed an evicted leaf");
	assert_model(t, &m, &cr, "after failed reads", seed);
	cr_assert_eq(flextree_close(t), 0);
	t = open_ok(d.path, NULL);
	assert_model(t, &m, &cr, "reopened", seed);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

Test(flextree, killed_writer_with_a_tiny_cache_reopens_at_a_committed_version, .timeout = 300)
{
	struct flextree_options o = tiny_cache(2, 1);
	killed_writer_rounds("killed_writer_with_a_tiny_cache_reopens_at_a_committed_version", &o);
}

/* Readers on one tree at once, through a cache of two leaves, so that
 * they load, pin and evict leaves under each other all the time; between
 * rounds the tree changes and commits with no reader running. */
struct reader_arg {
	const struct flextree *t;
	const struct model *m;
	uint64_t seed;
	int ops;
	int bad;
};

static void *reader_main(void *p)
{
	struct reader_arg *a = p;
	struct rng r = {a->seed};
	for (int i = 0; i < a->ops && !a->bad; i++)
		a->bad = op_read(&r, a->m, a->t, (unsigned)rng_below(&r, 4));
	return NULL;
}

Test(flextree, concurrent_readers_with_a_tiny_cache_match_model, .timeout = 300)
{
	uint64_t seed = test_seed("concurrent_readers_with_a_tiny_cache_match_model");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct opcfg cfg = {0, 0, TINY ? 400 : 3000};
	struct tmpd d;
	tmpd_make(&d);
	struct flextree_options o = tiny_cache(2, 1);
	struct flextree *t = open_ok(d.path, &o);
	build_extents(t, &m, &r, TINY ? 200 : 3000, 1000);
	enum { NR = 4 };
	uint64_t rounds = 12 * test_scale();
	for (uint64_t round = 0; round < rounds; round++) {
		for (int i = 0; i < 200; i++)
			cr_assert_eq(random_op(&r, &m, t, &cfg, NULL), 0);
		if (round % 2 == 0)
			cr_assert_eq(flextree_commit(t), 0);
		pthread_t th[NR];
		struct reader_arg a[NR];
		for (int k = 0; k < NR; k++) {
			a[k] = (struct reader_arg){t, &m, rng_next(&r), TINY ? 3000 : 5000, 0};
			cr_assert_eq(pthread_create(&th[k], NULL, reader_main, &a[k]), 0);
		}
		for (int k = 0; k < NR; k++) {
			pthread_join(th[k], NULL);
			cr_assert_eq(a[k].bad, 0, "round %llu reader %d: line %d (seed=%llu)",
				     U(round), k, a[k].bad, U(seed));
		}
		assert_within_budget(t, "after the readers");
		assert_check(t);
	}
	assert_model(t, &m, &cr, "after the rounds", seed);
	struct flextree_stats st = stats_of(t);
	fprintf(stderr, "concurrent readers: %llu leaves, %llu leaf reads, %llu evictions\n",
		U(st.leaves), U(st.leaf_reads), U(st.leaf_evictions));
	cr_expect_gt(st.leaf_reads, 0);
	flextree_close(t);
	model_free(&m);
	tmpd_remove(&d);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t slot_sum(uint8_t *b, int at)
{
	uint8_t saved[8];
	memcpy(saved, b + at, 8);
	memset(b + at, 0, 8);
	uint64_t h = XXH3_64bits(b, 4096);
	memcpy(b + at, saved, 8);
	return h;
}

/* A damaged file whose middle leaf is empty, its span too (two equal
 * pivots), opened lazily: the append to the full last leaf next to it
 * must not take the empty stub for a sibling with room, and reading that
 * leaf reports the damage. */
Test(flextree, an_empty_leaf_in_a_damaged_file_is_no_sibling_to_share_with)
{
	struct tmpd d;
	tmpd_make(&d);
	struct flextree *t = open_ok(d.path, NULL);
	for (uint64_t i = 0;; i++) {
		ins(t, NULL, i * 10, 2 * i * 1000 + 8, 10);
		const struct ft_internal *r = (const struct ft_internal *)t->root;
		if (!t->root->leaf && r->h.count >= 2 && r->child[r->h.count]->count == FT_LEAF_CAP - 1)
			break;
	}
	cr_assert_eq(flextree_close(t), 0);
	int fd = open(d.path, O_RDWR);
	cr_assert_geq(fd, 0);
	off_t size = lseek(fd, 0, SEEK_END);
	uint8_t *f = malloc((size_t)size);
	cr_assert_eq(pread(fd, f, (size_t)size, 0), size);
	uint8_t *h = get_le(f + 16, 8) > get_le(f + 4096 + 16, 8) ? f : f + 4096;
	uint8_t *root = f + get_le(h + 24, 4) * 4096;
	unsigned pivots = (unsigned)get_le(root + 4, 2);
	unsigned m = pivots - 1; /* the last leaf's left sibling */
	uint8_t *child = root + 32 + 8 * pivots;
	uint8_t *leaf = f + get_le(child + 20 * m + 8, 4) * 4096;
	uint64_t lo = get_le(root + 32 + 8 * (m - 1), 8), hi = get_le(root + 32 + 8 * m, 8);
	put_le(leaf + 4, 0, 2);
	memset(leaf + 32, 0, 4096 - 32);
	put_le(leaf + 24, slot_sum(leaf, 24), 8);
	put_le(child + 20 * m + 12, get_le(leaf + 24, 8), 8);
	put_le(root + 32 + 8 * m, lo, 8); /* its span is empty */
	put_le(child + 20 * (m + 1), get_le(child + 20 * (m + 1), 8) - (hi - lo), 8);
	put_le(root + 24, slot_sum(root, 24), 8);
	put_le(h + 32, get_le(root + 24, 8), 8);
	put_le(h + 40, get_le(h + 40, 8) - (hi - lo), 8);
	put_le(h + 4088, slot_sum(h, 4088), 8);
	cr_assert_eq(pwrite(fd, f, (size_t)size, 0), size);
	close(fd);
	free(f);

	struct flextree_options o = {.lazy_open = 1};
	cr_assert_eq(flextree_open(d.path, &o, &t), 0, "lazy: the leaves are read when needed");
	uint64_t end = flextree_size(t);
	int rc = flextree_insert(t, end, 123456000, 10);
	cr_assert(rc == 0 || rc == FLEX_ECORRUPT, "append: %d", rc);
	cr_assert_eq(flextree_check(t), FLEX_ECORRUPT, "the empty leaf is damage");
	flextree_close(t);
	tmpd_remove(&d);
}
