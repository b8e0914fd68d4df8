(* The binding's tests, on every device ferry finds (FERRY_BACKENDS narrows
   them). Each check that fails prints what it saw; the program exits 1 if any
   did. FERRY_OCAML_TEST_BIG_MIB sets the size of the large transfer (256 MiB by
   default; the valgrind runs make it smaller). *)

open Bigarray
module M = Ferry.Memory
module D = Ferry.Device

let failures = ref 0
let checks = ref 0
let current = ref ""

let check cond fmt =
  Printf.ksprintf
    (fun text ->
      incr checks;
      if not cond then begin
        incr failures;
        Printf.printf "FAIL [%s] %s\n%!" !current text
      end)
    fmt

(* Runs f, which must raise Ferry.Error (status, _); returns the sentence. *)
let expect_error status what f =
  match f () with
  | _ ->
      check false "%s: returned, expected Ferry.Error (%s, _)" what (Ferry.string_of_status status);
      ""
  | exception Ferry.Error (s, text) ->
      check (s = status) "%s: Ferry.Error (%s, %S), expected %s" what (Ferry.string_of_status s) text
        (Ferry.string_of_status status);
      check (String.length text > 0) "%s: an empty sentence" what;
      text
  | exception e ->
      check false "%s: raised %s, expected Ferry.Error (%s, _)" what (Printexc.to_string e)
        (Ferry.string_of_status status);
      ""

let contains text sub =
  let n = String.length text and m = String.length sub in
  let rec at i = i + m <= n && (String.sub text i m = sub || at (i + 1)) in
  at 0

let section dev what =
  current := Printf.sprintf "%s on %d %s (%s)" what (D.id dev) (D.backend dev) (D.name dev)

(* ---- kinds --------------------------------------------------------------- *)

(* A kind, its name, and a pattern of values for element i (seed s). *)
type kind_case = K : string * ('a, 'b) kind * (int -> int -> 'a) -> kind_case

let kinds =
  [
    K ("float32", float32, fun s i -> float_of_int ((i * 31) + s) *. 0.5);
    K ("float64", float64, fun s i -> (float_of_int i *. 0.25) -. float_of_int s);
    K ("int8_signed", int8_signed, fun s i -> ((i + s) mod 256) - 128);
    K ("int8_unsigned", int8_unsigned, fun s i -> (i * 7 + s) mod 256);
    K ("int16_signed", int16_signed, fun s i -> ((i * 263 + s) mod 65536) - 32768);
    K ("int16_unsigned", int16_unsigned, fun s i -> (i * 263 + s) mod 65536);
    K ("int32", int32, fun s i -> Int32.of_int ((i * 65599) lxor s));
    K ("int64", int64, fun s i -> Int64.(add (mul (of_int i) 0x123456789L) (of_int s)));
    K ("int", int, fun s i -> (i * 1_000_003) - s);
    K ("nativeint", nativeint, fun s i -> Nativeint.of_int (-i * 77 + s));
    K ("complex32", complex32, fun s i -> { Complex.re = float_of_int i; im = float_of_int (-i - s) });
    K ("complex64", complex64, fun s i -> { Complex.re = float_of_int (i + s) /. 3.; im = float_of_int i });
    K ("char", char, fun s i -> Char.chr ((i + s) land 255));
  ]

let filled kind gen seed n =
  let a = Array1.create kind c_layout n in
  for i = 0 to n - 1 do
    Array1.unsafe_set a i (gen seed i)
  done;
  a

let every_kind dev =
  section dev "every kind";
  List.iteri
    (fun k (K (name, kind, gen)) ->
      let n = 1000 + (k * 7) in
      let src = filled kind gen 1 n in
      let b = M.alloc dev n kind in
      check (M.size b = n) "%s: size %d, expected %d" name (M.size b) n;
      check (not (M.is_zero_copy b)) "%s: a plain buffer says zero-copy" name;
      check (M.device_ptr b <> 0n) "%s: device_ptr is 0" name;
      M.host_to_device ~src ~dst:b;
      let back = filled kind gen 2 n in
      M.device_to_host ~src:b ~dst:back;
      check (back = src) "%s: the bytes read back differ" name;
      (* An empty buffer, on every kind. *)
      let e = M.alloc dev 0 kind in
      M.host_to_device ~src:(Array1.create kind c_layout 0) ~dst:e;
      check (M.size e = 0) "%s: empty buffer has size %d" name (M.size e);
      M.free e;
      M.free b)
    kinds

(* ---- mismatches ---------------------------------------------------------- *)

let mismatches dev =
  section dev "mismatches";
  let n = 256 in
  let gen _ i = float_of_int i in
  let b = M.alloc dev n float32 in
  let content = filled float32 gen 0 n in
  M.host_to_device ~src:content ~dst:b;
  let unchanged what =
    let back = Array1.create float32 c_layout n in
    M.device_to_host ~src:b ~dst:back;
    check (back = content) "%s changed the buffer" what
  in
  (* Same OCaml type, other kind: ferry's check. *)
  let wide = filled float64 (fun _ i -> float_of_int (-i)) 0 n in
  let text = expect_error Ferry.Kind_mismatch "float64 array into a float32 buffer" (fun () ->
      M.host_to_device ~src:wide ~dst:b)
  in
  check (contains text "float64" && contains text "float32") "the sentence names both kinds: %S" text;
  unchanged "a kind mismatch";
  let short = filled float32 (fun _ _ -> -1.) 0 (n - 1) in
  let text = expect_error Ferry.Size_mismatch "a shorter array" (fun () -> M.host_to_device ~src:short ~dst:b) in
  check (contains text (string_of_int (n - 1)) && contains text (string_of_int n)) "the sentence has the lengths: %S"
    text;
  unchanged "a size mismatch";
  let long = filled float32 (fun _ _ -> -1.) 0 (n + 1) in
  ignore (expect_error Ferry.Size_mismatch "a longer array" (fun () -> M.host_to_device ~src:long ~dst:b));
  unchanged "a size mismatch";
  (* Reads that fail leave the array alone. *)
  let dst = filled float32 (fun _ _ -> 7.) 0 (n - 1) in
  ignore (expect_error Ferry.Size_mismatch "reading into a shorter array" (fun () ->
      M.device_to_host ~src:b ~dst));
  check (Array1.get dst 0 = 7. && Array1.get dst (n - 2) = 7.) "a failed read wrote the array";
  let dst64 = filled float64 (fun _ _ -> 7.) 0 n in
  ignore (expect_error Ferry.Kind_mismatch "reading into a float64 array" (fun () ->
      M.device_to_host ~src:b ~dst:dst64));
  check (Array1.get dst64 0 = 7.) "a failed read wrote the array";
  (* Raw pointers: the byte count must be the buffer's. *)
  ignore (expect_error Ferry.Size_mismatch "host_ptr_to_device of too few bytes" (fun () ->
      M.host_ptr_to_device ~src_ptr:(Ferry.bigarray_address short) ~byte_size:((n - 1) * 4) ~dst:b));
  unchanged "a raw size mismatch";
  ignore (expect_error Ferry.Invalid_argument "a negative byte_size" (fun () ->
      M.device_to_host_ptr ~src:b ~dst_ptr:(Ferry.bigarray_address dst) ~byte_size:(-4)));
  (* Buffers of different lengths or kinds do not copy. *)
  let other = M.alloc dev (n + 1) float32 in
  ignore (expect_error Ferry.Size_mismatch "device_to_device between lengths" (fun () ->
      M.device_to_device ~src:other ~dst:b));
  unchanged "a device-to-device size mismatch";
  let other64 = M.alloc dev n float64 in
  ignore (expect_error Ferry.Kind_mismatch "device_to_device between kinds" (fun () ->
      M.device_to_device ~src:other64 ~dst:b));
  unchanged "a device-to-device kind mismatch";
  M.free other;
  M.free other64;
  ignore (expect_error Ferry.Invalid_argument "a negative length" (fun () -> M.alloc dev (-1) float32));
  ignore (expect_error Ferry.Invalid_argument "elem_size 0" (fun () -> M.alloc_custom dev ~size:4 ~elem_size:0));
  M.free b

(* ---- free, use after free ------------------------------------------------ *)

let use_after_free dev =
  section dev "use after free";
  let n = 64 in
  let a = Array1.create int32 c_layout n in
  Array1.fill a 5l;
  let b = M.alloc dev n int32 in
  M.host_to_device ~src:a ~dst:b;
  M.free b;
  M.free b;
  (* the second is a no-op *)
  ignore (expect_error Ferry.Stale_buffer "host_to_device after free" (fun () -> M.host_to_device ~src:a ~dst:b));
  ignore (expect_error Ferry.Stale_buffer "device_to_host after free" (fun () -> M.device_to_host ~src:b ~dst:a));
  ignore (expect_error Ferry.Stale_buffer "host_ptr_to_device after free" (fun () ->
      M.host_ptr_to_device ~src_ptr:(Ferry.bigarray_address a) ~byte_size:(n * 4) ~dst:b));
  ignore (expect_error Ferry.Stale_buffer "device_to_host_ptr after free" (fun () ->
      M.device_to_host_ptr ~src:b ~dst_ptr:(Ferry.bigarray_address a) ~byte_size:(n * 4)));
  let live = M.alloc dev n int32 in
  ignore (expect_error Ferry.Stale_buffer "device_to_device from a freed buffer" (fun () ->
      M.device_to_device ~src:b ~dst:live));
  ignore (expect_error Ferry.Stale_buffer "device_to_device into a freed buffer" (fun () ->
      M.device_to_device ~src:live ~dst:b));
  ignore (expect_error Ferry.Stale_buffer "device_ptr after free" (fun () -> M.device_ptr b));
  ignore (expect_error Ferry.Stale_buffer "is_zero_copy after free" (fun () -> M.is_zero_copy b));
  check (M.size b = n) "size after free is %d" (M.size b);
  check (Array1.get a 0 = 5l) "a failed read wrote the array";
  M.free live

(* ---- zero-copy ----------------------------------------------------------- *)

(* A zero-copy buffer over an array nothing else references: only the buffer
   keeps it alive. *)
let zero_copy_orphan dev n =
  let a = filled float64 (fun _ i -> float_of_int i) 0 n in
  match M.alloc_zero_copy dev a float64 with Some b -> b | None -> assert false

let zero_copy dev =
  section dev "zero-copy";
  let n = 4096 in
  let a = filled float32 (fun _ i -> float_of_int i) 0 n in
  match M.alloc_zero_copy dev a float32 with
  | None -> check (not (D.zero_copy dev)) "alloc_zero_copy said None on a zero-copy device"
  | Some b ->
      check (D.zero_copy dev) "alloc_zero_copy made a buffer on a device with memory of its own";
      check (M.is_zero_copy b) "a zero-copy buffer says it is not";
      check (M.device_ptr b = Ferry.bigarray_address a) "device_ptr %nx is not the array's address %nx"
        (M.device_ptr b) (Ferry.bigarray_address a);
      check (M.size b = n) "size %d" (M.size b);
      (* The buffer IS the array: a host write is the buffer's content. *)
      Array1.set a 10 (-3.5);
      let back = Array1.create float32 c_layout n in
      M.device_to_host ~src:b ~dst:back;
      check (Array1.get back 10 = -3.5) "a host write is not visible through the buffer";
      (* Another array copied in lands in the array itself. *)
      let other = filled float32 (fun _ i -> float_of_int (-i)) 0 n in
      M.host_to_device ~src:other ~dst:b;
      check (a = other) "host_to_device from another array did not land in the buffer's array";
      (* From and to its own array: nothing moves, nothing breaks. *)
      M.host_to_device ~src:a ~dst:b;
      M.device_to_host ~src:b ~dst:a;
      check (a = other) "own-array transfers changed the array";
      ignore (expect_error Ferry.Kind_mismatch "a float64 zero-copy buffer over... a float32 kind" (fun () ->
          M.alloc_zero_copy dev a (Obj.magic float64 : (float, float32_elt) kind)));
      M.free b;
      (* Freeing never frees the array. *)
      Array1.set a 0 42.;
      check (Array1.get a 0 = 42.) "the array changed after free";
      (* The buffer keeps its array alive. *)
      let orphan = zero_copy_orphan dev n in
      Gc.compact ();
      ignore (Array.make 100_000 0 : int array);
      Gc.full_major ();
      let back = Array1.create float64 c_layout n in
      M.device_to_host ~src:orphan ~dst:back;
      check (Array1.get back 123 = 123. && Array1.get back (n - 1) = float_of_int (n - 1))
        "the zero-copy buffer's array did not survive the GC";
      M.free orphan

(* ---- host-pointer buffers ------------------------------------------------ *)

let host_ptr dev =
  section dev "host-pointer";
  let align = D.host_ptr_alignment dev in
  if align = 0 then begin
    let a = Array1.create int32 c_layout 1024 in
    match M.alloc_host_ptr dev a int32 with
    | Error Ferry.Host_ptr_unsupported -> ()
    | Error _ -> check false "a device without host-pointer buffers refused for another reason"
    | Ok _ -> check false "a device without host-pointer buffers made one"
  end
  else begin
    let bytes = max 65536 align in
    let n = bytes / 4 in
    let a = Ferry.aligned_array int32 ~alignment:align n in
    check (Int64.rem (Int64.of_nativeint (Ferry.bigarray_address a)) (Int64.of_int align) = 0L)
      "aligned_array is not aligned to %d" align;
    check (Array1.dim a * 4 mod align = 0) "aligned_array's byte size is not a multiple of %d" align;
    check (Array1.dim a = n) "aligned_array of %d elements has %d" n (Array1.dim a);
    for i = 0 to n - 1 do
      Array1.unsafe_set a i (Int32.of_int (i * 3))
    done;
    let b = match M.alloc_host_ptr dev a int32 with Ok b -> b | Error _ -> failwith "alloc_host_ptr refused" in
    check (M.is_zero_copy b = D.zero_copy dev) "is_zero_copy of a host-pointer buffer is %b on a device whose zero_copy is %b"
      (M.is_zero_copy b) (D.zero_copy dev);
    check (M.size b = n) "size %d" (M.size b);
    check (M.device_ptr b <> 0n) "device_ptr is 0";
    if D.zero_copy dev then
      check (M.device_ptr b = Ferry.bigarray_address a) "device_ptr is not the array's address on a zero-copy device";
    (* The protocol: the array handed to the device and back, by transfers
       from and into the same array. *)
    M.host_to_device ~src:a ~dst:b;
    M.device_to_host ~src:b ~dst:a;
    check (Array1.get a 7 = 21l && Array1.get a (n - 1) = Int32.of_int ((n - 1) * 3)) "own-array round trip changed the array";
    (* Host writes, handed over: the device's copy into another buffer sees them. *)
    Array1.set a 5 (-77l);
    M.host_to_device ~src:a ~dst:b;
    let plain = M.alloc dev n int32 in
    M.device_to_device ~src:b ~dst:plain;
    let back = Array1.create int32 c_layout n in
    M.device_to_host ~src:plain ~dst:back;
    check (Array1.get back 5 = -77l) "the device did not see the host's write";
    (* Another array copied in, then read back into the own array. *)
    let other = filled int32 (fun _ i -> Int32.of_int (-i)) 0 n in
    M.host_to_device ~src:other ~dst:b;
    M.device_to_host ~src:b ~dst:a;
    check (a = other) "another array copied into a host-pointer buffer is not its content";
    if not (D.zero_copy dev) then begin
      (* Refusals, with the alignment named. *)
      let elems = align / 4 in
      if align > 4 then (match M.alloc_host_ptr dev (Array1.sub (Ferry.aligned_array int32 ~alignment:align (2 * n)) 1 elems) int32 with
      | Error (Ferry.Host_ptr_misaligned { alignment }) -> check (alignment = align) "misaligned names %d" alignment
      | Error _ -> check false "a misaligned array refused for another reason"
      | Ok _ -> check false "a misaligned array was accepted");
      if align > 4 then begin
        match M.alloc_host_ptr dev (Array1.sub (Ferry.aligned_array int32 ~alignment:align n) 0 (elems - 1)) int32 with
        | Error (Ferry.Host_ptr_bad_length { alignment }) -> check (alignment = align) "bad length names %d" alignment
        | Error _ -> check false "a short array refused for another reason"
        | Ok _ -> check false "an array of a byte size that is not a multiple of %d was accepted" align
      end;
      (match M.alloc_host_ptr dev (Array1.sub a 0 elems) int32 with
      | Error Ferry.Host_ptr_overlap -> ()
      | Error _ -> check false "an overlapping array refused for another reason"
      | Ok _ -> check false "an array overlapping a live host-pointer buffer was accepted");
      (* Freed, the same array can be imported again. *)
      M.free b;
      (match M.alloc_host_ptr dev a int32 with
      | Ok b2 -> M.free b2
      | Error _ -> check false "the array of a freed host-pointer buffer cannot be imported again");
      (* Dropped without free: the finaliser gives the range back. *)
      let kept = ref (Some (M.alloc_host_ptr dev a int32)) in
      (match M.alloc_host_ptr dev a int32 with
      | Error Ferry.Host_ptr_overlap -> ()
      | _ -> check false "the same array was imported twice");
      kept := None;
      Gc.full_major ();
      match M.alloc_host_ptr dev a int32 with
      | Ok b3 -> M.free b3
      | Error _ -> check false "a dropped host-pointer buffer still holds its array after Gc.full_major"
    end
    else M.free b;
    M.free plain
  end

(* ---- custom elements ----------------------------------------------------- *)

let custom dev =
  section dev "custom elements";
  let n = 1000 and elem = 12 in
  let src = Array1.create char c_layout (n * elem) in
  for i = 0 to (n * elem) - 1 do
    Array1.unsafe_set src i (Char.chr ((i * 13) land 255))
  done;
  let b : char M.buffer = M.alloc_custom dev ~size:n ~elem_size:elem in
  check (M.size b = n) "size %d, expected %d" (M.size b) n;
  M.host_ptr_to_device ~src_ptr:(Ferry.bigarray_address src) ~byte_size:(n * elem) ~dst:b;
  let dst = Array1.create char c_layout (n * elem) in
  Array1.fill dst '\000';
  M.device_to_host_ptr ~src:b ~dst_ptr:(Ferry.bigarray_address dst) ~byte_size:(n * elem);
  check (dst = src) "custom elements read back differ";
  ignore (expect_error Ferry.Size_mismatch "a custom buffer and the wrong byte count" (fun () ->
      M.device_to_host_ptr ~src:b ~dst_ptr:(Ferry.bigarray_address dst) ~byte_size:((n * elem) - 1)));
  (* Typed transfers refuse custom buffers. *)
  let typed : (char, int8_unsigned_elt, c_layout) Array1.t = Array1.create char c_layout (n * elem) in
  ignore (expect_error Ferry.Kind_mismatch "a typed transfer into a custom buffer" (fun () ->
      M.host_to_device ~src:typed ~dst:b));
  M.free b

(* ---- device to device ---------------------------------------------------- *)

let device_to_device devices =
  List.iter
    (fun d1 ->
      List.iter
        (fun d2 ->
          current := Printf.sprintf "device_to_device %s -> %s" (D.name d1) (D.name d2);
          let n = 100_003 in
          let a = filled int64 (fun s i -> Int64.of_int ((i * 7) + s)) (D.id d1 + (10 * D.id d2)) n in
          let src = M.alloc d1 n int64 and dst = M.alloc d2 n int64 in
          M.host_to_device ~src:a ~dst:src;
          M.device_to_device ~src ~dst;
          let back = Array1.create int64 c_layout n in
          M.device_to_host ~src:dst ~dst:back;
          check (back = a) "the copy differs";
          M.free src;
          M.free dst)
        devices)
    devices

(* ---- threads and the GC -------------------------------------------------- *)

(* Workers run transfers while the main thread compacts the heap; every round
   uses fresh arrays, and a zero-copy buffer only it keeps alive where the device
   has them. *)
let compaction dev =
  section dev "Gc.compact during transfers";
  let rounds = 40 and n = 65536 in
  let ok = Array.make 2 true in
  let worker w =
    for r = 1 to rounds do
      let junk = List.init 1000 (fun i -> string_of_int (i + r)) in
      let a = filled int32 (fun s i -> Int32.of_int (i lxor s)) ((w * 1000) + r) n in
      let b = M.alloc dev n int32 in
      M.host_to_device ~src:a ~dst:b;
      let back = Array1.create int32 c_layout n in
      M.device_to_host ~src:b ~dst:back;
      if back <> a then ok.(w) <- false;
      M.free b;
      if List.length junk <> 1000 then ok.(w) <- false;
      Thread.yield ()
    done
  in
  let threads = List.init 2 (fun w -> Thread.create worker w) in
  let done_ = ref false in
  let compactor =
    Thread.create
      (fun () ->
        while not !done_ do
          Gc.compact ();
          Thread.yield ()
        done)
      ()
  in
  List.iter Thread.join threads;
  done_ := true;
  Thread.join compactor;
  check (ok.(0) && ok.(1)) "a worker read back other bytes";
  (* And between transfers, on one buffer. *)
  let a = filled float32 (fun _ i -> float_of_int i) 0 n in
  let b = M.alloc dev n float32 in
  M.host_to_device ~src:a ~dst:b;
  Gc.compact ();
  let back = Array1.create float32 c_layout n in
  Gc.compact ();
  M.device_to_host ~src:b ~dst:back;
  check (back = a) "a transfer after Gc.compact read other bytes";
  M.free b;
  if D.zero_copy dev then begin
    let orphan = zero_copy_orphan dev n in
    Gc.compact ();
    let back = Array1.create float64 c_layout n in
    M.device_to_host ~src:orphan ~dst:back;
    check (Array1.get back (n - 1) = float_of_int (n - 1)) "a zero-copy buffer's array moved or died in Gc.compact";
    M.free orphan
  end

(* ---- streams and events ------------------------------------------------- *)

module S = Ferry.Stream
module E = Ferry.Event

let ints seed n = filled int32 (fun s i -> Int32.of_int ((i * 7919) lxor s)) seed n

(* Work submitted to a stream, its arrays dropped, and the heap compacted and
   reused before the work is waited for: only the stream keeps them alive. *)
let submit_dropped stream dst seed n =
  M.host_to_device_async ~stream ~src:(ints seed n) ~dst

let streams dev =
  section dev "streams";
  let n = 4099 in
  let s = S.create dev in
  let a = ints 1 n in
  let b1 = M.alloc dev n int32 and b2 = M.alloc dev n int32 in
  (* In order on one stream: write, copy, read back. *)
  let back = Array1.create int32 c_layout n in
  Array1.fill back 0l;
  M.host_to_device_async ~stream:s ~src:a ~dst:b1;
  M.device_to_device_async ~stream:s ~src:b1 ~dst:b2;
  M.device_to_host_async ~stream:s ~src:b2 ~dst:back;
  S.synchronize s;
  check (back = a) "write, copy, read on one stream: the bytes read back differ";
  (* The source array dropped at the call, while another thread compacts. *)
  let stop = ref false in
  let compactor =
    Thread.create
      (fun () ->
        while not !stop do
          Gc.compact ();
          Thread.yield ()
        done)
      ()
  in
  for r = 2 to 4 do
    submit_dropped s b1 r n;
    Gc.compact ();
    let reuse = List.init 4 (fun k -> ints (100 + k) n) in
    S.synchronize s;
    M.device_to_host ~src:b1 ~dst:back;
    check (back = ints r n) "round %d: a dropped source array did not reach the buffer intact" r;
    ignore (Sys.opaque_identity reuse)
  done;
  stop := true;
  Thread.join compactor;
  (* Checks raise at the call, and nothing is submitted. *)
  let text = expect_error Ferry.Size_mismatch "host_to_device_async of a shorter array" (fun () ->
      M.host_to_device_async ~stream:s ~src:(ints 9 (n - 1)) ~dst:b1)
  in
  check (contains text (string_of_int (n - 1))) "the sentence has the length: %S" text;
  ignore (expect_error Ferry.Kind_mismatch "host_to_device_async of a float32 array into an int32 buffer"
      (fun () -> M.host_to_device_async ~stream:s ~src:(Array1.create float32 c_layout n) ~dst:(Obj.magic b1)));
  ignore (expect_error Ferry.Size_mismatch "device_to_host_async into a longer array" (fun () ->
      M.device_to_host_async ~stream:s ~src:b1 ~dst:(ints 9 (n + 1))));
  let other = M.alloc dev (n + 1) int32 in
  ignore (expect_error Ferry.Size_mismatch "device_to_device_async between lengths" (fun () ->
      M.device_to_device_async ~stream:s ~src:other ~dst:b1));
  M.free other;
  ignore (expect_error Ferry.Stale_buffer "host_to_device_async into a freed buffer" (fun () ->
      M.host_to_device_async ~stream:s ~src:a ~dst:other));
  S.synchronize s;
  M.device_to_host ~src:b1 ~dst:back;
  check (back = ints 4 n) "a refused asynchronous call changed the buffer";
  (* Events on one device: elapsed is a finite, non-negative time. *)
  let e1 = E.create () and e2 = E.create () in
  ignore (expect_error Ferry.Invalid_argument "elapsed of events never recorded" (fun () ->
      E.elapsed ~start:e1 ~stop:e2));
  E.record e1 s;
  M.host_to_device_async ~stream:s ~src:a ~dst:b1;
  E.record e2 s;
  E.synchronize e2;
  E.synchronize e1;
  let ms = E.elapsed ~start:e1 ~stop:e2 in
  check (Float.is_finite ms && ms >= 0.) "Event.elapsed is %g ms" ms;
  E.destroy e1;
  E.destroy e1;
  ignore (expect_error Ferry.Stale_handle "recording a destroyed event" (fun () -> E.record e1 s));
  (* destroy waits for pending work, twice is a no-op, later use raises. *)
  submit_dropped s b1 5 n;
  M.device_to_device_async ~stream:s ~src:b1 ~dst:b2;
  S.destroy s;
  S.destroy s;
  M.device_to_host ~src:b2 ~dst:back;
  check (back = ints 5 n) "Stream.destroy did not wait for the stream's work";
  ignore (expect_error Ferry.Stale_handle "host_to_device_async on a destroyed stream" (fun () ->
      M.host_to_device_async ~stream:s ~src:a ~dst:b1));
  ignore (expect_error Ferry.Stale_handle "synchronize of a destroyed stream" (fun () -> S.synchronize s));
  ignore (expect_error Ferry.Stale_handle "recording on a destroyed stream" (fun () -> E.record e2 s));
  (* A stream dropped with work pending: its finaliser waits for the work. *)
  (let dropped = S.create dev in
   submit_dropped dropped b1 6 n);
  Gc.full_major ();
  Gc.compact ();
  M.device_to_host ~src:b1 ~dst:back;
  check (back = ints 6 n) "a dropped stream's work was lost";
  (* The default stream: one value, destroy is a no-op, synchronous calls wait for it. *)
  let d = S.default dev in
  check (S.default dev == d) "Stream.default gave two values";
  submit_dropped d b1 7 n;
  S.destroy d;
  M.device_to_host ~src:b1 ~dst:back;
  check (back = ints 7 n) "a synchronous read did not see the default stream's write";
  S.synchronize d;
  M.free b1;
  M.free b2

let fake_cuda_make_sticky = Fake_cuda_switch.make_sticky

(* A device fault while work is queued (the fake CUDA driver's sticky error, as a
   kernel fault leaves) is raised by Stream.synchronize; the stream's roots go all
   the same, and once the device recovers the stream works again. *)
let failure_at_synchronize dev =
  let first_cuda = List.find_opt (fun d -> D.backend d = "cuda") (D.all ()) in
  (* The fault goes to ordinal 0: the first CUDA device. *)
  if first_cuda = Some dev && fake_cuda_make_sticky 0 0 then begin
    section dev "a failure raised at synchronize";
    let n = 1 lsl 16 in
    let s = S.create dev in
    let b = M.alloc dev n int32 in
    M.host_to_device_async ~stream:s ~src:(ints 3 n) ~dst:b;
    check (fake_cuda_make_sticky 0 700) "the fake driver refused the fault";
    (match S.synchronize s with
    | () -> check false "Stream.synchronize returned after a device fault"
    | exception Ferry.Error (st, text) ->
        check (st = Ferry.Backend) "Stream.synchronize raised %s: %s" (Ferry.string_of_status st) text;
        check (contains text "700" || contains text "ILLEGAL") "the sentence does not name the fault: %S" text);
    ignore (fake_cuda_make_sticky 0 0);
    let back = Array1.create int32 c_layout n in
    M.host_to_device_async ~stream:s ~src:(ints 4 n) ~dst:b;
    M.device_to_host_async ~stream:s ~src:b ~dst:back;
    S.synchronize s;
    check (back = ints 4 n) "after the report, the stream did not work again";
    S.destroy s;
    M.free b;
    Printf.printf "  %s: a device fault raised at Stream.synchronize: checked\n%!" (D.name dev)
  end

(* An event orders two streams of different devices. *)
let streams_across devices =
  match devices with
  | [] | [ _ ] -> ()
  | first :: _ ->
      List.iteri
        (fun i d1 ->
          let d2 = match List.nth_opt devices (i + 1) with Some d -> d | None -> first in
          current := Printf.sprintf "an event from %s to %s" (D.name d1) (D.name d2);
          let n = 10_007 in
          let a = ints (20 + i) n in
          let s1 = S.create d1 and s2 = S.create d2 in
          let b1 = M.alloc d1 n int32 and b2 = M.alloc d2 n int32 in
          let e = E.create () in
          M.host_to_device_async ~stream:s1 ~src:a ~dst:b1;
          E.record e s1;
          E.synchronize e;
          let back = Array1.create int32 c_layout n in
          M.device_to_device_async ~stream:s2 ~src:b1 ~dst:b2;
          M.device_to_host_async ~stream:s2 ~src:b2 ~dst:back;
          S.synchronize s2;
          check (back = a) "the second stream's work did not see the first's";
          let e2 = E.create () in
          E.record e2 s2;
          E.synchronize e2;
          if D.id d1 <> D.id d2 then
            ignore (expect_error Ferry.Invalid_argument "elapsed between devices" (fun () ->
                E.elapsed ~start:e ~stop:e2));
          E.destroy e;
          E.destroy e2;
          S.destroy s1;
          S.destroy s2;
          M.free b1;
          M.free b2)
        devices

let big_mib =
  match Sys.getenv_opt "FERRY_OCAML_TEST_BIG_MIB" with Some s -> int_of_string s | None -> 256

(* While one thread runs a large transfer, another OCaml thread runs. *)
let progress dev =
  section dev (Printf.sprintf "progress during a %d MiB transfer" big_mib);
  let n = big_mib lsl 20 in
  let a = Array1.create char c_layout n in
  Array1.fill a 'x';
  let b = M.alloc dev n char in
  M.host_to_device ~src:a ~dst:b;
  (* warm: the first write of a fresh buffer can be slow *)
  let in_transfer = ref false and seen = ref 0 and stop = ref false in
  let ticker =
    Thread.create
      (fun () ->
        while not !stop do
          if !in_transfer then incr seen;
          Thread.yield ()
        done)
      ()
  in
  Thread.delay 0.01;
  (* Nothing allocates between setting the flag and the call, nor between the
     call and clearing it: without a released runtime lock the ticker could
     never see the flag set. With it, the ticker sees it as soon as the system
     schedules it during a transfer (on a loaded machine, maybe not the first). *)
  let transfers = ref 0 in
  while !seen = 0 && !transfers < 100 do
    in_transfer := true;
    M.host_to_device ~src:a ~dst:b;
    in_transfer := false;
    incr transfers;
    Thread.yield ()
  done;
  stop := true;
  Thread.join ticker;
  (* Under valgrind every thread runs in turn on valgrind's own lock, which it
     hands over when it chooses, not when ferry releases the runtime lock: there
     the test still runs both threads through the transfers (for memcheck), and
     the plain ctest "ocaml" makes the check. *)
  if Sys.getenv_opt "FERRY_OCAML_TEST_THREADS_SERIAL" = Some "1" then
    Printf.printf "  (threads serialised by the runner: the other thread ran %d times in %d transfers)\n" !seen
      !transfers
  else check (!seen > 0) "the other thread never ran during %d transfers" !transfers;
  M.free b

(* ---- the framework's own types ------------------------------------------- *)

let framework dev =
  section dev "Make_memory over a framework's types";
  let module F = Seed_signature.Framework in
  let fd = F.Device.of_ferry dev in
  let n = 512 in
  let a = filled float64 (fun _ i -> float_of_int i *. 1.5) 0 n in
  let b = F.Memory.alloc fd n float64 in
  F.Memory.host_to_device ~src:a ~dst:b;
  let back = Array1.create float64 c_layout n in
  F.Memory.device_to_host ~src:b ~dst:back;
  check (back = a) "round trip through the framework's Memory";
  (* Its streams, over its own device type. *)
  let s = F.Stream.create fd in
  let back2 = Array1.create float64 c_layout n in
  let b = F.Memory.alloc fd n float64 in
  F.Memory.host_to_device_async ~stream:(F.Stream.ferry_stream s) ~src:a ~dst:b;
  F.Memory.device_to_host_async ~stream:(F.Stream.ferry_stream s) ~src:b ~dst:back2;
  F.Stream.synchronize s;
  check (back2 = a) "round trip on the framework's stream";
  F.Stream.destroy s;
  F.Stream.destroy (F.Stream.default fd);
  F.Stream.synchronize (F.Stream.default fd);
  F.Memory.free b;
  let align = D.host_ptr_alignment dev in
  if align = 0 then
    match F.Memory.alloc_host_ptr fd a float64 with
    | Error F.Framework_sig.Unsupported -> ()
    | _ -> check false "the framework's refusal is not Unsupported"
  else if align > 8 && not (D.zero_copy dev) then begin
    let big = Ferry.aligned_array float64 ~alignment:align (2 * align) in
    match F.Memory.alloc_host_ptr fd (Array1.sub big 1 (align / 8)) float64 with
    | Error (F.Framework_sig.Misaligned al) -> check (al = align) "the framework's refusal names %d" al
    | _ -> check false "the framework's refusal is not Misaligned"
  end

(* ---- the rest of the surface --------------------------------------------- *)

let library () =
  current := "library";
  check (String.length (Ferry.version ()) >= 5) "version %S" (Ferry.version ());
  D.init ();
  let count = D.count () in
  check (List.length (D.all ()) = count) "Device.all has %d devices, count %d" (List.length (D.all ())) count;
  ignore (expect_error Ferry.No_device "Device.get count" (fun () -> D.get count));
  ignore (expect_error Ferry.No_device "Device.get (-1)" (fun () -> D.get (-1)));
  (match D.best () with
  | Some d -> check (D.id d < count) "best is device %d of %d" (D.id d) count
  | None -> check (count = 0) "best is None with %d devices" count);
  List.iteri
    (fun i d ->
      check (D.id d = i) "device %d has id %d" i (D.id d);
      check (D.total_memory d > 0) "device %d has no memory" i;
      check (List.mem (D.backend d) [ "cuda"; "opencl"; "vulkan"; "metal"; "native"; "checked" ]) "backend %S" (D.backend d);
      D.synchronize d)
    (D.all ());
  check
    (Printexc.to_string (Ferry.Error (Ferry.Size_mismatch, "x")) = "Ferry.Error(Size_mismatch, \"x\")")
    "the printer says %s" (Printexc.to_string (Ferry.Error (Ferry.Size_mismatch, "x")));
  check
    (List.map Ferry.string_of_status [ Ferry.Not_ready; Ferry.Stale_handle; Ferry.Cancelled ]
    = [ "Not_ready"; "Stale_handle"; "Cancelled" ])
    "the new statuses' names";
  ignore (expect_error Ferry.Invalid_argument "aligned_array of alignment 3" (fun () ->
      Ferry.aligned_array float32 ~alignment:3 10));
  ignore (expect_error Ferry.Invalid_argument "aligned_array of a negative length" (fun () ->
      Ferry.aligned_array float32 ~alignment:64 (-1)));
  let a = Ferry.aligned_array complex64 ~alignment:4 3 in
  check (Array1.dim a = 3) "aligned_array complex64 ~alignment:4 3 has %d elements" (Array1.dim a);
  let a = Ferry.aligned_array int8_unsigned ~alignment:4096 1 in
  check (Array1.dim a = 4096 && Array1.get a 4095 = 0) "aligned_array rounds up to the alignment, with zeros";
  let a = Ferry.aligned_array float32 ~alignment:128 0 in
  check (Array1.dim a = 0) "aligned_array of 0 elements has %d" (Array1.dim a)

(* Last: buffers made before Ferry.shutdown are stale, free of one is a no-op,
   and ferry starts again. *)
let shutdown () =
  current := "shutdown";
  let dev = D.get 0 in
  let a = Array1.create float32 c_layout 16 in
  let b = M.alloc dev 16 float32 in
  let dropped = M.alloc dev 16 float32 in
  ignore (Sys.opaque_identity dropped);
  Ferry.shutdown ();
  M.free b;
  ignore (expect_error Ferry.Stale_buffer "a transfer on a buffer from before shutdown" (fun () ->
      M.host_to_device ~src:a ~dst:b));
  ignore (expect_error Ferry.Stale_buffer "device_ptr of a buffer from before shutdown" (fun () -> M.device_ptr b));
  Gc.full_major ();
  check (D.count () > 0) "no devices after shutdown";
  let c = M.alloc (D.get 0) 16 float32 in
  M.host_to_device ~src:a ~dst:c;
  M.free c

(* FERRY_OCAML_TEST_BACKEND names the backend a run is about (the valgrind and
   fake-CUDA ctests): without a device of it the run is skipped (exit 77), or
   fails when FERRY_REQUIRE_BACKENDS lists it. Otherwise every backend that
   FERRY_REQUIRE_BACKENDS lists must have a device. *)
let required_backends devices =
  let names var =
    match Sys.getenv_opt var with
    | None -> []
    | Some s -> List.filter (fun n -> n <> "") (String.split_on_char ',' s)
  in
  let required = names "FERRY_REQUIRE_BACKENDS" in
  let present name = List.exists (fun d -> D.backend d = name) devices in
  match names "FERRY_OCAML_TEST_BACKEND" with
  | [ name ] when not (present name) ->
      if List.mem name required then begin
        Printf.printf "FAIL: no %s device, and FERRY_REQUIRE_BACKENDS requires one\n" name;
        exit 1
      end;
      Printf.printf "ferry OCaml tests: skipped: no %s device\n" name;
      exit 77
  | [ _ ] -> ()
  | _ ->
      List.iter
        (fun name ->
          current := "required backends";
          check (present name) "FERRY_REQUIRE_BACKENDS requires %s, which has no device" name)
        required

let () =
  library ();
  let devices = D.all () in
  required_backends devices;
  if devices = [] then begin
    print_endline "ferry OCaml tests: skipped: no devices (FERRY_BACKENDS?)";
    exit 77
  end;
  List.iter
    (fun dev ->
      Printf.printf "device %d: %s (%s)%s%s\n%!" (D.id dev) (D.name dev) (D.backend dev)
        (if D.zero_copy dev then ", zero-copy" else "")
        (if D.host_ptr_alignment dev > 0 then Printf.sprintf ", host pointers aligned to %d" (D.host_ptr_alignment dev)
         else "");
      every_kind dev;
      mismatches dev;
      use_after_free dev;
      zero_copy dev;
      host_ptr dev;
      custom dev;
      framework dev;
      compaction dev;
      streams dev;
      failure_at_synchronize dev;
      progress dev)
    devices;
  device_to_device devices;
  streams_across devices;
  shutdown ();
  if !failures > 0 then begin
    Printf.printf "ferry OCaml tests: %d check(s) failed\n" !failures;
    exit 1
  end;
  Printf.printf "ferry OCaml tests: all %d checks passed on %d device(s)\n" !checks (List.length devices)
