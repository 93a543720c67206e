/*
 * test_flexspace_sync.c - FlexSpace's syncs, tree commits and garbage
 * collection running concurrently with reads and changes
 * (docs/DURABILITY.md, "Syncs and concurrent operations").
 *
 * - Concurrency against a model: writers overwrite blocks of their own
 *   regions, each block stamped with its version; readers check every
 *   block they read is a version no older than the last one written before
 *   the read began and no newer than the last one begun; syncers, a
 *   defragmenter and a thread inserting and collapsing past the regions
 *   run alongside, with tiny segments and log so that tree commits and
 *   collections run all the time, done by the changes themselves or, with
 *   defer_maintenance, by a thread calling flexspace_maintain.  The end
 *   state is checked, then again after a reopen.
 * - No reader waits for the disk: an I/O table parks the first fdatasync
 *   of DATA, LOG or TREE during a sync, a tree commit or a collection, and
 *   reads (and, during a sync's or a collection's disk wait, writes) must
 *   complete meanwhile.
 * - Power loss with changes running during syncs: a writer thread applies
 *   a random stream while another thread syncs; at fdatasyncs (the crash
 *   I/O table's hook) and after each sync a power-loss image is made and
 *   must recover a state no older than the last one completed before a
 *   sync that returned 0 began, and no newer than the last one begun.
 *
 * Built with -DFLEXSPACE_TSAN_MAIN, the concurrency check is a plain
 * program (`make tsan` runs it under ThreadSanitizer; Criterion does not
 * start under it).  Random tests print their seed; FLEX_TEST_SEED=N
 * replays one, FLEX_TEST_SCALE multiplies durations and counts.
 */
#ifndef FLEXSPACE_TSAN_MAIN
#include <criterion/criterion.h>
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flexspace.h"
#include "lib/crashio.h"

/* ======================================================================
 * Concurrency against a model.
 * ====================================================================== */

#define CS_WRITERS 3
#define CS_READERS 2
#define CS_SYNCERS 2
#define CS_BLOCK 1024u
#define CS_BLOCKS 192u /* per writer */
#define CS_REGION ((uint64_t)CS_BLOCK * CS_BLOCKS)
#define CS_END ((uint64_t)CS_REGION * CS_WRITERS)
#define CS_NBLK (CS_BLOCKS * CS_WRITERS)

struct cs {
	struct flexspace *fs;
	uint64_t seed;
	double secs;
	int defer;
	atomic_int stop;
	atomic_int bad;
	/* Per block: the version last completed and the one last begun. */
	_Atomic uint64_t done[CS_NBLK];
	_Atomic uint64_t begun[CS_NBLK];
	atomic_long writes, reads, syncs, maints, resizes, defrags;
	pthread_mutex_t mu;
	char msg[512];
};

static void cs_fail(struct cs *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cs_fail(struct cs *s, const char *fmt, ...)
{
	pthread_mutex_lock(&s->mu);
	if (!atomic_load(&s->bad)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
		va_end(ap);
	}
	atomic_store(&s->bad, 1);
	atomic_store(&s->stop, 1);
	pthread_mutex_unlock(&s->mu);
}

/* Block b at version v: its number and version, then bytes derived from
 * both. */
static void cs_block(uint8_t *p, uint32_t b, uint64_t v)
{
	uint64_t r = (uint64_t)b << 40 ^ v * 0x9e3779b97f4a7c15ull;
	memcpy(p, &b, 4);
	memcpy(p + 4, &v, 8);
	op_data(r, p + 12, CS_BLOCK - 12);
}

/* The version of the block image p, or -1 when it is not block b at some
 * version. */
static int64_t cs_version(const uint8_t *p, uint32_t b)
{
	uint32_t pb;
	uint64_t v;
	memcpy(&pb, p, 4);
	memcpy(&v, p + 4, 8);
	if (pb != b)
		return -1;
	uint8_t want[CS_BLOCK];
	cs_block(want, b, v);
	return memcmp(want, p, CS_BLOCK) ? -1 : (int64_t)v;
}

struct cs_arg {
	struct cs *s;
	int id;
};

/* Overwrites runs of 1-4 blocks of its region, one call each. */
static void *cs_writer(void *arg)
{
	struct cs_arg *a = arg;
	struct cs *s = a->s;
	uint64_t r = s->seed ^ (0x1000u + (uint64_t)a->id);
	uint8_t buf[4 * CS_BLOCK];
	while (!atomic_load(&s->stop)) {
		uint32_t n = 1 + (uint32_t)rnd_below(&r, 4);
		uint32_t first = a->id * CS_BLOCKS + (uint32_t)rnd_below(&r, CS_BLOCKS - n + 1);
		uint64_t v[4];
		for (uint32_t i = 0; i < n; i++) {
			v[i] = atomic_load(&s->done[first + i]) + 1;
			atomic_store(&s->begun[first + i], v[i]);
			cs_block(buf + i * CS_BLOCK, first + i, v[i]);
		}
		ssize_t w = flexspace_write(s->fs, buf, (uint64_t)first * CS_BLOCK, n * CS_BLOCK);
		if (w != (ssize_t)(n * CS_BLOCK)) {
			cs_fail(s, "write of blocks %u+%u: %zd", first, n, w);
			break;
		}
		for (uint32_t i = 0; i < n; i++)
			atomic_store(&s->done[first + i], v[i]);
		atomic_fetch_add(&s->writes, 1);
	}
	return NULL;
}

static int cs_count_extent(void *arg, const struct flextree_extent *e)
{
	(void)e;
	(*(long *)arg)++;
	return 0;
}

/* Reads single blocks and runs of them, now and then the extents and the
 * statistics. */
static void *cs_reader(void *arg)
{
	struct cs_arg *a = arg;
	struct cs *s = a->s;
	uint64_t r = s->seed ^ (0x2000u + (uint64_t)a->id);
	uint8_t buf[8 * CS_BLOCK];
	while (!atomic_load(&s->stop)) {
		uint32_t n = 1 + (uint32_t)rnd_below(&r, 8);
		uint32_t first = (uint32_t)rnd_below(&r, CS_NBLK - n + 1);
		uint64_t lo[8];
		for (uint32_t i = 0; i < n; i++)
			lo[i] = atomic_load(&s->done[first + i]);
		ssize_t got = flexspace_read(s->fs, buf, (uint64_t)first * CS_BLOCK, n * CS_BLOCK);
		if (got != (ssize_t)(n * CS_BLOCK)) {
			cs_fail(s, "read of blocks %u+%u: %zd", first, n, got);
			break;
		}
		for (uint32_t i = 0; i < n; i++) {
			uint64_t hi = atomic_load(&s->begun[first + i]);
			int64_t v = cs_version(buf + i * CS_BLOCK, first + i);
			if (v < 0 || (uint64_t)v < lo[i] || (uint64_t)v > hi) {
				cs_fail(s,
					"block %u read as version %" PRId64 ", expected one in "
					"[%" PRIu64 ", %" PRIu64 "] (-1: not a version of it)",
					first + i, v, lo[i], hi);
				return NULL;
			}
		}
		atomic_fetch_add(&s->reads, 1);
		if (rnd_below(&r, 64) == 0) {
			long ne = 0;
			struct flexspace_stats st;
			int rc = flexspace_scan(s->fs, 0, CS_END, cs_count_extent, &ne);
			if (!rc)
				rc = flexspace_stats(s->fs, &st);
			if (rc || ne == 0 || st.size < CS_END) {
				cs_fail(s, "extents/stats: %s, %ld extents, size %" PRIu64,
					flex_strerror(rc), ne, rc ? 0 : st.size);
				break;
			}
		}
	}
	return NULL;
}

static void *cs_syncer(void *arg)
{
	struct cs_arg *a = arg;
	struct cs *s = a->s;
	uint64_t r = s->seed ^ (0x3000u + (uint64_t)a->id);
	while (!atomic_load(&s->stop)) {
		int rc = flexspace_sync(s->fs);
		if (rc) {
			cs_fail(s, "sync: %s", flex_strerror(rc));
			break;
		}
		atomic_fetch_add(&s->syncs, 1);
		usleep((useconds_t)rnd_below(&r, 2000));
	}
	return NULL;
}

static void *cs_maintainer(void *arg)
{
	struct cs *s = ((struct cs_arg *)arg)->s;
	while (!atomic_load(&s->stop)) {
		int rc = flexspace_maintain(s->fs);
		if (rc) {
			cs_fail(s, "maintain: %s", flex_strerror(rc));
			break;
		}
		atomic_fetch_add(&s->maints, 1);
		usleep(200);
	}
	return NULL;
}

/* Past the regions: inserts, collapses and truncates, which move nothing
 * a reader looks at. */
static void *cs_resizer(void *arg)
{
	struct cs *s = ((struct cs_arg *)arg)->s;
	uint64_t r = s->seed ^ 0x4000u;
	uint8_t buf[8192];
	while (!atomic_load(&s->stop)) {
		uint64_t size = flexspace_size(s->fs), tail = size - CS_END;
		int rc = 0, k = (int)rnd_below(&r, 3);
		if (size < CS_END) {
			cs_fail(s, "size %" PRIu64 " below the regions' end", size);
			break;
		}
		if (k == 0 || tail < 4096) {
			uint64_t len = 1 + rnd_below(&r, sizeof(buf));
			op_data(rnd(&r), buf, len);
			ssize_t n =
			    flexspace_insert(s->fs, buf, CS_END + rnd_below(&r, tail + 1), len);
			rc = n == (ssize_t)len ? 0 : n < 0 ? (int)n : -EPROTO;
		} else if (k == 1) {
			uint64_t off = CS_END + rnd_below(&r, tail);
			rc = flexspace_collapse(s->fs, off, 1 + rnd_below(&r, CS_END + tail - off));
		} else {
			rc = flexspace_truncate(s->fs, CS_END + rnd_below(&r, 16384));
		}
		if (rc) {
			cs_fail(s, "resize: %s", flex_strerror(rc));
			break;
		}
		atomic_fetch_add(&s->resizes, 1);
	}
	return NULL;
}

static void *cs_defragger(void *arg)
{
	struct cs *s = ((struct cs_arg *)arg)->s;
	uint64_t r = s->seed ^ 0x5000u;
	while (!atomic_load(&s->stop)) {
		uint64_t off = rnd_below(&r, CS_END);
		uint64_t len = rnd_below(&r, CS_END - off < 65536 ? CS_END - off : 65536);
		int rc = flexspace_defrag(s->fs, off, len);
		if (rc) {
			cs_fail(s, "defrag: %s", flex_strerror(rc));
			break;
		}
		atomic_fetch_add(&s->defrags, 1);
		usleep(500);
	}
	return NULL;
}

/* Every block at the version last written. */
static int cs_check_final(struct cs *s, const char *when)
{
	uint8_t *b = malloc(CS_END);
	ssize_t n = b ? flexspace_read(s->fs, b, 0, CS_END) : -ENOMEM;
	int bad = n != (ssize_t)CS_END;
	if (bad)
		snprintf(s->msg, sizeof(s->msg), "%s: reading the regions: %zd", when, n);
	for (uint32_t i = 0; i < CS_NBLK && !bad; i++) {
		int64_t v = cs_version(b + (uint64_t)i * CS_BLOCK, i);
		if (v != (int64_t)atomic_load(&s->done[i])) {
			snprintf(s->msg, sizeof(s->msg),
				 "%s: block %u is version %" PRId64 ", last written %" PRIu64, when,
				 i, v, atomic_load(&s->done[i]));
			bad = 1;
		}
	}
	free(b);
	int rc = bad ? 0 : flexspace_check(s->fs);
	if (rc) {
		snprintf(s->msg, sizeof(s->msg), "%s: flexspace_check: %s", when,
			 flex_strerror(rc));
		bad = 1;
	}
	return bad;
}

/* 0 when the run passed; otherwise msg says why. */
static int cs_run(uint64_t seed, int defer, int bounded, double secs, char *msg, size_t cap)
{
	char dir[PATH_MAX];
	if (tmp_make(dir, sizeof(dir), "conc") != 0) {
		snprintf(msg, cap, "tmp_make failed");
		return 1;
	}
	struct cs *s = calloc(1, sizeof(*s));
	s->seed = seed;
	s->defer = defer;
	pthread_mutex_init(&s->mu, NULL);
	struct flexspace_options o = tiny_options();
	o.defer_maintenance = defer;
	if (bounded)
		o.max_data_size = 4u << 20;
	int rc = flexspace_open(dir, &o, &s->fs);
	uint8_t blk[CS_BLOCK];
	for (uint32_t i = 0; i < CS_NBLK && !rc; i++) {
		cs_block(blk, i, 0);
		ssize_t n = flexspace_write(s->fs, blk, (uint64_t)i * CS_BLOCK, CS_BLOCK);
		rc = n == CS_BLOCK ? 0 : n < 0 ? (int)n : -EPROTO;
	}
	if (!rc)
		rc = flexspace_sync(s->fs);
	if (rc) {
		snprintf(msg, cap, "setup: %s", flex_strerror(rc));
		flexspace_close(s->fs);
		free(s);
		tmp_remove(dir);
		return 1;
	}
	pthread_t th[16];
	struct cs_arg args[16];
	int nt = 0;
	void *(*fn[16])(void *);
	for (int i = 0; i < CS_WRITERS; i++)
		fn[nt] = cs_writer, args[nt++] = (struct cs_arg){s, i};
	for (int i = 0; i < CS_READERS; i++)
		fn[nt] = cs_reader, args[nt++] = (struct cs_arg){s, i};
	for (int i = 0; i < CS_SYNCERS; i++)
		fn[nt] = cs_syncer, args[nt++] = (struct cs_arg){s, i};
	fn[nt] = cs_resizer, args[nt++] = (struct cs_arg){s, 0};
	fn[nt] = cs_defragger, args[nt++] = (struct cs_arg){s, 0};
	if (defer)
		fn[nt] = cs_maintainer, args[nt++] = (struct cs_arg){s, 0};
	for (int i = 0; i < nt; i++)
		pthread_create(&th[i], NULL, fn[i], &args[i]);
	double t0 = now_sec();
	while (!atomic_load(&s->stop) && now_sec() - t0 < secs)
		usleep(10000);
	atomic_store(&s->stop, 1);
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	int bad = atomic_load(&s->bad);
	if (!bad)
		bad = cs_check_final(s, "after the run");
	struct flexspace_stats st;
	flexspace_stats(s->fs, &st);
	rc = flexspace_close(s->fs);
	if (!bad && rc) {
		snprintf(s->msg, sizeof(s->msg), "close: %s", flex_strerror(rc));
		bad = 1;
	}
	if (!bad) {
		o.defer_maintenance = 0;
		rc = flexspace_open(dir, &o, &s->fs);
		if (rc) {
			snprintf(s->msg, sizeof(s->msg), "reopen: %s", flex_strerror(rc));
			bad = 1;
		} else {
			bad = cs_check_final(s, "after reopening");
			rc = flexspace_close(s->fs);
			if (!bad && rc) {
				snprintf(s->msg, sizeof(s->msg), "close: %s", flex_strerror(rc));
				bad = 1;
			}
		}
	}
	fprintf(stderr,
		"concurrency%s%s: %ld writes, %ld reads, %ld syncs, %ld maintain calls, %ld "
		"resizes, %ld defrags; tree commits %" PRIu64 ", gc runs %" PRIu64 "\n",
		defer ? " (deferred maintenance)" : "", bounded ? " (bounded)" : "",
		atomic_load(&s->writes), atomic_load(&s->reads), atomic_load(&s->syncs),
		atomic_load(&s->maints), atomic_load(&s->resizes), atomic_load(&s->defrags),
		st.tree_commits, st.gc_runs);
	if (bad)
		snprintf(msg, cap, "seed %" PRIu64 ": %s", seed, s->msg);
	pthread_mutex_destroy(&s->mu);
	free(s);
	tmp_remove(dir);
	return bad;
}

#ifdef FLEXSPACE_TSAN_MAIN

int main(void)
{
	uint64_t seed = test_seed("flexspace_tsan concurrency");
	char msg[600] = "";
	int bad = 0;
	for (int v = 0; v < 3 && !bad; v++) {
		bad = cs_run(seed + (uint64_t)v, v == 1, v == 2, 2.0 * test_scale(), msg,
			     sizeof(msg));
		printf("%s (variant %d)%s%s\n", bad ? "FAIL" : "PASS", v, bad ? ": " : "", msg);
	}
	return bad;
}

#else

TestSuite(flexspace_sync, .timeout = 240);

Test(flexspace_sync, concurrent_writers_readers_syncers_match_the_model)
{
	uint64_t seed = test_seed("concurrency");
	char msg[600] = "";
	cr_assert(!cs_run(seed, 0, 0, 3.0 * test_scale(), msg, sizeof(msg)), "%s", msg);
}

Test(flexspace_sync, concurrent_with_deferred_maintenance_match_the_model)
{
	uint64_t seed = test_seed("concurrency_deferred");
	char msg[600] = "";
	cr_assert(!cs_run(seed, 1, 0, 3.0 * test_scale(), msg, sizeof(msg)), "%s", msg);
}

Test(flexspace_sync, concurrent_in_a_bounded_space_match_the_model)
{
	uint64_t seed = test_seed("concurrency_bounded");
	char msg[600] = "";
	cr_assert(!cs_run(seed, 0, 1, 3.0 * test_scale(), msg, sizeof(msg)), "%s", msg);
}

/* ======================================================================
 * No reader waits for the disk.
 * ====================================================================== */

/* An I/O table that parks the first fdatasync of one of the space's files
 * once armed, until the test lets it go. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *name; /* the file's name in the space's directory */
	int fds[32];
	int nfd;
	int armed, parked, released;
};
static struct gate GT = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int gt_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	int fd = p->open(p, path, flags, mode);
	const char *base = strrchr(path, '/');
	pthread_mutex_lock(&GT.mu);
	if (fd >= 0 && base && !strcmp(base + 1, GT.name) && GT.nfd < 32)
		GT.fds[GT.nfd++] = fd;
	pthread_mutex_unlock(&GT.mu);
	return fd;
}

static int gt_close(const struct flex_io *io, int fd)
{
	(void)io;
	pthread_mutex_lock(&GT.mu);
	for (int i = 0; i < GT.nfd; i++)
		if (GT.fds[i] == fd)
			GT.fds[i--] = GT.fds[--GT.nfd];
	pthread_mutex_unlock(&GT.mu);
	return flex_io_posix()->close(flex_io_posix(), fd);
}

static int gt_fdatasync(const struct flex_io *io, int fd)
{
	(void)io;
	pthread_mutex_lock(&GT.mu);
	int hit = 0;
	for (int i = 0; i < GT.nfd && GT.armed; i++)
		hit |= GT.fds[i] == fd;
	if (hit) {
		GT.armed = 0;
		GT.parked = 1;
		pthread_cond_broadcast(&GT.cv);
		while (!GT.released)
			pthread_cond_wait(&GT.cv, &GT.mu);
	}
	pthread_mutex_unlock(&GT.mu);
	return flex_io_posix()->fdatasync(flex_io_posix(), fd);
}

enum { GT_SYNC, GT_COMMIT, GT_GC };

struct gt_run {
	struct flexspace *fs;
	int what;
	atomic_int stop;
	atomic_int done;
	int rc;
};

/* What parks: a sync, or the writes that make a tree commit or a
 * collection due (the writer overwrites the first 64 KiB over and over). */
static void *gt_driver(void *arg)
{
	struct gt_run *g = arg;
	uint8_t b[4096];
	uint64_t r = 7;
	if (g->what == GT_SYNC) {
		g->rc = flexspace_sync(g->fs);
	} else {
		while (!atomic_load(&g->stop) && !g->rc) {
			op_data(rnd(&r), b, sizeof(b));
			ssize_t n = flexspace_write(g->fs, b, rnd_below(&r, 16) * 4096, sizeof(b));
			g->rc = n == (ssize_t)sizeof(b) ? 0 : n < 0 ? (int)n : -EPROTO;
		}
	}
	atomic_store(&g->done, 1);
	return NULL;
}

struct gt_op {
	struct flexspace *fs;
	int write;
	atomic_int done;
	int rc;
};

static void *gt_one(void *arg)
{
	struct gt_op *o = arg;
	uint8_t b[4096];
	ssize_t n;
	if (o->write) {
		memset(b, 'w', sizeof(b));
		n = flexspace_write(o->fs, b, 1u << 20, sizeof(b));
	} else {
		n = flexspace_read(o->fs, b, 100000, sizeof(b));
	}
	o->rc = n == (ssize_t)sizeof(b) ? 0 : n < 0 ? (int)n : -EPROTO;
	atomic_store(&o->done, 1);
	return NULL;
}

/* Starts a read (or a write) and waits up to 10 s for it: 1 if it
 * finished. */
static int gt_finishes(struct flexspace *fs, int write, pthread_t *t, struct gt_op *o)
{
	o->fs = fs;
	o->write = write;
	atomic_init(&o->done, 0);
	o->rc = -1;
	cr_assert_eq(pthread_create(t, NULL, gt_one, o), 0);
	for (int ms = 0; ms < 10000 && !atomic_load(&o->done); ms++)
		usleep(1000);
	return atomic_load(&o->done);
}

static void gt_case(const char *file, int what, int writes_go_on)
{
	static const char *const whatn[] = {"sync", "tree commit", "gc"};
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "gate"), 0);
	struct flex_io io = *flex_io_posix();
	io.open = gt_open;
	io.close = gt_close;
	io.fdatasync = gt_fdatasync;
	pthread_mutex_lock(&GT.mu);
	GT.name = file;
	GT.nfd = 0;
	GT.armed = GT.parked = GT.released = 0;
	pthread_mutex_unlock(&GT.mu);
	struct flexspace_options o = tiny_options();
	o.io = &io;
	/* Leaves in memory whatever the build's default leaf cache (make
	 * test-tinycache): with one leaf every change commits the tree, and
	 * the sync or collection this parks would never come. */
	o.tree_cache_size = 16u << 20;
	if (what != GT_COMMIT)
		o.log_limit = 1u << 30; /* no tree commit but the one asked for */
	if (what == GT_GC)
		o.gc_ratio = 1.1;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint8_t *b = malloc(2u << 20);
	op_data(1, b, 2u << 20);
	cr_assert_eq(flexspace_write(fs, b, 0, 2u << 20), 2 << 20);
	free(b);
	if (what != GT_SYNC)
		cr_assert_eq(flexspace_sync(fs), 0);

	pthread_mutex_lock(&GT.mu);
	GT.armed = 1;
	pthread_mutex_unlock(&GT.mu);
	struct gt_run g = {.fs = fs, .what = what};
	atomic_init(&g.stop, 0);
	atomic_init(&g.done, 0);
	pthread_t dt;
	cr_assert_eq(pthread_create(&dt, NULL, gt_driver, &g), 0);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 60;
	pthread_mutex_lock(&GT.mu);
	while (!GT.parked && pthread_cond_timedwait(&GT.cv, &GT.mu, &dl) == 0)
		;
	int parked = GT.parked;
	pthread_mutex_unlock(&GT.mu);

	pthread_t rt, wt;
	struct gt_op ro, wo;
	int read_ok = parked && gt_finishes(fs, 0, &rt, &ro);
	int write_ok = parked && writes_go_on && gt_finishes(fs, 1, &wt, &wo);
	pthread_mutex_lock(&GT.mu);
	GT.released = 1;
	pthread_cond_broadcast(&GT.cv);
	pthread_mutex_unlock(&GT.mu);
	atomic_store(&g.stop, 1);
	pthread_join(dt, NULL);
	if (parked)
		pthread_join(rt, NULL);
	if (parked && writes_go_on)
		pthread_join(wt, NULL);
	cr_expect(parked, "%s: no fdatasync of %s within 60 s", whatn[what], file);
	cr_expect(read_ok, "%s: a read waited for the fdatasync of %s", whatn[what], file);
	cr_expect(!read_ok || ro.rc == 0, "%s: read: %s", whatn[what], flex_strerror(ro.rc));
	if (writes_go_on) {
		cr_expect(write_ok, "%s: a write waited for the fdatasync of %s", whatn[what],
			  file);
		cr_expect(!write_ok || wo.rc == 0, "%s: write: %s", whatn[what],
			  flex_strerror(wo.rc));
	}
	cr_expect_eq(g.rc, 0, "%s: %s", whatn[what], flex_strerror(g.rc));
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	cr_expect(what != GT_COMMIT || st.tree_commits > 1, "no tree commit");
	cr_expect(what != GT_GC || st.gc_runs > 0, "no garbage collection");
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace_sync, no_read_or_write_waits_for_a_syncs_fdatasyncs)
{
	gt_case("DATA", GT_SYNC, 1);
	gt_case("LOG", GT_SYNC, 1);
}

/* A tree commit holds changes off (the tree must not change while its
 * nodes are written) but not reads. */
Test(flexspace_sync, no_read_waits_for_a_tree_commits_fdatasyncs)
{
	gt_case("TREE", GT_COMMIT, 0);
}

/* A collection's closing sync lets changes go on too. */
Test(flexspace_sync, no_read_or_write_waits_for_a_collections_fdatasyncs)
{
	gt_case("DATA", GT_GC, 1);
	gt_case("LOG", GT_GC, 1);
}

/* ======================================================================
 * Power loss with changes running during syncs.
 * ====================================================================== */

static const struct gen_cfg plc_gen = {.target_size = 512u << 10,
				       .big_len = 200u << 10,
				       .insert_pct = 22,
				       .collapse_pct = 12,
				       .truncate_pct = 3,
				       .apply_pct = 6,
				       .defrag_pct = 3};

struct plc {
	struct cio c;
	struct flexspace *fs;
	char cdir[PATH_MAX];
	uint64_t seed;
	long nops;
	uint64_t *sizes, *hashes; /* of state k: after k operations */
	atomic_long done;	  /* operations completed */
	atomic_long started;	  /* operations begun */
	/* States reached before a sync that returned 0 began. */
	atomic_long acked;
	pthread_mutex_t mu; /* one image at a time */
	uint64_t frng;
	long images, newer, in_play, syncs, hook_calls;
	int failed;
	int wrc;
	char msg[900];
};

/* A power-loss image now: it must recover a state in [acked, started]. */
static void plc_image(struct plc *x, int how, const char *where)
{
	pthread_mutex_lock(&x->mu);
	if (x->failed) {
		pthread_mutex_unlock(&x->mu);
		return;
	}
	long lo = atomic_load(&x->acked);
	tmp_clear(x->cdir);
	long nch = 0;
	uint64_t fate = x->frng;
	int rc = cio_materialise(&x->c, NULL, x->cdir, &x->frng, how, &nch);
	long hi = atomic_load(&x->started);
	struct flexspace_options o = tiny_options();
	struct why w = {""};
	long k = -1;
	if (rc)
		failf(&w, "materialising: %s", strerror(-rc));
	if (rc || verify_recovered(x->cdir, &o, x->sizes, x->hashes, lo, hi, &k, &w)) {
		x->failed = 1;
		snprintf(x->msg, sizeof(x->msg),
			 "power loss %s (image %ld, fate rng %" PRIu64 ", %ld unsynced changes, "
			 "states [%ld, %ld]): %s",
			 where, x->images, fate, nch, lo, hi, w.msg);
	} else {
		x->images++;
		x->newer += k > lo;
		x->in_play += nch;
	}
	pthread_mutex_unlock(&x->mu);
}

/* At every third fdatasync, whoever makes it (a sync, or a commit or a
 * collection in the writer), an image of a power loss just before it. */
static void plc_before_sync(struct cio *c, void *arg)
{
	(void)c;
	struct plc *x = arg;
	pthread_mutex_lock(&x->mu);
	long n = ++x->hook_calls;
	pthread_mutex_unlock(&x->mu);
	if (n % 3 == 0)
		plc_image(x, CIO_RANDOM, "at an fdatasync");
}

static void *plc_writer(void *arg)
{
	struct plc *x = arg;
	struct model m = {0};
	uint8_t *buf = malloc(256u << 10);
	uint64_t r = x->seed;
	for (long i = 0; i < x->nops && !x->wrc; i++) {
		struct op op;
		gen_op(&r, m.size, &plc_gen, &op);
		model_apply(&m, &op, buf);
		x->sizes[i + 1] = m.size;
		x->hashes[i + 1] = model_hash(&m);
		atomic_store(&x->started, i + 1);
		x->wrc = space_apply(x->fs, &op, buf);
		if (x->wrc)
			snprintf(x->msg, sizeof(x->msg), "op %ld (%s): %s", i, op_names[op.type],
				 flex_strerror(x->wrc));
		atomic_store(&x->done, i + 1);
	}
	model_free(&m);
	free(buf);
	return NULL;
}

static void plc_workload(uint64_t seed, long nops, long *images, long *syncs, long *newer,
			 long *in_play)
{
	char wdir[PATH_MAX];
	struct plc *x = calloc(1, sizeof(*x));
	cr_assert_eq(tmp_make(wdir, sizeof(wdir), "plcw"), 0);
	cr_assert_eq(tmp_make(x->cdir, sizeof(x->cdir), "plcc"), 0);
	cio_init(&x->c);
	x->c.track = 1;
	x->c.before_sync = plc_before_sync;
	x->c.hook_arg = x;
	x->seed = seed;
	x->nops = nops;
	x->frng = seed ^ 0xfa7e;
	x->sizes = calloc((size_t)nops + 1, sizeof(uint64_t));
	x->hashes = calloc((size_t)nops + 1, sizeof(uint64_t));
	struct model m0 = {0};
	x->hashes[0] = model_hash(&m0);
	pthread_mutex_init(&x->mu, NULL);
	struct flexspace_options o = tiny_options();
	o.io = &x->c.io;
	cr_assert_eq(flexspace_open(wdir, &o, &x->fs), 0);

	pthread_t wt;
	cr_assert_eq(pthread_create(&wt, NULL, plc_writer, x), 0);
	uint64_t r = seed ^ 0x5ca1e;
	int src = 0;
	while (atomic_load(&x->done) < nops && !x->wrc && !x->failed && !src) {
		long lo = atomic_load(&x->done);
		src = flexspace_sync(x->fs);
		if (src)
			break;
		x->syncs++;
		long a = atomic_load(&x->acked);
		while (lo > a && !atomic_compare_exchange_weak(&x->acked, &a, lo))
			;
		if (rnd_below(&r, 4) == 0)
			plc_image(x, CIO_NONE_APPLIED, "after a sync");
		usleep((useconds_t)rnd_below(&r, 3000));
	}
	pthread_join(wt, NULL);
	/* Everything completed, then synced: only the last state may come
	 * back. */
	if (!src && !x->wrc && !x->failed) {
		src = flexspace_sync(x->fs);
		atomic_store(&x->acked, nops);
		if (!src)
			plc_image(x, CIO_RANDOM, "after the last sync");
	}
	int crc = flexspace_close(x->fs);
	fprintf(stderr,
		"power_loss_concurrent seed %" PRIu64 ": %ld ops, %ld syncs, %ld images "
		"(%ld unsynced changes in play, %ld recovered past the last ack)\n",
		seed, nops, x->syncs, x->images, x->in_play, x->newer);
	*images += x->images;
	*syncs += x->syncs;
	*newer += x->newer;
	*in_play += x->in_play;
	char msg[sizeof(x->msg)];
	memcpy(msg, x->msg, sizeof(msg));
	int wrc = x->wrc, failed = x->failed;
	cio_destroy(&x->c);
	pthread_mutex_destroy(&x->mu);
	free(x->sizes);
	free(x->hashes);
	tmp_remove(wdir);
	if (!getenv("FLEX_KEEP_CRASH") || !failed)
		tmp_remove(x->cdir);
	free(x);
	cr_assert_eq(wrc, 0, "seed %" PRIu64 ": %s", seed, msg);
	cr_assert_eq(src, 0, "seed %" PRIu64 ": sync: %s", seed, flex_strerror(src));
	cr_assert(!failed, "seed %" PRIu64 ": %s", seed, msg);
	cr_assert_eq(crc, 0, "seed %" PRIu64 ": close: %s", seed, flex_strerror(crc));
}

Test(flexspace_sync, power_loss_keeps_every_change_completed_before_a_sync_began)
{
	uint64_t seed = test_seed("power_loss_concurrent"), r = seed;
	long images = 0, syncs = 0, newer = 0, in_play = 0;
	long workloads = scaled(4);
	double t0 = now_sec();
	long k = 0;
	for (; k < workloads && within_budget(t0, k); k++)
		plc_workload(rnd(&r), 1500, &images, &syncs, &newer, &in_play);
	fprintf(stderr,
		"power_loss_concurrent: %ld workloads, %ld syncs, %ld images checked, %ld "
		"unsynced changes in play, %ld recovered past the last ack, %.1f s\n",
		k, syncs, images, in_play, newer, now_sec() - t0);
	cr_assert_geq(images, 20 * k, "too few images (%ld)", images);
}

#endif
