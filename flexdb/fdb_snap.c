/*
 * fdb_snap.c - the sparse index and the cache's offsets and fingerprints,
 * kept across a clean close in the file INDEX of the store's directory.
 *
 * Without it an open rebuilds the sparse index from the anchor pairs, a
 * read of every interval's first pair (one random read of DATA per
 * interval when the store is larger than memory), and starts with an
 * empty cache, so the first lookup of every interval reads and decodes
 * all of it.  A clean close writes INDEX: every interval's key, size and
 * pair count and, within the thin entries' share of the cache, the record
 * sizes, key fingerprints and data-file places of the entries the cache
 * held (what a thin entry keeps).  The next open reads INDEX in one
 * sequential pass instead of the anchors when the FlexSpace gives the
 * stamp INDEX was written at (flexspace_stamp) and a sample of intervals
 * agrees with the space (snap_sample): its contents are then the ones
 * INDEX describes.  The file is only a copy of what the FlexSpace holds:
 * one that is missing, cut short, damaged or of other contents is ignored
 * (the anchors are read), and it is written without a sync.  Layout:
 * docs/FORMAT.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "../common/flex_codec.h"
#include "fdb_cache.h"

#define SNAP_NAME "INDEX"
#define SNAP_MAGIC "FDBINDEX"
#define SNAP_FORMAT 1u
#define SNAP_HDR 64u
/* Payload bytes of a block at most; an interval never spans two. */
#define SNAP_BLOCK (1u << 20)
/* Thin entries of more pairs are not kept (an interval's pairs fit a
 * block with room to spare). */
#define SNAP_MAX_PAIRS 65536u
enum { SNAP_UNVERIFIED = 1, SNAP_THIN = 2 };

static uint64_t snap_hdr_csum(const uint8_t *h)
{
	return XXH3_64bits(h, SNAP_HDR - 8);
}

/* Seeded with the stamp too: a block of an older INDEX left in place of
 * this one's (the file is not synced) does not pass. */
static uint64_t snap_block_csum(const uint8_t *p, size_t n, uint64_t stamp, uint64_t k)
{
	return XXH3_64bits_withSeed(p, n, stamp ^ (k * 0x9e3779b97f4a7c15ull));
}

/* Where the interval at [off, off + size) lies in DATA now, for INDEX:
 * a map without holes (malloc'd), else NULL. */
static struct fdb_pmap *snap_locate(struct fdb_store *s, uint64_t off, uint32_t size)
{
	struct fdb_pmap *m = fdb_pmap_locate(s, off, size);
	for (uint32_t i = 0; m && i < m->n; i++)
		if (fdb_pmap_poff(m)[i] == FLEXTREE_HOLE) {
			free(m);
			m = NULL;
		}
	return m;
}

/* ---- writing ------------------------------------------------------------------ */

struct snap_writer {
	const struct flex_io *io;
	int fd;
	uint8_t *buf; /* 8-byte block header, payload, 8-byte checksum */
	size_t used;  /* payload bytes */
	uint64_t off, blocks, stamp;
};

static int snap_flush(struct snap_writer *w)
{
	if (!w->used)
		return 0;
	flex_put_le32(w->buf, (uint32_t)w->used);
	flex_put_le32(w->buf + 4, 0);
	flex_put_le64(w->buf + 8 + w->used, snap_block_csum(w->buf + 8, w->used, w->stamp, w->blocks));
	size_t n = 16 + w->used;
	int rc = flex_io_write_full(w->io, w->fd, w->buf, n, w->off);
	w->off += n;
	w->blocks++;
	w->used = 0;
	return rc;
}

/* Whether the thin form of c (with a map of `pieces`) goes into the
 * file: whole entries (read often enough to be kept whole) before thin
 * ones, within `left`. */
static int snap_take(const struct fdb_cent *c, uint32_t pieces, size_t *left_whole,
		     size_t *left_thin)
{
	if (!c || !c->n || c->n > SNAP_MAX_PAIRS)
		return 0;
	size_t *left = c->raw ? left_whole : left_thin;
	size_t cost = fdb_cent_thin_bytes(c, pieces);
	if (cost > *left)
		return 0;
	*left -= cost;
	return 1;
}

int fdb_snap_save(struct fdb_store *s, const struct flex_io *io, const char *dir, uint64_t stamp)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, SNAP_NAME);
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, SNAP_NAME);
	/* The thin share of the cache: whole entries' first, thin ones' in
	 * what they leave. */
	/* Thin entries keep where their pairs lie while maps pay
	 * (fdb_maps_policy). */
	fdb_maps_policy(s); /* for the store as it is now */
	int maps = __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
	size_t budget = fdb_cache_thin_share(s), whole = 0;
	struct fdb_ipath p;
	for (struct fdb_ival *iv = fdb_index_first(s->index, &p); iv; iv = fdb_index_next(&p))
		if (iv->cache && iv->cache->raw && iv->cache->n <= SNAP_MAX_PAIRS)
			whole += fdb_cent_thin_bytes(iv->cache, maps ? 1 : 0);
	size_t left_whole = whole < budget ? whole : budget, left_thin = budget - left_whole;

	struct snap_writer w = {.io = io, .off = SNAP_HDR, .stamp = stamp};
	w.buf = malloc(SNAP_BLOCK + 16);
	uint32_t *offs = malloc(SNAP_MAX_PAIRS * sizeof(*offs));
	if (!w.buf || !offs) {
		free(w.buf);
		free(offs);
		return -ENOMEM;
	}
	w.fd = io->open(io, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w.fd < 0) {
		free(w.buf);
		free(offs);
		return w.fd;
	}
	int rc = 0;
	uint64_t n = 0;
	for (struct fdb_ival *iv = fdb_index_first(s->index, &p); iv && !rc;
	     iv = fdb_index_next(&p), n++) {
		const struct fdb_cent *c = iv->cache;
		uint32_t count = iv->count;
		/* An entry that disagrees with its interval is left out, and
		 * so is the count: the next load counts again. */
		if (c && (c->size != iv->size || (count != FDB_COUNT_UNKNOWN && c->n != count))) {
			c = NULL;
			count = FDB_COUNT_UNKNOWN;
		}
		struct fdb_pmap *pm = c && maps && c->n <= SNAP_MAX_PAIRS
					  ? snap_locate(s, fdb_index_offset(&p), c->size)
					  : NULL;
		int thin = snap_take(c, pm ? pm->n : 0, &left_whole, &left_thin);
		if (!thin && pm) {
			/* Without its map if only that fits. */
			free(pm);
			pm = NULL;
			thin = snap_take(c, 0, &left_whole, &left_thin);
		}
		uint32_t pieces = thin && pm ? pm->n : 0;
		size_t need = 5 * 3 + 2 + iv->klen +
			      (thin ? 10 + (size_t)pieces * 11 + (size_t)c->n * 7 : 0);
		if (w.used + need > SNAP_BLOCK && (rc = snap_flush(&w)) != 0) {
			free(pm);
			break;
		}
		uint8_t *q = w.buf + 8 + w.used, *q0 = q;
		q += flex_varint_put(q, iv->size);
		q += flex_varint_put(q, count >= UINT32_MAX - 1 ? 0 : count + 1);
		*q++ = (uint8_t)((iv->unverified ? SNAP_UNVERIFIED : 0) | (thin ? SNAP_THIN : 0));
		*q++ = iv->pieces;
		q += flex_varint_put(q, iv->klen);
		memcpy(q, iv->key, iv->klen);
		q += iv->klen;
		if (thin) {
			q += flex_varint_put(q, c->n);
			q += flex_varint_put(q, pieces);
			for (uint32_t i = 0; i < pieces; i++) {
				uint64_t po = fdb_pmap_poff(pm)[i];
				q += flex_varint_put(q, pm->loff[i]);
				flex_put_le32(q, (uint32_t)po);
				flex_put_le16(q + 4, (uint16_t)(po >> 32));
				q += 6;
			}
			fdb_cent_offsets(c, offs);
			for (uint32_t i = 0; i < c->n; i++)
				q += flex_varint_put(q, (i + 1 < c->n ? offs[i + 1] : c->size) -
							    offs[i]);
			const uint16_t *fps = fdb_cent_fps(c);
			for (uint32_t i = 0; i < c->n; i++, q += 2)
				flex_put_le16(q, fps[i]);
		}
		free(pm);
		w.used += (size_t)(q - q0);
	}
	if (!rc)
		rc = snap_flush(&w);
	if (!rc) {
		uint8_t *h = w.buf;
		memset(h, 0, SNAP_HDR);
		memcpy(h, SNAP_MAGIC, 8);
		flex_put_le32(h + 8, SNAP_FORMAT);
		flex_put_le32(h + 12, SNAP_BLOCK);
		flex_put_le64(h + 16, stamp);
		flex_put_le64(h + 24, s->bytes);
		flex_put_le64(h + 32, n);
		flex_put_le64(h + 40, w.blocks);
		flex_put_le64(h + 48, w.off);
		flex_put_le64(h + SNAP_HDR - 8, snap_hdr_csum(h));
		rc = flex_io_write_full(io, w.fd, h, SNAP_HDR, 0);
	}
	int crc = io->close(io, w.fd);
	if (!rc)
		rc = crc;
	if (!rc)
		rc = io->rename(io, tmp, path);
	if (rc)
		(void)io->unlink(io, tmp);
	free(w.buf);
	free(offs);
	return rc;
}

/* ---- reading ------------------------------------------------------------------ */

/* An interval read from the file, where it starts, and the thin entry
 * it had if the cache has room for it. */
struct snap_item {
	struct fdb_ival *iv;
	struct fdb_cent *c;
	uint64_t off;
};

struct snap_reader {
	struct fdb_store *s;
	struct fdb_index *index;
	struct snap_item *items;
	size_t n, cap;
	uint64_t off;	   /* in the space, of the next interval */
	uint64_t size;	   /* of the space */
	uint64_t keys, uncounted;
	size_t room;	   /* for thin entries, left in the cache's share */
	int maps;	   /* their maps are kept, stamped mstamp */
	uint64_t mstamp;
	uint32_t *roff;	   /* an interval's offsets and fingerprints, as read */
	uint16_t *rfp;
	const struct fdb_ival *prev;
};

static const uint8_t *get_varint(const uint8_t *p, const uint8_t *end, uint32_t *v)
{
	size_t k = p ? flex_varint_get(p, end, v) : 0;
	return k ? p + k : NULL;
}

/* Parses one interval from [p, end) into r; returns where it ended, or
 * NULL when the bytes are not a sound interval after r->prev. */
static const uint8_t *snap_item(struct snap_reader *r, const uint8_t *p, const uint8_t *end)
{
	uint32_t size, count, klen, n = 0;
	p = get_varint(p, end, &size);
	p = get_varint(p, end, &count);
	if (!p || end - p < 2)
		return NULL;
	uint8_t flags = *p++, pieces = *p++;
	p = get_varint(p, end, &klen);
	/* A record takes 7 bytes at least (two varints, a key byte and a
	 * checksum), so a count beyond size / 7 is not one. */
	if (!p || (size_t)(end - p) < klen || klen > FLEXDB_MAX_KEY || (flags & ~3u) ||
	    (count && count - 1 > size / 7))
		return NULL;
	const uint8_t *key = p;
	p += klen;
	/* The first interval has the empty key, every other a larger key than
	 * the one before and some bytes; only the one interval of an empty
	 * store has none (and no pairs). */
	if (r->prev ? !klen || !size || fdb_keycmp(r->prev->key, r->prev->klen, key, klen) >= 0
		    : klen != 0 || (!size && (r->size || count != 1 || (flags & SNAP_THIN))))
		return NULL;
	struct fdb_cent *c = NULL;
	if (flags & SNAP_THIN) {
		uint32_t np;
		p = get_varint(p, end, &n);
		p = get_varint(p, end, &np);
		if (!p || !n || n > SNAP_MAX_PAIRS || (count && count - 1 != n) ||
		    np > FLEXSPACE_LOCATE_MAX || (size_t)(end - p) < 7 * (size_t)np)
			return NULL;
		uint32_t loff[FLEXSPACE_LOCATE_MAX];
		uint64_t poff[FLEXSPACE_LOCATE_MAX];
		for (uint32_t i = 0; i < np; i++) {
			p = get_varint(p, end, &loff[i]);
			if (!p || (i ? loff[i] <= loff[i - 1] : loff[i] != 0) || loff[i] >= size ||
			    end - p < 6)
				return NULL;
			poff[i] = flex_get_le32(p) | (uint64_t)flex_get_le16(p + 4) << 32;
			if (poff[i] == FLEXTREE_HOLE)
				return NULL;
			p += 6;
		}
		uint64_t at = 0;
		for (uint32_t i = 0; i < n && p; i++) {
			uint32_t rs;
			p = get_varint(p, end, &rs);
			r->roff[i] = (uint32_t)at;
			at += rs;
			if (p && (!rs || at > size))
				p = NULL;
		}
		if (!p || at != size || (size_t)(end - p) < 2 * (size_t)n)
			return NULL;
		for (uint32_t i = 0; i < n; i++)
			r->rfp[i] = flex_get_le16(p + 2 * i);
		p += 2 * (size_t)n;
		/* Checked whole; kept while the thin share has room (without
		 * its map if only that fits). */
		uint32_t keep = r->maps ? np : 0;
		size_t cost = fdb_thin_bytes(n, size, r->roff, keep);
		if (cost > r->room && keep) {
			keep = 0;
			cost = fdb_thin_bytes(n, size, r->roff, 0);
		}
		if (cost <= r->room) {
			c = fdb_thin_new(n, size, r->roff, r->rfp, keep, loff, poff, r->mstamp);
			if (!c)
				return NULL;
			r->room -= cost;
		}
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 1024;
		struct snap_item *v = realloc(r->items, cap * sizeof(*v));
		if (!v) {
			fdb_cent_free(c);
			return NULL;
		}
		r->items = v;
		r->cap = cap;
	}
	struct fdb_ival *iv = fdb_ival_new(key, klen);
	if (!iv) {
		fdb_cent_free(c);
		return NULL;
	}
	iv->size = size;
	iv->pieces = pieces;
	iv->unverified = (flags & SNAP_UNVERIFIED) != 0;
	iv->count = count ? count - 1 : FDB_COUNT_UNKNOWN;
	if (count)
		r->keys += count - 1;
	else
		r->uncounted++;
	if (fdb_index_append(r->index, iv, r->off)) {
		fdb_cent_free(c);
		free(iv->key);
		free(iv);
		return NULL;
	}
	r->items[r->n++] = (struct snap_item){iv, c, r->off};
	r->off += size;
	r->prev = iv;
	return p;
}

/* Reads the blocks of the file, checking each, into r. */
static int snap_blocks(struct snap_reader *r, const struct flex_io *io, int fd, uint64_t blocks,
		       uint64_t fbytes, uint64_t stamp)
{
	uint8_t *buf = malloc(SNAP_BLOCK + 16);
	if (!buf)
		return -ENOMEM;
	uint64_t off = SNAP_HDR;
	int rc = 0;
	for (uint64_t b = 0; b < blocks && !rc; b++) {
		rc = off + 8 > fbytes ? -EINVAL : flex_io_read_full(io, fd, buf, 8, off);
		uint32_t len = rc ? 0 : flex_get_le32(buf);
		if (!rc && (!len || len > SNAP_BLOCK || flex_get_le32(buf + 4) ||
			    off + 16 + len > fbytes))
			rc = -EINVAL;
		if (!rc)
			rc = flex_io_read_full(io, fd, buf + 8, len + 8, off + 8);
		if (!rc && flex_get_le64(buf + 8 + len) != snap_block_csum(buf + 8, len, stamp, b))
			rc = -EINVAL;
		const uint8_t *p = buf + 8, *end = buf + 8 + len;
		while (!rc && p < end)
			if (!(p = snap_item(r, p, end)))
				rc = -EINVAL;
		off += 16 + (uint64_t)len;
	}
	if (!rc && off != fbytes)
		rc = -EINVAL;
	free(buf);
	return rc;
}

/* A stamp names contents within one space's history.  Against an INDEX
 * beside another space of the same shape, 16 intervals spread over the
 * file, the first and the last among them, are checked against the
 * space: the extent at each one's start carries the anchor tag (but the
 * first's), its pairs are sound, in order, from the interval's key (which
 * stays when the pair it came from is deleted) up to the next interval's
 * key, as many as the file says, with the offsets and fingerprints of its
 * thin entry, and its map says where they lie. */
#define SNAP_SAMPLES 16
static int snap_check(struct fdb_store *s, struct snap_reader *r, size_t i)
{
	const struct fdb_ival *iv = r->items[i].iv;
	const struct fdb_ival *nx = i + 1 < r->n ? r->items[i + 1].iv : NULL;
	const struct fdb_cent *t = r->items[i].c;
	uint64_t off = r->items[i].off, start;
	uint16_t tag;
	if (i && (flexspace_tag_get(s->fs, off, &tag, &start) || tag != FDB_ANCHOR || start != off))
		return -ESTALE;
	if (!iv->size)
		return 0;
	uint8_t *raw = malloc(iv->size);
	if (!raw)
		return -ENOMEM;
	ssize_t n = flexspace_read(s->fs, raw, off, iv->size);
	if (n < 0 || (size_t)n != iv->size) {
		free(raw);
		return n < 0 ? (int)n : -ESTALE;
	}
	struct fdb_cent *c;
	int rc = fdb_cent_from_raw(iv, raw, iv->size, NULL, &c) ? -ESTALE : 0;
	if (rc)
		return rc;
	if (!c->n) {
		rc = -ESTALE;
	} else if (nx) {
		const uint8_t *k, *v;
		uint32_t kl, vl, sz;
		fdb_cent_pair(c, c->n - 1, &k, &kl, &v, &vl, &sz);
		if (fdb_keycmp(k, kl, nx->key, nx->klen) >= 0)
			rc = -ESTALE;
	}
	if (!rc && t && t->n != c->n)
		rc = -ESTALE;
	if (!rc && t) {
		fdb_cent_offsets(t, r->roff);
		if (memcmp(r->roff, c->off, c->n * sizeof(*c->off)) ||
		    memcmp(fdb_cent_fps(t), c->fp, c->n * sizeof(*c->fp)))
			rc = -ESTALE;
	}
	fdb_cent_free(c);
	if (!rc && t && t->pieces) {
		struct fdb_pmap *m = snap_locate(s, off, iv->size);
		if (!fdb_thin_map_is(t, m))
			rc = -ESTALE;
		free(m);
	}
	return rc;
}

static int snap_sample(struct fdb_store *s, struct snap_reader *r)
{
	int rc = 0;
	for (size_t k = 0; k < SNAP_SAMPLES && !rc; k++) {
		size_t i = (r->n - 1) * k / (SNAP_SAMPLES - 1);
		if (!k || i != (r->n - 1) * (k - 1) / (SNAP_SAMPLES - 1))
			rc = snap_check(s, r, i);
	}
	return rc;
}

int fdb_snap_load(struct fdb_store *s, const struct flex_io *io, const char *dir, uint64_t stamp)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, SNAP_NAME);
	int fd = io->open(io, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	uint8_t h[SNAP_HDR];
	uint64_t fbytes = 0;
	int rc = io->fsize(io, fd, &fbytes);
	if (!rc)
		rc = fbytes < SNAP_HDR ? -EINVAL : flex_io_read_full(io, fd, h, SNAP_HDR, 0);
	if (!rc && (memcmp(h, SNAP_MAGIC, 8) || flex_get_le64(h + SNAP_HDR - 8) != snap_hdr_csum(h) ||
		    flex_get_le32(h + 8) != SNAP_FORMAT || flex_get_le32(h + 12) != SNAP_BLOCK ||
		    flex_get_le64(h + 48) != fbytes))
		rc = -EINVAL;
	uint64_t size = flexspace_size(s->fs);
	if (!rc && (flex_get_le64(h + 16) != stamp || flex_get_le64(h + 24) != size))
		rc = -ESTALE;
	struct snap_reader r = {.s = s, .size = size, .room = fdb_cache_thin_room(s)};
	r.roff = malloc(SNAP_MAX_PAIRS * sizeof(*r.roff));
	r.rfp = malloc(SNAP_MAX_PAIRS * sizeof(*r.rfp));
	if (!rc && (!r.roff || !r.rfp))
		rc = -ENOMEM;
	/* Maps are stamped now: the contents are those INDEX describes, so
	 * the bytes lie where it says. */
	struct flextree_mapping m0[FLEXSPACE_LOCATE_MAX];
	size_t nm0 = 0;
	r.maps = !rc && size && !flexspace_locate(s->fs, 0, 1, m0, &nm0, &r.mstamp);
	if (!rc && !(r.index = fdb_index_new()))
		rc = -ENOMEM;
	if (!rc)
		rc = snap_blocks(&r, io, fd, flex_get_le64(h + 40), fbytes, stamp);
	if (!rc && (r.n != flex_get_le64(h + 32) || r.off != size || !r.n))
		rc = -EINVAL;
	io->close(io, fd);
	if (!rc)
		rc = snap_sample(s, &r);
	free(r.roff);
	free(r.rfp);
	if (rc) {
		for (size_t i = 0; i < r.n; i++)
			fdb_cent_free(r.items[i].c);
		if (r.index)
			fdb_index_free(r.index);
		free(r.items);
		return rc;
	}
	fdb_index_free(s->index);
	s->index = r.index;
	s->keys = r.keys;
	s->uncounted = r.uncounted;
	/* The thin entries (within the thin share: snap_item). */
	for (size_t i = 0; i < r.n; i++) {
		struct fdb_cent *c = r.items[i].c;
		if (c && fdb_cache_attach(s, r.items[i].iv, c, 0))
			fdb_cent_free(c);
	}
	free(r.items);
	return 0;
}
