(** ferry: one memory API over every compute device of the machine (host CPU,
    CUDA GPUs, OpenCL and Vulkan devices, Apple Metal).

    [Ferry.Memory] is the [Memory] signature of a GPU framework's backend, letter
    for letter, over libferry: typed buffers, zero-copy and host-pointer buffers,
    synchronous transfers, device-to-device copies across devices and backends.
    [Ferry.Make_memory] gives the same signature over a framework's own device and
    refusal types. [Ferry.Stream], [Ferry.Event] and the [_async] transfers
    give asynchronous work on ferry's queues ([Ferry.Make_stream] over a
    framework's device type). docs/OCAML.md in the repository tells the whole story; the C
    contract behind every function is include/ferry.h. *)

(** {1 Errors} *)

(** The C library's statuses (FERRY_ERROR_..., FERRY_NOT_READY), one
    constructor each, in the C order. *)
type status =
  | Invalid_argument
  | Overflow
  | Size_mismatch
  | Kind_mismatch
  | Out_of_range
  | Stale_buffer
  | Unsupported
  | Refused
  | Out_of_memory
  | No_device
  | Backend
  | Not_ready  (** {!Event.elapsed} of events whose work has not completed *)
  | Stale_handle  (** a stream or event that was destroyed, or is from before {!shutdown} *)
  | Cancelled  (** not run: an earlier operation on the same stream failed *)

(** Every ferry failure the seed's types have no room for: the status and
    ferry's sentence about it, with the numbers (sizes, kinds, device, driver
    call and code). A printer is registered. Never [Stdlib.Out_of_memory], never
    [Failure]. *)
exception Error of status * string

(** "Size_mismatch" for [Size_mismatch]. *)
val string_of_status : status -> string

(** Why {!Memory.alloc_host_ptr} said no. *)
type host_ptr_refusal =
  | Host_ptr_unsupported  (** the device has no buffers over host memory *)
  | Host_ptr_misaligned of { alignment : int }
      (** the array's data is not aligned to [alignment] bytes *)
  | Host_ptr_bad_length of { alignment : int }
      (** the array's byte size is 0 or not a multiple of [alignment] *)
  | Host_ptr_overlap
      (** the array overlaps the array of another live host-pointer buffer *)
  | Host_ptr_driver of string  (** the driver said no: its call and code *)

(** The library's version, "MAJOR.MINOR.PATCH" (ferry_version). *)
val version : unit -> string

(** Releases every buffer and device and unloads the drivers (ferry_shutdown).
    Every buffer made before becomes stale ({!Memory.free} of one is a no-op,
    transfers raise [Error (Stale_buffer, _)]); a later call initialises ferry
    again. Must not run while another thread is inside a ferry call. *)
val shutdown : unit -> unit

(** The machine address of a Bigarray's first element, for the [_ptr]
    transfers. The caller keeps the array alive while the address is used. *)
val bigarray_address : ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> nativeint

(** [aligned_array kind ~alignment n]: a Bigarray of at least [n] elements
    whose data is aligned to [alignment] bytes (a power of two) and whose byte
    size is rounded up to a multiple of it, freed by the GC: what
    {!Memory.alloc_host_ptr} wants (pass {!Device.host_ptr_alignment}). Its
    [Array1.dim] is [n] rounded up that way; the elements past [n] are zero, the
    others uninitialised, as with [Array1.create]. Raises [Error (Invalid_argument, _)]
    for an alignment that is not a power of two or a negative [n],
    [Error (Out_of_memory, _)] when the memory cannot be had. *)
val aligned_array :
  ('a, 'b) Bigarray.kind -> alignment:int -> int -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t

(** {1 Devices} *)

module Device : sig
  (** A device, by its index. Values stay usable across {!shutdown}: they name
      the device with the same index after ferry starts again. *)
  type t

  type id = int

  (** Starts every backend (optional: every call starts ferry on first use).
      Raises [Error (Invalid_argument, _)] when FERRY_BACKENDS names a backend
      this build does not have. *)
  val init : unit -> unit

  (** Number of devices, across all backends. *)
  val count : unit -> int

  (** The device with index [i] (0 .. [count () - 1]); raises
      [Error (No_device, _)] otherwise. *)
  val get : int -> t

  (** Every device, in index order. *)
  val all : unit -> t list

  (** The first GPU if any, else the native CPU device, else the first device
      (ferry_device_best); [None] when there are no devices. *)
  val best : unit -> t option

  (** The device's index. *)
  val id : t -> id

  (** "NVIDIA H200", "cpu-haswell-... (PoCL)". *)
  val name : t -> string

  (** "cuda", "opencl", "vulkan", "metal", "native", "checked". *)
  val backend : t -> string

  (** The device computes on the host's processors. *)
  val is_cpu : t -> bool

  (** {!Memory.alloc_zero_copy} succeeds: device memory is host memory. *)
  val zero_copy : t -> bool

  (** The alignment {!Memory.alloc_host_ptr} needs of an array's data and byte
      size; 0 when the device has no host-pointer buffers. *)
  val host_ptr_alignment : t -> int

  (** Bytes of device memory (host RAM for host devices). *)
  val total_memory : t -> int

  (** Waits until the work queued on the device is complete (ferry's own
      transfers are complete on return already). Releases the runtime lock. *)
  val synchronize : t -> unit
end

(** {1 Streams and events} *)

(** A stream (a ferry queue) runs the operations submitted to it in order, and
    streams run independently of each other: a CUDA stream, an in-order OpenCL
    command queue, a chain of Vulkan submissions, a thread of ferry's on native
    and checked. The asynchronous transfers ([Memory.host_to_device_async] and
    the others) are submitted to one. A failure of submitted work raises
    {!Error} from the next [synchronize] that sees it (of the stream, or of an
    event recorded on it after the work), or from {!Stream.destroy}. *)
module Stream : sig
  type t

  (** A new stream of the device, with a native queue of its own. *)
  val create : Device.t -> t

  (** Waits for the stream's work, then releases it; later use raises
      [Error (Stale_handle, _)]. A second [destroy] is a no-op, as is [destroy]
      of a default stream. Raises {!Error} when the stream's work failed (it is
      released all the same). Releases the runtime lock. A stream the program
      drops without [destroy] is destroyed by a finaliser (which waits for its
      work and never raises). *)
  val destroy : t -> unit

  (** Waits until every operation submitted to the stream has completed; raises
      {!Error} when one of them failed. Releases the runtime lock. *)
  val synchronize : t -> unit

  (** The device's own stream: the same value every time (for one ferry
      session). The synchronous transfers wait for its work first. *)
  val default : Device.t -> t
end

(** An event captures the work submitted to a stream so far. *)
module Event : sig
  type t

  (** An event recorded nowhere yet (complete). *)
  val create : unit -> t

  (** Releases the event; a second [destroy] is a no-op. An event the program
      drops is released by a finaliser. *)
  val destroy : t -> unit

  (** [record e s] captures all the work submitted to [s] so far; recording
      again replaces the capture (on any stream of any device). *)
  val record : t -> Stream.t -> unit

  (** Waits until the captured work has completed; raises {!Error} when it
      failed. Releases the runtime lock. *)
  val synchronize : t -> unit

  (** Milliseconds from [start]'s completion to [stop]'s, both recorded on
      streams of one device and complete. [Error (Not_ready, _)] while one is
      not complete, [Error (Invalid_argument, _)] if either was never recorded
      or they were recorded on different devices. *)
  val elapsed : start:t -> stop:t -> float
end

(** {1 Memory} *)

(** How a framework's device names its ferry device. *)
module type DEVICE = sig
  type t

  val ferry_device : t -> Device.t
end

(** How a framework's refusal type is made from ferry's. *)
module type REFUSAL = sig
  type t

  val of_ferry : host_ptr_refusal -> t
end

(** The seed's Memory, over any device type that knows its ferry device and any
    refusal type: what a framework's backend instantiates with its own
    [Device.t] and its own [host_ptr_refusal], so that its Memory module is ferry
    unchanged.

    Behaviour (docs/OCAML.md has the details):
    - sizes and kinds are checked exactly: a length mismatch raises
      [Error (Size_mismatch, _)], a float32 buffer and a float64 array
      [Error (Kind_mismatch, _)]; nothing is clamped, a failed call changes
      nothing;
    - [alloc_zero_copy] returns [None] exactly where ferry says unsupported,
      [alloc_host_ptr] [Error r] exactly where ferry refuses; every other failure
      raises {!Error};
    - a zero-copy or host-pointer buffer keeps its Bigarray alive while it lives;
    - [free] twice is a no-op; a buffer that becomes unreachable without [free] is
      freed by a finaliser, which never raises;
    - transfers release the runtime lock (other threads run meanwhile) and keep
      their arrays and buffers alive across the call;
    - a buffer used after [free] raises [Error (Stale_buffer, _)]. *)
module Make_memory (D : DEVICE) (R : REFUSAL) : sig
  type 'a buffer

  val alloc : D.t -> int -> ('a, 'b) Stdlib.Bigarray.kind -> 'a buffer

  (** Allocate buffer for custom types with explicit element size in bytes *)
  val alloc_custom : D.t -> size:int -> elem_size:int -> 'a buffer

  val alloc_zero_copy :
    D.t ->
    ('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t ->
    ('a, 'b) Stdlib.Bigarray.kind ->
    'a buffer option

  val alloc_host_ptr :
    D.t ->
    ('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t ->
    ('a, 'b) Stdlib.Bigarray.kind ->
    ('a buffer, R.t) Stdlib.result

  val free : 'a buffer -> unit

  val host_to_device :
    src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

  val device_to_host :
    src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

  val host_ptr_to_device : src_ptr:nativeint -> byte_size:int -> dst:'a buffer -> unit

  val device_to_host_ptr : src:'a buffer -> dst_ptr:nativeint -> byte_size:int -> unit

  val device_to_device : src:'a buffer -> dst:'a buffer -> unit

  (** Asynchronous transfers on [stream], with the checks of the synchronous
      ones made at the call (a wrong length or kind, a freed buffer, a stream
      of another device raise before anything is submitted). They return
      without waiting for the bytes, and keep [src] and [dst] (and the arrays
      buffers are over) alive until the operation has completed, whatever the
      program drops meanwhile. The array must not be touched until then (for
      [device_to_host_async], not read either): wait with
      {!Stream.synchronize} or {!Event.synchronize}. [device_to_device_async]
      takes a stream of the source's or the destination's device. *)
  val host_to_device_async :
    stream:Stream.t -> src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

  val device_to_host_async :
    stream:Stream.t -> src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

  val device_to_device_async : stream:Stream.t -> src:'a buffer -> dst:'a buffer -> unit

  (** The element count. *)
  val size : 'a buffer -> int

  (** ferry_device_ptr: the CUdeviceptr, cl_mem, VkBuffer or id<MTLBuffer>; the
      host address on native and checked (a zero-copy buffer's is its array's). *)
  val device_ptr : 'a buffer -> nativeint

  (** Check if buffer uses zero-copy (no transfers needed) *)
  val is_zero_copy : 'a buffer -> bool
end

(** The same signature over Ferry's own types: [Make_memory] applied to the
    identity on both, [D.t = Device.t] and [R.t = host_ptr_refusal]. *)
module Memory : sig
  type 'a buffer

  val alloc : Device.t -> int -> ('a, 'b) Stdlib.Bigarray.kind -> 'a buffer

  (** Allocate buffer for custom types with explicit element size in bytes *)
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
    ('a buffer, host_ptr_refusal) Stdlib.result

  val free : 'a buffer -> unit

  val host_to_device :
    src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

  val device_to_host :
    src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

  val host_ptr_to_device : src_ptr:nativeint -> byte_size:int -> dst:'a buffer -> unit

  val device_to_host_ptr : src:'a buffer -> dst_ptr:nativeint -> byte_size:int -> unit

  val device_to_device : src:'a buffer -> dst:'a buffer -> unit

  (** Asynchronous transfers on [stream], with the checks of the synchronous
      ones made at the call (a wrong length or kind, a freed buffer, a stream
      of another device raise before anything is submitted). They return
      without waiting for the bytes, and keep [src] and [dst] (and the arrays
      buffers are over) alive until the operation has completed, whatever the
      program drops meanwhile. The array must not be touched until then (for
      [device_to_host_async], not read either): wait with
      {!Stream.synchronize} or {!Event.synchronize}. [device_to_device_async]
      takes a stream of the source's or the destination's device. *)
  val host_to_device_async :
    stream:Stream.t -> src:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> dst:'a buffer -> unit

  val device_to_host_async :
    stream:Stream.t -> src:'a buffer -> dst:('a, 'b, Stdlib.Bigarray.c_layout) Stdlib.Bigarray.Array1.t -> unit

  val device_to_device_async : stream:Stream.t -> src:'a buffer -> dst:'a buffer -> unit

  val size : 'a buffer -> int

  val device_ptr : 'a buffer -> nativeint

  (** Check if buffer uses zero-copy (no transfers needed) *)
  val is_zero_copy : 'a buffer -> bool
end

(** Streams over a framework's own device type, as {!Make_memory} is:
    [D.ferry_device] names the ferry device. [ferry_stream] is the {!Stream.t}
    the asynchronous transfers take. *)
module Make_stream (D : DEVICE) : sig
  type t

  val create : D.t -> t
  val destroy : t -> unit
  val synchronize : t -> unit
  val default : D.t -> t
  val ferry_stream : t -> Stream.t
end
