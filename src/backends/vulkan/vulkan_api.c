/*
 * Loading the Vulkan loader: dlopen, vkGetInstanceProcAddr, ferry's one
 * instance, and the table of entry points. Also the names of VkResult codes.
 */
#include "vulkan_internal.h"

#include "../../core/library.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ferry_vk_api api;
static bool api_ready;

const ferry_vk_api *ferry__vulkan_api(void) { return api_ready ? &api : NULL; }

const char *ferry__vulkan_result_name(VkResult r) {
  switch (r) {
  case VK_SUCCESS: return "VK_SUCCESS";
  case VK_NOT_READY: return "VK_NOT_READY";
  case VK_TIMEOUT: return "VK_TIMEOUT";
  case VK_EVENT_SET: return "VK_EVENT_SET";
  case VK_EVENT_RESET: return "VK_EVENT_RESET";
  case VK_INCOMPLETE: return "VK_INCOMPLETE";
  case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
  case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
  case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
  case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
  case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
  case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
  case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
  case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
  case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
  case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
  case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
  case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
  case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
  case VK_ERROR_VALIDATION_FAILED: return "VK_ERROR_VALIDATION_FAILED";
  case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
  case VK_ERROR_INVALID_EXTERNAL_HANDLE: return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
  case VK_ERROR_FRAGMENTATION: return "VK_ERROR_FRAGMENTATION";
  case VK_ERROR_NOT_PERMITTED: return "VK_ERROR_NOT_PERMITTED";
  case VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS: return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
  case VK_PIPELINE_COMPILE_REQUIRED: return "VK_PIPELINE_COMPILE_REQUIRED";
  case VK_ERROR_SURFACE_LOST_KHR: return "VK_ERROR_SURFACE_LOST_KHR";
  case VK_ERROR_NATIVE_WINDOW_IN_USE_KHR: return "VK_ERROR_NATIVE_WINDOW_IN_USE_KHR";
  case VK_SUBOPTIMAL_KHR: return "VK_SUBOPTIMAL_KHR";
  case VK_ERROR_OUT_OF_DATE_KHR: return "VK_ERROR_OUT_OF_DATE_KHR";
  case VK_ERROR_INCOMPATIBLE_DISPLAY_KHR: return "VK_ERROR_INCOMPATIBLE_DISPLAY_KHR";
  case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
  case VK_ERROR_FULL_SCREEN_EXCLUSIVE_MODE_LOST_EXT: return "VK_ERROR_FULL_SCREEN_EXCLUSIVE_MODE_LOST_EXT";
  case VK_ERROR_COMPRESSION_EXHAUSTED_EXT: return "VK_ERROR_COMPRESSION_EXHAUSTED_EXT";
  default: return "VkResult";
  }
}

/* dlsym's void * to a function pointer, without the ISO C warning. */
static PFN_vkGetInstanceProcAddr gipa_from(void *sym) {
  PFN_vkGetInstanceProcAddr f;
  memcpy(&f, &sym, sizeof f);
  return f;
}

static const char *default_library(void) {
#if defined(__APPLE__)
  return "libvulkan.1.dylib";
#else
  return "libvulkan.so.1";
#endif
}

/* Looks up every name of a list; the required ones must all be there. */
#define LOAD_REQUIRED(ret, name, args)                                                                                 \
  do {                                                                                                                 \
    PFN_vkVoidFunction f_ = api.vkGetInstanceProcAddr(inst, #name);                                                    \
    if (!f_) {                                                                                                         \
      missing = #name;                                                                                                 \
      break;                                                                                                           \
    }                                                                                                                  \
    api.name = (PFN_##name)f_;                                                                                         \
  } while (0);
#define LOAD_OPTIONAL(ret, name, args) api.name = (PFN_##name)api.vkGetInstanceProcAddr(inst, #name);

static bool instance_extension(const char *name) {
  uint32_t n = 0;
  if (api.vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
  VkExtensionProperties *ext = calloc(n, sizeof *ext);
  if (!ext) return false;
  bool found = false;
  if (api.vkEnumerateInstanceExtensionProperties(NULL, &n, ext) >= 0)
    for (uint32_t i = 0; i < n && !found; i++)
      found = strncmp(ext[i].extensionName, name, VK_MAX_EXTENSION_NAME_SIZE) == 0;
  free(ext);
  return found;
}

void ferry__vk_api_unload(void) {
  if (api.instance && api.vkDestroyInstance) api.vkDestroyInstance(api.instance, NULL);
  ferry__library_close(api.library);
  memset(&api, 0, sizeof api);
  api_ready = false;
}

/* Unloads the loader after a failure's sentence is written: the sentences name
 * the library, which unloading forgets. */
static ferry_status unloaded(ferry_status st) {
  ferry__vk_api_unload();
  return st;
}

ferry_status ferry__vk_api_load(void) {
  ferry__vk_api_unload();
  const char *env = ferry__option_text("FERRY_VULKAN_LIBRARY");
  const char *path = env ? env : default_library();
  snprintf(api.library_name, sizeof api.library_name, "%s", path);
  char text[512];
  api.library = ferry__library_open(path, false, text, sizeof text);
  if (!api.library) {
    memset(&api, 0, sizeof api);
    if (ferry__program_is_static()) return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s", text); /* no hint helps */
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (the Vulkan loader%s)", text,
                       env && *env ? ", named by FERRY_VULKAN_LIBRARY" : "; on Debian/Ubuntu: libvulkan1");
  }
  api.vkGetInstanceProcAddr = gipa_from(ferry__library_symbol(api.library, "vkGetInstanceProcAddr"));
  if (!api.vkGetInstanceProcAddr)
    return unloaded(ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s has no vkGetInstanceProcAddr: it is not a Vulkan loader",
                                api.library_name));
  const char *missing = NULL;
  VkInstance inst = NULL;
  FERRY_VK_GLOBAL_FUNCTIONS(LOAD_REQUIRED)
  FERRY_VK_OPTIONAL_GLOBAL_FUNCTIONS(LOAD_OPTIONAL)
  if (missing) return unloaded(ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s lacks %s", api.library_name, missing));

  /* Vulkan 1.1 is needed for maxMemoryAllocationSize and host-pointer import; a
   * 1.0 loader still works, with fewer facts about each device. */
  api.instance_version = VK_API_VERSION_1_0;
  VKB_DRIVER_STARTUP_BEGIN();
  if (api.vkEnumerateInstanceVersion && api.vkEnumerateInstanceVersion(&api.instance_version) != VK_SUCCESS)
    api.instance_version = VK_API_VERSION_1_0;
  bool portability = instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  VKB_DRIVER_STARTUP_END();
  const char *extensions[1];
  uint32_t extension_count = 0;
  VkFlags flags = 0;
  /* Devices that are not fully conformant (MoltenVK) are listed only on request. */
  if (portability) {
    extensions[extension_count++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  VkApplicationInfo app = {
      .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
      .pApplicationName = "ferry",
      .pEngineName = "ferry",
      .engineVersion = VK_MAKE_API_VERSION(0, FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH),
      .apiVersion = api.instance_version >= VK_API_VERSION_1_1 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_0,
  };
  VkInstanceCreateInfo info = {
      .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
      .flags = flags,
      .pApplicationInfo = &app,
      .enabledExtensionCount = extension_count,
      .ppEnabledExtensionNames = extension_count ? extensions : NULL,
  };
  VKB_DRIVER_STARTUP_BEGIN();
  VkResult r = api.vkCreateInstance(&info, NULL, &api.instance);
  VKB_DRIVER_STARTUP_END();
  if (r != VK_SUCCESS) {
    api.instance = NULL;
    return unloaded(ferry__fail(r == VK_ERROR_INCOMPATIBLE_DRIVER ? FERRY_ERROR_UNSUPPORTED : FERRY_ERROR_BACKEND,
                                "vkCreateInstance (through %s) returned %s (%d)%s", api.library_name,
                                ferry__vulkan_result_name(r), (int)r,
                                r == VK_ERROR_INCOMPATIBLE_DRIVER ? ": no Vulkan driver (ICD) is installed" : ""));
  }
  inst = api.instance;
  FERRY_VK_INSTANCE_FUNCTIONS(LOAD_REQUIRED)
  if (missing) return unloaded(ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s lacks %s", api.library_name, missing));
  if (api.instance_version >= VK_API_VERSION_1_1) {
    FERRY_VK_OPTIONAL_INSTANCE_FUNCTIONS(LOAD_OPTIONAL)
  }
  FERRY_VK_COMPUTE_FUNCTIONS(LOAD_OPTIONAL)
  api_ready = true;
  return FERRY_OK;
}

const ferry_vk_api *ferry__vk(void) { return &api; }
