/*
 * flex_killpoint.h - named crash points for kill tests (internal to the three
 * libraries; not installed).
 *
 * FLEX_KILLPOINT("fs.log.sync.before") marks a moment at which a crash is
 * interesting: just before or after an fsync/fdatasync, between the steps
 * of a commit, half-way through a garbage-collection run.  In a build with
 * assertions (MODE=debug: `make test`, the sanitizer builds) the macro
 * calls flex_killpoint(), which does nothing unless the environment asks
 * for a crash:
 *
 *   FLEX_KILLPOINT=<pattern>:<n>   the n-th hit (1-based) of a point whose
 *                                  name matches kills the process with
 *                                  SIGKILL.  <pattern> is a full name, a
 *                                  prefix ending in '*' ("fdb.commit.*"),
 *                                  or "*" for every point.  Hits are
 *                                  counted over all matching points, in
 *                                  every thread, in this process.
 *   FLEX_KILLPOINT_REPORT=<path>   before the kill, "<name> <n>\n" is
 *                                  appended to <path>, so the test learns
 *                                  which point fired (and that it fired).
 *
 * The environment is read once per process, on the first hit; a forked
 * child reads it afresh (and starts counting from zero), so a test can set
 * it between fork and the child's first call into the library.
 *
 * With NDEBUG (MODE=release) the macro expands to nothing and the function
 * does not exist: kill points cost nothing in a release build.  The points
 * and what a crash at each one exercises are listed in docs/DURABILITY.md.
 *
 * Like everything in common/, the hook is linked into libflextree, the
 * library all three layers link; the layers include this header by its
 * relative path.
 */
#ifndef FLEX_KILLPOINT_H
#define FLEX_KILLPOINT_H

#include "flex_common.h"

#ifdef NDEBUG
#define FLEX_KILLPOINT(name) ((void)0)
#else
/* Counts a hit of the point `name` (a string literal) and, when the
 * environment selects this hit, kills the process.  Thread-safe;
 * async-signal-unsafe (it may take a mutex on the first call). */
FLEX_EXPORT void flex_killpoint(const char *name);
#define FLEX_KILLPOINT(name) flex_killpoint(name)
#endif

#endif /* FLEX_KILLPOINT_H */
