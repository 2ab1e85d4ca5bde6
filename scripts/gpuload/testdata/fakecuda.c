// A stand-in for the NVIDIA driver's libcuda.so.1, for gpuload's tests on
// machines without a GPU: one device with 4 SMs of compute capability
// $FAKECUDA_CC (default 9.0), kernels that take 2 ms, copies that take
// 250 us, and every call logged to $FAKECUDA_LOG. $FAKECUDA_INIT_ERROR
// makes cuInit fail with that code. A launch of fault_store makes the next
// cuCtxSynchronize fail with CUDA_ERROR_ILLEGAL_ADDRESS, unless
// $FAKECUDA_NO_FAULT is set. Built with -DFAKECUDA_NO_LAUNCH it lacks
// cuLaunchKernel, like a driver too old for gpuload.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

__attribute__((format(printf, 1, 2))) static void logf_(const char *fmt, ...) {
	const char *path = getenv("FAKECUDA_LOG");
	if (path == NULL) return;
	FILE *f = fopen(path, "a");
	if (f == NULL) return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

static int inited;
static CUdeviceptr next = 0x7f0000000000ULL;

CUresult cuInit(unsigned int flags) {
	const char *e = getenv("FAKECUDA_INIT_ERROR");
	logf_("cuInit flags=%u", flags);
	if (e != NULL) return atoi(e);
	inited = 1;
	return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = inited ? 1 : 0; return inited ? 0 : 3; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *buf, int n, int d) { snprintf(buf, n, "Fake GPU"); return 0; }
CUresult cuDeviceGetPCIBusId(char *buf, int n, int d) { snprintf(buf, n, "0000:18:00.0"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
	const char *cc = getenv("FAKECUDA_CC");
	int major = 9, minor = 0;
	if (cc != NULL) sscanf(cc, "%d.%d", &major, &minor);
	switch (attr) {
	case 16: *v = 4; break;     // MULTIPROCESSOR_COUNT
	case 75: *v = major; break; // COMPUTE_CAPABILITY_MAJOR
	case 76: *v = minor; break; // COMPUTE_CAPABILITY_MINOR
	default: *v = 0;
	}
	return 0;
}
// Handles point at these: a Go caller keeps them in pointer-typed
// variables, and the Go runtime rejects small integers there.
static char contextObj, moduleObj[3], functionObj[3];
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = &contextObj; logf_("ctx retain device=%d", d); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { logf_("ctx release device=%d", d); return 0; }
CUresult cuCtxSetCurrent(void *c) { return 0; }
static int faulted;
CUresult cuCtxSynchronize(void) {
	if (faulted) { faulted = 0; logf_("sync error=700"); return 700; }
	return 0;
}
// The kernels gpuload knows, by entry name; module and function handles
// point at the entry's index in moduleObj and functionObj.
static const char *entries[] = {"fma_loop", "mma_loop", "fault_store"};
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, int *opts, void **vals) {
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		char want[64];
		snprintf(want, sizeof want, ".entry %s(", entries[i]);
		if (strstr((const char *)image, want) != NULL) {
			*m = &moduleObj[i];
			logf_("module load bytes=%zu entry=%s", strlen((const char *)image), entries[i]);
			return 0;
		}
	}
	if (n >= 2 && opts[0] == 5) snprintf((char *)vals[0], (size_t)vals[1], "fake: no known entry");
	return 218; // CUDA_ERROR_INVALID_PTX
}
CUresult cuModuleUnload(void *m) { logf_("module unload"); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	size_t i = (size_t)((char *)m - moduleObj);
	if (i >= sizeof entries / sizeof entries[0] || strcmp(name, entries[i]) != 0) return 500; // CUDA_ERROR_NOT_FOUND
	*f = &functionObj[i];
	return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = next; next += n; logf_("alloc bytes=%zu", n); return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { logf_("free"); return 0; }
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n) { logf_("memset words=%zu", n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { usleep(250); logf_("copy bytes=%zu", n); return 0; }
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = calloc(1, n); logf_("alloc host bytes=%zu", n); return *p == NULL ? 2 : 0; }
CUresult cuMemFreeHost(void *p) { free(p); logf_("free host"); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { usleep(250); logf_("copy htod bytes=%zu", n); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { usleep(250); logf_("copy dtoh bytes=%zu", n); return 0; }
#ifndef FAKECUDA_NO_LAUNCH
CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
		unsigned int bz, unsigned int shmem, void *stream, void **params, void **extra) {
	size_t i = (size_t)((char *)f - functionObj);
	if (strcmp(entries[i], "fault_store") == 0) {
		logf_("launch fault_store address=%llu grid=%u block=%u", *(CUdeviceptr *)params[0], gx, bx);
		faulted = getenv("FAKECUDA_NO_FAULT") == NULL;
		return 0;
	}
	unsigned int iters = *(unsigned int *)params[1];
	usleep(2000);
	logf_("launch %s grid=%u block=%u iters=%u", entries[i], gx, bx, iters);
	return 0;
}
#endif
CUresult cuGetErrorName(CUresult r, const char **s) {
	switch (r) {
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0;
	case 700: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
	}
	return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	if (r == 100) { *s = "no CUDA-capable device is detected"; return 0; }
	if (r == 700) { *s = "an illegal memory access was encountered"; return 0; }
	return 1;
}
