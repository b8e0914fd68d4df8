/* Subcommands of the `ferry` command, one file each. */
#ifndef FERRY_TOOLS_TOOL_H
#define FERRY_TOOLS_TOOL_H

#include <stdio.h>

/* `ferry bench ...` (tools/bench.c); argv holds the arguments after "bench". */
int ferry_bench_main(int argc, char **argv);

/* Writes s as a JSON string, escaped; NULL as null (tools/ferry.c). */
void tool_json_string(FILE *f, const char *s);

#endif
