/*
 * A test-only backend, "fault": two devices over host memory whose operations
 * fail on demand, and whose DMA really is deferred (a copy runs at its
 * dma_wait), so that an engine that touches a pinned range before its wait, or
 * reuses it for another copy, reads or writes the wrong bytes or is refused.
 * It also refuses a ticket waited for twice and a pinned range whose token and
 * offset do not name it. Used by test_fault.c and by the conformance suite
 * (`ferry_conformance --backend fault`).
 */
#ifndef FERRY_TESTS_FAULT_BACKEND_H
#define FERRY_TESTS_FAULT_BACKEND_H

#include "core/internal.h"

#include <stdatomic.h>

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
  OP_PIN_ALLOC,
  OP_PIN_REGISTER,
  OP_SYNCHRONIZE,
  OP_NATIVE,
  OP_DMA_WRITE, /* dma_start to the device */
  OP_DMA_READ,  /* dma_start to the host */
  OP_DMA_WAIT,  /* the first ticket_wait of a DMA */
  OP_COUNT
} fault_op;

typedef struct fault_state {
  ferry_status fail_with[OP_COUNT]; /* FERRY_OK: succeed; else fail once with this */
  int fail_after[OP_COUNT];         /* calls to let through before failing */
  /* Atomic: queue threads and the engine's copy threads call in concurrently. */
  _Atomic int calls[OP_COUNT];
  _Atomic long live_allocs, live_imports, live_host_blocks, live_registrations, devices, destroyed, unloads;
  _Atomic long pending_at_destroy; /* DMA started and never released */
  _Atomic long bad_tickets;        /* tickets released twice, before their wait, or never started */
  bool peer_unsupported;
  _Atomic bool hold_writes; /* writes wait while set (a host part that another thread ends) */
} fault_state;

extern fault_state fault;
extern const ferry_backend fault_backend;  /* the two fault devices */
extern const ferry_backend broken_backend; /* adds a device, then fails its probe */
extern long broken_destroyed;

/* Makes `op` fail once with `st`, after `after` more successful calls. */
void fault_arm(fault_op op, ferry_status st, int after);

#endif
