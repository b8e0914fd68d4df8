/*
 * fake_metal: the fake is as strict as it claims (tests/fake_metal/fake_metal.c).
 * A fake that let a mistake through would let the backend's mistake through, so
 * each rule is broken here on purpose, in a child process, and the child must
 * stop with the fake's sentence; and the behaviour tests rely on is checked:
 * managed buffers show stale bytes without didModifyRange: / synchronizeResource:,
 * command buffers complete late, bytesNoCopy refuses memory off pages, failures
 * are injected, objects are counted, shared events order command buffers across
 * queues.
 *
 * It drives the fake through the same wrappers the backend uses (metal_objc.h),
 * plus the methods the backend does not send (managed storage, shared events). Run with
 * FERRY_OBJC_LIBRARY / FERRY_METAL_LIBRARY naming the fake, FAKE_METAL_DEVICES=2
 * and FAKE_METAL_DELAY_US set; skips (77) on Apple's Metal.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "backends/metal/metal_objc.h"
#include "fake_metal/fake_metal.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static fake_metal_counts_fn counts_get;
static fake_metal_inject_fn inject;
static const ferry_metal_runtime *rt = &ferry__metal_rt;

static fake_metal_counts counts(void) {
  fake_metal_counts c;
  counts_get(&c);
  return c;
}

/* Device i, retained. */
static mtl_id device(size_t i) {
  mtl_id all = rt->copy_all_devices();
  mtl_id d = mtl_retain(mtl_object_at_index(all, i));
  mtl_release(all);
  return d;
}

/* didModifyRange: takes an NSRange: two NSUInteger, passed as two integer arguments. */
static void did_modify_range(mtl_id buffer, mtl_uint location, mtl_uint length) {
  ((void (*)(mtl_id, mtl_sel, mtl_uint, mtl_uint))rt->msg_send)(buffer, rt->sel_register_name("didModifyRange:"),
                                                                location, length);
}

static void synchronize_resource(mtl_id encoder, mtl_id resource) {
  ((void (*)(mtl_id, mtl_sel, mtl_id))rt->msg_send)(encoder, rt->sel_register_name("synchronizeResource:"), resource);
}

/* Shared events: signaledValue and the values are uint64_t ("Q"). */
static mtl_id new_shared_event(mtl_id device) {
  return ((mtl_id(*)(mtl_id, mtl_sel))rt->msg_send)(device, rt->sel_register_name("newSharedEvent"));
}

static uint64_t signaled_value(mtl_id event) {
  return ((uint64_t(*)(mtl_id, mtl_sel))rt->msg_send)(event, rt->sel_register_name("signaledValue"));
}

static void set_signaled_value(mtl_id event, uint64_t value) {
  ((void (*)(mtl_id, mtl_sel, uint64_t))rt->msg_send)(event, rt->sel_register_name("setSignaledValue:"), value);
}

static void encode_wait(mtl_id command_buffer, mtl_id event, uint64_t value) {
  ((void (*)(mtl_id, mtl_sel, mtl_id, uint64_t))rt->msg_send)(
      command_buffer, rt->sel_register_name("encodeWaitForEvent:value:"), event, value);
}

static void encode_signal(mtl_id command_buffer, mtl_id event, uint64_t value) {
  ((void (*)(mtl_id, mtl_sel, mtl_id, uint64_t))rt->msg_send)(
      command_buffer, rt->sel_register_name("encodeSignalEvent:value:"), event, value);
}

/* One copy, committed and waited for; inside the caller's pool. */
static mtl_uint blit(mtl_id queue, mtl_id src, size_t so, mtl_id dst, size_t doff, size_t n) {
  mtl_id cb = mtl_command_buffer(queue);
  mtl_id enc = mtl_blit_command_encoder(cb);
  mtl_copy_from_buffer(enc, src, so, dst, doff, n);
  mtl_end_encoding(enc);
  mtl_commit(cb);
  mtl_wait_until_completed(cb);
  return mtl_status(cb);
}

/* ---- misuse: each in a child, which must abort with the sentence ----------------------------------- */

typedef void (*scenario)(void);

static void expect_abort(const char *name, scenario run, const char *sentence) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    CHECK_MSG(false, "pipe failed");
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    run();
    fprintf(stderr, "the scenario ran to its end\n");
    _exit(0);
  }
  close(pipefd[1]);
  char out[4096];
  size_t used = 0;
  ssize_t n;
  while ((n = read(pipefd[0], out + used, sizeof out - 1 - used)) > 0)
    used += (size_t)n;
  out[used] = '\0';
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  CHECK_MSG(aborted, "%s: the child was not stopped by abort (status 0x%x); it said: %s", name, status, out);
  CHECK_MSG(strstr(out, "fake_metal: ") && strstr(out, sentence), "%s: the fake's words lack \"%s\": %s", name,
            sentence, out);
  char *line = strstr(out, "fake_metal: ");
  if (line) line[strcspn(line, "\n")] = '\0';
  printf("  %-38s %s\n", name, aborted && line ? line : "NOT STOPPED");
}

static void unknown_selector(void) {
  (void)rt->pool_push();
  mtl_id d = device(0);
  ((void (*)(mtl_id, mtl_sel))rt->msg_send)(d, rt->sel_register_name("makeCoffee"));
}

static void message_to_released(void) {
  void *pool = rt->pool_push();
  mtl_id b = mtl_new_buffer_with_length(device(0), 64, MTL_RESOURCE_STORAGE_SHARED);
  mtl_release(b);
  (void)mtl_contents(b);
  rt->pool_pop(pool);
}

static mtl_id open_encoder(mtl_id *out_cb, mtl_id *out_buffer) {
  mtl_id d = device(0), q = mtl_new_command_queue(d);
  *out_buffer = mtl_new_buffer_with_length(d, 64, MTL_RESOURCE_STORAGE_PRIVATE);
  *out_cb = mtl_command_buffer(q);
  return mtl_blit_command_encoder(*out_cb);
}

static void encode_after_end(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_end_encoding(e);
  mtl_copy_from_buffer(e, b, 0, b, 32, 16);
}

static void commit_twice(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_copy_from_buffer(e, b, 0, b, 32, 16);
  mtl_end_encoding(e);
  mtl_commit(cb);
  mtl_commit(cb);
}

static void commit_while_encoding(void) {
  (void)rt->pool_push();
  mtl_id cb, b;
  (void)open_encoder(&cb, &b);
  mtl_commit(cb);
}

static void encoder_not_ended(void) {
  void *pool = rt->pool_push();
  mtl_id cb, b;
  (void)open_encoder(&cb, &b);
  rt->pool_pop(pool);
}

static void two_encoders(void) {
  (void)rt->pool_push();
  mtl_id cb, b;
  (void)open_encoder(&cb, &b);
  (void)mtl_blit_command_encoder(cb);
}

static void misaligned_blit(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_copy_from_buffer(e, b, 1, b, 32, 16);
}

static void odd_size_blit(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_copy_from_buffer(e, b, 0, b, 32, 6);
}

static void overlapping_blit(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_copy_from_buffer(e, b, 0, b, 8, 16);
}

static void blit_past_end(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_copy_from_buffer(e, b, 0, b, 56, 16);
}

static void other_device_buffer(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_id other = mtl_new_buffer_with_length(device(1), 64, MTL_RESOURCE_STORAGE_PRIVATE);
  mtl_copy_from_buffer(e, other, 0, b, 0, 16);
}

static void wait_uncommitted(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_end_encoding(e);
  mtl_wait_until_completed(cb);
}

static void no_pool(void) {
  mtl_id q = mtl_new_command_queue(device(0));
  (void)mtl_command_buffer(q);
}

static void pools_out_of_order(void) {
  void *outer = rt->pool_push();
  void *inner = rt->pool_push();
  (void)inner;
  rt->pool_pop(outer);
}

static void *leave_pool(void *arg) {
  (void)arg;
  (void)rt->pool_push();
  return NULL;
}

static void thread_exits_in_pool(void) {
  pthread_t t;
  pthread_create(&t, NULL, leave_pool, NULL);
  pthread_join(t, NULL);
}

static void over_release(void) {
  mtl_id b = mtl_new_buffer_with_length(device(0), 64, MTL_RESOURCE_STORAGE_SHARED);
  mtl_release(b);
  mtl_release(b);
}

static void memoryless_buffer(void) { (void)mtl_new_buffer_with_length(device(0), 64, (mtl_uint)3 << 4); }

static void wait_while_encoding(void) {
  (void)rt->pool_push();
  mtl_id cb, b;
  (void)open_encoder(&cb, &b);
  encode_wait(cb, new_shared_event(device(0)), 1);
}

static void signal_after_commit(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_end_encoding(e);
  mtl_commit(cb);
  encode_signal(cb, new_shared_event(device(0)), 1);
}

static void released_event(void) {
  (void)rt->pool_push();
  mtl_id cb, b, e = open_encoder(&cb, &b);
  mtl_end_encoding(e);
  mtl_id event = new_shared_event(device(0));
  mtl_release(event);
  encode_signal(cb, event, 1);
}

static void misuse_cases(void) {
  printf("misuse stops the program:\n");
  expect_abort("unknown selector", unknown_selector, "-[FakeMTLDevice makeCoffee]: unrecognized selector");
  expect_abort("message to a released object", message_to_released, "message to a deallocated FakeMTLBuffer");
  expect_abort("encoding after endEncoding", encode_after_end, "encoding after endEncoding");
  expect_abort("commit twice", commit_twice, "committed already");
  expect_abort("commit while encoding", commit_while_encoding, "still encoding");
  expect_abort("encoder released without endEncoding", encoder_not_ended, "without endEncoding");
  expect_abort("two encoders at once", two_encoders, "another encoder is still encoding");
  expect_abort("blit offset off a word", misaligned_blit, "must be multiples of 4 on macOS");
  expect_abort("blit size off a word", odd_size_blit, "must be multiples of 4 on macOS");
  expect_abort("overlapping blit", overlapping_blit, "overlapping ranges");
  expect_abort("blit past the end", blit_past_end, "past the end");
  expect_abort("buffer of another device", other_device_buffer, "belongs to device 1");
  expect_abort("wait before commit", wait_uncommitted, "never committed");
  expect_abort("autorelease with no pool", no_pool, "no autorelease pool in place");
  expect_abort("pools popped out of order", pools_out_of_order, "innermost pool");
  expect_abort("thread exits inside a pool", thread_exits_in_pool, "exited with 1 autorelease pool");
  expect_abort("released too often", over_release, "deallocated FakeMTLBuffer");
  expect_abort("memoryless buffer", memoryless_buffer, "storage mode 3");
  expect_abort("event wait while encoding", wait_while_encoding,
               "encodeWaitForEvent:value:: a blit command encoder is still encoding");
  expect_abort("event signal after commit", signal_after_commit,
               "encodeSignalEvent:value:: the command buffer was committed");
  expect_abort("released event", released_event, "deallocated FakeMTLSharedEvent");
}

/* ---- what the tests rely on ---------------------------------------------------------------------- */

static void behaviour(void) {
  printf("behaviour:\n");
  void *pool = rt->pool_push();
  long live0 = counts().live_objects;
  mtl_id d = device(0), q = mtl_new_command_queue(d);
  CHECK(counts().live_objects == live0 + 2);

  /* nil receivers answer nil; respondsToSelector: knows the classes. */
  CHECK(mtl_contents(MTL_NIL) == NULL);
  CHECK(mtl_responds_to_selector(d, rt->sel[MTL_SEL_mtl_new_command_queue]));
  CHECK(!mtl_responds_to_selector(d, rt->sel[MTL_SEL_mtl_contents]));

  /* Late completion: committed, not yet completed, then completed after the wait. */
  mtl_id shared = mtl_new_buffer_with_length(d, 4096, MTL_RESOURCE_STORAGE_SHARED);
  mtl_id priv = mtl_new_buffer_with_length(d, 4096, MTL_RESOURCE_STORAGE_PRIVATE);
  CHECK(mtl_contents(priv) == NULL);
  unsigned char *s = mtl_contents(shared);
  memset(s, 7, 4096);
  mtl_id cb = mtl_command_buffer(q), e = mtl_blit_command_encoder(cb);
  mtl_copy_from_buffer(e, shared, 0, priv, 0, 4096);
  mtl_end_encoding(e);
  mtl_commit(cb);
  CHECK_MSG(mtl_status(cb) == MTL_CB_COMMITTED, "status %lu right after commit (FAKE_METAL_DELAY_US set?)",
            (unsigned long)mtl_status(cb));
  mtl_wait_until_completed(cb);
  CHECK(mtl_status(cb) == MTL_CB_COMPLETED && mtl_error(cb) == MTL_NIL);
  memset(s, 0, 4096);
  CHECK(blit(q, priv, 0, shared, 0, 4096) == MTL_CB_COMPLETED);
  CHECK(s[0] == 7 && s[4095] == 7);

  /* Managed buffers: two copies. */
  mtl_id managed = mtl_new_buffer_with_length(d, 4096, MTL_RESOURCE_STORAGE_MANAGED);
  unsigned char *m = mtl_contents(managed);
  memset(m, 1, 4096);
  CHECK(blit(q, managed, 0, shared, 0, 4096) == MTL_CB_COMPLETED);
  CHECK_MSG(s[0] != 1, "without didModifyRange: the GPU saw the CPU's write");
  did_modify_range(managed, 0, 4096);
  CHECK(blit(q, managed, 0, shared, 0, 4096) == MTL_CB_COMPLETED);
  CHECK(s[0] == 1 && s[4095] == 1);
  memset(s, 9, 4096);
  CHECK(blit(q, shared, 0, managed, 0, 4096) == MTL_CB_COMPLETED);
  CHECK_MSG(m[0] == 1, "without synchronizeResource: the CPU saw the GPU's write");
  cb = mtl_command_buffer(q);
  e = mtl_blit_command_encoder(cb);
  synchronize_resource(e, managed);
  mtl_end_encoding(e);
  mtl_commit(cb);
  mtl_wait_until_completed(cb);
  CHECK(m[0] == 9 && m[4095] == 9);

  /* bytesNoCopy: whole pages only. */
  long page = sysconf(_SC_PAGESIZE);
  const char *fake_page = getenv("FAKE_METAL_PAGE");
  if (fake_page && *fake_page) page = strtol(fake_page, NULL, 0);
  unsigned char *host = harness_aligned((size_t)page, 2 * (size_t)page);
  fake_metal_counts c0 = counts();
  CHECK(mtl_new_buffer_with_bytes_no_copy(d, host + 64, (size_t)page, MTL_RESOURCE_STORAGE_SHARED, NULL) == MTL_NIL);
  CHECK(mtl_new_buffer_with_bytes_no_copy(d, host, (size_t)page + 4, MTL_RESOURCE_STORAGE_SHARED, NULL) == MTL_NIL);
  CHECK(counts().no_copy_refused == c0.no_copy_refused + 2);
  mtl_id wrapped = mtl_new_buffer_with_bytes_no_copy(d, host, 2 * (size_t)page, MTL_RESOURCE_STORAGE_SHARED, NULL);
  CHECK(wrapped && mtl_contents(wrapped) == host);

  /* Injected failures. */
  inject("new-buffer", 1, 1);
  mtl_id ok = mtl_new_buffer_with_length(d, 64, MTL_RESOURCE_STORAGE_SHARED);
  CHECK(ok != MTL_NIL);
  CHECK(mtl_new_buffer_with_length(d, 64, MTL_RESOURCE_STORAGE_SHARED) == MTL_NIL);
  inject("command-buffer", 0, 1);
  CHECK(blit(q, shared, 0, priv, 0, 64) == MTL_CB_ERROR);
  CHECK(inject("no-such-failure", 0, 1) == -1);

  /* Errors, strings, arrays are objects with the documented methods. */
  cb = mtl_command_buffer(q);
  mtl_commit(cb);
  mtl_wait_until_completed(cb);
  CHECK(mtl_error(cb) == MTL_NIL);
  char name[64];
  mtl_string_copy(mtl_name(d), name, sizeof name);
  CHECK(strcmp(name, "Fake Metal GPU 0") == 0);

  mtl_release(ok);
  mtl_release(wrapped);
  mtl_release(managed);
  mtl_release(shared);
  mtl_release(priv);
  mtl_release(q);
  mtl_release(d);
  rt->pool_pop(pool);
  CHECK_MSG(counts().live_objects == live0, "%ld objects held, %ld before", counts().live_objects, live0);
  free(host);

  /* An NSError from a failed command buffer. */
  pool = rt->pool_push();
  d = device(0);
  q = mtl_new_command_queue(d);
  inject("command-buffer", 0, 1);
  cb = mtl_command_buffer(q);
  mtl_commit(cb);
  mtl_wait_until_completed(cb);
  CHECK(mtl_status(cb) == MTL_CB_ERROR);
  mtl_id err = mtl_error(cb);
  char text[256], domain[64];
  mtl_string_copy(mtl_localized_description(err), text, sizeof text);
  mtl_string_copy(mtl_error_domain(err), domain, sizeof domain);
  CHECK(strstr(text, "GPU Address Fault") != NULL);
  CHECK(strcmp(domain, "MTLCommandBufferErrorDomain") == 0);
  CHECK(mtl_error_code(err) == 3);
  mtl_release(q);
  mtl_release(d);
  rt->pool_pop(pool);
  CHECK(counts().live_objects == live0);
  printf("  managed storage, late completion, bytesNoCopy, injection, counting: %s\n",
         harness_failures ? "FAILED" : "ok");
}

/* ---- shared events ---------------------------------------------------------------------------------- */

static bool all_bytes(const unsigned char *p, size_t n, unsigned char value) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != value) return false;
  return true;
}

/* A command buffer with a wait, or a signal, and one copy; not committed. The
 * wait comes before the copy, the signal after it. */
static mtl_id evented_copy(mtl_id queue, mtl_id event, uint64_t value, bool signal, mtl_id src, mtl_id dst) {
  mtl_id cb = mtl_command_buffer(queue);
  if (!signal) encode_wait(cb, event, value);
  mtl_id e = mtl_blit_command_encoder(cb);
  mtl_copy_from_buffer(e, src, 0, dst, 0, 4096);
  mtl_end_encoding(e);
  if (signal) encode_signal(cb, event, value);
  return cb;
}

static void events(void) {
  printf("shared events:\n");
  enum { N = 4096 };
  void *pool = rt->pool_push();
  fake_metal_counts c0 = counts();
  mtl_id d = device(0), qa = mtl_new_command_queue(d), qb = mtl_new_command_queue(d);
  mtl_id event = new_shared_event(d);
  CHECK(counts().events == c0.events + 1);
  CHECK_MSG(signaled_value(event) == 0, "a new event's signaledValue is %llu",
            (unsigned long long)signaled_value(event));
  CHECK(mtl_responds_to_selector(event, rt->sel_register_name("setSignaledValue:")));

  /* Across queues: A waits for 1, then copies what B copied before signalling 1.
   * A is committed first and has time to run: only the wait holds it back. */
  mtl_id src = mtl_new_buffer_with_length(d, N, MTL_RESOURCE_STORAGE_SHARED);
  mtl_id mid = mtl_new_buffer_with_length(d, N, MTL_RESOURCE_STORAGE_PRIVATE);
  mtl_id dst = mtl_new_buffer_with_length(d, N, MTL_RESOURCE_STORAGE_SHARED);
  unsigned char *s = mtl_contents(src), *t = mtl_contents(dst);
  memset(s, 0x5a, N);
  memset(t, 0, N);
  mtl_id cb_a = evented_copy(qa, event, 1, false, mid, dst);
  mtl_id cb_b = evented_copy(qb, event, 1, true, src, mid);
  mtl_commit(cb_a);
  harness_sleep_ms(20); /* ten times FAKE_METAL_DELAY_US */
  CHECK_MSG(mtl_status(cb_a) == MTL_CB_COMMITTED, "the waiting command buffer has status %lu",
            (unsigned long)mtl_status(cb_a));
  mtl_commit(cb_b);
  mtl_wait_until_completed(cb_a);
  mtl_wait_until_completed(cb_b);
  CHECK(mtl_status(cb_a) == MTL_CB_COMPLETED && mtl_status(cb_b) == MTL_CB_COMPLETED);
  CHECK_MSG(all_bytes(t, N, 0x5a), "A's copy did not see B's bytes (0x%02x)", t[0]);
  CHECK(signaled_value(event) == 1);

  /* From the host: a command buffer waiting for 2 does not run before the value
   * is set; the counts do not wait for it meanwhile. */
  memset(t, 0, N);
  mtl_id cb = evented_copy(qa, event, 2, false, src, dst);
  mtl_commit(cb);
  harness_sleep_ms(20);
  CHECK(mtl_status(cb) == MTL_CB_COMMITTED && t[0] == 0);
  double start = harness_now_s();
  (void)counts();
  CHECK_MSG(harness_now_s() - start < 2.0, "the counts waited %.1f s for a command buffer waiting for an event",
            harness_now_s() - start);
  set_signaled_value(event, 2);
  mtl_wait_until_completed(cb);
  CHECK(mtl_status(cb) == MTL_CB_COMPLETED && all_bytes(t, N, 0x5a));
  CHECK(signaled_value(event) == 2);
  set_signaled_value(event, 0); /* Metal allows any value, a lower one too */
  CHECK(signaled_value(event) == 0);

  /* A queue released while its command buffer waits: the release returns, and
   * the command buffer runs once the event is signalled. */
  memset(t, 0, N);
  mtl_id qc = mtl_new_command_queue(d);
  cb = evented_copy(qc, event, 5, false, src, dst);
  mtl_commit(cb);
  mtl_release(qc);
  CHECK(mtl_status(cb) == MTL_CB_COMMITTED);
  set_signaled_value(event, 5);
  mtl_wait_until_completed(cb);
  CHECK(mtl_status(cb) == MTL_CB_COMPLETED && all_bytes(t, N, 0x5a));

  mtl_release(event); /* the command buffers still hold it, until the pool goes */
  mtl_release(src);
  mtl_release(mid);
  mtl_release(dst);
  mtl_release(qa);
  mtl_release(qb);
  mtl_release(d);
  rt->pool_pop(pool);
  CHECK_MSG(counts().live_objects == c0.live_objects, "%ld objects held, %ld before", counts().live_objects,
            c0.live_objects);
  printf("  waits across queues, host signals, release while waiting: %s\n", harness_failures ? "FAILED" : "ok");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *path = getenv("FERRY_METAL_LIBRARY");
  void *lib = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  void *a = lib ? dlsym(lib, "fake_metal_counts_get") : NULL, *b = lib ? dlsym(lib, "fake_metal_inject") : NULL;
  memcpy(&counts_get, &a, sizeof counts_get);
  memcpy(&inject, &b, sizeof inject);
  if (!counts_get || !inject) {
    printf("SKIP fake_metal: FERRY_METAL_LIBRARY is not the fake\n");
    return HARNESS_SKIP;
  }
  /* A session without the metal backend (so without its queues' threads), for
   * the options ferry__metal_load reads: FERRY_OBJC_LIBRARY, FERRY_METAL_LIBRARY. */
  if (ferry_set_option("FERRY_BACKENDS", "native") != FERRY_OK || ferry_init() != FERRY_OK ||
      ferry__metal_load() != FERRY_OK) {
    fprintf(stderr, "FAIL: loading the fake: %s\n", ferry_last_error());
    return 1;
  }
  /* Children first: the fork happens while this process has no thread of the fake's. */
  misuse_cases();
  behaviour();
  events();
  ferry__metal_unload();
  ferry_shutdown();
  return harness_finish("fake_metal");
}
