/*
 * test_cli.c - flexdb-cli and flexspace-cli driven as programs: golden
 * output for every command and every argument form, the dump -> load
 * round trip, malformed input (seeded fuzz) that must leave the store
 * unchanged and never crash, exit statuses, and one interactive session
 * on a pseudo-terminal (prompt, history recall, tab completion).
 *
 * The tools are found in $FLEX_BIN_DIR (`make test` sets it); without it
 * every test is skipped.  The fuzz tests print their seed; FLEX_TEST_SEED
 * replays one.  Each test works in its own mkdtemp directory in /tmp.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "flex_common.h"
#include "flexdb.h"

/* ---- fixture: a temp dir per test, the tools' paths --------------------- */

static char tmp[64];
static char dbcli[4096], fscli[4096];

static void setup(void)
{
	const char *bin = getenv("FLEX_BIN_DIR");
	if (!bin || !bin[0])
		return;
	snprintf(dbcli, sizeof(dbcli), "%s/flexdb-cli", bin);
	snprintf(fscli, sizeof(fscli), "%s/flexspace-cli", bin);
	snprintf(tmp, sizeof(tmp), "/tmp/test_cli.XXXXXX");
	if (!mkdtemp(tmp))
		tmp[0] = '\0';
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

static void teardown(void)
{
	if (tmp[0])
		nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 60);

static void need_tools(void)
{
	if (!dbcli[0])
		cr_skip_test("FLEX_BIN_DIR is not set: run through `make test` or set it to "
			     "the directory holding flexdb-cli and flexspace-cli");
	cr_assert(tmp[0], "mkdtemp failed");
	cr_assert(access(dbcli, X_OK) == 0, "%s is not there: build the tools first", dbcli);
	cr_assert(access(fscli, X_OK) == 0, "%s is not there: build the tools first", fscli);
}

static const char *path(const char *name)
{
	static char buf[64][256]; /* a ring: enough for any one test */
	static int i;
	i = (i + 1) % 64;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmp, name);
	return buf[i];
}

/* ---- running a tool ----------------------------------------------------- */

struct run {
	char *out, *err;
	size_t outlen, errlen;
	int status; /* as from waitpid */
};

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

static size_t cap_for(size_t n)
{
	size_t c = 64;
	while (c < n)
		c *= 2;
	return c;
}

/* Appends k bytes to the NUL-terminated buffer *b of *n bytes; its
 * allocation is always cap_for(*n + 1), so growth is geometric. */
static void append(char **b, size_t *n, const char *d, size_t k)
{
	if (!*b || cap_for(*n + 1) < *n + k + 1) {
		*b = realloc(*b, cap_for(*n + k + 1));
		cr_assert(*b);
	}
	memcpy(*b + *n, d, k);
	*n += k;
	(*b)[*n] = '\0';
}

/* Runs argv (NULL-terminated) with stdin = in[0..inlen), capturing stdout
 * and stderr. */
static void run_argv(char *const argv[], const void *in, size_t inlen, struct run *r)
{
	int pin[2], pout[2], perr[2];
	memset(r, 0, sizeof(*r));
	append(&r->out, &r->outlen, "", 0);
	append(&r->err, &r->errlen, "", 0);
	cr_assert(!pipe(pin) && !pipe(pout) && !pipe(perr));
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		dup2(perr[1], 2);
		close(pin[0]);
		close(pin[1]);
		close(pout[0]);
		close(pout[1]);
		close(perr[0]);
		close(perr[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	signal(SIGPIPE, SIG_IGN);
	fcntl(pin[1], F_SETFL, O_NONBLOCK);
	size_t sent = 0;
	int win = pin[1], rout = pout[0], rerr = perr[0];
	if (inlen == 0) {
		close(win);
		win = -1;
	}
	while (rout >= 0 || rerr >= 0) {
		struct pollfd p[3] = {{rout, POLLIN, 0}, {rerr, POLLIN, 0}, {win, POLLOUT, 0}};
		if (poll(p, 3, 30000) <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			cr_assert_fail("the tool hung (30 s without output)");
		}
		char buf[65536];
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			ssize_t k = read(p[i].fd, buf, sizeof(buf));
			if (k <= 0) {
				close(p[i].fd);
				*(i ? &rerr : &rout) = -1;
			} else if (i == 0) {
				append(&r->out, &r->outlen, buf, (size_t)k);
			} else {
				append(&r->err, &r->errlen, buf, (size_t)k);
			}
		}
		if (win >= 0 && p[2].revents) {
			ssize_t k = write(win, (const char *)in + sent, inlen - sent);
			if (k > 0)
				sent += (size_t)k;
			if (k < 0 && errno != EAGAIN) /* EPIPE: the tool stopped reading */
				sent = inlen;
			if (sent == inlen) {
				close(win);
				win = -1;
			}
		}
	}
	if (win >= 0)
		close(win);
	cr_assert(waitpid(pid, &r->status, 0) == pid);
	cr_assert(!WIFSIGNALED(r->status), "%s killed by signal %d; stderr:\n%s", argv[0],
		  WTERMSIG(r->status), r->err);
}

static int code(const struct run *r)
{
	return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
}

/* tool DIR with a script on stdin */
static void script(const char *tool, const char *dir, const char *in, struct run *r)
{
	char *argv[] = {(char *)tool, (char *)dir, NULL};
	run_argv(argv, in, strlen(in), r);
}

/* tool DIR -c CMDS */
static void cmdline(const char *tool, const char *dir, const char *cmds, struct run *r)
{
	char *argv[] = {(char *)tool, (char *)dir, "-c", (char *)cmds, NULL};
	run_argv(argv, "", 0, r);
}

/* Runs a script that must succeed silently on stderr and print `want`. */
static void golden(const char *tool, const char *dir, const char *in, const char *want)
{
	struct run r;
	script(tool, dir, in, &r);
	cr_expect_str_eq(r.out, want, "script:\n%s", in);
	cr_expect_str_eq(r.err, "", "script:\n%s", in);
	cr_expect_eq(code(&r), 0, "exit status %d; stderr:\n%s", code(&r), r.err);
	run_free(&r);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static char *dump_of(const char *dir)
{
	struct run r;
	cmdline(dbcli, dir, "dump", &r);
	cr_assert_eq(code(&r), 0, "dump failed: %s", r.err);
	char *s = r.out;
	r.out = NULL;
	run_free(&r);
	return s;
}

static char *read_file(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	cr_assert(f, "cannot open %s", p);
	char *b = NULL;
	size_t len = 0;
	char buf[65536];
	size_t k;
	append(&b, &len, "", 0);
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
		append(&b, &len, buf, k);
	fclose(f);
	if (n)
		*n = len;
	return b;
}

static void write_file(const char *p, const void *d, size_t n)
{
	FILE *f = fopen(p, "wb");
	cr_assert(f);
	cr_assert_eq(fwrite(d, 1, n, f), n);
	cr_assert(!fclose(f));
}

static uint64_t seed_of(const char *what)
{
	const char *s = getenv("FLEX_TEST_SEED");
	uint64_t seed =
	    s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
	fprintf(stderr, "test_cli %s: seed %" PRIu64 " (FLEX_TEST_SEED=%" PRIu64 " replays)\n",
		what, seed, seed);
	return seed;
}

static uint64_t rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The documented output escaping, written independently of the tool:
 * bare when non-empty printable ASCII without blank, '"', '\\', ';', not
 * starting with '#' or 0x/0X; else quoted with \n \t \r \\ \" \xHH. */
static void esc(char **b, size_t *n, const unsigned char *s, size_t len)
{
	int bare =
	    len > 0 && s[0] != '#' && !(len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'));
	for (size_t i = 0; bare && i < len; i++)
		if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\' || s[i] == ';')
			bare = 0;
	if (bare) {
		append(b, n, (const char *)s, len);
		return;
	}
	append(b, n, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		char t[8];
		switch (s[i]) {
		case '\n':
			append(b, n, "\\n", 2);
			break;
		case '\t':
			append(b, n, "\\t", 2);
			break;
		case '\r':
			append(b, n, "\\r", 2);
			break;
		case '\\':
			append(b, n, "\\\\", 2);
			break;
		case '"':
			append(b, n, "\\\"", 2);
			break;
		default:
			if (s[i] < 0x20 || s[i] >= 0x7f) {
				snprintf(t, sizeof(t), "\\x%02x", s[i]);
				append(b, n, t, 4);
			} else {
				append(b, n, (const char *)&s[i], 1);
			}
		}
	}
	append(b, n, "\"", 1);
}

/* esc for a value as get and scan print it: a leading @ doubled. */
static void esc_value(char **b, size_t *n, const unsigned char *s, size_t len)
{
	if (!len || s[0] != '@') {
		esc(b, n, s, len);
		return;
	}
	unsigned char *t = malloc(len + 1);
	cr_assert(t);
	t[0] = '@';
	memcpy(t + 1, s, len);
	esc(b, n, t, len + 1);
	free(t);
}

/* Input as 0x hex (a different form from the output), "" when empty. */
static void hexarg(char **b, size_t *n, const unsigned char *s, size_t len)
{
	if (!len) {
		append(b, n, "\"\"", 2);
		return;
	}
	append(b, n, "0x", 2);
	for (size_t i = 0; i < len; i++) {
		char t[3];
		snprintf(t, sizeof(t), "%02X", s[i]);
		append(b, n, t, 2);
	}
}

/* ======================================================================
 * flexdb-cli: commands and golden output
 * ====================================================================== */

Test(cli, db_put_get_del)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db,
	       "put apple red\n"
	       "put banana yellow\n"
	       "get apple\n"
	       "get cherry\n"
	       "put apple green\n"
	       "get apple\n"
	       "del apple\n"
	       "get apple\n"
	       "del never-there\n"
	       "get banana\n",
	       "red\n(not found)\ngreen\n(not found)\nyellow\n");
	/* persisted across runs */
	golden(dbcli, db, "get banana\nget apple\n", "yellow\n(not found)\n");
}

Test(cli, db_every_escape_form)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db,
	       "put k01 \"a\\nb\"\n"
	       "put k02 \"t\\tt\"\n"
	       "put k03 \"back\\\\slash\"\n"
	       "put k04 \"q\\\"q\"\n"
	       "put k05 \"\\x41\\x00\\xfF\"\n"
	       "put k06 0x00ff01\n"
	       "put k07 \"\\r\\0\"\n"
	       "put k08 plain-word_1.2\n"
	       "put k09 \"\"\n"
	       "put k10 \"has space\"\n"
	       "put k11 \"0x41\"\n"
	       "put k12 \"#hash\"\n"
	       "put k13 \"semi;colon\"\n"
	       "put k14 0X4a4B\n"
	       "put k15 \"\\x7f\"\n"
	       "put k16 \"\xc3\xa9\"\n"
	       "put k17 \"\\x411\"\n"
	       "put k18 it's#not'a#comment\n"
	       "put \"k19\" \"quoted key\"\n",
	       "");
	golden(dbcli, db, "scan\n",
	       "k01 \"a\\nb\"\n"
	       "k02 \"t\\tt\"\n"
	       "k03 \"back\\\\slash\"\n"
	       "k04 \"q\\\"q\"\n"
	       "k05 \"A\\x00\\xff\"\n"
	       "k06 \"\\x00\\xff\\x01\"\n"
	       "k07 \"\\r\\x00\"\n"
	       "k08 plain-word_1.2\n"
	       "k09 \"\"\n"
	       "k10 \"has space\"\n"
	       "k11 \"0x41\"\n"
	       "k12 \"#hash\"\n"
	       "k13 \"semi;colon\"\n"
	       "k14 JK\n"
	       "k15 \"\\x7f\"\n"
	       "k16 \"\\xc3\\xa9\"\n"
	       "k17 A1\n"
	       "k18 it's#not'a#comment\n"
	       "k19 \"quoted key\"\n");
	/* output pasted back as input gives the same store */
	struct run r;
	script(dbcli, db, "scan\n", &r);
	char *in = NULL;
	size_t n = 0;
	for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
		append(&in, &n, "put ", 4);
		append(&in, &n, line, strlen(line));
		append(&in, &n, "\n", 1);
	}
	golden(dbcli, path("db2"), in, "");
	char *a = dump_of(db), *b = dump_of(path("db2"));
	cr_expect_str_eq(a, b);
	free(a);
	free(b);
	free(in);
	run_free(&r);
}

Test(cli, db_binary_keys_nul_and_ff)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db,
	       "put 0xff v-ff\n"
	       "put 0xffff v-ffff\n"
	       "put 0x00 v-00\n"
	       "put 0x0000 v-0000\n"
	       "put 0x00ff v-00ff\n"
	       "put a v-a\n"
	       "put \"a\\0b\" v-a0b\n"
	       "put \"\\xff\\x00\" 0x00ff00ff\n"
	       "get 0x00\n"
	       "get \"\\0\\0\"\n"
	       "get \"\\x00\\xff\"\n"
	       "get 0x61\n"
	       "get 0x610062\n"
	       "get \"\\xff\\x00\"\n"
	       "get 0x0001\n"
	       "scan\n",
	       "v-00\nv-0000\nv-00ff\nv-a\nv-a0b\n\"\\x00\\xff\\x00\\xff\"\n(not found)\n"
	       "\"\\x00\" v-00\n"
	       "\"\\x00\\x00\" v-0000\n"
	       "\"\\x00\\xff\" v-00ff\n"
	       "a v-a\n"
	       "\"a\\x00b\" v-a0b\n"
	       "\"\\xff\" v-ff\n"
	       "\"\\xff\\x00\" \"\\x00\\xff\\x00\\xff\"\n"
	       "\"\\xff\\xff\" v-ffff\n");
	golden(dbcli, db,
	       "del 0x0000\ndel \"\\xff\"\nscan 0x00 0x01\nprefix 0xff\ncount\nsync\ncheck\n",
	       "\"\\x00\" v-00\n"
	       "\"\\x00\\xff\" v-00ff\n"
	       "\"\\xff\\x00\" \"\\x00\\xff\\x00\\xff\"\n"
	       "\"\\xff\\xff\" v-ffff\n"
	       "6\nok\n");
}

Test(cli, db_scan_prefix_count)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db, "put a 1; put ab 2; put abc 3; put b 4; put c 5; put d 6; put 10 7\n",
	       "");
	golden(dbcli, db,
	       "scan\n"
	       "scan 2\n"
	       "scan b\n"
	       "scan ab 1\n"
	       "scan ab c\n"
	       "scan ab c 2\n"
	       "scan \"10\"\n"
	       "scan \"\" b\n"
	       "scan c \"\"\n"
	       "scan \"\" \"\" 0\n"
	       "scan z\n"
	       "scan c a\n",
	       /* scan */
	       "10 7\na 1\nab 2\nabc 3\nb 4\nc 5\nd 6\n"
	       /* scan 2 */
	       "10 7\na 1\n"
	       /* scan b */
	       "b 4\nc 5\nd 6\n"
	       /* scan ab 1 */
	       "ab 2\n"
	       /* scan ab c */
	       "ab 2\nabc 3\nb 4\n"
	       /* scan ab c 2 */
	       "ab 2\nabc 3\n"
	       /* scan "10" */
	       "10 7\na 1\nab 2\nabc 3\nb 4\nc 5\nd 6\n"
	       /* scan "" b */
	       "10 7\na 1\nab 2\nabc 3\n"
	       /* scan c "" */
	       "c 5\nd 6\n"
	       /* scan "" "" 0: no limit */
	       "10 7\na 1\nab 2\nabc 3\nb 4\nc 5\nd 6\n");
	golden(dbcli, db,
	       "prefix a\nprefix ab 1\nprefix abcd\nprefix 1\n"
	       "count\ncount b\ncount ab c\ncount \"\" b\ncount x\n"
	       "count c a\ncount c c\nscan --reverse --from c --to ab\nprefix \"\" 2\n",
	       "a 1\nab 2\nabc 3\n"
	       "ab 2\n"
	       "10 7\n"
	       "7\n3\n3\n4\n0\n"
	       /* an inverted or empty range holds nothing; prefix "" is all */
	       "0\n0\n"
	       "10 7\na 1\n");
}

/* tool OPT DIR -c CMDS: a global output option before the directory */
static void cmdline_with(const char *tool, const char *opt, const char *dir, const char *cmds,
			 struct run *r)
{
	char *argv[] = {(char *)tool, (char *)opt, (char *)dir, "-c", (char *)cmds, NULL};
	run_argv(argv, "", 0, r);
}

static const char *const range_data =
    "put a 1; put ab 2; put abc 3; put b 4; put c 5; put d 6; put 10 7\n";

Test(cli, db_scan_count_dump_options)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db, range_data, "");
	golden(dbcli, db,
	       "scan --from ab --to c\n"
	       "scan --to b --from ab\n"
	       "scan --from b\n"
	       "scan --to a\n"
	       "scan --limit 2\n"
	       "scan --from ab --limit 0x2\n"
	       "scan ab --limit 1\n"
	       "scan --from \"\" --to \"\" --limit 0\n"
	       "scan --reverse\n"
	       "scan --reverse --from ab --to c\n"
	       "scan --reverse --to abc\n"
	       "scan --reverse --from c\n"
	       "scan --reverse --limit 2\n"
	       "scan ab c --reverse 1\n"
	       "scan --reverse --from z\n"
	       "scan --keys-only\n"
	       "scan --keys-only --reverse --to b --limit 2\n"
	       "scan -- --x --limit\n",
	       /* --from ab --to c, in either order */
	       "ab 2\nabc 3\nb 4\n"
	       "ab 2\nabc 3\n"
	       /* --from b, --to a */
	       "b 4\nc 5\nd 6\n"
	       "10 7\n"
	       /* --limit 2; --from ab --limit 0x2; ab --limit 1 */
	       "10 7\na 1\n"
	       "ab 2\nabc 3\n"
	       "ab 2\n"
	       /* empty bounds, limit 0: everything */
	       "10 7\na 1\nab 2\nabc 3\nb 4\nc 5\nd 6\n"
	       /* --reverse: everything, descending */
	       "d 6\nc 5\nb 4\nabc 3\nab 2\na 1\n10 7\n"
	       /* --reverse --from ab --to c: the last key below c down to ab */
	       "b 4\nabc 3\nab 2\n"
	       /* --reverse --to abc: the end stays exclusive */
	       "ab 2\na 1\n10 7\n"
	       /* --reverse --from c */
	       "d 6\nc 5\n"
	       /* --reverse --limit 2 */
	       "d 6\nc 5\n"
	       /* positional START END LIMIT with --reverse */
	       "b 4\n"
	       /* --reverse --from z: nothing */
	       ""
	       /* --keys-only */
	       "10\na\nab\nabc\nb\nc\nd\n"
	       "abc\nab\n"
	       /* after --, "--x" is START and "--limit" END: '-' sorts below '1' */
	       "");
	golden(dbcli, db,
	       "count --from ab --to c\ncount --from b\ncount --to b\ncount ab --to c\n"
	       "count -- --x\n",
	       "3\n3\n4\n3\n7\n");
	golden(dbcli, db, "dump --from ab --to c\ndump --limit 1\ndump --from c --limit 5\n",
	       "flexdb-dump 1\nab\t2\nabc\t3\nb\t4\nend 3\n"
	       "flexdb-dump 1\n10\t7\nend 1\n"
	       "flexdb-dump 1\nc\t5\nd\t6\nend 2\n");
	/* a partial dump to a file loads back as just those pairs */
	char cmds[512];
	snprintf(cmds, sizeof(cmds), "dump --to b --from a %s --limit 2", path("part.dump"));
	struct run r;
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "dumped 2 pairs\n");
	run_free(&r);
	const char *db2 = path("db2");
	snprintf(cmds, sizeof(cmds), "load %s; scan", path("part.dump"));
	cmdline(dbcli, db2, cmds, &r);
	cr_expect_str_eq(r.out, "loaded 2 pairs\na 1\nab 2\n", "%s", r.err);
	run_free(&r);
	/* the options do not change the default output of the old forms */
	const char *const same[][2] = {
	    {"scan ab c 2", "scan --from ab --to c --limit 2"},
	    {"scan \"\" b", "scan --to b"},
	    {"scan 3", "scan --limit 3"},
	    {"count ab c", "count --from ab --to c"},
	    {"dump", "dump --from \"\" --to \"\" --limit 0"},
	};
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		struct run o;
		cmdline(dbcli, db, same[i][0], &r);
		cmdline(dbcli, db, same[i][1], &o);
		cr_expect_eq(code(&r), 0);
		cr_expect_eq(code(&o), 0);
		cr_expect_str_eq(r.out, o.out, "%s vs %s", same[i][0], same[i][1]);
		run_free(&r);
		run_free(&o);
	}
}

Test(cli, db_option_errors)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db, range_data, "");
	static const char *const bad[][2] = {
	    {"scan --limit", "scan: --limit needs a value (--limit N)\n"},
	    {"scan --from", "scan: --from needs a value (--from KEY)\n"},
	    {"count a --to", "count: --to needs a value (--to KEY)\n"},
	    {"scan --limit ten", "scan: --limit: not a number: ten\n"},
	    {"dump --limit -1", "dump: --limit: not a number: -1\n"},
	    {"scan --frob", "scan: unknown option --frob (try: help scan)\n"},
	    {"count --limit 3", "count: unknown option --limit (try: help count)\n"},
	    {"dump --reverse", "dump: unknown option --reverse (try: help dump)\n"},
	    {"scan --from a b", "scan: START given twice: as --from and as an argument\n"},
	    {"count a b --to c", "count: END given twice: as --to and as an argument\n"},
	    {"scan a 5 --limit 6", "scan: LIMIT given twice: as --limit and as an argument\n"},
	    {"scan --keys-only a b c d",
	     "scan: wrong number of arguments; usage: scan [OPTIONS] [START [END]] [LIMIT]\n"},
	    {"dump --limit 1 f g",
	     "dump: wrong number of arguments; usage: dump [OPTIONS] [FILE]\n"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct run r;
		char want[256];
		cmdline(dbcli, db, bad[i][0], &r);
		snprintf(want, sizeof(want), "flexdb-cli: error: %s", bad[i][1]);
		cr_expect_eq(code(&r), 1, "%s: status %d", bad[i][0], code(&r));
		cr_expect_str_eq(r.err, want, "%s", bad[i][0]);
		cr_expect_str_eq(r.out, "", "%s", bad[i][0]);
		run_free(&r);
	}
	/* a bad option is found before any of the line runs */
	struct run r;
	script(dbcli, db, "put x 1; scan --nosuch\nget x\n", &r);
	cr_expect_str_eq(r.out, "(not found)\n");
	cr_expect_str_eq(r.err, "flexdb-cli: error at line 1: scan: unknown option --nosuch "
				"(try: help scan)\n");
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	/* commands without options take "--" words as keys */
	golden(dbcli, db, "put --k --v\nget --k\nscan \"--\" \"--l\"\n", "--v\n--k --v\n");
}

Test(cli, db_output_hex_raw)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db, "put a 1; put \"b c\" \"x\\ny\"; put 0x00ff \"\"\n", "");
	struct run r;
	cmdline_with(dbcli, "--hex", db, "scan; get a; get 0x00ff; get nosuch; scan --keys-only",
		     &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "0x00ff \"\"\n0x61 0x31\n0x622063 0x780a79\n"
				"0x31\n\"\"\n(not found)\n"
				"0x00ff\n0x61\n0x622063\n");
	run_free(&r);
	/* --raw: bytes as they are */
	cmdline_with(dbcli, "--raw", db, "scan --from a; scan --keys-only --reverse", &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "a 1\nb c x\ny\nb c\na\n");
	run_free(&r);
	cmdline_with(dbcli, "--raw", db, "get \"b c\"", &r);
	cr_expect_str_eq(r.out, "x\ny");
	run_free(&r);
	/* raw get of a missing key: no output, an error */
	cmdline_with(dbcli, "--raw", db, "get nosuch; get 0x00ff", &r);
	cr_expect_str_eq(r.out, "");
	cr_expect_str_eq(r.err, "flexdb-cli: error: get: nosuch: not found\n");
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	/* the default stays escaped, and dump is the same in every mode */
	golden(dbcli, db, "scan\nget \"b c\"\n",
	       "\"\\x00\\xff\" \"\"\na 1\n\"b c\" \"x\\ny\"\n\"x\\ny\"\n");
	char *plain = dump_of(db);
	cmdline_with(dbcli, "--hex", db, "dump", &r);
	cr_expect_str_eq(r.out, plain);
	run_free(&r);
	cmdline_with(dbcli, "--raw", db, "dump", &r);
	cr_expect_str_eq(r.out, plain);
	run_free(&r);
	free(plain);
}

/* Errors about a file name it, escaped and clipped to its first 32 bytes
 * as a token is, and say why: in both tools, for files read and written. */
Test(cli, file_errors_name_the_file_and_the_reason)
{
	need_tools();
	const char *db = path("db"), *sp = path("sp");
	/* a long name: its first 32 bytes, then "..." */
	char longname[200], clipped[64], cmds[1024], want[512];
	snprintf(longname, sizeof(longname), "%s/no-such-directory-with-a-long-name/file", tmp);
	snprintf(clipped, sizeof(clipped), "%.32s...", longname);
	const char *rs = flex_strerror(-ENOENT);
	struct {
		const char *tool, *dir, *before, *after, *verb; /* the name between */
	} cases[] = {
	    {dbcli, db, "put k @", "", "put"},	     {dbcli, db, "load ", "", "load"},
	    {dbcli, db, "dump ", "", "dump"},	     {fscli, sp, "write 0 @", "", "write"},
	    {fscli, sp, "insert 0 @", "", "insert"}, {fscli, sp, "import ", "", "import"},
	    {fscli, sp, "export ", "", "export"},    {fscli, sp, "read --out ", " 0 1", "read"},
	};
	struct run r;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(cmds, sizeof(cmds), "%s%s%s", cases[i].before, longname, cases[i].after);
		cmdline(cases[i].tool, cases[i].dir, cmds, &r);
		snprintf(want, sizeof(want), "error: %s: %s: %s\n", cases[i].verb, clipped, rs);
		cr_expect(strstr(r.err, want), "%s: %s", cmds, r.err);
		cr_expect_eq(code(&r), 1, "%s", cmds);
		run_free(&r);
	}
	/* a name with a newline is escaped: one line, pasteable */
	cmdline(dbcli, db, "put k \"@a\\nb\"", &r);
	snprintf(want, sizeof(want), "flexdb-cli: error: put: \"a\\nb\": %s\n", rs);
	cr_expect_str_eq(r.err, want);
	run_free(&r);
	/* write errors: the device is full */
	if (access("/dev/full", W_OK) == 0) {
		const char *full = flex_strerror(-ENOSPC);
		cmdline(dbcli, db, "put a 1; dump /dev/full", &r);
		snprintf(want, sizeof(want),
			 "flexdb-cli: error: dump: /dev/full: writing failed: %s\n", full);
		cr_expect_str_eq(r.err, want);
		run_free(&r);
		cmdline(fscli, sp, "write 0 abc; export /dev/full; read --out /dev/full 0 3", &r);
		snprintf(want, sizeof(want),
			 "flexspace-cli: error: export: /dev/full: %s\n"
			 "flexspace-cli: error: read: /dev/full: %s\n",
			 full, full);
		cr_expect_str_eq(r.err, want);
		run_free(&r);
	}
	/* not a regular file; a file that is not a dump */
	cmdline(fscli, sp, "import /", &r);
	cr_expect_str_eq(r.err, "flexspace-cli: error: import: /: not a regular file\n");
	run_free(&r);
	write_file(path("notadump"), "hello\n", 6);
	snprintf(cmds, sizeof(cmds), "load %s", path("notadump"));
	cmdline(dbcli, db, cmds, &r);
	snprintf(want, sizeof(want), "flexdb-cli: error: load: %s: not a dump", path("notadump"));
	cr_expect(strstr(r.err, want), "%s", r.err);
	run_free(&r);
}

Test(cli, db_put_from_file_and_stdin)
{
	need_tools();
	const char *db = path("db");
	/* every byte value, at the largest size the library allows */
	size_t n = FLEXDB_MAX_VALUE;
	unsigned char *v = malloc(n + 1);
	uint64_t s = 12345;
	for (size_t i = 0; i < n; i++)
		v[i] = i < 256 ? (unsigned char)i : (unsigned char)rnd(&s);
	write_file(path("big"), v, n);
	char cmds[512];
	snprintf(cmds, sizeof(cmds), "put bin @%s; put \"with space\" \"@%s\"", path("big"),
		 path("big"));
	struct run r;
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	for (int i = 0; i < 2; i++) {
		cmdline_with(dbcli, "--raw", db, i ? "get \"with space\"" : "get bin", &r);
		cr_expect_eq(code(&r), 0, "%s", r.err);
		cr_expect_eq(r.outlen, n);
		cr_expect(r.outlen == n && !memcmp(r.out, v, n), "the value read back differs");
		run_free(&r);
	}
	/* one byte more is refused */
	write_file(path("huge"), v, n);
	FILE *f = fopen(path("huge"), "ab");
	cr_assert(f);
	fputc('x', f);
	fclose(f);
	snprintf(cmds, sizeof(cmds), "put huge @%s; get huge", path("huge"));
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect_str_eq(r.out, "(not found)\n");
	char want[512];
	snprintf(want, sizeof(want), "put: %s: value of more than 1048576 bytes", path("huge"));
	cr_expect(strstr(r.err, want), "%s", r.err);
	run_free(&r);
	/* an empty file is an empty value; a missing one an error */
	write_file(path("empty"), "", 0);
	snprintf(cmds, sizeof(cmds), "put e @%s; get e; put m @%s", path("empty"), path("missing"));
	cmdline(dbcli, db, cmds, &r);
	cr_expect_str_eq(r.out, "\"\"\n");
	snprintf(want, sizeof(want), "flexdb-cli: error: put: %s: %s\n", path("missing"),
		 flex_strerror(-ENOENT));
	cr_expect_str_eq(r.err, want);
	run_free(&r);
	/* @@ is a literal @; hex is always literal; a lone @ is an error;
	 * get prints @ doubled, as put takes it */
	golden(dbcli, db, "put l1 @@x; put l2 \"@@\"; put l3 0x4078; get l1; get l2; get l3\n",
	       "@@x\n@@\n@@x\n");
	script(dbcli, db, "put l4 @\n", &r);
	cr_expect(strstr(r.err, "put: VALUE @FILE: no file name after @"), "%s", r.err);
	run_free(&r);
	/* inside a batch */
	snprintf(cmds, sizeof(cmds), "batch; put b1 @%s; commit; get b1", path("empty"));
	cmdline(dbcli, db, cmds, &r);
	cr_expect_str_eq(r.out, "\"\"\n", "%s", r.err);
	run_free(&r);
	/* put KEY -: standard input, binary and to its end */
	char *argv[] = {dbcli, (char *)db, "-c", "put in -", NULL};
	run_argv(argv, v, n, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	cmdline_with(dbcli, "--raw", db, "get in", &r);
	cr_expect(r.outlen == n && !memcmp(r.out, v, n), "the value from stdin differs");
	run_free(&r);
	run_argv(argv, "short\n", 6, &r);
	run_free(&r);
	golden(dbcli, db, "get in\n", "\"short\\n\"\n");
	/* standard input holds one value: a second put - is refused */
	char *argv2[] = {dbcli, (char *)db, "-c", "put in2 -; put in3 -", NULL};
	run_argv(argv2, "once", 4, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "standard input was read by an earlier put"), "%s", r.err);
	run_free(&r);
	golden(dbcli, db, "get in2\n", "once\n");
	/* a quoted "-" is a dash; in a script, stdin holds the commands */
	golden(dbcli, db, "put d \"-\"; get d\n", "-\n");
	script(dbcli, db, "put in -\nget d\n", &r);
	cr_expect_str_eq(r.out, "-\n");
	cr_expect(strstr(r.err, "line 1: put: VALUE -: standard input holds the commands"), "%s",
		  r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	free(v);
}

Test(cli, db_bad_token_errors_stay_short)
{
	need_tools();
	const char *db = path("db");
	enum { BIG = 1 << 20 };
	/* a megabyte token between each pair */
	static const char *const around[][2] = {{"", ""},	    {"get 0x1", ""},
						{"get 0x", "g"},    {"scan --", ""},
						{"scan a b 9", ""}, {"help ", ""}};
	char *tok = malloc(BIG + 1), *line = malloc(BIG + 32);
	for (size_t i = 0; i < sizeof(around) / sizeof(around[0]); i++) {
		memset(tok, i == 0 || i == 3 || i == 5 ? 'x' : '1', BIG);
		tok[BIG] = '\0';
		snprintf(line, BIG + 32, "%s%s%s\n", around[i][0], tok, around[i][1]);
		struct run r;
		script(dbcli, db, line, &r);
		cr_expect_eq(code(&r), 1, "case %zu", i);
		cr_expect(r.errlen < 200, "case %zu: an error of %zu bytes", i, r.errlen);
		cr_expect(strstr(r.err, "..."), "case %zu: %s", i, r.err);
		run_free(&r);
	}
	struct run r;
	script(dbcli, db, "bad\x01word\n", &r);
	cr_expect_str_eq(r.err, "flexdb-cli: error at line 1: unknown command \"bad\\x01word\" "
				"(try: help)\n");
	run_free(&r);
	free(tok);
	free(line);
}

Test(cli, db_batch_commit_abort)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db,
	       "put a old\n"
	       "batch\n"
	       "put a new\n"
	       "put b 2\n"
	       "del a\n"
	       "put a newer\n"
	       "get a\n" /* the store, not the batch */
	       "get b\n"
	       "commit\n"
	       "get a\n"
	       "get b\n"
	       "batch\n"
	       "put c 3\n"
	       "del b\n"
	       "abort\n"
	       "scan\n",
	       "old\n(not found)\nnewer\n2\na newer\nb 2\n");
	/* misuse: each an error, none changes the store */
	struct run r;
	script(dbcli, db,
	       "commit\nabort\nbatch\nbatch\nload /nonexistent\nput x 1\ncommit\n"
	       "get x\n",
	       &r);
	cr_expect_str_eq(r.out, "1\n");
	cr_expect_eq(count_lines(r.err), 4, "stderr:\n%s", r.err);
	cr_expect(strstr(r.err, "line 1: commit: no batch is open"), "%s", r.err);
	cr_expect(strstr(r.err, "line 4: batch: a batch is already open"), "%s", r.err);
	cr_expect(strstr(r.err, "line 5: load: not inside a batch"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	/* a batch left open at the end is dropped, and the status says so */
	script(dbcli, db, "batch\nput y 1\ndel a\n", &r);
	cr_expect(strstr(r.err, "batch of 2 operations was not committed"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	golden(dbcli, db, "scan\n", "a newer\nb 2\nx 1\n");
	/* -c with a batch */
	cmdline(dbcli, db, "batch; put p 1; put q 2; commit; count p r", &r);
	cr_expect_str_eq(r.out, "2\n");
	cr_expect_eq(code(&r), 0);
	run_free(&r);
}

Test(cli, db_delrange_delprefix)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db,
	       "put a 1\nput b 2\nput ba 3\nput bb 4\nput \"b\\xff\" 5\nput c 6\nput 0xff 7\n"
	       "put 0xffff 8\nput 0xfe 9\n"
	       "delprefix b\n"
	       "scan\n"
	       "delprefix 0xff\n"
	       "scan\n"
	       "delrange a c\n"	/* c stays: TO is exclusive */
	       "delrange \"\" a\n" /* nothing below a */
	       "scan\n",
	       "a 1\nc 6\n\"\\xfe\" 9\n\"\\xff\" 7\n\"\\xff\\xff\" 8\n"
	       "a 1\nc 6\n\"\\xfe\" 9\n"
	       "c 6\n\"\\xfe\" 9\n");
	/* In a batch, in order with puts and deletes: the put before the
	 * range goes, the one after stays. */
	golden(dbcli, db,
	       "put k1 old\nput k2 old\nput k3 old\n"
	       "batch\nput k0 before\ndelrange k k3\nput k2 after\ndelprefix 0xfe\ncommit\n"
	       "scan\n",
	       "c 6\nk2 after\nk3 old\n");
	/* Refused: an empty or inverted range, an empty TO or prefix. */
	struct run r;
	script(dbcli, db, "delrange k3 k2\ndelrange k k\ndelrange k \"\"\ndelprefix \"\"\n", &r);
	cr_expect_eq(count_lines(r.err), 4, "stderr:\n%s", r.err);
	cr_expect(strstr(r.err, "line 1: delrange: empty range"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	golden(dbcli, db, "count\ncheck\n", "3\nok\n");
}

Test(cli, db_sync_stats_check_timer)
{
	need_tools();
	const char *db = path("db");
	struct run r;
	script(dbcli, db, "put a 1\nsync\ncheck\nstats\n", &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect(!strncmp(r.out, "ok\nkeys ", 8), "%s", r.out);
	cr_expect(strstr(r.out, "\nmemtable_entries "), "%s", r.out);
	cr_expect(strstr(r.out, "\nspace.segment_size "), "%s", r.out);
	for (const char *p = r.out + 3; *p; p = strchr(p, '\n') + 1) {
		char name[64];
		unsigned long long v;
		cr_expect_eq(sscanf(p, "%63s %llu", name, &v), 2, "stats line: %.40s", p);
	}
	run_free(&r);
	/* compact rewrites nothing visible; a bad argument is refused */
	golden(dbcli, db, "put b 2\ncompact\ncompact full\nget a\nget b\ncheck\n", "1\n2\nok\n");
	script(dbcli, db, "compact fully\nstats\n", &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "the only argument is \"full\""), "%s", r.err);
	const char *due = strstr(r.out, "tidy_due ");
	cr_expect(due && strtoull(due + 9, NULL, 10) == 0, "%s", r.out);
	/* the last session closed cleanly: this one opened from its INDEX */
	const char *idx = strstr(r.out, "\nindex_from_file ");
	cr_expect(idx && strtoull(idx + 17, NULL, 10) == 1, "%s", r.out);
	run_free(&r);
	/* .timer: a time line after each command while on */
	script(dbcli, db, ".timer on\nget a\n.timer off\nget a\n.timer maybe\n", &r);
	double t1, t2;
	cr_expect_eq(sscanf(r.out, "time: %lf s\n1\ntime: %lf s\n1\n", &t1, &t2), 2, "%s", r.out);
	cr_expect_eq(count_lines(r.out), 4, "%s", r.out);
	cr_expect(strstr(r.err, ".timer: expected on or off"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
}

Test(cli, backup_of_a_store_and_of_a_space)
{
	need_tools();
	const char *db = path("db"), *copy = path("dbcopy");
	struct run r;
	char cmds[600];
	snprintf(cmds, sizeof(cmds), "put a 1; put b \"two\"; del a; put c 3; backup %s", copy);
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "");
	cr_expect_str_eq(r.err, "");
	run_free(&r);
	cmdline(dbcli, copy, "scan; check", &r);
	cr_expect_str_eq(r.out, "b two\nc 3\nok\n");
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	/* Refused: a directory that is not empty, the store itself. */
	snprintf(cmds, sizeof(cmds), "backup %s", copy);
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "File exists"), "%s", r.err);
	run_free(&r);
	snprintf(cmds, sizeof(cmds), "backup %s/space", db);
	cmdline(dbcli, db, cmds, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "Invalid argument"), "%s", r.err);
	run_free(&r);
	cmdline(dbcli, db, "help backup", &r);
	cr_expect(strstr(r.out, "backup DIR"), "%s", r.out);
	run_free(&r);

	const char *sp = path("space"), *scopy = path("spacecopy");
	snprintf(cmds, sizeof(cmds), "write 0 hello; insert 0 \">> \"; backup %s", scopy);
	cmdline(fscli, sp, cmds, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.err, "");
	run_free(&r);
	cmdline(fscli, scopy, "size; check", &r);
	cr_expect_str_eq(r.out, "8\nok\n");
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	/* A backup of a missing space creates neither. */
	const char *none = path("nospace"), *ncopy = path("nocopy");
	snprintf(cmds, sizeof(cmds), "backup %s", ncopy);
	cmdline(fscli, none, cmds, &r);
	cr_expect_neq(code(&r), 0);
	cr_expect_eq(access(none, F_OK), -1);
	cr_expect_eq(access(ncopy, F_OK), -1);
	run_free(&r);
}

Test(cli, db_help_usage_options)
{
	need_tools();
	static const char *const all[] = {"put",    "get",   "del",    "delrange", "delprefix",
					  "scan",	"prefix",
					  "count",  "batch", "commit", "abort", "sync",
					  "stats",  "check", "dump",   "load",	"help",
					  ".timer", "quit",  "exit",   NULL};
	struct run r;
	char *h[] = {dbcli, "--help", NULL};
	run_argv(h, "", 0, &r);
	cr_expect_eq(code(&r), 0);
	for (const char *const *c = all; *c; c++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\n  %s ", *c);
		cr_expect(strstr(r.out, pat), "--help does not list %s", *c);
	}
	cr_expect(strstr(r.out, "-c COMMANDS"), "%s", r.out);
	cr_expect(strstr(r.out, "Exit status"), "%s", r.out);
	cr_expect(strstr(r.out, "\\xHH"), "%s", r.out);
	cr_expect(strstr(r.out, "\n  --hex "), "%s", r.out);
	cr_expect(strstr(r.out, "\n  --raw "), "%s", r.out);
	run_free(&r);
	const char *db = path("db");
	script(dbcli, db, "help\nhelp scan\nhelp .timer\nhelp nosuch\n", &r);
	for (const char *const *c = all; *c; c++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\n  %s ", *c);
		cr_expect(strstr(r.out, pat), "help does not list %s", *c);
	}
	cr_expect(strstr(r.out, "\nscan [OPTIONS] [START [END]] [LIMIT]\n"), "%s", r.out);
	cr_expect(strstr(r.out, "\n    --reverse "), "%s", r.out);
	cr_expect(strstr(r.out, "\n.timer on|off\n"), "%s", r.out);
	cr_expect(strstr(r.err, "help: no such command: nosuch"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	/* usage errors: status 2 */
	char *a1[] = {dbcli, NULL};
	char *a2[] = {dbcli, "--frobnicate", (char *)db, NULL};
	char *a3[] = {dbcli, (char *)db, "-c", NULL};
	char *a4[] = {dbcli, (char *)db, (char *)db, NULL};
	char *a5[] = {dbcli, "--no-create", (char *)path("missing"), "-c", "count", NULL};
	char *a6[] = {dbcli, "--version", NULL};
	char *const *cases[] = {a1, a2, a3, a4, a5};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		run_argv(cases[i], "", 0, &r);
		cr_expect_eq(code(&r), 2, "case %zu: status %d", i, code(&r));
		cr_expect(r.errlen > 0, "case %zu: no message", i);
		run_free(&r);
	}
	run_argv(a6, "", 0, &r);
	cr_expect_eq(code(&r), 0);
	cr_expect(strstr(r.out, FLEX_VERSION_STRING), "%s", r.out);
	run_free(&r);
	cr_expect(access(path("missing"), F_OK) != 0, "--no-create created the store");
}

Test(cli, db_exit_status_and_errors)
{
	need_tools();
	const char *db = path("db");
	struct run r;
	cmdline(dbcli, db, "put a 1; get a; sync", &r);
	cr_expect_eq(code(&r), 0);
	cr_expect_str_eq(r.out, "1\n");
	run_free(&r);
	/* a failure does not stop the rest, but sets the status */
	cmdline(dbcli, db, "get \"\"; put b 2; get b", &r);
	cr_expect_eq(code(&r), 1);
	cr_expect_str_eq(r.out, "2\n");
	cr_expect_str_eq(r.err, "flexdb-cli: error: get: a key must not be empty\n");
	run_free(&r);
	/* a line is checked whole (names, argument counts, forms) before it runs */
	cmdline(dbcli, db, "put c 3; get; put d 4", &r);
	cr_expect_eq(code(&r), 1);
	cr_expect_str_eq(r.out, "");
	cr_expect_str_eq(r.err,
			 "flexdb-cli: error: get: wrong number of arguments; usage: get KEY\n");
	run_free(&r);
	script(dbcli, db, "put c 3; put d 0x123\nput c 3; nosuch\nget c\n", &r);
	cr_expect_str_eq(r.out, "(not found)\n");
	cr_expect_str_eq(
	    r.err, "flexdb-cli: error at line 1: put: argument 2: odd number of hex digits: 0x123\n"
		   "flexdb-cli: error at line 2: unknown command nosuch (try: help)\n");
	run_free(&r);
	/* several -c, --bail */
	char *av[] = {dbcli, "--bail",		(char *)db, "-c",      "get a",
		      "-c",  "nosuch; put c 3", "-c",	    "put d 4", NULL};
	run_argv(av, "", 0, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect_str_eq(r.out, "1\n");
	run_free(&r);
	golden(dbcli, db, "get c\nget d\n", "(not found)\n(not found)\n");
	/* library errors carry flex_strerror's text */
	char *big = malloc(FLEXDB_MAX_KEY + 64), want[256];
	strcpy(big, "put ");
	memset(big + 4, 'k', FLEXDB_MAX_KEY + 1);
	strcpy(big + 4 + FLEXDB_MAX_KEY + 1, " v\nget a\n");
	script(dbcli, db, big, &r);
	snprintf(want, sizeof(want),
		 "flexdb-cli: error at line 1: put: key of %u bytes: %s (limit %u)\n",
		 FLEXDB_MAX_KEY + 1, flex_strerror(FLEX_ETOOBIG), FLEXDB_MAX_KEY);
	cr_expect_str_eq(r.err, want);
	cr_expect_str_eq(r.out, "1\n");
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	free(big);
	/* quit ends a script; comments, blank lines, ';' */
	golden(dbcli, db, "# a comment\n\n  get a ; ; get b # trailing comment\nquit\nget a\n",
	       "1\n2\n");
	golden(dbcli, db, "exit\nnosuch\n", "");
	/* the unsupported things are errors with a clear text */
	script(dbcli, db,
	       "put \"\" v\nget \"\"\nscan a b c\nprefix a b\nload "
	       "\"/nonexistent/f\"\n",
	       &r);
	cr_expect_eq(count_lines(r.err), 5, "%s", r.err);
	cr_expect(strstr(r.err, "line 1: put: a key must not be empty"), "%s", r.err);
	cr_expect(strstr(r.err, "line 3: scan: LIMIT: not a number: c"), "%s", r.err);
	snprintf(want, sizeof(want), "line 5: load: /nonexistent/f: %s\n", flex_strerror(-ENOENT));
	cr_expect(strstr(r.err, want), "%s", r.err);
	cr_expect_str_eq(r.out, "");
	run_free(&r);
}

/* ======================================================================
 * dump and load
 * ====================================================================== */

struct pair {
	unsigned char *k, *v;
	size_t kl, vl;
};

static int pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	int c = memcmp(x->k, y->k, x->kl < y->kl ? x->kl : y->kl);
	return c ? c : (x->kl > y->kl) - (x->kl < y->kl);
}

Test(cli, db_dump_load_round_trip)
{
	need_tools();
	uint64_t s = seed_of("dump/load");
	enum { N = 600 };
	struct pair *p = calloc(N, sizeof(*p));
	size_t np = 0;
	for (size_t i = 0; i < N; i++) {
		struct pair q;
		uint64_t shape = rnd(&s) % 16;
		q.kl = shape == 0 ? FLEXDB_MAX_KEY : 1 + rnd(&s) % (shape < 8 ? 4 : 40);
		q.vl = shape == 1 ? 100000 : shape == 2 ? 0 : rnd(&s) % 60;
		q.k = malloc(q.kl);
		q.v = malloc(q.vl + 1);
		for (size_t j = 0; j < q.kl; j++) {
			uint64_t c = rnd(&s) % 8;
			q.k[j] = c == 0	  ? 0
				 : c == 1 ? 0xff
				 : c < 4  ? (unsigned char)rnd(&s)
					  : (unsigned char)('a' + rnd(&s) % 4);
		}
		for (size_t j = 0; j < q.vl; j++)
			q.v[j] = (unsigned char)(shape & 4 ? rnd(&s) : ' ' + rnd(&s) % 95);
		/* keep the last value of a repeated key, like the store */
		size_t j;
		for (j = 0; j < np; j++)
			if (p[j].kl == q.kl && !memcmp(p[j].k, q.k, q.kl))
				break;
		if (j < np) {
			free(p[j].k);
			free(p[j].v);
		} else {
			np++;
		}
		p[j] = q;
	}
	/* put them (hex input; both forms of ; and newline separation) */
	char *in = NULL;
	size_t inl = 0;
	for (size_t i = 0; i < N && i < np; i++) {
		append(&in, &inl, "put ", 4);
		hexarg(&in, &inl, p[i].k, p[i].kl);
		append(&in, &inl, " ", 1);
		hexarg(&in, &inl, p[i].v, p[i].vl);
		append(&in, &inl, i % 3 ? ";" : "\n", 1);
	}
	append(&in, &inl, "\n", 1);
	const char *db = path("db"), *db2 = path("db2"), *f1 = path("d1.txt"), *f2 = path("d2.txt");
	golden(dbcli, db, in, "");
	free(in);
	/* the expected dump, from the model and the documented format */
	qsort(p, np, sizeof(*p), pair_cmp);
	char *want = NULL;
	size_t wl = 0;
	append(&want, &wl, "flexdb-dump 1\n", 14);
	for (size_t i = 0; i < np; i++) {
		esc(&want, &wl, p[i].k, p[i].kl);
		append(&want, &wl, "\t", 1);
		esc(&want, &wl, p[i].v, p[i].vl);
		append(&want, &wl, "\n", 1);
	}
	char endl[64];
	snprintf(endl, sizeof(endl), "end %zu\n", np);
	append(&want, &wl, endl, strlen(endl));

	char cmd[512], out[128];
	snprintf(cmd, sizeof(cmd), "dump \"%s\"", f1);
	snprintf(out, sizeof(out), "dumped %zu pairs\n", np);
	struct run r;
	cmdline(dbcli, db, cmd, &r);
	cr_expect_str_eq(r.out, out);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	size_t l1;
	char *d1 = read_file(f1, &l1);
	cr_assert_eq(l1, wl, "dump is %zu bytes, expected %zu", l1, wl);
	cr_assert(!memcmp(d1, want, wl), "dump differs from the model");
	char *stdout_dump = dump_of(db);
	cr_expect_str_eq(stdout_dump, d1, "dump to stdout and to a file differ");

	/* load into a fresh store, dump again: identical */
	snprintf(cmd, sizeof(cmd), "load %s; count; check; dump %s", f1, f2);
	char out2[128];
	snprintf(out2, sizeof(out2), "loaded %zu pairs\n%zu\nok\ndumped %zu pairs\n", np, np, np);
	cmdline(dbcli, db2, cmd, &r);
	cr_expect_str_eq(r.out, out2);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	char *d2 = read_file(f2, NULL);
	cr_expect_str_eq(d2, d1, "the reloaded store differs");
	/* key by key through get, a sample */
	for (size_t i = 0; i < np; i += np / 20 + 1) {
		char *g = NULL, *gw = NULL;
		size_t gl = 0, gwl = 0;
		append(&g, &gl, "get ", 4);
		esc(&g, &gl, p[i].k, p[i].kl);
		append(&g, &gl, "\n", 1);
		esc_value(&gw, &gwl, p[i].v, p[i].vl);
		append(&gw, &gwl, "\n", 1);
		golden(dbcli, db2, g, gw);
		free(g);
		free(gw);
	}
	/* load over existing keys overwrites them and keeps the others */
	golden(dbcli, db2, "put 0x01 one\n", "");
	snprintf(cmd, sizeof(cmd), "load %s\ncount\n", f1);
	size_t had01 = 0; /* was key 0x01 among the random ones? */
	for (size_t i = 0; i < np; i++)
		had01 |= p[i].kl == 1 && p[i].k[0] == 1;
	snprintf(out2, sizeof(out2), "loaded %zu pairs\n%zu\n", np, np + 1 - had01);
	golden(dbcli, db2, cmd, out2);

	free(want);
	free(d1);
	free(d2);
	free(stdout_dump);
	for (size_t i = 0; i < np; i++) {
		free(p[i].k);
		free(p[i].v);
	}
	free(p);
}

Test(cli, db_load_rejects_malformed_files)
{
	need_tools();
	const char *db = path("db");
	golden(dbcli, db, "put keep me\nput a 1\n", "");
	char *before = dump_of(db);
	static const char *const bad[] = {
	    "",
	    "flexdb-dump 2\nend 0\n",
	    "flexdb-dump 1\n",				/* no end line: truncated */
	    "flexdb-dump 1\nx\t1\n",			/* truncated */
	    "flexdb-dump 1\nx\t1\nend 2\n",		/* wrong count */
	    "flexdb-dump 1\nx\t1\nend 1\ny\t2\n",	/* after the end */
	    "flexdb-dump 1\nx\t1\ny 2\nend 2\n",	/* no tab */
	    "flexdb-dump 1\nx\t1\t2\nend 1\n",		/* two tabs */
	    "flexdb-dump 1\nx\t1\n\"\"\t2\nend 2\n",	/* empty key */
	    "flexdb-dump 1\nx\t1\ny\t\"\\q\"\nend 2\n", /* bad escape */
	    "flexdb-dump 1\nx\t1\ny\t\"abc\nend 2\n",	/* unterminated */
	    "flexdb-dump 1\nx\t1\n0x0\t2\nend 2\n",	/* odd hex */
	    "flexdb-dump 1\nx\t1\ny\ta b\nend 2\n",	/* blank in a bare word */
	    "flexdb-dump 1\nx\t1\ny\t\nend 2\n",	/* empty field */
	    "flexdb-dump 1\nx\t1\nend -1\n",
	    "flexdb-dump 1\nx\t1\nend 1x\n",
	    "not a dump\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path("bad.txt"), bad[i], strlen(bad[i]));
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "load %s", path("bad.txt"));
		struct run r;
		cmdline(dbcli, db, cmd, &r);
		cr_expect_eq(code(&r), 1, "case %zu accepted", i);
		cr_expect(strstr(r.err, "nothing loaded"), "case %zu: %s", i, r.err);
		cr_expect_str_eq(r.out, "", "case %zu", i);
		run_free(&r);
	}
	/* hand-written files: comments, blank lines, CRLF, any input form */
	const char *ok = "flexdb-dump 1\r\n# comment\n\nx\t0x4142\r\n\"y z\"\t\"\\t\"\nend 2\n\n";
	write_file(path("ok.txt"), ok, strlen(ok));
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "load %s\nget x\nget \"y z\"\ndel x\ndel \"y z\"\n",
		 path("ok.txt"));
	golden(dbcli, db, cmd, "loaded 2 pairs\nAB\n\"\\t\"\n");
	char *after = dump_of(db);
	cr_expect_str_eq(after, before);
	free(before);
	free(after);
}

/* ======================================================================
 * Fuzz: malformed lines change nothing and never crash
 * ====================================================================== */

static const char *const db_cmds[] = {
    "put",    "get",   "del",   "delrange", "delprefix", "scan", "prefix", "count",
    "batch",  "commit", "abort", "sync",    "stats",     "check", "dump",  "load",
    "help",   ".timer", "quit",  "exit",    NULL};
/* argument counts that are wrong for each of db_cmds (-1 ends) */
static const int db_wrong[][4] = {
    {0, 1, 3, -1},   {0, 2, 3, -1},  {0, 2, 3, -1},  {0, 1, 3, -1},  {0, 2, 3, -1},
    {4, 5, -1, -1},  {0, 3, -1, -1},
    {3, 4, -1, -1},  {1, 2, -1, -1}, {1, 2, -1, -1}, {1, 2, -1, -1}, {1, -1, -1, -1},
    {1, -1, -1, -1}, {1, 2, -1, -1}, {2, 3, -1, -1}, {0, 2, -1, -1}, {2, 3, -1, -1},
    {0, 2, -1, -1},  {1, 2, -1, -1}, {1, 3, -1, -1},
};

static void fuzz_token(char **b, size_t *n, uint64_t *s)
{
	char t[64];
	switch (rnd(s) % 4) {
	case 0: {
		size_t l = 1 + rnd(s) % 6;
		for (size_t i = 0; i < l; i++)
			t[i] = "abcxyz019_-.K"[rnd(s) % 13];
		/* a bare "--" ends a command's options: it could make a
		 * wrong argument count right */
		if (l == 2 && t[0] == '-' && t[1] == '-')
			t[1] = 'a';
		append(b, n, t, l);
		break;
	}
	case 1:
		append(b, n, "\"a b\\n\\x00\\t\\\\\\\"\"", 17);
		break;
	case 2:
		snprintf(t, sizeof(t), "0x%02x%02x", (unsigned)(rnd(s) & 255),
			 (unsigned)(rnd(s) & 255));
		append(b, n, t, 6);
		break;
	default:
		snprintf(t, sizeof(t), "%u", (unsigned)(rnd(s) % 1000));
		append(b, n, t, strlen(t));
	}
}

/* One line that must fail as a whole, without changing anything. */
static void fuzz_line(char **b, size_t *n, uint64_t *s, const char *const *cmds,
		      const int (*wrong)[4], const char *const *sem_bad, int fs)
{
	static const char *const broken[] = {
	    "\"abc",   "\"\\q\"", "\"\\x4\"", "\"\\xg0\"", "0x1g", "0xzz",    "ab\\n",
	    "ab\"c\"", "\"a\"b",  "0x",	      "\"\\",	   "x\"",  "\"\\x\"", "\"\\U0041\"",
	};
	size_t ncmds = 0;
	while (cmds[ncmds])
		ncmds++;
	switch (rnd(s) % 5) {
	case 0: { /* a parse error anywhere makes the whole line run nothing */
		if (rnd(s) % 2)
			append(b, n, fs ? "write 0 XYZ; " : "put fz1 v1; ", fs ? 13 : 12);
		const char *c = cmds[rnd(s) % ncmds];
		append(b, n, c, strlen(c));
		size_t na = rnd(s) % 4, at = rnd(s) % (na + 1);
		for (size_t i = 0; i <= na; i++) {
			append(b, n, " ", 1);
			if (i == at) {
				const char *x =
				    broken[rnd(s) % (sizeof(broken) / sizeof(broken[0]))];
				append(b, n, x, strlen(x));
			} else {
				fuzz_token(b, n, s);
			}
		}
		if (rnd(s) % 2)
			append(b, n, fs ? "; truncate 0" : "; del fz1", fs ? 12 : 9);
		break;
	}
	case 1: { /* unknown command */
		static const char *const unk[] = {"PUT",     "gett",   "delete",  "scans",
						  "put1",    "x",      "commitx", "qui",
						  ".timers", "--help", "ge\x01t"};
		const char *c = unk[rnd(s) % (sizeof(unk) / sizeof(unk[0]))];
		append(b, n, c, strlen(c));
		for (size_t i = rnd(s) % 4; i > 0; i--) {
			append(b, n, " ", 1);
			fuzz_token(b, n, s);
		}
		break;
	}
	case 2: { /* a known command with a wrong argument count */
		size_t ci = rnd(s) % ncmds, k = 0;
		while (k < 4 && wrong[ci][k] >= 0)
			k++;
		int na = wrong[ci][rnd(s) % k];
		append(b, n, cmds[ci], strlen(cmds[ci]));
		for (int i = 0; i < na; i++) {
			append(b, n, " ", 1);
			fuzz_token(b, n, s);
		}
		break;
	}
	case 3: { /* well-formed but refused */
		size_t k = 0;
		while (sem_bad[k])
			k++;
		const char *c = sem_bad[rnd(s) % k];
		append(b, n, c, strlen(c));
		break;
	}
	default: { /* random bytes behind a byte that is no command */
		char c = "\x01\x7f\xff\x1b"[rnd(s) % 4];
		append(b, n, &c, 1);
		for (size_t i = rnd(s) % 40; i > 0; i--) {
			c = (char)(rnd(s) & 255);
			if (c == '\n' || c == ';')
				c = '"';
			append(b, n, &c, 1);
		}
	}
	}
	append(b, n, "\n", 1);
}

Test(cli, db_fuzz_malformed_lines_change_nothing)
{
	need_tools();
	uint64_t s = seed_of("flexdb-cli fuzz");
	const char *db = path("db");
	golden(dbcli, db, "put a 1\nput 0x00ff \"\\x00\"\nput zz \"\"\nsync\n", "");
	char *before = dump_of(db);
	static const char *const sem_bad[] = {
	    "put \"\" v",
	    "del \"\"",
	    "delrange b a",
	    "delrange a a",
	    "delrange a \"\"",
	    "delprefix \"\"",
	    "get \"\"",
	    "load /nonexistent/file",
	    "commit",
	    "abort",
	    "scan a b notanumber",
	    "prefix p 12x",
	    ".timer maybe",
	    "help nosuch",
	    "load /tmp",
	    "dump /nonexistent/dir/file",
	    "scan 0x00 \"\" -1",
	    "count \"\" \"\" 5x",
	    "scan --limit",
	    "scan --nosuch a",
	    "count --limit 3",
	    "dump --from a x y",
	    "scan --from a b",
	    "put k @/nonexistent/file",
	    NULL,
	};
	char *in = NULL;
	size_t n = 0, lines = 1500;
	for (size_t i = 0; i < lines; i++)
		fuzz_line(&in, &n, &s, db_cmds, db_wrong, sem_bad, 0);
	struct run r;
	char *argv[] = {dbcli, (char *)db, NULL};
	run_argv(argv, in, n, &r);
	cr_expect_eq(code(&r), 1, "status %d", code(&r));
	cr_expect_str_eq(r.out, "", "a malformed line printed output");
	cr_expect_eq(count_lines(r.err), lines, "expected one error per line, got %zu",
		     count_lines(r.err));
	run_free(&r);
	/* -c too: each line alone */
	for (int i = 0; i < 15; i++) {
		char *one = NULL;
		size_t m = 0;
		fuzz_line(&one, &m, &s, db_cmds, db_wrong, sem_bad, 0);
		one[m - 1] = '\0';
		cmdline(dbcli, db, one, &r);
		cr_expect_eq(code(&r), 1, "-c '%s': status %d", one, code(&r));
		run_free(&r);
		free(one);
	}
	char *after = dump_of(db);
	cr_expect_str_eq(after, before, "the store changed");
	free(in);
	free(before);
	free(after);
}

/* ======================================================================
 * flexspace-cli
 * ====================================================================== */

Test(cli, space_commands_golden)
{
	need_tools();
	const char *sp = path("space");
	write_file(path("in"), "hello\0\xffworld", 12);
	char in[1024];
	snprintf(in, sizeof(in),
		 "import %s\n"
		 "size\n"
		 "read 0 100\n"
		 "read -s 0 100\n"
		 "insert 5 \" big\"\n"
		 "read -s 0 1K\n"
		 "collapse 0 6\n"
		 "read -s 0 0x100\n"
		 "write 20 0x4142\n"
		 "size\n"
		 "read -x 0 100\n"
		 "read -s 8 4\n"
		 "read -s 100 4\n"
		 "truncate 3\n"
		 "read -r 0 10\n"
		 "insert 0 \"\\t\\\"\\\\\"\n"
		 "read -s 0 10\n"
		 "truncate 0\n"
		 "size\n"
		 "sync\n"
		 "check\n",
		 path("in"));
	golden(fscli, sp, in,
	       "imported 12 bytes\n"
	       "12\n"
	       "00000000  68 65 6c 6c 6f 00 ff 77  6f 72 6c 64              |hello..world|\n"
	       "\"hello\\x00\\xffworld\"\n"
	       "\"hello big\\x00\\xffworld\"\n"
	       "\"big\\x00\\xffworld\"\n"
	       "22\n"
	       "00000000  62 69 67 00 ff 77 6f 72  6c 64 00 00 00 00 00 00  |big..world......|\n"
	       "00000010  00 00 00 00 41 42                                 |....AB|\n"
	       "\"ld\\x00\\x00\"\n"
	       "\"\"\n"
	       "big"
	       "\"\\t\\\"\\\\big\"\n"
	       "0\n"
	       "ok\n");
	/* extents (logical start and length; physical offsets vary), defrag */
	struct run r;
	script(fscli, sp, "write 0 abcdef\ninsert 3 XYZ\nwrite 20 0x00\nextents\nextents 4 3\n",
	       &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	{
		static const uint64_t want[][2] = {{0, 3},  {3, 3}, {6, 3}, {9, 11},
						   {20, 1}, {3, 3}, {6, 3}};
		const char *p = r.out;
		for (size_t i = 0; i < 7; i++) {
			unsigned long long lo, len;
			char third[32];
			cr_assert_eq(sscanf(p, "%llu %llu %31s", &lo, &len, third), 3, "%s", r.out);
			cr_expect(lo == want[i][0] && len == want[i][1],
				  "extent %zu: %llu %llu\n%s", i, lo, len, r.out);
			cr_expect_eq(!strcmp(third, "hole"), i == 3, "%s", r.out);
			p = strchr(p, '\n') + 1;
		}
		cr_expect_eq(*p, '\0', "%s", r.out);
	}
	run_free(&r);
	const char *content =
	    "\"abcXYZdef\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\"\n";
	char want2[512];
	snprintf(want2, sizeof(want2), "%s%s21\nok\n", content, content);
	golden(fscli, sp, "read -s 0 1M\ndefrag\ndefrag 2 5\nsync\nread -s 0 1M\nsize\ncheck\n",
	       want2);
	script(fscli, sp, "stats\n", &r);
	cr_expect(!strncmp(r.out, "size ", 5), "%s", r.out);
	cr_expect(strstr(r.out, "\nextents "), "%s", r.out);
	cr_expect(strstr(r.out, "\nsegment_size "), "%s", r.out);
	cr_expect_eq(count_lines(r.out), 21, "%s", r.out);
	run_free(&r);
	/* the same through -c */
	cmdline(fscli, sp, "size; collapse 0 3; read -s 0 3; truncate 0; size", &r);
	cr_expect_str_eq(r.out, "21\nXYZ\n0\n");
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
}

/* replace and a batch give what the same edits one at a time give; a
 * batch with an op that does not fit changes nothing. */
Test(cli, space_replace_and_batches_are_atomic)
{
	need_tools();
	const char *a = path("one-at-a-time"), *b = path("batched");
	golden(fscli, a,
	       "write 0 \"0123456789\"\n"
	       "collapse 2 3\n"
	       "insert 2 ABC\n"
	       "insert 0 >>\n"
	       "write 12 0x2121\n"
	       "read -s 0 100\n",
	       ">>01ABC56789!!\n");
	golden(fscli, b,
	       "write 0 \"0123456789\"\n"
	       "replace 2 3 ABC\n"
	       "read -s 0 100\n"
	       "batch\n"
	       "insert 0 >>\n"
	       "write 12 0x2121\n"
	       "read -s 0 100\n"
	       "commit\n"
	       "read -s 0 100\n",
	       "01ABC56789\n01ABC56789\n>>01ABC56789!!\n");
	/* The third op collapses past the end the first two leave. */
	struct run r;
	cmdline(fscli, b, "batch; insert 0 xx; replace 0 4 y; collapse 10 5; commit; read -s 0 100",
		&r);
	cr_expect_eq(code(&r), 1, "%s", r.err);
	cr_expect(strstr(r.err, "commit: batch not applied"), "%s", r.err);
	cr_expect_str_eq(r.out, ">>01ABC56789!!\n");
	run_free(&r);
	/* Commands that are not part of a batch, and one left open. */
	const char *const refused[] = {"truncate 1", "defrag", "import /nonexistent", "batch"};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "batch; insert 0 q; %s; abort; size", refused[i]);
		cmdline(fscli, b, cmd, &r);
		cr_expect_eq(code(&r), 1, "%s: %s", refused[i], r.err);
		cr_expect(strstr(r.err, refused[i][0] == 'b' ? "already open" : "not inside a batch"),
			  "%s: %s", refused[i], r.err);
		cr_expect_str_eq(r.out, "14\n", "%s", refused[i]);
		run_free(&r);
	}
	cmdline(fscli, b, "batch; insert 0 q", &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "a batch of 1 changes was not committed; dropped"), "%s", r.err);
	run_free(&r);
	cmdline(fscli, b, "commit", &r);
	cr_expect(strstr(r.err, "no batch is open"), "%s", r.err);
	run_free(&r);
	golden(fscli, b, "size\ncheck\n", "14\nok\n");
}

Test(cli, space_import_export_binary)
{
	need_tools();
	uint64_t s = seed_of("flexspace import/export");
	size_t n = (3u << 20) + 12345;
	unsigned char *d = malloc(n);
	for (size_t i = 0; i < n; i++)
		d[i] = (unsigned char)rnd(&s);
	memset(d + 1000, 0, 5000);
	write_file(path("in.bin"), d, n);
	const char *sp = path("space");
	char cmd[1024], want[256];
	/* import replaces: first a bigger content */
	golden(fscli, sp, "truncate 5M\nwrite 0 junk\n", "");
	snprintf(cmd, sizeof(cmd), "import %s\nsize\nexport %s\ncheck\n", path("in.bin"),
		 path("out.bin"));
	snprintf(want, sizeof(want), "imported %zu bytes\n%zu\nexported %zu bytes\nok\n", n, n, n);
	golden(fscli, sp, cmd, want);
	size_t m;
	char *back = read_file(path("out.bin"), &m);
	cr_assert_eq(m, n);
	cr_expect(!memcmp(back, d, n), "export differs from the imported file");
	free(back);
	/* read -r gives raw bytes, across a 1 MiB chunk boundary */
	struct run r;
	cmdline(fscli, sp, "read -r 1048000 2000", &r);
	cr_assert_eq(r.outlen, 2000);
	cr_expect(!memcmp(r.out, d + 1048000, 2000));
	run_free(&r);
	/* read -s output pasted into insert round-trips any bytes */
	cmdline(fscli, sp, "read -s 0 300", &r);
	char *ins = NULL;
	size_t il = 0;
	append(&ins, &il, "truncate 0\ninsert 0 ", 20);
	append(&ins, &il, r.out, r.outlen);
	append(&ins, &il, "read -r 0 1M\n", 13);
	run_free(&r);
	script(fscli, path("space2"), ins, &r);
	cr_assert_eq(r.outlen, 300, "%s", r.err);
	cr_expect(!memcmp(r.out, d, 300));
	run_free(&r);
	free(ins);
	/* import refuses what is not a regular file, and changes nothing */
	snprintf(cmd, sizeof(cmd), "import %s\nimport /nonexistent/x\nsize\n", tmp);
	script(fscli, sp, cmd, &r);
	snprintf(want, sizeof(want), "%zu\n", n);
	cr_expect_str_eq(r.out, want);
	cr_expect(strstr(r.err, "not a regular file"), "%s", r.err);
	cr_expect_eq(count_lines(r.err), 2, "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	free(d);
}

Test(cli, space_errors_help_exit_status)
{
	need_tools();
	const char *sp = path("space");
	struct run r;
	char want[512];
	script(fscli, sp, "write 0 abc\ncollapse 2 5\nread 0\ntruncate -1\nwrite x y\nsize\n", &r);
	snprintf(want, sizeof(want),
		 "flexspace-cli: error at line 2: collapse: %s\n"
		 "flexspace-cli: error at line 3: read: wrong number of arguments; usage: read "
		 "[-x|-r|-s] [OPTIONS] OFF LEN\n"
		 "flexspace-cli: error at line 4: truncate: SIZE: not a number: -1\n"
		 "flexspace-cli: error at line 5: write: OFF: not a number: x\n",
		 flex_strerror(-ERANGE));
	cr_expect_str_eq(r.err, want);
	cr_expect_str_eq(r.out, "3\n");
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	static const char *const all[] = {"import",   "export",	  "read", "write", "insert",
					  "collapse", "truncate", "size", "stats", "check",
					  "defrag",   "sync",	  "help", "quit",  NULL};
	char *h[] = {fscli, "--help", NULL};
	run_argv(h, "", 0, &r);
	cr_expect_eq(code(&r), 0);
	for (const char *const *c = all; *c; c++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\n  %s ", *c);
		cr_expect(strstr(r.out, pat), "--help does not list %s", *c);
	}
	run_free(&r);
	script(fscli, sp, "help read\nhelp\n", &r);
	cr_expect(!strncmp(r.out, "read [-x|-r|-s] [OPTIONS] OFF LEN\n", 34), "%s", r.out);
	cr_expect(strstr(r.out, "\n  collapse OFF LEN "), "%s", r.out);
	cr_expect_eq(code(&r), 0);
	run_free(&r);
	char *a1[] = {fscli, NULL};
	char *a2[] = {fscli, "--no-create", (char *)path("nope"), "-c", "size", NULL};
	char *a3[] = {fscli, "-x", (char *)sp, NULL};
	char *const *cases[] = {a1, a2, a3};
	for (size_t i = 0; i < 3; i++) {
		run_argv(cases[i], "", 0, &r);
		cr_expect_eq(code(&r), 2, "case %zu: status %d", i, code(&r));
		run_free(&r);
	}
	cmdline(fscli, sp, "size; quit; truncate 0", &r);
	cr_expect_str_eq(r.out, "3\n");
	cr_expect_eq(code(&r), 0);
	run_free(&r);
	golden(fscli, sp, "size\n", "3\n");
}

static const char *const fs_cmds[] = {"import",	  "export", "read",   "write", "insert", "collapse",
				      "truncate", "size",   "stats",  "check", "defrag", "extents",
				      "sync",	  "help",   ".timer", "quit",  "exit",	 NULL};
static const int fs_wrong[][4] = {
    {0, 2, -1, -1}, {0, 2, -1, -1}, {0, 1, 4, -1},   {0, 1, 3, -1},   {0, 1, 3, -1},
    {0, 1, 3, -1},  {0, 2, -1, -1}, {1, 2, -1, -1},  {1, -1, -1, -1}, {1, 2, -1, -1},
    {1, 3, -1, -1}, {1, 3, -1, -1}, {1, -1, -1, -1}, {2, 3, -1, -1},  {0, 2, -1, -1},
    {1, 2, -1, -1}, {1, 2, -1, -1},
};

Test(cli, space_fuzz_malformed_lines_change_nothing)
{
	need_tools();
	uint64_t s = seed_of("flexspace-cli fuzz");
	const char *sp = path("space");
	golden(fscli, sp, "write 0 \"hello \\x00\\xff world\"\ninsert 3 0x0102\nsync\n", "");
	static const char *const sem_bad[] = {
	    "collapse 5 1000",
	    "collapse 1000 1",
	    "write abc 1",
	    "insert -1 x",
	    "truncate 1Q",
	    "read -q 0 1",
	    "read 0 0x",
	    "import /nonexistent/f",
	    "import /tmp",
	    "export /nonexistent/dir/f",
	    "defrag 0 1000",
	    "write 0x1000000000000 x",
	    "truncate 99999999999999999999",
	    "help nosuch",
	    ".timer 1",
	    NULL,
	};
	char *in = NULL;
	size_t n = 0, lines = 1000;
	for (size_t i = 0; i < lines; i++)
		fuzz_line(&in, &n, &s, fs_cmds, fs_wrong, sem_bad, 1);
	append(&in, &n, "read -s 0 100\n", 14);
	struct run r;
	char *argv[] = {fscli, (char *)sp, NULL};
	run_argv(argv, in, n, &r);
	cr_expect_eq(code(&r), 1, "status %d", code(&r));
	cr_expect_str_eq(r.out, "\"hel\\x01\\x02lo \\x00\\xff world\"\n");
	cr_expect_eq(count_lines(r.err), lines, "expected one error per line, got %zu",
		     count_lines(r.err));
	run_free(&r);
	golden(fscli, sp, "read -s 0 100\ncheck\n", "\"hel\\x01\\x02lo \\x00\\xff world\"\nok\n");
	free(in);
}

/* write and insert take DATA as put takes VALUE: @FILE, - (stdin once per
 * run), @@; read --out writes the raw bytes to a file; --hex and --raw. */
Test(cli, space_data_from_files_stdin_and_read_out)
{
	need_tools();
	const char *sp = path("space");
	unsigned char v[3000];
	uint64_t seed = seed_of("flexspace @FILE");
	for (size_t i = 0; i < sizeof(v); i++)
		v[i] = (unsigned char)rnd(&seed);
	write_file(path("in"), v, sizeof(v));
	struct run r;
	char cmds[1024];
	snprintf(cmds, sizeof(cmds), "write 0 @%s; insert 0 ab; read --out %s 2 5000", path("in"),
		 path("out"));
	cmdline(fscli, sp, cmds, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "read 3000 bytes\n");
	run_free(&r);
	size_t n;
	char *b = read_file(path("out"), &n);
	cr_expect(n == sizeof(v) && !memcmp(b, v, n), "read --out differs from the file");
	free(b);
	/* @@ is a literal @, 0x hex always the bytes, a lone @ an error */
	golden(fscli, sp, "truncate 0; write 0 @@x; insert 0 0x40; read -s 0 10\n", "@@@x\n");
	script(fscli, sp, "insert 0 @\n", &r);
	cr_expect(strstr(r.err, "insert: DATA @FILE: no file name after @"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	snprintf(cmds, sizeof(cmds), "write 0 @%s", path("missing"));
	cmdline(fscli, sp, cmds, &r);
	char want[512];
	snprintf(want, sizeof(want), "flexspace-cli: error: write: %s: %s\n", path("missing"),
		 flex_strerror(-ENOENT));
	cr_expect_str_eq(r.err, want);
	run_free(&r);
	/* - : standard input, binary and to its end, once per run */
	char *argv[] = {fscli, (char *)sp, "-c", "truncate 0; insert 0 -; size", NULL};
	run_argv(argv, v, sizeof(v), &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "3000\n");
	run_free(&r);
	char *argv2[] = {fscli, (char *)sp, "-c", "read --raw 0 3000", NULL};
	run_argv(argv2, "", 0, &r);
	cr_expect(r.outlen == sizeof(v) && !memcmp(r.out, v, sizeof(v)),
		  "read --raw differs from stdin's bytes");
	run_free(&r);
	char *argv3[] = {fscli, (char *)sp, "-c", "truncate 0; write 0 -; insert 0 -", NULL};
	run_argv(argv3, "once", 4, &r);
	cr_expect_eq(code(&r), 1);
	cr_expect(strstr(r.err, "insert: DATA -: standard input was read by an earlier write"),
		  "%s", r.err);
	run_free(&r);
	golden(fscli, sp, "read -s 0 10\n", "once\n");
	script(fscli, sp, "write 0 -\nread -s 0 10\n", &r);
	cr_expect(strstr(r.err, "line 1: write: DATA -: standard input holds the commands"), "%s",
		  r.err);
	cr_expect_str_eq(r.out, "once\n");
	run_free(&r);
	/* --hex: per command and as the tool's default; pasteable back */
	golden(fscli, sp, "read --hex 0 10; read --hex 9 1\n", "0x6f6e6365\n\"\"\n");
	cmdline_with(fscli, "--hex", sp, "read 1 2; read -s 1 2; read -x 0 1", &r);
	cr_expect(!strncmp(r.out, "0x6e63\nnc\n00000000  6f ", 20) && strstr(r.out, " |o|\n"),
		  "%s", r.out);
	run_free(&r);
	cmdline_with(fscli, "--raw", sp, "read 0 4", &r);
	cr_expect_str_eq(r.out, "once");
	run_free(&r);
	/* --out takes no other mode; modes do not combine */
	snprintf(cmds, sizeof(cmds), "read --out %s -s 0 1", path("out"));
	cmdline(fscli, sp, cmds, &r);
	cr_expect(strstr(r.err, "read: --out writes the raw bytes"), "%s", r.err);
	cr_expect_eq(code(&r), 1);
	run_free(&r);
	cmdline(fscli, sp, "read --hex --raw 0 1", &r);
	cr_expect(strstr(r.err, "read: more than one output mode"), "%s", r.err);
	run_free(&r);
}

/* ======================================================================
 * Interactive: a session on a pseudo-terminal
 * ====================================================================== */

struct pty {
	int m;
	pid_t pid;
	char *buf;
	size_t len;
};

static void pty_drain(struct pty *t, int ms)
{
	struct pollfd p = {t->m, POLLIN, 0};
	while (poll(&p, 1, ms) > 0) {
		char b[4096];
		ssize_t k = read(t->m, b, sizeof(b));
		if (k <= 0)
			return;
		append(&t->buf, &t->len, b, (size_t)k);
		ms = 50;
	}
}

/* Waits until `what` appears in the output after position from. */
static int pty_wait(struct pty *t, size_t from, const char *what)
{
	for (int i = 0; i < 100; i++) {
		if (t->len > from && strstr(t->buf + from, what))
			return 1;
		struct pollfd p = {t->m, POLLIN, 0};
		if (poll(&p, 1, 100) > 0) {
			char b[4096];
			ssize_t k = read(t->m, b, sizeof(b));
			if (k <= 0)
				return 0;
			append(&t->buf, &t->len, b, (size_t)k);
		}
	}
	return 0;
}

static void pty_send(struct pty *t, const char *s)
{
	size_t from = t->len;
	cr_assert_eq(write(t->m, s, strlen(s)), (ssize_t)strlen(s));
	/* the next prompt: the line has run */
	cr_assert(pty_wait(t, from, "flexdb> "), "no prompt after %s; output so far:\n%s", s,
		  t->buf);
}

/* Starts flexdb-cli DIR on a new pseudo-terminal, HOME in the test
 * directory, and waits for its first prompt. */
static void pty_start(struct pty *t, const char *db)
{
	memset(t, 0, sizeof(*t));
	append(&t->buf, &t->len, "", 0);
	/* a fixed readline setup, without bracketed-paste escapes in the output */
	const char *inputrc = path("inputrc");
	write_file(inputrc, "set enable-bracketed-paste off\n", 31);
	t->m = posix_openpt(O_RDWR | O_NOCTTY);
	cr_assert(t->m >= 0);
	cr_assert(!grantpt(t->m) && !unlockpt(t->m));
	char *slave = ptsname(t->m);
	cr_assert(slave);
	struct winsize ws = {.ws_row = 24, .ws_col = 100};
	ioctl(t->m, TIOCSWINSZ, &ws);
	t->pid = fork();
	cr_assert(t->pid >= 0);
	if (t->pid == 0) {
		setsid();
		int s = open(slave, O_RDWR); /* becomes the controlling terminal */
		if (s < 0)
			_exit(126);
		ioctl(s, TIOCSCTTY, 0);
		dup2(s, 0);
		dup2(s, 1);
		dup2(s, 2);
		if (s > 2)
			close(s);
		close(t->m);
		setenv("HOME", tmp, 1);
		setenv("TERM", "xterm", 1);
		setenv("INPUTRC", inputrc, 1);
		execl(dbcli, dbcli, db, (char *)NULL);
		_exit(127);
	}
	cr_assert(pty_wait(t, 0, "flexdb> "), "no prompt; output:\n%s", t->buf);
}

/* Sends quit and returns the exit status. */
static int pty_quit(struct pty *t)
{
	cr_assert_eq(write(t->m, "quit\r", 5), 5);
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < 500 && w != t->pid; i++) {
		pty_drain(t, 20);
		w = waitpid(t->pid, &st, WNOHANG);
		if (w != t->pid)
			usleep(20000);
	}
	if (w != t->pid) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, &st, 0);
		cr_assert_fail("flexdb-cli did not quit; output:\n%s", t->buf);
	}
	close(t->m);
	return st;
}

Test(cli, db_interactive_pty)
{
	need_tools();
	const char *db = path("db");
	struct pty t;
	pty_start(&t, db);
	cr_expect(strstr(t.buf, "help"), "no greeting: %s", t.buf);
	pty_send(&t, "pu\tcompleted_key 1\r"); /* tab completes "put " */
	pty_send(&t, "put recall_key recall_value\r");
	pty_send(&t, "del recall_key\r");
	size_t from = t.len;
	pty_send(&t, "get recall_key\r");
	cr_expect(strstr(t.buf + from, "(not found)"), "%s", t.buf + from);
	pty_send(&t, "\x1b[A\x1b[A\x1b[A\r"); /* recalls "put recall_key recall_value" */
	from = t.len;
	pty_send(&t, "get\r"); /* an error does not end the session */
	cr_expect(strstr(t.buf + from, "error: get: wrong number of arguments"), "%s",
		  t.buf + from);
	from = t.len;
	pty_send(&t, "get completed_key\r");
	cr_expect(strstr(t.buf + from, "\r\n1\r\n"), "%s", t.buf + from);
	int st = pty_quit(&t);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d; output:\n%s", st, t.buf);
	/* the effects, checked from outside */
	golden(dbcli, db, "get completed_key\nget recall_key\n", "1\nrecall_value\n");
	/* the history file */
	char *h = read_file(path(".flexdb_history"), NULL);
	cr_expect(strstr(h, "put recall_key recall_value\n"), "history:\n%s", h);
	cr_expect(strstr(h, "put completed_key 1\n"), "history:\n%s", h);
	free(h);
	free(t.buf);
}

/* Ctrl-C at the prompt drops the partial line and gives a fresh prompt;
 * the session goes on. */
Test(cli, db_interactive_ctrl_c_clears_the_line)
{
	need_tools();
	const char *db = path("db");
	struct pty t;
	pty_start(&t, db);
	cr_assert_eq(write(t.m, "put half", 8), 8);
	cr_assert(pty_wait(&t, 0, "put half"), "no echo; output:\n%s", t.buf);
	/* Not pty_send: the terminal flushes its output right after it sends
	 * the signal, so the fresh prompt may be gone before it is read.  An
	 * empty line is sent until a prompt answers it: only then has the
	 * terminal finished with the Ctrl-C, whose flush may otherwise eat
	 * keys that arrive together with it on a loaded machine. */
	cr_assert_eq(write(t.m, "\x03", 1), 1);
	int answered = 0;
	for (int i = 0; i < 50 && !answered; i++) {
		usleep(100 * 1000);
		size_t at = t.len;
		cr_assert_eq(write(t.m, "\r", 1), 1);
		pty_drain(&t, 200);
		answered = t.len > at && strstr(t.buf + at, "flexdb> ") != NULL;
	}
	cr_assert(answered, "no prompt after Ctrl-C; output:\n%s", t.buf);
	size_t from = t.len;
	pty_send(&t, "put k v\r");
	pty_send(&t, "get k\r");
	cr_expect(strstr(t.buf + from, "\r\nv\r\n"), "%s", t.buf + from);
	cr_expect(!strstr(t.buf, "error"), "the partial line ran: %s", t.buf);
	int st = pty_quit(&t);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d; output:\n%s", st, t.buf);
	golden(dbcli, db, "get k\nget half\n", "v\n(not found)\n");
	char *h = read_file(path(".flexdb_history"), NULL);
	cr_expect(strstr(h, "put k v\n") && !strstr(h, "half"), "history:\n%s", h);
	free(h);
	free(t.buf);
}

/* ---- stores the tools did not make -------------------------------------- */

/* A read-only command on a mistyped directory creates nothing, fails with
 * status 2 and names the directory; a writing command still creates. */
Test(cli, read_commands_on_a_missing_path_create_nothing)
{
	need_tools();
	static const char *const db_reads[] = {"get a", "scan",	 "prefix a", "count",
					       "stats", "check", "dump",     "get a; help"};
	static const char *const fs_reads[] = {"size", "read 0 4", "extents", "stats", "check"};
	struct run r;
	char want[512];
	for (size_t i = 0; i < sizeof(db_reads) / sizeof(db_reads[0]); i++) {
		const char *p = path("typo/db");
		cmdline(dbcli, p, db_reads[i], &r);
		cr_expect_eq(code(&r), 2, "%s: status %d", db_reads[i], code(&r));
		snprintf(want, sizeof(want), "flexdb-cli: cannot open %s: no store there", p);
		cr_expect(strstr(r.err, want), "%s: %s", db_reads[i], r.err);
		cr_expect(access(p, F_OK) != 0, "%s created %s", db_reads[i], p);
		run_free(&r);
	}
	for (size_t i = 0; i < sizeof(fs_reads) / sizeof(fs_reads[0]); i++) {
		const char *p = path("typo-space");
		cmdline(fscli, p, fs_reads[i], &r);
		cr_expect_eq(code(&r), 2, "%s: status %d", fs_reads[i], code(&r));
		snprintf(want, sizeof(want), "flexspace-cli: cannot open %s: no store there", p);
		cr_expect(strstr(r.err, want), "%s: %s", fs_reads[i], r.err);
		cr_expect(access(p, F_OK) != 0, "%s created %s", fs_reads[i], p);
		run_free(&r);
	}
	/* An empty directory is no store either, and stays empty. */
	const char *empty = path("empty");
	cr_assert_eq(mkdir(empty, 0755), 0);
	cmdline(dbcli, empty, "count", &r);
	cr_expect_eq(code(&r), 2);
	run_free(&r);
	cr_expect_eq(rmdir(empty), 0, "the empty directory was written to");
	/* A line that writes creates the store, as before. */
	const char *db = path("made");
	cmdline(dbcli, db, "get a; put a 1", &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	cmdline(dbcli, db, "get a", &r);
	cr_expect_str_eq(r.out, "1\n");
	run_free(&r);
}

/* Options with a value: in range they reach the library, out of range the
 * open fails with the field named and nothing is created. */
Test(cli, size_options_and_the_field_out_of_range)
{
	need_tools();
	struct run r;
	char want[512];
	const char *opt = flex_strerror(FLEX_EOPTION);
	static const struct {
		int db;
		const char *flag, *value, *field;
	} bad[] = {
	    {1, "--cache-size", "1", "cache_size"},
	    {1, "--cache-size", "2T", "cache_size"},
	    {1, "--memtable-size", "63K", "memtable_size"},
	    {1, "--memtable-size", "0x100000001", "memtable_size"},
	    {0, "--segment-size", "1000", "segment_size"},
	    {0, "--segment-size", "512M", "segment_size"},
	    {0, "--segment-size", "8G", "segment_size"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *d = path("optbad");
		char *argv[] = {bad[i].db ? dbcli : fscli,
				(char *)bad[i].flag,
				(char *)bad[i].value,
				(char *)d,
				"-c",
				"sync",
				NULL};
		run_argv(argv, "", 0, &r);
		cr_expect_eq(code(&r), 2, "%s %s: status %d", bad[i].flag, bad[i].value, code(&r));
		snprintf(want, sizeof(want), "%s: cannot open %s: %s: %s\n",
			 bad[i].db ? "flexdb-cli" : "flexspace-cli", d, bad[i].field, opt);
		cr_expect_str_eq(r.err, want);
		cr_expect_neq(access(d, F_OK), 0, "%s %s created %s", bad[i].flag, bad[i].value, d);
		run_free(&r);
	}
	/* not a number, or no value */
	char *nan[] = {dbcli, "--cache-size", "lots", (char *)path("x"), NULL};
	run_argv(nan, "", 0, &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(strstr(r.err, "flexdb-cli: --cache-size: "), "%s", r.err);
	run_free(&r);
	char *none[] = {fscli, (char *)path("x"), "--segment-size", NULL};
	run_argv(none, "", 0, &r);
	cr_expect_eq(code(&r), 2);
	cr_expect_str_eq(r.err, "flexspace-cli: --segment-size needs a value (--segment-size N)\n");
	run_free(&r);
	/* in range: used */
	const char *db = path("optdb"), *sp = path("optsp");
	char *good[] = {dbcli, "--cache-size",	 "2M", "--memtable-size", "64K", (char *)db,
			"-c",  "put a 1; get a", NULL};
	run_argv(good, "", 0, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.out, "1\n");
	run_free(&r);
	char *seg[] = {fscli, "--segment-size",	  "0x10000", (char *)sp,
		       "-c",  "write 0 x; stats", NULL};
	run_argv(seg, "", 0, &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect(strstr(r.out, "\nsegment_size") && strstr(r.out, " 65536\n"), "%s", r.out);
	run_free(&r);
}

/* ---- --readonly ----------------------------------------------------------- */

static char *sig_buf;
static size_t sig_len;

static int sig_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)f;
	char line[4200];
	int n =
	    snprintf(line, sizeof(line), "%s %o %lld %lld.%09ld\n", p, (unsigned)st->st_mode,
		     (long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	append(&sig_buf, &sig_len, line, (size_t)n);
	if (flag == FTW_F) {
		size_t k;
		char *b = read_file(p, &k);
		append(&sig_buf, &sig_len, b, k);
		free(b);
	}
	return 0;
}

/* Every entry under dir with its mode, size, mtime and bytes. */
static char *tree_sig(const char *dir)
{
	sig_buf = NULL;
	sig_len = 0;
	append(&sig_buf, &sig_len, "", 0);
	cr_assert_eq(nftw(dir, sig_one, 16, FTW_PHYS), 0);
	return sig_buf;
}

static void expect_refused(const char *tool, const char *dir, const char *cmds)
{
	struct run r;
	cmdline_with(tool, "--readonly", dir, cmds, &r);
	cr_expect_eq(code(&r), 1, "%s: status %d", cmds, code(&r));
	cr_expect(strstr(r.err, "opened read-only (--readonly)"), "%s: %s", cmds, r.err);
	run_free(&r);
}

Test(cli, readonly_reads_work_writes_fail_and_nothing_changes)
{
	need_tools();
	const char *db = path("rodb"), *dumpf = path("ro.dump");
	struct run r;
	cmdline(dbcli, db, "put a 1; put b 2; del b; put c 3", &r);
	cr_assert_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	write_file(dumpf, "flexdb-dump 1\nz\t9\nend 1\n", 24);
	char *before = tree_sig(db);
	cmdline_with(dbcli, "--readonly", db, "get a; scan; count; dump; check; stats", &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect_str_eq(r.err, "");
	cr_expect(
	    !strncmp(r.out, "1\na 1\nc 3\n2\nflexdb-dump 1\na\t1\nc\t3\nend 2\nok\nkeys ", 45),
	    "%s", r.out);
	run_free(&r);
	static const char *const writes[] = {
	    "put z 9", "del a", "batch",	 "commit",
	    "abort",   "sync",	"compact", "get a; put z 9; get z"};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++)
		expect_refused(dbcli, db, writes[i]);
	char load[300];
	snprintf(load, sizeof(load), "load %s", dumpf);
	expect_refused(dbcli, db, load);
	/* A script goes on past the refused line. */
	char *argv[] = {dbcli, "--readonly", (char *)db, NULL};
	const char *in = "get a\nput z 9\nget z\n";
	run_argv(argv, in, strlen(in), &r);
	cr_expect_eq(code(&r), 1);
	cr_expect_str_eq(r.out, "1\n(not found)\n");
	cr_expect(strstr(r.err, "error at line 2: put: opened read-only"), "%s", r.err);
	run_free(&r);
	char *after = tree_sig(db);
	cr_expect(!strcmp(after, before), "--readonly changed the store");
	free(after);

	/* Readers share the store; a writer and readers exclude each other. */
	struct flexdb_options ro = {.read_only = 1};
	struct flexdb *h;
	cr_assert_eq(flexdb_open(db, &ro, &h), 0);
	cmdline_with(dbcli, "--readonly", db, "get c", &r);
	cr_expect_eq(code(&r), 0, "beside a reader: %s", r.err);
	cr_expect_str_eq(r.out, "3\n");
	run_free(&r);
	cmdline(dbcli, db, "get c", &r);
	cr_expect_eq(code(&r), 2, "a writer beside a reader");
	cr_expect(strstr(r.err, flex_strerror(FLEX_EBUSY)), "%s", r.err);
	run_free(&r);
	cr_assert_eq(flexdb_close(h), 0);
	cr_assert_eq(flexdb_open(db, NULL, &h), 0);
	cmdline_with(dbcli, "--readonly", db, "get c", &r);
	cr_expect_eq(code(&r), 2, "a reader beside a writer");
	cr_expect(strstr(r.err, flex_strerror(FLEX_EBUSY)), "%s", r.err);
	run_free(&r);
	cr_assert_eq(flexdb_close(h), 0);
	free(before);

	/* Nothing is created, whatever the commands. */
	const char *typo = path("ro-typo");
	cmdline_with(dbcli, "--readonly", typo, "put a 1", &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(strstr(r.err, "no store there"), "%s", r.err);
	cr_expect(access(typo, F_OK) != 0, "--readonly created %s", typo);
	run_free(&r);
	cmdline_with(fscli, "--readonly", typo, "write 0 x", &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(access(typo, F_OK) != 0, "--readonly created %s", typo);
	run_free(&r);
	char *hargv[] = {dbcli, "--help", NULL};
	run_argv(hargv, "", 0, &r);
	cr_expect(strstr(r.out, "--readonly"), "--help does not mention --readonly");
	run_free(&r);
}

Test(cli, space_readonly_reads_work_writes_fail_and_nothing_changes)
{
	need_tools();
	const char *sp = path("rospace"), *f = path("ro.in");
	struct run r;
	cmdline(fscli, sp, "write 0 hello", &r);
	cr_assert_eq(code(&r), 0, "%s", r.err);
	run_free(&r);
	write_file(f, "xyz", 3);
	char *before = tree_sig(sp);
	cmdline_with(fscli, "--readonly", sp, "size; read -s 0 5; extents; check; stats", &r);
	cr_expect_eq(code(&r), 0, "%s", r.err);
	cr_expect(!strncmp(r.out, "5\nhello", 7), "%s", r.out);
	run_free(&r);
	char imp[300];
	snprintf(imp, sizeof(imp), "import %s", f);
	const char *const writes[] = {"write 0 x",   "insert 0 x", "collapse 0 1", "replace 0 1 x",
				      "batch",	     "commit",	   "abort",	   "truncate 0",
				      "defrag",	     "sync",	   imp};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++)
		expect_refused(fscli, sp, writes[i]);
	char *after = tree_sig(sp);
	cr_expect(!strcmp(after, before), "--readonly changed the space");
	free(after);
	free(before);
}

/* A user's file named like a store's is neither truncated nor rewritten,
 * and the tool says why it refused. */
Test(cli, a_users_file_named_like_a_stores_is_untouched)
{
	need_tools();
	static const char *const names[] = {"LOG", "DATA", "TREE"};
	struct run r;
	for (size_t i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "u%zu", i);
		const char *d = path(name);
		cr_assert_eq(mkdir(d, 0755), 0);
		char f[512];
		snprintf(f, sizeof(f), "%s/%s", d, names[i]);
		write_file(f, "my notes\n", 9);
		cmdline(fscli, d, "write 0 x; sync", &r);
		cr_expect_eq(code(&r), 2, "%s: status %d", names[i], code(&r));
		cr_expect(strstr(r.err, flex_strerror(FLEX_ENOTSTORE)), "%s", r.err);
		cr_expect(strstr(r.err, d), "the message does not name %s: %s", d, r.err);
		char holds[600];
		snprintf(holds, sizeof(holds), "flexspace-cli: %s holds: %s\n", d, names[i]);
		cr_expect(strstr(r.err, holds), "the files are not listed: %s", r.err);
		run_free(&r);
		size_t n;
		char *b = read_file(f, &n);
		cr_expect(n == 9 && !memcmp(b, "my notes\n", 9), "%s was changed", names[i]);
		free(b);
	}
	/* space/DATA for flexdb-cli */
	const char *d = path("dbdir");
	char sp[512], f[600];
	snprintf(sp, sizeof(sp), "%s/space", d);
	snprintf(f, sizeof(f), "%s/DATA", sp);
	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(mkdir(sp, 0755), 0);
	write_file(f, "mine", 4);
	cmdline(dbcli, d, "put a 1", &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(strstr(r.err, flex_strerror(FLEX_ENOTSTORE)), "%s", r.err);
	run_free(&r);
	size_t n;
	char *b = read_file(f, &n);
	cr_expect(n == 4 && !memcmp(b, "mine", 4), "space/DATA was changed");
	free(b);
	/* The other kind of store is refused by each tool. */
	const char *fsd = path("fs"), *dbd = path("db");
	cmdline(fscli, fsd, "write 0 abc", &r);
	run_free(&r);
	cmdline(dbcli, dbd, "put a 1", &r);
	run_free(&r);
	cmdline(dbcli, fsd, "put k v", &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(strstr(r.err, flex_strerror(FLEX_EKIND_SPACE)), "%s", r.err);
	run_free(&r);
	cmdline(fscli, dbd, "write 0 x", &r);
	cr_expect_eq(code(&r), 2);
	cr_expect(strstr(r.err, flex_strerror(FLEX_EKIND_DB)), "%s", r.err);
	run_free(&r);
	cmdline(fscli, fsd, "read -s 0 3", &r);
	cr_expect_str_eq(r.out, "abc\n");
	run_free(&r);
}

/* A value that starts with @ is printed with a second @, so that pasting
 * it back stores it instead of naming a file; keys have no @ rule. */
Test(cli, printed_values_that_start_with_at_paste_back)
{
	need_tools();
	const char *db = path("at_db");
	golden(dbcli, db, "put @k @@v\nput x \"@@a b\"\nget @k\nget x\nscan\n",
	       "@@v\n\"@@a b\"\n@k @@v\nx \"@@a b\"\n");
	golden(dbcli, db, "put y @@v\nget y\n", "@@v\n");
	const char *sp = path("at_space");
	golden(fscli, sp, "write 0 0x40000a\nread -s 0 3\n", "\"@@\\x00\\n\"\n");
	golden(fscli, sp, "truncate 0\ninsert 0 \"@@\\x00\\n\"\nsize\nread -s 0 3\n",
	       "3\n\"@@\\x00\\n\"\n");
}
