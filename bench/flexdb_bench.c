/*
 * flexdb_bench.c - FlexDB against RocksDB, LevelDB and LMDB with the same
 * memory: db_bench's workloads (the FlexDB paper's section 6.3
 * comparison, scaled to this machine), each engine in its own process.
 *
 * Workloads, in the order they run (db_bench names; the default is
 * fillrandom, readrandom, readzipf, seekrandom; --benchmarks all runs
 * every one):
 *
 *   fillrandom    a fresh store; every key 0..N-1 put exactly once in a
 *                 shuffled order (db_bench's "filluniquerandom": unlike
 *                 db_bench's fillrandom, no key repeats, so that every
 *                 later read finds its key)
 *   fillseq       a second fresh store; keys put in ascending order (with
 *                 T threads, T contiguous ranges, as in the paper); the
 *                 store is removed after it is measured
 *   overwrite     N puts of uniformly random keys (with replacement) over
 *                 the fillrandom store, new values
 *   readrandom    gets of uniformly random keys (all present)
 *   readzipf      gets of zipfian keys (constant 0.99): YCSB's scrambled
 *                 zipfian (bench/ycsb_gen.h), so the popular keys are
 *                 spread over the key space rather than next to each other
 *   readseq       an iterator over the whole store, one op per pair
 *   seekrandom    seek to a uniformly random key, then 50 nexts (51 pairs
 *                 read per op)
 *   deleterandom  N deletes of uniformly random keys (with replacement)
 *
 * Keys are 16 bytes (the key number in zero-padded decimal, so key order
 * is numeric order); values are value_size bytes: the key number in the
 * first 8 bytes, the rest incompressible random bytes.  Reads check every
 * value's length and key number; seeks check that they land on their key
 * and read 51 pairs (fewer only at the end of the key space).
 *
 * Fairness, one knob at a time (bench/kv_engines.h has every setting):
 *   - memory: cache + memtables the same on every engine that has them:
 *     FlexDB cache_size + 2 x memtable_size; RocksDB LRU block cache +
 *     write_buffer_size x max_write_buffer_number 2; LevelDB LRU cache +
 *     write_buffer_size (one active plus one immutable memtable: the same
 *     2 x peak); LMDB has neither and reads and writes through the OS page
 *     cache (its map, 64 GiB of address space, must hold the data).  Not
 *     in any budget: FlexDB's sparse index, RocksDB's and LevelDB's index
 *     and filter blocks.  With --cgroup-mb every engine's process also
 *     runs in a memory cgroup of that size, which counts the page cache of
 *     its store too (bench/memcg.h): the same total memory for all.
 *   - compression off everywhere; RocksDB and LevelDB get a 10-bit bloom
 *     filter (their tuning advice; --bloom-bits 0 turns them off).
 *   - durability: no sync per write anywhere; every write is handed to the
 *     OS before the call returns (FlexDB sync_writes=0, RocksDB and
 *     LevelDB default WriteOptions, LMDB MDB_NOSYNC|MDB_NOMETASYNC with a
 *     write transaction per put).
 *   - the same keys, values, operation streams (seeded per repetition,
 *     workload and thread, not per engine) and thread counts.
 *   - isolation: each engine's workloads run in a forked child of a parent
 *     that never opens a store, one engine after the other, the order
 *     rotating between repetitions; medians over repetitions.
 *   - cold user caches: every workload starts on a freshly opened store.
 *     After a write workload the store is settled (kv_settle: RocksDB
 *     flushes and waits for its compactions, LevelDB waits until level 0
 *     is below its compaction trigger, FlexDB commits its memtables and
 *     waits for its committer's tidying (flexdb_compact); all are closed
 *     and reopened); before a read workload that follows another read
 *     workload it is closed and reopened.  The OS page cache stays warm,
 *     except as far as a cgroup's limit evicts it.  With --rocksdb-compact
 *     RocksDB and LevelDB also compact their whole key space when
 *     settling, and FlexDB tidies every interval.  Settle time is reported; a fill's throughput
 *     is also shown with it included (work the timed loop left behind).
 *
 * Measurement: every operation is timed with clock_gettime(MONOTONIC)
 * into a log-linear histogram (32 sub-buckets per power of two, ~3%
 * resolution; percentiles are bucket midpoints).  ops/s is operations over
 * the wall time from the first thread's start to the last thread's end;
 * us/op is the mean per-op latency.
 *
 * Reads per operation, from /proc/self/io and getrusage of the engine's
 * process (every thread, background ones included) over the timed loop
 * (and the settle, for write workloads): read_bytes (bytes the block layer
 * read for it: page-cache misses and readahead, mapped-file faults too),
 * syscr (read system calls, page-cache hits included; FlexDB's batched
 * reads go through io_uring, which this does not count) and major faults
 * (pages of mapped files read from disk: LMDB's reads).  For FlexDB also
 * its own counters (flexdb_stats): interval-cache hits, thin-entry hits
 * and interval loads per get.
 *
 * Write amplification: write_bytes of /proc/self/io from the start of a
 * write workload to the end of its settle, over the user bytes written;
 * "net" subtracts cancelled_write_bytes (dirty pages of files deleted or
 * truncated before writeback, e.g. WALs removed after their flush).  Only
 * this engine runs in its process.  Space amplification: allocated bytes
 * of the store directory (du) over live key+value bytes, after the settle.
 *
 * Memory: VmRSS, RssAnon and RssFile of the engine's process (LMDB's
 * mapped data file is RssFile) after the fillrandom loop ("load"), after
 * its settle and reopen ("reopen") and at the end of the last read
 * workload ("reads"), VmHWM at the end; per pair, (VmRSS - the configured
 * cache and memtables) / pairs, and the same of RssAnon (a mapped data
 * file's resident pages are page cache, which the kernel reclaims).
 * With --cgroup-mb, the group's usage and its page cache and anonymous
 * shares (memory.stat) at the same points, its peak
 * (memory.max_usage_in_bytes) per workload and over the run, and whether
 * the OOM killer killed the engine (its results then stop at the
 * workload it was killed in, printed as OOM; the other engines go on).
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
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flexdb.h"
#include "ycsb_gen.h"

#include "bench_util.h"
#include "kv_engines.h"
#include "memcg.h"

/* ---- configuration ---------------------------------------------------------- */

#define KEY_SIZE 16
/* Nexts after each seek in seekrandom (db_bench --seek_nexts=50, the
 * paper's scan length). */
#define SEEK_NEXTS 50
#define MAX_REPS 9
#define MAX_THREADS KV_MAX_THREADS
#define MAX_TC 4 /* thread counts in one run */

enum wl {
	W_FILLRANDOM,
	W_FILLSEQ,
	W_OVERWRITE,
	W_READRANDOM,
	W_READZIPF,
	W_READSEQ,
	W_SEEKRANDOM,
	W_DELETERANDOM,
	NWL
};

static const char *const wl_name[NWL] = {"fillrandom", "fillseq",    "overwrite",
					 "readrandom", "readzipf",   "readseq",
					 "seekrandom", "deleterandom"};

static int wl_writes(int w)
{
	return w == W_FILLRANDOM || w == W_FILLSEQ || w == W_OVERWRITE || w == W_DELETERANDOM;
}

static struct {
	uint64_t num, reads, seeks;
	uint32_t value_size;
	int tcs[MAX_TC], ntc;
	int reps, quick;
	uint64_t seed;
	int eng_on[NENG];
	int wl_on[NWL];
	char base[PATH_MAX]; /* --dir */
	char work[PATH_MAX]; /* our directory inside it */
	const char *csv_path;
	char *valpool;
	uint32_t *perm;
	int proc_io_ok;
	double clock_ns;
	char rocks_version[32], level_version[16], lmdb_version[16];
	uint64_t timeout_s;	  /* per engine child, 0: none */
	uint64_t cgroup_mb;	  /* 0: no cgroups */
	int cgroup_optional;	  /* skip the run when cgroups are unavailable */
	char cg_parent[PATH_MAX]; /* where the groups go */
	char cg_live[PATH_MAX + 128]; /* the group of the running child, for cleanup */
	pid_t parent_pid;
} B;

/* ---- small helpers ------------------------------------------------------------ */

/* Uniform in [0, n) by multiply-shift (no modulo). */
static uint64_t below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix64(s) * n) >> 64);
}

/* The seed of one thread's operation stream: the same for every engine. */
static uint64_t stream_seed(int rep, int w, int t)
{
	uint64_t s = B.seed ^ ((uint64_t)rep << 40) ^ ((uint64_t)w << 32) ^ (uint64_t)t;

	splitmix64(&s);
	return s;
}

static void make_key(char *k, uint64_t i)
{
	for (int p = KEY_SIZE - 1; p >= 0; p--) {
		k[p] = (char)('0' + i % 10);
		i /= 10;
	}
}

/* Cache + memtables configured for engine en (LMDB has neither). */
static double budget_bytes(int en)
{
	if (en == E_LMDB)
		return 0;
	return (double)engine_opts.cache_bytes + 2.0 * (double)engine_opts.memtable_bytes;
}

/* ---- one workload on one store ---------------------------------------------------- */

struct job {
	struct store *s;
	int w, rep, t;
	uint64_t begin, count; /* op range of this thread */
	pthread_barrier_t *bar;
	struct hist h;
	uint64_t t_start, t_end;
	uint64_t bytes, found, bad, errors, sink;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	struct store *s = j->s;
	const struct engine *e = s->eng;
	char key[KEY_SIZE];
	size_t cap = B.value_size + 8;
	char *val = xmalloc(cap);
	uint64_t rng = stream_seed(j->rep, j->w, j->t);
	struct ycsb_rng zr = {0};
	struct ycsb_scrambled zipf;

	memset(&zipf, 0, sizeof(zipf));
	void *it = NULL;

	void *tc = e->thread_init(s);
	if (j->w == W_READZIPF) {
		ycsb_rng_seed(&zr, rng);
		ycsb_scrambled_init(&zipf, &zr, 0, (int64_t)B.num - 1);
	}
	if (j->w == W_READSEQ || j->w == W_SEEKRANDOM) {
		it = e->it_open(s, tc);
		if (!it)
			j->errors++;
	}
	pthread_barrier_wait(j->bar);
	j->t_start = now_ns();
	switch (j->w) {
	case W_FILLRANDOM:
	case W_FILLSEQ:
	case W_OVERWRITE:
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			uint64_t idx = j->w == W_FILLSEQ      ? j->begin + i
				       : j->w == W_FILLRANDOM ? B.perm[j->begin + i]
							      : below(&rng, B.num);
			make_key(key, idx);
			make_value(val, B.value_size, B.valpool, idx, j->w == W_OVERWRITE);
			uint64_t t0 = now_ns();
			int rc = e->put(s, tc, key, KEY_SIZE, val, B.value_size);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->bytes += KEY_SIZE + B.value_size;
		}
		break;
	case W_DELETERANDOM:
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			make_key(key, below(&rng, B.num));
			uint64_t t0 = now_ns();
			int rc = e->del(s, tc, key, KEY_SIZE);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->bytes += KEY_SIZE;
		}
		break;
	case W_READRANDOM:
	case W_READZIPF:
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			uint64_t idx = j->w == W_READZIPF ? (uint64_t)ycsb_scrambled_next(&zipf, &zr)
							  : below(&rng, B.num);
			size_t vl = 0;
			make_key(key, idx);
			uint64_t t0 = now_ns();
			int rc = e->get(s, tc, key, KEY_SIZE, val, cap, &vl);
			h_add(&j->h, now_ns() - t0);
			if (rc < 0) {
				j->errors++;
			} else if (rc == 0) {
				j->found++;
				j->bytes += KEY_SIZE + vl;
				if (!value_ok(val, vl, B.value_size, idx))
					j->bad++;
			} else {
				j->bad++; /* every key is present */
			}
		}
		break;
	case W_READSEQ:
		/* Op 0 is the seek to the thread's first key, op i > 0 the
		 * i-th next; each op reads the pair it lands on. */
		for (uint64_t i = 0; it && i < j->count && !interrupted; i++) {
			int rc;
			uint64_t t0 = now_ns();
			if (i == 0) {
				make_key(key, j->begin);
				rc = e->it_seek(it, key, j->begin ? KEY_SIZE : 0);
			} else {
				rc = e->it_next(it);
			}
			h_add(&j->h, now_ns() - t0);
			if (rc) {
				j->errors++;
				break;
			}
			if (!e->it_valid(it)) {
				j->bad += j->count - i;
				break;
			}
			size_t kl, vl;
			const char *k = e->it_key(it, &kl);
			const char *v = e->it_value(it, &vl);
			make_key(key, j->begin + i);
			if (kl != KEY_SIZE || memcmp(k, key, KEY_SIZE) != 0 ||
			    !value_ok(v, vl, B.value_size, j->begin + i))
				j->bad++;
			else
				j->found++;
			j->bytes += kl + vl;
		}
		break;
	case W_SEEKRANDOM:
		for (uint64_t i = 0; it && i < j->count && !interrupted; i++) {
			uint64_t idx = below(&rng, B.num);
			make_key(key, idx);
			uint64_t t0 = now_ns();
			int rc = e->it_seek(it, key, KEY_SIZE);
			uint64_t got = 0, first_ok = 0;
			for (int n = 0; !rc && e->it_valid(it); n++) {
				size_t kl, vl;
				const char *k = e->it_key(it, &kl);
				const char *v = e->it_value(it, &vl);
				if (n == 0)
					first_ok = kl == KEY_SIZE && !memcmp(k, key, KEY_SIZE);
				j->sink += (uint8_t)k[kl - 1] + (vl ? (uint8_t)v[vl - 1] : 0);
				j->bytes += kl + vl;
				got++;
				if (n == SEEK_NEXTS)
					break;
				rc = e->it_next(it);
			}
			h_add(&j->h, now_ns() - t0);
			if (rc)
				j->errors++;
			/* All keys exist: every seek lands on its key and reads
			 * 51 pairs unless it runs into the end. */
			uint64_t want = B.num - idx < SEEK_NEXTS + 1 ? B.num - idx : SEEK_NEXTS + 1;
			if (got == want && first_ok)
				j->found++;
			else
				j->bad++;
		}
		break;
	default:
		break;
	}
	j->t_end = now_ns();
	if (it && e->it_close(it))
		j->errors++;
	e->thread_done(s, tc);
	free(val);
	return NULL;
}

/* What one workload of one engine measured (sent from the child). */
struct meas {
	int have;
	int partial; /* the timed loop only: the child died in the settle */
	LAT_SUMMARY_MEMBER;
	double mbps;
	double settle_s, reopen_s, incl_opsps, wa_gross, wa_net, wr_per_op, du, space_amp;
	double rd_per_op, syscr_per_op, majflt_per_op; /* loop (+ settle for writes) */
	struct rss rss_end, rss_reopen;		       /* end of loop; after settle */
	/* --cgroup-mb: the group at the end of the loop and after the settle,
	 * and its peak over loop + settle (bytes) */
	struct memcg_stat cg_end, cg_reopen;
	double cg_peak;
	/* FlexDB, reads: per get; NaN elsewhere */
	double fx_hit, fx_thin, fx_load, fx_ext;
	uint64_t errors, bad, found;
	char note[240];
};

/* VmRSS of the child before it opened its store (MiB): the harness (the
 * shuffled key order, the value pool, libraries) the engine's figures
 * are measured above. */
static double child_start_rss;
/* Its RssAnon then (MiB). */
static double child_start_anon;
/* The highest VmRSS the child sampled (VmHWM can lag behind it). */
static double child_max_rss;

static void note_rss(const struct rss *r)
{
	if (r->rss > child_max_rss)
		child_max_rss = r->rss;
}

/* Child -> parent messages, one write each (below PIPE_BUF: atomic):
 * the stage the child enters (so that the parent can say where a child
 * died), a workload's result, the end. */
enum { MSG_STAGE, MSG_RESULT, MSG_END };

/* Where a child is: its parent learns it from MSG_STAGE messages. */
enum { ST_NONE, ST_OPEN, ST_PREFILL, ST_REOPEN, ST_LOOP, ST_SETTLE, ST_CLOSE, NST };
static const char *const st_name[NST] = {"",	    "open",	  "untimed pre-fill",
					 "reopen", "timed loop", "settle and reopen",
					 "close"};

/* The child's end of the result pipe. */
static int child_fd = -1;

static void send_msg(int fd, int kind, int w, int stage, const struct meas *m);

static void enter_stage(int w, int stage)
{
	send_msg(child_fd, MSG_STAGE, w, stage, NULL);
}

/* The settle of write workload w starts; m holds what its loop measured,
 * which the parent keeps should the child die in the settle. */
static void enter_settle(int w, const struct meas *m)
{
	struct meas loop = *m;

	loop.partial = 1;
	send_msg(child_fd, MSG_STAGE, w, ST_SETTLE, &loop);
}

/* Live keys of the store after each write workload. */
static uint64_t live_keys;

static void note_add(struct meas *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(struct meas *m, const char *fmt, ...)
{
	size_t l = strlen(m->note);
	va_list ap;

	if (l + 3 >= sizeof(m->note))
		return;
	if (l) {
		strcpy(m->note + l, "; ");
		l += 2;
	}
	va_start(ap, fmt);
	vsnprintf(m->note + l, sizeof(m->note) - l, fmt, ap);
	va_end(ap);
}

/* The group this child runs in, or NULL. */
static const char *child_cg;

static void cg_none(struct memcg_stat *st)
{
	st->usage = st->max_usage = st->cache = st->rss = st->mapped = st->oom_kills = NAN;
}

static void cg_sample(struct memcg_stat *st)
{
	if (child_cg)
		memcg_read(child_cg, st);
	else
		cg_none(st);
}

static void run_workload(struct store *s, int w, int rep, int nt, uint64_t ops, struct meas *m)
{
	struct job *jobs = calloc((size_t)nt, sizeof(*jobs));
	struct hist *h = calloc(1, sizeof(*h));
	pthread_t th[MAX_THREADS];
	pthread_barrier_t bar;
	struct flexdb_stats fs0, fs1;
	int is_flex = s->eng == &engines[E_FLEX];

	if (!jobs || !h)
		die("out of memory");
	memset(m, 0, sizeof(*m));
	if (is_flex)
		flexdb_stats(s->h, &fs0);
	pthread_barrier_init(&bar, NULL, (unsigned)nt);
	if (child_cg)
		memcg_reset_peak(child_cg);
	struct pio io0 = proc_io();
	uint64_t mf0 = major_faults();
	for (int t = 0; t < nt; t++) {
		struct job *j = &jobs[t];
		j->s = s;
		j->w = w;
		j->rep = rep;
		j->t = t;
		j->begin = ops * (uint64_t)t / (uint64_t)nt;
		j->count = ops * (uint64_t)(t + 1) / (uint64_t)nt - j->begin;
		j->bar = &bar;
		if (pthread_create(&th[t], NULL, worker, j))
			die("pthread_create failed");
	}
	uint64_t ts = UINT64_MAX, te = 0, bytes = 0;
	for (int t = 0; t < nt; t++) {
		pthread_join(th[t], NULL);
		struct job *j = &jobs[t];
		h_merge(h, &j->h);
		ts = j->t_start < ts ? j->t_start : ts;
		te = j->t_end > te ? j->t_end : te;
		bytes += j->bytes;
		m->errors += j->errors;
		m->bad += j->bad;
		m->found += j->found;
	}
	pthread_barrier_destroy(&bar);
	m->rss_end = rss_now();
	note_rss(&m->rss_end);
	cg_sample(&m->cg_end);
	m->have = 1;
	h_summary(h, ts, te, &m->lat);
	m->mbps = (double)bytes / m->secs / 1e6;
	m->settle_s = m->reopen_s = m->incl_opsps = m->wa_gross = m->wa_net = NAN;
	m->wr_per_op = m->du = m->space_amp = NAN;
	m->fx_hit = m->fx_thin = m->fx_load = m->fx_ext = NAN;
	m->rss_reopen.rss = m->rss_reopen.anon = m->rss_reopen.file = NAN;
	m->cg_peak = NAN;
	m->rd_per_op = m->syscr_per_op = m->majflt_per_op = NAN;
	cg_none(&m->cg_reopen);

	if (is_flex) {
		flexdb_stats(s->h, &fs1);
		if (wl_writes(w)) {
			note_add(m,
				 "stalls %" PRIu64 " commits %" PRIu64
				 " (in loop: data %.0f log %.0f tree %.0f gc %.0f MB)",
				 fs1.writer_stalls - fs0.writer_stalls,
				 fs1.committer_runs - fs0.committer_runs,
				 (double)(fs1.space.data_bytes_written -
					  fs0.space.data_bytes_written) /
				     1e6,
				 (double)(fs1.space.log_bytes_written -
					  fs0.space.log_bytes_written) /
				     1e6,
				 (double)(fs1.space.tree_bytes_written -
					  fs0.space.tree_bytes_written) /
				     1e6,
				 (double)(fs1.space.gc_bytes_moved - fs0.space.gc_bytes_moved) /
				     1e6);
		} else {
			double n = m->ops > 0 ? m->ops : 1;
			if (w == W_READRANDOM || w == W_READZIPF) {
				m->fx_hit = (double)(fs1.cache_hits - fs0.cache_hits) / n;
				m->fx_thin =
				    (double)(fs1.cache_thin_hits - fs0.cache_thin_hits) / n;
				m->fx_load = (double)(fs1.cache_misses - fs0.cache_misses) / n;
			}
			m->fx_ext = fs1.intervals
					? (double)fs1.space.extents / (double)fs1.intervals
					: NAN;
			if (fs1.space.data_bytes_written != fs0.space.data_bytes_written ||
			    fs1.space.gc_bytes_moved != fs0.space.gc_bytes_moved)
				note_add(m, "background: data %.0f MB gc %.0f MB",
					 (double)(fs1.space.data_bytes_written -
						  fs0.space.data_bytes_written) /
					     1e6,
					 (double)(fs1.space.gc_bytes_moved -
						  fs0.space.gc_bytes_moved) /
					     1e6);
		}
	}
	if (wl_writes(w)) {
		if (child_fd >= 0 && B.wl_on[w]) /* not the untimed pre-fill */
			enter_settle(w, m);
		uint64_t tidy0 = kv_flex_tidy_bytes, gc0 = kv_flex_gc_bytes;
		kv_settle(s, &m->settle_s, &m->reopen_s);
		if (is_flex)
			note_add(m, "settle: tidy %.0f gc %.0f MB",
				 (double)(kv_flex_tidy_bytes - tidy0) / 1e6,
				 (double)(kv_flex_gc_bytes - gc0) / 1e6);
		m->rss_reopen = rss_now();
		note_rss(&m->rss_reopen);
		cg_sample(&m->cg_reopen);
		m->incl_opsps = m->ops / (m->secs + m->settle_s);
	}
	struct pio io1 = proc_io();
	uint64_t mf1 = major_faults();
	double n = m->ops > 0 ? m->ops : 1;
	if (child_cg) {
		struct memcg_stat st;
		memcg_read(child_cg, &st);
		m->cg_peak = st.max_usage;
	}
	m->rd_per_op = (double)(io1.rb - io0.rb) / n;
	m->syscr_per_op = (double)(io1.syscr - io0.syscr) / n;
	m->majflt_per_op = (double)(mf1 - mf0) / n;
	if (wl_writes(w)) {
		double user = (double)bytes;
		if (B.proc_io_ok) {
			double g = (double)(io1.wb - io0.wb);
			double net = g - (double)(io1.cwb - io0.cwb);
			m->wr_per_op = g / n;
			if (w != W_DELETERANDOM) {
				m->wa_gross = g / user;
				m->wa_net = net / user;
			}
		}
		m->du = (double)du(s->path);
		if (live_keys)
			m->space_amp = m->du / ((double)live_keys * (KEY_SIZE + B.value_size));
	}
	if (wl_writes(w) || w == W_READRANDOM) {
		char lv[96];
		s->eng->levels(s, lv, sizeof(lv));
		if (lv[0])
			note_add(m, "%s", lv);
	}
	free(h);
	free(jobs);
}

/* ---- per-engine child processes --------------------------------------------------------- */


struct msg {
	int kind, w, stage;
	struct meas m;	 /* MSG_RESULT */
	double start;	 /* VmRSS before the open, MiB */
	double start_anon; /* RssAnon then */
	double hwm;	 /* MSG_END: the peak VmRSS, MiB */
	int interrupted; /* MSG_END: a signal cut the workloads short */
};

_Static_assert(sizeof(struct msg) <= 4096, "a message must fit PIPE_BUF");

static void send_msg(int fd, int kind, int w, int stage, const struct meas *m)
{
	struct msg g;

	memset(&g, 0, sizeof(g));
	g.kind = kind;
	g.w = w;
	g.stage = stage;
	g.start = child_start_rss;
	g.start_anon = child_start_anon;
	if (m)
		g.m = *m;
	if (kind == MSG_END) {
		g.hwm = vm_mib("VmHWM");
		if (child_max_rss > g.hwm)
			g.hwm = child_max_rss;
		g.interrupted = interrupted != 0;
	}
	if (write(fd, &g, sizeof(g)) != (ssize_t)sizeof(g))
		die("result pipe: %s", strerror(errno));
}

static void store_path(char *buf, size_t cap, int en, const char *suffix)
{
	xsnprintf(buf, cap, "%s/%s%s", B.work, engines[en].name, suffix);
}

static uint64_t live_after_deletes(int rep, int nt);

/* Child: every selected workload on one store of engine en, in group cg
 * (NULL: none). */
static void child_main(int en, int rep, int nt, int fd, const char *cg)
{
	struct store s = {.eng = &engines[en]};
	int need_store = 0, last_was_read = 0;

	if (cg) {
		int rc = memcg_enter(cg);
		if (rc)
			die("cannot move into the memory cgroup %s: %s", cg, strerror(-rc));
		child_cg = cg;
	}
	child_start_rss = vm_mib("VmRSS");
	child_start_anon = vm_mib("RssAnon");
	child_fd = fd;

	for (int w = W_OVERWRITE; w < NWL; w++)
		need_store |= B.wl_on[w];
	store_path(s.path, sizeof(s.path), en, "");
	enter_stage(-1, ST_OPEN);
	s.eng->open(&s);
	for (int w = 0; w < NWL && !interrupted; w++) {
		struct meas m;
		uint64_t ops = w == W_READRANDOM || w == W_READZIPF ? B.reads
			       : w == W_SEEKRANDOM		    ? B.seeks
								    : B.num;
		/* The store every later workload works on. */
		if (w == W_FILLRANDOM && !B.wl_on[w] && need_store) {
			live_keys = B.num;
			fprintf(stderr, "    %-12s %-8s (untimed fillrandom)\n", "pre-fill",
				s.eng->name);
			enter_stage(W_FILLRANDOM, ST_PREFILL);
			run_workload(&s, W_FILLRANDOM, rep, nt, B.num, &m);
		}
		if (!B.wl_on[w])
			continue;
		if (w == W_FILLRANDOM || w == W_FILLSEQ || w == W_OVERWRITE)
			live_keys = B.num;
		else if (w == W_DELETERANDOM)
			live_keys = live_after_deletes(rep, nt);
		/* Cold user caches: a read after a read reopens first. */
		double reopen = NAN;
		if (!wl_writes(w) && last_was_read) {
			uint64_t t0 = now_ns();
			enter_stage(w, ST_REOPEN);
			s.eng->close(&s);
			s.eng->open(&s);
			reopen = secs_since(t0);
		}
		enter_stage(w, ST_LOOP);
		if (w == W_FILLSEQ) {
			struct store q = {.eng = s.eng};
			store_path(q.path, sizeof(q.path), en, "-seq");
			q.eng->open(&q);
			run_workload(&q, w, rep, nt, ops, &m);
			q.eng->close(&q);
			rmtree(q.path);
		} else {
			run_workload(&s, w, rep, nt, ops, &m);
		}
		if (interrupted)
			break; /* a cut-short loop is no result */
		if (!wl_writes(w))
			m.reopen_s = reopen;
		last_was_read = !wl_writes(w);
		fprintf(stderr, "    %-12s %-8s %10.0f ops/s  p99 %8.2f us", wl_name[w],
			s.eng->name, m.opsps, m.p99);
		if (!isnan(m.settle_s))
			fprintf(stderr, "  settle %.2f s", m.settle_s);
		if (m.errors || m.bad)
			fprintf(stderr, "  %" PRIu64 " errors %" PRIu64 " bad", m.errors, m.bad);
		fprintf(stderr, "\n");
		send_msg(fd, MSG_RESULT, w, ST_NONE, &m);
	}
	enter_stage(-1, ST_CLOSE);
	s.eng->close(&s);
	send_msg(fd, MSG_END, -1, ST_NONE, NULL);
}

/* How an engine's child ended. */
enum { RUN_NONE, RUN_OK, RUN_OOM, RUN_TIMEOUT, RUN_INTERRUPTED, RUN_KILLED, RUN_FAILED };

struct run {
	int status;
	int died_in;	/* workload running when the child died, or -1 */
	int died_stage; /* and where in it (ST_*) */
	int sig, code;
	double hwm, start, start_anon;
	struct memcg_stat cg; /* the group after the child ended */
	double cg_peak;	      /* its peak over the whole child */
	struct meas m[NWL];
};

static struct run R[MAX_TC][MAX_REPS][NENG];

/* Forks the child of engine en and collects what it sends. */
static void run_engine(int ti, int rep, int en)
{
	struct run *r = &R[ti][rep][en];
	char path[PATH_MAX + 64];
	int pfd[2];

	char cg[PATH_MAX + 128], why[PATH_MAX + 200];

	memset(r, 0, sizeof(*r));
	r->died_in = -1;
	r->cg_peak = NAN;
	store_path(path, sizeof(path), en, "");
	rmtree(path);
	if (B.cgroup_mb) {
		if (memcg_create(B.cg_parent, engines[en].name, B.cgroup_mb << 20, cg, sizeof(cg),
				 why, sizeof(why)))
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
		child_main(en, rep, B.tcs[ti], pfd[1], B.cgroup_mb ? cg : NULL);
		_exit(0);
	}
	close(pfd[1]);
	int ended = 0, running = -1, stage = ST_NONE, timed_out = 0, child_int = 0;
	uint64_t deadline = B.timeout_s ? now_ns() + B.timeout_s * 1000000000ull : 0;
	for (;;) {
		struct msg g;
		size_t got = 0;
		while (got < sizeof(g)) {
			if (deadline) {
				uint64_t now = now_ns();
				struct pollfd p = {.fd = pfd[0], .events = POLLIN};
				int ms = now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
				int rc = poll(&p, 1, ms);
				if (rc < 0 && errno == EINTR)
					continue;
				if (rc == 0) {
					kill(pid, SIGKILL);
					timed_out = 1;
					break;
				}
			}
			ssize_t n = read(pfd[0], (char *)&g + got, sizeof(g) - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got < sizeof(g))
			break;
		r->start = g.start;
		r->start_anon = g.start_anon;
		if (g.kind == MSG_STAGE && g.w < NWL && g.stage > ST_NONE && g.stage < NST) {
			running = g.w;
			stage = g.stage;
			if (g.w >= 0 && g.m.have && g.m.partial)
				r->m[g.w] = g.m;
		} else if (g.kind == MSG_RESULT && g.w >= 0 && g.w < NWL) {
			r->m[g.w] = g.m;
			running = -1;
			stage = ST_NONE;
		} else if (g.kind == MSG_END) {
			r->hwm = g.hwm;
			child_int = g.interrupted;
			ended = 1;
		}
	}
	close(pfd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (B.cgroup_mb) {
		memcg_read(cg, &r->cg);
		r->cg_peak = r->cg.max_usage;
		for (int w = 0; w < NWL; w++)
			if (r->m[w].have && r->m[w].cg_peak > r->cg_peak)
				r->cg_peak = r->m[w].cg_peak;
		int rc = memcg_remove(cg);
		if (rc)
			fprintf(stderr, "flexdb_bench: cannot remove the cgroup %s: %s\n", cg,
				strerror(-rc));
		B.cg_live[0] = 0;
	}
	r->died_stage = stage;
	if (timed_out) {
		r->status = RUN_TIMEOUT;
		r->died_in = running;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && ended) {
		r->status = child_int ? RUN_INTERRUPTED : RUN_OK;
	} else {
		r->died_in = running;
		if (WIFSIGNALED(st)) {
			r->sig = WTERMSIG(st);
			r->status = r->sig == SIGKILL && r->cg.oom_kills > 0 ? RUN_OOM : RUN_KILLED;
		} else {
			r->code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			r->status = RUN_FAILED;
		}
	}
	rmtree(path);
}

/* ---- reporting ------------------------------------------------------------------------- */

/* Runs and operations that failed: the exit status says so (CI runs
 * --quick as a smoke test). */
static int n_failed;

static double med_field(int ti, int w, int en, size_t off)
{
	double v[MAX_REPS];
	int n = 0;

	for (int r = 0; r < B.reps; r++)
		if (R[ti][r][en].m[w].have)
			v[n++] = *(const double *)((const char *)&R[ti][r][en].m[w] + off);
	return n ? median(v, n) : NAN;
}

#define MED(ti, w, en, field) med_field(ti, w, en, offsetof(struct meas, field))

/* How a child that did not finish ended. */
static const char *run_status(const struct run *run, char *buf, size_t cap)
{
	switch (run->status) {
	case RUN_OK:
		return "ok";
	case RUN_OOM:
		return "OOM";
	case RUN_TIMEOUT:
		return "TIMEOUT";
	case RUN_INTERRUPTED:
		return "interrupted";
	case RUN_KILLED:
		snprintf(buf, cap, "killed (signal %d)", run->sig);
		return buf;
	case RUN_FAILED:
		snprintf(buf, cap, "failed (exit %d)", run->code);
		return buf;
	default:
		return interrupted ? "interrupted" : "not run";
	}
}

/* Where a child that did not finish was: "fillrandom (settle and reopen)". */
static void where_died(const struct run *run, char *buf, size_t cap)
{
	if (run->died_in >= 0)
		snprintf(buf, cap, "%s (%s)", wl_name[run->died_in], st_name[run->died_stage]);
	else if (run->died_stage > ST_NONE)
		snprintf(buf, cap, "%s", st_name[run->died_stage]);
	else
		snprintf(buf, cap, "start");
}

/* Why engine en has no result for workload w in repetition r, or NULL. */
static const char *missing_why(int ti, int r, int w, int en, char *buf, size_t cap)
{
	const struct run *run = &R[ti][r][en];

	if (run->m[w].have)
		return NULL;
	if (run->status == RUN_OK)
		return interrupted ? "interrupted" : "not run";
	return run_status(run, buf, cap);
}

static void print_table(int ti)
{
	printf("threads %d\n", B.tcs[ti]);
	printf("%-12s %-8s %10s %8s %8s %8s %9s  %8s %7s %7s  %5s %5s %5s %7s %7s\n", "workload",
	       "engine", "ops/s", "us/op", "p50", "p99", "p99.9", "rdKB/op", "calls",
	       "faults", "wa", "net", "space", "settle", "reopen");
	for (int w = 0; w < NWL; w++) {
		if (!B.wl_on[w])
			continue;
		for (int en = 0; en < NENG; en++) {
			if (!B.eng_on[en])
				continue;
			int have = 0, nmiss = 0, npart = 0;
			char pwhy[64] = "";
			uint64_t errs = 0, bad = 0;
			const char *why = NULL;
			char wbuf[64];
			for (int r = 0; r < B.reps; r++) {
				const struct meas *m = &R[ti][r][en].m[w];
				if (m->have) {
					have++;
					if (m->partial) {
						npart++;
						snprintf(pwhy, sizeof(pwhy), "%s",
							 run_status(&R[ti][r][en], wbuf,
								    sizeof(wbuf)));
					}
					errs += m->errors;
					bad += m->bad;
				} else {
					nmiss++;
					why = missing_why(ti, r, w, en, wbuf, sizeof(wbuf));
				}
			}
			if (!have) {
				printf("%-12s %-8s %10s\n", wl_name[w], engines[en].name,
				       why ? why : "-");
				continue;
			}
			char wa[16], net[16], sp[16], st[16], ro[16], rd[16], sc[16], mf[16];
			fmt_num(rd, sizeof(rd), 2, "", MED(ti, w, en, rd_per_op) / 1024.0);
			fmt_num(sc, sizeof(sc), 2, "", MED(ti, w, en, syscr_per_op));
			fmt_num(mf, sizeof(mf), 2, "", MED(ti, w, en, majflt_per_op));
			fmt_num(wa, sizeof(wa), 2, "", MED(ti, w, en, wa_gross));
			fmt_num(net, sizeof(net), 2, "", MED(ti, w, en, wa_net));
			fmt_num(sp, sizeof(sp), 2, "", MED(ti, w, en, space_amp));
			fmt_num(st, sizeof(st), 2, "", MED(ti, w, en, settle_s));
			fmt_num(ro, sizeof(ro), 2, "", MED(ti, w, en, reopen_s));
			printf("%-12s %-8s %10.0f %8.2f %8.2f %8.2f %9.2f  %8s %7s %7s  %5s "
			       "%5s %5s %7s %7s",
			       wl_name[w], engines[en].name, MED(ti, w, en, opsps),
			       MED(ti, w, en, usop), MED(ti, w, en, p50), MED(ti, w, en, p99),
			       MED(ti, w, en, p999), rd, sc, mf, wa, net, sp, st, ro);
			if (nmiss)
				printf("  (%s in %d of %d reps)", why, nmiss, B.reps);
			if (npart)
				printf("  (loop only: %s in its settle in %d of %d reps)", pwhy, npart,
				       B.reps);
			if (errs || bad) {
				printf("  CHECK FAILED: %" PRIu64 " errors, %" PRIu64
				       " wrong or missing results",
				       errs, bad);
				n_failed++;
			}
			printf("\n");
		}
	}
}

/* Per-repetition ops/s, FlexDB's counters, engine notes (last rep's). */
static void print_details(int ti)
{
	printf("\ndetails, threads %d (ops/s of every rep; flexdb, per get: whole-interval cache "
	       "hits, thin-entry hits, intervals loaded; extents per interval; notes)\n",
	       B.tcs[ti]);
	for (int w = 0; w < NWL; w++) {
		if (!B.wl_on[w])
			continue;
		for (int en = 0; en < NENG; en++) {
			char reps[96] = "", extra[160] = "";
			const char *note = "";
			if (!B.eng_on[en])
				continue;
			for (int r = 0; r < B.reps; r++) {
				const struct meas *m = &R[ti][r][en].m[w];
				size_t l = strlen(reps);
				if (!m->have)
					continue;
				snprintf(reps + l, sizeof(reps) - l, "%s%.0f", l ? " " : "",
					 m->opsps);
				if (m->note[0])
					note = m->note;
			}
			if (!reps[0])
				continue;
			if (en == E_FLEX && !isnan(MED(ti, w, en, fx_hit)))
				snprintf(extra, sizeof(extra), "  hit %.2f thin %.2f load %.3f",
					 MED(ti, w, en, fx_hit), MED(ti, w, en, fx_thin),
					 MED(ti, w, en, fx_load));
			if (en == E_FLEX && !isnan(MED(ti, w, en, fx_ext)))
				snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
					 "  extents/interval %.1f", MED(ti, w, en, fx_ext));
			if (wl_writes(w) && !isnan(MED(ti, w, en, incl_opsps)))
				snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
					 "  incl-settle %.0f ops/s",
					 MED(ti, w, en, incl_opsps));
			if (B.cgroup_mb && !isnan(MED(ti, w, en, cg_peak)))
				snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
					 "  cg peak %.0f MiB", MED(ti, w, en, cg_peak) / 1048576.0);
			if (w == W_DELETERANDOM && !isnan(MED(ti, w, en, wr_per_op)))
				snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
					 "  written %.0f B/op", MED(ti, w, en, wr_per_op));
			printf("  %-12s %-8s reps [%s]%s%s%s\n", wl_name[w], engines[en].name, reps,
			       extra, note[0] ? "  " : "", note);
		}
	}
}

/* The read workload that ran last (the "after reads" memory point). */
static int last_read_wl(void)
{
	int last = -1;

	for (int w = 0; w < NWL; w++)
		if (B.wl_on[w] && !wl_writes(w))
			last = w;
	return last;
}

/* Median over repetitions of a double at offset off of a memory snapshot
 * of workload w: the struct rss (cg 0) or the struct memcg_stat (cg 1) at
 * the end of its loop (reopen 0) or after its settle (reopen 1). */
static double med_snap(int ti, int en, int w, int reopen, int cg, size_t off)
{
	double v[MAX_REPS];
	int n = 0;

	if (w < 0)
		return NAN;
	for (int r = 0; r < B.reps; r++) {
		const struct meas *m = &R[ti][r][en].m[w];
		const void *p = cg ? (const void *)(reopen ? &m->cg_reopen : &m->cg_end)
				   : (const void *)(reopen ? &m->rss_reopen : &m->rss_end);
		if (m->have)
			v[n++] = *(const double *)((const char *)p + off);
	}
	return n ? median(v, n) : NAN;
}

static void print_memory(int ti)
{
	static const char *const pt[3] = {"load", "reopen", "reads"};
	int wr = last_read_wl();
	int at[3][2] = {{B.wl_on[W_FILLRANDOM] ? W_FILLRANDOM : -1, 0},
			{B.wl_on[W_FILLRANDOM] ? W_FILLRANDOM : -1, 1},
			{wr, 0}};
	const double mib = 1048576.0;

	printf("\nmemory, threads %d (MiB; start = the engine's process before it opened the "
	       "store (harness: key order, value pool, libraries); load = end of the fillrandom "
	       "loop, reopen = after its settle and reopen, reads = end of %s; per pair = "
	       "(VmRSS - start - cache and memtables configured) / %" PRIu64 " pairs, bytes; "
	       "anon/pair = the same of RssAnon (the pages of mapped files left out: the page "
	       "cache's, which the kernel reclaims)%s)\n",
	       B.tcs[ti], wr >= 0 ? wl_name[wr] : "the reads", B.num,
	       B.cgroup_mb ? "; cg = the engine's memory cgroup: usage, its page cache and "
			     "anonymous parts (memory.stat total_cache, total_rss)"
			   : "");
	printf("%-8s %-7s %9s %9s %9s %9s %9s", "engine", "point", "VmRSS", "RssAnon", "RssFile",
	       "per pair", "anon/pair");
	if (B.cgroup_mb)
		printf(" %9s %9s %9s %7s", "cg usage", "cg cache", "cg rss", "cache%");
	printf("\n");
	for (int en = 0; en < NENG; en++) {
		double sv[MAX_REPS], av[MAX_REPS], start = NAN, start_anon = NAN;
		int ns = 0;
		if (!B.eng_on[en])
			continue;
		for (int r = 0; r < B.reps; r++)
			if (R[ti][r][en].start > 0) {
				av[ns] = R[ti][r][en].start_anon;
				sv[ns++] = R[ti][r][en].start;
			}
		if (ns) {
			start = median(sv, ns);
			start_anon = median(av, ns);
			printf("%-8s %-7s %9.1f\n", engines[en].name, "start", start);
		}
		for (int p = 0; p < 3; p++) {
			int w = at[p][0], ro = at[p][1];
			double rss = med_snap(ti, en, w, ro, 0, offsetof(struct rss, rss));
			double anon = med_snap(ti, en, w, ro, 0, offsetof(struct rss, anon));
			char c[9][16];
			fmt_num(c[0], sizeof(c[0]), 1, "", rss);
			fmt_num(c[1], sizeof(c[1]), 1, "", anon);
			fmt_num(c[2], sizeof(c[2]), 1, "",
				med_snap(ti, en, w, ro, 0, offsetof(struct rss, file)));
			fmt_num(c[3], sizeof(c[3]), 1, "",
				((rss - start) * mib - budget_bytes(en)) / (double)B.num);
			fmt_num(c[8], sizeof(c[8]), 1, "",
				((anon - start_anon) * mib - budget_bytes(en)) / (double)B.num);
			printf("%-8s %-7s %9s %9s %9s %9s %9s", engines[en].name, pt[p], c[0], c[1],
			       c[2], c[3], c[8]);
			if (B.cgroup_mb) {
				double u = med_snap(ti, en, w, ro, 1,
						    offsetof(struct memcg_stat, usage));
				double ca = med_snap(ti, en, w, ro, 1,
						     offsetof(struct memcg_stat, cache));
				double an = med_snap(ti, en, w, ro, 1,
						     offsetof(struct memcg_stat, rss));
				fmt_num(c[4], sizeof(c[4]), 1, "", u / mib);
				fmt_num(c[5], sizeof(c[5]), 1, "", ca / mib);
				fmt_num(c[6], sizeof(c[6]), 1, "", an / mib);
				fmt_num(c[7], sizeof(c[7]), 0, "%", 100.0 * ca / (ca + an));
				printf(" %9s %9s %9s %7s", c[4], c[5], c[6], c[7]);
			}
			printf("\n");
		}
		double v[MAX_REPS], pk[MAX_REPS];
		int n = 0, npk = 0, bad[RUN_FAILED + 1] = {0};
		char last[RUN_FAILED + 1][96];
		for (int r = 0; r < B.reps; r++) {
			const struct run *run = &R[ti][r][en];
			if (run->status == RUN_OK)
				v[n++] = run->hwm;
			if (!isnan(run->cg_peak))
				pk[npk++] = run->cg_peak / mib;
			if (run->status != RUN_OK && run->status != RUN_NONE) {
				bad[run->status]++;
				where_died(run, last[run->status], sizeof(last[0]));
			}
		}
		printf("%-8s %-7s %9s", engines[en].name, "peak", "");
		if (n)
			printf("  VmHWM %.1f", median(v, n));
		if (npk)
			printf("  cgroup max usage %.1f of %" PRIu64 " MiB", median(pk, npk),
			       B.cgroup_mb);
		if (B.cgroup_mb && !bad[RUN_OOM])
			printf("  not OOM-killed");
		for (int k = RUN_OOM; k <= RUN_FAILED; k++) {
			if (!bad[k])
				continue;
			static const char *const what[] = {
			    [RUN_OOM] = "OOM-KILLED", [RUN_TIMEOUT] = "TIMEOUT",
			    [RUN_INTERRUPTED] = "interrupted", [RUN_KILLED] = "killed by a signal",
			    [RUN_FAILED] = "failed"};
			printf("  %s in %d of %d reps (last during %s)", what[k], bad[k], B.reps,
			       last[k]);
		}
		printf("\n");
	}
}

static void print_ratios(int ti)
{
	static const double target[NWL] = {
	    [W_FILLRANDOM] = 1.5, [W_READRANDOM] = 2.0, [W_SEEKRANDOM] = 2.0};
	int any = 0;

	for (int en = 1; en < NENG; en++)
		any |= B.eng_on[en];
	if (!B.eng_on[E_FLEX] || !any)
		return;
	printf("\nFlexDB / peer ops/s, threads %d, medians (>1: FlexDB faster)\n", B.tcs[ti]);
	printf("%-12s %10s %10s %10s   %s\n", "workload", "rocksdb", "leveldb", "lmdb",
	       "target vs rocksdb");
	for (int w = 0; w < NWL; w++) {
		if (!B.wl_on[w])
			continue;
		double f = MED(ti, w, E_FLEX, opsps);
		char c[NENG][16];
		for (int en = 1; en < NENG; en++)
			fmt_num(c[en], sizeof(c[en]), 2, "x",
				B.eng_on[en] ? f / MED(ti, w, en, opsps) : NAN);
		printf("%-12s %10s %10s %10s", wl_name[w], c[E_ROCKS], c[E_LEVEL], c[E_LMDB]);
		double rr = f / MED(ti, w, E_ROCKS, opsps);
		if (target[w] > 0 && B.eng_on[E_ROCKS])
			printf("   >= %.1fx %s", target[w],
			       isnan(rr) ? "n/a" : rr >= target[w] ? "PASS" : "MISS");
		printf("\n");
	}
}

static void csv_write(void)
{
	FILE *f;

	if (!B.csv_path)
		return;
	f = csv_open(B.csv_path,
		     "workload,engine,threads,rep,num,status,ops,seconds,ops_per_s,us_per_op,"
		     "p50_us,p99_us,p999_us,max_us,mb_per_s,settle_s,reopen_s,"
		     "incl_settle_ops_per_s,wa_gross,wa_net,written_per_op,du_bytes,space_amp,"
		     "read_bytes_per_op,read_calls_per_op,major_faults_per_op,rss_mib,anon_mib,"
		     "file_mib,rss_reopen_mib,cg_usage_mib,cg_cache_mib,cg_rss_mib,cg_peak_mib,"
		     "fx_hit_per_get,fx_thin_per_get,fx_load_per_get,errors,bad,note\n");
	for (int ti = 0; ti < B.ntc; ti++)
		for (int w = 0; w < NWL; w++)
			for (int en = 0; en < NENG; en++) {
				if (!B.wl_on[w] || !B.eng_on[en])
					continue;
				for (int r = 0; r < B.reps; r++) {
					const struct meas *m = &R[ti][r][en].m[w];
					char wbuf[64];
					const char *why = missing_why(ti, r, w, en, wbuf, sizeof(wbuf));
					fprintf(f, "%s,%s,%d,%d,%" PRIu64 ",%s", wl_name[w],
						engines[en].name, B.tcs[ti], r + 1, B.num,
						why ? why : "ok");
					if (!m->have) {
						fprintf(f, "%s\n", ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,");
						continue;
					}
					fprintf(f,
						",%.0f,%.4f,%.1f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
						"%.3f,%.1f,%.4f,%.4f,%.1f,%.0f,%.4f,%.1f,%.4f,%.4f,"
						"%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.4f,%.4f,"
						"%.4f,%" PRIu64 ",%" PRIu64 ",\"%s\"\n",
						m->ops, m->secs, m->opsps, m->usop, m->p50, m->p99,
						m->p999, m->maxus, m->mbps, m->settle_s, m->reopen_s,
						m->incl_opsps, m->wa_gross, m->wa_net, m->wr_per_op,
						m->du, m->space_amp, m->rd_per_op, m->syscr_per_op,
						m->majflt_per_op, m->rss_end.rss, m->rss_end.anon,
						m->rss_end.file, m->rss_reopen.rss,
						m->cg_end.usage / 1048576.0,
						m->cg_end.cache / 1048576.0,
						m->cg_end.rss / 1048576.0, m->cg_peak / 1048576.0,
						m->fx_hit,
						m->fx_thin, m->fx_load, m->errors, m->bad, m->note);
				}
			}
	fclose(f);
	printf("csv:      %s\n", B.csv_path);
}

/* ---- the run ---------------------------------------------------------------------------- */

static double measure_clock(void)
{
	uint64_t t0 = now_ns(), x = 0;

	for (int i = 0; i < 1000000; i++)
		x += now_ns();
	return (double)(now_ns() - t0 - (x & 1)) / 1e6;
}

/* RocksDB's version from the OPTIONS file a throwaway store writes, in a
 * child, so that the parent never starts RocksDB's threads. */
static void rocks_version(void)
{
	char dir[PATH_MAX + 32];

	xsnprintf(dir, sizeof(dir), "%s/rocksdb-probe", B.work);
	fflush(stdout);
	fflush(stderr);
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
	char cpu[256], date[64], thr[32] = "", engs[64] = "";
	uint64_t c = engine_opts.cache_bytes >> 20, mt = engine_opts.memtable_bytes >> 20;

	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	for (int i = 0; i < B.ntc; i++)
		snprintf(thr + strlen(thr), sizeof(thr) - strlen(thr), "%s%d", i ? "," : "",
			 B.tcs[i]);
	for (int en = 0; en < NENG; en++)
		if (B.eng_on[en])
			snprintf(engs + strlen(engs), sizeof(engs) - strlen(engs), "%s%s",
				 engs[0] ? "," : "", engines[en].name);
	printf("flexdb_bench: FlexDB vs RocksDB, LevelDB, LMDB, db_bench workloads (FlexSpace "
	       "paper, section 6.3)\n");
	print_build_mode();
	printf("library:  flex %s; RocksDB %s, LevelDB %s, LMDB %s (system libraries, C APIs)\n",
	       flex_version(NULL, NULL, NULL), B.rocks_version, B.level_version, B.lmdb_version);
	printf("cpu:      %s, %ld online\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("date:     %s\n", date);
	printf("config:   %" PRIu64 " pairs (%.0f MB of keys+values), %d-byte keys, %u-byte "
	       "values; engines %s; threads %s; %d rep%s (median); seed %" PRIu64 "%s\n",
	       B.num, (double)B.num * (KEY_SIZE + B.value_size) / 1e6, KEY_SIZE, B.value_size,
	       engs, thr, B.reps, B.reps == 1 ? "" : "s", B.seed, B.quick ? "; --quick" : "");
	printf("          readrandom/readzipf %" PRIu64 " gets (zipf: YCSB scrambled, 0.99), "
	       "seekrandom %" PRIu64 " seeks + %d nexts, readseq whole store, "
	       "overwrite/deleterandom %" PRIu64 " ops\n",
	       B.reads, B.seeks, SEEK_NEXTS, B.num);
	printf("memory:   cache %" PRIu64 " MiB + 2 x %" PRIu64 " MiB memtables for each of "
	       "flexdb (cache_size: intervals and 1/4 tree leaves, memtable_size), rocksdb (LRU "
	       "block cache, write_buffer_size x 2), leveldb (LRU cache, write_buffer_size + 1 "
	       "immutable); lmdb none (OS page cache; 64 GiB map); index/filter blocks and "
	       "FlexDB's sparse index outside\n",
	       c, mt);
	printf("engines:  no compression; %s on rocksdb and leveldb; rocksdb "
	       "max_background_jobs 2, other options default; flexdb defaults (one committer "
	       "thread, 4 MiB segments, GC at 1.5x)%s\n",
	       engine_opts.bloom_bits > 0 ? "bloom filters" : "no bloom filters",
	       engine_opts.flex_no_mmap ? " but space.no_mmap (pread, no read mapping)" : "");
	printf("writes:   no sync per write anywhere, each write handed to the OS before it "
	       "returns (flexdb sync_writes=0, rocksdb/leveldb sync=false, lmdb one txn per put "
	       "with MDB_NOSYNC|MDB_NOMETASYNC)\n");
	printf("settle:   after each write workload: rocksdb flush + wait for compactions%s; "
	       "leveldb wait until L0 < 4 files; flexdb commit + wait for tidying "
	       "(flexdb_compact%s); close + reopen; a read after a read reopens too (cold user "
	       "caches, page cache as it is)\n",
	       engine_opts.rocks_compact ? " (+ compact_range, leveldb too)" : "",
	       engine_opts.rocks_compact ? ", whole" : "");
	printf("process:  each engine's workloads in its own forked child, engines in rotating "
	       "order");
	if (B.timeout_s)
		printf("; a child still running after %" PRIu64 " s is killed (TIMEOUT)",
		       B.timeout_s);
	printf("\n");
	if (B.cgroup_mb)
		printf("cgroup:   each child in its own v1 memory cgroup of %" PRIu64
		       " MiB (memory.limit_in_bytes, memsw too where present) under %s: heap, "
		       "caches, memtables and the page cache of its store share the limit; the "
		       "OOM killer ends an engine that cannot fit\n",
		       B.cgroup_mb, B.cg_parent);
	else
		printf("cgroup:   none (--cgroup-mb N): the page cache is not limited\n");
	printf("timing:   per-op clock_gettime (%.0f ns per call here, 2 per op); us/op = mean "
	       "latency; p50/p99/p99.9 in us\n",
	       B.clock_ns);
	printf("reads:    per op over the loop (+ settle for writes), whole process: rdKB/op = "
	       "/proc/self/io read_bytes (block layer), calls = syscr (read system calls; "
	       "io_uring reads not counted), faults = major faults (mapped-file reads)\n");
	printf("amp:      wa = write_bytes during workload+settle / user bytes (net: minus "
	       "cancelled_write_bytes)%s; space = du of store dir / live key+value bytes\n",
	       B.proc_io_ok ? "" : " UNAVAILABLE here");
	printf("dir:      %s\n\n", B.work);
	fflush(stdout);
}

static void usage(void)
{
	printf("usage: flexdb_bench [options]\n"
	       "  --num N            pairs (default 2000000; --quick 100000)\n"
	       "  --value-size N     value bytes (default 100)\n"
	       "  --threads LIST     client thread counts, e.g. 1,2 (default 1)\n"
	       "  --reps N           repetitions, medians reported (default 3; --quick 1)\n"
	       "  --reads N          readrandom and readzipf gets (default num)\n"
	       "  --seeks N          seekrandom seeks (default num/4)\n"
	       "  --benchmarks LIST  comma-separated subset of fillrandom,fillseq,overwrite,\n"
	       "                     readrandom,readzipf,readseq,seekrandom,deleterandom, or all\n"
	       "                     (default fillrandom,readrandom,readzipf,seekrandom); a store\n"
	       "                     is pre-filled (untimed fillrandom) when needed\n"
	       "  --engines LIST     subset of flexdb,rocksdb,leveldb,lmdb (default all)\n"
	       "  --cache-mb N       cache of every engine but LMDB (default 64)\n"
	       "  --memtable-mb N    memtable / write buffer, two of them (default 32)\n"
	       "  --bloom-bits N     RocksDB and LevelDB bloom bits per key, 0 = none (default 10)\n"
	       "  --rocksdb-compact  compact RocksDB and LevelDB fully when settling\n"
	       "  --flexdb-no-mmap   FlexDB reads with pread, not through a mapping (space.no_mmap)\n"
	       "  --seed N           random seed (default 42)\n"
	       "  --dir DIR          where to make the stores (default /tmp)\n"
	       "  --csv FILE         also write per-repetition rows as CSV\n"
	       "  --cgroup-mb N      run each engine's process in a v1 memory cgroup of N MiB,\n"
	       "                     which counts its page cache too (needs root)\n"
	       "  --cgroup-optional  with --cgroup-mb: when cgroups are unavailable, say why\n"
	       "                     and exit 0 without running (CI)\n"
	       "  --timeout-s N      kill an engine's process after N seconds (reported as\n"
	       "                     TIMEOUT; the other engines go on; default: no limit)\n"
	       "  --quick            100k pairs, one repetition\n");
}

static void parse_args(int argc, char **argv)
{
	uint64_t num = 0, reads = 0, seeks = 0;
	int reps = 0, wl_given = 0, eng_given = 0;

	B.value_size = 100;
	B.tcs[0] = 1;
	B.ntc = 1;
	B.seed = 42;
	engine_opts_default();
	snprintf(B.base, sizeof(B.base), "/tmp");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--quick")) {
			B.quick = 1;
		} else if (!strcmp(a, "--num")) {
			num = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--value-size")) {
			B.value_size = (uint32_t)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--threads")) {
			char *list = strdup(opt_value(argc, argv, &i)), *save = NULL;
			if (!list)
				die("out of memory");
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
		} else if (!strcmp(a, "--reads")) {
			reads = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--seeks")) {
			seeks = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--seed")) {
			B.seed = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--dir")) {
			snprintf(B.base, sizeof(B.base), "%s", opt_value(argc, argv, &i));
		} else if (!strcmp(a, "--csv")) {
			B.csv_path = opt_value(argc, argv, &i);
		} else if (!strcmp(a, "--cgroup-mb")) {
			B.cgroup_mb = opt_u64(argc, argv, &i);
			if (B.cgroup_mb < 8 || B.cgroup_mb > ((uint64_t)1 << 40))
				die("--cgroup-mb must be >= 8");
		} else if (!strcmp(a, "--timeout-s")) {
			B.timeout_s = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--cgroup-optional")) {
			B.cgroup_optional = 1;
		} else if (!strcmp(a, "--engines") || !strcmp(a, "--engine")) {
			const char *v = opt_value(argc, argv, &i);
			const char *names[NENG];
			for (int en = 0; en < NENG; en++)
				names[en] = engines[en].name;
			if (!strcmp(v, "all"))
				v = "flexdb,rocksdb,leveldb,lmdb";
			mark_names(v, names, NENG, B.eng_on, "engine");
			eng_given = 1;
		} else if (!strcmp(a, "--benchmarks")) {
			const char *v = opt_value(argc, argv, &i);
			if (!strcmp(v, "all"))
				for (int w = 0; w < NWL; w++)
					B.wl_on[w] = 1;
			else
				mark_names(v, wl_name, NWL, B.wl_on, "benchmark");
			wl_given = 1;
		} else if (!engine_opts_arg(argc, argv, &i)) {
			other_option(usage, a);
		}
	}
	if (!wl_given)
		B.wl_on[W_FILLRANDOM] = B.wl_on[W_READRANDOM] = B.wl_on[W_READZIPF] =
		    B.wl_on[W_SEEKRANDOM] = 1;
	if (!eng_given)
		for (int en = 0; en < NENG; en++)
			B.eng_on[en] = 1;
	B.num = num ? num : B.quick ? 100000 : 2000000;
	B.reps = reps ? reps : B.quick ? 1 : 3;
	B.reads = reads ? reads : B.num;
	B.seeks = seeks ? seeks : B.num / 4;
	if (B.num < 100 || B.num > UINT32_MAX)
		die("--num must be 100 .. 2^32-1");
	if (B.reps < 1 || B.reps > MAX_REPS)
		die("--reps must be 1 .. %d", MAX_REPS);
	if (B.value_size > FLEXDB_MAX_VALUE || B.value_size + 8 > VALPOOL / 2)
		die("--value-size too large");
	/* LMDB's map must hold the data (B-tree pages: about 2x the pairs). */
	if (B.eng_on[E_LMDB] &&
	    (double)B.num * (KEY_SIZE + B.value_size + 16) * 2 > (double)KV_LMDB_MAPSIZE)
		die("--num too large for LMDB's %" PRIu64 " GiB map", KV_LMDB_MAPSIZE >> 30);
}

/* Live keys after deleterandom with nt threads: replays their streams. */
static uint64_t live_after_deletes(int rep, int nt)
{
	uint8_t *gone = calloc(B.num / 8 + 1, 1);
	uint64_t dead = 0;

	if (!gone)
		die("out of memory");
	for (int t = 0; t < nt; t++) {
		uint64_t rng = stream_seed(rep, W_DELETERANDOM, t);
		uint64_t begin = B.num * (uint64_t)t / (uint64_t)nt;
		uint64_t count = B.num * (uint64_t)(t + 1) / (uint64_t)nt - begin;
		for (uint64_t i = 0; i < count; i++) {
			uint64_t k = below(&rng, B.num);
			if (!(gone[k / 8] & (1u << (k % 8)))) {
				gone[k / 8] |= (uint8_t)(1u << (k % 8));
				dead++;
			}
		}
	}
	free(gone);
	return B.num - dead;
}

static void make_perm(int rep)
{
	uint64_t rng = stream_seed(rep, W_FILLRANDOM, 999);

	for (uint64_t i = 0; i < B.num; i++)
		B.perm[i] = (uint32_t)i;
	for (uint64_t i = B.num - 1; i > 0; i--) {
		uint64_t j = below(&rng, i + 1);
		uint32_t x = B.perm[i];
		B.perm[i] = B.perm[j];
		B.perm[j] = x;
	}
}

/* Removes the group of a child that was running when the parent exits
 * early (die, a signal). */
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
				printf("flexdb_bench: --cgroup-mb run skipped: %s\n", why);
				return 0;
			}
			die("--cgroup-mb: %s", why);
		}
		atexit(cg_cleanup);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	B.valpool = valpool_new(B.seed ^ 0xabcdef);
	B.perm = xmalloc(B.num * sizeof(*B.perm));
	if (mkdir(B.base, 0755) && errno != EEXIST)
		die("mkdir %s: %s", B.base, strerror(errno));
	xsnprintf(B.work, sizeof(B.work), "%s/flexdb_bench.%d", B.base, (int)getpid());
	if (mkdir(B.work, 0755))
		die("mkdir %s: %s", B.work, strerror(errno));
	B.proc_io_ok = probe_proc_io(B.work, B.valpool);
	B.clock_ns = measure_clock();
	rocks_version();
	kv_versions(B.level_version, sizeof(B.level_version), B.lmdb_version,
		    sizeof(B.lmdb_version));
	print_header();

	uint64_t t_start = now_ns();
	for (int ti = 0; ti < B.ntc && !interrupted; ti++) {
		for (int rep = 0; rep < B.reps && !interrupted; rep++) {
			int order[NENG], no = 0;
			for (int i = 0; i < NENG; i++) {
				int en = (i + rep + ti) % NENG;
				if (B.eng_on[en])
					order[no++] = en;
			}
			make_perm(rep);
			fprintf(stderr, "threads %d, rep %d of %d:", B.tcs[ti], rep + 1, B.reps);
			for (int i = 0; i < no; i++)
				fprintf(stderr, " %s", engines[order[i]].name);
			fprintf(stderr, "  [%.0f s]\n", secs_since(t_start));
			for (int i = 0; i < no && !interrupted; i++) {
				struct run *r = &R[ti][rep][order[i]];
				run_engine(ti, rep, order[i]);
				if (r->status != RUN_OK) {
					char buf[64], where[96];
					where_died(r, where, sizeof(where));
					fprintf(stderr, "    %-12s %-8s %s during %s\n", "ENDED",
						engines[order[i]].name, run_status(r, buf, sizeof(buf)),
						where);
					if (r->status == RUN_KILLED || r->status == RUN_FAILED)
						n_failed++;
				}
			}
		}
	}
	double total = secs_since(t_start);

	for (int ti = 0; ti < B.ntc; ti++) {
		print_table(ti);
		print_details(ti);
		print_memory(ti);
		print_ratios(ti);
		printf("\n");
	}
	csv_write();
	printf("total:    %.1f s%s%s\n", total, interrupted ? " (INTERRUPTED)" : "",
	       n_failed ? "  (SOME RUNS FAILED: see above)" : "");
	rmtree(B.work);
	free(B.valpool);
	free(B.perm);
	return interrupted ? 130 : n_failed ? 1 : 0;
}
