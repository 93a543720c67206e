/*
 * flexspace-cli - a shell for a FlexSpace: an editable file with byte
 * granular insert and collapse, kept in a directory.
 *
 *   flexspace-cli [OPTIONS] DIR                 REPL on a terminal, else a
 *                                               script on standard input
 *   flexspace-cli [OPTIONS] DIR -c 'CMD; CMD'   run the commands and exit
 *
 * `batch` ... `commit` is one flexspace_apply, so all or nothing.
 * A thin client of the public API (include/flexspace.h).  Arguments and
 * the REPL are shared with flexdb-cli (cli_common.h); docs/CLI.md has the
 * reference.  Offsets and lengths are decimal or 0x hex with an optional
 * K/M/G/T suffix (powers of 1024).
 */
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flexspace.h"

#include "lib/cli_common.h"

/* Bytes moved per library call by import, export and read: big enough to
 * amortise the call, small enough to keep memory flat for any size. */
#define CHUNK (1u << 20)
#define PROGRESS_BYTES (64u << 20)

struct fs_ctx {
	struct flexspace_options opt; /* set by the command-line flags */
	struct flexspace *fs;
	unsigned char *buf; /* CHUNK bytes */
	/* Between `batch` and commit/abort: the queued changes, their DATA
	 * back to back in data (an op's buf is its offset there until
	 * commit). */
	int batch;
	struct flexspace_op *ops;
	size_t nops, cap;
	struct cli_buf data;
};

static struct flexspace *fs_of(struct cli_app *app)
{
	return ((struct fs_ctx *)app->ctx)->fs;
}

/* Fails with msg unless a batch is open (open 1), or none is (open 0). */
static int need_batch(struct cli_app *app, int open, const char *msg)
{
	if (!((struct fs_ctx *)app->ctx)->batch == !open)
		return 0;
	cli_error(app, "%s", msg);
	return 1;
}

/* The changes that cannot be part of a batch are refused inside one. */
static int outside_batch(struct cli_app *app)
{
	return need_batch(app, 0, "not inside a batch (commit or abort it first)");
}

static int cmd_import(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct fs_ctx *c = app->ctx;
	struct stat st;
	(void)n;
	if (outside_batch(app))
		return 1;
	const char *path = cli_path(app, &a[1]);
	if (!path)
		return 1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_file_status(app, path, cli_errno());
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return cli_file_error(app, path, "not a regular file");
	}
	uint64_t off = 0;
	for (;;) {
		ssize_t r = read(fd, c->buf, CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			close(fd);
			return cli_file_error(app, path, "%s (the space holds a partial copy)",
					      flex_strerror(e));
		}
		if (r == 0)
			break;
		ssize_t w = flexspace_write(c->fs, c->buf, off, (size_t)r);
		if (w < 0) {
			close(fd);
			return cli_status(app, "write (the space holds a partial copy)", (int)w);
		}
		off += (uint64_t)r;
		if (off % PROGRESS_BYTES == 0)
			cli_progress("import", off >> 20, "MiB");
	}
	close(fd);
	if (off >= PROGRESS_BYTES)
		cli_progress(NULL, 0, NULL);
	int rc = flexspace_truncate(c->fs, off);
	if (rc)
		return cli_status(app, "truncate", rc);
	printf("imported %" PRIu64 " bytes\n", off);
	return 0;
}

static int cmd_export(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct fs_ctx *c = app->ctx;
	(void)n;
	const char *path = cli_path(app, &a[1]);
	if (!path)
		return 1;
	FILE *f = fopen(path, "w");
	if (!f)
		return cli_file_status(app, path, cli_errno());
	uint64_t off = 0;
	int ret = 0;
	for (;;) {
		ssize_t r = flexspace_read(c->fs, c->buf, off, CHUNK);
		if (r < 0) {
			ret = cli_status(app, "read", (int)r);
			break;
		}
		if (r == 0)
			break;
		errno = 0;
		if (fwrite(c->buf, 1, (size_t)r, f) != (size_t)r) {
			ret = cli_file_status(app, path, cli_errno());
			break;
		}
		off += (uint64_t)r;
		if (off % PROGRESS_BYTES == 0)
			cli_progress("export", off >> 20, "MiB");
	}
	if (off >= PROGRESS_BYTES)
		cli_progress(NULL, 0, NULL);
	errno = 0;
	if (fclose(f) && !ret)
		ret = cli_file_status(app, path, cli_errno());
	if (!ret)
		printf("exported %" PRIu64 " bytes\n", off);
	return ret;
}

/* hexdump -C style: offset, 16 bytes in hex, the printable ones. */
static void hexline(uint64_t off, const unsigned char *p, size_t n)
{
	char line[128];
	int k = snprintf(line, sizeof(line), "%08" PRIx64 " ", off);
	for (size_t i = 0; i < 16; i++) {
		if (i == 8)
			line[k++] = ' ';
		if (i < n)
			k += snprintf(line + k, sizeof(line) - (size_t)k, " %02x", p[i]);
		else
			k += snprintf(line + k, sizeof(line) - (size_t)k, "   ");
	}
	k += snprintf(line + k, sizeof(line) - (size_t)k, "  |");
	for (size_t i = 0; i < n; i++)
		line[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
	line[k++] = '|';
	line[k++] = '\n';
	fwrite(line, 1, (size_t)k, stdout);
}

/* The default of read's output: 'x' hex dump, 'h' (--hex), 'r' (--raw). */
static int read_mode = 'x';

static const struct cli_opt read_opts[] = {
    {"--out", "FILE", 0, "write the raw bytes to FILE; prints their count"},
    {"--hex", NULL, 0, "print one 0x hex string, as write and insert take it"},
    {"--raw", NULL, 0, "print the raw bytes alone (as -r)"},
    {NULL, NULL, 0, NULL},
};

static int cmd_read(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct fs_ctx *c = app->ctx;
	const struct cli_token *out = app->opt[0];
	int mode = read_mode, given = 0;
	size_t i = 1;
	if (a[1].kind == CLI_BARE &&
	    (!strcmp(a[1].text, "-r") || !strcmp(a[1].text, "-s") || !strcmp(a[1].text, "-x"))) {
		mode = a[1].text[1];
		given++;
		i = 2;
	}
	if (app->opt[1]) {
		mode = 'h';
		given++;
	}
	if (app->opt[2]) {
		mode = 'r';
		given++;
	}
	if (n - i != 2) {
		cli_error(app, "usage: read [-x|-r|-s|--hex|--raw|--out FILE] OFF LEN");
		return 1;
	}
	if (given > (out ? 0 : 1)) {
		cli_error(app, out ? "--out writes the raw bytes: no other output mode"
				   : "more than one output mode");
		return 1;
	}
	uint64_t off, len;
	if (cli_number(app, &a[i], "OFF", &off) || cli_number(app, &a[i + 1], "LEN", &len))
		return 1;
	FILE *f = stdout;
	const char *path = NULL;
	if (out) {
		if (!(path = cli_path(app, out)))
			return 1;
		if (!(f = fopen(path, "wb")))
			return cli_file_status(app, path, cli_errno());
		mode = 'r';
	}
	struct cli_buf esc = {0};
	if (mode == 's' || mode == 'h')
		cli_buf_add(&esc, "", 0);
	uint64_t done = 0;
	int ret = 0;
	while (done < len) {
		size_t want = len - done < CHUNK ? (size_t)(len - done) : CHUNK;
		ssize_t r = flexspace_read(c->fs, c->buf, off + done, want);
		if (r < 0) {
			ret = cli_status(app, NULL, (int)r);
			break;
		}
		if (r == 0)
			break;
		if (mode == 'r') {
			errno = 0;
			if (fwrite(c->buf, 1, (size_t)r, f) != (size_t)r) {
				ret = path ? cli_file_status(app, path, cli_errno())
					   : cli_status(app, "standard output", cli_errno());
				break;
			}
		} else if (mode == 's' || mode == 'h') {
			cli_buf_add(&esc, c->buf, (size_t)r);
		} else {
			for (size_t j = 0; j < (size_t)r; j += 16)
				hexline(off + done + j, c->buf + j,
					(size_t)r - j < 16 ? (size_t)r - j : 16);
		}
		done += (uint64_t)r;
	}
	errno = 0;
	if (path && fclose(f) && !ret)
		ret = cli_file_status(app, path, cli_errno());
	if (!ret && path)
		printf("read %" PRIu64 " bytes\n", done);
	if (!ret && (mode == 's' || mode == 'h')) {
		/* one string, as accepted by write and insert */
		struct cli_buf o = {0};
		if (mode == 'h')
			cli_hex(&o, esc.p, esc.len);
		else
			cli_escape_data(&o, esc.p, esc.len);
		cli_buf_addc(&o, '\n');
		fwrite(o.p, 1, o.len, stdout);
		cli_buf_free(&o);
	}
	cli_buf_free(&esc);
	return ret;
}

/* FlexSpace takes any length; a file or stdin in one call is held in
 * memory, so larger contents go through import. */
#define DATA_MAX ((size_t)1 << 30)

/* The DATA of write and insert (cli_bytes_arg); 1 after an error. */
static int data_arg(struct cli_app *app, const struct cli_token *t, struct cli_buf *b,
		    const unsigned char **v, size_t *vl)
{
	if (cli_bytes_arg(app, t, "DATA", DATA_MAX, b, v, vl))
		return 1;
	if (*vl > DATA_MAX) {
		/* only a file or standard input can be this long */
		if (t->data[0] == '@')
			return cli_file_error(app, (const char *)t->data + 1,
					      "DATA of more than %zu bytes (use import)", DATA_MAX);
		cli_error(app, "standard input: DATA of more than %zu bytes (use import)",
			  DATA_MAX);
		return 1;
	}
	return 0;
}

/* Applies one change, or queues it in the open batch. */
static int change(struct cli_app *app, int type, uint64_t off, uint64_t len,
		  const unsigned char *v, size_t vl)
{
	struct fs_ctx *c = app->ctx;
	struct flexspace_op o = {.type = type, .off = off, .len = len, .buf = v, .buf_len = vl};
	if (!c->batch)
		return cli_done(app, flexspace_apply(c->fs, &o, 1));
	if (vl > DATA_MAX - c->data.len) {
		cli_error(app, "the batch would hold more than %zu bytes of DATA", DATA_MAX);
		return 1;
	}
	if (c->nops == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct flexspace_op *ops = realloc(c->ops, cap * sizeof(*ops));
		if (!ops)
			return cli_status(app, NULL, -ENOMEM);
		c->ops = ops;
		c->cap = cap;
	}
	o.buf = (const void *)(uintptr_t)c->data.len;
	cli_buf_add(&c->data, v, vl);
	c->ops[c->nops++] = o;
	return 0;
}

/* OFF [LEN] DATA of write, insert and replace, then the change. */
static int put_cmd(struct cli_app *app, struct cli_token *a, int type)
{
	struct cli_buf b = {0};
	const unsigned char *v;
	size_t vl;
	uint64_t off, len = 0;
	int d = type == FLEXSPACE_OP_REPLACE ? 3 : 2;
	if (cli_number(app, &a[1], "OFF", &off) ||
	    (d == 3 && cli_number(app, &a[2], "LEN", &len)) || data_arg(app, &a[d], &b, &v, &vl)) {
		cli_buf_free(&b);
		return 1;
	}
	int rc = change(app, type, off, len, v, vl);
	cli_buf_free(&b);
	return rc;
}

static int cmd_write(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	return put_cmd(app, a, FLEXSPACE_OP_WRITE);
}

static int cmd_insert(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	return put_cmd(app, a, FLEXSPACE_OP_INSERT);
}

static int cmd_replace(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	return put_cmd(app, a, FLEXSPACE_OP_REPLACE);
}

static int cmd_collapse(struct cli_app *app, struct cli_token *a, size_t n)
{
	uint64_t off, len;
	(void)n;
	if (cli_number(app, &a[1], "OFF", &off) || cli_number(app, &a[2], "LEN", &len))
		return 1;
	return change(app, FLEXSPACE_OP_COLLAPSE, off, len, NULL, 0);
}

static void batch_drop(struct fs_ctx *c)
{
	c->batch = 0;
	c->nops = 0;
	cli_buf_free(&c->data);
}

static int cmd_batch(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	if (need_batch(app, 0, "a batch is already open (commit or abort it first)"))
		return 1;
	((struct fs_ctx *)app->ctx)->batch = 1;
	return 0;
}

static int cmd_commit(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct fs_ctx *c = app->ctx;
	(void)a;
	(void)n;
	if (need_batch(app, 1, "no batch is open (start one with: batch)"))
		return 1;
	for (size_t i = 0; i < c->nops; i++)
		c->ops[i].buf = c->data.p + (uintptr_t)c->ops[i].buf;
	int rc = flexspace_apply(c->fs, c->ops, c->nops);
	batch_drop(c);
	return rc ? cli_status(app, "batch not applied", rc) : 0;
}

static int cmd_abort(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	if (need_batch(app, 1, "no batch is open"))
		return 1;
	batch_drop(app->ctx);
	return 0;
}


static int cmd_truncate(struct cli_app *app, struct cli_token *a, size_t n)
{
	uint64_t size;
	(void)n;
	if (outside_batch(app) || cli_number(app, &a[1], "SIZE", &size))
		return 1;
	return cli_done(app, flexspace_truncate(fs_of(app), size));
}

static int cmd_size(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	printf("%" PRIu64 "\n", flexspace_size(fs_of(app)));
	return 0;
}

/* The [OFF LEN] of defrag and extents, by default the whole space.
 * Returns 0 with the range, 1 after an error, -1 when there is nothing to
 * do (no arguments and an empty space). */
static int opt_range(struct cli_app *app, struct cli_token *a, size_t n, uint64_t *off,
		     uint64_t *len)
{
	if (n == 2) {
		cli_error(app, "usage: %s [OFF LEN]", app->cur);
		return 1;
	}
	*off = 0;
	*len = flexspace_size(fs_of(app));
	if (n == 3 && (cli_number(app, &a[1], "OFF", off) || cli_number(app, &a[2], "LEN", len)))
		return 1;
	if (n == 1 && *len == 0)
		return -1;
	return 0;
}

static int cmd_defrag(struct cli_app *app, struct cli_token *a, size_t n)
{
	uint64_t off, len;
	if (outside_batch(app))
		return 1;
	int r = opt_range(app, a, n, &off, &len);
	if (r)
		return r > 0; /* -1, nothing to do, is a success */
	return cli_done(app, flexspace_defrag(fs_of(app), off, len));
}

static int print_extent(void *arg, const struct flextree_extent *e)
{
	(void)arg;
	if (e->poff == FLEXTREE_HOLE)
		printf("%" PRIu64 " %" PRIu32 " hole", e->loff, e->len);
	else
		printf("%" PRIu64 " %" PRIu32 " %" PRIu64, e->loff, e->len, e->poff);
	if (e->tag)
		printf(" tag=%u", (unsigned)e->tag);
	putchar('\n');
	return 0;
}

static int cmd_extents(struct cli_app *app, struct cli_token *a, size_t n)
{
	uint64_t off, len;
	int r = opt_range(app, a, n, &off, &len);
	if (r)
		return r > 0; /* -1, nothing to do, is a success */
	return cli_done(app, flexspace_scan(fs_of(app), off, len, print_extent, NULL));
}

static int cmd_sync(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	return cli_done(app, flexspace_sync(fs_of(app)));
}

static int cmd_backup(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	const char *dir = cli_path(app, &a[1]);
	if (!dir)
		return 1;
	int rc = flexspace_checkpoint(fs_of(app), dir);
	return rc ? cli_status(app, dir, rc) : 0;
}

static int cmd_check(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	return cli_check_done(app, flexspace_check(fs_of(app)));
}

static int cmd_stats(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct flexspace_stats s;
	(void)a;
	(void)n;
	int rc = flexspace_stats(fs_of(app), &s);
	if (rc)
		return cli_status(app, NULL, rc);
#define P(name, v) printf("%-20s %" PRIu64 "\n", name, (uint64_t)(v))
	P("size", s.size);
	P("extents", s.extents);
	P("data_file_bytes", s.data_file_bytes);
	P("live_bytes", s.live_bytes);
	P("segment_size", s.segment_size);
	P("segments_used", s.segments_used);
	P("segments_free", s.segments_free);
	P("segments_pending", s.segments_pending);
	P("data_bytes_written", s.data_bytes_written);
	P("log_bytes_written", s.log_bytes_written);
	P("tree_bytes_written", s.tree_bytes_written);
	P("tree_commits", s.tree_commits);
	P("gc_runs", s.gc_runs);
	P("gc_bytes_moved", s.gc_bytes_moved);
	P("log_bytes", s.log_bytes);
	P("syncs", s.syncs);
	P("recovered_records", s.recovered_records);
	P("sync_version", s.sync_version);
	P("sync_batches", s.sync_batches);
	P("recovered_version", s.recovered_version);
	P("recovered_batches", s.recovered_batches);
#undef P
	return 0;
}

static const struct cli_cmd commands[] = {
    {"import", "FILE", 1, 1, "replace the content with a copy of regular file FILE",
     "    Writes FILE from offset 0 and truncates to its size.  Not atomic: an\n"
     "    error part-way leaves a partial copy (nothing is durable before sync).\n",
     cmd_import, 0, 0, NULL},
    {"export", "FILE", 1, 1, "write the whole content to FILE", NULL, cmd_export, 0, 1, NULL},
    {"read", "[-x|-r|-s] [OPTIONS] OFF LEN", 2, 3, "print LEN bytes at OFF (fewer at the end)",
     "    -x (default) a hex dump: offset, 16 bytes in hex, the printable ones;\n"
     "    -r the raw bytes to standard output; -s one escaped string, as write\n"
     "    and insert take it.  Holes read as zeros.  The tool's --hex and --raw\n"
     "    change the default.\n",
     cmd_read, 7u << 1, 1, read_opts},
    {"write", "OFF DATA", 2, 2, "overwrite/extend with DATA at OFF (a gap becomes a hole)",
     "    DATA @FILE is the bytes of FILE, and - (bare) the bytes of standard\n"
     "    input up to its end (only with -c, when it is not a terminal; once per\n"
     "    run).  @@ at the start stands for a literal @; 0x hex is always the\n"
     "    bytes.  At most 1 GiB from a file: import takes more.\n",
     cmd_write, 1u << 1, 0, NULL},
    {"insert", "OFF DATA", 2, 2, "insert DATA at OFF; what followed moves up",
     "    DATA as for write: @FILE, - (standard input), @@ for a literal @.\n", cmd_insert,
     1u << 1, 0, NULL},
    {"collapse", "OFF LEN", 2, 2, "remove [OFF, OFF+LEN); what followed moves down", NULL,
     cmd_collapse, 3u << 1, 0, NULL},
    {"replace", "OFF LEN DATA", 3, 3, "replace [OFF, OFF+LEN) with DATA, atomically",
     "    One change (flexspace_apply): a crash or a reader sees the old bytes\n"
     "    or DATA, never the range removed and DATA not yet in.  DATA as for\n"
     "    write.\n",
     cmd_replace, 3u << 1, 0, NULL},
    {"batch", "", 0, 0, "start an atomic batch of write, insert, collapse and replace",
     "    They are queued until commit applies them all at once, in order, each\n"
     "    at offsets as the ones before it leave the space (one flexspace_apply,\n"
     "    atomic also across a crash), or abort drops them.  One that does not\n"
     "    fit (past the end, say) fails commit with nothing applied.  read and\n"
     "    the other reading commands see the space, not the batch; import,\n"
     "    truncate and defrag are refused while it is open.  A batch still\n"
     "    open at the end is dropped, with an error.\n",
     cmd_batch, 0, 0, NULL},
    {"commit", "", 0, 0, "apply the open batch atomically", NULL, cmd_commit, 0, 0, NULL},
    {"abort", "", 0, 0, "drop the open batch", NULL, cmd_abort, 0, 0, NULL},
    {"truncate", "SIZE", 1, 1, "shrink, or grow with a hole, to SIZE bytes", NULL, cmd_truncate,
     1u << 1, 0, NULL},
    {"size", "", 0, 0, "print the logical size in bytes", NULL, cmd_size, 0, 1, NULL},
    {"extents", "[OFF LEN]", 0, 2, "list the extents: LOFF LEN POFF|hole [tag=T]", NULL,
     cmd_extents, 3u << 1, 1, NULL},
    {"defrag", "[OFF LEN]", 0, 2, "rewrite a range (default: all) contiguously", NULL, cmd_defrag,
     3u << 1, 0, NULL},
    {"sync", "", 0, 0, "make every change so far durable", NULL, cmd_sync, 0, 0, NULL},
    {"stats", "", 0, 0, "print the counters, one \"name value\" a line", NULL, cmd_stats, 0, 1,
     NULL},
    {"check", "", 0, 0, "run the deep consistency check; prints ok", NULL, cmd_check, 0, 1, NULL},
    {"backup", "DIR", 1, 1, "write a consistent copy of the space to DIR (flexspace_checkpoint)",
     "    DIR must be missing or an empty directory, outside the space.  The\n"
     "    copy is a space that flexspace-cli opens: every change made before\n"
     "    the command is in it, and it is durable when backup returns.\n",
     cmd_backup, 0, 1, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0, NULL},
};

static int fs_open(struct cli_app *app, const char *dir)
{
	struct fs_ctx *c = app->ctx;
	c->buf = malloc(CHUNK);
	if (!c->buf)
		return 1;
	if (app->only_reads)
		c->opt.no_create = 1;
	app->read_only = c->opt.read_only;
	int rc = flexspace_open(dir, &c->opt, &c->fs);
	if (rc)
		free(c->buf);
	return rc;
}

static const char *fs_bad_option(struct cli_app *app)
{
	const char *field = NULL;
	flexspace_options_check(&((struct fs_ctx *)app->ctx)->opt, &field);
	return field;
}

/* A batch still open at the end is dropped, and fails a script. */
static void fs_finish(struct cli_app *app)
{
	struct fs_ctx *c = app->ctx;
	if (!c->batch)
		return;
	app->cur = NULL;
	cli_error(app, "a batch of %zu changes was not committed; dropped", c->nops);
	batch_drop(c);
	if (!app->interactive)
		app->failed = 1;
}

static int fs_close(struct cli_app *app)
{
	struct fs_ctx *c = app->ctx;
	int rc = flexspace_close(c->fs);
	free(c->buf);
	free(c->ops);
	cli_buf_free(&c->data);
	return rc;
}

int main(int argc, char **argv)
{
	struct fs_ctx c = {0};
	const struct cli_flag flags[] = {
	    {"--no-create", &c.opt.no_create, 1, "fail when DIR holds no space"},
	    {"--readonly", &c.opt.read_only, 1,
	     "open read-only (shared with other readers, never written; changes fail)"},
	    {"--hex", &read_mode, 'h', "read prints one 0x hex string by default"},
	    {"--raw", &read_mode, 'r', "read prints the raw bytes by default"},
	    {NULL, NULL, 0, NULL},
	};
	const struct cli_numflag numflags[] = {
	    {"--segment-size", &c.opt.segment_size,
	     "of a new space: a power of two, 64K .. 256M (default 4M)"},
	    {NULL, NULL, NULL},
	};
	const struct cli_driver driver = {
	    .flags = flags,
	    .numflags = numflags,
	    .about = "Opens (or creates) the FlexSpace in directory DIR.  On a terminal it\n"
		     "starts an interactive shell (prompt \"flexspace> \", line editing, history\n"
		     "in $HOME/.flexspace_history, tab completion of commands;\n"
		     "Ctrl-C drops the line being typed); with -c it runs\n",
	    .status = "Exit status: 0 when every command succeeded, 1 when one failed, 2 for bad\n"
		      "options or a space that could not be opened or closed.\n"
		      "OFF, LEN and SIZE: decimal or 0x hex, with an optional K, M, G or T\n"
		      "suffix (powers of 1024).\n",
	    .details = "\nDetails: help CMD, and docs/CLI.md.\n",
	    .open = fs_open,
	    .bad_option = fs_bad_option,
	    .finish = fs_finish,
	    .close = fs_close,
	};
	struct cli_app app = {
	    .prog = "flexspace-cli",
	    .prompt = "flexspace> ",
	    .history = ".flexspace_history",
	    .cmds = commands,
	    .ctx = &c,
	};
	return cli_main(&app, &driver, argc, argv);
}
