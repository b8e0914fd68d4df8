/*
 * The fake Objective-C runtime and Metal framework (fake_metal.c): one shared
 * library that ferry loads as both FERRY_OBJC_LIBRARY and FERRY_METAL_LIBRARY.
 * Besides the runtime's and Metal's entry points it exports the test-only ones
 * below; tests find them with dlsym in that library. Apple's libraries have none
 * of them, which is how a test knows it runs on a Mac.
 *
 * Environment, read once, at the first call into the library:
 *   FAKE_METAL_DEVICES=N        devices (default 1; 0: MTLCopyAllDevices returns an empty array and
 *                               MTLCreateSystemDefaultDevice nil)
 *   FAKE_METAL_UNIFIED=1|0|a,b  hasUnifiedMemory per device (default 1; a list gives each device its own,
 *                               the last value repeating)
 *   FAKE_METAL_PAGE=BYTES       the page size newBufferWithBytesNoCopy checks pointers and lengths against
 *                               (default: sysconf(_SC_PAGESIZE))
 *   FAKE_METAL_DELAY_US=N       each command buffer runs N us after its commit, on the queue's own thread
 *                               (default 0: still on that thread, so later than commit returns)
 *   FAKE_METAL_MEM=BYTES        recommendedMaxWorkingSetSize; buffers beyond it are refused (default 1G).
 *                               A discrete device's shared buffers are system memory: they count in
 *                               currentAllocatedSize but not against this
 *   FAKE_METAL_MAX_BUFFER=BYTES maxBufferLength (default 512M)
 *   FAKE_METAL_FAIL=WHAT:SKIP:TIMES[,...]  after SKIP successful calls, the next TIMES fail; WHAT is
 *                               new-buffer (newBufferWithLength:options: returns nil), no-copy-buffer
 *                               (newBufferWithBytesNoCopy:... returns nil) or command-buffer (the command
 *                               buffer ends with status error and an NSError)
 *   FAKE_METAL_ERROR_CODE=N     the NSError code of a failed command buffer (default 3, a page fault)
 *   FAKE_METAL_OLD_OS=1         devices do not respond to hasUnifiedMemory (as before macOS 10.15)
 *   FAKE_METAL_ONLY_DEFAULT=1   MTLCopyAllDevices returns an empty array; MTLCreateSystemDefaultDevice works
 *   FAKE_METAL_CHECK_LEAKS=1    at exit, objects still held are listed and the process exits with status 1
 * Misuse (an unknown selector, a message to a released object, encoding after
 * endEncoding, committing twice, blits that break macOS's rules, pools popped
 * out of order, an autorelease with no pool, an event wait or signal encoded
 * while a blit encoder is open, after commit, or with an event that is nil or
 * released) is printed with "fake_metal:" and aborts the
 * process, as Apple's validation layer stops a program.
 *
 * Shared events (newSharedEvent, signaledValue, setSignaledValue:,
 * encodeWaitForEvent:value:, encodeSignalEvent:value:) order command buffers
 * across queues: a wait blocks its queue's thread, without spinning, until the
 * host or a signal on another queue sets the value to at least the one waited
 * for. A wait nobody satisfies hangs its queue, as on a GPU; releasing such a
 * queue returns at once and leaves its thread to finish when the event is
 * signalled (fake_metal.c's header says more).
 *
 * Command buffers answer GPUStartTime and GPUEndTime (CFTimeInterval, a double):
 * the CLOCK_MONOTONIC seconds at which the queue's thread started their commands
 * (after FAKE_METAL_DELAY_US) and finished the last one, event waits included;
 * 0.0 until the status is completed or error, as in Metal. objc_msgSend returns
 * doubles on x86-64 and arm64 (an assembly trampoline over the C dispatcher).
 */
#ifndef FERRY_FAKE_METAL_H
#define FERRY_FAKE_METAL_H

typedef struct fake_metal_counts {
  long live_objects;    /* objects the program holds (device references beyond the system's own included) */
  long command_buffers; /* committed */
  long blits;           /* copyFromBuffer:... commands run */
  long fills;           /* fillBuffer:range:value: commands run */
  long buffers;         /* newBufferWithLength:options: buffers made */
  long no_copy_buffers; /* newBufferWithBytesNoCopy:... buffers made */
  long no_copy_refused; /* newBufferWithBytesNoCopy:... calls refused (pointer or length not on pages) */
  long pools_pushed;    /* objc_autoreleasePoolPush calls */
  long messages;        /* objc_msgSend calls */
  long events;          /* newSharedEvent events made (last, so that the fields above keep their places) */
} fake_metal_counts;

/* Exported as fake_metal_counts_get, fake_metal_inject and fake_metal_report. */

/* Fills *out. */
typedef void (*fake_metal_counts_fn)(fake_metal_counts *out);
/* The next `skip` calls of `what` (as in FAKE_METAL_FAIL) succeed, the `times`
 * after that fail. what NULL clears every injection. Returns 0, or -1 for an
 * unknown name. */
typedef int (*fake_metal_inject_fn)(const char *what, int skip, int times);
/* Prints every object still held to stderr; returns how many. */
typedef long (*fake_metal_report_fn)(void);

#endif
