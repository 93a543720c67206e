/*
 * fdb_scan.c - scans of the store, for iterators (fdb_iter.c): pairs are
 * copied from whole cache entries, and other intervals are read in runs of
 * neighbours (through their thin entries' maps when they have them),
 * parsed in place into the iterator's arena, and offered to the cache
 * while it has room.  Readers hold db->lock shared.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_cache.h"

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
			fdb_cent_touch(c);
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
			rc = raw_pairs(raw, raw + iv->size - skip, iv, nx, admit, order, !jump,
				       &refs);
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
		 * the start, on whose keys the binary search decided (or the
		 * key's own pair, after a jump), and the one whose key stops
		 * the scan, here; those returned when the
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
			    fdb_keycmp(refs.v[reverse ? i : i - 1].key,
				       refs.v[reverse ? i : i - 1].klen,
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
			    (nx &&
			     fdb_keycmp(refs.v[b].key, refs.v[b].klen, nx->key, nx->klen) >= 0))
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
