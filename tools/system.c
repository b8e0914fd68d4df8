/* What a run of the `ferry` command ran on: the host, ferry's version and git
 * revision, the driver of a device in a few words; and its output files, opened
 * before any work. */
#include "ferry_git_revision.h"
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* A field of /proc/cpuinfo ("model name"), the first one. */
static bool cpuinfo(const char *key, char *buf, size_t size) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  size_t len = strlen(key);
  while (!found && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, len) != 0 || (line[len] != ' ' && line[len] != '\t' && line[len] != ':')) continue;
    const char *colon = strchr(line, ':');
    if (!colon) continue;
    colon += 1 + strspn(colon + 1, " \t");
    size_t n = strcspn(colon, "\n");
    if (n == 0) continue;
    snprintf(buf, size, "%.*s", (int)n, colon);
    found = true;
  }
  fclose(f);
  return found;
}

void tool_system_describe(tool_system *out) {
  memset(out, 0, sizeof *out);
  struct utsname u;
  bool named = uname(&u) == 0;
  if (named)
    snprintf(out->os, sizeof out->os, "%.40s %.100s %.40s", u.sysname, u.release, u.machine);
  else
    snprintf(out->os, sizeof out->os, "unknown");
  /* x86: "model name"; ARM: "Model" or, failing that, the machine. */
  if (!cpuinfo("model name", out->cpu, sizeof out->cpu) && !cpuinfo("Model", out->cpu, sizeof out->cpu))
    snprintf(out->cpu, sizeof out->cpu, "%.40s processor", named ? u.machine : "unknown");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  out->cpus = cpus > 0 ? cpus : 1;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm))
    strftime(out->started, sizeof out->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  else
    snprintf(out->started, sizeof out->started, "unknown");
}

const char *tool_git_revision(void) { return FERRY_GIT_REVISION[0] ? FERRY_GIT_REVISION : NULL; }

const char *tool_version_text(char buf[128]) {
  const char *git = tool_git_revision();
  if (git)
    snprintf(buf, 128, "ferry %s (git %.80s)", ferry_version(), git);
  else
    snprintf(buf, 128, "ferry %s", ferry_version());
  return buf;
}

const char *tool_doc_path(const char *name, char *buf, size_t size) {
  char exe[2048];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  struct stat st;
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      /* <prefix>/bin/../share/doc/ferry: said without the "bin/..". */
      const char *to_doc = FERRY_BIN_TO_DOC, *below = &to_doc[3];
      char *up = strrchr(exe, '/');
      if (strncmp(to_doc, "../", 3) == 0 && up && strchr(below, '.') == NULL)
        snprintf(buf, size, "%.*s/%s/%s", (int)(up - exe), exe, below, name);
      else
        snprintf(buf, size, "%s/%s/%s", exe, to_doc, name);
      if (stat(buf, &st) == 0) return buf;
    }
  }
  snprintf(buf, size, "%s/%s", FERRY_SOURCE_DOCS, name);
  if (stat(buf, &st) == 0) return buf;
  snprintf(buf, size, "%s/%s under ferry's installation prefix", FERRY_DOC_DIR, name);
  return buf;
}

bool tool_is_debugging(const ferry_device_info *info) { return strcmp(info->backend, "checked") == 0; }

const char *tool_driver_text(const ferry_driver_info *d, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  const char *parts[3] = {d->driver, d->driver_version, d->api_version};
  for (int i = 0; i < 3; i++) {
    if (!parts[i][0] || used >= size) continue;
    /* "NVIDIA 580.65.06, CUDA 13.0": the name and version, then the API. */
    const char *sep = used == 0 ? "" : i == 2 ? ", " : " ";
    int n = snprintf(buf + used, size - used, "%s%s", sep, parts[i]);
    if (n > 0) used += (size_t)n;
  }
  return buf;
}

/* "the folder 'a/b' does not exist" for a path "a/b/c.json". */
static void missing_folder(const char *path, char *why, size_t why_size) {
  char folder[1024];
  snprintf(folder, sizeof folder, "%s", path);
  char *slash = strrchr(folder, '/');
  if (slash == folder)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(folder, sizeof folder, ".");
  snprintf(why, why_size, "cannot create '%s': the folder '%s' does not exist", path, folder);
}

int tool_output_open(tool_output *out, const char *path, char *why, size_t why_size) {
  memset(out, 0, sizeof *out);
  out->path = path;
  if (strcmp(path, "-") == 0) {
    out->file = stdout;
    return 0;
  }
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(why, why_size, "'%s' is a folder; give a file name", path);
    return -1;
  }
  /* No O_TRUNC: an existing file stays as it is until the results are written. */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
  if (fd >= 0) {
    out->created = true;
  } else if (errno == EEXIST) {
    fd = open(path, O_WRONLY);
  }
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      missing_folder(path, why, why_size);
    else
      snprintf(why, why_size, "cannot write '%s': %s", path, strerror(e));
    return -1;
  }
  /* Opening is not writing: /proc/version opens for root and refuses every write, even
   * an empty one, which a regular file, a pipe or a terminal takes. */
  if (write(fd, "", 0) < 0) {
    snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
    close(fd);
    if (out->created) unlink(path);
    return -1;
  }
  out->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  out->file = fdopen(fd, "w");
  if (!out->file) {
    snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
    close(fd);
    if (out->created) unlink(path);
    return -1;
  }
  return 0;
}

FILE *tool_output_begin(tool_output *out) {
  if (!out->file) return NULL;
  if (out->regular && out->file != stdout) {
    fflush(out->file);
    if (ftruncate(fileno(out->file), 0) != 0) return NULL;
    rewind(out->file);
  }
  out->created = false; /* written: kept */
  return out->file;
}

int tool_output_close(tool_output *out) {
  if (!out->file) return 0;
  int bad = ferror(out->file);
  if (out->file == stdout) {
    if (fflush(stdout) != 0) bad = 1;
  } else if (fclose(out->file) != 0) {
    bad = 1;
  }
  out->file = NULL;
  return bad ? -1 : 0;
}

void tool_output_abandon(tool_output *out) {
  if (!out->file) return;
  if (out->file != stdout) fclose(out->file);
  out->file = NULL;
  if (out->created) unlink(out->path);
}
