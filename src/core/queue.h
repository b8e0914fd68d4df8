/* Core-private: a queue and its entries (queue.c), captures (event.c). */
#ifndef FERRY_CORE_QUEUE_H
#define FERRY_CORE_QUEUE_H

#include "internal.h"

/* How an entry's work runs. */
typedef enum entry_mode {
  ENTRY_DIRECT, /* pushed on the queue's lane at submission; no host part */
  ENTRY_HOST,   /* a host part on the queue's thread (the op run there), between a start marker and a gate */
  ENTRY_STAGED, /* a device part pushed at submission and a host part on the queue's thread (stage.c) */
} entry_mode;

typedef struct q_entry {
  struct q_entry *next;
  uint64_t seq;
  ferry_op op;
  entry_mode mode;
  /* The device part's completion, on the queue's lane (0: none). Owned unless
   * it is the stage's or the capture's. */
  ferry_ticket ticket;
  bool ticket_owned, ticket_done;
  /* A ticketless direct entry: pushed work that a later entry's completion covers. */
  bool needs_witness;
  bool host_taken, host_done; /* the host part was taken by the thread; it ran (or there is none) */
  bool cancelled;             /* its host part was not run: an earlier operation failed */
  ferry_status status;        /* the failure of its host part or of its ticket */
  char *text;                 /* that failure's sentence */
  ferry_ticket start;         /* ENTRY_HOST: a marker of the queue's earlier work, waited for first */
  ferry_gate *gate;           /* ENTRY_HOST on a lane with gates: later lane work waits for the host part */
  ferry_stage *stage;         /* ENTRY_STAGED */
  ferry_mem tmp;              /* an overlapping copy's temporary allocation */
  size_t tmp_class;
  bool has_tmp;
} q_entry;

/* Other devices one queue can copy to or from through rings at once. */
#define FERRY__QUEUE_SIDES 8

struct ferry_queue_obj {
  uint64_t id;
  ferry_device *dev;
  bool is_default;
  ferry_lane *lane; /* NULL on devices without lanes */
  bool gates;       /* the device has gates: work is pushed at submission */
  pthread_mutex_t lock;
  pthread_cond_t changed; /* an entry's host part ended, an entry retired, a waiter stepped aside */
  q_entry *head, *tail;   /* entries not yet retired, in submission order */
  q_entry *free_entries;
  uint64_t next_seq;
  _Atomic uint64_t pending;    /* entries not yet retired */
  _Atomic uint64_t unreleased; /* entries retired whose holds (buffers, rings) are not released yet */
  _Atomic bool failing;        /* a failure not yet reported (read without the lock by the synchronous calls) */
  unsigned ticketless;         /* direct entries in a row without a ticket */
  bool device_work;            /* work pushed on the lane since the last host part began */
  bool native_out;             /* ferry_queue_native handed the lane out: the program's own work may be on it */
  bool waiting;                /* a thread waits for a ticket outside the lock: `waited`'s */
  struct q_entry *waited;      /* the entry whose ticket it waits for (the head, or a ticketless run's witness) */
  unsigned host_queued;        /* host parts not yet done */
  /* The first failure not yet reported. */
  ferry_status fail_status;
  char fail_text[1024];
  uint64_t fail_seq;
  uint64_t cancel_below; /* host parts of entries with seq in (fail_seq, cancel_below) are not run */
  unsigned not_run, ran_after;
  /* The queue's thread, made by its first host part. */
  pthread_t thread;
  bool thread_started, stopping;
  bool destroyed;
  bool lane_pending_release; /* destroyed: the lane goes when the object does (captures hold tickets of it) */
  /* Lanes of other devices for this queue's side of staged copies between
   * devices, made at first use: on the other device's shared synchronous lane
   * that side would sit behind this queue's gates, and every synchronous call
   * on that device would wait for this queue (or, from the thread that would
   * raise the gate, never return). */
  struct {
    ferry_device *dev;
    ferry_lane *lane;
  } side[FERRY__QUEUE_SIDES];
  unsigned sides; /* under lock */
  struct ferry_queue_obj *next_of_device;
};

/* A capture: the work of one queue up to one entry, recorded by an event. */
struct ferry_capture {
  _Atomic unsigned refs;
  ferry_queue_obj *queue; /* held (an object reference on its handle) */
  uint64_t seq;           /* the marker entry's */
  ferry_device *dev;
  _Atomic bool done;
  /* A timing marker on the queue's lane (0: none); owned. Atomic: a marker run on
   * the queue's thread sets it while another queue's submission may read it. */
  _Atomic ferry_ticket ticket;
  double host_time; /* when the core saw it complete (or the host part ran, on devices without lanes) */
};

/* Waits until every entry up to `seq` has retired (`seq` 0: all submitted). */
void ferry__queue_wait_seq(ferry_queue_obj *q, uint64_t seq);
/* Retires what has completed, without waiting; true when the entries up to
 * `seq` have all retired. */
bool ferry__queue_poll_seq(ferry_queue_obj *q, uint64_t seq);
/* A failure of the queue's work not yet reported, for the entries up to `seq`
 * (UINT64_MAX: any): reports it (FERRY_ERROR_BACKEND or the failure's status,
 * the sentence naming `fn`) once the queue is idle, and resets the queue. */
ferry_status ferry__queue_report(ferry_queue_obj *q, const char *fn, uint64_t seq);
/* Takes a reference on a queue object one already holds. */
void ferry__queue_ref(ferry_queue_obj *q);

ferry_capture *ferry__capture_new(ferry_queue_obj *q);
/* Submits a marker of everything submitted to q so far; *out is its capture,
 * with a reference of the caller's (ferry_event_record's, and DLPack's stream
 * wait). On a lane the marker is pushed at once unless the queue's thread
 * pushes its work (then the capture's ticket comes later). */
ferry_status ferry__queue_mark(ferry_queue_obj *q, const char *fn, ferry_capture **out);
void ferry__capture_ref(ferry_capture *c);

#endif
