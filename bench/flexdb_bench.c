/*
 * flexdb_bench.c - FlexDB against RocksDB in one process run: db_bench's
 * workloads (the FlexDB paper's section 6.3 comparison, scaled to this
 * machine).
 *
 * Workloads, in the order they run (db_bench names):
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
 *   readseq       an iterator over the whole store, one op per pair
 *   seekrandom    seek to a uniformly random key, then 50 nexts (51 pairs
 *                 read per op)
 *   deleterandom  N deletes of uniformly random keys (with replacement)
 *
 * Keys are 16 bytes (the key number in zero-padded decimal, so key order
 * is numeric order); values are value_size bytes: the key number in the
 * first 8 bytes, the rest incompressible random bytes.  Reads check every
 * value's length and key number.
 *
 * Fairness, one knob at a time:
 *   - memory: FlexDB cache_size + 2 x memtable_size == RocksDB LRU block
 *     cache + write_buffer_size x max_write_buffer_number (64 MiB + 2 x 32
 *     MiB on both sides by default).  Not in either budget: FlexDB's
 *     sparse index, RocksDB's index and filter blocks (the default
 *     cache_index_and_filter_blocks=false keeps them outside the cache).
 *   - RocksDB: compression off (rocksdb_no_compression), a 10-bit full
 *     bloom filter (its tuning guide's advice; --bloom-bits 0 turns it
 *     off), everything else at its defaults, background jobs included
 *     (printed in the header: max_background_jobs=2, one subcompaction).
 *     FlexDB: its defaults (one committer thread, 4 MiB segments, GC at
 *     1.5x).
 *   - durability: neither syncs per write; both hand every write's WAL
 *     record to the OS before the call returns (RocksDB's default
 *     WriteOptions; FlexDB's default sync_writes = 0).
 *   - the same keys, values, operation order, thread count and seeds for
 *     both engines within a repetition.
 *   - settling: after every write workload both stores are brought to a
 *     comparable quiet state before anything else runs: RocksDB flushes
 *     its memtables (rocksdb_flush, waiting), waits until no flush or
 *     compaction is pending or running, and is closed; FlexDB is closed
 *     (which commits both memtables into the FlexSpace and syncs).  Both
 *     are then reopened, so reads start with empty memtables and cold
 *     user-space caches on both sides (the OS page cache stays warm).
 *     With --rocksdb-compact, RocksDB also runs rocksdb_compact_range over
 *     the whole key space before closing (its best case for reads).  The
 *     settle time is reported and a fill's throughput is also shown with
 *     it included (work the timed loop left behind).
 *
 * Measurement: every operation is timed with clock_gettime(MONOTONIC)
 * into a log-linear histogram (32 sub-buckets per power of two, ~3%
 * resolution; percentiles are bucket midpoints).  ops/s is operations over
 * the wall time from the first thread's start to the last thread's end;
 * us/op is the mean per-op latency; MB/s counts key+value bytes (read or
 * written; key bytes for deletes).  The two engines run one after the
 * other within each workload, the order rotating between repetitions;
 * medians over repetitions are reported.
 *
 * Write amplification: bytes this process dirtied for the block layer
 * (write_bytes in /proc/self/io; every thread, background threads
 * included) from the start of a write workload to the end of its settle,
 * over the user bytes written.  "net" subtracts cancelled_write_bytes (dirty
 * pages of files deleted or truncated before writeback, e.g. WALs removed
 * after their flush): what would reach the disk without a sync.  Only the
 * measured engine is active in that window (the other is settled and
 * idle).  Space amplification: allocated bytes of the store directory
 * (du) over live key+value bytes, after the settle.
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
#include <unistd.h>

#include <rocksdb/c.h>

#include "flexdb.h"

#define BENCH_NAME "flexdb_bench"
#include "bench_util.h"
#include "kv_engines.h"

/* ---- configuration ---------------------------------------------------------- */

#define KEY_SIZE 16
/* Nexts after each seek in seekrandom (db_bench --seek_nexts=50, the
 * paper's scan length). */
#define SEEK_NEXTS 50
#define MAX_REPS 9
#define MAX_THREADS 64

enum eng_kind { E_FLEX, E_ROCKS, NENG };
enum wl {
	W_FILLRANDOM,
	W_FILLSEQ,
	W_OVERWRITE,
	W_READRANDOM,
	W_READSEQ,
	W_SEEKRANDOM,
	W_DELETERANDOM,
	NWL
};

static const char *const eng_name[NENG] = {"flexdb", "rocksdb"};
static const char *const wl_name[NWL] = {"fillrandom", "fillseq",    "overwrite",   "readrandom",
					 "readseq",    "seekrandom", "deleterandom"};

static int wl_writes(enum wl w)
{
	return w == W_FILLRANDOM || w == W_FILLSEQ || w == W_OVERWRITE || w == W_DELETERANDOM;
}

static struct {
	uint64_t num, reads, seeks;
	uint32_t value_size;
	int threads, reps, quick;
	uint64_t seed;
	int eng_on[NENG];
	int wl_on[NWL];
	char base[PATH_MAX]; /* --dir */
	char work[PATH_MAX]; /* our directory inside it */
	const char *csv_path;
	FILE *csv;
	char *valpool;
	uint32_t *perm;
	int proc_io_ok;
	double clock_ns;
	char rocks_version[32];
} B;

/* ---- small helpers ------------------------------------------------------------ */

/* Uniform in [0, n) by multiply-shift (no modulo). */
static uint64_t below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix64(s) * n) >> 64);
}

/* The seed of one thread's operation stream: the same for both engines. */
static uint64_t stream_seed(int rep, enum wl w, int t)
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

/* ---- engines ------------------------------------------------------------------------- */

/* A store of either engine: opened, settled and closed by kv_engines.h's
 * adapters (the settings ycsb_bench uses too); s.h is the struct flexdb or
 * the struct rocks. */
struct eng {
	enum eng_kind kind;
	struct store s;
};

static struct flexdb *fdb(const struct eng *e)
{
	return e->s.h;
}

static struct rocks *rdb(const struct eng *e)
{
	return e->s.h;
}

static void eng_open(struct eng *e)
{
	e->s.eng = e->kind == E_FLEX ? &kv_flexdb : &kv_rocksdb;
	e->s.eng->open(&e->s);
}

static void eng_close(struct eng *e)
{
	e->s.eng->close(&e->s);
}

/* "files per level" of a RocksDB store, e.g. "L0 2 L1 4 L2 31". */
static void rocks_levels(struct eng *e, char *buf, size_t cap)
{
	size_t l = 0;

	buf[0] = 0;
	for (int i = 0; i < 7; i++) {
		char name[64];

		snprintf(name, sizeof(name), "rocksdb.num-files-at-level%d", i);
		char *v = rocksdb_property_value(rdb(e)->db, name);
		if (!v)
			continue;
		int n = atoi(v);
		rocksdb_free(v);
		if (n && l < cap)
			l += (size_t)snprintf(buf + l, cap - l, "%sL%d %d", l ? " " : "", i, n);
	}
}

/* Per-op calls.  Return 0 on success, 1 for "not found" (get), -1 on an
 * error (message in err). */
static int eng_put(struct eng *e, const char *k, const char *v, size_t vl, char *err, size_t ecap)
{
	if (e->kind == E_FLEX) {
		int rc = flexdb_put(fdb(e), k, KEY_SIZE, v, vl);
		if (rc && !err[0])
			snprintf(err, ecap, "flexdb_put: %s", flex_strerror(rc));
		return rc ? -1 : 0;
	}
	char *re = NULL;
	rocksdb_put(rdb(e)->db, rdb(e)->wo, k, KEY_SIZE, v, vl, &re);
	if (re) {
		if (!err[0])
			snprintf(err, ecap, "rocksdb_put: %s", re);
		rocksdb_free(re);
		return -1;
	}
	return 0;
}

static int eng_del(struct eng *e, const char *k, char *err, size_t ecap)
{
	if (e->kind == E_FLEX) {
		int rc = flexdb_delete(fdb(e), k, KEY_SIZE);
		if (rc && !err[0])
			snprintf(err, ecap, "flexdb_delete: %s", flex_strerror(rc));
		return rc ? -1 : 0;
	}
	char *re = NULL;
	rocksdb_delete(rdb(e)->db, rdb(e)->wo, k, KEY_SIZE, &re);
	if (re) {
		if (!err[0])
			snprintf(err, ecap, "rocksdb_delete: %s", re);
		rocksdb_free(re);
		return -1;
	}
	return 0;
}

/* Copies the value (up to cap bytes) into buf, its length into *vl. */
static int eng_get(struct eng *e, const char *k, char *buf, size_t cap, size_t *vl, char *err,
		   size_t ecap)
{
	if (e->kind == E_FLEX) {
		int rc = flexdb_get(fdb(e), k, KEY_SIZE, buf, cap, vl);
		if (rc < 0) {
			if (!err[0])
				snprintf(err, ecap, "flexdb_get: %s", flex_strerror(rc));
			return -1;
		}
		return rc == 0 ? 0 : 1;
	}
	char *re = NULL;
	rocksdb_pinnableslice_t *ps = rocksdb_get_pinned(rdb(e)->db, rdb(e)->ro, k, KEY_SIZE, &re);
	if (re) {
		if (!err[0])
			snprintf(err, ecap, "rocksdb_get_pinned: %s", re);
		rocksdb_free(re);
		return -1;
	}
	if (!ps)
		return 1;
	const char *v = rocksdb_pinnableslice_value(ps, vl);
	memcpy(buf, v, *vl < cap ? *vl : cap);
	rocksdb_pinnableslice_destroy(ps);
	return 0;
}

struct it {
	struct eng *e;
	struct flexdb_iter *f;
	rocksdb_iterator_t *r;
};

static void it_open(struct it *it, struct eng *e)
{
	it->e = e;
	it->f = NULL;
	it->r = NULL;
	if (e->kind == E_FLEX) {
		int rc = flexdb_iter_open(fdb(e), &it->f);
		if (rc)
			die("flexdb_iter_open: %s", flex_strerror(rc));
	} else {
		it->r = rocksdb_create_iterator(rdb(e)->db, rdb(e)->ro);
	}
}

/* klen 0: the first key. */
static int it_seek(struct it *it, const char *k, size_t klen)
{
	if (it->f)
		return flexdb_iter_seek(it->f, k, klen);
	if (klen)
		rocksdb_iter_seek(it->r, k, klen);
	else
		rocksdb_iter_seek_to_first(it->r);
	return 0;
}

static int it_valid(const struct it *it)
{
	return it->f ? flexdb_iter_valid(it->f) : rocksdb_iter_valid(it->r);
}

static int it_next(struct it *it)
{
	if (it->f)
		return flexdb_iter_next(it->f);
	rocksdb_iter_next(it->r);
	return 0;
}

static const char *it_key(const struct it *it, size_t *len)
{
	return it->f ? flexdb_iter_key(it->f, len) : rocksdb_iter_key(it->r, len);
}

static const char *it_value(const struct it *it, size_t *len)
{
	return it->f ? flexdb_iter_value(it->f, len) : rocksdb_iter_value(it->r, len);
}

static int it_close(struct it *it, char *err, size_t ecap)
{
	int bad = 0;

	if (it->f) {
		flexdb_iter_close(it->f);
	} else if (it->r) {
		char *re = NULL;
		rocksdb_iter_get_error(it->r, &re);
		if (re) {
			if (!err[0])
				snprintf(err, ecap, "rocksdb iterator: %s", re);
			rocksdb_free(re);
			bad = 1;
		}
		rocksdb_iter_destroy(it->r);
	}
	return bad;
}

/* ---- one workload on one engine --------------------------------------------------- */

struct job {
	struct eng *e;
	enum wl w;
	int rep, t;
	uint64_t begin, count; /* op range of this thread */
	pthread_barrier_t *bar;
	struct hist h;
	uint64_t t_start, t_end;
	uint64_t bytes, found, bad, errors, sink;
	char err[200];
};

static void *worker(void *arg)
{
	struct job *j = arg;
	struct eng *e = j->e;
	char key[KEY_SIZE];
	char *val = malloc(B.value_size + 8);
	uint64_t rng = stream_seed(j->rep, j->w, j->t);
	struct it it;
	const size_t ecap = sizeof(j->err);

	if (!val)
		die("out of memory");
	if (j->w == W_READSEQ || j->w == W_SEEKRANDOM)
		it_open(&it, e);
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
			int rc = eng_put(e, key, val, B.value_size, j->err, ecap);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->bytes += KEY_SIZE + B.value_size;
		}
		break;
	case W_DELETERANDOM:
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			make_key(key, below(&rng, B.num));
			uint64_t t0 = now_ns();
			int rc = eng_del(e, key, j->err, ecap);
			h_add(&j->h, now_ns() - t0);
			j->errors += rc != 0;
			j->bytes += KEY_SIZE;
		}
		break;
	case W_READRANDOM:
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			uint64_t idx = below(&rng, B.num);
			size_t vl = 0;
			make_key(key, idx);
			uint64_t t0 = now_ns();
			int rc = eng_get(e, key, val, B.value_size + 8, &vl, j->err, ecap);
			h_add(&j->h, now_ns() - t0);
			if (rc < 0) {
				j->errors++;
			} else if (rc == 0) {
				j->found++;
				j->bytes += KEY_SIZE + vl;
				if (!value_ok(val, vl, B.value_size, idx))
					j->bad++;
			}
		}
		break;
	case W_READSEQ:
		/* Op 0 is the seek to the thread's first key, op i > 0 the
		 * i-th next; each op reads the pair it lands on. */
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			int rc;
			uint64_t t0 = now_ns();
			if (i == 0) {
				make_key(key, j->begin);
				rc = it_seek(&it, key, j->begin ? KEY_SIZE : 0);
			} else {
				rc = it_next(&it);
			}
			h_add(&j->h, now_ns() - t0);
			if (rc) {
				j->errors++;
				break;
			}
			if (!it_valid(&it)) {
				j->bad += j->count - i;
				break;
			}
			size_t kl, vl;
			const char *k = it_key(&it, &kl);
			const char *v = it_value(&it, &vl);
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
		for (uint64_t i = 0; i < j->count && !interrupted; i++) {
			uint64_t idx = below(&rng, B.num);
			make_key(key, idx);
			uint64_t t0 = now_ns();
			int rc = it_seek(&it, key, KEY_SIZE);
			uint64_t got = 0;
			for (int n = 0; !rc && it_valid(&it); n++) {
				size_t kl, vl;
				const char *k = it_key(&it, &kl);
				const char *v = it_value(&it, &vl);
				j->sink += (uint8_t)k[kl - 1] + (vl ? (uint8_t)v[vl - 1] : 0);
				j->bytes += kl + vl;
				got++;
				if (n == SEEK_NEXTS)
					break;
				rc = it_next(&it);
			}
			h_add(&j->h, now_ns() - t0);
			if (rc)
				j->errors++;
			/* All keys exist: every seek lands on its key and reads
			 * 51 pairs unless it runs into the end. */
			uint64_t want = B.num - idx < SEEK_NEXTS + 1 ? B.num - idx : SEEK_NEXTS + 1;
			if (got == want)
				j->found++;
			else
				j->bad++;
		}
		break;
	default:
		break;
	}
	j->t_end = now_ns();
	if (j->w == W_READSEQ || j->w == W_SEEKRANDOM)
		j->errors += (uint64_t)it_close(&it, j->err, ecap);
	free(val);
	return NULL;
}

struct meas {
	int have;
	LAT_SUMMARY_MEMBER;
	double mbps;
	double settle_s, reopen_s, incl_opsps, wa_gross, wa_net, wr_per_op, du, space_amp;
	uint64_t errors, bad, found;
	char note[320];
};

static struct meas M[NWL][NENG][MAX_REPS];

/* Live keys per engine store after each write workload (same for both). */
static uint64_t live_keys;

static void settle(struct eng *e, double *settle_s, double *reopen_s)
{
	uint64_t t0 = now_ns();

	e->s.eng->quiesce(&e->s);
	eng_close(e);
	uint64_t t1 = now_ns();
	eng_open(e);
	*settle_s = (double)(t1 - t0) / 1e9;
	*reopen_s = (double)(now_ns() - t1) / 1e9;
}

static void run_workload(struct eng *e, enum wl w, int rep, uint64_t ops, struct meas *m)
{
	int nt = B.threads;
	struct job *jobs = calloc((size_t)nt, sizeof(*jobs));
	pthread_t th[MAX_THREADS];
	pthread_barrier_t bar;
	struct flexdb_stats fs0, fs1;
	struct pio io0 = proc_io();

	if (!jobs)
		die("out of memory");
	memset(m, 0, sizeof(*m));
	if (e->kind == E_FLEX)
		flexdb_stats(fdb(e), &fs0);
	pthread_barrier_init(&bar, NULL, (unsigned)nt);
	for (int t = 0; t < nt; t++) {
		struct job *j = &jobs[t];
		j->e = e;
		j->w = w;
		j->rep = rep;
		j->t = t;
		j->begin = ops * (uint64_t)t / (uint64_t)nt;
		j->count = ops * (uint64_t)(t + 1) / (uint64_t)nt - j->begin;
		j->bar = &bar;
		if (pthread_create(&th[t], NULL, worker, j))
			die("pthread_create failed");
	}
	struct hist *h = calloc(1, sizeof(*h));
	uint64_t ts = UINT64_MAX, te = 0, bytes = 0;
	char err[200] = "";
	if (!h)
		die("out of memory");
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
		if (!err[0] && j->err[0])
			snprintf(err, sizeof(err), "%s", j->err);
	}
	pthread_barrier_destroy(&bar);
	m->have = 1;
	h_summary(h, ts, te, &m->lat);
	m->mbps = (double)bytes / m->secs / 1e6;
	m->settle_s = m->reopen_s = m->incl_opsps = m->wa_gross = m->wa_net = NAN;
	m->wr_per_op = m->du = m->space_amp = NAN;

	size_t nl = 0;
	if (e->kind == E_FLEX) {
		flexdb_stats(fdb(e), &fs1);
		if (wl_writes(w))
			nl += (size_t)snprintf(
			    m->note + nl, sizeof(m->note) - nl,
			    "stalls %" PRIu64 " commits %" PRIu64
			    " (in loop: data %.0f log %.0f tree %.0f gc %.0f MB)",
			    fs1.writer_stalls - fs0.writer_stalls,
			    fs1.committer_runs - fs0.committer_runs,
			    (double)(fs1.space.data_bytes_written - fs0.space.data_bytes_written) /
				1e6,
			    (double)(fs1.space.log_bytes_written - fs0.space.log_bytes_written) /
				1e6,
			    (double)(fs1.space.tree_bytes_written - fs0.space.tree_bytes_written) /
				1e6,
			    (double)(fs1.space.gc_bytes_moved - fs0.space.gc_bytes_moved) / 1e6);
		else {
			uint64_t hi = fs1.cache_hits - fs0.cache_hits;
			uint64_t mi = fs1.cache_misses - fs0.cache_misses;
			uint64_t thin = fs1.cache_thin_hits - fs0.cache_thin_hits;
			uint64_t all = hi + mi + thin;
			nl += (size_t)snprintf(
			    m->note + nl, sizeof(m->note) - nl,
			    "cache hit %.0f%% thin %.0f%% (%" PRIu64 " loads)  extents/interval %.1f",
			    all ? 100.0 * (double)hi / (double)all : 0.0,
			    all ? 100.0 * (double)thin / (double)all : 0.0, mi,
			    fs1.intervals ? (double)fs1.space.extents / (double)fs1.intervals : 0.0);
		/* What the committer wrote in the background during a read workload. */
		if (!wl_writes(w))
			nl += (size_t)snprintf(
			    m->note + nl, sizeof(m->note) - nl,
			    "  background: data %.0f MB gc %.0f MB tree commits %" PRIu64,
			    (double)(fs1.space.data_bytes_written - fs0.space.data_bytes_written) /
				1e6,
			    (double)(fs1.space.gc_bytes_moved - fs0.space.gc_bytes_moved) / 1e6,
			    fs1.space.tree_commits - fs0.space.tree_commits);
		}
	}
	if (wl_writes(w)) {
		settle(e, &m->settle_s, &m->reopen_s);
		struct pio io1 = proc_io();
		m->incl_opsps = m->ops / (m->secs + m->settle_s);
		double user = (double)bytes;
		if (B.proc_io_ok) {
			double g = (double)(io1.wb - io0.wb);
			double net = g - (double)(io1.cwb - io0.cwb);
			m->wr_per_op = g / m->ops;
			if (w != W_DELETERANDOM) {
				m->wa_gross = g / user;
				m->wa_net = net / user;
			}
		}
		m->du = (double)du(e->s.path);
		if (live_keys)
			m->space_amp = m->du / ((double)live_keys * (KEY_SIZE + B.value_size));
		if (e->kind == E_ROCKS) {
			char lv[96];
			rocks_levels(e, lv, sizeof(lv));
			nl += (size_t)snprintf(m->note + nl, sizeof(m->note) - nl, "%s%s",
					       nl ? "; " : "", lv);
		}
	} else if (e->kind == E_ROCKS && w == W_READRANDOM) {
		char lv[96];
		rocks_levels(e, lv, sizeof(lv));
		nl += (size_t)snprintf(m->note + nl, sizeof(m->note) - nl, "%s%s", nl ? "; " : "",
				       lv);
	}
	if (err[0])
		snprintf(m->note + nl, sizeof(m->note) - nl, "%sERROR %s", nl ? "; " : "", err);
	free(h);
	free(jobs);
}

/* ---- reporting ------------------------------------------------------------------------- */

static double med_field(enum wl w, enum eng_kind en, size_t off)
{
	double v[MAX_REPS];
	int n = 0;

	for (int r = 0; r < B.reps; r++)
		if (M[w][en][r].have)
			v[n++] = *(const double *)((const char *)&M[w][en][r] + off);
	return n ? median(v, n) : NAN;
}

#define MED(w, en, field) med_field(w, en, offsetof(struct meas, field))

static void print_line(enum wl w, enum eng_kind en)
{
	char wa[16], wan[16], sa[16], st[16], reps[96] = "", extra[96] = "";
	uint64_t errs = 0, bad = 0;
	const char *note = "";

	int any = 0;
	for (int r = 0; r < B.reps; r++)
		any |= M[w][en][r].have;
	if (!any)
		return;
	for (int r = 0; r < B.reps; r++) {
		const struct meas *m = &M[w][en][r];
		size_t l = strlen(reps);
		if (!m->have)
			continue;
		snprintf(reps + l, sizeof(reps) - l, "%s%.0f", l ? " " : "", m->opsps);
		errs += m->errors;
		bad += m->bad;
		if (m->note[0])
			note = m->note; /* the last repetition's */
	}
	fmt_num(wa, sizeof(wa), 2, "", MED(w, en, wa_gross));
	fmt_num(wan, sizeof(wan), 2, "", MED(w, en, wa_net));
	fmt_num(sa, sizeof(sa), 2, "", MED(w, en, space_amp));
	fmt_num(st, sizeof(st), 2, "", MED(w, en, settle_s));
	if (w == W_DELETERANDOM && !isnan(MED(w, en, wr_per_op)))
		snprintf(extra, sizeof(extra), "  written %.0f B/op", MED(w, en, wr_per_op));
	if (wl_writes(w) && !isnan(MED(w, en, incl_opsps)))
		snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
			 "  incl-settle %.0f ops/s", MED(w, en, incl_opsps));
	printf("%-12s %-7s %10.0f ops/s %8.2f us/op  p50 %8.2f p99 %8.2f p99.9 %9.2f us %8.1f MB/s"
	       "  wa %-5s net %-5s space %-5s settle %-6s s%s  reps [%s]%s%s%s\n",
	       wl_name[w], eng_name[en], MED(w, en, opsps), MED(w, en, usop), MED(w, en, p50),
	       MED(w, en, p99), MED(w, en, p999), MED(w, en, mbps), wa, wan, sa, st, extra, reps,
	       note[0] ? "  " : "", note, errs || bad ? "  CHECK FAILED" : "");
	if (errs || bad)
		printf("             %" PRIu64 " errors, %" PRIu64 " wrong or missing results\n",
		       errs, bad);
}

static void csv_row(enum wl w, enum eng_kind en, const char *rep, const struct meas *m)
{
	if (!B.csv)
		return;
	fprintf(B.csv,
		"%s,%s,%s,%" PRIu64
		",%d,%.0f,%.4f,%.1f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.4f,"
		"%.4f,%.1f,%.0f,%.4f,%" PRIu64 ",%" PRIu64 ",\"%s\"\n",
		wl_name[w], eng_name[en], rep, B.num, B.threads, m->ops, m->secs, m->opsps, m->usop,
		m->p50, m->p99, m->p999, m->maxus, m->mbps, m->settle_s, m->reopen_s, m->incl_opsps,
		m->wa_gross, m->wa_net, m->wr_per_op, m->du, m->space_amp, m->errors, m->bad,
		m->note);
}

static void print_target(const char *label, double v, double target)
{
	printf("  %-40s %7.2fx", label, v);
	if (target > 0) {
		if (isnan(v))
			printf("   target >= %.1fx  n/a\n", target);
		else
			printf("   target >= %.1fx  %s\n", target, v >= target ? "PASS" : "MISS");
	} else {
		printf("\n");
	}
}

static void print_ratios(void)
{
	static const double target[NWL] = {
	    [W_FILLRANDOM] = 1.5, [W_READRANDOM] = 2.0, [W_SEEKRANDOM] = 2.0};
	char label[96];

	printf("\nFlexDB / RocksDB, medians (ops/s ratio: >1 means FlexDB is faster; p99 ratio is "
	       "RocksDB p99 / FlexDB p99: >1 means FlexDB's tail is shorter)\n");
	for (int w = 0; w < NWL; w++) {
		if (!B.wl_on[w])
			continue;
		double f = MED(w, E_FLEX, opsps), r = MED(w, E_ROCKS, opsps);
		snprintf(label, sizeof(label), "%s%s ops/s", wl_name[w],
			 w == W_SEEKRANDOM ? " (seek+next50)" : "");
		print_target(label, f / r, target[w]);
		if (wl_writes(w)) {
			snprintf(label, sizeof(label), "%s ops/s incl. settle", wl_name[w]);
			print_target(label,
				     MED(w, E_FLEX, incl_opsps) / MED(w, E_ROCKS, incl_opsps), 0);
		}
		snprintf(label, sizeof(label), "%s p99 (rocksdb/flexdb)", wl_name[w]);
		print_target(label, MED(w, E_ROCKS, p99) / MED(w, E_FLEX, p99), 0);
	}
}

/* ---- the run ---------------------------------------------------------------------------- */

static double measure_clock(void)
{
	uint64_t t0 = now_ns(), x = 0;

	for (int i = 0; i < 1000000; i++)
		x += now_ns();
	return (double)(now_ns() - t0 - (x & 1)) / 1e6;
}

static void print_header(void)
{
	char cpu[256], date[64];
	rocksdb_options_t *o = rocksdb_options_create();

	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	printf(
	    "flexdb_bench: FlexDB vs RocksDB, db_bench workloads (FlexSpace paper, section 6.3)\n");
	print_build_mode();
	printf("library:  flex %s; RocksDB %s (system librocksdb, C API)\n",
	       flex_version(NULL, NULL, NULL), B.rocks_version);
	printf("cpu:      %s, %ld online\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("date:     %s\n", date);
	printf("config:   %" PRIu64 " pairs, %d-byte keys, %u-byte values, %d thread%s, %d rep%s "
	       "(median), seed %" PRIu64 "%s\n",
	       B.num, KEY_SIZE, B.value_size, B.threads, B.threads == 1 ? "" : "s", B.reps,
	       B.reps == 1 ? "" : "s", B.seed, B.quick ? ", --quick" : "");
	printf("          readrandom %" PRIu64 " gets, seekrandom %" PRIu64
	       " seeks + %d nexts, readseq whole store, overwrite/deleterandom %" PRIu64 " ops\n",
	       B.reads, B.seeks, SEEK_NEXTS, B.num);
	printf("memory:   flexdb cache %" PRIu64 " MiB + 2 x %" PRIu64
	       " MiB memtables; rocksdb LRU block cache %" PRIu64 " MiB + 2 x %" PRIu64
	       " MiB write buffers (index/filter blocks outside the cache; FlexDB's sparse index "
	       "likewise)\n",
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20,
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20);
	printf("rocksdb:  no compression, %s, max_background_jobs %d (flushes %d, compactions %d: "
	       "-1 = derived), max_subcompactions %u; other options default\n",
	       engine_opts.bloom_bits > 0 ? "10-bit full bloom filter" : "no bloom filter",
	       rocksdb_options_get_max_background_jobs(o),
	       rocksdb_options_get_max_background_flushes(o),
	       rocksdb_options_get_max_background_compactions(o),
	       rocksdb_options_get_max_subcompactions(o));
	printf("flexdb:   defaults (one committer thread, 4 MiB segments, GC at 1.5x)\n");
	printf("writes:   no sync per write on either side; every write's WAL record is handed to "
	       "the OS before it returns (RocksDB default WriteOptions; FlexDB sync_writes=0)\n");
	printf("settle:   after each write workload: rocksdb_flush (wait) + wait until no "
	       "flush/compaction pending or running%s + close; FlexDB close (commits the "
	       "memtables, syncs); then both reopened (cold user caches, warm page cache)\n",
	       engine_opts.rocks_compact ? " + rocksdb_compact_range over all keys" : "");
	printf("timing:   per-op clock_gettime (%.0f ns per call here, 2 per op); us/op = mean "
	       "latency; MB/s counts key+value bytes; engine order alternates per repetition\n",
	       B.clock_ns);
	printf("amp:      wa = /proc/self/io write_bytes during workload+settle / user bytes "
	       "(net: minus cancelled_write_bytes)%s; space = du of store dir / live key+value "
	       "bytes\n",
	       B.proc_io_ok ? "" : " UNAVAILABLE here");
	printf("dir:      %s\n\n", B.work);
	rocksdb_options_destroy(o);
	fflush(stdout);
}

static void usage(void)
{
	printf("usage: flexdb_bench [options]\n"
	       "  --num N            pairs (default 2000000; --quick 200000)\n"
	       "  --value-size N     value bytes (default 100)\n"
	       "  --threads N        client threads for every workload (default 1)\n"
	       "  --reps N           repetitions, medians reported (default 3; --quick 1)\n"
	       "  --reads N          readrandom gets (default num)\n"
	       "  --seeks N          seekrandom seeks (default num/4)\n"
	       "  --benchmarks LIST  comma-separated subset of fillrandom,fillseq,overwrite,\n"
	       "                     readrandom,readseq,seekrandom,deleterandom (default all);\n"
	       "                     a store is pre-filled (untimed fillrandom) when needed\n"
	       "  --engine E         flexdb, rocksdb or both (default both)\n"
	       "  --cache-mb N       FlexDB cache = RocksDB block cache (default 64)\n"
	       "  --memtable-mb N    FlexDB memtable = RocksDB write buffer, x2 (default 32)\n"
	       "  --bloom-bits N     RocksDB bloom filter bits per key, 0 = none (default 10)\n"
	       "  --rocksdb-compact  compact RocksDB fully (compact_range) when settling\n"
	       "  --seed N           random seed (default 42)\n"
	       "  --dir DIR          where to make the stores (default /tmp)\n"
	       "  --csv FILE         also write per-repetition and median rows as CSV\n"
	       "  --quick            200k pairs, one repetition\n");
}

static void parse_args(int argc, char **argv)
{
	uint64_t num = 0, reads = 0, seeks = 0;
	int reps = 0, wl_given = 0;

	B.value_size = 100;
	B.threads = 1;
	B.seed = 42;
	engine_opts_default();
	B.eng_on[E_FLEX] = B.eng_on[E_ROCKS] = 1;
	snprintf(B.base, sizeof(B.base), "/tmp");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--quick")) {
			B.quick = 1;
		} else if (!strcmp(a, "--rocksdb-compact")) {
			engine_opts.rocks_compact = 1;
		} else if (!strcmp(a, "--num")) {
			num = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--value-size")) {
			B.value_size = (uint32_t)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--threads")) {
			B.threads = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--reps")) {
			reps = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--reads")) {
			reads = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--seeks")) {
			seeks = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--bloom-bits")) {
			engine_opts.bloom_bits = (int)opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--seed")) {
			B.seed = opt_u64(argc, argv, &i);
		} else if (!strcmp(a, "--dir")) {
			snprintf(B.base, sizeof(B.base), "%s", opt_value(argc, argv, &i));
		} else if (!strcmp(a, "--csv")) {
			B.csv_path = opt_value(argc, argv, &i);
		} else if (!strcmp(a, "--engine")) {
			const char *v = opt_value(argc, argv, &i);
			B.eng_on[E_FLEX] = !strcmp(v, "flexdb") || !strcmp(v, "both");
			B.eng_on[E_ROCKS] = !strcmp(v, "rocksdb") || !strcmp(v, "both");
			if (!B.eng_on[E_FLEX] && !B.eng_on[E_ROCKS])
				die("--engine: flexdb, rocksdb or both");
		} else if (!strcmp(a, "--benchmarks")) {
			mark_names(opt_value(argc, argv, &i), wl_name, NWL, B.wl_on, "benchmark");
			wl_given = 1;
		} else if (!engine_opts_arg(argc, argv, &i)) {
			other_option(usage, a);
		}
	}
	if (!wl_given)
		for (int w = 0; w < NWL; w++)
			B.wl_on[w] = 1;
	B.num = num ? num : B.quick ? 200000 : 2000000;
	B.reps = reps ? reps : B.quick ? 1 : 3;
	B.reads = reads ? reads : B.num;
	B.seeks = seeks ? seeks : B.num / 4;
	if (B.num < 100 || B.num > UINT32_MAX)
		die("--num must be 100 .. 2^32-1");
	if (B.reps < 1 || B.reps > MAX_REPS)
		die("--reps must be 1 .. %d", MAX_REPS);
	if (B.threads < 1 || B.threads > MAX_THREADS)
		die("--threads must be 1 .. %d", MAX_THREADS);
	if (B.value_size > FLEXDB_MAX_VALUE || B.value_size + 8 > VALPOOL / 2)
		die("--value-size too large");
}

/* Marks deleted keys by replaying the deleterandom streams. */
static uint64_t live_after_deletes(int rep)
{
	uint8_t *gone = calloc(B.num / 8 + 1, 1);
	uint64_t dead = 0;

	if (!gone)
		die("out of memory");
	for (int t = 0; t < B.threads; t++) {
		uint64_t rng = stream_seed(rep, W_DELETERANDOM, t);
		uint64_t begin = B.num * (uint64_t)t / (uint64_t)B.threads;
		uint64_t count = B.num * (uint64_t)(t + 1) / (uint64_t)B.threads - begin;
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

static void progress(enum wl w, enum eng_kind en, int rep, const struct meas *m, double t)
{
	fprintf(stderr, "  [%6.1f s] rep %d %-12s %-7s %10.0f ops/s  p99 %8.2f us", t, rep + 1,
		wl_name[w], eng_name[en], m->opsps, m->p99);
	if (!isnan(m->settle_s))
		fprintf(stderr, "  settle %.2f s", m->settle_s);
	if (m->errors || m->bad)
		fprintf(stderr, "  %" PRIu64 " errors %" PRIu64 " bad", m->errors, m->bad);
	fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	B.valpool = valpool_new(B.seed ^ 0xabcdef);
	B.perm = malloc(B.num * sizeof(*B.perm));
	if (!B.perm)
		die("out of memory");
	if (mkdir(B.base, 0755) && errno != EEXIST)
		die("mkdir %s: %s", B.base, strerror(errno));
	xsnprintf(B.work, sizeof(B.work), "%s/flexdb_bench.%d", B.base, (int)getpid());
	if (mkdir(B.work, 0755))
		die("mkdir %s: %s", B.work, strerror(errno));
	if (B.csv_path) {
		B.csv = csv_open(
		    B.csv_path,
		    "workload,engine,rep,num,threads,ops,seconds,ops_per_s,us_per_op,p50_us,"
		    "p99_us,p999_us,max_us,mb_per_s,settle_s,reopen_s,incl_settle_ops_per_s,"
		    "wa_gross,wa_net,written_per_op,du_bytes,space_amp,errors,bad,note\n");
	}
	B.proc_io_ok = probe_proc_io(B.work, B.valpool);
	B.clock_ns = measure_clock();
	{
		struct eng probe = {.kind = E_ROCKS};
		xsnprintf(probe.s.path, sizeof(probe.s.path), "%s/rocksdb-probe", B.work);
		eng_open(&probe);
		eng_close(&probe);
		rk_version(probe.s.path, B.rocks_version, sizeof(B.rocks_version));
		rmtree(probe.s.path);
	}
	print_header();

	int need_store = 0;
	for (int w = W_OVERWRITE; w < NWL; w++)
		need_store |= B.wl_on[w];

	uint64_t t_start = now_ns();
	for (int rep = 0; rep < B.reps && !interrupted; rep++) {
		enum eng_kind order[NENG] = {rep % 2 ? E_ROCKS : E_FLEX,
					     rep % 2 ? E_FLEX : E_ROCKS};
		struct eng eng[NENG];

		make_perm(rep);
		fprintf(stderr, "rep %d of %d: order %s, %s\n", rep + 1, B.reps, eng_name[order[0]],
			eng_name[order[1]]);
		for (int en = 0; en < NENG; en++) {
			memset(&eng[en], 0, sizeof(eng[en]));
			eng[en].kind = (enum eng_kind)en;
			xsnprintf(eng[en].s.path, sizeof(eng[en].s.path), "%s/%s", B.work,
				  eng_name[en]);
			if (B.eng_on[en])
				eng_open(&eng[en]);
		}
		for (int w = 0; w < NWL && !interrupted; w++) {
			int run = B.wl_on[w];
			/* The store every later workload works on. */
			if (w == W_FILLRANDOM && !run && need_store) {
				live_keys = B.num;
				for (int i = 0; i < NENG; i++) {
					if (!B.eng_on[order[i]])
						continue;
					struct meas tmp;
					fprintf(stderr, "  pre-filling %s (untimed fillrandom)\n",
						eng_name[order[i]]);
					run_workload(&eng[order[i]], W_FILLRANDOM, rep, B.num,
						     &tmp);
				}
			}
			if (!run)
				continue;
			if (w == W_FILLRANDOM || w == W_FILLSEQ || w == W_OVERWRITE)
				live_keys = B.num;
			else if (w == W_DELETERANDOM)
				live_keys = live_after_deletes(rep);
			for (int i = 0; i < NENG && !interrupted; i++) {
				enum eng_kind en = order[i];
				if (!B.eng_on[en])
					continue;
				struct meas *m = &M[w][en][rep];
				uint64_t ops = w == W_READRANDOM   ? B.reads
					       : w == W_SEEKRANDOM ? B.seeks
								   : B.num;
				if (w == W_FILLSEQ) {
					struct eng s = {.kind = en};
					xsnprintf(s.s.path, sizeof(s.s.path), "%s/%s-seq", B.work,
						  eng_name[en]);
					eng_open(&s);
					run_workload(&s, w, rep, ops, m);
					eng_close(&s);
					rmtree(s.s.path);
				} else {
					run_workload(&eng[en], w, rep, ops, m);
				}
				progress((enum wl)w, en, rep, m,
					 (double)(now_ns() - t_start) / 1e9);
				char rs[16];
				snprintf(rs, sizeof(rs), "%d", rep + 1);
				csv_row((enum wl)w, en, rs, m);
			}
		}
		for (int en = 0; en < NENG; en++) {
			if (B.eng_on[en])
				eng_close(&eng[en]);
			rmtree(eng[en].s.path);
		}
	}
	double total = (double)(now_ns() - t_start) / 1e9;

	printf("%-12s %-7s %10s       %8s        %8s     %8s       %9s    %8s\n", "workload",
	       "engine", "ops/s", "us/op", "p50", "p99", "p99.9", "MB/s");
	for (int w = 0; w < NWL; w++) {
		if (!B.wl_on[w])
			continue;
		for (int en = 0; en < NENG; en++) {
			if (!B.eng_on[en])
				continue;
			print_line((enum wl)w, (enum eng_kind)en);
			if (B.csv) {
				struct meas med;
				memset(&med, 0, sizeof(med));
#define SETMED(f) med.f = MED(w, en, f)
				SETMED(ops);
				SETMED(secs);
				SETMED(opsps);
				SETMED(usop);
				SETMED(p50);
				SETMED(p99);
				SETMED(p999);
				SETMED(maxus);
				SETMED(mbps);
				SETMED(settle_s);
				SETMED(reopen_s);
				SETMED(incl_opsps);
				SETMED(wa_gross);
				SETMED(wa_net);
				SETMED(wr_per_op);
				SETMED(du);
				SETMED(space_amp);
#undef SETMED
				for (int r = 0; r < B.reps; r++) {
					med.errors += M[w][en][r].errors;
					med.bad += M[w][en][r].bad;
				}
				csv_row((enum wl)w, (enum eng_kind)en, "median", &med);
			}
		}
	}
	if (B.eng_on[E_FLEX] && B.eng_on[E_ROCKS])
		print_ratios();
	printf("\ntotal:    %.1f s%s\n", total, interrupted ? " (INTERRUPTED)" : "");
	if (B.csv)
		fclose(B.csv);
	rmtree(B.work);
	free(B.valpool);
	free(B.perm);
	return interrupted ? 130 : 0;
}
