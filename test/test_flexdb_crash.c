/*
 * test_flexdb_crash.c - FlexDB across crashes: kill -9 of a process in the
 * middle of a workload, simulated power losses through the I/O seam, damaged
 * WAL records and damaged pairs in the FlexSpace, and one-record logs.
 *
 * The property checked after every crash: the recovered store equals the
 * model after a single prefix of the operation stream, ops 1..k with
 * ack <= k <= last started, where ack is the last operation acknowledged as
 * durable (a flexdb_sync that returned 0, or with sync_writes every write
 * that returned).  A batch is one operation, so a partly applied batch
 * matches no prefix; so does a lost acknowledged write, a resurrected
 * delete or a reordered replay.  States are compared by an order-free
 * digest of all pairs (flexdb_model.h) plus the pair count, and
 * flexdb_check must pass on the recovered store.
 *
 * kill -9: a forked child runs a seeded stream (puts with values of mixed
 * sizes, deletes, batches with repeated keys, syncs) with the tiny options,
 * so that a memtable is being committed at almost every moment; it
 * publishes the index of each operation it starts in shared memory and
 * writes each acknowledged index to a pipe.  The parent kills it after a
 * random delay, reopens, and verifies.  Cycles run on one directory, each
 * recovery starting from the previous one.
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

#include "crashio.h"
#include "flexdb.h"
#include "flexdb_model.h"

TestSuite(flexdb_crash, .timeout = 300, .fini = fdb_tmp_cleanup);

/* ---- the operation stream ------------------------------------------------------ */

enum { COP_PUT, COP_DEL, COP_BATCH, COP_SYNC };

/* Operation i of a stream: everything derives from its seed, so the child
 * and the parent produce the same operations without sharing state. */
static int cop_type(uint64_t stream_seed, long i, uint64_t *opseed)
{
	uint64_t r = stream_seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
	rnd(&r);
	*opseed = rnd(&r);
	uint64_t k = rnd_below(&r, 100);
	return k < 52 ? COP_PUT : k < 72 ? COP_DEL : k < 88 ? COP_BATCH : COP_SYNC;
}

typedef void (*cop_fn)(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		       uint32_t vn);

/* Expands a put, delete or batch into its key operations. */
static void cop_expand(const struct keypool *pool, int type, uint64_t opseed, uint8_t *vbuf,
		       cop_fn fn, void *arg)
{
	uint64_t r = opseed;
	int n = type == COP_BATCH ? 2 + (int)rnd_below(&r, 7) : 1;
	size_t keys[10];
	for (int j = 0; j < n; j++) {
		size_t ki = j && rnd_below(&r, 4) == 0 ? keys[rnd_below(&r, (uint64_t)j)]
						       : (size_t)rnd_below(&r, pool->n);
		keys[j] = ki;
		int del = type == COP_DEL || (type == COP_BATCH && rnd_below(&r, 100) < 30);
		uint32_t vn = 0;
		if (!del) {
			vn = val_len(&r, 1);
			if (vn > (256u << 10) && rnd_below(&r, 4))
				vn = 256u << 10; /* keep most large ones moderate */
			val_fill(rnd(&r), vbuf, vn);
		}
		fn(arg, del, pool->keys[ki].k, pool->keys[ki].n, vbuf, vn);
	}
}

struct dbapply {
	struct flexdb *db;
	struct flexdb_batch *b; /* NULL: direct puts and deletes */
	int rc;
};

static void dbapply_fn(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		       uint32_t vn)
{
	struct dbapply *a = arg;
	if (a->rc)
		return;
	if (a->b)
		a->rc =
		    del ? flexdb_batch_delete(a->b, k, kn) : flexdb_batch_put(a->b, k, kn, v, vn);
	else
		a->rc = del ? flexdb_delete(a->db, k, kn) : flexdb_put(a->db, k, kn, v, vn);
}

static void mapply_fn(void *arg, int del, const uint8_t *k, uint32_t kn, const uint8_t *v,
		      uint32_t vn)
{
	struct fmodel *m = arg;
	if (del)
		fm_del(m, k, kn);
	else
		fm_put(m, k, kn, v, vn);
}

/* Runs operation i on the store: 0 or the status. */
static int cop_run_db(struct flexdb *db, struct flexdb_batch *b, const struct keypool *pool,
		      uint64_t stream_seed, long i, uint8_t *vbuf, int *type)
{
	uint64_t os;
	*type = cop_type(stream_seed, i, &os);
	if (*type == COP_SYNC)
		return flexdb_sync(db);
	struct dbapply a = {db, NULL, 0};
	if (*type == COP_BATCH) {
		flexdb_batch_clear(b);
		a.b = b;
	}
	cop_expand(pool, *type, os, vbuf, dbapply_fn, &a);
	if (!a.rc && *type == COP_BATCH)
		a.rc = flexdb_write(db, b);
	return a.rc;
}

static void cop_run_model(struct fmodel *m, const struct keypool *pool, uint64_t stream_seed,
			  long i, uint8_t *vbuf)
{
	uint64_t os;
	int type = cop_type(stream_seed, i, &os);
	if (type != COP_SYNC)
		cop_expand(pool, type, os, vbuf, mapply_fn, m);
}

static void fm_copy(struct fmodel *dst, const struct fmodel *src)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++)
		fm_put(dst, src->e[i].k, src->e[i].kn, src->e[i].v, src->e[i].vn);
}

/* Digests (and pair counts) of the states after ops 0..hi of a stream
 * starting from model m0. */
static void stream_digests(const struct fmodel *m0, const struct keypool *pool,
			   uint64_t stream_seed, long hi, uint64_t *dig, size_t *cnt, uint8_t *vbuf)
{
	struct fmodel m;
	fm_copy(&m, m0);
	dig[0] = m.digest;
	cnt[0] = m.n;
	for (long i = 1; i <= hi; i++) {
		cop_run_model(&m, pool, stream_seed, i, vbuf);
		dig[i] = m.digest;
		cnt[i] = m.n;
	}
	fm_free(&m);
}

/* The newest k in [lo, hi] whose state matches, or -1 with a message
 * naming an older match (lost acknowledged operations) if there is one. */
static long match_state(const uint64_t *dig, const size_t *cnt, long lo, long hi, uint64_t d,
			size_t n, char *msg, size_t cap)
{
	for (long k = hi; k >= lo; k--)
		if (dig[k] == d && cnt[k] == n)
			return k;
	long older = -1;
	for (long k = lo - 1; k >= 0 && older < 0; k--)
		if (dig[k] == d && cnt[k] == n)
			older = k;
	if (older >= 0)
		snprintf(
		    msg, cap,
		    "recovered state is the one after op %ld, older than the acknowledged op %ld: "
		    "acknowledged writes were lost",
		    older, lo);
	else
		snprintf(msg, cap,
			 "recovered store (%zu pairs) matches no prefix of ops in [%ld, %ld] (%zu "
			 ".. %zu "
			 "pairs there): a torn batch, a lost or resurrected write, or damaged data",
			 n, lo, hi, cnt[lo], cnt[hi]);
	return -1;
}

/* Opens dir, checks it and digests it.  0, or 1 with msg. */
static int recover_digest(const char *dir, const struct flexdb_options *opt, uint64_t *d, size_t *n,
			  struct fmodel *load, struct flexdb_stats *st, char *msg, size_t cap)
{
	struct flexdb *db;
	int rc = flexdb_open(dir, opt, &db);
	if (rc) {
		snprintf(msg, cap, "reopen after the crash: %s (%d)", flex_strerror(rc), rc);
		return 1;
	}
	if (st)
		flexdb_stats(db, st);
	struct why w;
	if (store_digest(db, d, n, load, &w)) {
		snprintf(msg, cap, "reading the recovered store: %s", w.msg);
		flexdb_close(db);
		return 1;
	}
	if ((rc = flexdb_check(db)) != 0) {
		snprintf(msg, cap, "flexdb_check after recovery: %s (%d)", flex_strerror(rc), rc);
		flexdb_close(db);
		return 1;
	}
	if ((rc = flexdb_close(db)) != 0) {
		snprintf(msg, cap, "close after recovery: %s (%d)", flex_strerror(rc), rc);
		return 1;
	}
	return 0;
}

/* ======================================================================
 * kill -9
 * ====================================================================== */

#define KILL_MAXOPS 20000

static void kill9_run(const char *name, int sync_writes, long cycles)
{
	uint64_t seed = test_seed(name);
	uint64_t r = seed;
	char dir[256];
	fdb_tmpdir(dir, sizeof(dir), "kill9");
	struct flexdb_options opt = fdb_tiny_opts();
	opt.sync_writes = sync_writes;
	struct keypool pool;
	/* Keys enough for a few dozen intervals (one index leaf): these
	 * tests aim at crash recovery, the model tests at the index. */
	pool_make(&pool, 180, 0x6b696c6cu);
	struct fmodel model = {0};
	uint8_t *vbuf = malloc(FLEXDB_MAX_VALUE);
	uint64_t *dig = malloc((KILL_MAXOPS + 1) * sizeof(*dig));
	size_t *cnt = malloc((KILL_MAXOPS + 1) * sizeof(*cnt));
	_Atomic long *started =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(started != MAP_FAILED);
	long total_ops = 0, total_acked = 0, beyond_ack = 0, replayed = 0, early = 0;
	double t0 = now_sec();
	for (long c = 0; c < cycles; c++) {
		uint64_t sseed = seed ^ ((uint64_t)(c + 1) * 0xd1b54a32d192ed03ull);
		atomic_store(started, 0);
		int pfd[2];
		cr_assert_eq(pipe(pfd), 0);
		fflush(NULL);
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			struct flexdb *db;
			if (flexdb_open(dir, &opt, &db) != 0)
				_exit(3);
			struct flexdb_batch *b = flexdb_batch_new();
			for (long i = 1; i <= KILL_MAXOPS; i++) {
				atomic_store(started, i);
				int type;
				int rc = cop_run_db(db, b, &pool, sseed, i, vbuf, &type);
				if (rc)
					_exit(4);
				if (type == COP_SYNC || sync_writes) {
					uint32_t v = (uint32_t)i;
					if (write(pfd[1], &v, 4) != 4)
						_exit(5);
				}
			}
			if (flexdb_sync(db) != 0)
				_exit(4);
			uint32_t v = KILL_MAXOPS;
			if (write(pfd[1], &v, 4) != 4)
				_exit(5);
			for (;;)
				pause();
		}
		close(pfd[1]);
		/* Some kills land during open and the first writes, most in
		 * the stream, with commits running all the time. */
		uint64_t how = rnd_below(&r, 10);
		useconds_t delay = how < 2 ? (useconds_t)rnd_below(&r, 15000)
					   : 15000 + (useconds_t)rnd_below(&r, 300000);
		usleep(delay);
		kill(pid, SIGKILL);
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		long ack = 0;
		uint32_t v;
		while (read(pfd[0], &v, 4) == 4)
			if ((long)v > ack)
				ack = v;
		close(pfd[0]);
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
			  "%s seed %" PRIu64 " cycle %ld: the child failed on its own (exit %d)",
			  name, seed, c, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		long hi = atomic_load(started);
		if (hi == 0)
			early++;
		stream_digests(&model, &pool, sseed, hi, dig, cnt, vbuf);
		uint64_t d;
		size_t n;
		char msg[512];
		struct flexdb_stats st;
		struct fmodel loaded = {0};
		int bad = recover_digest(dir, &opt, &d, &n, &loaded, &st, msg, sizeof(msg));
		cr_assert(!bad, "%s seed %" PRIu64 " cycle %ld (acked %ld, started %ld): %s", name,
			  seed, c, ack, hi, msg);
		long k = match_state(dig, cnt, ack, hi, d, n, msg, sizeof(msg));
		cr_assert(k >= 0, "%s seed %" PRIu64 " cycle %ld (acked %ld, started %ld): %s",
			  name, seed, c, ack, hi, msg);
		total_ops += hi;
		total_acked += ack;
		beyond_ack += k - ack;
		replayed += (long)st.recovered_ops;
		/* The next cycle starts from what was recovered. */
		fm_free(&model);
		model = loaded;
	}
	fprintf(stderr,
		"  %s: %ld cycles in %.1f s, %ld ops started, %ld acknowledged, %ld unacknowledged "
		"ops survived, %ld WAL ops replayed, %ld kills before the first op\n",
		name, cycles, now_sec() - t0, total_ops, total_acked, beyond_ack, replayed, early);
	munmap((void *)started, 4096);
	fm_free(&model);
	pool_free(&pool);
	free(vbuf);
	free(dig);
	free(cnt);
	tmp_remove(dir);
}

Test(flexdb_crash, kill9_recovers_a_prefix_with_every_synced_op)
{
	kill9_run("kill9_sync_points", 0, scaled(100));
}

Test(flexdb_crash, kill9_recovers_every_returned_op_with_sync_writes)
{
	kill9_run("kill9_sync_writes", 1, scaled(40));
}

/* ======================================================================
 * Power loss through the I/O seam
 * ====================================================================== */

/* Writes every tracked file that still exists, under src, into the same
 * place under dst, as it could be after a power loss now (crashio's
 * cio_materialise, keeping the directory layout and leaving out unlinked
 * files). */
static int pl_materialise(struct cio *c, const char *src, const char *dst, uint64_t *r, int how,
			  long *changes)
{
	int rc = 0;
	long nch = 0;
	size_t sl = strlen(src);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/space", dst);
	mkdir(dst, 0755);
	mkdir(path, 0755);
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < c->nfiles && !rc; i++) {
		struct cio_file *f = &c->files[i];
		if (strncmp(f->path, src, sl) != 0 || access(f->path, F_OK) != 0)
			continue;
		struct cio_file t = {0};
		cio_img_resize(&t, f->img_size);
		if (f->img_size)
			memcpy(t.img, f->img, f->img_size);
		nch += (long)f->nch;
		for (size_t j = 0; j < f->nch; j++) {
			const struct cio_change *ch = &f->ch[j];
			int fate = how == CIO_ALL_APPLIED    ? 0
				   : how == CIO_NONE_APPLIED ? 4
							     : (int)rnd_below(r, 8);
			if (fate >= 4 && fate < 6)
				continue;
			if (ch->trunc) {
				if (fate < 4 || rnd_below(r, 2))
					cio_img_resize(&t, ch->off);
				continue;
			}
			uint64_t len = ch->len;
			if (fate >= 6) {
				if (rnd_below(r, 2) && len > 512)
					len = rnd_below(r, len / 512 + 1) * 512;
				else
					len = rnd_below(r, len + 1);
			}
			if (len)
				cio_img_write(&t, ch->data, ch->off, len);
		}
		snprintf(path, sizeof(path), "%s%s", dst, f->path + sl);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			rc = -errno;
		} else {
			uint64_t done = 0;
			while (done < t.img_size) {
				ssize_t n = write(fd, t.img + done, t.img_size - done);
				if (n <= 0) {
					rc = -EIO;
					break;
				}
				done += (uint64_t)n;
			}
			close(fd);
		}
		free(t.img);
	}
	pthread_mutex_unlock(&c->mu);
	if (changes)
		*changes = nch;
	return rc;
}

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
		int rc = pl_materialise(c, s->dir, s->img, &s->r,
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
	for (long ses = 0; ses < sessions; ses++) {
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
		name, sessions, nops, now_sec() - t0, total_syncs, checked, s->changes_in_play);
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

/* Tiny memtables: a WAL per memtable, handed to the committer after
 * every write or two, so several WAL files are in play at each crash and
 * the committer runs while the images are taken.  (It caught WALs whose
 * records could survive out of order across a memtable switch.) */
Test(flexdb_crash, power_loss_at_random_syncs_recovers_a_prefix)
{
	power_loss_run("power_loss", 0, 64u << 10, scaled(4), scaled(1500));
}

/* One WAL per session (the memtable is committed at close): torn WAL
 * tails and the FlexSpace's own recovery, without WAL switches. */
Test(flexdb_crash, power_loss_with_one_wal_per_session_recovers_a_prefix)
{
	power_loss_run("power_loss_one_wal", 0, 0, scaled(4), scaled(3000));
}

Test(flexdb_crash, power_loss_with_sync_writes_keeps_every_returned_write)
{
	power_loss_run("power_loss_sync_writes", 1, 64u << 10, scaled(3), scaled(600));
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
	uint32_t format = 0;
	cr_assert_eq(pread(fd, &format, 4, 8), 4);
	uint64_t o = format == 1 ? 32 : 8192;
	int n = 0;
	while (n < max && o + 24 <= (uint64_t)st.st_size) {
		uint8_t h[24];
		cr_assert_eq(pread(fd, h, 24, (off_t)o), 24);
		uint32_t magic, l;
		memcpy(&magic, h, 4);
		memcpy(&l, h + 4, 4);
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
			struct flexdb *db;
			int rc = flexdb_open(dir, NULL, &db);
			cr_expect_eq(rc, FLEX_ECORRUPT, "sync_writes %d, variant %d: open: %s", sw,
				     variant, flex_strerror(rc));
			if (rc == 0)
				flexdb_close(db);
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
	flexspace_extents(fs, 0, UINT64_MAX, anchor_fn, &off);
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
		copy_store(dir, work);
		char k[16], next[16];
		snprintf(k, sizeof(k), "r-%04d", i);
		snprintf(next, sizeof(next), "r-%04d", i + 1);
		flip_key(work, k, 6);
		struct flexdb *db;
		cr_assert_eq(flexdb_open(work, NULL, &db), 0);
		int rc = flexdb_get(db, next, strlen(next), NULL, 0, NULL);
		cr_expect_eq(rc, FLEX_ECORRUPT, "get %s after damage to %s: %d", next, k, rc);
		cr_expect_eq(flexdb_check(db), FLEX_ECORRUPT);
		flexdb_close(db);
	}
	tmp_remove(dir);
	tmp_remove(work);
}

/* A damaged key in the pair that starts an interval became the interval's
 * key at open, sending lookups of the true key to the previous interval
 * ("absent").  A short pair is verified at open; one too long to read
 * there is verified when a lookup misses just before it. */
Test(flexdb_crash, damaged_interval_key_is_caught)
{
	for (int longv = 0; longv < 2; longv++) {
		char dir[256];
		fdb_tmpdir(dir, sizeof(dir), "ikey");
		/* Even keys: the damaged key stays below the next interval's. */
		db_simple(dir, longv ? 12 : 100, longv ? 6000 : 20, 2);
		char k[16];
		snprintf(k, sizeof(k), "r-%04d", first_anchor(dir));
		flip_key(dir, k, 0);
		struct flexdb *db;
		int rc = flexdb_open(dir, NULL, &db);
		if (!longv) {
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
