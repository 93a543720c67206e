/*
 * ycsb_engines.h - the engines ycsb_bench compares, behind kv_engines.h's
 * ops table: FlexDB and RocksDB (from kv_engines.h), LevelDB and LMDB.
 *
 * LevelDB: LRU cache of cache_bytes, write_buffer_size memtable_bytes (one
 * active plus one immutable memtable), no compression, a 10-bit bloom
 * filter, default WriteOptions (no sync).  Its C API has no flush and no
 * "compaction pending" property, so quiesce waits (at most 60 s) until
 * level 0 is below its compaction trigger (4 files).
 * LMDB: one environment of LMDB_MAPSIZE (a reservation of address space,
 * not of disk or memory) opened MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS;
 * every put is its own write transaction (LMDB's single-writer lock
 * serialises concurrent writers); each client thread keeps a read
 * transaction and cursor, reset between operations and renewed for each,
 * so every read sees the latest commit.
 *
 * The including program defines MAX_THREADS (client threads at most: LMDB
 * reader slots) and includes bench_util.h first.
 */
#ifndef YCSB_ENGINES_H
#define YCSB_ENGINES_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <leveldb/c.h>
#include <lmdb.h>

#include "kv_engines.h"

#ifndef MAX_THREADS
#error "define MAX_THREADS before including ycsb_engines.h"
#endif

/* LMDB's map: a reservation of address space, not of disk or memory. */
#define LMDB_MAPSIZE ((size_t)64 << 30)

/* ---- LevelDB ------------------------------------------------------------------ */

struct level {
	leveldb_t *db;
	leveldb_options_t *opt;
	leveldb_cache_t *cache;
	leveldb_filterpolicy_t *fp;
	leveldb_writeoptions_t *wo;
	leveldb_readoptions_t *ro;
};

static void lv_open(struct store *s)
{
	struct level *l = calloc(1, sizeof(*l));
	char *err = NULL;

	if (!l)
		die("out of memory");
	l->opt = leveldb_options_create();
	leveldb_options_set_create_if_missing(l->opt, 1);
	leveldb_options_set_compression(l->opt, leveldb_no_compression);
	leveldb_options_set_write_buffer_size(l->opt, (size_t)engine_opts.memtable_bytes);
	l->cache = leveldb_cache_create_lru((size_t)engine_opts.cache_bytes);
	leveldb_options_set_cache(l->opt, l->cache);
	l->fp = leveldb_filterpolicy_create_bloom(10);
	leveldb_options_set_filter_policy(l->opt, l->fp);
	l->db = leveldb_open(l->opt, s->path, &err);
	if (err)
		die("leveldb_open %s: %s", s->path, err);
	l->wo = leveldb_writeoptions_create();
	l->ro = leveldb_readoptions_create();
	s->h = l;
}

/* LevelDB's C API has no flush and no "compaction pending" property: wait
 * (at most 60 s) until level 0 is below its compaction trigger (4 files). */
static void lv_quiesce(struct store *s)
{
	struct level *l = s->h;
	uint64_t t0 = now_ns();

	for (;;) {
		char *v = leveldb_property_value(l->db, "leveldb.num-files-at-level0");
		int n = v ? atoi(v) : 0;
		leveldb_free(v);
		if (n < 4 || secs_since(t0) > 60)
			break;
		usleep(5000);
	}
}

static void lv_close(struct store *s)
{
	struct level *l = s->h;

	leveldb_close(l->db);
	leveldb_writeoptions_destroy(l->wo);
	leveldb_readoptions_destroy(l->ro);
	leveldb_options_destroy(l->opt);
	leveldb_cache_destroy(l->cache);
	leveldb_filterpolicy_destroy(l->fp);
	free(l);
	s->h = NULL;
}

static int lv_put(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl)
{
	struct level *l = s->h;
	char *err = NULL;

	(void)tc;
	leveldb_put(l->db, l->wo, k, kl, v, vl, &err);
	if (err) {
		op_error("leveldb_put: %s", err);
		leveldb_free(err);
		return -1;
	}
	return 0;
}

static int lv_get(struct store *s, void *tc, const char *k, size_t kl, char *buf, size_t cap,
		  size_t *vl)
{
	struct level *l = s->h;
	char *err = NULL;

	(void)tc;
	char *v = leveldb_get(l->db, l->ro, k, kl, vl, &err);
	if (err) {
		op_error("leveldb_get: %s", err);
		leveldb_free(err);
		return -1;
	}
	if (!v)
		return 1;
	memcpy(buf, v, *vl < cap ? *vl : cap);
	leveldb_free(v);
	return 0;
}

static int lv_scan(struct store *s, void *tc, const char *k, size_t kl, int n, uint64_t *bytes)
{
	struct level *l = s->h;
	char *err = NULL;
	int got = 0;

	(void)tc;
	leveldb_iterator_t *it = leveldb_create_iterator(l->db, l->ro);
	for (leveldb_iter_seek(it, k, kl); got < n && leveldb_iter_valid(it);) {
		size_t a, b;
		leveldb_iter_key(it, &a);
		leveldb_iter_value(it, &b);
		*bytes += a + b;
		if (++got < n)
			leveldb_iter_next(it);
	}
	leveldb_iter_get_error(it, &err);
	leveldb_iter_destroy(it);
	if (err) {
		op_error("leveldb iterator: %s", err);
		leveldb_free(err);
		return -1;
	}
	return got;
}

/* ---- LMDB --------------------------------------------------------------------- */

struct lmdb {
	MDB_env *env;
	MDB_dbi dbi;
};

/* A client thread's read transaction (reset between operations, renewed
 * for each: every read sees the latest commit) and cursor. */
struct lmdb_tc {
	MDB_txn *rt;
	MDB_cursor *cur;
};

static void lm_open(struct store *s)
{
	struct lmdb *m = calloc(1, sizeof(*m));
	MDB_txn *t;
	int rc;

	if (!m)
		die("out of memory");
	if (mkdir(s->path, 0755) && errno != EEXIST)
		die("mkdir %s: %s", s->path, strerror(errno));
	if ((rc = mdb_env_create(&m->env)) || (rc = mdb_env_set_mapsize(m->env, LMDB_MAPSIZE)) ||
	    (rc = mdb_env_set_maxreaders(m->env, MAX_THREADS + 8)) ||
	    (rc = mdb_env_open(m->env, s->path, MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS, 0644)))
		die("mdb_env_open %s: %s", s->path, mdb_strerror(rc));
	if ((rc = mdb_txn_begin(m->env, NULL, 0, &t)) || (rc = mdb_dbi_open(t, NULL, 0, &m->dbi)) ||
	    (rc = mdb_txn_commit(t)))
		die("mdb_dbi_open: %s", mdb_strerror(rc));
	s->h = m;
}

static void lm_close(struct store *s)
{
	struct lmdb *m = s->h;

	mdb_env_close(m->env);
	free(m);
	s->h = NULL;
}

static void *lm_thread_init(struct store *s)
{
	(void)s;
	struct lmdb_tc *tc = calloc(1, sizeof(*tc));
	if (!tc)
		die("out of memory");
	return tc;
}

static void lm_thread_done(struct store *s, void *arg)
{
	struct lmdb_tc *tc = arg;

	(void)s;
	if (tc->cur)
		mdb_cursor_close(tc->cur);
	if (tc->rt)
		mdb_txn_abort(tc->rt);
	free(tc);
}

static MDB_txn *lm_read_begin(struct lmdb *m, struct lmdb_tc *tc)
{
	int rc = tc->rt ? mdb_txn_renew(tc->rt) : mdb_txn_begin(m->env, NULL, MDB_RDONLY, &tc->rt);

	if (rc) {
		op_error("lmdb read txn: %s", mdb_strerror(rc));
		return NULL;
	}
	return tc->rt;
}

static int lm_put(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl)
{
	struct lmdb *m = s->h;
	MDB_txn *t;
	MDB_val key = {kl, (void *)k}, val = {vl, (void *)v};
	int rc;

	(void)tc;
	if ((rc = mdb_txn_begin(m->env, NULL, 0, &t))) {
		op_error("mdb_txn_begin: %s", mdb_strerror(rc));
		return -1;
	}
	if ((rc = mdb_put(t, m->dbi, &key, &val, 0))) {
		mdb_txn_abort(t);
		op_error("mdb_put: %s", mdb_strerror(rc));
		return -1;
	}
	if ((rc = mdb_txn_commit(t))) {
		op_error("mdb_txn_commit: %s", mdb_strerror(rc));
		return -1;
	}
	return 0;
}

static int lm_get(struct store *s, void *arg, const char *k, size_t kl, char *buf, size_t cap,
		  size_t *vl)
{
	struct lmdb *m = s->h;
	struct lmdb_tc *tc = arg;
	MDB_val key = {kl, (void *)k}, val;
	MDB_txn *t = lm_read_begin(m, tc);

	if (!t)
		return -1;
	int rc = mdb_get(t, m->dbi, &key, &val);
	if (rc == 0) {
		*vl = val.mv_size;
		memcpy(buf, val.mv_data, val.mv_size < cap ? val.mv_size : cap);
	}
	mdb_txn_reset(t);
	if (rc && rc != MDB_NOTFOUND) {
		op_error("mdb_get: %s", mdb_strerror(rc));
		return -1;
	}
	return rc == 0 ? 0 : 1;
}

static int lm_scan(struct store *s, void *arg, const char *k, size_t kl, int n, uint64_t *bytes)
{
	struct lmdb *m = s->h;
	struct lmdb_tc *tc = arg;
	MDB_val key = {kl, (void *)k}, val;
	MDB_txn *t = lm_read_begin(m, tc);
	int got = 0, rc;

	if (!t)
		return -1;
	rc = tc->cur ? mdb_cursor_renew(t, tc->cur) : mdb_cursor_open(t, m->dbi, &tc->cur);
	if (rc) {
		mdb_txn_reset(t);
		op_error("lmdb cursor: %s", mdb_strerror(rc));
		return -1;
	}
	for (rc = mdb_cursor_get(tc->cur, &key, &val, MDB_SET_RANGE); !rc && got < n;) {
		*bytes += key.mv_size + val.mv_size;
		if (++got < n)
			rc = mdb_cursor_get(tc->cur, &key, &val, MDB_NEXT);
	}
	mdb_txn_reset(t);
	if (rc && rc != MDB_NOTFOUND) {
		op_error("mdb_cursor_get: %s", mdb_strerror(rc));
		return -1;
	}
	return got;
}

/* The engines, FlexDB first (ratios are FlexDB / each peer). */
enum { E_FLEX, E_ROCKS, E_LEVEL, E_LMDB, NENG };
static const struct engine engines[NENG] = {
    {"flexdb", fx_open, no_quiesce, fx_close, no_thread_init, no_thread_done, fx_put, fx_get,
     fx_scan},
    {"rocksdb", rk_open, rk_quiesce, rk_close, no_thread_init, no_thread_done, rk_put, rk_get,
     rk_scan},
    {"leveldb", lv_open, lv_quiesce, lv_close, no_thread_init, no_thread_done, lv_put, lv_get,
     lv_scan},
    {"lmdb", lm_open, no_quiesce, lm_close, lm_thread_init, lm_thread_done, lm_put, lm_get,
     lm_scan},
};

#endif
