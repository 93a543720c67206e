/*
 * test_ycsb_gen.c - pins the YCSB generators of bench/ycsb_gen.h.
 *
 * The shipped vectors (bench/ycsb_vectors.txt, seed 42) are regenerated
 * and compared line by line, so a change to a generator or to the random
 * stream shows up here rather than as silently different benchmark
 * numbers.  Independently of the file, a few answers are checked against
 * YCSB itself (keys YCSB 0.17 prints for insertorder=hashed) and against
 * the distributions' defining properties.  The vectors file is found at
 * bench/ycsb_vectors.txt from the current directory (make test runs from
 * the repository root) or at $YCSB_VECTORS.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/ycsb_gen.h"

static FILE *open_vectors(void)
{
	const char *p = getenv("YCSB_VECTORS");
	FILE *f = fopen(p ? p : "bench/ycsb_vectors.txt", "r");

	cr_assert_not_null(f, "cannot open %s (run from the repository root or set YCSB_VECTORS)",
			   p ? p : "bench/ycsb_vectors.txt");
	return f;
}

Test(ycsb_gen, shipped_vectors_regenerate_exactly)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	FILE *f = open_vectors();
	char want[256], *got, *save = NULL;
	int line = 0, compared = 0;

	cr_assert_not_null(mem);
	ycsb_write_vectors(mem, 42);
	fclose(mem);
	got = strtok_r(buf, "\n", &save);
	while (fgets(want, sizeof(want), f)) {
		want[strcspn(want, "\n")] = 0;
		line++;
		cr_assert_not_null(got, "generated output ends before line %d of the file", line);
		if (want[0] != '#') {
			cr_expect_str_eq(got, want, "line %d", line);
			compared++;
		}
		got = strtok_r(NULL, "\n", &save);
	}
	cr_expect_null(got, "generated output has more lines than the file");
	cr_expect_gt(compared, 100);
	fclose(f);
	free(buf);
}

/* Keys as YCSB 0.17 prints them for keynum 0, 1, 2 (insertorder=hashed,
 * zeropadding 1): FNV-1a 64 of the key number's 8 bytes. */
Test(ycsb_gen, keys_match_ycsb)
{
	char k[64];

	ycsb_build_key(k, sizeof(k), 0, 1, 1);
	cr_expect_str_eq(k, "user6284781860667377211");
	ycsb_build_key(k, sizeof(k), 1, 1, 1);
	cr_expect_str_eq(k, "user8517097267634966620");
	ycsb_build_key(k, sizeof(k), 2, 1, 1);
	cr_expect_str_eq(k, "user1820151046732198393");
	/* Ordered inserts: the number itself, zero-padded. */
	cr_expect_eq(ycsb_build_key(k, sizeof(k), 42, 0, 5), 9);
	cr_expect_str_eq(k, "user00042");
	/* Padding to 23 digits gives UDB's 27-byte keys for every number. */
	for (int64_t i = 0; i < 100000; i++)
		cr_assert_eq(ycsb_build_key(k, sizeof(k), i, 1, 23), 27, "keynum %lld",
			     (long long)i);
	/* Too small a buffer: nothing written, length 0. */
	cr_expect_eq(ycsb_build_key(k, 10, 0, 1, 1), 0);
}

Test(ycsb_gen, fnvhash64_is_fnv1a_with_java_abs)
{
	/* FNV-1a 64 of eight zero bytes is 0xa8c7f832281a39c5; its two's
	 * complement negation (Math.abs of a negative long) is below. */
	cr_expect_eq(ycsb_fnvhash64(0), (int64_t)(0ULL - 0xa8c7f832281a39c5ULL));
	for (int64_t i = 0; i < 1000; i++)
		cr_expect_geq(ycsb_fnvhash64(i), 0);
}

/* The zipfian's defining property: item 0 comes with probability
 * 1/zeta(n), item 1 with 1/(2^theta zeta(n)). */
Test(ycsb_gen, zipfian_head_frequencies)
{
	struct ycsb_rng r;
	struct ycsb_zipf z;
	const int n = 1000, draws = 400000;
	int c0 = 0, c1 = 0;

	ycsb_rng_seed(&r, 1);
	ycsb_zipf_init(&z, &r, 0, n - 1, YCSB_ZIPFIAN_CONSTANT, -1);
	for (int i = 0; i < draws; i++) {
		int64_t v = ycsb_zipf_next_long(&z, &r, n);
		cr_assert(v >= 0 && v < n, "draw %lld", (long long)v);
		c0 += v == 0;
		c1 += v == 1;
	}
	double p0 = 1 / z.zetan, p1 = 1 / (pow(2, 0.99) * z.zetan);
	cr_expect_float_eq((double)c0 / draws, p0, 0.01, "p0 %f want %f", (double)c0 / draws, p0);
	cr_expect_float_eq((double)c1 / draws, p1, 0.01, "p1 %f want %f", (double)c1 / draws, p1);
}

/* Scrambled zipfian stays in [min, max]; latest stays in [1, last] and
 * favours last. */
Test(ycsb_gen, scrambled_and_latest_ranges)
{
	struct ycsb_rng r;
	struct ycsb_scrambled s;
	struct ycsb_latest l;
	int at_last = 0;

	ycsb_rng_seed(&r, 2);
	ycsb_scrambled_init(&s, &r, 10, 1009);
	for (int i = 0; i < 100000; i++) {
		int64_t v = ycsb_scrambled_next(&s, &r);
		cr_assert(v >= 10 && v <= 1009);
	}
	ycsb_latest_init(&l, &r, 5000);
	for (int i = 0; i < 100000; i++) {
		int64_t last = 5000 + i / 100;
		int64_t v = ycsb_latest_next(&l, &r, last);
		cr_assert(v >= 0 && v <= last, "%lld of %lld", (long long)v, (long long)last);
		at_last += v == last;
	}
	/* P(zipfian 0) over ~5500 items is about 1/zeta = 0.1. */
	cr_expect(at_last > 5000 && at_last < 20000, "at_last %d", at_last);
}

/* Operation mixes follow the workload proportions. */
Test(ycsb_gen, operation_mix)
{
	struct ycsb_rng r;
	int count[YCSB_NOPS] = {0};
	const int n = 200000;

	ycsb_rng_seed(&r, 3);
	for (int i = 0; i < n; i++)
		count[ycsb_choose_op(&ycsb_workloads[4], &r)]++; /* E */
	cr_expect_eq(count[YCSB_READ] + count[YCSB_UPDATE] + count[YCSB_RMW], 0);
	cr_expect_float_eq((double)count[YCSB_INSERT] / n, 0.05, 0.005);
	cr_expect_float_eq((double)count[YCSB_SCAN] / n, 0.95, 0.005);
	for (int i = 0; i < 1000; i++) {
		int64_t v = ycsb_uniform(&r, YCSB_MIN_SCAN, YCSB_MAX_SCAN);
		cr_assert(v >= 1 && v <= 100);
	}
}
