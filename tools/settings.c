/* ferry's settings in effect, for the JSON and headers of the `ferry` command and
 * for `ferry help env`. */
#include "tool.h"

size_t tool_setting_count(void) { return 0; }

bool tool_setting_get(size_t index, tool_setting *out) {
  (void)index;
  (void)out;
  return false;
}
