/* Subcommands of the `ferry` command, one file each. */
#ifndef FERRY_TOOLS_TOOL_H
#define FERRY_TOOLS_TOOL_H

/* `ferry bench ...` (tools/bench.c); argv holds the arguments after "bench". */
int ferry_bench_main(int argc, char **argv);

#endif
