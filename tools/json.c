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

/* "name": value, or null when the driver gave 0. `name` may start with ", \"". */
static void number_or_null(FILE *f, const char *name, uint64_t v) {
  fprintf(f, "%s%s\": ", name[0] == ',' ? "" : "\"", name);
  if (v)
    fprintf(f, "%" PRIu64, v);
  else
    fputs("null", f);
}

const tool_flag_name tool_heap_flags[] = {{1, "device-local"}, {2, "multi-instance"}};
const tool_flag_name tool_memory_flags[] = {{1, "device-local"},     {2, "host-visible"},      {4, "host-coherent"},
                                            {8, "host-cached"},      {16, "lazily-allocated"}, {32, "protected"},
                                            {64, "device-coherent"}, {128, "device-uncached"}};
const tool_flag_name tool_queue_flags[] = {{1, "graphics"},       {2, "compute"},    {4, "transfer"},
                                           {8, "sparse-binding"}, {16, "protected"}, {32, "video-decode"},
                                           {64, "video-encode"}};

/* The flags' names as a JSON array: ["device-local", "host-visible"]. */
static void flag_names(FILE *f, uint32_t flags, const tool_flag_name *names, size_t count) {
  fputc('[', f);
  bool first = true;
  for (size_t i = 0; i < count; i++)
    if (flags & names[i].bit) {
      fprintf(f, "%s\"%s\"", first ? "" : ", ", names[i].name);
      first = false;
    }
  fputc(']', f);
}

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
    fprintf(f, "%" PRIu64 ", \"free_memory_source\": \"%s\"", d->free_memory,
            d->free_memory_from_host ? "host" : "driver");
  else
    fputs("null, \"free_memory_source\": null", f);
  fprintf(f, ",\n%*s  ", w, "");
  number_or_null(f, "compute_units", d->compute_units);
  number_or_null(f, ", \"clock_mhz", d->clock_mhz);
  number_or_null(f, ", \"max_work_group_size", d->max_work_group_size);
  number_or_null(f, ", \"local_memory", d->local_memory);
  fputs(", \"local_memory_type\": ", f);
  fputs(d->local_memory_type == 1 ? "\"local\"" : d->local_memory_type == 2 ? "\"global\"" : "null", f);
  fprintf(f, ",\n%*s  \"heaps\": [", w, "");
  for (uint32_t i = 0; i < d->heap_count; i++) {
    fprintf(f, "%s{\"size\": %" PRIu64 ", \"flags\": %" PRIu32 ", \"names\": ", i ? ", " : "", d->heaps[i].size,
            d->heaps[i].flags);
    flag_names(f, d->heaps[i].flags, tool_heap_flags, sizeof tool_heap_flags / sizeof tool_heap_flags[0]);
    fputc('}', f);
  }
  fprintf(f, "],\n%*s  \"memory_types\": [", w, "");
  for (uint32_t i = 0; i < d->memory_type_count; i++) {
    fprintf(f, "%s{\"flags\": %" PRIu32 ", \"heap\": %" PRIu32 ", \"names\": ", i ? ", " : "", d->memory_types[i].flags,
            d->memory_types[i].heap);
    flag_names(f, d->memory_types[i].flags, tool_memory_flags, sizeof tool_memory_flags / sizeof tool_memory_flags[0]);
    fputc('}', f);
  }
  fprintf(f, "],\n%*s  \"queue_families\": [", w, "");
  for (uint32_t i = 0; i < d->queue_family_count; i++) {
    fprintf(f, "%s{\"flags\": %" PRIu32 ", \"count\": %" PRIu32 ", \"names\": ", i ? ", " : "",
            d->queue_families[i].flags, d->queue_families[i].count);
    flag_names(f, d->queue_families[i].flags, tool_queue_flags, sizeof tool_queue_flags / sizeof tool_queue_flags[0]);
    fputc('}', f);
  }
  fputs("]}", f);
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
