/*
 * A test-only backend, "fault": two devices over host memory whose operations
 * fail on demand, and whose asynchronous transfers really are deferred (they
 * run at wait_slot), so that a pipeline that reuses a slot too early reads or
 * writes the wrong bytes. Used by test_fault.c and by the conformance suite
 * (`ferry_conformance --backend fault`).
 */
#ifndef FERRY_TESTS_FAULT_BACKEND_H
#define FERRY_TESTS_FAULT_BACKEND_H

#include "core/internal.h"

typedef enum fault_op {
  OP_ALLOC,
  OP_FREE,
  OP_WRITE,
  OP_READ,
  OP_COPY,
  OP_COPY_PEER,
  OP_IMPORT,
  OP_SYNC,
  OP_RELEASE,
  OP_HOST_ALLOC,
  OP_SYNCHRONIZE,
  OP_NATIVE,
  OP_WRITE_ASYNC,
  OP_READ_ASYNC,
  OP_WAIT,
  OP_COUNT
} fault_op;

typedef struct fault_state {
  ferry_status fail_with[OP_COUNT]; /* FERRY_OK: succeed; else fail once with this */
  int fail_after[OP_COUNT];         /* calls to let through before failing */
  int calls[OP_COUNT];
  long live_allocs, live_imports, live_host_blocks, devices, destroyed, unloads;
  bool peer_unsupported;
} fault_state;

extern fault_state fault;
extern const ferry_backend fault_backend;  /* the two fault devices */
extern const ferry_backend broken_backend; /* adds a device, then fails its probe */
extern long broken_destroyed;

/* Makes `op` fail once with `st`, after `after` more successful calls. */
void fault_arm(fault_op op, ferry_status st, int after);

#endif
