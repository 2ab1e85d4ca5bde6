// A stand-in for the NVIDIA driver's libcuda.so.1, for gpuload's tests on
// machines without a GPU: one device with 4 SMs, kernels that take 2 ms,
// and every call logged to $FAKECUDA_LOG. $FAKECUDA_INIT_ERROR makes cuInit
// fail with that code. Built with -DFAKECUDA_NO_LAUNCH it lacks
// cuLaunchKernel, like a driver too old for gpuload.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static void logf_(const char *fmt, unsigned long long a, unsigned long long b, unsigned long long c) {
	const char *path = getenv("FAKECUDA_LOG");
	if (path == NULL) return;
	FILE *f = fopen(path, "a");
	if (f == NULL) return;
	fprintf(f, fmt, a, b, c);
	fputc('\n', f);
	fclose(f);
}

static int inited;
static CUdeviceptr next = 0x7f0000000000ULL;

CUresult cuInit(unsigned int flags) {
	const char *e = getenv("FAKECUDA_INIT_ERROR");
	logf_("cuInit flags=%llu", flags, 0, 0);
	if (e != NULL) return atoi(e);
	inited = 1;
	return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = inited ? 1 : 0; return inited ? 0 : 3; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *buf, int n, int d) { snprintf(buf, n, "Fake GPU"); return 0; }
CUresult cuDeviceGetPCIBusId(char *buf, int n, int d) { snprintf(buf, n, "0000:18:00.0"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 16 ? 4 : 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x1; logf_("ctx retain device=%llu", d, 0, 0); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { logf_("ctx release device=%llu", d, 0, 0); return 0; }
CUresult cuCtxSetCurrent(void *c) { return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, int *opts, void **vals) {
	if (strstr((const char *)image, ".entry fma_loop(") == NULL) {
		if (n >= 2 && opts[0] == 5) snprintf((char *)vals[0], (size_t)vals[1], "fake: no fma_loop entry");
		return 218; // CUDA_ERROR_INVALID_PTX
	}
	*m = (void *)0x2;
	logf_("module load bytes=%llu", strlen((const char *)image), 0, 0);
	return 0;
}
CUresult cuModuleUnload(void *m) { logf_("module unload", 0, 0, 0); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	if (strcmp(name, "fma_loop") != 0) return 500; // CUDA_ERROR_NOT_FOUND
	*f = (void *)0x3;
	return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = next; next += n; logf_("alloc bytes=%llu", n, 0, 0); return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { logf_("free", 0, 0, 0); return 0; }
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n) { logf_("memset words=%llu", n, 0, 0); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { usleep(250); logf_("copy bytes=%llu", n, 0, 0); return 0; }
#ifndef FAKECUDA_NO_LAUNCH
CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
		unsigned int bz, unsigned int shmem, void *stream, void **params, void **extra) {
	unsigned int iters = *(unsigned int *)params[1];
	usleep(2000);
	logf_("launch grid=%llu block=%llu iters=%llu", gx, bx, iters);
	return 0;
}
#endif
CUresult cuGetErrorName(CUresult r, const char **s) {
	switch (r) {
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0;
	}
	return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	if (r == 100) { *s = "no CUDA-capable device is detected"; return 0; }
	return 1;
}
