/* engine_args.h - vLLM's engine flags, shared by every subcommand that runs the engine.
 *
 *   --device auto|cpu|cuda --dtype --load-format --max-model-len --block-size
 *   --gpu-memory-utilization --num-gpu-blocks-override --kv-cache-memory-bytes
 *   --[no-]enable-prefix-caching --prefix-caching-hash-algo sha256|xxhash
 *   --[no-]enable-chunked-prefill --max-num-batched-tokens
 *   --max-num-seqs --enforce-eager --cuda-graph-sizes --max-seq-len-to-capture
 *   --batching continuous|static --seed --threads --skip-warmup (lab)
 *   --speculative-config (ngram) --tokenizer DIR
 *
 * They fill an engine_config_t (engine.h), whose defaults
 * (engine_config_default) are vLLM's; engine_create does the rest.
 */
#ifndef SERVELAB_CLI_ENGINE_ARGS_H
#define SERVELAB_CLI_ENGINE_ARGS_H

#include <getopt.h>

#include "servelab/engine.h"

/* Option codes 1000.. are the engine's; merge them into a command's table
 * (cli.h cli_merge_options). */
#define ENGINE_OPT_BASE 1000
extern const struct option engine_long_options[];
extern const char *engine_usage;
/* The engine flags described one per line with their defaults, for --help. */
extern const char *engine_help;

/* Handles getopt code `c` if it is an engine flag: 1 if consumed, 0 if not.
 * Bad values exit 2 with argparse's style of message. */
int engine_args_handle(engine_config_t *a, int c, const char *value);

/* engine_create, or exit 1 with its one line ("servelab: error: ..."). */
engine_t *cli_engine_create(const engine_config_t *c);

#endif
