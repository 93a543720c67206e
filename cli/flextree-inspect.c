/*
 * flextree-inspect - look inside a FlexTree file, or watch one being built.
 *
 *   flextree-inspect FILE                 header facts and a deep check
 *   flextree-inspect FILE --map [OFF LEN] the extent mappings of a range
 *   flextree-inspect --demo FILE          build, edit, commit and reopen a
 *                                         small tree, then time inserts
 *
 * A thin client of the public API (include/flextree.h); it opens files
 * read-only except in --demo.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flextree.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: flextree-inspect FILE [--map [OFF LEN]]\n"
		   "       flextree-inspect --demo FILE\n"
		   "Prints a FlexTree file's version, size, extents and height and runs its\n"
		   "deep check; --map lists the logical->physical mappings of a range;\n"
		   "--demo builds a small tree in FILE, edits and reopens it, and times\n"
		   "random inserts in a volatile tree.\n");
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "flextree-inspect: %s: %s\n", what, flex_strerror(rc));
	return 1;
}

static void print_stats(const struct flextree *t)
{
	struct flextree_stats st;
	flextree_stats(t, &st);
	printf("version %" PRIu64 "  size %" PRIu64 " bytes  extents %" PRIu64
	       "  height %u  nodes %" PRIu64 "  file %" PRIu64 " bytes\n",
	       st.version, st.size, st.extents, st.height, st.leaves + st.internals,
	       st.file_bytes);
}

static int print_map(const struct flextree *t, uint64_t off, uint64_t len)
{
	ssize_t n = flextree_query(t, off, len, NULL, 0);
	if (n < 0)
		return fail("query", (int)n);
	struct flextree_mapping *m = calloc((size_t)n + 1, sizeof(*m));
	if (!m)
		return fail("query", -12);
	flextree_query(t, off, len, m, (size_t)n);
	for (ssize_t i = 0; i < n; i++) {
		if (m[i].poff == FLEXTREE_HOLE)
			printf("  [%" PRIu64 ", +%" PRIu64 ")  hole\n", m[i].loff, m[i].len);
		else
			printf("  [%" PRIu64 ", +%" PRIu64 ")  -> physical %" PRIu64 "\n", m[i].loff,
			       m[i].len, m[i].poff);
	}
	free(m);
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int demo(const char *path)
{
	struct flextree *t;
	int rc = flextree_open(path, NULL, &t);
	if (rc)
		return fail(path, rc);
	printf("append three 100-byte extents at physical 0, 1000, 2000:\n");
	for (uint64_t i = 0; i < 3; i++)
		flextree_insert(t, i * 100, i * 1000, 100);
	print_map(t, 0, UINT64_MAX);
	printf("insert 10 bytes (physical 9000) at logical 150, splitting the middle extent:\n");
	flextree_insert(t, 150, 9000, 10);
	print_map(t, 0, UINT64_MAX);
	printf("collapse [50, 200): the rest shifts down:\n");
	flextree_collapse(t, 50, 150);
	print_map(t, 0, UINT64_MAX);
	printf("write past the end (logical 400) leaves a hole:\n");
	flextree_insert(t, 400, 7000, 20);
	print_map(t, 0, UINT64_MAX);
	if ((rc = flextree_commit(t)) != 0)
		return fail("commit", rc);
	printf("committed; the file is locked while this handle is open:\n");
	struct flextree *again;
	rc = flextree_open(path, NULL, &again);
	printf("  second open of the same file: %s\n", flex_strerror(rc));
	if (rc == 0)
		flextree_close(again);
	if ((rc = flextree_close(t)) != 0)
		return fail("close", rc);
	if ((rc = flextree_open(path, NULL, &t)) != 0)
		return fail("reopen", rc);
	printf("reopened %s:\n", path);
	print_stats(t);
	printf("check: %s\n", flex_strerror(flextree_check(t)));
	flextree_close(t);

	printf("\ntiming 1,000,000 inserts at random offsets in a volatile tree...\n");
	if ((rc = flextree_open(NULL, NULL, &t)) != 0)
		return fail("open", rc);
	uint64_t x = 0x9E3779B97F4A7C15ull;
	double t0 = now();
	for (uint64_t i = 0; i < 1000000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint64_t size = flextree_size(t);
		flextree_insert(t, size ? x % size : 0, i * 8192, 4096);
	}
	double dt = now() - t0;
	print_stats(t);
	printf("%.2f Mops/s (%.0f ns per insert); check: %s\n", 1.0 / dt, dt * 1e3,
	       flex_strerror(flextree_check(t)));
	flextree_close(t);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "--demo"))
		return demo(argv[2]);
	if (argc < 2 || (argc > 2 && strcmp(argv[2], "--map"))) {
		usage(stderr);
		return 2;
	}
	struct flextree_options opt = {.read_only = 1};
	struct flextree *t;
	int rc = flextree_open(argv[1], &opt, &t);
	if (rc)
		return fail(argv[1], rc);
	print_stats(t);
	int crc = flextree_check(t);
	printf("check: %s\n", crc ? flex_strerror(crc) : "ok");
	if (argc > 2) {
		uint64_t off = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
		uint64_t len = argc > 4 ? strtoull(argv[4], NULL, 0) : UINT64_MAX - off;
		if (print_map(t, off, len))
			crc = 1;
	}
	flextree_close(t);
	return crc ? 1 : 0;
}
