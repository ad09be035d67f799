/* args.c - the argument helpers every subcommand shares (see cli.h).
 *
 * Bad values exit 2 with one line in the style of Python's argparse, which is
 * what vLLM's users see for the same mistake.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "engine_args.h"
#include "servelab/core.h"

void cli_usage_error(const char *u, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sservelab: error: %s\n", u, buf);
    exit(2);
}

long long cli_parse_int(const char *flag, const char *value, long long min, long long max) {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max)
        cli_usage_error("", "argument %s: invalid value '%s' (expected an integer in [%lld, %lld])",
                        flag, value, min, max);
    return v;
}

double cli_parse_double(const char *flag, const char *value, double min, double max) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !(v >= min && v <= max))
        cli_usage_error("", "argument %s: invalid value '%s' (expected a number in [%g, %g])", flag,
                        value, min, max);
    return v;
}

long long cli_parse_human_int(const char *flag, const char *value, double max) {
    char *end;
    double v = strtod(value, &end);
    double mult = 1;
    switch (*end) {
    case 'k': mult = 1e3; break;
    case 'K': mult = 1024.0; break;
    case 'm': mult = 1e6; break;
    case 'M': mult = 1024.0 * 1024.0; break;
    case 'g': mult = 1e9; break;
    case 'G': mult = 1024.0 * 1024.0 * 1024.0; break;
    case 't': mult = 1e12; break;
    case 'T': mult = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
    }
    if (mult != 1) end++;
    double x = v * mult;
    if (end == value || *end || !(x >= 1 && x <= max) || x != floor(x))
        cli_usage_error("", "argument %s: invalid value '%s'", flag, value);
    return (long long)x;
}


struct option *cli_merge_options(const struct option *own) {
    size_t n_own = 0, n_eng = 0;
    while (own[n_own].name) n_own++;
    while (engine_long_options[n_eng].name) n_eng++;
    struct option *all = sl_calloc(n_own + n_eng + 1, sizeof *all);
    memcpy(all, own, n_own * sizeof *all);
    memcpy(all + n_own, engine_long_options, n_eng * sizeof *all);
    return all;
}

void cli_require_checkpoint(const char *dir) {
    static const char *expected =
        "expected a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.model); "
        "make one with: python3 tools/make_model.py --preset small --out models/small";
    struct stat st;
    if (stat(dir, &st) != 0) sl_die("%s: %s; %s", dir, strerror(errno), expected);
    if (!S_ISDIR(st.st_mode)) sl_die("%s: not a directory; %s", dir, expected);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0) sl_die("%s: cannot open: %s; %s", path, strerror(errno), expected);
    close(fd);
}
