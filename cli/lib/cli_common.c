/*
 * cli_common.c - the parser, escaping, number parsing and driver of the
 * command-line tools (cli_common.h).
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "flex_common.h"

#include "cli_common.h"

static void cli_buf_reserve(struct cli_buf *b, size_t more)
{
	if (b->len + more <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + more)
		cap *= 2;
	unsigned char *p = realloc(b->p, cap);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(3);
	}
	b->p = p;
	b->cap = cap;
}

void cli_buf_add(struct cli_buf *b, const void *data, size_t n)
{
	cli_buf_reserve(b, n + 1);
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0'; /* always NUL-terminated for text use */
}

void cli_buf_addc(struct cli_buf *b, unsigned char c)
{
	cli_buf_add(b, &c, 1);
}

void cli_buf_free(struct cli_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static int cli_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A byte string may be printed bare when reading the bare word back gives
 * the same bytes: non-empty, printable ASCII without blanks, quotes,
 * backslashes or ';', not starting with '#' and not looking like 0x hex. */
static int cli_bare_ok(const unsigned char *s, size_t n)
{
	if (n == 0 || s[0] == '#')
		return 0;
	if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\' || s[i] == ';')
			return 0;
	return 1;
}

void cli_escape(struct cli_buf *b, const void *data, size_t n)
{
	const unsigned char *s = data;
	if (cli_bare_ok(s, n)) {
		cli_buf_add(b, s, n);
		return;
	}
	static const char hex[] = "0123456789abcdef";
	cli_buf_reserve(b, n * 4 + 3);
	unsigned char *o = b->p + b->len;
	*o++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		switch (c) {
		case '\n':
			*o++ = '\\';
			*o++ = 'n';
			break;
		case '\t':
			*o++ = '\\';
			*o++ = 't';
			break;
		case '\r':
			*o++ = '\\';
			*o++ = 'r';
			break;
		case '\\':
			*o++ = '\\';
			*o++ = '\\';
			break;
		case '"':
			*o++ = '\\';
			*o++ = '"';
			break;
		default:
			if (c < 0x20 || c >= 0x7f) {
				*o++ = '\\';
				*o++ = 'x';
				*o++ = (unsigned char)hex[c >> 4];
				*o++ = (unsigned char)hex[c & 15];
			} else {
				*o++ = c;
			}
		}
	}
	*o++ = '"';
	*o = '\0';
	b->len = (size_t)(o - b->p);
}

void cli_hex(struct cli_buf *b, const void *data, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = data;
	if (!n) {
		cli_buf_add(b, "\"\"", 2);
		return;
	}
	cli_buf_reserve(b, 2 * n + 3);
	cli_buf_add(b, "0x", 2);
	for (size_t i = 0; i < n; i++) {
		b->p[b->len++] = (unsigned char)hex[s[i] >> 4];
		b->p[b->len++] = (unsigned char)hex[s[i] & 15];
	}
	b->p[b->len] = '\0';
}

const char *cli_clip(struct cli_buf *b, const void *data, size_t n)
{
	cli_escape(b, data, n < CLI_CLIP ? n : CLI_CLIP);
	if (n > CLI_CLIP)
		cli_buf_add(b, "...", 3);
	return (const char *)b->p;
}

/* As cli_clip, for source text shown as written (a bare word). */
static const char *cli_clip_text(struct cli_buf *b, const char *s)
{
	size_t n = strlen(s);
	cli_buf_add(b, s, n < CLI_CLIP ? n : CLI_CLIP);
	if (n > CLI_CLIP)
		cli_buf_add(b, "...", 3);
	return (const char *)b->p;
}

void cli_line_free(struct cli_line *l)
{
	for (size_t i = 0; i < l->n; i++) {
		for (size_t j = 0; j < l->cmd[i].n; j++) {
			free(l->cmd[i].tok[j].text);
			free(l->cmd[i].tok[j].data);
		}
		free(l->cmd[i].tok);
	}
	free(l->cmd);
	memset(l, 0, sizeof(*l));
}

static int cli_is_blank(int c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int cli_is_end(int c)
{
	return c == '\0' || cli_is_blank(c) || c == ';';
}

/* Parses one token at *pp (not at a blank, ';', '#' or end).  On success
 * fills t, advances *pp past it and returns 0; else writes err and
 * returns -1.  end is one past the last byte of the input. */
static int cli_parse_token(const char **pp, const char *end, struct cli_token *t, char *err,
			   size_t errsz)
{
	const char *p = *pp;
	struct cli_buf b = {0};
	memset(t, 0, sizeof(*t));
	if (*p == '"') {
		p++;
		for (;;) {
			if (p >= end) {
				snprintf(err, errsz, "unterminated quoted string");
				goto fail;
			}
			unsigned char c = (unsigned char)*p++;
			if (c == '"')
				break;
			if (c != '\\') {
				cli_buf_addc(&b, c);
				continue;
			}
			if (p >= end) {
				snprintf(err, errsz, "unterminated quoted string");
				goto fail;
			}
			c = (unsigned char)*p++;
			switch (c) {
			case 'n':
				cli_buf_addc(&b, '\n');
				break;
			case 't':
				cli_buf_addc(&b, '\t');
				break;
			case 'r':
				cli_buf_addc(&b, '\r');
				break;
			case '0':
				cli_buf_addc(&b, '\0');
				break;
			case '\\':
				cli_buf_addc(&b, '\\');
				break;
			case '"':
				cli_buf_addc(&b, '"');
				break;
			case 'x': {
				int h = p < end ? cli_hexval((unsigned char)p[0]) : -1;
				int l = p + 1 < end ? cli_hexval((unsigned char)p[1]) : -1;
				if (h < 0 || l < 0) {
					snprintf(err, errsz, "\\x needs exactly two hex digits");
					goto fail;
				}
				cli_buf_addc(&b, (unsigned char)(h * 16 + l));
				p += 2;
				break;
			}
			default:
				if (c >= 0x21 && c < 0x7f)
					snprintf(err, errsz, "unknown escape \\%c", c);
				else
					snprintf(err, errsz, "unknown escape \\\\x%02x", c);
				goto fail;
			}
		}
		if (p < end && !cli_is_end((unsigned char)*p)) {
			snprintf(err, errsz, "text right after a closing quote");
			goto fail;
		}
		t->kind = CLI_QUOTED;
	} else {
		const char *s = p;
		while (p < end && !cli_is_end((unsigned char)*p)) {
			if (*p == '"') {
				snprintf(err, errsz,
					 "quote inside a bare word (quote the whole word)");
				goto fail;
			}
			if (*p == '\\') {
				snprintf(err, errsz,
					 "backslash outside quotes (escapes work in \"...\")");
				goto fail;
			}
			p++;
		}
		size_t n = (size_t)(p - s);
		t->text = malloc(n + 1);
		if (!t->text) {
			snprintf(err, errsz, "out of memory");
			goto fail;
		}
		memcpy(t->text, s, n);
		t->text[n] = '\0';
		if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
			if (n == 2) {
				snprintf(err, errsz, "0x needs hex digits");
				goto fail;
			}
			for (size_t i = 2; i < n; i++) {
				if (cli_hexval((unsigned char)s[i]) < 0) {
					struct cli_buf c = {0};
					snprintf(err, errsz, "bad hex digit in %s",
						 cli_clip_text(&c, t->text));
					cli_buf_free(&c);
					goto fail;
				}
			}
			if ((n - 2) % 2)
				t->bad = "odd number of hex digits";
			for (size_t i = 2; i + 1 < n; i += 2)
				cli_buf_addc(&b,
					     (unsigned char)(cli_hexval((unsigned char)s[i]) * 16 +
							     cli_hexval((unsigned char)s[i + 1])));
			t->kind = CLI_HEX;
		} else {
			cli_buf_add(&b, s, n);
			t->kind = CLI_BARE;
		}
	}
	if (!b.p)
		cli_buf_add(&b, "", 0);
	t->data = b.p;
	t->len = b.len;
	*pp = p;
	return 0;
fail:
	free(t->text);
	t->text = NULL;
	cli_buf_free(&b);
	return -1;
}

static struct cli_command *cli_line_newcmd(struct cli_line *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		struct cli_command *c = realloc(l->cmd, cap * sizeof(*c));
		if (!c)
			return NULL;
		l->cmd = c;
		l->cap = cap;
	}
	memset(&l->cmd[l->n], 0, sizeof(l->cmd[0]));
	return &l->cmd[l->n++];
}

int cli_parse_line(const char *line, size_t n, struct cli_line *l, char *err, size_t errsz)
{
	const char *p = line, *end = line + n;
	struct cli_command *cur = NULL;
	memset(l, 0, sizeof(*l));
	if (memchr(line, '\0', n)) {
		snprintf(err, errsz, "NUL byte in the input line (write it as \"\\0\" or \\x00)");
		return -1;
	}
	while (p < end) {
		unsigned char c = (unsigned char)*p;
		if (cli_is_blank(c)) {
			p++;
			continue;
		}
		if (c == ';') {
			cur = NULL;
			p++;
			continue;
		}
		if (c == '#')
			break;
		if (!cur && !(cur = cli_line_newcmd(l)))
			goto oom;
		if (cur->n == cur->cap) {
			size_t cap = cur->cap ? cur->cap * 2 : 4;
			struct cli_token *t = realloc(cur->tok, cap * sizeof(*t));
			if (!t)
				goto oom;
			cur->tok = t;
			cur->cap = cap;
		}
		if (cli_parse_token(&p, end, &cur->tok[cur->n], err, errsz)) {
			cli_line_free(l);
			return -1;
		}
		cur->n++;
	}
	return 0;
oom:
	snprintf(err, errsz, "out of memory");
	cli_line_free(l);
	return -1;
}

int cli_decode_field(const char *s, size_t n, struct cli_buf *out, char *err, size_t errsz)
{
	struct cli_token t;
	const char *p = s;
	if (n == 0) {
		snprintf(err, errsz, "empty field");
		return -1;
	}
	if (cli_is_blank((unsigned char)s[0]) || s[0] == ';' || s[0] == '#' || memchr(s, '\0', n)) {
		snprintf(err, errsz, "malformed field");
		return -1;
	}
	if (cli_parse_token(&p, s + n, &t, err, errsz))
		return -1;
	if (p != s + n || t.bad) {
		snprintf(err, errsz, "%s",
			 t.bad ? t.bad : "malformed field (blank or ';' outside quotes)");
		free(t.text);
		free(t.data);
		return -1;
	}
	out->len = 0;
	cli_buf_add(out, t.data, t.len);
	free(t.text);
	free(t.data);
	return 0;
}

int cli_is_decimal(const struct cli_token *t)
{
	if (t->kind != CLI_BARE || !t->text[0])
		return 0;
	for (const char *p = t->text; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

/* Reports a token that is not a usable number, quoting a short prefix. */
static int cli_bad_number(const struct cli_token *t, const char *what, char *err, size_t errsz)
{
	struct cli_buf c = {0};
	snprintf(err, errsz, "%s: %s", what, cli_clip_text(&c, t->text));
	cli_buf_free(&c);
	return -1;
}

int cli_parse_u64(const struct cli_token *t, uint64_t *out, char *err, size_t errsz)
{
	if (t->kind == CLI_QUOTED || !t->text[0]) {
		snprintf(err, errsz, "expected a number");
		return -1;
	}
	const char *s = t->text;
	int base = 10;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	uint64_t v = 0;
	const char *p = s;
	for (; *p; p++) {
		int d = base == 16 ? cli_hexval((unsigned char)*p)
				   : (*p >= '0' && *p <= '9' ? *p - '0' : -1);
		if (d < 0)
			break;
		if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			goto range;
		v = v * (uint64_t)base + (uint64_t)d;
	}
	if (p == s)
		goto bad;
	if (*p) {
		unsigned shift;
		switch (*p) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		case 't':
		case 'T':
			shift = 40;
			break;
		default:
			goto bad;
		}
		if (p[1] || base == 16)
			goto bad;
		if (v > (UINT64_MAX >> shift))
			goto range;
		v <<= shift;
	}
	*out = v;
	return 0;
bad:
	return cli_bad_number(t, "not a number", err, errsz);
range:
	return cli_bad_number(t, "number out of range", err, errsz);
}

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
static const struct cli_cmd cli_builtins[] = {
    {"help", "[CMD]", 0, 1, "list the commands, or describe CMD", NULL, NULL, 0, 1, NULL},
    {".timer", "on|off", 1, 1, "print the elapsed time after each command", NULL, NULL, 0, 1, NULL},
    {"quit", "", 0, 0, "leave (also: exit, end of input)", NULL, NULL, 0, 1, NULL},
    {"exit", "", 0, 0, "leave", NULL, NULL, 0, 1, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0, NULL},
};

/* The tool's command or the built-in called name, or NULL. */
static const struct cli_cmd *cli_find(const struct cli_app *app, const char *name)
{
	for (int pass = 0; pass < 2; pass++)
		for (const struct cli_cmd *c = pass ? cli_builtins : app->cmds; c->name; c++)
			if (!strcmp(c->name, name))
				return c;
	return NULL;
}

static void cli_print_help(FILE *f, const struct cli_app *app)
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

static const struct cli_app *cli_rl_app;

static char *cli_rl_gen(const char *text, int state)
{
	static size_t idx, len;
	static int builtins;
	if (!state) {
		idx = 0;
		builtins = 0;
		len = strlen(text);
	}
	for (;;) {
		const struct cli_cmd *c = builtins ? &cli_builtins[idx] : &cli_rl_app->cmds[idx];
		if (!c->name) {
			if (builtins)
				return NULL;
			builtins = 1;
			idx = 0;
			continue;
		}
		idx++;
		if (!strncmp(c->name, text, len))
			return strdup(c->name);
	}
}

static char **cli_rl_complete(const char *text, int start, int end)
{
	(void)end;
	/* the first word of a command: complete command names */
	int i = start - 1;
	while (i >= 0 && cli_is_blank((unsigned char)rl_line_buffer[i]))
		i--;
	if (i < 0 || rl_line_buffer[i] == ';')
		return rl_completion_matches(text, cli_rl_gen);
	/* arguments of file commands: file names (readline's default) */
	int s = i;
	while (s > 0 && !cli_is_blank((unsigned char)rl_line_buffer[s - 1]) &&
	       rl_line_buffer[s - 1] != ';')
		s--;
	static const char *const filecmds[] = {"load", "dump", "import", "export", NULL};
	for (const char *const *f = filecmds; *f; f++)
		if ((size_t)(i + 1 - s) == strlen(*f) &&
		    !strncmp(rl_line_buffer + s, *f, strlen(*f)))
			return NULL;
	rl_attempted_completion_over = 1;
	return NULL;
}

static char *cli_history_path(const struct cli_app *app)
{
	const char *home = getenv("HOME");
	if (!home || !home[0] || !app->history)
		return NULL;
	size_t n = strlen(home) + strlen(app->history) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", home, app->history);
	return p;
}

/* Ctrl-C at the prompt drops the line being typed.  SIGINT stays blocked
 * while readline runs except inside the ppoll that waits for a key, so
 * the signal cannot slip in between the check of the flag and the wait. */
static volatile sig_atomic_t cli_sigint;

static sigset_t cli_rl_waitmask; /* the mask outside readline */

static void cli_on_sigint(int sig)
{
	(void)sig;
	cli_sigint = 1;
}

static int cli_rl_getc(FILE *f)
{
	struct pollfd p = {fileno(f), POLLIN, 0};
	for (;;) {
		if (cli_sigint) {
			cli_sigint = 0;
			rl_free_line_state();
			rl_replace_line("", 0);
			rl_crlf();
			rl_on_new_line();
			rl_redisplay();
		}
		if (ppoll(&p, 1, NULL, &cli_rl_waitmask) < 0 && errno == EINTR)
			continue;
		/* not rl_getc: its pselect would unblock SIGINT again */
		unsigned char c;
		ssize_t k = read(p.fd, &c, 1);
		if (k == 1)
			return c;
		if (k < 0 && errno == EINTR)
			continue;
		return EOF;
	}
}

/* The interactive loop on a terminal. */
static void cli_repl(struct cli_app *app)
{
	char *hist = cli_history_path(app);
	cli_rl_app = app;
	rl_readline_name = app->prog;
	rl_attempted_completion_function = cli_rl_complete;
	rl_catch_signals = 0;
	rl_getc_function = cli_rl_getc;
	struct sigaction prompt_int = {.sa_handler = cli_on_sigint}, cmd_int;
	sigemptyset(&prompt_int.sa_mask);
	sigset_t intset;
	sigemptyset(&intset);
	sigaddset(&intset, SIGINT);
	using_history();
	if (hist)
		read_history(hist); /* a missing file is fine */
	printf("%s %s (FlexDB %s). Type \"help\" for the commands.\n", app->prog,
	       FLEX_VERSION_STRING, flex_version(NULL, NULL, NULL));
	fflush(stdout);
	while (!app->quit) {
		/* only at the prompt: during a command Ctrl-C stops the tool */
		cli_sigint = 0;
		sigprocmask(SIG_BLOCK, &intset, &cli_rl_waitmask);
		sigaction(SIGINT, &prompt_int, &cmd_int);
		char *line = readline(app->prompt);
		sigaction(SIGINT, &cmd_int, NULL);
		sigprocmask(SIG_SETMASK, &cli_rl_waitmask, NULL);
		if (!line) {
			putchar('\n');
			break;
		}
		const char *p = line;
		while (cli_is_blank((unsigned char)*p))
			p++;
		if (*p) {
			HIST_ENTRY *last = history_length > 0
					       ? history_get(history_base + history_length - 1)
					       : NULL;
			if (!last || strcmp(last->line, line)) {
				add_history(line);
				/* saved now, in case a Ctrl-C stops the command */
				if (hist && append_history(1, hist))
					write_history(hist);
			}
		}
		cli_run_line(app, line, strlen(line));
		free(line);
	}
	if (hist) {
		stifle_history(1000);
		write_history(hist); /* failures are ignored */
		free(hist);
	}
}

/* Script mode: commands from a non-terminal stream, without prompts. */
static void cli_script(struct cli_app *app, FILE *in)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	app->lineno = 0;
	while (!app->quit && (n = getline(&line, &cap, in)) >= 0) {
		app->lineno++;
		cli_run_line(app, line, (size_t)n);
	}
	free(line);
	app->lineno = 0;
}

/* The --help text (to stderr after a usage error). */
static void cli_usage(FILE *f, const struct cli_app *app, const struct cli_driver *d)
{
	fprintf(f, "usage: %s [OPTIONS] DIR [-c COMMANDS]...\n%s", app->prog, d->about);
	fprintf(f, "COMMANDS (';'-separated; -c may be repeated) and exits; otherwise it runs\n"
		   "the commands read from standard input without prompts.\n"
		   "\n"
		   "Options:\n"
		   "  -c COMMANDS     run COMMANDS instead of reading standard input\n"
		   "  --bail          stop at the first failing command\n");
	for (const struct cli_flag *f1 = d->flags; f1->name; f1++)
		fprintf(f, "  %-15s %s\n", f1->name, f1->help);
	for (const struct cli_numflag *n1 = d->numflags; n1 && n1->name; n1++) {
		char head[64];
		snprintf(head, sizeof(head), "%s N", n1->name);
		if (strlen(head) > 15)
			fprintf(f, "  %s\n  %-15s %s\n", head, "", n1->help);
		else
			fprintf(f, "  %-15s %s\n", head, n1->help);
	}
	fprintf(f,
		"  --version       print the version\n"
		"  --help          this text\n"
		"\n"
		"%s"
		"\n",
		d->status);
	cli_print_help(f, app);
	fprintf(f, "%s", d->details);
}

/* After FLEX_ENOTSTORE: what the directory holds (the first few entries,
 * directories marked with a '/'), so the user sees which files made the
 * tool refuse it. */
static void cli_list_dir(const struct cli_app *app, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == 0) {
			fprintf(stderr, "%s: %s holds: ", app->prog, dir);
		} else if (n == 8) {
			fprintf(stderr, ", ...");
			break;
		} else {
			fprintf(stderr, ", ");
		}
		fprintf(stderr, "%s%s", e->d_name, e->d_type == DT_DIR ? "/" : "");
		n++;
	}
	closedir(d);
	if (n)
		fprintf(stderr, "\n");
}

/* 1 when no command on the -c lines changes the store: each is one that
 * only reads, or is unknown, or sits on a line that does not parse (such
 * lines run nothing).  The store is then opened without creating it, so
 * a mistyped directory is reported instead of becoming a new store. */
static int cli_only_reads(const struct cli_app *app, char **lines, int n)
{
	for (int i = 0; i < n; i++) {
		struct cli_line l;
		char err[256];
		if (cli_parse_line(lines[i], strlen(lines[i]), &l, err, sizeof(err)))
			continue;
		int writes = 0;
		for (size_t j = 0; j < l.n && !writes; j++) {
			const struct cli_token *a = l.cmd[j].tok;
			const struct cli_cmd *d =
			    a[0].kind == CLI_BARE ? cli_find(app, a[0].text) : NULL;
			writes = d && !d->reads;
		}
		cli_line_free(&l);
		if (writes)
			return 0;
	}
	return 1;
}

int cli_main(struct cli_app *app, const struct cli_driver *d, int argc, char **argv)
{
	const char *dir = NULL;
	/* the -c arguments, collected in place: argv[0 .. ncmds) once parsed */
	char **cmds = argv;
	int ncmds = 0;
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		const struct cli_flag *f = d->flags;
		while (f->name && strcmp(f->name, s))
			f++;
		const struct cli_numflag *nf = d->numflags;
		while (nf && nf->name && strcmp(nf->name, s))
			nf++;
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			cli_usage(stdout, app, d);
			return 0;
		} else if (!strcmp(s, "--version")) {
			printf("%s %s (library %s)\n", app->prog, FLEX_VERSION_STRING,
			       flex_version(NULL, NULL, NULL));
			return 0;
		} else if (!strcmp(s, "-c")) {
			if (++i == argc) {
				fprintf(stderr, "%s: -c needs an argument\n", app->prog);
				return 2;
			}
			cmds[ncmds++] = argv[i];
		} else if (!strcmp(s, "--bail")) {
			app->bail = 1;
		} else if (nf && nf->name) {
			if (++i == argc) {
				fprintf(stderr, "%s: %s needs a value (%s N)\n", app->prog, s, s);
				return 2;
			}
			struct cli_token t = {.kind = CLI_BARE,
					      .text = argv[i],
					      .data = (unsigned char *)argv[i],
					      .len = strlen(argv[i])};
			char err[128];
			if (cli_parse_u64(&t, nf->num, err, sizeof(err))) {
				fprintf(stderr, "%s: %s: %s\n", app->prog, s, err);
				return 2;
			}
		} else if (f->name) {
			*f->var = f->value;
		} else if (s[0] == '-' && s[1]) {
			fprintf(stderr, "%s: unknown option %s (try --help)\n", app->prog, s);
			return 2;
		} else if (!dir) {
			dir = s;
		} else {
			fprintf(stderr, "%s: more than one directory (try --help)\n", app->prog);
			return 2;
		}
	}
	if (!dir) {
		cli_usage(stderr, app, d);
		return 2;
	}
	app->only_reads = ncmds > 0 && cli_only_reads(app, cmds, ncmds);
	int rc = d->open(app, dir);
	if (rc) {
		if (rc == -ENOENT)
			fprintf(stderr, "%s: cannot open %s: no store there (%s)%s\n", app->prog,
				dir, flex_strerror(rc),
				app->read_only	  ? "; --readonly creates none"
				: app->only_reads ? "; the commands only read, so none was created"
						  : "");
		else if (rc == FLEX_EOPTION && d->bad_option && d->bad_option(app))
			fprintf(stderr, "%s: cannot open %s: %s: %s\n", app->prog, dir,
				d->bad_option(app), flex_strerror(rc));
		else if (rc == -EACCES && !app->read_only)
			fprintf(stderr,
				"%s: cannot open %s: %s (--readonly needs only read access)\n",
				app->prog, dir, flex_strerror(rc));
		else if (rc < 0)
			fprintf(stderr, "%s: cannot open %s: %s\n", app->prog, dir,
				flex_strerror(rc));
		if (rc == FLEX_ENOTSTORE)
			cli_list_dir(app, dir);
		return 2;
	}
	if (ncmds) {
		for (int i = 0; i < ncmds && !app->quit; i++)
			cli_run_line(app, cmds[i], strlen(cmds[i]));
	} else if (isatty(STDIN_FILENO)) {
		app->interactive = 1;
		cli_repl(app);
	} else {
		cli_script(app, stdin);
	}
	if (d->finish)
		d->finish(app);
	fflush(stdout);
	rc = d->close(app);
	if (rc) {
		fprintf(stderr, "%s: closing %s: %s\n", app->prog, dir, flex_strerror(rc));
		return 2;
	}
	if (app->interactive)
		return 0;
	return app->failed ? 1 : 0;
}
