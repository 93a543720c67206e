/*
 * fuzz_cli_parser.c - libFuzzer target: the command-line tools' argument
 * syntax (cli/lib/cli_common.h): cli_parse_line (tokenizer, quoted strings and
 * their escapes, 0x hex words, ';' and '#'), cli_decode_field,
 * cli_parse_u64, the command resolution of cli_run_line, and the output
 * escaper cli_escape.
 *
 * Properties checked, besides "no crash, no leak":
 *   - escaping any byte string and parsing the result gives one command of
 *     one token with exactly those bytes (the promise that output can be
 *     pasted back as input), and cli_decode_field agrees;
 *   - every token parsed from an arbitrary line survives escape + decode;
 *   - a bare decimal token parses as the number strtoull gives.
 * The input is used both as a line and as the bytes to escape.
 *
 * cli_run_line reports errors on stderr; with FLEX_FUZZ_CLI_QUIET=1 (set
 * by run.sh while fuzzing, not for replay) stdout and stderr are pointed
 * at /dev/null around that call only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MUST(cond)                                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_cli_parser: %s:%d: %s\n", __FILE__, __LINE__,        \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static int cmd_ok(struct cli_app *app, struct cli_token *args, size_t nargs)
{
	(void)app;
	(void)args;
	(void)nargs;
	return 0;
}

static const struct cli_cmd cmds[] = {
    {"put", "KEY VALUE", 2, 2, "set", NULL, cmd_ok, 0, 0, NULL},
    {"get", "KEY", 1, 1, "get", NULL, cmd_ok, 0, 1, NULL},
    {"scan", "[FROM] [LIMIT]", 0, 2, "scan", NULL, cmd_ok, 1u << 2, 1, NULL},
    {"read", "OFF LEN", 2, 2, "read", NULL, cmd_ok, (1u << 1) | (1u << 2), 1, NULL},
    {"many", "ARGS...", 0, -1, "any", NULL, cmd_ok, 0xffffffffu, 0, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0, NULL},
};

/* escape(s) parses back to s, as a line and as a field. */
static void round_trip(const uint8_t *s, size_t n)
{
	struct cli_buf b = {0};
	cli_escape(&b, s, n);
	MUST(b.p && b.len >= 1 && strlen((char *)b.p) == b.len);
	struct cli_line l;
	char err[256];
	int rc = cli_parse_line((const char *)b.p, b.len, &l, err, sizeof(err));
	if (rc != 0)
		fprintf(stderr, "escaped form does not parse: %s\n", err);
	MUST(rc == 0);
	MUST(l.n == 1 && l.cmd[0].n == 1);
	const struct cli_token *t = &l.cmd[0].tok[0];
	MUST(t->len == n && (n == 0 || memcmp(t->data, s, n) == 0) && !t->bad);
	cli_line_free(&l);
	struct cli_buf f = {0};
	MUST(cli_decode_field((const char *)b.p, b.len, &f, err, sizeof(err)) == 0);
	MUST(f.len == n && (n == 0 || memcmp(f.p, s, n) == 0));
	cli_buf_free(&f);
	cli_buf_free(&b);
}

static void run_line(const char *line, size_t n)
{
	static int quiet = -1, devnull = -1;
	if (quiet < 0) {
		const char *e = getenv("FLEX_FUZZ_CLI_QUIET");
		quiet = e && *e == '1';
		if (quiet)
			devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	}
	int so = -1, se = -1;
	if (quiet && devnull >= 0) {
		fflush(stdout);
		fflush(stderr);
		so = dup(1);
		se = dup(2);
		dup2(devnull, 1);
		dup2(devnull, 2);
	}
	struct cli_app app = {.prog = "fuzz", .prompt = "> ", .cmds = cmds};
	cli_run_line(&app, line, n);
	if (so >= 0) {
		fflush(stdout);
		fflush(stderr);
		dup2(so, 1);
		dup2(se, 2);
		close(so);
		close(se);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *line = (const char *)data;
	struct cli_line l;
	char err[256];
	if (cli_parse_line(line, size, &l, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < l.n; i++) {
			MUST(l.cmd[i].n >= 1);
			for (size_t j = 0; j < l.cmd[i].n; j++) {
				const struct cli_token *t = &l.cmd[i].tok[j];
				MUST(t->data && t->data[t->len] == '\0');
				MUST((t->kind == CLI_QUOTED) == (t->text == NULL));
				if (!t->bad)
					round_trip(t->data, t->len);
				if (t->kind == CLI_QUOTED)
					continue;
				uint64_t v;
				int rc = cli_parse_u64(t, &v, err, sizeof(err));
				if (cli_is_decimal(t)) {
					errno = 0;
					unsigned long long w = strtoull(t->text, NULL, 10);
					MUST(errno == ERANGE ? rc != 0 : rc == 0 && v == w);
				}
			}
		}
		cli_line_free(&l);
	} else {
		MUST(l.n == 0 && l.cmd == NULL);
		MUST(strlen(err) < sizeof(err));
	}
	round_trip(data, size);
	/* cli_decode_field on the raw input: must not crash. */
	struct cli_buf f = {0};
	(void)cli_decode_field(line, size, &f, err, sizeof(err));
	cli_buf_free(&f);
	if (size < 4096)
		run_line(line, size);
	return 0;
}
