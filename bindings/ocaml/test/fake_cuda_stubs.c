/* The fake CUDA driver's fault switch (tests/fake_cuda), for test_ferry.ml's
 * failure at synchronize: found in the library ferry loaded (FERRY_CUDA_LIBRARY)
 * when that is the fake; false everywhere else. */
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*make_sticky_fn)(int ordinal, int result);

/* fake_cuda_make_sticky ordinal result: true when the fake driver took it. */
value ferry_test_fake_cuda_make_sticky(value ordinal, value result) {
  const char *path = getenv("FERRY_CUDA_LIBRARY");
  if (!path || !*path) return Val_false;
  void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return Val_false;
  make_sticky_fn f;
  *(void **)&f = dlsym(lib, "fake_cuda_make_sticky");
  int ok = f && f(Int_val(ordinal), Int_val(result)) == 0;
  dlclose(lib);
  return Val_bool(ok);
}
