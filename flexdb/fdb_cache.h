/*
 * fdb_cache.h - what the parts of the store share: the interval cache
 * (fdb_cache.c: entries, the CLOCK rings, loading and admission; fdb_thin.c:
 * thin entries' layout and maps), the
 * store (fdb_store.c: open, changes and their runs, range deletes,
 * check), tidying (fdb_tidy.c) and the reads (fdb_read.c: gets,
 * prefetch, warming; fdb_scan.c: scans).  Private to libflexdb; the
 * locking rules are those of fdb_store.c.
 */
#ifndef FDB_CACHE_H
#define FDB_CACHE_H

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
/* The largest entry the cache keeps: beside a full thin share (3/4) and
 * the graveyard's room (1/32), whole entries have 7/32 of the cache. */
#define FDB_KEEP_MAX(s) ((s)->cache_limit / 8)
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

/* How an interval read by a reader enters the cache: ADMIT_AUTO leaves
 * it to fdb_store_admit (admit_whole); ADMIT_ROOM: whole while the cache
 * has room, thin after (warming: no whole entry of a cold interval
 * pushes out one a lookup brought in); ADMIT_RENEW: a thin entry in place
 * of the one it copies, whose map went stale (fdb_cand_renew). */
enum { ADMIT_NONE, ADMIT_AUTO, ADMIT_WHOLE, ADMIT_ROOM, ADMIT_RENEW };

/* fdb_cache.c */
int fdb_cache_attach(struct fdb_store *s, struct fdb_ival *iv, struct fdb_cent *c, int shared);
void fdb_cache_drop(struct fdb_store *s, struct fdb_ival *iv);
int fdb_cache_evict(struct fdb_store *s, size_t need, const struct fdb_cent *pin, int shared);
void fdb_cache_recharge(struct fdb_store *s, struct fdb_cent *c);
void fdb_cand_push(struct fdb_cands *cands, struct fdb_ival *iv, struct fdb_cent *c, int kind);
void fdb_cand_renew(struct fdb_store *s, struct fdb_cands *cands, struct fdb_ival *iv,
		    const struct fdb_cent *old, const struct fdb_pmap *m);
size_t fdb_cent_bytes(const struct fdb_cent *c);
/* What a thin entry's map adds to its charge (0 for a whole entry or
 * none).  A thin entry does not change once made. */
size_t fdb_cent_map_bytes(const struct fdb_cent *c);
void fdb_cent_free(struct fdb_cent *c);
int fdb_cent_from_raw(const struct fdb_ival *iv, uint8_t *raw, uint32_t size, struct fdb_pmap *map,
		      struct fdb_cent **out);
/* As fdb_cent_from_raw, for an entry about to change: raw has room for
 * cap bytes, and the offsets and fingerprints stay in arrays of their own
 * (not packed, which the first change would undo). */
int fdb_cent_for_change(const struct fdb_ival *iv, uint8_t *raw, uint32_t size, uint32_t cap,
			struct fdb_cent **out);
uint32_t fdb_cent_lower(const struct fdb_cent *c, const void *key, uint32_t klen, int *found);
struct fdb_cent *fdb_cent_new(void);
/* Pair i of an entry: its key and value inside the raw bytes (verified
 * when they entered the entry) and its record size.  Inline: scans and
 * the binary search take it for every pair they pass. */
static inline void fdb_cent_pair(const struct fdb_cent *c, uint32_t i, const uint8_t **key,
				 uint32_t *klen, const uint8_t **val, uint32_t *vlen,
				 uint32_t *size)
{
	const uint8_t *p = c->raw + c->off[i];
	*klen = *vlen = 0; /* (never malformed: the entry was verified) */
	size_t a = flex_varint_get(p, c->raw + c->size, klen);
	size_t b = flex_varint_get(p + a, c->raw + c->size, vlen);
	*key = p + a + b;
	*val = *key + *klen;
	*size = (i + 1 < c->n ? c->off[i + 1] : c->size) - c->off[i];
}
int fdb_cent_reserve(struct fdb_cent *c, uint32_t n, uint32_t size);
int fdb_cent_splice(struct fdb_cent *c, uint32_t pos, uint32_t del, const uint8_t *rec, uint32_t rs,
		    uint16_t fp);
void fdb_cent_unmap(struct fdb_cent *c);
struct fdb_cent *fdb_ival_cent(const struct fdb_ival *iv);
int fdb_ival_decode(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off,
		    struct fdb_cent **out);
int fdb_ival_keepable(const struct fdb_store *s, uint32_t size);
int fdb_ival_load(struct fdb_store *s, struct fdb_ipath *p, struct fdb_ival *iv,
		  struct fdb_cent **tmp);
int fdb_ival_read_raw(struct fdb_store *s, const struct fdb_ival *iv, uint64_t off, uint8_t **out,
		      struct fdb_pmap **map);
size_t fdb_load_bytes(const size_t *field);
void fdb_maps_policy(struct fdb_store *s);
size_t fdb_ring_limit(const struct fdb_store *s);
/* What thin entries may take of the cache, and the bytes they may still
 * take before they reach it (takes cache_mu). */
size_t fdb_cache_thin_share(const struct fdb_store *s);
size_t fdb_cache_thin_room(struct fdb_store *s);

/* Sets an entry's CLOCK bit, which a get or a scan of it earns (written
 * only when clear: readers on two CPUs do not trade the line). */
static inline void fdb_cent_touch(struct fdb_cent *c)
{
	if (!atomic_load_explicit(&c->ref, memory_order_relaxed))
		atomic_store_explicit(&c->ref, 1, memory_order_relaxed);
}

/* fdb_thin.c */
/* What a thin entry of c (whole or thin) with a map of `pieces` (0: none)
 * would be charged. */
size_t fdb_cent_thin_bytes(const struct fdb_cent *c, uint32_t pieces);
/* An entry's fingerprints, and the offsets of its records (into off[0..n)). */
const uint16_t *fdb_cent_fps(const struct fdb_cent *c);
void fdb_cent_offsets(const struct fdb_cent *c, uint32_t *off);
/* A thin entry of n pairs of size bytes in all, at offsets off[] with
 * fingerprints fp[], with a map of `pieces` (0: none) starting at loff[]
 * (loff[0] is 0) at DATA offsets poff[], stamped `stamp`; NULL when out
 * of memory. */
struct fdb_cent *fdb_thin_new(uint32_t n, uint32_t size, const uint32_t *off, const uint16_t *fp,
			      uint32_t pieces, const uint32_t *loff, const uint64_t *poff,
			      uint64_t stamp);
/* What fdb_thin_new charges for such an entry. */
size_t fdb_thin_bytes(uint32_t n, uint32_t size, const uint32_t *off, uint32_t pieces);
/* The first pair of thin entry c from *i on whose fingerprint is fp:
 * its index in *i, where its record starts in the interval and its size;
 * 0 when there is none. */
int fdb_thin_next(const struct fdb_cent *c, uint16_t fp, uint32_t *i, uint32_t *at, uint32_t *sz);
/* Reads bytes [at, at + len) of thin entry c's interval through its map
 * into buf: 0, -ESTALE (no map, or the FlexSpace moved the bytes since:
 * the caller reads through the FlexTree), or an error. */
int fdb_thin_read(struct fdb_store *s, const struct fdb_cent *c, uint32_t at, uint32_t len,
		  uint8_t *buf);
/* Appends the pieces of thin entry c's map to v[*nv..cap), and lowers
 * *stamp to the map's: 0, or -ESTALE when c has no map or v no room. */
int fdb_thin_pieces(const struct fdb_cent *c, struct flextree_mapping *v, size_t cap, size_t *nv,
		    uint64_t *stamp);
/* A thin copy of entry c (whole or thin) with map m (none when m is
 * NULL); c is left as it was (readers may hold it).  NULL when out of
 * memory. */
struct fdb_cent *fdb_thin_copy(const struct fdb_cent *c, const struct fdb_pmap *m);
/* Whether thin entry c's map is m (its stamp aside). */
int fdb_thin_map_is(const struct fdb_cent *c, const struct fdb_pmap *m);
/* A map of n pieces: its size, and where its data-file offsets are. */
size_t fdb_pmap_bytes(uint32_t n);
uint64_t *fdb_pmap_poff(const struct fdb_pmap *m);
/* The map of the interval at [off, off + size), cut out of a read's
 * report loc[0..n) that covers it (malloc'd; NULL when none, or out of
 * memory). */
struct fdb_pmap *fdb_pmap_new(const struct flextree_mapping *loc, size_t n, uint64_t stamp,
			      uint64_t off, uint32_t size);
/* Where the interval at [off, off + size) lies now, as a map (malloc'd;
 * NULL when the FlexSpace does not say in one report, or out of memory). */
struct fdb_pmap *fdb_pmap_locate(struct fdb_store *s, uint64_t off, uint32_t size);

/* fdb_store.c */
int fdb_anchor_verify(struct fdb_store *s, uint64_t off);
struct fdb_ival *fdb_ival_new(const void *key, uint32_t klen);

/* fdb_snap.c: the index file INDEX in directory dir.  fdb_snap_save
 * writes it (the store idle, the FlexSpace at `stamp`); fdb_snap_load
 * puts its index and thin entries in place of an empty store's when it
 * was written at `stamp`, else returns nonzero and changes nothing. */
int fdb_snap_save(struct fdb_store *s, const struct flex_io *io, const char *dir, uint64_t stamp);
int fdb_snap_load(struct fdb_store *s, const struct flex_io *io, const char *dir, uint64_t stamp);

/* A run is the changes of a commit chunk that fall into one interval.
 * They are made to the interval's entry and the index as they are worked
 * out, and their bytes and tags are collected here, to go to the
 * FlexSpace as one flexspace_apply at the end: readers, a crash and the
 * FlexSpace's maintenance see all of a run or none of it.  Until then the
 * FlexSpace is behind the index, so nothing reads it meanwhile (the
 * interval is loaded before the run starts, and an eviction does not
 * locate entries while a run is open: fdb_cache_evict). */
struct fdb_run {
	struct flexspace_op *ops;
	uint32_t n, cap;
	uint8_t *buf; /* the records the ops put, back to back */
	size_t used, bcap;
	uint64_t size; /* the FlexSpace's size once the ops are applied */
};

/* Exclusive lock: starts a run (s->in_run set); fdb_run_room makes room
 * for one more op and `bytes` more of records (at s->run->buf +
 * s->run->used), fdb_run_add adds the op, fdb_run_apply hands the run to
 * flexspace_apply (s->in_run cleared).  fdb_set_tag: an op of the run
 * while one is open, else flexspace_tag_set. */
int fdb_run_open(struct fdb_store *s);
int fdb_run_room(struct fdb_run *r, size_t bytes);
void fdb_run_add(struct fdb_run *r, int type, uint64_t off, uint64_t len, size_t rs, uint16_t tag);
int fdb_run_apply(struct fdb_store *s);
int fdb_set_tag(struct fdb_store *s, uint64_t off, uint16_t tag);
/* A flexspace_scan callback that counts extents in *(uint32_t *)arg. */
int fdb_count_piece(void *arg, const struct flextree_extent *e);

/* fdb_tidy.c */
void fdb_tidy_free(struct fdb_tidy *t);

#endif /* FDB_CACHE_H */
