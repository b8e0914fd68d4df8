(* The OCaml side of the binding: the types, the buffer record and its
   finaliser. Every check of sizes and kinds is ferry's own (the stubs hand it
   the Bigarray's data, length and kind as they are); this file adds only what
   the C library cannot know: that an OCaml value was freed, or belongs to a
   ferry session that Ferry.shutdown ended. *)

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
  | Not_ready
  | Stale_handle
  | Cancelled

(* The stubs raise it by this name, with the status as FERRY_ERROR_... - 1. *)
exception Error of status * string

let () = Callback.register_exception "ferry.error" (Error (Backend, ""))

let string_of_status = function
  | Invalid_argument -> "Invalid_argument"
  | Overflow -> "Overflow"
  | Size_mismatch -> "Size_mismatch"
  | Kind_mismatch -> "Kind_mismatch"
  | Out_of_range -> "Out_of_range"
  | Stale_buffer -> "Stale_buffer"
  | Unsupported -> "Unsupported"
  | Refused -> "Refused"
  | Out_of_memory -> "Out_of_memory"
  | No_device -> "No_device"
  | Backend -> "Backend"
  | Not_ready -> "Not_ready"
  | Stale_handle -> "Stale_handle"
  | Cancelled -> "Cancelled"

let () =
  Printexc.register_printer (function
    | Error (s, text) -> Some (Printf.sprintf "Ferry.Error(%s, %S)" (string_of_status s) text)
    | _ -> None)

let fail status fmt = Printf.ksprintf (fun text -> raise (Error (status, text))) fmt

type host_ptr_refusal =
  | Host_ptr_unsupported
  | Host_ptr_misaligned of { alignment : int }
  | Host_ptr_bad_length of { alignment : int }
  | Host_ptr_overlap
  | Host_ptr_driver of string

external version : unit -> string = "ferry_ml_version"
external c_shutdown : unit -> unit = "ferry_ml_shutdown"

external bigarray_address : ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> nativeint
  = "ferry_ml_bigarray_address"

external aligned_array :
  ('a, 'b) Bigarray.kind -> alignment:int -> int -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t
  = "ferry_ml_aligned_array"

(* Ferry.shutdown releases every buffer in C; buffers made before it belong to
   an ended session, and freeing one must not start ferry again just to hear
   that its handle is stale. *)
let session = ref 0

let shutdown () =
  incr session;
  c_shutdown ()

module Device = struct
  (* The device's index: ferry_device pointers end with ferry_shutdown, indices
     do not. *)
  type t = int
  type id = int

  (* What ferry_device_info says, as the stub returns it. *)
  type info = {
    name : string;
    backend : string;
    is_cpu : bool;
    zero_copy : bool;
    host_ptr_alignment : int; (* 0 without host-pointer buffers *)
    total_memory : int;
  }

  external init : unit -> unit = "ferry_ml_init"
  external count : unit -> int = "ferry_ml_device_count"
  external get : int -> t = "ferry_ml_device_get"
  external best_index : unit -> int = "ferry_ml_device_best"
  external info : t -> info = "ferry_ml_device_info"
  external synchronize : t -> unit = "ferry_ml_device_synchronize"

  let all () = List.init (count ()) get
  let best () = match best_index () with -1 -> None | i -> Some i
  let id d = d
  let name d = (info d).name
  let backend d = (info d).backend
  let is_cpu d = (info d).is_cpu
  let zero_copy d = (info d).zero_copy
  let host_ptr_alignment d = (info d).host_ptr_alignment
  let total_memory d = (info d).total_memory
end

module type DEVICE = sig
  type t

  val ferry_device : t -> Device.t
end

module type REFUSAL = sig
  type t

  val of_ferry : host_ptr_refusal -> t
end

(* ---- streams and events -------------------------------------------------- *)

(* Whatever an asynchronous operation must keep alive until it has completed:
   its Bigarray and its buffer record (which references the array a zero-copy or
   host-pointer buffer is over). *)
type root = Root : 'a -> root

(* A stream's pending roots, newest first: strictly decreasing [seq]. A node is
   added right after its operation was submitted, and dropped only by a call
   that saw every operation submitted before it complete (a synchronize of the
   stream, of an event recorded on it, its destroy, its finaliser). *)
type cell = Nil | Cell of node
and node = { mutable seq : int; root : root; mutable next : cell }

type stream = {
  qid : int64; (* field 0: the ferry_queue handle, read by the stubs *)
  is_default : bool;
  stream_session : int;
  mutable destroyed : bool;
  mutable next_seq : int; (* the seq of the next operation's node *)
  mutable pending : cell;
}

module Stream = struct
  type t = stream

  external c_create : Device.t -> int64 = "ferry_ml_queue_create"
  external c_default : Device.t -> int64 = "ferry_ml_queue_default"
  external c_destroy : t -> unit = "ferry_ml_queue_destroy"
  external c_destroy_quietly : t -> unit = "ferry_ml_queue_destroy_quietly"
  external c_synchronize : t -> unit = "ferry_ml_queue_synchronize"
  external c_synchronize_quietly : t -> unit = "ferry_ml_queue_synchronize_quietly"

  let live s = (not s.destroyed) && s.stream_session = !session

  let check_live fn s =
    if s.destroyed then fail Stale_handle "%s: the stream (queue %Lu) was destroyed" fn s.qid
    else if s.stream_session <> !session then
      fail Stale_handle "%s: the stream (queue %Lu) was released by Ferry.shutdown" fn s.qid

  (* Roots [root] on [s]; called after the submission returned. Both blocks are
     allocated first; what follows allocates nothing and calls nothing, so no
     other thread runs in the middle of it. *)
  let keep s root =
    let n = { seq = 0; root; next = Nil } in
    let c = Cell n in
    n.seq <- s.next_seq;
    s.next_seq <- n.seq + 1;
    n.next <- s.pending;
    s.pending <- c

  (* Drops the roots of the operations numbered below [upto], which a call that
     read [upto] before it started has seen complete. Nodes added meanwhile sit
     in front and are kept. *)
  let release s upto =
    match s.pending with
    | Nil -> ()
    | Cell n when n.seq < upto -> s.pending <- Nil
    | Cell n ->
        let rec cut n =
          match n.next with Nil -> () | Cell m -> if m.seq < upto then n.next <- Nil else cut m
        in
        cut n

  (* A stream dropped by the program: ferry_queue_destroy waits for its work,
     and only then are its roots let go (Gc.finalise keeps the record, and so
     its roots, alive while this runs). A default stream is not destroyed; its
     work is waited for when something is still rooted. Never raises. *)
  let finalise s =
    if live s then begin
      if not s.is_default then begin
        s.destroyed <- true;
        try c_destroy_quietly s with _ -> ()
      end
      else match s.pending with Nil -> () | Cell _ -> ( try c_synchronize_quietly s with _ -> ())
    end;
    s.pending <- Nil

  let make qid ~is_default =
    let s = { qid; is_default; stream_session = !session; destroyed = false; next_seq = 0; pending = Nil } in
    Gc.finalise finalise s;
    s

  let create dev = make (c_create dev) ~is_default:false

  (* One value per device and session, as the C handle is the same every time. *)
  let defaults : (Device.t, t) Hashtbl.t = Hashtbl.create 8

  let default dev =
    match Hashtbl.find_opt defaults dev with
    | Some s when s.stream_session = !session -> s
    | _ ->
        let s = make (c_default dev) ~is_default:true in
        Hashtbl.replace defaults dev s;
        s

  (* Waited for: its work, failed or not (a stale handle was not waited for). *)
  let waited = function Error ((Stale_handle | Invalid_argument), _) -> false | _ -> true

  let synchronize s =
    check_live "Stream.synchronize" s;
    let upto = s.next_seq in
    match c_synchronize s with
    | () -> release s upto
    | exception e ->
        if waited e then release s upto;
        raise e

  let destroy s =
    if (not s.is_default) && live s then begin
      s.destroyed <- true;
      let upto = s.next_seq in
      match c_destroy s with
      | () -> release s upto
      | exception e ->
          release s upto;
          raise e
    end
end

module Event = struct
  type t = {
    eid : int64; (* field 0: the ferry_event handle, read by the stubs *)
    event_session : int;
    mutable event_destroyed : bool;
    mutable recorded : (stream * int) option; (* the stream, and the seq of its next operation then *)
  }

  external c_create : unit -> int64 = "ferry_ml_event_create"
  external c_destroy : t -> unit = "ferry_ml_event_destroy"
  external c_destroy_quietly : t -> unit = "ferry_ml_event_destroy_quietly"
  external c_record : t -> stream -> unit = "ferry_ml_event_record"
  external c_synchronize : t -> unit = "ferry_ml_event_synchronize"
  external c_elapsed : t -> t -> float = "ferry_ml_event_elapsed"

  let live e = (not e.event_destroyed) && e.event_session = !session

  let check_live fn e =
    if e.event_destroyed then fail Stale_handle "%s: the event (handle %Lu) was destroyed" fn e.eid
    else if e.event_session <> !session then
      fail Stale_handle "%s: the event (handle %Lu) was released by Ferry.shutdown" fn e.eid

  let finalise e =
    if live e then begin
      e.event_destroyed <- true;
      try c_destroy_quietly e with _ -> ()
    end

  let create () =
    let e = { eid = c_create (); event_session = !session; event_destroyed = false; recorded = None } in
    Gc.finalise finalise e;
    e

  let destroy e =
    if live e then begin
      e.event_destroyed <- true;
      e.recorded <- None;
      c_destroy e
    end

  let record e s =
    check_live "Event.record" e;
    Stream.check_live "Event.record" s;
    let upto = s.next_seq in
    c_record e s;
    e.recorded <- Some (s, upto)

  (* Once the capture has completed, the roots of the operations it covers go;
     if the event was recorded again meanwhile, nothing is released. *)
  let synchronize e =
    check_live "Event.synchronize" e;
    let r = e.recorded in
    c_synchronize e;
    match r with Some (s, upto) when e.recorded == r -> Stream.release s upto | _ -> ()

  let elapsed ~start ~stop =
    check_live "Event.elapsed" start;
    check_live "Event.elapsed" stop;
    c_elapsed start stop
end

(* One implementation, over Ferry's own types; Make_memory and Memory are thin
   views of it. *)
module Buffer = struct
  (* What a buffer keeps alive: the array a zero-copy or host-pointer buffer is
     over. *)
  type keep = Keep_nothing | Keep : (_, _, _) Bigarray.Array1.t -> keep

  (* The stubs read [id] as field 0 and [host_memory] as field 1: keep them
     first. The record is what the finaliser is attached to, and it references
     the array, so the array lives at least until the finaliser has released
     the buffer (Gc.finalise keeps the value and everything it references alive
     while the finaliser runs). *)
  type 'a t = {
    id : int64; (* the ferry_buffer handle *)
    host_memory : bool; (* its device's memory is host memory (native, checked) *)
    length : int;
    session : int;
    mutable freed : bool;
    mutable keep : keep;
  }

  (* The stubs take the buffer record (not only its handle) so that the record,
     and so the array it keeps, is a GC root for the whole call. *)
  external c_alloc : Device.t -> int -> ('a, 'b) Bigarray.kind -> int64 = "ferry_ml_alloc"
  external c_alloc_custom : Device.t -> int -> int -> int64 = "ferry_ml_alloc_custom"

  external c_alloc_zero_copy :
    Device.t -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> ('a, 'b) Bigarray.kind -> int64 option
    = "ferry_ml_alloc_zero_copy"

  (* Made id | Refused (FERRY_REFUSAL_..., alignment, sentence) *)
  type host_ptr_result = Made of int64 | Refused of int * int * string [@@warning "-37"] (* built by the stub *)

  external c_alloc_host_ptr :
    Device.t -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> ('a, 'b) Bigarray.kind -> host_ptr_result
    = "ferry_ml_alloc_host_ptr"

  external c_free : 'a t -> unit = "ferry_ml_free"
  external c_free_quietly : 'a t -> unit = "ferry_ml_free_quietly"

  external host_to_device : src:('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> dst:'a t -> unit
    = "ferry_ml_host_to_device"

  external device_to_host : src:'a t -> dst:('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> unit
    = "ferry_ml_device_to_host"

  external host_ptr_to_device : src_ptr:nativeint -> byte_size:int -> dst:'a t -> unit
    = "ferry_ml_host_ptr_to_device"

  external device_to_host_ptr : src:'a t -> dst_ptr:nativeint -> byte_size:int -> unit
    = "ferry_ml_device_to_host_ptr"

  external device_to_device : src:'a t -> dst:'a t -> unit = "ferry_ml_device_to_device"

  (* Submit, after the checks of the synchronous transfers (in the stubs, which
     raise before anything is submitted); the caller roots the arguments. *)
  external c_write_async : stream -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> 'a t -> unit
    = "ferry_ml_write_async"

  external c_read_async : stream -> 'a t -> ('a, 'b, Bigarray.c_layout) Bigarray.Array1.t -> unit
    = "ferry_ml_read_async"

  external c_copy_async : stream -> 'a t -> 'a t -> unit = "ferry_ml_copy_async"

  (* The arguments are live values of these functions until [keep] has rooted
     them on the stream. *)
  let host_to_device_async ~stream ~src ~dst =
    Stream.check_live "Memory.host_to_device_async" stream;
    c_write_async stream src dst;
    Stream.keep stream (Root (src, dst))

  let device_to_host_async ~stream ~src ~dst =
    Stream.check_live "Memory.device_to_host_async" stream;
    c_read_async stream src dst;
    Stream.keep stream (Root (src, dst))

  let device_to_device_async ~stream ~src ~dst =
    Stream.check_live "Memory.device_to_device_async" stream;
    c_copy_async stream src dst;
    Stream.keep stream (Root (src, dst))
  external c_device_ptr : 'a t -> nativeint = "ferry_ml_device_ptr"
  external c_is_zero_copy : 'a t -> bool = "ferry_ml_is_zero_copy"

  (* Runs from the GC when a buffer becomes unreachable without [free]. It
     never raises: the stub reports nothing, and an exception from a signal
     handler while the runtime lock is released is dropped here. *)
  let finalise b =
    if (not b.freed) && b.session = !session then begin
      b.freed <- true;
      (try c_free_quietly b with _ -> ());
      b.keep <- Keep_nothing
    end

  external device_memory_is_host : Device.t -> bool = "ferry_ml_device_memory_is_host"

  (* Called right after the C allocation: nothing that can fail runs between
     it and the finaliser's registration (host_memory is asked before). *)
  let make ~host_memory id length keep =
    let b = { id; host_memory; length; session = !session; freed = false; keep } in
    Gc.finalise finalise b;
    b

  let alloc dev n kind =
    if n < 0 then fail Invalid_argument "Memory.alloc: length %d is negative" n;
    let host_memory = device_memory_is_host dev in
    make ~host_memory (c_alloc dev n kind) n Keep_nothing

  let alloc_custom dev ~size ~elem_size =
    if size < 0 then fail Invalid_argument "Memory.alloc_custom: size %d is negative" size;
    if elem_size <= 0 then
      fail Invalid_argument "Memory.alloc_custom: elem_size %d is not a positive byte count" elem_size;
    let host_memory = device_memory_is_host dev in
    make ~host_memory (c_alloc_custom dev size elem_size) size Keep_nothing

  let alloc_zero_copy dev array kind =
    let host_memory = device_memory_is_host dev in
    match c_alloc_zero_copy dev array kind with
    | None -> None
    | Some id -> Some (make ~host_memory id (Bigarray.Array1.dim array) (Keep array))

  let alloc_host_ptr dev array kind =
    let host_memory = device_memory_is_host dev in
    match c_alloc_host_ptr dev array kind with
    | Made id -> Ok (make ~host_memory id (Bigarray.Array1.dim array) (Keep array))
    | Refused (why, alignment, text) ->
        Error
          (match why with
          | 1 -> Host_ptr_unsupported
          | 2 -> Host_ptr_misaligned { alignment }
          | 3 -> Host_ptr_bad_length { alignment }
          | 4 -> Host_ptr_overlap
          | _ -> Host_ptr_driver text)

  let free b =
    if (not b.freed) && b.session = !session then begin
      b.freed <- true;
      (* The array is let go only after ferry_free returned: freeing a
         host-pointer buffer hands the array back to the host first. *)
      match c_free b with
      | () -> b.keep <- Keep_nothing
      | exception e ->
          b.keep <- Keep_nothing;
          raise e
    end

  let size b = b.length

  let check_live fn b =
    if b.freed then fail Stale_buffer "Memory.%s: the buffer (handle %Lu) was freed" fn b.id
    else if b.session <> !session then
      fail Stale_buffer "Memory.%s: the buffer (handle %Lu) was released by Ferry.shutdown" fn b.id

  let device_ptr b =
    check_live "device_ptr" b;
    c_device_ptr b

  let is_zero_copy b =
    check_live "is_zero_copy" b;
    c_is_zero_copy b
end

module Make_memory (D : DEVICE) (R : REFUSAL) = struct
  type 'a buffer = 'a Buffer.t

  let alloc d n kind = Buffer.alloc (D.ferry_device d) n kind
  let alloc_custom d ~size ~elem_size = Buffer.alloc_custom (D.ferry_device d) ~size ~elem_size
  let alloc_zero_copy d array kind = Buffer.alloc_zero_copy (D.ferry_device d) array kind

  let alloc_host_ptr d array kind =
    match Buffer.alloc_host_ptr (D.ferry_device d) array kind with
    | Ok b -> Ok b
    | Error r -> Error (R.of_ferry r)

  let free = Buffer.free
  let host_to_device = Buffer.host_to_device
  let device_to_host = Buffer.device_to_host
  let host_ptr_to_device = Buffer.host_ptr_to_device
  let device_to_host_ptr = Buffer.device_to_host_ptr
  let device_to_device = Buffer.device_to_device
  let host_to_device_async = Buffer.host_to_device_async
  let device_to_host_async = Buffer.device_to_host_async
  let device_to_device_async = Buffer.device_to_device_async
  let size = Buffer.size
  let device_ptr = Buffer.device_ptr
  let is_zero_copy = Buffer.is_zero_copy
end

module Make_stream (D : DEVICE) = struct
  type t = Stream.t

  let create d = Stream.create (D.ferry_device d)
  let destroy = Stream.destroy
  let synchronize = Stream.synchronize
  let default d = Stream.default (D.ferry_device d)
  let ferry_stream s = s
end

(* Make_memory applied to the identity on both, written out so that calls to
   Memory are direct calls to the stubs (a functor's result is reached through
   closures). *)
module Memory = struct
  type 'a buffer = 'a Buffer.t

  let alloc = Buffer.alloc
  let alloc_custom = Buffer.alloc_custom
  let alloc_zero_copy = Buffer.alloc_zero_copy
  let alloc_host_ptr = Buffer.alloc_host_ptr
  let free = Buffer.free
  let host_to_device = Buffer.host_to_device
  let device_to_host = Buffer.device_to_host
  let host_ptr_to_device = Buffer.host_ptr_to_device
  let device_to_host_ptr = Buffer.device_to_host_ptr
  let device_to_device = Buffer.device_to_device
  let host_to_device_async = Buffer.host_to_device_async
  let device_to_host_async = Buffer.device_to_host_async
  let device_to_device_async = Buffer.device_to_device_async
  let size = Buffer.size
  let device_ptr = Buffer.device_ptr
  let is_zero_copy = Buffer.is_zero_copy
end
