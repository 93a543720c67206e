/*
 * flex_ident.h - the identity of a store directory (internal to the
 * libraries; not installed).
 *
 * Every FlexSpace and FlexDB directory holds a small file IDENTITY that
 * names what the directory is (magic, kind, format version).  It is the
 * first file a creation writes, and open consults it before touching
 * anything: a directory is opened only when its identity (or, for stores
 * made before identities existed, the library's own file headers) proves
 * the library made it.  The layout is in docs/FORMAT.md ("IDENTITY"), the
 * refusals in docs/DURABILITY.md ("What open refuses").
 *
 * Like everything in common/, its code is linked into libflextree, the
 * library all three layers link; the layers include it by relative path.
 */
#ifndef FLEX_IDENT_H
#define FLEX_IDENT_H

#include "flex_io.h"

#define FLEX_IDENT_NAME "IDENTITY"
/* Bytes of an IDENTITY file (fixed on disk). */
#define FLEX_IDENT_BYTES 32u

/* What a directory is (fixed on disk: the kind field of IDENTITY). */
enum flex_ident_kind { FLEX_KIND_SPACE = 1, FLEX_KIND_DB = 2 };

/* What flex_ident_probe found in a directory of the kind asked for. */
enum flex_ident_state {
	/* A sound IDENTITY of this kind: the store is the library's, and so
	 * is every file in it with a name the library uses. */
	FLEX_IDENT_STORE = 1,
	/* No IDENTITY (or one cut short while being added), but the
	 * library's own headers of this kind (a store made before
	 * identities): open it, then add or complete the identity. */
	FLEX_IDENT_LEGACY,
	/* Nothing to open: the directory is missing or empty, or holds only
	 * an IDENTITY cut short while being created.  Only returned when the
	 * caller may create. */
	FLEX_IDENT_NEW,
};

/* Examines directory dir before anything in it is opened, created or
 * written, and changes nothing.  Sets *state and returns 0, or:
 *   -ENOENT           missing, empty or only begun, and create == 0
 *   FLEX_ENOTSTORE    holds files the library did not create
 *   FLEX_EKIND_SPACE  is a FlexSpace (kind FLEX_KIND_DB was asked for)
 *   FLEX_EKIND_DB     is a FlexDB store (kind FLEX_KIND_SPACE asked for)
 *   FLEX_EVERSION     IDENTITY names a newer format
 *   FLEX_ECORRUPT     IDENTITY has the magic but is damaged
 *   -EINVAL (a NULL pointer or an unknown kind), -ENOTDIR, -errno
 * *partial is set when an IDENTITY cut short exists (state NEW or
 * LEGACY), for flex_ident_write to complete. */
FLEX_EXPORT int flex_ident_probe(const struct flex_io *io, const char *dir, int kind, int create,
				 int *state, int *partial);

/* Writes the IDENTITY of `kind` into directory dir (open as dir_fd) and
 * makes it durable: the file, then the directory entry.  partial: an
 * IDENTITY cut short is there (flex_ident_probe said so) and is completed;
 * otherwise the file must not exist (-EEXIST if it does). Returns 0,
 * -EINVAL (NULL io or dir, an unknown kind) or -errno. */
FLEX_EXPORT int flex_ident_write(const struct flex_io *io, const char *dir, int dir_fd, int kind,
				 int partial);

/* Makes directory dir for a store flex_ident_probe called new, and makes
 * its entry durable (the parent directory is synced).  A directory that
 * already exists (empty, or holding an IDENTITY cut short) is left as it
 * is.  Returns 0, -EINVAL (NULL io or dir) or -errno. */
FLEX_EXPORT int flex_ident_mkdir(const struct flex_io *io, const char *dir);

/* The IDENTITY bytes of `kind`, for tests and tools. */
FLEX_EXPORT void flex_ident_encode(uint8_t out[FLEX_IDENT_BYTES], int kind);

#endif /* FLEX_IDENT_H */
