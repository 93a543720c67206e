/*
 * sync_latency_bench.c - read latency while the store is made durable:
 * reader threads time random reads while one writer writes and syncs, so
 * the tail of the read latency shows whether a reader ever waits for an
 * fdatasync (a sync, a tree commit or a garbage collection).
 *
 * Workloads (one line each: reads, then the read latency percentiles over
 * every read and over the reads that started during a sync call):
 *
 *   fs-nosync  the floor: the writer overwrites random 4 KiB blocks of a
 *              64 MiB space and never syncs, with gc_ratio 100 and a 1 GiB
 *              log_limit so that no collection or tree commit runs
 *              either: nothing waits for the disk, and what is left is the
 *              cost of sharing the space (and the machine) with a writer.
 *   fs-sync    FlexSpace, default options.  The writer overwrites random
 *              4 KiB blocks of a 64 MiB space and calls flexspace_sync
 *              every --sync-every writes.
 *   fs-commit  the same with log_limit 64 KiB: every 10-20 syncs also
 *              commit the tree (write and fdatasync TREE).
 *   fs-gc      the same with 1 MiB segments and gc_ratio 1.2: the
 *              overwrites keep garbage collection running.
 *   db-put     FlexDB with 1 MiB memtables over --pairs pairs: the writer
 *              puts random keys (the committer applies a memtable to the
 *              FlexSpace every few thousand puts, syncs it, commits its
 *              tree and collects garbage) and calls flexdb_sync every
 *              --sync-every puts; readers get random keys.
 *   db-maint   the same with the space's log_limit 64 KiB, 1 MiB segments
 *              and gc_ratio 1.2: tree commits and collections between
 *              every few chunks the committer applies.
 *
 * Readers read 256 bytes at a random block (FlexSpace) or get one pair
 * (FlexDB).  A sync counts as in progress from just before the call to
 * just after it returns; a read "during sync" started in that window.
 * The line ends with the writer's sync calls: how many, and their p50 and
 * maximum, then the same for the FlexSpace writes and syncs that also
 * committed the tree (the time during which other threads' changes wait).  The target the read
 * numbers are held to: p99.9 within 10x of p50.
 */
#include "bench_util.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "flexdb.h"
#include "flexspace.h"

#define BLOCK 4096u
#define SPACE_BLOCKS 16384u /* 64 MiB */
#define READ_BYTES 256u
#define KEY_BYTES 16
#define VAL_BYTES 100

struct cfg {
	const char *dir;
	double secs;
	int readers;
	unsigned sync_every;
	uint64_t pairs;
	uint64_t seed;
	int quick;
};

static int never_sync;

static struct cfg C = {.dir = "/tmp/sync_latency_bench",
		       .secs = 5,
		       .readers = 1,
		       .sync_every = 64,
		       .pairs = 200000,
		       .seed = 42};

struct run {
	struct flexspace *fs;
	struct flexdb *db;
	_Atomic int stop;
	_Atomic int syncing;
	_Atomic uint64_t syncs;
	struct hist all, during; /* merged */
	struct hist sync;	 /* the writer's sync calls */
	struct hist commit;	 /* FlexSpace writes and syncs that committed the tree */
	uint64_t commits;	 /* tree commits seen so far */
	pthread_mutex_t mu;
};

struct reader {
	struct run *r;
	uint64_t seed;
};

static void make_key(char *k, uint64_t i)
{
	snprintf(k, KEY_BYTES + 1, "k%015" PRIu64, i % 1000000000000000u);
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	struct run *r = rd->r;
	struct hist *all = calloc(1, sizeof(*all)), *during = calloc(1, sizeof(*during));
	if (!all || !during)
		die("out of memory");
	uint8_t buf[BLOCK];
	uint64_t s = rd->seed;
	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		uint64_t x = splitmix64(&s);
		int in_sync = atomic_load_explicit(&r->syncing, memory_order_relaxed);
		uint64_t t0 = now_ns();
		if (r->fs) {
			uint64_t off = x % SPACE_BLOCKS * BLOCK;
			if (flexspace_read(r->fs, buf, off, READ_BYTES) != READ_BYTES)
				die("flexspace_read failed");
		} else {
			char k[KEY_BYTES + 1];
			size_t vlen;
			make_key(k, x % C.pairs);
			int rc = flexdb_get(r->db, k, KEY_BYTES, buf, sizeof(buf), &vlen);
			if (rc != 0 && rc != FLEXDB_NOTFOUND)
				die("flexdb_get: %s", flex_strerror(rc));
		}
		uint64_t dt = now_ns() - t0;
		h_add(all, dt);
		if (in_sync)
			h_add(during, dt);
	}
	pthread_mutex_lock(&r->mu);
	h_merge(&r->all, all);
	h_merge(&r->during, during);
	pthread_mutex_unlock(&r->mu);
	free(all);
	free(during);
	return NULL;
}

/* A FlexSpace call that took long enough to have committed the tree (a
 * commit fdatasyncs TREE twice): was it one? */
static void note_commit(struct run *r, uint64_t dt)
{
	struct flexspace_stats st;
	if (!r->fs || dt < 200000 || flexspace_stats(r->fs, &st))
		return;
	if (st.tree_commits > r->commits)
		h_add(&r->commit, dt);
	r->commits = st.tree_commits;
}

static int do_sync(struct run *r)
{
	atomic_store(&r->syncing, 1);
	uint64_t t0 = now_ns();
	int rc = r->fs ? flexspace_sync(r->fs) : flexdb_sync(r->db);
	uint64_t dt = now_ns() - t0;
	h_add(&r->sync, dt);
	note_commit(r, dt);
	atomic_store(&r->syncing, 0);
	atomic_fetch_add(&r->syncs, 1);
	return rc;
}

static void writer_loop(struct run *r)
{
	uint8_t blk[BLOCK];
	char val[VAL_BYTES];
	uint64_t s = C.seed ^ 0x5eed;
	uint64_t t_end = now_ns() + (uint64_t)(C.secs * 1e9);
	for (unsigned i = 1; now_ns() < t_end && !interrupted; i++) {
		uint64_t x = splitmix64(&s);
		int rc;
		if (r->fs) {
			memset(blk, (int)(x & 0xff), sizeof(blk));
			uint64_t t0 = now_ns();
			rc = flexspace_write(r->fs, blk, x % SPACE_BLOCKS * BLOCK, BLOCK) == BLOCK
				 ? 0
				 : -EIO;
			note_commit(r, now_ns() - t0);
		} else {
			char k[KEY_BYTES + 1];
			make_key(k, x % C.pairs);
			memset(val, 'a' + (int)(x % 26), sizeof(val));
			rc = flexdb_put(r->db, k, KEY_BYTES, val, sizeof(val));
		}
		if (rc)
			die("write failed: %s", flex_strerror(rc));
		if (!never_sync && i % C.sync_every == 0 && (rc = do_sync(r)) != 0)
			die("sync failed: %s", flex_strerror(rc));
	}
}

static void run_workload(const char *name, struct run *r)
{
	pthread_t th[64];
	struct reader rd[64];
	pthread_mutex_init(&r->mu, NULL);
	for (int i = 0; i < C.readers; i++) {
		rd[i] = (struct reader){.r = r, .seed = C.seed + 1 + (uint64_t)i};
		if (pthread_create(&th[i], NULL, reader_main, &rd[i]))
			die("pthread_create failed");
	}
	uint64_t t0 = now_ns();
	writer_loop(r);
	atomic_store(&r->stop, 1);
	for (int i = 0; i < C.readers; i++)
		pthread_join(th[i], NULL);
	uint64_t t1 = now_ns();
	struct lat_summary a, d, sy, co;
	h_summary(&r->all, t0, t1, &a);
	h_summary(&r->during, t0, t1, &d);
	h_summary(&r->sync, t0, t1, &sy);
	h_summary(&r->commit, t0, t1, &co);
	printf("%-10s %10.0f reads/s  p50 %7.2f  p99 %8.2f  p99.9 %9.2f  max %9.1f us"
	       "  | during sync: %8.0f reads  p50 %7.2f  p99.9 %9.2f  max %9.1f us"
	       "  | p99.9/p50 %6.1f  | syncs %" PRIu64 ": p50 %8.1f  max %9.1f us"
	       "  | %4.0f calls with a tree commit: p50 %8.1f  max %9.1f us\n",
	       name, a.opsps, a.p50, a.p99, a.p999, a.maxus, d.ops, d.p50, d.p999, d.maxus,
	       a.p999 / a.p50, atomic_load(&r->syncs), sy.p50, sy.maxus, co.ops, co.p50, co.maxus);
	fflush(stdout);
	pthread_mutex_destroy(&r->mu);
}

/* A fresh run and an empty directory for it under --dir. */
static struct run *run_new(const char *name, char *dir, size_t cap)
{
	xsnprintf(dir, cap, "%s/%s", C.dir, name);
	rmtree(dir);
	struct run *r = calloc(1, sizeof(*r));
	if (!r)
		die("out of memory");
	return r;
}

static void fs_workload(const char *name, const struct flexspace_options *o)
{
	char dir[PATH_MAX];
	struct run *r = run_new(name, dir, sizeof(dir));
	int rc = flexspace_open(dir, o, &r->fs);
	if (rc)
		die("flexspace_open %s: %s", dir, flex_strerror(rc));
	uint8_t *chunk = xmalloc(1u << 20);
	for (uint32_t i = 0; i < (1u << 20); i++)
		chunk[i] = (uint8_t)(i * 131);
	for (uint64_t off = 0; off < (uint64_t)SPACE_BLOCKS * BLOCK; off += 1u << 20)
		if (flexspace_write(r->fs, chunk, off, 1u << 20) != (1 << 20))
			die("flexspace_write failed while loading");
	free(chunk);
	if ((rc = flexspace_sync(r->fs)) != 0)
		die("flexspace_sync: %s", flex_strerror(rc));
	run_workload(name, r);
	struct flexspace_stats st;
	flexspace_stats(r->fs, &st);
	printf("%-10s tree commits %" PRIu64 ", gc runs %" PRIu64 ", gc MB moved %.1f\n", "",
	       st.tree_commits, st.gc_runs, (double)st.gc_bytes_moved / 1e6);
	if ((rc = flexspace_close(r->fs)) != 0)
		die("flexspace_close: %s", flex_strerror(rc));
	free(r);
	rmtree(dir);
}

static void db_workload(const char *name, const struct flexspace_options *so)
{
	char dir[PATH_MAX];
	struct run *r = run_new(name, dir, sizeof(dir));
	struct flexdb_options o = {
	    .space = *so, .memtable_size = 1u << 20, .cache_size = 16u << 20};
	int rc = flexdb_open(dir, &o, &r->db);
	if (rc)
		die("flexdb_open %s: %s", dir, flex_strerror(rc));
	char val[VAL_BYTES];
	memset(val, 'v', sizeof(val));
	for (uint64_t i = 0; i < C.pairs; i++) {
		char k[KEY_BYTES + 1];
		make_key(k, i);
		if ((rc = flexdb_put(r->db, k, KEY_BYTES, val, sizeof(val))) != 0)
			die("flexdb_put: %s", flex_strerror(rc));
	}
	if ((rc = flexdb_sync(r->db)) != 0)
		die("flexdb_sync: %s", flex_strerror(rc));
	run_workload(name, r);
	struct flexdb_stats st;
	flexdb_stats(r->db, &st);
	printf("%-10s tree commits %" PRIu64 ", gc runs %" PRIu64 ", fs syncs %" PRIu64 "\n", "",
	       st.space.tree_commits, st.space.gc_runs, st.space.syncs);
	if ((rc = flexdb_close(r->db)) != 0)
		die("flexdb_close: %s", flex_strerror(rc));
	free(r);
	rmtree(dir);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sync_latency_bench [--dir D] [--secs S] [--readers N] "
		   "[--sync-every N] [--pairs N] [--seed N] [--quick] "
		   "[--benchmarks fs-nosync,fs-sync,fs-commit,fs-gc,db-put,db-maint]\n");
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"fs-nosync", "fs-sync", "fs-commit",
					    "fs-gc",	 "db-put",  "db-maint"};
	int on[6] = {1, 1, 1, 1, 1, 1};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dir"))
			C.dir = opt_value(argc, argv, &i);
		else if (!strcmp(argv[i], "--secs"))
			C.secs = atof(opt_value(argc, argv, &i));
		else if (!strcmp(argv[i], "--readers"))
			C.readers = (int)opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--sync-every"))
			C.sync_every = (unsigned)opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--pairs"))
			C.pairs = opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--seed"))
			C.seed = opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--quick"))
			C.quick = 1;
		else if (!strcmp(argv[i], "--benchmarks")) {
			memset(on, 0, sizeof(on));
			mark_names(opt_value(argc, argv, &i), names, 6, on, "benchmark");
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			usage_exit(usage, 1);
		else
			usage_exit(usage, 0);
	}
	if (C.quick) {
		C.secs = 1;
		C.pairs = 20000;
	}
	if (C.readers < 1 || C.readers > 64 || !C.sync_every || !C.pairs || !(C.secs > 0))
		usage_exit(usage, 0);
	print_build_mode();
	printf("config:   %d reader thread(s), 1 writer, sync every %u writes, %.1f s per "
	       "workload, seed %" PRIu64 ", dir %s\n\n",
	       C.readers, C.sync_every, C.secs, C.seed, C.dir);
	if (mkdir(C.dir, 0755) != 0 && errno != EEXIST)
		die("mkdir %s: %s", C.dir, strerror(errno));
	if (on[0]) {
		never_sync = 1;
		fs_workload("fs-nosync",
			    &(struct flexspace_options){.gc_ratio = 100, .log_limit = 1u << 30});
		never_sync = 0;
	}
	if (on[1])
		fs_workload("fs-sync", &(struct flexspace_options){0});
	if (on[2])
		fs_workload("fs-commit", &(struct flexspace_options){.log_limit = 64u << 10});
	if (on[3])
		fs_workload("fs-gc",
			    &(struct flexspace_options){.segment_size = 1u << 20, .gc_ratio = 1.2});
	if (on[4])
		db_workload("db-put", &(struct flexspace_options){0});
	if (on[5])
		db_workload("db-maint", &(struct flexspace_options){.log_limit = 64u << 10,
								    .segment_size = 1u << 20,
								    .gc_ratio = 1.2});
	return 0;
}
