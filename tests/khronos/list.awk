# Lists what ferry's own declarations of a Khronos API (src/backends/opencl/
# opencl_api.h, src/backends/vulkan/vulkan_api.h) declare, as lines that
# tests/khronos/side.cpp expands on each side of the comparison:
#
#   FERRY_CONST(name)        a numeric constant      FERRY_STRING(name)  a string constant
#   FERRY_TYPE(name)         a typedef               FERRY_FUNCTION(name) an entry point
#   FERRY_STRUCT(name)       a structure             FERRY_MEMBER(s, m)  one of its members
#
# Read from the header itself, so that whatever a later change declares is
# checked too. Names that start with ferry_ are ferry's own and have no Khronos
# counterpart. usage: awk -f list.awk header.h > list.inc
function last_word(text, words, n) {
  n = split(text, words, /[ *]+/)
  return words[n]
}
BEGIN { in_struct = "" }
# A structure: its members, one per line ("  type name[dims]; /* comment */").
/^typedef struct [A-Za-z0-9_]+ \{/ {
  in_struct = $3
  if (in_struct !~ /^ferry_/) print "FERRY_STRUCT(" in_struct ")"
  next
}
in_struct != "" && /^\}/ { in_struct = ""; next }
in_struct != "" {
  # Function pointers in ferry's own tables: "  cl_mem (*clCreateBuffer)(...".
  if (match($0, /\(\*cl[A-Za-z0-9]+\)/)) print "FERRY_FUNCTION(" substr($0, RSTART + 2, RLENGTH - 3) ")"
  if (in_struct !~ /^ferry_/ && $0 ~ /;/) {
    line = $0
    sub(/;.*/, "", line)
    sub(/\[.*/, "", line)
    print "FERRY_MEMBER(" in_struct ", " last_word(line) ")"
  }
  next
}
# Vulkan entry points: X(ret, vkName, (args)) lines of the FERRY_VK_*_FUNCTIONS lists,
# and the PFN_ typedefs written out by hand.
/X\([A-Za-z0-9_]+, vk[A-Za-z0-9]+,/ {
  match($0, /X\([A-Za-z0-9_]+, vk[A-Za-z0-9]+,/)
  entry = substr($0, RSTART, RLENGTH - 1)
  sub(/.*, /, "", entry)
  print "FERRY_FUNCTION(" entry ")"
  next
}
/^typedef .*\(FERRY_VKAPI \*PFN_vk[A-Za-z0-9]+\)/ {
  match($0, /PFN_vk[A-Za-z0-9]+/)
  print "FERRY_FUNCTION(" substr($0, RSTART + 4, RLENGTH - 4) ")"
  next
}
# Plain typedefs: "typedef int32_t cl_int;", "typedef struct VkDevice_T *VkDevice;".
/^typedef [^({]*;/ {
  line = $0
  sub(/;.*/, "", line)
  name = last_word(line)
  if (name !~ /^ferry_/) print "FERRY_TYPE(" name ")"
  next
}
# Object-like constants (a function-like macro has "(" right after its name).
# VK_NULL_HANDLE is a null handle, not a value: Khronos spells it nullptr in C++.
/^#define (CL|VK)_[A-Z0-9_]+[ \t]/ {
  if ($2 == "VK_NULL_HANDLE") next
  if ($3 ~ /^"/) print "FERRY_STRING(" $2 ")"
  else print "FERRY_CONST(" $2 ")"
}
