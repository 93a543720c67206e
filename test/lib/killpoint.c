/*
 * killpoint.c - the code of killpoint.h.
 */
#include "killpoint.h"

const struct kp_point kp_points[] = {
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
    {"fs.apply.between", KP_BOTH, 0},
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
    {"fdb.tidy.rewritten", KP_DB, 0},
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
_Static_assert(sizeof(kp_points) / sizeof(kp_points[0]) == KP_NPOINTS,
	       "KP_NPOINTS is the number of kill points");

void kp_arm(const char *name, long n, const char *report)
{
	char spec[160];
	snprintf(spec, sizeof(spec), "%s:%ld", name, n);
	setenv("FLEX_KILLPOINT", spec, 1);
	setenv("FLEX_KILLPOINT_REPORT", report, 1);
}

int kp_fired(const char *report, char *name, size_t cap, long *n)
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

void kp_sched_init(struct kp_sched *s, int where)
{
	memset(s, 0, sizeof(*s));
	s->where = where;
	for (size_t i = 0; i < KP_NPOINTS; i++)
		if (kp_points[i].where & where)
			s->idx[s->n++] = (int)i;
	s->order = malloc((size_t)s->n * sizeof(int));
	s->pos = s->n;
}

void kp_sched_free(struct kp_sched *s)
{
	free(s->order);
	s->order = NULL;
}

int kp_next(struct kp_sched *s, uint64_t *r, long *n)
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
	/* A point whose reach is known (it fired at max_fired and missed just
	 * past it) is armed within that reach three times in four: one
	 * reached once per process (at creation) was otherwise left to a
	 * coin per try between 1 and 2, and some seeds lost every toss.
	 * Until it has fired at all, one a deeper count missed is armed at
	 * its first hit. */
	if (st->min_missed && st->min_missed <= st->max_fired + 1 && rnd_below(r, 4) != 0)
		*n = st->max_fired ? 1 + (long)rnd_below(r, (uint64_t)st->max_fired) : 1;
	else if (!st->fired && st->min_missed)
		*n = 1;
	s->st[p].cycles++;
	return p;
}

void kp_record(struct kp_sched *s, int p, long n, int fired)
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

int kp_summary(const struct kp_sched *s, const char *title, char *missing, size_t cap)
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
