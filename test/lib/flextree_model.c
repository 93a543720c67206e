/*
 * flextree_model.c - the code of flextree_model.h.
 */
#include "flextree_model.h"

uint64_t test_seed(const char *test)
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

uint64_t test_scale(void)
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

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		fprintf(stderr, "out of memory\n");
		abort();
	}
	return q;
}

void model_reserve(struct model *m, size_t need)
{
	if (need <= m->cap)
		return;
	size_t cap = m->cap ? m->cap : 16;
	while (cap < need)
		cap *= 2;
	m->v = xrealloc(m->v, cap * sizeof(*m->v));
	m->cap = cap;
}

void model_free(struct model *m)
{
	free(m->v);
	memset(m, 0, sizeof(*m));
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

uint64_t model_start(const struct model *m, size_t i)
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

void model_insert(struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
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

void model_remap(struct model *m, uint64_t loff, uint64_t len, uint64_t poff)
{
	if (len == 0)
		return;
	size_t i = model_split(m, loff);
	uint16_t tag = m->v[i].tag; /* 0 when loff cut an extent */
	size_t j = model_split(m, loff + len);
	model_erase(m, i + 1, j);
	m->v[i] = (struct mext){poff, len, tag};
}

void model_tag_set(struct model *m, uint64_t loff, uint16_t tag)
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

int collect_cb(void *arg, const struct flextree_extent *e)
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

int compare_tree_ext(const struct flextree *t, const struct model *m, struct rng *r,
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

int op_insert(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
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
			c = flextree_repoint(t, 0, 0, 1);
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
		c = flextree_repoint(t, loff, poff, (uint32_t)len);
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

static int stop_cb(void *arg, const struct flextree_extent *e)
{
	struct stop_scan *s = arg;
	if (s->calls < 64)
		s->v[s->calls] = *e;
	s->calls++;
	return s->stop_after && s->calls == s->stop_after ? 42 : 0;
}

int piece_matches_model(const struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
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

int op_read(struct rng *r, const struct model *m, const struct flextree *t, unsigned kind)
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

int random_op(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
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

struct flextree *open_ok(const char *path, const struct flextree_options *o)
{
	struct flextree *t = (struct flextree *)&t; /* poison: open must set it */
	int rc = flextree_open(path, o, &t);
	cr_assert_eq(rc, 0, "flextree_open(%s) = %d", path ? path : "NULL", rc);
	cr_assert_not_null(t);
	return t;
}

struct flextree *open_vol(void)
{
	return open_ok(NULL, NULL);
}

void assert_model(const struct flextree *t, const struct model *m, struct rng *r, const char *what,
		  uint64_t seed)
{
	int e = compare_tree(t, m, r);
	cr_assert_eq(e, 0, "%s: tree differs from model (check at line %d; seed=%llu)", what, e,
		     U(seed));
}

void assert_check(const struct flextree *t)
{
	int c = flextree_check(t);
	cr_assert_eq(c, 0, "flextree_check = %d", c);
}

struct flextree_stats stats_of(const struct flextree *t)
{
	struct flextree_stats st;
	int c = flextree_stats(t, &st);
	cr_assert_eq(c, 0, "flextree_stats = %d", c);
	return st;
}

void ins(struct flextree *t, struct model *m, uint64_t loff, uint64_t poff, uint64_t len)
{
	int c = flextree_insert(t, loff, poff, (uint32_t)len);
	cr_assert_eq(c, 0, "insert(%llu, poff %llu, len %llu) = %d", U(loff), U(poff), U(len), c);
	if (m)
		model_insert(m, loff, poff, len);
}

void col(struct flextree *t, struct model *m, uint64_t loff, uint64_t len)
{
	int c = flextree_collapse(t, loff, len);
	cr_assert_eq(c, 0, "collapse(%llu, %llu) = %d", U(loff), U(len), c);
	if (m)
		model_collapse(m, loff, len);
}

void expect_lookup(const struct flextree *t, uint64_t loff, uint64_t poff, uint64_t run)
{
	uint64_t p = 0, n = 0;
	int c = flextree_lookup(t, loff, &p, &n);
	cr_assert_eq(c, 0, "lookup(%llu) = %d", U(loff), c);
	cr_assert_eq(p, poff, "lookup(%llu) poff %llu, want %llu", U(loff), U(p), U(poff));
	if (run)
		cr_assert_eq(n, run, "lookup(%llu) run %llu, want %llu", U(loff), U(n), U(run));
}

void build_extents(struct flextree *t, struct model *m, struct rng *r, size_t n, uint64_t max_len)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t len = rng_range(r, 1, max_len);
		/* Even multiples of 2^20 apart: never physically contiguous. */
		uint64_t poff = ((rng_below(r, 1 << 20) * 2) << 20);
		ins(t, m, m->size, poff, len);
	}
}
