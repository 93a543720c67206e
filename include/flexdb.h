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
 * Statuses, argument order and integer types follow flex_common.h (keys
 * and values are memory the caller passes: size_t lengths);
 * FLEXDB_NOTFOUND is a positive status.
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
	 * no_create and read_only fields are ignored: see those below.
	 * defer_maintenance is always set: the committer runs the
	 * FlexSpace's tree commits and garbage collection between chunks,
	 * without the lock readers take.
	 * With max_data_size set, a change that needs room still syncs or
	 * collects while readers wait. */
	struct flexspace_options space;
	/* Bytes of cached store: the FlexSpace's tree leaves
	 * (space.tree_cache_size, a quarter of cache_size when 0; at most
	 * half of it) and the interval cache, which has the rest: intervals
	 * kept whole (their pairs, offsets and fingerprints) and, in at most
	 * three quarters of it, thin (fingerprints, record sizes and where
	 * the pairs lie in the data file, about 5 bytes per pair of 116 bytes:
	 * a lookup reads one pair).  0 means 64 MiB.  Range: 1 MiB .. 1 TiB.
	 * Besides it and the memtables, a store's memory is its sparse index
	 * (one entry per interval of up to 32 pairs, about 90 bytes each
	 * with a 16-byte key; intervals hold 22 pairs on average after a
	 * random load: about 4 bytes per pair of 116 bytes), the tree's
	 * internal nodes and leaf stubs (under a byte per extent), the
	 * FlexSpace's segment buffer (space.segment_size, 4 MiB) and log
	 * buffer (space.log_limit, 8 MiB, and the slack of its growth), a
	 * garbage collection's list of the pieces it moves (24 bytes each,
	 * for at most 16 segments of live bytes) and the buffer it reads
	 * them into (1 MiB, or one extent: up to a 32nd of a segment), and
	 * the committer's tidying buffer (about 1 MiB: flexdb_compact), plus
	 * iterators: an open one holds its chunk of pairs and keeps up to
	 * 512 KiB of buffers between chunks (a chunk of large pairs takes
	 * what they need), and up to four closed ones of about 75 KiB each
	 * wait for the next opens.  Memory the
	 * program's allocator keeps after the library freed it is not
	 * counted: a cache that turns over frees as much as it allocates.
	 * Nor are the pages of the data file that reads copied from its
	 * mapping (space.no_mmap): they are the kernel's page cache, shown
	 * in the process's RSS (RssFile) until the kernel reclaims them.
	 * With space.no_mmap set no page of the data file is mapped, so RSS
	 * holds only the above and what the allocator keeps; each read is
	 * then a system call. */
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
	/* Nonzero opens the store read-only, for backups, dumps, a second
	 * reading process or a user without write permission: every file is
	 * opened O_RDONLY and nothing is ever created, written, truncated,
	 * synced or removed, not even by open or close (no WAL file, no
	 * committer thread).  The lock is shared: any number of read-only
	 * handles may be open at once, in any processes, while a writable
	 * handle and a read-only one exclude each other (FLEX_EBUSY, at once).
	 * It implies no_create.  The WAL records a crash left are replayed
	 * into a memtable that stays in memory for the handle's life (the
	 * files stay for the next writable open), so the handle sees exactly
	 * what a writable open would recover.  Gets, iterators, check and
	 * stats work; flexdb_put, flexdb_delete, flexdb_write (an empty batch
	 * too) and flexdb_sync return FLEX_EREADONLY.  docs/DURABILITY.md,
	 * "Read-only handles". */
	int read_only;
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
	/* lookups through a thin entry (fingerprints and record places): one
	 * record read from the FlexSpace instead of the whole interval */
	uint64_t cache_thin_hits;
	/* of those, pairs read where the interval's bytes lay when it was
	 * read (no FlexTree lookup); the others found them moved since */
	uint64_t cache_thin_located;
	uint64_t memtable_bytes;   /* both memtables */
	uint64_t memtable_entries; /* both memtables (range deletes count) */
	uint64_t wal_bytes;	   /* WAL files on disk; 0 when read-only */
	uint64_t committer_runs;   /* memtables committed to the FlexSpace */
	uint64_t committed_pairs;  /* puts, deletes, range deletes committed */
	uint64_t writer_stalls;	   /* times a writer waited for the committer */
	uint64_t wal_syncs;	   /* WAL fdatasyncs (group commits) */
	uint64_t recovered_ops;	   /* WAL operations replayed at open */
	/* Bytes of intervals the committer rewrote whole so that each lies in
	 * one extent (flexdb_compact) since the open, and whether it has more
	 * to do. */
	uint64_t tidy_bytes;
	int tidy_due;
	/* Nonzero while the committer, after an open, is still reading the
	 * store into the interval cache (when it has nothing to commit or
	 * tidy, and fewer threads look pairs up than the process has CPUs):
	 * the intervals whose bytes the page cache holds, in key order, whole
	 * while the cache has room and thin after (whole entries are made
	 * thin to make room, as for a lookup), until every one is cached or
	 * the thin entries' share of the cache is full; it drops no entry. */
	int warming;
	struct flexspace_stats space;
	/* Nonzero when open took the sparse index, and the thin entries its
	 * cache had room for, from the file INDEX the last clean close wrote
	 * (docs/ARCHITECTURE.md, "Open"), instead of reading every
	 * interval's first pair. */
	int index_from_file;
	/* Reads of scans and iterators that took the intervals' bytes where
	 * their thin entries' maps say they lie, without a FlexTree lookup
	 * (the others read through the FlexTree); scan_stale: reads tried
	 * through maps and refused, the bytes having moved since; maps_renewed:
	 * thin entries given a fresh map (or none) in place of one found
	 * stale by a scan or a get. */
	uint64_t scan_located;
	uint64_t scan_stale;
	uint64_t maps_renewed;
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
 * process: any handle, for a writable open; a writable one, for a
 * read-only open), FLEX_EOPTION (before anything is touched;
 * flexdb_options_check names the field), FLEX_ECORRUPT (also a creation
 * cut short, opened with no_create or read-only), FLEX_EVERSION, -EACCES
 * (no permission to open a file as asked: read-only needs only read
 * permission), -errno.  On failure *out is NULL.  A store made before
 * identities gets its IDENTITY (and space/ its own) when opened without
 * no_create or read_only. */
FLEX_EXPORT int flexdb_open(const char *dir, const struct flexdb_options *opt,
			    struct flexdb **out);

/* The check flexdb_open makes of its options: 0 when every field is in its
 * documented range (opt NULL: the defaults, which are), else FLEX_EOPTION
 * with *field set to the first field out of range, by its name in struct
 * flexdb_options ("cache_size", "memtable_size", and for the FlexSpace's
 * "space.tree_cache_size" (over half of cache_size), "space.segment_size",
 * "space.log_limit", "space.gc_ratio", "space.max_data_size"; a static
 * string), and to NULL on success.  field may be NULL.  Touches no file. */
FLEX_EXPORT int flexdb_options_check(const struct flexdb_options *opt, const char **field);

/* Commits the memtables, syncs, commits the FlexSpace's tree, writes the
 * file INDEX (the sparse index and the cache's thin entries, which the
 * next open takes instead of reading every interval's first pair when
 * nothing changed the store in between; kept as it is when this session
 * opened from it and changed nothing) and frees the handle (even on
 * error, whose status it returns; a failure to write INDEX is not one).
 * A read-only handle writes nothing and returns 0.  Iterators must be
 * closed first.  NULL: no-op, 0. */
FLEX_EXPORT int flexdb_close(struct flexdb *db);

/* Sets key to val.  Returns 0, -EINVAL (NULL with nonzero length, klen 0),
 * FLEX_ETOOBIG (key or value over the limits), FLEX_EFAILED (an earlier
 * write or sync failed: the store refuses changes), FLEX_EREADONLY (a
 * read-only handle), -errno. */
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
 * FLEX_EFAILED, FLEX_EREADONLY (a read-only handle), -errno. */
FLEX_EXPORT int flexdb_delete_range(struct flexdb *db, const void *start, size_t slen,
				    const void *end, size_t elen);

/* Looks key up.  0 when found: copies min(cap, value length) bytes to buf
 * (buf may be NULL when cap is 0) and stores the full length in *vlen
 * (vlen may be NULL).  FLEXDB_NOTFOUND when absent.  Negative on error,
 * FLEX_ECORRUPT when the stored pair fails its checksum, FLEX_EFAILED when
 * the key is not in a memtable and a commit into the FlexSpace has failed
 * (docs/DURABILITY.md, "Errors"). */
FLEX_EXPORT int flexdb_get(const struct flexdb *db, const void *key, size_t klen, void *buf,
			   size_t cap, size_t *vlen);

/* Durability barrier: when it returns 0, every put, delete and write that
 * returned before the call, on any thread, survives a crash or power
 * loss.  Returns 0, FLEX_EFAILED, -errno, or FLEX_EREADONLY for a
 * read-only handle (which has nothing to make durable, and writes
 * nothing). */
FLEX_EXPORT int flexdb_sync(struct flexdb *db);

/* Commits the memtables to the store and waits until the committer has
 * tidied it: rewritten whole, in key order, the intervals whose pairs lie
 * in more than one extent of the data file, so that a lookup reads one
 * piece and a scan reads neighbours together.  Without full, it rewrites
 * at most as many bytes as commits wrote since tidying last finished (the
 * committer does this by itself whenever writes pause for 100 ms:
 * tidy_due in flexdb_stats says whether it has more to do; close does not
 * wait for it, and what is left is not carried to the next open); with
 * full, every such interval (one that straddles the end of a segment of
 * the data file stays in two; writes during the pass may scatter others).
 * A pass compact starts ends by collecting the data file's segments it
 * left at most half live (flexspace_collect), so that the file comes
 * back near the live bytes instead of waiting for space.gc_ratio; without
 * full and with nothing left to tidy no pass starts, and nothing is
 * collected.  Memtable commits wait for that collection (writes only if
 * both memtables fill meanwhile).
 * A store with space.max_data_size is not tidied.  It makes nothing durable (flexdb_sync does), and
 * readers and writers go on meanwhile.  Returns 0, FLEX_EFAILED, -errno,
 * FLEX_EREADONLY for a read-only handle. */
FLEX_EXPORT int flexdb_compact(struct flexdb *db, int full);

/* Online backup: writes into directory dest_dir a copy of the store that
 * opens (flexdb_open) holding exactly the writes of a prefix of the
 * sequence (batches whole): every put, delete and write that returned
 * before the call, on any thread, and possibly some that ran while it
 * did.  Writers, readers and the committer go on while it runs: it
 * syncs the FlexSpace and copies its metadata while holding off the
 * space's syncs (the committer waits if it reaches one), then copies the
 * space's data and the WAL records up to that moment with no lock held.
 * The copy is written durably (it survives a power loss once the call
 * returns 0), whether or not the writes it holds were synced in the
 * source.  A WAL record is never made durable in the source by it.
 *
 * dest_dir must be missing (it is created; its parent must exist) or an
 * empty directory, and neither the store's directory nor inside it.  The
 * copy is crash-safe: IDENTITY is written last, after every other file
 * and directory is durable, and a checkpoint cut short by a crash leaves
 * a directory that open refuses with FLEX_ENOTSTORE, or once the copy
 * is whole, one that opens as it (docs/DURABILITY.md, "Checkpoints").
 * On an error the files it made (and dest_dir, if it made it) are
 * removed.  Returns 0, or:
 *   -EINVAL        NULL db or dest_dir, an empty dest_dir, or dest_dir
 *                  equal to or inside the store's directory
 *   -EEXIST        dest_dir is a directory with entries in it
 *   -ENOTDIR       dest_dir (or a component of its path) is not a
 *                  directory
 *   -ENOENT        the parent of dest_dir is missing
 *   FLEX_EFAILED   the store failed earlier (nothing is copied)
 *   FLEX_EREADONLY the handle is read-only (nothing is copied: a
 *                  checkpoint syncs; with no writer open the store's
 *                  files can be copied as they are)
 *   FLEX_ECORRUPT  a file of the store ended before its recorded size
 *   -errno         from the FlexSpace's sync (which then fails the
 *                  store) or from writing the copy (the store stays
 *                  usable) */
FLEX_EXPORT int flexdb_checkpoint(struct flexdb *db, const char *dest_dir);

/* Atomic batches: puts, deletes and range deletes applied all together or
 * not at all, also across a crash, in their order in the batch: later
 * operations on the same key win, so a range delete removes the keys the
 * batch put before it and not those it puts after.  flexdb_batch_put,
 * _delete and _delete_range check their arguments as flexdb_put,
 * flexdb_delete and flexdb_delete_range do (-EINVAL also for a NULL
 * batch) and return 0, -ENOMEM, or FLEX_ETOOBIG when the batch would pass
 * 4 GiB.  flexdb_batch_new returns an empty batch, or NULL when out of
 * memory. */
FLEX_EXPORT struct flexdb_batch *flexdb_batch_new(void);
FLEX_EXPORT int flexdb_batch_put(struct flexdb_batch *b, const void *key, size_t klen,
				 const void *val, size_t vlen);
FLEX_EXPORT int flexdb_batch_delete(struct flexdb_batch *b, const void *key, size_t klen);
FLEX_EXPORT int flexdb_batch_delete_range(struct flexdb_batch *b, const void *start,
					  size_t slen, const void *end, size_t elen);
/* Empties a batch for reuse. */
FLEX_EXPORT void flexdb_batch_clear(struct flexdb_batch *b);
FLEX_EXPORT void flexdb_batch_free(struct flexdb_batch *b);
/* Applies the batch.  Returns as flexdb_put (FLEX_EREADONLY also for an
 * empty batch); the batch is unchanged. */
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

/* Limits the iterator to the keys in [lower, upper): lower inclusive,
 * upper exclusive, either side unbounded when its length is 0 (its
 * pointer may then be NULL); both NULL/0 removes the bounds.  The library
 * copies the keys.  Every positioning call and step honours them: an
 * iterator whose next key lies outside is simply not valid, seek before
 * lower starts at the first key >= lower, seek_for_prev at or past upper
 * (or with klen 0) at the last key < upper.  No read goes past the far
 * bound by more than the interval of the store holding it, so a short
 * bounded scan stays short in a large store.  Bounds and prefix
 * (flexdb_iter_set_prefix) apply together: keys must satisfy both.
 * Leaves the iterator unpositioned (not valid): seek again.  Returns 0,
 * -EINVAL (it NULL, a NULL key with a nonzero length, or lower >= upper
 * when both are set: an inverted or empty range), FLEX_ETOOBIG (a bound
 * over FLEXDB_MAX_KEY), -ENOMEM.  On error nothing changes. */
FLEX_EXPORT int flexdb_iter_set_bounds(struct flexdb_iter *it, const void *lower, size_t llen,
				       const void *upper, size_t ulen);
/* Prefix mode: only keys starting with the plen bytes at prefix are seen
 * (plen 0 turns it off).  The same as bounds of [prefix, the first key
 * above every key with the prefix), the upper one open when the prefix is
 * all 0xff bytes; the library copies it.  Leaves the iterator unpositioned.
 * Returns 0, -EINVAL (it NULL, or prefix NULL with a nonzero plen),
 * FLEX_ETOOBIG (plen over FLEXDB_MAX_KEY), -ENOMEM; on error nothing
 * changes. */
FLEX_EXPORT int flexdb_iter_set_prefix(struct flexdb_iter *it, const void *prefix, size_t plen);

/* Positions at the first key >= key (klen 0: the first key), within the
 * bounds.  Returns 0 or a negative error: -EINVAL (it NULL, key NULL with
 * a nonzero klen), FLEX_ETOOBIG, FLEX_ECORRUPT, FLEX_EFAILED, -errno.
 * Every pair an iterator is positioned at has passed its checksum: a seek
 * or step that comes to a damaged pair returns FLEX_ECORRUPT (and leaves
 * the iterator not valid). */
FLEX_EXPORT int flexdb_iter_seek(struct flexdb_iter *it, const void *key, size_t klen);
/* Positions at the last key <= key (klen 0: the last key), within the
 * bounds.  Returns as flexdb_iter_seek. */
FLEX_EXPORT int flexdb_iter_seek_for_prev(struct flexdb_iter *it, const void *key, size_t klen);
FLEX_EXPORT int flexdb_iter_valid(const struct flexdb_iter *it);
/* Next / previous key within the bounds; returns 0 (then invalid past the
 * last key or a bound), -EINVAL when not valid, or another negative error
 * (then invalid). */
FLEX_EXPORT int flexdb_iter_next(struct flexdb_iter *it);
FLEX_EXPORT int flexdb_iter_prev(struct flexdb_iter *it);
FLEX_EXPORT const void *flexdb_iter_key(const struct flexdb_iter *it, size_t *klen);
FLEX_EXPORT const void *flexdb_iter_value(const struct flexdb_iter *it, size_t *vlen);
/* Frees the iterator, which the handle may keep for a later
 * flexdb_iter_open: close every iterator before its handle.  NULL: no-op. */
FLEX_EXPORT void flexdb_iter_close(struct flexdb_iter *it);

/* Deep check: the FlexSpace's check, every pair's checksum, keys strictly
 * increasing across intervals, the sparse index's offsets, sizes and
 * counts against the space, and the cache against the space.  0 when
 * sound, FLEX_ECORRUPT otherwise; FLEX_EFAILED after a failed commit into
 * the FlexSpace (the index no longer describes it).  O(store size). */
FLEX_EXPORT int flexdb_check(const struct flexdb *db);

/* Fills *st.  Returns 0 or -EINVAL (NULL db or st). */
FLEX_EXPORT int flexdb_stats(const struct flexdb *db, struct flexdb_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* FLEXDB_H */
