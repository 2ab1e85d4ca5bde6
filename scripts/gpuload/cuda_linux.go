//go:build linux && cgo

package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// The few CUDA driver API types gpuload uses, as cuda.h declares them.
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

// Entry points resolved with dlsym. cuda.h maps several names to their
// _v2 symbols (CUDA 3.2 and 11.0 changed their ABI); those are the names
// asked for here.
static struct {
	void *lib;
	CUresult (*init)(unsigned int);
	CUresult (*driverGetVersion)(int *);
	CUresult (*deviceGetCount)(int *);
	CUresult (*deviceGet)(CUdevice *, int);
	CUresult (*deviceGetName)(char *, int, CUdevice);
	CUresult (*deviceGetAttribute)(int *, int, CUdevice);
	CUresult (*deviceGetPCIBusId)(char *, int, CUdevice);
	CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*primaryCtxRelease)(CUdevice);
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*ctxSynchronize)(void);
	CUresult (*moduleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
	CUresult (*moduleUnload)(CUmodule);
	CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*memAlloc)(CUdeviceptr *, size_t);
	CUresult (*memFree)(CUdeviceptr);
	CUresult (*memsetD32)(CUdeviceptr, unsigned int, size_t);
	CUresult (*memcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*memAllocHost)(void **, size_t);
	CUresult (*memFreeHost)(void *);
	CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*launchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*getErrorName)(CUresult, const char **);
	CUresult (*getErrorString)(CUresult, const char **);
} cu;

// gpuload_open loads the driver library and resolves every entry point.
// It returns 0, 1 (dlopen failed; *detail is dlerror's text) or 2 (a
// symbol is missing; *detail is its name).
static int gpuload_open(const char *path, const char **detail) {
	cu.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (cu.lib == NULL) {
		*detail = dlerror();
		return 1;
	}
#define GPULOAD_SYM(field, name) do { \
		*(void **)(&cu.field) = dlsym(cu.lib, name); \
		if (cu.field == NULL) { *detail = name; return 2; } \
	} while (0)
	GPULOAD_SYM(init, "cuInit");
	GPULOAD_SYM(driverGetVersion, "cuDriverGetVersion");
	GPULOAD_SYM(deviceGetCount, "cuDeviceGetCount");
	GPULOAD_SYM(deviceGet, "cuDeviceGet");
	GPULOAD_SYM(deviceGetName, "cuDeviceGetName");
	GPULOAD_SYM(deviceGetAttribute, "cuDeviceGetAttribute");
	GPULOAD_SYM(deviceGetPCIBusId, "cuDeviceGetPCIBusId");
	GPULOAD_SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
	GPULOAD_SYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	GPULOAD_SYM(ctxSetCurrent, "cuCtxSetCurrent");
	GPULOAD_SYM(ctxSynchronize, "cuCtxSynchronize");
	GPULOAD_SYM(moduleLoadDataEx, "cuModuleLoadDataEx");
	GPULOAD_SYM(moduleUnload, "cuModuleUnload");
	GPULOAD_SYM(moduleGetFunction, "cuModuleGetFunction");
	GPULOAD_SYM(memAlloc, "cuMemAlloc_v2");
	GPULOAD_SYM(memFree, "cuMemFree_v2");
	GPULOAD_SYM(memsetD32, "cuMemsetD32_v2");
	GPULOAD_SYM(memcpyDtoD, "cuMemcpyDtoD_v2");
	GPULOAD_SYM(memAllocHost, "cuMemAllocHost_v2");
	GPULOAD_SYM(memFreeHost, "cuMemFreeHost");
	GPULOAD_SYM(memcpyHtoD, "cuMemcpyHtoD_v2");
	GPULOAD_SYM(memcpyDtoH, "cuMemcpyDtoH_v2");
	GPULOAD_SYM(launchKernel, "cuLaunchKernel");
	GPULOAD_SYM(getErrorName, "cuGetErrorName");
	GPULOAD_SYM(getErrorString, "cuGetErrorString");
#undef GPULOAD_SYM
	return 0;
}

// cgo cannot call through function pointers: one wrapper per call.
static CUresult gpuload_init(void) { return cu.init(0); }
static CUresult gpuload_driver_version(int *v) { return cu.driverGetVersion(v); }
static CUresult gpuload_device_count(int *n) { return cu.deviceGetCount(n); }
static CUresult gpuload_device_get(CUdevice *d, int ordinal) { return cu.deviceGet(d, ordinal); }
static CUresult gpuload_device_name(char *buf, int n, CUdevice d) { return cu.deviceGetName(buf, n, d); }
static CUresult gpuload_device_attribute(int *v, int attr, CUdevice d) { return cu.deviceGetAttribute(v, attr, d); }
static CUresult gpuload_device_bus_id(char *buf, int n, CUdevice d) { return cu.deviceGetPCIBusId(buf, n, d); }
static CUresult gpuload_ctx_retain(CUcontext *c, CUdevice d) { return cu.primaryCtxRetain(c, d); }
static CUresult gpuload_ctx_release(CUdevice d) { return cu.primaryCtxRelease(d); }
static CUresult gpuload_ctx_set(CUcontext c) { return cu.ctxSetCurrent(c); }
static CUresult gpuload_sync(void) { return cu.ctxSynchronize(); }
static CUresult gpuload_module_unload(CUmodule m) { return cu.moduleUnload(m); }
static CUresult gpuload_function(CUfunction *f, CUmodule m, const char *name) { return cu.moduleGetFunction(f, m, name); }
static CUresult gpuload_alloc(CUdeviceptr *p, size_t n) { return cu.memAlloc(p, n); }
static CUresult gpuload_free(CUdeviceptr p) { return cu.memFree(p); }
static CUresult gpuload_memset(CUdeviceptr p, unsigned int v, size_t n) { return cu.memsetD32(p, v, n); }
static CUresult gpuload_copy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cu.memcpyDtoD(dst, src, n); }
static CUresult gpuload_alloc_host(void **p, size_t n) { return cu.memAllocHost(p, n); }
static CUresult gpuload_free_host(void *p) { return cu.memFreeHost(p); }
static CUresult gpuload_copy_htod(CUdeviceptr dst, void *src, size_t n) { return cu.memcpyHtoD(dst, src, n); }
static CUresult gpuload_copy_dtoh(void *dst, CUdeviceptr src, size_t n) { return cu.memcpyDtoH(dst, src, n); }

// gpuload_load_ptx JIT-compiles PTX text, with the compiler's error log.
static CUresult gpuload_load_ptx(CUmodule *m, const char *ptx, char *log, size_t logSize) {
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)logSize};
	return cu.moduleLoadDataEx(m, ptx, 2, opts, vals);
}

// gpuload_launch_loop launches fma_loop or mma_loop (out, iters) on a 1-D grid.
static CUresult gpuload_launch_loop(CUfunction f, unsigned int grid, unsigned int block, CUdeviceptr out, unsigned int iters) {
	void *params[2] = {&out, &iters};
	return cu.launchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
}

// gpuload_launch_fault launches fault_store(addr) on one thread.
static CUresult gpuload_launch_fault(CUfunction f, CUdeviceptr addr) {
	void *params[1] = {&addr};
	return cu.launchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

static const char *gpuload_error_name(CUresult r) {
	const char *s = NULL;
	if (cu.getErrorName == NULL || cu.getErrorName(r, &s) != 0 || s == NULL) return "CUDA_ERROR_?";
	return s;
}

static const char *gpuload_error_string(CUresult r) {
	const char *s = NULL;
	if (cu.getErrorString == NULL || cu.getErrorString(r, &s) != 0 || s == NULL) return "unknown error";
	return s;
}
*/
import "C"

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// fmaPTX is the FMA kernel: every thread runs iters rounds of eight
// independent fused multiply-adds (x = x*0.9999 + 1e-4, which stays finite)
// and stores their sum, so the compiler keeps the loop. PTX ISA 6.0 for
// sm_50 runs on every GPU since Maxwell and every driver since R396; the
// driver compiles it for the GPU at hand. Made by LLVM's NVPTX back end from
// a ten-line kernel and tidied.
const fmaPTX = `
.version 6.0
.target sm_50
.address_size 64

.visible .entry fma_loop(
	.param .u64 out,
	.param .u32 iters
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<10>;
	.reg .f32 	%f<40>;
	.reg .b64 	%rd<4>;

	ld.param.u32 	%r4, [iters];
	ld.param.u64 	%rd1, [out];
	mov.u32 	%r6, %tid.x;
	mov.u32 	%r7, %ctaid.x;
	mov.u32 	%r8, %ntid.x;
	mad.lo.s32 	%r1, %r7, %r8, %r6;
	cvt.rn.f32.u32 	%f32, %r1;
	add.rn.f32 	%f33, %f32, 0f3F800000;
	add.rn.f32 	%f34, %f32, 0f40000000;
	add.rn.f32 	%f35, %f32, 0f40400000;
	add.rn.f32 	%f36, %f32, 0f40800000;
	add.rn.f32 	%f37, %f32, 0f40A00000;
	add.rn.f32 	%f38, %f32, 0f40C00000;
	add.rn.f32 	%f39, %f32, 0f40E00000;
	mov.u32 	%r9, 0;
LOOP:
	fma.rn.f32 	%f32, %f32, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f33, %f33, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f34, %f34, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f35, %f35, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f36, %f36, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f37, %f37, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f38, %f38, 0f3F7FF972, 0f38D1B717;
	fma.rn.f32 	%f39, %f39, 0f3F7FF972, 0f38D1B717;
	add.s32 	%r9, %r9, 1;
	setp.lt.u32 	%p1, %r9, %r4;
	@%p1 bra 	LOOP;
	add.rn.f32 	%f25, %f32, %f33;
	add.rn.f32 	%f26, %f25, %f34;
	add.rn.f32 	%f27, %f26, %f35;
	add.rn.f32 	%f28, %f27, %f36;
	add.rn.f32 	%f29, %f28, %f37;
	add.rn.f32 	%f30, %f29, %f38;
	add.rn.f32 	%f31, %f30, %f39;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.f32 	[%rd3], %f31;
	ret;
}
`

// mmaPTX is the tensor-core kernel: every warp runs iters rounds of four
// independent bf16 mma.sync m16n8k16 (f32 accumulate) on register operands,
// so that the tensor pipe is busy and device memory is not, and stores the
// accumulators' sum. PTX ISA 7.0 for sm_80 (mma.sync with bf16 needs
// Ampere or later). Made by LLVM's NVPTX back end (llc -mcpu=sm_80
// -mattr=+ptx70) from the llvm.nvvm.mma.m16n8k16.row.col.bf16 intrinsic
// and tidied.
const mmaPTX = `
.version 7.0
.target sm_80
.address_size 64

.visible .entry mma_loop(
	.param .u64 out,
	.param .u32 iters
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<13>;
	.reg .f32 	%f<65>;
	.reg .b64 	%rd<4>;

	ld.param.u32 	%r6, [iters];
	ld.param.u64 	%rd1, [out];
	mov.u32 	%r8, %tid.x;
	mov.u32 	%r9, %ctaid.x;
	mov.u32 	%r10, %ntid.x;
	mad.lo.s32 	%r1, %r9, %r10, %r8;
	and.b32  	%r11, %r8, 1;
	or.b32  	%r2, %r11, 1006648320;
	or.b32  	%r3, %r11, 1006713856;
	mov.f32 	%f49, 0f00000000;
	mov.b32 	%r12, 0;
	mov.f32 	%f50, %f49;
	mov.f32 	%f51, %f49;
	mov.f32 	%f52, %f49;
	mov.f32 	%f53, %f49;
	mov.f32 	%f54, %f49;
	mov.f32 	%f55, %f49;
	mov.f32 	%f56, %f49;
	mov.f32 	%f57, %f49;
	mov.f32 	%f58, %f49;
	mov.f32 	%f59, %f49;
	mov.f32 	%f60, %f49;
	mov.f32 	%f61, %f49;
	mov.f32 	%f62, %f49;
	mov.f32 	%f63, %f49;
	mov.f32 	%f64, %f49;
LOOP:
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f49, %f50, %f51, %f52}, {%r2, %r3, %r2, %r3}, {%r3, %r2}, {%f49, %f50, %f51, %f52};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f53, %f54, %f55, %f56}, {%r3, %r2, %r3, %r2}, {%r2, %r3}, {%f53, %f54, %f55, %f56};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f57, %f58, %f59, %f60}, {%r2, %r2, %r3, %r3}, {%r3, %r3}, {%f57, %f58, %f59, %f60};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
		{%f61, %f62, %f63, %f64}, {%r3, %r3, %r2, %r2}, {%r2, %r2}, {%f61, %f62, %f63, %f64};
	add.s32 	%r12, %r12, 1;
	setp.lt.u32 	%p1, %r12, %r6;
	@%p1 bra 	LOOP;
	add.rn.f32 	%f34, %f49, %f50;
	add.rn.f32 	%f35, %f34, %f51;
	add.rn.f32 	%f36, %f35, %f52;
	add.rn.f32 	%f37, %f36, %f53;
	add.rn.f32 	%f38, %f37, %f54;
	add.rn.f32 	%f39, %f38, %f55;
	add.rn.f32 	%f40, %f39, %f56;
	add.rn.f32 	%f41, %f40, %f57;
	add.rn.f32 	%f42, %f41, %f58;
	add.rn.f32 	%f43, %f42, %f59;
	add.rn.f32 	%f44, %f43, %f60;
	add.rn.f32 	%f45, %f44, %f61;
	add.rn.f32 	%f46, %f45, %f62;
	add.rn.f32 	%f47, %f46, %f63;
	add.rn.f32 	%f48, %f47, %f64;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.f32 	[%rd3], %f48;
	ret;
}
`

// faultPTX stores to the address it is given: with an unmapped address the
// GPU's MMU faults, the driver raises an XID and kills the context.
// Made by LLVM's NVPTX back end from a volatile store.
const faultPTX = `
.version 6.0
.target sm_50
.address_size 64

.visible .entry fault_store(
	.param .u64 addr
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<2>;

	ld.param.u64 	%rd1, [addr];
	mov.b32 	%r1, 1;
	st.volatile.global.u32 	[%rd1], %r1;
	ret;
}
`

// kernel is one of the looping kernels, fma_loop or mma_loop, both
// (float *out, unsigned iters).
type kernel struct {
	entry, ptx  string
	blocksPerSM int
	ccMajor     int     // the least compute capability (major) it runs on
	flopsPerIt  float64 // per thread and iteration
	unit        string  // what flopsPerIt counts, for the done line
}

var (
	fmaKernel = kernel{entry: "fma_loop", ptx: fmaPTX, blocksPerSM: 8, ccMajor: 5, flopsPerIt: 2 * 8, unit: "fp32_tflops"}
	// mma: 4 blocks of 256 threads per SM, 32 warps with four independent
	// accumulator chains each, fits the register file whatever registers
	// the JIT gives the thread; each warp-level m16n8k16 is 4096 flops, a
	// thread's share of one iteration's four 4096*4/32.
	mmaKernel = kernel{entry: "mma_loop", ptx: mmaPTX, blocksPerSM: 4, ccMajor: 8, flopsPerIt: 4 * 4096 / 32, unit: "bf16_tflops"}
)

const (
	attrMultiprocessorCount = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor             = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor             = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	loopBlock               = 256
	loopLaunchTarget        = 100 * time.Millisecond
	// faultAddress is where the xid mode stores: the null page, which
	// neither the device nor (with HMM) the host ever maps.
	faultAddress = 0
)

func cuErr(what string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s (%d): %s", what, C.GoString(C.gpuload_error_name(r)), int(r), C.GoString(C.gpuload_error_string(r)))
}

func openDriver(lib string) error {
	cpath := C.CString(lib)
	defer C.free(unsafe.Pointer(cpath))
	var detail *C.char
	switch C.gpuload_open(cpath, &detail) {
	case 0:
		return nil
	case 1:
		d := C.GoString(detail)
		return &driverError{lib: lib, detail: d, notFound: strings.Contains(d, "No such file or directory")}
	default:
		return &driverError{lib: lib, detail: "it lacks " + C.GoString(detail) + " (driver too old?)"}
	}
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	// A CUDA context is current per OS thread: keep every call on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := openDriver(o.lib); err != nil {
		return err
	}
	if err := cuErr("cuInit", C.gpuload_init()); err != nil {
		return err
	}
	var version, count C.int
	if err := cuErr("cuDriverGetVersion", C.gpuload_driver_version(&version)); err != nil {
		return err
	}
	if err := cuErr("cuDeviceGetCount", C.gpuload_device_count(&count)); err != nil {
		return err
	}
	if o.device >= int(count) {
		return fmt.Errorf("device %d: the driver lists %d CUDA devices", o.device, int(count))
	}
	var dev C.CUdevice
	if err := cuErr("cuDeviceGet", C.gpuload_device_get(&dev, C.int(o.device))); err != nil {
		return err
	}
	var nameBuf, busBuf [128]C.char
	if err := cuErr("cuDeviceGetName", C.gpuload_device_name(&nameBuf[0], C.int(len(nameBuf)), dev)); err != nil {
		return err
	}
	if err := cuErr("cuDeviceGetPCIBusId", C.gpuload_device_bus_id(&busBuf[0], C.int(len(busBuf)), dev)); err != nil {
		return err
	}
	var sms, ccMajor, ccMinor C.int
	for _, a := range []struct {
		v    *C.int
		attr C.int
		name string
	}{{&sms, attrMultiprocessorCount, "MULTIPROCESSOR_COUNT"}, {&ccMajor, attrCCMajor, "COMPUTE_CAPABILITY_MAJOR"}, {&ccMinor, attrCCMinor, "COMPUTE_CAPABILITY_MINOR"}} {
		if err := cuErr("cuDeviceGetAttribute("+a.name+")", C.gpuload_device_attribute(a.v, a.attr, dev)); err != nil {
			return err
		}
	}
	d := device{
		name: C.GoString(&nameBuf[0]), busID: C.GoString(&busBuf[0]), sms: int(sms),
		driver: fmt.Sprintf("%d.%d", int(version)/1000, int(version)%1000/10),
		cc:     [2]int{int(ccMajor), int(ccMinor)},
	}
	if o.mode == modeMMA && d.cc[0] < mmaKernel.ccMajor {
		return fmt.Errorf("-mode mma needs compute capability %d.0 or later (bf16 mma.sync); device %d (%s) has %d.%d", mmaKernel.ccMajor, o.device, d.name, d.cc[0], d.cc[1])
	}
	var cctx C.CUcontext
	if err := cuErr("cuDevicePrimaryCtxRetain", C.gpuload_ctx_retain(&cctx, dev)); err != nil {
		return err
	}
	defer C.gpuload_ctx_release(dev)
	if err := cuErr("cuCtxSetCurrent", C.gpuload_ctx_set(cctx)); err != nil {
		return err
	}
	switch o.mode {
	case modeFMA:
		return runLoop(ctx, o, d, fmaKernel, stdout)
	case modeMMA:
		return runLoop(ctx, o, d, mmaKernel, stdout)
	case modeDuty:
		return runLoop(ctx, o, d, fmaKernel, stdout)
	case modeCopy:
		return runCopy(ctx, o, d, stdout)
	case modeH2D, modeD2H:
		return runHostCopy(ctx, o, d, stdout)
	case modeXID:
		return runXID(o, d, stdout)
	default:
		return runAlloc(ctx, o, d, stdout)
	}
}

type device struct {
	name, busID, driver string
	sms                 int
	cc                  [2]int
}

func ready(w io.Writer, o options, d device, extra string) {
	fmt.Fprintf(w, "gpuload: ready pid=%d mode=%s device=%d bus_id=%s name=%q sms=%d cc=%d.%d cuda_driver_api=%s %s\n",
		os.Getpid(), o.mode, o.device, d.busID, d.name, d.sms, d.cc[0], d.cc[1], d.driver, extra)
}

// rater prints a "gpuload: rate" line about once a second with what was
// added since the previous one, divided by the time since: bytes per
// second, or the fraction of time busy.
type rater struct {
	w          io.Writer
	mode, unit string
	format     string
	since      time.Time
	sum        float64
}

func newRater(w io.Writer, mode, unit, format string) *rater {
	return &rater{w: w, mode: mode, unit: unit, format: format, since: time.Now()}
}

func (r *rater) add(x float64) {
	r.sum += x
	now := time.Now()
	if el := now.Sub(r.since); el >= time.Second {
		fmt.Fprintf(r.w, "gpuload: rate t=%.3f mode=%s %s="+r.format+"\n", float64(now.UnixNano())/1e9, r.mode, r.unit, r.sum/el.Seconds())
		r.since, r.sum = now, 0
	}
}

func alloc(n uint64) (C.CUdeviceptr, error) {
	var p C.CUdeviceptr
	if err := cuErr(fmt.Sprintf("cuMemAlloc(%d)", n), C.gpuload_alloc(&p, C.size_t(n))); err != nil {
		return 0, err
	}
	return p, nil
}

// loadFunction JIT-compiles ptx and returns its entry; unload frees the
// module.
func loadFunction(ptx, entry string) (fn C.CUfunction, unload func(), err error) {
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	var log [8192]C.char
	var mod C.CUmodule
	if err := cuErr("cuModuleLoadDataEx("+entry+" PTX)", C.gpuload_load_ptx(&mod, cptx, &log[0], C.size_t(len(log)))); err != nil {
		return nil, nil, fmt.Errorf("%w; JIT log: %s", err, C.GoString(&log[0]))
	}
	cname := C.CString(entry)
	defer C.free(unsafe.Pointer(cname))
	if err := cuErr("cuModuleGetFunction("+entry+")", C.gpuload_function(&fn, mod, cname)); err != nil {
		C.gpuload_module_unload(mod)
		return nil, nil, err
	}
	return fn, func() { C.gpuload_module_unload(mod) }, nil
}

// runLoop launches k back to back (fma, mma) or in bursts of o.on with
// o.off idle between them (duty), each launch sized to about 100 ms (fma,
// mma: a stop is quick and the launch gaps negligible) or to o.on (duty).
func runLoop(ctx context.Context, o options, d device, k kernel, stdout io.Writer) error {
	fn, unload, err := loadFunction(k.ptx, k.entry)
	if err != nil {
		return err
	}
	defer unload()
	grid := uint64(max(d.sms, 1) * k.blocksPerSM)
	out, err := alloc(grid * loopBlock * 4)
	if err != nil {
		return err
	}
	defer C.gpuload_free(out)
	launch := func(iters uint32) (time.Duration, error) {
		start := time.Now()
		if err := cuErr("cuLaunchKernel("+k.entry+")", C.gpuload_launch_loop(fn, C.uint(grid), loopBlock, out, C.uint(iters))); err != nil {
			return 0, err
		}
		if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	target, off := loopLaunchTarget, time.Duration(0)
	if o.mode == modeDuty {
		target, off = o.on, o.off
	}
	iters := uint32(1 << 14)
	took, err := launch(iters)
	if err != nil {
		return err
	}
	// Twice: the first launch includes the clocks' ramp from idle.
	for range 2 {
		iters = uint32(min(max(float64(iters)*float64(target)/float64(max(took, time.Microsecond)), 1<<8), 1<<30))
		if took, err = launch(iters); err != nil {
			return err
		}
	}
	extra := fmt.Sprintf("kernel=%s grid=%d block=%d iters=%d launch_ms=%.1f", k.entry, grid, loopBlock, iters, took.Seconds()*1000)
	if o.mode == modeDuty {
		extra += fmt.Sprintf(" on=%s off=%s", o.on, o.off)
	}
	ready(stdout, o, d, extra)
	var busy *rater
	if o.mode == modeDuty {
		busy = newRater(stdout, o.mode, "busy", "%.3f")
	}
	start, launches, busyTotal := time.Now(), 0, time.Duration(0)
	for ctx.Err() == nil {
		took, err := launch(iters)
		if err != nil {
			return err
		}
		launches++
		busyTotal += took
		if busy != nil {
			busy.add(took.Seconds())
		}
		if off > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(off):
			}
			if busy != nil {
				busy.add(0)
			}
		}
	}
	el := time.Since(start)
	flops := k.flopsPerIt * float64(grid*loopBlock) * float64(iters) * float64(launches)
	fmt.Fprintf(stdout, "gpuload: done mode=%s launches=%d seconds=%.1f busy=%.3f %s=%.1f\n", o.mode, launches, el.Seconds(), busyTotal.Seconds()/el.Seconds(), k.unit, flops/el.Seconds()/1e12)
	return nil
}

func runCopy(ctx context.Context, o options, d device, stdout io.Writer) error {
	half := o.bytes / 2 &^ 3
	a, err := alloc(half)
	if err != nil {
		return err
	}
	defer C.gpuload_free(a)
	b, err := alloc(half)
	if err != nil {
		return err
	}
	defer C.gpuload_free(b)
	if err := cuErr("cuMemsetD32", C.gpuload_memset(a, 0x3f800000, C.size_t(half/4))); err != nil {
		return err
	}
	if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
		return err
	}
	ready(stdout, o, d, fmt.Sprintf("buffer_bytes=%d", half))
	rate := newRater(stdout, o.mode, "bytes_per_s", "%.0f")
	start, copies := time.Now(), 0
	for ctx.Err() == nil {
		for range 8 {
			if err := cuErr("cuMemcpyDtoD", C.gpuload_copy(b, a, C.size_t(half))); err != nil {
				return err
			}
			a, b = b, a
			copies++
		}
		if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
			return err
		}
		// Each copy reads and writes half bytes.
		rate.add(8 * 2 * float64(half))
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "gpuload: done mode=copy copies=%d seconds=%.1f read_write_gb_per_s=%.0f\n", copies, el.Seconds(), 2*float64(half)*float64(copies)/el.Seconds()/1e9)
	return nil
}

// runHostCopy copies between a pinned host buffer and a device buffer of
// o.bytes each, host to device (h2d) or device to host (d2h). Copies from
// and to pinned memory are DMA at the link's rate, and synchronous.
func runHostCopy(ctx context.Context, o options, d device, stdout io.Writer) error {
	n := o.bytes &^ 3
	var host unsafe.Pointer
	if err := cuErr(fmt.Sprintf("cuMemAllocHost(%d)", n), C.gpuload_alloc_host(&host, C.size_t(n))); err != nil {
		return err
	}
	defer C.gpuload_free_host(host)
	dev, err := alloc(n)
	if err != nil {
		return err
	}
	defer C.gpuload_free(dev)
	// The device side written once, the host side by the first d2h copy or
	// left as pinned (zeroed) pages: the data do not matter.
	if err := cuErr("cuMemsetD32", C.gpuload_memset(dev, 0, C.size_t(n/4))); err != nil {
		return err
	}
	if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
		return err
	}
	ready(stdout, o, d, fmt.Sprintf("buffer_bytes=%d pinned=true", n))
	copyOnce := func() error {
		if o.mode == modeH2D {
			return cuErr("cuMemcpyHtoD", C.gpuload_copy_htod(dev, host, C.size_t(n)))
		}
		return cuErr("cuMemcpyDtoH", C.gpuload_copy_dtoh(host, dev, C.size_t(n)))
	}
	rate := newRater(stdout, o.mode, "bytes_per_s", "%.0f")
	start, copies := time.Now(), 0
	for ctx.Err() == nil {
		if err := copyOnce(); err != nil {
			return err
		}
		copies++
		rate.add(float64(n))
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "gpuload: done mode=%s copies=%d seconds=%.1f bytes_per_s=%.0f\n", o.mode, copies, el.Seconds(), float64(n)*float64(copies)/el.Seconds())
	return nil
}

func runAlloc(ctx context.Context, o options, d device, stdout io.Writer) error {
	p, err := alloc(o.bytes &^ 3)
	if err != nil {
		return err
	}
	defer C.gpuload_free(p)
	// Written once, so that the memory is resident whatever the driver's policy.
	if err := cuErr("cuMemsetD32", C.gpuload_memset(p, 0, C.size_t(o.bytes/4))); err != nil {
		return err
	}
	if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
		return err
	}
	ready(stdout, o, d, fmt.Sprintf("bytes=%d", o.bytes&^3))
	start := time.Now()
	<-ctx.Done()
	fmt.Fprintf(stdout, "gpuload: done mode=alloc bytes=%d seconds=%.1f\n", o.bytes&^3, time.Since(start).Seconds())
	return nil
}

// runXID launches one thread that stores to faultAddress and waits for it:
// the launch succeeds, the synchronisation must report the fault. The
// context is unusable afterwards; releasing it is all that is left.
func runXID(o options, d device, stdout io.Writer) error {
	fn, unload, err := loadFunction(faultPTX, "fault_store")
	if err != nil {
		return err
	}
	defer unload()
	ready(stdout, o, d, fmt.Sprintf("fault_address=%#x", faultAddress))
	start := time.Now()
	if err := cuErr("cuLaunchKernel(fault_store)", C.gpuload_launch_fault(fn, faultAddress)); err != nil {
		return err
	}
	r := C.gpuload_sync()
	if r == 0 {
		return fmt.Errorf("the store to %#x did not fault: cuCtxSynchronize succeeded, so no XID was raised", faultAddress)
	}
	fmt.Fprintf(stdout, "gpuload: done mode=xid fault_address=%#x seconds=%.3f error=%s (%d)\n", faultAddress, time.Since(start).Seconds(), C.GoString(C.gpuload_error_name(r)), int(r))
	return nil
}
