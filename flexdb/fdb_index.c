/*
 * fdb_index.c - FlexDB's sparse index (paper section 5.1).
 *
 * A B+-tree over intervals, searched by key: internal nodes hold copied
 * pivot keys, leaves hold the intervals in key order.  Like FlexTree, the
 * intervals' offsets in the FlexSpace are stored as partial offsets in the
 * leaves plus a shift on every child pointer, and the effective offset is
 * their sum along the path; so when a put or delete changes an interval's
 * size, the later intervals move with O(fanout x height) updates instead of
 * one per interval.  Unlike FlexTree's, the pivots here are keys and are
 * never shifted.
 *
 * Invariants (fdb_index_check): pivot k of an internal node is <= every
 * interval key in child k and > every key in child k - 1; interval keys
 * increase strictly; no node but the root is empty.  Underfull nodes are
 * not merged (only empty ones are removed): intervals are themselves
 * merged by the store, and the index is small (one entry per ~22 pairs).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdb_int.h"

#define FI_CAP 64
/* Leaves take as many entries as fit in an internal node's room (their
 * entries are smaller): every node is one allocation size. */
#define FI_LEAF_CAP 106

/* Keys are compared first by a *window*: their 8 bytes after the prefix
 * every non-empty key in the index shares (the index's `common`, up to
 * FI_SKIP_MAX bytes), big-endian and zero-padded.  Windows that differ
 * order their keys as fdb_keycmp does, so a search follows a key pointer
 * only when windows tie, instead of at every step.  A search key outside
 * the common prefix gets window 0 or UINT64_MAX (below or above every
 * non-empty key); a tie always falls back to the full comparison, so the
 * empty first key needs no special case. */
#define FI_SKIP_MAX 32

static inline uint64_t fi_window_at(const uint8_t *k, uint32_t len, uint32_t skip)
{
	uint64_t v = 0;
	for (uint32_t i = skip; i < skip + 8; i++)
		v = v << 8 | (i < len ? k[i] : 0);
	return v;
}

static inline int fi_cmp(uint64_t ap, const uint8_t *a, uint32_t alen, uint64_t bp,
			 const uint8_t *b, uint32_t blen)
{
	if (ap != bp)
		return ap < bp ? -1 : 1;
	return fdb_keycmp(a, alen, b, blen);
}

/* A pivot: a copied key and its window. */
struct fi_key {
	uint64_t pfx;
	uint8_t *k;
	uint32_t len;
};

struct fi_node;
struct fdb_index {
	struct fi_node *root;
	int height;
	uint64_t count;
	/* The prefix shared by every non-empty key inserted (skip bytes; it
	 * only shrinks, and fi_rewindow recomputes the windows when it does). */
	uint32_t skip;
	int have_common;
	uint8_t common[FI_SKIP_MAX];
};

/* A stored key's window. */
static inline uint64_t fi_window(const struct fdb_index *x, const uint8_t *k, uint32_t len)
{
	return len ? fi_window_at(k, len, x->skip) : 0;
}

/* A search key's window. */
static uint64_t fi_search_window(const struct fdb_index *x, const uint8_t *k, uint32_t len)
{
	if (x->skip) {
		int c = memcmp(k, x->common, len < x->skip ? len : x->skip);
		if (c < 0 || (c == 0 && len < x->skip))
			return 0;
		if (c > 0)
			return UINT64_MAX;
	}
	return fi_window_at(k, len, x->skip);
}

struct fi_node {
	int leaf;
	int n;
	union {
		struct {
			struct fdb_ival *iv[FI_LEAF_CAP];
			uint64_t off[FI_LEAF_CAP];
			uint64_t pfx[FI_LEAF_CAP]; /* the window of each interval's key */
		} l;
		struct {
			struct fi_node *child[FI_CAP];
			int64_t shift[FI_CAP];
			struct fi_key pk[FI_CAP]; /* pk[0] unused */
		} i;
	};
};

_Static_assert(FI_LEAF_CAP * (sizeof(void *) + 2 * sizeof(uint64_t)) <=
		   FI_CAP * (sizeof(void *) + sizeof(int64_t) + sizeof(struct fi_key)),
	       "a leaf takes no more room than an internal node");

static struct fi_node *fi_new(int leaf)
{
	struct fi_node *n = calloc(1, sizeof(*n));
	if (n)
		n->leaf = leaf;
	return n;
}

struct fdb_index *fdb_index_new(void)
{
	struct fdb_index *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->root = fi_new(1);
	if (!x->root) {
		free(x);
		return NULL;
	}
	x->height = 1;
	return x;
}

static void fi_ival_free(struct fdb_ival *iv)
{
	free(iv->key);
	free(iv);
}

static void fi_free(struct fi_node *n)
{
	if (n->leaf) {
		for (int j = 0; j < n->n; j++)
			fi_ival_free(n->l.iv[j]);
	} else {
		for (int k = 0; k < n->n; k++) {
			fi_free(n->i.child[k]);
			free(n->i.pk[k].k);
		}
	}
	free(n);
}

void fdb_index_free(struct fdb_index *x)
{
	if (!x)
		return;
	fi_free(x->root);
	free(x);
}

uint64_t fdb_index_count(const struct fdb_index *x)
{
	return x->count;
}

/* Last child whose pivot is <= key (child 0 has no pivot). */
static int fi_route(const struct fi_node *n, uint64_t kp, const void *key, uint32_t klen)
{
	int lo = 1, hi = n->n;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		const struct fi_key *pk = &n->i.pk[mid];
		if (fi_cmp(pk->pfx, pk->k, pk->len, kp, key, klen) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* How a descent picks the child at each level. */
enum { FI_FIRST, FI_LAST, FI_ROUTE };

/* Walks from n (at depth d, with base offset base) down to a leaf, filling
 * the path; the leaf position is set for FI_FIRST / FI_LAST. */
static void fi_descend(struct fdb_ipath *p, struct fi_node *n, int64_t base, int d, int how,
		       uint64_t kp, const void *key, uint32_t klen)
{
	while (!n->leaf) {
		int k = how == FI_ROUTE	 ? fi_route(n, kp, key, klen)
			: how == FI_LAST ? n->n - 1
					 : 0;
		p->node[d] = n;
		p->idx[d] = k;
		p->base[d] = base;
		d++;
		base += n->i.shift[k];
		n = n->i.child[k];
	}
	p->depth = d;
	p->leaf = n;
	p->leaf_base = base;
	p->j = how == FI_LAST ? n->n - 1 : 0;
}

static void fi_descend_edge(struct fdb_ipath *p, struct fi_node *n, int64_t base, int d, int last)
{
	fi_descend(p, n, base, d, last ? FI_LAST : FI_FIRST, 0, NULL, 0);
}

static struct fdb_ival *fi_cur(const struct fdb_ipath *p)
{
	const struct fi_node *l = p->leaf;
	return p->j >= 0 && p->j < l->n ? l->l.iv[p->j] : NULL;
}

struct fdb_ival *fdb_index_find(const struct fdb_index *x, const void *key, uint32_t klen,
				struct fdb_ipath *p)
{
	uint64_t kp = fi_search_window(x, key, klen);
	fi_descend(p, x->root, 0, 0, FI_ROUTE, kp, key, klen);
	const struct fi_node *n = p->leaf;
	int lo = 0, hi = n->n;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		if (n->l.pfx[mid] != kp
			? n->l.pfx[mid] < kp
			: fdb_keycmp(n->l.iv[mid]->key, n->l.iv[mid]->klen, key, klen) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0) {
		p->j = lo - 1;
		return fi_cur(p);
	}
	/* Every interval here is above key (this leaf's first interval was
	 * removed after its pivot was set): the one for key is the last of
	 * the leaves before. */
	p->j = 0;
	struct fdb_ipath q = *p;
	struct fdb_ival *prev = fdb_index_prev(&q);
	if (prev) {
		*p = q;
		return prev;
	}
	return fi_cur(p);
}

struct fdb_ival *fdb_index_first(const struct fdb_index *x, struct fdb_ipath *p)
{
	fi_descend_edge(p, x->root, 0, 0, 0);
	return fi_cur(p);
}

struct fdb_ival *fdb_index_last(const struct fdb_index *x, struct fdb_ipath *p)
{
	fi_descend_edge(p, x->root, 0, 0, 1);
	return fi_cur(p);
}

const struct fdb_ival *fdb_index_peek(const struct fdb_ipath *p, int dist)
{
	const struct fi_node *l = p->leaf;
	int j = p->j + dist;
	return j >= 0 && j < l->n ? l->l.iv[j] : NULL;
}

struct fdb_ival *fdb_index_next(struct fdb_ipath *p)
{
	struct fi_node *l = p->leaf;
	if (p->j + 1 < l->n) {
		p->j++;
		return l->l.iv[p->j];
	}
	int d = p->depth - 1;
	while (d >= 0 && p->idx[d] + 1 >= ((struct fi_node *)p->node[d])->n)
		d--;
	if (d < 0)
		return NULL;
	struct fi_node *n = p->node[d];
	int k = ++p->idx[d];
	fi_descend_edge(p, n->i.child[k], p->base[d] + n->i.shift[k], d + 1, 0);
	return fi_cur(p);
}

struct fdb_ival *fdb_index_prev(struct fdb_ipath *p)
{
	if (p->j > 0) {
		p->j--;
		return ((struct fi_node *)p->leaf)->l.iv[p->j];
	}
	int d = p->depth - 1;
	while (d >= 0 && p->idx[d] == 0)
		d--;
	if (d < 0)
		return NULL;
	struct fi_node *n = p->node[d];
	int k = --p->idx[d];
	fi_descend_edge(p, n->i.child[k], p->base[d] + n->i.shift[k], d + 1, 1);
	return fi_cur(p);
}

uint64_t fdb_index_offset(const struct fdb_ipath *p)
{
	const struct fi_node *l = p->leaf;
	return (uint64_t)(p->leaf_base + (int64_t)l->l.off[p->j]);
}

void fdb_index_rekey(struct fdb_index *x, struct fdb_ipath *p)
{
	struct fi_node *l = p->leaf;
	const struct fdb_ival *iv = l->l.iv[p->j];
	l->l.pfx[p->j] = fi_window(x, iv->key, iv->klen);
}

static void fi_rewindow_node(const struct fdb_index *x, struct fi_node *n)
{
	if (n->leaf) {
		for (int j = 0; j < n->n; j++)
			n->l.pfx[j] = fi_window(x, n->l.iv[j]->key, n->l.iv[j]->klen);
		return;
	}
	for (int k = 0; k < n->n; k++) {
		if (k)
			n->i.pk[k].pfx = fi_window(x, n->i.pk[k].k, n->i.pk[k].len);
		fi_rewindow_node(x, n->i.child[k]);
	}
}

/* Before a key enters the index: shrinks the common prefix to what the
 * key shares with it (recomputing every window, which happens at most
 * FI_SKIP_MAX times). */
static void fi_learn_key(struct fdb_index *x, const uint8_t *k, uint32_t len)
{
	if (!len)
		return;
	if (!x->have_common) {
		x->have_common = 1;
		x->skip = len < FI_SKIP_MAX ? len : FI_SKIP_MAX;
		memcpy(x->common, k, x->skip);
		if (x->count)
			fi_rewindow_node(x, x->root);
		return;
	}
	uint32_t l = 0;
	while (l < x->skip && l < len && k[l] == x->common[l])
		l++;
	if (l < x->skip) {
		x->skip = l;
		fi_rewindow_node(x, x->root);
	}
}

void fdb_index_shift(struct fdb_ipath *p, int64_t delta)
{
	struct fi_node *l = p->leaf;
	for (int j = p->j + 1; j < l->n; j++)
		l->l.off[j] = (uint64_t)((int64_t)l->l.off[j] + delta);
	for (int d = p->depth - 1; d >= 0; d--) {
		struct fi_node *n = p->node[d];
		for (int k = p->idx[d] + 1; k < n->n; k++)
			n->i.shift[k] += delta;
	}
}

static int fi_copy_key(const struct fdb_index *x, const struct fdb_ival *iv, struct fi_key *pk)
{
	pk->k = malloc(iv->klen ? iv->klen : 1);
	if (!pk->k)
		return -ENOMEM;
	memcpy(pk->k, iv->key, iv->klen);
	pk->len = iv->klen;
	pk->pfx = fi_window(x, iv->key, iv->klen);
	return 0;
}

/* Inserts child c (with its shift and pivot) after index k of the node at
 * depth d of the path, splitting upward as needed. */
static int fi_insert_child(struct fdb_index *x, struct fdb_ipath *p, int d, struct fi_node *c,
			   int64_t shift, struct fi_key pk)
{
	if (d < 0) {
		struct fi_node *r = fi_new(0);
		if (!r)
			return -ENOMEM;
		r->n = 2;
		r->i.child[0] = x->root;
		r->i.shift[0] = 0;
		r->i.child[1] = c;
		r->i.shift[1] = shift;
		r->i.pk[1] = pk;
		x->root = r;
		x->height++;
		return 0;
	}
	struct fi_node *n = p->node[d];
	int at = p->idx[d] + 1;
	if (n->n == FI_CAP) {
		struct fi_node *r = fi_new(0);
		if (!r)
			return -ENOMEM;
		int h = FI_CAP / 2;
		r->n = FI_CAP - h;
		memcpy(r->i.child, n->i.child + h, r->n * sizeof(void *));
		memcpy(r->i.shift, n->i.shift + h, r->n * sizeof(int64_t));
		memcpy(r->i.pk, n->i.pk + h, r->n * sizeof(struct fi_key));
		struct fi_key up = r->i.pk[0];
		r->i.pk[0] = (struct fi_key){0};
		n->n = h;
		/* Both halves keep the base of the split node: the new node's
		 * pointer shift is the old node's. */
		int64_t s = d > 0 ? ((struct fi_node *)p->node[d - 1])->i.shift[p->idx[d - 1]] : 0;
		struct fi_node *target = n;
		if (at > h) {
			target = r;
			at -= h;
		}
		memmove(target->i.child + at + 1, target->i.child + at,
			(target->n - at) * sizeof(void *));
		memmove(target->i.shift + at + 1, target->i.shift + at,
			(target->n - at) * sizeof(int64_t));
		memmove(target->i.pk + at + 1, target->i.pk + at,
			(target->n - at) * sizeof(struct fi_key));
		target->i.child[at] = c;
		target->i.shift[at] = shift;
		target->i.pk[at] = pk;
		target->n++;
		/* c never lands first in r (at == h appends to n), so r's
		 * first pivot is the separator that goes up. */
		return fi_insert_child(x, p, d - 1, r, s, up);
	}
	memmove(n->i.child + at + 1, n->i.child + at, (n->n - at) * sizeof(void *));
	memmove(n->i.shift + at + 1, n->i.shift + at, (n->n - at) * sizeof(int64_t));
	memmove(n->i.pk + at + 1, n->i.pk + at, (n->n - at) * sizeof(struct fi_key));
	n->i.child[at] = c;
	n->i.shift[at] = shift;
	n->i.pk[at] = pk;
	n->n++;
	return 0;
}

static int fi_insert_after(struct fdb_index *x, struct fdb_ipath *p, struct fdb_ival *iv,
			   uint64_t off, int append);

int fdb_index_insert_after(struct fdb_index *x, struct fdb_ipath *p, struct fdb_ival *iv,
			   uint64_t off)
{
	return fi_insert_after(x, p, iv, off, 0);
}

/* `append`: iv goes after the last interval and more will follow (open):
 * a full leaf then keeps its intervals, so that the index built at open
 * has full leaves instead of half-full ones. */
static int fi_insert_after(struct fdb_index *x, struct fdb_ipath *p, struct fdb_ival *iv,
			   uint64_t off, int append)
{
	fi_learn_key(x, iv->key, iv->klen);
	struct fi_node *l = x->count ? p->leaf : x->root;
	int64_t base = x->count ? p->leaf_base : 0;
	int at = x->count ? p->j + 1 : 0;
	if (l->n < FI_LEAF_CAP) {
		memmove(l->l.iv + at + 1, l->l.iv + at, (l->n - at) * sizeof(void *));
		memmove(l->l.off + at + 1, l->l.off + at, (l->n - at) * sizeof(uint64_t));
		memmove(l->l.pfx + at + 1, l->l.pfx + at, (l->n - at) * sizeof(uint64_t));
		l->l.iv[at] = iv;
		l->l.pfx[at] = fi_window(x, iv->key, iv->klen);
		l->l.off[at] = (uint64_t)((int64_t)off - base);
		l->n++;
		x->count++;
		return 0;
	}
	int h = append && at == FI_LEAF_CAP ? FI_LEAF_CAP - 1 : FI_LEAF_CAP / 2;
	struct fi_key pk;
	if (fi_copy_key(x, l->l.iv[h], &pk))
		return -ENOMEM;
	struct fi_node *r = fi_new(1);
	if (!r) {
		free(pk.k);
		return -ENOMEM;
	}
	r->n = FI_LEAF_CAP - h;
	memcpy(r->l.iv, l->l.iv + h, r->n * sizeof(void *));
	memcpy(r->l.off, l->l.off + h, r->n * sizeof(uint64_t));
	memcpy(r->l.pfx, l->l.pfx + h, r->n * sizeof(uint64_t));
	l->n = h;
	struct fi_node *target = l;
	if (at > h) {
		target = r;
		at -= h;
	}
	memmove(target->l.iv + at + 1, target->l.iv + at, (target->n - at) * sizeof(void *));
	memmove(target->l.off + at + 1, target->l.off + at, (target->n - at) * sizeof(uint64_t));
	memmove(target->l.pfx + at + 1, target->l.pfx + at, (target->n - at) * sizeof(uint64_t));
	target->l.iv[at] = iv;
	target->l.pfx[at] = fi_window(x, iv->key, iv->klen);
	target->l.off[at] = (uint64_t)((int64_t)off - base);
	target->n++;
	x->count++;
	int64_t s = p->depth > 0
			? ((struct fi_node *)p->node[p->depth - 1])->i.shift[p->idx[p->depth - 1]]
			: 0;
	return fi_insert_child(x, p, p->depth - 1, r, s, pk);
}

int fdb_index_append(struct fdb_index *x, struct fdb_ival *iv, uint64_t off)
{
	struct fdb_ipath p;
	if (x->count)
		fdb_index_last(x, &p);
	return fi_insert_after(x, &p, iv, off, 1);
}

/* Sets the pivot above each subtree on key's search path to that
 * subtree's first interval key.  Removing a subtree's first interval
 * leaves the pivot below the new first key; keys in between would then be
 * routed to a subtree none of whose intervals can hold them. */
static void fi_refresh_pivots(struct fdb_index *x, const uint8_t *key, uint32_t klen)
{
	struct fi_node *n = x->root;
	uint64_t kp = fi_search_window(x, key, klen);
	while (!n->leaf) {
		int k = fi_route(n, kp, key, klen);
		if (k > 0) {
			const struct fi_node *c = n->i.child[k];
			while (!c->leaf)
				c = c->i.child[0];
			const struct fdb_ival *f = c->n ? c->l.iv[0] : NULL;
			if (f && fdb_keycmp(n->i.pk[k].k, n->i.pk[k].len, f->key, f->klen) != 0) {
				struct fi_key pk;
				if (fi_copy_key(x, f, &pk) == 0) {
					free(n->i.pk[k].k);
					n->i.pk[k] = pk;
				}
			}
		}
		n = n->i.child[k];
	}
}

void fdb_index_remove(struct fdb_index *x, struct fdb_ipath *p)
{
	fdb_index_remove_n(x, p, 1);
}

uint32_t fdb_index_remove_n(struct fdb_index *x, struct fdb_ipath *p, uint32_t n)
{
	struct fi_node *l = p->leaf;
	int j = p->j;
	int k = l->n - j < (int64_t)n ? l->n - j : (int)n;
	const struct fdb_ival *gone = l->l.iv[j]; /* freed by the caller, after */
	memmove(l->l.iv + j, l->l.iv + j + k, (l->n - j - k) * sizeof(void *));
	memmove(l->l.off + j, l->l.off + j + k, (l->n - j - k) * sizeof(uint64_t));
	memmove(l->l.pfx + j, l->l.pfx + j + k, (l->n - j - k) * sizeof(uint64_t));
	l->n -= k;
	x->count -= (uint64_t)k;
	struct fi_node *c = l;
	for (int d = p->depth - 1; d >= 0 && c->n == 0; d--) {
		struct fi_node *nd = p->node[d];
		int ci = p->idx[d];
		free(c);
		free(nd->i.pk[ci].k);
		if (ci == 0 && nd->n > 1) {
			free(nd->i.pk[1].k);
			nd->i.pk[1] = (struct fi_key){0};
		}
		memmove(nd->i.child + ci, nd->i.child + ci + 1, (nd->n - ci - 1) * sizeof(void *));
		memmove(nd->i.shift + ci, nd->i.shift + ci + 1, (nd->n - ci - 1) * sizeof(int64_t));
		memmove(nd->i.pk + ci, nd->i.pk + ci + 1, (nd->n - ci - 1) * sizeof(struct fi_key));
		nd->n--;
		nd->i.pk[0] = (struct fi_key){0};
		c = nd;
	}
	/* A root with one child gives way to it, passing its shift down. */
	while (!x->root->leaf && x->root->n == 1) {
		struct fi_node *r = x->root, *ch = r->i.child[0];
		int64_t s = r->i.shift[0];
		if (ch->leaf) {
			for (int q = 0; q < ch->n; q++)
				ch->l.off[q] = (uint64_t)((int64_t)ch->l.off[q] + s);
		} else {
			for (int q = 0; q < ch->n; q++)
				ch->i.shift[q] += s;
		}
		free(r);
		x->root = ch;
		x->height--;
	}
	if (!x->root->leaf && x->root->n == 0) {
		x->root->leaf = 1; /* the index emptied: the root becomes a leaf */
		x->height = 1;
	}
	if (j == 0)
		fi_refresh_pivots(x, gone->key, gone->klen);
	return (uint32_t)k;
}

static int fi_check(const struct fdb_index *x, const struct fi_node *n, const uint8_t *lo,
		    uint32_t lolen, int have_lo, const uint8_t *hi, uint32_t hilen, int have_hi,
		    int depth, int height, const struct fdb_ival **prev)
{
	if (!n || (n->n == 0 && depth > 0) || n->n > (n->leaf ? FI_LEAF_CAP : FI_CAP))
		return FLEX_ECORRUPT;
	if (n->leaf) {
		if (depth != height - 1)
			return FLEX_ECORRUPT;
		for (int j = 0; j < n->n; j++) {
			const struct fdb_ival *iv = n->l.iv[j];
			if (n->l.pfx[j] != fi_window(x, iv->key, iv->klen) ||
			    (iv->klen &&
			     (iv->klen < x->skip || memcmp(iv->key, x->common, x->skip))))
				return FLEX_ECORRUPT;
			if (have_lo && fdb_keycmp(iv->key, iv->klen, lo, lolen) < 0)
				return FLEX_ECORRUPT;
			if (have_hi && fdb_keycmp(iv->key, iv->klen, hi, hilen) >= 0)
				return FLEX_ECORRUPT;
			if (*prev &&
			    fdb_keycmp((*prev)->key, (*prev)->klen, iv->key, iv->klen) >= 0)
				return FLEX_ECORRUPT;
			*prev = iv;
		}
		return 0;
	}
	for (int k = 0; k < n->n; k++) {
		if (k && n->i.pk[k].pfx != fi_window(x, n->i.pk[k].k, n->i.pk[k].len))
			return FLEX_ECORRUPT;
		const uint8_t *clo = k ? n->i.pk[k].k : lo;
		uint32_t clolen = k ? n->i.pk[k].len : lolen;
		int chave_lo = k ? 1 : have_lo;
		const uint8_t *chi = k + 1 < n->n ? n->i.pk[k + 1].k : hi;
		uint32_t chilen = k + 1 < n->n ? n->i.pk[k + 1].len : hilen;
		int chave_hi = k + 1 < n->n ? 1 : have_hi;
		int rc = fi_check(x, n->i.child[k], clo, clolen, chave_lo, chi, chilen, chave_hi,
				  depth + 1, height, prev);
		if (rc)
			return rc;
	}
	return 0;
}

int fdb_index_check(const struct fdb_index *x)
{
	if (!x->root)
		return FLEX_ECORRUPT;
	const struct fdb_ival *prev = NULL;
	return fi_check(x, x->root, NULL, 0, 0, NULL, 0, 0, 0, x->height, &prev);
}
