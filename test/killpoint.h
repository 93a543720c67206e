/*
 * killpoint.h - what the kill-point tests share: the table of the
 * libraries' FLEX_KILLPOINT names (common/flex_killpoint.h,
 * docs/DURABILITY.md), arming a forked child, reading which point fired,
 * and a scheduler that spreads kill cycles over every point and over
 * growing hit counts.
 *
 * A cycle arms one point with a hit count n in a forked child
 * (FLEX_KILLPOINT=<name>:<n>).  Either the point's n-th hit kills the
 * child, which the library reports by appending "<name> <n>" to the report
 * file, or the child's workload ends first and it exits by itself.  The
 * scheduler starts every point at small n and lets n grow past the
 * largest count that fired so far, so later cycles reach deeper into a
 * workload (the 30th pair of a commit, the 5th extent of a collection);
 * at the end every point must have fired at least once, so a point that
 * was moved where no workload reaches it is noticed.
 *
 * Header-only and static, like crashio.h.
 */
#ifndef FLEX_TEST_KILLPOINT_H
#define FLEX_TEST_KILLPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crashio.h"

#pragma GCC diagnostic ignored "-Wunused-function"

/* What a cycle does to the store before the armed child runs, so that
 * points reached only in rare states are reached at all. */
enum kp_prep {
	KP_PREP_NONE = 0,  /* continue from the previous cycle's recovery */
	KP_PREP_FRESH,	   /* an empty directory: the creation points */
	KP_PREP_EMPTY_WAL, /* FlexDB: a clean store plus one WAL with no record */
	KP_PREP_DIRTY	   /* FlexDB: a session killed with WAL records left */
};

/* Which workloads reach a point. */
enum { KP_SPACE = 1, KP_DB = 2, KP_BOTH = KP_SPACE | KP_DB, KP_CKPT = 4 /* checkpoint tests */ };

struct kp_point {
	const char *name;
	int where;
	int prep;
};

/* Every FLEX_KILLPOINT in the libraries, in the order of
 * docs/DURABILITY.md (test_api_edges checks the three agree). */
static const struct kp_point kp_points[] = {
    {"id.write.before", KP_BOTH, KP_PREP_FRESH},
    {"id.sync.before", KP_BOTH, KP_PREP_FRESH},
    {"id.dir.sync.before", KP_BOTH, KP_PREP_FRESH},
    {"ft.nodes.sync.before", KP_BOTH, 0},
    {"ft.nodes.sync.after", KP_BOTH, 0},
    {"ft.header.sync.before", KP_BOTH, 0},
    {"ft.header.sync.after", KP_BOTH, 0},
    {"ft.create.sync.before", KP_BOTH, KP_PREP_FRESH},
    {"ft.create.sync.after", KP_BOTH, KP_PREP_FRESH},
    {"ft.dir.sync.before", KP_BOTH, KP_PREP_FRESH},
    {"ft.dir.sync.after", KP_BOTH, KP_PREP_FRESH},
    {"fs.dir.sync.before", KP_BOTH, KP_PREP_FRESH},
    {"fs.dir.sync.after", KP_BOTH, KP_PREP_FRESH},
    {"fs.data.sync.before", KP_BOTH, 0},
    {"fs.data.sync.after", KP_BOTH, 0},
    {"fs.log.write.before", KP_BOTH, 0},
    {"fs.log.sync.before", KP_BOTH, 0},
    {"fs.log.sync.after", KP_BOTH, 0},
    {"fs.commit.tree_done", KP_BOTH, 0},
    {"fs.loghdr.sync.before", KP_BOTH, 0},
    {"fs.loghdr.sync.after", KP_BOTH, 0},
    {"fs.log.truncated", KP_BOTH, 0},
    {"fs.data.trimmed", KP_BOTH, 0},
    {"fs.gc.moved", KP_BOTH, 0},
    {"fdb.walnew.sync.before", KP_DB, 0},
    {"fdb.walnew.sync.after", KP_DB, 0},
    {"fdb.walnew.dir.sync.after", KP_DB, 0},
    {"fdb.wal.appended", KP_DB, 0},
    {"fdb.wal.sync.before", KP_DB, 0},
    {"fdb.wal.sync.after", KP_DB, 0},
    {"fdb.switch.wal_synced", KP_DB, 0},
    {"fdb.commit.pair_applied", KP_DB, 0},
    {"fdb.commit.range_applied", KP_DB, 0},
    {"fdb.commit.space_synced", KP_DB, 0},
    {"fdb.commit.dir.sync.before", KP_DB, 0},
    {"fdb.commit.dir.sync.after", KP_DB, 0},
    {"fdb.replay.sync.before", KP_DB, KP_PREP_DIRTY},
    {"fdb.replay.sync.after", KP_DB, KP_PREP_DIRTY},
    {"fdb.recover.dir.sync.before", KP_DB, KP_PREP_EMPTY_WAL},
    {"fdb.recover.dir.sync.after", KP_DB, KP_PREP_EMPTY_WAL},
    {"fdb.close.wal_removed", KP_DB, 0},
    {"ckpt.data.copied", KP_CKPT, 0},
    {"ckpt.space.copied", KP_CKPT, 0},
    {"ckpt.space.renamed", KP_CKPT, 0},
    {"ckpt.db.copied", KP_CKPT, 0},
    {"ckpt.db.renamed", KP_CKPT, 0},
};
#define KP_NPOINTS (sizeof(kp_points) / sizeof(kp_points[0]))

/* In a forked child, before its first call into the library: the n-th
 * hit of `name` kills it, and the library reports the kill in `report`. */
static void kp_arm(const char *name, long n, const char *report)
{
	char spec[160];
	snprintf(spec, sizeof(spec), "%s:%ld", name, n);
	setenv("FLEX_KILLPOINT", spec, 1);
	setenv("FLEX_KILLPOINT_REPORT", report, 1);
}

/* The point that fired, from the report file (then removed): 1 with its
 * name and hit count, 0 when the file is absent (nothing fired), -1 when
 * it is malformed. */
static int kp_fired(const char *report, char *name, size_t cap, long *n)
{
	FILE *f = fopen(report, "r");
	if (!f)
		return 0;
	char line[256];
	int rc = -1;
	if (fgets(line, sizeof(line), f)) {
		char *sp = strrchr(line, ' ');
		if (sp && (size_t)(sp - line) < cap) {
			memcpy(name, line, (size_t)(sp - line));
			name[sp - line] = '\0';
			*n = strtol(sp + 1, NULL, 10);
			rc = 1;
		}
	}
	fclose(f);
	unlink(report);
	return rc;
}

/* ---- scheduling ---------------------------------------------------------- */

struct kp_stat {
	long cycles;	 /* armed */
	long fired;	 /* killed the child */
	long max_fired;	 /* largest hit count that fired */
	long min_missed; /* smallest count that did not fire since; 0: none */
};

struct kp_sched {
	int where; /* KP_SPACE or KP_DB */
	int idx[KP_NPOINTS];
	int n;
	int *order; /* this round's shuffled indexes */
	int pos;
	struct kp_stat st[KP_NPOINTS];
};

static void kp_sched_init(struct kp_sched *s, int where)
{
	memset(s, 0, sizeof(*s));
	s->where = where;
	for (size_t i = 0; i < KP_NPOINTS; i++)
		if (kp_points[i].where & where)
			s->idx[s->n++] = (int)i;
	s->order = malloc((size_t)s->n * sizeof(int));
	s->pos = s->n;
}

static void kp_sched_free(struct kp_sched *s)
{
	free(s->order);
	s->order = NULL;
}

/* The next point (every point once per round, in a shuffled order) and
 * its hit count: small at first, then up to three times the largest count that
 * has fired, so the cycles walk deeper into the workload as they learn
 * how often the point is reached. */
static int kp_next(struct kp_sched *s, uint64_t *r, long *n)
{
	if (s->pos == s->n) {
		for (int i = 0; i < s->n; i++)
			s->order[i] = s->idx[i];
		for (int i = s->n - 1; i > 0; i--) {
			int j = (int)rnd_below(r, (uint64_t)i + 1);
			int t = s->order[i];
			s->order[i] = s->order[j];
			s->order[j] = t;
		}
		s->pos = 0;
	}
	int p = s->order[s->pos++];
	const struct kp_stat *st = &s->st[p];
	long top = 3 * st->max_fired + 3;
	/* A count that ran a whole workload without firing bounds the next
	 * ones (a point reached once per process is not armed at 5 again
	 * and again), but still lets them creep past the deepest firing. */
	if (st->min_missed) {
		long bound =
		    st->min_missed > st->max_fired + 1 ? st->min_missed : st->max_fired + 1;
		if (top > bound)
			top = bound;
	}
	long small = top < 3 ? top : 3;
	*n = 1 + (long)rnd_below(r, (uint64_t)(rnd_below(r, 4) == 0 ? small : top));
	s->st[p].cycles++;
	return p;
}

static void kp_record(struct kp_sched *s, int p, long n, int fired)
{
	struct kp_stat *st = &s->st[p];
	if (!fired) {
		if (!st->min_missed || n < st->min_missed)
			st->min_missed = n;
		return;
	}
	st->fired++;
	if (n > st->max_fired)
		st->max_fired = n;
	if (st->min_missed && n >= st->min_missed)
		st->min_missed = 0; /* this workload reached further: forget */
}

/* Prints one line per point; returns how many points never fired, with
 * their names in `missing`. */
static int kp_summary(const struct kp_sched *s, const char *title, char *missing, size_t cap)
{
	int never = 0;
	size_t ml = 0;
	if (cap)
		missing[0] = '\0';
	fprintf(stderr, "  %s: kill points (cycles armed / fired / deepest hit that fired):\n",
		title);
	for (int i = 0; i < s->n; i++) {
		int p = s->idx[i];
		const struct kp_stat *st = &s->st[p];
		fprintf(stderr, "    %-28s %5ld %5ld %6ld\n", kp_points[p].name, st->cycles,
			st->fired, st->max_fired);
		if (!st->fired) {
			never++;
			if (ml + 40 < cap)
				ml += (size_t)snprintf(missing + ml, cap - ml, " %s",
						       kp_points[p].name);
		}
	}
	return never;
}

#endif /* FLEX_TEST_KILLPOINT_H */
