/*
 * flexdb_model.h - what the two FlexDB suites share: a sorted-array model
 * of the store, an order-independent digest of a state, a deterministic
 * key pool full of awkward keys (NUL and 0xFF bytes, keys that are
 * prefixes of each other, 1-byte and FLEXDB_MAX_KEY-byte keys), seeded
 * values of mixed sizes, option presets, and a reader that walks a whole
 * store checking key order.
 *
 * Compiled once (flexdb_model.c) into the tests' support archive.  Seeds,
 * scale, randomness and temporary directories come from crashio.h.
 */
#ifndef FLEX_TEST_FLEXDB_MODEL_H
#define FLEX_TEST_FLEXDB_MODEL_H

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "crashio.h"
#include "flexdb.h"

/* ---- options ----------------------------------------------------------------- */

/* Overridable with -D to bisect a failure by configuration. */
#ifndef FDB_TINY_MEMTABLE
#define FDB_TINY_MEMTABLE (64u << 10)
#endif
#ifndef FDB_TINY_CACHE
#define FDB_TINY_CACHE (1u << 20)
#endif
#ifndef FDB_TINY_SEGMENT
#define FDB_TINY_SEGMENT (64u << 10)
#endif
#ifndef FDB_TINY_LOG
#define FDB_TINY_LOG (64u << 10)
#endif

/* Everything tiny: the committer, interval splits and merges, cache
 * eviction and FlexSpace GC and tree commits run all the time. */
struct flexdb_options fdb_tiny_opts(void);

struct flexdb_options fdb_default_opts(void);

/* ---- keys and values ---------------------------------------------------------- */

struct fkey {
	uint8_t *k;
	uint32_t n;
};

int fkey_cmp(const void *a, uint32_t an, const void *b, uint32_t bn);

struct keypool {
	struct fkey *keys;
	size_t n, cap;
};

/* A deterministic pool of about `want` distinct keys (depends only on
 * want and pseed), sorted. */
void pool_make(struct keypool *p, size_t want, uint64_t pseed);

void pool_free(struct keypool *p);

/* A value length: empty, small, a few KB, now and then large, rarely up
 * to 1 MiB (bigpm: large ones per mille). */
uint32_t val_len(uint64_t *r, int bigpm);

/* Fills buf with len bytes derived from vseed. */
void val_fill(uint64_t vseed, uint8_t *buf, uint32_t len);

/* ---- the model: a sorted array ------------------------------------------------ */

struct ment {
	uint8_t *k;
	uint32_t kn;
	uint8_t *v;
	uint32_t vn;
};

struct fmodel {
	struct ment *e;
	size_t n, cap;
	uint64_t digest; /* sum of pair hashes: independent of order */
};

uint64_t pair_hash(const void *k, uint32_t kn, const void *v, uint32_t vn);

/* Index of the first entry >= key. */
size_t fm_lower(const struct fmodel *m, const void *k, uint32_t kn);

const struct ment *fm_get(const struct fmodel *m, const void *k, uint32_t kn);

void fm_put(struct fmodel *m, const void *k, uint32_t kn, const void *v, uint32_t vn);

void fm_del(struct fmodel *m, const void *k, uint32_t kn);

/* Removes every key k with s <= k < e. */
void fm_del_range(struct fmodel *m, const void *s, uint32_t sn, const void *e, uint32_t en);

void fm_free(struct fmodel *m);

/* ---- reading a whole store --------------------------------------------------- */

/* Walks the store forwards: keys strictly increasing, the order-free
 * digest and count of its pairs.  With m non-NULL, also loads it into the
 * (empty) model.  0, or 1 with w->msg set. */
int store_digest(struct flexdb *db, uint64_t *digest, size_t *count, struct fmodel *m,
		 struct why *w);

void fdb_tmp_track(const char *dir);

void fdb_tmp_cleanup(void);

/* A temporary store directory. */
void fdb_tmpdir(char *out, size_t n, const char *tag);

#endif /* FLEX_TEST_FLEXDB_MODEL_H */
