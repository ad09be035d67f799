/* cli.h - the subcommands of the servelab binary. Each returns the process
 * exit status: 0 on success, 1 on a runtime/startup error, 2 on bad usage. */
#ifndef SERVELAB_CLI_H
#define SERVELAB_CLI_H

int cli_generate(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_render(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_diagnose(int argc, char **argv);
int cli_scenario(int argc, char **argv);

/* ---- one HTTP request (http_client.c) ---------------------------------------- */

#include <stddef.h>

typedef struct {
    char *data; /* NUL-terminated; the caller frees it */
    size_t len;
} cli_buf_t;
/* GET (body NULL) or POST the JSON body to base + path, with "Authorization:
 * Bearer <bearer>" when bearer is non-empty, giving up after timeout_ms. The
 * HTTP status, or -1 with curl's message in err when nothing answered. *out
 * always gets the body (possibly ""), at most 64 MiB. */
long cli_http(const char *base, const char *path, const char *body, const char *bearer, long timeout_ms,
              cli_buf_t *out, char *err, size_t err_len);

/* ---- argument helpers (args.c) ----------------------------------------------- */

/* Prints `usage` (may be ""), then "servelab: error: <message>", exits 2. */
_Noreturn void cli_usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Parses an integer option value in [min, max]; exits 2 with a message if bad. */
long long cli_parse_int(const char *flag, const char *value, long long min, long long max);
double cli_parse_double(const char *flag, const char *value, double min, double max);
/* "2048", "1k" (1000), "1K" (1024), "25.6k", "4G" as vLLM's human_readable_int
 * (k m g t decimal, K M G T binary), in [1, max]; bad values exit 2. */
long long cli_parse_human_int(const char *flag, const char *value, double max);
/* Exits 1 with one line saying what a checkpoint directory is and how to
 * make one, when `dir` is missing, not a directory or has no readable
 * config.json; run before anything else reads the model. */
void cli_require_checkpoint(const char *dir);
/* A command's options followed by the engine's (malloc'd; free it). */
struct option;
struct option *cli_merge_options(const struct option *own);

#endif
