/*
 * test_format.c - pins the on-disk bytes documented in docs/FORMAT.md: a
 * tree with one known extent is committed and its header and leaf slot
 * are compared with the documented layout field by field; so are a
 * FlexSpace LOG batch and its seal, and a FlexDB WAL's header, sync mark
 * and one record, as a process that died after a sync leaves them, and
 * the IDENTITY of a space and of a store.  The encodings themselves
 * (common/flex_codec.h, a FlexDB pair) are checked against byte arrays
 * with their values written as numbers, so that a build on a big-endian
 * host that wrote host-order integers would fail here.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/flex_codec.h"
#include "../flexdb/fdb_int.h"
#include "flexdb.h"
#include "flexspace.h"
#include "flextree.h"

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t slot_csum(const uint8_t *slot, int at)
{
	uint8_t copy[4096];
	memcpy(copy, slot, sizeof(copy));
	memset(copy + at, 0, 8);
	return XXH3_64bits(copy, sizeof(copy));
}

/* Rewrites the format field of both header copies of a tree file. */
static void tree_set_format(const char *path, uint32_t format)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t h[4096];
	for (int copy = 0; copy < 2; copy++) {
		cr_assert_eq(pread(fd, h, sizeof(h), copy * 4096), 4096);
		flex_put_le32(h + 8, format);
		flex_put_le64(h + 4088, slot_csum(h, 4088));
		cr_assert_eq(pwrite(fd, h, sizeof(h), copy * 4096), 4096);
	}
	close(fd);
}

Test(format, flextree_header_and_leaf_bytes_match_the_doc)
{
	char dir[] = "/tmp/flexfmt.XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/t.ft", dir);

	struct flextree *t;
	cr_assert_eq(flextree_open(path, NULL, &t), 0); /* version 1: empty leaf */
	cr_assert_eq(flextree_insert(t, 0, 0x123456, 100), 0);
	cr_assert_eq(flextree_tag_set(t, 0, 0xBEEF), 0);
	cr_assert_eq(flextree_close(t), 0); /* version 2 */

	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	struct stat st;
	fstat(fd, &st);
	cr_assert_eq(st.st_size, 4 * 4096, "headers, v1's leaf (slot 2, now free), v2's leaf");
	uint8_t *f = malloc(st.st_size);
	cr_assert_eq(pread(fd, f, st.st_size, 0), st.st_size);
	close(fd);

	const uint8_t *h = f; /* version 2 lives in slot 2 & 1 = 0 */
	cr_assert_eq(memcmp(h, "FLEXTREE", 8), 0);
	cr_assert_eq(le(h + 8, 4), 3, "format");
	cr_assert_eq(le(h + 12, 4), 4096);
	cr_assert_eq(le(h + 16, 8), 2, "version");
	cr_assert_eq(le(h + 24, 4), 3, "root slot");
	cr_assert_eq(le(h + 28, 4), 1, "height");
	cr_assert_eq(le(h + 40, 8), 100, "size");
	cr_assert_eq(le(h + 48, 8), 1, "extents");
	cr_assert_eq(le(h + 56, 4), 4, "nslots");
	cr_assert_eq(le(h + 64, 8), 1, "leaves");
	cr_assert_eq(le(h + 72, 8), 0, "internals");
	cr_assert_eq(le(h + 4088, 8), slot_csum(h, 4088));
	cr_assert_eq(le(f + 4096 + 16, 8), 1, "slot 1 keeps version 1");

	const uint8_t *n = f + 3 * 4096;
	cr_assert_eq(le(h + 32, 8), slot_csum(n, 24), "root_csum is the leaf's checksum");
	cr_assert_eq(le(n, 4), 0x324c5446);
	cr_assert_eq(memcmp(n, "FTL2", 4), 0);
	cr_assert_eq(le(n + 4, 2), 1, "count");
	cr_assert_eq(n[6], 0, "level");
	cr_assert_eq(le(n + 8, 4), 3, "slot");
	cr_assert_eq(le(n + 16, 8), 2, "version");
	cr_assert_eq(le(n + 24, 8), slot_csum(n, 24));
	cr_assert_eq(le(n + 32, 8), 0, "first partial offset");
	cr_assert_eq(le(n + 40, 8), 0x123456 | (uint64_t)0xBEEF << 48, "poff | tag << 48");
	cr_assert_eq(le(n + 48, 4), 100, "length");
	for (int i = 52; i < 4096; i++)
		cr_assert_eq(n[i], 0, "rest of the leaf slot is zero");
	free(f);

	/* Formats 1 and 2 (leaves of 20-byte entries, "FTL1") still open;
	 * a later format is refused as such, not as damage. */
	tree_set_format(path, 1);
	cr_assert_eq(flextree_open(path, NULL, &t), 0, "a format-1 file opens");
	struct flextree_mapping m;
	cr_assert_eq(flextree_query(t, 0, 100, &m, 1), 1);
	cr_assert_eq(m.poff, 0x123456);
	cr_assert_eq(flextree_close(t), 0);
	tree_set_format(path, 4);
	cr_assert_eq(flextree_open(path, NULL, &t), FLEX_EVERSION);
	unlink(path);
	rmdir(dir);
}

/* A tree file of format 2, as the builds before packed leaves wrote it:
 * "FTL1" leaves of 20-byte entries.  It opens, reads back, and its first
 * commit leaves format 3 in both header slots, with the changed leaf
 * packed and the other as it was. */
Test(format, a_format_2_tree_with_unpacked_leaves_opens_and_mixes)
{
	char dir[] = "/tmp/flexfmt.XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/t.ft", dir);

	/* Extents of 10 bytes at poff 1000 * i, enough for two leaves that
	 * fit the old layout (at most 200 entries each). */
	enum { N = 360 };
	struct flextree *t;
	cr_assert_eq(flextree_open(path, NULL, &t), 0);
	for (uint64_t i = 0; i < N; i++)
		cr_assert_eq(flextree_insert(t, i * 10, 1000 * i, 10), 0);
	struct flextree_stats st;
	flextree_stats(t, &st);
	cr_assert_geq(st.leaves, 2);
	cr_assert_eq(flextree_close(t), 0);

	/* Rewrite every leaf as an "FTL1" image and fix the checksums that
	 * point to it: the root's child entries and the header's. */
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	struct stat sb;
	fstat(fd, &sb);
	uint32_t nslots = (uint32_t)(sb.st_size / 4096);
	uint8_t *f = calloc(nslots, 4096);
	cr_assert_eq(pread(fd, f, sb.st_size, 0), sb.st_size);
	uint8_t *h = le(f + 16, 8) > le(f + 4096 + 16, 8) ? f : f + 4096;
	uint8_t *root = f + (size_t)le(h + 24, 4) * 4096;
	cr_assert_eq(le(h + 28, 4), 2, "a root over leaves");
	cr_assert_eq(memcmp(root, "FTI1", 4), 0);
	unsigned pivots = (unsigned)le(root + 4, 2);
	uint8_t *child = root + 32 + 8 * pivots;
	for (unsigned c = 0; c <= pivots; c++, child += 20) {
		uint8_t *leaf = f + (size_t)le(child + 8, 4) * 4096;
		cr_assert_eq(memcmp(leaf, "FTL2", 4), 0);
		unsigned count = (unsigned)le(leaf + 4, 2);
		cr_assert_leq(count, 200);
		uint64_t loff = le(leaf + 32, 8);
		uint8_t img[4096];
		memcpy(img, leaf, 32);
		memset(img + 32, 0, sizeof(img) - 32);
		memcpy(img, "FTL1", 4);
		for (unsigned j = 0; j < count; j++) {
			const uint8_t *e = leaf + 40 + 12 * j;
			flex_put_le64(img + 32 + 20 * j, loff);
			memcpy(img + 32 + 20 * j + 8, e, 12);
			loff += le(e + 8, 4);
		}
		flex_put_le64(img + 24, slot_csum(img, 24));
		memcpy(leaf, img, sizeof(img));
		flex_put_le64(child + 12, le(leaf + 24, 8));
	}
	flex_put_le64(root + 24, slot_csum(root, 24));
	flex_put_le64(h + 32, le(root + 24, 8));
	flex_put_le64(h + 4088, slot_csum(h, 4088));
	cr_assert_eq(pwrite(fd, f, sb.st_size, 0), sb.st_size);
	close(fd);
	tree_set_format(path, 2); /* both header copies */

	/* Opening verifies every leaf (the default), then reads them back. */
	cr_assert_eq(flextree_open(path, NULL, &t), 0, "a format-2 file opens");
	cr_assert_eq(flextree_check(t), 0);
	for (uint64_t i = 0; i < N; i++) {
		struct flextree_mapping m;
		cr_assert_eq(flextree_query(t, i * 10, 10, &m, 1), 1);
		cr_assert_eq(m.poff, 1000 * i, "extent %lu", (unsigned long)i);
	}
	/* One changed leaf: the commit packs it and keeps the other. */
	cr_assert_eq(flextree_insert(t, 0, 77, 5), 0);
	cr_assert_eq(flextree_close(t), 0);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	fstat(fd, &sb);
	nslots = (uint32_t)(sb.st_size / 4096);
	free(f);
	f = calloc(nslots, 4096);
	cr_assert_eq(pread(fd, f, sb.st_size, 0), sb.st_size);
	close(fd);
	h = le(f + 16, 8) > le(f + 4096 + 16, 8) ? f : f + 4096;
	cr_assert_eq(le(h + 8, 4), 3, "a commit writes format 3");
	/* No copy of format 2 is left for a build that knows only format 2
	 * to open one commit back. */
	cr_assert_eq(le(f + 8, 4), 3, "header slot 0");
	cr_assert_eq(le(f + 4096 + 8, 4), 3, "header slot 1");
	cr_assert_eq(le(f + 16, 8), le(f + 4096 + 16, 8), "both hold the new version");
	root = f + (size_t)le(h + 24, 4) * 4096;
	pivots = (unsigned)le(root + 4, 2);
	child = root + 32 + 8 * pivots;
	unsigned packed = 0, unpacked = 0;
	for (unsigned c = 0; c <= pivots; c++, child += 20) {
		const uint8_t *leaf = f + (size_t)le(child + 8, 4) * 4096;
		packed += memcmp(leaf, "FTL2", 4) == 0;
		unpacked += memcmp(leaf, "FTL1", 4) == 0;
	}
	cr_assert_eq(packed, 1, "the changed leaf is packed");
	cr_assert_eq(unpacked, pivots, "the others are as they were");
	free(f);

	cr_assert_eq(flextree_open(path, NULL, &t), 0);
	cr_assert_eq(flextree_check(t), 0);
	struct flextree_mapping m;
	cr_assert_eq(flextree_query(t, 0, 5, &m, 1), 1);
	cr_assert_eq(m.poff, 77);
	for (uint64_t i = 0; i < N; i++) {
		cr_assert_eq(flextree_query(t, 5 + i * 10, 10, &m, 1), 1);
		cr_assert_eq(m.poff, 1000 * i);
	}
	cr_assert_eq(flextree_close(t), 0);
	unlink(path);
	rmdir(dir);
}

static uint8_t *load(const char *path, size_t *n)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s", path);
	struct stat st;
	fstat(fd, &st);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*n = (size_t)st.st_size;
	return b;
}

/* Runs fn in a child that dies without closing anything, so the files
 * keep their logs. */
static void crashed(void (*fn)(const char *dir), const char *dir)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		fn(dir);
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void one_synced_write(const char *dir)
{
	struct flexspace *fs;
	if (flexspace_open(dir, NULL, &fs) || flexspace_write(fs, "abc", 0, 3) != 3 ||
	    flexspace_sync(fs))
		_exit(1);
}

Test(format, flexspace_log_batch_and_seal_bytes_match_the_doc)
{
	char dir[] = "/tmp/flexfmt.XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	crashed(one_synced_write, dir);
	char path[64];
	snprintf(path, sizeof(path), "%s/LOG", dir);
	size_t n;
	uint8_t *f = load(path, &n);
	/* A new space: tree version 1, so the header is in slot 1. */
	const uint8_t *h = f + 4096;
	cr_assert_eq(memcmp(h, "FLEXLOG1", 8), 0);
	cr_assert_eq(le(h + 16, 8), 1, "base");
	cr_assert_eq(le(h + 24, 8), XXH3_64bits(h, 24));
	const uint8_t *b = f + 8192;
	cr_assert_eq(le(b, 4), 0x31424c46, "FLB1");
	cr_assert_eq(le(b + 8, 8), 1, "seq");
	cr_assert_eq(le(b + 16, 8), 1, "base");
	cr_assert_eq(n, 8192 + 32 + le(b + 4, 4) * 24);
	/* The seal sits in the other slot, at 2048: batch 1 is durable. */
	const uint8_t *s = f + 2048;
	cr_assert_eq(le(s, 4), 0x31534c46, "FLS1");
	cr_assert_eq(le(s + 4, 4), 0);
	cr_assert_eq(le(s + 8, 8), 2, "next batch");
	cr_assert_eq(le(s + 16, 8), 1, "base");
	cr_assert_eq(le(s + 24, 8), XXH3_64bits(s, 24));
	free(f);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static void one_synced_put(const char *dir)
{
	struct flexdb *db;
	if (flexdb_open(dir, NULL, &db) || flexdb_put(db, "k1", 2, "v", 1) || flexdb_sync(db))
		_exit(1);
}

Test(format, flexdb_wal_header_mark_and_record_bytes_match_the_doc)
{
	char dir[] = "/tmp/flexfmt.XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	crashed(one_synced_put, dir);
	char path[64];
	snprintf(path, sizeof(path), "%s/WAL-0000000000000001", dir);
	size_t n;
	uint8_t *f = load(path, &n);
	cr_assert_eq(memcmp(f, "FLEXWAL1", 8), 0);
	cr_assert_eq(le(f + 8, 4), 2, "format");
	cr_assert_eq(le(f + 12, 4), 0);
	cr_assert_eq(le(f + 16, 8), 1, "gen");
	/* A new space's durable point after its first commit at open. */
	cr_assert_eq(le(f + 24, 8), 1, "space version: the new tree's");
	cr_assert_eq(le(f + 32, 8), 0, "space batches");
	for (int i = 40; i < 56; i++)
		cr_assert_eq(f[i], 0);
	cr_assert_eq(le(f + 56, 8), XXH3_64bits(f, 56));
	const uint8_t *m = f + 4096;
	cr_assert_eq(le(m, 4), 0x31535746, "FWS1");
	cr_assert_eq(le(m + 8, 8), 1, "gen");
	cr_assert_eq(le(m + 16, 8), 1, "durable through seq 1");
	cr_assert_eq(le(m + 24, 8), XXH3_64bits(m, 24));
	/* Payload: count 1, put, klen 2, vlen 1, "k1", "v". */
	const uint8_t *r = f + 8192;
	static const uint8_t payload[] = {1, 0, 0, 0, 1, 2, 1, 'k', '1', 'v'};
	cr_assert_eq(n, 8192 + 24 + sizeof(payload));
	cr_assert_eq(le(r, 4), 0x31525746, "FWR1");
	cr_assert_eq(le(r + 4, 4), sizeof(payload));
	cr_assert_eq(le(r + 8, 8), 1, "seq");
	cr_assert_eq(le(r + 16, 8), XXH3_64bits_withSeed(payload, sizeof(payload), 1));
	cr_assert_eq(memcmp(r + 24, payload, sizeof(payload)), 0);
	free(f);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* IDENTITY of a new space and of a new store, byte for byte as in
 * docs/FORMAT.md ("Store identity"). */
Test(format, identity_bytes_match_the_doc)
{
	static const uint8_t space_id[32] = {0x46, 0x4c, 0x45, 0x58, 0x49, 0x44, 0x4e, 0x54,
					     0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
					     0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
					     0xd5, 0x89, 0x5e, 0xbd, 0x3b, 0x82, 0xac, 0x81};
	uint8_t db_id[32];
	memcpy(db_id, space_id, sizeof(db_id));
	db_id[12] = 2;
	static const uint8_t db_csum[8] = {0xba, 0x8e, 0x81, 0x1b, 0x86, 0x55, 0xcf, 0x63};
	memcpy(db_id + 24, db_csum, 8);
	cr_assert_eq(le(space_id + 24, 8), XXH3_64bits(space_id, 24));
	cr_assert_eq(le(db_id + 24, 8), XXH3_64bits(db_id, 24));
	char dir[] = "/tmp/flexfmt.XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char store[64], path[96];
	snprintf(store, sizeof(store), "%s/db", dir);
	struct flexdb *db;
	cr_assert_eq(flexdb_open(store, NULL, &db), 0);
	cr_assert_eq(flexdb_close(db), 0);
	size_t n;
	snprintf(path, sizeof(path), "%s/IDENTITY", store);
	uint8_t *f = load(path, &n);
	cr_assert_eq(n, 32);
	cr_assert_eq(memcmp(f, db_id, 32), 0, "FlexDB IDENTITY");
	free(f);
	snprintf(path, sizeof(path), "%s/space/IDENTITY", store);
	f = load(path, &n);
	cr_assert_eq(n, 32);
	cr_assert_eq(memcmp(f, space_id, 32), 0, "FlexSpace IDENTITY");
	free(f);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Fixed-width fields: the bytes of a vector decode to the numbers written
 * here, and encoding the numbers gives the bytes back. */
Test(format, fixed_width_fields_are_little_endian_on_any_host)
{
	static const uint8_t b16[2] = {0x34, 0x12};
	static const uint8_t b32[4] = {0x46, 0x57, 0x52, 0x31}; /* "FWR1" */
	static const uint8_t b64[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
	cr_assert_eq(flex_get_le16(b16), 0x1234);
	cr_assert_eq(flex_get_le32(b32), 0x31525746);
	cr_assert_eq(flex_get_le64(b64), 0x0102030405060708ull);
	uint8_t out[8];
	flex_put_le16(out, 0x1234);
	cr_assert_eq(memcmp(out, b16, 2), 0);
	flex_put_le32(out, 0x31525746);
	cr_assert_eq(memcmp(out, b32, 4), 0);
	flex_put_le64(out, 0x0102030405060708ull);
	cr_assert_eq(memcmp(out, b64, 8), 0);

	/* The space IDENTITY of identity_bytes_match_the_doc, field by
	 * field (docs/FORMAT.md "Store identity"). */
	static const uint8_t id[32] = {0x46, 0x4c, 0x45, 0x58, 0x49, 0x44, 0x4e, 0x54,
				       0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
				       0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
				       0xd5, 0x89, 0x5e, 0xbd, 0x3b, 0x82, 0xac, 0x81};
	cr_assert_eq(flex_get_le32(id + 8), 1, "format");
	cr_assert_eq(flex_get_le32(id + 12), 1, "kind: space");
	cr_assert_eq(flex_get_le32(id + 16), 1, "store format");
	cr_assert_eq(flex_get_le64(id + 24), 0x81ac823bbd5e89d5ull, "checksum");
	cr_assert_eq(flex_get_le64(id + 24), XXH3_64bits(id, 24));
}

/* Varints (unsigned LEB128): a vector per length, the largest value, and
 * the inputs that must be refused. */
Test(format, varints_are_leb128)
{
	static const struct {
		uint32_t v;
		uint8_t len, b[5];
	} vec[] = {
		{0, 1, {0x00}},
		{1, 1, {0x01}},
		{127, 1, {0x7f}},
		{128, 2, {0x80, 0x01}},
		{300, 2, {0xac, 0x02}},
		{4096, 2, {0x80, 0x20}},
		{16384, 3, {0x80, 0x80, 0x01}},
		{1048576, 3, {0x80, 0x80, 0x40}},
		{0x0fffffff, 4, {0xff, 0xff, 0xff, 0x7f}},
		{0xffffffff, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
	};
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		uint8_t out[FLEX_VARINT_MAX];
		cr_assert_eq(flex_varint_len(vec[i].v), vec[i].len, "%u", vec[i].v);
		cr_assert_eq(flex_varint_put(out, vec[i].v), vec[i].len, "%u", vec[i].v);
		cr_assert_eq(memcmp(out, vec[i].b, vec[i].len), 0, "%u", vec[i].v);
		uint32_t v = 0;
		cr_assert_eq(flex_varint_get(vec[i].b, vec[i].b + vec[i].len, &v), vec[i].len);
		cr_assert_eq(v, vec[i].v);
		/* Cut one byte short, it is damage. */
		cr_assert_eq(flex_varint_get(vec[i].b, vec[i].b + vec[i].len - 1, &v), 0);
	}
	static const uint8_t over[5] = {0xff, 0xff, 0xff, 0xff, 0x10}; /* 2^32 */
	static const uint8_t six[6] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
	uint32_t v;
	cr_assert_eq(flex_varint_get(over, over + 5, &v), 0, "past 32 bits");
	cr_assert_eq(flex_varint_get(six, six + 6, &v), 0, "past five bytes");
}

/* The pair of docs/FORMAT.md's example, key "k1" and value "v", with its
 * checksum written out: encoding gives these bytes, decoding them gives
 * the pair. */
Test(format, flexdb_pair_bytes_match_the_doc)
{
	static const uint8_t rec[] = {0x02, 0x01, 0x6b, 0x31, 0x76, 0xee, 0xdc, 0x1a, 0xb4};
	cr_assert_eq((uint32_t)XXH3_64bits(rec, 5), 0xb41adcee);
	uint8_t out[32];
	cr_assert_eq(fdb_rec_size(2, 1), sizeof(rec));
	cr_assert_eq(fdb_rec_encode(out, "k1", 2, "v", 1), sizeof(rec));
	cr_assert_eq(memcmp(out, rec, sizeof(rec)), 0);
	size_t size;
	const uint8_t *key, *val;
	uint32_t klen, vlen;
	cr_assert_eq(fdb_rec_decode(rec, rec + sizeof(rec), &size, &key, &klen, &val, &vlen), 0);
	cr_assert_eq(size, sizeof(rec));
	cr_assert_eq(klen, 2);
	cr_assert_eq(vlen, 1);
	cr_assert_eq(memcmp(key, "k1", 2), 0);
	cr_assert_eq(memcmp(val, "v", 1), 0);
	/* The checksum's bytes reversed (a big-endian writer's) are damage. */
	static const uint8_t swapped[] = {0x02, 0x01, 0x6b, 0x31, 0x76, 0xb4, 0x1a, 0xdc, 0xee};
	cr_assert_eq(
	    fdb_rec_decode(swapped, swapped + sizeof(swapped), &size, &key, &klen, &val, &vlen),
	    FLEX_ECORRUPT);
}

/* Keys order as memcmp over the shorter length, then the shorter first:
 * fdb_keycmp against that definition, for every pair of lengths 0..72
 * (its word-at-a-time path covers 8..64) and a difference at every
 * position, in either direction. */
static int ref_keycmp(const uint8_t *a, uint32_t al, const uint8_t *b, uint32_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c)
		return c < 0 ? -1 : 1;
	return al < bl ? -1 : al > bl;
}

static int sign(int c)
{
	return (c > 0) - (c < 0);
}

Test(format, key_order_is_memcmp_then_length)
{
	uint8_t a[80], b[80];
	for (int i = 0; i < 80; i++)
		a[i] = b[i] = (uint8_t)(0x30 + i % 10);
	for (uint32_t al = 0; al <= 72; al++)
		for (uint32_t bl = 0; bl <= 72; bl++) {
			cr_assert_eq(sign(fdb_keycmp(a, al, b, bl)), ref_keycmp(a, al, b, bl),
				     "equal bytes, lengths %u and %u", al, bl);
			uint32_t n = al < bl ? al : bl;
			for (uint32_t at = 0; at < n; at++) {
				/* High bit set in one of them: the bytes order as unsigned. */
				uint8_t keep = b[at];
				b[at] = (uint8_t)(at % 2 ? keep + 1 : keep | 0x80);
				cr_assert_eq(sign(fdb_keycmp(a, al, b, bl)), ref_keycmp(a, al, b, bl),
					     "lengths %u and %u, differing at %u", al, bl, at);
				cr_assert_eq(sign(fdb_keycmp(b, bl, a, al)), ref_keycmp(b, bl, a, al),
					     "lengths %u and %u, differing at %u, swapped", bl, al, at);
				b[at] = keep;
			}
		}
}
