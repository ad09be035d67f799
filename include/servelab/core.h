/* core.h - the few helpers every module shares: invariants, logging, time, files.
 *
 * Logging follows vLLM's format exactly, so runbook greps work unchanged:
 *   INFO 11-21 15:42:01 [llama.c:88] Loading weights took 0.12 seconds
 * Lines go to stdout (as vLLM's logger does); level from SERVELAB_LOGGING_LEVEL
 * (DEBUG, INFO, WARNING, ERROR; default INFO). Startup failures use sl_die():
 * one line on stderr naming what and where, then exit(1); it is only called from
 * main() and startup code, never while serving requests (docs/architecture.md, "Errors").
 */
#ifndef SERVELAB_CORE_H
#define SERVELAB_CORE_H

/* The version `servelab --version`, GET /version and the startup line report. */
#define SERVELAB_VERSION "0.1.0"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* C11's _Noreturn, spelled so that C++ translation units (the sentencepiece
 * wrapper, CUDA kernels) can include this header too. */
#ifdef __cplusplus
#define SL_NORETURN [[noreturn]]
#else
#define SL_NORETURN _Noreturn
#endif

/* A broken invariant is a bug: print the expression and where, then abort. */
#define SL_ASSERT(expr)                                                        \
    ((expr) ? (void)0 : sl_assert_fail(#expr, __FILE__, __LINE__))
SL_NORETURN void sl_assert_fail(const char *expr, const char *file, int line);

typedef enum { LOG_DEBUG = 10, LOG_INFO = 20, LOG_WARNING = 30, LOG_ERROR = 40 } log_level_t;

/* Writes one log line if `level` is enabled. `file` may be a full path; only its
 * basename is printed. Thread-safe (one write per line). */
void sl_log(log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int sl_log_enabled(log_level_t level);
/* Sends log lines to stderr instead of stdout (for commands whose stdout is data). */
void sl_log_to_stderr(void);

#define LOG_DEBUG(...) sl_log(LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_INFO(...) sl_log(LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_WARNING(...) sl_log(LOG_WARNING, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_ERROR(...) sl_log(LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/* Prints "servelab: error: <message>" on stderr and exits with status 1.
 * Startup only. */
SL_NORETURN void sl_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Error messages travel up as text in a caller-owned buffer of this size. */
#define SL_ERR_LEN 512
typedef struct {
    char msg[SL_ERR_LEN];
} sl_err_t;

/* Formats `err->msg` and returns -1, so callers can `return sl_fail(err, ...)`.
 * `err` may be NULL. */
int sl_fail(sl_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic clock, seconds. */
double sl_now_s(void);

/* malloc/calloc/realloc that abort on exhaustion: running out of host memory
 * for bookkeeping is not something a request can cause or recover from. */
void *sl_malloc(size_t n);
void *sl_calloc(size_t count, size_t size);
void *sl_realloc(void *p, size_t n);
char *sl_strdup(const char *s);

/* Reads a whole file into a NUL-terminated buffer (caller frees). Returns NULL
 * and fills `err` when it cannot. `max_bytes` guards against absurd inputs. */
char *sl_read_file(const char *path, size_t max_bytes, size_t *len_out, sl_err_t *err);

/* A read-only memory map of a whole file. */
typedef struct {
    const uint8_t *data;
    size_t n_bytes;
} sl_mmap_t;
int sl_mmap_open(const char *path, sl_mmap_t *out, sl_err_t *err);
void sl_mmap_close(sl_mmap_t *m);

/* Formats a finite `x` as Python's repr(float) does ("0.1", "-1.0", "1e-05",
 * "3e+20"): the shortest decimal that reads back as the same value (as a
 * float32 when `as_float32`), fixed notation for exponents -4..15. */
void sl_format_py_float(double x, int as_float32, char *out, size_t cap);

/* Joins a directory and a file name into `out` (cap bytes). Returns -1 if it
 * does not fit. */
int sl_path_join(char *out, size_t cap, const char *dir, const char *name);
int sl_file_exists(const char *path);

#endif
