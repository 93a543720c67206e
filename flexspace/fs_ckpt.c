/*
 * fs_ckpt.c - online checkpoints of a FlexSpace: a consistent, openable
 * copy of the space as of the call, made while changes go on.
 *
 * What a copy needs is a durable state of the space: the committed tree
 * (TREE), the log batches synced on top of it (LOG), and the bytes of
 * DATA they name.  Under sync_mu, which every writer of TREE and LOG
 * holds, the checkpoint syncs (so every change that returned before the
 * call is in that state), notes the segments that are not free, pins
 * them, and copies TREE and LOG.  Changes go on meanwhile: they write only
 * the open segment and fresh segments of DATA, never TREE or LOG (in a
 * space with max_data_size they take sync_mu too and wait).  Then, with
 * no lock held, DATA is copied: bytes at a physical address never change
 * until their segment is freed and reused, and a pinned segment is not
 * freed (flexspace_int.h).  Free segments are left as holes.
 *
 * The copy is made crash-safe the way a store is created, backwards:
 * IDENTITY is written last.  Until then the directory holds TREE, DATA,
 * LOCK and LOG.ckpt -- no LOG and no IDENTITY, which open refuses as not
 * a store (FLEX_ENOTSTORE).  Once every file and the directory are
 * durable, LOG.ckpt is renamed to LOG (from here the directory would
 * open as a space made before identities, and it is whole), and
 * flex_ident_write makes IDENTITY durable.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/flex_ckpt.h"
#include "../common/flex_ident.h"
#include "../common/flex_killpoint.h"
#include "flexspace_int.h"

#define CKPT_LOG "LOG.ckpt"

struct flexspace_ckpt {
	struct flexspace *fs;
	char *dest;
	int dest_fd;
	int created;
	uint64_t data_size; /* DATA's size at the copied point */
	uint32_t nsegs;
	uint8_t *pinned; /* the segments DATA's copy needs */
};

static int ckpt_path(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/* Copies the whole of dir/name (or [0, len) of it when len is not
 * UINT64_MAX) to dest/as. */
static int ckpt_copy_file(struct flexspace *fs, const char *name, uint64_t len, const char *dest,
			  const char *as)
{
	char path[PATH_MAX];
	int rc = ckpt_path(path, fs->dir, name);
	if (rc)
		return rc;
	int fd = fs->io->open(fs->io, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	uint64_t size;
	rc = fs->io->fsize(fs->io, fd, &size);
	if (!rc && len != UINT64_MAX) {
		if (size < len)
			rc = FLEX_ECORRUPT;
		size = len;
	}
	struct flex_ckpt_range r = {0, size};
	if (!rc)
		rc = flex_ckpt_copy(fs->io, fd, dest, as, &r, 1, size);
	fs->io->close(fs->io, fd);
	return rc;
}

/* Takes back what the checkpoint made: the known names, and dest itself
 * when the checkpoint created it. */
static void ckpt_clean(struct flexspace_ckpt *ck)
{
	static const char *const names[] = {FLEX_IDENT_NAME, "LOG",  CKPT_LOG,
					    "TREE",	     "DATA", "LOCK"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		flex_ckpt_unlink(ck->fs->io, ck->dest, names[i]);
	if (ck->created)
		ck->fs->io->rmdir(ck->fs->io, ck->dest);
}

static void ckpt_free(struct flexspace_ckpt *ck)
{
	if (ck->dest_fd >= 0)
		ck->fs->io->close(ck->fs->io, ck->dest_fd);
	free(ck->pinned);
	free(ck->dest);
	free(ck);
}

static void ckpt_unpin(struct flexspace_ckpt *ck)
{
	struct flexspace *fs = ck->fs;
	pthread_mutex_lock(&fs->change_mu);
	fs_excl_lock(fs);
	free(fs->pinned);
	fs->pinned = NULL;
	fs->npinned = 0;
	fs_excl_unlock(fs);
	pthread_mutex_unlock(&fs->change_mu);
}

int flexspace_ckpt_begin(struct flexspace *fs, const char *dest, int (*at)(void *arg), void *arg,
			 struct flexspace_ckpt **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!fs || !dest || !*dest)
		return -EINVAL;
	if (fs->read_only)
		return FLEX_EREADONLY;
	struct flexspace_ckpt *ck = calloc(1, sizeof(*ck));
	if (!ck)
		return -ENOMEM;
	ck->fs = fs;
	ck->dest_fd = -1;
	if (!(ck->dest = strdup(dest))) {
		free(ck);
		return -ENOMEM;
	}
	pthread_mutex_lock(&fs->ckpt_mu);
	int rc = flex_ckpt_dest(fs->io, fs->dir_fd, dest, &ck->created, &ck->dest_fd);
	if (rc) {
		pthread_mutex_unlock(&fs->ckpt_mu);
		ckpt_free(ck);
		return rc;
	}

	pthread_mutex_lock(&fs->sync_mu);
	pthread_mutex_lock(&fs->change_mu);
	rc = fs->failed ? FLEX_EFAILED : fs_log_sync(fs, 1);
	uint64_t log_size = 0;
	if (!rc) {
		/* The durable state is the current one less the changes made
		 * during the sync's disk wait: every segment it may name is
		 * not free now. */
		rc = fs->io->fsize(fs->io, fs->data_fd, &ck->data_size);
		ck->nsegs = fs->nsegs;
		if (!rc && !(ck->pinned = malloc(ck->nsegs ? ck->nsegs : 1)))
			rc = -ENOMEM;
		uint8_t *pin = rc ? NULL : malloc(ck->nsegs ? ck->nsegs : 1);
		if (!rc && !pin)
			rc = -ENOMEM;
		if (!rc) {
			for (uint32_t s = 0; s < ck->nsegs; s++)
				ck->pinned[s] = fs->state[s] != SEG_FREE;
			memcpy(pin, ck->pinned, ck->nsegs);
			fs_excl_lock(fs);
			fs->pinned = pin;
			fs->npinned = ck->nsegs;
			fs_excl_unlock(fs);
		}
		log_size = fs->log_size;
	}
	pthread_mutex_unlock(&fs->change_mu);
	/* sync_mu still held: TREE and LOG stay as synced. */
	if (!rc)
		rc = ckpt_copy_file(fs, "TREE", UINT64_MAX, dest, "TREE");
	if (!rc)
		rc = ckpt_copy_file(fs, "LOG", log_size, dest, CKPT_LOG);
	if (!rc && at)
		rc = at(arg);
	pthread_mutex_unlock(&fs->sync_mu);
	if (rc) {
		flexspace_ckpt_end(ck, 1);
		return rc;
	}
	*out = ck;
	return 0;
}

int flexspace_ckpt_end(struct flexspace_ckpt *ck, int abort)
{
	if (!ck)
		return -EINVAL;
	struct flexspace *fs = ck->fs;
	int rc = 0;
	if (!abort) {
		/* The pinned segments, clipped to DATA's size then, as runs. */
		uint64_t seg = fs->seg_size;
		struct flex_ckpt_range *r = malloc(((size_t)ck->nsegs + 1) * sizeof(*r));
		int n = 0;
		if (!r)
			rc = -ENOMEM;
		for (uint32_t s = 0; !rc && s < ck->nsegs; s++) {
			uint64_t a = (uint64_t)s * seg;
			if (!ck->pinned[s] || a >= ck->data_size)
				continue;
			uint64_t b = a + seg < ck->data_size ? a + seg : ck->data_size;
			if (n && r[n - 1].off + r[n - 1].len == a)
				r[n - 1].len += b - a;
			else
				r[n++] = (struct flex_ckpt_range){a, b - a};
		}
		if (!rc)
			rc = flex_ckpt_copy(fs->io, fs->data_fd, ck->dest, "DATA", r, n,
					    ck->data_size);
		free(r);
		FLEX_KILLPOINT("ckpt.data.copied");
	}
	ckpt_unpin(ck);
	pthread_mutex_unlock(&fs->ckpt_mu);
	if (!abort && !rc) {
		/* LOCK is empty: only its name matters, to opens without
		 * create. */
		struct flex_ckpt_range none = {0, 0};
		rc = flex_ckpt_copy(fs->io, fs->data_fd, ck->dest, "LOCK", &none, 0, 0);
	}
	if (!abort && !rc) {
		rc = fs->io->fsync(fs->io, ck->dest_fd);
		/* Every file durable, LOG under its temporary name. */
		if (!rc)
			FLEX_KILLPOINT("ckpt.space.copied");
	}
	if (!abort && !rc) {
		char from[PATH_MAX], to[PATH_MAX];
		rc = ckpt_path(from, ck->dest, CKPT_LOG);
		if (!rc)
			rc = ckpt_path(to, ck->dest, "LOG");
		if (!rc)
			rc = fs->io->rename(fs->io, from, to);
		/* LOG in place, the rename not durable, no IDENTITY. */
		if (!rc)
			FLEX_KILLPOINT("ckpt.space.renamed");
	}
	if (!abort && !rc)
		rc = flex_ident_write(fs->io, ck->dest, ck->dest_fd, FLEX_KIND_SPACE, 0);
	if (abort || rc)
		ckpt_clean(ck);
	ckpt_free(ck);
	return rc;
}

int flexspace_checkpoint(struct flexspace *fs, const char *dest_dir)
{
	struct flexspace_ckpt *ck;
	int rc = flexspace_ckpt_begin(fs, dest_dir, NULL, NULL, &ck);
	return rc ? rc : flexspace_ckpt_end(ck, 0);
}
