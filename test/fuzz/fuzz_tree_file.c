/*
 * fuzz_tree_file.c - libFuzzer target: the input becomes a FlexTree file
 * (docs/FORMAT.md "FlexTree file"), which is opened read-only and
 * writable, checked, queried and, when it opened, changed, committed and
 * reopened.
 *
 * Input: byte 0 = flags, bytes 1..16 = operands for the lookups and
 * changes, then the file in compact form (fz_tree_expand: per slot a u16
 * length and that many leading bytes, zero-padded to 4096).
 *   flags & 1  repair node, pointer and header checksums (fz_tree_fixup)
 *   flags & 2  also set each node's slot field to its slot
 *   flags & 4  also recompute the header's counts and size
 *   flags & 8  cut the file a few bytes short of its last slot
 * Never a crash; errors are fine.  Beyond that the target asserts what the
 * API promises of a tree that opened: flextree_check passes, stays passing
 * after changes, and a committed tree reopens with the same size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flextree.h"
#include "fuzz_common.h"

static uint64_t fz_u64_or(struct fz_in *in, uint64_t dflt)
{
	if (in->n < 8)
		return dflt;
	uint64_t v = fz_get64(in->p);
	in->p += 8;
	in->n -= 8;
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char tree_path[PATH_MAX];

static int count_cb(void *arg, const struct flextree_extent *e)
{
	uint64_t *n = arg;
	(void)e;
	return ++*n >= 4096;
}

#define MUST(cond)                                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_tree_file: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* Read-only calls on an open tree: they must not crash, and agree. */
static void probe(const struct flextree *t, const uint64_t *ops)
{
	MUST(flextree_check(t) == 0);
	struct flextree_stats st;
	MUST(flextree_stats(t, &st) == 0);
	uint64_t size = flextree_size(t);
	MUST(st.size == size);
	uint64_t at[] = {0,    size / 2,   size ? size - 1 : 0,
			 size, UINT64_MAX, size ? ops[0] % size : 0};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		uint64_t poff = 0, run = 0, eoff = 0;
		uint16_t tag = 0;
		int rc = flextree_lookup(t, at[i], &poff, &run);
		MUST(at[i] < size ? rc == 0 && run > 0 : rc == -ERANGE);
		rc = flextree_tag_get(t, at[i], &tag, &eoff);
		MUST(at[i] < size ? rc == 0 && eoff <= at[i] : rc != 0);
		struct flextree_mapping m[16];
		ssize_t q = flextree_query(t, at[i], ops[1] % (size + 1) + 1, m, 16);
		MUST(at[i] <= size ? q >= 0 : q < 0);
		uint64_t n = 0;
		(void)flextree_scan(t, at[i], ops[1], count_cb, &n);
	}
	/* Whole-range query: the pieces tile [0, size). */
	struct flextree_mapping m[64];
	ssize_t q = flextree_query(t, 0, size, m, 64);
	MUST(q >= 0);
	uint64_t next = 0;
	for (ssize_t i = 0; i < q && i < 64; i++) {
		MUST(m[i].loff == next && m[i].len > 0);
		next += m[i].len;
	}
	if (q <= 64)
		MUST(next == size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!tree_path[0]) {
		const char *root = fz_init_root("tree");
		fz_path(tree_path, sizeof(tree_path), root, "TREE");
	}
	struct fz_in in = {data, size};
	uint8_t flags = 0;
	fz_u8(&in, &flags);
	uint64_t ops[2];
	ops[0] = fz_u64_or(&in, 0);
	ops[1] = fz_u64_or(&in, 1);
	uint8_t *img;
	uint32_t nslots = fz_tree_expand(&in, &img);
	if (flags & 1)
		fz_tree_fixup(img, nslots,
			      ((flags & 2) ? FZ_TREE_FIX_SLOT : 0) |
				  ((flags & 4) ? FZ_TREE_FIX_COUNTS : 0));
	size_t flen = (size_t)nslots * FZ_SLOT;
	if ((flags & 8) && flen)
		flen -= 1 + (ops[0] & 1023);
	if (fz_write_file(tree_path, img, flen) != 0)
		abort();
	free(img);

	struct flextree_options ro = {.read_only = 1};
	struct flextree *t = NULL;
	uint64_t ro_size = 0;
	int ro_ok = flextree_open(tree_path, &ro, &t) == 0;
	if (ro_ok) {
		probe(t, ops);
		ro_size = flextree_size(t);
		MUST(flextree_insert(t, 0, FLEXTREE_HOLE, 1) == FLEX_EREADONLY);
		MUST(flextree_close(t) == 0);
	} else {
		MUST(t == NULL);
	}

	struct flextree_options rw = {.max_extent = (uint32_t)(ops[1] >> 40)};
	t = NULL;
	int rc = flextree_open(tree_path, &rw, &t);
	if (rc != 0) {
		MUST(t == NULL);
		/* A file read-only open accepted is also accepted writable
		 * (the empty file aside, which only a writable open creates). */
		MUST(!ro_ok);
		return 0;
	}
	if (ro_ok)
		MUST(flextree_size(t) == ro_size);
	probe(t, ops);
	/* A few changes derived from the operands; the tree must stay sound. */
	uint64_t a = ops[0], b = ops[1];
	for (int i = 0; i < 6; i++, a = a * 6364136223846793005ull + 1442695040888963407ull) {
		uint64_t sz = flextree_size(t);
		uint64_t off = sz ? (a >> 8) % (sz + 2) : 0;
		uint32_t len = (uint32_t)((b >> (i * 8)) & 0xfff) + 1;
		switch ((a >> 4) & 3) {
		case 0:
			rc = flextree_insert(t, off, (a >> 16) & 0xffffffffffull, len);
			break;
		case 1:
			rc = flextree_collapse(t, off, len);
			break;
		case 2:
			rc = flextree_repoint(t, off, (a >> 20) & 0xffffffffull,
					      len > UINT32_MAX ? UINT32_MAX : (uint32_t)len);
			break;
		default:
			rc = flextree_tag_set(t, off, (uint16_t)(a >> 48));
			break;
		}
		MUST(rc == 0 || rc == -ERANGE || rc == -EINVAL || rc == FLEX_ETOOBIG);
		MUST(flextree_check(t) == 0);
	}
	uint64_t final_size = flextree_size(t);
	MUST(flextree_close(t) == 0);
	t = NULL;
	MUST(flextree_open(tree_path, &ro, &t) == 0);
	MUST(flextree_size(t) == final_size);
	MUST(flextree_check(t) == 0);
	flextree_close(t);
	return 0;
}
