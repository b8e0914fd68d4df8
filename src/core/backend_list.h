/* The backends built into ferry, one line each, in the order their devices are
 * numbered. A backend is a folder src/backends/<name>/ defining
 * `const ferry_backend ferry_backend_<name>`, plus its line here. */
FERRY_BACKEND(cuda)
FERRY_BACKEND(metal)
FERRY_BACKEND(opencl)
FERRY_BACKEND(vulkan)
FERRY_BACKEND(native)
FERRY_BACKEND(checked)
