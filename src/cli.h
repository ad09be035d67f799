/* cli.h - the subcommands of the servelab binary. Each returns the process
 * exit status: 0 on success, 1 on a runtime/startup error, 2 on bad usage. */
#ifndef SERVELAB_CLI_H
#define SERVELAB_CLI_H

int cli_generate(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_render(int argc, char **argv);
int cli_serve(int argc, char **argv);

/* Parses a non-negative integer option value; exits 2 with a message if bad. */
long long cli_parse_int(const char *flag, const char *value, long long min, long long max);
double cli_parse_double(const char *flag, const char *value, double min, double max);
_Noreturn void cli_usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
