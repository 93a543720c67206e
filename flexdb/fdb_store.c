/*
 * fdb_store.c - pairs in the FlexSpace, grouped into intervals (paper
 * sections 5.1, 5.2 and 5.4).
 *
 * All pairs are kept sorted in one FlexSpace.  A put inserts the encoded
 * pair at its place (or replaces the old one: collapse plus insert), a
 * delete collapses it; the sparse index then shifts the later intervals.
 * A range delete collapses the bytes of every pair in its range at once:
 * the intervals wholly inside leave the index unread, the two at its
 * edges are trimmed (fdb_store_delete_range).
 * Intervals split when they pass FDB_SPLIT_BYTES or FDB_SPLIT_PAIRS and a
 * small interval is merged into its successor.  The FlexSpace extent that
 * starts each interval is tagged FDB_ANCHOR, so that open rebuilds the
 * index by reading one key per interval instead of the whole store.
 *
 * The interval cache (fdb_cache.c) holds the intervals read and written
 * most; gets are in fdb_read.c, scans in fdb_scan.c, sharing fdb_cache.h.
 *
 * Locking, for these files: the caller holds db->lock, shared for
 * fdb_store_get and fdb_store_scan, exclusive for everything else
 * (the committer, fdb_commit.c).
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_vec.h"
#include "fdb_cache.h"

/* ---- open: rebuilding the index from the anchors ---------------------------- */

/* The anchors' offsets and where their extents lie in DATA (poff, elen),
 * and the extents of each interval: pieces[i] for the interval that
 * starts at anchor i (pieces[0]: at offset 0). */
struct anchors {
	uint64_t *off;
	uint64_t *poff;
	uint32_t *elen;
	uint8_t *pieces;
	size_t n, cap;
	int err;
};

static int collect_anchor(void *arg, const struct flextree_extent *e)
{
	struct anchors *a = arg;
	if (a->n + 1 >= a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 1024;
		uint64_t *o = realloc(a->off, cap * sizeof(*o));
		if (o)
			a->off = o;
		uint64_t *po = o ? realloc(a->poff, cap * sizeof(*po)) : NULL;
		if (po)
			a->poff = po;
		uint32_t *el = po ? realloc(a->elen, cap * sizeof(*el)) : NULL;
		if (el)
			a->elen = el;
		uint8_t *pc = el ? realloc(a->pieces, cap) : NULL;
		if (!pc) {
			a->err = -ENOMEM;
			return 1;
		}
		if (!a->cap)
			pc[0] = 0;
		a->pieces = pc;
		a->cap = cap;
	}
	if (e->tag == FDB_ANCHOR && e->loff != 0) {
		a->off[a->n] = e->loff;
		a->poff[a->n] = e->poff;
		a->elen[a->n++] = e->len;
		a->pieces[a->n] = 0;
	}
	if (a->pieces[a->n] < FDB_PIECES_MAX)
		a->pieces[a->n]++;
	return 0;
}

/* The interval keys come from the anchor pairs, and a wrong one sends
 * lookups to the wrong interval, where a present key is "absent" (a bit
 * flipped in an anchor's key did exactly that).  So an anchor pair is
 * verified at open when the bytes read for its key hold all of it, as
 * they do unless its value is several KiB; a longer one is verified when
 * its interval is first loaded or a lookup misses just before it
 * (fdb_anchor_verify), instead of reading large values at open. */
static int anchor_check(const uint8_t *p, size_t n)
{
	size_t size;
	const uint8_t *k, *v;
	uint32_t kl, vl;
	return fdb_rec_decode(p, p + n, &size, &k, &kl, &v, &vl);
}

int fdb_anchor_verify(struct fdb_store *s, uint64_t off)
{
	uint8_t hdr[10];
	uint32_t klen, vlen;
	size_t h;
	ssize_t n = flexspace_read(s->fs, hdr, off, sizeof(hdr));
	if (n < 0)
		return (int)n;
	if (fdb_rec_peek(hdr, hdr + n, &klen, &vlen, &h))
		return FLEX_ECORRUPT;
	size_t size = h + klen + vlen + 4;
	uint8_t *rec = malloc(size);
	if (!rec)
		return -ENOMEM;
	n = flexspace_read(s->fs, rec, off, size);
	int rc = n < 0 ? (int)n : (size_t)n != size || anchor_check(rec, size) ? FLEX_ECORRUPT : 0;
	free(rec);
	return rc;
}

struct fdb_ival *fdb_ival_new(const void *key, uint32_t klen)
{
	struct fdb_ival *iv = calloc(1, sizeof(*iv));
	if (!iv)
		return NULL;
	/* Loaded under the shared lock while readers cache intervals. */
	FLEX_ATOMIC_OBJ(&iv->cache, sizeof(iv->cache));
	FLEX_ATOMIC_OBJ(&iv->count, sizeof(iv->count));
	FLEX_ATOMIC_OBJ(&iv->unverified, sizeof(iv->unverified));
	iv->key = malloc(klen ? klen : 1);
	if (!iv->key) {
		free(iv);
		return NULL;
	}
	memcpy(iv->key, key, klen);
	iv->klen = klen;
	return iv;
}

void fdb_maps_policy(struct fdb_store *s);

/* The first bytes of anchors [from, from + n) (n <= FLEXSPACE_LOCATE_MAX),
 * read together where the scan found them, FDB_ANCHOR_PEEK bytes apart in
 * buf: got[j] bytes of anchor from + j, or 0 when they must be read one at
 * a time.  One batch instead of one read per interval: when DATA is not in
 * memory the reads wait for the disk together. */
static void anchors_peek(struct flexspace *fs, const struct anchors *a, size_t from, size_t n,
			 uint64_t size, uint64_t stamp, uint8_t *buf, uint32_t *got)
{
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	uint8_t *dst[FLEXSPACE_LOCATE_MAX];
	size_t k = 0;
	for (size_t j = 0; j < n; j++) {
		size_t i = from + j;
		uint64_t end = i + 1 < a->n ? a->off[i + 1] : size, len = FDB_ANCHOR_PEEK;
		if (a->elen[i] < len)
			len = a->elen[i];
		if (end > a->off[i] && end - a->off[i] < len)
			len = end - a->off[i];
		got[j] = 0;
		if (a->poff[i] == FLEXTREE_HOLE || !len || end <= a->off[i])
			continue;
		loc[k] = (struct flextree_mapping){.poff = a->poff[i], .len = len, .loff = a->off[i]};
		dst[k++] = buf + j * FDB_ANCHOR_PEEK;
		got[j] = (uint32_t)len;
	}
	/* flexspace_read_located reads the pieces back to back: spread them
	 * out afterwards, last first, each to its anchor's place. */
	if (!k || flexspace_read_located(fs, buf, loc, k, stamp)) {
		memset(got, 0, n * sizeof(*got));
		return;
	}
	size_t at = 0;
	for (size_t j = 0; j < k; j++)
		at += loc[j].len;
	for (size_t j = k; j-- > 0;) {
		at -= loc[j].len;
		memmove(dst[j], buf + at, loc[j].len);
	}
}

int fdb_store_open(struct fdb_store *s, struct flexspace *fs, uint64_t cache_limit,
		   const struct flex_io *io, const char *dir)
{
	memset(s, 0, sizeof(*s));
	s->fs = fs;
	s->cache_limit = cache_limit;
	FLEX_ATOMIC_OBJ(&s->use_maps, sizeof(s->use_maps));
	FLEX_ATOMIC_OBJ(&s->cache_bytes, sizeof(s->cache_bytes));
	FLEX_ATOMIC_OBJ(&s->grave_bytes, sizeof(s->grave_bytes));
	int mrc = pthread_mutex_init(&s->cache_mu, NULL);
	if (mrc)
		return -mrc;
	s->index = fdb_index_new();
	s->rec = malloc(FDB_REC_MAX);
	if (!s->index || !s->rec)
		return -ENOMEM;
	uint64_t size = flexspace_size(fs), stamp;
	/* The index a clean close left, if it describes these contents
	 * (fdb_snap.c); else the anchors. */
	if (flexspace_stamp(fs, &stamp) == 0 && fdb_snap_load(s, io, dir, stamp) == 0) {
		s->bytes = size;
		s->from_snap = 1;
		s->snap_stamp = stamp;
		fdb_maps_policy(s);
		return 0;
	}
	struct anchors a = {0};
	int rc = flexspace_scan(fs, 0, UINT64_MAX, collect_anchor, &a);
	if (!rc)
		rc = a.err;
	uint8_t *hdr = malloc(10 + FLEXDB_MAX_KEY);
	uint8_t *peek = malloc((size_t)FLEXSPACE_LOCATE_MAX * FDB_ANCHOR_PEEK);
	uint32_t got[FLEXSPACE_LOCATE_MAX];
	if (!rc && (!hdr || !peek))
		rc = -ENOMEM;
	/* Without a stamp (a failed locate) the batches find their pieces
	 * stale and every anchor is read alone. */
	stamp = 0;
	struct flextree_mapping m0[FLEXSPACE_LOCATE_MAX];
	size_t nm0 = 0;
	if (!rc && a.n)
		(void)flexspace_locate(fs, 0, 1, m0, &nm0, &stamp);
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
			iv = fdb_ival_new("", 0);
		} else {
			/* Read just the anchor pair's header and key: a small
			 * read first, which holds the whole pair when it is
			 * small, then up to the longest key's worth if the pair
			 * needs it (one 4 KiB copy per interval was most of the
			 * time an open spent outside WAL replay). */
			size_t j = (i - 1) % FLEXSPACE_LOCATE_MAX;
			if (!j) {
				size_t left = a.n - (i - 1);
				anchors_peek(fs, &a, i - 1,
					     left < FLEXSPACE_LOCATE_MAX ? left : FLEXSPACE_LOCATE_MAX,
					     size, stamp, peek, got);
			}
			uint32_t klen, vlen;
			size_t h;
			/* The batch's bytes do when they hold the pair's header
			 * and key, or all the single read would have read. */
			ssize_t n = got[j];
			const uint8_t *pk = peek + j * FDB_ANCHOR_PEEK;
			if (n && (fdb_rec_peek(pk, pk + n, &klen, &vlen, &h) || h + klen > (size_t)n) &&
			    (size_t)n < FDB_ANCHOR_PEEK && (size_t)n < end - off)
				n = 0;
			if (n)
				memcpy(hdr, pk, (size_t)n);
			else
				n = flexspace_read(fs, hdr, off, FDB_ANCHOR_PEEK);
			if (n > 0 && !fdb_rec_peek(hdr, hdr + n, &klen, &vlen, &h) &&
			    h + klen + vlen + 4 > (size_t)n && (size_t)n < 10 + FLEXDB_MAX_KEY)
				n = flexspace_read(fs, hdr, off, 10 + FLEXDB_MAX_KEY);
			if (n < 0)
				rc = (int)n;
			else if (fdb_rec_peek(hdr, hdr + n, &klen, &vlen, &h) ||
				 (size_t)n < h + klen || h + klen + vlen + 4 > end - off ||
				 (prev->klen &&
				  fdb_keycmp(prev->key, prev->klen, hdr + h, klen) >= 0))
				rc = FLEX_ECORRUPT;
			else if (h + klen + vlen + 4 <= (size_t)n && anchor_check(hdr, (size_t)n))
				rc = FLEX_ECORRUPT;
			else if ((iv = fdb_ival_new(hdr + h, klen)) != NULL)
				iv->unverified = h + klen + vlen + 4 > (size_t)n;
		}
		if (!rc && !iv)
			rc = -ENOMEM;
		if (rc)
			break;
		iv->size = (uint32_t)(end - off);
		iv->pieces = a.pieces ? a.pieces[i] : 0;
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
	free(peek);
	free(a.off);
	free(a.poff);
	free(a.elen);
	free(a.pieces);
	if (!rc)
		fdb_maps_policy(s);
	return rc;
}

/* ---- runs: one interval's changes as one FlexSpace change -------------------- */

int fdb_run_open(struct fdb_store *s)
{
	struct fdb_run *r = s->run;
	if (!r && !(r = s->run = calloc(1, sizeof(*r))))
		return -ENOMEM;
	r->n = 0;
	r->used = 0;
	r->size = flexspace_size(s->fs);
	s->in_run = 1;
	return 0;
}

static void run_free(struct fdb_run *r)
{
	if (r) {
		free(r->ops);
		free(r->buf);
		free(r);
	}
}

/* Room for one more op and `bytes` more of records, which then go at
 * r->buf + r->used. */
int fdb_run_room(struct fdb_run *r, size_t bytes)
{
	if (r->n == r->cap) {
		uint32_t cap = r->cap ? r->cap * 2 : 64;
		struct flexspace_op *o = realloc(r->ops, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		r->ops = o;
		r->cap = cap;
	}
	if (bytes && flex_vec_reserve(&r->buf, &r->bcap, r->used + bytes, 64u << 10))
		return -ENOMEM;
	return 0;
}

/* Adds an op to the run.  A record's rs bytes, encoded by the caller at
 * fdb_run_room's address, are known by their place in buf (which may move)
 * until fdb_run_apply points at them. */
void fdb_run_add(struct fdb_run *r, int type, uint64_t off, uint64_t len, size_t rs,
		    uint16_t tag)
{
	r->ops[r->n++] = (struct flexspace_op){.type = type,
					       .off = off,
					       .len = len,
					       .tag = tag,
					       .buf = (const void *)(uintptr_t)r->used,
					       .buf_len = rs};
	r->used += rs;
	if (type == FLEXSPACE_OP_COLLAPSE || type == FLEXSPACE_OP_REPLACE)
		r->size -= len;
	if (type == FLEXSPACE_OP_INSERT || type == FLEXSPACE_OP_REPLACE)
		r->size += rs;
}

int fdb_run_apply(struct fdb_store *s)
{
	struct fdb_run *r = s->run;
	s->in_run = 0;
	for (uint32_t i = 0; i < r->n; i++)
		if (r->ops[i].buf_len)
			r->ops[i].buf = r->buf + (uintptr_t)r->ops[i].buf;
	int rc = flexspace_apply(s->fs, r->ops, r->n);
	if (r->bcap > (1u << 20)) {
		/* the buffer of a run of large values is not kept */
		free(r->buf);
		r->buf = NULL;
		r->bcap = 0;
	}
	return rc;
}

/* Sets an extent tag: an op of the run while one is open. */
int fdb_set_tag(struct fdb_store *s, uint64_t off, uint16_t tag)
{
	if (!s->in_run)
		return off < flexspace_size(s->fs) ? flexspace_tag_set(s->fs, off, tag) : 0;
	if (off >= s->run->size)
		return 0;
	int rc = fdb_run_room(s->run, 0);
	if (!rc)
		fdb_run_add(s->run, FLEXSPACE_OP_TAG, off, 0, 0, tag);
	return rc;
}

void fdb_store_close(struct fdb_store *s)
{
	for (int k = 0; k < 2; k++) {
		for (uint32_t i = 0; i < s->ring[k].n; i++) {
			s->ring[k].v[i]->iv->cache = NULL;
			fdb_cent_free(s->ring[k].v[i]);
		}
		free(s->ring[k].v);
	}
	fdb_store_reap(s);
	free(s->grave);
	pthread_mutex_destroy(&s->cache_mu);
	fdb_index_free(s->index);
	free(s->rec);
	run_free(s->run);
	fdb_tidy_free(s->tidy);
	free(s->warm_key);
	memset(s, 0, sizeof(*s));
}

/* ---- changes (exclusive lock) ------------------------------------------------ */

/* Splits an interval in two at its middle pair (c is its entry, cached
 * or private). */
static int ival_split(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		      struct fdb_cent *c)
{
	uint32_t m = c->n / 2;
	uint64_t off = fdb_index_offset(p);
	const uint8_t *k, *v;
	uint32_t kl, vl, sz;
	fdb_cent_pair(c, m, &k, &kl, &v, &vl, &sz);
	struct fdb_ival *nv = fdb_ival_new(k, kl);
	struct fdb_cent *nc = fdb_cent_new();
	uint32_t at = c->off[m];
	if (!nv || !nc || fdb_cent_reserve(nc, c->n - m, c->size - at)) {
		if (nv) {
			free(nv->key);
			free(nv);
		}
		fdb_cent_free(nc);
		return -ENOMEM;
	}
	nc->n = c->n - m;
	nc->size = c->size - at;
	memcpy(nc->raw, c->raw + at, nc->size);
	memcpy(nc->fp, c->fp + m, nc->n * sizeof(uint16_t));
	for (uint32_t i = 0; i < nc->n; i++)
		nc->off[i] = c->off[m + i] - at;
	nc->bytes = fdb_cent_bytes(nc);
	fdb_cent_unmap(c);
	c->n = m;
	c->size = at;
	fdb_cache_recharge(s, c);
	nv->size = iv->size - at;
	nv->pieces = iv->pieces = (uint8_t)(iv->pieces / 2 + 1);
	nv->count = nc->n;
	iv->size = at;
	iv->count = m;
	int rc = fdb_set_tag(s, off + at, FDB_ANCHOR);
	if (!rc)
		rc = fdb_index_insert_after(s->index, p, nv, off + at);
	if (rc) {
		fdb_cent_free(nc);
		return rc;
	}
	/* The new half is cached only if the split interval was. */
	if (c != iv->cache || fdb_cache_attach(s, nv, nc, 0) != 0)
		fdb_cent_free(nc);
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
	int rc = fdb_set_tag(s, nx_off, 0);
	if (rc)
		return rc;
	/* Extend the cached entry when both are cached, else drop both. */
	struct fdb_cent *a = iv->cache, *b = nx->cache;
	if (a && b && a->raw && b->raw && !fdb_cent_reserve(a, a->n + b->n, a->size + b->size)) {
		memcpy(a->raw + a->size, b->raw, b->size);
		memcpy(a->fp + a->n, b->fp, b->n * sizeof(uint16_t));
		for (uint32_t i = 0; i < b->n; i++)
			a->off[a->n + i] = b->off[i] + a->size;
		a->n += b->n;
		a->size += b->size;
		fdb_cache_recharge(s, a);
		fdb_cache_drop(s, nx);
	} else {
		fdb_cache_drop(s, iv);
		fdb_cache_drop(s, nx);
	}
	iv->size += nx->size;
	iv->pieces = (uint8_t)(iv->pieces + nx->pieces > FDB_PIECES_MAX ? FDB_PIECES_MAX
									  : iv->pieces + nx->pieces);
	iv->count += nx->count;
	fdb_index_remove(s->index, &q);
	free(nx->key);
	free(nx);
	return 0;
}

/* Removes iv, emptied, from the index (path p, invalid after) and frees
 * it; the first interval's key stays the empty key, below everything. */
static int ival_remove_empty(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv)
{
	int first = iv->klen == 0;
	fdb_cache_drop(s, iv);
	fdb_index_remove(s->index, p);
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
		fdb_index_rekey(s->index, &q);
	}
	return 0;
}

/* A run ends once its interval passes a split threshold, so that it
 * splits where a change at a time would split it. */
static int run_full(const struct fdb_ival *iv)
{
	return iv->size > FDB_SPLIT_BYTES || iv->count > FDB_SPLIT_PAIRS;
}

/* One put or delete of a run, to iv's entry c, whose first byte is at
 * off0 in the FlexSpace as the run leaves it; *delta: the change of the
 * interval's size. */
static int run_op(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *c, uint64_t off0,
		  const struct fdb_batch_op *op, int64_t *delta)
{
	struct fdb_run *r = s->run;
	int found, rc;
	uint32_t pos = fdb_cent_lower(c, op->key, op->klen, &found);
	uint64_t at = off0 + (pos < c->n ? c->off[pos] : iv->size);
	const uint8_t *k, *v;
	uint32_t kl, vl, old = 0;
	if (found)
		fdb_cent_pair(c, pos, &k, &kl, &v, &vl, &old);
	*delta = 0;
	if (op->op == FDB_OP_DEL) {
		if (!found)
			return 0;
		if ((rc = fdb_run_room(r, 0)) != 0)
			return rc;
		fdb_run_add(r, FLEXSPACE_OP_COLLAPSE, at, old, 0, 0);
		if ((rc = fdb_cent_splice(c, pos, 1, NULL, 0, 0)) != 0)
			return rc;
		fdb_cache_recharge(s, c);
		*delta = -(int64_t)old;
		iv->count--;
		s->keys--;
		return pos == 0 && c->n > 0 ? fdb_set_tag(s, off0, FDB_ANCHOR) : 0;
	}
	if ((rc = fdb_run_room(r, fdb_rec_size(op->klen, op->vlen))) != 0)
		return rc;
	uint8_t *rec = r->buf + r->used;
	size_t rs = fdb_rec_encode(rec, op->key, op->klen, op->val, op->vlen);
	s->tidy_credit += rs;
	uint16_t fp = fdb_fingerprint(op->key, op->klen);
	if (!found)
		fdb_run_add(r, FLEXSPACE_OP_INSERT, at, 0, rs, 0);
	else if (rs == old)
		fdb_run_add(r, FLEXSPACE_OP_WRITE, at, 0, rs, 0);
	else
		fdb_run_add(r, FLEXSPACE_OP_REPLACE, at, old, rs, 0);
	if ((rc = fdb_cent_splice(c, pos, (uint32_t)found, rec, (uint32_t)rs, fp)) != 0)
		return rc;
	fdb_cache_recharge(s, c);
	*delta = (int64_t)rs - old;
	if (!found) {
		iv->count++;
		s->keys++;
	}
	/* A new or rewritten first pair must carry the anchor tag; the pair
	 * it pushed back must not. */
	if (pos == 0 && (rc = fdb_set_tag(s, off0, FDB_ANCHOR)) == 0 && !found && c->n > 1)
		rc = fdb_set_tag(s, off0 + rs, 0);
	return rc;
}

int fdb_count_piece(void *arg, const struct flextree_extent *e)
{
	(void)e;
	(*(uint32_t *)arg)++;
	return 0;
}

/* Whether iv's bytes lie in so many extents that the run should rewrite it
 * whole.  A run leaves one or two more; each is a read when the interval
 * is loaded and a FlexTree entry, and the tree writes about its size
 * (about 15 bytes per extent) per memtable, since a random load dirties
 * nearly every leaf between two commits.  Per pair put the tree costs
 * store / memtable x 15 B x extents per pair, a rewrite pairs rewritten
 * x pair size; a model of random puts gives 0.36 extents per pair and 1.9
 * pairs rewritten for a rewrite past half the pairs (the paper's mark),
 * 0.56 and 0.9 past three quarters, 0.95 and none for no rewrite (tidying
 * rewrites once later).  So: never when (store / memtable) x 8 < pair
 * size, three quarters when x 4 < pair size, else the paper's mark
 * (docs/BENCHMARKS.md).  Counted when the estimate says it may be due. */
static int ival_scattered(struct fdb_store *s, struct fdb_ival *iv, uint64_t off)
{
	/* A count not known yet (0) weighs nothing: the paper's mark. */
	uint32_t n = iv->count == FDB_COUNT_UNKNOWN ? 0 : iv->count, c = 0;
	uint64_t k = s->memtable_size ? s->bytes / s->memtable_size : 0;
	uint64_t pair = n ? iv->size / n : 0;
	uint32_t mark = (k * 4 < pair ? 3 * n / 4 : n / 2) + 2;
	if (!iv->size || k * 8 < pair || iv->pieces <= mark)
		return 0;
	if (flexspace_scan(s->fs, off, iv->size, fdb_count_piece, &c) != 0)
		return 0;
	iv->pieces = (uint8_t)(c > FDB_PIECES_MAX ? FDB_PIECES_MAX : c);
	return iv->pieces > mark;
}

/* After the pairs of a run: a scattered interval gets the run's ops
 * replaced by one rewrite of its whole new content (size0 bytes at off0
 * before, the entry's bytes after; space0: the space's size before the
 * run), which leaves it in one extent.  Otherwise the estimate of its
 * pieces grows by what the ops may have split. */
static int run_pieces(struct fdb_store *s, struct fdb_ival *iv, const struct fdb_cent *c,
		      uint64_t off0, uint32_t size0, uint64_t space0, int rewrite)
{
	struct fdb_run *r = s->run;
	if (!rewrite) {
		uint32_t p = iv->pieces + 2 * r->n;
		iv->pieces = (uint8_t)(p > FDB_PIECES_MAX ? FDB_PIECES_MAX : p);
		return 0;
	}
	r->n = 0;
	r->used = 0;
	r->size = space0;
	int rc = fdb_run_room(r, c->size);
	if (rc)
		return rc;
	if (c->size)
		memcpy(r->buf, c->raw, c->size);
	fdb_run_add(r, FLEXSPACE_OP_REPLACE, off0, size0, c->size, 0);
	iv->pieces = 1;
	return c->n ? fdb_set_tag(s, off0, FDB_ANCHOR) : 0;
}

static int store_run(struct fdb_store *s, const struct fdb_batch_op *ops, int n, int *done)
{
	struct fdb_ipath p;
	struct fdb_ival *iv = fdb_index_find(s->index, ops[0].key, ops[0].klen, &p);
	assert(iv); /* the first interval's empty key is below every key */
	struct fdb_ipath q = p;
	const struct fdb_ival *nx = fdb_index_next(&q);
	fdb_run_prefetch(&q, nx);
	struct fdb_cent *tmp;
	int rc = fdb_ival_load(s, &p, iv, &tmp);
	if (rc)
		return rc;
	struct fdb_cent *c = tmp ? tmp : iv->cache;
	uint64_t off0 = fdb_index_offset(&p);
	uint32_t size0 = iv->size;
	int rewrite = ival_scattered(s, iv, off0);
	if ((rc = fdb_run_open(s)) != 0)
		goto out;
	uint64_t space0 = s->run->size;
	int64_t shift = 0;
	int deleted = 0, k = 0;
	for (; k < n && !rc; k++) {
		if (k && ((nx && fdb_keycmp(ops[k].key, ops[k].klen, nx->key, nx->klen) >= 0) ||
			  run_full(iv)))
			break;
		int64_t d;
		rc = run_op(s, iv, c, off0, &ops[k], &d);
		iv->size = (uint32_t)((int64_t)iv->size + d);
		s->bytes = (uint64_t)((int64_t)s->bytes + d);
		shift += d;
		deleted |= ops[k].op == FDB_OP_DEL;
	}
	*done = k;
	fdb_index_shift(&p, shift);
	if (!rc)
		rc = run_pieces(s, iv, c, off0, size0, space0, rewrite);
	if (!rc && c->n >= 2 && (iv->size > FDB_SPLIT_BYTES || iv->count > FDB_SPLIT_PAIRS))
		rc = ival_split(s, &p, iv, c);
	else if (!rc && iv->count == 0 && fdb_index_count(s->index) > 1)
		rc = ival_remove_empty(s, &p, iv); /* an empty interval goes */
	else if (!rc && deleted)
		rc = ival_maybe_merge(s, &p, iv);
	if (!rc)
		rc = fdb_run_apply(s);
	s->in_run = 0;
out:
	fdb_cent_free(tmp);
	return rc;
}

/* Applies the puts and deletes at the start of ops that fall into one
 * interval, then gives back cache space their write-through growth
 * took. */
int fdb_store_apply_run(struct fdb_store *s, const struct fdb_batch_op *ops, int n, int *done)
{
	*done = 0;
	if (s->failed)
		return FLEX_EFAILED;
	if (n <= 0)
		return 0;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
	if (s->ngrave)
		fdb_store_reap(s);
	int rc = store_run(s, ops, n, done);
	/* A failure part-way (the entry and the index changed, the FlexSpace
	 * not) leaves the index offsets off from the FlexSpace: reading
	 * through them would report intact pairs as corrupt, or miss them. */
	if (rc)
		s->failed = rc;
	if (s->cache_bytes > fdb_ring_limit(s))
		fdb_cache_evict(s, 0, NULL, 0);
	return rc;
}

/* ---- range deletes (exclusive lock) -------------------------------------------- */

/* Where a range edge falls in the interval holding it: the position of
 * the first pair >= key, the interval's pair count, and that pair's
 * offset in the interval (its size when none). */
struct range_edge {
	struct fdb_ival *iv;
	uint64_t off; /* the interval's */
	uint32_t pos, n, at;
};

static int range_edge(struct fdb_store *s, const void *key, uint32_t klen, struct range_edge *e)
{
	struct fdb_ipath p;
	e->iv = fdb_index_find(s->index, key, klen, &p);
	assert(e->iv); /* as in store_run */
	struct fdb_cent *tmp;
	int rc = fdb_ival_load(s, &p, e->iv, &tmp);
	if (rc)
		return rc;
	/* Only numbers are kept: loading the other edge may evict this
	 * entry. */
	const struct fdb_cent *c = tmp ? tmp : e->iv->cache;
	int found;
	e->off = fdb_index_offset(&p);
	e->n = c->n;
	e->pos = fdb_cent_lower(c, key, klen, &found);
	e->at = e->pos < c->n ? c->off[e->pos] : c->size;
	fdb_cent_free(tmp);
	return 0;
}

/* Removes pairs [from, to) of iv, whose bytes are gone from the space,
 * from its cache entry (dropped if thin: it is rebuilt when next read)
 * and its accounts. */
static int range_trim(struct fdb_store *s, struct fdb_ival *iv, uint32_t from, uint32_t to,
		      uint32_t bytes)
{
	struct fdb_cent *c = iv->cache;
	int rc = 0;
	if (c && c->raw && to > from) {
		rc = fdb_cent_splice(c, from, to - from, NULL, 0, 0);
		if (!rc)
			fdb_cache_recharge(s, c);
	} else if (c && to > from) {
		fdb_cache_drop(s, iv);
	}
	iv->count -= to - from;
	iv->size -= bytes;
	s->keys -= to - from;
	/* The collapse may split an extent of the interval in two. */
	if (to > from && iv->pieces < FDB_PIECES_MAX)
		iv->pieces++;
	return rc;
}

static int store_delete_range(struct fdb_store *s, const void *start, uint32_t slen,
			      const void *end, uint32_t elen)
{
	struct range_edge l, r;
	int rc = range_edge(s, start, slen, &l);
	if (!rc)
		rc = range_edge(s, end, elen, &r);
	if (rc)
		return rc;
	/* Every pair in [a, b) goes: the tail of the left edge interval, the
	 * intervals between the edges whole, the head of the right one. */
	uint64_t a = l.off + l.at, b = r.off + r.at;
	if (b <= a)
		return 0;
	if ((rc = flexspace_collapse(s->fs, a, b - a)) != 0)
		return rc;
	s->bytes -= b - a;
	/* The intervals between: out of the index a leaf's run at a time,
	 * without reading them. */
	uint64_t middle = 0;
	struct fdb_ival *gone[128];
	for (;;) {
		struct fdb_ipath p;
		fdb_index_find(s->index, l.iv->key, l.iv->klen, &p);
		struct fdb_ival *iv = fdb_index_next(&p);
		if (!iv || iv == r.iv || l.iv == r.iv)
			break;
		uint32_t k = 0;
		const struct fdb_ival *x;
		while (k < sizeof(gone) / sizeof(gone[0]) && (x = fdb_index_peek(&p, (int)k)) &&
		       x != r.iv)
			gone[k++] = (struct fdb_ival *)x;
		for (uint32_t i = 0; i < k; i++) {
			fdb_cache_drop(s, gone[i]);
			if (gone[i]->count == FDB_COUNT_UNKNOWN)
				s->uncounted--;
			else
				s->keys -= gone[i]->count;
			middle += gone[i]->size;
		}
		k = fdb_index_remove_n(s->index, &p, k);
		for (uint32_t i = 0; i < k; i++) {
			free(gone[i]->key);
			free(gone[i]);
		}
	}
	/* Then the edges, and the offsets after them. */
	struct fdb_ipath p;
	if (l.iv == r.iv) {
		fdb_index_find(s->index, l.iv->key, l.iv->klen, &p);
		rc = range_trim(s, l.iv, l.pos, r.pos, (uint32_t)(b - a));
		fdb_index_shift(&p, -(int64_t)(b - a));
	} else {
		uint32_t tail = l.iv->size - l.at;
		fdb_index_find(s->index, l.iv->key, l.iv->klen, &p);
		rc = range_trim(s, l.iv, l.pos, l.n, tail);
		fdb_index_shift(&p, -(int64_t)(tail + middle));
		if (!rc) {
			fdb_index_find(s->index, r.iv->key, r.iv->klen, &p);
			rc = range_trim(s, r.iv, 0, r.pos, r.at);
			fdb_index_shift(&p, -(int64_t)r.at);
		}
	}
	if (rc)
		return rc;
	/* The pair now at a starts an interval, unless the range lay inside
	 * one interval that keeps pairs before it. */
	if (a > 0 && a < s->bytes && !(l.iv == r.iv && l.pos > 0))
		rc = fdb_set_tag(s, a, FDB_ANCHOR);
	/* Emptied edges go (the right one first: the left may be the first
	 * interval, whose key passes to its successor). */
	if (!rc && r.iv != l.iv && r.iv->count == 0 && fdb_index_count(s->index) > 1) {
		fdb_index_find(s->index, r.iv->key, r.iv->klen, &p);
		rc = ival_remove_empty(s, &p, r.iv);
	}
	if (!rc && l.iv->count == 0 && fdb_index_count(s->index) > 1) {
		fdb_index_find(s->index, l.iv->key, l.iv->klen, &p);
		return ival_remove_empty(s, &p, l.iv);
	}
	if (!rc) {
		fdb_index_find(s->index, l.iv->key, l.iv->klen, &p);
		rc = ival_maybe_merge(s, &p, l.iv);
	}
	return rc;
}

int fdb_store_delete_range(struct fdb_store *s, const void *start, uint32_t slen, const void *end,
			   uint32_t elen)
{
	if (s->failed)
		return FLEX_EFAILED;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
	if (s->ngrave)
		fdb_store_reap(s);
	int rc = store_delete_range(s, start ? start : "", slen, end, elen);
	/* As in fdb_store_apply_run: the index may no longer describe the space. */
	if (rc)
		s->failed = rc;
	if (s->cache_bytes > fdb_ring_limit(s))
		fdb_cache_evict(s, 0, NULL, 0);
	return rc;
}

void fdb_store_counts(struct fdb_store *s, uint64_t *keys, uint64_t *uncounted)
{
	pthread_mutex_lock(&s->cache_mu);
	*keys = s->keys;
	*uncounted = s->uncounted;
	pthread_mutex_unlock(&s->cache_mu);
}

/* ---- check ------------------------------------------------------------------ */

int fdb_store_check(struct fdb_store *s)
{
	if (s->failed)
		return FLEX_EFAILED;
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
			rc = fdb_ival_decode(s, iv, off, &c);
		if (!rc && c->n == 0 && fdb_index_count(s->index) > 1)
			rc = FLEX_ECORRUPT; /* empty intervals are removed */
		const uint8_t *k0, *v0;
		uint32_t kl0, vl0, sz0;
		if (!rc && c->n) {
			fdb_cent_pair(c, 0, &k0, &kl0, &v0, &vl0, &sz0);
			if (last && fdb_keycmp(last, lastlen, k0, kl0) >= 0)
				rc = FLEX_ECORRUPT;
		}
		if (!rc && off > 0) {
			uint16_t tag;
			uint64_t start;
			if (flexspace_tag_get(s->fs, off, &tag, &start) || tag != FDB_ANCHOR ||
			    start != off)
				rc = FLEX_ECORRUPT;
		}
		if (!rc && iv->cache) {
			const struct fdb_cent *k = iv->cache;
			uint32_t *ko = c->n ? malloc(c->n * sizeof(*ko)) : NULL;
			if (k->n != c->n || k->size != c->size || !k->raw != !!k->thin ||
			    (k->raw && c->size && memcmp(k->raw, c->raw, c->size)))
				rc = FLEX_ECORRUPT;
			else if (c->n && !ko)
				rc = -ENOMEM;
			if (!rc && c->n) {
				fdb_cent_offsets(k, ko);
				if (memcmp(ko, c->off, c->n * sizeof(*ko)) ||
				    memcmp(fdb_cent_fps(k), c->fp, c->n * sizeof(uint16_t)))
					rc = FLEX_ECORRUPT;
			}
			free(ko);
			/* Where the entry says its bytes lie, unless the FlexSpace
			 * freed them since, they still are. */
			uint8_t *b = k->thin && k->pieces && c->size ? malloc(c->size) : NULL;
			for (uint32_t i = 0; b && !rc && i < c->n; i++) {
				uint32_t at = c->off[i];
				uint32_t sz = (i + 1 < c->n ? c->off[i + 1] : c->size) - at;
				int mrc = fdb_thin_read(s, k, at, sz, b);
				if (!mrc && memcmp(b, c->raw + at, sz))
					rc = FLEX_ECORRUPT;
				else if (mrc && mrc != -ESTALE)
					rc = mrc;
			}
			free(b);
		}
		if (!rc && c->n) {
			const uint8_t *kl, *vlp;
			uint32_t kll, vll, szl;
			fdb_cent_pair(c, c->n - 1, &kl, &kll, &vlp, &vll, &szl);
			free(last);
			lastlen = kll;
			last = malloc(lastlen ? lastlen : 1);
			if (!last)
				rc = -ENOMEM;
			else
				memcpy(last, kl, lastlen);
		}
		if (iv->count == FDB_COUNT_UNKNOWN)
			known = 0;
		if (c)
			keys += c->n;
		fdb_cent_free(c);
		pos += iv->size;
		iv = fdb_index_next(&p);
	}
	free(last);
	if (!rc && pos != flexspace_size(s->fs))
		rc = FLEX_ECORRUPT;
	/* Every ring entry is its interval's; the charges add up within the
	 * bound (one entry may pass it alone). */
	size_t bytes = 0, thin = 0, maps = 0, grave = 0;
	for (int k = 0; k < 2; k++)
		for (uint32_t i = 0; i < s->ring[k].n && !rc; i++) {
			const struct fdb_cent *c = s->ring[k].v[i];
			if (c->slot != i || (c->raw == NULL) != k || c->iv->cache != c ||
			    c->bytes != fdb_cent_bytes(c))
				rc = FLEX_ECORRUPT;
			bytes += c->bytes;
			thin += c->raw ? 0 : c->bytes;
			maps += fdb_cent_map_bytes(c);
		}
	for (uint32_t i = 0; i < s->ngrave; i++)
		grave += s->grave[i]->bytes;
	if (!rc && (bytes != s->cache_bytes || thin != s->thin_bytes ||
		    maps != s->thin_map_bytes || grave != s->grave_bytes ||
		    (s->ring[0].n + s->ring[1].n > 1 && bytes + grave > s->cache_limit)))
		rc = FLEX_ECORRUPT;
	if (!rc && known && keys != s->keys)
		rc = FLEX_ECORRUPT;
	return rc;
}
