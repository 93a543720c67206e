/*
 * ft_node.c - FlexTree's nodes and the operations that change the tree's
 * shape (paper section 3): descents, inserts that split full nodes on the
 * way down (a full leaf first shares entries with a sibling that has
 * room), collapses that merge underfull nodes on the way back up, and the
 * shift updates along the path.
 *
 * A modifying operation walks down once, splitting full nodes on the way
 * (so a split always finds room in its parent), remembers the path, and
 * walks back up to apply the shift and to merge underfull nodes.  Nodes
 * are taken from spare pools filled before the descent starts, so a split
 * never fails half-way through.  A freed node hands its committed slot
 * back to be reused after the next commit.
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_hg.h"
#include "../common/flex_vec.h"
#include "flextree_int.h"

/* ---- nodes ------------------------------------------------------------ */

/* A new empty node.  A leaf of a volatile tree carries its body in the
 * same allocation (one cache-friendly block, as before paging existed); a
 * persistent tree's leaf body is a separate allocation the cache can drop. */
struct ft_node *ft_node_new(const struct flextree *t, int leaf)
{
	struct ft_node *n;
	if (leaf) {
		int apart = t && t->paged;
		size_t sz = sizeof(struct ft_leaf) + (apart ? 0 : sizeof(struct ft_leaf_body));
		struct ft_leaf *l = malloc(sz);
		if (!l)
			return NULL;
		if (apart) {
			l->b = malloc(sizeof(struct ft_leaf_body));
			if (!l->b) {
				free(l);
				return NULL;
			}
		} else {
			l->b = (struct ft_leaf_body *)(l + 1);
		}
		l->inline_body = !apart;
		l->prev = l->next = NULL;
		l->pins = 0;
		l->ref = 0;
		/* Readers pin and mark leaves without a lock (ft_cache.c). */
		FLEX_ATOMIC_OBJ(&l->pins, sizeof(l->pins));
		FLEX_ATOMIC_OBJ(&l->ref, sizeof(l->ref));
		FLEX_ATOMIC_OBJ(&l->b, sizeof(l->b));
		n = &l->h;
	} else {
		n = malloc(sizeof(struct ft_internal));
		if (!n)
			return NULL;
	}
	n->leaf = (uint8_t)(leaf != 0);
	n->dirty = 1;
	n->count = 0;
	n->slot = FT_NOSLOT;
	n->csum = 0;
	return n;
}

/* A persistent tree's leaf as open finds it: committed, not yet read. */
struct ft_leaf *ft_leaf_stub_new(void)
{
	struct ft_leaf *l = calloc(1, sizeof(*l));
	if (l)
		l->h.leaf = 1;
	return l;
}

void ft_leaf_free(struct ft_leaf *l)
{
	if (!l->inline_body)
		free(l->b);
	free(l);
}

void ft_node_free_tree(struct ft_node *n)
{
	if (!n)
		return;
	if (n->leaf) {
		ft_leaf_free((struct ft_leaf *)n);
		return;
	}
	struct ft_internal *in = (struct ft_internal *)n;
	for (int i = 0; i <= in->h.count; i++)
		ft_node_free_tree(in->child[i]);
	free(n);
}

/* Marks a node changed since the last commit. */
static inline void ft_touch(struct flextree *t, struct ft_node *n)
{
	if (!n->dirty) {
		if (n->leaf && t->paged)
			ft_cache_dirty(t, (struct ft_leaf *)n);
		n->dirty = 1;
		t->dirty_nodes++;
	}
}

/* Returns the committed slot of a node leaving the tree; the previous
 * version still uses it, so it becomes reusable only after the next commit
 * (flextree_file.c moves pending slots to the free list then). */
void ft_release_slot(struct flextree *t, struct ft_node *n)
{
	if (n->slot == FT_NOSLOT || t->fd < 0)
		return;
	/* Leaking a slot when out of memory is harmless: open recomputes
	 * the free slots from the tree it loads. */
	if (flex_vec_reserve(&t->pending, &t->pending_cap, (size_t)t->npending + 1, 64))
		return;
	t->pending[t->npending++] = n->slot;
	n->slot = FT_NOSLOT;
}

static void ft_free_node(struct flextree *t, struct ft_node *n)
{
	ft_release_slot(t, n);
	if (n->dirty && t->dirty_nodes)
		t->dirty_nodes--;
	if (n->leaf) {
		struct ft_leaf *l = (struct ft_leaf *)n;
		t->nleaves--;
		if (t->paged && l->b)
			ft_cache_del(t, l);
		ft_leaf_free(l);
	} else {
		t->ninternals--;
		free(n);
	}
}

/* Refills the spare pools (see ft_reserve in flextree_int.h). */
int ft_reserve_slow(struct flextree *t)
{
	while (t->nspare_leaf < 2) {
		struct ft_node *n = ft_node_new(t, 1);
		if (!n)
			return -ENOMEM;
		t->spare_leaf[t->nspare_leaf++] = n;
	}
	int want = (int)t->height + 2;
	if (want > FT_MAX_HEIGHT + 2)
		want = FT_MAX_HEIGHT + 2;
	while (t->nspare_internal < want) {
		struct ft_node *n = ft_node_new(t, 0);
		if (!n)
			return -ENOMEM;
		t->spare_internal[t->nspare_internal++] = n;
	}
	return 0;
}

static struct ft_node *ft_take(struct flextree *t, int leaf)
{
	struct ft_node *n;
	if (leaf) {
		assert(t->nspare_leaf > 0);
		n = t->spare_leaf[--t->nspare_leaf];
		t->nleaves++;
		n->dirty = 1;
		if (t->paged)
			ft_cache_add(t, (struct ft_leaf *)n);
	} else {
		assert(t->nspare_internal > 0);
		n = t->spare_internal[--t->nspare_internal];
		t->ninternals++;
	}
	n->dirty = 1;
	n->count = 0;
	n->slot = FT_NOSLOT;
	t->dirty_nodes++;
	return n;
}

/* ---- searching ---------------------------------------------------------- */

/* Number of pivots <= y: the child to descend into for offset y.  A
 * branch-free binary search, like ft_leaf_upper (flextree_int.h). */
static inline int ft_route(const struct ft_internal *in, int64_t y)
{
	int n = in->h.count;
	if (n == 0 || in->pivot[n - 1] <= y)
		return n;
	const int64_t *b = in->pivot;
	while (n > 1) {
		int half = n >> 1;
		b = b[half] <= y ? b + half : b;
		n -= half;
	}
	return (int)(b - in->pivot) + (*b <= y);
}

/* Starts loading the header and partial offsets of a leaf about to be
 * changed.  The steps of a binary search load one after another; on a
 * leaf that is not in cache, fetching its offsets in parallel first is
 * cheaper (random inserts; a lookup gains nothing from it). */
static inline void ft_prefetch_leaf(const struct ft_node *n)
{
	const struct ft_leaf *l = (const struct ft_leaf *)n;
	__builtin_prefetch(l);
	const char *p = (const char *)l->b;
#pragma GCC unroll 32
	for (size_t off = 0; off < offsetof(struct ft_leaf_body, pt); off += 64)
		__builtin_prefetch(p + off);
}

static inline int ft_full(const struct ft_node *n)
{
	return n->leaf ? n->count >= FT_LEAF_CAP - 1 : n->count >= FT_INTERNAL_CAP;
}

/* Writers: makes child i of path node lv (lv < 0: the root) resident when
 * it is a leaf. */
static int ft_need(struct flextree *t, const struct ft_path *p, int lv, int i)
{
	struct ft_node *n = lv < 0 ? t->root : p->node[lv]->child[i];
	if (!t->paged || !n->leaf || ((struct ft_leaf *)n)->b)
		return 0;
	return ft_leaf_get(t, (struct ft_leaf *)n, NULL, p, lv, i, 0);
}

/* Read-only descent to the leaf whose range contains x, which is left
 * pinned (release it with ft_leaf_put).  Returns 0 or a status of
 * ft_leaf_get. */
int ft_find(const struct flextree *t, uint64_t x, struct ft_path *p)
{
	const struct ft_node *n = t->root;
	int64_t base = 0;
	p->depth = 0;
	while (!n->leaf) {
		struct ft_internal *in = (struct ft_internal *)n;
		int i = ft_route(in, (int64_t)x - base);
		p->node[p->depth] = in;
		p->idx[p->depth] = i;
		p->base[p->depth] = base;
		p->depth++;
		base += in->shift[i];
		n = in->child[i];
	}
	p->leaf = (struct ft_leaf *)n;
	p->leaf_base = base;
	int lv = p->depth - 1;
	return ft_leaf_get(t, p->leaf, NULL, p, lv, lv < 0 ? 0 : p->idx[lv], 1);
}

/* ---- structural changes ------------------------------------------------- */

static void ft_leaf_rebase(struct ft_leaf *l, struct ft_internal *parent, int i)
{
	uint64_t m = l->b->loff[0];
	if (!m)
		return;
	for (int j = 0; j < l->h.count; j++)
		l->b->loff[j] -= m;
	parent->shift[i] += (int64_t)m;
}

/* Splits the full child i of p into two; the new right node inherits the
 * left one's shift (plus, for a leaf, its first partial offset, so that its
 * partial offsets restart at 0). */
static void ft_split_child(struct flextree *t, struct ft_internal *p, int i)
{
	struct ft_node *c = p->child[i];
	struct ft_node *r = ft_take(t, c->leaf);
	int64_t pivot, rshift;

	assert(p->h.count < FT_INTERNAL_CAP);
	if (c->leaf) {
		struct ft_leaf *l = (struct ft_leaf *)c, *rl = (struct ft_leaf *)r;
		int m = l->h.count / 2, n = l->h.count - m;
		memcpy(rl->b->loff, l->b->loff + m, n * sizeof(l->b->loff[0]));
		memcpy(rl->b->pt, l->b->pt + m, n * sizeof(l->b->pt[0]));
		memcpy(rl->b->len, l->b->len + m, n * sizeof(l->b->len[0]));
		rl->h.count = (uint16_t)n;
		l->h.count = (uint16_t)m;
		uint64_t first = rl->b->loff[0];
		for (int j = 0; j < n; j++)
			rl->b->loff[j] -= first;
		pivot = p->shift[i] + (int64_t)first;
		rshift = pivot;
	} else {
		struct ft_internal *l = (struct ft_internal *)c, *rl = (struct ft_internal *)r;
		int m = l->h.count / 2, n = l->h.count - m - 1;
		memcpy(rl->pivot, l->pivot + m + 1, n * sizeof(l->pivot[0]));
		memcpy(rl->shift, l->shift + m + 1, (n + 1) * sizeof(l->shift[0]));
		memcpy(rl->child, l->child + m + 1, (n + 1) * sizeof(l->child[0]));
		rl->h.count = (uint16_t)n;
		pivot = p->shift[i] + l->pivot[m];
		rshift = p->shift[i];
		l->h.count = (uint16_t)m;
	}
	int cnt = p->h.count;
	memmove(p->pivot + i + 1, p->pivot + i, (cnt - i) * sizeof(p->pivot[0]));
	memmove(p->shift + i + 2, p->shift + i + 1, (cnt - i) * sizeof(p->shift[0]));
	memmove(p->child + i + 2, p->child + i + 1, (cnt - i) * sizeof(p->child[0]));
	p->pivot[i] = pivot;
	p->shift[i + 1] = rshift;
	p->child[i + 1] = r;
	p->h.count++;
	ft_touch(t, c);
}

/* A full leaf is split only when neither sibling under its parent can take
 * entries: one with a quarter of the capacity free (at least three
 * entries: a full leaf may hold FT_LEAF_CAP) gets enough of them that both
 * hold about the same, and neither is full.  Splits alone leave random
 * inserts about two thirds of each leaf and appends half; sharing first
 * keeps leaves fuller, and a commit writes one whole slot per dirty leaf. */
#define FT_LEAF_SHARE_ROOM (FT_LEAF_CAP / 4 > 3 ? FT_LEAF_CAP / 4 : 3)
#define FT_LEAF_SHARE_MAX (FT_LEAF_CAP - 1 - FT_LEAF_SHARE_ROOM)

/* Moves the extents [from, from + n) of leaf a to position at of leaf b
 * (which has room), after moving b's extents at and after `at` up.  The
 * caller sets the partial offsets of b. */
static void ft_leaf_move(struct ft_leaf *a, int from, int n, struct ft_leaf *b, int at)
{
	struct ft_leaf_body *x = a->b, *y = b->b;
	int tail = b->h.count - at;
	memmove(y->pt + at + n, y->pt + at, tail * sizeof(y->pt[0]));
	memmove(y->len + at + n, y->len + at, tail * sizeof(y->len[0]));
	memcpy(y->pt + at, x->pt + from, n * sizeof(y->pt[0]));
	memcpy(y->len + at, x->len + from, n * sizeof(y->len[0]));
	b->h.count = (uint16_t)(b->h.count + n);
}

/* Partial offsets of leaf l from first on, each the one before plus its
 * length. */
static void ft_leaf_offsets(struct ft_leaf *l, int from, uint64_t first)
{
	for (int j = from; j < l->h.count; j++) {
		l->b->loff[j] = first;
		first += l->b->len[j];
	}
}

/* Gives entries of the full leaf child i of path node d to a sibling.
 * Returns the child that now holds y, or -1 when neither sibling has the
 * room (or the one that might cannot be read): the leaf is split then. */
static int ft_leaf_share(struct flextree *t, struct ft_path *p, int d, int i, int64_t y)
{
	struct ft_internal *in = p->node[d];
	struct ft_leaf *l = (struct ft_leaf *)in->child[i];
	int j = -1;
	/* A leaf's count stays known when its body is evicted; a stub open
	 * has not read yet shows 0 until it is, and is not asked (nor is an
	 * empty leaf, which only a damaged file can hold below the root). */
	if (i > 0 && in->child[i - 1]->count && in->child[i - 1]->count <= FT_LEAF_SHARE_MAX)
		j = i - 1;
	if (i < in->h.count && in->child[i + 1]->count &&
	    in->child[i + 1]->count <= FT_LEAF_SHARE_MAX &&
	    (j < 0 || in->child[i + 1]->count < in->child[j]->count))
		j = i + 1;
	if (j < 0 || ft_need(t, p, d, j) != 0 || !in->child[j]->count ||
	    in->child[j]->count > FT_LEAF_SHARE_MAX)
		return -1;
	struct ft_leaf *s = (struct ft_leaf *)in->child[j];
	int n = l->h.count, move = (n - s->h.count) / 2;
	if (j > i) {
		/* l's tail goes to the front of s, whose offsets restart at 0
		 * from the new pivot. */
		int m = n - move;
		int64_t pivot = in->shift[i] + (int64_t)l->b->loff[m];
		ft_leaf_move(l, m, move, s, 0);
		l->h.count = (uint16_t)m;
		ft_leaf_offsets(s, 0, 0);
		in->pivot[i] = pivot;
		in->shift[i + 1] = pivot;
	} else {
		/* l's head goes to the end of s, and l's offsets restart at 0
		 * from the new pivot. */
		int sc = s->h.count;
		int64_t pivot = in->shift[i] + (int64_t)l->b->loff[move];
		ft_leaf_move(l, 0, move, s, sc);
		ft_leaf_offsets(s, sc, s->b->loff[sc - 1] + s->b->len[sc - 1]);
		if (s->b->loff[s->h.count - 1] > FT_PARTIAL_MAX)
			ft_leaf_rebase(s, in, j);
		struct ft_leaf_body *b = l->b;
		memmove(b->pt, b->pt + move, (n - move) * sizeof(b->pt[0]));
		memmove(b->len, b->len + move, (n - move) * sizeof(b->len[0]));
		l->h.count = (uint16_t)(n - move);
		ft_leaf_offsets(l, 0, 0);
		in->pivot[i - 1] = pivot;
		in->shift[i] = pivot;
	}
	ft_touch(t, &s->h);
	ft_touch(t, &l->h);
	return ft_route(in, y);
}

/* Puts a new internal root with the old root as its only child. */
static void ft_grow(struct flextree *t)
{
	struct ft_internal *r = (struct ft_internal *)ft_take(t, 0);
	r->child[0] = t->root;
	r->shift[0] = 0;
	t->root = &r->h;
	t->height++;
}

/* Descends to the leaf for x, splitting full nodes on the way and marking
 * the path dirty; every leaf it looks at is made resident first.  Requires
 * ft_reserve() first.  Returns 0 or a status of ft_leaf_get (the tree is
 * sound then: at most some nodes were split). */
int ft_find_mut(struct flextree *t, uint64_t x, struct ft_path *p)
{
	int rc;
	if (t->root->leaf) {
		struct ft_span sp = {.base = 0, .lo = 0, .hi = t->size};
		if ((rc = ft_leaf_get(t, (struct ft_leaf *)t->root, &sp, NULL, 0, 0, 0)) != 0)
			return rc;
	}
	if (ft_full(t->root))
		ft_grow(t);
	struct ft_node *n = t->root;
	int64_t base = 0;
	p->depth = 0;
	while (!n->leaf) {
		struct ft_internal *in = (struct ft_internal *)n;
		ft_touch(t, n);
		int64_t y = (int64_t)x - base;
		int i = ft_route(in, y);
		int d = p->depth;
		p->node[d] = in;
		p->idx[d] = i;
		p->base[d] = base;
		if ((rc = ft_need(t, p, d, i)) != 0)
			return rc;
		/* Not for the last child: that is where appends go, and its
		 * leaf is in cache. */
		if (d + 2 == (int)t->height && i < in->h.count)
			ft_prefetch_leaf(in->child[i]);
		if (ft_full(in->child[i])) {
			int k = in->child[i]->leaf ? ft_leaf_share(t, p, d, i, y) : -1;
			if (k >= 0) {
				i = k;
			} else {
				ft_split_child(t, in, i);
				if (y >= in->pivot[i])
					i++;
			}
			p->idx[d] = i;
		}
		p->depth++;
		base += in->shift[i];
		n = in->child[i];
	}
	ft_touch(t, n);
	p->leaf = (struct ft_leaf *)n;
	p->leaf_base = base;
	return 0;
}

/* Two 64-bit lanes: SSE2 on x86-64 and NEON on arm64 are baseline, so these
 * need no -march flag.  -O2 does not vectorise loops whose trip count is not
 * a multiple of the vector width, and the shift loops below are most of the
 * work of a random insert.  Unsigned, so that adding a negative delta wraps
 * as two's complement does; loads and stores go through memcpy because the
 * arrays are only 8-byte aligned at the indices used. */
typedef uint64_t ft_v2 __attribute__((vector_size(16)));

/* Adds d to the n 64-bit words at a. */
static inline void ft_add64(void *a, int n, uint64_t d)
{
	unsigned char *p = a, *end = p + 8 * (size_t)n;
	ft_v2 dv = {d, d};
	for (; end - p >= 64; p += 64) {
		ft_v2 w, x, y, z;
		memcpy(&w, p, 16);
		memcpy(&x, p + 16, 16);
		memcpy(&y, p + 32, 16);
		memcpy(&z, p + 48, 16);
		w += dv;
		x += dv;
		y += dv;
		z += dv;
		memcpy(p, &w, 16);
		memcpy(p + 16, &x, 16);
		memcpy(p + 32, &y, 16);
		memcpy(p + 48, &z, 16);
	}
	for (; end - p >= 16; p += 16) {
		ft_v2 w;
		memcpy(&w, p, 16);
		w += dv;
		memcpy(p, &w, 16);
	}
	if (p < end) {
		uint64_t w;
		memcpy(&w, p, 8);
		w += d;
		memcpy(p, &w, 8);
	}
}

/* Adds delta to everything to the right of the path above the leaf: the
 * pivots after the child taken and the shifts of the children after it. */
static void ft_shift_path(struct ft_path *p, int64_t delta)
{
	for (int d = p->depth - 1; d >= 0; d--) {
		struct ft_internal *in = p->node[d];
		int i = p->idx[d], n = in->h.count - i;
		ft_add64(in->pivot + i, n, (uint64_t)delta);
		ft_add64(in->shift + i + 1, n, (uint64_t)delta);
	}
}

/* Moves entries [k, count) of a leaf up by gap slots, adding add to their
 * partial offsets on the way (one pass instead of a memmove and an add),
 * and grows count by gap; the caller fills slots k .. k + gap - 1. */
static inline void ft_leaf_open(struct ft_leaf *l, int k, int gap, uint64_t add)
{
	int cnt = l->h.count, n = cnt - k;
	assert(cnt + gap <= FT_LEAF_CAP);
	l->h.count = (uint16_t)(cnt + gap);
	if (n == 0)
		return;
	memmove(l->b->pt + k + gap, l->b->pt + k, n * sizeof(l->b->pt[0]));
	memmove(l->b->len + k + gap, l->b->len + k, n * sizeof(l->b->len[0]));
	/* From the top down, each pair loaded before the stores that overlap
	 * it (a store lands at most two words above its load). */
	unsigned char *p = (unsigned char *)l->b->loff;
	ft_v2 dv = {add, add};
	int j = cnt;
	for (; j - 4 >= k; j -= 4) {
		ft_v2 x, y;
		memcpy(&x, p + 8 * (j - 2), 16);
		memcpy(&y, p + 8 * (j - 4), 16);
		x += dv;
		y += dv;
		memcpy(p + 8 * (j - 2 + gap), &x, 16);
		memcpy(p + 8 * (j - 4 + gap), &y, 16);
	}
	for (j--; j >= k; j--)
		l->b->loff[j + gap] = l->b->loff[j] + add;
}

static void ft_leaf_insert_at(struct ft_leaf *l, int k, uint64_t loff, uint64_t pt,
			      uint32_t len)
{
	ft_leaf_open(l, k, 1, 0);
	l->b->loff[k] = loff;
	l->b->pt[k] = pt;
	l->b->len[k] = len;
}

/* Splits extent k of a leaf at partial offset y (strictly inside it); the
 * tail, k + 1, is untagged. */
void ft_leaf_split_extent(struct ft_leaf *l, int k, uint64_t y)
{
	uint64_t off = y - l->b->loff[k];
	uint64_t poff = ft_pt_poff(l->b->pt[k]);
	uint64_t tail = poff == FLEXTREE_HOLE ? FLEXTREE_HOLE : poff + off;
	assert(off > 0 && off < l->b->len[k]);
	ft_leaf_insert_at(l, k + 1, y, ft_pt_make(tail, 0), (uint32_t)(l->b->len[k] - off));
	l->b->len[k] = (uint32_t)off;
}

/* Inserts one extent of at most UINT32_MAX bytes at x <= size.  The leaf
 * changes in one pass: the entries after the new extent (and after the
 * tail of an extent it splits) move up and shift by len together. */
int ft_insert_one(struct flextree *t, uint64_t x, uint64_t pt, uint32_t len)
{
	struct ft_path p;
	int rc = ft_find_mut(t, x, &p);
	if (rc)
		return rc;
	struct ft_leaf *l = p.leaf;
	uint64_t y = x - (uint64_t)p.leaf_base;
	int k = ft_leaf_upper(l, y); /* first entry starting after y */
	uint64_t head = 0;	     /* length of extent k-1 once split at y */
	int split = 0;

	if (k > 0 && l->b->loff[k - 1] == y) {
		/* x is the start of extent k-1: insert before it. */
		k--;
	} else if (k > 0) {
		head = y - l->b->loff[k - 1];
		split = head < l->b->len[k - 1];
	}
	if (k > 0 && !split)
		head = l->b->len[k - 1];
	/* The extent goes at index k, starting at partial offset y; a split
	 * extent's tail follows it. */
	uint64_t poff = ft_pt_poff(pt);
	int merged = 0;
	if (k > 0 && ft_pt_tag(pt) == 0) {
		uint64_t prev = ft_pt_poff(l->b->pt[k - 1]);
		uint64_t sum = head + len;
		if (prev == FLEXTREE_HOLE && poff == FLEXTREE_HOLE)
			merged = sum <= UINT32_MAX;
		else if (prev != FLEXTREE_HOLE && poff != FLEXTREE_HOLE && poff == prev + head &&
			 (!t->merge_boundary || poff % t->merge_boundary != 0))
			merged = sum <= t->max_extent;
	}
	int gap = split + !merged;
	uint32_t tail = 0;
	uint64_t tail_pt = 0;
	if (split) {
		uint64_t prev = ft_pt_poff(l->b->pt[k - 1]);
		tail = (uint32_t)(l->b->len[k - 1] - head);
		tail_pt = ft_pt_make(prev == FLEXTREE_HOLE ? FLEXTREE_HOLE : prev + head, 0);
		l->b->len[k - 1] = (uint32_t)head;
	}
	ft_leaf_open(l, k, gap, len);
	if (merged) {
		l->b->len[k - 1] += len;
	} else {
		l->b->loff[k] = y;
		l->b->pt[k] = pt;
		l->b->len[k] = len;
	}
	if (split) {
		int j = k + gap - 1;
		l->b->loff[j] = y + len;
		l->b->pt[j] = tail_pt;
		l->b->len[j] = tail;
	}
	t->nextents += (uint64_t)gap;
	ft_shift_path(&p, len);
	/* Partial offsets start near 0 after every split, so only a leaf that
	 * never split can outgrow 48 bits; rebase it then. */
	if (l->b->loff[l->h.count - 1] > FT_PARTIAL_MAX && p.depth > 0)
		ft_leaf_rebase(l, p.node[p.depth - 1], p.idx[p.depth - 1]);
	t->size += len;
	return 0;
}

/* Removes the empty child idx[lv] of node[lv]; a parent left without
 * children is removed from its own parent in turn.  Returns the depth of
 * the node that lost a child and kept others, or -1 when the whole tree
 * emptied. */
static int ft_remove_empty(struct flextree *t, struct ft_path *p, int lv)
{
	for (; lv >= 0; lv--) {
		struct ft_internal *in = p->node[lv];
		int i = p->idx[lv], cnt = in->h.count;
		ft_free_node(t, in->child[i]);
		if (cnt > 0) {
			int pv = i > 0 ? i - 1 : 0;
			memmove(in->pivot + pv, in->pivot + pv + 1, (cnt - pv - 1) * sizeof(in->pivot[0]));
			memmove(in->shift + i, in->shift + i + 1, (cnt - i) * sizeof(in->shift[0]));
			memmove(in->child + i, in->child + i + 1, (cnt - i) * sizeof(in->child[0]));
			in->h.count--;
			return lv;
		}
	}
	/* Every node on the path emptied: the root goes too. */
	ft_free_node(t, t->root);
	t->root = ft_take(t, 1);
	t->height = 1;
	return -1;
}

/* Merges child left+1 of p into child left, converting the right node's
 * offsets from its base to the left node's base. */
static void ft_merge_children(struct flextree *t, struct ft_internal *p, int left)
{
	struct ft_node *ln = p->child[left], *rn = p->child[left + 1];
	int64_t delta = p->shift[left + 1] - p->shift[left];

	ft_touch(t, ln);
	if (ln->leaf) {
		struct ft_leaf *l = (struct ft_leaf *)ln, *r = (struct ft_leaf *)rn;
		int base = l->h.count;
		for (int j = 0; j < r->h.count; j++) {
			l->b->loff[base + j] = (uint64_t)((int64_t)r->b->loff[j] + delta);
			l->b->pt[base + j] = r->b->pt[j];
			l->b->len[base + j] = r->b->len[j];
		}
		l->h.count = (uint16_t)(base + r->h.count);
		if (l->h.count && l->b->loff[l->h.count - 1] > FT_PARTIAL_MAX)
			ft_leaf_rebase(l, p, left);
	} else {
		struct ft_internal *l = (struct ft_internal *)ln, *r = (struct ft_internal *)rn;
		int base = l->h.count;
		l->pivot[base] = p->pivot[left] - p->shift[left];
		for (int j = 0; j < r->h.count; j++)
			l->pivot[base + 1 + j] = r->pivot[j] + delta;
		for (int j = 0; j <= r->h.count; j++) {
			l->shift[base + 1 + j] = r->shift[j] + delta;
			l->child[base + 1 + j] = r->child[j];
		}
		l->h.count = (uint16_t)(base + 1 + r->h.count);
		r->h.count = 0; /* its children moved; free only the node */
	}
	if (!rn->leaf)
		((struct ft_internal *)rn)->child[0] = NULL;
	ft_free_node(t, rn);
	int cnt = p->h.count;
	memmove(p->pivot + left, p->pivot + left + 1, (cnt - left - 1) * sizeof(p->pivot[0]));
	memmove(p->shift + left + 1, p->shift + left + 2, (cnt - left - 1) * sizeof(p->shift[0]));
	memmove(p->child + left + 1, p->child + left + 2, (cnt - left - 1) * sizeof(p->child[0]));
	p->h.count--;
}

static int ft_underfull(const struct ft_node *n)
{
	return n->leaf ? n->count <= FT_LEAF_LOW : n->count <= FT_INTERNAL_LOW;
}

static int ft_mergeable(const struct ft_node *a, const struct ft_node *b)
{
	if (a->leaf)
		return a->count + b->count <= FT_LEAF_MERGE_MAX;
	return a->count + b->count + 1 <= FT_INTERNAL_MERGE_MAX;
}

/* Drops root levels that have a single child, pushing the root's shift
 * into the child (unless that would overflow a leaf's partial offsets). */
static void ft_shrink(struct flextree *t)
{
	while (!t->root->leaf && t->root->count == 0) {
		struct ft_internal *r = (struct ft_internal *)t->root;
		struct ft_node *c = r->child[0];
		int64_t s = r->shift[0];
		if (c->leaf) {
			struct ft_leaf *l = (struct ft_leaf *)c;
			struct ft_span sp = {.base = s, .lo = 0, .hi = t->size};
			/* Unreadable: a root with one child is sound too. */
			if (ft_leaf_get(t, l, &sp, NULL, 0, 0, 0) != 0)
				return;
			if (l->h.count && (int64_t)l->b->loff[l->h.count - 1] + s > (int64_t)FT_PARTIAL_MAX)
				return;
			for (int j = 0; j < l->h.count; j++)
				l->b->loff[j] = (uint64_t)((int64_t)l->b->loff[j] + s);
		} else {
			struct ft_internal *in = (struct ft_internal *)c;
			for (int j = 0; j < in->h.count; j++)
				in->pivot[j] += s;
			for (int j = 0; j <= in->h.count; j++)
				in->shift[j] += s;
		}
		ft_touch(t, c);
		r->child[0] = NULL;
		r->h.count = 0;
		ft_free_node(t, &r->h);
		t->root = c;
		t->height--;
	}
}

/* After entries were removed from p->leaf: removes it if empty, merges
 * underfull nodes upward, and lowers the root. */
static void ft_rebalance(struct flextree *t, struct ft_path *p)
{
	int lv = p->depth - 1;
	if (p->depth > 0 && p->leaf->h.count == 0) {
		lv = ft_remove_empty(t, p, p->depth - 1);
		if (lv < 0)
			return;
		lv--; /* node[lv+1] lost a child: check it against its siblings */
	}
	for (; lv >= 0; lv--) {
		struct ft_internal *in = p->node[lv];
		int i = p->idx[lv];
		if (!ft_underfull(in->child[i]) || in->h.count == 0)
			break;
		int left = i > 0 ? i - 1 : 0;
		/* An unreadable sibling only leaves a node underfull. */
		if (ft_need(t, p, lv, left) != 0 || ft_need(t, p, lv, left + 1) != 0)
			break;
		if (!ft_mergeable(in->child[left], in->child[left + 1]))
			break;
		ft_merge_children(t, in, left);
	}
	ft_shrink(t);
}

/* Removes up to d bytes starting at x (x < size) from the leaf holding x
 * and sets *removed to the number of bytes removed (> 0).  Returns 0 or a
 * status of ft_find_mut. */
int ft_collapse_leaf(struct flextree *t, uint64_t x, uint64_t d, uint64_t *removed)
{
	struct ft_path p;
	int rc = ft_find_mut(t, x, &p);
	if (rc)
		return rc;
	struct ft_leaf *l = p.leaf;
	uint64_t y = x - (uint64_t)p.leaf_base;
	int j = ft_leaf_upper(l, y) - 1;

	assert(j >= 0 && y < l->b->loff[j] + l->b->len[j]);
	if (l->b->loff[j] < y) {
		ft_leaf_split_extent(l, j, y);
		t->nextents++;
		j++;
	}
	uint64_t r = 0;
	int e = j;
	while (e < l->h.count && r < d) {
		if (r + l->b->len[e] <= d) {
			r += l->b->len[e++];
		} else {
			uint32_t cut = (uint32_t)(d - r);
			uint64_t poff = ft_pt_poff(l->b->pt[e]);
			l->b->loff[e] += cut;
			l->b->len[e] -= cut;
			l->b->pt[e] = ft_pt_make(poff == FLEXTREE_HOLE ? poff : poff + cut, 0);
			r = d;
		}
	}
	int n = l->h.count - e;
	memmove(l->b->loff + j, l->b->loff + e, n * sizeof(l->b->loff[0]));
	memmove(l->b->pt + j, l->b->pt + e, n * sizeof(l->b->pt[0]));
	memmove(l->b->len + j, l->b->len + e, n * sizeof(l->b->len[0]));
	l->h.count = (uint16_t)(j + n);
	t->nextents -= (uint64_t)(e - j);
	for (int q = j; q < l->h.count; q++)
		l->b->loff[q] -= r;
	ft_shift_path(&p, -(int64_t)r);
	t->size -= r;
	ft_rebalance(t, &p);
	*removed = r;
	return 0;
}

