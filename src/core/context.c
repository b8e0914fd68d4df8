/* The core's one context (context.h says what is in it and who owns each part). */
#include "context.h"

ferry_context ferry__ctx = {
    .registry = {.init_lock = PTHREAD_MUTEX_INITIALIZER},
    .options = {.lock = PTHREAD_MUTEX_INITIALIZER},
    .buffers = {.lock = PTHREAD_MUTEX_INITIALIZER, .free_head = FERRY__NO_SLOT, .session = 1},
    .objects =
        {
            [FERRY_OBJECT_QUEUE] = {.lock = PTHREAD_MUTEX_INITIALIZER, .free_head = FERRY__NO_SLOT},
            [FERRY_OBJECT_EVENT] = {.lock = PTHREAD_MUTEX_INITIALIZER, .free_head = FERRY__NO_SLOT},
        },
};
