/*
 * fdb_read.c - reads of the store: point gets (through a whole entry, a
 * thin one, or the interval's bytes), the committer's prefetch of the
 * intervals a chunk changes, warming, and the arena scans return their
 * pairs in (scans are in fdb_scan.c).  Readers hold db->lock shared; what
 * they read is offered to the cache (fdb_cands, fdb_cache.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_brlock.h"
#include "fdb_cache.h"

/* ---- counters ------------------------------------------------------------------- */

void fdb_stat_add(struct fdb_store *s, int which)
{
	unsigned i = flex_thread_slot() % FDB_STAT_STRIPES;
	atomic_fetch_add_explicit(&s->stat[i].v[which], 1, memory_order_relaxed);
}

void fdb_store_cache_counts(struct fdb_store *s, uint64_t out[FDB_ST_N])
{
	for (int k = 0; k < FDB_ST_N; k++) {
		out[k] = 0;
		for (int i = 0; i < FDB_STAT_STRIPES; i++)
			out[k] += atomic_load_explicit(&s->stat[i].v[k], memory_order_relaxed);
	}
}

int fdb_store_lookup_threads(struct fdb_store *s, uint64_t seen[FDB_STAT_STRIPES])
{
	int n = 0;
	for (int i = 0; i < FDB_STAT_STRIPES; i++) {
		uint64_t sum = 0;
		for (int k = 0; k < FDB_ST_N; k++)
			sum += atomic_load_explicit(&s->stat[i].v[k], memory_order_relaxed);
		n += sum != seen[i];
		seen[i] = sum;
	}
	return n;
}

/* ---- reads (shared lock, or exclusive with load) ----------------------------- */

/* Looks key up in an interval's raw bytes without building an entry.
 * Every record is verified, not only a match: the answer "absent" rests
 * on all of them, and a damaged length would misalign the walk, a damaged
 * key end it early or let it pass the key (a sweep of bit flips found both
 * reporting present keys absent).  Hashing a whole interval costs about a
 * microsecond, less than reading it.  Keys must also be strictly
 * increasing from the interval's key on. */
static int raw_search(const uint8_t *p, const uint8_t *end, const struct fdb_ival *iv,
		      const void *key, uint32_t klen, void *buf, size_t cap, size_t *vlen)
{
	const uint8_t *pk = iv->key, *hit = NULL;
	uint32_t pklen = iv->klen, hitlen = 0;
	int first = 1;
	while (p < end) {
		size_t size;
		const uint8_t *k, *v;
		uint32_t kl, vl;
		if (fdb_rec_decode(p, end, &size, &k, &kl, &v, &vl))
			return FLEX_ECORRUPT;
		int order = fdb_keycmp(pk, pklen, k, kl);
		if (first ? order > 0 : order >= 0)
			return FLEX_ECORRUPT;
		if (fdb_keycmp(k, kl, key, klen) == 0) {
			hit = v;
			hitlen = vl;
		}
		pk = k;
		pklen = kl;
		first = 0;
		p += size;
	}
	if (!hit)
		return FLEXDB_NOTFOUND;
	if (cap && buf)
		memcpy(buf, hit, cap < hitlen ? cap : hitlen);
	if (vlen)
		*vlen = hitlen;
	return 0;
}

/* Copies a found value as flexdb_get does. */
static void give_value(const uint8_t *v, uint32_t vl, void *buf, size_t cap, size_t *vlen)
{
	if (cap && buf)
		memcpy(buf, v, cap < vl ? cap : vl);
	if (vlen)
		*vlen = vl;
}

/* Looks key up in a whole entry: fingerprints first, so about one key
 * comparison per lookup. */
static int cent_get(const struct fdb_cent *c, const void *key, uint32_t klen, uint16_t fp,
		    void *buf, size_t cap, size_t *vlen)
{
	for (uint32_t i = 0; i < c->n; i++) {
		if (c->fp[i] != fp)
			continue;
		const uint8_t *k, *v;
		uint32_t kl, vl, sz;
		fdb_cent_pair(c, i, &k, &kl, &v, &vl, &sz);
		if (fdb_keycmp(k, kl, key, klen) != 0)
			continue;
		give_value(v, vl, buf, cap, vlen);
		return 0;
	}
	return FLEXDB_NOTFOUND;
}

/* Looks key up through thin entry c of iv (at off): each pair whose
 * fingerprint matches is read alone from the FlexSpace at off + its
 * offset and checked.  A stale map is read past and renewed. */
static int thin_get(struct fdb_store *s, struct fdb_ival *iv, const struct fdb_cent *c,
		    uint64_t off, const void *key, uint32_t klen, uint16_t fp, void *buf,
		    size_t cap, size_t *vlen, struct fdb_cands *cands)
{
	uint8_t small[512];
	uint32_t at, sz;
	int renewed = 0;
	for (uint32_t i = 0; fdb_thin_next(c, fp, &i, &at, &sz); i++) {
		uint8_t *r = sz <= sizeof(small) ? small : malloc(sz);
		if (!r)
			return -ENOMEM;
		int rc = fdb_thin_read(s, c, at, sz, r);
		if (!rc)
			fdb_stat_add(s, FDB_ST_THIN_LOCATED);
		if (rc == -ESTALE) {
			if (!renewed++ && c->pieces && c->size == iv->size &&
			    cands->n < cands->cap) {
				struct fdb_pmap *m =
				    __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED)
					? fdb_pmap_locate(s, off, c->size)
					: NULL;
				fdb_cand_renew(s, cands, iv, c, m);
				free(m);
			}
			ssize_t n = flexspace_read(s->fs, r, off + at, sz);
			rc = n < 0 ? (int)n : (size_t)n != sz ? FLEX_ECORRUPT : 0;
		}
		size_t size;
		const uint8_t *k, *v;
		uint32_t kl, vl;
		if (!rc && (fdb_rec_decode(r, r + sz, &size, &k, &kl, &v, &vl) || size != sz))
			rc = FLEX_ECORRUPT;
		int cmp = rc ? 1 : fdb_keycmp(k, kl, key, klen);
		if (!rc && !cmp)
			give_value(v, vl, buf, cap, vlen);
		if (r != small)
			free(r);
		if (rc || !cmp)
			return rc;
	}
	return FLEXDB_NOTFOUND;
}

static int store_get(struct fdb_store *s, const struct fdb_ipath *pp, struct fdb_ival *iv,
		     const void *key, uint32_t klen, void *buf, size_t cap, size_t *vlen,
		     struct fdb_cands *cands);

int fdb_store_get(struct fdb_store *s, const void *key, uint32_t klen, void *buf, size_t cap,
		  size_t *vlen, struct fdb_cands *cands)
{
	struct fdb_ipath p;
	if (s->failed)
		return FLEX_EFAILED;
	struct fdb_ival *iv = fdb_index_find(s->index, key, klen, &p);
	if (!iv)
		return FLEXDB_NOTFOUND;
	int rc = store_get(s, &p, iv, key, klen, buf, cap, vlen, cands);
	if (rc == FLEXDB_NOTFOUND) {
		/* Absent here, so maybe in the next interval if its key (from
		 * an anchor not verified at open) is wrong. */
		struct fdb_ival *nx = fdb_index_next(&p);
		if (nx && __atomic_load_n(&nx->unverified, __ATOMIC_RELAXED)) {
			int vrc = fdb_anchor_verify(s, fdb_index_offset(&p));
			if (vrc)
				return vrc;
		}
	}
	return rc;
}

static int store_get(struct fdb_store *s, const struct fdb_ipath *pp, struct fdb_ival *iv,
		     const void *key, uint32_t klen, void *buf, size_t cap, size_t *vlen,
		     struct fdb_cands *cands)
{
	uint16_t fp = fdb_fingerprint(key, klen);
	struct fdb_cent *c = fdb_ival_cent(iv);
	if (c) {
		fdb_cent_touch(c);
		if (c->raw) {
			fdb_stat_add(s, FDB_ST_HITS);
			return cent_get(c, key, klen, fp, buf, cap, vlen);
		}
		fdb_stat_add(s, FDB_ST_THIN_HITS);
		return thin_get(s, iv, c, fdb_index_offset(pp), key, klen, fp, buf, cap, vlen,
				cands);
	}
	/* A miss reads the whole interval and offers it to the cache. */
	fdb_stat_add(s, FDB_ST_MISSES);
	uint64_t off = fdb_index_offset(pp);
	uint8_t *raw;
	struct fdb_pmap *map = NULL;
	int kind =
	    cands->n < cands->cap && fdb_ival_keepable(s, iv->size) ? ADMIT_AUTO : ADMIT_NONE;
	/* Where the bytes lie comes with the read, when thin entries keep it. */
	int maps = kind != ADMIT_NONE && __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
	int rc = fdb_ival_read_raw(s, iv, off, &raw, maps ? &map : NULL);
	if (rc)
		return rc;
	if (kind != ADMIT_NONE) {
		if ((rc = fdb_cent_from_raw(iv, raw, iv->size, map, &c)) != 0)
			return rc;
		rc = cent_get(c, key, klen, fp, buf, cap, vlen);
		fdb_cand_push(cands, iv, c, kind);
	} else {
		rc = raw_search(raw, raw + iv->size, iv, key, klen, buf, cap, vlen);
		free(raw);
	}
	return rc;
}

/* Finds the uncached intervals ops[0..n) change, reads them in one
 * flexspace_read_many (in the data file's order, and past the page cache
 * where it does not hold them: a store larger than memory is read through
 * about whole by each commit, and filling the page cache with it cost more
 * than the reads) and offers each as a whole entry, with room for the
 * records its ops bring (up to FDB_PREFETCH_ROOM): the run then grows it
 * in place instead of copying it to a larger buffer.  The reads of a
 * chunk are begun while the chunk before it is applied (fdb_fetch_begin):
 * its prefetch then takes what they brought. */
#define FDB_PREFETCH_ROOM FDB_SPLIT_BYTES

void fdb_fetch_free(struct fdb_fetch *f)
{
	if (f->reads)
		(void)flexspace_read_many_end(f->reads);
	for (int k = 0; f->raws && k < f->nl; k++)
		free(f->raws[k]);
	free(f->list);
	free(f->offs);
	free(f->room);
	free(f->sizes);
	free(f->raws);
	memset(f, 0, sizeof(*f));
}

/* The uncached intervals ops[0..n) change, at most maxl, after `after`
 * (when not NULL), with their places, sizes and room (their buffers:
 * fetch_bufs). */
static int fetch_plan(struct fdb_store *s, const struct fdb_batch_op *ops, int n, int maxl,
		      const struct fdb_ival *after, struct fdb_fetch *f)
{
	size_t cap = (size_t)(n ? n : 1);
	f->list = malloc(cap * sizeof(*f->list));
	f->offs = malloc(cap * sizeof(*f->offs));
	f->room = malloc(cap * sizeof(*f->room));
	f->sizes = malloc(cap * sizeof(*f->sizes));
	f->raws = calloc(cap, sizeof(*f->raws));
	/* Without memory nothing is prefetched: the apply reads what it needs. */
	if (!f->list || !f->offs || !f->room || !f->sizes || !f->raws)
		return 0;
	int nl = 0;
	size_t bytes = 0;
	const struct fdb_ival *prev = NULL, *next = NULL;
	for (int i = 0; i < n && nl < maxl; i++) {
		uint32_t rs = ops[i].op == FDB_OP_PUT
				  ? (uint32_t)fdb_rec_size(ops[i].klen, ops[i].vlen)
				  : 0;
		/* The ops are in key order: one below the next interval's key
		 * falls into the interval of the op before. */
		if (prev &&
		    (!next || fdb_keycmp(ops[i].key, ops[i].klen, next->key, next->klen) < 0)) {
			if (nl && f->list[nl - 1] == prev)
				f->room[nl - 1] = f->room[nl - 1] + rs < FDB_PREFETCH_ROOM
						      ? f->room[nl - 1] + rs
						      : FDB_PREFETCH_ROOM;
			continue;
		}
		struct fdb_ipath p;
		struct fdb_ival *iv = fdb_index_find(s->index, ops[i].key, ops[i].klen, &p);
		if (!iv || iv == prev)
			continue;
		prev = iv;
		struct fdb_ipath q = p;
		next = fdb_index_next(&q);
		if (after && fdb_keycmp(iv->key, iv->klen, after->key, after->klen) <= 0)
			continue;
		const struct fdb_cent *c = fdb_ival_cent(iv);
		if ((c && c->raw) || !iv->size || !fdb_ival_keepable(s, iv->size))
			continue;
		/* What fits the cache beside what it holds already. */
		if (bytes + iv->size > FDB_KEEP_MAX(s))
			break;
		bytes += iv->size;
		f->list[nl] = iv;
		f->sizes[nl] = iv->size;
		f->room[nl] = rs < FDB_PREFETCH_ROOM ? rs : FDB_PREFETCH_ROOM;
		f->offs[nl++] = fdb_index_offset(&p);
	}
	f->nl = nl;
	/* The room counts too. */
	size_t left = bytes < FDB_KEEP_MAX(s) ? FDB_KEEP_MAX(s) - bytes : 0;
	for (int k = 0; k < nl; k++) {
		f->room[k] = f->room[k] < left ? f->room[k] : (uint32_t)left;
		left -= f->room[k];
	}
	return 0;
}

/* Buffers for f's intervals [0, nl) that have none, and the ranges to
 * read into them in v (their number in *nv). */
static int fetch_bufs(struct fdb_fetch *f, struct flex_iovec *v, int *nv)
{
	*nv = 0;
	for (int k = 0; k < f->nl; k++) {
		if (f->raws[k])
			continue;
		if (!(f->raws[k] = malloc((size_t)f->sizes[k] + f->room[k])))
			return -ENOMEM;
		v[(*nv)++] = (struct flex_iovec){
		    .buf = f->raws[k], .len = f->sizes[k], .off = f->offs[k]};
	}
	return 0;
}

int fdb_fetch_begin(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		    const void *after_key, uint32_t after_klen, struct fdb_fetch *f)
{
	memset(f, 0, sizeof(*f));
	/* The chunk before may change the interval of its last key and
	 * merge the next one into it: neither is read ahead. */
	struct fdb_ipath p;
	const struct fdb_ival *after = fdb_index_find(s->index, after_key, after_klen, &p);
	const struct fdb_ival *nx = after ? fdb_index_next(&p) : NULL;
	if (nx)
		after = nx;
	int rc = s->failed ? FLEX_EFAILED : fetch_plan(s, ops, n, n, after, f);
	struct flex_iovec *v = malloc((size_t)(f->nl ? f->nl : 1) * sizeof(*v));
	int nv = 0;
	if (!rc && !v)
		rc = -ENOMEM;
	if (!rc)
		rc = fetch_bufs(f, v, &nv);
	f->size = flexspace_size(s->fs);
	if (!rc && nv)
		rc = flexspace_read_many_begin(s->fs, v, nv, &f->reads);
	free(v);
	if (rc)
		fdb_fetch_free(f);
	return rc;
}

void fdb_fetch_wait(struct fdb_fetch *f)
{
	if (f->reads) {
		f->rc = flexspace_read_many_end(f->reads);
		f->reads = NULL;
	}
}

/* Takes from `ahead` (ended, or none) the buffers of f's intervals it read:
 * the same interval, of the same size, at the place the changes since
 * moved it to (all of them before it: size changed by delta). */
static void fetch_take(struct fdb_store *s, struct fdb_fetch *f, struct fdb_fetch *ahead)
{
	if (!ahead || !ahead->nl || ahead->reads)
		return;
	if (ahead->rc) {
		fdb_stat_add(s, FDB_ST_FETCH_STALE);
		return;
	}
	uint64_t delta = flexspace_size(s->fs) - ahead->size;
	for (int k = 0, j = 0; k < f->nl; k++) {
		while (j < ahead->nl && ahead->offs[j] + delta < f->offs[k])
			j++;
		if (j == ahead->nl)
			break;
		if (ahead->offs[j] + delta != f->offs[k] || ahead->list[j] != f->list[k] ||
		    ahead->sizes[j] != f->sizes[k] || !ahead->raws[j])
			continue;
		f->raws[k] = ahead->raws[j];
		ahead->raws[j] = NULL;
		fdb_stat_add(s, FDB_ST_FETCH_AHEAD);
		if (ahead->room[j] < f->room[k])
			f->room[k] = ahead->room[j];
	}
}

int fdb_store_prefetch(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		       struct fdb_cands *cands, struct fdb_fetch *ahead)
{
	struct fdb_fetch f = {0};
	int rc = s->failed ? FLEX_EFAILED : fetch_plan(s, ops, n, cands->cap - cands->n, NULL, &f);
	if (!rc)
		fetch_take(s, &f, ahead);
	if (ahead)
		fdb_fetch_free(ahead);
	struct flex_iovec *v = rc ? NULL : malloc((size_t)(f.nl ? f.nl : 1) * sizeof(*v));
	int nv = 0;
	if (!rc && !v)
		rc = -ENOMEM;
	if (!rc)
		rc = fetch_bufs(&f, v, &nv);
	if (!rc && nv)
		rc = flexspace_read_many(s->fs, v, nv);
	free(v);
	for (int k = 0; k < f.nl && !rc; k++) {
		struct fdb_cent *c;
		uint32_t size = f.sizes[k];
		rc = fdb_cent_for_change(f.list[k], f.raws[k], size, size + f.room[k], &c);
		f.raws[k] = NULL;
		if (!rc)
			fdb_cand_push(cands, f.list[k], c, ADMIT_WHOLE);
	}
	fdb_fetch_free(&f);
	return rc;
}

/* The runs of a chunk come in key order, most often one per interval:
 * while this run is applied, the next intervals' memory is fetched in
 * three steps, each for what the step before brought in: the interval
 * three ahead, the entry of the one two ahead, the records and offsets of
 * the next one (nx, at q). */
void fdb_run_prefetch(const struct fdb_ipath *q, const struct fdb_ival *nx)
{
	if (!nx)
		return;
	const struct fdb_ival *n2 = fdb_index_peek(q, 1), *n3 = fdb_index_peek(q, 2);
	if (n3)
		__builtin_prefetch(n3);
	const struct fdb_cent *c2 = n2 ? fdb_ival_cent(n2) : NULL;
	if (c2)
		__builtin_prefetch(c2);
	const struct fdb_cent *c1 = fdb_ival_cent(nx);
	if (c1 && c1->raw) {
		__builtin_prefetch(c1->raw);
		__builtin_prefetch(c1->off);
	}
}

/* Warming: after an open the cache is empty, and every interval a lookup
 * reaches first is read whole and decoded while the client waits.  The
 * committer, when it has nothing to commit or tidy, reads the intervals
 * in key order instead, a few dozen at a time, and offers them as a miss
 * would, whole while the cache has room and thin after (making room as a
 * miss does: CLOCK makes whole entries thin), until every interval is
 * cached or the thin entries' share of the cache is full, before one
 * would have to be dropped.  Thin entries (an open from INDEX brings them)
 * are read again and made whole while the cache has room for that.
 * It reads only intervals whose bytes are in the page cache.  A failure
 * only ends the pass; the lookup that meets the same failure reports it. */
void fdb_store_warm(struct fdb_store *s)
{
	int more = 0;
	if (s->failed)
		atomic_store(&s->warm_done, 1);
	if (atomic_load(&s->warm_done))
		return;
	size_t thin_room = fdb_cache_thin_room(s);
	struct fdb_cands cands;
	fdb_cands_init(s, &cands, NULL, 0);
	struct fdb_ipath p;
	struct fdb_ival *iv = s->warm_key ? fdb_index_find(s->index, s->warm_key, s->warm_klen, &p)
					  : fdb_index_first(s->index, &p);
	int maps = __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
	size_t bytes = 0, thin = 0;
	int rc = 0, k = 0;
	for (; iv && k < FDB_SCAN_READ_IVALS && bytes < FDB_SCAN_READ_BYTES;
	     iv = fdb_index_next(&p), k++) {
		/* A thin entry (from INDEX, fdb_snap.c) is made whole while
		 * the cache has room for whole entries; an interval without
		 * one is cached while the thin share has room. */
		const struct fdb_cent *old = fdb_ival_cent(iv);
		if (!old && thin >= thin_room)
			break;
		if (!iv->size || !fdb_ival_keepable(s, iv->size) ||
		    (old && (old->raw || fdb_load_bytes(&s->cache_bytes) + 2 * (size_t)iv->size >
						 fdb_ring_limit(s))))
			continue;
		/* Only what the page cache holds: a store larger than memory
		 * is read as lookups ask, not pulled in whole. */
		uint64_t off = fdb_index_offset(&p);
		if (flexspace_resident(s->fs, off, iv->size) != 1)
			continue;
		uint8_t *raw;
		struct fdb_pmap *map = NULL;
		struct fdb_cent *c;
		rc = fdb_ival_read_raw(s, iv, off, &raw, maps ? &map : NULL);
		if (!rc)
			rc = fdb_cent_from_raw(iv, raw, iv->size, map, &c);
		if (rc)
			break;
		if (!old)
			thin += fdb_cent_thin_bytes(c, c->map ? c->map->n : 0);
		fdb_cand_push(&cands, iv, c, ADMIT_ROOM);
		bytes += iv->size;
	}
	if (!rc && iv && k > 0) {
		uint8_t *key = realloc(s->warm_key, iv->klen ? iv->klen : 1);
		if (key) {
			memcpy(key, iv->key, iv->klen);
			s->warm_key = key;
			s->warm_klen = iv->klen;
			more = 1;
		}
	}
	if (!more) {
		atomic_store(&s->warm_done, 1);
		free(s->warm_key);
		s->warm_key = NULL;
	}
	fdb_store_admit(s, &cands, 1);
}

#define FDB_AR_BLOCK (64u << 10)
/* Blocks an emptied arena keeps, at most: what a chunk of large pairs
 * reads (two or three runs of up to FDB_SCAN_READ_BYTES of intervals). */
#define FDB_AR_KEEP (512u << 10)
struct fdb_ar_blk {
	struct fdb_ar_blk *prev;
	size_t used, cap;
	_Alignas(16) uint8_t data[];
};

void *fdb_ar_alloc(struct fdb_ar *a, size_t n)
{
	struct fdb_ar_blk *b = a->blk;
	if (!b || b->cap - b->used < n) {
		/* The smallest spare block that holds n (a scan's small copies
		 * leave the large blocks to its runs), else a new one. */
		struct fdb_ar_blk **sp = NULL, *nb;
		for (struct fdb_ar_blk **q = &a->spare; *q; q = &(*q)->prev)
			if ((*q)->cap >= n && (!sp || (*q)->cap < (*sp)->cap))
				sp = q;
		if (sp) {
			nb = *sp;
			*sp = nb->prev;
		} else {
			/* Large requests (a scan's runs of intervals) take
			 * whole blocks' worth, so that another chunk's runs,
			 * of other sizes, often fit the blocks kept. */
			size_t cap = (n + FDB_AR_BLOCK - 1) / FDB_AR_BLOCK * FDB_AR_BLOCK;
			if (!(nb = malloc(sizeof(*nb) + cap)))
				return NULL;
			nb->cap = cap;
			a->mallocs++;
		}
		nb->prev = b;
		nb->used = 0;
		a->blk = b = nb;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

static void ar_blocks_free(struct fdb_ar_blk *b)
{
	while (b) {
		struct fdb_ar_blk *p = b->prev;
		free(b);
		b = p;
	}
}

/* Empties the arena but keeps up to `keep` bytes of its blocks, so that a
 * reader refilling chunk after chunk, even of large pairs, does not ask
 * the allocator (and the kernel) for fresh pages each time. */
void fdb_ar_trim(struct fdb_ar *a, size_t keep)
{
	struct fdb_ar_blk *all = a->spare, *b = a->blk;
	while (b) {
		struct fdb_ar_blk *p = b->prev;
		b->prev = all;
		all = b;
		b = p;
	}
	a->blk = a->spare = NULL;
	size_t kept = 0;
	while (all) {
		struct fdb_ar_blk *p = all->prev;
		if (kept + all->cap <= keep) {
			kept += all->cap;
			all->prev = a->spare;
			a->spare = all;
		} else {
			free(all);
		}
		all = p;
	}
}

void fdb_ar_reset(struct fdb_ar *a)
{
	fdb_ar_trim(a, FDB_AR_KEEP);
}

void fdb_ar_free(struct fdb_ar *a)
{
	ar_blocks_free(a->blk);
	ar_blocks_free(a->spare);
	a->blk = a->spare = NULL;
}
