/*
 * The part of the Vulkan API that ferry uses, declared by ferry itself so that no
 * Vulkan header or SDK is needed to build: the types, the constants and a table of
 * function pointers filled from the Vulkan loader (libvulkan.so.1) at run time
 * through vkGetInstanceProcAddr.
 *
 * Values and layouts are those of the Vulkan specification (Khronos vulkan_core.h,
 * 1.3). Non-dispatchable handles are 64-bit integers here, which is how they are
 * passed on every platform (the Khronos header makes them pointers on 64-bit
 * targets; the calling conventions treat both alike).
 *
 * Tests and benchmarks make their own raw Vulkan calls on ferry's buffers through
 * ferry__vulkan_api(), ferry_device_ptr() (the VkBuffer) and ferry_device_native()
 * (VkPhysicalDevice, VkDevice, VkQueue and its family). The compute entry points
 * at the end of the table are loaded for them; ferry itself only moves bytes.
 */
#ifndef FERRY_VULKAN_API_H
#define FERRY_VULKAN_API_H

#ifdef VULKAN_CORE_H_
#error "vulkan_api.h declares the Vulkan API itself; do not include it together with <vulkan/vulkan.h>"
#endif

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FERRY_VKAPI __stdcall
#elif defined(__ANDROID__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7 && defined(__ARM_32BIT_STATE)
#define FERRY_VKAPI __attribute__((pcs("aapcs-vfp")))
#else
#define FERRY_VKAPI
#endif

/* ---- scalar and handle types ---------------------------------------------- */

typedef uint32_t VkFlags;
typedef uint32_t VkBool32;
typedef uint64_t VkDeviceSize;
typedef int32_t VkResult;
typedef int32_t VkStructureType;

typedef struct VkInstance_T *VkInstance;
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef struct VkQueue_T *VkQueue;
typedef struct VkCommandBuffer_T *VkCommandBuffer;

typedef uint64_t VkBuffer;
typedef uint64_t VkDeviceMemory;
typedef uint64_t VkCommandPool;
typedef uint64_t VkFence;
typedef uint64_t VkSemaphore;
typedef uint64_t VkShaderModule;
typedef uint64_t VkPipeline;
typedef uint64_t VkPipelineLayout;
typedef uint64_t VkPipelineCache;
typedef uint64_t VkDescriptorSetLayout;
typedef uint64_t VkDescriptorPool;
typedef uint64_t VkDescriptorSet;
typedef uint64_t VkSampler;
typedef uint64_t VkImageView;
typedef uint64_t VkBufferView;
typedef uint64_t VkQueryPool;

#define VK_NULL_HANDLE 0

/* ---- constants ------------------------------------------------------------ */

#define VK_MAKE_API_VERSION(variant, major, minor, patch)                                                              \
  ((((uint32_t)(variant)) << 29U) | (((uint32_t)(major)) << 22U) | (((uint32_t)(minor)) << 12U) | ((uint32_t)(patch)))
#define VK_API_VERSION_MAJOR(v) (((uint32_t)(v) >> 22U) & 0x7FU)
#define VK_API_VERSION_MINOR(v) (((uint32_t)(v) >> 12U) & 0x3FFU)
#define VK_API_VERSION_PATCH(v) ((uint32_t)(v)&0xFFFU)
#define VK_API_VERSION_1_0      VK_MAKE_API_VERSION(0, 1, 0, 0)
#define VK_API_VERSION_1_1      VK_MAKE_API_VERSION(0, 1, 1, 0)
#define VK_API_VERSION_1_2      VK_MAKE_API_VERSION(0, 1, 2, 0)
#define VK_API_VERSION_1_3      VK_MAKE_API_VERSION(0, 1, 3, 0)

#define VK_TRUE                          1u
#define VK_FALSE                         0u
#define VK_WHOLE_SIZE                    (~0ULL)
#define VK_QUEUE_FAMILY_IGNORED          (~0U)
#define VK_MAX_MEMORY_TYPES              32u
#define VK_MAX_MEMORY_HEAPS              16u
#define VK_MAX_PHYSICAL_DEVICE_NAME_SIZE 256u
#define VK_MAX_EXTENSION_NAME_SIZE       256u
#define VK_UUID_SIZE                     16u

/* VkResult */
#define VK_SUCCESS                                   0
#define VK_NOT_READY                                 1
#define VK_TIMEOUT                                   2
#define VK_EVENT_SET                                 3
#define VK_EVENT_RESET                               4
#define VK_INCOMPLETE                                5
#define VK_ERROR_OUT_OF_HOST_MEMORY                  (-1)
#define VK_ERROR_OUT_OF_DEVICE_MEMORY                (-2)
#define VK_ERROR_INITIALIZATION_FAILED               (-3)
#define VK_ERROR_DEVICE_LOST                         (-4)
#define VK_ERROR_MEMORY_MAP_FAILED                   (-5)
#define VK_ERROR_LAYER_NOT_PRESENT                   (-6)
#define VK_ERROR_EXTENSION_NOT_PRESENT               (-7)
#define VK_ERROR_FEATURE_NOT_PRESENT                 (-8)
#define VK_ERROR_INCOMPATIBLE_DRIVER                 (-9)
#define VK_ERROR_TOO_MANY_OBJECTS                    (-10)
#define VK_ERROR_FORMAT_NOT_SUPPORTED                (-11)
#define VK_ERROR_FRAGMENTED_POOL                     (-12)
#define VK_ERROR_UNKNOWN                             (-13)
#define VK_ERROR_VALIDATION_FAILED                   (-1000011001)
#define VK_ERROR_OUT_OF_POOL_MEMORY                  (-1000069000)
#define VK_ERROR_INVALID_EXTERNAL_HANDLE             (-1000072003)
#define VK_ERROR_FRAGMENTATION                       (-1000161000)
#define VK_ERROR_NOT_PERMITTED                       (-1000174001)
#define VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS      (-1000257000)
#define VK_PIPELINE_COMPILE_REQUIRED                 1000297000
#define VK_ERROR_SURFACE_LOST_KHR                    (-1000000000)
#define VK_ERROR_NATIVE_WINDOW_IN_USE_KHR            (-1000000001)
#define VK_SUBOPTIMAL_KHR                            1000001003
#define VK_ERROR_OUT_OF_DATE_KHR                     (-1000001004)
#define VK_ERROR_INCOMPATIBLE_DISPLAY_KHR            (-1000003001)
#define VK_ERROR_INVALID_SHADER_NV                   (-1000012000)
#define VK_ERROR_FULL_SCREEN_EXCLUSIVE_MODE_LOST_EXT (-1000255000)
#define VK_ERROR_COMPRESSION_EXHAUSTED_EXT           (-1000338000)

/* VkStructureType */
#define VK_STRUCTURE_TYPE_APPLICATION_INFO                                    0
#define VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO                                1
#define VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO                            2
#define VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO                                  3
#define VK_STRUCTURE_TYPE_SUBMIT_INFO                                         4
#define VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO                                5
#define VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE                                 6
#define VK_STRUCTURE_TYPE_FENCE_CREATE_INFO                                   8
#define VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO                               9
#define VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO                              11
#define VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO                                  12
#define VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO                           16
#define VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO                   18
#define VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO                        29
#define VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO                         30
#define VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO                   32
#define VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO                         33
#define VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO                        34
#define VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET                                35
#define VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO                            39
#define VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO                        40
#define VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO                           42
#define VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER                               44
#define VK_STRUCTURE_TYPE_MEMORY_BARRIER                                      46
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2                        1000059001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2                 1000059006
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO                1000071002
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES                       1000071004
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES                   1000196000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT         1000212000
#define VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES                          1000071003
#define VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO                  1000072000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES            1000168000
#define VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT                 1000178000
#define VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT                  1000178001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT 1000178002
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT        1000237000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES            1000413001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES         1000207000
#define VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO                          1000207002
#define VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO                      1000207003
#define VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO                                 1000207004
#define VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO                               1000207005

/* VkInstanceCreateFlagBits */
#define VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR 0x00000001u

/* VkPhysicalDeviceType */
#define VK_PHYSICAL_DEVICE_TYPE_OTHER          0
#define VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU 1
#define VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU   2
#define VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU    3
#define VK_PHYSICAL_DEVICE_TYPE_CPU            4

/* VkQueueFlagBits */
#define VK_QUEUE_GRAPHICS_BIT 0x00000001u
#define VK_QUEUE_COMPUTE_BIT  0x00000002u
#define VK_QUEUE_TRANSFER_BIT 0x00000004u

/* VkMemoryPropertyFlagBits, VkMemoryHeapFlagBits */
#define VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT     0x00000001u
#define VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT     0x00000002u
#define VK_MEMORY_PROPERTY_HOST_COHERENT_BIT    0x00000004u
#define VK_MEMORY_PROPERTY_HOST_CACHED_BIT      0x00000008u
#define VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT 0x00000010u
#define VK_MEMORY_PROPERTY_PROTECTED_BIT        0x00000020u
#define VK_MEMORY_HEAP_DEVICE_LOCAL_BIT         0x00000001u

/* VkBufferUsageFlagBits, VkSharingMode */
#define VK_BUFFER_USAGE_TRANSFER_SRC_BIT   0x00000001u
#define VK_BUFFER_USAGE_TRANSFER_DST_BIT   0x00000002u
#define VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT 0x00000010u
#define VK_BUFFER_USAGE_STORAGE_BUFFER_BIT 0x00000020u
#define VK_SHARING_MODE_EXCLUSIVE          0
#define VK_SHARING_MODE_CONCURRENT         1

/* Command pools and buffers, fences */
#define VK_COMMAND_POOL_CREATE_TRANSIENT_BIT            0x00000001u
#define VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT 0x00000002u
#define VK_COMMAND_BUFFER_LEVEL_PRIMARY                 0
#define VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT     0x00000001u
#define VK_FENCE_CREATE_SIGNALED_BIT                    0x00000001u

/* VkPipelineStageFlagBits, VkAccessFlagBits */
#define VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT    0x00000001u
#define VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT 0x00000800u
#define VK_PIPELINE_STAGE_TRANSFER_BIT       0x00001000u
#define VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT 0x00002000u
#define VK_PIPELINE_STAGE_HOST_BIT           0x00004000u
#define VK_PIPELINE_STAGE_ALL_COMMANDS_BIT   0x00010000u
#define VK_ACCESS_SHADER_READ_BIT            0x00000020u
#define VK_ACCESS_SHADER_WRITE_BIT           0x00000040u
#define VK_ACCESS_TRANSFER_READ_BIT          0x00000800u
#define VK_ACCESS_TRANSFER_WRITE_BIT         0x00001000u
#define VK_ACCESS_HOST_READ_BIT              0x00002000u
#define VK_ACCESS_HOST_WRITE_BIT             0x00004000u
#define VK_ACCESS_MEMORY_READ_BIT            0x00008000u
#define VK_ACCESS_MEMORY_WRITE_BIT           0x00010000u

/* Timeline semaphores (Vulkan 1.2 or VK_KHR_timeline_semaphore): ferry's lanes and gates */
#define VK_SEMAPHORE_TYPE_BINARY   0
#define VK_SEMAPHORE_TYPE_TIMELINE 1

/* Timestamp queries (timing markers) */
#define VK_QUERY_TYPE_TIMESTAMP  2
#define VK_QUERY_RESULT_64_BIT   0x00000001u
#define VK_QUERY_RESULT_WAIT_BIT 0x00000002u

/* External memory (VK_EXT_external_memory_host) */
#define VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT 0x00000080u
#define VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT              0x00000004u

/* Compute pipelines and descriptors (for users' own kernels: tests, examples) */
#define VK_SHADER_STAGE_COMPUTE_BIT                       0x00000020u
#define VK_PIPELINE_BIND_POINT_COMPUTE                    1
#define VK_DESCRIPTOR_TYPE_STORAGE_BUFFER                 7
#define VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT 0x00000001u

/* Extension names */
#define VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME    "VK_EXT_external_memory_host"
#define VK_EXT_MEMORY_BUDGET_EXTENSION_NAME           "VK_EXT_memory_budget"
#define VK_EXT_PCI_BUS_INFO_EXTENSION_NAME            "VK_EXT_pci_bus_info"
#define VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME       "VK_KHR_driver_properties"
#define VK_KHR_MAINTENANCE_4_EXTENSION_NAME           "VK_KHR_maintenance4"
#define VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME      "VK_KHR_timeline_semaphore"
#define VK_KHR_PORTABILITY_SUBSET_EXTENSION_NAME      "VK_KHR_portability_subset"
#define VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME "VK_KHR_portability_enumeration"

/* ---- structures ----------------------------------------------------------- */

typedef struct VkApplicationInfo {
  VkStructureType sType;
  const void *pNext;
  const char *pApplicationName;
  uint32_t applicationVersion;
  const char *pEngineName;
  uint32_t engineVersion;
  uint32_t apiVersion;
} VkApplicationInfo;

typedef struct VkInstanceCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  const VkApplicationInfo *pApplicationInfo;
  uint32_t enabledLayerCount;
  const char *const *ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char *const *ppEnabledExtensionNames;
} VkInstanceCreateInfo;

typedef struct VkExtensionProperties {
  char extensionName[VK_MAX_EXTENSION_NAME_SIZE];
  uint32_t specVersion;
} VkExtensionProperties;

typedef struct VkPhysicalDeviceLimits {
  uint32_t maxImageDimension1D;
  uint32_t maxImageDimension2D;
  uint32_t maxImageDimension3D;
  uint32_t maxImageDimensionCube;
  uint32_t maxImageArrayLayers;
  uint32_t maxTexelBufferElements;
  uint32_t maxUniformBufferRange;
  uint32_t maxStorageBufferRange;
  uint32_t maxPushConstantsSize;
  uint32_t maxMemoryAllocationCount;
  uint32_t maxSamplerAllocationCount;
  VkDeviceSize bufferImageGranularity;
  VkDeviceSize sparseAddressSpaceSize;
  uint32_t maxBoundDescriptorSets;
  uint32_t maxPerStageDescriptorSamplers;
  uint32_t maxPerStageDescriptorUniformBuffers;
  uint32_t maxPerStageDescriptorStorageBuffers;
  uint32_t maxPerStageDescriptorSampledImages;
  uint32_t maxPerStageDescriptorStorageImages;
  uint32_t maxPerStageDescriptorInputAttachments;
  uint32_t maxPerStageResources;
  uint32_t maxDescriptorSetSamplers;
  uint32_t maxDescriptorSetUniformBuffers;
  uint32_t maxDescriptorSetUniformBuffersDynamic;
  uint32_t maxDescriptorSetStorageBuffers;
  uint32_t maxDescriptorSetStorageBuffersDynamic;
  uint32_t maxDescriptorSetSampledImages;
  uint32_t maxDescriptorSetStorageImages;
  uint32_t maxDescriptorSetInputAttachments;
  uint32_t maxVertexInputAttributes;
  uint32_t maxVertexInputBindings;
  uint32_t maxVertexInputAttributeOffset;
  uint32_t maxVertexInputBindingStride;
  uint32_t maxVertexOutputComponents;
  uint32_t maxTessellationGenerationLevel;
  uint32_t maxTessellationPatchSize;
  uint32_t maxTessellationControlPerVertexInputComponents;
  uint32_t maxTessellationControlPerVertexOutputComponents;
  uint32_t maxTessellationControlPerPatchOutputComponents;
  uint32_t maxTessellationControlTotalOutputComponents;
  uint32_t maxTessellationEvaluationInputComponents;
  uint32_t maxTessellationEvaluationOutputComponents;
  uint32_t maxGeometryShaderInvocations;
  uint32_t maxGeometryInputComponents;
  uint32_t maxGeometryOutputComponents;
  uint32_t maxGeometryOutputVertices;
  uint32_t maxGeometryTotalOutputComponents;
  uint32_t maxFragmentInputComponents;
  uint32_t maxFragmentOutputAttachments;
  uint32_t maxFragmentDualSrcAttachments;
  uint32_t maxFragmentCombinedOutputResources;
  uint32_t maxComputeSharedMemorySize;
  uint32_t maxComputeWorkGroupCount[3];
  uint32_t maxComputeWorkGroupInvocations;
  uint32_t maxComputeWorkGroupSize[3];
  uint32_t subPixelPrecisionBits;
  uint32_t subTexelPrecisionBits;
  uint32_t mipmapPrecisionBits;
  uint32_t maxDrawIndexedIndexValue;
  uint32_t maxDrawIndirectCount;
  float maxSamplerLodBias;
  float maxSamplerAnisotropy;
  uint32_t maxViewports;
  uint32_t maxViewportDimensions[2];
  float viewportBoundsRange[2];
  uint32_t viewportSubPixelBits;
  size_t minMemoryMapAlignment;
  VkDeviceSize minTexelBufferOffsetAlignment;
  VkDeviceSize minUniformBufferOffsetAlignment;
  VkDeviceSize minStorageBufferOffsetAlignment;
  int32_t minTexelOffset;
  uint32_t maxTexelOffset;
  int32_t minTexelGatherOffset;
  uint32_t maxTexelGatherOffset;
  float minInterpolationOffset;
  float maxInterpolationOffset;
  uint32_t subPixelInterpolationOffsetBits;
  uint32_t maxFramebufferWidth;
  uint32_t maxFramebufferHeight;
  uint32_t maxFramebufferLayers;
  VkFlags framebufferColorSampleCounts;
  VkFlags framebufferDepthSampleCounts;
  VkFlags framebufferStencilSampleCounts;
  VkFlags framebufferNoAttachmentsSampleCounts;
  uint32_t maxColorAttachments;
  VkFlags sampledImageColorSampleCounts;
  VkFlags sampledImageIntegerSampleCounts;
  VkFlags sampledImageDepthSampleCounts;
  VkFlags sampledImageStencilSampleCounts;
  VkFlags storageImageSampleCounts;
  uint32_t maxSampleMaskWords;
  VkBool32 timestampComputeAndGraphics;
  float timestampPeriod;
  uint32_t maxClipDistances;
  uint32_t maxCullDistances;
  uint32_t maxCombinedClipAndCullDistances;
  uint32_t discreteQueuePriorities;
  float pointSizeRange[2];
  float lineWidthRange[2];
  float pointSizeGranularity;
  float lineWidthGranularity;
  VkBool32 strictLines;
  VkBool32 standardSampleLocations;
  VkDeviceSize optimalBufferCopyOffsetAlignment;
  VkDeviceSize optimalBufferCopyRowPitchAlignment;
  VkDeviceSize nonCoherentAtomSize;
} VkPhysicalDeviceLimits;

typedef struct VkPhysicalDeviceSparseProperties {
  VkBool32 residencyStandard2DBlockShape;
  VkBool32 residencyStandard2DMultisampleBlockShape;
  VkBool32 residencyStandard3DBlockShape;
  VkBool32 residencyAlignedMipSize;
  VkBool32 residencyNonResidentStrict;
} VkPhysicalDeviceSparseProperties;

typedef struct VkPhysicalDeviceProperties {
  uint32_t apiVersion;
  uint32_t driverVersion;
  uint32_t vendorID;
  uint32_t deviceID;
  int32_t deviceType; /* VK_PHYSICAL_DEVICE_TYPE_* */
  char deviceName[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
  uint8_t pipelineCacheUUID[VK_UUID_SIZE];
  VkPhysicalDeviceLimits limits;
  VkPhysicalDeviceSparseProperties sparseProperties;
} VkPhysicalDeviceProperties;

typedef struct VkPhysicalDeviceProperties2 {
  VkStructureType sType;
  void *pNext;
  VkPhysicalDeviceProperties properties;
} VkPhysicalDeviceProperties2;

/* Vulkan 1.1 (ferry_device_driver_info) */
#define VK_LUID_SIZE 8u
typedef struct VkPhysicalDeviceIDProperties {
  VkStructureType sType;
  void *pNext;
  uint8_t deviceUUID[VK_UUID_SIZE];
  uint8_t driverUUID[VK_UUID_SIZE];
  uint8_t deviceLUID[VK_LUID_SIZE];
  uint32_t deviceNodeMask;
  VkBool32 deviceLUIDValid;
} VkPhysicalDeviceIDProperties;

/* Vulkan 1.2 or VK_KHR_driver_properties (ferry_device_driver_info) */
#define VK_MAX_DRIVER_NAME_SIZE 256u
#define VK_MAX_DRIVER_INFO_SIZE 256u
typedef struct VkConformanceVersion {
  uint8_t major, minor, subminor, patch;
} VkConformanceVersion;
typedef struct VkPhysicalDeviceDriverProperties {
  VkStructureType sType;
  void *pNext;
  int32_t driverID; /* VkDriverId */
  char driverName[VK_MAX_DRIVER_NAME_SIZE];
  char driverInfo[VK_MAX_DRIVER_INFO_SIZE];
  VkConformanceVersion conformanceVersion;
} VkPhysicalDeviceDriverProperties;

/* VK_EXT_pci_bus_info (ferry_device_driver_info) */
typedef struct VkPhysicalDevicePCIBusInfoPropertiesEXT {
  VkStructureType sType;
  void *pNext;
  uint32_t pciDomain, pciBus, pciDevice, pciFunction;
} VkPhysicalDevicePCIBusInfoPropertiesEXT;

typedef struct VkPhysicalDeviceMaintenance3Properties {
  VkStructureType sType;
  void *pNext;
  uint32_t maxPerSetDescriptors;
  VkDeviceSize maxMemoryAllocationSize;
} VkPhysicalDeviceMaintenance3Properties;

typedef struct VkPhysicalDeviceMaintenance4Properties {
  VkStructureType sType;
  void *pNext;
  VkDeviceSize maxBufferSize;
} VkPhysicalDeviceMaintenance4Properties;

typedef struct VkPhysicalDeviceExternalMemoryHostPropertiesEXT {
  VkStructureType sType;
  void *pNext;
  VkDeviceSize minImportedHostPointerAlignment;
} VkPhysicalDeviceExternalMemoryHostPropertiesEXT;

typedef struct VkExtent3D {
  uint32_t width;
  uint32_t height;
  uint32_t depth;
} VkExtent3D;

typedef struct VkQueueFamilyProperties {
  VkFlags queueFlags;
  uint32_t queueCount;
  uint32_t timestampValidBits;
  VkExtent3D minImageTransferGranularity;
} VkQueueFamilyProperties;

typedef struct VkMemoryType {
  VkFlags propertyFlags;
  uint32_t heapIndex;
} VkMemoryType;

typedef struct VkMemoryHeap {
  VkDeviceSize size;
  VkFlags flags;
} VkMemoryHeap;

typedef struct VkPhysicalDeviceMemoryProperties {
  uint32_t memoryTypeCount;
  VkMemoryType memoryTypes[VK_MAX_MEMORY_TYPES];
  uint32_t memoryHeapCount;
  VkMemoryHeap memoryHeaps[VK_MAX_MEMORY_HEAPS];
} VkPhysicalDeviceMemoryProperties;

typedef struct VkPhysicalDeviceMemoryProperties2 {
  VkStructureType sType;
  void *pNext;
  VkPhysicalDeviceMemoryProperties memoryProperties;
} VkPhysicalDeviceMemoryProperties2;

typedef struct VkPhysicalDeviceMemoryBudgetPropertiesEXT {
  VkStructureType sType;
  void *pNext;
  VkDeviceSize heapBudget[VK_MAX_MEMORY_HEAPS];
  VkDeviceSize heapUsage[VK_MAX_MEMORY_HEAPS];
} VkPhysicalDeviceMemoryBudgetPropertiesEXT;

typedef struct VkPhysicalDeviceExternalBufferInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  VkFlags usage;
  VkFlags handleType;
} VkPhysicalDeviceExternalBufferInfo;

typedef struct VkExternalMemoryProperties {
  VkFlags externalMemoryFeatures;
  VkFlags exportFromImportedHandleTypes;
  VkFlags compatibleHandleTypes;
} VkExternalMemoryProperties;

typedef struct VkExternalBufferProperties {
  VkStructureType sType;
  void *pNext;
  VkExternalMemoryProperties externalMemoryProperties;
} VkExternalBufferProperties;

typedef struct VkDeviceQueueCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
  uint32_t queueCount;
  const float *pQueuePriorities;
} VkDeviceQueueCreateInfo;

typedef struct VkDeviceCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueCreateInfoCount;
  const VkDeviceQueueCreateInfo *pQueueCreateInfos;
  uint32_t enabledLayerCount;
  const char *const *ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char *const *ppEnabledExtensionNames;
  const void *pEnabledFeatures; /* const VkPhysicalDeviceFeatures *: ferry enables none */
} VkDeviceCreateInfo;

typedef struct VkBufferCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  VkDeviceSize size;
  VkFlags usage;
  int32_t sharingMode;
  uint32_t queueFamilyIndexCount;
  const uint32_t *pQueueFamilyIndices;
} VkBufferCreateInfo;

typedef struct VkExternalMemoryBufferCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags handleTypes;
} VkExternalMemoryBufferCreateInfo;

typedef struct VkMemoryRequirements {
  VkDeviceSize size;
  VkDeviceSize alignment;
  uint32_t memoryTypeBits;
} VkMemoryRequirements;

typedef struct VkMemoryAllocateInfo {
  VkStructureType sType;
  const void *pNext;
  VkDeviceSize allocationSize;
  uint32_t memoryTypeIndex;
} VkMemoryAllocateInfo;

typedef struct VkImportMemoryHostPointerInfoEXT {
  VkStructureType sType;
  const void *pNext;
  VkFlags handleType;
  void *pHostPointer;
} VkImportMemoryHostPointerInfoEXT;

typedef struct VkMemoryHostPointerPropertiesEXT {
  VkStructureType sType;
  void *pNext;
  uint32_t memoryTypeBits;
} VkMemoryHostPointerPropertiesEXT;

typedef struct VkMappedMemoryRange {
  VkStructureType sType;
  const void *pNext;
  VkDeviceMemory memory;
  VkDeviceSize offset;
  VkDeviceSize size;
} VkMappedMemoryRange;

typedef struct VkCommandPoolCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
} VkCommandPoolCreateInfo;

typedef struct VkCommandBufferAllocateInfo {
  VkStructureType sType;
  const void *pNext;
  VkCommandPool commandPool;
  int32_t level;
  uint32_t commandBufferCount;
} VkCommandBufferAllocateInfo;

typedef struct VkCommandBufferBeginInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  const void *pInheritanceInfo;
} VkCommandBufferBeginInfo;

typedef struct VkBufferCopy {
  VkDeviceSize srcOffset;
  VkDeviceSize dstOffset;
  VkDeviceSize size;
} VkBufferCopy;

typedef struct VkMemoryBarrier {
  VkStructureType sType;
  const void *pNext;
  VkFlags srcAccessMask;
  VkFlags dstAccessMask;
} VkMemoryBarrier;

typedef struct VkBufferMemoryBarrier {
  VkStructureType sType;
  const void *pNext;
  VkFlags srcAccessMask;
  VkFlags dstAccessMask;
  uint32_t srcQueueFamilyIndex;
  uint32_t dstQueueFamilyIndex;
  VkBuffer buffer;
  VkDeviceSize offset;
  VkDeviceSize size;
} VkBufferMemoryBarrier;

typedef struct VkSubmitInfo {
  VkStructureType sType;
  const void *pNext;
  uint32_t waitSemaphoreCount;
  const VkSemaphore *pWaitSemaphores;
  const VkFlags *pWaitDstStageMask;
  uint32_t commandBufferCount;
  const VkCommandBuffer *pCommandBuffers;
  uint32_t signalSemaphoreCount;
  const VkSemaphore *pSignalSemaphores;
} VkSubmitInfo;

typedef struct VkFenceCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
} VkFenceCreateInfo;

/* Semaphores: timeline semaphores are ferry's lanes and gates. */
typedef struct VkSemaphoreCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
} VkSemaphoreCreateInfo;

typedef struct VkSemaphoreTypeCreateInfo {
  VkStructureType sType;
  const void *pNext;
  int32_t semaphoreType; /* VK_SEMAPHORE_TYPE_* */
  uint64_t initialValue;
} VkSemaphoreTypeCreateInfo;

typedef struct VkTimelineSemaphoreSubmitInfo {
  VkStructureType sType;
  const void *pNext;
  uint32_t waitSemaphoreValueCount;
  const uint64_t *pWaitSemaphoreValues;
  uint32_t signalSemaphoreValueCount;
  const uint64_t *pSignalSemaphoreValues;
} VkTimelineSemaphoreSubmitInfo;

typedef struct VkSemaphoreWaitInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t semaphoreCount;
  const VkSemaphore *pSemaphores;
  const uint64_t *pValues;
} VkSemaphoreWaitInfo;

typedef struct VkSemaphoreSignalInfo {
  VkStructureType sType;
  const void *pNext;
  VkSemaphore semaphore;
  uint64_t value;
} VkSemaphoreSignalInfo;

/* Chained to VkDeviceCreateInfo to enable timeline semaphores. */
typedef struct VkPhysicalDeviceTimelineSemaphoreFeatures {
  VkStructureType sType;
  void *pNext;
  VkBool32 timelineSemaphore;
} VkPhysicalDeviceTimelineSemaphoreFeatures;

typedef struct VkQueryPoolCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  int32_t queryType; /* VK_QUERY_TYPE_* */
  uint32_t queryCount;
  VkFlags pipelineStatistics;
} VkQueryPoolCreateInfo;

/* Compute pipelines and descriptors. */
typedef struct VkShaderModuleCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  size_t codeSize;
  const uint32_t *pCode;
} VkShaderModuleCreateInfo;

typedef struct VkDescriptorSetLayoutBinding {
  uint32_t binding;
  int32_t descriptorType;
  uint32_t descriptorCount;
  VkFlags stageFlags;
  const VkSampler *pImmutableSamplers;
} VkDescriptorSetLayoutBinding;

typedef struct VkDescriptorSetLayoutCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t bindingCount;
  const VkDescriptorSetLayoutBinding *pBindings;
} VkDescriptorSetLayoutCreateInfo;

typedef struct VkPushConstantRange {
  VkFlags stageFlags;
  uint32_t offset;
  uint32_t size;
} VkPushConstantRange;

typedef struct VkPipelineLayoutCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t setLayoutCount;
  const VkDescriptorSetLayout *pSetLayouts;
  uint32_t pushConstantRangeCount;
  const VkPushConstantRange *pPushConstantRanges;
} VkPipelineLayoutCreateInfo;

typedef struct VkSpecializationMapEntry {
  uint32_t constantID;
  uint32_t offset;
  size_t size;
} VkSpecializationMapEntry;

typedef struct VkSpecializationInfo {
  uint32_t mapEntryCount;
  const VkSpecializationMapEntry *pMapEntries;
  size_t dataSize;
  const void *pData;
} VkSpecializationInfo;

typedef struct VkPipelineShaderStageCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  VkFlags stage;
  VkShaderModule module;
  const char *pName;
  const VkSpecializationInfo *pSpecializationInfo;
} VkPipelineShaderStageCreateInfo;

typedef struct VkComputePipelineCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  VkPipelineShaderStageCreateInfo stage;
  VkPipelineLayout layout;
  VkPipeline basePipelineHandle;
  int32_t basePipelineIndex;
} VkComputePipelineCreateInfo;

typedef struct VkDescriptorPoolSize {
  int32_t type;
  uint32_t descriptorCount;
} VkDescriptorPoolSize;

typedef struct VkDescriptorPoolCreateInfo {
  VkStructureType sType;
  const void *pNext;
  VkFlags flags;
  uint32_t maxSets;
  uint32_t poolSizeCount;
  const VkDescriptorPoolSize *pPoolSizes;
} VkDescriptorPoolCreateInfo;

typedef struct VkDescriptorSetAllocateInfo {
  VkStructureType sType;
  const void *pNext;
  VkDescriptorPool descriptorPool;
  uint32_t descriptorSetCount;
  const VkDescriptorSetLayout *pSetLayouts;
} VkDescriptorSetAllocateInfo;

typedef struct VkDescriptorBufferInfo {
  VkBuffer buffer;
  VkDeviceSize offset;
  VkDeviceSize range;
} VkDescriptorBufferInfo;

typedef struct VkWriteDescriptorSet {
  VkStructureType sType;
  const void *pNext;
  VkDescriptorSet dstSet;
  uint32_t dstBinding;
  uint32_t dstArrayElement;
  uint32_t descriptorCount;
  int32_t descriptorType;
  const void *pImageInfo; /* const VkDescriptorImageInfo * */
  const VkDescriptorBufferInfo *pBufferInfo;
  const VkBufferView *pTexelBufferView;
} VkWriteDescriptorSet;

/* ---- functions ------------------------------------------------------------ */

typedef void(FERRY_VKAPI *PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction(FERRY_VKAPI *PFN_vkGetInstanceProcAddr)(VkInstance, const char *);
typedef PFN_vkVoidFunction(FERRY_VKAPI *PFN_vkGetDeviceProcAddr)(VkDevice, const char *);

/* The table: one pointer per entry point, named as in Vulkan. Global and
 * instance-level functions come from vkGetInstanceProcAddr; device-level ones
 * too (the loader's trampolines dispatch to each device's driver). */
#define FERRY_VK_GLOBAL_FUNCTIONS(X)                                                                                   \
  X(VkResult, vkCreateInstance, (const VkInstanceCreateInfo *, const void *, VkInstance *))                            \
  X(VkResult, vkEnumerateInstanceExtensionProperties, (const char *, uint32_t *, VkExtensionProperties *))

#define FERRY_VK_OPTIONAL_GLOBAL_FUNCTIONS(X) X(VkResult, vkEnumerateInstanceVersion, (uint32_t *))

#define FERRY_VK_INSTANCE_FUNCTIONS(X)                                                                                 \
  X(void, vkDestroyInstance, (VkInstance, const void *))                                                               \
  X(VkResult, vkEnumeratePhysicalDevices, (VkInstance, uint32_t *, VkPhysicalDevice *))                                \
  X(void, vkGetPhysicalDeviceProperties, (VkPhysicalDevice, VkPhysicalDeviceProperties *))                             \
  X(void, vkGetPhysicalDeviceMemoryProperties, (VkPhysicalDevice, VkPhysicalDeviceMemoryProperties *))                 \
  X(void, vkGetPhysicalDeviceQueueFamilyProperties, (VkPhysicalDevice, uint32_t *, VkQueueFamilyProperties *))         \
  X(VkResult, vkEnumerateDeviceExtensionProperties,                                                                    \
    (VkPhysicalDevice, const char *, uint32_t *, VkExtensionProperties *))                                             \
  X(VkResult, vkCreateDevice, (VkPhysicalDevice, const VkDeviceCreateInfo *, const void *, VkDevice *))                \
  X(PFN_vkVoidFunction, vkGetDeviceProcAddr, (VkDevice, const char *))                                                 \
  X(void, vkDestroyDevice, (VkDevice, const void *))                                                                   \
  X(VkResult, vkDeviceWaitIdle, (VkDevice))                                                                            \
  X(void, vkGetDeviceQueue, (VkDevice, uint32_t, uint32_t, VkQueue *))                                                 \
  X(VkResult, vkQueueSubmit, (VkQueue, uint32_t, const VkSubmitInfo *, VkFence))                                       \
  X(VkResult, vkQueueWaitIdle, (VkQueue))                                                                              \
  X(VkResult, vkCreateBuffer, (VkDevice, const VkBufferCreateInfo *, const void *, VkBuffer *))                        \
  X(void, vkDestroyBuffer, (VkDevice, VkBuffer, const void *))                                                         \
  X(void, vkGetBufferMemoryRequirements, (VkDevice, VkBuffer, VkMemoryRequirements *))                                 \
  X(VkResult, vkAllocateMemory, (VkDevice, const VkMemoryAllocateInfo *, const void *, VkDeviceMemory *))              \
  X(void, vkFreeMemory, (VkDevice, VkDeviceMemory, const void *))                                                      \
  X(VkResult, vkBindBufferMemory, (VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize))                                  \
  X(VkResult, vkMapMemory, (VkDevice, VkDeviceMemory, VkDeviceSize, VkDeviceSize, VkFlags, void **))                   \
  X(void, vkUnmapMemory, (VkDevice, VkDeviceMemory))                                                                   \
  X(VkResult, vkFlushMappedMemoryRanges, (VkDevice, uint32_t, const VkMappedMemoryRange *))                            \
  X(VkResult, vkInvalidateMappedMemoryRanges, (VkDevice, uint32_t, const VkMappedMemoryRange *))                       \
  X(VkResult, vkCreateCommandPool, (VkDevice, const VkCommandPoolCreateInfo *, const void *, VkCommandPool *))         \
  X(void, vkDestroyCommandPool, (VkDevice, VkCommandPool, const void *))                                               \
  X(VkResult, vkAllocateCommandBuffers, (VkDevice, const VkCommandBufferAllocateInfo *, VkCommandBuffer *))            \
  X(void, vkFreeCommandBuffers, (VkDevice, VkCommandPool, uint32_t, const VkCommandBuffer *))                          \
  X(VkResult, vkBeginCommandBuffer, (VkCommandBuffer, const VkCommandBufferBeginInfo *))                               \
  X(VkResult, vkEndCommandBuffer, (VkCommandBuffer))                                                                   \
  X(void, vkCmdCopyBuffer, (VkCommandBuffer, VkBuffer, VkBuffer, uint32_t, const VkBufferCopy *))                      \
  X(void, vkCmdPipelineBarrier,                                                                                        \
    (VkCommandBuffer, VkFlags, VkFlags, VkFlags, uint32_t, const VkMemoryBarrier *, uint32_t,                          \
     const VkBufferMemoryBarrier *, uint32_t, const void *))                                                           \
  X(VkResult, vkCreateFence, (VkDevice, const VkFenceCreateInfo *, const void *, VkFence *))                           \
  X(void, vkDestroyFence, (VkDevice, VkFence, const void *))                                                           \
  X(VkResult, vkResetFences, (VkDevice, uint32_t, const VkFence *))                                                    \
  X(VkResult, vkGetFenceStatus, (VkDevice, VkFence))                                                                   \
  X(VkResult, vkWaitForFences, (VkDevice, uint32_t, const VkFence *, VkBool32, uint64_t))                              \
  X(VkResult, vkCreateSemaphore, (VkDevice, const VkSemaphoreCreateInfo *, const void *, VkSemaphore *))               \
  X(void, vkDestroySemaphore, (VkDevice, VkSemaphore, const void *))                                                   \
  X(void, vkCmdFillBuffer, (VkCommandBuffer, VkBuffer, VkDeviceSize, VkDeviceSize, uint32_t))                          \
  X(void, vkCmdUpdateBuffer, (VkCommandBuffer, VkBuffer, VkDeviceSize, VkDeviceSize, const void *))                    \
  X(VkResult, vkCreateQueryPool, (VkDevice, const VkQueryPoolCreateInfo *, const void *, VkQueryPool *))               \
  X(void, vkDestroyQueryPool, (VkDevice, VkQueryPool, const void *))                                                   \
  X(void, vkCmdResetQueryPool, (VkCommandBuffer, VkQueryPool, uint32_t, uint32_t))                                     \
  X(void, vkCmdWriteTimestamp, (VkCommandBuffer, VkFlags, VkQueryPool, uint32_t))                                      \
  X(VkResult, vkGetQueryPoolResults, (VkDevice, VkQueryPool, uint32_t, uint32_t, size_t, void *, VkDeviceSize, VkFlags))

/* Instance-level functions of Vulkan 1.1 (NULL before 1.1: ferry then uses the 1.0 queries). */
#define FERRY_VK_OPTIONAL_INSTANCE_FUNCTIONS(X)                                                                        \
  X(void, vkGetPhysicalDeviceProperties2, (VkPhysicalDevice, VkPhysicalDeviceProperties2 *))                           \
  X(void, vkGetPhysicalDeviceMemoryProperties2, (VkPhysicalDevice, VkPhysicalDeviceMemoryProperties2 *))               \
  X(void, vkGetPhysicalDeviceExternalBufferProperties,                                                                 \
    (VkPhysicalDevice, const VkPhysicalDeviceExternalBufferInfo *, VkExternalBufferProperties *))

/* For users' own compute work on ferry's buffers (tests, examples); ferry does not call them. */
#define FERRY_VK_COMPUTE_FUNCTIONS(X)                                                                                  \
  X(VkResult, vkCreateShaderModule, (VkDevice, const VkShaderModuleCreateInfo *, const void *, VkShaderModule *))      \
  X(void, vkDestroyShaderModule, (VkDevice, VkShaderModule, const void *))                                             \
  X(VkResult, vkCreateDescriptorSetLayout,                                                                             \
    (VkDevice, const VkDescriptorSetLayoutCreateInfo *, const void *, VkDescriptorSetLayout *))                        \
  X(void, vkDestroyDescriptorSetLayout, (VkDevice, VkDescriptorSetLayout, const void *))                               \
  X(VkResult, vkCreatePipelineLayout,                                                                                  \
    (VkDevice, const VkPipelineLayoutCreateInfo *, const void *, VkPipelineLayout *))                                  \
  X(void, vkDestroyPipelineLayout, (VkDevice, VkPipelineLayout, const void *))                                         \
  X(VkResult, vkCreateComputePipelines,                                                                                \
    (VkDevice, VkPipelineCache, uint32_t, const VkComputePipelineCreateInfo *, const void *, VkPipeline *))            \
  X(void, vkDestroyPipeline, (VkDevice, VkPipeline, const void *))                                                     \
  X(VkResult, vkCreateDescriptorPool,                                                                                  \
    (VkDevice, const VkDescriptorPoolCreateInfo *, const void *, VkDescriptorPool *))                                  \
  X(void, vkDestroyDescriptorPool, (VkDevice, VkDescriptorPool, const void *))                                         \
  X(VkResult, vkAllocateDescriptorSets, (VkDevice, const VkDescriptorSetAllocateInfo *, VkDescriptorSet *))            \
  X(void, vkUpdateDescriptorSets, (VkDevice, uint32_t, const VkWriteDescriptorSet *, uint32_t, const void *))          \
  X(void, vkCmdBindPipeline, (VkCommandBuffer, int32_t, VkPipeline))                                                   \
  X(void, vkCmdBindDescriptorSets,                                                                                     \
    (VkCommandBuffer, int32_t, VkPipelineLayout, uint32_t, uint32_t, const VkDescriptorSet *, uint32_t,                \
     const uint32_t *))                                                                                                \
  X(void, vkCmdPushConstants, (VkCommandBuffer, VkPipelineLayout, VkFlags, uint32_t, uint32_t, const void *))          \
  X(void, vkCmdDispatch, (VkCommandBuffer, uint32_t, uint32_t, uint32_t))

/* Device-level extension functions, loaded per device with vkGetDeviceProcAddr
 * once the extension is enabled on it. */
typedef VkResult(FERRY_VKAPI *PFN_vkGetMemoryHostPointerPropertiesEXT)(VkDevice, VkFlags, const void *,
                                                                       VkMemoryHostPointerPropertiesEXT *);
/* Timeline semaphores: Vulkan 1.2's names, or VK_KHR_timeline_semaphore's (the
 * same functions with the suffix KHR) on a 1.1 device with the extension. */
typedef VkResult(FERRY_VKAPI *PFN_vkGetSemaphoreCounterValue)(VkDevice, VkSemaphore, uint64_t *);
typedef VkResult(FERRY_VKAPI *PFN_vkWaitSemaphores)(VkDevice, const VkSemaphoreWaitInfo *, uint64_t);
typedef VkResult(FERRY_VKAPI *PFN_vkSignalSemaphore)(VkDevice, const VkSemaphoreSignalInfo *);

#define FERRY_VK_DECLARE_PFN(ret, name, args) typedef ret(FERRY_VKAPI *PFN_##name) args;
FERRY_VK_GLOBAL_FUNCTIONS(FERRY_VK_DECLARE_PFN)
FERRY_VK_OPTIONAL_GLOBAL_FUNCTIONS(FERRY_VK_DECLARE_PFN)
FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_DECLARE_PFN)
FERRY_VK_OPTIONAL_INSTANCE_FUNCTIONS(FERRY_VK_DECLARE_PFN)
FERRY_VK_COMPUTE_FUNCTIONS(FERRY_VK_DECLARE_PFN)
#undef FERRY_VK_DECLARE_PFN

typedef struct ferry_vk_api {
  void *library;          /* the dlopen handle of the loader */
  char library_name[256]; /* what was opened: "libvulkan.so.1" or FERRY_VULKAN_LIBRARY */
  VkInstance instance;    /* ferry's one instance; every ferry Vulkan device comes from it */
  uint32_t instance_version;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define FERRY_VK_MEMBER(ret, name, args) PFN_##name name;
  FERRY_VK_GLOBAL_FUNCTIONS(FERRY_VK_MEMBER)
  FERRY_VK_OPTIONAL_GLOBAL_FUNCTIONS(FERRY_VK_MEMBER)
  FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_MEMBER)
  FERRY_VK_OPTIONAL_INSTANCE_FUNCTIONS(FERRY_VK_MEMBER)
  FERRY_VK_COMPUTE_FUNCTIONS(FERRY_VK_MEMBER) /* NULL where the loader lacks one */
#undef FERRY_VK_MEMBER
} ferry_vk_api;

/* The loaded API while the vulkan backend has devices; NULL when the loader is
 * absent, no device was found, or before ferry_init / after ferry_shutdown. */
const ferry_vk_api *ferry__vulkan_api(void);

/* "VK_ERROR_OUT_OF_DEVICE_MEMORY"; "VkResult" for a code this file does not name. */
const char *ferry__vulkan_result_name(VkResult r);

#endif /* FERRY_VULKAN_API_H */
