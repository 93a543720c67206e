/*
 * fs_ckpt.h - the two halves of a FlexSpace checkpoint, for FlexDB's own
 * checkpoint (internal to the libraries; not installed).  flexspace.h
 * documents flexspace_checkpoint, which is begin and end in one call.
 */
#ifndef FS_CKPT_H
#define FS_CKPT_H

#include "flexspace.h"

struct fs_ckpt;

/* Prepares dest (flex_ckpt_dest), syncs the space and copies its metadata
 * (TREE, and LOG under a temporary name) with the durability lock held,
 * and pins the segments that metadata may name.  at(arg), when not NULL,
 * runs while the lock is still held: no sync, tree commit or collection
 * of this space happens between the copied point and its return.
 * Returns as flexspace_checkpoint; on success *out must be passed to
 * flexspace_ckpt_end. */
FLEX_EXPORT int flexspace_ckpt_begin(struct flexspace *fs, const char *dest, int (*at)(void *arg),
				     void *arg, struct fs_ckpt **out);

/* Copies DATA (no lock held), unpins, and completes the copy: LOG under
 * its name, then IDENTITY, each step durable before the next.  With
 * abort set, or on an error, removes what the checkpoint made instead.
 * Returns 0 or the error. */
FLEX_EXPORT int flexspace_ckpt_end(struct fs_ckpt *ck, int abort);

#endif /* FS_CKPT_H */
