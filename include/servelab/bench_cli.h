/* bench_cli.h - the two commands of the load generator, for the `servelab bench`
 * dispatcher (src/cli/bench.c). Each returns the exit status: 0 success, 1 runtime
 * error (or, for compare, a failed gate), 2 bad usage. */
#ifndef SERVELAB_BENCH_CLI_H
#define SERVELAB_BENCH_CLI_H

/* `servelab bench serve [flags]`: argv[0] is "serve". */
int bench_serve_main(int argc, char **argv);
/* `servelab bench compare BASE.json NEW.json [--gate NAME=+P% ...]`: argv[0] is "compare". */
int bench_compare_main(int argc, char **argv);

#endif
