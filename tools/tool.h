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

/* Writes s as a JSON string, escaped; NULL as null. */
void tool_json_string(FILE *f, const char *s);
/* A device object's fields (without braces), each on a line of its own at `indent`. */
void tool_json_device_fields(FILE *f, const ferry_device_info *info, const ferry_driver_info *driver, bool has_driver,
                             int indent);
/* "ferry": {...}, "system": {...}, "settings": [...] (each line at `indent`), followed by a comma. */
void tool_json_context(FILE *f, const tool_system *sys, int indent);

/* ---- outputs ---- */

/* Checks before any work that `path` can be written (its folder exists, it is
 * not a folder, permissions), leaving no file behind; "-" is stdout. 0, or -1
 * with a sentence in why. */
int tool_check_output(const char *path, char *why, size_t why_size);

#endif
