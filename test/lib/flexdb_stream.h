/*
 * flexdb_stream.h - a seeded FlexDB operation stream (puts with values of
 * mixed sizes, deletes, batches with repeated keys, syncs) that a forked
 * child and the parent expand identically, the model states it passes
 * through, and the check that a recovered store is one of them.
 *
 * Range deletes span a few neighbouring keys of the (sorted) pool, alone
 * or inside batches.
 *
 * The property the crash and fault suites check: the recovered store
 * equals the model after a single prefix of the stream, ops 1..k with
 * lo <= k <= hi, lo being the last operation acknowledged and hi the last
 * one started.  A batch is one operation, so a partly applied batch
 * matches no prefix; so does a lost acknowledged write, a resurrected
 * delete or a reordered replay.  States are compared by the order-free
 * digest of flexdb_model.h plus the pair count.
 *
 * Compiled once (flexdb_stream.c) into the tests' support archive.
 */
#ifndef FLEX_TEST_FLEXDB_STREAM_H
#define FLEX_TEST_FLEXDB_STREAM_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "crashio.h"
#include "flexdb.h"
#include "flexdb_model.h"

/* ---- the operation stream ------------------------------------------------------ */

/* COP_COMPACT: flexdb_compact, which changes no pair and syncs nothing. */
enum { COP_PUT, COP_DEL, COP_BATCH, COP_SYNC, COP_DELRANGE, COP_COMPACT };

/* del: 0 a put, 1 a delete, 2 a range delete of [k, v). */
typedef void (*cop_fn)(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		       uint32_t vn);

struct dbapply {
	struct flexdb *db;
	struct flexdb_batch *b; /* NULL: direct puts and deletes */
	int rc;
};

/* Runs operation i on the store: 0 or the status. */
int cop_run_db(struct flexdb *db, struct flexdb_batch *b, const struct keypool *pool,
	       uint64_t stream_seed, long i, uint8_t *vbuf, int *type);

void cop_run_model(struct fmodel *m, const struct keypool *pool, uint64_t stream_seed, long i,
		   uint8_t *vbuf);

/* Digests (and pair counts) of the states after ops 0..hi of a stream
 * starting from model m0. */
void stream_digests(const struct fmodel *m0, const struct keypool *pool, uint64_t stream_seed,
		    long hi, uint64_t *dig, size_t *cnt, uint8_t *vbuf);

/* The newest k in [lo, hi] whose state matches, or -1 with a message
 * naming an older match (lost acknowledged operations) if there is one. */
long match_state(const uint64_t *dig, const size_t *cnt, long lo, long hi, uint64_t d, size_t n,
		 char *msg, size_t cap);

/* Opens dir, checks it and digests it.  0, or 1 with msg. */
int recover_digest(const char *dir, const struct flexdb_options *opt, uint64_t *d, size_t *n,
		   struct fmodel *load, struct flexdb_stats *st, char *msg, size_t cap);

#endif /* FLEX_TEST_FLEXDB_STREAM_H */
