/*
 * Moving bytes.
 *
 *  - Mapped buffers (device memory that is the host's: lavapipe, integrated GPUs)
 *    and buffers over the user's array: the core copies coherent ones itself
 *    (ferry_mem.host); write and read here memcpy the others, with flush /
 *    invalidate.
 *  - Other buffers have no direct path (write and read refuse them): the core
 *    stages their bytes through pinned memory and moves them by DMA, one
 *    vkCmdCopyBuffer between the pinned block's VkBuffer and the buffer.
 *  - DMA runs on a queue of a transfer-only family where asked
 *    (FERRY_VULKAN_DEBUG=transferqueue), else on a compute queue.
 *  - Copies within a device run on a compute queue: large ones (1 MiB and up,
 *    source and destination offsets equal modulo 16) by a compute shader that
 *    moves 16-byte words (vkCmdCopyBuffer between two places in video memory
 *    runs on a copy engine at a fifth of what the memory does on an H200), the
 *    rest and the unaligned ends by vkCmdCopyBuffer.
 *  - Fills: the 4-byte-aligned middle by vkCmdFillBuffer, the ends it cannot
 *    reach by vkCmdCopyBuffer from a small buffer holding the pattern
 *    (vkCmdUpdateBuffer, which wants 4-byte alignment too, writes that one).
 *
 * Each operation records on a command context of its own (a command pool and
 * buffer), taken from its queue's free list, so that operations from many
 * threads record at once. With timeline semaphores it is submitted on its lane
 * (vulkan_lanes.c) and the call returns without waiting; the context comes
 * back once the lane's timeline passes it. Without them it is submitted with
 * a fence: the context is a DMA's ticket, and other operations wait for it.
 *
 * Every command buffer starts with a barrier that waits for earlier work on its
 * queue (on the exposed queue: the user's kernels) and ends with one that makes
 * its writes visible to later commands and to the host. Submission takes the
 * queue's lock.
 */
#include "vulkan_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VKB_SHADER_COPY_MIN ((VkDeviceSize)1 << 20)
#define VKB_SHADER_PIECE    ((VkDeviceSize)1 << 30) /* bytes one descriptor set covers, at most */
#define VKB_COPY_GROUP      256                     /* local_size_x of the copy shader */

/* glslangValidator -V --target-env vulkan1.0 -o copy.spv copy.comp, from:

   #version 450
   // Copies `count` 16-byte words from word `src_first` of the buffer at binding 0
   // to word `dst_first` of the buffer at binding 1. Each invocation moves UNROLL
   // words per step (all loads, then all stores); the grid strides over the rest.
   layout(local_size_x = 256) in;
   layout(constant_id = 0) const uint UNROLL = 4;
   layout(std430, set = 0, binding = 0) readonly buffer Src { uvec4 words[]; } src;
   layout(std430, set = 0, binding = 1) writeonly buffer Dst { uvec4 words[]; } dst;
   layout(push_constant) uniform Push { uint src_first; uint dst_first; uint count; } push;
   void main() {
     uint block = gl_WorkGroupSize.x * UNROLL;
     uint stride = gl_NumWorkGroups.x * block;
     for (uint base = gl_WorkGroupID.x * block + gl_LocalInvocationID.x; base < push.count; base += stride) {
       uvec4 v[UNROLL];
       for (uint k = 0; k < UNROLL; k++) {
         uint i = base + k * gl_WorkGroupSize.x;
         if (i < push.count) v[k] = src.words[push.src_first + i];
       }
       for (uint k = 0; k < UNROLL; k++) {
         uint i = base + k * gl_WorkGroupSize.x;
         if (i < push.count) dst.words[push.dst_first + i] = v[k];
       }
     }
   }
*/
static const uint32_t copy_spv[] = {
    0x07230203, 0x00010000, 0x0008000b, 0x0000007f, 0x00000000, 0x00020011, 0x00000001, 0x0006000b, 0x00000001,
    0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001, 0x0008000f, 0x00000005,
    0x00000004, 0x6e69616d, 0x00000000, 0x0000000f, 0x00000017, 0x0000001c, 0x00060010, 0x00000004, 0x00000011,
    0x00000100, 0x00000001, 0x00000001, 0x00030003, 0x00000002, 0x000001c2, 0x00040005, 0x00000004, 0x6e69616d,
    0x00000000, 0x00040005, 0x00000008, 0x636f6c62, 0x0000006b, 0x00040005, 0x0000000a, 0x4f524e55, 0x00004c4c,
    0x00040005, 0x0000000c, 0x69727473, 0x00006564, 0x00070005, 0x0000000f, 0x4e5f6c67, 0x6f576d75, 0x72476b72,
    0x7370756f, 0x00000000, 0x00040005, 0x00000016, 0x65736162, 0x00000000, 0x00060005, 0x00000017, 0x575f6c67,
    0x476b726f, 0x70756f72, 0x00004449, 0x00080005, 0x0000001c, 0x4c5f6c67, 0x6c61636f, 0x6f766e49, 0x69746163,
    0x44496e6f, 0x00000000, 0x00040005, 0x00000026, 0x68737550, 0x00000000, 0x00060006, 0x00000026, 0x00000000,
    0x5f637273, 0x73726966, 0x00000074, 0x00060006, 0x00000026, 0x00000001, 0x5f747364, 0x73726966, 0x00000074,
    0x00050006, 0x00000026, 0x00000002, 0x6e756f63, 0x00000074, 0x00040005, 0x00000028, 0x68737570, 0x00000000,
    0x00030005, 0x00000030, 0x0000006b, 0x00030005, 0x00000038, 0x00000069, 0x00030005, 0x00000046, 0x00000076,
    0x00030005, 0x00000049, 0x00637253, 0x00050006, 0x00000049, 0x00000000, 0x64726f77, 0x00000073, 0x00030005,
    0x0000004b, 0x00637273, 0x00030005, 0x00000059, 0x0000006b, 0x00030005, 0x00000061, 0x00000069, 0x00030005,
    0x0000006d, 0x00747344, 0x00050006, 0x0000006d, 0x00000000, 0x64726f77, 0x00000073, 0x00030005, 0x0000006f,
    0x00747364, 0x00040047, 0x0000000a, 0x00000001, 0x00000000, 0x00040047, 0x0000000f, 0x0000000b, 0x00000018,
    0x00040047, 0x00000017, 0x0000000b, 0x0000001a, 0x00040047, 0x0000001c, 0x0000000b, 0x0000001b, 0x00050048,
    0x00000026, 0x00000000, 0x00000023, 0x00000000, 0x00050048, 0x00000026, 0x00000001, 0x00000023, 0x00000004,
    0x00050048, 0x00000026, 0x00000002, 0x00000023, 0x00000008, 0x00030047, 0x00000026, 0x00000002, 0x00040047,
    0x00000048, 0x00000006, 0x00000010, 0x00040048, 0x00000049, 0x00000000, 0x00000018, 0x00050048, 0x00000049,
    0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x00000049, 0x00000003, 0x00040047, 0x0000004b, 0x00000022,
    0x00000000, 0x00040047, 0x0000004b, 0x00000021, 0x00000000, 0x00040047, 0x0000006c, 0x00000006, 0x00000010,
    0x00040048, 0x0000006d, 0x00000000, 0x00000019, 0x00050048, 0x0000006d, 0x00000000, 0x00000023, 0x00000000,
    0x00030047, 0x0000006d, 0x00000003, 0x00040047, 0x0000006f, 0x00000022, 0x00000000, 0x00040047, 0x0000006f,
    0x00000021, 0x00000001, 0x00040047, 0x0000007e, 0x0000000b, 0x00000019, 0x00020013, 0x00000002, 0x00030021,
    0x00000003, 0x00000002, 0x00040015, 0x00000006, 0x00000020, 0x00000000, 0x00040020, 0x00000007, 0x00000007,
    0x00000006, 0x0004002b, 0x00000006, 0x00000009, 0x00000100, 0x00040032, 0x00000006, 0x0000000a, 0x00000004,
    0x00060034, 0x00000006, 0x0000000b, 0x00000084, 0x00000009, 0x0000000a, 0x00040017, 0x0000000d, 0x00000006,
    0x00000003, 0x00040020, 0x0000000e, 0x00000001, 0x0000000d, 0x0004003b, 0x0000000e, 0x0000000f, 0x00000001,
    0x0004002b, 0x00000006, 0x00000010, 0x00000000, 0x00040020, 0x00000011, 0x00000001, 0x00000006, 0x0004003b,
    0x0000000e, 0x00000017, 0x00000001, 0x0004003b, 0x0000000e, 0x0000001c, 0x00000001, 0x0005001e, 0x00000026,
    0x00000006, 0x00000006, 0x00000006, 0x00040020, 0x00000027, 0x00000009, 0x00000026, 0x0004003b, 0x00000027,
    0x00000028, 0x00000009, 0x00040015, 0x00000029, 0x00000020, 0x00000001, 0x0004002b, 0x00000029, 0x0000002a,
    0x00000002, 0x00040020, 0x0000002b, 0x00000009, 0x00000006, 0x00020014, 0x0000002e, 0x00040017, 0x00000043,
    0x00000006, 0x00000004, 0x0004001c, 0x00000044, 0x00000043, 0x0000000a, 0x00040020, 0x00000045, 0x00000007,
    0x00000044, 0x0003001d, 0x00000048, 0x00000043, 0x0003001e, 0x00000049, 0x00000048, 0x00040020, 0x0000004a,
    0x00000002, 0x00000049, 0x0004003b, 0x0000004a, 0x0000004b, 0x00000002, 0x0004002b, 0x00000029, 0x0000004c,
    0x00000000, 0x00040020, 0x00000051, 0x00000002, 0x00000043, 0x00040020, 0x00000054, 0x00000007, 0x00000043,
    0x0004002b, 0x00000029, 0x00000057, 0x00000001, 0x0003001d, 0x0000006c, 0x00000043, 0x0003001e, 0x0000006d,
    0x0000006c, 0x00040020, 0x0000006e, 0x00000002, 0x0000006d, 0x0004003b, 0x0000006e, 0x0000006f, 0x00000002,
    0x0004002b, 0x00000006, 0x0000007d, 0x00000001, 0x0006002c, 0x0000000d, 0x0000007e, 0x00000009, 0x0000007d,
    0x0000007d, 0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003, 0x000200f8, 0x00000005, 0x0004003b,
    0x00000007, 0x00000008, 0x00000007, 0x0004003b, 0x00000007, 0x0000000c, 0x00000007, 0x0004003b, 0x00000007,
    0x00000016, 0x00000007, 0x0004003b, 0x00000007, 0x00000030, 0x00000007, 0x0004003b, 0x00000007, 0x00000038,
    0x00000007, 0x0004003b, 0x00000045, 0x00000046, 0x00000007, 0x0004003b, 0x00000007, 0x00000059, 0x00000007,
    0x0004003b, 0x00000007, 0x00000061, 0x00000007, 0x0003003e, 0x00000008, 0x0000000b, 0x00050041, 0x00000011,
    0x00000012, 0x0000000f, 0x00000010, 0x0004003d, 0x00000006, 0x00000013, 0x00000012, 0x0004003d, 0x00000006,
    0x00000014, 0x00000008, 0x00050084, 0x00000006, 0x00000015, 0x00000013, 0x00000014, 0x0003003e, 0x0000000c,
    0x00000015, 0x00050041, 0x00000011, 0x00000018, 0x00000017, 0x00000010, 0x0004003d, 0x00000006, 0x00000019,
    0x00000018, 0x0004003d, 0x00000006, 0x0000001a, 0x00000008, 0x00050084, 0x00000006, 0x0000001b, 0x00000019,
    0x0000001a, 0x00050041, 0x00000011, 0x0000001d, 0x0000001c, 0x00000010, 0x0004003d, 0x00000006, 0x0000001e,
    0x0000001d, 0x00050080, 0x00000006, 0x0000001f, 0x0000001b, 0x0000001e, 0x0003003e, 0x00000016, 0x0000001f,
    0x000200f9, 0x00000020, 0x000200f8, 0x00000020, 0x000400f6, 0x00000022, 0x00000023, 0x00000000, 0x000200f9,
    0x00000024, 0x000200f8, 0x00000024, 0x0004003d, 0x00000006, 0x00000025, 0x00000016, 0x00050041, 0x0000002b,
    0x0000002c, 0x00000028, 0x0000002a, 0x0004003d, 0x00000006, 0x0000002d, 0x0000002c, 0x000500b0, 0x0000002e,
    0x0000002f, 0x00000025, 0x0000002d, 0x000400fa, 0x0000002f, 0x00000021, 0x00000022, 0x000200f8, 0x00000021,
    0x0003003e, 0x00000030, 0x00000010, 0x000200f9, 0x00000031, 0x000200f8, 0x00000031, 0x000400f6, 0x00000033,
    0x00000034, 0x00000000, 0x000200f9, 0x00000035, 0x000200f8, 0x00000035, 0x0004003d, 0x00000006, 0x00000036,
    0x00000030, 0x000500b0, 0x0000002e, 0x00000037, 0x00000036, 0x0000000a, 0x000400fa, 0x00000037, 0x00000032,
    0x00000033, 0x000200f8, 0x00000032, 0x0004003d, 0x00000006, 0x00000039, 0x00000016, 0x0004003d, 0x00000006,
    0x0000003a, 0x00000030, 0x00050084, 0x00000006, 0x0000003b, 0x0000003a, 0x00000009, 0x00050080, 0x00000006,
    0x0000003c, 0x00000039, 0x0000003b, 0x0003003e, 0x00000038, 0x0000003c, 0x0004003d, 0x00000006, 0x0000003d,
    0x00000038, 0x00050041, 0x0000002b, 0x0000003e, 0x00000028, 0x0000002a, 0x0004003d, 0x00000006, 0x0000003f,
    0x0000003e, 0x000500b0, 0x0000002e, 0x00000040, 0x0000003d, 0x0000003f, 0x000300f7, 0x00000042, 0x00000000,
    0x000400fa, 0x00000040, 0x00000041, 0x00000042, 0x000200f8, 0x00000041, 0x0004003d, 0x00000006, 0x00000047,
    0x00000030, 0x00050041, 0x0000002b, 0x0000004d, 0x00000028, 0x0000004c, 0x0004003d, 0x00000006, 0x0000004e,
    0x0000004d, 0x0004003d, 0x00000006, 0x0000004f, 0x00000038, 0x00050080, 0x00000006, 0x00000050, 0x0000004e,
    0x0000004f, 0x00060041, 0x00000051, 0x00000052, 0x0000004b, 0x0000004c, 0x00000050, 0x0004003d, 0x00000043,
    0x00000053, 0x00000052, 0x00050041, 0x00000054, 0x00000055, 0x00000046, 0x00000047, 0x0003003e, 0x00000055,
    0x00000053, 0x000200f9, 0x00000042, 0x000200f8, 0x00000042, 0x000200f9, 0x00000034, 0x000200f8, 0x00000034,
    0x0004003d, 0x00000006, 0x00000056, 0x00000030, 0x00050080, 0x00000006, 0x00000058, 0x00000056, 0x00000057,
    0x0003003e, 0x00000030, 0x00000058, 0x000200f9, 0x00000031, 0x000200f8, 0x00000033, 0x0003003e, 0x00000059,
    0x00000010, 0x000200f9, 0x0000005a, 0x000200f8, 0x0000005a, 0x000400f6, 0x0000005c, 0x0000005d, 0x00000000,
    0x000200f9, 0x0000005e, 0x000200f8, 0x0000005e, 0x0004003d, 0x00000006, 0x0000005f, 0x00000059, 0x000500b0,
    0x0000002e, 0x00000060, 0x0000005f, 0x0000000a, 0x000400fa, 0x00000060, 0x0000005b, 0x0000005c, 0x000200f8,
    0x0000005b, 0x0004003d, 0x00000006, 0x00000062, 0x00000016, 0x0004003d, 0x00000006, 0x00000063, 0x00000059,
    0x00050084, 0x00000006, 0x00000064, 0x00000063, 0x00000009, 0x00050080, 0x00000006, 0x00000065, 0x00000062,
    0x00000064, 0x0003003e, 0x00000061, 0x00000065, 0x0004003d, 0x00000006, 0x00000066, 0x00000061, 0x00050041,
    0x0000002b, 0x00000067, 0x00000028, 0x0000002a, 0x0004003d, 0x00000006, 0x00000068, 0x00000067, 0x000500b0,
    0x0000002e, 0x00000069, 0x00000066, 0x00000068, 0x000300f7, 0x0000006b, 0x00000000, 0x000400fa, 0x00000069,
    0x0000006a, 0x0000006b, 0x000200f8, 0x0000006a, 0x00050041, 0x0000002b, 0x00000070, 0x00000028, 0x00000057,
    0x0004003d, 0x00000006, 0x00000071, 0x00000070, 0x0004003d, 0x00000006, 0x00000072, 0x00000061, 0x00050080,
    0x00000006, 0x00000073, 0x00000071, 0x00000072, 0x0004003d, 0x00000006, 0x00000074, 0x00000059, 0x00050041,
    0x00000054, 0x00000075, 0x00000046, 0x00000074, 0x0004003d, 0x00000043, 0x00000076, 0x00000075, 0x00060041,
    0x00000051, 0x00000077, 0x0000006f, 0x0000004c, 0x00000073, 0x0003003e, 0x00000077, 0x00000076, 0x000200f9,
    0x0000006b, 0x000200f8, 0x0000006b, 0x000200f9, 0x0000005d, 0x000200f8, 0x0000005d, 0x0004003d, 0x00000006,
    0x00000078, 0x00000059, 0x00050080, 0x00000006, 0x00000079, 0x00000078, 0x00000057, 0x0003003e, 0x00000059,
    0x00000079, 0x000200f9, 0x0000005a, 0x000200f8, 0x0000005c, 0x000200f9, 0x00000023, 0x000200f8, 0x00000023,
    0x0004003d, 0x00000006, 0x0000007a, 0x0000000c, 0x0004003d, 0x00000006, 0x0000007b, 0x00000016, 0x00050080,
    0x00000006, 0x0000007c, 0x0000007b, 0x0000007a, 0x0003003e, 0x00000016, 0x0000007c, 0x000200f9, 0x00000020,
    0x000200f8, 0x00000022, 0x000100fd, 0x00010038};

typedef struct copy_push {
  uint32_t src_first, dst_first, count;
} copy_push;

/* ---- command buffers ----------------------------------------------------------- */

/* A command pool with one command buffer, and its fence where the device has no timelines. */
static ferry_status pool_create(ferry_device *dev, vkb_queue *queue, VkCommandPool *pool, vkb_cmd *cmd) {
  vkb_device *d = dev->impl;
  VkCommandPoolCreateInfo info = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT |
                                           VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
                                  .queueFamilyIndex = queue->family};
  VkResult r = ferry__vk()->vkCreateCommandPool(d->device, &info, NULL, pool);
  if (r != VK_SUCCESS) {
    *pool = VK_NULL_HANDLE;
    return ferry__vkb_fail(dev, "vkCreateCommandPool", r, "for queue family %u", queue->family);
  }
  memset(cmd, 0, sizeof *cmd);
  VkCommandBufferAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = *pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
  ferry_status st = FERRY_OK;
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = ferry__vk()->vkAllocateCommandBuffers(d->device, &alloc, &cmd->cb)) != VK_SUCCESS)
    st = ferry__vkb_fail(dev, "vkAllocateCommandBuffers", r, "for a command buffer of queue family %u", queue->family);
  else if (!d->timeline && (r = ferry__vk()->vkCreateFence(d->device, &fi, NULL, &cmd->fence)) != VK_SUCCESS)
    st = ferry__vkb_fail(dev, "vkCreateFence", r, NULL);
  if (st != FERRY_OK) {
    ferry__vk()->vkDestroyCommandPool(d->device, *pool, NULL); /* frees its command buffer */
    *pool = VK_NULL_HANDLE;
    memset(cmd, 0, sizeof *cmd);
  }
  return st;
}

static void pool_destroy(vkb_device *d, VkCommandPool *pool, vkb_cmd *cmd) {
  if (cmd->fence) ferry__vk()->vkDestroyFence(d->device, cmd->fence, NULL);
  if (*pool) ferry__vk()->vkDestroyCommandPool(d->device, *pool, NULL);
  *pool = VK_NULL_HANDLE;
  memset(cmd, 0, sizeof *cmd);
}

static uint64_t monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Waits for a fence: polls it for up to d->spin_ns (yielding the processor between
 * polls), then sleeps in vkWaitForFences. *call names the call that failed. */
static VkResult fence_wait(vkb_device *d, VkFence fence, const char **call) {
  const ferry_vk_api *v = ferry__vk();
  if (d->spin_ns) {
    *call = "vkGetFenceStatus";
    uint64_t start = monotonic_ns();
    for (;;) {
      VkResult r = v->vkGetFenceStatus(d->device, fence);
      if (r != VK_NOT_READY) return r;
      if (monotonic_ns() - start >= d->spin_ns) break;
      sched_yield();
    }
  }
  *call = "vkWaitForFences";
  return v->vkWaitForFences(d->device, 1, &fence, VK_TRUE, UINT64_MAX);
}

/* Waits for the command buffer's last submission with its fence, if any. */
static VkResult cmd_wait_raw(vkb_device *d, vkb_cmd *c, const char **call) {
  if (!c->pending) return VK_SUCCESS;
  VkResult r = fence_wait(d, c->fence, call);
  if (r == VK_SUCCESS) {
    *call = "vkResetFences";
    r = ferry__vk()->vkResetFences(d->device, 1, &c->fence);
  }
  if (r == VK_SUCCESS) c->pending = false;
  return r;
}

static ferry_status cmd_wait(ferry_device *dev, vkb_cmd *c, const char *what) {
  const char *call = NULL;
  VkResult r = cmd_wait_raw(dev->impl, c, &call);
  return r == VK_SUCCESS ? FERRY_OK : ferry__vkb_fail(dev, call, r, "for %s", what);
}

ferry_status ferry__vkb_cmd_begin(ferry_device *dev, vkb_cmd *c, const char *what) {
  static const VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkResult r = ferry__vk()->vkBeginCommandBuffer(c->cb, &begin);
  return r == VK_SUCCESS ? FERRY_OK : ferry__vkb_fail(dev, "vkBeginCommandBuffer", r, "for %s", what);
}

ferry_status ferry__vkb_cmd_end(ferry_device *dev, vkb_cmd *c, const char *what) {
  VkResult r = ferry__vk()->vkEndCommandBuffer(c->cb);
  return r == VK_SUCCESS ? FERRY_OK : ferry__vkb_fail(dev, "vkEndCommandBuffer", r, "for %s", what);
}

/* Before the copy: earlier work on the queue is done and its writes visible. */
static void barrier_before(vkb_cmd *c, bool shader) {
  VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                       .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
                       .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                        (shader ? VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT : 0)};
  ferry__vk()->vkCmdPipelineBarrier(
      c->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
      VK_PIPELINE_STAGE_TRANSFER_BIT | (shader ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : 0), 0, 1, &b, 0, NULL, 0, NULL);
}

/* After it: its writes visible to later commands and to the host. */
static void barrier_after(vkb_cmd *c, bool shader) {
  VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                       .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | (shader ? VK_ACCESS_SHADER_WRITE_BIT : 0),
                       .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT |
                                        VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT};
  ferry__vk()->vkCmdPipelineBarrier(
      c->cb, VK_PIPELINE_STAGE_TRANSFER_BIT | (shader ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : 0),
      VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, NULL, 0, NULL);
}

/* Records one buffer copy between the two barriers. */
static ferry_status record_copy(ferry_device *dev, vkb_cmd *c, VkBuffer src, VkBuffer dst, VkDeviceSize src_offset,
                                VkDeviceSize dst_offset, VkDeviceSize bytes, const char *what) {
  ferry_status st = ferry__vkb_cmd_begin(dev, c, what);
  if (st != FERRY_OK) return st;
  barrier_before(c, false);
  VkBufferCopy region = {.srcOffset = src_offset, .dstOffset = dst_offset, .size = bytes};
  ferry__vk()->vkCmdCopyBuffer(c->cb, src, dst, 1, &region);
  barrier_after(c, false);
  return ferry__vkb_cmd_end(dev, c, what);
}

/* Without timelines: one submission with the context's fence. */
static ferry_status submit_fenced(ferry_device *dev, vkb_queue *queue, vkb_cmd *c, const char *what) {
  VkSubmitInfo info = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cb};
  pthread_mutex_lock(&queue->lock);
  VkResult r = ferry__vk()->vkQueueSubmit(queue->queue, 1, &info, c->fence);
  pthread_mutex_unlock(&queue->lock);
  if (r != VK_SUCCESS) return ferry__vkb_fail(dev, "vkQueueSubmit", r, "for %s (queue family %u)", what, queue->family);
  c->pending = true;
  return FERRY_OK;
}

/* ---- contexts ------------------------------------------------------------------- */

static vkb_ctx *ctx_pop(vkb_queue *queue) {
  pthread_mutex_lock(&queue->ctx_lock);
  vkb_ctx *c = queue->free_ctx;
  if (c) queue->free_ctx = c->next;
  pthread_mutex_unlock(&queue->ctx_lock);
  return c;
}

/* A context for `queue`: on a lane, one of the lane's own that is done (each
 * ferry queue records on command pools of its own, with no lock shared with
 * other queues once it has as many as it keeps in flight), else one of the
 * queue's pool, else a new one. */
ferry_status ferry__vkb_ctx_take(ferry_device *dev, vkb_lane *lane, vkb_queue *queue, vkb_ctx **out) {
  vkb_ctx *c = lane ? ferry__vkb_lane_spare(lane, queue) : NULL;
  if (!c && lane) {
    ferry__vkb_lane_reclaim(dev, lane);
    c = ferry__vkb_lane_spare(lane, queue);
  }
  if (!c) c = ctx_pop(queue);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a command context on %s", dev->label);
    c->queue = queue;
    ferry_status st = pool_create(dev, queue, &c->pool, &c->cmd);
    if (st != FERRY_OK) {
      free(c);
      return st;
    }
  }
  /* Without timelines: a wait that failed earlier left the fence pending; wait again first. */
  ferry_status st = cmd_wait(dev, &c->cmd, "an earlier submission of a command context");
  if (st != FERRY_OK) {
    ferry__vkb_ctx_give(c);
    return st;
  }
  c->next = NULL;
  c->inval = (vkb_range){0};
  *out = c;
  return FERRY_OK;
}

void ferry__vkb_ctx_give(vkb_ctx *c) {
  vkb_queue *queue = c->queue;
  pthread_mutex_lock(&queue->ctx_lock);
  c->next = queue->free_ctx;
  queue->free_ctx = c;
  pthread_mutex_unlock(&queue->ctx_lock);
}

static void ctx_destroy(vkb_device *d, vkb_ctx *c) {
  if (c->descriptors) ferry__vk()->vkDestroyDescriptorPool(d->device, c->descriptors, NULL);
  if (c->has_scratch) {
    ferry_device stand_in = {.impl = d}; /* ferry__vkb_free reads impl alone */
    (void)ferry__vkb_free(&stand_in, &c->scratch);
  }
  pool_destroy(d, &c->pool, &c->cmd);
  free(c);
}

/* Sends a recorded context on its way. On a lane: submitted as the lane's next
 * value (extra: what goes with it); *out, when asked, the value's ticket. Else
 * with its fence: *out is the context (invalidating extra->inval once waited
 * for); with out NULL it is waited for here. */
static ferry_status finish(ferry_device *dev, vkb_lane *lane, vkb_ctx *c, const vkb_submit_extra *extra,
                           const char *what, ferry_ticket *out) {
  if (out) *out = 0;
  if (lane) {
    uint64_t value = 0;
    ferry_status st = ferry__vkb_lane_submit(dev, lane, c->queue, c, extra, what, &value);
    if (st != FERRY_OK) {
      ferry__vkb_ctx_give(c);
      return st;
    }
    if (out) *out = ferry__vkb_lane_ticket(lane, value);
    return FERRY_OK;
  }
  ferry_status st = FERRY_OK;
  if (extra && extra->flush)
    st = ferry__vkb_flush(dev, extra->flush->memory, extra->flush->mem_size, extra->flush->offset, extra->flush->bytes,
                          true);
  if (st == FERRY_OK) st = submit_fenced(dev, c->queue, &c->cmd, what);
  if (st != FERRY_OK) {
    ferry__vkb_ctx_give(c);
    return st;
  }
  if (extra && extra->inval) c->inval = *extra->inval;
  if (out) {
    *out = (ferry_ticket)(uintptr_t)c;
    return FERRY_OK;
  }
  st = ferry__vkb_ctx_ticket_wait(dev, (ferry_ticket)(uintptr_t)c);
  ferry__vkb_ctx_give(c);
  return st;
}

ferry_status ferry__vkb_ctx_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  vkb_ctx *c = (vkb_ctx *)(uintptr_t)ticket;
  ferry_status st = cmd_wait(dev, &c->cmd, "a submission of ferry's");
  if (st == FERRY_OK && c->inval.memory) {
    st = ferry__vkb_flush(dev, c->inval.memory, c->inval.mem_size, c->inval.offset, c->inval.bytes, false);
    c->inval.memory = VK_NULL_HANDLE;
  }
  return st;
}

void ferry__vkb_ctx_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  (void)dev;
  vkb_ctx *c = (vkb_ctx *)(uintptr_t)ticket;
  c->inval.memory = VK_NULL_HANDLE;
  ferry__vkb_ctx_give(c);
}
/* ---- the copy shader ------------------------------------------------------------- */

/* Makes the copy pipeline on first use; false when the device cannot (then
 * copies take vkCmdCopyBuffer). */
static bool copier_ready(ferry_device *dev) {
  vkb_device *d = dev->impl;
  vkb_copier *k = &d->copier;
  pthread_mutex_lock(&k->lock);
  if (!k->ready && !k->failed) {
    const ferry_vk_api *v = ferry__vk();
    VkShaderModuleCreateInfo sm = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = sizeof copy_spv, .pCode = copy_spv};
    k->unroll = ferry__vkb_opts.copy_unroll;
    VkDescriptorSetLayoutBinding bindings[2] = {{.binding = 0,
                                                 .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1,
                                                 .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT},
                                                {.binding = 1,
                                                 .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1,
                                                 .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT}};
    VkDescriptorSetLayoutCreateInfo sl = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 2, .pBindings = bindings};
    VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(copy_push)};
    bool ok = v->vkCreateShaderModule(d->device, &sm, NULL, &k->module) == VK_SUCCESS &&
              v->vkCreateDescriptorSetLayout(d->device, &sl, NULL, &k->set_layout) == VK_SUCCESS;
    if (ok) {
      VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1,
                                       .pSetLayouts = &k->set_layout,
                                       .pushConstantRangeCount = 1,
                                       .pPushConstantRanges = &push};
      ok = v->vkCreatePipelineLayout(d->device, &pl, NULL, &k->layout) == VK_SUCCESS;
    }
    if (ok) {
      VkSpecializationMapEntry entry = {.constantID = 0, .offset = 0, .size = sizeof k->unroll};
      VkSpecializationInfo spec = {
          .mapEntryCount = 1, .pMapEntries = &entry, .dataSize = sizeof k->unroll, .pData = &k->unroll};
      VkComputePipelineCreateInfo cp = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                                  .module = k->module,
                                                  .pName = "main",
                                                  .pSpecializationInfo = &spec},
                                        .layout = k->layout,
                                        .basePipelineIndex = -1};
      ok = v->vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &cp, NULL, &k->pipeline) == VK_SUCCESS;
    }
    k->ready = ok;
    k->failed = !ok; /* the copies go on with vkCmdCopyBuffer */
  }
  bool ready = k->ready;
  pthread_mutex_unlock(&k->lock);
  return ready;
}

static void copier_destroy(vkb_device *d) {
  vkb_copier *k = &d->copier;
  if (k->pipeline) ferry__vk()->vkDestroyPipeline(d->device, k->pipeline, NULL);
  if (k->layout) ferry__vk()->vkDestroyPipelineLayout(d->device, k->layout, NULL);
  if (k->set_layout) ferry__vk()->vkDestroyDescriptorSetLayout(d->device, k->set_layout, NULL);
  if (k->module) ferry__vk()->vkDestroyShaderModule(d->device, k->module, NULL);
  k->pipeline = k->layout = k->set_layout = k->module = VK_NULL_HANDLE;
  k->ready = k->failed = false;
}

/* The context's descriptor sets for the copy shader, made on its first shader copy. */
static ferry_status ctx_descriptors(ferry_device *dev, vkb_ctx *c) {
  vkb_device *d = dev->impl;
  if (c->descriptors) return FERRY_OK;
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 2 * VKB_COPY_PIECES};
  VkDescriptorPoolCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = VKB_COPY_PIECES,
                                     .poolSizeCount = 1,
                                     .pPoolSizes = &size};
  VkResult r = ferry__vk()->vkCreateDescriptorPool(d->device, &info, NULL, &c->descriptors);
  if (r != VK_SUCCESS) {
    c->descriptors = VK_NULL_HANDLE;
    return ferry__vkb_fail(dev, "vkCreateDescriptorPool", r, "for the copy shader");
  }
  VkDescriptorSetLayout layouts[VKB_COPY_PIECES];
  for (unsigned i = 0; i < VKB_COPY_PIECES; i++)
    layouts[i] = d->copier.set_layout;
  VkDescriptorSetAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = c->descriptors,
                                       .descriptorSetCount = VKB_COPY_PIECES,
                                       .pSetLayouts = layouts};
  r = ferry__vk()->vkAllocateDescriptorSets(d->device, &alloc, c->sets);
  if (r != VK_SUCCESS) {
    ferry__vk()->vkDestroyDescriptorPool(d->device, c->descriptors, NULL);
    c->descriptors = VK_NULL_HANDLE;
    return ferry__vkb_fail(dev, "vkAllocateDescriptorSets", r, "for the copy shader");
  }
  return FERRY_OK;
}

/* Where a piece of a buffer is bound: at an offset the device accepts, with the
 * piece's first 16-byte word counted from there. */
static void piece_window(const vkb_device *d, VkDeviceSize start, VkDeviceSize bytes, VkDescriptorBufferInfo *info,
                         uint32_t *first) {
  VkDeviceSize align = d->props.limits.minStorageBufferOffsetAlignment;
  if (align < 16) align = 16;
  VkDeviceSize bound = start - start % align;
  info->offset = bound;
  info->range = (start - bound) + bytes;
  *first = (uint32_t)((start - bound) / 16);
}

/* Copies [so, so + n) of s to [doff, doff + n) of t, with so % 16 == doff % 16: the
 * 16-byte-aligned middle by the shader, the ends by vkCmdCopyBuffer. Batches of
 * VKB_COPY_PIECES pieces, each on a context of its own (its descriptor sets). */
static ferry_status shader_copy(ferry_device *dev, vkb_lane *lane, VkBuffer s, VkDeviceSize so, VkBuffer t,
                                VkDeviceSize doff, VkDeviceSize n, ferry_ticket *out) {
  static const char what[] = "a copy within the device (the copy shader)";
  vkb_device *d = dev->impl;
  const ferry_vk_api *v = ferry__vk();
  if (out) *out = 0;
  VkDeviceSize head = (16 - so % 16) % 16;
  if (head > n) head = n;
  VkDeviceSize mid = (n - head) / 16 * 16, tail = n - head - mid;
  VkDeviceSize align =
      d->props.limits.minStorageBufferOffsetAlignment < 16 ? 16 : d->props.limits.minStorageBufferOffsetAlignment;
  VkDeviceSize piece = VKB_SHADER_PIECE;
  VkDeviceSize range_limit = d->props.limits.maxStorageBufferRange;
  if (piece > range_limit - align) piece = (range_limit - align) / 16 * 16;
  uint64_t max_groups = d->props.limits.maxComputeWorkGroupCount[0];
  if (ferry__vkb_opts.copy_groups && ferry__vkb_opts.copy_groups < max_groups) max_groups = ferry__vkb_opts.copy_groups;
  vkb_queue *queue = lane ? lane->home : d->compute;
  ferry_status st = FERRY_OK;
  bool first_batch = true;
  for (VkDeviceSize done = 0; st == FERRY_OK && (done < mid || first_batch);) {
    vkb_ctx *c = NULL;
    if ((st = ferry__vkb_ctx_take(dev, lane, queue, &c)) != FERRY_OK) break;
    if ((st = ctx_descriptors(dev, c)) != FERRY_OK) {
      ferry__vkb_ctx_give(c);
      break;
    }
    /* Up to VKB_COPY_PIECES pieces per submission, one descriptor set each. */
    VkDescriptorBufferInfo buffers[VKB_COPY_PIECES][2];
    VkWriteDescriptorSet writes[VKB_COPY_PIECES];
    copy_push push[VKB_COPY_PIECES];
    unsigned pieces = 0;
    for (; pieces < VKB_COPY_PIECES && done < mid; pieces++) {
      VkDeviceSize len = mid - done < piece ? mid - done : piece;
      buffers[pieces][0].buffer = s;
      buffers[pieces][1].buffer = t;
      piece_window(d, so + head + done, len, &buffers[pieces][0], &push[pieces].src_first);
      piece_window(d, doff + head + done, len, &buffers[pieces][1], &push[pieces].dst_first);
      push[pieces].count = (uint32_t)(len / 16);
      writes[pieces] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                              .dstSet = c->sets[pieces],
                                              .dstBinding = 0,
                                              .descriptorCount = 2,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .pBufferInfo = buffers[pieces]};
      done += len;
    }
    if (pieces) v->vkUpdateDescriptorSets(d->device, pieces, writes, 0, NULL);
    if ((st = ferry__vkb_cmd_begin(dev, &c->cmd, what)) != FERRY_OK) {
      ferry__vkb_ctx_give(c);
      break;
    }
    barrier_before(&c->cmd, true);
    if (first_batch) {
      VkBufferCopy ends[2];
      uint32_t count = 0;
      if (head) ends[count++] = (VkBufferCopy){.srcOffset = so, .dstOffset = doff, .size = head};
      if (tail) ends[count++] = (VkBufferCopy){.srcOffset = so + n - tail, .dstOffset = doff + n - tail, .size = tail};
      if (count) v->vkCmdCopyBuffer(c->cmd.cb, s, t, count, ends);
    }
    if (pieces) v->vkCmdBindPipeline(c->cmd.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->copier.pipeline);
    for (unsigned i = 0; i < pieces; i++) {
      uint64_t per_group = (uint64_t)VKB_COPY_GROUP * d->copier.unroll;
      uint64_t groups = (push[i].count + per_group - 1) / per_group;
      if (groups > max_groups) groups = max_groups; /* the shader strides over the rest */
      v->vkCmdBindDescriptorSets(c->cmd.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->copier.layout, 0, 1, &c->sets[i], 0,
                                 NULL);
      v->vkCmdPushConstants(c->cmd.cb, d->copier.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push[i], &push[i]);
      v->vkCmdDispatch(c->cmd.cb, (uint32_t)groups, 1, 1);
    }
    barrier_after(&c->cmd, true);
    if ((st = ferry__vkb_cmd_end(dev, &c->cmd, what)) != FERRY_OK) {
      ferry__vkb_ctx_give(c);
      break;
    }
    /* The last batch's completion is the copy's (a lane, or the fence of the
     * last: without a lane the earlier ones are waited for here). */
    st = finish(dev, lane, c, NULL, what, done >= mid ? out : NULL);
    first_batch = false;
  }
  return st;
}

/* ---- mapped memory ---------------------------------------------------------------- */

static ferry_status host_write(ferry_device *dev, vkb_buffer *a, size_t off, const void *src, size_t n) {
  vkb_device *d = dev->impl;
  if (!a->coherent) {
    /* A partial atom at either end: the host's cached copy may predate the
     * device's last writes to the rest of it, which the flush would undo. */
    VkDeviceSize at = a->offset + off, end = at + n;
    ferry_status st = FERRY_OK;
    if (at % d->atom) st = ferry__vkb_flush(dev, a->memory, a->mem_size, at, 1, false);
    if (st == FERRY_OK && end % d->atom) st = ferry__vkb_flush(dev, a->memory, a->mem_size, end - 1, 1, false);
    if (st != FERRY_OK) return st;
  }
  ferry__host_move(a->map + off, src, n);
  if (a->coherent) return FERRY_OK;
  return ferry__vkb_flush(dev, a->memory, a->mem_size, a->offset + off, n, true);
}

static ferry_status host_read(ferry_device *dev, vkb_buffer *a, size_t off, void *dst, size_t n) {
  if (!a->coherent) {
    ferry_status st = ferry__vkb_flush(dev, a->memory, a->mem_size, a->offset + off, n, false);
    if (st != FERRY_OK) return st;
  }
  ferry__host_move(dst, a->map + off, n);
  return FERRY_OK;
}

/* ---- the ops ----------------------------------------------------------------------- */

/* The lane of an operation: with timelines `lane` (or the device's own for
 * NULL), else none (fences). */
static vkb_lane *lane_for(ferry_device *dev, ferry_lane *lane) {
  vkb_device *d = dev->impl;
  return d->timeline ? ferry__vkb_lane_of(dev, lane) : NULL;
}

/* Mapped buffers only; FERRY_ERROR_UNSUPPORTED (no message) for the others:
 * the core stages them through pinned memory. After the lane's work before. */
ferry_status ferry__vkb_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                              size_t n) {
  vkb_buffer *a = dst->impl;
  if (!a->map) return FERRY_ERROR_UNSUPPORTED;
  vkb_lane *l = lane ? lane_for(dev, lane) : NULL;
  ferry_status st = l ? ferry__vkb_lane_settle(dev, l) : FERRY_OK;
  return st == FERRY_OK ? host_write(dev, a, off, src, n) : st;
}

ferry_status ferry__vkb_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                             size_t n) {
  vkb_buffer *a = src->impl;
  if (!a->map) return FERRY_ERROR_UNSUPPORTED;
  vkb_lane *l = lane ? lane_for(dev, lane) : NULL;
  ferry_status st = l ? ferry__vkb_lane_settle(dev, l) : FERRY_OK;
  return st == FERRY_OK ? host_read(dev, a, off, dst, n) : st;
}

/* The range of a buffer over the user's non-coherent array, or NULL when the
 * buffer needs no flush or invalidation around the device's access. */
static const vkb_range *user_range(const vkb_buffer *a, size_t off, size_t n, vkb_range *out) {
  if (!a->imported || a->coherent) return NULL;
  *out = (vkb_range){.memory = a->memory, .mem_size = a->mem_size, .offset = a->offset + off, .bytes = n};
  return out;
}

ferry_status ferry__vkb_copy(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                             size_t doff, size_t n, ferry_ticket *out) {
  if (out) *out = 0;
  vkb_device *d = dev->impl;
  vkb_lane *l = lane_for(dev, lane);
  vkb_buffer *s = src->impl, *t = dst->impl;
  if (!l && s->map && t->map && s->coherent && t->coherent && !ferry__vkb_opts.shader) {
    ferry__host_move(t->map + doff, s->map + so, n); /* the core does this itself; here for completeness */
    return FERRY_OK;
  }
  /* Video memory to video memory, large and equally aligned: the copy shader. */
  if (d->copy_shader && !s->imported && !t->imported && n >= VKB_SHADER_COPY_MIN && so % 16 == doff % 16 &&
      copier_ready(dev))
    return shader_copy(dev, l, s->buffer, so, t->buffer, doff, n, out);
  /* Over the user's non-coherent array, the host's writes go to the device first
   * (and no dirty line of the destination lands on the device's bytes later),
   * and the device's writes are taken back after. */
  vkb_range sr, tr;
  const vkb_range *s_user = user_range(s, so, n, &sr), *t_user = user_range(t, doff, n, &tr);
  ferry_status st = FERRY_OK;
  if (s_user) st = ferry__vkb_flush(dev, sr.memory, sr.mem_size, sr.offset, sr.bytes, true);
  if (st == FERRY_OK && t_user) st = ferry__vkb_flush(dev, tr.memory, tr.mem_size, tr.offset, tr.bytes, true);
  if (st != FERRY_OK) return st;
  char what[96];
  snprintf(what, sizeof what, "a copy of %zu bytes within the device (offset %zu to %zu)", n, so, doff);
  vkb_ctx *c = NULL;
  if ((st = ferry__vkb_ctx_take(dev, l, l ? l->home : d->compute, &c)) != FERRY_OK) return st;
  if ((st = record_copy(dev, &c->cmd, s->buffer, t->buffer, so, doff, n, what)) != FERRY_OK) {
    ferry__vkb_ctx_give(c);
    return st;
  }
  vkb_submit_extra extra = {.inval = t_user};
  return finish(dev, l, c, &extra, what, out);
}

ferry_status ferry__vkb_fill(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t off, size_t n,
                             uint32_t pattern, unsigned pattern_size, ferry_ticket *out) {
  if (out) *out = 0;
  vkb_device *d = dev->impl;
  vkb_lane *l = lane_for(dev, lane);
  vkb_buffer *a = mem->impl;
  unsigned ps = pattern_size;
  if (ps < 1 || ps > 4)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "a fill pattern of %u bytes on %s (1 to 4 are possible)", ps,
                       dev->label);
  unsigned char pat[4];
  memcpy(pat, &pattern, sizeof pat);
  /* The pattern repeats from `off`. vkCmdFillBuffer takes the 4-byte-aligned
   * middle with the pattern in the phase it has there; the ends before and
   * after it (up to 3 bytes each, or the whole of a range holding no aligned
   * word) are copied from the context's scratch buffer, which holds the pattern
   * from phase 0. */
  VkDeviceSize end = (VkDeviceSize)off + n, a0 = ((VkDeviceSize)off + 3) / 4 * 4, a1 = end / 4 * 4;
  VkBufferCopy ends[2];
  uint32_t count = 0;
  if (a0 >= a1) {
    ends[count++] = (VkBufferCopy){.srcOffset = 0, .dstOffset = off, .size = n}; /* n <= 6 */
    a0 = a1 = 0;
  } else {
    if (a0 > off) ends[count++] = (VkBufferCopy){.srcOffset = 0, .dstOffset = off, .size = a0 - off};
    if (end > a1) ends[count++] = (VkBufferCopy){.srcOffset = (a1 - off) % ps, .dstOffset = a1, .size = end - a1};
  }
  unsigned char laid[16], word_bytes[4];
  for (unsigned i = 0; i < sizeof laid; i++)
    laid[i] = pat[i % ps];
  for (unsigned k = 0; k < 4; k++)
    word_bytes[k] = pat[(a0 - off + k) % ps];
  uint32_t word;
  memcpy(&word, word_bytes, sizeof word);
  char what[112];
  snprintf(what, sizeof what, "a fill of %zu bytes at offset %zu with a %u-byte pattern", n, off, ps);
  vkb_ctx *c = NULL;
  ferry_status st = ferry__vkb_ctx_take(dev, l, l ? l->home : d->compute, &c);
  if (st != FERRY_OK) return st;
  if (count && !c->has_scratch) {
    if ((st = ferry__vkb_alloc(dev, 256, &c->scratch)) != FERRY_OK) {
      ferry__vkb_ctx_give(c);
      return st;
    }
    c->has_scratch = true;
  }
  const ferry_vk_api *v = ferry__vk();
  if ((st = ferry__vkb_cmd_begin(dev, &c->cmd, what)) == FERRY_OK) {
    barrier_before(&c->cmd, false);
    if (count) {
      VkBuffer scratch = ((vkb_buffer *)c->scratch.impl)->buffer;
      v->vkCmdUpdateBuffer(c->cmd.cb, scratch, 0, sizeof laid, laid);
      VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT};
      v->vkCmdPipelineBarrier(c->cmd.cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &b, 0,
                              NULL, 0, NULL);
      v->vkCmdCopyBuffer(c->cmd.cb, scratch, a->buffer, count, ends);
    }
    if (a1 > a0) v->vkCmdFillBuffer(c->cmd.cb, a->buffer, a0, a1 - a0, word); /* disjoint from the ends */
    barrier_after(&c->cmd, false);
    st = ferry__vkb_cmd_end(dev, &c->cmd, what);
  }
  vkb_range ur;
  const vkb_range *user = user_range(a, off, n, &ur);
  if (st == FERRY_OK && user) st = ferry__vkb_flush(dev, ur.memory, ur.mem_size, ur.offset, ur.bytes, true);
  if (st != FERRY_OK) {
    ferry__vkb_ctx_give(c);
    return st;
  }
  vkb_submit_extra extra = {.inval = user};
  return finish(dev, l, c, &extra, what, out);
}

ferry_status ferry__vkb_synchronize(ferry_device *dev) {
  vkb_device *d = dev->impl;
  for (uint32_t i = 0; i < d->queue_count; i++) {
    vkb_queue *queue = &d->queues[i];
    pthread_mutex_lock(&queue->lock);
    VkResult r = ferry__vk()->vkQueueWaitIdle(queue->queue);
    pthread_mutex_unlock(&queue->lock);
    if (r != VK_SUCCESS)
      return ferry__vkb_fail(dev, "vkQueueWaitIdle", r, "for queue %u of family %u", i, queue->family);
  }
  return FERRY_OK;
}

/* ---- DMA for the core's engine ------------------------------------------------------ */

/* One vkCmdCopyBuffer between the pinned block's buffer and the buffer. On a
 * lane: pushed, the ticket a value of its timeline. Without: on a context of
 * its own, which is the ticket (waited for here when none is wanted), and a
 * mapped buffer is copied at once (ticket 0). */
ferry_status ferry__vkb_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                  const ferry_pinned *host, size_t n, ferry_ticket *out) {
  if (out) *out = 0;
  vkb_device *d = dev->impl;
  vkb_lane *l = lane_for(dev, lane);
  vkb_buffer *a = mem->impl;
  bool to_device = dir == FERRY_DMA_TO_DEVICE;
  if (!l && a->map) return to_device ? host_write(dev, a, off, host->host, n) : host_read(dev, a, off, host->host, n);
  const vkb_pin *pin = (const vkb_pin *)host->token;
  char what[112];
  snprintf(what, sizeof what, "a copy of %zu bytes %s pinned memory (offset %zu of the buffer)", n,
           to_device ? "from" : "into", off);
  /* Non-coherent memory. To the device: the pinned bytes are flushed now and,
   * behind a gate, again when it is raised (the host writes them in between);
   * a destination over the user's array is flushed (no dirty line lands later)
   * and invalidated once done. To the host: the pinned range is flushed now
   * (the same) and invalidated once done; a source over the user's array is
   * flushed. */
  vkb_range pr = {.memory = pin->memory, .mem_size = pin->mem_size, .offset = host->offset, .bytes = n}, ur;
  const vkb_range *user = user_range(a, off, n, &ur);
  vkb_submit_extra extra = {0};
  ferry_status st = FERRY_OK;
  if (to_device) {
    if (!pin->coherent) extra.flush = &pr;
    extra.inval = user;
  } else {
    if (!pin->coherent) {
      st = ferry__vkb_flush(dev, pr.memory, pr.mem_size, pr.offset, pr.bytes, true);
      extra.inval = &pr;
    }
  }
  if (st == FERRY_OK && user) st = ferry__vkb_flush(dev, ur.memory, ur.mem_size, ur.offset, ur.bytes, true);
  if (st != FERRY_OK) return st;
  vkb_ctx *c = NULL;
  if ((st = ferry__vkb_ctx_take(dev, l, l ? l->xfer : d->xfer, &c)) != FERRY_OK) return st;
  st = to_device ? record_copy(dev, &c->cmd, pin->buffer, a->buffer, host->offset, off, n, what)
                 : record_copy(dev, &c->cmd, a->buffer, pin->buffer, off, host->offset, n, what);
  if (st != FERRY_OK) {
    ferry__vkb_ctx_give(c);
    return st;
  }
  return finish(dev, l, c, &extra, what, out);
}

/* ---- setup and teardown ---------------------------------------------------------- */

ferry_status ferry__vkb_transfer_setup(ferry_device *dev) {
  vkb_device *d = dev->impl;
  const ferry_vk_api *v = ferry__vk();
  d->copy_shader = !ferry__vkb_opts.noshader && v->vkCreateShaderModule && v->vkCreateDescriptorSetLayout &&
                   v->vkCreatePipelineLayout && v->vkCreateComputePipelines && v->vkCreateDescriptorPool &&
                   v->vkAllocateDescriptorSets && v->vkUpdateDescriptorSets && v->vkCmdBindPipeline &&
                   v->vkCmdBindDescriptorSets && v->vkCmdPushConstants && v->vkCmdDispatch && v->vkDestroyPipeline &&
                   v->vkDestroyPipelineLayout && v->vkDestroyDescriptorSetLayout && v->vkDestroyShaderModule &&
                   v->vkDestroyDescriptorPool && d->props.limits.maxStorageBufferRange >= ((uint32_t)1 << 20);
  return FERRY_OK;
}

void ferry__vkb_transfer_teardown(vkb_device *d) {
  for (uint32_t i = 0; i < d->queue_count; i++) {
    while (d->queues[i].free_ctx) {
      vkb_ctx *c = d->queues[i].free_ctx;
      d->queues[i].free_ctx = c->next;
      ctx_destroy(d, c);
    }
  }
  copier_destroy(d);
}
