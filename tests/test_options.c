/*
 * Settings: every FERRY_* variable the library reads is checked at ferry_init
 * (a value that does not parse, a negative one, one out of range, a word the
 * variable does not know: FERRY_ERROR_INVALID_ARGUMENT naming the variable, the
 * value and its range), FERRY_BACKENDS that names nothing, ferry_set_option before
 * and after ferry_init, its precedence over the environment, and the listing
 * (ferry_option_count, ferry_option_get).
 *
 * Most sessions keep only the native backend (set from code, which wins over the
 * environment), so that starting ferry is quick; every backend's variables are
 * checked all the same, enabled or not.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct variable_case {
  const char *name;
  const char *good;   /* a value it takes */
  const char *bad[6]; /* values it refuses, NULL-terminated */
  const char *why[6]; /* a word the sentence must hold for each, or NULL */
} variable_case;

static const variable_case cases[] = {
    {"FERRY_BACKENDS",
     "native",
     {",,,", " , ", "nope", "native,native", "native,cuda-typo"},
     {"names no backend", "names no backend", "'nope'", "twice", "'cuda-typo'"}},
    {"FERRY_DEBUG", "leaks", {"leak", ",", "leaks,verbose"}, {"'leak'", "names nothing", "'verbose'"}},
    {"FERRY_CACHE_LIMIT",
     "64M",
     {"-1", "abc", "12X", "99999999999999999999", "8388608T", " 5"},
     {"negative", "not a byte count", "not a byte count", "out of range", "out of range", "not a byte count"}},
    {"FERRY_STAGE_BYTES",
     "1M",
     {"-1", "x", "1K", "8G", "1.5M"},
     {"negative", "not a byte count", "out of range", "out of range", "not a byte count"}},
    {"FERRY_STAGE_MIN",
     "0",
     {"-5", "1.5M", "4611686018427387905", "4M4"},
     {"negative", "not a byte count", "out of range", "not a byte count"}},
    {"FERRY_COPY_THREADS",
     "2",
     {"0", "65", "-2", "two", "4K"},
     {"out of range", "out of range", "negative", "not a whole number", "not a whole number"}},
    {"FERRY_MPI_CUDA_AWARE", "1", {"2", "yes"}, {"neither 0 nor 1", "neither 0 nor 1"}},
    {"FERRY_MPI_PIECE", "16M", {"4K", "2G", "x"}, {"out of range", "out of range", "not a byte count"}},
    {"FERRY_CUDA_LIBRARY", "libcuda.so.1", {NULL}, {NULL}},
    {"FERRY_CUDA_H2D", "bounce", {"fast", "STREAM", "stream,bounce"}, {"not one of", "not one of", "not one of"}},
    {"FERRY_CUDA_PEER", "0", {"2", "yes", "-1"}, {"neither 0 nor 1", "neither 0 nor 1", "neither 0 nor 1"}},
    {"FERRY_OBJC_LIBRARY", "/usr/lib/libobjc.A.dylib", {NULL}, {NULL}},
    {"FERRY_METAL_LIBRARY", "/System/Library/Frameworks/Metal.framework/Metal", {NULL}, {NULL}},
    {"FERRY_OPENCL_LIBRARY", "libOpenCL.so.1", {NULL}, {NULL}},
    {"FERRY_OPENCL_PIPELINE", "0", {"2", "on"}, {"neither 0 nor 1", "neither 0 nor 1"}},
    {"FERRY_VULKAN_LIBRARY", "libvulkan.so.1", {NULL}, {NULL}},
    {"FERRY_VULKAN_COPY_UNROLL",
     "4",
     {"0", "17", "-1", "x"},
     {"out of range", "out of range", "negative", "not a whole number"}},
    {"FERRY_VULKAN_COPY_GROUPS", "1024", {"0", "4294967296", "-3"}, {"out of range", "out of range", "negative"}},
    {"FERRY_VULKAN_SPIN_US", "0", {"-1", "60000001", "1ms"}, {"negative", "out of range", "not a whole number"}},
    {"FERRY_VULKAN_DEBUG", "staging", {"fast", "staging,fast", ","}, {"'fast'", "'fast'", "names nothing"}},
};
#define CASE_COUNT (sizeof cases / sizeof cases[0])

/* The listing's entry for `name`; false when there is none. */
static bool option_named(const char *name, ferry_option_info *out) {
  for (size_t i = 0; i < ferry_option_count(); i++)
    if (ferry_option_get(i, out) == FERRY_OK && strcmp(out->name, name) == 0) return true;
  return false;
}

static void every_variable_checked(void) {
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  for (size_t c = 0; c < CASE_COUNT; c++) {
    const variable_case *v = &cases[c];
    harness_context = v->name;
    ferry_option_info info;
    CHECK_MSG(option_named(v->name, &info), "%s is not listed by ferry_option_get", v->name);
    char range[512];
    snprintf(range, sizeof range, "%s", info.range ? info.range : "?");
    bool is_backends = strcmp(v->name, "FERRY_BACKENDS") == 0;
    for (size_t b = 0; b < 6 && v->bad[b]; b++) {
      /* From the environment: ferry_init refuses, and the library stays down. */
      setenv(v->name, v->bad[b], 1);
      if (is_backends) CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
      CHECK_STATUS(ferry_init(), FERRY_ERROR_INVALID_ARGUMENT);
      char quoted[128];
      snprintf(quoted, sizeof quoted, "%s=\"%s\"", v->name, v->bad[b]);
      CHECK_ERROR_HAS(quoted);
      CHECK_ERROR_HAS(range);
      CHECK_ERROR_HAS("in the environment");
      if (v->why[b]) CHECK_ERROR_HAS(v->why[b]);
      CHECK(ferry_device_count() == 0);
      ferry_device *d = NULL;
      CHECK_STATUS(ferry_device_get(0, &d), FERRY_ERROR_INVALID_ARGUMENT);
      CHECK_ERROR_HAS(v->name);
      unsetenv(v->name);
      /* From code: refused at once, with the same words. */
      CHECK_STATUS(ferry_set_option(v->name, v->bad[b]), FERRY_ERROR_INVALID_ARGUMENT);
      CHECK_ERROR_HAS(quoted);
      CHECK_ERROR_HAS(range);
      CHECK_ERROR_HAS("set by ferry_set_option");
      if (v->why[b]) CHECK_ERROR_HAS(v->why[b]);
      if (is_backends) CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
    }
    /* A value it takes starts ferry, and the listing shows it. */
    setenv(v->name, v->good, 1);
    if (!is_backends) {
      CHECK_OK(ferry_init());
    } else {
      CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
      CHECK_OK(ferry_init());
    }
    CHECK(option_named(v->name, &info));
    CHECK_MSG(strcmp(info.value, v->good) == 0, "%s shows \"%s\", expected \"%s\"", v->name, info.value, v->good);
    CHECK(info.source == FERRY_OPTION_ENVIRONMENT);
    ferry_shutdown();
    unsetenv(v->name);
    if (is_backends) CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  }
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
}

static void backends_lists(void) {
  harness_context = "FERRY_BACKENDS lists";
  /* Blanks and empty entries around names are fine; an empty value is unset. */
  setenv("FERRY_BACKENDS", " checked ,, native,", 1);
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 2);
  ferry_shutdown();
  setenv("FERRY_BACKENDS", "", 1);
  ferry_option_info info;
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(info.source == FERRY_OPTION_DEFAULT && strcmp(info.value, "") == 0);
  unsetenv("FERRY_BACKENDS");
  /* A list that names nothing was once taken as "start with no devices". */
  setenv("FERRY_BACKENDS", ",,,", 1);
  CHECK_STATUS(ferry_init(), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("names no backend");
  CHECK_ERROR_HAS("native"); /* the range lists the backends of this build */
  CHECK(ferry_device_count() == 0);
  /* Fixing the variable is enough: the next call starts the library. */
  setenv("FERRY_BACKENDS", "native", 1);
  CHECK(ferry_device_count() == 1);
  ferry_shutdown();
  unsetenv("FERRY_BACKENDS");
}

static void set_option_rules(void) {
  harness_context = "ferry_set_option";
  CHECK_STATUS(ferry_set_option(NULL, "1"), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_set_option("FERRY_NO_SUCH_THING", "1"), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("FERRY_NO_SUCH_THING");
  CHECK_ERROR_HAS("FERRY_CACHE_LIMIT"); /* the names it has */
  CHECK_STATUS(ferry_set_option("FERRY_REQUIRE_BACKENDS", "native"), FERRY_ERROR_INVALID_ARGUMENT); /* the tests' own */

  /* Before ferry_init it is taken; while ferry runs it is refused and changes nothing. */
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 1);
  CHECK_STATUS(ferry_set_option("FERRY_BACKENDS", "checked"), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("only before ferry_init or after ferry_shutdown");
  CHECK_STATUS(ferry_set_option("FERRY_BACKENDS", NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_set_option("FERRY_CACHE_LIMIT", "-1"), FERRY_ERROR_INVALID_ARGUMENT);
  ferry_option_info info;
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(strcmp(info.value, "native") == 0 && info.source == FERRY_OPTION_CODE);
  ferry_shutdown();
  /* After ferry_shutdown it is taken again, and kept for every later session. */
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "checked,native"));
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 2);
  ferry_shutdown();
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 2);
  ferry_shutdown();
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL)); /* removing what is not there is fine */
}

static void precedence(void) {
  harness_context = "precedence";
  ferry_option_info info;
  setenv("FERRY_BACKENDS", "checked", 1);
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(info.source == FERRY_OPTION_ENVIRONMENT && strcmp(info.value, "checked") == 0);
  /* Code wins over the environment. */
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(info.source == FERRY_OPTION_CODE && strcmp(info.value, "native") == 0);
  CHECK_OK(ferry_init());
  ferry_device_info d;
  CHECK(ferry_device_count() == 1);
  CHECK_OK(ferry_device_info_get(ferry_device_best(), &d));
  CHECK(strcmp(d.backend, "native") == 0);
  /* While ferry runs, the listing shows what ferry_init read, whatever the environment says now. */
  setenv("FERRY_BACKENDS", "native,checked", 1);
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(info.source == FERRY_OPTION_CODE && strcmp(info.value, "native") == 0);
  ferry_shutdown();
  /* NULL brings the environment back. */
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
  CHECK(option_named("FERRY_BACKENDS", &info));
  CHECK(info.source == FERRY_OPTION_ENVIRONMENT && strcmp(info.value, "native,checked") == 0);
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 2);
  ferry_shutdown();
  /* The empty string from code means the default, whatever the environment says. */
  setenv("FERRY_CACHE_LIMIT", "-1", 1);
  CHECK_OK(ferry_set_option("FERRY_CACHE_LIMIT", ""));
  CHECK_OK(ferry_init()); /* the environment's bad value is not read */
  CHECK(option_named("FERRY_CACHE_LIMIT", &info));
  CHECK(info.source == FERRY_OPTION_CODE && strcmp(info.value, "") == 0);
  ferry_shutdown();
  CHECK_OK(ferry_set_option("FERRY_CACHE_LIMIT", NULL));
  CHECK_STATUS(ferry_init(), FERRY_ERROR_INVALID_ARGUMENT);
  unsetenv("FERRY_CACHE_LIMIT");
  unsetenv("FERRY_BACKENDS");
}

/* A setting from code takes effect like the environment's: FERRY_DEBUG=leaks. */
static void code_setting_takes_effect(void) {
  harness_context = "FERRY_DEBUG from code";
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  CHECK_OK(ferry_set_option("FERRY_DEBUG", "leaks"));
  char path[] = "/tmp/ferry-options-XXXXXX";
  int fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  ferry_buffer b;
  CHECK_OK(ferry_alloc(ferry_device_best(), 12, FERRY_INT32, &b));
  ferry_shutdown();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[4096];
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  text[got > 0 ? got : 0] = '\0';
  close(fd);
  unlink(path);
  CHECK_MSG(strstr(text, "12 int32 elements") != NULL, "no leak report: %s", text);
  CHECK_OK(ferry_set_option("FERRY_DEBUG", NULL));
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
}

static void listing(void) {
  harness_context = "listing";
  size_t n = ferry_option_count();
  CHECK(n >= CASE_COUNT);
  for (size_t i = 0; i < n; i++) {
    ferry_option_info info;
    CHECK_OK(ferry_option_get(i, &info));
    CHECK(info.name && strncmp(info.name, "FERRY_", 6) == 0);
    CHECK(info.value && info.range && info.range[0] && info.description && info.description[0]);
    for (size_t k = 0; k < i; k++) {
      ferry_option_info other;
      ferry_option_get(k, &other);
      CHECK_MSG(strcmp(other.name, info.name) != 0, "%s is listed twice", info.name);
    }
    bool tested = false;
    for (size_t c = 0; c < CASE_COUNT; c++)
      tested = tested || strcmp(cases[c].name, info.name) == 0;
    if (!tested) printf("note: %s has no case in test_options.c\n", info.name);
  }
  ferry_option_info info;
  CHECK_STATUS(ferry_option_get(n, &info), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_option_get(0, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  /* Defaults show as text where there is one, "" where it depends. */
  CHECK(option_named("FERRY_CUDA_LIBRARY", &info));
  CHECK(info.source == FERRY_OPTION_DEFAULT && strcmp(info.value, "libcuda.so.1") == 0);
  CHECK(option_named("FERRY_STAGE_BYTES", &info));
  CHECK(info.source == FERRY_OPTION_DEFAULT && strcmp(info.value, "") == 0);
  CHECK(option_named("FERRY_CACHE_LIMIT", &info));
  CHECK(info.source == FERRY_OPTION_DEFAULT && strcmp(info.value, "") == 0);
  CHECK(strstr(info.range, "2^62") != NULL);
  /* Listing does not start ferry. */
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
}

/* The listing's strings are the caller's to keep: another thread that starts
 * ferry again (which reads the settings anew) or lists them too must not end
 * them. The lister reads every byte of each value it was given, after other
 * calls ran, while the main thread sets, starts and shuts down; under ASan a
 * string freed under it is a heap-use-after-free. */
static _Atomic bool lister_stop;
static _Atomic long lister_bad;
static const char *const limits[] = {"1M", "2M", "3M", "4M", ""};

static void *lister(void *arg) {
  (void)arg;
  size_t n = ferry_option_count();
  const char *kept[128] = {0};
  while (!atomic_load(&lister_stop)) {
    for (size_t i = 0; i < n && i < 128; i++) {
      ferry_option_info info;
      if (ferry_option_get(i, &info) != FERRY_OK) {
        atomic_fetch_add(&lister_bad, 1);
        continue;
      }
      /* The value this thread was given last time for this setting: still readable. */
      if (kept[i] && strlen(kept[i]) > 4096) atomic_fetch_add(&lister_bad, 1);
      kept[i] = info.value;
      if (strcmp(info.name, "FERRY_CACHE_LIMIT") == 0) {
        bool known = false;
        for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++)
          known = known || strcmp(info.value, limits[k]) == 0;
        if (!known) atomic_fetch_add(&lister_bad, 1);
      }
    }
  }
  return NULL;
}

static void listing_while_others_restart(void) {
  harness_context = "listing while another thread restarts ferry";
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, lister, NULL) == 0);
  for (int i = 0; i < 200; i++) {
    CHECK_OK(ferry_set_option("FERRY_CACHE_LIMIT", limits[i % 4]));
    CHECK_OK(ferry_init());
    ferry_shutdown();
  }
  atomic_store(&lister_stop, true);
  pthread_join(t, NULL);
  CHECK(atomic_load(&lister_bad) == 0);
  CHECK_OK(ferry_set_option("FERRY_CACHE_LIMIT", NULL));
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
}

int main(void) {
  /* The test sets these itself. */
  for (size_t c = 0; c < CASE_COUNT; c++)
    unsetenv(cases[c].name);
  listing();
  set_option_rules();
  precedence();
  backends_lists();
  code_setting_takes_effect();
  every_variable_checked();
  listing_while_others_restart();
  harness_context = "";
  return harness_finish("options");
}
