/*
 * kv_engines.c - the engine adapters of flexdb_bench and ycsb_bench
 * (settings and contract: kv_engines.h).  Compiled once, linked into both.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <leveldb/c.h>
#include <lmdb.h>
#include <rocksdb/c.h>

#include "flexdb.h"

/* Messages carry the name and process id of the program that links this. */
#include "bench_util.h"
#include "kv_engines.h"

struct engine_opts engine_opts;

void engine_opts_default(void)
{
	engine_opts.cache_bytes = (uint64_t)64 << 20;
	engine_opts.memtable_bytes = (uint64_t)32 << 20;
	engine_opts.bloom_bits = 10;
	engine_opts.rocks_compact = 0;
	engine_opts.flex_no_mmap = 0;
}

int engine_opts_arg(int argc, char **argv, int *i)
{
	const char *a = argv[*i];

	if (!strcmp(a, "--cache-mb"))
		engine_opts.cache_bytes = parse_u64(a, opt_value(argc, argv, i)) << 20;
	else if (!strcmp(a, "--memtable-mb"))
		engine_opts.memtable_bytes = parse_u64(a, opt_value(argc, argv, i)) << 20;
	else if (!strcmp(a, "--bloom-bits"))
		engine_opts.bloom_bits = (int)parse_u64(a, opt_value(argc, argv, i));
	else if (!strcmp(a, "--rocksdb-compact"))
		engine_opts.rocks_compact = 1;
	else if (!strcmp(a, "--flexdb-no-mmap"))
		engine_opts.flex_no_mmap = 1;
	else
		return 0;
	if (engine_opts.cache_bytes < (1u << 20) || engine_opts.memtable_bytes < (1u << 20))
		die("--cache-mb and --memtable-mb must be >= 1");
	return 1;
}

void op_error(const char *fmt, ...)
{
	static int reported;
	va_list ap;

	if (__atomic_fetch_add(&reported, 1, __ATOMIC_RELAXED) >= 5)
		return;
	bench_msg_prefix();
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

static void *no_thread_init(struct store *s)
{
	(void)s;
	return NULL;
}

static void no_thread_done(struct store *s, void *tc)
{
	(void)s;
	(void)tc;
}

static void no_quiesce(struct store *s)
{
	(void)s;
}

static void no_levels(struct store *s, char *buf, size_t cap)
{
	(void)s;
	if (cap)
		buf[0] = 0;
}

int kv_scan(struct store *s, void *tc, const char *k, size_t kl, int n, uint64_t *bytes)
{
	const struct engine *e = s->eng;
	void *it = e->it_open(s, tc);
	int got = 0, rc;

	if (!it)
		return -1;
	rc = e->it_seek(it, k, kl);
	while (!rc && got < n && e->it_valid(it)) {
		size_t a, b;
		e->it_key(it, &a);
		e->it_value(it, &b);
		*bytes += a + b;
		if (++got < n)
			rc = e->it_next(it);
	}
	if (e->it_close(it) || rc)
		return -1;
	return got;
}

void kv_settle(struct store *s, double *settle_s, double *reopen_s)
{
	uint64_t t0 = now_ns();

	s->eng->quiesce(s);
	s->eng->close(s);
	uint64_t t1 = now_ns();
	s->eng->open(s);
	s->eng->quiesce(s);
	if (settle_s)
		*settle_s = (double)(t1 - t0) / 1e9;
	if (reopen_s)
		*reopen_s = secs_since(t1);
}

/* ---- FlexDB ------------------------------------------------------------------- */

uint64_t kv_flex_tidy_bytes, kv_flex_gc_bytes, kv_flex_settle_data, kv_flex_settle_tree,
    kv_flex_settle_log;

static void fx_open(struct store *s)
{
	struct flexdb_options o;
	struct flexdb *db;

	memset(&o, 0, sizeof(o));
	o.cache_size = engine_opts.cache_bytes;
	o.memtable_size = engine_opts.memtable_bytes;
	o.sync_writes = 0;
	o.space.no_mmap = engine_opts.flex_no_mmap;
	int rc = flexdb_open(s->path, &o, &db);
	if (rc)
		die("flexdb_open %s: %s", s->path, flex_strerror(rc));
	s->h = db;
}

/* Commits the memtables and waits for the committer's tidying (whole,
 * with --rocksdb-compact), as RocksDB's quiesce waits for compactions. */
static void fx_quiesce(struct store *s)
{
	struct flexdb_stats a, b;
	flexdb_stats(s->h, &a);
	int rc = flexdb_compact(s->h, engine_opts.rocks_compact);
	if (rc)
		die("flexdb_compact: %s", flex_strerror(rc));
	flexdb_stats(s->h, &b);
	kv_flex_tidy_bytes += b.tidy_bytes - a.tidy_bytes;
	kv_flex_gc_bytes += b.space.gc_bytes_moved - a.space.gc_bytes_moved;
	kv_flex_settle_data += b.space.data_bytes_written - a.space.data_bytes_written;
	kv_flex_settle_tree += b.space.tree_bytes_written - a.space.tree_bytes_written;
	kv_flex_settle_log += b.space.log_bytes_written - a.space.log_bytes_written;
}

static void fx_close(struct store *s)
{
	int rc = flexdb_close(s->h);

	s->h = NULL;
	if (rc)
		die("flexdb_close: %s", flex_strerror(rc));
}

static int fx_put(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl)
{
	(void)tc;
	int rc = flexdb_put(s->h, k, kl, v, vl);
	if (rc)
		op_error("flexdb_put: %s", flex_strerror(rc));
	return rc ? -1 : 0;
}

static int fx_del(struct store *s, void *tc, const char *k, size_t kl)
{
	(void)tc;
	int rc = flexdb_delete(s->h, k, kl);
	if (rc)
		op_error("flexdb_delete: %s", flex_strerror(rc));
	return rc ? -1 : 0;
}

static int fx_get(struct store *s, void *tc, const char *k, size_t kl, char *buf, size_t cap,
		  size_t *vl)
{
	(void)tc;
	int rc = flexdb_get(s->h, k, kl, buf, cap, vl);
	if (rc < 0) {
		op_error("flexdb_get: %s", flex_strerror(rc));
		return -1;
	}
	return rc == 0 ? 0 : 1;
}

static int fx_del_range(struct store *s, void *tc, const char *a, size_t al, const char *b,
			size_t bl)
{
	(void)tc;
	int rc = flexdb_delete_range(s->h, a, al, b, bl);
	if (rc)
		op_error("flexdb_delete_range: %s", flex_strerror(rc));
	return rc ? -1 : 0;
}

static int fx_sync(struct store *s)
{
	int rc = flexdb_sync(s->h);
	if (rc)
		op_error("flexdb_sync: %s", flex_strerror(rc));
	return rc ? -1 : 0;
}

struct fx_it {
	struct flexdb_iter *it;
	int failed;
};

static void *fx_it_open(struct store *s, void *tc)
{
	struct fx_it *x = xmalloc(sizeof(*x));
	int rc;

	(void)tc;
	x->failed = 0;
	if ((rc = flexdb_iter_open(s->h, &x->it))) {
		op_error("flexdb_iter_open: %s", flex_strerror(rc));
		free(x);
		return NULL;
	}
	return x;
}

static int fx_it_seek(void *it, const char *k, size_t kl)
{
	struct fx_it *x = it;
	int rc = flexdb_iter_seek(x->it, k, kl);

	if (rc) {
		op_error("flexdb_iter_seek: %s", flex_strerror(rc));
		x->failed = 1;
	}
	return rc ? -1 : 0;
}

static int fx_it_valid(void *it)
{
	return flexdb_iter_valid(((struct fx_it *)it)->it);
}

static int fx_it_next(void *it)
{
	struct fx_it *x = it;
	int rc = flexdb_iter_next(x->it);

	if (rc) {
		op_error("flexdb_iter_next: %s", flex_strerror(rc));
		x->failed = 1;
	}
	return rc ? -1 : 0;
}

static const char *fx_it_key(void *it, size_t *len)
{
	return flexdb_iter_key(((struct fx_it *)it)->it, len);
}

static const char *fx_it_value(void *it, size_t *len)
{
	return flexdb_iter_value(((struct fx_it *)it)->it, len);
}

static int fx_it_close(void *it)
{
	struct fx_it *x = it;
	int failed = x->failed;

	flexdb_iter_close(x->it);
	free(x);
	return failed ? -1 : 0;
}

/* ---- RocksDB ------------------------------------------------------------------ */

struct rocks {
	rocksdb_t *db;
	rocksdb_options_t *opt;
	rocksdb_block_based_table_options_t *bbto;
	rocksdb_cache_t *cache;
	rocksdb_writeoptions_t *wo;
	rocksdb_readoptions_t *ro;
};

static void rk_open(struct store *s)
{
	struct rocks *r = calloc(1, sizeof(*r));
	char *err = NULL;

	if (!r)
		die("out of memory");
	r->opt = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(r->opt, 1);
	rocksdb_options_set_compression(r->opt, rocksdb_no_compression);
	rocksdb_options_set_write_buffer_size(r->opt, (size_t)engine_opts.memtable_bytes);
	rocksdb_options_set_max_write_buffer_number(r->opt, 2);
	r->bbto = rocksdb_block_based_options_create();
	r->cache = rocksdb_cache_create_lru((size_t)engine_opts.cache_bytes);
	rocksdb_block_based_options_set_block_cache(r->bbto, r->cache);
	if (engine_opts.bloom_bits > 0)
		rocksdb_block_based_options_set_filter_policy(
		    r->bbto, rocksdb_filterpolicy_create_bloom_full(engine_opts.bloom_bits));
	rocksdb_options_set_block_based_table_factory(r->opt, r->bbto);
	r->db = rocksdb_open(r->opt, s->path, &err);
	if (err)
		die("rocksdb_open %s: %s", s->path, err);
	r->wo = rocksdb_writeoptions_create();
	r->ro = rocksdb_readoptions_create();
	s->h = r;
}

static uint64_t rk_prop(rocksdb_t *db, const char *name)
{
	uint64_t v = 0;

	if (rocksdb_property_int(db, name, &v) != 0)
		return 0;
	return v;
}

static void rk_quiesce(struct store *s)
{
	struct rocks *r = s->h;
	char *err = NULL;
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();

	rocksdb_flushoptions_set_wait(fo, 1);
	rocksdb_flush(r->db, fo, &err);
	rocksdb_flushoptions_destroy(fo);
	if (err)
		die("rocksdb_flush: %s", err);
	if (engine_opts.rocks_compact)
		rocksdb_compact_range(r->db, NULL, 0, NULL, 0);
	while (rk_prop(r->db, "rocksdb.compaction-pending") ||
	       rk_prop(r->db, "rocksdb.num-running-compactions") ||
	       rk_prop(r->db, "rocksdb.num-running-flushes") ||
	       rk_prop(r->db, "rocksdb.mem-table-flush-pending"))
		usleep(5000);
}

static void rk_close(struct store *s)
{
	struct rocks *r = s->h;

	if (!r)
		return;
	rocksdb_close(r->db);
	rocksdb_writeoptions_destroy(r->wo);
	rocksdb_readoptions_destroy(r->ro);
	rocksdb_options_destroy(r->opt);
	rocksdb_block_based_options_destroy(r->bbto);
	rocksdb_cache_destroy(r->cache);
	free(r);
	s->h = NULL;
}

static int rk_put(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl)
{
	struct rocks *r = s->h;
	char *err = NULL;

	(void)tc;
	rocksdb_put(r->db, r->wo, k, kl, v, vl, &err);
	if (err) {
		op_error("rocksdb_put: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return 0;
}

static int rk_del_range(struct store *s, void *tc, const char *a, size_t al, const char *b,
			size_t bl)
{
	struct rocks *r = s->h;
	char *err = NULL;

	(void)tc;
	/* The C API reaches the default column family's DeleteRange through
	 * a write batch. */
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	rocksdb_writebatch_delete_range(wb, a, al, b, bl);
	rocksdb_write(r->db, r->wo, wb, &err);
	rocksdb_writebatch_destroy(wb);
	if (err) {
		op_error("rocksdb_write(DeleteRange): %s", err);
		rocksdb_free(err);
		return -1;
	}
	return 0;
}

static int rk_sync(struct store *s)
{
	struct rocks *r = s->h;
	char *err = NULL;

	rocksdb_flush_wal(r->db, 1, &err);
	if (err) {
		op_error("rocksdb_flush_wal: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return 0;
}

static int rk_del(struct store *s, void *tc, const char *k, size_t kl)
{
	struct rocks *r = s->h;
	char *err = NULL;

	(void)tc;
	rocksdb_delete(r->db, r->wo, k, kl, &err);
	if (err) {
		op_error("rocksdb_delete: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return 0;
}

static int rk_get(struct store *s, void *tc, const char *k, size_t kl, char *buf, size_t cap,
		  size_t *vl)
{
	struct rocks *r = s->h;
	char *err = NULL;

	(void)tc;
	rocksdb_pinnableslice_t *ps = rocksdb_get_pinned(r->db, r->ro, k, kl, &err);
	if (err) {
		op_error("rocksdb_get_pinned: %s", err);
		rocksdb_free(err);
		return -1;
	}
	if (!ps)
		return 1;
	const char *v = rocksdb_pinnableslice_value(ps, vl);
	memcpy(buf, v, *vl < cap ? *vl : cap);
	rocksdb_pinnableslice_destroy(ps);
	return 0;
}

static void *rk_it_open(struct store *s, void *tc)
{
	struct rocks *r = s->h;

	(void)tc;
	return rocksdb_create_iterator(r->db, r->ro);
}

static int rk_it_seek(void *it, const char *k, size_t kl)
{
	if (kl)
		rocksdb_iter_seek(it, k, kl);
	else
		rocksdb_iter_seek_to_first(it);
	return 0;
}

static int rk_it_valid(void *it)
{
	return rocksdb_iter_valid(it);
}

static int rk_it_next(void *it)
{
	rocksdb_iter_next(it);
	return 0;
}

static const char *rk_it_key(void *it, size_t *len)
{
	return rocksdb_iter_key(it, len);
}

static const char *rk_it_value(void *it, size_t *len)
{
	return rocksdb_iter_value(it, len);
}

static int rk_it_close(void *it)
{
	char *err = NULL;

	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err) {
		op_error("rocksdb iterator: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return 0;
}

static void rk_levels(struct store *s, char *buf, size_t cap)
{
	struct rocks *r = s->h;
	size_t l = 0;

	buf[0] = 0;
	for (int i = 0; i < 7; i++) {
		char name[64];

		snprintf(name, sizeof(name), "rocksdb.num-files-at-level%d", i);
		char *v = rocksdb_property_value(r->db, name);
		if (!v)
			continue;
		int n = atoi(v);
		rocksdb_free(v);
		if (n && l < cap)
			l += (size_t)snprintf(buf + l, cap - l, "%sL%d %d", l ? " " : "", i, n);
	}
}

void rk_version(const char *dir, char *buf, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	snprintf(buf, cap, "?");
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "OPTIONS-", 8) != 0)
			continue;
		char path[PATH_MAX + 300], line[256];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char *p = strstr(line, "rocksdb_version=");
			if (p) {
				p += strlen("rocksdb_version=");
				p[strcspn(p, " \r\n")] = 0;
				snprintf(buf, cap, "%s", p);
				break;
			}
		}
		fclose(f);
		break;
	}
	closedir(d);
}

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
	if (engine_opts.bloom_bits > 0) {
		l->fp = leveldb_filterpolicy_create_bloom(engine_opts.bloom_bits);
		leveldb_options_set_filter_policy(l->opt, l->fp);
	}
	l->db = leveldb_open(l->opt, s->path, &err);
	if (err)
		die("leveldb_open %s: %s", s->path, err);
	l->wo = leveldb_writeoptions_create();
	l->ro = leveldb_readoptions_create();
	s->h = l;
}

static void lv_quiesce(struct store *s)
{
	struct level *l = s->h;
	uint64_t t0 = now_ns();

	if (engine_opts.rocks_compact)
		leveldb_compact_range(l->db, NULL, 0, NULL, 0);
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
	if (l->fp)
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

static int lv_del(struct store *s, void *tc, const char *k, size_t kl)
{
	struct level *l = s->h;
	char *err = NULL;

	(void)tc;
	leveldb_delete(l->db, l->wo, k, kl, &err);
	if (err) {
		op_error("leveldb_delete: %s", err);
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

static void *lv_it_open(struct store *s, void *tc)
{
	struct level *l = s->h;

	(void)tc;
	return leveldb_create_iterator(l->db, l->ro);
}

static int lv_it_seek(void *it, const char *k, size_t kl)
{
	if (kl)
		leveldb_iter_seek(it, k, kl);
	else
		leveldb_iter_seek_to_first(it);
	return 0;
}

static int lv_it_valid(void *it)
{
	return leveldb_iter_valid(it);
}

static int lv_it_next(void *it)
{
	leveldb_iter_next(it);
	return 0;
}

static const char *lv_it_key(void *it, size_t *len)
{
	return leveldb_iter_key(it, len);
}

static const char *lv_it_value(void *it, size_t *len)
{
	return leveldb_iter_value(it, len);
}

static int lv_it_close(void *it)
{
	char *err = NULL;

	leveldb_iter_get_error(it, &err);
	leveldb_iter_destroy(it);
	if (err) {
		op_error("leveldb iterator: %s", err);
		leveldb_free(err);
		return -1;
	}
	return 0;
}

static void lv_levels(struct store *s, char *buf, size_t cap)
{
	struct level *l = s->h;
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < 7; i++) {
		char name[64];

		snprintf(name, sizeof(name), "leveldb.num-files-at-level%d", i);
		char *v = leveldb_property_value(l->db, name);
		if (!v)
			continue;
		int f = atoi(v);
		leveldb_free(v);
		if (f && n < cap)
			n += (size_t)snprintf(buf + n, cap - n, "%sL%d %d", n ? " " : "", i, f);
	}
}

/* ---- LMDB --------------------------------------------------------------------- */

struct lmdb {
	MDB_env *env;
	MDB_dbi dbi;
};

/* An iterator: its read transaction and cursor, and where it stands. */
struct lm_it {
	struct lmdb *m;
	struct lmdb_tc *tc; /* the thread's, or NULL */
	MDB_txn *t;
	MDB_cursor *cur;
	MDB_val k, v;
	int valid, failed;
};

/* A client thread's read transaction for gets (reset between operations,
 * renewed for each: every read sees the latest commit), and its last
 * closed iterator, kept with its transaction reset for the next one. */
struct lmdb_tc {
	MDB_txn *rt;
	struct lm_it *spare;
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
	/* Reader slots: a get transaction and an iterator per thread. */
	if ((rc = mdb_env_create(&m->env)) ||
	    (rc = mdb_env_set_mapsize(m->env, (size_t)KV_LMDB_MAPSIZE)) ||
	    (rc = mdb_env_set_maxreaders(m->env, 2 * KV_MAX_THREADS + 8)) ||
	    (rc = mdb_env_open(m->env, s->path,
			       MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS | MDB_NORDAHEAD, 0644)))
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

static void lm_it_free(struct lm_it *x)
{
	if (x->cur)
		mdb_cursor_close(x->cur);
	if (x->t)
		mdb_txn_abort(x->t);
	free(x);
}

static void lm_thread_done(struct store *s, void *arg)
{
	struct lmdb_tc *tc = arg;

	(void)s;
	if (tc->spare)
		lm_it_free(tc->spare);
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

/* One write transaction: a put (v != NULL) or a delete. */
static int lm_write(struct store *s, const char *k, size_t kl, const char *v, size_t vl)
{
	struct lmdb *m = s->h;
	MDB_txn *t;
	MDB_val key = {kl, (void *)k}, val = {vl, (void *)v};
	int rc;

	if ((rc = mdb_txn_begin(m->env, NULL, 0, &t))) {
		op_error("mdb_txn_begin: %s", mdb_strerror(rc));
		return -1;
	}
	rc = v ? mdb_put(t, m->dbi, &key, &val, 0) : mdb_del(t, m->dbi, &key, NULL);
	if (rc && !(rc == MDB_NOTFOUND && !v)) {
		mdb_txn_abort(t);
		op_error("%s: %s", v ? "mdb_put" : "mdb_del", mdb_strerror(rc));
		return -1;
	}
	if ((rc = mdb_txn_commit(t))) {
		op_error("mdb_txn_commit: %s", mdb_strerror(rc));
		return -1;
	}
	return 0;
}

static int lm_put(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl)
{
	(void)tc;
	return lm_write(s, k, kl, v ? v : "", vl);
}

static int lm_del(struct store *s, void *tc, const char *k, size_t kl)
{
	(void)tc;
	return lm_write(s, k, kl, NULL, 0);
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

static void *lm_it_open(struct store *s, void *arg)
{
	struct lmdb *m = s->h;
	struct lmdb_tc *tc = arg;
	struct lm_it *x = tc ? tc->spare : NULL;
	int rc;

	if (x) {
		tc->spare = NULL;
		if ((rc = mdb_txn_renew(x->t)) || (rc = mdb_cursor_renew(x->t, x->cur))) {
			op_error("lmdb iterator renew: %s", mdb_strerror(rc));
			lm_it_free(x);
			return NULL;
		}
	} else {
		x = calloc(1, sizeof(*x));
		if (!x)
			die("out of memory");
		if ((rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &x->t)) ||
		    (rc = mdb_cursor_open(x->t, m->dbi, &x->cur))) {
			op_error("lmdb iterator: %s", mdb_strerror(rc));
			lm_it_free(x);
			return NULL;
		}
	}
	x->m = m;
	x->tc = tc;
	x->valid = x->failed = 0;
	return x;
}

static int lm_it_step(struct lm_it *x, MDB_cursor_op op)
{
	int rc = mdb_cursor_get(x->cur, &x->k, &x->v, op);

	x->valid = rc == 0;
	if (rc && rc != MDB_NOTFOUND) {
		op_error("mdb_cursor_get: %s", mdb_strerror(rc));
		x->failed = 1;
		return -1;
	}
	return 0;
}

static int lm_it_seek(void *it, const char *k, size_t kl)
{
	struct lm_it *x = it;

	if (!kl)
		return lm_it_step(x, MDB_FIRST);
	x->k.mv_size = kl;
	x->k.mv_data = (void *)k;
	return lm_it_step(x, MDB_SET_RANGE);
}

static int lm_it_valid(void *it)
{
	return ((struct lm_it *)it)->valid;
}

static int lm_it_next(void *it)
{
	return lm_it_step(it, MDB_NEXT);
}

static const char *lm_it_key(void *it, size_t *len)
{
	struct lm_it *x = it;

	*len = x->k.mv_size;
	return x->k.mv_data;
}

static const char *lm_it_value(void *it, size_t *len)
{
	struct lm_it *x = it;

	*len = x->v.mv_size;
	return x->v.mv_data;
}

static int lm_it_close(void *it)
{
	struct lm_it *x = it;
	int failed = x->failed;

	if (x->tc && !x->tc->spare) {
		mdb_txn_reset(x->t);
		x->tc->spare = x;
	} else {
		lm_it_free(x);
	}
	return failed ? -1 : 0;
}

void kv_versions(char *leveldb, size_t lcap, char *lmdb, size_t mcap)
{
	int a, b, c;

	snprintf(leveldb, lcap, "%d.%d", leveldb_major_version(), leveldb_minor_version());
	mdb_version(&a, &b, &c);
	snprintf(lmdb, mcap, "%d.%d.%d", a, b, c);
}

/* ---- the table ---------------------------------------------------------------- */

const struct engine engines[NENG] = {
    [E_FLEX] = {"flexdb", fx_open, fx_quiesce, fx_close, no_thread_init, no_thread_done, fx_put,
		fx_del, fx_get, fx_it_open, fx_it_seek, fx_it_valid, fx_it_next, fx_it_key,
		fx_it_value, fx_it_close, no_levels, fx_del_range, fx_sync},
    [E_ROCKS] = {"rocksdb", rk_open, rk_quiesce, rk_close, no_thread_init, no_thread_done,
		 rk_put, rk_del, rk_get, rk_it_open, rk_it_seek, rk_it_valid, rk_it_next,
		 rk_it_key, rk_it_value, rk_it_close, rk_levels, rk_del_range, rk_sync},
    [E_LEVEL] = {"leveldb", lv_open, lv_quiesce, lv_close, no_thread_init, no_thread_done,
		 lv_put, lv_del, lv_get, lv_it_open, lv_it_seek, lv_it_valid, lv_it_next,
		 lv_it_key, lv_it_value, lv_it_close, lv_levels},
    [E_LMDB] = {"lmdb", lm_open, no_quiesce, lm_close, lm_thread_init, lm_thread_done, lm_put,
		lm_del, lm_get, lm_it_open, lm_it_seek, lm_it_valid, lm_it_next, lm_it_key,
		lm_it_value, lm_it_close, no_levels},
};
