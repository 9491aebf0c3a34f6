/* The per-token read of a stream, compiled: one recvmsg, its kernel receive stamp, and the check
 * that the read is one HTTP chunk holding one token event of the stream's learnt template.
 *
 * Why: at one read per token, a client's CPU per request is its cost per read. In Python that
 * read is the event loop's callback, socket.recvmsg_into (argument parsing, an ancillary list of
 * tuples, bytes objects), two clock calls, a struct unpack, a copy of the data, the chunk framing
 * and the template comparison: about 5 us, as much again as the system call itself. Here it is a
 * single C call that, for the usual read, allocates one float and appends it to the record's
 * lists; every other read is handed back to Python exactly as wireclock.StampedReader.read
 * returns it, and parsed there.
 *
 * Exactly the arithmetic of wireclock.StampedReader.read (the stamp's age at the moment of the
 * read, taken on CLOCK_REALTIME, subtracted from CLOCK_MONOTONIC, perf_counter's clock on Linux)
 * and of client.StreamRecorder.take_frame (tests/benchmarks/harness/test_framereader.py holds the
 * two to the same record, time for time). Linux only: the module is optional and kvselect falls
 * back to the Python read path where it is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define READ_BUFFER_SIZE (256 * 1024)
#define MAX_PLAUSIBLE_AGE_S 60.0

/* One buffer for every reader: each read is copied out or consumed before the next, and the GIL is
 * held across the call, so readers in several threads' event loops never share it at once. */
static char read_buffer[READ_BUFFER_SIZE];
static PyObject *one_token; /* the int 1, appended to chunk_tokens */

typedef struct {
    PyObject_HEAD
    int fd;
    PyObject *prefix; /* bytes: the template's bytes before the content string; NULL when disarmed */
    PyObject *suffix; /* bytes after the string's closing quote */
    PyObject *times;  /* the record's chunk_times list */
    PyObject *tokens; /* the record's chunk_tokens list */
    double last_arrival;
    long long stamped_reads;
    long long unstamped_reads;
    long long frames_taken;
} Reader;

static double
clock_seconds(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/* Whether the read is exactly one chunk ("<hex>\r\n" data "\r\n") whose data is one event of the
 * template with a non-empty plain string: client.StreamRecorder.take_frame and _one_token. */
static int
is_template_token(Reader *self, const char *data, Py_ssize_t size)
{
    Py_ssize_t line_end = -1, chunk = 0, start, end, first, last, prefix_size, suffix_size;
    for (Py_ssize_t i = 0; i < 9 && i + 1 < size; i++) {
        if (data[i] == '\r' && data[i + 1] == '\n') {
            line_end = i;
            break;
        }
    }
    if (line_end <= 0) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < line_end; i++) {
        char c = data[i];
        int digit = (c >= '0' && c <= '9') ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
        if (digit < 0) {
            return 0; /* a chunk extension or anything odd: the Python parser decides */
        }
        chunk = chunk * 16 + digit;
    }
    start = line_end + 2;
    end = start + chunk;
    if (size != end + 2 || data[end] != '\r' || data[end + 1] != '\n') {
        return 0;
    }
    prefix_size = PyBytes_GET_SIZE(self->prefix);
    suffix_size = PyBytes_GET_SIZE(self->suffix);
    first = start + prefix_size;
    last = end - suffix_size - 1;
    return last - first >= 2 && memcmp(data + start, PyBytes_AS_STRING(self->prefix), prefix_size) == 0 &&
           memcmp(data + end - suffix_size, PyBytes_AS_STRING(self->suffix), suffix_size) == 0 &&
           data[first] == '"' && data[last] == '"' && data[last - 1] != '\\' &&
           memchr(data + first + 1, '"', last - first - 1) == NULL;
}

static void
disarm(Reader *self)
{
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->suffix);
    Py_CLEAR(self->times);
    Py_CLEAR(self->tokens);
}

static PyObject *
Reader_take(Reader *self, PyObject *Py_UNUSED(ignored))
{
    union {
        char space[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec vector = {read_buffer, READ_BUFFER_SIZE};
    struct msghdr message;
    memset(&message, 0, sizeof(message));
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof(control.space);

    ssize_t size = recvmsg(self->fd, &message, 0);
    if (size < 0) {
        return PyErr_SetFromErrno(PyExc_OSError); /* EAGAIN becomes BlockingIOError, as socket's does */
    }
    double now = clock_seconds(CLOCK_MONOTONIC);
    double arrival = now;
    int stamped = 0;
    for (struct cmsghdr *item = CMSG_FIRSTHDR(&message); item != NULL; item = CMSG_NXTHDR(&message, item)) {
        if (item->cmsg_level == SOL_SOCKET && item->cmsg_type == SCM_TIMESTAMPNS &&
            item->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(item), sizeof(stamp));
            double age = clock_seconds(CLOCK_REALTIME) - ((double)stamp.tv_sec + (double)stamp.tv_nsec * 1e-9);
            if (age >= -0.001 && age <= MAX_PLAUSIBLE_AGE_S) {
                arrival = now - (age > 0.0 ? age : 0.0);
                stamped = 1;
            }
            break;
        }
    }
    if (size > 0) {
        if (stamped) {
            self->stamped_reads++;
        }
        else {
            self->unstamped_reads++;
        }
    }
    if (size > 0 && self->prefix != NULL && is_template_token(self, read_buffer, size)) {
        PyObject *time = PyFloat_FromDouble(arrival);
        if (time == NULL) {
            return NULL;
        }
        int failed = PyList_Append(self->times, time) < 0 || PyList_Append(self->tokens, one_token) < 0;
        Py_DECREF(time);
        if (failed) {
            return NULL;
        }
        self->last_arrival = arrival;
        self->frames_taken++;
        Py_RETURN_NONE;
    }
    if (size > 0) {
        self->last_arrival = arrival;
    }
    PyObject *data = PyBytes_FromStringAndSize(read_buffer, size);
    if (data == NULL) {
        return NULL;
    }
    if (stamped) {
        return Py_BuildValue("(Ndd)", data, now, arrival);
    }
    return Py_BuildValue("(NdO)", data, now, Py_None);
}

static PyObject *
Reader_arm(Reader *self, PyObject *args)
{
    PyObject *prefix, *suffix, *times, *tokens;
    if (!PyArg_ParseTuple(args, "SSO!O!:arm", &prefix, &suffix, &PyList_Type, &times, &PyList_Type, &tokens)) {
        return NULL;
    }
    disarm(self);
    Py_INCREF(prefix);
    Py_INCREF(suffix);
    Py_INCREF(times);
    Py_INCREF(tokens);
    self->prefix = prefix;
    self->suffix = suffix;
    self->times = times;
    self->tokens = tokens;
    Py_RETURN_NONE;
}

static PyObject *
Reader_disarm(Reader *self, PyObject *Py_UNUSED(ignored))
{
    disarm(self);
    Py_RETURN_NONE;
}

static int
Reader_init(Reader *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"fd", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i:Reader", keywords, &self->fd)) {
        return -1;
    }
    return 0;
}

static void
Reader_dealloc(Reader *self)
{
    disarm(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Reader_methods[] = {
    {"take", (PyCFunction)Reader_take, METH_NOARGS,
     "One read: None when it was one template token event (its arrival appended to the armed lists), "
     "else (data, perf_counter time of the read, kernel-stamped arrival or None); b'' at end of stream."},
    {"arm", (PyCFunction)Reader_arm, METH_VARARGS,
     "arm(prefix, suffix, chunk_times, chunk_tokens): count reads of this template's token events in C."},
    {"disarm", (PyCFunction)Reader_disarm, METH_NOARGS, "Hand every read back to Python."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Reader_members[] = {
    {"fd", T_INT, offsetof(Reader, fd), READONLY, "the socket's file descriptor"},
    {"last_arrival", T_DOUBLE, offsetof(Reader, last_arrival), READONLY, "arrival of the last non-empty read"},
    {"stamped_reads", T_LONGLONG, offsetof(Reader, stamped_reads), READONLY, "reads timed by the kernel"},
    {"unstamped_reads", T_LONGLONG, offsetof(Reader, unstamped_reads), READONLY, "reads timed in user space"},
    {"frames_taken", T_LONGLONG, offsetof(Reader, frames_taken), READONLY, "token events counted in C"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "benchmarks.harness.framereader.Reader",
    .tp_doc = "Reader(fd): a stream socket's reads with their kernel receive stamps.",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
    .tp_members = Reader_members,
};

static struct PyModuleDef framereader_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "benchmarks.harness.framereader",
    .m_doc = "The per-token stream read in C (see framereader.c).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit_framereader(void)
{
    if (PyType_Ready(&ReaderType) < 0) {
        return NULL;
    }
    one_token = PyLong_FromLong(1);
    if (one_token == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&framereader_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(module, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
