/*
 * flex_io.c - the default file-operations table (contract: include/flex_io.h)
 * and the loop helpers that work over any table.
 *
 * Every layer reaches files only through a struct flex_io so that tests can
 * substitute a table that fails, shortens or drops I/O.  The table built here
 * is the real one: each single operation is the system call, retried on
 * EINTR, with the error returned as -errno instead of through errno (errno
 * is per thread and easily clobbered; a return value is not).
 *
 * The batch operations are what FlexSpace uses to write a log segment or
 * read many scattered extents at once.  Issuing them through io_uring keeps
 * up to FLEX_RING_DEPTH transfers in flight with one system call per round
 * instead of one per element.  io_uring is not always allowed (seccomp
 * profiles of container runtimes refuse io_uring_setup with EPERM, old
 * kernels lack it, the sysctl kernel.io_uring_disabled, RLIMIT_MEMLOCK), so
 * the process probes it once and otherwise runs the same batches as a
 * pread/pwrite loop.  Results are identical either way; only speed differs.
 *
 * Rings and threads.  A ring is not safe for concurrent submitters, and a
 * lock around one shared ring would serialise every thread's I/O, so each
 * thread gets its own ring, created on that thread's first batch call and
 * destroyed by a pthread_key destructor when the thread exits.  A batch call
 * waits for all of its completions before returning, so a ring never holds
 * requests between calls and the caller's buffers are never referenced after
 * the call returns.
 *
 * Fork.  io_uring rings are shared mappings: a forked child must not touch
 * the parent's ring.  A pthread_atfork child handler bumps a generation
 * counter, which makes the forking thread's inherited ring stale (the child
 * unmaps its copy and creates its own on next use), and forgets the probe
 * result, so that the child probes afresh and honours a FLEX_NO_IO_URING it
 * set after fork.  Rings of other parent threads are not reachable in the
 * child and are left to the kernel at the child's exit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flex_io.h"

/* Ring size: the most transfers one thread keeps in flight.  64 saturates
 * NVMe queues for the extent sizes FlexSpace uses while keeping a ring's
 * locked memory small (a few KiB), which matters because every I/O thread
 * owns one.  Not stored on disk; free to tune. */
#define FLEX_RING_DEPTH 64

/* Largest single submission.  io_uring's length field is 32 bits and Linux
 * caps one read/write near 2 GiB anyway; longer elements are transferred in
 * pieces of this size by the short-transfer loop. */
#define FLEX_MAX_XFER ((size_t)1 << 30)

/* ---- single operations ------------------------------------------------- */

/* Offsets travel as uint64_t but the kernel takes a signed off_t, and to
 * io_uring an offset of (uint64_t)-1 means "the current file position":
 * reject anything whose end does not fit before it reaches a system call. */
static int range_ok(uint64_t off, size_t len)
{
	return off <= (uint64_t)INT64_MAX && (uint64_t)len <= (uint64_t)INT64_MAX - off;
}

static int px_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	int fd;
	/* O_CLOEXEC: a library's descriptors must not leak into programs the
	 * application executes (they would keep files and locks alive). */
	do
		fd = open(path, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	return fd < 0 ? -errno : fd;
}

static int px_close(const struct flex_io *io, int fd)
{
	(void)io;
	/* Never retry close: Linux releases the descriptor even when close
	 * reports EINTR, and a retry could close a descriptor another thread
	 * has just been given.  EINTR therefore means "closed". */
	if (close(fd) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

static ssize_t px_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	(void)io;
	ssize_t r;
	if (!range_ok(off, len))
		return -EINVAL;
	do
		r = pread(fd, buf, len, (off_t)off);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static ssize_t px_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
			    uint64_t off)
{
	(void)io;
	ssize_t r;
	if (!range_ok(off, len))
		return -EINVAL;
	do
		r = pwrite(fd, buf, len, (off_t)off);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static int px_fsync(const struct flex_io *io, int fd)
{
	(void)io;
	int r;
	do
		r = fsync(fd);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static int px_fdatasync(const struct flex_io *io, int fd)
{
	(void)io;
	int r;
	do
		r = fdatasync(fd);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static int px_ftruncate(const struct flex_io *io, int fd, uint64_t size)
{
	(void)io;
	int r;
	if (size > (uint64_t)INT64_MAX)
		return -EINVAL;
	do
		r = ftruncate(fd, (off_t)size);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static int px_fallocate(const struct flex_io *io, int fd, int mode, uint64_t off, uint64_t len)
{
	(void)io;
	int r;
	if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
		return -EINVAL;
	do
		r = fallocate(fd, mode, (off_t)off, (off_t)len);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static int px_fsize(const struct flex_io *io, int fd, uint64_t *size)
{
	(void)io;
	struct stat st;
	if (!size)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	*size = (uint64_t)st.st_size;
	return 0;
}

/* ---- loop helpers ------------------------------------------------------ */

FLEX_EXPORT int flex_io_read_full(const struct flex_io *io, int fd, void *buf, size_t len,
				  uint64_t off)
{
	size_t done = 0;
	if (!io || !io->pread || (!buf && len))
		return -EINVAL;
	if (!range_ok(off, len))
		return -EINVAL;
	while (done < len) {
		ssize_t r = io->pread(io, fd, (char *)buf + done, len - done, off + done);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -ENODATA;
		/* A table claiming more than it was asked for is broken;
		 * trusting it would run past the buffer. */
		if ((size_t)r > len - done)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

FLEX_EXPORT int flex_io_write_full(const struct flex_io *io, int fd, const void *buf,
				   size_t len, uint64_t off)
{
	size_t done = 0;
	if (!io || !io->pwrite || (!buf && len))
		return -EINVAL;
	if (!range_ok(off, len))
		return -EINVAL;
	while (done < len) {
		ssize_t r = io->pwrite(io, fd, (const char *)buf + done, len - done, off + done);
		if (r < 0)
			return (int)r;
		/* pwrite returning 0 for a non-empty buffer makes no progress;
		 * looping on it would never end. */
		if (r == 0 || (size_t)r > len - done)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* ---- batches without io_uring ------------------------------------------ */

static int fallback_batch(int fd, const struct flex_iovec *v, int n, int is_write)
{
	for (int i = 0; i < n; i++) {
		int r;
		if (is_write)
			r = flex_io_write_full(flex_io_posix(), fd, v[i].buf, v[i].len, v[i].off);
		else
			r = flex_io_read_full(flex_io_posix(), fd, v[i].buf, v[i].len, v[i].off);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- per-thread rings -------------------------------------------------- */

/* One in-flight transfer: which element, and how much of it is done (a
 * short completion is resubmitted for the rest from the same slot). */
struct ring_slot {
	int idx;
	size_t done;
};

struct thread_ring {
	struct io_uring ring;
	unsigned gen; /* fork generation the ring was created in */
	struct ring_slot slot[FLEX_RING_DEPTH];
};

enum { MODE_UNKNOWN = 0, MODE_URING, MODE_FALLBACK };

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t ring_key;
static int ring_key_ok;
/* Probe result of this process; reset to MODE_UNKNOWN in a forked child. */
static atomic_int uring_mode;
/* Incremented in every forked child; rings of an older generation were
 * inherited from the parent and must not be used. */
static atomic_uint fork_gen;

static void ring_free(struct thread_ring *tr)
{
	io_uring_queue_exit(&tr->ring);
	free(tr);
}

static void ring_destructor(void *p)
{
	if (p)
		ring_free(p);
}

static void after_fork_child(void)
{
	atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed);
	atomic_store_explicit(&uring_mode, MODE_UNKNOWN, memory_order_relaxed);
}

static void init_process(void)
{
	ring_key_ok = pthread_key_create(&ring_key, ring_destructor) == 0;
	/* Without the handler a child would reuse the parent's shared ring,
	 * so a process that cannot register it does not use io_uring. */
	if (ring_key_ok && pthread_atfork(NULL, NULL, after_fork_child) != 0)
		ring_key_ok = 0;
}

/* This thread's ring, created on first use; NULL when it cannot be. */
static struct thread_ring *thread_ring_get(void)
{
	unsigned gen = atomic_load_explicit(&fork_gen, memory_order_relaxed);
	struct thread_ring *tr = pthread_getspecific(ring_key);

	if (tr && tr->gen != gen) {
		/* Inherited across fork: unmap this process's copy and close
		 * its descriptor; the parent's ring is unaffected. */
		pthread_setspecific(ring_key, NULL);
		ring_free(tr);
		tr = NULL;
	}
	if (tr)
		return tr;
	tr = calloc(1, sizeof(*tr));
	if (!tr)
		return NULL;
	if (io_uring_queue_init(FLEX_RING_DEPTH, &tr->ring, 0) < 0) {
		free(tr);
		return NULL;
	}
	tr->gen = gen;
	if (pthread_setspecific(ring_key, tr) != 0) {
		ring_free(tr);
		return NULL;
	}
	return tr;
}

static int env_disables_uring(void)
{
	const char *s = getenv("FLEX_NO_IO_URING");
	return s && *s && strcmp(s, "0") != 0;
}

/* IORING_OP_READ/WRITE arrived in Linux 5.6; a kernel with io_uring but
 * without them would fail every element with -EINVAL. */
static int ring_has_rw(struct io_uring *ring)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(ring);
	int ok;
	if (!p)
		return 0;
	ok = io_uring_opcode_supported(p, IORING_OP_READ) &&
	     io_uring_opcode_supported(p, IORING_OP_WRITE);
	io_uring_free_probe(p);
	return ok;
}

/* The probe: decided by the first caller in each process.  Concurrent first
 * callers may both probe; they reach the same answer and the first to
 * publish it wins. */
static int uring_mode_get(void)
{
	int m, want, expected = MODE_UNKNOWN;

	pthread_once(&init_once, init_process);
	m = atomic_load_explicit(&uring_mode, memory_order_acquire);
	if (m != MODE_UNKNOWN)
		return m;
	if (!ring_key_ok || env_disables_uring()) {
		want = MODE_FALLBACK;
	} else {
		struct thread_ring *tr = thread_ring_get();
		want = tr && ring_has_rw(&tr->ring) ? MODE_URING : MODE_FALLBACK;
	}
	if (!atomic_compare_exchange_strong_explicit(&uring_mode, &expected, want,
						     memory_order_acq_rel, memory_order_acquire))
		want = expected;
	return want;
}

FLEX_EXPORT int flex_io_uring_active(void)
{
	return uring_mode_get() == MODE_URING;
}

/* ---- batches through io_uring ------------------------------------------ */

/* Queue the rest of the element held by slot s.  Cannot run out of SQEs:
 * the ring has at least FLEX_RING_DEPTH of them and at most that many slots
 * are ever busy, submitted or not. */
static int ring_queue(struct thread_ring *tr, int s, int fd, const struct flex_iovec *v,
		      int is_write)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&tr->ring);
	const struct flex_iovec *e = &v[tr->slot[s].idx];
	size_t done = tr->slot[s].done;
	size_t left = e->len - done;
	unsigned nb = (unsigned)(left > FLEX_MAX_XFER ? FLEX_MAX_XFER : left);

	if (!sqe)
		return -EBUSY;
	if (is_write)
		io_uring_prep_write(sqe, fd, (const char *)e->buf + done, nb, e->off + done);
	else
		io_uring_prep_read(sqe, fd, (char *)e->buf + done, nb, e->off + done);
	io_uring_sqe_set_data64(sqe, (uint64_t)s);
	return 0;
}

/* Wait for the completions of requests the kernel has already taken, so
 * that none still points into the caller's buffers.  Returns 0 when all
 * arrived. */
static int ring_drain(struct thread_ring *tr, unsigned inflight)
{
	unsigned pending = inflight - io_uring_sq_ready(&tr->ring);
	while (pending > 0) {
		struct io_uring_cqe *cqe;
		int r = io_uring_wait_cqe(&tr->ring, &cqe);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		io_uring_cqe_seen(&tr->ring, cqe);
		pending--;
	}
	return 0;
}

/*
 * Keeps up to FLEX_RING_DEPTH elements in flight: whenever completions are
 * reaped, freed slots take the next elements, and short transfers are
 * resubmitted for their remainder.  After the first failure no new elements
 * are started; those in flight are waited for and the error of the
 * lowest-numbered failed element is returned.
 *
 * Returns 1 when the ring itself failed (io_uring_enter refused the
 * submission): the caller then destroys the ring, whose unsubmitted entries
 * must never be submitted later, and redoes the batch without io_uring.
 * Redoing is safe because every transfer is idempotent.
 */
static int ring_batch(struct thread_ring *tr, int fd, const struct flex_iovec *v, int n,
		      int is_write, int *status)
{
	int free_slot[FLEX_RING_DEPTH];
	int nfree = FLEX_RING_DEPTH;
	unsigned inflight = 0;
	int next = 0;
	int err = 0, err_idx = INT_MAX;

	for (int s = 0; s < FLEX_RING_DEPTH; s++)
		free_slot[s] = FLEX_RING_DEPTH - 1 - s;

	for (;;) {
		while (!err && nfree > 0 && next < n) {
			if (v[next].len == 0) {
				next++;
				continue;
			}
			int s = free_slot[--nfree];
			tr->slot[s].idx = next++;
			tr->slot[s].done = 0;
			if (ring_queue(tr, s, fd, v, is_write) < 0)
				goto ring_failed;
			inflight++;
		}
		if (inflight == 0)
			break;

		int r = io_uring_submit_and_wait(&tr->ring, 1);
		if (r == -EINTR)
			continue;
		if (r < 0)
			goto ring_failed;

		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int requeue_failed = 0;
		io_uring_for_each_cqe(&tr->ring, head, cqe)
		{
			int s = (int)io_uring_cqe_get_data64(cqe);
			struct ring_slot *sl = &tr->slot[s];
			const struct flex_iovec *e = &v[sl->idx];
			int res = cqe->res;
			int fail = 0;

			seen++;
			if (res == -EINTR) {
				res = 0; /* retry the same piece */
			} else if (res < 0) {
				fail = res;
			} else if (res == 0) {
				/* Read: end of file.  Write: no progress, which
				 * would loop forever if retried. */
				fail = is_write ? -EIO : -ENODATA;
			} else if ((size_t)res > e->len - sl->done) {
				fail = -EIO;
			} else {
				sl->done += (size_t)res;
			}
			if (fail && sl->idx < err_idx) {
				err = fail;
				err_idx = sl->idx;
			}
			if (!fail && !err && sl->done < e->len && !requeue_failed) {
				if (ring_queue(tr, s, fd, v, is_write) == 0)
					continue; /* still in flight */
				requeue_failed = 1;
			}
			free_slot[nfree++] = s;
			inflight--;
		}
		io_uring_cq_advance(&tr->ring, seen);
		if (requeue_failed)
			goto ring_failed;
	}
	*status = err;
	return 0;

ring_failed:
	/* Entries queued but not taken by the kernel are counted in inflight
	 * and discarded with the ring; only those taken are waited for.  If
	 * even waiting fails, closing the ring cancels what is left. */
	ring_drain(tr, inflight);
	return 1;
}

static int batch(int fd, const struct flex_iovec *v, int n, int is_write)
{
	if (n < 0 || (n > 0 && !v))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (!range_ok(v[i].off, v[i].len) || (!v[i].buf && v[i].len))
			return -EINVAL;
	if (n == 0)
		return 0;
	if (uring_mode_get() == MODE_URING) {
		struct thread_ring *tr = thread_ring_get();
		int status;
		/* A thread whose ring cannot be created (descriptor or
		 * memlock limits) still gets its I/O done, just slower. */
		if (tr) {
			if (ring_batch(tr, fd, v, n, is_write, &status) == 0)
				return status;
			pthread_setspecific(ring_key, NULL);
			ring_free(tr);
		}
	}
	return fallback_batch(fd, v, n, is_write);
}

static int px_write_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	return batch(fd, v, n, 1);
}

static int px_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	return batch(fd, v, n, 0);
}

/* ---- names ------------------------------------------------------------- */

static int px_mkdir(const struct flex_io *io, const char *path, mode_t mode)
{
	(void)io;
	return mkdir(path, mode) ? -errno : 0;
}

static int px_rmdir(const struct flex_io *io, const char *path)
{
	(void)io;
	return rmdir(path) ? -errno : 0;
}

static int px_unlink(const struct flex_io *io, const char *path)
{
	(void)io;
	return unlink(path) ? -errno : 0;
}

static int px_rename(const struct flex_io *io, const char *from, const char *to)
{
	(void)io;
	return rename(from, to) ? -errno : 0;
}

static int px_list(const struct flex_io *io, const char *dir,
		   int (*fn)(void *arg, const char *name), void *arg)
{
	(void)io;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int rc = 0;
	struct dirent *e;
	for (;;) {
		errno = 0;
		if ((e = readdir(d)) == NULL) {
			rc = -errno;
			break;
		}
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    (rc = fn(arg, e->d_name)) != 0)
			break;
	}
	closedir(d);
	return rc;
}

static int px_lock(const struct flex_io *io, int fd, int exclusive)
{
	(void)io;
	int rc;
	do
		rc = flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB);
	while (rc && errno == EINTR);
	return rc ? -errno : 0;
}

static int px_writeback(const struct flex_io *io, int fd, uint64_t off, uint64_t len)
{
	(void)io;
	if (off > INT64_MAX || len > INT64_MAX - off)
		return -EINVAL;
	if (!len)
		return 0; /* (to sync_file_range, 0 would mean "to the end") */
	return sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE) ? -errno : 0;
}

static const struct flex_io px_io = {
	.open = px_open,
	.close = px_close,
	.pread = px_pread,
	.pwrite = px_pwrite,
	.fsync = px_fsync,
	.fdatasync = px_fdatasync,
	.ftruncate = px_ftruncate,
	.fallocate = px_fallocate,
	.fsize = px_fsize,
	.write_batch = px_write_batch,
	.read_batch = px_read_batch,
	.mkdir = px_mkdir,
	.rmdir = px_rmdir,
	.unlink = px_unlink,
	.rename = px_rename,
	.list = px_list,
	.lock = px_lock,
	.writeback = px_writeback,
	.ctx = NULL,
};

FLEX_EXPORT const struct flex_io *flex_io_posix(void)
{
	return &px_io;
}

FLEX_EXPORT int flex_io_check(const struct flex_io *io)
{
	if (!io || !io->open || !io->close || !io->pread || !io->pwrite || !io->fsync ||
	    !io->fdatasync || !io->ftruncate || !io->fallocate || !io->fsize ||
	    !io->write_batch || !io->read_batch || !io->mkdir || !io->rmdir || !io->unlink ||
	    !io->rename || !io->list || !io->lock)
		return FLEX_EOPTION;
	return 0;
}
