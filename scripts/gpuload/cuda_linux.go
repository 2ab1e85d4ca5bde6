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

// gpuload_load_ptx JIT-compiles PTX text, with the compiler's error log.
static CUresult gpuload_load_ptx(CUmodule *m, const char *ptx, char *log, size_t logSize) {
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)logSize};
	return cu.moduleLoadDataEx(m, ptx, 2, opts, vals);
}

// gpuload_launch_fma launches fma_loop(out, iters) on a 1-D grid.
static CUresult gpuload_launch_fma(CUfunction f, unsigned int grid, unsigned int block, CUdeviceptr out, unsigned int iters) {
	void *params[2] = {&out, &iters};
	return cu.launchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
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

const (
	attrMultiprocessorCount = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	fmaBlock                = 256
	fmaBlocksPerSM          = 8 // 2048 threads: a full SM on every GPU since Maxwell
	fmaLaunchTarget         = 100 * time.Millisecond
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
	var sms C.int
	if err := cuErr("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", C.gpuload_device_attribute(&sms, attrMultiprocessorCount, dev)); err != nil {
		return err
	}
	var cctx C.CUcontext
	if err := cuErr("cuDevicePrimaryCtxRetain", C.gpuload_ctx_retain(&cctx, dev)); err != nil {
		return err
	}
	defer C.gpuload_ctx_release(dev)
	if err := cuErr("cuCtxSetCurrent", C.gpuload_ctx_set(cctx)); err != nil {
		return err
	}
	d := device{
		name: C.GoString(&nameBuf[0]), busID: C.GoString(&busBuf[0]), sms: int(sms),
		driver: fmt.Sprintf("%d.%d", int(version)/1000, int(version)%1000/10),
	}
	switch o.mode {
	case modeFMA:
		return runFMA(ctx, o, d, stdout)
	case modeCopy:
		return runCopy(ctx, o, d, stdout)
	default:
		return runAlloc(ctx, o, d, stdout)
	}
}

type device struct {
	name, busID, driver string
	sms                 int
}

func ready(w io.Writer, o options, d device, extra string) {
	fmt.Fprintf(w, "gpuload: ready pid=%d mode=%s device=%d bus_id=%s name=%q sms=%d cuda_driver_api=%s %s\n",
		os.Getpid(), o.mode, o.device, d.busID, d.name, d.sms, d.driver, extra)
}

func alloc(n uint64) (C.CUdeviceptr, error) {
	var p C.CUdeviceptr
	if err := cuErr(fmt.Sprintf("cuMemAlloc(%d)", n), C.gpuload_alloc(&p, C.size_t(n))); err != nil {
		return 0, err
	}
	return p, nil
}

func runFMA(ctx context.Context, o options, d device, stdout io.Writer) error {
	ptx := C.CString(fmaPTX)
	defer C.free(unsafe.Pointer(ptx))
	var log [8192]C.char
	var mod C.CUmodule
	if err := cuErr("cuModuleLoadDataEx(fma PTX)", C.gpuload_load_ptx(&mod, ptx, &log[0], C.size_t(len(log)))); err != nil {
		return fmt.Errorf("%w; JIT log: %s", err, C.GoString(&log[0]))
	}
	defer C.gpuload_module_unload(mod)
	fname := C.CString("fma_loop")
	defer C.free(unsafe.Pointer(fname))
	var fn C.CUfunction
	if err := cuErr("cuModuleGetFunction(fma_loop)", C.gpuload_function(&fn, mod, fname)); err != nil {
		return err
	}
	grid := uint64(max(d.sms, 1) * fmaBlocksPerSM)
	out, err := alloc(grid * fmaBlock * 4)
	if err != nil {
		return err
	}
	defer C.gpuload_free(out)
	launch := func(iters uint32) (time.Duration, error) {
		start := time.Now()
		if err := cuErr("cuLaunchKernel(fma_loop)", C.gpuload_launch_fma(fn, C.uint(grid), fmaBlock, out, C.uint(iters))); err != nil {
			return 0, err
		}
		if err := cuErr("cuCtxSynchronize", C.gpuload_sync()); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	// Size one launch to about 100 ms, so that a stop is quick and the
	// launch gaps are negligible.
	iters := uint32(1 << 14)
	took, err := launch(iters)
	if err != nil {
		return err
	}
	iters = uint32(min(max(float64(iters)*float64(fmaLaunchTarget)/float64(max(took, time.Microsecond)), 1<<10), 1<<30))
	ready(stdout, o, d, fmt.Sprintf("grid=%d block=%d iters=%d", grid, fmaBlock, iters))
	start, launches := time.Now(), 0
	for ctx.Err() == nil {
		if _, err := launch(iters); err != nil {
			return err
		}
		launches++
	}
	el := time.Since(start)
	flops := 2 * 8 * float64(grid*fmaBlock) * float64(iters) * float64(launches)
	fmt.Fprintf(stdout, "gpuload: done mode=fma launches=%d seconds=%.1f fp32_tflops=%.1f\n", launches, el.Seconds(), flops/el.Seconds()/1e12)
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
	}
	el := time.Since(start)
	// Each copy reads and writes half bytes.
	fmt.Fprintf(stdout, "gpuload: done mode=copy copies=%d seconds=%.1f read_write_gb_per_s=%.0f\n", copies, el.Seconds(), 2*float64(half)*float64(copies)/el.Seconds()/1e9)
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
