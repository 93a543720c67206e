/*
 * test_flexspace_crash.c - FlexSpace across crashes: kill -9 of a process
 * in the middle of a workload, and simulated power losses through the I/O
 * seam.
 *
 * The property checked after every crash: the recovered space equals the
 * model after some operation k, where k is no older than the last
 * acknowledged sync (or clean close) and no newer than the last operation
 * started.  A later prefix is allowed; a mix of two states (a lost
 * acknowledged write, a resurrected byte, a torn change) is not.  The
 * model's content hash after every operation from the last
 * acknowledgement on is compared with the hash of the recovered content,
 * and flexspace_check must pass.
 *
 * kill -9: a forked child runs a seeded operation stream (the generator
 * depends only on the seed and the space's size, so the parent replays it
 * exactly), reports each successful sync's operation index through a pipe
 * and the index of each operation it starts through shared memory, and is
 * killed by the parent after a random delay or kills itself at a random
 * operation.  Cycles run on one directory, so each recovery starts from
 * the previous one's result.
 *
 * Power loss: the workload runs through the crash-tracking table of
 * crashio.h.  Before every fsync/fdatasync, a few power-loss images of
 * that moment are materialised into a second directory (nothing of the
 * unsynced changes applied, all of them, and random mixes of applied,
 * dropped and torn ones) and recovered with the plain POSIX table.  The
 * workload itself goes on, so one run yields a crash state at every
 * durability point.
 *
 * Random tests print their seed; FLEX_TEST_SEED=N replays one and
 * FLEX_TEST_SCALE multiplies the cycle and operation counts.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "flexspace.h"
#include "lib/crashio.h"
#include "lib/killpoint.h"

TestSuite(flexspace_crash, .timeout = 300);

static const struct gen_cfg crash_gen = {.target_size = 512u << 10, .big_len = 200u << 10,
					 .insert_pct = 22, .collapse_pct = 12,
					 .truncate_pct = 3, .defrag_pct = 3, .sync_pct = 7,
					 .reopen_pct = 1, .read_pct = 0, .apply_pct = 10};

/* ---- kill -9 -------------------------------------------------------------- */

#define KILL_MAXOPS 4000

/* Kill-point cycles in make test (FLEX_TEST_SCALE multiplies them). */
#ifndef KILLPOINT_CYCLES
#define KILLPOINT_CYCLES 320
#endif

struct kill_shared {
	atomic_long started; /* index of the operation the child started last */
};

/* The child: runs the stream until killed, or with maxops > 0 (kill
 * points) runs that many operations and closes the space.  Exit codes
 * name failures. */
static void kill_child(const char *dir, uint64_t cseed, long self_kill_at, long maxops, int ackfd,
		       struct kill_shared *sh)
{
	alarm(60);
	struct flexspace_options o = tiny_options();
	struct flexspace *fs;
	if (flexspace_open(dir, &o, &fs) != 0)
		_exit(10);
	uint8_t *buf = malloc(256u << 10);
	uint64_t r = cseed;
	long n = maxops ? maxops : KILL_MAXOPS;
	for (long i = 0; i < n; i++) {
		struct op op;
		gen_op(&r, flexspace_size(fs), &crash_gen, &op);
		atomic_store(&sh->started, i);
		if (i == self_kill_at)
			raise(SIGKILL);
		int rc = 0;
		if (op.type == OP_REOPEN) {
			rc = flexspace_close(fs);
			if (rc == 0)
				rc = flexspace_open(dir, &o, &fs);
		} else {
			rc = space_apply(fs, &op, buf);
		}
		if (rc)
			_exit(11);
		if (op.type == OP_SYNC || op.type == OP_REOPEN) {
			int32_t v = (int32_t)i;
			if (write(ackfd, &v, sizeof(v)) != sizeof(v))
				_exit(12);
		}
	}
	if (maxops) {
		/* A close acknowledges everything, like a sync. */
		if (flexspace_close(fs) != 0)
			_exit(14);
		int32_t v = (int32_t)(n - 1);
		_exit(write(ackfd, &v, sizeof(v)) == sizeof(v) ? 0 : 12);
	}
	raise(SIGKILL);
	_exit(13);
}

/*
 * Cycles on one directory, each recovery starting from the previous one's
 * result.  kp_maxops == 0: the parent kills the child after a random
 * delay, or every other child kills itself at a random operation.
 * Otherwise every cycle arms a FlexTree or FlexSpace kill point
 * (killpoint.h) in a child running at most kp_maxops operations.
 */
static void kill9_cycles(const char *name, long cycles, long kp_maxops)
{
	uint64_t seed = test_seed(name), r = seed;
	char dir[PATH_MAX], report[PATH_MAX + 16];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "kill9"), 0);
	snprintf(report, sizeof(report), "%s.killpoint", dir);
	unlink(report);
	struct kill_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	uint64_t *sizes = malloc((KILL_MAXOPS + 2) * sizeof(uint64_t));
	uint64_t *hashes = malloc((KILL_MAXOPS + 2) * sizeof(uint64_t));
	uint8_t *buf = malloc(256u << 10);
	struct model base = {0}, m = {0};
	long self_kills = 0, newer = 0, total_ops = 0, no_ack = 0, kills = 0, completed = 0;
	long fresh = 0;
	double t0 = now_sec();
	struct flexspace_options o = tiny_options();
	struct kp_sched sched;
	kp_sched_init(&sched, KP_SPACE);

	for (long cyc = 0; cyc < cycles; cyc++) {
		uint64_t cseed = rnd(&r);
		long self_kill_at = -1, kn = 0;
		int p = -1;
		if (kp_maxops) {
			p = kp_next(&sched, &r, &kn);
			if (kp_points[p].prep == KP_PREP_FRESH) {
				tmp_clear(dir);
				model_truncate(&base, 0);
				fresh++;
			}
		} else if (cyc % 2) {
			self_kill_at = (long)rnd_below(&r, 600);
		}
		unsigned delay_us = 1000 + (unsigned)rnd_below(&r, 30000);
		int pfd[2];
		cr_assert_eq(pipe(pfd), 0);
		atomic_store(&sh->started, -1);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(pfd[0]);
			if (p >= 0)
				kp_arm(kp_points[p].name, kn, report);
			kill_child(dir, cseed, self_kill_at, kp_maxops, pfd[1], sh);
		}
		close(pfd[1]);
		if (!kp_maxops && self_kill_at < 0) {
			usleep(delay_us);
			kill(pid, SIGKILL);
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
		if (p >= 0) {
			char fired[64];
			long fn = 0;
			int f = kp_fired(report, fired, sizeof(fired), &fn);
			int done = WIFEXITED(st) && WEXITSTATUS(st) == 0;
			cr_assert(
			    (killed && f == 1 && !strcmp(fired, kp_points[p].name) && fn == kn) ||
				(done && f == 0),
			    "seed %" PRIu64 " cycle %ld, armed %s:%ld: the child %s (status 0x%x: "
			    "exit 10 open, 11 an operation failed, 12 pipe, 14 close), report %d "
			    "%s:%ld",
			    seed, cyc, kp_points[p].name, kn, killed ? "was killed" : "ended", st,
			    f, f == 1 ? fired : "", fn);
			kp_record(&sched, p, kn, killed);
			completed += done;
		} else {
			cr_assert(killed,
				  "seed %" PRIu64
				  " cycle %ld: the child failed by itself (status 0x%x: "
				  "exit 10 open, 11 an operation failed, 12 pipe)",
				  seed, cyc, st);
		}
		kills += killed;
		self_kills += self_kill_at >= 0;
		long last_ack = -1;
		int32_t v;
		while (read(pfd[0], &v, sizeof(v)) == sizeof(v))
			last_ack = v;
		close(pfd[0]);
		long started = atomic_load(&sh->started);
		no_ack += last_ack < 0;
		total_ops += started + 1;

		/* States 0..started+1 of this cycle, from the recovered base. */
		model_copy(&m, &base);
		uint64_t rr = cseed;
		sizes[0] = m.size;
		hashes[0] = model_hash(&m);
		for (long i = 0; i <= started; i++) {
			struct op op;
			gen_op(&rr, m.size, &crash_gen, &op);
			model_apply(&m, &op, buf);
			sizes[i + 1] = m.size;
			hashes[i + 1] = i + 1 >= last_ack + 1 ? model_hash(&m) : 0;
		}
		long lo = last_ack + 1, hi = started + 1, k;
		struct why w = {""};
		int bad = verify_recovered(dir, &o, sizes, hashes, lo, hi, &k, &w);
		char how[160];
		if (p >= 0)
			snprintf(how, sizeof(how), "%s %s:%ld", killed ? "killed at" : "armed",
				 kp_points[p].name, kn);
		else
			snprintf(how, sizeof(how), "%s",
				 self_kill_at >= 0 ? "killed itself" : "killed by the parent");
		cr_assert_eq(bad, 0,
			     "seed %" PRIu64 " cycle %ld (child seed %" PRIu64
			     ", last ack op %ld, last op started %ld, %s): %s",
			     seed, cyc, cseed, last_ack, started, how, w.msg);
		newer += k > lo;
		/* The next cycle starts from what was recovered: state k. */
		rr = cseed;
		for (long i = 0; i < k; i++) {
			struct op op;
			gen_op(&rr, base.size, &crash_gen, &op);
			model_apply(&base, &op, buf);
		}
		cr_assert_eq(model_hash(&base), hashes[k]);
	}
	fprintf(stderr,
		"%s: %ld cycles (%ld killed, %ld self-kills, %ld ran to a clean close, %ld fresh "
		"directories), %ld states verified, %ld ops started, %ld recovered past the last "
		"ack, %ld with no ack, 0 acknowledged lost, final size %" PRIu64 ", %.1f s\n",
		name, cycles, kills, self_kills, completed, fresh, cycles, total_ops, newer, no_ack,
		base.size, now_sec() - t0);
	if (kp_maxops) {
		char missing[1024];
		int never = kp_summary(&sched, name, missing, sizeof(missing));
		cr_assert_eq(never, 0,
			     "%s seed %" PRIu64 ": %d kill points never fired in %ld cycles:%s",
			     name, seed, never, cycles, missing);
	}
	kp_sched_free(&sched);
	model_free(&base);
	model_free(&m);
	free(sizes);
	free(hashes);
	free(buf);
	munmap(sh, sizeof(*sh));
	unlink(report);
	tmp_remove(dir);
}

Test(flexspace_crash, kill9_recovers_a_prefix_no_older_than_the_last_sync)
{
	kill9_cycles("kill9", scaled(150), 0);
}

/* Every FlexTree and FlexSpace kill point, armed at growing hit counts in
 * a child running a short stream with tiny segments and log (collections,
 * tree commits and log resets within a few dozen operations). */
Test(flexspace_crash, kill_points_recover_a_prefix_no_older_than_the_last_sync)
{
	kill9_cycles("kill_points", scaled(KILLPOINT_CYCLES), 300);
}

/* The smallest log there is: one record, synced, then kill -9. */
Test(flexspace_crash, one_synced_record_survives_kill9)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "onerec"), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexspace *fs;
		if (flexspace_open(dir, NULL, &fs) != 0 || flexspace_write(fs, "z", 7, 1) != 1 ||
		    flexspace_sync(fs) != 0)
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st), "child status 0x%x", st);
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, NULL, &fs), 0);
	struct flexspace_stats sts;
	flexspace_stats(fs, &sts);
	cr_assert_eq(sts.recovered_records, 1, "replayed %" PRIu64 " records",
		     sts.recovered_records);
	uint8_t b[16];
	cr_assert_eq(flexspace_read(fs, b, 0, 16), 8);
	cr_assert_eq(memcmp(b, "\0\0\0\0\0\0\0z", 8), 0);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* Tags are logged: a synced tag_set survives kill -9; an unsynced one is
 * either there or not, never anything else. */
Test(flexspace_crash, tags_survive_kill9_recovery)
{
	char dir[PATH_MAX];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "tagkill"), 0);
	static uint8_t a[100000];
	op_data(42, a, sizeof(a));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct flexspace_options o = tiny_options();
		struct flexspace *fs;
		if (flexspace_open(dir, &o, &fs) != 0 ||
		    flexspace_write(fs, a, 0, sizeof(a)) != (ssize_t)sizeof(a) ||
		    flexspace_tag_set(fs, 12345, 9) != 0 || flexspace_tag_set(fs, 70000, 1234) != 0 ||
		    flexspace_sync(fs) != 0 || flexspace_tag_set(fs, 80000, 5) != 0)
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st), "child status 0x%x", st);
	struct flexspace_options o = tiny_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint16_t tag;
	uint64_t eo;
	cr_assert_eq(flexspace_tag_get(fs, 12345, &tag, &eo), 0);
	cr_assert_eq(tag, 9);
	cr_assert_eq(eo, 12345);
	cr_assert_eq(flexspace_tag_get(fs, 70001, &tag, &eo), 0);
	cr_assert_eq(tag, 1234);
	cr_assert_eq(eo, 70000);
	cr_assert_eq(flexspace_tag_get(fs, 80000, &tag, &eo), 0);
	cr_assert(tag == 0 || (tag == 5 && eo == 80000), "unsynced tag recovered as %u at %" PRIu64,
		  tag, eo);
	uint8_t *rb = malloc(sizeof(a));
	cr_assert_eq(flexspace_read(fs, rb, 0, sizeof(a)), (ssize_t)sizeof(a));
	cr_assert_eq(memcmp(rb, a, sizeof(a)), 0);
	free(rb);
	cr_assert_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* ---- simulated power loss -------------------------------------------------- */

struct pl_ctx {
	struct cio *c;
	char cdir[PATH_MAX];
	uint64_t *sizes, *hashes;
	long acked, started;
	uint64_t frng;
	int variants;
	int creation_only; /* crash only while the space is being created */
	long syncs, states, changes_in_play, newer, failures;
	struct flexspace_options copt;
	char msg[900];
};

/* Before every sync: a few images of a power loss at this moment. */
static void pl_before_sync(struct cio *c, void *arg)
{
	struct pl_ctx *x = arg;
	x->syncs++;
	if (x->failures || (x->started < 0) != x->creation_only)
		return;
	for (int v = 0; v < x->variants; v++) {
		int how = v == 0 ? CIO_NONE_APPLIED : v == 1 ? CIO_ALL_APPLIED : CIO_RANDOM;
		uint64_t fate_seed = x->frng;
		tmp_clear(x->cdir);
		long nch = 0;
		int rc = cio_materialise(c, NULL, x->cdir, &x->frng, how, &nch);
		x->changes_in_play += nch;
		long k = -1;
		struct why w = {""};
		if (rc)
			failf(&w, "materialising: %s", strerror(-rc));
		if (rc || verify_recovered(x->cdir, &x->copt, x->sizes, x->hashes, x->acked,
					   x->started + 1, &k, &w)) {
			x->failures++;
			char files[256] = "";
			size_t fl = 0;
			for (size_t i = 0; i < c->nfiles && fl < sizeof(files) - 64; i++) {
				const char *bn = strrchr(c->files[i].path, '/');
				fl += (size_t)snprintf(files + fl, sizeof(files) - fl,
						       " %s:%" PRIu64 "+%zu", bn ? bn + 1 : "",
						       c->files[i].img_size, c->files[i].nch);
			}
			fprintf(stderr, "power loss: files (durable bytes + unsynced changes):%s\n",
				files);
			if (getenv("FLEX_KEEP_CRASH")) {
				fprintf(stderr, "power loss: image kept in %s\n", x->cdir);
				snprintf(x->cdir, sizeof(x->cdir), "%s", "/nonexistent/kept");
			}
			snprintf(x->msg, sizeof(x->msg),
				 "power loss before sync call %ld (image %s, fate rng %" PRIu64
				 ", %ld unsynced changes; last acked state %ld, last op started "
				 "%ld): %s",
				 x->syncs, how == CIO_NONE_APPLIED  ? "durable only"
					   : how == CIO_ALL_APPLIED ? "all applied"
								    : "random fates",
				 fate_seed, nch, x->acked, x->started, w.msg);
			return;
		}
		x->states++;
		x->newer += k > x->acked;
	}
}

static void power_loss_workload(uint64_t seed, long nops, int variants, int creation_only,
				const char *wdir, const char *cdir, long *states, long *syncs,
				long *changes)
{
	struct cio c;
	cio_init(&c);
	c.track = 1;
	struct pl_ctx *x = calloc(1, sizeof(*x));
	x->c = &c;
	snprintf(x->cdir, sizeof(x->cdir), "%s", cdir);
	x->sizes = calloc((size_t)nops + 2, sizeof(uint64_t));
	x->hashes = calloc((size_t)nops + 2, sizeof(uint64_t));
	x->acked = 0;
	x->started = -1;
	x->frng = seed ^ 0x5eed;
	x->variants = variants;
	x->creation_only = creation_only;
	x->copt = tiny_options();
	c.before_sync = pl_before_sync;
	c.hook_arg = x;

	struct flexspace_options o = tiny_options();
	o.io = &c.io;
	struct model m = {0};
	x->sizes[0] = 0;
	x->hashes[0] = model_hash(&m);
	uint8_t *buf = malloc(256u << 10);
	uint64_t r = seed;
	struct flexspace *fs;
	int rc = flexspace_open(wdir, &o, &fs);
	cr_assert_eq(rc, 0, "open: %s", flex_strerror(rc));
	uint64_t commits = 0, gcs = 0;
	for (long i = 0; i < nops && !x->failures; i++) {
		struct op op;
		gen_op(&r, m.size, &crash_gen, &op);
		x->started = i;
		model_apply(&m, &op, buf);
		x->sizes[i + 1] = m.size;
		x->hashes[i + 1] = model_hash(&m);
		if (op.type == OP_REOPEN) {
			struct flexspace_stats st;
			flexspace_stats(fs, &st);
			commits += st.tree_commits;
			gcs += st.gc_runs;
			rc = flexspace_close(fs);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: close: %s", seed, i,
				     flex_strerror(rc));
			x->acked = i + 1;
			rc = flexspace_open(wdir, &o, &fs);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: reopen: %s", seed, i,
				     flex_strerror(rc));
			continue;
		}
		rc = space_apply(fs, &op, buf);
		cr_assert_eq(rc, 0, "seed %" PRIu64 " op %ld: %s: %s", seed, i, op_names[op.type],
			     flex_strerror(rc));
		if (op.type == OP_SYNC)
			x->acked = i + 1;
	}
	struct flexspace_stats st;
	flexspace_stats(fs, &st);
	commits += st.tree_commits;
	gcs += st.gc_runs;
	/* The end: a power loss with everything since the last sync in play,
	 * then a clean close. */
	x->started = nops - 1;
	if (!x->failures && !creation_only)
		pl_before_sync(&c, x);
	rc = flexspace_close(fs);
	cr_assert_eq(rc, 0);
	long failures = x->failures;
	char msg[sizeof(x->msg)];
	memcpy(msg, x->msg, sizeof(msg));
	if (!failures)
		fprintf(stderr,
		"power_loss seed %" PRIu64 ": %ld ops, %ld sync calls, %ld crash states "
		"(%ld unsynced changes in play, %ld recovered past the last ack), tree commits "
		"%" PRIu64 ", gc runs %" PRIu64 "\n",
		seed, nops, x->syncs, x->states, x->changes_in_play, x->newer, commits, gcs);
	*states += x->states;
	*syncs += x->syncs;
	*changes += x->changes_in_play;
	model_free(&m);
	free(buf);
	free(x->sizes);
	free(x->hashes);
	free(x);
	cio_destroy(&c);
	cr_assert_eq(failures, 0, "seed %" PRIu64 ": %s", seed, msg);
}

Test(flexspace_crash, power_loss_at_every_sync_recovers_a_state_no_older_than_the_last_sync)
{
	uint64_t seed = test_seed("power_loss"), r = seed;
	char wdir[PATH_MAX], cdir[PATH_MAX];
	long states = 0, syncs = 0, changes = 0;
	long workloads = scaled(8);
	double t0 = now_sec();
	long k = 0;
	for (; k < workloads && within_budget(t0, k); k++) {
		cr_assert_eq(tmp_make(wdir, sizeof(wdir), "plw"), 0);
		cr_assert_eq(tmp_make(cdir, sizeof(cdir), "plc"), 0);
		power_loss_workload(rnd(&r), 600, 4, 0, wdir, cdir, &states, &syncs, &changes);
		tmp_remove(wdir);
		if (!getenv("FLEX_KEEP_CRASH"))
			tmp_remove(cdir);
	}
	fprintf(stderr,
		"power_loss: %ld workloads, %ld sync calls, %ld crash states checked, %ld "
		"unsynced changes in play, %.1f s\n",
		k, syncs, states, changes, now_sec() - t0);
	cr_assert_geq(states, 1000 * k / 4, "too few crash states (%ld)", states);
}

/* A power loss while flexspace_open creates a space: no change was ever
 * acknowledged, and the directory must open again (empty) rather than be
 * refused for ever. */
Test(flexspace_crash, power_loss_while_creating_leaves_an_openable_space)
{
	uint64_t seed = test_seed("power_loss_creation"), r = seed;
	char wdir[PATH_MAX], cdir[PATH_MAX];
	long states = 0, syncs = 0, changes = 0;
	for (int k = 0; k < 4; k++) {
		cr_assert_eq(tmp_make(wdir, sizeof(wdir), "plw"), 0);
		cr_assert_eq(tmp_make(cdir, sizeof(cdir), "plc"), 0);
		power_loss_workload(rnd(&r), 2, 12, 1, wdir, cdir, &states, &syncs, &changes);
		tmp_remove(wdir);
		if (!getenv("FLEX_KEEP_CRASH"))
			tmp_remove(cdir);
	}
	fprintf(stderr, "power_loss_creation: %ld crash states\n", states);
}

/* The simulator itself: a name made or removed is durable only once its
 * directory is synced; until then an image may keep or lose it (a
 * directory's changes in order), and a synced file's content comes with
 * whichever name the image keeps. */
static int img_has(const char *img, const char *rel, const char *want)
{
	char p[PATH_MAX + 64], got[64] = {0};
	snprintf(p, sizeof(p), "%s/%s", img, rel);
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, got, sizeof(got) - 1);
	close(fd);
	cr_assert(want == NULL || (n >= 0 && !strcmp(got, want)), "%s holds \"%s\", not \"%s\"",
		  rel, got, want ? want : "");
	return 1;
}

static int dir_sync(struct cio *c, const char *dir)
{
	int fd = c->io.open(&c->io, dir, O_RDONLY | O_DIRECTORY, 0);
	cr_assert_geq(fd, 0);
	int rc = c->io.fsync(&c->io, fd);
	c->io.close(&c->io, fd);
	return rc;
}

static void put_file(struct cio *c, const char *path, const char *text)
{
	int fd = c->io.open(&c->io, path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(c->io.pwrite(&c->io, fd, text, strlen(text), 0), (ssize_t)strlen(text));
	cr_assert_eq(c->io.fdatasync(&c->io, fd), 0);
	c->io.close(&c->io, fd);
}

Test(flexspace_crash, simulated_power_loss_drops_unsynced_names)
{
	char root[PATH_MAX], img[PATH_MAX + 8], sub[PATH_MAX + 8], a[PATH_MAX + 16],
	    b[PATH_MAX + 16], old[PATH_MAX + 16];
	cr_assert_eq(tmp_make(root, sizeof(root), "names"), 0);
	snprintf(img, sizeof(img), "%s.img", root);
	snprintf(sub, sizeof(sub), "%s/sub", root);
	snprintf(a, sizeof(a), "%s/a", sub);
	snprintf(b, sizeof(b), "%s/b", sub);
	snprintf(old, sizeof(old), "%s/old", root);
	/* A file there before the table watched: durable as it is. */
	FILE *f = fopen(old, "w");
	cr_assert_not_null(f);
	fputs("before", f);
	fclose(f);
	struct cio c;
	cio_init(&c);
	c.track = 1;
	uint64_t r = 1;
	long nch;
	cr_assert_eq(c.io.mkdir(&c.io, sub, 0755), 0);
	put_file(&c, a, "A");
	/* Data synced, names not: the directory and the file may vanish. */
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_NONE_APPLIED, &nch), 0);
	cr_assert(!img_has(img, "sub/a", NULL), "an unsynced creation survived");
	cr_assert(img_has(img, "old", "before"));
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_ALL_APPLIED, NULL), 0);
	cr_assert(img_has(img, "sub/a", "A"));
	/* The file's directory synced but not the directory's own entry. */
	cr_assert_eq(dir_sync(&c, sub), 0);
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_NONE_APPLIED, NULL), 0);
	cr_assert(!img_has(img, "sub/a", NULL), "a file in a directory whose entry was lost");
	cr_assert_eq(dir_sync(&c, root), 0);
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_NONE_APPLIED, &nch), 0);
	cr_assert(img_has(img, "sub/a", "A"));
	cr_assert_eq(nch, 0);
	/* Rename and unlink come undone until the directory is synced. */
	cr_assert_eq(c.io.rename(&c.io, a, b), 0);
	cr_assert_eq(c.io.unlink(&c.io, old), 0);
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_NONE_APPLIED, &nch), 0);
	cr_assert(img_has(img, "sub/a", "A") && !img_has(img, "sub/b", NULL));
	cr_assert(img_has(img, "old", "before"), "an unsynced unlink was kept");
	cr_assert_eq(nch, 2);
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_ALL_APPLIED, NULL), 0);
	cr_assert(!img_has(img, "sub/a", NULL) && img_has(img, "sub/b", "A"));
	cr_assert(!img_has(img, "old", NULL));
	/* Random prefixes: a directory never shows a later change without
	 * the earlier ones (a is made again, then b removed). */
	cr_assert_eq(dir_sync(&c, sub), 0);
	cr_assert_eq(dir_sync(&c, root), 0);
	put_file(&c, a, "A2");
	cr_assert_eq(c.io.unlink(&c.io, b), 0);
	int seen[2][2] = {{0}};
	for (int i = 0; i < 200; i++) {
		tmp_remove(img);
		cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_RANDOM, NULL), 0);
		int ha = img_has(img, "sub/a", "A2"), hb = img_has(img, "sub/b", "A");
		cr_assert(hb || ha, "b went before a was made");
		seen[ha][hb]++;
	}
	cr_assert(seen[0][1] && seen[1][1] && seen[1][0], "prefixes not all drawn");
	cr_assert_eq(dir_sync(&c, sub), 0);
	cr_assert_eq(dir_sync(&c, root), 0);
	tmp_remove(img);
	cr_assert_eq(cio_materialise(&c, root, img, &r, CIO_NONE_APPLIED, &nch), 0);
	cr_assert(img_has(img, "sub/a", "A2") && !img_has(img, "sub/b", NULL) &&
		  !img_has(img, "old", NULL));
	cio_destroy(&c);
	tmp_remove(img);
	tmp_remove(root);
}

/* ---- damage that is not a torn tail ---------------------------------------- */

static struct flexspace_options dmg_options(void)
{
	struct flexspace_options o = tiny_options();
	o.log_limit = 1u << 20; /* the LOG keeps its batches */
	return o;
}

static void fpwrite(const char *path, uint64_t off, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY);
	cr_assert(fd >= 0, "open %s", path);
	cr_assert_eq(pwrite(fd, b, n, (off_t)off), (ssize_t)n);
	close(fd);
}

static void fflip(const char *path, uint64_t byte, int bit)
{
	int fd = open(path, O_RDWR);
	cr_assert(fd >= 0, "open %s", path);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, (off_t)byte), 1);
	b ^= (uint8_t)(1u << bit);
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)byte), 1);
	close(fd);
}

static void fcopy(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(in >= 0 && out >= 0);
	uint8_t b[65536];
	ssize_t n;
	while ((n = read(in, b, sizeof(b))) > 0)
		cr_assert_eq(write(out, b, (size_t)n), n);
	close(in);
	close(out);
}

/* The LOG's current base, the batches that replay (offsets), and where
 * they end (docs/FORMAT.md). */
struct logmap {
	uint64_t base;
	int cur, nb;
	uint64_t off[64], end;
};

static void log_map(const char *path, struct logmap *lm)
{
	memset(lm, 0, sizeof(*lm));
	lm->cur = -1;
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	uint8_t h[32];
	for (int i = 0; i < 2; i++) {
		if (pread(fd, h, 32, (off_t)i * 4096) != 32 || memcmp(h, "FLEXLOG1", 8))
			continue;
		uint64_t base = flex_get_le64(h + 16), csum = flex_get_le64(h + 24);
		if (csum == XXH3_64bits(h, 24) && (lm->cur < 0 || base > lm->base)) {
			lm->cur = i;
			lm->base = base;
		}
	}
	cr_assert(lm->cur >= 0);
	uint64_t off = 8192;
	while (lm->nb < 64 && pread(fd, h, 32, (off_t)off) == 32) {
		uint32_t magic = flex_get_le32(h), n = flex_get_le32(h + 4);
		uint64_t base = flex_get_le64(h + 16);
		if (magic != 0x31424c46u || base != lm->base || !n)
			break;
		lm->off[lm->nb++] = off;
		off += 32 + 24 * (uint64_t)n;
	}
	lm->end = off;
	close(fd);
}

/* A space whose last session wrote and synced `syncs` times, then died:
 * LOG holds that many batches, and the seal after them. */
static void crashed_space(const char *dir, int syncs)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct flexspace_options o = dmg_options();
		struct flexspace *fs;
		if (flexspace_open(dir, &o, &fs))
			_exit(2);
		uint8_t b[1000];
		for (int i = 0; i < syncs; i++) {
			memset(b, 'a' + i, sizeof(b));
			if (flexspace_write(fs, b, (uint64_t)i * sizeof(b), sizeof(b)) !=
				(ssize_t)sizeof(b) ||
			    flexspace_sync(fs))
				_exit(3);
		}
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Open, and the deep check: the first failure, or 0. */
static int open_status(const char *dir)
{
	struct flexspace_options o = dmg_options();
	struct flexspace *fs;
	int rc = flexspace_open(dir, &o, &fs);
	if (!rc) {
		rc = flexspace_check(fs);
		flexspace_close(fs);
	}
	return rc;
}

/* Every LOG batch is synced before the next is written, and the seal
 * after the last one says how many were: a damaged batch, the last one
 * included, or a LOG cut short is damage, not a torn tail (a sweep of bit
 * flips found each of them silently dropping synced changes). */
Test(flexspace_crash, damaged_synced_log_batch_is_reported)
{
	char dir[PATH_MAX], log[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "logbatch"), 0);
	snprintf(log, sizeof(log), "%s/LOG", dir);
	for (int v = 0; v < 4; v++) {
		tmp_clear(dir);
		crashed_space(dir, 3);
		struct logmap lm;
		log_map(log, &lm);
		cr_assert_eq(lm.nb, 3);
		if (v == 0)
			fflip(log, lm.off[1] + 40, 3); /* a record of the middle batch */
		else if (v == 1)
			fflip(log, lm.off[2] + 8, 0); /* the last batch's seq */
		else if (v == 2)
			cr_assert_eq(truncate(log, (off_t)(lm.off[2] + 10)), 0);
		else
			cr_assert_eq(truncate(log, (off_t)lm.off[0]), 0);
		cr_expect_eq(open_status(dir), FLEX_ECORRUPT, "variant %d", v);
	}
	tmp_remove(dir);
}

/* What the seal does not cover is still a torn tail: a batch that was
 * being written when the process died. */
Test(flexspace_crash, torn_unsynced_log_batch_is_dropped)
{
	char dir[PATH_MAX], log[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "logtorn"), 0);
	snprintf(log, sizeof(log), "%s/LOG", dir);
	crashed_space(dir, 3);
	struct logmap lm;
	log_map(log, &lm);
	uint8_t junk[40];
	memset(junk, 0x5a, sizeof(junk));
	fpwrite(log, lm.end, junk, sizeof(junk)); /* part of a next batch */
	struct flexspace_options o = dmg_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_expect_eq(flexspace_size(fs), 3000);
	cr_expect_eq(flexspace_check(fs), 0);
	/* The durable point: three batches were found on the log's base; the
	 * open committed them, which starts the next tree version. */
	struct flexspace_stats st;
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	cr_expect_eq(st.recovered_version, lm.base);
	cr_expect_eq(st.recovered_batches, 3);
	cr_expect_eq(st.sync_version, lm.base + 1);
	cr_expect_eq(st.sync_batches, 0);
	cr_assert_eq(flexspace_write(fs, "z", 0, 1), 1);
	cr_assert_eq(flexspace_sync(fs), 0);
	cr_assert_eq(flexspace_stats(fs, &st), 0);
	cr_expect_eq(st.sync_batches, 1);
	cr_assert_eq(flexspace_close(fs), 0);
	tmp_remove(dir);
}

/* The current LOG header damaged while batches of its version exist, in a
 * space whose tree was never committed (which once passed for a creation
 * cut short); or an older copy of the whole LOG two tree versions behind:
 * the changes logged since would be dropped, so open refuses. */
Test(flexspace_crash, log_header_fallback_that_would_drop_batches_is_reported)
{
	char dir[PATH_MAX], log[PATH_MAX + 8], old[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "loghdr"), 0);
	snprintf(log, sizeof(log), "%s/LOG", dir);
	snprintf(old, sizeof(old), "%s/LOG.old", dir);
	crashed_space(dir, 2);
	struct logmap lm;
	log_map(log, &lm);
	fflip(log, (uint64_t)lm.cur * 4096 + 16, 0); /* the current header's base */
	cr_expect_eq(open_status(dir), FLEX_ECORRUPT);

	tmp_clear(dir);
	struct flexspace_options o = dmg_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_assert_eq(flexspace_write(fs, "x", 0, 1), 1);
	cr_assert_eq(flexspace_close(fs), 0);
	fcopy(log, old);
	for (int i = 0; i < 2; i++) { /* two more tree versions */
		cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
		cr_assert_eq(flexspace_write(fs, "y", 1 + (uint64_t)i, 1), 1);
		cr_assert_eq(flexspace_close(fs), 0);
	}
	fcopy(old, log);
	cr_expect_eq(open_status(dir), FLEX_ECORRUPT);
	tmp_remove(dir);
}

/* An empty LOG next to a committed tree made open truncate the tree (it
 * took it for a creation cut short): the space came back empty. */
Test(flexspace_crash, empty_log_does_not_empty_the_space)
{
	char dir[PATH_MAX], path[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "emptylog"), 0);
	struct flexspace_options o = dmg_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_assert_eq(flexspace_write(fs, "data", 0, 4), 4);
	cr_assert_eq(flexspace_close(fs), 0);
	snprintf(path, sizeof(path), "%s/LOG", dir);
	cr_assert_eq(truncate(path, 0), 0);
	cr_expect_eq(flexspace_open(dir, &o, &fs), FLEX_ECORRUPT);
	struct stat st;
	snprintf(path, sizeof(path), "%s/TREE", dir);
	cr_expect(stat(path, &st) == 0 && st.st_size > 0, "the tree file was emptied");
	tmp_remove(dir);
}

/* DATA cut inside its last segment: extents there point past its end.
 * Open reports it (before, reads failed and flexspace_check passed). */
Test(flexspace_crash, data_cut_inside_a_segment_is_reported)
{
	char dir[PATH_MAX], path[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "datacut"), 0);
	struct flexspace_options o = dmg_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint8_t b[3000];
	memset(b, 7, sizeof(b));
	cr_assert_eq(flexspace_write(fs, b, 0, sizeof(b)), (ssize_t)sizeof(b));
	cr_assert_eq(flexspace_close(fs), 0);
	snprintf(path, sizeof(path), "%s/DATA", dir);
	cr_assert_eq(truncate(path, 2000), 0);
	cr_expect_eq(flexspace_open(dir, &o, &fs), FLEX_ECORRUPT);
	tmp_remove(dir);
}

/* Appends a batch of one record for the current base to LOG: a crafted
 * but checksummed log (docs/FORMAT.md). */
static void log_append_record(const char *log, uint8_t op, uint64_t loff, uint64_t len,
			      uint64_t arg)
{
	struct logmap lm;
	log_map(log, &lm);
	uint8_t b[32 + 24] = {0};
	uint32_t magic = 0x31424c46u, nrec = 1;
	uint64_t seq = (uint64_t)lm.nb + 1, w0 = (uint64_t)op << 56 | loff;
	memcpy(b, &magic, 4);
	memcpy(b + 4, &nrec, 4);
	memcpy(b + 8, &seq, 8);
	memcpy(b + 16, &lm.base, 8);
	memcpy(b + 32, &w0, 8);
	memcpy(b + 40, &len, 8);
	memcpy(b + 48, &arg, 8);
	uint64_t csum = XXH3_64bits(b, sizeof(b));
	memcpy(b + 24, &csum, 8);
	fpwrite(log, lm.end, b, sizeof(b));
}

/* Two logical ranges mapping the same physical bytes: a crafted log
 * record inserts a range over bytes already mapped, or remaps a range onto
 * them.  Every file checksums fine and the tree is sound, so only the
 * overlap check at open sees it. */
Test(flexspace_crash, two_extents_on_the_same_bytes_are_reported)
{
	char dir[PATH_MAX], log[PATH_MAX + 8], data[PATH_MAX + 8];
	cr_assert_eq(tmp_make(dir, sizeof(dir), "overlap"), 0);
	snprintf(log, sizeof(log), "%s/LOG", dir);
	snprintf(data, sizeof(data), "%s/DATA", dir);
	for (int v = 0; v < 4; v++) {
		tmp_clear(dir);
		struct flexspace_options o = dmg_options();
		struct flexspace *fs;
		cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
		uint8_t b[100];
		memset(b, 'q', sizeof(b));
		cr_assert_eq(flexspace_write(fs, b, 0, 100), 100); /* DATA bytes 0..99 */
		cr_assert_eq(flexspace_close(fs), 0);
		if (v == 0) { /* insert [100, 150) -> DATA [20, 70) */
			log_append_record(log, 1, 100, 50, 20);
		} else if (v == 1) { /* remap [0, 10) -> DATA [50, 60) */
			log_append_record(log, 3, 0, 10, 50);
		} else if (v == 2) { /* control: insert [100, 150) -> fresh DATA [100, 150) */
			log_append_record(log, 1, 100, 50, 100);
			fpwrite(data, 100, b, 50);
		} else { /* control, bytes out of logical order: [0, 50) -> DATA [100, 150) */
			log_append_record(log, 1, 0, 50, 100);
			fpwrite(data, 100, b, 50);
		}
		int rc = flexspace_open(dir, &o, &fs);
		cr_expect_eq(rc, v < 2 ? FLEX_ECORRUPT : 0, "variant %d: %s", v, flex_strerror(rc));
		if (!rc) {
			cr_expect_eq(flexspace_size(fs), 150);
			cr_expect_eq(flexspace_check(fs), 0);
			flexspace_close(fs);
		}
	}
	tmp_remove(dir);
}

/* ---- checkpoints cut short ----------------------------------------------------- */

/* A checkpoint killed at each of its steps leaves a directory that open
 * refuses, with and without create, changing nothing (FLEX_ENOTSTORE)
 * until the copy is whole; from the rename of LOG on, the directory opens
 * as the whole copy (IDENTITY then missing or cut short: a space made
 * before identities, or its upgrade cut short). */
Test(flexspace_crash, checkpoint_killed_at_each_step_is_refused_or_whole)
{
	static const struct {
		const char *point;
		int whole;
	} cases[] = {{"ckpt.data.copied", 0}, {"ckpt.space.copied", 0}, {"ckpt.space.renamed", 1},
		     {"id.write.before", 1},  {"id.sync.before", 1},	{"id.dir.sync.before", 1}};
	char root[PATH_MAX], src[PATH_MAX + 16], dest[PATH_MAX + 32], report[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "ckptkill"), 0);
	snprintf(src, sizeof(src), "%s/src", root);
	snprintf(report, sizeof(report), "%s/report", root);
	struct flexspace_options o = tiny_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(src, &o, &fs), 0);
	uint64_t r = 42;
	uint8_t *buf = malloc(64u << 10);
	for (int i = 0; i < 40; i++) {
		uint64_t len = 1 + rnd_below(&r, 64u << 10), size = flexspace_size(fs);
		op_data(rnd(&r), buf, len);
		cr_assert_eq(flexspace_insert(fs, buf, rnd_below(&r, size + 1), len), (ssize_t)len);
		if (i % 3 == 0)
			cr_assert_eq(flexspace_collapse(fs, 0, flexspace_size(fs) / 4), 0);
	}
	uint8_t *want;
	uint64_t want_size;
	cr_assert_eq(space_read_all(fs, &want, &want_size), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	free(buf);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		snprintf(dest, sizeof(dest), "%s/copy%zu", root, c);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			kp_arm(cases[c].point, 1, report);
			struct flexspace *cfs;
			int rc = flexspace_open(src, &o, &cfs);
			if (!rc)
				rc = flexspace_checkpoint(cfs, dest);
			_exit(rc ? 2 : 0);
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		char fired[128];
		long fn;
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: not killed (status %d)",
			  cases[c].point, st);
		cr_assert_eq(kp_fired(report, fired, sizeof(fired), &fn), 1);
		cr_assert_str_eq(fired, cases[c].point);
		struct flexspace_options no = tiny_options();
		no.no_create = 1;
		if (!cases[c].whole) {
			char *before = dir_snapshot(dest);
			for (int create = 1; create >= 0; create--) {
				no.no_create = !create;
				int rc = flexspace_open(dest, &no, &fs);
				cr_expect_eq(rc, FLEX_ENOTSTORE, "%s, create %d: %s",
					     cases[c].point, create, flex_strerror(rc));
				if (!rc)
					flexspace_close(fs);
			}
			char *after = dir_snapshot(dest);
			cr_expect_str_eq(before, after, "%s: the directory was changed",
					 cases[c].point);
			free(before);
			free(after);
			continue;
		}
		int rc = flexspace_open(dest, &no, &fs);
		cr_assert_eq(rc, 0, "%s: %s", cases[c].point, flex_strerror(rc));
		cr_expect_eq(flexspace_check(fs), 0, "%s", cases[c].point);
		uint8_t *got;
		uint64_t got_size;
		cr_assert_eq(space_read_all(fs, &got, &got_size), 0);
		cr_expect(got_size == want_size && !memcmp(got, want, got_size),
			  "%s: the copy differs from the source", cases[c].point);
		free(got);
		cr_assert_eq(flexspace_close(fs), 0);
	}
	free(want);
	tmp_remove(root);
}

/* Through the crash-tracking table: when a checkpoint returns 0, no write
 * to the copy is left unsynced (it survives a power loss from then on);
 * and a write or sync of the copy that fails makes the checkpoint fail,
 * takes back the directory it created, and leaves the handle usable. */
Test(flexspace_crash, checkpoint_is_synced_and_a_failed_copy_leaves_the_space_usable)
{
	char root[PATH_MAX], src[PATH_MAX + 16], dest[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "ckptio"), 0);
	snprintf(src, sizeof(src), "%s/src", root);
	static struct cio c;
	cio_init(&c);
	c.track = 1;
	struct flexspace_options o = tiny_options();
	o.io = &c.io;
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(src, &o, &fs), 0);
	uint8_t buf[4096];
	for (int i = 0; i < 100; i++) {
		op_data((uint64_t)i, buf, sizeof(buf));
		cr_assert_eq(flexspace_insert(fs, buf, (uint64_t)i * 997 % (flexspace_size(fs) + 1),
					      sizeof(buf)),
			     (ssize_t)sizeof(buf));
	}
	snprintf(dest, sizeof(dest), "%s/copy", root);
	cr_assert_eq(flexspace_checkpoint(fs, dest), 0);
	size_t dl = strlen(dest), seen = 0;
	pthread_mutex_lock(&c.mu);
	for (size_t i = 0; i < c.nfiles; i++) {
		if (strncmp(c.files[i].path, dest, dl) || c.files[i].path[dl] != '/')
			continue;
		seen++;
		cr_expect_eq(c.files[i].nch, 0, "%s: %zu changes not synced", c.files[i].path,
			     c.files[i].nch);
	}
	pthread_mutex_unlock(&c.mu);
	cr_expect_geq(seen, 5, "the copy's files went around the I/O table");

	/* A failure at each write, sync and truncate of the copy. */
	cr_assert_eq(flexspace_sync(fs), 0);
	int failed_at_all = 0;
	for (long at = 1; at < 64; at++) {
		snprintf(dest, sizeof(dest), "%s/fail%ld", root, at);
		pthread_mutex_lock(&c.mu);
		c.fault_class = CIO_WRITES | CIO_SYNCS | CIO_FTRUNCATE;
		c.fault_at = at;
		c.fault_err = -EIO;
		c.ncalls = 0;
		c.tripped = 0;
		pthread_mutex_unlock(&c.mu);
		int rc = flexspace_checkpoint(fs, dest);
		pthread_mutex_lock(&c.mu);
		int tripped = c.tripped;
		c.fault_class = 0;
		pthread_mutex_unlock(&c.mu);
		if (!tripped) {
			cr_expect_eq(rc, 0);
			break;
		}
		failed_at_all = 1;
		cr_expect_eq(rc, -EIO, "fault %ld: %s", at, flex_strerror(rc));
		cr_expect_eq(access(dest, F_OK), -1, "fault %ld: the copy was left behind", at);
		cr_assert_eq(flexspace_write(fs, "x", 0, 1), 1, "fault %ld: the space failed", at);
		cr_assert_eq(flexspace_sync(fs), 0);
	}
	cr_expect(failed_at_all);
	cr_expect_eq(flexspace_check(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
	cio_destroy(&c);
	tmp_remove(root);
}

/* ---- a collection killed between its tree commits ------------------------ */

/* A space whose garbage lies in segments holding pieces from all over it,
 * with a leaf cache of four leaves: a collection commits the tree many
 * times between its batches (test_flexspace.c has the same layout). */
static struct flexspace_options gc_kill_options(void)
{
	struct flexspace_options o = tiny_options();
	o.log_limit = 1u << 30;
	o.tree_cache_size = 16u << 10;
	o.gc_ratio = 1.2;
	o.defer_maintenance = 1;
	return o;
}

static void gc_kill_prepare(const char *dir)
{
	struct flexspace_options o = gc_kill_options();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	uint64_t r = 7, size = 0;
	uint8_t b[32];
	for (int i = 0; i < 24000; i++) {
		op_data(rnd(&r), b, sizeof(b));
		uint64_t off = rnd_below(&r, size / 32 + 1) * 32;
		cr_assert_eq(flexspace_insert(fs, b, off, sizeof(b)), (ssize_t)sizeof(b));
		size += sizeof(b);
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	for (int i = 0; i < 12000; i++) {
		op_data(rnd(&r), b, sizeof(b));
		uint64_t off = rnd_below(&r, size - sizeof(b) + 1);
		cr_assert_eq(flexspace_write(fs, b, off, sizeof(b)), (ssize_t)sizeof(b));
	}
	cr_assert_eq(flexspace_commit(fs), 0);
	cr_assert_eq(flexspace_close(fs), 0);
}

/* Open commits the tree once, so the collection's first commit is the
 * second hit of the commit points; its 33k extents moved commit twice.
 * `late`: killed after a commit of the run, so the tree recovered is one
 * the run committed, with part of the collection in it. */
Test(flexspace_crash, collection_killed_between_its_tree_commits_loses_no_byte)
{
	static const struct {
		const char *point;
		long n;
		int late;
	} cases[] = {{"fs.gc.moved", 1, 0},	     {"fs.gc.moved", 300, 0},
		     {"fs.gc.moved", 16000, 1},	     {"fs.gc.moved", 24000, 1},
		     {"fs.gc.moved", 32000, 1},	     {"fs.data.sync.after", 2, 0},
		     {"ft.nodes.sync.after", 2, 0},  {"ft.header.sync.after", 2, 0},
		     {"fs.commit.tree_done", 2, 1},  {"fs.log.truncated", 2, 1},
		     {"fs.commit.tree_done", 3, 1},  {"fs.log.sync.after", 1, 1}};
	char root[PATH_MAX], dir[PATH_MAX + 16], report[PATH_MAX + 32];
	cr_assert_eq(tmp_make(root, sizeof(root), "gckill"), 0);
	snprintf(dir, sizeof(dir), "%s/space", root);
	snprintf(report, sizeof(report), "%s/report", root);
	struct flexspace_options o = gc_kill_options();
	gc_kill_prepare(dir);
	struct flexspace *fs;
	struct flexspace_stats s;
	uint8_t *want;
	uint64_t want_size;
	cr_assert_eq(flexspace_open(dir, &o, &fs), 0);
	cr_assert_eq(space_read_all(fs, &want, &want_size), 0);
	cr_assert_eq(flexspace_stats(fs, &s), 0);
	uint64_t opened = s.sync_version; /* the tree the child's open commits */
	cr_assert_eq(flexspace_close(fs), 0);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		tmp_clear(dir);
		gc_kill_prepare(dir);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			kp_arm(cases[c].point, cases[c].n, report);
			struct flexspace *cfs;
			int rc = flexspace_open(dir, &o, &cfs);
			if (!rc)
				rc = flexspace_maintain(cfs);
			_exit(rc ? 2 : 0);
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		char fired[128];
		long fn = 0;
		int f = kp_fired(report, fired, sizeof(fired), &fn);
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && f == 1 &&
			      !strcmp(fired, cases[c].point) && fn == cases[c].n,
			  "%s:%ld: not killed there (status 0x%x, report %d)", cases[c].point,
			  cases[c].n, st, f);
		cr_assert_eq(flexspace_open(dir, &o, &fs), 0, "%s:%ld", cases[c].point, cases[c].n);
		cr_assert_eq(flexspace_check(fs), 0, "%s:%ld", cases[c].point, cases[c].n);
		uint8_t *got;
		uint64_t got_size;
		cr_assert_eq(space_read_all(fs, &got, &got_size), 0);
		cr_assert(got_size == want_size && !memcmp(got, want, got_size),
			  "%s:%ld: the bytes changed", cases[c].point, cases[c].n);
		free(got);
		cr_assert_eq(flexspace_stats(fs, &s), 0);
		fprintf(stderr,
			"gc kill %s:%ld: recovered tree version %" PRIu64 " (open's %" PRIu64
			"), %" PRIu64 " log records replayed\n",
			cases[c].point, cases[c].n, s.recovered_version, opened, s.recovered_records);
		cr_assert(!cases[c].late || s.recovered_version > opened,
			  "%s:%ld: the tree recovered (%" PRIu64 ") is not one the run committed",
			  cases[c].point, cases[c].n, s.recovered_version);
		cr_assert_eq(flexspace_close(fs), 0);
	}
	free(want);
	tmp_remove(root);
}
