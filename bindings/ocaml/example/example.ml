(* A float32 array to the best device and back. *)
open Bigarray

let () =
  let dev = Option.get (Ferry.Device.best ()) in
  let a = Array1.init float32 c_layout 1024 float_of_int in
  let b = Ferry.Memory.alloc dev 1024 float32 in
  Ferry.Memory.host_to_device ~src:a ~dst:b;
  let back = Array1.create float32 c_layout 1024 in
  Ferry.Memory.device_to_host ~src:b ~dst:back;
  Ferry.Memory.free b;
  Printf.printf "ferry %s, %s: %s\n" (Ferry.version ()) (Ferry.Device.name dev)
    (if a = back then "round trip ok" else "round trip FAILED");
  if a <> back then exit 1
