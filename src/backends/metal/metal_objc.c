/*
 * Loading the Objective-C runtime and Metal through the core's loader
 * (src/core/library.h), the few C entry points looked up, and every selector of
 * FERRY_METAL_METHODS registered once.
 */
#include "metal_objc.h"

#include "../../core/library.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPHICS_DEFAULT_PATH "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"

const ferry_metal_method ferry__metal_methods[MTL_METHOD_COUNT] = {
#define MTL_TABLE_G0(ret, fn, sel, recv, enc)              {sel, #fn, enc, recv},
#define MTL_TABLE_G(ret, fn, sel, recv, enc, params, args) {sel, #fn, enc, recv},
#define MTL_TABLE_V0(fn, sel, recv, enc)                   {sel, #fn, enc, recv},
#define MTL_TABLE_V(fn, sel, recv, enc, params, args)      {sel, #fn, enc, recv},
    FERRY_METAL_METHODS(MTL_TABLE_G0, MTL_TABLE_G, MTL_TABLE_V0, MTL_TABLE_V)
#undef MTL_TABLE_G0
#undef MTL_TABLE_G
#undef MTL_TABLE_V0
#undef MTL_TABLE_V
};

ferry_metal_runtime ferry__metal_rt;
static _Atomic bool loaded;

bool ferry__metal_loaded(void) { return atomic_load(&loaded); }

/* The libraries to load: FERRY_OBJC_LIBRARY and FERRY_METAL_LIBRARY (declared in
 * metal.c's options; they may name the same file, as the test fake does), else
 * Apple's paths. */
static void library_paths(const char **objc, const char **metal) {
  const char *o = ferry__option_text("FERRY_OBJC_LIBRARY"), *m = ferry__option_text("FERRY_METAL_LIBRARY");
  *objc = o && *o ? o : FERRY_METAL_OBJC_DEFAULT_PATH;
  *metal = m && *m ? m : FERRY_METAL_DEFAULT_PATH;
}

/* Kept mapped after ferry__library_close: Apple's runtime cannot unload images
 * that define Objective-C classes, and the fake keeps its object counts across
 * sessions. */
static void *open_library(const char *path, char *why, size_t size) {
  return ferry__library_open(path, true, why, size);
}

/* A symbol's void * as a function pointer, without ISO C's object/function cast. */
typedef void (*any_function)(void);
static any_function symbol(void *lib, const char *name) {
  void *sym = ferry__library_symbol(lib, name);
  any_function f;
  memcpy(&f, &sym, sizeof f);
  return f;
}

void ferry__metal_unload(void) {
  atomic_store(&loaded, false);
  ferry__library_close(ferry__metal_rt.graphics_library);
  ferry__library_close(ferry__metal_rt.metal_library);
  ferry__library_close(ferry__metal_rt.objc_library);
  memset(&ferry__metal_rt, 0, sizeof ferry__metal_rt);
}

ferry_status ferry__metal_load(void) {
  ferry_metal_runtime *rt = &ferry__metal_rt;
  const char *objc_path, *metal_path;
  char why[1024];
  library_paths(&objc_path, &metal_path);
  snprintf(rt->objc_path, sizeof rt->objc_path, "%s", objc_path);
  snprintf(rt->metal_path, sizeof rt->metal_path, "%s", metal_path);
  if (!(rt->objc_library = open_library(rt->objc_path, why, sizeof why))) {
#if !defined(__APPLE__)
    /* Apple's runtime, missing off a Mac: say so, not that a .dylib is missing. */
    if (strcmp(rt->objc_path, FERRY_METAL_OBJC_DEFAULT_PATH) == 0)
      ferry__fail(FERRY_ERROR_UNSUPPORTED, "Metal is macOS only");
    else
#endif
      ferry__fail(FERRY_ERROR_UNSUPPORTED, "the Objective-C runtime could not be loaded: %s", why);
    ferry__metal_unload();
    return FERRY_ERROR_UNSUPPORTED;
  }
  if (!(rt->metal_library = open_library(rt->metal_path, why, sizeof why))) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED, "Metal could not be loaded: %s", why);
    ferry__metal_unload();
    return FERRY_ERROR_UNSUPPORTED;
  }
  const char *missing = NULL, *where = rt->objc_path;
  any_function f;
  if (!(rt->msg_send = symbol(rt->objc_library, "objc_msgSend")))
    missing = "objc_msgSend";
  else if (!(f = symbol(rt->objc_library, "sel_registerName")))
    missing = "sel_registerName";
  else if ((rt->sel_register_name = (mtl_sel(*)(const char *))f),
           !(f = symbol(rt->objc_library, "objc_autoreleasePoolPush")))
    missing = "objc_autoreleasePoolPush";
  else if ((rt->pool_push = (void *(*)(void))f), !(f = symbol(rt->objc_library, "objc_autoreleasePoolPop")))
    missing = "objc_autoreleasePoolPop";
  else {
    rt->pool_pop = (void (*)(void *))f;
    /* MTLCopyAllDevices exists on macOS only; MTLCreateSystemDefaultDevice everywhere. */
    rt->copy_all_devices = (mtl_id(*)(void))symbol(rt->metal_library, "MTLCopyAllDevices");
    rt->create_system_default_device = (mtl_id(*)(void))symbol(rt->metal_library, "MTLCreateSystemDefaultDevice");
    if (!rt->copy_all_devices && !rt->create_system_default_device) {
      missing = "MTLCopyAllDevices or MTLCreateSystemDefaultDevice";
      where = rt->metal_path;
    }
  }
  if (missing) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s has no %s", where, missing);
    ferry__metal_unload();
    return FERRY_ERROR_UNSUPPORTED;
  }
  for (int i = 0; i < MTL_METHOD_COUNT; i++) {
    rt->sel[i] = rt->sel_register_name(ferry__metal_methods[i].selector);
    if (!rt->sel[i]) {
      ferry__fail(FERRY_ERROR_UNSUPPORTED, "sel_registerName(\"%s\") in %s returned NULL",
                  ferry__metal_methods[i].selector, rt->objc_path);
      ferry__metal_unload();
      return FERRY_ERROR_UNSUPPORTED;
    }
  }
  atomic_store(&loaded, true);
  return FERRY_OK;
}

void ferry__metal_load_graphics(void) {
  char why[1024];
  if (!ferry__metal_rt.graphics_library)
    ferry__metal_rt.graphics_library = open_library(GRAPHICS_DEFAULT_PATH, why, sizeof why);
}
