/*
 * fdb_iter.c - FlexDB's iterators.
 *
 * An iterator reads ahead in chunks: up to FDB_ITER_CHUNK pairs from each
 * source (the active memtable, the immutable one and the store), merged
 * newest source first, tombstones and keys a newer memtable's range
 * delete covers dropped.  A chunk is complete only up to the smallest last
 * key among the sources that filled up (its bound): past it a source may
 * hold keys the chunk has not seen, so the next chunk starts there.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_db.h"

/* Pairs fetched per source per iterator refill. */
#define FDB_ITER_CHUNK 64

struct flexdb_iter {
	struct flexdb *db;
	struct fdb_pair *pairs; /* the current chunk, merged */
	int n, pos;
	int reverse;	/* direction the chunk was read in */
	int exhausted;	/* nothing lies beyond the chunk */
	uint8_t *bound; /* last key the chunk covers (when not exhausted) */
	uint32_t boundlen, boundcap;
	uint8_t *from; /* where the chunk being read starts */
	uint32_t fromcap;
	uint64_t grows; /* allocations of the buffers below and above */
	/* The bounds and the prefix (owned copies; NULL: none), and the range
	 * they leave: keys in [lo, hi), each end NULL when open.  pfx_end is
	 * the first key above every key with the prefix (NULL when the prefix
	 * is all 0xff bytes: no key is). */
	uint8_t *lower, *upper, *pfx, *pfx_end;
	uint32_t lowerlen, upperlen, pfxlen, pfx_endlen;
	const uint8_t *lo, *hi;
	uint32_t lolen, hilen;
	struct fdb_ar ar;     /* the chunk's keys and values */
	struct fdb_pair *src; /* 3 x FDB_ITER_CHUNK: what each source gave */
};

static void iter_reset(struct flexdb_iter *it)
{
	it->n = it->pos = 0;
}

/* A closed iterator is parked in one of the handle's FDB_ITER_PARKED
 * slots, with its arrays and up to this much of its arena, for the next
 * open: a reader that opens an iterator per range query (a YCSB E scan)
 * then pays no allocation, and no zeroing or first touch of fresh pages,
 * per query. */
#define FDB_ITER_PARK_KEEP (64u << 10)

static void iter_free(struct flexdb_iter *it)
{
	fdb_ar_free(&it->ar);
	free(it->bound);
	free(it->from);
	free(it->src);
	free(it->pairs);
	free(it->lower);
	free(it->upper);
	free(it->pfx);
	free(it->pfx_end);
	free(it);
}

int flexdb_iter_open(struct flexdb *db, struct flexdb_iter **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!db)
		return -EINVAL;
	struct flexdb_iter *it = NULL;
	for (int i = 0; i < FDB_ITER_PARKED && !it; i++)
		if (atomic_load_explicit(&db->parked[i], memory_order_relaxed))
			it = atomic_exchange_explicit(&db->parked[i], NULL, memory_order_acquire);
	if (it) {
		FLEX_HB_AFTER(&db->parked);
		*out = it;
		return 0;
	}
	if (!(it = calloc(1, sizeof(*it))))
		return -ENOMEM;
	/* Written before they are read: no need to zero them. */
	it->pairs = malloc(3 * FDB_ITER_CHUNK * sizeof(*it->pairs));
	it->src = malloc(3 * FDB_ITER_CHUNK * sizeof(*it->src));
	if (!it->pairs || !it->src) {
		iter_free(it);
		return -ENOMEM;
	}
	it->db = db;
	*out = it;
	return 0;
}

void fdb_iters_unpark(struct flexdb *db)
{
	for (int i = 0; i < FDB_ITER_PARKED; i++) {
		struct flexdb_iter *it = atomic_exchange(&db->parked[i], NULL);
		if (it)
			iter_free(it);
	}
}

/* Collects up to FDB_ITER_CHUNK memtable entries from `from`, stopping
 * before the first key past lim (fdb_store_scan): forwards lim is
 * excluded, or included with `lim_incl`; in reverse it is always
 * included (the iterator's lower bound and the store's last pair both
 * are). */
static int mt_collect(const struct fdb_mt *mt, const void *from, uint32_t flen, int inclusive,
		      int reverse, const void *lim, uint32_t limlen, int lim_incl, uint64_t vis,
		      struct fdb_pair *out, int *n, struct fdb_ar *ar)
{
	struct fdb_mt_iter mi;
	*n = 0;
	if (reverse)
		fdb_mt_seek_le(&mi, mt, from, flen);
	else
		fdb_mt_seek(&mi, mt, from, flen);
	while (fdb_mt_valid(&mi) && *n < FDB_ITER_CHUNK) {
		uint32_t klen;
		const uint8_t *k = fdb_mt_key(&mi, &klen);
		if (lim) {
			int c = fdb_keycmp(k, klen, lim, limlen);
			if (reverse ? c < 0 : lim_incl ? c > 0 : c >= 0)
				break;
		}
		if (!inclusive && flen && fdb_keycmp(k, klen, from, flen) == 0) {
			if (reverse)
				fdb_mt_prev(&mi);
			else
				fdb_mt_next(&mi);
			continue;
		}
		const struct fdb_val *v = fdb_mt_val(&mi, vis);
		if (!v) { /* only versions from a batch still being applied */
			if (reverse)
				fdb_mt_prev(&mi);
			else
				fdb_mt_next(&mi);
			continue;
		}
		struct fdb_pair *p = &out[*n];
		p->key = fdb_ar_alloc(ar, (size_t)klen + v->vlen);
		if (!p->key)
			return -ENOMEM;
		memcpy(p->key, k, klen);
		memcpy(p->key + klen, v->data, v->vlen);
		p->klen = klen;
		p->vlen = v->vlen;
		p->tomb = v->tomb;
		p->unchecked = 0;
		(*n)++;
		if (reverse)
			fdb_mt_prev(&mi);
		else
			fdb_mt_next(&mi);
	}
	return 0;
}

/* Whether a range delete of a memtable newer than source `src` (0 active,
 * 1 immutable, 2 store) covers key. */
static int iter_covered(const struct fdb_memref *a, const struct fdb_memref *im, int src,
			const void *key, uint32_t klen, uint64_t vis)
{
	if (src > 0 && fdb_mt_ranges(a->mt) && fdb_mt_range_find(a->mt, key, klen, vis))
		return 1;
	return src > 1 && im && fdb_mt_ranges(im->mt) && fdb_mt_range_find(im->mt, key, klen, vis);
}

/* Where the store's part of a chunk starts: past the keys at `from` that
 * the memtables' range deletes cover, which the store may hold by the
 * million until the committer collapses them.  Forward, a covered *from
 * moves to the range's end (inclusive); in reverse to its start
 * (exclusive), while a range reaching up to that start covers what lies
 * just below it.  Returns 0 when the store has nothing to give. */
static int iter_store_from(const struct fdb_memref *a, const struct fdb_memref *im, int reverse,
			   uint64_t vis, const void **from, uint32_t *flen, int *inclusive)
{
	if (reverse && *flen == 0)
		return 1; /* from the last key: nothing to test */
	if (*flen == 0)
		*from = "";
	for (int guard = 0; guard < 64; guard++) {
		const struct fdb_mt_range *r = NULL;
		for (int s = 0; s < 2 && !r; s++) {
			const struct fdb_memref *m = s ? im : a;
			if (!m)
				continue;
			if (!reverse) {
				r = fdb_mt_range_find(m->mt, *from, *flen, vis);
				continue;
			}
			/* A range holding *from (inclusive) or, exclusive, the
			 * keys just below it: start < from <= end. */
			for (const struct fdb_mt_range *q = fdb_mt_ranges(m->mt); q && !r;
			     q = q->next) {
				if (q->seq > vis ||
				    fdb_keycmp(q->start, q->slen, *from, *flen) >= 0)
					continue;
				int c = fdb_keycmp(*from, *flen, q->end, q->elen);
				if (c < 0 || (c == 0 && !*inclusive))
					r = q;
			}
		}
		if (!r)
			return 1;
		if (!reverse) {
			*from = r->end;
			*flen = r->elen;
			*inclusive = 1;
		} else {
			if (r->slen == 0)
				return 0; /* everything below is covered */
			*from = r->start;
			*flen = r->slen;
			*inclusive = 0;
		}
	}
	return 1;
}

/* Copies the n bytes at k into *buf, growing it only when it is too
 * small: refills of the same iterator reuse it. */
static int iter_keep(struct flexdb_iter *it, uint8_t **buf, uint32_t *cap, const void *k,
		     uint32_t n)
{
	if (n > *cap) {
		uint32_t c = n < 64 ? 64 : n;
		uint8_t *p = realloc(*buf, c);
		if (!p)
			return -ENOMEM;
		*buf = p;
		*cap = c;
		it->grows++;
	}
	if (n)
		memcpy(*buf, k, n);
	return 0;
}

/* Moves a start before the near end of the range to it.  Returns 0 when
 * the start lies past the far end (lim): nothing is left to read.  No
 * source reads past lim, so that a short bounded scan reads a few pairs,
 * not whole chunks. */
static int iter_clamp(const struct flexdb_iter *it, const void **from, uint32_t *flen,
		      int *inclusive, int reverse)
{
	if (!reverse && it->lo && (!*flen || fdb_keycmp(*from, *flen, it->lo, it->lolen) < 0)) {
		*from = it->lo;
		*flen = it->lolen;
		*inclusive = 1;
	} else if (reverse && it->hi &&
		   (!*flen || fdb_keycmp(*from, *flen, it->hi, it->hilen) >= 0)) {
		*from = it->hi;
		*flen = it->hilen;
		*inclusive = 0;
	}
	const uint8_t *lim = reverse ? it->lo : it->hi;
	uint32_t limlen = reverse ? it->lolen : it->hilen;
	if (!lim || !*flen)
		return 1;
	int c = fdb_keycmp(*from, *flen, lim, limlen);
	return reverse ? !(c < 0 || (c == 0 && !*inclusive)) : c < 0;
}

/* One read of the sources: the memtables, and what each source gave (0
 * active, 1 immutable, 2 store).  The pass holds the shared lock from
 * before it reads the memtables' pointers to after the merge, as a get
 * does: the committer drops an immutable memtable only under the
 * exclusive lock, after its pairs reached the store, so the pass needs no
 * reference to them (which two readers' passes would contend for). */
struct iter_pass {
	const struct fdb_memref *a, *im;
	uint64_t vis;
	int ranges; /* the memtables hold range deletes */
	struct fdb_pair *src[3];
	int cnt[3];
};

static int iter_gather(struct flexdb_iter *it, struct iter_pass *p, const void *from, uint32_t flen,
		       int inclusive, int reverse)
{
	struct flexdb *db = it->db;
	const uint8_t *lim = reverse ? it->lo : it->hi;
	uint32_t limlen = reverse ? it->lolen : it->hilen;
	p->ranges = fdb_mt_ranges(p->a->mt) || (p->im && fdb_mt_ranges(p->im->mt));
	/* The store first: when it fills the chunk, the chunk ends at its
	 * last pair (iter_bound), and the memtables are read only up to
	 * there, not 64 entries each far beyond the chunk. */
	const void *sfrom = from;
	uint32_t sflen = flen;
	int sinc = inclusive, rc = 0;
	p->cnt[2] = 0;
	if (!p->ranges || iter_store_from(p->a, p->im, reverse, p->vis, &sfrom, &sflen, &sinc)) {
		struct fdb_cands cands;
		fdb_cands_init(&db->store, &cands, NULL, 0);
		rc = fdb_store_scan(&db->store, sfrom, sflen, sinc, reverse, lim, limlen,
				    p->src[2], FDB_ITER_CHUNK, &p->cnt[2], &it->ar, &cands);
		fdb_store_admit(&db->store, &cands, 1);
	}
	int incl = 0;
	if (!rc && p->cnt[2] == FDB_ITER_CHUNK) {
		const struct fdb_pair *l = &p->src[2][FDB_ITER_CHUNK - 1];
		lim = l->key;
		limlen = l->klen;
		incl = 1;
	}
	if (!rc)
		rc = mt_collect(p->a->mt, from, flen, inclusive, reverse, lim, limlen, incl,
				p->vis, p->src[0], &p->cnt[0], &it->ar);
	if (!rc && p->im)
		rc = mt_collect(p->im->mt, from, flen, inclusive, reverse, lim, limlen, incl,
				p->vis, p->src[1], &p->cnt[1], &it->ar);
	return rc;
}

/* The chunk is complete up to the smallest last key among the sources
 * that filled up (largest, in reverse); NULL when none did. */
static const struct fdb_pair *iter_bound(const struct iter_pass *p, int reverse)
{
	const struct fdb_pair *b = NULL;
	for (int s = 0; s < 3; s++) {
		if (p->cnt[s] < FDB_ITER_CHUNK)
			continue;
		const struct fdb_pair *l = &p->src[s][p->cnt[s] - 1];
		int c = b ? fdb_keycmp(l->key, l->klen, b->key, b->klen) : 0;
		if (!b || (reverse ? c > 0 : c < 0))
			b = l;
	}
	return b;
}

/* Merges the sources into it->pairs up to the bound (when bounded):
 * newest source first for a key, tombstones and covered keys dropped.
 * The store's pairs may be unchecked (fdb_store_scan): alone, they keep
 * their order and are verified when the iterator comes to them; here a
 * store pair is verified before its key is compared with another
 * source's or the bound, so that a damaged key can neither drop it nor
 * place another pair wrongly.  Returns 0 or FLEX_ECORRUPT. */
static int iter_merge(struct flexdb_iter *it, const struct iter_pass *p, int reverse, int bounded)
{
	struct fdb_pair *const *src = p->src;
	/* One source alone (most often the store, the memtables holding
	 * nothing in the range) and no range deletes: its pairs in order,
	 * tombstones dropped.  The bound is then its own last pair. */
	int only = -1, nonempty = 0;
	for (int s = 0; s < 3; s++)
		if (p->cnt[s]) {
			only = s;
			nonempty++;
		}
	if (nonempty == 1 && !p->ranges) {
		if (only == 2) {
			/* The store has no tombstones. */
			memcpy(it->pairs + it->n, src[2], (size_t)p->cnt[2] * sizeof(*src[2]));
			it->n += p->cnt[2];
			return 0;
		}
		for (int i = 0; i < p->cnt[only]; i++)
			if (!src[only][i].tomb)
				it->pairs[it->n++] = src[only][i];
		return 0;
	}
	int idx[3] = {0, 0, 0};
	for (;;) {
		if (idx[2] < p->cnt[2] && src[2][idx[2]].unchecked &&
		    (bounded || idx[0] < p->cnt[0] || idx[1] < p->cnt[1] || p->ranges) &&
		    fdb_pair_check(&src[2][idx[2]]))
			return FLEX_ECORRUPT;
		int best = -1;
		for (int s = 0; s < 3; s++) {
			if (idx[s] >= p->cnt[s])
				continue;
			if (best < 0) {
				best = s;
				continue;
			}
			const struct fdb_pair *x = &src[s][idx[s]], *y = &src[best][idx[best]];
			int c = fdb_keycmp(x->key, x->klen, y->key, y->klen);
			if (reverse ? c > 0 : c < 0)
				best = s;
		}
		if (best < 0)
			break;
		struct fdb_pair *w = &src[best][idx[best]];
		if (bounded) {
			int c = fdb_keycmp(w->key, w->klen, it->bound, it->boundlen);
			if (reverse ? c < 0 : c > 0)
				break;
		}
		/* Skip the same key in older sources. */
		for (int s = best + 1; s < 3; s++)
			if (idx[s] < p->cnt[s] &&
			    fdb_keycmp(src[s][idx[s]].key, src[s][idx[s]].klen, w->key, w->klen) ==
				0)
				idx[s]++;
		/* A tie goes to the newest source, so none newer than best
		 * can be at the same key, whatever order the sources hold. */
		for (int s = 0; s < best; s++)
			assert(idx[s] >= p->cnt[s] ||
			       fdb_keycmp(src[s][idx[s]].key, src[s][idx[s]].klen, w->key,
					  w->klen) != 0);
		idx[best]++;
		if (w->tomb || (p->ranges && best > 0 &&
				iter_covered(p->a, p->im, best, w->key, w->klen, p->vis)))
			continue;
		it->pairs[it->n++] = *w;
	}
	return 0;
}

/* Reads one chunk from `from`, which must not lie in the iterator's
 * arena or bound: both are reused for the chunk. */
static int iter_pass(struct flexdb_iter *it, const void *from, uint32_t flen, int inclusive,
		     int reverse)
{
	struct iter_pass p = {0};
	for (int s = 0; s < 3; s++)
		p.src[s] = it->src + s * FDB_ITER_CHUNK;
	iter_reset(it);
	it->reverse = reverse;
	fdb_ar_reset(&it->ar);
	uint64_t mallocs = it->ar.mallocs;
	struct flexdb *db = it->db;
	/* active is loaded before imm: switch_memtable stores them the
	 * other way. */
	p.vis = atomic_load(&db->visible);
	flex_brlock_rdlock(&db->lock);
	p.a = __atomic_load_n(&db->active, __ATOMIC_ACQUIRE);
	p.im = __atomic_load_n(&db->imm, __ATOMIC_ACQUIRE);
	FLEX_HB_AFTER(&db->active);
	int rc = iter_gather(it, &p, from, flen, inclusive, reverse);
	const struct fdb_pair *bound = rc ? NULL : iter_bound(&p, reverse);
	if (bound) {
		rc = iter_keep(it, &it->bound, &it->boundcap, bound->key, bound->klen);
		it->boundlen = bound->klen;
	}
	if (!rc)
		rc = iter_merge(it, &p, reverse, bound != NULL);
	flex_brlock_rdunlock(&db->lock);
	fdb_cache_reap(db);
	it->exhausted = bound == NULL;
	it->grows += it->ar.mallocs - mallocs;
	return rc;
}

/* Reads the next chunk after (or before) `from`: up to FDB_ITER_CHUNK pairs
 * from each source, merged newest-first, tombstones dropped, cut at the
 * first source bound that may hide more keys.  A chunk whose keys were
 * all deleted is followed by the next one, in this loop, until one has a
 * key or nothing lies beyond: the memtables may hide millions of the
 * store's keys until the committer removes them. */
static int iter_fill(struct flexdb_iter *it, const void *from, uint32_t flen, int inclusive,
		     int reverse)
{
	int rc = 0;
	for (;;) {
		if (!iter_clamp(it, &from, &flen, &inclusive, reverse)) {
			iter_reset(it);
			it->reverse = reverse;
			it->exhausted = 1;
			return 0;
		}
		/* `from` may lie in the chunk being replaced or be its
		 * bound. */
		if (from != it->from) {
			rc = iter_keep(it, &it->from, &it->fromcap, from, flen);
			from = it->from;
		}
		if (!rc)
			rc = iter_pass(it, from, flen, inclusive, reverse);
		if (!rc && it->n > 0)
			rc = fdb_pair_check(&it->pairs[0]);
		if (rc || it->n > 0 || it->exhausted)
			break;
		/* Everything up to the bound was deleted: go on past it, the
		 * bound's buffer and the start's trading places. */
		uint8_t *b = it->bound;
		uint32_t bcap = it->boundcap;
		it->bound = it->from;
		it->boundcap = it->fromcap;
		it->from = b;
		it->fromcap = bcap;
		from = b;
		flen = it->boundlen;
		inclusive = 0;
	}
	if (rc) {
		iter_reset(it);
		it->exhausted = 1;
	}
	return rc;
}

uint64_t fdb_iter_grows(const struct flexdb_iter *it)
{
	return it->grows;
}

/* The range the bounds and the prefix leave: the higher lower end and the
 * lower upper end.  It may be empty (lo >= hi): then no key is in it. */
static void iter_range(struct flexdb_iter *it)
{
	it->lo = it->lower;
	it->lolen = it->lowerlen;
	if (it->pfx && (!it->lo || fdb_keycmp(it->pfx, it->pfxlen, it->lo, it->lolen) > 0)) {
		it->lo = it->pfx;
		it->lolen = it->pfxlen;
	}
	it->hi = it->upper;
	it->hilen = it->upperlen;
	if (it->pfx_end &&
	    (!it->hi || fdb_keycmp(it->pfx_end, it->pfx_endlen, it->hi, it->hilen) < 0)) {
		it->hi = it->pfx_end;
		it->hilen = it->pfx_endlen;
	}
	/* Moved bounds may exclude the current pair: seek again. */
	iter_reset(it);
	it->exhausted = 1;
}

/* A copy of n bytes (NULL for none), in *out; 0 or -ENOMEM. */
static int iter_dup(const void *p, size_t n, uint8_t **out)
{
	*out = NULL;
	if (!n)
		return 0;
	*out = malloc(n);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, p, n);
	return 0;
}

int flexdb_iter_set_bounds(struct flexdb_iter *it, const void *lower, size_t llen,
			   const void *upper, size_t ulen)
{
	if (!it || (llen && !lower) || (ulen && !upper))
		return -EINVAL;
	if (llen > FLEXDB_MAX_KEY || ulen > FLEXDB_MAX_KEY)
		return FLEX_ETOOBIG;
	if (llen && ulen && fdb_keycmp(lower, (uint32_t)llen, upper, (uint32_t)ulen) >= 0)
		return -EINVAL;
	uint8_t *l, *u;
	if (iter_dup(lower, llen, &l))
		return -ENOMEM;
	if (iter_dup(upper, ulen, &u)) {
		free(l);
		return -ENOMEM;
	}
	free(it->lower);
	free(it->upper);
	it->lower = l;
	it->lowerlen = (uint32_t)llen;
	it->upper = u;
	it->upperlen = (uint32_t)ulen;
	iter_range(it);
	return 0;
}

int flexdb_iter_set_prefix(struct flexdb_iter *it, const void *prefix, size_t plen)
{
	if (!it || (plen && !prefix))
		return -EINVAL;
	if (plen > FLEXDB_MAX_KEY)
		return FLEX_ETOOBIG;
	uint8_t *p, *e;
	if (iter_dup(prefix, plen, &p))
		return -ENOMEM;
	/* The first key above all that start with the prefix: the prefix
	 * less its trailing 0xff bytes, its last byte incremented. */
	size_t elen = plen;
	while (elen && p[elen - 1] == 0xff)
		elen--;
	if (iter_dup(prefix, elen, &e)) {
		free(p);
		return -ENOMEM;
	}
	if (elen)
		e[elen - 1]++;
	free(it->pfx);
	free(it->pfx_end);
	it->pfx = p;
	it->pfxlen = (uint32_t)plen;
	it->pfx_end = e;
	it->pfx_endlen = (uint32_t)elen;
	iter_range(it);
	return 0;
}

int flexdb_iter_seek(struct flexdb_iter *it, const void *key, size_t klen)
{
	if (!it || (klen && !key))
		return -EINVAL;
	if (klen > FLEXDB_MAX_KEY)
		return FLEX_ETOOBIG;
	return iter_fill(it, key, (uint32_t)klen, 1, 0);
}

int flexdb_iter_seek_for_prev(struct flexdb_iter *it, const void *key, size_t klen)
{
	if (!it || (klen && !key))
		return -EINVAL;
	if (klen > FLEXDB_MAX_KEY)
		return FLEX_ETOOBIG;
	return iter_fill(it, key, (uint32_t)klen, 1, 1);
}

/* Inside the library, where a call to the exported function would go
 * through the PLT for every pair. */
static inline int iter_valid(const struct flexdb_iter *it)
{
	return it && it->pos < it->n;
}

int flexdb_iter_valid(const struct flexdb_iter *it)
{
	return iter_valid(it);
}

static int iter_step(struct flexdb_iter *it, int reverse)
{
	if (!iter_valid(it))
		return -EINVAL;
	if (it->reverse == reverse) {
		if (++it->pos < it->n) {
			/* The store's pairs are verified as the iterator comes
			 * to them (fdb_store_scan). */
			if (!fdb_pair_check(&it->pairs[it->pos]))
				return 0;
			iter_reset(it);
			it->exhausted = 1;
			return FLEX_ECORRUPT;
		}
		if (it->exhausted) {
			iter_reset(it);
			return 0;
		}
		/* The bound itself was returned if it exists: go past it. */
		return iter_fill(it, it->bound, it->boundlen, 0, reverse);
	}
	/* Turning around: continue from the current key the other way. */
	struct fdb_pair cur = it->pairs[it->pos];
	return iter_fill(it, cur.key, cur.klen, 0, reverse);
}

int flexdb_iter_next(struct flexdb_iter *it)
{
	return iter_step(it, 0);
}

int flexdb_iter_prev(struct flexdb_iter *it)
{
	return iter_step(it, 1);
}

const void *flexdb_iter_key(const struct flexdb_iter *it, size_t *klen)
{
	if (!iter_valid(it))
		return NULL;
	if (klen)
		*klen = it->pairs[it->pos].klen;
	return it->pairs[it->pos].key;
}

const void *flexdb_iter_value(const struct flexdb_iter *it, size_t *vlen)
{
	if (!iter_valid(it))
		return NULL;
	const struct fdb_pair *p = &it->pairs[it->pos];
	if (vlen)
		*vlen = p->vlen;
	return p->key + p->klen;
}

void flexdb_iter_close(struct flexdb_iter *it)
{
	if (!it)
		return;
	/* Parked as a fresh one: unpositioned, no bounds, no prefix. */
	struct flexdb *db = it->db;
	free(it->lower);
	free(it->upper);
	free(it->pfx);
	free(it->pfx_end);
	it->lower = it->upper = it->pfx = it->pfx_end = NULL;
	it->lo = it->hi = NULL;
	it->lowerlen = it->upperlen = it->pfxlen = it->pfx_endlen = it->lolen = it->hilen = 0;
	iter_reset(it);
	it->reverse = it->exhausted = 0;
	it->grows = 0;
	fdb_ar_trim(&it->ar, FDB_ITER_PARK_KEEP);
	FLEX_HB_BEFORE(&db->parked);
	for (int i = 0; i < FDB_ITER_PARKED; i++) {
		struct flexdb_iter *none = NULL;
		if (atomic_compare_exchange_strong_explicit(&db->parked[i], &none, it,
							    memory_order_release,
							    memory_order_relaxed))
			return;
	}
	iter_free(it);
}
