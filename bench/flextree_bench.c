/*
 * flextree_bench.c - FlexTree against a plain B+-tree and a sorted array:
 * the extent-index experiments of the FlexSpace paper (section 6.1,
 * Table 1) reproduced on this machine.
 *
 * Four experiments, each run on all three structures in the same process
 * run so that their ratios hold on a noisy machine:
 *
 *   insert  start empty; each op inserts a new EXT_LEN-byte extent at a
 *           uniformly random extent boundary in [0, size] (an insert-range:
 *           everything after it moves up), until there are N extents.
 *   append  start empty; append N extents at the end (repeated from empty
 *           until APPEND_MIN_OPS appends are timed).
 *   lookup  random byte offsets in the index of N extents built by append:
 *           physical address and contiguous run of the byte.
 *   range   random start byte offset; the mappings of the next 50 extents'
 *           worth of bytes (50 or 51 mappings), walking the leaves/array.
 *
 * Every extent gets physical address 2 * EXT_LEN * (op number), so no two
 * extents are ever physically contiguous and FlexTree never merges them:
 * the three structures hold exactly the same extents.  All random offsets
 * are drawn before the clock starts, from a fixed-seed splitmix64 stream,
 * and every structure receives the same sequence.
 *
 * The peers, and why they are fair:
 *
 *   b+tree        The paper's Figure 2a: FlexTree's shape minus the shift
 *                 values.  Leaves hold the same parallel arrays as
 *                 FlexTree's (absolute 64-bit logical offset, 64-bit
 *                 physical address, 32-bit length), at most 128 entries;
 *                 internal nodes hold up to 128 absolute pivots and 129
 *                 children, like FlexTree's.  Lookups are the same binary
 *                 searches per level with no shift arithmetic; leaves are
 *                 linked, so a range query simply walks them.  An insert in
 *                 the middle must add the length to every later extent and
 *                 every later pivot: O(N), which is the point of the paper.
 *   sorted-array  Parallel arrays of absolute offsets, physical addresses
 *                 and lengths: binary-search lookups, contiguous range
 *                 scans, amortised O(1) appends; an insert is a memmove plus
 *                 an add to every later offset.
 *
 * Both are written for speed (parallel arrays so the searches and the O(N)
 * shift loops touch only the offsets), which makes the comparison
 * conservative for FlexTree.  Their per-op functions are not inlined (nor
 * specialised) so that, like FlexTree's calls into its library, each op is
 * a real call.
 *
 * The O(N) inserts of the peers cannot reach 1e6 extents in reasonable
 * time.  Up to FULL_INSERT_MAX extents they run the whole experiment (under
 * a time cap); above it each peer is pre-filled by untimed appends to N/2
 * extents and then times random inserts for BOUNDED_SEC.  A peer's insert
 * cost is linear in the current size, so its throughput at N/2 estimates
 * its mean over a full 0..N build.  The output says which was done.
 *
 * After every experiment a few hundred random lookups and a few dozen range
 * queries are compared across the structures (and the sums of all timed
 * results are compared too); any difference aborts the run.
 *
 * Each measurement is repeated REPS times (the order of the structures
 * rotating) and the median is reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flextree.h"

#include "bench_util.h"

/* Bytes per extent: one 4 KiB block, the granularity of a file system's
 * insert-range. */
#define EXT_LEN 4096u
/* Extents retrieved by one range query (the paper's 50). */
#define RANGE_EXTENTS 50
/* Mapping buffer for a range query: 50 extents from an unaligned start
 * touch 51. */
#define RANGE_CAP 64

/* Peer node capacities: FlexTree's defaults (FT_LEAF_CAP, FT_INTERNAL_CAP
 * in flextree/flextree_int.h), so both trees have the same height. */
#define BT_LEAF_CAP 336
#define BT_INNER_CAP 128 /* pivots; children = pivots + 1 */
#define BT_MAX_HEIGHT 32

/* Largest N at which the peers run the full insert experiment. */
#define FULL_INSERT_MAX 100000
/* Time cap for a full peer insert run (quick mode: QUICK_FULL_CAP_SEC). */
#define FULL_CAP_SEC 30.0
#define QUICK_FULL_CAP_SEC 6.0
/* Timed phase of a bounded peer insert run. */
#define BOUNDED_SEC 2.0

/* An append measurement builds the index from empty as many times as it
 * takes to do at least this many appends (one build of 1e5 extents lasts
 * only ~3 ms, too short to time on a noisy machine). */
#define APPEND_MIN_OPS 1000000
#define QUICK_APPEND_MIN_OPS 500000

/* Timed ops per lookup / range-query measurement. */
#define LOOKUP_OPS 1000000
#define RANGE_OPS 200000
#define QUICK_LOOKUP_OPS 300000
#define QUICK_RANGE_OPS 60000

/* Cross-checks after each experiment. */
#define VERIFY_LOOKUPS 400
#define VERIFY_RANGES 40

#define REPS 3
#define MAX_SIZES 3

/* ---- small helpers -------------------------------------------------------- */

/* The peers' per-op functions are real calls, as FlexTree's calls into its
 * library are: no inlining, and no cloning specialised for the constant
 * extent length either. */
#if defined(__clang__)
#define PEER_OP __attribute__((noinline))
#else
#define PEER_OP __attribute__((noipa))
#endif

/* Physical address of the extent created by op number i: never adjacent to
 * another extent's end, so nothing merges. */
static uint64_t op_poff(uint64_t i)
{
	return i * 2 * (uint64_t)EXT_LEN;
}

/* Ops that would be absorbed by a pure loop get their results summed in. */
static volatile uint64_t sink;

/* ---- peer 1: sorted array --------------------------------------------------- */

struct sarr {
	uint64_t *loff; /* absolute logical offsets, ascending */
	uint64_t *poff;
	uint32_t *len;
	size_t n, cap;
	uint64_t size;
};

static void sarr_init(struct sarr *a)
{
	memset(a, 0, sizeof(*a));
}

static void sarr_free(struct sarr *a)
{
	free(a->loff);
	free(a->poff);
	free(a->len);
	sarr_init(a);
}

static void sarr_reserve(struct sarr *a, size_t need)
{
	size_t cap = a->cap ? a->cap : 1024;

	if (need <= a->cap)
		return;
	while (cap < need)
		cap *= 2;
	a->loff = realloc(a->loff, cap * sizeof(*a->loff));
	a->poff = realloc(a->poff, cap * sizeof(*a->poff));
	a->len = realloc(a->len, cap * sizeof(*a->len));
	if (!a->loff || !a->poff || !a->len)
		die("out of memory (sorted array of %zu extents)", cap);
	a->cap = cap;
}

/* Index of the last extent starting at or before off (0 if none). */
static size_t sarr_find(const struct sarr *a, uint64_t off)
{
	size_t lo = 1, hi = a->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a->loff[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* Insert-range with FlexTree's semantics (off <= size; the extent holding
 * off is split), without merging. */
PEER_OP static void sarr_insert(struct sarr *a, uint64_t off, uint64_t poff, uint32_t len)
{
	size_t pos, m = 1, i;
	uint64_t d = 0;

	if (off > a->size)
		die("sorted array: insert beyond the end");
	sarr_reserve(a, a->n + 2);
	if (off == a->size) {
		pos = a->n;
	} else {
		size_t k = sarr_find(a, off);

		d = off - a->loff[k];
		pos = d ? k + 1 : k;
		m = d ? 2 : 1;
	}
	memmove(a->loff + pos + m, a->loff + pos, (a->n - pos) * sizeof(*a->loff));
	memmove(a->poff + pos + m, a->poff + pos, (a->n - pos) * sizeof(*a->poff));
	memmove(a->len + pos + m, a->len + pos, (a->n - pos) * sizeof(*a->len));
	if (m == 2) { /* the tail of the split extent follows the new one */
		a->loff[pos + 1] = off;
		a->poff[pos + 1] = a->poff[pos - 1] + d;
		a->len[pos + 1] = (uint32_t)(a->len[pos - 1] - d);
		a->len[pos - 1] = (uint32_t)d;
	}
	a->loff[pos] = off;
	a->poff[pos] = poff;
	a->len[pos] = len;
	a->n += m;
	for (i = pos + 1; i < a->n; i++) /* the O(N) shift */
		a->loff[i] += len;
	a->size += len;
}

PEER_OP static int sarr_lookup(const struct sarr *a, uint64_t off, uint64_t *poff,
			       uint64_t *run)
{
	size_t k;
	uint64_t d;

	if (off >= a->size)
		return -ERANGE;
	k = sarr_find(a, off);
	d = off - a->loff[k];
	*poff = a->poff[k] + d;
	*run = a->len[k] - d;
	return 0;
}

/* flextree_query's contract on the array. */
PEER_OP static ssize_t sarr_query(const struct sarr *a, uint64_t off, uint64_t len,
				  struct flextree_mapping *out, size_t cap)
{
	uint64_t end, pos = off;
	size_t k, cnt = 0;

	if (off > a->size || off + len < off)
		return -ERANGE;
	end = off + len < a->size ? off + len : a->size;
	if (pos >= end)
		return 0;
	for (k = sarr_find(a, off); pos < end; k++) {
		uint64_t d = pos - a->loff[k];
		uint64_t l = a->len[k] - d;

		if (l > end - pos)
			l = end - pos;
		if (cnt < cap) {
			out[cnt].poff = a->poff[k] + d;
			out[cnt].len = l;
			out[cnt].loff = pos;
		}
		cnt++;
		pos += l;
	}
	return (ssize_t)cnt;
}

/* ---- peer 2: B+-tree with absolute offsets ----------------------------------- */

/* Entries as parallel arrays, like FlexTree's leaves; two slots of slack so
 * an insert (new extent + split tail) lands before the split. */
struct bt_leaf {
	uint32_t n;
	struct bt_leaf *next; /* leaf to the right */
	uint64_t loff[BT_LEAF_CAP + 2];
	uint64_t poff[BT_LEAF_CAP + 2];
	uint32_t len[BT_LEAF_CAP + 2];
};

/* n pivots and n + 1 children; pivot[i] is the absolute start of child
 * i + 1.  Internal nodes are linked per level too, so that an insert can
 * shift every pivot to the right of its path without a tree walk. */
struct bt_inner {
	uint32_t n;
	struct bt_inner *next; /* node to the right on the same level */
	uint64_t pivot[BT_INNER_CAP + 1];
	void *child[BT_INNER_CAP + 2];
};

struct btree {
	void *root;
	uint32_t height; /* 1: the root is a leaf */
	uint64_t size;
	uint64_t extents;
};

/* Nodes come from malloc uninitialised, as FlexTree's do. */
static struct bt_leaf *bt_leaf_new(void)
{
	struct bt_leaf *lf = xmalloc(sizeof(*lf));

	lf->n = 0;
	lf->next = NULL;
	return lf;
}

static struct bt_inner *bt_inner_new(void)
{
	struct bt_inner *in = xmalloc(sizeof(*in));

	in->n = 0;
	in->next = NULL;
	return in;
}

static void bt_init(struct btree *t)
{
	t->root = bt_leaf_new();
	t->height = 1;
	t->size = 0;
	t->extents = 0;
}

static void bt_free_node(void *node, uint32_t height)
{
	if (height > 1) {
		struct bt_inner *in = node;
		uint32_t i;

		for (i = 0; i <= in->n; i++)
			bt_free_node(in->child[i], height - 1);
	}
	free(node);
}

static void bt_free(struct btree *t)
{
	bt_free_node(t->root, t->height);
	t->root = NULL;
}

/* Child to descend into: the number of pivots <= off. */
static uint32_t bt_inner_pick(const struct bt_inner *in, uint64_t off)
{
	uint32_t lo = 0, hi = in->n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (in->pivot[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Last entry starting at or before off (0 if none). */
static uint32_t bt_leaf_pick(const struct bt_leaf *lf, uint64_t off)
{
	uint32_t lo = 1, hi = lf->n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (lf->loff[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

static struct bt_leaf *bt_descend(const struct btree *t, uint64_t off)
{
	void *node = t->root;
	uint32_t h;

	for (h = t->height; h > 1; h--)
		node = ((struct bt_inner *)node)->child[bt_inner_pick(node, off)];
	return node;
}

/* Adds right (starting at sep) as child at + 1 of path level lvl, splitting
 * upwards while nodes overflow. */
static void bt_add_child(struct btree *t, struct bt_inner **path, const uint32_t *pidx, int lvl,
			 uint64_t sep, void *right)
{
	for (;;) {
		struct bt_inner *in, *nr;
		uint32_t at, h, i;

		if (lvl < 0) { /* the root split: grow a level */
			struct bt_inner *root = bt_inner_new();

			root->n = 1;
			root->pivot[0] = sep;
			root->child[0] = t->root;
			root->child[1] = right;
			t->root = root;
			t->height++;
			return;
		}
		in = path[lvl];
		at = pidx[lvl];
		memmove(in->pivot + at + 1, in->pivot + at, (in->n - at) * sizeof(*in->pivot));
		memmove(in->child + at + 2, in->child + at + 1, (in->n - at) * sizeof(*in->child));
		in->pivot[at] = sep;
		in->child[at + 1] = right;
		in->n++;
		if (in->n <= BT_INNER_CAP)
			return;
		/* Split: pivot h moves up, pivots above it go right. */
		h = in->n / 2;
		nr = bt_inner_new();
		nr->n = in->n - h - 1;
		for (i = 0; i < nr->n; i++)
			nr->pivot[i] = in->pivot[h + 1 + i];
		for (i = 0; i <= nr->n; i++)
			nr->child[i] = in->child[h + 1 + i];
		sep = in->pivot[h];
		in->n = h;
		nr->next = in->next;
		in->next = nr;
		right = nr;
		lvl--;
	}
}

/* Insert-range (off <= size; the extent holding off is split), without
 * merging.  Every extent and pivot after the new extent gets + len. */
PEER_OP static void bt_insert(struct btree *t, uint64_t off, uint64_t poff, uint32_t len)
{
	struct bt_inner *path[BT_MAX_HEIGHT];
	uint32_t pidx[BT_MAX_HEIGHT];
	struct bt_leaf *lf;
	void *node = t->root;
	uint32_t pos, m = 1, i, k;
	int lvl, depth = 0;

	if (off > t->size)
		die("b+tree: insert beyond the end");
	for (k = t->height; k > 1; k--) {
		struct bt_inner *in = node;

		path[depth] = in;
		pidx[depth] = bt_inner_pick(in, off);
		node = in->child[pidx[depth]];
		depth++;
	}
	lf = node;

	/* 1. Place the new extent (and the tail of a split one) in the leaf.
	 * An append searches the leaf like any insert (no end-of-space
	 * shortcut: FlexTree takes none either). */
	if (lf->n == 0) {
		pos = 0;
	} else {
		uint64_t d;

		k = bt_leaf_pick(lf, off);
		d = off - lf->loff[k];
		if (d == lf->len[k]) { /* off is the end of the space */
			d = 0;
			k++;
		}
		pos = d ? k + 1 : k;
		m = d ? 2 : 1;
		if (d) {
			memmove(lf->loff + pos + 2, lf->loff + pos, (lf->n - pos) * sizeof(*lf->loff));
			memmove(lf->poff + pos + 2, lf->poff + pos, (lf->n - pos) * sizeof(*lf->poff));
			memmove(lf->len + pos + 2, lf->len + pos, (lf->n - pos) * sizeof(*lf->len));
			lf->loff[pos + 1] = off;
			lf->poff[pos + 1] = lf->poff[k] + d;
			lf->len[pos + 1] = (uint32_t)(lf->len[k] - d);
			lf->len[k] = (uint32_t)d;
		}
	}
	if (m == 1) {
		memmove(lf->loff + pos + 1, lf->loff + pos, (lf->n - pos) * sizeof(*lf->loff));
		memmove(lf->poff + pos + 1, lf->poff + pos, (lf->n - pos) * sizeof(*lf->poff));
		memmove(lf->len + pos + 1, lf->len + pos, (lf->n - pos) * sizeof(*lf->len));
	}
	lf->loff[pos] = off;
	lf->poff[pos] = poff;
	lf->len[pos] = len;
	lf->n += m;
	t->size += len;
	t->extents += m;

	/* 2. The O(N) shift: the rest of this leaf, every later leaf, and every
	 * pivot to the right of the path on every level.  The path pivot
	 * itself stays: a pivot equal to off is the new extent's start. */
	for (i = pos + 1; i < lf->n; i++)
		lf->loff[i] += len;
	for (struct bt_leaf *l = lf->next; l; l = l->next)
		for (i = 0; i < l->n; i++)
			l->loff[i] += len;
	for (lvl = 0; lvl < depth; lvl++) {
		for (i = pidx[lvl]; i < path[lvl]->n; i++)
			path[lvl]->pivot[i] += len;
		for (struct bt_inner *in = path[lvl]->next; in; in = in->next)
			for (i = 0; i < in->n; i++)
				in->pivot[i] += len;
	}

	/* 3. Split an overflowing leaf in half, as FlexTree does. */
	if (lf->n > BT_LEAF_CAP) {
		struct bt_leaf *nr = bt_leaf_new();
		uint32_t h = lf->n / 2;

		nr->n = lf->n - h;
		memcpy(nr->loff, lf->loff + h, nr->n * sizeof(*lf->loff));
		memcpy(nr->poff, lf->poff + h, nr->n * sizeof(*lf->poff));
		memcpy(nr->len, lf->len + h, nr->n * sizeof(*lf->len));
		lf->n = h;
		nr->next = lf->next;
		lf->next = nr;
		bt_add_child(t, path, pidx, depth - 1, nr->loff[0], nr);
	}
}

PEER_OP static int bt_lookup(const struct btree *t, uint64_t off, uint64_t *poff,
			     uint64_t *run)
{
	const struct bt_leaf *lf;
	uint32_t k;
	uint64_t d;

	if (off >= t->size)
		return -ERANGE;
	lf = bt_descend(t, off);
	k = bt_leaf_pick(lf, off);
	d = off - lf->loff[k];
	*poff = lf->poff[k] + d;
	*run = lf->len[k] - d;
	return 0;
}

/* flextree_query's contract on the B+-tree: descend once, then walk the
 * leaf links. */
PEER_OP static ssize_t bt_query(const struct btree *t, uint64_t off, uint64_t len,
				struct flextree_mapping *out, size_t cap)
{
	const struct bt_leaf *lf;
	uint64_t end, pos = off;
	uint32_t k;
	size_t cnt = 0;

	if (off > t->size || off + len < off)
		return -ERANGE;
	end = off + len < t->size ? off + len : t->size;
	if (pos >= end)
		return 0;
	lf = bt_descend(t, off);
	k = bt_leaf_pick(lf, off);
	while (pos < end) {
		uint64_t d, l;

		if (k == lf->n) {
			lf = lf->next;
			k = 0;
			continue;
		}
		d = pos - lf->loff[k];
		l = lf->len[k] - d;
		if (l > end - pos)
			l = end - pos;
		if (cnt < cap) {
			out[cnt].poff = lf->poff[k] + d;
			out[cnt].len = l;
			out[cnt].loff = pos;
		}
		cnt++;
		pos += l;
		k++;
	}
	return (ssize_t)cnt;
}

/* ---- the three structures behind one switch --------------------------------- */

enum kind { K_FLEXTREE, K_BTREE, K_SARR, NKIND };

static const char *const kind_name[NKIND] = {"flextree", "b+tree", "sorted-array"};

struct trio {
	struct flextree *ft;
	struct btree bt;
	struct sarr sa;
	int have[NKIND];
};

static void trio_open(struct trio *s, enum kind k)
{
	int rc;

	switch (k) {
	case K_FLEXTREE:
		rc = flextree_open(NULL, NULL, &s->ft);
		if (rc)
			die("flextree_open: %s", flex_strerror(rc));
		break;
	case K_BTREE:
		bt_init(&s->bt);
		break;
	default:
		sarr_init(&s->sa);
		break;
	}
	s->have[k] = 1;
}

static void trio_close(struct trio *s, enum kind k)
{
	if (!s->have[k])
		return;
	switch (k) {
	case K_FLEXTREE:
		flextree_close(s->ft);
		s->ft = NULL;
		break;
	case K_BTREE:
		bt_free(&s->bt);
		break;
	default:
		sarr_free(&s->sa);
		break;
	}
	s->have[k] = 0;
}

static uint64_t trio_size(const struct trio *s, enum kind k)
{
	switch (k) {
	case K_FLEXTREE:
		return flextree_size(s->ft);
	case K_BTREE:
		return s->bt.size;
	default:
		return s->sa.size;
	}
}

static uint64_t trio_extents(const struct trio *s, enum kind k)
{
	struct flextree_stats st;

	switch (k) {
	case K_FLEXTREE:
		if (flextree_stats(s->ft, &st))
			die("flextree_stats failed");
		return st.extents;
	case K_BTREE:
		return s->bt.extents;
	default:
		return s->sa.n;
	}
}

static int trio_lookup(const struct trio *s, enum kind k, uint64_t off, uint64_t *poff,
		       uint64_t *run)
{
	switch (k) {
	case K_FLEXTREE:
		return flextree_lookup(s->ft, off, poff, run);
	case K_BTREE:
		return bt_lookup(&s->bt, off, poff, run);
	default:
		return sarr_lookup(&s->sa, off, poff, run);
	}
}

static ssize_t trio_query(const struct trio *s, enum kind k, uint64_t off, uint64_t len,
			  struct flextree_mapping *out, size_t cap)
{
	switch (k) {
	case K_FLEXTREE:
		return flextree_query(s->ft, off, len, out, cap);
	case K_BTREE:
		return bt_query(&s->bt, off, len, out, cap);
	default:
		return sarr_query(&s->sa, off, len, out, cap);
	}
}

/* ---- timed loops -------------------------------------------------------------
 * One loop per structure, the switch outside it, so the timed code is just
 * the ops.  Inserts: op i of the sequence inserts at offs[i] the extent
 * numbered first + i.  With budget > 0 the loop stops once that many seconds
 * have passed (checked every 64 ops) and reports how many ops it did. */

static double time_inserts(struct trio *s, enum kind k, const uint64_t *offs, uint64_t first,
			   size_t n, double budget, size_t *done)
{
	double t0 = now_sec(), t1;
	size_t i = 0;
	int rc;

	while (i < n) {
		size_t stop = budget > 0 && n - i > 64 ? i + 64 : n;

		switch (k) {
		case K_FLEXTREE:
			for (; i < stop; i++) {
				rc = flextree_insert(s->ft, offs[i], op_poff(first + i), EXT_LEN);
				if (rc)
					die("flextree_insert: %s", flex_strerror(rc));
			}
			break;
		case K_BTREE:
			for (; i < stop; i++)
				bt_insert(&s->bt, offs[i], op_poff(first + i), EXT_LEN);
			break;
		default:
			for (; i < stop; i++)
				sarr_insert(&s->sa, offs[i], op_poff(first + i), EXT_LEN);
			break;
		}
		if (budget > 0 && now_sec() - t0 >= budget)
			break;
	}
	t1 = now_sec();
	*done = i;
	return t1 - t0;
}

/* Appends extents first .. first + n - 1 (the tree holds first extents). */
static double time_appends(struct trio *s, enum kind k, uint64_t first, size_t n)
{
	double t0 = now_sec();
	uint64_t i;
	int rc;

	switch (k) {
	case K_FLEXTREE:
		for (i = first; i < first + n; i++) {
			rc = flextree_insert(s->ft, i * EXT_LEN, op_poff(i), EXT_LEN);
			if (rc)
				die("flextree_insert (append): %s", flex_strerror(rc));
		}
		break;
	case K_BTREE:
		for (i = first; i < first + n; i++)
			bt_insert(&s->bt, i * EXT_LEN, op_poff(i), EXT_LEN);
		break;
	default:
		for (i = first; i < first + n; i++)
			sarr_insert(&s->sa, i * EXT_LEN, op_poff(i), EXT_LEN);
		break;
	}
	return now_sec() - t0;
}

/* Sums poff + run of every lookup into *sum (compared across structures). */
static double time_lookups(const struct trio *s, enum kind k, const uint64_t *offs, size_t n,
			   uint64_t *sum)
{
	double t0 = now_sec(), t1;
	uint64_t acc = 0, poff = 0, run = 0;
	size_t i;

	switch (k) {
	case K_FLEXTREE:
		for (i = 0; i < n; i++) {
			if (flextree_lookup(s->ft, offs[i], &poff, &run))
				die("flextree_lookup failed at %" PRIu64, offs[i]);
			acc += poff + run;
		}
		break;
	case K_BTREE:
		for (i = 0; i < n; i++) {
			if (bt_lookup(&s->bt, offs[i], &poff, &run))
				die("b+tree lookup failed at %" PRIu64, offs[i]);
			acc += poff + run;
		}
		break;
	default:
		for (i = 0; i < n; i++) {
			if (sarr_lookup(&s->sa, offs[i], &poff, &run))
				die("sorted array lookup failed at %" PRIu64, offs[i]);
			acc += poff + run;
		}
		break;
	}
	t1 = now_sec();
	*sum = acc;
	sink += acc;
	return t1 - t0;
}

/* Range queries of RANGE_EXTENTS extents' bytes from each offset; sums the
 * mapping counts, addresses and lengths into *sum. */
static double time_ranges(const struct trio *s, enum kind k, const uint64_t *offs, size_t n,
			  uint64_t *sum)
{
	struct flextree_mapping out[RANGE_CAP];
	const uint64_t len = (uint64_t)RANGE_EXTENTS * EXT_LEN;
	double t0 = now_sec(), t1;
	uint64_t acc = 0;
	size_t i;
	ssize_t c, j;

	for (i = 0; i < n; i++) {
		switch (k) {
		case K_FLEXTREE:
			c = flextree_query(s->ft, offs[i], len, out, RANGE_CAP);
			break;
		case K_BTREE:
			c = bt_query(&s->bt, offs[i], len, out, RANGE_CAP);
			break;
		default:
			c = sarr_query(&s->sa, offs[i], len, out, RANGE_CAP);
			break;
		}
		if (c <= 0 || c > RANGE_CAP)
			die("%s: range query at %" PRIu64 " returned %zd", kind_name[k], offs[i], c);
		acc += (uint64_t)c;
		for (j = 0; j < c; j++)
			acc += out[j].poff ^ out[j].len;
	}
	t1 = now_sec();
	*sum = acc;
	sink += acc;
	return t1 - t0;
}

/* ---- cross-checks --------------------------------------------------------------- */

/* Compares structure `k` of b with the FlexTree of a (same op sequence
 * expected): size, extent count, random lookups and range queries.  Aborts
 * on a mismatch.  `what` names the experiment in the message. */
static void verify_pair(const char *what, const struct trio *a, const struct trio *b, enum kind k,
			uint64_t seed)
{
	struct flextree_mapping ma[RANGE_CAP + 16], mb[RANGE_CAP + 16];
	struct rng r = {seed ^ 0xC0FFEEULL};
	uint64_t size = trio_size(a, K_FLEXTREE);
	int i;

	if (trio_size(b, k) != size)
		die("%s: %s size %" PRIu64 " != flextree size %" PRIu64, what, kind_name[k],
		    trio_size(b, k), size);
	if (trio_extents(b, k) != trio_extents(a, K_FLEXTREE))
		die("%s: %s holds %" PRIu64 " extents, flextree %" PRIu64, what, kind_name[k],
		    trio_extents(b, k), trio_extents(a, K_FLEXTREE));
	for (i = 0; i <= VERIFY_LOOKUPS; i++) {
		/* the last probe is just past the end: both must say -ERANGE */
		uint64_t off = i < VERIFY_LOOKUPS ? rng_below(&r, size) : size;
		uint64_t pa = 0, ra = 0, pb = 0, rb = 0;
		int ca = trio_lookup(a, K_FLEXTREE, off, &pa, &ra);
		int cb = trio_lookup(b, k, off, &pb, &rb);

		if (ca != cb || (ca == 0 && (pa != pb || ra != rb)))
			die("%s: lookup(%" PRIu64 "): flextree rc %d poff %" PRIu64 " run %" PRIu64
			    ", %s rc %d poff %" PRIu64 " run %" PRIu64,
			    what, off, ca, pa, ra, kind_name[k], cb, pb, rb);
	}
	for (i = 0; i < VERIFY_RANGES; i++) {
		uint64_t off = rng_below(&r, size + 1);
		uint64_t len = rng_below(&r, (uint64_t)(RANGE_CAP + 8) * EXT_LEN);
		ssize_t ca = trio_query(a, K_FLEXTREE, off, len, ma, RANGE_CAP + 16);
		ssize_t cb = trio_query(b, k, off, len, mb, RANGE_CAP + 16);

		if (ca != cb || (ca > 0 && memcmp(ma, mb, (size_t)ca * sizeof(ma[0]))))
			die("%s: query(%" PRIu64 ", %" PRIu64 "): flextree %zd mappings, %s %zd%s", what,
			    off, len, ca, kind_name[k], cb, ca == cb ? " (contents differ)" : "");
	}
}

static void verify_flextree(const char *what, const struct trio *s)
{
	if (flextree_check(s->ft))
		die("%s: flextree_check failed", what);
}

/* ---- results ---------------------------------------------------------------- */

enum exp { E_INSERT, E_APPEND, E_LOOKUP, E_RANGE, NEXP };

static const char *const exp_name[NEXP] = {"insert", "append", "lookup", "range"};

struct cell {
	int have;
	double mops[REPS]; /* per repetition */
	uint64_t ops[REPS];
	int nrep;
	double med; /* median Mops/s */
	char note[96];
};

struct bench {
	uint64_t seed;
	int quick, large, reps;
	size_t sizes[MAX_SIZES];
	int nsizes;
	FILE *csv;
	struct cell cell[NEXP][MAX_SIZES][NKIND];
};

static void size_label(size_t n, char *buf, size_t cap)
{
	int e = 0;
	size_t m = n;

	while (m >= 10 && m % 10 == 0) {
		m /= 10;
		e++;
	}
	if (m == 1 && e > 0)
		snprintf(buf, cap, "1e%d", e);
	else
		snprintf(buf, cap, "%zu", n);
}

static void record(struct cell *c, size_t ops, double secs)
{
	if (c->nrep >= REPS)
		die("internal: too many repetitions");
	c->ops[c->nrep] = ops;
	c->mops[c->nrep] = secs > 0 ? (double)ops / secs / 1e6 : 0;
	c->nrep++;
	c->have = 1;
}

/* Prints (and writes to the CSV) one line per structure for an experiment
 * at one size. */
static void report(struct bench *b, enum exp e, int si)
{
	char nl[16];
	int k, r;

	size_label(b->sizes[si], nl, sizeof(nl));
	for (k = 0; k < NKIND; k++) {
		struct cell *c = &b->cell[e][si][k];
		double v[REPS];
		uint64_t ops = 0;

		if (!c->have)
			continue;
		memcpy(v, c->mops, sizeof(v));
		qsort(v, (size_t)c->nrep, sizeof(v[0]), cmp_double);
		c->med = v[c->nrep / 2];
		for (r = 0; r < c->nrep; r++)
			if (c->mops[r] == c->med)
				ops = c->ops[r];
		printf("%-7s %-4s %-13s %10.4f Mops/s %10.3f us/op  ops %-9" PRIu64 " reps", exp_name[e],
		       nl, kind_name[k], c->med, c->med > 0 ? 1.0 / c->med : 0.0, ops);
		for (r = 0; r < c->nrep; r++)
			printf(" %.4g", c->mops[r]);
		printf("%s%s\n", c->note[0] ? "  " : "", c->note);
		if (b->csv)
			fprintf(b->csv, "%s,%zu,%s,%.6f,%.6f,%" PRIu64 ",%d,\"%s\"\n", exp_name[e],
				b->sizes[si], kind_name[k], c->med, c->med > 0 ? 1.0 / c->med : 0.0,
				ops, c->nrep, c->note);
	}
	fflush(stdout);
}

/* ---- experiments ------------------------------------------------------------- */

/* offs[i] = a uniformly random extent boundary of a space holding base + i
 * extents. */
static uint64_t *insert_offsets(struct rng *r, size_t base, size_t n)
{
	uint64_t *offs = xmalloc(n * sizeof(*offs));
	size_t i;

	for (i = 0; i < n; i++)
		offs[i] = rng_below(r, base + i + 1) * EXT_LEN;
	return offs;
}

/* Replays a bounded peer run (prefill appends, then ops inserts) into a
 * fresh FlexTree to check the peer against. */
static void build_reference(struct trio *ref, size_t prefill, const uint64_t *offs, size_t ops)
{
	size_t done;

	trio_open(ref, K_FLEXTREE);
	time_appends(ref, K_FLEXTREE, 0, prefill);
	time_inserts(ref, K_FLEXTREE, offs, prefill, ops, 0, &done);
}

static void run_insert(struct bench *b, int si)
{
	size_t n = b->sizes[si], prefill = n > FULL_INSERT_MAX ? n / 2 : 0;
	struct rng r = {b->seed ^ (0x1000 + si)};
	uint64_t *offs = insert_offsets(&r, 0, n);
	/* bounded peers: inserts into a space of prefill + j extents */
	uint64_t *boffs = prefill ? insert_offsets(&r, prefill, n - prefill) : NULL;
	double cap = b->quick ? QUICK_FULL_CAP_SEC : FULL_CAP_SEC;
	char what[64], nl[16];
	int rep, j;

	size_label(n, nl, sizeof(nl));
	snprintf(what, sizeof(what), "insert %s", nl);
	for (rep = 0; rep < b->reps; rep++) {
		struct trio s = {0};

		for (j = 0; j < NKIND; j++) {
			enum kind k = (enum kind)((j + rep) % NKIND);
			struct cell *c = &b->cell[E_INSERT][si][k];
			size_t done;
			double secs;

			trio_open(&s, k);
			if (k == K_FLEXTREE) {
				secs = time_inserts(&s, k, offs, 0, n, 0, &done);
			} else if (!prefill) {
				secs = time_inserts(&s, k, offs, 0, n, cap, &done);
				if (done < n)
					snprintf(c->note, sizeof(c->note),
						 "(partial: stopped after %.0f s at %zu of %zu ops)",
						 cap, done, n);
			} else {
				time_appends(&s, k, 0, prefill);
				secs = time_inserts(&s, k, boffs, prefill, n - prefill,
						    BOUNDED_SEC, &done);
				snprintf(c->note, sizeof(c->note),
					 "(bounded: prefilled to %zu, then %.0f s of inserts)", prefill,
					 BOUNDED_SEC);
			}
			record(c, done, secs);
			/* Check a peer against a FlexTree that saw the same ops; the
			 * timed FlexTree when the peer did all of them. */
			if (k != K_FLEXTREE) {
				struct trio ref = {0};
				int same = !prefill && done == n && s.have[K_FLEXTREE];

				if (!same) {
					if (prefill)
						build_reference(&ref, prefill, boffs, done);
					else
						build_reference(&ref, 0, offs, done);
				}
				verify_pair(what, same ? &s : &ref, &s, k, b->seed + (uint64_t)rep);
				trio_close(&ref, K_FLEXTREE);
				trio_close(&s, k);
			}
		}
		if (trio_extents(&s, K_FLEXTREE) != n || trio_size(&s, K_FLEXTREE) != n * EXT_LEN)
			die("%s: flextree holds %" PRIu64 " extents, expected %zu", what,
			    trio_extents(&s, K_FLEXTREE), n);
		verify_flextree(what, &s);
		trio_close(&s, K_FLEXTREE);
	}
	free(offs);
	free(boffs);
	report(b, E_INSERT, si);
}

/* Append, then lookup and range query on the appended index. */
static void run_append_lookup_range(struct bench *b, int si)
{
	size_t n = b->sizes[si];
	size_t nl_ops = b->quick ? QUICK_LOOKUP_OPS : LOOKUP_OPS;
	size_t nr_ops = b->quick ? QUICK_RANGE_OPS : RANGE_OPS;
	uint64_t size = (uint64_t)n * EXT_LEN, span = (uint64_t)RANGE_EXTENTS * EXT_LEN;
	struct rng r = {b->seed ^ (0x2000 + si)};
	uint64_t *loffs = xmalloc(nl_ops * sizeof(*loffs));
	uint64_t *roffs = xmalloc(nr_ops * sizeof(*roffs));
	size_t min_ops = b->quick ? QUICK_APPEND_MIN_OPS : APPEND_MIN_OPS;
	size_t rounds = (min_ops + n - 1) / n;
	char what[64], nl[16];
	size_t i;
	int rep, j;

	if (n < RANGE_EXTENTS)
		die("size %zu below the range length", n);
	for (i = 0; i < nl_ops; i++)
		loffs[i] = rng_below(&r, size);
	for (i = 0; i < nr_ops; i++)
		roffs[i] = rng_below(&r, size - span + 1);
	size_label(n, nl, sizeof(nl));
	snprintf(what, sizeof(what), "append/lookup/range %s", nl);

	for (rep = 0; rep < b->reps; rep++) {
		struct trio s = {0};
		uint64_t lsum[NKIND], rsum[NKIND];

		for (j = 0; j < NKIND; j++) {
			enum kind k = (enum kind)((j + rep) % NKIND);
			double secs = 0;
			size_t round;

			for (round = 0; round < rounds; round++) {
				if (round)
					trio_close(&s, k);
				trio_open(&s, k);
				secs += time_appends(&s, k, 0, n);
			}
			record(&b->cell[E_APPEND][si][k], n * rounds, secs);
		}
		for (j = 0; j < NKIND; j++) {
			enum kind k = (enum kind)((j + rep) % NKIND);

			record(&b->cell[E_LOOKUP][si][k], nl_ops,
			       time_lookups(&s, k, loffs, nl_ops, &lsum[k]));
		}
		for (j = 0; j < NKIND; j++) {
			enum kind k = (enum kind)((j + rep) % NKIND);

			record(&b->cell[E_RANGE][si][k], nr_ops,
			       time_ranges(&s, k, roffs, nr_ops, &rsum[k]));
		}
		for (j = 1; j < NKIND; j++) {
			if (lsum[j] != lsum[K_FLEXTREE] || rsum[j] != rsum[K_FLEXTREE])
				die("%s: %s timed results differ from flextree's (lookup sum %" PRIu64
				    " vs %" PRIu64 ", range sum %" PRIu64 " vs %" PRIu64 ")",
				    what, kind_name[j], lsum[j], lsum[K_FLEXTREE], rsum[j],
				    rsum[K_FLEXTREE]);
			verify_pair(what, &s, &s, (enum kind)j, b->seed + (uint64_t)rep);
		}
		verify_flextree(what, &s);
		for (j = 0; j < NKIND; j++)
			trio_close(&s, (enum kind)j);
	}
	free(loffs);
	free(roffs);
	report(b, E_APPEND, si);
	report(b, E_LOOKUP, si);
	report(b, E_RANGE, si);
}

/* ---- header, summary --------------------------------------------------------- */

static void print_header(const struct bench *b)
{
	char cpu[256], date[64], nl[16];
	int i;

	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	printf("flextree_bench: FlexTree vs B+-tree vs sorted array (FlexSpace paper, Table 1)\n");
	print_build_mode();
	printf("library:  flex %s\n", flex_version(NULL, NULL, NULL));
	printf("cpu:      %s\n", cpu);
	printf("date:     %s\n", date);
	printf("config:   seed %" PRIu64 ", %d rep%s (median), extent %u B, node cap %d, sizes",
	       b->seed, b->reps, b->reps == 1 ? "" : "s", EXT_LEN, BT_LEAF_CAP);
	for (i = 0; i < b->nsizes; i++) {
		size_label(b->sizes[i], nl, sizeof(nl));
		printf(" %s", nl);
	}
	printf("\n");
	printf("          lookup/range run on the index built by append; peer inserts above "
	       "%d extents are bounded (see notes)\n\n",
	       FULL_INSERT_MAX);
	fflush(stdout);
}

static double med(const struct bench *b, enum exp e, int si, enum kind k)
{
	return b->cell[e][si][k].have ? b->cell[e][si][k].med : 0;
}

static int size_index(const struct bench *b, size_t n)
{
	int i;

	for (i = 0; i < b->nsizes; i++)
		if (b->sizes[i] == n)
			return i;
	return -1;
}

static void print_ratio(const char *label, double num, double den, double target, int have_target)
{
	double v = den > 0 ? num / den : 0;

	printf("%-40s %10.3f", label, v);
	if (have_target)
		printf("   target >= %-6g %s\n", target, v >= target ? "PASS" : "MISS");
	else
		printf("   (no target)\n");
}

static void print_summary(const struct bench *b)
{
	char nl[16], label[96];
	int e, i, k;

	printf("\nSummary (Mops/s, median of %d)\n%-13s", b->reps, "");
	for (e = 0; e < NEXP; e++)
		for (i = 0; i < b->nsizes; i++) {
			size_label(b->sizes[i], nl, sizeof(nl));
			snprintf(label, sizeof(label), "%s %s", exp_name[e], nl);
			printf(" %11s", label);
		}
	printf("\n");
	for (k = 0; k < NKIND; k++) {
		printf("%-13s", kind_name[k]);
		for (e = 0; e < NEXP; e++)
			for (i = 0; i < b->nsizes; i++)
				printf(" %11.4g", med(b, (enum exp)e, i, (enum kind)k));
		printf("\n");
	}
	printf("(peer inserts above %d extents: bounded estimate, see the lines above)\n\n",
	       FULL_INSERT_MAX);

	printf("Targets and ratios\n");
	for (i = 0; i < b->nsizes; i++) {
		size_t n = b->sizes[i];
		double target = n <= 100000 ? 3.0 : 2.0;

		size_label(n, nl, sizeof(nl));
		snprintf(label, sizeof(label), "flextree insert %s (Mops/s)", nl);
		if (n <= 1000000)
			print_ratio(label, med(b, E_INSERT, i, K_FLEXTREE), 1.0, target, 1);
		else
			print_ratio(label, med(b, E_INSERT, i, K_FLEXTREE), 1.0, 0, 0);
	}
	i = size_index(b, 100000);
	if (i >= 0)
		print_ratio("flextree/sorted-array insert 1e5", med(b, E_INSERT, i, K_FLEXTREE),
			    med(b, E_INSERT, i, K_SARR), 100, 1);
	for (i = 0; i < b->nsizes; i++) {
		size_label(b->sizes[i], nl, sizeof(nl));
		snprintf(label, sizeof(label), "flextree/b+tree insert %s", nl);
		print_ratio(label, med(b, E_INSERT, i, K_FLEXTREE), med(b, E_INSERT, i, K_BTREE), 0,
			    0);
	}
	for (e = E_APPEND; e < NEXP; e++)
		for (i = 0; i < b->nsizes; i++) {
			size_label(b->sizes[i], nl, sizeof(nl));
			snprintf(label, sizeof(label), "flextree/b+tree %s %s", exp_name[e], nl);
			print_ratio(label, med(b, (enum exp)e, i, K_FLEXTREE),
				    med(b, (enum exp)e, i, K_BTREE), 0.9, e != E_RANGE);
		}
}

/* ---- main --------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: flextree_bench [--quick] [--large] [--seed N] [--csv FILE]\n"
		   "  --quick     N = 1e5 only, one repetition (< 20 s)\n"
		   "  --large     also N = 1e7\n"
		   "  --seed N    random seed (default 1)\n"
		   "  --csv FILE  also write the result rows as CSV\n");
}

int main(int argc, char **argv)
{
	static struct bench b;
	const char *csv = NULL;
	double t0 = now_sec();
	int i;

	b.seed = 1;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			b.quick = 1;
		} else if (!strcmp(argv[i], "--large")) {
			b.large = 1;
		} else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			char *end;

			errno = 0;
			b.seed = strtoull(argv[++i], &end, 0);
			if (errno || *end)
				die("bad seed '%s'", argv[i]);
		} else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
			csv = argv[++i];
		} else {
			usage_exit(usage, !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"));
		}
	}
	b.reps = b.quick ? 1 : REPS;
	b.sizes[b.nsizes++] = 100000;
	if (!b.quick) {
		b.sizes[b.nsizes++] = 1000000;
		if (b.large)
			b.sizes[b.nsizes++] = 10000000;
	}
	if (csv) {
		b.csv = csv_open(csv, "experiment,n,structure,mops,us_per_op,ops,reps,note\n");
	}

	print_header(&b);
	for (i = 0; i < b.nsizes; i++) {
		run_insert(&b, i);
		run_append_lookup_range(&b, i);
	}
	print_summary(&b);
	printf("\ntotal %.1f s\n", now_sec() - t0);
	if (b.csv && fclose(b.csv))
		die("writing %s failed", csv);
	return 0;
}
