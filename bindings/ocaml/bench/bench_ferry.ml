(* The OCaml binding's cost, next to the C calls it makes, in one process.

   - Per call: Memory.host_to_device of 16 float32 (64 bytes) against C's
     ferry_write of 64 bytes (and ferry_host_to_device, the call the binding
     makes) on the same device: batches of calls, alternated, median ns per call.
   - Large: Memory.host_to_device of a 256 MiB Bigarray against C's
     ferry_host_to_device from the same Bigarray's memory, on each device:
     single calls, alternated, median GB/s.
   - Asynchronous, per submission: Memory.host_to_device_async of 16 float32
     against C's ferry_host_to_device_async (the call it makes), each on a
     stream (queue) of its own, in batches of 1000 synchronised untimed.
   - Asynchronous, large: Memory.host_to_device_async of the 256 MiB Bigarray
     + Stream.synchronize against C's ferry_host_to_device_async +
     ferry_queue_synchronize, alternated, median GB/s.

   threads.posix is linked (and started), so the runtime lock is a real lock
   that every transfer releases and takes again: the cost a threaded program
   pays.
   usage: bench_ferry.exe [--reps N] [--mib M] [--calls C] [--backends native,opencl]
   (FERRY_BACKENDS narrows the devices too) *)

open Bigarray
module M = Ferry.Memory
module D = Ferry.Device

external now : unit -> float = "bench_now"
external c_small : D.t -> int -> int -> float = "bench_c_small"
external c_alloc : D.t -> int -> int64 = "bench_c_alloc"
external c_free : int64 -> unit = "bench_c_free"
external c_large : int64 -> (int, int8_unsigned_elt, c_layout) Array1.t -> float = "bench_c_large"
external c_async_small : D.t -> int -> int -> float = "bench_c_async_small"
external c_async_large : D.t -> int64 -> (int, int8_unsigned_elt, c_layout) Array1.t -> float = "bench_c_async_large"
external c_async_done : unit -> unit = "bench_c_async_done"

module S = Ferry.Stream

let median l =
  let a = Array.of_list l in
  Array.sort compare a;
  let n = Array.length a in
  if n mod 2 = 1 then a.(n / 2) else (a.((n / 2) - 1) +. a.(n / 2)) /. 2.

let reps = ref 21
let mib = ref 256
let calls = ref 200_000
let backends = ref [ "native"; "opencl"; "vulkan"; "checked"; "cuda"; "metal" ]

let () =
  Arg.parse
    [
      ("--reps", Arg.Set_int reps, "N samples of each measure (default 21)");
      ("--mib", Arg.Set_int mib, "M MiB for the large transfer (default 256)");
      ("--calls", Arg.Set_int calls, "C calls per small-transfer sample (default 200000)");
      ("--backends", Arg.String (fun s -> backends := String.split_on_char ',' s), "the backends to measure");
    ]
    (fun _ -> ())
    "bench_ferry.exe [options]"

let per_call dev =
  let src = Array1.init float32 c_layout 16 float_of_int in
  let b = M.alloc dev 16 float32 in
  let ocaml n =
    let t0 = now () in
    for _ = 1 to n do
      M.host_to_device ~src ~dst:b
    done;
    (now () -. t0) /. float_of_int n
  in
  (* Calls per sample: enough for about 10 ms, at most --calls. *)
  let n = ref 100 in
  while !n < !calls && ocaml !n *. float_of_int !n < 0.01 do
    n := !n * 2
  done;
  let n = min !n !calls in
  let ocaml () = ocaml n in
  ignore (ocaml () : float);
  ignore (c_small dev 0 n : float);
  let o = ref [] and w = ref [] and h = ref [] in
  for r = 1 to !reps do
    if r land 1 = 0 then o := ocaml () :: !o;
    w := c_small dev 0 n :: !w;
    h := c_small dev 1 n :: !h;
    if r land 1 = 1 then o := ocaml () :: !o
  done;
  M.free b;
  let ns l = median l *. 1e9 in
  (* Also the median of the differences within each pair of samples taken
     together, which a machine whose load drifts disturbs less. *)
  let pairs = median (List.map2 (fun o w -> (o -. w) *. 1e9) !o !w) in
  Printf.printf
    "  64 B, per call (%d calls a sample): Memory.host_to_device %.1f ns | C ferry_write %.1f ns | C ferry_host_to_device %.1f ns | OCaml - ferry_write %+.1f ns, paired %+.1f ns (target at most +100)\n%!"
    n (ns !o) (ns !w) (ns !h) (ns !o -. ns !w) pairs

let large dev =
  let n = !mib lsl 20 in
  let a = Array1.create int8_unsigned c_layout n in
  Array1.fill a 7;
  let b = M.alloc dev n int8_unsigned in
  let id = c_alloc dev n in
  (* the first write of a fresh buffer can be slow on some drivers *)
  M.host_to_device ~src:a ~dst:b;
  ignore (c_large id a : float);
  let o = ref [] and c = ref [] in
  let ocaml () =
    let t0 = now () in
    M.host_to_device ~src:a ~dst:b;
    o := (now () -. t0) :: !o
  in
  (* Alternated, each side first every other time, so that neither gains
     from going first. *)
  for r = 1 to !reps do
    if r land 1 = 0 then ocaml ();
    c := c_large id a :: !c;
    if r land 1 = 1 then ocaml ()
  done;
  M.free b;
  c_free id;
  let gbs l = float_of_int n /. median l /. 1e9 in
  let pairs = median (List.map2 (fun o c -> c /. o) !o !c) in
  Printf.printf
    "  %d MiB from a Bigarray: Memory.host_to_device %.2f GB/s | C ferry_host_to_device %.2f GB/s | ratio %.3fx, paired %.3fx (target at least 0.95x)\n%!"
    !mib (gbs !o) (gbs !c) (gbs !o /. gbs !c) pairs

let batch = 1000

let async_per_call dev =
  let src = Array1.init float32 c_layout 16 float_of_int in
  let b = M.alloc dev 16 float32 in
  let stream = S.create dev in
  let ocaml n =
    let spent = ref 0. and left = ref n in
    while !left > 0 do
      let k = min batch !left in
      let t0 = now () in
      for _ = 1 to k do
        M.host_to_device_async ~stream ~src ~dst:b
      done;
      spent := !spent +. (now () -. t0);
      S.synchronize stream;
      left := !left - k
    done;
    !spent /. float_of_int n
  in
  let n = max batch (!calls / 10) in
  ignore (ocaml n : float);
  ignore (c_async_small dev n batch : float);
  let o = ref [] and c = ref [] in
  for r = 1 to !reps do
    if r land 1 = 0 then o := ocaml n :: !o;
    c := c_async_small dev n batch :: !c;
    if r land 1 = 1 then o := ocaml n :: !o
  done;
  S.destroy stream;
  M.free b;
  let ns l = median l *. 1e9 in
  let pairs = median (List.map2 (fun o c -> (o -. c) *. 1e9) !o !c) in
  Printf.printf
    "  64 B async, per submission (%d a sample, synchronised every %d): Memory.host_to_device_async %.1f ns | C ferry_host_to_device_async %.1f ns | OCaml - C %+.1f ns, paired %+.1f ns (target at most +150)\n%!"
    n batch (ns !o) (ns !c) (ns !o -. ns !c) pairs

let async_large dev =
  let n = !mib lsl 20 in
  let a = Array1.create int8_unsigned c_layout n in
  Array1.fill a 7;
  let b = M.alloc dev n int8_unsigned in
  let id = c_alloc dev n in
  let stream = S.create dev in
  let ocaml () =
    let t0 = now () in
    M.host_to_device_async ~stream ~src:a ~dst:b;
    S.synchronize stream;
    now () -. t0
  in
  ignore (ocaml () : float);
  ignore (c_async_large dev id a : float);
  let o = ref [] and c = ref [] in
  for r = 1 to !reps do
    if r land 1 = 0 then o := ocaml () :: !o;
    c := c_async_large dev id a :: !c;
    if r land 1 = 1 then o := ocaml () :: !o
  done;
  S.destroy stream;
  c_async_done ();
  M.free b;
  c_free id;
  let gbs l = float_of_int n /. median l /. 1e9 in
  let pairs = median (List.map2 (fun o c -> c /. o) !o !c) in
  Printf.printf
    "  %d MiB async from a Bigarray: host_to_device_async + Stream.synchronize %.2f GB/s | C ferry_host_to_device_async + ferry_queue_synchronize %.2f GB/s | ratio %.3fx, paired %.3fx (target at least 0.95x)\n%!"
    !mib (gbs !o) (gbs !c) (gbs !o /. gbs !c) pairs

let () =
  ignore (Thread.self ());
  Printf.printf "ferry %s, OCaml %s, %d samples each\n%!" (Ferry.version ()) Sys.ocaml_version !reps;
  List.iter
    (fun dev ->
      if List.mem (D.backend dev) !backends then begin
        Printf.printf "%s (%s):\n%!" (D.name dev) (D.backend dev);
        per_call dev;
        large dev;
        async_per_call dev;
        async_large dev
      end)
    (D.all ())
