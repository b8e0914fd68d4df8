/* The conformance suite's cases: each runs on one device (or one ordered pair). */
#ifndef FERRY_TESTS_CONFORMANCE_H
#define FERRY_TESTS_CONFORMANCE_H

#include "harness.h"

#include <string.h>

typedef struct conformance_case {
  const char *name;
  void (*run)(ferry_device *dev, const ferry_device_info *info);
} conformance_case;

typedef struct conformance_pair_case {
  const char *name;
  void (*run)(ferry_device *a, const ferry_device_info *ia, ferry_device *b, const ferry_device_info *ib);
} conformance_pair_case;

/* Both lists end with an entry whose name is NULL. */
extern const conformance_case conformance_device_cases[];
extern const conformance_pair_case conformance_pair_cases[];

#endif
