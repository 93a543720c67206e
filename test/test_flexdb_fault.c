/*
 * test_flexdb_fault.c - FlexDB with each I/O call failed in turn.
 *
 * The store runs on crashio.h's fault-injecting table (given to FlexDB as
 * flexdb_options.space.io, which the FlexSpace and the WAL share).  A run
 * copies a cleanly closed base store, opens it with the table, runs a
 * seeded stream (flexdb_stream.h: puts, deletes, batches, syncs, with the
 * tiny options, so memtable switches, the committer, FlexSpace collections
 * and tree commits all happen), and closes it; the at-th call of a class of
 * operations fails with -EIO or -ENOSPC or writes short, once or from then
 * on.  A sweep runs the workload once per call index (stepping when there
 * are more calls than the tier allows).
 *
 * The contract checked at every fault (docs/DURABILITY.md, "Errors"):
 *  - nothing fails before a fault is injected; the operation that sees the
 *    failure returns an error, and the run neither crashes nor hangs (each
 *    run is a forked child with an alarm);
 *  - after a failed write or sync on any file the handle is failed: every
 *    later change and sync returns FLEX_EFAILED.  A failure that leaves the
 *    handle working (a refused read, say) must leave it fully working: a
 *    put and a sync after it succeed and that put is durable;
 *  - flexdb_close returns, whatever its status, and frees everything
 *    (under SANITIZE=address, some points run again in this process and
 *    LeakSanitizer must find nothing left);
 *  - reopening with the POSIX table yields a store that passes
 *    flexdb_check and equals the state after ops 1..k of the stream, with
 *    k at least the last operation a successful flexdb_sync acknowledged
 *    (or everything, after a successful close) and at most the failed one.
 *
 * FLEX_TEST_SEED replays a sweep; FLEX_FAULT_AT=<call> runs one fault point
 * of each test in this process, printing every injected fault.  make test
 * sweeps every call of one seed's workload; FLEX_TEST_SCALE=50 (make
 * stress) six seeds.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "flexdb.h"
#include "lib/crashio.h"
#include "lib/flexdb_model.h"
#include "lib/flexdb_stream.h"

TestSuite(flexdb_fault, .timeout = 600, .fini = fdb_tmp_cleanup);

/* Operations in the base store and in the faulted stream. */
#define BASE_OPS 200
#define FAULT_OPS 400
/* Most fault points one sweep visits: more than the workload's calls of
 * any class (about 800 at most), so every call is failed in turn. */
#define FAULT_POINTS 1000

struct fcase {
	const char *name;
	int cls;
	int err; /* -EIO, -ENOSPC or CIO_SHORT */
	int perm;
};

/* What the parent prepares once per sweep and the runs share. */
struct fctx {
	char base[256]; /* the cleanly closed base store */
	char dir[256];	/* where a run works */
	struct keypool pool;
	uint64_t sseed; /* the faulted stream */
	uint64_t *dig;	/* states after ops 0..FAULT_OPS of it */
	size_t *cnt;
	uint8_t *vbuf;
};

struct fres {
	int bad;
	long calls;  /* calls of the class */
	long faults; /* faults injected */
	int tripped;
	long op_errors; /* operations that returned an error */
	int sticky;	/* the handle was failed afterwards */
	int open_failed;
	int close_failed;
	long newer; /* recovered past the acknowledged state */
	struct why w;
};

/* The probe a working handle must accept after a refused operation. */
static const char probe_key[] = "fault-probe";
static const char probe_val[] = "written after the failure";

/* ---- copying a store ------------------------------------------------------- */

static int copy_file(const char *src, const char *dst)
{
	FILE *in = fopen(src, "rb");
	if (!in)
		return -1;
	FILE *out = fopen(dst, "wb");
	if (!out) {
		fclose(in);
		return -1;
	}
	char buf[65536];
	size_t n;
	int rc = 0;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			rc = -1;
	fclose(in);
	if (fclose(out) != 0)
		rc = -1;
	return rc;
}

/* A FlexDB store is its directory plus space/; nothing deeper. */
static int copy_store(const char *src, const char *dst)
{
	static const char *const files[] = {"LOCK", "space/LOCK", "space/LOG", "space/TREE",
					    "space/DATA"};
	char a[512], b[512];
	tmp_clear(dst);
	snprintf(b, sizeof(b), "%s/space", dst);
	if (mkdir(b, 0755) != 0)
		return -1;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(a, sizeof(a), "%s/%s", src, files[i]);
		snprintf(b, sizeof(b), "%s/%s", dst, files[i]);
		if (copy_file(a, b) != 0)
			return -1;
	}
	return 0;
}

/* ---- one run ------------------------------------------------------------------ */

/* After the first failed operation: is the handle failed (every change and
 * sync refused with FLEX_EFAILED), or fully working (a put and a sync
 * succeed)?  Returns 0 when it is one or the other. */
static int after_failure(struct flexdb *db, const struct cio *c, int *sticky, struct why *w)
{
	int s1 = flexdb_sync(db);
	/* The sync may be the call that finds the failure (a permanent fault
	 * on the WAL): it fails the handle then. */
	int s2 = s1 && s1 != FLEX_EFAILED ? flexdb_sync(db) : s1;
	int p = flexdb_put(db, probe_key, sizeof(probe_key) - 1, probe_val, sizeof(probe_val) - 1);
	int s3 = flexdb_sync(db);
	int d = flexdb_delete(db, "k", 1);
	/* Reads go on either way: they may fail (FLEX_EFAILED once a commit
	 * into the FlexSpace failed, or the injected error itself), but never
	 * call intact data corrupt nor crash. */
	char v[64];
	int g = flexdb_get(db, probe_key, sizeof(probe_key) - 1, v, sizeof(v), NULL);
	int ir = 0;
	struct flexdb_iter *it;
	if (flexdb_iter_open(db, &it) == 0) {
		ir = flexdb_iter_seek(it, NULL, 0);
		for (int i = 0; ir == 0 && flexdb_iter_valid(it) && i < 50; i++)
			ir = flexdb_iter_next(it);
		flexdb_iter_close(it);
	}
	int ck = flexdb_check(db);
	if (g == FLEX_ECORRUPT || ir == FLEX_ECORRUPT || ck == FLEX_ECORRUPT)
		return failf(w,
			     "on the handle after the failure, intact data reads as corrupt: get %d, "
			     "iteration %d, flexdb_check %d",
			     g, ir, ck);
	*sticky = s2 == FLEX_EFAILED;
	if (*sticky) {
		if (p != FLEX_EFAILED || s3 != FLEX_EFAILED || d != FLEX_EFAILED)
			return failf(w,
				     "the handle is failed (sync: FLEX_EFAILED), but later changes "
				     "returned put %d, sync %d, delete %d",
				     p, s3, d);
		return 0;
	}
	/* A write or sync error must fail the handle (docs/DURABILITY.md). */
	if (c->first_fault_op & (CIO_WRITES | CIO_SYNCS | CIO_FTRUNCATE))
		return failf(w,
			     "a failed %s left the handle working: the next sync returned %d (%s), "
			     "not FLEX_EFAILED",
			     (c->first_fault_op & CIO_SYNCS) ? "sync" : "write", s2,
			     flex_strerror(s2));
	if (s2 || p || s3)
		return failf(w,
			     "after the failure the handle neither refuses changes nor takes them: "
			     "sync %d (%s), put %d (%s), sync %d (%s)",
			     s2, flex_strerror(s2), p, flex_strerror(p), s3, flex_strerror(s3));
	return 0;
}

static int fault_run(const struct fctx *x, const struct fcase *fc, long at, struct fres *res)
{
	struct why *w = &res->w;
	int trace = getenv("FLEX_FAULT_AT") != NULL;
	if (copy_store(x->base, x->dir) != 0)
		return failf(w, "copying the base store failed");
	struct cio c;
	cio_init(&c);
	c.fault_class = fc->cls;
	c.fault_at = at;
	c.fault_err = fc->err;
	c.fault_perm = fc->perm;
	c.verbose = trace;
	struct flexdb_options opt = fdb_tiny_opts();
	opt.space.io = &c.io;
	struct flexdb_batch *b = flexdb_batch_new();
	long acked = 0, last = 0, failed_at = -1;
	int bad = 0, probe = 0;

	struct flexdb *db = NULL;
	int rc = flexdb_open(x->dir, &opt, &db);
	if (rc) {
		db = NULL;
		res->open_failed = 1;
		if (!c.tripped)
			bad = failf(w, "open failed with no fault: %s", flex_strerror(rc));
	}
	for (long i = 1; db && i <= FAULT_OPS && !bad; i++) {
		int type;
		rc = cop_run_db(db, b, &x->pool, x->sseed, i, x->vbuf, &type);
		last = i;
		if (rc == 0) {
			if (type == COP_SYNC)
				acked = i;
			continue;
		}
		res->op_errors++;
		if (!c.tripped) {
			bad = failf(w, "op %ld failed with no fault: %s (%d)", i, flex_strerror(rc),
				    rc);
			break;
		}
		failed_at = i;
		if (trace)
			fprintf(stderr, "  op %ld failed: %s; calls %ld, faults %ld\n", i,
				flex_strerror(rc), c.ncalls, c.nfaults);
		int sticky = 0;
		bad = after_failure(db, &c, &sticky, w);
		if (bad) {
			char m[sizeof(w->msg)];
			snprintf(m, sizeof(m), "op %ld failed with %s; %s", i, flex_strerror(rc),
				 w->msg);
			memcpy(w->msg, m, sizeof(m));
		}
		res->sticky = sticky;
		probe = !sticky;
		break;
	}
	if (db) {
		rc = flexdb_close(db);
		if (rc) {
			res->close_failed = 1;
			if (!c.tripped && !bad)
				bad = failf(w, "close failed with no fault: %s", flex_strerror(rc));
		} else if (failed_at < 0) {
			acked = last; /* a successful close makes everything durable */
		}
	}
	flexdb_batch_free(b);
	res->calls = c.ncalls;
	res->faults = c.nfaults;
	res->tripped = c.tripped;
	cio_destroy(&c);
	if (bad)
		return bad;

	/* Recovery with the POSIX table. */
	struct flexdb_options ropt = fdb_tiny_opts();
	uint64_t d = 0;
	size_t n = 0;
	struct fmodel loaded = {0};
	char msg[1024];
	if (recover_digest(x->dir, &ropt, &d, &n, &loaded, NULL, msg, sizeof(msg)))
		return failf(w, "recovery: %s", msg);
	const struct ment *pe = fm_get(&loaded, probe_key, sizeof(probe_key) - 1);
	if (probe) {
		if (!pe || pe->vn != sizeof(probe_val) - 1 || memcmp(pe->v, probe_val, pe->vn)) {
			fm_free(&loaded);
			return failf(w,
				     "the put synced on the working handle after op %ld failed "
				     "was lost",
				     failed_at);
		}
		d -= pair_hash(pe->k, pe->kn, pe->v, pe->vn);
		n--;
	}
	fm_free(&loaded);
	/* A failed op may have been applied (its WAL record written) or not. */
	long lo = probe ? failed_at - 1 : acked;
	long hi = failed_at >= 0 ? failed_at : last;
	long k = match_state(x->dig, x->cnt, lo, hi, d, n, msg, sizeof(msg));
	if (k < 0)
		return failf(w,
			     "recovered state (acknowledged op %ld, failed op %ld, last %ld): %s",
			     lo, failed_at, last, msg);
	res->newer += k > lo;
	return 0;
}

/* fault_run in a forked child, so that a crash or hang of one run is
 * reported as such and the other points still run. */
static int fault_run_forked(const struct fctx *x, const struct fcase *fc, long at, struct fres *res)
{
	int pfd[2];
	if (pipe(pfd) != 0)
		return failf(&res->w, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return failf(&res->w, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(pfd[0]);
		alarm(60);
		struct fres r = {0};
		r.bad = fault_run(x, fc, at, &r);
		ssize_t wn = write(pfd[1], &r, sizeof(r));
		_exit(wn == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(pfd[1]);
	size_t got = 0;
	memset(res, 0, sizeof(*res));
	while (got < sizeof(*res)) {
		ssize_t rn = read(pfd[0], (char *)res + got, sizeof(*res) - got);
		if (rn <= 0)
			break;
		got += (size_t)rn;
	}
	close(pfd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	if (got != sizeof(*res)) {
		memset(res, 0, sizeof(*res));
		if (WIFSIGNALED(st))
			return res->bad = failf(&res->w, "the run crashed with signal %d (%s)",
						WTERMSIG(st), strsignal(WTERMSIG(st)));
		return res->bad = failf(&res->w, "the run died (status 0x%x)", st);
	}
	return res->bad;
}

/* ---- sweeps ------------------------------------------------------------------- */

static void fctx_init(struct fctx *x, uint64_t seed)
{
	memset(x, 0, sizeof(*x));
	fdb_tmpdir(x->base, sizeof(x->base), "faultbase");
	fdb_tmpdir(x->dir, sizeof(x->dir), "fault");
	pool_make(&x->pool, 180, 0x6661756cu);
	x->vbuf = malloc(FLEXDB_MAX_VALUE);
	x->dig = malloc((FAULT_OPS + 1) * sizeof(*x->dig));
	x->cnt = malloc((FAULT_OPS + 1) * sizeof(*x->cnt));
	cr_assert(x->vbuf && x->dig && x->cnt);
	/* The base: a stream's worth of pairs, committed and closed. */
	uint64_t bseed = seed ^ 0xba5eu;
	struct flexdb_options opt = fdb_tiny_opts();
	struct flexdb *db;
	int rc = flexdb_open(x->base, &opt, &db);
	cr_assert_eq(rc, 0, "base: open: %s", flex_strerror(rc));
	struct flexdb_batch *b = flexdb_batch_new();
	struct fmodel base = {0};
	for (long i = 1; i <= BASE_OPS; i++) {
		int type;
		rc = cop_run_db(db, b, &x->pool, bseed, i, x->vbuf, &type);
		cr_assert_eq(rc, 0, "base: op %ld: %s", i, flex_strerror(rc));
		cop_run_model(&base, &x->pool, bseed, i, x->vbuf);
	}
	flexdb_batch_free(b);
	cr_assert_eq(flexdb_close(db), 0, "base: close");
	x->sseed = seed;
	stream_digests(&base, &x->pool, x->sseed, FAULT_OPS, x->dig, x->cnt, x->vbuf);
	fm_free(&base);
}

static void fctx_free(struct fctx *x)
{
	tmp_remove(x->base);
	tmp_remove(x->dir);
	pool_free(&x->pool);
	free(x->vbuf);
	free(x->dig);
	free(x->cnt);
}

/* In-process reruns of a few points.  They run on a thread of their own:
 * LeakSanitizer's report at exit does not fail a Criterion test, so the
 * sweep checks explicitly, and test/lsan.supp's `leak:libcriterion.so`
 * (the runner's own leak) hides every allocation whose stack passes
 * through the runner -- as everything on the test's own thread does. */
struct rerun {
	const struct fctx *x;
	const struct fcase *fc;
	long calls;
	long bad_at;
	struct fres res;
};

static void *rerun_main(void *arg)
{
	struct rerun *rr = arg;
	for (long at = 1, n = 0; at <= rr->calls && n < 8; at += rr->calls / 8 + 1, n++) {
		memset(&rr->res, 0, sizeof(rr->res));
		if (fault_run(rr->x, rr->fc, at, &rr->res)) {
			rr->bad_at = at;
			break;
		}
	}
	return NULL;
}

struct tally {
	long calls, runs, failures, crashes, faults, hit, op_errors, sticky;
	long open_failed, close_failed, newer;
	char first[700], first_crash[700];
};

/* One sweep of the workload of one seed: every call of the class failed in
 * turn (or one in `step` when there are more than FAULT_POINTS). */
static void sweep_seed(const struct fcase *fc, uint64_t seed, struct tally *t)
{
	struct fctx x;
	fctx_init(&x, seed);
	/* A clean run counts the workload's calls of the class.  The
	 * committer thread makes the count vary a little between runs. */
	struct fres res = {0};
	int bad = fault_run(&x, fc, 0, &res);
	cr_assert_eq(bad, 0, "seed %" PRIu64 ", no fault: %s", seed, res.w.msg);
	long calls = res.calls;
	cr_assert_gt(calls, 0, "the workload makes no call of the class");
	const char *only = getenv("FLEX_FAULT_AT");
	if (only) {
		long at = strtol(only, NULL, 0);
		memset(&res, 0, sizeof(res));
		bad = fault_run(&x, fc, at, &res);
		fctx_free(&x);
		cr_assert_eq(bad, 0, "seed %" PRIu64 " (%s) fault at call %ld: %s", seed, fc->name,
			     at, res.w.msg);
		return;
	}
	/* Past the clean count too: the interleaving with the committer
	 * varies, and a point beyond the last call must change nothing. */
	long span = calls + calls / 20 + 1;
	long step = span > FAULT_POINTS ? (span + FAULT_POINTS - 1) / FAULT_POINTS : 1;
	long failures = 0;
	t->calls += calls;
	for (long at = 1 + (long)(seed % (uint64_t)step); at <= span; at += step) {
		if (fault_run_forked(&x, fc, at, &res)) {
			int crash = !strncmp(res.w.msg, "the run crashed", 15) ||
				    !strncmp(res.w.msg, "the run died", 12);
			t->crashes += crash;
			if (crash && !t->first_crash[0])
				snprintf(t->first_crash, sizeof(t->first_crash),
					 "; first crash: seed %" PRIu64 ", fault at call %ld: %s",
					 seed, at, res.w.msg);
			if (!crash && !t->first[0])
				snprintf(t->first, sizeof(t->first),
					 "seed %" PRIu64 ", fault at call %ld: %s", seed, at,
					 res.w.msg);
			failures++;
		}
		t->runs++;
		t->faults += res.faults;
		t->hit += res.tripped;
		t->op_errors += res.op_errors;
		t->sticky += res.sticky;
		t->open_failed += res.open_failed;
		t->close_failed += res.close_failed;
		t->newer += res.newer;
	}
	t->failures += failures;
	/* Some points again in this process, so that LeakSanitizer sees what
	 * the failure paths and flexdb_close leave behind. */
	if (!failures) {
		struct rerun rr = {&x, fc, calls, -1, {0}};
		pthread_t th;
		cr_assert_eq(pthread_create(&th, NULL, rerun_main, &rr), 0);
		pthread_join(th, NULL);
		cr_assert_lt(rr.bad_at, 0, "seed %" PRIu64 ": in-process rerun at call %ld: %s",
			     seed, rr.bad_at, rr.res.w.msg);
#if defined(__SANITIZE_ADDRESS__)
		cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,
			     "seed %" PRIu64 " (%s): memory left behind by failed runs (report "
			     "above)",
			     seed, fc->name);
#endif
	}
	fctx_free(&x);
}

/* make test sweeps one seed's workload; make stress (FLEX_TEST_SCALE=50)
 * six, each with its own base store and stream. */
static void fault_sweep(const struct fcase *fc)
{
	char name[96];
	snprintf(name, sizeof(name), "flexdb fault %s", fc->name);
	uint64_t seed = test_seed(name);
	long rounds = getenv("FLEX_FAULT_AT") ? 1 : 1 + (long)(test_scale() / 10);
	struct tally t;
	memset(&t, 0, sizeof(t));
	double t0 = now_sec();
	for (long r = 0; r < rounds && !t.failures; r++)
		sweep_seed(fc, seed + (uint64_t)r * 0x9e3779b97f4a7c15ull, &t);
	if (getenv("FLEX_FAULT_AT"))
		return;
	fprintf(stderr,
		"%s: %ld seed%s, %ld calls in the workloads, %ld runs, %ld faults injected in %ld "
		"runs, %ld failed ops, %ld failed handles, %ld failed opens, %ld failed closes, "
		"%ld states verified (%ld past the last ack), 0 acknowledged lost, %.1f s\n",
		name, rounds, rounds == 1 ? "" : "s", t.calls, t.runs, t.faults, t.hit, t.op_errors,
		t.sticky, t.open_failed, t.close_failed, t.runs - t.failures, t.newer,
		now_sec() - t0);
	cr_assert_eq(t.failures, 0,
		     "%s: %ld of %ld runs broke the contract (%ld crashed); first: %s%s "
		     "(FLEX_TEST_SEED=<seed> FLEX_FAULT_AT=<call> replays one)",
		     name, t.failures, t.runs, t.crashes, t.first, t.first_crash);
}

Test(flexdb_fault, any_call_fails_once_with_eio)
{
	fault_sweep(&(struct fcase){"any_once_eio", CIO_ALL, -EIO, 0});
}

Test(flexdb_fault, any_call_fails_permanently_with_eio)
{
	fault_sweep(&(struct fcase){"any_perm_eio", CIO_ALL, -EIO, 1});
}

Test(flexdb_fault, write_fails_once_with_enospc)
{
	fault_sweep(&(struct fcase){"write_once_enospc", CIO_WRITES, -ENOSPC, 0});
}

Test(flexdb_fault, write_fails_permanently_with_enospc)
{
	fault_sweep(&(struct fcase){"write_perm_enospc", CIO_WRITES, -ENOSPC, 1});
}

Test(flexdb_fault, writes_go_short_once)
{
	fault_sweep(&(struct fcase){"write_short_once", CIO_WRITES, CIO_SHORT, 0});
}

Test(flexdb_fault, writes_go_short_permanently)
{
	fault_sweep(&(struct fcase){"write_short_perm", CIO_WRITES, CIO_SHORT, 1});
}

Test(flexdb_fault, sync_fails_once_with_eio)
{
	fault_sweep(&(struct fcase){"sync_once_eio", CIO_SYNCS, -EIO, 0});
}
