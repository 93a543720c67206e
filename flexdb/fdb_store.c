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
 * The interval cache holds intervals as their raw bytes plus the offset
 * and a 16-bit key fingerprint of each pair, and is updated write-through
 * by every change; CLOCK picks victims, and every byte of an entry is
 * charged to the cache size.  A victim is first made *thin* (its raw bytes
 * dropped), while thin entries take at most a quarter of the cache: a
 * lookup through one reads only the record whose fingerprint matches, so
 * a cache smaller than the store still spares most lookups the read of a
 * whole interval.  A thin entry also keeps where its interval's bytes lie
 * in the FlexSpace's data file (struct fdb_pmap, from the read that loaded
 * the interval or from the FlexTree when the entry is made thin), so that
 * the record is read without a FlexTree lookup: after random inserts an
 * interval is about one extent per pair, and the tree of a large store
 * does not fit its leaf cache.  The FlexSpace says when the bytes moved
 * (garbage collection freed their segment), and the lookup then goes
 * through the tree.  An entry larger than a quarter of the cache is never
 * kept.  Readers build entries from the intervals they read under the
 * shared lock and offer them (fdb_cands); they are attached under the
 * exclusive lock if no change came in between.  Intervals whose pairs are
 * split across extents are defragmented at their next update.  Reads do
 * not ask for rewrites (the paper's access-driven defragmentation): with
 * thin entries a lookup reads one pair whatever the layout, and rewriting
 * what reads touched made GC move five times the bytes rewritten and
 * stalled YCSB-C for 0.7 s (0.46x RocksDB with it, 1.05x without).
 *
 * Locking: the caller holds db->lock, shared for fdb_store_get
 * and fdb_store_scan, exclusive for everything else (flexdb.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_int.h"

/* Split thresholds.  The paper splits at 16 pairs; an interval costs
 * about 80 bytes of memory whether cached or not (its index entry, struct
 * and key), so 32 pairs halve what the sparse index takes per pair (at 1M
 * pairs of 116 bytes: 89k intervals and 47.6 MB of anonymous memory at
 * open with 16, 45k and 40.5 MB with 32), while an interval of ~22 pairs
 * of this size still fits in one page of DATA.  Not on disk: a store
 * opened with other thresholds re-splits as it is written. */
#define FDB_SPLIT_BYTES (16u << 10)
#define FDB_SPLIT_PAIRS 32u
/* An interval this small is merged into its successor if the two together
 * stay well below the split thresholds (so they do not split again). */
#define FDB_MERGE_BYTES (4u << 10)
#define FDB_MERGE_PAIRS 4u
#define FDB_ANCHOR 1
/* Bytes of an anchor pair read first at open: a pair of a short key and
 * value is then read and verified in one small copy. */
#define FDB_ANCHOR_PEEK 256
/* Bytes of uncached intervals a scan or the committer's prefetch reads in
 * one FlexSpace read: pairs a commit appended together lie together in the
 * data file even when other pairs separate them, so reading neighbouring
 * intervals at once needs a few reads where one per interval needed a few
 * each. */
#define FDB_SCAN_READ_BYTES (128u << 10)
#define FDB_SCAN_READ_IVALS 32

/* ---- cache entries -------------------------------------------------------- */

static struct fdb_cent *cent_new(void)
{
	struct fdb_cent *c = calloc(1, sizeof(*c));
	if (c) {
		c->bytes = sizeof(*c);
		c->slot = UINT32_MAX;
		/* Readers set the CLOCK bit under the shared lock. */
		FDB_ATOMIC_OBJ(&c->ref, sizeof(c->ref));
	}
	return c;
}

/* ---- where an interval's bytes lie ----------------------------------------- */

static size_t pmap_head(uint32_t n)
{
	return (sizeof(struct fdb_pmap) + (size_t)n * sizeof(uint32_t) + 7) & ~(size_t)7;
}

static size_t pmap_bytes(uint32_t n)
{
	return pmap_head(n) + (size_t)n * sizeof(uint64_t);
}

static uint64_t *pmap_poff(const struct fdb_pmap *m)
{
	return (uint64_t *)((uint8_t *)m + pmap_head(m->n));
}

/* The map of the interval at [off, off + size), cut out of a read's
 * report loc[0..n) that covers it; NULL when none (or out of memory). */
static struct fdb_pmap *pmap_new(const struct flextree_mapping *loc, size_t n, uint64_t stamp,
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
	struct fdb_pmap *m = malloc(pmap_bytes((uint32_t)(b - a)));
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

/* Reads bytes [at, at + len) of c's interval through its map into buf.
 * Returns 0, -ESTALE (no map, or the FlexSpace moved the bytes since: the
 * caller reads through the FlexTree), or an error. */
#define FDB_PMAP_PIECES 8
static int pmap_read(struct fdb_store *s, const struct fdb_cent *c, uint32_t at, uint32_t len,
		     uint8_t *buf)
{
	const struct fdb_pmap *m = c->map;
	if (!m)
		return -ESTALE;
	uint32_t lo = 0, hi = m->n; /* the last piece starting at or before at */
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (m->loff[mid] <= at)
			lo = mid;
		else
			hi = mid;
	}
	const uint64_t *poff = pmap_poff(m);
	struct flextree_mapping v[FDB_PMAP_PIECES];
	size_t nv = 0;
	uint32_t pos = at, end = at + len;
	for (uint32_t k = lo; k < m->n && pos < end && nv < FDB_PMAP_PIECES; k++) {
		uint32_t pend = k + 1 < m->n ? m->loff[k + 1] : c->size;
		uint32_t take = (pend < end ? pend : end) - pos;
		v[nv].loff = pos;
		v[nv].len = take;
		v[nv++].poff = poff[k] == FLEXTREE_HOLE ? FLEXTREE_HOLE : poff[k] + (pos - m->loff[k]);
		pos += take;
	}
	if (pos != end)
		return -ESTALE;
	return flexspace_read_located(s->fs, buf, v, nv, m->stamp);
}

static void cent_free(struct fdb_cent *c)
{
	if (!c)
		return;
	free(c->raw);
	if (!c->packed) {
		free(c->off);
		free(c->fp);
	}
	if (c->map_own)
		free(c->map);
	free(c);
}

/* An entry about to change forgets where its bytes were. */
static void cent_unmap(struct fdb_cent *c)
{
	if (c->map_own)
		free(c->map);
	c->map = NULL;
	c->map_own = 0;
}

/* What an entry is charged: its raw bytes, two small arrays and its map. */
static size_t cent_bytes(const struct fdb_cent *c)
{
	return sizeof(*c) + c->rawcap + (size_t)c->cap * (sizeof(uint32_t) + sizeof(uint16_t)) +
	       (c->map ? pmap_bytes(c->map->n) : 0);
}

/* What a thin copy of c would be charged (cent_thin). */
static size_t cent_thin_bytes(const struct fdb_cent *c)
{
	return sizeof(*c) + (size_t)c->n * (sizeof(uint32_t) + sizeof(uint16_t)) +
	       (c->map ? pmap_bytes(c->map->n) : 0);
}

/* A copy of c without its raw bytes, its offsets and fingerprints right
 * after the struct (one allocation, so a lookup misses the cache once
 * less): what a thin entry is.  c is left as it was (readers may hold
 * it).  NULL when out of memory. */
static struct fdb_cent *cent_thin(const struct fdb_cent *c, const struct fdb_pmap *pm)
{
	size_t arrays = (size_t)c->n * (sizeof(uint32_t) + sizeof(uint16_t));
	arrays = (arrays + 7) & ~(size_t)7;
	size_t map = pm ? pmap_bytes(pm->n) : 0;
	struct fdb_cent *t = malloc(sizeof(*t) + arrays + map);
	if (!t)
		return NULL;
	memcpy(t, c, sizeof(*t));
	t->raw = NULL;
	t->rawcap = 0;
	t->off = (uint32_t *)(t + 1);
	t->fp = (uint16_t *)(t->off + c->n);
	if (c->n) {
		memcpy(t->off, c->off, c->n * sizeof(uint32_t));
		memcpy(t->fp, c->fp, c->n * sizeof(uint16_t));
	}
	t->map = NULL;
	t->map_own = 0;
	if (map) {
		t->map = (struct fdb_pmap *)((uint8_t *)(t + 1) + arrays);
		memcpy(t->map, pm, map);
	}
	t->cap = c->n;
	t->packed = 1;
	t->slot = UINT32_MAX;
	t->bytes = cent_bytes(t);
	FDB_ATOMIC_OBJ(&t->ref, sizeof(t->ref));
	return t;
}

/* Packs a private entry (cent_thin's layout, cent_reserve moves the
 * arrays out again when the entry grows), keeping its raw bytes unless
 * `thin`: what stays of a thin one lets a lookup read just the record it
 * wants from the FlexSpace instead of the whole interval.  The entry
 * moves: returns it (c itself, unpacked, when out of memory). */
static struct fdb_cent *cent_pack(struct fdb_cent *c, int thin)
{
	struct fdb_cent *t = cent_thin(c, thin ? c->map : NULL);
	if (thin) {
		free(c->raw);
		c->raw = NULL;
		c->rawcap = 0;
		c->bytes = cent_bytes(c);
	}
	if (!t)
		return c;
	t->raw = c->raw; /* moved: NULL when thin */
	t->rawcap = c->rawcap;
	if (!thin) {
		t->map = c->map; /* moved too */
		t->map_own = c->map_own;
		c->map_own = 0;
	}
	t->bytes = cent_bytes(t);
	c->raw = NULL;
	cent_free(c);
	return t;
}

/* Makes room for n pairs of size bytes in all; the entry is about to
 * change, so its map goes. */
static int cent_reserve(struct fdb_cent *c, uint32_t n, uint32_t size)
{
	cent_unmap(c);
	if (n > c->cap && c->packed) {
		/* Arrays inside the struct's allocation: move them out. */
		uint32_t cap = c->cap > 8 ? c->cap : 8;
		while (cap < n)
			cap *= 2;
		uint32_t *o = malloc((size_t)cap * sizeof(*o));
		uint16_t *f = malloc((size_t)cap * sizeof(*f));
		if (!o || !f) {
			free(o);
			free(f);
			return -ENOMEM;
		}
		if (c->n) {
			memcpy(o, c->off, c->n * sizeof(*o));
			memcpy(f, c->fp, c->n * sizeof(*f));
		}
		c->off = o;
		c->fp = f;
		c->cap = cap;
		c->packed = 0;
	}
	if (n > c->cap) {
		uint32_t cap = c->cap ? c->cap : 16;
		while (cap < n)
			cap *= 2;
		uint32_t *o = realloc(c->off, (size_t)cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		c->off = o;
		uint16_t *f = realloc(c->fp, (size_t)cap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		c->fp = f;
		c->cap = cap;
	}
	if (size > c->rawcap) {
		uint32_t cap = c->rawcap ? c->rawcap : 1024;
		while (cap < size)
			cap = cap > UINT32_MAX / 2 ? size : cap * 2;
		uint8_t *r = realloc(c->raw, cap);
		if (!r)
			return -ENOMEM;
		c->raw = r;
		c->rawcap = cap;
	}
	return 0;
}

/* Pair i of an entry: its key and value inside the raw bytes (verified
 * when they entered the entry) and its record size. */
static void cent_pair(const struct fdb_cent *c, uint32_t i, const uint8_t **key, uint32_t *klen,
		      const uint8_t **val, uint32_t *vlen, uint32_t *size)
{
	const uint8_t *p = c->raw + c->off[i];
	size_t a = flex_varint_get(p, c->raw + c->size, klen);
	size_t b = flex_varint_get(p + a, c->raw + c->size, vlen);
	*key = p + a + b;
	*val = *key + *klen;
	*size = (i + 1 < c->n ? c->off[i + 1] : c->size) - c->off[i];
}

/* Position of the first pair >= key; *found when equal. */
static uint32_t cent_lower(const struct fdb_cent *c, const void *key, uint32_t klen, int *found)
{
	uint32_t lo = 0, hi = c->n;
	const uint8_t *k, *v;
	uint32_t kl, vl, sz;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		cent_pair(c, mid, &k, &kl, &v, &vl, &sz);
		if (fdb_keycmp(k, kl, key, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = 0;
	if (lo < c->n) {
		cent_pair(c, lo, &k, &kl, &v, &vl, &sz);
		*found = fdb_keycmp(k, kl, key, klen) == 0;
	}
	return lo;
}

/* Replaces pairs [pos, pos + del) by the encoded record rec (rs bytes,
 * none when rs is 0), keeping offsets and fingerprints in step. */
static int cent_splice(struct fdb_cent *c, uint32_t pos, uint32_t del, const uint8_t *rec,
		       uint32_t rs, uint16_t fp)
{
	uint32_t add = rs ? 1 : 0;
	uint32_t at = pos < c->n ? c->off[pos] : c->size;
	uint32_t end = pos + del < c->n ? c->off[pos + del] : c->size;
	int64_t delta = (int64_t)rs - (int64_t)(end - at);
	int rc = cent_reserve(c, c->n + add, (uint32_t)((int64_t)c->size + delta));
	if (rc)
		return rc;
	memmove(c->raw + at + rs, c->raw + end, c->size - end);
	if (rs)
		memcpy(c->raw + at, rec, rs);
	c->size = (uint32_t)((int64_t)c->size + delta);
	uint32_t tail = c->n - pos - del;
	memmove(c->off + pos + add, c->off + pos + del, tail * sizeof(uint32_t));
	memmove(c->fp + pos + add, c->fp + pos + del, tail * sizeof(uint16_t));
	if (add) {
		c->off[pos] = at;
		c->fp[pos] = fp;
	}
	c->n = c->n - del + add;
	for (uint32_t i = pos + add; i < c->n; i++)
		c->off[i] = (uint32_t)((int64_t)c->off[i] + delta);
	return 0;
}

/* ---- the CLOCK ring ------------------------------------------------------- */

/* An interval's entry, as readers under the shared lock load it: the
 * entry stays valid until the lock is released (retired entries wait in
 * the graveyard), and its bytes do not change while the lock is held. */
static struct fdb_cent *ival_cent(const struct fdb_ival *iv)
{
	struct fdb_cent *c = __atomic_load_n(&iv->cache, __ATOMIC_ACQUIRE);
	FDB_HB_AFTER(&iv->cache);
	return c;
}

static void ival_set_cent(struct fdb_ival *iv, struct fdb_cent *c)
{
	FDB_HB_BEFORE(&iv->cache);
	__atomic_store_n(&iv->cache, c, __ATOMIC_RELEASE);
}

/* The bytes the ring may hold: the cache less the graveyard's share. */
static size_t ring_limit(const struct fdb_store *s)
{
	return s->cache_limit - s->cache_limit / 32;
}

/* cache_bytes and grave_bytes change under cache_mu or the exclusive
 * lock and are read without them (fdb_store_scan, fdb_store_reap_due). */
static void set_bytes(size_t *field, size_t v)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
}

static size_t load_bytes(const size_t *field)
{
	return __atomic_load_n(field, __ATOMIC_RELAXED);
}

static void ring_remove(struct fdb_store *s, struct fdb_cent *c)
{
	if (c->slot == UINT32_MAX)
		return;
	uint32_t i = c->slot;
	s->ring[i] = s->ring[--s->nring];
	s->ring[i]->slot = i;
	c->slot = UINT32_MAX;
	set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes);
	if (!c->raw)
		s->thin_bytes -= c->bytes;
	if (s->hand >= s->nring)
		s->hand = 0;
}

/* Makes room for one more entry in an array of n of *cap (the ring, the
 * graveyard), doubling it. */
static int cent_vec_room(struct fdb_cent ***v, uint32_t n, uint32_t *cap)
{
	if (n < *cap)
		return 0;
	uint32_t c = *cap ? *cap * 2 : 256;
	struct fdb_cent **p = realloc(*v, c * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = c;
	return 0;
}

/* Under the shared lock: whether an entry of `bytes` fits in the
 * graveyard (0), making room in its array. */
static int grave_reserve(struct fdb_store *s, size_t bytes)
{
	if (s->grave_bytes + bytes > s->cache_limit / 32)
		return -ENOSPC;
	return cent_vec_room(&s->grave, s->ngrave, &s->grave_cap);
}

/* Takes c, out of the ring, out of use: freed at once under the exclusive
 * lock; under the shared lock (after grave_reserve) other readers may be
 * reading it, so it waits in the graveyard. */
static void cent_retire(struct fdb_store *s, struct fdb_cent *c, int shared)
{
	if (!shared) {
		cent_free(c);
		return;
	}
	s->grave[s->ngrave++] = c;
	set_bytes(&s->grave_bytes, s->grave_bytes + c->bytes);
}

int fdb_store_reap_due(struct fdb_store *s)
{
	return load_bytes(&s->grave_bytes) >= s->cache_limit / 64;
}

void fdb_store_reap(struct fdb_store *s)
{
	for (uint32_t i = 0; i < s->ngrave; i++)
		cent_free(s->grave[i]);
	s->ngrave = 0;
	set_bytes(&s->grave_bytes, 0);
}

/* Where the bytes of c's interval lie now, for a thin copy of c (which
 * holds the interval's current bytes); NULL when the FlexSpace does not
 * say in one report, or out of memory. */
static struct fdb_pmap *cent_locate(struct fdb_store *s, const struct fdb_cent *c)
{
	const struct fdb_ival *iv = c->iv;
	struct fdb_ipath p;
	if (!iv || !c->size || c->size != iv->size ||
	    fdb_index_find(s->index, iv->key, iv->klen, &p) != iv)
		return NULL;
	uint64_t off = fdb_index_offset(&p), stamp;
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	size_t n;
	if (flexspace_locate(s->fs, off, c->size, loc, &n, &stamp) || !n)
		return NULL;
	return pmap_new(loc, n, stamp, off, c->size);
}

/* Makes `need` more bytes fit in the ring; never touches `pin`.  CLOCK:
 * an entry whose bit is set gets its bit cleared and is passed.  An
 * unreferenced whole entry is made thin while thin entries take at most a
 * quarter of the cache (they are about a tenth the size and still spare a
 * lookup most of its reading); past that, and for unreferenced thin
 * entries beyond their share, the entry goes.  Each entry is passed at
 * most three times, so this ends; a last pass ignores the bits, so the
 * bound holds even when every entry was just used.  Under the shared lock
 * (`shared`) it stops when the graveyard is full: returns nonzero if the
 * bytes do not fit then. */
static int cache_evict(struct fdb_store *s, size_t need, const struct fdb_cent *pin, int shared)
{
	size_t thin_cap = s->cache_limit / 4, limit = ring_limit(s);
	uint32_t steps = 3 * s->nring + 3;
	while (s->cache_bytes + need > limit && s->nring > 0) {
		int force = steps == 0;
		if (!force)
			steps--;
		if (s->hand >= s->nring)
			s->hand = 0;
		struct fdb_cent *c = s->ring[s->hand];
		if (c == pin) {
			if (s->nring == 1)
				break;
			s->hand++;
			continue;
		}
		if (!force && atomic_exchange(&c->ref, 0)) {
			s->hand++;
			continue;
		}
		if (shared && grave_reserve(s, c->bytes))
			return -ENOSPC;
		if (c->raw && !force) {
			int maps = __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
			struct fdb_pmap *pm = c->map || !maps ? NULL : cent_locate(s, c);
			size_t thin = cent_thin_bytes(c) + (pm ? pmap_bytes(pm->n) : 0);
			struct fdb_cent *t = s->thin_bytes + thin <= thin_cap
						 ? cent_thin(c, c->map && maps ? c->map : pm)
						 : NULL;
			free(pm);
			if (t) {
				/* A thin copy takes the whole entry's place. */
				t->slot = c->slot;
				s->ring[t->slot] = t;
				c->slot = UINT32_MAX;
				set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes + t->bytes);
				s->thin_bytes += t->bytes;
				ival_set_cent(t->iv, t);
				cent_retire(s, c, shared);
				s->hand++;
				continue;
			}
		} else if (!c->raw && !force && s->thin_bytes <= thin_cap) {
			s->hand++;
			continue;
		}
		ring_remove(s, c);
		ival_set_cent(c->iv, NULL);
		cent_retire(s, c, shared);
	}
	return s->cache_bytes + need > limit && shared ? -ENOSPC : 0;
}

/* Puts c, of iv, in the ring, making room for it (not beyond the
 * graveyard's room when `shared`).  Nonzero: c was not attached. */
static int cache_attach(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *c, int shared)
{
	if (cache_evict(s, c->bytes, c, shared))
		return -ENOSPC;
	if (cent_vec_room(&s->ring, s->nring, &s->ring_cap))
		return -ENOMEM;
	c->iv = iv;
	c->slot = s->nring;
	s->ring[s->nring++] = c;
	set_bytes(&s->cache_bytes, s->cache_bytes + c->bytes);
	if (!c->raw)
		s->thin_bytes += c->bytes;
	atomic_store(&c->ref, 1);
	ival_set_cent(iv, c);
	return 0;
}

/* Exclusive lock: drops iv's entry. */
static void cache_drop(struct fdb_store *s, struct fdb_ival *iv)
{
	if (!iv->cache)
		return;
	ring_remove(s, iv->cache);
	cent_free(iv->cache);
	iv->cache = NULL;
}

/* Brings an entry's charge up to date after a change. */
static void cache_recharge(struct fdb_store *s, struct fdb_cent *c)
{
	size_t now = cent_bytes(c);
	if (c->slot != UINT32_MAX) {
		set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes + now);
		if (!c->raw)
			s->thin_bytes = s->thin_bytes - c->bytes + now;
	}
	c->bytes = now;
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

/* Indexes an entry's raw bytes (c->raw, c->size) as the pairs of iv:
 * verifies every checksum, the key order, the bound given by the
 * interval's key and, when known, the pair count. */
static int cent_index(const struct fdb_ival *iv, struct fdb_cent *c)
{
	const uint8_t *p = c->raw, *end = p + c->size;
	const uint8_t *pk = iv->key;
	uint32_t pklen = iv->klen;
	int first = 1, rc = 0;
	c->n = 0;
	while (!rc && p < end) {
		size_t size;
		const uint8_t *key, *val;
		uint32_t klen, vlen;
		if ((rc = fdb_rec_decode(p, end, &size, &key, &klen, &val, &vlen)) != 0)
			break;
		int cmp = fdb_keycmp(pk, pklen, key, klen);
		if (first ? cmp > 0 : cmp >= 0) {
			rc = FLEX_ECORRUPT;
			break;
		}
		if ((rc = cent_reserve(c, c->n + 1, c->size)) != 0)
			break;
		c->off[c->n] = (uint32_t)(p - c->raw);
		c->fp[c->n] = fdb_fingerprint(key, klen);
		c->n++;
		pk = key;
		pklen = klen;
		first = 0;
		p += size;
	}
	uint32_t count = __atomic_load_n(&iv->count, __ATOMIC_RELAXED);
	if (!rc && count != FDB_COUNT_UNKNOWN && count != c->n)
		rc = FLEX_ECORRUPT;
	c->bytes = cent_bytes(c);
	return rc;
}

/* An entry for iv made of its raw bytes and map (both taken over: freed
 * on failure; map may be NULL). */
static int cent_from_raw(const struct fdb_ival *iv, uint8_t *raw, uint32_t size,
			 struct fdb_pmap *map, struct fdb_cent **out)
{
	*out = NULL;
	struct fdb_cent *c = cent_new();
	if (!c) {
		free(raw);
		free(map);
		return -ENOMEM;
	}
	c->raw = raw;
	c->rawcap = c->size = size;
	int rc = cent_index(iv, c);
	c->map = map;
	c->map_own = map != NULL;
	if (rc) {
		cent_free(c);
		return rc;
	}
	c->bytes = cent_bytes(c);
	*out = cent_pack(c, 0);
	return 0;
}

/* Reads an interval's bytes, and with `map` where they lie (NULL when
 * the FlexSpace did not say). */
static int ival_read_raw(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
			 uint8_t **out, struct fdb_pmap **map)
{
	uint8_t *buf = malloc(iv->size ? iv->size : 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = 0;
	if (map) {
		struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
		size_t nloc = 0;
		uint64_t stamp = 0;
		*map = NULL;
		if (iv->size)
			n = flexspace_read_locate(s->fs, buf, off, iv->size, loc, &nloc, &stamp);
		if (nloc && (size_t)n == iv->size)
			*map = pmap_new(loc, nloc, stamp, off, iv->size);
	} else if (iv->size) {
		n = flexspace_read(s->fs, buf, off, iv->size);
	}
	if (n < 0 || (size_t)n != iv->size) {
		free(buf);
		if (map) {
			free(*map);
			*map = NULL;
		}
		return n < 0 ? (int)n : FLEX_ECORRUPT;
	}
	*out = buf;
	return 0;
}

/* Reads the interval at off into an entry (cent_index checks it); with
 * `fragmented`, says whether its extents split pairs. */
static int ival_decode(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
		       struct fdb_cent **out, int *fragmented)
{
	uint8_t *raw;
	int rc = ival_read_raw(s, iv, off, &raw, NULL);
	if (!rc)
		rc = cent_from_raw(iv, raw, iv->size, NULL, out);
	if (!rc && fragmented) {
		struct extent_count ec = {0};
		if (iv->size)
			flexspace_extents(s->fs, off, iv->size, count_extent, &ec);
		/* The paper marks an interval once its extents outnumber half its
		 * pairs; after random inserts every pair is an extent, so with a
		 * cache smaller than the store that meant rewriting nearly every
		 * interval loaded (write amplification 8.6 in fillrandom).  Only
		 * pairs split across extents count as fragmentation here. */
		*fragmented = ec.n > (uint64_t)(*out)->n + 2;
	}
	return rc;
}

/* Notes the pair count of an interval now cached, whose pairs were all
 * verified (cache_mu or the exclusive lock: scans read iv->count and
 * lookups iv->unverified under the shared lock). */
static void ival_counted(struct fdb_store *s, struct fdb_ival *iv, uint32_t n)
{
	if (iv->count == FDB_COUNT_UNKNOWN) {
		s->keys += n;
		s->uncounted--;
	}
	__atomic_store_n(&iv->count, n, __ATOMIC_RELAXED);
	__atomic_store_n(&iv->unverified, 0, __ATOMIC_RELAXED);
}

/* Exclusive lock: makes sure iv is cached whole (unless too big to keep,
 * then *tmp holds a private copy the caller frees). */
static int ival_load(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		     struct fdb_cent **tmp, int *fragmented)
{
	*tmp = NULL;
	if (iv->cache && iv->cache->raw)
		return 0;
	cache_drop(s, iv); /* a thin entry: replaced by the whole one */
	struct fdb_cent *c;
	int rc = ival_decode(s, iv, fdb_index_offset(p), &c, fragmented);
	if (rc)
		return rc;
	ival_counted(s, iv, c->n);
	atomic_fetch_add(&s->misses, 1);
	if (c->bytes > s->cache_limit / 4) {
		*tmp = c;
		return 0;
	}
	rc = cache_attach(s, iv, c, 0);
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

/* The interval keys come from the anchor pairs, and a wrong one sends
 * lookups to the wrong interval, where a present key is "absent" (a bit
 * flipped in an anchor's key did exactly that).  So an anchor pair is
 * verified at open when the bytes read for its key hold all of it, as
 * they do unless its value is several KiB; a longer one is verified when
 * its interval is first loaded or a lookup misses just before it
 * (anchor_verify), instead of reading large values at open. */
static int anchor_check(const uint8_t *p, size_t n)
{
	size_t size;
	const uint8_t *k, *v;
	uint32_t kl, vl;
	return fdb_rec_decode(p, p + n, &size, &k, &kl, &v, &vl);
}

static int anchor_verify(struct fdb_store *s, uint64_t off)
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

static struct fdb_ival *ival_new(const void *key, uint32_t klen)
{
	struct fdb_ival *iv = calloc(1, sizeof(*iv));
	if (!iv)
		return NULL;
	/* Loaded under the shared lock while readers cache intervals. */
	FDB_ATOMIC_OBJ(&iv->cache, sizeof(iv->cache));
	FDB_ATOMIC_OBJ(&iv->count, sizeof(iv->count));
	FDB_ATOMIC_OBJ(&iv->unverified, sizeof(iv->unverified));
	iv->key = malloc(klen ? klen : 1);
	if (!iv->key) {
		free(iv);
		return NULL;
	}
	memcpy(iv->key, key, klen);
	iv->klen = klen;
	return iv;
}

static void maps_policy(struct fdb_store *s);

int fdb_store_open(struct fdb_store *s, struct flexspace *fs, uint64_t cache_limit)
{
	memset(s, 0, sizeof(*s));
	s->fs = fs;
	s->cache_limit = cache_limit;
	FDB_ATOMIC_OBJ(&s->use_maps, sizeof(s->use_maps));
	FDB_ATOMIC_OBJ(&s->cache_bytes, sizeof(s->cache_bytes));
	FDB_ATOMIC_OBJ(&s->grave_bytes, sizeof(s->grave_bytes));
	int mrc = pthread_mutex_init(&s->cache_mu, NULL);
	if (mrc)
		return -mrc;
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
			/* Read just the anchor pair's header and key: a small
			 * read first, which holds the whole pair when it is
			 * small, then up to the longest key's worth if the pair
			 * needs it (one 4 KiB copy per interval was most of the
			 * time an open spent outside WAL replay). */
			ssize_t n = flexspace_read(fs, hdr, off, FDB_ANCHOR_PEEK);
			uint32_t klen, vlen;
			size_t h;
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
			else if ((iv = ival_new(hdr + h, klen)) != NULL)
				iv->unverified = h + klen + vlen + 4 > (size_t)n;
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
	if (!rc)
		maps_policy(s);
	return rc;
}

void fdb_store_close(struct fdb_store *s)
{
	for (uint32_t i = 0; i < s->nring; i++) {
		s->ring[i]->iv->cache = NULL;
		cent_free(s->ring[i]);
	}
	free(s->ring);
	fdb_store_reap(s);
	free(s->grave);
	pthread_mutex_destroy(&s->cache_mu);
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

/* Splits an interval in two at its middle pair (c is its entry, cached
 * or private). */
static int ival_split(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		      struct fdb_cent *c)
{
	uint32_t m = c->n / 2;
	uint64_t off = fdb_index_offset(p);
	const uint8_t *k, *v;
	uint32_t kl, vl, sz;
	cent_pair(c, m, &k, &kl, &v, &vl, &sz);
	struct fdb_ival *nv = ival_new(k, kl);
	struct fdb_cent *nc = cent_new();
	uint32_t at = c->off[m];
	if (!nv || !nc || cent_reserve(nc, c->n - m, c->size - at)) {
		if (nv) {
			free(nv->key);
			free(nv);
		}
		cent_free(nc);
		return -ENOMEM;
	}
	nc->n = c->n - m;
	nc->size = c->size - at;
	memcpy(nc->raw, c->raw + at, nc->size);
	memcpy(nc->fp, c->fp + m, nc->n * sizeof(uint16_t));
	for (uint32_t i = 0; i < nc->n; i++)
		nc->off[i] = c->off[m + i] - at;
	nc->bytes = cent_bytes(nc);
	cent_unmap(c);
	c->n = m;
	c->size = at;
	cache_recharge(s, c);
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
	if (c != iv->cache || cache_attach(s, nv, nc, 0) != 0)
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
	struct fdb_cent *a = iv->cache, *b = nx->cache;
	if (a && b && a->raw && b->raw && !cent_reserve(a, a->n + b->n, a->size + b->size)) {
		memcpy(a->raw + a->size, b->raw, b->size);
		memcpy(a->fp + a->n, b->fp, b->n * sizeof(uint16_t));
		for (uint32_t i = 0; i < b->n; i++)
			a->off[a->n + i] = b->off[i] + a->size;
		a->n += b->n;
		a->size += b->size;
		cache_recharge(s, a);
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

/* Removes iv, emptied, from the index (path p, invalid after) and frees
 * it; the first interval's key stays the empty key, below everything. */
static int ival_remove_empty(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv)
{
	int first = iv->klen == 0;
	cache_drop(s, iv);
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

static int store_apply(struct fdb_store *s, const struct fdb_batch_op *op);

/* Applies one change, then gives back cache space its write-through
 * growth took. */
int fdb_store_apply(struct fdb_store *s, const struct fdb_batch_op *op)
{
	if (s->failed)
		return FLEX_EFAILED;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
	if (s->ngrave)
		fdb_store_reap(s);
	int rc = store_apply(s, op);
	/* A failure part-way (say the old pair collapsed, the new one not
	 * inserted) leaves the index offsets off from the FlexSpace: reading
	 * through them would report intact pairs as corrupt, or miss them. */
	if (rc)
		s->failed = rc;
	if (s->cache_bytes > ring_limit(s))
		cache_evict(s, 0, NULL, 0);
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
	uint64_t at = off0 + (pos < c->n ? c->off[pos] : iv->size);
	int64_t delta = 0;
	if (op->op == FDB_OP_PUT) {
		size_t rs = fdb_rec_encode(s->rec, op->key, op->klen, op->val, op->vlen);
		uint16_t fp = fdb_fingerprint(op->key, op->klen);
		if (found) {
			const uint8_t *k, *v;
			uint32_t kl, vl, old;
			cent_pair(c, pos, &k, &kl, &v, &vl, &old);
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
			if (!rc)
				rc = cent_splice(c, pos, 1, s->rec, (uint32_t)rs, fp);
			if (rc)
				goto out;
			delta = (int64_t)rs - old;
		} else {
			ssize_t w = flexspace_insert(s->fs, s->rec, at, rs);
			if (w < 0) {
				rc = (int)w;
				goto out;
			}
			if ((rc = cent_splice(c, pos, 0, s->rec, (uint32_t)rs, fp)) != 0)
				goto out;
			delta = (int64_t)rs;
			iv->count++;
			s->keys++;
		}
		cache_recharge(s, c);
		/* A new or rewritten first pair must carry the anchor tag; the
		 * pair it pushed back must not. */
		if (pos == 0 && (rc = set_tag(s, off0, FDB_ANCHOR)) == 0 && !found && c->n > 1)
			rc = set_tag(s, off0 + rs, 0);
	} else {
		if (!found)
			goto out;
		const uint8_t *k, *v;
		uint32_t kl, vl, old;
		cent_pair(c, pos, &k, &kl, &v, &vl, &old);
		if ((rc = flexspace_collapse(s->fs, at, old)) != 0)
			goto out;
		if ((rc = cent_splice(c, pos, 1, NULL, 0, 0)) != 0)
			goto out;
		cache_recharge(s, c);
		delta = -(int64_t)old;
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
	if (iv->count == 0 && fdb_index_count(s->index) > 1)
		return ival_remove_empty(s, &p, iv); /* an empty interval goes */
	if (op->op == FDB_OP_DEL)
		return ival_maybe_merge(s, &p, iv);
	return 0;
out:
	cent_free(tmp);
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
	if (!e->iv)
		return FLEX_ECORRUPT;
	struct fdb_cent *tmp;
	int rc = ival_load(s, &p, e->iv, &tmp, NULL);
	if (rc)
		return rc;
	/* Only numbers are kept: loading the other edge may evict this
	 * entry. */
	const struct fdb_cent *c = tmp ? tmp : e->iv->cache;
	int found;
	e->off = fdb_index_offset(&p);
	e->n = c->n;
	e->pos = cent_lower(c, key, klen, &found);
	e->at = e->pos < c->n ? c->off[e->pos] : c->size;
	cent_free(tmp);
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
		rc = cent_splice(c, from, to - from, NULL, 0, 0);
		if (!rc)
			cache_recharge(s, c);
	} else if (c && to > from) {
		cache_drop(s, iv);
	}
	iv->count -= to - from;
	iv->size -= bytes;
	s->keys -= to - from;
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
			cache_drop(s, gone[i]);
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
		rc = set_tag(s, a, FDB_ANCHOR);
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

int fdb_store_delete_range(struct fdb_store *s, const void *start, uint32_t slen,
			   const void *end, uint32_t elen)
{
	if (s->failed)
		return FLEX_EFAILED;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
	if (s->ngrave)
		fdb_store_reap(s);
	int rc = store_delete_range(s, start ? start : "", slen, end, elen);
	/* As in fdb_store_apply: the index may no longer describe the space. */
	if (rc)
		s->failed = rc;
	if (s->cache_bytes > ring_limit(s))
		cache_evict(s, 0, NULL, 0);
	return rc;
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
		cent_pair(c, i, &k, &kl, &v, &vl, &sz);
		if (fdb_keycmp(k, kl, key, klen) != 0)
			continue;
		give_value(v, vl, buf, cap, vlen);
		return 0;
	}
	return FLEXDB_NOTFOUND;
}

/* Looks key up through a thin entry: each pair whose fingerprint matches
 * is read alone from the FlexSpace at off + its offset and checked. */
static int thin_get(struct fdb_store *s, const struct fdb_cent *c, uint64_t off, const void *key,
		    uint32_t klen, uint16_t fp, void *buf, size_t cap, size_t *vlen)
{
	uint8_t small[512];
	for (uint32_t i = 0; i < c->n; i++) {
		if (c->fp[i] != fp)
			continue;
		uint32_t sz = (i + 1 < c->n ? c->off[i + 1] : c->size) - c->off[i];
		uint8_t *r = sz <= sizeof(small) ? small : malloc(sz);
		if (!r)
			return -ENOMEM;
		int rc = pmap_read(s, c, c->off[i], sz, r);
		if (!rc)
			atomic_fetch_add_explicit(&s->thin_located, 1, memory_order_relaxed);
		if (rc == -ESTALE) {
			ssize_t n = flexspace_read(s->fs, r, off + c->off[i], sz);
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

/* How an interval read by a reader enters the cache: ADMIT_AUTO leaves
 * it to fdb_store_admit (admit_whole). */
enum { ADMIT_NONE, ADMIT_AUTO, ADMIT_WHOLE };

/* An entry of an interval this size may be kept at all. */
static int ival_keepable(const struct fdb_store *s, uint32_t size)
{
	return (size_t)size + sizeof(struct fdb_cent) <= s->cache_limit / 4;
}

/* cache_mu or the exclusive lock: whether an interval a lookup missed
 * enters the cache whole: while the cache has room, and on one miss in
 * FDB_ADMIT_EVERY after that (a hot interval gets in soon, a cold one
 * seldom pushes a warm one out); otherwise thin. */
static int admit_whole(struct fdb_store *s, uint32_t size)
{
	uint64_t tick = s->admit_tick++;
	return s->cache_bytes + 2 * (size_t)size <= ring_limit(s) || tick % FDB_ADMIT_EVERY == 0;
}

/* Whether thin entries keep where their pairs lie.  A map spares a thin
 * hit the FlexTree but about doubles the entry (12 bytes per extent
 * against 6 per pair): worth it while thin entries with maps for every
 * interval would take at most twice the thin share (whole entries hold
 * the rest of what is read often), a loss when the store is far larger
 * than the cache, where covering more intervals spares whole-interval
 * reads (2M pairs: a 24 MiB interval cache read 39.8 KB per get with
 * maps against 31.7 without).  From the index and the FlexSpace's extent
 * count, at open and every FDB_POLICY_EVERY admissions (cache_mu or the
 * exclusive lock). */
#define FDB_POLICY_EVERY 1024
static void maps_policy(struct fdb_store *s)
{
	uint64_t n = fdb_index_count(s->index);
	struct flexspace_stats st;
	if (!n || flexspace_stats(s->fs, &st) != 0)
		return;
	/* Pairs are at least as many as extents after random inserts. */
	double per = (double)sizeof(struct fdb_cent) + sizeof(struct fdb_pmap) +
		     (6.0 + 12.0) * (double)st.extents / (double)n;
	int use = per * (double)n <= 2.0 * (double)(s->cache_limit / 4);
	__atomic_store_n(&s->use_maps, use, __ATOMIC_RELAXED);
}

/* Shared lock: offers entry c of iv to the cache (fdb_store_admit). */
static void cand_push(struct fdb_cands *cands, struct fdb_ival *iv, struct fdb_cent *c, int kind)
{
	cands->v[cands->n].iv = iv;
	cands->v[cands->n].c = c;
	cands->v[cands->n++].whole = kind == ADMIT_WHOLE;
}

void fdb_cands_init(struct fdb_store *s, struct fdb_cands *cands, struct fdb_cand *v, int cap)
{
	cands->n = 0;
	cands->v = v ? v : cands->inline_v;
	cands->cap = v ? cap : FDB_CANDS_INLINE;
	cands->gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
}

void fdb_cands_free(struct fdb_cands *cands)
{
	for (int i = 0; i < cands->n; i++)
		cent_free(cands->v[i].c);
	cands->n = 0;
}

void fdb_store_admit(struct fdb_store *s, struct fdb_cands *cands, int shared)
{
	if (!cands->n)
		return;
	/* Built under the shared lock: valid only if nothing changed since. */
	if (s->failed || cands->gen != atomic_load_explicit(&s->gen, memory_order_relaxed)) {
		fdb_cands_free(cands);
		return;
	}
	if (shared)
		pthread_mutex_lock(&s->cache_mu);
	else if (s->ngrave)
		fdb_store_reap(s);
	if (s->pol_tick++ % FDB_POLICY_EVERY == 0)
		maps_policy(s);
	for (int i = 0; i < cands->n; i++) {
		struct fdb_ival *iv = cands->v[i].iv;
		struct fdb_cent *c = cands->v[i].c;
		cands->v[i].c = NULL;
		if (!cands->v[i].whole && !admit_whole(s, c->size)) {
			if (!__atomic_load_n(&s->use_maps, __ATOMIC_RELAXED))
				cent_unmap(c);
			c = cent_pack(c, 1);
		} else if (c->map) {
			/* Whole entries read their pairs from memory; a thin copy
			 * made later finds where they lie then (cent_locate). */
			cent_unmap(c);
			c->bytes = cent_bytes(c);
		}
		struct fdb_cent *old = iv->cache;
		if (old && (old->raw || !c->raw)) {
			cent_free(c); /* another reader was first */
			continue;
		}
		if (old) {
			/* A thin entry, replaced by the whole one. */
			if (shared && grave_reserve(s, old->bytes)) {
				cent_free(c);
				continue;
			}
			ring_remove(s, old);
			ival_set_cent(iv, NULL);
			cent_retire(s, old, shared);
		}
		if (cache_attach(s, iv, c, shared)) {
			cent_free(c);
			continue;
		}
		ival_counted(s, iv, c->n);
	}
	cands->n = 0;
	if (shared)
		pthread_mutex_unlock(&s->cache_mu);
}

void fdb_store_counts(struct fdb_store *s, uint64_t *keys, uint64_t *uncounted)
{
	pthread_mutex_lock(&s->cache_mu);
	*keys = s->keys;
	*uncounted = s->uncounted;
	pthread_mutex_unlock(&s->cache_mu);
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
			int vrc = anchor_verify(s, fdb_index_offset(&p));
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
	struct fdb_cent *c = ival_cent(iv);
	if (c) {
		if (!atomic_load_explicit(&c->ref, memory_order_relaxed))
			atomic_store_explicit(&c->ref, 1, memory_order_relaxed);
		if (c->raw) {
			atomic_fetch_add(&s->hits, 1);
			return cent_get(c, key, klen, fp, buf, cap, vlen);
		}
		atomic_fetch_add(&s->thin_hits, 1);
		return thin_get(s, c, fdb_index_offset(pp), key, klen, fp, buf, cap, vlen);
	}
	/* A miss reads the whole interval and offers it to the cache. */
	atomic_fetch_add(&s->misses, 1);
	uint64_t off = fdb_index_offset(pp);
	uint8_t *raw;
	struct fdb_pmap *map = NULL;
	int kind = cands->n < cands->cap && ival_keepable(s, iv->size) ? ADMIT_AUTO : ADMIT_NONE;
	/* Where the bytes lie comes with the read, when thin entries keep it. */
	int maps = kind != ADMIT_NONE && __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
	int rc = ival_read_raw(s, iv, off, &raw, maps ? &map : NULL);
	if (rc)
		return rc;
	if (kind != ADMIT_NONE) {
		if ((rc = cent_from_raw(iv, raw, iv->size, map, &c)) != 0)
			return rc;
		rc = cent_get(c, key, klen, fp, buf, cap, vlen);
		cand_push(cands, iv, c, kind);
	} else {
		rc = raw_search(raw, raw + iv->size, iv, key, klen, buf, cap, vlen);
		free(raw);
	}
	return rc;
}

/* Finds the uncached intervals ops[0..n) change, reads them in spans of
 * neighbours and offers each as a whole entry. */
#define FDB_PREFETCH_GAP 4096
int fdb_store_prefetch(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		       struct fdb_cands *cands)
{
	if (s->failed)
		return FLEX_EFAILED;
	/* Without memory nothing is prefetched: the apply reads what it needs. */
	struct fdb_ival **list = malloc((size_t)(n ? n : 1) * sizeof(*list));
	uint64_t *offs = malloc((size_t)(n ? n : 1) * sizeof(*offs));
	int nl = 0, rc = 0;
	size_t bytes = 0;
	const struct fdb_ival *prev = NULL;
	for (int i = 0; list && offs && i < n && nl < cands->cap - cands->n; i++) {
		struct fdb_ipath p;
		struct fdb_ival *iv = fdb_index_find(s->index, ops[i].key, ops[i].klen, &p);
		if (!iv || iv == prev)
			continue;
		prev = iv;
		const struct fdb_cent *c = ival_cent(iv);
		if ((c && c->raw) || !iv->size || !ival_keepable(s, iv->size))
			continue;
		/* What fits the cache beside what it holds already. */
		if ((bytes += iv->size) > s->cache_limit / 4)
			break;
		list[nl] = iv;
		offs[nl++] = fdb_index_offset(&p);
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
			uint8_t *raw = malloc(size);
			struct fdb_cent *c;
			if (!raw) {
				rc = -ENOMEM;
				break;
			}
			memcpy(raw, buf + (offs[k] - lo), size);
			if ((rc = cent_from_raw(list[k], raw, size, NULL, &c)) == 0)
				cand_push(cands, list[k], c, ADMIT_WHOLE);
		}
		free(buf);
		a = b;
	}
	free(list);
	free(offs);
	return rc;
}

#define FDB_AR_BLOCK (64u << 10)
struct fdb_ar_blk {
	struct fdb_ar_blk *prev;
	size_t used, cap;
	_Alignas(16) uint8_t data[];
};

void *fdb_ar_alloc(struct fdb_ar *a, size_t n)
{
	struct fdb_ar_blk *b = a->blk;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > FDB_AR_BLOCK ? n : FDB_AR_BLOCK;
		struct fdb_ar_blk *nb = malloc(sizeof(*nb) + cap);
		if (!nb)
			return NULL;
		nb->prev = b;
		nb->used = 0;
		nb->cap = cap;
		a->blk = b = nb;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

/* Empties the arena but keeps one block of the default size, so that a
 * reader refilling chunk after chunk does not ask the allocator (and the
 * kernel) for fresh pages each time. */
void fdb_ar_reset(struct fdb_ar *a)
{
	struct fdb_ar_blk *b = a->blk, *keep = NULL;
	while (b) {
		struct fdb_ar_blk *p = b->prev;
		if (!keep && b->cap == FDB_AR_BLOCK) {
			keep = b;
		} else {
			free(b);
		}
		b = p;
	}
	if (keep) {
		keep->prev = NULL;
		keep->used = 0;
	}
	a->blk = keep;
}

void fdb_ar_free(struct fdb_ar *a)
{
	struct fdb_ar_blk *b = a->blk;
	while (b) {
		struct fdb_ar_blk *p = b->prev;
		free(b);
		b = p;
	}
	a->blk = NULL;
}

static int pair_set(struct fdb_pair *out, const uint8_t *key, uint32_t klen, const uint8_t *val,
		    uint32_t vlen, struct fdb_ar *ar)
{
	out->key = fdb_ar_alloc(ar, (size_t)klen + vlen);
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

/* A pair located in raw interval bytes: its record, key and value. */
struct pair_ref {
	const uint8_t *rec, *key, *val;
	uint32_t klen, vlen;
};

/* Room for an interval's pair refs, reused from interval to interval. */
struct ref_vec {
	struct pair_ref *v;
	uint32_t n, cap;
};

/* Parses an interval's raw bytes into refs, verifying every checksum
 * (these pairs are returned) and that keys increase from the interval's
 * key on (the binary search below relies on it). */
static int raw_pairs(const uint8_t *p, const uint8_t *end, const struct fdb_ival *iv,
		     struct ref_vec *r)
{
	r->n = 0;
	while (p < end) {
		size_t size;
		struct pair_ref x;
		x.rec = p;
		int bad = fdb_rec_decode(p, end, &size, &x.key, &x.klen, &x.val, &x.vlen);
		if (!bad) {
			int c = r->n ? fdb_keycmp(r->v[r->n - 1].key, r->v[r->n - 1].klen, x.key, x.klen)
				     : fdb_keycmp(iv->key, iv->klen, x.key, x.klen);
			bad = r->n ? c >= 0 : c > 0;
		}
		if (bad)
			return FLEX_ECORRUPT;
		if (r->n == r->cap) {
			uint32_t cap = r->cap ? 2 * r->cap : 64;
			struct pair_ref *nv = realloc(r->v, cap * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			r->v = nv;
			r->cap = cap;
		}
		r->v[r->n++] = x;
		p += size;
	}
	return 0;
}

/* A whole entry for iv from its raw bytes already parsed (and verified)
 * into refs: the bytes are copied, nothing is decoded again. */
static int cent_from_refs(const struct fdb_ival *iv, const uint8_t *raw, uint32_t size,
			  const struct ref_vec *r, struct fdb_cent **out)
{
	*out = NULL;
	uint32_t count = __atomic_load_n(&iv->count, __ATOMIC_RELAXED);
	if (count != FDB_COUNT_UNKNOWN && count != r->n)
		return FLEX_ECORRUPT;
	size_t arrays = (size_t)r->n * (sizeof(uint32_t) + sizeof(uint16_t));
	struct fdb_cent *c = calloc(1, sizeof(*c) + arrays);
	uint8_t *copy = malloc(size ? size : 1);
	if (!c || !copy) {
		free(c);
		free(copy);
		return -ENOMEM;
	}
	c->slot = UINT32_MAX;
	FDB_ATOMIC_OBJ(&c->ref, sizeof(c->ref));
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
	c->bytes = cent_bytes(c);
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

/* Reads the uncached intervals from p's on (backwards with reverse) that
 * the scan will probably need (`want` more pairs) into r. */
static int scan_read_run(struct fdb_store *s, const struct fdb_ipath *p, const struct fdb_ival *iv,
			 int reverse, int want, const void *lim, uint32_t limlen,
			 struct scan_run *r, struct fdb_ar *ar)
{
	struct fdb_ipath q = *p;
	uint64_t lo = fdb_index_offset(p), hi = lo + iv->size;
	uint64_t pairs = 0;
	const struct fdb_ival *x = iv;
	for (int k = 1; k < FDB_SCAN_READ_IVALS; k++) {
		/* After recovery the pair count is unknown: guess from the size. */
		uint32_t count = __atomic_load_n(&x->count, __ATOMIC_RELAXED);
		pairs += count != FDB_COUNT_UNKNOWN ? count : x->size / 128 + 1;
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
	}
	/* In the chunk's arena: the pairs returned point into it. */
	r->buf = fdb_ar_alloc(ar, hi > lo ? hi - lo : 1);
	r->off = lo;
	r->len = 0;
	if (!r->buf)
		return -ENOMEM;
	ssize_t n = hi > lo ? flexspace_read(s->fs, r->buf, lo, hi - lo) : 0;
	if (n < 0)
		return (int)n;
	if ((uint64_t)n != hi - lo)
		return FLEX_ECORRUPT;
	r->len = hi - lo;
	return 0;
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

int fdb_store_scan(struct fdb_store *s, const void *from, uint32_t flen, int inclusive, int reverse,
		   const void *lim, uint32_t limlen, struct fdb_pair *out, int max, int *n,
		   struct fdb_ar *ar, struct fdb_cands *cands)
{
	*n = 0;
	if (s->failed)
		return FLEX_EFAILED;
	struct fdb_ipath p;
	struct fdb_ival *iv;
	if (flen)
		iv = fdb_index_find(s->index, from, flen, &p);
	else
		iv = reverse ? fdb_index_last(s->index, &p) : fdb_index_first(s->index, &p);
	struct scan_run run = {0};
	struct ref_vec refs = {0};
	int first = 1, rc = 0, past = 0;
	while (iv && *n < max && !rc && !past) {
		/* An interval's keys are at or above its key. */
		if (lim && !reverse && fdb_keycmp(iv->key, iv->klen, lim, limlen) >= 0)
			break;
		const struct fdb_cent *c = ival_cent(iv);
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
		const struct fdb_cent *c2 = n2 ? ival_cent(n2) : NULL;
		if (c2)
			__builtin_prefetch(c2);
		const struct fdb_cent *c1 = n1 ? ival_cent(n1) : NULL;
		if (c1 && c1->raw) {
			for (uint32_t o = 0; o < c1->size && o < 1024; o += 64)
				__builtin_prefetch(c1->raw + o);
		}
		if (c && c->raw) {
			/* Copied from the entry (which may change once the
			 * lock is dropped): a binary search in the first one,
			 * then pair after pair. */
			int64_t i = reverse ? (int64_t)c->n - 1 : 0;
			if (first && flen) {
				int found;
				uint32_t lo = cent_lower(c, from, flen, &found);
				i = scan_start(lo, found, inclusive, reverse);
			}
			first = 0;
			for (; i >= 0 && i < c->n && *n < max; i += reverse ? -1 : 1) {
				const uint8_t *k, *v;
				uint32_t kl, vl, sz;
				cent_pair(c, (uint32_t)i, &k, &kl, &v, &vl, &sz);
				if ((past = scan_beyond(k, kl, lim, limlen, reverse)) != 0)
					break;
				if ((rc = pair_set(&out[*n], k, kl, v, vl, ar)) != 0)
					break;
				(*n)++;
			}
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
		if (iv->size && (off < run.off || off + iv->size > run.off + run.len))
			rc = scan_read_run(s, &p, iv, reverse, max - *n, lim, limlen, &run, ar);
		if (iv->size && !rc)
			raw = run.buf + (off - run.off);
		if (!rc)
			rc = raw_pairs(raw, raw + iv->size, iv, &refs);
		if (rc)
			break;
		/* Offered to the cache while it has room: once it is full,
		 * copying intervals a scan passes costs more than the few
		 * later hits repay (seek+next50: 1.28x RocksDB without,
		 * 1.10-1.21x with the misses' policy). */
		if (cands->n < cands->cap &&
		    load_bytes(&s->cache_bytes) + 2 * (size_t)iv->size <= ring_limit(s)) {
			struct fdb_cent *nc;
			if ((rc = cent_from_refs(iv, raw, iv->size, &refs, &nc)) != 0)
				break;
			cand_push(cands, iv, nc, ADMIT_WHOLE);
		}
		int64_t i = reverse ? (int64_t)refs.n - 1 : 0;
		if (first && flen) {
			int found;
			uint32_t lo = refs_lower(refs.v, refs.n, from, flen, &found);
			i = scan_start(lo, found, inclusive, reverse);
		}
		first = 0;
		for (; i >= 0 && i < refs.n && *n < max; i += reverse ? -1 : 1) {
			if ((past = scan_beyond(refs.v[i].key, refs.v[i].klen, lim, limlen,
						reverse)) != 0)
				break;
			/* Key then value, as pair_set would copy them. */
			struct fdb_pair *o = &out[(*n)++];
			o->key = (uint8_t *)refs.v[i].key;
			o->klen = refs.v[i].klen;
			o->vlen = refs.v[i].vlen;
			o->tomb = 0;
		}
		if (lim && reverse && fdb_keycmp(iv->key, iv->klen, lim, limlen) <= 0)
			break;
		iv = reverse ? fdb_index_prev(&p) : fdb_index_next(&p);
	}
	free(refs.v);
	return rc;
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
			rc = ival_decode(s, iv, off, &c, NULL);
		if (!rc && c->n == 0 && fdb_index_count(s->index) > 1)
			rc = FLEX_ECORRUPT; /* empty intervals are removed */
		const uint8_t *k0, *v0;
		uint32_t kl0, vl0, sz0;
		if (!rc && c->n) {
			cent_pair(c, 0, &k0, &kl0, &v0, &vl0, &sz0);
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
			if (k->n != c->n || k->size != c->size ||
			    (k->raw && c->size && memcmp(k->raw, c->raw, c->size)) ||
			    (c->n && (memcmp(k->off, c->off, c->n * sizeof(uint32_t)) ||
				      memcmp(k->fp, c->fp, c->n * sizeof(uint16_t)))))
				rc = FLEX_ECORRUPT;
			/* Where the entry says its bytes lie, unless the FlexSpace
			 * freed them since, they still are. */
			uint8_t *b = k->map && c->size ? malloc(c->size) : NULL;
			for (uint32_t i = 0; b && !rc && i < c->n; i++) {
				uint32_t at = c->off[i];
				uint32_t sz = (i + 1 < c->n ? c->off[i + 1] : c->size) - at;
				int mrc = pmap_read(s, k, at, sz, b);
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
			cent_pair(c, c->n - 1, &kl, &kll, &vlp, &vll, &szl);
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
		cent_free(c);
		pos += iv->size;
		iv = fdb_index_next(&p);
	}
	free(last);
	if (!rc && pos != flexspace_size(s->fs))
		rc = FLEX_ECORRUPT;
	/* The cache's accounts: every ring entry is its interval's, and the
	 * charges add up within the bound (one entry may pass it alone). */
	size_t bytes = 0, thin = 0, grave = 0;
	for (uint32_t i = 0; i < s->nring && !rc; i++) {
		const struct fdb_cent *c = s->ring[i];
		if (c->slot != i || c->iv->cache != c || c->bytes != cent_bytes(c))
			rc = FLEX_ECORRUPT;
		bytes += c->bytes;
		thin += c->raw ? 0 : c->bytes;
	}
	for (uint32_t i = 0; i < s->ngrave; i++)
		grave += s->grave[i]->bytes;
	if (!rc && (bytes != s->cache_bytes || thin != s->thin_bytes || grave != s->grave_bytes ||
		    (s->nring > 1 && bytes + grave > s->cache_limit)))
		rc = FLEX_ECORRUPT;
	if (!rc && known && keys != s->keys)
		rc = FLEX_ECORRUPT;
	return rc;
}
