/*
 * flexdb.h - FlexDB, a sorted key-value store kept in key order inside a
 * FlexSpace (paper section 5).
 *
 * Puts and deletes go to a memtable and a write-ahead log; a background
 * committer moves full memtables into the FlexSpace, where all pairs are
 * stored sorted, found through a small in-memory sparse index and an
 * interval cache.  A store is a directory: IDENTITY (what the directory
 * is, written first at creation), LOCK, WAL-<n> files, and the FlexSpace
 * in space/.  Formats: docs/FORMAT.md; guarantees:
 * docs/DURABILITY.md.
 *
 * Keys are 1 .. FLEXDB_MAX_KEY bytes, values 0 .. FLEXDB_MAX_VALUE bytes,
 * any bytes (NUL included).  Keys are ordered by memcmp, a shorter key
 * first on a common prefix.  An empty value is a value, not a delete.
 *
 * Thread-safety: one handle may be used by any number of threads at once;
 * writers are serialised, readers run in parallel with them and with the
 * committer.  A batch or an iterator is used by one thread at a time.
 * Statuses follow flex_common.h; FLEXDB_NOTFOUND is a positive status.
 */
#ifndef FLEXDB_H
#define FLEXDB_H

#include <stddef.h>
#include <stdint.h>

#include "flex_common.h"
#include "flexspace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLEXDB_NOTFOUND 1
#define FLEXDB_MAX_KEY 4096u
#define FLEXDB_MAX_VALUE (1u << 20)

struct flexdb;
struct flexdb_batch;
struct flexdb_iter;

struct flexdb_options {
	/* Passed to the FlexSpace (io, segment size, GC ratio, ...).  Its
	 * `create` field is ignored: see create below.  defer_maintenance is
	 * always set: the committer runs the FlexSpace's tree commits and
	 * garbage collection between chunks, without the lock readers take.
	 * With max_data_size set, a change that needs room still syncs or
	 * collects while readers wait. */
	struct flexspace_options space;
	/* Bytes of cached store: the FlexSpace's tree leaves
	 * (space.tree_cache_size, a quarter of cache_size when 0; at most
	 * half of it) and the interval cache, which has the rest: intervals
	 * kept whole (their pairs, offsets and fingerprints) and, in at most
	 * a quarter of it, thin (offsets and fingerprints only: a lookup
	 * reads one pair).  0 means 64 MiB.  Range: 1 MiB .. 1 TiB.
	 * Besides it and the memtables, a store's memory is its sparse index
	 * (one entry per interval of up to 32 pairs, about 80 bytes each
	 * with a 16-byte key: under 4 bytes per pair of 116 bytes), the tree's
	 * internal nodes and leaf stubs (under a byte per extent), and the
	 * FlexSpace's segment buffer (space.segment_size, 4 MiB).  Memory the
	 * program's allocator keeps after the library freed it is not
	 * counted: a cache that turns over frees as much as it allocates. */
	uint64_t cache_size;
	/* Bytes a memtable may hold before it is handed to the committer; two
	 * exist at most, so writers block only when both are full.  0 means
	 * 32 MiB.  Range: 64 KiB .. 4 GiB. */
	uint64_t memtable_size;
	/* Nonzero: every put, delete and flexdb_write is durable when it
	 * returns (the WAL is fdatasync'ed, shared by concurrent writers:
	 * group commit).  Zero (default): durable after flexdb_sync; a
	 * returned write survives a crash of the process but not of the
	 * machine until then. */
	int sync_writes;
	/* Zero (default with a non-NULL opt too): create the store when the
	 * directory is missing or empty.  Nonzero: opening a missing or empty
	 * directory fails with -ENOENT, and nothing is created or written
	 * there. */
	int no_create;
};

struct flexdb_stats {
	/* Pairs in the FlexSpace.  Open does not read the whole store, so
	 * until every interval has been read once (intervals_uncounted is 0)
	 * this counts only the pairs of the intervals read so far. */
	uint64_t keys;
	uint64_t intervals_uncounted;
	uint64_t bytes;		   /* bytes of encoded pairs in the FlexSpace */
	uint64_t intervals;	   /* sparse index entries */
	uint64_t cache_bytes;	   /* held by the interval cache */
	uint64_t cache_hits;	   /* lookups served from a whole cached interval */
	uint64_t cache_misses;	   /* intervals read whole from the FlexSpace */
	/* lookups through a thin entry (offsets and fingerprints only): one
	 * record read from the FlexSpace instead of the whole interval */
	uint64_t cache_thin_hits;
	uint64_t memtable_bytes;   /* both memtables */
	uint64_t memtable_entries; /* both memtables (range deletes count) */
	uint64_t wal_bytes;	   /* WAL files on disk */
	uint64_t committer_runs;   /* memtables committed to the FlexSpace */
	uint64_t committed_pairs;  /* puts, deletes, range deletes committed */
	uint64_t writer_stalls;	   /* times a writer waited for the committer */
	uint64_t wal_syncs;	   /* WAL fdatasyncs (group commits) */
	uint64_t recovered_ops;	   /* WAL operations replayed at open */
	struct flexspace_stats space;
};

/* Opens or creates the store in directory dir.  Replays the WALs left by a
 * crash.  A store is created only in a missing or empty directory (or one
 * holding only the IDENTITY of a creation cut short), and an existing one
 * is opened only when its IDENTITY, or for a store made before identities
 * its space/ subdirectory, proves the library made it
 * (docs/DURABILITY.md, "What open refuses").  Any other directory is
 * refused before a file is created, opened for writing or changed:
 *   FLEX_ENOTSTORE    it (or space/) holds files the library did not create
 *   FLEX_EKIND_SPACE  it is a FlexSpace (open it with flexspace_open)
 *   -ENOENT           missing or empty, and no_create is set
 * Other returns: 0 and *out, FLEX_EBUSY (held by another handle or
 * process), FLEX_EOPTION, FLEX_ECORRUPT, FLEX_EVERSION, -errno.  On
 * failure *out is NULL.  A store made before identities gets its
 * IDENTITY (and space/ its own) when opened without no_create. */
FLEX_EXPORT int flexdb_open(const char *dir, const struct flexdb_options *opt,
			    struct flexdb **out);

/* Commits the memtables, syncs and frees the handle (even on error, whose
 * status it returns).  Iterators must be closed first.  NULL: no-op, 0. */
FLEX_EXPORT int flexdb_close(struct flexdb *db);

/* Sets key to val.  Returns 0, -EINVAL (NULL with nonzero length, klen 0),
 * FLEX_ETOOBIG (key or value over the limits), FLEX_EFAILED (an earlier
 * write or sync failed: the store refuses changes), -errno. */
FLEX_EXPORT int flexdb_put(struct flexdb *db, const void *key, size_t klen, const void *val,
			   size_t vlen);

/* Removes key (deleting an absent key is not an error).  Returns as
 * flexdb_put. */
FLEX_EXPORT int flexdb_delete(struct flexdb *db, const void *key, size_t klen);

/* Removes every key k with start <= k < end, atomically and durably like
 * a one-op batch.  start may be empty (slen 0, start may be NULL): from
 * the first key; end is 1 .. FLEXDB_MAX_KEY bytes, ordered as keys are.
 * A range beyond the last key removes nothing and is not an error.  Keys
 * written after the call returns are not affected.  Until the committer
 * applies it, the range delete hides the older pairs it covers from gets
 * and iterators; it then removes them in one collapse of their bytes
 * (no tombstone stays behind), their space freed by the FlexSpace's next
 * garbage collection.  Range deletes waiting in the memtables are checked
 * one by one by every get and iterator chunk that meets a memtable holding
 * any: many thousands between two commits slow reads down until then.
 * Returns 0, -EINVAL (NULL with nonzero length, elen 0, start >= end:
 * nothing is changed), FLEX_ETOOBIG (a key over FLEXDB_MAX_KEY),
 * FLEX_EFAILED, -errno. */
FLEX_EXPORT int flexdb_delete_range(struct flexdb *db, const void *start, size_t slen,
				    const void *end, size_t elen);

/* Looks key up.  0 when found: copies min(cap, value length) bytes to buf
 * (buf may be NULL when cap is 0) and stores the full length in *vlen
 * (vlen may be NULL).  FLEXDB_NOTFOUND when absent.  Negative on error,
 * FLEX_ECORRUPT when the stored pair fails its checksum, FLEX_EFAILED when
 * the key is not in a memtable and a commit into the FlexSpace has failed
 * (docs/DURABILITY.md, "Errors"). */
FLEX_EXPORT int flexdb_get(struct flexdb *db, const void *key, size_t klen, void *buf,
			   size_t cap, size_t *vlen);

/* Durability barrier: when it returns 0, every put, delete and write that
 * returned before the call, on any thread, survives a crash or power
 * loss.  Returns 0, FLEX_EFAILED, -errno. */
FLEX_EXPORT int flexdb_sync(struct flexdb *db);

/* Atomic batches: puts, deletes and range deletes applied all together or
 * not at all, also across a crash, in their order in the batch: later
 * operations on the same key win, so a range delete removes the keys the
 * batch put before it and not those it puts after.  flexdb_batch_put,
 * _delete and _delete_range check their arguments as flexdb_put,
 * flexdb_delete and flexdb_delete_range do (-EINVAL also for a NULL
 * batch) and return 0, -ENOMEM, or FLEX_ETOOBIG when the batch would pass
 * 4 GiB. */
FLEX_EXPORT struct flexdb_batch *flexdb_batch_new(void);
FLEX_EXPORT int flexdb_batch_put(struct flexdb_batch *b, const void *key, size_t klen,
				 const void *val, size_t vlen);
FLEX_EXPORT int flexdb_batch_delete(struct flexdb_batch *b, const void *key, size_t klen);
FLEX_EXPORT int flexdb_batch_delete_range(struct flexdb_batch *b, const void *start,
					  size_t slen, const void *end, size_t elen);
/* Empties a batch for reuse. */
FLEX_EXPORT void flexdb_batch_clear(struct flexdb_batch *b);
FLEX_EXPORT void flexdb_batch_free(struct flexdb_batch *b);
/* Applies the batch.  Returns as flexdb_put; the batch is unchanged. */
FLEX_EXPORT int flexdb_write(struct flexdb *db, struct flexdb_batch *b);

/* Ordered iteration over the memtables and the FlexSpace merged, without
 * deleted keys.  An iterator reads ahead in chunks (up to 64 pairs from
 * each source) and holds no lock between calls, so it never blocks
 * writers, syncs or the committer, on this thread or others.  It is not a
 * point-in-time snapshot.  What it guarantees: keys come in strictly
 * increasing order (decreasing after prev / seek_for_prev), each at most
 * once per direction; every pair returned was the key's value at some
 * moment after the seek (at the latest when its chunk was read), and a
 * batch is seen entirely or not at all within a chunk; a key present and
 * unchanged from the seek to the end is always returned; keys added,
 * changed or deleted meanwhile may or may not be seen.  Pointers returned
 * by flexdb_iter_key/value stay valid until the iterator moves or is
 * closed. */
FLEX_EXPORT int flexdb_iter_open(struct flexdb *db, struct flexdb_iter **out);
/* Positions at the first key >= key (klen 0: the first key).  Returns 0
 * or a negative error. */
FLEX_EXPORT int flexdb_iter_seek(struct flexdb_iter *it, const void *key, size_t klen);
/* Positions at the last key <= key (klen 0: the last key). */
FLEX_EXPORT int flexdb_iter_seek_for_prev(struct flexdb_iter *it, const void *key, size_t klen);
FLEX_EXPORT int flexdb_iter_valid(const struct flexdb_iter *it);
/* Next / previous key; returns 0, or a negative error (then invalid). */
FLEX_EXPORT int flexdb_iter_next(struct flexdb_iter *it);
FLEX_EXPORT int flexdb_iter_prev(struct flexdb_iter *it);
FLEX_EXPORT const void *flexdb_iter_key(const struct flexdb_iter *it, size_t *klen);
FLEX_EXPORT const void *flexdb_iter_value(const struct flexdb_iter *it, size_t *vlen);
FLEX_EXPORT void flexdb_iter_close(struct flexdb_iter *it);

/* Deep check: the FlexSpace's check, every pair's checksum, keys strictly
 * increasing across intervals, the sparse index's offsets, sizes and
 * counts against the space, and the cache against the space.  0 when
 * sound, FLEX_ECORRUPT otherwise; FLEX_EFAILED after a failed commit into
 * the FlexSpace (the index no longer describes it).  O(store size). */
FLEX_EXPORT int flexdb_check(struct flexdb *db);

FLEX_EXPORT int flexdb_stats(struct flexdb *db, struct flexdb_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* FLEXDB_H */
