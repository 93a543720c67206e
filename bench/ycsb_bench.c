/*
 * ycsb_bench.c - YCSB's core workloads on FlexDB, RocksDB, LevelDB and LMDB
 * in one program run (the FlexDB paper's section 6.3 YCSB comparison,
 * scaled to this machine).
 *
 * Phases, in the order they run on one store:
 *
 *   load     a fresh store; key numbers 0 .. num-1 inserted once each, with
 *            T threads each taking a contiguous range of key numbers (keys
 *            are hashed, so every thread writes in a random key order)
 *   ycsb-A   50% read, 50% update                 request distribution zipfian
 *   ycsb-B   95% read, 5% update                                   zipfian
 *   ycsb-C   100% read                                             zipfian
 *   ycsb-D   95% read, 5% insert                                   latest
 *   ycsb-E   95% scan (1..100 pairs, uniform), 5% insert           zipfian
 *   ycsb-F   50% read, 50% read-modify-write                       zipfian
 *
 * The generators are YCSB's (bench/ycsb_gen.h says exactly how, quirks
 * included).  Keys are CoreWorkload.buildKeyName's with insertorder=hashed:
 * "user" + zero padding + decimal fnvhash64(keynum), the padding (YCSB's
 * zeropadding property) chosen so that every key has the dataset's key
 * size.  Values are one field of the dataset's value size: the key number
 * in the first 8 bytes (reads check it), then incompressible bytes.  An
 * update or the write of a read-modify-write replaces the whole value.
 * Zipfian is YCSB's ScrambledZipfianGenerator over [0, records +
 * 2 x ops x insertproportion] with draws beyond the last acknowledged
 * insert redrawn (CoreWorkload.nextKeynum); latest is SkewedLatestGenerator
 * over an AcknowledgedCounterGenerator shared by the client threads.
 * Unlike separate YCSB invocations, the phases run in one sequence on one
 * store, so each workload starts from the records the previous ones left
 * (inserts of D and E continue the key numbers instead of re-inserting).
 *
 * Datasets (--dataset, the paper's Table 3 key+value sizes): zippydb 48+43,
 * udb 27+127 (default), sys 28+396 bytes.
 *
 * Fairness, one knob at a time (bench/kv_engines.h has every setting):
 *   - memory: cache + memtables equal on every engine that has them:
 *     FlexDB cache 64 MiB + 2 x 32 MiB memtables; RocksDB LRU block cache
 *     64 MiB + write_buffer_size 32 MiB x max_write_buffer_number 2;
 *     LevelDB LRU cache 64 MiB + write_buffer_size 32 MiB (one active plus
 *     one immutable memtable: the same 2 x 32 MiB peak).  LMDB has no
 *     user-space cache or memtable: it reads and writes through the OS page
 *     cache (map size 64 GiB, a virtual reservation: the file grows as
 *     used).  Not in any budget: FlexDB's sparse index, RocksDB's and
 *     LevelDB's index and filter blocks.
 *   - compression off everywhere; RocksDB and LevelDB get a 10-bit bloom
 *     filter (their tuning advice; LevelDB has none by default).
 *   - durability: no sync per write for anyone; every write is handed to
 *     the OS before the call returns, so it survives a process crash but
 *     not a machine crash: FlexDB sync_writes=0, RocksDB and LevelDB
 *     default WriteOptions (sync=false), LMDB MDB_NOSYNC|MDB_NOMETASYNC
 *     (every put is its own write transaction whose pages are written to
 *     the file at commit, without fsync; LMDB's single-writer lock
 *     serialises concurrent writers).
 *   - the same keys, values, operation streams (seeded per repetition,
 *     phase and thread, not per engine), thread count and order of phases.
 *   - isolation: each engine's phases run in a forked child of a parent
 *     that never opens a store, engines one after the other, the order
 *     rotating between repetitions; medians over repetitions are reported.
 *   - settling: after every phase that wrote, the store is brought to a
 *     quiet state and reopened before the next phase: RocksDB flushes its
 *     memtables and waits until no flush or compaction is pending or
 *     running; LevelDB (no flush call in its C API) waits until level 0
 *     has fewer than 4 files (its compaction trigger); FlexDB commits its
 *     memtables and waits for its committer's tidying (flexdb_compact);
 *     all are then closed (LevelDB writes its memtable to a table when
 *     reopening) and reopened, and LevelDB waits for level 0 once more
 *     (kv_settle in bench/kv_engines.c).
 *
 * Metrics, per engine and phase:
 *   ops/s      operations over the wall time of the timed loop (first
 *              thread's start to last thread's end), settling excluded
 *   latency    every operation timed (clock_gettime MONOTONIC) into a
 *              log-linear histogram (~3% buckets): p50, p99, p99.9, max
 *   cpu        user+system CPU of the whole child process (background
 *              threads included: RUSAGE_SELF) over loop + settle, per op
 *   wa         write_bytes of /proc/self/io (bytes the child dirtied for
 *              the block layer, every thread) over loop + settle, divided
 *              by the key+value bytes of the phase's puts
 *   space      allocated bytes of the store directory (du) after the
 *              settle over the live key+value bytes
 *   rss/peak   VmRSS at the end of the loop and VmHWM over loop + settle
 *              (reset per phase through /proc/self/clear_refs); the parent
 *              is small, so this is the engine's.  LMDB's count the
 *              resident pages of its mapped file.  Also RssAnon and
 *              RssFile at the end of the loop.
 *   reads      per op over loop + settle, from /proc/self/io and getrusage
 *              of the child: read_bytes (what the block layer read),
 *              syscr (read system calls; io_uring reads are not counted)
 *              and major faults (reads of mapped files: LMDB's)
 *   cgroup     with --cgroup-mb N, each engine's children run in a v1
 *              memory cgroup of N MiB that counts the page cache of the
 *              store too (bench/memcg.h): its usage, page cache and
 *              anonymous memory at the end of the loop, and its peak over
 *              loop + settle.  A child the OOM killer ends is reported as
 *              OOM (its phases are lost; the other engines go on).
 * Reopen, per engine: "clean" is the open after a quiesced close at the end
 * of the phases; "after-kill" the open of the store after a child that
 * wrote kill_ops updates (and kept writing) was killed with SIGKILL,
 * timed in a fresh child; s/GB divides it by the store's du.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flexdb.h"
#include "ycsb_gen.h"

#include "bench_util.h"

/* ---- configuration ---------------------------------------------------------- */

#define MAX_REPS 9
#define MAX_THREADS 64
#define MAX_TC 8 /* thread counts in one run */

#include "kv_engines.h"
#include "memcg.h"

/* Resets VmHWM to the current RSS ("5" to clear_refs, Linux >= 4.0). */
static int reset_hwm(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);

	if (fd < 0)
		return 0;
	int ok = write(fd, "5", 1) == 1;
	close(fd);
	return ok;
}

/* User + system CPU seconds of the process, every thread. */
static double cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

#if MAX_THREADS > KV_MAX_THREADS
#error "MAX_THREADS above what the engine adapters allow"
#endif

enum phase { P_LOAD, P_A, P_B, P_C, P_D, P_E, P_F, NPH };
static const char *const ph_name[NPH] = {"load",   "ycsb-A", "ycsb-B", "ycsb-C",
					 "ycsb-D", "ycsb-E", "ycsb-F"};

struct dataset {
	const char *name;
	uint32_t key_size, value_size;
};
static const struct dataset datasets[] = {
    {"zippydb", 48, 43},
    {"udb", 27, 127},
    {"sys", 28, 396},
};

static struct {
	const struct dataset *ds;
	uint32_t key_size, value_size;
	int zeropadding;
	uint64_t num, ops, scan_ops, kill_ops;
	int tcs[MAX_TC], ntc;
	int reps, quick, plot;
	int dist_override; /* -1: each workload's own */
	uint64_t seed;
	int eng_on[8];
	char base[PATH_MAX];
	char work[PATH_MAX];
	char out[PATH_MAX];
	const char *plot_script;
	char *valpool;
	int proc_io_ok, clear_refs_ok;
	char rocks_version[32];
	uint64_t cgroup_mb;	      /* 0: no cgroups */
	int cgroup_optional;	      /* skip the run when cgroups are unavailable */
	char cg_parent[PATH_MAX];     /* where the groups go */
	char cg_live[PATH_MAX + 128]; /* the group of the running child, for cleanup */
	pid_t parent_pid;
} B;

/* ---- small helpers ------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
	struct ycsb_rng r = {x};

	return ycsb_rng_next(&r);
}

/* The seed of one thread's stream in one phase: the same for every engine. */
static uint64_t stream_seed(int rep, int tcount, int phase, int t)
{
	return mix64(B.seed ^ mix64(((uint64_t)rep << 48) ^ ((uint64_t)tcount << 32) ^
				    ((uint64_t)phase << 16) ^ (uint64_t)t));
}

static size_t make_key(char *k, size_t cap, int64_t keynum)
{
	return ycsb_build_key(k, cap, keynum, 1, B.zeropadding);
}

/* ---- the acknowledged insert counter (YCSB's AcknowledgedCounterGenerator) --- */

/* Inserts take the next key number; readers may only choose up to
 * lastValue: the highest number below which every insert has been
 * acknowledged.  A thread that acknowledges advances the limit when it can
 * take the lock without waiting, as YCSB's does. */
struct ackctr {
	int64_t start, cap;
	int64_t next, limit; /* atomics */
	uint8_t *win;
	pthread_mutex_t mu;
};

static void ack_init(struct ackctr *c, int64_t start, int64_t cap)
{
	c->start = start;
	c->cap = cap;
	c->next = start;
	c->limit = start - 1;
	c->win = calloc((size_t)cap + 1, 1);
	if (!c->win)
		die("out of memory");
	pthread_mutex_init(&c->mu, NULL);
}

static int64_t ack_last(struct ackctr *c)
{
	return __atomic_load_n(&c->limit, __ATOMIC_ACQUIRE);
}

static int64_t ack_next(struct ackctr *c)
{
	return __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
}

static void ack_advance(struct ackctr *c)
{
	int64_t l = c->limit;

	while (l + 1 - c->start < c->cap &&
	       __atomic_load_n(&c->win[l + 1 - c->start], __ATOMIC_ACQUIRE))
		l++;
	__atomic_store_n(&c->limit, l, __ATOMIC_RELEASE);
}

static void ack_done(struct ackctr *c, int64_t v)
{
	if (v - c->start >= c->cap)
		die("insert counter overflow");
	__atomic_store_n(&c->win[v - c->start], 1, __ATOMIC_RELEASE);
	if (pthread_mutex_trylock(&c->mu) == 0) {
		ack_advance(c);
		pthread_mutex_unlock(&c->mu);
	}
}

static void ack_free(struct ackctr *c)
{
	pthread_mutex_destroy(&c->mu);
	free(c->win);
}

/* ---- one phase on one store ----------------------------------------------------------- */

struct meas {
	int have;
	LAT_SUMMARY_MEMBER;
	double cpu_us, wa, wa_net, space_amp, du, rss, peak, settle_s;
	double user_bytes, written;
	/* per op over loop + settle: block-layer read bytes, read calls,
	 * major faults; RssAnon and RssFile at the end of the loop (MiB);
	 * the memory cgroup's usage, page cache and anonymous memory then,
	 * and its peak over loop + settle (MiB; NaN without --cgroup-mb) */
	double rd_per_op, calls_per_op, faults_per_op, anon, file;
	double cg_usage, cg_cache, cg_rss, cg_peak;
	uint64_t errors, bad, notfound, inserts, scanned;
};

struct phase_run {
	struct store *s;
	int phase, rep, nt;
	const struct ycsb_workload *w;
	enum ycsb_dist dist;
	int64_t records; /* key numbers 0 .. records-1 exist at the start */
	int64_t ops;	 /* operations of the phase, all threads */
	struct ackctr ctr;
	pthread_barrier_t bar;
};

struct job {
	struct phase_run *pr;
	int t;
	int64_t begin, count;
	struct hist h;
	uint64_t t_start, t_end;
	uint64_t user_bytes, errors, bad, notfound, inserts, scanned, sink;
};

/* CoreWorkload.nextKeynum. */
static int64_t next_keynum(struct phase_run *pr, struct ycsb_rng *r, struct ycsb_scrambled *sz,
			   struct ycsb_latest *lt)
{
	int64_t k;

	switch (pr->dist) {
	case YCSB_UNIFORM:
		return ycsb_uniform(r, 0, pr->records - 1);
	case YCSB_LATEST:
		do
			k = ycsb_latest_next(lt, r, ack_last(&pr->ctr));
		while (k > ack_last(&pr->ctr));
		return k;
	default:
		do
			k = ycsb_scrambled_next(sz, r);
		while (k > ack_last(&pr->ctr));
		return k;
	}
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct phase_run *pr = j->pr;
	struct store *s = pr->s;
	const struct engine *e = s->eng;
	struct ycsb_rng r;
	struct ycsb_scrambled sz;
	struct ycsb_latest lt;
	char key[96];
	size_t cap = B.value_size + 8;
	char *val = malloc(cap), *rbuf = malloc(cap);
	uint64_t version = (uint64_t)pr->phase << 40 | (uint64_t)j->t << 32;

	if (!val || !rbuf)
		die("out of memory");
	ycsb_rng_seed(&r, stream_seed(pr->rep, pr->nt, pr->phase, j->t));
	if (pr->w) {
		/* CoreWorkload.init: expectednewkeys = opcount x
		 * insertproportion x 2 (YCSB's "fudge factor"). */
		int64_t expectednew = (int64_t)((double)pr->ops * pr->w->prop[YCSB_INSERT] * 2.0);
		if (pr->dist == YCSB_ZIPFIAN)
			ycsb_scrambled_init(&sz, &r, 0, pr->records + expectednew);
		else if (pr->dist == YCSB_LATEST)
			ycsb_latest_init(&lt, &r, ack_last(&pr->ctr));
	}
	void *tc = e->thread_init(s);
	pthread_barrier_wait(&pr->bar);
	j->t_start = now_ns();
	for (int64_t i = 0; i < j->count; i++) {
		if (!pr->w) { /* load */
			int64_t kn = j->begin + i;
			size_t kl = make_key(key, sizeof(key), kn);
			make_value(val, B.value_size, B.valpool, kn, 0);
			uint64_t t0 = now_ns();
			int rc = e->put(s, tc, key, kl, val, B.value_size);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->user_bytes += kl + B.value_size;
			continue;
		}
		enum ycsb_op op = ycsb_choose_op(pr->w, &r);
		int64_t kn;
		size_t kl, vl = 0;
		int rc;
		uint64_t t0;

		switch (op) {
		case YCSB_READ:
			kn = next_keynum(pr, &r, &sz, &lt);
			kl = make_key(key, sizeof(key), kn);
			t0 = now_ns();
			rc = e->get(s, tc, key, kl, rbuf, cap, &vl);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc < 0;
			j->notfound += rc == 1;
			j->bad += rc == 0 && !value_ok(rbuf, vl, B.value_size, kn);
			break;
		case YCSB_UPDATE:
			kn = next_keynum(pr, &r, &sz, &lt);
			kl = make_key(key, sizeof(key), kn);
			make_value(val, B.value_size, B.valpool, kn, ++version);
			t0 = now_ns();
			rc = e->put(s, tc, key, kl, val, B.value_size);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->user_bytes += kl + B.value_size;
			break;
		case YCSB_INSERT:
			kn = ack_next(&pr->ctr);
			kl = make_key(key, sizeof(key), kn);
			make_value(val, B.value_size, B.valpool, kn, ++version);
			t0 = now_ns();
			rc = e->put(s, tc, key, kl, val, B.value_size);
			h_add(&j->h, now_ns() - t0);
			ack_done(&pr->ctr, kn);
			j->errors += rc != 0;
			j->user_bytes += kl + B.value_size;
			j->inserts++;
			break;
		case YCSB_SCAN: {
			kn = next_keynum(pr, &r, &sz, &lt);
			int len = (int)ycsb_uniform(&r, YCSB_MIN_SCAN, YCSB_MAX_SCAN);
			uint64_t bytes = 0;
			kl = make_key(key, sizeof(key), kn);
			t0 = now_ns();
			rc = kv_scan(s, tc, key, kl, len, &bytes);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc < 0;
			/* The start key exists: a scan reads at least it. */
			j->bad += rc == 0;
			if (rc > 0)
				j->scanned += (uint64_t)rc;
			j->sink += bytes;
			break;
		}
		case YCSB_RMW:
		default:
			kn = next_keynum(pr, &r, &sz, &lt);
			kl = make_key(key, sizeof(key), kn);
			make_value(val, B.value_size, B.valpool, kn, ++version);
			t0 = now_ns();
			rc = e->get(s, tc, key, kl, rbuf, cap, &vl);
			int rc2 = e->put(s, tc, key, kl, val, B.value_size);
			h_add(&j->h, now_ns() - t0);
			j->errors += (rc < 0) + (rc2 != 0);
			j->notfound += rc == 1;
			j->bad += rc == 0 && !value_ok(rbuf, vl, B.value_size, kn);
			j->user_bytes += kl + B.value_size;
			break;
		}
	}
	j->t_end = now_ns();
	e->thread_done(s, tc);
	free(val);
	free(rbuf);
	return NULL;
}

/* Quiesce, close, reopen (kv_settle); returns the seconds. */
static double settle(struct store *s)
{
	uint64_t t0 = now_ns();

	kv_settle(s, NULL, NULL);
	return secs_since(t0);
}

/* The memory cgroup this child runs in, or NULL. */
static const char *child_cg;

/* Runs one phase with nt threads; *records grows by the inserts. */
static void run_phase(struct store *s, int phase, int rep, int nt, int64_t *records, struct meas *m)
{
	struct phase_run pr;
	struct job *jobs = calloc((size_t)nt, sizeof(*jobs));
	struct hist *h = calloc(1, sizeof(*h));
	pthread_t th[MAX_THREADS];
	int64_t ops;

	if (!jobs || !h)
		die("out of memory");
	memset(&pr, 0, sizeof(pr));
	memset(m, 0, sizeof(*m));
	pr.s = s;
	pr.phase = phase;
	pr.rep = rep;
	pr.nt = nt;
	pr.records = *records;
	if (phase == P_LOAD) {
		ops = (int64_t)B.num;
	} else {
		pr.w = &ycsb_workloads[phase - P_A];
		pr.dist = B.dist_override >= 0 ? (enum ycsb_dist)B.dist_override : pr.w->dist;
		ops = (int64_t)(phase == P_E ? B.scan_ops : B.ops);
	}
	pr.ops = ops;
	ack_init(&pr.ctr, *records, ops + 1);
	pthread_barrier_init(&pr.bar, NULL, (unsigned)nt);

	reset_hwm();
	if (child_cg)
		memcg_reset_peak(child_cg);
	struct pio io0 = proc_io();
	uint64_t mf0 = major_faults();
	double cpu0 = cpu_secs();
	/* FlexDB's own count of what it wrote where, for the progress line. */
	int is_flex = s->eng == &engines[E_FLEX];
	struct flexdb_stats fs0, fs1;
	if (is_flex)
		flexdb_stats(s->h, &fs0);
	uint64_t tidy0 = kv_flex_tidy_bytes, gc0 = kv_flex_gc_bytes, sd0 = kv_flex_settle_data,
		 st0 = kv_flex_settle_tree, sl0 = kv_flex_settle_log;
	for (int t = 0; t < nt; t++) {
		struct job *j = &jobs[t];
		j->pr = &pr;
		j->t = t;
		j->begin = ops * t / nt;
		j->count = ops * (t + 1) / nt - j->begin;
		if (pthread_create(&th[t], NULL, worker, j))
			die("pthread_create failed");
	}
	uint64_t ts = UINT64_MAX, te = 0;
	for (int t = 0; t < nt; t++) {
		struct job *j = &jobs[t];
		pthread_join(th[t], NULL);
		h_merge(h, &j->h);
		ts = j->t_start < ts ? j->t_start : ts;
		te = j->t_end > te ? j->t_end : te;
		m->user_bytes += (double)j->user_bytes;
		m->errors += j->errors;
		m->bad += j->bad;
		m->notfound += j->notfound;
		m->inserts += j->inserts;
		m->scanned += j->scanned;
	}
	struct rss rs = rss_now();
	m->rss = rs.rss;
	m->anon = rs.anon;
	m->file = rs.file;
	m->cg_usage = m->cg_cache = m->cg_rss = m->cg_peak = NAN;
	if (child_cg) {
		struct memcg_stat cs;
		memcg_read(child_cg, &cs);
		m->cg_usage = cs.usage / 1048576.0;
		m->cg_cache = cs.cache / 1048576.0;
		m->cg_rss = cs.rss / 1048576.0;
	}
	pthread_barrier_destroy(&pr.bar);
	if (is_flex)
		flexdb_stats(s->h, &fs1);
	m->settle_s = NAN;
	if (m->user_bytes > 0)
		m->settle_s = settle(s);
	if (is_flex && m->user_bytes > 0)
		fprintf(stderr,
			"    %-7s flexdb   in loop: data %.0f log %.0f tree %.0f gc %.0f MB; settle: data "
			"%.0f (tidy %.0f gc %.0f) log %.0f tree %.0f MB; user %.0f MB\n",
			ph_name[phase],
			(double)(fs1.space.data_bytes_written - fs0.space.data_bytes_written) / 1e6,
			(double)(fs1.space.log_bytes_written - fs0.space.log_bytes_written) / 1e6,
			(double)(fs1.space.tree_bytes_written - fs0.space.tree_bytes_written) / 1e6,
			(double)(fs1.space.gc_bytes_moved - fs0.space.gc_bytes_moved) / 1e6,
			(double)(kv_flex_settle_data - sd0) / 1e6,
			(double)(kv_flex_tidy_bytes - tidy0) / 1e6, (double)(kv_flex_gc_bytes - gc0) / 1e6,
			(double)(kv_flex_settle_log - sl0) / 1e6, (double)(kv_flex_settle_tree - st0) / 1e6,
			(double)m->user_bytes / 1e6);
	struct pio io1 = proc_io();
	uint64_t mf1 = major_faults();
	m->peak = vm_mib("VmHWM");
	if (child_cg) {
		struct memcg_stat cs;
		memcg_read(child_cg, &cs);
		m->cg_peak = cs.max_usage / 1048576.0;
	}
	double cpu1 = cpu_secs();

	*records = phase == P_LOAD ? (int64_t)B.num : pr.ctr.next;
	m->have = 1;
	h_summary(h, ts, te, &m->lat);
	m->cpu_us = (cpu1 - cpu0) / m->ops * 1e6;
	m->rd_per_op = (double)(io1.rb - io0.rb) / m->ops;
	m->calls_per_op = (double)(io1.syscr - io0.syscr) / m->ops;
	m->faults_per_op = (double)(mf1 - mf0) / m->ops;
	m->written = (double)(io1.wb - io0.wb);
	m->wa = m->wa_net = NAN;
	if (B.proc_io_ok && m->user_bytes > 0) {
		m->wa = m->written / m->user_bytes;
		m->wa_net = (m->written - (double)(io1.cwb - io0.cwb)) / m->user_bytes;
	}
	if (!B.clear_refs_ok)
		m->peak = NAN;
	m->du = (double)du(s->path);
	m->space_amp = m->du / ((double)*records * (B.key_size + B.value_size));
	ack_free(&pr.ctr);
	free(h);
	free(jobs);
}

/* ---- per-engine child processes --------------------------------------------------------- */

struct result {
	struct meas ph[NPH];
	double reopen_s;    /* open after a quiesced close */
	double recover_s;   /* open after SIGKILL */
	double store_bytes; /* du when killed */
	uint64_t recover_bad;
	int ok;
	int oom; /* the memory cgroup's OOM killer ended the child */
};

/* Child: every phase on a fresh store, then a clean reopen. */
static void child_phases(const struct engine *e, const char *path, int rep, int nt, int fd)
{
	struct store s = {.eng = e};
	struct result res;
	int64_t records = 0;

	memset(&res, 0, sizeof(res));
	xsnprintf(s.path, sizeof(s.path), "%s", path);
	e->open(&s);
	for (int p = 0; p < NPH; p++) {
		run_phase(&s, p, rep, nt, &records, &res.ph[p]);
		const struct meas *m = &res.ph[p];
		fprintf(stderr, "    %-7s %-8s %10.0f ops/s  p99 %8.2f us  settle %.2f s%s\n",
			ph_name[p], e->name, m->opsps, m->p99, isnan(m->settle_s) ? 0 : m->settle_s,
			m->errors || m->bad || m->notfound ? "  CHECK FAILED" : "");
	}
	e->quiesce(&s);
	e->close(&s);
	uint64_t t0 = now_ns();
	e->open(&s);
	res.reopen_s = secs_since(t0);
	e->close(&s);
	res.ok = 1;
	if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		die("result pipe");
}

/* Child: updates until killed; one byte to fd after kill_ops of them. */
static void child_writer(const struct engine *e, const char *path, int fd)
{
	struct store s = {.eng = e};
	struct ycsb_rng r;
	char key[96], *val = malloc(B.value_size + 8);

	if (!val)
		die("out of memory");
	xsnprintf(s.path, sizeof(s.path), "%s", path);
	e->open(&s);
	void *tc = e->thread_init(&s);
	ycsb_rng_seed(&r, B.seed ^ 0x6b696c6cULL);
	for (uint64_t i = 0;; i++) {
		int64_t kn = ycsb_uniform(&r, 0, (int64_t)B.num - 1);
		size_t kl = make_key(key, sizeof(key), kn);
		make_value(val, B.value_size, B.valpool, kn, 1ULL << 60 | i);
		if (e->put(&s, tc, key, kl, val, B.value_size))
			die("put failed in the writer");
		if (i + 1 == B.kill_ops && write(fd, "k", 1) != 1)
			die("pipe");
	}
}

/* Child: times the open of the killed store, checks some keys. */
static void child_recover(const struct engine *e, const char *path, int fd)
{
	struct store s = {.eng = e};
	struct result res;
	struct ycsb_rng r;
	char key[96], *buf = malloc(B.value_size + 8);

	memset(&res, 0, sizeof(res));
	xsnprintf(s.path, sizeof(s.path), "%s", path);
	uint64_t t0 = now_ns();
	e->open(&s);
	res.recover_s = secs_since(t0);
	void *tc = e->thread_init(&s);
	ycsb_rng_seed(&r, 7);
	for (int i = 0; i < 1000; i++) {
		int64_t kn = ycsb_uniform(&r, 0, (int64_t)B.num - 1);
		size_t kl = make_key(key, sizeof(key), kn), vl = 0;
		int rc = e->get(&s, tc, key, kl, buf, B.value_size + 8, &vl);
		res.recover_bad += rc != 0 || !value_ok(buf, vl, B.value_size, kn);
	}
	e->thread_done(&s, tc);
	e->close(&s);
	res.ok = 1;
	free(buf);
	if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		die("result pipe");
}

typedef void (*child_fn)(const struct engine *, const char *, int);

/* Forks fn (or child_phases when fn is NULL); with want_kill, waits for one
 * byte, kills the child with SIGKILL and returns 0; otherwise reads a
 * struct result into *res and returns whether the child succeeded. */
static int run_child(const struct engine *e, const char *path, int rep, int nt, child_fn fn,
		     int want_kill, struct result *res)
{
	int pfd[2];
	char cg[PATH_MAX + 128], why[PATH_MAX + 200];

	if (B.cgroup_mb) {
		if (memcg_create(B.cg_parent, e->name, B.cgroup_mb << 20, cg, sizeof(cg), why,
				 sizeof(why)))
			die("--cgroup-mb: %s", why);
		snprintf(B.cg_live, sizeof(B.cg_live), "%s", cg);
	}
	fflush(stdout);
	fflush(stderr);
	if (pipe(pfd))
		die("pipe: %s", strerror(errno));
	pid_t pid = bench_fork();
	if (pid == 0) {
		close(pfd[0]);
		if (B.cgroup_mb) {
			int rc = memcg_enter(cg);
			if (rc)
				die("cannot move into the memory cgroup %s: %s", cg, strerror(-rc));
			child_cg = cg;
		}
		if (fn)
			fn(e, path, pfd[1]);
		else
			child_phases(e, path, rep, nt, pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	int ok = 0;
	if (want_kill) {
		char c;
		ok = read(pfd[0], &c, 1) == 1;
		kill(pid, SIGKILL);
	} else {
		size_t got = 0;
		memset(res, 0, sizeof(*res));
		while (got < sizeof(*res)) {
			ssize_t n = read(pfd[0], (char *)res + got, sizeof(*res) - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		ok = got == sizeof(*res) && res->ok;
	}
	close(pfd[0]);
	int st;
	waitpid(pid, &st, 0);
	if (!want_kill && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		ok = 0;
	if (B.cgroup_mb) {
		struct memcg_stat cs;
		memcg_read(cg, &cs);
		if (!want_kill && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && cs.oom_kills > 0)
			res->oom = 1;
		int rc = memcg_remove(cg);
		if (rc)
			fprintf(stderr, "ycsb_bench: cannot remove the cgroup %s: %s\n", cg,
				strerror(-rc));
		B.cg_live[0] = 0;
	}
	return ok;
}

/* ---- results ------------------------------------------------------------------------------- */

static struct result R[MAX_TC][MAX_REPS][NENG];
/* Children that failed or operations that erred or returned wrong data:
 * the exit status says so (CI runs --quick as a smoke test). */
static int n_failed;

/* Median over repetitions of a double at offset off in struct meas (phase
 * p >= 0) or in struct result (p < 0). */
static double med(int ti, int en, int p, size_t off)
{
	double v[MAX_REPS];
	int n = 0;

	for (int r = 0; r < B.reps; r++) {
		const struct result *res = &R[ti][r][en];
		if (!res->ok)
			continue;
		const char *base = p >= 0 ? (const char *)&res->ph[p] : (const char *)res;
		v[n++] = *(const double *)(base + off);
	}
	return n ? median(v, n) : NAN;
}

#define MEDP(ti, en, p, f) med(ti, en, p, offsetof(struct meas, f))
#define MEDR(ti, en, f) med(ti, en, -1, offsetof(struct result, f))

static void print_line(int ti, int en, int p)
{
	char wa[16], sa[16], pk[16], reps[128] = "";
	uint64_t errs = 0, bad = 0;
	int oom = 0, nok = 0;

	for (int r = 0; r < B.reps; r++) {
		const struct result *res = &R[ti][r][en];
		size_t l = strlen(reps);
		oom += res->oom;
		if (!res->ok)
			continue;
		nok++;
		snprintf(reps + l, sizeof(reps) - l, "%s%.0f", l ? " " : "", res->ph[p].opsps);
		errs += res->ph[p].errors;
		bad += res->ph[p].bad + res->ph[p].notfound;
	}
	if (!nok) {
		printf("%-7s %-8s t%-2d %10s\n", ph_name[p], engines[en].name, B.tcs[ti],
		       oom ? "OOM" : "failed");
		return;
	}
	fmt_num(wa, sizeof(wa), 2, "", MEDP(ti, en, p, wa));
	fmt_num(sa, sizeof(sa), 2, "", MEDP(ti, en, p, space_amp));
	fmt_num(pk, sizeof(pk), 0, "", MEDP(ti, en, p, peak));
	printf("%-7s %-8s t%-2d %10.0f ops/s  p50 %8.2f p99 %8.2f p99.9 %9.2f max %10.1f us  "
	       "cpu %7.2f us/op  wa %-6s space %-5s rss %5.0f peak %5s MiB  reps [%s]%s",
	       ph_name[p], engines[en].name, B.tcs[ti], MEDP(ti, en, p, opsps),
	       MEDP(ti, en, p, p50), MEDP(ti, en, p, p99), MEDP(ti, en, p, p999),
	       MEDP(ti, en, p, maxus), MEDP(ti, en, p, cpu_us), wa, sa, MEDP(ti, en, p, rss), pk,
	       reps, errs || bad ? "  CHECK FAILED" : "");
	if (oom)
		printf("  (OOM-killed in %d of %d reps)", oom, B.reps);
	printf("\n");
	if (errs || bad) {
		printf("        %" PRIu64 " errors, %" PRIu64 " wrong or missing results\n", errs,
		       bad);
		n_failed++;
	}
}

/* Reads per operation and memory of one phase (medians). */
static void print_io_mem(int ti, int en, int p)
{
	char c[8][16];

	fmt_num(c[0], sizeof(c[0]), 2, "", MEDP(ti, en, p, rd_per_op) / 1024.0);
	fmt_num(c[1], sizeof(c[1]), 2, "", MEDP(ti, en, p, calls_per_op));
	fmt_num(c[2], sizeof(c[2]), 2, "", MEDP(ti, en, p, faults_per_op));
	fmt_num(c[3], sizeof(c[3]), 1, "", MEDP(ti, en, p, rss));
	fmt_num(c[4], sizeof(c[4]), 1, "", MEDP(ti, en, p, anon));
	fmt_num(c[5], sizeof(c[5]), 1, "", MEDP(ti, en, p, file));
	printf("%-7s %-8s t%-2d %8s %7s %7s  %8s %8s %8s", ph_name[p], engines[en].name,
	       B.tcs[ti], c[0], c[1], c[2], c[3], c[4], c[5]);
	if (B.cgroup_mb) {
		fmt_num(c[0], sizeof(c[0]), 1, "", MEDP(ti, en, p, cg_usage));
		fmt_num(c[1], sizeof(c[1]), 1, "", MEDP(ti, en, p, cg_cache));
		fmt_num(c[2], sizeof(c[2]), 1, "", MEDP(ti, en, p, cg_rss));
		fmt_num(c[3], sizeof(c[3]), 1, "", MEDP(ti, en, p, cg_peak));
		printf("  %8s %8s %8s %8s", c[0], c[1], c[2], c[3]);
	}
	printf("\n");
}

static void print_reopen(int ti, int en)
{
	double gb = MEDR(ti, en, store_bytes) / 1e9, rec = MEDR(ti, en, recover_s);
	uint64_t bad = 0;

	for (int r = 0; r < B.reps; r++) {
		bad += R[ti][r][en].recover_bad;
		/* An engine the OOM killer ended is a result, not a failure. */
		n_failed += !R[ti][r][en].oom &&
			    (!R[ti][r][en].ok || isnan(R[ti][r][en].recover_s));
	}
	n_failed += bad != 0;
	printf("%-7s %-8s t%-2d clean %8.3f s  after-kill %8.3f s  store %7.3f GB  %7.3f s/GB%s\n",
	       "reopen", engines[en].name, B.tcs[ti], MEDR(ti, en, reopen_s), rec, gb, rec / gb,
	       bad ? "  CHECK FAILED (keys missing after recovery)" : "");
}

/* Whole-run write amplification: bytes written over every phase / user
 * bytes of every phase (medians of the per-rep sums). */
static double total_wa(int ti, int en)
{
	double v[MAX_REPS];
	int n = 0;

	for (int r = 0; r < B.reps; r++) {
		const struct result *res = &R[ti][r][en];
		double w = 0, u = 0;
		if (!res->ok)
			continue;
		for (int p = 0; p < NPH; p++) {
			w += res->ph[p].written;
			u += res->ph[p].user_bytes;
		}
		v[n++] = u > 0 && B.proc_io_ok ? w / u : NAN;
	}
	return n ? median(v, n) : NAN;
}

static int n_pass, n_miss;

static void target(const char *label, double v, const char *op, double want)
{
	int pass = !strcmp(op, ">=") ? v >= want : v <= want;

	if (isnan(v)) {
		printf("  %-48s %8s   target %s %.2f  n/a\n", label, "-", op, want);
		return;
	}
	printf("  %-48s %8.2f   target %s %.2f  %s\n", label, v, op, want, pass ? "PASS" : "MISS");
	if (pass)
		n_pass++;
	else
		n_miss++;
}

static void print_ratios_and_targets(FILE *rcsv)
{
	char label[96];

	printf("\nFlexDB / peer throughput, medians (>1: FlexDB faster)\n");
	printf("%-7s %-4s %10s %10s %10s\n", "phase", "thr", "rocksdb", "leveldb", "lmdb");
	for (int ti = 0; ti < B.ntc; ti++)
		for (int p = 0; p < NPH; p++) {
			double f = MEDP(ti, E_FLEX, p, opsps);
			char c[3][16];
			for (int en = 1; en < NENG; en++)
				fmt_num(c[en - 1], sizeof(c[0]), 2, "x",
					B.eng_on[en] && B.eng_on[E_FLEX]
					    ? f / MEDP(ti, en, p, opsps)
					    : NAN);
			printf("%-7s t%-3d %10s %10s %10s\n", ph_name[p], B.tcs[ti], c[0], c[1],
			       c[2]);
			if (rcsv) {
				fprintf(rcsv, "%s,%d", ph_name[p], B.tcs[ti]);
				for (int en = 1; en < NENG; en++)
					fprintf(rcsv, ",%.4f",
						B.eng_on[en] ? f / MEDP(ti, en, p, opsps) : NAN);
				fprintf(rcsv, "\n");
			}
		}
	if (!B.eng_on[E_FLEX])
		return;
	int at_scale = !strcmp(B.ds->name, "udb") && B.num >= 2000000;
	printf("\nTargets (issue 6; stated for 2M+ UDB pairs%s):\n",
	       at_scale ? "" : "; THIS RUN IS SMALLER, so indicative only");
	for (int ti = 0; ti < B.ntc; ti++) {
		int t = B.tcs[ti];
		for (int p = 0; p < NPH; p++) {
			double f = MEDP(ti, E_FLEX, p, opsps);
			if (B.eng_on[E_ROCKS]) {
				snprintf(label, sizeof(label), "t%d %s flexdb/rocksdb ops/s", t,
					 ph_name[p]);
				target(label, f / MEDP(ti, E_ROCKS, p, opsps),
				       ">=", p == P_C || p == P_E ? 2.0 : 1.5);
			}
			if (B.eng_on[E_LEVEL] && p != P_LOAD) {
				snprintf(label, sizeof(label), "t%d %s flexdb/leveldb ops/s", t,
					 ph_name[p]);
				target(label, f / MEDP(ti, E_LEVEL, p, opsps), ">=", 1.0);
			}
			if (B.eng_on[E_LMDB] && (p == P_LOAD || p == P_A || p == P_F)) {
				snprintf(label, sizeof(label), "t%d %s flexdb/lmdb ops/s", t,
					 ph_name[p]);
				target(label, f / MEDP(ti, E_LMDB, p, opsps), ">=", 1.0);
			}
		}
		if (B.eng_on[E_ROCKS]) {
			snprintf(label, sizeof(label), "t%d write amp, load: flexdb/rocksdb", t);
			target(label, MEDP(ti, E_FLEX, P_LOAD, wa) / MEDP(ti, E_ROCKS, P_LOAD, wa),
			       "<=", 0.5);
			snprintf(label, sizeof(label), "t%d write amp, all phases: flexdb/rocksdb",
				 t);
			target(label, total_wa(ti, E_FLEX) / total_wa(ti, E_ROCKS), "<=", 0.5);
		}
		snprintf(label, sizeof(label), "t%d flexdb reopen after SIGKILL, s per GB", t);
		target(label, MEDR(ti, E_FLEX, recover_s) / (MEDR(ti, E_FLEX, store_bytes) / 1e9),
		       "<=", 1.0);
	}
	printf("targets: %d PASS, %d MISS\n", n_pass, n_miss);
}

static void csv_rows(FILE *f, int ti, int en, int p, const char *rep, const struct meas *m)
{
	fprintf(f,
		"%s,%s,%s,%u,%u,%" PRIu64
		",%d,%s,%.0f,%.4f,%.1f,%.4f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,"
		"%.4f,%.4f,%.0f,%.1f,%.1f,%.3f,%" PRIu64 ",%" PRIu64
		",%.1f,%.4f,%.4f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
		ph_name[p], engines[en].name, B.ds->name, B.key_size, B.value_size, B.num,
		B.tcs[ti], rep, m->ops, m->secs, m->opsps, m->usop, m->p50, m->p99, m->p999,
		m->maxus, m->cpu_us, m->wa, m->wa_net, m->space_amp, m->du, m->rss, m->peak,
		m->settle_s, m->errors, m->bad + m->notfound, m->rd_per_op, m->calls_per_op,
		m->faults_per_op, m->anon, m->file, m->cg_usage, m->cg_cache, m->cg_rss,
		m->cg_peak);
}

static void write_csv(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "ycsb_bench: %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f, "phase,engine,dataset,key_size,value_size,num,threads,rep,ops,seconds,ops_per_s,"
		   "us_per_op,p50_us,p99_us,p999_us,max_us,cpu_us_per_op,wa,wa_net,space_amp,"
		   "du_bytes,rss_mib,peak_mib,settle_s,errors,bad,read_bytes_per_op,"
		   "read_calls_per_op,major_faults_per_op,anon_mib,file_mib,cg_usage_mib,"
		   "cg_cache_mib,cg_rss_mib,cg_peak_mib\n");
	for (int ti = 0; ti < B.ntc; ti++)
		for (int en = 0; en < NENG; en++) {
			if (!B.eng_on[en])
				continue;
			for (int p = 0; p < NPH; p++) {
				struct meas m;
				char rs[16];
				for (int r = 0; r < B.reps; r++) {
					if (!R[ti][r][en].ok)
						continue;
					snprintf(rs, sizeof(rs), "%d", r + 1);
					csv_rows(f, ti, en, p, rs, &R[ti][r][en].ph[p]);
				}
				memset(&m, 0, sizeof(m));
#define S(x) m.x = MEDP(ti, en, p, x)
				S(ops);
				S(secs);
				S(opsps);
				S(usop);
				S(p50);
				S(p99);
				S(p999);
				S(maxus);
				S(cpu_us);
				S(wa);
				S(wa_net);
				S(space_amp);
				S(du);
				S(rss);
				S(peak);
				S(settle_s);
				S(rd_per_op);
				S(calls_per_op);
				S(faults_per_op);
				S(anon);
				S(file);
				S(cg_usage);
				S(cg_cache);
				S(cg_rss);
				S(cg_peak);
#undef S
				csv_rows(f, ti, en, p, "median", &m);
			}
			fprintf(f,
				"reopen,%s,%s,%u,%u,%" PRIu64 ",%d,median,,,,,,,,,,,,,%.0f,,,,,,,,,,,,,,\n",
				engines[en].name, B.ds->name, B.key_size, B.value_size, B.num,
				B.tcs[ti], MEDR(ti, en, store_bytes));
			fprintf(f, "reopen_clean_s,%s,,,,,%d,median,,%.4f,,,,,,,,,,,,,,,,,,,,,,,,,\n",
				engines[en].name, B.tcs[ti], MEDR(ti, en, reopen_s));
			fprintf(f, "reopen_after_kill_s,%s,,,,,%d,median,,%.4f,,,,,,,,,,,,,,,,,,,,,,,,,\n",
				engines[en].name, B.tcs[ti], MEDR(ti, en, recover_s));
		}
	fclose(f);
}

/* ---- the run -----------------------------------------------------------------------------------
 */

/* RocksDB's version from the OPTIONS file a throwaway store writes (the
 * C API has no version call; the probe runs in a child so that the parent
 * never starts RocksDB's background threads before forking). */
static void rocks_version(void)
{
	char dir[PATH_MAX + 32];

	xsnprintf(dir, sizeof(dir), "%s/rocksdb-probe", B.work);
	pid_t pid = bench_fork();
	if (pid == 0) {
		struct store s = {.eng = &engines[E_ROCKS]};
		xsnprintf(s.path, sizeof(s.path), "%s", dir);
		s.eng->open(&s);
		s.eng->close(&s);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	rk_version(dir, B.rocks_version, sizeof(B.rocks_version));
	rmtree(dir);
}

static void print_header(void)
{
	char cpu[256], date[64], thr[64] = "";
	char lv[16], lm[16];
	static const char *const dn[] = {"uniform", "zipfian", "latest"};

	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	kv_versions(lv, sizeof(lv), lm, sizeof(lm));
	for (int i = 0; i < B.ntc; i++)
		snprintf(thr + strlen(thr), sizeof(thr) - strlen(thr), "%s%d", i ? "," : "",
			 B.tcs[i]);
	printf(
	    "ycsb_bench: YCSB core workloads, FlexDB vs RocksDB, LevelDB, LMDB (FlexSpace paper, "
	    "section 6.3)\n");
	print_build_mode();
	printf("library:  flex %s; RocksDB %s, LevelDB %s, LMDB %s (system libraries, C APIs)\n",
	       flex_version(NULL, NULL, NULL), B.rocks_version, lv, lm);
	printf("cpu:      %s, %ld online\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("date:     %s\n", date);
	printf("dataset:  %s: %" PRIu64 " pairs of %u-byte keys + %u-byte values (%.0f MB of user "
	       "data)\n",
	       B.ds->name, B.num, B.key_size, B.value_size,
	       (double)B.num * (B.key_size + B.value_size) / 1e6);
	printf("config:   load %" PRIu64 ", A-D,F %" PRIu64 " ops, E %" PRIu64
	       " scans; threads %s; %d rep%s (median); seed %" PRIu64 "; distribution %s%s\n",
	       B.num, B.ops, B.scan_ops, thr, B.reps, B.reps == 1 ? "" : "s", B.seed,
	       B.dist_override < 0 ? "per workload (zipfian; D latest)" : dn[B.dist_override],
	       B.quick ? "; --quick" : "");
	printf("keys:     YCSB buildKeyName, insertorder=hashed: \"user\" + zeropadding %d + "
	       "fnvhash64(keynum) in decimal (e.g. keynum 0 -> user6284781860667377211 unpadded)\n",
	       B.zeropadding);
	printf("memory:   flexdb cache %" PRIu64 " MiB + 2 x %" PRIu64 " MiB memtables; rocksdb "
	       "block cache %" PRIu64 " MiB + 2 x %" PRIu64
	       " MiB write buffers; leveldb cache %" PRIu64 " MiB + write buffer %" PRIu64
	       " MiB (+ 1 immutable); lmdb: OS page cache only\n",
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20,
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20,
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20);
	printf("engines:  no compression; 10-bit bloom filters on rocksdb and leveldb; rocksdb "
	       "other options default; flexdb defaults%s\n",
	       engine_opts.flex_no_mmap ? " but space.no_mmap (pread, no read mapping)" : "");
	printf("writes:   no sync per write anywhere, each write handed to the OS before it "
	       "returns: flexdb sync_writes=0, rocksdb/leveldb sync=false, lmdb one txn per put "
	       "with MDB_NOSYNC|MDB_NOMETASYNC (writers serialised by its lock)\n");
	printf("settle:   after each phase that wrote: rocksdb flush + wait for compactions; "
	       "leveldb wait until L0 < 4 files; flexdb commit + wait for tidying "
	       "(flexdb_compact); then close + reopen (not timed in ops/s)\n");
	printf("process:  each engine's phases in its own forked child, engines in rotating "
	       "order; reopen after-kill: a child writing %" PRIu64 "+ updates is SIGKILLed, the "
	       "open is timed in a new child\n",
	       B.kill_ops);
	printf("metrics:  cpu = child user+sys over loop+settle / op; wa = /proc/self/io "
	       "write_bytes over loop+settle / user key+value bytes%s; space = du / live "
	       "key+value bytes; rss at loop end, peak = VmHWM over the phase%s\n",
	       B.proc_io_ok ? "" : " (UNAVAILABLE here)",
	       B.clear_refs_ok ? "" : " (UNAVAILABLE: clear_refs)");
	if (B.cgroup_mb)
		printf("cgroup:   each engine's children in a v1 memory cgroup of %" PRIu64
		       " MiB (limit on memory and memory+swap) under %s: heap, caches, memtables "
		       "and the page cache of its store share the limit\n",
		       B.cgroup_mb, B.cg_parent);
	else
		printf("cgroup:   none (--cgroup-mb N): the page cache is not limited\n");
	printf("dir:      %s; results: %s\n\n", B.work, B.out);
	fflush(stdout);
}

static void usage(void)
{
	printf(
	    "usage: ycsb_bench [options]\n"
	    "  --dataset D        zippydb (48+43 B), udb (27+127 B, default), sys (28+396 B)\n"
	    "  --num N            pairs loaded (default 2000000; --quick 50000)\n"
	    "  --ops N            operations of workloads A-D and F (default num/4; --quick num)\n"
	    "  --scan-ops N       operations of workload E (default ops/5)\n"
	    "  --threads LIST     client thread counts, e.g. 1,2 (default 1)\n"
	    "  --reps N           repetitions, medians reported (default 3; --quick 1)\n"
	    "  --engines LIST     subset of flexdb,rocksdb,leveldb,lmdb (default all)\n"
	    "  --distribution D   uniform, zipfian or latest for every workload (default: each\n"
	    "                     workload's own: zipfian, D latest)\n"
	    "  --value-size N     override the dataset's value size\n"
	    "  --key-size N       override the dataset's key size (23 .. 68)\n"
	    "  --cache-mb N       cache of every engine (default 64)\n"
	    "  --memtable-mb N    memtable / write buffer, two of them (default 32)\n"
	    "  --kill-ops N       updates before the SIGKILL (default num/4)\n"
	    "  --seed N           random seed (default 42)\n"
	    "  --dir DIR          where to make the stores (default /tmp)\n"
	    "  --out DIR          results: ycsb.csv, ycsb_ratios.csv, ycsb_ratios.png\n"
	    "                     (default results/ under the current directory)\n"
	    "  --plot-script F    gnuplot driver (default bench/plot_ycsb.sh); --no-plot\n"
	    "  --cgroup-mb N      run each engine's processes in a v1 memory cgroup of N MiB,\n"
	    "                     which counts their page cache too (needs root)\n"
	    "  --cgroup-optional  with --cgroup-mb: when cgroups are unavailable, say why\n"
	    "                     and exit 0 without running\n"
	    "  --bloom-bits N     RocksDB and LevelDB bloom bits per key, 0 = none (default 10)\n"
	    "  --rocksdb-compact  compact RocksDB and LevelDB fully when settling\n"
	    "  --flexdb-no-mmap   FlexDB reads with pread, not through a mapping (space.no_mmap)\n"
	    "  --quick            every engine, load + A-F, 50k pairs, one rep\n"
	    "  --print-vectors    print the generator test vectors and exit\n");
}

static void parse_args(int argc, char **argv)
{
	uint64_t num = 0, ops = 0, scan_ops = 0, kill_ops = 0;
	int reps = 0, key_size = 0, value_size = -1, eng_given = 0;

	B.ds = &datasets[1];
	B.seed = 42;
	engine_opts_default();
	B.dist_override = -1;
	B.plot = 1;
	B.plot_script = "bench/plot_ycsb.sh";
	B.tcs[0] = 1;
	B.ntc = 1;
	snprintf(B.base, sizeof(B.base), "/tmp");
	snprintf(B.out, sizeof(B.out), "results");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--print-vectors")) {
			ycsb_write_vectors(stdout, 42);
			exit(0);
		} else if (!strcmp(a, "--quick")) {
			B.quick = 1;
		} else if (!strcmp(a, "--no-plot")) {
			B.plot = 0;
		} else if (!strcmp(a, "--dataset")) {
			const char *v = opt_value(argc, argv, &i);
			size_t d;
			for (d = 0; d < sizeof(datasets) / sizeof(datasets[0]); d++)
				if (!strcmp(v, datasets[d].name))
					break;
			if (d == sizeof(datasets) / sizeof(datasets[0]))
				die("--dataset: zippydb, udb or sys");
			B.ds = &datasets[d];
		} else if (!strcmp(a, "--num")) {
			num = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--ops")) {
			ops = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--scan-ops")) {
			scan_ops = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--kill-ops")) {
			kill_ops = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--threads")) {
			const char *v = opt_value(argc, argv, &i);
			char *list = strdup(v), *save = NULL;
			B.ntc = 0;
			for (char *t = strtok_r(list, ",", &save); t;
			     t = strtok_r(NULL, ",", &save)) {
				if (B.ntc == MAX_TC)
					die("--threads: at most %d counts", MAX_TC);
				B.tcs[B.ntc] = (int)parse_u64(a, t);
				if (B.tcs[B.ntc] < 1 || B.tcs[B.ntc] > MAX_THREADS)
					die("--threads: 1 .. %d", MAX_THREADS);
				B.ntc++;
			}
			free(list);
			if (!B.ntc)
				die("--threads: empty list");
		} else if (!strcmp(a, "--reps")) {
			reps = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--engines") || !strcmp(a, "--engine")) {
			const char *names[NENG];
			for (int en = 0; en < NENG; en++)
				names[en] = engines[en].name;
			mark_names(opt_value(argc, argv, &i), names, NENG, B.eng_on, "engine");
			eng_given = 1;
		} else if (!strcmp(a, "--distribution")) {
			const char *v = opt_value(argc, argv, &i);
			B.dist_override = !strcmp(v, "uniform")	  ? YCSB_UNIFORM
					  : !strcmp(v, "zipfian") ? YCSB_ZIPFIAN
					  : !strcmp(v, "latest")  ? YCSB_LATEST
								  : -2;
			if (B.dist_override == -2)
				die("--distribution: uniform, zipfian or latest");
		} else if (!strcmp(a, "--value-size")) {
			value_size = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--key-size")) {
			key_size = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--seed")) {
			B.seed = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--dir")) {
			snprintf(B.base, sizeof(B.base), "%s", opt_value(argc, argv, &i));
		} else if (!strcmp(a, "--out")) {
			snprintf(B.out, sizeof(B.out), "%s", opt_value(argc, argv, &i));
		} else if (!strcmp(a, "--plot-script")) {
			B.plot_script = opt_value(argc, argv, &i);
		} else if (!strcmp(a, "--cgroup-mb")) {
			B.cgroup_mb = opt_u64(argc, argv, &i);
			if (B.cgroup_mb < 8 || B.cgroup_mb > ((uint64_t)1 << 40))
				die("--cgroup-mb must be >= 8");
		} else if (!strcmp(a, "--cgroup-optional")) {
			B.cgroup_optional = 1;
		} else if (!engine_opts_arg(argc, argv, &i)) {
			other_option(usage, a);
		}
	}
	if (!eng_given)
		for (int en = 0; en < NENG; en++)
			B.eng_on[en] = 1;
	B.key_size = key_size ? (uint32_t)key_size : B.ds->key_size;
	B.value_size = value_size >= 0 ? (uint32_t)value_size : B.ds->value_size;
	/* Padding to the key size makes every key exactly key_size bytes:
	 * fnvhash64 has at most 19 digits. */
	if (B.key_size < 4 + 19 || B.key_size > 4 + 64)
		die("--key-size must be 23 .. 68 (\"user\" + 19 hash digits at least)");
	B.zeropadding = (int)B.key_size - 4;
	B.num = num ? num : B.quick ? 50000 : 2000000;
	B.ops = ops ? ops : B.quick ? B.num : B.num / 4;
	B.scan_ops = scan_ops ? scan_ops : B.ops / 5;
	B.kill_ops = kill_ops ? kill_ops : B.num / 4;
	B.reps = reps ? reps : B.quick ? 1 : 3;
	if (B.num < 100 || B.num > INT32_MAX / 2)
		die("--num must be 100 .. 2^30");
	if (B.ops < 1 || B.scan_ops < 1 || B.ops > INT32_MAX / 2 || B.kill_ops < 1)
		die("--ops, --scan-ops, --kill-ops must be >= 1");
	if (B.reps < 1 || B.reps > MAX_REPS)
		die("--reps must be 1 .. %d", MAX_REPS);
	if (B.value_size > FLEXDB_MAX_VALUE || B.value_size + 8 > VALPOOL / 2)
		die("--value-size too large");
}

static void plot(const char *ratios)
{
	char png[PATH_MAX + 32], cmd[3 * PATH_MAX + 64];

	if (!B.plot)
		return;
	if (access(B.plot_script, R_OK) || system("command -v gnuplot >/dev/null 2>&1")) {
		printf("plot:     skipped (%s)\n", access(B.plot_script, R_OK)
						       ? "plot script not found"
						       : "gnuplot not installed: apt-get install "
							 "gnuplot-nox");
		return;
	}
	xsnprintf(png, sizeof(png), "%s/ycsb_ratios.png", B.out);
	xsnprintf(cmd, sizeof(cmd), "sh '%s' '%s' '%s'", B.plot_script, ratios, png);
	if (system(cmd) == 0)
		printf("plot:     %s\n", png);
	else
		printf("plot:     FAILED (%s)\n", cmd);
}

/* Removes the group of a child that was running when the parent exits
 * early (die). */
static void cg_cleanup(void)
{
	if (getpid() == B.parent_pid && B.cg_live[0]) {
		memcg_remove(B.cg_live);
		B.cg_live[0] = 0;
	}
}

int main(int argc, char **argv)
{
	bench_msg_pid = 1; /* the engines run in forked children */
	parse_args(argc, argv);
	B.parent_pid = getpid();
	if (B.cgroup_mb) {
		char why[PATH_MAX + 200];
		if (memcg_probe(B.cg_parent, sizeof(B.cg_parent), why, sizeof(why))) {
			if (B.cgroup_optional) {
				printf("ycsb_bench: --cgroup-mb run skipped: %s\n", why);
				return 0;
			}
			die("--cgroup-mb: %s", why);
		}
		atexit(cg_cleanup);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	B.valpool = valpool_new(B.seed ^ 0xabcdef); /* ycsb_rng is splitmix64 too */
	if (mkdir(B.base, 0755) && errno != EEXIST)
		die("mkdir %s: %s", B.base, strerror(errno));
	xsnprintf(B.work, sizeof(B.work), "%s/ycsb_bench.%d", B.base, (int)getpid());
	if (mkdir(B.work, 0755))
		die("mkdir %s: %s", B.work, strerror(errno));
	if (mkdir(B.out, 0755) && errno != EEXIST)
		die("mkdir %s: %s", B.out, strerror(errno));
	B.proc_io_ok = probe_proc_io(B.work, B.valpool);
	B.clear_refs_ok = reset_hwm();
	if (B.eng_on[E_ROCKS])
		rocks_version();
	print_header();

	uint64_t t_start = now_ns();
	for (int ti = 0; ti < B.ntc; ti++) {
		for (int rep = 0; rep < B.reps; rep++) {
			int order[NENG], no = 0;
			for (int i = 0; i < NENG; i++) {
				int en = (i + rep + ti) % NENG;
				if (B.eng_on[en])
					order[no++] = en;
			}
			fprintf(stderr, "threads %d, rep %d of %d:", B.tcs[ti], rep + 1, B.reps);
			for (int i = 0; i < no; i++)
				fprintf(stderr, " %s", engines[order[i]].name);
			fprintf(stderr, "  [%.0f s]\n", secs_since(t_start));
			for (int i = 0; i < no; i++) {
				int en = order[i];
				const struct engine *e = &engines[en];
				struct result *res = &R[ti][rep][en], rr;
				char path[PATH_MAX + 64];

				xsnprintf(path, sizeof(path), "%s/%s", B.work, e->name);
				rmtree(path);
				if (!run_child(e, path, rep, B.tcs[ti], NULL, 0, res)) {
					fprintf(stderr, "  %s: child %s\n", e->name,
						res->oom ? "OOM-killed (memory cgroup)" : "failed");
					res->ok = 0;
					rmtree(path);
					continue;
				}
				if (!run_child(e, path, rep, 1, child_writer, 1, NULL))
					fprintf(stderr, "  %s: writer failed\n", e->name);
				res->store_bytes = (double)du(path);
				if (run_child(e, path, rep, 1, child_recover, 0, &rr)) {
					res->recover_s = rr.recover_s;
					res->recover_bad = rr.recover_bad;
				} else {
					res->recover_s = NAN;
					fprintf(stderr, "  %s: recovery failed\n", e->name);
				}
				fprintf(stderr, "    %-7s %-8s clean %.3f s, after kill %.3f s\n",
					"reopen", e->name, res->reopen_s, res->recover_s);
				rmtree(path);
			}
		}
	}
	double total = secs_since(t_start);

	for (int ti = 0; ti < B.ntc; ti++) {
		printf("%-7s %-8s %-3s %10s       %-44s  %-13s  %-6s  %-5s  %s\n", "phase",
		       "engine", "thr", "ops/s", "latency (us)", "cpu", "wa", "space",
		       "memory (MiB)");
		for (int p = 0; p < NPH; p++)
			for (int en = 0; en < NENG; en++)
				if (B.eng_on[en])
					print_line(ti, en, p);
		for (int en = 0; en < NENG; en++)
			if (B.eng_on[en])
				print_reopen(ti, en);
		for (int en = 0; en < NENG; en++)
			if (B.eng_on[en])
				printf("%-7s %-8s t%-2d %.2f (all phases: bytes written / user "
				       "bytes)\n",
				       "wa-all", engines[en].name, B.tcs[ti], total_wa(ti, en));
		printf("\nreads per op (loop + settle: rdKB = block-layer read_bytes, calls = "
		       "read system calls, faults = major faults) and memory at the end of the "
		       "loop (MiB)%s\n",
		       B.cgroup_mb ? "; cg = the engine's memory cgroup: usage, page cache, "
				     "anonymous, peak over the phase"
				   : "");
		printf("%-7s %-8s %-3s %8s %7s %7s  %8s %8s %8s", "phase", "engine", "thr",
		       "rdKB/op", "calls", "faults", "VmRSS", "RssAnon", "RssFile");
		if (B.cgroup_mb)
			printf("  %8s %8s %8s %8s", "cg usage", "cg cache", "cg rss", "cg peak");
		printf("\n");
		for (int p = 0; p < NPH; p++)
			for (int en = 0; en < NENG; en++)
				if (B.eng_on[en])
					print_io_mem(ti, en, p);
		printf("\n");
	}
	char csv[PATH_MAX + 32], rcsv_path[PATH_MAX + 32];
	xsnprintf(csv, sizeof(csv), "%s/ycsb.csv", B.out);
	xsnprintf(rcsv_path, sizeof(rcsv_path), "%s/ycsb_ratios.csv", B.out);
	FILE *rcsv = fopen(rcsv_path, "w");
	if (rcsv)
		fprintf(rcsv, "phase,threads,vs_rocksdb,vs_leveldb,vs_lmdb\n");
	print_ratios_and_targets(rcsv);
	if (rcsv)
		fclose(rcsv);
	write_csv(csv);
	printf("\ncsv:      %s, %s\n", csv, rcsv_path);
	if (B.eng_on[E_FLEX])
		plot(rcsv_path);
	printf("total:    %.1f s%s\n", total, n_failed ? "  (SOME RUNS FAILED: see above)" : "");
	rmtree(B.work);
	free(B.valpool);
	return n_failed ? 1 : 0;
}
