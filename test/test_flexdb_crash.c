/*
 * test_flexdb_crash.c - FlexDB across crashes: kill -9 of a process in the
 * middle of a workload, simulated power losses through the I/O seam, damaged
 * WAL records and damaged pairs in the FlexSpace, one-record logs, and a
 * range delete over hundreds of intervals cut at every sync and kill point
 * of its commit (present whole or absent, never in part).
 *
 * The property checked after every crash (flexdb_stream.h): the recovered
 * store equals the model after a single prefix of the operation stream,
 * ops 1..k with ack <= k <= last started, and flexdb_check passes.  What
 * counts as acknowledged depends on the crash: after kill -9, every write
 * that returned (it is in its WAL file, which the page cache keeps); after
 * a power loss, what a flexdb_sync that returned 0 covered (with
 * sync_writes, every write that returned).
 *
 * kill -9: a forked child runs a seeded stream (puts with values of mixed
 * sizes, deletes, batches with repeated keys, syncs) with the tiny options,
 * so that a memtable is being committed at almost every moment; it
 * publishes in shared memory the index of each operation it starts and of
 * each one that returned.  The parent kills it after a random delay, or
 * the child arms a kill point (killpoint.h) and dies there; the parent
 * reopens and verifies.  Cycles run on one directory, each recovery
 * starting from the previous one.
 *
 * Power loss: the store runs on the crash-tracking table of crashio.h.  At
 * random fsync/fdatasync calls (WAL, FlexSpace files and directory syncs,
 * from the writer or the committer thread), the files are materialised as
 * they could be after a power loss at that moment (the durable image plus
 * each later write applied, dropped or torn), recovered with the POSIX
 * table and checked.  Unlinks are taken as durable at once (the table does
 * not model directories).
 *
 * Random tests print their seed; FLEX_TEST_SEED=N replays one and
 * FLEX_TEST_SCALE multiplies the cycle and operation counts.
 * FLEXDB_KEEP_IMAGES=1 keeps every power-loss image (<store>.img.<sync>.<n>)
 * for inspection.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/flex_codec.h"
#include "flexdb.h"
#include "lib/crashio.h"
#include "lib/flexdb_model.h"
#include "lib/flexdb_stream.h"
#include "lib/killpoint.h"

TestSuite(flexdb_crash, .timeout = 300, .fini = fdb_tmp_cleanup);

/* Kill-point cycles in make test (FLEX_TEST_SCALE multiplies them). */
#ifndef KILLPOINT_CYCLES
#define KILLPOINT_CYCLES 480
#endif

/* ======================================================================
 * kill -9: after a random delay, or at a named kill point
 * ====================================================================== */

#define KILL_MAXOPS 20000

struct kill_cfg {
	const char *name;
	int sync_writes;
	long cycles;
	/* 0: the parent kills the child after a random delay.  Otherwise the
	 * child arms a kill point (killpoint.h) and runs at most this many
	 * operations, then closes the store and exits by itself. */
	long kp_maxops;
};

/* Written by the child, read by the parent after the kill. */
struct kill_shared {
	_Atomic long started;  /* the operation the child started last */
	_Atomic long returned; /* the last operation that returned 0 */
	_Atomic long synced;   /* the last one acknowledged as durable */
};

/* The child: opens the store and runs the stream.  Exit codes name its
 * own failures: 3 open, 4 an operation, 6 close. */
static void kill_child(const char *dir, const struct flexdb_options *opt,
		       const struct kill_cfg *cfg, const struct keypool *pool, uint64_t sseed,
		       uint8_t *vbuf, struct kill_shared *sh)
{
	alarm(120); /* a hang becomes a SIGALRM death the parent reports */
	struct flexdb *db;
	if (flexdb_open(dir, opt, &db) != 0)
		_exit(3);
	struct flexdb_batch *b = flexdb_batch_new();
	long maxops = cfg->kp_maxops ? cfg->kp_maxops : KILL_MAXOPS;
	for (long i = 1; i <= maxops; i++) {
		atomic_store(&sh->started, i);
		int type;
		if (cop_run_db(db, b, pool, sseed, i, vbuf, &type) != 0)
			_exit(4);
		atomic_store(&sh->returned, i);
		if (type == COP_SYNC || cfg->sync_writes)
			atomic_store(&sh->synced, i);
	}
	flexdb_batch_free(b);
	if (cfg->kp_maxops)
		_exit(flexdb_close(db) == 0 ? 0 : 6);
	if (flexdb_sync(db) != 0)
		_exit(4);
	atomic_store(&sh->synced, maxops);
	for (;;)
		pause();
}

/* Leaves the store at dir closed cleanly with one WAL holding no record
 * (a session killed right after creating its WAL): the state in which
 * open removes WAL files and syncs the directory. */
static void kill_prep_empty_wal(const char *dir, const struct flexdb_options *opt,
				const char *report)
{
	struct flexdb *db;
	int rc = flexdb_open(dir, opt, &db);
	cr_assert_eq(rc, 0, "prep: open: %s", flex_strerror(rc));
	cr_assert_eq(flexdb_close(db), 0, "prep: close");
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		kp_arm("fdb.walnew.dir.sync.after", 1, report);
		if (flexdb_open(dir, opt, &db) == 0)
			_exit(7); /* the point was not reached */
		_exit(3);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	char fired[64];
	long n;
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
		      kp_fired(report, fired, sizeof(fired), &n) == 1,
		  "prep: the session leaving an empty WAL did not die at its kill point (status "
		  "0x%x)",
		  status);
}

/* Leaves the store at dir as a session killed right after its op j
 * returned leaves it: WAL files with records, perhaps a memtable half
 * committed.  Ops 1..j of the stream (pseed) are applied to the model:
 * every one of them returned, so every one must survive. */
static void kill_prep_dirty(const char *dir, const struct flexdb_options *opt,
			    const struct keypool *pool, uint64_t pseed, long j, uint8_t *vbuf,
			    struct fmodel *model)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		alarm(120);
		struct flexdb *db;
		if (flexdb_open(dir, opt, &db) != 0)
			_exit(3);
		struct flexdb_batch *b = flexdb_batch_new();
		for (long i = 1; i <= j; i++) {
			int type;
			if (cop_run_db(db, b, pool, pseed, i, vbuf, &type) != 0)
				_exit(4);
		}
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "prep: the session leaving WAL records failed on its own (status 0x%x)", status);
	for (long i = 1; i <= j; i++)
		cop_run_model(model, pool, pseed, i, vbuf);
}

/*
 * Runs cfg->cycles cycles on one directory, each recovery starting from
 * the previous one.  Every operation that returned 0 before the kill
 * counts as acknowledged: a returned write is in its WAL file, which a
 * killed process does not lose (docs/DURABILITY.md).  The recovered store
 * must be the state after ops 1..k for some k between the last returned
 * op and the last one started, and pass flexdb_check.
 */
static void kill9_run(const struct kill_cfg *cfg)
{
	const char *name = cfg->name;
	uint64_t seed = test_seed(name);
	uint64_t r = seed;
	char dir[256], report[300];
	fdb_tmpdir(dir, sizeof(dir), "kill9");
	snprintf(report, sizeof(report), "%s.killpoint", dir);
	unlink(report);
	struct flexdb_options opt = fdb_tiny_opts();
	opt.sync_writes = cfg->sync_writes;
	struct keypool pool;
	/* Keys enough for a few dozen intervals (one index leaf): these
	 * tests aim at crash recovery, the model tests at the index. */
	pool_make(&pool, 180, 0x6b696c6cu);
	struct fmodel model = {0};
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	uint64_t *dig = malloc((KILL_MAXOPS + 1) * sizeof(*dig));
	size_t *cnt = malloc((KILL_MAXOPS + 1) * sizeof(*cnt));
	struct kill_shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(sh != MAP_FAILED);
	struct kp_sched sched;
	kp_sched_init(&sched, KP_DB);
	long total_ops = 0, total_returned = 0, total_synced = 0, beyond_ack = 0, replayed = 0;
	long early = 0, kills = 0, completed = 0, prep_kills = 0, fresh = 0;
	double t0 = now_sec();
	for (long c = 0; c < cfg->cycles; c++) {
		uint64_t sseed = seed ^ ((uint64_t)(c + 1) * 0xd1b54a32d192ed03ull);
		int p = -1;
		long kn = 0;
		if (cfg->kp_maxops) {
			p = kp_next(&sched, &r, &kn);
			if (kp_points[p].prep == KP_PREP_FRESH) {
				tmp_clear(dir);
				fm_free(&model);
				fresh++;
			} else if (kp_points[p].prep == KP_PREP_EMPTY_WAL) {
				kill_prep_empty_wal(dir, &opt, report);
				prep_kills++;
			} else if (kp_points[p].prep == KP_PREP_DIRTY || rnd_below(&r, 2)) {
				/* Half the cycles open a store with WALs to
				 * replay: kills during replay and during the
				 * commit of the recovered memtable. */
				kill_prep_dirty(dir, &opt, &pool, sseed ^ 0x5eedu,
						1 + (long)rnd_below(&r, 150), vbuf, &model);
				prep_kills++;
			}
		}
		atomic_store(&sh->started, 0);
		atomic_store(&sh->returned, 0);
		atomic_store(&sh->synced, 0);
		fflush(NULL);
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			if (p >= 0)
				kp_arm(kp_points[p].name, kn, report);
			kill_child(dir, &opt, cfg, &pool, sseed, vbuf, sh);
		}
		if (!cfg->kp_maxops) {
			/* Some kills land during open and the first writes,
			 * most in the stream, with commits running all the
			 * time. */
			uint64_t how = rnd_below(&r, 10);
			useconds_t delay = how < 2 ? (useconds_t)rnd_below(&r, 15000)
						   : 15000 + (useconds_t)rnd_below(&r, 300000);
			usleep(delay);
			kill(pid, SIGKILL);
		}
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
		if (p >= 0) {
			char fired[64];
			long fn = 0;
			int f = kp_fired(report, fired, sizeof(fired), &fn);
			int done = WIFEXITED(status) && WEXITSTATUS(status) == 0;
			cr_assert(
			    (killed && f == 1 && !strcmp(fired, kp_points[p].name) && fn == kn) ||
				(done && f == 0),
			    "%s seed %" PRIu64 " cycle %ld, armed %s:%ld: the child %s (status "
			    "0x%x: exit 3 open, 4 an op, 6 close), report %d %s:%ld",
			    name, seed, c, kp_points[p].name, kn, killed ? "was killed" : "ended",
			    status, f, f == 1 ? fired : "", fn);
			kp_record(&sched, p, kn, killed);
			kills += killed;
			completed += done;
		} else {
			cr_assert(killed,
				  "%s seed %" PRIu64
				  " cycle %ld: the child failed on its own (exit %d)",
				  name, seed, c, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
			kills++;
		}
		long hi = atomic_load(&sh->started);
		long ack = atomic_load(&sh->returned);
		if (hi == 0)
			early++;
		stream_digests(&model, &pool, sseed, hi, dig, cnt, vbuf);
		uint64_t d;
		size_t n;
		char msg[512];
		char where[128] = "";
		if (p >= 0)
			snprintf(where, sizeof(where), ", %s %s:%ld",
				 killed ? "killed at" : "armed", kp_points[p].name, kn);
		struct flexdb_stats st;
		struct fmodel loaded = {0};
		int bad = recover_digest(dir, &opt, &d, &n, &loaded, &st, msg, sizeof(msg));
		cr_assert(!bad, "%s seed %" PRIu64 " cycle %ld (returned %ld, started %ld%s): %s",
			  name, seed, c, ack, hi, where, msg);
		long k = match_state(dig, cnt, ack, hi, d, n, msg, sizeof(msg));
		cr_assert(k >= 0, "%s seed %" PRIu64 " cycle %ld (returned %ld, started %ld%s): %s",
			  name, seed, c, ack, hi, where, msg);
		total_ops += hi;
		total_returned += ack;
		total_synced += atomic_load(&sh->synced);
		beyond_ack += k - ack;
		replayed += (long)st.recovered_ops;
		/* The next cycle starts from what was recovered. */
		fm_free(&model);
		model = loaded;
	}
	fprintf(stderr,
		"  %s: %ld cycles in %.1f s: %ld killed, %ld ran to a clean close; %ld states "
		"verified, %ld ops started, %ld returned, %ld synced, %ld unreturned ops survived, "
		"0 acknowledged lost, %ld WAL ops replayed, %ld kills before the first op\n",
		name, cfg->cycles, now_sec() - t0, kills, completed, cfg->cycles, total_ops,
		total_returned, total_synced, beyond_ack, replayed, early);
	if (cfg->kp_maxops) {
		fprintf(stderr,
			"  %s: %ld more kills preparing WAL files to replay, %ld fresh "
			"directories\n",
			name, prep_kills, fresh);
		char missing[1024];
		int never = kp_summary(&sched, name, missing, sizeof(missing));
		cr_assert_eq(never, 0,
			     "%s seed %" PRIu64 ": %d kill points never fired in %ld cycles:%s",
			     name, seed, never, cfg->cycles, missing);
	}
	kp_sched_free(&sched);
	munmap(sh, sizeof(*sh));
	fm_free(&model);
	pool_free(&pool);
	free(vbuf);
	free(dig);
	free(cnt);
	unlink(report);
	tmp_remove(dir);
}

/* Appends the kill-point names found in a file: FLEX_KILLPOINT("...") in
 * source, or the first cell of a docs table row ("| `a.b.before`,
 * `.after` |", where `.after` replaces the last part of the name before
 * it).  Returns -1 when the file cannot be read. */
static int kp_scan(const char *path, int docs, char names[][128], int *n, int max)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		if (!docs) {
			for (char *q = line; (q = strstr(q, "FLEX_KILLPOINT(\"")) != NULL;) {
				q += 16;
				char *e = strchr(q, '"');
				if (e && e - q < 128 && *n < max) {
					memcpy(names[*n], q, (size_t)(e - q));
					names[(*n)++][e - q] = '\0';
				}
			}
			continue;
		}
		if (strncmp(line, "| `", 3) != 0)
			continue;
		char *end = strchr(line + 2, '|');
		if (end)
			*end = '\0';
		char base[64] = "";
		for (char *q = line; (q = strchr(q, '`')) != NULL;) {
			char *e = strchr(q + 1, '`');
			if (!e || e - q - 1 >= 48 || *n >= max)
				break;
			char tok[64];
			memcpy(tok, q + 1, (size_t)(e - q - 1));
			tok[e - q - 1] = '\0';
			if (tok[0] == '.' && base[0]) {
				char *dot = strrchr(base, '.');
				snprintf(names[*n], 128, "%.*s%s", (int)(dot - base), base, tok);
			} else {
				snprintf(names[*n], 128, "%s", tok);
				snprintf(base, sizeof(base), "%s", tok);
			}
			(*n)++;
			q = e + 1;
		}
	}
	fclose(f);
	return 0;
}

static int kp_has(char names[][128], int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return 1;
	return 0;
}

/* The table the kill-point tests iterate over (killpoint.h) is the set of
 * FLEX_KILLPOINT names in the sources and of docs/DURABILITY.md, so a new
 * point is tested and documented, and a removed one is noticed.  Needs the
 * source tree (make test runs from it); skipped elsewhere. */
Test(flexdb_crash, kill_point_table_matches_sources_and_docs)
{
	static const char *const srcs[] = {"common/flex_ident.c",   "flextree/flextree_file.c",
					   "flexspace/flexspace.c", "flexspace/fs_log.c",
					   "flexspace/fs_seg.c",    "flexspace/fs_gc.c",
					   "flexspace/fs_ckpt.c",   "flexdb/fdb_wal.c",
					   "flexdb/flexdb.c",	    "flexdb/fdb_commit.c",
					   "flexdb/fdb_tidy.c"};
	static char src[128][128], doc[128][128];
	int ns = 0, nd = 0;
	for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
		if (kp_scan(srcs[i], 0, src, &ns, 128) != 0) {
			fprintf(stderr,
				"kill_point_table: note: %s not found (not run from the "
				"source tree); skipped\n",
				srcs[i]);
			cr_skip_test("no source tree");
		}
	}
	cr_assert_eq(kp_scan("docs/DURABILITY.md", 1, doc, &nd, 128), 0);
	for (int i = 0; i < ns; i++) {
		cr_expect(kp_has(doc, nd, src[i]), "%s is not in docs/DURABILITY.md", src[i]);
		int in_table = 0;
		for (size_t j = 0; j < KP_NPOINTS; j++)
			in_table |= !strcmp(kp_points[j].name, src[i]);
		cr_expect(in_table, "%s is not in test/lib/killpoint.c", src[i]);
	}
	for (int i = 0; i < nd; i++)
		cr_expect(kp_has(src, ns, doc[i]), "docs/DURABILITY.md lists %s, no source has it",
			  doc[i]);
	for (size_t j = 0; j < KP_NPOINTS; j++)
		cr_expect(kp_has(src, ns, kp_points[j].name),
			  "test/lib/killpoint.c lists %s, no source has it", kp_points[j].name);
	cr_assert_eq((size_t)ns, KP_NPOINTS, "%d points in the sources, %zu in the table", ns,
		     KP_NPOINTS);
}

Test(flexdb_crash, kill9_recovers_a_prefix_with_every_returned_op)
{
	kill9_run(&(struct kill_cfg){"kill9_sync_points", 0, scaled(100), 0});
}

Test(flexdb_crash, kill9_recovers_every_returned_op_with_sync_writes)
{
	kill9_run(&(struct kill_cfg){"kill9_sync_writes", 1, scaled(40), 0});
}

/* Every kill point of the three layers (killpoint.h), each armed at
 * growing hit counts in a child running a short stream on tiny options:
 * commits, FlexSpace collections, tree commits and log resets all happen
 * within a few hundred operations. */
Test(flexdb_crash, kill_points_recover_a_prefix_with_every_returned_op)
{
	kill9_run(&(struct kill_cfg){"kill_points", 0, scaled(KILLPOINT_CYCLES), 300});
}

/* ======================================================================
 * Power loss through the I/O seam
 * ====================================================================== */


struct pl_result {
	long lo, hi, session;
	uint64_t d;
	size_t n;
	int bad;
	long sync_no;
	char msg[256];
};

struct pl_state {
	struct cio cio;
	const char *dir;
	char img[300];
	struct flexdb_options ropt; /* recovery: the POSIX table */
	uint64_t r;
	_Atomic long started, acked;
	long next_crash, session;
	struct pl_result *res;
	size_t nres, rcap;
	long images, changes_in_play;
	pthread_mutex_t mu;
};

static void pl_hook(struct cio *c, void *arg)
{
	struct pl_state *s = arg;
	pthread_mutex_lock(&s->mu);
	if (c->nsyncs < s->next_crash) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	s->next_crash = c->nsyncs + 1 + (long)rnd_below(&s->r, 24);
	for (int how = 0; how < 2; how++) {
		if (s->nres == s->rcap) {
			s->rcap = s->rcap ? s->rcap * 2 : 256;
			s->res = realloc(s->res, s->rcap * sizeof(*s->res));
		}
		struct pl_result *x = &s->res[s->nres++];
		memset(x, 0, sizeof(*x));
		x->session = s->session;
		x->sync_no = c->nsyncs;
		x->lo = atomic_load(&s->acked);
		long nch = 0;
		tmp_remove(s->img);
		int rc = cio_materialise(c, s->dir, s->img, &s->r,
					 how ? CIO_NONE_APPLIED : CIO_RANDOM, &nch);
		x->hi = atomic_load(&s->started);
		s->changes_in_play += nch;
		if (rc) {
			x->bad = 1;
			snprintf(x->msg, sizeof(x->msg), "materialising: %s", strerror(-rc));
			continue;
		}
		if (getenv("FLEXDB_KEEP_IMAGES")) {
			char keep[400], cmd[900];
			snprintf(keep, sizeof(keep), "%s.%ld.%d", s->img, c->nsyncs, how);
			snprintf(cmd, sizeof(cmd), "cp -r %s %s", s->img, keep);
			if (system(cmd) != 0)
				fprintf(stderr, "cp failed\n");
		}
		x->bad = recover_digest(s->img, &s->ropt, &x->d, &x->n, NULL, NULL, x->msg,
					sizeof(x->msg));
		s->images++;
	}
	tmp_remove(s->img);
	pthread_mutex_unlock(&s->mu);
}

static void power_loss_run(const char *name, int sync_writes, uint64_t memtable_size, long sessions,
			   long nops)
{
	uint64_t seed = test_seed(name);
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "power");
	struct pl_state *s = calloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->dir = dir;
	snprintf(s->img, sizeof(s->img), "%s.img", dir);
	fdb_tmp_track(s->img);
	s->r = seed ^ 0x706c;
	s->ropt = fdb_tiny_opts();
	struct keypool pool;
	pool_make(&pool, 180, 0x706f776572u);
	struct fmodel model = {0};
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	uint64_t *dig = malloc((size_t)(nops + 1) * sizeof(*dig));
	size_t *cnt = malloc((size_t)(nops + 1) * sizeof(*cnt));
	struct flexdb_batch *b = flexdb_batch_new();
	double t0 = now_sec();
	long checked = 0, total_syncs = 0;
	long ses = 0;
	for (; ses < sessions && within_budget(t0, ses); ses++) {
		uint64_t sseed = seed ^ ((uint64_t)(ses + 1) * 0xa0761d6478bd642full);
		cio_init(&s->cio);
		s->cio.track = 1;
		s->cio.before_sync = pl_hook;
		s->cio.hook_arg = s;
		s->session = ses;
		s->next_crash = 1 + (long)rnd_below(&s->r, 10);
		atomic_store(&s->started, 0);
		atomic_store(&s->acked, 0);
		size_t first_res = s->nres;
		struct flexdb_options opt = fdb_tiny_opts();
		opt.sync_writes = sync_writes;
		opt.memtable_size = memtable_size;
		opt.space.io = &s->cio.io;
		struct flexdb *db;
		int rc = flexdb_open(dir, &opt, &db);
		cr_assert_eq(rc, 0, "%s: open: %s", name, flex_strerror(rc));
		/* The state at the session's start is durable (clean close). */
		for (long i = 1; i <= nops; i++) {
			atomic_store(&s->started, i);
			int type;
			rc = cop_run_db(db, b, &pool, sseed, i, vbuf, &type);
			cr_assert_eq(rc, 0, "%s seed %" PRIu64 " session %ld op %ld: %s", name,
				     seed, ses, i, flex_strerror(rc));
			if (type == COP_SYNC || sync_writes)
				atomic_store(&s->acked, i);
		}
		rc = flexdb_close(db);
		cr_assert_eq(rc, 0, "%s: close: %s", name, flex_strerror(rc));
		total_syncs += s->cio.nsyncs;
		/* Check the crash images of this session against its states. */
		stream_digests(&model, &pool, sseed, nops, dig, cnt, vbuf);
		for (size_t j = first_res; j < s->nres; j++) {
			struct pl_result *x = &s->res[j];
			char msg[512];
			cr_assert(!x->bad,
				  "%s seed %" PRIu64
				  " session %ld, power loss at sync %ld (acked %ld, "
				  "started %ld): %s",
				  name, seed, ses, x->sync_no, x->lo, x->hi, x->msg);
			long k = match_state(dig, cnt, x->lo, x->hi, x->d, x->n, msg, sizeof(msg));
			cr_assert(k >= 0,
				  "%s seed %" PRIu64
				  " session %ld, power loss at sync %ld (acked %ld, "
				  "started %ld): %s",
				  name, seed, ses, x->sync_no, x->lo, x->hi, msg);
			checked++;
		}
		for (long i = 1; i <= nops; i++)
			cop_run_model(&model, &pool, sseed, i, vbuf);
		cio_destroy(&s->cio);
	}
	/* The final clean state reopens intact. */
	uint64_t d;
	size_t n;
	char msg[512];
	struct flexdb_options ropt = fdb_tiny_opts();
	cr_assert(!recover_digest(dir, &ropt, &d, &n, NULL, NULL, msg, sizeof(msg)), "%s", msg);
	cr_assert(d == model.digest && n == model.n, "%s: the cleanly closed store differs", name);
	fprintf(stderr,
		"  %s: %ld sessions x %ld ops in %.1f s, %ld syncs, %ld crash images recovered and "
		"matched (%ld unsynced changes in play)\n",
		name, ses, nops, now_sec() - t0, total_syncs, checked, s->changes_in_play);
	flexdb_batch_free(b);
	fm_free(&model);
	pool_free(&pool);
	free(vbuf);
	free(dig);
	free(cnt);
	free(s->res);
	pthread_mutex_destroy(&s->mu);
	free(s);
	tmp_remove(dir);
}

/* FLEX_TEST_SCALE multiplies the sessions only: a crash image copies the
 * store, whose WAL grows with a session's operations, so scaling those too
 * made the run quadratic (past the timeout at scale 8).
 *
 * Tiny memtables: a WAL per memtable, handed to the committer after
 * every write or two, so several WAL files are in play at each crash and
 * the committer runs while the images are taken.  (It caught WALs whose
 * records could survive out of order across a memtable switch.) */
Test(flexdb_crash, power_loss_at_random_syncs_recovers_a_prefix)
{
	power_loss_run("power_loss", 0, 64u << 10, scaled(4), 1500);
}

/* One WAL per session (the memtable is committed at close): torn WAL
 * tails and the FlexSpace's own recovery, without WAL switches. */
Test(flexdb_crash, power_loss_with_one_wal_per_session_recovers_a_prefix)
{
	power_loss_run("power_loss_one_wal", 0, 0, scaled(4), 3000);
}

Test(flexdb_crash, power_loss_with_sync_writes_keeps_every_returned_write)
{
	power_loss_run("power_loss_sync_writes", 1, 64u << 10, scaled(3), 600);
}

/* ======================================================================
 * A range delete over hundreds of intervals, cut by crashes
 * ====================================================================== */

/* Keys r000000 .. r005999; the range delete takes [r001000, r005000). */
#define BR_KEYS 6000
#define BR_LO 1000
#define BR_HI 5000

static void br_key(char *k, int i)
{
	snprintf(k, 16, "r%06d", i);
}

/* A store of BR_KEYS keys, closed cleanly: a few hundred intervals. */
static void br_fill(const char *dir)
{
	struct flexdb_options o = fdb_tiny_opts();
	struct flexdb *db;
	tmp_clear(dir);
	cr_assert_eq(flexdb_open(dir, &o, &db), 0);
	char k[16], v[40];
	memset(v, 'v', sizeof(v));
	for (int i = 0; i < BR_KEYS; i++) {
		br_key(k, i);
		cr_assert_eq(flexdb_put(db, k, 7, v, sizeof(v)), 0);
	}
	cr_assert_eq(flexdb_close(db), 0);
}

/* Recovers dir and checks that the range is there whole or gone whole
 * (gone when acked), every other key there, and flexdb_check.  0, or 1
 * with msg. */
static int br_verify(const char *dir, int acked, int *gone, char *msg, size_t cap)
{
	struct flexdb_options o = fdb_tiny_opts();
	struct flexdb *db;
	int rc = flexdb_open(dir, &o, &db);
	if (rc) {
		snprintf(msg, cap, "open: %s", flex_strerror(rc));
		return 1;
	}
	struct flexdb_iter *it;
	long inside = 0, outside = 0, bad = -1;
	rc = flexdb_iter_open(db, &it);
	if (!rc)
		rc = flexdb_iter_seek(it, NULL, 0);
	for (int i = 0; !rc && flexdb_iter_valid(it); i++) {
		size_t kn;
		const char *k = flexdb_iter_key(it, &kn);
		int n = -1;
		if (kn == 7 && k[0] == 'r')
			n = atoi(k + 1);
		if (n < 0)
			bad = i;
		else if (n >= BR_LO && n < BR_HI)
			inside++;
		else
			outside++;
		rc = flexdb_iter_next(it);
	}
	flexdb_iter_close(it);
	int crc = rc ? rc : flexdb_check(db);
	flexdb_close(db);
	*gone = inside == 0;
	if (rc || crc || bad >= 0 || outside != BR_KEYS - (BR_HI - BR_LO) ||
	    (inside && (acked || inside != BR_HI - BR_LO))) {
		snprintf(msg, cap,
			 "%ld keys of the range and %ld others recovered (acknowledged %d), "
			 "iteration %s, check %s",
			 inside, outside, acked, flex_strerror(rc), flex_strerror(crc));
		return 1;
	}
	return 0;
}

struct br_state {
	struct cio cio;
	const char *dir;
	char img[300];
	uint64_t r;
	_Atomic int acked;
	long images, gone;
	char msg[400];
	int bad;
	pthread_mutex_t mu; /* the writer and the committer both sync */
};

static void br_hook(struct cio *c, void *arg)
{
	struct br_state *s = arg;
	pthread_mutex_lock(&s->mu);
	if (s->bad) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	int acked = atomic_load(&s->acked);
	for (int how = 0; how < 2 && !s->bad; how++) {
		long nch;
		tmp_remove(s->img);
		int rc = cio_materialise(c, s->dir, s->img, &s->r,
					 how ? CIO_NONE_APPLIED : CIO_RANDOM, &nch);
		int gone = 0;
		char m[300];
		if (rc)
			snprintf(m, sizeof(m), "materialising: %s", strerror(-rc));
		if (rc || br_verify(s->img, acked, &gone, m, sizeof(m))) {
			s->bad = 1;
			snprintf(s->msg, sizeof(s->msg), "power loss at sync %ld: %s", c->nsyncs, m);
		}
		s->images++;
		s->gone += gone;
	}
	tmp_remove(s->img);
	pthread_mutex_unlock(&s->mu);
}

Test(flexdb_crash, range_delete_is_whole_or_absent_after_power_loss_and_kill9)
{
	char dir[256], report[300], msg[300];
	fdb_tmpdir(dir, sizeof(dir), "bigrange");
	snprintf(report, sizeof(report), "%s.killpoint", dir);
	char lo[16], hi[16];
	br_key(lo, BR_LO);
	br_key(hi, BR_HI);
	/* Power loss at every sync of a session that deletes the range with
	 * sync_writes and closes (committing it): the WAL append, the
	 * memtable switch, the collapse's FlexSpace sync, the WAL removal. */
	br_fill(dir);
	struct br_state *s = calloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->dir = dir;
	s->r = test_seed("range delete power loss");
	snprintf(s->img, sizeof(s->img), "%s.img", dir);
	fdb_tmp_track(s->img);
	cio_init(&s->cio);
	s->cio.track = 1;
	s->cio.before_sync = br_hook;
	s->cio.hook_arg = s;
	struct flexdb_options o = fdb_tiny_opts();
	o.sync_writes = 1;
	o.space.io = &s->cio.io;
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, &o, &db), 0);
	cr_assert_eq(flexdb_delete_range(db, lo, 7, hi, 7), 0);
	atomic_store(&s->acked, 1);
	cr_assert_eq(flexdb_close(db), 0);
	cr_assert(!s->bad, "%s", s->msg);
	cr_assert_gt(s->gone, 0, "no crash image had the range applied");
	cr_assert_lt(s->gone, s->images, "no crash image predates the range delete");
	int gone;
	cr_assert(!br_verify(dir, 1, &gone, msg, sizeof(msg)), "after the clean close: %s", msg);
	fprintf(stderr, "  range delete power loss: %ld crash images, %ld without the range\n",
		s->images, s->gone);
	cio_destroy(&s->cio);
	pthread_mutex_destroy(&s->mu);
	free(s);
	/* kill -9: before the record is acknowledged (all or nothing), after
	 * the collapse and after the FlexSpace sync of the commit. */
	static const struct {
		const char *point;
		int acked;
	} kp[] = {
	    {"fdb.wal.appended", 0},
	    {"fdb.commit.range_applied", 1},
	    {"fdb.commit.space_synced", 1},
	};
	for (size_t i = 0; i < sizeof(kp) / sizeof(kp[0]); i++) {
		br_fill(dir);
		fflush(NULL);
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			alarm(60);
			kp_arm(kp[i].point, 1, report);
			struct flexdb_options co = fdb_tiny_opts();
			if (flexdb_open(dir, &co, &db) != 0)
				_exit(3);
			if (flexdb_delete_range(db, lo, 7, hi, 7) != 0)
				_exit(4);
			flexdb_close(db); /* commits: dies at the point on the way */
			_exit(5);
		}
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		char fired[64];
		long n;
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
			      kp_fired(report, fired, sizeof(fired), &n) == 1 &&
			      !strcmp(fired, kp[i].point),
			  "the child did not die at %s (status 0x%x)", kp[i].point, status);
		cr_assert(!br_verify(dir, kp[i].acked, &gone, msg, sizeof(msg)),
			  "killed at %s: %s", kp[i].point, msg);
		/* Once more: the recovered store reopens the same. */
		cr_assert(!br_verify(dir, gone, &gone, msg, sizeof(msg)),
			  "reopened after the kill at %s: %s", kp[i].point, msg);
	}
	unlink(report);
	tmp_remove(dir);
}

/* ======================================================================
 * Damaged WAL records, damaged pairs, one-record logs
 * ====================================================================== */

/* Runs fn in a child that leaves without closing the store (its WAL stays
 * for the next open to replay); fails the test if the child failed. */
static void in_child(void (*fn)(const char *dir, void *arg), const char *dir, void *arg,
		     int self_kill)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		fn(dir, arg);
		if (self_kill)
			kill(getpid(), SIGKILL);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (self_kill)
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child failed");
	else
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%d)",
			  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

struct nkeys {
	int n;
	int sync_writes;
	int empty;
	int unsynced; /* the last this many puts come after the sync */
};

static void kv_name(char *k, char *v, int i)
{
	snprintf(k, 32, "wal-key-%03d", i);
	snprintf(v, 64, "wal-value-%03d-%s", i, "0123456789abcdefghijklmnopqrstuvwxyz");
}

static void child_put_n(const char *dir, void *arg)
{
	struct nkeys *a = arg;
	struct flexdb_options o = fdb_default_opts();
	o.sync_writes = a->sync_writes;
	struct flexdb *db;
	if (flexdb_open(dir, &o, &db))
		_exit(2);
	for (int i = 0; i < a->n; i++) {
		char k[32], v[64];
		kv_name(k, v, i);
		if (i == a->n - a->unsynced && !a->sync_writes && flexdb_sync(db))
			_exit(4);
		if (flexdb_put(db, k, strlen(k), v, a->empty ? 0 : strlen(v)))
			_exit(3);
	}
	if (!a->unsynced && !a->sync_writes && flexdb_sync(db))
		_exit(4);
}

/* The WAL file a crashed store left (the newest non-empty one). */
static void find_wal(const char *dir, char *out, size_t cap)
{
	DIR *d = opendir(dir);
	cr_assert(d);
	struct dirent *e;
	char best[300] = "";
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "WAL-", 4) || strlen(e->d_name) != 20)
			continue;
		char p[512];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (stat(p, &st) == 0 && st.st_size > 32 && strcmp(e->d_name, best) > 0)
			snprintf(best, sizeof(best), "%s", e->d_name);
	}
	closedir(d);
	cr_assert(best[0], "no WAL file with records in %s", dir);
	snprintf(out, cap, "%s/%s", dir, best);
}

/* Record offsets and payload lengths of a WAL (docs/FORMAT.md: a header,
 * then from byte 8192 (32 in format 1) records of u32 magic, u32 length,
 * u64 seq, u64 checksum, payload). */
static int wal_records(const char *path, uint64_t *off, uint32_t *len, int max)
{
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	struct stat st;
	fstat(fd, &st);
	uint8_t fb[4];
	cr_assert_eq(pread(fd, fb, 4, 8), 4);
	uint64_t o = flex_get_le32(fb) == 1 ? 32 : 8192;
	int n = 0;
	while (n < max && o + 24 <= (uint64_t)st.st_size) {
		uint8_t h[24];
		cr_assert_eq(pread(fd, h, 24, (off_t)o), 24);
		uint32_t magic = flex_get_le32(h), l = flex_get_le32(h + 4);
		if (magic != 0x31525746u)
			break;
		off[n] = o;
		len[n] = l;
		n++;
		o += 24 + l;
	}
	close(fd);
	return n;
}

static void flip_byte(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	cr_assert(fd >= 0);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x5a;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* Reopens and checks keys [0, n): each either absent or right; the ones
 * below `must` present; the ones from `gone` on absent.  Returns the
 * number present. */
static int check_wal_keys(struct flexdb *db, int n, int must, int gone, int empty)
{
	int present = 0;
	for (int i = 0; i < n; i++) {
		char k[32], v[64], buf[128];
		kv_name(k, v, i);
		size_t vn = 0;
		int rc = flexdb_get(db, k, strlen(k), buf, sizeof(buf), &vn);
		size_t want = empty ? 0 : strlen(v);
		if (rc == 0) {
			cr_assert(vn == want && !memcmp(buf, v, vn),
				  "key %d returned with a wrong value (%zu bytes)", i, vn);
			cr_assert(i < gone,
				  "key %d, written after the damaged record, was replayed", i);
			present++;
		} else {
			cr_assert_eq(rc, FLEXDB_NOTFOUND, "key %d: %s", i, flex_strerror(rc));
			cr_assert(i >= must, "key %d, before the damaged record, was lost", i);
		}
	}
	return present;
}

/* Writers on several threads at once, killed: their writes are written in
 * groups (one WAL write for the batches queued behind the first writer).
 * After each kill -9 every write that returned is there, and what each
 * thread wrote is there up to a point and absent after it (a thread's
 * writes reach the WAL in its order).  A fresh store each time. */
#define GW_THREADS 4
#define GW_MAX 200000
struct gw_shared {
	_Atomic long acked[GW_THREADS]; /* last index whose put returned, -1: none */
};

struct gw_thread {
	struct flexdb *db;
	struct gw_shared *sh;
	int t;
};

static void *gw_main(void *arg)
{
	struct gw_thread *g = arg;
	char k[32], v[64];
	for (long i = 0; i < GW_MAX; i++) {
		int kl = snprintf(k, sizeof(k), "g%d-%07ld", g->t, i);
		int vl = snprintf(v, sizeof(v), "v%ld-%0*d", i, (int)(i % 40), 0);
		if (flexdb_put(g->db, k, (size_t)kl, v, (size_t)vl) != 0)
			_exit(3); /* a put failed */
		atomic_store(&g->sh->acked[g->t], i);
	}
	return NULL;
}

Test(flexdb_crash, kill9_with_concurrent_writers_keeps_each_threads_returned_prefix)
{
	uint64_t seed = test_seed("kill9_concurrent_writers"), r = seed;
	struct gw_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(sh != MAP_FAILED);
	char dir[256];
	struct flexdb_options opt = {0};
	opt.memtable_size = 256 << 10; /* memtable switches during the run */
	opt.space = tiny_options();
	long returned = 0, found_beyond = 0;
	int cycles = (int)scaled(6);
	for (int c = 0; c < cycles; c++) {
		fdb_tmpdir(dir, sizeof(dir), "gwkill");
		for (int t = 0; t < GW_THREADS; t++)
			atomic_store(&sh->acked[t], -1);
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			struct flexdb *db;
			if (flexdb_open(dir, &opt, &db) != 0)
				_exit(2);
			pthread_t th[GW_THREADS];
			struct gw_thread g[GW_THREADS];
			for (int t = 0; t < GW_THREADS; t++) {
				g[t] = (struct gw_thread){db, sh, t};
				pthread_create(&th[t], NULL, gw_main, &g[t]);
			}
			for (int t = 0; t < GW_THREADS; t++)
				pthread_join(th[t], NULL);
			_exit(0);
		}
		/* The writers must still be making progress when killed: a
		 * writer left waiting in the queue would stop them all. */
		usleep((useconds_t)(100000 + rnd_below(&r, 250000)));
		long before = 0, after = 0;
		for (int t = 0; t < GW_THREADS; t++)
			before += atomic_load(&sh->acked[t]);
		for (int wait = 0; wait < 200 && after <= before; wait++) {
			usleep(10000);
			after = 0;
			for (int t = 0; t < GW_THREADS; t++)
				after += atomic_load(&sh->acked[t]);
		}
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		cr_assert(WIFSIGNALED(st), "the writers' process ended before the kill: %s %d",
			  WIFEXITED(st) ? "exit status" : "status",
			  WIFEXITED(st) ? WEXITSTATUS(st) : st);
		cr_assert(after > before,
			  "seed %" PRIu64 " cycle %d: no put returned in 2 s (%ld acknowledged)",
			  seed, c, before + GW_THREADS);
		struct flexdb *db;
		int rc = flexdb_open(dir, &opt, &db);
		cr_assert_eq(rc, 0, "seed %" PRIu64 " cycle %d: open: %s", seed, c,
			     flex_strerror(rc));
		char k[32], buf[64], v[64];
		for (int t = 0; t < GW_THREADS; t++) {
			long ack = atomic_load(&sh->acked[t]);
			/* Present up to a point, absent after, every returned
			 * one present. */
			long i = 0;
			for (;; i++) {
				int kl = snprintf(k, sizeof(k), "g%d-%07ld", t, i);
				size_t vn = 0;
				rc = flexdb_get(db, k, (size_t)kl, buf, sizeof(buf), &vn);
				if (rc == FLEXDB_NOTFOUND)
					break;
				cr_assert_eq(rc, 0, "seed %" PRIu64 " %s: %s", seed, k,
					     flex_strerror(rc));
				int vl = snprintf(v, sizeof(v), "v%ld-%0*d", i, (int)(i % 40), 0);
				cr_assert(vn == (size_t)vl && !memcmp(buf, v, vn),
					  "seed %" PRIu64 " %s: wrong value", seed, k);
			}
			long end = i;
			cr_assert(end > ack, "seed %" PRIu64 " cycle %d thread %d: put %ld returned "
				  "but only %ld keys are there", seed, c, t, ack, end);
			for (long j = end; j < end + 64; j++) {
				int kl = snprintf(k, sizeof(k), "g%d-%07ld", t, j);
				cr_assert_eq(flexdb_get(db, k, (size_t)kl, buf, sizeof(buf), NULL),
					     FLEXDB_NOTFOUND,
					     "seed %" PRIu64 " cycle %d thread %d: %s after a gap",
					     seed, c, t, k);
			}
			returned += ack + 1;
			found_beyond += end - 1 - ack;
		}
		cr_assert_eq(flexdb_check(db), 0);
		cr_assert_eq(flexdb_close(db), 0);
		tmp_remove(dir);
	}
	fprintf(stderr,
		"  kill9_concurrent_writers: %d kills, %ld puts returned, %ld more survived, 0 "
		"returned lost\n",
		cycles, returned, found_beyond);
	munmap(sh, sizeof(*sh));
}

Test(flexdb_crash, one_wal_record_is_replayed)
{
	/* A put, a sync, and death without close: one record in one WAL. */
	struct {
		const char *what;
		struct nkeys a;
		int self_kill;
	} cases[] = {
	    {"put + sync, _exit", {1, 0, 0, 0}, 0},
	    {"put + sync, SIGKILL", {1, 0, 0, 0}, 1},
	    {"sync_writes put, _exit", {1, 1, 0, 0}, 0},
	    {"empty value + sync, SIGKILL", {1, 0, 1, 0}, 1},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char dir[256];
		fdb_tmpdir(dir, sizeof(dir), "onerec");
		in_child(child_put_n, dir, &cases[c].a, cases[c].self_kill);
		struct flexdb *db;
		int rc = flexdb_open(dir, NULL, &db);
		cr_assert_eq(rc, 0, "%s: reopen: %s", cases[c].what, flex_strerror(rc));
		struct flexdb_stats st;
		flexdb_stats(db, &st);
		cr_expect_eq(st.recovered_ops, 1, "%s: %" PRIu64 " ops replayed", cases[c].what,
			     st.recovered_ops);
		cr_expect_eq(check_wal_keys(db, 1, 1, 1, cases[c].a.empty), 1, "%s", cases[c].what);
		cr_assert_eq(flexdb_check(db), 0);
		cr_assert_eq(flexdb_close(db), 0);
		/* Recovery committed it: a second reopen replays nothing. */
		cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
		flexdb_stats(db, &st);
		cr_expect_eq(st.recovered_ops, 0);
		check_wal_keys(db, 1, 1, 1, cases[c].a.empty);
		cr_assert_eq(flexdb_close(db), 0);
		tmp_remove(dir);
	}
}

/* A long WAL of overwrites, deletes, empty values and batches that touch
 * a key more than once, replayed in key order a batch at a time: it must
 * give exactly what the same operations applied in order give. */
struct replay_stream {
	uint64_t seed;
	int ops;
};

/* Applies the stream to db (when not NULL) and to m; returns ops logged. */
static long replay_stream_run(const struct replay_stream *a, struct flexdb *db, struct fmodel *m)
{
	uint64_t r = a->seed;
	long logged = 0;
	struct flexdb_batch *b = flexdb_batch_new();
	char k[32];
	uint8_t v[200];
	for (int i = 0; i < a->ops;) {
		int nb = rnd_below(&r, 8) == 0 ? 2 + (int)rnd_below(&r, 7) : 1;
		flexdb_batch_clear(b);
		for (int j = 0; j < nb; j++, i++) {
			/* Few keys, so that a key has many versions. */
			int key = (int)rnd_below(&r, 3000);
			snprintf(k, sizeof(k), "replay-%05d", key);
			uint32_t kn = (uint32_t)strlen(k);
			if (rnd_below(&r, 5) == 0) {
				if (nb > 1 ? flexdb_batch_delete(b, k, kn) : db && flexdb_delete(db, k, kn))
					return -1;
				fm_del(m, k, kn);
			} else {
				uint32_t vn = rnd_below(&r, 10) == 0 ? 0 : (uint32_t)rnd_below(&r, 200);
				val_fill(rnd(&r), v, vn);
				if (nb > 1 ? flexdb_batch_put(b, k, kn, v, vn)
					   : db && flexdb_put(db, k, kn, v, vn))
					return -1;
				fm_put(m, k, kn, v, vn);
			}
			logged++;
		}
		if (nb > 1 && db && flexdb_write(db, b))
			return -1;
	}
	flexdb_batch_free(b);
	return logged;
}

static void child_replay_stream(const char *dir, void *arg)
{
	struct flexdb_options o = fdb_default_opts();
	o.memtable_size = (uint64_t)256 << 20; /* nothing reaches the FlexSpace */
	struct flexdb *db;
	struct fmodel m = {0};
	if (flexdb_open(dir, &o, &db))
		_exit(2);
	if (replay_stream_run(arg, db, &m) < 0 || flexdb_sync(db))
		_exit(3);
}

Test(flexdb_crash, long_wal_replays_every_version_in_order)
{
	/* About 20 MB of WAL: more than one of the replay's sorted batches. */
	struct replay_stream a = {.seed = test_seed("long_wal_replay"), .ops = 150000};
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "replay");
	in_child(child_replay_stream, dir, &a, 1);
	struct fmodel m = {0};
	long logged = replay_stream_run(&a, NULL, &m);
	struct flexdb *db;
	int rc = flexdb_open(dir, NULL, &db);
	cr_assert_eq(rc, 0, "reopen: %s", flex_strerror(rc));
	struct flexdb_stats st;
	flexdb_stats(db, &st);
	cr_expect_eq(st.recovered_ops, (uint64_t)logged, "%" PRIu64 " of %ld ops replayed",
		     st.recovered_ops, logged);
	for (int pass = 0; pass < 2; pass++) {
		/* From the memtable, then from the FlexSpace after a close. */
		uint64_t d;
		size_t n;
		struct why w = {0};
		cr_assert_eq(store_digest(db, &d, &n, NULL, &w), 0, "%s", w.msg);
		cr_expect_eq(n, m.n, "pass %d: %zu pairs, model %zu", pass, n, m.n);
		cr_expect_eq(d, m.digest, "pass %d: pairs differ from the model", pass);
		uint8_t v[256];
		for (size_t i = 0; i < m.n; i++) {
			size_t vn;
			rc = flexdb_get(db, m.e[i].k, m.e[i].kn, v, sizeof(v), &vn);
			cr_assert_eq(rc, 0, "pass %d: get: %s", pass, flex_strerror(rc));
			cr_assert(vn == m.e[i].vn && !memcmp(v, m.e[i].v, vn), "pass %d: value", pass);
		}
		cr_assert_eq(flexdb_check(db), 0);
		cr_assert_eq(flexdb_close(db), 0);
		cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	}
	cr_assert_eq(flexdb_close(db), 0);
	fm_free(&m);
	tmp_remove(dir);
}

static void child_delete_one(const char *dir, void *arg)
{
	(void)arg;
	struct flexdb *db;
	if (flexdb_open(dir, NULL, &db))
		_exit(2);
	if (flexdb_delete(db, "wal-key-000", 11) || flexdb_sync(db))
		_exit(3);
}

Test(flexdb_crash, one_wal_delete_over_a_committed_key_is_replayed)
{
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "onedel");
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	cr_assert_eq(flexdb_put(db, "wal-key-000", 11, "x", 1), 0);
	cr_assert_eq(flexdb_put(db, "wal-key-001", 11, "y", 1), 0);
	cr_assert_eq(flexdb_close(db), 0);
	in_child(child_delete_one, dir, NULL, 1);
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	cr_expect_eq(flexdb_get(db, "wal-key-000", 11, NULL, 0, NULL), FLEXDB_NOTFOUND,
		     "a synced delete was lost");
	cr_expect_eq(flexdb_get(db, "wal-key-001", 11, NULL, 0, NULL), 0);
	cr_assert_eq(flexdb_check(db), 0);
	cr_assert_eq(flexdb_close(db), 0);
	tmp_remove(dir);
}

/* The last record was written after the last sync: damage there is a
 * torn tail, which replay drops (and cuts off). */
Test(flexdb_crash, damaged_last_wal_record_is_a_torn_tail)
{
	struct nkeys a = {10, 0, 0, 1};
	for (int variant = 0; variant < 3; variant++) {
		char dir[256], wal[512];
		fdb_tmpdir(dir, sizeof(dir), "waltail");
		in_child(child_put_n, dir, &a, variant == 2);
		find_wal(dir, wal, sizeof(wal));
		uint64_t off[16];
		uint32_t len[16];
		int n = wal_records(wal, off, len, 16);
		cr_assert_eq(n, 10, "expected 10 WAL records, found %d", n);
		if (variant == 0) /* a flipped byte in the last value */
			flip_byte(wal, off[9] + 24 + len[9] - 3);
		else if (variant == 1) /* a flipped byte in its header (the seq) */
			flip_byte(wal, off[9] + 9);
		else /* torn: the file ends inside the record */
			cr_assert_eq(truncate(wal, (off_t)(off[9] + 24 + len[9] / 2)), 0);
		struct flexdb *db;
		int rc = flexdb_open(dir, NULL, &db);
		cr_assert_eq(rc, 0, "variant %d: reopen: %s", variant, flex_strerror(rc));
		cr_expect_eq(check_wal_keys(db, 10, 9, 9, 0), 9, "variant %d", variant);
		cr_assert_eq(flexdb_check(db), 0);
		/* The store keeps working and the next session is sound. */
		cr_assert_eq(flexdb_put(db, "after", 5, "ok", 2), 0);
		cr_assert_eq(flexdb_close(db), 0);
		cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
		check_wal_keys(db, 10, 9, 9, 0);
		cr_expect_eq(flexdb_get(db, "after", 5, NULL, 0, NULL), 0);
		cr_assert_eq(flexdb_close(db), 0);
		tmp_remove(dir);
	}
}

/* Records 2..9 were never synced: damage in record 4 ends the replay
 * there, and record 4 is never returned with wrong data. */
Test(flexdb_crash, damaged_unsynced_wal_record_ends_the_replay)
{
	struct nkeys a = {10, 0, 0, 8};
	for (int variant = 0; variant < 2; variant++) {
		char dir[256], wal[512];
		fdb_tmpdir(dir, sizeof(dir), "walmid");
		in_child(child_put_n, dir, &a, 0);
		find_wal(dir, wal, sizeof(wal));
		uint64_t off[16];
		uint32_t len[16];
		int n = wal_records(wal, off, len, 16);
		cr_assert_eq(n, 10);
		/* Record 4: its value, or its checksum field. */
		flip_byte(wal, variant ? off[4] + 17 : off[4] + 24 + len[4] - 5);
		struct flexdb *db;
		int rc = flexdb_open(dir, NULL, &db);
		cr_assert_eq(rc, 0, "reopen: %s", flex_strerror(rc));
		/* 0..3 intact, 4 never with wrong data; replay stops there. */
		cr_expect_eq(check_wal_keys(db, 10, 4, 4, 0), 4);
		cr_assert_eq(flexdb_check(db), 0);
		cr_assert_eq(flexdb_close(db), 0);
		tmp_remove(dir);
	}
}

/* A damaged record that was synced -- the last one or one in the middle,
 * its value, its header or the file cut inside it -- looks like a torn
 * tail, but the WAL's sync mark says it was durable: open reports the
 * damage instead of dropping acknowledged writes (the corruption sweep
 * found every such flip silently ignored). */
Test(flexdb_crash, damaged_synced_wal_record_is_reported)
{
	for (int sw = 0; sw < 2; sw++) {
		struct nkeys a = {10, sw, 0, 0};
		for (int variant = 0; variant < 5; variant++) {
			char dir[256], wal[512];
			fdb_tmpdir(dir, sizeof(dir), "walsynced");
			in_child(child_put_n, dir, &a, variant == 2);
			find_wal(dir, wal, sizeof(wal));
			uint64_t off[16];
			uint32_t len[16];
			cr_assert_eq(wal_records(wal, off, len, 16), 10);
			int r = variant < 3 ? 9 : 4;
			if (variant == 0 || variant == 3)
				flip_byte(wal, off[r] + 24 + len[r] - 3);
			else if (variant == 1 || variant == 4)
				flip_byte(wal, off[r] + 9);
			else
				cr_assert_eq(truncate(wal, (off_t)(off[r] + 24 + len[r] / 2)), 0);
			struct stat before, after;
			cr_assert_eq(stat(wal, &before), 0);
			struct flexdb *db;
			int rc = flexdb_open(dir, NULL, &db);
			cr_expect_eq(rc, FLEX_ECORRUPT, "sync_writes %d, variant %d: open: %s", sw,
				     variant, flex_strerror(rc));
			if (rc == 0)
				flexdb_close(db);
			/* A refused open leaves the evidence: nothing is cut off. */
			cr_assert_eq(stat(wal, &after), 0);
			cr_expect_eq(after.st_size, before.st_size,
				     "variant %d: the refused open cut the WAL", variant);
			tmp_remove(dir);
		}
	}
}

/* Finds every occurrence of pat in the file; returns how many (offsets in
 * out). */
static int file_find(const char *path, const void *pat, size_t pn, uint64_t *out, int max)
{
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0, "open %s", path);
	struct stat st;
	fstat(fd, &st);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	int n = 0;
	for (off_t i = 0; i + (off_t)pn <= st.st_size && n < max; i++)
		if (b[i] == ((const uint8_t *)pat)[0] && !memcmp(b + i, pat, pn))
			out[n++] = (uint64_t)i;
	free(b);
	return n;
}

Test(flexdb_crash, damaged_pair_in_the_flexspace_is_reported_never_returned)
{
	char dir[256], data[512];
	fdb_tmpdir(dir, sizeof(dir), "dmgpair");
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	char k[32], v[128];
	for (int i = 0; i < 400; i++) {
		snprintf(k, sizeof(k), "pair-%04d", i);
		snprintf(v, sizeof(v), "VALUE-%04d-%s", i,
			 "the quick brown fox jumps over the lazy dog, twice over");
		cr_assert_eq(flexdb_put(db, k, strlen(k), v, strlen(v)), 0);
	}
	cr_assert_eq(flexdb_close(db), 0);
	snprintf(data, sizeof(data), "%s/space/DATA", dir);
	/* Pair 203 is inside its interval (intervals start at every eighth
	 * pair here): a damaged first pair is reported at open instead. */
	uint64_t at[8];
	int n = file_find(data, "VALUE-0203-", 11, at, 8);
	cr_assert_gt(n, 0, "the value is not in space/DATA");
	for (int i = 0; i < n; i++)
		flip_byte(data, at[i] + 20);
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	char buf[128];
	size_t vn;
	int rc = flexdb_get(db, "pair-0203", 9, buf, sizeof(buf), &vn);
	cr_expect_eq(rc, FLEX_ECORRUPT, "get of the damaged pair: rc %d (%s)", rc,
		     flex_strerror(rc));
	rc = flexdb_check(db);
	cr_expect_eq(rc, FLEX_ECORRUPT, "flexdb_check: rc %d (%s)", rc, flex_strerror(rc));
	/* Iteration over it fails or skips it, never returns wrong bytes. */
	struct flexdb_iter *it;
	cr_assert_eq(flexdb_iter_open(db, &it), 0);
	rc = flexdb_iter_seek(it, "pair-0190", 9);
	int seen = 0;
	while (!rc && flexdb_iter_valid(it) && seen < 50) {
		size_t kn, ivn;
		const char *ik = flexdb_iter_key(it, &kn);
		const char *iv = flexdb_iter_value(it, &ivn);
		char ek[32], ev[128];
		memcpy(ek, ik, kn);
		ek[kn] = 0;
		int idx = atoi(ek + 5);
		snprintf(ev, sizeof(ev), "VALUE-%04d-%s", idx,
			 "the quick brown fox jumps over the lazy dog, twice over");
		cr_expect(ivn == strlen(ev) && !memcmp(iv, ev, ivn),
			  "the iterator returned wrong data for %s", ek);
		seen++;
		rc = flexdb_iter_next(it);
	}
	cr_expect(rc < 0, "iterating over the damaged pair did not report an error");
	flexdb_iter_close(it);
	/* Pairs elsewhere still read. */
	rc = flexdb_get(db, "pair-0000", 9, buf, sizeof(buf), &vn);
	cr_expect_eq(rc, 0, "an undamaged pair far away: %s", flex_strerror(rc));
	cr_assert_eq(flexdb_close(db), 0);
	tmp_remove(dir);
}

/* A store of n pairs "r-%04d" (keys 0, step, 2 * step, ...) with values
 * of vlen bytes, closed. */
static void db_simple(const char *dir, int n, uint32_t vlen, int step)
{
	struct flexdb *db;
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	uint8_t *v = malloc(vlen + 1);
	for (int i = 0; i < n; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "r-%04d", i * step);
		memset(v, 'a' + i % 26, vlen);
		cr_assert_eq(flexdb_put(db, k, (size_t)kl, v, vlen), 0);
	}
	free(v);
	cr_assert_eq(flexdb_close(db), 0);
}

/* Flips one bit of the last byte of key k where it is stored in
 * space/DATA (bit 6: "r-0012" becomes "r-001r", past its neighbours; bit
 * 0 of an even digit: the key grows by one). */
static void flip_key(const char *dir, const char *k, int bit)
{
	char data[512];
	snprintf(data, sizeof(data), "%s/space/DATA", dir);
	uint64_t at[2];
	cr_assert_eq(file_find(data, k, strlen(k), at, 2), 1, "%s is not in DATA once", k);
	int fd = open(data, O_RDWR);
	cr_assert(fd >= 0);
	uint8_t b;
	off_t o = (off_t)(at[0] + strlen(k) - 1);
	cr_assert_eq(pread(fd, &b, 1, o), 1);
	b ^= (uint8_t)(1u << bit);
	cr_assert_eq(pwrite(fd, &b, 1, o), 1);
	close(fd);
}

static int anchor_fn(void *arg, const struct flextree_extent *e)
{
	if (e->tag == 1 && e->loff > 0) {
		*(uint64_t *)arg = e->loff;
		return 1;
	}
	return 0;
}

/* The number in the key of the pair that starts the second interval,
 * from the FlexSpace's tags (docs/FORMAT.md). */
static int first_anchor(const char *dir)
{
	char sp[512];
	snprintf(sp, sizeof(sp), "%s/space", dir);
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(sp, NULL, &fs), 0);
	uint64_t off = 0;
	flexspace_scan(fs, 0, UINT64_MAX, anchor_fn, &off);
	cr_assert_gt(off, 0, "no second interval");
	uint8_t b[16] = {0};
	cr_assert_eq(flexspace_read(fs, b, off, 15), 15);
	flexspace_close(fs);
	size_t h = 2; /* klen (6), then a varint value length */
	while (b[h - 1] & 0x80)
		h++;
	cr_assert_eq(b[0], 6);
	return atoi((const char *)b + h + 2);
}

/* Removes the INDEX a clean close left: the next open reads the anchors. */
static void drop_index(const char *dir)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/INDEX", dir);
	cr_assert_eq(unlink(p), 0, "%s: %s", p, strerror(errno));
}

static void copy_store(const char *from, const char *to)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
	cr_assert_eq(system(cmd), 0);
}

/* A damaged key inside an interval made a lookup of a later key in it
 * report "absent": the walk over the raw interval checked only the
 * matching pair's checksum, and stopped at the first larger key. */
Test(flexdb_crash, damaged_pair_never_hides_the_next_key)
{
	char dir[256], work[256];
	fdb_tmpdir(dir, sizeof(dir), "hide");
	fdb_tmpdir(work, sizeof(work), "hide_w");
	db_simple(dir, 100, 20, 1);
	int anchor = first_anchor(dir);
	for (int i = anchor + 1; i < anchor + 4; i++) {
		/* Opened from the anchors, a get loads the whole interval and
		 * meets the damage; from INDEX, through a thin entry, it reads
		 * only the pair it wants, and finds it. */
		for (int from_index = 0; from_index < 2; from_index++) {
			copy_store(dir, work);
			if (!from_index)
				drop_index(work);
			char k[16], next[16];
			snprintf(k, sizeof(k), "r-%04d", i);
			snprintf(next, sizeof(next), "r-%04d", i + 1);
			flip_key(work, k, 6);
			struct flexdb *db;
			cr_assert_eq(flexdb_open(work, NULL, &db), 0);
			uint8_t val[64];
			size_t vlen = 0;
			int rc = flexdb_get(db, next, strlen(next), val, sizeof(val), &vlen);
			if (from_index)
				cr_expect(rc == FLEX_ECORRUPT || (rc == 0 && vlen == 20),
					  "get %s after damage to %s, from INDEX: %d", next, k, rc);
			else
				cr_expect_eq(rc, FLEX_ECORRUPT, "get %s after damage to %s: %d", next,
					     k, rc);
			cr_expect_eq(flexdb_check(db), FLEX_ECORRUPT);
			flexdb_close(db);
		}
	}
	tmp_remove(dir);
	tmp_remove(work);
}

/* A scan reads whole intervals but verifies only the pairs it uses: those
 * it returns, and those whose keys decide where it starts and stops or
 * are compared with the memtables'.  One damaged pair in a store larger
 * than the cache (keys ten apart), then a memtable over it, and seeks of
 * random lengths both ways, some within bounds, after a full scan has
 * filled the cache: every pair returned is exact and in order, or a step
 * reports an error; no pair is skipped.  The damage: bit 0 of the key's
 * last digit ("r-0120" becomes "r-0121", still in order), bit 3 of its
 * thousands digit (past the keys of the next intervals), or any bit of
 * the record.  The memtable: the neighbours rewritten as they were, the
 * gap after the victim deleted, the victim itself rewritten, or 70 new
 * keys just past the next pair (a full chunk whose bound lies below the
 * damaged key). */
#define SCAN_DMG_PAIRS 1000
#define SCAN_DMG_STEP 10
#define SCAN_DMG_VLEN 2500u
#define SCAN_DMG_NEW 70

struct sd_pair {
	char k[16];
	int kl;
	uint8_t ch;  /* every byte of the value */
	uint32_t vl;
};

static int sd_cmp(const void *a, const void *b)
{
	const struct sd_pair *x = a, *y = b;
	int c = memcmp(x->k, y->k, (size_t)(x->kl < y->kl ? x->kl : y->kl));
	return c ? c : x->kl - y->kl;
}

/* The first pair >= k in m (n pairs, sorted). */
static int sd_lower(const struct sd_pair *m, int n, const char *k, int kl)
{
	struct sd_pair x;
	memcpy(x.k, k, (size_t)kl);
	x.kl = kl;
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (sd_cmp(&m[mid], &x) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Positioned at m[want] (or past m[lo, hi): not valid), steps times: 1
 * when every pair was exact, 0 when a step reported an error. */
static int sd_check(struct flexdb_iter *it, int rc, const struct sd_pair *m, int want, int rev,
		    int lo, int hi, int steps, const char *what)
{
	for (int st = 0; st < steps && !rc; st++, want += rev ? -1 : 1) {
		int exp = want >= lo && want < hi;
		cr_assert_eq(flexdb_iter_valid(it), exp, "%s: step %d: valid %d, want pair %d",
			     what, st, flexdb_iter_valid(it), want);
		if (!exp)
			return 1;
		const struct sd_pair *e = &m[want];
		size_t kn, vn;
		const uint8_t *ik = flexdb_iter_key(it, &kn);
		const uint8_t *iv = flexdb_iter_value(it, &vn);
		cr_assert(kn == (size_t)e->kl && !memcmp(ik, e->k, kn), "%s: step %d: not %.*s", what,
			  st, e->kl, e->k);
		int bad = vn != e->vl;
		for (size_t j = 0; j < vn && !bad; j++)
			bad = iv[j] != e->ch;
		cr_assert(!bad, "%s: step %d: a wrong value for %.*s", what, st, e->kl, e->k);
		rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
	}
	cr_assert(rc <= 0, "%s: status %d", what, rc);
	return rc == 0;
}

static void sd_key(struct sd_pair *e, int num, const char *suffix)
{
	e->kl = snprintf(e->k, sizeof(e->k), "r-%04d%s", num, suffix);
}

Test(flexdb_crash, damaged_pair_never_changes_what_a_scan_returns, .timeout = 300)
{
	char dir[256], work[256], data[512];
	fdb_tmpdir(dir, sizeof(dir), "scandmg");
	fdb_tmpdir(work, sizeof(work), "scandmg_w");
	db_simple(dir, SCAN_DMG_PAIRS, SCAN_DMG_VLEN, SCAN_DMG_STEP);
	uint64_t seed = test_seed("damaged_pair_never_changes_what_a_scan_returns"), r = seed;
	struct flexdb_options o = {0};
	o.cache_size = 1u << 20; /* the smallest: the store is twice that */
	uint8_t *v = malloc(SCAN_DMG_VLEN);
	struct sd_pair *m = malloc((SCAN_DMG_PAIRS + SCAN_DMG_NEW) * sizeof(*m));
	int errors = 0, kinds[3][4] = {{0}};
	for (int t = 0; t < 48; t++) {
		copy_store(dir, work);
		snprintf(data, sizeof(data), "%s/space/DATA", work);
		int victim = 10 + (int)rnd_below(&r, SCAN_DMG_PAIRS - 20);
		int dmg = t % 3, mem = (t / 3) % 4;
		int n = 0;
		for (int i = 0; i < SCAN_DMG_PAIRS; i++, n++) {
			sd_key(&m[n], i * SCAN_DMG_STEP, "");
			m[n].ch = (uint8_t)('a' + i % 26);
			m[n].vl = SCAN_DMG_VLEN;
		}
		char k[16];
		int kl = snprintf(k, sizeof(k), "r-%04d", victim * SCAN_DMG_STEP);
		uint64_t at[2];
		cr_assert_eq(file_find(data, k, (size_t)kl, at, 2), 1, "%s is not in DATA once", k);
		uint64_t pos = at[0] + (uint64_t)kl - 1;
		int bit = 0;
		if (dmg == 1) {
			pos = at[0] + 2;
			bit = 3;
		} else if (dmg == 2) {
			pos = at[0] - 3 + rnd_below(&r, 3 + (uint64_t)kl + SCAN_DMG_VLEN + 4);
			bit = (int)rnd_below(&r, 8);
		}
		int fd = open(data, O_RDWR);
		cr_assert(fd >= 0);
		uint8_t b;
		cr_assert_eq(pread(fd, &b, 1, (off_t)pos), 1);
		b ^= (uint8_t)(1u << bit);
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)pos), 1);
		close(fd);
		struct flexdb *db;
		int rc = flexdb_open(work, &o, &db);
		if (rc) {
			cr_assert(rc < 0, "open: %d", rc);
			continue; /* caught at open */
		}
		if (mem == 0) {
			for (int j = victim - 2; j <= victim + 2; j++) {
				if (j == victim)
					continue;
				memset(v, 'a' + j % 26, SCAN_DMG_VLEN);
				cr_assert_eq(flexdb_put(db, m[j].k, (size_t)m[j].kl, v, SCAN_DMG_VLEN), 0);
			}
		} else if (mem == 1) {
			struct sd_pair g0, g1;
			sd_key(&g0, victim * SCAN_DMG_STEP + 1, "");
			sd_key(&g1, victim * SCAN_DMG_STEP + 9, "");
			cr_assert_eq(flexdb_delete_range(db, g0.k, (size_t)g0.kl, g1.k, (size_t)g1.kl), 0);
		} else if (mem == 2) {
			memset(v, 'a' + victim % 26, SCAN_DMG_VLEN);
			cr_assert_eq(flexdb_put(db, k, (size_t)kl, v, SCAN_DMG_VLEN), 0);
		} else {
			for (int j = 0; j < SCAN_DMG_NEW; j++, n++) {
				char sfx[8];
				snprintf(sfx, sizeof(sfx), "_%02d", j);
				sd_key(&m[n], (victim + 1) * SCAN_DMG_STEP, sfx);
				m[n].ch = 'Z';
				m[n].vl = 32;
				memset(v, 'Z', 32);
				cr_assert_eq(flexdb_put(db, m[n].k, (size_t)m[n].kl, v, 32), 0);
			}
			qsort(m, (size_t)n, sizeof(*m), sd_cmp);
		}
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(db, &it), 0);
		char what[112];
		snprintf(what, sizeof(what), "seed %" PRIu64 ", %s damaged (%d, %d), full scan", seed,
			 k, dmg, mem);
		int ok = sd_check(it, flexdb_iter_seek(it, NULL, 0), m, 0, 0, 0, n, n + 1, what);
		for (int q = 0; q < 300; q++) {
			/* Near the damage half the time. */
			int c = sd_lower(m, n, k, kl);
			int j = q % 2 ? c - 12 + (int)rnd_below(&r, 24 + SCAN_DMG_NEW)
				      : (int)rnd_below(&r, (uint64_t)n);
			j = j < 0 ? 0 : j >= n ? n - 1 : j;
			int rev = (int)rnd_below(&r, 2), between = (int)rnd_below(&r, 2);
			int steps = 1 + (int)rnd_below(&r, 90), lo = 0, hi = n;
			struct sd_pair sk = m[j], bk;
			if (between)
				sk.k[sk.kl++] = '+'; /* between m[j] and m[j + 1] */
			cr_assert_eq(flexdb_iter_set_bounds(it, NULL, 0, NULL, 0), 0);
			if (rnd_below(&r, 3) == 0) {
				int e = j + (rev ? -(int)rnd_below(&r, 8) : 1 + (int)rnd_below(&r, 8));
				e = e < 0 ? 0 : e >= n ? n - 1 : e;
				bk = m[e];
				if (rev)
					lo = e;
				else
					hi = e;
				cr_assert_eq(flexdb_iter_set_bounds(it, rev ? bk.k : NULL,
								    rev ? (size_t)bk.kl : 0,
								    rev ? NULL : bk.k,
								    rev ? 0 : (size_t)bk.kl),
					     0);
			}
			int want = rev ? j : j + between;
			snprintf(what, sizeof(what), "seed %" PRIu64 ", %s damaged (%d, %d), seek %.*s%s",
				 seed, k, dmg, mem, sk.kl, sk.k, rev ? " backwards" : "");
			rc = rev ? flexdb_iter_seek_for_prev(it, sk.k, (size_t)sk.kl)
				 : flexdb_iter_seek(it, sk.k, (size_t)sk.kl);
			ok &= sd_check(it, rc, m, want, rev, lo, hi, steps, what);
		}
		errors += !ok;
		kinds[dmg][mem] += !ok;
		flexdb_iter_close(it);
		flexdb_close(db);
	}
	free(v);
	free(m);
	fprintf(stderr, "scans over damage: %d of 48 stores reported it (by damage, memtable:"
		" %d %d %d %d / %d %d %d %d / %d %d %d %d)\n", errors, kinds[0][0], kinds[0][1],
		kinds[0][2], kinds[0][3], kinds[1][0], kinds[1][1], kinds[1][2], kinds[1][3],
		kinds[2][0], kinds[2][1], kinds[2][2], kinds[2][3]);
	/* The damage to keys was met, not stepped around. */
	for (int d = 0; d < 2; d++)
		for (int k2 = 0; k2 < 4; k2++)
			cr_expect_gt(kinds[d][k2], 0, "damage %d, memtable %d: never reported", d, k2);
	tmp_remove(dir);
	tmp_remove(work);
}

/* A damaged key in the pair that starts an interval became the interval's
 * key at open, sending lookups of the true key to the previous interval
 * ("absent").  A short pair is verified at open; one too long to read
 * there is verified when a lookup misses just before it. */
/* INDEX names the contents by the space's stamp, which another space with
 * the same history of extents shares.  Here a copy of a store in which one
 * pair of the first interval has another key (of the same length, in the
 * same place, with a sound checksum): same tree, same stamp, and INDEX's
 * thin entry does not know the new key.  Open's check of a sample of
 * intervals (the first among them) against the space refuses the INDEX,
 * and the new key is found. */
Test(flexdb_crash, index_of_a_space_with_other_keys_in_the_same_shape_is_refused)
{
	char dir[256], work[256], data[600];
	fdb_tmpdir(dir, sizeof(dir), "ishape");
	fdb_tmpdir(work, sizeof(work), "ishape_w");
	db_simple(dir, 300, 20, 10); /* r-0000, r-0010, ... */
	copy_store(dir, work);
	snprintf(data, sizeof(data), "%s/space/DATA", work);
	uint64_t at[8];
	int n = file_find(data, "r-0020", 6, at, 8);
	cr_assert_gt(n, 0, "r-0020 is not in DATA");
	int fd = open(data, O_RDWR);
	cr_assert(fd >= 0);
	for (int j = 0; j < n; j++) {
		/* The record: klen 6, vlen 20, key, value, checksum. */
		uint8_t rec[2 + 6 + 20 + 4];
		cr_assert_eq(pread(fd, rec, sizeof(rec), (off_t)at[j] - 2), (ssize_t)sizeof(rec));
		cr_assert(rec[0] == 6 && rec[1] == 20);
		rec[2 + 5] = '5'; /* r-0025: between its neighbours */
		uint32_t cs = (uint32_t)XXH3_64bits(rec, 28);
		memcpy(rec + 28, &cs, 4); /* little-endian machine */
		cr_assert_eq(pwrite(fd, rec, sizeof(rec), (off_t)at[j] - 2), (ssize_t)sizeof(rec));
	}
	close(fd);
	struct flexdb *db;
	cr_assert_eq(flexdb_open(work, NULL, &db), 0);
	struct flexdb_stats st;
	cr_assert_eq(flexdb_stats(db, &st), 0);
	cr_expect_eq(st.index_from_file, 0, "the INDEX of other contents was used");
	char val[32];
	size_t vl = 0;
	cr_expect_eq(flexdb_get(db, "r-0025", 6, val, sizeof(val), &vl), 0);
	cr_expect_eq(flexdb_get(db, "r-0020", 6, val, sizeof(val), &vl), FLEXDB_NOTFOUND);
	cr_expect_eq(flexdb_check(db), 0);
	flexdb_close(db);
	/* The original still opens from its own INDEX. */
	cr_assert_eq(flexdb_open(dir, NULL, &db), 0);
	cr_assert_eq(flexdb_stats(db, &st), 0);
	cr_expect_eq(st.index_from_file, 1);
	flexdb_close(db);
	tmp_remove(dir);
	tmp_remove(work);
}

Test(flexdb_crash, damaged_interval_key_is_caught)
{
	for (int v = 0; v < 3; v++) {
		/* 0: an anchor's key read at open; 1: one too long to read at
		 * open, checked when its interval is; 2: an INDEX holds the
		 * key, and open's check of a sample of intervals against the
		 * space (the first is in it) refuses the INDEX, so reads the
		 * anchors as in 0. */
		int longv = v == 1;
		char dir[256];
		fdb_tmpdir(dir, sizeof(dir), "ikey");
		/* Even keys: the damaged key stays below the next interval's. */
		db_simple(dir, longv ? 12 : 100, longv ? 6000 : 20, 2);
		if (v < 2)
			drop_index(dir);
		char k[16];
		snprintf(k, sizeof(k), "r-%04d", first_anchor(dir));
		flip_key(dir, k, 0);
		struct flexdb *db;
		int rc = flexdb_open(dir, NULL, &db);
		if (v != 1) {
			cr_expect_eq(rc, FLEX_ECORRUPT, "open: %s", flex_strerror(rc));
		} else {
			cr_assert_eq(rc, 0, "open: %s", flex_strerror(rc));
			rc = flexdb_get(db, k, strlen(k), NULL, 0, NULL);
			cr_expect_eq(rc, FLEX_ECORRUPT, "get %s: %d", k, rc);
			cr_expect_eq(flexdb_check(db), FLEX_ECORRUPT);
			flexdb_close(db);
		}
		tmp_remove(dir);
	}
}

/* ---- checkpoints cut short ----------------------------------------------------- */

/* A FlexDB checkpoint killed at each of its steps (the space's copy, the
 * WALs, the renames, each IDENTITY) leaves a directory that open refuses
 * unchanged (FLEX_ENOTSTORE) until the copy is whole, and from the
 * rename of space.ckpt on the whole copy, holding every write. */
Test(flexdb_crash, checkpoint_killed_at_each_step_is_refused_or_whole)
{
	static const struct {
		const char *point;
		long n;
		int whole;
	} cases[] = {{"ckpt.data.copied", 1, 0},   {"ckpt.space.copied", 1, 0},
		     {"ckpt.space.renamed", 1, 0}, {"id.write.before", 1, 0},
		     {"id.dir.sync.before", 1, 0}, {"ckpt.db.copied", 1, 0},
		     {"ckpt.db.renamed", 1, 1},	   {"id.write.before", 2, 1},
		     {"id.sync.before", 2, 1},	   {"id.dir.sync.before", 2, 1}};
	char root[300], src[340], dest[340], report[340];
	fdb_tmpdir(root, sizeof(root), "ckptkill");
	snprintf(src, sizeof(src), "%s/src", root);
	snprintf(report, sizeof(report), "%s/report", root);
	struct flexdb_options o = fdb_tiny_opts();
	struct flexdb *db;
	/* Pairs in the space, in a WAL left by a killed session, and in the
	 * checkpointing session's memtable. */
	cr_assert_eq(flexdb_open(src, &o, &db), 0);
	struct fmodel m = {0};
	char k[32], v[64];
	for (int i = 0; i < 3000; i++) {
		int kn = snprintf(k, sizeof(k), "key%05d", i * 7919 % 3001);
		int vn = snprintf(v, sizeof(v), "value %d", i);
		cr_assert_eq(flexdb_put(db, k, (size_t)kn, v, (size_t)vn), 0);
		fm_put(&m, k, (uint32_t)kn, v, (uint32_t)vn);
	}
	cr_assert_eq(flexdb_close(db), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (flexdb_open(src, &o, &db))
			_exit(2);
		for (int i = 0; i < 500; i++) {
			int kn = snprintf(k, sizeof(k), "wal%05d", i);
			if (flexdb_put(db, k, (size_t)kn, "w", 1) || flexdb_sync(db))
				_exit(3);
		}
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "the session leaving WAL records failed (status 0x%x: exit 2 open, 3 put or "
		  "sync)",
		  st);
	for (int i = 0; i < 500; i++) {
		int kn = snprintf(k, sizeof(k), "wal%05d", i);
		fm_put(&m, k, (uint32_t)kn, "w", 1);
	}
	for (int i = 0; i < 100; i++) {
		int kn = snprintf(k, sizeof(k), "mem%05d", i);
		fm_put(&m, k, (uint32_t)kn, "m", 1);
	}
	struct why w = {0};
	uint64_t want_d = m.digest;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		snprintf(dest, sizeof(dest), "%s/copy%zu", root, c);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			kp_arm(cases[c].point, cases[c].n, report);
			int rc = flexdb_open(src, &o, &db);
			for (int i = 0; i < 100 && !rc; i++) {
				int kn = snprintf(k, sizeof(k), "mem%05d", i);
				rc = flexdb_put(db, k, (size_t)kn, "m", 1);
			}
			if (!rc)
				rc = flexdb_checkpoint(db, dest);
			_exit(rc ? 2 : 0);
		}
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		char fired[128];
		long fn;
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
			  "%s %ld: not killed (status %d)", cases[c].point, cases[c].n, st);
		cr_assert_eq(kp_fired(report, fired, sizeof(fired), &fn), 1);
		cr_assert_str_eq(fired, cases[c].point);
		struct flexdb_options no = fdb_tiny_opts();
		if (!cases[c].whole) {
			char *before = dir_snapshot(dest);
			for (int nc = 0; nc <= 1; nc++) {
				no.no_create = nc;
				int rc = flexdb_open(dest, &no, &db);
				cr_expect_eq(rc, FLEX_ENOTSTORE, "%s %ld, no_create %d: %s",
					     cases[c].point, cases[c].n, nc, flex_strerror(rc));
				if (!rc)
					flexdb_close(db);
			}
			char *after = dir_snapshot(dest);
			cr_expect_str_eq(before, after, "%s %ld: the directory was changed",
					 cases[c].point, cases[c].n);
			free(before);
			free(after);
			continue;
		}
		no.no_create = 1;
		int rc = flexdb_open(dest, &no, &db);
		cr_assert_eq(rc, 0, "%s %ld: %s", cases[c].point, cases[c].n, flex_strerror(rc));
		cr_expect_eq(flexdb_check(db), 0);
		uint64_t d;
		size_t n;
		cr_expect_eq(store_digest(db, &d, &n, NULL, &w), 0, "%s", w.msg);
		cr_expect(d == want_d && n == m.n, "%s %ld: %zu pairs, want %zu; digest differs",
			  cases[c].point, cases[c].n, n, m.n);
		cr_assert_eq(flexdb_close(db), 0);
	}
	fm_free(&m);
}
