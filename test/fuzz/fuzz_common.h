/*
 * fuzz_common.h - what the libFuzzer targets in test/fuzz/ share: a
 * per-process scratch directory under /dev/shm, small file helpers, and the
 * "fix-ups" that recompute the checksums of the on-disk structures of
 * docs/FORMAT.md in a fuzzer-made image.
 *
 * Every structure the library reads is checksummed, so a mutated byte is
 * almost always rejected by the first checksum test and the decoders
 * behind it are never reached.  Each target therefore lets one flag byte
 * of its input choose whether the harness repairs the checksums (and,
 * optionally, sequence numbers and counts) after the mutation.  With the
 * repair, the fuzzer explores the structure checks themselves; without it,
 * the checksum and torn-tail paths.
 *
 * Compiled once (fuzz_common.c) and linked by every target and by
 * gen_corpus.c; only the little-endian accessors stay here, inline.  The
 * encodings duplicate the library's on purpose: the
 * fuzz targets know the format only from docs/FORMAT.md.
 */
#ifndef FLEX_FUZZ_COMMON_H
#define FLEX_FUZZ_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "flexspace.h"

/* ---- little-endian access --------------------------------------------------- */

static inline uint16_t fz_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t fz_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t fz_get64(const uint8_t *p)
{
	return (uint64_t)fz_get32(p) | (uint64_t)fz_get32(p + 4) << 32;
}
static inline void fz_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void fz_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void fz_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- scratch directory ---------------------------------------------------------- */

void fz_rmrf(const char *path);

/* Creates /dev/shm/flexfuzz.<pid>.<tag> (or under $TMPDIR, /tmp when
 * /dev/shm is missing), removed at exit.  Aborts when it cannot. */
const char *fz_init_root(const char *tag);

void fz_path(char *out, size_t n, const char *a, const char *b);

int fz_write_file(const char *path, const void *buf, size_t len);

/* Reads a whole file into a malloc'd buffer. */
int fz_read_file(const char *path, uint8_t **buf, size_t *len);

/* Copies the regular files of one directory level and, recursively, its
 * subdirectories (a store: LOCK, WAL-*, space/). */
int fz_copy_tree(const char *from, const char *to);

/* ---- input reader ------------------------------------------------------------------ */

struct fz_in {
	const uint8_t *p;
	size_t n;
};

int fz_u8(struct fz_in *in, uint8_t *v);

/* ---- FlexTree file (docs/FORMAT.md "FlexTree file") ------------------------------------ */

#define FZ_SLOT 4096u
#define FZ_TREE_MAX_HEIGHT 40u
#define FZ_LEAF_MAGIC 0x314c5446u   /* "FTL1": 20-byte entries */
#define FZ_PACKED_MAGIC 0x324c5446u /* "FTL2": first offset, 12-byte entries */
#define FZ_INTERNAL_MAGIC 0x31495446u

struct fz_tree_counts {
	uint64_t leaves, internals, extents, size;
};

/* Flags for fz_tree_fixup. */
#define FZ_TREE_FIX_SLOT 1u   /* node's own slot field = its slot */
#define FZ_TREE_FIX_COUNTS 2u /* header counts and size from the reachable nodes */

/* Recomputes, in a tree file image of nslots whole slots, every node's
 * checksum (lowest level first), every child pointer's checksum and the
 * headers' root checksums and checksums. */
void fz_tree_fixup(uint8_t *img, uint32_t nslots, unsigned flags);

/* Compact form of a tree file for the fuzzer: chunks of (u16 length, bytes),
 * each chunk the start of one 4096-byte slot, the rest of the slot zero.
 * Returns the number of slots written to *img (malloc'd). */
#define FZ_TREE_MAX_SLOTS 64u
uint32_t fz_tree_expand(struct fz_in *in, uint8_t **img);

/* ---- FlexSpace LOG (docs/FORMAT.md "LOG") ------------------------------------------------ */

#define FZ_LOG_START 8192u

#define FZ_BATCH_MAGIC 0x31424c46u

#define FZ_LOG_FIX_HEADERS 1u /* header slots' checksums */
#define FZ_LOG_FIX_BATCHES 2u /* batch checksums (nrec clipped to the file) */
#define FZ_LOG_FIX_SEQ 4u     /* batch magic, seq 1, 2, ... and base = header's */

void fz_log_fixup(uint8_t *log, size_t len, unsigned flags);

/* ---- FlexDB WAL (docs/FORMAT.md "WAL") ------------------------------------------------------ */

#define FZ_WAL_REC_MAGIC 0x31525746u

#define FZ_WAL2_MARK 4096u
#define FZ_WAL2_RECORDS 8192u

/* Repairs the checksums of the records of a whole WAL file image (header
 * and, in format 2, the sync mark included), following the lengths as long
 * as they fit. */
void fz_wal_fixup(uint8_t *w, size_t len);

/* ---- flexdb invariants after any successful open ------------------------------------------- */

/* memcmp order, a shorter key first on a common prefix. */
int fz_keycmp(const void *a, size_t alen, const void *b, size_t blen);

/* ---- the FlexSpace scenario of fuzz_space_log and its seeds ------------------------------- */

#define FZ_SPACE_SEG (64u << 10)

/* FLEX_FUZZ_SKIP_KNOWN=1 (run.sh sets it while fuzzing, not for replay)
 * skips inputs that reach a bug already reported, so that a long run can
 * find others (README.md "Findings"): an insert record whose range ends
 * beyond FLEXSPACE_MAX_SIZE is replayed anyway, as up to ~2^28 hole pieces
 * of 4 GiB (minutes and gigabytes at open); and a mapped insert or remap record longer than
 * the maximum extent (segment_size / 32), which open accepts although
 * flexspace_check then rejects the space.  max_extent: the space's
 * segment size / 32; size: its size before the log (0 when unknown). */
int fz_known_log_bug(const uint8_t *log, size_t len, uint64_t max_extent, uint64_t size);

struct flexspace_options fz_space_opts(void);

/* Creates a space in dir (writes, inserts, a collapse, a tag, a hole),
 * closes it, reopens it and makes more changes with syncs in between,
 * and copies its files to snap while it is still open: the image a crash
 * would leave, with log batches to replay.  Returns 0 or -1. */
int fz_space_scenario(const char *dir, const char *snap);

#endif /* FLEX_FUZZ_COMMON_H */
