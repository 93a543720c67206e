/*
 * test_flextree.c - Criterion suite for FlexTree (include/flextree.h).
 *
 * The suite is built twice by `make test`: against the normal tree and, as
 * test_flextree_tiny, against a tree compiled with FT_LEAF_CAP=6 and
 * FT_INTERNAL_CAP=5, so that splits, merges, root changes and partial-offset
 * rebases happen after a handful of extents.  This file sees the same
 * -DFT_LEAF_CAP in the tiny build and uses it (TINY) only to size workloads
 * and to check the tree more often.
 *
 * Correctness is judged against a brute-force twin: a sorted array of extents
 * (logical offsets implied by order) where every operation is the obvious
 * O(N) array edit.  The tree is allowed to merge physically contiguous
 * extents where the model does not, so the two are compared as MAPPINGS: the
 * byte-level function logical -> physical, normalised by joining adjacent
 * physically contiguous pieces on both sides.  Tags are compared as the set
 * of (logical start, tag) points, which merging cannot change.
 *
 * Randomised tests print their seed; FLEX_TEST_SEED=N replays it and
 * FLEX_TEST_SCALE=K multiplies the amount of work (`make stress` uses 50).
 *
 * Persistent tests work in a fresh directory under /tmp each.  Crashes are
 * simulated three ways: a forked child that _exit()s without committing, a
 * child killed with SIGKILL between commits, and an I/O table (flex_io.h)
 * that fails every write and sync from the Nth call on, which leaves the file
 * exactly as the last completed commit left it.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flextree.h"

#ifdef FT_LEAF_CAP
#define TINY 1
#else
#define TINY 0
#endif

/* libcriterion's runner leaks one small allocation of its own; without this
 * LeakSanitizer fails `make test SANITIZE=address,...` for a leak that is
 * not ours.  The hook must be exported (the build uses -fvisibility=hidden),
 * as the sanitizer runtime looks it up dynamically. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void);
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void)
{
	return "leak:libcriterion.so\n";
}
#endif

#define HOLE FLEXTREE_HOLE
#define SLOT 4096u
#define U(x) ((unsigned long long)(x))

/* ------------------------------------------------------------------------ */
/* Random numbers, seeds, scale                                              */
/* ------------------------------------------------------------------------ */

struct rng {
	uint64_t s;
};

/* splitmix64: tiny, fast and fully determined by the seed. */
static uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static uint64_t rng_below(struct rng *r, uint64_t n)
{
	return n ? rng_next(r) % n : 0;
}

/* Uniform in [lo, hi]; hi - lo must be below UINT64_MAX. */
static uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_below(r, hi - lo + 1);
}

static bool rng_pct(struct rng *r, unsigned pct)
{
	return rng_below(r, 100) < pct;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The seed of a random test: FLEX_TEST_SEED when set, else the clock. */
static uint64_t test_seed(const char *test)
{
	const char *env = getenv("FLEX_TEST_SEED");
	uint64_t seed;

	if (env && *env) {
		seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
		       ((uint64_t)getpid() << 40);
	}
	fprintf(stderr, "flextree::%s seed=%llu (replay with FLEX_TEST_SEED=%llu)\n", test, U(seed),
		U(seed));
	return seed;
}

static uint64_t test_scale(void)
{
	const char *env = getenv("FLEX_TEST_SCALE");
	uint64_t s = env && *env ? strtoull(env, NULL, 0) : 1;
	return s ? s : 1;
}

/* FLEX_TEST_TRACE=1 prints every mutating random op (for replays). */
static bool trace_on(void)
{
	static int on = -1;
	if (on < 0) {
		const char *env = getenv("FLEX_TEST_TRACE");
		on = env && *env && *env != '0';
	}
	return on;
}

/* FLEX_TEST_CHECK_EVERY=N runs flextree_check every N random ops. */
static uint64_t check_every(uint64_t dflt)
{
	const char *env = getenv("FLEX_TEST_CHECK_EVERY");
	uint64_t v = env && *env ? strtoull(env, NULL, 0) : 0;
	return v ? v : dflt;
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		fprintf(stderr, "out of memory\n");
		abort();
	}
	return q;
}

/* A failed comparison in a helper prints where and why, and makes the helper
 * return its line number; tests assert that helpers return 0.  Helpers do not
 * use cr_assert so that forked children can run them too. */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			rc = __LINE__;                                                             \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* ------------------------------------------------------------------------ */
/* The model: a sorted array of extents                                      */
/* ------------------------------------------------------------------------ */

struct mext {
	uint64_t poff; /* HOLE for a hole */
	uint64_t len;  /* may exceed 32 bits: the model never splits for size */
	uint16_t tag;
};

struct model {
	struct mext *v;
	size_t n, cap;
	uint64_t size;
};

static void model_reserve(struct model *m, size_t need)
{
	if (need <= m->cap)
		return;
	size_t cap = m->cap ? m->cap : 16;
	while (cap < need)
		cap *= 2;
	m->v = xrealloc(m->v, cap * sizeof(*m->v));
	m->cap = cap;
}

static void model_free(struct model *m)
{
	free(m->v);
	memset(m, 0, sizeof(*m));
}

static void model_copy(struct model *dst, const struct model *src)
{
	model_reserve(dst, src->n);
	if (src->n)
		memcpy(dst->v, src->v, src->n * sizeof(*src->v));
	dst->n = src->n;
	dst->size = src->size;
}

static void model_put(struct model *m, size_t i, struct mext e)
{
	model_reserve(m, m->n + 1);
	memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
	m->v[i] = e;
	m->n++;
}

static void model_erase(struct model *m, size_t i, size_t j)
{
	memmove(&m->v[i], &m->v[j], (m->n - j) * sizeof(*m->v));
	m->n -= j - i;
}

static uint64_t mext_poff_at(const struct mext *e, uint64_t off)
{
	return e->poff == HOLE ? HOLE : e->poff + off;
}

/* Logical start of extent i (m->size for i == m->n). */
static uint64_t model_start(const struct model *m, size_t i)
{
	uint64_t s = 0;
	for (size_t k = 0; k < i; k++)
		s += m->v[k].len;
	return s;
}

/* Index of the extent containing loff (< size) and its start. */
static size_t model_find(const struct model *m, uint64_t loff, uint64_t *start)
{
	uint64_t s = 0;
	for (size_t i = 0; i < m->n; i++) {
		if (loff < s + m->v[i].len) {
			*start = s;
			return i;
		}
		s += m->v[i].len;
	}
	*start = s;
	return m->n;
}

/* Index of the extent starting at x after splitting the one containing x
 * (m->n when x == size).  The head keeps the tag; the tail is untagged. */
static size_t model_split(struct model *m, uint64_t x)
{
	uint64_t s;
	size_t i = model_find(m, x, &s);

	if (i == m->n || s == x)
		return i;
	struct mext tail = {mext_poff_at(&m->v[i], x - s), s + m->v[i].len - x, 0};
	m->v[i].len = x - s;
	model_put(m, i + 1, tail);
	return i + 1;
}

static void model_insert(struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
{
	if (len == 0)
		return;
	if (loff > m->size) {
		struct mext h = {HOLE, loff - m->size, 0};
		model_put(m, m->n, h);
		m->size = loff;
	}
	size_t i = model_split(m, loff);
	struct mext e = {poff, len, 0};
	model_put(m, i, e);
	m->size += len;
}

static void model_collapse(struct model *m, uint64_t loff, uint64_t len)
{
	if (len == 0)
		return;
	size_t i = model_split(m, loff);
	size_t j = model_split(m, loff + len);
	model_erase(m, i, j);
	m->size -= len;
}

static void model_remap(struct model *m, uint64_t loff, uint64_t len, uint64_t poff)
{
	if (len == 0)
		return;
	size_t i = model_split(m, loff);
	uint16_t tag = m->v[i].tag; /* 0 when loff cut an extent */
	size_t j = model_split(m, loff + len);
	model_erase(m, i + 1, j);
	m->v[i] = (struct mext){poff, len, tag};
}

static void model_tag_set(struct model *m, uint64_t loff, uint16_t tag)
{
	size_t i = model_split(m, loff);
	m->v[i].tag = tag;
}

/* Tag point at or before loff: the tagged extent start closest to loff. */
static bool model_tag_before(const struct model *m, uint64_t loff, uint64_t *at, uint16_t *tag)
{
	uint64_t s = 0;
	bool found = false;
	for (size_t i = 0; i < m->n && s <= loff; i++) {
		if (m->v[i].tag) {
			*at = s;
			*tag = m->v[i].tag;
			found = true;
		}
		s += m->v[i].len;
	}
	return found;
}

/* First tag point in [a, b). */
static bool model_tag_in(const struct model *m, uint64_t a, uint64_t b, uint64_t *at, uint16_t *tag)
{
	uint64_t s = 0;
	for (size_t i = 0; i < m->n && s < b; i++) {
		if (m->v[i].tag && s >= a) {
			*at = s;
			*tag = m->v[i].tag;
			return true;
		}
		s += m->v[i].len;
	}
	return false;
}

/* ------------------------------------------------------------------------ */
/* Normalised mappings                                                        */
/* ------------------------------------------------------------------------ */

struct span {
	uint64_t loff, poff, len;
};

struct spans {
	struct span *v;
	size_t n, cap;
};

static bool phys_contig(uint64_t ppoff, uint64_t plen, uint64_t poff)
{
	if (ppoff == HOLE || poff == HOLE)
		return ppoff == HOLE && poff == HOLE;
	return ppoff + plen == poff;
}

static void spans_push(struct spans *s, uint64_t loff, uint64_t poff, uint64_t len)
{
	if (s->n) {
		struct span *l = &s->v[s->n - 1];
		if (l->loff + l->len == loff && phys_contig(l->poff, l->len, poff)) {
			l->len += len;
			return;
		}
	}
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = (struct span){loff, poff, len};
}

static void model_spans(const struct model *m, struct spans *s)
{
	uint64_t loff = 0;
	s->n = 0;
	for (size_t i = 0; i < m->n; i++) {
		spans_push(s, loff, m->v[i].poff, m->v[i].len);
		loff += m->v[i].len;
	}
}

/* The normalised piece of the model containing loff (< size). */
static struct span model_piece_at(const struct model *m, uint64_t loff)
{
	uint64_t s;
	size_t i = model_find(m, loff, &s);
	size_t lo = i, hi = i;
	uint64_t lo_start = s, end = s + m->v[i].len;

	while (lo > 0 && phys_contig(m->v[lo - 1].poff, m->v[lo - 1].len, m->v[lo].poff)) {
		lo--;
		lo_start -= m->v[lo].len;
	}
	while (hi + 1 < m->n && phys_contig(m->v[hi].poff, m->v[hi].len, m->v[hi + 1].poff)) {
		hi++;
		end += m->v[hi].len;
	}
	return (struct span){lo_start, m->v[lo].poff, end - lo_start};
}

static uint64_t span_poff_at(const struct span *sp, uint64_t loff)
{
	return sp->poff == HOLE ? HOLE : sp->poff + (loff - sp->loff);
}

/* Physical address of byte loff in the model. */
static uint64_t model_poff(const struct model *m, uint64_t loff)
{
	uint64_t s;
	size_t i = model_find(m, loff, &s);
	return mext_poff_at(&m->v[i], loff - s);
}

/* ------------------------------------------------------------------------ */
/* Reading the tree                                                           */
/* ------------------------------------------------------------------------ */

struct exts {
	struct flextree_extent *v;
	size_t n, cap;
};

static int collect_cb(void *arg, const struct flextree_extent *e)
{
	struct exts *x = arg;
	if (x->n == x->cap) {
		x->cap = x->cap ? 2 * x->cap : 64;
		x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
	}
	x->v[x->n++] = *e;
	return 0;
}

/* Index of the extent containing loff (loff < end of the last one). */
static size_t exts_index(const struct exts *x, uint64_t loff)
{
	size_t lo = 0, hi = x->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->v[mid].loff <= loff)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static size_t spans_index(const struct spans *x, uint64_t loff)
{
	size_t lo = 0, hi = x->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->v[mid].loff <= loff)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* A logical offset in [0, size], biased to 0, size and extent boundaries. */
static uint64_t pick_loff(struct rng *r, const struct model *m)
{
	unsigned k = (unsigned)rng_below(r, 10);
	uint64_t i = rng_below(r, m->n ? m->n : 1);
	uint64_t x = rng_below(r, m->size + 1);

	if (m->size == 0 || k == 0)
		return 0;
	if (k == 1)
		return m->size;
	if (k <= 3)
		return model_start(m, (size_t)i);
	if (k == 4)
		return min_u64(model_start(m, (size_t)i) + 1, m->size);
	return x;
}

/* Like pick_loff but inside [0, size); size must be nonzero. */
static uint64_t pick_inside(struct rng *r, const struct model *m)
{
	uint64_t x = pick_loff(r, m);
	return x < m->size ? x : m->size - 1;
}

/*
 * Compares everything observable about t with m: size, the deep check,
 * scan == full query, normalised mappings, extent count in stats, tag
 * points, random lookups and tag_gets (against the model and against the
 * tree's own scan), one sub-range query with a small cap and one sub-range
 * scan.  max_extent (0: none) bounds every mapped extent.
 * Returns 0 or the line of the first failed check.
 */
static int compare_tree_ext(const struct flextree *t, const struct model *m, struct rng *r,
			    uint32_t max_extent)
{
	int rc = 0, c;
	struct exts ex = {0}, sx = {0};
	struct spans ms = {0}, ts = {0};
	struct flextree_mapping *mp = NULL;
	struct flextree_stats st;
	uint64_t size = m->size;

	CHECK(flextree_size(t) == size, "size tree=%llu model=%llu", U(flextree_size(t)), U(size));
	c = flextree_check(t);
	CHECK(c == 0, "flextree_check=%d", c);
	c = flextree_scan(t, 0, size, collect_cb, &ex);
	CHECK(c == 0, "scan=%d", c);

	uint64_t pos = 0;
	for (size_t i = 0; i < ex.n; i++) {
		const struct flextree_extent *e = &ex.v[i];
		CHECK(e->loff == pos, "extent %zu loff=%llu expected %llu", i, U(e->loff), U(pos));
		CHECK(e->len > 0, "extent %zu empty", i);
		CHECK(e->poff == HOLE || e->poff + e->len <= HOLE,
		      "extent %zu poff=%llu len=%u beyond 48 bits", i, U(e->poff), e->len);
		CHECK(max_extent == 0 || e->poff == HOLE || e->len <= max_extent,
		      "extent %zu len=%u > max_extent %u", i, e->len, max_extent);
		pos += e->len;
	}
	CHECK(pos == size, "scan covers %llu of %llu", U(pos), U(size));

	ssize_t q = flextree_query(t, 0, size, NULL, 0);
	CHECK(q == (ssize_t)ex.n, "query count=%zd, scan extents=%zu", q, ex.n);
	mp = xrealloc(NULL, (ex.n + 1) * sizeof(*mp));
	q = flextree_query(t, 0, size, mp, ex.n);
	CHECK(q == (ssize_t)ex.n, "query count=%zd, scan extents=%zu", q, ex.n);
	for (size_t i = 0; i < ex.n; i++) {
		CHECK(mp[i].loff == ex.v[i].loff && mp[i].poff == ex.v[i].poff &&
			  mp[i].len == ex.v[i].len,
		      "query[%zu]={%llu,%llu,%llu} scan={%llu,%llu,%u}", i, U(mp[i].loff),
		      U(mp[i].poff), U(mp[i].len), U(ex.v[i].loff), U(ex.v[i].poff), ex.v[i].len);
		spans_push(&ts, mp[i].loff, mp[i].poff, mp[i].len);
	}
	model_spans(m, &ms);
	for (size_t i = 0; i < ms.n || i < ts.n; i++) {
		CHECK(i < ms.n && i < ts.n, "mapping count tree=%zu model=%zu", ts.n, ms.n);
		CHECK(ts.v[i].loff == ms.v[i].loff && ts.v[i].poff == ms.v[i].poff &&
			  ts.v[i].len == ms.v[i].len,
		      "mapping %zu tree={loff %llu poff %llu len %llu} model={%llu %llu %llu}", i,
		      U(ts.v[i].loff), U(ts.v[i].poff), U(ts.v[i].len), U(ms.v[i].loff),
		      U(ms.v[i].poff), U(ms.v[i].len));
	}

	c = flextree_stats(t, &st);
	CHECK(c == 0, "stats=%d", c);
	CHECK(st.size == size, "stats.size=%llu", U(st.size));
	CHECK(st.extents == ex.n, "stats.extents=%llu scan=%zu", U(st.extents), ex.n);
	CHECK(st.height >= 1 || ex.n == 0, "height %u", st.height);

	/* Tag points, in order. */
	{
		size_t k = 0;
		uint64_t s = 0;
		for (size_t i = 0; i < m->n; i++) {
			if (m->v[i].tag) {
				while (k < ex.n && !ex.v[k].tag)
					k++;
				CHECK(k < ex.n, "model tag %u at %llu missing from tree",
				      m->v[i].tag, U(s));
				CHECK(ex.v[k].loff == s && ex.v[k].tag == m->v[i].tag,
				      "tree tag %u at %llu, model tag %u at %llu", ex.v[k].tag,
				      U(ex.v[k].loff), m->v[i].tag, U(s));
				k++;
			}
			s += m->v[i].len;
		}
		while (k < ex.n && !ex.v[k].tag)
			k++;
		CHECK(k == ex.n, "tree has extra tag %u at %llu", ex.v[k].tag, U(ex.v[k].loff));
	}

	/* Lookups and tag_gets, at random and at extent boundaries. */
	for (int k = 0; k < 24 && size; k++) {
		uint64_t loff;
		if (k & 1)
			loff = rng_below(r, size);
		else
			loff = ex.v[rng_below(r, ex.n)].loff + (k & 2 ? 0 : ex.v->len - 1);
		if (loff >= size)
			loff = size - 1;
		uint64_t p = 0, run = 0;
		c = flextree_lookup(t, loff, &p, &run);
		CHECK(c == 0, "lookup(%llu)=%d", U(loff), c);
		const struct span *sp = &ms.v[spans_index(&ms, loff)];
		const struct flextree_extent *e = &ex.v[exts_index(&ex, loff)];
		CHECK(p == span_poff_at(sp, loff), "lookup(%llu) poff=%llu model %llu", U(loff),
		      U(p), U(span_poff_at(sp, loff)));
		CHECK(run >= 1 && run <= sp->loff + sp->len - loff,
		      "lookup(%llu) run=%llu, model contiguous run %llu", U(loff), U(run),
		      U(sp->loff + sp->len - loff));
		CHECK(run == e->loff + e->len - loff,
		      "lookup(%llu) run=%llu but its extent [%llu,+%u) leaves %llu", U(loff),
		      U(run), U(e->loff), e->len, U(e->loff + e->len - loff));
		uint16_t tag = 0xdead;
		uint64_t eloff = UINT64_MAX;
		c = flextree_tag_get(t, loff, &tag, &eloff);
		CHECK(c == 0, "tag_get(%llu)=%d", U(loff), c);
		CHECK(tag == e->tag && eloff == e->loff,
		      "tag_get(%llu)=(%u,%llu), scan extent (%u,%llu)", U(loff), tag, U(eloff),
		      e->tag, U(e->loff));
	}
	{
		uint64_t p = 1, run = 1;
		uint16_t tag = 1;
		uint64_t eloff = 1;
		c = flextree_lookup(t, size, &p, &run);
		CHECK(c == -ERANGE, "lookup(size)=%d", c);
		c = flextree_tag_get(t, size, &tag, &eloff);
		CHECK(c == -ERANGE, "tag_get(size)=%d", c);
	}

	/* A sub-range query with a small cap. */
	{
		struct flextree_mapping out[4];
		uint64_t ql = rng_below(r, size + 1);
		uint64_t qlen = rng_below(r, size - ql + 1);
		if (rng_pct(r, 20))
			qlen += rng_range(r, 1, 1000); /* past the end: clipped */
		size_t cap = (size_t)rng_below(r, 5);
		uint64_t qend = qlen > size - ql ? size : ql + qlen;
		size_t want = 0, first = 0;
		if (qend > ql) {
			first = exts_index(&ex, ql);
			want = exts_index(&ex, qend - 1) - first + 1;
		}
		memset(out, 0xab, sizeof(out));
		q = flextree_query(t, ql, qlen, out, cap);
		CHECK(q == (ssize_t)want, "query(%llu,%llu,cap %zu)=%zd want %zu", U(ql), U(qlen),
		      cap, q, want);
		for (size_t i = 0; i < cap && i < want; i++) {
			const struct flextree_extent *e = &ex.v[first + i];
			uint64_t a = e->loff > ql ? e->loff : ql;
			uint64_t b = min_u64(e->loff + e->len, qend);
			uint64_t pw = e->poff == HOLE ? HOLE : e->poff + (a - e->loff);
			CHECK(out[i].loff == a && out[i].len == b - a && out[i].poff == pw,
			      "query(%llu,%llu)[%zu]={%llu,%llu,%llu} want {%llu,%llu,%llu}", U(ql),
			      U(qlen), i, U(out[i].loff), U(out[i].poff), U(out[i].len), U(a),
			      U(pw), U(b - a));
		}
		for (size_t i = want < cap ? want : cap; i < 4; i++)
			CHECK(out[i].loff == 0xababababababababULL,
			      "query wrote entry %zu beyond cap %zu", i, cap);
	}

	/* A sub-range scan. */
	if (size) {
		uint64_t sl = rng_below(r, size);
		uint64_t slen = rng_range(r, 1, size - sl);
		size_t a = exts_index(&ex, sl), b = exts_index(&ex, sl + slen - 1);
		c = flextree_scan(t, sl, slen, collect_cb, &sx);
		CHECK(c == 0, "scan(%llu,%llu)=%d", U(sl), U(slen), c);
		CHECK(sx.n == b - a + 1, "scan(%llu,%llu) visited %zu extents, want %zu", U(sl),
		      U(slen), sx.n, b - a + 1);
		for (size_t i = 0; i < sx.n; i++)
			CHECK(memcmp(&sx.v[i], &ex.v[a + i], sizeof(sx.v[i])) == 0 ||
				  (sx.v[i].loff == ex.v[a + i].loff &&
				   sx.v[i].poff == ex.v[a + i].poff &&
				   sx.v[i].len == ex.v[a + i].len &&
				   sx.v[i].tag == ex.v[a + i].tag),
			      "scan(%llu,%llu)[%zu] differs from the full scan", U(sl), U(slen), i);
	}
out:
	free(ex.v);
	free(sx.v);
	free(ms.v);
	free(ts.v);
	free(mp);
	return rc;
}

static int compare_tree(const struct flextree *t, const struct model *m, struct rng *r)
{
	return compare_tree_ext(t, m, r, 0);
}

/* ------------------------------------------------------------------------ */
/* Random operations, applied to the model and (when t != NULL) the tree.     */
/* Every random draw happens whether or not t is given, so a model-only      */
/* replay with the same seed reproduces the same states.                      */
/* ------------------------------------------------------------------------ */

struct opcfg {
	uint32_t max_extent; /* option given to the tree; 0: default */
	uint64_t max_len;    /* longest insert/remap; 0: 1 MiB */
	size_t soft_extents; /* above this many model extents, shrink */
};

struct opstats {
	uint64_t inserts, collapses, remaps, tag_sets, reads, errors;
};

static uint64_t pick_len(struct rng *r, const struct opcfg *cfg)
{
	unsigned k = (unsigned)rng_below(r, 100);
	uint64_t len;
	uint64_t lim = cfg->max_len ? cfg->max_len : 1 << 20;

	if (k < 45)
		len = rng_range(r, 1, 64);
	else if (k < 80)
		len = rng_range(r, 1, 4096);
	else if (k < 95)
		len = rng_range(r, 1, 1 << 20);
	else
		len = 1;
	if (len > lim)
		len = 1 + len % lim;
	return len;
}

/* A physical address for a len-byte range: random, high, contiguous with
 * the byte before loff, a hole, or (bad) beyond the 48-bit space. */
static uint64_t pick_poff(struct rng *r, const struct model *m, uint64_t loff, uint64_t len,
			  bool allow_bad, bool allow_hole, bool *bad)
{
	unsigned k = (unsigned)rng_below(r, 100);
	uint64_t rnd = rng_below(r, 1ULL << 40);
	uint64_t small = rng_below(r, 1000);
	bool half = rng_pct(r, 50);

	*bad = false;
	if (k < 15 && allow_hole)
		return HOLE;
	if (k < 45 && loff > 0 && loff <= m->size) {
		uint64_t p = model_poff(m, loff - 1);
		if (p == HOLE)
			return allow_hole ? HOLE : rnd;
		if (p + 1 + len <= HOLE)
			return p + 1;
		return rnd;
	}
	if (k >= 45 && k < 50)
		return HOLE - len - small % 4; /* the very top of the 48-bit space */
	if (k >= 50 && k < 53 && allow_bad) {
		uint64_t p = half ? HOLE + 1 + small : HOLE - len + 1 + small % len;
		if (p == HOLE)
			p++;
		*bad = true;
		return p;
	}
	return rnd;
}

static int op_insert(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
		     bool allow_bad, struct opstats *os)
{
	int rc = 0;
	uint64_t loff = pick_loff(r, m);
	uint64_t beyond = rng_range(r, 1, 1 << 16);
	if (rng_pct(r, 5))
		loff = m->size + beyond;
	uint64_t len = pick_len(r, cfg);
	bool bad;
	uint64_t poff = pick_poff(r, m, loff, len, allow_bad, true, &bad);

	if (t) {
		if (trace_on())
			fprintf(stderr, "insert(t, %llu, %llu, %llu)\n", U(loff), U(poff), U(len));
		int c = flextree_insert(t, loff, poff, (uint32_t)len);
		if (bad) {
			CHECK(c == -EINVAL, "insert(%llu, poff %llu, %llu)=%d want -EINVAL",
			      U(loff), U(poff), U(len), c);
			CHECK(flextree_size(t) == m->size, "failed insert changed size");
		} else {
			CHECK(c == 0, "insert(%llu, poff %llu, %llu)=%d", U(loff), U(poff), U(len),
			      c);
		}
	}
	if (os)
		bad ? os->errors++ : os->inserts++;
	if (!bad)
		model_insert(m, loff, poff, len);
out:
	return rc;
}

static int op_collapse(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
		       struct opstats *os)
{
	int rc = 0, c;
	uint64_t size = m->size;
	unsigned k = (unsigned)rng_below(r, 100);
	uint64_t x = rng_below(r, size ? size : 1);
	uint64_t y = rng_next(r);
	size_t i = (size_t)rng_below(r, m->n ? m->n : 1);
	uint64_t loff = 0, len = 0;
	int expect = 0;

	if (size == 0) {
		if (t) {
			c = flextree_collapse(t, 0, 1);
			CHECK(c == -ERANGE, "collapse on empty tree=%d", c);
		}
		goto out;
	}
	/* Below half the soft limit the tree is growing: big collapses are
	 * rare so that it reaches a few thousand extents (several leaves and,
	 * in the tiny build, several levels) before shrinking again. */
	if (m->n < cfg->soft_extents / 2 && k >= 40 && k < 82 && (y & 7) != 0)
		k = (unsigned)(y >> 8) % 40;
	if (m->n > cfg->soft_extents) {
		size_t a = i / 2, b = a + m->n / 4 + 1;
		loff = model_start(m, a);
		len = model_start(m, b < m->n ? b : m->n) - loff;
	} else if (k < 40) {
		loff = x;
		len = 1 + y % min_u64(size - loff, 4096);
	} else if (k < 60) {
		size_t j = i + 1 + (size_t)(y % 50);
		loff = model_start(m, i);
		len = model_start(m, j < m->n ? j : m->n) - loff;
	} else if (k < 75) {
		loff = x;
		len = 1 + y % min_u64(size - loff, size / 8 + 1);
	} else if (k < 78) {
		loff = x;
		len = size - loff; /* everything to the end */
	} else if (k < 83) {
		loff = x;
		len = size - loff + 1 + y % 1000;
		expect = -ERANGE;
	} else if (k < 85) {
		loff = x + 1;
		len = UINT64_MAX - y % 16; /* loff + len overflows */
		expect = -ERANGE;
	} else if (k < 88) {
		loff = x;
		len = 0;
	} else {
		loff = model_start(m, i);
		len = m->v[i].len;
	}
	if (t) {
		if (trace_on())
			fprintf(stderr, "collapse(t, %llu, %llu)\n", U(loff), U(len));
		c = flextree_collapse(t, loff, len);
		CHECK(c == expect, "collapse(%llu,%llu)=%d want %d (size %llu)", U(loff), U(len), c,
		      expect, U(size));
		if (expect)
			CHECK(flextree_size(t) == size, "failed collapse changed size");
	}
	if (!expect)
		model_collapse(m, loff, len);
	if (os)
		expect ? os->errors++ : os->collapses++;
out:
	return rc;
}

static int op_remap(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
		    struct opstats *os)
{
	int rc = 0, c;
	uint64_t size = m->size;
	unsigned k = (unsigned)rng_below(r, 100);
	uint64_t lim = cfg->max_len ? cfg->max_len : 1 << 16;
	uint64_t y = rng_next(r);

	if (size == 0) {
		if (t) {
			c = flextree_remap(t, 0, 1, 0);
			CHECK(c == -ERANGE, "remap on empty tree=%d", c);
		}
		goto out;
	}
	uint64_t loff = pick_inside(r, m);
	uint64_t len = 1 + y % min_u64(size - loff, lim);
	bool bad;
	uint64_t poff = pick_poff(r, m, loff, len, true, false, &bad);
	int expect = bad ? -EINVAL : 0;
	if (k < 4) {
		len = size - loff + 1 + y % 100;
		poff = 0;
		expect = -ERANGE;
	}
	if (t) {
		if (trace_on())
			fprintf(stderr, "remap(t, %llu, %llu, %llu)\n", U(loff), U(len), U(poff));
		c = flextree_remap(t, loff, len, poff);
		CHECK(c == expect, "remap(%llu,%llu,poff %llu)=%d want %d", U(loff), U(len),
		      U(poff), c, expect);
	}
	if (!expect)
		model_remap(m, loff, len, poff);
	if (os)
		expect ? os->errors++ : os->remaps++;
out:
	return rc;
}

static int op_tag_set(struct rng *r, struct model *m, struct flextree *t, struct opstats *os)
{
	int rc = 0, c;
	uint16_t tag = rng_pct(r, 30) ? 0 : (uint16_t)rng_range(r, 1, 65535);
	bool past = rng_pct(r, 3);

	if (m->size == 0 || past) {
		if (t) {
			c = flextree_tag_set(t, m->size, tag);
			CHECK(c == -ERANGE, "tag_set(size)=%d", c);
		}
		goto out;
	}
	uint64_t loff = pick_inside(r, m);
	if (t) {
		if (trace_on())
			fprintf(stderr, "tag_set(t, %llu, %u)\n", U(loff), tag);
		c = flextree_tag_set(t, loff, tag);
		CHECK(c == 0, "tag_set(%llu,%u)=%d", U(loff), tag, c);
	}
	model_tag_set(m, loff, tag);
	if (os)
		os->tag_sets++;
out:
	return rc;
}

/* Reads checked against the model only: lookup, tag_get, a capped query, a
 * partial scan that may be stopped early. */
struct stop_scan {
	struct flextree_extent v[64];
	size_t calls, stop_after;
};

static int stop_cb(void *arg, const struct flextree_extent *e)
{
	struct stop_scan *s = arg;
	if (s->calls < 64)
		s->v[s->calls] = *e;
	s->calls++;
	return s->stop_after && s->calls == s->stop_after ? 42 : 0;
}

/* A tree mapping piece [loff, loff+len) -> poff must agree with the model. */
static int piece_matches_model(const struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
{
	int rc = 0;
	struct span sp = model_piece_at(m, loff);
	CHECK(poff == span_poff_at(&sp, loff), "piece at %llu poff %llu, model %llu", U(loff),
	      U(poff), U(span_poff_at(&sp, loff)));
	CHECK(len >= 1 && len <= sp.loff + sp.len - loff,
	      "piece at %llu len %llu, model contiguous run %llu", U(loff), U(len),
	      U(sp.loff + sp.len - loff));
out:
	return rc;
}

static int op_read(struct rng *r, const struct model *m, const struct flextree *t, unsigned kind)
{
	int rc = 0, c;
	uint64_t size = m->size;
	uint64_t loff = size ? pick_inside(r, m) : 0;
	uint64_t x = rng_next(r), y = rng_next(r);
	bool nulls = rng_pct(r, 10);
	uint64_t ql = size ? pick_loff(r, m) : 0; /* drawn before any return */

	if (!t)
		return 0;
	if (kind == 0) { /* lookup */
		uint64_t p = 0, run = 0;
		c = flextree_lookup(t, size ? loff : 0, nulls ? NULL : &p, nulls ? NULL : &run);
		if (!size) {
			CHECK(c == -ERANGE, "lookup on empty=%d", c);
			goto out;
		}
		CHECK(c == 0, "lookup(%llu)=%d", U(loff), c);
		if (!nulls && (rc = piece_matches_model(m, loff, p, run)))
			goto out;
	} else if (kind == 1) { /* tag_get */
		uint16_t tag = 0xdead, ptag = 0;
		uint64_t eloff = UINT64_MAX, pat = 0;
		c = flextree_tag_get(t, loff, &tag, &eloff);
		if (!size) {
			CHECK(c == -ERANGE, "tag_get on empty=%d", c);
			goto out;
		}
		CHECK(c == 0, "tag_get(%llu)=%d", U(loff), c);
		struct span sp = model_piece_at(m, loff);
		bool has = model_tag_before(m, loff, &pat, &ptag);
		CHECK(eloff <= loff && eloff >= sp.loff,
		      "tag_get(%llu) extent start %llu outside contiguous piece [%llu,%llu]",
		      U(loff), U(eloff), U(sp.loff), U(loff));
		CHECK(!has || eloff >= pat, "tag_get(%llu) extent start %llu before tag point %llu",
		      U(loff), U(eloff), U(pat));
		if (has && eloff == pat)
			CHECK(tag == ptag, "tag_get(%llu)=%u, model %u", U(loff), tag, ptag);
		else
			CHECK(tag == 0, "tag_get(%llu)=%u at %llu, model untagged", U(loff), tag,
			      U(eloff));
	} else if (kind == 2) { /* query with a small cap */
		struct flextree_mapping out[4];
		uint64_t qlen;
		unsigned k = (unsigned)(x % 100);
		int expect_err = 0;
		if (k < 50)
			qlen = y % (size - ql + 1);
		else if (k < 70)
			qlen = size - ql + 1 + y % (1 << 20);
		else if (k < 80)
			qlen = 0;
		else if (k < 90)
			qlen = UINT64_MAX - ql;
		else if (k < 95) {
			ql = ql ? ql : 1;
			qlen = UINT64_MAX;
			expect_err = -ERANGE;
		} else {
			ql = size + 1 + y % 100;
			qlen = 1;
			expect_err = -ERANGE;
		}
		size_t cap = (size_t)(y >> 32) % 4;
		ssize_t q = flextree_query(t, ql, qlen, out, cap);
		if (expect_err) {
			CHECK(q == expect_err, "query(%llu,%llu)=%zd want %d", U(ql), U(qlen), q,
			      expect_err);
			goto out;
		}
		uint64_t qend = qlen > size - ql ? size : ql + qlen;
		CHECK(q >= 0, "query(%llu,%llu)=%zd", U(ql), U(qlen), q);
		CHECK((q == 0) == (qend == ql), "query(%llu,%llu)=%zd for %llu bytes", U(ql),
		      U(qlen), q, U(qend - ql));
		ssize_t q2 = flextree_query(t, ql, qlen, NULL, 0);
		CHECK(q2 == q, "query count %zd with cap 0, %zd with cap %zu", q2, q, cap);
		uint64_t pos = ql;
		for (size_t i = 0; i < cap && i < (size_t)q; i++) {
			CHECK(out[i].loff == pos, "query(%llu,%llu)[%zu].loff=%llu want %llu",
			      U(ql), U(qlen), i, U(out[i].loff), U(pos));
			CHECK(out[i].len >= 1 && out[i].loff + out[i].len <= qend,
			      "query(%llu,%llu)[%zu] len %llu overruns %llu", U(ql), U(qlen), i,
			      U(out[i].len), U(qend));
			if ((rc = piece_matches_model(m, out[i].loff, out[i].poff, out[i].len)))
				goto out;
			pos += out[i].len;
		}
		if ((size_t)q <= cap)
			CHECK(pos == qend, "query(%llu,%llu) covers up to %llu, want %llu", U(ql),
			      U(qlen), U(pos), U(qend));
	} else { /* scan, maybe stopped */
		struct stop_scan s;
		if (!size) {
			c = flextree_scan(t, 1, 1, stop_cb, &s);
			CHECK(c == -ERANGE, "scan past the end of an empty tree=%d", c);
			goto out;
		}
		memset(&s, 0, sizeof(s));
		uint64_t slen = 1 + x % (size - loff);
		s.stop_after = y % 2 ? 0 : 1 + (size_t)(y >> 8) % 3;
		c = flextree_scan(t, loff, slen, stop_cb, &s);
		if (c == 42) {
			CHECK(s.stop_after && s.calls == s.stop_after,
			      "scan returned 42 after %zu calls (stop at %zu)", s.calls,
			      s.stop_after);
		} else {
			CHECK(c == 0, "scan(%llu,%llu)=%d", U(loff), U(slen), c);
			CHECK(!s.stop_after || s.calls < s.stop_after,
			      "scan ignored a nonzero return");
		}
		CHECK(s.calls >= 1, "scan(%llu,%llu) visited nothing", U(loff), U(slen));
		for (size_t i = 0; i < s.calls && i < 64; i++) {
			const struct flextree_extent *e = &s.v[i];
			if (i == 0)
				CHECK(e->loff <= loff && loff < e->loff + e->len,
				      "first scanned extent [%llu,+%u) misses %llu", U(e->loff),
				      e->len, U(loff));
			else
				CHECK(e->loff == s.v[i - 1].loff + s.v[i - 1].len,
				      "scanned extents not contiguous at %zu", i);
			CHECK(e->loff < loff + slen, "scanned extent at %llu past range end",
			      U(e->loff));
			if ((rc = piece_matches_model(m, e->loff, e->poff, e->len)))
				goto out;
			uint64_t at = 0;
			uint16_t tag = 0;
			bool has = model_tag_in(m, e->loff, e->loff + e->len, &at, &tag);
			CHECK((!has && !e->tag) || (has && at == e->loff && tag == e->tag),
			      "scanned extent [%llu,+%u) tag %u, model tag %u at %llu", U(e->loff),
			      e->len, e->tag, has ? tag : 0, U(at));
		}
		if (c == 0 && s.calls <= 64) {
			const struct flextree_extent *e = &s.v[s.calls - 1];
			CHECK(e->loff + e->len >= loff + slen, "scan stopped short of %llu",
			      U(loff + slen));
		}
	}
out:
	return rc;
}

static int random_op(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
		     struct opstats *os)
{
	unsigned roll = (unsigned)rng_below(r, 100);
	if (m->n > cfg->soft_extents && roll < 60)
		roll = 50;
	else if (m->n < cfg->soft_extents / 2 && roll >= 45 && roll < 55)
		roll = 0; /* growing phase: fewer collapses */
	if (roll < 45)
		return op_insert(r, m, t, cfg, true, os);
	if (roll < 65)
		return op_collapse(r, m, t, cfg, os);
	if (roll < 73)
		return op_remap(r, m, t, cfg, os);
	if (roll < 81)
		return op_tag_set(r, m, t, os);
	if (os)
		os->reads++;
	if (roll < 86)
		return op_read(r, m, t, 1);
	if (roll < 92)
		return op_read(r, m, t, 0);
	if (roll < 97)
		return op_read(r, m, t, 2);
	return op_read(r, m, t, 3);
}

/* ------------------------------------------------------------------------ */
/* Test plumbing                                                              */
/* ------------------------------------------------------------------------ */

static struct flextree *open_ok(const char *path, const struct flextree_options *o)
{
	struct flextree *t = (struct flextree *)&t; /* poison: open must set it */
	int rc = flextree_open(path, o, &t);
	cr_assert_eq(rc, 0, "flextree_open(%s) = %d", path ? path : "NULL", rc);
	cr_assert_not_null(t);
	return t;
}

static struct flextree *open_vol(void)
{
	return open_ok(NULL, NULL);
}

static void assert_model(const struct flextree *t, const struct model *m, struct rng *r,
			 const char *what, uint64_t seed)
{
	int e = compare_tree(t, m, r);
	cr_assert_eq(e, 0, "%s: tree differs from model (check at line %d; seed=%llu)", what, e,
		     U(seed));
}

static void assert_check(const struct flextree *t)
{
	int c = flextree_check(t);
	cr_assert_eq(c, 0, "flextree_check = %d", c);
}

static struct flextree_stats stats_of(const struct flextree *t)
{
	struct flextree_stats st;
	int c = flextree_stats(t, &st);
	cr_assert_eq(c, 0, "flextree_stats = %d", c);
	return st;
}

static void ins(struct flextree *t, struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
{
	int c = flextree_insert(t, loff, poff, (uint32_t)len);
	cr_assert_eq(c, 0, "insert(%llu, poff %llu, len %llu) = %d", U(loff), U(poff), U(len), c);
	if (m)
		model_insert(m, loff, poff, len);
}

static void col(struct flextree *t, struct model *m, uint64_t loff, uint64_t len)
{
	int c = flextree_collapse(t, loff, len);
	cr_assert_eq(c, 0, "collapse(%llu, %llu) = %d", U(loff), U(len), c);
	if (m)
		model_collapse(m, loff, len);
}

static void expect_lookup(const struct flextree *t, uint64_t loff, uint64_t poff, uint64_t run)
{
	uint64_t p = 0, n = 0;
	int c = flextree_lookup(t, loff, &p, &n);
	cr_assert_eq(c, 0, "lookup(%llu) = %d", U(loff), c);
	cr_assert_eq(p, poff, "lookup(%llu) poff %llu, want %llu", U(loff), U(p), U(poff));
	if (run)
		cr_assert_eq(n, run, "lookup(%llu) run %llu, want %llu", U(loff), U(n), U(run));
}

static void expect_tag(const struct flextree *t, uint64_t loff, uint16_t tag, uint64_t start)
{
	uint16_t g = 0xdead;
	uint64_t s = UINT64_MAX;
	int c = flextree_tag_get(t, loff, &g, &s);
	cr_assert_eq(c, 0, "tag_get(%llu) = %d", U(loff), c);
	cr_assert_eq(g, tag, "tag_get(%llu) tag %u, want %u", U(loff), g, tag);
	cr_assert_eq(s, start, "tag_get(%llu) extent start %llu, want %llu", U(loff), U(s),
		     U(start));
}

/* Builds n non-contiguous extents of lengths 1..max_len at the end. */
static void build_extents(struct flextree *t, struct model *m, struct rng *r, size_t n,
			  uint64_t max_len)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t len = rng_range(r, 1, max_len);
		/* Even multiples of 2^20 apart: never physically contiguous. */
		uint64_t poff = ((rng_below(r, 1 << 20) * 2) << 20);
		ins(t, m, m->size, poff, len);
	}
}

/* Temporary directories ---------------------------------------------------- */

struct tmpd {
	char dir[64];
	char path[128];
};

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
	return px()->fsync(px(), fd);
}

static int f_fdatasync(const struct flex_io *io, int fd)
{
	if (fault_hit(io))
		return -EIO;
	return px()->fdatasync(px(), fd);
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
	*io = (struct flex_io){
	    .open = f_open,
	    .close = f_close,
	    .pread = f_pread,
	    .pwrite = f_pwrite,
	    .fsync = f_fsync,
	    .fdatasync = f_fdatasync,
	    .ftruncate = f_ftruncate,
	    .fallocate = f_fallocate,
	    .fsize = f_fsize,
	    .write_batch = f_write_batch,
	    .read_batch = f_read_batch,
	    .ctx = c,
	};
}

static void fault_arm(struct fault_ctx *c, long at)
{
	c->calls = 0;
	c->fail_at = at;
}

/* ======================================================================== */
/* Unit tests: empty tree, arguments                                          */
/* ======================================================================== */

Test(flextree, empty_tree_reads_and_collapse_report_erange)
{
	struct flextree *t = open_vol();
	uint64_t p = 7, run = 7;
	uint16_t tag = 7;
	uint64_t eloff = 7;
	struct flextree_mapping mp[2];

	cr_expect_eq(flextree_size(t), 0);
	cr_expect_eq(flextree_lookup(t, 0, &p, &run), -ERANGE);
	cr_expect_eq(flextree_lookup(t, 5, NULL, NULL), -ERANGE);
	cr_expect_eq(flextree_query(t, 0, 10, mp, 2), 0, "query at size 0 is empty, not an error");
	cr_expect_eq(flextree_query(t, 1, 10, mp, 2), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 0, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 0, 0), 0, "zero-length collapse is a no-op");
	cr_expect_eq(flextree_remap(t, 0, 1, 100), -ERANGE);
	cr_expect_eq(flextree_tag_set(t, 0, 1), -ERANGE);
	cr_expect_eq(flextree_tag_get(t, 0, &tag, &eloff), -ERANGE);
	cr_expect_eq(flextree_scan(t, 1, 1, collect_cb, NULL), -ERANGE);
	struct exts ex = {0};
	cr_expect_eq(flextree_scan(t, 0, 100, collect_cb, &ex), 0);
	cr_expect_eq(ex.n, 0);
	free(ex.v);

	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.size, 0);
	cr_expect_eq(st.extents, 0);
	cr_expect_leq(st.height, 1);
	cr_expect_eq(st.version, 0);
	cr_expect_eq(st.file_bytes, 0);
	assert_check(t);
	cr_expect_eq(flextree_commit(t), 0, "commit of a volatile tree is a no-op");
	cr_expect_eq(flextree_close(t), 0);
}

Test(flextree, null_arguments_are_rejected_not_crashed_on)
{
	struct flextree_options o = {0};
	struct flextree *t = (struct flextree *)&o;

	cr_expect_eq(flextree_close(NULL), 0);
	cr_expect_eq(flextree_size(NULL), 0);
	cr_expect_eq(flextree_open(NULL, NULL, NULL), -EINVAL);
	cr_expect_eq(flextree_open(NULL, &o, NULL), -EINVAL);
	t = open_vol();
	struct flextree_stats st;
	cr_expect_eq(flextree_stats(t, NULL), -EINVAL);
	cr_expect_eq(flextree_stats(NULL, &st), -EINVAL);
	ins(t, NULL, 0, 100, 10);
	cr_expect_eq(flextree_lookup(t, 3, NULL, NULL), 0, "lookup outputs may be NULL");
	uint64_t p = 0;
	cr_expect_eq(flextree_lookup(t, 3, &p, NULL), 0);
	cr_expect_eq(p, 103);
	flextree_close(t);
}

Test(flextree, volatile_open_ignores_read_only_and_takes_options)
{
	struct flextree_options o = {.read_only = 1, .max_extent = 100};
	struct flextree *t = open_ok(NULL, &o);
	for (int i = 0; i < 10; i++)
		ins(t, NULL, flextree_size(t), 5000 + 50 * (uint64_t)i, 50);
	cr_expect_eq(stats_of(t).extents, 5, "max_extent 100 keeps 50-byte appends in pairs");
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: insert                                                         */
/* ======================================================================== */

Test(flextree, insert_of_zero_length_is_a_noop)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 100, 0);
	cr_expect_eq(flextree_size(t), 0);
	ins(t, NULL, 1000, 100, 0);
	cr_expect_eq(flextree_size(t), 0, "a zero-length insert past the end makes no hole");
	ins(t, NULL, 0, 100, 10);
	ins(t, NULL, 5, 9999, 0);
	ins(t, NULL, 10, 9999, 0);
	cr_expect_eq(flextree_size(t), 10);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_lookup(t, 5, 105, 5);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_at_zero_into_empty_tree)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 4096, 100);
	cr_expect_eq(flextree_size(t), 100);
	expect_lookup(t, 0, 4096, 100);
	expect_lookup(t, 99, 4195, 1);
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1);
	cr_expect_eq(st.height, 1);
	cr_expect_eq(st.leaves, 1);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_beyond_size_creates_hole)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	ins(t, NULL, 50, 2000, 10);
	cr_expect_eq(flextree_size(t), 60);
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, HOLE, 40);
	expect_lookup(t, 49, HOLE, 1);
	expect_lookup(t, 50, 2000, 10);
	struct flextree_mapping mp[4];
	cr_assert_eq(flextree_query(t, 0, 60, mp, 4), 3);
	cr_expect(mp[1].loff == 10 && mp[1].len == 40 && mp[1].poff == HOLE);
	assert_check(t);
	/* Into an empty tree: the hole starts at 0. */
	struct flextree *u = open_vol();
	ins(u, NULL, 7, 300, 3);
	expect_lookup(u, 0, HOLE, 7);
	expect_lookup(u, 7, 300, 3);
	assert_check(u);
	flextree_close(u);
	flextree_close(t);
}

Test(flextree, insert_in_middle_of_extent_splits_it_into_three_mappings)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 40, 9000, 10);
	struct flextree_mapping mp[4];
	cr_assert_eq(flextree_query(t, 0, UINT64_MAX, mp, 4), 3);
	cr_expect(mp[0].loff == 0 && mp[0].poff == 1000 && mp[0].len == 40);
	cr_expect(mp[1].loff == 40 && mp[1].poff == 9000 && mp[1].len == 10);
	cr_expect(mp[2].loff == 50 && mp[2].poff == 1040 && mp[2].len == 60);
	cr_expect_eq(stats_of(t).extents, 3);
	cr_expect_eq(flextree_size(t), 110);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_at_extent_boundary_shifts_following_extents)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	ins(t, NULL, 10, 3000, 10);
	ins(t, NULL, 10, 7000, 5); /* between the two: not contiguous with either */
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, 7000, 5);
	expect_lookup(t, 15, 3000, 10);
	ins(t, NULL, 0, 8000, 1); /* at the very front */
	expect_lookup(t, 0, 8000, 1);
	expect_lookup(t, 1, 1000, 10);
	expect_lookup(t, 16, 3000, 10);
	cr_expect_eq(flextree_size(t), 26);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_that_overflows_size_is_rejected_and_changes_nothing)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	cr_expect_eq(flextree_insert(t, FLEXTREE_MAX_SIZE, 0, 1), FLEX_ETOOBIG);
	cr_expect_eq(flextree_insert(t, FLEXTREE_MAX_SIZE - 5, 0, 10), FLEX_ETOOBIG);
	int c = flextree_insert(t, UINT64_MAX - 5, 0, 10);
	cr_expect(c < 0, "insert whose loff+len wraps = %d", c);
	c = flextree_insert(t, UINT64_MAX, HOLE, UINT32_MAX);
	cr_expect(c < 0, "insert whose loff+len wraps = %d", c);
	cr_expect_eq(flextree_size(t), 10);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_lookup(t, 0, 1000, 10);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, poff_beyond_48_bits_is_einval)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	cr_expect_eq(flextree_insert(t, 0, 1ULL << 48, 10), -EINVAL);
	cr_expect_eq(flextree_insert(t, 0, UINT64_MAX, 10), -EINVAL);
	cr_expect_eq(flextree_insert(t, 0, HOLE - 9, 10), -EINVAL, "poff+len = 2^48 is beyond");
	cr_expect_eq(flextree_insert(t, 0, HOLE + 1, 1), -EINVAL);
	cr_expect_eq(flextree_remap(t, 0, 10, 1ULL << 48), -EINVAL);
	cr_expect_eq(flextree_remap(t, 0, 5, HOLE - 4), -EINVAL);
	cr_expect_eq(flextree_size(t), 10);
	expect_lookup(t, 0, 1000, 10);
	/* The very top of the space is fine. */
	ins(t, NULL, 10, HOLE - 10, 10);
	expect_lookup(t, 10, HOLE - 10, 10);
	expect_lookup(t, 19, HOLE - 1, 1);
	cr_expect_eq(flextree_remap(t, 0, 5, HOLE - 5), 0);
	expect_lookup(t, 4, HOLE - 1, 1);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: merging                                                        */
/* ======================================================================== */

Test(flextree, contiguous_appends_merge_into_one_extent)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 1000; i++)
		ins(t, NULL, flextree_size(t), 1ULL << 30 | (i * 100), 100);
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1, "1000 contiguous appends left %llu extents", U(st.extents));
	cr_expect_eq(st.size, 100000);
	expect_lookup(t, 0, 1ULL << 30, 100000);
	expect_lookup(t, 54321, (1ULL << 30) + 54321, 100000 - 54321);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, contiguous_insert_in_middle_merges_into_preceding_extent)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	ins(t, NULL, 100, 1100, 50); /* continues the extent ending at 100 */
	cr_expect_eq(stats_of(t).extents, 2);
	expect_lookup(t, 0, 1000, 150);
	expect_lookup(t, 150, 5000, 100);
	/* Splitting insert whose poff continues the head piece. */
	ins(t, NULL, 20, 1020, 5);
	expect_lookup(t, 0, 1000, 25);
	expect_lookup(t, 25, 1020, 130);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, hole_after_extent_ending_at_top_of_physical_space_stays_a_hole)
{
	/* poff + len == FLEXTREE_HOLE is a valid mapped extent; a hole
	 * inserted right after it must not be merged into it. */
	struct flextree *t = open_vol();
	ins(t, NULL, 0, HOLE - 10, 10);
	ins(t, NULL, 10, HOLE, 5);
	expect_lookup(t, 0, HOLE - 10, 10);
	expect_lookup(t, 12, HOLE, 3);
	assert_check(t);
	ins(t, NULL, 30, 4096, 1); /* the hole [15,30) made by inserting past the end */
	expect_lookup(t, 20, HOLE, 0);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, holes_merge_with_holes)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, HOLE, 100);
	ins(t, NULL, 100, HOLE, 100);
	ins(t, NULL, 300, HOLE, 100); /* creates hole [200,300) then a hole */
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1, "holes left as %llu extents", U(st.extents));
	expect_lookup(t, 0, HOLE, 400);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, max_extent_limits_merging)
{
	struct flextree_options o = {.max_extent = 1000};
	struct flextree *t = open_ok(NULL, &o);
	for (uint64_t i = 0; i < 100; i++)
		ins(t, NULL, flextree_size(t), 7000 + i * 300, 300);
	struct exts ex = {0};
	cr_assert_eq(flextree_scan(t, 0, flextree_size(t), collect_cb, &ex), 0);
	cr_expect_eq(ex.n, 34, "30000 bytes in 300-byte appends, merged up to 1000: %zu extents",
		     ex.n);
	for (size_t i = 0; i < ex.n; i++)
		cr_expect_leq(ex.v[i].len, 1000, "extent %zu has %u bytes", i, ex.v[i].len);
	expect_lookup(t, 0, 7000, 900);
	expect_lookup(t, 900, 7900, 900);
	free(ex.v);
	assert_check(t);
	flextree_close(t);

	o.max_extent = 1000;
	t = open_ok(NULL, &o);
	for (uint64_t i = 0; i < 100; i++)
		ins(t, NULL, flextree_size(t), 7000 + i * 100, 100);
	cr_expect_eq(stats_of(t).extents, 10);
	flextree_close(t);
}

Test(flextree, merge_into_tagged_extent_keeps_its_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 77), 0);
	ins(t, NULL, 100, 1100, 100);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_tag(t, 150, 77, 0);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: collapse                                                       */
/* ======================================================================== */

Test(flextree, collapse_within_one_extent)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	col(t, NULL, 10, 20);
	cr_expect_eq(flextree_size(t), 180);
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, 1030, 70);
	expect_lookup(t, 80, 5000, 100);
	col(t, NULL, 0, 10); /* the head piece exactly */
	expect_lookup(t, 0, 1030, 70);
	col(t, NULL, 170 - 10, 10); /* the tail */
	expect_lookup(t, 70, 5000, 90);
	cr_expect_eq(flextree_size(t), 160);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, collapse_zero_length_is_a_noop)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_expect_eq(flextree_collapse(t, 50, 0), 0);
	cr_expect_eq(flextree_collapse(t, 100, 0), 0);
	cr_expect_eq(flextree_size(t), 100);
	cr_expect_eq(stats_of(t).extents, 1);
	flextree_close(t);
}

Test(flextree, collapse_spanning_three_leaves)
{
	uint64_t seed = test_seed("collapse_spanning_three_leaves");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();
	size_t n = TINY ? 200 : 3000;

	build_extents(t, &m, &r, n, 100);
	struct flextree_stats st = stats_of(t);
	cr_assert_geq(st.leaves, 4, "only %llu leaves for %zu extents", U(st.leaves), n);
	/* From inside the second extent to inside the third-from-last. */
	uint64_t a = model_start(&m, 1) + m.v[1].len / 2;
	uint64_t b = model_start(&m, n - 3) + m.v[n - 3].len / 2;
	col(t, &m, a, b - a);
	assert_model(t, &m, &cr, "after collapse", seed);
	cr_expect_leq(stats_of(t).leaves, 2);
	cr_expect_leq(stats_of(t).extents, 5);
	model_free(&m);
	flextree_close(t);
}

Test(flextree, collapse_everything_then_reuse)
{
	uint64_t seed = test_seed("collapse_everything_then_reuse");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();

	for (int round = 0; round < 3; round++) {
		build_extents(t, &m, &r, TINY ? 100 : 2000, 1000);
		assert_model(t, &m, &cr, "built", seed);
		col(t, &m, 0, m.size);
		struct flextree_stats st = stats_of(t);
		cr_expect_eq(st.size, 0);
		cr_expect_eq(st.extents, 0);
		cr_expect_leq(st.height, 1);
		assert_model(t, &m, &cr, "emptied", seed);
		ins(t, &m, 0, 42, 1);
		assert_model(t, &m, &cr, "reused", seed);
		col(t, &m, 0, 1);
	}
	model_free(&m);
	flextree_close(t);
}

Test(flextree, collapse_past_end_is_erange_and_leaves_tree_unchanged)
{
	uint64_t seed = test_seed("collapse_past_end_is_erange_and_leaves_tree_unchanged");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();

	build_extents(t, &m, &r, TINY ? 60 : 600, 100);
	cr_assert_eq(flextree_tag_set(t, 5, 9), 0);
	model_tag_set(&m, 5, 9);
	uint64_t s = m.size;
	cr_expect_eq(flextree_collapse(t, 0, s + 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s / 2, s - s / 2 + 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s + 10, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 1, UINT64_MAX), -ERANGE, "overflowing range");
	cr_expect_eq(flextree_collapse(t, UINT64_MAX, 2), -ERANGE, "overflowing range");
	cr_expect_eq(flextree_remap(t, s / 2, s, 0), -ERANGE);
	cr_expect_eq(flextree_remap(t, 1, UINT64_MAX, 0), -ERANGE);
	assert_model(t, &m, &cr, "after refused collapses", seed);
	model_free(&m);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: huge offsets                                                   */
/* ======================================================================== */

Test(flextree, huge_hole_beyond_48_bits_rebases_partial_offsets, .timeout = 300)
{
	uint64_t seed = test_seed("huge_hole_beyond_48_bits_rebases_partial_offsets");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();
	const uint64_t H = 1ULL << 50;

	ins(t, &m, H, 1234, 100);
	cr_expect_eq(flextree_size(t), H + 100);
	expect_lookup(t, 0, HOLE, 0);
	expect_lookup(t, H - 1, HOLE, 1);
	expect_lookup(t, H, 1234, 100);
	expect_lookup(t, H + 99, 1333, 1);
	assert_model(t, &m, &cr, "after the hole", seed);

	ins(t, &m, 0, 5000, 10); /* shifts the far extent by 10 */
	expect_lookup(t, H + 10, 1234, 100);
	ins(t, &m, H / 2, 7000, 10); /* splits the hole in the middle */
	expect_lookup(t, H / 2, 7000, 10);
	expect_lookup(t, H + 20, 1234, 100);
	cr_assert_eq(flextree_tag_set(t, H / 4, 3), 0);
	model_tag_set(&m, H / 4, 3);
	cr_assert_eq(flextree_remap(t, H / 3, 4096, 1ULL << 40), 0);
	model_remap(&m, H / 3, 4096, 1ULL << 40);
	assert_model(t, &m, &cr, "after edits in the hole", seed);

	col(t, &m, 5, H / 8); /* removes a long run of hole */
	assert_model(t, &m, &cr, "after a long collapse", seed);
	ins(t, &m, m.size, 99, 1);
	ins(t, &m, m.size - 1, 77, 3);
	/* Many small edits near both ends and in the middle. */
	for (int i = 0; i < (TINY ? 300 : 2000); i++) {
		uint64_t where = (i % 3 == 0)	? rng_below(&r, 1000)
				 : (i % 3 == 1) ? m.size - rng_below(&r, 1000)
						: m.size / 2 + rng_below(&r, 1000);
		if (i % 4 == 3 && where + 7 <= m.size)
			col(t, &m, where, 7);
		else
			ins(t, &m, where, rng_below(&r, 1ULL << 40), rng_range(&r, 1, 50));
	}
	assert_model(t, &m, &cr, "after small edits", seed);
	col(t, &m, 0, m.size - 1);
	assert_model(t, &m, &cr, "after collapsing all but one byte", seed);
	model_free(&m);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: remap and tags                                                 */
/* ======================================================================== */

Test(flextree, remap_preserves_logical_layout_and_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	ins(t, NULL, 200, 9000, 100);
	cr_assert_eq(flextree_tag_set(t, 100, 12), 0);
	cr_assert_eq(flextree_remap(t, 100, 100, 70000), 0);
	cr_expect_eq(flextree_size(t), 300);
	expect_lookup(t, 99, 1099, 1);
	expect_lookup(t, 100, 70000, 100);
	expect_lookup(t, 200, 9000, 100);
	expect_tag(t, 150, 12, 100);
	/* Across a boundary: starts inside a tagged extent -> the remapped
	 * extent starts mid-extent and is untagged; the head keeps its tag. */
	cr_assert_eq(flextree_remap(t, 150, 100, 80000), 0);
	expect_lookup(t, 100, 70000, 50);
	expect_lookup(t, 150, 80000, 100);
	expect_lookup(t, 250, 9050, 50);
	expect_tag(t, 120, 12, 100);
	expect_tag(t, 160, 0, 150);
	expect_tag(t, 260, 0, 250);
	/* Whole range from a tagged start. */
	cr_assert_eq(flextree_tag_set(t, 0, 5), 0);
	cr_assert_eq(flextree_remap(t, 0, 300, 1ULL << 44), 0);
	expect_lookup(t, 0, 1ULL << 44, 300);
	expect_tag(t, 299, 5, 0);
	cr_expect_eq(stats_of(t).extents, 1);
	cr_expect_eq(flextree_remap(t, 10, 0, 123), 0, "zero-length remap is a no-op");
	expect_lookup(t, 0, 1ULL << 44, 300);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, remap_of_a_hole_maps_it)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 1000, 1, 1);
	cr_assert_eq(flextree_remap(t, 100, 200, 4444), 0);
	expect_lookup(t, 99, HOLE, 1);
	expect_lookup(t, 100, 4444, 200);
	expect_lookup(t, 300, HOLE, 700);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, tag_stays_with_head_piece_on_split)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	ins(t, NULL, 50, 9000, 10); /* splits [0,100) */
	expect_tag(t, 10, 7, 0);
	expect_tag(t, 49, 7, 0);
	expect_tag(t, 55, 0, 50);
	expect_tag(t, 70, 0, 60);
	/* Collapse that cuts the tagged extent's tail keeps the tag. */
	col(t, NULL, 40, 20);
	expect_tag(t, 0, 7, 0);
	expect_tag(t, 45, 0, 40);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, collapse_of_an_extent_start_clears_its_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	cr_assert_eq(flextree_tag_set(t, 100, 8), 0);
	col(t, NULL, 0, 10);
	expect_tag(t, 0, 0, 0);
	expect_tag(t, 90, 8, 90);
	col(t, NULL, 50, 40); /* ends exactly at the tagged start: keeps it */
	expect_tag(t, 50, 8, 50);
	col(t, NULL, 40, 11); /* eats the tagged start */
	expect_tag(t, 40, 0, 40);
	expect_lookup(t, 40, 5001, 99);
	/* Insert in front of a tagged extent moves the tag with it. */
	cr_assert_eq(flextree_tag_set(t, 40, 9), 0);
	ins(t, NULL, 40, 123456, 5);
	expect_tag(t, 45, 9, 45);
	expect_tag(t, 42, 0, 40);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, tag_set_splits_extent_and_zero_clears)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	cr_assert_eq(flextree_tag_set(t, 30, 9), 0);
	expect_tag(t, 29, 7, 0);
	expect_tag(t, 30, 9, 30);
	expect_tag(t, 99, 9, 30);
	expect_lookup(t, 29, 1029, 1);
	expect_lookup(t, 30, 1030, 70);
	cr_assert_eq(flextree_tag_set(t, 30, 0), 0);
	expect_tag(t, 50, 0, 30);
	cr_assert_eq(flextree_tag_set(t, 0, 65535), 0);
	expect_tag(t, 0, 65535, 0);
	cr_expect_eq(flextree_tag_set(t, 100, 1), -ERANGE);
	cr_expect_eq(flextree_tag_set(t, 1000, 1), -ERANGE);
	uint16_t tag;
	uint64_t s;
	cr_expect_eq(flextree_tag_get(t, 100, &tag, &s), -ERANGE);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: query and scan                                                 */
/* ======================================================================== */

Test(flextree, query_cap_smaller_than_count_returns_full_count)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 10; i++)
		ins(t, NULL, i * 10, 100000 * (i + 1), 10);
	struct flextree_mapping mp[10];
	memset(mp, 0xab, sizeof(mp));
	cr_expect_eq(flextree_query(t, 0, 100, mp, 3), 10);
	for (uint64_t i = 0; i < 3; i++)
		cr_expect(mp[i].loff == i * 10 && mp[i].len == 10 && mp[i].poff == 100000 * (i + 1),
			  "mapping %llu", U(i));
	cr_expect_eq(mp[3].loff, 0xababababababababULL, "wrote past cap");
	cr_expect_eq(flextree_query(t, 0, 100, NULL, 0), 10);
	cr_expect_eq(flextree_query(t, 15, 20, NULL, 0), 3);
	/* Clipped to the range and to size. */
	memset(mp, 0, sizeof(mp));
	cr_expect_eq(flextree_query(t, 15, 1000, mp, 10), 9);
	cr_expect(mp[0].loff == 15 && mp[0].len == 5 && mp[0].poff == 200005);
	cr_expect(mp[8].loff == 90 && mp[8].len == 10);
	cr_expect_eq(flextree_query(t, 100, 5, mp, 10), 0);
	cr_expect_eq(flextree_query(t, 101, 5, mp, 10), -ERANGE);
	cr_expect_eq(flextree_query(t, 5, UINT64_MAX, mp, 10), -ERANGE);
	cr_expect_eq(flextree_query(t, 0, UINT64_MAX, mp, 10), 10);
	cr_expect_eq(flextree_query(t, 50, 0, mp, 10), 0);
	flextree_close(t);
}

struct counting {
	int calls;
	int stop_at;
	uint64_t first_loff;
};

static int counting_cb(void *arg, const struct flextree_extent *e)
{
	struct counting *c = arg;
	if (c->calls++ == 0)
		c->first_loff = e->loff;
	return c->calls == c->stop_at ? 7 : 0;
}

Test(flextree, scan_stops_when_callback_returns_nonzero)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 20; i++)
		ins(t, NULL, i * 10, 100000 * (i + 1), 10);
	struct counting c = {0, 3, 0};
	cr_expect_eq(flextree_scan(t, 0, 200, counting_cb, &c), 7);
	cr_expect_eq(c.calls, 3);
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 0, 200, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 20);
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 35, 10, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 2, "[35,45) touches two whole extents");
	cr_expect_eq(c.first_loff, 30, "scan passes whole extents");
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 40, 1, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 1);
	cr_expect_eq(flextree_scan(t, 201, 1, counting_cb, &c), -ERANGE);
	flextree_close(t);
}

/* ======================================================================== */
/* Randomised model tests                                                     */
/* ======================================================================== */

static void run_model_test(const char *name, uint64_t nops, uint32_t max_extent,
			   size_t soft_extents)
{
	uint64_t seed = test_seed(name);
	struct rng r = {seed}, cr = {seed ^ 0x5555};
	struct model m = {0};
	struct flextree_options o = {.max_extent = max_extent};
	struct opcfg cfg = {max_extent, max_extent, soft_extents};
	struct opstats os = {0};
	struct flextree *t = open_ok(NULL, &o);
	uint64_t max_height = 0, max_n = 0;
	uint64_t every = check_every(100);

	for (uint64_t i = 0; i < nops; i++) {
		int e = random_op(&r, &m, t, &cfg, &os);
		cr_assert_eq(e, 0, "op %llu failed (line %d, seed=%llu)", U(i), e, U(seed));
		if ((TINY && i < 3000) || i % every == 0) {
			int c = flextree_check(t);
			cr_assert_eq(c, 0, "flextree_check=%d after op %llu (seed=%llu)", c, U(i),
				     U(seed));
		}
		if (i % 50 == 49) {
			e = compare_tree_ext(t, &m, &cr, max_extent);
			cr_assert_eq(e, 0, "model mismatch after op %llu (line %d, seed=%llu)",
				     U(i), e, U(seed));
			struct flextree_stats st = stats_of(t);
			if (st.height > max_height)
				max_height = st.height;
		}
		if (m.n > max_n)
			max_n = m.n;
	}
	int e = compare_tree_ext(t, &m, &cr, max_extent);
	cr_assert_eq(e, 0, "final model mismatch (line %d, seed=%llu)", e, U(seed));
	fprintf(stderr,
		"flextree::%s: %llu ops (%llu inserts, %llu collapses, %llu remaps, %llu tag sets, "
		"%llu reads, %llu refused), up to %llu model extents, height up to %llu\n",
		name, U(nops), U(os.inserts), U(os.collapses), U(os.remaps), U(os.tag_sets),
		U(os.reads), U(os.errors), U(max_n), U(max_height));
	cr_expect_geq(max_height, 2, "the random test never grew past one leaf");
	model_free(&m);
	flextree_close(t);
}

Test(flextree, random_ops_match_model, .timeout = 600)
{
	run_model_test("random_ops_match_model", 100000 * test_scale(), 0, TINY ? 1500 : 3000);
}

Test(flextree, random_ops_with_small_max_extent_match_model, .timeout = 600)
{
	uint64_t seed = test_seed("random_ops_with_small_max_extent_match_model.pick");
	struct rng r = {seed};
	static const uint32_t choices[] = {1, 7, 512, 4096, 65536};
	uint32_t mx = choices[rng_below(&r, 5)];
	fprintf(stderr, "max_extent=%u\n", mx);
	run_model_test("random_ops_with_small_max_extent_match_model", 50000 * test_scale(), mx,
		       TINY ? 800 : 2000);
}

Test(flextree, large_tree_of_appends_reaches_height_three, .timeout = 600)
{
	uint64_t seed = test_seed("large_tree_of_appends_reaches_height_three");
	struct rng r = {seed};
	const uint64_t L = 8;
	size_t n = TINY ? 30000 : 200000;
	size_t cap = n + 100000;
	uint32_t *ids = xrealloc(NULL, cap * sizeof(*ids));
	uint32_t next_id = 0;
	struct flextree *t = open_vol();

	/* Extent k has length L and poff 2*L*id: never contiguous, never merged. */
	for (size_t i = 0; i < n; i++) {
		ids[i] = next_id++;
		ins(t, NULL, i * L, 2 * L * ids[i], L);
	}
	struct flextree_stats st = stats_of(t);
	cr_assert_eq(st.extents, n);
	cr_assert_eq(st.size, n * L);
	cr_assert_geq(st.height, 3, "height %u with %zu extents", st.height, n);
	fprintf(stderr, "large tree: %llu extents, %llu leaves, %llu internals, height %u\n",
		U(st.extents), U(st.leaves), U(st.internals), st.height);
	assert_check(t);

	for (int round = 0; round < 300; round++) {
		for (int k = 0; k < 50 && n; k++) {
			uint64_t loff = rng_below(&r, n * L), p, run;
			cr_assert_eq(flextree_lookup(t, loff, &p, &run), 0);
			cr_assert_eq(p, 2 * L * ids[loff / L] + loff % L,
				     "lookup(%llu) (seed=%llu)", U(loff), U(seed));
			cr_assert_eq(run, L - loff % L);
		}
		unsigned kind = (unsigned)rng_below(&r, 10);
		if (kind < 4 && n) { /* collapse a run of whole extents */
			size_t a = (size_t)rng_below(&r, n);
			size_t cnt = 1 + (size_t)rng_below(&r, kind == 0 ? n / 10 + 1 : 300);
			if (a + cnt > n)
				cnt = n - a;
			col(t, NULL, a * L, cnt * L);
			memmove(&ids[a], &ids[a + cnt], (n - a - cnt) * sizeof(*ids));
			n -= cnt;
		} else if (n + 200 < cap) { /* insert a batch at one boundary */
			size_t a = (size_t)rng_below(&r, n + 1);
			size_t cnt = 1 + (size_t)rng_below(&r, 200);
			memmove(&ids[a + cnt], &ids[a], (n - a) * sizeof(*ids));
			for (size_t j = 0; j < cnt; j++) {
				ids[a + j] = next_id++;
				ins(t, NULL, (a + j) * L, 2 * L * ids[a + j], L);
			}
			n += cnt;
		}
		cr_assert_eq(flextree_size(t), n * L, "size (seed=%llu)", U(seed));
		if (round % 50 == 0)
			assert_check(t);
	}
	assert_check(t);
	cr_assert_eq(stats_of(t).extents, n);
	/* Collapse everything in large chunks, from the middle out. */
	while (n) {
		size_t a = n / 3, cnt = n / 4 + 1;
		if (a + cnt > n)
			cnt = n - a;
		col(t, NULL, a * L, cnt * L);
		memmove(&ids[a], &ids[a + cnt], (n - a - cnt) * sizeof(*ids));
		n -= cnt;
		cr_assert_eq(flextree_size(t), n * L);
		if (n) {
			uint64_t p;
			uint64_t loff = rng_below(&r, n * L);
			cr_assert_eq(flextree_lookup(t, loff, &p, NULL), 0);
			cr_assert_eq(p, 2 * L * ids[loff / L] + loff % L);
		}
		assert_check(t);
	}
	st = stats_of(t);
	cr_expect_eq(st.extents, 0);
	cr_expect_leq(st.height, 1);
	free(ids);
	flextree_close(t);
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

Test(flextree, killed_writer_reopens_at_a_committed_version, .timeout = 300)
{
	uint64_t seed = test_seed("killed_writer_reopens_at_a_committed_version");
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
			struct rng r = {rseed};
			struct model m = {0};
			struct flextree *t = NULL;
			if (flextree_open(d.path, NULL, &t))
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
		cr_assert(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
			  "writer failed before the kill: status %d (seed=%llu)", status, U(rseed));
		while (read(fds[0], &v, sizeof(v)) == (ssize_t)sizeof(v))
			last = v;
		close(fds[0]);

		/* The killed writer's lock can outlive waitpid(): with io_uring the
		 * kernel drops the ring's file references asynchronously.  Allow
		 * it a bounded time, and say so when it happens. */
		struct flextree *t = NULL;
		int orc, waited_ms = 0;
		while ((orc = flextree_open(d.path, NULL, &t)) == FLEX_EBUSY && waited_ms < 5000) {
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
	cr_expect_eq(flextree_remap(t, 0, 5, 7), FLEX_EREADONLY);
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
