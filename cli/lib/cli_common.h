/*
 * cli_common.h - what flexdb-cli and flexspace-cli share: the argument
 * syntax, the output escaping, number parsing, and the REPL / script /
 * -c driver with readline, history, completion and .timer.
 *
 * Compiled once (cli_parse.c, cli_run.c, cli_main.c) into an archive that
 * every tool links.
 *
 * Argument syntax (docs/CLI.md):
 *   bare word   any run of bytes other than blanks, '"' , ';' and '\';
 *               "0x"/"0X" followed by an even number of hex digits is
 *               those bytes (0x00ff01 is three bytes)
 *   "quoted"    C escapes \n \t \r \0 \\ \" \xHH (exactly two hex digits)
 *   ;           separates commands on one line
 *   #           at the start of a word begins a comment
 * A line that fails to parse runs none of its commands.  Output uses the
 * same syntax (cli_escape), so it can be pasted back as input.
 */
#ifndef CLI_COMMON_H
#define CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* ---- growable byte buffer ------------------------------------------------ */

struct cli_buf {
	unsigned char *p;
	size_t len, cap;
};

void cli_buf_add(struct cli_buf *b, const void *data, size_t n);

void cli_buf_addc(struct cli_buf *b, unsigned char c);

void cli_buf_free(struct cli_buf *b);

/* ---- output escaping ------------------------------------------------------ */

/* Appends the escaped form of s to b (bare when possible, else quoted). */
void cli_escape(struct cli_buf *b, const void *data, size_t n);
/* cli_escape for bytes read back as a DATA or VALUE argument, where a
 * leading @ names a file: such bytes get a second @ (@@ is a literal @). */
void cli_escape_data(struct cli_buf *b, const void *data, size_t n);

/* Appends data as 0x hex, or "" when empty: both read back as the bytes. */
void cli_hex(struct cli_buf *b, const void *data, size_t n);

/* Errors quote at most this many bytes of an offending token: a token may
 * be a megabyte long. */
#define CLI_CLIP 32

/* Appends the escaped form of at most CLI_CLIP bytes of data to b, then
 * "..." when there was more; b stays NUL-terminated. */
const char *cli_clip(struct cli_buf *b, const void *data, size_t n);

/* ---- parsing ------------------------------------------------------------------ */

enum cli_kind { CLI_BARE, CLI_QUOTED, CLI_HEX };

struct cli_token {
	enum cli_kind kind;
	char *text;	     /* NUL-terminated source text (bare words, hex) or NULL */
	unsigned char *data; /* the decoded bytes, NUL-terminated */
	size_t len;
	/* Set for an odd number of hex digits (0x100): fine as a number, an
	 * error as bytes; the line is rejected unless the command takes a
	 * number at that position (cli_cmd.nums). */
	const char *bad;
};

struct cli_command {
	struct cli_token *tok;
	size_t n, cap;
};

struct cli_line {
	struct cli_command *cmd;
	size_t n, cap;
};

void cli_line_free(struct cli_line *l);

/* Splits a line of n bytes into commands and tokens.  Returns 0, or -1
 * with a message in err (and *l empty): then nothing of the line runs.
 * Empty commands (";;", blank or comment lines) are dropped. */
int cli_parse_line(const char *line, size_t n, struct cli_line *l, char *err, size_t errsz);

/* Decodes exactly one token filling [s, s+n) into out (for file formats).
 * Returns 0 or -1 with err. */
int cli_decode_field(const char *s, size_t n, struct cli_buf *out, char *err, size_t errsz);

/* A bare decimal number (used to tell a LIMIT from a key). */
int cli_is_decimal(const struct cli_token *t);

/* Numbers: decimal or 0x hex, written bare, optionally followed by K, M, G
 * or T (powers of 1024).  Returns 0 or -1 with err. */
int cli_parse_u64(const struct cli_token *t, uint64_t *out, char *err, size_t errsz);

/* ---- the driver --------------------------------------------------------------- */

struct cli_app;

/* A command handler: args[0] is the command name; nargs counts it.  Returns
 * 0 on success, nonzero after printing its error with cli_error(). */
typedef int (*cli_fn)(struct cli_app *app, struct cli_token *args, size_t nargs);

/* An option of one command: a bare word starting with "--", anywhere
 * among its arguments (a bare "--" ends them).  arg names the argument
 * that follows it (NULL: it takes none); num: that argument is a number. */
struct cli_opt {
	const char *name; /* "--from" */
	const char *arg;  /* "KEY", "N" or NULL */
	int num;
	const char *help;
};

#define CLI_MAX_OPTS 8

struct cli_cmd {
	const char *name;
	const char *usage; /* arguments, e.g. "KEY VALUE" */
	int min, max;	   /* argument counts, name excluded; max -1: any */
	const char *brief;
	const char *help; /* longer text for `help CMD`, may be NULL */
	cli_fn fn;
	unsigned nums; /* bit i: argument i (1-based) may be a number */
	int reads;     /* nonzero: only reads the store (see cli_only_reads) */
	/* Its options, ending with a NULL name, or NULL.  Then min, max and
	 * nums count only the arguments that are not options. */
	const struct cli_opt *opts;
};

struct cli_app {
	const char *prog;    /* "flexdb-cli" */
	const char *prompt;  /* "flexdb> " */
	const char *history; /* file name under $HOME */
	const struct cli_cmd *cmds;
	const char *intro; /* shown by `help` before the list */
	void *ctx;
	int interactive; /* reading a terminal through readline */
	int bail;	 /* stop at the first error */
	int timer;
	int quit;
	int failed; /* some command failed */
	/* The -c commands only read: the tool opens without creating. */
	int only_reads;
	/* Opened read-only (--readonly): commands that change the store are
	 * refused before they run. */
	int read_only;
	long lineno;
	const char *cur; /* command being run */
	/* While a command with options runs: opt[i] is the argument of its
	 * opts[i], or the option's own token when it takes none; NULL when
	 * not given. */
	const struct cli_token *opt[CLI_MAX_OPTS];
};

void cli_error(struct cli_app *app, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a library status; returns 1 so handlers can `return cli_status(...)`. */
int cli_status(struct cli_app *app, const char *what, int rc);

/* The end of a handler whose library call prints nothing: 0, or the
 * status reported. */
int cli_done(struct cli_app *app, int rc);

/* The end of `check`: prints ok, or reports the status. */
int cli_check_done(struct cli_app *app, int rc);

/* A numeric argument (cli_parse_u64) named what in the error.  Returns 0,
 * or 1 after reporting the error. */
int cli_number(struct cli_app *app, const struct cli_token *t, const char *what, uint64_t *v);

/* The status of the last failed C library call: -errno, or -EIO when it
 * left errno unset (a stdio stream that failed earlier). */
int cli_errno(void);

int cli_file_error(struct cli_app *app, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same with the reason of status rc (-errno or a library status). */
int cli_file_status(struct cli_app *app, const char *path, int rc);

/* A file name argument: its bytes as a C string, or NULL after an error
 * when they hold a NUL byte. */
const char *cli_path(struct cli_app *app, const struct cli_token *t);

/* A data argument (what names it in errors): the bytes as written; for a
 * bare or quoted "@FILE", FILE's bytes, and "@@..." the argument less its
 * first '@'; a bare "-", standard input to its end, once per run and only
 * when it holds neither the commands nor a terminal.  0x hex is always the
 * bytes.  Sets *v, *vl (into b when read, then at most limit + 1 bytes);
 * returns 0 or 1 after an error. */
int cli_bytes_arg(struct cli_app *app, const struct cli_token *t, const char *what, size_t limit,
		  struct cli_buf *b, const unsigned char **v, size_t *vl);

/* Progress for long commands: a line on stderr, only when it is a tty. */
void cli_progress(const char *what, uint64_t n, const char *unit);

/* Runs one input line (n bytes).  Returns 0 when every command in it
 * succeeded. */
int cli_run_line(struct cli_app *app, const char *line, size_t n);

/* ---- main: options, opening, -c / REPL / script -------------------------------- */

/* An option of one tool only: given, it stores value in *var. */
struct cli_flag {
	const char *name;
	int *var;
	int value;
	const char *help; /* its line in --help */
};

/* An option of one tool that takes a number (decimal or 0x hex, with an
 * optional K/M/G/T suffix): given, it stores it in *num. */
struct cli_numflag {
	const char *name;
	uint64_t *num;
	const char *help; /* its line in --help */
};

/* What cli_main needs from a tool besides its struct cli_app. */
struct cli_driver {
	const struct cli_flag *flags;	    /* ends with a NULL name */
	const struct cli_numflag *numflags; /* ends with a NULL name; may be NULL */
	/* --help, around the parts both tools share: */
	const char *about;   /* what DIR holds, up to "with -c it runs" */
	const char *status;  /* after the options: the exit statuses and more */
	const char *details; /* after the command list */
	/* Opens DIR into app->ctx.  Returns 0, a library status (reported as
	 * "cannot open DIR"), or a positive value for a failure it has
	 * reported itself, or that has nothing to report. */
	int (*open)(struct cli_app *app, const char *dir);
	/* After open failed with FLEX_EOPTION: the name of the options field
	 * out of range (flexdb_options_check), or NULL.  May be NULL. */
	const char *(*bad_option)(struct cli_app *app);
	/* After the commands, before close; may be NULL. */
	void (*finish)(struct cli_app *app);
	/* Closes and frees what open made.  Returns 0 or a library status. */
	int (*close)(struct cli_app *app);
};

/* The whole of main: parses the options (-c, --bail, --help, --version and
 * the tool's flags) and DIR, opens DIR, runs the -c commands, else a REPL
 * on a terminal, else a script from standard input, and closes.  Returns
 * the exit status (docs/CLI.md): 0, 1 when a command failed (not in a
 * REPL), 2 for bad options or a failed open or close. */
int cli_main(struct cli_app *app, const struct cli_driver *d, int argc, char **argv);

#endif /* CLI_COMMON_H */
