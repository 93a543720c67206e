/*
 * ft_check.c - flextree_check: walks the whole tree and verifies every
 * invariant listed in flextree_int.h, reading evicted leaves through the
 * leaf cache, then the file's own bookkeeping (ft_file_check).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "flextree_int.h"

struct ft_check {
	uint64_t pos; /* next expected effective offset */
	uint64_t extents, leaves, internals;
	int leaf_depth;
};

/* Whether a leaf's cache state is sound (under the lock: readers may be
 * loading other leaves): a dirty leaf is resident, since it has no other
 * copy, and a leaf is in the CLOCK ring exactly when it is clean and
 * resident (flextree_int.h). */
static int ft_leaf_cache_ok(const struct flextree *t, const struct ft_leaf *l)
{
	if (!t->paged)
		return 1;
	struct flextree *mt = (struct flextree *)t;
	pthread_mutex_lock(&mt->cache_lock);
	int resident = l->b != NULL, in_ring = l->next != NULL;
	pthread_mutex_unlock(&mt->cache_lock);
	return (resident || !l->h.dirty) && in_ring == (resident && !l->h.dirty);
}

/* Checks the subtree n whose range ends at hi (its start is ck->pos). */
static int ft_check_node(const struct flextree *t, const struct ft_node *n, int64_t base,
			 uint64_t hi, int depth, struct ft_check *ck)
{
	if (n->leaf) {
		struct ft_leaf *l = (struct ft_leaf *)n;
		if (ck->leaf_depth < 0)
			ck->leaf_depth = depth;
		if (ck->leaf_depth != depth)
			return FLEX_ECORRUPT;
		if (!ft_leaf_cache_ok(t, l))
			return FLEX_ECORRUPT;
		struct ft_span sp = {.base = base, .lo = ck->pos, .hi = hi};
		int rc = ft_leaf_get(t, l, &sp, NULL, 0, 0, 1);
		if (rc)
			return rc;
		if (l->h.count > FT_LEAF_CAP || (l->h.count == 0 && n != t->root))
			rc = FLEX_ECORRUPT;
		for (int j = 0; j < l->h.count && !rc; j++) {
			uint64_t poff = ft_pt_poff(l->b->pt[j]);
			if (l->b->len[j] == 0 || l->b->loff[j] > FT_PARTIAL_MAX)
				rc = FLEX_ECORRUPT;
			else if ((uint64_t)(base + (int64_t)l->b->loff[j]) != ck->pos)
				rc = FLEX_ECORRUPT;
			else if (poff != FLEXTREE_HOLE && poff + l->b->len[j] > FLEXTREE_HOLE)
				rc = FLEX_ECORRUPT;
			else
				ck->pos += l->b->len[j];
		}
		ck->extents += l->h.count;
		ck->leaves++;
		ft_leaf_put(t, l);
		return rc;
	}
	const struct ft_internal *in = (const struct ft_internal *)n;
	if (in->h.count > FT_INTERNAL_CAP || depth >= FT_MAX_HEIGHT)
		return FLEX_ECORRUPT;
	ck->internals++;
	for (int i = 0; i <= in->h.count; i++) {
		if (!in->child[i])
			return FLEX_ECORRUPT;
		if (i > 0 && (uint64_t)(base + in->pivot[i - 1]) != ck->pos)
			return FLEX_ECORRUPT;
		uint64_t before = ck->pos;
		uint64_t chi = i < in->h.count ? (uint64_t)(base + in->pivot[i]) : hi;
		int rc = ft_check_node(t, in->child[i], base + in->shift[i], chi, depth + 1, ck);
		if (rc)
			return rc;
		if (ck->pos == before)
			return FLEX_ECORRUPT; /* an empty subtree */
		if (!in->child[i]->dirty && n->dirty == 0 && t->fd >= 0 &&
		    in->child[i]->slot == FT_NOSLOT)
			return FLEX_ECORRUPT;
		if (in->child[i]->dirty && !n->dirty)
			return FLEX_ECORRUPT; /* a dirty node under a clean one */
	}
	return 0;
}

int flextree_check(const struct flextree *t)
{
	if (!t || !t->root)
		return -EINVAL;
	struct ft_check ck = {.leaf_depth = -1};
	int rc = ft_check_node(t, t->root, 0, t->size, 0, &ck);
	if (rc)
		return rc;
	if (ck.pos != t->size || ck.extents != t->nextents || ck.leaves != t->nleaves ||
	    ck.internals != t->ninternals || (uint32_t)ck.leaf_depth + 1 != t->height)
		return FLEX_ECORRUPT;
	if (t->paged) {
		struct flextree *mt = (struct flextree *)t;
		pthread_mutex_lock(&mt->cache_lock);
		int bad = t->nring > t->resident || t->resident > t->nleaves;
		pthread_mutex_unlock(&mt->cache_lock);
		if (bad)
			return FLEX_ECORRUPT;
	}
	if (t->fd >= 0)
		return ft_file_check(t);
	return 0;
}
