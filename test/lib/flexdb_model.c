/*
 * flexdb_model.c - the code of flexdb_model.h.
 */
#include "flexdb_model.h"

struct flexdb_options fdb_tiny_opts(void)
{
	struct flexdb_options o;
	memset(&o, 0, sizeof(o));
	o.memtable_size = FDB_TINY_MEMTABLE;
	o.cache_size = FDB_TINY_CACHE;
	o.space.segment_size = FDB_TINY_SEGMENT;
	o.space.log_limit = FDB_TINY_LOG;
	return o;
}

struct flexdb_options fdb_default_opts(void)
{
	struct flexdb_options o;
	memset(&o, 0, sizeof(o));
	return o;
}

int fkey_cmp(const void *a, uint32_t an, const void *b, uint32_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);
	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

static int fkey_qcmp(const void *a, const void *b)
{
	const struct fkey *x = a, *y = b;
	return fkey_cmp(x->k, x->n, y->k, y->n);
}

static void pool_add(struct keypool *p, const void *k, uint32_t n)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 256;
		p->keys = realloc(p->keys, p->cap * sizeof(*p->keys));
		if (!p->keys)
			abort();
	}
	uint8_t *c = malloc(n);
	if (!c)
		abort();
	memcpy(c, k, n);
	p->keys[p->n].k = c;
	p->keys[p->n].n = n;
	p->n++;
}

void pool_make(struct keypool *p, size_t want, uint64_t pseed)
{
	memset(p, 0, sizeof(*p));
	uint8_t b[FLEXDB_MAX_KEY];
	/* Binary strings over {00, ff} of length 1..4, and over six edge bytes
	 * of length 1..2: NULs, 0xFF, and prefixes of each other. */
	for (uint32_t len = 1; len <= 4; len++)
		for (uint32_t v = 0; v < (1u << len); v++) {
			for (uint32_t i = 0; i < len; i++)
				b[i] = (v >> i) & 1 ? 0xff : 0x00;
			pool_add(p, b, len);
		}
	static const uint8_t edge[6] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
	for (int i = 0; i < 6; i++) {
		pool_add(p, &edge[i], 1);
		for (int j = 0; j < 6; j++) {
			b[0] = edge[i];
			b[1] = edge[j];
			pool_add(p, b, 2);
		}
	}
	/* A prefix chain. */
	for (uint32_t len = 1; len <= 48; len++) {
		b[len - 1] = (uint8_t)("prefix-chain"[(len - 1) % 12]);
		pool_add(p, b, len);
	}
	/* Maximal keys, differing only at the end, and their prefixes. */
	memset(b, 'M', FLEXDB_MAX_KEY);
	pool_add(p, b, FLEXDB_MAX_KEY - 1);
	b[FLEXDB_MAX_KEY - 1] = 0x00;
	pool_add(p, b, FLEXDB_MAX_KEY);
	b[FLEXDB_MAX_KEY - 1] = 0xff;
	pool_add(p, b, FLEXDB_MAX_KEY);
	b[FLEXDB_MAX_KEY - 1] = 'M';
	pool_add(p, b, FLEXDB_MAX_KEY);
	b[0] = 0x00;
	pool_add(p, b, FLEXDB_MAX_KEY);
	/* The rest: ordinary keys, some with NULs and 0xFF inside or with a
	 * shorter sibling. */
	uint64_t r = pseed;
	while (p->n < want) {
		uint64_t x = rnd(&r);
		int len = snprintf((char *)b, 32, "key%08" PRIx64, x % 0x10000000u);
		switch (rnd_below(&r, 8)) {
		case 0:
			b[len++] = 0x00;
			b[len++] = (uint8_t)rnd(&r);
			break;
		case 1:
			b[len++] = 0xff;
			break;
		case 2:
			pool_add(p, b, (uint32_t)len); /* a sibling that is its prefix */
			b[len++] = 0x00;
			break;
		case 3: {
			int extra = (int)rnd_below(&r, 200);
			for (int i = 0; i < extra; i++)
				b[len++] = (uint8_t)rnd(&r);
			break;
		}
		default:
			break;
		}
		pool_add(p, b, (uint32_t)len);
	}
	qsort(p->keys, p->n, sizeof(*p->keys), fkey_qcmp);
	size_t w = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (w && fkey_qcmp(&p->keys[w - 1], &p->keys[i]) == 0) {
			free(p->keys[i].k);
			continue;
		}
		p->keys[w++] = p->keys[i];
	}
	p->n = w;
}

void pool_free(struct keypool *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->keys[i].k);
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

uint32_t val_len(uint64_t *r, int bigpm)
{
	uint64_t k = rnd_below(r, 1000);
	if (k < 80)
		return 0;
	if (k < 600)
		return 1 + (uint32_t)rnd_below(r, 64);
	if (k < 900)
		return 65 + (uint32_t)rnd_below(r, 1024);
	if (k < 985)
		return 1024 + (uint32_t)rnd_below(r, 7 * 1024);
	if (k < 1000 - (uint64_t)bigpm)
		return 8192 + (uint32_t)rnd_below(r, 56 * 1024);
	if (rnd_below(r, 4) == 0)
		return FLEXDB_MAX_VALUE;
	return 65536 + (uint32_t)rnd_below(r, FLEXDB_MAX_VALUE - 65536);
}

void val_fill(uint64_t vseed, uint8_t *buf, uint32_t len)
{
	op_data(vseed, buf, len); /* the same bytes for the same seed */
}

uint64_t pair_hash(const void *k, uint32_t kn, const void *v, uint32_t vn)
{
	uint64_t hk = XXH3_64bits_withSeed(k, kn, 0x6b6579u + kn);
	uint64_t hv = XXH3_64bits_withSeed(vn ? v : (const void *)"", vn, 0x76616cu + vn);
	return (hk * 0x9e3779b97f4a7c15ull) ^ hv ^ (hk >> 29);
}

size_t fm_lower(const struct fmodel *m, const void *k, uint32_t kn)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (fkey_cmp(m->e[mid].k, m->e[mid].kn, k, kn) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct ment *fm_get(const struct fmodel *m, const void *k, uint32_t kn)
{
	size_t i = fm_lower(m, k, kn);
	if (i < m->n && fkey_cmp(m->e[i].k, m->e[i].kn, k, kn) == 0)
		return &m->e[i];
	return NULL;
}

void fm_put(struct fmodel *m, const void *k, uint32_t kn, const void *v, uint32_t vn)
{
	size_t i = fm_lower(m, k, kn);
	uint8_t *nv = malloc(vn ? vn : 1);
	if (!nv)
		abort();
	if (vn)
		memcpy(nv, v, vn);
	if (i < m->n && fkey_cmp(m->e[i].k, m->e[i].kn, k, kn) == 0) {
		m->digest -= pair_hash(m->e[i].k, m->e[i].kn, m->e[i].v, m->e[i].vn);
		free(m->e[i].v);
		m->e[i].v = nv;
		m->e[i].vn = vn;
		m->digest += pair_hash(k, kn, v, vn);
		return;
	}
	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 1024;
		m->e = realloc(m->e, m->cap * sizeof(*m->e));
		if (!m->e)
			abort();
	}
	memmove(m->e + i + 1, m->e + i, (m->n - i) * sizeof(*m->e));
	m->e[i].k = malloc(kn);
	if (!m->e[i].k)
		abort();
	memcpy(m->e[i].k, k, kn);
	m->e[i].kn = kn;
	m->e[i].v = nv;
	m->e[i].vn = vn;
	m->n++;
	m->digest += pair_hash(k, kn, v, vn);
}

void fm_del(struct fmodel *m, const void *k, uint32_t kn)
{
	size_t i = fm_lower(m, k, kn);
	if (i >= m->n || fkey_cmp(m->e[i].k, m->e[i].kn, k, kn) != 0)
		return;
	m->digest -= pair_hash(m->e[i].k, m->e[i].kn, m->e[i].v, m->e[i].vn);
	free(m->e[i].k);
	free(m->e[i].v);
	memmove(m->e + i, m->e + i + 1, (m->n - i - 1) * sizeof(*m->e));
	m->n--;
}

void fm_del_range(struct fmodel *m, const void *s, uint32_t sn, const void *e, uint32_t en)
{
	size_t i = fm_lower(m, sn ? s : "", sn), j = fm_lower(m, e, en);
	if (j <= i)
		return;
	for (size_t x = i; x < j; x++) {
		m->digest -= pair_hash(m->e[x].k, m->e[x].kn, m->e[x].v, m->e[x].vn);
		free(m->e[x].k);
		free(m->e[x].v);
	}
	memmove(m->e + i, m->e + j, (m->n - j) * sizeof(*m->e));
	m->n -= j - i;
}

void fm_free(struct fmodel *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->e[i].k);
		free(m->e[i].v);
	}
	free(m->e);
	memset(m, 0, sizeof(*m));
}

int store_digest(struct flexdb *db, uint64_t *digest, size_t *count, struct fmodel *m,
		 struct why *w)
{
	struct flexdb_iter *it = NULL;
	int rc = flexdb_iter_open(db, &it);
	if (rc)
		return failf(w, "flexdb_iter_open: %s", flex_strerror(rc));
	uint8_t *last = malloc(FLEXDB_MAX_KEY);
	size_t lastn = 0;
	uint64_t d = 0;
	size_t n = 0;
	int bad = 0;
	rc = flexdb_iter_seek(it, NULL, 0);
	while (!rc && flexdb_iter_valid(it)) {
		size_t kn = 0, vn = 0;
		const uint8_t *k = flexdb_iter_key(it, &kn);
		const uint8_t *v = flexdb_iter_value(it, &vn);
		if (!k || kn == 0 || kn > FLEXDB_MAX_KEY || (!v && vn)) {
			bad = failf(w, "iterator returned a malformed pair (klen %zu)", kn);
			break;
		}
		if (n && fkey_cmp(last, (uint32_t)lastn, k, (uint32_t)kn) >= 0) {
			bad = failf(w, "iterator keys out of order at pair %zu", n);
			break;
		}
		memcpy(last, k, kn);
		lastn = kn;
		d += pair_hash(k, (uint32_t)kn, v, (uint32_t)vn);
		if (m)
			fm_put(m, k, (uint32_t)kn, v, (uint32_t)vn);
		n++;
		rc = flexdb_iter_next(it);
	}
	if (!bad && rc)
		bad =
		    failf(w, "iteration failed after %zu pairs: %s (%d)", n, flex_strerror(rc), rc);
	free(last);
	flexdb_iter_close(it);
	*digest = d;
	*count = n;
	return bad;
}

/* Directories made by this test process, removed by fdb_tmp_cleanup (the
 * suites' .fini), so a failed assertion leaves nothing behind. */
static char fdb_tmp_dirs[16][300];

static int fdb_tmp_n;

void fdb_tmp_track(const char *dir)
{
	if (fdb_tmp_n < 16)
		snprintf(fdb_tmp_dirs[fdb_tmp_n++], sizeof(fdb_tmp_dirs[0]), "%s", dir);
}

void fdb_tmp_cleanup(void)
{
	for (int i = 0; i < fdb_tmp_n; i++)
		tmp_remove(fdb_tmp_dirs[i]);
	fdb_tmp_n = 0;
}

void fdb_tmpdir(char *out, size_t n, const char *tag)
{
	char t[64];
	snprintf(t, sizeof(t), "flexdb_%s", tag);
	if (tmp_make(out, n, t) != 0) {
		fprintf(stderr, "mkdtemp failed\n");
		abort();
	}
	fdb_tmp_track(out);
}
