/*
 * flextree_model.h - what the two FlexTree suites share: test_flextree.c
 * (the tree in memory) and test_flextree_file.c (the tree in a file).
 *
 * Correctness is judged against a brute-force twin: a sorted array of extents
 * (logical offsets implied by order) where every operation is the obvious
 * O(N) array edit.  The tree is allowed to merge physically contiguous
 * extents where the model does not, so the two are compared as MAPPINGS: the
 * byte-level function logical -> physical, normalised by joining adjacent
 * physically contiguous pieces on both sides.  Tags are compared as the set
 * of (logical start, tag) points, which merging cannot change.
 *
 * Also here: seeded randomness (FLEX_TEST_SEED=N replays a run,
 * FLEX_TEST_SCALE=K multiplies the work, `make stress` uses 50), random
 * operations applied to the model and the tree alike, assertion helpers, and
 * temporary directories for the persistent tests.
 *
 * Both suites are also built against a tree compiled with FT_LEAF_CAP=6 and
 * FT_INTERNAL_CAP=5 (the *_tiny binaries), so that splits, merges, root
 * changes and partial-offset rebases happen after a handful of extents.  The
 * suites see the same -DFT_LEAF_CAP and use it (TINY) only to size workloads
 * and to check the tree more often.
 *
 * Compiled once (flextree_model.c) into an archive of its own that only
 * the FlexTree suites link: its seeds, scale and model functions have the
 * names of crashio.h's.  Nothing in flextree_model.c depends on the node
 * capacities, so the *_tiny binaries link the same archive.
 */
#ifndef FLEX_TEST_FLEXTREE_MODEL_H
#define FLEX_TEST_FLEXTREE_MODEL_H

#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flextree.h"

#ifdef FT_LEAF_CAP
#define TINY 1
#else
#define TINY 0
#endif

#define HOLE FLEXTREE_HOLE
#define U(x) ((unsigned long long)(x))

/* ------------------------------------------------------------------------ */
/* Random numbers, seeds, scale                                              */
/* ------------------------------------------------------------------------ */

struct rng {
	uint64_t s;
};

/* splitmix64: tiny, fast and fully determined by the seed. */
static inline uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
	return n ? rng_next(r) % n : 0;
}

/* Uniform in [lo, hi]; hi - lo must be below UINT64_MAX. */
static inline uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_below(r, hi - lo + 1);
}

static inline bool rng_pct(struct rng *r, unsigned pct)
{
	return rng_below(r, 100) < pct;
}

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The seed of a random test: FLEX_TEST_SEED when set, else the clock. */
uint64_t test_seed(const char *test);

uint64_t test_scale(void);

void *xrealloc(void *p, size_t n);

/* A failed comparison in a helper prints where and why, and makes the helper
 * return its line number; tests assert that helpers return 0.  Helpers do not
 * use cr_assert so that forked children can run them too. */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			rc = __LINE__;                                                             \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* ------------------------------------------------------------------------ */
/* The model: a sorted array of extents                                      */
/* ------------------------------------------------------------------------ */

struct mext {
	uint64_t poff; /* HOLE for a hole */
	uint64_t len;  /* may exceed 32 bits: the model never splits for size */
	uint16_t tag;
};

struct model {
	struct mext *v;
	size_t n, cap;
	uint64_t size;
};

void model_reserve(struct model *m, size_t need);

void model_free(struct model *m);

/* Logical start of extent i (m->size for i == m->n). */
uint64_t model_start(const struct model *m, size_t i);

void model_insert(struct model *m, uint64_t loff, uint64_t poff, uint64_t len);

void model_remap(struct model *m, uint64_t loff, uint64_t len, uint64_t poff);

void model_tag_set(struct model *m, uint64_t loff, uint16_t tag);

/* ------------------------------------------------------------------------ */
/* Normalised mappings                                                        */
/* ------------------------------------------------------------------------ */

struct span {
	uint64_t loff, poff, len;
};

struct spans {
	struct span *v;
	size_t n, cap;
};

/* ------------------------------------------------------------------------ */
/* Reading the tree                                                           */
/* ------------------------------------------------------------------------ */

struct exts {
	struct flextree_extent *v;
	size_t n, cap;
};

int collect_cb(void *arg, const struct flextree_extent *e);

/*
 * Compares everything observable about t with m: size, the deep check,
 * scan == full query, normalised mappings, extent count in stats, tag
 * points, random lookups and tag_gets (against the model and against the
 * tree's own scan), one sub-range query with a small cap and one sub-range
 * scan.  max_extent (0: none) bounds every mapped extent.
 * Returns 0 or the line of the first failed check.
 */
int compare_tree_ext(const struct flextree *t, const struct model *m, struct rng *r,
		     uint32_t max_extent);

/* ------------------------------------------------------------------------ */
/* Random operations, applied to the model and (when t != NULL) the tree.     */
/* Every random draw happens whether or not t is given, so a model-only      */
/* replay with the same seed reproduces the same states.                      */
/* ------------------------------------------------------------------------ */

struct opcfg {
	uint32_t max_extent; /* option given to the tree; 0: default */
	uint64_t max_len;    /* longest insert/remap; 0: 1 MiB */
	size_t soft_extents; /* above this many model extents, shrink */
};

struct opstats {
	uint64_t inserts, collapses, remaps, tag_sets, reads, errors;
};

int op_insert(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
	      bool allow_bad, struct opstats *os);

/* Reads checked against the model only: lookup, tag_get, a capped query, a
 * partial scan that may be stopped early. */
struct stop_scan {
	struct flextree_extent v[64];
	size_t calls, stop_after;
};

/* A tree mapping piece [loff, loff+len) -> poff must agree with the model. */
int piece_matches_model(const struct model *m, uint64_t loff, uint64_t poff, uint64_t len);

int op_read(struct rng *r, const struct model *m, const struct flextree *t, unsigned kind);

int random_op(struct rng *r, struct model *m, struct flextree *t, const struct opcfg *cfg,
	      struct opstats *os);

/* ------------------------------------------------------------------------ */
/* Test plumbing                                                              */
/* ------------------------------------------------------------------------ */

struct flextree *open_ok(const char *path, const struct flextree_options *o);

struct flextree *open_vol(void);

void assert_model(const struct flextree *t, const struct model *m, struct rng *r, const char *what,
		  uint64_t seed);

void assert_check(const struct flextree *t);

struct flextree_stats stats_of(const struct flextree *t);

void ins(struct flextree *t, struct model *m, uint64_t loff, uint64_t poff, uint64_t len);

void col(struct flextree *t, struct model *m, uint64_t loff, uint64_t len);

void expect_lookup(const struct flextree *t, uint64_t loff, uint64_t poff, uint64_t run);

/* Builds n non-contiguous extents of lengths 1..max_len at the end. */
void build_extents(struct flextree *t, struct model *m, struct rng *r, size_t n, uint64_t max_len);

/* Temporary directories ---------------------------------------------------- */

struct tmpd {
	char dir[64];
	char path[128];
};

#endif /* FLEX_TEST_FLEXTREE_MODEL_H */
