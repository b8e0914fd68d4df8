/*
 * ferry._mpi: libferry_mpi (src/mpi/ferry_mpi.c, compiled into this extension)
 * for ferry.mpi, on mpi4py's communicators and operations (mpi4py's C API).
 *
 * libferry itself is ferry._ferry's, reached through its C API (_capi.h;
 * _mpi_glue.c defines the libferry functions ferry_mpi.c calls as forwarders).
 * Every ferry_mpi_* call runs with the GIL released: a blocking receive waits
 * for another rank, and libferry may run the deleters of buffers over Python
 * memory, which take the GIL.
 *
 * The functions here take every argument, checked; ferry/mpi.py gives them
 * their defaults and documentation. docs/PYTHON.md ("MPI") is the guide.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mpi4py/mpi4py.h>

#include "_capi.h"
#include "ferry_mpi.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define CAPI ferry__py_capi

/* Runs `stmt` (ferry calls only, no Python API) with the GIL released. */
#define WITHOUT_GIL(stmt)                                                                                              \
  do {                                                                                                                 \
    Py_BEGIN_ALLOW_THREADS stmt;                                                                                       \
    Py_END_ALLOW_THREADS                                                                                               \
  } while (0)

/* Raises ferry's error of `status` with a sentence of ours (as libferry's own). */
static PyObject *raise_with(ferry_status status, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  PyOS_vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return CAPI->raise_status(CAPI->companion_fail(status, text));
}

/* An offset or byte count: a non-negative int. */
static bool parse_size(const char *fn, const char *what, Py_ssize_t value, size_t *out) {
  if (value < 0) {
    raise_with(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s %zd is negative", fn, what, value);
    return false;
  }
  *out = (size_t)value;
  return true;
}

static MPI_Comm *comm_of(PyObject *obj) { return PyMPIComm_Get(obj); }

/* A fresh status: the count 0 where ferry's call leaves it alone. */
static void status_init(MPI_Status *st) {
  memset(st, 0, sizeof *st);
  st->MPI_SOURCE = MPI_ANY_SOURCE;
  st->MPI_TAG = MPI_ANY_TAG;
  MPI_Status_set_elements_x(st, MPI_BYTE, 0);
}

/* (source, tag, count in bytes) */
static PyObject *status_tuple(const MPI_Status *st) {
  MPI_Count count = 0;
  if (MPI_Get_elements_x(st, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED) count = 0;
  return Py_BuildValue("(iiL)", st->MPI_SOURCE, st->MPI_TAG, (long long)count);
}

static PyObject *request_id(ferry_mpi_request r) { return PyLong_FromUnsignedLongLong((unsigned long long)r.id); }

static bool parse_request(PyObject *obj, ferry_mpi_request *out) {
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "a request id (int) is needed, not %.200s", Py_TYPE(obj)->tp_name);
    return false;
  }
  unsigned long long id = PyLong_AsUnsignedLongLong(obj);
  if (id == (unsigned long long)-1 && PyErr_Occurred()) return false;
  out->id = (uint64_t)id;
  return true;
}

/* The point-to-point arguments: (buf, offset, nbytes, rank, tag, comm). */
typedef struct p2p_args {
  ferry_buffer buf;
  size_t offset, bytes;
  int rank, tag;
  MPI_Comm comm;
} p2p_args;

static bool parse_p2p(const char *fn, PyObject *args, p2p_args *out) {
  PyObject *buf, *comm;
  Py_ssize_t offset, bytes;
  if (!PyArg_ParseTuple(args, "OnniiO", &buf, &offset, &bytes, &out->rank, &out->tag, &comm)) return false;
  if (CAPI->buffer_handle(buf, &out->buf) < 0) return false;
  if (!parse_size(fn, "offset", offset, &out->offset) || !parse_size(fn, "nbytes", bytes, &out->bytes)) return false;
  MPI_Comm *c = comm_of(comm);
  if (!c) return false;
  out->comm = *c;
  return true;
}

/* _send(buf, offset, nbytes, dest, tag, comm) -> None */
static PyObject *mpi_send(PyObject *m, PyObject *args) {
  (void)m;
  p2p_args a;
  if (!parse_p2p("ferry.mpi.send", args, &a)) return NULL;
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_send(a.buf, a.offset, a.bytes, a.rank, a.tag, a.comm));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  Py_RETURN_NONE;
}

/* _recv(buf, offset, nbytes, source, tag, comm) -> (source, tag, count) */
static PyObject *mpi_recv(PyObject *m, PyObject *args) {
  (void)m;
  p2p_args a;
  if (!parse_p2p("ferry.mpi.recv", args, &a)) return NULL;
  MPI_Status status;
  status_init(&status);
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_recv(a.buf, a.offset, a.bytes, a.rank, a.tag, a.comm, &status));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  return status_tuple(&status);
}

/* ferry_mpi_isend and ferry_mpi_irecv: the same arguments, a request out. */
typedef ferry_status (*p2p_start_fn)(ferry_buffer, size_t, size_t, int, int, MPI_Comm, ferry_mpi_request *);

static PyObject *p2p_start(const char *name, p2p_start_fn start, PyObject *args) {
  p2p_args a;
  if (!parse_p2p(name, args, &a)) return NULL;
  ferry_mpi_request r = {0};
  ferry_status st;
  WITHOUT_GIL(st = start(a.buf, a.offset, a.bytes, a.rank, a.tag, a.comm, &r));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  return request_id(r);
}

/* _isend(buf, offset, nbytes, dest, tag, comm) -> request id */
static PyObject *mpi_isend(PyObject *m, PyObject *args) {
  (void)m;
  return p2p_start("ferry.mpi.isend", ferry_mpi_isend, args);
}

/* _irecv(buf, offset, nbytes, source, tag, comm) -> request id */
static PyObject *mpi_irecv(PyObject *m, PyObject *args) {
  (void)m;
  return p2p_start("ferry.mpi.irecv", ferry_mpi_irecv, args);
}

/* _wait(request id) -> (source, tag, count) */
static PyObject *mpi_wait(PyObject *m, PyObject *arg) {
  (void)m;
  ferry_mpi_request r;
  if (!parse_request(arg, &r)) return NULL;
  MPI_Status status;
  status_init(&status);
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_wait(r, &status));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  return status_tuple(&status);
}

/* _test(request id) -> (source, tag, count), or None while it runs */
static PyObject *mpi_test(PyObject *m, PyObject *arg) {
  (void)m;
  ferry_mpi_request r;
  if (!parse_request(arg, &r)) return NULL;
  MPI_Status status;
  status_init(&status);
  int done = 0;
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_test(r, &done, &status));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  if (!done) Py_RETURN_NONE;
  return status_tuple(&status);
}

/* _bcast(buf, offset, nbytes, root, comm) -> None */
static PyObject *mpi_bcast(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *buf, *comm;
  Py_ssize_t offset, bytes;
  int root;
  ferry_buffer b;
  size_t off, n;
  if (!PyArg_ParseTuple(args, "OnniO", &buf, &offset, &bytes, &root, &comm)) return NULL;
  if (CAPI->buffer_handle(buf, &b) < 0) return NULL;
  if (!parse_size("ferry.mpi.bcast", "offset", offset, &off) || !parse_size("ferry.mpi.bcast", "nbytes", bytes, &n))
    return NULL;
  MPI_Comm *c = comm_of(comm);
  if (!c) return NULL;
  MPI_Comm cm = *c;
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_bcast(b, off, n, root, cm));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  Py_RETURN_NONE;
}

/* _allreduce(sendbuf, recvbuf, op, comm) -> None (recvbuf may be sendbuf) */
static PyObject *mpi_allreduce(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *send, *recv, *op, *comm;
  ferry_buffer s, r;
  if (!PyArg_ParseTuple(args, "OOOO", &send, &recv, &op, &comm)) return NULL;
  if (CAPI->buffer_handle(send, &s) < 0 || CAPI->buffer_handle(recv, &r) < 0) return NULL;
  MPI_Op *o = PyMPIOp_Get(op);
  if (!o) return NULL;
  MPI_Comm *c = comm_of(comm);
  if (!c) return NULL;
  MPI_Op mo = *o;
  MPI_Comm cm = *c;
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_allreduce(s, r, mo, cm));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  Py_RETURN_NONE;
}

/* _local_device(comm, gpu_only) -> ferry.Device */
static PyObject *mpi_local_device(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *comm;
  int gpu_only;
  if (!PyArg_ParseTuple(args, "Op", &comm, &gpu_only)) return NULL;
  MPI_Comm *c = comm_of(comm);
  if (!c) return NULL;
  MPI_Comm cm = *c;
  ferry_device *dev = NULL;
  ferry_status st;
  WITHOUT_GIL(st = ferry_mpi_local_device(cm, gpu_only != 0, &dev));
  if (st != FERRY_OK) return CAPI->raise_status(st);
  return CAPI->device_object(dev);
}

static PyMethodDef module_methods[] = {
    {"_send", mpi_send, METH_VARARGS, "_send(buf, offset, nbytes, dest, tag, comm): ferry_mpi_send."},
    {"_recv", mpi_recv, METH_VARARGS, "_recv(buf, offset, nbytes, source, tag, comm): ferry_mpi_recv."},
    {"_isend", mpi_isend, METH_VARARGS, "_isend(buf, offset, nbytes, dest, tag, comm): ferry_mpi_isend."},
    {"_irecv", mpi_irecv, METH_VARARGS, "_irecv(buf, offset, nbytes, source, tag, comm): ferry_mpi_irecv."},
    {"_wait", mpi_wait, METH_O, "_wait(request): ferry_mpi_wait."},
    {"_test", mpi_test, METH_O, "_test(request): ferry_mpi_test; None while the request runs."},
    {"_bcast", mpi_bcast, METH_VARARGS, "_bcast(buf, offset, nbytes, root, comm): ferry_mpi_bcast."},
    {"_allreduce", mpi_allreduce, METH_VARARGS, "_allreduce(sendbuf, recvbuf, op, comm): ferry_mpi_allreduce."},
    {"_local_device", mpi_local_device, METH_VARARGS, "_local_device(comm, gpu_only): ferry_mpi_local_device."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mpi_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferry._mpi",
    .m_doc = "libferry_mpi for ferry.mpi (import ferry.mpi, not this).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__mpi(void) {
  if (import_mpi4py() < 0) return NULL;
  const ferry_py_capi *capi = PyCapsule_Import(FERRY_PY_CAPI_NAME, 0);
  if (!capi) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_ImportError,
                      "ferry._mpi: this ferry._ferry has no C API (it was built against an installed libferry); "
                      "build the package from the ferry repository's sources to use ferry.mpi");
    }
    return NULL;
  }
  if (capi->version != FERRY_PY_CAPI_VERSION) {
    PyErr_Format(PyExc_ImportError,
                 "ferry._mpi: ferry._ferry's C API is version %d, this ferry._mpi needs version %d: the two were "
                 "built apart; reinstall the ferry package",
                 capi->version, FERRY_PY_CAPI_VERSION);
    return NULL;
  }
  ferry__py_capi = capi;
  return PyModule_Create(&mpi_module);
}
