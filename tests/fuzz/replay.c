/*
 * Runs inputs through the fuzz harness (fuzz_calls.c) without libFuzzer, so
 * that the committed corpus is replayed by every build (any compiler,
 * sanitizers, valgrind): fuzz_replay FILE|DIRECTORY...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
    return 1;
  }
  uint8_t *data = NULL;
  size_t size = 0, cap = 0, n;
  uint8_t chunk[4096];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (size + n > cap) {
      cap = (size + n) * 2;
      uint8_t *grown = realloc(data, cap);
      if (!grown) abort();
      data = grown;
    }
    memcpy(data + size, chunk, n);
    size += n;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data ? data : (const uint8_t *)"", size);
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
      errors++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      errors += run_file(argv[i]);
      inputs++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      errors += run_file(path);
      inputs++;
    }
    if (dir) closedir(dir);
  }
  if (errors || inputs == 0) {
    fprintf(stderr, "fuzz_replay: %d inputs, %d could not be read\n", inputs, errors);
    return 1;
  }
  printf("fuzz_replay: %d inputs agree with the model\n", inputs);
  return 0;
}
