/*
 * Settings: every FERRY_* variable the library reads, parsed and checked in one
 * place.
 *
 * The core declares its own variables below; each backend declares its own in
 * its ferry_backend.options, next to the code that uses them. ferry_init calls
 * ferry__options_load, which takes each variable's value (ferry_set_option's if
 * there is one, else the environment's), checks it against its declaration and
 * keeps the result for the session; the core and the backends read it through
 * ferry__option_number / _text / _has_word. Nothing is read from the environment
 * after that, so a session sees one consistent set of values.
 */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FERRY_BACKENDS's range names the backends of this build. */
#define FERRY_BACKEND(name) " " #name
static const char backends_range[] = "backend names separated by commas, each at most once, from:"
#include "backend_list.h"
    ;
#undef FERRY_BACKEND

static const ferry_option_def core_options[] = {
    {.name = "FERRY_BACKENDS",
     .type = FERRY_OPTION_TEXT,
     .range = backends_range,
     .description = "keep only these backends, and number their devices in this order (default: every backend)",
     .check = ferry__backends_check},
    {.name = "FERRY_DEBUG",
     .type = FERRY_OPTION_WORDS,
     .words = "leaks,engine,mpi",
     .range = "the words leaks, engine and mpi",
     .description = "leaks: ferry_shutdown() lists every buffer still live on stderr; engine: the transfer engine "
                    "prints each device's measured figures and its plan on stderr; mpi: libferry_mpi says which "
                    "path each buffer takes"},
    {.name = "FERRY_CACHE_LIMIT",
     .type = FERRY_OPTION_BYTES,
     .min = 0,
     .max = (uint64_t)1 << 62,
     .range = "0 to 2^62 bytes; suffixes K, M, G, T",
     .description = "most freed device memory kept per device for reuse (default a quarter of the device's "
                    "memory; 0 turns caching off)"},
    {.name = "FERRY_STAGE_BYTES",
     .type = FERRY_OPTION_BYTES,
     .min = 4096,
     .max = (uint64_t)1 << 32,
     .range = "4K to 4G bytes; suffixes K, M, G, T",
     .description = "piece size of transfers staged through pinned memory (default: chosen per transfer from the "
                    "device's measured figures, at most a quarter of the 64 MiB staging ring)"},
    {.name = "FERRY_STAGE_MIN",
     .type = FERRY_OPTION_BYTES,
     .min = 0,
     .max = (uint64_t)1 << 62,
     .range = "0 to 2^62 bytes; suffixes K, M, G, T",
     .description = "smallest pageable transfer staged through pinned memory; smaller ones take the driver's own "
                    "call (default: chosen from the device's measured figures; 0 turns staging off)"},
    {.name = "FERRY_COPY_THREADS",
     .type = FERRY_OPTION_COUNT,
     .min = 1,
     .max = 64,
     .range = "1 to 64",
     .description = "threads for large host copies, the caller's included (default: processors online, at most "
                    "16; 1 on machines of fewer than 4 processors)"},
    {.name = "FERRY_MPI_CUDA_AWARE",
     .type = FERRY_OPTION_SWITCH,
     .range = "0 or 1",
     .description = "libferry_mpi: 1 hands CUDA buffers' device memory to MPI (an MPI built CUDA-aware), 0 moves "
                    "them through host memory (default: what MPIX_Query_cuda_support says where the MPI has it, "
                    "else 0)"},
    {.name = "FERRY_MPI_PIECE",
     .type = FERRY_OPTION_BYTES,
     .min = (uint64_t)64 << 10,
     .max = (uint64_t)1 << 30,
     .range = "64K to 1G bytes; suffixes K, M, G, T",
     .description = "libferry_mpi: bytes of each MPI message of a large message a sender moves through host memory "
                    "piece by piece (default 4M; the receiver follows the sender's)"},
    {.name = NULL},
};

/* ---- the table of every option's state --------------------------------- */

/* This file's part of the context: every option's state. */
static ferry_options *const options = &ferry__ctx.options;

typedef ferry_shown_value shown_value;
typedef ferry_option_state option_state;

static void collect_list(const ferry_option_def *list) {
  for (const ferry_option_def *d = list; d && d->name; d++) {
    size_t i = 0;
    while (i < options->count && options->items[i].def != d)
      i++;
    if (i == options->count && options->count < FERRY__OPTION_MAX) options->items[options->count++].def = d;
  }
}

/* Brings the table up to date with the core's and every backend's declarations
 * (a test backend may have been registered since). Under the lock. */
static void collect(void) {
  collect_list(core_options);
  for (size_t b = 0;; b++) {
    const ferry_backend *backend = ferry__backend_at(b);
    if (!backend) break;
    collect_list(backend->options);
  }
}

static option_state *find(const char *name) {
  for (size_t i = 0; i < options->count; i++)
    if (strcmp(options->items[i].def->name, name) == 0) return &options->items[i];
  return NULL;
}

/* ---- parsing ------------------------------------------------------------- */

static bool all_digits(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/* Decimal digits into *out; false when they do not fit in 64 bits. */
static bool digits_value(const char *s, size_t n, uint64_t *out) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/* Is `word` (len bytes) one of the comma-separated `words`? */
static bool word_listed(const char *words, const char *word, size_t len) {
  for (const char *p = words; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && memcmp(p, word, len) == 0) return true;
    if (!end) break;
    p = end + 1;
  }
  return false;
}

/* Checks `value` (not empty) against the declaration. false with what is wrong
 * ("is negative") in why; else *number holds the parsed number (0 for text). */
static bool parse(const ferry_option_def *d, const char *value, uint64_t *number, char *why, size_t why_size) {
  *number = 0;
  size_t len = strlen(value);
  switch (d->type) {
  case FERRY_OPTION_BYTES:
  case FERRY_OPTION_COUNT: {
    if (value[0] == '-') {
      snprintf(why, why_size, "is negative");
      return false;
    }
    size_t digits = 0;
    while (digits < len && value[digits] >= '0' && value[digits] <= '9')
      digits++;
    unsigned shift = 0;
    if (d->type == FERRY_OPTION_BYTES && digits > 0 && len == digits + 1) {
      switch (value[digits]) {
      case 'K':
      case 'k': shift = 10; break;
      case 'M':
      case 'm': shift = 20; break;
      case 'G':
      case 'g': shift = 30; break;
      case 'T':
      case 't': shift = 40; break;
      default: break;
      }
    }
    if (!all_digits(value, digits) || digits + (shift ? 1 : 0) != len) {
      snprintf(why, why_size, "is not %s", d->type == FERRY_OPTION_BYTES ? "a byte count" : "a whole number");
      return false;
    }
    uint64_t v;
    bool fits = digits_value(value, digits, &v) && (!shift || v <= (UINT64_MAX >> shift));
    if (fits) v <<= shift;
    if (!fits || v < d->min || v > d->max) {
      snprintf(why, why_size, "is out of range");
      return false;
    }
    *number = v;
    return true;
  }
  case FERRY_OPTION_SWITCH:
    if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) {
      snprintf(why, why_size, "is neither 0 nor 1");
      return false;
    }
    *number = value[0] == '1';
    return true;
  case FERRY_OPTION_CHOICE:
    if (!word_listed(d->words, value, len)) {
      snprintf(why, why_size, "is not one of its values");
      return false;
    }
    break;
  case FERRY_OPTION_WORDS: {
    size_t named = 0;
    for (const char *p = value; *p;) {
      while (*p == ',' || *p == ' ')
        p++;
      const char *start = p;
      while (*p && *p != ',' && *p != ' ')
        p++;
      if (p == start) continue;
      if (!word_listed(d->words, start, (size_t)(p - start))) {
        snprintf(why, why_size, "has '%.*s', which is not one of its words", (int)(p - start), start);
        return false;
      }
      named++;
    }
    if (named == 0) {
      snprintf(why, why_size, "names nothing");
      return false;
    }
    break;
  }
  case FERRY_OPTION_TEXT: break;
  }
  return d->check ? d->check(value, why, why_size) : true;
}

static const char *source_words(ferry_option_source source) {
  return source == FERRY_OPTION_CODE ? "set by ferry_set_option" : "in the environment";
}

/* The sentence for a value the option does not take. */
static ferry_status refused(const char *fn, const ferry_option_def *d, const char *value, ferry_option_source source,
                            const char *why) {
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s=\"%s\" (%s) %s; %s takes %s", fn, d->name, value,
                     source_words(source), why, d->name, d->range);
}

static void replace(char **slot, const char *text) {
  char *copy = text ? strdup(text) : NULL;
  free(*slot);
  *slot = copy;
}

/* Where the value of option `s` comes from now: code, else the environment. */
static const char *current_value(const option_state *s, ferry_option_source *source) {
  if (s->code) {
    *source = FERRY_OPTION_CODE;
    return s->code;
  }
  const char *env = getenv(s->def->name);
  *source = env && *env ? FERRY_OPTION_ENVIRONMENT : FERRY_OPTION_DEFAULT;
  return env;
}

/* ---- the session ----------------------------------------------------------- */

ferry_status ferry__options_load(void) {
  pthread_mutex_lock(&options->lock);
  collect();
  /* Check everything first: a failed load changes nothing. */
  uint64_t numbers[FERRY__OPTION_MAX];
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < options->count && st == FERRY_OK; i++) {
    option_state *s = &options->items[i];
    ferry_option_source source;
    const char *v = current_value(s, &source);
    char why[512];
    numbers[i] = 0;
    if (v && *v && !parse(s->def, v, &numbers[i], why, sizeof why)) st = refused("ferry_init", s->def, v, source, why);
  }
  for (size_t i = 0; i < options->count && st == FERRY_OK; i++) {
    option_state *s = &options->items[i];
    const char *v = current_value(s, &s->source);
    replace(&s->value, v && *v ? v : NULL);
    s->number = numbers[i];
  }
  options->in_session = st == FERRY_OK;
  pthread_mutex_unlock(&options->lock);
  return st;
}

void ferry__options_fork(ferry_fork_phase phase) {
  if (phase == FERRY_FORK_PREPARE)
    pthread_mutex_lock(&options->lock);
  else
    pthread_mutex_unlock(&options->lock);
}

void ferry__options_end(void) {
  pthread_mutex_lock(&options->lock);
  options->in_session = false;
  pthread_mutex_unlock(&options->lock);
}

/* The session's state of `name`, read without the lock: the values only change
 * in ferry__options_load, before the session's calls can run. */
static const option_state *session_option(const char *name) {
  const option_state *s = find(name);
  return s && s->value ? s : NULL;
}

bool ferry__option_number(const char *name, uint64_t *out) {
  const option_state *s = session_option(name);
  if (!s) return false;
  *out = s->number;
  return true;
}

const char *ferry__option_text(const char *name) {
  const option_state *s = session_option(name);
  return s ? s->value : NULL;
}

bool ferry__option_has_word(const char *name, const char *word) {
  const option_state *s = session_option(name);
  if (!s) return false;
  size_t len = strlen(word);
  for (const char *p = s->value; *p;) {
    while (*p == ',' || *p == ' ')
      p++;
    const char *start = p;
    while (*p && *p != ',' && *p != ' ')
      p++;
    if ((size_t)(p - start) == len && memcmp(start, word, len) == 0) return true;
  }
  return false;
}

/* ---- the public functions ---------------------------------------------------- */

ferry_status ferry_set_option(const char *name, const char *value) {
  static const char fn[] = "ferry_set_option";
  if (atomic_load(&ferry__forked)) return ferry__fork_refusal(fn);
  if (!name) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: name is NULL", fn);
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&options->lock);
  collect();
  option_state *s = find(name);
  char why[512];
  uint64_t number;
  if (!s) {
    char known[768] = "";
    for (size_t i = 0; i < options->count; i++) {
      if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
      strncat(known, options->items[i].def->name, sizeof known - strlen(known) - 1);
    }
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: ferry has no setting named \"%s\" (it has: %s)", fn, name,
                     known);
  } else if (options->in_session) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %s takes effect only before ferry_init or after ferry_shutdown, and ferry is running", fn,
                     name);
  } else if (value && *value && !parse(s->def, value, &number, why, sizeof why)) {
    st = refused(fn, s->def, value, FERRY_OPTION_CODE, why);
  } else {
    replace(&s->code, value);
    if (value && !s->code) st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for %s's value", fn, name);
  }
  pthread_mutex_unlock(&options->lock);
  return st;
}

size_t ferry_option_count(void) {
  pthread_mutex_lock(&options->lock);
  collect();
  size_t n = options->count;
  pthread_mutex_unlock(&options->lock);
  return n;
}

/* The kept copy of `text` for option `s` (made on first use); NULL when no host
 * memory is left. Under the lock. */
static const char *shown_copy(option_state *s, const char *text) {
  for (const shown_value *v = s->shown; v; v = v->next)
    if (strcmp(v->text, text) == 0) return v->text;
  size_t n = strlen(text) + 1;
  shown_value *v = malloc(sizeof *v + n);
  if (!v) return NULL;
  memcpy(v->text, text, n);
  v->next = s->shown;
  s->shown = v;
  return v->text;
}

ferry_status ferry_option_get(size_t index, ferry_option_info *out) {
  static const char fn[] = "ferry_option_get";
  if (!out) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  pthread_mutex_lock(&options->lock);
  collect();
  if (index >= options->count) {
    size_t n = options->count;
    pthread_mutex_unlock(&options->lock);
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: setting index %zu, but there are %zu (0..%zu)", fn, index, n,
                       n ? n - 1 : 0);
  }
  option_state *s = &options->items[index];
  if (!options->in_session) {
    /* What the next ferry_init would read; kept as it is while it does not change. */
    const char *v = current_value(s, &s->source);
    if (!v || !*v) v = NULL;
    if (!(v == NULL && s->value == NULL) && !(v && s->value && strcmp(v, s->value) == 0)) replace(&s->value, v);
  }
  /* s->value is replaced by the next session's ferry_init: the caller gets a copy
   * that stays (defaults are static already). */
  const char *shown = s->value ? shown_copy(s, s->value) : s->def->default_value ? s->def->default_value : "";
  if (!shown) {
    pthread_mutex_unlock(&options->lock);
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a copy of %s's value", fn, s->def->name);
  }
  *out = (ferry_option_info){
      .name = s->def->name,
      .value = shown,
      .source = s->source,
      .range = s->def->range,
      .description = s->def->description,
  };
  pthread_mutex_unlock(&options->lock);
  return FERRY_OK;
}
