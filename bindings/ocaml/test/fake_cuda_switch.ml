(* [make_sticky ordinal result]: the fake CUDA driver's fault (tests/fake_cuda),
   as a kernel fault leaves it; 0 clears it. False where the driver ferry loaded
   is not the fake. *)
external make_sticky : int -> int -> bool = "ferry_test_fake_cuda_make_sticky"
