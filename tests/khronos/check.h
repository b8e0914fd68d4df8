/*
 * ferry's own declarations of the OpenCL and Vulkan APIs checked against the
 * Khronos headers: side.cpp, compiled once with ferry's header and once with
 * Khronos's, describes every name that ferry's header declares (list.awk reads
 * them from it); compare.cpp compares the two descriptions and names each
 * difference. C++ because only C++ can take a function type apart into its
 * parameter types.
 */
#ifndef FERRY_TESTS_KHRONOS_CHECK_H
#define FERRY_TESTS_KHRONOS_CHECK_H

#include <string>
#include <type_traits>
#include <vector>

struct khronos_entry {
  const char *what; /* "constant", "string", "type", "struct", "member", "function" */
  std::string name;
  std::string value; /* a number, a string, or a layout: see kind_of */
};

/* How a type is passed and laid out: its class and size in bytes. "i4" signed
 * integer, "u8" unsigned integer, "e4" enumeration, "p8" pointer, "f4" floating
 * point, "a256" array, "s24" structure, "v" void. Pointers compare as pointers
 * whatever they point to: the structures pointed to are checked on their own. */
template <typename T> std::string kind_of() {
  if constexpr (std::is_void<T>::value)
    return "v";
  else {
    const char *c = std::is_pointer<T>::value          ? "p"
                    : std::is_enum<T>::value           ? "e"
                    : std::is_floating_point<T>::value ? "f"
                    : std::is_integral<T>::value       ? (std::is_signed<T>::value ? "i" : "u")
                    : std::is_array<T>::value          ? "a"
                                                       : "s";
    return c + std::to_string(sizeof(T));
  }
}

/* "ret(arg,arg,...)" for a pointer to function. */
template <typename F> struct signature_of;
template <typename R, typename... A> struct signature_of<R (*)(A...)> {
  static std::string get() {
    std::string s = kind_of<R>() + "(";
    ((s += kind_of<A>() + ","), ...);
    if (s.back() == ',') s.pop_back();
    return s + ")";
  }
};

/* The two sides, in the order of the list (the same list on both). */
extern const std::vector<khronos_entry> ferry_side, khronos_side;

#endif
