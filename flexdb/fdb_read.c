/*
 * fdb_read.c - reads of the store: point gets (through a whole entry, a
 * thin one, or the interval's bytes), the committer's prefetch of the
 * intervals a chunk changes, and scans, which read runs of neighbouring
 * uncached intervals at once.  Readers hold db->lock shared; what they
 * read is offered to the cache (fdb_cands, fdb_cache.c).
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

/* Sets an entry's CLOCK bit, which a get or a scan of it earns (written
 * only when clear: readers on two CPUs do not trade the line). */
static void cent_touch(struct fdb_cent *c)
{
	if (!atomic_load_explicit(&c->ref, memory_order_relaxed))
		atomic_store_explicit(&c->ref, 1, memory_order_relaxed);
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
		cent_touch(c);
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

/* Finds the uncached intervals ops[0..n) change, reads them in spans of
 * neighbours and offers each as a whole entry, with room for the records
 * its ops bring (up to FDB_PREFETCH_ROOM): the run then grows it in
 * place instead of copying it to a larger buffer. */
#define FDB_PREFETCH_GAP 4096
#define FDB_PREFETCH_ROOM FDB_SPLIT_BYTES
int fdb_store_prefetch(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		       struct fdb_cands *cands)
{
	if (s->failed)
		return FLEX_EFAILED;
	/* Without memory nothing is prefetched: the apply reads what it needs. */
	struct fdb_ival **list = malloc((size_t)(n ? n : 1) * sizeof(*list));
	uint64_t *offs = malloc((size_t)(n ? n : 1) * sizeof(*offs));
	uint32_t *room = malloc((size_t)(n ? n : 1) * sizeof(*room));
	int nl = 0, rc = 0;
	size_t bytes = 0;
	const struct fdb_ival *prev = NULL, *next = NULL;
	for (int i = 0; list && offs && room && i < n && nl < cands->cap - cands->n; i++) {
		uint32_t rs = ops[i].op == FDB_OP_PUT
				  ? (uint32_t)fdb_rec_size(ops[i].klen, ops[i].vlen)
				  : 0;
		/* The ops are in key order: one below the next interval's key
		 * falls into the interval of the op before. */
		if (prev &&
		    (!next || fdb_keycmp(ops[i].key, ops[i].klen, next->key, next->klen) < 0)) {
			if (nl && list[nl - 1] == prev)
				room[nl - 1] = room[nl - 1] + rs < FDB_PREFETCH_ROOM
						   ? room[nl - 1] + rs
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
		const struct fdb_cent *c = fdb_ival_cent(iv);
		if ((c && c->raw) || !iv->size || !fdb_ival_keepable(s, iv->size))
			continue;
		/* What fits the cache beside what it holds already. */
		if (bytes + iv->size > FDB_KEEP_MAX(s))
			break;
		bytes += iv->size;
		list[nl] = iv;
		room[nl] = rs < FDB_PREFETCH_ROOM ? rs : FDB_PREFETCH_ROOM;
		offs[nl++] = fdb_index_offset(&p);
	}
	/* The room counts too. */
	size_t left = bytes < FDB_KEEP_MAX(s) ? FDB_KEEP_MAX(s) - bytes : 0;
	for (int k = 0; k < nl; k++) {
		room[k] = room[k] < left ? room[k] : (uint32_t)left;
		left -= room[k];
	}
	for (int a = 0; a < nl && !rc;) {
		int b = a + 1;
		uint64_t lo = offs[a], hi = offs[a] + list[a]->size;
		while (b < nl && offs[b] >= hi && offs[b] - hi <= FDB_PREFETCH_GAP &&
		       offs[b] + list[b]->size - lo <= FDB_SCAN_READ_BYTES) {
			hi = offs[b] + list[b]->size;
			b++;
		}
		uint8_t *buf = malloc(hi - lo);
		ssize_t got = buf ? flexspace_read(s->fs, buf, lo, hi - lo) : -ENOMEM;
		rc = got < 0 ? (int)got : (uint64_t)got != hi - lo ? FLEX_ECORRUPT : 0;
		for (int k = a; k < b && !rc; k++) {
			uint32_t size = list[k]->size;
			uint8_t *raw = malloc((size_t)size + room[k]);
			struct fdb_cent *c;
			if (!raw) {
				rc = -ENOMEM;
				break;
			}
			memcpy(raw, buf + (offs[k] - lo), size);
			if ((rc = fdb_cent_for_change(list[k], raw, size, size + room[k], &c)) == 0)
				fdb_cand_push(cands, list[k], c, ADMIT_WHOLE);
		}
		free(buf);
		a = b;
	}
	free(list);
	free(offs);
	free(room);
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

/* A pair located in raw interval bytes: its record, key and value. */
struct pair_ref {
	const uint8_t *rec, *key, *val;
	uint32_t klen, vlen;
};

/* Room for an interval's pair refs, reused from interval to interval: on
 * the stack for an interval of up to FDB_REFS_STACK pairs (heap: v is an
 * allocation of its own). */
#define FDB_REFS_STACK 64
struct ref_vec {
	struct pair_ref *v;
	uint32_t n, cap;
	int heap;
};

/* Parses an interval's raw bytes into refs (all of them with `whole`, else
 * the records from one on), checking the pair count of a whole one when
 * known, and with `order` that keys increase from the interval's key on
 * and stay below the next interval's key (next; NULL for the last
 * interval).  With `verify` every checksum is checked too; without, only
 * the framing (and the order) are known, and fdb_store_scan checks the
 * pairs it uses.  A search among the pairs needs the order: a damaged key
 * then still lies between its neighbours, inside the interval.  Pairs
 * taken one after the other from the first need only the framing: each
 * is verified before it is used. */
static int raw_pairs(const uint8_t *p, const uint8_t *end, const struct fdb_ival *iv,
		     const struct fdb_ival *next, int verify, int order, int whole,
		     struct ref_vec *r)
{
	r->n = 0;
	while (p < end) {
		size_t size;
		struct pair_ref x;
		x.rec = p;
		int bad = fdb_rec_parse(p, end, &size, &x.key, &x.klen, &x.val, &x.vlen);
		if (!bad && order) {
			int c = r->n ? fdb_keycmp(r->v[r->n - 1].key, r->v[r->n - 1].klen, x.key,
						  x.klen)
				     : fdb_keycmp(iv->key, iv->klen, x.key, x.klen);
			bad = r->n ? c >= 0 : c > 0;
		}
		if (!bad && verify)
			bad = fdb_rec_check(p, size);
		if (bad)
			return FLEX_ECORRUPT;
		if (r->n == r->cap) {
			uint32_t cap = r->cap ? 2 * r->cap : 64;
			struct pair_ref *nv = r->heap ? realloc(r->v, cap * sizeof(*nv))
						      : malloc(cap * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			if (!r->heap && r->n)
				memcpy(nv, r->v, r->n * sizeof(*nv));
			r->v = nv;
			r->cap = cap;
			r->heap = 1;
		}
		r->v[r->n++] = x;
		p += size;
	}
	uint32_t count = __atomic_load_n(&iv->count, __ATOMIC_RELAXED);
	if (whole && count != FDB_COUNT_UNKNOWN && count != r->n)
		return FLEX_ECORRUPT;
	if (order && next && r->n &&
	    fdb_keycmp(r->v[r->n - 1].key, r->v[r->n - 1].klen, next->key, next->klen) >= 0)
		return FLEX_ECORRUPT;
	return 0;
}

/* The checksum of a pair parsed by raw_pairs without `verify`. */
static int ref_check(const struct pair_ref *x)
{
	return fdb_rec_check(x->rec, (size_t)(x->val + x->vlen - x->rec) + 4);
}

/* A whole entry for iv from its raw bytes already parsed (and verified)
 * into refs: the bytes are copied, nothing is decoded again. */
static int cent_from_refs(const uint8_t *raw, uint32_t size, const struct ref_vec *r,
			  struct fdb_cent **out)
{
	*out = NULL;
	size_t arrays = (size_t)r->n * (sizeof(uint32_t) + sizeof(uint16_t));
	struct fdb_cent *c = calloc(1, sizeof(*c) + arrays);
	uint8_t *copy = malloc(size ? size : 1);
	if (!c || !copy) {
		free(c);
		free(copy);
		return -ENOMEM;
	}
	c->slot = UINT32_MAX;
	FLEX_ATOMIC_OBJ(&c->ref, sizeof(c->ref));
	memcpy(copy, raw, size);
	c->raw = copy;
	c->size = c->rawcap = size;
	c->off = (uint32_t *)(c + 1);
	c->fp = (uint16_t *)(c->off + r->n);
	c->n = c->cap = r->n;
	c->packed = 1;
	for (uint32_t i = 0; i < r->n; i++) {
		c->off[i] = (uint32_t)(r->v[i].rec - raw);
		c->fp[i] = fdb_fingerprint(r->v[i].key, r->v[i].klen);
	}
	c->bytes = fdb_cent_bytes(c);
	*out = c;
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

/* Where a scan starts in its first interval, given the position of the
 * first pair >= from (found: equal to it). */
static int64_t scan_start(uint32_t lo, int found, int inclusive, int reverse)
{
	if (!reverse)
		return found && !inclusive ? (int64_t)lo + 1 : lo;
	return found && inclusive ? (int64_t)lo : (int64_t)lo - 1;
}

/* A run of neighbouring uncached intervals read at once: logical bytes
 * [off, off + len) of the FlexSpace, in the arena of the scan's pairs. */
struct scan_run {
	uint8_t *buf;
	uint64_t off, len;
};

/* Reads the k intervals ivs[] (in the scan's order) into buf through
 * their thin entries' maps, without asking the FlexTree: 0; 1 when one
 * has no map (or a whole entry, or none); -ESTALE when the bytes moved
 * since, or an error.  On anything but 0 the caller reads through the
 * FlexTree (which reports an error that persists). */
static int scan_read_mapped(struct fdb_store *s, const struct fdb_ival *const *ivs, int k,
			    int reverse, uint32_t skip, uint8_t *buf)
{
	struct flextree_mapping v[FLEXSPACE_LOCATE_MAX];
	size_t nv = 0;
	uint64_t stamp = UINT64_MAX;
	for (int j = 0; j < k; j++) {
		const struct fdb_ival *x = ivs[reverse ? k - 1 - j : j];
		const struct fdb_cent *c = x->size ? fdb_ival_cent(x) : NULL;
		if (x->size && (!c || c->size != x->size ||
				fdb_thin_pieces(c, v, FLEXSPACE_LOCATE_MAX, &nv, &stamp)))
			return 1;
	}
	/* Not the first `skip` bytes (forwards only). */
	size_t a = 0;
	while (skip && a < nv && v[a].len <= skip)
		skip -= (uint32_t)v[a++].len;
	if (skip && a < nv) {
		if (v[a].poff != FLEXTREE_HOLE)
			v[a].poff += skip;
		v[a].loff += skip;
		v[a].len -= skip;
	}
	return flexspace_read_located(s->fs, buf, v + a, nv - a, stamp);
}

/* After scan_read_mapped was refused and the run was read through the
 * FlexTree (its pieces in loc[0..nloc), stamped `stamp`): renews the thin
 * entries of ivs[] (the first at lo) that have maps (fdb_cand_renew), in
 * at most half of the candidates' room (the rest is for the whole
 * entries the scan offers).  Their maps are cut out of that report, or
 * located one interval at a time when the run had more pieces than a
 * report holds.  Not only the entries whose own map is stale: the read
 * checks every piece against the oldest stamp of the run, so an entry
 * with an old stamp makes pieces written since into a reused segment
 * look moved. */
static void scan_renew(struct fdb_store *s, const struct fdb_ival *const *ivs, int k, int reverse,
		       uint64_t lo, uint32_t skip, const struct flextree_mapping *loc, size_t nloc,
		       uint64_t stamp, struct fdb_cands *cands)
{
	int maps = __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
	for (int j = 0; j < k && cands->n < cands->cap / 2; j++) {
		const struct fdb_ival *x = ivs[reverse ? k - 1 - j : j];
		const struct fdb_cent *c = x->size ? fdb_ival_cent(x) : NULL;
		if (c && c->size == x->size && c->pieces) {
			/* The report leaves out the first `skip` bytes of the
			 * first: located alone. */
			int cut = nloc && !(j == 0 && skip);
			struct fdb_pmap *m = !maps  ? NULL
					     : cut ? fdb_pmap_new(loc, nloc, stamp, lo, x->size)
						   : fdb_pmap_locate(s, lo, x->size);
			if (m || !maps)
				fdb_cand_renew(s, cands, (struct fdb_ival *)(uintptr_t)x, c, m);
			free(m);
		}
		lo += x->size;
	}
}

/* Reads the uncached intervals from p's on (backwards with reverse) that
 * the scan will probably need (`want` more pairs) into r.  A seek starts
 * in the middle of its first interval (`mid`): half of its pairs count,
 * so that the read holds what the chunk needs, instead of falling a few
 * pairs short and costing another read (and its faults, one after the
 * other) for one more interval.  Forwards, a seek that knows where its
 * first pair lies reads the first interval from there (`skip` bytes in,
 * `left` pairs on; -1: not known). */
static int scan_read_run(struct fdb_store *s, const struct fdb_ipath *p, const struct fdb_ival *iv,
			 int reverse, int want, int mid, uint32_t skip, int64_t left,
			 const void *lim, uint32_t limlen, struct scan_run *r, struct fdb_ar *ar,
			 struct fdb_cands *cands)
{
	struct fdb_ipath q = *p;
	uint64_t lo = fdb_index_offset(p) + skip, hi = lo - skip + iv->size;
	uint64_t pairs = 0;
	const struct fdb_ival *x = iv, *ivs[FDB_SCAN_READ_IVALS] = {iv};
	int k = 1;
	for (; k < FDB_SCAN_READ_IVALS; k++) {
		/* After recovery the pair count is unknown: guess from the size. */
		uint32_t count = __atomic_load_n(&x->count, __ATOMIC_RELAXED);
		count = count != FDB_COUNT_UNKNOWN ? count : x->size / 128 + 1;
		pairs += x != iv ? count : left >= 0 ? (uint64_t)left : mid ? count / 2 : count;
		if (pairs > (uint64_t)want)
			break;
		/* Nor past the limit: the keys before an interval are below
		 * its key, and its own are not. */
		if (lim && reverse && fdb_keycmp(x->key, x->klen, lim, limlen) <= 0)
			break;
		x = reverse ? fdb_index_prev(&q) : fdb_index_next(&q);
		/* Cached intervals in between are read too: cheaper than
		 * splitting the read. */
		if (!x || hi - lo + x->size > FDB_SCAN_READ_BYTES)
			break;
		if (lim && !reverse && fdb_keycmp(x->key, x->klen, lim, limlen) >= 0)
			break;
		if (reverse)
			lo = fdb_index_offset(&q);
		else
			hi += x->size;
		ivs[k] = x;
	}
	/* In the chunk's arena: the pairs returned point into it. */
	r->buf = fdb_ar_alloc(ar, hi > lo ? hi - lo : 1);
	r->off = lo;
	r->len = 0;
	if (!r->buf)
		return -ENOMEM;
	int mapped = hi > lo ? scan_read_mapped(s, ivs, k, reverse, skip, r->buf) : 1;
	if (!mapped) {
		fdb_stat_add(s, FDB_ST_SCAN_LOCATED);
		r->len = hi - lo;
		return 0;
	}
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	size_t nloc = 0;
	uint64_t stamp = 0;
	ssize_t n = 0;
	if (mapped == -ESTALE) {
		fdb_stat_add(s, FDB_ST_SCAN_STALE);
		n = flexspace_read_locate(s->fs, r->buf, lo, hi - lo, loc, &nloc, &stamp);
	} else if (hi > lo) {
		n = flexspace_read(s->fs, r->buf, lo, hi - lo);
	}
	if (n < 0)
		return (int)n;
	if ((uint64_t)n != hi - lo)
		return FLEX_ECORRUPT;
	if (mapped == -ESTALE)
		scan_renew(s, ivs, k, reverse, lo - skip, skip, loc, nloc, stamp, cands);
	r->len = hi - lo;
	return 0;
}

/* The interval after p's, or NULL. */
static const struct fdb_ival *ival_after(const struct fdb_ipath *p)
{
	const struct fdb_ival *nx = fdb_index_peek(p, 1);
	if (!nx) {
		/* p's is the last of its leaf. */
		struct fdb_ipath q = *p;
		nx = fdb_index_next(&q);
	}
	return nx;
}

/* Whether key lies past a scan's limit: at or above it forwards, below it
 * in reverse. */
static int scan_beyond(const void *key, uint32_t klen, const void *lim, uint32_t limlen,
		       int reverse)
{
	if (!lim)
		return 0;
	int c = fdb_keycmp(key, klen, lim, limlen);
	return reverse ? c < 0 : c >= 0;
}

/* Pairs of a cached entry from position i on (down with reverse) into
 * out, until max, the limit or the entry's end: their records are copied
 * into the arena as one span (a pair's value follows its key in its
 * record), and the pairs point into the copy. */
static int scan_copy_cent(const struct fdb_cent *c, int64_t i, int reverse, const void *lim,
			  uint32_t limlen, struct fdb_pair *out, int max, int *n, struct fdb_ar *ar,
			  int *past)
{
	int first = *n;
	int64_t step = reverse ? -1 : 1, j = i;
	for (; j >= 0 && j < c->n && *n < max; j += step) {
		const uint8_t *k, *v;
		uint32_t kl, vl, sz;
		fdb_cent_pair(c, (uint32_t)j, &k, &kl, &v, &vl, &sz);
		if ((*past = scan_beyond(k, kl, lim, limlen, reverse)) != 0)
			break;
		struct fdb_pair *o = &out[(*n)++];
		o->key = (uint8_t *)k;
		o->klen = kl;
		o->vlen = vl;
		o->tomb = 0;
		o->unchecked = 0;
	}
	if (*n == first)
		return 0;
	/* Records [lo, hi] of the entry were taken. */
	uint32_t lo = (uint32_t)(reverse ? j + 1 : i), hi = (uint32_t)(reverse ? i : j - 1);
	uint32_t a = c->off[lo], b = hi + 1 < c->n ? c->off[hi + 1] : c->size;
	uint8_t *copy = fdb_ar_alloc(ar, b - a);
	if (!copy) {
		*n = first;
		return -ENOMEM;
	}
	memcpy(copy, c->raw + a, b - a);
	for (int q = first; q < *n; q++)
		out[q].key = copy + (out[q].key - (c->raw + a));
	return 0;
}

int fdb_store_scan(struct fdb_store *s, const void *from, uint32_t flen, int inclusive, int reverse,
		   const void *lim, uint32_t limlen, struct fdb_pair *out, int max, int *n,
		   struct fdb_ar *ar, struct fdb_cands *cands)
{
	*n = 0;
	if (s->failed)
		return FLEX_EFAILED;
	fdb_stat_add(s, FDB_ST_SCANS);
	struct fdb_ipath p;
	struct fdb_ival *iv;
	if (flen)
		iv = fdb_index_find(s->index, from, flen, &p);
	else
		iv = reverse ? fdb_index_last(s->index, &p) : fdb_index_first(s->index, &p);
	struct scan_run run = {0};
	struct pair_ref refbuf[FDB_REFS_STACK];
	struct ref_vec refs = {.v = refbuf, .cap = FDB_REFS_STACK};
	int first = 1, rc = 0, past = 0, nojump = 0;
	while (iv && *n < max && !rc && !past) {
		/* An interval's keys are at or above its key. */
		if (lim && !reverse && fdb_keycmp(iv->key, iv->klen, lim, limlen) >= 0)
			break;
		struct fdb_cent *c = fdb_ival_cent(iv);
		/* Later intervals' entries are somewhere in memory, each a
		 * chain of pointers (interval, entry, bytes): start fetching
		 * one link of each of the next three while this one is copied,
		 * so that the bytes of the next are at hand. */
		int dir = reverse ? -1 : 1;
		const struct fdb_ival *n1 = fdb_index_peek(&p, dir);
		const struct fdb_ival *n2 = n1 ? fdb_index_peek(&p, 2 * dir) : NULL;
		const struct fdb_ival *n3 = n2 ? fdb_index_peek(&p, 3 * dir) : NULL;
		if (n3)
			__builtin_prefetch(n3);
		const struct fdb_cent *c2 = n2 ? fdb_ival_cent(n2) : NULL;
		if (c2)
			__builtin_prefetch(c2);
		const struct fdb_cent *c1 = n1 ? fdb_ival_cent(n1) : NULL;
		if (c1 && c1->raw) {
			for (uint32_t o = 0; o < c1->size && o < 1024; o += 64)
				__builtin_prefetch(c1->raw + o);
		}
		if (c && c->raw) {
			/* Copied from the entry (which may change once the
			 * lock is dropped): a binary search in the first one,
			 * then the pairs' records in one copy. */
			cent_touch(c);
			int64_t i = reverse ? (int64_t)c->n - 1 : 0;
			if (first && flen) {
				int found;
				uint32_t lo = fdb_cent_lower(c, from, flen, &found);
				i = scan_start(lo, found, inclusive, reverse);
			}
			first = 0;
			if ((rc = scan_copy_cent(c, i, reverse, lim, limlen, out, max, n, ar,
						 &past)) != 0)
				break;
			if (lim && reverse && fdb_keycmp(iv->key, iv->klen, lim, limlen) <= 0)
				break; /* the keys before it are below the limit */
			iv = reverse ? fdb_index_prev(&p) : fdb_index_next(&p);
			continue;
		}
		/* Others are parsed in the run just read into the chunk's
		 * arena and returned in place, without building an entry
		 * unless the cache has room. */
		uint64_t off = fdb_index_offset(&p);
		const uint8_t *raw = (const uint8_t *)""; /* an empty interval */
		/* Offered to the cache while it has room (then every pair is
		 * verified): once it is full, copying intervals a scan passes
		 * costs more than the few later hits repay, on uniform seeks
		 * and on YCSB E's zipfian ones alike (docs/BENCHMARKS.md). */
		int admit = cands->n < cands->cap &&
			    fdb_load_bytes(&s->cache_bytes) + 2 * (size_t)iv->size <= fdb_ring_limit(s);
		/* A forward seek that offers nothing to the cache jumps to the
		 * pair of its key's fingerprint in the thin entry (the ci-th,
		 * at byte `at`): only it and the pairs after it are read. */
		uint32_t ci = 0, at = 0, sz;
		int jump = first && flen && !reverse && !admit && !nojump && c && c->thin &&
			   c->size == iv->size &&
			   fdb_thin_next(c, fdb_fingerprint(from, flen), &ci, &at, &sz);
		if (iv->size && (off < run.off || off + iv->size > run.off + run.len))
			rc = scan_read_run(s, &p, iv, reverse, max - *n, first && flen,
					   jump ? at : 0, jump ? (int64_t)(c->n - ci) : -1, lim,
					   limlen, &run, ar, cands);
		uint32_t skip = jump ? at : 0;
		if (iv->size && !rc)
			raw = run.buf + (off + skip - run.off);
		/* The order of all the pairs is checked where they are
		 * searched, and where an entry is built of them; elsewhere,
		 * that of those the scan takes (below). */
		int order = admit || (first && flen && !jump);
		const struct fdb_ival *nx = ival_after(&p);
		if (!rc)
			rc = raw_pairs(raw, raw + iv->size - skip, iv, nx, admit, order, !jump, &refs);
		if (rc)
			break;
		if (jump && (!refs.n || fdb_keycmp(refs.v[0].key, refs.v[0].klen, from, flen))) {
			/* Another key of the same fingerprint: searched whole. */
			fdb_stat_add(s, FDB_ST_SEEK_JUMP_MISSES);
			nojump = 1;
			run.len = 0;
			continue;
		}
		if (admit) {
			struct fdb_cent *nc;
			if ((rc = cent_from_refs(raw, iv->size, &refs, &nc)) != 0)
				break;
			fdb_cand_push(cands, iv, nc, ADMIT_WHOLE);
		}
		/* Otherwise only the pairs used are verified: the two around
		 * the start, on whose keys the binary search decided, and the
		 * one whose key stops the scan, here; those returned when the
		 * iterator comes to them or compares their keys with another
		 * source's (unchecked).  A damaged pair elsewhere cannot move
		 * them: a damaged length misframes what follows it up to a
		 * verified pair, and a damaged key stays between its
		 * neighbours where the order was checked (raw_pairs). */
		int64_t i = reverse ? (int64_t)refs.n - 1 : 0, vlo = 1, vhi = 0;
		if (jump) {
			/* The pair of the key itself decides the start. */
			if ((rc = ref_check(&refs.v[0])) != 0)
				break;
			fdb_stat_add(s, FDB_ST_SEEK_JUMPS);
			i = inclusive ? 0 : 1;
			vlo = vhi = 0;
		} else if (first && flen) {
			int found;
			uint32_t lo = refs_lower(refs.v, refs.n, from, flen, &found);
			i = scan_start(lo, found, inclusive, reverse);
			vlo = lo ? (int64_t)lo - 1 : 0;
			vhi = lo < refs.n ? (int64_t)lo : (int64_t)refs.n - 1;
			for (int64_t j = vlo; !admit && !rc && j <= vhi; j++)
				rc = ref_check(&refs.v[j]);
			if (rc)
				break;
		}
		first = 0;
		/* Where the order of all was not checked, the pairs taken
		 * (the one that stops the scan too) must still be in order,
		 * within the interval's keys: intact records read from the
		 * wrong place fail here, damaged ones their checksums. */
		int64_t i0 = i, step = reverse ? -1 : 1;
		for (; i >= 0 && i < refs.n && *n < max; i += step) {
			int unchecked = !admit && (i < vlo || i > vhi);
			/* (After a jump past the key, the first is after the
			 * key's pair too.) */
			if (!order && (i != i0 || (jump && i > 0)) &&
			    fdb_keycmp(refs.v[reverse ? i : i - 1].key, refs.v[reverse ? i : i - 1].klen,
				       refs.v[reverse ? i + 1 : i].key,
				       refs.v[reverse ? i + 1 : i].klen) >= 0) {
				rc = FLEX_ECORRUPT;
				break;
			}
			if ((past = scan_beyond(refs.v[i].key, refs.v[i].klen, lim, limlen,
						reverse)) != 0) {
				if (unchecked)
					rc = ref_check(&refs.v[i]);
				i += step; /* taken, for the bounds below */
				break;
			}
			/* Key then value, as pair_set would copy them. */
			struct fdb_pair *o = &out[(*n)++];
			o->key = (uint8_t *)refs.v[i].key;
			o->klen = refs.v[i].klen;
			o->vlen = refs.v[i].vlen;
			o->tomb = 0;
			o->unchecked = (uint8_t)unchecked;
			o->hdr = (uint8_t)(refs.v[i].key - refs.v[i].rec);
		}
		if (!rc && !order && i != i0) {
			/* Pairs [a, b] were taken. */
			int64_t a = reverse ? i + 1 : i0, b = reverse ? i0 : i - 1;
			if (fdb_keycmp(iv->key, iv->klen, refs.v[a].key, refs.v[a].klen) > 0 ||
			    (nx && fdb_keycmp(refs.v[b].key, refs.v[b].klen, nx->key, nx->klen) >= 0))
				rc = FLEX_ECORRUPT;
		}
		if (rc)
			break;
		if (lim && reverse && fdb_keycmp(iv->key, iv->klen, lim, limlen) <= 0)
			break;
		iv = reverse ? fdb_index_prev(&p) : fdb_index_next(&p);
	}
	if (refs.heap)
		free(refs.v);
	/* A full chunk ends at its last pair's key (the iterator's bound). */
	if (!rc && *n == max)
		rc = fdb_pair_check(&out[max - 1]);
	return rc;
}
