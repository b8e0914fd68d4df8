/* JSON pieces that `ferry info --json` and `ferry bench --json` share (docs/JSON.md). */
#include "tool.h"

#include <inttypes.h>

void tool_json_string(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* An empty string as null. */
static void string_or_null(FILE *f, const char *s) { tool_json_string(f, s && *s ? s : NULL); }

static const char *yes(bool b) { return b ? "true" : "false"; }

void tool_json_device_fields(FILE *f, const ferry_device_info *in, const ferry_driver_info *d, bool has_driver,
                             int indent) {
  int w = indent;
  fprintf(f, "%*s\"index\": %zu,\n%*s\"backend\": ", w, "", in->index, w, "");
  tool_json_string(f, in->backend);
  fprintf(f, ",\n%*s\"backend_index\": %zu,\n%*s\"name\": ", w, "", in->backend_index, w, "");
  tool_json_string(f, in->name);
  fprintf(f,
          ",\n%*s\"total_memory\": %" PRIu64 ",\n%*s\"max_allocation\": %" PRIu64 ",\n%*s\"is_cpu\": %s,\n"
          "%*s\"zero_copy\": %s,\n%*s\"host_ptr\": %s,\n%*s\"host_ptr_alignment\": %zu,\n%*s\"debugging\": %s,\n"
          "%*s\"driver\": ",
          w, "", in->total_memory, w, "", in->max_allocation, w, "", yes(in->is_cpu), w, "", yes(in->zero_copy), w, "",
          yes(in->host_ptr), w, "", in->host_ptr_alignment, w, "", yes(tool_is_debugging(in)), w, "");
  if (!has_driver) {
    fputs("null", f);
    return;
  }
  fputs("{\"name\": ", f);
  string_or_null(f, d->driver);
  fputs(", \"version\": ", f);
  string_or_null(f, d->driver_version);
  fputs(", \"api_version\": ", f);
  string_or_null(f, d->api_version);
  fputs(", \"pci_bus_id\": ", f);
  string_or_null(f, d->pci_bus_id);
  fputs(", \"uuid\": ", f);
  string_or_null(f, d->uuid);
  fputs(", \"free_memory\": ", f);
  if (d->free_memory)
    fprintf(f, "%" PRIu64 "}", d->free_memory);
  else
    fputs("null}", f);
}

void tool_json_context(FILE *f, const tool_system *sys, int indent) {
  int w = indent;
  fprintf(f, "%*s\"ferry\": {\"version\": ", w, "");
  tool_json_string(f, ferry_version());
  fputs(", \"git_revision\": ", f);
  tool_json_string(f, tool_git_revision());
  fprintf(f, "},\n%*s\"time\": ", w, "");
  tool_json_string(f, sys->started);
  fprintf(f, ",\n%*s\"system\": {\"os\": ", w, "");
  tool_json_string(f, sys->os);
  fputs(", \"cpu\": ", f);
  tool_json_string(f, sys->cpu);
  fprintf(f, ", \"cpus\": %ld, \"memory\": %" PRIu64 "},\n%*s\"settings\": [", sys->cpus, sys->memory, w, "");
  size_t n = tool_setting_count();
  for (size_t i = 0; i < n; i++) {
    tool_setting s;
    if (!tool_setting_get(i, &s)) continue;
    fprintf(f, "%s\n%*s{\"name\": ", i ? "," : "", w + 2, "");
    tool_json_string(f, s.name);
    fputs(", \"value\": ", f);
    tool_json_string(f, s.value);
    fputs(", \"source\": ", f);
    tool_json_string(f, s.source);
    fputs("}", f);
  }
  if (n) fprintf(f, "\n%*s", w, "");
  fputs("],\n", f);
}
