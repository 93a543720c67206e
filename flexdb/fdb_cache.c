/*
 * fdb_cache.c - the interval cache: entries, the CLOCK ring, loading an
 * interval, and admission of what readers read.
 *
 * The interval cache holds intervals as their raw bytes plus the offset
 * and a 16-bit key fingerprint of each pair, and is updated write-through
 * by every change; CLOCK picks victims, and every byte of an entry is
 * charged to the cache size.  A victim is first made *thin* (its raw bytes
 * dropped), while thin entries take at most three quarters of the cache:
 * a lookup through one reads only the record whose fingerprint matches,
 * so a cache smaller than the store still spares most lookups the read of
 * a whole interval.  A thin entry costs about 5 bytes per pair (with
 * 100-byte values, a 40-byte head and 3 bytes a pair: fdb_thin.c lays
 * them out), so its share keeps one for every interval of a store many
 * times the cache.
 * (Half the cache left a quarter of a 2M-pair store's intervals without
 * one in 24 MiB, and each get there read about 1.7 pages of DATA instead
 * of one: docs/BENCHMARKS.md.)  A thin entry also keeps where its interval's bytes lie
 * in the FlexSpace's data file (its map, from the read that loaded the
 * interval or from the FlexTree when the entry is made thin), so that
 * the record is read without a FlexTree lookup: after random inserts an
 * interval is about one extent per pair, and the tree of a large store
 * does not fit its leaf cache.  The FlexSpace says when the bytes moved
 * (garbage collection freed their segment), and the lookup then goes
 * through the tree.  An entry larger than an eighth of the cache is never
 * kept.  Readers build entries from the intervals they read under the
 * shared lock and offer them (fdb_cands); they are attached under the
 * exclusive lock if no change came in between.  Intervals scattered over
 * many extents are rewritten by their next change when the store is large
 * against the memtable (fdb_store.c, ival_scattered).  Reads do not ask
 * for rewrites (the paper's access-driven defragmentation): with thin
 * entries a lookup reads one pair whatever the layout, and rewriting
 * what reads touched made GC move five times the bytes rewritten and
 * stalled read-only workloads (docs/BENCHMARKS.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_cache.h"

/* ---- cache entries -------------------------------------------------------- */

struct fdb_cent *fdb_cent_new(void)
{
	struct fdb_cent *c = calloc(1, sizeof(*c));
	if (c) {
		c->bytes = sizeof(*c);
		c->slot = UINT32_MAX;
		/* Readers set the CLOCK bit under the shared lock. */
		FLEX_ATOMIC_OBJ(&c->ref, sizeof(c->ref));
	}
	return c;
}

void fdb_cent_free(struct fdb_cent *c)
{
	if (!c)
		return;
	if (c->thin) {
		free(c);
		return;
	}
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
void fdb_cent_unmap(struct fdb_cent *c)
{
	if (c->map_own)
		free(c->map);
	c->map = NULL;
	c->map_own = 0;
}

/* What an entry is charged: its raw bytes, two small arrays and its map;
 * a thin one, its allocation. */
size_t fdb_cent_bytes(const struct fdb_cent *c)
{
	if (c->thin)
		return fdb_cent_thin_bytes(c, c->pieces);
	return sizeof(*c) + c->rawcap + (size_t)c->cap * (sizeof(uint32_t) + sizeof(uint16_t)) +
	       (c->map ? fdb_pmap_bytes(c->map->n) : 0);
}

/* Moves a private whole entry's offsets and fingerprints right after its
 * struct (one allocation, so a lookup misses the cache once less;
 * fdb_cent_reserve moves them out again when the entry grows).  The entry
 * moves: returns it (c itself, unpacked, when out of memory). */
static struct fdb_cent *cent_pack(struct fdb_cent *c)
{
	size_t arrays = (size_t)c->n * (sizeof(uint32_t) + sizeof(uint16_t));
	struct fdb_cent *t = malloc(sizeof(*t) + ((arrays + 7) & ~(size_t)7));
	if (!t)
		return c;
	memcpy(t, c, sizeof(*t));
	t->off = (uint32_t *)(t + 1);
	t->fp = (uint16_t *)(t->off + c->n);
	if (c->n) {
		memcpy(t->off, c->off, c->n * sizeof(uint32_t));
		memcpy(t->fp, c->fp, c->n * sizeof(uint16_t));
	}
	t->cap = c->n;
	t->packed = 1;
	t->bytes = fdb_cent_bytes(t);
	FLEX_ATOMIC_OBJ(&t->ref, sizeof(t->ref));
	/* raw and map moved to t */
	c->raw = NULL;
	c->map_own = 0;
	fdb_cent_free(c);
	return t;
}

/* Makes room for n pairs of size bytes in all; the entry is about to
 * change, so its map goes. */
int fdb_cent_reserve(struct fdb_cent *c, uint32_t n, uint32_t size)
{
	fdb_cent_unmap(c);
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

/* Position of the first pair >= key; *found when equal. */
uint32_t fdb_cent_lower(const struct fdb_cent *c, const void *key, uint32_t klen, int *found)
{
	uint32_t lo = 0, hi = c->n;
	const uint8_t *k, *v;
	uint32_t kl, vl, sz;
	int eq = 0; /* the pair at hi (when below n) is the key */
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		fdb_cent_pair(c, mid, &k, &kl, &v, &vl, &sz);
		int cmp = fdb_keycmp(k, kl, key, klen);
		if (cmp < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
			eq = cmp == 0;
		}
	}
	*found = lo < c->n && eq;
	return lo;
}

/* Replaces pairs [pos, pos + del) by the encoded record rec (rs bytes,
 * none when rs is 0), keeping offsets and fingerprints in step. */
int fdb_cent_splice(struct fdb_cent *c, uint32_t pos, uint32_t del, const uint8_t *rec, uint32_t rs,
		    uint16_t fp)
{
	uint32_t add = rs ? 1 : 0;
	uint32_t at = pos < c->n ? c->off[pos] : c->size;
	uint32_t end = pos + del < c->n ? c->off[pos + del] : c->size;
	int64_t delta = (int64_t)rs - (int64_t)(end - at);
	int rc = fdb_cent_reserve(c, c->n + add, (uint32_t)((int64_t)c->size + delta));
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

/* ---- the CLOCK rings ------------------------------------------------------ */

/* An interval's entry, as readers under the shared lock load it: the
 * entry stays valid until the lock is released (retired entries wait in
 * the graveyard), and its bytes do not change while the lock is held. */
struct fdb_cent *fdb_ival_cent(const struct fdb_ival *iv)
{
	struct fdb_cent *c = __atomic_load_n(&iv->cache, __ATOMIC_ACQUIRE);
	FLEX_HB_AFTER(&iv->cache);
	return c;
}

static void ival_set_cent(struct fdb_ival *iv, struct fdb_cent *c)
{
	FLEX_HB_BEFORE(&iv->cache);
	__atomic_store_n(&iv->cache, c, __ATOMIC_RELEASE);
}

/* The bytes the rings may hold: the cache less the graveyard's share. */
size_t fdb_ring_limit(const struct fdb_store *s)
{
	return s->cache_limit - s->cache_limit / 32;
}

/* What thin entries may take of the cache.  Whole entries have the rest
 * less the graveyard's 32nd (7/32), so one may take an eighth at most
 * (FDB_KEEP_MAX). */
static size_t thin_share(const struct fdb_store *s)
{
	return s->cache_limit / 4 * 3;
}

size_t fdb_cache_thin_share(const struct fdb_store *s)
{
	return thin_share(s);
}

size_t fdb_cache_thin_room(struct fdb_store *s)
{
	pthread_mutex_lock(&s->cache_mu);
	size_t cap = thin_share(s), room = s->thin_bytes < cap ? cap - s->thin_bytes : 0;
	pthread_mutex_unlock(&s->cache_mu);
	return room;
}

/* cache_bytes and grave_bytes change under cache_mu or the exclusive
 * lock and are read without them (fdb_store_scan, fdb_store_reap_due). */
static void set_bytes(size_t *field, size_t v)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
}

size_t fdb_load_bytes(const size_t *field)
{
	return __atomic_load_n(field, __ATOMIC_RELAXED);
}

/* The ring of c: whole entries and thin ones (raw NULL) have one each, so
 * that the hand looking for a whole entry to make thin does not pass
 * every thin entry on its way. */
static struct fdb_ring *cent_ring(struct fdb_store *s, const struct fdb_cent *c)
{
	return &s->ring[c->raw ? 0 : 1];
}

size_t fdb_cent_map_bytes(const struct fdb_cent *c)
{
	return c->raw || !c->pieces ? 0
				    : fdb_cent_thin_bytes(c, c->pieces) - fdb_cent_thin_bytes(c, 0);
}

static void ring_remove(struct fdb_store *s, struct fdb_cent *c)
{
	if (c->slot == UINT32_MAX)
		return;
	struct fdb_ring *r = cent_ring(s, c);
	uint32_t i = c->slot;
	r->v[i] = r->v[--r->n];
	r->v[i]->slot = i;
	c->slot = UINT32_MAX;
	set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes);
	if (!c->raw) {
		s->thin_bytes -= c->bytes;
		s->thin_map_bytes -= fdb_cent_map_bytes(c);
	}
	if (r->hand >= r->n)
		r->hand = 0;
}

/* Makes room for one more entry in an array of n of *cap (a ring, the
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

/* Puts c in its ring and charges it. */
static int ring_add(struct fdb_store *s, struct fdb_cent *c)
{
	struct fdb_ring *r = cent_ring(s, c);
	if (cent_vec_room(&r->v, r->n, &r->cap))
		return -ENOMEM;
	c->slot = r->n;
	r->v[r->n++] = c;
	set_bytes(&s->cache_bytes, s->cache_bytes + c->bytes);
	if (!c->raw) {
		s->thin_bytes += c->bytes;
		s->thin_map_bytes += fdb_cent_map_bytes(c);
	}
	return 0;
}

/* Exclusive lock: a copy of thin entry c without its map takes c's place
 * in the ring, with its CLOCK bit, and as its interval's entry; c is
 * freed.  -ENOMEM leaves c as it was. */
static int thin_unmap(struct fdb_store *s, struct fdb_cent *c)
{
	struct fdb_cent *t = fdb_thin_copy(c, NULL);
	if (!t)
		return -ENOMEM;
	struct fdb_ring *r = cent_ring(s, c);
	t->slot = c->slot;
	r->v[t->slot] = t;
	c->slot = UINT32_MAX;
	atomic_store_explicit(&t->ref, atomic_load_explicit(&c->ref, memory_order_relaxed),
			      memory_order_relaxed);
	set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes + t->bytes);
	s->thin_bytes = s->thin_bytes - c->bytes + t->bytes;
	s->thin_map_bytes = s->thin_map_bytes - fdb_cent_map_bytes(c) + fdb_cent_map_bytes(t);
	ival_set_cent(t->iv, t);
	fdb_cent_free(c);
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

/* Takes c, out of its ring, out of use: freed at once under the exclusive
 * lock; under the shared lock (after grave_reserve) other readers may be
 * reading it, so it waits in the graveyard. */
static void cent_retire(struct fdb_store *s, struct fdb_cent *c, int shared)
{
	if (!shared) {
		fdb_cent_free(c);
		return;
	}
	s->grave[s->ngrave++] = c;
	set_bytes(&s->grave_bytes, s->grave_bytes + c->bytes);
}

int fdb_store_reap_due(struct fdb_store *s)
{
	return fdb_load_bytes(&s->grave_bytes) >= s->cache_limit / 64;
}

void fdb_store_reap(struct fdb_store *s)
{
	for (uint32_t i = 0; i < s->ngrave; i++)
		fdb_cent_free(s->grave[i]);
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
	return fdb_pmap_locate(s, fdb_index_offset(&p), c->size);
}

/* Makes `need` bytes fit in the thin share by taking thin entries' maps
 * away (a copy without its map takes an entry's place), from the thin
 * ring's hand on, at most once round the ring; at once -ENOSPC when all
 * the maps together would not make the room.  The maps of a load's
 * scattered intervals (about one piece, 12 bytes, per pair) would
 * otherwise keep a third as many intervals in thin entries as fit
 * without them, and a get of any other reads its interval whole.
 * Exclusive lock only (the entries it replaces are freed at once); never
 * touches `pin`.  0 when the bytes fit. */
static int thin_strip(struct fdb_store *s, size_t need, const struct fdb_cent *pin)
{
	size_t cap = thin_share(s);
	struct fdb_ring *r = &s->ring[1];
	if (s->thin_bytes - s->thin_map_bytes + need > cap)
		return -ENOSPC;
	for (uint32_t steps = r->n; s->thin_bytes + need > cap && steps; steps--) {
		if (r->hand >= r->n)
			r->hand = 0;
		struct fdb_cent *c = r->v[r->hand++];
		if (c != pin && c->pieces && thin_unmap(s, c))
			break;
	}
	return s->thin_bytes + need <= cap ? 0 : -ENOSPC;
}

/* Makes `need` more bytes fit in the cache; never touches `pin`.  CLOCK,
 * in each ring: an entry whose bit is set gets its bit cleared and is
 * passed.  Thin entries beyond their share of the cache go first; then
 * an unreferenced whole entry is made thin while thin entries stay
 * within their share (they are a tenth of the size or less and still
 * spare a lookup most of its reading), without its map when only that
 * fits, and goes otherwise; thin entries within their share go only
 * when no whole entry is left.  Under the exclusive lock maps go before
 * entries: other thin entries' maps make room for a whole entry's thin
 * copy (thin_strip), and a thin entry with a map loses the map (a copy
 * without it takes its place) before it goes.  Each hand takes at most
 * three times its ring's length in steps, so this ends; a last pass
 * ignores the bits and drops entries, so the bound holds even when
 * every entry was just used.  Under the shared lock (`shared`) it stops
 * when the graveyard is full: returns nonzero if the bytes do not fit
 * then. */
int fdb_cache_evict(struct fdb_store *s, size_t need, const struct fdb_cent *pin, int shared)
{
	size_t thin_cap = thin_share(s), limit = fdb_ring_limit(s);
	uint32_t steps[2] = {3 * s->ring[0].n + 3, 3 * s->ring[1].n + 3};
	while (s->cache_bytes + need > limit) {
		int k = s->thin_bytes > thin_cap;
		for (int tries = 0; tries < 2; tries++, k = !k) {
			const struct fdb_ring *q = &s->ring[k];
			if (q->n > 1 || (q->n == 1 && q->v[0] != pin))
				break;
		}
		struct fdb_ring *r = &s->ring[k];
		if (r->n == 0 || (r->n == 1 && r->v[0] == pin))
			break; /* nothing but pin */
		int force = steps[k] == 0;
		if (!force)
			steps[k]--;
		if (r->hand >= r->n)
			r->hand = 0;
		struct fdb_cent *c = r->v[r->hand];
		if (c == pin || (!force && atomic_exchange(&c->ref, 0))) {
			r->hand++;
			continue;
		}
		if (k == 1 && !force && !shared && c->pieces && thin_unmap(s, c) == 0) {
			r->hand++;
			continue;
		}
		if (shared && grave_reserve(s, c->bytes))
			return -ENOSPC;
		ring_remove(s, c);
		struct fdb_cent *t = NULL;
		if (k == 0 && !force) {
			int maps = !s->in_run && __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
			struct fdb_pmap *pm = c->map || !maps ? NULL : cent_locate(s, c);
			const struct fdb_pmap *use = c->map && maps ? c->map : pm;
			/* Without its map when that does not fit, and (under
			 * the exclusive lock) other thin entries' maps go
			 * before it does: a thin entry spares a read of the
			 * whole interval, a map only a FlexTree lookup. */
			size_t thin = fdb_cent_thin_bytes(c, use ? use->n : 0);
			if (use && s->thin_bytes + thin > thin_cap) {
				use = NULL;
				thin = fdb_cent_thin_bytes(c, 0);
			}
			if (s->thin_bytes + thin <= thin_cap ||
			    (!shared && thin_strip(s, thin, pin) == 0))
				t = fdb_thin_copy(c, use);
			free(pm);
		}
		if (t && ring_add(s, t) != 0) {
			fdb_cent_free(t);
			t = NULL;
		}
		if (t) {
			/* A thin copy takes the whole entry's place. */
			ival_set_cent(t->iv, t);
			cent_retire(s, c, shared);
			continue;
		}
		ival_set_cent(c->iv, NULL);
		cent_retire(s, c, shared);
	}
	return s->cache_bytes + need > limit && shared ? -ENOSPC : 0;
}

/* Puts c, of iv, in the cache, making room for it (not beyond the
 * graveyard's room when `shared`).  Nonzero: c was not attached. */
int fdb_cache_attach(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *c, int shared)
{
	if (fdb_cache_evict(s, c->bytes, c, shared))
		return -ENOSPC;
	c->iv = iv;
	if (ring_add(s, c))
		return -ENOMEM;
	atomic_store(&c->ref, 1);
	ival_set_cent(iv, c);
	return 0;
}

/* Puts c in the place of `old`, iv's entry, once the cache has room for
 * the difference (never taken from `old`): a reader under the shared lock
 * finds the one or the other, never neither, which would read the whole
 * interval.  c gets old's CLOCK bit with keep_ref, else a set one.
 * Nonzero: c is freed and `old` stays.  The graveyard's room for `old` is
 * looked at before and after making room (the entries that go make it
 * smaller): no entry goes for a replacement that cannot be made. */
static int cache_replace(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *old,
			 struct fdb_cent *c, int shared, int keep_ref)
{
	if ((shared && grave_reserve(s, old->bytes)) ||
	    fdb_cache_evict(s, c->bytes > old->bytes ? c->bytes - old->bytes : 0, old, shared) ||
	    (shared && grave_reserve(s, old->bytes)) || ring_add(s, c)) {
		fdb_cent_free(c);
		return -ENOSPC;
	}
	ring_remove(s, old);
	c->iv = iv;
	atomic_store_explicit(&c->ref,
			      keep_ref ? atomic_load_explicit(&old->ref, memory_order_relaxed) : 1,
			      memory_order_relaxed);
	ival_set_cent(iv, c);
	cent_retire(s, old, shared);
	return 0;
}

/* Exclusive lock: drops iv's entry. */
void fdb_cache_drop(struct fdb_store *s, struct fdb_ival *iv)
{
	if (!iv->cache)
		return;
	ring_remove(s, iv->cache);
	fdb_cent_free(iv->cache);
	iv->cache = NULL;
}

/* Brings an entry's charge up to date after a change. */
void fdb_cache_recharge(struct fdb_store *s, struct fdb_cent *c)
{
	size_t now = fdb_cent_bytes(c);
	if (c->slot != UINT32_MAX) {
		set_bytes(&s->cache_bytes, s->cache_bytes - c->bytes + now);
		if (!c->raw)
			s->thin_bytes = s->thin_bytes - c->bytes + now;
	}
	c->bytes = now;
}

/* ---- loading an interval ---------------------------------------------------- */

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
	/* Room for the pairs the interval should hold, at once. */
	uint32_t count = __atomic_load_n(&iv->count, __ATOMIC_RELAXED);
	if (p < end)
		rc = fdb_cent_reserve(c, count != FDB_COUNT_UNKNOWN && count ? count : 16, c->size);
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
		if (c->n == c->cap && (rc = fdb_cent_reserve(c, c->n + 1, c->size)) != 0)
			break;
		c->off[c->n] = (uint32_t)(p - c->raw);
		c->fp[c->n] = fdb_fingerprint(key, klen);
		c->n++;
		pk = key;
		pklen = klen;
		first = 0;
		p += size;
	}
	if (!rc && count != FDB_COUNT_UNKNOWN && count != c->n)
		rc = FLEX_ECORRUPT;
	c->bytes = fdb_cent_bytes(c);
	return rc;
}

/* An entry for iv made of its raw bytes and map (both taken over: freed
 * on failure; map may be NULL). */
static int cent_from_raw(const struct fdb_ival *iv, uint8_t *raw, uint32_t size, uint32_t cap,
			 struct fdb_pmap *map, struct fdb_cent **out)
{
	*out = NULL;
	struct fdb_cent *c = fdb_cent_new();
	if (!c) {
		free(raw);
		free(map);
		return -ENOMEM;
	}
	c->raw = raw;
	c->size = size;
	c->rawcap = cap;
	int rc = cent_index(iv, c);
	c->map = map;
	c->map_own = map != NULL;
	if (rc) {
		fdb_cent_free(c);
		return rc;
	}
	c->bytes = fdb_cent_bytes(c);
	*out = cap == size ? cent_pack(c) : c;
	return 0;
}

int fdb_cent_from_raw(const struct fdb_ival *iv, uint8_t *raw, uint32_t size, struct fdb_pmap *map,
		      struct fdb_cent **out)
{
	return cent_from_raw(iv, raw, size, size, map, out);
}

int fdb_cent_for_change(const struct fdb_ival *iv, uint8_t *raw, uint32_t size, uint32_t cap,
			struct fdb_cent **out)
{
	return cent_from_raw(iv, raw, size, cap, NULL, out);
}

/* Reads an interval's bytes, and with `map` where they lie (NULL when
 * the FlexSpace did not say). */
int fdb_ival_read_raw(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off, uint8_t **out,
		      struct fdb_pmap **map)
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
			*map = fdb_pmap_new(loc, nloc, stamp, off, iv->size);
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

/* Reads the interval at off into an entry (cent_index checks it). */
int fdb_ival_decode(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
		    struct fdb_cent **out)
{
	uint8_t *raw;
	int rc = fdb_ival_read_raw(s, iv, off, &raw, NULL);
	if (!rc)
		rc = fdb_cent_from_raw(iv, raw, iv->size, NULL, out);
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
int fdb_ival_load(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		  struct fdb_cent **tmp)
{
	*tmp = NULL;
	if (iv->cache && iv->cache->raw)
		return 0;
	fdb_cache_drop(s, iv); /* a thin entry: replaced by the whole one */
	struct fdb_cent *c;
	int rc = fdb_ival_decode(s, iv, fdb_index_offset(p), &c);
	if (rc)
		return rc;
	ival_counted(s, iv, c->n);
	fdb_stat_add(s, FDB_ST_MISSES);
	if (c->bytes > FDB_KEEP_MAX(s)) {
		*tmp = c;
		return 0;
	}
	rc = fdb_cache_attach(s, iv, c, 0);
	if (rc)
		fdb_cent_free(c);
	return rc;
}

/* An entry of an interval this size may be kept at all. */
int fdb_ival_keepable(const struct fdb_store *s, uint32_t size)
{
	return (size_t)size + sizeof(struct fdb_cent) <= FDB_KEEP_MAX(s);
}

/* cache_mu or the exclusive lock: whether an interval a lookup missed
 * enters the cache whole: while the cache has room, and on one miss in
 * FDB_ADMIT_EVERY after that (a hot interval gets in soon, a cold one
 * seldom pushes a warm one out); otherwise thin. */
static int admit_whole(struct fdb_store *s, uint32_t size)
{
	uint64_t tick = s->admit_tick++;
	return s->cache_bytes + 2 * (size_t)size <= fdb_ring_limit(s) ||
	       tick % FDB_ADMIT_EVERY == 0;
}

/* Whether thin entries keep where their pairs lie.  A map spares a thin
 * hit the FlexTree but costs 12 bytes per extent and an 8-byte stamp,
 * against about 3 bytes per pair: worth it while thin entries with maps
 * for every interval would fit in the thin share (whole entries hold the
 * rest of what is read often), a loss when the store is far larger than
 * the cache and the extents are many, where covering more intervals
 * spares whole-interval reads (2M pairs, an extent per pair: a 24 MiB
 * interval cache read 39.8 KB per get with maps against 31.7 without).
 * From the index, the pairs it counted and the FlexSpace's extent count,
 * at open and every FDB_POLICY_EVERY admissions (cache_mu or the
 * exclusive lock). */
#define FDB_POLICY_EVERY 1024
void fdb_maps_policy(struct fdb_store *s)
{
	uint64_t n = fdb_index_count(s->index);
	struct flexspace_stats st;
	if (!n || flexspace_stats(s->fs, &st) != 0)
		return;
	/* The pairs of the intervals not counted yet are guessed from the
	 * others (as many as extents when none is counted); a pair costs 3
	 * bytes when every record is under 256 bytes (fdb_thin.c: taken to
	 * be so when they average under 128), 4 otherwise.  Every map has a
	 * piece, and an entry is rounded up to 8 bytes. */
	double pairs = (double)s->keys, ivals = (double)n;
	double pieces = st.extents > n ? (double)st.extents : ivals;
	if (s->uncounted < n)
		pairs *= ivals / (double)(n - s->uncounted);
	else
		pairs = (double)st.extents;
	double per_pair = pairs > 0 && (double)s->bytes / pairs < 128.0 ? 3.0 : 4.0;
	double all =
	    ivals * ((double)FDB_CENT_HEAD + 8.0 - 4.0 + 4.0) + 12.0 * pieces + per_pair * pairs;
	int use = all <= (double)thin_share(s);
	__atomic_store_n(&s->use_maps, use, __ATOMIC_RELAXED);
}

/* Shared lock: offers entry c of iv to the cache (fdb_store_admit). */
void fdb_cand_push(struct fdb_cands *cands, struct fdb_ival *iv, struct fdb_cent *c, int kind)
{
	cands->v[cands->n].iv = iv;
	cands->v[cands->n].c = c;
	cands->v[cands->n].old = NULL;
	cands->v[cands->n++].kind = kind;
}

/* Shared lock: thin entry `old` of iv met a map whose bytes moved
 * (garbage collection or tidying freed a segment they lay in).  Offers a
 * copy with map m, where they lie now (none when m is NULL or thin
 * entries keep no maps), in its place: otherwise every read of it would
 * try the stale map, be refused, and read through the FlexTree, until
 * the interval changed.  The interval's contents are those of `old` while
 * it is iv's entry, which fdb_store_admit checks. */
void fdb_cand_renew(struct fdb_store *s, struct fdb_cands *cands, struct fdb_ival *iv,
		    const struct fdb_cent *old, const struct fdb_pmap *m)
{
	if (cands->n >= cands->cap || !old->thin)
		return;
	for (int i = 0; i < cands->n; i++)
		if (cands->v[i].iv == iv)
			return;
	struct fdb_cent *t =
	    fdb_thin_copy(old, __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED) ? m : NULL);
	if (!t)
		return;
	fdb_cand_push(cands, iv, t, ADMIT_RENEW);
	cands->v[cands->n - 1].old = old;
}

void fdb_cands_init(struct fdb_store *s, struct fdb_cands *cands, struct fdb_cand *v, int cap)
{
	cands->n = cands->done = 0;
	cands->v = v ? v : cands->inline_v;
	cands->cap = v ? cap : FDB_CANDS_INLINE;
	cands->gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
}

void fdb_cands_free(struct fdb_cands *cands)
{
	for (int i = cands->done; i < cands->n; i++)
		fdb_cent_free(cands->v[i].c);
	cands->n = cands->done = 0;
}

/* Attaches (or frees) candidates [from, to). */
static void admit_range(struct fdb_store *s, struct fdb_cands *cands, int from, int to, int shared)
{
	for (int i = from; i < to; i++) {
		struct fdb_ival *iv = cands->v[i].iv;
		struct fdb_cent *c = cands->v[i].c;
		cands->v[i].c = NULL;
		int kind = cands->v[i].kind;
		if (kind == ADMIT_RENEW) {
			/* Only readers renew (shared): the entry they saw
			 * waits in the graveyard if it was retired since, so
			 * the same address is the same entry.  Room first, so
			 * that the interval never loses its entry. */
			struct fdb_cent *was = iv->cache;
			if (was != cands->v[i].old) {
				fdb_cent_free(c);
				continue;
			}
			if (cache_replace(s, iv, was, c, shared, 1))
				continue;
			fdb_stat_add(s, FDB_ST_RENEWED);
			continue;
		}
		int whole = kind == ADMIT_WHOLE ||
			    (kind == ADMIT_AUTO ? admit_whole(s, c->size)
						: s->cache_bytes + 2 * (size_t)c->size <= fdb_ring_limit(s));
		if (!whole) {
			int maps = __atomic_load_n(&s->use_maps, __ATOMIC_RELAXED);
			struct fdb_cent *t = fdb_thin_copy(c, maps ? c->map : NULL);
			fdb_cent_free(c);
			if (!t)
				continue;
			c = t;
		} else if (c->map) {
			/* Whole entries read their pairs from memory; a thin copy
			 * made later finds where they lie then (cent_locate). */
			fdb_cent_unmap(c);
			c->bytes = fdb_cent_bytes(c);
		}
		struct fdb_cent *old = iv->cache;
		if (old && (old->raw || !c->raw)) {
			fdb_cent_free(c); /* another reader was first */
			continue;
		}
		if (old) {
			/* A thin entry, made whole. */
			if (cache_replace(s, iv, old, c, shared, 0))
				continue;
		} else if (fdb_cache_attach(s, iv, c, shared)) {
			fdb_cent_free(c);
			continue;
		}
		ival_counted(s, iv, c->n);
	}
}

/* The checks and the housekeeping before the first candidate: 0 to go on. */
static int admit_begin(struct fdb_store *s, struct fdb_cands *cands, int shared)
{
	/* Built under the shared lock: valid only if nothing changed since. */
	if (s->failed || cands->gen != atomic_load_explicit(&s->gen, memory_order_relaxed)) {
		fdb_cands_free(cands);
		return -1;
	}
	if (shared)
		pthread_mutex_lock(&s->cache_mu);
	else if (s->ngrave)
		fdb_store_reap(s);
	if (s->pol_tick++ % FDB_POLICY_EVERY == 0)
		fdb_maps_policy(s);
	return 0;
}

void fdb_store_admit(struct fdb_store *s, struct fdb_cands *cands, int shared)
{
	if (cands->n <= cands->done || admit_begin(s, cands, shared))
		return;
	admit_range(s, cands, cands->done, cands->n, shared);
	cands->n = cands->done = 0;
	if (shared)
		pthread_mutex_unlock(&s->cache_mu);
}

int fdb_store_admit_part(struct fdb_store *s, struct fdb_cands *cands, int max)
{
	if (cands->n <= cands->done || (!cands->done && admit_begin(s, cands, 0)))
		return 0;
	int to = max > 0 && cands->n - cands->done > max ? cands->done + max : cands->n;
	admit_range(s, cands, cands->done, to, 0);
	cands->done = to;
	if (to < cands->n)
		return 1;
	cands->n = cands->done = 0;
	return 0;
}
