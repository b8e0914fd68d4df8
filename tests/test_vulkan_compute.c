/*
 * A compute shader of our own on ferry's Vulkan buffers: the buffer is bound
 * through ferry_device_ptr (the VkBuffer) on ferry's VkDevice and VkQueue from
 * ferry_device_native; the shader adds 1 to every 32-bit word; ferry reads the
 * result back. The same over a host-pointer buffer where the device has
 * VK_EXT_external_memory_host, and over small buffers that may share a block of
 * memory (each bound at its own offset); and a dispatch on a ferry queue's own
 * VkQueue (ferry_queue_native), ordered after the queue's write by an event.
 *
 * Each device is tested as it comes, and again with FERRY_VULKAN_DEBUG=
 * staging,suballoc,noncoherent (the paths of a discrete GPU, on any driver),
 * unless FERRY_VULKAN_DEBUG is set already.
 *
 * Skips (exit 77, saying why) without a Vulkan device, unless
 * FERRY_REQUIRE_BACKENDS names vulkan: then it fails.
 */
#include "backends/vulkan/vulkan_api.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* glslangValidator -V --target-env vulkan1.0 -o increment.spv increment.comp, from:

   #version 450
   // Adds 1 to each of the first `count` 32-bit words of the buffer at binding 0.
   layout(local_size_x = 64) in;
   layout(std430, set = 0, binding = 0) buffer Data { uint words[]; } data;
   layout(push_constant) uniform Push { uint count; } push;
   void main() {
     uint i = gl_GlobalInvocationID.x;
     if (i < push.count) data.words[i] += 1u;
   }
*/
static const uint32_t increment_spv[] = {
    0x07230203, 0x00010000, 0x0008000b, 0x0000002a, 0x00000000, 0x00020011, 0x00000001, 0x0006000b, 0x00000001,
    0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001, 0x0006000f, 0x00000005,
    0x00000004, 0x6e69616d, 0x00000000, 0x0000000b, 0x00060010, 0x00000004, 0x00000011, 0x00000040, 0x00000001,
    0x00000001, 0x00030003, 0x00000002, 0x000001c2, 0x00040005, 0x00000004, 0x6e69616d, 0x00000000, 0x00030005,
    0x00000008, 0x00000069, 0x00080005, 0x0000000b, 0x475f6c67, 0x61626f6c, 0x766e496c, 0x7461636f, 0x496e6f69,
    0x00000044, 0x00040005, 0x00000011, 0x68737550, 0x00000000, 0x00050006, 0x00000011, 0x00000000, 0x6e756f63,
    0x00000074, 0x00040005, 0x00000013, 0x68737570, 0x00000000, 0x00040005, 0x0000001e, 0x61746144, 0x00000000,
    0x00050006, 0x0000001e, 0x00000000, 0x64726f77, 0x00000073, 0x00040005, 0x00000020, 0x61746164, 0x00000000,
    0x00040047, 0x0000000b, 0x0000000b, 0x0000001c, 0x00050048, 0x00000011, 0x00000000, 0x00000023, 0x00000000,
    0x00030047, 0x00000011, 0x00000002, 0x00040047, 0x0000001d, 0x00000006, 0x00000004, 0x00050048, 0x0000001e,
    0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x0000001e, 0x00000003, 0x00040047, 0x00000020, 0x00000022,
    0x00000000, 0x00040047, 0x00000020, 0x00000021, 0x00000000, 0x00040047, 0x00000029, 0x0000000b, 0x00000019,
    0x00020013, 0x00000002, 0x00030021, 0x00000003, 0x00000002, 0x00040015, 0x00000006, 0x00000020, 0x00000000,
    0x00040020, 0x00000007, 0x00000007, 0x00000006, 0x00040017, 0x00000009, 0x00000006, 0x00000003, 0x00040020,
    0x0000000a, 0x00000001, 0x00000009, 0x0004003b, 0x0000000a, 0x0000000b, 0x00000001, 0x0004002b, 0x00000006,
    0x0000000c, 0x00000000, 0x00040020, 0x0000000d, 0x00000001, 0x00000006, 0x0003001e, 0x00000011, 0x00000006,
    0x00040020, 0x00000012, 0x00000009, 0x00000011, 0x0004003b, 0x00000012, 0x00000013, 0x00000009, 0x00040015,
    0x00000014, 0x00000020, 0x00000001, 0x0004002b, 0x00000014, 0x00000015, 0x00000000, 0x00040020, 0x00000016,
    0x00000009, 0x00000006, 0x00020014, 0x00000019, 0x0003001d, 0x0000001d, 0x00000006, 0x0003001e, 0x0000001e,
    0x0000001d, 0x00040020, 0x0000001f, 0x00000002, 0x0000001e, 0x0004003b, 0x0000001f, 0x00000020, 0x00000002,
    0x0004002b, 0x00000006, 0x00000022, 0x00000001, 0x00040020, 0x00000023, 0x00000002, 0x00000006, 0x0004002b,
    0x00000006, 0x00000028, 0x00000040, 0x0006002c, 0x00000009, 0x00000029, 0x00000028, 0x00000022, 0x00000022,
    0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003, 0x000200f8, 0x00000005, 0x0004003b, 0x00000007,
    0x00000008, 0x00000007, 0x00050041, 0x0000000d, 0x0000000e, 0x0000000b, 0x0000000c, 0x0004003d, 0x00000006,
    0x0000000f, 0x0000000e, 0x0003003e, 0x00000008, 0x0000000f, 0x0004003d, 0x00000006, 0x00000010, 0x00000008,
    0x00050041, 0x00000016, 0x00000017, 0x00000013, 0x00000015, 0x0004003d, 0x00000006, 0x00000018, 0x00000017,
    0x000500b0, 0x00000019, 0x0000001a, 0x00000010, 0x00000018, 0x000300f7, 0x0000001c, 0x00000000, 0x000400fa,
    0x0000001a, 0x0000001b, 0x0000001c, 0x000200f8, 0x0000001b, 0x0004003d, 0x00000006, 0x00000021, 0x00000008,
    0x00060041, 0x00000023, 0x00000024, 0x00000020, 0x00000015, 0x00000021, 0x0004003d, 0x00000006, 0x00000025,
    0x00000024, 0x00050080, 0x00000006, 0x00000026, 0x00000025, 0x00000022, 0x00060041, 0x00000023, 0x00000027,
    0x00000020, 0x00000015, 0x00000021, 0x0003003e, 0x00000027, 0x00000026, 0x000200f9, 0x0000001c, 0x000200f8,
    0x0000001c, 0x000100fd, 0x00010038,
};

#define LOCAL_SIZE 64

typedef struct kernel {
  const ferry_vk_api *vk;
  VkDevice device;
  VkQueue queue;
  VkShaderModule module;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  VkDescriptorPool pool;
  VkDescriptorSet set;
  VkCommandPool commands;
  VkCommandBuffer cb;
  VkFence fence;
} kernel;

#define VK_CHECK(call)                                                                                                 \
  do {                                                                                                                 \
    VkResult r_ = (call);                                                                                              \
    CHECK_MSG(r_ == VK_SUCCESS, "%s returned %s (%d)", #call, ferry__vulkan_result_name(r_), (int)r_);                 \
    if (r_ != VK_SUCCESS) return false;                                                                                \
  } while (0)

static bool kernel_open(kernel *k, ferry_device *dev) {
  memset(k, 0, sizeof *k);
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  const ferry_vk_api *vk = k->vk = ferry__vulkan_api();
  CHECK(vk != NULL);
  if (!vk) return false;
  CHECK_MSG(vk->vkCreateShaderModule && vk->vkCreateComputePipelines && vk->vkCmdDispatch,
            "the loader lacks the compute entry points");
  if (!vk->vkCreateShaderModule || !vk->vkCreateComputePipelines || !vk->vkCmdDispatch) return false;
  k->device = (VkDevice)nat.context;
  k->queue = (VkQueue)nat.queue;

  VkShaderModuleCreateInfo sm = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = sizeof increment_spv, .pCode = increment_spv};
  VK_CHECK(vk->vkCreateShaderModule(k->device, &sm, NULL, &k->module));
  VkDescriptorSetLayoutBinding binding = {.binding = 0,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          .descriptorCount = 1,
                                          .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo sl = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 1, .pBindings = &binding};
  VK_CHECK(vk->vkCreateDescriptorSetLayout(k->device, &sl, NULL, &k->set_layout));
  VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(uint32_t)};
  VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                   .setLayoutCount = 1,
                                   .pSetLayouts = &k->set_layout,
                                   .pushConstantRangeCount = 1,
                                   .pPushConstantRanges = &push};
  VK_CHECK(vk->vkCreatePipelineLayout(k->device, &pl, NULL, &k->layout));
  VkComputePipelineCreateInfo cp = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                              .module = k->module,
                                              .pName = "main"},
                                    .layout = k->layout,
                                    .basePipelineIndex = -1};
  VK_CHECK(vk->vkCreateComputePipelines(k->device, VK_NULL_HANDLE, 1, &cp, NULL, &k->pipeline));
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1};
  VkDescriptorPoolCreateInfo dp = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &size};
  VK_CHECK(vk->vkCreateDescriptorPool(k->device, &dp, NULL, &k->pool));
  VkDescriptorSetAllocateInfo ds = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = k->pool,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &k->set_layout};
  VK_CHECK(vk->vkAllocateDescriptorSets(k->device, &ds, &k->set));
  VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                 .queueFamilyIndex = nat.queue_family};
  VK_CHECK(vk->vkCreateCommandPool(k->device, &cpi, NULL, &k->commands));
  VkCommandBufferAllocateInfo cba = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = k->commands,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  VK_CHECK(vk->vkAllocateCommandBuffers(k->device, &cba, &k->cb));
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_CHECK(vk->vkCreateFence(k->device, &fi, NULL, &k->fence));
  return true;
}

static void kernel_close(kernel *k) {
  const ferry_vk_api *vk = k->vk;
  if (!vk || !k->device) return;
  vk->vkDeviceWaitIdle(k->device);
  if (k->fence) vk->vkDestroyFence(k->device, k->fence, NULL);
  if (k->commands) vk->vkDestroyCommandPool(k->device, k->commands, NULL);
  if (k->pool) vk->vkDestroyDescriptorPool(k->device, k->pool, NULL);
  if (k->pipeline) vk->vkDestroyPipeline(k->device, k->pipeline, NULL);
  if (k->layout) vk->vkDestroyPipelineLayout(k->device, k->layout, NULL);
  if (k->set_layout) vk->vkDestroyDescriptorSetLayout(k->device, k->set_layout, NULL);
  if (k->module) vk->vkDestroyShaderModule(k->device, k->module, NULL);
  memset(k, 0, sizeof *k);
}

/* Adds 1 to the first `count` words of the buffer, on ferry's queue, and waits. */
static bool kernel_run(kernel *k, ferry_buffer b, uint32_t count) {
  const ferry_vk_api *vk = k->vk;
  VkBuffer buffer = (VkBuffer)ferry_device_ptr(b);
  CHECK(buffer != VK_NULL_HANDLE);
  VkDescriptorBufferInfo info = {.buffer = buffer, .offset = 0, .range = VK_WHOLE_SIZE};
  VkWriteDescriptorSet write = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                .dstSet = k->set,
                                .dstBinding = 0,
                                .descriptorCount = 1,
                                .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                .pBufferInfo = &info};
  vk->vkUpdateDescriptorSets(k->device, 1, &write, 0, NULL);
  VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VK_CHECK(vk->vkBeginCommandBuffer(k->cb, &begin));
  /* ferry's writes are complete; make them visible to the shader, and the shader's to ferry. */
  VkMemoryBarrier before = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                            .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT,
                            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
  vk->vkCmdPipelineBarrier(k->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &before, 0, NULL, 0, NULL);
  vk->vkCmdBindPipeline(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
  vk->vkCmdBindDescriptorSets(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &k->set, 0, NULL);
  vk->vkCmdPushConstants(k->cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof count, &count);
  vk->vkCmdDispatch(k->cb, (count + LOCAL_SIZE - 1) / LOCAL_SIZE, 1, 1);
  VkMemoryBarrier after = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_HOST_READ_BIT};
  vk->vkCmdPipelineBarrier(k->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after, 0, NULL, 0,
                           NULL);
  VK_CHECK(vk->vkEndCommandBuffer(k->cb));
  VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &k->cb};
  /* ferry is idle on this device (this test is single-threaded): the queue is ours to submit to. */
  VK_CHECK(vk->vkQueueSubmit(k->queue, 1, &submit, k->fence));
  VK_CHECK(vk->vkWaitForFences(k->device, 1, &k->fence, VK_TRUE, UINT64_MAX));
  VK_CHECK(vk->vkResetFences(k->device, 1, &k->fence));
  return true;
}

static uint32_t word_at(size_t i, uint32_t seed) { return (uint32_t)(i * 2654435761u) ^ seed; }

static size_t first_wrong(const uint32_t *w, size_t n, uint32_t seed, uint32_t plus) {
  for (size_t i = 0; i < n; i++)
    if (w[i] != word_at(i, seed) + plus) return i;
  return SIZE_MAX;
}

/* A plain buffer, incremented twice, read back, and copied by ferry afterwards. */
static void plain_buffer(kernel *k, ferry_device *dev) {
  const size_t n = 100003; /* not a multiple of the work-group size */
  uint32_t *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
  for (size_t i = 0; i < n; i++)
    h[i] = word_at(i, 1);
  ferry_buffer b = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT32, &b));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT32, &c));
  CHECK_OK(ferry_host_to_device(ferry_array_of(h, n, FERRY_UINT32), b));
  if (kernel_run(k, b, (uint32_t)n)) {
    memset(back, 0, n * sizeof *back);
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_UINT32)));
    size_t at = first_wrong(back, n, 1, 1);
    CHECK_MSG(at == SIZE_MAX, "word %zu of %zu after one run: %u, expected %u", at, n, back[at], word_at(at, 1) + 1);
  }
  /* ferry's own transfers and copies see the kernel's writes. */
  if (kernel_run(k, b, (uint32_t)n)) {
    CHECK_OK(ferry_device_to_device(b, c));
    memset(back, 0, n * sizeof *back);
    CHECK_OK(ferry_device_to_host(c, ferry_array_of(back, n, FERRY_UINT32)));
    size_t at = first_wrong(back, n, 1, 2);
    CHECK_MSG(at == SIZE_MAX, "word %zu of %zu after two runs and a copy", at, n);
    uint32_t some[5];
    CHECK_OK(ferry_read(b, 4 * 70000, some, sizeof some));
    for (size_t i = 0; i < 5; i++)
      CHECK(some[i] == word_at(70000 + i, 1) + 2);
  }
  /* A kernel on the copy: the source stays as it was. */
  if (kernel_run(k, c, (uint32_t)n)) {
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_UINT32)));
    CHECK(first_wrong(back, n, 1, 2) == SIZE_MAX);
    CHECK_OK(ferry_device_to_host(c, ferry_array_of(back, n, FERRY_UINT32)));
    CHECK(first_wrong(back, n, 1, 3) == SIZE_MAX);
  }
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
  free(h);
  free(back);
}

/* Small buffers side by side (in one block where ferry sub-allocates): the kernel on
 * the middle one changes it alone. */
static void small_buffers(kernel *k, ferry_device *dev) {
  enum { COUNT = 5, N = 300 };
  ferry_buffer b[COUNT];
  uint32_t h[N], back[N];
  for (int j = 0; j < COUNT; j++) {
    b[j] = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, N, FERRY_UINT32, &b[j]));
    for (size_t i = 0; i < N; i++)
      h[i] = word_at(i, 100 + (uint32_t)j);
    CHECK_OK(ferry_host_to_device(ferry_array_of(h, N, FERRY_UINT32), b[j]));
  }
  if (kernel_run(k, b[2], N)) {
    for (int j = 0; j < COUNT; j++) {
      memset(back, 0, sizeof back);
      CHECK_OK(ferry_device_to_host(b[j], ferry_array_of(back, N, FERRY_UINT32)));
      size_t at = first_wrong(back, N, 100 + (uint32_t)j, j == 2 ? 1 : 0);
      CHECK_MSG(at == SIZE_MAX, "small buffer %d, word %zu", j, at);
    }
  }
  for (int j = 0; j < COUNT; j++)
    CHECK_OK(ferry_free(b[j]));
}

/* A buffer over the user's array: the kernel's result is in the array once ferry hands it back. */
static void host_pointer_buffer(kernel *k, ferry_device *dev, const ferry_device_info *info) {
  if (!info->host_ptr) {
    printf("  (no host-pointer buffers on this device: VK_EXT_external_memory_host is missing)\n");
    return;
  }
  size_t align = info->host_ptr_alignment, bytes = ((size_t)256 << 10) / align * align;
  if (bytes == 0) bytes = align;
  size_t n = bytes / sizeof(uint32_t);
  uint32_t *array = harness_aligned(align, bytes), *back = malloc(bytes);
  for (size_t i = 0; i < n; i++)
    array[i] = word_at(i, 7);
  ferry_buffer h = FERRY_NULL_BUFFER, plain = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_UINT32), &h, &why));
  CHECK(!ferry_is_zero_copy(h)); /* host access needs the synchronising transfers */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_UINT32), h)); /* hand the array to the device */
  if (kernel_run(k, h, (uint32_t)n)) {
    CHECK_OK(ferry_device_to_host(h, ferry_array_of(array, n, FERRY_UINT32))); /* and take it back */
    size_t at = first_wrong(array, n, 7, 1);
    CHECK_MSG(at == SIZE_MAX, "host-pointer array word %zu of %zu: %u, expected %u", at, n, array[at],
              word_at(at, 7) + 1);
    /* ferry copies out of it, to a buffer of its own. */
    CHECK_OK(ferry_alloc(dev, n, FERRY_UINT32, &plain));
    CHECK_OK(ferry_device_to_device(h, plain));
    if (kernel_run(k, plain, (uint32_t)n)) {
      CHECK_OK(ferry_device_to_host(plain, ferry_array_of(back, n, FERRY_UINT32)));
      CHECK(first_wrong(back, n, 7, 2) == SIZE_MAX);
      CHECK(first_wrong(array, n, 7, 1) == SIZE_MAX);
    }
    CHECK_OK(ferry_free(plain));
  }
  CHECK_OK(ferry_free(h));
  CHECK(first_wrong(array, n, 7, 1) == SIZE_MAX); /* the array is the user's again, with the last bytes */
  free(array);
  free(back);
}

/* A dispatch on a ferry queue's own VkQueue (ferry_queue_native), ordered after
 * the queue's write by an event: ferry_event_record, then the host waits for the
 * event (Vulkan's queues are the program's to order: ferry_queue_native's rule),
 * then the dispatch, then a read queued on the same ferry queue. */
static void queue_event_dispatch(kernel *k, ferry_device *dev, uint32_t family) {
  ferry_queue q = FERRY_NULL_QUEUE;
  ferry_event written = FERRY_NULL_EVENT;
  CHECK_OK(ferry_queue_create(dev, &q));
  CHECK_OK(ferry_event_create(&written));
  ferry_native qn = {0};
  ferry_status st = ferry_queue_native(q, &qn);
  if (st == FERRY_ERROR_UNSUPPORTED) {
    printf("  (queues on no VkQueue of their own here: %s)\n", ferry_last_error());
  } else if (qn.queue_family != family) {
    CHECK_OK(st);
    printf("  (the queue's family %u is not the kernel's %u: the dispatch case is not run)\n", qn.queue_family, family);
  } else {
    CHECK_OK(st);
    const size_t n = 100003;
    uint32_t *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++)
      h[i] = word_at(i, 9);
    memset(back, 0, n * sizeof *back);
    ferry_buffer b = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, n, FERRY_UINT32, &b));
    CHECK_OK(ferry_write_async(q, b, 0, h, n * sizeof *h));
    CHECK_OK(ferry_event_record(written, q));
    CHECK_OK(ferry_event_synchronize(written));
    VkQueue own = k->queue;
    k->queue = (VkQueue)qn.queue;
    bool ran = kernel_run(k, b, (uint32_t)n);
    k->queue = own;
    if (ran) {
      CHECK_OK(ferry_read_async(q, b, 0, back, n * sizeof *back));
      CHECK_OK(ferry_queue_synchronize(q));
      size_t at = first_wrong(back, n, 9, 1);
      CHECK_MSG(at == SIZE_MAX, "word %zu of %zu after a dispatch on the ferry queue's VkQueue: %u, expected %u", at, n,
                at == SIZE_MAX ? 0 : back[at], at == SIZE_MAX ? 0 : word_at(at, 9) + 1);
    }
    CHECK_OK(ferry_free(b));
    free(h);
    free(back);
  }
  CHECK_OK(ferry_event_destroy(written));
  CHECK_OK(ferry_queue_destroy(q));
}

static int run_devices(const char *mode) {
  ferry_status st = ferry_init();
  CHECK_OK(st);
  if (st != FERRY_OK) return 0;
  int devices = 0;
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev = NULL;
    ferry_device_info info;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &info);
    if (strcmp(info.backend, "vulkan") != 0) continue;
    devices++;
    printf("device %zu (%s)%s%s\n", info.index, info.name, *mode ? ", FERRY_VULKAN_DEBUG=" : "", mode);
    kernel k;
    if (kernel_open(&k, dev)) {
      plain_buffer(&k, dev);
      small_buffers(&k, dev);
      host_pointer_buffer(&k, dev, &info);
      ferry_native nat;
      CHECK_OK(ferry_device_native(dev, &nat));
      queue_event_dispatch(&k, dev, nat.queue_family);
    }
    kernel_close(&k);
  }
  ferry_shutdown();
  return devices;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info b;
  int present = harness_start_backend("vulkan", "vulkan_compute", &b);
  if (present != 0) return present;
  ferry_shutdown();

  const char *preset = getenv("FERRY_VULKAN_DEBUG");
  run_devices(preset ? preset : "");
  if (!preset) {
    /* The paths of a discrete GPU: staging, blocks of small buffers, flush and invalidate. */
    setenv("FERRY_VULKAN_DEBUG", "staging,suballoc,noncoherent", 1);
    run_devices("staging,suballoc,noncoherent");
    unsetenv("FERRY_VULKAN_DEBUG");
  }
  return harness_finish("vulkan_compute");
}
