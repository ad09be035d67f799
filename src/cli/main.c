/* main.c - the servelab command line: dispatches to subcommands.
 *
 *   servelab serve MODEL_DIR ...                    the OpenAI-compatible server
 *   servelab generate MODEL_DIR --prompt TEXT ...   offline generation
 *   servelab bench decode|throughput|scheduler ...  benchmarks (print figures)
 *   servelab bench serve|compare ...                the load generator (vllm bench serve)
 *   servelab render MODEL_DIR --messages JSON       chat template -> prompt text and ids
 *   servelab eval perplexity MODEL_DIR --text FILE  perplexity, sliding window (eval.c)
 *   servelab diagnose --url URL [--window 30s] ...  the playbooks' triage of a live server (diagnose.c)
 *   servelab scenario list|show|run ...          the lab's incidents, reproduced and judged (scenario.c)
 *
 * Usage errors exit 2 with one line on stderr (as Python's argparse does for
 * vLLM); startup errors exit 1 with "servelab: error: ..." on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/core.h"

static const char *usage =
    "usage: servelab {serve,generate,bench,render,eval,diagnose,scenario} ...\n"
    "  serve MODEL_DIR [--host H] [--port 8000] [--api-key KEY] [engine flags]   (--help for all)\n"
    "  generate MODEL_DIR (--prompt TEXT ... | --prompts-file FILE.jsonl) [--max-tokens N]\n"
    "           [--temperature T] [--ignore-eos] [--json] [engine flags]\n"
    "  bench decode|throughput MODEL_DIR [...] | bench scheduler [...]\n"
    "  bench serve [--base-url URL] [...] | bench compare BASE.json NEW.json [--gate NAME=+P% ...]\n"
    "  render MODEL_DIR --messages JSON [--chat-template PATH_OR_INLINE] [--no-generation-prompt]\n"
    "         [--json]\n"
    "  eval perplexity MODEL_DIR (--text FILE | --tokens FILE) [--max-model-len N] [--stride S]\n"
    "                  [engine flags]\n"
    "  diagnose (--url URL | --prometheus URL) [--window 30s] [--baseline FILE] [--json] [...]\n"
    "  scenario list | show NAME | run (NAME ... | --all) [--remedy] [--json]\n"
    "  --version\n"
    "Run `servelab COMMAND --help` for a command's flags.\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s\n", SERVELAB_VERSION);
        return 0;
    }
    /* vLLM's short alias (argparse accepts a multi-letter short option; getopt does not). */
    for (int i = 2; i < argc; i++) {
        static char tp_long[] = "--tensor-parallel-size", q_long[] = "--quantization";
        if (!strcmp(argv[i], "-tp")) argv[i] = tp_long;
        if (!strcmp(argv[i], "-q")) argv[i] = q_long;
    }
    if (!strcmp(argv[1], "generate")) return cli_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "render")) return cli_render(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return cli_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cli_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "diagnose")) return cli_diagnose(argc - 1, argv + 1);
    if (!strcmp(argv[1], "scenario")) return cli_scenario(argc - 1, argv + 1);
    cli_usage_error(usage,
                    "argument command: invalid choice: '%s' (choose from 'serve', 'generate', 'bench', 'render', 'eval', 'diagnose', 'scenario')",
                    argv[1]);
}
