/*
 * cli_int.h - what the files of the tools' library share besides their
 * interface (cli_common.h): the parser (cli_parse.c), the command runner
 * (cli_run.c) and main (cli_main.c).
 */
#ifndef CLI_INT_H
#define CLI_INT_H

#include <stdio.h>

#include "cli_common.h"

/* cli_parse.c */
/* Makes room for more bytes after b->len (exits when out of memory). */
void cli_buf_reserve(struct cli_buf *b, size_t more);
/* As cli_clip, for source text shown as written (a bare word). */
const char *cli_clip_text(struct cli_buf *b, const char *s);
/* Whether c separates tokens. */
int cli_is_blank(int c);

/* cli_run.c */
/* The built-in commands common to both tools, ended by a NULL name. */
extern const struct cli_cmd cli_builtins[];
/* The tool's command or the built-in called name, or NULL. */
const struct cli_cmd *cli_find(const struct cli_app *app, const char *name);
/* The command list and the argument syntax. */
void cli_print_help(FILE *f, const struct cli_app *app);

#endif /* CLI_INT_H */
