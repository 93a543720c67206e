/*
 * test_full_fs.c - FlexSpace and FlexDB on a file system that really runs
 * out of space: a 16 MiB tmpfs mounted for the test.
 *
 * Each test forks a child that enters a private mount namespace (as root;
 * otherwise a user namespace too, like `unshare -rm`), mounts the tmpfs on
 * a fresh directory, and works there, so that nothing is left mounted if
 * it dies.  When neither namespace nor mount is allowed, the test says so
 * and is skipped.
 *
 * The child writes a filler file first, then fills the rest through the
 * library with a seeded workload (syncing every few operations) until an
 * operation fails.  Checked: the error is -ENOSPC (or FLEX_EFAILED, for a
 * FlexDB write that finds the background committer already failed by it),
 * never a signal or a hang; later changes and syncs return FLEX_EFAILED;
 * reads on the failed handle return; close returns; opening again on the
 * still-full file system fails cleanly or works.  Then the filler is
 * deleted, and the reopened store must pass its deep check and hold a
 * prefix of the workload that includes everything synced before the
 * failure (verify_recovered, flexdb_stream.h's match_state); it takes new
 * writes again.  The tmpfs is unmounted at the end.  Under
 * SANITIZE=address the child also checks that nothing leaked.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "flexdb.h"
#include "flexspace.h"
#include "lib/crashio.h"
#include "lib/flexdb_model.h"
#include "lib/flexdb_stream.h"

TestSuite(full_fs, .timeout = 300);

#define TMPFS_SIZE "16m"
#define FILLER_BYTES (4u << 20)

/* What the child reports. */
struct ff_result {
	int status; /* 0 passed, 1 failed, 2 skipped */
	char msg[1024];
	long ops, acked, failed_at, recovered, ops_after;
	int first_err;
	uint64_t bytes;
};

static int ff_fail(struct ff_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ff_fail(struct ff_result *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
	r->status = 1;
	return 1;
}

static int write_text(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* A mount namespace of our own (plus a user namespace when not
 * privileged), with mounts that do not propagate back. */
static int private_mounts(char *why, size_t cap)
{
	if (unshare(CLONE_NEWNS) != 0) {
		int e1 = errno;
		uid_t uid = getuid();
		gid_t gid = getgid();
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
			snprintf(why, cap, "unshare(CLONE_NEWNS): %s; with CLONE_NEWUSER: %s",
				 strerror(e1), strerror(errno));
			return -1;
		}
		char map[64];
		write_text("/proc/self/setgroups", "deny");
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		if (write_text("/proc/self/uid_map", map) != 0) {
			snprintf(why, cap, "writing uid_map: %s", strerror(errno));
			return -1;
		}
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		if (write_text("/proc/self/gid_map", map) != 0) {
			snprintf(why, cap, "writing gid_map: %s", strerror(errno));
			return -1;
		}
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		snprintf(why, cap, "making mounts private: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int fill_file(const char *path, uint64_t bytes)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	static uint8_t buf[65536];
	memset(buf, 0xf1, sizeof(buf));
	int rc = 0;
	for (uint64_t done = 0; done < bytes && !rc; done += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			rc = -ENOSPC;
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

struct ff_call {
	int (*body)(const char *mnt, struct ff_result *r);
	const char *mnt;
	struct ff_result *r;
};

static void *ff_thread(void *arg)
{
	struct ff_call *c = arg;
	c->body(c->mnt, c->r);
	return NULL;
}

/* Runs body in a child on a fresh tmpfs; the parent asserts on the result. */
static void on_tmpfs(const char *name, int (*body)(const char *mnt, struct ff_result *r),
		     struct ff_result *out)
{
	char mnt[PATH_MAX];
	snprintf(mnt, sizeof(mnt), "/tmp/flex_full_fs_XXXXXX");
	cr_assert_not_null(mkdtemp(mnt), "mkdtemp: %s", strerror(errno));
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(pfd[0]);
		alarm(240);
		struct ff_result r = {0};
		char why[512];
		if (private_mounts(why, sizeof(why)) != 0) {
			r.status = 2;
			snprintf(r.msg, sizeof(r.msg), "no private mount namespace (%s)", why);
		} else if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV,
				 "size=" TMPFS_SIZE ",mode=0755") != 0) {
			r.status = 2;
			snprintf(r.msg, sizeof(r.msg), "mount -t tmpfs -o size=%s: %s", TMPFS_SIZE,
				 strerror(errno));
		} else {
			/* On a thread of its own: allocations on this one pass
			 * through the Criterion runner, whose frames
			 * test/lsan.supp suppresses (test_flexdb_fault.c). */
			struct ff_call call = {body, mnt, &r};
			pthread_t th;
			if (pthread_create(&th, NULL, ff_thread, &call) != 0)
				ff_fail(&r, "pthread_create failed");
			else
				pthread_join(th, NULL);
			if (umount2(mnt, 0) != 0 && r.status == 0)
				ff_fail(&r, "umount %s: %s", mnt, strerror(errno));
#if defined(__SANITIZE_ADDRESS__)
			/* The child leaves by _exit: check for leaks here. */
			if (__lsan_do_recoverable_leak_check() && r.status == 0)
				ff_fail(&r, "memory left behind (LeakSanitizer report above)");
#endif
		}
		ssize_t n = write(pfd[1], &r, sizeof(r));
		_exit(n == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(pfd[1]);
	memset(out, 0, sizeof(*out));
	size_t got = 0;
	while (got < sizeof(*out)) {
		ssize_t n = read(pfd[0], (char *)out + got, sizeof(*out) - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pfd[0]);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	rmdir(mnt);
	cr_assert(got == sizeof(*out), "%s: the child died (%s %d) instead of reporting", name,
		  WIFSIGNALED(st) ? "signal" : "exit status",
		  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	if (out->status == 2) {
		fprintf(stderr, "%s: skipped: %s\n", name, out->msg);
		cr_skip_test("%s", out->msg);
	}
	cr_assert_eq(out->status, 0, "%s: %s", name, out->msg);
}

/* ---- FlexSpace ------------------------------------------------------------------ */

static int space_body(const char *mnt, struct ff_result *r)
{
	char filler[PATH_MAX], dir[PATH_MAX];
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	snprintf(dir, sizeof(dir), "%s/space", mnt);
	int rc = fill_file(filler, FILLER_BYTES);
	if (rc)
		return ff_fail(r, "filler: %s", strerror(-rc));
	uint64_t seed = test_seed("full_fs_flexspace"), rs = seed;
	struct flexspace_options o = tiny_options();
	struct flexspace *fs;
	if ((rc = flexspace_open(dir, &o, &fs)) != 0)
		return ff_fail(r, "open: %s", flex_strerror(rc));
	size_t cap = 4096;
	uint64_t *sizes = malloc(cap * sizeof(*sizes)), *hashes = malloc(cap * sizeof(*hashes));
	uint8_t *buf = malloc(64u << 10);
	struct model m = {0};
	sizes[0] = 0;
	hashes[0] = model_hash(&m);
	long i = 0, acked = 0;
	int bad = 0;
	/* Appends, overwrites and inserts of up to 64 KiB, a sync every few;
	 * the space only grows, so the file system fills. */
	for (;;) {
		if ((size_t)i + 2 >= cap) {
			cap *= 2;
			sizes = realloc(sizes, cap * sizeof(*sizes));
			hashes = realloc(hashes, cap * sizeof(*hashes));
		}
		struct op op = {.dseed = rnd(&rs), .len = 4096 + rnd_below(&rs, 60u << 10)};
		uint64_t k = rnd_below(&rs, 10);
		op.type = k < 6 ? OP_WRITE : k < 8 ? OP_INSERT : k < 9 ? OP_WRITE : OP_SYNC;
		op.off = k < 6 || !m.size ? m.size : rnd_below(&rs, m.size);
		model_apply(&m, &op, buf);
		i++;
		sizes[i] = m.size;
		hashes[i] = model_hash(&m);
		rc = space_apply(fs, &op, buf);
		if (rc == 0) {
			if (op.type == OP_SYNC)
				acked = i;
			if (i > 100000) {
				bad = ff_fail(r, "16 MiB never filled up");
				break;
			}
			continue;
		}
		r->first_err = rc;
		if (rc != -ENOSPC) {
			bad = ff_fail(r, "op %ld (%s): %s (%d), not ENOSPC", i, op_names[op.type],
				      flex_strerror(rc), rc);
			break;
		}
		/* Failed: changes and syncs are refused, reads go on. */
		int w2 =
		    space_apply(fs, &(struct op){.type = OP_WRITE, .len = 10, .dseed = 1}, buf);
		int s2 = flexspace_sync(fs);
		int c2 = flexspace_collapse(fs, 0, 1);
		ssize_t rd = flexspace_read(fs, buf, 0, 4096);
		if (w2 != FLEX_EFAILED || s2 != FLEX_EFAILED || c2 != FLEX_EFAILED)
			bad =
			    ff_fail(r,
				    "after ENOSPC at op %ld: write %d, sync %d, collapse %d (want "
				    "FLEX_EFAILED)",
				    i, w2, s2, c2);
		else if (rd < 0 && rd != FLEX_ECORRUPT && rd != -EIO)
			bad = ff_fail(r, "a read on the failed handle: %zd", rd);
		break;
	}
	r->ops = i;
	r->acked = acked;
	r->failed_at = i;
	r->bytes = m.size;
	rc = flexspace_close(fs);
	if (!bad && rc != FLEX_EFAILED && rc != -ENOSPC && rc != 0)
		bad = ff_fail(r, "close of the failed space: %s (%d)", flex_strerror(rc), rc);
	/* Reopening while the file system is still full: an error, or a
	 * space that works; never a crash. */
	if (!bad && flexspace_open(dir, &o, &fs) == 0)
		flexspace_close(fs);
	if (!bad && unlink(filler) != 0)
		bad = ff_fail(r, "unlink filler: %s", strerror(errno));
	long k = -1;
	struct why w = {""};
	if (!bad && verify_recovered(dir, &o, sizes, hashes, acked, i, &k, &w))
		bad = ff_fail(r, "after freeing space (synced op %ld, failed op %ld): %s", acked, i,
			      w.msg);
	r->recovered = k;
	if (!bad) {
		/* The recovered space takes writes again. */
		if ((rc = flexspace_open(dir, &o, &fs)) != 0)
			bad = ff_fail(r, "reopen for writing: %s", flex_strerror(rc));
		else if (flexspace_write(fs, buf, flexspace_size(fs), 8192) != 8192 ||
			 flexspace_sync(fs) != 0 || flexspace_check(fs) != 0)
			bad = ff_fail(r, "writing after recovery failed");
		if (!rc && (rc = flexspace_close(fs)) != 0 && !bad)
			bad = ff_fail(r, "close after recovery: %s", flex_strerror(rc));
		r->ops_after = 1;
	}
	model_free(&m);
	free(sizes);
	free(hashes);
	free(buf);
	return bad;
}

Test(full_fs, flexspace_fills_a_tmpfs_fails_with_enospc_and_recovers_what_was_synced)
{
	struct ff_result r;
	on_tmpfs("full_fs_flexspace", space_body, &r);
	fprintf(stderr,
		"full_fs_flexspace: ENOSPC at op %ld (%" PRIu64 " bytes in the model), last sync "
		"at op %ld, recovered state %ld, 0 synced ops lost\n",
		r.failed_at, r.bytes, r.acked, r.recovered);
}

/* ---- FlexDB ------------------------------------------------------------------------ */

static void db_key(char *k, long i)
{
	snprintf(k, 32, "full-fs-key-%08ld", i);
}

/* The memtable size of the run (inherited by the child). */
static uint64_t db_memtable;

static int db_body(const char *mnt, struct ff_result *r)
{
	char filler[PATH_MAX], dir[PATH_MAX];
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	snprintf(dir, sizeof(dir), "%s/db", mnt);
	int rc = fill_file(filler, FILLER_BYTES);
	if (rc)
		return ff_fail(r, "filler: %s", strerror(-rc));
	uint64_t seed = test_seed("full_fs_flexdb"), rs = seed;
	struct flexdb_options o = fdb_tiny_opts();
	o.memtable_size = db_memtable;
	struct flexdb *db;
	if ((rc = flexdb_open(dir, &o, &db)) != 0)
		return ff_fail(r, "open: %s", flex_strerror(rc));
	size_t cap = 4096;
	uint64_t *dig = malloc(cap * sizeof(*dig));
	size_t *cnt = malloc(cap * sizeof(*cnt));
	uint8_t *val = malloc(16u << 10);
	struct fmodel m = {0};
	dig[0] = 0;
	cnt[0] = 0;
	long i = 0, acked = 0, keys = 0;
	int bad = 0;
	char key[32];
	/* New keys mostly, some overwrites and deletes, values of 1-16 KiB,
	 * a sync every ~16 operations: the store only grows. */
	for (;;) {
		if ((size_t)i + 2 >= cap) {
			cap *= 2;
			dig = realloc(dig, cap * sizeof(*dig));
			cnt = realloc(cnt, cap * sizeof(*cnt));
		}
		uint64_t k = rnd_below(&rs, 16);
		i++;
		if (k == 0) {
			rc = flexdb_sync(db);
			if (rc == 0)
				acked = i;
		} else if (k == 1 && keys) {
			db_key(key, (long)rnd_below(&rs, (uint64_t)keys));
			fm_del(&m, key, (uint32_t)strlen(key));
			rc = flexdb_delete(db, key, strlen(key));
		} else {
			db_key(key, k < 4 && keys ? (long)rnd_below(&rs, (uint64_t)keys) : keys++);
			uint32_t vn = 1 + (uint32_t)rnd_below(&rs, 16u << 10);
			val_fill(rnd(&rs), val, vn);
			fm_put(&m, key, (uint32_t)strlen(key), val, vn);
			rc = flexdb_put(db, key, strlen(key), val, vn);
		}
		dig[i] = m.digest;
		cnt[i] = m.n;
		if (rc == 0) {
			if (i > 100000) {
				bad = ff_fail(r, "16 MiB never filled up");
				break;
			}
			continue;
		}
		r->first_err = rc;
		/* The writer sees the WAL's ENOSPC, or the failure the committer
		 * met first in the FlexSpace. */
		if (rc != -ENOSPC && rc != FLEX_EFAILED) {
			bad = ff_fail(r, "op %ld: %s (%d), not ENOSPC or FLEX_EFAILED", i,
				      flex_strerror(rc), rc);
			break;
		}
		int p2 = flexdb_put(db, "after", 5, "x", 1);
		int d2 = flexdb_delete(db, key, strlen(key));
		int s2 = flexdb_sync(db);
		if (p2 != FLEX_EFAILED || d2 != FLEX_EFAILED || s2 != FLEX_EFAILED) {
			bad = ff_fail(r,
				      "after %s at op %ld: put %d, delete %d, sync %d (want "
				      "FLEX_EFAILED)",
				      flex_strerror(rc), i, p2, d2, s2);
			break;
		}
		/* Reads on the failed handle return (whatever they find). */
		size_t vn;
		db_key(key, 0);
		flexdb_get(db, key, strlen(key), val, 16u << 10, &vn);
		struct flexdb_iter *it;
		if (flexdb_iter_open(db, &it) == 0) {
			for (int j = 0, ir = flexdb_iter_seek(it, NULL, 0);
			     ir == 0 && flexdb_iter_valid(it) && j < 100; j++)
				ir = flexdb_iter_next(it);
			flexdb_iter_close(it);
		}
		break;
	}
	r->ops = i;
	r->acked = acked;
	r->failed_at = i;
	r->bytes = 0;
	for (size_t j = 0; j < m.n; j++)
		r->bytes += m.e[j].kn + m.e[j].vn;
	rc = flexdb_close(db);
	if (!bad && rc != FLEX_EFAILED && rc != -ENOSPC && rc != 0)
		bad = ff_fail(r, "close of the failed store: %s (%d)", flex_strerror(rc), rc);
	/* Reopening while still full: an error or a working store. */
	if (!bad && flexdb_open(dir, &o, &db) == 0)
		flexdb_close(db);
	if (!bad && unlink(filler) != 0)
		bad = ff_fail(r, "unlink filler: %s", strerror(errno));
	if (!bad) {
		uint64_t d = 0;
		size_t n = 0;
		char msg[1024];
		if (recover_digest(dir, &o, &d, &n, NULL, NULL, msg, sizeof(msg)))
			bad = ff_fail(r, "after freeing space: %s", msg);
		else if ((r->recovered = match_state(dig, cnt, acked, i, d, n, msg, sizeof(msg))) <
			 0)
			bad = ff_fail(r, "after freeing space (synced op %ld, failed op %ld): %s",
				      acked, i, msg);
	}
	if (!bad) {
		if ((rc = flexdb_open(dir, &o, &db)) != 0)
			bad = ff_fail(r, "reopen for writing: %s", flex_strerror(rc));
		else if (flexdb_put(db, "after", 5, "x", 1) != 0 || flexdb_sync(db) != 0 ||
			 flexdb_check(db) != 0)
			bad = ff_fail(r, "writing after recovery failed");
		if (!rc && (rc = flexdb_close(db)) != 0 && !bad)
			bad = ff_fail(r, "close after recovery: %s", flex_strerror(rc));
	}
	fm_free(&m);
	free(dig);
	free(cnt);
	free(val);
	return bad;
}

static void db_test(const char *name, uint64_t memtable)
{
	struct ff_result r;
	db_memtable = memtable;
	on_tmpfs(name, db_body, &r);
	fprintf(stderr,
		"%s: %s at op %ld (%" PRIu64 " bytes of pairs in the model), last sync at op %ld, "
		"recovered state %ld, 0 synced ops lost\n",
		name, r.first_err == -ENOSPC ? "ENOSPC" : "FLEX_EFAILED", r.failed_at, r.bytes,
		r.acked, r.recovered);
}

/* 64 KiB memtables: the committer fills the FlexSpace and fails first;
 * writers then get FLEX_EFAILED. */
Test(full_fs, flexdb_fills_a_tmpfs_fails_cleanly_and_recovers_what_was_synced)
{
	db_test("full_fs_flexdb", FDB_TINY_MEMTABLE);
}

/* 1 MiB memtables: the WAL holds more, and often a WAL append meets ENOSPC
 * first, in the writer.  (Two of them, at most 2 MiB of WAL, still fit in
 * the FlexSpace once the filler is gone; with the 32 MiB default, recovery
 * would need room for a second copy of everything.) */
Test(full_fs, flexdb_with_larger_memtables_fails_cleanly_and_recovers_what_was_synced)
{
	db_test("full_fs_flexdb_1MiB_memtable", 1u << 20);
}
