/*
 * flex_ckpt.c - the destination checks and the file copy that
 * flexspace_checkpoint and flexdb_checkpoint share (flex_ckpt.h).
 *
 * Everything goes through the store's flex_io table, names too, so the
 * tests' fault and power-loss tables see a checkpoint like any other
 * change; only stat and realpath, which change nothing, do not.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flex_ckpt.h"

#define CKPT_CHUNK (1u << 20)

static int join(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/* Whether the canonical absolute path p, or a directory above it, is the
 * directory st names. */
static int under(const char *p, const struct stat *st)
{
	char buf[PATH_MAX];
	size_t n = strlen(p);
	if (n >= sizeof(buf))
		return 0;
	memcpy(buf, p, n + 1);
	for (;;) {
		struct stat s;
		if (stat(buf, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino)
			return 1;
		char *slash = strrchr(buf, '/');
		if (!slash || !strcmp(buf, "/"))
			return 0;
		if (slash == buf)
			buf[1] = '\0';
		else
			*slash = '\0';
	}
}

static int any_entry(void *arg, const char *name)
{
	(void)arg, (void)name;
	return 1;
}

/* 1 when the directory is empty, 0 when not, or -errno. */
static int is_empty_dir(const struct flex_io *io, const char *path)
{
	int rc = io->list(io, path, any_entry, NULL);
	return rc < 0 ? rc : !rc;
}

int flex_ckpt_dest(const struct flex_io *io, int src_dir_fd, const char *dest, int *created,
		   int *dest_fd)
{
	if (!io || !created || !dest_fd)
		return -EINVAL;
	*created = 0;
	*dest_fd = -1;
	if (!dest || !*dest)
		return -EINVAL;
	struct stat src;
	if (fstat(src_dir_fd, &src) != 0)
		return -errno;
	char canon[PATH_MAX];
	struct stat st;
	if (stat(dest, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
		if (!realpath(dest, canon))
			return -errno;
		if (under(canon, &src))
			return -EINVAL;
		int e = is_empty_dir(io, dest);
		if (e < 0)
			return e;
		if (!e)
			return -EEXIST;
	} else {
		if (errno != ENOENT)
			return -errno;
		/* The parent must exist: it is checked, and synced once dest
		 * is made in it. */
		char parent[PATH_MAX];
		size_t n = strlen(dest);
		if (n >= sizeof(parent))
			return -ENAMETOOLONG;
		memcpy(parent, dest, n + 1);
		while (n > 1 && parent[n - 1] == '/')
			parent[--n] = '\0';
		char *slash = strrchr(parent, '/');
		if (!slash)
			strcpy(parent, ".");
		else if (slash == parent)
			parent[1] = '\0';
		else
			*slash = '\0';
		if (!realpath(parent, canon))
			return -errno;
		if (stat(canon, &st) != 0)
			return -errno;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
		if (under(canon, &src))
			return -EINVAL;
		int rc = io->mkdir(io, dest, 0755);
		if (rc)
			return rc;
		*created = 1;
		int pfd = io->open(io, canon, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
		rc = pfd < 0 ? pfd : io->fsync(io, pfd);
		if (pfd >= 0)
			io->close(io, pfd);
		if (rc) {
			io->rmdir(io, dest);
			*created = 0;
			return rc;
		}
	}
	int fd = io->open(io, dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0) {
		if (*created)
			io->rmdir(io, dest);
		*created = 0;
		return fd;
	}
	*dest_fd = fd;
	return 0;
}

int flex_ckpt_copy(const struct flex_io *io, int src_fd, const char *dir, const char *name,
		   const struct flex_ckpt_range *r, int n, uint64_t size)
{
	if (!io || !dir || !name || n < 0 || (n && !r))
		return -EINVAL;
	char path[PATH_MAX];
	int rc = join(path, dir, name);
	if (rc)
		return rc;
	int fd = io->open(io, path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return fd;
	uint8_t *buf = NULL;
	for (int i = 0; i < n && !rc; i++) {
		uint64_t off = r[i].off, end = r[i].off + r[i].len;
		if (!buf && !(buf = malloc(CKPT_CHUNK)))
			rc = -ENOMEM;
		while (off < end && !rc) {
			size_t c = end - off < CKPT_CHUNK ? (size_t)(end - off) : CKPT_CHUNK;
			rc = flex_io_read_full(io, src_fd, buf, c, off);
			if (rc == -ENODATA)
				rc = FLEX_ECORRUPT;
			if (!rc)
				rc = flex_io_write_full(io, fd, buf, c, off);
			off += c;
		}
	}
	free(buf);
	if (!rc)
		rc = io->ftruncate(io, fd, size);
	if (!rc)
		rc = io->fsync(io, fd);
	io->close(io, fd);
	return rc;
}

void flex_ckpt_unlink(const struct flex_io *io, const char *dir, const char *name)
{
	char path[PATH_MAX];
	if (io && dir && name && join(path, dir, name) == 0)
		io->unlink(io, path);
}
