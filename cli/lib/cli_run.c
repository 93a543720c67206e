/*
 * cli_run.c - running commands (cli_common.h): the reporting and argument
 * helpers of the handlers, the built-in commands and help, option
 * splitting, and cli_run_line, which parses a line and runs its commands.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flex_common.h"

#include "cli_common.h"
#include "cli_int.h"

void cli_error(struct cli_app *app, const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	if (app->interactive)
		fprintf(stderr, "error: ");
	else if (app->lineno > 0)
		fprintf(stderr, "%s: error at line %ld: ", app->prog, app->lineno);
	else
		fprintf(stderr, "%s: error: ", app->prog);
	if (app->cur)
		fprintf(stderr, "%s: ", app->cur);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_status(struct cli_app *app, const char *what, int rc)
{
	if (what)
		cli_error(app, "%s: %s", what, flex_strerror(rc));
	else
		cli_error(app, "%s", flex_strerror(rc));
	return 1;
}

int cli_done(struct cli_app *app, int rc)
{
	return rc ? cli_status(app, NULL, rc) : 0;
}

int cli_check_done(struct cli_app *app, int rc)
{
	if (rc)
		return cli_status(app, NULL, rc);
	printf("ok\n");
	return 0;
}

int cli_number(struct cli_app *app, const struct cli_token *t, const char *what, uint64_t *v)
{
	char err[128];
	if (cli_parse_u64(t, v, err, sizeof(err))) {
		cli_error(app, "%s: %s", what, err);
		return 1;
	}
	return 0;
}

int cli_errno(void)
{
	return errno ? -errno : -EIO;
}

int cli_file_error(struct cli_app *app, const char *path, const char *fmt, ...)
{
	struct cli_buf b = {0};
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	cli_error(app, "%s: %s", cli_clip(&b, path, strlen(path)), text);
	cli_buf_free(&b);
	return 1;
}

int cli_file_status(struct cli_app *app, const char *path, int rc)
{
	return cli_file_error(app, path, "%s", flex_strerror(rc));
}

const char *cli_path(struct cli_app *app, const struct cli_token *t)
{
	if (strlen((const char *)t->data) != t->len) {
		struct cli_buf b = {0};
		cli_error(app, "%s: a file name cannot contain a NUL byte",
			  cli_clip(&b, t->data, t->len));
		cli_buf_free(&b);
		return NULL;
	}
	return (const char *)t->data;
}

/* Reads f to its end into b, at most one byte past limit, so that a
 * larger input is known without reading all of it.  Returns 0 or -errno. */
static int cli_read_all(FILE *f, struct cli_buf *b, size_t limit)
{
	size_t k;
	do {
		cli_buf_reserve(b, 65536);
		size_t want = b->cap - b->len - 1;
		if (want > limit + 1 - b->len)
			want = limit + 1 - b->len;
		k = fread(b->p + b->len, 1, want, f);
		b->len += k;
	} while (k && b->len <= limit);
	return ferror(f) ? -(errno ? errno : EIO) : 0;
}

int cli_bytes_arg(struct cli_app *app, const struct cli_token *t, const char *what, size_t limit,
		  struct cli_buf *b, const unsigned char **v, size_t *vl)
{
	*v = t->data;
	*vl = t->len;
	if (t->kind == CLI_BARE && !strcmp(t->text, "-")) {
		if (app->interactive || app->lineno > 0 || isatty(STDIN_FILENO)) {
			cli_error(app, "%s -: standard input %s (use -c and redirect the %s)", what,
				  app->lineno > 0 ? "holds the commands" : "is a terminal", what);
			return 1;
		}
		/* Standard input holds one value: a second "-" would read it
		 * at its end and get nothing. */
		static const char *stdin_by;
		if (stdin_by) {
			cli_error(app, "%s -: standard input was read by an earlier %s", what,
				  stdin_by);
			return 1;
		}
		stdin_by = app->cur;
		int rc = cli_read_all(stdin, b, limit);
		if (rc)
			return cli_status(app, "reading standard input", rc);
	} else if (t->kind != CLI_HEX && t->len && t->data[0] == '@') {
		if (t->len >= 2 && t->data[1] == '@') {
			(*v)++;
			(*vl)--;
			return 0;
		}
		const char *path = (const char *)t->data + 1;
		if (!path[0] || strlen(path) != t->len - 1) {
			cli_error(app, "%s @FILE: %s", what,
				  path[0] ? "a file name cannot contain a NUL byte"
					  : "no file name after @ (@@ is a literal @)");
			return 1;
		}
		FILE *f = fopen(path, "rb");
		if (!f)
			return cli_file_status(app, path, cli_errno());
		int rc = cli_read_all(f, b, limit);
		fclose(f);
		if (rc)
			return cli_file_status(app, path, rc);
	} else {
		return 0;
	}
	*v = b->p ? b->p : (const unsigned char *)"";
	*vl = b->len;
	return 0;
}

static double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress(const char *what, uint64_t n, const char *unit)
{
	static int tty = -1;
	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (!tty)
		return;
	if (what)
		fprintf(stderr, "\r%s: %" PRIu64 " %s...\033[K", what, n, unit);
	else
		fprintf(stderr, "\r\033[K");
	fflush(stderr);
}

static void cli_help_one(FILE *f, const struct cli_cmd *c)
{
	fprintf(f, "%s%s%s\n    %s\n", c->name, c->usage[0] ? " " : "", c->usage, c->brief);
	for (const struct cli_opt *o = c->opts; o && o->name; o++) {
		char head[32];
		snprintf(head, sizeof(head), "%s%s%s", o->name, o->arg ? " " : "",
			 o->arg ? o->arg : "");
		fprintf(f, "    %-14s %s\n", head, o->help);
	}
	if (c->help)
		fprintf(f, "%s", c->help);
}

/* The built-in commands common to both tools. */
const struct cli_cmd cli_builtins[] = {
    {"help", "[CMD]", 0, 1, "list the commands, or describe CMD", NULL, NULL, 0, 1, NULL},
    {".timer", "on|off", 1, 1, "print the elapsed time after each command", NULL, NULL, 0, 1, NULL},
    {"quit", "", 0, 0, "leave (also: exit, end of input)", NULL, NULL, 0, 1, NULL},
    {"exit", "", 0, 0, "leave", NULL, NULL, 0, 1, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0, NULL},
};

/* The tool's command or the built-in called name, or NULL. */
const struct cli_cmd *cli_find(const struct cli_app *app, const char *name)
{
	for (int pass = 0; pass < 2; pass++)
		for (const struct cli_cmd *c = pass ? cli_builtins : app->cmds; c->name; c++)
			if (!strcmp(c->name, name))
				return c;
	return NULL;
}

void cli_print_help(FILE *f, const struct cli_app *app)
{
	if (app->intro)
		fprintf(f, "%s", app->intro);
	fprintf(f, "Commands:\n");
	for (int pass = 0; pass < 2; pass++) {
		for (const struct cli_cmd *c = pass ? cli_builtins : app->cmds; c->name; c++) {
			char head[64];
			snprintf(head, sizeof(head), "%s%s%s", c->name, c->usage[0] ? " " : "",
				 c->usage);
			fprintf(f, "  %-28s %s\n", head, c->brief);
		}
	}
	fprintf(f,
		"Arguments: bare words; \"quoted strings\" with \\n \\t \\r \\0 \\\\ \\\" \\xHH;\n"
		"0x0a0b hex bytes.  ';' separates commands, '#' starts a comment.\n"
		"Output escapes bytes the same way, so it can be pasted back.\n");
}

static int cli_is_opt(const struct cli_token *t)
{
	return t->kind == CLI_BARE && t->text[0] == '-' && t->text[1] == '-';
}

/* Splits the arguments of cmd, a command of d, into its options (into
 * opt[], see cli_app) and the rest, which go with the name to pos[0 ..
 * *npos) when pos is non-NULL.  Checks the option names, that each value
 * is there, and the byte forms.  Returns 0, or -1 after an error. */
static int cli_split(struct cli_app *app, const struct cli_cmd *d, const struct cli_command *cmd,
		     const struct cli_token **opt, struct cli_token *pos, size_t *npos)
{
	const struct cli_token *a = cmd->tok;
	size_t np = 1, nopts = 0;
	int ended = !d->opts;
	while (d->opts && d->opts[nopts].name)
		nopts++;
	for (size_t i = 0; i < nopts; i++)
		opt[i] = NULL;
	if (pos)
		pos[0] = a[0];
	for (size_t i = 1; i < cmd->n; i++) {
		if (ended || !cli_is_opt(&a[i])) {
			if (a[i].bad && !(np < 32 && (d->nums >> np) & 1)) {
				struct cli_buf e = {0};
				cli_error(app, "argument %zu: %s: %s", i, a[i].bad,
					  cli_clip_text(&e, a[i].text));
				cli_buf_free(&e);
				return -1;
			}
			if (pos)
				pos[np] = a[i];
			np++;
			continue;
		}
		if (!a[i].text[2]) {
			ended = 1;
			continue;
		}
		size_t k = 0;
		while (k < nopts && strcmp(d->opts[k].name, a[i].text))
			k++;
		if (k == nopts) {
			struct cli_buf e = {0};
			cli_error(app, "unknown option %s (try: help %s)",
				  cli_clip_text(&e, a[i].text), d->name);
			cli_buf_free(&e);
			return -1;
		}
		const struct cli_opt *o = &d->opts[k];
		opt[k] = &a[i];
		if (!o->arg)
			continue;
		if (++i == cmd->n) {
			cli_error(app, "%s needs a value (%s %s)", o->name, o->name, o->arg);
			return -1;
		}
		if (a[i].bad && !o->num) {
			struct cli_buf e = {0};
			cli_error(app, "%s: %s: %s", o->name, a[i].bad,
				  cli_clip_text(&e, a[i].text));
			cli_buf_free(&e);
			return -1;
		}
		opt[k] = &a[i];
	}
	*npos = np;
	return 0;
}

/* Finds the command and checks its arguments (options, count, byte forms)
 * without running it.  Returns the definition, or NULL after printing an
 * error. */
static const struct cli_cmd *cli_resolve(struct cli_app *app, const struct cli_command *cmd)
{
	const struct cli_token *a = cmd->tok;
	const char *name = a[0].kind == CLI_BARE ? a[0].text : NULL;
	const struct cli_cmd *d = name ? cli_find(app, name) : NULL;
	const struct cli_token *opt[CLI_MAX_OPTS];
	size_t npos;
	app->cur = NULL;
	if (!d) {
		struct cli_buf e = {0};
		cli_error(app, "unknown command %s (try: help)", cli_clip(&e, a[0].data, a[0].len));
		cli_buf_free(&e);
		return NULL;
	}
	app->cur = d->name;
	if (cli_split(app, d, cmd, opt, NULL, &npos))
		return NULL;
	size_t nargs = npos - 1;
	if ((int)nargs < d->min || (d->max >= 0 && (int)nargs > d->max)) {
		cli_error(app, "wrong number of arguments; usage: %s%s%s", d->name,
			  d->usage[0] ? " " : "", d->usage);
		return NULL;
	}
	return d;
}

static int cli_run_command(struct cli_app *app, struct cli_command *cmd)
{
	struct cli_token *a = cmd->tok;
	size_t nargs = cmd->n - 1;
	const struct cli_cmd *c = cli_resolve(app, cmd);
	if (!c)
		return 1;
	if (app->read_only && c->fn && !c->reads) {
		cli_error(app, "opened read-only (--readonly): nothing can be changed");
		return 1;
	}
	const char *name = c->name;
	if (c->fn && c->opts) {
		/* the handler sees only the arguments that are not options */
		struct cli_token *pos = malloc(cmd->n * sizeof(*pos));
		size_t npos;
		if (!pos) {
			cli_error(app, "out of memory");
			return 1;
		}
		int rc = cli_split(app, c, cmd, app->opt, pos, &npos) ? 1 : c->fn(app, pos, npos);
		free(pos);
		return rc;
	}
	if (c->fn)
		return c->fn(app, a, cmd->n);
	if (!strcmp(name, "quit") || !strcmp(name, "exit")) {
		app->quit = 1;
		return 0;
	}
	if (!strcmp(name, ".timer")) {
		if (a[1].kind == CLI_BARE && !strcmp(a[1].text, "on"))
			app->timer = 1;
		else if (a[1].kind == CLI_BARE && !strcmp(a[1].text, "off"))
			app->timer = 0;
		else {
			cli_error(app, "expected on or off");
			return 1;
		}
		return 0;
	}
	/* help */
	if (nargs == 0) {
		cli_print_help(stdout, app);
		return 0;
	}
	const char *what = a[1].kind == CLI_QUOTED ? "" : a[1].text;
	const struct cli_cmd *h = cli_find(app, what);
	if (!h) {
		struct cli_buf e = {0};
		cli_error(app, "no such command: %s", cli_clip(&e, a[1].data, a[1].len));
		cli_buf_free(&e);
		return 1;
	}
	cli_help_one(stdout, h);
	return 0;
}

int cli_run_line(struct cli_app *app, const char *line, size_t n)
{
	struct cli_line l;
	char err[256];
	int bad = 0;
	app->cur = NULL;
	if (cli_parse_line(line, n, &l, err, sizeof(err))) {
		cli_error(app, "%s", err);
		app->failed = 1;
		return 1;
	}
	/* the whole line is checked before any of it runs */
	for (size_t i = 0; i < l.n; i++) {
		if (!cli_resolve(app, &l.cmd[i])) {
			app->failed = 1;
			if (app->bail)
				app->quit = 1;
			cli_line_free(&l);
			app->cur = NULL;
			return 1;
		}
	}
	for (size_t i = 0; i < l.n && !app->quit; i++) {
		double t0 = cli_now();
		int rc = cli_run_command(app, &l.cmd[i]);
		fflush(stdout);
		if (app->timer)
			printf("time: %.6f s\n", cli_now() - t0);
		app->cur = NULL;
		if (rc) {
			bad = 1;
			app->failed = 1;
			if (app->bail)
				app->quit = 1;
		}
	}
	cli_line_free(&l);
	fflush(stdout);
	return bad;
}
