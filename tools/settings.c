/* ferry's settings in effect (ferry_option_count, ferry_option_get), for the JSON
 * and headers of the `ferry` command, `ferry info --verbose` and `ferry help env`. */
#include "tool.h"

size_t tool_setting_count(void) { return ferry_option_count(); }

bool tool_setting_get(size_t index, tool_setting *out) {
  ferry_option_info o;
  if (ferry_option_get(index, &o) != FERRY_OK) return false;
  static const char *const sources[] = {
      [FERRY_OPTION_DEFAULT] = "default", [FERRY_OPTION_ENVIRONMENT] = "environment", [FERRY_OPTION_CODE] = "code"};
  *out = (tool_setting){
      .name = o.name,
      .value = o.value ? o.value : "",
      .source = (unsigned)o.source < sizeof sources / sizeof sources[0] ? sources[o.source] : "unknown",
      .range = o.range ? o.range : "",
      .description = o.description ? o.description : "",
  };
  return true;
}
