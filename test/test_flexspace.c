/*
 * test_flexspace.c - FlexSpace against a flat byte array, the API's edges,
 * I/O faults injected through the seam, and a concurrency smoke test.
 *
 * Model tests run seeded random streams of writes (overwrite, extend, past
 * the end), inserts, collapses, truncates, defrags, syncs and reopens on a
 * space and on a plain byte array, compare random reads as they go and the
 * whole content plus flexspace_check every few hundred operations.  Three
 * configurations: default geometry; tiny segments and log (GC and tree
 * commits all the time); tiny segments with a 4 MiB max_data_size, so
 * that space reservation, forced collection and -ENOSPC run.
 *
 * Fault tests run one fixed workload (with a reopen in the middle) through
 * an I/O table that fails the Nth call of a class of operations, for every
 * N the workload reaches (thinned to at most FAULT_POINTS values), and
 * check the contract: calls return errors instead of crashing, a failed
 * write or sync makes later changes return FLEX_EFAILED, reads stay right,
 * close frees everything (ASan) and reopening recovers a state no older
 * than the last successful sync.
 *
 * Random tests print their seed; FLEX_TEST_SEED=N replays one and
 * FLEX_TEST_SCALE multiplies the operation counts.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <fcntl.h>

#include "../common/flex_ident.h"
#include "flexspace.h"
#include "lib/crashio.h"

/* Compares the whole space with the model. */
static int space_matches(struct flexspace *fs, const struct model *m, struct why *w)
{
	uint8_t *b = NULL;
	uint64_t sz = 0;
	int rc = space_read_all(fs, &b, &sz);
	if (rc)
		return failf(w, "reading the whole space: %s", flex_strerror(rc));
	if (sz != m->size) {
		free(b);
		return failf(w, "size %" PRIu64 ", model %" PRIu64, sz, m->size);
	}
	for (uint64_t i = 0; i < sz; i++) {
		if (b[i] != m->b[i]) {
			free(b);
			return failf(w, "byte %" PRIu64 " of %" PRIu64 " is %u, model %u", i, sz,
				     b[i], m->b[i]);
		}
	}
	free(b);
	return 0;
}

TestSuite(flexspace, .timeout = 300);
TestSuite(flexspace_fault, .timeout = 300);

/* ---- the model test ------------------------------------------------------- */

struct model_run {
	const char *name;
	struct flexspace_options opt;
	struct gen_cfg gen;
	long nops;
	long check_every;
	int enospc_ok; /* -ENOSPC is a legal answer to write/insert/defrag */
};

static void model_test(const struct model_run *mr, struct flexspace_stats *out)
{
	uint64_t seed = test_seed(mr->name);
	uint64_t r = seed;
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "model"), 0);
	struct flexspace *fs;
	int rc = flexspace_open(dir, &mr->opt, &fs);
	cr_assert_eq(rc, 0, "open: %s", flex_strerror(rc));

	struct model m = {0}, prev = {0};
	uint64_t maxlen = mr->gen.big_len > 65536 ? mr->gen.big_len : 65536;
	maxlen += 65536;
	uint8_t *buf = malloc(maxlen), *rb = malloc(maxlen);
	cr_assert(buf && rb);
	long nenospc = 0, counts[OP_NTYPES] = {0};
	struct flexspace_stats acc = {0};
	struct why w = {""};

	for (long i = 0; i < mr->nops; i++) {
		struct op op;
		gen_op(&r, m.size, &mr->gen, &op);
		counts[op.type]++;
		if (op.type == OP_READ) {
			uint64_t want = op.len < maxlen ? op.len : maxlen;
			ssize_t n = flexspace_read(fs, rb, op.off, want);
			uint64_t exp = op.off >= m.size ? 0
						       : (want < m.size - op.off ? want
										: m.size - op.off);
			cr_assert_eq(n, (ssize_t)exp,
				     "seed %" PRIu64 " op %ld: read(%" PRIu64 ", %" PRIu64
				     ") returned %zd, expected %" PRIu64,
				     seed, i, op.off, want, n, exp);
			cr_assert(exp == 0 || memcmp(rb, m.b + op.off, exp) == 0,
				  "seed %" PRIu64 " op %ld: read(%" PRIu64 ", %" PRIu64
				  ") differs from the model",
				  seed, i, op.off, want);
			continue;
		}
		if (op.type == OP_REOPEN) {
			struct flexspace_stats st;
			flexspace_stats(fs, &st);
			acc.gc_runs += st.gc_runs;
			acc.tree_commits += st.tree_commits;
			acc.gc_bytes_moved += st.gc_bytes_moved;
			rc = flexspace_close(fs);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: close: %s", seed, i,
				     flex_strerror(rc));
			rc = flexspace_open(dir, &mr->opt, &fs);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: reopen: %s", seed, i,
				     flex_strerror(rc));
			cr_assert_eq(space_matches(fs, &m, &w), 0, "seed %" PRIu64 " op %ld: after reopen: %s",
				     seed, i, w.msg);
			continue;
		}
		if (mr->enospc_ok)
			model_copy(&prev, &m);
		model_apply(&m, &op, buf);
		rc = space_apply(fs, &op, buf);
		if (rc == -ENOSPC && mr->enospc_ok &&
		    (op.type == OP_WRITE || op.type == OP_INSERT || op.type == OP_DEFRAG ||
		     op.type == OP_APPLY)) {
			/* Refused: nothing changed, and the space goes on. */
			nenospc++;
			model_copy(&m, &prev);
			cr_assert_eq(flexspace_size(fs), m.size,
				     "seed %" PRIu64 " op %ld: -ENOSPC %s changed the size", seed, i,
				     op_names[op.type]);
			if (nenospc % 16 == 1)
				cr_assert_eq(space_matches(fs, &m, &w), 0,
					     "seed %" PRIu64 " op %ld: after -ENOSPC: %s", seed, i,
					     w.msg);
			continue;
		}
		cr_assert_eq(rc, 0,
			     "seed %" PRIu64 " op %ld: %s(%" PRIu64 ", %" PRIu64 ") failed: %s (%d)",
			     seed, i, op_names[op.type], op.off, op.len, flex_strerror(rc), rc);
		cr_assert_eq(flexspace_size(fs), m.size,
			     "seed %" PRIu64 " op %ld: size after %s(%" PRIu64 ", %" PRIu64 ")", seed,
			     i, op_names[op.type], op.off, op.len);
		if ((i + 1) % mr->check_every == 0) {
			rc = flexspace_check(fs);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: check: %s", seed, i,
				     flex_strerror(rc));
			cr_assert_eq(space_matches(fs, &m, &w), 0, "seed %" PRIu64 " op %ld: %s",
				     seed, i, w.msg);
		}
	}
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(space_matches(fs, &m, &w), 0, "seed %" PRIu64 " at the end: %s", seed, w.msg);
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	acc.gc_runs += st.gc_runs;
	acc.tree_commits += st.tree_commits;
	acc.gc_bytes_moved += st.gc_bytes_moved;
	acc.data_file_bytes = st.data_file_bytes;
	acc.live_bytes = st.live_bytes;
	acc.size = st.size;
	cr_assert_eq(st.size, m.size);
	cr_assert_eq(flexspace_close(fs), 0);
	/* Once more from the files, as a fresh process would see them. */
	cr_assert_eq(flexspace_open(dir, &mr->opt, &fs), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(space_matches(fs, &m, &w), 0, "seed %" PRIu64 " final reopen: %s", seed,
		     w.msg);
	cr_assert_eq(flexspace_close(fs), 0);
	fprintf(stderr,
		"%s: %ld ops (w %ld i %ld c %ld t %ld d %ld a %ld s %ld r %ld reads %ld), %ld ENOSPC, "
		"gc_runs %" PRIu64 ", gc moved %" PRIu64 ", tree commits %" PRIu64
		", size %" PRIu64 ", data file %" PRIu64 " for %" PRIu64 " live\n",
		mr->name, mr->nops, counts[OP_WRITE], counts[OP_INSERT], counts[OP_COLLAPSE],
		counts[OP_TRUNCATE], counts[OP_DEFRAG], counts[OP_APPLY], counts[OP_SYNC], counts[OP_REOPEN],
		counts[OP_READ], nenospc, acc.gc_runs, acc.gc_bytes_moved, acc.tree_commits,
		acc.size, acc.data_file_bytes, acc.live_bytes);
	acc.syncs = (uint64_t)nenospc; /* reported to the caller in an unused field */
	if (out)
		*out = acc;
	model_free(&m);
	model_free(&prev);
	free(buf);
	free(rb);
	tmp_remove(dir);
}

Test(flexspace, model_default_geometry)
{
	struct model_run mr = {
		.name = "model_default_geometry",
		.opt = {0},
		.gen = {.target_size = 3u << 20, .big_len = 6u << 20, .insert_pct = 20,
			.collapse_pct = 12, .truncate_pct = 3, .defrag_pct = 2, .sync_pct = 5,
			.reopen_pct = 1, .read_pct = 15, .apply_pct = 8},
		.nops = scaled(3000),
		.check_every = 300,
	};
	model_test(&mr, NULL);
}

Test(flexspace, model_tiny_segments_gc_and_commits_run_constantly)
{
	struct model_run mr = {
		.name = "model_tiny_segments",
		.opt = tiny_options(),
		.gen = {.target_size = 768u << 10, .big_len = 300u << 10, .insert_pct = 20,
			.collapse_pct = 12, .truncate_pct = 3, .defrag_pct = 3, .sync_pct = 5,
			.reopen_pct = 1, .read_pct = 15, .apply_pct = 8},
		.nops = scaled(10000),
		.check_every = 250,
	};
	struct flexspace_stats st;
	model_test(&mr, &st);
	cr_assert_gt(st.gc_runs, 0, "tiny segments never collected garbage");
	cr_assert_gt(st.tree_commits, 0);
}

/* The same with reads through pread instead of the mapping of DATA. */
Test(flexspace, model_tiny_segments_reading_without_the_mapping)
{
	struct model_run mr = {
		.name = "model_tiny_segments_no_mmap",
		.opt = tiny_options(),
		.gen = {.target_size = 768u << 10, .big_len = 300u << 10, .insert_pct = 20,
			.collapse_pct = 12, .truncate_pct = 3, .defrag_pct = 3, .sync_pct = 5,
			.reopen_pct = 1, .read_pct = 15, .apply_pct = 8},
		.nops = scaled(4000),
		.check_every = 250,
	};
	mr.opt.no_mmap = 1;
	struct flexspace_stats st;
	model_test(&mr, &st);
	cr_assert_gt(st.gc_runs, 0, "tiny segments never collected garbage");
}

Test(flexspace, model_small_max_data_size_reserves_collects_and_refuses_with_enospc)
{
	struct flexspace_options o = tiny_options();
	o.max_data_size = 4u << 20;
	struct model_run mr = {
		.name = "model_max_data_4MiB",
		.opt = o,
		.gen = {.target_size = 4000u << 10, .big_len = 400u << 10, .insert_pct = 30,
			.collapse_pct = 3, .truncate_pct = 1, .defrag_pct = 3, .sync_pct = 4,
			.reopen_pct = 1, .read_pct = 10, .apply_pct = 8},
		.nops = scaled(5000),
		.check_every = 250,
		.enospc_ok = 1,
	};
	struct flexspace_stats st;
	model_test(&mr, &st);
	cr_assert_gt(st.gc_runs, 0);
	if (!st.syncs)
		fprintf(stderr, "warning: this stream never ran into -ENOSPC (the seed's sizes stayed low)\n");
	cr_assert_leq(st.data_file_bytes, 4u << 20, "DATA grew past max_data_size");
}

/* Past the live-data cap (30/32 of max_data_size) writes and inserts are
 * refused with -ENOSPC and change nothing; below it, overwrites (which do
 * not add live data) must go on succeeding, collection making the room. */
Test(flexspace, enospc_leaves_space_unchanged_and_overwrites_below_the_cap_succeed)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "enospc"), 0);
	struct flexspace_options o = tiny_options();
	o.max_data_size = 1u << 20;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	const uint64_t live = 768u << 10; /* 75% of max_data_size; the cap is 93.75% */
	uint8_t *b = malloc(1u << 20), *rb = malloc(1u << 20);
	for (size_t i = 0; i < (1u << 20); i++)
		b[i] = (uint8_t)(i * 7 + 3);
	ssize_t n = flexspace_write(fs, b, 0, live);
	cr_assert_eq(n, (ssize_t)live, "%s", flex_strerror((int)n));
	n = flexspace_write(fs, b, live, 200u << 10);
	cr_assert_eq(n, -ENOSPC, "a write past the live cap: %zd", n);
	cr_assert_eq(flexspace_size(fs), live);
	n = flexspace_insert(fs, b, 5, 200u << 10);
	cr_assert_eq(n, -ENOSPC);
	cr_assert_eq(flexspace_size(fs), live);
	cr_assert_eq(flexspace_read(fs, rb, 0, live), (ssize_t)live);
	cr_assert_eq(memcmp(rb, b, live), 0, "a refused write changed the content");
	cr_assert_eq(flexspace_sync(fs), 0);
	uint64_t r = 1;
	char why[400] = "";
	for (int k = 0; k < 300 && !why[0]; k++) {
		uint64_t off = rnd_below(&r, live - (16u << 10));
		n = flexspace_write(fs, b + off, off, 16u << 10);
		struct flexspace_stats st;
		flexspace_stats(fs, &st);
		if (n != 16 << 10)
			snprintf(why, sizeof(why),
				 "overwrite %d of 16 KiB with %" PRIu64 " of %u bytes live (cap %u): "
				 "%s; DATA %" PRIu64 " bytes, gc_runs %" PRIu64 ", segments free %" PRIu64,
				 k, st.live_bytes, 1u << 20, (1u << 20) / 32 * 30,
				 flex_strerror((int)n), st.data_file_bytes, st.gc_runs,
				 st.segments_free);
	}
	if (why[0]) { /* clean up first: LeakSanitizer should see no noise */
		flexspace_close(fs);
		free(b);
		free(rb);
		tmp_remove(dir);
		cr_assert_fail("%s", why);
	}
	cr_assert_eq(flexspace_read(fs, rb, 0, live), (ssize_t)live);
	cr_assert_eq(memcmp(rb, b, live), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	cr_assert_leq(st.data_file_bytes, 1u << 20);
	cr_assert_eq(flexspace_close(fs), 0);
	free(b);
	free(rb);
	tmp_remove(dir);
}

/* Overwriting one range again and again must not grow DATA without limit. */
static void overwrite_bounded(uint32_t seg, uint64_t live, int rounds)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "bounded"), 0);
	struct flexspace_options o = {.segment_size = seg, .log_limit = 1u << 20};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t seed = test_seed("overwrite_bounded"), r = seed;
	uint8_t *b = malloc(64u << 10);
	uint64_t maxfile = 0;
	for (uint64_t off = 0; off < live; off += 64u << 10) {
		op_data(rnd(&r), b, 64u << 10);
		cr_assert_eq(flexspace_write(fs, b, off, 64u << 10), 64 << 10);
	}
	for (int k = 0; k < rounds; k++) {
		uint64_t len = 1 + rnd_below(&r, 64u << 10);
		uint64_t off = rnd_below(&r, live - len);
		op_data(rnd(&r), b, len);
		cr_assert_eq(flexspace_write(fs, b, off, len), (ssize_t)len);
		if (k % 50 == 0)
			cr_assert_eq(flexspace_sync(fs), 0);
		struct flexspace_stats st;
		flexspace_stats(fs, &st);
		if (st.data_file_bytes > maxfile)
			maxfile = st.data_file_bytes;
		cr_assert_leq(st.data_file_bytes, 3 * live + 8 * (uint64_t)seg,
			      "seed %" PRIu64 " round %d: DATA %" PRIu64 " bytes for %" PRIu64
			      " live (gc_runs %" PRIu64 ")",
			      seed, k, st.data_file_bytes, live, st.gc_runs);
	}
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	cr_assert_gt(st.gc_runs, 0);
	cr_assert_eq(st.live_bytes, live);
	cr_assert_eq(flexspace_check(fs), 0);
	fprintf(stderr,
		"overwrite_bounded seg %u: %d overwrites of %" PRIu64 " live bytes, DATA peak "
		"%" PRIu64 ", gc_runs %" PRIu64 "\n",
		seg, rounds, live, maxfile, st.gc_runs);
	cr_assert_eq(flexspace_close(fs), 0);
	free(b);
	tmp_remove(dir);
}

Test(flexspace, repeated_overwrites_keep_data_file_bounded_tiny_segments)
{
	overwrite_bounded(64u << 10, 2u << 20, (int)scaled(3000));
}

Test(flexspace, repeated_overwrites_keep_data_file_bounded_1MiB_segments)
{
	overwrite_bounded(1u << 20, 16u << 20, (int)scaled(1500));
}

/* Blocks of a file, in bytes (what du counts). */
static uint64_t file_blocks(const char *path)
{
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0, "stat %s", path);
	return (uint64_t)sb.st_blocks * 512;
}

/* Segments emptied below the end of DATA give their blocks back: the file
 * keeps its size but not its space. */
Test(flexspace, freed_segments_below_the_end_take_no_space)
{
	char dir[PATH_MAX], data[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "holes"), 0);
	snprintf(data, sizeof(data), "%s/DATA", dir);
	const uint32_t seg = 1u << 20;
	/* A leaf cache of its own: with one leaf (make test-tinycache) every
	 * change commits the tree, the first segments are free before the
	 * rewrite and it reuses them instead of growing the file. */
	struct flexspace_options o = {
	    .segment_size = seg, .gc_ratio = 8.0, .tree_cache_size = 16u << 20};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	/* Can this file system make holes at all? */
	int fd = open(data, O_RDWR);
	cr_assert(fd >= 0);
	int holes = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0;
	close(fd);
	if (!holes) {
		fprintf(stderr, "freed_segments: note: no holes on this file system; skipped\n");
		cr_assert_eq(flexspace_close(fs), 0);
		tmp_remove(dir);
		cr_skip_test("no FALLOC_FL_PUNCH_HOLE");
	}
	uint64_t seed = test_seed("freed_segments"), r = seed;
	uint8_t *b = malloc(seg), *rb = malloc(seg);
	/* 16 segments, then the first 8 rewritten: their old segments empty. */
	for (uint64_t off = 0; off < 16ull * seg; off += seg) {
		op_data(rnd(&r), b, seg);
		cr_assert_eq(flexspace_write(fs, b, off, seg), (ssize_t)seg);
	}
	cr_assert_eq(flexspace_sync(fs), 0);
	op_data(rnd(&r), b, seg);
	for (uint64_t off = 0; off < 8ull * seg; off += seg)
		cr_assert_eq(flexspace_write(fs, b, off, seg), (ssize_t)seg);
	cr_assert_eq(flexspace_sync(fs), 0); /* the removals durable: freed */
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	uint64_t used = file_blocks(data);
	fprintf(stderr, "freed_segments: DATA %" PRIu64 " bytes, %" PRIu64 " allocated, %" PRIu64
		" live\n", st.data_file_bytes, used, st.live_bytes);
	cr_assert_geq(st.data_file_bytes, 23ull * seg, "the rewrite went past the old end");
	cr_assert_leq(used, st.live_bytes + 3ull * seg,
		      "%" PRIu64 " bytes allocated for %" PRIu64 " live", used, st.live_bytes);
	/* What was rewritten reads back, and so does what was not. */
	cr_assert_eq(flexspace_read(fs, rb, 3ull * seg, seg), (ssize_t)seg);
	cr_assert(!memcmp(rb, b, seg));
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_assert_eq(flexspace_read(fs, rb, 7ull * seg, seg), (ssize_t)seg);
	cr_assert(!memcmp(rb, b, seg));
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	free(b);
	free(rb);
	tmp_remove(dir);
}

/* Free segments are not garbage: a space whose used segments are within
 * gc_ratio collects nothing, however many segments below the end of DATA
 * are free.  Counting them kept a collection due that could never bring
 * the count down, and every maintenance moved nearly-live segments. */
Test(flexspace, free_segments_keep_no_collection_due)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "freegc"), 0);
	const uint32_t seg = 1u << 20;
	struct flexspace_options o = {.segment_size = seg}; /* gc_ratio 1.5 */
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t seed = test_seed("free_segments_gc"), r = seed;
	uint8_t *b = malloc(seg), *rb = malloc(seg), *model = malloc(12ull * seg);
	for (uint64_t off = 0; off < 24ull * seg; off += seg) {
		op_data(rnd(&r), b, seg);
		cr_assert_eq(flexspace_write(fs, b, off, seg), (ssize_t)seg);
		if (off >= 12ull * seg)
			memcpy(model + off - 12ull * seg, b, seg);
	}
	cr_assert_eq(flexspace_sync(fs), 0);
	/* The first half goes: its 12 segments are freed once durable. */
	cr_assert_eq(flexspace_collapse(fs, 0, 12ull * seg), 0);
	cr_assert_eq(flexspace_sync(fs), 0);
	/* An eighth of each remaining segment rewritten: 12 segments 7/8
	 * live, 1.5 segments of new data, 12 MiB live in about 14 segments
	 * of about 25 in DATA. */
	for (uint64_t s = 0; s < 12; s++) {
		uint64_t off = s * seg + rnd_below(&r, seg - seg / 8);
		op_data(rnd(&r), b, seg / 8);
		cr_assert_eq(flexspace_write(fs, b, off, seg / 8), (ssize_t)(seg / 8));
		memcpy(model + off, b, seg / 8);
		cr_assert_eq(flexspace_sync(fs), 0);
	}
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	fprintf(stderr,
		"free_segments_gc: seed %" PRIu64 ": %" PRIu64 " segments used, %" PRIu64
		" free, %" PRIu64 " live bytes, %" PRIu64 " moved by gc\n",
		seed, st.segments_used, st.segments_free, st.live_bytes, st.gc_bytes_moved);
	cr_assert_geq(st.segments_free, 8, "the collapse left free segments");
	cr_assert_leq(st.segments_used * seg, 3 * st.live_bytes / 2);
	cr_assert_eq(st.gc_bytes_moved, 0, "seed %" PRIu64 ": collected %" PRIu64 " bytes", seed,
		     st.gc_bytes_moved);
	for (uint64_t s = 0; s < 12; s++) {
		cr_assert_eq(flexspace_read(fs, rb, s * seg, seg), (ssize_t)seg);
		cr_assert(!memcmp(rb, model + s * seg, seg), "segment %" PRIu64, s);
	}
	/* The control: with free segments still below the end, garbage in
	 * the used segments past gc_ratio is collected, and the used
	 * segments come back under it. */
	int k = 0;
	for (; k < 200 && st.gc_bytes_moved == 0; k++) {
		uint64_t off = rnd_below(&r, 12ull * seg - seg / 2);
		op_data(rnd(&r), b, seg / 2);
		cr_assert_eq(flexspace_write(fs, b, off, seg / 2), (ssize_t)(seg / 2));
		memcpy(model + off, b, seg / 2);
		cr_assert_eq(flexspace_sync(fs), 0);
		cr_assert_eq(flexspace_stats(fs, &st), 0);
	}
	fprintf(stderr, "free_segments_gc: collected after %d more writes: %" PRIu64
		" used, %" PRIu64 " free, %" PRIu64 " moved\n",
		k, st.segments_used, st.segments_free, st.gc_bytes_moved);
	cr_assert_gt(st.gc_bytes_moved, 0, "seed %" PRIu64 ": garbage past gc_ratio never collected",
		     seed);
	cr_assert_leq(st.segments_used * seg, 3 * st.live_bytes / 2 + 4ull * seg);
	for (uint64_t s = 0; s < 12; s++) {
		cr_assert_eq(flexspace_read(fs, rb, s * seg, seg), (ssize_t)seg);
		cr_assert(!memcmp(rb, model + s * seg, seg), "segment %" PRIu64, s);
	}
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	free(b);
	free(rb);
	free(model);
	tmp_remove(dir);
}

/* The space holds model[0..size) and passes its check, and again once
 * reopened from its files with o; closes it. */
static void gc_verify(struct flexspace *fs, const char *dir, const struct flexspace_options *o,
		      const uint8_t *model, uint64_t size, uint64_t seed)
{
	uint8_t *rb = malloc(size ? size : 1);
	for (int reopen = 0; reopen < 2; reopen++) {
		if (reopen)
			cr_assert_eq(flexspace_open(dir, o, &fs), 0);
		cr_assert_eq(flexspace_check(fs), 0, "seed %" PRIu64 ", reopened %d", seed, reopen);
		memset(rb, 0, size);
		cr_assert_eq(flexspace_read(fs, rb, 0, size), (ssize_t)size);
		cr_assert(!memcmp(rb, model, size), "seed %" PRIu64 ": bytes (reopened %d)", seed,
			  reopen);
		cr_assert_eq(flexspace_close(fs), 0);
	}
	free(rb);
}

/* A collection's victims hold pieces from all over the space: each piece
 * moved dirties a tree leaf, and a dirty leaf cannot leave memory before
 * the tree is committed.  A run commits the tree as often as its leaf
 * cache fills, as changes do, instead of holding most of the tree until
 * it ends.  The log is given no say (log_limit 1 GiB): on the old code
 * the run made no commit at all. */
Test(flexspace, a_collection_spread_over_the_tree_commits_as_its_leaves_fill)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "gcleaves"), 0);
	struct flexspace_options o = tiny_options();
	o.log_limit = 1u << 30;
	o.tree_cache_size = 16u << 10; /* four leaves */
	o.gc_ratio = 1.2;
	o.defer_maintenance = 1;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t seed = test_seed("gc_leaves"), r = seed;
	const uint32_t piece = 32, n = 16000;
	uint8_t *model = malloc((size_t)n * piece), b[32];
	uint64_t size = 0;
	/* Pieces inserted at random places: neighbours in the space lie in
	 * different segments, and every segment's pieces span the tree. */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = rnd_below(&r, size / piece + 1) * piece;
		op_data(rnd(&r), b, piece);
		cr_assert_eq(flexspace_insert(fs, b, off, piece), (ssize_t)piece);
		memmove(model + off + piece, model + off, size - off);
		memcpy(model + off, b, piece);
		size += piece;
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	/* Half of it rewritten, at unaligned places: every old segment is
	 * left about half live. */
	for (uint32_t i = 0; i < n / 2; i++) {
		uint64_t off = rnd_below(&r, size - piece + 1);
		op_data(rnd(&r), b, piece);
		cr_assert_eq(flexspace_write(fs, b, off, piece), (ssize_t)piece);
		memcpy(model + off, b, piece);
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	struct flexspace_stats before, after;
	cr_assert_eq(flexspace_stats(fs, &before), 0);
	cr_assert_eq(flexspace_maintain(fs), 0);
	cr_assert_eq(flexspace_stats(fs, &after), 0);
	fprintf(stderr,
		"gc_leaves: seed %" PRIu64 ": %" PRIu64 " extents; the collection moved %" PRIu64
		" bytes in %" PRIu64 " runs with %" PRIu64 " tree commits\n",
		seed, after.extents, after.gc_bytes_moved - before.gc_bytes_moved,
		after.gc_runs - before.gc_runs, after.tree_commits - before.tree_commits);
	cr_assert_gt(after.gc_runs, before.gc_runs, "seed %" PRIu64 ": no collection", seed);
	cr_assert_geq(after.tree_commits - before.tree_commits, 2,
		      "seed %" PRIu64 ": the collection held its dirty leaves to its end", seed);
	gc_verify(fs, dir, &o, model, size, seed);
	free(model);
	tmp_remove(dir);
}

/* A run moves at most 16 segments of live bytes (it lists every piece
 * before it starts); the next maintenance goes on where it stopped. */
Test(flexspace, a_collection_run_moves_at_most_sixteen_segments)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "gccap"), 0);
	struct flexspace_options o = tiny_options();
	o.log_limit = 1u << 20;
	o.gc_ratio = 1.2;
	o.defer_maintenance = 1;
	const uint64_t seg = o.segment_size, size = 96 * seg;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t seed = test_seed("gc_cap"), r = seed;
	uint8_t *model = malloc(size);
	op_data(rnd(&r), model, size);
	cr_assert_eq(flexspace_write(fs, model, 0, size), (ssize_t)size);
	cr_assert_eq(flexspace_commit(fs), 0);
	/* Every old segment left about half live. */
	for (uint64_t i = 0; i < size / 2048 / 2; i++) {
		uint64_t off = rnd_below(&r, size / 2048) * 2048;
		op_data(rnd(&r), model + off, 2048);
		cr_assert_eq(flexspace_write(fs, model + off, off, 2048), 2048);
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	struct flexspace_stats st, prev;
	cr_assert_eq(flexspace_stats(fs, &prev), 0);
	int runs = 0;
	for (; runs < 64; runs++) {
		cr_assert_eq(flexspace_maintain(fs), 0);
		cr_assert_eq(flexspace_stats(fs, &st), 0);
		if (st.gc_runs == prev.gc_runs)
			break;
		cr_assert_leq(st.gc_bytes_moved - prev.gc_bytes_moved, 16 * seg,
			      "seed %" PRIu64 ": run %d moved %" PRIu64 " bytes", seed, runs,
			      st.gc_bytes_moved - prev.gc_bytes_moved);
		prev = st;
	}
	fprintf(stderr, "gc_cap: seed %" PRIu64 ": %d runs moved %" PRIu64 " bytes; %" PRIu64
		" segments used for %" PRIu64 " live bytes\n",
		seed, runs, st.gc_bytes_moved, st.segments_used, st.live_bytes);
	cr_assert_geq(runs, 2, "seed %" PRIu64 ": the garbage took one run", seed);
	cr_assert_leq(st.segments_used * seg, 6 * st.live_bytes / 5 + 4 * seg);
	gc_verify(fs, dir, &o, model, size, seed);
	free(model);
	tmp_remove(dir);
}

/* flexspace_collect takes every segment at most half live, whatever
 * gc_ratio says, and no other. */
Test(flexspace, collect_takes_every_segment_at_most_half_live)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "collect"), 0);
	struct flexspace_options o = tiny_options();
	o.log_limit = 1u << 20;
	o.defer_maintenance = 1; /* gc_ratio 1.5 */
	const uint64_t seg = o.segment_size, size = 32 * seg, piece = 2048;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t seed = test_seed("collect"), r = seed;
	uint8_t *model = malloc(size);
	op_data(rnd(&r), model, size);
	cr_assert_eq(flexspace_write(fs, model, 0, size), (ssize_t)size);
	cr_assert_eq(flexspace_commit(fs), 0);
	/* Three pieces of four rewritten in the first 16 segments' bytes:
	 * those are a quarter live, the other 16 whole. */
	for (uint64_t off = 0; off < 16 * seg; off += piece) {
		if (off / piece % 4 == 0)
			continue;
		op_data(rnd(&r), model + off, piece);
		cr_assert_eq(flexspace_write(fs, model + off, off, piece), (ssize_t)piece);
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	struct flexspace_stats a, b, c;
	cr_assert_eq(flexspace_maintain(fs), 0);
	cr_assert_eq(flexspace_stats(fs, &a), 0);
	cr_assert_eq(a.gc_runs, 0, "under gc_ratio: %" PRIu64 " segments for %" PRIu64 " live",
		     a.segments_used, a.live_bytes);
	cr_assert_eq(flexspace_collect(fs), 0);
	cr_assert_eq(flexspace_stats(fs, &b), 0);
	fprintf(stderr, "collect: seed %" PRIu64 ": %" PRIu64 " segments used before, %" PRIu64
		" after, %" PRIu64 " bytes moved in %" PRIu64 " runs\n",
		seed, a.segments_used, b.segments_used, b.gc_bytes_moved, b.gc_runs);
	/* The quarter-live ones moved (4 segments of bytes), the whole ones
	 * not; what is left is the live bytes and a partly filled segment. */
	cr_assert_eq(b.gc_bytes_moved, 4 * seg, "seed %" PRIu64, seed);
	cr_assert_leq(b.segments_used * seg, size + 2 * seg);
	/* Nothing is left at most half live: a second call moves nothing. */
	cr_assert_eq(flexspace_collect(fs), 0);
	cr_assert_eq(flexspace_stats(fs, &c), 0);
	cr_assert_eq(c.gc_bytes_moved, b.gc_bytes_moved);
	gc_verify(fs, dir, &o, model, size, seed);
	free(model);
	tmp_remove(dir);
}

/* ---- API edges ------------------------------------------------------------ */

static struct flexspace *open_fresh(char *dir, size_t n, const struct flexspace_options *o)
{
	cr_assert_eq(tmp_make(dir, n, "api"), 0);
	struct flexspace *fs;
	int rc = flexspace_open(dir, o, &fs);
	cr_assert_eq(rc, 0, "open: %s", flex_strerror(rc));
	return fs;
}

Test(flexspace, null_handles_and_buffers_are_einval)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	uint8_t b[16] = {0};
	cr_assert_eq(flexspace_write(NULL, b, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_insert(NULL, b, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_read(NULL, b, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_collapse(NULL, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_truncate(NULL, 0), -EINVAL);
	cr_assert_eq(flexspace_sync(NULL), -EINVAL);
	cr_assert_eq(flexspace_defrag(NULL, 0, 0), -EINVAL);
	cr_assert_eq(flexspace_check(NULL), -EINVAL);
	cr_assert_eq(flexspace_tag_set(NULL, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_tag_get(NULL, 0, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_read_extent(NULL, b, 0, 1, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_size(NULL), 0);
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(NULL, &st), -EINVAL);
	cr_assert_eq(flexspace_stats(fs, NULL), -EINVAL);
	struct flexspace_point pt;
	cr_assert_eq(flexspace_durable(NULL, &pt, &pt), -EINVAL);
	cr_assert_eq(flexspace_durable(fs, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_write(fs, NULL, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_insert(fs, NULL, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_read(fs, NULL, 0, 1), -EINVAL);
	cr_assert_eq(flexspace_read_extent(fs, NULL, 0, 1, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_scan(fs, 0, 1, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_close(NULL), 0);
	struct flexspace *out = (struct flexspace *)&st;
	cr_assert_eq(flexspace_open(NULL, NULL, &out), -EINVAL);
	cr_assert_null(out, "a failed open must leave *out NULL");
	cr_assert_eq(flexspace_open(dir, NULL, NULL), -EINVAL);
	cr_assert_eq(flexspace_size(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

static int point_cmp(const struct flexspace_point *a, const struct flexspace_point *b)
{
	if (a->version != b->version)
		return a->version < b->version ? -1 : 1;
	return a->batches < b->batches ? -1 : a->batches > b->batches;
}

/* flexspace_durable agrees with flexspace_stats, stays put while changes
 * are only buffered, moves forward with each sync, and after a reopen the
 * recovered point is no earlier than the last one seen. */
Test(flexspace, durable_point_moves_with_syncs)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	struct flexspace_point now, rec, prev;
	struct flexspace_stats st;
	cr_assert_eq(flexspace_durable(fs, &now, &rec), 0);
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	cr_assert(now.version == st.sync_version && now.batches == st.sync_batches);
	cr_assert(rec.version == st.recovered_version && rec.batches == st.recovered_batches);
	uint8_t b[512];
	memset(b, 3, sizeof(b));
	for (int i = 0; i < 3; i++) {
		prev = now;
		cr_assert_eq(flexspace_write(fs, b, (uint64_t)i * sizeof(b), sizeof(b)),
			     (ssize_t)sizeof(b));
		cr_assert_eq(flexspace_durable(fs, &now, NULL), 0);
		cr_assert_eq(point_cmp(&now, &prev), 0, "a write not synced moved the point");
		cr_assert_eq(flexspace_sync(fs), 0);
		cr_assert_eq(flexspace_durable(fs, &now, NULL), 0);
		cr_assert_gt(point_cmp(&now, &prev), 0, "sync %d left the point at %" PRIu64 ".%" PRIu64,
			     i, now.version, now.batches);
		cr_assert_eq(flexspace_stats(fs, &st), 0);
		cr_assert(now.version == st.sync_version && now.batches == st.sync_batches);
	}
	cr_assert_eq(flexspace_durable(fs, NULL, &prev), 0);
	cr_assert_eq(point_cmp(&prev, &rec), 0, "the recovered point moved");
	prev = now;
	cr_assert_eq(flexspace_close(fs), 0);
	int rc = flexspace_open(dir, NULL, &fs);
	cr_assert_eq(rc, 0, "reopen: %s", flex_strerror(rc));
	cr_assert_eq(flexspace_durable(fs, &now, &rec), 0);
	cr_assert_geq(point_cmp(&rec, &prev), 0, "recovered to a point before the last sync");
	cr_assert_geq(point_cmp(&now, &rec), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, zero_lengths_are_noops_and_overflow_is_etoobig)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	uint8_t b[64];
	memset(b, 0xab, sizeof(b));
	cr_assert_eq(flexspace_write(fs, b, 0, 64), 64);
	cr_assert_eq(flexspace_write(fs, NULL, 10, 0), 0);
	cr_assert_eq(flexspace_write(fs, b, 1000, 0), 0, "len 0 past the end is a no-op");
	cr_assert_eq(flexspace_insert(fs, NULL, 5, 0), 0);
	cr_assert_eq(flexspace_insert(fs, b, 500, 0), 0);
	cr_assert_eq(flexspace_collapse(fs, 10, 0), 0);
	cr_assert_eq(flexspace_collapse(fs, 64, 0), 0);
	cr_assert_eq(flexspace_read(fs, NULL, 0, 0), 0);
	cr_assert_eq(flexspace_defrag(fs, 3, 0), 0);
	cr_assert_eq(flexspace_size(fs), 64, "zero-length calls changed the size");

	cr_assert_eq(flexspace_write(fs, b, FLEXSPACE_MAX_SIZE, 1), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_write(fs, b, FLEXSPACE_MAX_SIZE - 10, 11), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_write(fs, b, UINT64_MAX - 5, 10), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_insert(fs, b, UINT64_MAX, 1), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_insert(fs, b, FLEXSPACE_MAX_SIZE - 63, 64), FLEX_ETOOBIG,
		     "an insert that makes the size exceed the maximum");
	cr_assert_eq(flexspace_truncate(fs, FLEXSPACE_MAX_SIZE + 1), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_size(fs), 64);

	/* The largest size is reachable with a hole, and writable at its end. */
	cr_assert_eq(flexspace_write(fs, b, FLEXSPACE_MAX_SIZE - 8, 8), 8);
	cr_assert_eq(flexspace_size(fs), FLEXSPACE_MAX_SIZE);
	uint8_t rb[32];
	cr_assert_eq(flexspace_read(fs, rb, FLEXSPACE_MAX_SIZE - 16, 32), 16);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(rb[i], 0);
	cr_assert_eq(memcmp(rb + 8, b, 8), 0);
	cr_assert_eq(flexspace_insert(fs, b, 0, 1), FLEX_ETOOBIG);
	cr_assert_eq(flexspace_sync(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, NULL, &fs), 0);
	cr_assert_eq(flexspace_size(fs), FLEXSPACE_MAX_SIZE);
	cr_assert_eq(flexspace_read(fs, rb, FLEXSPACE_MAX_SIZE - 8, 32), 8);
	cr_assert_eq(memcmp(rb, b, 8), 0);
	cr_assert_eq(flexspace_truncate(fs, 64), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, collapse_past_end_is_erange_and_changes_nothing)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	uint8_t b[100], rb[100];
	for (int i = 0; i < 100; i++)
		b[i] = (uint8_t)i;
	cr_assert_eq(flexspace_write(fs, b, 0, 100), 100);
	cr_assert_eq(flexspace_collapse(fs, 50, 51), -ERANGE);
	cr_assert_eq(flexspace_collapse(fs, 101, 0), -ERANGE);
	cr_assert_eq(flexspace_collapse(fs, 200, 1), -ERANGE);
	cr_assert_eq(flexspace_collapse(fs, 1, UINT64_MAX), -ERANGE);
	cr_assert_eq(flexspace_collapse(fs, UINT64_MAX, 2), -ERANGE);
	cr_assert_eq(flexspace_defrag(fs, 90, 11), -ERANGE);
	cr_assert_eq(flexspace_tag_set(fs, 100, 1), -ERANGE);
	cr_assert_eq(flexspace_size(fs), 100);
	cr_assert_eq(flexspace_read(fs, rb, 0, 100), 100);
	cr_assert_eq(memcmp(rb, b, 100), 0);
	cr_assert_eq(flexspace_collapse(fs, 50, 50), 0, "collapse up to exactly the end");
	cr_assert_eq(flexspace_size(fs), 50);
	cr_assert_eq(flexspace_collapse(fs, 0, 50), 0);
	cr_assert_eq(flexspace_size(fs), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* flexspace_apply checks every op against the sizes the ones before it
 * leave before it changes anything: one bad op refuses the whole call. */
Test(flexspace, apply_is_all_or_nothing_and_ops_see_the_ones_before)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	uint8_t b[100], rb[128];
	for (int i = 0; i < 100; i++)
		b[i] = (uint8_t)i;
	cr_assert_eq(flexspace_write(fs, b, 0, 100), 100);
	cr_assert_eq(flexspace_apply(fs, NULL, 0), 0);
	cr_assert_eq(flexspace_apply(fs, NULL, 1), -EINVAL);
	struct {
		struct flexspace_op ops[3];
		size_t n;
		int want;
	} bad[] = {
	    /* the third op collapses past the end the first two leave */
	    {{{.type = FLEXSPACE_OP_REPLACE, .off = 10, .len = 5, .buf = "XYZ", .buf_len = 3},
	      {.type = FLEXSPACE_OP_INSERT, .off = 0, .buf = "ab", .buf_len = 2},
	      {.type = FLEXSPACE_OP_COLLAPSE, .off = 90, .len = 11}},
	     3, -ERANGE},
	    {{{.type = FLEXSPACE_OP_COLLAPSE, .off = 0, .len = 50},
	      {.type = FLEXSPACE_OP_TAG, .off = 50, .tag = 3}},
	     2, -ERANGE},
	    {{{.type = FLEXSPACE_OP_WRITE, .off = 0, .buf = "q", .buf_len = 1},
	      {.type = FLEXSPACE_OP_REPLACE, .off = 99, .len = 2, .buf = "r", .buf_len = 1}},
	     2, -ERANGE},
	    /* an op of no known type */
	    {{{.type = FLEXSPACE_OP_WRITE, .off = 0, .buf = "q", .buf_len = 1}, {.type = 0}},
	     2, -EINVAL},
	    {{{.type = FLEXSPACE_OP_TAG, .off = 1, .tag = 1},
	      {.type = FLEXSPACE_OP_INSERT, .off = 3, .buf = NULL, .buf_len = 4}},
	     2, -EINVAL},
	    {{{.type = FLEXSPACE_OP_WRITE, .off = FLEXSPACE_MAX_SIZE - 8, .buf = "12345678",
	       .buf_len = 8},
	      {.type = FLEXSPACE_OP_INSERT, .off = 0, .buf = "z", .buf_len = 1}},
	     2, FLEX_ETOOBIG},
	    {{{.type = FLEXSPACE_OP_REPLACE, .off = 0, .len = 0, .buf = "z",
	       .buf_len = FLEXSPACE_MAX_SIZE}},
	     1, FLEX_ETOOBIG},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(flexspace_apply(fs, bad[i].ops, bad[i].n), bad[i].want, "case %zu", i);
		cr_assert_eq(flexspace_size(fs), 100, "case %zu changed the size", i);
		cr_assert_eq(flexspace_read(fs, rb, 0, 100), 100);
		cr_assert_eq(memcmp(rb, b, 100), 0, "case %zu changed the bytes", i);
	}
	/* Each op sees the ones before: a tag past the old end, a replace of
	 * bytes an insert made, a write into a hole a write made. */
	struct flexspace_op ok[] = {
	    {.type = FLEXSPACE_OP_INSERT, .off = 100, .buf = "0123456789", .buf_len = 10},
	    {.type = FLEXSPACE_OP_TAG, .off = 105, .tag = 9},
	    {.type = FLEXSPACE_OP_REPLACE, .off = 102, .len = 3, .buf = "ABCDE", .buf_len = 5},
	    {.type = FLEXSPACE_OP_COLLAPSE, .off = 0, .len = 90},
	    {.type = FLEXSPACE_OP_WRITE, .off = 30, .buf = "end", .buf_len = 3},
	};
	cr_assert_eq(flexspace_apply(fs, ok, sizeof(ok) / sizeof(ok[0])), 0);
	static const char want[] = "\x5a\x5b\x5c\x5d\x5e\x5f\x60\x61\x62\x63"
				   "01ABCDE56789\0\0\0\0\0\0\0\0end";
	cr_assert_eq(flexspace_size(fs), sizeof(want) - 1);
	cr_assert_eq(flexspace_read(fs, rb, 0, sizeof(rb)), (ssize_t)sizeof(want) - 1);
	cr_assert_eq(memcmp(rb, want, sizeof(want) - 1), 0);
	uint16_t tag;
	uint64_t at;
	cr_assert_eq(flexspace_tag_get(fs, 17, &tag, &at), 0);
	cr_assert_eq(tag, 9, "the tag set before the replace moved with its bytes");
	cr_assert_eq(at, 17);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, NULL, &fs), 0);
	cr_assert_eq(flexspace_read(fs, rb, 0, sizeof(rb)), (ssize_t)sizeof(want) - 1);
	cr_assert_eq(memcmp(rb, want, sizeof(want) - 1), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* Readers see a space before or after a call of flexspace_apply, never
 * between its ops: every call moves one unit from one counter to another
 * (two replaces of different lengths, so the bytes after them move), and
 * the readers' sum never changes. */
struct apply_reader {
	struct flexspace *fs;
	atomic_int stop;
	long reads, bad;
};

static void *apply_reader_run(void *arg)
{
	struct apply_reader *ar = arg;
	char b[4096];
	while (!atomic_load(&ar->stop)) {
		ssize_t n = flexspace_read(ar->fs, b, 0, sizeof(b) - 1);
		if (n < 0) {
			ar->bad++;
			continue;
		}
		b[n] = 0;
		long sum = 0, k = 0;
		for (char *p = b; *p; k++) {
			char *e;
			sum += strtol(p, &e, 10);
			if (*e != ';')
				break;
			p = e + 1;
		}
		ar->bad += sum != 1000 || k != 8;
		__atomic_fetch_add(&ar->reads, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

Test(flexspace, readers_never_see_half_of_an_apply)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	long v[8] = {1000, 0, 0, 0, 0, 0, 0, 0};
	char b[256];
	size_t len = 0;
	for (int i = 0; i < 8; i++)
		len += (size_t)snprintf(b + len, sizeof(b) - len, "%ld;", v[i]);
	cr_assert_eq(flexspace_write(fs, b, 0, len), (ssize_t)len);
	struct apply_reader ar = {.fs = fs};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, apply_reader_run, &ar), 0);
	/* The calls start once the reader reads: on a busy machine the
	 * thread may not run before 20000 calls are done. */
	while (!__atomic_load_n(&ar.reads, __ATOMIC_RELAXED))
		sched_yield();
	uint64_t r = test_seed("apply_readers");
	for (int round = 0; round < 20000; round++) {
		int from = (int)rnd_below(&r, 8), to = (int)rnd_below(&r, 8);
		if (from == to || v[from] == 0)
			continue;
		/* the offsets and lengths of the two numbers, before the call */
		uint64_t off[8], old[8];
		char tmp[2][24];
		uint64_t at = 0;
		for (int i = 0; i < 8; i++) {
			old[i] = (uint64_t)snprintf(tmp[0], sizeof(tmp[0]), "%ld", v[i]);
			off[i] = at;
			at += old[i] + 1;
		}
		int lo = from < to ? from : to, hi = from < to ? to : from;
		v[from]--;
		v[to]++;
		size_t nlo = (size_t)snprintf(tmp[0], sizeof(tmp[0]), "%ld", v[lo]);
		size_t nhi = (size_t)snprintf(tmp[1], sizeof(tmp[1]), "%ld", v[hi]);
		/* the higher first, so the lower's offset still holds */
		struct flexspace_op ops[2] = {
		    {.type = FLEXSPACE_OP_REPLACE, .off = off[hi], .len = old[hi], .buf = tmp[1],
		     .buf_len = nhi},
		    {.type = FLEXSPACE_OP_REPLACE, .off = off[lo], .len = old[lo], .buf = tmp[0],
		     .buf_len = nlo},
		};
		cr_assert_eq(flexspace_apply(fs, ops, 2), 0);
		if (round % 5000 == 0)
			cr_assert_eq(flexspace_sync(fs), 0);
	}
	atomic_store(&ar.stop, 1);
	pthread_join(th, NULL);
	cr_assert_eq(ar.bad, 0, "%ld of %ld reads saw half a call", ar.bad, ar.reads);
	cr_assert_gt(ar.reads, 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, reads_at_and_past_end_and_holes)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	uint8_t b[100], rb[300];
	memset(b, 0x5a, sizeof(b));
	cr_assert_eq(flexspace_read(fs, rb, 0, 10), 0, "empty space");
	cr_assert_eq(flexspace_write(fs, b, 100, 100), 100, "write past the end");
	cr_assert_eq(flexspace_size(fs), 200);
	memset(rb, 0xff, sizeof(rb));
	cr_assert_eq(flexspace_read(fs, rb, 0, 300), 200);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(rb[i], 0, "hole byte %d", i);
	cr_assert_eq(memcmp(rb + 100, b, 100), 0);
	cr_assert_eq(flexspace_read(fs, rb, 200, 10), 0);
	cr_assert_eq(flexspace_read(fs, rb, 5000, 10), 0);
	cr_assert_eq(flexspace_read(fs, rb, UINT64_MAX, 10), 0);
	cr_assert_eq(flexspace_read(fs, rb, 150, 100), 50);
	/* Insert after a hole; truncate grows with a hole, shrinks. */
	cr_assert_eq(flexspace_insert(fs, b, 250, 10), 10);
	cr_assert_eq(flexspace_size(fs), 260);
	cr_assert_eq(flexspace_read(fs, rb, 200, 60), 60);
	for (int i = 0; i < 50; i++)
		cr_assert_eq(rb[i], 0);
	cr_assert_eq(flexspace_truncate(fs, 1000), 0);
	cr_assert_eq(flexspace_read(fs, rb, 255, 300), 300);
	for (int i = 5; i < 300; i++)
		cr_assert_eq(rb[i], 0);
	cr_assert_eq(flexspace_truncate(fs, 120), 0);
	cr_assert_eq(flexspace_read(fs, rb, 0, 300), 120);
	cr_assert_eq(memcmp(rb + 100, b, 20), 0);
	/* Truncating away and growing back leaves zeros, not the old bytes. */
	cr_assert_eq(flexspace_truncate(fs, 200), 0);
	cr_assert_eq(flexspace_read(fs, rb, 120, 80), 80);
	for (int i = 0; i < 80; i++)
		cr_assert_eq(rb[i], 0, "byte %d resurrected after truncate", 120 + i);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

struct ext_list {
	struct flextree_extent e[64];
	int n;
};

static int collect_extent(void *arg, const struct flextree_extent *e)
{
	struct ext_list *l = arg;
	if (l->n < 64)
		l->e[l->n] = *e;
	l->n++;
	return 0;
}

static int stop_at_second(void *arg, const struct flextree_extent *e)
{
	(void)e;
	return ++*(int *)arg == 2 ? 42 : 0;
}

Test(flexspace, read_extent_and_extents_report_extent_boundaries)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	static uint8_t a[20000], ins[100], rb[30000];
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i % 251);
	memset(ins, 0xee, sizeof(ins));
	/* Two contiguous appends merge; an insert in the middle splits. */
	cr_assert_eq(flexspace_write(fs, a, 0, 10000), 10000);
	cr_assert_eq(flexspace_write(fs, a + 10000, 10000, 10000), 10000);
	struct ext_list l = {.n = 0};
	cr_assert_eq(flexspace_scan(fs, 0, 20000, collect_extent, &l), 0);
	cr_assert_eq(l.n, 1, "contiguous appends should be one extent, got %d", l.n);
	cr_assert_eq(flexspace_insert(fs, ins, 5000, 100), 100);
	l.n = 0;
	cr_assert_eq(flexspace_scan(fs, 0, UINT64_MAX, collect_extent, &l), 0);
	cr_assert_eq(l.n, 3);
	cr_assert_eq(l.e[0].loff, 0);
	cr_assert_eq(l.e[0].len, 5000);
	cr_assert_eq(l.e[1].loff, 5000);
	cr_assert_eq(l.e[1].len, 100);
	cr_assert_eq(l.e[2].loff, 5100);
	cr_assert_eq(l.e[2].len, 15000);

	uint64_t eo = 1, el = 1;
	ssize_t n = flexspace_read_extent(fs, rb, 5050, 1000, &eo, &el);
	cr_assert_eq(n, 1000, "%zd", n);
	cr_assert_eq(eo, 5000);
	cr_assert_eq(el, 100);
	cr_assert_eq(memcmp(rb, ins, 100), 0, "read_extent reads from the extent's start");
	cr_assert_eq(memcmp(rb + 100, a + 5000, 900), 0, "and continues into the next extent");
	n = flexspace_read_extent(fs, rb, 20099, 30000, &eo, &el);
	cr_assert_eq(n, 15000, "up to the end of the space");
	cr_assert_eq(eo, 5100);
	cr_assert_eq(el, 15000);
	cr_assert_eq(memcmp(rb, a + 5000, 15000), 0);
	n = flexspace_read_extent(fs, rb, 10, 0, &eo, &el);
	cr_assert_eq(n, 0);
	cr_assert_eq(eo, 0);
	cr_assert_eq(el, 5000);
	cr_assert_eq(flexspace_read_extent(fs, rb, 20100, 10, &eo, &el), -ERANGE);
	cr_assert_eq(flexspace_read_extent(fs, rb, UINT64_MAX, 10, NULL, NULL), -ERANGE);

	/* extents: a sub-range, stopping early, a hole, past the end. */
	l.n = 0;
	cr_assert_eq(flexspace_scan(fs, 5099, 2, collect_extent, &l), 0);
	cr_assert_eq(l.n, 2);
	int cnt = 0;
	cr_assert_eq(flexspace_scan(fs, 0, UINT64_MAX, stop_at_second, &cnt), 42);
	cr_assert_eq(cnt, 2);
	cr_assert_eq(flexspace_truncate(fs, 30000), 0);
	l.n = 0;
	cr_assert_eq(flexspace_scan(fs, 20100, 100, collect_extent, &l), 0);
	cr_assert_eq(l.n, 1);
	cr_assert_eq(l.e[0].poff, FLEXTREE_HOLE);
	cr_assert_eq(flexspace_scan(fs, 30001, 1, collect_extent, &l), -ERANGE);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* Where logical byte off lay in a located read's report. */
static uint64_t located_at(const struct flextree_mapping *loc, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		if (off >= loc[i].loff && off < loc[i].loff + loc[i].len)
			return loc[i].poff + (off - loc[i].loff);
	cr_assert_fail("offset %" PRIu64 " not located", off);
	return 0;
}

/* A located read reads the pieces a read reported, without the tree, for
 * as long as their segments are not freed; then it says -ESTALE. */
Test(flexspace, located_reads_hold_until_their_segment_is_freed)
{
	char dir[PATH_MAX];
	struct flexspace_options o = {.segment_size = 64u << 10, .log_limit = 64u << 10};
	struct flexspace *fs = open_fresh(dir, sizeof(dir), &o);
	static uint8_t a[20000], ins[100], rb[30000], nb[20100];
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i % 251);
	memset(ins, 0xee, sizeof(ins));
	memset(nb, 0x5a, sizeof(nb));
	cr_assert_eq(flexspace_write(fs, a, 0, 20000), 20000);
	cr_assert_eq(flexspace_insert(fs, ins, 5000, 100), 100);
	cr_assert_eq(flexspace_truncate(fs, 20200), 0); /* a hole at the end */
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	size_t nloc = 99;
	uint64_t stamp = 0;
	cr_assert_eq(flexspace_read_locate(fs, rb, 0, 20200, loc, &nloc, &stamp), 20200);
	cr_assert_geq(nloc, 4);
	cr_assert_eq(loc[nloc - 1].poff, FLEXTREE_HOLE);
	cr_assert_eq(loc[0].loff, 0);
	cr_assert_eq(loc[nloc - 1].loff + loc[nloc - 1].len, 20200);
	static uint8_t want[20200];
	memcpy(want, a, 5000);
	memcpy(want + 5000, ins, 100);
	memcpy(want + 5100, a + 5000, 15000);
	cr_assert_eq(memcmp(rb, want, 20200), 0);
	memset(rb, 1, sizeof(rb));
	cr_assert_eq(flexspace_read_located(fs, rb, loc, nloc, stamp), 0);
	cr_assert_eq(memcmp(rb, want, 20200), 0);
	/* A part of a piece, and two pieces cut at both ends. */
	struct flextree_mapping part[2] = {{.poff = located_at(loc, nloc, 5010), .len = 50}};
	cr_assert_eq(flexspace_read_located(fs, rb, part, 1, stamp), 0);
	cr_assert_eq(memcmp(rb, ins + 10, 50), 0);
	part[0] = (struct flextree_mapping){.poff = located_at(loc, nloc, 4990), .len = 10};
	part[1] = (struct flextree_mapping){.poff = located_at(loc, nloc, 5000), .len = 20};
	cr_assert_eq(flexspace_read_located(fs, rb, part, 2, stamp), 0);
	cr_assert_eq(memcmp(rb, want + 4990, 30), 0);
	/* Past the end: nothing read, nothing located. */
	struct flextree_mapping none[1];
	size_t nnone = 9;
	uint64_t st2;
	cr_assert_eq(flexspace_read_locate(fs, rb, 20200, 10, none, &nnone, &st2), 0);
	cr_assert_eq(nnone, 0);
	/* Bad arguments. */
	cr_assert_eq(flexspace_read_locate(NULL, rb, 0, 10, none, &nnone, &st2), -EINVAL);
	cr_assert_eq(flexspace_read_locate(fs, rb, 0, 10, NULL, &nnone, &st2), -EINVAL);
	cr_assert_eq(flexspace_read_locate(fs, rb, 0, 10, none, NULL, &st2), -EINVAL);
	cr_assert_eq(flexspace_read_locate(fs, NULL, 0, 10, none, &nnone, &st2), -EINVAL);
	cr_assert_eq(flexspace_read_located(NULL, rb, loc, 1, stamp), -EINVAL);
	cr_assert_eq(flexspace_read_located(fs, rb, NULL, 1, stamp), -EINVAL);
	cr_assert_eq(flexspace_read_located(fs, NULL, loc, 1, stamp), -EINVAL);
	cr_assert_eq(flexspace_read_located(fs, rb, loc, FLEXSPACE_LOCATE_MAX + 1, stamp),
		     -EINVAL);
	cr_assert_eq(flexspace_read_located(fs, rb, loc, 0, stamp), 0);
	/* Places that are no segment's are refused, not read. */
	part[0] = (struct flextree_mapping){.poff = (64u << 10) - 10, .len = 20};
	cr_assert_eq(flexspace_read_located(fs, rb, part, 1, stamp), -ESTALE);
	part[0] = (struct flextree_mapping){.poff = (uint64_t)1 << 40, .len = 20};
	cr_assert_eq(flexspace_read_located(fs, rb, part, 1, stamp), -ESTALE);

	/* Overwritten: the old bytes stay where they were until their
	 * segment is freed, then the located read refuses. */
	cr_assert_eq(flexspace_write(fs, nb, 0, sizeof(nb)), (ssize_t)sizeof(nb));
	int stale = 0, rounds = 0;
	for (; rounds < 200 && !stale; rounds++) {
		int rc = flexspace_read_located(fs, rb, loc, nloc, stamp);
		if (rc == -ESTALE) {
			stale = 1;
			break;
		}
		cr_assert_eq(rc, 0);
		size_t d = 0;
		while (d < 20200 && rb[d] == want[d])
			d++;
		cr_assert_eq(d, 20200, "round %d: located byte %zu changed: %d for %d", rounds, d, rb[d], want[d]);
		cr_assert_eq(flexspace_write(fs, nb, 0, sizeof(nb)), (ssize_t)sizeof(nb));
		cr_assert_eq(flexspace_sync(fs), 0);
		cr_assert_eq(flexspace_maintain(fs), 0);
	}
	cr_assert(stale, "the first segment was never freed in %d rounds", rounds);
	cr_assert_eq(flexspace_read(fs, rb, 0, 100), 100);
	cr_assert_eq(memcmp(rb, nb, 100), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, tags_survive_defrag_close_and_reopen)
{
	char dir[PATH_MAX];
	struct flexspace_options o = tiny_options();
	struct flexspace *fs = open_fresh(dir, sizeof(dir), &o);
	static uint8_t a[200000];
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i * 13);
	cr_assert_eq(flexspace_write(fs, a, 0, sizeof(a)), (ssize_t)sizeof(a));
	cr_assert_eq(flexspace_tag_set(fs, 1000, 7), 0);
	cr_assert_eq(flexspace_tag_set(fs, 50000, 65535), 0);
	cr_assert_eq(flexspace_tag_set(fs, 150001, 3), 0);
	uint16_t tag = 1;
	uint64_t eo = 1;
	cr_assert_eq(flexspace_tag_get(fs, 1000, &tag, &eo), 0);
	cr_assert_eq(tag, 7);
	cr_assert_eq(eo, 1000);
	cr_assert_eq(flexspace_tag_get(fs, 1001, &tag, &eo), 0);
	cr_assert_eq(tag, 7, "the extent containing 1001 starts at the tag");
	cr_assert_eq(eo, 1000);
	cr_assert_eq(flexspace_tag_get(fs, 999, &tag, &eo), 0);
	cr_assert_eq(tag, 0);
	cr_assert_eq(flexspace_tag_get(fs, 200000, &tag, &eo), -ERANGE);
	/* Defrag keeps tags at the same offsets. */
	cr_assert_eq(flexspace_defrag(fs, 0, sizeof(a)), 0);
	cr_assert_eq(flexspace_tag_get(fs, 50000, &tag, &eo), 0);
	cr_assert_eq(tag, 65535);
	cr_assert_eq(eo, 50000);
	cr_assert_eq(flexspace_sync(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	const uint64_t at[] = {1000, 50000, 150001};
	const uint16_t want[] = {7, 65535, 3};
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(flexspace_tag_get(fs, at[i], &tag, &eo), 0);
		cr_assert_eq(tag, want[i], "tag at %" PRIu64 " after reopen: %u", at[i], tag);
		cr_assert_eq(eo, at[i]);
	}
	/* Clearing with 0; collapsing the start drops the tag. */
	cr_assert_eq(flexspace_tag_set(fs, 1000, 0), 0);
	cr_assert_eq(flexspace_collapse(fs, 49990, 20), 0);
	cr_assert_eq(flexspace_tag_get(fs, 1000, &tag, &eo), 0);
	cr_assert_eq(tag, 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_assert_eq(flexspace_tag_get(fs, 1000, &tag, &eo), 0);
	cr_assert_eq(tag, 0);
	cr_assert_eq(flexspace_tag_get(fs, 149981, &tag, &eo), 0);
	cr_assert_eq(tag, 3);
	cr_assert_eq(eo, 149981);
	uint8_t rb[100];
	cr_assert_eq(flexspace_read(fs, rb, 49980, 100), 100);
	cr_assert_eq(memcmp(rb, a + 49980, 10), 0);
	cr_assert_eq(memcmp(rb + 10, a + 50010, 90), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, second_open_is_ebusy_in_process_and_in_a_child)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	struct flexspace *fs2 = (struct flexspace *)dir;
	cr_assert_eq(flexspace_open(dir, NULL, &fs2), FLEX_EBUSY);
	cr_assert_null(fs2);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexspace *c = NULL;
		int rc = flexspace_open(dir, NULL, &c);
		_exit(rc == FLEX_EBUSY && !c ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child could open a held space");
	cr_assert_eq(flexspace_close(fs), 0);
	/* Released: a second open now works, in a child too. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexspace *c = NULL;
		int rc = flexspace_open(dir, NULL, &c);
		_exit(rc == 0 && flexspace_close(c) == 0 ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "open after close failed in a child");
	cr_assert_eq(flexspace_open(dir, NULL, &fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, bad_paths_and_options_fail_cleanly)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "paths"), 0);
	struct flexspace *fs = (struct flexspace *)dir;
	/* A regular file is not a space directory. */
	snprintf(path, sizeof(path), "%s/file", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("x", f);
	fclose(f);
	int rc = flexspace_open(path, NULL, &fs);
	cr_assert_lt(rc, 0);
	cr_assert_eq(rc, -ENOTDIR, "%s", flex_strerror(rc));
	cr_assert_null(fs);
	/* no_create = 1 on a missing directory. */
	snprintf(path, sizeof(path), "%s/missing", dir);
	struct flexspace_options o = {.no_create = 1};
	cr_assert_eq(flexspace_open(path, &o, &fs), -ENOENT);
	cr_assert_eq(access(path, F_OK), -1, "no_create = 1 created the directory");
	/* no_create = 1 on an empty directory is no space either. */
	snprintf(path, sizeof(path), "%s/empty", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	rc = flexspace_open(path, &o, &fs);
	cr_assert_eq(rc, -ENOENT, "empty dir with no_create = 1: %s", flex_strerror(rc));
	cr_assert_eq(flexspace_open("", NULL, &fs), -EINVAL);
	/* Options out of range. */
	snprintf(path, sizeof(path), "%s/space", dir);
	const struct flexspace_options bad[] = {
		{.segment_size = 32u << 10},
		{.segment_size = (64u << 10) + 1},
		{.segment_size = 3u << 20},
		{.segment_size = 512u << 20},
		{.log_limit = 1000},
		{.log_limit = (1ull << 30) + 1},
		{.gc_ratio = 1.0},
		{.gc_ratio = 100.5},
		{.gc_ratio = -2},
		{.max_data_size = FLEXSPACE_MAX_SIZE + 1},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rc = flexspace_open(path, &bad[i], &fs);
		cr_assert_eq(rc, FLEX_EOPTION, "bad option set %zu: %s", i, flex_strerror(rc));
		cr_assert_null(fs);
	}
	/* Geometry is fixed at creation; later opens ignore the field. */
	struct flexspace_options good = tiny_options();
	cr_assert_eq(flexspace_open(path, &good, &fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	struct flexspace_options other = {.segment_size = 1u << 20, .no_create = 1};
	cr_assert_eq(flexspace_open(path, &other, &fs), 0);
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	cr_assert_eq(st.segment_size, 64u << 10);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

Test(flexspace, large_single_write_and_insert_cross_many_segments)
{
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), NULL);
	const size_t big = 10u << 20;
	uint8_t *a = malloc(big), *b = malloc(big), *rb = malloc(2 * big + 4096);
	op_data(1, a, big);
	op_data(2, b, big);
	cr_assert_eq(flexspace_write(fs, a, 0, big), (ssize_t)big);
	cr_assert_eq(flexspace_insert(fs, b, 12345, big), (ssize_t)big);
	struct model m = {0};
	model_write(&m, a, 0, big);
	model_insert(&m, b, 12345, big);
	struct why w;
	cr_assert_eq(space_matches(fs, &m, &w), 0, "%s", w.msg);
	cr_assert_eq(flexspace_sync(fs), 0);
	/* One 10 MiB overwrite straddling the insert. */
	cr_assert_eq(flexspace_write(fs, b, 5u << 20, big), (ssize_t)big);
	model_write(&m, b, 5u << 20, big);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, NULL, &fs), 0);
	cr_assert_eq(space_matches(fs, &m, &w), 0, "after reopen: %s", w.msg);
	cr_assert_eq(flexspace_read(fs, rb, 0, 2 * big + 4096), (ssize_t)(2 * big));
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	cr_assert_geq(st.extents, (2 * big) / (128u << 10), "extents are at most segment/32");
	cr_assert_eq(flexspace_collapse(fs, 100, 2 * big - 200), 0);
	cr_assert_eq(flexspace_size(fs), 200);
	model_collapse(&m, 100, 2 * big - 200);
	cr_assert_eq(space_matches(fs, &m, &w), 0, "%s", w.msg);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	model_free(&m);
	free(a);
	free(b);
	free(rb);
	tmp_remove(dir);
}

/* Reads of pieces that several "commits" interleaved: the pieces each
 * commit appended lie back to back in DATA, so a read of the whole range
 * costs about one transfer per commit, not one per extent.  An I/O table
 * counts the transfers. */
static atomic_long reads_pread, reads_batched;

static ssize_t counting_pread(const struct flex_io *io, int fd, void *buf, size_t len,
			      uint64_t off)
{
	atomic_fetch_add(&reads_pread, 1);
	return flex_io_posix()->pread(io, fd, buf, len, off);
}

static int counting_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v,
			       int n)
{
	atomic_fetch_add(&reads_batched, n);
	return flex_io_posix()->read_batch(io, fd, v, n);
}

Test(flexspace, reads_of_interleaved_commits_are_coalesced)
{
	struct flex_io io = *flex_io_posix();
	io.pread = counting_pread;
	io.read_batch = counting_read_batch;
	struct flexspace_options o = {.io = &io};
	char dir[PATH_MAX];
	struct flexspace *fs = open_fresh(dir, sizeof(dir), &o);
	struct model m = {0};
	enum { COMMITS = 6, PIECE = 97 };
	uint8_t piece[PIECE];
	/* Commit c inserts one piece after every piece of each earlier
	 * commit, left to right: its pieces are consecutive in DATA but every
	 * other one logically. */
	uint64_t n = 0;
	for (int c = 0; c < COMMITS; c++) {
		uint64_t at = 0, cnt = n ? n : 8;
		for (uint64_t i = 0; i < cnt; i++) {
			op_data((uint64_t)c * 1000 + i, piece, PIECE);
			if (n)
				at += PIECE; /* after the next existing piece */
			cr_assert_eq(flexspace_insert(fs, piece, at, PIECE), PIECE);
			model_insert(&m, piece, at, PIECE);
			at += PIECE;
		}
		n += cnt;
		cr_assert_eq(flexspace_sync(fs), 0); /* into DATA, not the buffer */
	}
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	struct why w;
	cr_assert_eq(space_matches(fs, &m, &w), 0, "%s", w.msg);
	uint8_t *buf = malloc(n * PIECE);
	/* Ranges of every length that start anywhere: all bytes right. */
	for (uint64_t a = 0; a < n * PIECE; a += 613) {
		uint64_t len = n * PIECE - a < 9000 ? n * PIECE - a : 9000;
		cr_assert_eq(flexspace_read(fs, buf, a, len), (ssize_t)len);
		cr_assert_eq(memcmp(buf, m.b + a, len), 0, "range at %" PRIu64, a);
	}
	/* One whole read of the first 128 extents: one transfer per commit
	 * (the table is a hash: allow a few more), not one per extent. */
	uint64_t len = 128 * PIECE;
	atomic_store(&reads_pread, 0);
	atomic_store(&reads_batched, 0);
	cr_assert_eq(flexspace_read(fs, buf, 0, len), (ssize_t)len);
	cr_assert_eq(memcmp(buf, m.b, len), 0);
	long transfers = atomic_load(&reads_pread) + atomic_load(&reads_batched);
	fprintf(stderr, "  interleaved commits: %" PRIu64 " extents, 128 read in %ld transfers\n",
		st.extents, transfers);
	cr_assert_geq(st.extents, (uint64_t)n - 2, "the layout is fragmented");
	cr_assert_leq(transfers, 2 * COMMITS, "%ld transfers for 128 extents of %d commits",
		      transfers, COMMITS);
	free(buf);
	model_free(&m);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* Reads of many pieces of DATA that is not in memory go through read
 * batches instead of one page fault after another through the mapping,
 * and return the right bytes; so do reads once DATA is back in memory.
 * On a disk-backed directory: tmpfs pages cannot be dropped. */
static long major_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_majflt;
}

/* Pages of fd's first len bytes in the page cache. */
static long resident_pages(int fd, size_t len)
{
	void *mm = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (mm == MAP_FAILED)
		return -1;
	size_t np = (len + 4095) / 4096;
	unsigned char *v = malloc(np);
	long r = 0;
	if (v && mincore(mm, len, v) == 0)
		for (size_t i = 0; i < np; i++)
			r += v[i] & 1;
	free(v);
	munmap(mm, len);
	return r;
}

Test(flexspace, cold_reads_of_many_pieces_are_batched)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "/var/tmp/flexspace_cold_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct flexspace_options o = {0};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	struct model m = {0};
	enum { PIECE = 97, N = 4000, LEN = 60 * PIECE };
	uint8_t piece[PIECE];
	/* Each piece at a random place between earlier ones: logical
	 * neighbours lie far apart in DATA, each its own extent. */
	uint64_t r = 12345;
	for (uint64_t i = 0; i < N; i++) {
		op_data(i, piece, PIECE);
		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		uint64_t at = (r >> 33) % (i + 1) * PIECE;
		cr_assert_eq(flexspace_insert(fs, piece, at, PIECE), PIECE);
		model_insert(&m, piece, at, PIECE);
	}
	/* Reopened: DATA is mapped up to its end. */
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	char path[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/DATA", dir);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	size_t dlen = (size_t)N * PIECE;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	int droppable = resident_pages(fd, dlen) == 0;
	uint8_t *buf = malloc(LEN);
	long faults = 0;
	for (int k = 0; k < 40; k++) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		uint64_t a = (uint64_t)(k * 37 % (N - 64)) * PIECE + (uint64_t)k % PIECE;
		long f0 = major_faults();
		cr_assert_eq(flexspace_read(fs, buf, a, LEN), (ssize_t)LEN);
		faults += major_faults() - f0;
		cr_assert_eq(memcmp(buf, m.b + a, LEN), 0, "cold read %d at %" PRIu64, k, a);
	}
	for (int k = 0; k < 40; k++) {
		uint64_t a = (uint64_t)(k * 53 % (N - 64)) * PIECE;
		cr_assert_eq(flexspace_read(fs, buf, a, LEN), (ssize_t)LEN);
		cr_assert_eq(memcmp(buf, m.b + a, LEN), 0, "warm read %d", k);
	}
	close(fd);
	free(buf);
	model_free(&m);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
	if (!droppable)
		cr_skip_test("the page cache of %s cannot be dropped: no cold reads", dir);
	fprintf(stderr, "  40 cold reads of 60 pieces: %ld page faults\n", faults);
	/* Through the mapping: a fault on each page the pieces lie in (95
	 * here, the rest mapped by then). */
	cr_assert_lt(faults, 10, "%ld page faults: cold pieces read through the mapping", faults);
}

/* Whether files in dir can be opened O_DIRECT (tmpfs refuses). */
static int direct_ok(const char *dir)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/probe", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
	if (fd >= 0)
		close(fd);
	unlink(path);
	return fd >= 0;
}

/* n pieces of 1..maxlen random bytes, each inserted at a random place of
 * the space and the model, or (one in every_write, when it fits) written
 * over bytes there: logical neighbours lie far apart in DATA. */
static void scatter_build(struct flexspace *fs, struct model *m, uint64_t *r, int n,
			  uint64_t maxlen, int every_write)
{
	uint8_t *piece = malloc(maxlen);
	cr_assert_not_null(piece);
	for (int i = 0; i < n; i++) {
		*r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
		uint64_t len = 1 + (*r >> 40) % maxlen;
		op_data(*r, piece, len);
		uint64_t at = m->size ? (*r >> 20) % m->size : 0;
		if (every_write && i % every_write == every_write - 1 && at + len <= m->size) {
			cr_assert_eq(flexspace_write(fs, piece, at, len), (ssize_t)len);
			model_write(m, piece, at, len);
		} else {
			cr_assert_eq(flexspace_insert(fs, piece, at, len), (ssize_t)len);
			model_insert(m, piece, at, len);
		}
	}
	free(piece);
}

/* flexspace_read_many against the model: random sets of ranges over a
 * space built by random inserts and writes (pieces all over DATA, a hole,
 * bytes still in the open segment's buffer), with the page cache dropped
 * before a quarter of the reads and filled before another quarter; on a
 * file system that takes O_DIRECT the cold ones must leave the page
 * cache as it was. */
Test(flexspace, read_many_matches_the_model_cold_and_warm)
{
	uint64_t seed = test_seed("read_many_matches_the_model_cold_and_warm");
	uint64_t r = seed;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "/var/tmp/flexspace_many_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	int direct = direct_ok(dir);
	struct flexspace_options o = {.segment_size = 256u << 10};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	struct model m = {0};
	uint8_t piece[4096];
	scatter_build(fs, &m, &r, 3000, 700, 5);
	/* A hole: a write past the end. */
	op_data(seed, piece, 100);
	cr_assert_eq(flexspace_write(fs, piece, m.size + 5000, 100), 100);
	model_write(&m, piece, m.size + 5000, 100);
	cr_assert_eq(flexspace_sync(fs), 0);
	char path[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/DATA", dir);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	fdatasync(fd);
	enum { SETS = 60, MAXN = 200 };
	struct flex_iovec v[MAXN];
	uint8_t *buf = malloc((size_t)MAXN * 2048);
	cr_assert_not_null(buf);
	long cold = 0, cached_after = 0;
	for (int k = 0; k < SETS; k++) {
		if (k == SETS / 2) {
			/* Unsynced bytes, part of them still in the segment buffer. */
			for (int i = 0; i < 50; i++) {
				r = r * 6364136223846793005ULL + 1442695040888963407ULL;
				uint64_t at = (r >> 20) % m.size;
				op_data(r, piece, 300);
				cr_assert_eq(flexspace_insert(fs, piece, at, 300), 300);
				model_insert(&m, piece, at, 300);
			}
		}
		int n = 1 + (int)((r >> 30) % MAXN);
		for (int i = 0; i < n; i++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			uint64_t len = (r >> 45) % 2049;
			uint64_t off = (r >> 10) % (m.size - len + 1);
			v[i] = (struct flex_iovec){.buf = buf + (size_t)i * 2048, .len = len, .off = off};
		}
		/* Cold (even sets of the first half): nothing of DATA in the
		 * page cache.  Warm (odd sets of the second half, since the
		 * copies from the mapping keep pages in): all of it, read in. */
		int was_cold = 0;
		if (k % 2 == 0 && k < SETS / 2) {
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			was_cold = resident_pages(fd, (size_t)m.size) == 0;
		} else if (k % 2 == 1 && k >= SETS / 2) {
			uint8_t page[4096];
			for (off_t at = 0; pread(fd, page, sizeof(page), at) > 0; at += 4096)
				;
		}
		cr_assert_eq(flexspace_read_many(fs, v, n), 0, "seed %" PRIu64 " set %d", seed, k);
		if (was_cold) {
			cold++;
			cached_after += resident_pages(fd, (size_t)m.size);
		}
		for (int i = 0; i < n; i++)
			cr_assert_eq(memcmp(v[i].buf, m.b + v[i].off, v[i].len), 0,
				     "seed %" PRIu64 " set %d range %d (%" PRIu64 " at %" PRIu64 ")",
				     seed, k, i, (uint64_t)v[i].len, v[i].off);
	}
	/* The edges. */
	v[0] = (struct flex_iovec){.buf = buf, .len = 10, .off = m.size - 5};
	cr_assert_eq(flexspace_read_many(fs, v, 1), -EINVAL);
	v[0] = (struct flex_iovec){.buf = NULL, .len = 10, .off = 0};
	cr_assert_eq(flexspace_read_many(fs, v, 1), -EINVAL);
	cr_assert_eq(flexspace_read_many(fs, v, -1), -EINVAL);
	cr_assert_eq(flexspace_read_many(NULL, v, 1), -EINVAL);
	cr_assert_eq(flexspace_read_many(fs, NULL, 0), 0);
	v[0] = (struct flex_iovec){.buf = NULL, .len = 0, .off = m.size};
	cr_assert_eq(flexspace_read_many(fs, v, 1), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	close(fd);
	free(buf);
	model_free(&m);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
	fprintf(stderr, "  read_many: %ld cold sets, %ld pages cached after them, O_DIRECT %s\n",
		cold, cached_after, direct ? "taken" : "refused");
	/* Read past the page cache: nothing of DATA comes into it. */
	if (direct && cold)
		cr_assert_leq(cached_after, cold, "%ld pages cached by %ld cold reads",
			     cached_after, cold);
}

/* flexspace_read_many_begin and _end around changes: the buffers get the
 * bytes of the begin while no segment they lie in is freed, and -ESTALE
 * once one is (here: the whole space rewritten, synced and collected).
 * Each read has more spans than the ring takes at once, and a second one
 * begun meanwhile is read at its end. */
Test(flexspace, read_many_begun_before_changes_ends_with_the_bytes_of_its_begin)
{
	uint64_t seed = test_seed("read_many_begun_before_changes_ends_with_the_bytes_of_its_begin");
	uint64_t r = seed;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "/var/tmp/flexspace_begun_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	struct flexspace_options o = {.segment_size = 128u << 10};
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	struct model m = {0};
	uint8_t piece[1024];
	scatter_build(fs, &m, &r, 6000, 2000, 0);
	cr_assert_eq(flexspace_sync(fs), 0);
	char path[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/DATA", dir);
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	/* Ranges far apart: more spans than the ring takes at once. */
	enum { N = 300, LEN = 200 };
	struct flex_iovec v[N], w[N];
	uint8_t *buf = malloc(2 * N * LEN);
	cr_assert_not_null(buf);
	int stale = 0, whole = 0, dropped = 0;
	for (int round = 0; round < 8; round++) {
		struct model at_begin = {0};
		model_copy(&at_begin, &m);
		for (int i = 0; i < N; i++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			uint64_t off = (r >> 10) % (m.size - LEN);
			v[i] = (struct flex_iovec){.buf = buf + (size_t)i * LEN, .len = LEN, .off = off};
			w[i] = (struct flex_iovec){.buf = buf + (size_t)(N + i) * LEN, .len = LEN,
						   .off = (off + 7919) % (m.size - LEN)};
		}
		/* Out of the page cache, so that the reads are left to the end
		 * (where the file system drops it: counted). */
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		dropped += round % 2 == 0 && resident_pages(fd, (size_t)m.size) == 0;
		struct flexspace_reads *a, *b;
		cr_assert_eq(flexspace_read_many_begin(fs, v, N, &a), 0);
		/* A second one at once: read at its end, not through the ring. */
		cr_assert_eq(flexspace_read_many_begin(fs, w, N, &b), 0);
		/* Changes: a few (odd rounds), or everything rewritten, synced
		 * and collected, which frees the segments the reads lie in. */
		int heavy = round % 2 == 0;
		uint64_t changes = heavy ? m.size / sizeof(piece) + 1 : 20;
		for (uint64_t i = 0; i < changes; i++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			uint64_t at = heavy ? i * sizeof(piece) : (r >> 20) % m.size;
			uint64_t len = at + sizeof(piece) <= m.size ? sizeof(piece) : m.size - at;
			op_data(r, piece, len);
			cr_assert_eq(flexspace_write(fs, piece, at, len), (ssize_t)len);
			model_write(&m, piece, at, len);
		}
		if (heavy) {
			cr_assert_eq(flexspace_sync(fs), 0);
			cr_assert_eq(flexspace_collect(fs), 0);
			cr_assert_eq(flexspace_sync(fs), 0);
		}
		int ra = flexspace_read_many_end(a), rb = flexspace_read_many_end(b);
		const int rcs[2] = {ra, rb};
		const struct flex_iovec *sets[2] = {v, w};
		for (int j = 0; j < 2; j++) {
			cr_assert(rcs[j] == 0 || (heavy && rcs[j] == -ESTALE),
				  "seed %" PRIu64 " round %d: %d", seed, round, rcs[j]);
			if (rcs[j] == -ESTALE) {
				stale++;
				continue;
			}
			whole++;
			for (int i = 0; i < N; i++)
				cr_assert_eq(memcmp(sets[j][i].buf, at_begin.b + sets[j][i].off, LEN),
					     0, "seed %" PRIu64 " round %d set %d range %d", seed,
					     round, j, i);
		}
		model_free(&at_begin);
	}
	cr_assert_eq(flexspace_read_many_end(NULL), -EINVAL);
	struct flexspace_reads *none = (struct flexspace_reads *)1;
	cr_assert_eq(flexspace_read_many_begin(fs, NULL, -1, &none), -EINVAL);
	cr_assert_null(none);
	cr_assert_eq(flexspace_check(fs), 0);
	close(fd);
	free(buf);
	model_free(&m);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
	fprintf(stderr, "  begun reads: %d whole, %d stale (%d rewrites after a dropped cache)\n",
		whole, stale, dropped);
	cr_assert_geq(whole, 8);
	/* Reads left to the end of a round that freed their segments. */
	if (dropped)
		cr_assert_gt(stale, 0, "no read saw its segments freed");
}

/* ---- faults --------------------------------------------------------------- */

#define FAULT_OPS 400
#define FAULT_POINTS 300

struct fault_case {
	const char *name;
	int cls;
	int err; /* -EIO, -ENOSPC or CIO_SHORT */
	int perm;
	uint64_t max_data; /* max_data_size: reservation and forced GC run */
};

struct fault_tally {
	long runs, hit, op_errors, recovered_newer, partial;
};

static const struct gen_cfg fault_gen = {.target_size = 512u << 10, .big_len = 100u << 10,
					 .insert_pct = 20, .collapse_pct = 10,
					 .truncate_pct = 3, .defrag_pct = 4, .sync_pct = 9,
					 .reopen_pct = 2, .read_pct = 8, .apply_pct = 6};

/* Runs the workload with the at-th call of the class failing (0: none).
 * Returns 0 when the contract held; *calls gets the calls of the class. */
static int fault_run(const struct fault_case *fc, long at, uint64_t seed, const char *dir,
		     long *calls, struct fault_tally *t, struct why *w)
{
	int trace = getenv("FLEX_FAULT_AT") != NULL;
	tmp_clear(dir);
	struct flexspace_options o = tiny_options();
	o.max_data_size = fc->max_data;
	struct flexspace *fs = NULL;
	int rc = flexspace_open(dir, &o, &fs);
	if (rc || (rc = flexspace_close(fs)) != 0)
		return failf(w, "creating the space: %s", flex_strerror(rc));

	struct cio c;
	cio_init(&c);
	c.fault_class = fc->cls;
	c.fault_at = at;
	c.fault_err = fc->err;
	c.fault_perm = fc->perm;
	c.verbose = trace;
	struct flexspace_options fo = o;
	fo.io = &c.io;

	uint64_t *sizes = calloc(FAULT_OPS + 1, sizeof(uint64_t));
	uint64_t *hashes = calloc(FAULT_OPS + 1, sizeof(uint64_t));
	uint8_t *buf = malloc(256u << 10), *rb = malloc(256u << 10);
	struct model m = {0}, prev = {0};
	uint64_t r = seed;
	long acked = 0, last = 0, failed_at = -1, after_fail = 0;
	int sticky = 0, bad = 0, model_ok = 1;

	sizes[0] = 0;
	hashes[0] = model_hash(&m);

	rc = flexspace_open(dir, &fo, &fs);
	if (rc) {
		fs = NULL;
		if (!c.tripped)
			bad = failf(w, "open failed with no fault injected: %s", flex_strerror(rc));
	}
	for (long i = 0; fs && i < FAULT_OPS && !bad; i++) {
		struct op op;
		gen_op(&r, m.size, &fault_gen, &op);
		model_copy(&prev, &m);
		model_apply(&m, &op, buf);
		sizes[i + 1] = m.size;
		hashes[i + 1] = model_hash(&m);
		last = i + 1;
		if (trace)
			fprintf(stderr, "  op %ld %s(%" PRIu64 ", %" PRIu64 ") calls %ld faults %ld\n", i,
				op_names[op.type], op.off, op.len, c.ncalls, c.nfaults);
		if (op.type == OP_READ) {
			uint64_t want = op.len < (256u << 10) ? op.len : 256u << 10;
			ssize_t n = flexspace_read(fs, rb, op.off, want);
			uint64_t exp = op.off >= m.size ? 0
						       : (want < m.size - op.off ? want
										: m.size - op.off);
			if (n < 0 && !c.tripped)
				bad = failf(w, "op %ld: read failed with no fault: %s", i,
					    flex_strerror((int)n));
			else if (n >= 0 && model_ok && ((uint64_t)n != exp || (exp && memcmp(rb, m.b + op.off, exp))))
				bad = failf(w, "op %ld: read(%" PRIu64 ", %" PRIu64 ") wrong (%zd)%s",
					    i, op.off, want, n,
					    failed_at >= 0 ? " on a failed handle" : "");
			continue;
		}
		if (op.type == OP_REOPEN) {
			rc = flexspace_close(fs);
			fs = NULL;
			if (rc == 0 && failed_at < 0)
				acked = i + 1;
			else if (rc && !c.tripped)
				bad = failf(w, "op %ld: close failed with no fault: %s", i,
					    flex_strerror(rc));
			/* After a failure, which state a reopen sees is left to
			 * the check at the end. */
			if (rc || failed_at >= 0)
				break;
			rc = flexspace_open(dir, &fo, &fs);
			if (rc) {
				fs = NULL;
				if (!c.tripped)
					bad = failf(w, "op %ld: reopen failed with no fault: %s", i,
						    flex_strerror(rc));
			}
			continue;
		}
		rc = space_apply(fs, &op, buf);
		if (failed_at >= 0 && sticky) {
			/* The handle has failed: every change is refused. */
			sizes[i + 1] = sizes[i];
			hashes[i + 1] = hashes[i];
			model_copy(&m, &prev);
			if (rc != FLEX_EFAILED)
				bad = failf(w,
					    "op %ld: %s on a failed handle returned %d (%s), not "
					    "FLEX_EFAILED",
					    i, op_names[op.type], rc, flex_strerror(rc));
			if (++after_fail >= 4)
				break;
			continue;
		}
		if (rc == 0) {
			if (op.type == OP_SYNC)
				acked = i + 1;
			continue;
		}
		if (rc == -ENOSPC && fc->max_data && fc->err != -ENOSPC &&
		    flexspace_size(fs) == sizes[i]) {
			/* Refused for want of room (not injected): unchanged. */
			model_copy(&m, &prev);
			sizes[i + 1] = sizes[i];
			hashes[i + 1] = hashes[i];
			continue;
		}
		t->op_errors++;
		if (!c.tripped) {
			bad = failf(w, "op %ld: %s(%" PRIu64 ", %" PRIu64 ") failed with no fault: %s",
				    i, op_names[op.type], op.off, op.len, flex_strerror(rc));
			break;
		}
		/* Is the handle failed now?  It must be after a write or sync
		 * error; after a read error either is allowed. */
		failed_at = i;
		int src = flexspace_sync(fs);
		sticky = src != 0;
		if (src != FLEX_EFAILED && (c.first_fault_op & (CIO_WRITES | CIO_SYNCS)) &&
		    !fc->perm) {
			bad = failf(w,
				    "op %ld: %s failed with %s after an injected %s fault, but the "
				    "next sync returned %d (%s), not FLEX_EFAILED",
				    i, op_names[op.type], flex_strerror(rc),
				    (c.first_fault_op & CIO_SYNCS) ? "sync" : "write", src,
				    flex_strerror(src));
			break;
		}
		/* Did the failed change happen?  On a handle that goes on, all
		 * of it or none of it; a failed handle may show a partial
		 * change (it is never made durable). */
		uint8_t *all;
		uint64_t sz;
		int rrc = space_read_all(fs, &all, &sz);
		if (rrc == 0) {
			uint64_t h = content_hash(all, sz);
			free(all);
			if (sz == sizes[i] && h == hashes[i]) {
				model_copy(&m, &prev);
				sizes[i + 1] = sizes[i];
				hashes[i + 1] = hashes[i];
			} else if (!(sz == sizes[i + 1] && h == hashes[i + 1])) {
				if (!sticky) {
					bad = failf(w,
						    "op %ld: failed %s (%s) left a working handle "
						    "half-changed",
						    i, op_names[op.type], flex_strerror(rc));
					break;
				}
				t->partial++;
				model_ok = 0;
			}
		} else if (!sticky) {
			break; /* content unknown; let recovery tell */
		} else {
			model_ok = 0;
		}
		if (trace)
			fprintf(stderr, "  op %ld %s failed %d, next sync %d, content %s\n", i,
				op_names[op.type], rc, src, model_ok ? "known" : "partial");
		if (!sticky) {
			failed_at = -1; /* a transient read error: carry on */
			acked = i + 1;
		}
	}
	if (fs) {
		rc = flexspace_close(fs);
		if (rc == 0 && failed_at < 0 && !bad)
			acked = last;
		else if (rc && !c.tripped && !bad)
			bad = failf(w, "close failed with no fault: %s", flex_strerror(rc));
	}
	t->runs++;
	t->hit += c.tripped;
	*calls = c.ncalls;
	cio_destroy(&c);

	if (!bad) {
		long hi = failed_at >= 0 && sticky ? failed_at + 1 : last;
		long k = -1;
		struct why vw;
		if (verify_recovered(dir, &o, sizes, hashes, acked, hi, &k, &vw))
			bad = failf(w, "recovery (acknowledged state %ld, newest %ld): %s", acked, hi,
				    vw.msg);
		else if (k > acked)
			t->recovered_newer++;
	}
	model_free(&m);
	model_free(&prev);
	free(sizes);
	free(hashes);
	free(buf);
	free(rb);
	return bad;
}

struct fault_result {
	int bad;
	long calls;
	struct fault_tally t;
	struct why w;
};

/* fault_run in a forked child, so that a crash or a hang of one run is
 * reported as such and the other fault points still run; under ASan the
 * points that passed are run again in this process afterwards, so that
 * LeakSanitizer sees what their failure paths leave behind. */
static int fault_run_forked(const struct fault_case *fc, long at, uint64_t seed, const char *dir,
			    long *calls, struct fault_tally *t, struct why *w)
{
	int pfd[2];
	if (pipe(pfd) != 0)
		return failf(w, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		return failf(w, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(pfd[0]);
		alarm(60);
		struct fault_result res = {0};
		res.bad = fault_run(fc, at, seed, dir, &res.calls, &res.t, &res.w);
		ssize_t n = write(pfd[1], &res, sizeof(res));
		_exit(n == (ssize_t)sizeof(res) ? 0 : 1);
	}
	close(pfd[1]);
	struct fault_result res = {0};
	size_t got = 0;
	while (got < sizeof(res)) {
		ssize_t n = read(pfd[0], (char *)&res + got, sizeof(res) - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pfd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	t->runs++;
	if (got != sizeof(res)) {
		if (WIFSIGNALED(st))
			return failf(w, "the run crashed with signal %d (%s)", WTERMSIG(st),
				     strsignal(WTERMSIG(st)));
		return failf(w, "the run died (status 0x%x)", st);
	}
	*calls = res.calls;
	t->hit += res.t.hit;
	t->op_errors += res.t.op_errors;
	t->recovered_newer += res.t.recovered_newer;
	t->partial += res.t.partial;
	*w = res.w;
	return res.bad;
}

static void fault_test(const struct fault_case *fc)
{
	char name[128];
	snprintf(name, sizeof(name), "fault %s", fc->name);
	uint64_t seed = test_seed(name);
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "fault"), 0);
	struct fault_tally t = {0};
	struct why w = {""};
	long calls = 0;
	double t0 = now_sec();
	/* A clean run counts the calls of the class the workload makes. */
	int bad = fault_run(fc, 0, seed, dir, &calls, &t, &w);
	cr_assert_eq(bad, 0, "seed %" PRIu64 ", no fault: %s", seed, w.msg);
	cr_assert_gt(calls, 0, "the workload makes no call of the class");
	const char *only = getenv("FLEX_FAULT_AT");
	if (only) {
		long at = strtol(only, NULL, 0), dummy;
		bad = fault_run(fc, at, seed, dir, &dummy, &t, &w);
		tmp_remove(dir);
		cr_assert_eq(bad, 0, "seed %" PRIu64 " (%s) fault at call %ld: %s", seed, fc->name,
			     at, w.msg);
		return;
	}
	long points = scaled(FAULT_POINTS);
	long step = calls > points ? (calls + points - 1) / points : 1;
	long failures = 0, crashes = 0;
	char first[700] = "", first_crash[700] = "";
	for (long at = 1; at <= calls; at += step) {
		long dummy;
		if (fault_run_forked(fc, at, seed, dir, &dummy, &t, &w)) {
			int crash = !strncmp(w.msg, "the run crashed", 15);
			crashes += crash;
			if (crash && !first_crash[0])
				snprintf(first_crash, sizeof(first_crash), "; first crash: fault at call %ld: %s", at, w.msg);
			if (!crash && failures - crashes == 0)
				snprintf(first, sizeof(first), "fault at call %ld: %s", at, w.msg);
			failures++;
		}
	}
	/* Some clean points again in this process, for LeakSanitizer. */
	long inproc = 0;
	for (long at = 1; at <= calls && !failures && inproc < 12; at += calls / 12 + 1, inproc++) {
		long dummy;
		struct fault_tally t2 = {0};
		if (fault_run(fc, at, seed, dir, &dummy, &t2, &w))
			break;
	}
	fprintf(stderr,
		"fault %s: %ld calls in the workload, %ld runs, %ld faults hit, %ld failed ops, "
		"%ld recovered past the last ack, %ld partial changes on failed handles, %.1f s\n",
		fc->name, calls, t.runs - 1, t.hit, t.op_errors, t.recovered_newer, t.partial,
		now_sec() - t0);
	tmp_remove(dir);
	cr_assert_eq(failures, 0,
		     "seed %" PRIu64 " (%s): %ld of %ld runs broke the contract (%ld crashed); "
		     "first: %s%s (FLEX_TEST_SEED=%" PRIu64 " FLEX_FAULT_AT=<call> replays one)",
		     seed, fc->name, failures, t.runs - 1, crashes, first, first_crash, seed);
}

Test(flexspace_fault, any_call_fails_once_with_eio)
{
	fault_test(&(struct fault_case){"any_once_eio", CIO_ALL, -EIO, 0, 0});
}

Test(flexspace_fault, any_call_fails_permanently_with_eio)
{
	fault_test(&(struct fault_case){"any_perm_eio", CIO_ALL, -EIO, 1, 0});
}

Test(flexspace_fault, write_fails_once_with_enospc)
{
	fault_test(&(struct fault_case){"write_once_enospc", CIO_WRITES, -ENOSPC, 0, 0});
}

Test(flexspace_fault, sync_fails_once_with_eio)
{
	fault_test(&(struct fault_case){"sync_once_eio", CIO_SYNCS, -EIO, 0, 0});
}

Test(flexspace_fault, writes_go_short_once)
{
	fault_test(&(struct fault_case){"write_short_once", CIO_WRITES, CIO_SHORT, 0, 0});
}

Test(flexspace_fault, writes_go_short_permanently)
{
	fault_test(&(struct fault_case){"write_short_perm", CIO_WRITES, CIO_SHORT, 1, 0});
}

Test(flexspace_fault, write_fails_once_with_eio_while_max_data_forces_collection)
{
	fault_test(&(struct fault_case){"write_once_eio_max_data", CIO_WRITES, -EIO, 0, 1u << 20});
}

Test(flexspace_fault, any_call_fails_once_with_eio_while_max_data_forces_collection)
{
	fault_test(&(struct fault_case){"any_once_eio_max_data", CIO_ALL, -EIO, 0, 1u << 20});
}

Test(flexspace_fault, reads_fail_permanently_with_eio)
{
	fault_test(&(struct fault_case){"read_perm_eio", CIO_READS, -EIO, 1, 0});
}

/* ---- concurrency smoke ---------------------------------------------------- */

/* The byte every offset holds: a function of the offset alone, so readers
 * can check any range of the space while a writer appends to it and
 * rewrites parts of it with the same bytes (which makes garbage, so the
 * collector moves extents under the readers). */
static uint8_t pat(uint64_t off)
{
	uint64_t x = off * 0x9e3779b97f4a7c15ull;
	return (uint8_t)(x >> 56 ^ off);
}

static void fill_pat(uint8_t *b, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		b[i] = pat(off + i);
}

struct conc {
	struct flexspace *fs;
	atomic_int done;
	atomic_int bad;
	atomic_long reads;
	char msg[256];
	uint64_t seed;
	double deadline; /* readers stop by then whatever happens */
};

static void *conc_reader(void *arg)
{
	struct conc *cc = arg;
	uint64_t r = cc->seed ^ (uint64_t)pthread_self();
	uint8_t *b = malloc(64u << 10);
	while (!atomic_load(&cc->done) && !atomic_load(&cc->bad) && now_sec() < cc->deadline) {
		uint64_t size = flexspace_size(cc->fs);
		if (!size)
			continue;
		uint64_t off = rnd_below(&r, size);
		uint64_t len = 1 + rnd_below(&r, 64u << 10);
		uint64_t exp = len < size - off ? len : size - off;
		ssize_t n;
		if (rnd_below(&r, 2)) {
			n = flexspace_read(cc->fs, b, off, len);
		} else {
			/* The same bytes as up to four ranges at once, the
			 * last first (appends only grow the space). */
			struct flex_iovec v[4];
			int nv = 1 + (int)rnd_below(&r, 4);
			uint64_t at = 0;
			for (int i = 0; i < nv; i++) {
				uint64_t l = i == nv - 1 ? exp - at : rnd_below(&r, exp - at + 1);
				v[nv - 1 - i] = (struct flex_iovec){.buf = b + at, .len = l, .off = off + at};
				at += l;
			}
			int rc = flexspace_read_many(cc->fs, v, nv);
			n = rc ? rc : (ssize_t)exp;
		}
		if (n < (ssize_t)exp) {
			if (!atomic_exchange(&cc->bad, 1))
				snprintf(cc->msg, sizeof(cc->msg),
					 "read(%" PRIu64 ", %" PRIu64 ") returned %zd", off, len, n);
			break;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (b[i] != pat(off + (uint64_t)i)) {
				if (!atomic_exchange(&cc->bad, 1))
					snprintf(cc->msg, sizeof(cc->msg),
						 "byte %" PRIu64 " changed under a reader",
						 off + (uint64_t)i);
				break;
			}
		}
		atomic_fetch_add(&cc->reads, 1);
	}
	free(b);
	return NULL;
}

Test(flexspace, concurrent_readers_see_stable_bytes_while_writer_appends_and_gc_runs)
{
	char dir[PATH_MAX];
	struct flexspace_options o = tiny_options();
	struct flexspace *fs = open_fresh(dir, sizeof(dir), &o);
	struct conc cc = {.fs = fs, .seed = test_seed("concurrency")};
	uint8_t *b = malloc(64u << 10);
	fill_pat(b, 0, 64u << 10);
	for (uint64_t off = 0; off < (1u << 20); off += 64u << 10) {
		fill_pat(b, off, 64u << 10);
		cr_assert_eq(flexspace_write(fs, b, off, 64u << 10), 64 << 10);
	}
	/* 1,500 writes take 1-3 s beside the readers on a loaded 2-core
	 * machine; a writer starved behind them makes a handful. */
	double t0 = now_sec(), limit = 15.0 * test_scale();
	cc.deadline = t0 + limit;
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, conc_reader, &cc), 0);
	uint64_t r = cc.seed;
	long nwrites = scaled(1500), k;
	int wrc = 0;
	for (k = 0; k < nwrites && !atomic_load(&cc.bad) && !wrc; k++) {
		if (now_sec() - t0 > limit)
			break;
		uint64_t size = flexspace_size(fs);
		uint64_t len = 1 + rnd_below(&r, 16u << 10), off;
		if (rnd_below(&r, 3) == 0)
			off = size; /* append */
		else
			off = rnd_below(&r, size - len); /* same bytes again: garbage */
		fill_pat(b, off, len);
		ssize_t n = flexspace_write(fs, b, off, len);
		if (n != (ssize_t)len)
			wrc = (int)n;
		if (k % 100 == 0 && flexspace_sync(fs) != 0)
			wrc = -EIO;
	}
	atomic_store(&cc.done, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	if (wrc || k != nwrites || atomic_load(&cc.bad)) {
		flexspace_close(fs);
		free(b);
		tmp_remove(dir);
	}
	cr_assert_eq(wrc, 0, "writer: %s", flex_strerror(wrc));
	cr_assert_eq(k, nwrites,
		     "the writer made only %ld of %ld writes in %.0f s while 4 readers read "
		     "(%ld reads): writers starve behind readers",
		     k, nwrites, limit, atomic_load(&cc.reads));
	cr_assert_eq(atomic_load(&cc.bad), 0, "seed %" PRIu64 ": %s", cc.seed, cc.msg);
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	fprintf(stderr, "concurrency: %ld writes, %ld reads, gc_runs %" PRIu64 "\n", nwrites,
		atomic_load(&cc.reads), st.gc_runs);
	cr_assert_gt(st.gc_runs, 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	free(b);
	tmp_remove(dir);
}

/* ---- identity: directories the library did not make --------------------- */

static void put_file(const char *dir, const char *name, const void *b, size_t n)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f, "%s", p);
	cr_assert_eq(fwrite(b, 1, n, f), n);
	cr_assert_eq(fclose(f), 0);
}

/* Opens dir with create (unless no_create_only) and without: each must
 * fail with `want` and leave the directory exactly as it was. */
static void refused_unchanged_as(const char *dir, int want, const char *what, int no_create_only)
{
	char *before = dir_snapshot(dir);
	for (int create = !no_create_only; create >= 0; create--) {
		struct flexspace_options o = tiny_options();
		o.no_create = !create;
		struct flexspace *fs = (struct flexspace *)dir;
		int rc = flexspace_open(dir, &o, &fs);
		cr_expect_eq(rc, want, "%s, create %d: %s, not %s", what, create, flex_strerror(rc),
			     flex_strerror(want));
		cr_expect_null(fs);
		if (!rc)
			flexspace_close(fs);
		char *after = dir_snapshot(dir);
		cr_expect_str_eq(after, before, "%s, create %d: the directory changed", what,
				 create);
		free(after);
	}
	/* A read-only open refuses what an open without create does. */
	struct flexspace_options o = tiny_options();
	o.read_only = 1;
	struct flexspace *fs = (struct flexspace *)dir;
	int rc = flexspace_open(dir, &o, &fs);
	cr_expect_eq(rc, want, "%s, read-only: %s, not %s", what, flex_strerror(rc),
		     flex_strerror(want));
	cr_expect_null(fs);
	if (!rc)
		flexspace_close(fs);
	char *after = dir_snapshot(dir);
	cr_expect_str_eq(after, before, "%s, read-only: the directory changed", what);
	free(after);
	free(before);
}

static void refused_unchanged(const char *dir, int want, const char *what)
{
	refused_unchanged_as(dir, want, what, 0);
}

static void space_has(const char *dir, int create, const char *want)
{
	struct flexspace_options o = tiny_options();
	o.no_create = !create;
	struct flexspace *fs;
	int rc = flexspace_open(dir, &o, &fs);
	cr_assert_eq(rc, 0, "%s: %s", dir, flex_strerror(rc));
	char b[64] = {0};
	size_t n = strlen(want);
	cr_expect_eq(flexspace_size(fs), n);
	cr_expect_eq(flexspace_read(fs, b, 0, sizeof(b)), (ssize_t)n);
	cr_expect_str_eq(b, want);
	cr_assert_eq(flexspace_close(fs), 0);
}

static void space_write(const char *dir, const char *text)
{
	struct flexspace_options o = tiny_options();
	struct flexspace *fs;
	int rc = flexspace_open(dir, &o, &fs);
	cr_assert_eq(rc, 0, "%s: %s", dir, flex_strerror(rc));
	cr_assert_eq(flexspace_write(fs, text, 0, strlen(text)), (ssize_t)strlen(text));
	cr_assert_eq(flexspace_close(fs), 0);
}

static int ident_is(const char *dir, int kind)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, dir);
	uint8_t b[FLEX_IDENT_BYTES + 1], want[FLEX_IDENT_BYTES];
	FILE *f = fopen(p, "rb");
	if (!f)
		return 0;
	size_t n = fread(b, 1, sizeof(b), f);
	fclose(f);
	flex_ident_encode(want, kind);
	return n == FLEX_IDENT_BYTES && !memcmp(b, want, n);
}

/* A user's file that happens to be called LOG, DATA, TREE or LOCK, small
 * or large, alone or together, is never truncated or rewritten. */
Test(flexspace, users_files_named_like_a_spaces_are_refused_untouched)
{
	char root[PATH_MAX], dir[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "foreign"), 0);
	static const char *const names[] = {"LOG", "DATA", "TREE", "LOCK"};
	uint8_t *big = malloc(5 * 4096);
	uint64_t r = 7;
	for (size_t i = 0; i < 5 * 4096; i++)
		big[i] = (uint8_t)rnd(&r);
	int k = 0;
	for (size_t i = 0; i < 4; i++) {
		for (int large = 0; large < 2; large++) {
			snprintf(dir, sizeof(dir), "%s/d%d", root, k++);
			cr_assert_eq(mkdir(dir, 0755), 0);
			if (large)
				put_file(dir, names[i], big, 5 * 4096);
			else
				put_file(dir, names[i], "my notes\n", 9);
			refused_unchanged(dir, FLEX_ENOTSTORE, names[i]);
		}
	}
	/* All three, LOG empty: what a creation cut short looked like. */
	snprintf(dir, sizeof(dir), "%s/d%d", root, k++);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, "LOG", "", 0);
	put_file(dir, "TREE", big, 4096);
	put_file(dir, "DATA", big, 5 * 4096);
	refused_unchanged(dir, FLEX_ENOTSTORE, "empty LOG, TREE and DATA");
	/* Any other file makes a directory no place to create a space. */
	snprintf(dir, sizeof(dir), "%s/d%d", root, k++);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, "notes.txt", "x", 1);
	refused_unchanged(dir, FLEX_ENOTSTORE, "an unrelated file");
	/* So is an IDENTITY that is not the library's. */
	snprintf(dir, sizeof(dir), "%s/d%d", root, k++);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, FLEX_IDENT_NAME, "who am I?\n", 10);
	refused_unchanged(dir, FLEX_ENOTSTORE, "a foreign IDENTITY");
	free(big);
	tmp_remove(root);
}

/* A missing or empty directory opened without create stays as it was. */
Test(flexspace, open_without_create_creates_nothing)
{
	char root[PATH_MAX], dir[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "nocreate"), 0);
	snprintf(dir, sizeof(dir), "%s/missing", root);
	struct flexspace_options o = tiny_options();
	o.no_create = 1;
	struct flexspace *fs;
	char *before = dir_snapshot(root);
	cr_expect_eq(flexspace_open(dir, &o, &fs), -ENOENT);
	snprintf(dir, sizeof(dir), "%s/empty", root);
	cr_assert_eq(mkdir(dir, 0755), 0);
	free(before);
	before = dir_snapshot(root);
	cr_expect_eq(flexspace_open(dir, &o, &fs), -ENOENT);
	char *after = dir_snapshot(root);
	cr_expect_str_eq(after, before);
	free(before);
	free(after);
	tmp_remove(root);
}

/* An IDENTITY cut short (empty, or a prefix of its bytes) is the library's
 * own creation interrupted: create completes it, no create leaves it.  A
 * damaged one, or one of another kind or format, is refused unchanged. */
Test(flexspace, identity_cut_short_is_completed_damaged_one_refused)
{
	char root[PATH_MAX], dir[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "ident"), 0);
	uint8_t id[FLEX_IDENT_BYTES];
	flex_ident_encode(id, FLEX_KIND_SPACE);
	static const size_t cuts[] = {0, 1, 8, 12, 24, FLEX_IDENT_BYTES - 1};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/cut%zu", root, cuts[i]);
		cr_assert_eq(mkdir(dir, 0755), 0);
		put_file(dir, FLEX_IDENT_NAME, id, cuts[i]);
		refused_unchanged_as(dir, -ENOENT, "IDENTITY cut short", 1);
		space_write(dir, "completed");
		space_has(dir, 0, "completed");
		cr_expect(ident_is(dir, FLEX_KIND_SPACE), "cut at %zu: IDENTITY not completed",
			  cuts[i]);
	}
	/* A prefix next to a file the library did not create. */
	snprintf(dir, sizeof(dir), "%s/cut-and-more", root);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, FLEX_IDENT_NAME, id, 4);
	put_file(dir, "LOG", "mine", 4);
	refused_unchanged(dir, FLEX_ENOTSTORE, "a prefix and a foreign LOG");
	/* Damaged: the magic is there, the checksum is not right. */
	uint8_t bad[FLEX_IDENT_BYTES];
	memcpy(bad, id, sizeof(bad));
	bad[20] ^= 1;
	snprintf(dir, sizeof(dir), "%s/damaged", root);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, FLEX_IDENT_NAME, bad, sizeof(bad));
	refused_unchanged(dir, FLEX_ECORRUPT, "damaged IDENTITY");
	/* A later format. */
	memcpy(bad, id, sizeof(bad));
	bad[8] = 2;
	uint64_t h = XXH3_64bits(bad, 24);
	for (int b = 0; b < 8; b++)
		bad[24 + b] = (uint8_t)(h >> (8 * b));
	snprintf(dir, sizeof(dir), "%s/newer", root);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, FLEX_IDENT_NAME, bad, sizeof(bad));
	refused_unchanged(dir, FLEX_EVERSION, "IDENTITY of a later format");
	/* A FlexDB store's identity. */
	flex_ident_encode(bad, FLEX_KIND_DB);
	snprintf(dir, sizeof(dir), "%s/db", root);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, FLEX_IDENT_NAME, bad, sizeof(bad));
	refused_unchanged(dir, FLEX_EKIND_DB, "FlexDB IDENTITY");
	tmp_remove(root);
}

/* A creation cut short after IDENTITY, at each later step (LOCK made, LOG
 * empty, LOG header torn, TREE empty), is finished by an open with create;
 * without create it is refused and left as it is. */
Test(flexspace, creation_cut_short_after_the_identity_is_finished)
{
	char root[PATH_MAX], dir[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "cutshort"), 0);
	uint8_t id[FLEX_IDENT_BYTES];
	flex_ident_encode(id, FLEX_KIND_SPACE);
	uint8_t *zeros = calloc(1, 8192);
	for (int step = 0; step < 5; step++) {
		snprintf(dir, sizeof(dir), "%s/step%d", root, step);
		cr_assert_eq(mkdir(dir, 0755), 0);
		put_file(dir, FLEX_IDENT_NAME, id, sizeof(id));
		if (step >= 1)
			put_file(dir, "LOCK", "", 0);
		if (step == 2)
			put_file(dir, "LOG", "", 0);
		if (step >= 3)
			put_file(dir, "LOG", zeros, step == 3 ? 100 : 8192);
		if (step >= 4)
			put_file(dir, "TREE", "", 0);
		char *before = dir_snapshot(dir);
		for (int ro = 0; ro < 2; ro++) {
			struct flexspace_options o = tiny_options();
			o.no_create = 1;
			o.read_only = ro;
			struct flexspace *fs;
			int rc = flexspace_open(dir, &o, &fs);
			cr_expect(rc == -ENOENT || rc == FLEX_ECORRUPT, "step %d, read-only %d: %s",
				  step, ro, flex_strerror(rc));
			char *after = dir_snapshot(dir);
			cr_expect_str_eq(after, before, "step %d, read-only %d: open changed it",
					 step, ro);
			free(after);
		}
		free(before);
		space_write(dir, "finished");
		space_has(dir, 0, "finished");
	}
	free(zeros);
	tmp_remove(root);
}

/* A space made before IDENTITY existed is recognised by its LOG header:
 * it opens (without create too, which adds nothing), and an open with
 * create gives it its IDENTITY.  Without a sound LOG header it cannot be
 * told from a user's files and is refused unchanged. */
Test(flexspace, space_made_before_identities_still_opens)
{
	char root[PATH_MAX], dir[PATH_MAX + 32], p[PATH_MAX + 64];
	cr_assert_eq(tmp_make(root, sizeof(root), "legacy"), 0);
	snprintf(dir, sizeof(dir), "%s/old", root);
	space_write(dir, "from before");
	snprintf(p, sizeof(p), "%s/" FLEX_IDENT_NAME, dir);
	cr_assert_eq(unlink(p), 0);
	space_has(dir, 0, "from before");
	cr_expect_eq(access(p, F_OK), -1, "an open without create added IDENTITY");
	put_file(dir, "notes.txt", "the user's", 10);
	space_has(dir, 1, "from before");
	cr_expect(ident_is(dir, FLEX_KIND_SPACE), "IDENTITY was not added");
	space_has(dir, 1, "from before");
	/* Adding it cut short (empty, or a prefix): opens, and is completed
	 * only with create.  A prefix of a FlexDB identity proves nothing. */
	uint8_t id[FLEX_IDENT_BYTES];
	flex_ident_encode(id, FLEX_KIND_SPACE);
	for (size_t cut = 0; cut < FLEX_IDENT_BYTES; cut += 13) {
		put_file(dir, FLEX_IDENT_NAME, id, cut);
		space_has(dir, 0, "from before");
		cr_expect(!ident_is(dir, FLEX_KIND_SPACE), "cut %zu: completed without create",
			  cut);
		space_has(dir, 1, "from before");
		cr_expect(ident_is(dir, FLEX_KIND_SPACE), "cut %zu: not completed", cut);
	}
	flex_ident_encode(id, FLEX_KIND_DB);
	put_file(dir, FLEX_IDENT_NAME, id, 20);
	refused_unchanged(dir, FLEX_ENOTSTORE, "a FlexDB IDENTITY cut short beside a space");
	flex_ident_encode(id, FLEX_KIND_SPACE);
	put_file(dir, FLEX_IDENT_NAME, id, sizeof(id));
	/* Both LOG header slots damaged: nothing proves it is a space. */
	cr_assert_eq(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/LOG", dir);
	int fd = open(p, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "XX", 2, 0), 2);
	cr_assert_eq(pwrite(fd, "XX", 2, 4096), 2);
	close(fd);
	refused_unchanged(dir, FLEX_ENOTSTORE, "legacy space with no sound LOG header");
	tmp_remove(root);
}

/* ---- read-only handles ----------------------------------------------------- */

static const struct gen_cfg ro_gen = {.target_size = 256u << 10,
				      .big_len = 64u << 10,
				      .insert_pct = 20,
				      .collapse_pct = 10,
				      .truncate_pct = 2,
				      .defrag_pct = 3,
				      .sync_pct = 8};

/* Tiny segments (collection runs) and a log far from its limit, so that
 * what the syncs logged is still to be replayed at the next open. */
static struct flexspace_options ro_writer_options(void)
{
	struct flexspace_options o = tiny_options();
	o.log_limit = 64u << 20;
	return o;
}

/* Every change refused with FLEX_EREADONLY, and nothing changed. */
static void ro_changes_refused(struct flexspace *fs)
{
	uint64_t size = flexspace_size(fs);
	cr_assert_gt(size, 16);
	cr_expect_eq(flexspace_write(fs, "x", 0, 1), FLEX_EREADONLY);
	cr_expect_eq(flexspace_write(fs, "x", size, 1), FLEX_EREADONLY);
	cr_expect_eq(flexspace_insert(fs, "x", 1, 1), FLEX_EREADONLY);
	cr_expect_eq(flexspace_collapse(fs, 0, 1), FLEX_EREADONLY);
	cr_expect_eq(flexspace_truncate(fs, 0), FLEX_EREADONLY);
	cr_expect_eq(flexspace_truncate(fs, size + 10), FLEX_EREADONLY);
	cr_expect_eq(flexspace_tag_set(fs, 1, 7), FLEX_EREADONLY);
	struct flexspace_op ro_op = {.type = FLEXSPACE_OP_REPLACE, .off = 0, .len = 1,
				     .buf = "x", .buf_len = 1};
	cr_expect_eq(flexspace_apply(fs, &ro_op, 1), FLEX_EREADONLY);
	cr_expect_eq(flexspace_apply(fs, NULL, 0), FLEX_EREADONLY);
	cr_expect_eq(flexspace_defrag(fs, 0, size), FLEX_EREADONLY);
	cr_expect_eq(flexspace_sync(fs), FLEX_EREADONLY);
	cr_expect_eq(flexspace_maintain(fs), FLEX_EREADONLY);
	cr_expect_eq(flexspace_size(fs), size);
}

/* A writer killed after its last sync leaves batches in LOG (and a torn
 * batch after them).  A read-only open replays them in memory: it sees
 * exactly what was synced, refuses every change, and neither it nor a
 * second read-only handle beside it nor their closes change a byte or an
 * entry of the directory; no call that writes reaches the I/O seam.  A
 * writable open afterwards recovers the same. */
Test(flexspace, read_only_open_replays_a_crash_in_memory_and_writes_nothing)
{
	uint64_t seed = test_seed("flexspace read-only after a crash");
	char dir[PATH_MAX], p[PATH_MAX + 16];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "ro_crash"), 0);
	const long nops = scaled(300);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexspace_options o = ro_writer_options();
		struct flexspace *fs;
		if (flexspace_open(dir, &o, &fs))
			_exit(2);
		uint8_t *buf = malloc(1u << 20);
		uint64_t r = seed;
		for (long i = 0; i < nops; i++) {
			struct op op;
			gen_op(&r, flexspace_size(fs), &ro_gen, &op);
			if (space_apply(fs, &op, buf))
				_exit(3);
		}
		if (flexspace_sync(fs))
			_exit(4);
		raise(SIGKILL);
		_exit(5);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the writer failed (status %d)", st);
	struct model m = {0};
	uint8_t *buf = malloc(1u << 20);
	uint64_t r = seed;
	for (long i = 0; i < nops; i++) {
		struct op op;
		gen_op(&r, m.size, &ro_gen, &op);
		model_apply(&m, &op, buf);
	}
	/* A batch torn by the crash: its header, not its records. */
	snprintf(p, sizeof(p), "%s/LOG", dir);
	int fd = open(p, O_WRONLY | O_APPEND);
	cr_assert_geq(fd, 0);
	uint8_t torn[40] = {'F', 'L', 'B', '1', 9};
	cr_assert_eq(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
	close(fd);

	char *before = dir_snapshot(dir);
	struct roio w;
	roio_init(&w);
	struct flexspace_options o = {.io = &w.io, .read_only = 1};
	struct flexspace *ro, *ro2;
	int rc = flexspace_open(dir, &o, &ro);
	cr_assert_eq(rc, 0, "read-only open: %s (%s)", flex_strerror(rc), w.bad);
	struct flexspace_stats fst;
	cr_assert_eq(flexspace_stats(ro, &fst), 0);
	cr_expect_gt(fst.recovered_records, 0, "nothing was replayed: the test proves little");
	struct why why = {{0}};
	cr_expect_eq(space_matches(ro, &m, &why), 0, "read-only: %s", why.msg);
	cr_expect_eq(flexspace_check(ro), 0);
	/* A second one at once, through the default table (and the mapping). */
	o = (struct flexspace_options){.read_only = 1};
	rc = flexspace_open(dir, &o, &ro2);
	cr_assert_eq(rc, 0, "second read-only open: %s", flex_strerror(rc));
	cr_expect_eq(space_matches(ro2, &m, &why), 0, "second read-only: %s", why.msg);
	ro_changes_refused(ro);
	ro_changes_refused(ro2);
	cr_expect_eq(space_matches(ro, &m, &why), 0, "after refused changes: %s", why.msg);
	uint64_t eoff = 99, elen = 0;
	cr_expect_gt(flexspace_read_extent(ro, buf, m.size / 2, 16, &eoff, &elen), 0);
	cr_expect(eoff <= m.size / 2 && eoff + elen > m.size / 2);
	cr_expect_eq(flexspace_close(ro2), 0);
	cr_expect_eq(flexspace_close(ro), 0);
	cr_expect_eq(atomic_load(&w.changes), 0, "the read-only handle tried: %s", w.bad);
	cr_expect_gt(atomic_load(&w.opens), 0);
	char *after = dir_snapshot(dir);
	cr_expect_str_eq(after, before, "a read-only handle changed the directory");
	free(after);
	free(before);

	/* The writable open recovers the same from the untouched files. */
	struct flexspace_options wo = ro_writer_options();
	struct flexspace *fs;
	rc = flexspace_open(dir, &wo, &fs);
	cr_assert_eq(rc, 0, "writable open: %s", flex_strerror(rc));
	struct flexspace_stats wst;
	cr_assert_eq(flexspace_stats(fs, &wst), 0);
	cr_expect_eq(wst.recovered_records, fst.recovered_records);
	cr_expect_eq(space_matches(fs, &m, &why), 0, "writable after read-only: %s", why.msg);
	cr_expect_eq(flexspace_close(fs), 0);
	free(buf);
	model_free(&m);
	tmp_remove(dir);
}

/* In a child: opens dir read-only (want_ro) and writable (want_rw) and
 * exits 0 when both give what is expected; a read-only handle must read
 * `text`. */
static void ro_child(const char *dir, int want_ro, int want_rw, const char *text)
{
	struct flexspace_options o = {.read_only = 1};
	struct flexspace *fs = NULL;
	int rc = flexspace_open(dir, &o, &fs);
	if (rc != want_ro || (rc && fs))
		_exit(10);
	if (!rc) {
		char b[64] = {0};
		if (flexspace_read(fs, b, 0, sizeof(b)) != (ssize_t)strlen(text) || strcmp(b, text))
			_exit(11);
		if (flexspace_close(fs))
			_exit(12);
	}
	o = (struct flexspace_options){0};
	rc = flexspace_open(dir, &o, &fs);
	if (rc != want_rw || (rc && fs))
		_exit(13);
	if (!rc && flexspace_close(fs))
		_exit(14);
	_exit(0);
}

static void ro_in_child(const char *dir, int want_ro, int want_rw, const char *text,
			const char *what)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		ro_child(dir, want_ro, want_rw, text);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child status %d", what,
		  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

Test(flexspace, read_only_handles_share_and_exclude_a_writer_both_ways)
{
	char dir[PATH_MAX];
	struct flexspace *w = open_fresh(dir, sizeof(dir), NULL);
	cr_assert_eq(flexspace_write(w, "hello", 0, 5), 5);
	cr_assert_eq(flexspace_sync(w), 0);
	struct flexspace_options ro = {.read_only = 1};
	struct flexspace *a = (struct flexspace *)dir, *b;
	cr_expect_eq(flexspace_open(dir, &ro, &a), FLEX_EBUSY, "a reader beside a writer");
	cr_expect_null(a);
	ro_in_child(dir, FLEX_EBUSY, FLEX_EBUSY, "hello", "a child beside a writer");
	cr_assert_eq(flexspace_close(w), 0);

	cr_assert_eq(flexspace_open(dir, &ro, &a), 0);
	cr_assert_eq(flexspace_open(dir, &ro, &b), 0, "two readers in one process");
	w = (struct flexspace *)dir;
	cr_expect_eq(flexspace_open(dir, NULL, &w), FLEX_EBUSY, "a writer beside readers");
	cr_expect_null(w);
	ro_in_child(dir, 0, FLEX_EBUSY, "hello", "a child beside two readers");
	cr_assert_eq(flexspace_close(a), 0);
	cr_expect_eq(flexspace_open(dir, NULL, &w), FLEX_EBUSY, "a writer beside one reader");
	cr_assert_eq(flexspace_close(b), 0);
	ro_in_child(dir, 0, 0, "hello", "a child once the readers closed");
	cr_assert_eq(flexspace_open(dir, NULL, &w), 0);
	cr_assert_eq(flexspace_close(w), 0);
	tmp_remove(dir);
}

static int ro_chmod_writable;

static int ro_chmod_one(const char *path, const struct stat *sb, int type, struct FTW *f)
{
	(void)type, (void)f;
	/* a+rX, and a-w or u+w */
	mode_t m = sb->st_mode & 07777;
	m |= S_ISDIR(sb->st_mode) ? 0555 : 0444;
	m = ro_chmod_writable ? m | S_IWUSR : m & ~(mode_t)0222;
	chmod(path, m);
	return 0;
}

/* chmod -R a+rX,a-w (writable 0) or u+w (writable 1). */
static void ro_chmod(const char *dir, int writable)
{
	ro_chmod_writable = writable;
	cr_assert_eq(nftw(dir, ro_chmod_one, 16, FTW_PHYS), 0);
}

/* In a child without write permission on the directory and its files
 * (as nobody when the test runs as root, for whom permissions do not
 * bind), a read-only open reads the space and a writable one gets
 * -EACCES; nothing changes. */
Test(flexspace, read_only_open_needs_no_write_permission)
{
	char dir[PATH_MAX];
	struct flexspace *w = open_fresh(dir, sizeof(dir), NULL);
	cr_assert_eq(flexspace_write(w, "hello", 0, 5), 5);
	cr_assert_eq(flexspace_close(w), 0);
	ro_chmod(dir, 0);
	char *before = dir_snapshot(dir);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(20);
		ro_child(dir, 0, -EACCES, "hello");
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d",
		  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	char *after = dir_snapshot(dir);
	cr_expect_str_eq(after, before);
	free(after);
	free(before);
	ro_chmod(dir, 1);
	tmp_remove(dir);
}

/* ---- checkpoints ------------------------------------------------------------------- */

static const struct gen_cfg ckpt_gen = {.target_size = 256u << 10, .big_len = 64u << 10,
					.insert_pct = 25, .collapse_pct = 10, .truncate_pct = 2,
					.defrag_pct = 3, .sync_pct = 4, .apply_pct = 6};

/* A writer that applies a seeded stream to the space and the model in
 * step, keeping the size and hash of every state: state k is the model
 * after k operations, and `done` is how many returned. */
struct ckpt_writer {
	struct flexspace *fs;
	uint64_t seed;
	long nops;
	uint64_t *sizes, *hashes;
	struct model m;
	atomic_long done;
	int err;
};

static void *ckpt_write_main(void *arg)
{
	struct ckpt_writer *cw = arg;
	uint64_t r = cw->seed;
	uint8_t *buf = malloc(ckpt_gen.big_len + 65536);
	for (long i = 1; i <= cw->nops && !cw->err; i++) {
		struct op op;
		gen_op(&r, cw->m.size, &ckpt_gen, &op);
		model_apply(&cw->m, &op, buf);
		cw->sizes[i] = cw->m.size;
		cw->hashes[i] = model_hash(&cw->m);
		cw->err = space_apply(cw->fs, &op, buf);
		atomic_store(&cw->done, i);
	}
	free(buf);
	return NULL;
}

/* An I/O table that slows down the writes of a checkpoint's DATA copy, so
 * that the writer's changes, tree commits and collections run while the
 * copy reads the source's segments: without the pins, segments the copy
 * needs would be reused under it. */
static atomic_int ckpt_slow_fd = -1;

static int ckpt_slow_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	int fd = flex_io_posix()->open(io, path, flags, mode);
	size_t n = strlen(path);
	if (fd >= 0 && n > 5 && !strcmp(path + n - 5, "/DATA") && strstr(path, "/copy"))
		atomic_store(&ckpt_slow_fd, fd);
	return fd;
}

static int ckpt_slow_close(const struct flex_io *io, int fd)
{
	int want = fd;
	atomic_compare_exchange_strong(&ckpt_slow_fd, &want, -1);
	return flex_io_posix()->close(io, fd);
}

static ssize_t ckpt_slow_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
				uint64_t off)
{
	if (fd == atomic_load(&ckpt_slow_fd))
		usleep(40000);
	return flex_io_posix()->pwrite(io, fd, buf, len, off);
}

/* Checkpoints taken while a writer changes the space open (without
 * create: the copy has every file an open needs) as a state between the
 * last change acknowledged before the call and the first one after it,
 * pass the deep check, and leave the source as the writer made it. */
Test(flexspace, checkpoint_while_writing_is_a_state_between_the_call_bounds)
{
	uint64_t seed = test_seed("flexspace checkpoint");
	char root[PATH_MAX], dir[PATH_MAX + 16], dest[3][PATH_MAX + 16];
	cr_assert_eq(tmp_make(root, sizeof(root), "ckpt"), 0);
	snprintf(dir, sizeof(dir), "%s/src", root);
	struct flex_io slow = *flex_io_posix();
	slow.open = ckpt_slow_open;
	slow.close = ckpt_slow_close;
	slow.pwrite = ckpt_slow_pwrite;
	struct flexspace_options o = tiny_options();
	o.io = &slow;
	struct ckpt_writer cw = {.seed = seed, .nops = scaled(4000)};
	cr_assert_eq(flexspace_open(dir, &o, &cw.fs), 0);
	cw.sizes = calloc((size_t)cw.nops + 1, sizeof(uint64_t));
	cw.hashes = calloc((size_t)cw.nops + 1, sizeof(uint64_t));
	cw.hashes[0] = model_hash(&cw.m);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, ckpt_write_main, &cw), 0);
	long lo[3], hi[3];
	for (int c = 0; c < 3; c++) {
		/* Into a missing directory, then into empty ones. */
		snprintf(dest[c], sizeof(dest[c]), "%s/copy%d", root, c);
		if (c)
			cr_assert_eq(mkdir(dest[c], 0755), 0);
		while (atomic_load(&cw.done) < cw.nops * (c + 1) / 5 && !cw.err)
			usleep(1000);
		lo[c] = atomic_load(&cw.done);
		int rc = flexspace_checkpoint(cw.fs, dest[c]);
		hi[c] = atomic_load(&cw.done) + 1; /* the one under way may be in */
		cr_assert_eq(rc, 0, "seed %" PRIu64 ": checkpoint %d: %s", seed, c,
			     flex_strerror(rc));
	}
	pthread_join(th, NULL);
	cr_assert_eq(cw.err, 0, "seed %" PRIu64 ": writer: %s", seed, flex_strerror(cw.err));
	long last = atomic_load(&cw.done);
	struct why w = {0};
	o.no_create = 1;
	for (int c = 0; c < 3; c++) {
		long k;
		if (hi[c] > last)
			hi[c] = last;
		cr_expect_eq(verify_recovered(dest[c], &o, cw.sizes, cw.hashes, lo[c], hi[c], &k, &w),
			     0, "seed %" PRIu64 ": checkpoint %d (states %ld..%ld): %s", seed, c,
			     lo[c], hi[c], w.msg);
		cr_expect(ident_is(dest[c], FLEX_KIND_SPACE), "checkpoint %d has no IDENTITY", c);
	}
	/* The source went on as if nothing happened. */
	cr_expect_eq(flexspace_check(cw.fs), 0);
	cr_expect_eq(space_matches(cw.fs, &cw.m, &w), 0, "seed %" PRIu64 ": source: %s", seed,
		     w.msg);
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(cw.fs, &st), 0);
	cr_assert_eq(flexspace_close(cw.fs), 0);
	long k;
	cr_expect_eq(verify_recovered(dir, &o, cw.sizes, cw.hashes, last, last, &k, &w), 0,
		     "seed %" PRIu64 ": source reopened: %s", seed, w.msg);
	model_free(&cw.m);
	free(cw.sizes);
	free(cw.hashes);
	tmp_remove(root);
}
