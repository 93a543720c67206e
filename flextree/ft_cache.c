/*
 * ft_cache.c - FlexTree's leaf cache: a persistent tree's leaves are paged
 * through a CLOCK cache bounded by cache_size.  Every path that reaches a
 * leaf first makes it resident (ft_leaf_get), readers pin it while they use
 * it, and only clean unpinned leaves are dropped, between operations.
 * Evicted bodies are pooled for the next loads.  The locking rules are in
 * flextree_int.h.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_hg.h"
#include "flextree_int.h"

/* The ring holds the clean resident leaves of a paged tree
 * (flextree_int.h); new ones go just behind the hand, so they are the last
 * the hand reaches.  Callers hold cache_lock. */
static void ft_ring_add(struct flextree *t, struct ft_leaf *l)
{
	assert(!l->next && !l->h.dirty);
	if (!t->hand) {
		l->prev = l->next = l;
		t->hand = l;
	} else {
		l->next = t->hand;
		l->prev = t->hand->prev;
		l->prev->next = l;
		t->hand->prev = l;
	}
	t->nring++;
}

static void ft_ring_del(struct flextree *t, struct ft_leaf *l)
{
	if (!l->next)
		return; /* dirty: not in the ring */
	if (l->next == l) {
		t->hand = NULL;
	} else {
		if (t->hand == l)
			t->hand = l->next;
		l->prev->next = l->next;
		l->next->prev = l->prev;
	}
	l->prev = l->next = NULL;
	t->nring--;
}

static void ft_resident_add(struct flextree *t, int64_t d)
{
	__atomic_store_n(&t->resident, t->resident + (uint64_t)d, __ATOMIC_RELAXED);
}

/* cache_lock held: a body for a leaf to load, from the pool or NULL. */
struct ft_leaf_body *ft_body_take_locked(struct flextree *t)
{
	struct ft_leaf_body *b = t->body_pool;
	if (b) {
		/* A pooled body's first bytes hold the next one. */
		memcpy(&t->body_pool, (const void *)b, sizeof(t->body_pool));
		t->npool--;
	}
	return b;
}

/* cache_lock held: keeps the body of an evicted leaf for a later load. */
static void ft_body_give_locked(struct flextree *t, struct ft_leaf_body *b)
{
	if (t->npool >= FT_BODY_POOL) {
		free(b);
		return;
	}
	memcpy((void *)b, &t->body_pool, sizeof(t->body_pool));
	t->body_pool = b;
	t->npool++;
}

/* CLOCK: drops clean, unpinned bodies until the resident leaves fit the
 * budget, giving referenced ones a second chance.  The ring holds only
 * clean leaves, so a step either clears a reference bit, passes a pinned
 * leaf or evicts; two turns of the hand at most, so a ring of pinned
 * leaves cannot make it spin.
 * Nothing is evicted from a failed handle: a commit that failed half-way
 * may have marked leaves clean whose images never reached the file. */
static void ft_trim_locked(struct flextree *t)
{
	if (t->resident <= t->cache_leaves || t->failed)
		return;
	uint64_t steps = 2 * t->nring;
	while (t->resident > t->cache_leaves && steps-- && t->hand) {
		struct ft_leaf *l = t->hand;
		t->hand = l->next;
		assert(!l->h.dirty);
		if (__atomic_load_n(&l->pins, __ATOMIC_RELAXED))
			continue;
		if (__atomic_load_n(&l->ref, __ATOMIC_RELAXED)) {
			__atomic_store_n(&l->ref, 0, __ATOMIC_RELAXED);
			continue;
		}
		/* Claimed only while no reader holds it. */
		uint32_t none = 0;
		if (!__atomic_compare_exchange_n(&l->pins, &none, FT_PIN_EVICT, 0, __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED))
			continue;
		FLEX_HB_AFTER(&l->pins); /* the last reader's unpin */
		ft_ring_del(t, l);
		ft_resident_add(t, -1);
		ft_body_give_locked(t, l->b);
		__atomic_store_n(&l->b, NULL, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&l->pins, FT_PIN_EVICT, __ATOMIC_RELEASE);
		t->evictions++;
	}
}

void ft_cache_trim(struct flextree *t)
{
	if (!t->paged)
		return;
	pthread_mutex_lock(&t->cache_lock);
	ft_trim_locked(t);
	pthread_mutex_unlock(&t->cache_lock);
}

/* Counts a leaf made resident outside ft_leaf_get (a new leaf, a new
 * file's root): dirty, so it joins the ring only when a commit writes it
 * (ft_cache_clean_locked). */
void ft_cache_add(struct flextree *t, struct ft_leaf *l)
{
	assert(l->h.dirty);
	(void)l;
	pthread_mutex_lock(&t->cache_lock);
	ft_resident_add(t, 1);
	pthread_mutex_unlock(&t->cache_lock);
}

/* Forgets a resident leaf leaving the tree. */
void ft_cache_del(struct flextree *t, struct ft_leaf *l)
{
	pthread_mutex_lock(&t->cache_lock);
	ft_ring_del(t, l);
	ft_resident_add(t, -1);
	pthread_mutex_unlock(&t->cache_lock);
}

/* A clean resident leaf is being changed: out of the ring until a commit
 * writes it. */
void ft_cache_dirty(struct flextree *t, struct ft_leaf *l)
{
	pthread_mutex_lock(&t->cache_lock);
	ft_ring_del(t, l);
	pthread_mutex_unlock(&t->cache_lock);
}

/* cache_lock held: a leaf a commit wrote is clean again, and evictable. */
void ft_cache_clean_locked(struct flextree *t, struct ft_leaf *l)
{
	ft_ring_add(t, l);
}

/* The span of child i of path node lv (lv < 0: the root), from the pivots
 * of the nearest ancestors that bound it on each side. */
static void ft_span_of(const struct flextree *t, const struct ft_path *p, int lv, int i,
		       struct ft_span *sp)
{
	sp->lo = 0;
	sp->hi = t->size;
	if (lv < 0) {
		sp->base = 0;
		return;
	}
	sp->base = p->base[lv] + p->node[lv]->shift[i];
	int d = lv, k = i;
	while (d >= 0 && k == 0)
		if (--d >= 0)
			k = p->idx[d];
	if (d >= 0)
		sp->lo = (uint64_t)(p->base[d] + p->node[d]->pivot[k - 1]);
	d = lv;
	k = i;
	while (d >= 0 && k == p->node[d]->h.count)
		if (--d >= 0)
			k = p->idx[d];
	if (d >= 0)
		sp->hi = (uint64_t)(p->base[d] + p->node[d]->pivot[k]);
}

/* Makes leaf l resident, reading and verifying its committed image when it
 * was evicted, marks it referenced and, for a reader, pins it.  The span
 * it must cover is sp, or else that of child i of path node lv (computed
 * only on a miss).  Returns 0, FLEX_ECORRUPT, -ENOMEM or -errno (the leaf
 * stays evicted). */
int ft_leaf_get(const struct flextree *ct, struct ft_leaf *l, const struct ft_span *sp,
		       const struct ft_path *p, int lv, int i, int pin)
{
	struct flextree *t = (struct flextree *)ct; /* the cache is not the tree */
	if (!t->paged)
		return 0;
	/* A resident leaf is pinned without the lock, unless eviction is
	 * taking it (flextree_int.h). */
	if (pin) {
		uint32_t was = __atomic_fetch_add(&l->pins, 1, __ATOMIC_ACQUIRE);
		if (!(was & FT_PIN_EVICT) && __atomic_load_n(&l->b, __ATOMIC_ACQUIRE)) {
			FLEX_HB_AFTER(&l->b);
			if (!__atomic_load_n(&l->ref, __ATOMIC_RELAXED))
				__atomic_store_n(&l->ref, 1, __ATOMIC_RELAXED);
			return 0;
		}
		__atomic_fetch_sub(&l->pins, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_lock(&t->cache_lock);
	if (l->b) {
		__atomic_store_n(&l->ref, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&l->pins, (uint32_t)pin, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&t->cache_lock);
		return 0;
	}
	struct ft_leaf_src src = {
	    .slot = l->h.slot, .nslots = t->nslots, .csum = l->h.csum, .version = t->version};
	struct ft_leaf_body *b = ft_body_take_locked(t);
	pthread_mutex_unlock(&t->cache_lock);
	struct ft_span own;
	if (!sp) {
		ft_span_of(t, p, lv, i, &own);
		sp = &own;
	}
	if (!b && !(b = malloc(sizeof(*b))))
		return -ENOMEM;
	uint16_t count;
	int rc = ft_file_read_leaf(t, &src, sp, b, &count);
	pthread_mutex_lock(&t->cache_lock);
	if (rc || l->b) {
		/* Failed, or another reader loaded it meanwhile. */
		ft_body_give_locked(t, b);
		if (rc) {
			pthread_mutex_unlock(&t->cache_lock);
			return rc;
		}
	} else {
		l->h.count = count;
		FLEX_HB_BEFORE(&l->b);
		__atomic_store_n(&l->b, b, __ATOMIC_RELEASE);
		ft_ring_add(t, l);
		ft_resident_add(t, 1);
		t->leaf_reads++;
	}
	__atomic_store_n(&l->ref, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&l->pins, (uint32_t)pin, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&t->cache_lock);
	return 0;
}

/* The paged half of ft_leaf_put (flextree_int.h). */
void ft_leaf_unpin(const struct flextree *ct, struct ft_leaf *l)
{
	struct flextree *t = (struct flextree *)ct;
	FLEX_HB_BEFORE(&l->pins);
	uint32_t was = __atomic_fetch_sub(&l->pins, 1, __ATOMIC_RELEASE);
	assert((was & ~FT_PIN_EVICT) > 0);
	(void)was;
	/* Loads by readers may have grown the cache past its bound. */
	if (__atomic_load_n(&t->resident, __ATOMIC_RELAXED) > t->cache_leaves) {
		pthread_mutex_lock(&t->cache_lock);
		ft_trim_locked(t);
		pthread_mutex_unlock(&t->cache_lock);
	}
}
