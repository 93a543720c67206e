/*
 * fdb_tidy.c - tidying: the committer rewrites whole, in key order, the
 * intervals whose bytes lie in more than one extent (flexdb_compact).
 * Committer only; the locking is that of fdb_store.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "fdb_cache.h"

/* Each run of a commit leaves its interval in one to three more extents
 * (fdb_store.c's ival_scattered rewrites it past half or three quarters of
 * its pairs in a store large against the memtable, never in a small one),
 * so after a random load an interval lies in about nine or more: as many
 * reads when it is loaded from a cold page cache, as many extents in the
 * FlexTree, and its pairs spread over as many pages of the data file
 * among other intervals' pairs and garbage.  Tidying rewrites such intervals whole,
 * in key order, each as one flexspace_apply: each then lies in one
 * extent, neighbours lie side by side (a scan reads them in one request)
 * and the data file's pages hold only live pairs.  The contents do not
 * change, so cache entries stay (a thin entry's map reads the old copy
 * until the space frees it, then finds the new one: fdb_thin_read).
 *
 * It costs a write of what it rewrites, so it spends credit: the bytes
 * commits wrote (fdb_store.c's run_op), at most the store's size, and a pass that
 * finds nothing left to rewrite ends it and drops what is left: tidying
 * adds at most one write per byte committed.  Credit spent on one
 * interval in two extents would tidy a few reads; spent on one in eight,
 * many more: a pass goes round first for intervals in FDB_TIDY_FLOOR
 * extents or more, then half as many, down to two.  flexdb_compact asks
 * for a whole pass instead (every interval in two or more at once).  The
 * committer runs it in steps of FDB_TIDY_BYTES when writes have paused
 * (fdb_commit.c).  A space with max_data_size is never tidied: a rewrite
 * needs room before it frees any, and near the cap it would force
 * collections under the exclusive lock or fail. */
#define FDB_TIDY_BYTES (1u << 20) /* read per step */
#define FDB_TIDY_VISIT 16384	  /* intervals looked at per step, at most */
#define FDB_TIDY_FLOOR 8	  /* extents of the intervals a pass takes first */

struct fdb_tidy_item {
	uint64_t off;
	uint32_t size, klen;
	size_t at;  /* its key, then its bytes, in buf */
	int cached; /* its bytes came from its cache entry */
};

struct fdb_tidy {
	uint8_t *from; /* the first key of the next interval to look at */
	uint32_t flen, fcap;
	uint64_t idle; /* intervals looked at since the last one rewritten */
	/* Intervals in fewer extents than this wait for a later round: with
	 * credit for part of the store, the most scattered go first. */
	uint32_t floor;
	struct fdb_tidy_item *it;
	uint32_t n;
	size_t cap;
	uint8_t *buf;
	size_t used, bcap;
};

void fdb_store_tidy_grant(struct fdb_store *s, int full)
{
	if (s->no_tidy || (!s->tidy && !(s->tidy = calloc(1, sizeof(*s->tidy)))))
		return; /* without memory there is no tidying */
	uint64_t cap = s->bytes + FDB_TIDY_BYTES;
	s->tidy_credit = full || s->tidy_credit > cap ? cap : s->tidy_credit;
	s->tidy->idle = 0;
	s->tidy->floor = full ? 2 : FDB_TIDY_FLOOR;
	atomic_store(&s->tidy_due, s->tidy_credit > 0);
}

void fdb_tidy_free(struct fdb_tidy *t)
{
	if (t) {
		free(t->from);
		free(t->it);
		free(t->buf);
		free(t);
	}
}

/* Room in t for one more interval of klen + size bytes. */
static int tidy_room(struct fdb_tidy *t, size_t bytes)
{
	if (flex_vec_reserve(&t->it, &t->cap, t->n + 1, 64) ||
	    flex_vec_reserve(&t->buf, &t->bcap, t->used + bytes, 64u << 10))
		return -ENOMEM;
	return 0;
}

static int tidy_cursor(struct fdb_tidy *t, const struct fdb_ival *iv)
{
	t->flen = 0; /* past the last interval: the pass wraps around */
	if (!iv)
		return 0;
	if (iv->klen > t->fcap) {
		uint8_t *k = realloc(t->from, iv->klen);
		if (!k)
			return -ENOMEM;
		t->from = k;
		t->fcap = iv->klen;
	}
	if (iv->klen) /* the first interval's key is empty */
		memcpy(t->from, iv->key, iv->klen);
	t->flen = iv->klen;
	return 0;
}

/* Reads the bytes of the step's intervals the cache did not hold, at
 * once (flexspace_read_many: in the data file's order, past the page
 * cache, which a tidying pass over a store larger than memory would
 * otherwise fill with all of it). */
static int tidy_fetch(struct fdb_store *s, struct fdb_tidy *t)
{
	struct flex_iovec *v = t->n ? malloc(t->n * sizeof(*v)) : NULL;
	if (t->n && !v)
		return -ENOMEM;
	int nv = 0;
	for (uint32_t k = 0; k < t->n; k++) {
		const struct fdb_tidy_item *it = &t->it[k];
		if (!it->cached)
			v[nv++] = (struct flex_iovec){
			    .buf = t->buf + it->at + it->klen, .len = it->size, .off = it->off};
	}
	int rc = nv ? flexspace_read_many(s->fs, v, nv) : 0;
	free(v);
	return rc;
}

int fdb_store_tidy_read(struct fdb_store *s, uint32_t *nread)
{
	struct fdb_tidy *t = s->tidy;
	*nread = 0;
	if (s->failed)
		return FLEX_EFAILED;
	if (!t || !atomic_load(&s->tidy_due))
		return 0;
	t->n = 0;
	t->used = 0;
	uint64_t count = fdb_index_count(s->index), want = 0;
	struct fdb_ipath p;
	struct fdb_ival *iv = t->flen ? fdb_index_find(s->index, t->from, t->flen, &p)
				      : fdb_index_first(s->index, &p);
	int rc = 0, broke = 0;
	for (uint32_t seen = 0; iv && seen < FDB_TIDY_VISIT && t->idle < count;
	     seen++, iv = fdb_index_next(&p)) {
		if (iv->pieces < t->floor || !iv->size) {
			t->idle++;
			continue;
		}
		uint64_t off = fdb_index_offset(&p);
		uint32_t k = 0;
		if ((rc = flexspace_scan(s->fs, off, iv->size, fdb_count_piece, &k)) != 0)
			break;
		iv->pieces = (uint8_t)(k > FDB_PIECES_MAX ? FDB_PIECES_MAX : k);
		if (k < t->floor) {
			t->idle++;
			continue;
		}
		if ((t->n && want + iv->size > FDB_TIDY_BYTES) ||
		    want + iv->size > s->tidy_credit) {
			broke = want + iv->size > s->tidy_credit ? 2 : 1;
			break;
		}
		if ((rc = tidy_room(t, (size_t)iv->klen + iv->size)) != 0)
			break;
		struct fdb_tidy_item *it = &t->it[t->n];
		*it = (struct fdb_tidy_item){
		    .off = off, .size = iv->size, .klen = iv->klen, .at = t->used};
		uint8_t *dst = t->buf + t->used + iv->klen;
		if (iv->klen)
			memcpy(t->buf + t->used, iv->key, iv->klen);
		const struct fdb_cent *c = fdb_ival_cent(iv);
		it->cached = c && c->raw && c->size == iv->size;
		if (it->cached)
			memcpy(dst, c->raw, iv->size);
		t->used += (size_t)iv->klen + iv->size;
		want += iv->size;
		t->n++;
		t->idle = 0;
	}
	if (!rc)
		rc = tidy_cursor(t, iv);
	if (!rc)
		rc = tidy_fetch(s, t);
	if (rc) {
		t->n = 0;
		return rc;
	}
	/* A round without anything left at its floor: the next takes
	 * intervals in fewer extents.  Out of credit (what it read is still
	 * rewritten), or a round at the last floor without anything to
	 * rewrite: done until the next commit. */
	if (t->idle >= count && t->floor > 2) {
		t->floor = t->floor / 2 > 2 ? t->floor / 2 : 2;
		t->idle = 0;
	}
	s->tidy_whole = t->idle >= count;
	if (broke == 2 || s->tidy_whole) {
		if (s->tidy_whole)
			s->tidy_credit = 0;
		atomic_store(&s->tidy_due, 0);
	}
	*nread = t->n;
	return 0;
}

int fdb_store_tidy_write(struct fdb_store *s, uint32_t *i, uint32_t burst)
{
	struct fdb_tidy *t = s->tidy;
	int rc = 0;
	if (s->failed)
		return FLEX_EFAILED;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
	for (; t && *i < t->n && burst && !rc; (*i)++, burst--) {
		const struct fdb_tidy_item *it = &t->it[*i];
		struct fdb_ipath p;
		struct fdb_ival *iv = fdb_index_find(s->index, t->buf + it->at, it->klen, &p);
		/* Only the committer changes the store, so the interval is as
		 * it was read. */
		if (!iv || iv->size != it->size || fdb_index_offset(&p) != it->off)
			continue;
		if ((rc = fdb_run_open(s)) != 0)
			break;
		if ((rc = fdb_run_room(s->run, it->size)) == 0) {
			memcpy(s->run->buf, t->buf + it->at + it->klen, it->size);
			fdb_run_add(s->run, FLEXSPACE_OP_REPLACE, it->off, it->size, it->size, 0);
			rc = fdb_set_tag(s, it->off, FDB_ANCHOR);
		}
		if (rc) {
			s->in_run = 0; /* nothing was applied */
			break;
		}
		if ((rc = fdb_run_apply(s)) != 0) {
			/* As for a commit's run: the space may have failed
			 * part-way through the rewrite (tidying never runs in
			 * a bounded space, whose refusals change nothing). */
			s->failed = rc;
		} else {
			FLEX_KILLPOINT("fdb.tidy.rewritten");
			iv->pieces = 1;
			s->tidy_credit -= it->size < s->tidy_credit ? it->size : s->tidy_credit;
			atomic_fetch_add_explicit(&s->tidy_bytes, it->size, memory_order_relaxed);
		}
	}
	return rc;
}
