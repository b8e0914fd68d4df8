(* A compile-time check: the seed's Memory signature (shared/seed/, the Memory
   module of a GPU framework's backend), copied letter for letter, ascribed to
   Ferry.Memory and to a Make_memory instance over a framework's own device
   record and refusal variant. If this file compiles, a framework's backend can
   take ferry as its Memory module unchanged. The seed names the framework's
   Device and Spoc_framework.Framework_sig; the functor below supplies them. *)

module Seed
    (Device : sig
      type t
    end)
    (Spoc_framework : sig
      module Framework_sig : sig
        type host_ptr_refusal
      end
    end) =
struct
  module type MEMORY = sig
    type 'a buffer

    val alloc : Device.t -> int -> ('a, 'b) Stdlib.Bigarray.kind -> 'a buffer

    (* Allocate buffer for custom types with explicit element size in bytes *)
    val alloc_custom : Device.t -> size:int -> elem_size:int -> 'a buffer

    val alloc_zero_copy :
      Device.t ->
      ('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t ->
      ('a, 'b) Stdlib.Bigarray.kind ->
      'a buffer option

    val alloc_host_ptr :
      Device.t ->
      ('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t ->
      ('a, 'b) Stdlib.Bigarray.kind ->
      ('a buffer, Spoc_framework.Framework_sig.host_ptr_refusal) Stdlib.result

    val free : 'a buffer -> unit

    (* Synchronous Transfers *)

    val host_to_device :
      src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

    val device_to_host :
      src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

    val host_ptr_to_device : src_ptr:nativeint -> byte_size:int -> dst:'a buffer -> unit

    val device_to_host_ptr : src:'a buffer -> dst_ptr:nativeint -> byte_size:int -> unit

    val device_to_device : src:'a buffer -> dst:'a buffer -> unit

    (* Buffer Info *)

    val size : 'a buffer -> int

    val device_ptr : 'a buffer -> nativeint

    val is_zero_copy : 'a buffer -> bool
  end
end

(* Ferry's own Memory, over Ferry.Device and Ferry.host_ptr_refusal. *)
module Ferry_seed =
  Seed
    (Ferry.Device)
    (struct
      module Framework_sig = struct
        type host_ptr_refusal = Ferry.host_ptr_refusal
      end
    end)

module _ : Ferry_seed.MEMORY = Ferry.Memory

(* The framework's Stream and Event, and the asynchronous transfers beside
   Memory's synchronous ones, letter for letter as docs/OCAML.md gives them. *)
module Async
    (Device : sig
      type t
    end)
    (Stream_ty : sig
      type t
    end) =
struct
  module type STREAM = sig
    type t

    val create : Device.t -> t
    val destroy : t -> unit
    val synchronize : t -> unit
    val default : Device.t -> t
  end

  module type EVENT = sig
    type t

    val create : unit -> t
    val destroy : t -> unit
    val record : t -> Stream_ty.t -> unit
    val synchronize : t -> unit
    val elapsed : start:t -> stop:t -> float
  end

  module type MEMORY_ASYNC = sig
    type 'a buffer

    val host_to_device_async :
      stream:Stream_ty.t -> src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

    val device_to_host_async :
      stream:Stream_ty.t -> src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

    val device_to_device_async : stream:Stream_ty.t -> src:'a buffer -> dst:'a buffer -> unit
  end

  module type MAKE_STREAM = sig
    include STREAM

    val ferry_stream : t -> Stream_ty.t
  end
end

module Ferry_async = Async (Ferry.Device) (Ferry.Stream)

module _ : Ferry_async.STREAM with type t = Ferry.Stream.t = Ferry.Stream
module _ : Ferry_async.EVENT = Ferry.Event
module _ : Ferry_async.MEMORY_ASYNC = Ferry.Memory

(* A framework's backend: its own device record and its own refusal variant. *)
module Framework = struct
  module Device = struct
    type t = { id : int; name : string; ferry : Ferry.Device.t }

    let of_ferry ferry = { id = Ferry.Device.id ferry; name = Ferry.Device.name ferry; ferry }
    let ferry_device d = d.ferry
  end

  module Framework_sig = struct
    type host_ptr_refusal =
      | Unsupported
      | Misaligned of int
      | Bad_length of int
      | Overlap
      | Driver_error of string

    let of_ferry : Ferry.host_ptr_refusal -> host_ptr_refusal = function
      | Ferry.Host_ptr_unsupported -> Unsupported
      | Ferry.Host_ptr_misaligned { alignment } -> Misaligned alignment
      | Ferry.Host_ptr_bad_length { alignment } -> Bad_length alignment
      | Ferry.Host_ptr_overlap -> Overlap
      | Ferry.Host_ptr_driver text -> Driver_error text
  end

  module Memory =
    Ferry.Make_memory
      (Device)
      (struct
        type t = Framework_sig.host_ptr_refusal

        let of_ferry = Framework_sig.of_ferry
      end)

  module Seed_here =
    Seed
      (Device)
      (struct
        module Framework_sig = Framework_sig
      end)

  module _ : Seed_here.MEMORY = Memory

  module Stream = Ferry.Make_stream (Device)
  module Async_here = Async (Device) (Ferry.Stream)

  module _ : Async_here.MAKE_STREAM = Stream
  module _ : Async_here.MEMORY_ASYNC = Memory
end
