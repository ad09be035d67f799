/* main.c - the servelab command line: dispatches to subcommands.
 *
 *   servelab serve MODEL_DIR ...                    the OpenAI-compatible server
 *   servelab generate MODEL_DIR --prompt TEXT ...   offline generation
 *   servelab bench decode|throughput|scheduler ...  benchmarks (print figures)
 *   servelab bench serve|compare ...                the load generator (vllm bench serve)
 *   servelab render MODEL_DIR --messages JSON       chat template -> prompt text and ids
 *
 * Usage errors exit 2 with one line on stderr (as Python's argparse does for
 * vLLM); startup errors exit 1 with "servelab: error: ..." on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define SERVELAB_VERSION "0.1.0"

static const char *usage =
    "usage: servelab {serve,generate,bench,render} ...\n"
    "  serve MODEL_DIR [--host H] [--port 8000] [--api-key KEY] [engine flags]   (--help for all)\n"
    "  generate MODEL_DIR (--prompt TEXT ... | --prompts-file FILE.jsonl) [--max-tokens N]\n"
    "           [--temperature T] [--ignore-eos] [--json] [engine flags]\n"
    "  bench decode|throughput MODEL_DIR [...] | bench scheduler [...]\n"
    "  bench serve [--base-url URL] [...] | bench compare BASE.json NEW.json [--gate NAME=+P% ...]\n"
    "  render MODEL_DIR --messages JSON [--chat-template PATH_OR_INLINE] [--no-generation-prompt]\n"
    "         [--json]\n"
    "  --version\n"
    "Run `servelab COMMAND --help` for a command's flags.\n";

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

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s\n", SERVELAB_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "generate")) return cli_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "render")) return cli_render(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return cli_serve(argc - 1, argv + 1);
    cli_usage_error(usage,
                    "argument command: invalid choice: '%s' (choose from 'generate', 'bench', 'render')",
                    argv[1]);
}
