/*
 * cli_main.c - the tools' main (cli_common.h): options, the readline REPL
 * with history and completion, scripts on standard input, and -c.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "flex_common.h"

#include "cli_common.h"
#include "cli_int.h"

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
		/* A key and a Ctrl-C typed before it can be there at once: ppoll
		 * then reports the key and leaves the signal pending (blocked
		 * again).  The Ctrl-C goes first: let it in, then look again. */
		sigset_t pending;
		if (sigpending(&pending) == 0 && sigismember(&pending, SIGINT)) {
			const struct timespec now = {0, 0};
			ppoll(NULL, 0, &now, &cli_rl_waitmask);
			continue;
		}
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
