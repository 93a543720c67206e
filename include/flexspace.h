/*
 * flexspace.h - FlexSpace, a persistent flexible address space (paper
 * section 4): a file substitute with byte-granular insert and collapse.
 *
 * A space lives in a directory of five files: IDENTITY (what the directory
 * is, written first at creation), DATA (a log-structured data file of
 * fixed-size segments), TREE (the FlexTree of its extents, a copy-on-write
 * file), LOG (a logical log of the metadata changes since the tree's last
 * commit) and LOCK.  Writes are buffered in one in-memory
 * segment; flexspace_sync() makes everything before it durable.  Recovery
 * replays the valid prefix of the log on the last committed tree.  The
 * formats and the crash protocol are in docs/FORMAT.md.
 *
 * Offsets and sizes are bytes; the logical size may reach
 * FLEXSPACE_MAX_SIZE.  Any length may be written or inserted in one call;
 * it is stored as extents of at most segment_size / 32 bytes.
 *
 * Thread-safety: one handle may be used by many threads at once; reads run
 * in parallel, changes are serialised.  No read waits for the disk to
 * acknowledge a write: syncs, tree commits and garbage collection do their
 * fdatasyncs without the lock readers take, and changes go on during a
 * sync's fdatasyncs too (a tree commit and a collection hold changes off,
 * not reads).
 * Statuses, argument order (handle, buffer, off, len, out-parameters) and
 * integer types (uint64_t offsets and lengths in the space, size_t for
 * the caller's buffers) follow flex_common.h.  After an I/O error while
 * writing or syncing, every later change returns FLEX_EFAILED; reads
 * still work and what was synced is intact on disk.
 */
#ifndef FLEXSPACE_H
#define FLEXSPACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "flex_common.h"
#include "flex_io.h"
#include "flextree.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLEXSPACE_MAX_SIZE ((uint64_t)1 << 48)

struct flexspace;

struct flexspace_options {
	/* File operations; NULL means flex_io_posix().  Not owned.  A table
	 * with an operation unset is refused (FLEX_EOPTION, flex_io_check). */
	const struct flex_io *io;
	/* Segment size of the data file in bytes: a power of two from 64 KiB
	 * to 256 MiB.  0 means 4 MiB.  Fixed when the space is created; later
	 * opens read it from the files and ignore this field.  The maximum
	 * extent is a 32nd of it, which guarantees that garbage collection
	 * always frees room for at least one extent. */
	uint64_t segment_size;
	/* Logical-log bytes (buffered in memory until a sync, plus those in
	 * LOG) after which the tree is committed and the log reset.  0 means
	 * 8 MiB.  Range: 64 KiB .. 1 GiB.  It bounds the log buffer's memory
	 * (about 1.4x this); larger means fewer tree commits and slower
	 * recovery. */
	uint64_t log_limit;
	/* Garbage collection starts when the segments holding data take more
	 * than this many bytes for each byte of live data (space
	 * amplification), counted over whole segments.  Free segments are
	 * not counted: they are reused before the data file grows (and, in a
	 * space without max_data_size, punched as holes when freed).  0
	 * means 1.5.  Range: 1.1 .. 100. */
	double gc_ratio;
	/* Largest data file in bytes; writes that would need more fail with
	 * -ENOSPC.  Live data is capped at 30/32 of it so that collection can
	 * always make progress.  0 means no limit (2^48 bytes). */
	uint64_t max_data_size;
	/* Zero (default, with a NULL opt too): create the directory and files
	 * when the directory is missing or empty.  Nonzero: opening a missing
	 * or empty directory fails with -ENOENT, and no file is created or
	 * written there. */
	int no_create;
	/* Zero (default): DATA is also mapped read-only and reads copy from
	 * the mapping, with no system call when the kernel holds the page.
	 * As with any mapped file (LMDB's too), a disk that fails to read a
	 * page then raises SIGBUS in the reading thread instead of returning
	 * -EIO.  Nonzero: every read is a pread (or an io_uring batch) and a
	 * read error is returned as -EIO.  Writes never go through the
	 * mapping; a table in `io` other than flex_io_posix() implies
	 * nonzero.  The pages a read copied from the mapping stay in the
	 * process's page tables, counted in its RSS (RssFile, page cache the
	 * kernel may reclaim), up to the size of the data file; with
	 * nonzero, none are (flexspace_resident() still asks the kernel,
	 * through a mapping no read touches: address space, as with zero,
	 * of up to max_data_size or 256 GiB). */
	int no_mmap;
	/* Zero (default): a change that makes maintenance due (a tree commit
	 * once the log passes log_limit, a garbage collection once the data
	 * file passes gc_ratio) runs it before returning, after letting go of
	 * the locks its change held.  Nonzero: changes never run it; the
	 * caller calls flexspace_maintain() when it holds no lock of its own
	 * that readers wait for (FlexDB: after each chunk it applies).  A
	 * sync still commits the tree when the log is over log_limit, and in
	 * a space with max_data_size a change still syncs or collects when
	 * it needs room.  The log buffer is bounded only as often as
	 * flexspace_maintain() or flexspace_sync() is called. */
	int defer_maintenance;
	/* Bytes of TREE leaves kept in memory (flextree_options.cache_size):
	 * 0 means FLEXTREE_DEFAULT_CACHE (16 MiB).  Leaves changed since the
	 * tree's last commit cannot leave memory, so a change that leaves
	 * more of them than this commits the tree early (as log_limit does),
	 * which bounds the tree's memory by about this plus the internal
	 * nodes and leaf stubs (about 75 bytes per leaf of up to 336
	 * extents: under a byte per extent); a garbage collection commits
	 * the tree the same way between its batches of up to 64 extents
	 * moved, so it may pass the bound by one batch's leaves.
	 * Log replay at open may exceed it until the next commit. */
	uint64_t tree_cache_size;
	/* Nonzero opens the space read-only, for backups, dumps, a second
	 * reading process or a user without write permission: every file is
	 * opened O_RDONLY and nothing is ever created, written, truncated,
	 * synced or removed, not even by open or close.  The lock on LOCK
	 * (and TREE) is shared: any number of read-only handles may be open
	 * at once, in any processes, while a writable handle and a read-only
	 * one exclude each other (FLEX_EBUSY, at once).  It implies no_create
	 * (a missing or empty directory is -ENOENT).  A log left by a crash is
	 * replayed into memory only, so the handle sees what a writable open
	 * would recover; the files keep it for the next writable open.
	 * Reads, flexspace_scan, tag_get, check, stats and durable work; every
	 * change, flexspace_sync and flexspace_maintain return
	 * FLEX_EREADONLY.  docs/DURABILITY.md, "Read-only handles". */
	int read_only;
};

struct flexspace_stats {
	uint64_t size;		     /* logical size */
	uint64_t extents;	     /* extents in the tree, holes included */
	uint64_t data_file_bytes;    /* size of DATA */
	uint64_t live_bytes;	     /* bytes of DATA referenced by extents */
	uint64_t segment_size;
	uint64_t segments_used;	     /* holding live data, or open for appends */
	uint64_t segments_free;	     /* reusable now */
	uint64_t segments_pending;   /* emptied; reusable after the next sync */
	uint64_t data_bytes_written; /* to DATA by this handle */
	uint64_t log_bytes_written;  /* to LOG by this handle */
	uint64_t tree_bytes_written; /* to TREE by this handle */
	uint64_t tree_commits;
	uint64_t gc_runs;
	uint64_t gc_bytes_moved;
	uint64_t log_bytes;	     /* current LOG size */
	uint64_t syncs;
	uint64_t recovered_records;  /* log records replayed at open */
	/* The durable point: the tree version the log applies to, and the
	 * log batches synced on top of it.  Compared as a pair it never goes
	 * back, across crashes too, so a recovered point below one seen
	 * earlier means a file went back in time (FlexDB records it in each
	 * WAL to check).  recovered_* is the point open found, before it
	 * committed the recovered state. */
	uint64_t sync_version;
	uint64_t sync_batches;
	uint64_t recovered_version;
	uint64_t recovered_batches;
};

/* Opens or creates the space in directory dir (created when missing
 * unless opt->no_create or opt->read_only).  A space is created only
 * in a missing or empty directory (or one holding only the IDENTITY of a
 * creation cut short), and an existing one is opened only when its
 * IDENTITY, or for a space made before identities its LOG header, proves
 * the library made it (docs/DURABILITY.md, "What open refuses").  Any
 * other directory is refused before a file is created, opened for writing
 * or changed:
 *   FLEX_ENOTSTORE    it holds files the library did not create
 *   FLEX_EKIND_DB     it is a FlexDB store (open it with flexdb_open)
 *   -ENOENT           missing or empty, and no_create is set
 * Other returns: 0 and *out, FLEX_EBUSY (another handle or process holds
 * it: any handle, for a writable open; a writable one, for a read-only
 * open), FLEX_ECORRUPT (also a creation cut short, opened with
 * no_create or read-only), FLEX_EVERSION, FLEX_EOPTION (before anything is
 * touched; flexspace_options_check names the field), -ENOTDIR, -EACCES
 * (no permission to open a file as asked: read-only needs only read
 * permission), -errno.  On failure *out is NULL.  Replays the log if the
 * last session did not close cleanly (read-only: in memory only); a
 * space made before identities gets its IDENTITY when opened without
 * no_create or read_only. */
FLEX_EXPORT int flexspace_open(const char *dir, const struct flexspace_options *opt,
			       struct flexspace **out);

/* The check flexspace_open makes of its options: 0 when every field is in
 * its documented range (opt NULL: the defaults, which are), else
 * FLEX_EOPTION with *field set to the first field out of range, by its
 * name in struct flexspace_options ("segment_size", "log_limit",
 * "gc_ratio", "max_data_size"; a static string), and to NULL on success.
 * field may be NULL.  Touches no file. */
FLEX_EXPORT int flexspace_options_check(const struct flexspace_options *opt, const char **field);

/* Syncs, commits the tree, resets the log and frees the handle (even on
 * error, whose status it returns).  A read-only handle writes nothing
 * and returns 0.  NULL is a no-op returning 0. */
FLEX_EXPORT int flexspace_close(struct flexspace *fs);

/* Reads up to len bytes at off.  Returns the bytes read: fewer at the end
 * of the space, 0 at or past it.  Holes read as zeros.  Errors: -EINVAL
 * (NULL buf with len > 0), FLEX_ECORRUPT, -errno. */
FLEX_EXPORT ssize_t flexspace_read(const struct flexspace *fs, void *buf, uint64_t off, size_t len);

/* Where the bytes of a space lie, for reading them again without asking
 * the tree.  flexspace_read_locate reads as flexspace_read does and also
 * reports the pieces of DATA the bytes came from: up to
 * FLEXSPACE_LOCATE_MAX pieces in loc, their number in *nloc (0 when the
 * range needed more, or was empty), and in *stamp a mark of the space's
 * state.  flexspace_read_located reads the pieces loc[0..nloc) again
 * (any sub-range of them: shortened or split pieces of a report are
 * fine) into buf, back to back.  A piece's bytes stay where they are
 * until the space frees the segment holding them, which happens only
 * after a change removed or moved them and that change became durable;
 * flexspace_read_located then returns -ESTALE instead of reading, and
 * the caller reads through the logical offsets again.  The places are
 * those of the bytes *at the time of the report*: a caller must itself
 * know that the logical range was not changed since (a write puts new
 * bytes elsewhere and leaves the old ones readable until freed).
 * flexspace_read_locate returns the bytes read, flexspace_read_located 0;
 * either may return -EINVAL, -ESTALE (read_located), FLEX_ECORRUPT or
 * -errno. */
#define FLEXSPACE_LOCATE_MAX 128
FLEX_EXPORT ssize_t flexspace_read_locate(const struct flexspace *fs, void *buf, uint64_t off,
					  size_t len, struct flextree_mapping *loc, size_t *nloc,
					  uint64_t *stamp);
/* The report alone, without reading: 0 or an error as flexspace_read. */
FLEX_EXPORT int flexspace_locate(const struct flexspace *fs, uint64_t off, uint64_t len,
				 struct flextree_mapping *loc, size_t *nloc, uint64_t *stamp);
FLEX_EXPORT int flexspace_read_located(const struct flexspace *fs, void *buf,
				       const struct flextree_mapping *loc, size_t nloc,
				       uint64_t stamp);

/* Whether bytes [off, off+len) of the space are in memory now: 1 when
 * every page of the data file they lie in is in the page cache (or the
 * range holds no bytes of the file), 0 when one is not or the space
 * cannot tell (an I/O table other than flex_io_posix(), a process that
 * neither owns the data file nor may write it, whom the kernel does not
 * tell, or a mapping the kernel refused), or -EINVAL or an error as
 * flexspace_read.  A hint for a caller choosing
 * what to read ahead: the kernel may load or drop pages right after.
 * A range of more than FLEXSPACE_LOCATE_MAX pieces (holes included)
 * cannot be told: 0. */
FLEX_EXPORT int flexspace_resident(const struct flexspace *fs, uint64_t off, uint64_t len);

/* Reads the ranges v[0..n) of the space at once: v[i].len bytes at
 * logical offset v[i].off into v[i].buf (destinations disjoint; each
 * range inside the space).  For a caller that reads much of a space
 * that may not fit in memory: the pieces of the data file the ranges lie
 * in are read in the file's order, neighbours as one request; what the
 * page cache holds is copied from it, and the rest is read past it
 * (O_DIRECT, where the data file is mapped for reads and its file
 * system allows it; otherwise through the page cache), so the read
 * neither pays for filling the page cache nor evicts what others keep
 * there.  Reads go into a staging buffer about as large as what is read
 * from the disk; the space keeps the last one of at most 8 MiB for the
 * next read, its pages left to the kernel to reclaim (MADV_FREE).
 * Returns 0, -EINVAL (a range past the end, a NULL buf, n < 0),
 * FLEX_ECORRUPT or -errno. */
FLEX_EXPORT int flexspace_read_many(const struct flexspace *fs, const struct flex_iovec *v,
				    int n);

/* flexspace_read_many in two halves, so that the caller works while the
 * disk reads: _begin takes the places of the ranges' bytes, copies what
 * needs no read from the disk, reads the file's last page and pieces
 * longer than 512 KiB at once, and starts the other reads (through
 * io_uring when the process may use it; otherwise _end does them); _end,
 * from any thread, waits for them and fills the buffers.  Between the
 * two the caller may change the space, but the buffers get the bytes the
 * ranges held at the begin only while the space frees no segment they
 * lie in (a free follows a change that removed or moved the bytes, once
 * it is durable): _end then returns -ESTALE instead (also when such a
 * segment was cut off the file and its read failed), and the buffers
 * hold garbage.  Every begun
 * read must be ended, before the space is closed; one space runs one at
 * a time through io_uring (a second one is read at its end).  _begin
 * returns 0 and *out, or an error as flexspace_read_many (*out NULL);
 * _end returns 0, -ESTALE, FLEX_ECORRUPT or -errno, and frees r. */
struct flexspace_reads;
FLEX_EXPORT int flexspace_read_many_begin(const struct flexspace *fs, const struct flex_iovec *v,
					  int n, struct flexspace_reads **out);
FLEX_EXPORT int flexspace_read_many_end(struct flexspace_reads *r);

/* Overwrites and/or extends: bytes [off, off+len) get buf.  Past the end,
 * [size, off) becomes a hole (reads as zeros).  Returns len, or -EINVAL,
 * FLEX_ETOOBIG (off+len beyond FLEXSPACE_MAX_SIZE), -ENOSPC, FLEX_EFAILED,
 * FLEX_EREADONLY (a read-only handle: so for every change below), -errno.
 * Not durable until flexspace_sync. */
FLEX_EXPORT ssize_t flexspace_write(struct flexspace *fs, const void *buf, uint64_t off,
				    size_t len);

/* Inserts len bytes at off; what was at and after off moves up by len.
 * off > size inserts after a hole.  Returns len or an error as
 * flexspace_write. */
FLEX_EXPORT ssize_t flexspace_insert(struct flexspace *fs, const void *buf, uint64_t off,
				     size_t len);

/* Removes [off, off+len); what followed moves down.  Returns 0, -ERANGE
 * (past the end), FLEX_EFAILED, FLEX_EREADONLY, -errno. */
FLEX_EXPORT int flexspace_collapse(struct flexspace *fs, uint64_t off, uint64_t len);

/* Shrinks (dropping the tail) or grows (with a hole) to size.  Returns 0,
 * FLEX_ETOOBIG (size beyond FLEXSPACE_MAX_SIZE), FLEX_EFAILED,
 * FLEX_EREADONLY, -errno. */
FLEX_EXPORT int flexspace_truncate(struct flexspace *fs, uint64_t size);

/* One change made of several: flexspace_apply applies ops[0..n) in order,
 * each to the space as the ones before it left it, as one change.  It is
 * all or nothing:
 *   - every op is checked against the sizes the ones before it leave
 *     before anything changes, so a bad op (or -ENOSPC from a space with
 *     max_data_size) returns its error with nothing applied;
 *   - readers see the space before the call or after it, never between;
 *   - a sync or a tree commit never falls inside a call: after a crash,
 *     recovery gives the space with all of the call or none of it (all of
 *     it, if a sync that began after the call returned succeeded).
 * An error while applying (the data could not be written, memory ran
 * out) fails the handle as any failed change does, and nothing of the
 * call reaches the disk.  The ops, with the same checks and returns as
 * the calls they name (off and len in bytes, buf holding buf_len bytes):
 *   FLEXSPACE_OP_WRITE     flexspace_write(buf, off, buf_len)
 *   FLEXSPACE_OP_INSERT    flexspace_insert(buf, off, buf_len)
 *   FLEXSPACE_OP_COLLAPSE  flexspace_collapse(off, len)
 *   FLEXSPACE_OP_REPLACE   removes [off, off+len) and inserts buf_len
 *                          bytes of buf at off: both must fit as a
 *                          collapse and an insert would (-ERANGE,
 *                          FLEX_ETOOBIG)
 *   FLEXSPACE_OP_TAG       flexspace_tag_set(off, tag)
 * Returns 0 (n == 0 included), -EINVAL (NULL fs, NULL ops with n > 0, an
 * unknown type, NULL buf with buf_len > 0), -ERANGE, FLEX_ETOOBIG,
 * -ENOSPC, FLEX_EFAILED, FLEX_EREADONLY, -errno.  Not durable until
 * flexspace_sync. */
enum flexspace_op_type {
	FLEXSPACE_OP_WRITE = 1,
	FLEXSPACE_OP_INSERT = 2,
	FLEXSPACE_OP_COLLAPSE = 3,
	FLEXSPACE_OP_REPLACE = 4,
	FLEXSPACE_OP_TAG = 5,
};
struct flexspace_op {
	int type;	/* enum flexspace_op_type */
	uint16_t tag;	/* FLEXSPACE_OP_TAG */
	uint64_t off;
	uint64_t len;	/* bytes removed: COLLAPSE, REPLACE */
	const void *buf; /* bytes put: WRITE, INSERT, REPLACE */
	size_t buf_len;
};
FLEX_EXPORT int flexspace_apply(struct flexspace *fs, const struct flexspace_op *ops, size_t n);

/* Logical size; 0 for NULL. */
FLEX_EXPORT uint64_t flexspace_size(const struct flexspace *fs);

/* Durability barrier: when it returns 0, every write, insert, collapse,
 * truncate, tag change and defrag that returned before the call began
 * survives a crash or power loss.  A change that runs concurrently with
 * the sync (returns after the call began) may or may not be made durable
 * by it; the next sync covers it.  Writes the buffered segment, takes the
 * buffered log records, then, without the lock readers and changes take,
 * fdatasyncs DATA, appends the records to LOG as one batch and fdatasyncs
 * it (committing the tree too once the log passes log_limit, with changes
 * but not reads held off).  Concurrent syncs run one after another.
 * Returns 0, FLEX_EFAILED, -errno (the handle then refuses changes), or
 * FLEX_EREADONLY for a read-only handle (which has nothing to make
 * durable, and writes nothing). */
FLEX_EXPORT int flexspace_sync(struct flexspace *fs);

/* flexspace_sync, then commits the tree and starts a new log, as close
 * does: afterwards the space holds no change since its tree's last commit
 * until the next change.  Returns 0, FLEX_EFAILED, FLEX_EREADONLY, -errno
 * (which fails the handle, as a failed sync does). */
FLEX_EXPORT int flexspace_commit(struct flexspace *fs);
/* A value that names the space's contents while it holds no change since
 * its tree's last commit (after flexspace_commit, or an open that had no
 * log to replay): within one space's history, a later open that gives the
 * same stamp has the same extents and tags, so reads the same bytes
 * (flextree_stamp).  A layer above may keep what it derived from the
 * contents beside them and trust it when the stamps agree (spaces of
 * another history may share a stamp: check a sample against the space).
 * Returns 0 and *out; -EAGAIN once anything changed since that commit;
 * -EINVAL, FLEX_EFAILED. */
FLEX_EXPORT int flexspace_stamp(const struct flexspace *fs, uint64_t *out);
/* Online backup: writes into directory dest_dir a copy of the space that
 * opens (flexspace_open) as the space was when the call began: every
 * change that returned before the call is in it, and the copy is the
 * state after a prefix of the changes, as a recovery would give.  Reads
 * and changes go on while it runs; it holds changes off only for a sync
 * and reads off not at all, and then, while it copies TREE and the
 * synced part of LOG, holds off syncs, tree commits and collections (and
 * the changes of a space with max_data_size, which may need them).  DATA
 * is copied with no lock held: its segments that the copy needs are kept
 * from reuse until the call returns, so the data file may grow
 * meanwhile, and in a space with max_data_size a change may then get
 * -ENOSPC where it would have collected garbage.  Free segments are
 * holes in the copy.  One checkpoint of a handle runs at a time.
 *
 * dest_dir must be missing (it is created; its parent must exist) or an
 * empty directory, and neither the space's directory nor inside it.  The
 * copy is crash-safe: every file and the directory are made durable, and
 * IDENTITY is written last; a checkpoint cut short by a crash leaves a
 * directory that open refuses with FLEX_ENOTSTORE, or once the copy is
 * whole, one that opens as it (docs/DURABILITY.md, "Checkpoints").  On
 * an error the files it made (and dest_dir, if it made it) are removed.
 * Returns 0, or:
 *   -EINVAL        NULL fs or dest_dir, an empty dest_dir, or dest_dir
 *                  equal to or inside the space's directory
 *   -EEXIST        dest_dir is a directory with entries in it
 *   -ENOTDIR       dest_dir (or a component of its path) is not a
 *                  directory
 *   -ENOENT        the parent of dest_dir is missing
 *   FLEX_EFAILED   the handle failed earlier (nothing is copied)
 *   FLEX_EREADONLY the handle is read-only (nothing is copied: a
 *                  checkpoint syncs; with no writer open the space's
 *                  files can be copied as they are)
 *   FLEX_ECORRUPT  a file of the space ended before its recorded size
 *   -errno         from the sync (which then fails the handle, as any
 *                  failed sync does) or from writing the copy (the
 *                  handle stays usable) */
FLEX_EXPORT int flexspace_checkpoint(struct flexspace *fs, const char *dest_dir);

/* A checkpoint in two halves, for a caller that keeps files of its own
 * beside a space and must copy them at the very point the space's copy
 * is taken (FlexDB copies its write-ahead logs there).
 * flexspace_checkpoint(fs, d) is flexspace_ckpt_begin(fs, d, NULL, NULL,
 * &ck) followed by flexspace_ckpt_end(ck, 0). */
struct flexspace_ckpt;

/* Starts a checkpoint into dest_dir, with the rules and errors of
 * flexspace_checkpoint: syncs the space, copies TREE and the synced part
 * of LOG (under a temporary name) while holding off syncs, tree commits
 * and collections, and keeps the segments of DATA the copy needs from
 * reuse.  at(arg), when not NULL, runs while that hold is still on: no
 * sync, tree commit or collection of this space happens between the
 * copied point and its return.  A nonzero return of at ends the
 * checkpoint with that status.  On success *out is set, and must be
 * passed to flexspace_ckpt_end exactly once; until then, another
 * checkpoint of the handle waits.  On an error *out is NULL and nothing
 * is left of the copy.  Also -EINVAL for a NULL out. */
FLEX_EXPORT int flexspace_ckpt_begin(struct flexspace *fs, const char *dest_dir,
				     int (*at)(void *arg), void *arg,
				     struct flexspace_ckpt **out);

/* Ends a checkpoint and frees ck: copies DATA (with no lock held), lets
 * the kept segments be reused, and completes the copy -- LOG under its
 * name, then IDENTITY, each step durable before the next.  With abort
 * set, or on an error, removes what the checkpoint made instead (dest_dir
 * too, if the checkpoint created it).  Returns 0, -EINVAL for a NULL ck,
 * or an error of flexspace_checkpoint's from writing the copy. */
FLEX_EXPORT int flexspace_ckpt_end(struct flexspace_ckpt *ck, int abort);

/* Runs the maintenance changes have made due and deferred (see
 * defer_maintenance): commits the tree if the log is over log_limit, then
 * collects garbage if the data file is over gc_ratio (which ends with a
 * sync).  Reads go on meanwhile; changes wait for the tree commit and for
 * the collection's copying, not for its sync.  Returns 0 (also when
 * nothing was due), FLEX_EFAILED, FLEX_EREADONLY, -errno; an error fails
 * the handle as a failed sync does. */
FLEX_EXPORT int flexspace_maintain(struct flexspace *fs);
/* flexspace_maintain, collecting garbage only once the data file is over
 * gc_ratio + slack bytes per live byte: for a caller about to empty the
 * segments a collection would copy from (FlexDB rewriting its intervals
 * in key order empties every older segment by the end of its pass).  A
 * bounded space (max_data_size) still collects when a change needs room.
 * -EINVAL for a negative slack. */
FLEX_EXPORT int flexspace_maintain_slack(struct flexspace *fs, double slack);
/* Collects every segment of the data file that is at most half live,
 * whatever gc_ratio says: each byte it copies frees one at least.  For a
 * caller that has just rewritten most of its data elsewhere (FlexDB at
 * the end of the tidying flexdb_compact waits for), whose older segments
 * hold little but garbage; the collection gc_ratio starts would leave
 * them until the data file passed the ratio again.  Runs as many
 * collections as that takes (each ends with a sync; changes wait for
 * their copying, reads do not), committing the tree first if it is due.
 * It stops early, returning 0, in a space with max_data_size when the
 * copies do not fit, and after as many runs as there were such segments
 * when it began (changes made meanwhile may leave more).  Segments a
 * checkpoint holds are copied but freed only after it ends.
 * Returns 0, FLEX_EFAILED, FLEX_EREADONLY, -EINVAL for a NULL handle,
 * FLEX_ECORRUPT for a victim that cannot be read whole, -errno; an error
 * fails the handle as a failed sync does. */
FLEX_EXPORT int flexspace_collect(struct flexspace *fs);

/* Paper section 5.4: reads from the start of the extent containing off
 * (up to maxlen bytes, continuing into later extents if maxlen asks for
 * more) and reports that extent's logical start and length.  Returns the
 * bytes read, or -ERANGE when off >= size, -EINVAL, -errno. */
FLEX_EXPORT ssize_t flexspace_read_extent(const struct flexspace *fs, void *buf, uint64_t off,
					  size_t maxlen, uint64_t *extent_off,
					  uint64_t *extent_len);

/* Tags mark extents for the layer above (see flextree.h for how splits
 * treat them).  flexspace_tag_set makes an extent start at off and tags
 * it; the change is logged like any other (returns 0, -ERANGE,
 * FLEX_EFAILED, FLEX_EREADONLY, -errno).  flexspace_tag_get reports the
 * tag of the extent containing off and that extent's start.  Rewriting a
 * range (write, defrag) drops the tags inside it except where defrag
 * preserves them at the same offsets. */
FLEX_EXPORT int flexspace_tag_set(struct flexspace *fs, uint64_t off, uint16_t tag);
FLEX_EXPORT int flexspace_tag_get(const struct flexspace *fs, uint64_t off, uint16_t *tag,
				  uint64_t *extent_off);

/* As flextree_scan, on the space's tree: calls fn for every extent
 * intersecting [off, off+len) in logical order (under the read lock: fn
 * must not call back into the space) until fn returns nonzero; returns 0,
 * fn's value, -EINVAL (NULL fs or fn) or -ERANGE. */
FLEX_EXPORT int flexspace_scan(const struct flexspace *fs, uint64_t off, uint64_t len,
			       flextree_scan_fn *fn, void *arg);

/* Rewrites [off, off+len) contiguously into fresh segments (tags at the
 * same offsets are kept).  Returns 0, -ERANGE, FLEX_EFAILED,
 * FLEX_EREADONLY, -errno. */
FLEX_EXPORT int flexspace_defrag(struct flexspace *fs, uint64_t off, uint64_t len);

/* Deep check: the tree's check, per-segment live-byte counts against the
 * extents, no extent in a free segment, and buffered state.  0 when
 * sound, FLEX_ECORRUPT otherwise. */
FLEX_EXPORT int flexspace_check(const struct flexspace *fs);

/* Fills *st.  Returns 0 or -EINVAL (NULL fs or st). */
FLEX_EXPORT int flexspace_stats(const struct flexspace *fs, struct flexspace_stats *st);

/* A durable point (struct flexspace_stats, sync_* and recovered_*): the
 * tree version the log applies to and the log batches synced on top of
 * it, compared as a pair, version first. */
struct flexspace_point {
	uint64_t version;
	uint64_t batches;
};

/* The durable point now, in *now: it moves forward with every sync and
 * tree commit that makes changes durable, and never back.  The point
 * flexspace_open recovered to, in *recovered: fixed for the handle's
 * life.  Either may be NULL, not both.  The values of flexspace_stats'
 * sync_* and recovered_* fields without the work of the other
 * statistics, for a layer above that records the point with what it
 * writes (FlexDB, in each WAL file).  Returns 0 or -EINVAL (NULL fs, or
 * both NULL). */
FLEX_EXPORT int flexspace_durable(const struct flexspace *fs, struct flexspace_point *now,
				  struct flexspace_point *recovered);

#ifdef __cplusplus
}
#endif
#endif /* FLEXSPACE_H */
