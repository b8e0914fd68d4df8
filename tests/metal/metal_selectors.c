/*
 * metal_selectors: the methods the metal backend sends, against the runtime's
 * own idea of them.
 *
 *   metal_selectors          for each method of metal_objc.h's FERRY_METAL_METHODS,
 *                            asks the runtime (class_getInstanceMethod on the class of
 *                            a real object of the receiving kind, then
 *                            method_getTypeEncoding) and compares the encoding with
 *                            the one ferry's wrapper assumes; prints every mismatch
 *                            and exits 1 if there is one
 *   metal_selectors --list   prints the selectors and the encodings the wrappers
 *                            assume, without asking anything
 *
 * On a Mac (tests/metal/run_on_macos.sh) that is Apple's runtime: a wrapper whose
 * prototype disagrees with the method's (an argument of the wrong width, BOOL
 * taken for an int) would pass garbage silently. In CI it runs against the fake,
 * whose table is written separately, from Apple's headers.
 * Encodings are compared without frame offsets and qualifiers ("r*16@0:8" is "*@:").
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "backends/metal/metal_objc.h"
#include "harness.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const receiver_names[] = {
    [MTL_RECV_OBJECT] = "NSObject (on the device)",
    [MTL_RECV_DEVICE] = "MTLDevice",
    [MTL_RECV_QUEUE] = "MTLCommandQueue",
    [MTL_RECV_BUFFER] = "MTLBuffer",
    [MTL_RECV_COMMAND_BUFFER] = "MTLCommandBuffer",
    [MTL_RECV_BLIT_ENCODER] = "MTLBlitCommandEncoder",
    [MTL_RECV_STRING] = "NSString",
    [MTL_RECV_ARRAY] = "NSArray",
    [MTL_RECV_ERROR] = "NSError",
    [MTL_RECV_SHARED_EVENT] = "MTLSharedEvent",
};

typedef void *objc_class;
static objc_class (*get_class)(const char *name);
static objc_class (*object_class)(mtl_id object);
static void *(*instance_method)(objc_class cls, mtl_sel sel);
static const char *(*type_encoding)(void *method);
static const char *(*class_name)(objc_class cls);

/* The types of an encoding, without frame offsets and qualifiers. */
static void normalize(const char *in, char *out, size_t size) {
  size_t n = 0;
  for (; *in && n + 1 < size; in++) {
    if (isdigit((unsigned char)*in) || strchr("rnNoORV", *in)) continue;
    out[n++] = *in;
  }
  out[n] = '\0';
}

static int list(void) {
  printf("%-58s %-40s %s\n", "selector", "wrapper", "encoding (receiver)");
  for (int i = 0; i < MTL_METHOD_COUNT; i++)
    printf("%-58s %-40s %s (%s)\n", ferry__metal_methods[i].selector, ferry__metal_methods[i].wrapper,
           ferry__metal_methods[i].encoding, receiver_names[ferry__metal_methods[i].receiver]);
  return 0;
}

static bool lookup(void *lib) {
  void *syms[5] = {dlsym(lib, "objc_getClass"), dlsym(lib, "object_getClass"), dlsym(lib, "class_getInstanceMethod"),
                   dlsym(lib, "method_getTypeEncoding"), dlsym(lib, "class_getName")};
  memcpy(&get_class, &syms[0], sizeof get_class);
  memcpy(&object_class, &syms[1], sizeof object_class);
  memcpy(&instance_method, &syms[2], sizeof instance_method);
  memcpy(&type_encoding, &syms[3], sizeof type_encoding);
  memcpy(&class_name, &syms[4], sizeof class_name);
  return get_class && object_class && instance_method && type_encoding && class_name;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) return list();
  ferry_backend_info info;
  int rc = harness_start_backend("metal", "metal_selectors", &info);
  if (rc != 0) return rc;
  if (!lookup(ferry__metal_rt.objc_library)) {
    fprintf(stderr, "FAIL: %s lacks the runtime's introspection functions\n", ferry__metal_rt.objc_path);
    ferry_shutdown();
    return 1;
  }
  ferry_device *dev;
  ferry_device_get(info.first_device, &dev);
  ferry_native nat;
  ferry_device_native(dev, &nat);

  /* A real object of every kind: ferry's device, queue and buffers, a command
   * buffer and blit encoder of ferry's queue, the device's name, Metal's device
   * list; NSError's class itself (no error is at hand). */
  void *pool = ferry__metal_rt.pool_push();
  ferry_buffer plain = FERRY_NULL_BUFFER, wrapped = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 4096, FERRY_UINT8, &plain));
  ferry_device_info dinfo;
  ferry_device_info_get(dev, &dinfo);
  size_t page = dinfo.host_ptr_alignment;
  void *array = harness_aligned(page, page);
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, page, FERRY_UINT8), &wrapped, NULL));
  mtl_id cb = mtl_command_buffer((mtl_id)nat.queue);
  mtl_id encoder = mtl_blit_command_encoder(cb);
  mtl_id all = ferry__metal_rt.copy_all_devices ? ferry__metal_rt.copy_all_devices() : MTL_NIL;
  mtl_id event = mtl_new_shared_event((mtl_id)nat.device);
  objc_class classes[][2] = {
      [MTL_RECV_OBJECT] = {object_class((mtl_id)nat.device), NULL},
      [MTL_RECV_DEVICE] = {object_class((mtl_id)nat.device), NULL},
      [MTL_RECV_QUEUE] = {object_class((mtl_id)nat.queue), NULL},
      [MTL_RECV_BUFFER] = {object_class((mtl_id)ferry_device_ptr(plain)),
                           object_class((mtl_id)ferry_device_ptr(wrapped))},
      [MTL_RECV_COMMAND_BUFFER] = {object_class(cb), NULL},
      [MTL_RECV_BLIT_ENCODER] = {object_class(encoder), NULL},
      [MTL_RECV_STRING] = {object_class(mtl_name((mtl_id)nat.device)), NULL},
      [MTL_RECV_ARRAY] = {all ? object_class(all) : get_class("NSArray"), NULL},
      [MTL_RECV_ERROR] = {get_class("NSError"), NULL},
      [MTL_RECV_SHARED_EVENT] = {event ? object_class(event) : NULL, NULL},
  };
  int bad = 0;
  for (int i = 0; i < MTL_METHOD_COUNT; i++) {
    const ferry_metal_method *m = &ferry__metal_methods[i];
    for (int k = 0; k < 2; k++) {
      objc_class cls = classes[m->receiver][k];
      if (!cls) continue;
      void *method = instance_method(cls, ferry__metal_rt.sel[i]);
      char want[96], got[96];
      normalize(m->encoding, want, sizeof want);
      if (!method) {
        printf("MISSING   -[%s %s]: the runtime has no such method (ferry's %s assumes %s)\n", class_name(cls),
               m->selector, m->wrapper, m->encoding);
        bad++;
        continue;
      }
      const char *raw = type_encoding(method);
      normalize(raw ? raw : "", got, sizeof got);
      if (strcmp(want, got) != 0) {
        printf("MISMATCH  -[%s %s]: the runtime says %s, ferry's %s assumes %s\n", class_name(cls), m->selector,
               raw ? raw : "(none)", m->wrapper, m->encoding);
        bad++;
      } else {
        printf("ok        -[%s %s] %s\n", class_name(cls), m->selector, raw);
      }
    }
  }
  mtl_end_encoding(encoder);
  if (all) mtl_release(all);
  if (event) {
    mtl_release(event);
  } else {
    printf("MISSING   -[MTLDevice newSharedEvent] returned nil: the shared-event methods were not checked\n");
    bad++;
  }
  ferry__metal_rt.pool_pop(pool);
  CHECK_OK(ferry_free(plain));
  CHECK_OK(ferry_free(wrapped));
  free(array);
  ferry_shutdown();
  if (bad) {
    fprintf(stderr, "metal_selectors: %d of the methods ferry sends disagree with the runtime\n", bad);
    return 1;
  }
  printf("metal_selectors: all %d methods agree with the runtime (%s)\n", MTL_METHOD_COUNT,
         getenv("FERRY_OBJC_LIBRARY") ? getenv("FERRY_OBJC_LIBRARY") : "Apple's");
  return harness_finish("metal_selectors");
}
