/*
 * The part of the Objective-C runtime and of Metal that ferry uses, declared by
 * ferry itself, so that a plain C compiler builds the metal backend on every
 * platform (no Objective-C compiler, no Apple SDK).
 *
 * Every method ferry sends is one line of FERRY_METAL_METHODS below: its selector,
 * the C prototype of the call, the kind of object that receives it, and the type
 * encoding Apple's runtime gives that method (method_getTypeEncoding, without the
 * frame offsets). From that one list come:
 *  - the wrappers, mtl_<name>(self, ...): each casts objc_msgSend, kept as
 *    void (*)(void), to the method's exact prototype and calls it with the
 *    selector registered at load. objc_msgSend is never called as a variadic
 *    function: on arm64 variadic arguments go on the stack, where the method
 *    does not look for them;
 *  - ferry__metal_methods[], the selectors and encodings for the loader and for
 *    tests/metal/metal_selectors.c, which compares them with the runtime's own on
 *    a Mac (and with the fake's in CI).
 *
 * No method returns a struct, so objc_msgSend_stret (needed on x86-64 for
 * structs returned in memory) is never used; none takes a float. Two return a
 * double (GPUStartTime, GPUEndTime: CFTimeInterval), which both ABIs return in
 * the first floating-point register through plain objc_msgSend
 * (objc_msgSend_fpret is for long double on x86-64). The one
 * NSRange (fillBuffer:range:value:) is a struct of two NSUInteger, which both
 * ABIs pass by value in two integer registers.
 * ABI facts this relies on (Apple's 64-bit platforms, the only ones with Metal):
 * NSUInteger is unsigned long, NSInteger long, BOOL signed char on x86-64 and
 * bool on arm64, id and SEL pointers, blocks passed as pointers.
 *
 * Ownership follows Apple's rules: new..., Copy... and Create... results are
 * owned (+1) and released with mtl_release; others (commandBuffer,
 * blitCommandEncoder, strings, errors) are autoreleased, so every call that makes
 * them runs inside an autorelease pool (ferry__metal_rt.pool_push / pool_pop).
 */
#ifndef FERRY_METAL_OBJC_H
#define FERRY_METAL_OBJC_H

#include "../../core/backend.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- runtime types ---------------------------------------------------------- */

typedef struct ferry_objc_object *mtl_id;          /* id */
typedef const struct ferry_objc_selector *mtl_sel; /* SEL */
typedef unsigned long mtl_uint;                    /* NSUInteger */
typedef long mtl_int;                              /* NSInteger */

#if defined(__x86_64__) || defined(__i386__)
typedef signed char mtl_bool; /* BOOL on Intel Macs */
#define MTL_ENC_BOOL "c"
#else
typedef bool mtl_bool; /* BOOL on arm64 */
#define MTL_ENC_BOOL "B"
#endif

#define MTL_NIL ((mtl_id)0)

typedef struct mtl_range { /* NSRange */
  mtl_uint location, length;
} mtl_range;

/* ---- Metal constants (Apple's MTLResource.h, MTLCommandBuffer.h) -------------- */

/* MTLResourceOptions: the storage mode sits at bit 4 (MTLResourceStorageModeShift). */
#define MTL_RESOURCE_STORAGE_SHARED  ((mtl_uint)0 << 4)
#define MTL_RESOURCE_STORAGE_MANAGED ((mtl_uint)1 << 4) /* macOS only */
#define MTL_RESOURCE_STORAGE_PRIVATE ((mtl_uint)2 << 4)
#define MTL_RESOURCE_STORAGE_MASK    ((mtl_uint)0xf << 4)

/* MTLCommandBufferStatus. */
enum {
  MTL_CB_NOT_ENQUEUED = 0,
  MTL_CB_ENQUEUED = 1,
  MTL_CB_COMMITTED = 2,
  MTL_CB_SCHEDULED = 3,
  MTL_CB_COMPLETED = 4,
  MTL_CB_ERROR = 5,
};

/* ---- the methods ----------------------------------------------------------------- */

/* Which object receives a method: the selector check asks the runtime about the
 * class of a real object of that kind. */
typedef enum mtl_receiver {
  MTL_RECV_OBJECT,         /* any NSObject (checked on the device's class) */
  MTL_RECV_DEVICE,         /* id<MTLDevice> */
  MTL_RECV_QUEUE,          /* id<MTLCommandQueue> */
  MTL_RECV_BUFFER,         /* id<MTLBuffer> */
  MTL_RECV_COMMAND_BUFFER, /* id<MTLCommandBuffer> */
  MTL_RECV_BLIT_ENCODER,   /* id<MTLBlitCommandEncoder> */
  MTL_RECV_STRING,         /* NSString */
  MTL_RECV_ARRAY,          /* NSArray */
  MTL_RECV_ERROR,          /* NSError */
  MTL_RECV_SHARED_EVENT,   /* id<MTLSharedEvent> */
} mtl_receiver;

/*
 * G0(return type, wrapper, selector, receiver, encoding)              returns a value, no arguments
 * G (return type, wrapper, selector, receiver, encoding, (params), (args))  returns a value
 * V0(wrapper, selector, receiver, encoding)                           returns nothing, no arguments
 * V (wrapper, selector, receiver, encoding, (params), (args))         returns nothing
 * Encodings as method_getTypeEncoding writes them, frame offsets left out:
 * return type, then self (@), _cmd (:), then the arguments.
 */
#define FERRY_METAL_METHODS(G0, G, V0, V)                                                                              \
  /* NSObject */                                                                                                       \
  G0(mtl_id, mtl_retain, "retain", MTL_RECV_OBJECT, "@@:")                                                             \
  V0(mtl_release, "release", MTL_RECV_OBJECT, "Vv@:")                                                                  \
  G(mtl_bool, mtl_responds_to_selector, "respondsToSelector:", MTL_RECV_OBJECT,                                        \
    MTL_ENC_BOOL "@::", (mtl_sel selector), (selector))                                                                \
  /* NSString, NSArray, NSError */                                                                                     \
  G0(const char *, mtl_utf8_string, "UTF8String", MTL_RECV_STRING, "r*@:")                                             \
  G0(mtl_uint, mtl_count, "count", MTL_RECV_ARRAY, "Q@:")                                                              \
  G(mtl_id, mtl_object_at_index, "objectAtIndex:", MTL_RECV_ARRAY, "@@:Q", (mtl_uint index), (index))                  \
  G0(mtl_id, mtl_localized_description, "localizedDescription", MTL_RECV_ERROR, "@@:")                                 \
  G0(mtl_int, mtl_error_code, "code", MTL_RECV_ERROR, "q@:")                                                           \
  G0(mtl_id, mtl_error_domain, "domain", MTL_RECV_ERROR, "@@:")                                                        \
  /* MTLDevice */                                                                                                      \
  G0(mtl_id, mtl_name, "name", MTL_RECV_DEVICE, "@@:")                                                                 \
  G0(mtl_bool, mtl_has_unified_memory, "hasUnifiedMemory", MTL_RECV_DEVICE, MTL_ENC_BOOL "@:")                         \
  G0(uint64_t, mtl_recommended_max_working_set_size, "recommendedMaxWorkingSetSize", MTL_RECV_DEVICE, "Q@:")           \
  G0(mtl_uint, mtl_max_buffer_length, "maxBufferLength", MTL_RECV_DEVICE, "Q@:")                                       \
  G0(mtl_uint, mtl_current_allocated_size, "currentAllocatedSize", MTL_RECV_DEVICE, "Q@:")                             \
  G(mtl_bool, mtl_supports_family, "supportsFamily:", MTL_RECV_DEVICE, MTL_ENC_BOOL "@:q", (mtl_int family), (family)) \
  G0(mtl_id, mtl_new_command_queue, "newCommandQueue", MTL_RECV_DEVICE, "@@:")                                         \
  G0(mtl_id, mtl_new_shared_event, "newSharedEvent", MTL_RECV_DEVICE, "@@:")                                           \
  G(mtl_id, mtl_new_buffer_with_length, "newBufferWithLength:options:", MTL_RECV_DEVICE, "@@:QQ",                      \
    (mtl_uint length, mtl_uint options), (length, options))                                                            \
  G(mtl_id, mtl_new_buffer_with_bytes_no_copy,                                                                         \
    "newBufferWithBytesNoCopy:length:options:deallocator:", MTL_RECV_DEVICE, "@@:^vQQ@?",                              \
    (void *pointer, mtl_uint length, mtl_uint options, void *deallocator), (pointer, length, options, deallocator))    \
  /* MTLBuffer */                                                                                                      \
  G0(void *, mtl_contents, "contents", MTL_RECV_BUFFER, "^v@:")                                                        \
  /* MTLCommandQueue, MTLCommandBuffer, MTLBlitCommandEncoder */                                                       \
  G0(mtl_id, mtl_command_buffer, "commandBuffer", MTL_RECV_QUEUE, "@@:")                                               \
  G0(mtl_id, mtl_blit_command_encoder, "blitCommandEncoder", MTL_RECV_COMMAND_BUFFER, "@@:")                           \
  V0(mtl_commit, "commit", MTL_RECV_COMMAND_BUFFER, "v@:")                                                             \
  V0(mtl_wait_until_completed, "waitUntilCompleted", MTL_RECV_COMMAND_BUFFER, "v@:")                                   \
  G0(mtl_uint, mtl_status, "status", MTL_RECV_COMMAND_BUFFER, "Q@:")                                                   \
  G0(mtl_id, mtl_error, "error", MTL_RECV_COMMAND_BUFFER, "@@:")                                                       \
  G0(double, mtl_gpu_start_time, "GPUStartTime", MTL_RECV_COMMAND_BUFFER, "d@:")                                       \
  G0(double, mtl_gpu_end_time, "GPUEndTime", MTL_RECV_COMMAND_BUFFER, "d@:")                                           \
  V(mtl_encode_wait_for_event, "encodeWaitForEvent:value:", MTL_RECV_COMMAND_BUFFER, "v@:@Q",                          \
    (mtl_id event, uint64_t value), (event, value))                                                                    \
  V(mtl_encode_signal_event, "encodeSignalEvent:value:", MTL_RECV_COMMAND_BUFFER, "v@:@Q",                             \
    (mtl_id event, uint64_t value), (event, value))                                                                    \
  /* MTLSharedEvent */                                                                                                 \
  G0(uint64_t, mtl_signaled_value, "signaledValue", MTL_RECV_SHARED_EVENT, "Q@:")                                      \
  V(mtl_set_signaled_value, "setSignaledValue:", MTL_RECV_SHARED_EVENT, "v@:Q", (uint64_t value), (value))             \
  V(mtl_copy_from_buffer, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", MTL_RECV_BLIT_ENCODER,       \
    "v@:@Q@QQ",                                                                                                        \
    (mtl_id source, mtl_uint source_offset, mtl_id destination, mtl_uint destination_offset, mtl_uint size),           \
    (source, source_offset, destination, destination_offset, size))                                                    \
  V(mtl_fill_buffer, "fillBuffer:range:value:", MTL_RECV_BLIT_ENCODER, "v@:@{_NSRange=QQ}C",                           \
    (mtl_id buffer, mtl_range range, uint8_t value), (buffer, range, value))                                           \
  V0(mtl_end_encoding, "endEncoding", MTL_RECV_BLIT_ENCODER, "v@:")

#define MTL_UNPAREN(...) __VA_ARGS__

enum {
#define MTL_ENUM_G0(ret, fn, sel, recv, enc)              MTL_SEL_##fn,
#define MTL_ENUM_G(ret, fn, sel, recv, enc, params, args) MTL_SEL_##fn,
#define MTL_ENUM_V0(fn, sel, recv, enc)                   MTL_SEL_##fn,
#define MTL_ENUM_V(fn, sel, recv, enc, params, args)      MTL_SEL_##fn,
  FERRY_METAL_METHODS(MTL_ENUM_G0, MTL_ENUM_G, MTL_ENUM_V0, MTL_ENUM_V)
#undef MTL_ENUM_G0
#undef MTL_ENUM_G
#undef MTL_ENUM_V0
#undef MTL_ENUM_V
      MTL_METHOD_COUNT
};

/* One method as the wrappers assume it. */
typedef struct ferry_metal_method {
  const char *selector; /* "newBufferWithLength:options:" */
  const char *wrapper;  /* "mtl_new_buffer_with_length" */
  const char *encoding; /* "@@:QQ" */
  mtl_receiver receiver;
} ferry_metal_method;

extern const ferry_metal_method ferry__metal_methods[MTL_METHOD_COUNT];

/* ---- the loaded runtime ------------------------------------------------------------- */

/* Where Apple puts the libraries (FERRY_OBJC_LIBRARY, FERRY_METAL_LIBRARY override them). */
#define FERRY_METAL_OBJC_DEFAULT_PATH "/usr/lib/libobjc.A.dylib"
#define FERRY_METAL_DEFAULT_PATH      "/System/Library/Frameworks/Metal.framework/Metal"

typedef struct ferry_metal_runtime {
  void (*msg_send)(void); /* objc_msgSend: only ever called through a cast to the method's prototype */
  mtl_sel sel[MTL_METHOD_COUNT];
  mtl_sel (*sel_register_name)(const char *name);
  void *(*pool_push)(void);                     /* objc_autoreleasePoolPush */
  void (*pool_pop)(void *pool);                 /* objc_autoreleasePoolPop */
  mtl_id (*copy_all_devices)(void);             /* MTLCopyAllDevices (+1 NSArray); NULL where Metal lacks it */
  mtl_id (*create_system_default_device)(void); /* MTLCreateSystemDefaultDevice (+1); NULL if absent */
  void *objc_library, *metal_library, *graphics_library;
  char objc_path[512], metal_path[512];
} ferry_metal_runtime;

/* Filled by ferry__metal_load, emptied by ferry__metal_unload; read-only between. */
extern ferry_metal_runtime ferry__metal_rt;

/* Loads the runtime and Metal (FERRY_OBJC_LIBRARY, FERRY_METAL_LIBRARY or Apple's
 * paths) through the core's loader and registers every selector.
 * FERRY_ERROR_UNSUPPORTED with the reason when a library or a symbol is missing
 * (nothing stays loaded then). Reads the options of the session: after ferry_init. */
ferry_status ferry__metal_load(void);
/* CoreGraphics, which MTLCreateSystemDefaultDevice needs loaded in a program
 * that is not an app; best effort (absent on other systems). */
void ferry__metal_load_graphics(void);
void ferry__metal_unload(void);
/* True between a successful ferry__metal_load and ferry__metal_unload. */
bool ferry__metal_loaded(void);

/* ---- the wrappers ---------------------------------------------------------------- */

#define MTL_WRAP_G0(ret, fn, selname, recv, enc)                                                                       \
  static inline ret fn(mtl_id self) {                                                                                  \
    return ((ret(*)(mtl_id, mtl_sel))ferry__metal_rt.msg_send)(self, ferry__metal_rt.sel[MTL_SEL_##fn]);               \
  }
#define MTL_WRAP_G(ret, fn, selname, recv, enc, params, args)                                                          \
  static inline ret fn(mtl_id self, MTL_UNPAREN params) {                                                              \
    return ((ret(*)(mtl_id, mtl_sel, MTL_UNPAREN params))ferry__metal_rt.msg_send)(                                    \
        self, ferry__metal_rt.sel[MTL_SEL_##fn], MTL_UNPAREN args);                                                    \
  }
#define MTL_WRAP_V0(fn, selname, recv, enc)                                                                            \
  static inline void fn(mtl_id self) {                                                                                 \
    ((void (*)(mtl_id, mtl_sel))ferry__metal_rt.msg_send)(self, ferry__metal_rt.sel[MTL_SEL_##fn]);                    \
  }
#define MTL_WRAP_V(fn, selname, recv, enc, params, args)                                                               \
  static inline void fn(mtl_id self, MTL_UNPAREN params) {                                                             \
    ((void (*)(mtl_id, mtl_sel, MTL_UNPAREN params))ferry__metal_rt.msg_send)(self, ferry__metal_rt.sel[MTL_SEL_##fn], \
                                                                              MTL_UNPAREN args);                       \
  }
FERRY_METAL_METHODS(MTL_WRAP_G0, MTL_WRAP_G, MTL_WRAP_V0, MTL_WRAP_V)
#undef MTL_WRAP_G0
#undef MTL_WRAP_G
#undef MTL_WRAP_V0
#undef MTL_WRAP_V

/* An NSString's text copied into buf (the string's own bytes live only as long
 * as the string: inside the caller's autorelease pool). */
static inline const char *mtl_string_copy(mtl_id string, char *buf, size_t size) {
  const char *s = string ? mtl_utf8_string(string) : NULL;
  size_t i = 0;
  if (size == 0) return buf;
  for (; s && s[i] && i + 1 < size; i++)
    buf[i] = s[i];
  buf[i] = '\0';
  return buf;
}

#endif /* FERRY_METAL_OBJC_H */
