/*
 * fdb_recover.c - the WAL files a crash left, replayed at open (flexdb.c,
 * db_open; docs/DURABILITY.md, "FlexDB").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_vec.h"
#include "fdb_db.h"

/* Replayed operations reach the recovered memtable a batch at a time in
 * key order (fdb_mt_put_next): inserting them in log order, each a search
 * from the head of a skip list of random keys, was most of the time an
 * open after a crash took. */
#define FDB_REPLAY_BYTES (8u << 20)
struct replay_op {
	uint64_t pfx;	    /* 8 of the key's bytes, big-endian, 0-padded (replay_pfx) */
	const uint8_t *key; /* then the value, in the arena */
	uint32_t klen, vlen;
	uint64_t seq, ord; /* ord: position in the log, for equal keys */
	int tomb;
};
struct replay {
	struct flexdb *db;
	struct replay_op *ops;
	size_t n, cap, bytes;
	uint64_t ord;
	struct fdb_ar ar;
};

/* Keys are ordered by 8 bytes of theirs first, those after the prefix
 * every key of the batch shares (keys of one application tend to share
 * one, "user" and leading zeros, say): padding with zeros keeps memcmp's
 * order, shorter keys first, and only equal words need the whole keys.
 * The sort took a third of a reopen after a crash. */
static uint64_t replay_pfx(const uint8_t *k, uint32_t klen, uint32_t from)
{
	uint64_t p = 0;
	for (uint32_t i = from; i < from + 8; i++)
		p = p << 8 | (i < klen ? k[i] : 0);
	return p;
}

static int replay_op_cmp(const void *a, const void *b)
{
	const struct replay_op *x = a, *y = b;
	if (x->pfx != y->pfx)
		return x->pfx < y->pfx ? -1 : 1;
	int c = fdb_keycmp(x->key, x->klen, y->key, y->klen);
	if (c)
		return c;
	return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* Puts the buffered operations into the recovered memtable. */
static int replay_flush(struct replay *r)
{
	uint32_t common = r->n ? r->ops[0].klen : 0;
	for (size_t i = 1; i < r->n && common; i++) {
		const struct replay_op *o = &r->ops[i];
		uint32_t c = 0, lim = o->klen < common ? o->klen : common;
		while (c < lim && o->key[c] == r->ops[0].key[c])
			c++;
		common = c;
	}
	for (size_t i = 0; i < r->n; i++)
		r->ops[i].pfx = replay_pfx(r->ops[i].key, r->ops[i].klen, common);
	qsort(r->ops, r->n, sizeof(*r->ops), replay_op_cmp);
	struct fdb_mt_finger f = {0};
	int rc = 0;
	for (size_t i = 0; i < r->n && !rc; i++) {
		const struct replay_op *o = &r->ops[i];
		rc = fdb_mt_put_next(r->db->imm->mt, &f, o->key, o->klen, o->key + o->klen, o->vlen,
				     o->tomb, o->seq);
	}
	r->n = 0;
	r->bytes = 0;
	fdb_ar_reset(&r->ar);
	return rc;
}

/* Buffers one WAL record (a whole batch) for the recovered memtable. */
static int replay_record(void *arg, uint64_t seq, const uint8_t *payload, size_t len)
{
	struct replay *r = arg;
	if (len < 4)
		return FLEX_ECORRUPT;
	uint32_t count = flex_get_le32(payload);
	size_t pos = 0;
	struct fdb_batch_op op;
	int more, rc = 0;
	uint32_t seen = 0;
	/* A range delete goes straight into the memtable (its place among
	 * the pairs is its sequence number); the record's earlier pairs it
	 * covers are dropped, as db_write dropped them. */
	struct fdb_batch_ranges br = {0};
	rc = fdb_batch_ranges_get(payload, len, &br);
	while (!rc && (more = fdb_payload_next(payload, len, &pos, &op)) == 1) {
		uint32_t i = seen++;
		r->db->recovered_ops++;
		if (op.op == FDB_OP_DEL_RANGE) {
			rc = fdb_mt_del_range(r->db->imm->mt, op.key, op.klen, op.val, op.vlen, seq);
			continue;
		}
		if (br.n && fdb_batch_point_dead(&br, i, &op))
			continue;
		if (flex_vec_reserve(&r->ops, &r->cap, r->n + 1, 4096)) {
			rc = -ENOMEM;
			break;
		}
		int tomb = op.op == FDB_OP_DEL;
		uint32_t vlen = tomb ? 0 : op.vlen;
		uint8_t *kv = fdb_ar_alloc(&r->ar, (size_t)op.klen + vlen);
		if (!kv) {
			rc = -ENOMEM;
			break;
		}
		memcpy(kv, op.key, op.klen);
		if (vlen)
			memcpy(kv + op.klen, op.val, vlen);
		r->ops[r->n++] = (struct replay_op){.key = kv,
						    .klen = op.klen,
						    .vlen = vlen,
						    .seq = seq,
						    .ord = r->ord++,
						    .tomb = tomb};
		r->bytes += (size_t)op.klen + vlen;
	}
	fdb_batch_ranges_free(&br);
	if (!rc && more < 0)
		rc = more;
	if (!rc && seen != count)
		rc = FLEX_ECORRUPT;
	if (!rc && r->bytes >= FDB_REPLAY_BYTES)
		rc = replay_flush(r);
	return rc;
}

void fdb_recover_scan(struct flexdb *db, struct fdb_recovery *rv)
{
	int rc = 0;
	if (rv->n && !(db->imm = fdb_memref_bare()))
		rc = -ENOMEM;
	if (!rc && rv->n && !(rv->sc = calloc(rv->n, sizeof(*rv->sc))))
		rc = -ENOMEM;
	struct replay r = {.db = db};
	for (size_t i = 0; i < rv->n && !rc; i++) {
		rc = fdb_wal_scan(db->io, db->dir, rv->gens[i], i + 1 == rv->n, db->read_only,
				  replay_record, &r, &rv->last, &rv->nrec, &rv->sc[i]);
		rv->nsc = i + 1;
	}
	if (!rc && r.n)
		rc = replay_flush(&r);
	free(r.ops);
	fdb_ar_free(&r.ar);
	rv->rc = rc;
}

int fdb_recover_finish(struct flexdb *db, struct fdb_recovery *rv)
{
	uint64_t *gens = rv->gens;
	size_t n = rv->n;
	int rc = 0;
	for (size_t i = 0; i < rv->nsc && !rc; i++)
		rc = fdb_walset_settle(&db->wals, &rv->sc[i], db->read_only);
	if (!rc)
		rc = rv->rc;
	free(rv->sc);
	rv->sc = NULL;
	if (!rc && db->read_only) {
		/* The replayed writes stay in the memtable for the handle's
		 * life, and the files stay for the next writable open. */
		if (db->imm && fdb_mt_count(db->imm->mt) == 0) {
			fdb_memref_put(db->imm);
			db->imm = NULL;
		}
		free(gens);
		gens = NULL;
		n = 0;
	}
	if (!rc && n > 1 && rv->nrec == 0 && fdb_mt_count(db->imm->mt) > 0) {
		/* The newest file holds nothing (its session died before a
		 * write); it goes now, and durably, before the next file is
		 * created: a file older than another is never empty, which is
		 * what lets replay tell a removed file from a missing one. */
		rc = fdb_walset_remove(&db->wals, &gens[n - 1], 1, FDB_WAL_RM_QUIET);
	}
	if (!rc && db->imm && fdb_mt_count(db->imm->mt) == 0) {
		/* Nothing to commit: the files can go now. */
		fdb_memref_put(db->imm);
		db->imm = NULL;
		rc = fdb_walset_remove(&db->wals, gens, n, FDB_WAL_RM_RECOVER);
		free(gens);
		gens = NULL;
		n = 0;
	}
	rv->gens = NULL;
	db->seq = rv->last;
	atomic_store(&db->written, rv->last);
	atomic_store(&db->visible, rv->last);
	db->synced = rv->last;
	db->wal_gen = 1;
	if (n) {
		db->wal_gen = gens[n - 1] + 1;
		db->rec_gens = gens;
		db->nrec_gens = n;
	} else {
		free(gens);
	}
	return rc;
}
