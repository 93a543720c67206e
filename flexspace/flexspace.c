/*
 * flexspace.c - FlexSpace's API: open and recovery, the byte operations,
 * sync and close (paper section 4).
 *
 * Every change is made in three steps under the exclusive lock: data is
 * appended to the segment buffer (fs_seg.c), the extent tree is updated,
 * and a logical record of the tree change is buffered (fs_log.c).  A
 * write over existing bytes is a collapse of the old range plus an insert
 * of the new bytes at the same offset, as in the paper.  Durability comes
 * only from flexspace_sync (and close), which orders data before the log
 * records that refer to it; see docs/FORMAT.md for the protocol.  No
 * reader waits for the disk: syncs, tree commits and garbage collection
 * let the readers' lock go while they wait (flexspace_int.h, "Locking";
 * docs/DURABILITY.md).  The maintenance a change makes due (a tree commit
 * once the log is long, a collection once the data file holds too much
 * garbage) runs after the change has let its locks go, in the changing
 * thread, or in flexspace_maintain with the defer_maintenance option.
 *
 * Open replays the log on the last committed tree, recomputes the live
 * bytes of every segment from the tree, and commits, so that a recovered
 * space starts clean.  A read-only handle stops short of the commit: its
 * files are opened O_RDONLY, the replayed tree lives in memory only
 * (flextree's volatile_changes), and every change is refused before it
 * takes a lock.  A failed write or sync leaves the handle failed:
 * reads go on, changes return FLEX_EFAILED, and close discards the
 * unsynced state instead of committing it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/flex_brlock.h"
#include "../common/flex_ident.h"
#include "../common/flex_killpoint.h"
#include "flexspace_int.h"

int fs_fail(struct flexspace *fs, int rc)
{
	if (!fs->failed && rc)
		fs->failed = rc;
	return rc;
}

static int fs_path(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

int flexspace_options_check(const struct flexspace_options *opt, const char **field)
{
	const char *f = NULL;
	if (opt) {
		uint64_t seg = opt->segment_size ? opt->segment_size : FS_DEFAULT_SEGMENT;
		uint64_t log = opt->log_limit ? opt->log_limit : FS_DEFAULT_LOG_LIMIT;
		double gc = opt->gc_ratio != 0.0 ? opt->gc_ratio : FS_DEFAULT_GC_RATIO;
		if (seg < (64u << 10) || seg > (256u << 20) || (seg & (seg - 1)))
			f = "segment_size";
		else if (log < (64u << 10) || log > ((uint64_t)1 << 30))
			f = "log_limit";
		else if (!(gc >= 1.1 && gc <= 100.0)) /* NaN too */
			f = "gc_ratio";
		else if (opt->max_data_size > FLEXSPACE_MAX_SIZE)
			f = "max_data_size";
		else if (opt->io && flex_io_check(opt->io))
			f = "io";
	}
	if (field)
		*field = f;
	return f ? FLEX_EOPTION : 0;
}

static int fs_options(const struct flexspace_options *opt, struct flexspace *fs, int *create)
{
	int rc = flexspace_options_check(opt, NULL);
	if (rc)
		return rc;
	struct flexspace_options o = {0};
	if (opt)
		o = *opt;
	fs->io = o.io ? o.io : flex_io_posix();
	fs->seg_size = o.segment_size ? (uint32_t)o.segment_size : FS_DEFAULT_SEGMENT;
	fs->log_limit = o.log_limit ? o.log_limit : FS_DEFAULT_LOG_LIMIT;
	fs->gc_ratio = o.gc_ratio != 0.0 ? o.gc_ratio : FS_DEFAULT_GC_RATIO;
	fs->max_data = o.max_data_size ? o.max_data_size : FLEXSPACE_MAX_SIZE;
	fs->tree_cache = o.tree_cache_size;
	/* A read-only open never creates (flexspace.h). */
	fs->read_only = o.read_only != 0;
	*create = !o.no_create && !fs->read_only;
	fs->no_mmap = o.no_mmap || fs->io != flex_io_posix();
	fs->defer_maintenance = o.defer_maintenance != 0;
	fs->bounded = fs->max_data < FLEXSPACE_MAX_SIZE;
	return 0;
}

/* An empty LOG is a creation cut short (LOG is created first and its
 * header written last), and TREE may then be torn: it is cut back to
 * nothing so that it is created again.  But only a TREE that does not
 * open: one that does is left for fs_log_attach to judge (a committed
 * tree with data next to an empty LOG is damage, and truncating it here
 * silently emptied the space). */
static int fs_tree_torn(struct flexspace *fs, const char *path)
{
	struct flextree_options ro = {.io = fs->io, .read_only = 1};
	struct flextree *t;
	int rc = flextree_open(path, &ro, &t);
	if (rc == 0) {
		flextree_close(t);
		return 0;
	}
	if (rc != FLEX_ECORRUPT && rc != -ENOENT)
		return rc;
	int fd = fs->io->open(fs->io, path, O_WRONLY | O_CLOEXEC, 0);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	rc = fs->io->ftruncate(fs->io, fd, 0);
	int crc = fs->io->close(fs->io, fd);
	return rc ? rc : crc;
}

/* The sequence is: identity (flex_ident.h: nothing is created or written
 * in a directory the library cannot prove it made), lock, log header (for
 * the segment size), tree, log validation, data file, replay, live-byte
 * counts, clean commit; a store made before identities gets its IDENTITY
 * once it has opened. */
static int fs_open(struct flexspace *fs, const char *dir, int create)
{
	char path[PATH_MAX];
	int ident, partial;
	int rc = flex_ident_probe(fs->io, dir, FLEX_KIND_SPACE, create, &ident, &partial);
	if (rc)
		return rc;
	if (ident == FLEX_IDENT_NEW && (rc = flex_ident_mkdir(fs->io, dir)) != 0)
		return rc;
	fs->dir_fd = fs->io->open(fs->io, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fs->dir_fd < 0)
		return fs->dir_fd;
	if (ident == FLEX_IDENT_NEW &&
	    (rc = flex_ident_write(fs->io, dir, fs->dir_fd, FLEX_KIND_SPACE, partial)) != 0)
		return rc;

	if ((rc = fs_path(path, dir, "LOCK")) != 0)
		return rc;
	/* Readers share the lock, a writer holds it alone: either kind of
	 * handle is refused at once while the other is open. */
	int rw = fs->read_only ? O_RDONLY : O_RDWR | (create ? O_CREAT : 0);
	fs->lock_fd = fs->io->open(fs->io, path, rw | O_CLOEXEC, 0644);
	if (fs->lock_fd < 0)
		return fs->lock_fd;
	if ((rc = fs->io->lock(fs->io, fs->lock_fd, !fs->read_only)) != 0)
		return rc == -EWOULDBLOCK ? FLEX_EBUSY : rc;

	/* The segment size of an existing space is the one in its log. */
	if ((rc = fs_path(path, dir, "LOG")) != 0)
		return rc;
	uint32_t seg_size = fs->seg_size;
	int fresh = 0;
	if ((rc = fs_log_open(fs, path, create, &seg_size, &fresh)) != 0)
		return rc;
	/* Only a store whose IDENTITY proves it may have a LOG to initialise:
	 * a legacy one was recognised by its LOG header. */
	if (fresh && ident == FLEX_IDENT_LEGACY)
		return FLEX_ECORRUPT;
	/* A LOG still to be initialised needs create; without it nothing is
	 * written (flextree_open would initialise an empty TREE). */
	if (fresh && !create)
		return FLEX_ECORRUPT;
	if (seg_size < (64u << 10) || seg_size > (256u << 20) || (seg_size & (seg_size - 1)))
		return FLEX_ECORRUPT;
	fs->seg_size = seg_size;
	fs->max_extent = seg_size / 32;

	if ((rc = fs_path(path, dir, "TREE")) != 0)
		return rc;
	if (!create && access(path, F_OK) != 0)
		return -errno;
	if (fresh == 1 && create && (rc = fs_tree_torn(fs, path)) != 0)
		return rc;
	/* Lazy: fs_rebuild_valid reads every leaf at open anyway.  A
	 * read-only space replays its log into the tree in memory only. */
	struct flextree_options topt = {.io = fs->io,
					.max_extent = fs->max_extent,
					.merge_boundary = fs->seg_size,
					.cache_size = fs->tree_cache,
					.lazy_open = 1,
					.read_only = fs->read_only,
					.volatile_changes = fs->read_only};
	if ((rc = flextree_open(path, &topt, &fs->tree)) != 0)
		return rc;
	if ((rc = fs_log_attach(fs, fresh, create)) != 0)
		return rc;

	if ((rc = fs_path(path, dir, "DATA")) != 0)
		return rc;
	fs->data_fd = fs->io->open(fs->io, path, rw | O_CLOEXEC, 0644);
	if (fs->data_fd < 0)
		return fs->data_fd;
	uint64_t data_bytes;
	if ((rc = fs->io->fsize(fs->io, fs->data_fd, &data_bytes)) != 0)
		return rc;
	if ((rc = fs_seg_init(fs, data_bytes)) != 0)
		return rc;
	/* DATA once more, past the page cache, for flexspace_read_many (-1
	 * where the file system refuses O_DIRECT). */
	if (fs->map && (fs->direct_fd = fs->io->open(fs->io, path, O_RDONLY | O_DIRECT | O_CLOEXEC,
						     0)) < 0)
		fs->direct_fd = -1;
	if (fresh) {
		FLEX_KILLPOINT("fs.dir.sync.before");
		if ((rc = fs->io->fsync(fs->io, fs->dir_fd)) != 0)
			return rc;
		FLEX_KILLPOINT("fs.dir.sync.after");
	}

	uint64_t records;
	if ((rc = fs_log_replay(fs, &records)) != 0)
		return rc;
	fs->st.recovered_records = records;
	struct flextree_stats ts;
	flextree_stats(fs->tree, &ts);
	if (fs->log_base == ts.version) {
		fs->st.recovered_version = fs->log_base;
		fs->st.recovered_batches = fs->log_seq - 1;
	} else { /* the tree was committed after the log: it holds it all */
		fs->st.recovered_version = ts.version;
		fs->st.recovered_batches = 0;
	}
	if ((rc = fs_rebuild_valid(fs)) != 0)
		return rc;
	flextree_stats(fs->tree, &fs->tree_st);
	/* Read-only: the replayed state stays in memory, and the files as
	 * the last writer left them (a torn log tail included). */
	if (fs->read_only)
		return 0;
	if ((rc = fs_commit(fs)) != 0)
		return rc;
	if (ident == FLEX_IDENT_LEGACY && create)
		rc = flex_ident_write(fs->io, dir, fs->dir_fd, FLEX_KIND_SPACE, partial);
	return rc;
}

/* The tree is discarded, not closed: a healthy handle has committed it
 * already (fs_commit), and a failed one must not commit what it holds. */
static void fs_free(struct flexspace *fs)
{
	flextree_discard(fs->tree);
	fs_aring_exit(fs);
	fs_stage_exit(fs);
	fs_seg_free(fs);
	const int fds[] = {fs->data_fd, fs->direct_fd, fs->log_fd, fs->lock_fd, fs->dir_fd};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			fs->io->close(fs->io, fds[i]);
	flex_brlock_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->sync_mu);
	pthread_mutex_destroy(&fs->change_mu);
	pthread_mutex_destroy(&fs->ckpt_mu);
	free(fs->logbuf);
	free(fs->pinned);
	free(fs->dir);
	free(fs);
}

int flexspace_open(const char *dir, const struct flexspace_options *opt, struct flexspace **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!dir || !*dir)
		return -EINVAL;
	struct flexspace *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->dir_fd = fs->lock_fd = fs->data_fd = fs->direct_fd = fs->log_fd = -1;
	if (flex_brlock_init(&fs->lock) != 0) {
		free(fs);
		return -ENOMEM;
	}
	pthread_mutex_init(&fs->sync_mu, NULL);
	pthread_mutex_init(&fs->change_mu, NULL);
	pthread_mutex_init(&fs->ckpt_mu, NULL);
	int create;
	int rc = fs_options(opt, fs, &create);
	if (!rc && !(fs->dir = strdup(dir)))
		rc = -ENOMEM;
	if (!rc)
		rc = fs_open(fs, dir, create);
	if (rc) {
		fs_free(fs);
		return rc;
	}
	*out = fs;
	return 0;
}

int flexspace_close(struct flexspace *fs)
{
	if (!fs)
		return 0;
	pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	int rc = fs->failed ? FLEX_EFAILED : fs->read_only ? 0 : fs_commit(fs);
	pthread_mutex_unlock(&fs->change_mu);
	pthread_mutex_unlock(&fs->sync_mu);
	fs_free(fs);
	return rc;
}

/* ---- changes ------------------------------------------------------------ */

void fs_excl_lock(struct flexspace *fs)
{
	flex_brlock_wrlock(&fs->lock);
}

/* Every exclusive hold ends here, so the tree's counters readers see
 * through flexspace_stats are those of the tree they can read. */
void fs_excl_unlock(struct flexspace *fs)
{
	flextree_stats(fs->tree, &fs->tree_st);
	flex_brlock_wrunlock(&fs->lock);
	if (fs->nwb)
		fs_writeback_start(fs);
}

/* Takes change_mu (and sync_mu first in a bounded space, where making
 * room may need a sync: fs_reserve_space). */
static int fs_begin_write(struct flexspace *fs)
{
	if (fs->read_only)
		return FLEX_EREADONLY;
	if (fs->bounded)
		pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	if (fs->failed) {
		pthread_mutex_unlock(&fs->change_mu);
		if (fs->bounded)
			pthread_mutex_unlock(&fs->sync_mu);
		return FLEX_EFAILED;
	}
	return 0;
}

/* Tree commit once the log (buffered and written) has passed log_limit,
 * or once the tree's dirty leaves exceed its leaf cache (they cannot be
 * evicted before a commit).  Records stay in memory until a sync or a
 * commit: writing them unsynced would need DATA synced first (a record
 * must never reach the disk before the bytes it maps), which is a
 * synchronous stall nobody asked for; the buffer is bounded by log_limit
 * instead. */
int fs_commit_due(const struct flexspace *fs)
{
	return fs->log_size + (uint64_t)fs->nlog * FS_REC_BYTES > fs->log_limit ||
	       flextree_pressure(fs->tree);
}

/* The maintenance that is due: tree commit, then garbage collection.  The
 * caller holds sync_mu and change_mu. */
static int fs_maintain_locked(struct flexspace *fs, double ratio)
{
	if (fs->failed)
		return FLEX_EFAILED;
	int rc = fs_commit_due(fs) ? fs_commit(fs) : 0;
	if (!rc && fs_gc_due_at(fs, ratio)) {
		rc = fs_gc_run(fs, 1);
		if (rc)
			rc = fs_fail(fs, rc);
	}
	return rc;
}

/* Ends a change (the caller holds the exclusive lock, change_mu, and
 * sync_mu in a bounded space): lets the locks go, then runs the
 * maintenance the change made due unless the handle defers it. */
static int fs_end_write(struct flexspace *fs, int rc)
{
	int due = !rc && !fs->defer_maintenance && (fs_commit_due(fs) || fs_gc_due(fs));
	fs_excl_unlock(fs);
	if (due && !fs->bounded) {
		pthread_mutex_unlock(&fs->change_mu);
		pthread_mutex_lock(&fs->sync_mu);
		pthread_mutex_lock(&fs->change_mu);
	}
	if (due)
		rc = fs_maintain_locked(fs, fs->gc_ratio);
	pthread_mutex_unlock(&fs->change_mu);
	if (due || fs->bounded)
		pthread_mutex_unlock(&fs->sync_mu);
	return rc;
}

int flexspace_maintain(struct flexspace *fs)
{
	return flexspace_maintain_slack(fs, 0.0);
}

int flexspace_maintain_slack(struct flexspace *fs, double slack)
{
	if (!fs || !(slack >= 0.0))
		return -EINVAL;
	if (fs->read_only)
		return FLEX_EREADONLY;
	double ratio = fs->gc_ratio + slack;
	pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	int rc = fs->failed ? FLEX_EFAILED : 0;
	if (!rc && (fs_commit_due(fs) || fs_gc_due_at(fs, ratio)))
		rc = fs_maintain_locked(fs, ratio);
	pthread_mutex_unlock(&fs->change_mu);
	pthread_mutex_unlock(&fs->sync_mu);
	return rc;
}

int flexspace_collect(struct flexspace *fs)
{
	if (!fs)
		return -EINVAL;
	if (fs->read_only)
		return FLEX_EREADONLY;
	pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	int rc = fs->failed ? FLEX_EFAILED : 0;
	if (!rc && fs_commit_due(fs))
		rc = fs_commit(fs);
	if (!rc && (rc = fs_gc_sparse(fs)) != 0)
		rc = fs_fail(fs, rc);
	pthread_mutex_unlock(&fs->change_mu);
	pthread_mutex_unlock(&fs->sync_mu);
	return rc;
}

/* Releases the live bytes of [off, off+len) before the tree forgets it. */
static int fs_drop_range(struct flexspace *fs, uint64_t off, uint64_t len)
{
	struct flextree_mapping m[64];
	while (len) {
		ssize_t n = flextree_query(fs->tree, off, len, m, 64);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return FLEX_ECORRUPT;
		if (n > 64)
			n = 64;
		for (ssize_t i = 0; i < n; i++) {
			fs_seg_drop(fs, m[i].poff, m[i].len);
			off += m[i].len;
			len -= m[i].len;
		}
	}
	return 0;
}

/* Applies a tree change and buffers its log record; a failure here means
 * the tree and the log may disagree, so the handle fails. */
static int fs_change(struct flexspace *fs, uint8_t op, uint64_t loff, uint64_t len, uint64_t arg)
{
	struct fs_rec r = {.op = op, .loff = loff, .len = len, .arg = arg};
	int rc = fs_apply(fs->tree, &r);
	if (!rc)
		rc = fs_log_add(fs, op, loff, len, arg);
	return rc ? fs_fail(fs, rc) : 0;
}

static int fs_remove(struct flexspace *fs, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	int rc = fs_drop_range(fs, off, len);
	if (rc)
		return fs_fail(fs, rc);
	return fs_change(fs, FS_OP_COLLAPSE, off, len, 0);
}

/* Appends the bytes and inserts them at off, one extent per piece (pieces
 * that land contiguously are merged by the tree up to max_extent). */
static int fs_insert_data(struct flexspace *fs, const uint8_t *buf, uint64_t off, uint64_t len)
{
	uint64_t done = 0;
	while (done < len) {
		uint64_t want = len - done < fs->max_extent ? len - done : fs->max_extent;
		uint64_t poff;
		uint32_t got;
		int rc = fs_append(fs, buf + done, (uint32_t)want, &poff, &got);
		if (rc)
			return fs_fail(fs, rc);
		if ((rc = fs_change(fs, FS_OP_INSERT, off + done, got, poff)) != 0)
			return rc;
		done += got;
	}
	return 0;
}

/* ---- changes: one or several as one (flexspace_apply) ----------------------- */

static int fs_op_puts(int type)
{
	return type == FLEXSPACE_OP_WRITE || type == FLEXSPACE_OP_INSERT ||
	       type == FLEXSPACE_OP_REPLACE;
}

/* The checks that need no state: the bytes the ops put (*bytes), and
 * whether any op changes anything (*changes: zero-length writes and
 * inserts do not, and then the call takes no lock). */
static int fs_ops_check(const struct flexspace_op *ops, size_t n, uint64_t *bytes, int *changes)
{
	*bytes = 0;
	*changes = 0;
	for (size_t i = 0; i < n; i++) {
		const struct flexspace_op *o = &ops[i];
		if (o->type < FLEXSPACE_OP_WRITE || o->type > FLEXSPACE_OP_TAG)
			return -EINVAL;
		if (!fs_op_puts(o->type)) {
			*changes = 1;
			continue;
		}
		if (!o->buf && o->buf_len)
			return -EINVAL;
		if (o->type != FLEXSPACE_OP_REPLACE &&
		    (o->off > FLEXSPACE_MAX_SIZE || o->buf_len > FLEXSPACE_MAX_SIZE - o->off))
			return FLEX_ETOOBIG;
		if (o->buf_len > FLEXSPACE_MAX_SIZE)
			return FLEX_ETOOBIG;
		*bytes += o->buf_len; /* n ops of at most 2^48 bytes each: no overflow */
		*changes |= o->buf_len > 0 || o->type == FLEXSPACE_OP_REPLACE;
	}
	return 0;
}

/* The checks against the space's size, as each op leaves it. */
static int fs_ops_fit(const struct flexspace_op *ops, size_t n, uint64_t size)
{
	for (size_t i = 0; i < n; i++) {
		const struct flexspace_op *o = &ops[i];
		switch (o->type) {
		case FLEXSPACE_OP_WRITE:
			if (o->buf_len && o->off + o->buf_len > size)
				size = o->off + o->buf_len;
			break;
		case FLEXSPACE_OP_INSERT:
			if (!o->buf_len)
				break;
			if ((o->off > size ? o->off : size) + o->buf_len > FLEXSPACE_MAX_SIZE)
				return FLEX_ETOOBIG;
			size = (o->off > size ? o->off : size) + o->buf_len;
			break;
		case FLEXSPACE_OP_COLLAPSE:
		case FLEXSPACE_OP_REPLACE:
			if (o->off > size || o->len > size - o->off)
				return -ERANGE;
			size -= o->len;
			if (o->type == FLEXSPACE_OP_COLLAPSE)
				break;
			if (o->buf_len > FLEXSPACE_MAX_SIZE - size)
				return FLEX_ETOOBIG;
			size += o->buf_len;
			break;
		default: /* FLEXSPACE_OP_TAG */
			if (o->off >= size)
				return -ERANGE;
			break;
		}
	}
	return 0;
}

/* One op, checked; the caller holds the exclusive lock. */
static int fs_op(struct flexspace *fs, const struct flexspace_op *o)
{
	uint64_t size = flextree_size(fs->tree);
	int rc = 0;
	switch (o->type) {
	case FLEXSPACE_OP_WRITE:
		if (!o->buf_len)
			return 0;
		if (o->off < size)
			rc = fs_remove(fs, o->off, o->buf_len < size - o->off ? o->buf_len
									: size - o->off);
		break;
	case FLEXSPACE_OP_COLLAPSE:
	case FLEXSPACE_OP_REPLACE:
		rc = fs_remove(fs, o->off, o->len);
		break;
	case FLEXSPACE_OP_TAG:
		return fs_change(fs, FS_OP_TAG, o->off, 0, o->tag);
	default:
		break;
	}
	if (!rc && fs_op_puts(o->type))
		rc = fs_insert_data(fs, o->buf, o->off, o->buf_len);
	return rc;
}

int flexspace_apply(struct flexspace *fs, const struct flexspace_op *ops, size_t n)
{
	if (!fs || (!ops && n))
		return -EINVAL;
	uint64_t bytes;
	int changes;
	int rc = fs_ops_check(ops, n, &bytes, &changes);
	if (rc)
		return rc;
	if (!changes)
		return fs->read_only ? FLEX_EREADONLY : 0;
	if ((rc = fs_begin_write(fs)) != 0)
		return rc;
	/* Room first, while nothing has changed: making it may sync or
	 * collect, which must not fall between two of the ops. */
	rc = fs_ops_fit(ops, n, flextree_size(fs->tree));
	if (!rc)
		rc = fs_reserve_space(fs, bytes);
	if (!rc)
		rc = fs_preflush(fs, bytes);
	fs_excl_lock(fs);
	for (size_t i = 0; i < n && !rc; i++) {
		if (i)
			FLEX_KILLPOINT("fs.apply.between");
		rc = fs_op(fs, &ops[i]);
	}
	return fs_end_write(fs, rc);
}

static ssize_t fs_put(struct flexspace *fs, const void *buf, uint64_t off, size_t len, int type)
{
	struct flexspace_op o = {.type = type, .off = off, .buf = buf, .buf_len = len};
	int rc = flexspace_apply(fs, &o, 1);
	return rc ? rc : (ssize_t)len;
}

ssize_t flexspace_write(struct flexspace *fs, const void *buf, uint64_t off, size_t len)
{
	return fs_put(fs, buf, off, len, FLEXSPACE_OP_WRITE);
}

ssize_t flexspace_insert(struct flexspace *fs, const void *buf, uint64_t off, size_t len)
{
	return fs_put(fs, buf, off, len, FLEXSPACE_OP_INSERT);
}

int flexspace_collapse(struct flexspace *fs, uint64_t off, uint64_t len)
{
	struct flexspace_op o = {.type = FLEXSPACE_OP_COLLAPSE, .off = off, .len = len};
	return flexspace_apply(fs, &o, 1);
}

int flexspace_tag_set(struct flexspace *fs, uint64_t off, uint16_t tag)
{
	struct flexspace_op o = {.type = FLEXSPACE_OP_TAG, .off = off, .tag = tag};
	return flexspace_apply(fs, &o, 1);
}

int flexspace_truncate(struct flexspace *fs, uint64_t size)
{
	if (!fs)
		return -EINVAL;
	if (size > FLEXSPACE_MAX_SIZE)
		return FLEX_ETOOBIG;
	int rc = fs_begin_write(fs);
	if (rc)
		return rc;
	fs_excl_lock(fs);
	uint64_t cur = flextree_size(fs->tree);
	if (size < cur)
		rc = fs_remove(fs, size, cur - size);
	else if (size > cur)
		rc = fs_change(fs, FS_OP_INSERT, cur, size - cur, FLEXTREE_HOLE);
	return fs_end_write(fs, rc);
}

/* Rewrites one run of mapped bytes [off, off+len) as fresh extents and
 * puts back the tags that started inside it. */
struct fs_tags {
	uint64_t *loff;
	uint16_t *tag;
	size_t n, cap;
	uint64_t from;
	int err;
};

static int fs_collect_tag(void *arg, const struct flextree_extent *e)
{
	struct fs_tags *tg = arg;
	if (!e->tag || e->loff < tg->from)
		return 0;
	if (tg->n == tg->cap) {
		size_t cap = tg->cap ? tg->cap * 2 : 16;
		uint64_t *l = realloc(tg->loff, cap * sizeof(*l));
		if (!l)
			return tg->err = -ENOMEM;
		tg->loff = l;
		uint16_t *t = realloc(tg->tag, cap * sizeof(*t));
		if (!t)
			return tg->err = -ENOMEM;
		tg->tag = t;
		tg->cap = cap;
	}
	tg->loff[tg->n] = e->loff;
	tg->tag[tg->n++] = e->tag;
	return 0;
}

/* The bytes are read and the tags collected with readers going on (the
 * caller holds change_mu, so nothing else changes the range); only the
 * rewrite itself takes the exclusive lock. */
static int fs_rewrite(struct flexspace *fs, uint64_t off, uint64_t len, uint8_t *tmp)
{
	struct fs_tags tg = {.from = off};
	int rc = fs_reserve_space(fs, len);
	if (!rc)
		rc = fs_read_mapped(fs, tmp, off, len, NULL, NULL);
	if (!rc)
		rc = flextree_scan(fs->tree, off, len, fs_collect_tag, &tg);
	if (!rc)
		rc = tg.err;
	if (!rc)
		rc = fs_preflush(fs, len);
	fs_excl_lock(fs);
	if (!rc)
		rc = fs_remove(fs, off, len);
	if (!rc)
		rc = fs_insert_data(fs, tmp, off, len);
	for (size_t i = 0; i < tg.n && !rc; i++)
		rc = fs_change(fs, FS_OP_TAG, tg.loff[i], 0, tg.tag[i]);
	fs_excl_unlock(fs);
	free(tg.loff);
	free(tg.tag);
	return rc;
}

#define FS_DEFRAG_CHUNK (1u << 20)

int flexspace_defrag(struct flexspace *fs, uint64_t off, uint64_t len)
{
	if (!fs)
		return -EINVAL;
	int rc = fs_begin_write(fs);
	if (rc)
		return rc;
	uint64_t size = flextree_size(fs->tree);
	uint8_t *tmp = NULL;
	if (off > size || len > size - off)
		rc = -ERANGE;
	else if (!(tmp = malloc(FS_DEFRAG_CHUNK)))
		rc = -ENOMEM;
	/* Walk the range; rewrite each run of mapped bytes (holes stay holes)
	 * in pieces of at most FS_DEFRAG_CHUNK. */
	uint64_t end = off + len;
	while (off < end && !rc) {
		uint64_t poff, run;
		if ((rc = flextree_lookup(fs->tree, off, &poff, &run)) != 0)
			break;
		if (poff == FLEXTREE_HOLE) {
			off += run < end - off ? run : end - off;
			continue;
		}
		uint64_t span = 0;
		struct flextree_mapping m[32];
		ssize_t n = flextree_query(fs->tree, off, end - off, m, 32);
		if (n < 0) {
			rc = (int)n; /* a tree leaf that could not be read back */
			break;
		}
		for (ssize_t i = 0; i < n && i < 32 && m[i].poff != FLEXTREE_HOLE; i++)
			span += m[i].len;
		if (span > FS_DEFRAG_CHUNK)
			span = FS_DEFRAG_CHUNK;
		rc = fs_rewrite(fs, off, span, tmp);
		off += span;
	}
	free(tmp);
	fs_excl_lock(fs);
	return fs_end_write(fs, rc);
}

/* ---- reads -------------------------------------------------------------- */

/* The calls that take a const handle change nothing a reader could see,
 * but they take the handle's lock and read through its buffers. */
static struct flexspace *fs_mut(const struct flexspace *fs)
{
	return (struct flexspace *)fs;
}

ssize_t flexspace_read(const struct flexspace *cfs, void *buf, uint64_t off, size_t len)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || (!buf && len))
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree);
	uint64_t n = off >= size ? 0 : (len < size - off ? len : size - off);
	int rc = n ? fs_read_mapped(fs, buf, off, n, NULL, NULL) : 0;
	flex_brlock_rdunlock(&fs->lock);
	return rc ? rc : (ssize_t)n;
}

ssize_t flexspace_read_locate(const struct flexspace *cfs, void *buf, uint64_t off, size_t len,
			      struct flextree_mapping *loc, size_t *nloc, uint64_t *stamp)
{
	struct flexspace *fs = fs_mut(cfs);
	if (nloc)
		*nloc = 0;
	if (!fs || (!buf && len) || !loc || !nloc || !stamp)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree);
	uint64_t n = off >= size ? 0 : (len < size - off ? len : size - off);
	int rc = n ? fs_read_mapped(fs, buf, off, n, loc, nloc) : 0;
	*stamp = fs->free_seq;
	flex_brlock_rdunlock(&fs->lock);
	return rc ? rc : (ssize_t)n;
}

int flexspace_locate(const struct flexspace *cfs, uint64_t off, uint64_t len,
		     struct flextree_mapping *loc, size_t *nloc, uint64_t *stamp)
{
	struct flexspace *fs = fs_mut(cfs);
	if (nloc)
		*nloc = 0;
	if (!fs || !loc || !nloc || !stamp)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree);
	uint64_t n = off >= size ? 0 : (len < size - off ? len : size - off);
	ssize_t got = n ? flextree_query(fs->tree, off, n, loc, FLEXSPACE_LOCATE_MAX) : 0;
	*stamp = fs->free_seq;
	flex_brlock_rdunlock(&fs->lock);
	if (got < 0)
		return (int)got;
	if (got <= FLEXSPACE_LOCATE_MAX) {
		uint64_t done = 0;
		for (ssize_t i = 0; i < got; i++)
			done += loc[i].len;
		if (done == n)
			*nloc = (size_t)got;
	}
	return 0;
}

int flexspace_resident(const struct flexspace *cfs, uint64_t off, uint64_t len)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs)
		return -EINVAL;
	struct flextree_mapping loc[FLEXSPACE_LOCATE_MAX];
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree);
	uint64_t n = off >= size ? 0 : (len < size - off ? len : size - off);
	ssize_t got = n ? flextree_query(fs->tree, off, n, loc, FLEXSPACE_LOCATE_MAX) : 0;
	/* More pieces than were reported: the rest cannot be told. */
	int rc = got < 0 ? (int)got : got > FLEXSPACE_LOCATE_MAX ? 0 : 1;
	for (ssize_t i = 0; rc == 1 && i < got; i++)
		if (loc[i].poff != FLEXTREE_HOLE)
			rc = fs_data_resident(fs, loc[i].poff, loc[i].len);
	flex_brlock_rdunlock(&fs->lock);
	return rc;
}

int flexspace_read_located(const struct flexspace *cfs, void *buf,
			   const struct flextree_mapping *loc, size_t nloc, uint64_t stamp)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || (!buf && nloc) || (!loc && nloc))
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	int rc = fs_read_located(fs, buf, loc, nloc, stamp);
	flex_brlock_rdunlock(&fs->lock);
	return rc;
}

ssize_t flexspace_read_extent(const struct flexspace *cfs, void *buf, uint64_t off, size_t maxlen,
			      uint64_t *extent_off, uint64_t *extent_len)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || (!buf && maxlen))
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree), start = 0, run = 0;
	int rc = off < size ? flextree_tag_get(fs->tree, off, NULL, &start) : -ERANGE;
	if (!rc)
		rc = flextree_lookup(fs->tree, start, NULL, &run);
	uint64_t n = maxlen < size - start ? maxlen : size - start;
	if (!rc && n)
		rc = fs_read_mapped(fs, buf, start, n, NULL, NULL);
	flex_brlock_rdunlock(&fs->lock);
	if (rc)
		return rc;
	if (extent_off)
		*extent_off = start;
	if (extent_len)
		*extent_len = run;
	return (ssize_t)n;
}

int flexspace_tag_get(const struct flexspace *cfs, uint64_t off, uint16_t *tag,
		      uint64_t *extent_off)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	int rc = flextree_tag_get(fs->tree, off, tag, extent_off);
	flex_brlock_rdunlock(&fs->lock);
	return rc;
}

int flexspace_scan(const struct flexspace *cfs, uint64_t off, uint64_t len, flextree_scan_fn *fn,
		   void *arg)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || !fn)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	int rc = flextree_scan(fs->tree, off, len, fn, arg);
	flex_brlock_rdunlock(&fs->lock);
	return rc;
}

uint64_t flexspace_size(const struct flexspace *cfs)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs)
		return 0;
	flex_brlock_rdlock(&fs->lock);
	uint64_t size = flextree_size(fs->tree);
	flex_brlock_rdunlock(&fs->lock);
	return size;
}

int flexspace_check(const struct flexspace *cfs)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	int rc = flextree_check(fs->tree);
	if (!rc)
		rc = fs_check_segments(fs);
	if (!rc && (fs->fill > fs->seg_size || fs->flushed > fs->fill))
		rc = FLEX_ECORRUPT;
	flex_brlock_rdunlock(&fs->lock);
	return rc;
}

int flexspace_stats(const struct flexspace *cfs, struct flexspace_stats *st)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || !st)
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	*st = fs->st;
	st->size = fs->tree_st.size;
	st->extents = fs->tree_st.extents;
	if (fs->io->fsize(fs->io, fs->data_fd, &st->data_file_bytes) != 0)
		st->data_file_bytes = (uint64_t)fs->nsegs * fs->seg_size;
	st->live_bytes = fs->live;
	st->segment_size = fs->seg_size;
	st->segments_pending = fs->npending;
	st->segments_used = 0;
	st->segments_free = 0;
	for (uint32_t s = 0; s < fs->nsegs; s++) {
		st->segments_used += fs->state[s] == SEG_USED || fs->state[s] == SEG_OPEN;
		st->segments_free += fs->state[s] == SEG_FREE;
	}
	st->log_bytes = fs->log_size;
	/* Both change under the exclusive lock once durable (fs_log_sync's
	 * last phase, fs_log_reset after the commit). */
	st->sync_version = fs->log_base;
	st->sync_batches = fs->log_durable - 1;
	flex_brlock_rdunlock(&fs->lock);
	return 0;
}

int flexspace_durable(const struct flexspace *cfs, struct flexspace_point *now,
		      struct flexspace_point *recovered)
{
	struct flexspace *fs = fs_mut(cfs);
	if (!fs || (!now && !recovered))
		return -EINVAL;
	flex_brlock_rdlock(&fs->lock);
	/* As in flexspace_stats. */
	if (now) {
		now->version = fs->log_base;
		now->batches = fs->log_durable - 1;
	}
	if (recovered) {
		recovered->version = fs->st.recovered_version;
		recovered->batches = fs->st.recovered_batches;
	}
	flex_brlock_rdunlock(&fs->lock);
	return 0;
}
