/*
 * cli_parse.c - the tools' argument syntax (cli_common.h): the growable
 * byte buffer, output escaping, the line parser and number parsing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "cli_int.h"

void cli_buf_reserve(struct cli_buf *b, size_t more)
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

void cli_escape_data(struct cli_buf *b, const void *data, size_t n)
{
	if (!n || ((const unsigned char *)data)[0] != '@') {
		cli_escape(b, data, n);
		return;
	}
	struct cli_buf t = {0};
	cli_buf_addc(&t, '@');
	cli_buf_add(&t, data, n);
	cli_escape(b, t.p, t.len);
	cli_buf_free(&t);
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
const char *cli_clip_text(struct cli_buf *b, const char *s)
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

int cli_is_blank(int c)
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
