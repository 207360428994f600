/* fusec's warm-call path in C: what a prepared call does, without the interpreter.
 *
 * A FastCall holds one prepared call (fusec/runtime/prepared.py): the
 * signature of the device arrays it was worked out for, the names of the
 * scalars, how to allocate the outputs, and each kernel's parameters packed
 * once. Called with the keyword arguments of a program call, it checks that
 * they are the same arrays (the same signature, in the same CUDA context),
 * and, for a call prepared with out= arrays, that its out= arrays are those
 * (checked alike; their addresses are packed, and they are its results),
 * reads the scalars, allocates the other outputs, writes the changing parameters
 * into a copy of each kernel's buffer and launches. A call keeps its values on
 * the stack: where it runs Python code (a signer, an allocator) another thread
 * may call the same FastCall meanwhile. It returns None, having launched
 * nothing, whenever the Python path has to decide: a different array or
 * context, a missing or extra argument, an output that is not 16-byte
 * aligned. Errors in a scalar are the Python path's own (its scalar_value
 * raises them). Outputs may be made one call ahead (spares, made after the
 * launches; all, none, or those the caller picks), so that the kernels wait
 * for no allocation. Where the allocator's arrays say who holds their memory
 * (sole: paths to those objects), a result made ahead is kept after it is
 * returned, and written again by the next call when the caller has let it go
 * (nothing but the FastCall refers to it or to them): the same address, whose
 * lines L2 may still hold, instead of the spare's (CuPy's pool would have kept
 * that memory cached anyway).
 *
 * Reading a signature costs the host about 0.4 us per CuPy array (its pointer,
 * shape and strides are new Python objects on every read). So where a signer
 * says which of its items stay put while the object lives (steady: CuPy's
 * data pointer, strides and dtype cannot be set, only its shape can), the
 * FastCall keeps a weak reference to each array that last passed the whole
 * check, and a call passing that same object again reads only its other items.
 * The weak reference cannot mistake a new object at a freed one's address.
 *
 * A kernel that turns (fusec/lower/kernel.py, Kernel.turns) takes the
 * direction of its walk as an int field (change kind 'D', source: its turn
 * group): each such launch gets the other direction from the launch of its
 * group before, so that it starts on the tiles that launch ended on, while L2
 * holds them.
 *
 * Each launch passes its kernel's bytes of dynamic shared memory (0 for most;
 * a held kernel keeps tiles there across its grid barrier, up to about 200 KB:
 * cuda.Loaded.own_function gives the function that leave before the FastCall
 * is made, and the program checks first that all its blocks fit at once).
 *
 * A kernel may be launched as a programmatic dependent launch (sm_90 on, CUDA
 * 12.3 drivers: cuLaunchKernelEx with PROGRAMMATIC_STREAM_SERIALIZATION; kernel
 * tuple field 'dependent'): the driver starts it while the kernel before it in
 * the stream still runs, so its launch overlaps that one's end. The kernel
 * itself waits at its first statement until the one before has ended and its
 * writes are visible (support.cuh: fusec_follow_previous); only fusec's
 * generated kernels, which all do, are launched so.
 *
 * Every launch goes on one stream: the FastCall's, the stream of the call that
 * prepared it (the caller's, or its framework's current one). A call passed
 * another stream returns None: the Python path prepares for that one.
 *
 * The module is fusec's one binding for launches (PyCUDA launches only on
 * streams PyCUDA made, never on CuPy's or PyTorch's): load_module,
 * get_function, launch, the occupancy calculator, the function attribute for
 * dynamic shared memory, context push/pop and the event that orders one
 * stream after another. It is built with the package (setup.py), and opens
 * the driver with dlopen when first used, so it builds and imports where there
 * is no GPU; a FastCall made with a hook calls hook(kernel_index,
 * parameter_bytes, shared_bytes) instead of launching (the tests' seam).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_VALUES 64  /* scalars, and outputs, of one program (a call keeps them on the stack) */
#define MAX_GROUPS 64  /* turn groups of one program */

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;

/* cuLaunchKernelEx's configuration (cuda.h, CUDA 12): one attribute at most here */
#define LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef struct {
    int id;
    char pad[4];
    union {
        char pad[64];
        int programmaticStreamSerializationAllowed;
    } value;
} CUlaunchAttribute;
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

static CUresult (*cuCtxGetCurrent_)(CUcontext *);
static CUresult (*cuModuleLoadData_)(CUmodule *, const void *);
static CUresult (*cuModuleGetFunction_)(CUfunction *, CUmodule, const char *);
static CUresult (*cuModuleUnload_)(CUmodule);
static CUresult (*cuLaunchKernel_)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void **, void **);
static CUresult (*cuGetErrorName_)(CUresult, const char **);
static CUresult (*cuCtxPushCurrent_)(CUcontext);
static CUresult (*cuCtxPopCurrent_)(CUcontext *);
static CUresult (*cuFuncSetAttribute_)(CUfunction, int, int);
static CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor_)(int *, CUfunction, int, size_t);
static CUresult (*cuEventCreate_)(CUevent *, unsigned);
static CUresult (*cuEventRecord_)(CUevent, CUstream);
static CUresult (*cuEventDestroy_)(CUevent);
static CUresult (*cuStreamWaitEvent_)(CUstream, CUevent, unsigned);
static CUresult (*cuStreamSynchronize_)(CUstream);
static CUresult (*cuLaunchKernelEx_)(const CUlaunchConfig *, CUfunction, void **, void **);  /* NULL before CUDA 12 */
static CUresult (*cuDriverGetVersion_)(int *);
#define DEPENDENT_LAUNCH_DRIVER 12030  /* CUDA 12.3: dependent launches captured into graphs as programmatic edges */

static PyObject *driver_error;  /* fusec.errors.DriverError, handed over by set_error_class */

static int open_driver(void) {
    if (cuLaunchKernel_) return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_OSError, "the CUDA driver library could not be loaded: %s", dlerror());
        return -1;
    }
#define FIND(var, name)                                                                    \
    *(void **)(&var) = dlsym(lib, name);                                                   \
    if (!var) {                                                                            \
        PyErr_Format(PyExc_OSError, "libcuda.so.1 has no %s", name);                       \
        return -1;                                                                         \
    }
    FIND(cuCtxGetCurrent_, "cuCtxGetCurrent")
    FIND(cuModuleLoadData_, "cuModuleLoadData")
    FIND(cuModuleGetFunction_, "cuModuleGetFunction")
    FIND(cuModuleUnload_, "cuModuleUnload")
    FIND(cuGetErrorName_, "cuGetErrorName")
    FIND(cuCtxPushCurrent_, "cuCtxPushCurrent_v2")
    FIND(cuCtxPopCurrent_, "cuCtxPopCurrent_v2")
    FIND(cuFuncSetAttribute_, "cuFuncSetAttribute")
    FIND(cuOccupancyMaxActiveBlocksPerMultiprocessor_, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    FIND(cuEventCreate_, "cuEventCreate")
    FIND(cuEventRecord_, "cuEventRecord")
    FIND(cuEventDestroy_, "cuEventDestroy_v2")
    FIND(cuStreamWaitEvent_, "cuStreamWaitEvent")
    FIND(cuStreamSynchronize_, "cuStreamSynchronize")
    *(void **)(&cuLaunchKernelEx_) = dlsym(lib, "cuLaunchKernelEx");  /* optional */
    FIND(cuDriverGetVersion_, "cuDriverGetVersion")
    FIND(cuLaunchKernel_, "cuLaunchKernel")  /* last: it marks the table complete */
#undef FIND
    return 0;
}

/* One launch of packed parameters; dependent: as a programmatic dependent launch (callers
 * ask only where cuLaunchKernelEx exists: dependent_launch()). */
static CUresult launch_one(CUfunction function, unsigned grid, unsigned block, unsigned shared, CUstream stream,
                           void *parameters, size_t size, int dependent) {
    void *extra[] = {(void *)1, parameters, (void *)2, &size, (void *)0};  /* BUFFER_POINTER, SIZE, END */
    if (!dependent || !cuLaunchKernelEx_)
        return cuLaunchKernel_(function, grid, 1, 1, block, 1, 1, shared, stream, NULL, extra);
    CUlaunchAttribute attribute;
    memset(&attribute, 0, sizeof attribute);
    attribute.id = LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config = {grid, 1, 1, block, 1, 1, shared, stream, &attribute, 1};
    return cuLaunchKernelEx_(&config, function, NULL, extra);
}

static PyObject *raise_driver(CUresult result, const char *call) {
    const char *name = NULL;
    if (cuGetErrorName_ == NULL || cuGetErrorName_(result, &name) != 0 || name == NULL) name = "CUDA error";
    PyErr_Format(driver_error ? driver_error : PyExc_RuntimeError, "%s failed: %s (%d)", call, name, result);
    return NULL;
}

/* ------------------------------------------------------------------ modules */

static PyObject *load_module(PyObject *self, PyObject *arg) {
    Py_buffer image;
    if (open_driver() < 0 || PyObject_GetBuffer(arg, &image, PyBUF_SIMPLE) < 0) return NULL;
    CUmodule module = NULL;
    CUresult result = cuModuleLoadData_(&module, image.buf);
    PyBuffer_Release(&image);
    if (result) return raise_driver(result, "cuModuleLoadData");
    return PyLong_FromVoidPtr(module);
}

static PyObject *get_function(PyObject *self, PyObject *args) {
    PyObject *module;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &module, &name) || open_driver() < 0) return NULL;
    CUfunction function = NULL;
    CUresult result = cuModuleGetFunction_(&function, PyLong_AsVoidPtr(module), name);
    if (result) return raise_driver(result, "cuModuleGetFunction");
    return PyLong_FromVoidPtr(function);
}

static PyObject *unload_module(PyObject *self, PyObject *arg) {
    if (open_driver() < 0) return NULL;
    CUresult result = cuModuleUnload_(PyLong_AsVoidPtr(arg));
    if (result) return raise_driver(result, "cuModuleUnload");
    Py_RETURN_NONE;
}

static PyObject *current_context(PyObject *self, PyObject *unused) {
    if (open_driver() < 0) return NULL;
    CUcontext context = NULL;
    CUresult result = cuCtxGetCurrent_(&context);
    if (result) return raise_driver(result, "cuCtxGetCurrent");
    return PyLong_FromVoidPtr(context);
}

static PyObject *push_context(PyObject *self, PyObject *arg) {
    if (open_driver() < 0) return NULL;
    void *context = PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred()) return NULL;
    CUresult result = cuCtxPushCurrent_(context);
    if (result) return raise_driver(result, "cuCtxPushCurrent");
    Py_RETURN_NONE;
}

static PyObject *pop_context(PyObject *self, PyObject *unused) {
    if (open_driver() < 0) return NULL;
    CUcontext context = NULL;
    CUresult result = cuCtxPopCurrent_(&context);
    if (result) return raise_driver(result, "cuCtxPopCurrent");
    Py_RETURN_NONE;
}

#define MAX_DYNAMIC_SHARED_SIZE_BYTES 8  /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */

static PyObject *set_max_dynamic_shared(PyObject *self, PyObject *args) {
    PyObject *function;
    int bytes;
    if (!PyArg_ParseTuple(args, "Oi", &function, &bytes) || open_driver() < 0) return NULL;
    CUresult result = cuFuncSetAttribute_(PyLong_AsVoidPtr(function), MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
    if (result) return raise_driver(result, "cuFuncSetAttribute");
    Py_RETURN_NONE;
}

static PyObject *resident_blocks(PyObject *self, PyObject *args) {
    PyObject *function;
    int block;
    Py_ssize_t shared;
    if (!PyArg_ParseTuple(args, "Oin", &function, &block, &shared) || open_driver() < 0) return NULL;
    int count = 0;
    CUresult result = cuOccupancyMaxActiveBlocksPerMultiprocessor_(&count, PyLong_AsVoidPtr(function), block,
                                                                   (size_t)shared);
    if (result) return raise_driver(result, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return PyLong_FromLong(count);
}

/* launch(function, grid, block, shared, stream, parameters[, dependent]): one launch with its
 * parameters packed in a buffer (the kernel's ABI layout), on any stream of the current context;
 * dependent (default 0): as a programmatic dependent launch. */
static PyObject *launch_packed(PyObject *self, PyObject *args) {
    PyObject *function, *stream;
    unsigned grid, block, shared;
    int dependent = 0;
    Py_buffer parameters;
    if (!PyArg_ParseTuple(args, "OIIIOy*|p", &function, &grid, &block, &shared, &stream, &parameters, &dependent))
        return NULL;
    void *handle = PyLong_AsVoidPtr(function), *on = PyLong_AsVoidPtr(stream);
    if (PyErr_Occurred() || open_driver() < 0) {
        PyBuffer_Release(&parameters);
        return NULL;
    }
    CUresult result = launch_one(handle, grid, block, shared, on, parameters.buf, (size_t)parameters.len, dependent);
    PyBuffer_Release(&parameters);
    if (result) return raise_driver(result, dependent ? "cuLaunchKernelEx" : "cuLaunchKernel");
    Py_RETURN_NONE;
}

/* dependent_launch(): whether the driver launches programmatic dependent launches and captures
 * them into CUDA graphs (a caller's capture of a fusec call must not fail for them): CUDA 12.3 on. */
static PyObject *dependent_launch(PyObject *self, PyObject *unused) {
    int version = 0;
    if (open_driver() < 0) return NULL;
    if (cuDriverGetVersion_(&version)) version = 0;
    return PyBool_FromLong(cuLaunchKernelEx_ != NULL && version >= DEPENDENT_LAUNCH_DRIVER);
}

#define EVENT_DISABLE_TIMING 2  /* CU_EVENT_DISABLE_TIMING */

/* wait(stream, producer): work queued on stream from now on waits for what producer has queued. */
static PyObject *wait_stream(PyObject *self, PyObject *args) {
    PyObject *stream, *producer;
    if (!PyArg_ParseTuple(args, "OO", &stream, &producer) || open_driver() < 0) return NULL;
    void *waiting = PyLong_AsVoidPtr(stream), *after = PyLong_AsVoidPtr(producer);
    if (PyErr_Occurred()) return NULL;
    CUevent event = NULL;
    CUresult result = cuEventCreate_(&event, EVENT_DISABLE_TIMING);
    if (result) return raise_driver(result, "cuEventCreate");
    result = cuEventRecord_(event, after);
    if (!result) result = cuStreamWaitEvent_(waiting, event, 0);
    cuEventDestroy_(event);  /* released once the wait is done */
    if (result) return raise_driver(result, "cuStreamWaitEvent");
    Py_RETURN_NONE;
}

static PyObject *synchronize(PyObject *self, PyObject *arg) {
    if (open_driver() < 0) return NULL;
    void *stream = PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred()) return NULL;
    CUresult result;
    Py_BEGIN_ALLOW_THREADS
    result = cuStreamSynchronize_(stream);
    Py_END_ALLOW_THREADS
    if (result) return raise_driver(result, "cuStreamSynchronize");
    Py_RETURN_NONE;
}

static PyObject *set_error_class(PyObject *self, PyObject *cls) {
    Py_INCREF(cls);
    Py_XSETREF(driver_error, cls);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ steps */

/* A path of steps from an object to a value: each an attribute name, or
 * "name()" for a method to call. Read into a tuple of (interned name, called). */
static PyObject *read_steps(PyObject *path) {
    if (!PyTuple_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "a path of steps must be a tuple of str");
        return NULL;
    }
    PyObject *steps = PyTuple_New(PyTuple_GET_SIZE(path));
    if (!steps) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(path); i++) {
        PyObject *step = PyTuple_GET_ITEM(path, i);
        Py_ssize_t length;
        const char *text = PyUnicode_Check(step) ? PyUnicode_AsUTF8AndSize(step, &length) : NULL;
        if (!text) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a step must be a str");
            Py_DECREF(steps);
            return NULL;
        }
        int called = length > 2 && strcmp(text + length - 2, "()") == 0;
        PyObject *name = PyUnicode_FromStringAndSize(text, called ? length - 2 : length);
        if (!name) {
            Py_DECREF(steps);
            return NULL;
        }
        PyUnicode_InternInPlace(&name);
        PyObject *pair = Py_BuildValue("(Ni)", name, called);
        if (!pair) {
            Py_DECREF(steps);
            return NULL;
        }
        PyTuple_SET_ITEM(steps, i, pair);
    }
    return steps;
}

/* The value at the end of the steps from obj (a new reference), or NULL on an error. */
static PyObject *walk(PyObject *obj, PyObject *steps) {
    PyObject *value = Py_NewRef(obj);
    for (Py_ssize_t i = 0; value && i < PyTuple_GET_SIZE(steps); i++) {
        PyObject *step = PyTuple_GET_ITEM(steps, i);
        PyObject *name = PyTuple_GET_ITEM(step, 0);
        PyObject *next = PyLong_AS_LONG(PyTuple_GET_ITEM(step, 1)) ? PyObject_CallMethodNoArgs(value, name)
                                                                 : PyObject_GetAttr(value, name);
        Py_DECREF(value);
        value = next;
    }
    return value;
}

/* ------------------------------------------------------------------ FastCall */

typedef struct {
    Py_ssize_t offset;
    char kind;          /* 'P': an output's pointer; 'f', 'd': a scalar as float or double; 'D' the direction */
    Py_ssize_t source;  /* the output's position, the scalar's, or the turn group's */
} Change;

typedef struct {
    CUfunction function;
    unsigned grid, block;
    unsigned shared;    /* bytes of dynamic shared memory each launch passes */
    int dependent;      /* 1: a programmatic dependent launch */
    size_t size;
    char *parameters;   /* packed once; the changing fields are rewritten by each call */
    Py_ssize_t changes;
    Change *change;
} Kernel;

/* Arrays a call passes by name, each checked against the signature it was prepared with. */
typedef struct {
    PyObject *names, *types, *signers, *signatures;  /* tuples, one item per array; names NULL: no set */
    PyObject *steady;   /* NULL, or a tuple per array: None, or per signature item True where it stays put */
    PyObject *seen;     /* NULL, or a list per array: None, or a weak reference to the last object checked whole */
} ArraySet;

typedef struct {
    PyObject_HEAD
    ArraySet in;        /* the inputs */
    ArraySet out;       /* the out= arrays, where the call was prepared with them (names NULL: none) */
    PyObject *given;    /* NULL, or a tuple per output: None, or the name of the out= array that holds it */
    PyObject *scalar_names, *scalar_value, *output_shapes, *results, *hook;
    double scalar_limit;  /* a float beyond it (or NaN, infinite) goes to scalar_value, which refuses it */
    PyObject *make, *make_kwnames, *pointer_steps;  /* allocating: make(shape, *args, **kwargs) */
    PyObject *spares;   /* NULL, or a list: per output, None or (array, address) made after a call's launches */
    PyObject *last;     /* NULL, or a list: per output, None or the (array, address) the last call returned */
    PyObject *sole;     /* NULL, or a tuple of paths of steps to the objects that hold an array's memory */
    char *ahead;        /* per output: 1 where it is made ahead (spares), 0 where each call makes its own */
    PyObject **make_stack;  /* [shape, *args, *kwargs' values] for the vectorcall; [0] set per call */
    Py_ssize_t make_positional, make_count;
    void *context;
    void *stream;  /* where every launch of the FastCall goes */
    Py_ssize_t kernels;
    Kernel *kernel;
    int turn[MAX_GROUPS];  /* per turn group, the direction its last launch took (0 forwards, 1 backwards) */
} FastCall;  /* immutable once made but for spares, last and turn: calls keep their own values on the stack */

static void fastcall_free_kernels(FastCall *self) {
    for (Py_ssize_t k = 0; k < self->kernels && self->kernel; k++) {
        PyMem_Free(self->kernel[k].parameters);
        PyMem_Free(self->kernel[k].change);
    }
    PyMem_Free(self->kernel);
    self->kernel = NULL;
}

static void clear_set(ArraySet *set) {
    Py_CLEAR(set->names);
    Py_CLEAR(set->types);
    Py_CLEAR(set->signers);
    Py_CLEAR(set->signatures);
    Py_CLEAR(set->steady);
    Py_CLEAR(set->seen);
}

static void fastcall_dealloc(FastCall *self) {
    clear_set(&self->in);
    clear_set(&self->out);
    Py_XDECREF(self->given);
    Py_XDECREF(self->scalar_names);
    Py_XDECREF(self->scalar_value);
    Py_XDECREF(self->make);
    Py_XDECREF(self->make_kwnames);
    Py_XDECREF(self->pointer_steps);
    Py_XDECREF(self->spares);
    Py_XDECREF(self->last);
    Py_XDECREF(self->sole);
    PyMem_Free(self->ahead);
    for (Py_ssize_t i = 1; i < self->make_count && self->make_stack; i++) Py_XDECREF(self->make_stack[i]);
    PyMem_Free(self->make_stack);
    Py_XDECREF(self->output_shapes);
    Py_XDECREF(self->results);
    Py_XDECREF(self->hook);
    fastcall_free_kernels(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* kernels: tuple of (function: int, grid: int, block: int, parameters: bytes,
 * changes: tuple of (offset: int, kind: str, source: int)[, shared: int, default 0
 * [, dependent: bool, default False]]) */
static int read_kernels(FastCall *self, PyObject *kernels) {
    if (!PyTuple_Check(kernels)) {
        PyErr_SetString(PyExc_TypeError, "kernels must be a tuple");
        return -1;
    }
    Py_ssize_t outputs = PyTuple_GET_SIZE(self->output_shapes), scalars = PyTuple_GET_SIZE(self->scalar_names);
    self->kernels = PyTuple_GET_SIZE(kernels);
    self->kernel = PyMem_Calloc(self->kernels ? self->kernels : 1, sizeof(Kernel));
    if (!self->kernel) return PyErr_NoMemory(), -1;
    for (Py_ssize_t k = 0; k < self->kernels; k++) {
        Kernel *kernel = &self->kernel[k];
        PyObject *function, *changes;
        const char *parameters;
        Py_ssize_t size;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(kernels, k), "OIIy#O!|Ip", &function, &kernel->grid, &kernel->block,
                              &parameters, &size, &PyTuple_Type, &changes, &kernel->shared, &kernel->dependent))
            return -1;
        if (kernel->dependent && (open_driver() < 0 || !cuLaunchKernelEx_)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a dependent launch needs cuLaunchKernelEx (a CUDA 12.3 driver)");
            return -1;
        }
        kernel->function = PyLong_AsVoidPtr(function);
        if (PyErr_Occurred()) return -1;
        kernel->size = (size_t)size;
        kernel->parameters = PyMem_Malloc(size ? size : 1);
        if (!kernel->parameters) return PyErr_NoMemory(), -1;
        memcpy(kernel->parameters, parameters, size);
        kernel->changes = PyTuple_GET_SIZE(changes);
        kernel->change = PyMem_Calloc(kernel->changes ? kernel->changes : 1, sizeof(Change));
        if (!kernel->change) return PyErr_NoMemory(), -1;
        for (Py_ssize_t c = 0; c < kernel->changes; c++) {
            Change *change = &kernel->change[c];
            int kind;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(changes, c), "nCn", &change->offset, &kind, &change->source))
                return -1;
            change->kind = (char)kind;
            Py_ssize_t width = kind == 'f' || kind == 'D' ? 4 : 8;
            Py_ssize_t limit = kind == 'P' ? outputs : kind == 'D' ? MAX_GROUPS : scalars;
            if ((kind != 'P' && kind != 'f' && kind != 'd' && kind != 'D') || change->offset < 0
                || change->offset + width > size
                || change->source < 0 || change->source >= limit) {
                PyErr_Format(PyExc_ValueError, "kernel %zd: bad change (%zd, %c, %zd)", k, change->offset,
                             kind, change->source);
                return -1;
            }
        }
    }
    return 0;
}

static int check_tuple(PyObject *obj, const char *what, Py_ssize_t length) {
    if (!PyTuple_Check(obj) || (length >= 0 && PyTuple_GET_SIZE(obj) != length)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple%s", what, length >= 0 ? " of one item per array" : "");
        return -1;
    }
    return 0;
}

/* make(shape, *args, **kwargs) as a vectorcall's stack and keyword names; the
 * pointer steps: each an attribute name, or "name()" for a method to call. */
static int read_allocation(FastCall *self, PyObject *make, PyObject *args, PyObject *kwargs, PyObject *pointer) {
    if (!PyCallable_Check(make) || !PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs))
        || !PyTuple_Check(pointer)) {
        PyErr_SetString(PyExc_TypeError, "make must be callable, make_args a tuple, make_kwargs a dict"
                                         " or None, pointer a tuple of names");
        return -1;
    }
    Py_ssize_t keywords = kwargs == Py_None ? 0 : PyDict_GET_SIZE(kwargs);
    self->make_positional = 1 + PyTuple_GET_SIZE(args);
    self->make_count = self->make_positional + keywords;
    self->make_stack = PyMem_Calloc(self->make_count, sizeof(PyObject *));
    if (!self->make_stack) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        self->make_stack[1 + i] = Py_NewRef(PyTuple_GET_ITEM(args, i));
    }
    if (keywords) {
        self->make_kwnames = PyTuple_New(keywords);
        if (!self->make_kwnames) return -1;
        PyObject *key, *value;
        Py_ssize_t position = 0, i = 0;
        while (PyDict_Next(kwargs, &position, &key, &value)) {
            PyTuple_SET_ITEM(self->make_kwnames, i, Py_NewRef(key));
            self->make_stack[self->make_positional + i] = Py_NewRef(value);
            i++;
        }
    }
    self->pointer_steps = read_steps(pointer);
    if (!self->pointer_steps) return -1;
    self->make = Py_NewRef(make);
    return 0;
}

/* spares: True (every output made ahead), False, or a tuple of one truth value per output;
 * never an output an out= array holds (read_given first). */
static int read_spares(FastCall *self, PyObject *spares) {
    Py_ssize_t outputs = PyTuple_GET_SIZE(self->output_shapes), wanted = 0;
    if (PyTuple_Check(spares) && PyTuple_GET_SIZE(spares) != outputs) {
        PyErr_SetString(PyExc_ValueError, "spares: one truth value per output");
        return -1;
    }
    self->ahead = PyMem_Calloc(outputs ? outputs : 1, 1);
    if (!self->ahead) return PyErr_NoMemory(), -1;
    int all = PyTuple_Check(spares) ? 0 : PyObject_IsTrue(spares);
    if (all < 0) return -1;
    for (Py_ssize_t o = 0; o < outputs; o++) {
        int ahead = PyTuple_Check(spares) ? PyObject_IsTrue(PyTuple_GET_ITEM(spares, o)) : all;
        if (ahead < 0) return -1;
        if (self->given && PyTuple_GET_ITEM(self->given, o) != Py_None) ahead = 0;  /* an out= array holds it */
        self->ahead[o] = (char)ahead;
        wanted += ahead;
    }
    if (!wanted) return 0;
    self->spares = PyList_New(outputs);
    if (!self->spares) return -1;
    for (Py_ssize_t o = 0; o < outputs; o++) PyList_SET_ITEM(self->spares, o, Py_NewRef(Py_None));
    return 0;
}

/* sole: None, or a tuple of paths of steps from an array to the objects that hold its
 * memory (CuPy: its MemoryPointer, and that one's Memory). With them, results made ahead
 * are kept and written again once the caller lets them go. */
static int read_sole(FastCall *self, PyObject *sole) {
    if (sole == Py_None || !self->spares) return 0;
    if (check_tuple(sole, "sole", -1) < 0) return -1;
    self->sole = PyTuple_New(PyTuple_GET_SIZE(sole));
    if (!self->sole) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sole); i++) {
        PyObject *steps = read_steps(PyTuple_GET_ITEM(sole, i));
        if (!steps) return -1;
        PyTuple_SET_ITEM(self->sole, i, steps);
    }
    Py_ssize_t outputs = PyTuple_GET_SIZE(self->output_shapes);
    self->last = PyList_New(outputs);
    if (!self->last) return -1;
    for (Py_ssize_t o = 0; o < outputs; o++) PyList_SET_ITEM(self->last, o, Py_NewRef(Py_None));
    return 0;
}

/* steady: None, or per array None or a tuple of one truth value per item of its
 * signature (read by steps): True where the item cannot change while the object lives. */
static int read_steady(ArraySet *set, PyObject *steady) {
    if (steady == Py_None) return 0;
    Py_ssize_t arrays = PyTuple_GET_SIZE(set->names);
    if (check_tuple(steady, "steady", arrays) < 0) return -1;
    PyObject *kept = PyTuple_New(arrays);
    if (!kept) return -1;
    for (Py_ssize_t a = 0; a < arrays; a++) {
        PyObject *items = PyTuple_GET_ITEM(steady, a), *signer = PyTuple_GET_ITEM(set->signers, a), *flags;
        if (items == Py_None) {
            PyTuple_SET_ITEM(kept, a, Py_NewRef(Py_None));
            continue;
        }
        if (!PyTuple_Check(items) || !PyTuple_Check(signer) || PyTuple_GET_SIZE(items) != PyTuple_GET_SIZE(signer)) {
            PyErr_SetString(PyExc_ValueError, "steady items: one truth value per path of the array's signer");
            Py_DECREF(kept);
            return -1;
        }
        flags = PyTuple_New(PyTuple_GET_SIZE(items));
        if (!flags) {
            Py_DECREF(kept);
            return -1;
        }
        PyTuple_SET_ITEM(kept, a, flags);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
            int truth = PyObject_IsTrue(PyTuple_GET_ITEM(items, i));
            if (truth < 0) {
                Py_DECREF(kept);
                return -1;
            }
            PyTuple_SET_ITEM(flags, i, Py_NewRef(truth ? Py_True : Py_False));
        }
    }
    set->steady = kept;
    set->seen = PyList_New(arrays);
    if (!set->seen) return -1;
    for (Py_ssize_t a = 0; a < arrays; a++) PyList_SET_ITEM(set->seen, a, Py_NewRef(Py_None));
    return 0;
}

/* A set of arrays: their names, types, signers and signatures (tuples of one item per array)
 * and steady items (see read_steady). Each signer: a callable returning the signature, or a
 * tuple of paths of steps, one per item of it. */
static int read_set(ArraySet *set, const char *what, PyObject *names, PyObject *types, PyObject *signers,
                    PyObject *signatures, PyObject *steady) {
    if (check_tuple(names, what, -1) < 0) return -1;
    Py_ssize_t arrays = PyTuple_GET_SIZE(names);
    if (check_tuple(types, "array types", arrays) < 0 || check_tuple(signers, "signers", arrays) < 0
        || check_tuple(signatures, "signatures", arrays) < 0)
        return -1;
    set->signers = PyTuple_New(arrays);
    if (!set->signers) return -1;
    for (Py_ssize_t a = 0; a < arrays; a++) {
        PyObject *signer = PyTuple_GET_ITEM(signers, a), *read;
        if (PyTuple_Check(signer)) {
            PyObject *signature = PyTuple_GET_ITEM(signatures, a);
            if (!PyTuple_Check(signature) || PyTuple_GET_SIZE(signature) != PyTuple_GET_SIZE(signer)) {
                PyErr_SetString(PyExc_ValueError, "a signature read by steps has one item per path");
                return -1;
            }
            read = PyTuple_New(PyTuple_GET_SIZE(signer));
            if (!read) return -1;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(signer); i++) {
                PyObject *steps = read_steps(PyTuple_GET_ITEM(signer, i));
                if (!steps) {
                    Py_DECREF(read);
                    return -1;
                }
                PyTuple_SET_ITEM(read, i, steps);
            }
        } else if (PyCallable_Check(signer)) {
            read = Py_NewRef(signer);
        } else {
            PyErr_SetString(PyExc_TypeError, "a signer is a callable or a tuple of paths");
            return -1;
        }
        PyTuple_SET_ITEM(set->signers, a, read);
    }
    set->names = Py_NewRef(names);
    set->types = Py_NewRef(types);
    set->signatures = Py_NewRef(signatures);
    return read_steady(set, steady);
}

/* given: None, or per output None or the name of the out= array that holds it (each once);
 * the out= arrays' set is then read from out_types, out_signers, out_signatures and out_steady,
 * one item per name, in the order the names come. */
static int read_given(FastCall *self, PyObject *given, PyObject *types, PyObject *signers, PyObject *signatures,
                      PyObject *steady) {
    if (given == Py_None) return 0;
    Py_ssize_t outputs = PyTuple_GET_SIZE(self->output_shapes);
    if (!PyTuple_Check(given) || PyTuple_GET_SIZE(given) != outputs) {
        PyErr_SetString(PyExc_ValueError, "given: one name or None per output");
        return -1;
    }
    PyObject *names = PyList_New(0);
    if (!names) return -1;
    for (Py_ssize_t o = 0; o < outputs; o++) {
        PyObject *name = PyTuple_GET_ITEM(given, o);
        if (name == Py_None) continue;
        int again = PyUnicode_Check(name) ? PySequence_Contains(names, name) : -1;
        if (again != 0 || PyList_Append(names, name) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "given: each out= name a str, once");
            Py_DECREF(names);
            return -1;
        }
    }
    PyObject *ordered = PyList_AsTuple(names);
    Py_DECREF(names);
    if (!ordered) return -1;
    if (!PyTuple_GET_SIZE(ordered)) {
        Py_DECREF(ordered);
        PyErr_SetString(PyExc_ValueError, "given: names no out= array");
        return -1;
    }
    int status = read_set(&self->out, "given names", ordered, types, signers, signatures, steady);
    Py_DECREF(ordered);
    if (status < 0) {
        clear_set(&self->out);
        return -1;
    }
    self->given = Py_NewRef(given);
    return 0;
}

static int fastcall_init(FastCall *self, PyObject *args, PyObject *kw) {
    static char *keywords[] = {"array_names", "array_types", "signers", "signatures", "scalar_names",
                               "scalar_value", "make", "make_args", "make_kwargs", "pointer",
                               "output_shapes", "results", "kernels", "context", "spares", "hook", "sole",
                               "steady", "stream", "scalar_limit", "given", "out_types", "out_signers",
                               "out_signatures", "out_steady", NULL};
    PyObject *array_names, *array_types, *signers, *signatures, *scalar_names, *scalar_value;
    PyObject *make, *make_args, *make_kwargs, *pointer;
    PyObject *output_shapes, *results, *kernels, *context, *spares = Py_False, *hook = Py_None, *sole = Py_None;
    PyObject *steady = Py_None, *stream = Py_None;
    PyObject *given = Py_None, *out_types = Py_None, *out_signers = Py_None, *out_signatures = Py_None;
    PyObject *out_steady = Py_None;
    double scalar_limit = DBL_MAX;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOOOOOOO|OOOOOdOOOOO", keywords, &array_names, &array_types,
                                     &signers, &signatures, &scalar_names, &scalar_value, &make, &make_args,
                                     &make_kwargs, &pointer, &output_shapes, &results, &kernels, &context,
                                     &spares, &hook, &sole, &steady, &stream, &scalar_limit, &given, &out_types,
                                     &out_signers, &out_signatures, &out_steady))
        return -1;
    if (self->in.names) {
        PyErr_SetString(PyExc_TypeError, "a FastCall is initialised once");
        return -1;
    }
    if (check_tuple(scalar_names, "scalar_names", -1) < 0 || check_tuple(output_shapes, "output_shapes", -1) < 0
        || check_tuple(results, "results", -1) < 0)
        return -1;
    if (PyTuple_GET_SIZE(scalar_names) > MAX_VALUES || PyTuple_GET_SIZE(output_shapes) > MAX_VALUES) {
        PyErr_Format(PyExc_ValueError, "at most %d scalars and %d outputs", MAX_VALUES, MAX_VALUES);
        return -1;
    }
    if (PyTuple_GET_SIZE(results) == 0) {
        PyErr_SetString(PyExc_ValueError, "a program returns at least one value");
        return -1;
    }
    for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(results); r++) {
        Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(results, r));
        if (position < 0 || position >= PyTuple_GET_SIZE(output_shapes)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a result names no output");
            return -1;
        }
    }
    self->context = context == Py_None ? NULL : PyLong_AsVoidPtr(context);
    self->stream = stream == Py_None ? NULL : PyLong_AsVoidPtr(stream);
    if (PyErr_Occurred()) return -1;
#define KEEP(field) Py_INCREF(field); self->field = field;
    KEEP(scalar_names) KEEP(scalar_value) KEEP(output_shapes) KEEP(results) KEEP(hook)
#undef KEEP
    self->scalar_limit = scalar_limit;
    if (read_set(&self->in, "array_names", array_names, array_types, signers, signatures, steady) < 0) {
        clear_set(&self->in);  /* initialised once: a FastCall whose set failed stays unusable */
        return -1;
    }
    if (read_given(self, given, out_types, out_signers, out_signatures, out_steady) < 0) return -1;
    if (read_spares(self, spares) < 0 || read_sole(self, sole) < 0) return -1;
    if (read_allocation(self, make, make_args, make_kwargs, pointer) < 0) return -1;
    if (hook == Py_None && open_driver() < 0) return -1;
    return read_kernels(self, kernels);
}

/* 1 where obj is the object array a of the set last passed the whole check, still alive. */
static int seen_before(ArraySet *set, Py_ssize_t a, PyObject *obj) {
    PyObject *ref = PyList_GET_ITEM(set->seen, a);
    if (ref == Py_None) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(target);  /* only its identity is compared; obj holds it alive */
    return target == obj;
#else
    return PyWeakref_GetObject(ref) == obj;
#endif
}

/* Array a's check passed whole on obj: the next call passing obj reads only its changing items.
 * An object that takes no weak reference just stays unseen. */
static void remember(ArraySet *set, Py_ssize_t a, PyObject *obj) {
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    if (!ref) {
        PyErr_Clear();
        return;
    }
    PyObject *held = PyList_GET_ITEM(set->seen, a);
    PyList_SET_ITEM(set->seen, a, ref);
    Py_DECREF(held);
}

/* 1: the dict holds the set's arrays as prepared, and `others` more items; 0: it does not;
 * -1: an error */
static int same_set(ArraySet *set, PyObject *arrays, Py_ssize_t others) {
    Py_ssize_t count = PyTuple_GET_SIZE(set->names);
    if (!PyDict_Check(arrays) || PyDict_GET_SIZE(arrays) != count + others) return 0;
    for (Py_ssize_t a = 0; a < count; a++) {
        PyObject *obj = PyDict_GetItemWithError(arrays, PyTuple_GET_ITEM(set->names, a));
        if (!obj) return PyErr_Occurred() ? -1 : 0;
        if ((PyObject *)Py_TYPE(obj) != PyTuple_GET_ITEM(set->types, a)) return 0;
        PyObject *signer = PyTuple_GET_ITEM(set->signers, a), *expected = PyTuple_GET_ITEM(set->signatures, a);
        if (PyTuple_Check(signer)) {  /* item by item, stopping at the first that differs */
            PyObject *steady = set->steady ? PyTuple_GET_ITEM(set->steady, a) : Py_None;
            int known = steady != Py_None && seen_before(set, a, obj);
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(signer); i++) {
                if (known && PyTuple_GET_ITEM(steady, i) == Py_True) continue;
                PyObject *value = walk(obj, PyTuple_GET_ITEM(signer, i));
                if (!value) return -1;
                int same = PyObject_RichCompareBool(value, PyTuple_GET_ITEM(expected, i), Py_EQ);
                Py_DECREF(value);
                if (same != 1) return same;
            }
            if (steady != Py_None && !known) remember(set, a, obj);
            continue;
        }
        PyObject *signature = PyObject_CallOneArg(signer, obj);
        if (!signature) return -1;
        int same = PyObject_RichCompareBool(signature, expected, Py_EQ);
        Py_DECREF(signature);
        if (same != 1) return same;
    }
    return 1;
}

/* 1: the arguments are the prepared arrays and scalars, and out the prepared out= arrays
 * (None or empty where it was prepared without); 0: they are not; -1: an error */
static int same_arrays(FastCall *self, PyObject *arguments, PyObject *out) {
    if (self->hook == Py_None) {
        CUcontext context = NULL;
        if (cuCtxGetCurrent_(&context) != 0 || context != self->context) return 0;
    }
    int same = same_set(&self->in, arguments, PyTuple_GET_SIZE(self->scalar_names));
    if (same != 1) return same;
    if (self->out.names) return same_set(&self->out, out, 0);
    return out == Py_None || (PyDict_Check(out) && PyDict_GET_SIZE(out) == 0);
}

/* 1: scalars read; 0: one is missing; -1: an error (scalar_value's ArgumentError) */
static int read_scalars(FastCall *self, PyObject *arguments, double *scalars) {
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(self->scalar_names); s++) {
        PyObject *name = PyTuple_GET_ITEM(self->scalar_names, s);
        PyObject *obj = PyDict_GetItemWithError(arguments, name);
        if (!obj) return PyErr_Occurred() ? -1 : 0;
        if (PyFloat_CheckExact(obj) && fabs(PyFloat_AS_DOUBLE(obj)) <= self->scalar_limit) {  /* NaN fails too */
            scalars[s] = PyFloat_AS_DOUBLE(obj);
            continue;
        }
        PyObject *value = PyObject_CallFunctionObjArgs(self->scalar_value, name, obj, NULL);
        if (!value) return -1;
        scalars[s] = PyFloat_AsDouble(value);
        Py_DECREF(value);
        if (PyErr_Occurred()) return -1;
    }
    return 1;
}

/* A new output array (a new reference) and its address; NULL on an error. */
static PyObject *make_output(FastCall *self, Py_ssize_t o, unsigned long long *pointer) {
    self->make_stack[0] = PyTuple_GET_ITEM(self->output_shapes, o);  /* borrowed for the call */
    PyObject *array = PyObject_Vectorcall(self->make, self->make_stack, self->make_positional, self->make_kwnames);
    self->make_stack[0] = NULL;
    if (!array) return NULL;
    PyObject *value = walk(array, self->pointer_steps);
    if (value) {
        *pointer = PyLong_AsUnsignedLongLong(value);
        Py_DECREF(value);
    }
    if (!value || PyErr_Occurred()) {
        Py_DECREF(array);
        return NULL;
    }
    return array;
}

/* 1 where the caller has let an array the FastCall keeps go: nothing but the FastCall
 * refers to it, and each object its sole paths lead to is held by its parent alone (a
 * view, or anything made on the same memory, holds one of them). */
static int only_ours(FastCall *self, PyObject *array) {
    if (Py_REFCNT(array) != 1) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->sole); i++) {
        PyObject *holder = walk(array, PyTuple_GET_ITEM(self->sole, i));
        if (!holder) {
            PyErr_Clear();
            return 0;
        }
        Py_ssize_t references = Py_REFCNT(holder);
        Py_DECREF(holder);
        if (references != 2) return 0;  /* its parent's, and walk's */
    }
    return 1;
}

/* Output o's array made for this call, kept as the last one returned where results are kept. */
static void keep_last(FastCall *self, Py_ssize_t o, PyObject *made) {
    if (!self->last || !self->ahead[o]) return;
    PyObject *held = PyList_GET_ITEM(self->last, o);
    PyList_SET_ITEM(self->last, o, Py_NewRef(made));
    Py_DECREF(held);
}

/* The outputs as a new tuple, their addresses in outputs: the out= arrays that hold them
 * (their addresses packed already), else the last results where the caller let them go, else
 * the spares where there are, new arrays otherwise. Py_None (a new reference) when a new one
 * is not 16-byte aligned; NULL on an error. Whatever is taken is taken with no Python code run
 * between (CuPy's attributes are C): no other call can take it too. */
static PyObject *allocate_outputs(FastCall *self, uintptr_t *outputs, PyObject *out) {
    Py_ssize_t count = PyTuple_GET_SIZE(self->output_shapes);
    PyObject *arrays = PyTuple_New(count);
    if (!arrays) return NULL;
    for (Py_ssize_t o = 0; o < count; o++) {
        PyObject *name = self->given ? PyTuple_GET_ITEM(self->given, o) : Py_None;
        if (name != Py_None) {
            PyObject *array = PyDict_GetItemWithError(out, name);  /* there: same_arrays checked it */
            if (!array) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
                Py_DECREF(arrays);
                return NULL;
            }
            PyTuple_SET_ITEM(arrays, o, Py_NewRef(array));
            outputs[o] = 0;
            continue;
        }
        PyObject *last = self->last ? PyList_GET_ITEM(self->last, o) : Py_None;
        if (last != Py_None && only_ours(self, PyTuple_GET_ITEM(last, 0))) {
            PyTuple_SET_ITEM(arrays, o, Py_NewRef(PyTuple_GET_ITEM(last, 0)));
            outputs[o] = (uintptr_t)PyLong_AsVoidPtr(PyTuple_GET_ITEM(last, 1));
            continue;
        }
        PyObject *spare = self->spares ? PyList_GET_ITEM(self->spares, o) : Py_None;
        if (spare != Py_None) {
            PyTuple_SET_ITEM(arrays, o, Py_NewRef(PyTuple_GET_ITEM(spare, 0)));
            outputs[o] = (uintptr_t)PyLong_AsVoidPtr(PyTuple_GET_ITEM(spare, 1));
            keep_last(self, o, spare);
            PyList_SET_ITEM(self->spares, o, Py_NewRef(Py_None));
            Py_DECREF(spare);
            continue;
        }
        unsigned long long pointer = 0;
        PyObject *array = make_output(self, o, &pointer);
        if (!array) {
            Py_DECREF(arrays);
            return NULL;
        }
        PyTuple_SET_ITEM(arrays, o, array);
        if (pointer % 16) {
            Py_DECREF(arrays);
            Py_RETURN_NONE;
        }
        outputs[o] = (uintptr_t)pointer;
        if (self->last && self->ahead[o]) {  /* no spare this time (its making failed) */
            PyObject *made = Py_BuildValue("(OK)", array, pointer);
            if (!made) {
                Py_DECREF(arrays);
                return NULL;
            }
            keep_last(self, o, made);
            Py_DECREF(made);
        }
    }
    return arrays;
}

/* The next call's outputs, made while this call's kernels run. A failure only
 * means no spare: the next call allocates its own (and reports any error). */
static void make_spares(FastCall *self) {
    if (!self->spares) return;
    for (Py_ssize_t o = 0; o < PyList_GET_SIZE(self->spares); o++) {
        if (!self->ahead[o] || PyList_GET_ITEM(self->spares, o) != Py_None) continue;
        unsigned long long pointer = 0;
        PyObject *array = make_output(self, o, &pointer);
        PyObject *spare = array && pointer % 16 == 0 ? Py_BuildValue("(NK)", array, pointer) : NULL;
        if (!spare) {
            PyErr_Clear();
            if (array && pointer % 16) Py_DECREF(array);
            continue;
        }
        PyObject *held = PyList_GET_ITEM(self->spares, o);
        if (held != Py_None) {  /* another thread's call made one meanwhile */
            Py_DECREF(spare);
            continue;
        }
        PyList_SET_ITEM(self->spares, o, spare);
        Py_DECREF(held);
    }
}

static void clear_list(PyObject *list) {
    for (Py_ssize_t o = 0; list && o < PyList_GET_SIZE(list); o++) {
        PyObject *held = PyList_GET_ITEM(list, o);
        PyList_SET_ITEM(list, o, Py_NewRef(Py_None));
        Py_XDECREF(held);
    }
}

static PyObject *drop_spares(FastCall *self, PyObject *unused) {
    clear_list(self->spares);
    clear_list(self->last);
    Py_RETURN_NONE;
}

static Py_ssize_t count_held(PyObject *list) {
    Py_ssize_t held = 0;
    for (Py_ssize_t o = 0; list && o < PyList_GET_SIZE(list); o++) held += PyList_GET_ITEM(list, o) != Py_None;
    return held;
}

static PyObject *held_spares(FastCall *self, PyObject *unused) {
    return PyLong_FromSsize_t(count_held(self->spares));
}

static PyObject *held_results(FastCall *self, PyObject *unused) {
    return PyLong_FromSsize_t(count_held(self->last));
}

#define STACK_PARAMETERS 1024  /* bytes of parameters a launch packs on the stack; more go to the heap */

static int launch(FastCall *self, Py_ssize_t k, const double *scalars, const uintptr_t *outputs) {
    Kernel *kernel = &self->kernel[k];
    char stack[STACK_PARAMETERS];
    char *parameters = kernel->size <= STACK_PARAMETERS ? stack : PyMem_Malloc(kernel->size);
    if (!parameters) return PyErr_NoMemory(), -1;
    memcpy(parameters, kernel->parameters, kernel->size);
    for (Py_ssize_t c = 0; c < kernel->changes; c++) {
        Change *change = &kernel->change[c];
        char *field = parameters + change->offset;
        if (change->kind == 'P') {
            uint64_t pointer = (uint64_t)outputs[change->source];
            memcpy(field, &pointer, 8);
        } else if (change->kind == 'f') {
            float value = (float)scalars[change->source];
            memcpy(field, &value, 4);
        } else if (change->kind == 'D') {
            int direction = self->turn[change->source] ^= 1;  /* the GIL is held: launches take turns in order */
            memcpy(field, &direction, 4);
        } else {
            memcpy(field, &scalars[change->source], 8);
        }
    }
    int status = 0;
    if (self->hook != Py_None) {
        PyObject *result = PyObject_CallFunction(self->hook, "ny#I", k, parameters, (Py_ssize_t)kernel->size,
                                                 kernel->shared);
        Py_XDECREF(result);
        status = result ? 0 : -1;
    } else {
        CUresult result = launch_one(kernel->function, kernel->grid, kernel->block, kernel->shared, self->stream,
                                     parameters, kernel->size, kernel->dependent);
        if (result) {
            raise_driver(result, kernel->dependent ? "cuLaunchKernelEx" : "cuLaunchKernel");
            status = -1;
        }
    }
    if (parameters != stack) PyMem_Free(parameters);
    return status;
}

static PyObject *fastcall_call(FastCall *self, PyObject *args, PyObject *kw) {
    PyObject *arguments;
    if (!self->in.names) {
        PyErr_SetString(PyExc_TypeError, "FastCall was not initialised");
        return NULL;
    }
    PyObject *stream = Py_None, *out = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO", &arguments, &stream, &out)) return NULL;
    if (stream != Py_None) {  /* another stream than the one it was prepared on: the Python path's */
        void *on = PyLong_AsVoidPtr(stream);
        if (PyErr_Occurred()) return NULL;
        if (on != self->stream) Py_RETURN_NONE;
    }
    /* this call's values, on the stack: another thread may call while this one waits for Python code */
    double scalars[MAX_VALUES];
    uintptr_t addresses[MAX_VALUES];
    int ready = same_arrays(self, arguments, out);
    if (ready == 1) ready = read_scalars(self, arguments, scalars);
    if (ready < 0) return NULL;
    if (ready == 0) Py_RETURN_NONE;
    PyObject *outputs = allocate_outputs(self, addresses, out);
    if (!outputs || outputs == Py_None) return outputs;
    for (Py_ssize_t k = 0; k < self->kernels; k++) {
        if (launch(self, k, scalars, addresses) < 0) {
            Py_DECREF(outputs);
            return NULL;
        }
    }
    make_spares(self);
    Py_ssize_t count = PyTuple_GET_SIZE(self->results);
    if (count == 1) {
        PyObject *result = PyTuple_GET_ITEM(outputs, PyLong_AsSsize_t(PyTuple_GET_ITEM(self->results, 0)));
        Py_INCREF(result);
        Py_DECREF(outputs);
        return result;
    }
    PyObject *results = PyTuple_New(count);
    if (results) {
        for (Py_ssize_t r = 0; r < count; r++) {
            PyObject *result = PyTuple_GET_ITEM(outputs, PyLong_AsSsize_t(PyTuple_GET_ITEM(self->results, r)));
            Py_INCREF(result);
            PyTuple_SET_ITEM(results, r, result);
        }
    }
    Py_DECREF(outputs);
    return results;
}

static PyMethodDef fastcall_methods[] = {
    {"drop_spares", (PyCFunction)drop_spares, METH_NOARGS,
     "Let go of the outputs made ahead for the next call, and of the results kept."},
    {"held_spares", (PyCFunction)held_spares, METH_NOARGS, "How many outputs are made ahead now."},
    {"held_results", (PyCFunction)held_results, METH_NOARGS,
     "How many of the last call's results are kept, to be written again once let go."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fusec.runtime._fastcall.FastCall",
    .tp_doc = "A prepared program call, checked, allocated and launched in C.",
    .tp_basicsize = sizeof(FastCall),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fastcall_init,
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_call = (ternaryfunc)fastcall_call,
    .tp_methods = fastcall_methods,
};

static PyMethodDef methods[] = {
    {"load_module", load_module, METH_O, "Load a cubin into the current context; its CUmodule as an int."},
    {"get_function", get_function, METH_VARARGS, "get_function(module, name): the kernel's CUfunction as an int."},
    {"unload_module", unload_module, METH_O, "Unload a module load_module loaded (its context current)."},
    {"current_context", current_context, METH_NOARGS, "The driver's current CUcontext as an int (0: none)."},
    {"set_error_class", set_error_class, METH_O, "The exception class a failed driver call raises."},
    {"push_context", push_context, METH_O, "Make a CUcontext (an int) current on this thread, above the current one."},
    {"pop_context", pop_context, METH_NOARGS, "Undo push_context."},
    {"set_max_dynamic_shared", set_max_dynamic_shared, METH_VARARGS,
     "set_max_dynamic_shared(function, bytes): let launches pass up to bytes of dynamic shared memory."},
    {"resident_blocks", resident_blocks, METH_VARARGS,
     "resident_blocks(function, block, shared): blocks one SM holds at once (the driver's occupancy)."},
    {"launch", launch_packed, METH_VARARGS,
     "launch(function, grid, block, shared, stream, parameters[, dependent]): one launch, parameters packed;"
     " dependent: as a programmatic dependent launch."},
    {"dependent_launch", dependent_launch, METH_NOARGS,
     "Whether the driver has programmatic dependent launches (cuLaunchKernelEx, CUDA 12.3 on)."},
    {"synchronize", synchronize, METH_O, "Wait on the host until a stream's work is done."},
    {"wait", wait_stream, METH_VARARGS, "wait(stream, producer): stream waits for what producer has queued."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "fusec.runtime._fastcall", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
    if (PyType_Ready(&FastCallType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FastCallType);
    if (PyModule_AddObject(m, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(&FastCallType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
