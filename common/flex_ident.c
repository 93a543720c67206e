/*
 * flex_ident.c - the IDENTITY file of a store directory and the check that
 * open makes before it touches a directory (contract: flex_ident.h;
 * layout: docs/FORMAT.md "IDENTITY"; behaviour: docs/DURABILITY.md "What
 * open refuses").
 *
 * A directory may hold a user's file that happens to be called LOG, DATA
 * or TREE, or be the other kind of store; taking it for a store of the
 * kind asked for would truncate or rewrite that file, or grow a second
 * store inside the first.  So a file is written only when the library
 * proves it made the directory, and the proof is, in order:
 *   1. a sound IDENTITY naming the kind being opened;
 *   2. for stores made before IDENTITY existed, the library's own
 *      checksummed header: a FlexSpace's LOG header, or for a FlexDB
 *      store its space/ subdirectory proved so;
 *   3. for a creation, an empty or missing directory, or one holding only
 *      an IDENTITY cut short (empty, or a prefix of the bytes that would
 *      be written: rewriting it loses nothing).
 * IDENTITY is written first and made durable (file, then directory entry)
 * before any other file is created, so a creation cut short at any later
 * step leaves a directory that the first rule already proves; the layers
 * then judge their own files as before.  Everything else is refused
 * before a single file is created or opened for writing.
 *
 * The marker is created whole or not at all in practice (32 bytes in one
 * write to the first sector); the prefix rule covers the rest.  The
 * legacy signatures are the one place where this module knows the upper
 * layers' formats: a magic and a checksum of the header, nothing more.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "flex_codec.h"
#include "flex_ident.h"
#include "flex_killpoint.h"

#define IDENT_MAGIC "FLEXIDNT"
#define IDENT_FORMAT 1u
/* The layout version of the store's files as a whole; bumped when a
 * release can no longer open stores of the previous layout. */
#define IDENT_STORE_FORMAT 1u

/* Legacy signatures: FlexSpace's LOG header (flexspace/fs_log.c), one
 * per 4 KiB slot, checksummed over its first 24 bytes. */
#define LEGACY_LOG_MAGIC "FLEXLOG1"
#define LEGACY_LOG_SLOT 4096u

void flex_ident_encode(uint8_t out[FLEX_IDENT_BYTES], int kind)
{
	memset(out, 0, FLEX_IDENT_BYTES);
	memcpy(out, IDENT_MAGIC, 8);
	flex_put_le32(out + 8, IDENT_FORMAT);
	flex_put_le32(out + 12, (uint32_t)kind);
	flex_put_le32(out + 16, IDENT_STORE_FORMAT);
	flex_put_le64(out + 24, XXH3_64bits(out, 24));
}

static int join(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/* Reads up to cap bytes of dir/name from offset off; *got is how many
 * (0 for a missing file). */
static int read_head(const struct flex_io *io, const char *dir, const char *name, uint8_t *buf,
		     size_t cap, uint64_t off, size_t *got, uint64_t *fsize)
{
	char path[PATH_MAX];
	*got = 0;
	*fsize = 0;
	int rc = join(path, dir, name);
	if (rc)
		return rc;
	int fd = io->open(io, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	rc = io->fsize(io, fd, fsize);
	while (!rc && *got < cap && off + *got < *fsize) {
		ssize_t n = io->pread(io, fd, buf + *got, cap - *got, off + *got);
		if (n < 0)
			rc = (int)n;
		else if (n == 0)
			break;
		else
			*got += (size_t)n;
	}
	io->close(io, fd);
	return rc;
}

/* 1 when dir/LOG starts with a sound FlexSpace log header in either
 * slot. */
static int legacy_space(const struct flex_io *io, const char *dir)
{
	for (uint64_t slot = 0; slot < 2; slot++) {
		uint8_t b[32];
		size_t got;
		uint64_t size;
		if (read_head(io, dir, "LOG", b, sizeof(b), slot * LEGACY_LOG_SLOT, &got, &size) ||
		    got < sizeof(b))
			continue;
		if (!memcmp(b, LEGACY_LOG_MAGIC, 8) && flex_get_le64(b + 24) == XXH3_64bits(b, 24))
			return 1;
	}
	return 0;
}

/* What dir/IDENTITY says: 0 sound (kind in *kind); 1 cut short, a prefix
 * (empty included) of the bytes of the kinds in *prefix (bit 1 << kind);
 * FLEX_EVERSION; FLEX_ECORRUPT (the magic, damaged); FLEX_ENOTSTORE (not
 * the library's); -errno. */
static int read_ident(const struct flex_io *io, const char *dir, int *kind, int *prefix)
{
	uint8_t b[FLEX_IDENT_BYTES], exp[FLEX_IDENT_BYTES];
	size_t got;
	uint64_t size;
	*prefix = 0;
	int rc = read_head(io, dir, FLEX_IDENT_NAME, b, sizeof(b), 0, &got, &size);
	if (rc == -ELOOP)
		return FLEX_ENOTSTORE; /* a symbolic link: not what creation makes */
	if (rc)
		return rc;
	for (int k = FLEX_KIND_SPACE; k <= FLEX_KIND_DB; k++) {
		flex_ident_encode(exp, k);
		if (size < FLEX_IDENT_BYTES && got == size && !memcmp(b, exp, got))
			*prefix |= 1 << k;
	}
	if (*prefix)
		return 1;
	if (size < 8 || memcmp(b, IDENT_MAGIC, 8))
		return FLEX_ENOTSTORE;
	if (size != FLEX_IDENT_BYTES || got != size || flex_get_le64(b + 24) != XXH3_64bits(b, 24))
		return FLEX_ECORRUPT;
	if (flex_get_le32(b + 8) != IDENT_FORMAT || flex_get_le32(b + 16) > IDENT_STORE_FORMAT)
		return FLEX_EVERSION;
	*kind = (int)flex_get_le32(b + 12);
	if (*kind != FLEX_KIND_SPACE && *kind != FLEX_KIND_DB)
		return FLEX_ECORRUPT;
	return 0;
}

/* Whether dir is a FlexSpace: a sound IDENTITY of that kind, or a legacy
 * LOG header. */
static int is_space(const struct flex_io *io, const char *dir)
{
	int kind = 0, prefix;
	if (read_ident(io, dir, &kind, &prefix) == 0)
		return kind == FLEX_KIND_SPACE;
	return legacy_space(io, dir);
}

/* A FlexDB store made before IDENTITY: its space/ is a FlexSpace. */
static int legacy_db(const struct flex_io *io, const char *dir)
{
	char path[PATH_MAX];
	struct stat st;
	if (join(path, dir, "space") || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	return is_space(io, path);
}

/* Whether dir holds a store of `kind` made before identities. */
static int legacy(const struct flex_io *io, const char *dir, int kind)
{
	return kind == FLEX_KIND_SPACE ? legacy_space(io, dir) : legacy_db(io, dir);
}

/* What a directory holds, as far as probing goes. */
struct census {
	int ident, others;
};

static int census_add(void *arg, const char *name)
{
	struct census *c = arg;
	if (!strcmp(name, FLEX_IDENT_NAME))
		c->ident = 1;
	else
		c->others++;
	return 0;
}

int flex_ident_probe(const struct flex_io *io, const char *dir, int kind, int create, int *state,
		     int *partial)
{
	if (!io || !dir || !state || !partial || (kind != FLEX_KIND_SPACE && kind != FLEX_KIND_DB))
		return -EINVAL;
	*state = 0;
	*partial = 0;
	struct census c = {0};
	int err = io->list(io, dir, census_add, &c);
	if (err == -ENOENT && create) {
		*state = FLEX_IDENT_NEW;
		return 0;
	}
	if (err)
		return err;
	int has_ident = c.ident, others = c.others;

	int other = kind == FLEX_KIND_SPACE ? FLEX_KIND_DB : FLEX_KIND_SPACE;
	int other_status = other == FLEX_KIND_SPACE ? FLEX_EKIND_SPACE : FLEX_EKIND_DB;
	if (has_ident) {
		int found = 0, prefix = 0;
		int rc = read_ident(io, dir, &found, &prefix);
		if (rc == 1 && !others) {
			/* A creation cut short: nothing else is made before
			 * IDENTITY is durable. */
			if (!(prefix & 1 << kind))
				return other_status;
			if (!create)
				return -ENOENT;
			*state = FLEX_IDENT_NEW;
			*partial = 1;
			return 0;
		}
		if (rc == 1) {
			/* The upgrade of a store made before identities, cut
			 * short; anything else beside it is not the library's. */
			if ((prefix & 1 << kind) && legacy(io, dir, kind)) {
				*state = FLEX_IDENT_LEGACY;
				*partial = 1;
				return 0;
			}
			if ((prefix & 1 << other) && legacy(io, dir, other))
				return other_status;
			return FLEX_ENOTSTORE;
		}
		if (rc)
			return rc;
		if (found != kind)
			return found == FLEX_KIND_SPACE ? FLEX_EKIND_SPACE : FLEX_EKIND_DB;
		*state = FLEX_IDENT_STORE;
		return 0;
	}
	if (!others) {
		if (!create)
			return -ENOENT;
		*state = FLEX_IDENT_NEW;
		return 0;
	}
	if (legacy(io, dir, kind)) {
		*state = FLEX_IDENT_LEGACY;
		return 0;
	}
	return legacy(io, dir, other) ? other_status : FLEX_ENOTSTORE;
}

int flex_ident_write(const struct flex_io *io, const char *dir, int dir_fd, int kind, int partial)
{
	if (!io || !dir || (kind != FLEX_KIND_SPACE && kind != FLEX_KIND_DB))
		return -EINVAL;
	char path[PATH_MAX];
	int rc = join(path, dir, FLEX_IDENT_NAME);
	if (rc)
		return rc;
	int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (partial ? 0 : O_CREAT | O_EXCL);
	int fd = io->open(io, path, flags, 0644);
	if (fd < 0)
		return fd;
	uint8_t b[FLEX_IDENT_BYTES];
	flex_ident_encode(b, kind);
	FLEX_KILLPOINT("id.write.before");
	rc = flex_io_write_full(io, fd, b, sizeof(b), 0);
	if (!rc) {
		FLEX_KILLPOINT("id.sync.before");
		rc = io->fsync(io, fd);
	}
	io->close(io, fd);
	if (!rc) {
		FLEX_KILLPOINT("id.dir.sync.before");
		rc = io->fsync(io, dir_fd);
	}
	return rc;
}

int flex_ident_mkdir(const struct flex_io *io, const char *dir)
{
	if (!io || !dir)
		return -EINVAL;
	int rc = io->mkdir(io, dir, 0755);
	if (rc == -EEXIST)
		return 0;
	if (rc)
		return rc;
	char parent[PATH_MAX];
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	while (n > 0 && dir[n - 1] != '/')
		n--;
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n >= sizeof(parent))
		return -ENAMETOOLONG;
	if (n == 0)
		strcpy(parent, ".");
	else
		memcpy(parent, dir, n), parent[n] = 0;
	int fd = io->open(io, parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	rc = io->fsync(io, fd);
	io->close(io, fd);
	return rc;
}
