/*
 * kv_engines.h - FlexDB and RocksDB behind one small ops table, opened
 * with the same budget: the adapters flexdb_bench and ycsb_bench share,
 * so that both compare the engines under the same settings.
 *
 * Settings (engine_opts, filled in by the program before the first open):
 *   - FlexDB: cache_size = cache_bytes, memtable_size = memtable_bytes
 *     (two memtables), sync_writes = 0; everything else its defaults.
 *   - RocksDB: LRU block cache of cache_bytes, write_buffer_size
 *     memtable_bytes x max_write_buffer_number 2, no compression, a full
 *     bloom filter of bloom_bits bits per key (none when 0), default
 *     WriteOptions (no sync) and ReadOptions; everything else its defaults.
 * quiesce brings a store to a quiet state: RocksDB flushes its memtables
 * (waiting), with rocks_compact compacts the whole key space, and waits
 * until no flush or compaction is pending or running; FlexDB has nothing
 * to wait for (its close commits the memtables).
 *
 * The per-operation adapters return 0, 1 for "not found" (get), or -1
 * after reporting the error with op_error (the first few per process, to
 * stderr); a scan returns the pairs it read or -1.  Handles are shared by
 * the client threads; tc is a thread's own context from thread_init, NULL
 * where an engine needs none.  Open, close and quiesce failures are fatal.
 *
 * Include after bench_util.h.
 */
#ifndef KV_ENGINES_H
#define KV_ENGINES_H

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "flexdb.h"

struct engine_opts {
	uint64_t cache_bytes, memtable_bytes;
	int bloom_bits;	   /* RocksDB bloom filter bits per key, 0: none */
	int rocks_compact; /* quiesce: also compact RocksDB's whole key space */
};

static struct engine_opts engine_opts;

/* The defaults: 64 MiB of cache, two 32 MiB memtables, 10-bit blooms. */
BENCH_UNUSED static void engine_opts_default(void)
{
	engine_opts.cache_bytes = (uint64_t)64 << 20;
	engine_opts.memtable_bytes = (uint64_t)32 << 20;
	engine_opts.bloom_bits = 10;
}

/* --cache-mb N and --memtable-mb N: whether argv[*i] was one of them. */
BENCH_UNUSED static int engine_opts_arg(int argc, char **argv, int *i)
{
	const char *a = argv[*i];

	if (!strcmp(a, "--cache-mb"))
		engine_opts.cache_bytes = parse_u64(a, opt_value(argc, argv, i)) << 20;
	else if (!strcmp(a, "--memtable-mb"))
		engine_opts.memtable_bytes = parse_u64(a, opt_value(argc, argv, i)) << 20;
	else
		return 0;
	if (engine_opts.cache_bytes < (1u << 20) || engine_opts.memtable_bytes < (1u << 20))
		die("--cache-mb and --memtable-mb must be >= 1");
	return 1;
}

/* One store of one engine. */
struct store {
	const struct engine *eng;
	char path[PATH_MAX];
	void *h;
};

struct engine {
	const char *name;
	void (*open)(struct store *s);
	void (*quiesce)(struct store *s); /* wait for background work */
	void (*close)(struct store *s);
	void *(*thread_init)(struct store *s);
	void (*thread_done)(struct store *s, void *tc);
	int (*put)(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl);
	int (*get)(struct store *s, void *tc, const char *k, size_t kl, char *buf, size_t cap,
		   size_t *vl);
	int (*scan)(struct store *s, void *tc, const char *k, size_t kl, int n, uint64_t *bytes);
};

/* Reports the first few per-operation errors of a process; the ops count
 * them. */
__attribute__((format(printf, 1, 2))) BENCH_UNUSED static void op_error(const char *fmt, ...)
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

BENCH_UNUSED static void *no_thread_init(struct store *s)
{
	(void)s;
	return NULL;
}

BENCH_UNUSED static void no_thread_done(struct store *s, void *tc)
{
	(void)s;
	(void)tc;
}

BENCH_UNUSED static void no_quiesce(struct store *s)
{
	(void)s;
}

/* ---- FlexDB ------------------------------------------------------------------- */

BENCH_UNUSED static void fx_open(struct store *s)
{
	struct flexdb_options o;
	struct flexdb *db;

	memset(&o, 0, sizeof(o));
	o.cache_size = engine_opts.cache_bytes;
	o.memtable_size = engine_opts.memtable_bytes;
	o.sync_writes = 0;
	int rc = flexdb_open(s->path, &o, &db);
	if (rc)
		die("flexdb_open %s: %s", s->path, flex_strerror(rc));
	s->h = db;
}

BENCH_UNUSED static void fx_close(struct store *s)
{
	int rc = flexdb_close(s->h);

	s->h = NULL;
	if (rc)
		die("flexdb_close: %s", flex_strerror(rc));
}

BENCH_UNUSED static int fx_put(struct store *s, void *tc, const char *k, size_t kl, const char *v,
			       size_t vl)
{
	(void)tc;
	int rc = flexdb_put(s->h, k, kl, v, vl);
	if (rc)
		op_error("flexdb_put: %s", flex_strerror(rc));
	return rc ? -1 : 0;
}

BENCH_UNUSED static int fx_get(struct store *s, void *tc, const char *k, size_t kl, char *buf,
			       size_t cap, size_t *vl)
{
	(void)tc;
	int rc = flexdb_get(s->h, k, kl, buf, cap, vl);
	if (rc < 0) {
		op_error("flexdb_get: %s", flex_strerror(rc));
		return -1;
	}
	return rc == 0 ? 0 : 1;
}

BENCH_UNUSED static int fx_scan(struct store *s, void *tc, const char *k, size_t kl, int n,
				uint64_t *bytes)
{
	struct flexdb_iter *it;
	int got = 0, rc;

	(void)tc;
	rc = flexdb_iter_open(s->h, &it);
	if (rc) {
		op_error("flexdb_iter_open: %s", flex_strerror(rc));
		return -1;
	}
	rc = flexdb_iter_seek(it, k, kl);
	while (!rc && got < n && flexdb_iter_valid(it)) {
		size_t a, b;
		flexdb_iter_key(it, &a);
		flexdb_iter_value(it, &b);
		*bytes += a + b;
		if (++got < n)
			rc = flexdb_iter_next(it);
	}
	flexdb_iter_close(it);
	if (rc) {
		op_error("flexdb iterator: %s", flex_strerror(rc));
		return -1;
	}
	return got;
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

BENCH_UNUSED static void rk_open(struct store *s)
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

BENCH_UNUSED static uint64_t rk_prop(rocksdb_t *db, const char *name)
{
	uint64_t v = 0;

	if (rocksdb_property_int(db, name, &v) != 0)
		return 0;
	return v;
}

BENCH_UNUSED static void rk_quiesce(struct store *s)
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

BENCH_UNUSED static void rk_close(struct store *s)
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

BENCH_UNUSED static int rk_put(struct store *s, void *tc, const char *k, size_t kl, const char *v,
			       size_t vl)
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

BENCH_UNUSED static int rk_get(struct store *s, void *tc, const char *k, size_t kl, char *buf,
			       size_t cap, size_t *vl)
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

BENCH_UNUSED static int rk_scan(struct store *s, void *tc, const char *k, size_t kl, int n,
				uint64_t *bytes)
{
	struct rocks *r = s->h;
	char *err = NULL;
	int got = 0;

	(void)tc;
	rocksdb_iterator_t *it = rocksdb_create_iterator(r->db, r->ro);
	for (rocksdb_iter_seek(it, k, kl); got < n && rocksdb_iter_valid(it);) {
		size_t a, b;
		rocksdb_iter_key(it, &a);
		rocksdb_iter_value(it, &b);
		*bytes += a + b;
		if (++got < n)
			rocksdb_iter_next(it);
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err) {
		op_error("rocksdb iterator: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return got;
}

/* RocksDB's version (its C API has no version call): rocksdb_version= of
 * the OPTIONS file a store in dir wrote at open; "?" if none. */
BENCH_UNUSED static void rk_version(const char *dir, char *buf, size_t cap)
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

BENCH_UNUSED static const struct engine kv_flexdb = {"flexdb", fx_open,	       no_quiesce,
						     fx_close, no_thread_init, no_thread_done,
						     fx_put,   fx_get,	       fx_scan};
BENCH_UNUSED static const struct engine kv_rocksdb = {"rocksdb", rk_open,	 rk_quiesce,
						      rk_close,	 no_thread_init, no_thread_done,
						      rk_put,	 rk_get,	 rk_scan};

#endif
