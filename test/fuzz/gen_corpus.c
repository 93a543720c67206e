/*
 * gen_corpus.c - writes the seed corpora of the fuzz targets
 * (test/fuzz/corpus/<target>/seed-*), built with the library itself so
 * that every seed starts from a valid structure the fuzzer can mutate.
 * `test/fuzz/run.sh --seeds` builds and runs it; the output is
 * deterministic, so rerunning it changes nothing unless the format did.
 *
 * The FlexSpace and FlexDB templates made here must match the ones the
 * targets make (same options, same operations), because seeds for
 * fuzz_space_log carry log batches whose base version is the template's
 * tree version.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexdb.h"
#include "flexspace.h"
#include "flextree.h"
#include "fuzz_common.h"

/* The inverse, for seeds: each slot with its trailing zeros cut. */
static void fz_tree_compact(const uint8_t *img, size_t len, FILE *out)
{
	for (size_t off = 0; off < len; off += FZ_SLOT) {
		size_t n = len - off < FZ_SLOT ? len - off : FZ_SLOT;
		while (n && img[off + n - 1] == 0)
			n--;
		uint8_t h[2];
		fz_put16(h, (uint16_t)n);
		fwrite(h, 1, 2, out);
		fwrite(img + off, 1, n, out);
	}
}

static size_t fz_varint_put(uint8_t *p, uint32_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "gen_corpus: %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static const char *out_dir;
static const char *tmp;
static int nfiles;

static FILE *seed_open(const char *target, const char *name)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", out_dir, target);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/%s/seed-%s", out_dir, target, name);
	FILE *f = fopen(p, "wb");
	CHECK(f);
	nfiles++;
	return f;
}

static void seed_bytes(const char *target, const char *name, const void *a, size_t an,
		       const void *b, size_t bn)
{
	FILE *f = seed_open(target, name);
	if (an)
		fwrite(a, 1, an, f);
	if (bn)
		fwrite(b, 1, bn, f);
	fclose(f);
}

/* ---- fuzz_tree_file ------------------------------------------------------------ */

static void tree_seed(const char *name, const char *path, uint8_t flags)
{
	uint8_t *img;
	size_t len;
	CHECK(fz_read_file(path, &img, &len) == 0);
	FILE *f = seed_open("fuzz_tree_file", name);
	uint8_t ops[17] = {flags, 0x35, 0x12, 0x99, 0, 0, 0, 0, 0, 0x10, 0x07, 0, 0, 0x40, 0, 0, 0};
	fwrite(ops, 1, 1 + 16, f); /* flags + two u64 operands */
	fz_tree_compact(img, len, f);
	fclose(f);
	free(img);
}

static void gen_tree(void)
{
	char p[PATH_MAX];
	fz_path(p, sizeof(p), tmp, "tree-empty");
	struct flextree *t;
	CHECK(flextree_open(p, NULL, &t) == 0);
	CHECK(flextree_close(t) == 0);
	tree_seed("empty", p, 0);
	tree_seed("empty-fixup", p, 7);

	fz_path(p, sizeof(p), tmp, "tree-small");
	CHECK(flextree_open(p, NULL, &t) == 0);
	CHECK(flextree_insert(t, 0, 4096, 1000) == 0);
	CHECK(flextree_insert(t, 500, FLEXTREE_HOLE, 300) == 0);
	CHECK(flextree_tag_set(t, 200, 1) == 0);
	CHECK(flextree_commit(t) == 0);
	CHECK(flextree_insert(t, 1300, 90000, 50) == 0);
	CHECK(flextree_close(t) == 0);
	tree_seed("small", p, 0);
	tree_seed("small-fixup", p, 7);

	/* Enough extents for a root over several leaves (up to 336 each). */
	fz_path(p, sizeof(p), tmp, "tree-multi");
	CHECK(flextree_open(p, NULL, &t) == 0);
	for (uint64_t i = 0; i < 800; i++)
		CHECK(flextree_insert(t, i * 10, i * 1000 + 7, 10) == 0);
	CHECK(flextree_collapse(t, 100, 35) == 0);
	CHECK(flextree_tag_set(t, 2000, 3) == 0);
	CHECK(flextree_close(t) == 0);
	tree_seed("multi", p, 0);
	tree_seed("multi-fixup", p, 7);
}

/* ---- fuzz_space_log ------------------------------------------------------------ */

static void gen_space(void)
{
	char dir[PATH_MAX], snap[PATH_MAX], p[PATH_MAX];
	fz_path(dir, sizeof(dir), tmp, "space");
	fz_path(snap, sizeof(snap), tmp, "space-snap");
	CHECK(fz_space_scenario(dir, snap) == 0);
	/* The LOG as the crash left it: the batches since the reopen. */
	uint8_t *log;
	size_t len;
	fz_path(p, sizeof(p), snap, "LOG");
	CHECK(fz_read_file(p, &log, &len) == 0 && len > FZ_LOG_START);
	uint8_t f;
	f = 0x01;
	seed_bytes("fuzz_space_log", "batches", &f, 1, log + FZ_LOG_START, len - FZ_LOG_START);
	f = 0x0f;
	seed_bytes("fuzz_space_log", "batches-fixup", &f, 1, log + FZ_LOG_START,
		   len - FZ_LOG_START);
	f = 0x1f;
	seed_bytes("fuzz_space_log", "batches-fixup-reopen", &f, 1, log + FZ_LOG_START,
		   len - FZ_LOG_START);
	f = 0x00;
	seed_bytes("fuzz_space_log", "whole-log", &f, 1, log, len);
	f = 0x01;
	seed_bytes("fuzz_space_log", "no-batches", &f, 1, NULL, 0);
	free(log);
}

/* ---- fuzz_wal ---------------------------------------------------------------------- */

struct payload {
	uint8_t b[4096];
	size_t n;
	uint32_t count;
};

static void pl_op(struct payload *p, uint8_t op, const char *k, const char *v)
{
	if (p->n == 0)
		p->n = 4;
	p->b[p->n++] = op;
	p->n += fz_varint_put(p->b + p->n, (uint32_t)strlen(k));
	if (op == 1)
		p->n += fz_varint_put(p->b + p->n, (uint32_t)strlen(v));
	memcpy(p->b + p->n, k, strlen(k));
	p->n += strlen(k);
	if (op == 1) {
		memcpy(p->b + p->n, v, strlen(v));
		p->n += strlen(v);
	}
	p->count++;
	fz_put32(p->b, p->count);
}

static void frame(FILE *f, const struct payload *p, int step)
{
	uint8_t h[3];
	fz_put16(h, (uint16_t)p->n);
	h[2] = (uint8_t)step;
	fwrite(h, 1, step ? 3 : 2, f);
	fwrite(p->b, 1, p->n, f);
}

static void gen_wal(void)
{
	struct payload a = {0}, b = {0}, c = {0};
	pl_op(&a, 1, "key0003", "new value");
	pl_op(&b, 2, "key0006", NULL);
	pl_op(&b, 1, "zzz", "");
	pl_op(&b, 1, "a", "first");
	pl_op(&c, 1, "key0100", "x");
	pl_op(&c, 2, "key0100", NULL);
	pl_op(&c, 2, "nokey", NULL);

	FILE *f = seed_open("fuzz_wal", "framed");
	fputc(0x00, f);
	frame(f, &a, 0);
	frame(f, &b, 0);
	frame(f, &c, 0);
	fclose(f);

	f = seed_open("fuzz_wal", "framed-steps-reopen");
	fputc(0x14, f);
	frame(f, &a, 5);
	frame(f, &b, 1);
	frame(f, &c, 1);
	fclose(f);

	f = seed_open("fuzz_wal", "two-files");
	fputc(0x00, f);
	frame(f, &a, 0);
	fputc(0xff, f);
	fputc(0xff, f);
	frame(f, &b, 0);
	frame(f, &c, 0);
	fclose(f);

	/* A raw WAL file written by the library. */
	char dir[PATH_MAX], p[PATH_MAX];
	fz_path(dir, sizeof(dir), tmp, "waldb");
	struct flexdb_options o = {.cache_size = 1u << 20, .memtable_size = 64u << 10};
	o.space.segment_size = 64u << 10;
	o.space.log_limit = 64u << 10;
	struct flexdb *db;
	CHECK(flexdb_open(dir, &o, &db) == 0);
	CHECK(flexdb_put(db, "k1", 2, "v1", 2) == 0);
	CHECK(flexdb_delete(db, "key0000", 7) == 0);
	struct flexdb_batch *bt = flexdb_batch_new();
	CHECK(bt);
	CHECK(flexdb_batch_put(bt, "b1", 2, "x", 1) == 0);
	CHECK(flexdb_batch_put(bt, "b2", 2, "", 0) == 0);
	CHECK(flexdb_batch_delete(bt, "k1", 2) == 0);
	CHECK(flexdb_write(db, bt) == 0);
	flexdb_batch_free(bt);
	CHECK(flexdb_sync(db) == 0);
	uint8_t *w;
	size_t wl;
	fz_path(p, sizeof(p), dir, "WAL-0000000000000001");
	CHECK(fz_read_file(p, &w, &wl) == 0 && wl > 32);
	uint8_t fl = 0x01;
	seed_bytes("fuzz_wal", "raw", &fl, 1, w, wl);
	fl = 0x13;
	seed_bytes("fuzz_wal", "raw-fixup-reopen", &fl, 1, w, wl);
	free(w);
	CHECK(flexdb_close(db) == 0);
}

/* ---- fuzz_store_image ------------------------------------------------------------ */

static void entry(FILE *f, uint8_t id, const void *b, size_t n)
{
	uint8_t h[5];
	h[0] = id;
	fz_put32(h + 1, (uint32_t)n);
	fwrite(h, 1, 5, f);
	if (n)
		fwrite(b, 1, n, f);
}

static void entry_file(FILE *f, uint8_t id, const char *dir, const char *name)
{
	char p[PATH_MAX];
	uint8_t *b;
	size_t n;
	fz_path(p, sizeof(p), dir, name);
	if (fz_read_file(p, &b, &n) != 0)
		return;
	if (id == 5) {
		/* the compact tree form is itself an entry's content */
		char q[PATH_MAX];
		fz_path(q, sizeof(q), tmp, "compact");
		FILE *c = fopen(q, "wb");
		CHECK(c);
		fz_tree_compact(b, n, c);
		fclose(c);
		free(b);
		CHECK(fz_read_file(q, &b, &n) == 0);
	}
	entry(f, id, b, n);
	free(b);
}

static void store_seed(const char *name, const char *dir, uint8_t fix, int compact_tree)
{
	FILE *f = seed_open("fuzz_store_image", name);
	if (fix)
		entry(f, 6, &fix, 1);
	entry_file(f, compact_tree ? 5 : 0, dir, "space/TREE");
	entry_file(f, 1, dir, "space/LOG");
	entry_file(f, 2, dir, "space/DATA");
	entry_file(f, 3, dir, "WAL-0000000000000001");
	entry_file(f, 4, dir, "WAL-0000000000000002");
	fclose(f);
}

static void gen_store(void)
{
	char dir[PATH_MAX];
	fz_path(dir, sizeof(dir), tmp, "store");
	struct flexdb_options o = {.cache_size = 1u << 20, .memtable_size = 64u << 10};
	o.space.segment_size = 64u << 10;
	o.space.log_limit = 64u << 10;
	struct flexdb *db;
	CHECK(flexdb_open(dir, &o, &db) == 0);
	char k[32], v[64];
	for (int i = 0; i < 200; i++) {
		int kl = snprintf(k, sizeof(k), "key%04d", i * 3);
		int vl = snprintf(v, sizeof(v), "v%d", i);
		CHECK(flexdb_put(db, k, (size_t)kl, v, (size_t)vl) == 0);
	}
	CHECK(flexdb_close(db) == 0);
	store_seed("clean", dir, 0, 0);
	store_seed("clean-compact-fixup", dir, 0x1f, 1);
	/* A crash image: a WAL with records, taken while the store is open. */
	CHECK(flexdb_open(dir, &o, &db) == 0);
	for (int i = 0; i < 20; i++) {
		int kl = snprintf(k, sizeof(k), "new%02d", i);
		CHECK(flexdb_put(db, k, (size_t)kl, "n", 1) == 0);
	}
	CHECK(flexdb_delete(db, "key0003", 7) == 0);
	CHECK(flexdb_sync(db) == 0);
	store_seed("open-with-wal", dir, 0, 1);
	CHECK(flexdb_close(db) == 0);
	FILE *f = seed_open("fuzz_store_image", "empty-dir");
	fclose(f);
}

/* ---- fuzz_cli_parser --------------------------------------------------------------- */

static void gen_cli(void)
{
	static const char *const lines[] = {
	    "put key value\n",
	    "put \"a\\x00b\\n\\t\\r\\\\\\\"\" 0x00ff01; get k # comment\n",
	    "scan from 10K; read 0x10 100; many 1 2 3 4 5 6 7 8 9 0x123\n",
	    "\"unterminated\n",
	    "get \"bad \\q escape\"\n",
	    "help put; .timer on; quit\n",
	    "  ;; # only a comment\n",
	    "scan 18446744073709551615 18446744073709551616\n",
	};
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		char name[16];
		snprintf(name, sizeof(name), "line%zu", i);
		seed_bytes("fuzz_cli_parser", name, lines[i], strlen(lines[i]), NULL, 0);
	}
}

int main(int argc, char **argv)
{
	out_dir = argc > 1 ? argv[1] : "test/fuzz/corpus";
	tmp = fz_init_root("gen");
	mkdir(out_dir, 0755);
	gen_tree();
	gen_space();
	gen_wal();
	gen_store();
	gen_cli();
	printf("gen_corpus: %d seeds written to %s\n", nfiles, out_dir);
	return 0;
}
