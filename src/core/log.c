/* log.c - vLLM-format log lines, assertions and startup failures.
 *
 * Format (vLLM's logging config): "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
 * with date "%m-%d %H:%M:%S", on stdout. Each line is written with one call so
 * lines from different threads never interleave.
 */
#define _POSIX_C_SOURCE 200809L
#include "servelab/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int min_level = LOG_INFO;
static int to_stderr;

void sl_log_to_stderr(void) { to_stderr = 1; }

static void level_init(void) {
    const char *s = getenv("SERVELAB_LOGGING_LEVEL");
    if (!s) return;
    if (!strcasecmp(s, "DEBUG")) min_level = LOG_DEBUG;
    else if (!strcasecmp(s, "INFO")) min_level = LOG_INFO;
    else if (!strcasecmp(s, "WARNING")) min_level = LOG_WARNING;
    else if (!strcasecmp(s, "ERROR")) min_level = LOG_ERROR;
}

int sl_log_enabled(log_level_t level) {
    pthread_once(&level_once, level_init);
    return (int)level >= min_level;
}

static const char *level_name(log_level_t level) {
    switch (level) {
    case LOG_DEBUG: return "DEBUG";
    case LOG_INFO: return "INFO";
    case LOG_WARNING: return "WARNING";
    case LOG_ERROR: return "ERROR";
    }
    return "INFO";
}

void sl_log(log_level_t level, const char *file, int line, const char *fmt, ...) {
    if (!sl_log_enabled(level)) return;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;

    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);

    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%s %s [%s:%d] ", level_name(level), stamp, base, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof buf) n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf - 1) { /* cut: at a character boundary, so the line stays UTF-8 */
        n = (int)sizeof buf - 2;
        int k = n;
        while (k > 0 && ((unsigned char)buf[k] & 0xC0) == 0x80) k--; /* buf[k]: the lead byte of the cut one */
        if (k < n) n = k;
    }
    buf[n++] = '\n';
    FILE *out = to_stderr ? stderr : stdout;
    fwrite(buf, 1, (size_t)n, out);
    fflush(out);
}

void sl_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "servelab: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

void sl_die(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "servelab: error: %s\n", buf);
    exit(1);
}

int sl_fail(sl_err_t *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
