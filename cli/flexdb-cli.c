/*
 * flexdb-cli - a shell for a FlexDB store.
 *
 *   flexdb-cli [OPTIONS] DIR                 REPL on a terminal, else a script
 *                                            read from standard input
 *   flexdb-cli [OPTIONS] DIR -c 'CMD; CMD'   run the commands and exit
 *
 * A thin client of the public API (include/flexdb.h): every command maps
 * to one or a few library calls.  The argument syntax, output escaping and
 * the REPL are in cli/lib/cli_common.h; the commands and the dump format are
 * documented in docs/CLI.md and by `flexdb-cli --help`.
 *
 * Guarantees: a line that does not parse, an unknown command or a wrong
 * argument count runs nothing; `load` validates the whole file before its
 * first put; `batch` ... `commit` is one flexdb_write, so all or nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexdb.h"

#include "lib/cli_common.h"

#define DUMP_MAGIC "flexdb-dump 1"
#define PROGRESS_EVERY 100000u
/* Load applies pairs in batches of about this many bytes: large enough to
 * amortise the WAL write, small enough not to hold a whole file in memory. */
#define LOAD_BATCH_BYTES (4u << 20)

/* How keys and values are printed (--hex, --raw); dump keeps its format. */
enum { OUT_ESCAPED, OUT_HEX, OUT_RAW };

struct db_ctx {
	struct flexdb_options opt; /* set by the command-line flags */
	struct flexdb *db;
	struct flexdb_batch *batch; /* non-NULL between `batch` and commit/abort */
	uint64_t batch_ops;
	unsigned char *val; /* FLEXDB_MAX_VALUE bytes for get */
	int out;	    /* OUT_* */
};

static struct db_ctx *ctx_of(struct cli_app *app)
{
	return app->ctx;
}

/* memcmp order, a shorter key first on a common prefix (flexdb.h). */
static int key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);
	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

static int check_key(struct cli_app *app, const struct cli_token *k)
{
	if (k->len == 0) {
		cli_error(app, "a key must not be empty");
		return 1;
	}
	if (k->len > FLEXDB_MAX_KEY) {
		cli_error(app, "key of %zu bytes: %s (limit %u)", k->len,
			  flex_strerror(FLEX_ETOOBIG), FLEXDB_MAX_KEY);
		return 1;
	}
	return 0;
}

/* Fails with msg unless a batch is open (open 1), or none is (open 0). */
static int need_batch(struct cli_app *app, int open, const char *msg)
{
	if (!ctx_of(app)->batch == !open)
		return 0;
	cli_error(app, "%s", msg);
	return 1;
}

/* The end of put and del: the status, and the operation counted when a
 * batch holds it. */
static int queued(struct cli_app *app, int rc)
{
	struct db_ctx *c = ctx_of(app);
	if (rc)
		return cli_status(app, NULL, rc);
	if (c->batch)
		c->batch_ops++;
	return 0;
}

static int cmd_put(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	struct cli_buf b = {0};
	const unsigned char *v;
	size_t vl;
	(void)n;
	if (check_key(app, &a[1]) ||
	    cli_bytes_arg(app, &a[2], "VALUE", FLEXDB_MAX_VALUE, &b, &v, &vl))
		goto fail;
	if (vl > FLEXDB_MAX_VALUE) {
		/* a file or stdin is read only one byte past the limit */
		if (b.p && v == b.p && a[2].data[0] == '@')
			cli_file_error(app, (const char *)a[2].data + 1,
				       "value of more than %u bytes: %s", FLEXDB_MAX_VALUE,
				       flex_strerror(FLEX_ETOOBIG));
		else if (b.p && v == b.p)
			cli_error(app, "standard input: value of more than %u bytes: %s",
				  FLEXDB_MAX_VALUE, flex_strerror(FLEX_ETOOBIG));
		else
			cli_error(app, "value of %zu bytes: %s (limit %u)", vl,
				  flex_strerror(FLEX_ETOOBIG), FLEXDB_MAX_VALUE);
		goto fail;
	}
	int rc = queued(app, c->batch ? flexdb_batch_put(c->batch, a[1].data, a[1].len, v, vl)
				      : flexdb_put(c->db, a[1].data, a[1].len, v, vl));
	cli_buf_free(&b);
	return rc;
fail:
	cli_buf_free(&b);
	return 1;
}

static int cmd_del(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)n;
	if (check_key(app, &a[1]))
		return 1;
	return queued(app, c->batch ? flexdb_batch_delete(c->batch, a[1].data, a[1].len)
				    : flexdb_delete(c->db, a[1].data, a[1].len));
}

/* Deletes [from, to), or queues it in the open batch. */
static int del_range(struct cli_app *app, const void *from, size_t flen, const void *to,
		     size_t tlen)
{
	struct db_ctx *c = ctx_of(app);
	return queued(app, c->batch ? flexdb_batch_delete_range(c->batch, from, flen, to, tlen)
				    : flexdb_delete_range(c->db, from, flen, to, tlen));
}

static int cmd_delrange(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	if (a[1].len > FLEXDB_MAX_KEY) {
		cli_error(app, "FROM of %zu bytes: %s (limit %u)", a[1].len,
			  flex_strerror(FLEX_ETOOBIG), FLEXDB_MAX_KEY);
		return 1;
	}
	if (check_key(app, &a[2]))
		return 1;
	if (key_cmp(a[1].data, a[1].len, a[2].data, a[2].len) >= 0) {
		cli_error(app, "empty range: FROM must sort before TO");
		return 1;
	}
	return del_range(app, a[1].data, a[1].len, a[2].data, a[2].len);
}

/* [P, the next key after every key starting with P): P with its last byte
 * below 0xff incremented and what follows cut.  A prefix of only 0xff
 * bytes has no such key below the longest key: the range then ends at
 * the longest key of 0xff bytes, deleted alongside (in one batch). */
static int cmd_delprefix(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)n;
	if (check_key(app, &a[1]))
		return 1;
	unsigned char *end = malloc(FLEXDB_MAX_KEY);
	if (!end)
		return cli_status(app, NULL, -ENOMEM);
	size_t el = a[1].len;
	memcpy(end, a[1].data, el);
	while (el && end[el - 1] == 0xff)
		el--;
	int rc;
	if (el) {
		end[el - 1]++;
		rc = del_range(app, a[1].data, a[1].len, end, el);
	} else {
		memset(end, 0xff, FLEXDB_MAX_KEY);
		struct flexdb_batch *b = c->batch ? c->batch : flexdb_batch_new();
		rc = b ? 0 : -ENOMEM;
		if (!rc && a[1].len < FLEXDB_MAX_KEY)
			rc = flexdb_batch_delete_range(b, a[1].data, a[1].len, end,
						       FLEXDB_MAX_KEY);
		if (!rc)
			rc = flexdb_batch_delete(b, end, FLEXDB_MAX_KEY);
		if (!rc && !c->batch)
			rc = flexdb_write(c->db, b);
		if (b != c->batch)
			flexdb_batch_free(b);
		rc = queued(app, rc);
	}
	free(end);
	return rc;
}

/* Appends key or value bytes to b in the output mode: escaped (pasteable
 * as an argument, a value's leading @ doubled), 0x hex ("" when empty,
 * also pasteable), or raw. */
static void out_bytes(const struct db_ctx *c, struct cli_buf *b, const void *data, size_t n,
		      int value)
{
	if (c->out == OUT_HEX)
		cli_hex(b, data, n);
	else if (c->out == OUT_RAW)
		cli_buf_add(b, data, n);
	else
		(value ? cli_escape_data : cli_escape)(b, data, n);
}

static int cmd_get(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)n;
	if (check_key(app, &a[1]))
		return 1;
	size_t vlen = 0;
	int rc = flexdb_get(c->db, a[1].data, a[1].len, c->val, FLEXDB_MAX_VALUE, &vlen);
	if (rc == FLEXDB_NOTFOUND && c->out == OUT_RAW) {
		/* no output could tell it from a value */
		struct cli_buf e = {0};
		cli_error(app, "%s: not found", cli_clip(&e, a[1].data, a[1].len));
		cli_buf_free(&e);
		return 1;
	}
	if (rc == FLEXDB_NOTFOUND) {
		printf("(not found)\n");
		return 0;
	}
	if (rc)
		return cli_status(app, NULL, rc);
	struct cli_buf b = {0};
	out_bytes(c, &b, c->val, vlen < FLEXDB_MAX_VALUE ? vlen : FLEXDB_MAX_VALUE, 1);
	/* raw: the value's bytes alone, so that they can be redirected to a file */
	if (c->out != OUT_RAW)
		cli_buf_addc(&b, '\n');
	rc = b.len && fwrite(b.p, 1, b.len, stdout) != b.len;
	cli_buf_free(&b);
	if (rc) {
		cli_error(app, "writing the output failed");
		return 1;
	}
	return 0;
}

/* Walks [start, end) in key order, or in descending order when reverse
 * (empty start: from the first key; NULL end: to the last), at most limit
 * pairs (0: no limit), calling fn for each; fn returns nonzero to stop.
 * prefix, when non-NULL, also limits it to the keys starting with it.  The
 * iterator's bounds do the limiting, so that it reads no further.  Returns
 * 0 or a library status. */
struct walk {
	const unsigned char *start, *end, *prefix;
	size_t slen, elen, plen;
	uint64_t limit;
	int reverse;
	uint64_t seen;
	const char *progress; /* a verb for the progress line, or NULL */
	int (*fn)(void *arg, const void *k, size_t kl, const void *v, size_t vl);
	void *arg;
};

static int walk(struct flexdb *db, struct walk *w)
{
	/* An inverted or empty range holds nothing (the library refuses it
	 * as bounds). */
	if (w->slen && w->end && key_cmp(w->start, w->slen, w->end, w->elen) >= 0)
		return 0;
	struct flexdb_iter *it;
	int rc = flexdb_iter_open(db, &it);
	if (rc)
		return rc;
	rc = flexdb_iter_set_bounds(it, w->start, w->slen, w->end, w->end ? w->elen : 0);
	if (!rc && w->prefix)
		rc = flexdb_iter_set_prefix(it, w->prefix, w->plen);
	if (!rc)
		rc = w->reverse ? flexdb_iter_seek_for_prev(it, NULL, 0)
				: flexdb_iter_seek(it, NULL, 0);
	while (!rc && flexdb_iter_valid(it)) {
		size_t kl, vl;
		const void *k = flexdb_iter_key(it, &kl);
		const void *v = flexdb_iter_value(it, &vl);
		if (w->fn && w->fn(w->arg, k, kl, v, vl)) {
			rc = 1;
			break;
		}
		w->seen++;
		if (w->progress && w->seen % PROGRESS_EVERY == 0)
			cli_progress(w->progress, w->seen, "pairs");
		if (w->limit && w->seen >= w->limit)
			break;
		rc = w->reverse ? flexdb_iter_prev(it) : flexdb_iter_next(it);
	}
	if (w->progress && w->seen >= PROGRESS_EVERY)
		cli_progress(NULL, 0, NULL);
	flexdb_iter_close(it);
	return rc;
}

struct printer {
	const struct db_ctx *c;
	int keys_only;
	struct cli_buf b;
};

static int print_pair(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	struct printer *p = arg;
	p->b.len = 0;
	out_bytes(p->c, &p->b, k, kl, 0);
	if (!p->keys_only) {
		cli_buf_addc(&p->b, ' ');
		out_bytes(p->c, &p->b, v, vl, 1);
	}
	cli_buf_addc(&p->b, '\n');
	return fwrite(p->b.p, 1, p->b.len, stdout) != p->b.len;
}

/* The options of scan, count and dump, by their index in app->opt. */
enum { OPT_FROM, OPT_TO, OPT_LIMIT, OPT_REVERSE, OPT_KEYS_ONLY };

static const struct cli_opt scan_opts[] = {
    {"--from", "KEY", 0, "from KEY on (inclusive; \"\" is the first key)"},
    {"--to", "KEY", 0, "up to KEY (exclusive; \"\" is no end)"},
    {"--limit", "N", 1, "at most N pairs (0: no limit)"},
    {"--reverse", NULL, 0, "descending: from the last key below --to down to --from"},
    {"--keys-only", NULL, 0, "print the keys alone"},
    {NULL, NULL, 0, NULL},
};
/* count and dump take the first of these, at the same OPT_* indexes */
static const struct cli_opt count_opts[] = {
    {"--from", "KEY", 0, "from KEY on (inclusive; \"\" is the first key)"},
    {"--to", "KEY", 0, "up to KEY (exclusive; \"\" is no end)"},
    {NULL, NULL, 0, NULL},
};
static const struct cli_opt dump_opts[] = {
    {"--from", "KEY", 0, "from KEY on (inclusive; \"\" is the first key)"},
    {"--to", "KEY", 0, "up to KEY (exclusive; \"\" is no end)"},
    {"--limit", "N", 1, "at most N pairs (0: no limit)"},
    {NULL, NULL, 0, NULL},
};

/* Takes a value from an option or from an argument, not from both. */
static const struct cli_token *one_of(struct cli_app *app, const struct cli_token *opt,
				      const struct cli_token *arg, const char *what,
				      const char *name, int *bad)
{
	if (opt && arg) {
		cli_error(app, "%s given twice: as %s and as an argument", what, name);
		*bad = 1;
	}
	return opt ? opt : arg;
}

/* The range of scan, count and dump: --from, --to, --limit, or the keys
 * arguments START [END] after the name and a LIMIT argument.  An empty
 * START or END is no bound.  Returns 0, or 1 after an error. */
static int set_range(struct cli_app *app, struct walk *w, const struct cli_token *a, size_t keys,
		     const struct cli_token *limit)
{
	int bad = 0;
	const struct cli_token *from =
	    one_of(app, app->opt[OPT_FROM], keys >= 1 ? &a[1] : NULL, "START", "--from", &bad);
	const struct cli_token *to =
	    one_of(app, app->opt[OPT_TO], keys >= 2 ? &a[2] : NULL, "END", "--to", &bad);
	if (!bad && from) {
		w->start = from->data;
		w->slen = from->len;
	}
	if (!bad && to && to->len) {
		w->end = to->data;
		w->elen = to->len;
	}
	if (!bad && limit)
		bad = cli_number(app, limit, limit == app->opt[OPT_LIMIT] ? "--limit" : "LIMIT",
				 &w->limit);
	return bad;
}

/* Prints the pairs w selects as KEY VALUE lines (scan and prefix). */
static int print_walk(struct cli_app *app, struct walk *w, int keys_only)
{
	struct printer p = {ctx_of(app), keys_only, {0}};
	w->fn = print_pair;
	w->arg = &p;
	int rc = walk(ctx_of(app)->db, w);
	cli_buf_free(&p.b);
	if (rc < 0)
		return cli_status(app, NULL, rc);
	if (rc > 0) {
		cli_error(app, "writing the output failed");
		return 1;
	}
	return 0;
}

static int cmd_scan(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct walk w = {0};
	const struct cli_token *limit = NULL;
	size_t keys = n - 1;
	int bad = 0;
	/* a trailing bare decimal number is the LIMIT: `scan 10`, `scan a 10`,
	 * `scan a b 10`; quote it to mean a key ("10"). */
	if (keys > 0 && (keys == 3 || cli_is_decimal(&a[n - 1]))) {
		limit = &a[n - 1];
		keys--;
	}
	if (keys > 2) {
		cli_error(app, "usage: scan [OPTIONS] [START [END]] [LIMIT]");
		return 1;
	}
	limit = one_of(app, app->opt[OPT_LIMIT], limit, "LIMIT", "--limit", &bad);
	if (bad || set_range(app, &w, a, keys, limit))
		return 1;
	w.reverse = app->opt[OPT_REVERSE] != NULL;
	return print_walk(app, &w, app->opt[OPT_KEYS_ONLY] != NULL);
}

static int cmd_prefix(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct walk w = {0};
	if (n == 3 && cli_number(app, &a[2], "LIMIT", &w.limit))
		return 1;
	w.prefix = a[1].data;
	w.plen = a[1].len;
	return print_walk(app, &w, 0);
}

static int cmd_count(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	struct walk w = {0};
	if (set_range(app, &w, a, n - 1, NULL))
		return 1;
	w.progress = "count";
	int rc = walk(c->db, &w);
	if (rc < 0)
		return cli_status(app, NULL, rc);
	printf("%" PRIu64 "\n", w.seen);
	return 0;
}

static int cmd_batch(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)a;
	(void)n;
	if (need_batch(app, 0, "a batch is already open (commit or abort it first)"))
		return 1;
	c->batch = flexdb_batch_new();
	if (!c->batch)
		return cli_status(app, NULL, -ENOMEM);
	c->batch_ops = 0;
	return 0;
}

static int cmd_commit(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)a;
	(void)n;
	if (need_batch(app, 1, "no batch is open (start one with: batch)"))
		return 1;
	int rc = flexdb_write(c->db, c->batch);
	flexdb_batch_free(c->batch);
	c->batch = NULL;
	if (rc)
		return cli_status(app, "batch not applied", rc);
	return 0;
}

static int cmd_abort(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	(void)a;
	(void)n;
	if (need_batch(app, 1, "no batch is open"))
		return 1;
	flexdb_batch_free(c->batch);
	c->batch = NULL;
	return 0;
}

static int cmd_sync(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	return cli_done(app, flexdb_sync(ctx_of(app)->db));
}

static int cmd_compact(struct cli_app *app, struct cli_token *a, size_t n)
{
	if (n > 1 && (a[1].len != 4 || memcmp(a[1].data, "full", 4) != 0)) {
		cli_error(app, "the only argument is \"full\"");
		return 1;
	}
	return cli_done(app, flexdb_compact(ctx_of(app)->db, n > 1));
}

static int cmd_backup(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)n;
	const char *dir = cli_path(app, &a[1]);
	if (!dir)
		return 1;
	int rc = flexdb_checkpoint(ctx_of(app)->db, dir);
	return rc ? cli_status(app, dir, rc) : 0;
}

static int cmd_check(struct cli_app *app, struct cli_token *a, size_t n)
{
	(void)a;
	(void)n;
	return cli_check_done(app, flexdb_check(ctx_of(app)->db));
}

static int cmd_stats(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct flexdb_stats s;
	(void)a, (void)n;
	int rc = flexdb_stats(ctx_of(app)->db, &s);
	if (rc)
		return cli_status(app, NULL, rc);
#define P(name, v) printf("%-26s %" PRIu64 "\n", name, (uint64_t)(v))
	P("keys", s.keys);
	P("intervals_uncounted", s.intervals_uncounted);
	P("bytes", s.bytes);
	P("intervals", s.intervals);
	P("cache_bytes", s.cache_bytes);
	P("cache_hits", s.cache_hits);
	P("cache_misses", s.cache_misses);
	P("cache_thin_hits", s.cache_thin_hits);
	P("cache_thin_located", s.cache_thin_located);
	P("memtable_bytes", s.memtable_bytes);
	P("memtable_entries", s.memtable_entries);
	P("wal_bytes", s.wal_bytes);
	P("committer_runs", s.committer_runs);
	P("committed_pairs", s.committed_pairs);
	P("writer_stalls", s.writer_stalls);
	P("wal_syncs", s.wal_syncs);
	P("recovered_ops", s.recovered_ops);
	P("tidy_bytes", s.tidy_bytes);
	P("tidy_due", (uint64_t)s.tidy_due);
	P("warming", (uint64_t)s.warming);
	P("index_from_file", (uint64_t)s.index_from_file);
	P("scan_located", s.scan_located);
	P("scan_stale", s.scan_stale);
	P("maps_renewed", s.maps_renewed);
	P("space.size", s.space.size);
	P("space.extents", s.space.extents);
	P("space.data_file_bytes", s.space.data_file_bytes);
	P("space.live_bytes", s.space.live_bytes);
	P("space.segment_size", s.space.segment_size);
	P("space.segments_used", s.space.segments_used);
	P("space.segments_free", s.space.segments_free);
	P("space.segments_pending", s.space.segments_pending);
	P("space.data_bytes_written", s.space.data_bytes_written);
	P("space.log_bytes_written", s.space.log_bytes_written);
	P("space.tree_bytes_written", s.space.tree_bytes_written);
	P("space.tree_commits", s.space.tree_commits);
	P("space.gc_runs", s.space.gc_runs);
	P("space.gc_bytes_moved", s.space.gc_bytes_moved);
	P("space.log_bytes", s.space.log_bytes);
	P("space.syncs", s.space.syncs);
	P("space.recovered_records", s.space.recovered_records);
	P("space.sync_version", s.space.sync_version);
	P("space.sync_batches", s.space.sync_batches);
	P("space.recovered_version", s.space.recovered_version);
	P("space.recovered_batches", s.space.recovered_batches);
#undef P
	return 0;
}

/* ---- dump and load ---------------------------------------------------------
 * The format (docs/CLI.md): a first line "flexdb-dump 1"; one line per pair
 * in key order, KEY TAB VALUE, both written as CLI arguments (bare or
 * quoted with escapes; an escaped field never holds a raw TAB or newline);
 * a last line "end N" with the number of pairs.  Blank lines and lines
 * starting with '#' are ignored.  The "end" line guards against a
 * truncated file. */

struct dumper {
	FILE *f;
	struct cli_buf b;
	int err; /* the first write error, -errno */
};

static int dump_pair(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	struct dumper *d = arg;
	d->b.len = 0;
	cli_escape(&d->b, k, kl);
	cli_buf_addc(&d->b, '\t');
	cli_escape(&d->b, v, vl);
	cli_buf_addc(&d->b, '\n');
	errno = 0;
	if (fwrite(d->b.p, 1, d->b.len, d->f) == d->b.len)
		return 0;
	d->err = cli_errno();
	return 1;
}

static int cmd_dump(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	struct dumper d = {stdout, {0}, 0};
	const char *path = NULL;
	struct walk w = {0};
	if (n == 2 && !(path = cli_path(app, &a[1])))
		return 1;
	if (set_range(app, &w, a, 0, app->opt[OPT_LIMIT]))
		return 1;
	if (path && !(d.f = fopen(path, "w")))
		return cli_file_status(app, path, cli_errno());
	fprintf(d.f, "%s\n", DUMP_MAGIC);
	w.fn = dump_pair;
	w.arg = &d;
	w.progress = path ? "dump" : NULL; /* not mixed into the data on a tty */
	int rc = walk(c->db, &w);
	cli_buf_free(&d.b);
	if (rc == 0)
		fprintf(d.f, "end %" PRIu64 "\n", w.seen);
	/* The error of the first write that failed, else of the flush or
	 * close that found it. */
	errno = 0;
	if (!d.err && (ferror(d.f) || fflush(d.f)))
		d.err = cli_errno();
	errno = 0;
	if (path && fclose(d.f) && !d.err)
		d.err = cli_errno();
	if (rc < 0)
		return cli_status(app, NULL, rc);
	if (rc > 0 || d.err) {
		if (path)
			return cli_file_error(app, path, "writing failed: %s",
					      flex_strerror(d.err ? d.err : -EIO));
		cli_error(app, "writing the output failed: %s",
			  flex_strerror(d.err ? d.err : -EIO));
		return 1;
	}
	if (path)
		printf("dumped %" PRIu64 " pairs\n", w.seen);
	return 0;
}

struct loader {
	FILE *f;
	const char *path;
	char *line;
	size_t cap;
	long lineno;
	struct cli_buf k, v;
};

/* Reads the next pair into l->k, l->v.  Returns 1 with a pair, 0 at the
 * "end N" line (count in *end), -1 with err on a malformed or truncated
 * file. */
static int load_next(struct loader *l, uint64_t *end, char *err, size_t errsz)
{
	ssize_t n;
	char ferr[160];
	while ((n = getline(&l->line, &l->cap, l->f)) >= 0) {
		l->lineno++;
		size_t len = (size_t)n;
		if (len && l->line[len - 1] == '\n')
			len--;
		if (len && l->line[len - 1] == '\r')
			len--;
		if (len == 0 || l->line[0] == '#')
			continue;
		if (!memchr(l->line, '\t', len)) {
			/* not a pair (an escaped field has no raw TAB): "end N" */
			char *e;
			l->line[len] = '\0';
			errno = 0;
			unsigned long long v = len > 4 && !memcmp(l->line, "end ", 4) &&
						       l->line[4] >= '0' && l->line[4] <= '9'
						   ? strtoull(l->line + 4, &e, 10)
						   : (e = l->line, 0);
			if (errno || e == l->line || *e) {
				snprintf(err, errsz,
					 "line %ld: expected KEY<TAB>VALUE or \"end N\"",
					 l->lineno);
				return -1;
			}
			*end = v;
			long at = l->lineno;
			while ((n = getline(&l->line, &l->cap, l->f)) >= 0) {
				l->lineno++;
				if (n && l->line[0] != '#' && l->line[0] != '\n' &&
				    l->line[0] != '\r') {
					snprintf(err, errsz,
						 "line %ld: text after the end line (line %ld)",
						 l->lineno, at);
					return -1;
				}
			}
			return 0;
		}
		char *tab = memchr(l->line, '\t', len);
		if (!tab || memchr(tab + 1, '\t', len - (size_t)(tab + 1 - l->line))) {
			snprintf(err, errsz, "line %ld: expected KEY<TAB>VALUE", l->lineno);
			return -1;
		}
		if (cli_decode_field(l->line, (size_t)(tab - l->line), &l->k, ferr, sizeof(ferr))) {
			snprintf(err, errsz, "line %ld: key: %s", l->lineno, ferr);
			return -1;
		}
		if (cli_decode_field(tab + 1, len - (size_t)(tab + 1 - l->line), &l->v, ferr,
				     sizeof(ferr))) {
			snprintf(err, errsz, "line %ld: value: %s", l->lineno, ferr);
			return -1;
		}
		if (l->k.len == 0 || l->k.len > FLEXDB_MAX_KEY) {
			snprintf(err, errsz, "line %ld: key of %zu bytes is out of range",
				 l->lineno, l->k.len);
			return -1;
		}
		if (l->v.len > FLEXDB_MAX_VALUE) {
			snprintf(err, errsz, "line %ld: value of %zu bytes is too large", l->lineno,
				 l->v.len);
			return -1;
		}
		return 1;
	}
	if (ferror(l->f))
		snprintf(err, errsz, "read error: %s", strerror(errno));
	else
		snprintf(err, errsz, "truncated file: no \"end N\" line");
	return -1;
}

static int load_open(struct loader *l, char *err, size_t errsz)
{
	rewind(l->f);
	l->lineno = 0;
	ssize_t n = getline(&l->line, &l->cap, l->f);
	if (n < 0 || strncmp(l->line, DUMP_MAGIC, strlen(DUMP_MAGIC)) ||
	    (l->line[strlen(DUMP_MAGIC)] != '\n' && l->line[strlen(DUMP_MAGIC)] != '\0' &&
	     l->line[strlen(DUMP_MAGIC)] != '\r')) {
		snprintf(err, errsz, "not a dump: the first line must be \"%s\"", DUMP_MAGIC);
		return -1;
	}
	l->lineno = 1;
	return 0;
}

/* Two passes: the first validates the whole file (nothing is written when
 * it is malformed), the second applies it in batches.  Existing keys not
 * in the file are kept; keys in it are overwritten. */
static int cmd_load(struct cli_app *app, struct cli_token *a, size_t n)
{
	struct db_ctx *c = ctx_of(app);
	struct loader l = {0};
	char err[256];
	uint64_t end = 0, pairs = 0, applied = 0;
	int rc, ret = 1;
	(void)n;
	if (need_batch(app, 0, "not inside a batch (commit or abort it first)") ||
	    !(l.path = cli_path(app, &a[1])))
		return 1;
	if (!(l.f = fopen(l.path, "r")))
		return cli_file_status(app, l.path, cli_errno());
	if (load_open(&l, err, sizeof(err)))
		goto bad;
	while ((rc = load_next(&l, &end, err, sizeof(err))) == 1) {
		if (++pairs % PROGRESS_EVERY == 0)
			cli_progress("load (checking)", pairs, "pairs");
	}
	if (rc < 0)
		goto bad;
	if (end != pairs) {
		snprintf(err, sizeof(err),
			 "line %ld: the end line says %" PRIu64 " pairs, the file has %" PRIu64,
			 l.lineno, end, pairs);
		goto bad;
	}
	if (load_open(&l, err, sizeof(err)))
		goto bad;
	struct flexdb_batch *b = flexdb_batch_new();
	if (!b) {
		cli_status(app, NULL, -ENOMEM);
		goto out;
	}
	size_t bytes = 0;
	while ((rc = load_next(&l, &end, err, sizeof(err))) == 1) {
		rc = flexdb_batch_put(b, l.k.p, l.k.len, l.v.p, l.v.len);
		if (rc)
			break;
		bytes += l.k.len + l.v.len + 16;
		if (bytes >= LOAD_BATCH_BYTES) {
			if ((rc = flexdb_write(c->db, b)))
				break;
			flexdb_batch_clear(b);
			bytes = 0;
		}
		if (++applied % PROGRESS_EVERY == 0)
			cli_progress("load", applied, "pairs");
	}
	if (rc == 0)
		rc = flexdb_write(c->db, b);
	flexdb_batch_free(b);
	if (applied >= PROGRESS_EVERY)
		cli_progress(NULL, 0, NULL);
	if (rc < 0) {
		cli_file_error(app, l.path, "%s (the pairs before line %ld may have been loaded)",
			       flex_strerror(rc), l.lineno);
		goto out;
	}
	if (rc > 0 || applied != pairs) {
		cli_file_error(app, l.path, "changed while loading");
		goto out;
	}
	printf("loaded %" PRIu64 " pairs\n", pairs);
	ret = 0;
	goto out;
bad:
	if (pairs >= PROGRESS_EVERY)
		cli_progress(NULL, 0, NULL);
	cli_file_error(app, l.path, "%s (nothing loaded)", err);
out:
	fclose(l.f);
	free(l.line);
	cli_buf_free(&l.k);
	cli_buf_free(&l.v);
	return ret;
}

/* ---- the command table -------------------------------------------------- */

static const struct cli_cmd commands[] = {
    {"put", "KEY VALUE", 2, 2, "set KEY to VALUE (queued when a batch is open)",
     "    VALUE @FILE is the bytes of FILE, and - (bare) the bytes of standard\n"
     "    input up to its end (only with -c, when it is not a terminal).  @@ at\n"
     "    the start stands for a literal @ (put k @@x sets \"@x\"); 0x hex is\n"
     "    always the bytes.\n",
     cmd_put, 0, 0, NULL},
    {"get", "KEY", 1, 1, "print the value of KEY, or (not found)",
     "    Reads the store, not an open batch.  A missing key is not an error,\n"
     "    except with --raw, which prints the value's bytes alone (no newline).\n",
     cmd_get, 0, 1, NULL},
    {"del", "KEY", 1, 1, "delete KEY (absent keys are fine; queued in a batch)", NULL, cmd_del, 0,
     0, NULL},
    {"delrange", "FROM TO", 2, 2, "delete every key in [FROM, TO) (queued in a batch)",
     "    FROM \"\" is the first key; TO is a key after FROM.  One range delete\n"
     "    (flexdb_delete_range): atomic, and a few index updates however many\n"
     "    keys it covers (their bytes leave the store in one collapse when the\n"
     "    memtable is committed).\n",
     cmd_delrange, 0, 0, NULL},
    {"delprefix", "P", 1, 1, "delete every key that starts with P (queued in a batch)",
     "    One range delete: [P, P with its last byte below 0xff plus one).\n", cmd_delprefix,
     0, 0, NULL},
    {"scan", "[OPTIONS] [START [END]] [LIMIT]", 0, 3,
     "print KEY VALUE pairs in key order, END exclusive",
     "    START \"\" is the first key, END \"\" no end.  A trailing bare decimal\n"
     "    number is the LIMIT (scan 10, scan a 10, scan a z 10); quote it (\"10\")\n"
     "    to mean a key.  With three arguments the third is always the LIMIT.\n"
     "    Options may stand anywhere; a bare -- ends them, so that a key can\n"
     "    start with -- (or quote it).  Each bound is given once: --from or\n"
     "    START, --to or END, --limit or LIMIT.\n",
     cmd_scan, 0, 1, scan_opts},
    {"prefix", "P [LIMIT]", 1, 2, "print the pairs whose key starts with P", NULL, cmd_prefix,
     1u << 2, 1, NULL},
    {"count", "[OPTIONS] [START [END]]", 0, 2, "count the keys in [START, END)", NULL, cmd_count,
     0, 1, count_opts},
    {"batch", "", 0, 0, "start an atomic batch of put, del, delrange and delprefix",
     "    They are queued until commit applies them all at once, in order (one\n"
     "    flexdb_write, atomic also across a crash) or abort drops them.  get,\n"
     "    scan, prefix and count read the store, not the batch.  A batch still\n"
     "    open at the end is dropped, with an error.\n",
     cmd_batch, 0, 0, NULL},
    {"commit", "", 0, 0, "apply the open batch atomically", NULL, cmd_commit, 0, 0, NULL},
    {"abort", "", 0, 0, "drop the open batch", NULL, cmd_abort, 0, 0, NULL},
    {"sync", "", 0, 0, "make every change so far durable (flexdb_sync)", NULL, cmd_sync, 0, 0,
     NULL},
    {"compact", "[full]", 0, 1, "rewrite scattered intervals whole (flexdb_compact)",
     "    Commits the memtables, then rewrites in key order the intervals whose\n"
     "    pairs lie in more than one piece of the data file, as much as the\n"
     "    writes since the last tidying pay for (what the store does by itself\n"
     "    once writes pause), or with full every one.  Pairs do not change.\n",
     cmd_compact, 0, 0, NULL},
    {"stats", "", 0, 0, "print the store's counters, one \"name value\" a line", NULL, cmd_stats,
     0, 1, NULL},
    {"check", "", 0, 0, "run the deep consistency check; prints ok", NULL, cmd_check, 0, 1, NULL},
    {"backup", "DIR", 1, 1, "write a consistent copy of the store to DIR (flexdb_checkpoint)",
     "    DIR must be missing or an empty directory, outside the store.  The\n"
     "    copy is a store that flexdb-cli opens: every write made before the\n"
     "    command is in it, and it is durable when backup returns.\n",
     cmd_backup, 0, 1, NULL},
    {"dump", "[OPTIONS] [FILE]", 0, 1, "write the pairs in the dump format to FILE or stdout",
     "    Format: a line \"flexdb-dump 1\", then KEY<TAB>VALUE per pair in key\n"
     "    order, both escaped as CLI arguments, then \"end N\".  Lossless for any\n"
     "    bytes, also with --hex or --raw.  Not a point-in-time snapshot if\n"
     "    others write meanwhile.\n",
     cmd_dump, 0, 1, dump_opts},
    {"load", "FILE", 1, 1, "put every pair of a dump (checked whole before writing)",
     "    Keys already in the store and not in FILE are kept.  A malformed or\n"
     "    truncated file is rejected before anything is written.\n",
     cmd_load, 0, 0, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0, NULL},
};

static int db_open(struct cli_app *app, const char *dir)
{
	struct db_ctx *c = ctx_of(app);
	c->val = malloc(FLEXDB_MAX_VALUE);
	if (!c->val)
		return 1;
	if (app->only_reads)
		c->opt.no_create = 1;
	app->read_only = c->opt.read_only;
	int rc = flexdb_open(dir, &c->opt, &c->db);
	if (rc)
		free(c->val);
	return rc;
}

static const char *db_bad_option(struct cli_app *app)
{
	const char *field = NULL;
	flexdb_options_check(&ctx_of(app)->opt, &field);
	return field;
}

/* A batch still open at the end is dropped, and fails a script. */
static void db_finish(struct cli_app *app)
{
	struct db_ctx *c = ctx_of(app);
	if (!c->batch)
		return;
	app->cur = NULL;
	cli_error(app, "a batch of %" PRIu64 " operations was not committed; dropped",
		  c->batch_ops);
	flexdb_batch_free(c->batch);
	if (!app->interactive)
		app->failed = 1;
}

static int db_close(struct cli_app *app)
{
	struct db_ctx *c = ctx_of(app);
	int rc = flexdb_close(c->db);
	free(c->val);
	return rc;
}

int main(int argc, char **argv)
{
	struct db_ctx c = {0};
	const struct cli_flag flags[] = {
	    {"--sync-writes", &c.opt.sync_writes, 1,
	     "make every put/del/commit durable before it returns"},
	    {"--no-create", &c.opt.no_create, 1, "fail when DIR holds no store"},
	    {"--readonly", &c.opt.read_only, 1,
	     "open read-only (shared with other readers, never written; changes fail)"},
	    {"--hex", &c.out, OUT_HEX, "print keys and values as 0x hex"},
	    {"--raw", &c.out, OUT_RAW, "print keys and values as they are (get: no newline)"},
	    {NULL, NULL, 0, NULL},
	};
	const struct cli_numflag numflags[] = {
	    {"--cache-size", &c.opt.cache_size, "bytes of cache (default 64M; 1M .. 1T)"},
	    {"--memtable-size", &c.opt.memtable_size,
	     "bytes of a memtable (default 32M; 64K .. 4G)"},
	    {NULL, NULL, NULL},
	};
	const struct cli_driver driver = {
	    .flags = flags,
	    .numflags = numflags,
	    .about = "Opens (or creates) the FlexDB store in directory DIR.  On a terminal it\n"
		     "starts an interactive shell (prompt \"flexdb> \", line editing, history in\n"
		     "$HOME/.flexdb_history, tab completion of commands;\n"
		     "Ctrl-C drops the line being typed); with -c it runs\n",
	    .status = "Exit status: 0 when every command succeeded, 1 when one failed (also an\n"
		      "uncommitted batch at the end), 2 for bad options or a store that could not\n"
		      "be opened or closed.\n",
	    .details = "\nhelp CMD tells more about put, get, delrange, scan, count, batch, dump\n"
		       "and load (scan, count and dump take --from, --to and more); the details\n"
		       "are in docs/CLI.md.\n",
	    .open = db_open,
	    .bad_option = db_bad_option,
	    .finish = db_finish,
	    .close = db_close,
	};
	struct cli_app app = {
	    .prog = "flexdb-cli",
	    .prompt = "flexdb> ",
	    .history = ".flexdb_history",
	    .cmds = commands,
	    .ctx = &c,
	};
	return cli_main(&app, &driver, argc, argv);
}
