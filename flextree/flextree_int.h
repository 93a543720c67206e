/*
 * flextree_int.h - FlexTree's private structures and functions, shared by
 * the public API (flextree.c), the nodes and structural changes
 * (ft_node.c), the leaf cache (ft_cache.c), the deep check (ft_check.c)
 * and the persistent file code (flextree_file.c).
 *
 * Invariants (checked by flextree_check):
 *  - Every node has a base: the sum of the shifts on the pointers from the
 *    root down to it (the root's base is 0).  The effective offset of a leaf
 *    entry is base + loff[j]; of an internal pivot, base + pivot[j].
 *  - Extents are contiguous in logical space: within a leaf
 *    loff[j+1] == loff[j] + len[j], and the first extent of child i+1
 *    starts exactly at its parent's pivot i.  Unmapped ranges are explicit
 *    hole extents (poff FLEXTREE_HOLE).  len[j] > 0.
 *  - Leaf partial offsets lie in [0, FT_PARTIAL_MAX] (they are 48-bit on
 *    disk); a leaf that would exceed it is rebased: its smallest partial
 *    offset is moved into the parent's shift for it.
 *  - All leaves are at the same depth.  Only the root may be an empty leaf;
 *    an internal node has count pivots and count + 1 children.
 *  - Leaves hold at most FT_LEAF_CAP entries.  Once one holds
 *    FT_LEAF_CAP - 1 (an insert can add two entries: the tail of a split
 *    extent and the new one), the descent gives half the difference to a
 *    sibling with room or else splits it (ft_node.c); internal nodes are
 *    split when full, so a split below always finds room in its parent.
 *  - Persistent trees page their leaves: every leaf has a permanent stub
 *    (struct ft_leaf: header, slot and checksum) that its parent points
 *    to, and a body (the entries) that is resident or not.  A dirty leaf
 *    is always resident; a clean leaf's body may be dropped at any time
 *    nothing uses it, because its committed image in its slot is current.
 *    Internal nodes are always resident.
 *
 * Locking of the leaf cache (persistent trees): readers may run
 * concurrently (the const functions), so the CLOCK ring, loads and
 * evictions of bodies and the cache counters are changed only under
 * cache_lock.  A reader pins the leaf it works on, and a resident leaf is
 * pinned and unpinned without the lock: pins and the reference bit are
 * atomic, and eviction claims an unpinned leaf by setting FT_PIN_EVICT in
 * its pin count, so that a reader who pins it meanwhile sees the bit,
 * lets go and takes the locked path (ft_cache.c).  Eviction skips pinned
 * and dirty leaves.  Leaf I/O runs outside the lock: two readers that
 * miss on one leaf both read it and the second copy is dropped.
 * Writers have exclusive access to the tree and read bodies without the
 * lock; they evict only between operations, never while they hold a path.
 */
#ifndef FLEXTREE_INT_H
#define FLEXTREE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "flextree.h"

/* Node capacities: each node fits one 4 KiB file slot (checked by static
 * asserts in flextree_file.c).  A leaf of 336 entries of 12 bytes (the
 * partial offsets but the first are left out) fills its slot: every tree
 * commit writes whole slots, and a random load dirties nearly every leaf
 * between two commits, so fuller leaves mean fewer bytes per commit.  Internal
 * nodes keep 128 pivots, which make the O(fanout) shift updates on the
 * path cheaper than the cache misses of a taller tree.  The test suite
 * also builds the tree with tiny capacities so that every split/merge
 * path runs on a few hundred extents.  The on-disk format stores counts:
 * a build reads the nodes of any build with capacities no larger than
 * its own (flextree_file.c: formats 1 and 2 held leaves of at most 128
 * and 200 entries). */
#ifndef FT_LEAF_CAP
#define FT_LEAF_CAP 336
#endif
#ifndef FT_INTERNAL_CAP
#define FT_INTERNAL_CAP 128 /* pivots; children = pivots + 1 */
#endif
#if FT_LEAF_CAP < 4 || FT_INTERNAL_CAP < 3
#error "FlexTree node capacities too small"
#endif

/* The default leaf cache.  `make test-tinycache` builds everything with
 * -DFT_DEFAULT_CACHE=1 (a one-leaf cache) so that every suite of every
 * layer runs with its tree's leaves read back from the file. */
#ifndef FT_DEFAULT_CACHE
#define FT_DEFAULT_CACHE FLEXTREE_DEFAULT_CACHE
#endif

/* A leaf is underfull at a third of its capacity; it is merged with a
 * sibling when both fit in one node with two entries to spare (so the
 * merged node is not split again by the next insert). */
#define FT_LEAF_LOW (FT_LEAF_CAP / 3)
/* Bodies of evicted leaves kept for reuse (struct flextree, body_pool). */
#define FT_BODY_POOL 64
#define FT_LEAF_MERGE_MAX (FT_LEAF_CAP - 2)
#define FT_INTERNAL_LOW (FT_INTERNAL_CAP / 3)
#define FT_INTERNAL_MERGE_MAX (FT_INTERNAL_CAP - 1)

#define FT_PARTIAL_MAX (((uint64_t)1 << 48) - 1)
#define FT_POFF_MASK (((uint64_t)1 << 48) - 1)
#define FT_MAX_HEIGHT 40
#define FT_NOSLOT UINT32_MAX

struct ft_node {
	uint8_t leaf;
	uint8_t dirty;	/* changed since the last commit */
	uint16_t count; /* leaf: extents; internal: pivots */
	uint32_t slot;	/* file slot of the committed image, or FT_NOSLOT */
	uint64_t csum;	/* checksum of that image (valid when slot is set) */
};

/* Entries are kept as parallel arrays so that the binary search touches only
 * the partial offsets.  pt[j] packs the 48-bit physical address with the
 * extent's 16-bit tag in the top bits. */
struct ft_leaf_body {
	uint64_t loff[FT_LEAF_CAP];
	uint64_t pt[FT_LEAF_CAP];
	uint32_t len[FT_LEAF_CAP];
};

/* A leaf's stub.  In a volatile tree the body follows the stub in the same
 * allocation; in a persistent tree it is allocated apart so that it can be
 * evicted (b == NULL).  h.count is valid while the body is resident and
 * keeps its value after an eviction. */
struct ft_leaf {
	struct ft_node h;
	struct ft_leaf_body *b;
	struct ft_leaf *prev, *next; /* CLOCK ring of clean resident leaves */
	uint32_t pins;		     /* readers using the body (atomic) */
	uint8_t ref;		     /* CLOCK reference bit (atomic) */
	uint8_t inline_body;	     /* b points just past the stub */
};

/* Set in a leaf's pin count while eviction takes its body. */
#define FT_PIN_EVICT (1u << 31)

struct ft_internal {
	struct ft_node h;
	int64_t pivot[FT_INTERNAL_CAP];
	int64_t shift[FT_INTERNAL_CAP + 1];
	struct ft_node *child[FT_INTERNAL_CAP + 1];
};

struct flextree {
	struct ft_node *root;
	uint32_t height;
	uint64_t size;
	uint64_t nextents;
	uint64_t nleaves;
	uint64_t ninternals;
	uint32_t max_extent;
	uint64_t merge_boundary;

	/* Nodes allocated before an operation starts, so that a split on the
	 * way down never fails half-way through. */
	struct ft_node *spare_leaf[2];
	struct ft_node *spare_internal[FT_MAX_HEIGHT + 2];
	int nspare_leaf;
	int nspare_internal;

	/* Persistent trees only (fd < 0 for a volatile tree). */
	const struct flex_io *io;
	int fd;
	int lock_fd;		/* separate descriptor holding the flock */
	int read_only;
	int volatile_changes;	/* read_only, but changeable in memory */
	int failed;		/* status of the write or sync that failed */
	uint64_t version;	/* last committed version */
	int old_header;		/* a header slot holds an older format */
	uint32_t nslots;	/* slots in the file, headers included */
	uint32_t *free_slots;	/* reusable now */
	uint32_t nfree;
	size_t free_cap;
	uint32_t *pending;	/* released since the last commit: reusable after
				 * the next commit is durable */
	uint32_t npending;
	size_t pending_cap;
	uint64_t dirty_nodes;
	uint64_t commits;
	uint64_t bytes_written;

	/* Leaf cache (persistent trees; see the locking rules above). */
	int paged;
	uint64_t cache_leaves;	/* budget: resident leaves kept */
	pthread_mutex_t cache_lock;
	/* The CLOCK ring holds the clean resident leaves only, the ones
	 * eviction may take: a dirty leaf leaves it when it is first changed
	 * and comes back when a commit writes it, so that a cache holding
	 * many dirty leaves does not make every trim walk past them. */
	struct ft_leaf *hand;	/* CLOCK hand; NULL when the ring is empty */
	uint64_t nring;		/* leaves in the ring */
	uint64_t resident;	/* leaves with a body, dirty ones included */
	/* Bodies of evicted leaves kept for the next loads (linked through
	 * their first bytes, at most FT_BODY_POOL): a leaf cache that turns
	 * over takes no memory from the allocator after it filled. */
	struct ft_leaf_body *body_pool;
	uint32_t npool;
	uint64_t leaf_reads;	/* leaves read from the file on demand */
	uint64_t evictions;
};

/* Where a leaf must lie, from its parent: its base (the sum of shifts on
 * its path) and the effective range [lo, hi) its extents must cover
 * exactly.  A leaf read from the file is checked against it. */
struct ft_span {
	int64_t base;
	uint64_t lo, hi;
};

static inline uint64_t ft_pt_poff(uint64_t pt) { return pt & FT_POFF_MASK; }
static inline uint16_t ft_pt_tag(uint64_t pt) { return (uint16_t)(pt >> 48); }
static inline uint64_t ft_pt_make(uint64_t poff, uint16_t tag)
{
	return (poff & FT_POFF_MASK) | ((uint64_t)tag << 48);
}

/* The path of a descent: node[d] is the internal node at depth d, idx[d]
 * the child taken and base[d] the node's own base offset (the leaf cache
 * derives a leaf's expected span from them, and cursors move with them). */
struct ft_path {
	int depth;
	struct ft_internal *node[FT_MAX_HEIGHT];
	int idx[FT_MAX_HEIGHT];
	int64_t base[FT_MAX_HEIGHT];
	struct ft_leaf *leaf;
	int64_t leaf_base;
};

/* The searches are branch-free binary searches: random offsets make every
 * step of a branching search a coin toss for the predictor, and the
 * mispredictions cost more than the comparisons.  They first test the last
 * key, so that an append (always past the last key) takes one comparison.
 *
 * Number of leaf entries whose partial offset is <= y. */
static inline int ft_leaf_upper(const struct ft_leaf *l, uint64_t y)
{
	int n = l->h.count;
	if (n == 0 || l->b->loff[n - 1] <= y)
		return n;
	const uint64_t *b = l->b->loff;
	while (n > 1) {
		int half = n >> 1;
		b = b[half] <= y ? b + half : b;
		n -= half;
	}
	return (int)(b - l->b->loff) + (*b <= y);
}

/* ft_node.c */
struct ft_node *ft_node_new(const struct flextree *t, int leaf);
struct ft_leaf *ft_leaf_stub_new(void);
void ft_leaf_free(struct ft_leaf *l);
void ft_node_free_tree(struct ft_node *n);
void ft_release_slot(struct flextree *t, struct ft_node *n);
int ft_reserve_slow(struct flextree *t);
int ft_find(const struct flextree *t, uint64_t x, struct ft_path *p);
int ft_find_mut(struct flextree *t, uint64_t x, struct ft_path *p);
void ft_leaf_split_extent(struct ft_leaf *l, int k, uint64_t y);
int ft_insert_one(struct flextree *t, uint64_t x, uint64_t pt, uint32_t len);
int ft_collapse_leaf(struct flextree *t, uint64_t x, uint64_t d, uint64_t *removed);

/* Makes sure the spare pools can cover one descent: a new root and a split
 * on every level.  The pools are almost always full already (only a split
 * takes from them), so the check is inline and the refill is not. */
static inline int ft_reserve(struct flextree *t)
{
	int want = (int)t->height + 2;
	if (__builtin_expect(t->nspare_leaf >= 2 && t->nspare_internal >= want, 1))
		return 0;
	return ft_reserve_slow(t);
}

/* ft_cache.c */
struct ft_leaf_body *ft_body_take_locked(struct flextree *t);
void ft_cache_trim(struct flextree *t);
void ft_cache_add(struct flextree *t, struct ft_leaf *l);
void ft_cache_del(struct flextree *t, struct ft_leaf *l);
void ft_cache_dirty(struct flextree *t, struct ft_leaf *l);
void ft_cache_clean_locked(struct flextree *t, struct ft_leaf *l);
int ft_leaf_get(const struct flextree *ct, struct ft_leaf *l, const struct ft_span *sp,
		const struct ft_path *p, int lv, int i, int pin);
void ft_leaf_unpin(const struct flextree *ct, struct ft_leaf *l);

/* Ends a reader's use of a leaf pinned by ft_leaf_get.  Every lookup ends
 * here, and a volatile tree pins nothing: the test stays inline. */
static inline void ft_leaf_put(const struct flextree *t, struct ft_leaf *l)
{
	if (t->paged)
		ft_leaf_unpin(t, l);
}

/* flextree_file.c */
int ft_file_open(struct flextree *t, const char *path, const struct flextree_options *opt);
int ft_file_commit(struct flextree *t);
void ft_file_close(struct flextree *t);
int ft_file_check(const struct flextree *t);
/* Where an evicted leaf's committed image is, read under cache_lock: a
 * commit running beside the reader changes the tree's version and slot
 * count (and only dirty, resident leaves' slots). */
struct ft_leaf_src {
	uint32_t slot, nslots;
	uint64_t csum, version;
};
/* Asks the kernel to read ahead the evicted leaves among the children
 * [from, count] of internal node in, which a scan is about to visit. */
void ft_file_prefetch(const struct flextree *t, const struct ft_internal *in, int from);
int ft_file_read_leaf(const struct flextree *t, const struct ft_leaf_src *src,
		      const struct ft_span *sp, struct ft_leaf_body *b, uint16_t *count);

#endif /* FLEXTREE_INT_H */
