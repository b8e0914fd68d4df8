/* Compares ferry's declarations with Khronos's (check.h) and names every
 * difference. usage: check_<api>_h [--vulkan-handles] */
#include "check.h"

#include <cstdio>
#include <cstring>

/* The classes of a layout or signature, in order: "offset 8 p8" -> {offset, 8, p8}. */
static std::vector<std::string> tokens(const std::string &s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '(' || c == ')' || c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (c == '(' || c == ')') out.push_back(std::string(1, c));
    } else
      cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/* Two classes that are passed and laid out alike:
 *  - an enumeration and an integer of its size (ferry declares enumerations as
 *    int32_t; an enum's signedness is the compiler's choice, not the ABI's);
 *  - for Vulkan, a non-dispatchable handle: ferry's uint64_t, Khronos's pointer to
 *    an opaque struct on 64-bit targets (vulkan_api.h says why both pass alike). */
static bool same_class(const std::string &f, const std::string &k, bool vulkan_handles) {
  if (f == k) return true;
  if (f.size() < 2 || k.size() < 2 || f.substr(1) != k.substr(1)) return false;
  auto integer = [](char c) { return c == 'i' || c == 'u'; };
  if ((f[0] == 'e' && (integer(k[0]) || k[0] == 'e')) || (k[0] == 'e' && integer(f[0]))) return true;
  return vulkan_handles && f == "u8" && k == "p8";
}

static bool same(const khronos_entry &f, const khronos_entry &k, bool vulkan_handles) {
  if (strcmp(f.what, "type") && strcmp(f.what, "member") && strcmp(f.what, "function") && strcmp(f.what, "struct"))
    return f.value == k.value;
  std::vector<std::string> a = tokens(f.value), b = tokens(k.value);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (!same_class(a[i], b[i], vulkan_handles)) return false;
  return true;
}

int main(int argc, char **argv) {
  bool vulkan_handles = argc > 1 && strcmp(argv[1], "--vulkan-handles") == 0;
  const char *api = vulkan_handles ? "vulkan_api.h" : "opencl_api.h";
  if (ferry_side.size() != khronos_side.size() || ferry_side.empty()) {
    printf("FAIL: the two sides list %zu and %zu names\n", ferry_side.size(), khronos_side.size());
    return 1;
  }
  int differ = 0, counts[6] = {0};
  const char *whats[6] = {"constant", "string", "type", "struct", "member", "function"};
  for (size_t i = 0; i < ferry_side.size(); i++) {
    const khronos_entry &f = ferry_side[i], &k = khronos_side[i];
    for (int w = 0; w < 6; w++)
      counts[w] += strcmp(f.what, whats[w]) == 0;
    if (!same(f, k, vulkan_handles)) {
      printf("DIFFERS %s %s: %s has \"%s\", Khronos \"%s\"\n", f.what, f.name.c_str(), api, f.value.c_str(),
             k.value.c_str());
      differ++;
    }
  }
  printf("%s against the Khronos headers: %d constants, %d strings, %d types, %d structs (%d members), "
         "%d functions checked; %d differ\n",
         api, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], differ);
  return differ ? 1 : 0;
}
