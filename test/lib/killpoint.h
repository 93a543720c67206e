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
 * Compiled once (killpoint.c) into the tests' support archive.
 */
#ifndef FLEX_TEST_KILLPOINT_H
#define FLEX_TEST_KILLPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crashio.h"

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
#define KP_NPOINTS 48
extern const struct kp_point kp_points[KP_NPOINTS];

/* In a forked child, before its first call into the library: the n-th
 * hit of `name` kills it, and the library reports the kill in `report`. */
void kp_arm(const char *name, long n, const char *report);

/* The point that fired, from the report file (then removed): 1 with its
 * name and hit count, 0 when the file is absent (nothing fired), -1 when
 * it is malformed. */
int kp_fired(const char *report, char *name, size_t cap, long *n);

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

void kp_sched_init(struct kp_sched *s, int where);

void kp_sched_free(struct kp_sched *s);

/* The next point (every point once per round, in a shuffled order) and
 * its hit count: small at first, then up to three times the largest count that
 * has fired, so the cycles walk deeper into the workload as they learn
 * how often the point is reached. */
int kp_next(struct kp_sched *s, uint64_t *r, long *n);

void kp_record(struct kp_sched *s, int p, long n, int fired);

/* Prints one line per point; returns how many points never fired, with
 * their names in `missing`. */
int kp_summary(const struct kp_sched *s, const char *title, char *missing, size_t cap);

#endif /* FLEX_TEST_KILLPOINT_H */
