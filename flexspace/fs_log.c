/*
 * fs_log.c - FlexSpace's logical log (paper section 4.2, "Logical
 * Logging" and "Write Ordering").
 *
 * Every change to the extent tree is also recorded as a 24-byte record
 * (insert, collapse, remap, tag) in an in-memory buffer.  Records reach
 * LOG in checksummed batches; a batch is written only after the data it
 * refers to has been written and fdatasync'ed, and flexspace_sync
 * fdatasyncs LOG after writing it.  The tree file itself is committed only
 * when the log has grown past log_limit (or at close), after which the log
 * is reset to apply to the new tree version.
 *
 * LOG starts with two 4 KiB header slots; the header naming base version
 * v lives in slot v & 1, so resetting the log never overwrites the header
 * that recovery may still need.  Each batch carries the base version and a
 * sequence number, so batches left over from before a reset, and a batch
 * torn by a crash, end the replay.  See docs/FORMAT.md.
 *
 * A batch that fails its checksum ends the replay as if it were torn, but
 * only the batch being written when the process died can be torn: every
 * batch is synced before the next is written.  So after each sync a small
 * seal naming the next sequence number is written (not synced) into the
 * spare header slot, away from the batches; a replay that stops short of
 * what the seal promises has met damage, not a torn tail, and open fails
 * with FLEX_ECORRUPT instead of silently dropping synced changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../common/flex_codec.h"
#include "../common/flex_killpoint.h"
#include "flexspace_int.h"

#define LOG_MAGIC "FLEXLOG1"
#define LOG_FORMAT 1u
#define LOG_HDR_SLOT 4096u
#define LOG_START (2 * LOG_HDR_SLOT)
#define LOG_HDR_BYTES 32u
#define BATCH_MAGIC 0x31424c46u /* "FLB1" */
#define BATCH_HDR 32u
#define REC_BYTES 24u
#define SEAL_MAGIC 0x31534c46u /* "FLS1" */
/* The seal sits inside the header slot that does not hold the current
 * header, in its own 512-byte sector (fixed on disk). */
#define SEAL_AT 2048u
#define SEAL_BYTES 32u
#define OP_SHIFT 56
#define LOFF_MASK (((uint64_t)1 << OP_SHIFT) - 1)

/* ---- applying a record to the tree (live and at replay) ------------------ */

int fs_apply(struct flextree *t, const struct fs_rec *r)
{
	switch (r->op) {
	case FS_OP_INSERT:
		if (r->arg == FLEXTREE_HOLE) {
			/* Holes may exceed one extent's 32-bit length. */
			uint64_t rem = r->len;
			while (rem) {
				uint32_t c = rem > UINT32_MAX ? UINT32_MAX : (uint32_t)rem;
				int rc = flextree_insert(t, r->loff, FLEXTREE_HOLE, c);
				if (rc)
					return rc;
				rem -= c;
			}
			return 0;
		}
		if (r->len > UINT32_MAX)
			return -EINVAL;
		return flextree_insert(t, r->loff, r->arg, (uint32_t)r->len);
	case FS_OP_COLLAPSE:
		return flextree_collapse(t, r->loff, r->len);
	case FS_OP_REMAP:
		if (r->len > UINT32_MAX)
			return -EINVAL;
		return flextree_repoint(t, r->loff, r->arg, (uint32_t)r->len);
	case FS_OP_TAG:
		if (r->arg > UINT16_MAX)
			return -EINVAL;
		return flextree_tag_set(t, r->loff, (uint16_t)r->arg);
	default:
		return -EINVAL;
	}
}

/* ---- header ------------------------------------------------------------- */

static void log_header_encode(uint8_t *b, uint64_t base, uint32_t seg_size)
{
	memset(b, 0, LOG_HDR_SLOT);
	memcpy(b, LOG_MAGIC, 8);
	flex_put_le32(b + 8, LOG_FORMAT);
	flex_put_le32(b + 12, seg_size);
	flex_put_le64(b + 16, base);
	flex_put_le64(b + 24, XXH3_64bits(b, 24));
}

/* 0: valid; FLEX_EVERSION: sound but another format; FLEX_ECORRUPT. */
static int log_header_decode(const uint8_t *b, uint64_t *base, uint32_t *seg_size)
{
	if (memcmp(b, LOG_MAGIC, 8) != 0 || flex_get_le64(b + 24) != XXH3_64bits(b, 24))
		return FLEX_ECORRUPT;
	if (flex_get_le32(b + 8) != LOG_FORMAT)
		return FLEX_EVERSION;
	*seg_size = flex_get_le32(b + 12);
	*base = flex_get_le64(b + 16);
	return 0;
}

static int log_write_header(struct flexspace *fs, uint64_t base)
{
	uint8_t *b = malloc(LOG_HDR_SLOT);
	if (!b)
		return -ENOMEM;
	log_header_encode(b, base, fs->seg_size);
	int rc = flex_io_write_full(fs->io, fs->log_fd, b, LOG_HDR_SLOT, (base & 1) * LOG_HDR_SLOT);
	free(b);
	if (!rc) {
		FLEX_KILLPOINT("fs.loghdr.sync.before");
		rc = fs->io->fdatasync(fs->io, fs->log_fd);
	}
	if (!rc)
		FLEX_KILLPOINT("fs.loghdr.sync.after");
	return rc;
}

/* The header goes to LOG with no lock held (a tree commit's last step);
 * its bytes are counted by the caller. */

/* ---- the seal ------------------------------------------------------------ */

static uint64_t seal_off(uint64_t base)
{
	return ((base + 1) & 1) * LOG_HDR_SLOT + SEAL_AT;
}

/* After a sync: batches [1, seq) of base are durable.  Written by the
 * syncer with no lock held (sync_mu keeps other writers of LOG away). */
static int log_write_seal(struct flexspace *fs, uint64_t base, uint64_t seq)
{
	if (seq <= 1 || fs->log_sealed == seq)
		return 0;
	uint8_t b[SEAL_BYTES];
	flex_put_le32(b, SEAL_MAGIC);
	flex_put_le32(b + 4, 0);
	flex_put_le64(b + 8, seq);
	flex_put_le64(b + 16, base);
	flex_put_le64(b + 24, XXH3_64bits(b, 24));
	return flex_io_write_full(fs->io, fs->log_fd, b, SEAL_BYTES, seal_off(base));
}

/* The next sequence number the seal for `base` promises, or 0 without a
 * valid seal. */
static int log_read_seal(struct flexspace *fs, uint64_t base, uint64_t *seq)
{
	uint8_t b[SEAL_BYTES];
	*seq = 0;
	int rc = flex_io_read_full(fs->io, fs->log_fd, b, SEAL_BYTES, seal_off(base));
	if (rc)
		return rc == -ENODATA ? 0 : rc;
	if (flex_get_le32(b) == SEAL_MAGIC && flex_get_le64(b + 16) == base &&
	    flex_get_le64(b + 24) == XXH3_64bits(b, 24))
		*seq = flex_get_le64(b + 8);
	return 0;
}

/* Whether a whole, valid batch of `base` with sequence number seq starts
 * at off. */
static int log_batch_at(struct flexspace *fs, uint64_t off, uint64_t size, uint64_t base,
			uint64_t seq, int *valid)
{
	uint8_t hdr[BATCH_HDR];
	*valid = 0;
	if (off + BATCH_HDR > size)
		return 0;
	int rc = flex_io_read_full(fs->io, fs->log_fd, hdr, BATCH_HDR, off);
	if (rc)
		return rc == -ENODATA ? 0 : rc;
	uint32_t n = flex_get_le32(hdr + 4);
	if (flex_get_le32(hdr) != BATCH_MAGIC || flex_get_le64(hdr + 8) != seq ||
	    flex_get_le64(hdr + 16) != base || n == 0 ||
	    (uint64_t)n * REC_BYTES > size - off - BATCH_HDR)
		return 0;
	size_t bytes = BATCH_HDR + (size_t)n * REC_BYTES;
	uint8_t *b = malloc(bytes);
	if (!b)
		return -ENOMEM;
	rc = flex_io_read_full(fs->io, fs->log_fd, b, bytes, off);
	if (!rc) {
		uint64_t csum = flex_get_le64(b + 24);
		flex_put_le64(b + 24, 0);
		*valid = XXH3_64bits(b, bytes) == csum;
	}
	free(b);
	return rc == -ENODATA ? 0 : rc;
}

/* Opens LOG.  An empty (new) LOG sets *fresh; otherwise the newest valid
 * header gives the segment size and the tree version the log applies to. */
int fs_log_open(struct flexspace *fs, const char *path, int create, uint32_t *seg_size,
		int *fresh)
{
	int flags = fs->read_only ? O_RDONLY : O_RDWR | (create ? O_CREAT : 0);
	int fd = fs->io->open(fs->io, path, flags | O_CLOEXEC, 0644);
	if (fd < 0)
		return fd;
	fs->log_fd = fd;
	uint64_t size;
	int rc = fs->io->fsize(fs->io, fd, &size);
	if (rc)
		return rc;
	fs->log_size = LOG_START;
	fs->log_seq = 1;
	*fresh = size == 0;
	if (*fresh)
		return 0;
	if (size < LOG_START) {
		*fresh = 2; /* torn while being created; fs_log_attach decides */
		return 0;
	}
	uint8_t *b = malloc(LOG_HDR_SLOT);
	if (!b)
		return -ENOMEM;
	int pick = -1, st[2];
	uint64_t base[2];
	uint32_t ss[2];
	for (int i = 0; i < 2; i++) {
		rc = flex_io_read_full(fs->io, fd, b, LOG_HDR_SLOT, (uint64_t)i * LOG_HDR_SLOT);
		if (rc) {
			free(b);
			return rc == -ENODATA ? FLEX_ECORRUPT : rc;
		}
		st[i] = log_header_decode(b, &base[i], &ss[i]);
		if (st[i] == 0 && (pick < 0 || base[i] > base[pick]))
			pick = i;
	}
	free(b);
	if (pick < 0) {
		if (st[0] == FLEX_EVERSION || st[1] == FLEX_EVERSION)
			return FLEX_EVERSION;
		/* Batches follow a header that was synced: with any, the header
		 * is damaged, not unwritten (a space never closed still has a
		 * version-1 tree, which fs_log_attach would take for a creation
		 * cut short, dropping the batches). */
		if (size > LOG_START)
			return FLEX_ECORRUPT;
		*fresh = 2; /* no valid header: see fs_log_attach */
		return 0;
	}
	*seg_size = ss[pick];
	fs->log_base = base[pick];
	return 0;
}

/* Checks the log against the opened tree, or initialises a fresh one.
 * fresh == 1: LOG was empty (new space); fresh == 2: LOG has no valid
 * header, which a power loss during creation leaves behind (its header
 * write is the last step) -- acceptable only if the tree is still the
 * empty first version; otherwise the header was damaged. */
int fs_log_attach(struct flexspace *fs, int fresh, int create)
{
	struct flextree_stats ts;
	flextree_stats(fs->tree, &ts);
	if (fresh) {
		if (!create || ts.version != 1 || ts.size != 0)
			return FLEX_ECORRUPT;
		int rc = fresh == 2 ? fs->io->ftruncate(fs->io, fs->log_fd, 0) : 0;
		if (!rc)
			rc = log_write_header(fs, ts.version);
		if (rc)
			return rc;
		fs->st.log_bytes_written += LOG_HDR_SLOT;
		fs->log_base = ts.version;
		fs->log_durable = 1;
		return 0;
	}
	/* The log names a tree version the tree file does not have: the tree
	 * lost a commit that the log relied on. */
	if (fs->log_base > ts.version)
		return FLEX_ECORRUPT;
	/* The log is reset right after every tree commit, so it is at most
	 * one version behind (a crash between the two).  Further behind, or
	 * one behind while a batch or seal of the tree's own version exists
	 * (that version's header was written, so it is damaged), and the
	 * changes logged since would be dropped unseen. */
	if (fs->log_base + 1 < ts.version)
		return FLEX_ECORRUPT;
	if (fs->log_base + 1 == ts.version) {
		uint64_t size, seal;
		int valid, rc = fs->io->fsize(fs->io, fs->log_fd, &size);
		if (!rc)
			rc = log_batch_at(fs, LOG_START, size, ts.version, 1, &valid);
		if (!rc)
			rc = log_read_seal(fs, ts.version, &seal);
		if (rc)
			return rc;
		if (valid || seal)
			return FLEX_ECORRUPT;
	}
	return 0;
}

/* ---- batches ------------------------------------------------------------ */

int fs_log_add(struct flexspace *fs, uint8_t op, uint64_t loff, uint64_t len, uint64_t arg)
{
	if (fs->nlog == fs->logcap) {
		uint32_t cap = fs->logcap ? fs->logcap * 2 : FS_LOGBUF_RECORDS;
		uint8_t *p = realloc(fs->logbuf, BATCH_HDR + (size_t)cap * REC_BYTES);
		if (!p)
			return -ENOMEM;
		fs->logbuf = p;
		fs->logcap = cap;
	}
	uint8_t *p = fs->logbuf + BATCH_HDR + (size_t)fs->nlog++ * REC_BYTES;
	flex_put_le64(p, (uint64_t)op << OP_SHIFT | (loff & LOFF_MASK));
	flex_put_le64(p + 8, len);
	flex_put_le64(p + 16, arg);
	return 0;
}

/* The durability step, in three phases so that neither readers nor
 * changes wait for the disk (flexspace_int.h, "Locking").  The caller
 * holds sync_mu and change_mu, not the rwlock.
 *   1. The segment buffer is written to DATA (readers going on), then
 *      under the exclusive lock the buffered records are encoded as the
 *      next batch and given its place in LOG, and the emptied segments
 *      they name are marked.
 *   2. With change_mu let go when may_release is set (the caller is not
 *      in the middle of a change): fdatasync DATA, write the batch (only
 *      after the data it names is durable), fdatasync LOG, write the seal.
 *   3. Under change_mu and the exclusive lock again: the new durable
 *      point is published and the marked segments freed.
 * Every change that returned before phase 1 is in the batch or in DATA
 * synced by phase 2; a change made during phase 2 goes to the next
 * batch.  Then the tree is committed once the log is large. */
int fs_log_sync(struct flexspace *fs, int may_release)
{
	int rc = fs_flush_unlocked(fs);
	fs_excl_lock(fs);
	uint8_t *b = NULL;
	size_t bytes = 0;
	uint64_t at = fs->log_size;
	if (!rc && fs->nlog) {
		/* The buffer is the batch: taken whole, so that changes made
		 * while it is written start the next one. */
		b = fs->logbuf;
		bytes = BATCH_HDR + (size_t)fs->nlog * REC_BYTES;
		fs->logbuf = NULL;
		fs->logcap = 0;
		flex_put_le32(b, BATCH_MAGIC);
		flex_put_le32(b + 4, fs->nlog);
		flex_put_le64(b + 8, fs->log_seq);
		flex_put_le64(b + 16, fs->log_base);
		flex_put_le64(b + 24, 0);
		flex_put_le64(b + 24, XXH3_64bits(b, bytes));
		fs->log_size += bytes;
		fs->log_seq++;
		fs->nlog = 0;
	}
	int data = fs->data_unsynced;
	fs->data_unsynced = 0;
	uint64_t base = fs->log_base, seq = fs->log_seq;
	if (!rc)
		fs_seg_mark_pending(fs);
	fs_excl_unlock(fs);
	if (rc) {
		free(b);
		return fs_fail(fs, rc);
	}

	if (may_release)
		pthread_mutex_unlock(&fs->change_mu);
	if (data)
		rc = fs_fdatasync_data(fs);
	if (!rc && b) {
		/* The data is durable, the records naming it are not written. */
		FLEX_KILLPOINT("fs.log.write.before");
		rc = flex_io_write_full(fs->io, fs->log_fd, b, bytes, at);
		if (!rc) {
			FLEX_KILLPOINT("fs.log.sync.before");
			rc = fs->io->fdatasync(fs->io, fs->log_fd);
		}
		if (!rc)
			FLEX_KILLPOINT("fs.log.sync.after");
	}
	int sealed = 0;
	if (!rc && seq > 1 && fs->log_sealed != seq) {
		rc = log_write_seal(fs, base, seq);
		sealed = !rc;
	}
	free(b);
	if (may_release)
		pthread_mutex_lock(&fs->change_mu);

	if (rc)
		return fs_fail(fs, rc);
	fs_excl_lock(fs);
	fs->log_durable = seq;
	if (sealed)
		fs->log_sealed = seq;
	fs->st.log_bytes_written += bytes + (sealed ? SEAL_BYTES : 0);
	fs_seg_release(fs, 0);
	fs_excl_unlock(fs);
	fs_seg_punch(fs);
	/* A change that failed while change_mu was let go may have left half
	 * of itself in the tree: the batch above did not hold it, a commit
	 * would. */
	if (fs->log_size > fs->log_limit)
		return fs->failed ? FLEX_EFAILED : fs_commit(fs);
	return 0;
}

/* Resets the log to apply to the tree's current (just committed) version.
 * Buffered records are dropped: the committed tree already contains them.
 * The caller holds sync_mu and change_mu; the disk is written without the
 * rwlock, whose exclusive hold covers only the new log fields. */
int fs_log_reset(struct flexspace *fs)
{
	struct flextree_stats ts;
	flextree_stats(fs->tree, &ts);
	int rc = log_write_header(fs, ts.version);
	if (rc)
		return rc;
	/* Old batches carry the old base version and could not be replayed
	 * anyway; cutting them off just returns the space. */
	if ((rc = fs->io->ftruncate(fs->io, fs->log_fd, LOG_START)) != 0)
		return rc;
	FLEX_KILLPOINT("fs.log.truncated");
	fs_excl_lock(fs);
	fs->st.log_bytes_written += LOG_HDR_SLOT;
	fs->log_base = ts.version;
	fs->log_size = LOG_START;
	fs->log_seq = 1;
	fs->log_durable = 1;
	fs->log_sealed = 0;
	fs->nlog = 0;
	fs_excl_unlock(fs);
	return 0;
}

/* Data, then the tree (its own two syncs), then the log's new header.
 * The caller holds sync_mu and change_mu (or is alone with the handle, at
 * open and close): no change runs, and readers go on while the tree's
 * node images are written and synced. */
int fs_commit(struct flexspace *fs)
{
	int rc = fs_flush_unlocked(fs);
	if (rc || (rc = fs_sync_data(fs)) != 0)
		return fs_fail(fs, rc);
	struct flextree_stats before, after;
	flextree_stats(fs->tree, &before);
	if ((rc = flextree_commit(fs->tree)) != 0)
		return fs_fail(fs, rc);
	flextree_stats(fs->tree, &after);
	/* The tree is committed; the log still names the previous version. */
	FLEX_KILLPOINT("fs.commit.tree_done");
	if (after.version != fs->log_base || fs->log_size > LOG_START || fs->nlog) {
		if ((rc = fs_log_reset(fs)) != 0)
			return fs_fail(fs, rc);
	}
	fs_excl_lock(fs);
	fs->st.tree_bytes_written += after.bytes_written - before.bytes_written;
	fs->st.tree_commits++;
	fs_seg_release(fs, 1);
	fs_trim_data(fs);
	fs_excl_unlock(fs);
	fs_seg_punch(fs);
	return 0;
}

/* Replays the batches that apply to the tree's version, in order, up to
 * the first batch that is torn, stale or out of sequence. */
int fs_log_replay(struct flexspace *fs, uint64_t *records)
{
	struct flextree_stats ts;
	flextree_stats(fs->tree, &ts);
	*records = 0;
	if (fs->log_base != ts.version)
		return 0; /* the tree was committed after this log was written */
	uint64_t size;
	int rc = fs->io->fsize(fs->io, fs->log_fd, &size);
	if (rc)
		return rc;
	uint64_t off = LOG_START;
	uint8_t hdr[BATCH_HDR];
	uint8_t *b = NULL;
	while (off + BATCH_HDR <= size) {
		if ((rc = flex_io_read_full(fs->io, fs->log_fd, hdr, BATCH_HDR, off)) != 0)
			break;
		uint32_t n = flex_get_le32(hdr + 4);
		if (flex_get_le32(hdr) != BATCH_MAGIC || flex_get_le64(hdr + 8) != fs->log_seq ||
		    flex_get_le64(hdr + 16) != fs->log_base || n == 0 ||
		    (uint64_t)n * REC_BYTES > size - off - BATCH_HDR)
			break;
		size_t bytes = BATCH_HDR + (size_t)n * REC_BYTES;
		uint8_t *nb = realloc(b, bytes);
		if (!nb) {
			free(b);
			return -ENOMEM;
		}
		b = nb;
		if ((rc = flex_io_read_full(fs->io, fs->log_fd, b, bytes, off)) != 0)
			break;
		uint64_t csum = flex_get_le64(b + 24);
		flex_put_le64(b + 24, 0);
		if (XXH3_64bits(b, bytes) != csum)
			break;
		const uint8_t *p = b + BATCH_HDR;
		for (uint32_t i = 0; i < n; i++, p += REC_BYTES) {
			uint64_t w0 = flex_get_le64(p);
			struct fs_rec r = {.op = (uint8_t)(w0 >> OP_SHIFT),
					   .loff = w0 & LOFF_MASK,
					   .len = flex_get_le64(p + 8),
					   .arg = flex_get_le64(p + 16)};
			/* A checksummed record is still hostile input: no range
			 * past the space's limit, no mapped extent longer than
			 * the maximum (fuzzing found both accepted). */
			int mapped = (r.op == FS_OP_INSERT || r.op == FS_OP_REMAP) &&
				     r.arg != FLEXTREE_HOLE;
			/* An insert moves everything after it up: the space
			 * grows by len from max(loff, size). */
			uint64_t now = flextree_size(fs->tree);
			uint64_t from = r.loff > now ? r.loff : now;
			if (r.loff > FLEXSPACE_MAX_SIZE || r.len > FLEXSPACE_MAX_SIZE - r.loff ||
			    (r.op == FS_OP_INSERT && r.len > FLEXSPACE_MAX_SIZE - from) ||
			    (mapped && r.len > fs->max_extent) || fs_apply(fs->tree, &r) != 0) {
				/* A checksummed record that does not fit the
				 * tree: the files disagree. */
				free(b);
				return FLEX_ECORRUPT;
			}
		}
		*records += n;
		off += bytes;
		fs->log_seq++;
	}
	free(b);
	if (rc && rc != -ENODATA)
		return rc;
	/* Batches the seal says were synced did not all replay: damage, not
	 * a torn tail. */
	uint64_t seal;
	if ((rc = log_read_seal(fs, fs->log_base, &seal)) != 0)
		return rc;
	if (seal > fs->log_seq)
		return FLEX_ECORRUPT;
	fs->log_size = off;
	fs->log_durable = fs->log_seq;
	return 0;
}

/* ---- the calls that make changes durable --------------------------------- */

/* flexspace_sync, and with `commit` flexspace_commit. */
static int fs_sync_call(struct flexspace *fs, int commit)
{
	if (!fs)
		return -EINVAL;
	if (fs->read_only)
		return FLEX_EREADONLY;
	pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	int rc = fs->failed ? FLEX_EFAILED : commit ? fs_commit(fs) : fs_log_sync(fs, 1);
	if (!rc && !commit) {
		fs_excl_lock(fs);
		fs->st.syncs++;
		fs_excl_unlock(fs);
	}
	pthread_mutex_unlock(&fs->change_mu);
	pthread_mutex_unlock(&fs->sync_mu);
	return rc;
}

int flexspace_sync(struct flexspace *fs)
{
	return fs_sync_call(fs, 0);
}

int flexspace_commit(struct flexspace *fs)
{
	return fs_sync_call(fs, 1);
}

/* Every change reaches the tree as it is made, so a clean tree is a space
 * with nothing changed since the commit. */
int flexspace_stamp(const struct flexspace *fs, uint64_t *out)
{
	if (!fs || !out)
		return -EINVAL;
	struct flexspace *m = (struct flexspace *)fs;
	pthread_mutex_lock(&m->change_mu);
	int rc = fs->failed ? FLEX_EFAILED : flextree_stamp(fs->tree, out);
	pthread_mutex_unlock(&m->change_mu);
	return rc;
}
