/*
 * test_flexdb.c - FlexDB against a sorted-array model, its API edges,
 * iterator semantics, and many threads on one handle.
 *
 * The model test runs a seeded stream of puts (values empty, small, a few
 * KB, rarely up to 1 MiB), deletes, gets (missing keys included, buffers
 * smaller than the value), batches with repeated keys, and seek/next and
 * seek_for_prev/prev scans that turn around mid-way, over keys with NUL
 * and 0xFF bytes, keys that are prefixes of each other and keys of 1 and
 * FLEXDB_MAX_KEY bytes; it reopens the store every few thousand operations
 * and compares everything, and calls flexdb_check.  It runs with the
 * default options and with everything tiny (64 KiB memtables and
 * segments, 1 MiB cache) so that the committer, interval splits and
 * merges, eviction and FlexSpace GC run constantly.
 *
 * The concurrency test (writers, get readers and iterator threads on one
 * handle) is also a plain program for ThreadSanitizer, under which
 * Criterion itself crashes on this machine:
 *   make SANITIZE=thread libs
 *   cc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread -Iinclude \
 *      -DFLEXDB_TSAN_MAIN test/test_flexdb.c -o build/flexdb_tsan \
 *      build/debug-thread/lib/libflexdb.a build/debug-thread/lib/libflexspace.a \
 *      build/debug-thread/lib/libflextree.a -luring -lxxhash -pthread -lm
 *   build/flexdb_tsan
 * It prints PASS or FAIL per run; ThreadSanitizer's reports make the exit
 * status 66.
 *
 * Random tests print their seed; FLEX_TEST_SEED=N replays one and
 * FLEX_TEST_SCALE multiplies operation counts and durations.  For
 * bisecting, -DCW/-DCR/-DCI/-DCK change the concurrency check's thread and
 * key counts and -DFDB_TINY_* the tiny options (flexdb_model.h).
 */
#ifndef FLEXDB_TSAN_MAIN
#include <criterion/criterion.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/flex_ident.h"
#include "../flexdb/fdb_cache.h"
#include "../flexdb/fdb_db.h"
#include "../flexdb/fdb_int.h"
#include "flexdb.h"
#include "lib/flexdb_model.h"

/* ======================================================================
 * Concurrency: writers, readers and iterators on one handle.
 * ====================================================================== */

#ifndef CW
#define CW 4 /* writer threads */
#endif
#ifndef CR
#define CR 4 /* get readers */
#endif
#ifndef CI
#define CI 2 /* iterator threads */
#endif
#ifndef CK
#define CK 512 /* keys per writer */
#endif
#define CP 16 /* batch-written key pairs per writer */
#define CVAL_MAGIC 0x4c415643u

/* Key classes (by index mod 4): 0 never deleted, 1 deleted once for good
 * ("mortal"), 2 and 3 put and deleted at random. */
struct cstate {
	struct flexdb *db;
	uint64_t seed;
	atomic_int stop;
	atomic_int failed;
	pthread_mutex_t mu;
	char msg[512];
	/* Per key: last completed operation, (version << 2) | kind, kind 1 =
	 * put, 2 = delete; and whether it is dead (deleted for good). */
	_Atomic uint64_t done[CW][CK];
	atomic_int dead[CW][CK];
	/* The writers' final state, for the check after the run. */
	uint32_t lastver[CW][CK];
	uint8_t lastkind[CW][CK];
	atomic_ullong reads, found, iter_pairs, writes;
	uint64_t cache_size;
	int nk; /* keys per writer in use, <= CK */
	double write_end; /* writers stop then, readers go on alone */
};

static void cfail(struct cstate *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cfail(struct cstate *s, const char *fmt, ...)
{
	pthread_mutex_lock(&s->mu);
	if (!atomic_load(&s->failed)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
		va_end(ap);
		atomic_store(&s->failed, 1);
	}
	pthread_mutex_unlock(&s->mu);
	atomic_store(&s->stop, 1);
}

static int ckey(char *b, int w, int idx)
{
	return snprintf(b, 32, "c%d-%05d", w, idx);
}

/* Pair keys (sorted after every c... key): "p<w>-<j>-a" and "-b", always
 * written together by one batch; the value is the version and its hash. */
static int pkey(char *b, int w, int j, char side)
{
	return snprintf(b, 32, "p%d-%03d-%c", w, j, side);
}

static void pval(uint8_t *b, uint64_t v)
{
	uint64_t h = XXH3_64bits(&v, 8);
	memcpy(b, &v, 8);
	memcpy(b + 8, &h, 8);
}

/* The version in a pair value, or -1 when it is malformed. */
static int64_t pval_get(const uint8_t *b, size_t n)
{
	uint64_t v, h;
	if (n != 16)
		return -1;
	memcpy(&v, b, 8);
	memcpy(&h, b + 8, 8);
	return XXH3_64bits(&v, 8) == h ? (int64_t)v : -1;
}

/* A value: magic, writer, key index, version, length, payload, XXH3. */
static size_t cval_make(uint8_t *b, int w, int idx, uint32_t ver, uint64_t *r)
{
	uint32_t pay = (uint32_t)rnd_below(r, 100) < 3 ? 4096 + (uint32_t)rnd_below(r, 20000)
						       : (uint32_t)rnd_below(r, 600);
	uint32_t hdr[5] = {CVAL_MAGIC, (uint32_t)w, (uint32_t)idx, ver, pay};
	memcpy(b, hdr, sizeof(hdr));
	val_fill(((uint64_t)w << 48) ^ ((uint64_t)idx << 32) ^ ver, b + 20, pay);
	uint64_t h = XXH3_64bits(b, 20 + pay);
	memcpy(b + 20 + pay, &h, 8);
	return 28 + pay;
}

/* Checks a value seen for key (w, idx); returns its version or -1. */
static int64_t cval_check(struct cstate *s, const uint8_t *b, size_t n, int w, int idx,
			  const char *who)
{
	uint32_t hdr[5];
	if (n < 28) {
		cfail(s, "%s: key c%d-%05d: value of %zu bytes is too short (torn?)", who, w, idx,
		      n);
		return -1;
	}
	memcpy(hdr, b, sizeof(hdr));
	uint64_t h;
	memcpy(&h, b + n - 8, 8);
	if (hdr[0] != CVAL_MAGIC || hdr[4] + 28 != n || XXH3_64bits(b, n - 8) != h) {
		cfail(s, "%s: key c%d-%05d: torn or damaged value (%zu bytes)", who, w, idx, n);
		return -1;
	}
	if (hdr[1] != (uint32_t)w || hdr[2] != (uint32_t)idx) {
		cfail(s, "%s: key c%d-%05d holds the value of key c%u-%05u", who, w, idx, hdr[1],
		      hdr[2]);
		return -1;
	}
	return hdr[3];
}

struct cthread {
	struct cstate *s;
	int id;
};

static void *cwriter(void *arg)
{
	struct cthread *t = arg;
	struct cstate *s = t->s;
	int w = t->id;
	uint64_t r = s->seed ^ (0x1000u + (uint64_t)w);
	uint8_t *vb = malloc(32 << 10);
	struct flexdb_batch *b = flexdb_batch_new();
	char k[32];
	uint32_t ver[CK] = {0};
	uint64_t pairver[CP] = {0};
	while (!atomic_load(&s->stop) && now_sec() < s->write_end) {
		int idx = (int)rnd_below(&r, (uint64_t)s->nk);
		if (atomic_load(&s->dead[w][idx]))
			continue;
		int kl = ckey(k, w, idx);
		int cls = idx % 4;
		int rc;
		uint64_t pick = rnd_below(&r, 100);
		if (pick < 4) {
			/* A batch of a few of our keys, repeats included. */
			flexdb_batch_clear(b);
			int nb = 2 + (int)rnd_below(&r, 6), keys[8];
			uint8_t kinds[8];
			uint32_t vers[8];
			for (int j = 0; j < nb; j++) {
				int ix = j && rnd_below(&r, 3) == 0
					     ? keys[j - 1]
					     : (int)rnd_below(&r, (uint64_t)s->nk);
				if (atomic_load(&s->dead[w][ix]) || ix % 4 == 1)
					ix = (ix & ~3) | 0; /* class 0: never deleted */
				keys[j] = ix;
				char bk[32];
				int bl = ckey(bk, w, ix);
				vers[j] = ++ver[ix];
				if (ix % 4 >= 2 && rnd_below(&r, 3) == 0) {
					kinds[j] = 2;
					rc = flexdb_batch_delete(b, bk, (size_t)bl);
				} else {
					kinds[j] = 1;
					size_t vn = cval_make(vb, w, ix, vers[j], &r);
					rc = flexdb_batch_put(b, bk, (size_t)bl, vb, vn);
				}
				if (rc) {
					cfail(s, "writer %d: flexdb_batch_*: %s", w,
					      flex_strerror(rc));
					break;
				}
			}
			rc = flexdb_write(s->db, b);
			if (rc) {
				cfail(s, "writer %d: flexdb_write: %s (%d)", w, flex_strerror(rc),
				      rc);
				break;
			}
			for (int j = 0; j < nb; j++) {
				atomic_store(&s->done[w][keys[j]],
					     ((uint64_t)vers[j] << 2) | kinds[j]);
				s->lastver[w][keys[j]] = vers[j];
				s->lastkind[w][keys[j]] = kinds[j];
			}
			atomic_fetch_add(&s->writes, 1);
			continue;
		}
		if (pick < 7) {
			/* A batch over a pair (a, b) with one version: readers
			 * must never see b older than a. */
			int pj = (int)rnd_below(&r, CP);
			uint64_t pv = ++pairver[pj];
			char ka[32], kb[32];
			uint8_t val[16];
			int la = pkey(ka, w, pj, 'a'), lb = pkey(kb, w, pj, 'b');
			pval(val, pv);
			flexdb_batch_clear(b);
			rc = flexdb_batch_put(b, ka, (size_t)la, val, 16);
			if (!rc)
				rc = flexdb_batch_put(b, kb, (size_t)lb, val, 16);
			if (!rc)
				rc = flexdb_write(s->db, b);
			if (rc) {
				cfail(s, "writer %d: pair batch: %s (%d)", w, flex_strerror(rc),
				      rc);
				break;
			}
			atomic_fetch_add(&s->writes, 1);
			continue;
		}
		if (pick < 8) {
			/* Now and then a compact: tidying under the readers. */
			int compact = rnd_below(&r, 8) == 0;
			rc = compact ? flexdb_compact(s->db, (int)rnd_below(&r, 2)) : flexdb_sync(s->db);
			if (rc) {
				cfail(s, "writer %d: %s: %s", w,
				      compact ? "flexdb_compact" : "flexdb_sync", flex_strerror(rc));
				break;
			}
			continue;
		}
		int del = 0;
		if (cls == 1)
			del = ver[idx] > 0 && rnd_below(&r, 100) < 3;
		else if (cls >= 2)
			del = rnd_below(&r, 100) < 30;
		uint32_t v = ++ver[idx];
		if (del && rnd_below(&r, 20) == 0) {
			/* The same delete as a range delete of [k, k + "\0"),
			 * which holds k alone: range deletes published to
			 * readers while they search. */
			char e[33];
			memcpy(e, k, (size_t)kl);
			e[kl] = 0;
			rc = flexdb_delete_range(s->db, k, (size_t)kl, e, (size_t)kl + 1);
		} else if (del) {
			rc = flexdb_delete(s->db, k, (size_t)kl);
		} else {
			size_t vn = cval_make(vb, w, idx, v, &r);
			rc = flexdb_put(s->db, k, (size_t)kl, vb, vn);
		}
		if (rc) {
			cfail(s, "writer %d: %s: %s (%d)", w, del ? "delete" : "put",
			      flex_strerror(rc), rc);
			break;
		}
		atomic_store(&s->done[w][idx], ((uint64_t)v << 2) | (del ? 2u : 1u));
		s->lastver[w][idx] = v;
		s->lastkind[w][idx] = del ? 2 : 1;
		if (del && cls == 1)
			atomic_store(&s->dead[w][idx], 1);
		atomic_fetch_add(&s->writes, 1);
	}
	flexdb_batch_free(b);
	free(vb);
	return NULL;
}

static void *creader(void *arg)
{
	struct cthread *t = arg;
	struct cstate *s = t->s;
	uint64_t r = s->seed ^ (0x2000u + (uint64_t)t->id);
	size_t cap = 64 << 10;
	uint8_t *buf = malloc(cap);
	char k[32];
	while (!atomic_load(&s->stop)) {
		if (rnd_below(&r, 10) == 0) {
			/* a, then b: the batch wrote a and b together, so b is
			 * never older than the a read before it. */
			int w = (int)rnd_below(&r, CW), pj = (int)rnd_below(&r, CP);
			char ka[32], kb[32];
			int la = pkey(ka, w, pj, 'a'), lb = pkey(kb, w, pj, 'b');
			size_t na = 0, nb = 0;
			uint8_t va[32], vb2[32];
			int ra = flexdb_get(s->db, ka, (size_t)la, va, sizeof(va), &na);
			int rb = flexdb_get(s->db, kb, (size_t)lb, vb2, sizeof(vb2), &nb);
			int64_t xa = ra == 0 ? pval_get(va, na) : 0,
				xb = rb == 0 ? pval_get(vb2, nb) : 0;
			if ((ra != 0 && ra != FLEXDB_NOTFOUND) ||
			    (rb != 0 && rb != FLEXDB_NOTFOUND) || xa < 0 || xb < 0) {
				cfail(s, "get of pair %s: rc %d/%d, malformed value", ka, ra, rb);
				break;
			}
			if (xb < xa) {
				cfail(s,
				      "pair %s: read version %" PRId64
				      " of a, then version %" PRId64
				      " of b: a batch was seen partly applied",
				      ka, xa, xb);
				break;
			}
			continue;
		}
		int w = (int)rnd_below(&r, CW), idx = (int)rnd_below(&r, (uint64_t)s->nk);
		int kl = ckey(k, w, idx);
		uint64_t pre = atomic_load(&s->done[w][idx]);
		int dead = atomic_load(&s->dead[w][idx]);
		size_t vn = 0;
		int rc = flexdb_get(s->db, k, (size_t)kl, buf, cap, &vn);
		atomic_fetch_add(&s->reads, 1);
		if (rc == 0) {
			atomic_fetch_add(&s->found, 1);
			int64_t v = cval_check(s, buf, vn, w, idx, "get");
			if (v < 0)
				break;
			if (dead) {
				cfail(s,
				      "get: key c%d-%05d was deleted for good but reads version "
				      "%" PRId64 " (resurrected)",
				      w, idx, v);
				break;
			}
			uint64_t pv = pre >> 2;
			if ((pre & 3) == 1 && (uint64_t)v < pv) {
				cfail(s,
				      "get: key c%d-%05d reads version %" PRId64
				      " after version %" PRIu64 " was acknowledged (stale)",
				      w, idx, v, pv);
				break;
			}
			if ((pre & 3) == 2 && (uint64_t)v <= pv) {
				cfail(s,
				      "get: key c%d-%05d reads version %" PRId64
				      " after its delete (version %" PRIu64 ") returned",
				      w, idx, v, pv);
				break;
			}
		} else if (rc == FLEXDB_NOTFOUND) {
			if (idx % 4 == 0 && (pre & 3) == 1) {
				cfail(s,
				      "get: key c%d-%05d (never deleted, version %" PRIu64
				      " acknowledged) is missing",
				      w, idx, pre >> 2);
				break;
			}
		} else {
			cfail(s, "get: %s (%d)", flex_strerror(rc), rc);
			break;
		}
	}
	free(buf);
	return NULL;
}

static int ckey_parse(const uint8_t *k, size_t n, int *w, int *idx)
{
	char b[32];
	if (n < 3 || n > 20)
		return -1;
	memcpy(b, k, n);
	b[n] = 0;
	return sscanf(b, "c%d-%d", w, idx) == 2 && *w >= 0 && *w < CW && *idx >= 0 && *idx < CK
		   ? 0
		   : -1;
}

static void *citer(void *arg)
{
	struct cthread *t = arg;
	struct cstate *s = t->s;
	uint64_t r = s->seed ^ (0x3000u + (uint64_t)t->id);
	uint8_t(*dead)[CK] = malloc(sizeof(uint8_t[CW][CK]));
	uint8_t last[32];
	size_t lastn = 0;
	char k[32];
	struct flexdb_iter *it = NULL;
	int rc = flexdb_iter_open(s->db, &it);
	if (rc) {
		cfail(s, "flexdb_iter_open: %s", flex_strerror(rc));
		free(dead);
		return NULL;
	}
	while (!atomic_load(&s->stop)) {
		for (int w = 0; w < CW; w++)
			for (int i = 0; i < CK; i++)
				dead[w][i] = (uint8_t)atomic_load(&s->dead[w][i]);
		/* Now and then a new iterator: the closed one is parked for
		 * the next open, on this thread or another's. */
		if (rnd_below(&r, 4) == 0) {
			flexdb_iter_close(it);
			if ((rc = flexdb_iter_open(s->db, &it)) != 0) {
				cfail(s, "flexdb_iter_open: %s", flex_strerror(rc));
				it = NULL;
				break;
			}
			if (flexdb_iter_valid(it)) {
				cfail(s, "iterator: valid before its first seek");
				break;
			}
		}
		int rev = (int)rnd_below(&r, 2);
		int kl = ckey(k, (int)rnd_below(&r, CW), (int)rnd_below(&r, (uint64_t)s->nk));
		rc = rev ? flexdb_iter_seek_for_prev(it, k, (size_t)kl)
			 : flexdb_iter_seek(it, k, (size_t)kl);
		int steps = 0, maxsteps = 50 + (int)rnd_below(&r, 400);
		lastn = 0;
		while (!rc && flexdb_iter_valid(it) && steps < maxsteps) {
			size_t kn, vn;
			const uint8_t *key = flexdb_iter_key(it, &kn);
			const uint8_t *val = flexdb_iter_value(it, &vn);
			int w, idx;
			if (key && kn && key[0] == 'p') {
				/* A pair key: order only (checked below). */
				if (lastn) {
					int c = fkey_cmp(last, (uint32_t)lastn, key, (uint32_t)kn);
					if (rev ? c <= 0 : c >= 0) {
						cfail(s, "iterator: pair keys out of order");
						break;
					}
				}
				memcpy(last, key, kn);
				lastn = kn;
				if (pval_get(val, vn) < 0) {
					cfail(s, "iterator: malformed pair value");
					break;
				}
				steps++;
				rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
				continue;
			}
			if (!key || ckey_parse(key, kn, &w, &idx)) {
				cfail(s, "iterator: malformed key of %zu bytes", kn);
				break;
			}
			if (lastn) {
				int c = fkey_cmp(last, (uint32_t)lastn, key, (uint32_t)kn);
				if (rev ? c <= 0 : c >= 0) {
					cfail(s,
					      "iterator (%s, step %d after a seek to %s): keys not "
					      "strictly "
					      "%s: %.*s then c%d-%05d",
					      rev ? "prev" : "next", steps, k,
					      rev ? "decreasing" : "increasing", (int)lastn,
					      (const char *)last, w, idx);
					break;
				}
			}
			memcpy(last, key, kn);
			lastn = kn;
			if (cval_check(s, val, vn, w, idx, "iterator") < 0)
				break;
			if (dead[w][idx]) {
				cfail(s,
				      "iterator: key c%d-%05d was deleted for good before the seek "
				      "but is returned (resurrected)",
				      w, idx);
				break;
			}
			atomic_fetch_add(&s->iter_pairs, 1);
			steps++;
			rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
		}
		if (rc && !atomic_load(&s->failed))
			cfail(s, "iterator: %s (%d)", flex_strerror(rc), rc);
	}
	flexdb_iter_close(it);
	free(dead);
	return NULL;
}

/* The state the writers left: every key as its last operation made it. */
static int cverify_final(struct cstate *s, const char *when)
{
	uint8_t *buf = malloc(64 << 10);
	char k[32];
	int bad = 0;
	for (int w = 0; w < CW && !bad; w++)
		for (int i = 0; i < s->nk && !bad; i++) {
			int kl = ckey(k, w, i);
			size_t vn = 0;
			int rc = flexdb_get(s->db, k, (size_t)kl, buf, 64 << 10, &vn);
			if (s->lastkind[w][i] == 1) {
				int64_t v = rc == 0 ? cval_check(s, buf, vn, w, i, when) : -1;
				if (rc != 0 || v != s->lastver[w][i]) {
					/* Say more: what iteration and the deep check see. */
					struct flexdb_iter *it = NULL;
					int seen = -1;
					if (flexdb_iter_open(s->db, &it) == 0 &&
					    flexdb_iter_seek(it, k, (size_t)kl) == 0) {
						size_t ikn = 0;
						const void *ik = flexdb_iter_key(it, &ikn);
						seen =
						    ik && ikn == (size_t)kl && !memcmp(ik, k, ikn);
					}
					flexdb_iter_close(it);
					int crc = flexdb_check(s->db);
					cfail(s,
					      "%s: key c%d-%05d: rc %d version %" PRId64
					      ", expected version %u (an iterator %s it; "
					      "flexdb_check: %s)",
					      when, w, i, rc, v, s->lastver[w][i],
					      seen == 1	  ? "finds"
					      : seen == 0 ? "does not find"
							  : "failed on",
					      flex_strerror(crc));
					bad = 1;
				}
			} else if (rc != FLEXDB_NOTFOUND) {
				cfail(s, "%s: key c%d-%05d should be absent: rc %d", when, w, i,
				      rc);
				bad = 1;
			}
		}
	free(buf);
	return bad;
}

/* Runs the concurrency check; 0 when clean, else 1 with msg. */
static int conc_run(const struct flexdb_options *opt, int nk, double seconds, double write_frac,
		    uint64_t seed, char *msg, size_t msgcap, char *summary, size_t sumcap)
{
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "conc");
	struct cstate *s = calloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->seed = seed;
	s->nk = nk < CK ? nk : CK;
	s->cache_size = opt->cache_size;
	int rc = flexdb_open(dir, opt, &s->db);
	if (rc) {
		snprintf(msg, msgcap, "flexdb_open: %s", flex_strerror(rc));
		free(s);
		tmp_remove(dir);
		return 1;
	}
	pthread_t th[CW + CR + CI];
	struct cthread ta[CW + CR + CI];
	int n = 0;
	s->write_end = now_sec() + seconds * write_frac;
	for (int i = 0; i < CW; i++, n++) {
		ta[n] = (struct cthread){s, i};
		pthread_create(&th[n], NULL, cwriter, &ta[n]);
	}
	for (int i = 0; i < CR; i++, n++) {
		ta[n] = (struct cthread){s, i};
		pthread_create(&th[n], NULL, creader, &ta[n]);
	}
	for (int i = 0; i < CI; i++, n++) {
		ta[n] = (struct cthread){s, i};
		pthread_create(&th[n], NULL, citer, &ta[n]);
	}
	double t0 = now_sec();
	uint64_t max_cache = 0;
	while (!atomic_load(&s->stop) && now_sec() - t0 < seconds) {
		struct flexdb_stats st;
		usleep(20000);
		if ((rc = flexdb_stats(s->db, &st)) != 0) {
			cfail(s, "flexdb_stats: %s", flex_strerror(rc));
			break;
		}
		if (st.cache_bytes > max_cache)
			max_cache = st.cache_bytes;
		if (s->cache_size && st.cache_bytes > s->cache_size)
			cfail(s, "cache holds %" PRIu64 " bytes, over its size %" PRIu64,
			      st.cache_bytes, s->cache_size);
	}
	atomic_store(&s->stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	struct flexdb_stats st;
	memset(&st, 0, sizeof(st));
	flexdb_stats(s->db, &st);
	int failed = atomic_load(&s->failed);
	if (!failed)
		failed = cverify_final(s, "after the run");
	if (!failed && (rc = flexdb_check(s->db)) != 0)
		cfail(s, "flexdb_check after the run: %s", flex_strerror(rc)), failed = 1;
	rc = flexdb_close(s->db);
	if (rc)
		fprintf(stderr, "  flexdb_close after the concurrent run: %s (%d)\n",
			flex_strerror(rc), rc);
	if (rc && !failed)
		cfail(s, "flexdb_close: %s", flex_strerror(rc)), failed = 1;
	s->db = NULL;
	if (!failed) {
		if ((rc = flexdb_open(dir, opt, &s->db)) != 0)
			cfail(s, "reopen: %s", flex_strerror(rc)), failed = 1;
		else {
			failed = cverify_final(s, "after reopening");
			if (!failed && (rc = flexdb_check(s->db)) != 0)
				cfail(s, "flexdb_check after reopening: %s", flex_strerror(rc)),
				    failed = 1;
			flexdb_close(s->db);
		}
	}
	if (failed || atomic_load(&s->failed))
		snprintf(msg, msgcap, "%s", s->msg);
	snprintf(summary, sumcap,
		 "%llu writes, %llu gets (%llu found), %llu pairs iterated; committer runs %" PRIu64
		 ", writer stalls %" PRIu64 ", max cache %" PRIu64 " bytes",
		 (unsigned long long)atomic_load(&s->writes),
		 (unsigned long long)atomic_load(&s->reads),
		 (unsigned long long)atomic_load(&s->found),
		 (unsigned long long)atomic_load(&s->iter_pairs), st.committer_runs,
		 st.writer_stalls, max_cache);
	int ret = failed || atomic_load(&s->failed);
	pthread_mutex_destroy(&s->mu);
	free(s);
	tmp_remove(dir);
	return ret;
}

/* Tiny, except for memtables big enough to hold a few hundred writes (a
 * memtable's arena is charged in 256 KiB blocks, so a 64 KiB one is handed
 * to the committer after every write).  `make helgrind`, where a run
 * manages only a few hundred writes, makes them smaller with
 * -DCONC_MEMTABLE so that the committer runs too. */
#ifndef CONC_MEMTABLE
#define CONC_MEMTABLE (512u << 10)
#endif
static struct flexdb_options conc_opts(void)
{
	struct flexdb_options o = fdb_tiny_opts();
	o.memtable_size = CONC_MEMTABLE;
	return o;
}

/* The runs of the concurrency check: 512 keys per writer (a store of a
 * few hundred intervals, a multi-level sparse index), 48 hot keys per
 * writer (one index leaf, heavy contention on each key), and readers
 * alone once the writers stop (the cache changes only through them, and
 * what they retire is freed only when nobody holds the lock). */
struct crun {
	const char *name;
	int nk, sync_writes;
	double seconds;
	double write_frac; /* of the run during which writers write */
};
static const struct crun conc_runs[] = {
    {"512 keys/writer", CK, 0, 2.5, 1.0},
    {"48 hot keys/writer", 48, 0, 2.0, 1.0},
    {"sync_writes, 48 keys/writer", 48, 1, 1.0, 1.0},
    {"readers alone after 512 keys/writer", CK, 0, 2.0, 0.3},
};

static int conc_one(const struct crun *c, uint64_t seed, char *msg, size_t cap)
{
	struct flexdb_options o = conc_opts();
	if (c->sync_writes) {
		o = fdb_tiny_opts();
		o.sync_writes = 1;
	}
	char sum[512] = "";
	int bad = conc_run(&o, c->nk, c->seconds * test_scale(), c->write_frac, seed, msg, cap, sum,
			   sizeof(sum));
	fprintf(stderr, "  concurrency (%s): %s\n", c->name, sum);
	return bad;
}

/* Warming beside readers and a writer: a store of WK pairs (key i holds
 * a value made from i) is reopened, and while the committer reads it
 * into the cache, readers get and check random pairs, one iterates, and
 * a writer puts pairs of keys of its own (committed beside the warming)
 * and overwrites pairs with the values they hold. */
#define WK 6000
struct wstate {
	struct flexdb *db;
	atomic_int stop, failed;
	atomic_ullong gets;
	uint64_t seed;
	char msg[256];
	pthread_mutex_t mu;
};

static int wkey(char *b, int i)
{
	return snprintf(b, 24, "w%06d", i);
}

static size_t wval(uint8_t *b, int i)
{
	size_t n = 40 + (size_t)(i % 97);
	for (size_t j = 0; j < n; j++)
		b[j] = (uint8_t)(i * 31 + (int)j);
	return n;
}

static void wfail(struct wstate *s, const char *what, int i, int rc)
{
	pthread_mutex_lock(&s->mu);
	if (!atomic_exchange(&s->failed, 1))
		snprintf(s->msg, sizeof(s->msg), "%s of w%06d: rc %d", what, i, rc);
	pthread_mutex_unlock(&s->mu);
}

static void *wreader(void *arg)
{
	struct wstate *s = arg;
	uint64_t r = s->seed ^ (uint64_t)pthread_self();
	uint8_t want[256], got[256];
	char k[24];
	while (!atomic_load(&s->stop) && !atomic_load(&s->failed)) {
		int i = (int)rnd_below(&r, WK);
		size_t n = wval(want, i), vn = 0;
		int rc = flexdb_get(s->db, k, (size_t)wkey(k, i), got, sizeof(got), &vn);
		if (rc || vn != n || memcmp(got, want, n))
			wfail(s, "get", i, rc);
		atomic_fetch_add(&s->gets, 1);
	}
	return NULL;
}

static void *wwriter(void *arg)
{
	struct wstate *s = arg;
	uint64_t r = s->seed ^ 0x77777u;
	uint8_t v[256];
	char k[24];
	for (int j = 0; !atomic_load(&s->stop) && !atomic_load(&s->failed); j++) {
		int i = (int)rnd_below(&r, WK);
		int rc = flexdb_put(s->db, k, (size_t)wkey(k, i), v, wval(v, i));
		if (!rc) {
			int kn = snprintf(k, sizeof(k), "x%08d", j);
			rc = flexdb_put(s->db, k, (size_t)kn, v, 10);
		}
		if (rc)
			wfail(s, "put", i, rc);
	}
	return NULL;
}

static void *witer(void *arg)
{
	struct wstate *s = arg;
	uint8_t want[256];
	while (!atomic_load(&s->stop) && !atomic_load(&s->failed)) {
		struct flexdb_iter *it;
		int rc = flexdb_iter_open(s->db, &it);
		if (!rc)
			rc = flexdb_iter_seek(it, "w", 1);
		for (int n = 0; !rc && flexdb_iter_valid(it) && n < 3000; n++) {
			size_t kn, vn;
			const uint8_t *key = flexdb_iter_key(it, &kn);
			const uint8_t *val = flexdb_iter_value(it, &vn);
			int i;
			if (kn != 7 || key[0] != 'w' || sscanf((const char *)key + 1, "%6d", &i) != 1)
				break;
			size_t wn = wval(want, i);
			if (vn != wn || memcmp(val, want, wn)) {
				wfail(s, "iterator", i, 0);
				break;
			}
			rc = flexdb_iter_next(it);
		}
		if (rc)
			wfail(s, "iterator", -1, rc);
		flexdb_iter_close(it);
	}
	return NULL;
}

static int warm_conc_run(uint64_t seed, double seconds, char *msg, size_t cap)
{
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "warmconc");
	struct flexdb_options o = fdb_tiny_opts();
	o.cache_size = 4u << 20;
	o.memtable_size = CONC_MEMTABLE;
	struct wstate *s = calloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->seed = seed;
	uint8_t v[256];
	char k[24];
	int rc = flexdb_open(dir, &o, &s->db);
	for (int i = 0; !rc && i < WK; i++)
		rc = flexdb_put(s->db, k, (size_t)wkey(k, i), v, wval(v, i));
	if (!rc)
		rc = flexdb_close(s->db);
	if (!rc)
		rc = flexdb_open(dir, &o, &s->db);
	if (rc) {
		snprintf(msg, cap, "load and reopen: %s", flex_strerror(rc));
		free(s);
		tmp_remove(dir);
		return 1;
	}
	pthread_t th[4];
	pthread_create(&th[0], NULL, wreader, s);
	pthread_create(&th[1], NULL, wreader, s);
	pthread_create(&th[2], NULL, witer, s);
	pthread_create(&th[3], NULL, wwriter, s);
	double t0 = now_sec();
	while (now_sec() - t0 < seconds && !atomic_load(&s->failed))
		usleep(10000);
	atomic_store(&s->stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	struct flexdb_stats st;
	flexdb_stats(s->db, &st);
	if (!atomic_load(&s->failed) && (rc = flexdb_check(s->db)) != 0)
		wfail(s, "flexdb_check", -1, rc);
	if ((rc = flexdb_close(s->db)) != 0)
		wfail(s, "flexdb_close", -1, rc);
	int bad = atomic_load(&s->failed);
	if (bad)
		snprintf(msg, cap, "%s", s->msg);
	fprintf(stderr, "  warming beside readers: %llu gets, cache %" PRIu64 " bytes, %s\n",
		(unsigned long long)atomic_load(&s->gets), st.cache_bytes,
		st.warming ? "still warming" : "warm");
	pthread_mutex_destroy(&s->mu);
	free(s);
	tmp_remove(dir);
	return bad;
}

#ifdef FLEXDB_TSAN_MAIN

int main(void)
{
	uint64_t seed = test_seed("flexdb_tsan concurrency");
	int bad = 0;
	for (size_t i = 0; i < sizeof(conc_runs) / sizeof(conc_runs[0]); i++) {
		char msg[512] = "";
		if (conc_one(&conc_runs[i], seed + i, msg, sizeof(msg))) {
			printf("FAIL (%s): %s\n", conc_runs[i].name, msg);
			bad = 1;
		}
	}
	char wmsg[256] = "";
	if (warm_conc_run(seed, 1.0 * test_scale(), wmsg, sizeof(wmsg))) {
		printf("FAIL (warming): %s\n", wmsg);
		bad = 1;
	}
	printf("%s\n", bad ? "FAIL" : "PASS");
	return bad;
}

#else /* Criterion suites */

/* Describes a key briefly for messages. */
static const char *key_desc(const void *k, size_t n, char *out, size_t cap)
{
	const uint8_t *p = k;
	size_t o = 0;
	o += (size_t)snprintf(out + o, cap - o, "[%zu]", n);
	for (size_t i = 0; i < n && i < 24 && o + 4 < cap; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			out[o++] = (char)p[i];
		else
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
	}
	if (n > 24 && o + 4 < cap)
		o += (size_t)snprintf(out + o, cap - o, "...");
	out[o < cap ? o : cap - 1] = 0;
	return out;
}

TestSuite(flexdb, .timeout = 240, .fini = fdb_tmp_cleanup);

static void conc_test(int which, const char *name)
{
	uint64_t seed = test_seed(name);
	char msg[512] = "";
	int bad = conc_one(&conc_runs[which], seed, msg, sizeof(msg));
	cr_assert(!bad, "%s seed %" PRIu64 ": %s", name, seed, msg);
}

Test(flexdb, concurrent_writers_readers_iterators_on_a_large_index, .timeout = 120)
{
	conc_test(0, "concurrent_large_index");
}

Test(flexdb, concurrent_writers_readers_iterators_on_hot_keys, .timeout = 120)
{
	conc_test(1, "concurrent_hot_keys");
}

Test(flexdb, concurrent_sync_writes_group_commit, .timeout = 120)
{
	conc_test(2, "concurrent_sync_writes");
}

Test(flexdb, concurrent_readers_iterator_writer_while_warming, .timeout = 120)
{
	uint64_t seed = test_seed("concurrent_warming");
	char msg[256] = "";
	cr_assert(!warm_conc_run(seed, 1.0 * test_scale(), msg, sizeof(msg)), "seed %" PRIu64 ": %s",
		  seed, msg);
}

Test(flexdb, concurrent_readers_cache_alone_within_the_bound, .timeout = 120)
{
	conc_test(3, "concurrent_readers_alone");
}

/* ======================================================================
 * The model test.
 * ====================================================================== */

struct mrun {
	const char *name;
	uint64_t seed;
	uint64_t r;
	char dir[256];
	struct flexdb_options opt;
	struct flexdb *db;
	struct fmodel m;
	struct keypool pool;
	uint8_t *vbuf, *gbuf, *kbuf;
	uint8_t *bbuf[3]; /* a bounded scan's lower, upper and prefix */
	long op;
	uint64_t sess_committer, sess_gc, sess_tree, sess_thin, sess_located;
	uint64_t committer_runs, gc_runs, tree_commits, max_cache, scans, scan_steps, turns,
	    batches, gets, checks, thin_hits, thin_located, bounded_scans, ranges, range_keys;
};

#define MFAIL(mr, ...)                                                                             \
	cr_assert_fail("%s seed %" PRIu64 " op %ld: %s", (mr)->name, (mr)->seed, (mr)->op, ({      \
			       static char m_[600];                                                \
			       snprintf(m_, sizeof(m_), __VA_ARGS__);                              \
			       m_;                                                                 \
		       }))

/* A key: mostly from the pool, sometimes fresh random bytes (which are
 * also often prefixes or extensions of pool keys). */
static const uint8_t *m_key(struct mrun *mr, uint32_t *kn)
{
	uint64_t k = rnd_below(&mr->r, 100);
	if (k < 85) {
		const struct fkey *f = &mr->pool.keys[rnd_below(&mr->r, mr->pool.n)];
		*kn = f->n;
		return f->k;
	}
	if (k < 92) {
		/* A pool key with a byte appended or removed. */
		const struct fkey *f = &mr->pool.keys[rnd_below(&mr->r, mr->pool.n)];
		uint32_t n = f->n;
		memcpy(mr->kbuf, f->k, n);
		if (n < FLEXDB_MAX_KEY && (n == 1 || rnd_below(&mr->r, 2)))
			mr->kbuf[n++] = (uint8_t)(rnd_below(&mr->r, 2) ? 0x00 : 0xff);
		else
			n--;
		*kn = n;
		return mr->kbuf;
	}
	uint32_t n = 1 + (uint32_t)rnd_below(&mr->r, 12);
	static const uint8_t alpha[5] = {0x00, 'k', 'e', 'y', 0xff};
	for (uint32_t i = 0; i < n; i++)
		mr->kbuf[i] = alpha[rnd_below(&mr->r, 5)];
	*kn = n;
	return mr->kbuf;
}

/* A key present in the model (when it has any). */
static const uint8_t *m_existing(struct mrun *mr, uint32_t *kn)
{
	if (!mr->m.n)
		return m_key(mr, kn);
	const struct ment *e = &mr->m.e[rnd_below(&mr->r, mr->m.n)];
	*kn = e->kn;
	return e->k;
}

static void m_open(struct mrun *mr)
{
	int rc = flexdb_open(mr->dir, &mr->opt, &mr->db);
	if (rc)
		MFAIL(mr, "flexdb_open: %s (%d)", flex_strerror(rc), rc);
}

static void m_stats(struct mrun *mr)
{
	struct flexdb_stats st;
	int rc = flexdb_stats(mr->db, &st);
	if (rc)
		MFAIL(mr, "flexdb_stats: %s", flex_strerror(rc));
	uint64_t limit = mr->opt.cache_size ? mr->opt.cache_size : (64u << 20);
	if (st.cache_bytes > limit)
		MFAIL(mr, "cache holds %" PRIu64 " bytes, over cache_size %" PRIu64, st.cache_bytes,
		      limit);
	if (st.cache_bytes > mr->max_cache)
		mr->max_cache = st.cache_bytes;
	/* Per handle: summed over sessions at each close. */
	mr->sess_committer = st.committer_runs;
	mr->sess_gc = st.space.gc_runs;
	mr->sess_tree = st.space.tree_commits;
	mr->sess_thin = st.cache_thin_hits;
	mr->sess_located = st.cache_thin_located;
}

static void m_check(struct mrun *mr)
{
	int rc = flexdb_check(mr->db);
	mr->checks++;
	if (rc)
		MFAIL(mr, "flexdb_check: %s (%d)", flex_strerror(rc), rc);
}

static void m_get_one(struct mrun *mr, const uint8_t *k, uint32_t kn)
{
	char kd[128];
	const struct ment *e = fm_get(&mr->m, k, kn);
	size_t vn = 12345;
	uint64_t how = rnd_below(&mr->r, 10);
	size_t cap = FLEXDB_MAX_VALUE;
	if (how == 0)
		cap = 0;
	else if (how == 1 && e)
		cap = rnd_below(&mr->r, (uint64_t)e->vn + 1);
	int rc = flexdb_get(mr->db, k, kn, cap ? mr->gbuf : NULL, cap, how == 2 ? NULL : &vn);
	mr->gets++;
	if (!e) {
		if (rc != FLEXDB_NOTFOUND)
			MFAIL(mr, "get %s: rc %d (%s), the key is absent",
			      key_desc(k, kn, kd, sizeof(kd)), rc, flex_strerror(rc));
		return;
	}
	if (rc != 0)
		MFAIL(mr, "get %s: rc %d (%s), expected a value of %u bytes",
		      key_desc(k, kn, kd, sizeof(kd)), rc, flex_strerror(rc), e->vn);
	if (how != 2 && vn != e->vn)
		MFAIL(mr, "get %s: length %zu, expected %u", key_desc(k, kn, kd, sizeof(kd)), vn,
		      e->vn);
	size_t cmp = cap < e->vn ? cap : e->vn;
	if (cmp && memcmp(mr->gbuf, e->v, cmp))
		MFAIL(mr, "get %s: wrong value bytes (%u bytes, cap %zu)",
		      key_desc(k, kn, kd, sizeof(kd)), e->vn, cap);
}

/* Compares an iterator position with the model's (pos in [0, n) or off
 * the ends). */
static void m_iter_cmp(struct mrun *mr, struct flexdb_iter *it, long pos, const char *what)
{
	char kd[128];
	int valid = flexdb_iter_valid(it);
	if (pos < 0 || pos >= (long)mr->m.n) {
		if (valid) {
			size_t kn;
			const void *k = flexdb_iter_key(it, &kn);
			MFAIL(mr, "%s: iterator valid at %s, the model is past its end", what,
			      key_desc(k, kn, kd, sizeof(kd)));
		}
		return;
	}
	const struct ment *e = &mr->m.e[pos];
	if (!valid)
		MFAIL(mr, "%s: iterator invalid, the model is at %s (position %ld of %zu)", what,
		      key_desc(e->k, e->kn, kd, sizeof(kd)), pos, mr->m.n);
	size_t kn = 0, vn = 0;
	const uint8_t *k = flexdb_iter_key(it, &kn);
	const uint8_t *v = flexdb_iter_value(it, &vn);
	if (!k || kn != e->kn || memcmp(k, e->k, kn)) {
		char kd2[128];
		MFAIL(mr, "%s: iterator at %s, the model at %s", what,
		      k ? key_desc(k, kn, kd2, sizeof(kd2)) : "NULL",
		      key_desc(e->k, e->kn, kd, sizeof(kd)));
	}
	if (vn != e->vn || (vn && (!v || memcmp(v, e->v, vn))))
		MFAIL(mr, "%s: value of %s differs (%zu bytes, model %u)", what,
		      key_desc(e->k, e->kn, kd, sizeof(kd)), vn, e->vn);
}

/* The model's range [lo, hi) for an iterator's bounds and prefix. */
struct mrange {
	uint8_t *lower, *upper, *pfx;
	uint32_t ln, un, pn;
	size_t lo, hi;
	int set; /* bounds or a prefix were set */
};

/* A key for a bound: from the model, the pool or random bytes. */
static uint32_t m_bound_key(struct mrun *mr, uint8_t *out)
{
	uint32_t kn;
	const uint8_t *k = rnd_below(&mr->r, 2) ? m_existing(mr, &kn) : m_key(mr, &kn);
	memcpy(out, k, kn);
	return kn;
}

/* Sets random bounds and/or a prefix on it, a third of the time, and
 * computes the range they leave in the model. */
static void m_set_range(struct mrun *mr, struct flexdb_iter *it, struct mrange *g)
{
	char kd[128], kd2[128];
	g->ln = g->un = g->pn = 0;
	g->lo = 0;
	g->hi = mr->m.n;
	g->set = rnd_below(&mr->r, 3) == 0;
	if (!g->set)
		return;
	uint64_t how = rnd_below(&mr->r, 8);
	if (how < 5) {
		if (rnd_below(&mr->r, 4))
			g->ln = m_bound_key(mr, g->lower);
		if (rnd_below(&mr->r, 4))
			g->un = m_bound_key(mr, g->upper);
		if (g->ln && g->un && fkey_cmp(g->lower, g->ln, g->upper, g->un) >= 0) {
			/* Inverted or empty: refused, and nothing changes. */
			int rc = flexdb_iter_set_bounds(it, g->lower, g->ln, g->upper, g->un);
			if (rc != -EINVAL)
				MFAIL(mr, "set_bounds [%s, %s): %d, expected -EINVAL",
				      key_desc(g->lower, g->ln, kd, sizeof(kd)),
				      key_desc(g->upper, g->un, kd2, sizeof(kd2)), rc);
			uint8_t *t = g->lower;
			uint32_t tn = g->ln;
			g->lower = g->upper;
			g->ln = g->un;
			g->upper = t;
			g->un = tn;
			if (fkey_cmp(g->lower, g->ln, g->upper, g->un) == 0)
				g->un = 0;
		}
		int rc = flexdb_iter_set_bounds(it, g->ln ? g->lower : NULL, g->ln,
						g->un ? g->upper : NULL, g->un);
		if (rc)
			MFAIL(mr, "set_bounds: %s (%d)", flex_strerror(rc), rc);
	}
	if (how >= 3) {
		/* A key's first bytes, or a short run of edge bytes. */
		if (rnd_below(&mr->r, 3)) {
			uint32_t kn;
			const uint8_t *k = m_existing(mr, &kn);
			g->pn = 1 + (uint32_t)rnd_below(&mr->r, kn < 6 ? kn : 6);
			memcpy(g->pfx, k, g->pn);
		} else {
			static const uint8_t alpha[4] = {0x00, 'k', 0xfe, 0xff};
			g->pn = 1 + (uint32_t)rnd_below(&mr->r, 3);
			for (uint32_t i = 0; i < g->pn; i++)
				g->pfx[i] = alpha[rnd_below(&mr->r, 4)];
		}
		int rc = flexdb_iter_set_prefix(it, g->pfx, g->pn);
		if (rc)
			MFAIL(mr, "set_prefix: %s (%d)", flex_strerror(rc), rc);
	}
	if (g->ln)
		g->lo = fm_lower(&mr->m, g->lower, g->ln);
	if (g->un)
		g->hi = fm_lower(&mr->m, g->upper, g->un);
	if (g->pn) {
		/* The keys with the prefix: a run from the first >= it. */
		size_t a = fm_lower(&mr->m, g->pfx, g->pn), b = a;
		while (b < mr->m.n && mr->m.e[b].kn >= g->pn &&
		       !memcmp(mr->m.e[b].k, g->pfx, g->pn))
			b++;
		if (a > g->lo)
			g->lo = a;
		if (b < g->hi)
			g->hi = b;
	}
}

static void m_scan(struct mrun *mr)
{
	struct flexdb_iter *it;
	int rc = flexdb_iter_open(mr->db, &it);
	if (rc)
		MFAIL(mr, "flexdb_iter_open: %s", flex_strerror(rc));
	struct mrange g = {.lower = mr->bbuf[0], .upper = mr->bbuf[1], .pfx = mr->bbuf[2]};
	m_set_range(mr, it, &g);
	if (flexdb_iter_valid(it))
		MFAIL(mr, "iterator valid before its first seek");
	uint32_t kn = 0;
	const uint8_t *k = NULL;
	uint64_t how = rnd_below(&mr->r, 10);
	if (how == 0)
		kn = 0;
	else if (how < 5)
		k = m_existing(mr, &kn);
	else
		k = m_key(mr, &kn);
	int rev = (int)rnd_below(&mr->r, 2);
	long pos;
	if (!rev) {
		rc = flexdb_iter_seek(it, k, kn);
		pos = kn ? (long)fm_lower(&mr->m, k, kn) : 0;
	} else {
		rc = flexdb_iter_seek_for_prev(it, k, kn);
		if (!kn) {
			pos = (long)mr->m.n - 1;
		} else {
			size_t lo = fm_lower(&mr->m, k, kn);
			if (lo < mr->m.n && fkey_cmp(mr->m.e[lo].k, mr->m.e[lo].kn, k, kn) == 0)
				pos = (long)lo;
			else
				pos = (long)lo - 1;
		}
	}
	if (rc)
		MFAIL(mr, "%s: %s (%d)", rev ? "seek_for_prev" : "seek", flex_strerror(rc), rc);
	/* Within the range: a seek before it starts at its first key, one
	 * past it (backwards) at its last. */
	if (!rev && pos < (long)g.lo)
		pos = (long)g.lo;
	if (rev && pos >= (long)g.hi)
		pos = (long)g.hi - 1;
#define M_IN(p) ((p) >= (long)g.lo && (p) < (long)g.hi ? (p) : -1)
	const char *what = g.set ? (rev ? "bounded seek_for_prev" : "bounded seek")
				 : (rev ? "seek_for_prev" : "seek");
	m_iter_cmp(mr, it, M_IN(pos), what);
	long steps = rnd_below(&mr->r, 8) == 0 ? 300 : 1 + (long)rnd_below(&mr->r, 40);
	for (long s = 0; s < steps && M_IN(pos) >= 0; s++) {
		if (rnd_below(&mr->r, 100) < 12) {
			rev = !rev;
			mr->turns++;
		}
		rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
		if (rc)
			MFAIL(mr, "%s: %s (%d)", rev ? "prev" : "next", flex_strerror(rc), rc);
		pos += rev ? -1 : 1;
		m_iter_cmp(mr, it, M_IN(pos),
			   g.set ? (rev ? "bounded prev" : "bounded next")
				 : (rev ? "prev" : "next"));
		mr->scan_steps++;
	}
#undef M_IN
	flexdb_iter_close(it);
	mr->scans++;
	mr->bounded_scans += g.set;
}

/* Everything: a full scan against the model, every key by get, check. */
static void m_full(struct mrun *mr)
{
	struct why w;
	uint64_t d;
	size_t n;
	if (store_digest(mr->db, &d, &n, NULL, &w))
		MFAIL(mr, "full scan: %s", w.msg);
	if (n != mr->m.n || d != mr->m.digest) {
		/* Find the first difference for the message. */
		struct fmodel got = {0};
		store_digest(mr->db, &d, &n, &got, &w);
		size_t i = 0;
		while (i < got.n && i < mr->m.n && got.e[i].kn == mr->m.e[i].kn &&
		       !memcmp(got.e[i].k, mr->m.e[i].k, got.e[i].kn) &&
		       got.e[i].vn == mr->m.e[i].vn &&
		       !memcmp(got.e[i].v, mr->m.e[i].v, got.e[i].vn))
			i++;
		char a[128] = "(end)", b[128] = "(end)";
		if (i < got.n)
			key_desc(got.e[i].k, got.e[i].kn, a, sizeof(a));
		if (i < mr->m.n)
			key_desc(mr->m.e[i].k, mr->m.e[i].kn, b, sizeof(b));
		fm_free(&got);
		MFAIL(
		    mr,
		    "full scan: %zu pairs, model %zu; first difference at %zu: store %s, model %s",
		    n, mr->m.n, i, a, b);
	}
	for (size_t i = 0; i < mr->m.n; i++)
		m_get_one(mr, mr->m.e[i].k, mr->m.e[i].kn);
	m_check(mr);
	m_stats(mr);
}

static void m_reopen(struct mrun *mr)
{
	m_stats(mr);
	mr->committer_runs += mr->sess_committer;
	mr->gc_runs += mr->sess_gc;
	mr->tree_commits += mr->sess_tree;
	mr->thin_hits += mr->sess_thin;
	mr->thin_located += mr->sess_located;
	int rc = flexdb_close(mr->db);
	mr->db = NULL;
	if (rc)
		MFAIL(mr, "flexdb_close: %s (%d)", flex_strerror(rc), rc);
	m_open(mr);
	m_full(mr);
}

/* A range to delete, copied into s and e (FLEXDB_MAX_KEY + 1 bytes each):
 * mostly from a present key to one a few dozen keys on, sometimes between
 * two random keys (start empty now and then), sometimes a whole prefix's
 * worth.  Returns 0 when the two keys came out equal (no range). */
static int m_range(struct mrun *mr, uint8_t *s, uint32_t *sn, uint8_t *e, uint32_t *en)
{
	const uint8_t *k;
	uint32_t kn;
	uint64_t how = rnd_below(&mr->r, 100);
	if (how < 97 && mr->m.n) {
		size_t i = rnd_below(&mr->r, mr->m.n);
		size_t j = i + 1 + rnd_below(&mr->r, rnd_below(&mr->r, 8) ? 6 : 40);
		memcpy(s, mr->m.e[i].k, mr->m.e[i].kn);
		*sn = mr->m.e[i].kn;
		if (j < mr->m.n) {
			memcpy(e, mr->m.e[j].k, mr->m.e[j].kn);
			*en = mr->m.e[j].kn;
		} else {
			memset(e, 0xff, 8);
			*en = 8;
		}
	} else if (how < 98) {
		k = m_key(mr, &kn);
		memcpy(s, k, kn);
		*sn = rnd_below(&mr->r, 8) ? kn : 0;
		k = m_key(mr, &kn);
		memcpy(e, k, kn);
		*en = kn;
		int c = fkey_cmp(*sn ? s : (const uint8_t *)"", *sn, e, *en);
		if (c == 0)
			return 0;
		if (c > 0 && *sn) {
			uint8_t t[FLEXDB_MAX_KEY];
			uint32_t tn = *sn;
			memcpy(t, s, tn);
			memcpy(s, e, *en);
			*sn = *en;
			memcpy(e, t, tn);
			*en = tn;
		}
	} else {
		/* A prefix: [p, p + 1) for a prefix of a present key, most of
		 * it (a short one would take most keys). */
		k = m_existing(mr, &kn);
		uint32_t cut = (uint32_t)rnd_below(&mr->r, 4);
		uint32_t pn = kn > cut ? kn - cut : 1;
		memcpy(s, k, pn);
		*sn = pn;
		memcpy(e, k, pn);
		while (pn && e[pn - 1] == 0xff)
			pn--;
		if (!pn)
			return 0;
		e[pn - 1]++;
		*en = pn;
	}
	return 1;
}

static void m_delrange(struct mrun *mr)
{
	uint8_t *s = malloc(FLEXDB_MAX_KEY + 1), *e = malloc(FLEXDB_MAX_KEY + 1);
	uint32_t sn, en;
	if (m_range(mr, s, &sn, e, &en)) {
		size_t before = mr->m.n;
		int rc = flexdb_delete_range(mr->db, sn ? s : NULL, sn, e, en);
		if (rc)
			MFAIL(mr, "delete_range: %s (%d)", flex_strerror(rc), rc);
		fm_del_range(&mr->m, s, sn, e, en);
		mr->ranges++;
		mr->range_keys += before - mr->m.n;
		/* Just inside, at and around the edges. */
		m_get_one(mr, e, en);
		if (sn)
			m_get_one(mr, s, sn);
		size_t i = fm_lower(&mr->m, s, sn);
		if (i < mr->m.n)
			m_get_one(mr, mr->m.e[i].k, mr->m.e[i].kn);
		if (i > 0)
			m_get_one(mr, mr->m.e[i - 1].k, mr->m.e[i - 1].kn);
	}
	free(s);
	free(e);
}

static void m_batch(struct mrun *mr, struct flexdb_batch *b)
{
	/* The batch's ops, applied to a model copy only once it succeeded. */
	int nb = 1 + (int)rnd_below(&mr->r, 20);
	struct bop {
		uint8_t *k;
		uint32_t kn;
		uint8_t *v;
		uint32_t vn;
		int del; /* 2: a range delete of [k, v) */
	} ops[20];
	flexdb_batch_clear(b);
	for (int j = 0; j < nb; j++) {
		const uint8_t *k;
		uint32_t kn;
		int src = j && rnd_below(&mr->r, 3) == 0 ? (int)rnd_below(&mr->r, (uint64_t)j) : -1;
		if (src >= 0 && ops[src].kn) {
			/* A repeated key (or a range delete's start). */
			k = ops[src].k;
			kn = ops[src].kn;
		} else {
			k = rnd_below(&mr->r, 2) ? m_existing(mr, &kn) : m_key(mr, &kn);
		}
		if (rnd_below(&mr->r, 100) < 2) {
			ops[j].k = malloc(FLEXDB_MAX_KEY + 1);
			ops[j].v = malloc(FLEXDB_MAX_KEY + 1);
			if (!m_range(mr, ops[j].k, &ops[j].kn, ops[j].v, &ops[j].vn)) {
				ops[j].kn = 0;
				ops[j].v[0] = 0;
				ops[j].vn = 1;
			}
			ops[j].del = 2;
			int rc = flexdb_batch_delete_range(b, ops[j].kn ? ops[j].k : NULL, ops[j].kn,
							   ops[j].v, ops[j].vn);
			if (rc)
				MFAIL(mr, "flexdb_batch_delete_range: %s", flex_strerror(rc));
			continue;
		}
		ops[j].k = malloc(kn ? kn : 1);
		memcpy(ops[j].k, k, kn);
		ops[j].kn = kn;
		ops[j].del = rnd_below(&mr->r, 100) < 30;
		ops[j].vn = ops[j].del ? 0 : val_len(&mr->r, 0);
		ops[j].v = malloc(ops[j].vn ? ops[j].vn : 1);
		val_fill(rnd(&mr->r), ops[j].v, ops[j].vn);
		int rc = ops[j].del ? flexdb_batch_delete(b, ops[j].k, kn)
				    : flexdb_batch_put(b, ops[j].k, kn, ops[j].v, ops[j].vn);
		if (rc)
			MFAIL(mr, "flexdb_batch_%s: %s", ops[j].del ? "delete" : "put",
			      flex_strerror(rc));
	}
	int rc = flexdb_write(mr->db, b);
	if (rc)
		MFAIL(mr, "flexdb_write of %d ops: %s (%d)", nb, flex_strerror(rc), rc);
	for (int j = 0; j < nb; j++) {
		if (ops[j].del == 2)
			fm_del_range(&mr->m, ops[j].k, ops[j].kn, ops[j].v, ops[j].vn);
		else if (ops[j].del)
			fm_del(&mr->m, ops[j].k, ops[j].kn);
		else
			fm_put(&mr->m, ops[j].k, ops[j].kn, ops[j].v, ops[j].vn);
	}
	/* Later operations on the same key won: check the batch's keys. */
	for (int j = 0; j < nb; j++)
		if (ops[j].kn)
			m_get_one(mr, ops[j].k, ops[j].kn);
	for (int j = 0; j < nb; j++) {
		free(ops[j].k);
		free(ops[j].v);
	}
	mr->batches++;
}

static void model_run(const char *name, struct flexdb_options opt, long nops, int bigpm)
{
	struct mrun *mr = calloc(1, sizeof(*mr));
	mr->name = name;
	mr->seed = test_seed(name);
	mr->r = mr->seed;
	mr->opt = opt;
	fdb_tmpdir(mr->dir, sizeof(mr->dir), "model");
	pool_make(&mr->pool, 1200, mr->seed ^ 0x706f6f6cu);
	mr->vbuf = malloc(FLEXDB_MAX_VALUE);
	mr->gbuf = malloc(FLEXDB_MAX_VALUE);
	mr->kbuf = malloc(FLEXDB_MAX_KEY + 1);
	for (int i = 0; i < 3; i++)
		mr->bbuf[i] = malloc(FLEXDB_MAX_KEY + 1);
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert(b);
	m_open(mr);
	long next_reopen = 1500 + (long)rnd_below(&mr->r, 2500);
	double t0 = now_sec();
	for (mr->op = 0; mr->op < nops; mr->op++) {
		uint64_t k = rnd_below(&mr->r, 1000);
		const uint8_t *key;
		uint32_t kn;
		int rc;
		if (k < 380) {
			key = m_key(mr, &kn);
			uint32_t vn = val_len(&mr->r, bigpm);
			val_fill(rnd(&mr->r), mr->vbuf, vn);
			rc = flexdb_put(mr->db, key, kn,
					vn || rnd_below(&mr->r, 2) ? mr->vbuf : NULL, vn);
			if (rc)
				MFAIL(mr, "put (%u-byte value): %s (%d)", vn, flex_strerror(rc),
				      rc);
			fm_put(&mr->m, key, kn, mr->vbuf, vn);
			if (rnd_below(&mr->r, 4) == 0)
				m_get_one(mr, key, kn);
		} else if (k < 510) {
			key = rnd_below(&mr->r, 10) < 8 ? m_existing(mr, &kn) : m_key(mr, &kn);
			/* The key may point into the model entry: copy it. */
			uint8_t *kc = malloc(kn);
			memcpy(kc, key, kn);
			rc = flexdb_delete(mr->db, kc, kn);
			if (rc)
				MFAIL(mr, "delete: %s (%d)", flex_strerror(rc), rc);
			fm_del(&mr->m, kc, kn);
			if (rnd_below(&mr->r, 4) == 0)
				m_get_one(mr, kc, kn);
			free(kc);
		} else if (k < 520) {
			m_delrange(mr); /* narrow mostly: the store keeps most keys */
		} else if (k < 760) {
			key = rnd_below(&mr->r, 10) < 6 ? m_existing(mr, &kn) : m_key(mr, &kn);
			m_get_one(mr, key, kn);
		} else if (k < 840) {
			m_batch(mr, b);
		} else if (k < 960) {
			m_scan(mr);
		} else if (k < 965) {
			m_check(mr);
		} else if (k < 975) {
			rc = flexdb_sync(mr->db);
			if (rc)
				MFAIL(mr, "flexdb_sync: %s (%d)", flex_strerror(rc), rc);
		} else if (k < 978) {
			rc = flexdb_compact(mr->db, (int)rnd_below(&mr->r, 2));
			if (rc)
				MFAIL(mr, "flexdb_compact: %s (%d)", flex_strerror(rc), rc);
		} else {
			m_stats(mr);
		}
		if (mr->op == next_reopen) {
			m_reopen(mr);
			next_reopen += 1500 + (long)rnd_below(&mr->r, 2500);
		}
	}
	m_full(mr);
	m_reopen(mr);
	struct flexdb_stats st;
	flexdb_stats(mr->db, &st);
	fprintf(stderr,
		"  %s: %ld ops in %.1f s, %zu keys, %" PRIu64 " gets, %" PRIu64 " scans (%" PRIu64
		" bounded, %" PRIu64 " steps, %" PRIu64 " turns), %" PRIu64 " batches, %" PRIu64
		" checks, %" PRIu64 " range deletes (%" PRIu64 " keys); committer runs %" PRIu64
		", max cache %" PRIu64 ", intervals %" PRIu64 ", GC runs %" PRIu64
		", tree commits %" PRIu64 ", thin-entry lookups %" PRIu64 " (%" PRIu64 " located)\n",
		name, nops, now_sec() - t0, mr->m.n, mr->gets, mr->scans, mr->bounded_scans,
		mr->scan_steps, mr->turns, mr->batches, mr->checks, mr->ranges, mr->range_keys,
		mr->committer_runs, mr->max_cache, st.intervals, mr->gc_runs, mr->tree_commits,
		mr->thin_hits, mr->thin_located);
	/* A cache far smaller than the store keeps most intervals thin. */
	if (opt.cache_size && opt.cache_size <= FDB_TINY_CACHE)
		cr_expect(mr->thin_hits > 0, "%s: no lookup went through a thin entry", name);
	if (opt.memtable_size)
		cr_expect(mr->committer_runs > 0, "%s: the committer never ran", name);
	cr_assert_eq(flexdb_close(mr->db), 0);
	flexdb_batch_free(b);
	tmp_remove(mr->dir);
	fm_free(&mr->m);
	pool_free(&mr->pool);
	free(mr->vbuf);
	free(mr->gbuf);
	free(mr->kbuf);
	for (int i = 0; i < 3; i++)
		free(mr->bbuf[i]);
	free(mr);
}

Test(flexdb, model_random_ops_tiny_config_with_reopens)
{
	model_run("model_tiny", fdb_tiny_opts(), scaled(50000), 2);
}

/* Memtables that hold a few hundred writes (a memtable's arena is charged
 * in 256 KiB blocks), so that the writer keeps filling one while the
 * committer applies the other. */
Test(flexdb, model_random_ops_committer_overlapping_writes)
{
	struct flexdb_options o = fdb_tiny_opts();
	o.memtable_size = 1u << 20;
	model_run("model_overlap", o, scaled(40000), 2);
}

Test(flexdb, model_random_ops_default_config_with_reopens)
{
	model_run("model_default", fdb_default_opts(), scaled(40000), 2);
}

/* A fixed single-threaded stream (no reader, so every commit is the same
 * from run to run): 4096 keys, values of 0..4999 bytes, a quarter of the
 * operations deletes, committed in large sorted memtables.  The store has
 * hundreds of intervals, so the sparse index has several leaves and the
 * index paths for removed and split intervals all run. */
Test(flexdb, large_sorted_commits_keep_keys_unique_and_ordered)
{
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "bigcommit");
	struct flexdb_options o = fdb_tiny_opts();
	o.memtable_size = 32u << 20;
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, &o, &db), 0);
	uint64_t r = 4;
	uint8_t *v = malloc(5000);
	char k[32];
	long n = 57737, failed_at = -1;
	int rc = 0;
	for (long i = 0; i < n; i++) {
		int kl = snprintf(k, sizeof(k), "c0-%05d", (int)(rnd(&r) % 4096));
		uint32_t vl = (uint32_t)(rnd(&r) % 5000);
		memset(v, (int)(i & 0xff), vl);
		rc = rnd(&r) % 4 == 0 ? flexdb_delete(db, k, (size_t)kl)
				      : flexdb_put(db, k, (size_t)kl, v, vl);
		if (rc) {
			failed_at = i;
			break;
		}
	}
	free(v);
	cr_expect_eq(rc, 0, "op %ld failed: %s (the committer failed before)", failed_at,
		     flex_strerror(rc));
	rc = flexdb_close(db);
	cr_expect_eq(rc, 0, "close: %s", flex_strerror(rc));
	rc = flexdb_open(dir, &o, &db);
	cr_assert_eq(rc, 0, "reopen: %s", flex_strerror(rc));
	rc = flexdb_check(db);
	cr_expect_eq(rc, 0, "flexdb_check: %s", flex_strerror(rc));
	struct why w;
	uint64_t d;
	size_t cnt;
	cr_expect(!store_digest(db, &d, &cnt, NULL, &w), "%s", w.msg);
	flexdb_close(db);
	tmp_remove(dir);
}

/* ======================================================================
 * API edges.
 * ====================================================================== */

struct tdb {
	char dir[256];
	struct flexdb *db;
};

static void tdb_open(struct tdb *t, const char *tag, const struct flexdb_options *o)
{
	fdb_tmpdir(t->dir, sizeof(t->dir), tag);
	int rc = flexdb_open(t->dir, o, &t->db);
	cr_assert_eq(rc, 0, "flexdb_open: %s", flex_strerror(rc));
}

static void tdb_reopen(struct tdb *t, const struct flexdb_options *o)
{
	cr_assert_eq(flexdb_close(t->db), 0);
	t->db = NULL;
	int rc = flexdb_open(t->dir, o, &t->db);
	cr_assert_eq(rc, 0, "reopen: %s", flex_strerror(rc));
}

static void tdb_done(struct tdb *t)
{
	if (t->db)
		cr_assert_eq(flexdb_close(t->db), 0);
	t->db = NULL;
	tmp_remove(t->dir);
}

static void put_s(struct flexdb *db, const char *k, const char *v)
{
	int rc = flexdb_put(db, k, strlen(k), v, strlen(v));
	cr_assert_eq(rc, 0, "put %s: %s", k, flex_strerror(rc));
}

static void expect_val(struct flexdb *db, const void *k, size_t kn, const void *v, size_t vn)
{
	uint8_t buf[256];
	size_t got = 999;
	int rc = flexdb_get(db, k, kn, buf, sizeof(buf), &got);
	cr_assert_eq(rc, 0, "get: rc %d (%s)", rc, flex_strerror(rc));
	cr_assert_eq(got, vn, "value length %zu, expected %zu", got, vn);
	cr_assert(vn == 0 || !memcmp(buf, v, vn), "wrong value");
}

static void expect_absent(struct flexdb *db, const void *k, size_t kn)
{
	uint8_t buf[16];
	size_t got;
	int rc = flexdb_get(db, k, kn, buf, sizeof(buf), &got);
	cr_assert_eq(rc, FLEXDB_NOTFOUND, "get: rc %d, expected FLEXDB_NOTFOUND", rc);
}

/* ======================================================================
 * Tidying: flexdb_compact.
 * ====================================================================== */

/* Puts keys of the pool in random order, n at a time, each with a value of
 * random length (empty ones too), into the store and the model. */
static void tidy_puts(struct flexdb *db, struct fmodel *m, const struct keypool *pool, size_t n,
		      uint64_t *r, uint8_t *vbuf)
{
	for (size_t i = 0; i < n; i++) {
		const struct fkey *k = &pool->keys[rnd_below(r, pool->n)];
		uint32_t vn = (uint32_t)rnd_below(r, 300);
		val_fill(rnd(r), vbuf, vn);
		int rc = flexdb_put(db, k->k, k->n, vbuf, vn);
		cr_assert_eq(rc, 0, "put: %s", flex_strerror(rc));
		fm_put(m, k->k, k->n, vbuf, vn);
	}
}

/* Deletes n keys of the pool at random, in the store and the model. */
static void tidy_deletes(struct flexdb *db, struct fmodel *m, const struct keypool *pool, size_t n,
			 uint64_t *r)
{
	for (size_t i = 0; i < n; i++) {
		const struct fkey *k = &pool->keys[rnd_below(r, pool->n)];
		cr_assert_eq(flexdb_delete(db, k->k, k->n), 0);
		fm_del(m, k->k, k->n);
	}
}

/* Gets every pair of the model. */
static void gets_verify(struct flexdb *db, const struct fmodel *m, const char *when)
{
	uint8_t *buf = malloc(FLEXDB_MAX_VALUE);
	for (size_t i = 0; i < m->n; i++) {
		size_t vn;
		int rc = flexdb_get(db, m->e[i].k, m->e[i].kn, buf, FLEXDB_MAX_VALUE, &vn);
		cr_assert(rc == 0 && vn == m->e[i].vn && !memcmp(buf, m->e[i].v, vn),
			  "%s: get of pair %zu: rc %d, %zu bytes for %u", when, i, rc, vn,
			  m->e[i].vn);
	}
	free(buf);
}

/* The store holds exactly the model and passes its check. */
static void tidy_verify(struct flexdb *db, const struct fmodel *m, const char *when)
{
	struct why w;
	uint64_t d;
	size_t n;
	cr_assert_eq(store_digest(db, &d, &n, NULL, &w), 0, "%s: scan: %s", when, w.msg);
	cr_assert(n == m->n && d == m->digest, "%s: the store holds %zu pairs, the model %zu",
		  when, n, m->n);
	gets_verify(db, m, when);
	cr_assert_eq(flexdb_check(db), 0, "%s: flexdb_check", when);
}

/* Extents per interval once tidying is done: each interval in one extent,
 * but one that straddles the end of a segment. */
static double tidy_extents(struct flexdb *db, const char *when)
{
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(db, &st), 0);
	cr_assert_eq(st.tidy_due, 0, "%s: tidying not done", when);
	return (double)st.space.extents / (double)st.intervals;
}

Test(flexdb, compact_leaves_every_interval_in_one_extent_and_every_pair_in_place)
{
	uint64_t seed = test_seed("compact"), r = seed;
	struct flexdb_options o = fdb_tiny_opts();
	o.space.segment_size = 1u << 20; /* few intervals straddle a segment */
	struct tdb t;
	tdb_open(&t, "compact", &o);
	struct keypool pool;
	pool_make(&pool, 6000, seed ^ 0x636f6d70u);
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	struct fmodel m = {0};

	/* Random puts over many small commits scatter the intervals. */
	tidy_puts(t.db, &m, &pool, 12000, &r, vbuf);
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	uint64_t tidied_before = st.tidy_bytes;
	cr_assert_eq(flexdb_compact(t.db, 0), 0);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	double per = tidy_extents(t.db, "after the load");
	fprintf(stderr, "  compact: %" PRIu64 " intervals, %.2f extents each, %" PRIu64
		" bytes rewritten for %" PRIu64 " of pairs\n", st.intervals, per, st.tidy_bytes,
		st.bytes);
	cr_assert_gt(st.tidy_bytes, 0, "nothing was rewritten");
	cr_assert_leq(st.tidy_bytes, 2 * st.bytes + (1u << 20),
		      "tidying rewrote %" PRIu64 " bytes for %" PRIu64 " written", st.tidy_bytes,
		      st.bytes);
	/* Without full, compact spends the credit commits earned, which
	 * covers every interval of the load: it tidies them all unless the
	 * committer's tidying in pauses of the load (a slow machine) spent
	 * part of it on intervals later commits scattered again. */
	cr_assert(per < 1.1 || tidied_before > 0,
		  "%.2f extents per interval after compact, %" PRIu64 " bytes rewritten", per,
		  st.tidy_bytes);
	if (per >= 1.1) {
		cr_assert_eq(flexdb_compact(t.db, 1), 0);
		per = tidy_extents(t.db, "after a whole pass of the load");
		cr_assert_lt(per, 1.1, "%.2f extents per interval after a whole pass", per);
	}
	tidy_verify(t.db, &m, "after compact");

	/* Overwrites and deletes scatter some again; a whole pass tidies
	 * them although nothing was committed since reopen. */
	tdb_reopen(&t, &o);
	tidy_verify(t.db, &m, "after reopen");
	tidy_puts(t.db, &m, &pool, 3000, &r, vbuf);
	tidy_deletes(t.db, &m, &pool, 500, &r);
	tdb_reopen(&t, &o);
	cr_assert_eq(flexdb_compact(t.db, 1), 0);
	per = tidy_extents(t.db, "after a whole pass");
	cr_assert_lt(per, 1.1, "%.2f extents per interval after a whole pass", per);
	tidy_verify(t.db, &m, "after a whole pass");
	tdb_reopen(&t, &o);
	tidy_verify(t.db, &m, "after the last reopen");

	/* A read-only handle has nothing to tidy. */
	cr_assert_eq(flexdb_close(t.db), 0);
	struct flexdb_options ro = o;
	ro.read_only = 1;
	cr_assert_eq(flexdb_open(t.dir, &ro, &t.db), 0);
	cr_assert_eq(flexdb_compact(t.db, 1), FLEX_EREADONLY);
	cr_assert_eq(flexdb_compact(NULL, 0), -EINVAL);
	tdb_done(&t);
	fm_free(&m);
	pool_free(&pool);
	free(vbuf);
}

/* flexdb_compact gives the space back: the pass empties most of the older
 * segments, and those it leaves at most half live are collected at its
 * end, whatever gc_ratio says (2.5 here: no collection on its own). */
Test(flexdb, compact_collects_the_segments_its_pass_left_half_empty)
{
	uint64_t seed = test_seed("compact_space"), r = seed;
	struct flexdb_options o = fdb_tiny_opts();
	o.space.gc_ratio = 2.5;
	struct tdb t;
	tdb_open(&t, "compact_space", &o);
	struct keypool pool;
	pool_make(&pool, 16000, seed ^ 0x73706163u);
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	struct fmodel m = {0};
	tidy_puts(t.db, &m, &pool, 48000, &r, vbuf);
	struct flexdb_stats a, b;
	cr_assert_eq(flexdb_stats(t.db, &a), 0);
	cr_assert_eq(flexdb_compact(t.db, 1), 0);
	cr_assert_eq(flexdb_stats(t.db, &b), 0);
	fprintf(stderr,
		"  compact_space: %" PRIu64 " segments used for %" PRIu64 " live bytes before, %" PRIu64
		" after; the collection moved %" PRIu64 " bytes in %" PRIu64 " runs\n",
		a.space.segments_used, a.space.live_bytes, b.space.segments_used,
		b.space.gc_bytes_moved - a.space.gc_bytes_moved, b.space.gc_runs - a.space.gc_runs);
	/* Every used segment is more than half live, and the pass rewrote
	 * nearly everything into full ones: about the live bytes, and the
	 * segments the pass and the collection left open. */
	uint64_t seg = b.space.segment_size;
	cr_assert_leq(b.space.segments_used * seg, b.space.live_bytes / 10 * 11 + 2 * seg,
		      "seed %" PRIu64 ": %" PRIu64 " segments used for %" PRIu64 " live bytes", seed,
		      b.space.segments_used, b.space.live_bytes);
	cr_assert_leq(b.space.gc_bytes_moved - a.space.gc_bytes_moved, b.space.live_bytes,
		      "seed %" PRIu64 ": the collection copied more than the store", seed);
	tidy_verify(t.db, &m, "after compact");
	tdb_reopen(&t, &o);
	tidy_verify(t.db, &m, "after reopen");
	tdb_done(&t);
	fm_free(&m);
	pool_free(&pool);
	free(vbuf);
}

/* ======================================================================
 * Warming: the committer reads the store into the cache after an open.
 * ====================================================================== */

/* Waits until warming is over (at most 30 s); returns the stats then. */
static struct flexdb_stats warm_wait(struct flexdb *db)
{
	struct flexdb_stats st;
	for (int i = 0; i < 3000; i++) {
		cr_assert_eq(flexdb_stats(db, &st), 0);
		if (!st.warming)
			return st;
		usleep(10000);
	}
	cr_assert_fail("warming did not end in 30 s");
	return st;
}

/* Gets every pair of the model: each value right, and the misses of the
 * interval cache they took. */
static uint64_t warm_gets(struct flexdb *db, const struct fmodel *m, const char *when)
{
	struct flexdb_stats a, b;
	cr_assert_eq(flexdb_stats(db, &a), 0);
	uint8_t *buf = malloc(FLEXDB_MAX_VALUE);
	for (size_t i = 0; i < m->n; i++) {
		size_t vn;
		int rc = flexdb_get(db, m->e[i].k, m->e[i].kn, buf, FLEXDB_MAX_VALUE, &vn);
		cr_assert(rc == 0 && vn == m->e[i].vn && !memcmp(buf, m->e[i].v, vn),
			  "%s: get of pair %zu: rc %d", when, i, rc);
	}
	free(buf);
	cr_assert_eq(flexdb_stats(db, &b), 0);
	return b.cache_misses - a.cache_misses;
}

Test(flexdb, warming_caches_every_interval_it_can_and_keeps_the_bound)
{
	uint64_t seed = test_seed("warm"), r = seed;
	struct flexdb_options o = fdb_tiny_opts();
	o.cache_size = 8u << 20;
	struct tdb t;
	tdb_open(&t, "warm", &o);
	struct keypool pool;
	pool_make(&pool, 90000, seed ^ 0x7761726du);
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	struct fmodel m = {0};
	tidy_puts(t.db, &m, &pool, 120000, &r, vbuf);

	/* A cache with room for every interval: after warming, no lookup
	 * reads an interval. */
	tdb_reopen(&t, &o);
	struct flexdb_stats st = warm_wait(t.db);
	fprintf(stderr, "  warm: %" PRIu64 " intervals, %" PRIu64 " bytes cached of %" PRIu64 "\n",
		st.intervals, st.cache_bytes, st.bytes);
	cr_assert_gt(st.cache_bytes, 0, "nothing was warmed");
	cr_assert_leq(st.cache_bytes, o.cache_size);
	cr_assert_eq(warm_gets(t.db, &m, "warm"), 0, "lookups missed after warming");
	tidy_verify(t.db, &m, "warm");

	/* Without the mapping for reads (no_mmap), warming still asks the
	 * kernel what the page cache holds.  Without INDEX, whose thin
	 * entries would spare the lookups a miss by themselves. */
	struct flexdb_options nm = o;
	nm.space.no_mmap = 1;
	cr_assert_eq(flexdb_close(t.db), 0);
	char ipath[PATH_MAX + 8];
	snprintf(ipath, sizeof(ipath), "%s/INDEX", t.dir);
	cr_assert_eq(unlink(ipath), 0);
	cr_assert_eq(flexdb_open(t.dir, &nm, &t.db), 0);
	st = warm_wait(t.db);
	cr_assert_eq(st.index_from_file, 0);
	cr_assert_gt(st.cache_bytes, 0, "nothing was warmed without the mapping");
	cr_assert_eq(warm_gets(t.db, &m, "warm, no_mmap"), 0,
		     "lookups missed after warming without the mapping");

	/* A cache too small for thin entries of every interval, even
	 * without maps (1 MiB, half of it the tree's): warming stops at the
	 * thin entries' share, the bound holds, and lookups still find every
	 * pair. */
	struct flexdb_options small = o;
	small.cache_size = 1u << 20;
	small.space.tree_cache_size = small.cache_size / 2;
	tdb_reopen(&t, &small);
	st = warm_wait(t.db);
	cr_assert_gt(st.cache_bytes, 0, "nothing was warmed");
	cr_assert_leq(st.cache_bytes, small.cache_size);
	cr_assert_gt(warm_gets(t.db, &m, "small"), 0, "the small cache held everything");
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_leq(st.cache_bytes, small.cache_size);

	/* Writes after the open change what warming reads meanwhile. */
	tdb_reopen(&t, &o);
	tidy_puts(t.db, &m, &pool, 3000, &r, vbuf);
	st = warm_wait(t.db);
	cr_assert_eq(flexdb_sync(t.db), 0);
	tidy_verify(t.db, &m, "warm while writing");

	/* A read-only handle has no committer, so nothing warms: it has
	 * only the thin entries the close's INDEX brought. */
	cr_assert_eq(flexdb_close(t.db), 0);
	struct flexdb_options ro = o;
	ro.read_only = 1;
	cr_assert_eq(flexdb_open(t.dir, &ro, &t.db), 0);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_eq(st.warming, 0);
	cr_assert_eq(st.index_from_file, 1);
	/* The thin share: 3/4 of the interval cache, cache_size less the
	 * tree's quarter. */
	cr_assert_leq(st.cache_bytes, o.cache_size / 16 * 9);
	uint64_t before = st.cache_bytes;
	usleep(100 * 1000);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_eq(st.cache_bytes, before, "something warmed a read-only handle");
	tdb_done(&t);
	fm_free(&m);
	pool_free(&pool);
	free(vbuf);
}

Test(flexdb, invalid_arguments_are_rejected)
{
	struct tdb t;
	tdb_open(&t, "args", NULL);
	struct flexdb *db = t.db;
	uint8_t big[FLEXDB_MAX_KEY + 1];
	memset(big, 'k', sizeof(big));
	size_t vn;
	cr_expect_eq(flexdb_put(NULL, "a", 1, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_put(db, NULL, 1, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_put(db, "a", 0, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_put(db, "n", 1, NULL, 1), -EINVAL, "NULL value with length 1");
	cr_expect_eq(flexdb_delete(NULL, "a", 1), -EINVAL);
	cr_expect_eq(flexdb_delete(db, NULL, 1), -EINVAL);
	cr_expect_eq(flexdb_delete(db, "a", 0), -EINVAL);
	cr_expect_eq(flexdb_get(NULL, "a", 1, NULL, 0, &vn), -EINVAL);
	cr_expect_eq(flexdb_get(db, NULL, 1, NULL, 0, &vn), -EINVAL);
	cr_expect_eq(flexdb_get(db, "a", 0, NULL, 0, &vn), -EINVAL);
	cr_expect_eq(flexdb_sync(NULL), -EINVAL);
	cr_expect_eq(flexdb_put(db, big, FLEXDB_MAX_KEY + 1, "v", 1), FLEX_ETOOBIG);
	cr_expect_eq(flexdb_delete(db, big, FLEXDB_MAX_KEY + 1), FLEX_ETOOBIG);
	cr_expect_eq(flexdb_get(db, big, FLEXDB_MAX_KEY + 1, NULL, 0, &vn), FLEX_ETOOBIG);
	uint8_t *hv = calloc(1, FLEXDB_MAX_VALUE + 1);
	cr_expect_eq(flexdb_put(db, "a", 1, hv, FLEXDB_MAX_VALUE + 1), FLEX_ETOOBIG);
	/* The limits themselves are fine. */
	cr_expect_eq(flexdb_put(db, big, FLEXDB_MAX_KEY, hv, FLEXDB_MAX_VALUE), 0);
	cr_expect_eq(flexdb_get(db, big, FLEXDB_MAX_KEY, NULL, 0, &vn), 0);
	cr_expect_eq(vn, FLEXDB_MAX_VALUE);
	/* Batches check the same way and stay usable. */
	struct flexdb_batch *b = flexdb_batch_new();
	cr_expect_eq(flexdb_batch_put(NULL, "a", 1, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_batch_put(b, NULL, 1, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_batch_put(b, "a", 0, "v", 1), -EINVAL);
	cr_expect_eq(flexdb_batch_delete(b, "a", 0), -EINVAL);
	cr_expect_eq(flexdb_batch_put(b, big, FLEXDB_MAX_KEY + 1, "v", 1), FLEX_ETOOBIG);
	cr_expect_eq(flexdb_batch_put(b, "a", 1, hv, FLEXDB_MAX_VALUE + 1), FLEX_ETOOBIG);
	cr_expect_eq(flexdb_write(NULL, b), -EINVAL);
	cr_expect_eq(flexdb_write(db, NULL), -EINVAL);
	cr_expect_eq(flexdb_write(db, b), 0, "an empty batch is a no-op");
	cr_expect_eq(flexdb_batch_put(b, "x", 1, "1", 1), 0);
	cr_expect_eq(flexdb_write(db, b), 0);
	expect_val(db, "x", 1, "1", 1);
	/* Nothing rejected above reached the store. */
	expect_absent(db, "a", 1);
	flexdb_batch_free(b);
	flexdb_batch_free(NULL);
	free(hv);
	/* Iterator arguments. */
	struct flexdb_iter *it = (struct flexdb_iter *)&t;
	cr_expect_eq(flexdb_iter_open(NULL, &it), -EINVAL);
	cr_expect_null(it);
	cr_expect_eq(flexdb_iter_open(db, NULL), -EINVAL);
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	cr_expect_eq(flexdb_iter_seek(it, NULL, 3), -EINVAL);
	cr_expect_eq(flexdb_iter_seek_for_prev(it, big, FLEXDB_MAX_KEY + 1), FLEX_ETOOBIG);
	flexdb_iter_close(it);
	flexdb_iter_close(NULL);
	cr_expect_eq(flexdb_iter_valid(NULL), 0);
	struct flexdb_stats st;
	cr_expect_eq(flexdb_stats(NULL, &st), -EINVAL);
	cr_expect_eq(flexdb_stats(db, NULL), -EINVAL);
	cr_expect_eq(flexdb_check(NULL), -EINVAL);
	cr_expect_eq(flexdb_close(NULL), 0);
	tdb_done(&t);
}

Test(flexdb, empty_value_is_a_value_not_a_delete)
{
	struct tdb t;
	tdb_open(&t, "empty", NULL);
	cr_assert_eq(flexdb_put(t.db, "e1", 2, NULL, 0), 0);
	cr_assert_eq(flexdb_put(t.db, "e2", 2, "", 0), 0);
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert_eq(flexdb_batch_put(b, "e3", 2, NULL, 0), 0);
	cr_assert_eq(flexdb_batch_put(b, "e4", 2, "zz", 2), 0);
	cr_assert_eq(flexdb_batch_put(b, "e4", 2, "", 0), 0); /* later wins: empty */
	cr_assert_eq(flexdb_write(t.db, b), 0);
	flexdb_batch_free(b);
	for (int round = 0; round < 2; round++) {
		/* Round 0 reads the memtable, round 1 the FlexSpace. */
		for (int i = 1; i <= 4; i++) {
			char k[4] = {'e', (char)('0' + i), 0, 0};
			size_t vn = 77;
			cr_expect_eq(flexdb_get(t.db, k, 2, NULL, 0, &vn), 0, "round %d key %s",
				     round, k);
			cr_expect_eq(vn, 0);
		}
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
		cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
		int n = 0;
		while (flexdb_iter_valid(it)) {
			size_t vn = 9;
			flexdb_iter_value(it, &vn);
			cr_expect_eq(vn, 0);
			n++;
			cr_assert_eq(flexdb_iter_next(it), 0);
		}
		cr_expect_eq(n, 4, "round %d: iteration shows %d of the 4 empty values", round, n);
		flexdb_iter_close(it);
		tdb_reopen(&t, NULL);
	}
	tdb_done(&t);
}

Test(flexdb, get_copies_a_prefix_and_reports_the_full_length)
{
	struct tdb t;
	tdb_open(&t, "prefix", NULL);
	const char *v = "0123456789abcdef";
	put_s(t.db, "k", v);
	for (int round = 0; round < 2; round++) {
		char buf[32];
		memset(buf, '#', sizeof(buf));
		size_t vn = 0;
		cr_expect_eq(flexdb_get(t.db, "k", 1, buf, 5, &vn), 0);
		cr_expect_eq(vn, 16, "round %d", round);
		cr_expect(!memcmp(buf, "01234", 5) && buf[5] == '#', "round %d: prefix copy",
			  round);
		vn = 0;
		cr_expect_eq(flexdb_get(t.db, "k", 1, NULL, 0, &vn), 0);
		cr_expect_eq(vn, 16);
		cr_expect_eq(flexdb_get(t.db, "k", 1, buf, sizeof(buf), NULL), 0);
		cr_expect(!memcmp(buf, v, 16));
		cr_expect_eq(flexdb_get(t.db, "k", 1, NULL, 4, &vn), -EINVAL,
			     "NULL buffer with a nonzero cap");
		cr_expect_eq(flexdb_get(t.db, "kk", 2, NULL, 0, NULL), FLEXDB_NOTFOUND);
		cr_expect_eq(flexdb_get(t.db, "j", 1, NULL, 0, NULL), FLEXDB_NOTFOUND);
		tdb_reopen(&t, NULL);
	}
	tdb_done(&t);
}

Test(flexdb, batch_later_operations_on_a_key_win)
{
	struct tdb t;
	tdb_open(&t, "batch", NULL);
	put_s(t.db, "gone", "old");
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert_eq(flexdb_batch_put(b, "a", 1, "1", 1), 0);
	cr_assert_eq(flexdb_batch_delete(b, "a", 1), 0);
	cr_assert_eq(flexdb_batch_put(b, "a", 1, "2", 1), 0);
	cr_assert_eq(flexdb_batch_put(b, "b", 1, "1", 1), 0);
	cr_assert_eq(flexdb_batch_delete(b, "b", 1), 0);
	cr_assert_eq(flexdb_batch_delete(b, "gone", 4), 0);
	cr_assert_eq(flexdb_batch_put(b, "c", 1, "x", 1), 0);
	cr_assert_eq(flexdb_batch_put(b, "c", 1, "yy", 2), 0);
	cr_assert_eq(flexdb_write(t.db, b), 0);
	for (int round = 0; round < 2; round++) {
		expect_val(t.db, "a", 1, "2", 1);
		expect_absent(t.db, "b", 1);
		expect_absent(t.db, "gone", 4);
		expect_val(t.db, "c", 1, "yy", 2);
		tdb_reopen(&t, NULL);
	}
	/* The batch is unchanged by flexdb_write and can be applied again;
	 * clear empties it. */
	put_s(t.db, "a", "3");
	cr_assert_eq(flexdb_write(t.db, b), 0);
	expect_val(t.db, "a", 1, "2", 1);
	flexdb_batch_clear(b);
	cr_assert_eq(flexdb_batch_put(b, "d", 1, "4", 1), 0);
	cr_assert_eq(flexdb_write(t.db, b), 0);
	expect_val(t.db, "d", 1, "4", 1);
	expect_val(t.db, "c", 1, "yy", 2);
	flexdb_batch_free(b);
	tdb_done(&t);
}

Test(flexdb, second_open_is_busy_in_this_process_and_another)
{
	struct tdb t;
	tdb_open(&t, "busy", NULL);
	struct flexdb *db2 = (struct flexdb *)&t;
	cr_expect_eq(flexdb_open(t.dir, NULL, &db2), FLEX_EBUSY);
	cr_expect_null(db2);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct flexdb *d = NULL;
		int rc = flexdb_open(t.dir, NULL, &d);
		_exit(rc == FLEX_EBUSY && d == NULL ? 0 : 1);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a forked process could open the store held by its parent");
	/* The first handle still works, and after close the store opens. */
	put_s(t.db, "k", "v");
	cr_assert_eq(flexdb_close(t.db), 0);
	t.db = NULL;
	cr_assert_eq(flexdb_open(t.dir, NULL, &t.db), 0);
	expect_val(t.db, "k", 1, "v", 1);
	tdb_done(&t);
}

Test(flexdb, open_rejects_bad_options_and_missing_stores)
{
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "opts");
	char sub[300];
	snprintf(sub, sizeof(sub), "%s/store", dir);
	struct flexdb *db = (struct flexdb *)dir;
	struct flexdb_options o = fdb_default_opts();
	o.no_create = 1;
	cr_expect_eq(flexdb_open(sub, &o, &db), -ENOENT);
	cr_expect_null(db);
	struct stat st;
	cr_expect_neq(stat(sub, &st), 0, "no_create created the directory");
	struct {
		const char *what;
		struct flexdb_options o;
	} bad[8];
	int nb = 0;
	for (int i = 0; i < 8; i++)
		bad[i].o = fdb_default_opts();
	bad[nb].what = "cache_size below 1 MiB";
	bad[nb++].o.cache_size = (1u << 20) - 1;
	bad[nb].what = "cache_size above 1 TiB";
	bad[nb++].o.cache_size = ((uint64_t)1 << 40) + 1;
	bad[nb].what = "memtable_size below 64 KiB";
	bad[nb++].o.memtable_size = (64u << 10) - 1;
	bad[nb].what = "memtable_size above 4 GiB";
	bad[nb++].o.memtable_size = ((uint64_t)4 << 30) + 1;
	bad[nb].what = "segment_size not a power of two";
	bad[nb++].o.space.segment_size = 100000;
	bad[nb].what = "log_limit below 64 KiB";
	bad[nb++].o.space.log_limit = 1000;
	bad[nb].what = "gc_ratio below 1.1";
	bad[nb++].o.space.gc_ratio = 1.01;
	bad[nb].what = "tree cache above half of cache_size";
	bad[nb].o.cache_size = 8u << 20;
	bad[nb++].o.space.tree_cache_size = (4u << 20) + 1;
	for (int i = 0; i < nb; i++) {
		db = (struct flexdb *)dir;
		int rc = flexdb_open(sub, &bad[i].o, &db);
		cr_expect_eq(rc, FLEX_EOPTION, "%s: rc %d (%s)", bad[i].what, rc,
			     flex_strerror(rc));
		cr_expect_null(db, "%s: *out not NULL", bad[i].what);
	}
	cr_expect_eq(flexdb_open(NULL, NULL, &db), -EINVAL);
	cr_expect_eq(flexdb_open(sub, NULL, NULL), -EINVAL);
	/* The limits themselves are accepted. */
	o = fdb_default_opts();
	o.cache_size = 1u << 20;
	o.memtable_size = 64u << 10;
	cr_assert_eq(flexdb_open(sub, &o, &db), 0);
	put_s(db, "k", "v");
	cr_assert_eq(flexdb_close(db), 0);
	o.no_create = 1;
	cr_assert_eq(flexdb_open(sub, &o, &db), 0, "no_create on an existing store");
	expect_val(db, "k", 1, "v", 1);
	cr_assert_eq(flexdb_close(db), 0);
	tmp_remove(dir);
}

/* ---- identity: directories the library did not make ---------------------- */

static void put_file(const char *dir, const char *name, const void *b, size_t n)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f, "%s", p);
	cr_assert_eq(fwrite(b, 1, n, f), n);
	cr_assert_eq(fclose(f), 0);
}

/* flexdb_open with create and without: each fails with `want` and leaves
 * the tree under dir exactly as it was (entries, sizes, mtimes, bytes). */
static void db_refused_unchanged(const char *dir, int want, const char *what)
{
	char *before = dir_snapshot(dir);
	for (int nc = 0; nc < 2; nc++) {
		struct flexdb_options o = fdb_tiny_opts();
		o.no_create = nc;
		struct flexdb *db = (struct flexdb *)dir;
		int rc = flexdb_open(dir, &o, &db);
		cr_expect_eq(rc, want, "%s, no_create %d: %s, not %s", what, nc, flex_strerror(rc),
			     flex_strerror(want));
		cr_expect_null(db);
		if (!rc)
			flexdb_close(db);
		char *after = dir_snapshot(dir);
		cr_expect_str_eq(after, before, "%s, no_create %d: the directory changed", what,
				 nc);
		free(after);
	}
	/* A read-only open refuses what one with no_create does. */
	struct flexdb_options o = fdb_tiny_opts();
	o.read_only = 1;
	struct flexdb *db = (struct flexdb *)dir;
	int rc = flexdb_open(dir, &o, &db);
	cr_expect_eq(rc, want, "%s, read-only: %s, not %s", what, flex_strerror(rc),
		     flex_strerror(want));
	cr_expect_null(db);
	if (!rc)
		flexdb_close(db);
	char *after = dir_snapshot(dir);
	cr_expect_str_eq(after, before, "%s, read-only: the directory changed", what);
	free(after);
	free(before);
}

/* flexspace_open with create and without, likewise. */
static void space_refused_unchanged(const char *dir, int want, const char *what)
{
	char *before = dir_snapshot(dir);
	for (int create = 1; create >= 0; create--) {
		struct flexspace_options o = {.no_create = !create};
		struct flexspace *fs = (struct flexspace *)dir;
		int rc = flexspace_open(dir, &o, &fs);
		cr_expect_eq(rc, want, "%s, create %d: %s, not %s", what, create, flex_strerror(rc),
			     flex_strerror(want));
		cr_expect_null(fs);
		if (!rc)
			flexspace_close(fs);
		char *after = dir_snapshot(dir);
		cr_expect_str_eq(after, before, "%s, create %d: the directory changed", what,
				 create);
		free(after);
	}
	free(before);
}

static void db_put_close(const char *dir, const char *k, const char *v)
{
	struct flexdb_options o = fdb_tiny_opts();
	struct flexdb *db;
	int rc = flexdb_open(dir, &o, &db);
	cr_assert_eq(rc, 0, "%s: %s", dir, flex_strerror(rc));
	put_s(db, k, v);
	cr_assert_eq(flexdb_close(db), 0);
}

static void db_has(const char *dir, int no_create, const char *k, const char *v)
{
	struct flexdb_options o = fdb_tiny_opts();
	o.no_create = no_create;
	struct flexdb *db;
	int rc = flexdb_open(dir, &o, &db);
	cr_assert_eq(rc, 0, "%s: %s", dir, flex_strerror(rc));
	expect_val(db, k, strlen(k), v, strlen(v));
	cr_assert_eq(flexdb_close(db), 0);
}

static int has_ident(const char *dir, int kind)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, dir);
	uint8_t b[FLEX_IDENT_BYTES + 1], want[FLEX_IDENT_BYTES];
	FILE *f = fopen(p, "rb");
	if (!f)
		return 0;
	size_t n = fread(b, 1, sizeof(b), f);
	fclose(f);
	flex_ident_encode(want, kind);
	return n == FLEX_IDENT_BYTES && !memcmp(b, want, n);
}

/* A user's files named like a store's (LOG, DATA, TREE, and space/DATA
 * for FlexDB) are refused untouched. */
Test(flexdb, users_files_named_like_a_stores_are_refused_untouched)
{
	char root[256], d[400], sp[450];
	fdb_tmpdir(root, sizeof(root), "foreign");
	static const char *const names[] = {"LOG", "DATA", "TREE", "LOCK", "WAL-0000000000000001"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(d, sizeof(d), "%s/u%zu", root, i);
		cr_assert_eq(mkdir(d, 0755), 0);
		put_file(d, names[i], "my notes\n", 9);
		db_refused_unchanged(d, FLEX_ENOTSTORE, names[i]);
	}
	static const char *const space_names[] = {"DATA", "LOG", "TREE"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(d, sizeof(d), "%s/s%zu", root, i);
		snprintf(sp, sizeof(sp), "%s/space", d);
		cr_assert_eq(mkdir(d, 0755), 0);
		cr_assert_eq(mkdir(sp, 0755), 0);
		put_file(sp, space_names[i], "mine", 4);
		db_refused_unchanged(d, FLEX_ENOTSTORE, space_names[i]);
	}
	/* An empty space/ is no FlexDB store either. */
	snprintf(d, sizeof(d), "%s/emptyspace", root);
	snprintf(sp, sizeof(sp), "%s/space", d);
	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(mkdir(sp, 0755), 0);
	db_refused_unchanged(d, FLEX_ENOTSTORE, "empty space/");
	tmp_remove(root);
}

/* A FlexSpace opened as a FlexDB store, and a FlexDB store opened as a
 * FlexSpace, are refused with the kind's own status and left unchanged,
 * with or without IDENTITY (stores made before it). */
Test(flexdb, the_other_kind_of_store_is_refused_unchanged)
{
	char root[256], fsd[400], dbd[400], p[500];
	fdb_tmpdir(root, sizeof(root), "kind");
	snprintf(fsd, sizeof(fsd), "%s/space-only", root);
	snprintf(dbd, sizeof(dbd), "%s/db", root);
	struct flexspace_options so = {0};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(fsd, &so, &fs), 0);
	cr_assert_eq(flexspace_write(fs, "abc", 0, 3), 3);
	cr_assert_eq(flexspace_close(fs), 0);
	db_put_close(dbd, "k", "v");
	for (int legacy = 0; legacy < 2; legacy++) {
		if (legacy) {
			snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, fsd);
			cr_assert_eq(unlink(p), 0);
			snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, dbd);
			cr_assert_eq(unlink(p), 0);
			snprintf(p, sizeof(p), "%s/space/" FLEX_IDENT_NAME, dbd);
			cr_assert_eq(unlink(p), 0);
		}
		db_refused_unchanged(fsd, FLEX_EKIND_SPACE,
				     legacy ? "legacy FlexSpace" : "FlexSpace");
		space_refused_unchanged(dbd, FLEX_EKIND_DB, legacy ? "legacy FlexDB" : "FlexDB");
	}
	/* Each still opens as what it is; space/ of a store is a FlexSpace. */
	db_has(dbd, 0, "k", "v");
	snprintf(p, sizeof(p), "%s/space", dbd);
	cr_assert_eq(flexspace_open(p, &so, &fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(fsd, &so, &fs), 0);
	cr_assert_eq(flexspace_size(fs), 3);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(root);
}

/* A store made before IDENTITY existed (none in the store nor in space/)
 * opens; without create nothing is added, with create both get theirs. */
Test(flexdb, store_made_before_identities_still_opens)
{
	char root[256], d[400], p[500];
	fdb_tmpdir(root, sizeof(root), "legacy");
	snprintf(d, sizeof(d), "%s/old", root);
	db_put_close(d, "k", "old value");
	snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, d);
	cr_assert_eq(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/space/" FLEX_IDENT_NAME, d);
	cr_assert_eq(unlink(p), 0);
	db_has(d, 1, "k", "old value");
	cr_expect(!has_ident(d, FLEX_KIND_DB), "an open without create added IDENTITY");
	db_has(d, 0, "k", "old value");
	cr_expect(has_ident(d, FLEX_KIND_DB), "the store did not get its IDENTITY");
	snprintf(p, sizeof(p), "%s/space", d);
	cr_expect(has_ident(p, FLEX_KIND_SPACE), "space/ did not get its IDENTITY");
	db_has(d, 1, "k", "old value");
	/* Adding them cut short: the store's IDENTITY empty, space/'s a
	 * prefix.  Opens; completed only without no_create. */
	uint8_t id[FLEX_IDENT_BYTES];
	flex_ident_encode(id, FLEX_KIND_SPACE);
	put_file(p, FLEX_IDENT_NAME, id, 9);
	put_file(d, FLEX_IDENT_NAME, "", 0);
	db_has(d, 1, "k", "old value");
	cr_expect(!has_ident(d, FLEX_KIND_DB) && !has_ident(p, FLEX_KIND_SPACE));
	db_has(d, 0, "k", "old value");
	cr_expect(has_ident(d, FLEX_KIND_DB) && has_ident(p, FLEX_KIND_SPACE));
	tmp_remove(root);
}

/* A FlexDB creation cut short: the store's IDENTITY alone, cut short
 * itself, or with space/ holding only a space IDENTITY cut short. */
Test(flexdb, creation_cut_short_is_finished)
{
	char root[256], d[400], sp[450];
	fdb_tmpdir(root, sizeof(root), "cutshort");
	uint8_t dbid[FLEX_IDENT_BYTES], spid[FLEX_IDENT_BYTES];
	flex_ident_encode(dbid, FLEX_KIND_DB);
	flex_ident_encode(spid, FLEX_KIND_SPACE);
	for (int step = 0; step < 4; step++) {
		snprintf(d, sizeof(d), "%s/step%d", root, step);
		snprintf(sp, sizeof(sp), "%s/space", d);
		cr_assert_eq(mkdir(d, 0755), 0);
		put_file(d, FLEX_IDENT_NAME, dbid, step == 0 ? 0 : step == 1 ? 9 : sizeof(dbid));
		if (step >= 2)
			put_file(d, "LOCK", "", 0);
		if (step == 3) {
			cr_assert_eq(mkdir(sp, 0755), 0);
			put_file(sp, FLEX_IDENT_NAME, spid, 5);
		}
		char *before = dir_snapshot(d);
		for (int ro = 0; ro < 2; ro++) {
			struct flexdb_options o = fdb_tiny_opts();
			o.no_create = !ro;
			o.read_only = ro;
			struct flexdb *db;
			cr_expect_eq(flexdb_open(d, &o, &db), -ENOENT, "step %d, read-only %d",
				     step, ro);
			char *after = dir_snapshot(d);
			cr_expect_str_eq(after, before, "step %d, read-only %d: open changed it",
					 step, ro);
			free(after);
		}
		free(before);
		db_put_close(d, "k", "finished");
		db_has(d, 1, "k", "finished");
		cr_expect(has_ident(d, FLEX_KIND_DB) && has_ident(sp, FLEX_KIND_SPACE));
	}
	tmp_remove(root);
}

/* ======================================================================
 * Iterators.
 * ====================================================================== */

Test(flexdb, iterator_on_an_empty_store_is_invalid_everywhere)
{
	struct tdb t;
	tdb_open(&t, "iterempty", NULL);
	for (int round = 0; round < 3; round++) {
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0, "fresh iterator valid");
		cr_expect_eq(flexdb_iter_seek(it, NULL, 0), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		cr_expect_eq(flexdb_iter_seek(it, "m", 1), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		cr_expect_eq(flexdb_iter_seek_for_prev(it, NULL, 0), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		cr_expect_eq(flexdb_iter_seek_for_prev(it, "\xff\xff", 2), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		size_t n = 5;
		cr_expect_null(flexdb_iter_key(it, &n));
		cr_expect_null(flexdb_iter_value(it, &n));
		flexdb_iter_next(it);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		flexdb_iter_prev(it);
		cr_expect_eq(flexdb_iter_valid(it), 0);
		flexdb_iter_close(it);
		/* Round 1: every key deleted (tombstones in the memtable over
		 * pairs in the FlexSpace); round 2: after a reopen. */
		if (round == 0) {
			for (int i = 0; i < 300; i++) {
				char k[16];
				snprintf(k, sizeof(k), "k%04d", i);
				put_s(t.db, k, "v");
			}
			tdb_reopen(&t, NULL);
			for (int i = 0; i < 300; i++) {
				char k[16];
				snprintf(k, sizeof(k), "k%04d", i);
				cr_assert_eq(flexdb_delete(t.db, k, 5), 0);
			}
		} else if (round == 1) {
			tdb_reopen(&t, NULL);
		}
	}
	tdb_done(&t);
}

/* A closed iterator is kept for the next open: what that open returns
 * must be a fresh iterator, whatever bounds, prefix, position and
 * direction the closed one had, and iterators held together are
 * distinct. */
Test(flexdb, reopened_iterator_forgets_bounds_prefix_and_position)
{
	struct tdb t;
	tdb_open(&t, "iterpark", NULL);
	for (int i = 0; i < 500; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%04d", i);
		put_s(t.db, k, "v");
	}
	for (int round = 0; round < 2; round++) {
		struct flexdb_iter *its[6];
		for (int j = 0; j < 6; j++) {
			cr_assert_eq(flexdb_iter_open(t.db, &its[j]), 0);
			for (int q = 0; q < j; q++)
				cr_assert_neq(its[q], its[j], "two open iterators share one");
			cr_expect_eq(flexdb_iter_valid(its[j]), 0, "a new iterator is valid");
			cr_expect_eq(flexdb_iter_set_bounds(its[j], "k0100", 5, "k0200", 5), 0);
			cr_expect_eq(flexdb_iter_set_prefix(its[j], "k01", 3), 0);
			cr_expect_eq(flexdb_iter_seek_for_prev(its[j], "k0150", 5), 0);
			cr_expect_eq(flexdb_iter_valid(its[j]), 1);
		}
		for (int j = 0; j < 6; j++)
			flexdb_iter_close(its[j]);
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
		/* The first four closed wait in the handle's slots. */
		int parked = 0;
		for (int j = 0; j < 4; j++)
			parked |= it == its[j];
		cr_expect(parked, "the open did not take a parked iterator");
		cr_expect_eq(flexdb_iter_valid(it), 0, "a reopened iterator is valid");
		cr_expect_null(flexdb_iter_key(it, NULL));
		cr_expect_eq(flexdb_iter_next(it), -EINVAL);
		cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
		int n = 0;
		for (; flexdb_iter_valid(it); n++) {
			char k[16];
			snprintf(k, sizeof(k), "k%04d", n);
			size_t kl;
			const void *key = flexdb_iter_key(it, &kl);
			cr_assert(kl == 5 && !memcmp(key, k, 5), "pair %d is not %s", n, k);
			cr_assert_eq(flexdb_iter_next(it), 0);
		}
		cr_expect_eq(n, 500, "a reopened iterator saw %d of 500 keys", n);
		flexdb_iter_close(it);
		tdb_reopen(&t, NULL);
	}
	tdb_done(&t);
}

/* Walks [from the first key] forwards and backwards, expecting exactly
 * keys[0..n) in order. */
static void expect_keys(struct flexdb *db, const char *const *keys, const size_t *lens, int n,
			const char *what)
{
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
	for (int i = 0; i < n; i++) {
		size_t kn;
		const void *k = flexdb_iter_key(it, &kn);
		cr_assert(k && kn == lens[i] && !memcmp(k, keys[i], kn), "%s: forward position %d",
			  what, i);
		cr_assert_eq(flexdb_iter_next(it), 0);
	}
	cr_assert_eq(flexdb_iter_valid(it), 0, "%s: more keys than expected", what);
	cr_assert_eq(flexdb_iter_seek_for_prev(it, NULL, 0), 0);
	for (int i = n - 1; i >= 0; i--) {
		size_t kn;
		const void *k = flexdb_iter_key(it, &kn);
		cr_assert(k && kn == lens[i] && !memcmp(k, keys[i], kn), "%s: backward position %d",
			  what, i);
		cr_assert_eq(flexdb_iter_prev(it), 0);
	}
	cr_assert_eq(flexdb_iter_valid(it), 0, "%s: more keys than expected backwards", what);
	flexdb_iter_close(it);
}

Test(flexdb, binary_keys_sort_by_memcmp_shorter_first)
{
	struct tdb t;
	tdb_open(&t, "binkeys", NULL);
	static const char *const keys[] = {"\x00",  "\x00\x00",	 "\x00\xff",  "a",
					   "a\x00", "a\x00\x00", "a\x00\x01", "a\x01",
					   "ab",    "\xff",	 "\xff\x00",  "\xff\xff"};
	static const size_t lens[] = {1, 2, 2, 1, 2, 3, 3, 2, 2, 1, 2, 2};
	int n = 12;
	/* Insert in a scrambled order. */
	for (int i = 0; i < n; i++) {
		int j = (i * 7) % n;
		cr_assert_eq(flexdb_put(t.db, keys[j], lens[j], keys[j], lens[j]), 0);
	}
	for (int round = 0; round < 2; round++) {
		expect_keys(t.db, keys, lens, n, round ? "FlexSpace" : "memtable");
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
		size_t kn;
		const void *k;
		/* seek: first >= key; seek_for_prev: last <= key. */
		cr_assert_eq(flexdb_iter_seek(it, "a\x00\x00\x00", 4), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 3 && !memcmp(k, "a\x00\x01", 3), "seek between prefixes");
		cr_assert_eq(flexdb_iter_seek_for_prev(it, "a\x00\x00\x00", 4), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 3 && !memcmp(k, "a\x00\x00", 3), "seek_for_prev to a prefix");
		cr_assert_eq(flexdb_iter_seek(it, "a", 1), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 1 && !memcmp(k, "a", 1), "seek to an exact key");
		cr_assert_eq(flexdb_iter_prev(it), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 2 && !memcmp(k, "\x00\xff", 2), "turning around after a seek");
		cr_assert_eq(flexdb_iter_next(it), 0);
		cr_assert_eq(flexdb_iter_next(it), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 2 && !memcmp(k, "a\x00", 2), "turning around again");
		cr_assert_eq(flexdb_iter_seek(it, "\xff\xff\x00", 3), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0, "seek past the last key");
		cr_assert_eq(flexdb_iter_seek_for_prev(it, "\x00", 1), 0);
		k = flexdb_iter_key(it, &kn);
		cr_expect(k && kn == 1 && !memcmp(k, "\x00", 1), "seek_for_prev to the first key");
		cr_assert_eq(flexdb_iter_prev(it), 0);
		cr_expect_eq(flexdb_iter_valid(it), 0, "prev before the first key");
		flexdb_iter_close(it);
		tdb_reopen(&t, NULL);
	}
	tdb_done(&t);
}

/* Documented (flexdb.h): an iterator is not a snapshot, but keys come in
 * strictly increasing order, each at most once; every pair returned was
 * the key's value at some moment after the seek; a key present and
 * unchanged from the seek to the end is always returned.  Writes after the
 * seek (deletes, new keys, overwrites, far beyond the first chunk) may or
 * may not be seen.  Overwrites and deletes made before the seek must be
 * seen. */
static void iter_changes_check(int commit_first, int reverse)
{
	struct tdb t;
	struct flexdb_options o = fdb_default_opts();
	tdb_open(&t, commit_first ? "iterfs" : "itermt", &o);
	int n = 600;
	char k[32], v[32];
	for (int i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "s%05d", i * 2);
		snprintf(v, sizeof(v), "v%d", i);
		put_s(t.db, k, v);
	}
	/* Before the seek: overwrite every 7th, delete every 11th. */
	for (int i = 0; i < n; i += 7) {
		snprintf(k, sizeof(k), "s%05d", i * 2);
		snprintf(v, sizeof(v), "w%d", i);
		put_s(t.db, k, v);
	}
	for (int i = 5; i < n; i += 11) {
		snprintf(k, sizeof(k), "s%05d", i * 2);
		cr_assert_eq(flexdb_delete(t.db, k, strlen(k)), 0);
	}
	if (commit_first)
		tdb_reopen(&t, &o);
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
	cr_assert_eq(
	    reverse ? flexdb_iter_seek_for_prev(it, NULL, 0) : flexdb_iter_seek(it, NULL, 0), 0);
	/* After the seek: changes around positions 300..420 (far past the
	 * first chunk either way). */
	uint8_t changed[1200] = {0};
	for (int i = 300; i < 320; i++) {
		snprintf(k, sizeof(k), "s%05d", i * 2);
		cr_assert_eq(flexdb_delete(t.db, k, strlen(k)), 0);
		changed[i * 2] = 1;
		snprintf(k, sizeof(k), "s%05d", i * 2 + 1);
		put_s(t.db, k, "new");
		changed[i * 2 + 1] = 1;
		snprintf(k, sizeof(k), "s%05d", (i + 100) * 2);
		put_s(t.db, k, "overwritten");
		changed[(i + 100) * 2] = 1;
	}
	cr_assert_eq(flexdb_sync(t.db), 0);
	uint8_t seen[1200] = {0};
	long last = reverse ? 100000 : -1;
	while (flexdb_iter_valid(it)) {
		size_t kn, vn;
		const char *kk = flexdb_iter_key(it, &kn);
		const char *vv = flexdb_iter_value(it, &vn);
		cr_assert(kn == 6 && kk[0] == 's', "unexpected key");
		char kb[8];
		memcpy(kb, kk + 1, 5);
		kb[5] = 0;
		long x = atol(kb);
		cr_assert(x >= 0 && x < 1200);
		cr_assert(reverse ? x < last : x > last,
			  "keys not strictly %s: s%05ld after s%05ld",
			  reverse ? "decreasing" : "increasing", x, last);
		last = x;
		seen[x] = 1;
		/* The value: the pre-seek one, or a newer one for keys changed
		 * after the seek. */
		char want[32];
		int i = (int)(x / 2);
		if (x % 2)
			snprintf(want, sizeof(want), "new");
		else if (i % 7 == 0)
			snprintf(want, sizeof(want), "w%d", i);
		else
			snprintf(want, sizeof(want), "v%d", i);
		int ok = vn == strlen(want) && !memcmp(vv, want, vn);
		if (!ok && changed[x])
			ok = vn == 11 && !memcmp(vv, "overwritten", 11);
		cr_assert(ok, "s%05ld shows %.*s, expected %s%s", x, (int)vn, vv, want,
			  changed[x] ? " or its newer value" : "");
		cr_assert(!(i % 11 == 5 && x % 2 == 0 && !changed[x]),
			  "s%05ld was deleted before the seek but is returned", x);
		cr_assert(x % 2 == 0 || changed[x], "s%05ld never existed", x);
		cr_assert_eq(reverse ? flexdb_iter_prev(it) : flexdb_iter_next(it), 0);
	}
	/* Every key present and unchanged from the seek on was returned. */
	for (int i = 0; i < n; i++) {
		int x = i * 2;
		if (i % 11 == 5 || changed[x])
			continue;
		cr_assert(seen[x], "s%05d, present and unchanged since the seek, was not returned",
			  x);
	}
	/* A new seek sees the writes. */
	cr_assert_eq(flexdb_iter_seek(it, "s00601", 6), 0);
	size_t kn;
	const char *kk = flexdb_iter_key(it, &kn);
	cr_expect(kk && kn == 6 && !memcmp(kk, "s00601", 6), "a new seek sees new keys");
	flexdb_iter_close(it);
	tdb_done(&t);
}

Test(flexdb, iterator_with_writes_after_its_seek_memtable)
{
	iter_changes_check(0, 0);
	iter_changes_check(0, 1);
}

Test(flexdb, iterator_with_writes_after_its_seek_flexspace)
{
	iter_changes_check(1, 0);
	iter_changes_check(1, 1);
}

/* LESSONS: an iterator that held locks deadlocked a sync or a memtable
 * switch on its own thread.  Here one thread keeps an iterator open and
 * positioned while it writes enough to switch memtables many times,
 * syncs, deletes, and moves the iterator in between. */
Test(flexdb, open_iterator_never_blocks_writes_sync_or_committer_on_its_thread, .timeout = 60)
{
	struct tdb t;
	struct flexdb_options o = fdb_tiny_opts();
	tdb_open(&t, "iterlock", &o);
	char k[32];
	uint8_t v[700];
	memset(v, 'v', sizeof(v));
	for (int i = 0; i < 2000; i += 2) {
		snprintf(k, sizeof(k), "i%06d", i);
		cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
	}
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
	cr_assert_eq(flexdb_iter_seek(it, "i000500", 7), 0);
	cr_assert(flexdb_iter_valid(it));
	struct flexdb_stats st0, st1;
	flexdb_stats(t.db, &st0);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 400; i++) {
			snprintf(k, sizeof(k), "i%06d", (round * 400 + i) * 7 % 4000);
			if (i % 5 == 4)
				cr_assert_eq(flexdb_delete(t.db, k, strlen(k)), 0);
			else
				cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
		}
		cr_assert_eq(flexdb_sync(t.db), 0);
		if (flexdb_iter_valid(it))
			cr_assert_eq(round % 2 ? flexdb_iter_prev(it) : flexdb_iter_next(it), 0);
		else
			cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
	}
	flexdb_stats(t.db, &st1);
	cr_expect_gt(st1.committer_runs, st0.committer_runs,
		     "the committer did not run while the iterator was open");
	cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
	int n = 0;
	while (flexdb_iter_valid(it)) {
		n++;
		cr_assert_eq(flexdb_iter_next(it), 0);
	}
	cr_expect_gt(n, 0);
	flexdb_iter_close(it);
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);
}

/* More deleted keys in a row than the iterator reads per chunk, in the
 * memtable over pairs in the FlexSpace and the other way round. */
/* Bytes read from the FlexSpace's DATA file through the io table (a table
 * other than flex_io_posix() turns the mapping off: every read is seen). */
static atomic_int ra_data_fd = -1;
static atomic_ullong ra_bytes;

static int ra_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	int fd = flex_io_posix()->open(flex_io_posix(), path, flags, mode);
	size_t n = strlen(path);
	if (fd >= 0 && n >= 5 && !strcmp(path + n - 5, "/DATA"))
		atomic_store(&ra_data_fd, fd);
	return fd;
}

static ssize_t ra_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	(void)io;
	ssize_t r = flex_io_posix()->pread(flex_io_posix(), fd, buf, len, off);
	if (r > 0 && fd == atomic_load(&ra_data_fd))
		atomic_fetch_add(&ra_bytes, (unsigned long long)r);
	return r;
}

static int ra_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	if (fd == atomic_load(&ra_data_fd))
		for (int i = 0; i < n; i++)
			atomic_fetch_add(&ra_bytes, (unsigned long long)v[i].len);
	return flex_io_posix()->read_batch(flex_io_posix(), fd, v, n);
}

/* Walks from a cold cache: forwards from the lower bound or backwards from
 * the upper; returns the keys seen and the DATA bytes read. */
static int ra_walk(struct tdb *t, const struct flexdb_options *o, const char *lower,
		   const char *upper, int reverse, uint64_t *bytes)
{
	tdb_reopen(t, o);
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(t->db, &it), 0);
	if (lower || upper)
		cr_assert_eq(flexdb_iter_set_bounds(it, lower, lower ? strlen(lower) : 0, upper,
						    upper ? strlen(upper) : 0),
			     0);
	atomic_store(&ra_bytes, 0);
	int rc = reverse ? flexdb_iter_seek_for_prev(it, NULL, 0)
			 : flexdb_iter_seek(it, lower, lower ? strlen(lower) : 0);
	int n = 0;
	while (!rc && flexdb_iter_valid(it) && n < 10) {
		n++;
		rc = reverse ? flexdb_iter_prev(it) : flexdb_iter_next(it);
	}
	cr_assert_eq(rc, 0, "%s", flex_strerror(rc));
	*bytes = atomic_load(&ra_bytes);
	flexdb_iter_close(it);
	return n;
}

/* Four rounds of 8000 puts of random keys out of a million, 100-byte
 * values, each round synced. */
static void put_random_rounds(struct flexdb *db, uint64_t r)
{
	char k[32];
	uint8_t v[100];
	memset(v, 'v', sizeof(v));
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 8000; i++) {
			snprintf(k, sizeof(k), "p%08" PRIu64, rnd_below(&r, 1000000));
			cr_assert_eq(flexdb_put(db, k, strlen(k), v, sizeof(v)), 0);
		}
		cr_assert_eq(flexdb_sync(db), 0);
	}
}

/* Random puts split an interval's bytes into about one extent per pair;
 * the committer rewrites an interval whose extents pass half its pairs in
 * the run that next changes it, so intervals stay in few pieces, with a
 * cache that holds them all and with one that holds few. */
Test(flexdb, random_puts_keep_intervals_in_few_extents)
{
	for (int small = 0; small < 2; small++) {
		struct flexdb_options o = fdb_default_opts();
		o.memtable_size = 64u << 10; /* many commits, each a few pairs per interval */
		if (small)
			o.cache_size = 1u << 20;
		struct tdb t;
		tdb_open(&t, "pieces", &o);
		put_random_rounds(t.db, test_seed("pieces"));
		tdb_reopen(&t, &o);
		struct flexdb_stats st;
		cr_assert_eq(flexdb_stats(t.db, &st), 0);
		double per = (double)st.space.extents / (double)st.intervals;
		fprintf(stderr, "  %s cache: %" PRIu64 " intervals, %.1f extents each\n",
			small ? "small" : "default", st.intervals, per);
		/* Intervals hold 16 to 32 pairs; scattered past half of them
		 * they are rewritten at their next change. */
		cr_expect_leq(per, 12.0, "%.1f extents per interval", per);
		cr_assert_eq(flexdb_check(t.db), 0);
		tdb_done(&t);
	}
}

/* A store small against its memtable: a tree commit costs less than the
 * rewrites, so runs leave scattered intervals as they are (fdb_store.c,
 * ival_scattered) and DATA gets about the pairs' bytes; flexdb_compact
 * then tidies each interval once. */
Test(flexdb, a_store_small_against_its_memtable_leaves_rewrites_to_tidying)
{
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = 512u << 10; /* a seventh of the store at the end: k = 7 */
	struct tdb t;
	tdb_open(&t, "small_store", &o);
	put_random_rounds(t.db, test_seed("small_store"));
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	double per = (double)st.space.extents / (double)st.intervals;
	double data = (double)st.space.data_bytes_written / (double)st.bytes;
	fprintf(stderr, "  %" PRIu64 " intervals, %.1f extents each, DATA written %.2f x the pairs\n",
		st.intervals, per, data);
	cr_assert_gt(per, 12.0, "scattered past half their pairs, and not rewritten");
	cr_assert_lt(data, 1.5, "no rewrites: DATA holds about the pairs written");
	cr_assert_eq(flexdb_compact(t.db, 1), 0);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	per = (double)st.space.extents / (double)st.intervals;
	cr_assert_leq(per, 1.5, "%.1f extents per interval after a full compaction", per);
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_reopen(&t, &o);
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);
}

/* Open reads the first bytes of every interval's anchor pair in batches,
 * and alone the anchors whose key does not fit in what a batch reads.
 * Thousands of intervals (many batches), keys of 1 to 700 bytes: every
 * reopen, writable or read-only, finds the same intervals and every pair. */
static void anchor_key(char *k, size_t cap, uint64_t i, uint32_t *klen)
{
	uint32_t len = 12 + (uint32_t)(i * 2654435761u % 7 == 0 ? 300 + i % 400 : i % 40);
	if (len > cap)
		len = (uint32_t)cap;
	memset(k, 'a' + (int)(i % 26), len);
	char head[16];
	snprintf(head, sizeof(head), "%010" PRIu64, i);
	memcpy(k, head, 10);
	*klen = len;
}

Test(flexdb, reopen_finds_every_interval_through_batched_anchor_reads)
{
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = 256u << 10;
	struct tdb t;
	tdb_open(&t, "anchors", &o);
	const uint64_t n = (uint64_t)scaled(20000);
	uint64_t r = test_seed("anchors");
	char k[800];
	uint8_t v[256], got[256];
	uint32_t klen;
	for (uint64_t j = 0; j < n; j++) {
		uint64_t i = (j * 7919) % n; /* a shuffled order: many extents per interval */
		anchor_key(k, sizeof(k), i, &klen);
		memset(v, (int)(i & 0xff), sizeof(v));
		cr_assert_eq(flexdb_put(t.db, k, klen, v, (size_t)(i % 200)), 0);
		if (rnd_below(&r, 4000) == 0)
			cr_assert_eq(flexdb_sync(t.db), 0);
	}
	tdb_reopen(&t, &o);
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	uint64_t intervals = st.intervals;
	cr_assert_gt(intervals, 2 * FLEXSPACE_LOCATE_MAX, "%" PRIu64 " intervals", intervals);
	/* Rounds 0 and 1 from the INDEX the close left, 2 and 3 from the
	 * anchors. */
	for (int round = 0; round < 4; round++) {
		struct flexdb_options ro = o;
		ro.read_only = round & 1;
		cr_assert_eq(flexdb_close(t.db), 0);
		char path[512];
		snprintf(path, sizeof(path), "%s/INDEX", t.dir);
		if (round >= 2)
			(void)unlink(path);
		cr_assert_eq(flexdb_open(t.dir, &ro, &t.db), 0);
		cr_assert_eq(flexdb_stats(t.db, &st), 0);
		cr_assert_eq(st.index_from_file, round < 2, "round %d", round);
		cr_expect_eq(st.intervals, intervals, "%" PRIu64 " intervals, %" PRIu64 " before",
			     st.intervals, intervals);
		for (uint64_t i = 0; i < n; i++) {
			anchor_key(k, sizeof(k), i, &klen);
			size_t len = 0;
			int rc = flexdb_get(t.db, k, klen, got, sizeof(got), &len);
			cr_assert_eq(rc, 0, "key %" PRIu64 ": %s", i, flex_strerror(rc));
			cr_assert_eq(len, i % 200);
		}
		cr_assert_eq(flexdb_check(t.db), 0);
	}
	tdb_reopen(&t, &o);
	tdb_done(&t);
}

/* A clean close leaves the file INDEX (the sparse index and the cache's
 * thin entries); the next open takes them from it and gives the same
 * store.  An INDEX that does not describe the contents -- written before
 * the last change, damaged anywhere, cut short, empty -- is ignored and
 * the anchors are read, with nothing lost. */
static void index_file_copy(const char *dir, const char *from, const char *to)
{
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/%s", dir, from);
	snprintf(b, sizeof(b), "%s/%s", dir, to);
	FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
	cr_assert(in && out, "copy %s to %s", a, b);
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		cr_assert_eq(fwrite(buf, 1, n, out), n);
	fclose(in);
	cr_assert_eq(fclose(out), 0);
}

static int index_from_file(struct flexdb *db)
{
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(db, &st), 0);
	return st.index_from_file;
}

Test(flexdb, index_file_opens_the_same_store_and_is_ignored_unless_current)
{
	uint64_t seed = test_seed("indexfile"), r = seed;
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = 256u << 10;
	o.cache_size = 2u << 20; /* thin entries for part of the store only */
	struct tdb t;
	tdb_open(&t, "indexfile", &o);
	struct keypool pool;
	pool_make(&pool, 20000, seed ^ 0x696478u);
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	struct fmodel m = {0};
	cr_assert_eq(index_from_file(t.db), 0, "a new store has no INDEX");
	tidy_puts(t.db, &m, &pool, 30000, &r, vbuf);
	tidy_deletes(t.db, &m, &pool, 3000, &r);
	tdb_reopen(&t, &o);
	cr_assert_eq(index_from_file(t.db), 1, "a clean close's INDEX was not used");
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_eq(st.intervals_uncounted, 0);
	cr_assert_eq(st.keys, m.n, "%" PRIu64 " keys counted, %zu in the model", st.keys, m.n);
	cr_assert_gt(st.cache_bytes, 0, "no thin entry came with the index");
	/* Within the interval cache (cache_size less the tree's quarter):
	 * warming may already be making thin entries whole. */
	cr_assert_leq(st.cache_bytes, o.cache_size / 4 * 3);
	tidy_verify(t.db, &m, "opened from INDEX");
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_gt(st.cache_thin_hits, 0);
	/* Their maps came too: a thin hit reads without the FlexTree. */
	cr_assert_gt(st.cache_thin_located, 0);
	uint64_t intervals;
	fprintf(stderr, "  index file: %" PRIu64 " intervals, %" PRIu64 " thin hits, %" PRIu64
		" misses\n", st.intervals, st.cache_thin_hits, st.cache_misses);

	/* Read-only handles use it and leave it as it is. */
	cr_assert_eq(flexdb_close(t.db), 0);
	struct flexdb_options ro = o;
	ro.read_only = 1;
	cr_assert_eq(flexdb_open(t.dir, &ro, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 1);
	tidy_verify(t.db, &m, "read-only from INDEX");
	cr_assert_eq(flexdb_close(t.db), 0);

	/* A writable session that changes nothing keeps it as it is. */
	char ipath[512];
	snprintf(ipath, sizeof(ipath), "%s/INDEX", t.dir);
	struct stat before, after;
	cr_assert_eq(stat(ipath, &before), 0);
	cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 1);
	tidy_verify(t.db, &m, "writable, from INDEX");
	cr_assert_eq(flexdb_close(t.db), 0);
	cr_assert_eq(stat(ipath, &after), 0);
	cr_assert(before.st_ino == after.st_ino && before.st_mtime == after.st_mtime,
		  "a session that changed nothing rewrote INDEX");
	cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 1);

	/* An INDEX older than the last change. */
	index_file_copy(t.dir, "INDEX", "INDEX.old");
	tidy_puts(t.db, &m, &pool, 2000, &r, vbuf);
	tdb_reopen(&t, &o);
	cr_assert_eq(index_from_file(t.db), 1);
	cr_assert_eq(flexdb_close(t.db), 0);
	index_file_copy(t.dir, "INDEX.old", "INDEX");
	cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 0, "a stale INDEX was used");
	tidy_verify(t.db, &m, "stale INDEX");
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	intervals = st.intervals;
	cr_assert_eq(flexdb_close(t.db), 0);

	/* Damaged: every flipped byte, a cut anywhere, an empty file. */
	char path[512];
	snprintf(path, sizeof(path), "%s/INDEX", t.dir);
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	index_file_copy(t.dir, "INDEX", "INDEX.good");
	for (int round = 0; round < 40; round++) {
		index_file_copy(t.dir, "INDEX.good", "INDEX");
		uint64_t at = rnd_below(&r, (uint64_t)sb.st_size);
		if (round < 8)
			at = (uint64_t)round * 8 + rnd_below(&r, 8); /* the header */
		if (round == 39) {
			cr_assert_eq(truncate(path, 0), 0);
		} else if (round % 3 == 2) {
			cr_assert_eq(truncate(path, (off_t)at), 0);
		} else {
			FILE *f = fopen(path, "r+b");
			cr_assert(f);
			fseek(f, (long)at, SEEK_SET);
			int ch = fgetc(f);
			fseek(f, (long)at, SEEK_SET);
			fputc(ch ^ (1 << rnd_below(&r, 8)), f);
			cr_assert_eq(fclose(f), 0);
		}
		cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
		cr_assert_eq(index_from_file(t.db), 0, "round %d: a damaged INDEX (byte %" PRIu64
			     ") was used", round, at);
		cr_assert_eq(flexdb_stats(t.db, &st), 0);
		cr_assert_eq(st.intervals, intervals, "%" PRIu64 " intervals, %" PRIu64 " before",
			     st.intervals, intervals);
		cr_assert_eq(flexdb_check(t.db), 0);
		if (round % 8 == 0)
			tidy_verify(t.db, &m, "damaged INDEX");
		cr_assert_eq(flexdb_close(t.db), 0);
	}
	/* The INDEX of another store. */
	struct tdb t2;
	struct fmodel m2 = {0};
	tdb_open(&t2, "indexfile2", &o);
	tidy_puts(t2.db, &m2, &pool, 30000, &r, vbuf);
	cr_assert_eq(flexdb_close(t2.db), 0);
	char other[600];
	snprintf(other, sizeof(other), "cp '%s/INDEX' '%s/INDEX'", t2.dir, t.dir);
	cr_assert_eq(system(other), 0);
	cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 0, "another store's INDEX was used");
	tidy_verify(t.db, &m, "another store's INDEX");
	cr_assert_eq(flexdb_close(t.db), 0);
	t2.db = NULL;
	tdb_done(&t2);
	fm_free(&m2);

	/* Each of those closes wrote a sound one again. */
	cr_assert_eq(flexdb_open(t.dir, &o, &t.db), 0);
	cr_assert_eq(index_from_file(t.db), 1);
	tidy_verify(t.db, &m, "after the damaged ones");
	tdb_done(&t);
	pool_free(&pool);
	fm_free(&m);
	free(vbuf);
}

/* Seeks from random keys of the pool, forwards (seek, next) or backwards
 * (seek_for_prev, prev), up to 150 pairs each, against the model. */
static void seeks_verify(struct flexdb *db, const struct fmodel *m, const struct keypool *pool,
			 uint64_t *r, int n, const char *when)
{
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	for (int i = 0; i < n; i++) {
		const struct fkey *k = &pool->keys[rnd_below(r, pool->n)];
		int rev = rnd_below(r, 4) == 0;
		size_t want = 1 + rnd_below(r, 150), lo = fm_lower(m, k->k, k->n);
		/* Backwards from the last pair <= key. */
		int eq = lo < m->n && m->e[lo].kn == k->n && !memcmp(m->e[lo].k, k->k, k->n);
		long pos = rev && !eq ? (long)lo - 1 : (long)lo;
		int rc = rev ? flexdb_iter_seek_for_prev(it, k->k, k->n)
			     : flexdb_iter_seek(it, k->k, k->n);
		cr_assert_eq(rc, 0, "%s: seek %d: %s", when, i, flex_strerror(rc));
		for (size_t j = 0; j < want; j++, pos += rev ? -1 : 1) {
			int in = pos >= 0 && (size_t)pos < m->n;
			cr_assert_eq(flexdb_iter_valid(it), in,
				     "%s: seek %d, pair %zu: valid %d, model %d", when, i, j,
				     flexdb_iter_valid(it), in);
			if (!in)
				break;
			const struct ment *e = &m->e[pos];
			size_t kl, vl;
			const void *kp = flexdb_iter_key(it, &kl), *vp = flexdb_iter_value(it, &vl);
			cr_assert(kl == e->kn && !memcmp(kp, e->k, kl) && vl == e->vn &&
					  !memcmp(vp, e->v, vl),
				  "%s: seek %d, pair %zu differs from the model", when, i, j);
			rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
			cr_assert_eq(rc, 0, "%s: step: %s", when, flex_strerror(rc));
		}
	}
	flexdb_iter_close(it);
}

/* With thin entries that carry maps (an open from INDEX brings them), a
 * scan reads uncached intervals where the maps say their bytes lie; once
 * the FlexSpace has moved them (garbage collection frees their
 * segments) it reads through the FlexTree again.  Either way it returns
 * exactly the model. */
Test(flexdb, scans_read_through_thin_maps_and_after_the_bytes_moved)
{
	uint64_t seed = test_seed("scanmaps"), r = seed;
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = 256u << 10;
	o.cache_size = 2u << 20; /* thin entries for part of the store only */
	o.space.segment_size = FDB_TINY_SEGMENT; /* garbage collected early */
	struct tdb t;
	tdb_open(&t, "scanmaps", &o);
	struct keypool pool;
	pool_make(&pool, 20000, seed ^ 0x736d6170u);
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	struct fmodel m = {0};
	tidy_puts(t.db, &m, &pool, 30000, &r, vbuf);
	tdb_reopen(&t, &o);
	cr_assert_eq(index_from_file(t.db), 1);
	seeks_verify(t.db, &m, &pool, &r, 3000, "maps from INDEX");
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	uint64_t located = st.scan_located;
	cr_assert_gt(located, 0, "no scan read went through a thin entry's map");
	/* Overwrites of the lower half of the keys until the FlexSpace has
	 * collected garbage: the upper half's intervals, untouched, keep
	 * their thin entries, whose maps went stale as their bytes moved
	 * out of the freed segments. */
	struct keypool low = pool;
	low.n = pool.n / 2;
	uint64_t runs = st.space.gc_runs, moved = st.space.gc_bytes_moved;
	for (int round = 0; round < 40 && st.space.gc_runs == runs; round++) {
		tidy_puts(t.db, &m, &low, 5000, &r, vbuf);
		cr_assert_eq(flexdb_sync(t.db), 0);
		cr_assert_eq(flexdb_stats(t.db, &st), 0);
	}
	cr_assert_gt(st.space.gc_runs, runs, "no garbage collected");
	cr_assert_gt(st.space.gc_bytes_moved, moved, "garbage collection moved nothing");
	/* Tidied (which moves more), so that nothing moves during the seeks. */
	cr_assert_eq(flexdb_compact(t.db, 0), 0);
	seeks_verify(t.db, &m, &pool, &r, 3000, "after garbage collection");
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_gt(st.scan_stale, 0, "no scan met a map whose bytes had moved");
	/* The entries met stale were renewed (up to the room each read has
	 * for them), so 3000 more seeks meet far fewer stale maps, and read
	 * through the renewed ones. */
	cr_assert_gt(st.maps_renewed, 0, "no stale map was renewed");
	struct flexdb_stats st2;
	uint64_t stale1 = st.scan_stale;
	seeks_verify(t.db, &m, &pool, &r, 3000, "after the maps were renewed");
	cr_assert_eq(flexdb_stats(t.db, &st2), 0);
	cr_assert_lt(st2.scan_stale - stale1, stale1 / 2 + 1,
		     "stale maps were met again: %" PRIu64 " then %" PRIu64, stale1,
		     st2.scan_stale - stale1);
	cr_assert_gt(st2.scan_located, st.scan_located, "no read went through a renewed map");
	/* Gets renew what they meet stale too, and read through it after. */
	uint64_t runs2 = st2.space.gc_runs;
	for (int round = 0; round < 40 && st2.space.gc_runs == runs2; round++) {
		tidy_puts(t.db, &m, &low, 5000, &r, vbuf);
		cr_assert_eq(flexdb_sync(t.db), 0);
		cr_assert_eq(flexdb_stats(t.db, &st2), 0);
	}
	cr_assert_eq(flexdb_compact(t.db, 0), 0);
	cr_assert_eq(flexdb_stats(t.db, &st2), 0);
	uint64_t renewed = st2.maps_renewed;
	gets_verify(t.db, &m, "after the maps moved again");
	cr_assert_eq(flexdb_stats(t.db, &st2), 0);
	cr_assert_gt(st2.maps_renewed, renewed, "no get renewed a stale map");
	uint64_t thin_located = st2.cache_thin_located;
	gets_verify(t.db, &m, "after the maps were renewed");
	cr_assert_eq(flexdb_stats(t.db, &st2), 0);
	cr_assert_gt(st2.cache_thin_located, thin_located, "no get read through a map");
	tidy_verify(t.db, &m, "after garbage collection");
	fprintf(stderr, "  scans through maps: %" PRIu64 " reads from INDEX's maps, %" PRIu64
		" in all, %" PRIu64 " refused after %.1f MB moved by GC, then %" PRIu64
		"; maps renewed by scans %" PRIu64 ", by gets %" PRIu64 "\n", located,
		st.scan_located, stale1, (double)(st.space.gc_bytes_moved - moved) / 1e6,
		st2.scan_stale - stale1, renewed, st2.maps_renewed - renewed);
	free(vbuf);
	fm_free(&m);
	pool_free(&pool);
	tdb_done(&t);
}

/* A thin entry keeps where its records start one of three ways: a byte
 * per record when every record is under 256 bytes, 16-bit offsets in an
 * interval under 64 KiB, 32-bit ones beyond.  A store of each shape,
 * larger than its cache, is read through thin entries, with their maps
 * (the first three shapes; the first with room for them whatever the
 * seed) and without (the last: maps for every interval would not fit
 * the thin share), and after a reopen from INDEX: every pair is found
 * and the check (which compares every cached entry with its interval)
 * passes. */
Test(flexdb, thin_entries_of_every_shape_find_every_pair)
{
	static const struct {
		uint32_t vmin, vmax, pairs, cache_mb, maps;
	} shape[] = {{0, 100, 40000, 2, 1},
		     {300, 1500, 6000, 1, 1},
		     {70000, 90000, 160, 8, 1},
		     {0, 100, 120000, 1, 0}};
	uint64_t seed = test_seed("thinshapes"), r = seed;
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	for (size_t k = 0; k < sizeof(shape) / sizeof(shape[0]); k++) {
		struct flexdb_options o = fdb_default_opts();
		o.memtable_size = 1u << 20;
		o.cache_size = (uint64_t)shape[k].cache_mb << 20;
		struct tdb t;
		tdb_open(&t, "thinshapes", &o);
		struct fmodel m = {0};
		for (uint32_t i = 0; i < shape[k].pairs; i++) {
			char key[24];
			int kn = snprintf(key, sizeof(key), "%016" PRIx64,
					  (uint64_t)(i * UINT64_C(0x9e3779b97f4a7c15)));
			uint32_t vn = shape[k].vmin +
				      (uint32_t)rnd_below(&r, shape[k].vmax - shape[k].vmin + 1);
			val_fill(rnd(&r), vbuf, vn);
			cr_assert_eq(flexdb_put(t.db, key, (uint32_t)kn, vbuf, vn), 0);
			fm_put(&m, key, (uint32_t)kn, vbuf, vn);
		}
		cr_assert_eq(flexdb_sync(t.db), 0);
		for (int round = 0; round < 2; round++) {
			const char *when = round ? "after a reopen" : "as written";
			struct flexdb_stats a, b;
			cr_assert_eq(flexdb_stats(t.db, &a), 0);
			tidy_verify(t.db, &m, when);
			tidy_verify(t.db, &m, when);
			cr_assert_eq(flexdb_stats(t.db, &b), 0);
			fprintf(stderr,
				"  thin shapes, values of %u-%u bytes, %s: %" PRIu64
				" intervals, %" PRIu64 " thin hits (%" PRIu64 " located), %" PRIu64
				" misses\n",
				shape[k].vmin, shape[k].vmax, when, b.intervals,
				b.cache_thin_hits - a.cache_thin_hits,
				b.cache_thin_located - a.cache_thin_located,
				b.cache_misses - a.cache_misses);
			cr_assert_gt(b.cache_thin_hits - a.cache_thin_hits, 0, "%s: no thin hit", when);
			if (shape[k].maps)
				cr_assert_gt(b.cache_thin_located - a.cache_thin_located, 0,
					     "%s: no thin hit read through its map", when);
			else if (round)
				cr_assert_eq(b.cache_thin_located - a.cache_thin_located, 0,
					     "%s: thin entries with maps that do not fit", when);
			if (round)
				cr_assert_eq(index_from_file(t.db), 1);
			tdb_reopen(&t, &o);
		}
		tdb_done(&t);
		fm_free(&m);
	}
	free(vbuf);
}

/* A store with a 256 KiB memtable and a 1 MiB cache: small against the
 * loads of the tests below. */
static struct flexdb_options small_cache_opts(void)
{
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = 256u << 10;
	o.cache_size = 1u << 20;
	return o;
}

/* Puts key with a random 100-byte value, in the store and the model. */
static void put_both(struct flexdb *db, struct fmodel *m, const char *key, int kn, uint64_t *r)
{
	uint8_t v[100];
	val_fill(rnd(r), v, sizeof(v));
	cr_assert_eq(flexdb_put(db, key, (uint32_t)kn, v, sizeof(v)), 0);
	fm_put(m, key, (uint32_t)kn, v, sizeof(v));
}

/* A random load into a store much larger than its cache scatters its
 * intervals over many extents each, and the maps of their thin entries
 * (12 bytes a piece) outweigh the rest.  When the thin share is full,
 * maps give way before entries do, so a thin entry for every interval
 * fits, the clean close puts them all into INDEX, and after a reopen no
 * get reads an interval whole (with the maps kept, the share held about
 * half the intervals, and a get of any other read its interval whole). */
Test(flexdb, scattered_load_keeps_a_thin_entry_for_every_interval)
{
	uint64_t seed = test_seed("thinload"), r = seed;
	struct flexdb_options o = small_cache_opts();
	struct tdb t;
	tdb_open(&t, "thinload", &o);
	struct fmodel m = {0};
	for (uint32_t i = 0; i < 60000; i++) {
		char key[24];
		int kn = snprintf(key, sizeof(key), "%016" PRIx64,
				  (uint64_t)((i + seed) * UINT64_C(0x9e3779b97f4a7c15)));
		put_both(t.db, &m, key, kn, &r);
	}
	/* Before tidying may start (writes paused for 100 ms). */
	struct flexdb_stats a, b;
	cr_assert_eq(flexdb_stats(t.db, &a), 0);
	double ext = (double)a.space.extents / (double)a.intervals;
	cr_assert_gt(ext, 8, "the load left %.1f extents per interval", ext);
	cr_assert_eq(flexdb_sync(t.db), 0);
	tdb_reopen(&t, &o);
	cr_assert_eq(index_from_file(t.db), 1);
	cr_assert_eq(flexdb_stats(t.db, &a), 0);
	gets_verify(t.db, &m, "after a reopen");
	cr_assert_eq(flexdb_stats(t.db, &b), 0);
	fprintf(stderr,
		"  scattered load: %" PRIu64 " intervals in %.1f extents each, %.0f KB of thin "
		"entries from INDEX; gets: %" PRIu64 " thin hits, %" PRIu64 " misses\n",
		b.intervals, ext, (double)a.cache_bytes / 1024,
		b.cache_thin_hits - a.cache_thin_hits, b.cache_misses - a.cache_misses);
	cr_assert_eq(b.cache_misses - a.cache_misses, 0, "gets read intervals whole");
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);
	fm_free(&m);
}

/* A watcher that loads, over and over, the entry of the interval the
 * test is replacing entries of, and counts the loads that found none. */
struct entry_watch {
	_Atomic(struct fdb_ival *) iv;
	atomic_int stop;
	atomic_long loads, empty;
};

static void *entry_watcher(void *arg)
{
	struct entry_watch *w = arg;
	while (!atomic_load(&w->stop)) {
		struct fdb_ival *iv = atomic_load(&w->iv);
		if (!iv)
			continue;
		if (!fdb_ival_cent(iv))
			atomic_fetch_add(&w->empty, 1);
		atomic_fetch_add(&w->loads, 1);
	}
	return NULL;
}

/* Readers under the shared lock load an interval's entry without a lock:
 * when another reader renews a thin entry's map, or warming makes a thin
 * entry whole, the new entry must take the old one's place in one store.
 * A reader that found neither read the interval whole (a miss after an
 * open from INDEX, where every interval had an entry).  Every interval is
 * made thin under the exclusive lock; then, under the shared lock, each is
 * renewed 50 times and made whole while a thread watches it. */
Test(flexdb, an_entry_replaced_under_the_shared_lock_is_never_missing)
{
	uint64_t seed = test_seed("swapentry"), r = seed;
	struct flexdb_options o = fdb_default_opts();
	struct tdb t;
	tdb_open(&t, "swapentry", &o);
	struct fmodel m = {0};
	for (int i = 0; i < 4000; i++) {
		char key[24];
		int kn = snprintf(key, sizeof(key), "k%08" PRIx64, rnd(&r) % 100000);
		put_both(t.db, &m, key, kn, &r);
	}
	cr_assert_eq(flexdb_compact(t.db, 1), 0);
	/* No other reader while the test swaps entries and reaps the
	 * graveyard: warming (a reader of the committer's) is over first. */
	struct flexdb_stats st;
	for (int i = 0;; i++) {
		cr_assert_eq(flexdb_stats(t.db, &st), 0);
		if (!st.warming)
			break;
		cr_assert_lt(i, 30000, "warming did not end");
		usleep(1000);
	}
	struct fdb_store *s = &t.db->store;
	/* Every interval thin. */
	flex_brlock_wrlock(&t.db->lock);
	struct fdb_ipath p;
	int n = 0;
	for (struct fdb_ival *iv = fdb_index_first(s->index, &p); iv; iv = fdb_index_next(&p)) {
		if (!iv->size)
			continue;
		uint8_t *raw;
		struct fdb_cent *c, *thin;
		cr_assert_eq(fdb_ival_read_raw(s, iv, fdb_index_offset(&p), &raw, NULL), 0);
		cr_assert_eq(fdb_cent_from_raw(iv, raw, iv->size, NULL, &c), 0);
		cr_assert_not_null(thin = fdb_thin_copy(c, NULL));
		fdb_cent_free(c);
		fdb_cache_drop(s, iv);
		cr_assert_eq(fdb_cache_attach(s, iv, thin, 0), 0);
		n++;
	}
	flex_brlock_wrunlock(&t.db->lock);
	cr_assert_gt(n, 50, "%d intervals", n);
	struct entry_watch w = {0};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, entry_watcher, &w), 0);
	long renewed = 0, whole = 0;
	flex_brlock_rdlock(&t.db->lock);
	for (struct fdb_ival *iv = fdb_index_first(s->index, &p); iv; iv = fdb_index_next(&p)) {
		if (!iv->size)
			continue;
		/* The watcher looks at this interval before its swaps. */
		long seen = atomic_load(&w.loads);
		atomic_store(&w.iv, iv);
		while (atomic_load(&w.loads) < seen + 2)
			sched_yield();
		for (int k = 0; k < 50; k++) {
			struct fdb_cands cands;
			struct fdb_cent *before = fdb_ival_cent(iv);
			fdb_cands_init(s, &cands, NULL, 0);
			fdb_cand_renew(s, &cands, iv, before, NULL);
			fdb_store_admit(s, &cands, 1);
			const struct fdb_cent *after = fdb_ival_cent(iv);
			renewed += after != before && after->thin;
			/* Nothing but this thread holds what the graveyard
			 * keeps: the watcher never follows an entry. */
			pthread_mutex_lock(&s->cache_mu);
			fdb_store_reap(s);
			pthread_mutex_unlock(&s->cache_mu);
		}
		uint8_t *raw;
		struct fdb_cent *c;
		cr_assert_eq(fdb_ival_read_raw(s, iv, fdb_index_offset(&p), &raw, NULL), 0);
		cr_assert_eq(fdb_cent_from_raw(iv, raw, iv->size, NULL, &c), 0);
		struct fdb_cands cands;
		fdb_cands_init(s, &cands, NULL, 0);
		fdb_cand_push(&cands, iv, c, ADMIT_WHOLE);
		fdb_store_admit(s, &cands, 1);
		whole += fdb_ival_cent(iv)->raw != NULL;
		pthread_mutex_lock(&s->cache_mu);
		fdb_store_reap(s);
		pthread_mutex_unlock(&s->cache_mu);
	}
	atomic_store(&w.stop, 1);
	pthread_join(th, NULL);
	flex_brlock_rdunlock(&t.db->lock);
	fprintf(stderr,
		"  %d intervals: %ld renewals, %ld made whole; the watcher loaded %ld entries\n", n,
		renewed, whole, atomic_load(&w.loads));
	cr_assert_eq(atomic_load(&w.empty), 0,
		     "the watcher found an interval without its entry %ld times",
		     atomic_load(&w.empty));
	cr_assert_eq(renewed, 50L * n);
	cr_assert_eq(whole, n);
	tidy_verify(t.db, &m, "after the swaps");
	tdb_done(&t);
	fm_free(&m);
}

struct dropper {
	int fd;
	atomic_int stop;
};

static void *drop_run(void *arg)
{
	struct dropper *d = arg;
	while (!atomic_load(&d->stop)) {
		posix_fadvise(d->fd, 0, 0, POSIX_FADV_DONTNEED);
		usleep(300);
	}
	return NULL;
}

/* With the page cache of its data file emptied all the time, every commit
 * reads the intervals it changes from the disk, the next chunk's begun
 * while a chunk is applied (past the page cache where the file system
 * allows it); small segments make collections free segments, now and
 * then under reads in flight (counted, not asserted).  Puts, overwrites
 * and deletes then leave exactly the model, and some chunks took what
 * was read ahead. */
Test(flexdb, commits_that_read_ahead_past_the_page_cache_keep_every_pair, .timeout = 120)
{
	uint64_t seed = test_seed("readahead"), r = seed;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "/var/tmp/flexdb_ahead_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	fdb_tmp_track(dir);
	struct flexdb_options o = small_cache_opts();
	o.space.segment_size = 256u << 10;
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, &o, &db), 0);
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/space/DATA", dir);
	struct dropper d = {.fd = open(path, O_RDONLY)};
	cr_assert_geq(d.fd, 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, drop_run, &d), 0);
	struct fmodel m = {0};
	for (uint32_t i = 0; i < 90000; i++) {
		char key[24];
		uint64_t k = rnd(&r) % 30000;
		int kn = snprintf(key, sizeof(key), "%016" PRIx64, k * UINT64_C(0x9e3779b97f4a7c15));
		if (rnd(&r) % 10 == 0) {
			cr_assert_eq(flexdb_delete(db, key, (uint32_t)kn), 0);
			fm_del(&m, key, (uint32_t)kn);
		} else {
			put_both(db, &m, key, kn, &r);
		}
	}
	cr_assert_eq(flexdb_sync(db), 0);
	atomic_store(&d.stop, 1);
	pthread_join(th, NULL);
	close(d.fd);
	uint64_t cc[FDB_ST_N];
	fdb_store_cache_counts(&db->store, cc);
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(db, &st), 0);
	fprintf(stderr,
		"  read ahead: seed %" PRIu64 ", %" PRIu64 " intervals taken from reads begun "
		"ahead, %" PRIu64 " begun reads read again, %" PRIu64 " GC runs\n",
		seed, cc[FDB_ST_FETCH_AHEAD], cc[FDB_ST_FETCH_STALE], st.space.gc_runs);
	tidy_verify(db, &m, "after reading ahead");
	cr_assert_gt(cc[FDB_ST_FETCH_AHEAD], 0, "no chunk took what was read ahead");
	cr_assert_eq(flexdb_close(db), 0);
	cr_assert_eq(flexdb_open(dir, &o, &db), 0);
	tidy_verify(db, &m, "after a reopen");
	cr_assert_eq(flexdb_close(db), 0);
	tmp_remove(dir);
	fm_free(&m);
}

static void jump_key(struct keypool *p, const char *k, size_t n)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 256;
		p->keys = realloc(p->keys, p->cap * sizeof(*p->keys));
		cr_assert(p->keys);
	}
	p->keys[p->n].k = malloc(n);
	cr_assert(p->keys[p->n].k);
	memcpy(p->keys[p->n].k, k, n);
	p->keys[p->n++].n = (uint32_t)n;
}

/* A forward seek into an interval the cache holds thin starts at the pair
 * of its key's fingerprint and reads only from there; a key absent from
 * the store whose fingerprint is that of a present one (found by trying
 * suffixes) falls back to searching the interval.  Seeks of present,
 * absent and such keys, and the iterator's refills past 64 pairs (which
 * seek past the last key of a chunk), return exactly the model once the
 * cache is full of thin entries. */
Test(flexdb, seeks_jump_to_their_pair_and_fall_back_on_a_fingerprint_match)
{
	uint64_t seed = test_seed("seekjump"), r = seed;
	struct flexdb_options o = small_cache_opts();
	struct tdb t;
	tdb_open(&t, "seekjump", &o);
	struct fmodel m = {0};
	char key[40];
	for (uint32_t i = 0; i < 40000; i += 2)
		put_both(t.db, &m, key, snprintf(key, sizeof(key), "s%07u", i), &r);
	cr_assert_eq(flexdb_sync(t.db), 0);
	tdb_reopen(&t, &o);
	cr_assert_eq(index_from_file(t.db), 1);
	struct keypool pool = {0};
	int collide = 0;
	for (int i = 0; i < 400; i++) {
		uint32_t x = (uint32_t)rnd_below(&r, 40002);
		jump_key(&pool, key, (size_t)snprintf(key, sizeof(key), "s%07u", x));
		if (i % 10)
			continue;
		/* Just after a present key, with its fingerprint. */
		x &= ~1u;
		char base[16];
		snprintf(base, sizeof(base), "s%07u", x);
		uint16_t want = fdb_fingerprint(base, (uint32_t)strlen(base));
		for (uint32_t sfx = 0; sfx < (1u << 22); sfx++) {
			int kn = snprintf(key, sizeof(key), "%s#%u", base, sfx);
			if (fdb_fingerprint(key, (uint32_t)kn) == want) {
				jump_key(&pool, key, (size_t)kn);
				collide++;
				break;
			}
		}
	}
	cr_assert_gt(collide, 30);
	/* The first pass fills the cache with whole entries; the later ones
	 * find it full, and jump. */
	for (int pass = 0; pass < 4; pass++)
		seeks_verify(t.db, &m, &pool, &r, 1000, "seeks that jump");
	uint64_t cc[FDB_ST_N];
	fdb_store_cache_counts(&t.db->store, cc);
	fprintf(stderr, "  seeks that jump: %" PRIu64 " jumps, %" PRIu64 " to another key\n",
		cc[FDB_ST_SEEK_JUMPS], cc[FDB_ST_SEEK_JUMP_MISSES]);
	cr_assert_gt(cc[FDB_ST_SEEK_JUMPS], 0, "no seek jumped");
	cr_assert_gt(cc[FDB_ST_SEEK_JUMP_MISSES], 0, "no seek fell back");
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);
	pool_free(&pool);
	fm_free(&m);
}

/* A scan of 10 keys between bounds, from a cold cache, reads about the
 * intervals that hold them: not a chunk of 64 pairs beyond the bound (nor
 * before it, backwards). */
Test(flexdb, bounded_scan_reads_no_chunk_past_its_bound)
{
	struct flex_io io = *flex_io_posix();
	io.open = ra_open;
	io.pread = ra_pread;
	io.read_batch = ra_read_batch;
	struct flexdb_options o = fdb_default_opts();
	o.space.io = &io;
	struct tdb t;
	tdb_open(&t, "readahead", &o);
	char k[32];
	uint8_t v[200];
	memset(v, 'v', sizeof(v));
	for (int i = 0; i < 20000; i++) {
		snprintf(k, sizeof(k), "r%06d", i);
		cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
	}
	struct flexdb_stats st;
	tdb_reopen(&t, &o);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	uint64_t ival = st.bytes / (st.intervals ? st.intervals : 1);
	uint64_t fwd, rev, open_fwd, open_rev;
	cr_assert_eq(ra_walk(&t, &o, "r010000", "r010010", 0, &fwd), 10);
	cr_assert_eq(ra_walk(&t, &o, "r010000", "r010010", 1, &rev), 10);
	/* The same keys without bounds, for scale. */
	cr_assert_eq(ra_walk(&t, &o, "r010000", NULL, 0, &open_fwd), 10);
	cr_assert_eq(ra_walk(&t, &o, NULL, "r010010", 1, &open_rev), 10);
	fprintf(stderr,
		"  bounded scans of 10 keys read %" PRIu64 " / %" PRIu64
		" bytes (forwards / backwards), unbounded %" PRIu64 " / %" PRIu64
		"; an interval holds %" PRIu64 " bytes\n",
		fwd, rev, open_fwd, open_rev, ival);
	/* 10 pairs of ~210 bytes lie in one or two intervals of about this
	 * size; an unbounded chunk of 64 pairs reads four or five. */
	cr_expect_leq(fwd, 2 * ival, "a forward bounded scan read %" PRIu64 " bytes", fwd);
	cr_expect_leq(rev, 2 * ival, "a backward bounded scan read %" PRIu64 " bytes", rev);
	cr_expect_lt(fwd, open_fwd);
	cr_expect_lt(rev, open_rev);
	tdb_done(&t);
}

Test(flexdb, iterator_skips_long_runs_of_deleted_keys)
{
	struct tdb t;
	tdb_open(&t, "iterdel", NULL);
	char k[32];
	int n = 3000;
	for (int i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "d%05d", i);
		put_s(t.db, k, "x");
	}
	tdb_reopen(&t, NULL);
	for (int i = 0; i < n; i++) {
		if (i == 0 || i == 1500 || i == n - 1 || (i > 2000 && i < 2010))
			continue;
		snprintf(k, sizeof(k), "d%05d", i);
		cr_assert_eq(flexdb_delete(t.db, k, strlen(k)), 0);
	}
	static const char *const keys[] = {"d00000", "d01500", "d02001", "d02002",
					   "d02003", "d02004", "d02005", "d02006",
					   "d02007", "d02008", "d02009", "d02999"};
	size_t lens[12];
	for (int i = 0; i < 12; i++)
		lens[i] = 6;
	expect_keys(t.db, keys, lens, 12, "tombstones in the memtable");
	tdb_reopen(&t, NULL);
	expect_keys(t.db, keys, lens, 12, "after commit");
	tdb_done(&t);
}

/* A chunk of the store's pairs ends the memtables' part of the chunk: a
 * newer version of its last pair, a tombstone of it, a range delete over
 * it, or new keys just past it still count.  1,000 committed pairs, then
 * memtable changes of three kinds (sparse overwrites and deletes; a dense
 * run of overwrites and new keys between the committed ones, which fills
 * the memtable's part of a chunk before the store's ends; range deletes
 * across where the store's chunks end); from every start in a window,
 * forwards and backwards, the iterator must walk the model. */
struct ce_pair {
	char k[16];
	const char *v; /* NULL: deleted */
};

static int ce_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ce_pair *)a)->k, ((const struct ce_pair *)b)->k);
}

static void chunk_end_walk(struct flexdb *db, const struct ce_pair *m, int n, int start,
			   int rev)
{
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	const char *sk = m[start].k;
	cr_assert_eq(rev ? flexdb_iter_seek_for_prev(it, sk, strlen(sk))
			 : flexdb_iter_seek(it, sk, strlen(sk)),
		     0);
	int i = start;
	for (int steps = 0; steps < 200; steps++) {
		while (i >= 0 && i < n && !m[i].v)
			i += rev ? -1 : 1;
		if (i < 0 || i >= n) {
			cr_assert_eq(flexdb_iter_valid(it), 0);
			break;
		}
		size_t kl, vl;
		const char *gk = flexdb_iter_key(it, &kl);
		const char *gv = flexdb_iter_value(it, &vl);
		cr_assert(gk && kl == strlen(m[i].k) && !memcmp(gk, m[i].k, kl),
			  "from %s%s, step %d: %.*s, expected %s", sk, rev ? " back" : "", steps,
			  gk ? (int)kl : 4, gk ? gk : "none", m[i].k);
		cr_assert(gv && vl == strlen(m[i].v) && !memcmp(gv, m[i].v, vl),
			  "%s: %.*s, expected %s", m[i].k, gv ? (int)vl : 4, gv ? gv : "none",
			  m[i].v);
		cr_assert_eq(rev ? flexdb_iter_prev(it) : flexdb_iter_next(it), 0);
		i += rev ? -1 : 1;
	}
	flexdb_iter_close(it);
}

Test(flexdb, iterator_takes_the_memtables_version_of_a_chunks_last_pair)
{
	for (int kind = 0; kind < 3; kind++) {
		struct tdb t;
		tdb_open(&t, "chunkend", NULL);
		static struct ce_pair m[1300];
		int n = 0;
		for (int i = 0; i < 1000; i++, n++) {
			snprintf(m[n].k, sizeof(m[n].k), "c%05d", i);
			m[n].v = "old";
			put_s(t.db, m[n].k, "old");
		}
		tdb_reopen(&t, NULL);
		for (int i = 0; i < 1000; i++) {
			const char *k = m[i].k;
			if (kind == 0 && i % 11 == 5) {
				cr_assert_eq(flexdb_delete(t.db, k, strlen(k)), 0);
				m[i].v = NULL;
			} else if ((kind == 0 && i % 7 == 0) ||
				   (kind == 1 && ((i >= 40 && i < 240) || i >= 800))) {
				put_s(t.db, k, "new");
				m[i].v = "new";
			}
			if (kind == 1 && ((i >= 40 && i < 240) || i >= 800) && i % 3 == 0) {
				/* A new key just past a committed one. */
				snprintf(m[n].k, sizeof(m[n].k), "c%05dx", i);
				m[n].v = "add";
				put_s(t.db, m[n++].k, "add");
			}
		}
		if (kind == 2) {
			static const int cut[][2] = {{60, 70}, {120, 140}, {850, 870}, {930, 936}};
			for (int c = 0; c < 4; c++) {
				cr_assert_eq(flexdb_delete_range(t.db, m[cut[c][0]].k, 6,
								 m[cut[c][1]].k, 6),
					     0);
				for (int i = cut[c][0]; i < cut[c][1]; i++)
					m[i].v = NULL;
			}
		}
		qsort(m, (size_t)n, sizeof(m[0]), ce_cmp);
		for (int start = 0; start < 90; start++) {
			chunk_end_walk(t.db, m, n, start, 0);
			chunk_end_walk(t.db, m, n, n - 1 - start, 1);
		}
		tdb_done(&t);
	}
}

/* Writes keys "r%07d" for i in [from, to) as puts (del 0) or deletes, a
 * thousand to a batch. */
static void run_write(struct flexdb *db, int from, int to, int del)
{
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert_not_null(b);
	char k[32];
	for (int i = from; i < to; i++) {
		snprintf(k, sizeof(k), "r%07d", i);
		cr_assert_eq(del ? flexdb_batch_delete(b, k, strlen(k))
				 : flexdb_batch_put(b, k, strlen(k), "v", 1),
			     0);
		if ((i - from) % 1000 == 999 || i == to - 1) {
			cr_assert_eq(flexdb_write(db, b), 0);
			flexdb_batch_clear(b);
		}
	}
	flexdb_batch_free(b);
}

/* Steps over want[0..n) keys "r%07d" from the iterator's position
 * (backwards with rev) and checks that nothing follows. */
static void run_walk(struct flexdb_iter *it, const int *want, int n, int rev)
{
	char k[32];
	for (int i = 0; i < n; i++) {
		int w = want[rev ? n - 1 - i : i];
		snprintf(k, sizeof(k), "r%07d", w);
		size_t kn;
		const char *got = flexdb_iter_key(it, &kn);
		cr_assert(got && kn == strlen(k) && !memcmp(got, k, kn),
			  "position %d: %.*s, expected %s", i, got ? (int)kn : 4,
			  got ? got : "none", k);
		cr_assert_eq(rev ? flexdb_iter_prev(it) : flexdb_iter_next(it), 0);
	}
	cr_assert_eq(flexdb_iter_valid(it), 0, "keys after the last");
}

/* 100k deleted keys between two runs of live ones, as tombstones in the
 * memtable over the store's pairs: the iterator reads chunk after chunk
 * of them in one refill, in both directions, and once it has read a few
 * chunks its buffers stop growing. */
/* Chunks of large pairs take several arena blocks; a reset keeps them for
 * the next refill, so a walk over such pairs stops allocating too: over
 * whole cached intervals (a cache that holds them all, once warming has
 * cached them) and over intervals read from the FlexSpace in runs (a
 * small cache). */
Test(flexdb, iterator_over_large_values_stops_allocating)
{
	struct flexdb_options o = fdb_default_opts();
	struct tdb t;
	tdb_open(&t, "iterbig", &o);
	static uint8_t v[3000];
	memset(v, 'b', sizeof(v));
	char k[16];
	for (int i = 0; i < 3000; i++) {
		snprintf(k, sizeof(k), "big%05d", i);
		cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
	}
	for (int small = 0; small < 2; small++) {
		if (small)
			o.cache_size = 1u << 20;
		tdb_reopen(&t, &o);
		(void)warm_wait(t.db);
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
		cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
		int n = 0;
		uint64_t grown = 0;
		for (; flexdb_iter_valid(it); n++) {
			if (n == 500)
				grown = fdb_iter_grows(it);
			size_t vl;
			cr_assert_not_null(flexdb_iter_value(it, &vl));
			cr_assert_eq(vl, sizeof(v));
			cr_assert_eq(flexdb_iter_next(it), 0);
		}
		cr_assert_eq(n, 3000);
		cr_assert_gt(grown, 0);
		cr_expect_eq(fdb_iter_grows(it), grown,
			     "%s cache: refills of large pairs kept allocating (%" PRIu64
			     " blocks, %" PRIu64 " after 500 pairs)",
			     small ? "small" : "large", fdb_iter_grows(it), grown);
		flexdb_iter_close(it);
	}
	tdb_done(&t);
}

Test(flexdb, iterator_crosses_100k_deleted_keys_without_growing)
{
	struct tdb t;
	tdb_open(&t, "iterrun", NULL);
	enum { LIVE = 300, DEAD = 100000 };
	run_write(t.db, 0, 2 * LIVE + DEAD, 0);
	tdb_reopen(&t, NULL); /* the pairs in the store */
	run_write(t.db, LIVE, LIVE + DEAD, 1);
	static int want[2 * LIVE];
	for (int i = 0; i < LIVE; i++) {
		want[i] = i;
		want[LIVE + i] = LIVE + DEAD + i;
	}
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(t.db, &it), 0);
	cr_assert_eq(flexdb_iter_seek(it, NULL, 0), 0);
	/* Warm up: a few refills that follow a bound allocate what every
	 * later refill reuses. */
	for (int i = 0; i < LIVE / 2; i++)
		cr_assert_eq(flexdb_iter_next(it), 0);
	uint64_t grown = fdb_iter_grows(it);
	cr_assert_gt(grown, 0, "the first chunks allocated nothing: the count is broken");
	run_walk(it, want + LIVE / 2, 2 * LIVE - LIVE / 2, 0);
	cr_assert_eq(fdb_iter_grows(it), grown, "crossing the deleted keys grew the buffers");
	cr_assert_eq(flexdb_iter_seek_for_prev(it, NULL, 0), 0);
	run_walk(it, want, 2 * LIVE, 1);
	cr_assert_eq(fdb_iter_grows(it), grown, "crossing them backwards grew the buffers");
	flexdb_iter_close(it);
	tdb_done(&t);
}

/* The keys from `from` on (in reverse with rev) match want[0..n). */
static void expect_run(struct flexdb *db, const char *from, int rev, const char *const *want,
		       int n, const char *what)
{
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	cr_assert_eq(rev ? flexdb_iter_seek_for_prev(it, from, strlen(from))
			 : flexdb_iter_seek(it, from, strlen(from)),
		     0);
	for (int i = 0; i < n; i++) {
		size_t kn;
		const char *k = flexdb_iter_key(it, &kn);
		cr_assert(k && kn == strlen(want[i]) && !memcmp(k, want[i], kn),
			  "%s: position %d from %s is %.*s, expected %s", what, i, from,
			  k ? (int)kn : 4, k ? k : "none", want[i]);
		cr_assert_eq(rev ? flexdb_iter_prev(it) : flexdb_iter_next(it), 0);
	}
	flexdb_iter_close(it);
}

static long count_keys(struct flexdb *db)
{
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	long n = 0;
	int rc = flexdb_iter_seek(it, NULL, 0);
	while (!rc && flexdb_iter_valid(it)) {
		n++;
		rc = flexdb_iter_next(it);
	}
	cr_assert_eq(rc, 0);
	flexdb_iter_close(it);
	return n;
}

/* 30000 keys over more than a thousand intervals (several index leaves);
 * a batch puts a key, deletes 25000 keys around it and puts one back.
 * Before the commit the memtable's range delete hides the store's keys
 * from gets and both iterator directions; after it the intervals between
 * the edges are gone from the index and the bytes from the space; the
 * index rebuilt from the anchors at open agrees. */
static void delrange_big_check(struct flexdb *db, const char *what)
{
	expect_val(db, "k00001999", 9, "v", 1);
	expect_absent(db, "k00002000", 9);
	expect_absent(db, "k00015000", 9);
	expect_absent(db, "k00026998", 9);
	expect_val(db, "k00026999", 9, "after", 5);
	expect_val(db, "k00027000", 9, "v", 1);
	static const char *const fwd[] = {"k00001998", "k00001999", "k00026999", "k00027000",
					  "k00027001"};
	static const char *const bwd[] = {"k00027001", "k00027000", "k00026999", "k00001999",
					  "k00001998"};
	expect_run(db, "k00001998", 0, fwd, 5, what);
	expect_run(db, "k00027001", 1, bwd, 5, what);
	expect_run(db, "k00002000", 0, fwd + 2, 3, what);
	expect_run(db, "k00026998", 1, bwd + 3, 2, what);
	cr_assert_eq(count_keys(db), 30000 - 25000 + 1, "%s: key count", what);
}

Test(flexdb, delete_range_drops_thousands_of_intervals)
{
	struct tdb t;
	tdb_open(&t, "delrange", NULL);
	char k[32];
	uint8_t v[40];
	memset(v, 'v', sizeof(v));
	for (int i = 0; i < 30000; i++) {
		snprintf(k, sizeof(k), "k%08d", i);
		cr_assert_eq(flexdb_put(t.db, k, 9, v, i == 1999 || i >= 27000 ? 1 : sizeof(v)), 0);
	}
	tdb_reopen(&t, NULL);
	struct flexdb_stats st0, st;
	cr_assert_eq(flexdb_stats(t.db, &st0), 0);
	cr_assert_gt(st0.intervals, 500);
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert_eq(flexdb_batch_put(b, "k00002000", 9, "before", 6), 0);
	cr_assert_eq(flexdb_batch_put(b, "k00026999", 9, "doomed", 6), 0);
	cr_assert_eq(flexdb_batch_delete_range(b, "k00002000", 9, "k00027000", 9), 0);
	cr_assert_eq(flexdb_batch_put(b, "k00026999", 9, "after", 5), 0);
	cr_assert_eq(flexdb_write(t.db, b), 0);
	flexdb_batch_free(b);
	/* Inside the first: nothing left to delete. */
	cr_assert_eq(flexdb_delete_range(t.db, "k00010000", 9, "k00010005", 9), 0);
	delrange_big_check(t.db, "in the memtable");
	tdb_reopen(&t, NULL);
	cr_assert_eq(flexdb_check(t.db), 0);
	delrange_big_check(t.db, "committed");
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_lt(st.intervals, st0.intervals / 4, "%" PRIu64 " intervals of %" PRIu64,
		     st.intervals, st0.intervals);
	cr_assert_lt(st.bytes, st0.bytes / 4);
	tdb_reopen(&t, NULL);
	cr_assert_eq(flexdb_check(t.db), 0);
	delrange_big_check(t.db, "reopened");
	/* Everything, from an empty start: the store is empty and usable. */
	cr_assert_eq(flexdb_delete_range(t.db, NULL, 0, "l", 1), 0);
	cr_assert_eq(count_keys(t.db), 0);
	tdb_reopen(&t, NULL);
	cr_assert_eq(flexdb_check(t.db), 0);
	cr_assert_eq(count_keys(t.db), 0);
	cr_assert_eq(flexdb_stats(t.db, &st), 0);
	cr_assert_eq(st.bytes, 0);
	put_s(t.db, "k", "again");
	tdb_reopen(&t, NULL);
	expect_val(t.db, "k", 1, "again", 5);
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);
}


/* ======================================================================
 * Early writeback: the WAL and DATA are started on their way to the disk
 * as they are written, whole pages only, and a table without writeback
 * works the same.
 * ====================================================================== */

/* Files by descriptor (WAL or DATA), and the writeback calls seen. */
static struct {
	pthread_mutex_t mu;
	char kind[256]; /* 'W', 'D' or 0, by descriptor */
	long calls[2];	/* WAL, DATA */
	uint64_t bytes[2];
	int bad; /* a range not in whole pages, or past the file's end */
} WB = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int wb_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	int fd = p->open(p, path, flags, mode);
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (fd >= 0 && fd < 256) {
		pthread_mutex_lock(&WB.mu);
		WB.kind[fd] = !strncmp(base, "WAL-", 4) ? 'W' : !strcmp(base, "DATA") ? 'D' : 0;
		pthread_mutex_unlock(&WB.mu);
	}
	return fd;
}

static int wb_writeback(const struct flex_io *io, int fd, uint64_t off, uint64_t len)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	uint64_t size = 0;
	int rc = p->fsize(p, fd, &size);
	pthread_mutex_lock(&WB.mu);
	int k = fd >= 0 && fd < 256 ? WB.kind[fd] : 0;
	if (rc || !k || off % 4096 || len % (k == 'D' ? 65536 : 4096) || !len ||
	    off + len > size)
		WB.bad++;
	if (k) {
		WB.calls[k == 'D']++;
		WB.bytes[k == 'D'] += len;
	}
	pthread_mutex_unlock(&WB.mu);
	return p->writeback(p, fd, off, len);
}

Test(flexdb, wal_and_data_are_written_back_early_in_whole_pages)
{
	struct flex_io io = *flex_io_posix();
	io.open = wb_open;
	io.writeback = wb_writeback;
	struct flexdb_options o = fdb_tiny_opts();
	o.memtable_size = 8u << 20; /* WAL files of a few MiB */
	o.space.io = &io;
	struct tdb t;
	tdb_open(&t, "writeback", &o);
	uint8_t v[300];
	memset(v, 'b', sizeof(v));
	const int n = 20000; /* about 6.8 MB of records */
	for (int i = 0; i < n; i++) {
		char k[32];
		snprintf(k, sizeof(k), "k%08d", (i * 7919) % n);
		v[0] = (uint8_t)i;
		cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
	}
	pthread_mutex_lock(&WB.mu);
	long wal_calls = WB.calls[0];
	uint64_t wal_bytes = WB.bytes[0];
	pthread_mutex_unlock(&WB.mu);
	/* A MiB at a time, once written: at least the first four MiB. */
	cr_assert_geq(wal_calls, 4, "WAL writebacks: %ld", wal_calls);
	cr_assert_geq(wal_bytes, 4u << 20);
	tdb_reopen(&t, &o); /* the memtables reach DATA */
	pthread_mutex_lock(&WB.mu);
	cr_assert_gt(WB.calls[1], 0, "DATA was never written back early");
	cr_assert_eq(WB.bad, 0, "%d writebacks not of whole pages inside the file", WB.bad);
	pthread_mutex_unlock(&WB.mu);
	for (int i = 0; i < n; i += 97) {
		char k[32];
		snprintf(k, sizeof(k), "k%08d", (i * 7919) % n);
		size_t vl;
		uint8_t got[400];
		cr_assert_eq(flexdb_get(t.db, k, strlen(k), got, sizeof(got), &vl), 0);
		cr_assert_eq(vl, sizeof(v));
		cr_assert_eq(got[0], (uint8_t)i);
	}
	cr_assert_eq(flexdb_check(t.db), 0);
	tdb_done(&t);

	/* A table without writeback: the same store, written and read. */
	io.writeback = NULL;
	cr_assert_eq(flex_io_check(&io), 0);
	tdb_open(&t, "nowriteback", &o);
	for (int i = 0; i < 3000; i++) {
		char k[32];
		snprintf(k, sizeof(k), "k%08d", i);
		cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
	}
	tdb_reopen(&t, &o);
	cr_assert_eq(flexdb_check(t.db), 0);
	cr_assert_eq(count_keys(t.db), 3000);
	tdb_done(&t);
}


/* ======================================================================
 * No reader waits for the FlexSpace's fdatasyncs.
 * ====================================================================== */

/* An I/O table that parks the first fdatasync of one file of the space
 * (TREE, LOG or DATA) once armed, until the test lets it go. */
struct sgate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *name; /* "/space/NAME" */
	int fds[64];
	int nfd;
	int armed, parked, released;
};
static struct sgate SG = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int sg_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	int fd = p->open(p, path, flags, mode);
	char tail[32];
	snprintf(tail, sizeof(tail), "/space/%s", SG.name);
	size_t n = strlen(path), t = strlen(tail);
	pthread_mutex_lock(&SG.mu);
	if (fd >= 0 && n >= t && !strcmp(path + n - t, tail) && SG.nfd < 64)
		SG.fds[SG.nfd++] = fd;
	pthread_mutex_unlock(&SG.mu);
	return fd;
}

static int sg_close(const struct flex_io *io, int fd)
{
	(void)io;
	pthread_mutex_lock(&SG.mu);
	for (int i = 0; i < SG.nfd; i++)
		if (SG.fds[i] == fd)
			SG.fds[i--] = SG.fds[--SG.nfd];
	pthread_mutex_unlock(&SG.mu);
	return flex_io_posix()->close(flex_io_posix(), fd);
}

static int sg_fdatasync(const struct flex_io *io, int fd)
{
	(void)io;
	pthread_mutex_lock(&SG.mu);
	int hit = 0;
	for (int i = 0; i < SG.nfd && SG.armed; i++)
		hit |= SG.fds[i] == fd;
	if (hit) {
		SG.armed = 0;
		SG.parked = 1;
		pthread_cond_broadcast(&SG.cv);
		while (!SG.released)
			pthread_cond_wait(&SG.cv, &SG.mu);
	}
	pthread_mutex_unlock(&SG.mu);
	return flex_io_posix()->fdatasync(flex_io_posix(), fd);
}

struct sg_writer {
	struct flexdb *db;
	atomic_int stop;
	int rc;
};

static void *sg_write_main(void *arg)
{
	struct sg_writer *w = arg;
	uint8_t v[200];
	memset(v, 'w', sizeof(v));
	for (int i = 0; !atomic_load(&w->stop) && !w->rc; i++) {
		char k[32];
		snprintf(k, sizeof(k), "w%07d", i % 50000);
		w->rc = flexdb_put(w->db, k, strlen(k), v, sizeof(v));
	}
	return NULL;
}

struct sg_reader {
	struct flexdb *db;
	atomic_int done;
	int bad;
};

static void *sg_read_main(void *arg)
{
	struct sg_reader *r = arg;
	for (int i = 0; i < 2000; i += 37) {
		char k[32];
		uint8_t v[64];
		size_t vn;
		snprintf(k, sizeof(k), "k%06d", i);
		r->bad |= flexdb_get(r->db, k, strlen(k), v, sizeof(v), &vn) != 0;
	}
	atomic_store(&r->done, 1);
	return NULL;
}

/* The committer applies chunks under db->lock; a tree commit, a garbage
 * collection or a sync of the FlexSpace (each with fdatasyncs) must run
 * without it.  Each FlexSpace file's first fdatasync after the store is
 * loaded is held back while gets of keys only the FlexSpace holds run:
 * they must finish while it is held. */
Test(flexdb, no_get_waits_for_a_flexspace_fdatasync, .timeout = 120)
{
	static const char *const names[] = {"TREE", "LOG", "DATA"};
	for (size_t f = 0; f < sizeof(names) / sizeof(names[0]); f++) {
		struct flex_io io = *flex_io_posix();
		io.open = sg_open;
		io.close = sg_close;
		io.fdatasync = sg_fdatasync;
		pthread_mutex_lock(&SG.mu);
		SG.name = names[f];
		SG.nfd = 0;
		SG.armed = SG.parked = SG.released = 0;
		pthread_mutex_unlock(&SG.mu);
		struct flexdb_options o = fdb_tiny_opts();
		o.space.io = &io;
		struct tdb t;
		tdb_open(&t, "syncgate", &o);
		uint8_t v[200];
		memset(v, 'v', sizeof(v));
		for (int i = 0; i < 2000; i++) {
			char k[32];
			snprintf(k, sizeof(k), "k%06d", i);
			cr_assert_eq(flexdb_put(t.db, k, strlen(k), v, sizeof(v)), 0);
		}
		tdb_reopen(&t, &o); /* every pair in the FlexSpace, memtables empty */

		pthread_mutex_lock(&SG.mu);
		SG.armed = 1;
		pthread_mutex_unlock(&SG.mu);
		struct sg_writer w = {.db = t.db};
		atomic_init(&w.stop, 0);
		pthread_t wt;
		cr_assert_eq(pthread_create(&wt, NULL, sg_write_main, &w), 0);
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 60;
		pthread_mutex_lock(&SG.mu);
		while (!SG.parked && pthread_cond_timedwait(&SG.cv, &SG.mu, &dl) == 0)
			;
		int parked = SG.parked;
		pthread_mutex_unlock(&SG.mu);

		int read_done = 0;
		struct sg_reader r = {.db = t.db};
		atomic_init(&r.done, 0);
		pthread_t rt;
		if (parked) {
			cr_assert_eq(pthread_create(&rt, NULL, sg_read_main, &r), 0);
			for (int ms = 0; ms < 10000 && !atomic_load(&r.done); ms++)
				usleep(1000);
			read_done = atomic_load(&r.done);
		}
		pthread_mutex_lock(&SG.mu);
		SG.released = 1;
		pthread_cond_broadcast(&SG.cv);
		pthread_mutex_unlock(&SG.mu);
		if (parked)
			pthread_join(rt, NULL);
		atomic_store(&w.stop, 1);
		pthread_join(wt, NULL);
		cr_expect(parked, "%s: no fdatasync of the space's %s within 60 s", names[f],
			  names[f]);
		cr_expect(read_done, "%s: gets waited for an fdatasync of the space's %s",
			  names[f], names[f]);
		cr_expect(!r.bad, "%s: a get failed", names[f]);
		cr_expect_eq(w.rc, 0, "%s: put: %s", names[f], flex_strerror(w.rc));
		cr_assert_eq(flexdb_check(t.db), 0);
		tdb_done(&t);
	}
}

/* ---- read-only handles ------------------------------------------------------ */

/* A seeded stream of puts, deletes and batches over a few hundred keys,
 * applied to the store (when db is not NULL) and to the model (when m is
 * not NULL); 0 or the first failing status. */
static int ro_stream(uint64_t seed, long nops, struct flexdb *db, struct fmodel *m)
{
	uint64_t r = seed;
	uint8_t val[512];
	struct flexdb_batch *b = flexdb_batch_new();
	int rc = b ? 0 : -ENOMEM;
	for (long i = 0; i < nops && !rc; i++) {
		int kind = (int)rnd_below(&r, 100);
		int nb = kind < 85 ? 1 : 2 + (int)rnd_below(&r, 3);
		flexdb_batch_clear(b);
		for (int j = 0; j < nb && !rc; j++) {
			char k[16];
			int kn = snprintf(k, sizeof(k), "key%04u", (unsigned)rnd_below(&r, 700));
			int del = rnd_below(&r, 100) < 20;
			uint32_t vn = (uint32_t)rnd_below(&r, sizeof(val));
			val_fill(rnd(&r), val, vn);
			if (m && del)
				fm_del(m, k, (uint32_t)kn);
			else if (m)
				fm_put(m, k, (uint32_t)kn, val, vn);
			if (db && nb == 1)
				rc = del ? flexdb_delete(db, k, (size_t)kn)
					 : flexdb_put(db, k, (size_t)kn, val, vn);
			else if (db)
				rc = del ? flexdb_batch_delete(b, k, (size_t)kn)
					 : flexdb_batch_put(b, k, (size_t)kn, val, vn);
		}
		if (!rc && db && nb > 1)
			rc = flexdb_write(db, b);
	}
	flexdb_batch_free(b);
	return rc;
}

/* The store holds exactly the model: the whole iteration, every model key
 * and the absent keys of the stream's range, and the deep check. */
static void ro_expect_model(struct flexdb *db, const struct fmodel *m, const char *what)
{
	uint64_t d;
	size_t n;
	struct why why = {{0}};
	cr_assert_eq(store_digest(db, &d, &n, NULL, &why), 0, "%s: %s", what, why.msg);
	cr_expect_eq(n, m->n, "%s: %zu pairs, model %zu", what, n, m->n);
	cr_expect_eq(d, m->digest, "%s: the pairs differ from the model", what);
	uint8_t buf[512];
	for (unsigned i = 0; i < 700; i++) {
		char k[16];
		int kn = snprintf(k, sizeof(k), "key%04u", i);
		const struct ment *e = fm_get(m, k, (uint32_t)kn);
		size_t vn = 0;
		int rc = flexdb_get(db, k, (size_t)kn, buf, sizeof(buf), &vn);
		if (!e) {
			cr_expect_eq(rc, FLEXDB_NOTFOUND, "%s: %s: %s", what, k, flex_strerror(rc));
			continue;
		}
		cr_expect_eq(rc, 0, "%s: %s: %s", what, k, flex_strerror(rc));
		cr_expect(!rc && vn == e->vn && !memcmp(buf, e->v, vn), "%s: %s: wrong value", what,
			  k);
	}
	cr_expect_eq(flexdb_check(db), 0, "%s: flexdb_check", what);
}

static void ro_db_changes_refused(struct flexdb *db)
{
	struct flexdb_batch *b = flexdb_batch_new();
	cr_assert_not_null(b);
	cr_expect_eq(flexdb_put(db, "key0001", 7, "x", 1), FLEX_EREADONLY);
	cr_expect_eq(flexdb_put(db, "new", 3, "", 0), FLEX_EREADONLY);
	cr_expect_eq(flexdb_delete(db, "key0001", 7), FLEX_EREADONLY);
	cr_expect_eq(flexdb_write(db, b), FLEX_EREADONLY, "an empty batch");
	cr_assert_eq(flexdb_batch_put(b, "new", 3, "v", 1), 0);
	cr_expect_eq(flexdb_write(db, b), FLEX_EREADONLY);
	cr_expect_eq(flexdb_delete_range(db, "", 0, "\xff", 1), FLEX_EREADONLY);
	flexdb_batch_clear(b);
	cr_assert_eq(flexdb_batch_delete_range(b, "", 0, "\xff", 1), 0);
	cr_expect_eq(flexdb_write(db, b), FLEX_EREADONLY, "a batch's range delete");
	cr_expect_eq(flexdb_sync(db), FLEX_EREADONLY);
	flexdb_batch_free(b);
}

/* A writer killed with records in its WALs that were never synced (and
 * memtables committed into the FlexSpace, whose log is not) leaves what
 * a read-only open must replay in memory: it sees every write that
 * returned, refuses every change, and neither it nor a second read-only
 * handle beside it nor their closes change a byte or an entry of the
 * store; no call that writes reaches the I/O seam.  A writable open
 * afterwards recovers the same. */
Test(flexdb, read_only_open_replays_a_crash_in_memory_and_writes_nothing)
{
	uint64_t seed = test_seed("flexdb read-only after a crash");
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "ro_crash");
	const long nops = scaled(3000);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexdb_options o = fdb_tiny_opts();
		/* Tree commits seldom, so that the FlexSpace log holds records
		 * to replay when the writer is killed. */
		o.space.log_limit = 64u << 20;
		struct flexdb *db;
		if (flexdb_open(dir, &o, &db) || ro_stream(seed, nops, db, NULL))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the writer failed (status %d)", st);
	struct fmodel m = {0};
	ro_stream(seed, nops, NULL, &m);

	char *before = dir_snapshot(dir);
	struct roio w;
	roio_init(&w);
	struct flexdb_options o = fdb_tiny_opts();
	o.read_only = 1;
	o.space.io = &w.io;
	struct flexdb *ro, *ro2;
	int rc = flexdb_open(dir, &o, &ro);
	cr_assert_eq(rc, 0, "read-only open: %s (%s)", flex_strerror(rc), w.bad);
	struct flexdb_stats fst;
	cr_assert_eq(flexdb_stats(ro, &fst), 0);
	cr_expect_gt(fst.recovered_ops, 0, "no WAL record was replayed: the test proves little");
	cr_expect_gt(fst.space.recovered_records, 0, "no FlexSpace log record was replayed");
	ro_expect_model(ro, &m, "read-only");
	/* A second one at once, through the default table. */
	o = fdb_tiny_opts();
	o.read_only = 1;
	rc = flexdb_open(dir, &o, &ro2);
	cr_assert_eq(rc, 0, "second read-only open: %s", flex_strerror(rc));
	ro_db_changes_refused(ro);
	ro_db_changes_refused(ro2);
	ro_expect_model(ro2, &m, "second read-only");
	ro_expect_model(ro, &m, "read-only after refused changes");
	cr_expect_eq(flexdb_close(ro2), 0);
	cr_expect_eq(flexdb_close(ro), 0);
	cr_expect_eq(atomic_load(&w.changes), 0, "the read-only handle tried: %s", w.bad);
	char *after = dir_snapshot(dir);
	cr_expect_str_eq(after, before, "a read-only handle changed the store");
	free(after);
	free(before);

	o = fdb_tiny_opts();
	struct flexdb *db;
	rc = flexdb_open(dir, &o, &db);
	cr_assert_eq(rc, 0, "writable open: %s", flex_strerror(rc));
	struct flexdb_stats wst;
	cr_assert_eq(flexdb_stats(db, &wst), 0);
	cr_expect_eq(wst.recovered_ops, fst.recovered_ops);
	ro_expect_model(db, &m, "writable after read-only");
	cr_expect_eq(flexdb_close(db), 0);
	fm_free(&m);
	tmp_remove(dir);
}

/* A read-only handle sees what a writer synced and closed, and what it
 * synced without closing (a crash after the sync). */
Test(flexdb, read_only_handle_sees_what_a_writer_synced)
{
	struct tdb t;
	tdb_open(&t, "ro_synced", NULL);
	put_s(t.db, "a", "1");
	put_s(t.db, "b", "2");
	cr_assert_eq(flexdb_close(t.db), 0);
	t.db = NULL;
	struct flexdb_options o = {.read_only = 1};
	struct flexdb *ro;
	cr_assert_eq(flexdb_open(t.dir, &o, &ro), 0);
	expect_val(ro, "a", 1, "1", 1);
	expect_val(ro, "b", 1, "2", 1);
	expect_absent(ro, "c", 1);
	cr_assert_eq(flexdb_close(ro), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexdb *db;
		if (flexdb_open(t.dir, NULL, &db) || flexdb_put(db, "c", 1, "3", 1) ||
		    flexdb_delete(db, "a", 1) || flexdb_sync(db))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st), "the writer failed (status %d)", st);
	cr_assert_eq(flexdb_open(t.dir, &o, &ro), 0);
	expect_absent(ro, "a", 1);
	expect_val(ro, "b", 1, "2", 1);
	expect_val(ro, "c", 1, "3", 1);
	cr_assert_eq(flexdb_close(ro), 0);
	tdb_done(&t);
}

/* In a child: opens dir read-only and writable and exits 0 when they
 * give want_ro and want_rw; a read-only handle must find k = v. */
static void ro_db_child(const char *dir, int want_ro, int want_rw, const char *k, const char *v)
{
	struct flexdb_options o = {.read_only = 1};
	struct flexdb *db = NULL;
	int rc = flexdb_open(dir, &o, &db);
	if (rc != want_ro || (rc && db))
		_exit(10);
	if (!rc) {
		char b[64];
		size_t n = 0;
		if (flexdb_get(db, k, strlen(k), b, sizeof(b), &n) || n != strlen(v) ||
		    memcmp(b, v, n))
			_exit(11);
		if (flexdb_close(db))
			_exit(12);
	}
	rc = flexdb_open(dir, NULL, &db);
	if (rc != want_rw || (rc && db))
		_exit(13);
	if (!rc && flexdb_close(db))
		_exit(14);
	_exit(0);
}

static void ro_db_in_child(const char *dir, int want_ro, int want_rw, int nobody, const char *what)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (nobody && geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(20);
		ro_db_child(dir, want_ro, want_rw, "k", "v");
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child status %d", what,
		  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

Test(flexdb, read_only_handles_share_and_exclude_a_writer_both_ways)
{
	struct tdb t;
	tdb_open(&t, "ro_lock", NULL);
	put_s(t.db, "k", "v");
	struct flexdb_options ro = {.read_only = 1};
	struct flexdb *a = (struct flexdb *)&t, *b, *w;
	cr_expect_eq(flexdb_open(t.dir, &ro, &a), FLEX_EBUSY, "a reader beside a writer");
	cr_expect_null(a);
	ro_db_in_child(t.dir, FLEX_EBUSY, FLEX_EBUSY, 0, "a child beside a writer");
	cr_assert_eq(flexdb_close(t.db), 0);
	t.db = NULL;

	cr_assert_eq(flexdb_open(t.dir, &ro, &a), 0);
	cr_assert_eq(flexdb_open(t.dir, &ro, &b), 0, "two readers in one process");
	w = (struct flexdb *)&t;
	cr_expect_eq(flexdb_open(t.dir, NULL, &w), FLEX_EBUSY, "a writer beside readers");
	cr_expect_null(w);
	ro_db_in_child(t.dir, 0, FLEX_EBUSY, 0, "a child beside two readers");
	cr_assert_eq(flexdb_close(a), 0);
	cr_expect_eq(flexdb_open(t.dir, NULL, &w), FLEX_EBUSY, "a writer beside one reader");
	cr_assert_eq(flexdb_close(b), 0);
	ro_db_in_child(t.dir, 0, 0, 0, "a child once the readers closed");
	tdb_done(&t);
}

static int ro_db_chmod_writable;

static int ro_db_chmod_one(const char *path, const struct stat *sb, int type, struct FTW *f)
{
	(void)type, (void)f;
	mode_t m = (sb->st_mode & 07777) | (S_ISDIR(sb->st_mode) ? 0555 : 0444);
	chmod(path, ro_db_chmod_writable ? m | S_IWUSR : m & ~(mode_t)0222);
	return 0;
}

/* Without write permission on the store (chmod -R a-w; as nobody when the
 * test runs as root, for whom permissions do not bind) a read-only open
 * reads it and a writable one gets -EACCES; nothing changes. */
Test(flexdb, read_only_open_needs_no_write_permission)
{
	struct tdb t;
	tdb_open(&t, "ro_perm", NULL);
	put_s(t.db, "k", "v");
	cr_assert_eq(flexdb_close(t.db), 0);
	t.db = NULL;
	ro_db_chmod_writable = 0;
	cr_assert_eq(nftw(t.dir, ro_db_chmod_one, 16, FTW_PHYS), 0);
	char *before = dir_snapshot(t.dir);
	ro_db_in_child(t.dir, 0, -EACCES, 1, "without write permission");
	char *after = dir_snapshot(t.dir);
	cr_expect_str_eq(after, before);
	free(after);
	free(before);
	ro_db_chmod_writable = 1;
	cr_assert_eq(nftw(t.dir, ro_db_chmod_one, 16, FTW_PHYS), 0);
	tdb_done(&t);
}

/* ---- checkpoints ------------------------------------------------------------------- */

/* Slows the writes of files under a checkpoint's directory ("/copy"), so
 * that the writer, memtable switches and the committer (its commits, WAL
 * removals, collections) run while the copy reads the source. */
static atomic_int ck_slow_fds[64];

static int ck_slow_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	int fd = flex_io_posix()->open(io, path, flags, mode);
	if (fd >= 0 && fd < 64)
		atomic_store(&ck_slow_fds[fd], strstr(path, "/copy") != NULL);
	return fd;
}

static ssize_t ck_slow_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
			      uint64_t off)
{
	if (fd >= 0 && fd < 64 && atomic_load(&ck_slow_fds[fd]))
		usleep(20000);
	return flex_io_posix()->pwrite(io, fd, buf, len, off);
}

/* A single writer's puts and deletes over a small key set; the digest and
 * count of the state after each op, so a copy can be matched to a
 * prefix. */
struct ck_writer {
	struct flexdb *db;
	uint64_t seed;
	long nops;
	uint64_t *digest;
	size_t *count;
	atomic_long done;
	int err;
};

#define CK_KEYS 1500

static void ck_val(uint8_t *v, uint32_t *vn, long i, uint64_t *r)
{
	*vn = 8 + (uint32_t)rnd_below(r, 300);
	memset(v, 'a' + (int)(i % 26), *vn);
	memcpy(v, &i, sizeof(i));
}

static void *ck_write_main(void *arg)
{
	struct ck_writer *cw = arg;
	uint64_t r = cw->seed;
	/* The value each key holds in the model (length 0: absent). */
	static uint8_t vals[CK_KEYS][320];
	static uint32_t vlen[CK_KEYS];
	memset(vlen, 0, sizeof(vlen));
	uint64_t d = 0;
	size_t n = 0;
	for (long i = 1; i <= cw->nops && !cw->err; i++) {
		char k[16];
		int kk = (int)rnd_below(&r, CK_KEYS);
		int kn = snprintf(k, sizeof(k), "ck%05d", kk);
		if (vlen[kk]) {
			d -= pair_hash(k, (uint32_t)kn, vals[kk], vlen[kk]);
			n--;
		}
		if (rnd_below(&r, 8) == 0) {
			vlen[kk] = 0;
			cw->err = flexdb_delete(cw->db, k, (size_t)kn);
		} else {
			ck_val(vals[kk], &vlen[kk], i, &r);
			d += pair_hash(k, (uint32_t)kn, vals[kk], vlen[kk]);
			n++;
			cw->err = flexdb_put(cw->db, k, (size_t)kn, vals[kk], vlen[kk]);
		}
		cw->digest[i] = d;
		cw->count[i] = n;
		atomic_store(&cw->done, i);
	}
	return NULL;
}

/* Opens a copy without create, deep-checks it and finds the prefix
 * [lo, hi] of the writer's ops it holds; -1 when none. */
static long ck_match(const char *dir, const struct flexdb_options *opt, const struct ck_writer *cw,
		     long lo, long hi, struct why *w)
{
	struct flexdb_options o = *opt;
	o.no_create = 1;
	struct flexdb *db;
	int rc = flexdb_open(dir, &o, &db);
	if (rc) {
		failf(w, "open: %s", flex_strerror(rc));
		return -1;
	}
	uint64_t d;
	size_t n;
	long k = -1;
	if ((rc = flexdb_check(db)) != 0)
		failf(w, "flexdb_check: %s", flex_strerror(rc));
	else if (!store_digest(db, &d, &n, NULL, w)) {
		for (long i = hi; i >= lo && k < 0; i--)
			if (cw->digest[i] == d && cw->count[i] == n)
				k = i;
		if (k < 0)
			failf(w, "%zu pairs, the state after no op in [%ld, %ld]", n, lo, hi);
	}
	if ((rc = flexdb_close(db)) != 0 && k >= 0) {
		failf(w, "close: %s", flex_strerror(rc));
		k = -1;
	}
	return k;
}

/* Checkpoints taken while a writer runs (tiny memtables: switches and
 * commits all the time) open as the state after a prefix of its ops that
 * holds every op returned before the call, pass the deep check, and the
 * source keeps every write. */
Test(flexdb, checkpoint_while_writing_is_a_prefix_holding_every_returned_write)
{
	uint64_t seed = test_seed("flexdb checkpoint");
	char root[300], dir[340], dest[3][340];
	fdb_tmpdir(root, sizeof(root), "ckpt");
	snprintf(dir, sizeof(dir), "%s/src", root);
	struct flex_io slow = *flex_io_posix();
	slow.open = ck_slow_open;
	slow.pwrite = ck_slow_pwrite;
	struct flexdb_options o = fdb_tiny_opts();
	o.space.io = &slow;
	struct ck_writer cw = {.seed = seed, .nops = scaled(30000)};
	cr_assert_eq(flexdb_open(dir, &o, &cw.db), 0);
	cw.digest = calloc((size_t)cw.nops + 1, sizeof(uint64_t));
	cw.count = calloc((size_t)cw.nops + 1, sizeof(size_t));
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, ck_write_main, &cw), 0);
	long lo[3], hi[3];
	for (int c = 0; c < 3; c++) {
		snprintf(dest[c], sizeof(dest[c]), "%s/copy%d", root, c);
		if (c == 2)
			cr_assert_eq(mkdir(dest[c], 0755), 0);
		while (atomic_load(&cw.done) < cw.nops * (c + 1) / 10 && !cw.err)
			usleep(1000);
		lo[c] = atomic_load(&cw.done);
		int rc = flexdb_checkpoint(cw.db, dest[c]);
		hi[c] = atomic_load(&cw.done) + 1;
		cr_assert_eq(rc, 0, "seed %" PRIu64 ": checkpoint %d: %s", seed, c,
			     flex_strerror(rc));
	}
	pthread_join(th, NULL);
	cr_assert_eq(cw.err, 0, "seed %" PRIu64 ": writer: %s", seed, flex_strerror(cw.err));
	long last = atomic_load(&cw.done);
	struct why w = {0};
	struct flexdb_options plain = fdb_tiny_opts();
	for (int c = 0; c < 3; c++) {
		if (hi[c] > last)
			hi[c] = last;
		long k = ck_match(dest[c], &plain, &cw, lo[c], hi[c], &w);
		cr_expect_geq(k, 0, "seed %" PRIu64 ": checkpoint %d (ops %ld..%ld): %s", seed, c,
			      lo[c], hi[c], w.msg);
	}
	uint64_t d;
	size_t n;
	cr_expect_eq(flexdb_check(cw.db), 0);
	cr_expect_eq(store_digest(cw.db, &d, &n, NULL, &w), 0, "%s", w.msg);
	cr_expect(d == cw.digest[last] && n == cw.count[last], "seed %" PRIu64 ": source differs",
		  seed);
	cr_assert_eq(flexdb_close(cw.db), 0);
	/* A checkpoint of the copy, made after reopening it, is the same. */
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dest[0], &plain, &db), 0);
	char again[360];
	snprintf(again, sizeof(again), "%s/again", root);
	cr_assert_eq(flexdb_checkpoint(db, again), 0);
	cr_assert_eq(flexdb_close(db), 0);
	long k0 = ck_match(dest[0], &plain, &cw, 0, last, &w);
	cr_expect_eq(ck_match(again, &plain, &cw, k0, k0, &w), k0, "copy of the copy: %s", w.msg);
	free(cw.digest);
	free(cw.count);
}

#endif /* FLEXDB_TSAN_MAIN */
