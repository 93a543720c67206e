/*
 * flexdb_stream.c - the code of flexdb_stream.h.
 */
#include "flexdb_stream.h"

/* Operation i of a stream: everything derives from its seed, so the child
 * and the parent produce the same operations without sharing state. */
static int cop_type(uint64_t stream_seed, long i, uint64_t *opseed)
{
	uint64_t r = stream_seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
	rnd(&r);
	*opseed = rnd(&r);
	uint64_t k = rnd_below(&r, 100);
	return k < 50	? COP_PUT
	       : k < 69 ? COP_DEL
	       : k < 72 ? COP_DELRANGE
	       : k < 88 ? COP_BATCH
	       : k < 98 ? COP_SYNC
			: COP_COMPACT;
}

/* Above every key of the pool. */
static const uint8_t cop_top[5] = {0xff, 0xff, 0xff, 0xff, 0xff};

/* Expands a put, delete, range delete or batch into its key operations. */
static void cop_expand(const struct keypool *pool, int type, uint64_t opseed, uint8_t *vbuf,
		       cop_fn fn, void *arg)
{
	uint64_t r = opseed;
	int n = type == COP_BATCH ? 2 + (int)rnd_below(&r, 7) : 1;
	size_t keys[10];
	for (int j = 0; j < n; j++) {
		size_t ki = j && rnd_below(&r, 4) == 0 ? keys[rnd_below(&r, (uint64_t)j)]
						       : (size_t)rnd_below(&r, pool->n);
		keys[j] = ki;
		if (type == COP_DELRANGE || (type == COP_BATCH && rnd_below(&r, 100) < 5)) {
			size_t ke = ki + 1 + (size_t)rnd_below(&r, 12);
			if (ke < pool->n)
				fn(arg, 2, pool->keys[ki].k, pool->keys[ki].n, pool->keys[ke].k,
				   pool->keys[ke].n);
			else
				fn(arg, 2, pool->keys[ki].k, pool->keys[ki].n, cop_top,
				   sizeof(cop_top));
			continue;
		}
		int del = type == COP_DEL || (type == COP_BATCH && rnd_below(&r, 100) < 30);
		uint32_t vn = 0;
		if (!del) {
			vn = val_len(&r, 1);
			if (vn > (256u << 10) && rnd_below(&r, 4))
				vn = 256u << 10; /* keep most large ones moderate */
			val_fill(rnd(&r), vbuf, vn);
		}
		fn(arg, del, pool->keys[ki].k, pool->keys[ki].n, vbuf, vn);
	}
}

static void dbapply_fn(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		       uint32_t vn)
{
	struct dbapply *a = arg;
	if (a->rc)
		return;
	if (a->b)
		a->rc = del == 2 ? flexdb_batch_delete_range(a->b, k, kn, v, vn)
			: del	 ? flexdb_batch_delete(a->b, k, kn)
				 : flexdb_batch_put(a->b, k, kn, v, vn);
	else
		a->rc = del == 2 ? flexdb_delete_range(a->db, k, kn, v, vn)
			: del	 ? flexdb_delete(a->db, k, kn)
				 : flexdb_put(a->db, k, kn, v, vn);
}

static void mapply_fn(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		      uint32_t vn)
{
	struct fmodel *m = arg;
	if (del == 2)
		fm_del_range(m, k, kn, v, vn);
	else if (del)
		fm_del(m, k, kn);
	else
		fm_put(m, k, kn, v, vn);
}

int cop_run_db(struct flexdb *db, struct flexdb_batch *b, const struct keypool *pool,
	       uint64_t stream_seed, long i, uint8_t *vbuf, int *type)
{
	uint64_t os;
	*type = cop_type(stream_seed, i, &os);
	if (*type == COP_SYNC)
		return flexdb_sync(db);
	if (*type == COP_COMPACT)
		return flexdb_compact(db, (int)(os & 1));
	struct dbapply a = {db, NULL, 0};
	if (*type == COP_BATCH) {
		flexdb_batch_clear(b);
		a.b = b;
	}
	cop_expand(pool, *type, os, vbuf, dbapply_fn, &a);
	if (!a.rc && *type == COP_BATCH)
		a.rc = flexdb_write(db, b);
	return a.rc;
}

void cop_run_model(struct fmodel *m, const struct keypool *pool, uint64_t stream_seed, long i,
		   uint8_t *vbuf)
{
	uint64_t os;
	int type = cop_type(stream_seed, i, &os);
	if (type != COP_SYNC && type != COP_COMPACT)
		cop_expand(pool, type, os, vbuf, mapply_fn, m);
}

static void fm_copy(struct fmodel *dst, const struct fmodel *src)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++)
		fm_put(dst, src->e[i].k, src->e[i].kn, src->e[i].v, src->e[i].vn);
}

void stream_digests(const struct fmodel *m0, const struct keypool *pool, uint64_t stream_seed,
		    long hi, uint64_t *dig, size_t *cnt, uint8_t *vbuf)
{
	struct fmodel m;
	fm_copy(&m, m0);
	dig[0] = m.digest;
	cnt[0] = m.n;
	for (long i = 1; i <= hi; i++) {
		cop_run_model(&m, pool, stream_seed, i, vbuf);
		dig[i] = m.digest;
		cnt[i] = m.n;
	}
	fm_free(&m);
}

long match_state(const uint64_t *dig, const size_t *cnt, long lo, long hi, uint64_t d, size_t n,
		 char *msg, size_t cap)
{
	for (long k = hi; k >= lo; k--)
		if (dig[k] == d && cnt[k] == n)
			return k;
	long older = -1;
	for (long k = lo - 1; k >= 0 && older < 0; k--)
		if (dig[k] == d && cnt[k] == n)
			older = k;
	if (older >= 0)
		snprintf(
		    msg, cap,
		    "recovered state is the one after op %ld, older than the acknowledged op %ld: "
		    "acknowledged writes were lost",
		    older, lo);
	else
		snprintf(msg, cap,
			 "recovered store (%zu pairs) matches no prefix of ops in [%ld, %ld] (%zu "
			 ".. %zu "
			 "pairs there): a torn batch, a lost or resurrected write, or damaged data",
			 n, lo, hi, cnt[lo], cnt[hi]);
	return -1;
}

int recover_digest(const char *dir, const struct flexdb_options *opt, uint64_t *d, size_t *n,
		   struct fmodel *load, struct flexdb_stats *st, char *msg, size_t cap)
{
	struct flexdb *db;
	int rc = flexdb_open(dir, opt, &db);
	if (rc) {
		snprintf(msg, cap, "reopen after the crash: %s (%d)", flex_strerror(rc), rc);
		return 1;
	}
	if (st)
		flexdb_stats(db, st);
	struct why w;
	if (store_digest(db, d, n, load, &w)) {
		snprintf(msg, cap, "reading the recovered store: %s", w.msg);
		flexdb_close(db);
		return 1;
	}
	if ((rc = flexdb_check(db)) != 0) {
		snprintf(msg, cap, "flexdb_check after recovery: %s (%d)", flex_strerror(rc), rc);
		flexdb_close(db);
		return 1;
	}
	if ((rc = flexdb_close(db)) != 0) {
		snprintf(msg, cap, "close after recovery: %s (%d)", flex_strerror(rc), rc);
		return 1;
	}
	return 0;
}
