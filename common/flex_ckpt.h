/*
 * flex_ckpt.h - what the FlexSpace and FlexDB checkpoints share (internal
 * to the libraries; not installed): preparing the destination directory
 * and copying byte ranges of an open file into a new file there, through
 * the flex_io seam.
 *
 * Like everything in common/, its code is linked into libflextree, the
 * library all three layers link; the layers include it by relative path.
 */
#ifndef FLEX_CKPT_H
#define FLEX_CKPT_H

#include <stdint.h>

#include "flex_io.h"

/* Bytes [off, off + len) of a source file. */
struct flex_ckpt_range {
	uint64_t off, len;
};

/* Makes directory dest ready to receive a checkpoint of the store whose
 * directory is open as src_dir_fd: dest must be missing (it is created,
 * and its parent synced) or an empty directory, and must be neither the
 * store's directory nor inside it.  Sets *created when it made dest, and
 * *dest_fd to dest opened as a directory.  Returns 0, -EINVAL (a NULL or
 * empty dest, or dest equal to or inside the store), -EEXIST (dest holds
 * entries), -ENOTDIR (dest, or a component of it, is not a directory),
 * -ENOENT (dest's parent is missing), -errno; -EINVAL also for a NULL
 * io, created or dest_fd. */
FLEX_EXPORT int flex_ckpt_dest(const struct flex_io *io, int src_dir_fd, const char *dest,
			       int *created, int *dest_fd);

/* Creates dir/name (which must not exist), writes into it the ranges of
 * src_fd, each at its own offset, sets its size to `size` (what no range
 * covers reads as zeros) and fsyncs it.  A range the source no longer
 * holds in full is FLEX_ECORRUPT.  Returns 0, -EINVAL (a NULL io, dir
 * or name, n < 0, or NULL r with n > 0), -EEXIST, -errno. */
FLEX_EXPORT int flex_ckpt_copy(const struct flex_io *io, int src_fd, const char *dir,
			       const char *name, const struct flex_ckpt_range *r, int n,
			       uint64_t size);

/* Removes dir/name if present (a checkpoint that failed takes back what
 * it made); NULL io, dir or name: nothing. */
FLEX_EXPORT void flex_ckpt_unlink(const struct flex_io *io, const char *dir, const char *name);

#endif /* FLEX_CKPT_H */
