/*
 * flextree.c - FlexTree: the shift-aware extent index (paper section 3).
 *
 * A B+-tree over extents whose leaves store partial offsets and whose child
 * pointers carry shift values; the effective offset of an entry is its
 * partial offset plus the shifts on its search path.  Inserting or removing
 * a range therefore changes the entries after it in one leaf, and then, on
 * each level of the path, only the pivots and shifts to the right of the
 * path: O(log N) nodes instead of every later extent.
 *
 * This file holds the public API: argument checks, the operations built
 * from the tree's primitives, and the range queries, which walk the leaves
 * with the path stack of a descent, since it carries each leaf's base
 * offset (a sibling link could not: bases differ per leaf).
 *
 * The rest of the tree is split by concept:
 *   ft_node.c        nodes, descents, splits, merges and shift updates
 *   ft_cache.c       the CLOCK cache paging a persistent tree's leaves
 *   ft_check.c       flextree_check
 *   flextree_file.c  persistence: the copy-on-write file, commit and load
 * See flextree_int.h for the invariants and docs/FORMAT.md for the file.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "../common/flex_codec.h"
#include "../common/flex_hg.h"
#include "flextree_int.h"


static int ft_writable(const struct flextree *t)
{
	if (!t)
		return -EINVAL;
	if (t->read_only && !t->volatile_changes)
		return FLEX_EREADONLY;
	if (t->failed)
		return FLEX_EFAILED;
	return 0;
}

/* Ends a modifying operation: the leaves it read but did not change can go
 * again now that it holds no path. */
static int ft_done(struct flextree *t, int rc)
{
	if (t->paged && t->resident > t->cache_leaves)
		ft_cache_trim(t);
	return rc;
}

static int ft_insert_tagged(struct flextree *t, uint64_t loff, uint64_t poff, uint32_t len,
			    uint16_t tag)
{
	int rc = ft_writable(t);
	if (rc)
		return rc;
	if (poff > FLEXTREE_HOLE ||
	    (poff != FLEXTREE_HOLE && poff + len > FLEXTREE_HOLE))
		return -EINVAL;
	if (loff > FLEXTREE_MAX_SIZE || len > FLEXTREE_MAX_SIZE - loff)
		return FLEX_ETOOBIG;
	if (len == 0)
		return 0;
	while (t->size < loff) {
		uint64_t gap = loff - t->size;
		uint32_t h = gap > UINT32_MAX ? UINT32_MAX : (uint32_t)gap;
		if ((rc = ft_reserve(t)) != 0 ||
		    (rc = ft_insert_one(t, t->size, ft_pt_make(FLEXTREE_HOLE, 0), h)) != 0)
			return ft_done(t, rc);
	}
	if ((rc = ft_reserve(t)) == 0)
		rc = ft_insert_one(t, loff, ft_pt_make(poff, tag), len);
	return ft_done(t, rc);
}

int flextree_insert(struct flextree *t, uint64_t loff, uint64_t poff, uint32_t len)
{
	return ft_insert_tagged(t, loff, poff, len, 0);
}

static int ft_check_range(const struct flextree *t, uint64_t loff, uint64_t len)
{
	if (loff > t->size || len > t->size - loff)
		return -ERANGE;
	return 0;
}

int flextree_collapse(struct flextree *t, uint64_t loff, uint64_t len)
{
	int rc = ft_writable(t);
	if (rc)
		return rc;
	if ((rc = ft_check_range(t, loff, len)) != 0)
		return rc;
	while (len > 0) {
		uint64_t r = 0;
		if ((rc = ft_reserve(t)) != 0 || (rc = ft_collapse_leaf(t, loff, len, &r)) != 0)
			return ft_done(t, rc);
		len -= r;
	}
	return ft_done(t, 0);
}

int flextree_repoint(struct flextree *t, uint64_t loff, uint64_t poff, uint32_t len)
{
	int rc = ft_writable(t);
	if (rc)
		return rc;
	if ((rc = ft_check_range(t, loff, len)) != 0)
		return rc;
	if (poff > FLEXTREE_HOLE ||
	    (poff != FLEXTREE_HOLE && poff + len > FLEXTREE_HOLE))
		return -EINVAL;
	if (len == 0)
		return 0;
	uint16_t tag = 0;
	uint64_t start = 0;
	if ((rc = flextree_tag_get(t, loff, &tag, &start)) != 0)
		return rc;
	if (start != loff)
		tag = 0;
	if ((rc = flextree_collapse(t, loff, len)) != 0)
		return rc;
	return ft_insert_tagged(t, loff, poff, len, tag);
}

int flextree_lookup(const struct flextree *t, uint64_t loff, uint64_t *poff, uint64_t *run)
{
	if (!t)
		return -EINVAL;
	if (loff >= t->size)
		return -ERANGE;
	struct ft_path p;
	int rc = ft_find(t, loff, &p);
	if (rc)
		return rc;
	const struct ft_leaf *l = p.leaf;
	uint64_t y = loff - (uint64_t)p.leaf_base;
	int j = ft_leaf_upper(l, y) - 1;
	assert(j >= 0 && y - l->b->loff[j] < l->b->len[j]);
	uint64_t off = y - l->b->loff[j];
	uint64_t ph = ft_pt_poff(l->b->pt[j]);
	if (poff)
		*poff = ph == FLEXTREE_HOLE ? FLEXTREE_HOLE : ph + off;
	if (run)
		*run = l->b->len[j] - off;
	ft_leaf_put(t, p.leaf);
	return 0;
}

/* Leaf-level cursor for scans: a path plus an entry index.  The current
 * leaf is pinned from a successful seek until ft_cursor_end (or a failed
 * step, which releases it). */
struct ft_cursor {
	const struct flextree *t;
	struct ft_path p;
	int k;
	uint32_t leaves; /* leaves entered */
};

static int ft_cursor_seek(const struct flextree *t, uint64_t x, struct ft_cursor *c)
{
	c->t = t;
	int rc = ft_find(t, x, &c->p);
	if (rc)
		return rc;
	int k = ft_leaf_upper(c->p.leaf, x - (uint64_t)c->p.leaf_base) - 1;
	c->k = k < 0 ? 0 : k;
	c->leaves = 1;
	return 0;
}

static void ft_cursor_end(struct ft_cursor *c)
{
	ft_leaf_put(c->t, c->p.leaf);
}

/* Moves to the next extent; returns 1, 0 at the end of the tree (the leaf
 * stays pinned) or a negative status (nothing is pinned). */
static int ft_cursor_next(struct ft_cursor *c)
{
	if (++c->k < c->p.leaf->h.count)
		return 1;
	int d = c->p.depth - 1;
	while (d >= 0 && c->p.idx[d] >= c->p.node[d]->h.count)
		d--;
	if (d < 0)
		return 0;
	c->p.idx[d]++;
	int64_t base = c->p.base[d] + c->p.node[d]->shift[c->p.idx[d]];
	struct ft_node *n = c->p.node[d]->child[c->p.idx[d]];
	for (d++; !n->leaf; d++) {
		struct ft_internal *in = (struct ft_internal *)n;
		c->p.node[d] = in;
		c->p.idx[d] = 0;
		c->p.base[d] = base;
		base += in->shift[0];
		n = in->child[0];
	}
	ft_leaf_put(c->t, c->p.leaf);
	c->p.leaf = (struct ft_leaf *)n;
	c->p.leaf_base = base;
	c->k = 0;
	int lv = c->p.depth - 1;
	/* A scan already past a few leaves entering a node's leaves will
	 * want the next ones too; a short scan (most are) asks for nothing. */
	if (++c->leaves > 4 && c->p.idx[lv] == 0)
		ft_file_prefetch(c->t, c->p.node[lv], 1);
	int rc = ft_leaf_get(c->t, c->p.leaf, NULL, &c->p, lv, c->p.idx[lv], 1);
	if (rc)
		return rc;
	return c->p.leaf->h.count > 0 ? 1 : ft_cursor_next(c);
}

static inline void ft_cursor_get(const struct ft_cursor *c, struct flextree_extent *e)
{
	const struct ft_leaf *l = c->p.leaf;
	e->loff = (uint64_t)c->p.leaf_base + l->b->loff[c->k];
	e->poff = ft_pt_poff(l->b->pt[c->k]);
	e->len = l->b->len[c->k];
	e->tag = ft_pt_tag(l->b->pt[c->k]);
}

ssize_t flextree_query(const struct flextree *t, uint64_t loff, uint64_t len,
		       struct flextree_mapping *out, size_t cap)
{
	if (!t || (cap && !out))
		return -EINVAL;
	if (loff > t->size || len > UINT64_MAX - loff)
		return -ERANGE;
	uint64_t end = loff + len > t->size ? t->size : loff + len;
	if (loff == end)
		return 0;
	struct ft_cursor c;
	size_t n = 0;
	int rc = ft_cursor_seek(t, loff, &c);
	if (rc)
		return rc;
	/* A leaf's entries are read in place; the cursor only moves between
	 * leaves. */
	do {
		const struct ft_leaf *l = c.p.leaf;
		uint64_t base = (uint64_t)c.p.leaf_base;
		for (int k = c.k; k < l->h.count; k++) {
			uint64_t start = base + l->b->loff[k];
			uint64_t s = start > loff ? start : loff;
			uint64_t f = start + l->b->len[k] < end ? start + l->b->len[k] : end;
			if (n < cap) {
				uint64_t poff = ft_pt_poff(l->b->pt[k]);
				out[n].loff = s;
				out[n].len = f - s;
				out[n].poff =
				    poff == FLEXTREE_HOLE ? FLEXTREE_HOLE : poff + (s - start);
			}
			n++;
			if (f >= end) {
				ft_cursor_end(&c);
				return (ssize_t)n;
			}
		}
		c.k = l->h.count - 1; /* next: the first extent of the next leaf */
	} while ((rc = ft_cursor_next(&c)) > 0);
	if (rc < 0)
		return rc;
	ft_cursor_end(&c);
	return (ssize_t)n;
}

int flextree_scan(const struct flextree *t, uint64_t loff, uint64_t len,
		  int (*fn)(void *arg, const struct flextree_extent *e), void *arg)
{
	if (!t || !fn)
		return -EINVAL;
	if (loff > t->size || len > UINT64_MAX - loff)
		return -ERANGE;
	uint64_t end = loff + len > t->size ? t->size : loff + len;
	if (loff == end)
		return 0;
	struct ft_cursor c;
	struct flextree_extent e;
	int rc = ft_cursor_seek(t, loff, &c);
	if (rc)
		return rc;
	do {
		ft_cursor_get(&c, &e);
		if ((rc = fn(arg, &e)) != 0) {
			ft_cursor_end(&c);
			return rc;
		}
		if (e.loff + e.len >= end)
			break;
	} while ((rc = ft_cursor_next(&c)) > 0);
	if (rc < 0)
		return rc;
	ft_cursor_end(&c);
	return 0;
}

int flextree_tag_set(struct flextree *t, uint64_t loff, uint16_t tag)
{
	int rc = ft_writable(t);
	if (rc)
		return rc;
	if (loff >= t->size)
		return -ERANGE;
	if ((rc = ft_reserve(t)) != 0)
		return rc;
	struct ft_path p;
	if ((rc = ft_find_mut(t, loff, &p)) != 0)
		return ft_done(t, rc);
	struct ft_leaf *l = p.leaf;
	uint64_t y = loff - (uint64_t)p.leaf_base;
	int j = ft_leaf_upper(l, y) - 1;
	if (l->b->loff[j] < y) {
		ft_leaf_split_extent(l, j, y);
		t->nextents++;
		j++;
	}
	l->b->pt[j] = ft_pt_make(ft_pt_poff(l->b->pt[j]), tag);
	return ft_done(t, 0);
}

int flextree_tag_get(const struct flextree *t, uint64_t loff, uint16_t *tag,
		     uint64_t *extent_loff)
{
	if (!t)
		return -EINVAL;
	if (loff >= t->size)
		return -ERANGE;
	struct ft_path p;
	int rc = ft_find(t, loff, &p);
	if (rc)
		return rc;
	const struct ft_leaf *l = p.leaf;
	int j = ft_leaf_upper(l, loff - (uint64_t)p.leaf_base) - 1;
	if (tag)
		*tag = ft_pt_tag(l->b->pt[j]);
	if (extent_loff)
		*extent_loff = (uint64_t)p.leaf_base + l->b->loff[j];
	ft_leaf_put(t, p.leaf);
	return 0;
}

uint64_t flextree_size(const struct flextree *t)
{
	return t ? t->size : 0;
}

int flextree_stats(const struct flextree *t, struct flextree_stats *st)
{
	if (!t || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->size = t->size;
	st->extents = t->nextents;
	st->leaves = t->nleaves;
	st->internals = t->ninternals;
	st->height = t->height;
	st->version = t->version;
	st->file_bytes = t->fd >= 0 ? (uint64_t)t->nslots * 4096 : 0;
	st->dirty_nodes = t->dirty_nodes;
	st->commits = t->commits;
	st->bytes_written = t->bytes_written;
	if (t->paged) {
		struct flextree *mt = (struct flextree *)t;
		pthread_mutex_lock(&mt->cache_lock);
		st->cached_leaves = t->resident;
		st->leaf_reads = t->leaf_reads;
		st->leaf_evictions = t->evictions;
		pthread_mutex_unlock(&mt->cache_lock);
		st->cache_leaves = t->cache_leaves;
	} else {
		st->cached_leaves = t->nleaves;
	}
	st->leaf_bytes = sizeof(struct ft_leaf_body);
	return 0;
}

int flextree_stamp(const struct flextree *t, uint64_t *out)
{
	if (!t || !out || t->fd < 0)
		return -EINVAL;
	if (t->failed)
		return FLEX_EFAILED;
	if (t->root->dirty || !t->version)
		return -EAGAIN;
	uint8_t b[24];
	flex_put_le64(b, t->version);
	flex_put_le64(b + 8, t->root->csum);
	flex_put_le64(b + 16, t->size);
	*out = XXH3_64bits(b, sizeof(b));
	return 0;
}

int flextree_pressure(const struct flextree *t)
{
	return t && t->paged && !t->read_only && t->dirty_nodes > t->cache_leaves;
}

int flextree_open(const char *path, const struct flextree_options *opt, struct flextree **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	struct flextree *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->fd = -1;
	t->height = 1;
	t->max_extent = opt && opt->max_extent ? opt->max_extent : UINT32_MAX;
	t->merge_boundary = opt ? opt->merge_boundary : 0;
	t->io = opt && opt->io ? opt->io : flex_io_posix();
	int rc;
	if (path) {
		uint64_t bytes = opt && opt->cache_size ? opt->cache_size : FT_DEFAULT_CACHE;
		t->cache_leaves = bytes / sizeof(struct ft_leaf_body);
		if (t->cache_leaves == 0)
			t->cache_leaves = 1;
		if (pthread_mutex_init(&t->cache_lock, NULL) != 0) {
			free(t);
			return -ENOMEM;
		}
		t->paged = 1;
		/* Readers test it without cache_lock (ft_leaf_unpin). */
		FLEX_ATOMIC_OBJ(&t->resident, sizeof(t->resident));
		rc = ft_file_open(t, path, opt);
	} else {
		t->root = ft_node_new(t, 1);
		t->nleaves = 1;
		rc = t->root ? 0 : -ENOMEM;
	}
	if (rc) {
		/* A half-loaded tree must not be committed by the close. */
		t->failed = rc;
		flextree_close(t);
		return rc;
	}
	*out = t;
	return 0;
}

int flextree_commit(struct flextree *t)
{
	if (!t)
		return -EINVAL;
	if (t->fd < 0)
		return 0;
	if (t->read_only)
		return FLEX_EREADONLY;
	if (t->failed)
		return FLEX_EFAILED;
	return ft_file_commit(t);
}

int flextree_close(struct flextree *t)
{
	if (!t)
		return 0;
	int rc = 0;
	if (t->fd >= 0 && t->root && !t->read_only && !t->failed)
		rc = ft_file_commit(t);
	if (t->fd >= 0)
		ft_file_close(t);
	ft_node_free_tree(t->root);
	for (int i = 0; i < t->nspare_leaf; i++)
		ft_leaf_free((struct ft_leaf *)t->spare_leaf[i]);
	for (int i = 0; i < t->nspare_internal; i++)
		free(t->spare_internal[i]);
	free(t->free_slots);
	free(t->pending);
	while (t->body_pool)
		free(ft_body_take_locked(t));
	if (t->paged)
		pthread_mutex_destroy(&t->cache_lock);
	free(t);
	return rc;
}
