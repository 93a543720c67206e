/*
 * fdb_store.c - pairs in the FlexSpace, grouped into intervals (paper
 * sections 5.1, 5.2 and 5.4).
 *
 * All pairs are kept sorted in one FlexSpace.  A put inserts the encoded
 * pair at its place (or replaces the old one: collapse plus insert), a
 * delete collapses it; the sparse index then shifts the later intervals.
 * Intervals split when they pass FDB_SPLIT_BYTES or FDB_SPLIT_PAIRS and a
 * small interval is merged into its successor.  The FlexSpace extent that
 * starts each interval is tagged FDB_ANCHOR, so that open rebuilds the
 * index by reading one key per interval instead of the whole store.
 *
 * The interval cache holds decoded intervals (each pair with a 16-bit key
 * fingerprint) and is updated write-through by every change; CLOCK picks
 * victims, and every byte of an entry is charged to the cache size.  An
 * entry larger than a quarter of the cache is never kept.  Intervals read
 * while loading an entry whose extents outnumber half its pairs are
 * defragmented at their next update.
 *
 * Locking: the caller holds db->lock, shared for fdb_store_get
 * and fdb_store_scan, exclusive for everything else (flexdb.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_int.h"

#define FDB_SPLIT_BYTES (16u << 10)
#define FDB_SPLIT_PAIRS 16u
/* An interval this small is merged into its successor if the two together
 * stay well below the split thresholds (so they do not split again). */
#define FDB_MERGE_BYTES (4u << 10)
#define FDB_MERGE_PAIRS 4u
#define FDB_ANCHOR 1
/* A read-side miss asks for a rewrite of an interval whose extents average
 * less than this many bytes. */
#define FDB_FRAG_EXTENT_BYTES 1024
#define FDB_KV_OVERHEAD (sizeof(struct fdb_kv) + 16)

/* ---- cache entries -------------------------------------------------------- */

static struct fdb_cent *cent_new(void)
{
	struct fdb_cent *c = calloc(1, sizeof(*c));
	if (c) {
		c->bytes = sizeof(*c);
		c->slot = UINT32_MAX;
	}
	return c;
}

static void cent_free(struct fdb_cent *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->n; i++)
		free(c->kv[i].key);
	free(c->kv);
	free(c);
}

static int cent_reserve(struct fdb_cent *c, uint32_t n)
{
	if (n <= c->cap)
		return 0;
	uint32_t cap = c->cap ? c->cap : 8;
	while (cap < n)
		cap *= 2;
	struct fdb_kv *kv = realloc(c->kv, (size_t)cap * sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	c->kv = kv;
	c->cap = cap;
	return 0;
}

static int kv_set(struct fdb_kv *kv, const void *key, uint32_t klen, const void *val,
		  uint32_t vlen)
{
	uint8_t *b = malloc((size_t)klen + vlen + 1);
	if (!b)
		return -ENOMEM;
	memcpy(b, key, klen);
	if (vlen)
		memcpy(b + klen, val, vlen);
	free(kv->key);
	kv->key = b;
	kv->klen = klen;
	kv->vlen = vlen;
	kv->fp = fdb_fingerprint(key, klen);
	return 0;
}

static size_t kv_bytes(const struct fdb_kv *kv)
{
	return FDB_KV_OVERHEAD + kv->klen + kv->vlen;
}

/* Position of the first pair >= key; *found when equal. */
static uint32_t cent_lower(const struct fdb_cent *c, const void *key, uint32_t klen, int *found)
{
	uint32_t lo = 0, hi = c->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (fdb_keycmp(c->kv[mid].key, c->kv[mid].klen, key, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < c->n && fdb_keycmp(c->kv[lo].key, c->kv[lo].klen, key, klen) == 0;
	return lo;
}

/* ---- the CLOCK ring ------------------------------------------------------- */

static void ring_remove(struct fdb_store *s, struct fdb_cent *c)
{
	if (c->slot == UINT32_MAX)
		return;
	uint32_t i = c->slot;
	s->ring[i] = s->ring[--s->nring];
	s->ring[i]->slot = i;
	c->slot = UINT32_MAX;
	s->cache_bytes -= c->bytes;
	if (s->hand >= s->nring)
		s->hand = 0;
}

/* Drops cached entries until `need` more bytes fit; never `pin`.  Each
 * entry is passed at most twice (once to clear its bit), so this ends. */
static void cache_evict(struct fdb_store *s, size_t need, const struct fdb_cent *pin)
{
	uint32_t steps = 2 * s->nring + 2;
	while (s->cache_bytes + need > s->cache_limit && s->nring > 0 && steps--) {
		if (s->hand >= s->nring)
			s->hand = 0;
		struct fdb_cent *c = s->ring[s->hand];
		if (c == pin || atomic_exchange(&c->ref, 0)) {
			s->hand++;
			continue;
		}
		ring_remove(s, c);
		c->iv->cache = NULL;
		cent_free(c);
	}
}

static int cache_attach(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *c)
{
	cache_evict(s, c->bytes, c);
	if (s->nring == s->ring_cap) {
		uint32_t cap = s->ring_cap ? s->ring_cap * 2 : 256;
		struct fdb_cent **r = realloc(s->ring, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		s->ring = r;
		s->ring_cap = cap;
	}
	c->iv = iv;
	c->slot = s->nring;
	s->ring[s->nring++] = c;
	s->cache_bytes += c->bytes;
	atomic_store(&c->ref, 1);
	iv->cache = c;
	return 0;
}

static void cache_drop(struct fdb_store *s, struct fdb_ival *iv)
{
	if (!iv->cache)
		return;
	ring_remove(s, iv->cache);
	cent_free(iv->cache);
	iv->cache = NULL;
}

/* Adjusts an attached entry's charge after a change. */
static void cache_charge(struct fdb_store *s, struct fdb_cent *c, ssize_t delta)
{
	c->bytes = (size_t)((ssize_t)c->bytes + delta);
	if (c->slot != UINT32_MAX)
		s->cache_bytes = (size_t)((ssize_t)s->cache_bytes + delta);
}

/* ---- loading an interval ---------------------------------------------------- */

struct extent_count {
	uint64_t n;
};

static int count_extent(void *arg, const struct flextree_extent *e)
{
	(void)e;
	((struct extent_count *)arg)->n++;
	return 0;
}

/* Reads and decodes the interval at off; verifies every checksum, the key
 * order and the bound given by the interval's key. */
static int ival_decode(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
		       struct fdb_cent **out, int *fragmented)
{
	*out = NULL;
	struct fdb_cent *c = cent_new();
	uint8_t *buf = malloc(iv->size ? iv->size : 1);
	int rc = c && buf ? 0 : -ENOMEM;
	if (!rc && iv->size) {
		ssize_t n = flexspace_read(s->fs, buf, off, iv->size);
		rc = n < 0 ? (int)n : (size_t)n != iv->size ? FLEX_ECORRUPT : 0;
	}
	const uint8_t *p = buf, *end = buf + iv->size;
	while (!rc && p < end) {
		size_t size;
		const uint8_t *key, *val;
		uint32_t klen, vlen;
		if ((rc = fdb_rec_decode(p, end, &size, &key, &klen, &val, &vlen)) != 0)
			break;
		const struct fdb_kv *prev = c->n ? &c->kv[c->n - 1] : NULL;
		if ((prev && fdb_keycmp(prev->key, prev->klen, key, klen) >= 0) ||
		    (!prev && fdb_keycmp(iv->key, iv->klen, key, klen) > 0)) {
			rc = FLEX_ECORRUPT;
			break;
		}
		if ((rc = cent_reserve(c, c->n + 1)) != 0)
			break;
		struct fdb_kv *kv = &c->kv[c->n];
		memset(kv, 0, sizeof(*kv));
		if ((rc = kv_set(kv, key, klen, val, vlen)) != 0)
			break;
		kv->off = (uint32_t)(p - buf);
		kv->size = (uint32_t)size;
		c->bytes += kv_bytes(kv);
		c->n++;
		p += size;
	}
	if (!rc && iv->count != FDB_COUNT_UNKNOWN && iv->count != c->n)
		rc = FLEX_ECORRUPT;
	if (!rc && fragmented) {
		struct extent_count ec = {0};
		if (iv->size)
			flexspace_extents(s->fs, off, iv->size, count_extent, &ec);
		/* The paper marks an interval once its extents outnumber half its
		 * pairs; after random inserts every pair is an extent, so with a
		 * cache smaller than the store that meant rewriting nearly every
		 * interval loaded (write amplification 8.6 in fillrandom).  Only
		 * pairs split across extents count as fragmentation here. */
		*fragmented = ec.n > (uint64_t)c->n + 2;
	}
	free(buf);
	if (rc) {
		cent_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Exclusive lock: makes sure iv is cached (unless too big to keep, then
 * *tmp holds a private copy the caller frees). */
static int ival_load(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		     struct fdb_cent **tmp, int *fragmented)
{
	*tmp = NULL;
	if (iv->cache)
		return 0;
	struct fdb_cent *c;
	int rc = ival_decode(s, iv, fdb_index_offset(p), &c, fragmented);
	if (rc)
		return rc;
	if (iv->count == FDB_COUNT_UNKNOWN) {
		s->keys += c->n; /* first load since open */
		s->uncounted--;
	}
	iv->count = c->n;
	atomic_fetch_add(&s->misses, 1);
	if (c->bytes > s->cache_limit / 4) {
		*tmp = c;
		return 0;
	}
	rc = cache_attach(s, iv, c);
	if (rc)
		cent_free(c);
	return rc;
}

/* ---- open: rebuilding the index from the anchors ---------------------------- */

struct anchors {
	uint64_t *off;
	size_t n, cap;
	int err;
};

static int collect_anchor(void *arg, const struct flextree_extent *e)
{
	struct anchors *a = arg;
	if (e->tag != FDB_ANCHOR || e->loff == 0)
		return 0;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 1024;
		uint64_t *o = realloc(a->off, cap * sizeof(*o));
		if (!o) {
			a->err = -ENOMEM;
			return 1;
		}
		a->off = o;
		a->cap = cap;
	}
	a->off[a->n++] = e->loff;
	return 0;
}

static struct fdb_ival *ival_new(const void *key, uint32_t klen)
{
	struct fdb_ival *iv = calloc(1, sizeof(*iv));
	if (!iv)
		return NULL;
	iv->key = malloc(klen ? klen : 1);
	if (!iv->key) {
		free(iv);
		return NULL;
	}
	memcpy(iv->key, key, klen);
	iv->klen = klen;
	return iv;
}

int fdb_store_open(struct fdb_store *s, struct flexspace *fs, uint64_t cache_limit)
{
	memset(s, 0, sizeof(*s));
	s->fs = fs;
	s->cache_limit = cache_limit;
	s->index = fdb_index_new();
	s->rec = malloc(FDB_REC_MAX);
	if (!s->index || !s->rec)
		return -ENOMEM;
	uint64_t size = flexspace_size(fs);
	struct anchors a = {0};
	int rc = flexspace_extents(fs, 0, UINT64_MAX, collect_anchor, &a);
	if (!rc)
		rc = a.err;
	uint8_t *hdr = malloc(10 + FLEXDB_MAX_KEY);
	if (!rc && !hdr)
		rc = -ENOMEM;
	/* Interval i starts at anchor i (the first at offset 0, untagged)
	 * and ends where the next begins. */
	const struct fdb_ival *prev = NULL;
	for (size_t i = 0; !rc && i <= a.n; i++) {
		uint64_t off = i ? a.off[i - 1] : 0;
		uint64_t end = i < a.n ? a.off[i] : size;
		if (end < off || end - off > UINT32_MAX || (i && end == off)) {
			rc = FLEX_ECORRUPT;
			break;
		}
		struct fdb_ival *iv = NULL;
		if (i == 0) {
			iv = ival_new("", 0);
		} else {
			/* Read just the anchor pair's header and key. */
			ssize_t n = flexspace_read(fs, hdr, off, 10 + FLEXDB_MAX_KEY);
			uint32_t klen, vlen;
			size_t h;
			if (n < 0)
				rc = (int)n;
			else if (fdb_rec_peek(hdr, hdr + n, &klen, &vlen, &h) || (size_t)n < h + klen ||
				 (prev->klen && fdb_keycmp(prev->key, prev->klen, hdr + h, klen) >= 0))
				rc = FLEX_ECORRUPT;
			else
				iv = ival_new(hdr + h, klen);
		}
		if (!rc && !iv)
			rc = -ENOMEM;
		if (rc)
			break;
		iv->size = (uint32_t)(end - off);
		iv->count = size ? FDB_COUNT_UNKNOWN : 0;
		s->uncounted += size != 0;
		if ((rc = fdb_index_append(s->index, iv, off)) != 0) {
			free(iv->key);
			free(iv);
			break;
		}
		prev = iv;
	}
	s->bytes = size;
	free(hdr);
	free(a.off);
	return rc;
}

void fdb_store_close(struct fdb_store *s)
{
	for (uint32_t i = 0; i < s->nring; i++) {
		s->ring[i]->iv->cache = NULL;
		cent_free(s->ring[i]);
	}
	free(s->ring);
	fdb_index_free(s->index);
	free(s->rec);
	memset(s, 0, sizeof(*s));
}

/* ---- changes (exclusive lock) ------------------------------------------------ */

static int set_tag(struct fdb_store *s, uint64_t off, uint16_t tag)
{
	if (off >= flexspace_size(s->fs))
		return 0;
	return flexspace_tag_set(s->fs, off, tag);
}

/* Splits a cached interval in two at its middle pair. */
static int ival_split(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		      struct fdb_cent *c)
{
	uint32_t m = c->n / 2;
	uint64_t off = fdb_index_offset(p);
	struct fdb_ival *nv = ival_new(c->kv[m].key, c->kv[m].klen);
	struct fdb_cent *nc = cent_new();
	if (!nv || !nc || cent_reserve(nc, c->n - m)) {
		if (nv) {
			free(nv->key);
			free(nv);
		}
		cent_free(nc);
		return -ENOMEM;
	}
	uint32_t at = c->kv[m].off;
	nc->n = c->n - m;
	memcpy(nc->kv, c->kv + m, nc->n * sizeof(struct fdb_kv));
	size_t moved = 0;
	for (uint32_t i = 0; i < nc->n; i++) {
		nc->kv[i].off -= at;
		moved += kv_bytes(&nc->kv[i]);
	}
	nc->bytes += moved;
	c->n = m;
	cache_charge(s, c, -(ssize_t)moved);
	nv->size = iv->size - at;
	nv->count = nc->n;
	iv->size = at;
	iv->count = m;
	int rc = set_tag(s, off + at, FDB_ANCHOR);
	if (!rc)
		rc = fdb_index_insert_after(s->index, p, nv, off + at);
	if (rc) {
		cent_free(nc);
		return rc;
	}
	/* The new half is cached only if the split interval was. */
	if (c != iv->cache || cache_attach(s, nv, nc) != 0)
		cent_free(nc);
	return 0;
}

/* Merges the interval after p's into it when both are small. */
static int ival_maybe_merge(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv)
{
	if (iv->count == FDB_COUNT_UNKNOWN || iv->count > FDB_MERGE_PAIRS ||
	    iv->size > FDB_MERGE_BYTES)
		return 0;
	struct fdb_ipath q = *p;
	struct fdb_ival *nx = fdb_index_next(&q);
	if (!nx || nx->count == FDB_COUNT_UNKNOWN || iv->count + nx->count > FDB_SPLIT_PAIRS / 2 ||
	    iv->size + nx->size > FDB_SPLIT_BYTES / 2)
		return 0;
	uint64_t nx_off = fdb_index_offset(&q);
	int rc = set_tag(s, nx_off, 0);
	if (rc)
		return rc;
	/* Extend the cached entry when both are cached, else drop both. */
	if (iv->cache && nx->cache && !cent_reserve(iv->cache, iv->cache->n + nx->cache->n)) {
		struct fdb_cent *a = iv->cache, *b = nx->cache;
		size_t moved = 0;
		for (uint32_t i = 0; i < b->n; i++) {
			a->kv[a->n + i] = b->kv[i];
			a->kv[a->n + i].off += iv->size;
			moved += kv_bytes(&b->kv[i]);
		}
		a->n += b->n;
		cache_charge(s, a, (ssize_t)moved);
		b->n = 0;
		cache_drop(s, nx);
	} else {
		cache_drop(s, iv);
		cache_drop(s, nx);
	}
	iv->size += nx->size;
	iv->count += nx->count;
	fdb_index_remove(s->index, &q);
	free(nx->key);
	free(nx);
	return 0;
}

static int store_apply(struct fdb_store *s, const struct fdb_batch_op *op);

/* Applies one change, then gives back cache space its write-through
 * growth took. */
int fdb_store_apply(struct fdb_store *s, const struct fdb_batch_op *op)
{
	int rc = store_apply(s, op);
	if (s->cache_bytes > s->cache_limit)
		cache_evict(s, 0, NULL);
	return rc;
}

static int store_apply(struct fdb_store *s, const struct fdb_batch_op *op)
{
	struct fdb_ipath p;
	struct fdb_ival *iv = fdb_index_find(s->index, op->key, op->klen, &p);
	if (!iv)
		return FLEX_ECORRUPT;
	struct fdb_cent *tmp;
	int fragmented = 0;
	int rc = ival_load(s, &p, iv, &tmp, &fragmented);
	if (rc)
		return rc;
	struct fdb_cent *c = tmp ? tmp : iv->cache;
	uint64_t off0 = fdb_index_offset(&p);
	if (fragmented && iv->size) {
		/* Rewrite the interval contiguously (tags are kept). */
		if ((rc = flexspace_defrag(s->fs, off0, iv->size)) != 0)
			goto out;
	}
	int found;
	uint32_t pos = cent_lower(c, op->key, op->klen, &found);
	uint64_t at = off0 + (pos < c->n ? c->kv[pos].off : iv->size);
	int64_t delta = 0;
	if (op->op == FDB_OP_PUT) {
		size_t rs = fdb_rec_encode(s->rec, op->key, op->klen, op->val, op->vlen);
		if (found) {
			uint32_t old = c->kv[pos].size;
			if (rs == old) {
				ssize_t w = flexspace_write(s->fs, s->rec, at, rs);
				rc = w < 0 ? (int)w : 0;
			} else {
				rc = flexspace_collapse(s->fs, at, old);
				if (!rc) {
					ssize_t w = flexspace_insert(s->fs, s->rec, at, rs);
					rc = w < 0 ? (int)w : 0;
				}
			}
			if (rc)
				goto out;
			size_t before = kv_bytes(&c->kv[pos]);
			if ((rc = kv_set(&c->kv[pos], op->key, op->klen, op->val, op->vlen)) != 0)
				goto out;
			c->kv[pos].size = (uint32_t)rs;
			cache_charge(s, c, (ssize_t)kv_bytes(&c->kv[pos]) - (ssize_t)before);
			delta = (int64_t)rs - old;
		} else {
			ssize_t w = flexspace_insert(s->fs, s->rec, at, rs);
			if (w < 0) {
				rc = (int)w;
				goto out;
			}
			if ((rc = cent_reserve(c, c->n + 1)) != 0)
				goto out;
			memmove(c->kv + pos + 1, c->kv + pos, (c->n - pos) * sizeof(struct fdb_kv));
			memset(&c->kv[pos], 0, sizeof(struct fdb_kv));
			c->n++;
			if ((rc = kv_set(&c->kv[pos], op->key, op->klen, op->val, op->vlen)) != 0)
				goto out;
			c->kv[pos].off = (uint32_t)(at - off0);
			c->kv[pos].size = (uint32_t)rs;
			cache_charge(s, c, (ssize_t)kv_bytes(&c->kv[pos]));
			delta = (int64_t)rs;
			iv->count++;
			s->keys++;
		}
		for (uint32_t i = pos + 1; i < c->n; i++)
			c->kv[i].off = (uint32_t)((int64_t)c->kv[i].off + delta);
		/* A new or rewritten first pair must carry the anchor tag; the
		 * pair it pushed back must not. */
		if (pos == 0 && (rc = set_tag(s, off0, FDB_ANCHOR)) == 0 && !found && c->n > 1)
			rc = set_tag(s, off0 + rs, 0);
	} else {
		if (!found)
			goto out;
		uint32_t old = c->kv[pos].size;
		if ((rc = flexspace_collapse(s->fs, at, old)) != 0)
			goto out;
		cache_charge(s, c, -(ssize_t)kv_bytes(&c->kv[pos]));
		free(c->kv[pos].key);
		memmove(c->kv + pos, c->kv + pos + 1, (c->n - pos - 1) * sizeof(struct fdb_kv));
		c->n--;
		delta = -(int64_t)old;
		for (uint32_t i = pos; i < c->n; i++)
			c->kv[i].off -= old;
		iv->count--;
		s->keys--;
		if (pos == 0 && c->n > 0)
			rc = set_tag(s, off0, FDB_ANCHOR);
	}
	iv->size = (uint32_t)((int64_t)iv->size + delta);
	s->bytes = (uint64_t)((int64_t)s->bytes + delta);
	fdb_index_shift(&p, delta);
	if (rc)
		goto out;
	if (c->n >= 2 && (iv->size > FDB_SPLIT_BYTES || iv->count > FDB_SPLIT_PAIRS)) {
		rc = ival_split(s, &p, iv, c);
		goto out;
	}
	cent_free(tmp);
	tmp = NULL;
	if (iv->count == 0 && fdb_index_count(s->index) > 1) {
		/* An empty interval goes; the first interval's key stays the
		 * empty key, below everything. */
		int first = iv->klen == 0;
		cache_drop(s, iv);
		fdb_index_remove(s->index, &p);
		free(iv->key);
		free(iv);
		if (first) {
			struct fdb_ipath q;
			struct fdb_ival *f = fdb_index_first(s->index, &q);
			free(f->key);
			f->key = malloc(1);
			f->klen = 0;
			if (!f->key)
				return -ENOMEM;
		}
		return 0;
	}
	if (op->op == FDB_OP_DEL)
		return ival_maybe_merge(s, &p, iv);
	return 0;
out:
	cent_free(tmp);
	return rc;
}

/* ---- reads (shared lock, or exclusive with load) ----------------------------- */

/* Reads an uncached interval's bytes. */
static int ival_read_raw(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
			 uint8_t **out)
{
	uint8_t *buf = malloc(iv->size ? iv->size : 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = iv->size ? flexspace_read(s->fs, buf, off, iv->size) : 0;
	if (n < 0 || (size_t)n != iv->size) {
		free(buf);
		return n < 0 ? (int)n : FLEX_ECORRUPT;
	}
	*out = buf;
	return 0;
}

/* Looks key up in an interval's raw bytes without decoding it: record
 * headers are walked (bounds-checked) and only the matching record's
 * checksum is verified, since only its bytes are returned. */
static int raw_search(const uint8_t *p, const uint8_t *end, const void *key, uint32_t klen,
		      void *buf, size_t cap, size_t *vlen)
{
	while (p < end) {
		uint32_t kl, vl;
		size_t h;
		if (fdb_rec_peek(p, end, &kl, &vl, &h) || (size_t)(end - p) < h + kl + vl + 4)
			return FLEX_ECORRUPT;
		int c = fdb_keycmp(p + h, kl, key, klen);
		if (c == 0) {
			size_t size;
			const uint8_t *k, *v;
			if (fdb_rec_decode(p, end, &size, &k, &kl, &v, &vl))
				return FLEX_ECORRUPT;
			if (cap && buf)
				memcpy(buf, v, cap < vl ? cap : vl);
			if (vlen)
				*vlen = vl;
			return 0;
		}
		if (c > 0)
			break; /* sorted: the key is absent */
		p += h + kl + vl + 4;
	}
	return FLEXDB_NOTFOUND;
}

int fdb_store_get(struct fdb_store *s, const void *key, uint32_t klen, void *buf, size_t cap,
		  size_t *vlen, int *admit)
{
	struct fdb_ipath p;
	*admit = 0;
	struct fdb_ival *iv = fdb_index_find(s->index, key, klen, &p);
	if (!iv)
		return FLEXDB_NOTFOUND;
	struct fdb_cent *c = iv->cache;
	if (!c) {
		/* A miss is served from the raw bytes under the shared lock.
		 * The interval is worth caching when the cache has room, and
		 * otherwise on one miss in FDB_ADMIT_EVERY: a hot interval gets
		 * in soon, a cold one seldom pushes a warm one out. */
		atomic_fetch_add(&s->misses, 1);
		uint8_t *raw;
		int rc = ival_read_raw(s, iv, fdb_index_offset(&p), &raw);
		if (rc)
			return rc;
		rc = raw_search(raw, raw + iv->size, key, klen, buf, cap, vlen);
		free(raw);
		uint64_t tick = atomic_fetch_add(&s->admit_tick, 1);
		if (s->cache_bytes + 2 * (size_t)iv->size <= s->cache_limit ||
		    tick % FDB_ADMIT_EVERY == 0)
			*admit |= FDB_ADMIT;
		/* Every few misses, look at how scattered the interval is: a
		 * read of an interval whose pairs are all separate extents
		 * costs one I/O per pair. */
		if (tick % 4 == 0 && iv->size > 256) {
			struct extent_count ec = {0};
			flexspace_extents(s->fs, fdb_index_offset(&p), iv->size, count_extent, &ec);
			if (ec.n > 2 && ec.n * FDB_FRAG_EXTENT_BYTES > iv->size)
				*admit |= FDB_FRAGMENTED;
		}
		return rc;
	}
	atomic_fetch_add(&s->hits, 1);
	if (!atomic_load_explicit(&c->ref, memory_order_relaxed))
		atomic_store_explicit(&c->ref, 1, memory_order_relaxed);
	/* Fingerprints first: about one key comparison per lookup. */
	uint16_t fp = fdb_fingerprint(key, klen);
	for (uint32_t i = 0; i < c->n; i++) {
		const struct fdb_kv *kv = &c->kv[i];
		if (kv->fp != fp || fdb_keycmp(kv->key, kv->klen, key, klen) != 0)
			continue;
		if (cap && buf)
			memcpy(buf, kv->key + kv->klen, cap < kv->vlen ? cap : kv->vlen);
		if (vlen)
			*vlen = kv->vlen;
		return 0;
	}
	return FLEXDB_NOTFOUND;
}

int fdb_store_defrag(struct fdb_store *s, const void *key, uint32_t klen)
{
	struct fdb_ipath p;
	struct fdb_ival *iv = fdb_index_find(s->index, key, klen, &p);
	if (!iv || !iv->size)
		return 0;
	/* Logical offsets and tags do not change, so the index and any cached
	 * entry stay valid. */
	return flexspace_defrag(s->fs, fdb_index_offset(&p), iv->size);
}

int fdb_store_admit(struct fdb_store *s, const void *key, uint32_t klen)
{
	struct fdb_ipath p;
	struct fdb_ival *iv = fdb_index_find(s->index, key, klen, &p);
	if (!iv || iv->cache)
		return 0;
	struct fdb_cent *tmp;
	int rc = ival_load(s, &p, iv, &tmp, NULL);
	cent_free(tmp);
	return rc;
}

static int pair_set(struct fdb_pair *out, const uint8_t *key, uint32_t klen, const uint8_t *val,
		    uint32_t vlen)
{
	out->key = malloc((size_t)klen + vlen + 1);
	if (!out->key)
		return -ENOMEM;
	memcpy(out->key, key, klen);
	if (vlen)
		memcpy(out->key + klen, val, vlen);
	out->klen = klen;
	out->vlen = vlen;
	out->tomb = 0;
	return 0;
}

/* A pair located in raw interval bytes or in a cache entry. */
struct pair_ref {
	const uint8_t *key, *val;
	uint32_t klen, vlen;
};

/* Parses an interval's raw bytes into refs, verifying every checksum
 * (these pairs are returned). */
static int raw_pairs(const uint8_t *p, const uint8_t *end, struct pair_ref **out, uint32_t *n)
{
	uint32_t cap = 32;
	struct pair_ref *r = malloc(cap * sizeof(*r));
	*n = 0;
	if (!r)
		return -ENOMEM;
	while (p < end) {
		size_t size;
		struct pair_ref x;
		if (fdb_rec_decode(p, end, &size, &x.key, &x.klen, &x.val, &x.vlen)) {
			free(r);
			return FLEX_ECORRUPT;
		}
		if (*n == cap) {
			cap *= 2;
			struct pair_ref *nr = realloc(r, cap * sizeof(*r));
			if (!nr) {
				free(r);
				return -ENOMEM;
			}
			r = nr;
		}
		r[(*n)++] = x;
		p += size;
	}
	*out = r;
	return 0;
}

static uint32_t refs_lower(const struct pair_ref *r, uint32_t n, const void *key, uint32_t klen,
			   int *found)
{
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (fdb_keycmp(r[mid].key, r[mid].klen, key, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < n && fdb_keycmp(r[lo].key, r[lo].klen, key, klen) == 0;
	return lo;
}

int fdb_store_scan(struct fdb_store *s, const void *from, uint32_t flen, int inclusive,
		   int reverse, struct fdb_pair *out, int max, int *n)
{
	*n = 0;
	struct fdb_ipath p;
	struct fdb_ival *iv;
	if (flen)
		iv = fdb_index_find(s->index, from, flen, &p);
	else
		iv = reverse ? fdb_index_last(s->index, &p) : fdb_index_first(s->index, &p);
	int first = 1, rc = 0;
	while (iv && *n < max && !rc) {
		/* Cached entries are read in place; others from their raw
		 * bytes, without building (or caching) an entry. */
		struct pair_ref *refs = NULL;
		uint8_t *raw = NULL;
		uint32_t cnt;
		const struct fdb_cent *c = iv->cache;
		if (c) {
			refs = malloc((c->n ? c->n : 1) * sizeof(*refs));
			if (!refs) {
				rc = -ENOMEM;
				break;
			}
			for (uint32_t i = 0; i < c->n; i++)
				refs[i] = (struct pair_ref){c->kv[i].key, c->kv[i].key + c->kv[i].klen,
							    c->kv[i].klen, c->kv[i].vlen};
			cnt = c->n;
		} else {
			rc = ival_read_raw(s, iv, fdb_index_offset(&p), &raw);
			if (!rc)
				rc = raw_pairs(raw, raw + iv->size, &refs, &cnt);
			if (rc) {
				free(raw);
				break;
			}
		}
		int64_t i;
		if (first && flen) {
			int found;
			uint32_t lo = refs_lower(refs, cnt, from, flen, &found);
			if (!reverse)
				i = found && !inclusive ? lo + 1 : lo;
			else
				i = found && inclusive ? (int64_t)lo : (int64_t)lo - 1;
		} else {
			i = reverse ? (int64_t)cnt - 1 : 0;
		}
		first = 0;
		for (; i >= 0 && i < cnt && *n < max; i += reverse ? -1 : 1) {
			if ((rc = pair_set(&out[*n], refs[i].key, refs[i].klen, refs[i].val,
					   refs[i].vlen)) != 0)
				break;
			(*n)++;
		}
		free(refs);
		free(raw);
		iv = reverse ? fdb_index_prev(&p) : fdb_index_next(&p);
	}
	return rc;
}

/* ---- check ------------------------------------------------------------------ */

int fdb_store_check(struct fdb_store *s)
{
	int rc = flexspace_check(s->fs);
	if (!rc)
		rc = fdb_index_check(s->index);
	struct fdb_ipath p;
	struct fdb_ival *iv = rc ? NULL : fdb_index_first(s->index, &p);
	uint64_t pos = 0, keys = 0;
	uint8_t *last = NULL;
	uint32_t lastlen = 0;
	int known = 1;
	while (iv && !rc) {
		uint64_t off = fdb_index_offset(&p);
		struct fdb_cent *c = NULL;
		if (off != pos)
			rc = FLEX_ECORRUPT;
		if (!rc)
			rc = ival_decode(s, iv, off, &c, NULL);
		if (!rc && c->n == 0 && fdb_index_count(s->index) > 1)
			rc = FLEX_ECORRUPT; /* empty intervals are removed */
		if (!rc && c->n && last &&
		    fdb_keycmp(last, lastlen, c->kv[0].key, c->kv[0].klen) >= 0)
			rc = FLEX_ECORRUPT;
		if (!rc && off > 0) {
			uint16_t tag;
			uint64_t start;
			if (flexspace_tag_get(s->fs, off, &tag, &start) || tag != FDB_ANCHOR ||
			    start != off)
				rc = FLEX_ECORRUPT;
		}
		if (!rc && iv->cache) {
			const struct fdb_cent *k = iv->cache;
			if (k->n != c->n)
				rc = FLEX_ECORRUPT;
			for (uint32_t i = 0; !rc && i < c->n; i++)
				if (k->kv[i].off != c->kv[i].off || k->kv[i].size != c->kv[i].size ||
				    k->kv[i].klen != c->kv[i].klen || k->kv[i].vlen != c->kv[i].vlen ||
				    memcmp(k->kv[i].key, c->kv[i].key,
					   (size_t)c->kv[i].klen + c->kv[i].vlen))
					rc = FLEX_ECORRUPT;
		}
		if (!rc && c->n) {
			free(last);
			lastlen = c->kv[c->n - 1].klen;
			last = malloc(lastlen);
			if (!last)
				rc = -ENOMEM;
			else
				memcpy(last, c->kv[c->n - 1].key, lastlen);
		}
		if (iv->count == FDB_COUNT_UNKNOWN)
			known = 0;
		if (c)
			keys += c->n;
		cent_free(c);
		pos += iv->size;
		iv = fdb_index_next(&p);
	}
	free(last);
	if (!rc && pos != flexspace_size(s->fs))
		rc = FLEX_ECORRUPT;
	if (!rc && known && keys != s->keys)
		rc = FLEX_ECORRUPT;
	return rc;
}
