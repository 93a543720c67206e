/*
 * test_flextree.c - Criterion suite for FlexTree (include/flextree.h), the
 * tree in memory: edge cases of every operation on volatile trees, long
 * random operation sequences checked against the brute-force model, and a
 * large tree of height three and more.  The persistent tree is tested in
 * test_flextree_file.c; the model and helpers are in flextree_model.h.
 *
 * Like test_flextree_file.c, this suite is built twice by `make test`: against
 * the normal tree and, as test_flextree_tiny, against tiny node capacities.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flextree.h"
#include "lib/flextree_model.h"

/* FLEX_TEST_CHECK_EVERY=N runs flextree_check every N random ops. */
static uint64_t check_every(uint64_t dflt)
{
	const char *env = getenv("FLEX_TEST_CHECK_EVERY");
	uint64_t v = env && *env ? strtoull(env, NULL, 0) : 0;
	return v ? v : dflt;
}

static void expect_tag(const struct flextree *t, uint64_t loff, uint16_t tag, uint64_t start)
{
	uint16_t g = 0xdead;
	uint64_t s = UINT64_MAX;
	int c = flextree_tag_get(t, loff, &g, &s);
	cr_assert_eq(c, 0, "tag_get(%llu) = %d", U(loff), c);
	cr_assert_eq(g, tag, "tag_get(%llu) tag %u, want %u", U(loff), g, tag);
	cr_assert_eq(s, start, "tag_get(%llu) extent start %llu, want %llu", U(loff), U(s),
		     U(start));
}

/* ======================================================================== */
/* Unit tests: empty tree, arguments                                          */
/* ======================================================================== */

Test(flextree, empty_tree_reads_and_collapse_report_erange)
{
	struct flextree *t = open_vol();
	uint64_t p = 7, run = 7;
	uint16_t tag = 7;
	uint64_t eloff = 7;
	struct flextree_mapping mp[2];

	cr_expect_eq(flextree_size(t), 0);
	cr_expect_eq(flextree_lookup(t, 0, &p, &run), -ERANGE);
	cr_expect_eq(flextree_lookup(t, 5, NULL, NULL), -ERANGE);
	cr_expect_eq(flextree_query(t, 0, 10, mp, 2), 0, "query at size 0 is empty, not an error");
	cr_expect_eq(flextree_query(t, 1, 10, mp, 2), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 0, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 0, 0), 0, "zero-length collapse is a no-op");
	cr_expect_eq(flextree_repoint(t, 0, 100, 1), -ERANGE);
	cr_expect_eq(flextree_tag_set(t, 0, 1), -ERANGE);
	cr_expect_eq(flextree_tag_get(t, 0, &tag, &eloff), -ERANGE);
	cr_expect_eq(flextree_scan(t, 1, 1, collect_cb, NULL), -ERANGE);
	struct exts ex = {0};
	cr_expect_eq(flextree_scan(t, 0, 100, collect_cb, &ex), 0);
	cr_expect_eq(ex.n, 0);
	free(ex.v);

	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.size, 0);
	cr_expect_eq(st.extents, 0);
	cr_expect_leq(st.height, 1);
	cr_expect_eq(st.version, 0);
	cr_expect_eq(st.file_bytes, 0);
	assert_check(t);
	cr_expect_eq(flextree_commit(t), 0, "commit of a volatile tree is a no-op");
	cr_expect_eq(flextree_close(t), 0);
}

Test(flextree, null_arguments_are_rejected_not_crashed_on)
{
	struct flextree_options o = {0};
	struct flextree *t = (struct flextree *)&o;

	cr_expect_eq(flextree_close(NULL), 0);
	cr_expect_eq(flextree_size(NULL), 0);
	cr_expect_eq(flextree_open(NULL, NULL, NULL), -EINVAL);
	cr_expect_eq(flextree_open(NULL, &o, NULL), -EINVAL);
	t = open_vol();
	struct flextree_stats st;
	cr_expect_eq(flextree_stats(t, NULL), -EINVAL);
	cr_expect_eq(flextree_stats(NULL, &st), -EINVAL);
	ins(t, NULL, 0, 100, 10);
	cr_expect_eq(flextree_lookup(t, 3, NULL, NULL), 0, "lookup outputs may be NULL");
	uint64_t p = 0;
	cr_expect_eq(flextree_lookup(t, 3, &p, NULL), 0);
	cr_expect_eq(p, 103);
	flextree_close(t);
}

Test(flextree, volatile_open_ignores_read_only_and_takes_options)
{
	struct flextree_options o = {.read_only = 1, .max_extent = 100};
	struct flextree *t = open_ok(NULL, &o);
	for (int i = 0; i < 10; i++)
		ins(t, NULL, flextree_size(t), 5000 + 50 * (uint64_t)i, 50);
	cr_expect_eq(stats_of(t).extents, 5, "max_extent 100 keeps 50-byte appends in pairs");
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: insert                                                         */
/* ======================================================================== */

Test(flextree, insert_of_zero_length_is_a_noop)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 100, 0);
	cr_expect_eq(flextree_size(t), 0);
	ins(t, NULL, 1000, 100, 0);
	cr_expect_eq(flextree_size(t), 0, "a zero-length insert past the end makes no hole");
	ins(t, NULL, 0, 100, 10);
	ins(t, NULL, 5, 9999, 0);
	ins(t, NULL, 10, 9999, 0);
	cr_expect_eq(flextree_size(t), 10);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_lookup(t, 5, 105, 5);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_at_zero_into_empty_tree)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 4096, 100);
	cr_expect_eq(flextree_size(t), 100);
	expect_lookup(t, 0, 4096, 100);
	expect_lookup(t, 99, 4195, 1);
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1);
	cr_expect_eq(st.height, 1);
	cr_expect_eq(st.leaves, 1);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_beyond_size_creates_hole)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	ins(t, NULL, 50, 2000, 10);
	cr_expect_eq(flextree_size(t), 60);
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, HOLE, 40);
	expect_lookup(t, 49, HOLE, 1);
	expect_lookup(t, 50, 2000, 10);
	struct flextree_mapping mp[4];
	cr_assert_eq(flextree_query(t, 0, 60, mp, 4), 3);
	cr_expect(mp[1].loff == 10 && mp[1].len == 40 && mp[1].poff == HOLE);
	assert_check(t);
	/* Into an empty tree: the hole starts at 0. */
	struct flextree *u = open_vol();
	ins(u, NULL, 7, 300, 3);
	expect_lookup(u, 0, HOLE, 7);
	expect_lookup(u, 7, 300, 3);
	assert_check(u);
	flextree_close(u);
	flextree_close(t);
}

Test(flextree, insert_in_middle_of_extent_splits_it_into_three_mappings)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 40, 9000, 10);
	struct flextree_mapping mp[4];
	cr_assert_eq(flextree_query(t, 0, UINT64_MAX, mp, 4), 3);
	cr_expect(mp[0].loff == 0 && mp[0].poff == 1000 && mp[0].len == 40);
	cr_expect(mp[1].loff == 40 && mp[1].poff == 9000 && mp[1].len == 10);
	cr_expect(mp[2].loff == 50 && mp[2].poff == 1040 && mp[2].len == 60);
	cr_expect_eq(stats_of(t).extents, 3);
	cr_expect_eq(flextree_size(t), 110);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_at_extent_boundary_shifts_following_extents)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	ins(t, NULL, 10, 3000, 10);
	ins(t, NULL, 10, 7000, 5); /* between the two: not contiguous with either */
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, 7000, 5);
	expect_lookup(t, 15, 3000, 10);
	ins(t, NULL, 0, 8000, 1); /* at the very front */
	expect_lookup(t, 0, 8000, 1);
	expect_lookup(t, 1, 1000, 10);
	expect_lookup(t, 16, 3000, 10);
	cr_expect_eq(flextree_size(t), 26);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, insert_that_overflows_size_is_rejected_and_changes_nothing)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	cr_expect_eq(flextree_insert(t, FLEXTREE_MAX_SIZE, 0, 1), FLEX_ETOOBIG);
	cr_expect_eq(flextree_insert(t, FLEXTREE_MAX_SIZE - 5, 0, 10), FLEX_ETOOBIG);
	int c = flextree_insert(t, UINT64_MAX - 5, 0, 10);
	cr_expect(c < 0, "insert whose loff+len wraps = %d", c);
	c = flextree_insert(t, UINT64_MAX, HOLE, UINT32_MAX);
	cr_expect(c < 0, "insert whose loff+len wraps = %d", c);
	cr_expect_eq(flextree_size(t), 10);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_lookup(t, 0, 1000, 10);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, poff_beyond_48_bits_is_einval)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 10);
	cr_expect_eq(flextree_insert(t, 0, 1ULL << 48, 10), -EINVAL);
	cr_expect_eq(flextree_insert(t, 0, UINT64_MAX, 10), -EINVAL);
	cr_expect_eq(flextree_insert(t, 0, HOLE - 9, 10), -EINVAL, "poff+len = 2^48 is beyond");
	cr_expect_eq(flextree_insert(t, 0, HOLE + 1, 1), -EINVAL);
	cr_expect_eq(flextree_repoint(t, 0, 1ULL << 48, 10), -EINVAL);
	cr_expect_eq(flextree_repoint(t, 0, HOLE - 4, 5), -EINVAL);
	cr_expect_eq(flextree_size(t), 10);
	expect_lookup(t, 0, 1000, 10);
	/* The very top of the space is fine. */
	ins(t, NULL, 10, HOLE - 10, 10);
	expect_lookup(t, 10, HOLE - 10, 10);
	expect_lookup(t, 19, HOLE - 1, 1);
	cr_expect_eq(flextree_repoint(t, 0, HOLE - 5, 5), 0);
	expect_lookup(t, 4, HOLE - 1, 1);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: merging                                                        */
/* ======================================================================== */

Test(flextree, contiguous_appends_merge_into_one_extent)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 1000; i++)
		ins(t, NULL, flextree_size(t), 1ULL << 30 | (i * 100), 100);
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1, "1000 contiguous appends left %llu extents", U(st.extents));
	cr_expect_eq(st.size, 100000);
	expect_lookup(t, 0, 1ULL << 30, 100000);
	expect_lookup(t, 54321, (1ULL << 30) + 54321, 100000 - 54321);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, contiguous_insert_in_middle_merges_into_preceding_extent)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	ins(t, NULL, 100, 1100, 50); /* continues the extent ending at 100 */
	cr_expect_eq(stats_of(t).extents, 2);
	expect_lookup(t, 0, 1000, 150);
	expect_lookup(t, 150, 5000, 100);
	/* Splitting insert whose poff continues the head piece. */
	ins(t, NULL, 20, 1020, 5);
	expect_lookup(t, 0, 1000, 25);
	expect_lookup(t, 25, 1020, 130);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, hole_after_extent_ending_at_top_of_physical_space_stays_a_hole)
{
	/* poff + len == FLEXTREE_HOLE is a valid mapped extent; a hole
	 * inserted right after it must not be merged into it. */
	struct flextree *t = open_vol();
	ins(t, NULL, 0, HOLE - 10, 10);
	ins(t, NULL, 10, HOLE, 5);
	expect_lookup(t, 0, HOLE - 10, 10);
	expect_lookup(t, 12, HOLE, 3);
	assert_check(t);
	ins(t, NULL, 30, 4096, 1); /* the hole [15,30) made by inserting past the end */
	expect_lookup(t, 20, HOLE, 0);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, holes_merge_with_holes)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, HOLE, 100);
	ins(t, NULL, 100, HOLE, 100);
	ins(t, NULL, 300, HOLE, 100); /* creates hole [200,300) then a hole */
	struct flextree_stats st = stats_of(t);
	cr_expect_eq(st.extents, 1, "holes left as %llu extents", U(st.extents));
	expect_lookup(t, 0, HOLE, 400);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, max_extent_limits_merging)
{
	struct flextree_options o = {.max_extent = 1000};
	struct flextree *t = open_ok(NULL, &o);
	for (uint64_t i = 0; i < 100; i++)
		ins(t, NULL, flextree_size(t), 7000 + i * 300, 300);
	struct exts ex = {0};
	cr_assert_eq(flextree_scan(t, 0, flextree_size(t), collect_cb, &ex), 0);
	cr_expect_eq(ex.n, 34, "30000 bytes in 300-byte appends, merged up to 1000: %zu extents",
		     ex.n);
	for (size_t i = 0; i < ex.n; i++)
		cr_expect_leq(ex.v[i].len, 1000, "extent %zu has %u bytes", i, ex.v[i].len);
	expect_lookup(t, 0, 7000, 900);
	expect_lookup(t, 900, 7900, 900);
	free(ex.v);
	assert_check(t);
	flextree_close(t);

	o.max_extent = 1000;
	t = open_ok(NULL, &o);
	for (uint64_t i = 0; i < 100; i++)
		ins(t, NULL, flextree_size(t), 7000 + i * 100, 100);
	cr_expect_eq(stats_of(t).extents, 10);
	flextree_close(t);
}

Test(flextree, merge_into_tagged_extent_keeps_its_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 77), 0);
	ins(t, NULL, 100, 1100, 100);
	cr_expect_eq(stats_of(t).extents, 1);
	expect_tag(t, 150, 77, 0);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: collapse                                                       */
/* ======================================================================== */

Test(flextree, collapse_within_one_extent)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	col(t, NULL, 10, 20);
	cr_expect_eq(flextree_size(t), 180);
	expect_lookup(t, 9, 1009, 1);
	expect_lookup(t, 10, 1030, 70);
	expect_lookup(t, 80, 5000, 100);
	col(t, NULL, 0, 10); /* the head piece exactly */
	expect_lookup(t, 0, 1030, 70);
	col(t, NULL, 170 - 10, 10); /* the tail */
	expect_lookup(t, 70, 5000, 90);
	cr_expect_eq(flextree_size(t), 160);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, collapse_zero_length_is_a_noop)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_expect_eq(flextree_collapse(t, 50, 0), 0);
	cr_expect_eq(flextree_collapse(t, 100, 0), 0);
	cr_expect_eq(flextree_size(t), 100);
	cr_expect_eq(stats_of(t).extents, 1);
	flextree_close(t);
}

Test(flextree, collapse_spanning_three_leaves)
{
	uint64_t seed = test_seed("collapse_spanning_three_leaves");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();
	size_t n = TINY ? 200 : 3000;

	build_extents(t, &m, &r, n, 100);
	struct flextree_stats st = stats_of(t);
	cr_assert_geq(st.leaves, 4, "only %llu leaves for %zu extents", U(st.leaves), n);
	/* From inside the second extent to inside the third-from-last. */
	uint64_t a = model_start(&m, 1) + m.v[1].len / 2;
	uint64_t b = model_start(&m, n - 3) + m.v[n - 3].len / 2;
	col(t, &m, a, b - a);
	assert_model(t, &m, &cr, "after collapse", seed);
	cr_expect_leq(stats_of(t).leaves, 2);
	cr_expect_leq(stats_of(t).extents, 5);
	model_free(&m);
	flextree_close(t);
}

Test(flextree, collapse_everything_then_reuse)
{
	uint64_t seed = test_seed("collapse_everything_then_reuse");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();

	for (int round = 0; round < 3; round++) {
		build_extents(t, &m, &r, TINY ? 100 : 2000, 1000);
		assert_model(t, &m, &cr, "built", seed);
		col(t, &m, 0, m.size);
		struct flextree_stats st = stats_of(t);
		cr_expect_eq(st.size, 0);
		cr_expect_eq(st.extents, 0);
		cr_expect_leq(st.height, 1);
		assert_model(t, &m, &cr, "emptied", seed);
		ins(t, &m, 0, 42, 1);
		assert_model(t, &m, &cr, "reused", seed);
		col(t, &m, 0, 1);
	}
	model_free(&m);
	flextree_close(t);
}

Test(flextree, collapse_past_end_is_erange_and_leaves_tree_unchanged)
{
	uint64_t seed = test_seed("collapse_past_end_is_erange_and_leaves_tree_unchanged");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();

	build_extents(t, &m, &r, TINY ? 60 : 600, 100);
	cr_assert_eq(flextree_tag_set(t, 5, 9), 0);
	model_tag_set(&m, 5, 9);
	uint64_t s = m.size;
	cr_expect_eq(flextree_collapse(t, 0, s + 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s / 2, s - s / 2 + 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, s + 10, 1), -ERANGE);
	cr_expect_eq(flextree_collapse(t, 1, UINT64_MAX), -ERANGE, "overflowing range");
	cr_expect_eq(flextree_collapse(t, UINT64_MAX, 2), -ERANGE, "overflowing range");
	cr_expect_eq(flextree_repoint(t, s / 2, 0, s), -ERANGE);
	cr_expect_eq(flextree_repoint(t, 1, 0, UINT32_MAX), -ERANGE);
	assert_model(t, &m, &cr, "after refused collapses", seed);
	model_free(&m);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: huge offsets                                                   */
/* ======================================================================== */

Test(flextree, huge_hole_beyond_48_bits_rebases_partial_offsets, .timeout = 300)
{
	uint64_t seed = test_seed("huge_hole_beyond_48_bits_rebases_partial_offsets");
	struct rng r = {seed}, cr = {seed ^ 1};
	struct model m = {0};
	struct flextree *t = open_vol();
	const uint64_t H = 1ULL << 50;

	ins(t, &m, H, 1234, 100);
	cr_expect_eq(flextree_size(t), H + 100);
	expect_lookup(t, 0, HOLE, 0);
	expect_lookup(t, H - 1, HOLE, 1);
	expect_lookup(t, H, 1234, 100);
	expect_lookup(t, H + 99, 1333, 1);
	assert_model(t, &m, &cr, "after the hole", seed);

	ins(t, &m, 0, 5000, 10); /* shifts the far extent by 10 */
	expect_lookup(t, H + 10, 1234, 100);
	ins(t, &m, H / 2, 7000, 10); /* splits the hole in the middle */
	expect_lookup(t, H / 2, 7000, 10);
	expect_lookup(t, H + 20, 1234, 100);
	cr_assert_eq(flextree_tag_set(t, H / 4, 3), 0);
	model_tag_set(&m, H / 4, 3);
	cr_assert_eq(flextree_repoint(t, H / 3, 1ULL << 40, 4096), 0);
	model_remap(&m, H / 3, 4096, 1ULL << 40);
	assert_model(t, &m, &cr, "after edits in the hole", seed);

	col(t, &m, 5, H / 8); /* removes a long run of hole */
	assert_model(t, &m, &cr, "after a long collapse", seed);
	ins(t, &m, m.size, 99, 1);
	ins(t, &m, m.size - 1, 77, 3);
	/* Many small edits near both ends and in the middle. */
	for (int i = 0; i < (TINY ? 300 : 2000); i++) {
		uint64_t where = (i % 3 == 0)	? rng_below(&r, 1000)
				 : (i % 3 == 1) ? m.size - rng_below(&r, 1000)
						: m.size / 2 + rng_below(&r, 1000);
		if (i % 4 == 3 && where + 7 <= m.size)
			col(t, &m, where, 7);
		else
			ins(t, &m, where, rng_below(&r, 1ULL << 40), rng_range(&r, 1, 50));
	}
	assert_model(t, &m, &cr, "after small edits", seed);
	col(t, &m, 0, m.size - 1);
	assert_model(t, &m, &cr, "after collapsing all but one byte", seed);
	model_free(&m);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: remap and tags                                                 */
/* ======================================================================== */

Test(flextree, remap_preserves_logical_layout_and_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	ins(t, NULL, 200, 9000, 100);
	cr_assert_eq(flextree_tag_set(t, 100, 12), 0);
	cr_assert_eq(flextree_repoint(t, 100, 70000, 100), 0);
	cr_expect_eq(flextree_size(t), 300);
	expect_lookup(t, 99, 1099, 1);
	expect_lookup(t, 100, 70000, 100);
	expect_lookup(t, 200, 9000, 100);
	expect_tag(t, 150, 12, 100);
	/* Across a boundary: starts inside a tagged extent -> the remapped
	 * extent starts mid-extent and is untagged; the head keeps its tag. */
	cr_assert_eq(flextree_repoint(t, 150, 80000, 100), 0);
	expect_lookup(t, 100, 70000, 50);
	expect_lookup(t, 150, 80000, 100);
	expect_lookup(t, 250, 9050, 50);
	expect_tag(t, 120, 12, 100);
	expect_tag(t, 160, 0, 150);
	expect_tag(t, 260, 0, 250);
	/* Whole range from a tagged start. */
	cr_assert_eq(flextree_tag_set(t, 0, 5), 0);
	cr_assert_eq(flextree_repoint(t, 0, 1ULL << 44, 300), 0);
	expect_lookup(t, 0, 1ULL << 44, 300);
	expect_tag(t, 299, 5, 0);
	cr_expect_eq(stats_of(t).extents, 1);
	cr_expect_eq(flextree_repoint(t, 10, 123, 0), 0, "zero-length remap is a no-op");
	expect_lookup(t, 0, 1ULL << 44, 300);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, remap_of_a_hole_maps_it)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 1000, 1, 1);
	cr_assert_eq(flextree_repoint(t, 100, 4444, 200), 0);
	expect_lookup(t, 99, HOLE, 1);
	expect_lookup(t, 100, 4444, 200);
	expect_lookup(t, 300, HOLE, 700);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, tag_stays_with_head_piece_on_split)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	ins(t, NULL, 50, 9000, 10); /* splits [0,100) */
	expect_tag(t, 10, 7, 0);
	expect_tag(t, 49, 7, 0);
	expect_tag(t, 55, 0, 50);
	expect_tag(t, 70, 0, 60);
	/* Collapse that cuts the tagged extent's tail keeps the tag. */
	col(t, NULL, 40, 20);
	expect_tag(t, 0, 7, 0);
	expect_tag(t, 45, 0, 40);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, collapse_of_an_extent_start_clears_its_tag)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	ins(t, NULL, 100, 5000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	cr_assert_eq(flextree_tag_set(t, 100, 8), 0);
	col(t, NULL, 0, 10);
	expect_tag(t, 0, 0, 0);
	expect_tag(t, 90, 8, 90);
	col(t, NULL, 50, 40); /* ends exactly at the tagged start: keeps it */
	expect_tag(t, 50, 8, 50);
	col(t, NULL, 40, 11); /* eats the tagged start */
	expect_tag(t, 40, 0, 40);
	expect_lookup(t, 40, 5001, 99);
	/* Insert in front of a tagged extent moves the tag with it. */
	cr_assert_eq(flextree_tag_set(t, 40, 9), 0);
	ins(t, NULL, 40, 123456, 5);
	expect_tag(t, 45, 9, 45);
	expect_tag(t, 42, 0, 40);
	assert_check(t);
	flextree_close(t);
}

Test(flextree, tag_set_splits_extent_and_zero_clears)
{
	struct flextree *t = open_vol();
	ins(t, NULL, 0, 1000, 100);
	cr_assert_eq(flextree_tag_set(t, 0, 7), 0);
	cr_assert_eq(flextree_tag_set(t, 30, 9), 0);
	expect_tag(t, 29, 7, 0);
	expect_tag(t, 30, 9, 30);
	expect_tag(t, 99, 9, 30);
	expect_lookup(t, 29, 1029, 1);
	expect_lookup(t, 30, 1030, 70);
	cr_assert_eq(flextree_tag_set(t, 30, 0), 0);
	expect_tag(t, 50, 0, 30);
	cr_assert_eq(flextree_tag_set(t, 0, 65535), 0);
	expect_tag(t, 0, 65535, 0);
	cr_expect_eq(flextree_tag_set(t, 100, 1), -ERANGE);
	cr_expect_eq(flextree_tag_set(t, 1000, 1), -ERANGE);
	uint16_t tag;
	uint64_t s;
	cr_expect_eq(flextree_tag_get(t, 100, &tag, &s), -ERANGE);
	assert_check(t);
	flextree_close(t);
}

/* ======================================================================== */
/* Unit tests: query and scan                                                 */
/* ======================================================================== */

Test(flextree, query_cap_smaller_than_count_returns_full_count)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 10; i++)
		ins(t, NULL, i * 10, 100000 * (i + 1), 10);
	struct flextree_mapping mp[10];
	memset(mp, 0xab, sizeof(mp));
	cr_expect_eq(flextree_query(t, 0, 100, mp, 3), 10);
	for (uint64_t i = 0; i < 3; i++)
		cr_expect(mp[i].loff == i * 10 && mp[i].len == 10 && mp[i].poff == 100000 * (i + 1),
			  "mapping %llu", U(i));
	cr_expect_eq(mp[3].loff, 0xababababababababULL, "wrote past cap");
	cr_expect_eq(flextree_query(t, 0, 100, NULL, 0), 10);
	cr_expect_eq(flextree_query(t, 15, 20, NULL, 0), 3);
	/* Clipped to the range and to size. */
	memset(mp, 0, sizeof(mp));
	cr_expect_eq(flextree_query(t, 15, 1000, mp, 10), 9);
	cr_expect(mp[0].loff == 15 && mp[0].len == 5 && mp[0].poff == 200005);
	cr_expect(mp[8].loff == 90 && mp[8].len == 10);
	cr_expect_eq(flextree_query(t, 100, 5, mp, 10), 0);
	cr_expect_eq(flextree_query(t, 101, 5, mp, 10), -ERANGE);
	cr_expect_eq(flextree_query(t, 5, UINT64_MAX, mp, 10), -ERANGE);
	cr_expect_eq(flextree_query(t, 0, UINT64_MAX, mp, 10), 10);
	cr_expect_eq(flextree_query(t, 50, 0, mp, 10), 0);
	flextree_close(t);
}

struct counting {
	int calls;
	int stop_at;
	uint64_t first_loff;
};

static int counting_cb(void *arg, const struct flextree_extent *e)
{
	struct counting *c = arg;
	if (c->calls++ == 0)
		c->first_loff = e->loff;
	return c->calls == c->stop_at ? 7 : 0;
}

Test(flextree, scan_stops_when_callback_returns_nonzero)
{
	struct flextree *t = open_vol();
	for (uint64_t i = 0; i < 20; i++)
		ins(t, NULL, i * 10, 100000 * (i + 1), 10);
	struct counting c = {0, 3, 0};
	cr_expect_eq(flextree_scan(t, 0, 200, counting_cb, &c), 7);
	cr_expect_eq(c.calls, 3);
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 0, 200, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 20);
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 35, 10, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 2, "[35,45) touches two whole extents");
	cr_expect_eq(c.first_loff, 30, "scan passes whole extents");
	c = (struct counting){0, 0, 0};
	cr_expect_eq(flextree_scan(t, 40, 1, counting_cb, &c), 0);
	cr_expect_eq(c.calls, 1);
	cr_expect_eq(flextree_scan(t, 201, 1, counting_cb, &c), -ERANGE);
	flextree_close(t);
}

/* ======================================================================== */
/* Randomised model tests                                                     */
/* ======================================================================== */

static void run_model_test(const char *name, uint64_t nops, uint32_t max_extent,
			   size_t soft_extents)
{
	uint64_t seed = test_seed(name);
	struct rng r = {seed}, cr = {seed ^ 0x5555};
	struct model m = {0};
	struct flextree_options o = {.max_extent = max_extent};
	struct opcfg cfg = {max_extent, max_extent, soft_extents};
	struct opstats os = {0};
	struct flextree *t = open_ok(NULL, &o);
	uint64_t max_height = 0, max_n = 0;
	uint64_t every = check_every(100);

	for (uint64_t i = 0; i < nops; i++) {
		int e = random_op(&r, &m, t, &cfg, &os);
		cr_assert_eq(e, 0, "op %llu failed (line %d, seed=%llu)", U(i), e, U(seed));
		if ((TINY && i < 3000) || i % every == 0) {
			int c = flextree_check(t);
			cr_assert_eq(c, 0, "flextree_check=%d after op %llu (seed=%llu)", c, U(i),
				     U(seed));
		}
		if (i % 50 == 49) {
			e = compare_tree_ext(t, &m, &cr, max_extent);
			cr_assert_eq(e, 0, "model mismatch after op %llu (line %d, seed=%llu)",
				     U(i), e, U(seed));
			struct flextree_stats st = stats_of(t);
			if (st.height > max_height)
				max_height = st.height;
		}
		if (m.n > max_n)
			max_n = m.n;
	}
	int e = compare_tree_ext(t, &m, &cr, max_extent);
	cr_assert_eq(e, 0, "final model mismatch (line %d, seed=%llu)", e, U(seed));
	fprintf(stderr,
		"flextree::%s: %llu ops (%llu inserts, %llu collapses, %llu remaps, %llu tag sets, "
		"%llu reads, %llu refused), up to %llu model extents, height up to %llu\n",
		name, U(nops), U(os.inserts), U(os.collapses), U(os.remaps), U(os.tag_sets),
		U(os.reads), U(os.errors), U(max_n), U(max_height));
	cr_expect_geq(max_height, 2, "the random test never grew past one leaf");
	model_free(&m);
	flextree_close(t);
}

Test(flextree, random_ops_match_model, .timeout = 600)
{
	run_model_test("random_ops_match_model", 100000 * test_scale(), 0, TINY ? 1500 : 3000);
}

Test(flextree, random_ops_with_small_max_extent_match_model, .timeout = 600)
{
	uint64_t seed = test_seed("random_ops_with_small_max_extent_match_model.pick");
	struct rng r = {seed};
	static const uint32_t choices[] = {1, 7, 512, 4096, 65536};
	uint32_t mx = choices[rng_below(&r, 5)];
	fprintf(stderr, "max_extent=%u\n", mx);
	run_model_test("random_ops_with_small_max_extent_match_model", 50000 * test_scale(), mx,
		       TINY ? 800 : 2000);
}

/* A full leaf gives entries to a sibling with room before it is split, so
 * that leaves stay fuller than splits alone leave them (half full after
 * appends, about two thirds after random inserts); a commit writes one
 * whole slot per dirty leaf.  The tiny build's leaves of 6 have too little
 * room to share for appends. */
Test(flextree, full_leaves_share_with_siblings_before_splitting)
{
	uint64_t seed = test_seed("full_leaves_share_with_siblings_before_splitting");
	struct rng r = {seed}, cr = {seed ^ 1};
	for (int random = 0; random < 2; random++) {
		struct flextree *t = open_vol();
		struct model m = {0};
		size_t n = TINY ? 2000 : 40000;
		for (size_t i = 0; i < n; i++) {
			uint64_t at = random ? rng_below(&r, m.size + 1) : m.size;
			/* Even physical offsets, odd lengths: never contiguous. */
			ins(t, &m, at, 2 * rng_below(&r, 1u << 30), 1 + 2 * (uint32_t)rng_below(&r, 50));
		}
		struct flextree_stats st = stats_of(t);
		double cap = (double)st.leaf_bytes / 20, per = (double)st.extents / st.leaves;
		fprintf(stderr, "%s: %llu extents in %llu leaves of %.0f: %.1f each\n",
			random ? "random inserts" : "appends", U(st.extents), U(st.leaves), cap, per);
		double want = TINY ? (random ? 0.6 : 0.5) : (random ? 0.75 : 0.8);
		cr_assert_geq(per, want * cap, "%s fill leaves to %.2f (seed=%llu)",
			      random ? "random inserts" : "appends", per / cap, U(seed));
		assert_model(t, &m, &cr, random ? "random inserts" : "appends", seed);
		model_free(&m);
		flextree_close(t);
	}
}

Test(flextree, large_tree_of_appends_reaches_height_three, .timeout = 600)
{
	uint64_t seed = test_seed("large_tree_of_appends_reaches_height_three");
	struct rng r = {seed};
	const uint64_t L = 8;
	size_t n = TINY ? 30000 : 200000;
	size_t cap = n + 100000;
	uint32_t *ids = xrealloc(NULL, cap * sizeof(*ids));
	uint32_t next_id = 0;
	struct flextree *t = open_vol();

	/* Extent k has length L and poff 2*L*id: never contiguous, never merged. */
	for (size_t i = 0; i < n; i++) {
		ids[i] = next_id++;
		ins(t, NULL, i * L, 2 * L * ids[i], L);
	}
	struct flextree_stats st = stats_of(t);
	cr_assert_eq(st.extents, n);
	cr_assert_eq(st.size, n * L);
	cr_assert_geq(st.height, 3, "height %u with %zu extents", st.height, n);
	fprintf(stderr, "large tree: %llu extents, %llu leaves, %llu internals, height %u\n",
		U(st.extents), U(st.leaves), U(st.internals), st.height);
	assert_check(t);

	for (int round = 0; round < 300; round++) {
		for (int k = 0; k < 50 && n; k++) {
			uint64_t loff = rng_below(&r, n * L), p, run;
			cr_assert_eq(flextree_lookup(t, loff, &p, &run), 0);
			cr_assert_eq(p, 2 * L * ids[loff / L] + loff % L,
				     "lookup(%llu) (seed=%llu)", U(loff), U(seed));
			cr_assert_eq(run, L - loff % L);
		}
		unsigned kind = (unsigned)rng_below(&r, 10);
		if (kind < 4 && n) { /* collapse a run of whole extents */
			size_t a = (size_t)rng_below(&r, n);
			size_t cnt = 1 + (size_t)rng_below(&r, kind == 0 ? n / 10 + 1 : 300);
			if (a + cnt > n)
				cnt = n - a;
			col(t, NULL, a * L, cnt * L);
			memmove(&ids[a], &ids[a + cnt], (n - a - cnt) * sizeof(*ids));
			n -= cnt;
		} else if (n + 200 < cap) { /* insert a batch at one boundary */
			size_t a = (size_t)rng_below(&r, n + 1);
			size_t cnt = 1 + (size_t)rng_below(&r, 200);
			memmove(&ids[a + cnt], &ids[a], (n - a) * sizeof(*ids));
			for (size_t j = 0; j < cnt; j++) {
				ids[a + j] = next_id++;
				ins(t, NULL, (a + j) * L, 2 * L * ids[a + j], L);
			}
			n += cnt;
		}
		cr_assert_eq(flextree_size(t), n * L, "size (seed=%llu)", U(seed));
		if (round % 50 == 0)
			assert_check(t);
	}
	assert_check(t);
	cr_assert_eq(stats_of(t).extents, n);
	/* Collapse everything in large chunks, from the middle out. */
	while (n) {
		size_t a = n / 3, cnt = n / 4 + 1;
		if (a + cnt > n)
			cnt = n - a;
		col(t, NULL, a * L, cnt * L);
		memmove(&ids[a], &ids[a + cnt], (n - a - cnt) * sizeof(*ids));
		n -= cnt;
		cr_assert_eq(flextree_size(t), n * L);
		if (n) {
			uint64_t p;
			uint64_t loff = rng_below(&r, n * L);
			cr_assert_eq(flextree_lookup(t, loff, &p, NULL), 0);
			cr_assert_eq(p, 2 * L * ids[loff / L] + loff % L);
		}
		assert_check(t);
	}
	st = stats_of(t);
	cr_expect_eq(st.extents, 0);
	cr_expect_leq(st.height, 1);
	free(ids);
	flextree_close(t);
}
