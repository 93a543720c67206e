/*
 * flex_common.h - what the three FlexDB layers share: status codes, one
 * strerror, version macros and the export macro.
 *
 * Status convention (all of flextree_*, flexspace_*, flexdb_*):
 *   0           success
 *   > 0         a documented non-error status (e.g. FLEXDB_NOTFOUND)
 *   -errno      an operating-system error, passed through unchanged
 *               (-EIO, -ENOSPC, -ENOMEM, -EINVAL for bad arguments, ...)
 *   FLEX_E*     library errors, in the reserved range [-10099, -10000]
 * Functions returning ssize_t use the same negative codes.  There is no
 * global "last error" and no allocated error string.
 *
 * Conventions of every call of the three libraries:
 *   arguments  the handle first; then what the call works on: a
 *              FlexSpace data call takes the caller's buffer, then the
 *              offset and the length (flexspace_read(fs, buf, off, len));
 *              other calls an offset and a length, or a key and its
 *              length; last the out-parameters and the arrays the call
 *              fills, each array followed by its capacity (flexdb_get's
 *              value buffer, flextree_query's mappings).
 *   integers   uint64_t for positions and lengths in a tree, a space or a
 *              file (and for sizes of memory set in options); size_t for
 *              lengths of memory the caller passes (buffers, keys,
 *              values, array capacities); ssize_t for a call that returns
 *              a count of bytes or items, or a negative status; int for
 *              any other status.  One extent's length is uint32_t, as
 *              FlexTree stores it (flextree.h).
 *   offsets    `off` is a byte position in a FlexSpace; FlexTree, which
 *              maps one address space onto another, says `loff` (logical)
 *              and `poff` (physical).
 *   const      a handle is const in every call that changes nothing a
 *              caller can observe (reads, lookups, scans, checks,
 *              statistics), even when its caches and locks change inside.
 *   NULL       a NULL handle is -EINVAL, except that closing, freeing and
 *              clearing calls do nothing (closing returns 0), the size
 *              calls and flextree_pressure return 0, and
 *              flexdb_iter_valid, _key and _value report no position.
 *   options    an options struct cleared to zero (or a NULL pointer)
 *              gives every documented default.
 */
#ifndef FLEX_COMMON_H
#define FLEX_COMMON_H

#define FLEX_VERSION_MAJOR 0
#define FLEX_VERSION_MINOR 1
#define FLEX_VERSION_PATCH 0
#define FLEX_VERSION_STRING "0.1.0"
/* Comparable integer: 10000 * major + 100 * minor + patch. */
#define FLEX_VERSION_NUMBER \
	(FLEX_VERSION_MAJOR * 10000 + FLEX_VERSION_MINOR * 100 + FLEX_VERSION_PATCH)

#if defined(__GNUC__)
#define FLEX_EXPORT __attribute__((visibility("default")))
#else
#define FLEX_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum flex_status {
	FLEX_OK = 0,
	/* A checksum, magic number, length or invariant read from a file is
	 * wrong: the data is damaged and was not returned. */
	FLEX_ECORRUPT = -10000,
	/* The file or store is held by another handle or process. */
	FLEX_EBUSY = -10001,
	/* An earlier write or sync failed; the handle refuses further writes
	 * (it can still be read and must still be closed). */
	FLEX_EFAILED = -10002,
	/* The file was written by an incompatible format version. */
	FLEX_EVERSION = -10003,
	/* A key, value, extent or offset exceeds a documented limit. */
	FLEX_ETOOBIG = -10004,
	/* An options field is out of its documented range. */
	FLEX_EOPTION = -10005,
	/* The handle was opened read-only. */
	FLEX_EREADONLY = -10006,
	/* The directory is not a store the library made: it holds files the
	 * library did not create (or an IDENTITY that is not the library's).
	 * Nothing was created, opened for writing or changed. */
	FLEX_ENOTSTORE = -10007,
	/* The directory is a FlexSpace, opened as a FlexDB store.  Nothing
	 * was changed. */
	FLEX_EKIND_SPACE = -10008,
	/* The directory is a FlexDB store, opened as a FlexSpace.  Nothing
	 * was changed. */
	FLEX_EKIND_DB = -10009,
	FLEX_ERANGE_LAST = -10099
};

/* Human-readable text for any status this library returns (library codes
 * and -errno alike).  Never NULL; the string is static. Thread-safe. */
FLEX_EXPORT const char *flex_strerror(int status);

/* Runtime version: returns FLEX_VERSION_STRING of the library actually
 * linked; stores the components when the pointers are non-NULL. */
FLEX_EXPORT const char *flex_version(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif
#endif /* FLEX_COMMON_H */
