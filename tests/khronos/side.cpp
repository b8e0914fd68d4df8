/* One side of the comparison (check.h): built with -DFERRY_SIDE (ferry's
 * header) or -DKHRONOS_SIDE (the Khronos header), and -DFERRY_API_OPENCL or
 * -DFERRY_API_VULKAN. FERRY_LIST is the list that list.awk made. */
#include "check.h"

#include <cstddef>
#include <cstdint>

#if defined(FERRY_API_OPENCL) && defined(FERRY_SIDE)
#include "backends/opencl/opencl_api.h"
#define FUNCTION_TYPE(name) decltype(ferry_cl_api::name)
#elif defined(FERRY_API_OPENCL) && defined(KHRONOS_SIDE)
#define CL_TARGET_OPENCL_VERSION          300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS /* clCreateCommandQueue: ferry uses the 1.2 entry points */
#include <CL/cl.h>
#include <CL/cl_ext.h>
#define FUNCTION_TYPE(name) decltype(&name)
#elif defined(FERRY_API_VULKAN) && defined(FERRY_SIDE)
#include "backends/vulkan/vulkan_api.h"
#define FUNCTION_TYPE(name) PFN_##name
#elif defined(FERRY_API_VULKAN) && defined(KHRONOS_SIDE)
#define VK_NO_PROTOTYPES
#define VK_ENABLE_BETA_EXTENSIONS /* VK_KHR_portability_subset */
#include <vulkan/vulkan_core.h>
#include <vulkan/vulkan_beta.h>
/* Names that Vulkan 1.4 gave to extension values, spelled as the extensions
 * did, so that older headers (Debian 12: 1.3.239) check them too. */
#define VK_ERROR_VALIDATION_FAILED VK_ERROR_VALIDATION_FAILED_EXT
#define VK_ERROR_NOT_PERMITTED     VK_ERROR_NOT_PERMITTED_KHR
#define FUNCTION_TYPE(name)        PFN_##name
#else
#error "build with -DFERRY_SIDE or -DKHRONOS_SIDE, and -DFERRY_API_OPENCL or -DFERRY_API_VULKAN"
#endif

#ifdef FERRY_SIDE
#define SIDE ferry_side
#else
#define SIDE khronos_side
#endif

#define FERRY_CONST(name)  {"constant", #name, std::to_string((long long)(name))},
#define FERRY_STRING(name) {"string", #name, name},
#define FERRY_TYPE(name)   {"type", #name, kind_of<name>()},
#define FERRY_STRUCT(name) {"struct", #name, kind_of<name>() + " align " + std::to_string(alignof(name))},
#define FERRY_MEMBER(s, m)                                                                                             \
  {"member", #s "." #m, "offset " + std::to_string(offsetof(s, m)) + " " + kind_of<decltype(s::m)>()},
#define FERRY_FUNCTION(name) {"function", #name, signature_of<FUNCTION_TYPE(name)>::get()},

const std::vector<khronos_entry> SIDE = {
#include FERRY_LIST
};
