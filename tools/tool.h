/* What the subcommands of the `ferry` command share. */
#ifndef FERRY_TOOLS_TOOL_H
#define FERRY_TOOLS_TOOL_H

#include "ferry.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The version of the JSON that `ferry info --json` and `ferry bench --json`
 * write (docs/JSON.md); raised when a field changes meaning or goes away. */
#define TOOL_SCHEMA_VERSION 1

/* `ferry bench ...` (tools/bench.c); argv holds the arguments after "bench". */
int ferry_bench_main(int argc, char **argv);

/* ---- tools/system.c: what a run ran on ---- */

typedef struct tool_system {
  char os[192];     /* "Linux 6.1.0-18-amd64 x86_64" */
  char cpu[192];    /* "AMD EPYC 7B13 64-Core Processor" (/proc/cpuinfo), else the machine */
  long cpus;        /* processors online */
  uint64_t memory;  /* bytes of physical memory */
  char started[32]; /* UTC, "2025-01-31T12:00:00Z" */
} tool_system;

void tool_system_describe(tool_system *out);
/* ferry's git revision when the build knew it ("v0.1-12-g1a2b3c4d5e6f-dirty"), else NULL. */
const char *tool_git_revision(void);
/* "ferry 0.1.0 (git 1a2b3c4)" */
const char *tool_version_text(char buf[128]);

/* Where the documentation file `name` ("BENCH.md") is: share/doc/ferry beside the
 * installed command, else the source's docs/ (a command run from its build tree),
 * else "<prefix>/share/doc/ferry/NAME" in words. */
const char *tool_doc_path(const char *name, char *buf, size_t size);

/* Is the device one for finding bugs, not for work (the checked backend)? */
bool tool_is_debugging(const ferry_device_info *info);
/* "NVIDIA 580.65.06, CUDA 13.0": the driver in a few words; "" when nothing is known. */
const char *tool_driver_text(const ferry_driver_info *d, char *buf, size_t size);

/* ---- tools/settings.c: ferry's settings in effect ---- */

typedef struct tool_setting {
  const char *name;        /* the environment variable: "FERRY_CACHE_LIMIT" */
  const char *value;       /* "" when unset and without a default */
  const char *source;      /* "default", "environment" or "code" */
  const char *range;       /* what it accepts: "bytes (512M, 2G)" */
  const char *description; /* one line */
} tool_setting;

size_t tool_setting_count(void);
bool tool_setting_get(size_t index, tool_setting *out);

/* ---- tools/json.c: JSON pieces both subcommands write ---- */

/* A flag's bit and its name ("host-visible"): Vulkan's heap, memory and queue flags. */
typedef struct tool_flag_name {
  uint32_t bit;
  const char *name;
} tool_flag_name;
extern const tool_flag_name tool_heap_flags[2], tool_memory_flags[8], tool_queue_flags[7];

/* Writes s as a JSON string, escaped; NULL as null. */
void tool_json_string(FILE *f, const char *s);
/* A device object's fields (without braces), each on a line of its own at `indent`. */
void tool_json_device_fields(FILE *f, const ferry_device_info *info, const ferry_driver_info *driver, bool has_driver,
                             int indent);
/* "ferry": {...}, "system": {...}, "settings": [...] (each line at `indent`), followed by a comma. */
void tool_json_context(FILE *f, const tool_system *sys, int indent);

/* ---- outputs ---- */

/* An output file (--json, --csv, --plot), opened for writing before any work so
 * that a path that cannot be written (a missing folder, a folder, no permission,
 * /proc/version) ends the command at once, not after a run of minutes. */
typedef struct tool_output {
  const char *path; /* NULL: not asked for; "-": stdout */
  FILE *file;       /* open from tool_output_open until tool_output_close */
  bool created;     /* the file did not exist: removed again when nothing is written */
  bool regular;     /* a regular file: emptied when the results are written */
} tool_output;

/* Opens `path` for writing (creating it, not yet emptying it: an existing file keeps
 * its contents until tool_output_begin), and proves that it takes a write. "-" is
 * stdout. 0, or -1 with a sentence in why and nothing left behind. */
int tool_output_open(tool_output *out, const char *path, char *why, size_t why_size);
/* The stream to write the results into, the file emptied first; NULL when none was opened. */
FILE *tool_output_begin(tool_output *out);
/* Closes it; 0, or -1 when writing failed (errno says why). */
int tool_output_close(tool_output *out);
/* Nothing is written after all (bad arguments found later): closes it and removes a
 * file that tool_output_open created. */
void tool_output_abandon(tool_output *out);

#endif
