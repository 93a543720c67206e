/*
 * fdb_memtable.c - the memtable: a skip list that one writer changes while
 * any number of readers search and iterate it (paper section 5.3).
 *
 * As in LevelDB's skiplist.h: a node is fully built before it is
 * published with a release store into its predecessors' next pointers
 * (bottom level first), and readers follow pointers with acquire loads,
 * so a reader sees either the old list or the list with the complete new
 * node.  A put to an existing key publishes a new immutable value and
 * swaps the node's value pointer the same way; old values stay in the
 * arena, which is freed only with the whole memtable, so a reader holding
 * a value pointer is never left dangling.  All memory comes from an arena
 * whose size is the memtable's accounted size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fdb_int.h"

#define MT_MAX_HEIGHT FDB_MT_MAX_HEIGHT
#define ARENA_BLOCK (256u << 10)

struct mt_node {
	_Atomic(struct fdb_val *) val;
	uint32_t klen;
	uint32_t height;
	_Atomic(struct mt_node *) next[]; /* height pointers, then the key */
};

/* Arena blocks are mapped from the kernel and unmapped when the memtable
 * is freed, not taken from malloc: a memtable's memory is the largest
 * that comes and goes, and an allocator that keeps freed memory for
 * later (jemalloc keeps it for seconds) would hold a third memtable's
 * worth beyond the two the options allow. */
struct arena_block {
	struct arena_block *prev;
	size_t used, cap;
	size_t maplen;
	_Alignas(16) uint8_t data[];
};

static struct arena_block *block_new(size_t cap)
{
	size_t len = (sizeof(struct arena_block) + cap + 4095) & ~(size_t)4095;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	struct arena_block *b = p;
	b->maplen = len;
	b->cap = len - sizeof(*b);
	b->used = 0;
	b->prev = NULL;
	return b;
}

static void block_free(struct arena_block *b)
{
	munmap(b, b->maplen);
}

struct fdb_mt {
	struct mt_node *head;
	/* Two chains of blocks: skip-list nodes, and values (and range
	 * deletes).  A search touches only nodes, which then lie packed
	 * together (a 27-byte key's node takes 64 bytes, with its value
	 * beside it 224) in fewer lines and pages. */
	struct arena_block *nodes;
	/* Range deletes, newest first: a list a reader walks whole, since a
	 * key may lie under any of them.  Range deletes are few beside
	 * pairs; a memtable without any costs a reader one NULL check. */
	_Atomic(struct fdb_mt_range *) ranges;
	struct arena_block *blk;
	_Atomic size_t bytes; /* allocated from the arena; read by stats */
	_Atomic uint64_t count;
	_Atomic int height;
	uint64_t rng;
};

static void *arena_take(struct fdb_mt *m, struct arena_block **chain, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct arena_block *b = *chain;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK - sizeof(*b);
		struct arena_block *nb = block_new(cap);
		if (!nb)
			return NULL;
		if (n > ARENA_BLOCK / 4 && b) {
			/* A big allocation gets its own block, kept behind
			 * the current one so the current one stays in use. */
			nb->prev = b->prev;
			b->prev = nb;
			nb->used = n;
			atomic_fetch_add_explicit(&m->bytes, n, memory_order_relaxed);
			return nb->data;
		}
		nb->prev = b;
		*chain = b = nb;
	}
	/* Bytes handed out, not blocks: a memtable smaller than one block
	 * must still fill gradually. */
	void *p = b->data + b->used;
	b->used += n;
	atomic_fetch_add_explicit(&m->bytes, n, memory_order_relaxed);
	return p;
}

static void *arena_alloc(struct fdb_mt *m, size_t n)
{
	return arena_take(m, &m->blk, n);
}

static inline const uint8_t *node_key(const struct mt_node *n)
{
	return (const uint8_t *)&n->next[n->height];
}

struct fdb_mt *fdb_mt_new(void)
{
	struct fdb_mt *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->rng = 0x853c49e6748fea9bULL;
	m->head = arena_take(m, &m->nodes, sizeof(struct mt_node) + MT_MAX_HEIGHT * sizeof(void *));
	if (!m->head) {
		free(m);
		return NULL;
	}
	m->head->klen = 0;
	m->head->height = MT_MAX_HEIGHT;
	atomic_init(&m->head->val, NULL);
	for (int i = 0; i < MT_MAX_HEIGHT; i++)
		atomic_init(&m->head->next[i], NULL);
	atomic_init(&m->height, 1);
	atomic_init(&m->ranges, NULL);
	FLEX_ATOMIC_OBJ(&m->ranges, sizeof(m->ranges));
	FLEX_ATOMIC_OBJ(m->head->next, MT_MAX_HEIGHT * sizeof(m->head->next[0]));
	FLEX_ATOMIC_OBJ(&m->height, sizeof(m->height));
	FLEX_ATOMIC_OBJ(&m->bytes, sizeof(m->bytes));
	FLEX_ATOMIC_OBJ(&m->count, sizeof(m->count));
	return m;
}

void fdb_mt_free(struct fdb_mt *m)
{
	if (!m)
		return;
	for (int c = 0; c < 2; c++) {
		struct arena_block *b = c ? m->nodes : m->blk;
		while (b) {
			struct arena_block *p = b->prev;
			block_free(b);
			b = p;
		}
	}
	free(m);
}

size_t fdb_mt_bytes(const struct fdb_mt *m)
{
	return atomic_load_explicit(&((struct fdb_mt *)m)->bytes, memory_order_relaxed);
}

uint64_t fdb_mt_count(const struct fdb_mt *m)
{
	return atomic_load(&m->count);
}

static int random_height(struct fdb_mt *m)
{
	int h = 1;
	while (h < MT_MAX_HEIGHT) {
		m->rng ^= m->rng << 13;
		m->rng ^= m->rng >> 7;
		m->rng ^= m->rng << 17;
		if ((m->rng & 3) != 0) /* branching factor 4 */
			break;
		h++;
	}
	return h;
}

static inline struct mt_node *nxt(const struct mt_node *n, int level)
{
	struct mt_node *p =
	    atomic_load_explicit(&((struct mt_node *)n)->next[level], memory_order_acquire);
	FLEX_HB_AFTER(&n->next[level]);
	return p;
}

/* Starts fetching node n (its head and the start of its key). */
static inline void mt_prefetch(const struct mt_node *n)
{
	if (n) {
		__builtin_prefetch(n);
		__builtin_prefetch((const uint8_t *)n + 64);
	}
}

static inline int node_cmp(const struct mt_node *n, const void *key, uint32_t klen)
{
	return fdb_keycmp(node_key(n), n->klen, key, klen);
}

/* The first node >= key; fills prev[] with the last node < key per level. */
static struct mt_node *find_ge(const struct fdb_mt *m, const void *key, uint32_t klen,
			       struct mt_node **prev)
{
	struct mt_node *x = m->head;
	int level = atomic_load_explicit(&m->height, memory_order_relaxed) - 1;
	for (;;) {
		struct mt_node *n = nxt(x, level);
		/* Where the search goes if it goes down from x: fetched while
		 * n's key is compared, instead of after. */
		if (level > 0)
			mt_prefetch(nxt(x, level - 1));
		if (n && node_cmp(n, key, klen) < 0) {
			x = n;
			continue;
		}
		if (prev)
			prev[level] = x;
		if (level == 0)
			return n;
		level--;
	}
}

/* The last node < key (or <= key with le), or the head. */
static struct mt_node *find_lt(const struct fdb_mt *m, const void *key, uint32_t klen, int le)
{
	struct mt_node *x = m->head;
	int level = atomic_load_explicit(&m->height, memory_order_relaxed) - 1;
	for (;;) {
		struct mt_node *n = nxt(x, level);
		if (n && (klen == 0 || node_cmp(n, key, klen) < le)) {
			x = n;
			continue;
		}
		if (level == 0)
			return x;
		level--;
	}
}

static int mt_put(struct fdb_mt *m, struct fdb_mt_finger *f, const void *key, uint32_t klen,
		  const void *val, uint32_t vlen, int tomb, uint64_t seq);

int fdb_mt_put(struct fdb_mt *m, const void *key, uint32_t klen, const void *val,
	       uint32_t vlen, int tomb, uint64_t seq)
{
	return mt_put(m, NULL, key, klen, val, vlen, tomb, seq);
}

int fdb_mt_put_next(struct fdb_mt *m, struct fdb_mt_finger *f, const void *key, uint32_t klen,
		    const void *val, uint32_t vlen, int tomb, uint64_t seq)
{
	return mt_put(m, f, key, klen, val, vlen, tomb, seq);
}

/* find_ge from a finger: f->prev[level] is the last node before the last
 * key put, which is <= key, so each level's search may start there.
 * Until a search moves, the finger's node at the level below is at or
 * after where it stands; once it has moved it stands on a node at or
 * after the last key put, past every node of the finger below.  No key is
 * compared but those the search steps over and the one it stops at. */
static struct mt_node *find_ge_from(const struct fdb_mt *m, const struct fdb_mt_finger *f,
				    const void *key, uint32_t klen, struct mt_node **prev)
{
	struct mt_node *x = m->head;
	int moved = 0;
	for (int level = atomic_load_explicit(&m->height, memory_order_relaxed) - 1;; level--) {
		if (!moved && level < f->height)
			x = f->prev[level];
		struct mt_node *n;
		while ((n = nxt(x, level)) != NULL && node_cmp(n, key, klen) < 0) {
			x = n;
			moved = 1;
		}
		prev[level] = x;
		if (level == 0)
			return n;
	}
}

static void mt_finger_set(const struct fdb_mt *m, struct fdb_mt_finger *f, struct mt_node **prev)
{
	int h = atomic_load_explicit(&m->height, memory_order_relaxed);
	for (int i = 0; i < h; i++)
		f->prev[i] = prev[i];
	f->height = h;
}

static int mt_put(struct fdb_mt *m, struct fdb_mt_finger *f, const void *key, uint32_t klen,
		  const void *val, uint32_t vlen, int tomb, uint64_t seq)
{
	struct fdb_val *v = arena_alloc(m, sizeof(*v) + (tomb ? 0 : vlen));
	if (!v)
		return -ENOMEM;
	v->prev = NULL;
	v->seq = seq;
	v->vlen = tomb ? 0 : vlen;
	v->tomb = (uint8_t)(tomb != 0);
	if (!tomb && vlen)
		memcpy(v->data, val, vlen);

	struct mt_node *prev[MT_MAX_HEIGHT];
	struct mt_node *n = f && f->height ? find_ge_from(m, f, key, klen, prev)
					   : find_ge(m, key, klen, prev);
	if (n && node_cmp(n, key, klen) == 0) {
		v->prev = atomic_load_explicit(&n->val, memory_order_relaxed);
		FLEX_HB_BEFORE(&n->val);
		atomic_store_explicit(&n->val, v, memory_order_release);
		if (f)
			mt_finger_set(m, f, prev);
		return 0;
	}
	int h = random_height(m);
	int cur = atomic_load_explicit(&m->height, memory_order_relaxed);
	if (h > cur) {
		for (int i = cur; i < h; i++)
			prev[i] = m->head;
		/* Readers that see the new height before the node find
		 * NULL at the new levels from the head, which is fine. */
		atomic_store_explicit(&m->height, h, memory_order_relaxed);
	}
	n = arena_take(m, &m->nodes, sizeof(*n) + (size_t)h * sizeof(void *) + klen);
	if (!n)
		return -ENOMEM;
	n->klen = klen;
	n->height = (uint32_t)h;
	memcpy((uint8_t *)&n->next[h], key, klen);
	atomic_init(&n->val, v);
	for (int i = 0; i < h; i++)
		atomic_init(&n->next[i], nxt(prev[i], i));
	FLEX_ATOMIC_OBJ(&n->val, sizeof(n->val));
	FLEX_ATOMIC_OBJ(n->next, (size_t)h * sizeof(n->next[0]));
	for (int i = 0; i < h; i++) {
		FLEX_HB_BEFORE(&prev[i]->next[i]);
		atomic_store_explicit(&prev[i]->next[i], n, memory_order_release);
	}
	atomic_fetch_add(&m->count, 1);
	if (f)
		mt_finger_set(m, f, prev);
	return 0;
}

static const struct fdb_val *visible(const struct mt_node *n, uint64_t max_seq)
{
	const struct fdb_val *v =
		atomic_load_explicit(&((struct mt_node *)n)->val, memory_order_acquire);
	FLEX_HB_AFTER(&n->val);
	while (v && v->seq > max_seq)
		v = v->prev;
	return v;
}

/* What a read of a key under a newer range delete of the same memtable
 * gets: a tombstone (tomb 2: the committer knows the range delete
 * removes the key from the store already). */
static const struct fdb_val range_tomb = {.tomb = 2};

const struct fdb_mt_range *fdb_mt_ranges(const struct fdb_mt *m)
{
	struct fdb_mt_range *r =
	    atomic_load_explicit(&((struct fdb_mt *)m)->ranges, memory_order_acquire);
	FLEX_HB_AFTER(&m->ranges);
	return r;
}

const struct fdb_mt_range *fdb_mt_range_find(const struct fdb_mt *m, const void *key,
					     uint32_t klen, uint64_t max_seq)
{
	const struct fdb_mt_range *best = NULL;
	for (const struct fdb_mt_range *r = fdb_mt_ranges(m); r; r = r->next) {
		if (r->seq > max_seq || (best && r->seq <= best->seq))
			continue;
		if (fdb_keycmp(r->start, r->slen, key, klen) <= 0 &&
		    fdb_keycmp(key, klen, r->end, r->elen) < 0)
			best = r;
	}
	return best;
}

/* v, or the range tombstone when a range delete of m newer than v (or
 * over a key without a version) covers the key.  A version with the
 * range delete's own sequence number was written after it in the same
 * batch (db_write drops the batch's puts the range delete follows). */
static const struct fdb_val *range_cover(const struct fdb_mt *m, const struct fdb_val *v,
					 const void *key, uint32_t klen, uint64_t max_seq)
{
	if (!atomic_load_explicit(&((struct fdb_mt *)m)->ranges, memory_order_relaxed))
		return v;
	const struct fdb_mt_range *r = fdb_mt_range_find(m, key, klen, max_seq);
	if (r && (!v || v->seq < r->seq))
		return &range_tomb;
	return v;
}

const struct fdb_val *fdb_mt_get(const struct fdb_mt *m, const void *key, uint32_t klen,
				 uint64_t max_seq)
{
	struct mt_node *n = find_ge(m, key, klen, NULL);
	const struct fdb_val *v = n && node_cmp(n, key, klen) == 0 ? visible(n, max_seq) : NULL;
	return range_cover(m, v, key, klen, max_seq);
}

int fdb_mt_del_range(struct fdb_mt *m, const void *start, uint32_t slen, const void *end,
		     uint32_t elen, uint64_t seq)
{
	struct fdb_mt_range *r = arena_alloc(m, sizeof(*r) + (size_t)slen + elen);
	if (!r)
		return -ENOMEM;
	uint8_t *k = (uint8_t *)(r + 1);
	if (slen)
		memcpy(k, start, slen);
	memcpy(k + slen, end, elen);
	r->start = k;
	r->end = k + slen;
	r->slen = slen;
	r->elen = elen;
	r->seq = seq;
	r->next = atomic_load_explicit(&m->ranges, memory_order_relaxed);
	FLEX_HB_BEFORE(&m->ranges);
	atomic_store_explicit(&m->ranges, r, memory_order_release);
	atomic_fetch_add(&m->count, 1);
	return 0;
}

void fdb_mt_seek(struct fdb_mt_iter *it, const struct fdb_mt *m, const void *key, uint32_t klen)
{
	it->m = m;
	it->node = klen ? find_ge(m, key, klen, NULL) : nxt(m->head, 0);
}

void fdb_mt_seek_le(struct fdb_mt_iter *it, const struct fdb_mt *m, const void *key,
		    uint32_t klen)
{
	it->m = m;
	struct mt_node *x = find_lt(m, key, klen, 1);
	it->node = x == m->head ? NULL : x;
}

int fdb_mt_valid(const struct fdb_mt_iter *it)
{
	return it->node != NULL;
}

void fdb_mt_next(struct fdb_mt_iter *it)
{
	it->node = nxt(it->node, 0);
}

void fdb_mt_prev(struct fdb_mt_iter *it)
{
	const struct mt_node *n = it->node;
	struct mt_node *x = find_lt(it->m, node_key(n), n->klen, 0);
	it->node = x == it->m->head ? NULL : x;
}

const uint8_t *fdb_mt_key(const struct fdb_mt_iter *it, uint32_t *klen)
{
	const struct mt_node *n = it->node;
	*klen = n->klen;
	return node_key(n);
}

const struct fdb_val *fdb_mt_val(const struct fdb_mt_iter *it, uint64_t max_seq)
{
	const struct mt_node *n = it->node;
	return range_cover(it->m, visible(n, max_seq), node_key(n), n->klen, max_seq);
}
