/*
 * fdb_thin.c - thin cache entries and maps: where an interval's pairs lie.
 *
 * A thin entry is what the interval cache keeps of an interval when it
 * does not keep its bytes: each pair's key fingerprint and where its
 * record starts, and where the interval's bytes lie in the FlexSpace's
 * data file (its map), so that a lookup reads only the record whose
 * fingerprint matches, without a FlexTree lookup while the bytes have not
 * moved.  fdb_cache.c makes them of whole entries and drops them, and
 * fdb_snap.c makes them of what INDEX holds; this file lays them out, and
 * cuts maps out of the FlexSpace's reports.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_cache.h"

/* ---- where an interval's bytes lie ----------------------------------------- */

static size_t pmap_head(uint32_t n)
{
	return (sizeof(struct fdb_pmap) + (size_t)n * sizeof(uint32_t) + 7) & ~(size_t)7;
}

size_t fdb_pmap_bytes(uint32_t n)
{
	return pmap_head(n) + (size_t)n * sizeof(uint64_t);
}

static uint64_t *pmap_poff(const struct fdb_pmap *m)
{
	return (uint64_t *)((uint8_t *)m + pmap_head(m->n));
}

uint64_t *fdb_pmap_poff(const struct fdb_pmap *m)
{
	return pmap_poff(m);
}

struct fdb_pmap *fdb_pmap_new(const struct flextree_mapping *loc, size_t n, uint64_t stamp,
			      uint64_t off, uint32_t size)
{
	size_t a = 0;
	while (a < n && loc[a].loff + loc[a].len <= off)
		a++;
	size_t b = a;
	while (b < n && loc[b].loff < off + size)
		b++;
	if (a == b || loc[a].loff > off || loc[b - 1].loff + loc[b - 1].len < off + size)
		return NULL;
	struct fdb_pmap *m = malloc(fdb_pmap_bytes((uint32_t)(b - a)));
	if (!m)
		return NULL;
	m->stamp = stamp;
	m->n = (uint32_t)(b - a);
	uint64_t *poff = pmap_poff(m);
	for (size_t i = a; i < b; i++) {
		uint64_t skip = i == a ? off - loc[i].loff : 0;
		m->loff[i - a] = i == a ? 0 : (uint32_t)(loc[i].loff - off);
		poff[i - a] = loc[i].poff == FLEXTREE_HOLE ? FLEXTREE_HOLE : loc[i].poff + skip;
	}
	return m;
}

/* ---- thin entries ------------------------------------------------------------ */

/* A thin entry's arrays follow its head (FDB_CENT_HEAD bytes), the widest
 * first so that each is aligned:
 *	uint64_t stamp, poff[pieces]	its map, when it has one
 *	uint32_t loff[pieces - 1]	where the pieces after the first start
 *	uint32_t off[n]			THIN_OFF32
 *	uint16_t fp[n]
 *	uint16_t off[n]			THIN_OFF16
 *	uint8_t rsize[n]		THIN_SIZE8: each record's size
 * Records of up to 255 bytes (a 16-byte key and a 100-byte value take
 * 122) cost a byte each beside their fingerprint, and a lookup adds up
 * the sizes before the record it wants (it passes the fingerprints of as
 * many anyway); offsets otherwise, 16-bit in an interval of less than
 * 64 KiB.  With one piece, 24 pairs take 128 bytes where a struct and
 * 32-bit offsets took 256. */
enum { THIN_SIZE8 = 1, THIN_OFF16 = 2, THIN_OFF32 = 4 };

struct thin_parts {
	uint64_t *stamp, *poff;
	uint32_t *loff, *off32;
	uint16_t *fp, *off16;
	uint8_t *rsize;
};

static size_t thin_len(uint32_t n, int kind, uint32_t pieces)
{
	size_t b = FDB_CENT_HEAD + (2 + (size_t)kind) * n;
	if (pieces)
		b += 8 + 12 * (size_t)pieces - 4;
	return (b + 7) & ~(size_t)7;
}

/* Where c's arrays are.  Writable: fdb_thin_new fills them in; nothing else
 * writes an entry that is in the cache. */
static inline void thin_parts(const struct fdb_cent *c, struct thin_parts *p)
{
	uint8_t *q = (uint8_t *)(uintptr_t)c + FDB_CENT_HEAD;
	size_t n = c->n, np = c->pieces;
	p->stamp = p->poff = NULL;
	p->loff = NULL;
	if (np) {
		p->stamp = (uint64_t *)q;
		p->poff = p->stamp + 1;
		q += 8 * (1 + np);
		p->loff = (uint32_t *)q;
		q += 4 * (np - 1);
	}
	p->off32 = (uint32_t *)q;
	q += c->thin == THIN_OFF32 ? 4 * n : 0;
	p->fp = (uint16_t *)q;
	q += 2 * n;
	p->off16 = (uint16_t *)q;
	q += c->thin == THIN_OFF16 ? 2 * n : 0;
	p->rsize = q;
}

/* How a thin entry keeps the offsets off[0..n) of an interval of size
 * bytes (records back to back from 0). */
static int thin_kind(uint32_t n, uint32_t size, const uint32_t *off)
{
	int small = !n || off[0] == 0;
	for (uint32_t i = 0; i < n && small; i++)
		small = (i + 1 < n ? off[i + 1] : size) - off[i] <= UINT8_MAX;
	return small ? THIN_SIZE8 : size <= UINT16_MAX ? THIN_OFF16 : THIN_OFF32;
}

size_t fdb_thin_bytes(uint32_t n, uint32_t size, const uint32_t *off, uint32_t pieces)
{
	return thin_len(n, thin_kind(n, size, off), pieces);
}

size_t fdb_cent_thin_bytes(const struct fdb_cent *c, uint32_t pieces)
{
	return c->thin ? thin_len(c->n, c->thin, pieces)
		       : fdb_thin_bytes(c->n, c->size, c->off, pieces);
}

struct fdb_cent *fdb_thin_new(uint32_t n, uint32_t size, const uint32_t *off, const uint16_t *fp,
			      uint32_t pieces, const uint32_t *loff, const uint64_t *poff,
			      uint64_t stamp)
{
	int kind = thin_kind(n, size, off);
	size_t len = thin_len(n, kind, pieces);
	if (pieces > UINT16_MAX)
		return NULL;
	struct fdb_cent *t = calloc(1, len);
	if (!t)
		return NULL;
	t->bytes = len;
	t->size = size;
	t->n = n;
	t->slot = UINT32_MAX;
	t->thin = (uint8_t)kind;
	t->pieces = (uint16_t)pieces;
	FLEX_ATOMIC_OBJ(&t->ref, sizeof(t->ref));
	struct thin_parts p;
	thin_parts(t, &p);
	if (pieces) {
		*p.stamp = stamp;
		memcpy(p.poff, poff, pieces * sizeof(*poff));
		if (pieces > 1)
			memcpy(p.loff, loff + 1, (pieces - 1) * sizeof(*loff));
	}
	if (n)
		memcpy(p.fp, fp, n * sizeof(*fp));
	for (uint32_t i = 0; i < n; i++) {
		if (kind == THIN_OFF32)
			p.off32[i] = off[i];
		else if (kind == THIN_OFF16)
			p.off16[i] = (uint16_t)off[i];
		else
			p.rsize[i] = (uint8_t)((i + 1 < n ? off[i + 1] : size) - off[i]);
	}
	return t;
}

const uint16_t *fdb_cent_fps(const struct fdb_cent *c)
{
	if (!c->thin)
		return c->fp;
	struct thin_parts p;
	thin_parts(c, &p);
	return p.fp;
}

int fdb_thin_next(const struct fdb_cent *c, uint16_t fp, uint32_t *i, uint32_t *at, uint32_t *sz)
{
	struct thin_parts p;
	thin_parts(c, &p);
	uint32_t j = *i;
	while (j < c->n && p.fp[j] != fp)
		j++;
	if (j >= c->n)
		return 0;
	uint32_t a = 0, b;
	if (c->thin == THIN_SIZE8) {
		for (uint32_t k = 0; k < j; k++)
			a += p.rsize[k];
		b = a + p.rsize[j];
	} else if (c->thin == THIN_OFF16) {
		a = p.off16[j];
		b = j + 1 < c->n ? p.off16[j + 1] : c->size;
	} else {
		a = p.off32[j];
		b = j + 1 < c->n ? p.off32[j + 1] : c->size;
	}
	*i = j;
	*at = a;
	*sz = b - a;
	return 1;
}

void fdb_cent_offsets(const struct fdb_cent *c, uint32_t *off)
{
	if (!c->thin) {
		if (c->n)
			memcpy(off, c->off, c->n * sizeof(*off));
		return;
	}
	struct thin_parts p;
	thin_parts(c, &p);
	uint32_t a = 0;
	for (uint32_t i = 0; i < c->n; i++) {
		if (c->thin == THIN_SIZE8) {
			off[i] = a;
			a += p.rsize[i];
		} else {
			off[i] = c->thin == THIN_OFF16 ? p.off16[i] : p.off32[i];
		}
	}
}

int fdb_thin_map_is(const struct fdb_cent *c, const struct fdb_pmap *m)
{
	if (!c->thin || !m || c->pieces != m->n || m->loff[0] != 0)
		return 0;
	struct thin_parts p;
	thin_parts(c, &p);
	return !memcmp(p.poff, pmap_poff(m), m->n * sizeof(uint64_t)) &&
	       !memcmp(p.loff, m->loff + 1, (m->n - 1) * sizeof(uint32_t));
}

/* Where piece k of a thin entry's map starts in its interval. */
static uint32_t piece_start(const struct thin_parts *p, uint32_t k)
{
	return k ? p->loff[k - 1] : 0;
}

/* Reads bytes [at, at + len) of thin entry c's interval through its map
 * into buf.  Returns 0, -ESTALE (no map, or the FlexSpace moved the bytes
 * since: the caller reads through the FlexTree), or an error. */
#define FDB_PMAP_PIECES 8
int fdb_thin_read(struct fdb_store *s, const struct fdb_cent *c, uint32_t at, uint32_t len,
		  uint8_t *buf)
{
	if (!c->thin || !c->pieces)
		return -ESTALE;
	struct thin_parts p;
	thin_parts(c, &p);
	uint32_t np = c->pieces;
	uint32_t lo = 0, hi = np; /* the last piece starting at or before at */
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (piece_start(&p, mid) <= at)
			lo = mid;
		else
			hi = mid;
	}
	struct flextree_mapping v[FDB_PMAP_PIECES];
	uint32_t pos = at, end = at + len;
	uint8_t *out = buf;
	/* FDB_PMAP_PIECES pieces per read (a record of a few pieces, most
	 * often one). */
	for (uint32_t k = lo; pos < end;) {
		size_t nv = 0;
		uint8_t *from = out;
		for (; k < np && pos < end && nv < FDB_PMAP_PIECES; k++) {
			uint32_t pend = k + 1 < np ? piece_start(&p, k + 1) : c->size;
			uint32_t take = (pend < end ? pend : end) - pos;
			v[nv].loff = pos;
			v[nv].len = take;
			v[nv++].poff = p.poff[k] == FLEXTREE_HOLE
					   ? FLEXTREE_HOLE
					   : p.poff[k] + (pos - piece_start(&p, k));
			pos += take;
			out += take;
		}
		if (!nv)
			return -ESTALE; /* the map ends before the interval */
		int rc = flexspace_read_located(s->fs, from, v, nv, *p.stamp);
		if (rc)
			return rc;
	}
	return 0;
}

int fdb_thin_pieces(const struct fdb_cent *c, struct flextree_mapping *v, size_t cap, size_t *nv,
		    uint64_t *stamp)
{
	if (!c->thin || !c->pieces || cap - *nv < c->pieces)
		return -ESTALE;
	struct thin_parts p;
	thin_parts(c, &p);
	for (uint32_t k = 0; k < c->pieces; k++) {
		uint32_t a = piece_start(&p, k);
		uint32_t b = k + 1 < c->pieces ? piece_start(&p, k + 1) : c->size;
		v[(*nv)++] = (struct flextree_mapping){.loff = a, .poff = p.poff[k], .len = b - a};
	}
	if (*p.stamp < *stamp)
		*stamp = *p.stamp;
	return 0;
}

struct fdb_cent *fdb_thin_copy(const struct fdb_cent *c, const struct fdb_pmap *m)
{
	uint32_t small[2 * FDB_SPLIT_PAIRS];
	uint32_t *off = !c->thin		   ? c->off
			: c->n <= 2 * FDB_SPLIT_PAIRS ? small
						      : malloc(c->n * sizeof(*off));
	if (!off)
		return NULL;
	if (c->thin)
		fdb_cent_offsets(c, off);
	struct fdb_cent *t =
	    fdb_thin_new(c->n, c->size, off, fdb_cent_fps(c), m ? m->n : 0, m ? m->loff : NULL,
			 m ? fdb_pmap_poff(m) : NULL, m ? m->stamp : 0);
	if (t)
		t->iv = c->iv;
	if (c->thin && off != small)
		free(off);
	return t;
}

struct fdb_pmap *fdb_pmap_locate(struct fdb_store *s, uint64_t off, uint32_t size)
{
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	size_t n;
	uint64_t stamp;
	if (!size || flexspace_locate(s->fs, off, size, loc, &n, &stamp) || !n)
		return NULL;
	return fdb_pmap_new(loc, n, stamp, off, size);
}
