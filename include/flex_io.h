/*
 * flex_io.h - the one seam through which every layer touches files.
 *
 * All file I/O of flextree, flexspace and flexdb goes through a table of
 * these operations (SQLite's VFS and LevelDB's Env are the models).  The
 * default table, flex_io_posix(), uses the system calls directly and, for
 * the batch calls, io_uring when the kernel allows it (falling back to a
 * pread/pwrite loop when io_uring_setup is refused, e.g. under seccomp).
 *
 * Tests install their own table through the `io` field of the options
 * structs to fail the Nth call with EIO or ENOSPC, write short, or drop and
 * tear writes and directory entries that were never synced (a simulated
 * power loss).  Names go through the table too (create, list, remove,
 * rename, lock), so that such a table sees every change a handle makes to
 * a directory; only queries that change nothing (stat, realpath) do not.
 *
 * Every operation returns >= 0 on success and -errno on failure; none
 * sets errno for the caller.  A table must be usable from many threads.
 * Every entry but ctx and writeback must be set: build a table from a copy of
 * *flex_io_posix() and replace what you need (an incomplete table is
 * refused with FLEX_EOPTION when a handle opens).
 */
#ifndef FLEX_IO_H
#define FLEX_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "flex_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One element of a batched read or write: `len` bytes at file offset `off`. */
struct flex_iovec {
	void *buf;
	size_t len;
	uint64_t off;
};

struct flex_io {
	/* open(2): returns a descriptor or -errno. */
	int (*open)(const struct flex_io *io, const char *path, int flags, mode_t mode);
	int (*close)(const struct flex_io *io, int fd);
	/* May return fewer bytes than asked (end of file, or a short write);
	 * callers loop. */
	ssize_t (*pread)(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off);
	ssize_t (*pwrite)(const struct flex_io *io, int fd, const void *buf, size_t len,
			  uint64_t off);
	int (*fsync)(const struct flex_io *io, int fd);
	int (*fdatasync)(const struct flex_io *io, int fd);
	int (*ftruncate)(const struct flex_io *io, int fd, uint64_t size);
	int (*fallocate)(const struct flex_io *io, int fd, int mode, uint64_t off, uint64_t len);
	/* fstat(2)'s st_size. */
	int (*fsize)(const struct flex_io *io, int fd, uint64_t *size);
	/* Complete transfers of every element (looping over short transfers);
	 * 0 when all succeeded, else the first -errno.  A read that hits end
	 * of file returns -ENODATA.  Batched through io_uring when available. */
	int (*write_batch)(const struct flex_io *io, int fd, const struct flex_iovec *v, int n);
	int (*read_batch)(const struct flex_io *io, int fd, const struct flex_iovec *v, int n);

	/* Names.  A directory entry made or removed by these (or by open with
	 * O_CREAT) is durable only once its directory is fsynced (open it
	 * with O_DIRECTORY). */
	int (*mkdir)(const struct flex_io *io, const char *path, mode_t mode);
	int (*rmdir)(const struct flex_io *io, const char *path);
	int (*unlink)(const struct flex_io *io, const char *path);
	/* rename(2): replaces `to` if it exists. */
	int (*rename)(const struct flex_io *io, const char *from, const char *to);
	/* Calls fn(arg, name) for each entry of directory dir but "." and
	 * "..", in no particular order, and stops at the first nonzero
	 * return of fn, which it returns; else 0 or -errno. */
	int (*list)(const struct flex_io *io, const char *dir,
		    int (*fn)(void *arg, const char *name), void *arg);
	/* An advisory lock on an open file, shared or exclusive, taken
	 * without waiting (flock(2)): 0, or -EWOULDBLOCK while a handle
	 * holds it in a conflicting mode.  Closing the descriptor drops it. */
	int (*lock)(const struct flex_io *io, int fd, int exclusive);
	/* Starts writing [off, off + len) of a file back to the disk without
	 * waiting for it (sync_file_range(2) with SYNC_FILE_RANGE_WRITE), so
	 * that the next fdatasync has less left to wait for.  Advisory: it
	 * makes nothing durable, callers ignore its result, and it may be
	 * NULL (then nothing is started early). */
	int (*writeback)(const struct flex_io *io, int fd, uint64_t off, uint64_t len);

	/* Free for the table's owner (tests keep their state here). */
	void *ctx;
};

/* The default table.  Never NULL; static storage. */
FLEX_EXPORT const struct flex_io *flex_io_posix(void);

/* 0 when every operation of the table but the optional writeback is set,
 * else FLEX_EOPTION. */
FLEX_EXPORT int flex_io_check(const struct flex_io *io);

/* Whether the default table's batch calls use io_uring in this process
 * (1) or fell back to pread/pwrite (0).  io_uring is probed once; setting
 * the environment variable FLEX_NO_IO_URING=1 before the first batch call
 * forces the fallback. */
FLEX_EXPORT int flex_io_uring_active(void);

/* Loop helpers over any table: transfer exactly `len` bytes or fail.
 * flex_io_read_full returns -ENODATA when the file ends early. */
FLEX_EXPORT int flex_io_read_full(const struct flex_io *io, int fd, void *buf, size_t len,
				  uint64_t off);
FLEX_EXPORT int flex_io_write_full(const struct flex_io *io, int fd, const void *buf,
				   size_t len, uint64_t off);

#ifdef __cplusplus
}
#endif
#endif /* FLEX_IO_H */
