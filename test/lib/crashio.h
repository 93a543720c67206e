/*
 * crashio.h - what the FlexSpace suites share: seeds and scale, temporary
 * directories, a flat-byte-array model of a space with a seeded operation
 * generator, and a fault-injecting, crash-simulating I/O table.
 *
 * Compiled once (crashio.c) into the tests' support archive.
 *
 * The I/O table ("cio") wraps flex_io_posix().  It can
 *   - fail the Nth call of a chosen class of operations with -EIO/-ENOSPC,
 *     once or permanently, or write short (pwrite writes a prefix and says
 *     so; write_batch writes a prefix of its elements and fails);
 *   - track, for every regular file opened through it, the durable image
 *     (the content as of its last fsync/fdatasync) and the writes and
 *     truncations since, so that a power-loss image can be materialised:
 *     the durable image plus every later change applied, dropped or torn
 *     (a prefix of it applied), independently and in order.  A sync
 *     makes durable the changes recorded before it began, not those
 *     another thread makes while it waits (they may or may not reach the
 *     disk, so they stay in play);
 *   - track the names made and removed through it (open with O_CREAT,
 *     mkdir, rmdir, unlink, rename): such a change is durable only once
 *     its directory is fsynced, and until then a power-loss image has a
 *     prefix of each directory's pending changes, in order (a created
 *     file may vanish, a removed one come back, a rename be undone).
 * A hook called before every fsync/fdatasync lets a test materialise and
 * check a crash image at every durability point of a workload while the
 * workload itself goes on.
 */
#ifndef FLEX_TEST_CRASHIO_H
#define FLEX_TEST_CRASHIO_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "flex_io.h"
#include "flexspace.h"

/* ---- seeds, scale, randomness ------------------------------------------- */

uint64_t test_seed(const char *name);

/* FLEX_TEST_SCALE multiplies operation and cycle counts (`make stress`: 50). */
double test_scale(void);

long scaled(long n);

/* splitmix64 */
uint64_t rnd(uint64_t *s);

uint64_t rnd_below(uint64_t *s, uint64_t n);

double now_sec(void);

/* Seconds a scaled loop may run before it stops early: Criterion's
 * per-test timeout (300 s) cannot grow with FLEX_TEST_SCALE, so the
 * longest stress loops do as many rounds as fit and report the count. */
#define TEST_TIME_BUDGET 240.0

int within_budget(double t0, long done);

/* ---- temporary directories ---------------------------------------------- */

/* A fresh directory under /dev/shm (fast) or /tmp. */
int tmp_make(char *out, size_t n, const char *tag);

void tmp_remove(const char *dir);

/* Removes the files inside dir, keeping dir. */
void tmp_clear(const char *dir);

/* ---- directory snapshots --------------------------------------------------- */

/* What a refused open must leave alone: every entry under a directory (the
 * directory itself included), with its type, size, modification time and
 * a hash of a regular file's content, as one string.  Two snapshots are
 * equal when nothing was created, removed, written or truncated. */
struct dir_snap {
	char *s;
	size_t len, cap;
};

/* A malloc'd snapshot of dir ("(missing)" when it does not exist). */
char *dir_snapshot(const char *dir);

/* ---- failure messages ---------------------------------------------------- */

struct why {
	char msg[512];
};

int failf(struct why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the model: a flat byte array --------------------------------------- */

struct model {
	uint8_t *b;
	uint64_t size, cap;
};

void model_free(struct model *m);

void model_copy(struct model *dst, const struct model *src);

void model_truncate(struct model *m, uint64_t size);

void model_write(struct model *m, const uint8_t *d, uint64_t off, uint64_t len);

void model_insert(struct model *m, const uint8_t *d, uint64_t off, uint64_t len);

void model_collapse(struct model *m, uint64_t off, uint64_t len);

uint64_t content_hash(const uint8_t *b, uint64_t size);

uint64_t model_hash(const struct model *m);

/* ---- seeded operations --------------------------------------------------- */

enum op_type {
	OP_WRITE,
	OP_INSERT,
	OP_COLLAPSE,
	OP_TRUNCATE,
	OP_DEFRAG,
	OP_APPLY, /* flexspace_apply of a few random ops (crashio.c, batch_ops) */
	OP_SYNC,
	OP_REOPEN,
	OP_READ,
	OP_NTYPES
};

extern const char *const op_names[OP_NTYPES];

/* An OP_APPLY: at most this many ops, with at most this many bytes. */
#define BATCH_MAX_OPS 64
#define BATCH_BYTES 65536

struct op {
	int type;
	uint64_t off, len, dseed;
};

/* Mix of a stream: percentages (the rest are writes) and sizes. */
struct gen_cfg {
	uint64_t target_size; /* the space hovers around this size */
	uint64_t big_len;     /* the longest occasional write/insert */
	int insert_pct, collapse_pct, truncate_pct, defrag_pct, sync_pct, reopen_pct, read_pct;
	int apply_pct;
};

/* The next operation for a space of the given size.  Depends only on the
 * generator state and the size, so a forked child (which only knows its
 * space's size) and the parent (which knows the model) produce the same
 * stream. */
void gen_op(uint64_t *r, uint64_t size, const struct gen_cfg *g, struct op *op);

void op_data(uint64_t dseed, uint8_t *buf, uint64_t len);

/* Applies a change to the model (reads, syncs and reopens change nothing).
 * buf must hold op->len bytes. */
void model_apply(struct model *m, const struct op *op, uint8_t *buf);

/* Applies a change or sync to the space: 0 or the status.  Reads and
 * reopens are the caller's business. */
int space_apply(struct flexspace *fs, const struct op *op, uint8_t *buf);

/* Reads the whole space into *out (malloc'd); 0 or the status. */
int space_read_all(struct flexspace *fs, uint8_t **out, uint64_t *size);

/* Opens dir (with opt), runs flexspace_check, and finds the state among
 * states [lo, hi] (sizes[] and hashes[] indexed by state) equal to the
 * content.  *k gets the newest matching state.  0 when one matches. */
int verify_recovered(const char *dir, const struct flexspace_options *opt, const uint64_t *sizes,
		     const uint64_t *hashes, long lo, long hi, long *k, struct why *w);

/* ---- the fault-injecting, crash-tracking I/O table ----------------------- */

enum {
	CIO_OPEN = 1 << 0,
	CIO_CLOSE = 1 << 1,
	CIO_PREAD = 1 << 2,
	CIO_PWRITE = 1 << 3,
	CIO_FSYNC = 1 << 4,
	CIO_FDATASYNC = 1 << 5,
	CIO_FTRUNCATE = 1 << 6,
	CIO_FALLOCATE = 1 << 7,
	CIO_FSIZE = 1 << 8,
	CIO_WRITE_BATCH = 1 << 9,
	CIO_READ_BATCH = 1 << 10,
	CIO_MKDIR = 1 << 11,
	CIO_RMDIR = 1 << 12,
	CIO_UNLINK = 1 << 13,
	CIO_RENAME = 1 << 14,
	CIO_LIST = 1 << 15,
	CIO_LOCK = 1 << 16,
	CIO_ALL = (1 << 17) - 1,
	CIO_NAMES = CIO_MKDIR | CIO_RMDIR | CIO_UNLINK | CIO_RENAME,
	CIO_WRITES = CIO_PWRITE | CIO_WRITE_BATCH,
	CIO_SYNCS = CIO_FSYNC | CIO_FDATASYNC,
	CIO_READS = CIO_PREAD | CIO_READ_BATCH,
};

/* fault_err value meaning "write short" rather than fail. */
#define CIO_SHORT 1
#define CIO_MAXFD 4096

struct cio_change {
	int trunc; /* 1: ftruncate to off; 0: write data at off */
	uint64_t off, len;
	uint8_t *data;
};

struct cio_file {
	char *path; /* its name now; NULL once unlinked */
	uint8_t *img; /* durable image */
	uint64_t img_size, img_cap;
	struct cio_change *ch; /* since the last sync, in order */
	size_t nch, chcap;
};

/* A name: a tracked file's index, or CIO_DIR. */
#define CIO_DIR (-1)
struct cio_name {
	char *path;
	int file;
};

/* A change of names not yet durable, in the order made.  `dir` is the
 * directory whose fsync makes it durable. */
enum { CIO_NS_ADD, CIO_NS_DEL, CIO_NS_RENAME };
struct cio_nsop {
	int kind;
	char *path, *to; /* to: rename only */
	char *dir;
	int file; /* ADD: the file index, or CIO_DIR */
	long seq;
};

struct cio {
	struct flex_io io; /* io.ctx points back here */
	pthread_mutex_t mu;

	/* Faults: the fault_at-th call (1-based) of the classes in
	 * fault_class fails with fault_err (or writes short); with
	 * fault_perm, every later call of the class fails too. */
	int fault_class;
	long fault_at;
	int fault_err;
	int fault_perm;
	long ncalls;  /* calls of fault_class seen */
	long nfaults; /* faults injected */
	int tripped;
	int first_fault_op; /* CIO_* bit of the first injected fault */
	int verbose;	    /* print each injected fault */

	/* Crash tracking. */
	int track;
	struct cio_file *files;
	size_t nfiles, fcap;
	int fdmap[CIO_MAXFD]; /* file index + 1; 0 = untracked */
	char *dirfd[CIO_MAXFD]; /* the path of a directory descriptor */
	/* Names: those known durable, and the changes since. */
	struct cio_name *names;
	size_t nnames, namecap;
	struct cio_nsop *ops;
	size_t nops, opcap;
	long opseq;
	void (*before_sync)(struct cio *c, void *arg);
	void *hook_arg;
	long nsyncs;
};

void cio_init(struct cio *c);

void cio_destroy(struct cio *c);

/* Fates of an unsynced change in a power-loss image. */
enum { CIO_RANDOM = 0, CIO_ALL_APPLIED = 1, CIO_NONE_APPLIED = 2 };

/* Writes every tracked file into dstdir as it could be after a power loss
 * now: the durable image, then each later change applied, dropped or torn
 * (a prefix of 512-byte sectors, or of bytes), independently and in order.
 * Names: each directory keeps a prefix of its pending changes (all of
 * them, none, or a random prefix, by `how`), so only the files whose name
 * the image keeps are written.  With srcroot NULL, files keep their base
 * names; otherwise the files under srcroot are written at the same place
 * under dstdir (subdirectories made as needed), with the files the table
 * never saw copied as they are.  Returns 0 or -errno; *changes gets how
 * many unsynced changes (of contents and of names) were in play. */
int cio_materialise(struct cio *c, const char *srcroot, const char *dstdir, uint64_t *r, int how,
		    long *changes);

/* ---- the read-only watch -------------------------------------------------- */

/* An I/O table for read-only handles: it passes reads through and refuses
 * (-EROFS) and counts every call that could change a file or a name:
 * pwrite, write_batch, fsync, fdatasync, ftruncate, fallocate, mkdir,
 * rmdir, unlink, rename, an exclusive lock, and an open asking for write
 * access, creation or truncation.  `bad` names the first. */
struct roio {
	struct flex_io io; /* io.ctx points back here */
	atomic_long changes;
	atomic_long opens; /* opens allowed (read-only) */
	char bad[160];
};

void roio_init(struct roio *r);

/* ---- configurations ------------------------------------------------------ */

/* Tiny segments and log: garbage collection and tree commits all the time. */
struct flexspace_options tiny_options(void);

#endif /* FLEX_TEST_CRASHIO_H */
