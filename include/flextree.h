/*
 * flextree.h - FlexTree, an extent index whose child pointers carry shift
 * values (paper section 3).
 *
 * A FlexTree maps a logical byte address space [0, size) to physical
 * addresses, one extent (loff, len, poff) at a time.  Extents are contiguous
 * in logical space: an unmapped range is an explicit hole extent whose
 * physical address is FLEXTREE_HOLE.  Inserting or removing a range in the
 * middle shifts everything after it, and costs O(log N) node updates
 * because the shift is recorded once per subtree on the search path instead
 * of once per extent.
 *
 * A tree is volatile (path == NULL) or persistent: a copy-on-write tree
 * file whose header is switched atomically by flextree_commit().  Changes
 * after the last commit live in memory only; a process that dies reopens
 * the file at the last committed version.  The format is in docs/FORMAT.md.
 *
 * A persistent tree keeps its internal nodes in memory (one per about 128
 * leaves) but its leaves only within a byte budget (cache_size): a leaf
 * whose committed image is current may be evicted and is read back, and
 * its checksum verified, when next needed.  A leaf changed since the last
 * commit stays in memory until a commit; flextree_pressure() says when
 * such leaves exceed the budget.  A volatile tree is all in memory.
 *
 * Thread-safety: a tree is not locked against changes.  Any number of
 * threads may call the const functions (lookup, query, scan, tag_get,
 * size, check, stats, pressure) concurrently; the leaf cache they share is
 * locked internally.  A call that modifies the tree, and commit, need
 * exclusive access.  Statuses, argument order and integer types follow
 * flex_common.h; positions are loff (logical) and poff (physical), and an
 * extent's length is uint32_t (at most UINT32_MAX bytes), the width a
 * leaf stores.
 */
#ifndef FLEXTREE_H
#define FLEXTREE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "flex_common.h"
#include "flex_io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Physical address reported for (and used to insert) an unmapped range.
 * Valid physical addresses are below it: extents live in a 48-bit space. */
#define FLEXTREE_HOLE ((uint64_t)0xFFFFFFFFFFFFULL)
/* The leaf cache of a persistent tree when flextree_options.cache_size is
 * 0: 16 MiB, about 4,200 leaves, which hold every leaf of a tree of about
 * 600,000 extents (leaves are about 70 % full after random inserts) and
 * keep a larger tree's leaves to a fraction of FlexDB's default memory.
 * Not stored on disk. */
#define FLEXTREE_DEFAULT_CACHE ((uint64_t)16 << 20)
/* Largest logical size a tree may reach (2^60 bytes). */
#define FLEXTREE_MAX_SIZE ((uint64_t)1 << 60)

struct flextree;

struct flextree_options {
	/* File operations; NULL means flex_io_posix().  Not owned.  A table
	 * with an operation unset is refused (FLEX_EOPTION, flex_io_check). */
	const struct flex_io *io;
	/* Longest extent, in bytes, that flextree_insert produces by merging
	 * a new extent into a physically contiguous neighbour.  0 means
	 * UINT32_MAX.  FlexSpace passes its maximum extent size here so that
	 * garbage collection can always make progress. Range: 0 .. UINT32_MAX. */
	uint32_t max_extent;
	/* Nonzero: extents are never merged across a multiple of this many
	 * physical bytes (FlexSpace passes its segment size: an extent must
	 * stay within one segment).  0: no such limit. */
	uint64_t merge_boundary;
	/* Persistent trees: nonzero opens read-only (no commit, no writes; no
	 * exclusive lock).  Ignored for volatile trees. */
	int read_only;
	/* Persistent trees: bytes of leaves kept in memory once they are
	 * clean (flextree_stats' leaf_bytes each: 6,720 bytes for a leaf of
	 * up to 336 extents).  0 means FLEXTREE_DEFAULT_CACHE; any smaller
	 * value keeps at least one leaf.  Internal nodes (about 3 KiB per 128
	 * leaves) and a 48-byte stub per leaf are not counted; nor are dirty
	 * leaves and the leaves a reader is using at the moment, which stay
	 * until released or committed.  Ignored for volatile trees. */
	uint64_t cache_size;
	/* Persistent trees: zero (default) verifies the whole tree at open,
	 * reading every leaf once (through the cache: memory stays within
	 * cache_size); nonzero reads only the header and the internal nodes,
	 * and each leaf is verified when it is first read.  Damage in a leaf
	 * is then reported by the call that reads it (or flextree_check). */
	int lazy_open;
	/* Persistent trees opened read_only: nonzero lets the tree be changed
	 * in memory all the same (insert, collapse, remap, tag_set), without
	 * a byte written: the file keeps its committed version,
	 * flextree_commit still returns FLEX_EREADONLY and close drops the
	 * changes.  Changed leaves stay in memory (flextree_pressure is 0).
	 * FlexSpace replays its log this way when opened read-only. */
	int volatile_changes;
};

/* One piece of a logical range, as returned by flextree_query. */
struct flextree_mapping {
	uint64_t poff; /* physical address, or FLEXTREE_HOLE */
	uint64_t len;  /* bytes */
	uint64_t loff; /* logical offset of this piece */
};

/* A whole extent, as passed to a flextree_scan callback. */
struct flextree_extent {
	uint64_t loff; /* logical start of the extent */
	uint64_t poff; /* physical start, or FLEXTREE_HOLE */
	uint32_t len;
	uint16_t tag; /* 0 when untagged */
};

struct flextree_stats {
	uint64_t size;		/* logical size in bytes */
	uint64_t extents;	/* extents, holes included */
	uint64_t leaves;	/* leaf nodes */
	uint64_t internals;	/* internal nodes */
	uint32_t height;	/* 1 for a tree that is a single leaf */
	uint64_t version;	/* last committed version (0: never committed) */
	uint64_t file_bytes;	/* tree file size (0 for volatile trees) */
	uint64_t dirty_nodes;	/* nodes changed since the last commit */
	uint64_t commits;	/* commits that wrote something, this handle */
	uint64_t bytes_written; /* bytes written to the tree file, this handle */
	uint64_t cached_leaves; /* leaves in memory now (all of a volatile tree) */
	uint64_t cache_leaves;	/* persistent: clean leaves the cache keeps */
	uint64_t leaf_bytes;	/* memory one leaf's entries take */
	uint64_t leaf_reads;	/* persistent: leaves read back after open */
	uint64_t leaf_evictions;
};

/* Opens a tree.  path == NULL: a new empty volatile tree.  Otherwise the
 * persistent tree in file `path`, created (empty, committed as version 1)
 * when absent or empty; its internal nodes are read into memory and their
 * checksums verified, and unless opt->lazy_open, every leaf is read
 * through the leaf cache and verified and the whole tree checked.  A
 * non-empty file that is not a tree is refused (FLEX_ECORRUPT /
 * FLEX_EVERSION) without a byte written.  The file is locked exclusively (flock) unless
 * read-only: a second opener gets FLEX_EBUSY.
 * Returns 0 and sets *out, or: -EINVAL (out NULL), FLEX_EOPTION,
 * FLEX_ECORRUPT / FLEX_EVERSION (damaged or foreign file), FLEX_EBUSY,
 * -errno.  On failure *out is NULL and nothing needs freeing. */
FLEX_EXPORT int flextree_open(const char *path, const struct flextree_options *opt,
			      struct flextree **out);

/* Commits a writable persistent tree (see flextree_commit), then frees
 * everything.  Returns the commit's status; the handle is freed even when
 * the commit failed.  NULL is a no-op returning 0. */
FLEX_EXPORT int flextree_close(struct flextree *t);

/* Frees the handle without committing: a persistent tree's file keeps its
 * last committed version, as after a crash.  For callers whose own
 * metadata says the uncommitted changes must not become durable (FlexSpace
 * after a failed write).  NULL is a no-op. */
FLEX_EXPORT void flextree_discard(struct flextree *t);

/* Insert-range: maps [loff, loff+len) to [poff, poff+len) and shifts every
 * byte at or after loff up by len; an extent containing loff is split.  If
 * loff > size, [size, loff) first becomes a hole.  poff == FLEXTREE_HOLE
 * inserts a hole.  The new extent is merged into the extent ending at loff
 * when it continues it physically (and the result stays within
 * max_extent).  len == 0 is a no-op.
 * Returns 0, or -EINVAL (poff+len beyond 2^48-1 for a mapped range),
 * FLEX_ETOOBIG (size would exceed FLEXTREE_MAX_SIZE), FLEX_EREADONLY,
 * FLEX_EFAILED, -ENOMEM.  On -ENOMEM the tree is sound but a hole
 * filling [size, loff) may already have been added; on any other error it
 * is unchanged.  O(log N). */
FLEX_EXPORT int flextree_insert(struct flextree *t, uint64_t loff, uint64_t poff,
				uint32_t len);

/* Collapse-range: removes [loff, loff+len) and shifts the rest down;
 * extents straddling either end are split.  len == 0 is a no-op.
 * Returns 0, or -ERANGE (loff+len > size or overflows), FLEX_EREADONLY,
 * FLEX_EFAILED, -ENOMEM (the tree is sound, the range possibly partly
 * removed; a persistent tree's committed version is untouched).
 * O(k log N) for k extents removed. */
FLEX_EXPORT int flextree_collapse(struct flextree *t, uint64_t loff, uint64_t len);

/* Re-points [loff, loff+len) to [poff, poff+len) without changing any
 * logical offset (garbage collection moves data with it): the arguments
 * of flextree_insert, the range one extent.  The range is split out of
 * its extents; the re-pointed extent keeps the tag of the extent that
 * started at loff, if one did.  Returns as flextree_collapse, and -EINVAL
 * for a bad poff; on -ENOMEM the range may be left removed (treat it as
 * fatal for the handle). */
FLEX_EXPORT int flextree_repoint(struct flextree *t, uint64_t loff, uint64_t poff,
				 uint32_t len);

/* Physical address of byte loff and the number of bytes contiguous from it
 * in its extent.  A hole gives *poff = FLEXTREE_HOLE.  Either pointer may
 * be NULL.  Returns 0, or -ERANGE when loff >= size; for a persistent tree
 * whose leaf must be read back also FLEX_ECORRUPT, -ENOMEM or -errno.
 * O(log N), plus one 4 KiB read on a leaf cache miss.
 *
 * Every function that reads or changes leaves of a persistent tree may
 * fail like this when a leaf it needs is not in memory; a change that
 * fails so leaves the tree sound, as after -ENOMEM. */
FLEX_EXPORT int flextree_lookup(const struct flextree *t, uint64_t loff, uint64_t *poff,
				uint64_t *run);

/* The mappings covering [loff, loff+len) clipped to it (and to size), in
 * logical order.  Writes at most cap of them to out (out may be NULL when
 * cap is 0) and returns how many there are in all, which may exceed cap.
 * Returns -ERANGE when loff > size or loff+len overflows.
 * O(log N + mappings). */
FLEX_EXPORT ssize_t flextree_query(const struct flextree *t, uint64_t loff, uint64_t len,
				   struct flextree_mapping *out, size_t cap);

/* What flextree_scan and flexspace_scan call for each extent, with the
 * arg they were given; a nonzero return stops the scan. */
typedef int flextree_scan_fn(void *arg, const struct flextree_extent *e);

/* Calls fn for every whole extent that intersects [loff, loff+len), in
 * logical order, until fn returns nonzero.  Returns 0, fn's nonzero value,
 * or -ERANGE.  fn must not modify the tree. */
FLEX_EXPORT int flextree_scan(const struct flextree *t, uint64_t loff, uint64_t len,
			      flextree_scan_fn *fn, void *arg);

/* Tags mark extents for the layers above (FlexDB tags the extent that
 * starts each interval).  flextree_tag_set splits the extent containing
 * loff so that one starts exactly at loff and gives it `tag` (0 clears).
 * When an extent is split, its tag stays with the piece that keeps its
 * start; pieces cut off the end are untagged; an extent whose start is
 * collapsed away loses its tag.  Returns as flextree_collapse. */
FLEX_EXPORT int flextree_tag_set(struct flextree *t, uint64_t loff, uint16_t tag);

/* The tag of the extent containing loff and that extent's logical start.
 * Returns 0 or -ERANGE. */
FLEX_EXPORT int flextree_tag_get(const struct flextree *t, uint64_t loff, uint16_t *tag,
				 uint64_t *extent_loff);

/* Logical size in bytes.  0 for NULL. */
FLEX_EXPORT uint64_t flextree_size(const struct flextree *t);

/* Makes the current state the durable version of a persistent tree: writes
 * every node changed since the last commit to slots the committed version
 * does not use, syncs, then writes the other of the two header copies with
 * version+1 and syncs again.  A crash at any point leaves the previous or
 * the new version.  Nothing to do for a volatile or unchanged tree.
 * Returns 0, or FLEX_EREADONLY, -errno; after a failed write or sync the
 * tree refuses further changes (FLEX_EFAILED) and must be closed. */
FLEX_EXPORT int flextree_commit(struct flextree *t);

/* A value that names a persistent tree's contents while it holds no
 * change since its last commit: the committed version and the root's
 * checksum, which covers every node through the checksums its pointers
 * carry.  Two opens of a file that give the same stamp have the same
 * extents and tags.  Returns 0 and *out; -EAGAIN while the tree has
 * uncommitted changes (a read-only tree with volatile changes too);
 * -EINVAL for a volatile tree or a NULL argument; FLEX_EFAILED after a
 * failed commit.  O(1); call it where no change runs. */
FLEX_EXPORT int flextree_stamp(const struct flextree *t, uint64_t *out);

/* Whether a persistent tree's dirty nodes exceed its leaf cache: they can
 * leave memory only through a commit, so a caller that keeps changing the
 * tree should commit when this returns 1.  0 otherwise, always for a
 * volatile or read-only tree.  O(1). */
FLEX_EXPORT int flextree_pressure(const struct flextree *t);

/* Deep check: node fill bounds, partial offsets within the 48-bit range,
 * extents non-empty and contiguous, holes only with FLEXTREE_HOLE, pivots
 * equal to their children's effective starts, counts and size consistent,
 * and for a persistent tree the slot accounting, every leaf read back
 * through the cache.  Returns 0 when sound, FLEX_ECORRUPT otherwise, or
 * -ENOMEM / -errno when a leaf could not be read.  O(N). */
FLEX_EXPORT int flextree_check(const struct flextree *t);

/* Fills *st.  Returns 0 or -EINVAL. */
FLEX_EXPORT int flextree_stats(const struct flextree *t, struct flextree_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* FLEXTREE_H */
